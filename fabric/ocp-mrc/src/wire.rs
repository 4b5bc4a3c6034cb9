//! The two messages `lib_mrc.so` adds on top of mrc's transport.
//!
//! **Placement header.** An MRC RDMA WRITE names the application's own `ibv_reg_mr`
//! region (address, rkey) at the responder, which the responder's transport does not
//! know. The requestor therefore sends every WRITE as transport SENDs of at most
//! [`CHUNK_BYTES`] payload, each led by this header; the responder receives them into its
//! own staging buffers and has the device place the payload (a loopback RDMA WRITE to the
//! named address and rkey, see docs/OCP_MRC.md): the packet names the target, the device's
//! MR check decides. Network byte order:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                     magic "MRCW" (0x4d524357)                 |  0
//! +---------------+-----------------------------------------------+
//! |     flags     |                 reserved 0                    |  4
//! +---------------+-----------------------------------------------+
//! |                  remote address of this chunk (64)            |  8
//! +---------------------------------------------------------------+
//! |                        rkey (32)                              | 16
//! +---------------------------------------------------------------+
//! |          immediate data (32, as the application gave it)      | 20
//! +---------------------------------------------------------------+
//! |                message length, bytes (32)                     | 24
//! +---------------------------------------------------------------+
//! |                        reserved 0                             | 28
//! +---------------------------------------------------------------+
//! flags: bit 0 IMM (the message carries immediate data), bit 1 LAST (last chunk),
//!        bit 2 VERDICT (a placement verdict, below; alone).
//! ```
//!
//! **Placement verdict.** The responder's device decides each WRITE after the transport
//! delivered it, so the transport's acknowledgement cannot carry the decision. The
//! responder numbers the WRITEs it receives (0, 1, ... in arrival order, which is the
//! requestor's posting order) and reports, in a chunk of flag VERDICT going the other way,
//! how many are decided (`remote address` field: every WRITE below this count) and, as
//! the payload (`message length` bytes, 8 per entry, ascending), the numbers of those
//! refused since the previous verdict. The requestor completes a WRITE once acknowledged
//! and decided: `IBV_WC_REM_ACCESS_ERR` when refused, as an RC responder's NAK would.
//!
//! **Rendezvous (hello).** `mrc_modify_qp` gives only the peer's GID and QPN; mrc's
//! connection needs the peer's UD endpoint (all its UD QPNs, Q_Key) and its transport
//! parameters (QPN, initial PSN, generation, window, MTU). At RTS each side sends a hello
//! to the peer's first UD QP (the QPN `mrc_get_qpn` reported) until it has heard one:
//!
//! ```text
//! | magic "MRCH" | version 1 | flags (bit 0 HEARD, bit 1 NO_TRIM_NACK, bit 2 PLANES) |
//! | endpoint len (16) | endpoint (verbs::addr encoding) | qp info len (16) |
//! | qp info (bootstrap encoding) |
//! PLANES only: | planes n (8, 1..=7) | n x ( endpoint len (16) | endpoint ) |
//! ```
//!
//! A QP on several planes (one device each, `MRC_PLANE_DEVICES`) sends its endpoint on
//! plane 0 (the device the application opened) in `endpoint` and those of planes 1..n
//! after the parameters (whose `plane_ips` hold every plane's GID as an IP); a QP on one
//! plane sends the hello it always did, without the flag. Each side connects only a peer
//! with as many planes.
//!
//! Every field of both is checked before use (they come from the network).

use mrc_fabric::engine::bootstrap::QpInfo;
use mrc_fabric::verbs::addr::EndpointAddr;

/// "MRCW".
pub const WRITE_MAGIC: u32 = 0x4d52_4357;
/// Bytes of the placement header.
pub const WRITE_HEADER_BYTES: usize = 32;
/// Largest payload of one chunk (one transport SEND), bytes.
pub const CHUNK_BYTES: usize = 16384;
/// Flag: the message carries immediate data.
pub const FLAG_IMM: u8 = 1 << 0;
/// Flag: last chunk of the message.
pub const FLAG_LAST: u8 = 1 << 1;
/// Flag: a placement verdict ([`Verdict`]), not a WRITE chunk.
pub const FLAG_VERDICT: u8 = 1 << 2;
/// Refused WRITE numbers one verdict carries at most.
pub const VERDICT_MAX_REFUSED: usize = CHUNK_BYTES / 8;

