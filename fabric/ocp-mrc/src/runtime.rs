//! The objects behind the C handles and the QP runtime (feature `verbs`).
//!
//! One MRC QP is one [`Worker`] on its own [`VerbsDatapath`] (four UD QPs on the device
//! of the application's `ibv_context`; the first one's number is the MRC QPN), driven by
//! one progress thread of the library: the application's threads only post and poll, so
//! a program that waits by spinning on memory (as OCP's benchmark does) still sees its
//! data land. Every object is behind a `Mutex`; the progress thread holds the QP's lock
//! for one pass at a time.
//!
//! A QP's life: created (datapath open, loopback RC QP created in the application's PD,
//! staging buffers registered) -> INIT -> RTR (peer GID and QPN recorded, GID checked) ->
//! RTS (the transport QP is created with the MRC attributes, the rendezvous starts) ->
//! connected (the transport runs; WRITEs flow). Work posted at RTS before the rendezvous
//! ended waits in the QP and goes out when it ends.
//!
//! Planes: a context created with `MRC_PLANE_DEVICES` (docs/OCP_MRC.md, "Several
//! planes") gives each QP one UD datapath per device (`datapath::QpDatapath`: the
//! application's device is plane 0 and carries the MRC QPN, the hello and the loopback
//! placement; the others only their EVs' packets); each EV of the QP's profile is placed
//! on the plane its port names (`crate::ctl::ev_planes`), and the hello carries every
//! plane's endpoint.
//!
//! Placement: see `wire` (the chunk header) and docs/OCP_MRC.md. Each received chunk is
//! written to its target by the device: an RDMA WRITE on an RC QP connected to itself,
//! from the staging buffer (an `ibv_reg_mr` of the library's in the application's PD) to
//! the address and rkey the chunk names. The device checks the rkey, the bounds and the
//! MR's `IBV_ACCESS_REMOTE_WRITE` as for any RC WRITE, so nothing lands where the
//! application's registration does not allow it; a refused chunk completes in error,
//! counts, raises `IBV_EVENT_QP_ACCESS_ERR`, and the loopback QP is reset and the chunks
//! behind it re-posted.

mod datapath;

use crate::abi::limits;
use crate::ext::{self, MrcXEvCount, TransportView};
use crate::state::{self, MrcSettings, QpState};
use crate::wire::{
    self, CHUNK_BYTES, Hello, Verdict, VerdictBook, VerdictMaker, WRITE_HEADER_BYTES, WriteHeader,
};
use datapath::QpDatapath;
use mrc_congestion::{AnyController, CcKind};
use mrc_fabric::datapath::{ConnId, Datapath, PathMap, TxBatch};
use mrc_fabric::engine::{EngineConfig, QpConfig, Worker};
use mrc_fabric::verbs::addr::EndpointAddr;
use mrc_fabric::verbs::{DEFAULT_QKEY, Device, Nic, VerbsConfig, VerbsDatapath, gid_to_ip};
use mrc_transport::completion::{Completion, WcOpcode, WcStatus};
use mrc_transport::path::PathState;
use mrc_transport::region::MrKey;
use mrc_transport::{Access, Ecn, Sge};
use rdma_sys::*;
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv6Addr, SocketAddr};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `enum ibv_wc_status` values used here.
pub(crate) mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const FATAL_ERR: u32 = 19;
    pub const GENERAL_ERR: u32 = 21;
}
/// `IBV_WC_RDMA_WRITE`.
const WC_RDMA_WRITE: u32 = 1;
/// `IBV_WC_RECV_RDMA_WITH_IMM`.
const WC_RECV_RDMA_WITH_IMM: u32 = 129;
/// `IBV_WC_WITH_IMM`.
const WC_WITH_IMM: u32 = 1 << 1;
/// `enum ibv_event_type` values raised.
pub(crate) mod event {
    pub const CQ_ERR: u32 = 0;
    pub const QP_FATAL: u32 = 1;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const COMM_EST: u32 = 4;
}

/// UD QPs per MRC QP's datapath.
const UD_QPS: u32 = 4;
/// mrc header bytes on top of a packet's payload in a UD datagram.
const MRC_HEADER_BYTES: u32 = 56;
/// Staging slots on each side (send, receive) of one QP.
const SLOTS: usize = 256;
/// Bytes per staging slot.
const SLOT_BYTES: usize = WRITE_HEADER_BYTES + CHUNK_BYTES;
/// Hello resend interval.
const HELLO_EVERY: Duration = Duration::from_millis(10);
/// Hellos sent after hearing the peer, before connecting.
const HELLOS_AFTER_HEARD: u32 = 4;
/// How long the rendezvous may take (the peer may not have reached RTS yet; a VM under
/// TCG is slow).
const HELLO_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the progress thread keeps polling after the last work before it naps.
const SPIN: Duration = Duration::from_millis(2);
/// The progress thread's nap when idle.
const NAP: Duration = Duration::from_micros(100);
/// Idle this long (a QP before RTS, or an idle one), the progress thread naps
/// [`LONG_NAP`] instead (work posted meanwhile waits at most that long).
const LONG_IDLE: Duration = Duration::from_millis(200);
/// The long nap.
const LONG_NAP: Duration = Duration::from_millis(1);
/// lkey checks posted ahead of the transport.
const CHECKS_AHEAD: usize = 64;
/// How often a QP of an EV profile re-reads it (denials) and reports its EVs' states.
const EV_CHECK_EVERY: Duration = Duration::from_millis(1);

/// Whether `LIB_MRC_DEBUG` is set: the runtime then narrates the rendezvous and
/// placement on stderr.
pub(crate) fn debug_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("LIB_MRC_DEBUG").is_some())
}

macro_rules! debug {
    ($($t:tt)*) => {
        if debug_on() {
            eprintln!("lib_mrc: {}", format_args!($($t)*));
        }
    };
}

/// Locks `m`, whatever a panic left behind (every structure here stays consistent between
/// statements that could panic).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One record of `mrc_get_async_event`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AsyncEvent {
    /// The element (QP or CQ pointer, or port number), as the union's 8 bytes.
    pub element: usize,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

/// `struct mrc_context`.
pub(crate) struct Context {
    pub vctx: *mut ibv_context,
    /// The API version the application said it uses (recorded; one version is spoken).
    #[allow(dead_code)]
    pub api_version: u32,
    #[allow(dead_code)]
    pub vendor_version: u32,
    pub events: Mutex<VecDeque<AsyncEvent>>,
    pub events_cv: Condvar,
    /// Live children (channels, CQs, QPs, hints): destroy refuses with EBUSY while any.
    pub children: AtomicUsize,
    /// The devices of planes 1, 2, ... (`MRC_PLANE_DEVICES` when the context was
    /// created; plane 0 is `vctx`'s device): empty on one plane. Each QP opens one UD
    /// datapath per plane, and an EV on port `p` leaves from plane `p - 1`'s device.
    pub planes: Vec<String>,
}

// SAFETY: the ibv_context pointer is only passed to libibverbs, which is thread-safe.
unsafe impl Send for Context {}
// SAFETY: as above; everything else is behind locks or atomics.
unsafe impl Sync for Context {}

impl Context {
    /// Planes (ports) of the context: its device and `MRC_PLANE_DEVICES`'.
    pub fn plane_count(&self) -> usize {
        1 + self.planes.len()
    }

    pub fn raise(&self, element: usize, event_type: u32) {
        let mut q = lock(&self.events);
        // Bounded: an application that never reads its events loses the oldest.
        if q.len() >= 4096 {
            q.pop_front();
        }
        q.push_back(AsyncEvent {
            element,
            event_type,
        });
        self.events_cv.notify_all();
    }
}

/// `struct mrc_comp_channel`: a pipe carrying CQ pointers.
pub(crate) struct Channel {
    pub ctx: *const Context,
    pub rfd: c_int,
    pub wfd: c_int,
    pub cqs: AtomicUsize,
}

// SAFETY: file descriptors and a pointer to a Sync context.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Channel {
    pub fn new(ctx: *const Context) -> Result<Channel, i32> {
        let mut fds = [0 as c_int; 2];
        // SAFETY: a two-int array.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(errno());
        }
        // The writer never blocks (a full pipe only means events are pending anyway).
        // SAFETY: a descriptor just opened.
        unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
        Ok(Channel {
            ctx,
            rfd: fds[0],
            wfd: fds[1],
            cqs: AtomicUsize::new(0),
        })
    }

    fn notify(&self, cq: usize) {
        let b = (cq as u64).to_ne_bytes();
        // SAFETY: 8 bytes from a live array to our own descriptor.
        let _ = unsafe { libc::write(self.wfd, b.as_ptr().cast(), b.len()) };
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: our own descriptors, closed once.
        unsafe {
            libc::close(self.rfd);
            libc::close(self.wfd);
        }
    }
}

/// One work completion, before it becomes a `struct ibv_wc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
}

pub(crate) struct CqQueue {
    pub wcs: VecDeque<Wc>,
    pub armed: bool,
    pub overflows: u64,
    pub events_got: u64,
    pub events_acked: u64,
}

/// `struct mrc_cq`.
pub(crate) struct Cq {
    pub ctx: *const Context,
    pub cqe: usize,
    pub cq_context: *mut c_void,
    pub channel: *const Channel,
    pub q: Mutex<CqQueue>,
    pub qps: AtomicUsize,
}

// SAFETY: the raw pointers name objects that outlive the CQ (destroy refuses while
// referenced); cq_context is the application's, only handed back.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// Adds `wc`; wakes the channel when armed. A full CQ drops it and raises
    /// `IBV_EVENT_CQ_ERR` (verbs: CQ overrun).
    pub fn push(&self, wc: Wc) {
        let mut q = lock(&self.q);
        if q.wcs.len() >= self.cqe {
            q.overflows += 1;
            drop(q);
            // SAFETY: the context outlives the CQ.
            unsafe { &*self.ctx }.raise(self as *const Cq as usize, event::CQ_ERR);
            return;
        }
        q.wcs.push_back(wc);
        if q.armed && !self.channel.is_null() {
            q.armed = false;
            q.events_got += 1;
            drop(q);
            // SAFETY: the channel outlives the CQ.
            unsafe { &*self.channel }.notify(self as *const Cq as usize);
        }
    }
}

