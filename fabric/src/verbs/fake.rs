//! [`FakeNic`]: a [`Nic`] over an in-memory UD fabric ([`FakeFabric`]), so
//! [`super::VerbsDatapath`] builds and tests without an RDMA device.
//!
//! It keeps the UD rules the datapath depends on: a datagram reaches the QP named by its
//! destination GID and QPN only with the right Q_Key and a posted receive buffer (otherwise
//! it is silently dropped, as UD does, and counted here); it lands as 40 GRH bytes then the
//! payload (IPv4 form when both GIDs are IPv4-mapped, IPv6 otherwise); a datagram longer
//! than the buffer completes with `IBV_WC_LOC_LEN_ERR`; a send queue holds at most `depth`
//! WRs, unsignalled ones keep their entry until a later signalled WR of the same QP
//! completes, and a post past the room is refused from the first WR that does not fit.
//! Sends complete at once. A filter sees every packet and may drop or rewrite it (forge a
//! GRH, shorten the reported length, mark CE).

use super::config::VerbsError;
use super::grh::{GRH_BYTES, GrhRepr, GrhVersion};
use super::nic::{
    Nic, PostError, RecvWr, SendWr, WC_LOC_LEN_ERR, WC_LOC_QP_OP_ERR, WC_SUCCESS, WC_WR_FLUSH_ERR,
    Wc,
};
use crate::datapath::Waker;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::Ipv6Addr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A datagram in flight on the [`FakeFabric`], as the filter sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakePacket {
    /// Destination GID.
    pub dgid: Ipv6Addr,
    /// Destination QPN.
    pub dst_qpn: u32,
    /// Sender's QPN.
    pub src_qpn: u32,
    /// Q_Key the sender used.
    pub qkey: u32,
    /// The 40 bytes that land in front of the payload.
    pub grh: [u8; GRH_BYTES],
    /// The payload.
    pub payload: Vec<u8>,
    /// Byte count the receive completion reports instead of `40 + payload.len()`.
    pub byte_len_override: Option<u32>,
}

type Filter = Box<dyn FnMut(&mut FakePacket) -> bool + Send>;

#[derive(Default)]
struct Inbox {
    packets: VecDeque<FakePacket>,
    woken: bool,
}

struct State {
    inboxes: HashMap<Ipv6Addr, Inbox>,
    next_qpn: u32,
    filter: Option<Filter>,
    /// Packets to a GID no NIC has.
    unroutable: u64,
    /// GIDs whose port is down ([`FakeFabric::set_port_up`]).
    down: std::collections::HashSet<Ipv6Addr>,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// An in-memory UD network of [`FakeNic`]s addressed by GID. Cheap to clone.
#[derive(Clone)]
pub struct FakeFabric {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FakeFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeFabric").finish_non_exhaustive()
    }
}

impl Default for FakeFabric {
    fn default() -> Self {
        FakeFabric::new()
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panic while holding the lock cannot leave the queues half-updated in a way that
    // matters to a test fake: keep going with the data.
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeFabric {
    /// An empty fabric; QPNs are handed out from 0x11 up, unique across its NICs.
    pub fn new() -> FakeFabric {
        FakeFabric {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    inboxes: HashMap::new(),
                    next_qpn: 0x11,
                    filter: None,
                    unroutable: 0,
                    down: std::collections::HashSet::new(),
                }),
                cv: Condvar::new(),
            }),
        }
    }

    /// A NIC with GID `gid` on this fabric.
    pub fn nic(&self, gid: Ipv6Addr) -> FakeNic {
        lock(&self.shared).inboxes.entry(gid).or_default();
        FakeNic {
            fabric: self.clone(),
            gid,
            regions: Vec::new(),
            qps: Vec::new(),
            ahs: Vec::new(),
            send_cq: VecDeque::new(),
            recv_cq: VecDeque::new(),
            stats: FakeNicStats::default(),
        }
    }

    /// Installs the filter: it sees every packet before delivery; `false` drops it.
    pub fn set_filter(&self, f: impl FnMut(&mut FakePacket) -> bool + Send + 'static) {
        lock(&self.shared).filter = Some(Box::new(f));
    }

    /// Sets the port of the NIC with GID `gid` down (`up` false) or up, as rdma_rxe's port
    /// follows its netdev: while down, nothing reaches the NIC, and a send posted on one of
    /// its QPs fails (`IBV_WC_LOC_QP_OP_ERR`) and puts that QP in the error state, where
    /// it stays until [`Nic::reset_qp`]: every WR posted on it then completes flushed
    /// (`IBV_WC_WR_FLUSH_ERR`, posted receives included) and nothing leaves.
    pub fn set_port_up(&self, gid: Ipv6Addr, up: bool) {
        let mut st = lock(&self.shared);
        if up {
            st.down.remove(&gid);
        } else {
            st.down.insert(gid);
        }
    }

    /// Packets sent to a GID that no NIC of the fabric has.
    pub fn unroutable(&self) -> u64 {
        lock(&self.shared).unroutable
    }
}

