//! The C extension of lib_mrc.so, `mrcx.h` (prefix `mrc_x_` / `MRC_X_`): what OCP MRC
//! 1.0's `mrc.h` lacks, on mrc's UDP datapath without a verbs device.
//!
//! - **A context over UDP sockets** on an IP address ([`mrc_x_open`]): one caller-progress
//!   [`Worker`] on the [`DirectDatapath`] (plain non-blocking `sendmsg` / `recvmmsg`, no
//!   io_uring, no libibverbs), its EV sockets shared by all of its QPs.
//! - **Connection handles** ([`mrc_x_listen`], [`mrc_x_connect`], [`mrc_x_connect_poll`],
//!   [`mrc_x_accept`]): the embedding API's 60-byte opaque handles
//!   ([`mrc_fabric::engine::ConnHandle`]) that the caller's own out-of-band channel
//!   carries; nothing blocks.
//! - **Application memory** ([`mrc_x_reg_mr`]): a pointer and a length under the verbs
//!   contract, as [`Worker::reg_mr_raw`], without `ibv_reg_mr`.
//! - **Progress on the caller's thread** ([`mrc_x_progress`], [`mrc_x_wait`]): nothing
//!   happens between calls; posts go straight into the transport and completions into
//!   the QP's queues that [`mrc_x_poll_cq`] drains.
//!
//! Why a parallel set of calls rather than `mrc_create_cq`/`mrc_create_qp`/
//! `mrc_modify_qp`/`mrc_post_send` on a UDP context: `mrc.h`'s calls take libibverbs
//! types (`struct ibv_context *`, `struct ibv_pd *` in `mrc_qp_init_attr`, `ibv_send_wr`,
//! `ibv_wc`, `ibv_qp_attr` with its `ibv_ah_attr`), so a program using them needs
//! `<infiniband/verbs.h>`, and the library exports them only when built with the `verbs`
//! feature (linking libibverbs); the extension has to work on a host with neither. And
//! `mrc.h`'s connection set-up is `mrc_modify_qp` to RTR with the peer's GID and QPN
//! (followed here by an in-band rendezvous), while a handle creates the QP when the
//! connection completes ([`Worker::connect_start`], [`Worker::poll_accept`]): there is
//! no QP to create or modify before that. The calls below keep verbs' shapes (linked
//! work requests with `bad_wr`, `ibv_sge`'s layout, `ibv_wc`'s field names and status
//! values) so that code moves between the two easily.
//!
//! Errors: every call that can fail returns 0 or a positive errno value (and sets
//! `errno` to it), except [`mrc_x_poll_cq`], [`mrc_x_progress`] and [`mrc_x_wait`], which
//! return a count (or 0/1) and `-1` with `errno`. [`mrc_x_last_error`] gives the message
//! of the calling thread's last failure. No panic crosses the boundary: every entry runs
//! under `catch_unwind` and answers a panic with `EIO`; a panic while the context was in
//! use poisons it, and every later call on it answers `EIO` (only
//! [`mrc_x_close_context`] still frees it).
//!
//! # Safety
//! The C contract: every non-null pointer names a live object of its type (a context this
//! library returned, a caller's struct or buffer of the documented size).
#![allow(clippy::missing_safety_doc)]

use mrc_fabric::engine::bootstrap::BootstrapError;
use mrc_fabric::engine::setup::{ConnHandle, HANDLE_BYTES};
use mrc_fabric::engine::{ConnectId, EngineConfig, EngineError, ListenerId, QpConfig, Worker};
use mrc_fabric::udp::{DirectDatapath, PortAllocator, UdpConfig};
use mrc_transport::completion::{Completion, WcOpcode, WcStatus};
use mrc_transport::path::{PlaneDownCause, PlaneState};
use mrc_transport::{Access, DeregisterError, PostError, Sge};
use std::cell::RefCell;
use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Bytes of a connection handle ([`mrc_x_listen`] writes them, [`mrc_x_connect`] reads
/// them): the listener's TCP address and a 32-byte secret. At most NCCL's 128.
pub const MRC_X_HANDLE_BYTES: usize = 60;
const _: () = assert!(MRC_X_HANDLE_BYTES == HANDLE_BYTES);

/// Access right: the region may be written locally (receives into it).
pub const MRC_X_ACCESS_LOCAL_WRITE: u32 = 1;
/// Access right: peers may WRITE into the region.
pub const MRC_X_ACCESS_REMOTE_WRITE: u32 = 2;
/// Access right: peers may READ the region (accepted; mrc posts no READs).
pub const MRC_X_ACCESS_REMOTE_READ: u32 = 4;

/// Work request opcode: RDMA WRITE (`IBV_WR_RDMA_WRITE`).
pub const MRC_X_WR_RDMA_WRITE: u32 = 0;
/// Work request opcode: RDMA WRITE with immediate (`IBV_WR_RDMA_WRITE_WITH_IMM`).
pub const MRC_X_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
/// Work request opcode: SEND (`IBV_WR_SEND`).
pub const MRC_X_WR_SEND: u32 = 2;
/// Work request opcode: SEND with immediate (`IBV_WR_SEND_WITH_IMM`).
pub const MRC_X_WR_SEND_WITH_IMM: u32 = 3;

/// Completion opcode: a SEND was acknowledged (`IBV_WC_SEND`).
pub const MRC_X_WC_SEND: u32 = 0;
/// Completion opcode: an RDMA WRITE was acknowledged (`IBV_WC_RDMA_WRITE`).
pub const MRC_X_WC_RDMA_WRITE: u32 = 1;
/// Completion opcode: an RDMA WRITE with immediate was acknowledged (verbs reports it as
/// `IBV_WC_RDMA_WRITE`; mrc tells them apart).
pub const MRC_X_WC_RDMA_WRITE_WITH_IMM: u32 = 2;
/// Completion opcode: a SEND arrived in a posted receive (`IBV_WC_RECV`).
pub const MRC_X_WC_RECV: u32 = 128;
/// Completion opcode: a WRITE with immediate arrived and consumed a posted receive
/// (`IBV_WC_RECV_RDMA_WITH_IMM`).
pub const MRC_X_WC_RECV_RDMA_WITH_IMM: u32 = 129;

/// Completion flag: `imm_data` is valid (`IBV_WC_WITH_IMM`).
pub const MRC_X_WC_WITH_IMM: u32 = 2;

/// Completion status: done (`IBV_WC_SUCCESS`).
pub const MRC_X_WC_SUCCESS: u32 = 0;
/// Completion status: a received SEND did not fit the receive (`IBV_WC_LOC_LEN_ERR`).
pub const MRC_X_WC_LOC_LEN_ERR: u32 = 1;
/// Completion status: the SGE is outside the QP's regions (`IBV_WC_LOC_PROT_ERR`).
pub const MRC_X_WC_LOC_PROT_ERR: u32 = 4;
/// Completion status: not executed, the QP failed or closed first (`IBV_WC_WR_FLUSH_ERR`).
pub const MRC_X_WC_WR_FLUSH_ERR: u32 = 5;
/// Completion status: the peer refused the WRITE (rkey, bounds, rights;
/// `IBV_WC_REM_ACCESS_ERR`).
pub const MRC_X_WC_REM_ACCESS_ERR: u32 = 10;
/// Completion status: the transport gave up (`IBV_WC_RETRY_EXC_ERR`).
pub const MRC_X_WC_RETRY_EXC_ERR: u32 = 12;
/// Completion status: the peer restarted, another generation answered
/// (`IBV_WC_GENERAL_ERR`).
pub const MRC_X_WC_GENERAL_ERR: u32 = 21;

/// Congestion control of a QP's transport ([`MrcXTransportInfo::cc`]): none (a fixed
/// window).
pub const MRC_X_CC_NONE: u32 = 0;
/// Congestion control: NSCC (an `mrc_ctl.h` CC profile of algorithm `uet-1.0-nscc`).
pub const MRC_X_CC_NSCC: u32 = 1;
/// Congestion control: DCQCN.
pub const MRC_X_CC_DCQCN: u32 = 2;
/// Congestion control: Swift.
pub const MRC_X_CC_SWIFT: u32 = 3;

/// `mrc_x_ev_count.plane_state`: the plane is up.
pub const MRC_X_PLANE_UP: u32 = 0;
/// `mrc_x_ev_count.plane_state`: down by losses on many of its EVs with no delivery in
/// between (`PlaneDownCause::Loss`).
pub const MRC_X_PLANE_DOWN_LOSS: u32 = 1;
/// `mrc_x_ev_count.plane_state`: down because the peer's Port Status Update reports its
/// port on the plane down (`PlaneDownCause::PeerReport`).
pub const MRC_X_PLANE_DOWN_PEER: u32 = 2;
/// `mrc_x_ev_count.plane_state`: down because this side's port on the plane is gone
/// (`PlaneDownCause::Local`).
pub const MRC_X_PLANE_DOWN_LOCAL: u32 = 3;

/// The `plane_state` code of a transport plane state (`MRC_X_PLANE_*`).
pub fn plane_state_code(state: PlaneState) -> u32 {
    match state {
        PlaneState::Up => MRC_X_PLANE_UP,
        PlaneState::Down(PlaneDownCause::Loss) => MRC_X_PLANE_DOWN_LOSS,
        PlaneState::Down(PlaneDownCause::PeerReport) => MRC_X_PLANE_DOWN_PEER,
        PlaneState::Down(PlaneDownCause::Local) => MRC_X_PLANE_DOWN_LOCAL,
    }
}

/// Longest message [`mrc_x_last_error`] keeps, bytes.
const LAST_ERROR_MAX_BYTES: usize = 512;

/// An mrc context on UDP sockets: one caller-progress worker and its QPs (opaque).
pub struct MrcXContext {
    worker: Mutex<Worker<DirectDatapath>>,
}

// Any thread may call into a context (one at a time, under its lock): the worker must be
// free to move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Worker<DirectDatapath>>();
};

