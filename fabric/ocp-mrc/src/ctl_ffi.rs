//! The exported C functions of `mrc_ctl.h` (feature `verbs`): the `#[repr(C)]` structs of
//! the controller API and the calls, which copy them in and out of [`crate::ctl`]'s
//! registry. Errors as `mrc_ctl.h` documents them: `-1` with `errno`, except
//! `mrc_ctl_poll_ev_event` (a negative errno) and `mrc_ctl_create_ev_event_cq` (NULL with
//! errno).
//!
//! # Safety
//! The C contract, as in [`crate::ffi`]: every non-null pointer names a live object of its
//! type, arrays hold the counts passed with them.
#![allow(clippy::missing_safety_doc)]

use crate::ctl::{
    self, CcModify, Ev, EvField, EvModify, EvOpEntry, FmtModify, NsccCfg, Registry, mask,
};
use crate::runtime::{Context, Cq, lock};
use rdma_sys::{ibv_context, ibv_gid};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;

/// `struct mrc_ctl_ev`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcCtlEv {
    /// `mrc_ctl_ev_t`.
    pub val: [u8; ctl::EV_MAX_BYTES],
    /// Port (1-based).
    pub port: u8,
}

/// The `ev` part of `struct mrc_ctl_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcCtlDevEvAttr {
    /// EV format profiles.
    pub ev_max_fmt_profiles: u32,
    /// EV profiles.
    pub ev_max_profiles: u32,
    /// EVs over all profiles.
    pub ev_max_count: u32,
    /// EVs not in use.
    pub ev_free_count: u32,
    /// EVs of one profile.
    pub ev_max_count_profile: u32,
    /// Explicit array length alignment.
    pub ev_count_align: u32,
    /// Valid bits of an EV.
    pub ev_max_width: u32,
    /// `enum mrc_ctl_ev_fmt_mode` bits.
    pub ev_fmt_mode_mask: u32,
    /// `enum mrc_ctl_ev_mode` bits.
    pub ev_mode_mask: u32,
    /// Entries of one EV_OP batch (0: no cap).
    pub ev_op_max_entries: u32,
}

/// The `cc` part of `struct mrc_ctl_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlDevCcAttr {
    /// CC profiles.
    pub cc_max_profiles: u32,
    /// NULL-terminated algorithm names (the library's).
    pub algorithms: *const *const c_char,
}

/// `struct mrc_ctl_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlDeviceAttr {
    /// `enum mrc_ctl_protocol_version` bits.
    pub mrc_ctl_protocol_version: u32,
    /// EV limits.
    pub ev: MrcCtlDevEvAttr,
    /// CC limits.
    pub cc: MrcCtlDevCcAttr,
    /// Ports (bit N: port N).
    pub phy_port_mask: u32,
    /// `enum mrc_ctl_attr_opt` bits.
    pub opt_attr: u32,
}

/// `struct mrc_ctl_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcCtlPortAttr {
    /// `enum mrc_ctl_port_admin_state`.
    pub port_admin_state: u32,
}

/// `struct mrc_ctl_ev_fmt_field`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcCtlEvFmtField {
    /// Width, bits.
    pub width: u8,
}

/// The `ev_fmt_op` part of `struct mrc_ctl_ev_fmt_profile_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlEvFmtOp {
    /// `enum mrc_ctl_ev_fmt_op`.
    pub op: u32,
    /// The fields.
    pub fmt_fields: *mut MrcCtlEvFmtField,
    /// Their count (in/out).
    pub fmt_field_count: c_int,
}

/// `struct mrc_ctl_ev_fmt_profile_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlEvFmtProfileAttr {
    /// Target state.
    pub profile_state: u32,
    /// State now.
    pub cur_profile_state: u32,
    /// `enum mrc_ctl_ev_fmt_mode`.
    pub ev_fmt_mode: u32,
    /// Field operation.
    pub ev_fmt_op: MrcCtlEvFmtOp,
    /// Vendor configuration (accepted, not interpreted).
    pub vendor_cfg: [u8; 128],
}

/// `struct mrc_ctl_ev_field`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcCtlEvField {
    /// Width, bits.
    pub width: u32,
    /// Initial value.
    pub init_val: u32,
    /// Smallest generated value.
    pub min_val: u32,
    /// Largest generated value.
    pub max_val: u32,
    /// Where the EV's bits go.
    pub mask: u32,
}

/// `struct mrc_ctl_ev_op_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcCtlEvOpEntry {
    /// Subject.
    pub ev: MrcCtlEv,
    /// Replacement.
    pub ev_new: MrcCtlEv,
    /// `enum mrc_ctl_ev_state`.
    pub state: u32,
    /// `enum mrc_ctl_ev_op_flags`.
    pub flags: u32,
}

/// The `ev_op` part of `struct mrc_ctl_ev_profile_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlEvOp {
    /// `enum mrc_ctl_ev_op`.
    pub op: u32,
    /// Entries.
    pub entries: *mut MrcCtlEvOpEntry,
    /// Their count (in/out).
    pub entry_count: c_int,
}

