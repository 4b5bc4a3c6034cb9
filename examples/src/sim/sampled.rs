//! Goodput over time: a run in steps of virtual time ([`Simulator::run_until`]) that
//! records how many payload bytes each flow's receiver has placed at every step, and the
//! rates over windows of those samples.

use mrc_fabric_sim::{FlowSpec, SimConfig, SimReport, Simulator, Topology};

use super::experiments::{ExperimentError, ProgressFn};

/// What one sampled run gives: each flow's delivered bytes at every step, the report at
/// the end, and what the caller looked at on the way.
#[derive(Clone, Debug)]
pub struct Sampled<T> {
    /// Step between samples, ns; sample `k` is at `k x step_ns` (sample 0 at time 0).
    pub step_ns: u64,
    /// `delivered[f][k]`: flow `f`'s payload bytes placed by sample `k`'s time, bytes.
    pub delivered: Vec<Vec<u64>>,
    /// The report once every flow finished (or `stop_ns` came).
    pub report: SimReport,
    /// What `look` returned at each sample (in sample order).
    pub looks: Vec<T>,
}

impl<T> Sampled<T> {
    /// Samples taken.
    pub fn len(&self) -> usize {
        self.delivered.first().map_or(0, Vec::len)
    }

    /// Whether no sample was taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample index at or after `t_ns` (the last one when `t_ns` is past the end).
    pub fn index_at(&self, t_ns: u64) -> usize {
        (t_ns.div_ceil(self.step_ns.max(1)) as usize).min(self.len().saturating_sub(1))
    }

    /// Bytes the flows in `which` delivered between samples `a` and `b` (`a <= b`).
    pub fn bytes_between(&self, which: &[usize], a: usize, b: usize) -> u64 {
        which
            .iter()
            .filter_map(|&f| self.delivered.get(f))
            .map(|d| d[b.min(d.len() - 1)] - d[a.min(d.len() - 1)])
            .sum()
    }

    /// Mean goodput of the flows in `which` from `from_ns` to `to_ns` (rounded to the
    /// samples), bit/s.
    pub fn rate_bps(&self, which: &[usize], from_ns: u64, to_ns: u64) -> f64 {
        let (a, b) = (self.index_at(from_ns), self.index_at(to_ns));
        if b <= a {
            return 0.0;
        }
        self.bytes_between(which, a, b) as f64 * 8e9 / ((b - a) as u64 * self.step_ns) as f64
    }

    /// Goodput of the flows in `which` over the `window` samples ending at each sample
    /// (the first `window` samples over what there is), bit/s.
    pub fn windowed_bps(&self, which: &[usize], window: usize) -> Vec<f64> {
        let w = window.max(1);
        (0..self.len())
            .map(|k| {
                let a = k.saturating_sub(w);
                if k == a {
                    return 0.0;
                }
                self.bytes_between(which, a, k) as f64 * 8e9
                    / ((k - a) as u64 * self.step_ns) as f64
            })
            .collect()
    }
}

/// Runs `flows` on `topo` under `cfg` in steps of `step_ns` until every flow finished (or
/// the configuration's stop time), sampling each flow's delivered bytes after every step
/// and calling `look` on the simulator there. Sampling does not change the run: the same
/// events happen at the same times as in one go.
///
/// Errors: the simulator's ([`ExperimentError::Sim`]).
pub fn run_sampled<T>(
    label: &str,
    topo: Topology,
    cfg: SimConfig,
    flows: &[FlowSpec],
    step_ns: u64,
    look: &mut dyn FnMut(&Simulator) -> T,
    progress: ProgressFn<'_>,
) -> Result<Sampled<T>, ExperimentError> {
    let stop_ns = Some(cfg.stop_ns).filter(|&t| t > 0).unwrap_or(u64::MAX);
    let mut sim = Simulator::new(topo, cfg)?;
    for f in flows {
        sim.add_flow(*f)?;
    }
    let n = flows.len();
    let mut delivered: Vec<Vec<u64>> = vec![vec![0]; n];
    let mut looks = vec![look(&sim)];
    let mut t = 0u64;
    let mut finished = false;
    while !finished && t < stop_ns {
        t = t.saturating_add(step_ns.max(1)).min(stop_ns);
        sim.run_until(t, &mut |p| {
            finished = p.flows == p.flows_done;
            progress(label, p);
        });
        for (f, d) in delivered.iter_mut().enumerate() {
            d.push(sim.flow_delivered_bytes(f as u32).unwrap_or(0));
        }
        looks.push(look(&sim));
        // The clock stops short of `t` only when the flows finished or no event is left.
        finished |= sim.now_ns() < t;
    }
    let report = sim.run_with(&mut |p| progress(label, p));
    Ok(Sampled {
        step_ns,
        delivered,
        report,
        looks,
    })
}
