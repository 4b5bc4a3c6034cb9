//! CNP body (opcode 0x81, RoCEv2 congestion notification packet): the echoed EV.

use super::{
    checked_view,
    error::{HeaderKind, WireError},
    get_u32, set_u32,
};

/// Field offsets (bytes) of the CNP body; see the diagram on [`Cnp`].
mod field {
    /// Bytes 0-3: echoed EV.
    pub const ECHO_EV: usize = 0;
    /// Bytes 4-15: reserved.
    pub const RESERVED: usize = 4;
    /// Length of the reserved field.
    pub const RESERVED_LEN: usize = 12;
}

/// Length of the CNP body in bytes.
pub(crate) const CNP_LEN: usize = 16;

/// Checked view of a CNP body (after the MRCETH).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |          echoed EV (32): EV of the CE-marked packet           |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                                                               |  byte 4
/// +                         reserved (96)                         +
/// |                                                               |
/// +                                                               +
/// |                                                               |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct Cnp<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Cnp, HeaderKind::Cnp, CNP_LEN);

impl<T: AsRef<[u8]>> Cnp<T> {
    /// EV of the CE-marked packet that caused this CNP.
    #[inline]
    pub fn echo_ev(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ECHO_EV)
    }

    /// Reserved 12 bytes (sent 0).
    #[inline]
    pub fn reserved(&self) -> [u8; 12] {
        let mut r = [0u8; field::RESERVED_LEN];
        r.copy_from_slice(&self.buffer.as_ref()[field::RESERVED..CNP_LEN]);
        r
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cnp<T> {
    /// Sets the echoed EV.
    #[inline]
    pub fn set_echo_ev(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::ECHO_EV, v);
    }

    /// Sets the reserved 12 bytes.
    #[inline]
    pub fn set_reserved(&mut self, v: [u8; 12]) {
        self.buffer.as_mut()[field::RESERVED..CNP_LEN].copy_from_slice(&v);
    }
}

/// Parsed CNP body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CnpRepr {
    /// EV of the CE-marked packet.
    pub echo_ev: u32,
    /// Reserved, sent 0, kept so a parsed packet re-emits byte-identical.
    pub reserved: [u8; 12],
}

impl CnpRepr {
    /// Reads both fields; never fails (`Result` for symmetry).
    ///
    /// # Errors
    /// None today.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Cnp<T>) -> Result<Self, WireError> {
        Ok(CnpRepr {
            echo_ev: h.echo_ev(),
            reserved: h.reserved(),
        })
    }

    /// Writes both fields.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Cnp<T>) {
        h.set_echo_ev(self.echo_ev);
        h.set_reserved(self.reserved);
    }

    /// Bytes [`CnpRepr::emit`] writes: always 16.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        CNP_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_emits_known_bytes() {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&[0x00, 0x00, 0x00, 0x07]);
        bytes[15] = 0x01;
        let repr = CnpRepr::parse(&Cnp::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut reserved = [0u8; 12];
        reserved[11] = 1;
        assert_eq!(
            repr,
            CnpRepr {
                echo_ev: 7,
                reserved
            }
        );
        let mut out = [0xFFu8; 16];
        repr.emit(&mut Cnp::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, bytes);
    }
}
