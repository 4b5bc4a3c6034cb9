//! # mrc-fabric
//!
//! Everything in mrc that touches a network or a model of one: SRv6 headers ([`srv6`]),
//! IPv6/UDP packet building, pcap output, and (later) the simulator and the datapaths.
#![warn(missing_docs)]

pub mod packet;
pub mod pcap;
pub mod srv6;
