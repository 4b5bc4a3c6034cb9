//! `fi_getinfo` for the `mrc` provider: checks the application's hints against what the
//! provider offers and answers one `fi_info`, allocated with the C allocator (libfabric
//! frees it with `fi_freeinfo`, that is `free()` on every part).

use crate::ffi::*;
use crate::{fi_version, guard};
use mrc_fabric::engine::setup::SECRET_BYTES;
use mrc_fabric::engine::{ConnHandle, ListenOptions, SetupCarrier};
use mrc_fabric::netns::NetNs;
use mrc_fabric::udp::mtu::MAX_MTU_PAYLOAD_BYTES;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::raw::{c_char, c_int, c_void};

/// The provider's name, as `fi_info -p` and `FI_PROVIDER` take it.
pub const PROVIDER_NAME: &str = "mrc";
/// The fabric's name (`fabric_attr->name`).
pub const FABRIC_NAME: &CStr = c"mrc";
/// The domain's name (`domain_attr->name`): the endpoints run on UDP sockets.
pub const DOMAIN_NAME: &CStr = c"udp";
/// Bytes of an endpoint address (`fi_getname`, `fi_av_insert`): mrc's connection handle,
/// the listener's UDP address, a 32-byte secret and the flag of in-band set-up
/// ([`LISTEN_OPTIONS`]).
pub const ADDR_LEN: usize = mrc_fabric::engine::setup::HANDLE_BYTES;
/// Largest message (`ep_attr->max_msg_size`) of `FI_MSG` and `FI_TAGGED`: 1 GiB. A send
/// longer than [`FRAGMENT_SIZE`] moves as fragments of a staging slot each, which the
/// receiver places in order into the matched receive (docs/LIBFABRIC.md, "How a message
/// moves"); the receiver's memory does not grow with the size. The bound is the sender's:
/// a send is copied at the call (the caller's buffer is free on return), so one send may
/// hold a copy of this size until it leaves.
pub const MAX_MSG_SIZE: usize = 1 << 30;
/// Bytes of one staging slot past the header: the largest message sent as one SEND, and
/// the largest RMA write (`fi_write` and friends).
pub const FRAGMENT_SIZE: usize = 1 << 20;
/// The secret of an endpoint address that `fi_getinfo` builds from a node and service
/// (docs/LIBFABRIC.md, "Addresses from a node and service"): public, the same for every
/// such address, so that a peer that knows only the host and port can build the address.
/// The handshake then proves nothing about the peer: anyone who can reach the port can
/// connect, as with libfabric's tcp provider.
pub const NAMED_SECRET: [u8; SECRET_BYTES] = *b"mrc-fi: an address named by host";
/// How every endpoint listens: connections set up in band, in UDP datagrams to the
/// listener's own UDP port ([`SetupCarrier::Udp`], issue 44); no TCP socket. Packets
/// are not authenticated.
pub const LISTEN_OPTIONS: ListenOptions = ListenOptions {
    authenticate_packets: false,
    carrier: SetupCarrier::Udp,
};
/// Largest `fi_inject` (`tx_attr->inject_size`).
pub const INJECT_SIZE: usize = 4096;
/// Most iovecs of one send or receive (`iov_limit`).
pub const IOV_LIMIT: usize = 4;
/// Depth of the transmit and receive queues (`tx_attr->size`, `rx_attr->size`).
pub const QUEUE_SIZE: usize = 1024;

/// Bytes of remote CQ data a message carries (`domain_attr->cq_data_size`): the
/// `data` of `fi_senddata` / `fi_tsenddata`, its low 4 bytes.
pub const CQ_DATA_SIZE: usize = 4;

/// The capabilities: untagged and tagged messages, receives restricted to a source
/// (`FI_DIRECTED_RECV`), the source of a receive (`FI_SOURCE`: `fi_cq_readfrom`), both
/// directions, RMA writes both ways (`FI_RMA`, `FI_WRITE`, `FI_REMOTE_WRITE`: mrc's
/// WRITE and WRITE_WITH_IMM; no `FI_READ`: the transport has no READ) and, when asked,
/// remote write events for counters (`FI_RMA_EVENT`), to this host and to others.
pub const CAPS: u64 = FI_MSG as u64
    | FI_TAGGED as u64
    | FI_SEND as u64
    | FI_RECV as u64
    | FI_RMA as u64
    | FI_WRITE as u64
    | FI_REMOTE_WRITE as u64
    | FI_RMA_EVENT
    | FI_DIRECTED_RECV
    | FI_SOURCE
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM;

/// Bytes of a memory region key (`domain_attr->mr_key_size`): the transport's rkey, which
/// every WRITE packet carries, has 32 bits.
pub const MR_KEY_SIZE: usize = 4;

