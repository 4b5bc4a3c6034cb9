//! Work requests as the sender sees them: what to move and how it is cut into packets.

/// What a message does at the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgKind {
    /// RDMA WRITE to `remote_addr` in the peer region named by `rkey`.
    Write {
        /// Peer virtual address of byte 0 of the message.
        remote_addr: u64,
        /// Peer region's rkey.
        rkey: u32,
    },
    /// SEND into the peer's next posted receive buffer.
    Send,
}

/// A posted work request on the send side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgSpec {
    /// Caller's id, returned in the completion.
    pub wr_id: u64,
    /// WRITE or SEND.
    pub kind: MsgKind,
    /// Immediate data (WRITE_WITH_IMM, SEND_WITH_IMM), if any.
    pub imm: Option<u32>,
    /// lkey of the local region holding the data.
    pub local_lkey: u32,
    /// Virtual address of the data in that region.
    pub local_addr: u64,
    /// Message length in bytes (0 allowed: one packet without payload).
    pub len: u32,
}

/// Number of packets a message of `len` bytes needs at `mtu_payload_bytes` per packet
/// (at least one, so a zero-length message still sends one packet).
pub fn packets_for(len: u32, mtu_payload_bytes: u32) -> u32 {
    len.div_ceil(mtu_payload_bytes.max(1)).max(1)
}

/// Payload length of the packet at `offset` of a `len`-byte message.
#[inline]
pub fn segment_len(len: u32, offset: u32, mtu_payload_bytes: u32) -> u32 {
    len.saturating_sub(offset).min(mtu_payload_bytes.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segmentation_counts() {
        assert_eq!(packets_for(0, 4096), 1);
        assert_eq!(packets_for(1, 4096), 1);
        assert_eq!(packets_for(4096, 4096), 1);
        assert_eq!(packets_for(4097, 4096), 2);
        assert_eq!(packets_for(1 << 20, 4096), 256);
        assert_eq!(segment_len(4097, 4096, 4096), 1);
        assert_eq!(segment_len(8192, 4096, 4096), 4096);
        assert_eq!(segment_len(0, 0, 4096), 0);
    }
}