/// Counters of a [`FakeNic`], never reset: its receive side, and the verb calls the
/// datapath made on it (what each would cost on a device: one `ibv_post_send` is one
/// doorbell, on Soft-RoCE one `write(2)` to the uverbs file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FakeNicStats {
    /// `post_send` calls (each one chain of WRs: one `ibv_post_send`).
    pub post_send_calls: u64,
    /// WRs handed to `post_send`, over all calls (accepted or not).
    pub post_send_wrs: u64,
    /// `post_recv` calls (each one chain: one `ibv_post_recv`).
    pub post_recv_calls: u64,
    /// Receive WRs handed to `post_recv`, over all calls.
    pub post_recv_wrs: u64,
    /// `poll_send` calls (one `ibv_poll_cq` of the send CQ each).
    pub poll_send_calls: u64,
    /// `poll_recv` calls (one `ibv_poll_cq` of the receive CQ each; `wait_recv`'s look
    /// before it sleeps included).
    pub poll_recv_calls: u64,
    /// Datagrams placed in a receive buffer.
    pub delivered: u64,
    /// Dropped: no QP with the destination QPN.
    pub dropped_no_qp: u64,
    /// Dropped: Q_Key mismatch.
    pub dropped_qkey: u64,
    /// Dropped: no receive buffer posted.
    pub dropped_no_buffer: u64,
    /// Completed with `IBV_WC_LOC_LEN_ERR` (datagram longer than the buffer).
    pub len_errors: u64,
    /// Dropped by the fabric filter or to a NIC whose port is down (counted at the
    /// sender).
    pub filtered: u64,
    /// Send WRs completed in error: posted while this NIC's port was down or on a QP in
    /// the error state ([`FakeFabric::set_port_up`]).
    pub failed_sends: u64,
    /// QPs brought back from the error state ([`Nic::reset_qp`]).
    pub qp_resets: u64,
}

struct FakeQp {
    qpn: u32,
    qkey: u32,
    sq_depth: u32,
    rq_depth: u32,
    rq: VecDeque<RecvWr>,
    /// Unsignalled WRs holding send-queue entries.
    sq_unsignalled: u32,
    /// In the error state ([`FakeFabric::set_port_up`]).
    error: bool,
}

#[derive(Clone, Copy)]
struct FakeAh {
    dgid: Ipv6Addr,
    flow_label: u32,
    traffic_class: u8,
    hop_limit: u8,
}

/// One NIC of a [`FakeFabric`].
pub struct FakeNic {
    fabric: FakeFabric,
    gid: Ipv6Addr,
    regions: Vec<Vec<u8>>,
    qps: Vec<FakeQp>,
    ahs: Vec<FakeAh>,
    send_cq: VecDeque<Wc>,
    recv_cq: VecDeque<Wc>,
    stats: FakeNicStats,
}

impl std::fmt::Debug for FakeNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNic")
            .field("gid", &self.gid)
            .finish_non_exhaustive()
    }
}