/// "MRCH".
pub const HELLO_MAGIC: u32 = 0x4d52_4348;
/// Hello version.
pub const HELLO_VERSION: u8 = 1;
/// Flag: the sender has heard the receiver's hello.
pub const HELLO_HEARD: u8 = 1 << 0;
/// Flag: the sender's QP has `MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED` (its peer, the
/// receiver of this hello, is not to NACK trimmed packets of this connection).
pub const HELLO_NO_TRIM_NACK: u8 = 1 << 1;
/// Flag: the sender's QP runs on two or more planes (one device each,
/// `MRC_PLANE_DEVICES`): after the transport parameters, the endpoint of each plane from
/// plane 1 on ([`Hello::planes`]). A hello of one plane never sets it, and is byte for
/// byte what it was before planes.
pub const HELLO_PLANES: u8 = 1 << 2;
/// Largest hello accepted, bytes.
pub const MAX_HELLO_BYTES: usize = 4096;

/// One chunk's placement header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteHeader {
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Target address of this chunk's first byte.
    pub remote_addr: u64,
    /// rkey of the application's MR at the responder.
    pub rkey: u32,
    /// Immediate data as the application gave it (network order, passed through).
    pub imm: u32,
    /// Length of the whole message, bytes.
    pub msg_len: u32,
}

/// Why a chunk or hello is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its fixed part.
    Short,
    /// Not our magic.
    BadMagic,
    /// Unknown version or flags.
    BadField,
    /// A length that does not match the bytes.
    BadLength,
}

impl WriteHeader {
    /// The encoded header.
    pub fn encode(&self) -> [u8; WRITE_HEADER_BYTES] {
        let mut b = [0u8; WRITE_HEADER_BYTES];
        b[0..4].copy_from_slice(&WRITE_MAGIC.to_be_bytes());
        b[4] = self.flags;
        b[8..16].copy_from_slice(&self.remote_addr.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[20..24].copy_from_slice(&self.imm.to_be_bytes());
        b[24..28].copy_from_slice(&self.msg_len.to_be_bytes());
        b
    }

    /// Parses a received chunk of `b.len()` bytes; returns the header and the payload
    /// length (at most [`CHUNK_BYTES`]).
    ///
    /// # Errors
    /// [`WireError`] for a short chunk, another magic, unknown flags or a payload above
    /// [`CHUNK_BYTES`] or above the message length.
    pub fn decode(b: &[u8]) -> Result<(WriteHeader, usize), WireError> {
        if b.len() < WRITE_HEADER_BYTES {
            return Err(WireError::Short);
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if u32_at(0) != WRITE_MAGIC {
            return Err(WireError::BadMagic);
        }
        let flags = b[4];
        if flags & !(FLAG_IMM | FLAG_LAST | FLAG_VERDICT) != 0
            || (flags & FLAG_VERDICT != 0 && flags != FLAG_VERDICT)
        {
            return Err(WireError::BadField);
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[8..16]);
        let h = WriteHeader {
            flags,
            remote_addr: u64::from_be_bytes(a),
            rkey: u32_at(16),
            imm: u32_at(20),
            msg_len: u32_at(24),
        };
        let payload = b.len() - WRITE_HEADER_BYTES;
        if payload > CHUNK_BYTES || payload as u64 > u64::from(h.msg_len) {
            return Err(WireError::BadLength);
        }
        Ok((h, payload))
    }
}

/// A rendezvous message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Whether the sender has heard the receiver.
    pub heard: bool,
    /// The sender relies on no trim NACKs from the receiver ([`HELLO_NO_TRIM_NACK`]).
    pub no_trim_nacks: bool,
    /// The sender's UD endpoint.
    pub endpoint: EndpointAddr,
    /// The sender's transport parameters.
    pub info: QpInfo,
    /// The sender's UD endpoint on each further plane (plane 1 first; `endpoint` is
    /// plane 0's): empty on one plane. At most [`MAX_HELLO_PLANES`].
    pub planes: Vec<EndpointAddr>,
}

/// Further planes a hello carries at most (the datapath's planes, less plane 0).
pub const MAX_HELLO_PLANES: usize = mrc_fabric::udp::MAX_PLANE_IPS - 1;

impl Hello {
    /// The encoded hello; `None` when a part does not encode (too many QPNs, regions or
    /// planes).
    pub fn encode(&self) -> Option<Vec<u8>> {
        if self.planes.len() > MAX_HELLO_PLANES {
            return None;
        }
        let ep = self.endpoint.encode().ok()?;
        let qi = self.info.encode().ok()?;
        let mut b = Vec::with_capacity(12 + ep.len() + qi.len());
        b.extend_from_slice(&HELLO_MAGIC.to_be_bytes());
        b.push(HELLO_VERSION);
        b.push(
            if self.heard { HELLO_HEARD } else { 0 }
                | if self.no_trim_nacks {
                    HELLO_NO_TRIM_NACK
                } else {
                    0
                }
                | if self.planes.is_empty() {
                    0
                } else {
                    HELLO_PLANES
                },
        );
        b.extend_from_slice(&u16::try_from(ep.len()).ok()?.to_be_bytes());
        b.extend_from_slice(&ep);
        b.extend_from_slice(&u16::try_from(qi.len()).ok()?.to_be_bytes());
        b.extend_from_slice(&qi);
        if !self.planes.is_empty() {
            b.push(self.planes.len() as u8);
            for p in &self.planes {
                let e = p.encode().ok()?;
                b.extend_from_slice(&u16::try_from(e.len()).ok()?.to_be_bytes());
                b.extend_from_slice(&e);
            }
        }
        (b.len() <= MAX_HELLO_BYTES).then_some(b)
    }

