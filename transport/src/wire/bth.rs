//! Base Transport Header: the 12-byte RoCEv2 / InfiniBand BTH layout (IBA vol 1, 9.2), so
//! Wireshark's RoCE dissector names our opcodes, QPNs and PSNs.

use super::{
    MAX_24BIT, check_psn, checked_view,
    error::{HeaderKind, PsnField, WireError},
    get_u16, get_u24, set_u16, set_u24,
};

/// Field offsets (bytes) and bit masks of the BTH; see the diagram on [`Bth`].
mod field {
    /// Byte 0: opcode.
    pub const OPCODE: usize = 0;
    /// Byte 1: SE(1) M(1) PadCnt(2) TVer(4); all kept raw in [`super::BthSpare`].
    pub const SE_M_PAD_TVER: usize = 1;
    /// Bytes 2-3: P_Key.
    pub const PKEY: usize = 2;
    /// Byte 4: FECN(1) BECN(1) Resv6(6); we use Resv6's top bit as `trimmed`.
    pub const FECN_BECN_RESV6: usize = 4;
    /// Bytes 5-7: destination QPN (24 bits).
    pub const DEST_QPN: usize = 5;
    /// Byte 8: AckReq(1) Resv7(7); we use Resv7 bits 0x40 `rtx`, 0x20 `ts`.
    pub const ACKREQ_RESV7: usize = 8;
    /// Bytes 9-11: PSN (24 bits).
    pub const PSN: usize = 9;

    /// Byte 4 bit: a switch cut this packet's payload.
    pub const TRIMMED: u8 = 0x20;
    /// Byte 8 bit: the receiver should acknowledge now (IBA AckReq).
    pub const ACK_REQ: u8 = 0x80;
    /// Byte 8 bit: retransmission.
    pub const RTX: u8 = 0x40;
    /// Byte 8 bit: MRCETH send timestamp valid.
    pub const TS: u8 = 0x20;
}

/// Length of the BTH in bytes.
pub(crate) const BTH_LEN: usize = 12;

/// BTH opcode (byte 0). Data opcodes use the IBA RC values; mrc control opcodes sit in the
/// manufacturer-specific range 0xE0-0xE3; CNP is the RoCEv2 value 0x81.
///
/// `Opcode::from(n)` never fails: codes we do not know become `Unknown(n)`, and
/// `u8::from(Opcode::from(n)) == n` for every `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// 0x00 RC SEND_FIRST.
    SendFirst,
    /// 0x01 RC SEND_MIDDLE.
    SendMiddle,
    /// 0x02 RC SEND_LAST.
    SendLast,
    /// 0x03 RC SEND_LAST_WITH_IMMEDIATE.
    SendLastWithImmediate,
    /// 0x04 RC SEND_ONLY.
    SendOnly,
    /// 0x05 RC SEND_ONLY_WITH_IMMEDIATE.
    SendOnlyWithImmediate,
    /// 0x06 RC RDMA_WRITE_FIRST.
    RdmaWriteFirst,
    /// 0x07 RC RDMA_WRITE_MIDDLE.
    RdmaWriteMiddle,
    /// 0x08 RC RDMA_WRITE_LAST.
    RdmaWriteLast,
    /// 0x09 RC RDMA_WRITE_LAST_WITH_IMMEDIATE.
    RdmaWriteLastWithImmediate,
    /// 0x0A RC RDMA_WRITE_ONLY.
    RdmaWriteOnly,
    /// 0x0B RC RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    RdmaWriteOnlyWithImmediate,
    /// 0x81 RoCEv2 congestion notification packet.
    Cnp,
    /// 0xE0 mrc selective acknowledgement.
    Sack,
    /// 0xE1 mrc negative acknowledgement.
    Nack,
    /// 0xE2 mrc EV probe.
    EvProbe,
    /// 0xE3 mrc EV probe reply.
    EvProbeReply,
    /// 0xE4 mrc Port Status Update (and its acknowledgement).
    PortStatus,
    /// Any other code; the packet's BTH and MRCETH still parse.
    Unknown(u8),
}

