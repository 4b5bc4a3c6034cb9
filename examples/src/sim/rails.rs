//! `mrc-sim experiment rail-vs-spine-leaf` (issue "Rails and planes in the model"): ring
//! allreduce and all-to-all on both layouts of one designer fabric, at 1:1 and 2:1.
//!
//! The designer ([`super::experiments::fabric_in`]) sizes the fabric once per
//! oversubscription; [`mrc_fabric_sim::Topology::from_design`] cables it in each layout:
//! spine-leaf puts a server's GPUs on one leaf (GPU `h` on leaf `h / downlinks`), the
//! rail layout puts NIC `k` of every server on rail `k`'s leaf. Two rings, run as the
//! `allreduce` experiment runs its ring (`2 (N - 1)` steps of `size / N`, each waiting for
//! its slowest flow): in server order (GPU `h` to `h + 1`, neighbours on one server) and
//! in rail order (GPU `k` of server `s` to GPU `k` of server `s + 1`, as NCCL builds its
//! rings over rails). What the rail layout changes: a same-rail hop stays on its rail's
//! leaf, a same-server hop crosses the spines; spine-leaf the other way round. The
//! all-to-all keeps the same share of pairs on a leaf in both layouts.
//!
//! The issue states no target for this comparison, so the experiment prints the rows and
//! checks nothing.

use mrc_fabric_sim::{Layout, Oversubscription, SimReport, Simulator, Topology};

use super::experiments::{
    ExperimentError, ProgressFn, base_cfg, fabric_in, ring_allreduce, sim_run,
};
use super::output::{Panel, ResultTable};
use super::plane_loss::Pattern;

/// Shape of a layout comparison.
#[derive(Clone, Copy, Debug)]
pub struct RailSpec {
    /// GPUs (one 100 Gb/s NIC each).
    pub gpus: u32,
    /// GPUs per server: the rails.
    pub gpus_per_server: u32,
    /// Leaf and spine ports (100 Gb/s each).
    pub radix: (u32, u32),
    /// Bytes each ring reduces (every host sends `2 (N - 1) / N` of it).
    pub ring_bytes: u64,
    /// Bytes each host sends in the all-to-all, split over its flows.
    pub a2a_bytes_per_host: u64,
}

/// `rail-vs-spine-leaf`: 16 GPUs, 4 per server, leaves and spines of 8 x 100 Gb/s (4
/// leaves; 2 spines at 1:1, 1 at 2:1), rings of 4 MiB, all-to-all of 4 MiB per GPU.
pub const RAIL_VS_SPINE_LEAF: RailSpec = RailSpec {
    gpus: 16,
    gpus_per_server: 4,
    radix: (8, 8),
    ring_bytes: 4 << 20,
    a2a_bytes_per_host: 4 << 20,
};

/// `rail-vs-spine-leaf-quick`: 8 GPUs, 4 per server, 1 MiB (for tests).
pub const RAIL_VS_SPINE_LEAF_QUICK: RailSpec = RailSpec {
    gpus: 8,
    gpus_per_server: 4,
    radix: (8, 8),
    ring_bytes: 1 << 20,
    a2a_bytes_per_host: 1 << 20,
};

/// The traffic of one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Traffic {
    /// Ring allreduce, GPU `h` to `h + 1`.
    ServerRing,
    /// Ring allreduce, GPU `k` of server `s` to GPU `k` of server `s + 1`.
    RailRing,
    /// Every GPU to every other.
    AllToAll,
}

impl Traffic {
    fn name(self) -> &'static str {
        match self {
            Traffic::ServerRing => "ring, server order",
            Traffic::RailRing => "ring, rail order",
            Traffic::AllToAll => "all-to-all",
        }
    }
}

/// The ring of `spec` in `traffic`'s order (empty for the all-to-all).
fn ring(spec: &RailSpec, traffic: Traffic) -> Vec<u32> {
    let (n, gps) = (spec.gpus, spec.gpus_per_server.max(1));
    match traffic {
        Traffic::ServerRing => (0..n).collect(),
        Traffic::RailRing => (0..gps)
            .flat_map(|k| (0..n.div_ceil(gps)).map(move |s| s * gps + k))
            .filter(|&h| h < n)
            .collect(),
        Traffic::AllToAll => Vec::new(),
    }
}

/// Packets the leaves sent up to the spines.
fn spine_packets(r: &SimReport) -> u64 {
    r.ports
        .iter()
        .filter(|p| p.node.starts_with("leaf") && p.peer.starts_with("spine"))
        .map(|p| p.stats.tx_packets)
        .sum()
}

/// One run's numbers.
struct Run {
    done_ns: u64,
    /// Bytes each host sent.
    per_host_bytes: u64,
    /// Flows (of one step for a ring) whose ends share a leaf, %.
    on_leaf_pct: f64,
    spine_packets: u64,
    unfinished: usize,
}