/// The `ev_fields_op` part of `struct mrc_ctl_ev_profile_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlEvFieldsOp {
    /// `enum mrc_ctl_ev_fields_op`.
    pub op: u32,
    /// Fields.
    pub fields: *mut MrcCtlEvField,
    /// Their count (in/out).
    pub field_count: c_int,
}

/// `struct mrc_ctl_ev_profile_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlEvProfileAttr {
    /// Target state.
    pub profile_state: u32,
    /// State now.
    pub cur_profile_state: u32,
    /// `enum mrc_ctl_ev_mode`.
    pub ev_mode: u32,
    /// Format profile.
    pub ev_fmt_profile_id: u64,
    /// EVs.
    pub ev_count: u32,
    /// Least active.
    pub ev_min_active: u32,
    /// Event mask.
    pub ev_event_mask: c_int,
    /// EV operation.
    pub ev_op: MrcCtlEvOp,
    /// Field operation.
    pub ev_fields_op: MrcCtlEvFieldsOp,
    /// Vendor configuration (accepted, not interpreted).
    pub vendor_cfg: [u8; 128],
}

/// `struct mrc_ctl_cc_profile_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MrcCtlCcProfileAttr {
    /// Target state.
    pub profile_state: u32,
    /// State now.
    pub cur_profile_state: u32,
    /// Algorithm name, or NULL for no CC.
    pub algorithm: *const c_char,
    /// `struct mrc_ctl_cc_nscc_cfg` for NSCC.
    pub cc_config: *const c_void,
    /// Vendor configuration (accepted, not interpreted).
    pub vendor_cfg: [u8; 128],
}

/// `struct mrc_ctl_cc_nscc_cfg`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MrcCtlCcNsccCfg {
    /// Quick adapt off when non-zero.
    pub disable_qa: u8,
    /// Bytes.
    pub adjust_bytes_threshold: u32,
    /// ns.
    pub adjust_period_threshold: u32,
    /// ns.
    pub base_rtt: u32,
    /// `eta`.
    pub eta: f32,
    /// `fi`.
    pub fi: f32,
    /// `fi_scale`.
    pub fi_scale: f32,
    /// `gamma`.
    pub gamma: f32,
    /// `max_md_jump`.
    pub max_md_jump: f32,
    /// Bytes.
    pub max_cwnd: u32,
    /// Quick-adapt gate.
    pub qa_gate: u8,
    /// ns.
    pub qa_threshold: u32,
    /// ns.
    pub target_delay: u32,
}

/// `struct mrc_ctl_ev_event` (API 1.0.1, with `state`; a context of an older API gets
/// entries of [`EV_EVENT_BYTES_1_0_0`] bytes, without it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcCtlEvEvent {
    /// Profile.
    pub profile_id: u64,
    /// EV.
    pub ev: MrcCtlEv,
    /// Events lost before this one.
    pub drop_count: u32,
    /// New state.
    pub state: u32,
}

/// Size of `struct mrc_ctl_ev_event` for a program of API 1.0.0 (no `state`).
pub const EV_EVENT_BYTES_1_0_0: usize = 48;

/// `struct mrc_ctl_ep_req`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MrcCtlEpReq {
    /// Request id.
    pub req_id: u16,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
    /// `enum mrc_ctl_ev_fmt_mode`.
    pub ev_fmt_mode: u32,
    /// EV and port.
    pub req_ev: MrcCtlEv,
    /// `op.port_status_update.port_status`.
    pub port_status: u32,
}

/// `struct mrc_ctl_ep_rsp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MrcCtlEpRsp {
    /// Request id.
    pub req_id: u16,
    /// Port.
    pub port: u8,
    /// RTT, ns.
    pub rtt: u32,
    /// RTT adjusted for service time.
    pub adj_svc_time: u8,
}

fn set_errno(e: i32) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with errno `e`.
fn minus(e: i32) -> c_int {
    set_errno(e);
    -1
}

fn guard<R>(fail: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        fail
    })
}

fn done(r: Result<(), i32>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => minus(e),
    }
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    lock(ctl::registry())
}

/// The registry, bound to the store of `vctx`'s device (a context without a device:
/// the process's own tables) and brought up to it.
fn tables_of(vctx: *mut ibv_context) -> Result<std::sync::MutexGuard<'static, Registry>, i32> {
    let mut g = registry();
    g.bind(crate::runtime::device_name(vctx).as_deref())?;
    g.refresh()?;
    Ok(g)
}

/// [`tables_of`] for an `mrc_context`.
fn tables(ctx: *mut c_void) -> Result<std::sync::MutexGuard<'static, Registry>, i32> {
    // SAFETY: the C contract: a live mrc_context (checked non-null by the callers).
    tables_of(unsafe { &*ctx.cast::<Context>() }.vctx)
}

/// Wakes the armed EV event CQs that hold events (called with the registry locked, so
/// none is destroyed meanwhile: `mrc_destroy_cq` takes it out under the same lock).
pub(crate) fn wake_event_cqs(r: &Registry) {
    for (cq, q) in &r.event_cqs {
        if !q.events.is_empty() {
            // SAFETY: a live CQ (see above).
            unsafe { &*(*cq as *const Cq) }.wake();
        }
    }
}

