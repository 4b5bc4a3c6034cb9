//! One transfer under a fault schedule, checked end to end: the runner behind the
//! `transfer` fuzz target and its regression tests.
//!
//! A [`Schedule`] names the connection setup (EVs, MTU, controller, go-back-N, initial
//! PSNs), a handful of messages (RDMA WRITE, WRITE_WITH_IMM, SEND of any size) and the
//! network's misdeeds: per-datagram actions for the first datagrams each side sends
//! (drop, duplicate, delay, trim, ECN CE mark), EVs that go dark for a while (a black
//! hole, or the datapath denying the EV at both ends) and EVs that go dark for good.
//! [`run`] plays it on a [`Pair`] and checks the outcome.
//!
//! ## What the network may do (so that the verdict is decidable)
//!
//! With default timers (initial RTO 1 ms, minimum 200 us, retry limit 7) a work request
//! fails after 8 consecutive RTO expiries without progress. The schedule is normalised so
//! that without a permanent outage at most 6 expiries can pass without progress:
//! * per-datagram drops and trims hit only the first transmission of a data PSN
//!   (`copy == 0`): at most one RTO round lost per PSN;
//! * at most [`MAX_CONTROL_DROPS_IN_A_ROW`] consecutive acknowledgements (SACK, NACK) of
//!   a side are dropped (a third in a row is delivered, whatever other control datagrams
//!   went between): at most two rounds lose their SACKs (counting every control datagram
//!   let a probe reply take the delivered turn each round: the SACK of every RTO round
//!   could be dropped, and the retry limit ran out on a deliverable schedule);
//! * while every EV is dark (finite outages overlapping), the total time is at most
//!   [`MAX_FINITE_DARK_NS`] (outages late in the list are discarded until it holds): with
//!   RTOs of at least 200 us doubling, at most three expiries fall in 1 ms;
//! * extra delays are at most 255 us (a late SACK still counts as progress).
//!
//! ## Verdict
//! * Deliverable (no moment from which every EV is dark for good): every work request
//!   completes `Success` exactly once, in posting order, within [`BOUND_NS`] of virtual
//!   time; the receiver completes every SEND and WRITE_WITH_IMM exactly once, in order,
//!   with the right length and immediate; each message's bytes are exactly where its kind
//!   puts them and nothing else is written; the receiver accepted every data PSN exactly
//!   once (`received` equals the packet count, `received_bytes` the byte count).
//! * Impossible (from `t_dark` on every EV is black-holed for good): the sender's
//!   completions are each work request exactly once in posting order, a prefix of
//!   `Success`, then the first failure `RetryExceeded` and the rest `Flushed`, all within
//!   `t_dark +` [`BOUND_NS`]; the receiver's completions are a prefix of the expected
//!   ones; every byte of the receive regions is either untouched (0) or the right byte.
//! * Never a hang: if nothing is left to happen (no delivery, timer or EV change pending)
//!   before the verdict holds, that is a failure.

use crate::harness::{Action, Faults, NetConfig, PacketInfo, Pair, Side, conn_config, pattern};
use mrc_congestion::{AnyController, CcKind, LinkParams};
use mrc_transport::path::PathState;
use mrc_transport::send::msg::packets_for;
use mrc_transport::stats::{ConnStats, EvStats};
use mrc_transport::wire::Opcode;
use mrc_transport::{Access, Completion, ConnState, Sge, WcOpcode, WcStatus};

/// Consecutive acknowledgements (SACK, NACK) of one side the schedule may drop.
pub const MAX_CONTROL_DROPS_IN_A_ROW: u32 = 2;
/// Longest total time every EV may be dark by finite outages, ns.
pub const MAX_FINITE_DARK_NS: u64 = 1_000_000;
/// Virtual-time bound: eight RTOs at full back-off (100 ms each) plus slack for pacing at
/// a controller's minimum rate; far beyond what any deliverable schedule needs.
pub const BOUND_NS: u64 = 2_000_000_000;

/// What a message does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgKind {
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate (consumes a posted receive).
    WriteImm,
    /// SEND (into a posted receive).
    Send,
}

/// What the network does with one datagram (before normalisation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetAct {
    /// Deliver.
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver, and a copy `us` microseconds later.
    Duplicate(u8),
    /// Deliver `us` microseconds late.
    Delay(u8),
    /// Two copies, each late by its own number of microseconds.
    DelayTwice(u8, u8),
    /// Cut the payload and set the trim flag.
    Trim,
    /// Set ECN CE.
    MarkCe,
}