/// The `mr_mode` bits the provider keeps when the application offers them (API 1.5 and
/// later): provider-chosen keys and virtual addresses, as the application chose. It needs
/// none of them (sends and writes are copied, so `FI_MR_LOCAL` is not needed, and it
/// registers a region with every endpoint of the domain itself, so not
/// `FI_MR_ENDPOINT` either); with `mr_mode` 0 keys are the application's and RMA
/// addresses are offsets into the region.
pub const MR_MODE_KEPT: u32 = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;

/// `ep_attr->mem_tag_format`: all 64 bits of a tag are the application's
/// (libfabric's `FI_TAG_GENERIC`).
pub const MEM_TAG_FORMAT: u64 = 0xaaaa_aaaa_aaaa_aaaa;

/// The primary capabilities: given only when asked for (fi_getinfo(3)).
const PRIMARY: u64 = FI_MSG as u64 | FI_TAGGED as u64 | FI_RMA as u64 | FI_DIRECTED_RECV;
/// The primary modifiers of messages: both directions unless the hints name one.
const MODIFIERS: u64 = FI_SEND as u64 | FI_RECV as u64;
/// The primary modifiers of RMA: both sides of a write unless the hints name one.
const RMA_MODIFIERS: u64 = FI_WRITE as u64 | FI_REMOTE_WRITE as u64;
/// The secondary capabilities, reported whether asked for or not.
const SECONDARY: u64 = FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;

/// The capabilities of an `fi_info` answering hints that ask for `asked`: the primary
/// ones asked for (all when none is), the modifiers of each group asked for (the whole
/// group when none of it is; `FI_SEND` / `FI_RECV` only with messages, `FI_WRITE` /
/// `FI_REMOTE_WRITE` only with `FI_RMA`), every secondary one.
fn caps_for(asked: u64) -> u64 {
    let primary = match asked & PRIMARY {
        0 => PRIMARY,
        p => p,
    };
    let group = |g: u64| match asked & g {
        0 => g,
        m => m,
    };
    let msg = if primary & (FI_MSG | FI_TAGGED) as u64 != 0 {
        group(MODIFIERS)
    } else {
        0
    };
    let rma = if primary & FI_RMA as u64 != 0 {
        group(RMA_MODIFIERS)
    } else {
        0
    };
    // FI_RMA_EVENT only when asked: it costs a look at every accepted QP per pass.
    primary | msg | rma | (asked & FI_RMA_EVENT) | SECONDARY
}

/// The `mr_mode` answering an application that offers `offered` (API `version`): the
/// bits of [`MR_MODE_KEPT`] it offers; `FI_MR_BASIC` and `FI_MR_SCALABLE` (the API 1.0
/// modes) as they are; `FI_MR_SCALABLE` for API before 1.5 when it offers none.
pub(crate) fn mr_mode_for(version: u32, offered: c_int) -> c_int {
    let basic = FI_MR_BASIC as c_int;
    let scalable = FI_MR_SCALABLE as c_int;
    if offered == basic || offered == scalable {
        return offered;
    }
    if version < fi_version(1, 5) {
        return scalable;
    }
    offered & MR_MODE_KEPT as c_int
}

/// `fi_freeinfo` of what this module allocated (the provider must not call into
/// libfabric: its tests run without it).
pub unsafe fn free_info(i: *mut fi_info) {
    let mut cur = i;
    while !cur.is_null() {
        // SAFETY: an fi_info this module built from calloc'ed parts.
        unsafe {
            let next = (*cur).next;
            libc::free((*cur).src_addr);
            libc::free((*cur).dest_addr);
            libc::free((*cur).tx_attr.cast());
            libc::free((*cur).rx_attr.cast());
            libc::free((*cur).ep_attr.cast());
            if let Some(d) = (*cur).domain_attr.as_mut() {
                libc::free(d.name.cast());
            }
            libc::free((*cur).domain_attr.cast());
            if let Some(f) = (*cur).fabric_attr.as_mut() {
                libc::free(f.name.cast());
                libc::free(f.prov_name.cast());
            }
            libc::free((*cur).fabric_attr.cast());
            libc::free(cur.cast());
            cur = next;
        }
    }
}

fn calloc<T>() -> *mut T {
    // SAFETY: plain allocation; every libfabric attr struct is valid when zeroed.
    unsafe { libc::calloc(1, std::mem::size_of::<T>()).cast() }
}

fn strdup(s: &CStr) -> *mut c_char {
    // SAFETY: a NUL-terminated string.
    unsafe { libc::strdup(s.as_ptr()) }
}

/// Why hints do not match (`FI_LOG`-free: returned as `-FI_ENODATA`).
fn no_match() -> c_int {
    -(FI_ENODATA as c_int)
}

unsafe fn opt<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: the caller's pointer, null or live.
    unsafe { p.as_ref() }
}

fn name_is(p: *const c_char, want: &CStr) -> bool {
    // SAFETY: a NUL-terminated string from the application, when non-null.
    p.is_null() || unsafe { CStr::from_ptr(p) } == want
}

