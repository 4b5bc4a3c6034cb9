//! Work-request batching and selective signalling of one QP's send queue.
//!
//! A burst of datagrams for one UD QP is posted as one chain of send work requests (one
//! `ibv_post_send` call, one doorbell). Not every WR asks for a completion: a WR is
//! *signalled* (`IBV_SEND_SIGNALED`) when it is the `signal_every`-th since the last
//! signalled one, and a send completion retires every WR of that QP up to and including it
//! (completions of one send queue arrive in posting order, IBTA Vol. 1, 10.8.6; unsignalled
//! WRs hold their send-queue entry until a later signalled WR completes). This is what
//! perftest and eRPC do to cut CQ traffic by `signal_every`.
//!
//! Two more rules keep it live:
//! - at most `depth` (`max_send_wr`) WRs are outstanding; a chain is cut at the free room
//!   and the rest of the burst is refused (the caller counts it as a send error; the
//!   transport recovers it as a loss). With `1 <= signal_every <= depth`, a full queue
//!   always holds a signalled WR, so a completion always comes.
//! - the caller may force the last WR of a chain to be signalled (`force_tail_signal`):
//!   the datapath does so when fewer than `signal_every` send buffers would be left free,
//!   so buffers held by an unsignalled tail are always given back.
//!
//! `wr_id`s are [`WrId`]s: QP index in the high 32 bits, buffer slot in the low 32.

use std::collections::VecDeque;
use thiserror::Error;

/// A `wr_id`: `(qp_index << 32) | slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WrId(pub u64);

impl WrId {
    /// Packs a QP index and a buffer slot.
    pub fn new(qp_index: u32, slot: u32) -> WrId {
        WrId((u64::from(qp_index) << 32) | u64::from(slot))
    }

    /// The QP index (high 32 bits).
    pub fn qp_index(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The buffer slot (low 32 bits).
    pub fn slot(self) -> u32 {
        self.0 as u32
    }
}

/// Why a send-queue call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum BatchError {
    /// `signal_every` must be in `1..=depth`.
    #[error("signal_every {signal_every} must be in 1..={depth}")]
    BadSignalEvery {
        /// Asked for.
        signal_every: u32,
        /// Send queue depth.
        depth: u32,
    },
    /// A completion whose `wr_id` is not outstanding, or lies behind a signalled WR that
    /// has not completed yet (completions of a send queue come in order).
    #[error("completion for wr_id {0:#x} that is not the next to complete")]
    UnexpectedCompletion(u64),
    /// A rollback of more WRs than are outstanding.
    #[error("rollback of {asked} WRs with {outstanding} outstanding")]
    BadRollback {
        /// WRs asked to roll back.
        asked: usize,
        /// WRs outstanding.
        outstanding: usize,
    },
}

/// One WR of a planned chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedWr {
    /// Its `wr_id`.
    pub wr_id: WrId,
    /// Posted with `IBV_SEND_SIGNALED`.
    pub signalled: bool,
    /// Index of the next WR of the chain in the plan (`wr.next`), `None` for the last.
    pub next: Option<usize>,
}

/// Counters of a [`SendQueue`], never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendQueueStats {
    /// WRs accepted into chains.
    pub posted_wrs: u64,
    /// Of those, signalled.
    pub signalled_wrs: u64,
    /// Chains planned (one `ibv_post_send` each).
    pub chains: u64,
    /// WRs refused because the queue was full.
    pub refused_wrs: u64,
    /// WRs retired by completions.
    pub retired_wrs: u64,
}

#[derive(Clone, Copy, Debug)]
struct Outstanding {
    wr_id: WrId,
    signalled: bool,
}

/// The books of one QP's send queue: outstanding WRs in posting order.
#[derive(Clone, Debug)]
pub struct SendQueue {
    depth: u32,
    signal_every: u32,
    /// Unsignalled WRs posted since the last signalled one (= the unsignalled tail of
    /// `outstanding`).
    since_signal: u32,
    outstanding: VecDeque<Outstanding>,
    stats: SendQueueStats,
}

impl SendQueue {
    /// A send queue of `depth` entries signalling every `signal_every`-th WR.
    ///
    /// # Errors
    /// [`BatchError::BadSignalEvery`] unless `1 <= signal_every <= depth`.
    pub fn new(depth: u32, signal_every: u32) -> Result<SendQueue, BatchError> {
        if signal_every == 0 || signal_every > depth {
            return Err(BatchError::BadSignalEvery {
                signal_every,
                depth,
            });
        }
        Ok(SendQueue {
            depth,
            signal_every,
            since_signal: 0,
            outstanding: VecDeque::with_capacity(depth as usize),
            stats: SendQueueStats::default(),
        })
    }

    /// WRs posted and not yet retired.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Free send-queue entries.
    pub fn room(&self) -> usize {
        self.depth as usize - self.outstanding.len()
    }

    /// Counters.
    pub fn stats(&self) -> SendQueueStats {
        self.stats
    }