impl Cq {
    /// Writes one event to the channel when armed (an EV event CQ, whose entries live in
    /// the controller's registry, calls this when events arrived).
    pub fn wake(&self) {
        let mut q = lock(&self.q);
        if q.armed && !self.channel.is_null() {
            q.armed = false;
            q.events_got += 1;
            drop(q);
            // SAFETY: the channel outlives the CQ.
            unsafe { &*self.channel }.notify(self as *const Cq as usize);
        }
    }
}

/// `struct mrc_qp_hint`.
pub(crate) struct Hint {
    pub ctx: *const Context,
    pub attr: Mutex<crate::abi::MrcQpHintAttr>,
    pub qps: AtomicUsize,
}

// SAFETY: a pointer to a Sync context; the rest is locked or atomic.
unsafe impl Send for Hint {}
// SAFETY: as above.
unsafe impl Sync for Hint {}

/// Page-aligned memory the library owns (staging buffers).
struct Staging {
    ptr: *mut u8,
    len: usize,
}

impl Staging {
    fn new(len: usize) -> Option<Staging> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; 4096 is a power of two multiple of the pointer size.
        let rc = unsafe { libc::posix_memalign(&mut p, 4096, len) };
        if rc != 0 || p.is_null() {
            return None;
        }
        // SAFETY: freshly allocated `len` bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        Some(Staging { ptr: p.cast(), len })
    }

    fn slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < SLOTS);
        // SAFETY: i < SLOTS, the buffer holds SLOTS slots.
        unsafe { self.ptr.add(i * SLOT_BYTES) }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: allocated by posix_memalign, freed once.
        unsafe { libc::free(self.ptr.cast()) };
    }
}

/// The loopback RC QP that places received chunks (in the application's PD).
pub(crate) struct Loopback {
    qp: *mut ibv_qp,
    cq: *mut ibv_cq,
    /// The receive staging buffer's registration in the application's PD.
    mr: *mut ibv_mr,
    port: u8,
    gid_index: u8,
    mtu: u32,
}

/// What the QP runtime asks of a loopback RC QP (the placement QP and the lkey check's):
/// [`Loopback`] on the application's device; the runtime's tests put a fake in its place.
pub(crate) trait LoopbackQp {
    /// RESET -> INIT -> RTR -> RTS, connected to itself.
    fn connect(&mut self) -> Result<(), String>;
    /// To RESET, its completions drained.
    fn reset(&mut self);
    /// Posts the placement WRITE of `len` bytes at `src` to (`remote_addr`, `rkey`).
    fn post(
        &self,
        wr_id: u64,
        src: *mut u8,
        len: u32,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), i32>;
    /// Posts the lkey check of an application SGE.
    fn post_check(&self, wr_id: u64, addr: u64, len: u32, lkey: u32) -> Result<(), i32>;
    /// Reaps completions: (wr_id, `enum ibv_wc_status`).
    fn poll(&self, out: &mut Vec<(u64, u32)>);
    /// The GID index it connects through.
    fn set_gid_index(&mut self, gid_index: u8);
}

impl Loopback {
    /// Creates the CQ, the RC QP (`sges` per send WR) and the MR of `buf` (remote
    /// writable when `remote_write`: the lkey check's scratch is a WRITE's target).
    fn create(
        pd: *mut ibv_pd,
        buf: &Staging,
        sges: u32,
        remote_write: bool,
    ) -> Result<Loopback, String> {
        // SAFETY: pd is the application's live PD (checked non-null by the caller).
        let vctx = unsafe { (*pd).context };
        // SAFETY: live context.
        let cq = unsafe {
            ibv_create_cq(
                vctx,
                (SLOTS * 2) as c_int,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(format!("ibv_create_cq: errno {}", errno()));
        }
        // SAFETY: plain data; zero is valid for every field.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq;
        init.recv_cq = cq;
        init.cap.max_send_wr = SLOTS as u32;
        init.cap.max_recv_wr = 1;
        init.cap.max_send_sge = sges;
        init.cap.max_recv_sge = 1;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        // SAFETY: live PD and CQ.
        let qp = unsafe { ibv_create_qp(pd, &mut init) };
        if qp.is_null() {
            let e = errno();
            // SAFETY: our CQ, unused.
            unsafe { ibv_destroy_cq(cq) };
            return Err(format!("ibv_create_qp (RC loopback): errno {e}"));
        }
        let mut access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as c_int;
        if remote_write {
            access |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0 as c_int;
        }
        // SAFETY: our buffer, valid until the Loopback is dropped (the QP owns both).
        let mr = unsafe { ibv_reg_mr(pd, buf.ptr.cast(), buf.len, access) };
        if mr.is_null() {
            let e = errno();
            // SAFETY: ours, unused.
            unsafe {
                ibv_destroy_qp(qp);
                ibv_destroy_cq(cq);
            }
            return Err(format!("ibv_reg_mr (staging): errno {e}"));
        }
        Ok(Loopback {
            qp,
            cq,
            mr,
            port: 1,
            gid_index: 0,
            mtu: 4096,
        })
    }
}

impl LoopbackQp for Loopback {
    fn set_gid_index(&mut self, gid_index: u8) {
        self.gid_index = gid_index;
    }

    /// RESET -> INIT -> RTR -> RTS, connected to itself through GID `gid_index`.
    fn connect(&mut self) -> Result<(), String> {
        let port = self.port;
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: live QP's context, out-pointer to a local.
        let rc = unsafe {
            ibv_query_gid(
                (*self.qp).context,
                port,
                c_int::from(self.gid_index),
                &mut gid,
            )
        };
        if rc != 0 {
            return Err(format!("ibv_query_gid: {rc}"));
        }
        // SAFETY: live QP.
        let qpn = unsafe { (*self.qp).qp_num };
        let mtu_enum = match self.mtu {
            256 => 1,
            512 => 2,
            1024 => 3,
            2048 => 4,
            _ => 5,
        };
        use ibv_qp_attr_mask as k;
        let steps = [
            (ibv_qp_state::IBV_QPS_RESET, k::IBV_QP_STATE),
            (
                ibv_qp_state::IBV_QPS_INIT,
                k::IBV_QP_STATE | k::IBV_QP_PKEY_INDEX | k::IBV_QP_PORT | k::IBV_QP_ACCESS_FLAGS,
            ),
            (
                ibv_qp_state::IBV_QPS_RTR,
                k::IBV_QP_STATE
                    | k::IBV_QP_AV
                    | k::IBV_QP_PATH_MTU
                    | k::IBV_QP_DEST_QPN
                    | k::IBV_QP_RQ_PSN
                    | k::IBV_QP_MAX_DEST_RD_ATOMIC
                    | k::IBV_QP_MIN_RNR_TIMER,
            ),
            (
                ibv_qp_state::IBV_QPS_RTS,
                k::IBV_QP_STATE
                    | k::IBV_QP_TIMEOUT
                    | k::IBV_QP_RETRY_CNT
                    | k::IBV_QP_RNR_RETRY
                    | k::IBV_QP_SQ_PSN
                    | k::IBV_QP_MAX_QP_RD_ATOMIC,
            ),
        ];
        for (st, mask) in steps {
            // SAFETY: plain data, zero-initialised, then the fields the mask names.
            let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = st;
            a.port_num = port;
            a.qp_access_flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
                | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
            a.path_mtu = mtu_enum;
            a.dest_qp_num = qpn;
            a.max_dest_rd_atomic = 1;
            a.min_rnr_timer = 12;
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = port;
            a.ah_attr.grh.dgid = gid;
            a.ah_attr.grh.sgid_index = self.gid_index;
            a.ah_attr.grh.hop_limit = 1;
            a.timeout = 14;
            a.retry_cnt = 7;
            a.rnr_retry = 7;
            a.max_rd_atomic = 1;
            // SAFETY: live QP, live attr.
            let rc = unsafe { ibv_modify_qp(self.qp, &mut a, mask.0 as c_int) };
            if rc != 0 {
                return Err(format!("ibv_modify_qp (loopback RC, state {st}): {rc}"));
            }
        }
        Ok(())
    }

    /// To RESET (work requests dropped) and its CQ drained, so that no completion of
    /// before the reset is taken for a later one; [`Loopback::connect`] brings it back.
    fn reset(&mut self) {
        // SAFETY: plain data, then the state.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RESET;
        // SAFETY: live QP, live attr.
        let _ =
            unsafe { ibv_modify_qp(self.qp, &mut a, ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int) };
        let mut out = Vec::new();
        loop {
            out.clear();
            self.poll(&mut out);
            if out.is_empty() {
                break;
            }
        }
    }

    /// Posts the placement WRITE of `len` bytes at `src` (in the staging MR) to
    /// (`remote_addr`, `rkey`), signalled, as `wr_id`.
    fn post(
        &self,
        wr_id: u64,
        src: *mut u8,
        len: u32,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), i32> {
        let mut sge = ibv_sge {
            addr: src as u64,
            length: len,
            // SAFETY: our live MR.
            lkey: unsafe { (*self.mr).lkey },
        };
        // SAFETY: plain data; zero is valid for every field and union.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(len > 0);
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.rdma = rdma_t { remote_addr, rkey };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; wr and sge live across the call.
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 { Err(rc) } else { Ok(()) }
    }