/// What [`mrc_x_open`] opens.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcXContextAttr {
    /// The local IP address to bind, IPv4 or IPv6 text (`"127.0.0.1"`); required. A host
    /// with one NIC port per plane gives one address per plane, comma-separated, plane 0
    /// first (`"10.0.0.1,10.1.0.1"`, at most 8, one family): every QP then sprays its EVs
    /// over all of them, and its peer needs as many (docs/PLANES.md).
    pub ip: *const c_char,
    /// UDP port of the receive socket (what peers send to); 0: the kernel picks.
    pub udp_port: u16,
    /// First UDP source port of the EV sockets; 0 (with `ev_port_last` 0): the
    /// process-wide default range 20000..=29999.
    pub ev_port_first: u16,
    /// Last UDP source port of the EV sockets (inclusive).
    pub ev_port_last: u16,
    /// Must be 0.
    pub reserved: u16,
    /// Deadline of one connection set-up, ms; 0: 10 s.
    pub setup_timeout_ms: u32,
}

/// A registered region ([`mrc_x_reg_mr`]). `addr` is the transport's virtual address of
/// the region's first byte (not the application's pointer): SGEs and a peer's
/// `remote_addr` name bytes of the region as `addr + offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcXMr {
    /// Transport virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Names the region in local SGEs.
    pub lkey: u32,
    /// Names the region in a peer's WRITE.
    pub rkey: u32,
}

/// A local buffer (the layout of `struct ibv_sge`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcXSge {
    /// Transport virtual address inside the region (`mr.addr + offset`).
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The region's lkey.
    pub lkey: u32,
}

/// A send work request ([`mrc_x_post_send`]): one SGE, linked through `next` as
/// `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcXSendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The next work request, or NULL.
    pub next: *const MrcXSendWr,
    /// The payload.
    pub sg: MrcXSge,
    /// `MRC_X_WR_*`.
    pub opcode: u32,
    /// Immediate data (WITH_IMM opcodes), host order, delivered as given.
    pub imm_data: u32,
    /// Target of a WRITE: the peer's `mr.addr + offset`.
    pub remote_addr: u64,
    /// The peer region's rkey (WRITEs).
    pub rkey: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// A receive work request ([`mrc_x_post_recv`]), as `struct ibv_recv_wr` with one SGE.
/// A WRITE with immediate consumes one and writes nothing into it (its SGE may be
/// zero-length); a SEND lands in it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcXRecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The next work request, or NULL.
    pub next: *const MrcXRecvWr,
    /// Where a SEND lands.
    pub sg: MrcXSge,
}

/// A work completion ([`mrc_x_poll_cq`]), with `struct ibv_wc`'s field names and values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcXWc {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// `MRC_X_WC_SUCCESS` or an error status (`MRC_X_WC_*_ERR`).
    pub status: u32,
    /// `MRC_X_WC_SEND`, `..._RDMA_WRITE`, `..._RDMA_WRITE_WITH_IMM`, `..._RECV`,
    /// `..._RECV_RDMA_WITH_IMM`.
    pub opcode: u32,
    /// Message length in bytes.
    pub byte_len: u32,
    /// Immediate data as the sender gave it (host order), when `wc_flags` has
    /// `MRC_X_WC_WITH_IMM`.
    pub imm_data: u32,
    /// `MRC_X_WC_WITH_IMM` or 0.
    pub wc_flags: u32,
    /// The QP the completion belongs to.
    pub qp_num: u32,
}

/// What the transport connection of an `mrc.h` QP runs on ([`mrc_x_qp_transport`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcXTransportInfo {
    /// `MRC_X_CC_NONE`, `MRC_X_CC_NSCC`, `MRC_X_CC_DCQCN` or `MRC_X_CC_SWIFT`.
    pub cc: u32,
    /// 1 when this side's receiver NACKs trimmed packets, 0 when the peer's QP set
    /// `MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED` (it relies on none).
    pub trim_nacks: u32,
    /// EVs the connection sprays over ([`mrc_x_qp_evs`] lists them).
    pub ev_count: u32,
    /// 0.
    pub reserved: u32,
}