/// Checks the hints; `Err(-FI_ENODATA)` when the provider cannot give what they ask.
unsafe fn check_hints(h: &fi_info) -> Result<(), c_int> {
    if h.caps & !CAPS != 0 {
        return Err(no_match());
    }
    if h.addr_format != FI_FORMAT_UNSPEC {
        return Err(no_match());
    }
    // SAFETY (all blocks below): the hints' attr pointers, null or live.
    if let Some(e) = unsafe { opt(h.ep_attr) } {
        if e.type_ != FI_EP_UNSPEC && e.type_ != FI_EP_RDM {
            return Err(no_match());
        }
        if e.protocol != FI_PROTO_UNSPEC || e.max_msg_size > MAX_MSG_SIZE {
            return Err(no_match());
        }
        if e.tx_ctx_cnt > 1 || e.rx_ctx_cnt > 1 {
            return Err(no_match());
        }
    }
    if let Some(d) = unsafe { opt(h.domain_attr) } {
        if !name_is(d.name, DOMAIN_NAME) {
            return Err(no_match());
        }
        // Domain capabilities: to this host and others; no FI_SHARED_AV.
        if d.caps & !(FI_LOCAL_COMM | FI_REMOTE_COMM) != 0 {
            return Err(no_match());
        }
        if !matches!(d.av_type, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE) {
            return Err(no_match());
        }
        if d.control_progress == FI_PROGRESS_AUTO || d.data_progress == FI_PROGRESS_AUTO {
            return Err(no_match());
        }
        if d.cq_data_size > CQ_DATA_SIZE {
            return Err(no_match());
        }
        // The provider requires no mr_mode bit (it copies sends and writes through its
        // own registered slots, registers a region with every endpoint itself), so every
        // mr_mode of an application fits (mr_mode_for keeps the bits it uses).
    }
    if let Some(f) = unsafe { opt(h.fabric_attr) }
        && !name_is(f.name, FABRIC_NAME)
    {
        return Err(no_match());
    }
    if let Some(t) = unsafe { opt(h.tx_attr) } {
        // Message order: send after send only (one QP per peer and direction).
        if t.msg_order & !(FI_ORDER_SAS as u64) != 0 {
            return Err(no_match());
        }
        if t.caps & !CAPS != 0 || t.inject_size > INJECT_SIZE || t.iov_limit > IOV_LIMIT {
            return Err(no_match());
        }
        if t.size > QUEUE_SIZE {
            return Err(no_match());
        }
    }
    if let Some(r) = unsafe { opt(h.rx_attr) } {
        if r.msg_order & !(FI_ORDER_SAS as u64) != 0 {
            return Err(no_match());
        }
        if r.caps & !CAPS != 0 || r.iov_limit > IOV_LIMIT || r.size > QUEUE_SIZE {
            return Err(no_match());
        }
        if r.total_buffered_recv > 0 {
            return Err(no_match());
        }
    }
    Ok(())
}

