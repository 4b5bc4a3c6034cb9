//! NACK body (opcode 0xE1): the NACKed PSN, a reason code, and the echoed EV and send
//! timestamp of the copy it answers (so a sender acts on a NACK only for the copy it names).

use super::{
    check_psn, checked_view,
    error::{HeaderKind, PsnField, WireError},
    get_u24, get_u32, set_u24, set_u32,
};

/// Field offsets (bytes) of the NACK body; see the diagram on [`Nack`].
mod field {
    /// Bytes 0-3: NACKed PSN (low 24 bits).
    pub const PSN: usize = 0;
    /// Byte 4: reason code.
    pub const REASON: usize = 4;
    /// Bytes 5-7: reserved.
    pub const RESERVED: usize = 5;
    /// Bytes 8-11: echoed EV.
    pub const ECHO_EV: usize = 8;
    /// Bytes 12-15: echoed send timestamp (low 32 bits, ns) of the NACKed copy.
    pub const ECHO_TS: usize = 12;
}

/// Length of the NACK body in bytes.
pub(crate) const NACK_LEN: usize = 16;

/// Why a receiver NACKs a PSN (NACK byte 4). Codes we do not know stay `Unknown(n)`;
/// `u8::from(NackReason::from(n)) == n` for every `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NackReason {
    /// 1: a switch trimmed the packet's payload (congestion at a switch).
    Trimmed,
    /// 2: trimmed at the last hop (congestion at the receiver's ToR downlink).
    TrimmedLasthop,
    /// 3: the receiver has no bitmap space to track this PSN.
    NoBitmap,
    /// 4: the receiver has no packet buffer.
    NoPktBuffer,
    /// 5: the PSN is outside the receive window.
    PsnOutOfWindow,
    /// 6: rkey or bounds check against the memory region failed.
    AccessError,
    /// 7: the packet's MRCETH generation is not the connection's.
    GenerationMismatch,
    /// 8: receiver not ready (IBA RNR NAK, section 9.7.5.2.8): the packet is the last of a
    /// SEND or WRITE_WITH_IMM and no posted receive is free for it. The packet was not
    /// accepted; the sender resends it after its RNR timer, without charging the EV or the
    /// congestion controller.
    ReceiverNotReady,
    /// Any other code.
    Unknown(u8),
}

impl From<u8> for NackReason {
    #[inline]
    fn from(code: u8) -> Self {
        match code {
            1 => NackReason::Trimmed,
            2 => NackReason::TrimmedLasthop,
            3 => NackReason::NoBitmap,
            4 => NackReason::NoPktBuffer,
            5 => NackReason::PsnOutOfWindow,
            6 => NackReason::AccessError,
            7 => NackReason::GenerationMismatch,
            8 => NackReason::ReceiverNotReady,
            n => NackReason::Unknown(n),
        }
    }
}

impl From<NackReason> for u8 {
    #[inline]
    fn from(r: NackReason) -> u8 {
        match r {
            NackReason::Trimmed => 1,
            NackReason::TrimmedLasthop => 2,
            NackReason::NoBitmap => 3,
            NackReason::NoPktBuffer => 4,
            NackReason::PsnOutOfWindow => 5,
            NackReason::AccessError => 6,
            NackReason::GenerationMismatch => 7,
            NackReason::ReceiverNotReady => 8,
            NackReason::Unknown(n) => n,
        }
    }
}

/// Checked view of a NACK body (after the MRCETH; the BTH PSN repeats the NACKed PSN).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  must be 0    |            NACKed PSN (24 bits)               |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  reason (8)   |                reserved (24)                  |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         echoed EV (32)                        |  byte 8
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |            echoed send timestamp (ns, low 32 bits)            |  byte 12
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct Nack<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Nack, HeaderKind::Nack, NACK_LEN);

