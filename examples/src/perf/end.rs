//! One end's test on a connected side ([`run_end`]): the test loops on their threads
//! (`perf::loops`), the control messages that end it (the peer's `Done` count, its
//! receiver's result, an `Abort`), and the results of one end ([`EndResult`]), also when
//! it fails ([`RunError`], with an [`EndError`]).

use super::interrupt;
use super::loops::{self, LoopError, SendResult};
use super::opts::{TestKind, TestParams};
use super::report::{self, EvLine, PlaneLine, ProgressOpts};
use super::run::{Ctl, CtlStream, DROP_REASONS, RecvResult, Side};
use mrc_fabric::engine::EngineError;
use mrc_fabric::engine::bootstrap::RemoteMr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// Why [`run_end`] ended without the peer's result.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    /// A test loop ended early: a failure, a signal, or the peer's `Abort`.
    #[error(transparent)]
    Loop(#[from] LoopError),
    /// This end's engine is gone: its counters cannot be read.
    #[error("{0}")]
    Engine(#[from] EngineError),
    /// The control stream failed or the peer sent something else (its reader's words).
    #[error("{0}")]
    Control(String),
    /// The peer closed the control stream before it sent its receiver's result.
    #[error("peer closed the control stream")]
    PeerClosed,
    /// The peer's receiver's result did not come within `timeout_s` seconds.
    #[error("peer sent no result within {timeout_s:.1} s")]
    NoResult {
        /// The timeout, seconds.
        timeout_s: f64,
    },
}

/// Everything one end measured.
#[derive(Debug, Default)]
pub struct EndResult {
    /// Its sender (bw, or ping for lat; empty on a passive end).
    pub send: Option<SendResult>,
    /// Its receiver.
    pub recv: RecvResult,
    /// What the peer's receiver reported.
    pub peer_recv: RecvResult,
    /// Per-EV lines of its QP.
    pub evs: Vec<EvLine>,
    /// Per-plane lines of its QP (one on one plane).
    pub planes: Vec<PlaneLine>,
    /// Connection counters.
    pub conn: mrc_transport::stats::ConnStats,
    /// Process CPU seconds over the test.
    pub cpu_s: f64,
    /// This side's engine counters (datapath calls, errors, sleeps).
    pub engine: mrc_fabric::engine::EngineStats,
    /// The receive address of the engine behind [`EndResult::engine`] (`--progress
    /// thread`): [`EndResult::sum`] counts an engine shared by several QPs once.
    pub engine_addr: Option<SocketAddr>,
    /// Why the test failed, when this is what a failed test measured before it failed
    /// ([`RunError::partial`]); `None` for a test that ran to its end.
    pub failure: Option<String>,
}

/// A failed test: why, and what this end measured until then (a report never vanishes:
/// the client prints it with `"ok": false`).
#[derive(Debug)]
pub struct RunError {
    /// The error, as the user sees it.
    pub message: String,
    /// This end's counters and completed messages up to the failure, with
    /// [`EndResult::failure`] set; `None` when the test failed before it started (setup)
    /// or this end's engine was gone.
    pub partial: Option<Box<EndResult>>,
}

impl From<String> for RunError {
    fn from(message: String) -> Self {
        RunError {
            message,
            partial: None,
        }
    }
}

impl From<&str> for RunError {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

impl From<EndError> for RunError {
    fn from(e: EndError) -> Self {
        RunError::with_partial(e, None)
    }
}

impl RunError {
    /// A failed test's error `e` and what this end measured until then (`partial`, its
    /// [`EndResult::failure`] set to `e`'s message).
    pub fn with_partial(e: EndError, partial: Option<EndResult>) -> Self {
        let message = e.to_string();
        RunError {
            partial: partial.map(|mut r| {
                r.failure = Some(message.clone());
                Box::new(r)
            }),
            message,
        }
    }
}

impl RecvResult {
    /// Adds `o`'s counts to these (drops by reason merged; the longer elapsed time; the
    /// peaks added, an upper bound of the peak of the sum).
    fn add(&mut self, o: &RecvResult) {
        self.completions += o.completions;
        self.bytes += o.bytes;
        self.verified_messages += o.verified_messages;
        self.verified_bytes += o.verified_bytes;
        self.bad_bytes += o.bad_bytes;
        for (k, v) in &o.drops {
            *self.drops.entry(k.clone()).or_default() += v;
        }
        self.unknown_qpn += o.unknown_qpn;
        self.source_drops.before_connect += o.source_drops.before_connect;
        self.source_drops.wrong_ip += o.source_drops.wrong_ip;
        self.source_drops.wrong_port += o.source_drops.wrong_port;
        self.elapsed_ns = self.elapsed_ns.max(o.elapsed_ns);
        self.peak_bytes_per_s += o.peak_bytes_per_s;
    }
}

impl EndResult {
    /// The results of several QPs run in parallel (`-q`) as one: counts summed, the
    /// longest elapsed time, peaks summed (each QP's best peak window; an upper bound
    /// of the best window of the sum), interval `k` the sum of each QP's `k`-th (they
    /// start within the setup time of each other), the per-EV lines one after another,
    /// the CPU time the largest (each end measures the whole process).
    pub fn sum(all: Vec<EndResult>) -> EndResult {
        let mut out = EndResult::default();
        let mut send: Option<SendResult> = None;
        // An engine several QPs share reports its counters to each: the latest (largest)
        // snapshot counts, once.
        let mut engines: Vec<(SocketAddr, mrc_fabric::engine::EngineStats)> = Vec::new();
        for r in all {
            if let Some(s) = r.send {
                let t = send.get_or_insert_with(SendResult::default);
                t.completions += s.completions;
                t.bytes += s.bytes;
                t.elapsed_s = t.elapsed_s.max(s.elapsed_s);
                t.peak_bps += s.peak_bps;
                t.peak_total_bps += s.peak_total_bps;
                t.lat_ns.extend(s.lat_ns);
                // bucket k of each QP's series, added (each from its own start)
                if t.series.len() < s.series.len() {
                    t.series.resize(s.series.len(), 0);
                }
                for (a, b) in t.series.iter_mut().zip(&s.series) {
                    *a += b;
                }
                t.series_bucket_ms = t.series_bucket_ms.max(s.series_bucket_ms);
                if t.series_start_unix_ns == 0 || s.series_start_unix_ns < t.series_start_unix_ns {
                    t.series_start_unix_ns = s.series_start_unix_ns;
                }
                for (k, iv) in s.intervals.into_iter().enumerate() {
                    match t.intervals.get_mut(k) {
                        None => t.intervals.push(iv),
                        Some(a) => {
                            a.start_s = a.start_s.min(iv.start_s);
                            a.end_s = a.end_s.max(iv.end_s);
                            a.sent_messages += iv.sent_messages;
                            a.sent_bytes += iv.sent_bytes;
                            a.received_bytes += iv.received_bytes;
                            a.bw_gbps += iv.bw_gbps;
                            a.bw_mib_per_s += iv.bw_mib_per_s;
                            a.retransmitted_packets += iv.retransmitted_packets;
                            a.rto_expiries += iv.rto_expiries;
                        }
                    }
                }
            }
            out.recv.add(&r.recv);
            out.peer_recv.add(&r.peer_recv);
            out.evs.extend(r.evs);
            for pl in r.planes {
                match out.planes.iter_mut().find(|o| o.plane == pl.plane) {
                    None => out.planes.push(pl),
                    Some(o) => {
                        if o.state != pl.state {
                            o.state = "MIXED";
                        }
                        o.downs_by_loss += pl.downs_by_loss;
                        o.downs_by_peer += pl.downs_by_peer;
                        o.downs_local += pl.downs_local;
                        o.ups += pl.ups;
                        o.down_ns += pl.down_ns;
                    }
                }
            }
            let (c, o) = (&mut out.conn, &r.conn);
            c.sent += o.sent;
            c.retransmitted += o.retransmitted;
            c.trimmed += o.trimmed;
            c.ecn_marked += o.ecn_marked;
            c.timeouts += o.timeouts;
            c.rto_lost += o.rto_lost;
            c.rack_losses += o.rack_losses;
            c.spurious += o.spurious;
            c.tail_loss_probes += o.tail_loss_probes;
            out.cpu_s = out.cpu_s.max(r.cpu_s);
            if let Some(addr) = r.engine_addr {
                match engines.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, seen))
                        if seen.datapath.tx_datagrams < r.engine.datapath.tx_datagrams =>
                    {
                        *seen = r.engine;
                    }
                    Some(_) => {}
                    None => engines.push((addr, r.engine)),
                }
            } else {
                add_engine_stats(&mut out.engine, &r.engine);
            }
        }
        for (_, e) in &engines {
            add_engine_stats(&mut out.engine, e);
        }
        out.send = send;
        out
    }
}