/// Runs `traffic` on `topo`.
fn run_one(
    spec: &RailSpec,
    topo: Topology,
    traffic: Traffic,
    label: &str,
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<Run, ExperimentError> {
    let same_leaf = |a: u32, b: u32| topo.leaf_of(a) == topo.leaf_of(b);
    let pct = |pairs: &[(u32, u32)]| {
        let on = pairs.iter().filter(|&&(a, b)| same_leaf(a, b)).count();
        100.0 * on as f64 / pairs.len().max(1) as f64
    };
    if traffic == Traffic::AllToAll {
        let flows = Pattern::AllToAll.flows(spec.gpus, spec.a2a_bytes_per_host);
        let pairs: Vec<(u32, u32)> = flows.iter().map(|f| (f.src, f.dst)).collect();
        let on_leaf_pct = pct(&pairs);
        let per_flow = flows.first().map_or(0, |f| f.bytes);
        let r = sim_run(label, topo, base_cfg(seed), &flows, progress)?;
        return Ok(Run {
            done_ns: r.completion_ns().unwrap_or(0),
            per_host_bytes: per_flow * u64::from(spec.gpus.saturating_sub(1)),
            on_leaf_pct,
            spine_packets: spine_packets(&r),
            unfinished: r.flows.iter().filter(|f| f.done_ns.is_none()).count(),
        });
    }
    let order = ring(spec, traffic);
    let n = order.len();
    let pairs: Vec<(u32, u32)> = (0..n).map(|i| (order[i], order[(i + 1) % n])).collect();
    let on_leaf_pct = pct(&pairs);
    let chunk = spec.ring_bytes / n.max(1) as u64;
    let mut sim = Simulator::new(topo, base_cfg(seed))?;
    let done_ns = ring_allreduce(&mut sim, &order, chunk, label, progress)?;
    let r = sim.report();
    Ok(Run {
        done_ns,
        per_host_bytes: 2 * n.saturating_sub(1) as u64 * chunk,
        on_leaf_pct,
        spine_packets: spine_packets(&r),
        unfinished: r.flows.iter().filter(|f| f.done_ns.is_none()).count(),
    })
}

/// The `rail-vs-spine-leaf` experiment over `spec`.
///
/// Errors: [`ExperimentError`].
pub fn rail_vs_spine_leaf(
    spec: &RailSpec,
    seed: u64,
    progress: ProgressFn<'_>,
) -> Result<ResultTable, ExperimentError> {
    let mut t = ResultTable::new(format!(
        "rail-vs-spine-leaf: {} GPUs ({} per server), 100 Gb/s, {}-port leaves and {}-port spines; ring allreduce of {} MiB in server order and in rail order, all-to-all of {} MiB per GPU; spine-leaf vs rail layout at 1:1 and 2:1 (the issue states no target: no check)",
        spec.gpus,
        spec.gpus_per_server,
        spec.radix.0,
        spec.radix.1,
        spec.ring_bytes >> 20,
        spec.a2a_bytes_per_host >> 20
    ));
    for over in ["1:1", "2:1"] {
        let o: Oversubscription = over.parse()?;
        for traffic in [Traffic::ServerRing, Traffic::RailRing, Traffic::AllToAll] {
            let mut spine_leaf_ns = 0;
            for (layout, name) in [(Layout::SpineLeaf, "spine-leaf"), (Layout::Rail, "rail")] {
                let (_, topo) = fabric_in(spec.gpus, spec.gpus_per_server, spec.radix, o, layout)?;
                let label = format!("{} / {name} {over}", traffic.name());
                let r = run_one(spec, topo, traffic, &label, seed, progress)?;
                if layout == Layout::SpineLeaf {
                    spine_leaf_ns = r.done_ns;
                }
                t.row(
                    label,
                    &[
                        ("completion_us", r.done_ns as f64 / 1e3),
                        (
                            "x_spine_leaf",
                            r.done_ns as f64 / spine_leaf_ns.max(1) as f64,
                        ),
                        (
                            "per_gpu_gbps",
                            r.per_host_bytes as f64 * 8.0 / r.done_ns.max(1) as f64,
                        ),
                        ("pairs_on_one_leaf_pct", r.on_leaf_pct),
                        ("spine_packets", r.spine_packets as f64),
                        ("unfinished_flows", r.unfinished as f64),
                    ],
                );
            }
        }
    }
    t.plot_column = Some("completion_us".into());
    t.panel(
        Panel::new("completion_us", "traffic / layout, oversubscription")
            .title("completion: rail vs spine-leaf layout")
            .quantity("completion time"),
    );
    t.panel(
        Panel::new(
            "pairs_on_one_leaf_pct",
            "traffic / layout, oversubscription",
        )
        .title("flows whose ends share a leaf, %")
        .quantity("on one leaf"),
    );
    Ok(t)
}