impl From<u8> for Opcode {
    #[inline]
    fn from(code: u8) -> Self {
        match code {
            0x00 => Opcode::SendFirst,
            0x01 => Opcode::SendMiddle,
            0x02 => Opcode::SendLast,
            0x03 => Opcode::SendLastWithImmediate,
            0x04 => Opcode::SendOnly,
            0x05 => Opcode::SendOnlyWithImmediate,
            0x06 => Opcode::RdmaWriteFirst,
            0x07 => Opcode::RdmaWriteMiddle,
            0x08 => Opcode::RdmaWriteLast,
            0x09 => Opcode::RdmaWriteLastWithImmediate,
            0x0A => Opcode::RdmaWriteOnly,
            0x0B => Opcode::RdmaWriteOnlyWithImmediate,
            0x81 => Opcode::Cnp,
            0xE0 => Opcode::Sack,
            0xE1 => Opcode::Nack,
            0xE2 => Opcode::EvProbe,
            0xE3 => Opcode::EvProbeReply,
            0xE4 => Opcode::PortStatus,
            n => Opcode::Unknown(n),
        }
    }
}

impl From<Opcode> for u8 {
    #[inline]
    fn from(op: Opcode) -> u8 {
        match op {
            Opcode::SendFirst => 0x00,
            Opcode::SendMiddle => 0x01,
            Opcode::SendLast => 0x02,
            Opcode::SendLastWithImmediate => 0x03,
            Opcode::SendOnly => 0x04,
            Opcode::SendOnlyWithImmediate => 0x05,
            Opcode::RdmaWriteFirst => 0x06,
            Opcode::RdmaWriteMiddle => 0x07,
            Opcode::RdmaWriteLast => 0x08,
            Opcode::RdmaWriteLastWithImmediate => 0x09,
            Opcode::RdmaWriteOnly => 0x0A,
            Opcode::RdmaWriteOnlyWithImmediate => 0x0B,
            Opcode::Cnp => 0x81,
            Opcode::Sack => 0xE0,
            Opcode::Nack => 0xE1,
            Opcode::EvProbe => 0xE2,
            Opcode::EvProbeReply => 0xE3,
            Opcode::PortStatus => 0xE4,
            Opcode::Unknown(n) => n,
        }
    }
}

impl Opcode {
    /// A SEND_* opcode (data, no RETH).
    #[inline]
    pub fn is_send(self) -> bool {
        matches!(
            self,
            Opcode::SendFirst
                | Opcode::SendMiddle
                | Opcode::SendLast
                | Opcode::SendLastWithImmediate
                | Opcode::SendOnly
                | Opcode::SendOnlyWithImmediate
        )
    }

    /// An RDMA_WRITE_* opcode (data with RETH).
    #[inline]
    pub fn is_rdma_write(self) -> bool {
        matches!(
            self,
            Opcode::RdmaWriteFirst
                | Opcode::RdmaWriteMiddle
                | Opcode::RdmaWriteLast
                | Opcode::RdmaWriteLastWithImmediate
                | Opcode::RdmaWriteOnly
                | Opcode::RdmaWriteOnlyWithImmediate
        )
    }

    /// A data opcode: MSGETH follows MRCETH, then payload.
    #[inline]
    pub fn is_data(self) -> bool {
        self.is_send() || self.is_rdma_write()
    }

    /// Carries a RETH (every RDMA_WRITE_* packet, per mrc wire v1).
    #[inline]
    pub fn has_reth(self) -> bool {
        self.is_rdma_write()
    }

    /// Carries 4 bytes of immediate data (the *_WITH_IMMEDIATE opcodes).
    #[inline]
    pub fn has_immediate(self) -> bool {
        matches!(
            self,
            Opcode::SendLastWithImmediate
                | Opcode::SendOnlyWithImmediate
                | Opcode::RdmaWriteLastWithImmediate
                | Opcode::RdmaWriteOnlyWithImmediate
        )
    }

    /// First packet of a message (FIRST or ONLY).
    #[inline]
    pub fn is_first(self) -> bool {
        matches!(
            self,
            Opcode::SendFirst
                | Opcode::SendOnly
                | Opcode::SendOnlyWithImmediate
                | Opcode::RdmaWriteFirst
                | Opcode::RdmaWriteOnly
                | Opcode::RdmaWriteOnlyWithImmediate
        )
    }

