//! [`FakeDatapath`]: the [`Datapath`] over an in-memory network ([`FakeNet`]), so the
//! engine and everything above it build and test without sockets (eRPC's fake transport).
//! Delivery is immediate and in order per sender unless a filter drops, CE-marks,
//! duplicates or holds back (reorders) a datagram.

use super::{ConnTable, PortAllocator, PortLease};
use crate::datapath::{
    ConnId, Datapath, DatapathError, DatapathStats, PathMap, RxDatagram, TxBatch, TxReport, Waker,
};
use mrc_transport::Ecn;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// What the [`FakeNet`] filter does with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeVerdict {
    /// Deliver unchanged.
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver with ECN CE.
    MarkCe,
    /// Deliver twice, back to back.
    Duplicate,
    /// Hold back: delivered right after the next datagram to the same destination (so the
    /// two swap places), or after any later one if several are held.
    Hold,
}

/// The filter: sees (source, destination, bytes) of every datagram.
type Filter = Box<dyn FnMut(SocketAddr, SocketAddr, &[u8]) -> FakeVerdict + Send>;

struct Queue {
    datagrams: VecDeque<(SocketAddr, Ecn, Vec<u8>)>,
    woken: bool,
}

struct NetState {
    queues: HashMap<SocketAddr, Queue>,
    filter: Option<Filter>,
    dropped: u64,
    /// Datagrams held back ([`FakeVerdict::Hold`]) per destination, in order.
    held: HashMap<SocketAddr, Vec<(SocketAddr, Ecn, Vec<u8>)>>,
}

impl NetState {
    /// Queues `d` for `to` (counted dropped when `to` has no endpoint), then whatever was
    /// held back for `to`.
    fn deliver(&mut self, to: SocketAddr, d: (SocketAddr, Ecn, Vec<u8>)) {
        let held = self.held.remove(&to).unwrap_or_default();
        match self.queues.get_mut(&to) {
            Some(q) => {
                q.datagrams.push_back(d);
                q.datagrams.extend(held);
            }
            None => self.dropped += 1 + held.len() as u64,
        }
    }
}

struct NetInner {
    state: Mutex<NetState>,
    cv: Condvar,
}

/// An in-memory network of [`FakeDatapath`]s addressed by socket address. Cheap to clone.
#[derive(Clone)]
pub struct FakeNet {
    inner: Arc<NetInner>,
    ports: PortAllocator,
}

impl std::fmt::Debug for FakeNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNet").finish_non_exhaustive()
    }
}

impl Default for FakeNet {
    fn default() -> Self {
        FakeNet::new()
    }
}

