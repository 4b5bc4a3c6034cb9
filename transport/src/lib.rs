//! # mrc-transport
//!
//! The sans-IO core of mrc, a multipath reliable transport in the style of OCP MRC 1.0:
//! the wire format ([`wire`]), and (later) PSN/SACK/NACK state, paths named by entropy
//! values (EVs), connections, memory regions and completions.
//!
//! This crate never reads a clock, a socket or a global RNG: time (`now`, nanoseconds) and
//! randomness come from the caller, so every run is reproducible.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod wire;