/// Builds one fi_info with the addresses `addrs` names (null on allocation failure; the
/// parts allocated so far are freed).
unsafe fn build(version: u32, h: Option<&fi_info>, addrs: Named) -> *mut fi_info {
    let i: *mut fi_info = calloc();
    if i.is_null() {
        return i;
    }
    // SAFETY: i is a zeroed, owned fi_info; every part below is calloc'ed and owned by it.
    unsafe {
        let info = &mut *i;
        info.tx_attr = calloc();
        info.rx_attr = calloc();
        info.ep_attr = calloc();
        info.domain_attr = calloc();
        info.fabric_attr = calloc();
        if info.tx_attr.is_null()
            || info.rx_attr.is_null()
            || info.ep_attr.is_null()
            || info.domain_attr.is_null()
            || info.fabric_attr.is_null()
        {
            free_info(i);
            return std::ptr::null_mut();
        }
        let asked = h.map_or(0, |h| h.caps);
        info.caps = caps_for(asked);
        info.mode = 0;
        info.addr_format = FI_FORMAT_UNSPEC;

        let t = &mut *info.tx_attr;
        t.caps = info.caps
            & (FI_MSG as u64 | FI_TAGGED as u64 | FI_SEND as u64 | FI_RMA as u64 | FI_WRITE as u64);
        // FI_COMPLETION asked in the hints' op_flags stays a default of the endpoint (sends
        // and receives complete under FI_SELECTIVE_COMPLETION too).
        let asked_op = |a: Option<u64>| a.unwrap_or(0) & FI_COMPLETION as u64;
        let tx_op = asked_op(h.and_then(|h| opt(h.tx_attr)).map(|t| t.op_flags));
        let rx_op = asked_op(h.and_then(|h| opt(h.rx_attr)).map(|r| r.op_flags));
        t.op_flags = FI_TRANSMIT_COMPLETE as u64 | tx_op;
        t.msg_order = FI_ORDER_SAS as u64;
        t.comp_order = FI_ORDER_NONE as u64;
        t.inject_size = INJECT_SIZE;
        t.size = QUEUE_SIZE;
        t.iov_limit = IOV_LIMIT;
        t.rma_iov_limit = if info.caps & FI_RMA as u64 != 0 { 1 } else { 0 };

        let r = &mut *info.rx_attr;
        r.caps = info.caps
            & (FI_MSG as u64
                | FI_TAGGED as u64
                | FI_RECV as u64
                | FI_RMA as u64
                | FI_REMOTE_WRITE as u64
                | FI_RMA_EVENT
                | FI_DIRECTED_RECV
                | FI_SOURCE);
        r.op_flags = rx_op;
        r.msg_order = FI_ORDER_SAS as u64;
        r.comp_order = FI_ORDER_NONE as u64;
        r.size = QUEUE_SIZE;
        r.iov_limit = IOV_LIMIT;

        let e = &mut *info.ep_attr;
        e.type_ = FI_EP_RDM;
        e.protocol = FI_PROTO_UNSPEC;
        e.protocol_version = 1;
        e.max_msg_size = MAX_MSG_SIZE;
        e.tx_ctx_cnt = 1;
        e.rx_ctx_cnt = 1;
        // Every bit of a tag is matched (FI_TAG_GENERIC: one field of 64 bits).
        e.mem_tag_format = MEM_TAG_FORMAT;

        let d = &mut *info.domain_attr;
        d.name = strdup(DOMAIN_NAME);
        d.threading = FI_THREAD_SAFE;
        d.control_progress = FI_PROGRESS_MANUAL;
        d.data_progress = FI_PROGRESS_MANUAL;
        d.resource_mgmt = FI_RM_ENABLED;
        d.av_type = FI_AV_UNSPEC;
        let offered = h.and_then(|h| opt(h.domain_attr)).map_or(0, |d| d.mr_mode);
        d.mr_mode = mr_mode_for(version, offered);
        d.mr_key_size = MR_KEY_SIZE;
        d.cq_data_size = CQ_DATA_SIZE;
        d.cq_cnt = 256;
        d.ep_cnt = 256;
        d.tx_ctx_cnt = 1;
        d.rx_ctx_cnt = 1;
        d.max_ep_tx_ctx = 1;
        d.max_ep_rx_ctx = 1;
        d.mr_iov_limit = 1;
        d.mr_cnt = 65536;
        d.caps = FI_LOCAL_COMM | FI_REMOTE_COMM;

        let f = &mut *info.fabric_attr;
        f.name = strdup(FABRIC_NAME);
        f.prov_version = crate::PROVIDER_VERSION;
        f.api_version = version;

        if d.name.is_null() || f.name.is_null() {
            free_info(i);
            return std::ptr::null_mut();
        }
        // The source: from the node and service, else the hints' (when it is one of
        // ours), else the provider's IP and a port the kernel picks.
        let src = addrs
            .src
            .or_else(|| h.and_then(|h| hint_addr(h.src_addr, h.src_addrlen, true)))
            .or_else(|| default_ip().map(|ip| named(SocketAddr::new(ip, 0))));
        // The destination: from the node and service, else a peer's address in the hints
        // (fi_pingpong's client passes the server's) when it is one of ours.
        let dest = addrs
            .dest
            .or_else(|| h.and_then(|h| hint_addr(h.dest_addr, h.dest_addrlen, false)));
        for (a, at, len) in [
            (src, &mut info.src_addr, &mut info.src_addrlen),
            (dest, &mut info.dest_addr, &mut info.dest_addrlen),
        ] {
            let Some(b) = a else { continue };
            let p: *mut c_void = libc::malloc(ADDR_LEN);
            if p.is_null() {
                free_info(i);
                return std::ptr::null_mut();
            }
            std::ptr::copy_nonoverlapping(b.as_ptr(), p.cast(), ADDR_LEN);
            *at = p;
            *len = ADDR_LEN;
        }
    }
    i
}

/// The addresses `fi_getinfo`'s node and service name.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Named {
    src: Option<[u8; ADDR_LEN]>,
    dest: Option<[u8; ADDR_LEN]>,
}

/// The IP an endpoint binds when nothing names one: `FI_MRC_ADDR`, else plane 0's
/// address of a good `FI_MRC_PLANES`, else 127.0.0.1; `None` when `FI_MRC_ADDR` is not an
/// IP.
pub(crate) fn default_ip() -> Option<IpAddr> {
    match std::env::var("FI_MRC_ADDR") {
        Ok(s) => s.trim().parse().ok(),
        Err(_) => Some(
            plane_list()
                .ok()
                .flatten()
                .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |ips| ips[0]),
        ),
    }
}

