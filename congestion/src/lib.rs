//! # mrc-congestion
//!
//! Congestion controllers for mrc, one trait ([`Controller`]) and several implementations
//! (DCQCN, a Swift-style delay controller, NSCC). No I/O and no dependency on the other mrc
//! crates. Time is always passed in as `now_ns` (nanoseconds on the caller's clock, any
//! epoch, monotonic); controllers never read a clock.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod controller;
mod fixed;

pub use controller::{AckSample, Controller, Metrics};
pub use fixed::{FixedWindow, FixedWindowConfig};