/// Takes `cq` out of the EV event CQs (from `mrc_destroy_cq`).
pub(crate) fn forget_event_cq(cq: usize) {
    registry().event_cqs.retain(|(c, _)| *c != cq);
}

fn ev_in(e: &MrcCtlEv) -> Ev {
    Ev {
        val: e.val,
        port: e.port,
    }
}

fn ev_out(e: &Ev) -> MrcCtlEv {
    MrcCtlEv {
        val: e.val,
        port: e.port,
    }
}

struct Algorithms([*const c_char; 2]);
// SAFETY: pointers to 'static string literals, never written.
unsafe impl Sync for Algorithms {}
static ALGORITHMS: Algorithms = Algorithms([c"uet-1.0-nscc".as_ptr(), std::ptr::null()]);

/// Ports of `ctx` (an `mrc_context`): one per plane.
fn ports_of(ctx: *mut c_void) -> u8 {
    // SAFETY: the C contract: a live mrc_context (checked non-null by the callers).
    unsafe { &*ctx.cast::<Context>() }.plane_count() as u8
}

/// Ports a context on `vctx` would have now: one per plane of `MRC_PLANE_DEVICES` (one
/// when it is unset or would be refused).
fn env_ports(vctx: *mut ibv_context) -> u8 {
    match std::env::var(crate::state::PLANE_DEVICES_ENV) {
        Ok(spec) if !spec.trim().is_empty() => {
            let own = crate::runtime::device_name(vctx).unwrap_or_default();
            crate::state::plane_devices(&own, &spec, &crate::runtime::verbs_device_names())
                .map_or(1, |p| 1 + p.len() as u8)
        }
        _ => 1,
    }
}

/// The controller attributes of a device whose contexts have `ports` ports (planes).
fn device_attr(vctx: *mut ibv_context, ports: u8) -> Result<MrcCtlDeviceAttr, i32> {
    let free = tables_of(vctx)?.ev_free_count();
    Ok(MrcCtlDeviceAttr {
        mrc_ctl_protocol_version: 1,
        ev: MrcCtlDevEvAttr {
            ev_max_fmt_profiles: ctl::limits::MAX_FMT_PROFILES,
            ev_max_profiles: ctl::limits::MAX_EV_PROFILES,
            ev_max_count: ctl::limits::MAX_EV_COUNT,
            ev_free_count: free,
            ev_max_count_profile: ctl::limits::MAX_EV_COUNT_PROFILE,
            ev_count_align: ctl::limits::EV_COUNT_ALIGN,
            ev_max_width: ctl::limits::EV_MAX_WIDTH,
            ev_fmt_mode_mask: ctl::fmt_mode::ALL,
            ev_mode_mask: ctl::ev_mode::ALL,
            ev_op_max_entries: 0,
        },
        cc: MrcCtlDevCcAttr {
            cc_max_profiles: ctl::limits::MAX_CC_PROFILES,
            algorithms: ALGORITHMS.0.as_ptr(),
        },
        phy_port_mask: ctl::phy_port_mask(ports),
        opt_attr: ctl::limits::OPT,
    })
}

/// `mrc_ctl_query_version`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_query_version(
    current: *mut u32,
    last: *mut u32,
    vendor: *mut u32,
    last_vendor: *mut u32,
) {
    guard((), || {
        for (p, v) in [
            (current, ctl::version::CURRENT),
            (last, ctl::version::LAST_SUPPORTED),
            (vendor, ctl::version::VENDOR_CURRENT),
            (last_vendor, ctl::version::VENDOR_LAST_SUPPORTED),
        ] {
            if !p.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *p = v };
            }
        }
    })
}

/// `mrc_ctl_query_device`: the controller limits (no device access: they are the
/// library's; `phy_port_mask` has one port per plane a context would have now,
/// `MRC_PLANE_DEVICES`). `EINVAL` for null pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_query_device(
    context: *mut ibv_context,
    attr: *mut MrcCtlDeviceAttr,
) -> c_int {
    guard(-1, || {
        if context.is_null() || attr.is_null() {
            return minus(libc::EINVAL);
        }
        let a = match device_attr(context, env_ports(context)) {
            Ok(a) => a,
            Err(e) => return minus(e),
        };
        // SAFETY: the caller's out-pointer.
        unsafe { *attr = a };
        0
    })
}

/// `mrc_ctl_query_device_ex`: as [`mrc_ctl_query_device`], with `mcontext`'s ports (one
/// per plane) when it is not null; `supported` is 1 when port 1 of the device answers
/// `ibv_query_port`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_query_device_ex(
    context: *mut ibv_context,
    mcontext: *mut c_void,
    attr: *mut MrcCtlDeviceAttr,
    supported: *mut c_int,
) -> c_int {
    guard(-1, || {
        if context.is_null() || attr.is_null() || supported.is_null() {
            return minus(libc::EINVAL);
        }
        let ok = crate::runtime::port_mtu(context, 1).is_ok();
        let ports = if mcontext.is_null() {
            env_ports(context)
        } else {
            ports_of(mcontext)
        };
        let a = match device_attr(context, ports) {
            Ok(a) => a,
            Err(e) => return minus(e),
        };
        // SAFETY: the caller's out-pointers.
        unsafe {
            *attr = a;
            *supported = c_int::from(ok);
        }
        0
    })
}

