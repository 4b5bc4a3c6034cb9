//! End-to-end tests across the mrc crates live in `tests/tests/`; this library holds what
//! they share: a two-endpoint harness on a virtual clock with scripted and seeded network
//! faults ([`harness`]), test controllers ([`ctl`]), and the checked transfer under a fault
//! schedule behind the `transfer` fuzz target ([`transfer`]).
#![warn(missing_docs)]

pub mod ctl;
pub mod harness;
pub mod transfer;