    /// Last packet of a message (LAST or ONLY, with or without immediate).
    #[inline]
    pub fn is_last(self) -> bool {
        matches!(
            self,
            Opcode::SendLast
                | Opcode::SendLastWithImmediate
                | Opcode::SendOnly
                | Opcode::SendOnlyWithImmediate
                | Opcode::RdmaWriteLast
                | Opcode::RdmaWriteLastWithImmediate
                | Opcode::RdmaWriteOnly
                | Opcode::RdmaWriteOnlyWithImmediate
        )
    }
}

/// Checked view of a BTH.
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |    opcode     |S|M|Pad|  TVer |             P_Key             |  byte 0
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |F|B|T|  resv   |          destination QPN (24 bits)            |  byte 4
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |A|R|S|  resv   |                PSN (24 bits)                  |  byte 8
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
///  S SE, M MigReq, Pad PadCnt, TVer: IBA, sent 0, kept raw
///  F FECN, B BECN: IBA, sent 0, kept raw;  T (0x20 of byte 4): trimmed
///  A (0x80 of byte 8): AckReq;  R (0x40): rtx;  S (0x20): ts (send timestamp valid)
/// ```
#[derive(Debug, Clone)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

checked_view!(Bth, HeaderKind::Bth, BTH_LEN);

impl<T: AsRef<[u8]>> Bth<T> {
    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Opcode (byte 0).
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.b()[field::OPCODE])
    }

    /// Byte 1 raw: SE, MigReq, PadCnt, TVer.
    #[inline]
    pub fn se_m_pad_tver(&self) -> u8 {
        self.b()[field::SE_M_PAD_TVER]
    }

    /// Partition key (bytes 2-3).
    #[inline]
    pub fn pkey(&self) -> u16 {
        get_u16(self.b(), field::PKEY)
    }

    /// Byte 4 raw: FECN, BECN, Resv6 (including the trimmed bit).
    #[inline]
    pub fn fecn_becn_resv6(&self) -> u8 {
        self.b()[field::FECN_BECN_RESV6]
    }

    /// Trimmed flag (byte 4, 0x20): a switch cut this packet's payload.
    #[inline]
    pub fn trimmed(&self) -> bool {
        self.fecn_becn_resv6() & field::TRIMMED != 0
    }

    /// Destination queue pair number (24 bits, bytes 5-7).
    #[inline]
    pub fn dest_qpn(&self) -> u32 {
        get_u24(self.b(), field::DEST_QPN)
    }

    /// Byte 8 raw: AckReq, Resv7 (including rtx and ts).
    #[inline]
    pub fn ackreq_resv7(&self) -> u8 {
        self.b()[field::ACKREQ_RESV7]
    }

    /// AckReq flag (byte 8, 0x80).
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.ackreq_resv7() & field::ACK_REQ != 0
    }

    /// Retransmission flag (byte 8, 0x40).
    #[inline]
    pub fn rtx(&self) -> bool {
        self.ackreq_resv7() & field::RTX != 0
    }

    /// Send-timestamp-valid flag (byte 8, 0x20).
    #[inline]
    pub fn ts(&self) -> bool {
        self.ackreq_resv7() & field::TS != 0
    }

    /// Packet sequence number (24 bits, bytes 9-11).
    #[inline]
    pub fn psn(&self) -> u32 {
        get_u24(self.b(), field::PSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    #[inline]
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the opcode byte.
    #[inline]
    pub fn set_opcode(&mut self, op: Opcode) {
        self.b_mut()[field::OPCODE] = op.into();
    }

    /// Sets byte 1 raw (SE, MigReq, PadCnt, TVer).
    #[inline]
    pub fn set_se_m_pad_tver(&mut self, v: u8) {
        self.b_mut()[field::SE_M_PAD_TVER] = v;
    }

    /// Sets the P_Key.
    #[inline]
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.b_mut(), field::PKEY, v);
    }

    /// Sets byte 4 raw (FECN, BECN, Resv6 including trimmed).
    #[inline]
    pub fn set_fecn_becn_resv6(&mut self, v: u8) {
        self.b_mut()[field::FECN_BECN_RESV6] = v;
    }

    /// Sets the destination QPN; only the low 24 bits of `qpn` are written.
    #[inline]
    pub fn set_dest_qpn(&mut self, qpn: u32) {
        set_u24(self.b_mut(), field::DEST_QPN, qpn);
    }

    /// Sets byte 8 raw (AckReq, Resv7 including rtx and ts).
    #[inline]
    pub fn set_ackreq_resv7(&mut self, v: u8) {
        self.b_mut()[field::ACKREQ_RESV7] = v;
    }

    /// Sets the PSN; only the low 24 bits of `psn` are written.
    #[inline]
    pub fn set_psn(&mut self, psn: u32) {
        set_u24(self.b_mut(), field::PSN, psn);
    }
}