/// `mrc_ctl_query_port`: ports 1 to the context's planes are ENABLED; any other `EINVAL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_query_port(
    ctx: *mut c_void,
    port: u8,
    attr: *mut MrcCtlPortAttr,
    attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        if ctx.is_null()
            || attr.is_null()
            || port == 0
            || port > ports_of(ctx)
            || attr_mask as u32 & !mask::PORT_ADMIN_STATE != 0
        {
            return minus(libc::EINVAL);
        }
        // SAFETY: the caller's out-pointer.
        unsafe { (*attr).port_admin_state = 1 };
        0
    })
}

/// `mrc_ctl_modify_port`: ENABLED (what it is) is accepted; DISABLED is `EPERM` (the
/// port's administrative state belongs to the verbs device's driver, not to a library).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_modify_port(
    ctx: *mut c_void,
    port: u8,
    attr: *mut MrcCtlPortAttr,
    attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        let m = attr_mask as u32;
        if ctx.is_null()
            || attr.is_null()
            || port == 0
            || port > ports_of(ctx)
            || m & !mask::PORT_ADMIN_STATE != 0
        {
            return minus(libc::EINVAL);
        }
        // SAFETY: the caller's pointer.
        let a = unsafe { *attr };
        match (m, a.port_admin_state) {
            (0, _) | (_, 1) => 0,
            (_, 0) => minus(libc::EPERM),
            _ => minus(libc::EINVAL),
        }
    })
}

/// `mrc_ctl_modify_ev_fmt_profile`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_modify_ev_fmt_profile(
    ctx: *mut c_void,
    id: u64,
    attr: *mut MrcCtlEvFmtProfileAttr,
    attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || attr.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let a = unsafe { *attr };
        let m = attr_mask as u32;
        let mut fields = Vec::new();
        if m & mask::FMT_OP != 0 && a.ev_fmt_op.op == ctl::fields_op::MODIFY {
            let n = a.ev_fmt_op.fmt_field_count;
            if n < 0 || (n > 0 && a.ev_fmt_op.fmt_fields.is_null()) {
                return minus(libc::EINVAL);
            }
            if n as usize > ctl::limits::MAX_FIELDS {
                return minus(libc::E2BIG);
            }
            // SAFETY: the caller's array of n fields.
            fields = (0..n as usize)
                .map(|i| unsafe { (*a.ev_fmt_op.fmt_fields.add(i)).width })
                .collect();
        }
        let r = FmtModify {
            mask: m,
            state: a.profile_state,
            mode: a.ev_fmt_mode,
            op: a.ev_fmt_op.op,
            fields,
        };
        done(tables(ctx).and_then(|mut g| g.transact(|t| t.modify_fmt(id, &r))))
    })
}

/// `mrc_ctl_query_ev_fmt_profile`: fields into `fmt_fields` when `OP` is QUERY_FIELDS
/// (`E2BIG` and the needed count when the array is short).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_query_ev_fmt_profile(
    ctx: *mut c_void,
    id: u64,
    attr: *mut MrcCtlEvFmtProfileAttr,
    attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        let m = attr_mask as u32;
        if ctx.is_null()
            || attr.is_null()
            || m & !(mask::FMT_STATE
                | mask::FMT_CUR_STATE
                | mask::FMT_MODE
                | mask::FMT_OP
                | mask::FMT_VENDOR_CFG)
                != 0
        {
            return minus(libc::EINVAL);
        }
        let p = match tables(ctx).and_then(|g| g.query_fmt(id)) {
            Ok(p) => p,
            Err(e) => return minus(e),
        };
        // SAFETY: the C contract.
        let a = unsafe { &mut *attr };
        a.profile_state = p.state.to_c();
        a.cur_profile_state = p.state.to_c();
        a.ev_fmt_mode = p.mode;
        if m & mask::FMT_OP != 0 {
            if a.ev_fmt_op.op != ctl::fields_op::QUERY {
                return minus(libc::EINVAL);
            }
            let n = a.ev_fmt_op.fmt_field_count;
            if n < 0 || (n as usize) < p.fields.len() || (n > 0 && a.ev_fmt_op.fmt_fields.is_null())
            {
                a.ev_fmt_op.fmt_field_count = p.fields.len() as c_int;
                return minus(if n < 0 { libc::EINVAL } else { libc::E2BIG });
            }
            for (i, &w) in p.fields.iter().enumerate() {
                // SAFETY: the caller's array of n >= len fields.
                unsafe { (*a.ev_fmt_op.fmt_fields.add(i)).width = w };
            }
            a.ev_fmt_op.fmt_field_count = p.fields.len() as c_int;
        }
        0
    })
}

