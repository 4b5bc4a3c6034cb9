//! `spray`: an NCCL / RCCL network plugin over mrc's UDP transport.
//!
//! Built as a cdylib (`libnccl_net_spray.so`; install it as `libnccl-net-spray.so`, or
//! give NCCL its full path) that exports `ncclNetPlugin_v6` through `ncclNetPlugin_v12`,
//! each the function table of that version of NCCL's net plugin ABI ([`abi`]), all backed
//! by one implementation ([`plugin`]). Its `ncclNet.name` is `"spray"`:
//! `NCCL_NET_PLUGIN=spray NCCL_NET=spray`. Not `mrc`: microsoft/mrc-nccl-plugin already
//! ships `libnccl-net-mrc.so` for hardware MRC.
//!
//! * Host memory only (`NCCL_PTR_HOST`): NCCL stages through its pinned host buffers;
//!   `regMrDmaBuf`, `iflush` and `regMr` of device memory are refused with
//!   `ncclInternalError` (NCCL never calls them for a host-only device).
//! * One device (0), `maxRecvs` 1, `maxComms` 65536, `maxP2pBytes` = `maxCollBytes` =
//!   1 GiB.
//! * Progress on the calling thread: one process-wide [`mrc_fabric::engine::Worker`]
//!   behind a mutex; `isend`, `irecv` and `test` each run one pass of it (datagrams in,
//!   timers, completions, datagrams out). A keeper thread ([`plugin::Keeper`]) runs a
//!   pass only when no call did for a millisecond (a peer may need an answer while
//!   this process has nothing in flight); it is joined when the worker is dropped, and at
//!   `dlclose` at the latest, so nothing outlives the library.
//! * Every entry catches panics (`catch_unwind`) and returns `ncclInternalError`.
//!
//! docs/NCCL.md is the user's page.

#![warn(missing_docs)]

pub mod abi;
pub mod memcheck;
pub mod plugin;

use abi::*;
use plugin::{Error, Res};
use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

/// The plugin's `ncclNet.name` (what `NCCL_NET` matches).
pub const NAME: &std::ffi::CStr = c"spray";

/// NCCL's logger of the latest `init`.
static LOGGER: Mutex<Option<Logger>> = Mutex::new(None);

fn log(level: c_int, msg: &str) {
    let l = *LOGGER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(l) = l else { return };
    let Ok(m) = CString::new(format!("NET/spray: {msg}")) else {
        return;
    };
    // SAFETY: NCCL's logger is printf-like; "%s" with a NUL-terminated string.
    unsafe {
        l(
            level,
            NCCL_NET_SUBSYS,
            c"spray".as_ptr(),
            0,
            c"%s".as_ptr(),
            m.as_ptr(),
        );
    }
}

/// Runs one entry point: catches a panic, logs an error, returns its code.
fn guard(what: &str, f: impl FnOnce() -> Res<()>) -> NcclResult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NCCL_SUCCESS,
        Ok(Err(e)) => {
            log(NCCL_LOG_WARN, &format!("{what}: {}", e.msg));
            e.code
        }
        Err(_) => {
            log(NCCL_LOG_WARN, &format!("{what}: internal panic"));
            NCCL_INTERNAL_ERROR
        }
    }
}

fn null(what: &str) -> Error {
    Error {
        code: NCCL_INTERNAL_ERROR,
        msg: format!("{what} is NULL"),
    }
}

fn id_of(p: *mut c_void, what: &str) -> Res<u64> {
    if p.is_null() {
        return Err(null(what));
    }
    Ok(p as usize as u64)
}

