//! `mrc-sim experiment flaps` (issue "Rails and planes in the model"): one link of every
//! plane flapping for the whole run. Targets (the issue's): completion within 1.05 x the
//! same run without flaps, and 0 RTO expiries on the flows that do not cross a flapping
//! link.
//!
//! Time is scaled down 1000 x, as `plane-loss` scales it ([`super::plane_loss`]): the
//! issue's link flaps every 100 ms in runs of seconds; the simulator runs a few ms of
//! virtual time, so the link here goes down for [`FlapSpec::period_ns`] (100 us), up for
//! as long, and so on over the whole run, a dozen flaps or more where a run of seconds
//! would see as many at 100 ms.
//!
//! The fabric: every host has a NIC of [`FlapSpec::nic_gbps`] split into P ports of
//! `nic_gbps / P`, one per plane; each plane is the same fabric of [`LEAVES`] leaves of
//! `hosts / 4` hosts, each leaf with one uplink more than it has hosts (one to each
//! spine), so a leaf with one uplink down still carries its hosts' full rate, as one of a
//! large leaf's many uplinks does (the 1.05 x is for that case; a two-uplink leaf
//! would lose half its capacity while the link is down, and the capacity alone would miss
//! it). The flapping link of plane `q` is `pq.leaf0`-`pq.spine0`, in phase in every
//! plane. A flow crosses a flapping link when one of its ends is on leaf 0 (its sprayed
//! EVs take every uplink of leaf 0 and every downlink to it); the others never can. The
//! traffic is `plane-loss`'s ring and all-to-all ([`Pattern`]).

use mrc_fabric_sim::{Fault, LinkSelector, LinkSpec, SimReport, SpineLeafSpec, Topology};

use super::experiments::{ExperimentError, ProgressFn, sim_run};
use super::output::{Panel, ResultTable};
use super::plane_loss::Pattern;

/// Leaves of every plane.
pub const LEAVES: u32 = 4;
/// Link propagation delay, ns (as the other experiments).
const PROP_NS: u64 = 500;
/// The bound on completion with the flaps, x the no-flap completion.
pub const MAX_SLOWDOWN: f64 = 1.05;

/// Shape of a flap experiment.
#[derive(Clone, Copy, Debug)]
pub struct FlapSpec {
    /// Hosts (a multiple of [`LEAVES`]).
    pub hosts: u32,
    /// NIC speed of every host, Gb/s (each of its P ports `nic_gbps / P`).
    pub nic_gbps: u64,
    /// The plane counts run.
    pub planes: &'static [u32],
    /// The traffic patterns run.
    pub patterns: &'static [Pattern],
    /// The flapping link is down this long, then up this long, and so on, ns; the first
    /// flap starts one period into the run.
    pub period_ns: u64,
    /// Bytes each host sends, split over its flows.
    pub bytes_per_host: u64,
    /// EVs of every connection per plane.
    pub evs_per_plane: u32,
}

/// `flaps`: 8 hosts with 400 Gb/s NICs, P = 2, 4 and 8, 16 EVs per plane, ring and
/// all-to-all, 64 MiB per host (the no-flap runs last about 1.4 ms), the link flapping
/// every 100 us.
pub const FLAPS: FlapSpec = FlapSpec {
    hosts: 8,
    nic_gbps: 400,
    planes: &[2, 4, 8],
    patterns: &[Pattern::Ring, Pattern::AllToAll],
    period_ns: 100_000,
    bytes_per_host: 64 << 20,
    evs_per_plane: 16,
};

/// `flaps-quick`: 4 hosts (one per leaf) with 100 Gb/s NICs, P = 2, the ring only, 8 MiB
/// per host (for tests: a debug build runs it in seconds).
pub const FLAPS_QUICK: FlapSpec = FlapSpec {
    hosts: 4,
    nic_gbps: 100,
    planes: &[2],
    patterns: &[Pattern::Ring],
    period_ns: 100_000,
    bytes_per_host: 8 << 20,
    evs_per_plane: 16,
};