impl FakeNic {
    /// Its GID.
    pub fn gid(&self) -> Ipv6Addr {
        self.gid
    }

    /// Counters: the receive side and the verb calls.
    pub fn stats(&self) -> FakeNicStats {
        self.stats
    }

    /// Receive buffers posted on QP index `qp`.
    pub fn posted_recvs(&self, qp: usize) -> Option<usize> {
        self.qps.get(qp).map(|q| q.rq.len())
    }

    fn range_ok(&self, region: usize, offset: usize, len: usize) -> bool {
        self.regions
            .get(region)
            .is_some_and(|r| offset.checked_add(len).is_some_and(|end| end <= r.len()))
    }

    /// Moves packets from the fabric inbox into posted receive buffers.
    fn drain_inbox(&mut self) {
        let packets: Vec<FakePacket> = {
            let mut st = lock(&self.fabric.shared);
            match st.inboxes.get_mut(&self.gid) {
                Some(i) => i.packets.drain(..).collect(),
                None => Vec::new(),
            }
        };
        for p in packets {
            let Some(qp) = self.qps.iter_mut().find(|q| q.qpn == p.dst_qpn) else {
                self.stats.dropped_no_qp += 1;
                continue;
            };
            if qp.qkey != p.qkey {
                self.stats.dropped_qkey += 1;
                continue;
            }
            let Some(wr) = qp.rq.pop_front() else {
                self.stats.dropped_no_buffer += 1;
                continue;
            };
            let qp_num = qp.qpn;
            let total = GRH_BYTES + p.payload.len();
            let region = self.regions.get_mut(wr.region);
            let fits = total <= wr.len as usize;
            let dst = region.and_then(|r| r.get_mut(wr.offset..wr.offset + total));
            match dst {
                Some(dst) if fits => {
                    dst[..GRH_BYTES].copy_from_slice(&p.grh);
                    dst[GRH_BYTES..].copy_from_slice(&p.payload);
                    self.stats.delivered += 1;
                    self.recv_cq.push_back(Wc {
                        wr_id: wr.wr_id,
                        status: WC_SUCCESS,
                        byte_len: p.byte_len_override.unwrap_or(total as u32),
                        qp_num,
                        src_qp: p.src_qpn,
                        has_grh: true,
                    });
                }
                _ => {
                    self.stats.len_errors += 1;
                    self.recv_cq.push_back(Wc {
                        wr_id: wr.wr_id,
                        status: WC_LOC_LEN_ERR,
                        byte_len: 0,
                        qp_num,
                        src_qp: p.src_qpn,
                        has_grh: false,
                    });
                }
            }
        }
    }
}

struct FakeWaker {
    shared: Arc<Shared>,
    gid: Ipv6Addr,
}

impl Waker for FakeWaker {
    fn wake(&self) {
        if let Some(i) = lock(&self.shared).inboxes.get_mut(&self.gid) {
            i.woken = true;
        }
        self.shared.cv.notify_all();
    }
}

impl Nic for FakeNic {
    fn register(&mut self, len: usize) -> Result<usize, VerbsError> {
        if len == 0 {
            return Err(VerbsError::BadConfig("region of 0 bytes".into()));
        }
        self.regions.push(vec![0; len]);
        Ok(self.regions.len() - 1)
    }

    fn bytes(&self, region: usize, offset: usize, len: usize) -> Option<&[u8]> {
        self.regions
            .get(region)?
            .get(offset..offset.checked_add(len)?)
    }

    fn bytes_mut(&mut self, region: usize, offset: usize, len: usize) -> Option<&mut [u8]> {
        self.regions
            .get_mut(region)?
            .get_mut(offset..offset.checked_add(len)?)
    }

    fn create_ud_qp(&mut self, sq_depth: u32, rq_depth: u32, qkey: u32) -> Result<u32, VerbsError> {
        let qpn = {
            let mut st = lock(&self.fabric.shared);
            let q = st.next_qpn;
            st.next_qpn += 1;
            q
        };
        self.qps.push(FakeQp {
            qpn,
            qkey,
            sq_depth,
            rq_depth,
            rq: VecDeque::new(),
            sq_unsignalled: 0,
            error: false,
        });
        Ok(qpn)
    }