/// One EV of an `mrc.h` QP's transport connection and what was sent on it
/// ([`mrc_x_qp_evs`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcXEvCount {
    /// The transport's EV: for an `mrc_ctl.h` EV profile of format UDP or STEV, the EV's
    /// value (the verbs datapath sends it as the flow label, from which the device
    /// derives the UDP source port); for the provider's default profile 0..15.
    pub ev: u32,
    /// 1 while the EV is out of rotation because the controller DENIED it, else 0.
    pub denied: u32,
    /// Data packets sent on the EV (first transmissions and retransmissions).
    pub data_packets: u64,
    /// Retransmissions among `data_packets`.
    pub retransmitted: u64,
    /// EV probes sent on the EV.
    pub probes: u64,
    /// The EV's plane, 0-based: its `mrc_ctl.h` port is `plane + 1` (a QP over one
    /// device has every EV on plane 0; over `MRC_PLANE_DEVICES`, device k is plane k).
    pub plane: u32,
    /// The state of the EV's plane in the transport: [`MRC_X_PLANE_UP`] (0),
    /// [`MRC_X_PLANE_DOWN_LOSS`] (1: losses on its EVs), [`MRC_X_PLANE_DOWN_PEER`] (2: the
    /// peer's Port Status Update reports its port down) or [`MRC_X_PLANE_DOWN_LOCAL`] (3:
    /// this side's port, the device's GID address, is gone). A down plane's EVs are out
    /// of rotation and probed with the plane (docs/PLANES.md).
    pub plane_state: u32,
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Records `msg` as this thread's last error and returns errno `e` (set too).
fn fail(e: i32, msg: impl std::fmt::Display) -> c_int {
    LAST_ERROR.with(|l| {
        let mut s = msg.to_string();
        if s.len() > LAST_ERROR_MAX_BYTES {
            let mut cut = LAST_ERROR_MAX_BYTES;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        *l.borrow_mut() = s;
    });
    set_errno(e);
    e
}

/// `-1` with errno `e` and the message recorded.
fn minus(e: i32, msg: impl std::fmt::Display) -> c_int {
    fail(e, msg);
    -1
}

/// Runs `f`; a panic is recorded and answered with `on_panic` (errno `EIO`).
fn guard(on_panic: c_int, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        fail(libc::EIO, "internal error (a panic was caught)");
        on_panic
    })
}

/// The errno value of an engine error.
fn engine_errno(e: &EngineError) -> i32 {
    let datapath = |d: &mrc_fabric::datapath::DatapathError| match d {
        mrc_fabric::datapath::DatapathError::Io { source, .. } => {
            source.raw_os_error().unwrap_or(libc::EIO)
        }
        mrc_fabric::datapath::DatapathError::Port(_) => libc::EADDRINUSE,
        _ => libc::EINVAL,
    };
    match e {
        EngineError::Datapath(d) | EngineError::EngineSetup { source: d, .. } => datapath(d),
        EngineError::Bootstrap(b) => match b {
            BootstrapError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            BootstrapError::TimedOut { .. } => libc::ETIMEDOUT,
            BootstrapError::AuthMismatch(_) => libc::EACCES,
            BootstrapError::NoAddress(_) => libc::EADDRNOTAVAIL,
            _ => libc::EPROTO,
        },
        EngineError::Refused(_) => libc::EINVAL,
        EngineError::Stopped => libc::EIO,
        EngineError::Incompatible(_) => libc::EPROTO,
        EngineError::Deregister(DeregisterError::InUse { .. }) => libc::EBUSY,
        EngineError::Deregister(_) => libc::ENOENT,
    }
}

/// The context's worker, or `EINVAL` (null) / `EIO` (poisoned by a panic).
unsafe fn lock<'a>(ctx: *mut MrcXContext) -> Result<MutexGuard<'a, Worker<DirectDatapath>>, c_int> {
    // SAFETY: a context this library returned (the C contract), or null.
    let Some(c) = (unsafe { ctx.as_ref() }) else {
        return Err(fail(libc::EINVAL, "null context"));
    };
    c.worker
        .lock()
        .map_err(|_| fail(libc::EIO, "context poisoned by an earlier internal error"))
}

/// `ENOENT` unless QP `qpn` exists.
fn have_qp(w: &Worker<DirectDatapath>, qpn: u32) -> Result<(), c_int> {
    match w.config(qpn) {
        Some(_) => Ok(()),
        None => Err(fail(libc::ENOENT, format_args!("no QP {qpn}"))),
    }
}

fn parse_attr(a: &MrcXContextAttr) -> Result<(UdpConfig, Duration), c_int> {
    if a.ip.is_null() {
        return Err(fail(libc::EINVAL, "attr.ip is NULL"));
    }
    if a.reserved != 0 {
        return Err(fail(libc::EINVAL, "attr.reserved is not 0"));
    }
    // SAFETY: a NUL-terminated string (the C contract).
    let s = unsafe { CStr::from_ptr(a.ip) };
    let ips: Vec<IpAddr> = s
        .to_str()
        .ok()
        .and_then(|t| t.split(',').map(|x| x.trim().parse().ok()).collect())
        .ok_or_else(|| fail(libc::EINVAL, format_args!("not an IP address: {s:?}")))?;
    let mut udp = UdpConfig::bind(SocketAddr::new(ips[0], a.udp_port));
    if ips.len() > 1 {
        udp.plane_ips = ips;
        // the datapath's own check (families, repeats, at most 8), as EINVAL here
        udp.rx_bind()
            .map_err(|e| fail(libc::EINVAL, format_args!("attr.ip {s:?}: {e}")))?;
    }
    if (a.ev_port_first, a.ev_port_last) != (0, 0) {
        udp.ports = PortAllocator::new(a.ev_port_first..=a.ev_port_last)
            .map_err(|e| fail(libc::EINVAL, e))?;
    }
    // One message in flight per QP is the common case of caller progress; a few slots
    // keep a burst from being dropped by the kernel between calls.
    udp.rx_slots = 8;
    let t = match a.setup_timeout_ms {
        0 => Duration::from_secs(10),
        ms => Duration::from_millis(u64::from(ms)),
    };
    Ok((udp, t))
}

/// Opens a context on UDP sockets bound to `attr->ip` and stores it in `*ctx`.
/// 0, or `EINVAL` (null pointers, a bad address or port range, `reserved` not 0),
/// `EADDRINUSE` (no EV source port free), the errno of a failed `socket`/`bind`
/// (`EADDRNOTAVAIL` for an address not of this host).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_open(
    attr: *const MrcXContextAttr,
    ctx: *mut *mut MrcXContext,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: caller's pointers (the C contract), or null.
        let (Some(a), false) = (unsafe { attr.as_ref() }, ctx.is_null()) else {
            return fail(libc::EINVAL, "null attr or ctx");
        };
        let (udp, timeout) = match parse_attr(a) {
            Ok(x) => x,
            Err(e) => return e,
        };
        // Bursts of 64: the direct datapath makes one GSO send of consecutive datagrams
        // of one socket only, and a sprayed burst alternates sockets, so the larger
        // default (whole GSO sends per socket on the io_uring datapath, which groups by
        // socket) would only make more single sends before the caller polls again.
        let ecfg = EngineConfig {
            tx_batch: 64,
            ..EngineConfig::default()
        };
        match Worker::direct(udp, ecfg) {
            Ok(mut w) => {
                w.set_setup_timeout(timeout);
                let c = Box::new(MrcXContext {
                    worker: Mutex::new(w),
                });
                // SAFETY: non-null out-pointer.
                unsafe { *ctx = Box::into_raw(c) };
                0
            }
            Err(e) => fail(
                engine_errno(&e),
                format_args!("cannot open the UDP datapath: {e}"),
            ),
        }
    })
}

/// Closes a context: its listeners, connection attempts and QPs (outstanding work is
/// dropped without completions, as `ibv_destroy_qp`), and its sockets. Registered
/// memory is never touched again. 0, or `EINVAL` for NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_close_context(ctx: *mut MrcXContext) -> c_int {
    guard(libc::EIO, || {
        if ctx.is_null() {
            return fail(libc::EINVAL, "null context");
        }
        // SAFETY: a context this library returned, not used after this call.
        drop(unsafe { Box::from_raw(ctx) });
        0
    })
}

/// Writes the UDP port of the context's receive socket (what peers send to; the one the
/// kernel picked when `udp_port` was 0) to `*udp_port`. 0, or `EINVAL` / `EIO`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_udp_port(ctx: *mut MrcXContext, udp_port: *mut u16) -> c_int {
    guard(libc::EIO, || {
        let w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if udp_port.is_null() {
            return fail(libc::EINVAL, "null udp_port");
        }
        // SAFETY: non-null out-pointer.
        unsafe { *udp_port = w.udp_addr().port() };
        0
    })
}