    /// Parses a received hello.
    ///
    /// # Errors
    /// [`WireError`] for anything short, foreign or inconsistent.
    pub fn decode(b: &[u8]) -> Result<Hello, WireError> {
        if b.len() < 8 || b.len() > MAX_HELLO_BYTES {
            return Err(WireError::Short);
        }
        if u32::from_be_bytes([b[0], b[1], b[2], b[3]]) != HELLO_MAGIC {
            return Err(WireError::BadMagic);
        }
        if b[4] != HELLO_VERSION || b[5] & !(HELLO_HEARD | HELLO_NO_TRIM_NACK | HELLO_PLANES) != 0 {
            return Err(WireError::BadField);
        }
        let ep_len = usize::from(u16::from_be_bytes([b[6], b[7]]));
        let ep_end = 8 + ep_len;
        let ep = b.get(8..ep_end).ok_or(WireError::BadLength)?;
        let l = b.get(ep_end..ep_end + 2).ok_or(WireError::BadLength)?;
        let qi_len = usize::from(u16::from_be_bytes([l[0], l[1]]));
        let qi_start = ep_end + 2;
        let qi_end = qi_start + qi_len;
        let with_planes = b[5] & HELLO_PLANES != 0;
        if b.len() < qi_end || (!with_planes && b.len() != qi_end) {
            return Err(WireError::BadLength);
        }
        let endpoint = EndpointAddr::decode(ep).map_err(|_| WireError::BadField)?;
        let mut r = &b[qi_start..qi_end];
        let info = QpInfo::read_from(&mut r).map_err(|_| WireError::BadField)?;
        if !r.is_empty() {
            return Err(WireError::BadLength);
        }
        let mut planes = Vec::new();
        if with_planes {
            let n = usize::from(*b.get(qi_end).ok_or(WireError::BadLength)?);
            if n == 0 || n > MAX_HELLO_PLANES {
                return Err(WireError::BadField);
            }
            let mut at = qi_end + 1;
            for _ in 0..n {
                let l = b.get(at..at + 2).ok_or(WireError::BadLength)?;
                let len = usize::from(u16::from_be_bytes([l[0], l[1]]));
                let e = b.get(at + 2..at + 2 + len).ok_or(WireError::BadLength)?;
                planes.push(EndpointAddr::decode(e).map_err(|_| WireError::BadField)?);
                at += 2 + len;
            }
            if at != b.len() {
                return Err(WireError::BadLength);
            }
        }
        Ok(Hello {
            heard: b[5] & HELLO_HEARD != 0,
            no_trim_nacks: b[5] & HELLO_NO_TRIM_NACK != 0,
            endpoint,
            info,
            planes,
        })
    }
}

/// A placement verdict: WRITEs `0..decided` are decided, `refused` (ascending, each at
/// least the previous verdict's `decided`) were refused by the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// WRITEs decided so far (cumulative).
    pub decided: u64,
    /// Refused since the previous verdict.
    pub refused: Vec<u64>,
}