/// How an EV goes dark for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutageKind {
    /// Everything sent on it is lost (both directions).
    BlackHole,
    /// The datapath reports it down at both endpoints.
    Denied,
    /// A's NIC port on the EV's plane (`ev mod planes`) goes down: A's datapath reports
    /// the port down ([`mrc_transport::Connection::set_local_plane`], which sends B a Port
    /// Status Update) and every EV of that plane is black-holed both ways; at the end the
    /// port is reported up again.
    LocalPort,
}

/// One finite outage of one EV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    /// EV (taken modulo the number of EVs).
    pub ev: u32,
    /// Start, ns.
    pub start_ns: u64,
    /// Length, ns.
    pub len_ns: u64,
    /// Black hole or denial.
    pub kind: OutageKind,
}

/// A transfer and what the network does to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Number of EVs, 1..=8 (EVs are `0..n_evs`).
    pub n_evs: u32,
    /// Planes, 1..=min(4, n_evs): EV `i` on plane `i mod planes` at both ends
    /// ([`mrc_transport::ConnConfig::interleaved_planes`]).
    pub planes: u32,
    /// Payload bytes per packet.
    pub mtu_payload_bytes: u32,
    /// Congestion controller (its default preset for 100 Gb/s, 12 us, trimming on).
    pub cc: CcKind,
    /// Go-back-N at both ends instead of selective repeat.
    pub go_back_n: bool,
    /// Initial PSN of A and of B (24 bits used).
    pub initial_psns: (u32, u32),
    /// Messages A posts, in order: kind and length in bytes.
    pub msgs: Vec<(MsgKind, u32)>,
    /// Actions for A's datagrams, by index (beyond the end: deliver).
    pub a_acts: Vec<NetAct>,
    /// Actions for B's datagrams, by index.
    pub b_acts: Vec<NetAct>,
    /// Finite outages.
    pub outages: Vec<Outage>,
    /// `(ev, from_ns)`: the EV is black-holed from then on, for good.
    pub permanent: Vec<(u32, u64)>,
}

/// What [`run`] saw when the verdict held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Virtual time at the verdict, ns.
    pub end_ns: u64,
    /// Work requests that completed `Success`.
    pub succeeded: usize,
    /// Whether the schedule made delivery impossible (`t_dark`, ns).
    pub dark_from_ns: Option<u64>,
    /// A's connection counters 10 ms after the verdict.
    pub a_stats: ConnStats,
    /// B's connection counters 10 ms after the verdict.
    pub b_stats: ConnStats,
    /// A's per-EV counters then, by EV.
    pub a_ev_stats: Vec<EvStats>,
    /// A's EV states then, by EV.
    pub a_ev_states: Vec<PathState>,
}

impl Schedule {
    /// The schedule with its limits applied (see the module docs): EVs and outage EVs in
    /// range, finite all-dark time at most [`MAX_FINITE_DARK_NS`], at most 8 messages of
    /// at most 64 KiB in total.
    pub fn normalised(&self) -> Schedule {
        let mut s = self.clone();
        s.n_evs = s.n_evs.clamp(1, 8);
        s.planes = s.planes.clamp(1, s.n_evs.min(4));
        s.mtu_payload_bytes = s.mtu_payload_bytes.clamp(64, 4096);
        s.msgs.truncate(8);
        let mut total = 0u32;
        for m in &mut s.msgs {
            m.1 = m.1.min((64 << 10) - total);
            total += m.1;
        }
        for o in &mut s.outages {
            o.ev %= s.n_evs;
        }
        for p in &mut s.permanent {
            p.0 %= s.n_evs;
        }
        while finite_dark_ns(&s) > MAX_FINITE_DARK_NS {
            s.outages.pop();
        }
        s
    }

    /// The time from which every EV is black-holed for good, if there is one.
    pub fn dark_from_ns(&self) -> Option<u64> {
        (0..self.n_evs)
            .map(|ev| {
                self.permanent
                    .iter()
                    .filter(|p| p.0 == ev)
                    .map(|p| p.1)
                    .min()
            })
            .collect::<Option<Vec<u64>>>()
            .and_then(|v| v.into_iter().max())
    }

    fn dark_at(&self, ev: u32, t: u64) -> bool {
        self.outages.iter().any(|o| {
            self.outage_covers(o, ev) && o.start_ns <= t && t < o.start_ns.saturating_add(o.len_ns)
        }) || self.permanent.iter().any(|p| p.0 == ev && p.1 <= t)
    }

    /// The plane of `ev`.
    fn plane_of(&self, ev: u32) -> u32 {
        ev % self.planes.max(1)
    }

