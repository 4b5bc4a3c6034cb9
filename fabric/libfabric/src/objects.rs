//! The provider's objects (fabric, domain, endpoint, address vector, completion queue,
//! event queue, memory region) and their `fi_ops_*` tables.
//!
//! Every object of a domain lives in the domain's [`State`], under one mutex (the domain
//! is `FI_THREAD_SAFE`); the C-visible structs (`fid_ep`, `fid_cq`, ...) carry an `Arc`
//! of it and an index. An endpoint owns one caller-progress mrc [`Worker`] on UDP
//! sockets and a listener whose connection handle is the endpoint's address. The first
//! send to a peer connects to the peer's listener (mrc's handle-based set-up: a TCP
//! handshake to the address in the peer's handle); the peer's endpoint accepts it during
//! its progress. One QP per direction: a QP this endpoint opened carries its sends, a QP
//! it accepted carries the peer's.

use crate::ffi::*;
use crate::info::{ADDR_LEN, INJECT_SIZE, IOV_LIMIT, MAX_MSG_SIZE, QUEUE_SIZE};
use crate::stubs::*;
use crate::{Ret, guard};
use mrc_fabric::engine::{ConnHandle, ConnectId, EngineConfig, ListenerId, QpConfig, Worker};
use mrc_fabric::udp::{DirectDatapath, UdpConfig};
use mrc_transport::{Access, Sge, WcOpcode, WcStatus};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// `FI_ADDR_NOTAVAIL` / `FI_ADDR_UNSPEC` (`((uint64_t) -1)`).
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;

/// Staging slots of a QP this endpoint sends on (each [`MAX_MSG_SIZE`] bytes).
const SEND_SLOTS: usize = 16;
/// Staging slots of a QP this endpoint receives on.
const RECV_SLOTS: usize = 16;
/// Marks the provider's own structs (after the fid), checked before a cast.
const MAGIC: u64 = 0x6d72_635f_6669_0001;

impl Ret for *const c_char {
    fn neg(_: u32) -> Self {
        std::ptr::null()
    }
}

fn neg<R: Ret>(e: u32) -> R {
    R::neg(e)
}

// ---------------------------------------------------------------------------------
// State

/// One completion, in the widest layout (`fi_cq_err_entry`'s leading fields).
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    ctx: usize,
    flags: u64,
    len: usize,
    buf: usize,
    err: c_int,
    olen: usize,
}

struct CqState {
    format: u32,
    ok: VecDeque<Entry>,
    errs: VecDeque<Entry>,
}

struct AvState {
    addrs: Vec<Option<[u8; ADDR_LEN]>>,
}

/// A send not yet posted to the transport: its bytes (copied at the call) and how it
/// completes.
struct TxOp {
    data: Vec<u8>,
    ctx: usize,
    completion: bool,
}

/// A QP this endpoint sends on, with its staging slots (registered with the QP).
struct SendQp {
    qpn: u32,
    buf: Box<[u8]>,
    base: u64,
    lkey: u32,
    free: Vec<usize>,
    /// Per slot: the op's context, length, whether it completes.
    inflight: HashMap<usize, (usize, usize, bool)>,
}

enum Conn {
    Connecting(ConnectId),
    Ready(SendQp),
}

struct Peer {
    conn: Conn,
    queue: VecDeque<TxOp>,
}

/// A QP this endpoint receives on (accepted from a peer), with its staging slots.
struct RecvQp {
    buf: Box<[u8]>,
    base: u64,
    lkey: u32,
}

/// A posted receive: the application's buffers.
struct PostedRecv {
    iov: Vec<(usize, usize)>,
    ctx: usize,
    completion: bool,
}

struct EpState {
    // The worker first: dropping it destroys the QPs before their slots are freed.
    worker: Worker<DirectDatapath>,
    listener: ListenerId,
    addr: [u8; ADDR_LEN],
    av: Option<usize>,
    txcq: Option<usize>,
    rxcq: Option<usize>,
    tx_selective: bool,
    rx_selective: bool,
    enabled: bool,
    peers: HashMap<u64, Peer>,
    in_qps: HashMap<u32, RecvQp>,
    recvs: VecDeque<PostedRecv>,
    /// Messages that arrived before a receive was posted: (QP, slot, length), in order of
    /// arrival. Their slot stays out of the QP's receive queue until a receive takes them,
    /// so the transport's receiver-not-ready bounds what a peer can leave here.
    unexpected: VecDeque<(u32, usize, usize)>,
    /// Sends posted and not yet completed (queued or in flight).
    tx_outstanding: usize,
}

/// Everything of one domain.
#[derive(Default)]
pub(crate) struct State {
    eps: Vec<Option<EpState>>,
    cqs: Vec<Option<CqState>>,
    avs: Vec<Option<AvState>>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> Result<MutexGuard<'_, State>, u32> {
    s.lock().map_err(|_| FI_EOTHER)
}

fn push<T>(v: &mut Vec<Option<T>>, t: T) -> usize {
    v.push(Some(t));
    v.len() - 1
}

fn cq_push(cqs: &mut [Option<CqState>], cq: Option<usize>, e: Entry) {
    if let Some(Some(c)) = cq.map(|i| cqs.get_mut(i).and_then(Option::as_mut)) {
        if e.err != 0 {
            c.errs.push_back(e);
        } else {
            c.ok.push_back(e);
        }
    }
}

fn wc_err(s: WcStatus) -> c_int {
    (match s {
        WcStatus::Success => 0,
        WcStatus::RetryExceeded => FI_ETIMEDOUT,
        WcStatus::Flushed => FI_ECANCELED,
        WcStatus::LocalLengthError => FI_ETRUNC,
        WcStatus::RemoteAccessError | WcStatus::LocalProtectionError => FI_EACCES,
        WcStatus::GenerationMismatch => FI_ECONNRESET,
    }) as c_int
}

