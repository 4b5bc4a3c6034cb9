//! # mrc-fabric
//!
//! Everything in mrc that touches a real network (the simulator is `mrc-fabric-sim`, the frame
//! code both share `mrc-frame`):
//!
//! - [`srv6`] (from `mrc-frame`): the Segment Routing Header (RFC 8754) and uSID containers (RFC 9800);
//! - [`packet`] (from `mrc-frame`): Ethernet / IPv6 / optional SRH / UDP build and parse, lengths and checksum
//!   computed;
//! - [`pcap`] (from `mrc-frame`): pcap output (Ethernet link type) that tshark reads;
//! - [`datapath`]: the burst interface ([`datapath::Datapath`]) that the UDP and the verbs
//!   datapaths implement and the engine drives;
//! - [`udp`]: the io_uring UDP datapath (one socket and source port per EV, GSO/GRO bursts,
//!   ECN through the traffic class, optional sticky SRH) and a fake in-memory datapath;
//! - [`engine`]: the engine thread that drives transport connections over a datapath, and
//!   the verbs-shaped embedding API (context, QPs, memory regions, TCP bootstrap, CQs);
//! - [`mem`]: zeroed region buffers advised onto transparent huge pages;
//! - [`netns`]: sockets opened in another network namespace (a host of the namespace
//!   testbed);
//! - [`planes`]: one endpoint over one datapath per plane (a verbs device per NIC port);
//! - [`verbs`]: the RDMA UD datapath; its pure parts (buffer pools, GRH, signalling,
//!   address exchange, EV to UDP source port) always, the device half with feature `verbs`;
//! - (later) the raw (pnet) datapath.
#![warn(missing_docs)]

pub mod datapath;
pub mod engine;
pub mod mem;
pub mod netns;
pub mod planes;
pub use mrc_frame::{packet, pcap, srv6};
pub mod udp;
pub mod verbs;