fn ptr_of(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

/// Writes `v` through `out` (checked for NULL).
///
/// # Safety
/// `out` is NULL or valid for a write.
unsafe fn put<T>(out: *mut T, v: T, what: &str) -> Res<()> {
    if out.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-NULL; valid by the caller's contract.
    unsafe { out.write(v) };
    Ok(())
}

fn set_logger(l: Option<Logger>) {
    *LOGGER.lock().unwrap_or_else(|e| e.into_inner()) = l;
}

// ---- init / devices / properties -------------------------------------------------

unsafe extern "C" fn init_v6(logger: Option<Logger>) -> NcclResult {
    guard("init", || {
        set_logger(logger);
        plugin::init(&mut plugin::lock(), None)?;
        log(
            NCCL_LOG_INFO,
            "initialised (mrc UDP transport, host memory)",
        );
        Ok(())
    })
}

unsafe extern "C" fn init_v10(
    logger: Option<Logger>,
    _prof: Option<ProfilerCallback>,
) -> NcclResult {
    // SAFETY: same contract.
    unsafe { init_v6(logger) }
}

unsafe extern "C" fn init_v11(
    ctx: *mut *mut c_void,
    comm_id: u64,
    _config: *mut CommConfig,
    logger: Option<Logger>,
    _prof: Option<ProfilerCallback>,
) -> NcclResult {
    guard("init", || {
        set_logger(logger);
        let id = plugin::init(&mut plugin::lock(), Some(comm_id))?;
        // SAFETY: NCCL's out pointer.
        unsafe { put(ctx, ptr_of(id), "ctx") }
    })
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
    guard("finalize", || {
        plugin::finalize(&mut plugin::lock(), id_of(ctx, "ctx")?)
    })
}

unsafe extern "C" fn set_net_attr(ctx: *mut c_void, _attr: *mut NetAttr) -> NcclResult {
    // Hints only; the transport's own path selection needs none of them.
    guard("setNetAttr", || {
        let mut g = plugin::lock();
        plugin::check_ctx(plugin::state(&mut g)?, id_of(ctx, "ctx")?)
    })
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> NcclResult {
    guard("devices", || {
        plugin::state(&mut plugin::lock())?;
        // SAFETY: NCCL's out pointer.
        unsafe { put(ndev, 1, "ndev") }
    })
}

/// The common fields of every version's properties.
struct Common {
    speed: c_int,
    guid: u64,
}

fn common(dev: c_int) -> Res<Common> {
    let mut g = plugin::lock();
    let p = plugin::props(plugin::state(&mut g)?, dev)?;
    Ok(Common {
        speed: p.speed_mbps,
        guid: p.guid,
    })
}

/// The device name NCCL logs (static: NCCL keeps the pointer).
fn dev_name() -> *mut c_char {
    c"spray0".as_ptr().cast_mut()
}

unsafe extern "C" fn get_properties_v6(dev: c_int, props: *mut PropsV6) -> NcclResult {
    guard("getProperties", || {
        let c = common(dev)?;
        let p = PropsV6 {
            name: dev_name(),
            pci_path: std::ptr::null_mut(),
            guid: c.guid,
            ptr_support: NCCL_PTR_HOST,
            speed: c.speed,
            port: 0,
            latency: 0.0,
            max_comms: 65536,
            max_recvs: 1,
        };
        // SAFETY: NCCL's out pointer.
        unsafe { put(props, p, "props") }
    })
}

unsafe extern "C" fn get_properties_v7(dev: c_int, props: *mut PropsV7) -> NcclResult {
    guard("getProperties", || {
        let c = common(dev)?;
        let p = PropsV7 {
            name: dev_name(),
            pci_path: std::ptr::null_mut(),
            guid: c.guid,
            ptr_support: NCCL_PTR_HOST,
            speed: c.speed,
            port: 0,
            latency: 0.0,
            max_comms: 65536,
            max_recvs: 1,
            net_device_type: NCCL_NET_DEVICE_HOST,
            net_device_version: NCCL_NET_DEVICE_INVALID_VERSION,
        };
        // SAFETY: NCCL's out pointer.
        unsafe { put(props, p, "props") }
    })
}

unsafe extern "C" fn get_properties_v8(dev: c_int, props: *mut PropsV8) -> NcclResult {
    guard("getProperties", || {
        let c = common(dev)?;
        let p = PropsV8 {
            name: dev_name(),
            pci_path: std::ptr::null_mut(),
            guid: c.guid,
            ptr_support: NCCL_PTR_HOST,
            reg_is_global: 0,
            speed: c.speed,
            port: 0,
            latency: 0.0,
            max_comms: 65536,
            max_recvs: 1,
            net_device_type: NCCL_NET_DEVICE_HOST,
            net_device_version: NCCL_NET_DEVICE_INVALID_VERSION,
        };
        // SAFETY: NCCL's out pointer.
        unsafe { put(props, p, "props") }
    })
}

fn props_v9(dev: c_int) -> Res<PropsV9> {
    let c = common(dev)?;
    let mut devs = [0; MAX_DEVS_PER_NIC_V11];
    devs[0] = dev;
    Ok(PropsV9 {
        name: dev_name(),
        pci_path: std::ptr::null_mut(),
        guid: c.guid,
        ptr_support: NCCL_PTR_HOST,
        reg_is_global: 0,
        force_flush: 0,
        speed: c.speed,
        port: 0,
        latency: 0.0,
        max_comms: 65536,
        max_recvs: 1,
        net_device_type: NCCL_NET_DEVICE_HOST,
        net_device_version: NCCL_NET_DEVICE_INVALID_VERSION,
        v_props: VDevPropsV9 { ndevs: 1, devs },
        max_p2p_bytes: NCCL_MAX_NET_SIZE_BYTES,
        max_coll_bytes: NCCL_MAX_NET_SIZE_BYTES,
    })
}

unsafe extern "C" fn get_properties_v9(dev: c_int, props: *mut PropsV9) -> NcclResult {
    guard("getProperties", || {
        let p = props_v9(dev)?;
        // SAFETY: NCCL's out pointer.
        unsafe { put(props, p, "props") }
    })
}

unsafe extern "C" fn get_properties_v11(dev: c_int, props: *mut PropsV11) -> NcclResult {
    guard("getProperties", || {
        let p = PropsV11 {
            v9: props_v9(dev)?,
            max_multi_request_size: 1,
        };
        // SAFETY: NCCL's out pointer.
        unsafe { put(props, p, "props") }
    })
}

unsafe extern "C" fn get_properties_v12(dev: c_int, props: *mut PropsV12) -> NcclResult {
    guard("getProperties", || {
        let c = props_v9(dev)?;
        let mut devs = [0; MAX_DEVS_PER_NIC_V12];
        devs[0] = dev;
        let p = PropsV12 {
            name: c.name,
            pci_path: c.pci_path,
            guid: c.guid,
            ptr_support: c.ptr_support,
            reg_is_global: c.reg_is_global,
            force_flush: c.force_flush,
            speed: c.speed,
            port: c.port,
            latency: c.latency,
            max_comms: c.max_comms,
            max_recvs: c.max_recvs,
            net_device_type: c.net_device_type,
            net_device_version: c.net_device_version,
            v_props: VDevPropsV12 { ndevs: 1, devs },
            max_p2p_bytes: c.max_p2p_bytes,
            max_coll_bytes: c.max_coll_bytes,
            max_multi_request_size: 1,
            rail_id: NCCL_NET_ID_UNDEF,
            plane_id: NCCL_NET_ID_UNDEF,
        };
        // SAFETY: NCCL's out pointer.
        unsafe { put(props, p, "props") }
    })
}

// ---- connection setup -------------------------------------------------------------

/// The 128-byte handle behind `p`.
///
/// # Safety
/// `p` is NULL or points to `NCCL_NET_HANDLE_MAXSIZE` writable bytes.
unsafe fn handle<'a>(p: *mut c_void) -> Res<&'a mut [u8; NCCL_NET_HANDLE_MAXSIZE]> {
    if p.is_null() {
        return Err(null("handle"));
    }
    // SAFETY: NCCL's handle buffer is NCCL_NET_HANDLE_MAXSIZE bytes; u8 has no alignment.
    Ok(unsafe { &mut *p.cast::<[u8; NCCL_NET_HANDLE_MAXSIZE]>() })
}

unsafe extern "C" fn listen_v6(dev: c_int, h: *mut c_void, listen: *mut *mut c_void) -> NcclResult {
    guard("listen", || {
        // SAFETY: NCCL's handle buffer.
        let h = unsafe { handle(h)? };
        if listen.is_null() {
            return Err(null("listenComm"));
        }
        let mut g = plugin::lock();
        let id = plugin::listen(plugin::state(&mut g)?, dev, h)?;
        // SAFETY: checked non-NULL.
        unsafe { put(listen, ptr_of(id), "listenComm") }
    })
}

unsafe extern "C" fn listen_v11(
    ctx: *mut c_void,
    dev: c_int,
    h: *mut c_void,
    listen: *mut *mut c_void,
) -> NcclResult {
    let r = guard("listen", || {
        let mut g = plugin::lock();
        plugin::check_ctx(plugin::state(&mut g)?, id_of(ctx, "ctx")?)
    });
    if r != NCCL_SUCCESS {
        return r;
    }
    // SAFETY: same contract.
    unsafe { listen_v6(dev, h, listen) }
}

/// Clears NCCL's device-handle out pointer (host networking: none).
///
/// # Safety
/// `d` is NULL or valid for a write.
unsafe fn no_dev_handle(d: *mut *mut DeviceHandle) {
    if !d.is_null() {
        // SAFETY: non-NULL; NCCL's out pointer.
        unsafe { d.write(std::ptr::null_mut()) };
    }
}

unsafe extern "C" fn connect_v7(
    dev: c_int,
    h: *mut c_void,
    send: *mut *mut c_void,
    dh: *mut *mut DeviceHandle,
) -> NcclResult {
    guard("connect", || {
        // SAFETY: NCCL's handle buffer and out pointers.
        unsafe { no_dev_handle(dh) };
        let h = unsafe { handle(h)? };
        if send.is_null() {
            return Err(null("sendComm"));
        }
        // SAFETY: non-NULL.
        unsafe { send.write(std::ptr::null_mut()) };
        let mut g = plugin::lock();
        let got = plugin::connect(plugin::state(&mut g)?, dev, h)?;
        if let Some(id) = got {
            // SAFETY: non-NULL.
            unsafe { send.write(ptr_of(id)) };
        }
        Ok(())
    })
}

unsafe extern "C" fn connect_v6(dev: c_int, h: *mut c_void, send: *mut *mut c_void) -> NcclResult {
    // SAFETY: same contract.
    unsafe { connect_v7(dev, h, send, std::ptr::null_mut()) }
}

unsafe extern "C" fn connect_v10(
    dev: c_int,
    _config: *mut CommConfig,
    h: *mut c_void,
    send: *mut *mut c_void,
    dh: *mut *mut DeviceHandle,
) -> NcclResult {
    // SAFETY: same contract.
    unsafe { connect_v7(dev, h, send, dh) }
}

unsafe extern "C" fn connect_v11(
    ctx: *mut c_void,
    dev: c_int,
    h: *mut c_void,
    send: *mut *mut c_void,
    dh: *mut *mut DeviceHandle,
) -> NcclResult {
    let r = guard("connect", || {
        let mut g = plugin::lock();
        plugin::check_ctx(plugin::state(&mut g)?, id_of(ctx, "ctx")?)
    });
    if r != NCCL_SUCCESS {
        return r;
    }
    // SAFETY: same contract.
    unsafe { connect_v7(dev, h, send, dh) }
}

unsafe extern "C" fn accept_v7(
    listen: *mut c_void,
    recv: *mut *mut c_void,
    dh: *mut *mut DeviceHandle,
) -> NcclResult {
    guard("accept", || {
        // SAFETY: NCCL's out pointers.
        unsafe { no_dev_handle(dh) };
        if recv.is_null() {
            return Err(null("recvComm"));
        }
        // SAFETY: non-NULL.
        unsafe { recv.write(std::ptr::null_mut()) };
        let l = id_of(listen, "listenComm")?;
        let mut g = plugin::lock();
        if let Some(id) = plugin::accept(plugin::state(&mut g)?, l)? {
            // SAFETY: non-NULL.
            unsafe { recv.write(ptr_of(id)) };
        }
        Ok(())
    })
}

unsafe extern "C" fn accept_v6(listen: *mut c_void, recv: *mut *mut c_void) -> NcclResult {
    // SAFETY: same contract.
    unsafe { accept_v7(listen, recv, std::ptr::null_mut()) }
}

unsafe extern "C" fn close_listen(listen: *mut c_void) -> NcclResult {
    guard("closeListen", || {
        let l = id_of(listen, "listenComm")?;
        plugin::close_listen(plugin::state(&mut plugin::lock())?, l)
    })
}

unsafe extern "C" fn close_send(comm: *mut c_void) -> NcclResult {
    guard("closeSend", || {
        let c = id_of(comm, "sendComm")?;
        let line = plugin::close_comm(plugin::state(&mut plugin::lock())?, c, true)?;
        if let Some(l) = line {
            log(NCCL_LOG_INFO, &l);
        }
        Ok(())
    })
}

unsafe extern "C" fn close_recv(comm: *mut c_void) -> NcclResult {
    guard("closeRecv", || {
        let c = id_of(comm, "recvComm")?;
        let line = plugin::close_comm(plugin::state(&mut plugin::lock())?, c, false)?;
        if let Some(l) = line {
            log(NCCL_LOG_INFO, &l);
        }
        Ok(())
    })
}

// ---- memory -------------------------------------------------------------------------

unsafe extern "C" fn reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    kind: c_int,
    mh: *mut *mut c_void,
) -> NcclResult {
    guard("regMr", || {
        let c = id_of(comm, "comm")?;
        if mh.is_null() {
            return Err(null("mhandle"));
        }
        let mut g = plugin::lock();
        // SAFETY: NCCL's regMr contract (valid until deregMr).
        let id = unsafe { plugin::reg_mr(plugin::state(&mut g)?, c, data.cast(), size, kind)? };
        // SAFETY: non-NULL.
        unsafe { put(mh, ptr_of(id), "mhandle") }
    })
}

unsafe extern "C" fn reg_mr_int(
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    kind: c_int,
    mh: *mut *mut c_void,
) -> NcclResult {
    let Ok(size) = usize::try_from(size) else {
        log(NCCL_LOG_WARN, "regMr: negative size");
        return NCCL_INVALID_ARGUMENT;
    };
    // SAFETY: same contract.
    unsafe { reg_mr(comm, data, size, kind, mh) }
}

unsafe extern "C" fn reg_mr_dma_buf(
    _comm: *mut c_void,
    _data: *mut c_void,
    _size: usize,
    _kind: c_int,
    _offset: u64,
    _fd: c_int,
    mh: *mut *mut c_void,
) -> NcclResult {
    guard("regMrDmaBuf", || {
        if !mh.is_null() {
            // SAFETY: non-NULL out pointer.
            unsafe { mh.write(std::ptr::null_mut()) };
        }
        Err(Error {
            code: NCCL_INTERNAL_ERROR,
            msg: "DMA-BUF memory is not supported (ptrSupport is NCCL_PTR_HOST only)".into(),
        })
    })
}

unsafe extern "C" fn dereg_mr(comm: *mut c_void, mh: *mut c_void) -> NcclResult {
    guard("deregMr", || {
        let c = id_of(comm, "comm")?;
        let m = id_of(mh, "mhandle")?;
        plugin::dereg_mr(plugin::state(&mut plugin::lock())?, c, m)
    })
}

// ---- data -----------------------------------------------------------------------------

unsafe extern "C" fn isend_v9(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    _tag: c_int,
    mh: *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("isend", || {
        if req.is_null() {
            return Err(null("request"));
        }
        // SAFETY: non-NULL out pointer.
        unsafe { req.write(std::ptr::null_mut()) };
        let c = id_of(comm, "sendComm")?;
        let m = id_of(mh, "mhandle")?;
        let mut g = plugin::lock();
        if let Some(id) = plugin::isend(plugin::state(&mut g)?, c, data.cast(), size, m)? {
            // SAFETY: non-NULL.
            unsafe { req.write(ptr_of(id)) };
        }
        Ok(())
    })
}

unsafe extern "C" fn isend_int(
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mh: *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    let Ok(size) = usize::try_from(size) else {
        log(NCCL_LOG_WARN, "isend: negative size");
        return NCCL_INVALID_ARGUMENT;
    };
    // SAFETY: same contract.
    unsafe { isend_v9(comm, data, size, tag, mh, req) }
}

unsafe extern "C" fn isend_v10(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mh: *mut c_void,
    _phandle: *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: same contract.
    unsafe { isend_v9(comm, data, size, tag, mh, req) }
}

/// `irecv` of every version, with the size already read from NCCL's array.
///
/// # Safety
/// `data`, `mhs` are NULL or arrays of `n`; `req` is NULL or writable.
unsafe fn irecv_any(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    size: impl FnOnce() -> Res<usize>,
    mhs: *mut *mut c_void,
    req: *mut *mut c_void,
) -> Res<()> {
    if req.is_null() {
        return Err(null("request"));
    }
    // Always overwrite: NCCL may have stored NCCL_NET_OPTIONAL_RECV_COMPLETION (0x1).
    // SAFETY: non-NULL out pointer.
    unsafe { req.write(std::ptr::null_mut()) };
    if n != 1 {
        return Err(Error {
            code: NCCL_INTERNAL_ERROR,
            msg: format!("irecv of {n} buffers (maxRecvs is 1)"),
        });
    }
    if data.is_null() || mhs.is_null() {
        return Err(null("irecv data or mhandles"));
    }
    let c = id_of(comm, "recvComm")?;
    // SAFETY: arrays of n = 1.
    let (d, m) = unsafe { (*data, *mhs) };
    let m = id_of(m, "mhandle")?;
    let size = size()?;
    let mut g = plugin::lock();
    if let Some(id) = plugin::irecv(plugin::state(&mut g)?, c, d.cast(), size, m)? {
        // SAFETY: non-NULL.
        unsafe { req.write(ptr_of(id)) };
    }
    Ok(())
}

unsafe extern "C" fn irecv_int(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    _tags: *mut c_int,
    mhs: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("irecv", || {
        let size = || {
            if sizes.is_null() {
                return Err(null("sizes"));
            }
            // SAFETY: an array of n >= 1 (checked before this runs).
            usize::try_from(unsafe { *sizes }).map_err(|_| Error {
                code: NCCL_INVALID_ARGUMENT,
                msg: "irecv: negative size".into(),
            })
        };
        // SAFETY: NCCL's arrays and out pointer.
        unsafe { irecv_any(comm, n, data, size, mhs, req) }
    })
}

unsafe extern "C" fn irecv_v9(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    _tags: *mut c_int,
    mhs: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("irecv", || {
        let size = || {
            if sizes.is_null() {
                return Err(null("sizes"));
            }
            // SAFETY: an array of n >= 1.
            Ok(unsafe { *sizes })
        };
        // SAFETY: NCCL's arrays and out pointer.
        unsafe { irecv_any(comm, n, data, size, mhs, req) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn irecv_v10(
    comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhs: *mut *mut c_void,
    _phandles: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    // SAFETY: same contract.
    unsafe { irecv_v9(comm, n, data, sizes, tags, mhs, req) }
}

unsafe extern "C" fn iflush(
    _comm: *mut c_void,
    _n: c_int,
    _data: *mut *mut c_void,
    _sizes: *mut c_int,
    _mhs: *mut *mut c_void,
    req: *mut *mut c_void,
) -> NcclResult {
    guard("iflush", || {
        if !req.is_null() {
            // SAFETY: non-NULL out pointer.
            unsafe { req.write(std::ptr::null_mut()) };
        }
        Err(Error {
            code: NCCL_INTERNAL_ERROR,
            msg: "iflush: host memory only, nothing to flush (NCCL never calls it)".into(),
        })
    })
}

unsafe extern "C" fn test(req: *mut c_void, done: *mut c_int, sizes: *mut c_int) -> NcclResult {
    guard("test", || {
        if done.is_null() {
            return Err(null("done"));
        }
        let r = id_of(req, "request")?;
        let got = {
            let mut g = plugin::lock();
            plugin::test(plugin::state(&mut g)?, r)
        };
        match got {
            Ok(None) => {
                // SAFETY: non-NULL.
                unsafe { done.write(0) };
                Ok(())
            }
            Ok(Some(bytes)) => {
                // SAFETY: non-NULL; `sizes` may be NULL (flush requests).
                unsafe {
                    if !sizes.is_null() {
                        sizes.write(c_int::try_from(bytes).unwrap_or(c_int::MAX));
                    }
                    done.write(1);
                }
                Ok(())
            }
            Err(e) => {
                // The request is gone: done, with the error.
                // SAFETY: non-NULL.
                unsafe { done.write(1) };
                Err(e)
            }
        }
    })
}

// ---- the exported tables ---------------------------------------------------------------

/// `ncclNetPlugin_v6` (NCCL 2.13 .. 2.18).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v6: NetV6 = NetV6 {
    name: NAME.as_ptr(),
    init: init_v6,
    devices,
    get_properties: get_properties_v6,
    listen: listen_v6,
    connect: connect_v6,
    accept: accept_v6,
    reg_mr: reg_mr_int,
    reg_mr_dma_buf,
    dereg_mr,
    isend: isend_int,
    irecv: irecv_int,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
};

/// `ncclNetPlugin_v7` (NCCL 2.19).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v7: NetV7 = NetV7 {
    name: NAME.as_ptr(),
    init: init_v6,
    devices,
    get_properties: get_properties_v7,
    listen: listen_v6,
    connect: connect_v7,
    accept: accept_v7,
    reg_mr: reg_mr_int,
    reg_mr_dma_buf,
    dereg_mr,
    isend: isend_int,
    irecv: irecv_int,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
};

/// `ncclNetPlugin_v8` (NCCL 2.20 .. 2.23).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v8: NetV8 = NetV8 {
    name: NAME.as_ptr(),
    init: init_v6,
    devices,
    get_properties: get_properties_v8,
    listen: listen_v6,
    connect: connect_v7,
    accept: accept_v7,
    reg_mr,
    reg_mr_dma_buf,
    dereg_mr,
    isend: isend_int,
    irecv: irecv_int,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
};

/// `ncclNetPlugin_v9` (NCCL 2.24, 2.25).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v9: NetV9 = NetV9 {
    name: NAME.as_ptr(),
    init: init_v6,
    devices,
    get_properties: get_properties_v9,
    listen: listen_v6,
    connect: connect_v7,
    accept: accept_v7,
    reg_mr,
    reg_mr_dma_buf,
    dereg_mr,
    isend: isend_v9,
    irecv: irecv_v9,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
    make_v_device: None,
};

/// `ncclNetPlugin_v10` (NCCL 2.26, 2.27).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v10: NetV10 = NetV10 {
    name: NAME.as_ptr(),
    init: init_v10,
    devices,
    get_properties: get_properties_v9,
    listen: listen_v6,
    connect: connect_v10,
    accept: accept_v7,
    reg_mr,
    reg_mr_dma_buf,
    dereg_mr,
    isend: isend_v10,
    irecv: irecv_v10,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
    make_v_device: None,
};

