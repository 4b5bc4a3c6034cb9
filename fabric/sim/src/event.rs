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
//!      v  FIFO list of chunks          v
//!      [..][..][..][..] ... [..][..][..]    far: BinaryHeap of (time_ns, seq, kind) at
//!      bitmap: one bit per non-empty slot    t >= base+W (or before base_ns)
//!
//!   chunks: [kind kind kind kind kind | next]   one 64-byte line each, [`CHUNK_EVENTS`]
//!           events; one pool for every slot's list; freed chunks are reused first (LIFO)
//! ```
//!
//! A slot's events sit five to a cache line: popping and looking ahead walk a line at a
//! time, and the next chunk is prefetched while the current one is read (a list of single
//! events made every look-ahead a dependent load from a cold line; a vector per slot kept
//! every slot's largest burst allocated, megabytes spread over the wheel).
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

use super::prefetch::prefetch;

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
    /// As [`EventKind::Arrive`], on a fabric with PFC ([`super::pfc`]): a switch counts
    /// the frame against its ingress port. Its own kind, so that the event loop's dispatch
    /// already tells the two apart and a run without PFC tests nothing per arrival.
    ArriveLossless {
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
    /// A PFC PAUSE frame ([`super::pfc`], IEEE 802.1Qbb) reaches `port` of `node`: it
    /// pauses that port's transmitter for `quanta` x 512 bit times (0: XON, resume now).
    Pause {
        /// Node whose transmitter is paused.
        node: u32,
        /// Its port (the one the PAUSE arrived on).
        port: u16,
        /// Pause time, quanta of 512 bit times.
        quanta: u16,
    },
    /// The pause time of `port` of `node` may have expired (ignored if a later PAUSE or an
    /// XON changed it).
    PauseExpiry {
        /// Node.
        node: u32,
        /// Port of that node.
        port: u16,
    },
    /// Ingress `port` of `node` sends its PAUSE again if it still holds XOFF (half the pause
    /// time after the last one).
    PauseRefresh {
        /// Node.
        node: u32,
        /// Ingress port of that node.
        port: u16,
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

/// Events [`EventQueue::peek_now`] returns.
pub const PEEK_EVENTS: usize = 4;

/// Events per chunk: five 12-byte kinds and the link fill one 64-byte line.
pub const CHUNK_EVENTS: usize = 5;

/// Up to [`CHUNK_EVENTS`] events of one slot in scheduling order, and the next chunk of
/// the slot's list (or of the free list).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Chunk {
    kinds: [EventKind; CHUNK_EVENTS],
    next: u32,
}

const BLANK: Chunk = Chunk {
    kinds: [EventKind::HostWake { host: 0 }; CHUNK_EVENTS],
    next: NIL,
};

/// One instant's events: the chunks `head ..= tail` of a list; the next event is
/// `head`'s `head_i`-th, the last `tail`'s `(tail_len - 1)`-th. `head == NIL` when empty.
#[derive(Clone, Copy, Debug)]
struct Slot {
    head: u32,
    tail: u32,
    head_i: u32,
    tail_len: u32,
}

const EMPTY: Slot = Slot {
    head: NIL,
    tail: NIL,
    head_i: 0,
    tail_len: 0,
};

/// Min-queue of events by `(time_ns, scheduling order)`: a timing wheel with a heap
/// behind it.
#[derive(Debug)]
pub struct EventQueue {
    /// An array, not a vector: a slot index masked to the wheel needs no bounds check.
    slots: Box<[Slot; WHEEL_SLOTS]>,
    chunks: Vec<Chunk>,
    /// First free chunk, [`NIL`] when every chunk is in use.
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
            slots: Box::new([EMPTY; WHEEL_SLOTS]),
            chunks: Vec::new(),
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
                let Slot { tail, tail_len, .. } = self.slots[i];
                if tail == NIL {
                    let c = self.new_chunk();
                    self.slots[i] = Slot {
                        head: c,
                        tail: c,
                        head_i: 0,
                        tail_len: 1,
                    };
                    self.chunks[c as usize].kinds[0] = kind;
                    self.occupied[i / 64] |= 1 << (i % 64);
                } else if let Some(k) = self.chunks[tail as usize].kinds.get_mut(tail_len as usize)
                {
                    // Room in the tail chunk (`tail_len < CHUNK_EVENTS`).
                    *k = kind;
                    self.slots[i].tail_len = tail_len + 1;
                } else {
                    let c = self.new_chunk();
                    self.chunks[tail as usize].next = c;
                    self.chunks[c as usize].kinds[0] = kind;
                    let slot = &mut self.slots[i];
                    slot.tail = c;
                    slot.tail_len = 1;
                }
                self.wheel_len += 1;
            }
            _ => {
                let seq = self.far_seq;
                self.far_seq += 1;
                self.far.push(FarEvent { time_ns, seq, kind });
            }
        }
    }

    /// A chunk with no successor (its kinds are stale until written): the last freed one,
    /// or a new one.
    #[inline(always)]
    fn new_chunk(&mut self) -> u32 {
        match self.chunks.get_mut(self.free as usize) {
            Some(c) => {
                let i = self.free;
                self.free = c.next;
                c.next = NIL;
                i
            }
            None => {
                self.chunks.push(BLANK);
                (self.chunks.len() - 1) as u32
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

    /// Removes the first event of wheel slot `i`, which holds one (clearing the slot and
    /// its bit when it was the last); a chunk read to its end goes to the free list.
    #[inline(always)]
    fn take_head(&mut self, i: usize) -> EventKind {
        let slot = self.slots[i];
        let c = slot.head as usize;
        let chunk = &self.chunks[c];
        let kind = chunk.kinds[slot.head_i as usize];
        let next = chunk.next;
        let head_i = slot.head_i + 1;
        if slot.head == slot.tail && head_i == slot.tail_len {
            self.slots[i] = EMPTY;
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.free_chunk(c);
        } else if head_i as usize == CHUNK_EVENTS {
            self.slots[i].head = next;
            self.slots[i].head_i = 0;
            self.free_chunk(c);
        } else {
            self.slots[i].head_i = head_i;
        }
        self.wheel_len -= 1;
        kind
    }

    /// Puts chunk `c` at the front of the free list.
    #[inline(always)]
    fn free_chunk(&mut self, c: usize) {
        self.chunks[c].next = self.free;
        self.free = c as u32;
    }

    /// The earliest event, removed.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        self.pop_until(u64::MAX)
    }

    /// The earliest event if it is due at or before `limit_ns`, removed; `None` when the
    /// queue is empty or its earliest event is later (it stays queued). The last popped
    /// instant is never later than a limit it was popped under, so only the slow path
    /// compares.
    #[inline]
    pub fn pop_until(&mut self, limit_ns: u64) -> Option<Event> {
        // Fast path: more events at the last popped instant, none due from the heap first
        // (a heap event at this instant was scheduled before every wheel event of it).
        let i = (self.base_ns as usize) & (WHEEL_SLOTS - 1);
        if self.slots[i].head != NIL
            && self.far.peek().is_none_or(|f| f.time_ns > self.base_ns)
            && self.base_ns <= limit_ns
        {
            let kind = self.take_head(i);
            self.popped += 1;
            return Some(Event {
                time_ns: self.base_ns,
                kind,
            });
        }
        self.pop_slow(limit_ns)
    }

    /// [`EventQueue::pop_until`] when the current instant has no wheel event left first.
    #[inline(never)]
    fn pop_slow(&mut self, limit_ns: u64) -> Option<Event> {
        let wheel = self.first_slot();
        let from_far = match (wheel, self.far.peek()) {
            (None, None) => return None,
            (None, Some(f)) if f.time_ns > limit_ns => return None,
            (None, Some(_)) => true,
            (Some((_, t)), None) if t > limit_ns => return None,
            (Some(_), None) => false,
            // At one instant the heap's events came first (see the module docs).
            (Some((_, t)), Some(f)) if t.min(f.time_ns) > limit_ns => return None,
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
            let kind = self.take_head(i);
            Event { time_ns, kind }
        };
        self.base_ns = self.base_ns.max(e.time_ns);
        self.popped += 1;
        Some(e)
    }

    /// The next [`PEEK_EVENTS`] events of the current instant (the next one first), as far
    /// as they wait in the wheel slot of the last popped time: a cheap look-ahead for
    /// prefetching, which ignores the heap (so it may miss an event, never invents one).
    /// The slot's next chunk is prefetched: the look-ahead reaches it within a few events.
    #[inline]
    pub fn peek_now(&self) -> [Option<&EventKind>; PEEK_EVENTS] {
        let mut out = [None; PEEK_EVENTS];
        let slot = &self.slots[(self.base_ns as usize) & (WHEEL_SLOTS - 1)];
        let Some(chunk) = self.chunks.get(slot.head as usize) else {
            return out;
        };
        let last = slot.head == slot.tail;
        let len = if last {
            slot.tail_len as usize
        } else {
            CHUNK_EVENTS
        };
        let i = slot.head_i as usize;
        let next = self.chunks.get(chunk.next as usize);
        if let Some(n) = next {
            prefetch(n);
        }
        for (k, o) in out.iter_mut().enumerate() {
            let j = i + k;
            *o = if j < len {
                chunk.kinds.get(j)
            } else if last {
                None
            } else {
                // The next chunk: full unless it is the tail (then `tail_len` events).
                let n_len = if chunk.next == slot.tail {
                    slot.tail_len as usize
                } else {
                    CHUNK_EVENTS
                };
                next.and_then(|n| n.kinds.get(j - len).filter(|_| j - len < n_len))
            };
        }
        out
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

    /// The look-ahead sees the current instant's wheel events in order, across chunks, and
    /// nothing past them.
    #[test]
    fn peek_now_walks_the_current_instant() {
        let wake = |host| EventKind::HostWake { host };
        let mut q = EventQueue::new();
        q.push(3, wake(0));
        // Seven events at 7: a full chunk and two in the next.
        for host in 1..8 {
            q.push(7, wake(host));
        }
        q.push(9, wake(9));
        assert_eq!(q.peek_now(), [None; PEEK_EVENTS]);
        assert_eq!(q.pop().map(|e| e.time_ns), Some(3));
        // Base now 3: the slot of 3 is empty (its chunk is free again).
        assert_eq!(q.peek_now(), [None; PEEK_EVENTS]);
        assert_eq!(
            q.pop(),
            Some(Event {
                time_ns: 7,
                kind: wake(1)
            })
        );
        // Events 2..=5 of 7: the first chunk's last four.
        assert_eq!(
            q.peek_now(),
            [
                Some(&wake(2)),
                Some(&wake(3)),
                Some(&wake(4)),
                Some(&wake(5))
            ]
        );
        assert_eq!(q.pop().map(|e| e.kind), Some(wake(2)));
        assert_eq!(q.pop().map(|e| e.kind), Some(wake(3)));
        // Across the chunk boundary: 4, 5, then 6, 7 in the tail chunk, and no further.
        assert_eq!(
            q.peek_now(),
            [
                Some(&wake(4)),
                Some(&wake(5)),
                Some(&wake(6)),
                Some(&wake(7))
            ]
        );
        assert_eq!(q.pop().map(|e| e.kind), Some(wake(4)));
        assert_eq!(
            q.peek_now(),
            [Some(&wake(5)), Some(&wake(6)), Some(&wake(7)), None]
        );
        assert_eq!(q.pop().map(|e| e.kind), Some(wake(5)));
        // The first chunk of 7 was read to its end and freed; a late event at 7 joins
        // the tail chunk.
        q.push(7, wake(8));
        assert_eq!(
            q.peek_now(),
            [Some(&wake(6)), Some(&wake(7)), Some(&wake(8)), None]
        );
        // Chunks: one each for 3 and 9, two for 7; none allocated since (the late event
        // joined 7's tail chunk).
        assert_eq!(q.chunks.len(), 4);
        assert_eq!(q.len(), 4);
        let rest: Vec<(u64, EventKind)> =
            std::iter::from_fn(|| q.pop().map(|e| (e.time_ns, e.kind))).collect();
        assert_eq!(
            rest,
            vec![(7, wake(6)), (7, wake(7)), (7, wake(8)), (9, wake(9))]
        );
    }

    /// Crowded instants (long lists of many chunks, emptied and refilled while popping):
    /// pops and the look-ahead equal a model's.
    #[test]
    fn crowded_instants_span_chunks() {
        use rand::{Rng, SeedableRng};
        use std::collections::VecDeque;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut q = EventQueue::new();
        // Per instant, its events in scheduling order.
        let mut model: std::collections::BTreeMap<u64, VecDeque<EventKind>> = Default::default();
        let mut now = 0u64;
        let mut longest = 0;
        for step in 0..100_000u32 {
            // Pushes slightly ahead of pops: instants fill up, then drain.
            if rng.random_range(0..100) < 52 {
                let t = now + rng.random_range(0..3);
                let kind = EventKind::Arrive {
                    node: step,
                    port: (step % 7) as u16,
                    pkt: step / 3,
                };
                q.push(t, kind);
                let list = model.entry(t).or_default();
                list.push_back(kind);
                longest = longest.max(list.len());
            } else {
                let first = model.keys().next().copied();
                let want = first.and_then(|t| {
                    let list = model.get_mut(&t)?;
                    let kind = list.pop_front()?;
                    if list.is_empty() {
                        model.remove(&t);
                    }
                    Some(Event { time_ns: t, kind })
                });
                assert_eq!(q.pop(), want);
                if let Some(e) = want {
                    now = e.time_ns;
                }
                let at_now = model.get(&now);
                let expect: [Option<&EventKind>; PEEK_EVENTS] =
                    std::array::from_fn(|k| at_now.and_then(|l| l.get(k)));
                assert_eq!(q.peek_now(), expect, "step {step}");
            }
        }
        assert_eq!(q.len(), model.values().map(VecDeque::len).sum::<usize>());
        // The script did crowd instants: lists of hundreds of chunks were built and read.
        assert!(
            longest > 100 * CHUNK_EVENTS,
            "longest instant: {longest} events"
        );
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

#[cfg(test)]
mod layout_tests {
    use super::*;

    /// Five kinds and the link fill one 64-byte line ([`CHUNK_EVENTS`]): a kind is 12
    /// bytes, PFC's kinds included.
    #[test]
    fn an_event_kind_is_12_bytes_and_a_chunk_one_line() {
        assert_eq!(std::mem::size_of::<EventKind>(), 12);
        assert_eq!(std::mem::size_of::<Chunk>(), 64);
    }
}
