//! Data-packet headers (SEND_* and RDMA_WRITE_*): MSGETH, RETH, ImmDt, and [`DataRepr`], the
//! parsed body of a data packet.

use super::{
    checked_view,
    error::{HeaderKind, WireError},
    get_u32, get_u64, set_u32, set_u64,
};

/// Field offsets (bytes) of MSGETH, RETH and ImmDt.
mod field {
    /// MSGETH bytes 0-3: message length.
    pub const MSG_LEN: usize = 0;
    /// MSGETH bytes 4-7: offset of this packet's payload in the message.
    pub const MSG_OFFSET: usize = 4;

    /// RETH bytes 0-7: virtual address.
    pub const VIRTUAL_ADDR: usize = 0;
    /// RETH bytes 8-11: rkey.
    pub const RKEY: usize = 8;
    /// RETH bytes 12-15: DMA length.
    pub const DMA_LEN: usize = 12;

    /// ImmDt bytes 0-3: immediate data.
    pub const IMM: usize = 0;
}

/// Length of the MSGETH in bytes.
pub(crate) const MSGETH_LEN: usize = 8;
/// Length of the RETH in bytes.
pub(crate) const RETH_LEN: usize = 16;
/// Length of the ImmDt in bytes.
pub(crate) const IMMDT_LEN: usize = 4;

/// Checked view of a MSGETH (message extension header, on every data packet).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                  message length (bytes, 32)                   |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     offset of this packet's payload in the message (bytes)    |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct Msgeth<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Msgeth, HeaderKind::Msgeth, MSGETH_LEN);

impl<T: AsRef<[u8]>> Msgeth<T> {
    /// Message length, bytes.
    #[inline]
    pub fn message_len(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::MSG_LEN)
    }

    /// Offset of this packet's payload in the message, bytes.
    #[inline]
    pub fn offset(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::MSG_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Msgeth<T> {
    /// Sets the message length, bytes.
    #[inline]
    pub fn set_message_len(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::MSG_LEN, v);
    }

    /// Sets the payload offset, bytes.
    #[inline]
    pub fn set_offset(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::MSG_OFFSET, v);
    }
}

/// Parsed MSGETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MsgethRepr {
    /// Length of the whole message, bytes.
    pub message_len: u32,
    /// Offset of this packet's payload in the message, bytes.
    pub offset: u32,
}

impl MsgethRepr {
    /// Reads both fields; never fails on its own (the cross-field checks are done by
    /// [`DataRepr`]).
    ///
    /// # Errors
    /// None today.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Msgeth<T>) -> Result<Self, WireError> {
        Ok(MsgethRepr {
            message_len: h.message_len(),
            offset: h.offset(),
        })
    }

    /// Writes both fields.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Msgeth<T>) {
        h.set_message_len(self.message_len);
        h.set_offset(self.offset);
    }

    /// Bytes [`MsgethRepr::emit`] writes: always 8.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        MSGETH_LEN
    }
}

/// Checked view of a RETH (RDMA extended transport header, IBA vol 1 9.3.3; on every
/// RDMA_WRITE_* packet in mrc, describing where THIS packet's payload goes).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |  byte 0
/// +                  virtual address (64)                         +
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                          rkey (32)                            |  byte 8
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |   DMA length (bytes, 32) = this packet's (untrimmed) payload  |  byte 12
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct Reth<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Reth, HeaderKind::Reth, RETH_LEN);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Remote virtual address of this packet's payload.
    #[inline]
    pub fn virtual_addr(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::VIRTUAL_ADDR)
    }

    /// Remote key of the target memory region.
    #[inline]
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::RKEY)
    }

    /// DMA length, bytes.
    #[inline]
    pub fn dma_len(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    #[inline]
    pub fn set_virtual_addr(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::VIRTUAL_ADDR, v);
    }

    /// Sets the rkey.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v);
    }

    /// Sets the DMA length, bytes.
    #[inline]
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::DMA_LEN, v);
    }
}

/// Parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address where this packet's payload goes.
    pub virtual_addr: u64,
    /// Remote key of the target memory region.
    pub rkey: u32,
    /// This packet's payload length in bytes (kept when a switch trims the payload).
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads the three fields.
    ///
    /// # Errors
    /// [`WireError::RethAddressOverflow`] when `virtual_addr + dma_len` overflows 64 bits.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Reth<T>) -> Result<Self, WireError> {
        let repr = RethRepr {
            virtual_addr: h.virtual_addr(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        };
        repr.check()?;
        Ok(repr)
    }

    /// Checks `virtual_addr + dma_len` fits in 64 bits.
    ///
    /// # Errors
    /// [`WireError::RethAddressOverflow`].
    #[inline]
    pub fn check(&self) -> Result<(), WireError> {
        match self.virtual_addr.checked_add(u64::from(self.dma_len)) {
            Some(_) => Ok(()),
            None => Err(WireError::RethAddressOverflow {
                virtual_addr: self.virtual_addr,
                dma_len: self.dma_len,
            }),
        }
    }

    /// Writes the three fields (nothing is written on error).
    ///
    /// # Errors
    /// As [`RethRepr::check`].
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) -> Result<(), WireError> {
        self.check()?;
        self.write(h);
        Ok(())
    }

    /// [`RethRepr::emit`] of a repr that passed [`RethRepr::check`].
    #[inline]
    pub(crate) fn write<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) {
        h.set_virtual_addr(self.virtual_addr);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }

    /// Bytes [`RethRepr::emit`] writes: always 16.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        RETH_LEN
    }
}

/// Checked view of an ImmDt (4 bytes of immediate data, on *_WITH_IMMEDIATE opcodes).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     immediate data (32)                       |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct ImmDt<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(ImmDt, HeaderKind::ImmDt, IMMDT_LEN);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// Immediate data (opaque to mrc, delivered in the receive completion).
    #[inline]
    pub fn imm(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate data.
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::IMM, v);
    }
}

/// Parsed body of a data packet: what follows the MRCETH.
///
/// Layout: `MSGETH (8) | RETH (16, RDMA_WRITE_* only) | ImmDt (4, *_WITH_IMMEDIATE only) |
/// payload (the rest of the datagram)`.
///
/// Invariants checked at parse and at emit (given the BTH `trimmed` flag):
/// - trimmed: `payload` is empty ([`WireError::TrimmedWithPayload`]);
/// - untrimmed RDMA_WRITE: `reth.dma_len == payload.len()` ([`WireError::RethLengthMismatch`]);
/// - `offset + len <= message_len`, where `len` is `payload.len()`, or for a trimmed
///   RDMA_WRITE the RETH DMA length ([`WireError::PayloadPastMessage`]);
/// - `reth.virtual_addr + reth.dma_len` does not overflow ([`WireError::RethAddressOverflow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataRepr<'a> {
    /// Message length and this packet's offset in it.
    pub msgeth: MsgethRepr,
    /// Present exactly on RDMA_WRITE_* opcodes.
    pub reth: Option<RethRepr>,
    /// Immediate data, present exactly on *_WITH_IMMEDIATE opcodes.
    pub imm: Option<u32>,
    /// Payload bytes (empty when trimmed).
    pub payload: &'a [u8],
}

impl<'a> DataRepr<'a> {
    /// Parses a data body (`bytes` starts right after the MRCETH) for a data `opcode`
    /// (`opcode.is_data()`) with the BTH `trimmed` flag.
    ///
    /// # Errors
    /// [`WireError::Truncated`] (counted from the start of `bytes`) when MSGETH, RETH or ImmDt
    /// is cut short; the invariant violations listed on [`DataRepr`].
    #[inline]
    pub fn parse(bytes: &'a [u8], opcode: super::Opcode, trimmed: bool) -> Result<Self, WireError> {
        let msgeth_view = Msgeth::new_checked(bytes)?;
        let msgeth = MsgethRepr::parse(&msgeth_view)?;
        let mut off = MSGETH_LEN;
        let mut rest = msgeth_view.into_rest();
        let mut reth = None;
        if opcode.has_reth() {
            let v = Reth::new_checked(rest).map_err(|e| e.at_offset(off))?;
            reth = Some(RethRepr::parse(&v)?);
            rest = v.into_rest();
            off += RETH_LEN;
        }
        let mut imm = None;
        if opcode.has_immediate() {
            let v = ImmDt::new_checked(rest).map_err(|e| e.at_offset(off))?;
            imm = Some(v.imm());
            rest = v.into_rest();
        }
        let repr = DataRepr {
            msgeth,
            reth,
            imm,
            payload: rest,
        };
        repr.check(trimmed)?;
        Ok(repr)
    }