impl FakeNet {
    /// An empty network; EV source ports come from its own allocator over 10000..=19999.
    pub fn new() -> Self {
        FakeNet {
            inner: Arc::new(NetInner {
                state: Mutex::new(NetState {
                    queues: HashMap::new(),
                    filter: None,
                    dropped: 0,
                    held: HashMap::new(),
                }),
                cv: Condvar::new(),
            }),
            ports: PortAllocator::new(10000..=19999).unwrap_or_else(|_| unreachable!()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, NetState> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs `filter`, called for every datagram sent from then on.
    pub fn set_filter(
        &self,
        filter: impl FnMut(SocketAddr, SocketAddr, &[u8]) -> FakeVerdict + Send + 'static,
    ) {
        self.lock().filter = Some(Box::new(filter));
    }

    /// Datagrams dropped (by the filter or for want of a receiver).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

struct FakeConn {
    peer: SocketAddr,
    leases: Vec<PortLease>,
}

struct FakeWaker {
    net: FakeNet,
    addr: SocketAddr,
}

impl Waker for FakeWaker {
    fn wake(&self) {
        let mut st = self.net.lock();
        if let Some(q) = st.queues.get_mut(&self.addr) {
            q.woken = true;
        }
        drop(st);
        self.net.inner.cv.notify_all();
    }
}

/// One endpoint on a [`FakeNet`].
pub struct FakeDatapath {
    net: FakeNet,
    addr: SocketAddr,
    /// Route of an EV: its socket index.
    conns: ConnTable<FakeConn, usize>,
    stats: DatapathStats,
    scratch: Vec<(SocketAddr, Ecn, Vec<u8>)>,
}

impl std::fmt::Debug for FakeDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeDatapath")
            .field("addr", &self.addr)
            .finish()
    }
}

impl FakeDatapath {
    /// An endpoint receiving at `addr` on `net`.
    pub fn new(net: &FakeNet, addr: SocketAddr) -> Self {
        net.lock().queues.insert(
            addr,
            Queue {
                datagrams: VecDeque::new(),
                woken: false,
            },
        );
        FakeDatapath {
            net: net.clone(),
            addr,
            conns: ConnTable::default(),
            stats: DatapathStats::default(),
            scratch: Vec::new(),
        }
    }
}

impl Drop for FakeDatapath {
    fn drop(&mut self) {
        self.net.lock().queues.remove(&self.addr);
    }
}

impl Datapath for FakeDatapath {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn open_conn(&mut self, peer: SocketAddr, paths: &PathMap) -> Result<ConnId, DatapathError> {
        paths.check_peer(self.addr, peer)?;
        let leases = (0..paths.sockets())
            .map(|_| self.net.ports.alloc())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self
            .conns
            .insert(FakeConn { peer, leases }, paths.socket_of()))
    }

    fn close_conn(&mut self, conn: ConnId) {
        self.conns.remove(conn);
    }

    fn source_ports(&self, conn: ConnId) -> Option<Vec<u16>> {
        self.conns
            .get(conn)
            .map(|c| c.leases.iter().map(PortLease::port).collect())
    }

    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError> {
        // Resolve everything first: an unknown conn/EV sends nothing.
        let mut resolved = Vec::with_capacity(batch.len());
        let ip = self.addr.ip();
        self.conns.resolve(batch, |_, m, d, c, &s| {
            let port = c.leases.get(s).map_or(0, PortLease::port);
            resolved.push((SocketAddr::new(ip, port), c.peer, m.ecn, d.to_vec()));
        })?;
        let mut report = TxReport::default();
        let mut st = self.net.lock();
        for (from, to, ecn, bytes) in resolved {
            report.send_calls += 1;
            let verdict = match st.filter.as_mut() {
                Some(f) => f(from, to, &bytes),
                None => FakeVerdict::Deliver,
            };
            report.datagrams += 1;
            match verdict {
                FakeVerdict::Drop => st.dropped += 1,
                // `bytes` is this datagram's own copy already: moved, cloned only to
                // duplicate
                FakeVerdict::MarkCe => st.deliver(to, (from, Ecn::Ce, bytes)),
                FakeVerdict::Deliver => st.deliver(to, (from, ecn, bytes)),
                FakeVerdict::Duplicate => {
                    st.deliver(to, (from, ecn, bytes.clone()));
                    st.deliver(to, (from, ecn, bytes));
                }
                FakeVerdict::Hold => st.held.entry(to).or_default().push((from, ecn, bytes)),
            }
        }
        drop(st);
        self.net.inner.cv.notify_all();
        self.stats.count_tx(&report);
        Ok(report)
    }

    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError> {
        self.scratch.clear();
        {
            let mut st = self.net.lock();
            if let Some(q) = st.queues.get_mut(&self.addr) {
                let n = q.datagrams.len().min(max);
                self.scratch.extend(q.datagrams.drain(..n));
            }
        }
        for (from, ecn, bytes) in &self.scratch {
            f(RxDatagram {
                from: *from,
                ecn: *ecn,
                bytes,
            });
        }
        let n = self.scratch.len();
        self.stats.rx_datagrams += n as u64;
        self.stats.rx_calls += n as u64;
        Ok(n)
    }

    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError> {
        let mut st = self.net.lock();
        let ready = |st: &mut NetState, addr: &SocketAddr| {
            st.queues
                .get_mut(addr)
                .is_none_or(|q| !q.datagrams.is_empty() || std::mem::take(&mut q.woken))
        };
        if ready(&mut st, &self.addr) {
            return Ok(());
        }
        let (mut st, _) = self
            .inner_cv()
            .wait_timeout(st, Duration::from_nanos(timeout_ns))
            .unwrap_or_else(|e| e.into_inner());
        let _ = ready(&mut st, &self.addr);
        Ok(())
    }

    fn waker(&self) -> Arc<dyn Waker> {
        Arc::new(FakeWaker {
            net: self.net.clone(),
            addr: self.addr,
        })
    }

    fn stats(&self) -> DatapathStats {
        self.stats
    }
}

impl FakeDatapath {
    fn inner_cv(&self) -> &Condvar {
        &self.net.inner.cv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends datagrams `[i]` for each `i` of `ids` from a to b; returns what b receives.
    fn run(verdict: impl FnMut(u8) -> FakeVerdict + Send + 'static, ids: &[u8]) -> Vec<u8> {
        let net = FakeNet::new();
        let mut verdict = verdict;
        net.set_filter(move |_, _, b| verdict(b[0]));
        let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
        let mut a = FakeDatapath::new(&net, "10.0.0.1:4792".parse().unwrap());
        let mut b = FakeDatapath::new(&net, b_addr);
        let id = a.open_conn(b_addr, &PathMap::per_ev(vec![0])).unwrap();
        let mut batch = TxBatch::new(ids.len(), 1);
        for &i in ids {
            assert!(batch.push(id, 0, Ecn::NotEct, &[i]));
        }
        assert_eq!(a.tx_burst(&batch).unwrap().datagrams, ids.len() as u64);
        let mut got = Vec::new();
        b.rx_burst(usize::MAX, &mut |d| got.push(d.bytes[0]))
            .unwrap();
        got
    }

    #[test]
    fn hold_swaps_with_the_next_datagram_duplicate_delivers_twice() {
        let hold_1 = |i| match i {
            1 => FakeVerdict::Hold,
            4 => FakeVerdict::Duplicate,
            _ => FakeVerdict::Deliver,
        };
        assert_eq!(run(hold_1, &[0, 1, 2, 3, 4]), vec![0, 2, 1, 3, 4, 4]);
        // Two held in a row come out after the next delivered one, in order.
        let hold_12 = |i| match i {
            1 | 2 => FakeVerdict::Hold,
            _ => FakeVerdict::Deliver,
        };
        assert_eq!(run(hold_12, &[0, 1, 2, 3]), vec![0, 3, 1, 2]);
        // The last one held stays held (it leaves with the next datagram to b).
        let hold_last = |i| match i {
            2 => FakeVerdict::Hold,
            _ => FakeVerdict::Deliver,
        };
        assert_eq!(run(hold_last, &[0, 1, 2]), vec![0, 1]);
    }
}