/// The BTH flags mrc interprets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BthFlags {
    /// AckReq (byte 8, 0x80): acknowledge this packet now.
    pub ack_req: bool,
    /// Retransmission (byte 8, 0x40).
    pub rtx: bool,
    /// MRCETH send timestamp valid (byte 8, 0x20).
    pub ts: bool,
    /// A switch cut the payload (byte 4, 0x20).
    pub trimmed: bool,
}

/// The BTH bits mrc does not interpret, kept so a parsed packet re-emits byte-identical.
/// Packets mrc builds use [`BthSpare::default`] (all zero).
///
/// The constructor clears the bits [`BthFlags`] owns, so a `BthSpare` never overlaps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BthSpare {
    byte1: u8,
    byte4: u8,
    byte8: u8,
}

impl BthSpare {
    /// Spare bits from raw BTH bytes 1, 4 and 8; the trimmed bit of byte 4 and the AckReq,
    /// rtx and ts bits of byte 8 are cleared.
    #[inline]
    pub fn new(byte1: u8, byte4: u8, byte8: u8) -> Self {
        BthSpare {
            byte1,
            byte4: byte4 & !field::TRIMMED,
            byte8: byte8 & !(field::ACK_REQ | field::RTX | field::TS),
        }
    }

    /// Byte 1: SE(0x80), MigReq(0x40), PadCnt(0x30), TVer(0x0F).
    #[inline]
    pub fn byte1(self) -> u8 {
        self.byte1
    }

    /// Byte 4 without the trimmed bit: FECN(0x80), BECN(0x40), reserved(0x1F).
    #[inline]
    pub fn byte4(self) -> u8 {
        self.byte4
    }

    /// Byte 8 without AckReq, rtx, ts: reserved (0x1F).
    #[inline]
    pub fn byte8(self) -> u8 {
        self.byte8
    }
}

/// Parsed BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Partition key; mrc sends 0xFFFF (the IBA default partition).
    pub pkey: u16,
    /// Destination QPN, 24 bits (emit of a larger value: [`WireError::QpnOutOfRange`]).
    pub dest_qpn: u32,
    /// PSN, 24 bits (emit of a larger value: [`WireError::PsnOutOfRange`]).
    pub psn: u32,
    /// Flags mrc uses.
    pub flags: BthFlags,
    /// Bits mrc does not use, preserved.
    pub spare: BthSpare,
}

impl BthRepr {
    /// The default P_Key mrc sends.
    pub const DEFAULT_PKEY: u16 = 0xFFFF;

