//! Output-queued switch ports: admission (drop-tail, ECN marking, trimming) and counters.
//!
//! A port has two FIFOs: the normal queue and a strict-priority queue that carries trimmed
//! headers and (when `control_priority` is on) mrc control packets (SACK, NACK, CNP, probes),
//! as NDP / UEC trimming switches do. Admission of a data packet of `len` bytes with `q`
//! bytes already in the normal queue:
//! 1. trimming on and `q + len > trim_threshold_bytes`: trim, then into the priority queue;
//! 2. else `q + len > buffer_bytes`: drop-tail;
//! 3. else enqueue; ECN-capable packets are CE-marked with probability `p(q)`:
//!    [`EcnConfig::Threshold`] `p = 1` when `q >= k_bytes`; [`EcnConfig::Red`] (DCQCN's
//!    Kmin/Kmax/Pmax, Zhu et al. SIGCOMM 2015 section 3) `p = 0` below Kmin,
//!    `Pmax (q - Kmin) / (Kmax - Kmin)` between, `1` from Kmax.
//!
//! The priority queue drops tail above `priority_buffer_bytes`.

use std::collections::VecDeque;

use hdrhistogram::Histogram;
use serde::Serialize;

/// ECN marking policy of a port.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum EcnConfig {
    /// No marking.
    Off,
    /// Mark every ECN-capable packet when the queue holds at least `k_bytes`.
    Threshold {
        /// Marking threshold, bytes.
        k_bytes: u64,
    },
    /// RED-style marking between Kmin and Kmax with probability up to Pmax.
    Red {
        /// Kmin, bytes.
        kmin_bytes: u64,
        /// Kmax, bytes (> Kmin).
        kmax_bytes: u64,
        /// Marking probability at Kmax, 0..=1.
        pmax: f64,
    },
}

impl EcnConfig {
    /// Marking probability with `q` bytes queued.
    pub fn probability(&self, q: u64) -> f64 {
        match *self {
            EcnConfig::Off => 0.0,
            EcnConfig::Threshold { k_bytes } => {
                if q >= k_bytes {
                    1.0
                } else {
                    0.0
                }
            }
            EcnConfig::Red {
                kmin_bytes,
                kmax_bytes,
                pmax,
            } => {
                if q < kmin_bytes {
                    0.0
                } else if q >= kmax_bytes {
                    1.0
                } else {
                    pmax * (q - kmin_bytes) as f64 / (kmax_bytes - kmin_bytes).max(1) as f64
                }
            }
        }
    }
}

/// Queue parameters of a switch port.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct QueueConfig {
    /// Normal-queue buffer, bytes.
    pub buffer_bytes: u64,
    /// ECN marking.
    pub ecn: EcnConfig,
    /// Trim data packets that would push the normal queue above this many bytes; `None`
    /// disables trimming (drop-tail).
    pub trim_threshold_bytes: Option<u64>,
    /// Priority-queue buffer, bytes.
    pub priority_buffer_bytes: u64,
    /// Put mrc control packets (not data) in the priority queue.
    pub control_priority: bool,
}

impl Default for QueueConfig {
    /// 1 MiB per port, ECN threshold at 100 KiB, no trimming, 256 KiB priority buffer,
    /// control packets prioritised.
    fn default() -> Self {
        QueueConfig {
            buffer_bytes: 1 << 20,
            ecn: EcnConfig::Threshold { k_bytes: 100 << 10 },
            trim_threshold_bytes: None,
            priority_buffer_bytes: 256 << 10,
            control_priority: true,
        }
    }
}

/// What admission decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Into the normal queue; `mark_ce` when the packet must be CE-marked.
    Normal {
        /// CE-mark it.
        mark_ce: bool,
    },
    /// Trim it, then into the priority queue.
    Trim,
    /// Into the priority queue as it is.
    Priority,
    /// Drop it.
    Drop,
}