/// `FI_MRC_PLANES` as set: `None` when unset or empty (after trimming).
fn planes_var() -> Option<String> {
    let v = std::env::var_os("FI_MRC_PLANES")?;
    let s = v.to_string_lossy().trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// The plane addresses of `FI_MRC_PLANES` (`list`) against `FI_MRC_ADDR` (`addr`, when
/// set): `Ok(None)` without a list (one plane); the addresses, plane 0 first, for 2 to
/// [`mrc_fabric::udp::MAX_PLANE_IPS`] unicast IPs of one family, none repeated
/// ([`mrc_fabric::udp::parse_plane_list`], NCCL's `NCCL_SPRAY_PLANES` rule), with
/// `FI_MRC_ADDR` left out or naming plane 0; otherwise the line that says why.
pub(crate) fn planes_from(
    list: Option<&str>,
    addr: Option<&str>,
) -> Result<Option<Vec<IpAddr>>, String> {
    let Some(list) = list else {
        return Ok(None);
    };
    let ips = mrc_fabric::udp::parse_plane_list(list)
        .map_err(|e| format!("FI_MRC_PLANES={list}: {e}"))?;
    if let Some(a) = addr
        && a.trim().parse::<IpAddr>().ok() != Some(ips[0])
    {
        return Err(format!(
            "FI_MRC_PLANES={list}: FI_MRC_ADDR={a} is not plane 0's address {}: leave FI_MRC_ADDR out or give plane 0's",
            ips[0]
        ));
    }
    Ok(Some(ips))
}

/// [`planes_from`] of the environment, without a line.
fn plane_list() -> Result<Option<Vec<IpAddr>>, String> {
    let addr = std::env::var("FI_MRC_ADDR").ok();
    planes_from(planes_var().as_deref(), addr.as_deref())
}

/// `FI_MRC_PLANES`: this host's address on each plane ([`planes_from`]); `Ok(None)` when
/// it is unset or empty. `Err(FI_EINVAL)`, with a log line, when it is refused.
pub(crate) fn planes_env() -> Result<Option<Vec<IpAddr>>, u32> {
    plane_list().map_err(|m| {
        crate::log(&m);
        FI_EINVAL
    })
}

/// How many planes the endpoints of this process have: `FI_MRC_PLANES`'s addresses, 1
/// without it (or with a bad one, which `fi_getinfo` and `fi_endpoint` refuse).
pub(crate) fn plane_count() -> usize {
    plane_list().ok().flatten().map_or(1, |ips| ips.len())
}

/// Whether every plane address `ips` can be bound in `ns` (this thread's namespace when
/// `None`), and plane 0 is the endpoint's source address `src`. `Err(FI_EINVAL)` for a
/// source address that is not plane 0's, `Err(FI_EADDRNOTAVAIL)` for an address that
/// cannot be bound, each with a log line.
pub(crate) fn check_planes(ns: Option<&NetNs>, ips: &[IpAddr], src: IpAddr) -> Result<(), u32> {
    let list = planes_var().unwrap_or_default();
    if src != ips[0] {
        crate::log(&format!(
            "FI_MRC_PLANES={list}: the endpoint's source address {src} is not plane 0's address {}",
            ips[0]
        ));
        return Err(FI_EINVAL);
    }
    for (p, &ip) in ips.iter().enumerate() {
        if let Err(e) = try_bind(ns, ip) {
            let where_ = ns.map_or_else(
                || "this process's network namespace".to_string(),
                |ns| format!("FI_MRC_NETNS={}", ns.path()),
            );
            crate::log(&format!(
                "FI_MRC_PLANES={list}: cannot bind plane {p}'s address {ip} in {where_} ({e}): give addresses of that namespace"
            ));
            return Err(FI_EADDRNOTAVAIL);
        }
    }
    Ok(())
}

/// Smallest `FI_MRC_MTU`, payload bytes (mrc-perf's `--mtu` takes the same range).
pub(crate) const MIN_MTU_ENV_BYTES: u32 = 64;

/// `FI_MRC_MTU`: the payload bytes per data packet an endpoint sends, overriding the
/// one its source address's interface MTU gives ([`mtu_payload_bytes`]); `Ok(None)` when
/// it is unset or empty. `Err(FI_EINVAL)`, with a log line, when it is not a number in
/// [`MIN_MTU_ENV_BYTES`]`..=`[`MAX_MTU_PAYLOAD_BYTES`].
pub(crate) fn mtu_env() -> Result<Option<u32>, u32> {
    let Some(v) = std::env::var_os("FI_MRC_MTU") else {
        return Ok(None);
    };
    let s = v.to_str().map(str::trim);
    if s == Some("") {
        return Ok(None);
    }
    match s.and_then(|s| s.parse::<u32>().ok()) {
        Some(m) if (MIN_MTU_ENV_BYTES..=MAX_MTU_PAYLOAD_BYTES).contains(&m) => Ok(Some(m)),
        _ => {
            crate::log(&format!(
                "FI_MRC_MTU={v:?}: not a payload size in {MIN_MTU_ENV_BYTES}..={MAX_MTU_PAYLOAD_BYTES} bytes"
            ));
            Err(FI_EINVAL)
        }
    }
}

/// The payload bytes per data packet of an endpoint at `ip`: `FI_MRC_MTU` when set
/// ([`mtu_env`]), otherwise the MTU of the interface holding `ip` in this thread's
/// namespace less the IP, UDP and mrc headers, at most [`MAX_MTU_PAYLOAD_BYTES`]
/// ([`mrc_fabric::udp::mtu::payload_for_link_mtu`]: 65000 on loopback, 1416 on a
/// 1500-byte IPv4 Ethernet), and the transport's default (4096) when no interface holds
/// `ip` or the kernel does not say. `Err(FI_EINVAL)` for a bad `FI_MRC_MTU`.
pub(crate) fn mtu_payload_bytes(ip: IpAddr) -> Result<u32, u32> {
    if let Some(m) = mtu_env()? {
        return Ok(m);
    }
    Ok(match mrc_fabric::udp::mtu::source_mtu_bytes(ip) {
        Ok(Some((_, mtu))) => mrc_fabric::udp::mtu::payload_for_link_mtu(mtu, ip, false),
        _ => {
            mrc_fabric::engine::QpConfig::default()
                .conn
                .send
                .mtu_payload_bytes
        }
    })
}

/// The network namespace `FI_MRC_NETNS` names (`ip netns`'s NAME, i.e.
/// `/run/netns/NAME`, or a path to a namespace file), where every endpoint opens its
/// sockets; `None` when it is unset or empty (the process's own namespace).
/// `Err(FI_EINVAL)`, with a log line, when it cannot be opened or entered.
pub(crate) fn netns() -> Result<Option<NetNs>, u32> {
    let Some(v) = std::env::var_os("FI_MRC_NETNS") else {
        return Ok(None);
    };
    let Some(name) = v.to_str() else {
        crate::log(&format!("FI_MRC_NETNS={v:?}: not UTF-8"));
        return Err(FI_EINVAL);
    };
    let name = name.trim();
    if name.is_empty() {
        return Ok(None);
    }
    NetNs::open(name).map(Some).map_err(|e| {
        crate::log(&format!("FI_MRC_NETNS={name}: {e}"));
        FI_EINVAL
    })
}

/// Binds a UDP socket to `ip` (any port) in `ns`, or this thread's namespace when `None`,
/// and closes it: whether the address is one of the namespace's; the error as text.
fn try_bind(ns: Option<&NetNs>, ip: IpAddr) -> Result<(), String> {
    let bind = || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).map(drop);
    match ns {
        None => bind().map_err(|e| e.to_string()),
        Some(ns) => ns.run(bind).and_then(|r| r.map_err(|e| e.to_string())),
    }
}

