//! The event queue, ordered by `(time_ns, scheduling order)`: events at the same
//! nanosecond run in the order they were scheduled, so a run is reproducible.
//!
//! Most events of a packet simulation fall a few hundred ns ahead of now (serialisation and
//! propagation), so the queue is a timing wheel of [`WHEEL_SLOTS`] one-nanosecond slots
//! (Varghese and Lauck, "Hashed and hierarchical timing wheels", SOSP 1987) backed by a
//! binary heap for the rest:
//!
//! ```text
//!   base_ns                       base_ns + WHEEL_SLOTS
//!      |  slot (t mod WHEEL_SLOTS)     |
//!      v  (head, tail) of a FIFO list  v
//!      [..][..][..][..] ... [..][..][..]    far: BinaryHeap of (time_ns, seq, kind) at
//!      bitmap: one bit per non-empty slot    t >= base+W (or before base_ns)
//!
//!   nodes: [kind | next] ...   one pool for every slot's list; freed nodes are reused
//!                              first (LIFO), so the nodes in use stay in cache
//! ```
//!
//! Every wheel event has `base_ns <= time_ns < base_ns + WHEEL_SLOTS`, so a slot holds
//! events of one instant only, in scheduling order. A heap event at time `t` was always
//! scheduled before every wheel event at `t`: it went to the heap because `t` was beyond
//! the horizon (which only moves forward) or already past (and then no wheel event can
//! be at `t`). So `pop` takes the heap top when its time is at most the first non-empty
//! slot's, the slot's head otherwise, and no wheel event needs a sequence number: the
//! order is exactly the one a single heap ordered by `(time_ns, seq)` gives (tested
//! against one below).

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

/// One scheduled event, as [`EventQueue::pop`] returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// When, ns of virtual time.
    pub time_ns: u64,
    /// What.
    pub kind: EventKind,
}

/// An event beyond the wheel's horizon: `seq` orders the heap's events of one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FarEvent {
    time_ns: u64,
    seq: u64,
    kind: EventKind,
}

impl Ord for FarEvent {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we pop the earliest.
        (other.time_ns, other.seq).cmp(&(self.time_ns, self.seq))
    }
}

impl PartialOrd for FarEvent {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Slots of the timing wheel (one ns each): the horizon of the wheel, ns.
pub const WHEEL_SLOTS: usize = 1 << 13;
const WORDS: usize = WHEEL_SLOTS / 64;
/// End of a list.
const NIL: u32 = u32::MAX;

/// A wheel event in the node pool: its kind and the next node of its slot's list (or of
/// the free list).
#[derive(Clone, Copy, Debug)]
struct Node {
    kind: EventKind,
    next: u32,
}

/// Hints the CPU to load node `p` (never dereferenced: any address is harmless).
#[inline(always)]
fn prefetch_node(p: *const Node) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is a hint that never
        // faults nor reads into the program, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// First and last node of one instant's events, [`NIL`] when empty.
#[derive(Clone, Copy, Debug)]
struct Slot {
    head: u32,
    tail: u32,
}

const EMPTY: Slot = Slot {
    head: NIL,
    tail: NIL,
};

/// Min-queue of events by `(time_ns, scheduling order)`: a timing wheel with a heap
/// behind it.
#[derive(Debug)]
pub struct EventQueue {
    slots: Vec<Slot>,
    nodes: Vec<Node>,
    /// First free node, [`NIL`] when every node is in use.
    free: u32,
    /// Bit `i` set: slot `i` holds events.
    occupied: [u64; WORDS],
    /// Earliest time a wheel event can have, ns (the last popped time).
    base_ns: u64,
    wheel_len: usize,
    far: BinaryHeap<FarEvent>,
    far_seq: u64,
    popped: u64,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            slots: vec![EMPTY; WHEEL_SLOTS],
            nodes: Vec::new(),
            free: NIL,
            occupied: [0; WORDS],
            base_ns: 0,
            wheel_len: 0,
            far: BinaryHeap::new(),
            far_seq: 0,
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
    #[inline(always)]
    pub fn push(&mut self, time_ns: u64, kind: EventKind) {
        match time_ns.checked_sub(self.base_ns) {
            Some(d) if d < WHEEL_SLOTS as u64 => {
                let i = (time_ns as usize) & (WHEEL_SLOTS - 1);
                let n = self.new_node(kind);
                let slot = &mut self.slots[i];
                if slot.tail == NIL {
                    slot.head = n;
                    self.occupied[i / 64] |= 1 << (i % 64);
                } else {
                    self.nodes[slot.tail as usize].next = n;
                }
                slot.tail = n;
                self.wheel_len += 1;
            }
            _ => {
                let seq = self.far_seq;
                self.far_seq += 1;
                self.far.push(FarEvent { time_ns, seq, kind });
            }
        }
    }

