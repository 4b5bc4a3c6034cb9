//! The C ABI of NCCL's external network plugin, versions 6 to 12, written for this crate
//! from the layouts in NCCL's public headers (`plugins/net/example/nccl/net_v6.h` ..
//! `net_v12.h`, `err.h`, `common.h`, `net_device.h` of NVIDIA/nccl 2.30) and the notes in
//! `shared/reference/nccl-net-plugin.md`. Every struct is `#[repr(C)]` with the fields in
//! the header's order; the sizes are checked by the C harness
//! (`tests/harness.c`, which declares the same layouts independently).

use std::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t`.
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: NcclResult = 0;
/// `ncclSystemError`: an OS or network fault.
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
/// `ncclInternalError`: NCCL misused the API (or the plugin panicked).
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
/// `ncclInvalidArgument`.
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
/// `ncclInvalidUsage`: a user or configuration error (a send larger than its receive).
pub const NCCL_INVALID_USAGE: NcclResult = 5;
/// `ncclRemoteError`: the peer failed or went away.
pub const NCCL_REMOTE_ERROR: NcclResult = 6;

/// `NCCL_PTR_HOST`: host memory.
pub const NCCL_PTR_HOST: c_int = 0x1;
/// `NCCL_NET_HANDLE_MAXSIZE`: bytes of a connection handle.
pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
/// `NCCL_NET_MAX_REQUESTS`: requests in flight per comm NCCL may keep (since 2.19).
pub const NCCL_NET_MAX_REQUESTS: usize = 32;
/// `NCCL_MAX_NET_SIZE`: the largest single transfer NCCL makes, bytes (1 GiB).
pub const NCCL_MAX_NET_SIZE_BYTES: usize = 1 << 30;
/// `NCCL_NET_DEVICE_HOST` of `ncclNetDeviceType`.
pub const NCCL_NET_DEVICE_HOST: c_int = 0;
/// `NCCL_NET_DEVICE_INVALID_VERSION`.
pub const NCCL_NET_DEVICE_INVALID_VERSION: c_int = 0;
/// `NCCL_NET_ID_UNDEF` (railId, planeId of v12).
pub const NCCL_NET_ID_UNDEF: i16 = -1;
/// `NCCL_NET_MAX_DEVS_PER_NIC_V11` (the `vProps` array of v9 .. v11).
pub const MAX_DEVS_PER_NIC_V11: usize = 4;
/// `NCCL_NET_MAX_DEVS_PER_NIC_V12`.
pub const MAX_DEVS_PER_NIC_V12: usize = 8;

/// Log levels of `ncclDebugLogLevel`: `NCCL_LOG_WARN`.
pub const NCCL_LOG_WARN: c_int = 2;
/// `NCCL_LOG_INFO`.
pub const NCCL_LOG_INFO: c_int = 3;
/// Subsystem flag `NCCL_NET`.
pub const NCCL_NET_SUBSYS: c_ulong = 16;

/// `ncclDebugLogger_t`: NCCL's printf-like logger (C variadic; called with `"%s"`).
pub type Logger = unsafe extern "C" fn(
    level: c_int,
    flags: c_ulong,
    file: *const c_char,
    line: c_int,
    fmt: *const c_char,
    ...
);

/// `ncclProfilerCallback_t` (v10+); the plugin records no profiler events.
pub type ProfilerCallback = unsafe extern "C" fn(
    e_handle: *mut *mut c_void,
    kind: c_int,
    phandle: *mut c_void,
    plugin_id: i64,
    ext_data: *mut c_void,
) -> NcclResult;

/// `ncclNetDeviceHandle_v7_t` (the same type for v8 .. v12); this plugin never makes one
/// (host networking), so it only appears behind the `**` that connect/accept clear.
#[repr(C)]
pub struct DeviceHandle {
    /// `ncclNetDeviceType`.
    pub net_device_type: c_int,
    /// Version of the device offload.
    pub net_device_version: c_int,
    /// Device-side handle.
    pub handle: *mut c_void,
    /// Bytes of `handle`.
    pub size: usize,
    /// Whether the proxy must progress it.
    pub needs_proxy_progress: c_int,
}

/// `ncclNetProperties_v6_t`.
#[repr(C)]
pub struct PropsV6 {
    /// Device name (logs).
    pub name: *mut c_char,
    /// PCI path in /sys, or NULL (virtual NIC).
    pub pci_path: *mut c_char,
    /// Same guid = same physical port.
    pub guid: u64,
    /// `NCCL_PTR_*` bits.
    pub ptr_support: c_int,
    /// Port speed, Mbps.
    pub speed: c_int,
    /// Port number.
    pub port: c_int,
    /// Latency, microseconds (0: NCCL's default).
    pub latency: f32,
    /// Most comms.
    pub max_comms: c_int,
    /// Most buffers of one grouped irecv.
    pub max_recvs: c_int,
}

/// `ncclNetProperties_v7_t`.
#[repr(C)]
pub struct PropsV7 {
    /// As v6.
    pub name: *mut c_char,
    /// As v6.
    pub pci_path: *mut c_char,
    /// As v6.
    pub guid: u64,
    /// As v6.
    pub ptr_support: c_int,
    /// As v6.
    pub speed: c_int,
    /// As v6.
    pub port: c_int,
    /// As v6.
    pub latency: f32,
    /// As v6.
    pub max_comms: c_int,
    /// As v6.
    pub max_recvs: c_int,
    /// `ncclNetDeviceType`.
    pub net_device_type: c_int,
    /// Device offload version.
    pub net_device_version: c_int,
}

/// `ncclNetProperties_v8_t` (v7 plus `regIsGlobal` after `ptrSupport`).
#[repr(C)]
pub struct PropsV8 {
    /// As v6.
    pub name: *mut c_char,
    /// As v6.
    pub pci_path: *mut c_char,
    /// As v6.
    pub guid: u64,
    /// As v6.
    pub ptr_support: c_int,
    /// Whether registrations are global (a registration cache).
    pub reg_is_global: c_int,
    /// As v6.
    pub speed: c_int,
    /// As v6.
    pub port: c_int,
    /// As v6.
    pub latency: f32,
    /// As v6.
    pub max_comms: c_int,
    /// As v6.
    pub max_recvs: c_int,
    /// As v7.
    pub net_device_type: c_int,
    /// As v7.
    pub net_device_version: c_int,
}

/// `ncclNetVDeviceProps_v9_t` .. `_v11_t`.
#[repr(C)]
pub struct VDevPropsV9 {
    /// Devices fused.
    pub ndevs: c_int,
    /// Their indices.
    pub devs: [c_int; MAX_DEVS_PER_NIC_V11],
}

/// `ncclNetVDeviceProps_v12_t`.
#[repr(C)]
pub struct VDevPropsV12 {
    /// Devices fused.
    pub ndevs: c_int,
    /// Their indices.
    pub devs: [c_int; MAX_DEVS_PER_NIC_V12],
}

/// `ncclNetProperties_v9_t`, also `_v10_t`.
#[repr(C)]
pub struct PropsV9 {
    /// As v6.
    pub name: *mut c_char,
    /// As v6.
    pub pci_path: *mut c_char,
    /// As v6.
    pub guid: u64,
    /// As v6.
    pub ptr_support: c_int,
    /// As v8.
    pub reg_is_global: c_int,
    /// Flush after every GPU receive.
    pub force_flush: c_int,
    /// As v6.
    pub speed: c_int,
    /// As v6.
    pub port: c_int,
    /// As v6.
    pub latency: f32,
    /// As v6.
    pub max_comms: c_int,
    /// As v6.
    pub max_recvs: c_int,
    /// As v7.
    pub net_device_type: c_int,
    /// As v7.
    pub net_device_version: c_int,
    /// The physical devices behind this one.
    pub v_props: VDevPropsV9,
    /// Largest point-to-point transfer, bytes.
    pub max_p2p_bytes: usize,
    /// Largest collective transfer, bytes.
    pub max_coll_bytes: usize,
}

/// `ncclNetProperties_v11_t` (v9 plus `maxMultiRequestSize`).
#[repr(C)]
pub struct PropsV11 {
    /// As v9.
    pub v9: PropsV9,
    /// Most requests in one multi-request.
    pub max_multi_request_size: c_int,
}

/// `ncclNetProperties_v12_t`.
#[repr(C)]
pub struct PropsV12 {
    /// As v6.
    pub name: *mut c_char,
    /// As v6.
    pub pci_path: *mut c_char,
    /// As v6.
    pub guid: u64,
    /// As v6.
    pub ptr_support: c_int,
    /// As v8.
    pub reg_is_global: c_int,
    /// As v9.
    pub force_flush: c_int,
    /// As v6.
    pub speed: c_int,
    /// As v6.
    pub port: c_int,
    /// As v6.
    pub latency: f32,
    /// As v6.
    pub max_comms: c_int,
    /// As v6.
    pub max_recvs: c_int,
    /// As v7.
    pub net_device_type: c_int,
    /// As v7.
    pub net_device_version: c_int,
    /// As v9, with room for 8 devices.
    pub v_props: VDevPropsV12,
    /// As v9.
    pub max_p2p_bytes: usize,
    /// As v9.
    pub max_coll_bytes: usize,
    /// As v11.
    pub max_multi_request_size: c_int,
    /// Rail of the NIC, or `NCCL_NET_ID_UNDEF`.
    pub rail_id: i16,
    /// Plane of the NIC, or `NCCL_NET_ID_UNDEF`.
    pub plane_id: i16,
}

/// `ncclNetCommConfig_v10_t` .. `_v12_t`.
#[repr(C)]
pub struct CommConfig {
    /// Traffic class, or -1 (undefined).
    pub traffic_class: c_int,
}

/// `ncclNetCommAttr_v11_t` / `_v12_t`.
#[repr(C)]
pub struct CommAttr {
    /// Most peers at once.
    pub max_concurrent_peers: i32,
    /// Fewest peers at once.
    pub min_concurrent_peers: i32,
    /// Most flows per peer.
    pub max_flows_per_peer: i32,
    /// Fewest flows per peer.
    pub min_flows_per_peer: i32,
}

/// `ncclNetAttr_v11_t` / `_v12_t`.
#[repr(C)]
pub struct NetAttr {
    /// Of send comms.
    pub send_comm_attr: CommAttr,
    /// Of receive comms.
    pub recv_comm_attr: CommAttr,
    /// Collective operations (bitmask).
    pub op: u32,
    /// Algorithms (bitmask).
    pub algo: u32,
    /// Protocols (bitmask).
    pub proto: u32,
}

type P = *mut c_void;
type Pp = *mut *mut c_void;
type Dh = *mut *mut DeviceHandle;

/// Entries every version shares, in the order they appear after `regMr`.
macro_rules! net_struct {
    (
        $(#[$m:meta])* $name:ident {
            init: $init:ty, get_properties: $props:ty,
            listen: $listen:ty, connect: $connect:ty, accept: $accept:ty,
            reg_mr: $reg:ty, isend: $isend:ty, irecv: $irecv:ty
            $(, $extra:ident : $ety:ty)* $(,)?
        }
    ) => {
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            /// Name NCCL_NET matches.
            pub name: *const c_char,
            /// Initialise.
            pub init: $init,
            /// Number of devices.
            pub devices: unsafe extern "C" fn(ndev: *mut c_int) -> NcclResult,
            /// Properties of a device.
            pub get_properties: $props,
            /// Listen (receive side).
            pub listen: $listen,
            /// Connect (send side), non-blocking.
            pub connect: $connect,
            /// Accept (receive side), non-blocking.
            pub accept: $accept,
            /// Register host memory.
            pub reg_mr: $reg,
            /// Register a DMA-BUF (refused: host memory only).
            pub reg_mr_dma_buf: unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, Pp) -> NcclResult,
            /// Deregister.
            pub dereg_mr: unsafe extern "C" fn(P, P) -> NcclResult,
            /// Post a send.
            pub isend: $isend,
            /// Post a receive.
            pub irecv: $irecv,
            /// Flush GPU receives (never needed: host memory only).
            pub iflush: unsafe extern "C" fn(P, c_int, Pp, *mut c_int, Pp, Pp) -> NcclResult,
            /// Poll a request.
            pub test: unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> NcclResult,
            /// Close a send comm.
            pub close_send: unsafe extern "C" fn(P) -> NcclResult,
            /// Close a receive comm.
            pub close_recv: unsafe extern "C" fn(P) -> NcclResult,
            /// Close a listen comm.
            pub close_listen: unsafe extern "C" fn(P) -> NcclResult,
            $(
                /// A later version's entry (see NCCL's header).
                pub $extra: $ety,
            )*
        }
        // SAFETY: the struct is immutable after initialisation; its pointers are to
        // 'static strings and functions.
        unsafe impl Sync for $name {}
    };
}

/// `getDeviceMr` (v7+; NULL here: no device offload).
pub type GetDeviceMr = Option<unsafe extern "C" fn(P, P, Pp) -> NcclResult>;
/// `irecvConsumed` (v7+; NULL here).
pub type IrecvConsumed = Option<unsafe extern "C" fn(P, c_int, P) -> NcclResult>;

net_struct!(
    /// `ncclNet_v6_t`.
    NetV6 {
        init: unsafe extern "C" fn(Option<Logger>) -> NcclResult,
        get_properties: unsafe extern "C" fn(c_int, *mut PropsV6) -> NcclResult,
        listen: unsafe extern "C" fn(c_int, P, Pp) -> NcclResult,
        connect: unsafe extern "C" fn(c_int, P, Pp) -> NcclResult,
        accept: unsafe extern "C" fn(P, Pp) -> NcclResult,
        reg_mr: unsafe extern "C" fn(P, P, c_int, c_int, Pp) -> NcclResult,
        isend: unsafe extern "C" fn(P, P, c_int, c_int, P, Pp) -> NcclResult,
        irecv: unsafe extern "C" fn(P, c_int, Pp, *mut c_int, *mut c_int, Pp, Pp) -> NcclResult,
    }
);

net_struct!(
    /// `ncclNet_v7_t`.
    NetV7 {
        init: unsafe extern "C" fn(Option<Logger>) -> NcclResult,
        get_properties: unsafe extern "C" fn(c_int, *mut PropsV7) -> NcclResult,
        listen: unsafe extern "C" fn(c_int, P, Pp) -> NcclResult,
        connect: unsafe extern "C" fn(c_int, P, Pp, Dh) -> NcclResult,
        accept: unsafe extern "C" fn(P, Pp, Dh) -> NcclResult,
        reg_mr: unsafe extern "C" fn(P, P, c_int, c_int, Pp) -> NcclResult,
        isend: unsafe extern "C" fn(P, P, c_int, c_int, P, Pp) -> NcclResult,
        irecv: unsafe extern "C" fn(P, c_int, Pp, *mut c_int, *mut c_int, Pp, Pp) -> NcclResult,
        get_device_mr: GetDeviceMr,
        irecv_consumed: IrecvConsumed,
    }
);

net_struct!(
    /// `ncclNet_v8_t`.
    NetV8 {
        init: unsafe extern "C" fn(Option<Logger>) -> NcclResult,
        get_properties: unsafe extern "C" fn(c_int, *mut PropsV8) -> NcclResult,
        listen: unsafe extern "C" fn(c_int, P, Pp) -> NcclResult,
        connect: unsafe extern "C" fn(c_int, P, Pp, Dh) -> NcclResult,
        accept: unsafe extern "C" fn(P, Pp, Dh) -> NcclResult,
        reg_mr: unsafe extern "C" fn(P, P, usize, c_int, Pp) -> NcclResult,
        isend: unsafe extern "C" fn(P, P, c_int, c_int, P, Pp) -> NcclResult,
        irecv: unsafe extern "C" fn(P, c_int, Pp, *mut c_int, *mut c_int, Pp, Pp) -> NcclResult,
        get_device_mr: GetDeviceMr,
        irecv_consumed: IrecvConsumed,
    }
);

/// `makeVDevice` of v9 .. v11 (NULL here: no NIC fusion).
pub type MakeVDeviceV9 = Option<unsafe extern "C" fn(*mut c_int, *mut VDevPropsV9) -> NcclResult>;
/// `makeVDevice` of v12 (NULL here).
pub type MakeVDeviceV12 = Option<unsafe extern "C" fn(*mut c_int, *mut VDevPropsV12) -> NcclResult>;

net_struct!(
    /// `ncclNet_v9_t`.
    NetV9 {
        init: unsafe extern "C" fn(Option<Logger>) -> NcclResult,
        get_properties: unsafe extern "C" fn(c_int, *mut PropsV9) -> NcclResult,
        listen: unsafe extern "C" fn(c_int, P, Pp) -> NcclResult,
        connect: unsafe extern "C" fn(c_int, P, Pp, Dh) -> NcclResult,
        accept: unsafe extern "C" fn(P, Pp, Dh) -> NcclResult,
        reg_mr: unsafe extern "C" fn(P, P, usize, c_int, Pp) -> NcclResult,
        isend: unsafe extern "C" fn(P, P, usize, c_int, P, Pp) -> NcclResult,
        irecv: unsafe extern "C" fn(P, c_int, Pp, *mut usize, *mut c_int, Pp, Pp) -> NcclResult,
        get_device_mr: GetDeviceMr,
        irecv_consumed: IrecvConsumed,
        make_v_device: MakeVDeviceV9,
    }
);

net_struct!(
    /// `ncclNet_v10_t`.
    NetV10 {
        init: unsafe extern "C" fn(Option<Logger>, Option<ProfilerCallback>) -> NcclResult,
        get_properties: unsafe extern "C" fn(c_int, *mut PropsV9) -> NcclResult,
        listen: unsafe extern "C" fn(c_int, P, Pp) -> NcclResult,
        connect: unsafe extern "C" fn(c_int, *mut CommConfig, P, Pp, Dh) -> NcclResult,
        accept: unsafe extern "C" fn(P, Pp, Dh) -> NcclResult,
        reg_mr: unsafe extern "C" fn(P, P, usize, c_int, Pp) -> NcclResult,
        isend: unsafe extern "C" fn(P, P, usize, c_int, P, P, Pp) -> NcclResult,
        irecv: unsafe extern "C" fn(P, c_int, Pp, *mut usize, *mut c_int, Pp, Pp, Pp) -> NcclResult,
        get_device_mr: GetDeviceMr,
        irecv_consumed: IrecvConsumed,
        make_v_device: MakeVDeviceV9,
    }
);

/// `init` of v11 / v12.
pub type InitV11 = unsafe extern "C" fn(
    Pp,
    u64,
    *mut CommConfig,
    Option<Logger>,
    Option<ProfilerCallback>,
) -> NcclResult;

net_struct!(
    /// `ncclNet_v11_t`.
    NetV11 {
        init: InitV11,
        get_properties: unsafe extern "C" fn(c_int, *mut PropsV11) -> NcclResult,
        listen: unsafe extern "C" fn(P, c_int, P, Pp) -> NcclResult,
        connect: unsafe extern "C" fn(P, c_int, P, Pp, Dh) -> NcclResult,
        accept: unsafe extern "C" fn(P, Pp, Dh) -> NcclResult,
        reg_mr: unsafe extern "C" fn(P, P, usize, c_int, Pp) -> NcclResult,
        isend: unsafe extern "C" fn(P, P, usize, c_int, P, P, Pp) -> NcclResult,
        irecv: unsafe extern "C" fn(P, c_int, Pp, *mut usize, *mut c_int, Pp, Pp, Pp) -> NcclResult,
        get_device_mr: GetDeviceMr,
        irecv_consumed: IrecvConsumed,
        make_v_device: MakeVDeviceV9,
        finalize: unsafe extern "C" fn(P) -> NcclResult,
        set_net_attr: unsafe extern "C" fn(P, *mut NetAttr) -> NcclResult,
    }
);

net_struct!(
    /// `ncclNet_v12_t`.
    NetV12 {
        init: InitV11,
        get_properties: unsafe extern "C" fn(c_int, *mut PropsV12) -> NcclResult,
        listen: unsafe extern "C" fn(P, c_int, P, Pp) -> NcclResult,
        connect: unsafe extern "C" fn(P, c_int, P, Pp, Dh) -> NcclResult,
        accept: unsafe extern "C" fn(P, Pp, Dh) -> NcclResult,
        reg_mr: unsafe extern "C" fn(P, P, usize, c_int, Pp) -> NcclResult,
        isend: unsafe extern "C" fn(P, P, usize, c_int, P, P, Pp) -> NcclResult,
        irecv: unsafe extern "C" fn(P, c_int, Pp, *mut usize, *mut c_int, Pp, Pp, Pp) -> NcclResult,
        get_device_mr: GetDeviceMr,
        irecv_consumed: IrecvConsumed,
        make_v_device: MakeVDeviceV12,
        finalize: unsafe extern "C" fn(P) -> NcclResult,
        set_net_attr: unsafe extern "C" fn(P, *mut NetAttr) -> NcclResult,
    }
);