    /// Whether outage `o` darkens `ev`: its own EV, or for a port outage every EV of the
    /// port's plane.
    fn outage_covers(&self, o: &Outage, ev: u32) -> bool {
        match o.kind {
            OutageKind::LocalPort => self.plane_of(o.ev) == self.plane_of(ev),
            OutageKind::BlackHole | OutageKind::Denied => o.ev == ev,
        }
    }
}

/// Total time before the permanent darkness (if any) during which every EV is dark.
fn finite_dark_ns(s: &Schedule) -> u64 {
    let horizon = s.dark_from_ns().unwrap_or(u64::MAX);
    let mut points: Vec<u64> = vec![0];
    for o in &s.outages {
        points.push(o.start_ns);
        points.push(o.start_ns.saturating_add(o.len_ns));
    }
    for p in &s.permanent {
        points.push(p.1);
    }
    points.retain(|&t| t < horizon);
    points.push(horizon);
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .filter(|w| (0..s.n_evs).all(|ev| s.dark_at(ev, w[0])))
        .map(|w| w[1] - w[0])
        .sum()
}

/// State of the per-datagram script.
struct Script {
    sched: Schedule,
    drops_in_a_row: [u32; 2],
}

impl Script {
    fn decide(&mut self, info: &PacketInfo) -> Action {
        let side = usize::from(info.from == Side::B);
        let black_hole = self.sched.outages.iter().any(|o| {
            o.kind != OutageKind::Denied
                && self.sched.outage_covers(o, info.ev)
                && o.start_ns <= info.now_ns
                && info.now_ns < o.start_ns.saturating_add(o.len_ns)
        });
        if black_hole {
            return Action::Drop;
        }
        let acts = if info.from == Side::A {
            &self.sched.a_acts
        } else {
            &self.sched.b_acts
        };
        let act = usize::try_from(info.nth)
            .ok()
            .and_then(|i| acts.get(i))
            .copied()
            .unwrap_or(NetAct::Deliver);
        let us = |x: u8| u64::from(x) * 1_000;
        let ack = matches!(info.opcode, Opcode::Sack | Opcode::Nack);
        let action = match act {
            NetAct::Deliver => Action::Deliver,
            NetAct::Drop if info.is_data && info.copy > 0 => Action::Deliver,
            NetAct::Drop if ack && self.drops_in_a_row[side] >= MAX_CONTROL_DROPS_IN_A_ROW => {
                Action::Deliver
            }
            NetAct::Drop => Action::Drop,
            NetAct::Duplicate(d) => Action::Duplicate(us(d)),
            NetAct::Delay(d) => Action::Delay(us(d)),
            NetAct::DelayTwice(d1, d2) => Action::DelayTwice(us(d1), us(d2)),
            NetAct::Trim if info.copy > 0 => Action::Deliver,
            NetAct::Trim => Action::Trim,
            NetAct::MarkCe => Action::MarkCe,
        };
        if ack {
            if action == Action::Drop {
                self.drops_in_a_row[side] += 1;
            } else {
                self.drops_in_a_row[side] = 0;
            }
        }
        action
    }
}