    fn reset_qp(&mut self, qp: usize, qkey: u32) -> Result<(), VerbsError> {
        let q = self.qps.get_mut(qp).ok_or_else(|| VerbsError::Call {
            call: "ibv_modify_qp (RESET)",
            source: io::Error::from_raw_os_error(22),
        })?;
        q.error = false;
        q.rq.clear();
        q.sq_unsignalled = 0;
        q.qkey = qkey;
        self.stats.qp_resets += 1;
        Ok(())
    }

    fn create_ah(
        &mut self,
        dgid: Ipv6Addr,
        _dlid: u16,
        flow_label: u32,
        traffic_class: u8,
        hop_limit: u8,
    ) -> Result<usize, VerbsError> {
        self.ahs.push(FakeAh {
            dgid,
            flow_label,
            traffic_class,
            hop_limit,
        });
        Ok(self.ahs.len() - 1)
    }

    fn post_send(&mut self, qp: usize, wrs: &[SendWr]) -> Result<(), PostError> {
        self.stats.post_send_calls += 1;
        self.stats.post_send_wrs += wrs.len() as u64;
        if qp >= self.qps.len()
            || wrs.iter().any(|w| {
                !self.range_ok(w.region, w.offset, w.len as usize) || w.ah >= self.ahs.len()
            })
        {
            return Err(PostError::invalid());
        }
        let port_down = lock(&self.fabric.shared).down.contains(&self.gid);
        if port_down || self.qps[qp].error {
            // The QP fails (its port is down) or has failed: every WR completes in error,
            // the first of a failure with LOC_QP_OP_ERR, the rest flushed, and so does
            // every posted receive; nothing leaves.
            let q = &mut self.qps[qp];
            let mut status = if q.error {
                WC_WR_FLUSH_ERR
            } else {
                WC_LOC_QP_OP_ERR
            };
            q.error = true;
            q.sq_unsignalled = 0;
            for w in wrs {
                self.send_cq.push_back(Wc {
                    wr_id: w.wr_id,
                    status,
                    byte_len: 0,
                    qp_num: q.qpn,
                    src_qp: 0,
                    has_grh: false,
                });
                status = WC_WR_FLUSH_ERR;
            }
            for r in q.rq.drain(..) {
                self.recv_cq.push_back(Wc {
                    wr_id: r.wr_id,
                    status: WC_WR_FLUSH_ERR,
                    byte_len: 0,
                    qp_num: q.qpn,
                    src_qp: 0,
                    has_grh: false,
                });
            }
            self.stats.failed_sends += wrs.len() as u64;
            return Ok(());
        }
        let mut out = Vec::with_capacity(wrs.len());
        let mut refused = None;
        for (i, w) in wrs.iter().enumerate() {
            let q = &mut self.qps[qp];
            if q.sq_unsignalled >= q.sq_depth {
                refused = Some(i);
                break;
            }
            if w.signalled {
                q.sq_unsignalled = 0;
                self.send_cq.push_back(Wc {
                    wr_id: w.wr_id,
                    status: WC_SUCCESS,
                    byte_len: w.len,
                    qp_num: q.qpn,
                    src_qp: 0,
                    has_grh: false,
                });
            } else {
                q.sq_unsignalled += 1;
            }
            let ah = self.ahs[w.ah];
            let payload = self.regions[w.region][w.offset..w.offset + w.len as usize].to_vec();
            let both_v4 = ah.dgid.to_ipv4_mapped().is_some() && self.gid.to_ipv4_mapped().is_some();
            let repr = GrhRepr {
                version: if both_v4 {
                    GrhVersion::Ipv4
                } else {
                    GrhVersion::Ipv6
                },
                sgid: self.gid,
                dgid: ah.dgid,
                traffic_class: ah.traffic_class,
                flow_label: if both_v4 { 0 } else { ah.flow_label },
                hop_limit: ah.hop_limit,
            };
            let mut grh = [0u8; GRH_BYTES];
            repr.emit(u16::try_from(w.len).unwrap_or(u16::MAX), &mut grh);
            out.push(FakePacket {
                dgid: ah.dgid,
                dst_qpn: w.remote_qpn,
                src_qpn: self.qps[qp].qpn,
                qkey: w.remote_qkey,
                grh,
                payload,
                byte_len_override: None,
            });
        }
        {
            let mut st = lock(&self.fabric.shared);
            let State {
                inboxes,
                filter,
                unroutable,
                down,
                ..
            } = &mut *st;
            for mut p in out {
                if let Some(f) = filter.as_mut()
                    && !f(&mut p)
                {
                    self.stats.filtered += 1;
                    continue;
                }
                if down.contains(&p.dgid) {
                    // the receiving NIC's port is down
                    self.stats.filtered += 1;
                    continue;
                }
                match inboxes.get_mut(&p.dgid) {
                    Some(i) => i.packets.push_back(p),
                    None => *unroutable += 1,
                }
            }
        }
        self.fabric.shared.cv.notify_all();
        match refused {
            None => Ok(()),
            Some(accepted) => Err(PostError {
                accepted,
                source: io::Error::from_raw_os_error(12), // ENOMEM, as providers say
            }),
        }
    }

