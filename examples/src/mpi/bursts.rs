//! When a stream sends: the burst schedule of each mode, and the bookkeeping that turns
//! send completions into per-burst completion times.
//!
//! Times are nanoseconds from the run's start instant (common to all ranks in the
//! training and sync-burst modes, each stream's own in storage).

use super::opts::{Mode, Plan};
use std::collections::VecDeque;

/// One stream's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Bursts.
    pub bursts: u64,
    /// Start of burst 0, ns.
    pub phase_ns: u64,
    /// Start-to-start, ns.
    pub period_ns: u64,
    /// Messages per burst; `None`: as many as fit until [`Schedule::post_until_ns`].
    pub messages: Option<u64>,
    /// How long after its start a time-filled burst keeps posting, ns.
    pub fill_ns: u64,
}

impl Schedule {
    /// The schedule of a stream whose phase seed is `seed` (storage's start within its
    /// first period; the other modes start at 0).
    pub fn new(plan: &Plan, seed: u64) -> Schedule {
        match plan.mode {
            Mode::Continuous => Schedule {
                bursts: 1,
                phase_ns: 0,
                period_ns: 0,
                messages: plan.messages,
                fill_ns: plan.duration_s.map_or(0, |d| (d * 1e9) as u64),
            },
            Mode::Training => Schedule {
                bursts: plan.bursts,
                phase_ns: 0,
                period_ns: plan.period_ns,
                messages: None,
                fill_ns: plan.on_ns,
            },
            Mode::Storage => Schedule {
                bursts: plan.bursts,
                phase_ns: seed % plan.period_ns.max(1),
                period_ns: plan.period_ns,
                messages: Some(plan.burst_messages),
                fill_ns: 0,
            },
            Mode::SyncBurst => Schedule {
                bursts: plan.bursts,
                phase_ns: 0,
                period_ns: plan.period_ns,
                messages: Some(plan.burst_messages),
                fill_ns: 0,
            },
        }
    }

    /// Start of burst `k`, ns.
    pub fn start_ns(&self, k: u64) -> u64 {
        self.phase_ns
            .saturating_add(k.saturating_mul(self.period_ns))
    }

    /// Until when burst `k` posts, for a time-filled burst.
    pub fn post_until_ns(&self, k: u64) -> u64 {
        self.start_ns(k).saturating_add(self.fill_ns)
    }

    /// When the last burst is due to start, plus its fill time: the run's planned length.
    pub fn planned_ns(&self) -> u64 {
        self.start_ns(self.bursts.saturating_sub(1)) + self.fill_ns
    }
}

/// A burst whose messages are not all complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Open {
    k: u64,
    first: u64,
    /// One past its last message, once it stopped posting.
    end: Option<u64>,
    done: u64,
    start_ns: u64,
}

/// The bursts of one stream in flight: which message belongs to which burst, and when
/// each burst's last message completed.
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    open: VecDeque<Open>,
    /// Completion time of each finished burst (scheduled start to last completion), ns,
    /// by burst index.
    pub completed: Vec<(u64, u64)>,
}

impl Tracker {
    /// Burst `k`, scheduled at `start_ns`, begins with message `first`.
    pub fn begin(&mut self, k: u64, first: u64, start_ns: u64) {
        self.open.push_back(Open {
            k,
            first,
            end: None,
            done: 0,
            start_ns,
        });
    }

    /// The open burst posted its last message; `end` is one past it. A burst with no
    /// message (`end == first`) completes at `now_ns`.
    pub fn end(&mut self, end: u64, now_ns: u64) {
        if let Some(b) = self.open.iter_mut().rev().find(|b| b.end.is_none()) {
            b.end = Some(end);
        }
        self.retire(now_ns);
    }

    /// Message `m` completed at `now_ns`.
    pub fn complete(&mut self, m: u64, now_ns: u64) {
        if let Some(b) = self
            .open
            .iter_mut()
            .find(|b| m >= b.first && b.end.is_none_or(|e| m < e))
        {
            b.done += 1;
        }
        self.retire(now_ns);
    }

    fn retire(&mut self, now_ns: u64) {
        while let Some(b) = self.open.front() {
            match b.end {
                Some(e) if b.done == e - b.first => {
                    self.completed
                        .push((b.k, now_ns.saturating_sub(b.start_ns)));
                    self.open.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Bursts begun and not complete.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_times_each_burst_from_its_scheduled_start() {
        let mut t = Tracker::default();
        t.begin(0, 0, 1000);
        t.complete(0, 1500);
        t.end(3, 1600); // messages 0, 1, 2
        t.begin(1, 3, 2000);
        t.complete(1, 2100);
        t.complete(3, 2200); // burst 1's first, before burst 0 is done
        t.end(4, 2300);
        assert_eq!(t.completed, vec![]);
        t.complete(2, 2500); // burst 0 done; burst 1 too
        assert_eq!(t.completed, vec![(0, 1500), (1, 500)]);
        assert_eq!(t.open(), 0);
        t.begin(2, 4, 3000);
        t.end(4, 3100); // empty burst
        assert_eq!(t.completed[2], (2, 100));
    }
}
