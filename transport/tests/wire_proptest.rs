//! Property tests for `mrc_transport::wire` (issue 2 acceptance): every valid `PacketRepr`
//! emits, parses back equal and re-emits the same bytes; any byte string parses to `Ok` or a
//! typed error without panicking, and whatever parses re-emits byte-identical.

use mrc_transport::wire::{
    Body, BthFlags, BthRepr, BthSpare, CnpRepr, DataRepr, MAX_24BIT, MrcethRepr, MsgethRepr,
    NackReason, NackRepr, Opcode, PacketRepr, PortStatusRepr, ProbeReplyRepr, ProbeRepr, RethRepr,
    SackRepr, WireError,
};
use proptest::collection::vec;
use proptest::prelude::*;

/// An owned packet, so a strategy can produce it; [`Owned::repr`] borrows it as a `PacketRepr`.
#[derive(Debug, Clone)]
struct Owned {
    bth: BthRepr,
    mrceth: MrcethRepr,
    body: OwnedBody,
}

#[derive(Debug, Clone)]
enum OwnedBody {
    Data {
        msgeth: MsgethRepr,
        reth: Option<RethRepr>,
        imm: Option<u32>,
        payload: Vec<u8>,
    },
    Sack(SackRepr),
    Nack(NackRepr),
    Cnp(CnpRepr),
    Probe(ProbeRepr),
    ProbeReply(ProbeReplyRepr),
    PortStatus(PortStatusRepr),
    Unknown(Vec<u8>),
}

impl Owned {
    fn repr(&self) -> PacketRepr<'_> {
        let body = match &self.body {
            OwnedBody::Data {
                msgeth,
                reth,
                imm,
                payload,
            } => Body::Data(DataRepr {
                msgeth: *msgeth,
                reth: *reth,
                imm: *imm,
                payload,
            }),
            OwnedBody::Sack(s) => Body::Sack(*s),
            OwnedBody::Nack(n) => Body::Nack(*n),
            OwnedBody::Cnp(c) => Body::Cnp(*c),
            OwnedBody::Probe(p) => Body::Probe(*p),
            OwnedBody::ProbeReply(p) => Body::ProbeReply(*p),
            OwnedBody::PortStatus(p) => Body::PortStatus(*p),
            OwnedBody::Unknown(rest) => Body::Unknown { rest },
        };
        PacketRepr {
            bth: self.bth,
            mrceth: self.mrceth,
            body,
        }
    }
}

fn arb_flags() -> impl Strategy<Value = BthFlags> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(ack_req, rtx, ts, trimmed)| BthFlags {
            ack_req,
            rtx,
            ts,
            trimmed,
        },
    )
}

/// A BTH with every field random (the opcode and PSN are replaced by the body strategy).
fn arb_bth() -> impl Strategy<Value = BthRepr> {
    (
        any::<u16>(),
        0..=MAX_24BIT,
        0..=MAX_24BIT,
        arb_flags(),
        any::<(u8, u8, u8)>(),
    )
        .prop_map(|(pkey, dest_qpn, psn, flags, (b1, b4, b8))| BthRepr {
            opcode: Opcode::Unknown(0xFF),
            pkey,
            dest_qpn,
            psn,
            flags,
            spare: BthSpare::new(b1, b4, b8),
        })
}

fn arb_mrceth() -> impl Strategy<Value = MrcethRepr> {
    any::<(u32, u32, u32, u16, u16)>().prop_map(|(ev, msn, send_ts_ns, generation, reserved)| {
        MrcethRepr {
            ev,
            msn,
            send_ts_ns,
            generation,
            reserved,
        }
    })
}

/// A valid data packet: offset + length within the message, RETH length = payload length
/// (or the original length when trimmed), no address overflow.
fn arb_data(bth: BthRepr, mrceth: MrcethRepr) -> impl Strategy<Value = Owned> {
    (
        0u8..=0x0B,
        vec(any::<u8>(), 0..96),
        any::<(u32, u32, u64, u32, u32, u32)>(),
    )
        .prop_map(
            move |(code, payload, (msg_extra, offset_seed, va, rkey, orig_len, imm))| {
                let opcode = Opcode::from(code);
                let trimmed = bth.flags.trimmed;
                let payload = if trimmed { Vec::new() } else { payload };
                let len = if trimmed && opcode.has_reth() {
                    orig_len
                } else {
                    payload.len() as u32
                };
                // message_len in [len, u32::MAX], offset in [0, message_len - len].
                let message_len = len.max(msg_extra);
                let room = u64::from(message_len - len) + 1;
                let offset = (u64::from(offset_seed) % room) as u32;
                let reth = opcode.has_reth().then(|| RethRepr {
                    virtual_addr: va.min(u64::MAX - u64::from(len)),
                    rkey,
                    dma_len: len,
                });
                Owned {
                    bth: BthRepr { opcode, ..bth },
                    mrceth,
                    body: OwnedBody::Data {
                        msgeth: MsgethRepr {
                            message_len,
                            offset,
                        },
                        reth,
                        imm: opcode.has_immediate().then_some(imm),
                        payload,
                    },
                }
            },
        )
}

