//! The event queue, ordered by `(time_ns, seq)`, where `seq` is the order of scheduling, so
//! events at the same nanosecond run in the order they were scheduled and a run is
//! reproducible.
//!
//! Most events of a packet simulation fall a few hundred ns ahead of now (serialisation and
//! propagation), so the queue is a timing wheel of [`WHEEL_SLOTS`] one-nanosecond slots
//! (Varghese and Lauck, "Hashed and hierarchical timing wheels", SOSP 1987) backed by a
//! binary heap for the rest:
//!
//! ```text
//!   base_ns                       base_ns + WHEEL_SLOTS
//!      |  slot (t mod WHEEL_SLOTS)     |
//!      v  FIFO of (seq, kind)          v
//!      [..][..][..][..] ... [..][..][..]    far: BinaryHeap of events at t >= base+W
//!      bitmap: one bit per non-empty slot   (or before base_ns)
//! ```
//!
//! Every wheel event has `base_ns <= time_ns < base_ns + WHEEL_SLOTS`, so a slot holds
//! events of one instant only, in scheduling order. `pop` takes the earlier of the first
//! non-empty slot (found through the bitmap) and the heap top, comparing `(time_ns, seq)`:
//! the order is exactly the one a single heap would give.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens at an event. Node, port and packet handles are indices into the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Packet `pkt` arrives at `node` on its port `port` (after serialisation + propagation).
    Arrive {
        /// Receiving node.
        node: u32,
        /// Ingress port of that node.
        port: u16,
        /// Packet slab index.
        pkt: u32,
    },
    /// `port` of `node` finished serialising its packet and may start the next.
    TxDone {
        /// Node.
        node: u32,
        /// Port of that node.
        port: u16,
    },
    /// Host `host` runs its transport timers and tries to send.
    HostWake {
        /// Host index.
        host: u32,
    },
    /// Flow `flow` starts: its sender's NIC is asked for data.
    FlowStart {
        /// Flow index.
        flow: u32,
    },
    /// Scheduled fault number `index` takes effect.
    Fault {
        /// Index into the scenario's fault list.
        index: u32,
    },
}

/// One scheduled event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// When, ns of virtual time.
    pub time_ns: u64,
    /// Scheduling order (tie-breaker).
    pub seq: u64,
    /// What.
    pub kind: EventKind,
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we pop the earliest.
        (other.time_ns, other.seq).cmp(&(self.time_ns, self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Slots of the timing wheel (one ns each): the horizon of the wheel, ns.
pub const WHEEL_SLOTS: usize = 1 << 13;
const WORDS: usize = WHEEL_SLOTS / 64;

/// One instant's events in scheduling order; `head` is the next to pop.
#[derive(Debug, Default)]
struct Slot {
    items: Vec<(u64, EventKind)>,
    head: usize,
}

/// Min-queue of events by `(time_ns, seq)`: a timing wheel with a heap behind it.
#[derive(Debug)]
pub struct EventQueue {
    slots: Vec<Slot>,
    /// Bit `i` set: slot `i` holds events.
    occupied: [u64; WORDS],
    /// Earliest time a wheel event can have, ns (the last popped time).
    base_ns: u64,
    wheel_len: usize,
    far: BinaryHeap<Event>,
    next_seq: u64,
    popped: u64,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            slots: (0..WHEEL_SLOTS).map(|_| Slot::default()).collect(),
            occupied: [0; WORDS],
            base_ns: 0,
            wheel_len: 0,
            far: BinaryHeap::new(),
            next_seq: 0,
            popped: 0,
        }
    }
}