    /// Posts the lkey check of an application SGE: one signalled WRITE of two 1-byte
    /// SGEs, its first byte and its last, both under `lkey`, into this QP's own MR. The
    /// device accepts it only if `lkey` names an MR of the PD holding both bytes, hence
    /// (an MR is one range) the whole SGE; else it completes `IBV_WC_LOC_PROT_ERR`.
    fn post_check(&self, wr_id: u64, addr: u64, len: u32, lkey: u32) -> Result<(), i32> {
        let mut sges = [
            ibv_sge {
                addr,
                length: 1,
                lkey,
            },
            ibv_sge {
                addr: addr + u64::from(len.max(1) - 1),
                length: 1,
                lkey,
            },
        ];
        // SAFETY: plain data; zero is valid for every field and union.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = 2;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        // SAFETY: our live MR.
        let (remote_addr, rkey) = unsafe { ((*self.mr).addr as u64, (*self.mr).rkey) };
        wr.wr.rdma = rdma_t { remote_addr, rkey };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; wr and sges live across the call.
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 { Err(rc) } else { Ok(()) }
    }

    /// Reaps loopback completions: (wr_id, status).
    fn poll(&self, out: &mut Vec<(u64, u32)>) {
        // SAFETY: plain data.
        let mut wcs: [ibv_wc; 32] = unsafe { std::mem::zeroed() };
        // SAFETY: live CQ, 32 entries.
        let n = unsafe { ibv_poll_cq(self.cq, 32, wcs.as_mut_ptr()) };
        for w in wcs.iter().take(n.max(0) as usize) {
            out.push((w.wr_id, w.status));
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        // SAFETY: ours, destroyed once, QP before CQ; the MR's buffer outlives it.
        unsafe {
            ibv_destroy_qp(self.qp);
            ibv_destroy_cq(self.cq);
            ibv_dereg_mr(self.mr);
        }
    }
}

/// A WRITE the application posted, not yet fully handed to the transport.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingWr {
    pub wr_id: u64,
    pub signaled: bool,
    pub addr: u64,
    pub len: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub imm: Option<u32>,
    /// Bytes already handed to the transport.
    pub sent: u32,
    /// The WRITE's number (the responder's verdicts name it), given with its first chunk.
    pub seq: u64,
    /// The local SGE's lkey.
    pub lkey: u32,
    /// The device's lkey check: `None` until it answered, then whether it accepted.
    pub lkey_ok: Option<bool>,
    /// The check's id on the check loopback QP (0: not posted).
    pub check_id: u64,
}

/// A chunk the transport carries.
struct Chunk {
    slot: usize,
    packets: u32,
    /// Set on the last chunk of a WR: what its completion reports.
    done: Option<PendingWr>,
}

/// A chunk being placed by the loopback QP.
#[derive(Clone, Copy, Debug)]
struct Placing {
    slot: usize,
    hdr: WriteHeader,
    len: u32,
}

enum Phase {
    /// Before RTS.
    Idle,
    /// Rendezvous under way.
    Hello {
        conn: ConnId,
        peer_ip: std::net::IpAddr,
        last_sent: Option<Instant>,
        started: Instant,
        heard: Option<Box<Hello>>,
        sent_after_heard: u32,
    },
    /// The transport runs.
    Connected,
    /// Given up (error state).
    Failed,
}

/// Counters of one QP (for tests and the docs' numbers).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpCounters {
    pub chunks_sent: u64,
    pub chunks_placed: u64,
    pub placement_refused: u64,
    pub verdicts_sent: u64,
    pub verdicts_bad: u64,
    pub bad_chunks: u64,
    pub hellos_sent: u64,
    pub hellos_heard: u64,
    pub foreign_before_connect: u64,
    pub remote_access_errors: u64,
}

/// The mutable state of one QP: on the application's device, a UD datapath on a
/// [`Device`] and [`Loopback`] RC QPs (the runtime's tests run it on a fake NIC and a fake
/// loopback).
pub(crate) struct QpInner<N: Nic = Device, L: LoopbackQp = Loopback> {
    pub state: QpState,
    pub settings: MrcSettings,
    /// What the application set through `ibv_qp_attr` (returned by `mrc_query_qp`).
    pub vattr: ibv_qp_attr,
    pub hint: *const Hint,
    worker: Worker<QpDatapath<N>>,
    pub qpn: u32,
    engine_qpn: u32,
    mtu_payload: u32,
    /// The port's MTU less mrc's headers: `mtu_payload` before RTR's path MTU caps it.
    port_mtu_payload: u32,
    /// The peer's hello asked for no trim NACKs (its `MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED`).
    pub peer_no_trim_nacks: bool,
    peer_gid: Option<Ipv6Addr>,
    pub peer_qpn: u32,
    phase: Phase,
    /// How long the rendezvous may take ([`HELLO_TIMEOUT`]).
    hello_timeout: Duration,
    loopback: L,
    /// The RC QP connected to itself that checks the lkeys of posted WRITEs.
    lkey_lb: L,
    /// Its target (two bytes used).
    _lkey_scratch: Staging,
    /// lkey checks posted and not answered.
    checks_in_flight: u32,
    next_check: u64,
    send_buf: Staging,
    recv_buf: Staging,
    send_key: Option<MrKey>,
    recv_key: Option<MrKey>,
    free_send: Vec<usize>,
    pending: VecDeque<PendingWr>,
    chunks: HashMap<u64, Chunk>,
    next_id: u64,
    /// The state, counts and submission queue shared with the application's threads.
    pub public: Arc<Public>,
    wimm_outstanding: u32,
    packets_outstanding: u32,
    placing: VecDeque<Placing>,
    /// Chunks flushed by a loopback error, to re-post after the reset.
    replace: Vec<Placing>,
    /// The loopback QP refused a chunk and is in error: chunks wait in `replace`.
    lb_broken: bool,
    pub recv_wrs: VecDeque<u64>,
    pending_imm: VecDeque<Wc>,
    pub counters: QpCounters,
    send_cq: *const Cq,
    recv_cq: *const Cq,
    ctx: *const Context,
    me: usize,
    /// The EV profile's generation last applied (denials).
    ev_generation: u64,
    /// Per transport EV: in rotation (not ASSUMED_BAD) when last looked at.
    ev_seen: HashMap<u32, bool>,
    /// When the profile and the path states were last looked at.
    ev_checked: Instant,
    /// WRITEs numbered so far (requestor).
    wr_seq: u64,
    /// WRITEs acknowledged by the transport, waiting for the responder's verdict.
    acked: VecDeque<PendingWr>,
    /// The responder's verdicts on our WRITEs.
    book: VerdictBook,
    /// Our verdicts on the peer's WRITEs.
    maker: VerdictMaker,
}

// SAFETY: the raw pointers name objects that outlive the QP (destroy refuses while
// referenced) or that the QP owns (loopback, staging); the worker may move between
// threads (it is not shared: it is behind the QP's mutex).
unsafe impl Send for QpInner {}

/// `struct mrc_qp`: the state and its progress thread.
pub(crate) struct Qp {
    pub shared: Arc<QpShared>,
    pub thread: Option<JoinHandle<()>>,
    pub qpn: u32,
    pub qp_context: *mut c_void,
    pub send_cq: *const Cq,
    pub recv_cq: *const Cq,
    pub ctx: *const Context,
    pub init: InitCopy,
}

/// What `mrc_query_qp` returns of the creation attributes.
#[derive(Clone, Copy)]
pub(crate) struct InitCopy {
    pub cap: ibv_qp_cap,
    pub sq_sig_all: c_int,
    pub pd: *mut ibv_pd,
    pub send_ops_flags: u64,
    pub protocol_version: u32,
}

/// What the application's threads touch without the QP's lock: the state as they see
/// it, the counts that bound the queues, and the queue of work posted since the progress
/// thread's last pass.
pub(crate) struct Public {
    /// `enum ibv_qp_state` value.
    pub state: AtomicU32,
    /// Send WRs posted and not completed.
    pub outstanding: AtomicU32,
    /// Receive WRs posted and not consumed.
    pub recvs_held: AtomicU32,
    pub submit: Mutex<Submit>,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub sq_sig_all: bool,
    pub send_cq: *const Cq,
    pub recv_cq: *const Cq,
    pub qpn: u32,
}

// SAFETY: the CQ pointers name CQs that outlive the QP (Cq is Sync); the rest is atomic or
// locked.
unsafe impl Send for Public {}
// SAFETY: as above.
unsafe impl Sync for Public {}

/// Work the application posted, for the progress thread to take.
#[derive(Default)]
pub(crate) struct Submit {
    pub writes: VecDeque<PendingWr>,
    pub recvs: VecDeque<u64>,
}

fn dec(a: &AtomicU32) {
    let _ = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
        Some(v.saturating_sub(1))
    });
}

impl Public {
    fn flush_wc(&self, wr_id: u64, opcode: u32) -> Wc {
        Wc {
            wr_id,
            status: wc_status::WR_FLUSH_ERR,
            opcode,
            byte_len: 0,
            imm: 0,
            qp_num: self.qpn,
            src_qp: 0,
            wc_flags: 0,
        }
    }

    /// `mrc_post_send` of one validated WRITE: queued for the progress thread.
    pub fn post_write(&self, w: PendingWr) -> Result<(), i32> {
        let st = self.state.load(Ordering::Acquire);
        if st == QpState::Err.to_ibv() {
            // SAFETY: the CQ outlives the QP.
            unsafe { &*self.send_cq }.push(self.flush_wc(w.wr_id, WC_RDMA_WRITE));
            return Ok(());
        }
        if st != QpState::Rts.to_ibv() {
            return Err(libc::EINVAL);
        }
        if self.outstanding.fetch_add(1, Ordering::AcqRel) >= self.max_send_wr {
            dec(&self.outstanding);
            return Err(libc::ENOMEM);
        }
        let w = PendingWr {
            signaled: w.signaled || self.sq_sig_all,
            ..w
        };
        lock(&self.submit).writes.push_back(w);
        Ok(())
    }

    /// `mrc_post_recv` of one receive.
    pub fn post_recv(&self, wr_id: u64) -> Result<(), i32> {
        let st = self.state.load(Ordering::Acquire);
        if st == QpState::Reset.to_ibv() {
            return Err(libc::EINVAL);
        }
        if st == QpState::Err.to_ibv() {
            // SAFETY: the CQ outlives the QP.
            unsafe { &*self.recv_cq }.push(self.flush_wc(wr_id, WC_RECV_RDMA_WITH_IMM));
            return Ok(());
        }
        if self.recvs_held.fetch_add(1, Ordering::AcqRel) >= self.max_recv_wr {
            dec(&self.recvs_held);
            return Err(libc::ENOMEM);
        }
        lock(&self.submit).recvs.push_back(wr_id);
        Ok(())
    }
}