/// Counters of one transmitting port (one direction of a link).
///
/// Laid out in declaration order (`repr(C)`) so the per-packet fields share cache lines:
/// the seven counters fill most of one 64-byte line, the queue-depth sample cache the next,
/// and the histogram (touched only when the cache evicts a value) comes last.
#[derive(Clone, Debug, Serialize)]
#[repr(C)]
pub struct PortStats {
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Time spent serialising, ns (utilisation = busy / run time).
    pub busy_ns: u64,
    /// Frames dropped at admission (drop-tail, priority overflow).
    pub drops: u64,
    /// Frames trimmed.
    pub trims: u64,
    /// Frames CE-marked.
    pub ecn_marks: u64,
    /// Largest normal-queue occupancy seen, bytes.
    pub max_queue_bytes: u64,
    /// Queue-depth samples not yet in `queue_hist`, as `(value, count)` pairs (see
    /// [`SampleCache`]).
    #[serde(skip)]
    pending: SampleCache,
    /// Normal-queue occupancy sampled at every arrival, bytes, except the samples still in
    /// `pending` (read through [`PortStats::queue_histogram`]).
    #[serde(skip)]
    queue_hist: Histogram<u64>,
}

/// Distinct queue-depth values a port counts before they reach its histogram.
pub const PENDING_SAMPLES: usize = 16;

/// A direct-mapped cache of queue-depth samples: [`PENDING_SAMPLES`] `(value, count)`
/// entries in one cache line, the entry chosen by a multiplicative hash of the value
/// (Knuth, TAOCP vol. 3 section 6.4). A sample equal to its entry's value only counts;
/// another value evicts the entry into the histogram (`record_n(value, count)`, exactly
/// `count` recordings of `value`). A port's queue depths repeat (multiples of its frame
/// sizes), so most samples stay in this line, and the histogram's counts (kilobytes per
/// port, cold) are touched once per eviction instead of once per sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(64))]
struct SampleCache {
    /// `(value, count)`; count 0 marks an empty entry.
    entries: [(u32, u32); PENDING_SAMPLES],
}

impl SampleCache {
    /// The entry of value `v`.
    fn slot(v: u32) -> usize {
        (u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - PENDING_SAMPLES.trailing_zeros())) as usize
    }
}

impl Default for PortStats {
    fn default() -> Self {
        PortStats {
            tx_packets: 0,
            tx_bytes: 0,
            busy_ns: 0,
            drops: 0,
            trims: 0,
            ecn_marks: 0,
            max_queue_bytes: 0,
            pending: SampleCache::default(),
            queue_hist: Histogram::new(2).expect("2 significant figures is a valid histogram"),
        }
    }
}

/// Records `count` samples of `value` in `h` (the histogram resizes itself; recording
/// cannot fail).
fn record_n(h: &mut Histogram<u64>, value: u32, count: u32) {
    let _ = h.record_n(u64::from(value), u64::from(count));
}

impl PortStats {
    /// Records a normal-queue depth sample, bytes (an occupancy seen: it also raises
    /// `max_queue_bytes`).
    pub fn record_queue_bytes(&mut self, q: u64) {
        self.max_queue_bytes = self.max_queue_bytes.max(q);
        let Ok(v) = u32::try_from(q) else {
            // Beyond the cache's 32-bit values (a queue of 4 GiB and more): straight in.
            let _ = self.queue_hist.record(q);
            return;
        };
        let e = &mut self.pending.entries[SampleCache::slot(v)];
        if e.0 == v && e.1 > 0 && e.1 < u32::MAX {
            e.1 += 1;
            return;
        }
        let (old_v, old_n) = std::mem::replace(e, (v, 1));
        if old_n > 0 {
            record_n(&mut self.queue_hist, old_v, old_n);
        }
    }

    /// Records the cached samples in the histogram now (the simulator does this when it
    /// stops, so reading the quantiles needs no copy of the histogram).
    pub fn flush_pending(&mut self) {
        for e in &mut self.pending.entries {
            let (v, n) = std::mem::take(e);
            if n > 0 {
                record_n(&mut self.queue_hist, v, n);
            }
        }
    }

    /// Histogram of the normal-queue depth sampled at every arrival, bytes (2 significant
    /// figures).
    pub fn queue_histogram(&self) -> Histogram<u64> {
        let mut h = self.queue_hist.clone();
        for &(v, n) in &self.pending.entries {
            if n > 0 {
                record_n(&mut h, v, n);
            }
        }
        h
    }

    /// Queue depth at quantile `q` (0..=1), bytes: the histogram's value (the highest
    /// value of its 2-significant-figure bucket), but never above the largest depth seen
    /// (`max_queue_bytes`: a p50 of 63,231 bytes beside a maximum of 63,150 read as a bug).
    pub fn queue_quantile_bytes(&self, q: f64) -> u64 {
        let v = if self.pending == SampleCache::default() {
            self.queue_hist.value_at_quantile(q)
        } else {
            self.queue_histogram().value_at_quantile(q)
        };
        v.min(self.max_queue_bytes)
    }
}

