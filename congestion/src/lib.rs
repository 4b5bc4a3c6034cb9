//! # mrc-congestion
//!
//! Congestion controllers for mrc, one trait and several implementations (DCQCN, a
//! Swift-style delay controller, NSCC). No I/O and no dependency on the other mrc crates.
#![warn(missing_docs)]
#![forbid(unsafe_code)]