    /// Checks the invariants listed on [`DataRepr`] (not the opcode/header agreement, which
    /// [`crate::wire::PacketRepr::emit`] checks).
    ///
    /// # Errors
    /// [`WireError::TrimmedWithPayload`], [`WireError::RethLengthMismatch`],
    /// [`WireError::PayloadPastMessage`], [`WireError::RethAddressOverflow`].
    #[inline(always)]
    pub fn check(&self, trimmed: bool) -> Result<(), WireError> {
        let payload_len = self.payload.len();
        if trimmed && payload_len != 0 {
            return Err(WireError::TrimmedWithPayload { payload_len });
        }
        let mut len = payload_len as u64;
        if let Some(reth) = self.reth {
            reth.check()?;
            if trimmed {
                len = u64::from(reth.dma_len);
            } else if reth.dma_len as usize != payload_len {
                return Err(WireError::RethLengthMismatch {
                    dma_len: reth.dma_len,
                    payload_len,
                });
            }
        }
        if u64::from(self.msgeth.offset) + len > u64::from(self.msgeth.message_len) {
            return Err(WireError::PayloadPastMessage {
                offset: self.msgeth.offset,
                len,
                message_len: self.msgeth.message_len,
            });
        }
        Ok(())
    }

    /// Header bytes before the payload: 8 (MSGETH) + 16 if RETH + 4 if ImmDt.
    #[inline]
    pub fn header_len(&self) -> usize {
        MSGETH_LEN
            + if self.reth.is_some() { RETH_LEN } else { 0 }
            + if self.imm.is_some() { IMMDT_LEN } else { 0 }
    }