unsafe fn entries_in(op: &MrcCtlEvOp) -> Result<Vec<EvOpEntry>, i32> {
    let n = op.entry_count;
    if n < 0 || (n > 0 && op.entries.is_null()) {
        return Err(libc::EINVAL);
    }
    Ok((0..n as usize)
        .map(|i| {
            // SAFETY: the caller's array of n entries.
            let e = unsafe { *op.entries.add(i) };
            EvOpEntry {
                ev: ev_in(&e.ev),
                ev_new: ev_in(&e.ev_new),
                state: e.state,
                flags: e.flags,
            }
        })
        .collect())
}

unsafe fn entries_out(op: &mut MrcCtlEvOp, out: &[EvOpEntry]) {
    for (i, e) in out.iter().enumerate().take(op.entry_count.max(0) as usize) {
        // SAFETY: the caller's array of entry_count entries.
        let d = unsafe { &mut *op.entries.add(i) };
        d.ev = ev_out(&e.ev);
        d.state = e.state;
    }
    if op.op == ctl::ev_op::QUERY_EV_ARRAY {
        op.entry_count = out.len() as c_int;
    }
}

/// `mrc_ctl_modify_ev_profile`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_modify_ev_profile(
    ctx: *mut c_void,
    id: u64,
    attr: *mut MrcCtlEvProfileAttr,
    attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || attr.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let a = unsafe { &mut *attr };
        let m = attr_mask as u32;
        let entries = if m & mask::EV_OP != 0 {
            // SAFETY: the C contract.
            match unsafe { entries_in(&a.ev_op) } {
                Ok(e) => e,
                Err(e) => return minus(e),
            }
        } else {
            Vec::new()
        };
        let mut fields = Vec::new();
        if m & mask::EV_FIELDS_OP != 0 && a.ev_fields_op.op == ctl::fields_op::MODIFY {
            let n = a.ev_fields_op.field_count;
            if n < 0 || (n > 0 && a.ev_fields_op.fields.is_null()) {
                return minus(libc::EINVAL);
            }
            if n as usize > ctl::limits::MAX_FIELDS {
                return minus(libc::E2BIG);
            }
            fields = (0..n as usize)
                .map(|i| {
                    // SAFETY: the caller's array of n fields.
                    let f = unsafe { *a.ev_fields_op.fields.add(i) };
                    EvField {
                        width: f.width,
                        init_val: f.init_val,
                        min_val: f.min_val,
                        max_val: f.max_val,
                        mask: f.mask,
                    }
                })
                .collect();
        }
        let r = EvModify {
            mask: m,
            state: a.profile_state,
            mode: a.ev_mode,
            fmt_id: a.ev_fmt_profile_id,
            count: a.ev_count,
            min_active: a.ev_min_active,
            event_mask: a.ev_event_mask as u32,
            op: a.ev_op.op,
            entries,
            fields_op: a.ev_fields_op.op,
            fields,
            ports: ports_of(ctx),
        };
        let mut g = match tables(ctx) {
            Ok(g) => g,
            Err(e) => return minus(e),
        };
        let res = g.transact(|t| t.modify_ev(id, &r));
        wake_event_cqs(&g);
        drop(g);
        match res {
            Ok(out) => {
                if m & mask::EV_OP != 0 {
                    // SAFETY: the C contract.
                    unsafe { entries_out(&mut a.ev_op, &out) };
                }
                0
            }
            Err(e) => minus(e),
        }
    })
}

/// `mrc_ctl_query_ev_profile`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_query_ev_profile(
    ctx: *mut c_void,
    id: u64,
    attr: *mut MrcCtlEvProfileAttr,
    attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        let m = attr_mask as u32;
        if ctx.is_null() || attr.is_null() || (m & mask::EV_OP != 0 && m & mask::EV_FIELDS_OP != 0)
        {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let a = unsafe { &mut *attr };
        let entries = if m & mask::EV_OP != 0 {
            // SAFETY: the C contract.
            match unsafe { entries_in(&a.ev_op) } {
                Ok(e) => e,
                Err(e) => return minus(e),
            }
        } else {
            Vec::new()
        };
        let op = (m & mask::EV_OP != 0).then_some((a.ev_op.op, entries.as_slice()));
        let g = match tables(ctx) {
            Ok(g) => g,
            Err(e) => return minus(e),
        };
        let (p, out) = match g.query_ev(id, op) {
            Ok(x) => x,
            Err((e, need)) => {
                if e == libc::E2BIG {
                    a.ev_op.entry_count = need as c_int;
                }
                return minus(e);
            }
        };
        a.profile_state = p.state.to_c();
        a.cur_profile_state = p.state.to_c();
        a.ev_mode = p.mode;
        a.ev_fmt_profile_id = p.fmt_id;
        a.ev_count = p.count;
        a.ev_min_active = p.min_active;
        a.ev_event_mask = p.event_mask as c_int;
        if m & mask::EV_OP != 0 {
            // SAFETY: the C contract.
            unsafe { entries_out(&mut a.ev_op, &out) };
        }
        if m & mask::EV_FIELDS_OP != 0 {
            if a.ev_fields_op.op != ctl::fields_op::QUERY {
                return minus(libc::EINVAL);
            }
            let n = a.ev_fields_op.field_count;
            let need = p.fields.len();
            a.ev_fields_op.field_count = need as c_int;
            if n < 0 || (n as usize) < need || (need > 0 && a.ev_fields_op.fields.is_null()) {
                return minus(if n < 0 { libc::EINVAL } else { libc::E2BIG });
            }
            for (i, f) in p.fields.iter().enumerate() {
                // SAFETY: the caller's array of n >= need fields.
                unsafe {
                    *a.ev_fields_op.fields.add(i) = MrcCtlEvField {
                        width: f.width,
                        init_val: f.init_val,
                        min_val: f.min_val,
                        max_val: f.max_val,
                        mask: f.mask,
                    }
                };
            }
        }
        0
    })
}