/// Whether a UDP socket can bind `ip` inside `ns` (the address is one of the
/// namespace's); `Err(FI_EADDRNOTAVAIL)`, with a log line, when it cannot.
fn check_bind(ns: &NetNs, ip: IpAddr) -> Result<(), u32> {
    try_bind(Some(ns), ip).map_err(|e| {
        crate::log(&format!(
            "FI_MRC_NETNS={}: cannot bind {ip} there ({e}): set FI_MRC_ADDR to an address of that namespace",
            ns.path()
        ));
        FI_EADDRNOTAVAIL
    })
}

/// The endpoint address of a listener at `at` with the public [`NAMED_SECRET`] (port 0:
/// the kernel picks the port when the endpoint opens, with a secret of its own).
/// It states this process's plane count ([`plane_count`]): a node and service cannot say
/// the peer's, so the provider takes the peer to be set up as this process is (the
/// set-up refuses a peer with another count).
fn named(at: SocketAddr) -> [u8; ADDR_LEN] {
    let h = ConnHandle::new(at, NAMED_SECRET, LISTEN_OPTIONS);
    h.clone().with_planes(plane_count()).unwrap_or(h).to_bytes()
}

/// An endpoint address a caller passed (`fi_info`'s `src_addr` or `dest_addr`): `len`
/// bytes at `p`, kept when they are one of ours (a source may have port 0).
///
/// # Safety
/// `p` is null or `len` readable bytes.
unsafe fn hint_addr(p: *const c_void, len: usize, src: bool) -> Option<[u8; ADDR_LEN]> {
    if p.is_null() || len != ADDR_LEN {
        return None;
    }
    // SAFETY: the caller's `len` bytes.
    let b: [u8; ADDR_LEN] = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), ADDR_LEN) }
        .try_into()
        .ok()?;
    let ok = if src {
        source_addr(&b).is_some()
    } else {
        ConnHandle::from_bytes(&b).is_ok()
    };
    ok.then_some(b)
}