/// Adds engine `o`'s counters to `e`.
fn add_engine_stats(e: &mut mrc_fabric::engine::EngineStats, o: &mrc_fabric::engine::EngineStats) {
    e.sleeps += o.sleeps;
    e.datapath.tx_datagrams += o.datapath.tx_datagrams;
    e.datapath.tx_calls += o.datapath.tx_calls;
    e.datapath.tx_errors += o.datapath.tx_errors;
    e.datapath.rx_datagrams += o.datapath.rx_datagrams;
    e.datapath.rx_calls += o.datapath.rx_calls;
    e.datapath.rx_errors += o.datapath.rx_errors;
}

/// Runs one end of the test on a connected side. `active`: the client (sender in bw,
/// pinger in lat); in bidirectional bw both send. `show_progress`: print the progress line
/// on stderr, its rate in this unit (the table's).
///
/// # Errors
/// [`RunError`]: its message is an [`EndError`]'s, and it carries what this end measured
/// until then when its counters could still be read.
pub fn run_end(
    side: &Side,
    remote: RemoteMr,
    ctl: CtlStream,
    p: &TestParams,
    active: bool,
    timeout: Duration,
    show_progress: Option<ProgressOpts>,
) -> Result<EndResult, RunError> {
    // The transport names why it gives up (`peer unresponsive for N s`) after
    // `--peer-timeout`; the test's own no-progress checks wait a second longer, so that
    // cause is what a dead or paused peer is reported with.
    let timeout = timeout.max(Duration::from_secs_f64(p.peer_timeout_s + 1.0));
    let CtlStream { w, rx } = ctl;
    let mut w = CtlStream {
        w,
        rx: crossbeam_channel::never(),
    };
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let (result_tx, result_rx) = crossbeam_channel::unbounded();
    let (err_tx, err_rx) = crossbeam_channel::unbounded::<String>();
    let peer_ended = Arc::new(std::sync::OnceLock::<String>::new());
    let ended = Arc::clone(&peer_ended);
    // Demultiplex the peer's control messages.
    std::thread::spawn(move || {
        while let Ok(m) = rx.recv() {
            match m {
                Ok(Ctl::Done { sent }) => {
                    let _ = done_tx.send(sent);
                }
                Ok(Ctl::Result(r)) => {
                    let _ = result_tx.send(r);
                }
                Ok(Ctl::Abort { reason }) => {
                    let _ = ended.set(reason);
                }
                Err(e) => {
                    let _ = err_tx.send(e);
                    return;
                }
            }
        }
    });
    let cpu0 = report::process_cpu_s();
    let sends = active || (p.bidirectional && p.test == TestKind::Bw);
    let receives = !active || (p.bidirectional && p.test == TestKind::Bw);
    let progress = show_progress.unwrap_or_else(ProgressOpts::quiet);
    let received = AtomicU64::new(0);
    // From here a signal ends the test and its report is printed (perf::interrupt).
    interrupt::arm();
    let stop = loops::Stop {
        peer_ended: &peer_ended,
    };
    // Each loop returns what it measured, and why it ended early if it did.
    let ((send, send_err), (recv, recv_err)) = std::thread::scope(|s| {
        let recv_h = (receives && p.test == TestKind::Bw)
            .then(|| s.spawn(|| loops::recv_bw(side, p, &done_rx, timeout, &received, stop)));
        let mut pong_result = None;
        let (send, send_err) = if p.test == TestKind::Lat {
            if active {
                let (r, e) = loops::ping(side, remote, p, timeout, progress, stop);
                (Some(r), e)
            } else {
                let (r, e) = loops::pong(side, remote, p, &done_rx, timeout, stop);
                pong_result = Some(r);
                (None, e)
            }
        } else if sends {
            let (r, e) = loops::send_bw(side, remote, p, timeout, progress, &received, stop);
            (Some(r), e)
        } else {
            (None, None)
        };
        if let (Some(s), None) = (&send, &send_err) {
            let _ = w.send(&Ctl::Done {
                sent: s.completions,
            });
        }
        let recv = match recv_h {
            Some(h) => h.join().unwrap_or_else(|_| {
                (
                    RecvResult::default(),
                    Some(LoopError::Engine("receiver thread panicked".into())),
                )
            }),
            None => (pong_result.unwrap_or_default(), None),
        };
        ((send, send_err), recv)
    });
    // The sender's error first (the receiver's is often its consequence); an interrupt
    // before either.
    let failure = match (send_err, recv_err) {
        (Some(e @ LoopError::Interrupted(_)), _) | (_, Some(e @ LoopError::Interrupted(_))) => {
            Some(e)
        }
        (Some(e), _) | (None, Some(e)) => Some(e),
        (None, None) => None,
    };
    if let Some(e) = failure {
        if matches!(e, LoopError::Interrupted(_)) {
            // the peer ends its side now rather than at its timeout
            let _ = w.send(&Ctl::Abort {
                reason: e.to_string(),
            });
        }
        let partial = local_result(side, send, recv, cpu0).ok();
        return Err(RunError::with_partial(EndError::Loop(e), partial));
    }
    let mut r = local_result(side, send, recv, cpu0).map_err(RunError::from)?;
    w.send(&Ctl::Result(r.recv.clone()))
        .map_err(|e| RunError::from(EndError::Control(e)))?;
    let until = Instant::now() + timeout;
    r.peer_recv = loop {
        let ended = match (interrupt::pending(), peer_ended.get()) {
            (Some(sig), _) => {
                let _ = w.send(&Ctl::Abort {
                    reason: interrupt::INTERRUPTED.into(),
                });
                Some(LoopError::Interrupted(interrupt::Interrupted(sig)))
            }
            (None, Some(why)) => Some(LoopError::PeerEnded {
                reason: why.clone(),
            }),
            (None, None) => None,
        };
        if let Some(e) = ended {
            // the test ran to its end; only the peer's counts are missing
            r.cpu_s = report::process_cpu_s() - cpu0;
            return Err(RunError::with_partial(EndError::Loop(e), Some(r)));
        }
        crossbeam_channel::select! {
            recv(result_rx) -> got => match got {
                Ok(peer) => break peer,
                Err(_) => return Err(EndError::PeerClosed.into()),
            },
            recv(err_rx) -> e => {
                return Err(EndError::Control(e.unwrap_or_else(|_| "control stream closed".into())).into());
            }
            default(Duration::from_millis(50)) => {
                if Instant::now() >= until {
                    return Err(EndError::NoResult { timeout_s: timeout.as_secs_f64() }.into());
                }
            }
        }
    };
    r.cpu_s = report::process_cpu_s() - cpu0;
    Ok(r)
}