/// `mrc_ctl_modify_cc_profile`: `"uet-1.0-nscc"` (with a `struct mrc_ctl_cc_nscc_cfg`)
/// or NULL (no congestion control); any other name `EINVAL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_modify_cc_profile(
    ctx: *mut c_void,
    id: u64,
    attr: *mut MrcCtlCcProfileAttr,
    attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || attr.is_null() {
            return minus(libc::EINVAL);
        }
        // SAFETY: the C contract.
        let a = unsafe { *attr };
        let m = attr_mask as u32;
        let algorithm = if a.algorithm.is_null() {
            None
        } else {
            // SAFETY: a NUL-terminated string from the caller.
            Some(
                unsafe { std::ffi::CStr::from_ptr(a.algorithm) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let config = if m & mask::CC_CONFIG != 0 && !a.cc_config.is_null() {
            // SAFETY: the caller's struct mrc_ctl_cc_nscc_cfg.
            let c = unsafe { *a.cc_config.cast::<MrcCtlCcNsccCfg>() };
            Some(NsccCfg {
                disable_qa: c.disable_qa,
                adjust_bytes_threshold: c.adjust_bytes_threshold,
                adjust_period_threshold_ns: c.adjust_period_threshold,
                base_rtt_ns: c.base_rtt,
                eta: c.eta,
                fi: c.fi,
                fi_scale: c.fi_scale,
                gamma: c.gamma,
                max_md_jump: c.max_md_jump,
                max_cwnd_bytes: c.max_cwnd,
                qa_gate: c.qa_gate,
                qa_threshold_ns: c.qa_threshold,
                target_delay_ns: c.target_delay,
            })
        } else {
            None
        };
        let r = CcModify {
            mask: m,
            state: a.profile_state,
            algorithm,
            config,
        };
        done(tables(ctx).and_then(|mut g| g.transact(|t| t.modify_cc(id, &r))))
    })
}

/// `mrc_ctl_query_cc_profile`: the state and the algorithm (the library's string, or
/// NULL); `cc_config` is not written (the header gives no room for it: it is `const`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_query_cc_profile(
    ctx: *mut c_void,
    id: u64,
    attr: *mut MrcCtlCcProfileAttr,
    _attr_mask: c_int,
) -> c_int {
    guard(-1, || {
        if ctx.is_null() || attr.is_null() {
            return minus(libc::EINVAL);
        }
        let p = match tables(ctx).and_then(|g| g.query_cc(id)) {
            Ok(p) => p,
            Err(e) => return minus(e),
        };
        // SAFETY: the C contract.
        let a = unsafe { &mut *attr };
        a.profile_state = p.state.to_c();
        a.cur_profile_state = p.state.to_c();
        a.algorithm = if p.nscc {
            ALGORITHMS.0[0]
        } else {
            std::ptr::null()
        };
        0
    })
}

/// `mrc_ctl_create_ev_event_cq`: a CQ whose entries are EV events (of every EV profile of
/// the process); `mrc_destroy_cq` frees it, `mrc_req_notify_cq` arms it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_create_ev_event_cq(
    ctx: *mut c_void,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    comp_vector: c_int,
) -> *mut c_void {
    guard(null_mut(), || {
        // SAFETY: the C contract (checked there).
        let cq = unsafe { crate::ffi::mrc_create_cq(ctx, cqe, cq_context, channel, comp_vector) };
        if !cq.is_null() {
            registry().event_cqs.push((
                cq as usize,
                ctl::EventQueue {
                    cqe: cqe.max(1) as usize,
                    ..ctl::EventQueue::default()
                },
            ));
        }
        cq
    })
}

