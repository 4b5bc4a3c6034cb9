//! The exported C functions of `mrc.h` (feature `verbs`). Every one runs its body under
//! `catch_unwind` (a panic answers `EIO`), checks its pointers for null, and reports
//! errors the way `mrc.h` documents: `-1` with `errno` where it says so, the errno value
//! itself where it says "errors like ibv_X()" and `ibv_X` returns one (and `errno` is set
//! too, so either reading works).
//!
//! # Safety
//! The C contract: every non-null pointer names a live object of its type (one this
//! library returned, or the application's libibverbs object), as with libibverbs.
#![allow(clippy::missing_safety_doc)]

use crate::abi::{
    self, MrcContextAttr, MrcDeviceAttr, MrcQpAttr, MrcQpHintAttr, attr_mask, hint_mask, limits,
};
use crate::runtime::{
    self, AsyncEvent, Channel, Context, Cq, CqQueue, Hint, InitCopy, PendingWr, Qp, lock,
};
use crate::state::{self, ModifyRequest, QpState, ibv_mask};
use rdma_sys::*;
use std::collections::VecDeque;
use std::os::raw::{c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// `struct mrc_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MrcQpInitAttr {
    /// Application context of the QP.
    pub qp_context: *mut c_void,
    /// CQ of send completions.
    pub send_cq: *mut c_void,
    /// CQ of receive completions.
    pub recv_cq: *mut c_void,
    /// Queue sizes.
    pub cap: ibv_qp_cap,
    /// Signal every send WR.
    pub sq_sig_all: c_int,
    /// The application's PD (its MRs are the ones WRITEs may target).
    pub pd: *mut ibv_pd,
    /// `enum ibv_qp_create_send_ops_flags` bits.
    pub send_ops_flags: u64,
    /// `enum mrc_protocol_version` (one bit or 0).
    pub protocol_version: u32,
}

/// `struct mrc_async_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcAsyncEvent {
    /// The union of `struct mrc_cq *`, `struct mrc_qp *` and `int port_num`.
    pub element: usize,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `f`; a panic sets `EIO` and returns `fail`.
fn guard<R>(fail: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        fail
    })
}

/// -1 with errno `e`.
fn minus(e: i32) -> c_int {
    set_errno(e);
    -1
}

/// The errno value itself (and errno set).
fn err(e: i32) -> c_int {
    set_errno(e);
    e
}

const IBV_WR_RDMA_WRITE: u32 = 0;
const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
const IBV_SEND_SIGNALED: u32 = 1 << 1;

fn device_attr() -> MrcDeviceAttr {
    MrcDeviceAttr {
        mrc_protocol_version: abi::PROTOCOL_VERSION_1,
        wimm_attr: abi::WimmAttr {
            max_wimm: limits::MAX_WIMM,
            max_wimm_dest: limits::MAX_WIMM,
        },
        mpr_attr: abi::MprAttr {
            max_mpr: limits::MAX_MPR,
            mpr_resolution: limits::MPR_RESOLUTION,
        },
        qp_attr: abi::DevQpAttr {
            max_qp_hint: limits::MAX_QP_HINT,
        },
        cap: abi::DEVICE_CAP_TRIM_NACK,
    }
}

unsafe fn query_device(
    vctx: *mut ibv_context,
    attr: *mut MrcDeviceAttr,
    supported: *mut c_int,
) -> c_int {
    if vctx.is_null() || attr.is_null() || supported.is_null() {
        return minus(libc::EINVAL);
    }
    // Supported when port 1 answers (any verbs device carries mrc's UD datapath).
    let ok = runtime::port_mtu(vctx, 1).is_ok();
    // SAFETY: non-null out-pointers from the caller.
    unsafe {
        *attr = device_attr();
        *supported = c_int::from(ok);
    }
    0
}

/// `mrc_query_device`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_query_device(
    context: *mut ibv_context,
    attr: *mut MrcDeviceAttr,
    supported: *mut c_int,
) -> c_int {
    // SAFETY: the C contract.
    guard(-1, || unsafe { query_device(context, attr, supported) })
}

/// `mrc_query_device_ex` (API 1.0.1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_query_device_ex(
    context: *mut ibv_context,
    _mcontext: *mut c_void,
    attr: *mut MrcDeviceAttr,
    supported: *mut c_int,
) -> c_int {
    // SAFETY: the C contract.
    guard(-1, || unsafe { query_device(context, attr, supported) })
}

/// `mrc_query_version`: null out-pointers are skipped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_query_version(
    current_version: *mut u32,
    last_supported_version: *mut u32,
    vendor_version: *mut u32,
    last_supported_vendor_version: *mut u32,
) {
    guard((), || {
        for (p, v) in [
            (current_version, abi::API_CURRENT_VERSION),
            (last_supported_version, abi::API_LAST_SUPPORTED_VERSION),
            (vendor_version, abi::VENDOR_API_CURRENT_VERSION),
            (
                last_supported_vendor_version,
                abi::VENDOR_API_LAST_SUPPORTED_VERSION,
            ),
        ] {
            if !p.is_null() {
                // SAFETY: non-null out-pointer from the caller.
                unsafe { *p = v };
            }
        }
    })
}

