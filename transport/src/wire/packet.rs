//! A whole mrc datagram: [`PacketRepr`] = BTH + MRCETH + an opcode-specific [`Body`]. This is
//! what the transport core parses received datagrams into and emits outgoing ones from.

use super::{
    bth::{BTH_LEN, Bth, BthRepr, Opcode},
    cnp::{CNP_LEN, Cnp, CnpRepr},
    data::DataRepr,
    error::{HeaderKind, WireError},
    mrceth::{MRCETH_LEN, Mrceth, MrcethRepr},
    nack::{NACK_LEN, Nack, NackRepr},
    probe::{PROBE_LEN, PROBE_REPLY_LEN, Probe, ProbeReply, ProbeReplyRepr, ProbeRepr},
    psu::{PSU_LEN, PortStatus, PortStatusRepr},
    sack::{SACK_LEN, Sack, SackRepr},
};

/// What follows the MRCETH, by BTH opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body<'a> {
    /// SEND_* and RDMA_WRITE_* opcodes (0x00-0x0B).
    Data(DataRepr<'a>),
    /// [`Opcode::Sack`] (0xE0).
    Sack(SackRepr),
    /// [`Opcode::Nack`] (0xE1).
    Nack(NackRepr),
    /// [`Opcode::Cnp`] (0x81).
    Cnp(CnpRepr),
    /// [`Opcode::EvProbe`] (0xE2).
    Probe(ProbeRepr),
    /// [`Opcode::EvProbeReply`] (0xE3).
    ProbeReply(ProbeReplyRepr),
    /// [`Opcode::PortStatus`] (0xE4).
    PortStatus(PortStatusRepr),
    /// [`Opcode::Unknown`]: the bytes after the MRCETH, uninterpreted, so the receiver can
    /// count the packet by QPN and PSN.
    Unknown {
        /// Everything after the MRCETH (possibly empty).
        rest: &'a [u8],
    },
}

impl Body<'_> {
    /// Bytes this body occupies on the wire.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        match self {
            Body::Data(d) => d.buffer_len(),
            Body::Sack(_) => SACK_LEN,
            Body::Nack(_) => NACK_LEN,
            Body::Cnp(_) => CNP_LEN,
            Body::Probe(_) => PROBE_LEN,
            Body::ProbeReply(_) => PROBE_REPLY_LEN,
            Body::PortStatus(_) => PSU_LEN,
            Body::Unknown { rest } => rest.len(),
        }
    }
}

/// A parsed mrc datagram (the UDP payload), borrowing its payload from the input buffer.
///
/// ```text
/// BTH (12) | MRCETH (16) | body: data headers + payload, or a control body, or opaque rest
/// ```
///
/// Every datagram that [`PacketRepr::parse`] accepts, [`PacketRepr::emit`] writes back
/// byte-identical (spare and reserved bits are kept), and every `PacketRepr` that `emit`
/// accepts parses back equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketRepr<'a> {
    /// Base transport header (opcode, P_Key, destination QPN, PSN, flags).
    pub bth: BthRepr,
    /// mrc extension header (EV, MSN, send timestamp, generation).
    pub mrceth: MrcethRepr,
    /// Opcode-specific body.
    pub body: Body<'a>,
}

/// Fails with [`WireError::TrailingBytes`] when a fixed-size control body is followed by more
/// bytes (a datagram is exactly one packet).
#[inline]
fn no_trailing(rest: &[u8], len: usize, header: HeaderKind) -> Result<(), WireError> {
    if rest.len() > len {
        return Err(WireError::TrailingBytes {
            header,
            extra: rest.len() - len,
        });
    }
    Ok(())
}

/// Fails with [`WireError::PsnMismatch`] when a SACK/NACK body PSN differs from the BTH PSN.
#[inline]
fn same_psn(header: HeaderKind, bth_psn: u32, body_psn: u32) -> Result<(), WireError> {
    if bth_psn != body_psn {
        return Err(WireError::PsnMismatch {
            header,
            bth_psn,
            body_psn,
        });
    }
    Ok(())
}