    /// Reads every field of `bth`; never fails (every bit pattern is a valid BTH), returns
    /// `Result` for symmetry with the other headers.
    ///
    /// # Errors
    /// None today.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<Self, WireError> {
        Ok(BthRepr {
            opcode: bth.opcode(),
            pkey: bth.pkey(),
            dest_qpn: bth.dest_qpn(),
            psn: bth.psn(),
            flags: BthFlags {
                ack_req: bth.ack_req(),
                rtx: bth.rtx(),
                ts: bth.ts(),
                trimmed: bth.trimmed(),
            },
            spare: BthSpare::new(
                bth.se_m_pad_tver(),
                bth.fecn_becn_resv6(),
                bth.ackreq_resv7(),
            ),
        })
    }

    /// Checks the 24-bit fields fit.
    ///
    /// # Errors
    /// [`WireError::QpnOutOfRange`], [`WireError::PsnOutOfRange`] (`PsnField::Bth`).
    #[inline]
    pub fn check(&self) -> Result<(), WireError> {
        if self.dest_qpn > MAX_24BIT {
            return Err(WireError::QpnOutOfRange {
                value: self.dest_qpn,
            });
        }
        check_psn(PsnField::Bth, self.psn)
    }

    /// Writes every field into `bth` (nothing is written on error).
    ///
    /// # Errors
    /// As [`BthRepr::check`].
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) -> Result<(), WireError> {
        self.check()?;
        self.write(bth);
        Ok(())
    }

    /// [`BthRepr::emit`] of a repr that passed [`BthRepr::check`].
    #[inline(always)]
    pub(crate) fn write<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.set_opcode(self.opcode);
        bth.set_se_m_pad_tver(self.spare.byte1);
        bth.set_pkey(self.pkey);
        let trimmed = if self.flags.trimmed {
            field::TRIMMED
        } else {
            0
        };
        bth.set_fecn_becn_resv6(self.spare.byte4 | trimmed);
        bth.set_dest_qpn(self.dest_qpn);
        let mut b8 = self.spare.byte8;
        if self.flags.ack_req {
            b8 |= field::ACK_REQ;
        }
        if self.flags.rtx {
            b8 |= field::RTX;
        }
        if self.flags.ts {
            b8 |= field::TS;
        }
        bth.set_ackreq_resv7(b8);
        bth.set_psn(self.psn);
    }

    /// Bytes [`BthRepr::emit`] writes: always 12.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        BTH_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RDMA_WRITE_ONLY, P_Key 0xFFFF, QPN 0x123456, AckReq + rtx + ts, PSN 0xABCDEF.
    const WRITE_ONLY: [u8; 12] = [
        0x0A, 0x00, 0xFF, 0xFF, 0x00, 0x12, 0x34, 0x56, 0xE0, 0xAB, 0xCD, 0xEF,
    ];

    #[test]
    fn parses_known_bytes() {
        let repr = BthRepr::parse(&Bth::new_checked(&WRITE_ONLY[..]).unwrap()).unwrap();
        assert_eq!(repr.opcode, Opcode::RdmaWriteOnly);
        assert_eq!(repr.pkey, 0xFFFF);
        assert_eq!(repr.dest_qpn, 0x12_3456);
        assert_eq!(repr.psn, 0xAB_CDEF);
        assert_eq!(
            repr.flags,
            BthFlags {
                ack_req: true,
                rtx: true,
                ts: true,
                trimmed: false
            }
        );
        assert_eq!(repr.spare, BthSpare::default());
    }

    #[test]
    fn emits_known_bytes() {
        let repr = BthRepr {
            opcode: Opcode::RdmaWriteOnly,
            pkey: BthRepr::DEFAULT_PKEY,
            dest_qpn: 0x12_3456,
            psn: 0xAB_CDEF,
            flags: BthFlags {
                ack_req: true,
                rtx: true,
                ts: true,
                trimmed: false,
            },
            spare: BthSpare::default(),
        };
        let mut buf = [0x55u8; 12];
        repr.emit(&mut Bth::new_checked(&mut buf[..]).unwrap())
            .unwrap();
        assert_eq!(buf, WRITE_ONLY);
        assert_eq!(repr.buffer_len(), 12);
    }

    #[test]
    fn each_flag_is_its_own_bit() {
        let cases = [
            (
                BthFlags {
                    ack_req: true,
                    ..Default::default()
                },
                0x00,
                0x80,
            ),
            (
                BthFlags {
                    rtx: true,
                    ..Default::default()
                },
                0x00,
                0x40,
            ),
            (
                BthFlags {
                    ts: true,
                    ..Default::default()
                },
                0x00,
                0x20,
            ),
            (
                BthFlags {
                    trimmed: true,
                    ..Default::default()
                },
                0x20,
                0x00,
            ),
        ];
        for (flags, byte4, byte8) in cases {
            let repr = BthRepr {
                opcode: Opcode::Sack,
                pkey: 0,
                dest_qpn: 0,
                psn: 0,
                flags,
                spare: BthSpare::default(),
            };
            let mut buf = [0u8; 12];
            repr.emit(&mut Bth::new_checked(&mut buf[..]).unwrap())
                .unwrap();
            assert_eq!((buf[4], buf[8]), (byte4, byte8), "{flags:?}");
            let back = BthRepr::parse(&Bth::new_checked(&buf[..]).unwrap()).unwrap();
            assert_eq!(back, repr);
        }
    }

    #[test]
    fn spare_bits_are_preserved() {
        let bytes = [
            0x42, 0xFF, 0x80, 0x00, 0xDF, 0x00, 0x00, 0x01, 0x1F, 0x00, 0x00, 0x02,
        ];
        let repr = BthRepr::parse(&Bth::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.opcode, Opcode::Unknown(0x42));
        assert_eq!(repr.spare.byte1(), 0xFF);
        assert_eq!(repr.spare.byte4(), 0xDF);
        assert_eq!(repr.spare.byte8(), 0x1F);
        assert_eq!(repr.flags, BthFlags::default());
        let mut out = [0u8; 12];
        repr.emit(&mut Bth::new_checked(&mut out[..]).unwrap())
            .unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn spare_constructor_clears_flag_bits() {
        let s = BthSpare::new(0xFF, 0xFF, 0xFF);
        assert_eq!((s.byte1(), s.byte4(), s.byte8()), (0xFF, 0xDF, 0x1F));
    }

    #[test]
    fn out_of_range_24bit_fields_are_emit_errors() {
        let mut repr = BthRepr {
            opcode: Opcode::SendOnly,
            pkey: 0xFFFF,
            dest_qpn: 0x100_0000,
            psn: 0,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        };
        let mut buf = [0u8; 12];
        assert_eq!(
            repr.emit(&mut Bth::new_checked(&mut buf[..]).unwrap()),
            Err(WireError::QpnOutOfRange { value: 0x100_0000 })
        );
        repr.dest_qpn = 0xFF_FFFF;
        repr.psn = 0x100_0000;
        assert_eq!(
            repr.emit(&mut Bth::new_checked(&mut buf[..]).unwrap()),
            Err(WireError::PsnOutOfRange {
                field: PsnField::Bth,
                value: 0x100_0000
            })
        );
        assert_eq!(buf, [0u8; 12], "nothing written on error");
    }

    #[test]
    fn short_buffer_is_truncated() {
        for n in 0..12 {
            assert_eq!(
                Bth::new_checked(&WRITE_ONLY[..n]).err(),
                Some(WireError::Truncated {
                    header: HeaderKind::Bth,
                    need: 12,
                    have: n
                })
            );
        }
    }

    #[test]
    fn opcode_round_trips_every_byte() {
        let mut known = 0;
        for n in 0..=255u8 {
            let op = Opcode::from(n);
            assert_eq!(u8::from(op), n);
            if !matches!(op, Opcode::Unknown(_)) {
                known += 1;
            }
        }
        assert_eq!(known, 18);
        assert_eq!(Opcode::from(0x42), Opcode::Unknown(0x42));
        assert_eq!(Opcode::from(0x81), Opcode::Cnp);
        assert_eq!(Opcode::from(0xE3), Opcode::EvProbeReply);
        assert_eq!(Opcode::from(0xE4), Opcode::PortStatus);
    }

    #[test]
    fn opcode_classes() {
        let data: Vec<u8> = (0..=255u8).filter(|&n| Opcode::from(n).is_data()).collect();
        assert_eq!(data, (0x00..=0x0B).collect::<Vec<u8>>());
        let reth: Vec<u8> = (0..=255u8)
            .filter(|&n| Opcode::from(n).has_reth())
            .collect();
        assert_eq!(reth, (0x06..=0x0B).collect::<Vec<u8>>());
        let imm: Vec<u8> = (0..=255u8)
            .filter(|&n| Opcode::from(n).has_immediate())
            .collect();
        assert_eq!(imm, vec![0x03, 0x05, 0x09, 0x0B]);
        let first: Vec<u8> = (0..=255u8)
            .filter(|&n| Opcode::from(n).is_first())
            .collect();
        assert_eq!(first, vec![0x00, 0x04, 0x05, 0x06, 0x0A, 0x0B]);
        let last: Vec<u8> = (0..=255u8).filter(|&n| Opcode::from(n).is_last()).collect();
        assert_eq!(last, vec![0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x0A, 0x0B]);
    }
}