impl EventQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `kind` at `time_ns`.
    pub fn push(&mut self, time_ns: u64, kind: EventKind) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match time_ns.checked_sub(self.base_ns) {
            Some(d) if d < WHEEL_SLOTS as u64 => {
                let i = (time_ns as usize) & (WHEEL_SLOTS - 1);
                self.slots[i].items.push((seq, kind));
                self.occupied[i / 64] |= 1 << (i % 64);
                self.wheel_len += 1;
            }
            _ => self.far.push(Event { time_ns, seq, kind }),
        }
    }

    /// The first non-empty slot at or after `base_ns`: its index and time.
    fn first_slot(&self) -> Option<(usize, u64)> {
        if self.wheel_len == 0 {
            return None;
        }
        let start = (self.base_ns as usize) & (WHEEL_SLOTS - 1);
        let (w0, b0) = (start / 64, start % 64);
        // The start word from bit b0, the other words in order, the start word's low bits.
        let first = self.occupied[w0] & (!0u64 << b0);
        let found = if first != 0 {
            Some(w0 * 64 + first.trailing_zeros() as usize)
        } else {
            (1..=WORDS).find_map(|k| {
                let w = (w0 + k) % WORDS;
                let bits = self.occupied[w];
                (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
            })
        }?;
        let offset = (found + WHEEL_SLOTS - start) & (WHEEL_SLOTS - 1);
        Some((found, self.base_ns + offset as u64))
    }

    /// Removes the next event of wheel slot `i`, which holds one (clearing the slot and its
    /// bit when it was the last).
    #[inline(always)]
    fn take_from_slot(&mut self, i: usize) -> (u64, EventKind) {
        let slot = &mut self.slots[i];
        let e = slot.items[slot.head];
        slot.head += 1;
        if slot.head == slot.items.len() {
            // A slot that once spilled keeps its heap buffer: crowded instants recur (hosts
            // in step send frames of one size), and reallocating each time costs more.
            slot.items.clear();
            slot.head = 0;
            self.occupied[i / 64] &= !(1 << (i % 64));
        }
        self.wheel_len -= 1;
        e
    }

    /// The earliest event, removed.
    pub fn pop(&mut self) -> Option<Event> {
        // Fast path: more events at the last popped instant, none due from the heap first
        // (a heap event at this instant was scheduled before any wheel event of it, when
        // the instant was beyond the horizon, so it has the smaller `seq`).
        let i = (self.base_ns as usize) & (WHEEL_SLOTS - 1);
        let slot = &mut self.slots[i];
        if slot.head < slot.items.len() && self.far.peek().is_none_or(|f| f.time_ns > self.base_ns)
        {
            let (seq, kind) = self.take_from_slot(i);
            self.popped += 1;
            return Some(Event {
                time_ns: self.base_ns,
                seq,
                kind,
            });
        }
        let wheel = self.first_slot();
        let from_far = match (wheel, self.far.peek()) {
            (None, None) => return None,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some((i, t)), Some(f)) => {
                (f.time_ns, f.seq) < (t, self.slots[i].items[self.slots[i].head].0)
            }
        };
        let e = if from_far {
            self.far.pop()?
        } else {
            let (i, time_ns) = wheel?;
            let (seq, kind) = self.take_from_slot(i);
            Event { time_ns, seq, kind }
        };
        self.base_ns = self.base_ns.max(e.time_ns);
        self.popped += 1;
        Some(e)
    }

    /// The `k`-th next event of the current instant (`k = 0`: the next one), when it waits
    /// in the wheel slot of the last popped time: a cheap look-ahead for prefetching, which
    /// ignores the heap (so it may miss an event, never invents one).
    pub fn peek_now(&self, k: usize) -> Option<&EventKind> {
        let i = (self.base_ns as usize) & (WHEEL_SLOTS - 1);
        let slot = &self.slots[i];
        slot.items.get(slot.head + k).map(|(_, kind)| kind)
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<u64> {
        let w = self.first_slot().map(|(_, t)| t);
        let f = self.far.peek().map(|e| e.time_ns);
        match (w, f) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.wheel_len + self.far.len()
    }

    /// Whether no event waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events popped so far.
    pub fn processed(&self) -> u64 {
        self.popped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_scheduling_order() {
        let mut q = EventQueue::new();
        q.push(10, EventKind::HostWake { host: 1 });
        q.push(5, EventKind::HostWake { host: 2 });
        q.push(10, EventKind::HostWake { host: 3 });
        q.push(5, EventKind::HostWake { host: 4 });
        let order: Vec<(u64, EventKind)> =
            std::iter::from_fn(|| q.pop().map(|e| (e.time_ns, e.kind))).collect();
        assert_eq!(
            order,
            vec![
                (5, EventKind::HostWake { host: 2 }),
                (5, EventKind::HostWake { host: 4 }),
                (10, EventKind::HostWake { host: 1 }),
                (10, EventKind::HostWake { host: 3 }),
            ]
        );
        assert_eq!(q.processed(), 4);
        assert!(q.is_empty());
    }

    /// Pops of the wheel must equal those of a plain heap ordered by `(time_ns, seq)`, for
    /// events near now, beyond the wheel's horizon, exactly at it, and in the past.
    #[test]
    fn wheel_pops_like_a_heap() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut q = EventQueue::new();
        let mut model = BinaryHeap::new();
        let mut seq = 0u64;
        let mut now = 0u64;
        let w = WHEEL_SLOTS as u64;
        let mut popped = 0u64;
        for step in 0..200_000u32 {
            if rng.random_range(0..100) < 55 {
                let time_ns = match rng.random_range(0..10) {
                    0 => now + rng.random_range(0..4 * w),
                    1 => now + w,
                    2 => now + w - 1,
                    3 => now.saturating_sub(rng.random_range(0..50)),
                    4 => now,
                    _ => now + rng.random_range(0..700),
                };
                let kind = EventKind::HostWake { host: step };
                q.push(time_ns, kind);
                model.push(Event { time_ns, seq, kind });
                seq += 1;
            } else {
                assert_eq!(q.peek_time(), model.peek().map(|e| e.time_ns));
                let got = q.pop();
                assert_eq!(got, model.pop());
                if let Some(e) = got {
                    now = now.max(e.time_ns);
                    popped += 1;
                }
            }
            assert_eq!(q.len(), model.len());
        }
        while let Some(e) = model.pop() {
            assert_eq!(q.pop(), Some(e));
            popped += 1;
        }
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
        assert_eq!(q.processed(), popped);
    }
}