impl<'a> PacketRepr<'a> {
    /// Parses one datagram (the whole UDP payload). The data payload and an unknown opcode's
    /// rest borrow from `bytes`; nothing is copied or allocated.
    ///
    /// Checks, in order: BTH and MRCETH present; then by opcode:
    /// - data: MSGETH / RETH / ImmDt present, and the [`DataRepr`] invariants (trimmed ⇒ no
    ///   payload; RETH DMA length = payload length unless trimmed; offset + length <=
    ///   message length; RETH address + length no overflow);
    /// - SACK / NACK / CNP / probe / probe reply: body present and nothing after it; SACK and
    ///   NACK PSNs fit 24 bits and equal the BTH PSN;
    /// - unknown opcode: nothing more (the rest is kept opaque).
    ///
    /// # Errors
    /// [`WireError::Truncated`] with `need`/`have` counted from the start of the datagram;
    /// [`WireError::TrailingBytes`], [`WireError::PsnOutOfRange`], [`WireError::PsnMismatch`],
    /// and the [`DataRepr`] errors.
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, WireError> {
        let bth_view = Bth::new_checked(bytes)?;
        let bth = BthRepr::parse(&bth_view)?;
        let mrceth_view =
            Mrceth::new_checked(bth_view.into_rest()).map_err(|e| e.at_offset(BTH_LEN))?;
        let mrceth = MrcethRepr::parse(&mrceth_view)?;
        let rest = mrceth_view.into_rest();
        let off = BTH_LEN + MRCETH_LEN;
        let at = |e: WireError| e.at_offset(off);
        let body = match bth.opcode {
            op if op.is_data() => {
                Body::Data(DataRepr::parse(rest, op, bth.flags.trimmed).map_err(at)?)
            }
            Opcode::Sack => {
                let v = Sack::new_checked(rest).map_err(at)?;
                no_trailing(rest, SACK_LEN, HeaderKind::Sack)?;
                let sack = SackRepr::parse(&v)?;
                same_psn(HeaderKind::Sack, bth.psn, sack.cumulative_psn)?;
                Body::Sack(sack)
            }
            Opcode::Nack => {
                let v = Nack::new_checked(rest).map_err(at)?;
                no_trailing(rest, NACK_LEN, HeaderKind::Nack)?;
                let nack = NackRepr::parse(&v)?;
                same_psn(HeaderKind::Nack, bth.psn, nack.psn)?;
                Body::Nack(nack)
            }
            Opcode::Cnp => {
                let v = Cnp::new_checked(rest).map_err(at)?;
                no_trailing(rest, CNP_LEN, HeaderKind::Cnp)?;
                Body::Cnp(CnpRepr::parse(&v)?)
            }
            Opcode::EvProbe => {
                let v = Probe::new_checked(rest).map_err(at)?;
                no_trailing(rest, PROBE_LEN, HeaderKind::Probe)?;
                Body::Probe(ProbeRepr::parse(&v)?)
            }
            Opcode::EvProbeReply => {
                let v = ProbeReply::new_checked(rest).map_err(at)?;
                no_trailing(rest, PROBE_REPLY_LEN, HeaderKind::ProbeReply)?;
                Body::ProbeReply(ProbeReplyRepr::parse(&v)?)
            }
            Opcode::PortStatus => {
                let v = PortStatus::new_checked(rest).map_err(at)?;
                no_trailing(rest, PSU_LEN, HeaderKind::PortStatus)?;
                Body::PortStatus(PortStatusRepr::parse(&v)?)
            }
            _ => Body::Unknown { rest },
        };
        Ok(PacketRepr { bth, mrceth, body })
    }

    /// Checks everything [`PacketRepr::emit`] checks, without writing.
    ///
    /// # Errors
    /// [`WireError::OpcodeBodyMismatch`] when the body does not fit the opcode (data body on a
    /// non-data opcode, RETH present/absent against the opcode, ImmDt likewise, `Unknown` body
    /// on a known opcode or `Opcode::Unknown(n)` with a known `n`); the BTH range errors; SACK
    /// and NACK PSN range and [`WireError::PsnMismatch`]; the [`DataRepr`] errors.
    #[inline(always)]
    pub fn check(&self) -> Result<(), WireError> {
        self.bth.check()?;
        let op = self.bth.opcode;
        let fits = match &self.body {
            Body::Data(d) => {
                op.is_data()
                    && d.reth.is_some() == op.has_reth()
                    && d.imm.is_some() == op.has_immediate()
            }
            Body::Sack(_) => op == Opcode::Sack,
            Body::Nack(_) => op == Opcode::Nack,
            Body::Cnp(_) => op == Opcode::Cnp,
            Body::Probe(_) => op == Opcode::EvProbe,
            Body::ProbeReply(_) => op == Opcode::EvProbeReply,
            Body::PortStatus(_) => op == Opcode::PortStatus,
            Body::Unknown { .. } => {
                matches!(op, Opcode::Unknown(n) if matches!(Opcode::from(n), Opcode::Unknown(_)))
            }
        };
        if !fits {
            return Err(WireError::OpcodeBodyMismatch { opcode: op.into() });
        }
        match &self.body {
            Body::Data(d) => d.check(self.bth.flags.trimmed)?,
            Body::Sack(s) => {
                s.check()?;
                same_psn(HeaderKind::Sack, self.bth.psn, s.cumulative_psn)?;
            }
            Body::Nack(n) => {
                super::check_psn(super::PsnField::Nack, n.psn)?;
                same_psn(HeaderKind::Nack, self.bth.psn, n.psn)?;
            }
            Body::PortStatus(p) => p.check()?,
            Body::Cnp(_) | Body::Probe(_) | Body::ProbeReply(_) | Body::Unknown { .. } => {}
        }
        Ok(())
    }

