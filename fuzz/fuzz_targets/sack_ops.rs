//! Fuzz the sender with arbitrary SACK and NACK sequences.
//!
//! One connection (side A, QPN 1) sends RDMA WRITEs; the fuzzer plays its peer (QPN 2,
//! generation 7) and never delivers anything: it interleaves transmissions, time steps,
//! new work requests and crafted SACKs and NACKs whose PSNs are chosen relative to
//! `snd_una` or `snd_nxt` or absolutely (so they name PSNs in flight, already
//! acknowledged, never sent, or far outside the window, across the 24-bit wrap as the
//! initial PSN is arbitrary too), plus arbitrary raw datagrams.
//!
//! After every operation:
//! * `snd_una <= snd_nxt`, and neither ever moves back;
//! * bytes in flight equal the sum of the payload sizes of the tracked packets not yet
//!   acknowledged; the in-flight packet count and the retransmit queue agree with the
//!   packet states;
//! * the connection never panics (libFuzzer reports any panic).
//!
//! Bogus frames. A SACK or NACK is *bogus* when, judged against the sender's state just
//! before it arrives (after every timer due at that instant has run):
//! 1. it names a PSN never sent: a SACK whose cumulative PSN unwraps (relative to
//!    `snd_una`) beyond `snd_nxt` or whose bitmap sets a bit for a PSN at or beyond
//!    `snd_nxt`; a NACK whose PSN unwraps to `snd_nxt` or beyond; or
//! 2. it names only PSNs already acknowledged: a SACK whose cumulative PSN is at or below
//!    `snd_una` and whose set bitmap bits all name PSNs below `snd_una` or acknowledged
//!    ones; a NACK whose PSN is below `snd_una` or acknowledged (GENERATION_MISMATCH
//!    included: it is evidence of a peer restart only when it names a PSN in flight,
//!    see `mrc_transport::conn`); or
//! 3. it is addressed to another QPN.
//!
//! After a bogus frame nothing may be declared lost (the RACK and timeout counters and
//! every packet's `loss_declared` flag are unchanged), no packet changes state, and
//! `snd_una`, `snd_nxt`, bytes in flight, the retransmit queue and the connection state
//! are unchanged.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{conn_config, craft};
use mrc_transport::send::PktState;
use mrc_transport::wire::{Body, NackReason, NackRepr, Opcode, PacketRepr, SackRepr};
use mrc_transport::{Access, ConnState, Connection, Ecn, PeerParams, Psn, Sge};

