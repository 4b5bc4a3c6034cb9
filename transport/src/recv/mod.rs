//! The receiving half of a connection: the receive window (rcv_nxt + SACK bitmap).

pub mod window;

pub use window::{Arrival, DEFAULT_RECV_WINDOW_PACKETS, RecvWindow, WindowPos};