    fn post_recv(&mut self, qp: usize, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.stats.post_recv_calls += 1;
        self.stats.post_recv_wrs += wrs.len() as u64;
        if qp >= self.qps.len()
            || wrs
                .iter()
                .any(|w| !self.range_ok(w.region, w.offset, w.len as usize))
        {
            return Err(PostError::invalid());
        }
        let q = &mut self.qps[qp];
        if q.error {
            // a QP in error flushes what is posted to it
            for w in wrs {
                self.recv_cq.push_back(Wc {
                    wr_id: w.wr_id,
                    status: WC_WR_FLUSH_ERR,
                    byte_len: 0,
                    qp_num: q.qpn,
                    src_qp: 0,
                    has_grh: false,
                });
            }
            return Ok(());
        }
        for (i, w) in wrs.iter().enumerate() {
            if q.rq.len() >= q.rq_depth as usize {
                return Err(PostError {
                    accepted: i,
                    source: io::Error::from_raw_os_error(12),
                });
            }
            q.rq.push_back(*w);
        }
        Ok(())
    }

    fn poll_send(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        self.stats.poll_send_calls += 1;
        let n = max.min(self.send_cq.len());
        out.extend(self.send_cq.drain(..n));
        Ok(n)
    }

    fn poll_recv(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        self.stats.poll_recv_calls += 1;
        self.drain_inbox();
        let n = max.min(self.recv_cq.len());
        out.extend(self.recv_cq.drain(..n));
        Ok(n)
    }

    fn wait_recv(&mut self, timeout_ns: u64, early: &mut Vec<Wc>) -> Result<(), VerbsError> {
        if self.poll_recv(64, early)? > 0 {
            return Ok(());
        }
        let shared = Arc::clone(&self.fabric.shared);
        let mut st = lock(&shared);
        let ready = |st: &mut State, gid: &Ipv6Addr| {
            st.inboxes
                .get_mut(gid)
                .is_some_and(|i| !i.packets.is_empty() || std::mem::take(&mut i.woken))
        };
        if ready(&mut st, &self.gid) {
            return Ok(());
        }
        let (mut st, _) = shared
            .cv
            .wait_timeout(st, Duration::from_nanos(timeout_ns))
            .unwrap_or_else(|p| p.into_inner());
        let _ = ready(&mut st, &self.gid);
        Ok(())
    }

    fn waker(&self) -> Arc<dyn Waker> {
        Arc::new(FakeWaker {
            shared: Arc::clone(&self.fabric.shared),
            gid: self.gid,
        })
    }
}
