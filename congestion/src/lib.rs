//! # mrc-congestion
//!
//! Congestion controllers for mrc, one trait ([`Controller`]) and several implementations
//! (DCQCN, a Swift-style delay controller, NSCC). No I/O and no dependency on the other mrc
//! crates. Time is always passed in as `now_ns` (nanoseconds on the caller's clock, any
//! epoch, monotonic); controllers never read a clock.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod any;
mod controller;
pub mod dcqcn;
mod error;
mod fixed;
pub mod nscc;
mod rtt;
pub mod swift;
pub mod trace;

pub use any::{AnyController, CcKind, LinkParams};
pub use controller::{AckSample, Controller, Metrics};
pub use dcqcn::{Dcqcn, DcqcnConfig};
pub use error::{ConfigError, ParseCcKindError};
pub use fixed::{FixedWindow, FixedWindowConfig};
pub use nscc::{Nscc, NsccConfig, Quadrant};
pub use swift::{Swift, SwiftConfig};
