//! # mrc-fabric
//!
//! Everything in mrc that touches a network or a model of one:
//!
//! - [`srv6`]: the Segment Routing Header (RFC 8754) and uSID containers (RFC 9800);
//! - [`packet`]: Ethernet / IPv6 / optional SRH / UDP build and parse, lengths and checksum
//!   computed;
//! - [`pcap`]: pcap output (Ethernet link type) that tshark reads;
//! - [`sim`]: the deterministic packet-level fabric simulator and the spine-leaf designer;
//! - [`datapath`]: the burst interface ([`datapath::Datapath`]) that the UDP and the verbs
//!   datapaths implement and the engine drives;
//! - [`udp`]: the io_uring UDP datapath (one socket and source port per EV, GSO/GRO bursts,
//!   ECN through the traffic class, optional sticky SRH) and a fake in-memory datapath;
//! - [`engine`]: the engine thread that drives transport connections over a datapath, and
//!   the verbs-shaped embedding API (context, QPs, memory regions, TCP bootstrap, CQs);
//! - [`mem`]: zeroed region buffers advised onto transparent huge pages;
//! - [`verbs`]: the RDMA UD datapath; its pure parts (buffer pools, GRH, signalling,
//!   address exchange, EV to UDP source port) always, the device half with feature `verbs`;
//! - (later) the raw (pnet) datapath.
#![warn(missing_docs)]

pub mod datapath;
pub mod engine;
pub mod mem;
pub mod packet;
pub mod pcap;
pub mod sim;
pub mod srv6;
pub mod udp;
pub mod verbs;