const PEER_QPN: u32 = 2;
const PEER_GEN: u16 = 7;
const MTU: u32 = 1024;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum PsnSel {
    /// `snd_una + d`.
    FromUna(i8),
    /// `snd_nxt + d`.
    FromNxt(i8),
    /// Any 24-bit value.
    Abs(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum EchoSel {
    /// The (EV, timestamp) of the `n`-th datagram sent (mod the number sent).
    Sent(u16),
    /// Anything.
    Raw(u32, u32),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Transmit(u8),
    Advance(u16),
    Post(u16),
    Sack {
        cum: PsnSel,
        base: PsnSel,
        bitmap: u64,
        echo: EchoSel,
        ce: u16,
        credit: i16,
    },
    Nack {
        psn: PsnSel,
        reason: u8,
        echo: EchoSel,
    },
    WrongQpnSack(PsnSel),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    initial_psn: u32,
    n_evs: u8,
    max_outstanding: u8,
    ops: Vec<Op>,
}

/// What the invariants and the bogus-frame check look at.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    snd_una: u64,
    snd_nxt: u64,
    bytes_in_flight: u64,
    rtx: Vec<u64>,
    states: Vec<(PktState, bool)>,
    rack_losses: u64,
    timeouts: u64,
    state: ConnState,
}

fn snapshot(c: &Connection<FixedWindow>) -> Snapshot {
    let s = c.send_state();
    Snapshot {
        snd_una: s.snd_una(),
        snd_nxt: s.snd_nxt(),
        bytes_in_flight: s.bytes_in_flight(),
        rtx: s.retransmit_queue().collect(),
        states: (s.snd_una()..s.snd_nxt())
            .filter_map(|q| s.packet(q).map(|p| (p.state, p.loss_declared)))
            .collect(),
        rack_losses: c.stats().rack_losses,
        timeouts: c.stats().timeouts,
        state: c.state(),
    }
}

fn check_invariants(c: &Connection<FixedWindow>, prev: &Snapshot) {
    let s = c.send_state();
    let (una, nxt) = (s.snd_una(), s.snd_nxt());
    assert!(una <= nxt, "snd_una {una} > snd_nxt {nxt}");
    assert!(una >= prev.snd_una, "snd_una moved back");
    assert!(nxt >= prev.snd_nxt, "snd_nxt moved back");
    let mut unacked_bytes = 0u64;
    let mut in_flight = 0u64;
    let mut queued = Vec::new();
    for q in una..nxt {
        let p = s
            .packet(q)
            .expect("every seq in [snd_una, snd_nxt) is tracked");
        match p.state {
            PktState::Acked => {
                assert!(q != una, "snd_una {una} is acknowledged");
            }
            PktState::InFlight => {
                in_flight += 1;
                unacked_bytes += u64::from(p.len);
            }
            PktState::Queued => {
                queued.push(q);
                unacked_bytes += u64::from(p.len);
            }
            PktState::RnrWait => {
                unacked_bytes += u64::from(p.len);
            }
        }
    }
    assert_eq!(s.bytes_in_flight(), unacked_bytes, "bytes in flight");
    assert_eq!(s.in_flight_packets(), in_flight, "in-flight packets");
    assert_eq!(
        s.retransmit_queue().collect::<Vec<_>>(),
        queued,
        "retransmit queue"
    );
}

fn resolve(sel: PsnSel, una: u64, nxt: u64) -> u32 {
    match sel {
        PsnSel::FromUna(d) => Psn::from_seq(una.wrapping_add_signed(i64::from(d))).value(),
        PsnSel::FromNxt(d) => Psn::from_seq(nxt.wrapping_add_signed(i64::from(d))).value(),
        PsnSel::Abs(v) => Psn::new(v).value(),
    }
}

/// Whether `seq` is below `snd_una` or acknowledged.
fn is_acked(c: &Connection<FixedWindow>, seq: u64) -> bool {
    let s = c.send_state();
    seq < s.snd_una() || s.packet(seq).is_some_and(|p| p.state == PktState::Acked)
}

fn sack_is_bogus(c: &Connection<FixedWindow>, s: &SackRepr) -> bool {
    let st = c.send_state();
    let (una, nxt) = (st.snd_una(), st.snd_nxt());
    let cum = Psn::new(s.cumulative_psn).unwrap(una);
    let base = Psn::new(s.bitmap_base_psn).unwrap(una);
    if cum > nxt {
        return true;
    }
    let bits: Vec<u64> = (0..64u64)
        .filter(|i| s.bitmap >> i & 1 == 1)
        .map(|i| base + i)
        .collect();
    if bits.iter().any(|&q| q >= nxt) {
        return true;
    }
    cum <= una && bits.iter().all(|&q| is_acked(c, q))
}

fn nack_is_bogus(c: &Connection<FixedWindow>, n: &NackRepr) -> bool {
    let st = c.send_state();
    let seq = Psn::new(n.psn).unwrap(st.snd_una());
    seq >= st.snd_nxt() || is_acked(c, seq)
}

struct Run {
    conn: Connection<FixedWindow>,
    now_ns: u64,
    /// (EV, timestamp) of every datagram A sent.
    sent: Vec<(u32, u32)>,
    buf: Vec<u8>,
    lkey: u32,
    wr: u64,
}

impl Run {
    fn run_timers(&mut self) {
        for _ in 0..64 {
            match self.conn.poll_timeout() {
                Some(t) if t <= self.now_ns => self.conn.handle_timeout(self.now_ns),
                _ => break,
            }
        }
    }

    fn deliver(&mut self, bytes: &[u8], bogus: bool) {
        self.run_timers();
        let before = snapshot(&self.conn);
        let bogus = bogus && before.state == ConnState::Ready;
        self.conn.handle_datagram(self.now_ns, 0, Ecn::Ect0, bytes);
        let after = snapshot(&self.conn);
        if bogus {
            assert_eq!(before, after, "a bogus frame changed the sender");
        }
        check_invariants(&self.conn, &before);
    }
}

fuzz_target!(|input: Input| {
    let n_evs = u32::from(input.n_evs % 4) + 1;
    let mut cfg = conn_config(1, input.initial_psn, 3, n_evs, 11);
    cfg.send.mtu_payload_bytes = MTU;
    cfg.send.max_outstanding_packets = u32::from(input.max_outstanding % 64) + 1;
    let cc = FixedWindowConfig {
        cwnd_bytes: 1 << 20,
    }
    .build();
    let mut conn = Connection::new(cfg, cc).expect("the fixed config is valid");
    conn.connect(PeerParams {
        qpn: PEER_QPN,
        initial_psn: Psn::new(0),
        generation: PEER_GEN,
    })
    .expect("fresh connection");
    let src = conn
        .regions_mut()
        .register(1 << 16, Access::LOCAL_WRITE)
        .expect("register");
    let mut r = Run {
        conn,
        now_ns: 1_000,
        sent: Vec::new(),
        buf: vec![0; 2048],
        lkey: src.lkey,
        wr: 0,
    };
    let base_addr = src.addr;
    for op in input.ops.iter().take(200) {
        let prev = snapshot(&r.conn);
        let (una, nxt) = (prev.snd_una, prev.snd_nxt);
        match op {
            Op::Transmit(n) => {
                for _ in 0..*n % 32 {
                    let Some(t) = r.conn.poll_transmit(r.now_ns, &mut r.buf) else {
                        break;
                    };
                    let p = PacketRepr::parse(&r.buf[..t.len]).expect("A emits valid packets");
                    r.sent.push((p.mrceth.ev, p.mrceth.send_ts_ns));
                }
                check_invariants(&r.conn, &prev);
            }
            Op::Advance(us) => {
                r.now_ns += u64::from(*us) * 100;
                r.run_timers();
                check_invariants(&r.conn, &prev);
            }
            Op::Post(len) => {
                let len = u32::from(*len) % 8192;
                let sge = Sge {
                    lkey: r.lkey,
                    addr: base_addr,
                    len,
                };
                r.wr += 1;
                let _ = r.conn.post_write(r.wr, sge, 0x1000, 0x55);
                check_invariants(&r.conn, &prev);
            }
            Op::Sack {
                cum,
                base,
                bitmap,
                echo,
                ce,
                credit,
            } => {
                let (echo_ev, echo_ts_ns) = match *echo {
                    EchoSel::Sent(i) if !r.sent.is_empty() => r.sent[usize::from(i) % r.sent.len()],
                    EchoSel::Sent(_) => (0, 0),
                    EchoSel::Raw(e, t) => (e, t),
                };
                let cum = resolve(*cum, una, nxt);
                let s = SackRepr {
                    cumulative_psn: cum,
                    bitmap_base_psn: resolve(*base, una, nxt),
                    bitmap: *bitmap,
                    echo_ev,
                    echo_ts_ns,
                    ecn_ce_count: *ce,
                    credit: *credit,
                };
                r.run_timers();
                let bogus = sack_is_bogus(&r.conn, &s);
                let bytes = craft(Opcode::Sack, 1, cum, 0, 0, PEER_GEN, 0, Body::Sack(s));
                r.deliver(&bytes, bogus);
            }
            Op::Nack { psn, reason, echo } => {
                let psn = resolve(*psn, una, nxt);
                // a sent copy's (EV, timestamp), so a NACK can name the latest copy and act
                let (echo_ev, echo_ts_ns) = match *echo {
                    EchoSel::Sent(i) if !r.sent.is_empty() => r.sent[usize::from(i) % r.sent.len()],
                    EchoSel::Sent(_) => (0, 0),
                    EchoSel::Raw(e, t) => (e % 5, t),
                };
                let n = NackRepr {
                    psn,
                    reason: NackReason::from(*reason % 10),
                    reserved: 0,
                    echo_ev,
                    echo_ts_ns,
                };
                r.run_timers();
                let bogus = nack_is_bogus(&r.conn, &n);
                let bytes = craft(Opcode::Nack, 1, psn, 0, 0, PEER_GEN, 0, Body::Nack(n));
                r.deliver(&bytes, bogus);
            }
            Op::WrongQpnSack(sel) => {
                let cum = resolve(*sel, una, nxt);
                let s = SackRepr {
                    cumulative_psn: cum,
                    bitmap_base_psn: cum,
                    bitmap: u64::MAX,
                    echo_ev: 0,
                    echo_ts_ns: 0,
                    ecn_ce_count: 1,
                    credit: 0,
                };
                let bytes = craft(Opcode::Sack, 9, cum, 0, 0, PEER_GEN, 0, Body::Sack(s));
                r.deliver(&bytes, true);
            }
            Op::Raw(bytes) => {
                let bogus = PacketRepr::parse(bytes).is_err();
                r.deliver(bytes, bogus);
            }
        }
    }
});