/// This end's part of an [`EndResult`]: `send`, `recv` with the QP's verify counters and
/// drops, the per-EV lines, the connection and engine counters, the CPU time since
/// `cpu0`; the peer's receiver left empty.
///
/// # Errors
/// [`EndError::Engine`]: the engine is gone (its stats cannot be read).
fn local_result(
    side: &Side,
    send: Option<SendResult>,
    mut recv: RecvResult,
    cpu0: f64,
) -> Result<EndResult, EndError> {
    let (qs, engine) = side.stats()?;
    let v = *side.verified.lock().unwrap_or_else(|e| e.into_inner());
    recv.verified_messages = v.checked_messages;
    recv.verified_bytes = v.checked_bytes;
    recv.bad_bytes = v.bad_bytes;
    recv.drops = DROP_REASONS
        .iter()
        .filter(|r| qs.conn.drops.get(**r) > 0)
        .map(|r| (format!("{r:?}"), qs.conn.drops.get(*r)))
        .collect();
    recv.unknown_qpn = engine.rx_unknown_qpn;
    recv.source_drops = qs.source_drops.into();
    let cpu_s = report::process_cpu_s() - cpu0;
    let evs = qs
        .evs
        .iter()
        .zip(
            qs.ev_states
                .iter()
                .map(|s| super::srv6::state_name(*s))
                .chain(std::iter::repeat("")),
        )
        .zip(qs.ev_planes.iter().copied().chain(std::iter::repeat(0)))
        .map(|(((ev, port, s), state), plane)| EvLine {
            plane,
            ev: *ev,
            port: *port,
            packets: s.sent,
            retransmits: s.retransmitted,
            trims: s.trimmed,
            ecn_marks: s.ecn_marked,
            timeouts: s.timeouts,
            probes: s.probes_sent,
            state,
        })
        .collect();
    let planes = qs
        .planes
        .iter()
        .enumerate()
        .map(|(i, (st, ps))| PlaneLine {
            plane: i as u8,
            state: report::plane_state_name(*st),
            downs_by_loss: ps.downs_by_loss,
            downs_by_peer: ps.downs_by_peer,
            downs_local: ps.downs_local,
            ups: ps.ups,
            down_ns: ps.down_ns,
        })
        .collect();
    Ok(EndResult {
        send,
        recv,
        peer_recv: RecvResult::default(),
        evs,
        planes,
        conn: qs.conn,
        cpu_s,
        engine,
        engine_addr: side.engine_addr(),
        failure: None,
    })
}