/// `mrc_create_context`: `EINVAL` for a null context or an API version outside
/// [last supported, current] (0 = not said). With `MRC_PLANE_DEVICES` set
/// ([`state::PLANE_DEVICES_ENV`]) the context spans one plane per device, `vcontext`'s
/// first: `ENODEV` for a name no verbs device has, `EINVAL` for an empty entry, a
/// device named twice or more than eight planes (the reason on stderr).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_create_context(
    vcontext: *mut ibv_context,
    attr: *mut MrcContextAttr,
) -> *mut c_void {
    guard(null_mut(), || {
        if vcontext.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the C contract.
        let a = if attr.is_null() {
            MrcContextAttr::default()
        } else {
            unsafe { *attr }
        };
        if a.mrc_api_version_used > abi::API_CURRENT_VERSION
            || a.mrc_vendor_api_version_used > abi::VENDOR_API_CURRENT_VERSION
        {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let planes = match std::env::var(state::PLANE_DEVICES_ENV) {
            Ok(spec) if !spec.trim().is_empty() => {
                let own = crate::runtime::device_name(vcontext).unwrap_or_default();
                match state::plane_devices(&own, &spec, &crate::runtime::verbs_device_names()) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("lib_mrc: {e}");
                        set_errno(e.errno());
                        return null_mut();
                    }
                }
            }
            _ => Vec::new(),
        };
        let c = Box::new(Context {
            planes,
            vctx: vcontext,
            api_version: if a.mrc_api_version_used == 0 {
                abi::API_CURRENT_VERSION
            } else {
                a.mrc_api_version_used
            },
            vendor_version: a.mrc_vendor_api_version_used,
            events: Mutex::new(VecDeque::new()),
            events_cv: Condvar::new(),
            children: AtomicUsize::new(0),
        });
        Box::into_raw(c).cast()
    })
}

/// `mrc_destroy_context`: `EBUSY` while channels, CQs, QPs or hints remain.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_destroy_context(ctx: *mut c_void) -> c_int {
    guard(-1, || {
        let c = ctx.cast::<Context>();
        if c.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        if unsafe { &*c }.children.load(Ordering::Acquire) != 0 {
            return minus(libc::EBUSY);
        }
        // SAFETY: ours, from mrc_create_context, freed once.
        drop(unsafe { Box::from_raw(c) });
        0
    })
}

/// `mrc_create_comp_channel`: -1 with errno on failure.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_create_comp_channel(
    ctx: *mut c_void,
    channel: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        let c = ctx.cast::<Context>().cast_const();
        if c.is_null() || channel.is_null() {
            return minus(libc::EINVAL);
        }
        match Channel::new(c) {
            Ok(ch) => {
                // SAFETY: live context.
                unsafe { &*c }.children.fetch_add(1, Ordering::AcqRel);
                // SAFETY: non-null out-pointer.
                unsafe { *channel = Box::into_raw(Box::new(ch)).cast() };
                0
            }
            Err(e) => minus(e),
        }
    })
}

/// `mrc_get_comp_channel_fd`: the descriptor `mrc_get_cq_event` reads (poll it, or set
/// it non-blocking).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_get_comp_channel_fd(channel: *mut c_void, fd: *mut c_int) -> c_int {
    guard(-1, || {
        let ch = channel.cast::<Channel>();
        if ch.is_null() || fd.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        unsafe { *fd = (*ch).rfd };
        0
    })
}

/// `mrc_destroy_comp_channel`: `EBUSY` while a CQ uses it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_destroy_comp_channel(channel: *mut c_void) -> c_int {
    guard(libc::EIO, || {
        let ch = channel.cast::<Channel>();
        if ch.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let r = unsafe { &*ch };
        if r.cqs.load(Ordering::Acquire) != 0 {
            return err(libc::EBUSY);
        }
        // SAFETY: the channel's context outlives it.
        unsafe { &*r.ctx }.children.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: ours, freed once.
        drop(unsafe { Box::from_raw(ch) });
        0
    })
}

/// `mrc_create_cq`: `EINVAL` for `cqe` above [`limits::MAX_CQE`]; below 1 it is 1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_create_cq(
    ctx: *mut c_void,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    _comp_vector: c_int,
) -> *mut c_void {
    guard(null_mut(), || {
        let c = ctx.cast::<Context>().cast_const();
        if c.is_null() || cqe > limits::MAX_CQE {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let ch = channel.cast::<Channel>().cast_const();
        if !ch.is_null() {
            // SAFETY: the C contract.
            unsafe { &*ch }.cqs.fetch_add(1, Ordering::AcqRel);
        }
        // SAFETY: live context.
        unsafe { &*c }.children.fetch_add(1, Ordering::AcqRel);
        let cq = Box::new(Cq {
            ctx: c,
            cqe: cqe.max(1) as usize,
            cq_context,
            channel: ch,
            q: Mutex::new(CqQueue {
                wcs: VecDeque::new(),
                armed: false,
                overflows: 0,
                events_got: 0,
                events_acked: 0,
            }),
            qps: AtomicUsize::new(0),
        });
        Box::into_raw(cq).cast()
    })
}

/// `mrc_poll_cq`: up to `num_entries` completions into `wc`; -1 with `EINVAL` for bad
/// arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_poll_cq(
    cq: *mut c_void,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    guard(-1, || {
        let cq = cq.cast::<Cq>();
        if cq.is_null() || num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let mut q = lock(&unsafe { &*cq }.q);
        let mut n = 0;
        while n < num_entries {
            let Some(w) = q.wcs.pop_front() else { break };
            // SAFETY: the caller's array of num_entries entries; plain data.
            unsafe {
                let out = &mut *wc.add(n as usize);
                *out = std::mem::zeroed();
                out.wr_id = w.wr_id;
                out.status = w.status;
                out.opcode = w.opcode;
                out.byte_len = w.byte_len;
                out.imm_data_invalidated_rkey_union.imm_data = w.imm;
                out.qp_num = w.qp_num;
                out.src_qp = w.src_qp;
                out.wc_flags = w.wc_flags as c_uint;
            }
            n += 1;
        }
        n
    })
}

