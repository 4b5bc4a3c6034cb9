//! The plane experiments of `mrc-sim experiment` (issue "Rails and planes in the model",
//! part 4): `plane-loss`, one of a NIC's P planes (every switch of it) dies mid-transfer
//! and comes back; `port-loss`, one NIC port of one host dies and comes back.
//!
//! Every host has a NIC of [`PlaneLossSpec::nic_gbps`] split into P ports of
//! `nic_gbps / P`, one per plane; each plane is the same two-leaf fabric (hosts / 2 per
//! leaf, as many uplinks, non-blocking). The traffic is the collectives the other
//! experiments run: the ring of `allreduce` (host `ring[i]` to `ring[i + 1]`, neighbours on
//! different leaves), each hop one flow as a pipelined ring keeps its links busy, and
//! all-to-all (every host to every other, the scenario files' pattern). Goodput is the
//! payload the receivers place, sampled every [`SAMPLE_NS`] of virtual time
//! ([`super::sampled`]) and compared with the same run without the failure.
//!
//! Targets (the issue's): after the plane dies the goodput settles at `(P - 1) / P x 0.95`
//! of the no-failure goodput or more, within 3 RTOs (the minimum RTO, 200 us: the
//! transport's RTO is never below it); no byte is lost; once the plane is back the goodput
//! returns to 95% of the no-failure goodput. Beside them the times to 75% and 95% of the
//! settled rate, against the published 3 ms of NVIDIA Spectrum-X's adaptive routing and
//! 1.08 s of software load balancing.

use mrc_fabric_sim::{
    Fault, FaultKind, FlowSpec, LinkSelector, LinkSpec, SimConfig, Simulator, SpineLeafSpec,
    Topology,
};
use mrc_transport::path::PlaneState;

use super::experiments::{ExperimentError, ProgressFn, base_cfg, ring_order};
use super::output::{Panel, ResultTable};
use super::sampled::{Sampled, run_sampled};
use super::scenario::all_to_all;
use super::timeline::Timeline;

/// Goodput is sampled every 5 us of virtual time.
pub const SAMPLE_NS: u64 = 5_000;
/// Samples a windowed goodput spans (25 us).
pub const WINDOW_SAMPLES: usize = 5;
/// Link propagation delay, ns (as the other experiments).
const PROP_NS: u64 = 500;
/// NVIDIA Spectrum-X's published recovery from a link failure, us (adaptive routing in
/// the switches).
pub const SPECTRUM_X_US: f64 = 3_000.0;
/// Software load balancing's published recovery from a link failure, us.
pub const SOFTWARE_LB_US: f64 = 1_080_000.0;

/// A collective's traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// The allreduce ring: each host streams to its ring successor (one flow each).
    Ring,
    /// Every host to every other, the host's bytes split evenly over its flows.
    AllToAll,
}

impl Pattern {
    /// Name in rows and progress labels.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Ring => "ring",
            Pattern::AllToAll => "all-to-all",
        }
    }

    /// The flows of `bytes_per_host` from every one of `hosts` hosts.
    pub fn flows(self, hosts: u32, bytes_per_host: u64) -> Vec<FlowSpec> {
        let pairs: Vec<(u32, u32)> = match self {
            Pattern::Ring => {
                let ring = ring_order(hosts);
                (0..ring.len())
                    .map(|i| (ring[i], ring[(i + 1) % ring.len()]))
                    .collect()
            }
            Pattern::AllToAll => all_to_all(hosts),
        };
        let per_flow = match self {
            Pattern::Ring => bytes_per_host,
            Pattern::AllToAll => bytes_per_host / u64::from(hosts.saturating_sub(1).max(1)),
        };
        pairs
            .into_iter()
            .map(|(src, dst)| FlowSpec {
                src,
                dst,
                bytes: per_flow,
                start_ns: 0,
                evs: None,
            })
            .collect()
    }
}

