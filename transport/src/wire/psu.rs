//! Port Status Update body (opcode 0xE4): tells the peer which of the sender's planes (NIC
//! ports) are up, and acknowledges the peer's update. OCP MRC 1.0 names the message; this
//! layout is mrc's ([`crate::path::plane`] has the rules, docs/WIRE.md the picture).

use super::{
    checked_view,
    error::{HeaderKind, WireError},
    get_u32, set_u32,
};

/// Field offsets (bytes) of the Port Status Update body.
mod field {
    /// Bytes 0-3: the update's sequence number (the sender's; echoed by an ack).
    pub const PSU_SEQ: usize = 0;
    /// Bytes 4-7: bitmap of the sender's planes that are up (bit `q` for plane `q`).
    pub const UP_PLANES: usize = 4;
    /// Byte 8: number of planes the sender has (1..=32).
    pub const PLANES: usize = 8;
    /// Byte 9: flags (`ACK`).
    pub const FLAGS: usize = 9;
    /// Bytes 10-11: reserved.
    pub const RESERVED: usize = 10;
}

/// Flag bit of byte 9: the packet acknowledges the peer's update `psu_seq` (its bitmap
/// then carries the acknowledger's own planes, informational).
pub const ACK: u8 = 0x80;

/// Length of the Port Status Update body in bytes.
pub(crate) const PSU_LEN: usize = 12;

/// Checked view of a Port Status Update body (after the MRCETH).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |            update sequence (32; an ack echoes the peer's)     |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |      up planes (32): bit q set = the sender's plane q is up   |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  planes (8)   |A|  flags (7)  |         reserved (16)         |  byte 8
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct PortStatus<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(PortStatus, HeaderKind::PortStatus, PSU_LEN);

impl<T: AsRef<[u8]>> PortStatus<T> {
    /// Update sequence number.
    #[inline]
    pub fn psu_seq(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::PSU_SEQ)
    }

    /// Bitmap of the sender's planes that are up.
    #[inline]
    pub fn up_planes(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::UP_PLANES)
    }

    /// Number of planes the sender has.
    #[inline]
    pub fn planes(&self) -> u8 {
        self.buffer.as_ref()[field::PLANES]
    }

    /// Flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Reserved 16 bits.
    #[inline]
    pub fn reserved(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::RESERVED], b[field::RESERVED + 1]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PortStatus<T> {
    /// Sets the update sequence number.
    #[inline]
    pub fn set_psu_seq(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::PSU_SEQ, v);
    }

    /// Sets the up-planes bitmap.
    #[inline]
    pub fn set_up_planes(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::UP_PLANES, v);
    }

    /// Sets the plane count.
    #[inline]
    pub fn set_planes(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLANES] = v;
    }

    /// Sets the flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the reserved 16 bits.
    #[inline]
    pub fn set_reserved(&mut self, v: u16) {
        let b = self.buffer.as_mut();
        b[field::RESERVED..field::RESERVED + 2].copy_from_slice(&v.to_be_bytes());
    }
}

/// Parsed Port Status Update body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortStatusRepr {
    /// Update sequence number (an ack: the peer's, echoed).
    pub psu_seq: u32,
    /// Bitmap of the sender's planes that are up (bit `q` for plane `q`).
    pub up_planes: u32,
    /// Number of planes the sender has.
    pub planes: u8,
    /// Whether this acknowledges the peer's update `psu_seq`.
    pub ack: bool,
    /// Flag bits other than the ack flag (0x80) (sent 0), kept so a parsed packet re-emits
    /// byte-identical.
    pub other_flags: u8,
    /// Reserved, sent 0, kept for the same reason.
    pub reserved: u16,
}

impl PortStatusRepr {
    /// Reads the fields.
    ///
    /// # Errors
    /// [`WireError::BadPortStatus`] when the plane count is outside `1..=32`, or the up
    /// bitmap names a plane at or above it.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &PortStatus<T>) -> Result<Self, WireError> {
        let flags = h.flags();
        let r = PortStatusRepr {
            psu_seq: h.psu_seq(),
            up_planes: h.up_planes(),
            planes: h.planes(),
            ack: flags & ACK != 0,
            other_flags: flags & !ACK,
            reserved: h.reserved(),
        };
        r.check()?;
        Ok(r)
    }

    /// Checks the plane count (`1..=32`) and that the bitmap names no plane at or above it.
    ///
    /// # Errors
    /// [`WireError::BadPortStatus`].
    #[inline]
    pub fn check(&self) -> Result<(), WireError> {
        let (planes, up_planes) = (self.planes, self.up_planes);
        if planes == 0 || planes > 32 || (planes < 32 && up_planes >> planes != 0) {
            return Err(WireError::BadPortStatus { planes, up_planes });
        }
        Ok(())
    }

    /// Writes the fields.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut PortStatus<T>) {
        h.set_psu_seq(self.psu_seq);
        h.set_up_planes(self.up_planes);
        h.set_planes(self.planes);
        h.set_flags(if self.ack { ACK } else { 0 } | (self.other_flags & !ACK));
        h.set_reserved(self.reserved);
    }

    /// Bytes [`PortStatusRepr::emit`] writes: always 12.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        PSU_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_exact_bytes() {
        let r = PortStatusRepr {
            psu_seq: 0x0102_0304,
            up_planes: 0b1011,
            planes: 4,
            ack: true,
            other_flags: 0,
            reserved: 0,
        };
        let mut b = [0u8; PSU_LEN];
        r.emit(&mut PortStatus::new_checked(&mut b[..]).unwrap());
        assert_eq!(b, [1, 2, 3, 4, 0, 0, 0, 0b1011, 4, 0x80, 0, 0]);
        let v = PortStatus::new_checked(&b[..]).unwrap();
        assert_eq!(PortStatusRepr::parse(&v).unwrap(), r);
    }

    #[test]
    fn bad_plane_counts_and_bitmaps_are_refused() {
        let mut b = [0u8; PSU_LEN];
        let v = PortStatus::new_checked(&b[..]).unwrap();
        assert_eq!(
            PortStatusRepr::parse(&v),
            Err(WireError::BadPortStatus {
                planes: 0,
                up_planes: 0
            })
        );
        b[8] = 33;
        let v = PortStatus::new_checked(&b[..]).unwrap();
        assert!(PortStatusRepr::parse(&v).is_err());
        b[8] = 2;
        b[7] = 0b100; // plane 2 of 2
        let v = PortStatus::new_checked(&b[..]).unwrap();
        assert_eq!(
            PortStatusRepr::parse(&v),
            Err(WireError::BadPortStatus {
                planes: 2,
                up_planes: 0b100
            })
        );
        b[8] = 32;
        b[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let v = PortStatus::new_checked(&b[..]).unwrap();
        assert_eq!(PortStatusRepr::parse(&v).unwrap().up_planes, u32::MAX);
        assert_eq!(
            PortStatus::new_checked(&b[..11]).unwrap_err(),
            WireError::Truncated {
                header: HeaderKind::PortStatus,
                need: 12,
                have: 11
            }
        );
    }
}