/// `mrc_destroy_cq`: `EBUSY` while a QP uses it; waits for every CQ event to be acked.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_destroy_cq(cq: *mut c_void) -> c_int {
    guard(libc::EIO, || {
        let p = cq.cast::<Cq>();
        if p.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let r = unsafe { &*p };
        if r.qps.load(Ordering::Acquire) != 0 {
            return err(libc::EBUSY);
        }
        crate::ctl_ffi::forget_event_cq(p as usize);
        loop {
            let q = lock(&r.q);
            if q.events_acked >= q.events_got {
                break;
            }
            drop(q);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if !r.channel.is_null() {
            // SAFETY: the channel outlives its CQs.
            unsafe { &*r.channel }.cqs.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: the context outlives its CQs.
        unsafe { &*r.ctx }.children.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: ours, freed once.
        drop(unsafe { Box::from_raw(p) });
        0
    })
}

/// `mrc_req_notify_cq`: the next completion added to the CQ writes one event to its
/// channel. `EINVAL` for a CQ without a channel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_req_notify_cq(cq: *mut c_void, _solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        let p = cq.cast::<Cq>();
        if p.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let r = unsafe { &*p };
        if r.channel.is_null() {
            return err(libc::EINVAL);
        }
        lock(&r.q).armed = true;
        0
    })
}

/// `mrc_get_cq_event`: reads the channel (blocks unless its descriptor is
/// non-blocking: then -1 with `EAGAIN`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_get_cq_event(
    channel: *mut c_void,
    cq: *mut *mut c_void,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        let ch = channel.cast::<Channel>();
        if ch.is_null() || cq.is_null() || cq_context.is_null() {
            return minus(libc::EINVAL);
        }
        let mut b = [0u8; 8];
        // SAFETY: the channel's descriptor, 8 bytes into a local.
        let n = unsafe { libc::read((*ch).rfd, b.as_mut_ptr().cast(), 8) };
        if n != 8 {
            return minus(if n < 0 { runtime::errno() } else { libc::EIO });
        }
        let p = u64::from_ne_bytes(b) as usize as *mut Cq;
        // SAFETY: a CQ of this channel (it cannot be destroyed before its events are acked).
        unsafe {
            *cq = p.cast();
            *cq_context = (*p).cq_context;
        }
        0
    })
}

/// `mrc_ack_cq_events`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ack_cq_events(cq: *mut c_void, nevents: c_uint) {
    guard((), || {
        let p = cq.cast::<Cq>();
        if !p.is_null() {
            // SAFETY: the C contract.
            lock(&unsafe { &*p }.q).events_acked += u64::from(nevents);
        }
    })
}

fn check_hint(a: &MrcQpHintAttr, mask: u32) -> bool {
    mask & !hint_mask::ALL == 0
        && (mask & hint_mask::NUM_QPS_PER_PEER == 0 || a.num_qps_per_peer >= 0)
        && (mask & hint_mask::NUM_SEND_PEERS == 0 || a.num_send_peers >= 0)
        && (mask & hint_mask::NUM_REMOTE_RECV_PEERS == 0 || a.num_remote_recv_peers >= 0)
}

/// `mrc_create_qp_hint`: stored and reported (mrc sizes nothing by it yet).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_create_qp_hint(
    ctx: *mut c_void,
    init_attr: *mut MrcQpHintAttr,
) -> *mut c_void {
    guard(null_mut(), || {
        let c = ctx.cast::<Context>().cast_const();
        if c.is_null() || init_attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the C contract (struct mrc_qp_hint_init_attr is one mrc_qp_hint_attr).
        let a = unsafe { *init_attr };
        if !check_hint(&a, hint_mask::ALL) {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: live context.
        unsafe { &*c }.children.fetch_add(1, Ordering::AcqRel);
        Box::into_raw(Box::new(Hint {
            ctx: c,
            attr: Mutex::new(a),
            qps: AtomicUsize::new(0),
        }))
        .cast()
    })
}

/// `mrc_destroy_qp_hint`: -1 with `EBUSY` while a QP holds it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_destroy_qp_hint(hint: *mut c_void) -> c_int {
    guard(-1, || {
        let h = hint.cast::<Hint>();
        if h.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let r = unsafe { &*h };
        if r.qps.load(Ordering::Acquire) != 0 {
            return minus(libc::EBUSY);
        }
        // SAFETY: the hint's context outlives it.
        unsafe { &*r.ctx }.children.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: ours, freed once.
        drop(unsafe { Box::from_raw(h) });
        0
    })
}