/// `mrc_ctl_poll_ev_event`: events found, or `-EINVAL` for bad arguments or a CQ that is
/// not an EV event CQ.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_poll_ev_event(
    cq: *mut c_void,
    num_entries: c_int,
    out: *mut MrcCtlEvEvent,
) -> c_int {
    guard(-libc::EIO, || {
        if cq.is_null() || num_entries < 0 || (num_entries > 0 && out.is_null()) {
            return -libc::EINVAL;
        }
        let Some(evs) = registry().poll_events(cq as usize, num_entries as usize) else {
            return -libc::EINVAL;
        };
        // SAFETY: a live CQ; its context outlives it.
        let api = unsafe { &*(*cq.cast::<Cq>()).ctx.cast::<Context>() }.api_version;
        let stride = if api >= crate::abi::api_ver(1, 0, 1) {
            size_of::<MrcCtlEvEvent>()
        } else {
            EV_EVENT_BYTES_1_0_0
        };
        for (i, e) in evs.iter().enumerate() {
            let v = MrcCtlEvEvent {
                profile_id: e.profile_id,
                ev: ev_out(&e.ev),
                drop_count: e.drop_count,
                state: e.state,
            };
            // SAFETY: the caller's array of num_entries entries of `stride` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&v as *const MrcCtlEvEvent).cast::<u8>(),
                    out.cast::<u8>().add(i * stride),
                    stride,
                )
            };
        }
        evs.len() as c_int
    })
}

