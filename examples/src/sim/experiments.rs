//! The built-in experiments of `mrc-sim experiment NAME` (issue 5). Each builds its
//! two-tier fabric from the designer, runs the simulator with real transport endpoints and
//! controllers, compares against the ideal computed from the topology, and checks the
//! issue's requirement.
//!
//! Ideal goodput of a flow limited by its 100 Gb/s NIC: the line rate times the payload share
//! of a full data frame, `100 x 4096 / 4210 = 97.29 Gb/s` (4210 = 4096 payload + 114 bytes of
//! Ethernet, IPv6, UDP, BTH, MRCETH, MSGETH, RETH).

use mrc_congestion::CcKind;
use mrc_fabric_sim::net::Progress;
use mrc_fabric_sim::{
    DesignInput, EcnConfig, Fault, FaultKind, FlowSpec, Layout, LinkSelector, Oversubscription,
    QueueConfig, SimConfig, SimReport, Simulator, SpineLeafSpec, Topology, TransportSpec, design,
};

use mrc_fabric_sim::Forwarding;
use mrc_fabric_sim::buf::SharedPayload;
use mrc_fabric_sim::host::Datagram;

use super::output::{Check, Panel, ResultTable, Row};
use super::scenario::permutation;
use crate::perf::report::process_cpu_s;

