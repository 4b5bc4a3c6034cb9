//! The deterministic packet-level fabric simulator (DESIGN.md section 7).
//!
//! - [`design`](mod@design): the two-tier designer, spine-leaf or rail-optimized, with planes;
//! - [`wiring`]: which spine each leaf uplink goes to (the uplinks rotate over the spines);
//! - [`topo`]: nodes, ports, links, addresses, next-hop tables built from a design;
//! - [`event`]: the event queue, by time then scheduling order;
//! - [`link`]: rates, delays and exact serialisation;
//! - [`queue`]: output-queued switch ports (drop-tail, ECN, trimming) and their counters;
//! - [`buf`]: a frame as stored: rewritable headers beside a shared payload;
//! - [`frame`]: what switches read and rewrite in a frame (ECN, SRv6 End, uSID shift, trim);
//! - [`fault`]: scripted, seeded link faults;
//! - [`pfc`]: Priority-based Flow Control (IEEE 802.1Qbb): ingress accounting, PAUSE/XON;
//! - [`host`]: hosts running real transport endpoints, EV -> route, framing;
//! - [`stats`]: flow results and the reorder-vs-loss tracker;
//! - [`net`]: the [`Simulator`] and its event loop;
//! - `prefetch`: the cache prefetch hint the event loop uses.
//!
//! One seed reproduces a run exactly: randomness comes from one ChaCha8 stream seeded by
//! [`SimConfig::seed`], and events at the same nanosecond run in scheduling order.

pub mod buf;
pub mod design;
pub mod event;
pub mod fault;
pub mod frame;
pub mod host;
pub mod link;
pub mod net;
pub mod pfc;
mod prefetch;
pub mod queue;
pub mod stats;
pub mod topo;
pub mod wiring;

pub use design::{
    DesignError, DesignInput, FabricCounts, FabricDesign, Layout, NicPlace, Oversubscription,
    RailDesign, RailLeaf, SwitchPort, design,
};
pub use fault::{Fault, FaultKind, LinkSelector};
pub use host::Forwarding;
pub use link::LinkSpec;
pub use net::{FlowSpec, SimConfig, SimError, SimReport, Simulator, TransportSpec};
pub use pfc::{PfcConfig, PfcPortStats};
pub use queue::{EcnConfig, QueueConfig};
pub use topo::{SpineLeafSpec, Topology};
pub use wiring::UplinkWiring;