/// Shape and timeline of a plane experiment.
#[derive(Clone, Copy, Debug)]
pub struct PlaneLossSpec {
    /// Hosts (even: two leaves of `hosts / 2` per plane).
    pub hosts: u32,
    /// NIC speed of every host, Gb/s (each of its P ports `nic_gbps / P`).
    pub nic_gbps: u64,
    /// The plane counts run.
    pub planes: &'static [u32],
    /// The traffic patterns run.
    pub patterns: &'static [Pattern],
    /// When the plane (or port) dies, ns.
    pub fail_ns: u64,
    /// When it comes back, ns.
    pub back_ns: u64,
    /// The window in which the goodput must be back, ns: late enough for the background
    /// probes (their interval doubles while the plane is dead, up to 64 x 100 us) to find
    /// the plane, before the no-failure run ends.
    pub recovered_ns: (u64, u64),
    /// Bytes each host sends, split over its flows.
    pub bytes_per_host: u64,
    /// EVs of every connection per plane (a connection has `evs_per_plane x P`, split
    /// equally across the planes).
    pub evs_per_plane: u32,
}

/// `plane-loss`: 8 hosts with 400 Gb/s NICs, P = 2, 4 and 8 planes (200, 100 and 50 Gb/s
/// ports), 16 EVs per plane, ring and all-to-all; the plane dies at 500 us and comes back
/// at 1.5 ms (its probes, 0.2, 0.6 and 1.4 ms after it went down, find it about 1.9 ms),
/// the goodput must be back over 2.4-3 ms; 160 MiB per host (the no-failure runs last
/// about 3.5 ms).
pub const PLANE_LOSS: PlaneLossSpec = PlaneLossSpec {
    hosts: 8,
    nic_gbps: 400,
    planes: &[2, 4, 8],
    patterns: &[Pattern::Ring, Pattern::AllToAll],
    fail_ns: 500_000,
    back_ns: 1_500_000,
    recovered_ns: (2_400_000, 3_000_000),
    bytes_per_host: 160 << 20,
    evs_per_plane: 16,
};

/// `plane-loss-quick`: the same on 4 hosts with 100 Gb/s NICs, 2 planes, the ring only,
/// over 2.6 ms (for tests: a debug build runs it in seconds).
pub const PLANE_LOSS_QUICK: PlaneLossSpec = PlaneLossSpec {
    hosts: 4,
    nic_gbps: 100,
    planes: &[2],
    patterns: &[Pattern::Ring],
    fail_ns: 300_000,
    back_ns: 1_100_000,
    recovered_ns: (1_900_000, 2_300_000),
    bytes_per_host: 30 << 20,
    evs_per_plane: 16,
};

/// The transport's minimum RTO, ns (200 us): its RTO is never below it, so 3 of them are
/// the longest the targets let a plane's loss take.
pub(crate) fn min_rto_ns() -> u64 {
    base_cfg(0).transport.send.min_rto_ns
}

/// The fabric of `spec` with `planes` planes.
///
/// Errors: [`ExperimentError::Topo`].
pub fn plane_fabric(spec: &PlaneLossSpec, planes: u32) -> Result<Topology, ExperimentError> {
    let lane = LinkSpec::gbps(spec.nic_gbps / u64::from(planes.max(1)), PROP_NS);
    let half = (spec.hosts / 2).max(1);
    let one = Topology::spine_leaf(&SpineLeafSpec {
        hosts: spec.hosts,
        leaves: 2,
        spines: half,
        hosts_per_leaf: half,
        uplinks_per_leaf: half,
        host_link: lane,
        fabric_link: lane,
    })?;
    Ok(Topology::with_planes(&one, planes)?)
}

/// What the experiment reads of every sender at a sample: how many have `plane` down, and
/// the earliest and latest time one went down (its episode's start), ns.
#[derive(Clone, Copy, Debug, Default)]
struct PlaneLook {
    down: u32,
    first_down_ns: Option<u64>,
    last_down_ns: Option<u64>,
}

