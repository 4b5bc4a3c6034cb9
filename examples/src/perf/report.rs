//! Output of `mrc-perf`: perftest's columns, the per-EV summary, JSON, the progress line.

use super::opts::{Fabric, TestKind, TestParams};
use super::peak::PeakWindow;
use super::run::EndResult;
use serde::Serialize;
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

/// perftest's separator line.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Process CPU time (user + system), seconds (`getrusage(RUSAGE_SELF)`).
pub fn process_cpu_s() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid `who` and out pointer.
    unsafe {
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One line of the per-EV summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvLine {
    /// The EV.
    pub ev: u32,
    /// Its UDP source port.
    pub port: u16,
    /// Data packets sent on it.
    pub packets: u64,
    /// Retransmissions sent on it.
    pub retransmits: u64,
    /// Trims (NACK TRIMMED) of its packets.
    pub trims: u64,
    /// ECN CE marks on its packets.
    pub ecn_marks: u64,
    /// Its packets declared lost by RTO expiries (`rto_lost_packets`; one expiry can
    /// declare a whole window on every EV; the connection's count of expiries is
    /// `rto_expiries`).
    pub timeouts: u64,
    /// EV probes sent on it (control datagrams: an EV out of rotation asks whether its
    /// path works again).
    pub probes: u64,
    /// Its path state at the end of the run: `GOOD`, `SKIP`, `ASSUMED_BAD` or `DENIED`
    /// (empty when unknown).
    pub state: &'static str,
    /// Its plane (0 on one plane; `--bind A,B`, loopback `--planes`).
    pub plane: u8,
}

/// One plane of this side's connection at the end of the run (docs/PLANES.md): its state
/// and plane counters; the sums of its EVs' counters come from the [`EvLine`]s of the
/// plane ([`plane_sums`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlaneLine {
    /// The plane.
    pub plane: u8,
    /// `UP`, `DOWN_LOSS` (its EVs lost with no delivery between), `DOWN_PEER` (the
    /// peer's Port Status Update), `DOWN_LOCAL` (this side's port), or `MIXED` (several
    /// QPs, `-q`, in different states).
    pub state: &'static str,
    /// Times it went down because of losses.
    pub downs_by_loss: u64,
    /// Times it went down because the peer reported its port down.
    pub downs_by_peer: u64,
    /// Times it went down because this side's port was down.
    pub downs_local: u64,
    /// Times it came back up.
    pub ups: u64,
    /// Time it spent down, ns, over the episodes that ended.
    pub down_ns: u64,
}

/// One row of the per-plane summary: the plane's line, its share of the packets sent
/// (%), its `sent_gbps`, and its EV count and EV counter sums ([`plane_sums`]).
type PlaneRow = (PlaneLine, f64, f64, (usize, [u64; 6]));

/// The name of a plane state in the report ([`PlaneLine::state`]).
pub fn plane_state_name(s: mrc_transport::path::PlaneState) -> &'static str {
    use mrc_transport::path::{PlaneDownCause, PlaneState};
    match s {
        PlaneState::Up => "UP",
        PlaneState::Down(PlaneDownCause::Loss) => "DOWN_LOSS",
        PlaneState::Down(PlaneDownCause::PeerReport) => "DOWN_PEER",
        PlaneState::Down(PlaneDownCause::Local) => "DOWN_LOCAL",
    }
}

/// Per plane `q` of `planes` (in order): the EVs on it and the sums of their
/// [`EV_COUNTERS`] over `evs`.
pub fn plane_sums(evs: &[EvLine], planes: &[PlaneLine]) -> Vec<(usize, [u64; 6])> {
    planes
        .iter()
        .map(|pl| {
            let mut sum = [0u64; 6];
            let mut n = 0;
            for e in evs.iter().filter(|e| e.plane == pl.plane) {
                n += 1;
                for (s, v) in sum.iter_mut().zip(ev_values(e)) {
                    *s += v;
                }
            }
            (n, sum)
        })
        .collect()
}

/// One counter of the report: its name, the same as JSON key and as table label (one
/// vocabulary: the README's table lists them all), and what it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The JSON key, also the table's label.
    pub key: &'static str,
    /// What it counts.
    pub meaning: &'static str,
}

const fn counter(key: &'static str, meaning: &'static str) -> Counter {
    Counter { key, meaning }
}

/// The per-EV counters, in the order of the per-EV table's columns and of [`ev_values`]
/// (each EV's JSON object has them besides `ev`, `src_port` and `state`).
pub const EV_COUNTERS: [Counter; 6] = [
    counter(
        "sent_packets",
        "data packets this side sent on the EV, first transmissions and retransmissions",
    ),
    counter(
        "retransmitted_packets",
        "retransmissions this side sent on the EV",
    ),
    counter(
        "trimmed_packets",
        "packets sent on the EV that a switch trimmed (NACK TRIMMED received)",
    ),
    counter(
        "ecn_marked_packets",
        "packets sent on the EV that arrived with ECN CE (as the peer's SACKs report)",
    ),
    counter(
        "rto_lost_packets",
        "packets sent on the EV that an RTO expiry declared lost",
    ),
    counter(
        "probes_sent",
        "EV probes this side sent on the EV (control datagrams, not counted in sent_packets: \
         the EV was out of rotation and asked whether its path works again)",
    ),
];

/// The counters of this side's connection, in the order of the table's totals line and
/// of [`conn_values`] (top-level keys of the JSON).
pub const CONN_COUNTERS: [Counter; 9] = [
    counter(
        "sent_packets",
        "data packets this side sent, first transmissions and retransmissions",
    ),
    counter("retransmitted_packets", "retransmissions this side sent"),
    counter(
        "trimmed_packets",
        "this side's packets a switch trimmed (NACK TRIMMED received)",
    ),
    counter(
        "ecn_marked_packets",
        "this side's packets that arrived with ECN CE (as the peer's SACKs report)",
    ),
    counter(
        "rto_expiries",
        "RTO expiries of the connection (one expiry can declare many packets lost)",
    ),
    counter(
        "rto_lost_packets",
        "packets an RTO expiry declared lost: sent at least an RTO ago",
    ),
    counter(
        "rack_lost_packets",
        "packets declared lost by RACK's deadline (a later packet was acknowledged first, \
         or an RTO expiry found them overdue)",
    ),
    counter(
        "spurious_losses",
        "declared losses (rto_lost_packets + rack_lost_packets) whose packet was \
         acknowledged after all: the copy was late, not lost",
    ),
    counter(
        "tail_loss_probes",
        "tail loss probes sent (a copy of the last packet in flight after a quiet PTO)",
    ),
];

/// The counters of a receiving end's drops (`dropped_datagrams` and `duplicate_datagrams`
/// of this side at the top level of the JSON and under `receiver` for the peer).
pub const DROP_COUNTERS: [Counter; 2] = [
    counter(
        "dropped_datagrams",
        "datagrams the end received and dropped, by reason in `drops` (JSON), for no QP \
         (`unknown_qpn`) or a foreign source (`source_drops`)",
    ),
    counter(
        "duplicate_datagrams",
        "of dropped_datagrams, copies of packets already received (reasons Duplicate and \
         StaleProbeReply): normal after a retransmission or a tail loss probe of the \
         sending end, whose original arrived after all",
    ),
];

/// The values of [`CONN_COUNTERS`] for `c`, in that order.
pub fn conn_values(c: &mrc_transport::stats::ConnStats) -> [u64; 9] {
    [
        c.sent,
        c.retransmitted,
        c.trimmed,
        c.ecn_marked,
        c.timeouts,
        c.rto_lost,
        c.rack_losses,
        c.spurious,
        c.tail_loss_probes,
    ]
}

/// The values of [`EV_COUNTERS`] for `e`, in that order.
pub fn ev_values(e: &EvLine) -> [u64; 6] {
    [
        e.packets,
        e.retransmits,
        e.trims,
        e.ecn_marks,
        e.timeouts,
        e.probes,
    ]
}

/// The unit of the bandwidth figures, in the table and on the progress line alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwUnit {
    /// perftest's default `MB/sec`: MiB/s, 2^20 bytes per second (the JSON field
    /// `bw_avg_mib_per_s`).
    MibPerS,
    /// `Gb/sec` of `--report-gbits`: 10^9 bits per second (the JSON fields `bw_*_gbps`).
    Gbits,
}

impl BwUnit {
    /// `Gbits` when `--report-gbits` was given, `MibPerS` otherwise.
    pub fn from_report_gbits(gbits: bool) -> Self {
        if gbits {
            BwUnit::Gbits
        } else {
            BwUnit::MibPerS
        }
    }

