//! # mrc-fabric
//!
//! Everything in mrc that touches a network or a model of one:
//!
//! - [`srv6`]: the Segment Routing Header (RFC 8754) and uSID containers (RFC 9800);
//! - [`packet`]: Ethernet / IPv6 / optional SRH / UDP build and parse, lengths and checksum
//!   computed;
//! - [`pcap`]: pcap output (Ethernet link type) that tshark reads;
//! - [`sim`]: the deterministic packet-level fabric simulator and the spine-leaf designer;
//! - (later) the datapaths.
#![warn(missing_docs)]

pub mod packet;
pub mod pcap;
pub mod sim;
pub mod srv6;