/// Starts a listener: writes its handle (`MRC_X_HANDLE_BYTES` bytes) to `handle` and
/// its id to `*listener`. Carry the handle to the peers (it is a credential: whoever
/// holds it can connect). 0, or `EINVAL` / `EIO`, or the errno of the TCP listener.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_listen(
    ctx: *mut MrcXContext,
    handle: *mut u8,
    listener: *mut u64,
) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if handle.is_null() || listener.is_null() {
            return fail(libc::EINVAL, "null handle or listener");
        }
        match w.listen(QpConfig::default()) {
            Ok((id, h)) => {
                let b = h.to_bytes();
                // SAFETY: the caller's buffer of MRC_X_HANDLE_BYTES bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(b.as_ptr(), handle, b.len());
                    *listener = id.0;
                }
                0
            }
            Err(e) => fail(engine_errno(&e), e),
        }
    })
}

/// Takes the next connection the listener completed: 0 with its QP in `*qpn` (post at
/// once), `EAGAIN` while none is ready (advances the handshakes; call again, with
/// [`mrc_x_progress`] between), `EINVAL` for an unknown listener. A peer that fails
/// set-up (a forged secret, foreign bytes, a silent peer) is dropped and never handed
/// out.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_accept(
    ctx: *mut MrcXContext,
    listener: u64,
    qpn: *mut u32,
) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if qpn.is_null() {
            return fail(libc::EINVAL, "null qpn");
        }
        match w.poll_accept(ListenerId(listener)) {
            None => fail(libc::EAGAIN, "no connection ready yet"),
            Some(Ok(q)) => {
                // SAFETY: non-null out-pointer.
                unsafe { *qpn = q };
                0
            }
            Some(Err(e)) => fail(engine_errno(&e), e),
        }
    })
}

/// Closes a listener; connections it handed out stay. 0, or `ENOENT` for an unknown id.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_close_listener(ctx: *mut MrcXContext, listener: u64) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if w.close_listener(ListenerId(listener)) {
            0
        } else {
            fail(libc::ENOENT, format_args!("no listener {listener}"))
        }
    })
}

/// Starts connecting to the listener of `handle` (`len` bytes, at least
/// `MRC_X_HANDLE_BYTES`; a longer buffer such as NCCL's 128 bytes may be passed whole):
/// writes the attempt's id to `*conn` and returns at once. 0, or `EINVAL` for a
/// malformed handle (bad length, magic, version, address) or null pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_connect(
    ctx: *mut MrcXContext,
    handle: *const u8,
    len: usize,
    conn: *mut u64,
) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if handle.is_null() || conn.is_null() {
            return fail(libc::EINVAL, "null handle or conn");
        }
        // SAFETY: the caller's `len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(handle, len) };
        let h = match ConnHandle::from_bytes(bytes) {
            Ok(h) => h,
            Err(e) => return fail(libc::EINVAL, e),
        };
        match w.connect_start(&h, QpConfig::default()) {
            Ok(id) => {
                // SAFETY: non-null out-pointer.
                unsafe { *conn = id.0 };
                0
            }
            Err(e) => fail(engine_errno(&e), e),
        }
    })
}

/// Advances connection attempt `conn`: 0 with its QP in `*qpn` once both sides are
/// connected (post at once), `EAGAIN` meanwhile. Any other value ends the attempt:
/// `EACCES` (the handle's secret did not match), `ETIMEDOUT` (the deadline of
/// `setup_timeout_ms` passed), `ECONNREFUSED` and other socket errnos, `EPROTO` (the
/// peer spoke something else), `EINVAL` (unknown attempt).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_connect_poll(
    ctx: *mut MrcXContext,
    conn: u64,
    qpn: *mut u32,
) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if qpn.is_null() {
            return fail(libc::EINVAL, "null qpn");
        }
        match w.poll_connect(ConnectId(conn)) {
            Ok(None) => fail(libc::EAGAIN, "connection not ready yet"),
            Ok(Some(q)) => {
                // SAFETY: non-null out-pointer.
                unsafe { *qpn = q };
                0
            }
            Err(e) => fail(engine_errno(&e), e),
        }
    })
}

/// Destroys QP `qpn` (outstanding work dropped without completions, its regions
/// released; the memory is never touched again). 0, or `ENOENT`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_destroy_qp(ctx: *mut MrcXContext, qpn: u32) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if let Err(e) = have_qp(&w, qpn) {
            return e;
        }
        w.destroy_qp(qpn);
        0
    })
}

/// Registers `length` bytes of the application's memory at `addr` with QP `qpn`
/// (`ibv_reg_mr` without a PD; `access` is `MRC_X_ACCESS_*` bits) and describes the
/// region in `*mr`. The verbs contract: the bytes stay valid and unmoved until
/// [`mrc_x_dereg_mr`] succeeds (or the QP or context is gone), and the application does
/// not touch them while a call on this context runs (between calls it may). A WRITE from
/// the network lands only inside a region with `MRC_X_ACCESS_REMOTE_WRITE` whose rkey it
/// names. 0, or `EINVAL` (null `addr` with a length, unknown access bits, a full table),
/// `ENOENT` (no such QP).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_reg_mr(
    ctx: *mut MrcXContext,
    qpn: u32,
    addr: *mut c_void,
    length: usize,
    access: u32,
    mr: *mut MrcXMr,
) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if mr.is_null() {
            return fail(libc::EINVAL, "null mr");
        }
        let all = MRC_X_ACCESS_LOCAL_WRITE | MRC_X_ACCESS_REMOTE_WRITE | MRC_X_ACCESS_REMOTE_READ;
        if access & !all != 0 {
            return fail(
                libc::EINVAL,
                format_args!("unknown access bits {access:#x}"),
            );
        }
        if let Err(e) = have_qp(&w, qpn) {
            return e;
        }
        let mut a = Access::NONE;
        for (bit, right) in [
            (MRC_X_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
            (MRC_X_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
            (MRC_X_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        ] {
            if access & bit != 0 {
                a = a | right;
            }
        }
        // SAFETY: the verbs contract above is reg_mr_raw's, passed on to the caller.
        match unsafe { w.reg_mr_raw(qpn, addr.cast(), length, a) } {
            Ok(k) => {
                // SAFETY: non-null out-pointer.
                unsafe {
                    *mr = MrcXMr {
                        addr: k.addr,
                        length: k.len,
                        lkey: k.lkey,
                        rkey: k.rkey,
                    }
                };
                0
            }
            Err(e) => fail(engine_errno(&e), e),
        }
    })
}

/// Deregisters region `lkey` of QP `qpn`. 0 (the memory is never touched again), or
/// `EBUSY` while a send not yet completed reads from it or a receive is posted in it,
/// `ENOENT` for an unknown QP or key.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_dereg_mr(ctx: *mut MrcXContext, qpn: u32, lkey: u32) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        if let Err(e) = have_qp(&w, qpn) {
            return e;
        }
        match w.dereg_mr(qpn, lkey) {
            Ok(()) => 0,
            Err(e) => fail(engine_errno(&e), e),
        }
    })
}

fn sge(s: &MrcXSge) -> Sge {
    Sge {
        lkey: s.lkey,
        addr: s.addr,
        len: s.length,
    }
}

fn post_errno(e: &PostError) -> i32 {
    match e {
        PostError::BadState(_) => libc::EINVAL,
        PostError::LocalAccess(_) => libc::EINVAL,
        PostError::SendQueueFull { .. } | PostError::RecvQueueFull { .. } => libc::ENOMEM,
    }
}