    /// perftest's column label: `MB/sec` or `Gb/sec`.
    pub fn label(self) -> &'static str {
        match self {
            BwUnit::MibPerS => "MB/sec",
            BwUnit::Gbits => "Gb/sec",
        }
    }

    /// What the label means: `MB = 2^20 bytes` or `Gb = 10^9 bits`.
    pub fn meaning(self) -> &'static str {
        match self {
            BwUnit::MibPerS => "MB = 2^20 bytes",
            BwUnit::Gbits => "Gb = 10^9 bits",
        }
    }

    /// `bytes_per_s` in this unit.
    pub fn convert(self, bytes_per_s: f64) -> f64 {
        match self {
            BwUnit::MibPerS => bytes_per_s / (1u64 << 20) as f64,
            BwUnit::Gbits => bytes_per_s * 8.0 / 1e9,
        }
    }
}

/// The text of one progress line (without the leading `\r`): `elapsed_s` since the start
/// (of `duration_s` with `-D`), running totals sent by this side, the rate of the last
/// interval (`interval_bytes` in `interval_s`, both directions with `--bidirectional`) in
/// `unit`, and the retransmissions sent in it.
#[allow(clippy::too_many_arguments)]
pub fn progress_line(
    elapsed_s: f64,
    duration_s: Option<f64>,
    msgs: u64,
    bytes: u64,
    interval_bytes: u64,
    interval_s: f64,
    unit: BwUnit,
    retransmitted_packets: u64,
) -> String {
    let of = duration_s.map(|d| format!("/{d}")).unwrap_or_default();
    let bw = unit.convert(interval_bytes as f64 / interval_s.max(1e-9));
    format!(
        "[{elapsed_s:6.1}{of} s] sent {msgs:>12} msgs {bytes:>16} bytes, last {interval_s:.1} s: {bw:10.2} {} ({}), retransmitted_packets {retransmitted_packets}",
        unit.label(),
        unit.meaning()
    )
}

/// One interval of `-i SECONDS` (iperf3's interval reports): this side's sends, and its
/// receives with `--bidirectional`. The JSON's `intervals` array holds one per interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Interval {
    /// Start, seconds since the first message was posted.
    pub start_s: f64,
    /// End, seconds since the first message was posted.
    pub end_s: f64,
    /// Messages this side's sender completed in the interval.
    pub sent_messages: u64,
    /// Bytes of those messages.
    pub sent_bytes: u64,
    /// Bytes this side received in the interval (`--bidirectional`; 0 otherwise).
    pub received_bytes: u64,
    /// `sent_bytes + received_bytes` over the interval, Gb/s (10^9 bits/s).
    pub bw_gbps: f64,
    /// The same in MiB/s (perftest's MB/sec, 2^20 bytes).
    pub bw_mib_per_s: f64,
    /// Retransmissions this side sent in the interval.
    pub retransmitted_packets: u64,
    /// RTO expiries of this side's connection in the interval.
    pub rto_expiries: u64,
}

/// How a sender shows its progress on stderr.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgressOpts {
    /// The table's unit.
    pub unit: BwUnit,
    /// Length of an interval (`-i`, default 1 s).
    pub interval: Duration,
    /// Print every interval from the first (`-i` given); otherwise only on runs past 2 s.
    pub every_interval: bool,
    /// Print at all (stderr lines); the intervals are recorded either way.
    pub print: bool,
    /// Also record the bytes this side's sender completed in each bucket of this length
    /// (`--series-ms`; [`Metered::series`]). `None`: no series.
    pub series: Option<Duration>,
}

impl ProgressOpts {
    /// Records 1 s intervals, prints nothing.
    pub fn quiet() -> Self {
        ProgressOpts {
            unit: BwUnit::MibPerS,
            interval: Duration::from_secs(1),
            every_interval: false,
            print: false,
            series: None,
        }
    }
}

/// Most buckets of a `--series-ms` series (8 MB of counters): 1000 s at 1 ms; later
/// completions are not recorded in it.
pub const MAX_SERIES_BUCKETS: usize = 1_000_000;

/// What a [`Meter`] measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metered {
    /// Highest rate of this side's sends over a [`PeakWindow`], bytes/s (0: none closed).
    pub peak_sent_bps: f64,
    /// Highest rate of sends and receives together over such a window, bytes/s.
    pub peak_total_bps: f64,
    /// The intervals, the last one possibly shorter.
    pub intervals: Vec<Interval>,
    /// With [`ProgressOpts::series`]: bytes this side's sender completed in each bucket
    /// from the start (bucket `k` covers `[k, k + 1)` bucket lengths; a bucket without
    /// completions holds 0), up to the last completion's.
    pub series: Vec<u64>,
    /// When the meter started, ns since the Unix epoch (the wall clock): bucket `k`
    /// begins `k` bucket lengths after it, so other tools' timestamps (a capture, a fault
    /// injected) can be placed on the series.
    pub start_unix_ns: u64,
}

/// The sender's clock: the windows of the peaks ([`super::peak`]), `-i` intervals, and the progress
/// line on stderr (redrawn with carriage returns on a terminal, one plain line per
/// interval otherwise).
#[derive(Debug)]
pub struct Meter {
    o: ProgressOpts,
    start: Instant,
    duration_s: Option<f64>,
    /// The peak of this side's sends ([`super::peak`]).
    peak_sent: PeakWindow,
    /// The peak of sends and receives together, its windows counted in send completions.
    peak_total: PeakWindow,
    iv_start: Instant,
    iv_msgs: u64,
    iv_sent: u64,
    iv_recv: u64,
    iv_retx: u64,
    iv_rtos: u64,
    m: Metered,
    shown: bool,
    redraw: bool,
    /// Sent bytes at the last tick, for the series.
    series_sent: u64,
}

impl Meter {
    /// Starts the clock at `start`.
    pub fn new(o: ProgressOpts, duration_s: Option<f64>, start: Instant) -> Self {
        Meter {
            o,
            start,
            duration_s,
            peak_sent: PeakWindow::new(start),
            peak_total: PeakWindow::new(start),
            iv_start: start,
            iv_msgs: 0,
            iv_sent: 0,
            iv_recv: 0,
            iv_retx: 0,
            iv_rtos: 0,
            m: Metered {
                start_unix_ns: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
                ..Metered::default()
            },
            shown: false,
            redraw: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            series_sent: 0,
        }
    }

    /// Adds what the sender completed since the last tick to the series bucket of `now`.
    fn series_tick(&mut self, now: Instant, sent: u64) {
        let Some(len) = self.o.series else { return };
        let k = (now.duration_since(self.start).as_nanos() / len.as_nanos().max(1)) as usize;
        let moved = sent.saturating_sub(self.series_sent);
        self.series_sent = sent;
        if moved == 0 {
            return;
        }
        // Bounded: at most MAX_SERIES_BUCKETS (later completions are left out).
        if k >= MAX_SERIES_BUCKETS {
            return;
        }
        if self.m.series.len() <= k {
            self.m.series.resize(k + 1, 0);
        }
        self.m.series[k] += moved;
    }

    /// Running totals at `now`: messages and bytes this side's sender completed, bytes
    /// its receiver got; `counters` gives (retransmitted packets, RTO expiries) so far and
    /// is called only when an interval ends.
    pub fn tick(
        &mut self,
        now: Instant,
        msgs: u64,
        sent: u64,
        recv: u64,
        counters: impl FnOnce() -> (u64, u64),
    ) {
        self.peak_sent.tick(now, msgs, sent);
        self.peak_total.tick(now, msgs, sent + recv);
        self.series_tick(now, sent);
        if now.duration_since(self.iv_start) >= self.o.interval {
            self.close_interval(now, msgs, sent, recv, counters());
        }
    }

    fn close_interval(&mut self, now: Instant, msgs: u64, sent: u64, recv: u64, c: (u64, u64)) {
        self.close_interval_printing(now, msgs, sent, recv, c, true);
    }