/// The listener address and secret an endpoint with source address `b` opens (port 0: a
/// port the kernel picks); `None` when `b` is not an endpoint address of this provider.
pub(crate) fn source_addr(b: &[u8]) -> Option<(SocketAddr, [u8; SECRET_BYTES])> {
    let b: &[u8; ADDR_LEN] = b.try_into().ok()?;
    // A handle names a listener, so its parser refuses port 0; a source may leave the
    // port to the kernel: parse it with a port of 1, then put 0 back.
    let port = u16::from_be_bytes([b[6], b[7]]);
    let mut c = *b;
    if port == 0 {
        c[7] = 1;
    }
    let h = ConnHandle::from_bytes(&c).ok()?;
    let mut secret = [0u8; SECRET_BYTES];
    secret.copy_from_slice(&b[24..24 + SECRET_BYTES]);
    Some((SocketAddr::new(h.addr().ip(), port), secret))
}

/// Resolves `node` (a host name or IP; `None`: the provider's IP) and `service` (a port
/// number; `None`: 0) into the addresses they name: the source with `FI_SOURCE` or without
/// a node, the destination otherwise (none when the port is 0: no listener is named).
/// `-FI_ENODATA` when the node does not resolve or the service is not a port number.
fn resolve(node: Option<&str>, service: Option<&str>, source: bool) -> Result<Named, c_int> {
    use std::net::ToSocketAddrs;
    if node.is_none() && service.is_none() {
        return Ok(Named::default());
    }
    let port = match service {
        Some(s) => s.trim().parse::<u16>().map_err(|_| no_match())?,
        None => 0,
    };
    let ip = match node {
        Some(n) => {
            let all: Vec<SocketAddr> = (n, 0u16)
                .to_socket_addrs()
                .map_err(|_| no_match())?
                .collect();
            // IPv4 first: the provider's default IP is 127.0.0.1.
            all.iter()
                .find(|a| a.is_ipv4())
                .or(all.first())
                .ok_or_else(no_match)?
                .ip()
        }
        None => default_ip().ok_or_else(no_match)?,
    };
    let at = named(SocketAddr::new(ip, port));
    if source || node.is_none() {
        Ok(Named {
            src: Some(at),
            dest: None,
        })
    } else {
        Ok(Named {
            src: None,
            dest: (port != 0).then_some(at),
        })
    }
}

/// A C string argument: `None` for null, `Err` when it is not UTF-8.
///
/// # Safety
/// `p` is null or a live NUL-terminated string.
unsafe fn cstr<'a>(p: *const c_char) -> Result<Option<&'a str>, ()> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map(Some)
        .map_err(|_| ())
}

