//! What each rank measured, and rank 0's report of the job: per-rank and aggregate
//! goodput, the per-burst completion time distribution, per-EV counters, the rank-to-host
//! map; as a table or one JSON object.

use super::opts::{Mode, Pattern, Plan};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Counters of one EV, summed over a rank's QPs (or over all ranks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvCounters {
    /// The EV.
    pub ev: u32,
    /// Data packets sent on it.
    pub sent: u64,
    /// Retransmissions on it.
    pub retransmitted: u64,
    /// Packets acknowledged whose last transmission went on it.
    pub acked: u64,
    /// Packets that arrived ECN CE marked.
    pub ecn_marked: u64,
    /// Packets declared lost by RACK.
    pub lost: u64,
    /// Packets declared lost by an RTO.
    pub timeouts: u64,
    /// Its plane (`--bind A,B`: EV i on plane i mod P; 0 on one plane).
    #[serde(default)]
    pub plane: u8,
}

/// Per plane `q` (0 up to the highest plane of `evs`): (EVs, sent, acked) summed over
/// the EVs of the plane.
pub fn plane_sums(evs: &[EvCounters]) -> Vec<(u8, usize, u64, u64)> {
    let planes = evs.iter().map(|e| e.plane).max().map_or(0, |p| p + 1);
    (0..planes)
        .map(|q| {
            let on: Vec<&EvCounters> = evs.iter().filter(|e| e.plane == q).collect();
            (
                q,
                on.len(),
                on.iter().map(|e| e.sent).sum(),
                on.iter().map(|e| e.acked).sum(),
            )
        })
        .collect()
}

impl EvCounters {
    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &EvCounters) {
        self.sent += o.sent;
        self.retransmitted += o.retransmitted;
        self.acked += o.acked;
        self.ecn_marked += o.ecn_marked;
        self.lost += o.lost;
        self.timeouts += o.timeouts;
    }
}

/// Sums per-EV counters by EV.
pub fn sum_evs<'a>(all: impl IntoIterator<Item = &'a EvCounters>) -> Vec<EvCounters> {
    let mut m: std::collections::BTreeMap<u32, EvCounters> = Default::default();
    for e in all {
        let x = m.entry(e.ev).or_insert(EvCounters {
            ev: e.ev,
            plane: e.plane,
            ..Default::default()
        });
        x.add(e);
    }
    m.into_values().collect()
}

/// One rank's measurements, sent to rank 0 as JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankResult {
    /// MPI rank.
    pub rank: u32,
    /// Host (`MPI_Get_processor_name`).
    pub host: String,
    /// The UDP address it received on.
    pub udp: String,
    /// Its process id.
    pub pid: u32,
    /// QPs it opened.
    pub qps: u32,
    /// UDP sockets it opened.
    pub sockets: u32,
    /// Messages sent and acknowledged.
    pub sent_messages: u64,
    /// Bytes in them.
    pub sent_bytes: u64,
    /// First post to last send completion, ns.
    pub send_span_ns: u64,
    /// Messages received.
    pub recv_messages: u64,
    /// Bytes in them.
    pub recv_bytes: u64,
    /// First to last receive, ns.
    pub recv_span_ns: u64,
    /// `--verify`: messages checked by the engine.
    pub verified_messages: u64,
    /// `--verify`: bytes checked.
    pub verified_bytes: u64,
    /// `--verify`: bytes that differed.
    pub bad_bytes: u64,
    /// Allreduce: result elements checked.
    pub checked_elements: u64,
    /// Allreduce: elements that differed from the sum.
    pub bad_elements: u64,
    /// (burst index, completion ns) of every burst of every stream of this rank.
    pub bursts: Vec<(u64, u64)>,
    /// Message post-to-completion time: p50, p99, max, ns.
    pub message_ns: [u64; 3],
    /// How late bursts began against the schedule: p50, max, ns.
    pub start_late_ns: [u64; 2],
    /// Rank 0's clock minus this one's, ns.
    pub clock_offset_ns: i64,
    /// Round trip of the sample the offset came from, ns.
    pub clock_rtt_ns: i64,
    /// What a second measurement found left after the offset, ns.
    pub clock_residual_ns: i64,
    /// Retransmitted packets, all QPs.
    pub retransmitted: u64,
    /// RTO expiries, all QPs.
    pub rto_timeouts: u64,
    /// Datagrams dropped for their source, all QPs.
    pub source_drops: u64,
    /// Its QPs authenticate every packet (`--psk-file`).
    pub authenticated: bool,
    /// Datagrams that failed authentication or were replays, all QPs.
    pub auth_drops: u64,
    /// Datagrams the engine sent.
    pub tx_datagrams: u64,
    /// CPU time of the engine thread, ns.
    pub engine_cpu_ns: u64,
    /// Per EV, summed over this rank's QPs.
    pub evs: Vec<EvCounters>,
}