    /// Closes the interval at `now`; its progress line only if `print` (and the progress
    /// options say so).
    fn close_interval_printing(
        &mut self,
        now: Instant,
        msgs: u64,
        sent: u64,
        recv: u64,
        c: (u64, u64),
        print: bool,
    ) {
        let dt = now.duration_since(self.iv_start).as_secs_f64();
        let bytes = (sent - self.iv_sent) + (recv - self.iv_recv);
        let iv = Interval {
            start_s: self.iv_start.duration_since(self.start).as_secs_f64(),
            end_s: now.duration_since(self.start).as_secs_f64(),
            sent_messages: msgs - self.iv_msgs,
            sent_bytes: sent - self.iv_sent,
            received_bytes: recv - self.iv_recv,
            bw_gbps: BwUnit::Gbits.convert(bytes as f64 / dt.max(1e-9)),
            bw_mib_per_s: BwUnit::MibPerS.convert(bytes as f64 / dt.max(1e-9)),
            retransmitted_packets: c.0.saturating_sub(self.iv_retx),
            rto_expiries: c.1.saturating_sub(self.iv_rtos),
        };
        let elapsed = now.duration_since(self.start);
        if print
            && self.o.print
            && (self.o.every_interval || self.shown || elapsed >= Duration::from_secs(2))
        {
            let line = progress_line(
                elapsed.as_secs_f64(),
                self.duration_s,
                msgs,
                sent,
                bytes,
                dt,
                self.o.unit,
                iv.retransmitted_packets,
            );
            if self.redraw {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
            self.shown = true;
        }
        self.m.intervals.push(iv);
        self.iv_start = now;
        self.iv_msgs = msgs;
        self.iv_sent = sent;
        self.iv_recv = recv;
        self.iv_retx = c.0;
        self.iv_rtos = c.1;
    }

    /// Ends the run at `now` with the final totals: the last, shorter interval (if it moved
    /// anything, or is over a millisecond long) and the peaks; ends a redrawn line.
    pub fn finish(
        mut self,
        now: Instant,
        msgs: u64,
        sent: u64,
        recv: u64,
        counters: impl FnOnce() -> (u64, u64),
    ) -> Metered {
        self.series_tick(now, sent);
        let last = now.duration_since(self.iv_start);
        // Recorded when it moved anything (so the records add up to the run: CI once saw
        // 127 messages completed in the last millisecond go missing) or is the only one.
        let moved = msgs > self.iv_msgs || sent > self.iv_sent || recv > self.iv_recv;
        if moved || last > Duration::from_millis(1) || self.m.intervals.is_empty() {
            // The last, shorter interval is recorded; its progress line only when it is at
            // least a tenth of an interval (a few ms of draining read as `last 0.0 s: 0.00`).
            let print = last >= self.o.interval / 10;
            self.close_interval_printing(now, msgs, sent, recv, counters(), print);
        }
        if self.shown && self.redraw {
            eprintln!();
        }
        self.m.peak_sent_bps = self.peak_sent.peak_bps();
        self.m.peak_total_bps = self.peak_total.peak_bps();
        self.m
    }
}

/// Latency figures, us.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatStats {
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Median (perftest's t_typical).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl LatStats {
    /// From samples in ns (sorted here); `None` when empty.
    pub fn from_ns(samples: &[u64]) -> Option<LatStats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let n = s.len();
        let us = |x: u64| x as f64 / 1000.0;
        let pct = |q: f64| us(s[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]);
        let avg = s.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = s.iter().map(|&x| (x as f64 - avg).powi(2)).sum::<f64>() / n as f64;
        Some(LatStats {
            min: us(s[0]),
            max: us(s[n - 1]),
            typical: us(s[n / 2]),
            avg: avg / 1000.0,
            stdev: var.sqrt() / 1000.0,
            p99: pct(0.99),
            p999: pct(0.999),
        })
    }
}

/// The final report of the client.
#[derive(Debug)]
pub struct Report<'a> {
    p: &'a TestParams,
    r: &'a EndResult,
    mode: &'a str,
}

impl<'a> Report<'a> {
    /// Wraps the results.
    pub fn new(p: &'a TestParams, r: &'a EndResult, mode: &'a str) -> Self {
        Report { p, r, mode }
    }

    fn title(&self) -> String {
        let what = match self.p.test {
            TestKind::Bw => "RDMA_Write BW Test",
            TestKind::Lat => "RDMA_Write Latency Test",
        };
        let bi = if self.p.bidirectional {
            " (bidirectional)"
        } else {
            ""
        };
        let fabric = match (self.p.fabric, self.p.udp_io) {
            (Fabric::Udp, super::opts::UdpIo::Uring) => "UDP/io_uring",
            (Fabric::Udp, super::opts::UdpIo::Direct) => "UDP/sendmsg+recvmmsg",
            (Fabric::Verbs, _) => "RDMA UD verbs",
        };
        format!("{what}{bi}: mrc over {fabric}, {}", self.mode)
    }

    fn bytes_moved(&self) -> u64 {
        let s = self.r.send.as_ref().map_or(0, |s| s.bytes);
        s + if self.p.bidirectional {
            self.r.recv.bytes
        } else {
            0
        }
    }

    /// Messages completed: this side's sends, and with `--bidirectional` its receives too
    /// (the table's `#iterations`, the JSON's `iterations`).
    fn iterations(&self) -> u64 {
        let s = self.r.send.as_ref().map_or(0, |s| s.completions);
        s + if self.p.bidirectional {
            self.r.recv.completions
        } else {
            0
        }
    }

    /// The highest rate over the peak windows ([`super::peak`]) of both directions together, bytes/s (this
    /// side's sends alone unless `--bidirectional`), and at least the average.
    fn peak_bps(&self) -> f64 {
        let s = self.r.send.clone().unwrap_or_default();
        let avg = self.bytes_moved() as f64 / s.elapsed_s.max(1e-9);
        let peak = if self.p.bidirectional {
            s.peak_total_bps
        } else {
            s.peak_bps
        };
        peak.max(avg)
    }

    /// CPU seconds per GB (1e9 bytes) moved, whole process.
    pub fn cpu_s_per_gb(&self) -> f64 {
        let b = self.bytes_moved();
        if b == 0 {
            0.0
        } else {
            self.r.cpu_s / (b as f64 / 1e9)
        }
    }

    /// perftest-style text.
    pub fn table(&self, gbits: bool) -> String {
        let p = self.p;
        let mut o = self.header();
        let s = self.r.send.clone().unwrap_or_default();
        o += &self.columns(gbits);
        o += &self.row(gbits);
        if p.test == TestKind::Bw {
            let u = BwUnit::from_report_gbits(gbits);
            o += &unit_line(u);
            if p.bidirectional {
                let unit = u.label();
                o += " bidirectional: #iterations, BW peak, BW average and MsgRate count both directions\n";
                let recv_s = (self.r.recv.elapsed_ns as f64 / 1e9).max(1e-9);
                let recv_avg = self.r.recv.bytes as f64 / recv_s;
                let send_avg = s.bytes as f64 / s.elapsed_s.max(1e-9);
                o += &format!(
                    " sent     : BW peak {:.2} {unit}, BW average {:.2} {unit}, {} messages\n received : BW peak {:.2} {unit}, BW average {:.2} {unit}, {} messages\n",
                    u.convert(s.peak_bps.max(send_avg)),
                    u.convert(send_avg),
                    s.completions,
                    u.convert((self.r.recv.peak_bytes_per_s as f64).max(recv_avg)),
                    u.convert(recv_avg),
                    self.r.recv.completions
                );
            }
        }
        o += &self.counters();
        o
    }

    /// The title block: test, mode and parameters, between rules.
    fn header(&self) -> String {
        let p = self.p;
        let mut o = String::new();
        o += RULE;
        o += "\n";
        o += &format!("                    {}\n", self.title());
        let on_off = if p.verify { "on" } else { "off" };
        let packets = if p.authenticated {
            "authenticated and encrypted (--psk-file)"
        } else {
            "in the clear"
        };
        // Display of the value enums ignores widths: padded as strings
        let (selection, mtu) = (p.path_selection.to_string(), format!("{} bytes", p.mtu));
        o += &format!(
            " Paths (EVs)     : {:<w$} MTU payload : {mtu:<w$} Burst/EV : {}\n",
            p.paths,
            p.burst_size,
            w = HEADER_VALUE_WIDTH
        );
        o += &format!(
            " CC              : {:<w$} TX depth    : {:<w$} Verify   : {on_off}\n",
            p.cc,
            p.tx_depth,
            w = HEADER_VALUE_WIDTH
        );
        o += &format!(
            " EV selection    : {selection:<w$} Packets     : {packets}\n",
            w = HEADER_VALUE_WIDTH
        );
        o += &format!(
            " CC presets for  : {} Gb/s line rate, {} us base RTT (--line-rate, --base-rtt-us)\n",
            p.line_rate_gbps, p.base_rtt_us
        );
        o += RULE;
        o += "\n";
        o
    }

    /// perftest's column line of the test.
    pub fn columns(&self, gbits: bool) -> String {
        match self.p.test {
            TestKind::Bw => {
                let unit = BwUnit::from_report_gbits(gbits).label();
                format!(
                    " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]   CPU[s/GB]\n"
                )
            }
            TestKind::Lat => {
                let mut o = String::new();
                for (label, w) in LAT_COLUMNS {
                    o += &format!(" {label:<w$}");
                }
                o.trim_end().to_string() + "\n"
            }
        }
    }

