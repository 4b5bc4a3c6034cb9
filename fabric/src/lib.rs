//! # mrc-fabric
//!
//! Everything in mrc that touches a network or a model of one:
//!
//! - [`srv6`]: the Segment Routing Header (RFC 8754) and uSID containers (RFC 9800);
//! - [`packet`]: Ethernet / IPv6 / optional SRH / UDP build and parse, lengths and checksum
//!   computed;
//! - [`pcap`]: pcap output (Ethernet link type) that tshark reads;
//! - [`udp`]: the UDP datapath (io_uring) behind the burst [`udp::Datapath`] trait;
//! - [`verbs`]: the RDMA UD datapath; its pure parts (buffer pools, GRH, signalling,
//!   address exchange, EV to UDP source port) always, the device half with feature `verbs`;
//! - (later) the simulator and the other datapaths.
#![warn(missing_docs)]

pub mod engine;
pub mod packet;
pub mod pcap;
pub mod srv6;
pub mod udp;
pub mod verbs;