/// The provider's `getinfo`: one `fi_info` for `FI_EP_RDM` (or `-FI_ENODATA` when the
/// hints ask for something else, or `node` is a host name that does not resolve).
/// `node` and `service` name the source address (with `FI_SOURCE`, or without a node) or
/// the destination (docs/LIBFABRIC.md, "Addresses from a node and service"): a listener at
/// that host and port with the public [`NAMED_SECRET`]; the `fi_info` always has a
/// `src_addr` (the provider's IP, `FI_MRC_ADDR` or 127.0.0.1, and port 0 when nothing
/// names one), which `fi_endpoint` binds. An `FI_MRC_ADDR` that is not an IP, or an
/// `FI_MRC_NETNS` that cannot be entered, is `-FI_EINVAL`; with `FI_MRC_NETNS`, a source
/// address the namespace lacks is `-FI_EADDRNOTAVAIL`. With `FI_MRC_PLANES`
/// ([`planes_env`]): a bad list, an `FI_MRC_ADDR` or a source address that is not plane
/// 0's is `-FI_EINVAL`, a plane address that cannot be bound (in the namespace, or this
/// process's) `-FI_EADDRNOTAVAIL`. Each error with a line on stderr.
pub(crate) unsafe extern "C" fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    guard(|| {
        if info.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: the caller's NUL-terminated node and service, null or live.
        let (node, service) = unsafe { (cstr(node), cstr(service)) };
        let (Ok(node), Ok(service)) = (node, service) else {
            return no_match();
        };
        let addrs = match resolve(node, service, flags & FI_SOURCE != 0) {
            Ok(a) => a,
            Err(e) => return e,
        };
        // SAFETY: the caller's hints, null or live.
        let h = unsafe { hints.as_ref() };
        if let Some(h) = h
            && let Err(e) = unsafe { check_hints(h) }
        {
            return e;
        }
        if default_ip().is_none() {
            crate::log(&format!(
                "FI_MRC_ADDR={:?}: not an IPv4 or IPv6 address",
                std::env::var_os("FI_MRC_ADDR").unwrap_or_default()
            ));
            return -(FI_EINVAL as c_int);
        }
        if let Err(e) = mtu_env() {
            return -(e as c_int);
        }
        let planes = match planes_env() {
            Ok(p) => p,
            Err(e) => return -(e as c_int),
        };
        // FI_MRC_NETNS: the namespace must be one this process can enter, and the
        // source address one of its addresses (the endpoint binds it there).
        let ns = match netns() {
            Ok(ns) => ns,
            Err(e) => return -(e as c_int),
        };
        let i = unsafe { build(version, h, addrs) };
        if i.is_null() {
            return -(FI_ENOMEM as c_int);
        }
        if let Some(ns) = &ns {
            // SAFETY: the fi_info just built: its src_addr of src_addrlen bytes.
            let src = unsafe {
                let s = &*i;
                (!s.src_addr.is_null())
                    .then(|| std::slice::from_raw_parts(s.src_addr.cast::<u8>(), s.src_addrlen))
                    .and_then(source_addr)
            };
            if let Some((a, _)) = src
                && let Err(e) = check_bind(ns, a.ip())
            {
                // SAFETY: ours, allocated above and not handed out.
                unsafe { free_info(i) };
                return -(e as c_int);
            }
        }
        if let Some(ips) = &planes {
            // FI_MRC_PLANES: plane 0 is the source address, and every plane's address
            // can be bound where the endpoint opens its sockets.
            // SAFETY: the fi_info just built: its src_addr of src_addrlen bytes.
            let src = unsafe {
                let s = &*i;
                (!s.src_addr.is_null())
                    .then(|| std::slice::from_raw_parts(s.src_addr.cast::<u8>(), s.src_addrlen))
                    .and_then(source_addr)
            };
            let ip = src.map_or(ips[0], |(a, _)| a.ip());
            if let Err(e) = check_planes(ns.as_ref(), ips, ip) {
                // SAFETY: ours, allocated above and not handed out.
                unsafe { free_info(i) };
                return -(e as c_int);
            }
        }
        // SAFETY: non-null out-pointer.
        unsafe { *info = i };
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FI_MRC_PLANES` against `FI_MRC_ADDR`: the exact addresses, or the exact line.
    #[test]
    fn a_plane_list_is_checked_against_fi_mrc_addr() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(planes_from(None, Some("10.0.0.1")), Ok(None));
        assert_eq!(
            planes_from(Some("fd00::1, fd00:1::1"), None),
            Ok(Some(vec![ip("fd00::1"), ip("fd00:1::1")]))
        );
        assert_eq!(
            planes_from(Some("10.0.0.1,10.1.0.1,10.2.0.1"), Some(" 10.0.0.1 ")),
            Ok(Some(vec![ip("10.0.0.1"), ip("10.1.0.1"), ip("10.2.0.1")]))
        );
        let nine = (1..=9)
            .map(|i| format!("10.{i}.0.1"))
            .collect::<Vec<_>>()
            .join(",");
        for (list, addr, want) in [
            ("10.0.0.1", None, "FI_MRC_PLANES=10.0.0.1: 1 addresses; give 2 to 8".to_string()),
            (
                nine.as_str(),
                None,
                format!("FI_MRC_PLANES={nine}: 9 addresses; give 2 to 8"),
            ),
            (
                "10.0.0.1,fd00::1",
                None,
                "FI_MRC_PLANES=10.0.0.1,fd00::1: fd00::1: every plane's address is a unicast one of one family".to_string(),
            ),
            (
                "10.0.0.1,10.0.0.1",
                None,
                "FI_MRC_PLANES=10.0.0.1,10.0.0.1: 10.0.0.1 is given twice".to_string(),
            ),
            (
                "10.0.0.1,ten",
                None,
                "FI_MRC_PLANES=10.0.0.1,ten: \"ten\": invalid IP address syntax".to_string(),
            ),
            (
                "10.0.0.1,10.1.0.1",
                Some("10.1.0.1"),
                "FI_MRC_PLANES=10.0.0.1,10.1.0.1: FI_MRC_ADDR=10.1.0.1 is not plane 0's address 10.0.0.1: leave FI_MRC_ADDR out or give plane 0's".to_string(),
            ),
            (
                "10.0.0.1,10.1.0.1",
                Some("x"),
                "FI_MRC_PLANES=10.0.0.1,10.1.0.1: FI_MRC_ADDR=x is not plane 0's address 10.0.0.1: leave FI_MRC_ADDR out or give plane 0's".to_string(),
            ),
        ] {
            assert_eq!(planes_from(Some(list), addr), Err(want), "{list}");
        }
    }

    /// A named address states the plane count it is given, in byte 57.
    #[test]
    fn a_named_address_with_planes_states_their_count() {
        let at: SocketAddr = "10.0.0.1:3000".parse().unwrap();
        let h = ConnHandle::new(at, NAMED_SECRET, LISTEN_OPTIONS);
        let b = h.with_planes(3).unwrap().to_bytes();
        assert_eq!(b[57], 3);
        assert_eq!(source_addr(&b), Some((at, NAMED_SECRET)));
        assert_eq!(ConnHandle::from_bytes(&b).unwrap().planes(), 3);
    }
}
