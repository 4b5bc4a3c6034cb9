//! # mrc-congestion
//!
//! Congestion controllers for mrc, one trait ([`Controller`]) and several implementations
//! (DCQCN, a Swift-style delay controller, NSCC). No I/O and no dependency on the other mrc
//! crates. Time is always passed in as `now_ns` (nanoseconds on the caller's clock, any
//! epoch, monotonic); controllers never read a clock.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod controller;
pub mod dcqcn;
mod error;
mod fixed;
mod rtt;

pub use controller::{AckSample, Controller, Metrics};
pub use dcqcn::{Dcqcn, DcqcnConfig};
pub use error::{ConfigError, ParseCcKindError};
pub use fixed::{FixedWindow, FixedWindowConfig};
