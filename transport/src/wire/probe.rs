//! EV probe (opcode 0xE2) and EV probe reply (opcode 0xE3) bodies: test whether a path (EV)
//! that was marked bad delivers again, and measure its RTT.

use super::{
    checked_view,
    error::{HeaderKind, WireError},
    get_u32, set_u32,
};

/// Field offsets (bytes) of the probe and probe-reply bodies.
mod field {
    /// Both: bytes 0-3, probe sequence number.
    pub const PROBE_SEQ: usize = 0;
    /// Probe: bytes 4-7, reserved.
    pub const RESERVED: usize = 4;
    /// Reply: bytes 4-7, echoed EV.
    pub const ECHO_EV: usize = 4;
    /// Reply: bytes 8-11, echoed send timestamp.
    pub const ECHO_TS: usize = 8;
}

/// Length of the EV probe body in bytes.
pub(crate) const PROBE_LEN: usize = 8;
/// Length of the EV probe reply body in bytes.
pub(crate) const PROBE_REPLY_LEN: usize = 12;

/// Checked view of an EV probe body (after the MRCETH, whose EV names the probed path).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     probe sequence (32)                       |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                        reserved (32)                          |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct Probe<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Probe, HeaderKind::Probe, PROBE_LEN);

impl<T: AsRef<[u8]>> Probe<T> {
    /// Probe sequence number (chosen by the prober, echoed in the reply).
    #[inline]
    pub fn probe_seq(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::PROBE_SEQ)
    }

    /// Reserved 32 bits (sent 0).
    #[inline]
    pub fn reserved(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::RESERVED)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Probe<T> {
    /// Sets the probe sequence number.
    #[inline]
    pub fn set_probe_seq(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::PROBE_SEQ, v);
    }

    /// Sets the reserved 32 bits.
    #[inline]
    pub fn set_reserved(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RESERVED, v);
    }
}

/// Parsed EV probe body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProbeRepr {
    /// Probe sequence number.
    pub probe_seq: u32,
    /// Reserved, sent 0, kept so a parsed packet re-emits byte-identical.
    pub reserved: u32,
}

impl ProbeRepr {
    /// Reads both fields; never fails (`Result` for symmetry).
    ///
    /// # Errors
    /// None today.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Probe<T>) -> Result<Self, WireError> {
        Ok(ProbeRepr {
            probe_seq: h.probe_seq(),
            reserved: h.reserved(),
        })
    }

    /// Writes both fields.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Probe<T>) {
        h.set_probe_seq(self.probe_seq);
        h.set_reserved(self.reserved);
    }

    /// Bytes [`ProbeRepr::emit`] writes: always 8.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        PROBE_LEN
    }
}

/// Checked view of an EV probe reply body (after the MRCETH).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                  probe sequence (32, echoed)                  |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |               echoed EV (32): the probe's EV                  |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |      echoed timestamp (ns, 32): the probe's send timestamp    |  byte 8
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone)]
pub struct ProbeReply<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(ProbeReply, HeaderKind::ProbeReply, PROBE_REPLY_LEN);

impl<T: AsRef<[u8]>> ProbeReply<T> {
    /// Probe sequence number, echoed from the probe.
    #[inline]
    pub fn probe_seq(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::PROBE_SEQ)
    }

    /// EV the probe was sent on.
    #[inline]
    pub fn echo_ev(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ECHO_EV)
    }

    /// The probe's send timestamp (ns, low 32 bits).
    #[inline]
    pub fn echo_ts_ns(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ECHO_TS)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ProbeReply<T> {
    /// Sets the probe sequence number.
    #[inline]
    pub fn set_probe_seq(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::PROBE_SEQ, v);
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
}

/// Parsed EV probe reply body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProbeReplyRepr {
    /// Probe sequence number, echoed.
    pub probe_seq: u32,
    /// EV the probe was sent on.
    pub echo_ev: u32,
    /// The probe's send timestamp (ns, low 32 bits).
    pub echo_ts_ns: u32,
}

impl ProbeReplyRepr {
    /// Reads the three fields; never fails (`Result` for symmetry).
    ///
    /// # Errors
    /// None today.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &ProbeReply<T>) -> Result<Self, WireError> {
        Ok(ProbeReplyRepr {
            probe_seq: h.probe_seq(),
            echo_ev: h.echo_ev(),
            echo_ts_ns: h.echo_ts_ns(),
        })
    }

    /// Writes the three fields.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ProbeReply<T>) {
        h.set_probe_seq(self.probe_seq);
        h.set_echo_ev(self.echo_ev);
        h.set_echo_ts_ns(self.echo_ts_ns);
    }

    /// Bytes [`ProbeReplyRepr::emit`] writes: always 12.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        PROBE_REPLY_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_known_bytes() {
        let bytes = [0, 0, 0, 9, 0xAA, 0xBB, 0xCC, 0xDD];
        let repr = ProbeRepr::parse(&Probe::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            ProbeRepr {
                probe_seq: 9,
                reserved: 0xAABB_CCDD
            }
        );
        let mut out = [0u8; 8];
        repr.emit(&mut Probe::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, bytes);
    }

    #[test]
    fn probe_reply_known_bytes() {
        let bytes = [0, 0, 0, 9, 0, 0, 1, 0, 0x3B, 0x9A, 0xCA, 0x00];
        let repr = ProbeReplyRepr::parse(&ProbeReply::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            ProbeReplyRepr {
                probe_seq: 9,
                echo_ev: 256,
                echo_ts_ns: 1_000_000_000
            }
        );
        let mut out = [0u8; 12];
        repr.emit(&mut ProbeReply::new_checked(&mut out[..]).unwrap());
        assert_eq!(out, bytes);
    }
}