/// Names and one-line descriptions of the built-in experiments.
pub const EXPERIMENTS: &[(&str, &str)] = &[
    (
        "spray-vs-ecmp",
        "permutation, 16 hosts / 4 leaves / 4 spines, 8 MiB per flow: spraying over 16 EVs vs single-path ECMP",
    ),
    (
        "loss",
        "1% random loss on every link: selective repeat vs go-back-N vs lossless",
    ),
    (
        "failover",
        "a spine-leaf link black-holed mid-transfer: completion vs no failure, last packet into the hole",
    ),
    (
        "incast",
        "16 senders to one receiver: trimming vs drop-tail",
    ),
    (
        "allreduce",
        "ring allreduce over 8 hosts at 1:1, 2:1 and 4:1 oversubscription",
    ),
    (
        "cc",
        "DCQCN vs Swift vs NSCC on the incast and the permutation: goodput and p99 queue depth",
    ),
    (
        "incast-victim",
        "7:1 and 16:1 incast beside a victim flow: RoCE (DCQCN, go-back-N, PFC) vs mrc (spraying, trimming)",
    ),
    (
        "pfc-spread",
        "congestion spreading: victims 1, 2 and 3 hops upstream of an incast, RoCE + PFC vs mrc",
    ),
    (
        "pfc-deadlock",
        "link failures make shortest paths bounce down-up: a cyclic buffer dependency deadlocks PFC; mrc finishes",
    ),
    (
        "pfc-storm",
        "a stuck receiver PAUSEs its leaf for good: how far the storm spreads and which flows it stalls (RoCE + PFC)",
    ),
    (
        "plane-loss",
        "1 of P planes (P = 2, 4, 8) dies mid-transfer and comes back: ring and all-to-all goodput over time, settled rate, time to 75%/95%",
    ),
    (
        "plane-loss-quick",
        "plane-loss on 4 hosts, 100 Gb/s NICs, P = 2, the ring only, 2.6 ms (for tests)",
    ),
    (
        "port-loss",
        "one NIC port of one host dies mid-transfer and comes back (P = 2, 4, 8, ring): that host's flows lose at most 1/P, nobody else's change",
    ),
    (
        "flaps",
        "one link of every plane flapping every 100 us for the whole run (P = 2, 4, 8; ring, all-to-all): completion vs no flaps, RTOs of the flows not crossing it",
    ),
    (
        "flaps-quick",
        "flaps on 4 hosts, 100 Gb/s NICs, P = 2, the ring only (for tests)",
    ),
    (
        "rail-vs-spine-leaf",
        "ring allreduce (server and rail order) and all-to-all on 16 GPUs, rail vs spine-leaf layout at 1:1 and 2:1",
    ),
    (
        "rail-vs-spine-leaf-quick",
        "rail-vs-spine-leaf on 8 GPUs, 1 MiB (for tests)",
    ),
    (
        "speed",
        "simulator speed: events per second, and a 1024-GPU permutation of 1 MiB per host",
    ),
    (
        "speed-raw",
        "the switching-core half of `speed` alone (raw frames, no transport): quick, for profiling",
    ),
];

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// No experiment of that name.
    #[error("unknown experiment {0:?}; known: {1}")]
    Unknown(String, String),
    /// The simulator refused the setup.
    #[error("simulator: {0}")]
    Sim(#[from] mrc_fabric_sim::SimError),
    /// The designer refused the topology.
    #[error("designer: {0}")]
    Design(#[from] mrc_fabric_sim::DesignError),
    /// The topology could not be built.
    #[error("topology: {0}")]
    Topo(#[from] mrc_fabric_sim::topo::TopoError),
    /// The topology has no link between two nodes an experiment needs.
    #[error("no link between {0} and {1}")]
    NoLink(&'static str, &'static str),
    /// Two runs of one seed differed (a determinism bug): the run's name and what differed.
    #[error("{0}: runs of one seed differ ({1})")]
    NotReproducible(String, String),
}

/// Called with a run label and its progress.
pub type ProgressFn<'a> = &'a mut dyn FnMut(&str, Progress);

const GBPS: f64 = 1e9;
const LINK_BPS: u64 = 100_000_000_000;
const PROP_NS: u64 = 500;
const PAYLOAD: f64 = 4096.0;
const FRAME: f64 = 4210.0;

/// Ideal goodput of one NIC-limited flow on 100 Gb/s, bit/s.
pub fn ideal_goodput_bps() -> f64 {
    LINK_BPS as f64 * PAYLOAD / FRAME
}

/// Runs experiment `name` with `seed`.
///
/// Errors: [`ExperimentError`].
pub fn run(
    name: &str,
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<ResultTable, ExperimentError> {
    match name {
        "spray-vs-ecmp" => spray_vs_ecmp(seed, progress),
        "loss" => loss(seed, progress),
        "failover" => failover(seed, progress),
        "incast" => incast(seed, progress),
        "allreduce" => allreduce(seed, progress),
        "cc" => cc(seed, progress),
        "incast-victim" => super::pfc::incast_victim(seed, progress),
        "pfc-spread" => super::pfc::pfc_spread(seed, progress),
        "pfc-deadlock" => super::pfc::pfc_deadlock(seed, progress),
        "pfc-storm" => super::pfc::pfc_storm(seed, progress),
        "plane-loss" => {
            super::plane_loss::plane_loss(&super::plane_loss::PLANE_LOSS, seed, progress)
        }
        "plane-loss-quick" => {
            super::plane_loss::plane_loss(&super::plane_loss::PLANE_LOSS_QUICK, seed, progress)
        }
        "port-loss" => super::port_loss::port_loss(&super::plane_loss::PLANE_LOSS, seed, progress),
        "flaps" => super::flaps::flaps(&super::flaps::FLAPS, seed, progress),
        "flaps-quick" => super::flaps::flaps(&super::flaps::FLAPS_QUICK, seed, progress),
        "rail-vs-spine-leaf" => {
            super::rails::rail_vs_spine_leaf(&super::rails::RAIL_VS_SPINE_LEAF, seed, progress)
        }
        "rail-vs-spine-leaf-quick" => super::rails::rail_vs_spine_leaf(
            &super::rails::RAIL_VS_SPINE_LEAF_QUICK,
            seed,
            progress,
        ),
        "speed" => speed(seed, progress, true),
        "speed-raw" => speed(seed, progress, false),
        other => Err(ExperimentError::Unknown(
            other.to_owned(),
            EXPERIMENTS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// A 100 Gb/s fabric from the designer: `gpus` hosts, `gps` per server, leaves of
/// `leaf_radix` ports, spines of `spine_radix` ports.
pub fn fabric(
    gpus: u32,
    gps: u32,
    leaf_radix: u32,
    spine_radix: u32,
    over: Oversubscription,
) -> Result<(SpineLeafSpec, Topology), ExperimentError> {
    fabric_in(
        gpus,
        gps,
        (leaf_radix, spine_radix),
        over,
        Layout::SpineLeaf,
    )
}

/// [`fabric`] in `layout`: leaves of `radix.0` ports, spines of `radix.1`; the topology
/// is [`Topology::from_design`]'s (host `h` on its rail's leaf in the rail layout).
pub fn fabric_in(
    gpus: u32,
    gps: u32,
    (leaf_radix, spine_radix): (u32, u32),
    over: Oversubscription,
    layout: Layout,
) -> Result<(SpineLeafSpec, Topology), ExperimentError> {
    let d = design(&DesignInput {
        gpus,
        gpus_per_server: gps,
        nic_gbps: 100,
        leaf_radix,
        leaf_port_gbps: 100,
        spine_radix,
        spine_port_gbps: 100,
        oversubscription: over,
        planes: 1,
        layout,
    })?;
    let spec = SpineLeafSpec::from_design(&d, PROP_NS);
    Ok((spec, Topology::from_design(&d, PROP_NS)?))
}

/// 16 hosts, 4 leaves (4 down, 4 up), 4 spines.
fn fabric16() -> Result<(SpineLeafSpec, Topology), ExperimentError> {
    fabric(16, 4, 8, 4, Oversubscription::NON_BLOCKING)
}

pub(crate) fn sim_run(
    label: &str,
    topo: Topology,
    cfg: SimConfig,
    flows: &[FlowSpec],
    progress: ProgressFn<'_>,
) -> Result<SimReport, ExperimentError> {
    let mut sim = Simulator::new(topo, cfg)?;
    for f in flows {
        sim.add_flow(*f)?;
    }
    Ok(sim.run_with(&mut |p| progress(label, p)))
}

fn flows_of(pairs: &[(u32, u32)], bytes: u64, evs: Option<u32>) -> Vec<FlowSpec> {
    pairs
        .iter()
        .map(|&(src, dst)| FlowSpec {
            src,
            dst,
            bytes,
            start_ns: 0,
            evs,
        })
        .collect()
}

/// Goodput summary of a report: (mean per-flow, min per-flow, aggregate = bytes / last
/// completion), bit/s; unfinished flows count 0.
fn goodputs(r: &SimReport) -> (f64, f64, f64) {
    let mean = r.mean_goodput_bps();
    let min = r
        .flows
        .iter()
        .map(|f| f.goodput_bps)
        .fold(f64::INFINITY, f64::min);
    let bytes: u64 = r.flows.iter().map(|f| f.bytes).sum();
    let agg = r
        .completion_ns()
        .map_or(0.0, |c| bytes as f64 * 8e9 / c.max(1) as f64);
    (mean, if min.is_finite() { min } else { 0.0 }, agg)
}

fn sum_flows(r: &SimReport, f: impl Fn(&mrc_fabric_sim::stats::FlowStats) -> u64) -> u64 {
    r.flows.iter().map(f).sum()
}

/// Largest p99 queue depth over switch ports, bytes.
pub(crate) fn p99_queue(r: &SimReport) -> u64 {
    r.ports
        .iter()
        .filter(|p| !p.node.starts_with("host"))
        .map(|p| p.queue_p99_bytes)
        .max()
        .unwrap_or(0)
}

/// The simulator settings every experiment starts from: `seed` seeds both the random draws
/// and the switches' ECMP hash (`ecmp_seed = seed`), so a sweep over `--seed` also sweeps
/// which EVs (and which single-path flows) collide on an uplink and which land on a failed
/// link, not only the loss and marking draws.
pub(crate) fn base_cfg(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        ecmp_seed: seed,
        ..SimConfig::default()
    }
}

fn spray_vs_ecmp(seed: u64, progress: ProgressFn<'_>) -> Result<ResultTable, ExperimentError> {
    let (spec, topo) = fabric16()?;
    let pairs = permutation(spec.hosts, spec.hosts_per_leaf);
    let ideal = ideal_goodput_bps();
    let mut t = ResultTable::new(format!(
        "spray-vs-ecmp: permutation of {} flows x 8 MiB, {} leaves, {} spines, 100 Gb/s (ideal {:.2} Gb/s per flow)",
        pairs.len(),
        spec.leaves,
        spec.spines,
        ideal / GBPS
    ));
    let mut spray_mean: f64 = 0.0;
    let mut srv6_mean: f64 = 0.0;
    let mut ecmp_mean = 0.0;
    for (label, evs, fwd) in [
        ("spray 16 EVs, ECMP hash", 16, Forwarding::Ecmp),
        ("spray 32 EVs, ECMP hash", 32, Forwarding::Ecmp),
        ("spray 16 EVs, SRv6 spine list", 16, Forwarding::Srv6),
        ("single path: ECMP 1 EV", 1, Forwarding::Ecmp),
    ] {
        let cfg = SimConfig {
            forwarding: fwd,
            ..base_cfg(seed)
        };
        let r = sim_run(
            label,
            topo.clone(),
            cfg,
            &flows_of(&pairs, 8 << 20, Some(evs)),
            progress,
        )?;
        let (mean, min, agg) = goodputs(&r);
        let max_util = r
            .ports
            .iter()
            .filter(|p| p.node.starts_with("leaf") && p.peer.starts_with("spine"))
            .map(|p| p.stats.tx_bytes)
            .max()
            .unwrap_or(0);
        let min_util = r
            .ports
            .iter()
            .filter(|p| p.node.starts_with("leaf") && p.peer.starts_with("spine"))
            .map(|p| p.stats.tx_bytes)
            .min()
            .unwrap_or(0);
        t.row(
            label,
            &[
                ("mean_goodput_gbps", mean / GBPS),
                ("min_goodput_gbps", min / GBPS),
                ("pct_of_ideal", 100.0 * mean / ideal),
                ("aggregate_gbps", agg / GBPS),
                ("completion_us", r.completion_ns().unwrap_or(0) as f64 / 1e3),
                (
                    "uplink_bytes_max_over_min",
                    max_util as f64 / min_util.max(1) as f64,
                ),
                ("drops", r.sum_ports(|p| p.drops) as f64),
                ("ecn_marks", r.sum_ports(|p| p.ecn_marks) as f64),
                ("retransmitted", sum_flows(&r, |f| f.retransmitted) as f64),
                ("p99_queue_bytes", p99_queue(&r) as f64),
            ],
        );
        match (evs, fwd) {
            (16, Forwarding::Ecmp) => spray_mean = mean,
            (16, Forwarding::Srv6) => srv6_mean = mean,
            _ => {}
        }
        if evs == 1 {
            ecmp_mean = mean;
        }
    }
    t.plot_column = Some("mean_goodput_gbps".into());
    t.plot_reference = Some(ideal / GBPS);
    t.panel(
        Panel::new("mean_goodput_gbps", "forwarding")
            .title("mean goodput per flow")
            .quantity("mean goodput per flow")
            .ideal(ideal / GBPS, "ideal (NIC-limited flow)")
            .threshold(
                0.95 * ideal / GBPS,
                "PASS: spray 16 EVs, ECMP hash >= 95% of ideal",
            ),
    );
    t.panel(
        Panel::new("uplink_bytes_max_over_min", "forwarding")
            .title("leaf uplink balance: busiest / idlest uplink bytes")
            .quantity("busiest / idlest uplink")
            .ideal(1.0, "ideal (perfect balance)"),
    );
    t.check(
        "spraying over 16 EVs hashed by ECMP reaches >= 95% of ideal goodput",
        format!(
            "{:.2}% ({:.2} of {:.2} Gb/s); SRv6 spine list beside it: {:.2}%",
            100.0 * spray_mean / ideal,
            spray_mean / GBPS,
            ideal / GBPS,
            100.0 * srv6_mean / ideal
        ),
        spray_mean >= 0.95 * ideal,
    );
    t.check(
        "single-path ECMP suffers hash collisions (below spraying)",
        format!(
            "ECMP {:.2} Gb/s vs spray {:.2} Gb/s",
            ecmp_mean / GBPS,
            spray_mean / GBPS
        ),
        ecmp_mean < spray_mean,
    );
    Ok(t)
}

fn loss(seed: u64, progress: ProgressFn<'_>) -> Result<ResultTable, ExperimentError> {
    let (spec, topo) = fabric16()?;
    let pairs = permutation(spec.hosts, spec.hosts_per_leaf);
    let flows = flows_of(&pairs, 8 << 20, None);
    let lossy = |go_back_n: bool| SimConfig {
        faults: vec![Fault {
            at_ns: 0,
            links: LinkSelector::All,
            kind: FaultKind::Loss { p: 0.01 },
        }],
        transport: TransportSpec {
            go_back_n,
            ..TransportSpec::default()
        },
        ..base_cfg(seed)
    };
    let mut t =
        ResultTable::new("loss: permutation, 16 flows x 8 MiB, 1% random loss on every link");
    let mut means = Vec::new();
    for (label, cfg) in [
        ("lossless, selective", base_cfg(seed)),
        ("1% loss, selective", lossy(false)),
        ("1% loss, go-back-N", lossy(true)),
    ] {
        let r = sim_run(label, topo.clone(), cfg, &flows, progress)?;
        let (mean, min, _) = goodputs(&r);
        means.push(mean);
        t.row(
            label,
            &[
                ("mean_goodput_gbps", mean / GBPS),
                ("min_goodput_gbps", min / GBPS),
                ("pct_of_lossless", 100.0 * mean / means[0].max(1.0)),
                ("completion_us", r.completion_ns().unwrap_or(0) as f64 / 1e3),
                ("frames_lost", r.counters.loss_drops as f64),
                ("retransmitted", sum_flows(&r, |f| f.retransmitted) as f64),
                ("timeouts", sum_flows(&r, |f| f.timeouts) as f64),
                (
                    "flows_done",
                    r.flows.iter().filter(|f| f.done_ns.is_some()).count() as f64,
                ),
            ],
        );
    }
    t.plot_column = Some("mean_goodput_gbps".into());
    t.panel(
        Panel::new("mean_goodput_gbps", "retransmission, loss")
            .title("mean goodput per flow")
            .quantity("mean goodput per flow")
            .ideal(ideal_goodput_bps() / GBPS, "ideal (NIC-limited flow)")
            .threshold(
                0.9 * means[0] / GBPS,
                "PASS: 1% loss, selective >= 90% of lossless",
            ),
    );
    t.panel(
        Panel::new("completion_us", "retransmission, loss")
            .title("completion of the permutation")
            .quantity("completion time"),
    );
    t.check(
        "selective retransmit keeps >= 90% of lossless goodput",
        format!("{:.2}%", 100.0 * means[1] / means[0].max(1.0)),
        means[1] >= 0.9 * means[0],
    );
    Ok(t)
}

/// The failover experiment runs on [`fabric32`] (32 hosts, 4 leaves of 8 down / 8 up, 2
/// links per leaf-spine pair) and black-holes one of the two leaf0-spine1 links. Losing one
/// of a leaf's `U` uplinks leaves `(U - 1) / U` of its capacity both ways, and in the
/// permutation every flow of the leaf crosses it, so if the no-failure run keeps the
/// uplinks busy, the half of the bytes left after a failure at half the no-failure time
/// `T0` needs `U / (U - 1)` times as long: completion about `(0.5 + 0.5 U / (U - 1)) T0`
/// (printed as the capacity bound; a run whose no-failure goodput leaves the uplinks some
/// slack can finish a little sooner). With the 16-host fabric (`U` = 4) that is 1.167 `T0`,
/// so the 1.10 measures the topology rather than the transport; with `U` = 8 it is
/// 1.071 `T0`, and 1.10 tests how fast the transport detects the hole, retransmits what
/// went into it and moves its traffic off it.
fn failover(seed: u64, progress: ProgressFn<'_>) -> Result<ResultTable, ExperimentError> {
    let (spec, topo) = fabric32()?;
    let pairs = permutation(spec.hosts, spec.hosts_per_leaf);
    let flows = flows_of(&pairs, 8 << 20, None);
    let dead_link = match (topo.node_by_name("leaf0"), topo.node_by_name("spine1")) {
        (Some(a), Some(b)) => topo.links_between(a, b).first().copied(),
        _ => None,
    }
    .ok_or(ExperimentError::NoLink("leaf0", "spine1"))?;
    let base = sim_run("no failure", topo.clone(), base_cfg(seed), &flows, progress)?;
    let t0 = base.completion_ns().unwrap_or(0);
    let fail_at = t0 / 2;
    let uplinks = f64::from(spec.uplinks_per_leaf.max(2));
    let bound = 0.5 + 0.5 * uplinks / (uplinks - 1.0);
    let cfg = SimConfig {
        faults: vec![Fault {
            at_ns: fail_at,
            links: LinkSelector::Link(dead_link),
            kind: FaultKind::BlackHole,
        }],
        ..base_cfg(seed)
    };
    let rto_ns = cfg.transport.send.min_rto_ns;
    let r = sim_run("black hole", topo, cfg, &flows, progress)?;
    let t1 = r.completion_ns();
    let mut t = ResultTable::new(format!(
        "failover: permutation {} x 8 MiB, {} leaves of {} uplinks; one leaf0-spine1 link (of 2) black-holed at {:.1} us (half the no-failure time); capacity bound {:.3} x",
        pairs.len(),
        spec.leaves,
        spec.uplinks_per_leaf,
        fail_at as f64 / 1e3,
        bound
    ));
    for (label, rep) in [("no failure", &base), ("black hole", &r)] {
        let (mean, _, _) = goodputs(rep);
        t.row(
            label,
            &[
                (
                    "completion_us",
                    rep.completion_ns().unwrap_or(0) as f64 / 1e3,
                ),
                (
                    "pct_slower_than_no_failure",
                    100.0
                        * (rep.completion_ns().map_or(f64::INFINITY, |c| c as f64)
                            / t0.max(1) as f64
                            - 1.0),
                ),
                ("mean_goodput_gbps", mean / GBPS),
                ("black_holed_frames", rep.counters.black_hole_drops as f64),
                ("timeouts", sum_flows(rep, |f| f.timeouts) as f64),
                ("rack_losses", sum_flows(rep, |f| f.rack_losses) as f64),
                ("retransmitted", sum_flows(rep, |f| f.retransmitted) as f64),
            ],
        );
    }
    t.plot_column = Some("completion_us".into());
    t.panel(
        Panel::new("pct_slower_than_no_failure", "run")
            .title(format!(
                "completion: % slower than without the failure (T0 = {:.1} us)",
                t0 as f64 / 1e3
            ))
            .quantity("slower than T0")
            .mark(
                100.0 * (bound - 1.0),
                format!("capacity bound {bound:.3} x T0, saturated uplinks"),
                "bound",
            )
            .threshold(10.0, "PASS: black hole <= 1.10 x T0, i.e. <="),
    );
    t.panel(
        Panel::new("black_holed_frames", "run")
            .title("frames lost into the black hole")
            .quantity("frames black-holed"),
    );
    let ratio = t1.map_or(f64::INFINITY, |c| c as f64 / t0.max(1) as f64);
    t.check(
        "completion <= 1.10 x the no-failure time",
        format!(
            "{:.3}x ({} vs {} ns; capacity bound with saturated uplinks {:.3}x)",
            ratio,
            t1.map_or("unfinished".into(), |c| c.to_string()),
            t0,
            bound
        ),
        ratio <= 1.10,
    );
    let last = r.counters.last_black_hole_data_ns;
    let after = last.map_or(0, |l| l.saturating_sub(fail_at));
    t.check(
        "no data packet sent into the dead path later than one RTO (min RTO) after the failure",
        format!(
            "last data frame into the hole {:.1} us after the failure, RTO {:.1} us",
            after as f64 / 1e3,
            rto_ns as f64 / 1e3
        ),
        after <= rto_ns,
    );
    Ok(t)
}

/// 32 hosts, 4 leaves of 8 down / 8 up, 4 spines (2 links per leaf-spine pair).
pub(crate) fn fabric32() -> Result<(SpineLeafSpec, Topology), ExperimentError> {
    fabric(32, 8, 16, 8, Oversubscription::NON_BLOCKING)
}

fn incast_flows(spec: &SpineLeafSpec, senders: u32, bytes: u64) -> Vec<FlowSpec> {
    // Receiver host 0; senders from the other leaves first, so every flow crosses spines.
    let mut order: Vec<u32> = (spec.hosts_per_leaf..spec.hosts).collect();
    order.extend(1..spec.hosts_per_leaf);
    flows_of(
        &order
            .into_iter()
            .take(senders as usize)
            .map(|s| (s, 0))
            .collect::<Vec<_>>(),
        bytes,
        None,
    )
}

pub(crate) fn trim_queue() -> QueueConfig {
    QueueConfig {
        trim_threshold_bytes: Some(64 << 10),
        ..QueueConfig::default()
    }
}

fn incast(seed: u64, progress: ProgressFn<'_>) -> Result<ResultTable, ExperimentError> {
    let (spec, topo) = fabric32()?;
    let bytes = 1u64 << 20;
    let flows = incast_flows(&spec, 16, bytes);
    let total = bytes * flows.len() as u64;
    let ideal_ns = total as f64 * 8e9 / LINK_BPS as f64;
    let mut t = ResultTable::new(format!(
        "incast: 16 senders x 1 MiB -> host0, 32 hosts / 4 leaves / 4 spines; ideal {:.1} us (bytes / link rate)",
        ideal_ns / 1e3
    ));
    let mut res = Vec::new();
    for (label, queue) in [
        ("trimming (64 KiB)", trim_queue()),
        ("drop-tail (1 MiB)", QueueConfig::default()),
    ] {
        let cfg = SimConfig {
            queue,
            ..base_cfg(seed)
        };
        let r = sim_run(label, topo.clone(), cfg, &flows, progress)?;
        let c = r.completion_ns();
        let rtos = sum_flows(&r, |f| f.timeouts);
        res.push((c, rtos));
        t.row(
            label,
            &[
                ("completion_us", c.unwrap_or(0) as f64 / 1e3),
                ("x_ideal", c.map_or(f64::INFINITY, |c| c as f64 / ideal_ns)),
                ("rtos", rtos as f64),
                ("trims", r.sum_ports(|p| p.trims) as f64),
                ("drops", r.sum_ports(|p| p.drops) as f64),
                ("retransmitted", sum_flows(&r, |f| f.retransmitted) as f64),
                ("p99_queue_bytes", p99_queue(&r) as f64),
            ],
        );
    }
    t.plot_column = Some("completion_us".into());
    t.plot_reference = Some(ideal_ns / 1e3);
    t.panel(
        Panel::new("completion_us", "switch queue")
            .title("incast completion")
            .quantity("completion time")
            .ideal(ideal_ns / 1e3, "ideal (bytes / receiver link rate)")
            .threshold(1.10 * ideal_ns / 1e3, "PASS: trimming <= 1.10 x ideal"),
    );
    t.panel(
        Panel::new("rtos", "switch queue")
            .title("retransmission timeouts")
            .quantity("RTOs")
            .threshold(0.0, "PASS: trimming, zero RTOs"),
    );
    let (c, rtos) = res[0];
    t.check("trimming: zero RTOs", format!("{rtos} RTOs"), rtos == 0);
    let x = c.map_or(f64::INFINITY, |c| c as f64 / ideal_ns);
    t.check(
        "trimming: completion within 1.10 x ideal",
        format!("{x:.3} x ideal"),
        x <= 1.10,
    );
    Ok(t)
}

fn allreduce(seed: u64, progress: ProgressFn<'_>) -> Result<ResultTable, ExperimentError> {
    let n = 8u32;
    let size: u64 = 8 << 20;
    let chunk = size / u64::from(n);
    let steps = 2 * (n - 1);
    let theory_ns = 2.0 * f64::from(n - 1) / f64::from(n) * size as f64 * 8e9 / LINK_BPS as f64;
    let mut t = ResultTable::new(format!(
        "allreduce: ring over {n} hosts (2 leaves, neighbours on different leaves), {} MiB; theory 2(N-1)/N x size / 100 Gb/s = {:.1} us",
        size >> 20,
        theory_ns / 1e3
    ));
    let mut completions = Vec::new();
    for over in ["1:1", "2:1", "4:1"] {
        let o: Oversubscription = over.parse()?;
        let (spec, topo) = fabric(n, 4, 8, 2, o)?;
        let mut sim = Simulator::new(topo, base_cfg(seed))?;
        let label = format!("allreduce {over}");
        let now = ring_allreduce(&mut sim, &ring_order(n), chunk, &label, progress)?;
        let r = sim.report();
        let crossing: u64 = r
            .ports
            .iter()
            .filter(|p| p.node.starts_with("leaf") && p.peer.starts_with("spine"))
            .map(|p| p.stats.tx_packets)
            .sum();
        let unfinished = r.flows.iter().filter(|f| f.done_ns.is_none()).count();
        let up_bw = f64::from(spec.uplinks_per_leaf) / f64::from(spec.hosts_per_leaf).max(1.0);
        let theory_over = theory_ns / up_bw.min(1.0);
        let factor = allreduce_factor(over);
        completions.push((over, now as f64 / theory_over, factor));
        t.row(
            format!("{over} ({} uplinks/leaf)", spec.uplinks_per_leaf),
            &[
                ("completion_us", now as f64 / 1e3),
                ("theory_1to1_us", theory_ns / 1e3),
                ("theory_at_oversub_us", theory_over / 1e3),
                ("x_theory_at_oversub", now as f64 / theory_over),
                ("pass_bound_us", factor * theory_over / 1e3),
                (
                    "spine_packets_per_round",
                    crossing as f64 / f64::from(steps),
                ),
                ("unfinished_flows", unfinished as f64),
            ],
        );
    }
    t.plot_column = Some("completion_us".into());
    t.plot_reference = Some(theory_ns / 1e3);
    t.panel(
        Panel::new("completion_us", "oversubscription (uplinks per leaf)")
            .title("ring allreduce completion")
            .quantity("completion time")
            .per_row(
                "theory_at_oversub_us",
                1.0,
                "theory at the oversubscription: 2(N-1)/N x size / uplink share of 100 Gb/s",
                false,
            )
            .per_row(
                "pass_bound_us",
                1.0,
                format!(
                    "PASS: <= {:.2} / {:.2} / {:.2} x theory at 1:1 / 2:1 / 4:1",
                    allreduce_factor("1:1"),
                    allreduce_factor("2:1"),
                    allreduce_factor("4:1")
                ),
                true,
            ),
    );
    for (over, x, factor) in completions {
        t.check(
            format!("allreduce {over}: completion within {factor:.2} x theory at {over}"),
            format!("{x:.3} x theory"),
            x <= factor,
        );
    }
    Ok(t)
}

/// Runs a ring allreduce on `sim`: `2 (N - 1)` steps over the `N` hosts of `ring`, each
/// step one flow of `chunk` bytes from every `ring[i]` to `ring[i + 1]`, started when the
/// step before has finished (each step waits for its slowest flow). Returns the time the
/// last step finished, ns.
///
/// Errors: the simulator's ([`ExperimentError::Sim`]).
pub(crate) fn ring_allreduce(
    sim: &mut Simulator,
    ring: &[u32],
    chunk: u64,
    label: &str,
    progress: ProgressFn<'_>,
) -> Result<u64, ExperimentError> {
    let n = ring.len();
    let mut now = sim.now_ns();
    for _ in 0..2 * n.saturating_sub(1) {
        for i in 0..n {
            sim.add_flow(FlowSpec {
                src: ring[i],
                dst: ring[(i + 1) % n],
                bytes: chunk,
                start_ns: now,
                evs: None,
            })?;
        }
        sim.run_with(&mut |p| progress(label, p));
        now = sim.now_ns();
    }
    Ok(now)
}

/// The ring of an allreduce over hosts `0..n` (n even) on two leaves of `n / 2`: the order
/// alternates leaves (0, 4, 1, 5, 2, 6, 3, 7 for 8), so every ring neighbour is on the
/// other leaf and every hop crosses the spines.
pub(crate) fn ring_order(n: u32) -> Vec<u32> {
    let half = n / 2;
    (0..half).flat_map(|i| [i, i + half]).collect()
}

/// The allreduce check: completion within this factor of the theory at oversubscription
/// `over` (2(N-1)/N x size over the uplink share of 100 Gb/s). Measured over seeds 1-8:
/// 1:1 1.19-1.23 x, 2:1 1.33-1.47 x (two flows can share an uplink by ECMP hash), 4:1
/// 1.28 x every seed (one uplink, no choice); each step waits for its slowest flow. The
/// factors leave about 10% over the worst seed.
pub fn allreduce_factor(over: &str) -> f64 {
    match over {
        "1:1" => 1.35,
        "2:1" => 1.60,
        _ => 1.40,
    }
}

/// The `cc` experiment's bounds, per controller.
#[derive(Clone, Copy, Debug)]
pub struct CcBounds {
    /// Incast (16 x 1 MiB into one 100 Gb/s host): aggregate goodput at least, Gb/s.
    pub incast_min_gbps: f64,
    /// Permutation (16 flows): aggregate goodput at least this share of 16 x ideal.
    pub perm_min_share: f64,
    /// Permutation: p99 queue depth of the fullest switch port at most, bytes.
    pub perm_max_p99_bytes: f64,
}

/// The bounds `mrc-sim experiment cc` checks. Measured over seeds 1-8: incast Swift
/// 95.6-96.9 Gb/s, NSCC 86.5-89.4, DCQCN 84.0-88.6 (4,770-5,010 drops, 0-14 RTOs per
/// seed); permutation 1,335-1,507 Gb/s of the ideal 1,557 (86-97%), p99 queue
/// 66-206 KiB (ECN marking starts at 100 KiB). Bounds: incast >= 80 Gb/s (82% of the
/// receiver's 97.3 Gb/s), permutation >= 75% of ideal, p99 queue <= 256 KiB.
///
/// DCQCN used to MISS the incast (35-63 Gb/s, issue 21). The causes, measured on this
/// experiment and fixed where they were: the paper preset's byte counter (10 MB) never
/// fires in a 1 MiB flow, so a flow cut during the incast climbed back by 40 Mb/s per
/// 55 us while the link idled (`CcKind::Dcqcn` now runs the NVIDIA ConnectX firmware
/// preset: 32 KiB byte counter, F = 1); the transport's pacing release time was fixed at
/// the rate of the previous send, so a rate increase came one old-rate gap late (now
/// recomputed from the rate in force; with the paper preset alone this took seeds 1-3
/// from 39.2 / 63.0 / 35.5 to 54.6 / 62.3 / 44.7 Gb/s); and a rate-only sender without PFC keeps
/// line-rate traffic in flight while the enqueue-marked signal comes one queueing delay
/// late (now a 4 x BDP window, HPCC's "DCQCN+win"). See `DcqcnConfig::for_link` for the
/// measurements of each step.
pub const CC_BOUNDS: CcBounds = CcBounds {
    incast_min_gbps: 80.0,
    perm_min_share: 0.75,
    perm_max_p99_bytes: 256.0 * 1024.0,
};

/// The checks of `cc` on its rows (labels `incast / KIND` and `permutation / KIND`).
pub fn cc_checks(rows: &[Row], b: &CcBounds) -> Vec<Check> {
    let get = |label: &str, col: &str| {
        rows.iter()
            .find(|r| r.label == label)
            .and_then(|r| r.values.iter().find(|(k, _)| k == col))
            .map_or(0.0, |(_, v)| *v)
    };
    let perm_ideal = 16.0 * ideal_goodput_bps() / GBPS;
    let mut out = Vec::new();
    for kind in [CcKind::Dcqcn, CcKind::Swift, CcKind::Nscc] {
        let g = get(&format!("incast / {kind}"), "aggregate_goodput_gbps");
        out.push(Check {
            requirement: format!(
                "{kind}: incast aggregate goodput >= {:.0} Gb/s",
                b.incast_min_gbps
            ),
            measured: format!("{g:.1} Gb/s"),
            pass: g >= b.incast_min_gbps,
        });
        let g = get(&format!("permutation / {kind}"), "aggregate_goodput_gbps");
        out.push(Check {
            requirement: format!(
                "{kind}: permutation aggregate goodput >= {:.0}% of ideal ({:.0} Gb/s)",
                100.0 * b.perm_min_share,
                b.perm_min_share * perm_ideal
            ),
            measured: format!("{g:.1} Gb/s ({:.1}%)", 100.0 * g / perm_ideal),
            pass: g >= b.perm_min_share * perm_ideal,
        });
        let q = get(&format!("permutation / {kind}"), "p99_queue_bytes");
        out.push(Check {
            requirement: format!(
                "{kind}: permutation p99 queue <= {:.0} KiB",
                b.perm_max_p99_bytes / 1024.0
            ),
            measured: format!("{:.1} KiB", q / 1024.0),
            pass: q <= b.perm_max_p99_bytes,
        });
    }
    out
}

fn cc(seed: u64, progress: ProgressFn<'_>) -> Result<ResultTable, ExperimentError> {
    let mut t = ResultTable::new(
        "cc: DCQCN vs Swift vs NSCC; incast 16 x 1 MiB (32 hosts) and permutation 16 x 8 MiB; ECN RED 100-400 KiB, drop-tail 1 MiB",
    );
    let (s32, topo32) = fabric32()?;
    let (s16, topo16) = fabric16()?;
    let incast_flows = incast_flows(&s32, 16, 1 << 20);
    let perm = flows_of(&permutation(s16.hosts, s16.hosts_per_leaf), 8 << 20, None);
    for kind in [CcKind::Dcqcn, CcKind::Swift, CcKind::Nscc] {
        for (workload, topo, flows) in [
            ("incast", &topo32, &incast_flows),
            ("permutation", &topo16, &perm),
        ] {
            let cfg = SimConfig {
                queue: QueueConfig {
                    ecn: EcnConfig::Red {
                        kmin_bytes: 100 << 10,
                        kmax_bytes: 400 << 10,
                        pmax: 0.2,
                    },
                    ..QueueConfig::default()
                },
                transport: TransportSpec {
                    cc: kind,
                    ..TransportSpec::default()
                },
                ..base_cfg(seed)
            };
            let label = format!("{workload} / {kind}");
            let r = sim_run(&label, topo.clone(), cfg, flows, progress)?;
            let (mean, _, agg) = goodputs(&r);
            t.row(
                label,
                &[
                    ("aggregate_goodput_gbps", agg / GBPS),
                    ("mean_flow_goodput_gbps", mean / GBPS),
                    ("p99_queue_bytes", p99_queue(&r) as f64),
                    ("drops", r.sum_ports(|p| p.drops) as f64),
                    ("ecn_marks", r.sum_ports(|p| p.ecn_marks) as f64),
                    ("timeouts", sum_flows(&r, |f| f.timeouts) as f64),
                ],
            );
        }
    }
    t.plot_column = Some("aggregate_goodput_gbps".into());
    let b = CC_BOUNDS;
    let perm_ideal = 16.0 * ideal_goodput_bps() / GBPS;
    t.panel(
        Panel::new("aggregate_goodput_gbps", "controller")
            .rows("incast")
            .title("incast 16 x 1 MiB -> host0: aggregate goodput")
            .quantity("aggregate goodput")
            .ideal(ideal_goodput_bps() / GBPS, "ideal (receiver link)")
            .threshold(b.incast_min_gbps, "PASS >="),
    );
    t.panel(
        Panel::new("aggregate_goodput_gbps", "controller")
            .rows("permutation")
            .title("permutation 16 x 8 MiB: aggregate goodput")
            .quantity("aggregate goodput")
            .ideal(perm_ideal, "ideal (16 NIC-limited flows)")
            .threshold(b.perm_min_share * perm_ideal, "PASS >="),
    );
    t.panel(
        Panel::new("p99_queue_bytes", "controller")
            .rows("incast")
            .title("incast: p99 queue of the fullest switch port (drop-tail 1 MiB)")
            .quantity("p99 queue depth")
            .mark(100.0 * 1024.0, "ECN marking starts (kmin)", "kmin")
            .mark(1024.0 * 1024.0, "drop-tail limit", "buffer"),
    );
    t.panel(
        Panel::new("p99_queue_bytes", "controller")
            .rows("permutation")
            .title("permutation: p99 queue of the fullest switch port")
            .quantity("p99 queue depth")
            .mark(100.0 * 1024.0, "ECN marking starts (kmin)", "kmin")
            .threshold(b.perm_max_p99_bytes, "PASS <="),
    );
    t.checks.extend(cc_checks(&t.rows, &b));
    Ok(t)
}

/// The `speed` experiment; without `transport`, only its raw-frame rows and check
/// (`speed-raw`).
fn speed(
    seed: u64,
    progress: ProgressFn<'_>,
    transport: bool,
) -> Result<ResultTable, ExperimentError> {
    let d = design(&DesignInput::reference(1024))?;
    let spec = SpineLeafSpec::from_design(&d, PROP_NS);
    let pairs = permutation(spec.hosts, spec.hosts_per_leaf);
    let mut t = ResultTable::new(format!(
        "speed: 1024-GPU designer fabric ({} leaves, {} spines, {} Gb/s links), permutation of 1 MiB per host",
        spec.leaves, spec.spines, d.plane.lane_gbps
    ));
    if transport {
        speed_transport(&mut t, &spec, &pairs, seed, progress)?;
    }
    // The switching core alone: 4210-byte frames without transport endpoints, 32 per host
    // per round on the same permutation, 16 rounds. Each frame is built by its host's NIC
    // framing (`send_shared`: Ethernet / IPv6 / UDP headers with the UDP checksum, in front
    // of one shared 4148-byte payload, as a NIC posts one registered buffer again and
    // again), then forwarded over 4 links, and parsed by the receiving host (which owns no
    // endpoint for it). Each row is run `RAW_REPEATS` times and shows the run of median
    // wall time. `hops_per_s` times framing and events, `hops_per_cpu_s_median` (checked)
    // the same over the median CPU time of the runs; `hops_per_s_min` and
    // `_max` are the slowest and fastest runs, `_first` the first (the only one whose
    // memory is touched for the first time); `framing_s` is the framing's share of
    // `wall_s`, and `hops_per_s_events_only` the hops over the event loop's time alone
    // (frames built and queued at their NICs before it runs), for information, not checked.
    let (raw_cpu, hops) = raw_switching(
        &mut t,
        "raw frames (switching core)",
        RawRun {
            spec: &spec,
            pairs: &pairs,
            seed,
            rounds: 16,
            per_host: 32,
        },
        progress,
    )?;
    // The same 524,288 frames over the same permutation with 4 per host per round (128
    // rounds): 4,096 frames (17 MB) in flight instead of 32,768 (138 MB), closer to a
    // fabric's bandwidth-delay product; shown beside the row above, not checked.
    raw_switching(
        &mut t,
        "raw frames, 4 per host per round",
        RawRun {
            spec: &spec,
            pairs: &pairs,
            seed,
            rounds: 128,
            per_host: 4,
        },
        progress,
    )?;
    t.plot_column = Some("events_per_s".into());
    t.panel(
        Panel::new("hops_per_s", "raw-frame run")
            .rows("raw frames")
            .title("switching core: packet hops per second of wall time (one core)")
            .quantity("packet hops")
            .threshold(5e6, "PASS: switching core (raw frames) >="),
    );
    if transport {
        t.panel(
            Panel::new("hops_per_s", "run")
                .rows("1024-GPU")
                .title("with transport endpoints (not checked)")
                .quantity("packet hops"),
        );
    }
    // A packet-hop event is one frame crossing one link (queued, serialised, propagated,
    // received): `packet_hops` counts them; `events` counts the simulator's queue events,
    // two per hop here (TxDone and Arrive).
    // Judged on CPU time (the median of the runs), not wall time: on a busy machine the
    // wall clock measures the neighbours (1.27 M hops/s of wall time at load 6 where the
    // same run's CPU time said 5.57 M).
    let hps = hops as f64 / raw_cpu.max(1e-9);
    t.check(
        ">= 5 million packet-hop events per CPU second on one core (switching core, raw frames)",
        format!("{:.2} M packet hops per CPU s", hps / 1e6),
        hps >= 5e6,
    );
    Ok(t)
}

/// The transport half of [`speed`]: the 1024-GPU permutation of 1 MiB per host with real
/// endpoints, its row added to `t`.
fn speed_transport(
    t: &mut ResultTable,
    spec: &SpineLeafSpec,
    pairs: &[(u32, u32)],
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<(), ExperimentError> {
    let flows = flows_of(pairs, 1 << 20, None);
    // Wall time, and the process's CPU time (user + system), which a loaded machine does
    // not inflate.
    let cpu0 = process_cpu_s();
    let start = std::time::Instant::now();
    let r = sim_run(
        "1024-GPU permutation",
        Topology::spine_leaf(spec)?,
        base_cfg(seed),
        &flows,
        progress,
    )?;
    let wall = start.elapsed().as_secs_f64();
    let cpu = process_cpu_s() - cpu0;
    t.row(
        "1024-GPU permutation",
        &[
            ("wall_s", wall),
            ("cpu_s", cpu),
            ("events", r.counters.events as f64),
            ("packet_hops", r.counters.hops as f64),
            ("events_per_s", r.counters.events as f64 / wall.max(1e-9)),
            ("hops_per_s", r.counters.hops as f64 / wall.max(1e-9)),
            ("hops_per_cpu_s", r.counters.hops as f64 / cpu.max(1e-9)),
            ("virtual_us", r.end_ns as f64 / 1e3),
            (
                "flows_done",
                r.flows.iter().filter(|f| f.done_ns.is_some()).count() as f64,
            ),
        ],
    );
    Ok(())
}

/// One run of the switching core in [`speed`]: `rounds` rounds of `per_host` frames from
/// every host of `pairs` (EVs `0..per_host`), each round run until the fabric is idle.
struct RawRun<'a> {
    spec: &'a SpineLeafSpec,
    pairs: &'a [(u32, u32)],
    seed: u64,
    rounds: u32,
    per_host: u32,
}

/// Times of one [`RawRun`], s, and its counters.
#[derive(Clone, Copy, Debug)]
struct RawTiming {
    /// Framing and events, wall clock.
    wall_s: f64,
    /// The process's CPU time over the same span.
    cpu_s: f64,
    /// The event loop's share of `wall_s`.
    events_wall_s: f64,
    events: u64,
    hops: u64,
    end_ns: u64,
}

/// Times of the raw-frame runs [`raw_switching`] repeats; the rows show the median run.
const RAW_REPEATS: usize = 5;

/// Runs `r` once on a new simulator: framing and events timed, the build before not.
fn raw_once(
    name: &str,
    r: &RawRun<'_>,
    progress: ProgressFn<'_>,
) -> Result<RawTiming, ExperimentError> {
    let topo = Topology::spine_leaf(r.spec)?;
    let mut sim = Simulator::new(topo, base_cfg(r.seed))?;
    // One registered buffer posted again and again (as `ib_write_bw` does): every frame
    // shares its bytes, and its checksum partial sum is computed once.
    let payload = SharedPayload::new(vec![0u8; 4096 + 52].into());
    let cpu0 = process_cpu_s();
    let start = std::time::Instant::now();
    // Of the wall time, the part spent in the event loop (frames already built and queued
    // at their NICs): shown beside the full figure, which the check uses.
    let mut events_wall_s = 0.0;
    for _ in 0..r.rounds {
        for &(src, dst) in r.pairs {
            for ev in 0..r.per_host {
                let d = Datagram {
                    src,
                    dst,
                    ev,
                    ecn: 2,
                    port: 0,
                };
                sim.send_shared(d, &payload)?;
            }
        }
        let events_start = std::time::Instant::now();
        sim.run_events(&mut |p| progress(name, p));
        events_wall_s += events_start.elapsed().as_secs_f64();
    }
    Ok(RawTiming {
        wall_s: start.elapsed().as_secs_f64(),
        cpu_s: process_cpu_s() - cpu0,
        events_wall_s,
        events: sim.counters().events,
        hops: sim.counters().hops,
        end_ns: sim.now_ns(),
    })
}

/// Runs `r` [`RAW_REPEATS`] times (the same seed: the same events every time) and adds
/// the row `name` to `t` from the run of median wall time, with the fastest and slowest
/// rates beside it (on a shared machine one run can be a third slower than the next) and
/// the first run's (which also pays for first touching its memory).
/// Returns the median CPU time of the runs, s (the process's user + system time, which
/// other work on the machine does not inflate the way it inflates wall time), and the
/// packet hops of one run.
fn raw_switching(
    t: &mut ResultTable,
    name: &str,
    r: RawRun<'_>,
    progress: ProgressFn<'_>,
) -> Result<(f64, u64), ExperimentError> {
    let mut runs = Vec::with_capacity(RAW_REPEATS);
    for _ in 0..RAW_REPEATS {
        runs.push(raw_once(name, &r, progress)?);
    }
    let first = (runs[0].events, runs[0].hops, runs[0].end_ns);
    if let Some(r) = runs.iter().find(|r| (r.events, r.hops, r.end_ns) != first) {
        return Err(ExperimentError::NotReproducible(
            name.to_string(),
            format!(
                "events, hops, end ns {:?} then {:?}",
                first,
                (r.events, r.hops, r.end_ns)
            ),
        ));
    }
    // The first run also pays for the first touch of its memory (the kernel zeroing the
    // pages of the frame slab and queues); later runs reuse the freed heap.
    let first_run = runs[0];
    runs.sort_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
    let (fastest, slowest) = (runs[0], runs[RAW_REPEATS - 1]);
    let m = runs[RAW_REPEATS / 2];
    let mut cpu: Vec<f64> = runs.iter().map(|r| r.cpu_s).collect();
    cpu.sort_by(f64::total_cmp);
    let median_cpu_s = cpu[RAW_REPEATS / 2];
    let rate = |x: u64, s: f64| x as f64 / s.max(1e-9);
    t.row(
        name,
        &[
            ("runs", RAW_REPEATS as f64),
            ("wall_s", m.wall_s),
            ("cpu_s", m.cpu_s),
            ("events", m.events as f64),
            ("packet_hops", m.hops as f64),
            ("events_per_s", rate(m.events, m.wall_s)),
            ("hops_per_s", rate(m.hops, m.wall_s)),
            ("hops_per_s_min", rate(slowest.hops, slowest.wall_s)),
            ("hops_per_s_max", rate(fastest.hops, fastest.wall_s)),
            ("hops_per_s_first", rate(first_run.hops, first_run.wall_s)),
            ("hops_per_cpu_s", rate(m.hops, m.cpu_s)),
            ("hops_per_cpu_s_median", rate(m.hops, median_cpu_s)),
            ("virtual_us", m.end_ns as f64 / 1e3),
            ("framing_s", m.wall_s - m.events_wall_s),
            ("hops_per_s_events_only", rate(m.hops, m.events_wall_s)),
        ],
    );
    Ok((median_cpu_s, m.hops))
}