#[cfg(test)]
mod sum_tests {
    use super::super::report::Interval;
    use super::*;

    /// `-q`: counts add up, the elapsed time is the longest, interval k sums each QP's
    /// k-th, drops by reason merge, the CPU time is the largest (not the sum: each end
    /// measures the whole process).
    #[test]
    fn sum_of_qps_exact() {
        let iv = |s: f64, e: f64, m: u64| Interval {
            start_s: s,
            end_s: e,
            sent_messages: m,
            sent_bytes: m * 10,
            bw_gbps: 1.0,
            retransmitted_packets: 1,
            ..Interval::default()
        };
        let one = |n: u64, el: f64, ivs: Vec<Interval>, dup: u64, cpu: f64| {
            let mut r = EndResult {
                send: Some(SendResult {
                    completions: n,
                    bytes: n * 10,
                    elapsed_s: el,
                    peak_bps: 100.0,
                    intervals: ivs,
                    ..SendResult::default()
                }),
                cpu_s: cpu,
                evs: vec![EvLine::default()],
                ..EndResult::default()
            };
            r.conn.sent = n;
            r.conn.rto_lost = 1;
            r.peer_recv.completions = n;
            r.peer_recv.drops.insert("Duplicate".into(), dup);
            r.engine.datapath.tx_datagrams = n;
            r
        };
        let s = EndResult::sum(vec![
            one(5, 2.0, vec![iv(0.0, 1.0, 3), iv(1.0, 2.0, 2)], 1, 0.5),
            one(
                7,
                2.5,
                vec![iv(0.1, 1.1, 4), iv(1.1, 2.1, 2), iv(2.1, 2.5, 1)],
                2,
                0.7,
            ),
        ]);
        let t = s.send.unwrap();
        assert_eq!((t.completions, t.bytes, t.elapsed_s), (12, 120, 2.5));
        assert_eq!(t.peak_bps, 200.0);
        let got: Vec<(f64, f64, u64, u64, u64)> = t
            .intervals
            .iter()
            .map(|i| {
                (
                    i.start_s,
                    i.end_s,
                    i.sent_messages,
                    i.sent_bytes,
                    i.retransmitted_packets,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0.0, 1.1, 7, 70, 2),
                (1.0, 2.1, 4, 40, 2),
                (2.1, 2.5, 1, 10, 1)
            ]
        );
        assert_eq!(t.intervals[0].bw_gbps, 2.0);
        assert_eq!((s.conn.sent, s.conn.rto_lost), (12, 2));
        assert_eq!(s.peer_recv.completions, 12);
        assert_eq!(s.peer_recv.drops["Duplicate"], 3);
        assert_eq!(s.evs.len(), 2);
        assert_eq!(s.cpu_s, 0.7);
        assert_eq!(s.engine.datapath.tx_datagrams, 12);
    }
}