    /// perftest's row of figures under [`Report::columns`].
    pub fn row(&self, gbits: bool) -> String {
        let p = self.p;
        let s = self.r.send.clone().unwrap_or_default();
        match p.test {
            TestKind::Bw => {
                let u = BwUnit::from_report_gbits(gbits);
                let bytes = self.bytes_moved();
                let avg = bytes as f64 / s.elapsed_s.max(1e-9);
                let peak = self.peak_bps();
                let msgs = self.iterations();
                let rate = msgs as f64 / s.elapsed_s.max(1e-9) / 1e6;
                format!(
                    " {:<10} {:<14} {:<18.2} {:<20.2} {:<15.6} {:.3}\n",
                    p.size,
                    msgs,
                    u.convert(peak),
                    u.convert(avg),
                    rate,
                    self.cpu_s_per_gb()
                )
            }
            TestKind::Lat => {
                let l = LatStats::from_ns(&s.lat_ns).unwrap_or_default();
                let values = [
                    p.size.to_string(),
                    s.completions.to_string(),
                    format!("{:.2}", l.min),
                    format!("{:.2}", l.max),
                    format!("{:.2}", l.typical),
                    format!("{:.2}", l.avg),
                    format!("{:.2}", l.stdev),
                    format!("{:.2}", l.p99),
                    format!("{:.2}", l.p999),
                ];
                let mut o = String::new();
                for ((_, w), v) in LAT_COLUMNS.iter().zip(values) {
                    o += &format!(" {v:<w$}");
                }
                o.trim_end().to_string() + "\n"
            }
        }
    }

    /// The per-EV summary, the totals and the datapath and receiver lines.
    fn counters(&self) -> String {
        let p = self.p;
        let mut o = String::new();
        o += RULE;
        o += "\n";
        o += " Per-EV summary (this side's sender)\n";
        o += "   EV  src_port";
        for c in &EV_COUNTERS {
            o += &format!("  {:>w$}", c.key, w = c.key.len().max(12));
        }
        o += "  state\n";
        for e in &self.r.evs {
            o += &format!(" {:>4}  {:>8}", e.ev, e.port);
            for (c, v) in EV_COUNTERS.iter().zip(ev_values(e)) {
                o += &format!("  {v:>w$}", w = c.key.len().max(12));
            }
            o += &format!("  {}\n", e.state);
        }
        if self.r.planes.len() > 1 {
            o += &self.plane_table();
        }
        let c = &self.r.conn;
        let totals: Vec<String> = CONN_COUNTERS
            .iter()
            .zip(conn_values(c))
            .map(|(k, v)| format!("{} {v}", k.key))
            .collect();
        o += &format!(
            " this side's sender: {} ({} losses declared, {} of them spurious)\n",
            totals.join(", "),
            c.rto_lost + c.rack_losses,
            c.spurious
        );
        o += &format!(" this side's receiver: {}\n", self.r.recv.drops_text());
        let d = &self.r.engine.datapath;
        o += &format!(
            " datapath: {} datagrams in {} sends ({} refused), {} datagrams in {} receives ({} failed), {} engine sleeps\n",
            d.tx_datagrams,
            d.tx_calls,
            d.tx_errors,
            d.rx_datagrams,
            d.rx_calls,
            d.rx_errors,
            self.r.engine.sleeps
        );
        let pr = &self.r.peer_recv;
        if let Some(f) = &self.r.failure {
            // the peer's counts come at the end of a test, which this one did not reach
            if f == super::interrupt::INTERRUPTED {
                o += " peer's receiver: not reported (the test was interrupted)\n";
                o += " INTERRUPTED: a signal ended the test; the figures above are this side's until then\n";
            } else {
                o += " peer's receiver: not reported (the test failed)\n";
                o += &format!(" FAILED: {f}\n");
            }
        } else {
            o += &format!(
                " peer's receiver: completions {}, received_bytes {}\n peer's receiver: {}\n",
                pr.completions,
                pr.bytes,
                pr.drops_text()
            );
        }
        if p.verify && self.r.failure.is_none() {
            let mine = &self.r.recv;
            o += &format!(
                " verify: {} messages, {} bytes checked, {} bad bytes\n",
                pr.verified_messages + mine.verified_messages,
                pr.verified_bytes + mine.verified_bytes,
                pr.bad_bytes + mine.bad_bytes
            );
        }
        o += RULE;
        o += "\n";
        o
    }

    /// The per-plane summary of a connection on several planes: per plane its EVs, the
    /// sums of their counters, its share of the packets sent, the rate those packets
    /// make over the test (`sent_gbps`: sent packets x MTU payload x 8 / elapsed, so
    /// retransmissions count), its state and plane counters.
    fn plane_table(&self) -> String {
        let mut o = String::from(" Per-plane summary (this side's sender)\n");
        o += " plane  evs";
        for c in &EV_COUNTERS {
            o += &format!("  {:>w$}", c.key, w = c.key.len().max(12));
        }
        o += "  share_pct  sent_gbps  state       downs  ups  down_ms\n";
        for (pl, share, gbps, (n, sums)) in self.plane_rows() {
            o += &format!(" {:>5}  {n:>3}", pl.plane);
            for (c, v) in EV_COUNTERS.iter().zip(sums) {
                o += &format!("  {v:>w$}", w = c.key.len().max(12));
            }
            o += &format!(
                "  {share:>9.1}  {gbps:>9.3}  {:<10}  {:>5}  {:>3}  {:>7.1}\n",
                pl.state,
                pl.downs_by_loss + pl.downs_by_peer + pl.downs_local,
                pl.ups,
                pl.down_ns as f64 / 1e6
            );
        }
        o
    }

    /// Per plane: its line, its share of the packets sent (%), its `sent_gbps` and the
    /// EV sums of [`plane_sums`].
    fn plane_rows(&self) -> Vec<PlaneRow> {
        let sums = plane_sums(&self.r.evs, &self.r.planes);
        let total: u64 = sums.iter().map(|(_, s)| s[0]).sum();
        let elapsed_s = self.r.send.as_ref().map_or(0.0, |s| s.elapsed_s).max(1e-9);
        self.r
            .planes
            .iter()
            .zip(sums)
            .map(|(pl, (n, s))| {
                let share = 100.0 * s[0] as f64 / total.max(1) as f64;
                let gbps = s[0] as f64 * f64::from(self.p.mtu) * 8.0 / elapsed_s / 1e9;
                (*pl, share, gbps, (n, s))
            })
            .collect()
    }

    /// One JSON object, with the run metadata.
    pub fn json(&self) -> String {
        let mut v = self.json_value();
        add_run_metadata(&mut v);
        format!("{v}\n")
    }

