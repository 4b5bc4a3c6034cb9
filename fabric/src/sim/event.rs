//! The event queue: a binary heap ordered by `(time_ns, seq)`, where `seq` is the order of
//! scheduling, so events at the same nanosecond run in the order they were scheduled and a
//! run is reproducible.

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

/// Min-queue of events by `(time_ns, seq)`.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Event>,
    next_seq: u64,
    popped: u64,
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
        self.heap.push(Event { time_ns, seq, kind });
    }

    /// The earliest event, removed.
    pub fn pop(&mut self) -> Option<Event> {
        let e = self.heap.pop();
        if e.is_some() {
            self.popped += 1;
        }
        e
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.time_ns)
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
}