fn look_plane(sim: &Simulator, flows: usize, plane: usize) -> PlaneLook {
    let mut l = PlaneLook::default();
    for f in 0..flows as u32 {
        let Some((s, _)) = sim.flow_conns(f) else {
            continue;
        };
        let Some(p) = s.paths().planes().get(plane) else {
            continue;
        };
        if p.state != PlaneState::Up {
            l.down += 1;
            if let Some(t) = p.down_since_ns {
                l.first_down_ns = Some(l.first_down_ns.map_or(t, |x: u64| x.min(t)));
                l.last_down_ns = Some(l.last_down_ns.map_or(t, |x: u64| x.max(t)));
            }
        }
    }
    l
}

/// The time from `from_ns` until the windowed goodput `g` is back at `level` after its
/// lowest point within `dip_ns` of `from_ns`, ns: 0 when it never falls below `level`
/// there, `None` when it is not back by `until_ns`.
fn time_to(
    s: &Sampled<impl Sized>,
    g: &[f64],
    level: f64,
    (from_ns, dip_ns, until_ns): (u64, u64, u64),
) -> Option<u64> {
    let last = g.len().checked_sub(1)?;
    let (a, d, b) = (
        s.index_at(from_ns),
        s.index_at(from_ns + dip_ns).min(last),
        s.index_at(until_ns).min(last),
    );
    let low = (a..=d).min_by(|&i, &j| g[i].total_cmp(&g[j]))?;
    if g[low] >= level {
        return Some(0);
    }
    (low..=b)
        .find(|&k| g[k] >= level)
        .map(|k| (k as u64 * s.step_ns).saturating_sub(from_ns))
}

/// One (pattern, P) result.
struct PlaneResult {
    label: String,
    planes: u32,
    /// Windowed goodput of the failure run over the no-failure run's settle-window mean.
    normalised: Vec<f64>,
}

/// The configuration of one run of a plane experiment: the experiments' base for `seed`,
/// with `faults` and `evs` EVs per connection (shared with `port-loss` and `flaps`).
pub(crate) fn plane_run_cfg(seed: u64, evs: u32, faults: Vec<Fault>) -> SimConfig {
    let mut c = SimConfig {
        faults,
        ..base_cfg(seed)
    };
    c.transport.evs = evs;
    c
}

