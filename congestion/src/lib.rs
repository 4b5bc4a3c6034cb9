//! # mrc-congestion
//!
//! Congestion controllers for mrc, one trait ([`Controller`]) and several implementations.
//! No I/O and no dependency on the other mrc crates. Time is always passed in as `now_ns`
//! (nanoseconds on the caller's clock, any epoch, monotonic); controllers never read a
//! clock, so every run is reproducible.
//!
//! | `--cc`  | controller          | kind        | reacts to                         | module |
//! |---------|---------------------|-------------|-----------------------------------|--------|
//! | `dcqcn` | [`Dcqcn`]           | rate        | CNPs                              | [`dcqcn`] |
//! | `swift` | [`Swift`]           | window      | RTT vs a target delay, loss, trim | [`swift`] |
//! | `nscc`  | [`Nscc`]            | window      | ECN CE and queuing delay, trim, loss | [`nscc`] |
//! | `none`  | [`FixedWindow`]     | window      | nothing                           | |
//!
//! Each controller is built from its config (`DcqcnConfig::build`, ...), which checks the
//! parameters and returns a typed [`ConfigError`]. [`CcKind`] parses the `--cc` value and
//! [`AnyController`] holds whichever was chosen; hot paths can instead be generic over
//! `C: Controller`. The [`trace`] module replays scripted signal traces against any
//! controller and returns its window/rate trajectory.
//!
//! ```
//! use mrc_congestion::{AckSample, AnyController, CcKind, Controller, LinkParams};
//!
//! let kind: CcKind = "swift".parse().unwrap();
//! let link = LinkParams {
//!     line_rate_bps: 100_000_000_000,
//!     base_rtt_ns: 12_000,
//!     mtu_bytes: 4096,
//!     trimming_enabled: false,
//! };
//! let mut cc = AnyController::new(kind, &link).unwrap();
//! assert_eq!(cc.cwnd_bytes(), 150_000); // one BDP
//! cc.on_packet_sent(1_000_000, 4096, 4096);
//! // The SACK echoes the send time: a 12 us RTT, below the target
//! // (12 us base RTT + 10 us + a little flow scaling): additive increase.
//! cc.on_ack(
//!     1_012_000,
//!     &AckSample {
//!         acked_bytes: 4096,
//!         echoed_send_ts_ns: Some(1_000_000),
//!         ecn_ce_count: 0,
//!         acked_packets: 1,
//!         bytes_in_flight: 0,
//!     },
//! );
//! assert_eq!(cc.cwnd_bytes(), 150_111); // + 4096 * 4096 / 150000
//! assert_eq!(cc.metrics().last_rtt_ns, 12_000);
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod any;
mod controller;
pub mod dcqcn;
mod error;
mod fixed;
pub mod model;
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