/// `mrc_query_qp_hint`: the fields `mask` names.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_query_qp_hint(
    hint: *mut c_void,
    attr: *mut MrcQpHintAttr,
    mask: c_int,
) -> c_int {
    guard(-1, || {
        let h = hint.cast::<Hint>();
        let mask = mask as u32;
        if h.is_null() || attr.is_null() || mask & !hint_mask::ALL != 0 {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let (a, out) = (*lock(&unsafe { &*h }.attr), unsafe { &mut *attr });
        if mask & hint_mask::NUM_QPS_PER_PEER != 0 {
            out.num_qps_per_peer = a.num_qps_per_peer;
        }
        if mask & hint_mask::NUM_SEND_PEERS != 0 {
            out.num_send_peers = a.num_send_peers;
        }
        if mask & hint_mask::NUM_REMOTE_RECV_PEERS != 0 {
            out.num_remote_recv_peers = a.num_remote_recv_peers;
        }
        if mask & hint_mask::VENDOR_CFG != 0 {
            out.vendor_cfg = a.vendor_cfg;
        }
        0
    })
}

/// `mrc_modify_qp_hint`: the fields `mask` names (negative counts are `EINVAL`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_modify_qp_hint(
    hint: *mut c_void,
    attr: *mut MrcQpHintAttr,
    mask: c_int,
) -> c_int {
    guard(-1, || {
        let h = hint.cast::<Hint>();
        let mask = mask as u32;
        if h.is_null() || attr.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let a = unsafe { *attr };
        if !check_hint(&a, mask) {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let mut cur = lock(&unsafe { &*h }.attr);
        if mask & hint_mask::NUM_QPS_PER_PEER != 0 {
            cur.num_qps_per_peer = a.num_qps_per_peer;
        }
        if mask & hint_mask::NUM_SEND_PEERS != 0 {
            cur.num_send_peers = a.num_send_peers;
        }
        if mask & hint_mask::NUM_REMOTE_RECV_PEERS != 0 {
            cur.num_remote_recv_peers = a.num_remote_recv_peers;
        }
        if mask & hint_mask::VENDOR_CFG != 0 {
            cur.vendor_cfg = a.vendor_cfg;
        }
        0
    })
}

/// `mrc_create_qp`: `EINVAL` for missing CQs or PD, more than one SGE, queue sizes
/// above the limits, a protocol version other than 0 or 1, or send ops other than RDMA
/// WRITE (with immediate); other failures (device, memory) as `ENOMEM`/`EIO`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_create_qp(ctx: *mut c_void, attr: *mut MrcQpInitAttr) -> *mut c_void {
    guard(null_mut(), || {
        let c = ctx.cast::<Context>().cast_const();
        if c.is_null() || attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the C contract.
        let a = unsafe { *attr };
        // IBV_QP_EX_WITH_RDMA_WRITE (1 << 0) and IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM (1 << 1).
        let send_ops_ok = a.send_ops_flags & !3 == 0;
        if a.send_cq.is_null()
            || a.recv_cq.is_null()
            || a.pd.is_null()
            || a.cap.max_send_sge > limits::MAX_SGE
            || a.cap.max_recv_sge > limits::MAX_SGE
            || a.cap.max_send_wr > limits::MAX_SEND_WR
            || a.cap.max_recv_wr > limits::MAX_RECV_WR
            || a.protocol_version > abi::PROTOCOL_VERSION_1
            || !send_ops_ok
        {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let mut cap = a.cap;
        cap.max_send_wr = cap.max_send_wr.max(1);
        cap.max_recv_wr = cap.max_recv_wr.max(1);
        cap.max_send_sge = 1;
        cap.max_recv_sge = 1;
        cap.max_inline_data = 0;
        let init = InitCopy {
            cap,
            sq_sig_all: a.sq_sig_all,
            pd: a.pd,
            send_ops_flags: a.send_ops_flags,
            protocol_version: abi::PROTOCOL_VERSION_1,
        };
        let (scq, rcq) = (
            a.send_cq.cast::<Cq>().cast_const(),
            a.recv_cq.cast::<Cq>().cast_const(),
        );
        match Qp::create(c, a.pd, scq, rcq, init, a.qp_context) {
            Ok(qp) => {
                // SAFETY: live CQs and context.
                unsafe {
                    (*scq).qps.fetch_add(1, Ordering::AcqRel);
                    (*rcq).qps.fetch_add(1, Ordering::AcqRel);
                    (*c).children.fetch_add(1, Ordering::AcqRel);
                }
                // The QP reports its numbers as the application sees it.
                // SAFETY: the caller's attr, checked non-null above.
                unsafe { (*attr).cap = cap };
                Box::into_raw(qp).cast()
            }
            Err(e) => {
                eprintln!("lib_mrc: mrc_create_qp: {e}");
                set_errno(libc::ENOMEM);
                null_mut()
            }
        }
    })
}

/// `mrc_destroy_qp`: stops the QP's progress thread and frees everything it holds;
/// outstanding work is dropped without completions (as `ibv_destroy_qp`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_destroy_qp(qp: *mut c_void) -> c_int {
    guard(libc::EIO, || {
        let p = qp.cast::<Qp>();
        if p.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: ours, freed once.
        let q = unsafe { Box::from_raw(p) };
        let (hint, held) = {
            let g = lock(&q.shared.inner);
            (g.hint, (g.settings.ev_profile_id, g.settings.cc_profile_id))
        };
        let (scq, rcq, c) = (q.send_cq, q.recv_cq, q.ctx);
        drop(q);
        lock(crate::ctl::registry()).hold(held.0, held.1, false);
        // SAFETY: they outlive the QP.
        unsafe {
            if !hint.is_null() {
                (*hint).qps.fetch_sub(1, Ordering::AcqRel);
            }
            (*scq).qps.fetch_sub(1, Ordering::AcqRel);
            (*rcq).qps.fetch_sub(1, Ordering::AcqRel);
            (*c).children.fetch_sub(1, Ordering::AcqRel);
        }
        0
    })
}