    /// Plans one chain for `wr_ids` (in order) into `out` (cleared first) and records the
    /// accepted WRs as outstanding. At most [`SendQueue::room`] are accepted; the rest are
    /// refused (counted). `force_tail_signal` signals the last accepted WR whatever the
    /// count. Returns the number accepted, which is `out.len()`.
    pub fn plan_chain(
        &mut self,
        wr_ids: &[WrId],
        force_tail_signal: bool,
        out: &mut Vec<PlannedWr>,
    ) -> usize {
        out.clear();
        let n = wr_ids.len().min(self.room());
        self.stats.refused_wrs += (wr_ids.len() - n) as u64;
        for (i, &wr_id) in wr_ids[..n].iter().enumerate() {
            let last = i + 1 == n;
            let signalled =
                self.since_signal + 1 == self.signal_every || (last && force_tail_signal);
            self.since_signal = if signalled { 0 } else { self.since_signal + 1 };
            self.outstanding.push_back(Outstanding { wr_id, signalled });
            out.push(PlannedWr {
                wr_id,
                signalled,
                next: if last { None } else { Some(i + 1) },
            });
            self.stats.signalled_wrs += u64::from(signalled);
        }
        self.stats.posted_wrs += n as u64;
        if n > 0 {
            self.stats.chains += 1;
        }
        n
    }

    /// Forgets the last `n` planned WRs (the provider refused them: `ibv_post_send`'s
    /// `bad_wr` and everything after it), so the books match what the NIC holds.
    ///
    /// # Errors
    /// [`BatchError::BadRollback`] when `n` exceeds the outstanding WRs.
    pub fn rollback(&mut self, n: usize) -> Result<(), BatchError> {
        if n > self.outstanding.len() {
            return Err(BatchError::BadRollback {
                asked: n,
                outstanding: self.outstanding.len(),
            });
        }
        for _ in 0..n {
            if let Some(o) = self.outstanding.pop_back() {
                self.stats.posted_wrs -= 1;
                self.stats.signalled_wrs -= u64::from(o.signalled);
            }
        }
        self.since_signal = self
            .outstanding
            .iter()
            .rev()
            .take_while(|o| !o.signalled)
            .count() as u32;
        Ok(())
    }