/// Count, p50, p99 and max of `v` (hdrhistogram, 3 significant digits, values up to an
/// hour; count and max exact), ns.
pub fn dist(v: impl IntoIterator<Item = u64>) -> Option<(u64, u64, u64, u64)> {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).ok()?;
    let (mut n, mut max) = (0u64, 0u64);
    for x in v {
        h.saturating_record(x);
        n += 1;
        max = max.max(x);
    }
    // a quantile is the highest value equivalent to it: never above the exact max
    let q = |x: f64| h.value_at_quantile(x).min(max);
    (n > 0).then(|| (n, q(0.5), q(0.99), max))
}

fn gbps(bytes: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / ns as f64
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The slowest stream of every burst index: per `k`, the largest completion time of any
/// stream of any rank.
pub fn slowest_per_burst(ranks: &[RankResult]) -> Vec<u64> {
    let mut m: std::collections::BTreeMap<u64, u64> = Default::default();
    for r in ranks {
        for &(k, ns) in &r.bursts {
            let x = m.entry(k).or_default();
            *x = (*x).max(ns);
        }
    }
    m.into_values().collect()
}

/// The job summary: clock figures, totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Bytes acknowledged to senders, all ranks.
    pub sent_bytes: u64,
    /// Bytes received, all ranks.
    pub recv_bytes: u64,
    /// Messages received, all ranks.
    pub recv_messages: u64,
    /// Longest receive span of any rank, ns.
    pub span_ns: u64,
    /// Aggregate goodput: received bytes over the longest span, Gb/s.
    pub goodput_gbps: f64,
    /// Verified bytes, all ranks.
    pub verified_bytes: u64,
    /// Verified messages, all ranks.
    pub verified_messages: u64,
    /// Bad bytes, all ranks.
    pub bad_bytes: u64,
    /// Allreduce: elements checked, all ranks.
    pub checked_elements: u64,
    /// Allreduce: bad elements, all ranks.
    pub bad_elements: u64,
    /// Largest |clock offset| to rank 0, ns.
    pub max_offset_ns: i64,
    /// Largest |residual skew| after correction, ns.
    pub max_residual_ns: i64,
    /// Half the largest round trip of the offset samples: the bound on the offsets' error, ns.
    pub max_half_rtt_ns: i64,
}

/// Sums the ranks.
pub fn summarize(ranks: &[RankResult]) -> Summary {
    let mut s = Summary::default();
    for r in ranks {
        s.sent_bytes += r.sent_bytes;
        s.recv_bytes += r.recv_bytes;
        s.recv_messages += r.recv_messages;
        s.span_ns = s.span_ns.max(r.recv_span_ns);
        s.verified_bytes += r.verified_bytes;
        s.verified_messages += r.verified_messages;
        s.bad_bytes += r.bad_bytes;
        s.checked_elements += r.checked_elements;
        s.bad_elements += r.bad_elements;
        s.max_offset_ns = s.max_offset_ns.max(r.clock_offset_ns.abs());
        s.max_residual_ns = s.max_residual_ns.max(r.clock_residual_ns.abs());
        s.max_half_rtt_ns = s.max_half_rtt_ns.max(r.clock_rtt_ns / 2);
    }
    s.goodput_gbps = gbps(s.recv_bytes, s.span_ns);
    s
}

fn dist_json(d: Option<(u64, u64, u64, u64)>) -> serde_json::Value {
    match d {
        Some((n, p50, p99, max)) => {
            json!({"count": n, "p50_ns": p50, "p99_ns": p99, "max_ns": max})
        }
        None => serde_json::Value::Null,
    }
}