/// `mrc_get_qpn`: the number the peer passes as `dest_qp_num` (the first UD QP of this
/// QP's datapath).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_get_qpn(qp: *mut c_void, qpn: *mut u32) -> c_int {
    guard(-1, || {
        let p = qp.cast::<Qp>();
        if p.is_null() || qpn.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        unsafe { *qpn = (*p).qpn };
        0
    })
}

fn settings_of(a: &MrcQpAttr) -> state::MrcSettings {
    state::MrcSettings {
        mpr: a.mpr.mpr,
        mpr_dest: a.mpr.mpr_dest,
        max_wimm: a.wimm.max_wimm,
        max_wimm_dest: a.wimm.max_wimm_dest,
        timeout: a.timeout,
        linear_cnt: a.retry.linear_cnt,
        exp_cnt: a.retry.exp_cnt,
        ev_profile_id: a.profile.ev_profile_id,
        cc_profile_id: a.profile.cc_profile_id,
        cap: a.cap,
    }
}

/// `mrc_modify_qp`: see [`crate::state`] for the transitions and attributes; returns
/// the errno value (`EINVAL`, `EOPNOTSUPP`, or what the rendezvous set-up met).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_modify_qp(
    qp: *mut c_void,
    vattr: *mut ibv_qp_attr,
    vattr_mask: c_int,
    mrc_attr: *mut MrcQpAttr,
    mrc_attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        let p = qp.cast::<Qp>();
        let (vmask, mmask) = (vattr_mask as u32, mrc_attr_mask as u32);
        if p.is_null() || (vattr.is_null() && vmask != 0) || (mrc_attr.is_null() && mmask != 0) {
            return err(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let q = unsafe { &*p };
        // SAFETY: plain data.
        let v: ibv_qp_attr = if vattr.is_null() {
            unsafe { std::mem::zeroed() }
        } else {
            unsafe { std::ptr::read(vattr) }
        };
        let m = if mrc_attr.is_null() {
            MrcQpAttr::default()
        } else {
            unsafe { *mrc_attr }
        };
        let mut g = lock(&q.shared.inner);
        let req = ModifyRequest {
            ibv_mask: vmask,
            qp_state: v.qp_state,
            cur_qp_state: v.cur_qp_state,
            mrc_mask: mmask,
            attr: settings_of(&m),
        };
        // SAFETY: the context outlives the QP.
        let vctx = unsafe { &*q.ctx }.vctx;
        if mmask & (attr_mask::EV_PROFILE_ID | attr_mask::CC_PROFILE_ID) != 0 {
            // Profiles named: the node's tables of this QP's device.
            let bound = lock(crate::ctl::registry()).bind(runtime::device_name(vctx).as_deref());
            if let Err(e) = bound {
                return err(e);
            }
        }
        let out = match state::check_modify(g.state, g.settings, &req) {
            Ok(o) => o,
            Err(e) => return err(e),
        };
        let from = g.state;
        match (from, out.state) {
            (_, QpState::Err) => {
                g.fail();
                return 0;
            }
            (_, QpState::Reset) => g.reset(),
            (QpState::Rts, QpState::Rts)
                if mmask & (attr_mask::TIMEOUT | attr_mask::RETRY_CNT) != 0 =>
            {
                // The give-up budget is fixed when the transport QP is made (at RTS).
                return err(libc::EINVAL);
            }
            (_, QpState::Init) => {
                if vmask & ibv_mask::PKEY_INDEX != 0 {
                    g.vattr.pkey_index = v.pkey_index;
                }
                if vmask & ibv_mask::ACCESS_FLAGS != 0 {
                    g.vattr.qp_access_flags = v.qp_access_flags;
                }
                if vmask & ibv_mask::PORT != 0 {
                    g.vattr.port_num = v.port_num;
                }
                if mmask & attr_mask::HINT != 0 {
                    let h = m.qp_hint.cast::<Hint>().cast_const();
                    if !g.hint.is_null() {
                        // SAFETY: a hint outlives the QPs holding it.
                        unsafe { &*g.hint }.qps.fetch_sub(1, Ordering::AcqRel);
                    }
                    if !h.is_null() {
                        // SAFETY: the C contract.
                        unsafe { &*h }.qps.fetch_add(1, Ordering::AcqRel);
                    }
                    g.hint = h;
                }
            }
            (QpState::Init, QpState::Rtr) => {
                // SAFETY: every bit pattern is a valid [u8; 16].
                let dgid = std::net::Ipv6Addr::from(unsafe { v.ah_attr.grh.dgid.raw });
                let port = if v.ah_attr.port_num != 0 {
                    v.ah_attr.port_num
                } else {
                    g.vattr.port_num.max(1)
                };
                let sgid = runtime::query_gid(vctx, port, v.ah_attr.grh.sgid_index);
                if let Err(e) = g.set_peer(dgid, v.dest_qp_num, sgid) {
                    return err(e);
                }
                g.vattr.ah_attr = v.ah_attr;
                g.vattr.dest_qp_num = v.dest_qp_num & 0xff_ffff;
                if vmask & ibv_mask::PATH_MTU != 0 {
                    g.vattr.path_mtu = v.path_mtu;
                }
                if vmask & ibv_mask::RQ_PSN != 0 {
                    g.vattr.rq_psn = v.rq_psn;
                }
            }
            (QpState::Rtr, QpState::Rts) => {
                if vmask & ibv_mask::SQ_PSN != 0 {
                    g.vattr.sq_psn = v.sq_psn;
                }
                g.settings = out.settings;
                let mtu = state::ibv_mtu_bytes(g.vattr.path_mtu);
                if let Err(e) = g.start(mtu) {
                    return err(e);
                }
            }
            _ => {}
        }
        if (g.settings.ev_profile_id, g.settings.cc_profile_id)
            != (out.settings.ev_profile_id, out.settings.cc_profile_id)
        {
            // The QP holds the profiles it names (they cannot go OFFLINE under it).
            let mut r = lock(crate::ctl::registry());
            r.hold(g.settings.ev_profile_id, g.settings.cc_profile_id, false);
            r.hold(out.settings.ev_profile_id, out.settings.cc_profile_id, true);
        }
        g.settings = out.settings;
        g.set_state(out.state);
        if vmask & ibv_mask::ACCESS_FLAGS != 0 {
            g.vattr.qp_access_flags = v.qp_access_flags;
        }
        0
    })
}

