//! The test loops of one end: the bw sender and receiver, ping and pong (lat), and the
//! posting they share. Each loop returns what it measured also when it fails or a signal
//! ends it ([`super::interrupt`]), with the reason as a [`LoopError`].

use super::interrupt::{self, Interrupted};
use super::notices;
use super::opts::{TestKind, TestParams};
use super::peak::PeakWindow;
use super::report::{Interval, Meter, ProgressOpts};
use super::run::{RecvResult, Side};
use mrc_fabric::engine::bootstrap::RemoteMr;
use mrc_fabric::engine::pattern;
use mrc_transport::completion::{Completion, WcOpcode, WcStatus};
use mrc_transport::{PostError, Sge};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest a loop waits for a completion before it looks at the signal flag again.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

/// Why a test loop ended before its end.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// SIGINT or SIGTERM ended the test (`interrupted`).
    #[error(transparent)]
    Interrupted(#[from] Interrupted),
    /// A work request completed with an error; `cause` is why the transport gave up
    /// (` (peer unresponsive for 5.0 s)`) or empty.
    #[error("work request {wr_id} ({opcode:?}) failed: {status:?}{cause}")]
    Completion {
        /// The work request.
        wr_id: u64,
        /// What it was.
        opcode: WcOpcode,
        /// How it ended.
        status: WcStatus,
        /// ` (CAUSE)` or empty.
        cause: String,
    },
    /// Posting a work request failed.
    #[error("{what}: {source}")]
    Post {
        /// `post` or `post_recv`.
        what: &'static str,
        /// The QP's refusal.
        #[source]
        source: PostError,
    },
    /// The sender saw no completion for `timeout_s` seconds.
    #[error(
        "no completion for {timeout_s:.1} s ({done} of {posted} messages done): peer unreachable?"
    )]
    SendStalled {
        /// The no-progress timeout, seconds.
        timeout_s: f64,
        /// Messages completed.
        done: u64,
        /// Messages posted.
        posted: u64,
    },
    /// The peer's control stream closed before it sent its message count.
    #[error(
        "receiver: the peer's control stream closed after {completions} messages, before it \
         reported its message count (peer gone?)"
    )]
    PeerGone {
        /// Messages received until then.
        completions: u64,
    },
    /// The bw receiver saw no message for `timeout_s` seconds.
    #[error("receiver: no message for {timeout_s:.1} s after {completions} messages")]
    RecvStalled {
        /// The no-progress timeout, seconds.
        timeout_s: f64,
        /// Messages received until then.
        completions: u64,
    },
    /// A receive completion other than the next message's.
    #[error("receiver: expected message {expected} got {opcode:?} imm {imm:?}")]
    OutOfOrder {
        /// The message expected (its immediate).
        expected: u64,
        /// What completed.
        opcode: WcOpcode,
        /// Its immediate.
        imm: Option<u32>,
    },
    /// The pinger's message was not echoed within `timeout_s` seconds.
    #[error("no echo of message {sent} within {timeout_s:.1} s: peer unreachable?")]
    NoEcho {
        /// The message.
        sent: u64,
        /// The timeout, seconds.
        timeout_s: f64,
    },
    /// The echo of a ping carried another immediate.
    #[error("echo of message {sent} carried imm {imm:?}")]
    BadEcho {
        /// The message.
        sent: u64,
        /// The echo's immediate.
        imm: Option<u32>,
    },
    /// The ponger saw no ping for `timeout_s` seconds.
    #[error("no ping for {timeout_s:.1} s after {completions}")]
    NoPing {
        /// The timeout, seconds.
        timeout_s: f64,
        /// Pings echoed until then.
        completions: u64,
    },
    /// A ping out of order.
    #[error("expected ping {expected}, got imm {imm:?}")]
    BadPing {
        /// The ping expected (its immediate).
        expected: u64,
        /// The immediate that came.
        imm: Option<u32>,
    },
    /// The peer ended the test early and said why ([`super::run::Ctl::Abort`]).
    #[error("the peer ended the test early: {reason}")]
    PeerEnded {
        /// The peer's reason (`interrupted`).
        reason: String,
    },
    /// This side's engine or memory failed (the engine's message).
    #[error("{0}")]
    Engine(String),
}