    /// A send completion for `wr_id`: retires every outstanding WR up to and including it,
    /// in posting order, handing each `wr_id` to `retired` (its buffer is free again).
    /// Returns the number retired.
    ///
    /// `wr_id` must be outstanding and no signalled WR may precede it (an unsignalled WR
    /// completes by itself only when the QP flushes in error).
    ///
    /// # Errors
    /// [`BatchError::UnexpectedCompletion`]; nothing is retired then.
    pub fn on_completion(
        &mut self,
        wr_id: WrId,
        mut retired: impl FnMut(WrId),
    ) -> Result<usize, BatchError> {
        let pos = self
            .outstanding
            .iter()
            .position(|o| o.wr_id == wr_id || o.signalled)
            .filter(|&p| self.outstanding[p].wr_id == wr_id)
            .ok_or(BatchError::UnexpectedCompletion(wr_id.0))?;
        for o in self.outstanding.drain(..=pos) {
            retired(o.wr_id);
        }
        if self.outstanding.is_empty() {
            self.since_signal = 0;
        }
        self.stats.retired_wrs += (pos + 1) as u64;
        Ok(pos + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(qp: u32, slots: std::ops::Range<u32>) -> Vec<WrId> {
        slots.map(|s| WrId::new(qp, s)).collect()
    }

    #[test]
    fn wr_id_packing() {
        let w = WrId::new(7, 0xdead_beef);
        assert_eq!(w.0, 0x0000_0007_dead_beef);
        assert_eq!(w.qp_index(), 7);
        assert_eq!(w.slot(), 0xdead_beef);
    }

    #[test]
    fn batch_of_64_signal_every_16_gives_4_signalled_and_a_linked_chain() {
        let mut sq = SendQueue::new(128, 16).unwrap();
        let mut plan = Vec::new();
        let n = sq.plan_chain(&ids(3, 0..64), false, &mut plan);
        assert_eq!(n, 64);
        let signalled: Vec<usize> = plan
            .iter()
            .enumerate()
            .filter(|(_, w)| w.signalled)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(signalled, vec![15, 31, 47, 63]);
        for (i, w) in plan.iter().enumerate() {
            assert_eq!(w.wr_id, WrId::new(3, i as u32));
            assert_eq!(w.next, if i == 63 { None } else { Some(i + 1) });
        }
        assert_eq!(
            sq.stats(),
            SendQueueStats {
                posted_wrs: 64,
                signalled_wrs: 4,
                chains: 1,
                refused_wrs: 0,
                retired_wrs: 0
            }
        );
        // Completions come in order: WR 15 retires 0..=15, then WR 31 retires 16..=31.
        let mut got = Vec::new();
        assert_eq!(
            sq.on_completion(WrId::new(3, 15), |w| got.push(w.slot())),
            Ok(16)
        );
        assert_eq!(
            sq.on_completion(WrId::new(3, 31), |w| got.push(w.slot())),
            Ok(16)
        );
        assert_eq!(got, (0..32).collect::<Vec<_>>());
        assert_eq!(sq.outstanding(), 32);
    }

    #[test]
    fn signal_count_carries_across_chains_and_tail_can_be_forced() {
        let mut sq = SendQueue::new(64, 16).unwrap();
        let mut plan = Vec::new();
        sq.plan_chain(&ids(0, 0..10), false, &mut plan);
        assert!(plan.iter().all(|w| !w.signalled));
        // Six more complete the first 16: the 6th of this chain is signalled.
        sq.plan_chain(&ids(0, 10..20), false, &mut plan);
        let s: Vec<bool> = plan.iter().map(|w| w.signalled).collect();
        assert_eq!(s.iter().filter(|&&b| b).count(), 1);
        assert!(s[5]);
        // 4 unsignalled so far after it; force the tail of a chain of 3.
        sq.plan_chain(&ids(0, 20..23), true, &mut plan);
        assert_eq!(
            plan.iter().map(|w| w.signalled).collect::<Vec<_>>(),
            vec![false, false, true]
        );
        // Count restarts after a forced signal: 15 unsignalled then one signalled.
        sq.plan_chain(&ids(0, 23..39), false, &mut plan);
        assert_eq!(plan.iter().filter(|w| w.signalled).count(), 1);
        assert!(plan[15].signalled);
        assert_eq!(sq.stats().signalled_wrs, 3);
    }

    #[test]
    fn chain_is_cut_at_queue_depth() {
        let mut sq = SendQueue::new(32, 8).unwrap();
        let mut plan = Vec::new();
        assert_eq!(sq.plan_chain(&ids(1, 0..20), false, &mut plan), 20);
        assert_eq!(sq.plan_chain(&ids(1, 20..40), false, &mut plan), 12);
        assert_eq!(plan.len(), 12);
        assert_eq!(plan[11].next, None);
        assert_eq!(sq.room(), 0);
        assert_eq!(sq.stats().refused_wrs, 8);
        // Full queue: a signalled WR is outstanding (index 7 of the first chain).
        assert_eq!(sq.on_completion(WrId::new(1, 7), |_| {}), Ok(8));
        assert_eq!(sq.room(), 8);
        assert_eq!(sq.plan_chain(&ids(1, 40..41), false, &mut plan), 1);
    }

    #[test]
    fn out_of_order_or_unknown_completion_is_typed_error() {
        let mut sq = SendQueue::new(64, 4).unwrap();
        let mut plan = Vec::new();
        sq.plan_chain(&ids(0, 0..8), false, &mut plan);
        // WR 7 is signalled, but WR 3 (signalled) has not completed yet.
        assert_eq!(
            sq.on_completion(WrId::new(0, 7), |_| {}),
            Err(BatchError::UnexpectedCompletion(7))
        );
        assert_eq!(
            sq.on_completion(WrId::new(0, 99), |_| {}),
            Err(BatchError::UnexpectedCompletion(99))
        );
        assert_eq!(sq.outstanding(), 8);
        // A flushed unsignalled WR at the head retires alone.
        assert_eq!(sq.on_completion(WrId::new(0, 0), |_| {}), Ok(1));
        assert_eq!(sq.on_completion(WrId::new(0, 3), |_| {}), Ok(3));
        assert_eq!(sq.on_completion(WrId::new(0, 7), |_| {}), Ok(4));
        assert_eq!(sq.outstanding(), 0);
    }

    #[test]
    fn rollback_restores_signal_count() {
        let mut sq = SendQueue::new(64, 16).unwrap();
        let mut plan = Vec::new();
        sq.plan_chain(&ids(0, 0..20), false, &mut plan);
        // Provider refused the last 6 (WR 14 onwards); WR 15, the signalled one, too.
        sq.rollback(6).unwrap();
        assert_eq!(sq.outstanding(), 14);
        assert_eq!(sq.stats().signalled_wrs, 0);
        assert_eq!(sq.stats().posted_wrs, 14);
        // 14 unsignalled outstanding: the 2nd of the next chain is signalled.
        sq.plan_chain(&ids(0, 14..18), false, &mut plan);
        assert!(plan[1].signalled && !plan[0].signalled && !plan[2].signalled);
        assert_eq!(
            sq.rollback(100),
            Err(BatchError::BadRollback {
                asked: 100,
                outstanding: 18
            })
        );
    }

    #[test]
    fn bad_signal_every() {
        assert_eq!(
            SendQueue::new(16, 0).unwrap_err(),
            BatchError::BadSignalEvery {
                signal_every: 0,
                depth: 16
            }
        );
        assert!(SendQueue::new(16, 17).is_err());
        assert!(SendQueue::new(16, 16).is_ok());
    }
}
