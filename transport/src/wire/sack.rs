//! SACK body (opcode 0xE0): cumulative PSN, a 64-bit receive bitmap, echoes for RTT and path
//! feedback, ECN-CE count and a receiver credit.

use super::{
    check_psn, checked_view,
    error::{HeaderKind, PsnField, WireError},
    get_u16, get_u32, get_u64, set_u16, set_u32, set_u64,
};

/// Field offsets (bytes) of the SACK body; see the diagram on [`Sack`].
mod field {
    /// Bytes 0-3: cumulative PSN (low 24 bits).
    pub const CUMULATIVE_PSN: usize = 0;
    /// Bytes 4-7: bitmap base PSN (low 24 bits).
    pub const BITMAP_BASE: usize = 4;
    /// Bytes 8-15: bitmap.
    pub const BITMAP: usize = 8;
    /// Bytes 16-19: echoed EV.
    pub const ECHO_EV: usize = 16;
    /// Bytes 20-23: echoed send timestamp.
    pub const ECHO_TS: usize = 20;
    /// Bytes 24-25: ECN-CE count.
    pub const ECN_CE_COUNT: usize = 24;
    /// Bytes 26-27: credit.
    pub const CREDIT: usize = 26;
}

/// Length of the SACK body in bytes.
pub(crate) const SACK_LEN: usize = 28;

/// Checked view of a SACK body (after the MRCETH; the BTH PSN repeats the cumulative PSN).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  must be 0    |      cumulative PSN (rcv_nxt, 24 bits)        |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  must be 0    |        bitmap base PSN (24 bits)              |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |  byte 8
/// +        bitmap (64): bit i (LSB = 0) set = PSN base+i received +
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         echoed EV (32)                        |  byte 16
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                 echoed send timestamp (ns, 32)                |  byte 20
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |      ECN-CE count (16)        |   credit (signed 16, 0 none)  |  byte 24
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct Sack<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Sack, HeaderKind::Sack, SACK_LEN);

impl<T: AsRef<[u8]>> Sack<T> {
    /// Raw 32-bit cumulative PSN slot (a valid one has the upper 8 bits zero).
    #[inline]
    pub fn cumulative_psn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::CUMULATIVE_PSN)
    }

    /// Raw 32-bit bitmap base PSN slot (a valid one has the upper 8 bits zero).
    #[inline]
    pub fn bitmap_base_psn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::BITMAP_BASE)
    }

    /// Receive bitmap: bit i (LSB = 0) set means PSN `base + i` (mod 2^24) was received.
    #[inline]
    pub fn bitmap(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::BITMAP)
    }

    /// EV of the packet that triggered this SACK.
    #[inline]
    pub fn echo_ev(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ECHO_EV)
    }

    /// Send timestamp (ns, low 32 bits) of the packet that triggered this SACK.
    #[inline]
    pub fn echo_ts_ns(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ECHO_TS)
    }

    /// Data packets with ECN CE received since the previous SACK.
    #[inline]
    pub fn ecn_ce_count(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ECN_CE_COUNT)
    }

    /// Receiver penalty (< 0) or credit (> 0); 0 = none.
    #[inline]
    pub fn credit(&self) -> i16 {
        get_u16(self.buffer.as_ref(), field::CREDIT) as i16
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Sack<T> {
    /// Sets the raw cumulative PSN slot.
    #[inline]
    pub fn set_cumulative_psn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::CUMULATIVE_PSN, v);
    }

    /// Sets the raw bitmap base PSN slot.
    #[inline]
    pub fn set_bitmap_base_psn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::BITMAP_BASE, v);
    }

    /// Sets the bitmap.
    #[inline]
    pub fn set_bitmap(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::BITMAP, v);
    }

    /// Sets the echoed EV.
    #[inline]
    pub fn set_echo_ev(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ECHO_EV, v);
    }

    /// Sets the echoed timestamp (ns, low 32 bits).
    #[inline]
    pub fn set_echo_ts_ns(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ECHO_TS, v);
    }

    /// Sets the ECN-CE count.
    #[inline]
    pub fn set_ecn_ce_count(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::ECN_CE_COUNT, v);
    }

    /// Sets the credit.
    #[inline]
    pub fn set_credit(&mut self, v: i16) {
        set_u16(self.buffer.as_mut(), field::CREDIT, v as u16);
    }
}

