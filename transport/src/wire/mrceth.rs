//! MRCETH: the 16-byte mrc extension header that follows the BTH on every packet.

use super::{
    checked_view,
    error::{HeaderKind, WireError},
    get_u16, get_u32, set_u16, set_u32,
};

/// Field offsets (bytes) of the MRCETH; see the diagram on [`Mrceth`].
mod field {
    /// Bytes 0-3: EV.
    pub const EV: usize = 0;
    /// Bytes 4-7: MSN.
    pub const MSN: usize = 4;
    /// Bytes 8-11: send timestamp.
    pub const SEND_TS: usize = 8;
    /// Bytes 12-13: generation.
    pub const GENERATION: usize = 12;
    /// Bytes 14-15: reserved.
    pub const RESERVED: usize = 14;
}

/// Length of the MRCETH in bytes.
pub(crate) const MRCETH_LEN: usize = 16;

/// Checked view of an MRCETH.
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     EV (entropy value, 32)                    |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                 MSN (message sequence number, 32)             |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |        send timestamp (ns, low 32 bits; valid if BTH ts)      |  byte 8
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |        generation (16)        |         reserved (16)         |  byte 12
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct Mrceth<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Mrceth, HeaderKind::Mrceth, MRCETH_LEN);

impl<T: AsRef<[u8]>> Mrceth<T> {
    /// Entropy value of the path this packet was sent on.
    #[inline]
    pub fn ev(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::EV)
    }

    /// Message sequence number (data: the packet's message; control: 0).
    #[inline]
    pub fn msn(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::MSN)
    }

    /// Send timestamp, ns on the sender's clock, low 32 bits (meaningful if BTH `ts` is set).
    #[inline]
    pub fn send_ts_ns(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::SEND_TS)
    }

    /// Sender's connection generation.
    #[inline]
    pub fn generation(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::GENERATION)
    }

    /// Reserved 16 bits (sent 0).
    #[inline]
    pub fn reserved(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::RESERVED)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mrceth<T> {
    /// Sets the EV.
    #[inline]
    pub fn set_ev(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::EV, v);
    }

    /// Sets the MSN.
    #[inline]
    pub fn set_msn(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::MSN, v);
    }

    /// Sets the send timestamp (ns, low 32 bits).
    #[inline]
    pub fn set_send_ts_ns(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::SEND_TS, v);
    }

    /// Sets the generation.
    #[inline]
    pub fn set_generation(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::GENERATION, v);
    }

    /// Sets the reserved 16 bits.
    #[inline]
    pub fn set_reserved(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::RESERVED, v);
    }
}

/// Parsed MRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MrcethRepr {
    /// Entropy value (EV) of the path this packet was sent on.
    pub ev: u32,
    /// Message sequence number; 0 on control packets.
    pub msn: u32,
    /// Send timestamp, ns on the sender's clock truncated to 32 bits; meaningful only when
    /// the BTH `ts` flag is set.
    pub send_ts_ns: u32,
    /// Sender's connection generation (a restarted peer has another).
    pub generation: u16,
    /// Reserved, sent 0, kept so a parsed packet re-emits byte-identical.
    pub reserved: u16,
}

impl MrcethRepr {
    /// Reads every field; never fails (`Result` for symmetry).
    ///
    /// # Errors
    /// None today.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Mrceth<T>) -> Result<Self, WireError> {
        Ok(MrcethRepr {
            ev: h.ev(),
            msn: h.msn(),
            send_ts_ns: h.send_ts_ns(),
            generation: h.generation(),
            reserved: h.reserved(),
        })
    }

    /// Writes every field into `h`.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Mrceth<T>) {
        h.set_ev(self.ev);
        h.set_msn(self.msn);
        h.set_send_ts_ns(self.send_ts_ns);
        h.set_generation(self.generation);
        h.set_reserved(self.reserved);
    }

    /// Bytes [`MrcethRepr::emit`] writes: always 16.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        MRCETH_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 16] = [
        0xDE, 0xAD, 0xBE, 0xEF, // EV
        0x00, 0x00, 0x01, 0x02, // MSN
        0x80, 0x00, 0x00, 0x07, // send ts
        0x00, 0x03, // generation
        0x00, 0x00, // reserved
    ];

    #[test]
    fn parses_and_emits_known_bytes() {
        let repr = MrcethRepr::parse(&Mrceth::new_checked(&BYTES[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            MrcethRepr {
                ev: 0xDEAD_BEEF,
                msn: 0x102,
                send_ts_ns: 0x8000_0007,
                generation: 3,
                reserved: 0
            }
        );
        let mut out = [0xAAu8; 16];
        repr.emit(&mut Mrceth::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, BYTES);
        assert_eq!(repr.buffer_len(), 16);
    }

    #[test]
    fn reserved_is_preserved() {
        let mut bytes = BYTES;
        bytes[14] = 0x12;
        bytes[15] = 0x34;
        let repr = MrcethRepr::parse(&Mrceth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.reserved, 0x1234);
        let mut out = [0u8; 16];
        repr.emit(&mut Mrceth::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, bytes);
    }

    #[test]
    fn short_buffer_is_truncated_and_rest_is_exact() {
        for n in 0..16 {
            assert_eq!(
                Mrceth::new_checked(&BYTES[..n]).err(),
                Some(WireError::Truncated {
                    header: HeaderKind::Mrceth,
                    need: 16,
                    have: n
                })
            );
        }
        let mut long = BYTES.to_vec();
        long.extend_from_slice(&[1, 2, 3]);
        assert_eq!(Mrceth::new_checked(&long[..]).unwrap().rest(), &[1, 2, 3]);
        assert_eq!(
            Mrceth::new_checked(&long[..]).unwrap().into_rest(),
            &[1, 2, 3]
        );
    }
}
