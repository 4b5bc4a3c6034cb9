//! The receiving half of a connection: the receive window (rcv_nxt + SACK bitmap), the
//! message layer (placement, in-order completion) and the acknowledgement scheduler.

pub mod acker;
pub mod coverage;
pub mod msgs;
pub mod window;

pub use acker::{AckConfig, Acker, NackOut, SackOut};
pub use coverage::MAX_COVERAGE_HOLES;
pub use msgs::{RecvWr, RxData, RxKind, RxMessages, STAGED_CHUNK_OVERHEAD_BYTES, staged_charge};
pub use window::{Arrival, DEFAULT_RECV_WINDOW_PACKETS, RecvWindow, WindowPos};
