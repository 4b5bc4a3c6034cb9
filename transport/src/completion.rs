//! Work completions, in the shape of verbs `ibv_wc` (IBA vol 1, 11.4.2.1).

/// What completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// Sender: an RDMA WRITE (no immediate) was acknowledged in full.
    Write,
    /// Sender: an RDMA WRITE with immediate was acknowledged in full.
    WriteWithImm,
    /// Sender: a SEND was acknowledged in full.
    Send,
    /// Receiver: a SEND arrived in a posted receive buffer.
    Recv,
    /// Receiver: an RDMA WRITE with immediate arrived; consumes a posted receive.
    RecvRdmaWithImm,
}

/// How it completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// The RTO fired more than the retry limit times in a row without progress
    /// (verbs `IBV_WC_RETRY_EXC_ERR`).
    RetryExceeded,
    /// Not executed: the connection went to the error state or was closed first
    /// (verbs `IBV_WC_WR_FLUSH_ERR`).
    Flushed,
    /// The peer refused the WRITE (rkey, bounds or access; verbs `IBV_WC_REM_ACCESS_ERR`).
    RemoteAccessError,
    /// The peer restarted (another generation answered); nothing more is delivered.
    GenerationMismatch,
    /// The local scatter/gather entry is invalid (lkey, bounds; verbs `IBV_WC_LOC_PROT_ERR`).
    LocalProtectionError,
    /// A received SEND does not fit the posted buffer (verbs `IBV_WC_LOC_LEN_ERR`).
    LocalLengthError,
}

/// One work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The `wr_id` given when the work request was posted.
    pub wr_id: u64,
    /// What completed.
    pub opcode: WcOpcode,
    /// Success or the error.
    pub status: WcStatus,
    /// Bytes moved (message length; for receives the bytes delivered).
    pub byte_len: u32,
    /// Immediate data carried by the message, receiver side.
    pub imm: Option<u32>,
}
