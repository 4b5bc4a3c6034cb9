//! # mrc-transport
//!
//! The sans-IO core of mrc, a multipath reliable transport in the style of OCP MRC 1.0:
//! the wire format ([`wire`]), 24-bit PSNs ([`psn`]), memory regions ([`region`]), the
//! receive window ([`recv`]), the sender state ([`send`]), RTT/RTO/RACK loss detection
//! ([`loss`]), paths named by entropy values ([`path`]), completions ([`completion`]) and
//! counters ([`stats`]), optional per-packet authentication ([`auth`]), and the
//! [`conn::Connection`] that ties them together.
//!
//! This crate never reads a clock, a socket or a global RNG: time (`now`, nanoseconds) and
//! randomness (a seed) come from the caller, so every run is reproducible.
//!
//! It is safe Rust except one small module, [`region::mem`]: application-owned memory
//! registered by pointer and length under the verbs contract (its docs state the
//! invariants; its tests run under Miri).
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod auth;
pub mod completion;
pub mod conn;
mod keyhash;
pub mod loss;
pub mod path;
pub mod psn;
pub mod recv;
pub mod region;
pub mod send;
pub mod stats;
pub mod wire;

pub use completion::{Completion, WcOpcode, WcStatus};
pub use conn::{
    ConfigError, ConnConfig, ConnState, Connection, DeregisterError, Ecn, PeerParams, PostError,
    Sge, Transmit,
};
pub use psn::Psn;
pub use region::{Access, MrKey, PayloadRef, RawMem, RegionTable, SharedMem};
