//! Output of `mrc-perf`: perftest's columns, the per-EV summary, JSON, the progress line.

use super::opts::{TestKind, TestParams};
use super::run::EndResult;
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
    /// Its packets declared lost by RTO expiries (one expiry can declare a whole window
    /// on every EV; the connection's count of expiries is `rtos`). Shown as `RTO_lost`.
    pub timeouts: u64,
    /// Its path state at the end of the run: `GOOD`, `SKIP`, `ASSUMED_BAD` or `DENIED`
    /// (empty when unknown).
    pub state: &'static str,
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
/// (of `duration_s` with `-D`), running totals sent by this side, and the rate of the
/// last interval (`interval_bytes` in `interval_s`) in `unit`.
pub fn progress_line(
    elapsed_s: f64,
    duration_s: Option<f64>,
    msgs: u64,
    bytes: u64,
    interval_bytes: u64,
    interval_s: f64,
    unit: BwUnit,
) -> String {
    let of = duration_s.map(|d| format!("/{d:.0}")).unwrap_or_default();
    let bw = unit.convert(interval_bytes as f64 / interval_s.max(1e-9));
    format!(
        "[{elapsed_s:6.1}{of} s] sent {msgs:>12} msgs {bytes:>16} bytes, last {interval_s:.1} s: {bw:10.2} {} ({})",
        unit.label(),
        unit.meaning()
    )
}

/// The progress line (stderr), once a second on runs longer than 2 s.
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    last: Instant,
    last_bytes: u64,
    shown: bool,
    duration_s: Option<f64>,
    unit: BwUnit,
    /// stderr is a terminal: redraw one line with carriage returns; otherwise (a file, a
    /// pipe, CI) print one plain line per second.
    redraw: bool,
}