/// Plays `sched` (after [`Schedule::normalised`]) and checks the verdict described in the
/// module docs.
///
/// # Errors
/// A description of the first property that failed.
pub fn run(sched: &Schedule) -> Result<Report, String> {
    let s = sched.normalised();
    let dark_from = s.dark_from_ns();
    let mut ca = conn_config(0xA, s.initial_psns.0, 1, s.n_evs, 5);
    let mut cb = conn_config(0xB, s.initial_psns.1, 2, s.n_evs, 6);
    for c in [&mut ca, &mut cb] {
        c.send.mtu_payload_bytes = s.mtu_payload_bytes;
        c.go_back_n = s.go_back_n;
        c.ev_planes =
            mrc_transport::ConnConfig::interleaved_planes(s.n_evs as usize, s.planes as u8);
    }
    let link = LinkParams {
        line_rate_bps: 100_000_000_000,
        base_rtt_ns: 12_000,
        mtu_bytes: u64::from(s.mtu_payload_bytes),
        trimming_enabled: true,
    };
    let cc = || AnyController::new(s.cc, &link).map_err(|e| format!("controller: {e}"));
    let net = NetConfig {
        faults: Faults {
            black_holes: s.permanent.clone(),
            ..Faults::default()
        },
        ..NetConfig::default()
    };
    let mut p: Pair<AnyController> = Pair::new(ca, cc()?, cb, cc()?, net);
    let total: u64 = s.msgs.iter().map(|m| u64::from(m.1)).sum();
    let len = total.max(1) as usize;
    let reg = |e: mrc_transport::region::RegisterError| format!("register: {e:?}");
    let acc = |e: mrc_transport::region::AccessError| format!("region: {e:?}");
    let src =
        p.a.regions_mut()
            .register(len, Access::LOCAL_WRITE)
            .map_err(reg)?;
    pattern(p.a.regions_mut().bytes_mut(src.lkey).map_err(acc)?, 0x5eed);
    let dst =
        p.b.regions_mut()
            .register(len, Access::REMOTE_WRITE)
            .map_err(reg)?;
    let rbuf =
        p.b.regions_mut()
            .register(len, Access::LOCAL_WRITE)
            .map_err(reg)?;
    let mut want_b: Vec<(u64, WcOpcode, u32, Option<u32>)> = Vec::new();
    let mut off = 0u64;
    for (i, &(kind, n)) in s.msgs.iter().enumerate() {
        let i = i as u64;
        let sge = Sge {
            lkey: src.lkey,
            addr: src.addr + off,
            len: n,
        };
        let imm = 0xC0DE_0000 | i as u32;
        let posted = match kind {
            MsgKind::Write => p.a.post_write(i, sge, dst.addr + off, dst.rkey),
            MsgKind::WriteImm => {
                want_b.push((100 + i, WcOpcode::RecvRdmaWithImm, n, Some(imm)));
                p.a.post_write_with_imm(i, sge, dst.addr + off, dst.rkey, imm)
            }
            MsgKind::Send => {
                want_b.push((100 + i, WcOpcode::Recv, n, None));
                p.a.post_send(i, sge)
            }
        };
        posted.map_err(|e| format!("post {i}: {e:?}"))?;
        if kind != MsgKind::Write {
            let rsge = Sge {
                lkey: rbuf.lkey,
                addr: rbuf.addr + off,
                len: n,
            };
            p.b.post_recv(100 + i, rsge)
                .map_err(|e| format!("post_recv {i}: {e:?}"))?;
        }
        off += u64::from(n);
    }
    let mut script = Script {
        sched: s.clone(),
        drops_in_a_row: [0; 2],
    };
    p.script(move |info| script.decide(info));
    // EV denials as (time, ev, down, port), in time order; `port`: A's NIC port on the
    // EV's plane (the EV names the plane).
    let mut toggles: Vec<(u64, u32, bool, bool)> = s
        .outages
        .iter()
        .filter(|o| o.kind != OutageKind::BlackHole)
        .flat_map(|o| {
            let port = o.kind == OutageKind::LocalPort;
            let key = if port { s.plane_of(o.ev) } else { o.ev };
            [
                (o.start_ns, key, true, port),
                (o.start_ns.saturating_add(o.len_ns), key, false, port),
            ]
        })
        .collect();
    // At equal times an EV goes down before it comes back up, so a zero-length denial
    // is no denial (not one that never ends).
    toggles.sort_unstable_by_key(|&(t, ev, down, port)| (t, !down, port, ev));
    let mut down = vec![0u32; s.n_evs as usize];
    let mut port_down = vec![0u32; s.planes as usize];
    let mut next_toggle = 0usize;

    let n = s.msgs.len();
    let limit = dark_from.unwrap_or(0).saturating_add(BOUND_NS);
    let mut a_done: Vec<Completion> = Vec::new();
    let mut b_done: Vec<Completion> = Vec::new();
    let mut same_time_steps = 0u32;
    loop {
        a_done.extend(p.a_completions());
        b_done.extend(p.b_completions());
        if a_done.len() >= n
            && (b_done.len() >= want_b.len()
                || a_done.iter().any(|c| c.status != WcStatus::Success))
        {
            break;
        }
        if p.now_ns > limit {
            return Err(format!(
                "not done by {} ns (bound {limit}): a {a_done:?} b {b_done:?}",
                p.now_ns
            ));
        }
        p.pump();
        let ev_t = p.next_event_ns();
        let tg_t = toggles.get(next_toggle).map(|t| t.0);
        let toggle_first = tg_t.is_some_and(|t| ev_t.is_none_or(|e| t <= e));
        match (ev_t, tg_t) {
            (_, Some(t)) if toggle_first => {
                let (_, key, d, port) = toggles[next_toggle];
                next_toggle += 1;
                p.now_ns = p.now_ns.max(t);
                let slot = if port {
                    &mut port_down[key as usize]
                } else {
                    &mut down[key as usize]
                };
                *slot = if d { *slot + 1 } else { slot.saturating_sub(1) };
                let denied = *slot > 0;
                if port {
                    p.a.set_local_plane(key as u8, !denied, p.now_ns);
                } else {
                    p.a.set_ev_denied(key, denied);
                    p.b.set_ev_denied(key, denied);
                }
            }
            (Some(_), _) | (None, Some(_)) => {
                let before = p.now_ns;
                p.step();
                if p.now_ns == before {
                    same_time_steps += 1;
                    if same_time_steps > 1_000_000 {
                        return Err(format!("livelock at {} ns", p.now_ns));
                    }
                } else {
                    same_time_steps = 0;
                }
            }
            (None, None) => {
                return Err(format!(
                    "hang: nothing left to happen at {} ns: a {a_done:?} b {b_done:?}, a {:?} b {:?}",
                    p.now_ns,
                    p.a.state(),
                    p.b.state()
                ));
            }
        }
    }
    let end_ns = p.now_ns;
    // A little longer: nothing completes twice.
    p.run_until(end_ns + 10_000_000, |_| false);
    a_done.extend(p.a_completions());
    b_done.extend(p.b_completions());

    let a: Vec<u64> = a_done.iter().map(|c| c.wr_id).collect();
    if a != (0..n as u64).collect::<Vec<_>>() {
        return Err(format!(
            "sender completions not exactly once in order: {a_done:?}"
        ));
    }
    let succeeded = a_done
        .iter()
        .take_while(|c| c.status == WcStatus::Success)
        .count();
    let failed = &a_done[succeeded..];
    if let Some(first) = failed.first() {
        if dark_from.is_none() {
            return Err(format!("deliverable schedule failed: {a_done:?}"));
        }
        if first.status != WcStatus::RetryExceeded
            || failed[1..].iter().any(|c| c.status != WcStatus::Flushed)
        {
            return Err(format!(
                "failure completions not RetryExceeded then Flushed: {a_done:?}"
            ));
        }
        if p.a.state() != ConnState::Error {
            return Err(format!("failed sender in state {:?}", p.a.state()));
        }
    }
    let b: Vec<(u64, WcOpcode, u32, Option<u32>)> = b_done
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm))
        .collect();
    if b_done.iter().any(|c| c.status != WcStatus::Success) || !want_b.starts_with(&b) {
        return Err(format!(
            "receiver completions {b_done:?}, want (a prefix of) {want_b:?}"
        ));
    }
    if failed.is_empty() && b.len() != want_b.len() {
        return Err(format!("receiver completions {b_done:?}, want {want_b:?}"));
    }
    let sb = p.a.regions().bytes(src.lkey).map_err(acc)?;
    let db = p.b.regions().bytes(dst.lkey).map_err(acc)?;
    let rb = p.b.regions().bytes(rbuf.lkey).map_err(acc)?;
    let mut off = 0usize;
    let mut recv_idx = 0usize;
    for (i, &(kind, n)) in s.msgs.iter().enumerate() {
        let range = off..off + n as usize;
        let (hit, miss) = if kind == MsgKind::Send {
            (rb, db)
        } else {
            (db, rb)
        };
        let exact = if kind == MsgKind::Write {
            i < succeeded
        } else {
            recv_idx += 1;
            recv_idx <= b.len()
        };
        if exact && hit[range.clone()] != sb[range.clone()] {
            return Err(format!("message {i} ({kind:?}, {n} bytes): bytes differ"));
        }
        if !exact
            && hit[range.clone()]
                .iter()
                .zip(&sb[range.clone()])
                .any(|(&h, &w)| h != 0 && h != w)
        {
            return Err(format!(
                "message {i} ({kind:?}, {n} bytes): a wrong byte written"
            ));
        }
        if miss[range].iter().any(|&x| x != 0) {
            return Err(format!(
                "message {i} ({kind:?}): bytes written where they do not belong"
            ));
        }
        off += n as usize;
    }
    if failed.is_empty() {
        let packets: u64 = s
            .msgs
            .iter()
            .map(|m| u64::from(packets_for(m.1, s.mtu_payload_bytes)))
            .sum();
        let st = p.b.stats();
        if (st.received, st.received_bytes) != (packets, total) {
            return Err(format!(
                "receiver accepted {} packets / {} bytes, want each of {packets} / {total} once",
                st.received, st.received_bytes
            ));
        }
        if p.a.state() != ConnState::Ready {
            return Err(format!("sender in state {:?} after success", p.a.state()));
        }
    }
    Ok(Report {
        end_ns,
        succeeded,
        dark_from_ns: dark_from,
        a_stats: *p.a.stats(),
        b_stats: *p.b.stats(),
        a_ev_stats: p.a.paths().paths().iter().map(|e| e.stats).collect(),
        a_ev_states: p.a.paths().paths().iter().map(|e| e.state).collect(),
    })
}
