//! Typed, allocation-free parse and emit errors.

/// Which header a [`WireError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderKind {
    /// Base Transport Header (12 bytes).
    Bth,
    /// mrc extension header (16 bytes, every packet).
    Mrceth,
    /// Message extension header of data packets (8 bytes).
    Msgeth,
    /// RDMA extended transport header of RDMA_WRITE_* packets (16 bytes).
    Reth,
    /// Immediate data of *_WITH_IMMEDIATE packets (4 bytes).
    ImmDt,
    /// Selective acknowledgement body (28 bytes).
    Sack,
    /// Negative acknowledgement body (12 bytes).
    Nack,
    /// Congestion notification body (16 bytes).
    Cnp,
    /// EV probe body (8 bytes).
    Probe,
    /// EV probe reply body (12 bytes).
    ProbeReply,
    /// Port Status Update body (12 bytes).
    PortStatus,
}

/// Which 24-bit PSN field a [`WireError::PsnOutOfRange`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PsnField {
    /// BTH PSN (a 24-bit slot: only emit can see a too-wide value).
    Bth,
    /// SACK cumulative PSN (`rcv_nxt`), a 32-bit slot with the upper 8 bits zero.
    SackCumulative,
    /// SACK bitmap base PSN, a 32-bit slot with the upper 8 bits zero.
    SackBitmapBase,
    /// NACKed PSN, a 32-bit slot with the upper 8 bits zero.
    Nack,
}

/// Everything that can go wrong parsing or emitting an mrc packet.
///
/// `Copy` and allocation-free, so a receiver can count drops by variant on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// The bytes end inside `header`. From a header view, `need`/`have` count from the start
    /// of that header; from [`crate::wire::PacketRepr::parse`] they count from the start of
    /// the datagram (`need` = offset of the end of `header`, `have` = datagram length).
    #[error("truncated {header:?} header: need {need} bytes, have {have}")]
    Truncated {
        /// The header that does not fit.
        header: HeaderKind,
        /// Bytes needed to hold it.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The caller's output buffer is shorter than the packet (`emit`).
    #[error("output buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall {
        /// Bytes the packet needs (`buffer_len()`).
        need: usize,
        /// Bytes in the caller's buffer.
        have: usize,
    },
    /// A PSN does not fit in 24 bits (parse: upper 8 bits of a 32-bit PSN slot set; emit:
    /// value above `0xFF_FFFF`).
    #[error("{field:?} PSN {value:#x} does not fit in 24 bits")]
    PsnOutOfRange {
        /// Which PSN field.
        field: PsnField,
        /// The offending value.
        value: u32,
    },
    /// Emit of a destination QPN above `0xFF_FFFF` (the BTH field is 24 bits).
    #[error("destination QPN {value:#x} does not fit in 24 bits")]
    QpnOutOfRange {
        /// The offending value.
        value: u32,
    },
    /// The PSN in a SACK or NACK body differs from the BTH PSN (the spec repeats it there).
    #[error("{header:?} PSN {body_psn:#x} differs from BTH PSN {bth_psn:#x}")]
    PsnMismatch {
        /// [`HeaderKind::Sack`] or [`HeaderKind::Nack`].
        header: HeaderKind,
        /// PSN in the BTH.
        bth_psn: u32,
        /// PSN in the body.
        body_psn: u32,
    },
    /// A data packet's bytes run past the end of its message: `offset + len > message_len`
    /// (`len` = payload length, or for a trimmed RDMA_WRITE the RETH DMA length).
    #[error("data at offset {offset} length {len} runs past message length {message_len}")]
    PayloadPastMessage {
        /// MSGETH offset of this packet's payload in the message, bytes.
        offset: u32,
        /// Bytes this packet covers.
        len: u64,
        /// MSGETH message length, bytes.
        message_len: u32,
    },
    /// RETH DMA length differs from the payload length of an untrimmed RDMA_WRITE packet.
    #[error("RETH DMA length {dma_len} differs from payload length {payload_len}")]
    RethLengthMismatch {
        /// RETH DMA length, bytes.
        dma_len: u32,
        /// Payload bytes present.
        payload_len: usize,
    },
    /// RETH virtual address + DMA length overflows 64 bits.
    #[error("RETH virtual address {virtual_addr:#x} + DMA length {dma_len} overflows")]
    RethAddressOverflow {
        /// RETH virtual address.
        virtual_addr: u64,
        /// RETH DMA length, bytes.
        dma_len: u32,
    },
    /// A data packet with the BTH trimmed flag still carries payload bytes.
    #[error("trimmed data packet carries {payload_len} payload bytes")]
    TrimmedWithPayload {
        /// Payload bytes present.
        payload_len: usize,
    },
    /// Bytes follow a fixed-size control body (SACK, NACK, CNP, probe, probe reply).
    #[error("{extra} bytes after the {header:?} body")]
    TrailingBytes {
        /// The control body.
        header: HeaderKind,
        /// Bytes past its end.
        extra: usize,
    },
    /// A Port Status Update whose plane count is outside `1..=32` or whose up-planes bitmap
    /// names a plane at or above its count.
    #[error(
        "port status update: {planes} planes with up bitmap {up_planes:#x} (need 1..=32 planes, bits below the count)"
    )]
    BadPortStatus {
        /// The plane count sent.
        planes: u8,
        /// The bitmap sent.
        up_planes: u32,
    },
    /// Emit of a [`crate::wire::PacketRepr`] whose body does not match its BTH opcode (e.g. a
    /// SACK opcode with a data body, RDMA_WRITE without RETH, an `Unknown` body with a known
    /// opcode, or `Opcode::Unknown(n)` where `n` is a known code).
    #[error("body does not match opcode {opcode:#04x}")]
    OpcodeBodyMismatch {
        /// The opcode byte.
        opcode: u8,
    },
}

impl WireError {
    /// Moves the `need`/`have` of a [`WireError::Truncated`] by `offset` bytes (a header that
    /// starts `offset` bytes into the datagram); other variants are returned unchanged.
    #[inline]
    pub(crate) fn at_offset(self, offset: usize) -> Self {
        match self {
            WireError::Truncated { header, need, have } => WireError::Truncated {
                header,
                need: need + offset,
                have: have + offset,
            },
            other => other,
        }
    }
}