/// A packet asking for admission.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrival {
    /// Frame bytes.
    pub len: u64,
    /// An untrimmed mrc data packet with a payload.
    pub trimmable: bool,
    /// An mrc control packet or a trimmed header.
    pub control: bool,
    /// ECN-capable (ECT(0), ECT(1) or already CE).
    pub ect: bool,
    /// A uniform draw in `[0, 1)` for RED marking.
    pub coin: f64,
}

/// The two FIFOs of a port (packet handles) and their occupancy.
#[derive(Clone, Debug, Default)]
pub struct PortQueue {
    normal: VecDeque<(u32, u32)>,
    priority: VecDeque<(u32, u32)>,
    normal_bytes: u64,
    priority_bytes: u64,
}

impl PortQueue {
    /// Bytes in the normal queue.
    pub fn normal_bytes(&self) -> u64 {
        self.normal_bytes
    }

    /// Bytes in the priority queue.
    pub fn priority_bytes(&self) -> u64 {
        self.priority_bytes
    }

    /// Frames in both queues.
    pub fn len(&self) -> usize {
        self.normal.len() + self.priority.len()
    }

    /// Whether both queues are empty.
    pub fn is_empty(&self) -> bool {
        self.normal.is_empty() && self.priority.is_empty()
    }

    /// Decides admission of packet `a`. Records the occupancy.
    #[inline]
    pub fn admit(&self, cfg: &QueueConfig, a: Arrival, stats: &mut PortStats) -> Admit {
        let Arrival {
            len,
            trimmable,
            control,
            ect,
            coin,
        } = a;
        let q = self.normal_bytes;
        stats.record_queue_bytes(q);
        if control && cfg.control_priority {
            return if self.priority_bytes + len > cfg.priority_buffer_bytes {
                Admit::Drop
            } else {
                Admit::Priority
            };
        }
        if trimmable {
            if let Some(t) = cfg.trim_threshold_bytes {
                if q + len > t {
                    return Admit::Trim;
                }
            }
        }
        if q + len > cfg.buffer_bytes {
            return Admit::Drop;
        }
        let p = cfg.ecn.probability(q);
        Admit::Normal {
            mark_ce: ect && p > 0.0 && (p >= 1.0 || coin < p),
        }
    }

    /// Appends a packet handle of `len` bytes to the normal queue.
    pub fn push_normal(&mut self, pkt: u32, len: u32, stats: &mut PortStats) {
        self.normal.push_back((pkt, len));
        self.normal_bytes += u64::from(len);
        stats.max_queue_bytes = stats.max_queue_bytes.max(self.normal_bytes);
    }

    /// Appends a packet handle to the priority queue.
    pub fn push_priority(&mut self, pkt: u32, len: u32) {
        self.priority.push_back((pkt, len));
        self.priority_bytes += u64::from(len);
    }

    /// The next packet to send: the priority queue first.
    pub fn pop(&mut self) -> Option<u32> {
        self.pop_with_len().map(|(p, _)| p)
    }

    /// As [`PortQueue::pop`], with the length in bytes the packet was queued with.
    pub fn pop_with_len(&mut self) -> Option<(u32, u32)> {
        if let Some((p, l)) = self.priority.pop_front() {
            self.priority_bytes -= u64::from(l);
            return Some((p, l));
        }
        let (p, l) = self.normal.pop_front()?;
        self.normal_bytes -= u64::from(l);
        Some((p, l))
    }

    /// The next packet of the priority queue alone, with its queued length (what a port
    /// whose normal class is paused by PFC may still send).
    pub fn pop_priority_with_len(&mut self) -> Option<(u32, u32)> {
        let (p, l) = self.priority.pop_front()?;
        self.priority_bytes -= u64::from(l);
        Some((p, l))
    }

    /// The `(packet, length)` entry [`PortQueue::pop_with_len`] would return next.
    pub fn peek(&self) -> Option<&(u32, u32)> {
        self.priority.front().or_else(|| self.normal.front())
    }