fn arb_control(bth: BthRepr, mrceth: MrcethRepr) -> impl Strategy<Value = Owned> {
    let with = move |opcode: Opcode, psn: u32, body: OwnedBody| Owned {
        bth: BthRepr { opcode, psn, ..bth },
        mrceth,
        body,
    };
    prop_oneof![
        (
            0..=MAX_24BIT,
            0..=MAX_24BIT,
            any::<(u64, u32, u32, u16, i16)>()
        )
            .prop_map(
                move |(cum, base, (bitmap, echo_ev, echo_ts_ns, ecn_ce_count, credit))| {
                    with(
                        Opcode::Sack,
                        cum,
                        OwnedBody::Sack(SackRepr {
                            cumulative_psn: cum,
                            bitmap_base_psn: base,
                            bitmap,
                            echo_ev,
                            echo_ts_ns,
                            ecn_ce_count,
                            credit,
                        }),
                    )
                }
            ),
        (
            0..=MAX_24BIT,
            any::<u8>(),
            0..=MAX_24BIT,
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(move |(psn, reason, reserved, echo_ev, echo_ts_ns)| {
                with(
                    Opcode::Nack,
                    psn,
                    OwnedBody::Nack(NackRepr {
                        psn,
                        reason: NackReason::from(reason),
                        reserved,
                        echo_ev,
                        echo_ts_ns,
                    }),
                )
            }),
        any::<(u32, [u8; 12])>().prop_map(move |(echo_ev, reserved)| with(
            Opcode::Cnp,
            bth.psn,
            OwnedBody::Cnp(CnpRepr { echo_ev, reserved })
        )),
        any::<(u32, u32)>().prop_map(move |(probe_seq, reserved)| with(
            Opcode::EvProbe,
            bth.psn,
            OwnedBody::Probe(ProbeRepr {
                probe_seq,
                reserved
            })
        )),
        any::<(u32, u32, u32)>().prop_map(move |(probe_seq, echo_ev, echo_ts_ns)| with(
            Opcode::EvProbeReply,
            bth.psn,
            OwnedBody::ProbeReply(ProbeReplyRepr {
                probe_seq,
                echo_ev,
                echo_ts_ns
            })
        )),
        (1..=32u8, any::<(u32, u32, bool, u8, u16)>()).prop_map(
            move |(planes, (psu_seq, bits, ack, flags, reserved))| {
                // a bitmap within the plane count (the only ones that parse)
                let up_planes = if planes == 32 {
                    bits
                } else {
                    bits & ((1u32 << planes) - 1)
                };
                with(
                    Opcode::PortStatus,
                    bth.psn,
                    OwnedBody::PortStatus(PortStatusRepr {
                        psu_seq,
                        up_planes,
                        planes,
                        ack,
                        other_flags: flags & 0x7F,
                        reserved,
                    }),
                )
            }
        ),
        (
            any::<u8>().prop_filter("unknown opcode", |n| matches!(
                Opcode::from(*n),
                Opcode::Unknown(_)
            )),
            vec(any::<u8>(), 0..64)
        )
            .prop_map(move |(code, rest)| with(
                Opcode::from(code),
                bth.psn,
                OwnedBody::Unknown(rest)
            )),
    ]
}

/// Any valid packet of any kind.
fn arb_packet() -> impl Strategy<Value = Owned> {
    (arb_bth(), arb_mrceth())
        .prop_flat_map(|(bth, mrceth)| prop_oneof![arb_data(bth, mrceth), arb_control(bth, mrceth)])
}

fn emit_vec(p: &PacketRepr<'_>) -> Vec<u8> {
    let mut out = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut out).expect("a parsed or valid repr emits");
    assert_eq!(n, out.len());
    out
}

/// Parses `bytes`; if it parses, it must re-emit exactly `bytes` (the whole input: the data
/// payload and an unknown opcode's rest take everything after the headers, and fixed-size
/// control bodies reject trailing bytes). A `Truncated` error must describe `bytes`.
fn check_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
    match PacketRepr::parse(bytes) {
        Ok(p) => {
            prop_assert_eq!(p.buffer_len(), bytes.len());
            prop_assert_eq!(emit_vec(&p), bytes.to_vec());
        }
        Err(WireError::Truncated { need, have, .. }) => {
            prop_assert_eq!(have, bytes.len());
            prop_assert!(need > have);
        }
        Err(_) => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn valid_repr_emit_parse_emit_is_identity(o in arb_packet()) {
        let repr = o.repr();
        let bytes = emit_vec(&repr);
        prop_assert_eq!(bytes.len(), repr.buffer_len());
        prop_assert_eq!(bytes[0], u8::from(repr.bth.opcode));
        let parsed = PacketRepr::parse(&bytes);
        prop_assert_eq!(parsed, Ok(repr));
        prop_assert_eq!(emit_vec(&parsed.unwrap()), bytes);
    }

    #[test]
    fn emit_into_a_short_buffer_is_a_typed_error(o in arb_packet(), cut in 1usize..64) {
        let repr = o.repr();
        let need = repr.buffer_len();
        let have = need.saturating_sub(cut);
        let mut buf = vec![0u8; have];
        prop_assert_eq!(repr.emit(&mut buf), Err(WireError::BufferTooSmall { need, have }));
        prop_assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn any_bytes_parse_or_fail_typed(bytes in vec(any::<u8>(), 0..200)) {
        check_parse(&bytes)?;
    }

    #[test]
    fn any_bytes_behind_a_known_opcode(
        code in prop::sample::select(vec![
            0x00u8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B,
            0x81, 0xE0, 0xE1, 0xE2, 0xE3, 0x42,
        ]),
        mut bytes in vec(any::<u8>(), 1..200),
    ) {
        bytes[0] = code;
        check_parse(&bytes)?;
    }

    #[test]
    fn mutated_valid_packets_parse_or_fail_typed(
        o in arb_packet(),
        flips in vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
        extra in vec(any::<u8>(), 0..3),
    ) {
        let mut bytes = emit_vec(&o.repr());
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        if let Some(at) = cut {
            bytes.truncate(at.index(bytes.len() + 1));
        }
        bytes.extend_from_slice(&extra);
        check_parse(&bytes)?;
    }
}