    /// The JSON object of the results, without the run metadata.
    pub fn json_value(&self) -> serde_json::Value {
        let p = self.p;
        let s = self.r.send.clone().unwrap_or_default();
        let bytes = self.bytes_moved();
        let avg = bytes as f64 / s.elapsed_s.max(1e-9);
        let lat = LatStats::from_ns(&s.lat_ns);
        let evs: Vec<_> = self
            .r
            .evs
            .iter()
            .map(|e| {
                let mut o =
                    json!({"ev": e.ev, "src_port": e.port, "state": e.state, "plane": e.plane});
                for (c, v) in EV_COUNTERS.iter().zip(ev_values(e)) {
                    o[c.key] = json!(v);
                }
                o
            })
            .collect();
        let planes: Vec<_> = self
            .plane_rows()
            .into_iter()
            .map(|(pl, share, gbps, (n, sums))| {
                let mut o = json!({
                    "plane": pl.plane, "evs": n, "state": pl.state,
                    "share_pct": share, "sent_gbps": gbps,
                    "downs_by_loss": pl.downs_by_loss, "downs_by_peer": pl.downs_by_peer,
                    "downs_local": pl.downs_local, "ups": pl.ups,
                    "down_ms": pl.down_ns as f64 / 1e6,
                });
                for (c, v) in EV_COUNTERS.iter().zip(sums) {
                    o[c.key] = json!(v);
                }
                o
            })
            .collect();
        let msgs = self.iterations();
        let mut v = json!({
            "test": match p.test { TestKind::Bw => "bw", TestKind::Lat => "lat" },
            "mode": self.mode,
            "msg_size_bytes": p.size,
            "iterations": msgs,
            "elapsed_s": s.elapsed_s,
            "total_bytes": bytes,
            "bw_peak_gbps": self.peak_bps() * 8.0 / 1e9,
            "bw_avg_gbps": avg * 8.0 / 1e9,
            // perftest's "BW average[MB/sec]" is MiB/s (2^20 bytes); the name says so.
            "bw_avg_mib_per_s": avg / (1u64 << 20) as f64,
            "msg_rate_mpps": msgs as f64 / s.elapsed_s.max(1e-9) / 1e6,
            "cpu_s": self.r.cpu_s,
            "cpu_s_per_gb": self.cpu_s_per_gb(),
            "lat_us": lat.map(|l| json!({"min": l.min, "max": l.max, "typical": l.typical, "avg": l.avg,
                                         "stdev": l.stdev, "p99": l.p99, "p999": l.p999})),
            "paths": p.paths, "mtu": p.mtu, "cc": p.cc, "burst_size": p.burst_size,
            "path_selection": p.path_selection.to_string(),
            "tx_depth": p.tx_depth, "verify": p.verify, "bidirectional": p.bidirectional,
            "authenticated": p.authenticated,
            "dropped_datagrams": self.r.recv.dropped(),
            "duplicate_datagrams": self.r.recv.duplicates(),
            "drops": self.r.recv.drops,
            "unknown_qpn": self.r.recv.unknown_qpn,
            "datapath": {
                "tx_datagrams": self.r.engine.datapath.tx_datagrams,
                "tx_calls": self.r.engine.datapath.tx_calls,
                "tx_errors": self.r.engine.datapath.tx_errors,
                "rx_datagrams": self.r.engine.datapath.rx_datagrams,
                "rx_calls": self.r.engine.datapath.rx_calls,
                "rx_errors": self.r.engine.datapath.rx_errors,
                "engine_sleeps": self.r.engine.sleeps,
                "engine_loops": self.r.engine.loops,
                "engine_tx_bursts": self.r.engine.tx_bursts,
            },
            "receiver": {
                "completions": self.r.peer_recv.completions,
                "received_bytes": self.r.peer_recv.bytes,
                "verified_messages": self.r.peer_recv.verified_messages + self.r.recv.verified_messages,
                "verified_bytes": self.r.peer_recv.verified_bytes + self.r.recv.verified_bytes,
                "bad_bytes": self.r.peer_recv.bad_bytes + self.r.recv.bad_bytes,
                "dropped_datagrams": self.r.peer_recv.dropped(),
                "duplicate_datagrams": self.r.peer_recv.duplicates(),
                "drops": self.r.peer_recv.drops,
                "unknown_qpn": self.r.peer_recv.unknown_qpn,
            },
            "evs": evs,
            "planes": planes,
        });
        if s.series_bucket_ms > 0.0 {
            v["series"] = json!({"bucket_ms": s.series_bucket_ms, "start_unix_ns": s.series_start_unix_ns,
                                 "sent_bytes": s.series});
        }
        for (c, n) in CONN_COUNTERS.iter().zip(conn_values(&self.r.conn)) {
            v[c.key] = json!(n);
        }
        if p.bidirectional {
            let rv = &self.r.recv;
            let recv_s = (rv.elapsed_ns as f64 / 1e9).max(1e-9);
            let send_avg = s.bytes as f64 / s.elapsed_s.max(1e-9);
            let recv_avg = rv.bytes as f64 / recv_s;
            v["directions"] = json!({
                "sent": {"iterations": s.completions, "total_bytes": s.bytes,
                         "elapsed_s": s.elapsed_s,
                         "bw_peak_gbps": s.peak_bps.max(send_avg) * 8.0 / 1e9,
                         "bw_avg_gbps": send_avg * 8.0 / 1e9},
                "received": {"iterations": rv.completions, "total_bytes": rv.bytes,
                             "elapsed_s": rv.elapsed_ns as f64 / 1e9,
                             "bw_peak_gbps": (rv.peak_bytes_per_s as f64).max(recv_avg) * 8.0 / 1e9,
                             "bw_avg_gbps": recv_avg * 8.0 / 1e9},
            });
        }
        v["intervals"] = json!(s.intervals);
        // Datagrams dropped in the engine for a foreign source (not the peer's addresses):
        // this side's and the receiver's (json! nests too deep to hold them above).
        v["source_drops"] = json!(self.r.recv.source_drops);
        // What the congestion-control presets assumed (--line-rate, --base-rtt-us).
        v["line_rate_gbps"] = json!(p.line_rate_gbps);
        v["base_rtt_us"] = json!(p.base_rtt_us);
        v["receiver"]["source_drops"] = json!(self.r.peer_recv.source_drops);
        let bad = self.r.peer_recv.bad_bytes + self.r.recv.bad_bytes;
        if self.r.failure.is_some() {
            // not reported: the peer sends its counts at the end of a test
            v["receiver"] = serde_json::Value::Null;
        }
        v["ok"] = json!(bad == 0 && self.r.failure.is_none());
        v["error"] = match &self.r.failure {
            Some(f) => json!(f),
            None if bad > 0 => json!(format!("verify failed: {bad} bad bytes")),
            None => serde_json::Value::Null,
        };
        v
    }
}

/// Width of the header's value columns (`power-of-two`, the longest `--path-selection`,
/// fits).
const HEADER_VALUE_WIDTH: usize = 12;

/// The latency table's columns (perftest's labels) and their widths: a value starts where
/// its label starts, for sizes up to 1 GiB (10 digits) and latencies up to 10^10 us.
const LAT_COLUMNS: [(&str, usize); 9] = [
    ("#bytes", 10),
    ("#iterations", 14),
    ("t_min[usec]", 14),
    ("t_max[usec]", 14),
    ("t_typical[usec]", 16),
    ("t_avg[usec]", 14),
    ("t_stdev[usec]", 15),
    ("99% percentile[usec]", 22),
    ("99.9% percentile[usec]", 22),
];

/// The unit line under a bw row: what the unit means.
fn unit_line(u: BwUnit) -> String {
    format!(
        " {}: {}{}; BW peak: best window of >= 100 ms and 8 completions; CPU[s/GB]: GB = 10^9 bytes\n",
        u.label(),
        u.meaning(),
        match u {
            BwUnit::MibPerS => " (perftest's; --report-gbits for Gb/sec)",
            BwUnit::Gbits => " (--report-gbits)",
        }
    )
}

/// The report of `-a` (perftest's sweep of message sizes): the first run's title block,
/// one row per size, and a line per size with its nonzero counters and drops; or with
/// `json` one object whose `sizes` holds each size's object. `failure` (the sweep
/// stopped there) goes in the JSON's `ok`/`error` and in a line of the table.
pub fn sweep_report(
    runs: &[(TestParams, EndResult, String)],
    gbits: bool,
    json: bool,
    failure: Option<&str>,
) -> String {
    if json {
        let sizes: Vec<serde_json::Value> = runs
            .iter()
            .map(|(p, r, m)| Report::new(p, r, m).json_value())
            .collect();
        let bad: u64 = runs
            .iter()
            .map(|(_, r, _)| r.peer_recv.bad_bytes + r.recv.bad_bytes)
            .sum();
        let error = match failure {
            Some(f) => json!(f),
            None if bad > 0 => json!(format!("verify failed: {bad} bad bytes")),
            None => serde_json::Value::Null,
        };
        let mut v = json!({"ok": error.is_null(), "error": error, "sizes": sizes});
        add_run_metadata(&mut v);
        return format!("{v}\n");
    }
    let mut o = String::new();
    let Some((p0, r0, m0)) = runs.first() else {
        return failure.map(|f| format!(" {f}\n")).unwrap_or_default();
    };
    let first = Report::new(p0, r0, m0);
    o += &first.header();
    o += &first.columns(gbits);
    for (p, r, m) in runs {
        o += &Report::new(p, r, m).row(gbits);
    }
    if p0.test == TestKind::Bw {
        o += &unit_line(BwUnit::from_report_gbits(gbits));
    }
    o += RULE;
    o += "\n";
    o += " #bytes   this side's counters that are not 0; this side's receive drops\n";
    for (p, r, _) in runs {
        let totals: Vec<String> = CONN_COUNTERS
            .iter()
            .zip(conn_values(&r.conn))
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{} {v}", k.key))
            .collect();
        o += &format!(
            " {:<8} {}; {}\n",
            p.size,
            totals.join(", "),
            r.recv.drops_text()
        );
    }
    if let Some(f) = failure {
        o += &format!(" {f}\n");
    }
    o += RULE;
    o += "\n";
    o
}

/// Adds what identifies a run to a JSON report: `version` (mrc-perf's), `timestamp`
/// (RFC 3339, UTC, seconds), `command_line` (the arguments as given) and `host` (the
/// kernel's host name).
pub fn add_run_metadata(v: &mut serde_json::Value) {
    v["version"] = json!(env!("CARGO_PKG_VERSION"));
    v["timestamp"] =
        json!(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string());
    v["command_line"] = json!(std::env::args().collect::<Vec<_>>().join(" "));
    v["host"] = json!(
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    );
}