impl Verdict {
    /// Header and payload, for one transport SEND.
    pub fn encode(&self) -> Vec<u8> {
        let h = WriteHeader {
            flags: FLAG_VERDICT,
            remote_addr: self.decided,
            rkey: 0,
            imm: 0,
            msg_len: (self.refused.len() * 8) as u32,
        };
        let mut b = h.encode().to_vec();
        for r in &self.refused {
            b.extend_from_slice(&r.to_be_bytes());
        }
        b
    }

    /// The verdict of a decoded chunk of flag VERDICT (`payload`: the bytes after the
    /// header).
    ///
    /// # Errors
    /// [`WireError::BadLength`] unless the payload is `msg_len` bytes, 8 per entry;
    /// [`WireError::BadField`] for entries not ascending or not below `decided`.
    pub fn decode(h: &WriteHeader, payload: &[u8]) -> Result<Verdict, WireError> {
        if payload.len() != h.msg_len as usize || payload.len() % 8 != 0 {
            return Err(WireError::BadLength);
        }
        let refused: Vec<u64> = payload
            .chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                u64::from_be_bytes(a)
            })
            .collect();
        if refused.windows(2).any(|w| w[0] >= w[1])
            || refused.last().is_some_and(|&r| r >= h.remote_addr)
        {
            return Err(WireError::BadField);
        }
        Ok(Verdict {
            decided: h.remote_addr,
            refused,
        })
    }
}

/// The responder's side: numbers the WRITEs as their chunks are placed or refused, and
/// makes the verdicts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerdictMaker {
    /// WRITEs decided.
    decided: u64,
    /// What the last verdict said was decided.
    reported: u64,
    /// Refused, not reported yet.
    refused: Vec<u64>,
    /// A chunk of the WRITE under way was refused.
    current_refused: bool,
    /// `reported` before the last take (for [`VerdictMaker::untake`]).
    prev_reported: u64,
}

impl VerdictMaker {
    /// One chunk of the current WRITE was placed (`ok`) or refused; `last`: it ends the
    /// WRITE, which is then decided (refused if any of its chunks was).
    pub fn on_chunk(&mut self, last: bool, ok: bool) {
        self.current_refused |= !ok;
        if last {
            if std::mem::take(&mut self.current_refused) {
                self.refused.push(self.decided);
            }
            self.decided += 1;
        }
    }

    /// Puts back verdict `v`, just returned by [`VerdictMaker::take`], that could not be
    /// sent: the next take reports it again (with whatever was decided meanwhile).
    pub fn untake(&mut self, v: Verdict) {
        let mut r = v.refused;
        r.append(&mut self.refused);
        self.refused = r;
        self.reported = self.prev_reported;
    }

    /// The verdict to send, if anything was decided since the last one (at most
    /// [`VERDICT_MAX_REFUSED`] entries; the rest in the next).
    pub fn take(&mut self) -> Option<Verdict> {
        if self.decided == self.reported {
            return None;
        }
        let (decided, refused) = if self.refused.len() > VERDICT_MAX_REFUSED {
            let rest = self.refused.split_off(VERDICT_MAX_REFUSED);
            let upto = rest[0];
            (upto, std::mem::replace(&mut self.refused, rest))
        } else {
            (self.decided, std::mem::take(&mut self.refused))
        };
        self.prev_reported = self.reported;
        self.reported = decided;
        Some(Verdict { decided, refused })
    }
}

/// The requestor's side: what the verdicts decided, for the WRITEs it numbered
/// 0, 1, ... as it sent their first chunks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerdictBook {
    /// Every WRITE below this is decided.
    decided: u64,
    /// Refused and not yet taken.
    refused: std::collections::BTreeSet<u64>,
    /// Verdicts ignored (going backwards or naming WRITEs never sent).
    pub bad: u64,
}

impl VerdictBook {
    /// Records `v`; `sent`: WRITEs numbered so far. A verdict that goes backwards or
    /// past `sent` is counted in `bad` and ignored.
    pub fn record(&mut self, v: &Verdict, sent: u64) {
        if v.decided < self.decided
            || v.decided > sent
            || v.refused.first().is_some_and(|&r| r < self.decided)
        {
            self.bad += 1;
            return;
        }
        self.decided = v.decided;
        self.refused.extend(v.refused.iter().copied());
    }