    /// Bytes [`DataRepr::emit`] writes: [`DataRepr::header_len`] + payload length.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Writes MSGETH, RETH, ImmDt and the payload into `buf` (which starts right after the
    /// MRCETH); returns the bytes written. Checks the invariants first (nothing is written on
    /// error).
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`] when `buf` is shorter than [`DataRepr::buffer_len`]; as
    /// [`DataRepr::check`].
    #[inline]
    pub fn emit(&self, buf: &mut [u8], trimmed: bool) -> Result<usize, WireError> {
        self.check(trimmed)?;
        self.write(buf)
    }

    /// [`DataRepr::emit`] of a repr that passed [`DataRepr::check`].
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`].
    #[inline(always)]
    pub(crate) fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.write_parts::<true>(buf)
    }

    /// [`DataRepr::write`] of the headers only (MSGETH, RETH, ImmDt; `PAYLOAD` false) or of
    /// the headers and the payload (`PAYLOAD` true); returns the bytes written.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`].
    #[inline(always)]
    pub(crate) fn write_parts<const PAYLOAD: bool>(
        &self,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let need = if PAYLOAD {
            self.buffer_len()
        } else {
            self.header_len()
        };
        let Some(out) = buf.get_mut(..need) else {
            return Err(WireError::BufferTooSmall {
                need,
                have: buf.len(),
            });
        };
        let (head, mut rest) = out.split_at_mut(MSGETH_LEN);
        self.msgeth.emit(&mut Msgeth::new_checked(head)?);
        if let Some(reth) = self.reth {
            let (head, tail) = rest.split_at_mut(RETH_LEN);
            // checked with the whole repr (`DataRepr::check`) before this is called
            reth.write(&mut Reth::new_checked(head)?);
            rest = tail;
        }
        if let Some(imm) = self.imm {
            let (head, tail) = rest.split_at_mut(IMMDT_LEN);
            ImmDt::new_checked(head)?.set_imm(imm);
            rest = tail;
        }
        if PAYLOAD {
            rest.copy_from_slice(self.payload);
        }
        Ok(need)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Opcode;
    use super::*;

    /// MSGETH(len 4096, off 1024) RETH(va 0x1000_0000_0000_0400, rkey 0xCAFE, len 4) ImmDt
    /// 0x01020304, payload 4 bytes.
    const WRITE_IMM: [u8; 32] = [
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x04, 0x00, // MSGETH
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, // VA
        0x00, 0x00, 0xCA, 0xFE, 0x00, 0x00, 0x00, 0x04, // rkey, DMA len
        0x01, 0x02, 0x03, 0x04, // ImmDt
        0xA0, 0xA1, 0xA2, 0xA3, // payload
    ];

    #[test]
    fn parses_write_with_immediate() {
        let d = DataRepr::parse(&WRITE_IMM, Opcode::RdmaWriteOnlyWithImmediate, false).unwrap();
        assert_eq!(
            d,
            DataRepr {
                msgeth: MsgethRepr {
                    message_len: 4096,
                    offset: 1024
                },
                reth: Some(RethRepr {
                    virtual_addr: 0x1000_0000_0000_0400,
                    rkey: 0xCAFE,
                    dma_len: 4
                }),
                imm: Some(0x0102_0304),
                payload: &[0xA0, 0xA1, 0xA2, 0xA3],
            }
        );
        assert_eq!(d.header_len(), 28);
        let mut out = [0u8; 40];
        assert_eq!(d.emit(&mut out, false), Ok(32));
        assert_eq!(out[..32], WRITE_IMM);
        assert_eq!(out[32..], [0u8; 8]);
    }

    #[test]
    fn same_bytes_as_send_have_no_reth() {
        // As SEND_ONLY the 24 bytes after MSGETH are payload: offset 1024 + 24 <= 4096.
        let d = DataRepr::parse(&WRITE_IMM, Opcode::SendOnly, false).unwrap();
        assert_eq!(d.reth, None);
        assert_eq!(d.imm, None);
        assert_eq!(d.payload, &WRITE_IMM[8..]);
    }

    #[test]
    fn reth_length_must_match_payload_unless_trimmed() {
        let short = &WRITE_IMM[..31];
        assert_eq!(
            DataRepr::parse(short, Opcode::RdmaWriteOnlyWithImmediate, false),
            Err(WireError::RethLengthMismatch {
                dma_len: 4,
                payload_len: 3
            })
        );
        let headers_only = &WRITE_IMM[..28];
        let d = DataRepr::parse(headers_only, Opcode::RdmaWriteOnlyWithImmediate, true).unwrap();
        assert_eq!(d.payload, &[] as &[u8]);
        assert_eq!(d.reth.unwrap().dma_len, 4);
        assert_eq!(
            DataRepr::parse(&WRITE_IMM, Opcode::RdmaWriteOnlyWithImmediate, true),
            Err(WireError::TrimmedWithPayload { payload_len: 4 })
        );
    }

    #[test]
    fn payload_past_message_is_rejected() {
        let mut b = WRITE_IMM;
        b[7] = 0x00;
        b[6] = 0x10; // offset 4096 with 4 bytes: 4100 > 4096
        assert_eq!(
            DataRepr::parse(&b, Opcode::RdmaWriteOnlyWithImmediate, false),
            Err(WireError::PayloadPastMessage {
                offset: 4096,
                len: 4,
                message_len: 4096
            })
        );
        // u32 offsets near the top do not overflow: 0xFFFF_FFFF + 4 > 0xFFFF_FFFF.
        b[..8].copy_from_slice(&[0xFF; 8]);
        assert_eq!(
            DataRepr::parse(&b, Opcode::RdmaWriteOnlyWithImmediate, false),
            Err(WireError::PayloadPastMessage {
                offset: 0xFFFF_FFFF,
                len: 4,
                message_len: 0xFFFF_FFFF
            })
        );
        // Trimmed write: the RETH DMA length counts.
        let mut t = WRITE_IMM;
        t[20..24].copy_from_slice(&3073u32.to_be_bytes());
        assert_eq!(
            DataRepr::parse(&t[..28], Opcode::RdmaWriteOnlyWithImmediate, true),
            Err(WireError::PayloadPastMessage {
                offset: 1024,
                len: 3073,
                message_len: 4096
            })
        );
    }

    #[test]
    fn reth_address_overflow_is_rejected() {
        let mut b = WRITE_IMM;
        b[8..16].copy_from_slice(&[0xFF; 8]);
        assert_eq!(
            DataRepr::parse(&b, Opcode::RdmaWriteOnlyWithImmediate, false),
            Err(WireError::RethAddressOverflow {
                virtual_addr: u64::MAX,
                dma_len: 4
            })
        );
    }

    #[test]
    fn truncated_headers_report_offsets_in_the_body() {
        for n in 0..28 {
            let (header, need) = match n {
                0..8 => (HeaderKind::Msgeth, 8),
                8..24 => (HeaderKind::Reth, 24),
                _ => (HeaderKind::ImmDt, 28),
            };
            assert_eq!(
                DataRepr::parse(&WRITE_IMM[..n], Opcode::RdmaWriteOnlyWithImmediate, false),
                Err(WireError::Truncated {
                    header,
                    need,
                    have: n
                }),
                "n={n}"
            );
        }
    }

    #[test]
    fn emit_into_short_buffer_is_an_error() {
        let d = DataRepr::parse(&WRITE_IMM, Opcode::RdmaWriteOnlyWithImmediate, false).unwrap();
        let mut out = [0u8; 31];
        assert_eq!(
            d.emit(&mut out, false),
            Err(WireError::BufferTooSmall { need: 32, have: 31 })
        );
        assert_eq!(out, [0u8; 31]);
    }
}