/// Hosts per leaf of `spec`'s fabric.
fn hosts_per_leaf(spec: &FlapSpec) -> u32 {
    (spec.hosts / LEAVES).max(1)
}

/// The fabric of `spec` with `planes` planes.
///
/// Errors: [`ExperimentError::Topo`].
pub fn flap_fabric(spec: &FlapSpec, planes: u32) -> Result<Topology, ExperimentError> {
    let lane = LinkSpec::gbps(spec.nic_gbps / u64::from(planes.max(1)), PROP_NS);
    let per_leaf = hosts_per_leaf(spec);
    let one = Topology::spine_leaf(&SpineLeafSpec {
        hosts: spec.hosts,
        leaves: LEAVES,
        spines: per_leaf + 1,
        hosts_per_leaf: per_leaf,
        uplinks_per_leaf: per_leaf + 1,
        host_link: lane,
        fabric_link: lane,
    })?;
    Ok(Topology::with_planes(&one, planes)?)
}

/// The flapping link of every plane of `topo`: `pq.leaf0`-`pq.spine0`.
fn flapping_links(topo: &Topology) -> Result<Vec<u32>, ExperimentError> {
    (0..topo.planes())
        .map(|q| {
            match (
                topo.node_by_name(&format!("p{q}.leaf0")),
                topo.node_by_name(&format!("p{q}.spine0")),
            ) {
                (Some(a), Some(b)) => topo.links_between(a, b).first().copied(),
                _ => None,
            }
            .ok_or(ExperimentError::NoLink("leaf0", "spine0"))
        })
        .collect()
}

/// Completion of the flows in `which`: the last one's, ns (`None` if one did not finish).
fn class_done_ns(r: &SimReport, which: &[usize]) -> Option<u64> {
    which
        .iter()
        .map(|&f| r.flows.get(f).and_then(|s| s.done_ns))
        .try_fold(0u64, |m, d| d.map(|d| m.max(d)))
}

/// RTO expiries of the flows in `which`.
fn class_rtos(r: &SimReport, which: &[usize]) -> u64 {
    which
        .iter()
        .filter_map(|&f| r.flows.get(f))
        .map(|s| s.timeouts)
        .sum()
}