/// What the local sender did.
#[derive(Clone, Debug, Default)]
pub struct SendResult {
    /// Messages completed.
    pub completions: u64,
    /// Bytes in them.
    pub bytes: u64,
    /// Seconds from the first post to the last completion.
    pub elapsed_s: f64,
    /// Highest rate over a [`PeakWindow`] (at least 100 ms and 8 completions), bytes/s.
    pub peak_bps: f64,
    /// Highest rate of sends and receives together (`--bidirectional`) over such a
    /// window, bytes/s.
    pub peak_total_bps: f64,
    /// Latency samples (lat test), ns, one way (half the round trip).
    pub lat_ns: Vec<u64>,
    /// The `-i` intervals.
    pub intervals: Vec<Interval>,
    /// `--series-ms`: bytes completed per bucket of `series_bucket_ms` from the start
    /// ([`super::report::Metered::series`]); empty without it.
    pub series: Vec<u64>,
    /// The series' bucket length, ms (0 without a series).
    pub series_bucket_ms: f64,
    /// When the series' bucket 0 began, ns since the Unix epoch.
    pub series_start_unix_ns: u64,
}

/// A failed completion as an error naming its cause: for `RetryExceeded` after RTO
/// expiries, why the transport gave up (`peer unresponsive for 5.0 s`).
fn check(side: &Side, c: &Completion) -> Result<(), LoopError> {
    if c.status != WcStatus::Success {
        let cause = match side.stats() {
            Ok((qs, _)) => qs.give_up.map(|g| format!(" ({g})")).unwrap_or_default(),
            Err(_) => String::new(),
        };
        return Err(LoopError::Completion {
            wr_id: c.wr_id,
            opcode: c.opcode,
            status: c.status,
            cause,
        });
    }
    Ok(())
}

/// What ends a loop from outside: a signal ([`interrupt`]) or the peer's word that it
/// ended the test.
#[derive(Clone, Copy, Debug)]
pub struct Stop<'a> {
    /// Set by the control stream's reader when the peer sends
    /// [`super::run::Ctl::Abort`].
    pub peer_ended: &'a std::sync::OnceLock<String>,
}