    /// Bytes [`PacketRepr::emit`] writes: 12 (BTH) + 16 (MRCETH) + the body's length.
    /// An RDMA_WRITE data packet is 52 bytes of headers (+4 with immediate) plus payload.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        BTH_LEN + MRCETH_LEN + self.body.buffer_len()
    }

    /// Writes the datagram into `buf[..buffer_len()]` and returns `buffer_len()`. Everything
    /// is checked before the first byte is written, so on error `buf` is untouched.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`] when `buf.len() < buffer_len()`; everything
    /// [`PacketRepr::check`] reports.
    #[inline(always)]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.emit_parts::<true>(buf)
    }

    /// [`PacketRepr::emit`] without a data packet's payload: writes the headers (BTH,
    /// MRCETH, MSGETH, RETH, ImmDt) into `buf` and returns their length, for a datapath that
    /// sends the payload from where it lies (the datagram is these bytes, then the
    /// payload). Checks as [`PacketRepr::emit`] does, payload length included. Any other
    /// packet is written whole, as by [`PacketRepr::emit`].
    ///
    /// # Errors
    /// As [`PacketRepr::emit`], with `need` the headers' length.
    #[inline(always)]
    pub fn emit_header(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.emit_parts::<false>(buf)
    }

    #[inline(always)]
    fn emit_parts<const PAYLOAD: bool>(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.check()?;
        let need = match &self.body {
            Body::Data(d) if !PAYLOAD => BTH_LEN + MRCETH_LEN + d.header_len(),
            _ => self.buffer_len(),
        };
        let have = buf.len();
        let Some(out) = buf.get_mut(..need) else {
            return Err(WireError::BufferTooSmall { need, have });
        };
        let (bth, rest) = out.split_at_mut(BTH_LEN);
        // `check` above covered the BTH and the data body: write them without checking again
        self.bth.write(&mut Bth::new_checked(bth)?);
        let (mrceth, rest) = rest.split_at_mut(MRCETH_LEN);
        self.mrceth.emit(&mut Mrceth::new_checked(mrceth)?);
        match &self.body {
            Body::Data(d) => {
                d.write_parts::<PAYLOAD>(rest)?;
            }
            Body::Sack(s) => s.emit(&mut Sack::new_checked(rest)?)?,
            Body::Nack(n) => n.emit(&mut Nack::new_checked(rest)?)?,
            Body::Cnp(c) => c.emit(&mut Cnp::new_checked(rest)?),
            Body::Probe(p) => p.emit(&mut Probe::new_checked(rest)?),
            Body::ProbeReply(p) => p.emit(&mut ProbeReply::new_checked(rest)?),
            Body::PortStatus(p) => p.emit(&mut PortStatus::new_checked(rest)?),
            Body::Unknown { rest: r } => rest.copy_from_slice(r),
        }
        Ok(need)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BthFlags, BthSpare, MsgethRepr, NackReason, PsnField, RethRepr};
    use super::*;

    fn bth(opcode: Opcode, psn: u32) -> BthRepr {
        BthRepr {
            opcode,
            pkey: 0xFFFF,
            dest_qpn: 0x12_3456,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        }
    }

    const MRCETH: MrcethRepr = MrcethRepr {
        ev: 0x0000_BEEF,
        msn: 7,
        send_ts_ns: 0x0102_0304,
        generation: 1,
        reserved: 0,
    };

    /// RDMA_WRITE_ONLY to QPN 0x123456, PSN 0xABCDEF, AckReq, EV 0xBEEF, MSN 7, 4-byte
    /// message at VA 0x1000, rkey 0x77.
    const WRITE_ONLY: [u8; 56] = [
        // BTH
        0x0A, 0x00, 0xFF, 0xFF, 0x00, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF, // MRCETH
        0x00, 0x00, 0xBE, 0xEF, 0x00, 0x00, 0x00, 0x07, 0x01, 0x02, 0x03, 0x04, 0x00, 0x01, 0x00,
        0x00, // MSGETH
        0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, // RETH
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x77, 0x00, 0x00, 0x00,
        0x04, // payload
        b'm', b'r', b'c', b'!',
    ];

    fn write_only_repr() -> PacketRepr<'static> {
        PacketRepr {
            bth: BthRepr {
                flags: BthFlags {
                    ack_req: true,
                    ..BthFlags::default()
                },
                ..bth(Opcode::RdmaWriteOnly, 0xAB_CDEF)
            },
            mrceth: MRCETH,
            body: Body::Data(DataRepr {
                msgeth: MsgethRepr {
                    message_len: 4,
                    offset: 0,
                },
                reth: Some(RethRepr {
                    virtual_addr: 0x1000,
                    rkey: 0x77,
                    dma_len: 4,
                }),
                imm: None,
                payload: b"mrc!",
            }),
        }
    }

    #[test]
    fn write_only_parses_to_exact_values() {
        let p = PacketRepr::parse(&WRITE_ONLY).unwrap();
        assert_eq!(p, write_only_repr());
        assert_eq!(p.bth.dest_qpn, 0x12_3456);
        assert_eq!(p.bth.psn, 0xAB_CDEF);
        assert_eq!(p.buffer_len(), 56);
    }

    #[test]
    fn write_only_emits_known_bytes_at_known_offsets() {
        let mut buf = [0xEEu8; 64];
        assert_eq!(write_only_repr().emit(&mut buf), Ok(56));
        assert_eq!(buf[..56], WRITE_ONLY);
        assert_eq!(buf[0], 0x0A, "opcode at byte 0");
        assert_eq!(buf[5..8], [0x12, 0x34, 0x56], "QPN at bytes 5-7");
        assert_eq!(buf[9..12], [0xAB, 0xCD, 0xEF], "PSN at bytes 9-11");
        assert_eq!(buf[12..16], [0, 0, 0xBE, 0xEF], "EV at bytes 12-15");
        assert_eq!(buf[52..56], *b"mrc!", "payload at byte 52");
        assert_eq!(buf[56..], [0xEE; 8], "nothing written past buffer_len");
    }

    fn write_with(payload: &[u8], imm: Option<u32>) -> PacketRepr<'_> {
        let len = payload.len() as u32;
        PacketRepr {
            bth: bth(
                if imm.is_some() {
                    Opcode::RdmaWriteOnlyWithImmediate
                } else {
                    Opcode::RdmaWriteOnly
                },
                0,
            ),
            mrceth: MRCETH,
            body: Body::Data(DataRepr {
                msgeth: MsgethRepr {
                    message_len: len,
                    offset: 0,
                },
                reth: Some(RethRepr {
                    virtual_addr: 0,
                    rkey: 1,
                    dma_len: len,
                }),
                imm,
                payload,
            }),
        }
    }

    #[test]
    fn write_sizes_match_the_spec() {
        let payload = [0u8; 4096];
        assert_eq!(write_with(&payload, None).buffer_len(), 4148);
        assert_eq!(write_with(&payload, Some(1)).buffer_len(), 4152);
        assert_eq!(write_with(&[], None).buffer_len(), 52);
        let p = write_with(&[], Some(1));
        assert_eq!(p.buffer_len(), 56);
        let mut buf = [0u8; 56];
        assert_eq!(p.emit(&mut buf), Ok(56));
        assert_eq!(PacketRepr::parse(&buf), Ok(p));
    }

    #[test]
    fn truncated_write_at_every_length() {
        for n in 0..WRITE_ONLY.len() {
            let got = PacketRepr::parse(&WRITE_ONLY[..n]);
            let want = match n {
                0..12 => WireError::Truncated {
                    header: HeaderKind::Bth,
                    need: 12,
                    have: n,
                },
                12..28 => WireError::Truncated {
                    header: HeaderKind::Mrceth,
                    need: 28,
                    have: n,
                },
                28..36 => WireError::Truncated {
                    header: HeaderKind::Msgeth,
                    need: 36,
                    have: n,
                },
                36..52 => WireError::Truncated {
                    header: HeaderKind::Reth,
                    need: 52,
                    have: n,
                },
                _ => WireError::RethLengthMismatch {
                    dma_len: 4,
                    payload_len: n - 52,
                },
            };
            assert_eq!(got, Err(want), "length {n}");
        }
    }

    fn emit_vec(p: &PacketRepr<'_>) -> Vec<u8> {
        let mut v = vec![0u8; p.buffer_len()];
        assert_eq!(p.emit(&mut v), Ok(v.len()));
        v
    }

    #[test]
    fn truncated_control_packets_at_every_length() {
        let bodies = [
            (
                Opcode::Sack,
                Body::Sack(SackRepr {
                    cumulative_psn: 5,
                    ..SackRepr::default()
                }),
                HeaderKind::Sack,
                56,
            ),
            (
                Opcode::Nack,
                Body::Nack(NackRepr {
                    psn: 5,
                    reason: NackReason::Trimmed,
                    reserved: 0,
                    echo_ev: 3,
                    echo_ts_ns: 0,
                }),
                HeaderKind::Nack,
                44,
            ),
            (
                Opcode::Cnp,
                Body::Cnp(CnpRepr::default()),
                HeaderKind::Cnp,
                44,
            ),
            (
                Opcode::EvProbe,
                Body::Probe(ProbeRepr::default()),
                HeaderKind::Probe,
                36,
            ),
            (
                Opcode::EvProbeReply,
                Body::ProbeReply(ProbeReplyRepr::default()),
                HeaderKind::ProbeReply,
                40,
            ),
        ];
        for (op, body, kind, len) in bodies {
            let p = PacketRepr {
                bth: bth(op, 5),
                mrceth: MRCETH,
                body,
            };
            let bytes = emit_vec(&p);
            assert_eq!(bytes.len(), len);
            assert_eq!(PacketRepr::parse(&bytes), Ok(p));
            for n in 0..len {
                let (header, need) = match n {
                    0..12 => (HeaderKind::Bth, 12),
                    12..28 => (HeaderKind::Mrceth, 28),
                    _ => (kind, len),
                };
                assert_eq!(
                    PacketRepr::parse(&bytes[..n]),
                    Err(WireError::Truncated {
                        header,
                        need,
                        have: n
                    }),
                    "{op:?} length {n}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(
                PacketRepr::parse(&longer),
                Err(WireError::TrailingBytes {
                    header: kind,
                    extra: 1
                })
            );
        }
    }

    #[test]
    fn unknown_opcode_keeps_identity() {
        let mut bytes = WRITE_ONLY;
        bytes[0] = 0x42;
        let p = PacketRepr::parse(&bytes).unwrap();
        assert_eq!(p.bth.opcode, Opcode::Unknown(0x42));
        assert_eq!(p.bth.dest_qpn, 0x12_3456);
        assert_eq!(p.bth.psn, 0xAB_CDEF);
        assert_eq!(p.mrceth, MRCETH);
        assert_eq!(p.body, Body::Unknown { rest: &bytes[28..] });
        assert_eq!(emit_vec(&p), bytes);
        // Just BTH + MRCETH: an empty rest.
        let p = PacketRepr::parse(&bytes[..28]).unwrap();
        assert_eq!(p.body, Body::Unknown { rest: &[] });
    }

    #[test]
    fn nack_with_unknown_reason_parses() {
        let p = PacketRepr {
            bth: bth(Opcode::Nack, 0x10),
            mrceth: MRCETH,
            body: Body::Nack(NackRepr {
                psn: 0x10,
                reason: NackReason::Trimmed,
                reserved: 0,
                echo_ev: 9,
                echo_ts_ns: 0,
            }),
        };
        let mut bytes = emit_vec(&p);
        assert_eq!(bytes[28..40], [0, 0, 0, 0x10, 1, 0, 0, 0, 0, 0, 0, 9]);
        bytes[32] = 0x99;
        let q = PacketRepr::parse(&bytes).unwrap();
        let Body::Nack(n) = q.body else {
            panic!("not a NACK: {q:?}")
        };
        assert_eq!(n.reason, NackReason::Unknown(0x99));
        assert_eq!(emit_vec(&q), bytes);
    }

    #[test]
    fn flags_round_trip_in_a_packet() {
        for bits in 0..16u8 {
            let flags = BthFlags {
                rtx: bits & 1 != 0,
                ts: bits & 2 != 0,
                trimmed: bits & 4 != 0,
                ack_req: bits & 8 != 0,
            };
            let p = PacketRepr {
                bth: BthRepr {
                    flags,
                    ..bth(Opcode::EvProbe, 1)
                },
                mrceth: MRCETH,
                body: Body::Probe(ProbeRepr {
                    probe_seq: 3,
                    reserved: 0,
                }),
            };
            let bytes = emit_vec(&p);
            assert_eq!(bytes[4], if flags.trimmed { 0x20 } else { 0 });
            assert_eq!(
                bytes[8],
                (u8::from(flags.ack_req) << 7)
                    | (u8::from(flags.rtx) << 6)
                    | (u8::from(flags.ts) << 5)
            );
            assert_eq!(PacketRepr::parse(&bytes), Ok(p));
        }
    }

    #[test]
    fn trimmed_write_with_zero_payload_parses() {
        let mut bytes = WRITE_ONLY[..52].to_vec();
        bytes[4] |= 0x20; // trimmed
        let p = PacketRepr::parse(&bytes).unwrap();
        assert!(p.bth.flags.trimmed);
        let Body::Data(d) = p.body else {
            panic!("not data: {p:?}")
        };
        assert_eq!(d.payload, &[] as &[u8]);
        assert_eq!(d.reth.unwrap().dma_len, 4, "original length kept");
        assert_eq!(emit_vec(&p), bytes);
        // The same header untrimmed has a missing payload.
        bytes[4] &= !0x20;
        assert_eq!(
            PacketRepr::parse(&bytes),
            Err(WireError::RethLengthMismatch {
                dma_len: 4,
                payload_len: 0
            })
        );
    }

    #[test]
    fn sack_psn_must_equal_bth_psn() {
        let mut p = PacketRepr {
            bth: bth(Opcode::Sack, 100),
            mrceth: MRCETH,
            body: Body::Sack(SackRepr {
                cumulative_psn: 100,
                bitmap_base_psn: 101,
                bitmap: 0b101,
                ..SackRepr::default()
            }),
        };
        let mut bytes = emit_vec(&p);
        bytes[11] = 99;
        assert_eq!(
            PacketRepr::parse(&bytes),
            Err(WireError::PsnMismatch {
                header: HeaderKind::Sack,
                bth_psn: 99,
                body_psn: 100
            })
        );
        p.bth.psn = 99;
        let mut buf = [0u8; 56];
        assert_eq!(
            p.emit(&mut buf),
            Err(WireError::PsnMismatch {
                header: HeaderKind::Sack,
                bth_psn: 99,
                body_psn: 100
            })
        );
        p.bth.psn = 0x100_0000;
        if let Body::Sack(s) = &mut p.body {
            s.cumulative_psn = 0x100_0000;
        }
        assert_eq!(
            p.emit(&mut buf),
            Err(WireError::PsnOutOfRange {
                field: PsnField::Bth,
                value: 0x100_0000
            })
        );
        assert_eq!(buf, [0u8; 56], "nothing written on error");
    }

    #[test]
    fn emit_into_short_buffer_is_an_error() {
        let p = write_only_repr();
        for n in 0..56 {
            let mut buf = vec![0u8; n];
            assert_eq!(
                p.emit(&mut buf),
                Err(WireError::BufferTooSmall { need: 56, have: n })
            );
            assert!(buf.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn body_must_match_opcode_on_emit() {
        let mut buf = [0u8; 128];
        let mismatch = |op: u8| Err(WireError::OpcodeBodyMismatch { opcode: op });
        let mut p = write_only_repr();
        p.bth.opcode = Opcode::SendOnly; // has a RETH but SEND has none
        assert_eq!(p.emit(&mut buf), mismatch(0x04));
        p.bth.opcode = Opcode::RdmaWriteOnlyWithImmediate; // no ImmDt
        assert_eq!(p.emit(&mut buf), mismatch(0x0B));
        p.bth.opcode = Opcode::Sack;
        assert_eq!(p.emit(&mut buf), mismatch(0xE0));
        p.bth.opcode = Opcode::Unknown(0x0A); // not canonical
        assert_eq!(p.emit(&mut buf), mismatch(0x0A));
        let q = PacketRepr {
            bth: bth(Opcode::Unknown(0x0A), 1),
            mrceth: MRCETH,
            body: Body::Unknown { rest: &[] },
        };
        assert_eq!(q.emit(&mut buf), mismatch(0x0A));
        let q = PacketRepr {
            bth: bth(Opcode::Cnp, 1),
            mrceth: MRCETH,
            body: Body::Probe(ProbeRepr::default()),
        };
        assert_eq!(q.emit(&mut buf), mismatch(0x81));
        assert_eq!(buf, [0u8; 128]);
    }
}