pub(crate) struct QpShared {
    pub public: Arc<Public>,
    pub inner: Mutex<QpInner>,
    pub stop: AtomicBool,
    pub passes: AtomicU64,
}

// SAFETY: QpInner is Send and behind a Mutex.
unsafe impl Sync for QpShared {}

/// The last OS error.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The name of `vctx`'s verbs device (`None` for a null context or one without a
/// device).
pub(crate) fn device_name(vctx: *mut ibv_context) -> Option<String> {
    if vctx.is_null() {
        return None;
    }
    // SAFETY: a live context from the application; its device pointer is valid.
    let dev = unsafe { (*vctx).device };
    if dev.is_null() {
        return None;
    }
    // SAFETY: live device; libibverbs returns a NUL-terminated name.
    let p = unsafe { ibv_get_device_name(dev) };
    if p.is_null() {
        return None;
    }
    // SAFETY: as above.
    Some(
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The port's active MTU in bytes (and whether the port is up).
pub(crate) fn port_mtu(vctx: *mut ibv_context, port: u8) -> Result<(u32, bool), i32> {
    // SAFETY: plain data.
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, out-pointer.
    let rc = unsafe { ___ibv_query_port(vctx, port, &mut attr) };
    if rc != 0 {
        return Err(rc);
    }
    let mtu = state::ibv_mtu_bytes(attr.active_mtu).unwrap_or(1024);
    Ok((mtu, attr.state == ibv_port_state::IBV_PORT_ACTIVE))
}

pub(crate) fn query_gid(vctx: *mut ibv_context, port: u8, index: u8) -> Option<Ipv6Addr> {
    let mut gid = ibv_gid { raw: [0; 16] };
    // SAFETY: live context, out-pointer.
    let rc = unsafe { ibv_query_gid(vctx, port, c_int::from(index), &mut gid) };
    // SAFETY: every bit pattern is a valid [u8; 16].
    let raw = unsafe { gid.raw };
    (rc == 0 && raw != [0; 16]).then(|| Ipv6Addr::from(raw))
}

/// The GID index the datapath uses: `MRC_GID_INDEX`, else the first IPv4-mapped entry
/// (RoCEv2 over IPv4), else 0.
fn pick_gid_index(vctx: *mut ibv_context, port: u8) -> u8 {
    if let Some(i) = std::env::var("MRC_GID_INDEX")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return i;
    }
    (0..16u8)
        .find(|&i| query_gid(vctx, port, i).is_some_and(|g| g.to_ipv4_mapped().is_some()))
        .unwrap_or(0)
}

/// The names of the host's verbs devices (`ibv_get_device_list`; empty when it fails).
pub(crate) fn verbs_device_names() -> Vec<String> {
    let mut n: c_int = 0;
    // SAFETY: out-pointer to a local.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `n` entries of a live list.
        let d = unsafe { *list.add(i) };
        // SAFETY: a live device; libibverbs returns a NUL-terminated name.
        let p = unsafe { ibv_get_device_name(d) };
        if !p.is_null() {
            // SAFETY: as above.
            out.push(
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    // SAFETY: ours, freed once.
    unsafe { ibv_free_device_list(list) };
    out
}

/// Port `port`'s active MTU on plane device `name` and the GID index its datapath uses
/// ([`pick_gid_index`]): the device is opened for the queries and closed.
fn plane_device_params(name: &str, port: u8) -> Result<(u32, u8), String> {
    let mut n: c_int = 0;
    // SAFETY: out-pointer to a local.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(format!("ibv_get_device_list: errno {}", errno()));
    }
    let mut vctx: *mut ibv_context = std::ptr::null_mut();
    for i in 0..n.max(0) as usize {
        // SAFETY: `n` entries of a live list.
        let d = unsafe { *list.add(i) };
        // SAFETY: a live device; a NUL-terminated name.
        let p = unsafe { ibv_get_device_name(d) };
        // SAFETY: as above.
        if !p.is_null() && unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes() == name.as_bytes() {
            // SAFETY: a live device of the list.
            vctx = unsafe { ibv_open_device(d) };
            break;
        }
    }
    // SAFETY: ours, freed once (an opened context outlives the list).
    unsafe { ibv_free_device_list(list) };
    if vctx.is_null() {
        return Err(format!(
            "plane device {name}: cannot open it (errno {})",
            errno()
        ));
    }
    let r = port_mtu(vctx, port)
        .map(|(mtu, _)| (mtu, pick_gid_index(vctx, port)))
        .map_err(|e| format!("plane device {name}: ibv_query_port: {e}"));
    // SAFETY: opened above, closed once.
    unsafe { ibv_close_device(vctx) };
    r
}

fn map_status(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => wc_status::SUCCESS,
        WcStatus::RetryExceeded => wc_status::RETRY_EXC_ERR,
        WcStatus::Flushed => wc_status::WR_FLUSH_ERR,
        WcStatus::RemoteAccessError => wc_status::REM_ACCESS_ERR,
        WcStatus::LocalProtectionError => wc_status::LOC_PROT_ERR,
        WcStatus::LocalLengthError => wc_status::LOC_LEN_ERR,
        WcStatus::GenerationMismatch => wc_status::FATAL_ERR,
        #[allow(unreachable_patterns)]
        _ => wc_status::GENERAL_ERR,
    }
}

impl Qp {
    /// Creates a QP on `ctx` for the application's PD.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        ctx: *const Context,
        pd: *mut ibv_pd,
        send_cq: *const Cq,
        recv_cq: *const Cq,
        init: InitCopy,
        qp_context: *mut c_void,
    ) -> Result<Box<Qp>, String> {
        // SAFETY: the caller checked ctx non-null and live.
        let c = unsafe { &*ctx };
        let port = std::env::var("MRC_IB_PORT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1u8);
        let dev = device_name(c.vctx).ok_or("the ibv_context names no device")?;
        let (mut mtu, _) = port_mtu(c.vctx, port).map_err(|e| format!("ibv_query_port: {e}"))?;
        // Plane 0: the application's device; planes 1.. : MRC_PLANE_DEVICES' (the
        // datagram size is the smallest of their MTUs).
        let mut planes = vec![(dev, pick_gid_index(c.vctx, port))];
        for name in &c.planes {
            let (m, g) = plane_device_params(name, port)?;
            mtu = mtu.min(m);
            planes.push((name.clone(), g));
        }
        let mut dps = Vec::with_capacity(planes.len());
        let several = planes.len() > 1;
        for (name, gid_index) in planes {
            let mut vc = VerbsConfig::new(name.clone());
            vc.port = port;
            vc.gid_index = gid_index;
            vc.qps = UD_QPS;
            vc.max_datagram_bytes = mtu;
            vc.sq_depth = 256;
            vc.rq_depth = 256;
            vc.signal_every = 16;
            vc.send_slots = UD_QPS * 256;
            dps.push(VerbsDatapath::open(vc).map_err(|e| {
                if several {
                    format!("verbs datapath on plane device {name}: {e}")
                } else {
                    format!("verbs datapath: {e}")
                }
            })?);
        }
        let dp = QpDatapath::new(dps, true).map_err(|e| format!("plane datapath: {e}"))?;
        let ecfg = EngineConfig {
            slot_bytes: mtu as usize + 96,
            tx_batch: 64,
            ..EngineConfig::default()
        };
        let worker = Worker::with_datapath(dp, ecfg);
        let inner = QpInner::new(
            worker,
            mtu,
            port,
            &init,
            send_cq,
            recv_cq,
            ctx,
            |recv, scratch| {
                let mut loopback = Loopback::create(pd, recv, 1, false)?;
                loopback.port = port;
                loopback.mtu = mtu;
                let mut lkey_lb = Loopback::create(pd, scratch, 2, true)?;
                lkey_lb.port = port;
                lkey_lb.mtu = mtu;
                Ok((loopback, lkey_lb))
            },
        )?;
        let (qpn, public) = (inner.qpn, inner.public.clone());
        let shared = Arc::new(QpShared {
            public,
            inner: Mutex::new(inner),
            stop: AtomicBool::new(false),
            passes: AtomicU64::new(0),
        });
        let mut qp = Box::new(Qp {
            shared: shared.clone(),
            thread: None,
            qpn,
            qp_context,
            send_cq,
            recv_cq,
            ctx,
            init,
        });
        lock(&shared.inner).me = &*qp as *const Qp as usize;
        let t = std::thread::Builder::new()
            .name(format!("mrc-qp-{qpn:06x}"))
            .spawn(move || progress_thread(&shared))
            .map_err(|e| format!("progress thread: {e}"))?;
        qp.thread = Some(t);
        Ok(qp)
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn progress_thread(shared: &QpShared) {
    let mut idle_since: Option<Instant> = None;
    while !shared.stop.load(Ordering::Acquire) {
        let busy = {
            let mut g = lock(&shared.inner);
            // A panic in a pass must not kill the thread silently: the QP fails instead.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.step())) {
                Ok(b) => b,
                Err(_) => {
                    g.fail();
                    false
                }
            }
        };
        shared.passes.fetch_add(1, Ordering::Relaxed);
        if busy {
            idle_since = None;
            continue;
        }
        // Idle: keep polling for SPIN (no sched_yield: with the application's threads
        // spinning too, as benchmarks do, a yield hands them a whole time slice, and a
        // Soft-RoCE VM then moved one chunk per scheduler tick), then nap.
        let now = Instant::now();
        let since = *idle_since.get_or_insert(now);
        let idle = now.duration_since(since);
        if idle > LONG_IDLE {
            std::thread::sleep(LONG_NAP);
        } else if idle > SPIN {
            std::thread::sleep(NAP);
        } else {
            std::hint::spin_loop();
        }
    }
}

impl<N: Nic, L: LoopbackQp> QpInner<N, L> {
    /// The QP's state before INIT on `worker` (a UD datapath whose datagrams carry
    /// `mtu` bytes, the port's MTU), with its loopback QPs made by `loopbacks` from the
    /// receive staging buffer and the lkey check's scratch.
    #[allow(clippy::too_many_arguments)]
    fn new(
        mut worker: Worker<QpDatapath<N>>,
        mtu: u32,
        port: u8,
        init: &InitCopy,
        send_cq: *const Cq,
        recv_cq: *const Cq,
        ctx: *const Context,
        loopbacks: impl FnOnce(&Staging, &Staging) -> Result<(L, L), String>,
    ) -> Result<QpInner<N, L>, String> {
        let qpn = *worker
            .datapath_mut()
            .local_endpoint()
            .qpns
            .first()
            .ok_or("the datapath has no UD QP")?;
        let send_buf = Staging::new(SLOTS * SLOT_BYTES).ok_or("staging memory")?;
        let recv_buf = Staging::new(SLOTS * SLOT_BYTES).ok_or("staging memory")?;
        let lkey_scratch = Staging::new(4096).ok_or("staging memory")?;
        let (loopback, lkey_lb) = loopbacks(&recv_buf, &lkey_scratch)?;
        // SAFETY: plain data.
        let mut vattr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        vattr.port_num = port;
        vattr.cap = init.cap;
        let public = Arc::new(Public {
            state: AtomicU32::new(QpState::Reset.to_ibv()),
            outstanding: AtomicU32::new(0),
            recvs_held: AtomicU32::new(0),
            submit: Mutex::new(Submit::default()),
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            sq_sig_all: init.sq_sig_all != 0,
            send_cq,
            recv_cq,
            qpn,
        });
        Ok(QpInner {
            state: QpState::Reset,
            settings: MrcSettings::default(),
            vattr,
            hint: std::ptr::null(),
            worker,
            qpn,
            engine_qpn: 0,
            mtu_payload: mtu - MRC_HEADER_BYTES,
            port_mtu_payload: mtu - MRC_HEADER_BYTES,
            peer_no_trim_nacks: false,
            peer_gid: None,
            peer_qpn: 0,
            phase: Phase::Idle,
            hello_timeout: HELLO_TIMEOUT,
            loopback,
            lkey_lb,
            _lkey_scratch: lkey_scratch,
            checks_in_flight: 0,
            next_check: 0,
            send_buf,
            recv_buf,
            send_key: None,
            recv_key: None,
            free_send: (0..SLOTS).rev().collect(),
            pending: VecDeque::new(),
            chunks: HashMap::new(),
            next_id: 1,
            public,
            wimm_outstanding: 0,
            packets_outstanding: 0,
            placing: VecDeque::new(),
            replace: Vec::new(),
            lb_broken: false,
            recv_wrs: VecDeque::new(),
            pending_imm: VecDeque::new(),
            counters: QpCounters::default(),
            send_cq,
            recv_cq,
            ctx,
            me: 0,
            ev_generation: 0,
            ev_seen: HashMap::new(),
            ev_checked: Instant::now(),
            wr_seq: 0,
            acked: VecDeque::new(),
            book: VerdictBook::default(),
            maker: VerdictMaker::default(),
        })
    }

    fn send_cq(&self) -> &Cq {
        // SAFETY: the CQ outlives the QP.
        unsafe { &*self.send_cq }
    }

    fn recv_cq(&self) -> &Cq {
        // SAFETY: the CQ outlives the QP.
        unsafe { &*self.recv_cq }
    }

    fn raise(&self, event_type: u32) {
        // SAFETY: the context outlives the QP.
        unsafe { &*self.ctx }.raise(self.me, event_type);
    }

    fn wc(&self, wr_id: u64, status: u32, opcode: u32, byte_len: u32) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len,
            imm: 0,
            qp_num: self.qpn,
            src_qp: self.peer_qpn,
            wc_flags: 0,
        }
    }

    /// RTR: records the peer (GID at the datapath's index must be the one the
    /// application names as source).
    pub fn set_peer(&mut self, gid: Ipv6Addr, qpn: u32, sgid: Option<Ipv6Addr>) -> Result<(), i32> {
        let mine = self.worker.datapath_mut().local_endpoint().gid;
        if let Some(s) = sgid
            && s != mine
        {
            eprintln!(
                "lib_mrc: the source GID {s} (ah_attr.grh.sgid_index) is not the datapath's {mine}: \
                 set MRC_GID_INDEX to the index the application passes"
            );
            return Err(libc::EINVAL);
        }
        self.peer_gid = Some(gid);
        self.peer_qpn = qpn & 0xff_ffff;
        Ok(())
    }

    /// RTS: creates the transport QP with the settings in force and starts the
    /// rendezvous.
    pub fn start(&mut self, path_mtu: Option<u32>) -> Result<(), i32> {
        let Some(gid) = self.peer_gid else {
            return Err(libc::EINVAL);
        };
        if let Some(m) = path_mtu {
            self.mtu_payload = self
                .mtu_payload
                .min(m.saturating_sub(MRC_HEADER_BYTES).max(256));
        }
        let gid_index = self.worker.datapath_mut().config().gid_index;
        self.loopback.set_gid_index(gid_index);
        self.lkey_lb.set_gid_index(gid_index);
        self.loopback
            .connect()
            .and_then(|()| self.lkey_lb.connect())
            .map_err(|e| {
                eprintln!("lib_mrc: {e}");
                libc::EIO
            })?;
        let sw = mrc_fabric::engine::software_conn_config(
            mrc_fabric::engine::SOFTWARE_MIN_RTO_NS,
            mrc_fabric::engine::SOFTWARE_REORDER_WINDOW_NS,
        );
        let window = state::window_packets(limits::MAX_MPR);
        let budget = state::give_up_budget_ns(&self.settings).unwrap_or(u64::MAX);
        let link = QpConfig::default().link;
        let (pevs, nscc) = {
            let mut r = lock(crate::ctl::registry());
            // The node's tables now (the controller may have changed them since INIT).
            r.refresh()?;
            let e = r.qp_evs(self.settings.ev_profile_id);
            let c = r.qp_cc(self.settings.cc_profile_id, &link);
            match (e, c) {
                (Ok(e), Ok(c)) => (e, c),
                _ => return Err(libc::EINVAL),
            }
        };
        if !pevs.srv6.is_empty() {
            // The device builds the IPv6 header of a UD datagram: no segment list.
            eprintln!(
                "lib_mrc: EV profile {} is SRV6: the verbs datapath carries no SRH",
                self.settings.ev_profile_id
            );
            return Err(libc::EOPNOTSUPP);
        }
        // Each EV on the plane its port names (one plane, or profile 0: the transport's
        // own placement, EV i on plane i mod planes).
        let planes = self.worker.datapath_mut().plane_count();
        let ev_planes = crate::ctl::ev_planes(&pevs.ports, planes).map_err(|e| {
            eprintln!("lib_mrc: EV profile {}: {e}", self.settings.ev_profile_id);
            e.errno()
        })?;
        let qcfg = QpConfig {
            cc: if nscc.is_some() {
                CcKind::Nscc
            } else {
                CcKind::None
            },
            link,
            conn: mrc_transport::ConnConfig {
                evs: pevs.evs.clone(),
                ev_planes,
                send: mrc_transport::send::SendConfig {
                    mtu_payload_bytes: self.mtu_payload,
                    max_outstanding_packets: window,
                    unresponsive_budget_ns: Some(budget),
                    ..sw.send
                },
                recv_window_packets: window,
                ..sw
            },
            ..QpConfig::default()
        };
        let eq = self.worker.create_qp(qcfg).map_err(|e| {
            eprintln!("lib_mrc: transport QP: {e}");
            libc::ENOMEM
        })?;
        self.engine_qpn = eq;
        let applied = self.worker.with_conn(eq, |c| {
            for (&ev, &d) in pevs.evs.iter().zip(&pevs.denied) {
                c.set_ev_denied(ev, d);
            }
            match nscc {
                Some(n) => n
                    .build()
                    .map(|x| *c.controller_mut() = AnyController::Nscc(x))
                    .is_ok(),
                None => true,
            }
        });
        if !matches!(applied, Ok(true)) {
            return Err(libc::EINVAL);
        }
        self.ev_generation = pevs.generation;
        // SAFETY: our staging buffers, alive as long as the worker (both owned by self);
        // the transport touches them only inside worker calls, the device reads the
        // receive slots only while the transport does not own them.
        let keys = unsafe {
            let s = self.worker.reg_mr_raw(
                eq,
                self.send_buf.ptr,
                self.send_buf.len,
                Access::LOCAL_WRITE,
            );
            let r = self.worker.reg_mr_raw(
                eq,
                self.recv_buf.ptr,
                self.recv_buf.len,
                Access::LOCAL_WRITE,
            );
            s.and_then(|s| r.map(|r| (s, r)))
        };
        let (sk, rk) = keys.map_err(|e| {
            eprintln!("lib_mrc: staging registration: {e}");
            libc::ENOMEM
        })?;
        self.send_key = Some(sk);
        self.recv_key = Some(rk);
        let peer_ip = gid_to_ip(gid);
        let dp = self.worker.datapath_mut();
        dp.add_peer(
            0,
            EndpointAddr {
                gid,
                lid: 0,
                qkey: DEFAULT_QKEY,
                qpns: vec![self.peer_qpn],
            },
        );
        let conn = dp
            .open_conn(SocketAddr::new(peer_ip, 4791), &PathMap::per_ev(vec![0]))
            .map_err(|e| {
                eprintln!("lib_mrc: rendezvous path to {peer_ip}: {e}");
                libc::EHOSTUNREACH
            })?;
        debug!(
            "QP {:06x}: RTS, rendezvous with {:06x} at {peer_ip}",
            self.qpn, self.peer_qpn
        );
        self.phase = Phase::Hello {
            conn,
            peer_ip,
            last_sent: None,
            started: Instant::now(),
            heard: None,
            sent_after_heard: 0,
        };
        Ok(())
    }

    /// Moves to the error state: everything outstanding completes with
    /// `IBV_WC_WR_FLUSH_ERR`.
    pub fn fail(&mut self) {
        if let Phase::Hello { conn, .. } = self.phase {
            self.raise(event::QP_FATAL);
            // the rendezvous path goes with the rendezvous: `reset` closes it only while
            // the phase is Hello, so a hello that timed out leaked it on every
            // RTS -> timeout -> RESET cycle
            self.worker.datapath_mut().close_conn(conn);
        }
        self.phase = Phase::Failed;
        self.set_state(QpState::Err);
        let mut done: Vec<PendingWr> = self.acked.drain(..).collect();
        let mut inflight: Vec<PendingWr> =
            self.chunks.drain().filter_map(|(_, c)| c.done).collect();
        inflight.sort_by_key(|w| w.seq);
        done.extend(inflight);
        done.extend(self.pending.drain(..));
        for w in done {
            let wc = self.wc(w.wr_id, wc_status::WR_FLUSH_ERR, WC_RDMA_WRITE, 0);
            self.send_cq().push(wc);
        }
        let recvs: Vec<u64> = self.recv_wrs.drain(..).collect();
        for r in recvs {
            let wc = self.wc(r, wc_status::WR_FLUSH_ERR, WC_RECV_RDMA_WITH_IMM, 0);
            self.recv_cq().push(wc);
        }
        self.public.outstanding.store(0, Ordering::Release);
        self.public.recvs_held.store(0, Ordering::Release);
        self.wimm_outstanding = 0;
        self.packets_outstanding = 0;
    }

    /// Moves to RESET (from any state, as `ibv_modify_qp`): the transport QP and its
    /// connection are destroyed, every outstanding send and receive is dropped without a
    /// completion, the loopback QPs are reset; RESET -> INIT -> RTR -> RTS then connects
    /// afresh (a new transport QP and rendezvous: the peer must be reset and brought to
    /// RTS again too, as an RC connection).
    pub fn reset(&mut self) {
        if let Phase::Hello { conn, .. } = self.phase {
            self.worker.datapath_mut().close_conn(conn);
        }
        if self.engine_qpn != 0 {
            self.worker.destroy_qp(self.engine_qpn);
            self.engine_qpn = 0;
        }
        self.phase = Phase::Idle;
        self.loopback.reset();
        self.lkey_lb.reset();
        {
            let mut sub = lock(&self.public.submit);
            sub.writes.clear();
            sub.recvs.clear();
        }
        self.pending.clear();
        self.chunks.clear();
        self.acked.clear();
        self.placing.clear();
        self.replace.clear();
        self.recv_wrs.clear();
        self.pending_imm.clear();
        self.free_send = (0..SLOTS).rev().collect();
        self.send_key = None;
        self.recv_key = None;
        self.checks_in_flight = 0;
        self.lb_broken = false;
        self.wimm_outstanding = 0;
        self.packets_outstanding = 0;
        self.wr_seq = 0;
        self.book = VerdictBook::default();
        self.maker = VerdictMaker::default();
        self.ev_seen.clear();
        self.ev_generation = 0;
        self.peer_gid = None;
        self.peer_qpn = 0;
        self.peer_no_trim_nacks = false;
        self.mtu_payload = self.port_mtu_payload;
        self.public.outstanding.store(0, Ordering::Release);
        self.public.recvs_held.store(0, Ordering::Release);
        self.set_state(QpState::Reset);
    }

    /// What the transport connection runs on, for `mrc_x_qp_transport` / `mrc_x_qp_evs`;
    /// `None` until the rendezvous connected it.
    pub fn transport_view(&mut self) -> Option<TransportView> {
        if !matches!(self.phase, Phase::Connected) {
            return None;
        }
        self.worker
            .with_conn(self.engine_qpn, |c| TransportView {
                cc: match c.controller() {
                    AnyController::Fixed(_) => ext::MRC_X_CC_NONE,
                    AnyController::Nscc(_) => ext::MRC_X_CC_NSCC,
                    AnyController::Dcqcn(_) => ext::MRC_X_CC_DCQCN,
                    AnyController::Swift(_) => ext::MRC_X_CC_SWIFT,
                },
                trim_nacks: c.config().trim_nacks,
                evs: c
                    .paths()
                    .paths()
                    .iter()
                    .map(|p| MrcXEvCount {
                        ev: p.ev,
                        denied: u32::from(p.state == PathState::Denied),
                        data_packets: p.stats.sent,
                        retransmitted: p.stats.retransmitted,
                        probes: p.stats.probes_sent,
                        plane: u32::from(p.plane),
                        plane_state: c
                            .paths()
                            .planes()
                            .get(usize::from(p.plane))
                            .map_or(0, |q| ext::plane_state_code(q.state)),
                    })
                    .collect(),
            })
            .ok()
    }

    /// Sets the state, for the application's threads too.
    pub fn set_state(&mut self, st: QpState) {
        self.state = st;
        self.public.state.store(st.to_ibv(), Ordering::Release);
    }

    /// Takes the work the application posted since the last pass.
    fn drain_submit(&mut self) -> bool {
        let (writes, recvs) = {
            let mut s = lock(&self.public.submit);
            (std::mem::take(&mut s.writes), std::mem::take(&mut s.recvs))
        };
        let busy = !writes.is_empty() || !recvs.is_empty();
        let failed = matches!(self.phase, Phase::Failed);
        for w in writes {
            if failed {
                let wc = self.wc(w.wr_id, wc_status::WR_FLUSH_ERR, WC_RDMA_WRITE, 0);
                self.send_cq().push(wc);
                dec(&self.public.outstanding);
            } else {
                let lkey_ok = (w.len == 0).then_some(true);
                self.pending.push_back(PendingWr { lkey_ok, ..w });
            }
        }
        for r in recvs {
            if failed {
                let wc = self.wc(r, wc_status::WR_FLUSH_ERR, WC_RECV_RDMA_WITH_IMM, 0);
                self.recv_cq().push(wc);
                dec(&self.public.recvs_held);
            } else {
                self.recv_wrs.push_back(r);
            }
        }
        self.deliver_imms();
        busy
    }

    fn deliver_imms(&mut self) {
        while !self.pending_imm.is_empty() && !self.recv_wrs.is_empty() {
            let (Some(mut wc), Some(r)) = (self.pending_imm.pop_front(), self.recv_wrs.pop_front())
            else {
                break;
            };
            wc.wr_id = r;
            dec(&self.public.recvs_held);
            self.recv_cq().push(wc);
        }
    }

    /// One pass. Returns whether anything happened.
    fn step(&mut self) -> bool {
        let took = self.drain_submit();
        took | match self.phase {
            Phase::Idle | Phase::Failed => false,
            Phase::Hello { .. } => self.step_hello(),
            Phase::Connected => self.step_connected(),
        }
    }

    fn hello(&mut self, heard: bool) -> Option<Vec<u8>> {
        let info = self.worker.local_info(self.engine_qpn).ok()?;
        let mut endpoints = self.worker.datapath_mut().endpoints();
        let planes = endpoints.split_off(1);
        Hello {
            heard,
            no_trim_nacks: state::asks_no_trim_nacks(&self.settings),
            endpoint: endpoints.pop()?,
            info,
            planes,
        }
        .encode()
    }

    fn step_hello(&mut self) -> bool {
        let Phase::Hello {
            conn,
            peer_ip,
            last_sent,
            started,
            ref heard,
            sent_after_heard,
        } = self.phase
        else {
            return false;
        };
        let now = Instant::now();
        let have = heard.is_some();
        let mut busy = false;
        if last_sent.is_none_or(|t| now.duration_since(t) >= HELLO_EVERY) || have {
            if let Some(b) = self.hello(have) {
                let mut batch = TxBatch::new(1, b.len());
                batch.push(conn, 0, Ecn::NotEct, &b);
                let _ = self.worker.datapath_mut().tx_burst(&batch);
                self.counters.hellos_sent += 1;
            }
            if let Phase::Hello {
                last_sent,
                sent_after_heard,
                ..
            } = &mut self.phase
            {
                *last_sent = Some(now);
                if have {
                    *sent_after_heard += 1;
                }
            }
            busy = true;
        }
        // Hellos in (anything else from the peer before we connect is dropped: the
        // transport resends it).
        let mut got: Option<Hello> = None;
        let mut foreign = 0u64;
        let peer_gid = self.peer_gid;
        let peer_qpn = self.peer_qpn;
        let _ = self.worker.datapath_mut().rx_burst(64, &mut |d| {
            let from_peer = Some(mrc_fabric::verbs::ip_to_gid(d.from.ip())) == peer_gid;
            match Hello::decode(d.bytes) {
                Ok(h) if from_peer && h.endpoint.qpns.first() == Some(&peer_qpn) => got = Some(h),
                _ => foreign += 1,
            }
        });
        self.counters.foreign_before_connect += foreign;
        if foreign > 0 {
            debug!(
                "QP {:06x}: {foreign} datagrams before connect dropped",
                self.qpn
            );
        }
        if let Some(h) = got {
            debug!(
                "QP {:06x}: hello from {:06x} (heard {})",
                self.qpn, peer_qpn, h.heard
            );
            self.counters.hellos_heard += 1;
            if let Phase::Hello { heard, .. } = &mut self.phase
                && heard.is_none()
            {
                *heard = Some(Box::new(h));
            }
            busy = true;
        }
        if have && sent_after_heard + 1 >= HELLOS_AFTER_HEARD {
            let Phase::Hello { heard: Some(h), .. } =
                std::mem::replace(&mut self.phase, Phase::Idle)
            else {
                return busy;
            };
            self.connect(conn, peer_ip, *h);
            return true;
        }
        if now.duration_since(started) > self.hello_timeout {
            eprintln!(
                "lib_mrc: QP {:06x}: no answer from the peer's QP {peer_qpn:06x} within {:?}",
                self.qpn, self.hello_timeout
            );
            self.fail();
        }
        busy
    }

    fn connect(&mut self, hello_conn: ConnId, peer_ip: std::net::IpAddr, h: Hello) {
        let dp = self.worker.datapath_mut();
        let (ours, theirs) = (dp.plane_count(), 1 + h.planes.len());
        let refused = if ours != theirs {
            Some(format!(
                "the peer's QP runs on {theirs} plane(s) and this one on {ours}: give both \
                 ends as many devices ({})",
                state::PLANE_DEVICES_ENV
            ))
        } else {
            dp.close_conn(hello_conn);
            for (p, e) in std::iter::once(h.endpoint.clone())
                .chain(h.planes.iter().cloned())
                .enumerate()
            {
                dp.add_peer(p, e);
            }
            let eq = self.engine_qpn;
            self.worker
                .connect(eq, &h.info, SocketAddr::new(peer_ip, 4791))
                .err()
                .map(|e| e.to_string())
        };
        let eq = self.engine_qpn;
        if let Some(e) = refused {
            // `fail` closes the rendezvous path (still open on a plane count mismatch).
            eprintln!("lib_mrc: QP {:06x}: connect: {e}", self.qpn);
            self.phase = Phase::Hello {
                conn: hello_conn,
                peer_ip,
                last_sent: None,
                started: Instant::now(),
                heard: None,
                sent_after_heard: 0,
            };
            self.fail();
            return;
        }
        // The peer's MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED: our receiver NACKs no trims.
        let trim_nacks = !h.no_trim_nacks;
        let _ = self.worker.with_conn(eq, |c| c.set_trim_nacks(trim_nacks));
        self.peer_no_trim_nacks = h.no_trim_nacks;
        let rk = self.recv_key.expect("registered at RTS");
        for s in 0..SLOTS {
            let sge = Sge {
                lkey: rk.lkey,
                addr: rk.addr + (s * SLOT_BYTES) as u64,
                len: SLOT_BYTES as u32,
            };
            let _ = self.worker.post_recv(eq, s as u64, sge);
        }
        self.phase = Phase::Connected;
        debug!(
            "QP {:06x}: connected to {:06x} (transport QPN {:06x}, mtu payload {})",
            self.qpn, self.peer_qpn, h.info.qpn, self.mtu_payload
        );
        self.raise(event::COMM_EST);
    }

    /// A QP of an EV profile: applies the controller's denials when the profile changed,
    /// and tells the registry when the transport takes an EV out of rotation
    /// (ASSUMED_BAD) or puts it back (GOOD), for the EV events.
    fn sync_ev_profile(&mut self) {
        let id = self.settings.ev_profile_id;
        let now = Instant::now();
        if id == 0 || now.duration_since(self.ev_checked) < EV_CHECK_EVERY {
            return;
        }
        self.ev_checked = now;
        let eq = self.engine_qpn;
        let mut r = lock(crate::ctl::registry());
        // A store that cannot be read keeps the tables last read (refresh says why).
        let _ = r.refresh();
        if let Ok(q) = r.qp_evs(id)
            && q.generation != self.ev_generation
        {
            self.ev_generation = q.generation;
            let _ = self.worker.with_conn(eq, |c| {
                for (&ev, &d) in q.evs.iter().zip(&q.denied) {
                    c.set_ev_denied(ev, d);
                }
            });
        }
        let states: Vec<(u32, bool)> = self
            .worker
            .with_conn(eq, |c| {
                let p = c.paths();
                (0..p.len())
                    .filter_map(|i| p.get(i))
                    .filter(|x| x.state != PathState::Denied)
                    .map(|x| (x.ev, x.state != PathState::AssumedBad))
                    .collect()
            })
            .unwrap_or_default();
        for (ev, good) in states {
            let before = self.ev_seen.insert(ev, good);
            if before.map_or(!good, |b| b != good) {
                r.note_transport(id, ev, good);
            }
        }
        crate::ctl_ffi::wake_event_cqs(&r);
    }

    fn step_connected(&mut self) -> bool {
        self.sync_ev_profile();
        let mut busy = self.worker.progress();
        // A step may fail the QP (a WRITE refused, the loopback lost): the pass ends
        // there, so no chunk received in the same batch is placed after the QP went to
        // the error state (an RC QP in ERR places nothing).
        let steps: [fn(&mut Self) -> bool; 7] = [
            Self::reap_send,
            Self::reap_recv,
            Self::reap_loopback,
            Self::send_verdict,
            Self::reap_checks,
            Self::post_checks,
            Self::pump,
        ];
        for step in steps {
            busy |= step(self);
            if matches!(self.phase, Phase::Failed) {
                return true;
            }
        }
        if busy {
            // Hand what was just posted to the datapath without waiting for the next pass.
            self.worker.progress();
        }
        busy
    }

    /// Posts the lkey checks of the WRITEs waiting in the QP (at most [`CHECKS_AHEAD`]
    /// answered or not ahead of the transport).
    fn post_checks(&mut self) -> bool {
        let mut busy = false;
        for i in 0..self.pending.len().min(CHECKS_AHEAD) {
            if self.checks_in_flight as usize >= CHECKS_AHEAD {
                break;
            }
            let w = self.pending[i];
            if w.lkey_ok.is_some() || w.check_id != 0 {
                continue;
            }
            self.next_check += 1;
            let id = self.next_check;
            busy = true;
            self.pending[i].check_id = id;
            if self.lkey_lb.post_check(id, w.addr, w.len, w.lkey).is_err() {
                // Refused at posting (a provider may check the lkey there): as refused
                // by the device (the queue cannot be full: CHECKS_AHEAD < its depth).
                self.pending[i].lkey_ok = Some(false);
                continue;
            }
            self.checks_in_flight += 1;
        }
        busy
    }

    /// The device's answers to the lkey checks.
    fn reap_checks(&mut self) -> bool {
        let mut out = Vec::new();
        self.lkey_lb.poll(&mut out);
        for &(id, status) in &out {
            self.checks_in_flight = self.checks_in_flight.saturating_sub(1);
            if let Some(w) = self.pending.iter_mut().find(|w| w.check_id == id) {
                // A refused check leaves the check QP in error and the ones behind it
                // flushed: the refused WRITE fails the QP when its turn comes (below).
                w.lkey_ok = Some(status == wc_status::SUCCESS);
            }
        }
        !out.is_empty()
    }

    /// Application WRITEs into transport SENDs, as the window, the WIMM limit and the
    /// staging slots allow.
    fn pump(&mut self) -> bool {
        let Some(sk) = self.send_key else {
            return false;
        };
        let window = state::window_packets(self.settings.mpr);
        let mut busy = false;
        while let Some(w) = self.pending.front().copied() {
            match w.lkey_ok {
                None => break,
                Some(false) => {
                    // As an RC QP: the WRITE completes IBV_WC_LOC_PROT_ERR once every
                    // earlier one has completed, and the QP goes to the error state.
                    if self.acked.is_empty() && !self.chunks.values().any(|c| c.done.is_some()) {
                        debug!(
                            "QP {:06x}: lkey {:#x} does not cover {:#x}+{}",
                            self.qpn, w.lkey, w.addr, w.len
                        );
                        self.pending.pop_front();
                        let wc = self.wc(w.wr_id, wc_status::LOC_PROT_ERR, WC_RDMA_WRITE, 0);
                        self.send_cq().push(wc);
                        self.fail();
                        return true;
                    }
                    break;
                }
                Some(true) => {}
            }
            if w.sent == 0 && w.remote_addr.checked_add(u64::from(w.len)).is_none() {
                // A remote range that wraps past 2^64 exists in no region: as an RC QP's
                // NAK, IBV_WC_REM_ACCESS_ERR once every earlier WRITE has completed, and
                // the QP goes to the error state, nothing of it sent (before, its chunks
                // went out with wrapped addresses and the peer's device judged each: a
                // chunk past the wrap was placed in an MR at iova 0; tests.rs).
                if self.acked.is_empty() && !self.chunks.values().any(|c| c.done.is_some()) {
                    self.pending.pop_front();
                    let wc = self.wc(w.wr_id, wc_status::REM_ACCESS_ERR, WC_RDMA_WRITE, 0);
                    self.send_cq().push(wc);
                    self.counters.remote_access_errors += 1;
                    self.fail();
                    return true;
                }
                break;
            }
            if w.imm.is_some()
                && w.sent == 0
                && self.wimm_outstanding >= u32::from(self.settings.max_wimm)
            {
                break;
            }
            let Some(&slot) = self.free_send.last() else {
                break;
            };
            let left = w.len - w.sent;
            let clen = left.min(CHUNK_BYTES as u32);
            let packets = (WRITE_HEADER_BYTES as u32 + clen)
                .div_ceil(self.mtu_payload)
                .max(1);
            if self.packets_outstanding > 0 && self.packets_outstanding + packets > window {
                break;
            }
            let last = w.sent + clen == w.len;
            let hdr = WriteHeader {
                flags: if w.imm.is_some() { wire::FLAG_IMM } else { 0 }
                    | if last { wire::FLAG_LAST } else { 0 },
                remote_addr: w.remote_addr.wrapping_add(u64::from(w.sent)),
                rkey: w.rkey,
                imm: w.imm.unwrap_or(0),
                msg_len: w.len,
            };
            let dst = self.send_buf.slot(slot);
            // SAFETY: the slot holds SLOT_BYTES; the source is the application's send
            // buffer (it must stay valid until the WR completes, as in verbs), `clen`
            // bytes from offset `sent` within the `len` it posted.
            unsafe {
                std::ptr::copy_nonoverlapping(hdr.encode().as_ptr(), dst, WRITE_HEADER_BYTES);
                if clen > 0 {
                    std::ptr::copy_nonoverlapping(
                        (w.addr + u64::from(w.sent)) as *const u8,
                        dst.add(WRITE_HEADER_BYTES),
                        clen as usize,
                    );
                }
            }
            let id = self.next_id;
            // The region's addresses are the transport's (MrKey::addr names its first byte).
            let sge = Sge {
                lkey: sk.lkey,
                addr: sk.addr + (slot * SLOT_BYTES) as u64,
                len: WRITE_HEADER_BYTES as u32 + clen,
            };
            if let Err(e) = self.worker.post_send(self.engine_qpn, id, sge, None) {
                eprintln!(
                    "lib_mrc: QP {:06x}: the transport refused a chunk: {e:?}",
                    self.qpn
                );
                let wc = self.wc(w.wr_id, wc_status::LOC_PROT_ERR, WC_RDMA_WRITE, 0);
                self.pending.pop_front();
                self.send_cq().push(wc);
                self.fail();
                return true;
            }
            self.next_id += 1;
            self.free_send.pop();
            self.packets_outstanding += packets;
            self.counters.chunks_sent += 1;
            if w.sent == 0 && w.imm.is_some() {
                self.wimm_outstanding += 1;
            }
            let seq = self.wr_seq;
            let front = self.pending.front_mut().expect("peeked");
            if front.sent == 0 {
                front.seq = seq;
                self.wr_seq += 1;
            }
            front.sent += clen;
            let done = last.then_some(*front);
            if last {
                self.pending.pop_front();
            }
            self.chunks.insert(
                id,
                Chunk {
                    slot,
                    packets,
                    done,
                },
            );
            busy = true;
        }
        busy
    }

    fn reap_send(&mut self) -> bool {
        let mut busy = false;
        while let Some(c) = self.worker.poll_send_cq(self.engine_qpn) {
            busy = true;
            self.on_send_completion(c);
        }
        busy
    }

    fn on_send_completion(&mut self, c: Completion) {
        let Some(ch) = self.chunks.remove(&c.wr_id) else {
            return;
        };
        self.free_send.push(ch.slot);
        self.packets_outstanding = self.packets_outstanding.saturating_sub(ch.packets);
        if c.status != WcStatus::Success {
            let w = ch.done.or_else(|| {
                // A middle chunk failed: its WR is the first one still unfinished.
                let id = self
                    .chunks
                    .iter()
                    .filter(|(_, x)| x.done.is_some())
                    .map(|(k, _)| *k)
                    .min();
                id.and_then(|k| self.chunks.remove(&k))
                    .and_then(|x| x.done)
                    .or_else(|| self.pending.pop_front())
            });
            if let Some(w) = w {
                let wc = self.wc(w.wr_id, map_status(c.status), WC_RDMA_WRITE, 0);
                self.send_cq().push(wc);
            }
            self.fail();
            return;
        }
        if let Some(w) = ch.done {
            self.acked.push_back(w);
            self.complete_decided();
        }
    }

    /// Completes, in order, the acknowledged WRITEs the responder has decided: success,
    /// or `IBV_WC_REM_ACCESS_ERR` (reported even when not signalled, as verbs reports
    /// errors) for one its device refused.
    fn complete_decided(&mut self) {
        while let Some(&w) = self.acked.front() {
            let Some(placed) = self.book.take(w.seq) else {
                break;
            };
            self.acked.pop_front();
            dec(&self.public.outstanding);
            if w.imm.is_some() {
                self.wimm_outstanding = self.wimm_outstanding.saturating_sub(1);
            }
            if !placed {
                // As an RC requestor on a NAK (remote access error): the WRITE completes in
                // error and the QP goes to ERR; every later WR completes flushed.
                let wc = self.wc(w.wr_id, wc_status::REM_ACCESS_ERR, WC_RDMA_WRITE, 0);
                self.send_cq().push(wc);
                self.counters.remote_access_errors += 1;
                self.fail();
                return;
            } else if w.signaled {
                let wc = self.wc(w.wr_id, wc_status::SUCCESS, WC_RDMA_WRITE, w.len);
                self.send_cq().push(wc);
            }
        }
    }

    /// Sends the verdict on the peer's WRITEs decided since the last one, when a staging
    /// slot is free (else on a later pass).
    fn send_verdict(&mut self) -> bool {
        let (Some(sk), Some(&slot)) = (self.send_key, self.free_send.last()) else {
            return false;
        };
        let Some(v) = self.maker.take() else {
            return false;
        };
        let b = v.encode();
        // SAFETY: the slot holds SLOT_BYTES >= the header and VERDICT_MAX_REFUSED entries.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.send_buf.slot(slot), b.len()) };
        let sge = Sge {
            lkey: sk.lkey,
            addr: sk.addr + (slot * SLOT_BYTES) as u64,
            len: b.len() as u32,
        };
        let id = self.next_id;
        if self
            .worker
            .post_send(self.engine_qpn, id, sge, None)
            .is_err()
        {
            // Not taken: decided again by the next verdict (cumulative).
            self.maker.untake(v);
            return false;
        }
        let packets = (b.len() as u32).div_ceil(self.mtu_payload).max(1);
        self.next_id += 1;
        self.free_send.pop();
        self.packets_outstanding += packets;
        self.counters.verdicts_sent += 1;
        self.chunks.insert(
            id,
            Chunk {
                slot,
                packets,
                done: None,
            },
        );
        true
    }

    fn reap_recv(&mut self) -> bool {
        let mut busy = false;
        while !matches!(self.phase, Phase::Failed)
            && let Some(c) = self.worker.poll_recv_cq(self.engine_qpn)
        {
            busy = true;
            let slot = c.wr_id as usize;
            if slot >= SLOTS {
                continue;
            }
            if c.status != WcStatus::Success || c.opcode != WcOpcode::Recv {
                if c.status != WcStatus::Flushed {
                    self.repost(slot);
                }
                continue;
            }
            let len = (c.byte_len as usize).min(SLOT_BYTES);
            // SAFETY: the transport wrote `len` bytes into this slot and gave it back.
            let bytes = unsafe { std::slice::from_raw_parts(self.recv_buf.slot(slot), len) };
            match WriteHeader::decode(bytes) {
                Ok((hdr, plen)) if hdr.flags & wire::FLAG_VERDICT != 0 => {
                    match Verdict::decode(
                        &hdr,
                        &bytes[WRITE_HEADER_BYTES..WRITE_HEADER_BYTES + plen],
                    ) {
                        Ok(v) => {
                            let bad = self.book.bad;
                            self.book.record(&v, self.wr_seq);
                            self.counters.verdicts_bad += self.book.bad - bad;
                            self.complete_decided();
                        }
                        Err(_) => self.counters.verdicts_bad += 1,
                    }
                    self.repost(slot);
                }
                Ok((hdr, plen)) => {
                    let p = Placing {
                        slot,
                        hdr,
                        len: plen as u32,
                    };
                    self.place(p);
                }
                Err(_) => {
                    self.counters.bad_chunks += 1;
                    self.repost(slot);
                }
            }
        }
        busy
    }

    fn place(&mut self, p: Placing) {
        if matches!(self.phase, Phase::Failed) {
            return; // a QP in the error state places nothing
        }
        if self.lb_broken || !self.replace.is_empty() {
            self.replace.push(p);
            return;
        }
        // SAFETY: the slot is ours until reposted.
        let src = unsafe { self.recv_buf.slot(p.slot).add(WRITE_HEADER_BYTES) };
        match self
            .loopback
            .post(p.slot as u64, src, p.len, p.hdr.remote_addr, p.hdr.rkey)
        {
            Ok(()) => self.placing.push_back(p),
            Err(_) => self.replace.push(p),
        }
    }

    fn repost(&mut self, slot: usize) {
        let Some(rk) = self.recv_key else { return };
        let sge = Sge {
            lkey: rk.lkey,
            addr: rk.addr + (slot * SLOT_BYTES) as u64,
            len: SLOT_BYTES as u32,
        };
        let _ = self.worker.post_recv(self.engine_qpn, slot as u64, sge);
    }

    fn reap_loopback(&mut self) -> bool {
        let mut out = Vec::new();
        self.loopback.poll(&mut out);
        let mut busy = !out.is_empty();
        for (_wr_id, status) in out {
            let Some(p) = self.placing.pop_front() else {
                continue;
            };
            let last = p.hdr.flags & wire::FLAG_LAST != 0;
            if status == wc_status::SUCCESS {
                self.maker.on_chunk(last, true);
                self.counters.chunks_placed += 1;
                if p.hdr.flags & wire::FLAG_LAST != 0 && p.hdr.flags & wire::FLAG_IMM != 0 {
                    let mut wc =
                        self.wc(0, wc_status::SUCCESS, WC_RECV_RDMA_WITH_IMM, p.hdr.msg_len);
                    wc.imm = p.hdr.imm;
                    wc.wc_flags = WC_WITH_IMM;
                    self.pending_imm.push_back(wc);
                    self.deliver_imms();
                }
                self.repost(p.slot);
            } else if self.lb_broken && status == wc_status::WR_FLUSH_ERR {
                // Behind the refused one: placed again after the reset, in order.
                self.replace.push(p);
            } else {
                debug!(
                    "QP {:06x}: placement refused (status {status}) at {:#x} rkey {:#x}",
                    self.qpn, p.hdr.remote_addr, p.hdr.rkey
                );
                // The device refused the rkey, the bounds or the access: the chunk is
                // dropped, the QP's owner told.
                self.counters.placement_refused += 1;
                self.maker.on_chunk(last, false);
                self.lb_broken = true;
                self.raise(event::QP_ACCESS_ERR);
                self.repost(p.slot);
            }
        }
        if self.lb_broken && self.placing.is_empty() {
            // Every WR behind the refused one has flushed: reset the loopback QP.
            if let Err(e) = self.loopback.connect() {
                eprintln!("lib_mrc: QP {:06x}: loopback reset: {e}", self.qpn);
                self.fail();
                return true;
            }
            self.lb_broken = false;
        }
        if !self.lb_broken && !self.replace.is_empty() {
            busy = true;
            let todo: Vec<Placing> = std::mem::take(&mut self.replace);
            for p in todo {
                self.place(p);
            }
        }
        busy
    }
}

#[cfg(test)]
mod tests;