/// The `flaps` experiment over `spec`.
///
/// Errors: [`ExperimentError`].
pub fn flaps(
    spec: &FlapSpec,
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<ResultTable, ExperimentError> {
    let per_leaf = hosts_per_leaf(spec);
    let mut t = ResultTable::new(format!(
        "flaps: {} hosts, {} Gb/s NICs as P planes of {}/P Gb/s, {LEAVES} leaves of {per_leaf} hosts and {} uplinks per plane; leaf0-spine0 of every plane down {} us, up {} us, for the whole run (the issue's 100 ms scaled 1000 x down to the simulator's ms-long runs); {} MiB per host",
        spec.hosts,
        spec.nic_gbps,
        spec.nic_gbps,
        per_leaf + 1,
        spec.period_ns / 1000,
        spec.period_ns / 1000,
        spec.bytes_per_host >> 20
    ));
    for &pattern in spec.patterns {
        for &p in spec.planes {
            flaps_one(&mut t, spec, pattern, p, seed, progress)?;
        }
    }
    t.plot_column = Some("x_no_flaps".into());
    t.panel(
        Panel::new("x_no_flaps", "pattern, planes")
            .title("completion with the flaps, x no flaps")
            .quantity("completion / no flaps")
            .threshold(MAX_SLOWDOWN, "PASS: <="),
    );
    t.panel(
        Panel::new("rtos_not_crossing", "pattern, planes")
            .title("RTO expiries of the flows not crossing a flapping link")
            .quantity("RTOs")
            .threshold(0.0, "PASS: zero"),
    );
    Ok(t)
}

/// The runs of one pattern and plane count, its row and checks added to `t`.
fn flaps_one(
    t: &mut ResultTable,
    spec: &FlapSpec,
    pattern: Pattern,
    planes: u32,
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<(), ExperimentError> {
    let topo = flap_fabric(spec, planes)?;
    let per_leaf = hosts_per_leaf(spec);
    let flows = pattern.flows(spec.hosts, spec.bytes_per_host);
    let label = format!("{} P={planes}", pattern.name());
    let run_cfg = |faults: Vec<Fault>| {
        super::plane_loss::plane_run_cfg(seed, spec.evs_per_plane * planes, faults)
    };
    let base = sim_run(
        &format!("{label} no flaps"),
        topo.clone(),
        run_cfg(Vec::new()),
        &flows,
        progress,
    )?;
    let t0 = base.completion_ns().unwrap_or(0);
    // Flaps over twice the no-flap time: past any completion the check could pass.
    let period = spec.period_ns.max(1);
    let flaps = u32::try_from((2 * t0).div_ceil(2 * period) + 1).unwrap_or(u32::MAX);
    let faults: Vec<Fault> = flapping_links(&topo)?
        .into_iter()
        .flat_map(|l| Fault::flapping(LinkSelector::Link(l), period, period, flaps))
        .collect();
    let r = sim_run(
        &format!("{label} flapping"),
        topo,
        run_cfg(faults),
        &flows,
        progress,
    )?;
    let t1 = r.completion_ns();
    let (crossing, others): (Vec<usize>, Vec<usize>) =
        (0..flows.len()).partition(|&f| flows[f].src < per_leaf || flows[f].dst < per_leaf);
    let ratio = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => a as f64 / b.max(1) as f64,
        _ => f64::INFINITY,
    };
    let x = ratio(t1, Some(t0));
    let x_cross = ratio(
        class_done_ns(&r, &crossing),
        class_done_ns(&base, &crossing),
    );
    let x_others = ratio(class_done_ns(&r, &others), class_done_ns(&base, &others));
    let (rto_cross, rto_others) = (class_rtos(&r, &crossing), class_rtos(&r, &others));
    let done = r.flows.iter().filter(|f| f.done_ns.is_some()).count();
    t.row(
        &label,
        &[
            ("no_flaps_us", t0 as f64 / 1e3),
            ("flaps_us", t1.map_or(f64::INFINITY, |c| c as f64 / 1e3)),
            ("x_no_flaps", x),
            ("x_crossing", x_cross),
            ("x_not_crossing", x_others),
            ("flows_crossing", crossing.len() as f64),
            ("flows_not_crossing", others.len() as f64),
            ("rtos_crossing", rto_cross as f64),
            ("rtos_not_crossing", rto_others as f64),
            (
                "rtos_no_flaps",
                class_rtos(&base, &(0..flows.len()).collect::<Vec<_>>()) as f64,
            ),
            ("flows_done", done as f64),
            (
                "retransmitted",
                r.flows.iter().map(|f| f.retransmitted).sum::<u64>() as f64,
            ),
            ("link_down_drops", r.counters.link_down_drops as f64),
        ],
    );
    t.check(
        format!("{label}: completion within {MAX_SLOWDOWN:.2} x no flaps"),
        format!(
            "{x:.3}x ({} vs {t0} ns); flows crossing a flapping link {x_cross:.3}x, the others {x_others:.3}x",
            t1.map_or("unfinished".into(), |c| c.to_string()),
        ),
        x <= MAX_SLOWDOWN,
    );
    t.check(
        format!("{label}: 0 RTO expiries on flows not crossing a flapping link"),
        format!(
            "{rto_others} on {} flows (crossing ones: {rto_cross} on {} flows)",
            others.len(),
            crossing.len()
        ),
        rto_others == 0,
    );
    Ok(())
}