impl Progress {
    /// Starts the clock; the rate is shown in `unit` (the table's).
    pub fn new(duration_s: Option<f64>, unit: BwUnit) -> Self {
        let now = Instant::now();
        Progress {
            start: now,
            last: now,
            last_bytes: 0,
            shown: false,
            duration_s,
            unit,
            redraw: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }

    /// Called with running totals; prints at most once a second, from 2 s on.
    pub fn update(&mut self, msgs: u64, bytes: u64) {
        let now = Instant::now();
        if now.duration_since(self.start) < Duration::from_secs(2) && !self.shown {
            if now.duration_since(self.last) >= Duration::from_secs(1) {
                self.last = now;
                self.last_bytes = bytes;
            }
            return;
        }
        let dt = now.duration_since(self.last);
        if dt < Duration::from_secs(1) {
            return;
        }
        let line = progress_line(
            now.duration_since(self.start).as_secs_f64(),
            self.duration_s,
            msgs,
            bytes,
            bytes - self.last_bytes,
            dt.as_secs_f64(),
            self.unit,
        );
        if self.redraw {
            eprint!("\r{line}   ");
        } else {
            eprintln!("{line}");
        }
        let _ = std::io::stderr().flush();
        self.shown = true;
        self.last = now;
        self.last_bytes = bytes;
    }

    /// Ends the line if one was redrawn.
    pub fn finish(&mut self) {
        if self.shown && self.redraw {
            eprintln!();
        }
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
        format!("{what}{bi}: mrc over UDP/io_uring, {}", self.mode)
    }

    fn bytes_moved(&self) -> u64 {
        let s = self.r.send.as_ref().map_or(0, |s| s.bytes);
        s + if self.p.bidirectional {
            self.r.recv.bytes
        } else {
            0
        }
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
        let mut o = String::new();
        o += RULE;
        o += "\n";
        o += &format!("                    {}\n", self.title());
        o += &format!(
            " Paths (EVs)     : {:<8} MTU payload : {} bytes   Burst/EV : {}\n CC              : {:<8} TX depth    : {:<8}     Verify   : {}\n EV selection    : {:<8} Packets     : {}\n CC presets for  : {} Gb/s line rate, {} us base RTT (--line-rate, --base-rtt-us)\n",
            p.paths,
            p.mtu,
            p.burst_size,
            p.cc,
            p.tx_depth,
            if p.verify { "on" } else { "off" },
            p.path_selection,
            if p.authenticated {
                "authenticated and encrypted (--psk-file)"
            } else {
                "in the clear"
            },
            p.line_rate_gbps,
            p.base_rtt_us
        );
        o += RULE;
        o += "\n";
        let s = self.r.send.clone().unwrap_or_default();
        match p.test {
            TestKind::Bw => {
                let u = BwUnit::from_report_gbits(gbits);
                let unit = u.label();
                let bytes = self.bytes_moved();
                let avg = bytes as f64 / s.elapsed_s.max(1e-9);
                let peak = s.peak_bps.max(avg);
                let msgs = s.completions
                    + if p.bidirectional {
                        self.r.recv.completions
                    } else {
                        0
                    };
                let rate = msgs as f64 / s.elapsed_s.max(1e-9) / 1e6;
                o += &format!(
                    " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]   CPU[s/GB]\n"
                );
                o += &format!(
                    " {:<10} {:<14} {:<18.2} {:<20.2} {:<15.6} {:.3}\n",
                    p.size,
                    msgs,
                    u.convert(peak),
                    u.convert(avg),
                    rate,
                    self.cpu_s_per_gb()
                );
                o += &format!(
                    " {unit}: {}{}; BW peak: best 100 ms window; CPU[s/GB]: GB = 10^9 bytes\n",
                    u.meaning(),
                    match u {
                        BwUnit::MibPerS => " (perftest's; --report-gbits for Gb/sec)",
                        BwUnit::Gbits => " (--report-gbits)",
                    }
                );
                if p.bidirectional {
                    o += " bidirectional: #iterations, BW average and MsgRate count both directions, BW peak this side's sends (at least the average)\n";
                }
            }
            TestKind::Lat => {
                let l = LatStats::from_ns(&s.lat_ns).unwrap_or_default();
                o += " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n";
                o += &format!(
                    " {:<6} {:<11} {:<14.2} {:<14.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}\n",
                    p.size, s.completions, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
                );
            }
        }
        o += RULE;
        o += "\n";
        o += " Per-EV summary (this side's sender)\n";
        o += "   EV  src_port       packets   retransmits       trims    ECN_marks    RTO_lost  state\n";
        for e in &self.r.evs {
            o += &format!(
                " {:>4}  {:>8}  {:>12}  {:>12}  {:>10}  {:>11}  {:>10}  {}\n",
                e.ev, e.port, e.packets, e.retransmits, e.trims, e.ecn_marks, e.timeouts, e.state
            );
        }
        let c = &self.r.conn;
        o += &format!(
            " total: {} packets sent, {} retransmitted, {} trimmed, {} ECN marks, {} RTO expiries, {} RACK losses ({} spurious), {} tail loss probes, {} dropped on receive (SACKs and NACKs at this sender)\n",
            c.sent,
            c.retransmitted,
            c.trimmed,
            c.ecn_marked,
            c.timeouts,
            c.rack_losses,
            c.spurious,
            c.tail_loss_probes,
            c.drops.total()
        );
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
        o += &format!(
            " receiver: {} completions, {} bytes\n receiver: {}\n",
            pr.completions,
            pr.bytes,
            pr.drops_text()
        );
        let sd = &self.r.recv.source_drops;
        if sd.total() > 0 {
            o += &format!(
                " this side: {} datagrams from a foreign source dropped (wrong IP {}, wrong port {}, before connect {})\n",
                sd.total(),
                sd.wrong_ip,
                sd.wrong_port,
                sd.before_connect
            );
        }
        if p.verify {
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

    /// One JSON object.
    pub fn json(&self) -> String {
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
                json!({"ev": e.ev, "src_port": e.port, "packets": e.packets, "retransmits": e.retransmits,
                       "trims": e.trims, "ecn_marks": e.ecn_marks, "timeouts": e.timeouts, "state": e.state})
            })
            .collect();
        let mut v = json!({
            "test": match p.test { TestKind::Bw => "bw", TestKind::Lat => "lat" },
            "mode": self.mode,
            "bytes": p.size,
            "iterations": s.completions,
            "elapsed_s": s.elapsed_s,
            "bytes_moved": bytes,
            "bw_peak_gbps": s.peak_bps.max(avg) * 8.0 / 1e9,
            "bw_avg_gbps": avg * 8.0 / 1e9,
            // perftest's "BW average[MB/sec]" is MiB/s (2^20 bytes); the name says so.
            "bw_avg_mib_per_s": avg / (1u64 << 20) as f64,
            "msg_rate_mpps": s.completions as f64 / s.elapsed_s.max(1e-9) / 1e6,
            "cpu_s": self.r.cpu_s,
            "cpu_s_per_gb": self.cpu_s_per_gb(),
            "lat_us": lat.map(|l| json!({"min": l.min, "max": l.max, "typical": l.typical, "avg": l.avg,
                                         "stdev": l.stdev, "p99": l.p99, "p999": l.p999})),
            "paths": p.paths, "mtu": p.mtu, "cc": p.cc, "burst_size": p.burst_size,
            "path_selection": p.path_selection.to_string(),
            "tx_depth": p.tx_depth, "verify": p.verify, "bidirectional": p.bidirectional,
            "authenticated": p.authenticated,
            "sent_packets": self.r.conn.sent,
            "retransmitted": self.r.conn.retransmitted,
            "trimmed": self.r.conn.trimmed,
            "ecn_marked": self.r.conn.ecn_marked,
            "rtos": self.r.conn.timeouts,
            "rack_losses": self.r.conn.rack_losses,
            "spurious_losses": self.r.conn.spurious,
            "tail_loss_probes": self.r.conn.tail_loss_probes,
            "sender_rx_dropped": self.r.conn.drops.total(),
            "datapath": {
                "tx_datagrams": self.r.engine.datapath.tx_datagrams,
                "tx_calls": self.r.engine.datapath.tx_calls,
                "tx_errors": self.r.engine.datapath.tx_errors,
                "rx_datagrams": self.r.engine.datapath.rx_datagrams,
                "rx_calls": self.r.engine.datapath.rx_calls,
                "rx_errors": self.r.engine.datapath.rx_errors,
                "engine_sleeps": self.r.engine.sleeps,
            },
            "receiver": {
                "completions": self.r.peer_recv.completions,
                "bytes": self.r.peer_recv.bytes,
                "verified_messages": self.r.peer_recv.verified_messages + self.r.recv.verified_messages,
                "verified_bytes": self.r.peer_recv.verified_bytes + self.r.recv.verified_bytes,
                "bad_bytes": self.r.peer_recv.bad_bytes + self.r.recv.bad_bytes,
                "dropped": self.r.peer_recv.dropped(),
                "drops": self.r.peer_recv.drops,
                "unknown_qpn": self.r.peer_recv.unknown_qpn,
            },
            "evs": evs,
        });
        // Datagrams dropped in the engine for a foreign source (not the peer's addresses):
        // this side's and the receiver's (json! nests too deep to hold them above).
        v["source_drops"] = json!(self.r.recv.source_drops);
        // What the congestion-control presets assumed (--line-rate, --base-rtt-us).
        v["line_rate_gbps"] = json!(p.line_rate_gbps);
        v["base_rtt_us"] = json!(p.base_rtt_us);
        v["receiver"]["source_drops"] = json!(self.r.peer_recv.source_drops);
        let bad = self.r.peer_recv.bad_bytes + self.r.recv.bad_bytes;
        v["ok"] = json!(bad == 0);
        v["error"] = if bad == 0 {
            serde_json::Value::Null
        } else {
            json!(format!("verify failed: {bad} bad bytes"))
        };
        add_run_metadata(&mut v);
        format!("{v}\n")
    }
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
        let mib = progress_line(3.04, Some(10.0), 48, 7 << 20, 3 << 20, 1.0, BwUnit::MibPerS);
        assert_eq!(
            mib,
            "[   3.0/10 s] sent           48 msgs          7340032 bytes, last 1.0 s:       3.00 MB/sec (MB = 2^20 bytes)"
        );
        let gb = progress_line(12.0, None, 48, 7 << 20, 3 << 20, 1.0, BwUnit::Gbits);
        assert_eq!(
            gb,
            "[  12.0 s] sent           48 msgs          7340032 bytes, last 1.0 s:       0.03 Gb/sec (Gb = 10^9 bits)"
        );
        assert_eq!(BwUnit::MibPerS.convert(3.0 * 1048576.0), 3.0);
        assert_eq!(BwUnit::Gbits.convert(125_000_000.0), 1.0);
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
                lat_ns: Vec::new(),
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
                " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   CPU[s/GB]\n 1048576    100            80.00              50.00                0.000050        0.000\n MB/sec: MB = 2^20 bytes (perftest's; --report-gbits for Gb/sec); BW peak: best 100 ms window; CPU[s/GB]: GB = 10^9 bytes\n"
            ),
            "{t}"
        );
        assert!(!t.contains("bidirectional:"), "{t}");
        let bi = Cli::parse_from(["mrc-perf", "loopback", "-n", "100", "--bidirectional"])
            .test
            .params()
            .unwrap();
        let t = Report::new(&bi, &r, "t").table(false);
        assert!(
            t.contains(" bidirectional: #iterations, BW average and MsgRate count both directions, BW peak this side's sends (at least the average)\n"),
            "{t}"
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
        assert!(matches!(cli.cmd, Command::Loopback { ipv6: false }));
        let p = cli.test.params().unwrap();
        assert_eq!(p.iters, Some(5_000_000_000));
        let n = 5_000_000_000u64;
        let r = EndResult {
            send: Some(SendResult {
                completions: n,
                bytes: n * 8,
                elapsed_s: 1000.0,
                peak_bps: 0.0,
                lat_ns: Vec::new(),
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
            t.contains(" receiver: 5000000000 completions, 40000000000 bytes"),
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
        let v: serde_json::Value = serde_json::from_str(&Report::new(&p, &r, "t").json()).unwrap();
        assert_eq!(
            (&v["rtos"], &v["rack_losses"], &v["spurious_losses"]),
            (&2.into(), &7.into(), &3.into())
        );
        assert_eq!(
            (&v["tail_loss_probes"], &v["trimmed"]),
            (&5.into(), &11.into())
        );
        assert_eq!(v["sender_rx_dropped"], 0);
        assert_eq!(v["datapath"]["tx_datagrams"], 1000);
        assert_eq!(v["datapath"]["tx_calls"], 40);
        assert_eq!(v["datapath"]["engine_sleeps"], 9);
    }
}