/// The JSON a `--json` run prints on stdout when it fails before it has a report:
/// `{"ok": false, "error": MESSAGE}` and the run metadata of [`add_run_metadata`].
pub fn failure_json(message: &str) -> String {
    let mut v = json!({"ok": false, "error": message});
    add_run_metadata(&mut v);
    format!("{v}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_figures_exact() {
        let ns: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let l = LatStats::from_ns(&ns).unwrap();
        assert_eq!((l.min, l.max, l.typical), (1.0, 1000.0, 501.0));
        assert_eq!((l.p99, l.p999), (990.0, 999.0));
        assert!((l.avg - 500.5).abs() < 1e-9);
        assert!(LatStats::from_ns(&[]).is_none());
    }

    #[test]
    fn progress_line_uses_the_tables_unit_and_says_what_it_is() {
        // 3 x 2^20 bytes in 1 s = 3.00 MiB/s = 0.025165824 Gb/s.
        let mib = progress_line(
            3.04,
            Some(10.0),
            48,
            7 << 20,
            3 << 20,
            1.0,
            BwUnit::MibPerS,
            0,
        );
        assert_eq!(
            mib,
            "[   3.0/10 s] sent           48 msgs          7340032 bytes, last 1.0 s:       3.00 MB/sec (MB = 2^20 bytes), retransmitted_packets 0"
        );
        let gb = progress_line(12.0, None, 48, 7 << 20, 3 << 20, 1.0, BwUnit::Gbits, 5);
        assert_eq!(
            gb,
            "[  12.0 s] sent           48 msgs          7340032 bytes, last 1.0 s:       0.03 Gb/sec (Gb = 10^9 bits), retransmitted_packets 5"
        );
        assert_eq!(BwUnit::MibPerS.convert(3.0 * 1048576.0), 3.0);
        assert_eq!(BwUnit::Gbits.convert(125_000_000.0), 1.0);
    }

    /// The banner's three columns line up whatever the values (`EV selection` lost its
    /// padding: the value enums' Display ignores widths), `power-of-two` included.
    #[test]
    fn banner_columns_line_up() {
        use crate::perf::opts::Cli;
        use crate::perf::run::EndResult;
        use clap::Parser;
        let r = EndResult::default();
        for (sel, line) in [
            (
                "recycle",
                " EV selection    : recycle      Packets     : in the clear\n",
            ),
            (
                "power-of-two",
                " EV selection    : power-of-two Packets     : in the clear\n",
            ),
        ] {
            let p = Cli::parse_from(["mrc-perf", "loopback", "--path-selection", sel])
                .test
                .params()
                .unwrap();
            let t = Report::new(&p, &r, "t").table(false);
            let banner = " Paths (EVs)     : 16           MTU payload : 4096 bytes   Burst/EV : 1\n \
                          CC              : nscc         TX depth    : 128          Verify   : off\n"
                .to_string()
                + line
                + " CC presets for  : 100 Gb/s line rate, 200 us base RTT (--line-rate, --base-rtt-us)\n";
            assert!(t.contains(&banner), "{t}");
        }
    }

    /// Each latency figure starts under its label, also for sizes of 7 and 10 digits (the
    /// figures of a 1 MiB test slid left of their labels).
    #[test]
    fn latency_columns_hold_their_place_for_large_sizes() {
        use crate::perf::opts::Cli;
        use crate::perf::run::{EndResult, SendResult};
        use clap::Parser;
        let r = EndResult {
            send: Some(SendResult {
                completions: 1_000_000,
                lat_ns: vec![1_714_820, 5_102_090, 1_885_920],
                ..SendResult::default()
            }),
            ..EndResult::default()
        };
        for size in ["8", "1048576", "1073741824"] {
            let p = Cli::parse_from(["mrc-perf", "loopback", "--test", "lat", "-s", size])
                .test
                .params()
                .unwrap();
            let rep = Report::new(&p, &r, "t");
            let (head, row) = (rep.columns(false), rep.row(false));
            assert_eq!(
                head,
                " #bytes     #iterations    t_min[usec]    t_max[usec]    t_typical[usec]  \
                 t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n"
            );
            let starts = |l: &str| -> Vec<usize> {
                let b = l.as_bytes();
                (1..b.len())
                    .filter(|&i| b[i] != b' ' && b[i - 1] == b' ')
                    .collect()
            };
            // "99% percentile[usec]" and "99.9% percentile[usec]" are two words each
            let mut labels = starts(&head);
            labels.retain(|&i| !head[i..].starts_with("percentile"));
            assert_eq!(labels, starts(&row), "{head}{row}");
            assert!(
                row.starts_with(&format!(" {size:<10} 1000000        1714.82 ")),
                "{row}"
            );
        }
    }

    #[test]
    fn table_bw_figures_and_their_unit_line() {
        use crate::perf::opts::Cli;
        use crate::perf::run::{EndResult, SendResult};
        use clap::Parser;
        // 100 messages of 1 MiB in 2 s: 50 MiB/s = 0.4194304 Gb/s; peak 80 MiB/s.
        let r = EndResult {
            send: Some(SendResult {
                completions: 100,
                bytes: 100 << 20,
                elapsed_s: 2.0,
                peak_bps: (80u64 << 20) as f64,
                ..SendResult::default()
            }),
            ..EndResult::default()
        };
        let p = Cli::parse_from(["mrc-perf", "loopback", "-s", "1048576", "-n", "100"])
            .test
            .params()
            .unwrap();
        let t = Report::new(&p, &r, "t").table(false);
        assert!(
            t.contains(
                " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   CPU[s/GB]\n 1048576    100            80.00              50.00                0.000050        0.000\n MB/sec: MB = 2^20 bytes (perftest's; --report-gbits for Gb/sec); BW peak: best window of >= 100 ms and 8 completions; CPU[s/GB]: GB = 10^9 bytes\n"
            ),
            "{t}"
        );
        assert!(!t.contains("bidirectional:"), "{t}");
        assert!(
            t.contains("RDMA_Write BW Test: mrc over UDP/io_uring, t\n"),
            "{t}"
        );
        // The banner names the datapath the test ran on.
        let pv = Cli::parse_from(["mrc-perf", "loopback", "--fabric", "verbs", "-n", "100"])
            .test
            .params()
            .unwrap();
        let tv = Report::new(&pv, &r, "loopback 127.0.0.1").table(false);
        assert!(
            tv.contains("RDMA_Write BW Test: mrc over RDMA UD verbs, loopback 127.0.0.1\n"),
            "{tv}"
        );
        // Bidirectional: 100 MiB sent in 2 s, 60 MiB received in 1.5 s; the best 100 ms
        // of both together 150 MiB/s, of the receives 45 MiB/s. The main row's peak is
        // the peak of both directions (it was this side's sends, never above the
        // average of both), and each direction has its own line.
        let bi = Cli::parse_from(["mrc-perf", "loopback", "-n", "100", "-b"])
            .test
            .params()
            .unwrap();
        let mut rb = EndResult {
            send: Some(SendResult {
                completions: 100,
                bytes: 100 << 20,
                elapsed_s: 2.0,
                peak_bps: (80u64 << 20) as f64,
                peak_total_bps: (150u64 << 20) as f64,
                ..SendResult::default()
            }),
            ..EndResult::default()
        };
        rb.recv.completions = 60;
        rb.recv.bytes = 60 << 20;
        rb.recv.elapsed_ns = 1_500_000_000;
        rb.recv.peak_bytes_per_s = 45 << 20;
        let t = Report::new(&bi, &rb, "t").table(false);
        assert!(
            t.contains(
                " 65536      160            150.00             80.00                0.000080        0.000\n"
            ),
            "{t}"
        );
        assert!(
            t.contains(" bidirectional: #iterations, BW peak, BW average and MsgRate count both directions\n sent     : BW peak 80.00 MB/sec, BW average 50.00 MB/sec, 100 messages\n received : BW peak 45.00 MB/sec, BW average 40.00 MB/sec, 60 messages\n"),
            "{t}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&Report::new(&bi, &rb, "t").json()).unwrap();
        assert_eq!(v["iterations"], 160);
        assert_eq!(v["bw_peak_gbps"], 150.0 * 1048576.0 * 8.0 / 1e9);
        assert_eq!(v["directions"]["received"]["iterations"], 60);
        assert_eq!(
            v["directions"]["received"]["bw_peak_gbps"],
            45.0 * 1048576.0 * 8.0 / 1e9
        );
        assert_eq!(
            v["directions"]["sent"]["bw_avg_gbps"],
            50.0 * 1048576.0 * 8.0 / 1e9
        );
        let t = Report::new(&p, &r, "t").table(true);
        assert!(
            t.contains(
                " 1048576    100            0.67               0.42                 0.000050        0.000\n Gb/sec: Gb = 10^9 bits (--report-gbits); BW peak"
            ),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&Report::new(&p, &r, "t").json()).unwrap();
        assert_eq!(v["bw_avg_mib_per_s"], 50.0);
        assert_eq!(v["bw_avg_gbps"], 0.4194304);
    }

    #[test]
    fn counts_beyond_2_pow_32_print_exactly() {
        use crate::perf::opts::{Cli, Command};
        use crate::perf::run::{EndResult, RecvResult, SendResult};
        use clap::Parser;
        let cli = Cli::parse_from(["mrc-perf", "loopback", "-s", "8", "-n", "5000000000"]);
        assert!(matches!(
            cli.cmd,
            Command::Loopback {
                ipv6: false,
                planes: 1
            }
        ));
        let p = cli.test.params().unwrap();
        assert_eq!(p.iters, Some(5_000_000_000));
        let n = 5_000_000_000u64;
        let r = EndResult {
            send: Some(SendResult {
                completions: n,
                bytes: n * 8,
                elapsed_s: 1000.0,
                ..SendResult::default()
            }),
            peer_recv: RecvResult {
                completions: n,
                bytes: n * 8,
                ..RecvResult::default()
            },
            ..EndResult::default()
        };
        let rep = Report::new(&p, &r, "test");
        let t = rep.table(false);
        assert!(t.contains(" 8          5000000000 "), "{t}");
        assert!(
            t.contains(" peer's receiver: completions 5000000000, received_bytes 40000000000"),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&rep.json()).unwrap();
        assert_eq!(v["iterations"], 5_000_000_000u64);
        // 40e9 bytes in 1000 s = 0.32 Gb/s, 5 Mpps.
        assert!((v["bw_avg_gbps"].as_f64().unwrap() - 0.32).abs() < 1e-9);
        assert!((v["msg_rate_mpps"].as_f64().unwrap() - 5.0).abs() < 1e-9);
        // 40e9 bytes / 1000 s / 2^20 = 38.14697265625 MiB/s.
        assert!((v["bw_avg_mib_per_s"].as_f64().unwrap() - 38.146_972_656_25).abs() < 1e-9);
        assert!(v.get("bw_avg_mbps").is_none());
    }

    #[test]
    fn json_has_the_tables_loss_and_datapath_counters() {
        use crate::perf::opts::{Cli, Command};
        use crate::perf::run::EndResult;
        use clap::Parser;
        let cli = Cli::parse_from(["mrc-perf", "loopback", "-n", "1"]);
        assert!(matches!(cli.cmd, Command::Loopback { .. }));
        let p = cli.test.params().unwrap();
        let mut r = EndResult::default();
        r.conn.timeouts = 2;
        r.conn.rack_losses = 7;
        r.conn.spurious = 3;
        r.conn.tail_loss_probes = 5;
        r.conn.trimmed = 11;
        r.engine.datapath.tx_datagrams = 1000;
        r.engine.datapath.tx_calls = 40;
        r.engine.sleeps = 9;
        r.engine.loops = 300;
        r.engine.tx_bursts = 20;
        let v: serde_json::Value = serde_json::from_str(&Report::new(&p, &r, "t").json()).unwrap();
        assert_eq!(
            (
                &v["rto_expiries"],
                &v["rack_lost_packets"],
                &v["spurious_losses"]
            ),
            (&2.into(), &7.into(), &3.into())
        );
        assert_eq!(
            (&v["tail_loss_probes"], &v["trimmed_packets"]),
            (&5.into(), &11.into())
        );
        assert_eq!(v["dropped_datagrams"], 0);
        assert_eq!(v["datapath"]["tx_datagrams"], 1000);
        assert_eq!(v["datapath"]["tx_calls"], 40);
        assert_eq!(v["datapath"]["engine_sleeps"], 9);
        assert_eq!(v["datapath"]["engine_loops"], 300);
        assert_eq!(v["datapath"]["engine_tx_bursts"], 20);
    }

    /// A failed test's partial report: the table says FAILED with the error and that the
    /// peer's receiver did not report (not zeros); the JSON has `"ok": false`, the error
    /// and `"receiver": null`, and the counters of what ran.
    #[test]
    fn a_failed_test_reports_its_failure_and_what_it_measured() {
        use crate::perf::opts::Cli;
        use crate::perf::run::{EndResult, SendResult};
        use clap::Parser;
        let p = Cli::parse_from(["mrc-perf", "client", "h", "-D", "10", "--verify"])
            .test
            .params()
            .unwrap();
        let mut r = EndResult {
            send: Some(SendResult {
                completions: 7,
                bytes: 7 * 65536,
                elapsed_s: 1.5,
                ..SendResult::default()
            }),
            failure: Some("peer unresponsive for 1.0 s".into()),
            ..EndResult::default()
        };
        r.conn.sent = 112;
        let rep = Report::new(&p, &r, "client of h:18515");
        let t = rep.table(false);
        assert!(
            t.contains(
                " peer's receiver: not reported (the test failed)\n FAILED: peer unresponsive for 1.0 s\n"
            ),
            "{t}"
        );
        assert!(!t.contains("peer's receiver: completions"), "{t}");
        assert!(!t.contains(" verify: "), "{t}");
        let v = rep.json_value();
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"], "peer unresponsive for 1.0 s");
        assert_eq!(v["receiver"], serde_json::Value::Null);
        assert_eq!(
            (v["iterations"].as_u64(), v["sent_packets"].as_u64()),
            (Some(7), Some(112))
        );
    }

    /// One vocabulary: every counter's JSON key is its label in the table, the totals
    /// line prints each with its value, and the per-EV header names each column by it.
    #[test]
    fn table_labels_are_the_json_keys() {
        use crate::perf::opts::Cli;
        use crate::perf::run::{EndResult, RecvResult};
        use clap::Parser;
        let p = Cli::parse_from(["mrc-perf", "loopback", "-n", "1"])
            .test
            .params()
            .unwrap();
        let mut r = EndResult::default();
        r.conn.sent = 101;
        r.conn.retransmitted = 102;
        r.conn.trimmed = 103;
        r.conn.ecn_marked = 104;
        r.conn.timeouts = 105;
        r.conn.rto_lost = 106;
        r.conn.rack_losses = 107;
        r.conn.spurious = 108;
        r.conn.tail_loss_probes = 109;
        r.evs = vec![EvLine {
            ev: 3,
            port: 20003,
            packets: 201,
            retransmits: 202,
            trims: 203,
            ecn_marks: 204,
            timeouts: 205,
            probes: 206,
            state: "GOOD",
            plane: 0,
        }];
        r.recv = RecvResult {
            drops: [("Duplicate".to_string(), 4), ("BadRkey".to_string(), 1)].into(),
            ..RecvResult::default()
        };
        let rep = Report::new(&p, &r, "t");
        let t = rep.table(false);
        let v: serde_json::Value = serde_json::from_str(&rep.json()).unwrap();
        for (i, c) in CONN_COUNTERS.iter().enumerate() {
            let n = 101 + i as u64;
            assert_eq!(v[c.key], n, "{}", c.key);
            assert!(t.contains(&format!("{} {n}", c.key)), "{} in {t}", c.key);
        }
        assert!(
            t.contains(" this side's sender: sent_packets 101, retransmitted_packets 102, trimmed_packets 103, ecn_marked_packets 104, rto_expiries 105, rto_lost_packets 106, rack_lost_packets 107, spurious_losses 108, tail_loss_probes 109 (213 losses declared, 108 of them spurious)\n"),
            "{t}"
        );
        assert!(
            t.contains("   EV  src_port  sent_packets  retransmitted_packets  trimmed_packets  ecn_marked_packets  rto_lost_packets   probes_sent  state\n    3     20003           201                    202              203                 204               205           206  GOOD\n"),
            "{t}"
        );
        let ev = v["evs"][0].as_object().unwrap();
        let mut keys: Vec<&str> = ev.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want: Vec<&str> = EV_COUNTERS.iter().map(|c| c.key).collect();
        want.extend(["ev", "plane", "src_port", "state"]);
        want.sort_unstable();
        assert_eq!(keys, want);
        for (i, c) in EV_COUNTERS.iter().enumerate() {
            assert_eq!(ev[c.key], 201 + i as u64, "{}", c.key);
        }
        // this side's drops: 5, of them 4 copies of packets already received
        assert_eq!(
            (&v["dropped_datagrams"], &v["duplicate_datagrams"]),
            (&5.into(), &4.into())
        );
        assert!(
            t.contains(" this side's receiver: dropped_datagrams 5 (BadRkey 1, Duplicate 4); duplicate_datagrams 4 (copies of packets already received: normal after a retransmission or tail loss probe of the sending end)\n"),
            "{t}"
        );
        for c in DROP_COUNTERS {
            assert!(
                v.get(c.key).is_some() && v["receiver"].get(c.key).is_some(),
                "{}",
                c.key
            );
            assert!(t.contains(c.key), "{}", c.key);
        }
        // the message size has its own name; the bytes moved theirs
        assert_eq!(v["msg_size_bytes"], 65536);
        assert!(v.get("bytes").is_none() && v.get("total_bytes").is_some());
    }

    /// Two planes: the per-plane block sums each plane's EVs, gives its share of the
    /// packets and its rate, its state and plane counters, and the JSON says the same;
    /// one plane prints no block.
    #[test]
    fn two_planes_get_a_per_plane_block_with_exact_sums() {
        use crate::perf::opts::Cli;
        use crate::perf::run::EndResult;
        use clap::Parser;
        let p = Cli::parse_from(["mrc-perf", "loopback", "-n", "1", "--mtu", "4096"])
            .test
            .params()
            .unwrap();
        let ev = |ev: u32, plane: u8, packets: u64, retransmits: u64| EvLine {
            ev,
            port: 20000 + ev as u16,
            packets,
            retransmits,
            state: "GOOD",
            plane,
            ..EvLine::default()
        };
        let mut r = EndResult {
            evs: vec![
                ev(0, 0, 300, 1),
                ev(1, 1, 100, 2),
                ev(2, 0, 300, 3),
                ev(3, 1, 300, 4),
            ],
            planes: vec![
                PlaneLine {
                    plane: 0,
                    state: "UP",
                    ..PlaneLine::default()
                },
                PlaneLine {
                    plane: 1,
                    state: "DOWN_PEER",
                    downs_by_peer: 1,
                    downs_by_loss: 1,
                    ups: 1,
                    down_ns: 2_500_000,
                    ..PlaneLine::default()
                },
            ],
            ..EndResult::default()
        };
        r.send = Some(crate::perf::loops::SendResult {
            elapsed_s: 1.0,
            ..Default::default()
        });
        let rep = Report::new(&p, &r, "t");
        let t = rep.table(false);
        // 1000 packets: plane 0 600 (60%), plane 1 400; x 4096 B x 8 / 1 s.
        assert!(
            t.contains(" Per-plane summary (this side's sender)\n plane  evs  sent_packets  retransmitted_packets  trimmed_packets  ecn_marked_packets  rto_lost_packets   probes_sent  share_pct  sent_gbps  state       downs  ups  down_ms\n     0    2           600                      4                0                   0                 0             0       60.0      0.020  UP              0    0      0.0\n     1    2           400                      6                0                   0                 0             0       40.0      0.013  DOWN_PEER       2    1      2.5\n"),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&rep.json()).unwrap();
        let pl = &v["planes"];
        assert_eq!(pl.as_array().unwrap().len(), 2);
        assert_eq!(
            (&pl[1]["plane"], &pl[1]["evs"], &pl[1]["state"]),
            (&1.into(), &2.into(), &"DOWN_PEER".into())
        );
        assert_eq!(
            (&pl[1]["sent_packets"], &pl[1]["retransmitted_packets"]),
            (&400.into(), &6.into())
        );
        assert_eq!(pl[0]["share_pct"], 60.0);
        assert_eq!(pl[1]["sent_gbps"], 400.0 * 4096.0 * 8.0 / 1e9);
        assert_eq!(
            (
                &pl[1]["downs_by_loss"],
                &pl[1]["downs_by_peer"],
                &pl[1]["downs_local"]
            ),
            (&1.into(), &1.into(), &0.into())
        );
        assert_eq!((&pl[1]["ups"], &pl[1]["down_ms"]), (&1.into(), &2.5.into()));
        assert_eq!(v["evs"][1]["plane"], 1);
        // One plane: no block, one entry in the JSON.
        r.evs.iter_mut().for_each(|e| e.plane = 0);
        r.planes.truncate(1);
        let rep = Report::new(&p, &r, "t");
        assert!(!rep.table(false).contains("Per-plane"));
        let v: serde_json::Value = serde_json::from_str(&rep.json()).unwrap();
        assert_eq!(v["planes"][0]["sent_packets"], 1000);
        assert_eq!(v["planes"][0]["share_pct"], 100.0);
    }

    /// Messages that complete in the last half millisecond, after an interval closed, still
    /// get a record: the records add up to the run (CI saw 127 of them go missing).
    #[test]
    fn meter_records_a_last_sub_millisecond_interval_that_moved_bytes() {
        let t0 = Instant::now();
        let us = |n: u64| t0 + Duration::from_micros(n);
        let o = ProgressOpts {
            print: false,
            ..ProgressOpts::quiet()
        };
        let mut m = Meter::new(o, None, t0);
        m.tick(us(1_000_000), 100, 1_000, 0, || (0, 0));
        let r = m.finish(us(1_000_500), 127, 1_270, 0, || (0, 0));
        let got: Vec<(u64, u64)> = r
            .intervals
            .iter()
            .map(|i| (i.sent_messages, i.sent_bytes))
            .collect();
        assert_eq!(got, [(100, 1_000), (27, 270)]);
        // nothing moved in the last half millisecond: no record
        let mut m = Meter::new(o, None, t0);
        m.tick(us(1_000_000), 100, 1_000, 0, || (0, 0));
        assert_eq!(
            m.finish(us(1_000_500), 100, 1_000, 0, || (0, 0))
                .intervals
                .len(),
            1
        );
    }

    /// `--series-ms`: each tick's newly completed bytes land in the bucket of its time;
    /// buckets without completions hold 0; the finish's last bytes count too.
    #[test]
    fn series_buckets_hold_exactly_the_bytes_completed_in_them() {
        let t0 = Instant::now();
        let us = |n: u64| t0 + Duration::from_micros(n);
        let o = ProgressOpts {
            series: Some(Duration::from_millis(1)),
            ..ProgressOpts::quiet()
        };
        let mut m = Meter::new(o, None, t0);
        m.tick(us(200), 1, 100, 0, || (0, 0));
        m.tick(us(900), 2, 250, 0, || (0, 0));
        m.tick(us(1_000), 3, 300, 0, || (0, 0));
        // nothing in (1, 3) ms
        m.tick(us(3_500), 4, 1_000, 0, || (0, 0));
        let r = m.finish(us(3_900), 5, 1_024, 0, || (0, 0));
        assert_eq!(r.series, vec![250, 50, 0, 724]);
        // without it, none
        let mut m = Meter::new(ProgressOpts::quiet(), None, t0);
        m.tick(us(200), 1, 100, 0, || (0, 0));
        assert!(m.finish(us(300), 1, 100, 0, || (0, 0)).series.is_empty());
    }

    /// Intervals from the sender's clock: 2.5 s of sends in 1 s intervals give two whole
    /// intervals and a last one of 0.5 s, each with its own bytes, rate and retransmits;
    /// the windows of 100 ms (10 completions each) give the peaks of the sends and of both
    /// directions.
    #[test]
    fn meter_intervals_and_peaks_exact() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let o = ProgressOpts {
            print: false,
            ..ProgressOpts::quiet()
        };
        let mut m = Meter::new(o, None, t0);
        // 1 MB per 100 ms sent, 0.5 MB received, except 3 MB sent in (1000, 1100]
        let mut sent = 0u64;
        let mut recv = 0u64;
        let mut calls = 0;
        for k in 1..=25u64 {
            sent += if k == 11 { 3_000_000 } else { 1_000_000 };
            recv += 500_000;
            m.tick(ms(k * 100), k * 10, sent, recv, || {
                calls += 1;
                (k, k / 10)
            });
        }
        let r = m.finish(ms(2500), 250, sent, recv, || (40, 3));
        assert_eq!(calls, 2, "counters are read once per interval");
        let iv = &r.intervals;
        assert_eq!(iv.len(), 3);
        assert_eq!((iv[0].start_s, iv[0].end_s), (0.0, 1.0));
        assert_eq!((iv[1].start_s, iv[1].end_s), (1.0, 2.0));
        assert_eq!((iv[2].start_s, iv[2].end_s), (2.0, 2.5));
        assert_eq!(
            (iv[0].sent_messages, iv[0].sent_bytes, iv[0].received_bytes),
            (100, 10_000_000, 5_000_000)
        );
        assert_eq!(iv[1].sent_bytes, 12_000_000);
        assert_eq!(iv[2].sent_bytes, 5_000_000);
        assert_eq!(iv[0].bw_gbps, 0.12);
        assert_eq!(iv[2].bw_gbps, 7_500_000.0 * 8.0 / 0.5 / 1e9);
        assert_eq!(
            iv.iter()
                .map(|i| i.retransmitted_packets)
                .collect::<Vec<_>>(),
            [10, 10, 20]
        );
        assert_eq!(
            iv.iter().map(|i| i.rto_expiries).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        assert!((r.peak_sent_bps - 30e6).abs() < 1e-3, "{}", r.peak_sent_bps);
        assert!(
            (r.peak_total_bps - 35e6).abs() < 1e-3,
            "{}",
            r.peak_total_bps
        );
    }

    /// The README's vocabulary table has a row for every counter the report prints.
    #[test]
    fn readme_vocabulary_lists_every_counter() {
        let readme = include_str!("../../../README.md");
        let keys = CONN_COUNTERS
            .iter()
            .chain(&EV_COUNTERS)
            .chain(&DROP_COUNTERS)
            .map(|c| c.key)
            .chain(["msg_size_bytes", "iterations", "total_bytes"]);
        for k in keys {
            assert!(
                readme.contains(&format!("\n| `{k}` | ")),
                "README lacks a row for {k}"
            );
        }
    }
}