/// Parsed SACK body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SackRepr {
    /// `rcv_nxt`: every PSN before it was received (24 bits; equals the BTH PSN).
    pub cumulative_psn: u32,
    /// PSN of bitmap bit 0 (24 bits).
    pub bitmap_base_psn: u32,
    /// Bit i (LSB = 0) set: PSN `bitmap_base_psn + i` (mod 2^24) received.
    pub bitmap: u64,
    /// EV of the packet that triggered this SACK.
    pub echo_ev: u32,
    /// Send timestamp (ns, low 32 bits) of that packet.
    pub echo_ts_ns: u32,
    /// Data packets with ECN CE received since the previous SACK.
    pub ecn_ce_count: u16,
    /// Receiver penalty (< 0) or credit (> 0); 0 = none.
    pub credit: i16,
}

impl SackRepr {
    /// Reads every field.
    ///
    /// # Errors
    /// [`WireError::PsnOutOfRange`] (`SackCumulative` or `SackBitmapBase`) when the upper 8
    /// bits of a PSN slot are not zero.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Sack<T>) -> Result<Self, WireError> {
        let repr = SackRepr {
            cumulative_psn: h.cumulative_psn(),
            bitmap_base_psn: h.bitmap_base_psn(),
            bitmap: h.bitmap(),
            echo_ev: h.echo_ev(),
            echo_ts_ns: h.echo_ts_ns(),
            ecn_ce_count: h.ecn_ce_count(),
            credit: h.credit(),
        };
        repr.check()?;
        Ok(repr)
    }

    /// Checks both PSNs fit in 24 bits.
    ///
    /// # Errors
    /// [`WireError::PsnOutOfRange`].
    #[inline]
    pub fn check(&self) -> Result<(), WireError> {
        check_psn(PsnField::SackCumulative, self.cumulative_psn)?;
        check_psn(PsnField::SackBitmapBase, self.bitmap_base_psn)
    }

    /// Writes every field (nothing is written on error).
    ///
    /// # Errors
    /// As [`SackRepr::check`].
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Sack<T>) -> Result<(), WireError> {
        self.check()?;
        h.set_cumulative_psn(self.cumulative_psn);
        h.set_bitmap_base_psn(self.bitmap_base_psn);
        h.set_bitmap(self.bitmap);
        h.set_echo_ev(self.echo_ev);
        h.set_echo_ts_ns(self.echo_ts_ns);
        h.set_ecn_ce_count(self.ecn_ce_count);
        h.set_credit(self.credit);
        Ok(())
    }

    /// Bytes [`SackRepr::emit`] writes: always 28.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        SACK_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 28] = [
        0x00, 0x00, 0x10, 0x00, // cumulative 0x1000
        0x00, 0x00, 0x10, 0x01, // base 0x1001
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, // bitmap
        0x00, 0x00, 0x00, 0x2A, // echo EV 42
        0x00, 0x0F, 0x42, 0x40, // echo ts 1_000_000
        0x00, 0x03, // ECN-CE 3
        0xFF, 0xFE, // credit -2
    ];

    #[test]
    fn parses_and_emits_known_bytes() {
        let repr = SackRepr::parse(&Sack::new_checked(&BYTES[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            SackRepr {
                cumulative_psn: 0x1000,
                bitmap_base_psn: 0x1001,
                bitmap: 0x8000_0000_0000_0005,
                echo_ev: 42,
                echo_ts_ns: 1_000_000,
                ecn_ce_count: 3,
                credit: -2
            }
        );
        let mut out = [0u8; 28];
        repr.emit(&mut Sack::new_checked(&mut out[..]).unwrap())
            .unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn psn_upper_bits_are_rejected() {
        let mut b = BYTES;
        b[0] = 0x01;
        assert_eq!(
            SackRepr::parse(&Sack::new_checked(&b[..]).unwrap()),
            Err(WireError::PsnOutOfRange {
                field: PsnField::SackCumulative,
                value: 0x0100_1000
            })
        );
        let mut b = BYTES;
        b[4] = 0x80;
        assert_eq!(
            SackRepr::parse(&Sack::new_checked(&b[..]).unwrap()),
            Err(WireError::PsnOutOfRange {
                field: PsnField::SackBitmapBase,
                value: 0x8000_1001
            })
        );
    }
}