/// `ncclNetPlugin_v11` (NCCL 2.28, 2.29; RCCL's newest).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v11: NetV11 = NetV11 {
    name: NAME.as_ptr(),
    init: init_v11,
    devices,
    get_properties: get_properties_v11,
    listen: listen_v11,
    connect: connect_v11,
    accept: accept_v7,
    reg_mr,
    reg_mr_dma_buf,
    dereg_mr,
    isend: isend_v10,
    irecv: irecv_v10,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
    make_v_device: None,
    finalize,
    set_net_attr,
};

/// `ncclNetPlugin_v12` (NCCL 2.30+).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v12: NetV12 = NetV12 {
    name: NAME.as_ptr(),
    init: init_v11,
    devices,
    get_properties: get_properties_v12,
    listen: listen_v11,
    connect: connect_v11,
    accept: accept_v7,
    reg_mr,
    reg_mr_dma_buf,
    dereg_mr,
    isend: isend_v10,
    irecv: irecv_v10,
    iflush,
    test,
    close_send,
    close_recv,
    close_listen,
    get_device_mr: None,
    irecv_consumed: None,
    make_v_device: None,
    finalize,
    set_net_attr,
};

/// Runs when the library is unloaded (`dlclose`) or the process exits: drops the worker
/// (closing its sockets and rings) so a reload starts clean and nothing leaks across
/// loads.
extern "C" fn unload() {
    let _ = catch_unwind(|| {
        // Blocking: only the keeper thread (briefly) or a call still running holds it;
        // dropping the state joins the keeper, so no thread runs this code after unload.
        *plugin::lock() = None;
        if let Ok(mut l) = LOGGER.try_lock() {
            *l = None;
        }
    });
}

#[used]
#[unsafe(link_section = ".fini_array")]
static UNLOAD: extern "C" fn() = unload;