    /// WRITE `n`'s verdict: `None` while undecided, `Some(true)` if placed, `Some(false)`
    /// if refused (taken: asked once per WRITE).
    pub fn take(&mut self, n: u64) -> Option<bool> {
        (n < self.decided).then(|| !self.refused.remove(&n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    #[test]
    fn verdicts_number_decide_and_survive_hostile_bytes() {
        let mut m = VerdictMaker::default();
        assert_eq!(m.take(), None);
        // WRITE 0: two chunks placed; WRITE 1: its first chunk refused, the last placed;
        // WRITE 2: one chunk, refused; WRITE 3 under way (first chunk placed).
        m.on_chunk(false, true);
        m.on_chunk(true, true);
        m.on_chunk(false, false);
        m.on_chunk(true, true);
        m.on_chunk(true, false);
        m.on_chunk(false, true);
        let v = m.take().unwrap();
        assert_eq!(
            v,
            Verdict {
                decided: 3,
                refused: vec![1, 2]
            }
        );
        assert_eq!(m.take(), None);
        m.untake(v.clone());
        assert_eq!(m.take(), Some(v.clone()));
        let b = v.encode();
        assert_eq!(b.len(), WRITE_HEADER_BYTES + 16);
        assert_eq!(&b[4..5], &[FLAG_VERDICT]);
        assert_eq!(&b[8..16], &3u64.to_be_bytes());
        assert_eq!(&b[24..28], &16u32.to_be_bytes());
        assert_eq!(&b[32..40], &1u64.to_be_bytes());
        let (h, plen) = WriteHeader::decode(&b).unwrap();
        assert_eq!((h.flags, plen), (FLAG_VERDICT, 16));
        assert_eq!(Verdict::decode(&h, &b[WRITE_HEADER_BYTES..]), Ok(v.clone()));
        // The requestor's book: 4 WRITEs sent; 0 placed, 1 and 2 refused, 3 undecided.
        let mut book = VerdictBook::default();
        book.record(&v, 4);
        assert_eq!(
            (0..4).map(|n| book.take(n)).collect::<Vec<_>>(),
            vec![Some(true), Some(false), Some(false), None]
        );
        // Hostile: backwards, past what was sent, entries out of order or not below
        // `decided`, a payload that is not 8 per entry, VERDICT with LAST.
        book.record(
            &Verdict {
                decided: 2,
                refused: vec![],
            },
            4,
        );
        book.record(
            &Verdict {
                decided: 9,
                refused: vec![],
            },
            4,
        );
        assert_eq!(book.bad, 2);
        let mut bad = b.clone();
        bad[32..40].copy_from_slice(&5u64.to_be_bytes());
        let (h, _) = WriteHeader::decode(&bad).unwrap();
        assert_eq!(
            Verdict::decode(&h, &bad[WRITE_HEADER_BYTES..]),
            Err(WireError::BadField)
        );
        let (h, _) = WriteHeader::decode(&b[..WRITE_HEADER_BYTES + 12]).unwrap();
        assert_eq!(
            Verdict::decode(&h, &b[WRITE_HEADER_BYTES..WRITE_HEADER_BYTES + 12]),
            Err(WireError::BadLength)
        );
        let mut both = b.clone();
        both[4] = FLAG_VERDICT | FLAG_LAST;
        assert_eq!(WriteHeader::decode(&both).err(), Some(WireError::BadField));
        // More refusals than one verdict carries: split, nothing lost.
        let mut m = VerdictMaker::default();
        for _ in 0..VERDICT_MAX_REFUSED + 3 {
            m.on_chunk(true, false);
        }
        let a = m.take().unwrap();
        assert_eq!(
            (a.decided, a.refused.len()),
            (VERDICT_MAX_REFUSED as u64, VERDICT_MAX_REFUSED)
        );
        let c = m.take().unwrap();
        assert_eq!(
            (c.decided, c.refused),
            (
                VERDICT_MAX_REFUSED as u64 + 3,
                (VERDICT_MAX_REFUSED as u64..VERDICT_MAX_REFUSED as u64 + 3).collect()
            )
        );
    }

    #[test]
    fn write_header_round_trip_and_checks() {
        let h = WriteHeader {
            flags: FLAG_IMM | FLAG_LAST,
            remote_addr: 0x1122_3344_5566_7788,
            rkey: 0xdead_beef,
            imm: 0x0102_0304,
            msg_len: 100,
        };
        let mut b = h.encode().to_vec();
        b.extend_from_slice(&[7u8; 100]);
        assert_eq!(WriteHeader::decode(&b), Ok((h, 100)));
        b.push(0);
        assert_eq!(WriteHeader::decode(&b), Err(WireError::BadLength));
        assert_eq!(WriteHeader::decode(&b[..31]), Err(WireError::Short));
        let mut bad = h.encode();
        bad[4] = 0x80;
        assert_eq!(WriteHeader::decode(&bad), Err(WireError::BadField));
        bad[0] = 0;
        assert_eq!(WriteHeader::decode(&bad), Err(WireError::BadMagic));
        let big = WriteHeader {
            msg_len: u32::MAX,
            ..h
        };
        let mut b = big.encode().to_vec();
        b.resize(WRITE_HEADER_BYTES + CHUNK_BYTES + 1, 0);
        assert_eq!(WriteHeader::decode(&b), Err(WireError::BadLength));
    }

    #[test]
    fn hello_round_trip_and_checks() {
        let h = Hello {
            heard: true,
            no_trim_nacks: false,
            endpoint: EndpointAddr {
                gid: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 1),
                lid: 0,
                qkey: 0x4d52_4300,
                qpns: vec![17, 18],
            },
            info: QpInfo {
                qpn: 0x12_3456,
                initial_psn: 99,
                generation: 3,
                udp_port: 4791,
                recv_window_packets: 4096,
                mtu_payload_bytes: 4040,
                go_back_n: false,
                regions: vec![],
                plane_ips: Vec::new(),
            },
            planes: Vec::new(),
        };
        let b = h.encode().unwrap();
        assert_eq!(Hello::decode(&b), Ok(h.clone()));
        assert_eq!(Hello::decode(&b[..b.len() - 1]), Err(WireError::BadLength));
        let mut x = b.clone();
        x.push(0);
        assert_eq!(Hello::decode(&x), Err(WireError::BadLength));
        assert_eq!(b[5], HELLO_HEARD);
        let mut x = b.clone();
        x[5] = 8;
        assert_eq!(Hello::decode(&x), Err(WireError::BadField));
        // NO_TRIM_NACK travels as bit 1
        let t = Hello {
            no_trim_nacks: true,
            ..h.clone()
        };
        let tb = t.encode().unwrap();
        assert_eq!(tb[5], HELLO_HEARD | HELLO_NO_TRIM_NACK);
        assert_eq!(Hello::decode(&tb), Ok(t));
        let mut x = b.clone();
        x[6] = 0xff;
        assert_eq!(Hello::decode(&x), Err(WireError::BadLength));
        // Two planes: plane 1's endpoint after the parameters, flagged; one plane's
        // hello is the same bytes as before (no flag, nothing after).
        let p1 = EndpointAddr {
            gid: Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a01, 1),
            lid: 0,
            qkey: 0x4d52_4300,
            qpns: vec![27, 28],
        };
        let two = Hello {
            planes: vec![p1],
            ..h.clone()
        };
        let tb = two.encode().unwrap();
        assert_eq!(tb[5], HELLO_HEARD | HELLO_PLANES);
        assert_eq!(&tb[6..b.len()], &b[6..]);
        assert_eq!(Hello::decode(&tb), Ok(two.clone()));
        assert_eq!(
            Hello::decode(&tb[..tb.len() - 1]),
            Err(WireError::BadLength)
        );
        let mut x = tb.clone();
        x.push(0);
        assert_eq!(Hello::decode(&x), Err(WireError::BadLength));
        // The flag with no plane after, or a count of 0 or past the limit.
        let mut x = b.clone();
        x[5] |= HELLO_PLANES;
        assert_eq!(Hello::decode(&x), Err(WireError::BadLength));
        for n in [0u8, MAX_HELLO_PLANES as u8 + 1] {
            let mut x = tb.clone();
            x[b.len()] = n;
            assert_eq!(Hello::decode(&x), Err(WireError::BadField), "{n} planes");
        }
        let many = Hello {
            planes: vec![two.planes[0].clone(); MAX_HELLO_PLANES + 1],
            ..h
        };
        assert_eq!(many.encode(), None);
    }
}