    /// A node holding `kind` and no successor: the last freed one, or a new one.
    #[inline(always)]
    fn new_node(&mut self, kind: EventKind) -> u32 {
        let node = Node { kind, next: NIL };
        match self.nodes.get_mut(self.free as usize) {
            Some(n) => {
                let i = self.free;
                self.free = n.next;
                *n = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
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

    /// Removes the first event of wheel slot `i`, whose head is node `n` (clearing the
    /// slot and its bit when it was the last); the node goes to the free list.
    #[inline(always)]
    fn take_head(&mut self, i: usize, n: u32) -> EventKind {
        let node = self.nodes[n as usize];
        let slot = &mut self.slots[i];
        slot.head = node.next;
        if node.next == NIL {
            slot.tail = NIL;
            self.occupied[i / 64] &= !(1 << (i % 64));
        }
        self.nodes[n as usize].next = self.free;
        self.free = n;
        self.wheel_len -= 1;
        node.kind
    }

    /// The earliest event, removed.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        // Fast path: more events at the last popped instant, none due from the heap first
        // (a heap event at this instant was scheduled before every wheel event of it).
        let i = (self.base_ns as usize) & (WHEEL_SLOTS - 1);
        let head = self.slots[i].head;
        if head != NIL && self.far.peek().is_none_or(|f| f.time_ns > self.base_ns) {
            let kind = self.take_head(i, head);
            self.popped += 1;
            return Some(Event {
                time_ns: self.base_ns,
                kind,
            });
        }
        self.pop_slow()
    }

    /// [`EventQueue::pop`] when the current instant has no wheel event left first.
    #[inline(never)]
    fn pop_slow(&mut self) -> Option<Event> {
        let wheel = self.first_slot();
        let from_far = match (wheel, self.far.peek()) {
            (None, None) => return None,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            // At one instant the heap's events came first (see the module docs).
            (Some((_, t)), Some(f)) => f.time_ns <= t,
        };
        let e = if from_far {
            let f = self.far.pop()?;
            Event {
                time_ns: f.time_ns,
                kind: f.kind,
            }
        } else {
            let (i, time_ns) = wheel?;
            let kind = self.take_head(i, self.slots[i].head);
            Event { time_ns, kind }
        };
        self.base_ns = self.base_ns.max(e.time_ns);
        self.popped += 1;
        Some(e)
    }

    /// The next two events of the current instant (the next one first), when they wait in
    /// the wheel slot of the last popped time: a cheap look-ahead for prefetching, which
    /// ignores the heap (so it may miss an event, never invents one). The node of the
    /// event after them is prefetched: a slot's list is linked through the pool, and the
    /// next call reads that node.
    #[inline]
    pub fn peek_now(&self) -> [Option<&EventKind>; 2] {
        let i = (self.base_ns as usize) & (WHEEL_SLOTS - 1);
        let Some(first) = self.nodes.get(self.slots[i].head as usize) else {
            return [None, None];
        };
        let second = self.nodes.get(first.next as usize);
        if let Some(n) = second {
            prefetch_node(self.nodes.as_ptr().wrapping_add(n.next as usize));
        }
        [Some(&first.kind), second.map(|n| &n.kind)]
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

    /// The look-ahead sees the current instant's wheel events in order, and nothing past
    /// them.
    #[test]
    fn peek_now_walks_the_current_instant() {
        let mut q = EventQueue::new();
        q.push(3, EventKind::HostWake { host: 0 });
        for host in 1..4 {
            q.push(7, EventKind::HostWake { host });
        }
        q.push(9, EventKind::HostWake { host: 9 });
        assert_eq!(q.peek_now(), [None, None]);
        assert_eq!(q.pop().map(|e| e.time_ns), Some(3));
        // Base now 3: the slot of 3 is empty.
        assert_eq!(q.peek_now(), [None, None]);
        assert_eq!(
            q.pop(),
            Some(Event {
                time_ns: 7,
                kind: EventKind::HostWake { host: 1 }
            })
        );
        assert_eq!(
            q.peek_now(),
            [
                Some(&EventKind::HostWake { host: 2 }),
                Some(&EventKind::HostWake { host: 3 })
            ]
        );
        assert_eq!(
            q.pop().map(|e| e.kind),
            Some(EventKind::HostWake { host: 2 })
        );
        assert_eq!(q.peek_now(), [Some(&EventKind::HostWake { host: 3 }), None]);
        // Freed nodes are reused: the pool never grew past the 5 events pushed.
        q.push(7, EventKind::HostWake { host: 4 });
        assert_eq!(
            q.peek_now(),
            [
                Some(&EventKind::HostWake { host: 3 }),
                Some(&EventKind::HostWake { host: 4 })
            ]
        );
        assert_eq!(q.nodes.len(), 5);
        assert_eq!(q.len(), 3);
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
                model.push(FarEvent { time_ns, seq, kind });
                seq += 1;
            } else {
                assert_eq!(q.peek_time(), model.peek().map(|e| e.time_ns));
                let got = q.pop();
                assert_eq!(
                    got,
                    model.pop().map(|f| Event {
                        time_ns: f.time_ns,
                        kind: f.kind
                    })
                );
                if let Some(e) = got {
                    now = now.max(e.time_ns);
                    popped += 1;
                }
            }
            assert_eq!(q.len(), model.len());
        }
        while let Some(f) = model.pop() {
            let e = Event {
                time_ns: f.time_ns,
                kind: f.kind,
            };
            assert_eq!(q.pop(), Some(e));
            popped += 1;
        }
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
        assert_eq!(q.processed(), popped);
    }
}