/// Posts the linked send work requests from `wr` on QP `qpn` straight into the
/// transport (they leave at the next [`mrc_x_progress`]). 0, or the errno of the first
/// refused one with `*bad_wr` naming it (the ones before it were posted): `ENOMEM` when
/// the QP's send queue is full (16384 work requests posted whose completions
/// [`mrc_x_poll_cq`] has not taken yet, as `ibv_post_send` answers a full queue);
/// `EINVAL` for an unknown opcode, `reserved` not 0, an SGE outside the QP's regions
/// (lkey, bounds), a QP that is not connected, or a list whose `next` pointers loop back
/// (then nothing is posted and `*bad_wr` names the first); `ENOENT` for an unknown QP.
/// `bad_wr` may be NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_post_send(
    ctx: *mut MrcXContext,
    qpn: u32,
    wr: *const MrcXSendWr,
    bad_wr: *mut *const MrcXSendWr,
) -> c_int {
    // SAFETY: the C contract of the call (a live context, a list of live requests).
    unsafe {
        post_list(
            ctx,
            qpn,
            wr,
            bad_wr,
            |r| r.next,
            |c| c.max_send_wr,
            |w, r| {
                let s = sge(&r.sg);
                if r.reserved != 0 {
                    return Err(fail(libc::EINVAL, "wr.reserved is not 0"));
                }
                match r.opcode {
                    MRC_X_WR_RDMA_WRITE => w.post_write(qpn, r.wr_id, s, r.remote_addr, r.rkey),
                    MRC_X_WR_RDMA_WRITE_WITH_IMM => {
                        w.post_write_with_imm(qpn, r.wr_id, s, r.remote_addr, r.rkey, r.imm_data)
                    }
                    MRC_X_WR_SEND => w.post_send(qpn, r.wr_id, s, None),
                    MRC_X_WR_SEND_WITH_IMM => w.post_send(qpn, r.wr_id, s, Some(r.imm_data)),
                    op => return Err(fail(libc::EINVAL, format_args!("unknown opcode {op}"))),
                }
                .map_err(|e| fail(post_errno(&e), e))
            },
        )
    }
}

/// Posts the linked receive work requests from `wr` on QP `qpn` (an SGE with a length
/// needs `MRC_X_ACCESS_LOCAL_WRITE`). Post them before the peer sends: a WRITE with
/// immediate or a SEND that finds none is answered RNR and resent. 0, or as
/// [`mrc_x_post_send`] (`ENOMEM`: 16384 receives posted whose completions were not
/// taken).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_post_recv(
    ctx: *mut MrcXContext,
    qpn: u32,
    wr: *const MrcXRecvWr,
    bad_wr: *mut *const MrcXRecvWr,
) -> c_int {
    // SAFETY: as mrc_x_post_send.
    unsafe {
        post_list(
            ctx,
            qpn,
            wr,
            bad_wr,
            |r| r.next,
            |c| c.max_recv_wr,
            |w, r| {
                w.post_recv(qpn, r.wr_id, sge(&r.sg))
                    .map_err(|e| fail(post_errno(&e), e))
            },
        )
    }
}

/// The body of both post calls: under [`guard`], on the locked context, `post` each work
/// request of the list from `wr` (linked by `next`) on QP `qpn` until one is refused; then
/// `*bad_wr` (if not NULL) names it and its errno is returned (`ENOENT`/`EINVAL` for the
/// QP names the first). 0 when all were posted.
///
/// # Safety
/// `ctx` as [`lock`]; `wr` NULL or a list of live work requests; `bad_wr` NULL or
/// writable.
unsafe fn post_list<W>(
    ctx: *mut MrcXContext,
    qpn: u32,
    wr: *const W,
    bad_wr: *mut *const W,
    next: impl Fn(&W) -> *const W,
    depth: impl Fn(&mrc_transport::ConnConfig) -> u32,
    mut post: impl FnMut(&mut Worker<DirectDatapath>, &W) -> Result<(), c_int>,
) -> c_int {
    guard(libc::EIO, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        let bad = |p: *const W| {
            if !bad_wr.is_null() {
                // SAFETY: non-null out-pointer.
                unsafe { *bad_wr = p };
            }
        };
        if let Err(e) = have_qp(&w, qpn) {
            bad(wr);
            return e;
        }
        // A list that loops back on itself is refused whole: posted as it came it would
        // fill the queue with copies (ENOMEM only at the queue's end, the same requests
        // posted over and over). Only the first depth + 1 requests are looked at: a
        // longer list cannot be posted whole anyway and stops at ENOMEM.
        let depth = w.config(qpn).map_or(0, |c| depth(c) as usize);
        // SAFETY: a list of live work requests (the C contract).
        if unsafe { crate::wrlist::is_circular(wr, &next, depth + 1) } {
            bad(wr);
            return fail(
                libc::EINVAL,
                "circular work-request list (a next pointer loops back)",
            );
        }
        let mut p = wr;
        // SAFETY: a list of live work requests (the C contract).
        while let Some(r) = unsafe { p.as_ref() } {
            if let Err(e) = post(&mut w, r) {
                bad(p);
                return e;
            }
            p = next(r);
        }
        0
    })
}

