//! # mrc-frame
//!
//! The bytes of a frame on an mrc fabric, shared by the simulator (`mrc-fabric-sim`) and the
//! datapaths (`mrc-fabric`), which share nothing else:
//!
//! - [`srv6`]: the Segment Routing Header (RFC 8754) and uSID containers (RFC 9800);
//! - [`packet`]: Ethernet / IPv6 / optional SRH / UDP build and parse, lengths and checksum
//!   computed;
//! - [`pcap`]: pcap output (Ethernet link type) that tshark reads.
#![warn(missing_docs)]

pub mod packet;
pub mod pcap;
pub mod srv6;