/// The runs of one pattern and plane count, its row and checks added to `t`.
fn plane_loss_one(
    t: &mut ResultTable,
    spec: &PlaneLossSpec,
    pattern: Pattern,
    planes: u32,
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<PlaneResult, ExperimentError> {
    let topo = plane_fabric(spec, planes)?;
    let flows = pattern.flows(spec.hosts, spec.bytes_per_host);
    let all: Vec<usize> = (0..flows.len()).collect();
    let dead = planes - 1;
    let label = format!("{} P={planes}", pattern.name());
    let run_cfg = |faults: Vec<Fault>| plane_run_cfg(seed, spec.evs_per_plane * planes, faults);
    let base = run_sampled(
        &format!("{label} no failure"),
        topo.clone(),
        run_cfg(Vec::new()),
        &flows,
        SAMPLE_NS,
        &mut |_| (),
        progress,
    )?;
    let cfg = run_cfg(vec![
        Fault {
            at_ns: spec.fail_ns,
            links: LinkSelector::Plane(dead),
            kind: FaultKind::SwitchDown,
        },
        Fault {
            at_ns: spec.back_ns,
            links: LinkSelector::Plane(dead),
            kind: FaultKind::SwitchUp,
        },
    ]);
    let rto_ns = min_rto_ns();
    let n = flows.len();
    let fail = run_sampled(
        &format!("{label} plane {dead} down"),
        topo,
        cfg,
        &flows,
        SAMPLE_NS,
        &mut |sim| look_plane(sim, n, dead as usize),
        progress,
    )?;
    let settle_from = spec.fail_ns + 3 * rto_ns;
    let base_settle = base.rate_bps(&all, settle_from, spec.back_ns);
    let settled = fail.rate_bps(&all, settle_from, spec.back_ns);
    let (r0, r1) = spec.recovered_ns;
    let base_rec = base.rate_bps(&all, r0, r1);
    let recovered = fail.rate_bps(&all, r0, r1);
    let g = fail.windowed_bps(&all, WINDOW_SAMPLES);
    let after_fail = (spec.fail_ns, 3 * rto_ns, spec.back_ns);
    let t75 = time_to(&fail, &g, 0.75 * settled, after_fail);
    let t95 = time_to(&fail, &g, 0.95 * settled, after_fail);
    // Back: the first time after the plane's return the goodput reaches 95% of the
    // no-failure run's over the recovery window.
    let t_back = (fail.index_at(spec.back_ns)..fail.index_at(r1))
        .find(|&k| g[k] >= 0.95 * base_rec)
        .map(|k| (k as u64 * SAMPLE_NS).saturating_sub(spec.back_ns));
    // The senders' view of the dead plane just before it comes back.
    let before_back = fail.looks[fail.index_at(spec.back_ns).saturating_sub(1)];
    let detect_us =
        |t: Option<u64>| t.map_or(f64::NAN, |t| t.saturating_sub(spec.fail_ns) as f64 / 1e3);
    let r = &fail.report;
    let bytes: u64 = flows.iter().map(|f| f.bytes).sum();
    let placed: u64 = (0..n)
        .map(|f| fail.delivered[f].last().copied().unwrap_or(0))
        .sum();
    let done = r.flows.iter().filter(|f| f.done_ns.is_some()).count();
    let share = f64::from(planes - 1) / f64::from(planes);
    let target = share * 0.95;
    let us = |t: Option<u64>| t.map_or(f64::INFINITY, |t| t as f64 / 1e3);
    // A time in the checks' text: `35 us`, or `not by 1500 us` (the end of its window).
    let said = |t: Option<u64>, by_ns: u64| {
        t.map_or(format!("not by {} us", by_ns / 1000), |t| {
            format!("{:.0} us", t as f64 / 1e3)
        })
    };
    t.row(
        &label,
        &[
            ("no_failure_gbps", base_settle / 1e9),
            ("settled_gbps", settled / 1e9),
            ("settled_pct", 100.0 * settled / base_settle.max(1.0)),
            ("target_pct", 100.0 * target),
            ("t75_us", us(t75)),
            ("t95_us", us(t95)),
            ("detected_first_us", detect_us(before_back.first_down_ns)),
            ("detected_last_us", detect_us(before_back.last_down_ns)),
            ("senders_plane_down", f64::from(before_back.down)),
            ("recovered_pct", 100.0 * recovered / base_rec.max(1.0)),
            ("t_recovered_us", us(t_back)),
            ("bytes_lost", bytes.saturating_sub(placed) as f64),
            ("flows_done", done as f64),
            (
                "retransmitted",
                r.flows.iter().map(|f| f.retransmitted).sum::<u64>() as f64,
            ),
            (
                "timeouts",
                r.flows.iter().map(|f| f.timeouts).sum::<u64>() as f64,
            ),
            ("switch_down_drops", r.counters.switch_down_drops as f64),
            ("link_down_drops", r.counters.link_down_drops as f64),
        ],
    );
    let three_rto = 3 * rto_ns;
    t.check(
        format!(
            "{label}: goodput settles at >= (P-1)/P x 0.95 = {:.1}% of no failure within 3 RTOs ({} us)",
            100.0 * target,
            three_rto / 1000
        ),
        format!(
            "{:.1}% ({:.1} of {:.1} Gb/s) over {}-{} us; 75% of it {} after the failure, 95% {} (Spectrum-X {:.0} ms, software load balancing {:.2} s)",
            100.0 * settled / base_settle.max(1.0),
            settled / 1e9,
            base_settle / 1e9,
            settle_from / 1000,
            spec.back_ns / 1000,
            said(t75, spec.back_ns),
            said(t95, spec.back_ns),
            SPECTRUM_X_US / 1e3,
            SOFTWARE_LB_US / 1e6,
        ),
        settled >= target * base_settle && t95.is_some_and(|t| t <= three_rto),
    );
    t.check(
        format!("{label}: 0 bytes lost"),
        format!(
            "{} of {} bytes placed, {done} of {} flows done",
            placed,
            bytes,
            flows.len()
        ),
        placed == bytes && done == flows.len(),
    );
    t.check(
        format!("{label}: back to >= 95% of no failure once the plane is back"),
        format!(
            "{:.1}% over {}-{} us; 95% again {} after the plane came back",
            100.0 * recovered / base_rec.max(1.0),
            r0 / 1000,
            r1 / 1000,
            said(t_back, r1 - spec.back_ns)
        ),
        recovered >= 0.95 * base_rec,
    );
    let normalised = g.iter().map(|v| 100.0 * v / base_settle.max(1.0)).collect();
    Ok(PlaneResult {
        label,
        planes,
        normalised,
    })
}

/// The `plane-loss` experiment over `spec`.
///
/// Errors: [`ExperimentError`].
pub fn plane_loss(
    spec: &PlaneLossSpec,
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<ResultTable, ExperimentError> {
    let mut t = ResultTable::new(format!(
        "plane-loss: {} hosts, {} Gb/s NICs as P planes of {}/P Gb/s; one plane's switches die at {} us and come back at {} us; {} MiB per host",
        spec.hosts,
        spec.nic_gbps,
        spec.nic_gbps,
        spec.fail_ns / 1000,
        spec.back_ns / 1000,
        spec.bytes_per_host >> 20
    ));
    for &pattern in spec.patterns {
        let mut results = Vec::new();
        for &p in spec.planes {
            results.push(plane_loss_one(&mut t, spec, pattern, p, seed, progress)?);
        }
        let end = spec.recovered_ns.1 + 500_000;
        let samples = (end / SAMPLE_NS) as usize;
        let mut tl = Timeline::new(
            format!(
                "{}: goodput over time, one plane of P down at {} us, back at {} us",
                pattern.name(),
                spec.fail_ns / 1000,
                spec.back_ns / 1000
            ),
            "goodput, % of no failure (25 us windows)",
        );
        tl.times_us = (0..samples)
            .map(|k| (k as u64 * SAMPLE_NS) as f64 / 1e3)
            .collect();
        for r in &results {
            let mut v = r.normalised.clone();
            v.resize(samples, f64::NAN);
            tl.line(r.label.clone(), v);
            tl.level(
                95.0 * f64::from(r.planes - 1) / f64::from(r.planes),
                format!("P={} target", r.planes),
            );
        }
        tl.event(spec.fail_ns as f64 / 1e3, "plane down");
        tl.event((spec.fail_ns + 3 * min_rto_ns()) as f64 / 1e3, "+3 RTO");
        tl.event(spec.back_ns as f64 / 1e3, "plane back");
        t.timelines.push(tl);
    }
    t.plot_column = Some("settled_pct".into());
    t.panel(
        Panel::new("settled_pct", "pattern, planes")
            .title("goodput with one plane down, % of no failure")
            .quantity("settled goodput")
            .per_row("target_pct", 1.0, "PASS: (P-1)/P x 95% >=", true),
    );
    t.panel(
        Panel::new("recovered_pct", "pattern, planes")
            .title("goodput once the plane is back, % of no failure")
            .quantity("goodput after the return")
            .threshold(95.0, "PASS: >="),
    );
    Ok(t)
}