    /// Removes every packet (link down); returns the handles.
    pub fn drain(&mut self) -> Vec<u32> {
        self.normal_bytes = 0;
        self.priority_bytes = 0;
        self.priority
            .drain(..)
            .chain(self.normal.drain(..))
            .map(|(p, _)| p)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn red_probability_is_linear_between_kmin_and_kmax() {
        let e = EcnConfig::Red {
            kmin_bytes: 100,
            kmax_bytes: 300,
            pmax: 0.2,
        };
        assert_eq!(e.probability(99), 0.0);
        assert_eq!(e.probability(100), 0.0);
        assert_eq!(e.probability(200), 0.1);
        assert_eq!(e.probability(300), 1.0);
    }

    /// A 4000-byte trimmable data packet, ECN-capable or not (RED coin 0.5).
    fn data(ect: bool) -> Arrival {
        Arrival {
            len: 4_000,
            trimmable: true,
            control: false,
            ect,
            coin: 0.5,
        }
    }

    /// A 100-byte control packet (SACK/NACK), ECN-capable.
    fn control() -> Arrival {
        Arrival {
            len: 100,
            trimmable: false,
            control: true,
            ect: true,
            coin: 0.5,
        }
    }

    #[test]
    fn admission_drop_tail_trim_and_marking() {
        let mut st = PortStats::default();
        let mut q = PortQueue::default();
        let cfg = QueueConfig {
            buffer_bytes: 10_000,
            ecn: EcnConfig::Threshold { k_bytes: 4_000 },
            trim_threshold_bytes: None,
            priority_buffer_bytes: 1_000,
            control_priority: true,
        };
        assert_eq!(
            q.admit(&cfg, data(true), &mut st),
            Admit::Normal { mark_ce: false }
        );
        q.push_normal(1, 4_000, &mut st);
        assert_eq!(
            q.admit(&cfg, data(true), &mut st),
            Admit::Normal { mark_ce: true }
        );
        assert_eq!(
            q.admit(&cfg, data(false), &mut st),
            Admit::Normal { mark_ce: false }
        );
        q.push_normal(2, 4_000, &mut st);
        assert_eq!(q.admit(&cfg, data(true), &mut st), Admit::Drop);
        let trim = QueueConfig {
            trim_threshold_bytes: Some(8_000),
            ..cfg
        };
        assert_eq!(q.admit(&trim, data(true), &mut st), Admit::Trim);
        assert_eq!(q.admit(&trim, control(), &mut st), Admit::Priority);
        q.push_priority(3, 100);
        assert_eq!(q.peek(), Some(&(3, 100)));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.peek(), Some(&(1, 4_000)));
        assert_eq!(q.pop_with_len(), Some((1, 4_000)));
        assert_eq!(q.normal_bytes(), 4_000);
        assert_eq!(st.max_queue_bytes, 8_000);
        assert_eq!(st.queue_histogram().len(), 6);
        // 8000 at 2 significant figures: its bucket's highest value is 8031, but no depth
        // above 8000 was seen.
        assert_eq!(st.queue_histogram().value_at_quantile(1.0), 8_031);
        assert_eq!(st.queue_quantile_bytes(1.0), 8_000);
    }

    /// Cached samples (counted per value, evicted into the histogram on a collision,
    /// the rest pending) give the histogram that recording each sample directly gives:
    /// repeated values, colliding values, a value beyond 32 bits.
    #[test]
    fn cached_queue_samples_equal_direct_recording() {
        let mut st = PortStats::default();
        let mut direct = Histogram::<u64>::new(2).unwrap();
        let mut samples: Vec<u64> = (0..300u64).map(|i| (i % 13) * 4_210).collect();
        samples.extend((0..200u64).map(|i| (i * 7919) % 200_000));
        samples.push(5 << 32);
        samples.extend([0, 0, 8_420]);
        for (i, &q) in samples.iter().enumerate() {
            st.record_queue_bytes(q);
            direct.record(q).unwrap();
            if i % 50 == 0 {
                assert_eq!(st.queue_histogram(), direct);
            }
        }
        assert_eq!(st.queue_histogram(), direct);
        assert_eq!(st.queue_histogram().len(), 504);
        assert!(st.pending != SampleCache::default());
        assert_eq!(st.queue_quantile_bytes(0.5), direct.value_at_quantile(0.5));
        assert_eq!(
            st.queue_quantile_bytes(0.99),
            direct.value_at_quantile(0.99)
        );
        st.flush_pending();
        assert_eq!(st.pending, SampleCache::default());
        assert_eq!(st.queue_hist, direct);
        assert_eq!(
            st.queue_quantile_bytes(0.99),
            direct.value_at_quantile(0.99)
        );
    }
}
