//! The data phase of the point-to-point patterns: every stream of this rank sends its
//! bursts, every stream into it is counted (and, with `--verify`, checked byte for byte
//! by the engine), all in one thread that polls every QP.
//!
//! A stream is message `i` (a WRITE_WITH_IMM, immediate `i mod 2^32`) into slot
//! `i mod slots` of the peer's destination, at most `--tx-depth` in flight, then an end
//! marker: a zero-length SEND whose immediate is the count. A receiver is done with a
//! stream when the marker came and the count matches what it received, in order.

use super::bursts::{Schedule, Tracker};
use super::conn::{MARKER_WR_ID, PROBE_IMM, PROBE_WR_ID, RankConn};
use super::opts::Plan;
use super::patterns::stream_seed;
use mrc_transport::completion::{Completion, WcOpcode};
use std::time::{Duration, Instant};

/// Receives each QP that receives a stream keeps posted: the peer's window and slack
/// (`4 x tx-depth + 64`, as `mrc-perf`'s bw receiver), plus the marker.
pub fn stream_recvs(plan: &Plan) -> u64 {
    4 * plan.params.tx_depth + 65
}

/// Sends a probe on every QP and waits, up to `timeout`, for every QP's own probe to be
/// acknowledged and the peer's to arrive: the ranks can reach one another over mrc.
/// Each QP needs one receive posted for it.
///
/// # Errors
/// The peers that did not answer, with their addresses.
pub fn probe(conn: &RankConn, timeout: Duration) -> Result<(), String> {
    for i in 0..conn.qps.len() {
        conn.send_imm(i, PROBE_WR_ID, PROBE_IMM)?;
    }
    let n = conn.qps.len();
    let (mut acked, mut heard) = (vec![false; n], vec![false; n]);
    let until = Instant::now() + timeout;
    let mut got = Vec::new();
    while acked.iter().chain(&heard).any(|d| !d) {
        for i in 0..n {
            got.clear();
            conn.poll_send(i, &mut got);
            for c in &got {
                conn.check(i, c)?;
                acked[i] |= c.wr_id == PROBE_WR_ID;
            }
            got.clear();
            conn.poll_recv(i, &mut got);
            for c in &got {
                conn.check(i, c)?;
                if c.opcode != WcOpcode::Recv || c.imm != Some(PROBE_IMM) {
                    return Err(format!(
                        "rank {} sent {:?} imm {:?} before the test began",
                        conn.qps[i].peer, c.opcode, c.imm
                    ));
                }
                heard[i] = true;
            }
        }
        if Instant::now() > until {
            let missing: Vec<String> = (0..n)
                .filter(|i| !acked[*i] || !heard[*i])
                .map(|i| {
                    let q = &conn.qps[i];
                    format!(
                        "rank {} at {}",
                        q.peer,
                        q.peer_udp.map_or("?".into(), |a| a.to_string())
                    )
                })
                .collect();
            return Err(format!(
                "cannot reach {} over mrc within {:.1} s (from {}; wrong --bind/--advertise \
                 address, a firewall, or no route?)",
                missing.join(", "),
                timeout.as_secs_f64(),
                conn.advertised
            ));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    Ok(())
}

/// One stream out of this rank.
struct Tx {
    qp: usize,
    seed: u64,
    sched: Schedule,
    /// The burst to begin next, or the one open.
    k: u64,
    open: bool,
    in_burst: u64,
    posted: u64,
    done: u64,
    marker_posted: bool,
    marker_done: bool,
    tracker: Tracker,
    post_ns: Vec<u64>,
}

/// One stream into this rank.
struct Rx {
    qp: usize,
    peer: u32,
    messages: u64,
    bytes: u64,
    marker: Option<u32>,
    first_ns: Option<u64>,
    last_ns: u64,
}

/// What this rank's streams did.
#[derive(Clone, Debug, Default)]
pub struct StreamsResult {
    /// Messages sent and acknowledged.
    pub sent_messages: u64,
    /// Bytes in them.
    pub sent_bytes: u64,
    /// From the first post to the last send completion, ns.
    pub send_span_ns: u64,
    /// Messages received.
    pub recv_messages: u64,
    /// Bytes in them.
    pub recv_bytes: u64,
    /// From the first receive to the last, ns.
    pub recv_span_ns: u64,
    /// Per stream burst: (burst index, completion time ns), every stream of this rank.
    pub bursts: Vec<(u64, u64)>,
    /// Post-to-completion time of every message, ns.
    pub message_ns: Vec<u64>,
    /// How late each burst began against its schedule, ns.
    pub start_late_ns: Vec<u64>,
}

/// Runs this rank's streams of `plan` from `start` (the run's instant 0): sends to
/// `dsts`, receives from `srcs` (peer ranks; each has a QP in `conn`). Receives were
/// posted (see [`stream_recvs`]); verify specs set.
///
/// # Errors
/// A failed completion, an out-of-order message, a count that differs from the marker's,
/// or no progress for `--timeout` while something is outstanding.
pub fn run_streams(
    conn: &mut RankConn,
    plan: &Plan,
    me: u32,
    dsts: &[u32],
    srcs: &[u32],
    start: Instant,
) -> Result<StreamsResult, String> {
    let p = &plan.params;
    let slots = p.region_size / p.size;
    let timeout = Duration::from_secs_f64(plan.timeout_s);
    let idx = |peer: u32| conn.index(peer).ok_or(format!("no QP for rank {peer}"));
    let mut tx: Vec<Tx> = Vec::new();
    for &d in dsts {
        let seed = stream_seed(plan.seed, me, d);
        tx.push(Tx {
            qp: idx(d)?,
            seed,
            sched: Schedule::new(plan, seed),
            k: 0,
            open: false,
            in_burst: 0,
            posted: 0,
            done: 0,
            marker_posted: false,
            marker_done: false,
            tracker: Tracker::default(),
            post_ns: vec![0; slots as usize],
        });
    }
    let mut rx: Vec<Rx> = Vec::new();
    for &s in srcs {
        rx.push(Rx {
            qp: idx(s)?,
            peer: s,
            messages: 0,
            bytes: 0,
            marker: None,
            first_ns: None,
            last_ns: 0,
        });
    }
    let mut r = StreamsResult::default();
    let mut first_post: Option<u64> = None;
    let mut last_send = 0u64;
    let mut last_progress = Instant::now();
    let mut got: Vec<Completion> = Vec::with_capacity(4096);
    loop {
        let now = Instant::now();
        let t = now.saturating_duration_since(start).as_nanos() as u64;
        let mut progress = false;
        let mut next_event = u64::MAX;
        for s in &mut tx {
            if !s.open && s.k < s.sched.bursts {
                let due = s.sched.start_ns(s.k);
                if t >= due {
                    s.tracker.begin(s.k, s.posted, due);
                    r.start_late_ns.push(t - due);
                    s.open = true;
                    s.in_burst = 0;
                } else {
                    next_event = next_event.min(due);
                }
            }
            while s.open {
                let full = match s.sched.messages {
                    Some(m) => s.in_burst >= m,
                    None => t >= s.sched.post_until_ns(s.k),
                };
                if full {
                    s.tracker.end(s.posted, t);
                    s.open = false;
                    s.k += 1;
                    break;
                }
                if s.posted - s.done >= p.tx_depth {
                    break;
                }
                let off = (s.posted % slots) * p.size;
                if p.verify {
                    conn.fill(s.qp, off, p.size, s.seed, u64::from(s.posted as u32))?;
                }
                conn.write(s.qp, s.posted, off, p.size, s.posted as u32)?;
                first_post.get_or_insert(t);
                s.post_ns[(s.posted % slots) as usize] = t;
                if s.posted == s.done {
                    last_progress = now;
                }
                s.posted += 1;
                s.in_burst += 1;
                progress = true;
            }
            if s.open && s.sched.messages.is_none() {
                next_event = next_event.min(s.sched.post_until_ns(s.k));
            }
            if !s.open && s.k >= s.sched.bursts && !s.marker_posted {
                if s.posted >= 1 << 32 {
                    return Err("more than 2^32 messages in one stream".into());
                }
                conn.send_imm(s.qp, MARKER_WR_ID, s.posted as u32)?;
                s.marker_posted = true;
            }
        }
        for s in &mut tx {
            got.clear();
            conn.poll_send(s.qp, &mut got);
            for c in &got {
                conn.check(s.qp, c)?;
                progress = true;
                if c.wr_id == MARKER_WR_ID {
                    s.marker_done = true;
                    continue;
                }
                s.done += 1;
                last_send = t;
                s.tracker.complete(c.wr_id, t);
                r.message_ns
                    .push(t.saturating_sub(s.post_ns[(c.wr_id % slots) as usize]));
            }
        }
        for x in &mut rx {
            got.clear();
            conn.poll_recv(x.qp, &mut got);
            let n = got.len() as u64;
            for c in &got {
                conn.check(x.qp, c)?;
                match (c.opcode, c.imm) {
                    (WcOpcode::RecvRdmaWithImm, Some(i)) if i == x.messages as u32 => {
                        x.messages += 1;
                        x.bytes += u64::from(c.byte_len);
                        x.first_ns.get_or_insert(t);
                        x.last_ns = t;
                    }
                    (WcOpcode::Recv, Some(count)) if x.marker.is_none() => {
                        if count != x.messages as u32 {
                            return Err(format!(
                                "rank {} says it sent {count} messages, {} arrived",
                                x.peer, x.messages
                            ));
                        }
                        x.marker = Some(count);
                    }
                    (op, imm) => {
                        return Err(format!(
                            "from rank {}: expected message {} got {op:?} imm {imm:?}",
                            x.peer, x.messages
                        ));
                    }
                }
            }
            if n > 0 {
                progress = true;
                conn.post_recvs(x.qp, n)?;
            }
        }
        let sending = tx.iter().any(|s| !s.marker_done);
        let receiving = rx.iter().any(|x| x.marker.is_none());
        if !sending && !receiving {
            break;
        }
        if progress {
            last_progress = now;
            continue;
        }
        let outstanding = tx
            .iter()
            .any(|s| s.posted > s.done || (s.marker_posted && !s.marker_done));
        let waiting_sched = next_event != u64::MAX;
        // A receiver waits as long as its senders' plan (bursts far apart) plus the timeout.
        let rx_grace = tx
            .first()
            .map(|s| s.sched.planned_ns())
            .unwrap_or_else(|| Schedule::new(plan, 0).planned_ns());
        let stalled = now.duration_since(last_progress) > timeout
            && (outstanding || (!waiting_sched && t > rx_grace));
        if stalled {
            let mut what: Vec<String> = tx
                .iter()
                .filter(|s| !s.marker_done)
                .map(|s| {
                    format!(
                        "to rank {}: {} of {} messages acknowledged",
                        conn.qps[s.qp].peer, s.done, s.posted
                    )
                })
                .collect();
            what.extend(rx.iter().filter(|x| x.marker.is_none()).map(|x| {
                format!(
                    "from rank {}: {} messages, no end marker",
                    x.peer, x.messages
                )
            }));
            return Err(format!(
                "no progress for {:.1} s ({})",
                timeout.as_secs_f64(),
                what.join("; ")
            ));
        }
        // Idle: sleep towards the next scheduled burst, spinning its last 100 us.
        let gap = next_event.saturating_sub(t);
        if outstanding || gap < 100_000 {
            if gap < 100_000 && !outstanding {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(10));
            }
        } else {
            std::thread::sleep(Duration::from_nanos((gap - 100_000).min(1_000_000)));
        }
    }
    for s in &tx {
        r.sent_messages += s.done;
        r.sent_bytes += s.done * p.size;
        r.bursts.extend_from_slice(&s.tracker.completed);
    }
    r.send_span_ns = first_post.map_or(0, |f| last_send.saturating_sub(f));
    let (mut f, mut l) = (u64::MAX, 0u64);
    for x in &rx {
        r.recv_messages += x.messages;
        r.recv_bytes += x.bytes;
        if let Some(a) = x.first_ns {
            f = f.min(a);
            l = l.max(x.last_ns);
        }
    }
    r.recv_span_ns = l.saturating_sub(f.min(l));
    Ok(r)
}