/// Rank 0's report as one JSON object (`ok: true`).
pub fn report_json(plan: &Plan, ranks: &[RankResult]) -> String {
    let s = summarize(ranks);
    let all = dist(ranks.iter().flat_map(|r| r.bursts.iter().map(|b| b.1)));
    let slow = dist(slowest_per_burst(ranks));
    let per_rank: Vec<serde_json::Value> = ranks
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("bursts");
                o.insert(
                    "bursts".into(),
                    dist_json(dist(r.bursts.iter().map(|b| b.1))),
                );
                o.insert("tx_gbps".into(), json!(gbps(r.sent_bytes, r.send_span_ns)));
                o.insert("rx_gbps".into(), json!(gbps(r.recv_bytes, r.recv_span_ns)));
            }
            v
        })
        .collect();
    let evs = sum_evs(ranks.iter().flat_map(|r| r.evs.iter()));
    let mut o = json!({
        "ok": true,
        "plan": plan,
        "ranks": per_rank,
        "hosts": ranks.iter().map(|r| json!({"rank": r.rank, "host": r.host, "udp": r.udp})).collect::<Vec<_>>(),
        "summary": s,
        "bursts": dist_json(all),
        "slowest_per_burst": dist_json(slow),
        "planes": plane_sums(&evs).iter().map(|(q, n, sent, acked)| json!({"plane": q, "evs": n, "sent": sent, "acked": acked})).collect::<Vec<_>>(),
        "evs": evs,
    });
    if plan.pattern == Pattern::Allreduce {
        let n = f64::from(plan.ranks);
        if let Some((_, p50, _, _)) = slow {
            let alg = gbps(plan.params.size, p50);
            o["allreduce"] =
                json!({"algbw_gbps_p50": alg, "busbw_gbps_p50": alg * 2.0 * (n - 1.0) / n});
        }
    }
    let mut t = serde_json::to_string_pretty(&o).unwrap_or_default();
    t.push('\n');
    t
}

fn mode_text(p: &Plan) -> String {
    match p.mode {
        Mode::Continuous => match (p.messages, p.duration_s) {
            (Some(n), _) if p.pattern != Pattern::Allreduce => {
                format!("continuous, {n} messages per stream")
            }
            (_, Some(d)) => format!("continuous, {d} s"),
            _ => format!("continuous, {} iterations", p.bursts),
        },
        Mode::Training => format!(
            "training, {} steps of {} ms on / {} ms off",
            p.bursts,
            p.on_ns as f64 / 1e6,
            p.off_ns as f64 / 1e6
        ),
        Mode::Storage => format!(
            "storage, {} bursts of {} x {} B per stream every {:.1} us ({} Gb/s)",
            p.bursts,
            p.burst_messages,
            p.params.size,
            us(p.period_ns),
            p.params.rate_limit_gbps.unwrap_or(0.0)
        ),
        Mode::SyncBurst => format!(
            "sync-burst, {} bursts of {} x {} B per destination every {:.1} us",
            p.bursts,
            p.burst_messages,
            p.params.size,
            us(p.period_ns)
        ),
    }
}

fn dist_text(d: Option<(u64, u64, u64, u64)>) -> String {
    match d {
        Some((n, p50, p99, max)) => format!(
            "{n} bursts: p50 {:.1} us, p99 {:.1} us, max {:.1} us",
            us(p50),
            us(p99),
            us(max)
        ),
        None => "none".into(),
    }
}