/// `mrc_ctl_ep_batch_send_wait`: `ENOTSUP` (EV probes and port status updates are
/// connectionless endpoint operations that need a responder on the remote node; mrc's
/// probes run inside a connection, and its verbs datapath has no such responder), or
/// `EINVAL` for bad arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mrc_ctl_ep_batch_send_wait(
    ctx: *mut c_void,
    _req_tc: u8,
    op_type: u32,
    req: *mut MrcCtlEpReq,
    num_req: c_int,
    _rsp_timeout: u32,
    rsp: *mut MrcCtlEpRsp,
    num_rsp: *mut c_int,
) -> c_int {
    guard(-1, || {
        if ctx.is_null()
            || req.is_null()
            || rsp.is_null()
            || num_rsp.is_null()
            || num_req <= 0
            || op_type > 1
        {
            return minus(libc::EINVAL);
        }
        // SAFETY: the caller's out-pointer.
        unsafe { *num_rsp = 0 };
        minus(libc::ENOTSUP)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// A context on `planes` planes (its further devices named as `MRC_PLANE_DEVICES`
    /// would name them), with no device behind it (the controller calls read only its
    /// planes and its null `vctx`: the process's own tables).
    fn context(planes: usize) -> Box<Context> {
        Box::new(Context {
            vctx: std::ptr::null_mut(),
            api_version: 0,
            vendor_version: 0,
            events: std::sync::Mutex::new(std::collections::VecDeque::new()),
            events_cv: std::sync::Condvar::new(),
            children: std::sync::atomic::AtomicUsize::new(0),
            planes: (1..planes).map(|p| format!("fake{p}")).collect(),
        })
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    /// Issue 43 at the C entry points: a context's ports are its planes.
    /// `mrc_ctl_query_port` and `mrc_ctl_modify_port` take ports 1 to the planes
    /// (`EINVAL` past them); REPLACE_EV of an EXP profile takes an EV on port 2 from a
    /// controller on two planes and refuses it (`EINVAL`, nothing replaced) from one on
    /// one; `QUERY_EV_ARRAY` returns each EV with its port; an AUTO profile made on two
    /// planes has its EVs on ports 1, 2, 1, 2.
    #[test]
    fn ports_are_the_contexts_planes() {
        let (one, two) = (context(1), context(2));
        let c1 = (&*one as *const Context).cast_mut().cast::<c_void>();
        let c2 = (&*two as *const Context).cast_mut().cast::<c_void>();
        let mut pa = MrcCtlPortAttr::default();
        // SAFETY (every call below): live contexts and out-pointers.
        unsafe {
            assert_eq!(mrc_ctl_query_port(c2, 2, &mut pa, 1), 0);
            assert_eq!(pa.port_admin_state, 1);
            for (c, port) in [(c2, 3), (c2, 0), (c1, 2)] {
                assert_eq!(mrc_ctl_query_port(c, port, &mut pa, 1), -1, "port {port}");
                assert_eq!(errno(), libc::EINVAL);
                assert_eq!(mrc_ctl_modify_port(c, port, &mut pa, 1), -1, "port {port}");
                assert_eq!(errno(), libc::EINVAL);
            }
            assert_eq!(mrc_ctl_modify_port(c2, 2, &mut pa, 1), 0);
        }
        // Ids no other test uses: the registry is the process's.
        let (fmt, exp, auto) = (4401, 4402, 4403);
        {
            let mut r = lock(ctl::registry());
            for state in [1, 2] {
                let m = ctl::FmtModify {
                    mask: mask::FMT_STATE | mask::FMT_MODE | mask::FMT_OP,
                    state,
                    mode: ctl::fmt_mode::STEV,
                    op: ctl::fields_op::MODIFY,
                    fields: vec![32],
                };
                r.modify_fmt(fmt, &m).unwrap();
            }
        }
        // SAFETY: plain data; zero is valid for every field.
        let mut a: MrcCtlEvProfileAttr = unsafe { std::mem::zeroed() };
        a.profile_state = 1;
        a.ev_mode = ctl::ev_mode::EXP;
        a.ev_fmt_profile_id = fmt;
        a.ev_count = 2;
        let m = (mask::EV_STATE | mask::EV_MODE | mask::EV_FMT_ID | mask::EV_COUNT) as c_int;
        // SAFETY: a live context and attribute.
        assert_eq!(unsafe { mrc_ctl_modify_ev_profile(c2, exp, &mut a, m) }, 0);
        let entry = |v: u32, port: u8| {
            let mut ev_new = MrcCtlEv {
                port,
                ..MrcCtlEv::default()
            };
            ev_new.val[..4].copy_from_slice(&v.to_ne_bytes());
            MrcCtlEvOpEntry {
                ev: MrcCtlEv::default(),
                ev_new,
                state: 0,
                flags: 0,
            }
        };
        let mut entries = [entry(0x500, 1), entry(0x501, 2)];
        a.ev_op.op = ctl::ev_op::REPLACE_EV;
        let op = mask::EV_OP as c_int;
        // SAFETY: as above; the entries live across the calls.
        unsafe {
            // The port-2 EV alone from the one-plane controller: refused.
            a.ev_op.entries = entries.as_mut_ptr().add(1);
            a.ev_op.entry_count = 1;
            assert_eq!(mrc_ctl_modify_ev_profile(c1, exp, &mut a, op), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(
                lock(ctl::registry()).ev[&exp].evs,
                [Ev::UNPOPULATED; 2],
                "nothing replaced"
            );
            a.ev_op.entries = entries.as_mut_ptr();
            a.ev_op.entry_count = 2;
            assert_eq!(mrc_ctl_modify_ev_profile(c2, exp, &mut a, op), 0);
        }
        a.profile_state = 2;
        // SAFETY: as above.
        let on = unsafe { mrc_ctl_modify_ev_profile(c2, exp, &mut a, mask::EV_STATE as c_int) };
        assert_eq!(on, 0);
        let mut out = [entry(0, 0); 2];
        a.ev_op.op = ctl::ev_op::QUERY_EV_ARRAY;
        a.ev_op.entries = out.as_mut_ptr();
        // SAFETY: as above.
        assert_eq!(unsafe { mrc_ctl_query_ev_profile(c1, exp, &mut a, op) }, 0);
        assert_eq!(
            out.map(|e| (
                u32::from_ne_bytes(e.ev.val[..4].try_into().unwrap()),
                e.ev.port
            )),
            [(0x500, 1), (0x501, 2)]
        );
        assert_eq!(lock(ctl::registry()).qp_evs(exp).unwrap().ports, [1, 2]);
        // AUTO on the two-plane context: EV i on port 1 + i mod 2.
        // SAFETY: plain data.
        let mut a: MrcCtlEvProfileAttr = unsafe { std::mem::zeroed() };
        a.profile_state = 1;
        a.ev_mode = ctl::ev_mode::AUTO;
        a.ev_count = 4;
        let m = (mask::EV_STATE | mask::EV_MODE | mask::EV_COUNT) as c_int;
        // SAFETY: as above.
        assert_eq!(unsafe { mrc_ctl_modify_ev_profile(c2, auto, &mut a, m) }, 0);
        assert_eq!(
            lock(ctl::registry()).ev[&auto]
                .evs
                .iter()
                .map(|e| e.port)
                .collect::<Vec<u8>>(),
            [1, 2, 1, 2]
        );
    }

    #[test]
    fn layouts() {
        assert_eq!(size_of::<MrcCtlEv>(), 33);
        assert_eq!(size_of::<MrcCtlDeviceAttr>(), 72);
        assert_eq!(offset_of!(MrcCtlDeviceAttr, cc), 48);
        assert_eq!(offset_of!(MrcCtlDeviceAttr, phy_port_mask), 64);
        assert_eq!(size_of::<MrcCtlEvFmtProfileAttr>(), 168);
        assert_eq!(offset_of!(MrcCtlEvFmtProfileAttr, ev_fmt_op), 16);
        assert_eq!(size_of::<MrcCtlEvOpEntry>(), 76);
        assert_eq!(offset_of!(MrcCtlEvOpEntry, state), 68);
        assert_eq!(offset_of!(MrcCtlEvProfileAttr, ev_fmt_profile_id), 16);
        assert_eq!(offset_of!(MrcCtlEvProfileAttr, ev_op), 40);
        assert_eq!(offset_of!(MrcCtlEvProfileAttr, ev_fields_op), 64);
        assert_eq!(size_of::<MrcCtlEvProfileAttr>(), 216);
        assert_eq!(size_of::<MrcCtlCcProfileAttr>(), 152);
        assert_eq!(size_of::<MrcCtlCcNsccCfg>(), 52);
        assert_eq!(offset_of!(MrcCtlCcNsccCfg, qa_gate), 40);
        assert_eq!(size_of::<MrcCtlEvEvent>(), 56);
        assert_eq!(offset_of!(MrcCtlEvEvent, drop_count), 44);
        assert_eq!(size_of::<MrcCtlEpReq>(), 88);
        assert_eq!(offset_of!(MrcCtlEpReq, req_ev), 44);
        assert_eq!(offset_of!(MrcCtlEpReq, port_status), 80);
        assert_eq!(size_of::<MrcCtlEpRsp>(), 12);
    }
}