impl Stop<'_> {
    /// `Err` once a signal came or the peer ended the test.
    ///
    /// # Errors
    /// [`LoopError::Interrupted`] or [`LoopError::PeerEnded`].
    pub fn check(&self) -> Result<(), LoopError> {
        interrupt::check()?;
        match self.peer_ended.get() {
            Some(reason) => Err(LoopError::PeerEnded {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// [`Side::wait_cq`] for up to `timeout`, in slices of [`INTERRUPT_POLL`] with the
/// signal flag checked between them.
fn wait_cq_interruptible(
    side: &Side,
    recv_side: bool,
    timeout: Duration,
    stop: Stop<'_>,
) -> Result<Option<Completion>, LoopError> {
    let until = Instant::now() + timeout;
    loop {
        stop.check()?;
        let left = until.saturating_duration_since(Instant::now());
        let c = side
            .wait_cq(recv_side, left.min(INTERRUPT_POLL))
            .map_err(LoopError::Engine)?;
        if c.is_some() || left <= INTERRUPT_POLL {
            return Ok(c);
        }
    }
}

/// Sender of the bw test: WRITE_WITH_IMM of message `i` (immediate `i mod 2^32`) into
/// slot `i mod slots` of the peer's region, `tx_depth` in flight, until `iters` messages or
/// `duration_s` passed, or a signal ([`interrupt`]).
///
/// Returns what completed, and the error that ended it early: a failed completion, no
/// progress for `timeout`, or [`LoopError::Interrupted`].
pub fn send_bw(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    timeout: Duration,
    progress: ProgressOpts,
    received: &AtomicU64,
    stop: Stop<'_>,
) -> (SendResult, Option<LoopError>) {
    let slots = p.region_size / p.size;
    let (window, _) = windows(p);
    let start = Instant::now();
    let mut meter = Meter::new(progress, p.duration_s, start);
    let end = p.duration_s.map(|d| start + Duration::from_secs_f64(d));
    let (mut posted, mut done) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    let mut got = Vec::with_capacity(256);
    let mut finished_posting = false;
    // a long run says so after its first second (perf::notices), on the progress line's
    // end only
    let mut long_run_checked = !progress.print || p.iters.is_none();
    // the first completion: the rate of a long run is measured from it (before it, the
    // first message also waited for the regions' first touch and the paths' start)
    let mut first_done: Option<(Instant, u64)> = None;
    // The loop as a closure so that an error still leaves the counts of what completed.
    let mut run = || -> Result<(), LoopError> {
        loop {
            stop.check()?;
            let now = Instant::now();
            if !finished_posting {
                finished_posting = match (p.iters, end) {
                    (Some(n), _) => posted >= n,
                    (None, Some(e)) => now >= e,
                    (None, None) => true,
                };
            }
            while !finished_posting && posted - done < window && p.iters.is_none_or(|n| posted < n)
            {
                if let Some(r) = p.rate_limit_gbps {
                    let due = start
                        + Duration::from_secs_f64(posted as f64 * p.size as f64 * 8.0 / (r * 1e9));
                    if Instant::now() < due {
                        break;
                    }
                }
                let off = (posted % slots) * p.size;
                fill_message(side, p, posted, off)?;
                post_message(side, remote, p, posted, off)?;
                if posted == done {
                    // Nothing was outstanding (a rate limit spaced the posts): the no-progress
                    // clock starts now, not at the last completion.
                    last_progress = Instant::now();
                }
                posted += 1;
            }
            if finished_posting && done == posted {
                break;
            }
            let wait = if p.rate_limit_gbps.is_some() {
                Duration::from_micros(200)
            } else {
                Duration::from_millis(20)
            };
            got.clear();
            if let Some(c) = side.wait_cq(false, wait).map_err(LoopError::Engine)? {
                got.push(c);
                side.poll_cq(false, &mut got, 4096);
            }
            let now = Instant::now();
            if got.is_empty() {
                if done < posted && now.duration_since(last_progress) > timeout {
                    return Err(LoopError::SendStalled {
                        timeout_s: timeout.as_secs_f64(),
                        done,
                        posted,
                    });
                }
                continue;
            }
            last_progress = now;
            for c in &got {
                check(side, c)?;
                done += 1;
            }
            meter.tick(
                now,
                done,
                done * p.size,
                received.load(Ordering::Relaxed),
                || retransmit_counters(side),
            );
            let ran = now.duration_since(start);
            match first_done {
                None => first_done = Some((now, done)),
                Some((t1, d1))
                    if !long_run_checked && ran >= notices::LONG_RUN_AFTER && done > d1 =>
                {
                    long_run_checked = true;
                    let rate = (done - d1) as f64 * p.size as f64
                        / now.duration_since(t1).as_secs_f64().max(1e-9);
                    let iters = p.iters.unwrap_or(0);
                    if let Some(line) = notices::long_run(iters, p.size, done, ran, rate) {
                        eprintln!("{line}");
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    };
    let failure = run().err();
    let now = Instant::now();
    let elapsed_s = now.duration_since(start).as_secs_f64();
    let bytes = done * p.size;
    let m = meter.finish(now, done, bytes, received.load(Ordering::Relaxed), || {
        retransmit_counters(side)
    });
    let avg = bytes as f64 / elapsed_s.max(1e-9);
    let r = SendResult {
        completions: done,
        bytes,
        elapsed_s,
        peak_bps: m.peak_sent_bps.max(avg),
        peak_total_bps: m.peak_total_bps,
        lat_ns: Vec::new(),
        intervals: m.intervals,
        series_start_unix_ns: m.start_unix_ns,
        series: m.series,
        series_bucket_ms: progress.series.map_or(0.0, |d| d.as_secs_f64() * 1e3),
    };
    (r, failure)
}

/// This side's retransmitted packets and RTO expiries so far (0, 0 if the engine is gone).
fn retransmit_counters(side: &Side) -> (u64, u64) {
    side.stats()
        .map_or((0, 0), |(q, _)| (q.conn.retransmitted, q.conn.timeouts))
}

/// Under `--verify`, fills `p.size` bytes at offset `off` of this side's source region
/// (application memory, here on the test's thread) with the pattern of message `i mod 2^32`.
fn fill_message(side: &Side, p: &TestParams, i: u64, off: u64) -> Result<(), LoopError> {
    if p.verify {
        let off = usize::try_from(off).map_err(|e| LoopError::Engine(e.to_string()))?;
        side.src_mem
            .with_range_mut(off, p.size as usize, |b| {
                pattern::fill(b, p.seed, u64::from(i as u32));
            })
            .map_err(|e| LoopError::Engine(e.to_string()))?;
    }
    Ok(())
}

/// Posts message `i`: WRITE_WITH_IMM (wr_id `i`, immediate `i mod 2^32`) of `p.size` bytes
/// from offset `off` of this side's source region to offset `off` of the peer's region.
fn post_message(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    i: u64,
    off: u64,
) -> Result<(), LoopError> {
    let sge = Sge {
        lkey: side.src.lkey,
        addr: side.src.addr + off,
        len: p.size as u32,
    };
    side.post_write_with_imm(i, sge, remote, off, i as u32)
        .map_err(|source| LoopError::Post {
            what: "post",
            source,
        })
}

/// Takes up to 64 send completions into `scratch` and fails on the first unsuccessful one.
fn reap_sends(side: &Side, scratch: &mut Vec<Completion>) -> Result<(), LoopError> {
    scratch.clear();
    side.poll_cq(false, scratch, 64);
    scratch.iter().try_for_each(|c| check(side, c))
}

/// Receives a side posts before it connects (wr_ids `0..n`): for a bw receiver its peer's
/// TX depth plus slack for completions its thread has not reaped and reposted yet
/// (`4 x tx-depth + 64`), 64 for either end of the lat test, none for a bw sender. A
/// receiver without a free receive answers the last packet of a message with
/// NACK(RECEIVER_NOT_READY) (resent after 640 us), so a thread that falls behind slows
/// the sender instead of letting it overwrite slots whose completions are still to come;
/// posting them before the connection is up keeps the first messages from that wait.
///
/// Under `--verify` the receiver checks a slot on its own thread before it reposts the
/// receive the message took, so the receives posted ahead (`r`) and the sender's messages
/// in flight (`w`) must fit the region's slots (`r + w <= slots`): then message `i + slots`,
/// which reuses message `i`'s slot, cannot be posted before message `i` was checked.
pub fn initial_recvs(p: &TestParams, active: bool) -> u64 {
    match p.test {
        TestKind::Bw if !active || p.bidirectional => windows(p).1,
        TestKind::Bw => 0,
        TestKind::Lat => 64,
    }
}

/// A bw sender's messages in flight and a bw receiver's receives posted ahead: `tx-depth`
/// and `4 x tx-depth + 64`; under `--verify` as many receives as the slots left beyond
/// the depth (at least one, the depth shrinking to make room), so the two fit the region
/// ([`initial_recvs`]).
pub fn windows(p: &TestParams) -> (u64, u64) {
    let d = p.tx_depth.max(1);
    let ahead = 4 * d + 64;
    if !p.verify {
        return (d, ahead);
    }
    let slots = (p.region_size / p.size.max(1)).max(2);
    let w = d.min(slots - 1);
    (w, (slots - w).min(ahead))
}

/// Posts `n` zero-length receives into the destination region, wr_ids `base..base + n`.
///
/// # Errors
/// [`LoopError::Post`] with the QP's refusal.
pub fn post_recvs(side: &Side, n: u64, base: u64) -> Result<(), LoopError> {
    for i in 0..n {
        side.post_recv(
            base + i,
            Sge {
                lkey: side.dst.lkey,
                addr: side.dst.addr,
                len: 0,
            },
        )
        .map_err(|source| LoopError::Post {
            what: "post_recv",
            source,
        })?;
    }
    Ok(())
}

/// Receiver of the bw test: counts `RecvRdmaWithImm` completions (immediates in order)
/// until the peer's `Done` count is reached, or a signal ([`interrupt`]).
///
/// Returns what it received, and the error that ended it early: a failed or out-of-order
/// completion, no progress for `timeout`, a broken stream, or
/// [`LoopError::Interrupted`].
pub fn recv_bw(
    side: &Side,
    p: &TestParams,
    peer_done: &crossbeam_channel::Receiver<u64>,
    timeout: Duration,
    received: &AtomicU64,
    stop: Stop<'_>,
) -> (RecvResult, Option<LoopError>) {
    let depth = initial_recvs(p, false);
    let mut r = RecvResult::default();
    let mut target: Option<u64> = None;
    let mut last = Instant::now();
    let started = Instant::now();
    // In duration mode the sender's count arrives only at the end; past duration + timeout
    // the no-progress timeout applies as it does in iteration mode.
    let run_for = p.duration_s.map(Duration::from_secs_f64);
    let mut got = Vec::with_capacity(256);
    let mut peak = PeakWindow::new(started);
    let mut run = || -> Result<(), LoopError> {
        loop {
            stop.check()?;
            match peer_done.try_recv() {
                Ok(n) => target = Some(n),
                Err(crossbeam_channel::TryRecvError::Disconnected) if target.is_none() => {
                    return Err(LoopError::PeerGone {
                        completions: r.completions,
                    });
                }
                Err(_) => {}
            }
            if target == Some(r.completions) {
                return Ok(());
            }
            got.clear();
            if let Some(c) = side
                .wait_cq(true, Duration::from_millis(20))
                .map_err(LoopError::Engine)?
            {
                got.push(c);
                side.poll_cq(true, &mut got, 4096);
            }
            if got.is_empty() {
                let past_run = run_for.is_none_or(|d| started.elapsed() > d + timeout);
                if last.elapsed() > timeout && (target.is_some() || past_run) {
                    return Err(LoopError::RecvStalled {
                        timeout_s: timeout.as_secs_f64(),
                        completions: r.completions,
                    });
                }
                continue;
            }
            last = Instant::now();
            for c in &got {
                check(side, c)?;
                if c.opcode != WcOpcode::RecvRdmaWithImm || c.imm != Some(r.completions as u32) {
                    return Err(LoopError::OutOfOrder {
                        expected: r.completions,
                        opcode: c.opcode,
                        imm: c.imm,
                    });
                }
                side.verify(p, c);
                r.completions += 1;
                r.bytes += u64::from(c.byte_len);
            }
            received.store(r.bytes, Ordering::Relaxed);
            r.elapsed_ns = last.duration_since(started).as_nanos() as u64;
            peak.tick(last, r.completions, r.bytes);
            r.peak_bytes_per_s = peak.peak_bps() as u64;
            post_recvs(side, got.len() as u64, depth + r.completions)?;
        }
    };
    let failure = run().err();
    (r, failure)
}

/// Ping side of the lat test: WRITE_WITH_IMM of `size` bytes, wait for the peer's echo,
/// one sample per round trip (half of it, as perftest reports), until `iters` or
/// `duration_s`, or a signal ([`interrupt`]).
///
/// Returns the samples so far, and the error that ended it early: a failed completion,
/// no echo within `timeout`, or [`LoopError::Interrupted`].
pub fn ping(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    timeout: Duration,
    progress: ProgressOpts,
    stop: Stop<'_>,
) -> (SendResult, Option<LoopError>) {
    let start = Instant::now();
    let mut meter = Meter::new(progress, p.duration_s, start);
    let end = p.duration_s.map(|d| start + Duration::from_secs_f64(d));
    let mut lat = Vec::with_capacity(p.iters.unwrap_or(100_000).min(10_000_000) as usize);
    let mut sent = 0u64;
    let mut scratch = Vec::new();
    let mut run = || -> Result<(), LoopError> {
        loop {
            stop.check()?;
            match (p.iters, end) {
                (Some(n), _) if sent >= n => return Ok(()),
                (None, Some(e)) if Instant::now() >= e => return Ok(()),
                _ => {}
            }
            fill_message(side, p, sent, 0)?;
            let t0 = Instant::now();
            post_message(side, remote, p, sent, 0)?;
            let c = wait_cq_interruptible(side, true, timeout, stop)?.ok_or(LoopError::NoEcho {
                sent,
                timeout_s: timeout.as_secs_f64(),
            })?;
            let rtt = t0.elapsed().as_nanos() as u64;
            check(side, &c)?;
            if c.imm != Some(sent as u32) {
                return Err(LoopError::BadEcho { sent, imm: c.imm });
            }
            side.verify(p, &c);
            lat.push(rtt / 2);
            sent += 1;
            post_recvs(side, 1, 64 + sent)?;
            reap_sends(side, &mut scratch)?;
            meter.tick(Instant::now(), sent, sent * p.size, 0, || {
                retransmit_counters(side)
            });
        }
    };
    let failure = run().err();
    let now = Instant::now();
    let m = meter.finish(now, sent, sent * p.size, 0, || retransmit_counters(side));
    let r = SendResult {
        completions: sent,
        bytes: sent * p.size,
        elapsed_s: now.duration_since(start).as_secs_f64(),
        peak_bps: 0.0,
        peak_total_bps: 0.0,
        lat_ns: lat,
        intervals: m.intervals,
        series_start_unix_ns: m.start_unix_ns,
        series: m.series,
        series_bucket_ms: progress.series.map_or(0.0, |d| d.as_secs_f64() * 1e3),
    };
    (r, failure)
}

/// Pong side of the lat test: echoes every message until the peer's `Done` count, or a
/// signal ([`interrupt`]).
///
/// Returns what it echoed, and the error that ended it early (as [`recv_bw`]).
pub fn pong(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    peer_done: &crossbeam_channel::Receiver<u64>,
    timeout: Duration,
    stop: Stop<'_>,
) -> (RecvResult, Option<LoopError>) {
    let mut r = RecvResult::default();
    let mut target = None;
    let mut last = Instant::now();
    let mut scratch = Vec::new();
    let mut run = || -> Result<(), LoopError> {
        loop {
            stop.check()?;
            if let Ok(n) = peer_done.try_recv() {
                target = Some(n);
            }
            if target == Some(r.completions) {
                return Ok(());
            }
            let Some(c) = side
                .wait_cq(true, Duration::from_millis(20))
                .map_err(LoopError::Engine)?
            else {
                if last.elapsed() > timeout {
                    return Err(LoopError::NoPing {
                        timeout_s: timeout.as_secs_f64(),
                        completions: r.completions,
                    });
                }
                continue;
            };
            last = Instant::now();
            check(side, &c)?;
            let i = r.completions;
            if c.imm != Some(i as u32) {
                return Err(LoopError::BadPing {
                    expected: i,
                    imm: c.imm,
                });
            }
            side.verify(p, &c);
            fill_message(side, p, i, 0)?;
            post_message(side, remote, p, i, 0)?;
            r.completions += 1;
            r.bytes += u64::from(c.byte_len);
            post_recvs(side, 1, 64 + r.completions)?;
            reap_sends(side, &mut scratch)?;
        }
    };
    let failure = run().err();
    (r, failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Under --verify a bw receiver's receives ahead and the sender's depth fit the slots
    /// (so a slot is checked before the sender can reuse it); without it, as before.
    #[test]
    fn receives_ahead_and_depth_fit_the_slots_under_verify() {
        let p = |args: &[&str]| {
            let mut v = vec!["mrc-perf", "loopback"];
            v.extend_from_slice(args);
            super::super::opts::Cli::parse_from(v)
                .test
                .params()
                .unwrap()
        };
        assert_eq!(windows(&p(&["-s", "65536", "-t", "16"])), (16, 4 * 16 + 64));
        // Default region under --verify: 32 slots for depth 16.
        assert_eq!(
            windows(&p(&["-s", "65536", "-t", "16", "--verify"])),
            (16, 16)
        );
        // A region of exactly depth slots: one receive ahead, one message less in flight.
        let tight = p(&[
            "-s",
            "65536",
            "-t",
            "16",
            "--region-size",
            "1048576",
            "--verify",
        ]);
        assert_eq!(windows(&tight), (15, 1));
        // Many slots: the receives ahead stop at 4 x depth + 64.
        let roomy = p(&[
            "-s",
            "4096",
            "-t",
            "4",
            "--region-size",
            "4194304",
            "--verify",
        ]);
        assert_eq!(windows(&roomy), (4, 4 * 4 + 64));
        for q in [tight, roomy] {
            let (w, r) = windows(&q);
            assert!(w + r <= q.region_size / q.size);
        }
        assert_eq!(initial_recvs(&p(&["--test", "lat"]), true), 64);
        assert_eq!(initial_recvs(&p(&["-t", "16"]), true), 0);
        assert_eq!(initial_recvs(&p(&["-t", "16"]), false), 4 * 16 + 64);
    }

    #[test]
    fn loop_errors_read_as_before() {
        assert_eq!(
            LoopError::SendStalled {
                timeout_s: 6.0,
                done: 3,
                posted: 5
            }
            .to_string(),
            "no completion for 6.0 s (3 of 5 messages done): peer unreachable?"
        );
        assert_eq!(
            LoopError::PeerGone { completions: 7 }.to_string(),
            "receiver: the peer's control stream closed after 7 messages, before it \
             reported its message count (peer gone?)"
        );
        assert_eq!(
            LoopError::Interrupted(Interrupted(interrupt::Signal::Int)).to_string(),
            "interrupted"
        );
    }
}