/// `mrc_query_qp`: every field (the masks are accepted, as libibverbs providers fill
/// more than asked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_query_qp(
    qp: *mut c_void,
    vattr: *mut ibv_qp_attr,
    _vattr_mask: c_int,
    mrc_attr: *mut MrcQpAttr,
    _mrc_attr_mask: c_int,
    init_attr: *mut MrcQpInitAttr,
) -> c_int {
    guard(libc::EIO, || {
        let p = qp.cast::<Qp>();
        if p.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let q = unsafe { &*p };
        let g = lock(&q.shared.inner);
        if !vattr.is_null() {
            // SAFETY: plain data, copied bitwise.
            let mut v = unsafe { std::ptr::read(&g.vattr) };
            v.qp_state = g.state.to_ibv();
            v.cur_qp_state = g.state.to_ibv();
            v.cap = q.init.cap;
            v.timeout = g.settings.timeout;
            v.retry_cnt = g.settings.linear_cnt;
            // SAFETY: non-null out-pointer.
            unsafe { *vattr = v };
        }
        if !mrc_attr.is_null() {
            let s = g.settings;
            let mut a = MrcQpAttr::default();
            a.mpr.mpr = s.mpr;
            a.mpr.mpr_dest = s.mpr_dest;
            a.wimm.max_wimm = s.max_wimm;
            a.wimm.max_wimm_dest = s.max_wimm_dest;
            a.timeout = s.timeout;
            a.profile.ev_profile_id = s.ev_profile_id;
            a.profile.cc_profile_id = s.cc_profile_id;
            a.retry.linear_cnt = s.linear_cnt;
            a.retry.exp_cnt = s.exp_cnt;
            a.qp_hint = g.hint.cast_mut().cast();
            a.cap = s.cap;
            // SAFETY: non-null out-pointer.
            unsafe { *mrc_attr = a };
        }
        if !init_attr.is_null() {
            // SAFETY: non-null out-pointer.
            unsafe {
                *init_attr = MrcQpInitAttr {
                    qp_context: q.qp_context,
                    send_cq: q.send_cq.cast_mut().cast(),
                    recv_cq: q.recv_cq.cast_mut().cast(),
                    cap: q.init.cap,
                    sq_sig_all: q.init.sq_sig_all,
                    pd: q.init.pd,
                    send_ops_flags: q.init.send_ops_flags,
                    protocol_version: q.init.protocol_version,
                }
            };
        }
        0
    })
}

/// `mrc_post_send`: RDMA WRITE and RDMA WRITE with immediate; any other opcode, more
/// than one SGE or a null SGE list with `num_sge` 1 is `EINVAL`; a full send queue is
/// `ENOMEM`; a QP not in RTS is `EINVAL` (in ERR the WRs complete flushed); a list whose
/// `next` pointers loop back is `EINVAL` with nothing posted. `*bad_wr` names the first WR
/// not posted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_post_send(
    qp: *mut c_void,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard(libc::EIO, || {
        let p = qp.cast::<Qp>();
        if p.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let q = unsafe { &*p };
        let g = &q.shared.public;
        // SAFETY: the caller's WR list.
        if unsafe {
            crate::wrlist::is_circular(
                wr.cast_const(),
                &|w: &ibv_send_wr| w.next.cast_const(),
                g.max_send_wr as usize + 1,
            )
        } {
            if !bad_wr.is_null() {
                // SAFETY: non-null out-pointer.
                unsafe { *bad_wr = wr };
            }
            return err(libc::EINVAL);
        }
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: the caller's WR list.
            let w = unsafe { &*cur };
            let fail = |e: i32| {
                if !bad_wr.is_null() {
                    // SAFETY: non-null out-pointer.
                    unsafe { *bad_wr = cur };
                }
                err(e)
            };
            let imm = match w.opcode {
                IBV_WR_RDMA_WRITE => None,
                // SAFETY: the union's immediate member for this opcode.
                IBV_WR_RDMA_WRITE_WITH_IMM => {
                    Some(unsafe { w.imm_data_invalidated_rkey_union.imm_data })
                }
                _ => return fail(libc::EINVAL),
            };
            let (addr, len, lkey) = match w.num_sge {
                0 => (0, 0, 0),
                1 if !w.sg_list.is_null() => {
                    // SAFETY: one SGE.
                    let s = unsafe { *w.sg_list };
                    if s.length > 0 && s.addr == 0 {
                        return fail(libc::EINVAL);
                    }
                    (s.addr, s.length, s.lkey)
                }
                _ => return fail(libc::EINVAL),
            };
            // SAFETY: the rdma member for WRITE opcodes.
            let r = unsafe { w.wr.rdma };
            let pw = PendingWr {
                wr_id: w.wr_id,
                signaled: w.send_flags & IBV_SEND_SIGNALED != 0,
                addr,
                len,
                remote_addr: r.remote_addr,
                rkey: r.rkey,
                imm,
                sent: 0,
                seq: 0,
                lkey,
                lkey_ok: None,
                check_id: 0,
            };
            if let Err(e) = g.post_write(pw) {
                return fail(e);
            }
            cur = w.next;
        }
        0
    })
}