impl<T: AsRef<[u8]>> Nack<T> {
    /// Raw 32-bit PSN slot (a valid one has the upper 8 bits zero).
    #[inline]
    pub fn psn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::PSN)
    }

    /// Reason code.
    #[inline]
    pub fn reason(&self) -> NackReason {
        NackReason::from(self.buffer.as_ref()[field::REASON])
    }

    /// Reserved 24 bits (sent 0).
    #[inline]
    pub fn reserved(&self) -> u32 {
        get_u24(self.buffer.as_ref(), field::RESERVED)
    }

    /// EV of the NACKed packet.
    #[inline]
    pub fn echo_ev(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ECHO_EV)
    }

    /// MRCETH send timestamp (low 32 bits, ns) of the NACKed packet; 0 when it carried none.
    #[inline]
    pub fn echo_ts(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ECHO_TS)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Nack<T> {
    /// Sets the raw PSN slot.
    #[inline]
    pub fn set_psn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::PSN, v);
    }

    /// Sets the reason code.
    #[inline]
    pub fn set_reason(&mut self, r: NackReason) {
        self.buffer.as_mut()[field::REASON] = r.into();
    }

    /// Sets the reserved field (low 24 bits of `v`).
    #[inline]
    pub fn set_reserved(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), field::RESERVED, v);
    }

    /// Sets the echoed EV.
    #[inline]
    pub fn set_echo_ev(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ECHO_EV, v);
    }

    /// Sets the echoed send timestamp.
    #[inline]
    pub fn set_echo_ts(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ECHO_TS, v);
    }
}

/// Parsed NACK body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NackRepr {
    /// NACKed PSN (24 bits; equals the BTH PSN).
    pub psn: u32,
    /// Why.
    pub reason: NackReason,
    /// Reserved 24 bits, sent 0, kept so a parsed packet re-emits byte-identical
    /// (emit of a value above 0xFF_FFFF writes only the low 24 bits).
    pub reserved: u32,
    /// EV of the NACKed packet.
    pub echo_ev: u32,
    /// MRCETH send timestamp (low 32 bits, ns) of the NACKed packet: with `echo_ev` it
    /// names the copy the NACK answers; 0 when the packet carried none.
    pub echo_ts_ns: u32,
}

impl NackRepr {
    /// Reads every field.
    ///
    /// # Errors
    /// [`WireError::PsnOutOfRange`] (`PsnField::Nack`) when the upper 8 bits of the PSN slot
    /// are not zero.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Nack<T>) -> Result<Self, WireError> {
        let repr = NackRepr {
            psn: h.psn(),
            reason: h.reason(),
            reserved: h.reserved(),
            echo_ev: h.echo_ev(),
            echo_ts_ns: h.echo_ts(),
        };
        check_psn(PsnField::Nack, repr.psn)?;
        Ok(repr)
    }

    /// Writes every field (nothing is written on error).
    ///
    /// # Errors
    /// [`WireError::PsnOutOfRange`] when `psn` does not fit in 24 bits.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Nack<T>) -> Result<(), WireError> {
        check_psn(PsnField::Nack, self.psn)?;
        h.set_psn(self.psn);
        h.set_reason(self.reason);
        h.set_reserved(self.reserved);
        h.set_echo_ev(self.echo_ev);
        h.set_echo_ts(self.echo_ts_ns);
        Ok(())
    }

    /// Bytes [`NackRepr::emit`] writes: always 16.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        NACK_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_round_trips_every_byte() {
        for n in 0..=255u8 {
            assert_eq!(u8::from(NackReason::from(n)), n);
        }
        assert_eq!(NackReason::from(0x99), NackReason::Unknown(0x99));
        assert_eq!(NackReason::from(0), NackReason::Unknown(0));
        assert_eq!(NackReason::from(1), NackReason::Trimmed);
        assert_eq!(NackReason::from(7), NackReason::GenerationMismatch);
        assert_eq!(NackReason::from(8), NackReason::ReceiverNotReady);
        assert_eq!(NackReason::from(9), NackReason::Unknown(9));
    }

    #[test]
    fn parses_and_emits_known_bytes() {
        let bytes = [
            0x00, 0xAB, 0xCD, 0xEF, 0x99, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x12, 0x34,
            0x56, 0x78,
        ];
        let repr = NackRepr::parse(&Nack::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            NackRepr {
                psn: 0xAB_CDEF,
                reason: NackReason::Unknown(0x99),
                reserved: 0,
                echo_ev: 256,
                echo_ts_ns: 0x1234_5678,
            }
        );
        let mut out = [0u8; 16];
        repr.emit(&mut Nack::new_checked(&mut out[..]).unwrap())
            .unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn psn_upper_bits_are_rejected() {
        let bytes = [0x01, 0, 0, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            NackRepr::parse(&Nack::new_checked(&bytes[..]).unwrap()),
            Err(WireError::PsnOutOfRange {
                field: PsnField::Nack,
                value: 0x0100_0005
            })
        );
    }
}