/// One pass of progress on the calling thread: datagrams in, due timers, completions into
/// the QPs' queues, datagrams out, and the handshakes of listeners and connection
/// attempts. Never blocks. 1 if anything happened, 0 if not, `-1` with errno (`EINVAL`,
/// `EIO`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_progress(ctx: *mut MrcXContext) -> c_int {
    guard(-1, || match unsafe { lock(ctx) } {
        Ok(mut w) => c_int::from(w.progress()),
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// Progresses until something happened or `timeout_us` passed, sleeping in the datapath
/// while nothing is due. 1 if anything happened, 0 at the timeout, `-1` with errno.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_wait(ctx: *mut MrcXContext, timeout_us: u64) -> c_int {
    guard(-1, || match unsafe { lock(ctx) } {
        Ok(mut w) => match w.wait(Duration::from_micros(timeout_us)) {
            Ok(b) => c_int::from(b),
            Err(e) => minus(engine_errno(&e), e),
        },
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

fn wc(qpn: u32, c: &Completion) -> MrcXWc {
    MrcXWc {
        wr_id: c.wr_id,
        status: match c.status {
            WcStatus::Success => MRC_X_WC_SUCCESS,
            WcStatus::RetryExceeded => MRC_X_WC_RETRY_EXC_ERR,
            WcStatus::Flushed => MRC_X_WC_WR_FLUSH_ERR,
            WcStatus::RemoteAccessError => MRC_X_WC_REM_ACCESS_ERR,
            WcStatus::GenerationMismatch => MRC_X_WC_GENERAL_ERR,
            WcStatus::LocalProtectionError => MRC_X_WC_LOC_PROT_ERR,
            WcStatus::LocalLengthError => MRC_X_WC_LOC_LEN_ERR,
        },
        opcode: match c.opcode {
            WcOpcode::Write => MRC_X_WC_RDMA_WRITE,
            WcOpcode::WriteWithImm => MRC_X_WC_RDMA_WRITE_WITH_IMM,
            WcOpcode::Send => MRC_X_WC_SEND,
            WcOpcode::Recv => MRC_X_WC_RECV,
            WcOpcode::RecvRdmaWithImm => MRC_X_WC_RECV_RDMA_WITH_IMM,
        },
        byte_len: c.byte_len,
        imm_data: c.imm.unwrap_or(0),
        wc_flags: if c.imm.is_some() {
            MRC_X_WC_WITH_IMM
        } else {
            0
        },
        qp_num: qpn,
    }
}

/// Takes up to `num_entries` completions of QP `qpn` into `wc`: send-side ones first (in
/// posting order), then receive-side ones (in message order). Does not progress: call
/// [`mrc_x_progress`] to make completions happen. The number taken (fewer than
/// `num_entries`: none is left), or `-1` with errno (`EINVAL` for a null `wc` or a
/// negative count, `ENOENT` for an unknown QP, `EIO`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_poll_cq(
    ctx: *mut MrcXContext,
    qpn: u32,
    num_entries: c_int,
    wc_out: *mut MrcXWc,
) -> c_int {
    guard(-1, || {
        let mut w = match unsafe { lock(ctx) } {
            Ok(w) => w,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        };
        if wc_out.is_null() || num_entries < 0 {
            return minus(libc::EINVAL, "null wc or negative num_entries");
        }
        if let Err(e) = have_qp(&w, qpn) {
            set_errno(e);
            return -1;
        }
        let mut n = 0;
        while n < num_entries {
            let Some(c) = w.poll_send_cq(qpn).or_else(|| w.poll_recv_cq(qpn)) else {
                break;
            };
            // SAFETY: the caller's array of `num_entries` entries; n < num_entries.
            unsafe { *wc_out.add(n as usize) = wc(qpn, &c) };
            n += 1;
        }
        n
    })
}

/// What a connected `mrc.h` QP's transport runs on (the verbs runtime fills it).
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) struct TransportView {
    /// `MRC_X_CC_*`.
    pub cc: u32,
    /// This side's receiver NACKs trimmed packets.
    pub trim_nacks: bool,
    /// Every EV, in the connection's order.
    pub evs: Vec<MrcXEvCount>,
}

#[cfg(feature = "verbs")]
fn transport_view(qp: *mut c_void) -> Result<TransportView, c_int> {
    // SAFETY: the C contract (NULL or a live mrc_qp).
    unsafe { crate::ffi::qp_transport_view(qp) }.map_err(|e| {
        fail(
            e,
            if e == libc::ENOTCONN {
                "the QP's transport is not connected (before RTS and the rendezvous)"
            } else {
                "null qp"
            },
        )
    })
}

#[cfg(not(feature = "verbs"))]
fn transport_view(_qp: *mut c_void) -> Result<TransportView, c_int> {
    Err(fail(
        libc::ENOTSUP,
        "lib_mrc.so was built without the verbs feature: there are no mrc.h QPs",
    ))
}

/// Writes to `*info` what the transport connection of `qp` (a `struct mrc_qp *` of
/// `mrc.h`) runs on: its congestion control, whether its receiver NACKs trimmed packets,
/// how many EVs it sprays over. 0, or `EINVAL` (NULL), `ENOTCONN` (the QP has not
/// connected: before RTS and the rendezvous, or after a reset), `ENOTSUP` (a build
/// without the `verbs` feature, which has no `mrc.h` QPs), `EIO`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_qp_transport(
    qp: *mut c_void,
    info: *mut MrcXTransportInfo,
) -> c_int {
    guard(libc::EIO, || {
        if info.is_null() {
            return fail(libc::EINVAL, "null info");
        }
        if qp.is_null() {
            return fail(libc::EINVAL, "null qp");
        }
        match transport_view(qp) {
            Ok(v) => {
                let out = MrcXTransportInfo {
                    cc: v.cc,
                    trim_nacks: u32::from(v.trim_nacks),
                    ev_count: v.evs.len() as u32,
                    reserved: 0,
                };
                // SAFETY: non-null out-pointer (the C contract).
                unsafe { *info = out };
                0
            }
            Err(e) => e,
        }
    })
}

/// Lists the EVs of `qp`'s transport connection (a `struct mrc_qp *` of `mrc.h`), in
/// the connection's order, with what was sent on each: `*count` is set to the number of
/// EVs and the first `min(max, count)` are written to `out`. 0, or `E2BIG` when `max` is
/// smaller than the count (the first `max` written), `EINVAL` (NULL `qp` or `count`,
/// NULL `out` with `max` > 0), `ENOTCONN`, `ENOTSUP`, `EIO` as [`mrc_x_qp_transport`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_qp_evs(
    qp: *mut c_void,
    out: *mut MrcXEvCount,
    max: usize,
    count: *mut usize,
) -> c_int {
    guard(libc::EIO, || {
        if count.is_null() || (out.is_null() && max > 0) {
            return fail(libc::EINVAL, "null count, or null out with max > 0");
        }
        if qp.is_null() {
            return fail(libc::EINVAL, "null qp");
        }
        match transport_view(qp) {
            Ok(v) => {
                for (i, &c) in v.evs.iter().take(max).enumerate() {
                    // SAFETY: the caller's array of `max` entries; i < max.
                    unsafe { *out.add(i) = c };
                }
                // SAFETY: non-null out-pointer.
                unsafe { *count = v.evs.len() };
                if v.evs.len() > max {
                    fail(
                        libc::E2BIG,
                        format_args!("{} EVs, room for {max}", v.evs.len()),
                    )
                } else {
                    0
                }
            }
            Err(e) => e,
        }
    })
}