/// `mrc_post_recv`: receives for WRITE_WITH_IMM immediates (the buffer is not written:
/// the data goes where the WRITE names); more than one SGE is `EINVAL`, more than
/// `max_recv_wr` posted is `ENOMEM`, RESET is `EINVAL`, a list whose `next` pointers
/// loop back is `EINVAL` with nothing posted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_post_recv(
    qp: *mut c_void,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard(libc::EIO, || {
        let p = qp.cast::<Qp>();
        if p.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let q = unsafe { &*p };
        let g = &q.shared.public;
        // SAFETY: the caller's WR list.
        if unsafe {
            crate::wrlist::is_circular(
                wr.cast_const(),
                &|w: &ibv_recv_wr| w.next.cast_const(),
                g.max_recv_wr as usize + 1,
            )
        } {
            if !bad_wr.is_null() {
                // SAFETY: non-null out-pointer.
                unsafe { *bad_wr = wr };
            }
            return err(libc::EINVAL);
        }
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: the caller's WR list.
            let w = unsafe { &*cur };
            let r = if w.num_sge < 0 || w.num_sge > limits::MAX_SGE as c_int {
                Err(libc::EINVAL)
            } else {
                g.post_recv(w.wr_id)
            };
            if let Err(e) = r {
                if !bad_wr.is_null() {
                    // SAFETY: non-null out-pointer.
                    unsafe { *bad_wr = cur };
                }
                return err(e);
            }
            cur = w.next;
        }
        0
    })
}

/// `mrc_get_async_event`: blocks until an event: `IBV_EVENT_COMM_EST` (rendezvous done),
/// `IBV_EVENT_QP_FATAL` (rendezvous failed), `IBV_EVENT_QP_ACCESS_ERR` (the device
/// refused to place a WRITE), `IBV_EVENT_CQ_ERR` (CQ overrun).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_get_async_event(ctx: *mut c_void, event: *mut MrcAsyncEvent) -> c_int {
    guard(-1, || {
        let c = ctx.cast::<Context>();
        if c.is_null() || event.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let r = unsafe { &*c };
        let mut q = lock(&r.events);
        let e: AsyncEvent = loop {
            if let Some(e) = q.pop_front() {
                break e;
            }
            q = r.events_cv.wait(q).unwrap_or_else(|p| p.into_inner());
        };
        // SAFETY: non-null out-pointer.
        unsafe {
            *event = MrcAsyncEvent {
                element: e.element,
                event_type: e.event_type,
            }
        };
        0
    })
}

/// `mrc_ack_async_event`: nothing to release (events are copied out).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ack_async_event(_event: *mut MrcAsyncEvent) {}