/// Rank 0's report as a table.
pub fn report_table(plan: &Plan, ranks: &[RankResult]) -> String {
    let s = summarize(ranks);
    let mut o = format!(
        "mrc-perf mpi: {} ranks, pattern {:?}, {}, -s {} B, {} EVs, --cc {}\n",
        plan.ranks,
        plan.pattern,
        mode_text(plan),
        plan.params.size,
        plan.params.paths,
        plan.params.cc
    );
    o += &format!(
        "{:>4} {:<16} {:<30} {:>4} {:>5} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10} {:>10} {:>5} {:>10}\n",
        "rank",
        "host",
        "udp",
        "qps",
        "socks",
        "sent_msgs",
        "recv_msgs",
        "tx_Gbps",
        "rx_Gbps",
        "burst_p50",
        "burst_p99",
        "burst_max",
        "bad",
        "offset_ns"
    );
    for r in ranks {
        let d = dist(r.bursts.iter().map(|b| b.1));
        let f = |i: usize| {
            d.map_or("-".to_string(), |d| {
                let v = [d.1, d.2, d.3][i];
                format!("{:.1}us", us(v))
            })
        };
        o += &format!(
            "{:>4} {:<16} {:<30} {:>4} {:>5} {:>10} {:>10} {:>8.3} {:>8.3} {:>10} {:>10} {:>10} {:>5} {:>10}\n",
            r.rank,
            r.host,
            r.udp,
            r.qps,
            r.sockets,
            r.sent_messages,
            r.recv_messages,
            gbps(r.sent_bytes, r.send_span_ns),
            gbps(r.recv_bytes, r.recv_span_ns),
            f(0),
            f(1),
            f(2),
            r.bad_bytes + r.bad_elements,
            r.clock_offset_ns
        );
    }
    o += &format!(
        "aggregate: {} bytes in {} messages received, goodput {:.3} Gb/s over {:.3} ms\n",
        s.recv_bytes,
        s.recv_messages,
        s.goodput_gbps,
        s.span_ns as f64 / 1e6
    );
    if plan.params.verify {
        o += &format!(
            "verified: {} messages, {} bytes, {} bad bytes\n",
            s.verified_messages, s.verified_bytes, s.bad_bytes
        );
    }
    if plan.pattern == Pattern::Allreduce {
        o += &format!(
            "allreduce result checked on every rank: {} elements, {} bad\n",
            s.checked_elements, s.bad_elements
        );
    }
    o += &format!(
        "burst completion, every stream: {}\n",
        dist_text(dist(
            ranks.iter().flat_map(|r| r.bursts.iter().map(|b| b.1))
        ))
    );
    o += &format!(
        "burst completion, slowest stream of each burst: {}\n",
        dist_text(dist(slowest_per_burst(ranks)))
    );
    let late = ranks.iter().map(|r| r.start_late_ns[1]).max().unwrap_or(0);
    o += &format!(
        "clocks: largest offset to rank 0 {} ns, residual skew after correction {} ns \
         (bound: half round trip {} ns); latest burst start {:.1} us behind schedule\n",
        s.max_offset_ns,
        s.max_residual_ns,
        s.max_half_rtt_ns,
        us(late)
    );
    let evs = sum_evs(ranks.iter().flat_map(|r| r.evs.iter()));
    let planes = plane_sums(&evs);
    if planes.len() > 1 {
        let total: u64 = planes.iter().map(|p| p.2).sum();
        o += "per plane, all ranks:\n plane  evs       sent  share_pct      acked\n";
        for (q, n, sent, acked) in &planes {
            o += &format!(
                "{q:>6} {n:>4} {sent:>10} {:>10.1} {acked:>10}\n",
                100.0 * *sent as f64 / total.max(1) as f64
            );
        }
    }
    o += "per EV, all ranks:\n    ev       sent   retrans      acked  ecn_marked   lost  rto\n";
    for e in evs {
        o += &format!(
            "{:>6} {:>10} {:>9} {:>10} {:>11} {:>6} {:>4}\n",
            e.ev, e.sent, e.retransmitted, e.acked, e.ecn_marked, e.lost, e.timeouts
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_slowest_bursts_are_exact() {
        let a = RankResult {
            rank: 0,
            recv_bytes: 1000,
            recv_span_ns: 8000,
            bursts: vec![(0, 10), (1, 40), (0, 30)],
            clock_offset_ns: -7,
            clock_rtt_ns: 100,
            evs: vec![EvCounters {
                ev: 1,
                sent: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        let b = RankResult {
            rank: 1,
            recv_bytes: 3000,
            recv_span_ns: 4000,
            bursts: vec![(0, 20), (1, 5)],
            clock_offset_ns: 5,
            evs: vec![
                EvCounters {
                    ev: 1,
                    sent: 4,
                    ..Default::default()
                },
                EvCounters {
                    ev: 0,
                    sent: 1,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let s = summarize(&[a.clone(), b.clone()]);
        assert_eq!(
            (s.recv_bytes, s.span_ns, s.max_offset_ns, s.max_half_rtt_ns),
            (4000, 8000, 7, 50)
        );
        assert_eq!(s.goodput_gbps, 4.0);
        assert_eq!(slowest_per_burst(&[a.clone(), b.clone()]), vec![30, 40]);
        let e = sum_evs(a.evs.iter().chain(&b.evs));
        assert_eq!(
            e.iter().map(|e| (e.ev, e.sent)).collect::<Vec<_>>(),
            vec![(0, 1), (1, 7)]
        );
        assert_eq!(dist([5, 1, 9]), Some((3, 5, 9, 9)));
        assert_eq!(
            dist([534_691_100, 477_764_500, 558_762_100]).map(|d| d.3),
            Some(558_762_100)
        );
        let d = dist([534_691_100, 477_764_500, 558_762_100]).unwrap();
        assert!(d.1.abs_diff(534_691_100) < 534_691, "{d:?}");
    }
}