/// Copies the message of the calling thread's last failed `mrc_x_` call into `buf`
/// (`len` bytes, NUL-terminated, cut to fit; `buf` may be NULL with `len` 0) and returns
/// the message's full length in bytes, as `snprintf` does; 0 when no call failed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_x_last_error(buf: *mut c_char, len: usize) -> usize {
    catch_unwind(|| {
        LAST_ERROR.with(|l| {
            let s = l.borrow();
            if !buf.is_null() && len > 0 {
                let n = s.len().min(len - 1);
                // SAFETY: the caller's `len` writable bytes; n + 1 <= len.
                unsafe {
                    std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
                    *buf.add(n) = 0;
                }
            }
            s.len()
        })
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mrc_fabric::engine::setup::HandleError;
    use std::ptr::{null, null_mut};

    fn last() -> String {
        let mut b = [0 as c_char; 128];
        let n = unsafe { mrc_x_last_error(b.as_mut_ptr(), b.len()) };
        let s = unsafe { CStr::from_ptr(b.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(n, s.len());
        s
    }

    fn open(ip: &CStr, first: u16, last: u16) -> Result<*mut MrcXContext, c_int> {
        let a = MrcXContextAttr {
            ip: ip.as_ptr(),
            udp_port: 0,
            ev_port_first: first,
            ev_port_last: last,
            reserved: 0,
            setup_timeout_ms: 0,
        };
        let mut c = null_mut();
        match unsafe { mrc_x_open(&a, &mut c) } {
            0 => Ok(c),
            e => Err(e),
        }
    }

    /// NULL pointers into `mrc_x_qp_transport` / `mrc_x_qp_evs` are `EINVAL` in every
    /// build (a NULL `qp` was `ENOTSUP` without the verbs feature, against the header's
    /// "EINVAL (NULL qp ...)"), and nothing is written; a QP pointer in a build without
    /// `mrc.h` QPs is `ENOTSUP`.
    #[test]
    fn qp_transport_calls_refuse_null_pointers_in_every_build() {
        let mut info = MrcXTransportInfo {
            cc: 9,
            ..MrcXTransportInfo::default()
        };
        let mut n = 7usize;
        let mut one = [MrcXEvCount::default()];
        assert_eq!(
            unsafe { mrc_x_qp_transport(null_mut(), &mut info) },
            libc::EINVAL
        );
        assert_eq!(last(), "null qp");
        assert_eq!(
            unsafe { mrc_x_qp_transport(null_mut(), null_mut()) },
            libc::EINVAL
        );
        assert_eq!(
            unsafe { mrc_x_qp_evs(null_mut(), null_mut(), 0, &mut n) },
            libc::EINVAL
        );
        assert_eq!(last(), "null qp");
        assert_eq!(
            unsafe { mrc_x_qp_evs(null_mut(), one.as_mut_ptr(), 1, &mut n) },
            libc::EINVAL
        );
        assert_eq!(
            unsafe { mrc_x_qp_evs(null_mut(), null_mut(), 1, &mut n) },
            libc::EINVAL
        );
        assert_eq!((n, info.cc, one[0]), (7, 9, MrcXEvCount::default()));
        #[cfg(not(feature = "verbs"))]
        {
            let mut not_a_qp = 0u64;
            let q: *mut c_void = (&raw mut not_a_qp).cast();
            assert_eq!(unsafe { mrc_x_qp_transport(q, &mut info) }, libc::ENOTSUP);
            assert_eq!(
                unsafe { mrc_x_qp_evs(q, one.as_mut_ptr(), 1, &mut n) },
                libc::ENOTSUP
            );
            assert_eq!((n, info.cc, not_a_qp), (7, 9, 0));
        }
    }

    #[test]
    fn a_panic_is_eio_and_poisons_the_context() {
        assert_eq!(guard(-1, || panic!("boom")), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EIO)
        );
        assert_eq!(last(), "internal error (a panic was caught)");
        let c = open(c"127.0.0.1", 37000, 37049).unwrap();
        // Poison the worker's lock the way a panic inside an entry would.
        let ctx = unsafe { &*c };
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let _g = ctx.worker.lock().unwrap();
            panic!("inside");
        }));
        assert_eq!(unsafe { mrc_x_progress(c) }, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EIO)
        );
        let mut h = [0u8; MRC_X_HANDLE_BYTES];
        let mut l = 0;
        assert_eq!(
            unsafe { mrc_x_listen(c, h.as_mut_ptr(), &mut l) },
            libc::EIO
        );
        assert_eq!(last(), "context poisoned by an earlier internal error");
        assert_eq!(unsafe { mrc_x_close_context(c) }, 0);
    }

    #[test]
    fn bad_arguments_are_typed_errnos() {
        assert_eq!(unsafe { mrc_x_open(null(), null_mut()) }, libc::EINVAL);
        assert_eq!(open(c"not-an-ip", 0, 0), Err(libc::EINVAL));
        assert_eq!(last(), "not an IP address: \"not-an-ip\"");
        assert_eq!(open(c"127.0.0.1", 35000, 34999), Err(libc::EINVAL));
        // 192.0.2.1 (TEST-NET-1) is no address of this host.
        assert_eq!(open(c"192.0.2.1", 37050, 37099), Err(libc::EADDRNOTAVAIL));
        assert_eq!(unsafe { mrc_x_progress(null_mut()) }, -1);
        assert_eq!(unsafe { mrc_x_close_context(null_mut()) }, libc::EINVAL);

        let c = open(c"127.0.0.1", 37050, 37099).unwrap();
        let mut port = 0u16;
        assert_eq!(unsafe { mrc_x_udp_port(c, &mut port) }, 0);
        assert_ne!(port, 0);
        let mut mr = MrcXMr::default();
        let mut buf = [0u8; 64];
        assert_eq!(
            unsafe { mrc_x_reg_mr(c, 7, buf.as_mut_ptr().cast(), 64, 1, &mut mr) },
            libc::ENOENT
        );
        assert_eq!(last(), "no QP 7");
        assert_eq!(
            unsafe { mrc_x_reg_mr(c, 7, buf.as_mut_ptr().cast(), 64, 8, &mut mr) },
            libc::EINVAL
        );
        let mut q = 0u32;
        assert_eq!(unsafe { mrc_x_accept(c, 99, &mut q) }, libc::EINVAL);
        assert_eq!(unsafe { mrc_x_close_listener(c, 99) }, libc::ENOENT);
        let mut id = 0u64;
        let short = [0u8; 59];
        assert_eq!(
            unsafe { mrc_x_connect(c, short.as_ptr(), 59, &mut id) },
            libc::EINVAL
        );
        assert_eq!(last(), HandleError::Short(59).to_string());
        let mut wcs = [MrcXWc::default(); 4];
        assert_eq!(unsafe { mrc_x_poll_cq(c, 7, 4, wcs.as_mut_ptr()) }, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOENT)
        );
        let wr = MrcXRecvWr {
            wr_id: 1,
            next: null(),
            sg: MrcXSge::default(),
        };
        let mut bad = null();
        assert_eq!(
            unsafe { mrc_x_post_recv(c, 7, &wr, &mut bad) },
            libc::ENOENT
        );
        assert_eq!(bad, &wr as *const _);
        // A listener's handle, then its own connection attempt with a forged secret.
        let mut h = [0u8; MRC_X_HANDLE_BYTES];
        let mut l = 0u64;
        assert_eq!(unsafe { mrc_x_listen(c, h.as_mut_ptr(), &mut l) }, 0);
        assert_eq!(&h[..6], b"MRCH\x01\x04");
        assert_eq!(unsafe { mrc_x_close_listener(c, l) }, 0);
        // The listener is gone: connecting to its handle is refused by TCP.
        assert_eq!(unsafe { mrc_x_connect(c, h.as_ptr(), h.len(), &mut id) }, 0);
        let end = std::time::Instant::now() + Duration::from_secs(10);
        let rc = loop {
            match unsafe { mrc_x_connect_poll(c, id, &mut q) } {
                libc::EAGAIN => assert!(unsafe { mrc_x_progress(c) } >= 0),
                rc => break rc,
            }
            assert!(std::time::Instant::now() < end, "the attempt never ended");
        };
        assert_eq!(rc, libc::ECONNREFUSED, "{}", last());
        // The attempt is over: its id is unknown now.
        assert_eq!(unsafe { mrc_x_connect_poll(c, id, &mut q) }, libc::EINVAL);
        assert_eq!(unsafe { mrc_x_close_context(c) }, 0);
    }

    /// A peer context that vanishes (closed: its sockets go, nothing more is heard)
    /// while this side only waits on a posted receive: within the default unresponsive
    /// budget (5 s) the receive completes with `MRC_X_WC_RETRY_EXC_ERR`. Before, the
    /// receive stayed posted for ever (nothing of this side was in flight).
    #[test]
    fn a_receive_waiting_on_a_vanished_peer_fails_within_the_budget() {
        let a = open(c"127.0.0.1", 37100, 37149).unwrap();
        let b = open(c"127.0.0.1", 37150, 37199).unwrap();
        let mut h = [0u8; MRC_X_HANDLE_BYTES];
        let mut l = 0u64;
        assert_eq!(unsafe { mrc_x_listen(b, h.as_mut_ptr(), &mut l) }, 0);
        let mut id = 0u64;
        assert_eq!(unsafe { mrc_x_connect(a, h.as_ptr(), h.len(), &mut id) }, 0);
        let (mut qa, mut qb) = (0u32, 0u32);
        let (mut da, mut db) = (false, false);
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while !(da && db) {
            assert!(std::time::Instant::now() < end, "setup: {}", last());
            unsafe {
                mrc_x_progress(a);
                mrc_x_progress(b);
            }
            if !da {
                match unsafe { mrc_x_connect_poll(a, id, &mut qa) } {
                    0 => da = true,
                    libc::EAGAIN => {}
                    e => panic!("connect {e}: {}", last()),
                }
            }
            if !db {
                match unsafe { mrc_x_accept(b, l, &mut qb) } {
                    0 => db = true,
                    libc::EAGAIN => {}
                    e => panic!("accept {e}: {}", last()),
                }
            }
        }
        let mut buf = [0u8; 64];
        let mut mr = MrcXMr::default();
        let rc = unsafe {
            mrc_x_reg_mr(
                b,
                qb,
                buf.as_mut_ptr().cast(),
                64,
                MRC_X_ACCESS_LOCAL_WRITE,
                &mut mr,
            )
        };
        assert_eq!(rc, 0, "{}", last());
        let wr = MrcXRecvWr {
            wr_id: 5,
            next: null(),
            sg: MrcXSge {
                addr: mr.addr,
                length: 64,
                lkey: mr.lkey,
            },
        };
        assert_eq!(unsafe { mrc_x_post_recv(b, qb, &wr, null_mut()) }, 0);
        // a few passes of both, then a vanishes
        for _ in 0..100 {
            unsafe {
                mrc_x_progress(a);
                mrc_x_progress(b);
            }
        }
        assert_eq!(unsafe { mrc_x_close_context(a) }, 0);
        let gone = std::time::Instant::now();
        let mut wcs = [MrcXWc::default(); 2];
        let n = loop {
            assert!(unsafe { mrc_x_wait(b, 10_000) } >= 0);
            let n = unsafe { mrc_x_poll_cq(b, qb, 2, wcs.as_mut_ptr()) };
            if n != 0 {
                break n;
            }
            assert!(gone.elapsed() < Duration::from_secs(10), "no completion");
        };
        let took = gone.elapsed();
        assert_eq!(n, 1);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
            (5, MRC_X_WC_RETRY_EXC_ERR, MRC_X_WC_RECV)
        );
        assert!(
            took > Duration::from_millis(4500) && took < Duration::from_millis(5500),
            "{took:?}"
        );
        assert_eq!(unsafe { mrc_x_close_context(b) }, 0);
    }

    /// Issue: 200,000 work requests posted on one QP were all taken, and a circular list
    /// never returned. Now the send queue holds 16384 (`ENOMEM` beyond, `*bad_wr` the
    /// first refused), taking completions frees slots, and a circular list is refused
    /// whole (`EINVAL`, nothing posted).
    #[test]
    fn posts_beyond_the_queue_depth_are_enomem_and_a_circular_list_is_refused() {
        let c = open(c"127.0.0.1", 37200, 37249).unwrap();
        let mut w = unsafe { lock(c) }.unwrap();
        let qa = w
            .create_qp(mrc_fabric::engine::QpConfig::default())
            .unwrap();
        let qb = w
            .create_qp(mrc_fabric::engine::QpConfig::default())
            .unwrap();
        let (ia, ib) = (w.local_info(qa).unwrap(), w.local_info(qb).unwrap());
        let addr = w.udp_addr();
        w.connect(qa, &ib, addr).unwrap();
        w.connect(qb, &ia, addr).unwrap();
        drop(w);
        let mut buf = [0u8; 8];
        let mut mr = MrcXMr::default();
        let rc = unsafe {
            mrc_x_reg_mr(
                c,
                qa,
                buf.as_mut_ptr().cast(),
                8,
                MRC_X_ACCESS_LOCAL_WRITE,
                &mut mr,
            )
        };
        assert_eq!(rc, 0, "{}", last());
        let sg = MrcXSge {
            addr: mr.addr,
            length: 0,
            lkey: mr.lkey,
        };
        // one receive at qb, for the first SEND to complete
        let mut bbuf = [0u8; 8];
        let mut mrb = MrcXMr::default();
        let rc = unsafe {
            mrc_x_reg_mr(
                c,
                qb,
                bbuf.as_mut_ptr().cast(),
                8,
                MRC_X_ACCESS_LOCAL_WRITE,
                &mut mrb,
            )
        };
        assert_eq!(rc, 0, "{}", last());
        let rb = MrcXRecvWr {
            wr_id: 99,
            next: null(),
            sg: MrcXSge {
                addr: mrb.addr,
                length: 0,
                lkey: mrb.lkey,
            },
        };
        assert_eq!(unsafe { mrc_x_post_recv(c, qb, &rb, null_mut()) }, 0);
        // a receive list of 20,000 in one call: 16384 taken, the next refused
        let wrs: Vec<MrcXRecvWr> = (0..20_000u64)
            .map(|i| MrcXRecvWr {
                wr_id: i,
                next: null(),
                sg,
            })
            .collect();
        let mut wrs = wrs;
        for i in 0..wrs.len() - 1 {
            let next: *const MrcXRecvWr = &wrs[i + 1];
            wrs[i].next = next;
        }
        let mut bad = null();
        assert_eq!(
            unsafe { mrc_x_post_recv(c, qa, wrs.as_ptr(), &mut bad) },
            libc::ENOMEM
        );
        assert_eq!(bad, &wrs[16_384] as *const _);
        assert_eq!(
            last(),
            "receive queue full: 16384 receives outstanding (max_recv_wr)"
        );
        // a circular send list of three: refused whole, nothing posted
        let mut s = [MrcXSendWr {
            wr_id: 0,
            next: null(),
            sg,
            opcode: MRC_X_WR_SEND,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            reserved: 0,
        }; 3];
        let p: *const MrcXSendWr = s.as_ptr();
        for (i, x) in s.iter_mut().enumerate() {
            x.next = unsafe { p.add((i + 1) % 3) };
            x.wr_id = i as u64;
        }
        let mut bad = null();
        assert_eq!(
            unsafe { mrc_x_post_send(c, qa, s.as_ptr(), &mut bad) },
            libc::EINVAL
        );
        assert_eq!(bad, s.as_ptr());
        assert!(last().contains("circular"), "{}", last());
        // a self-loop too
        let mut one = s[0];
        one.next = &one;
        assert_eq!(
            unsafe { mrc_x_post_send(c, qa, &one, null_mut()) },
            libc::EINVAL
        );
        // 16384 sends one by one, the next refused; one taken completion frees one slot
        let mut single = s[0];
        single.next = null();
        for i in 0..16_384u64 {
            single.wr_id = i;
            let rc = unsafe { mrc_x_post_send(c, qa, &single, null_mut()) };
            assert_eq!(rc, 0, "post {i}: {}", last());
        }
        assert_eq!(
            unsafe { mrc_x_post_send(c, qa, &single, null_mut()) },
            libc::ENOMEM
        );
        let mut wcs = [MrcXWc::default(); 1];
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while unsafe { mrc_x_poll_cq(c, qa, 1, wcs.as_mut_ptr()) } == 0 {
            assert!(std::time::Instant::now() < until, "no completion");
            unsafe { mrc_x_progress(c) };
        }
        assert_eq!(
            unsafe { mrc_x_post_send(c, qa, &single, null_mut()) },
            0,
            "{}",
            last()
        );
        let _ = qb;
        assert_eq!(unsafe { mrc_x_close_context(c) }, 0);
    }

    #[test]
    fn the_last_error_is_cut_to_the_buffer_and_reports_its_full_length() {
        fail(libc::EINVAL, "0123456789");
        let mut b = [0x7f as c_char; 4];
        assert_eq!(unsafe { mrc_x_last_error(b.as_mut_ptr(), 4) }, 10);
        assert_eq!(b.map(|c| c as u8), *b"012\0");
        assert_eq!(unsafe { mrc_x_last_error(null_mut(), 0) }, 10);
        fail(libc::EINVAL, "é".repeat(LAST_ERROR_MAX_BYTES));
        assert_eq!(
            unsafe { mrc_x_last_error(null_mut(), 0) },
            LAST_ERROR_MAX_BYTES
        );
    }
}