/// The transport view of an `mrc_qp` (for `mrcx.h`'s `mrc_x_qp_transport` and
/// `mrc_x_qp_evs`): `EINVAL` for NULL, `ENOTCONN` before the rendezvous connected it.
///
/// # Safety
/// `qp` is NULL or a live `mrc_qp` of this library.
pub(crate) unsafe fn qp_transport_view(
    qp: *mut c_void,
) -> Result<crate::ext::TransportView, c_int> {
    let p = qp.cast::<Qp>();
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the C contract.
    let q = unsafe { &*p };
    lock(&q.shared.inner).transport_view().ok_or(libc::ENOTCONN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn ibv_dependent_layouts() {
        assert_eq!(size_of::<MrcQpInitAttr>(), 72);
        assert_eq!(offset_of!(MrcQpInitAttr, cap), 24);
        assert_eq!(offset_of!(MrcQpInitAttr, sq_sig_all), 44);
        assert_eq!(offset_of!(MrcQpInitAttr, pd), 48);
        assert_eq!(offset_of!(MrcQpInitAttr, send_ops_flags), 56);
        assert_eq!(offset_of!(MrcQpInitAttr, protocol_version), 64);
        assert_eq!(size_of::<MrcAsyncEvent>(), 16);
    }

    #[test]
    fn version_and_null_arguments_need_no_device() {
        let (mut a, mut b, mut c, mut d) = (0u32, 1u32, 0u32, 1u32);
        // SAFETY: live out-pointers.
        unsafe { mrc_query_version(&mut a, &mut b, &mut c, &mut d) };
        assert_eq!((a, b, c, d), (0x0100_0001, 0, 0x0100_0000, 0));
        let mut attr = MrcDeviceAttr::default();
        let mut sup = 7;
        // SAFETY: null context: refused before any use.
        assert_eq!(
            unsafe { mrc_query_device(null_mut(), &mut attr, &mut sup) },
            -1
        );
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
        assert_eq!(sup, 7);
        // SAFETY: null handles are refused.
        unsafe {
            assert!(mrc_create_context(null_mut(), null_mut()).is_null());
            assert_eq!(mrc_destroy_context(null_mut()), -1);
            assert_eq!(
                mrc_post_send(null_mut(), null_mut(), null_mut()),
                libc::EINVAL
            );
            assert_eq!(
                mrc_post_recv(null_mut(), null_mut(), null_mut()),
                libc::EINVAL
            );
            assert_eq!(
                mrc_modify_qp(null_mut(), null_mut(), 0, null_mut(), 0),
                libc::EINVAL
            );
            assert_eq!(mrc_poll_cq(null_mut(), 1, null_mut()), -1);
            assert_eq!(mrc_get_qpn(null_mut(), null_mut()), -1);
        }
    }

    #[test]
    fn context_cq_channel_and_hint_without_a_device() {
        // A context needs only a non-null ibv_context pointer until a QP is created; a
        // fake one is never dereferenced by these calls.
        let mut fake = 0u64;
        let vctx = (&mut fake as *mut u64).cast::<ibv_context>();
        // SAFETY: the calls below do not touch the ibv_context.
        unsafe {
            let mut too_new = MrcContextAttr {
                mrc_api_version_used: abi::api_ver(1, 0, 2),
                mrc_vendor_api_version_used: 0,
            };
            assert!(mrc_create_context(vctx, &mut too_new).is_null());
            let ctx = mrc_create_context(vctx, null_mut());
            assert!(!ctx.is_null());
            let mut ch = null_mut();
            assert_eq!(mrc_create_comp_channel(ctx, &mut ch), 0);
            let mut fd = -1;
            assert_eq!(mrc_get_comp_channel_fd(ch, &mut fd), 0);
            assert!(fd >= 0);
            let cq = mrc_create_cq(ctx, 4, 0x1234 as *mut c_void, ch, 0);
            assert!(!cq.is_null());
            assert!(mrc_create_cq(ctx, limits::MAX_CQE + 1, null_mut(), null_mut(), 0).is_null());
            // Busy while children remain.
            assert_eq!(mrc_destroy_context(ctx), -1);
            assert_eq!(mrc_destroy_comp_channel(ch), libc::EBUSY);
            // Armed: the next completion writes an event.
            assert_eq!(mrc_req_notify_cq(cq, 0), 0);
            let r = &*cq.cast::<Cq>();
            let wc = runtime::Wc {
                wr_id: 9,
                status: 0,
                opcode: 1,
                byte_len: 3,
                imm: 0,
                qp_num: 1,
                src_qp: 2,
                wc_flags: 0,
            };
            for _ in 0..5 {
                r.push(wc);
            }
            let (mut got_cq, mut got_ctx) = (null_mut(), null_mut());
            assert_eq!(mrc_get_cq_event(ch, &mut got_cq, &mut got_ctx), 0);
            assert_eq!((got_cq, got_ctx), (cq, 0x1234 as *mut c_void));
            mrc_ack_cq_events(cq, 1);
            let mut out: [ibv_wc; 8] = std::mem::zeroed();
            // 4 entries fit; the fifth overran the CQ (and raised IBV_EVENT_CQ_ERR).
            assert_eq!(mrc_poll_cq(cq, 8, out.as_mut_ptr()), 4);
            assert_eq!((out[0].wr_id, out[0].byte_len, out[3].wr_id), (9, 3, 9));
            assert_eq!(mrc_poll_cq(cq, 8, out.as_mut_ptr()), 0);
            let mut ev = MrcAsyncEvent {
                element: 0,
                event_type: 99,
            };
            assert_eq!(mrc_get_async_event(ctx, &mut ev), 0);
            assert_eq!(
                (ev.element, ev.event_type),
                (cq as usize, runtime::event::CQ_ERR)
            );
            mrc_ack_async_event(&mut ev);
            // Hints.
            let mut h = MrcQpHintAttr {
                num_qps_per_peer: 2,
                num_send_peers: 8,
                num_remote_recv_peers: 3,
                ..MrcQpHintAttr::default()
            };
            let hint = mrc_create_qp_hint(ctx, &mut h);
            assert!(!hint.is_null());
            let mut upd = MrcQpHintAttr {
                num_send_peers: 16,
                ..MrcQpHintAttr::default()
            };
            assert_eq!(
                mrc_modify_qp_hint(hint, &mut upd, hint_mask::NUM_SEND_PEERS as c_int),
                0
            );
            upd.num_send_peers = -1;
            assert_eq!(
                mrc_modify_qp_hint(hint, &mut upd, hint_mask::NUM_SEND_PEERS as c_int),
                -1
            );
            let mut q = MrcQpHintAttr::default();
            assert_eq!(mrc_query_qp_hint(hint, &mut q, hint_mask::ALL as c_int), 0);
            assert_eq!(
                (
                    q.num_qps_per_peer,
                    q.num_send_peers,
                    q.num_remote_recv_peers
                ),
                (2, 16, 3)
            );
            assert_eq!(mrc_destroy_qp_hint(hint), 0);
            assert_eq!(mrc_destroy_cq(cq), 0);
            assert_eq!(mrc_destroy_comp_channel(ch), 0);
            assert_eq!(mrc_destroy_context(ctx), 0);
        }
    }
}
