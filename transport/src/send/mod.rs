//! The sending half of a connection: messages cut into packets, the retransmit queue,
//! acknowledgement processing and loss detection.

pub mod msg;
pub mod state;

pub use msg::{MsgKind, MsgSpec};
pub use state::{
    AckOutcome, DEFAULT_UNRESPONSIVE_BUDGET_NS, GiveUp, InvalidAck, LossOutcome, PktState,
    REORDER_WINDOW_MULT_MAX, SackInfo, SendConfig, SendState, TxPacket,
};