impl EpState {
    fn open() -> Result<EpState, u32> {
        let ip: IpAddr = match std::env::var("FI_MRC_ADDR") {
            Ok(s) => s.trim().parse().map_err(|_| FI_EINVAL)?,
            Err(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let udp = UdpConfig::bind(SocketAddr::new(ip, 0));
        let ecfg = EngineConfig {
            tx_batch: 64,
            ..EngineConfig::default()
        };
        let mut worker = Worker::direct(udp, ecfg).map_err(|_| FI_EADDRNOTAVAIL)?;
        let (listener, h) = worker
            .listen(QpConfig::default())
            .map_err(|_| FI_EADDRNOTAVAIL)?;
        Ok(EpState {
            worker,
            listener,
            addr: h.to_bytes(),
            av: None,
            txcq: None,
            rxcq: None,
            tx_selective: false,
            rx_selective: false,
            enabled: false,
            peers: HashMap::new(),
            in_qps: HashMap::new(),
            recvs: VecDeque::new(),
            unexpected: VecDeque::new(),
            tx_outstanding: 0,
        })
    }

    /// Registers staging slots with `qpn` (local write: receives land in them).
    fn slots(&mut self, qpn: u32, n: usize) -> Option<(Box<[u8]>, u64, u32)> {
        let mut buf = vec![0u8; n * MAX_MSG_SIZE].into_boxed_slice();
        // SAFETY: the box stays allocated and unmoved (a Box's heap block does not move)
        // until the QP is destroyed (the worker drops before the slots, or destroy_qp runs
        // first), and the provider touches it only between calls on the worker.
        let k = unsafe {
            self.worker
                .reg_mr_raw(qpn, buf.as_mut_ptr(), buf.len(), Access::LOCAL_WRITE)
        }
        .ok()?;
        Some((buf, k.addr, k.lkey))
    }

    /// One pass of progress: the transport, connection set-up, completions.
    fn progress(&mut self, cqs: &mut [Option<CqState>]) {
        self.worker.progress();
        // Outgoing connections.
        let connecting: Vec<(u64, ConnectId)> = self
            .peers
            .iter()
            .filter_map(|(&a, p)| match p.conn {
                Conn::Connecting(id) => Some((a, id)),
                Conn::Ready(_) => None,
            })
            .collect();
        for (a, id) in connecting {
            match self.worker.poll_connect(id) {
                Ok(None) => {}
                Ok(Some(qpn)) => match self.slots(qpn, SEND_SLOTS) {
                    Some((buf, base, lkey)) => {
                        if let Some(p) = self.peers.get_mut(&a) {
                            p.conn = Conn::Ready(SendQp {
                                qpn,
                                buf,
                                base,
                                lkey,
                                free: (0..SEND_SLOTS).rev().collect(),
                                inflight: HashMap::new(),
                            });
                        }
                    }
                    None => {
                        self.worker.destroy_qp(qpn);
                        self.fail_peer(a, FI_ENOMEM as c_int, cqs);
                    }
                },
                Err(_) => self.fail_peer(a, FI_ECONNREFUSED as c_int, cqs),
            }
        }
        // Incoming connections.
        while let Some(r) = self.worker.poll_accept(self.listener) {
            let Ok(qpn) = r else { break };
            let Some((buf, base, lkey)) = self.slots(qpn, RECV_SLOTS) else {
                self.worker.destroy_qp(qpn);
                continue;
            };
            let rq = RecvQp { buf, base, lkey };
            for s in 0..RECV_SLOTS {
                let _ = self.worker.post_recv(qpn, s as u64, rq.sge(s));
            }
            self.in_qps.insert(qpn, rq);
        }
        // Send completions, then queued sends into freed slots.
        let txcq = self.txcq;
        for p in self.peers.values_mut() {
            if let Conn::Ready(q) = &mut p.conn {
                while let Some(c) = self.worker.poll_send_cq(q.qpn) {
                    let slot = c.wr_id as usize;
                    if let Some((ctx, len, completion)) = q.inflight.remove(&slot) {
                        q.free.push(slot);
                        self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
                        let err = wc_err(c.status);
                        if completion || err != 0 {
                            let e = Entry {
                                ctx,
                                flags: (FI_SEND | FI_MSG) as u64,
                                len,
                                err,
                                ..Entry::default()
                            };
                            cq_push(cqs, txcq, e);
                        }
                    }
                }
                while !q.free.is_empty() {
                    let Some(op) = p.queue.pop_front() else { break };
                    let ok = q.post(&mut self.worker, &[&op.data], op.ctx, op.completion);
                    if let Err(err) = ok {
                        self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
                        let e = Entry {
                            ctx: op.ctx,
                            flags: (FI_SEND | FI_MSG) as u64,
                            len: op.data.len(),
                            err,
                            ..Entry::default()
                        };
                        cq_push(cqs, txcq, e);
                    }
                }
            }
        }
        // Arrivals.
        let qpns: Vec<u32> = self.in_qps.keys().copied().collect();
        for qpn in qpns {
            while let Some(c) = self.worker.poll_recv_cq(qpn) {
                if c.status != WcStatus::Success || c.opcode != WcOpcode::Recv {
                    continue;
                }
                let slot = c.wr_id as usize;
                let len = c.byte_len as usize;
                if let Some(r) = self.recvs.pop_front() {
                    self.deliver(qpn, slot, len, r, cqs);
                } else {
                    self.unexpected.push_back((qpn, slot, len));
                }
            }
        }
    }

    /// Copies the message in `slot` of `qpn` into receive `r`, completes it and gives the
    /// slot back to the transport.
    fn deliver(
        &mut self,
        qpn: u32,
        slot: usize,
        len: usize,
        r: PostedRecv,
        cqs: &mut [Option<CqState>],
    ) {
        let Some(rq) = self.in_qps.get(&qpn) else {
            return;
        };
        let msg = &rq.buf[slot * MAX_MSG_SIZE..slot * MAX_MSG_SIZE + len.min(MAX_MSG_SIZE)];
        let mut done = 0;
        for &(p, l) in &r.iov {
            let n = l.min(msg.len() - done);
            if n == 0 {
                break;
            }
            // SAFETY: the application's receive buffer of `l` bytes (the fi_recv contract),
            // written before its completion is raised.
            unsafe { std::ptr::copy_nonoverlapping(msg[done..].as_ptr(), p as *mut u8, n) };
            done += n;
        }
        let sge = rq.sge(slot);
        let _ = self.worker.post_recv(qpn, slot as u64, sge);
        let trunc = msg.len() - done;
        if r.completion || trunc > 0 {
            let e = Entry {
                ctx: r.ctx,
                flags: (FI_RECV | FI_MSG) as u64,
                len: done,
                buf: r.iov.first().map_or(0, |x| x.0),
                err: if trunc > 0 { FI_ETRUNC as c_int } else { 0 },
                olen: trunc,
            };
            cq_push(cqs, self.rxcq, e);
        }
    }

    /// Ends the connection attempt to `a`: its queued sends complete with `err`.
    fn fail_peer(&mut self, a: u64, err: c_int, cqs: &mut [Option<CqState>]) {
        if let Some(p) = self.peers.remove(&a) {
            for op in p.queue {
                self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
                let e = Entry {
                    ctx: op.ctx,
                    flags: (FI_SEND | FI_MSG) as u64,
                    len: op.data.len(),
                    err,
                    ..Entry::default()
                };
                cq_push(cqs, self.txcq, e);
            }
        }
    }

    /// A send of the bytes `iov` to `dest` (copied now; the caller's buffer is free on
    /// return). `-FI_EAGAIN` when the transmit queue is full.
    fn send(
        &mut self,
        avs: &[Option<AvState>],
        dest: u64,
        iov: &[&[u8]],
        ctx: usize,
        completion: bool,
    ) -> Result<(), u32> {
        if !self.enabled {
            return Err(FI_EOPBADSTATE);
        }
        let len: usize = iov.iter().map(|b| b.len()).sum();
        if len > MAX_MSG_SIZE {
            return Err(FI_EMSGSIZE);
        }
        if self.tx_outstanding >= QUEUE_SIZE {
            return Err(FI_EAGAIN);
        }
        if !self.peers.contains_key(&dest) {
            let av = self
                .av
                .and_then(|i| avs.get(i))
                .and_then(Option::as_ref)
                .ok_or(FI_EOPBADSTATE)?;
            let addr = av
                .addrs
                .get(usize::try_from(dest).map_err(|_| FI_EINVAL)?)
                .and_then(Option::as_ref)
                .ok_or(FI_EINVAL)?;
            let h = ConnHandle::from_bytes(addr).map_err(|_| FI_EINVAL)?;
            let id = self
                .worker
                .connect_start(&h, QpConfig::default())
                .map_err(|_| FI_ECONNREFUSED)?;
            self.peers.insert(
                dest,
                Peer {
                    conn: Conn::Connecting(id),
                    queue: VecDeque::new(),
                },
            );
        }
        let Some(p) = self.peers.get_mut(&dest) else {
            return Err(FI_EOTHER);
        };
        match &mut p.conn {
            Conn::Ready(q) if p.queue.is_empty() && !q.free.is_empty() => {
                q.post(&mut self.worker, iov, ctx, completion)
                    .map_err(|e| e as u32)?;
            }
            _ => p.queue.push_back(TxOp {
                data: iov.concat(),
                ctx,
                completion,
            }),
        }
        self.tx_outstanding += 1;
        Ok(())
    }

    fn recv(&mut self, r: PostedRecv, cqs: &mut [Option<CqState>]) -> Result<(), u32> {
        if !self.enabled {
            return Err(FI_EOPBADSTATE);
        }
        if let Some((qpn, slot, len)) = self.unexpected.pop_front() {
            self.deliver(qpn, slot, len, r, cqs);
            return Ok(());
        }
        if self.recvs.len() >= QUEUE_SIZE {
            return Err(FI_EAGAIN);
        }
        self.recvs.push_back(r);
        Ok(())
    }
}

impl RecvQp {
    fn sge(&self, slot: usize) -> Sge {
        Sge {
            lkey: self.lkey,
            addr: self.base + (slot * MAX_MSG_SIZE) as u64,
            len: MAX_MSG_SIZE as u32,
        }
    }
}

impl SendQp {
    /// Copies `iov` into a free slot and posts it as a SEND. The caller checked that a
    /// slot is free. `Err(FI_E*)` (positive) when the transport refuses it.
    fn post(
        &mut self,
        w: &mut Worker<DirectDatapath>,
        iov: &[&[u8]],
        ctx: usize,
        completion: bool,
    ) -> Result<(), c_int> {
        let Some(slot) = self.free.pop() else {
            return Err(FI_EAGAIN as c_int);
        };
        let start = slot * MAX_MSG_SIZE;
        let mut at = start;
        for b in iov {
            self.buf[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        let len = at - start;
        let sge = Sge {
            lkey: self.lkey,
            addr: self.base + start as u64,
            len: len as u32,
        };
        match w.post_send(self.qpn, slot as u64, sge, None) {
            Ok(()) => {
                self.inflight.insert(slot, (ctx, len, completion));
                Ok(())
            }
            Err(_) => {
                self.free.push(slot);
                Err(FI_EIO as c_int)
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// The C-visible objects

#[repr(C)]
struct Fabric {
    fid: fid_fabric,
    magic: u64,
}

#[repr(C)]
struct Domain {
    fid: fid_domain,
    magic: u64,
    st: Shared,
}

#[repr(C)]
struct Ep {
    fid: fid_ep,
    magic: u64,
    st: Shared,
    idx: usize,
}

#[repr(C)]
struct Cq {
    fid: fid_cq,
    magic: u64,
    st: Shared,
    idx: usize,
    /// The fabric's API version (the size of `fi_cq_err_entry` depends on it).
    api: u32,
}

#[repr(C)]
struct Av {
    fid: fid_av,
    magic: u64,
    st: Shared,
    idx: usize,
}

#[repr(C)]
struct Eq {
    fid: fid_eq,
    magic: u64,
}

#[repr(C)]
struct Mr {
    fid: fid_mr,
    magic: u64,
}

/// The provider's object behind `f` when it is of class `class`.
unsafe fn obj<'a, T>(f: *const fid, class: u32) -> Option<&'a T> {
    // SAFETY: a fid libfabric passes (non-null: one of ours or another provider's); ours
    // carry MAGIC right after their fid_* header, which starts with the fid.
    unsafe {
        let f = f.as_ref()?;
        if f.fclass != class as usize {
            return None;
        }
        let magic_at = match class {
            FI_CLASS_FABRIC => std::mem::offset_of!(Fabric, magic),
            FI_CLASS_DOMAIN => std::mem::offset_of!(Domain, magic),
            FI_CLASS_EP => std::mem::offset_of!(Ep, magic),
            FI_CLASS_CQ => std::mem::offset_of!(Cq, magic),
            FI_CLASS_AV => std::mem::offset_of!(Av, magic),
            FI_CLASS_EQ => std::mem::offset_of!(Eq, magic),
            FI_CLASS_MR => std::mem::offset_of!(Mr, magic),
            _ => return None,
        };
        let m = (f as *const fid)
            .cast::<u8>()
            .add(magic_at)
            .cast::<u64>()
            .read_unaligned();
        (m == MAGIC).then(|| &*(f as *const fid).cast::<T>())
    }
}

fn new_fid(class: u32, context: *mut c_void, ops: &'static fi_ops) -> fid {
    fid {
        fclass: class as usize,
        context,
        ops: ops as *const fi_ops as *mut fi_ops,
    }
}

macro_rules! table {
    ($t:ident { $($f:ident: $v:expr),* $(,)? }) => {
        $t { size: std::mem::size_of::<$t>(), $($f: Some($v)),* }
    };
}

// ---------------------------------------------------------------------------------
// Fabric

static FABRIC_FI_OPS: fi_ops = table!(fi_ops {
    close: fabric_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static FABRIC_OPS: fi_ops_fabric = table!(fi_ops_fabric {
    domain: domain_open,
    passive_ep: s4,
    eq_open: eq_open,
    wait_open: s3,
    trywait: s3,
    domain2: domain_open2,
});

pub(crate) unsafe extern "C" fn fabric_open(
    attr: *mut fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if fabric.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() }
            && !a.name.is_null()
            && unsafe { std::ffi::CStr::from_ptr(a.name) } != crate::info::FABRIC_NAME
        {
            return neg(FI_EINVAL);
        }
        let f = Box::new(Fabric {
            fid: fid_fabric {
                fid: new_fid(FI_CLASS_FABRIC, context, &FABRIC_FI_OPS),
                ops: &FABRIC_OPS as *const _ as *mut _,
                api_version: crate::FI_API_VERSION,
            },
            magic: MAGIC,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *fabric = Box::into_raw(f).cast() };
        0
    })
}

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard(|| {
        if unsafe { obj::<Fabric>(f, FI_CLASS_FABRIC) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one of our fabrics, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Fabric>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Domain

static DOMAIN_FI_OPS: fi_ops = table!(fi_ops {
    close: domain_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static DOMAIN_OPS: fi_ops_domain = table!(fi_ops_domain {
    av_open: av_open,
    cq_open: cq_open,
    endpoint: ep_open,
    scalable_ep: s4,
    cntr_open: s4,
    poll_open: s3,
    stx_ctx: s4,
    srx_ctx: s4,
    query_atomic: s5,
    query_collective: s4,
    endpoint2: ep_open2,
});
static MR_OPS: fi_ops_mr = table!(fi_ops_mr {
    reg: mr_reg,
    regv: s9,
    regattr: mr_regattr
});

unsafe extern "C" fn domain_open(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if domain.is_null() || unsafe { obj::<Fabric>(fabric.cast(), FI_CLASS_FABRIC) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's info, null or live.
        if let Some(i) = unsafe { info.as_ref() }
            && let Some(d) = unsafe { i.domain_attr.as_ref() }
            && !d.name.is_null()
            && unsafe { std::ffi::CStr::from_ptr(d.name) } != crate::info::DOMAIN_NAME
        {
            return neg(FI_EINVAL);
        }
        let d = Box::new(Domain {
            fid: fid_domain {
                fid: new_fid(FI_CLASS_DOMAIN, context, &DOMAIN_FI_OPS),
                ops: &DOMAIN_OPS as *const _ as *mut _,
                mr: &MR_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: Arc::default(),
        });
        // SAFETY: non-null out-pointer.
        unsafe { *domain = Box::into_raw(d).cast() };
        0
    })
}

unsafe extern "C" fn domain_open2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return neg(FI_EBADFLAGS);
    }
    unsafe { domain_open(fabric, info, domain, context) }
}

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    guard(|| {
        if unsafe { obj::<Domain>(f, FI_CLASS_DOMAIN) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one of our domains, not used after close (its objects hold the state).
        drop(unsafe { Box::from_raw(f.cast::<Domain>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Memory regions: host memory, nothing for the transport to do (the provider copies
// through its own registered slots); the key is the application's or a counter.

static MR_FI_OPS: fi_ops = table!(fi_ops {
    close: mr_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});

unsafe extern "C" fn mr_reg(
    f: *mut fid,
    _buf: *const c_void,
    _len: usize,
    _access: u64,
    _offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if mr.is_null() || unsafe { obj::<Domain>(f, FI_CLASS_DOMAIN) }.is_none() {
            return neg(FI_EINVAL);
        }
        if flags != 0 {
            return neg(FI_EBADFLAGS);
        }
        let m = Box::new(Mr {
            fid: fid_mr {
                fid: new_fid(FI_CLASS_MR, context, &MR_FI_OPS),
                mem_desc: std::ptr::null_mut(),
                key: requested_key,
            },
            magic: MAGIC,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *mr = Box::into_raw(m).cast() };
        0
    })
}

unsafe extern "C" fn mr_regattr(
    f: *mut fid,
    attr: *const fi_mr_attr,
    flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's attr, null or live.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        if a.iov_count > 1 {
            return neg(FI_ENOSYS);
        }
        unsafe {
            mr_reg(
                f,
                std::ptr::null(),
                0,
                a.access,
                a.offset,
                a.requested_key,
                flags,
                mr,
                a.context,
            )
        }
    })
}

unsafe extern "C" fn mr_close(f: *mut fid) -> c_int {
    guard(|| {
        if unsafe { obj::<Mr>(f, FI_CLASS_MR) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one of our regions, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Mr>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Event queue: RDM needs no connection management and the AV is synchronous, so the
// queue never holds an event; it exists because applications open one.

static EQ_FI_OPS: fi_ops = table!(fi_ops {
    close: eq_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static EQ_OPS: fi_ops_eq = table!(fi_ops_eq {
    read: eq_read,
    readerr: eq_readerr,
    write: s5,
    sread: eq_sread,
    strerror: eq_strerror,
});

unsafe extern "C" fn eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if eq.is_null() || unsafe { obj::<Fabric>(fabric.cast(), FI_CLASS_FABRIC) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() }
            && !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC)
        {
            return neg(FI_ENOSYS);
        }
        let e = Box::new(Eq {
            fid: fid_eq {
                fid: new_fid(FI_CLASS_EQ, context, &EQ_FI_OPS),
                ops: &EQ_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *eq = Box::into_raw(e).cast() };
        0
    })
}

unsafe extern "C" fn eq_read(
    eq: *mut fid_eq,
    _event: *mut u32,
    _buf: *mut c_void,
    _len: usize,
    _flags: u64,
) -> isize {
    guard(|| match unsafe { obj::<Eq>(eq.cast(), FI_CLASS_EQ) } {
        Some(_) => neg(FI_EAGAIN),
        None => neg(FI_EINVAL),
    })
}

unsafe extern "C" fn eq_readerr(eq: *mut fid_eq, _buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
    guard(|| match unsafe { obj::<Eq>(eq.cast(), FI_CLASS_EQ) } {
        Some(_) => neg(FI_EAGAIN),
        None => neg(FI_EINVAL),
    })
}

unsafe extern "C" fn eq_sread(
    eq: *mut fid_eq,
    _event: *mut u32,
    _buf: *mut c_void,
    _len: usize,
    timeout: c_int,
    _flags: u64,
) -> isize {
    guard(|| {
        if unsafe { obj::<Eq>(eq.cast(), FI_CLASS_EQ) }.is_none() {
            return neg(FI_EINVAL);
        }
        // Nothing ever arrives: wait out a finite timeout, refuse to block forever.
        if timeout < 0 {
            return neg(FI_EAGAIN);
        }
        std::thread::sleep(Duration::from_millis(timeout as u64));
        neg(FI_EAGAIN)
    })
}

static ERR_TEXT: &std::ffi::CStr = c"mrc transport error";

unsafe fn strerror_into(buf: *mut c_char, len: usize) -> *const c_char {
    if buf.is_null() || len == 0 {
        return ERR_TEXT.as_ptr();
    }
    let b = ERR_TEXT.to_bytes();
    let n = b.len().min(len - 1);
    // SAFETY: the caller's buffer of `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    buf
}

unsafe extern "C" fn eq_strerror(
    _eq: *mut fid_eq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard(|| unsafe { strerror_into(buf, len) })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    guard(|| {
        if unsafe { obj::<Eq>(f, FI_CLASS_EQ) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one of our event queues, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Eq>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Address vectors

static AV_FI_OPS: fi_ops = table!(fi_ops {
    close: av_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static AV_OPS: fi_ops_av = table!(fi_ops_av {
    insert: av_insert,
    insertsvc: s6,
    insertsym: s8,
    remove: av_remove,
    lookup: av_lookup,
    straddr: av_straddr,
    av_set: s4,
});

unsafe extern "C" fn av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(domain.cast(), FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if av.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() } {
            if !matches!(a.type_, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE) {
                return neg(FI_EINVAL);
            }
            // FI_EVENT (asynchronous inserts), FI_READ / FI_SYMMETRIC and named (shared)
            // AVs are not in this slice.
            if a.flags != 0 || !a.name.is_null() {
                return neg(FI_ENOSYS);
            }
        }
        let mut st = match lock(&d.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let idx = push(&mut st.avs, AvState { addrs: Vec::new() });
        let a = Box::new(Av {
            fid: fid_av {
                fid: new_fid(FI_CLASS_AV, context, &AV_FI_OPS),
                ops: &AV_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: d.st.clone(),
            idx,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *av = Box::into_raw(a).cast() };
        0
    })
}

unsafe extern "C" fn av_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(f, FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if let Ok(mut st) = lock(&a.st) {
            if st.eps.iter().flatten().any(|e| e.av == Some(a.idx)) {
                return neg(FI_EBUSY);
            }
            st.avs[a.idx] = None;
        }
        // SAFETY: one of our AVs, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Av>()) });
        0
    })
}

unsafe extern "C" fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(av.cast(), FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if flags & !(FI_MORE as u64) != 0 {
            return neg(FI_EBADFLAGS);
        }
        if count > 0 && addr.is_null() || count > c_int::MAX as usize {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&a.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(v)) = st.avs.get_mut(a.idx) else {
            return neg(FI_EINVAL);
        };
        let mut n = 0;
        for i in 0..count {
            // SAFETY: `count` addresses of ADDR_LEN bytes each (the fi_av_insert contract
            // for this provider's address format).
            let b = unsafe {
                std::slice::from_raw_parts(addr.cast::<u8>().add(i * ADDR_LEN), ADDR_LEN)
            };
            let out = match ConnHandle::from_bytes(b) {
                Ok(_) => {
                    let mut x = [0u8; ADDR_LEN];
                    x.copy_from_slice(b);
                    v.addrs.push(Some(x));
                    n += 1;
                    (v.addrs.len() - 1) as u64
                }
                Err(_) => FI_ADDR_NOTAVAIL,
            };
            if !fi_addr.is_null() {
                // SAFETY: the caller's array of `count` fi_addr_t.
                unsafe { *fi_addr.add(i) = out };
            }
        }
        n as c_int
    })
}

unsafe extern "C" fn av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(av.cast(), FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if flags != 0 {
            return neg(FI_EBADFLAGS);
        }
        if count > 0 && fi_addr.is_null() {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&a.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(v)) = st.avs.get_mut(a.idx) else {
            return neg(FI_EINVAL);
        };
        for i in 0..count {
            // SAFETY: the caller's array of `count` fi_addr_t.
            let x = unsafe { *fi_addr.add(i) };
            match usize::try_from(x).ok().and_then(|x| v.addrs.get_mut(x)) {
                Some(slot @ Some(_)) => *slot = None,
                _ => return neg(FI_EINVAL),
            }
        }
        0
    })
}

unsafe extern "C" fn av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(av.cast(), FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if addrlen.is_null() {
            return neg(FI_EINVAL);
        }
        let st = match lock(&a.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(v)) = st.avs.get(a.idx) else {
            return neg(FI_EINVAL);
        };
        let Some(Some(b)) = usize::try_from(fi_addr).ok().and_then(|x| v.addrs.get(x)) else {
            return neg(FI_ENOENT);
        };
        // SAFETY: the caller's buffer of *addrlen bytes.
        unsafe {
            let n = (*addrlen).min(ADDR_LEN);
            if !addr.is_null() {
                std::ptr::copy_nonoverlapping(b.as_ptr(), addr.cast::<u8>(), n);
            }
            *addrlen = ADDR_LEN;
        }
        0
    })
}

/// `fi_av_straddr`: `fi_addr_mrc://` and the address in hex, cut to `*len` bytes
/// (NUL included); `*len` becomes the whole length.
unsafe extern "C" fn av_straddr(
    _av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    guard(|| {
        if addr.is_null() || buf.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: one address of ADDR_LEN bytes; the caller's buffer of *len bytes.
        unsafe {
            let b = std::slice::from_raw_parts(addr.cast::<u8>(), ADDR_LEN);
            let mut s = String::from("fi_addr_mrc://");
            for x in b {
                s.push_str(&format!("{x:02x}"));
            }
            let cap = *len;
            if cap > 0 {
                let n = s.len().min(cap - 1);
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
            *len = s.len() + 1;
        }
        buf
    })
}

// ---------------------------------------------------------------------------------
// Completion queues

static CQ_FI_OPS: fi_ops = table!(fi_ops {
    close: cq_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static CQ_OPS: fi_ops_cq = table!(fi_ops_cq {
    read: cq_read,
    readfrom: s4,
    readerr: cq_readerr,
    sread: cq_sread,
    sreadfrom: s6,
    signal: s1,
    strerror: cq_strerror,
});

unsafe extern "C" fn cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(domain.cast(), FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if cq.is_null() {
            return neg(FI_EINVAL);
        }
        let mut format = FI_CQ_FORMAT_CONTEXT;
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() } {
            format = match a.format {
                FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
                f @ (FI_CQ_FORMAT_CONTEXT | FI_CQ_FORMAT_MSG | FI_CQ_FORMAT_DATA
                | FI_CQ_FORMAT_TAGGED) => f,
                _ => return neg(FI_ENOSYS),
            };
            // fi_cq_sread polls (there is no file descriptor or condition to wait on).
            if !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC) {
                return neg(FI_ENOSYS);
            }
        }
        let mut st = match lock(&d.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let idx = push(
            &mut st.cqs,
            CqState {
                format,
                ok: VecDeque::new(),
                errs: VecDeque::new(),
            },
        );
        let c = Box::new(Cq {
            fid: fid_cq {
                fid: new_fid(FI_CLASS_CQ, context, &CQ_FI_OPS),
                ops: &CQ_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: d.st.clone(),
            idx,
            api: crate::FI_API_VERSION,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *cq = Box::into_raw(c).cast() };
        0
    })
}

unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(f, FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if let Ok(mut st) = lock(&c.st) {
            if st
                .eps
                .iter()
                .flatten()
                .any(|e| e.txcq == Some(c.idx) || e.rxcq == Some(c.idx))
            {
                return neg(FI_EBUSY);
            }
            st.cqs[c.idx] = None;
        }
        // SAFETY: one of our CQs, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Cq>()) });
        0
    })
}

/// Progresses every endpoint bound to CQ `idx`.
fn progress_cq(st: &mut State, idx: usize) {
    let State { eps, cqs, .. } = st;
    for e in eps.iter_mut().flatten() {
        if e.txcq == Some(idx) || e.rxcq == Some(idx) {
            e.progress(cqs);
        }
    }
}

/// Bytes of one entry of `format`.
fn entry_size(format: u32) -> usize {
    match format {
        FI_CQ_FORMAT_MSG => std::mem::size_of::<fi_cq_msg_entry>(),
        FI_CQ_FORMAT_DATA => std::mem::size_of::<fi_cq_data_entry>(),
        FI_CQ_FORMAT_TAGGED => std::mem::size_of::<fi_cq_tagged_entry>(),
        _ => std::mem::size_of::<fi_cq_entry>(),
    }
}

/// Writes `e` as entry `i` of `buf` in `format`.
unsafe fn write_entry(buf: *mut c_void, i: usize, format: u32, e: &Entry) {
    let t = fi_cq_tagged_entry {
        op_context: e.ctx as *mut c_void,
        flags: e.flags,
        len: e.len,
        buf: e.buf as *mut c_void,
        data: 0,
        tag: 0,
    };
    // SAFETY: the caller's array of at least i + 1 entries of `format`; each format is a
    // prefix of fi_cq_tagged_entry.
    unsafe {
        let n = entry_size(format);
        std::ptr::copy_nonoverlapping(
            (&t as *const fi_cq_tagged_entry).cast::<u8>(),
            buf.cast::<u8>().add(i * n),
            n,
        );
    }
}

/// Reads up to `count` entries; `-FI_EAVAIL` while an error entry waits.
fn cq_take(st: &mut State, idx: usize, buf: *mut c_void, count: usize) -> isize {
    let Some(Some(c)) = st.cqs.get_mut(idx) else {
        return neg(FI_EINVAL);
    };
    if !c.errs.is_empty() {
        return neg(FI_EAVAIL);
    }
    let mut n = 0;
    while n < count {
        let Some(e) = c.ok.pop_front() else { break };
        // SAFETY: the caller's array of `count` entries.
        unsafe { write_entry(buf, n, c.format, &e) };
        n += 1;
    }
    if n == 0 { neg(FI_EAGAIN) } else { n as isize }
}

unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(cq.cast(), FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if buf.is_null() && count > 0 {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&c.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        progress_cq(&mut st, c.idx);
        cq_take(&mut st, c.idx, buf, count)
    })
}

unsafe extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(cq.cast(), FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if buf.is_null() && count > 0 {
            return neg(FI_EINVAL);
        }
        let until = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            {
                let mut st = match lock(&c.st) {
                    Ok(s) => s,
                    Err(e) => return neg(e),
                };
                progress_cq(&mut st, c.idx);
                let r = cq_take(&mut st, c.idx, buf, count);
                if r != neg::<isize>(FI_EAGAIN) {
                    return r;
                }
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return neg(FI_EAGAIN);
            }
            std::thread::yield_now();
        }
    })
}

unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(cq.cast(), FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if buf.is_null() {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&c.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(q)) = st.cqs.get_mut(c.idx) else {
            return neg(FI_EINVAL);
        };
        let Some(e) = q.errs.pop_front() else {
            return neg(FI_EAGAIN);
        };
        // SAFETY: the caller's fi_cq_err_entry; err_data_size exists from API 1.5 on.
        unsafe {
            let b = &mut *buf;
            b.op_context = e.ctx as *mut c_void;
            b.flags = e.flags;
            b.len = e.len;
            b.buf = e.buf as *mut c_void;
            b.data = 0;
            b.tag = 0;
            b.olen = e.olen;
            b.err = e.err;
            b.prov_errno = e.err;
            if c.api >= crate::fi_version(1, 5) {
                // The application's err_data buffer is left alone (none is given).
                b.err_data_size = 0;
            } else {
                b.err_data = std::ptr::null_mut();
            }
        }
        1
    })
}

unsafe extern "C" fn cq_strerror(
    _cq: *mut fid_cq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard(|| unsafe { strerror_into(buf, len) })
}

// ---------------------------------------------------------------------------------
// Endpoints

static EP_FI_OPS: fi_ops = table!(fi_ops {
    close: ep_close,
    bind: ep_bind,
    control: ep_control,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static EP_OPS: fi_ops_ep = table!(fi_ops_ep {
    cancel: s2,
    getopt: ep_getopt,
    setopt: ep_setopt,
    tx_ctx: s5,
    rx_ctx: s5,
    rx_size_left: s1,
    tx_size_left: s1,
});
static CM_OPS: fi_ops_cm = table!(fi_ops_cm {
    setname: s3,
    getname: ep_getname,
    getpeer: s3,
    connect: s4,
    listen: s1,
    accept: s3,
    reject: s4,
    shutdown: s2,
    join: s5,
});
static MSG_OPS: fi_ops_msg = table!(fi_ops_msg {
    recv: ep_recv,
    recvv: ep_recvv,
    recvmsg: ep_recvmsg,
    send: ep_send,
    sendv: ep_sendv,
    sendmsg: ep_sendmsg,
    inject: ep_inject,
    senddata: s7,
    injectdata: s5,
});
static RMA_OPS: fi_ops_rma = table!(fi_ops_rma {
    read: s8,
    readv: s8,
    readmsg: s3,
    write: s8,
    writev: s8,
    writemsg: s3,
    inject: s6,
    writedata: s9,
    injectdata: s7,
});
static TAGGED_OPS: fi_ops_tagged = table!(fi_ops_tagged {
    recv: s8,
    recvv: s8,
    recvmsg: s3,
    send: s7,
    sendv: s7,
    sendmsg: s3,
    inject: s5,
    senddata: s8,
    injectdata: s6,
});
static ATOMIC_OPS: fi_ops_atomic = table!(fi_ops_atomic {
    write: s10,
    writev: s10,
    writemsg: s3,
    inject: s8,
    readwrite: s12,
    readwritev: s13,
    readwritemsg: s6,
    compwrite: s14,
    compwritev: s16,
    compwritemsg: s9,
    writevalid: s4,
    readwritevalid: s4,
    compwritevalid: s4,
});
static COLL_OPS: fi_ops_collective = table!(fi_ops_collective {
    barrier: s3,
    broadcast: s9,
    alltoall: s10,
    allreduce: s11,
    allgather: s10,
    reduce_scatter: s11,
    reduce: s12,
    scatter: s11,
    gather: s11,
    msg: s6,
    barrier2: s4,
});

unsafe extern "C" fn ep_open(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(domain.cast(), FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if ep.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's info, null or live.
        if let Some(i) = unsafe { info.as_ref() }
            && let Some(a) = unsafe { i.ep_attr.as_ref() }
            && !matches!(a.type_, FI_EP_UNSPEC | FI_EP_RDM)
        {
            return neg(FI_EINVAL);
        }
        let state = match EpState::open() {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let mut st = match lock(&d.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let idx = push(&mut st.eps, state);
        let e = Box::new(Ep {
            fid: fid_ep {
                fid: new_fid(FI_CLASS_EP, context, &EP_FI_OPS),
                ops: &EP_OPS as *const _ as *mut _,
                cm: &CM_OPS as *const _ as *mut _,
                msg: &MSG_OPS as *const _ as *mut _,
                rma: &RMA_OPS as *const _ as *mut _,
                tagged: &TAGGED_OPS as *const _ as *mut _,
                atomic: &ATOMIC_OPS as *const _ as *mut _,
                collective: &COLL_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: d.st.clone(),
            idx,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *ep = Box::into_raw(e).cast() };
        0
    })
}

unsafe extern "C" fn ep_open2(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return neg(FI_EBADFLAGS);
    }
    unsafe { ep_open(domain, info, ep, context) }
}

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(e) = (unsafe { obj::<Ep>(f, FI_CLASS_EP) }) else {
            return neg(FI_EINVAL);
        };
        let gone = lock(&e.st).ok().and_then(|mut st| st.eps[e.idx].take());
        // The worker (its sockets and QPs) goes first, then the staging slots.
        drop(gone);
        // SAFETY: one of our endpoints, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Ep>()) });
        0
    })
}

/// Runs `f` on endpoint `ep`'s state, the domain's CQs and AVs.
fn with_ep<R: Ret>(
    ep: *const fid,
    f: impl FnOnce(&mut EpState, &mut [Option<CqState>], &[Option<AvState>]) -> R,
) -> R {
    let Some(e) = (unsafe { obj::<Ep>(ep, FI_CLASS_EP) }) else {
        return neg(FI_EINVAL);
    };
    let mut st = match lock(&e.st) {
        Ok(s) => s,
        Err(x) => return neg(x),
    };
    let State { eps, cqs, avs } = &mut *st;
    match eps.get_mut(e.idx).and_then(Option::as_mut) {
        Some(s) => f(s, cqs, avs),
        None => neg(FI_EINVAL),
    }
}

unsafe extern "C" fn ep_bind(ep: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard(|| {
        let Some(e) = (unsafe { obj::<Ep>(ep, FI_CLASS_EP) }) else {
            return neg(FI_EINVAL);
        };
        // SAFETY: the caller's fid, null or live.
        let Some(class) = (unsafe { bfid.as_ref() }).map(|b| b.fclass as u32) else {
            return neg(FI_EINVAL);
        };
        match class {
            FI_CLASS_AV => {
                let Some(a) = (unsafe { obj::<Av>(bfid, FI_CLASS_AV) }) else {
                    return neg(FI_EINVAL);
                };
                if !Arc::ptr_eq(&a.st, &e.st) {
                    return neg(FI_EINVAL);
                }
                let idx = a.idx;
                with_ep(ep, |s, _, _| {
                    if s.av.is_some() {
                        return neg(FI_EINVAL);
                    }
                    s.av = Some(idx);
                    0
                })
            }
            FI_CLASS_CQ => {
                let Some(c) = (unsafe { obj::<Cq>(bfid, FI_CLASS_CQ) }) else {
                    return neg(FI_EINVAL);
                };
                if !Arc::ptr_eq(&c.st, &e.st) {
                    return neg(FI_EINVAL);
                }
                let all = (FI_TRANSMIT | FI_RECV) as u64 | FI_SELECTIVE_COMPLETION;
                if flags & !all != 0 || flags & (FI_TRANSMIT | FI_RECV) as u64 == 0 {
                    return neg(FI_EBADFLAGS);
                }
                let idx = c.idx;
                with_ep(ep, |s, _, _| {
                    let sel = flags & FI_SELECTIVE_COMPLETION != 0;
                    if flags & FI_TRANSMIT as u64 != 0 {
                        s.txcq = Some(idx);
                        s.tx_selective = sel;
                    }
                    if flags & FI_RECV as u64 != 0 {
                        s.rxcq = Some(idx);
                        s.rx_selective = sel;
                    }
                    0
                })
            }
            // An RDM endpoint has no connection events: binding an EQ is accepted.
            FI_CLASS_EQ => match unsafe { obj::<Eq>(bfid, FI_CLASS_EQ) } {
                Some(_) => 0,
                None => neg(FI_EINVAL),
            },
            FI_CLASS_CNTR => neg(FI_ENOSYS),
            _ => neg(FI_EINVAL),
        }
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard(|| match command as u32 {
        FI_ENABLE => with_ep(f, |s, _, _| {
            if s.av.is_none() || s.txcq.is_none() || s.rxcq.is_none() {
                return neg(FI_ENOCQ);
            }
            s.enabled = true;
            0
        }),
        _ => neg(FI_ENOSYS),
    })
}

unsafe extern "C" fn ep_getopt(
    _f: *mut fid,
    _level: c_int,
    _optname: c_int,
    _optval: *mut c_void,
    _optlen: *mut usize,
) -> c_int {
    neg(FI_ENOPROTOOPT)
}

unsafe extern "C" fn ep_setopt(
    _f: *mut fid,
    _level: c_int,
    _optname: c_int,
    _optval: *const c_void,
    _optlen: usize,
) -> c_int {
    neg(FI_ENOPROTOOPT)
}

unsafe extern "C" fn ep_getname(f: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(|| {
        if addrlen.is_null() {
            return neg(FI_EINVAL);
        }
        with_ep(f, |s, _, _| {
            // SAFETY: the caller's buffer of *addrlen bytes.
            unsafe {
                let cap = *addrlen;
                *addrlen = ADDR_LEN;
                if cap < ADDR_LEN || addr.is_null() {
                    return neg(FI_ETOOSMALL);
                }
                std::ptr::copy_nonoverlapping(s.addr.as_ptr(), addr.cast::<u8>(), ADDR_LEN);
            }
            0
        })
    })
}

/// The caller's iovecs as (address, length) pairs; `Err` for too many or a null buffer
/// with a length.
unsafe fn iovs(iov: *const iovec, count: usize) -> Result<Vec<(usize, usize)>, u32> {
    if count > IOV_LIMIT || (count > 0 && iov.is_null()) {
        return Err(FI_EINVAL);
    }
    let mut v = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: the caller's array of `count` iovecs.
        let x = unsafe { &*iov.add(i) };
        if x.iov_base.is_null() && x.iov_len > 0 {
            return Err(FI_EINVAL);
        }
        v.push((x.iov_base as usize, x.iov_len));
    }
    Ok(v)
}

fn post_recv(
    ep: *mut fid_ep,
    iov: Vec<(usize, usize)>,
    ctx: *mut c_void,
    flags: Option<u64>,
) -> isize {
    with_ep(ep.cast(), |s, cqs, _| {
        let completion = match flags {
            None => !s.rx_selective,
            Some(f) => !s.rx_selective || f & FI_COMPLETION as u64 != 0,
        };
        let r = PostedRecv {
            iov,
            ctx: ctx as usize,
            completion,
        };
        s.progress(cqs);
        match s.recv(r, cqs) {
            Ok(()) => 0,
            Err(e) => neg(e),
        }
    })
}

unsafe extern "C" fn ep_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    _src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| {
        if buf.is_null() && len > 0 {
            return neg(FI_EINVAL);
        }
        post_recv(ep, vec![(buf as usize, len)], context, None)
    })
}

unsafe extern "C" fn ep_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    _src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| match unsafe { iovs(iov, count) } {
        Ok(v) => post_recv(ep, v, context, None),
        Err(e) => neg(e),
    })
}

unsafe extern "C" fn ep_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(|| {
        // SAFETY: the caller's fi_msg, null or live.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        let ok = (FI_COMPLETION | FI_MORE | FI_REMOTE_CQ_DATA) as u64;
        if flags & !ok != 0 {
            return neg(FI_EBADFLAGS);
        }
        match unsafe { iovs(m.msg_iov, m.iov_count) } {
            Ok(v) => post_recv(ep, v, m.context, Some(flags)),
            Err(e) => neg(e),
        }
    })
}

fn post_send(
    ep: *mut fid_ep,
    iov: &[(usize, usize)],
    dest: fi_addr_t,
    ctx: *mut c_void,
    completion: Option<bool>,
) -> isize {
    // SAFETY: the caller's buffers (the fi_send contract), read here, before the call
    // returns: the provider copies every send.
    let slices: Vec<&[u8]> = iov
        .iter()
        .map(|&(p, l)| {
            if l == 0 {
                &[][..]
            } else {
                unsafe { std::slice::from_raw_parts(p as *const u8, l) }
            }
        })
        .collect();
    with_ep(ep.cast(), |s, cqs, avs| {
        let completion = completion.unwrap_or(!s.tx_selective);
        let r = match s.send(avs, dest, &slices, ctx as usize, completion) {
            Ok(()) => 0,
            Err(e) => neg(e),
        };
        // Send it now, and give the application's next call completions to find.
        s.progress(cqs);
        r
    })
}

unsafe extern "C" fn ep_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| {
        if buf.is_null() && len > 0 {
            return neg(FI_EINVAL);
        }
        post_send(ep, &[(buf as usize, len)], dest, context, None)
    })
}

unsafe extern "C" fn ep_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| match unsafe { iovs(iov, count) } {
        Ok(v) => post_send(ep, &v, dest, context, None),
        Err(e) => neg(e),
    })
}

unsafe extern "C" fn ep_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(|| {
        // SAFETY: the caller's fi_msg, null or live.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        let ok = (FI_COMPLETION
            | FI_MORE
            | FI_INJECT
            | FI_INJECT_COMPLETE
            | FI_TRANSMIT_COMPLETE
            | FI_DELIVERY_COMPLETE) as u64;
        if flags & !ok != 0 {
            return neg(FI_EBADFLAGS);
        }
        let v = match unsafe { iovs(m.msg_iov, m.iov_count) } {
            Ok(v) => v,
            Err(e) => return neg(e),
        };
        if flags & FI_INJECT as u64 != 0 && v.iter().map(|x| x.1).sum::<usize>() > INJECT_SIZE {
            return neg(FI_EMSGSIZE);
        }
        // With FI_SELECTIVE_COMPLETION only FI_COMPLETION asks for one; otherwise
        // every sendmsg completes (FI_INJECT included).
        let sel = flags & FI_COMPLETION as u64 != 0;
        let completion = with_ep(
            ep.cast(),
            |s, _, _| {
                if s.tx_selective { sel as c_int } else { 1 }
            },
        );
        if completion < 0 {
            return completion as isize;
        }
        post_send(ep, &v, m.addr, m.context, Some(completion == 1))
    })
}

unsafe extern "C" fn ep_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
) -> isize {
    guard(|| {
        if buf.is_null() && len > 0 {
            return neg(FI_EINVAL);
        }
        if len > INJECT_SIZE {
            return neg(FI_EMSGSIZE);
        }
        post_send(
            ep,
            &[(buf as usize, len)],
            dest,
            std::ptr::null_mut(),
            Some(false),
        )
    })
}
