//! The only unsafe code of the verbs datapath: libibverbs through `rdma-sys`.
//!
//! [`Device`] owns every verbs object it creates (context, PD, completion channel, the two
//! CQs, the UD QPs, the AHs, the registered regions and their memory) and destroys them in
//! dependency order on drop. Its methods take indices and byte ranges, check them, and only
//! then build raw work requests, so safe callers cannot make the NIC read or write outside
//! a registered region. What it cannot check by itself, and the datapath guarantees: a
//! receive slot's bytes are read only between its completion and its repost.

use super::config::{VerbsConfig, VerbsError};
use super::nic::{Nic, PortInfo, PostError, RecvWr, SendWr, Wc};
use crate::datapath::Waker;
use rdma_sys::*;
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ffi::CStr;
use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::raw::c_int;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// `IBV_LINK_LAYER_ETHERNET` (verbs.h; an anonymous enum rdma-sys does not bind).
const LINK_LAYER_ETHERNET: u8 = 2;
/// Alignment of registered regions (a page: fewer pages pinned, DMA-friendly).
const REGION_ALIGN: usize = 4096;

fn call_err(call: &'static str) -> VerbsError {
    VerbsError::Call {
        call,
        source: io::Error::last_os_error(),
    }
}

fn rc_err(call: &'static str, rc: c_int) -> VerbsError {
    // Verbs calls return either -1 with errno set or a positive errno.
    let source = if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        io::Error::last_os_error()
    };
    VerbsError::Call { call, source }
}

/// Names of the devices libibverbs lists.
///
/// # Errors
/// [`VerbsError::NoDevices`] when the list itself cannot be had (no kernel support).
pub(crate) fn device_names() -> Result<Vec<String>, VerbsError> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a live c_int; the returned list is checked for NULL and freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(VerbsError::NoDevices {
            detail: format!("ibv_get_device_list: {}", io::Error::last_os_error()),
        });
    }
    let names = (0..n.max(0) as usize)
        .map(|i| {
            // SAFETY: `list` holds `n` valid device pointers; the name is a NUL-terminated
            // string owned by the device, copied out before the list is freed.
            unsafe { CStr::from_ptr(ibv_get_device_name(*list.add(i))) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
    Ok(names)
}

struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
    mr: NonNull<ibv_mr>,
}

/// An opened RDMA device with everything the datapath created on it (only
/// [`super::VerbsDatapath::open`] makes one).
pub struct Device {
    ctx: NonNull<ibv_context>,
    pd: NonNull<ibv_pd>,
    channel: NonNull<ibv_comp_channel>,
    send_cq: NonNull<ibv_cq>,
    recv_cq: NonNull<ibv_cq>,
    qps: Vec<NonNull<ibv_qp>>,
    ahs: Vec<NonNull<ibv_ah>>,
    regions: Vec<Region>,
    port: u8,
    gid_index: u8,
    unacked_events: u32,
    /// Which of PD, channel and CQs exist (the others hold dangling pointers).
    built: Built,
    send_wrs: Vec<ibv_send_wr>,
    send_sges: Vec<ibv_sge>,
    recv_wrs: Vec<ibv_recv_wr>,
    recv_sges: Vec<ibv_sge>,
    wcs: Box<[ibv_wc]>,
    waker: Arc<DeviceWaker>,
}

// SAFETY: libibverbs objects may be used from any thread (verbs are thread-safe per
// rdma-core); a `Device` is owned by one engine thread at a time and is not `Sync`.
unsafe impl Send for Device {}

/// Reads the sysfs GID type ("RoCE v2", "IB/RoCE v1") of an entry, if the kernel exposes it.
fn gid_type(device: &str, port: u8, index: u8) -> Option<String> {
    let p = format!("/sys/class/infiniband/{device}/ports/{port}/gid_attrs/types/{index}");
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

impl Device {
    /// Opens `cfg.device`, checks port and GID, creates PD, channel and CQs sized for
    /// `cfg.qps` QPs. Returns the device, the port facts and the local GID.
    ///
    /// # Errors
    /// [`VerbsError::NoDevices`], [`VerbsError::DeviceNotFound`],
    /// [`VerbsError::PortNotActive`], [`VerbsError::BadGid`], [`VerbsError::NotRoceV2`],
    /// [`VerbsError::MtuTooSmall`], [`VerbsError::Call`].
    pub(crate) fn open(cfg: &VerbsConfig) -> Result<(Device, PortInfo, Ipv6Addr), VerbsError> {
        let waker = Arc::new(DeviceWaker {
            efd: EventFd::new()?,
        });
        let mut n: c_int = 0;
        // SAFETY: as in `device_names`.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(VerbsError::NoDevices {
                detail: format!("ibv_get_device_list: {}", io::Error::last_os_error()),
            });
        }
        let mut names = Vec::new();
        let mut found = ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: `list` holds `n` valid device pointers with NUL-terminated names.
            let dev = unsafe { *list.add(i) };
            let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if name == cfg.device {
                found = dev;
            }
            names.push(name);
        }
        // SAFETY: `found` is a device of the live list (checked non-null); opening before
        // the list is freed is the documented order.
        let ctx = if found.is_null() {
            None
        } else {
            NonNull::new(unsafe { ibv_open_device(found) })
        };
        let open_err = io::Error::last_os_error();
        // SAFETY: freed once; the opened context does not borrow the list.
        unsafe { ibv_free_device_list(list) };
        if found.is_null() {
            return Err(if names.is_empty() {
                VerbsError::NoDevices {
                    detail: "ibv_get_device_list returned 0 devices".into(),
                }
            } else {
                VerbsError::DeviceNotFound {
                    name: cfg.device.clone(),
                    available: names,
                }
            });
        }
        let ctx = ctx.ok_or(VerbsError::Call {
            call: "ibv_open_device",
            source: open_err,
        })?;
        // From here on a partially built Device cleans up through Drop.
        let mut dev = Device {
            ctx,
            pd: NonNull::dangling(),
            channel: NonNull::dangling(),
            send_cq: NonNull::dangling(),
            recv_cq: NonNull::dangling(),
            qps: Vec::new(),
            ahs: Vec::new(),
            regions: Vec::new(),
            port: cfg.port,
            gid_index: cfg.gid_index,
            unacked_events: 0,
            built: Built::default(),
            send_wrs: Vec::new(),
            send_sges: Vec::new(),
            recv_wrs: Vec::new(),
            recv_sges: Vec::new(),
            wcs: Box::new([]),
            waker,
        };
        let (port, gid) = dev.build(cfg)?;
        Ok((dev, port, gid))
    }

    fn build(&mut self, cfg: &VerbsConfig) -> Result<(PortInfo, Ipv6Addr), VerbsError> {
        let ctx = self.ctx.as_ptr();
        // SAFETY: ibv_port_attr is plain data; all-zero is a valid value to fill.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, live out-pointer.
        let rc = unsafe { ___ibv_query_port(ctx, cfg.port, &mut attr) };
        if rc != 0 {
            return Err(rc_err("ibv_query_port", rc));
        }
        if attr.state != ibv_port_state::IBV_PORT_ACTIVE {
            return Err(VerbsError::PortNotActive {
                device: cfg.device.clone(),
                port: cfg.port,
                state: attr.state,
            });
        }
        let port = PortInfo {
            ethernet: attr.link_layer == LINK_LAYER_ETHERNET,
            active_mtu_bytes: match attr.active_mtu {
                m @ 1..=5 => 128 << m,
                _ => 0,
            },
            lid: attr.lid,
        };
        let bad_gid = || VerbsError::BadGid {
            device: cfg.device.clone(),
            port: cfg.port,
            index: cfg.gid_index,
            table_len: attr.gid_tbl_len,
        };
        if i32::from(cfg.gid_index) >= attr.gid_tbl_len {
            return Err(bad_gid());
        }
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: live context, index within the table, live out-pointer.
        let rc = unsafe { ibv_query_gid(ctx, cfg.port, c_int::from(cfg.gid_index), &mut gid) };
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        let raw = unsafe { gid.raw };
        if rc != 0 || raw == [0; 16] {
            return Err(bad_gid());
        }
        if port.ethernet
            && let Some(t) = gid_type(&cfg.device, cfg.port, cfg.gid_index)
            && t != "RoCE v2"
        {
            return Err(VerbsError::NotRoceV2 {
                device: cfg.device.clone(),
                port: cfg.port,
                index: cfg.gid_index,
                gid_type: t,
            });
        }
        if cfg.max_datagram_bytes > port.active_mtu_bytes {
            return Err(VerbsError::MtuTooSmall {
                asked: cfg.max_datagram_bytes,
                mtu_bytes: port.active_mtu_bytes,
            });
        }
        // SAFETY: plain data, filled by the call.
        let mut dattr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, live out-pointer.
        let rc = unsafe { ibv_query_device(ctx, &mut dattr) };
        if rc != 0 {
            return Err(rc_err("ibv_query_device", rc));
        }
        // Completions outstanding on the send CQ: at most one per `signal_every` WRs per
        // QP, plus a forced tail signal per QP.
        let send_cqe = u64::from(cfg.qps) * u64::from(cfg.sq_depth / cfg.signal_every.max(1) + 1);
        let recv_cqe = u64::from(cfg.qps) * u64::from(cfg.rq_depth);
        let limits = [
            ("qps", u64::from(cfg.qps), dattr.max_qp, "max_qp"),
            (
                "sq_depth",
                u64::from(cfg.sq_depth),
                dattr.max_qp_wr,
                "max_qp_wr",
            ),
            (
                "rq_depth",
                u64::from(cfg.rq_depth),
                dattr.max_qp_wr,
                "max_qp_wr",
            ),
            ("qps * rq_depth", recv_cqe, dattr.max_cqe, "max_cqe"),
            ("send CQ", send_cqe, dattr.max_cqe, "max_cqe"),
        ];
        for (what, asked, limit, name) in limits {
            if asked > u64::try_from(limit).unwrap_or(0) {
                return Err(VerbsError::BadConfig(format!(
                    "{what} = {asked} exceeds the device's {name} of {limit}"
                )));
            }
        }
        let (send_cqe, recv_cqe) = (send_cqe as c_int, recv_cqe as c_int);
        // SAFETY: live context; results checked for NULL.
        self.pd =
            NonNull::new(unsafe { ibv_alloc_pd(ctx) }).ok_or_else(|| call_err("ibv_alloc_pd"))?;
        self.built.pd = true;
        self.channel = NonNull::new(unsafe { ibv_create_comp_channel(ctx) })
            .ok_or_else(|| call_err("ibv_create_comp_channel"))?;
        self.built.channel = true;
        // SAFETY: live context; no channel for sends, our channel for receives.
        self.send_cq = NonNull::new(unsafe {
            ibv_create_cq(ctx, send_cqe, ptr::null_mut(), ptr::null_mut(), 0)
        })
        .ok_or_else(|| call_err("ibv_create_cq (send)"))?;
        self.built.send_cq = true;
        self.recv_cq = NonNull::new(unsafe {
            ibv_create_cq(ctx, recv_cqe, ptr::null_mut(), self.channel.as_ptr(), 0)
        })
        .ok_or_else(|| call_err("ibv_create_cq (recv)"))?;
        self.built.recv_cq = true;
        let n = (recv_cqe.max(send_cqe) as usize).clamp(1, 1024);
        // SAFETY: ibv_wc is plain data; zeroed entries are only ever overwritten by polls.
        self.wcs = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        Ok((port, Ipv6Addr::from(raw)))
    }

    /// Registers a zero-filled, page-aligned region of `len` bytes for local writes.
    /// Returns its index.
    ///
    /// # Errors
    /// [`VerbsError::BadConfig`] for a zero or unrepresentable size, [`VerbsError::Call`].
    fn register_impl(&mut self, len: usize) -> Result<usize, VerbsError> {
        let layout = Layout::from_size_align(len, REGION_ALIGN)
            .ok()
            .filter(|l| l.size() > 0)
            .ok_or_else(|| VerbsError::BadConfig(format!("region of {len} bytes")))?;
        // SAFETY: non-zero size checked above.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(VerbsError::Call {
            call: "alloc (region)",
            source: io::Error::from(io::ErrorKind::OutOfMemory),
        })?;
        // SAFETY: `ptr..ptr+len` is a live allocation we own until dereg; live PD.
        let mr = unsafe {
            ibv_reg_mr(
                self.pd.as_ptr(),
                ptr.as_ptr().cast(),
                len,
                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as c_int,
            )
        };
        let Some(mr) = NonNull::new(mr) else {
            let e = call_err("ibv_reg_mr");
            // SAFETY: allocated above with this layout, never registered.
            unsafe { dealloc(ptr.as_ptr(), layout) };
            return Err(e);
        };
        self.regions.push(Region { ptr, layout, mr });
        Ok(self.regions.len() - 1)
    }

    fn range(&self, region: usize, offset: usize, len: usize) -> Option<(*mut u8, u32)> {
        let r = self.regions.get(region)?;
        let end = offset.checked_add(len)?;
        if end > r.layout.size() {
            return None;
        }
        // SAFETY: `mr` is live until Drop.
        let lkey = unsafe { (*r.mr.as_ptr()).lkey };
        // SAFETY: offset <= size, so the pointer stays inside the allocation.
        Some((unsafe { r.ptr.as_ptr().add(offset) }, lkey))
    }

    /// Bytes `offset..offset + len` of a region, if inside it.
    fn bytes_impl(&self, region: usize, offset: usize, len: usize) -> Option<&[u8]> {
        let (p, _) = self.range(region, offset, len)?;
        // SAFETY: in bounds (checked); the datapath reads only slots the NIC is not
        // writing (completed, not reposted).
        Some(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// Mutable bytes `offset..offset + len` of a region, if inside it.
    fn bytes_mut_impl(&mut self, region: usize, offset: usize, len: usize) -> Option<&mut [u8]> {
        let (p, _) = self.range(region, offset, len)?;
        // SAFETY: in bounds (checked); `&mut self` excludes other Rust borrows; the
        // datapath writes only send slots that are not posted.
        Some(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// Creates a UD QP on the two CQs and moves it INIT -> RTR -> RTS with `qkey`.
    /// Returns its QPN (its index is the number of QPs before the call).
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn create_ud_qp_impl(
        &mut self,
        sq_depth: u32,
        rq_depth: u32,
        qkey: u32,
    ) -> Result<u32, VerbsError> {
        // SAFETY: plain data, zero is valid for every field (NULL pointers, 0 counts).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.send_cq.as_ptr();
        init.recv_cq = self.recv_cq.as_ptr();
        init.cap.max_send_wr = sq_depth;
        init.cap.max_recv_wr = rq_depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.qp_type = ibv_qp_type::IBV_QPT_UD;
        // SAFETY: live PD and CQs; attributes filled above.
        let qp = NonNull::new(unsafe { ibv_create_qp(self.pd.as_ptr(), &mut init) })
            .ok_or_else(|| call_err("ibv_create_qp"))?;
        self.qps.push(qp);
        Self::to_rts(qp, self.port, qkey)?;
        // SAFETY: live QP.
        Ok(unsafe { (*qp.as_ptr()).qp_num })
    }

    /// Moves QP `qp` RESET (which empties its queues without completions) -> INIT -> RTR
    /// -> RTS with `qkey`: the recovery of a UD QP in the error state (rdma_rxe puts one
    /// there when a send fails while its port is down).
    ///
    /// # Errors
    /// [`VerbsError::Call`] (an index with no QP: `EINVAL`).
    fn reset_qp_impl(&mut self, qp: usize, qkey: u32) -> Result<(), VerbsError> {
        let q = *self
            .qps
            .get(qp)
            .ok_or_else(|| rc_err("ibv_modify_qp (RESET)", libc::EINVAL))?;
        // SAFETY: plain data, zero-initialised, then the state.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RESET;
        // SAFETY: live QP, live attr.
        let rc = unsafe {
            ibv_modify_qp(
                q.as_ptr(),
                &mut a,
                ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int,
            )
        };
        if rc != 0 {
            return Err(rc_err("ibv_modify_qp (RESET)", rc));
        }
        Self::to_rts(q, self.port, qkey)
    }

    /// INIT -> RTR -> RTS of a UD QP in RESET on `port` with `qkey`.
    fn to_rts(qp: NonNull<ibv_qp>, port: u8, qkey: u32) -> Result<(), VerbsError> {
        let steps: [(&'static str, ibv_qp_state::Type, ibv_qp_attr_mask); 3] = [
            (
                "ibv_modify_qp (INIT)",
                ibv_qp_state::IBV_QPS_INIT,
                ibv_qp_attr_mask::IBV_QP_STATE
                    | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
                    | ibv_qp_attr_mask::IBV_QP_PORT
                    | ibv_qp_attr_mask::IBV_QP_QKEY,
            ),
            (
                "ibv_modify_qp (RTR)",
                ibv_qp_state::IBV_QPS_RTR,
                ibv_qp_attr_mask::IBV_QP_STATE,
            ),
            (
                "ibv_modify_qp (RTS)",
                ibv_qp_state::IBV_QPS_RTS,
                ibv_qp_attr_mask::IBV_QP_STATE | ibv_qp_attr_mask::IBV_QP_SQ_PSN,
            ),
        ];
        for (call, state, mask) in steps {
            // SAFETY: plain data, zero-initialised, then the fields the mask names.
            let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = state;
            a.pkey_index = 0;
            a.port_num = port;
            a.qkey = qkey;
            a.sq_psn = 0;
            // SAFETY: live QP, live attr.
            let rc = unsafe { ibv_modify_qp(qp.as_ptr(), &mut a, mask.0 as c_int) };
            if rc != 0 {
                return Err(rc_err(call, rc));
            }
        }
        Ok(())
    }

    /// Creates an AH to `dgid` (and `dlid` on InfiniBand) with the given GRH fields.
    /// Returns its index.
    ///
    /// # Errors
    /// [`VerbsError::Call`] (on RoCE, also when the destination cannot be resolved to a
    /// MAC address).
    fn create_ah_impl(
        &mut self,
        dgid: Ipv6Addr,
        dlid: u16,
        flow_label: u32,
        traffic_class: u8,
        hop_limit: u8,
    ) -> Result<usize, VerbsError> {
        // SAFETY: plain data, zero is valid everywhere.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.is_global = 1;
        a.grh.dgid = ibv_gid { raw: dgid.octets() };
        a.grh.sgid_index = self.gid_index;
        a.grh.flow_label = flow_label & super::sport::FLOW_LABEL_MASK;
        a.grh.traffic_class = traffic_class;
        a.grh.hop_limit = hop_limit;
        a.dlid = dlid;
        a.port_num = self.port;
        // SAFETY: live PD, live attr.
        let ah = NonNull::new(unsafe { ibv_create_ah(self.pd.as_ptr(), &mut a) })
            .ok_or_else(|| call_err("ibv_create_ah"))?;
        self.ahs.push(ah);
        Ok(self.ahs.len() - 1)
    }

    /// Posts `wrs` on QP `qp` as one linked chain (one doorbell).
    ///
    /// # Errors
    /// [`PostError`] with `accepted = 0` and `InvalidInput` when an index or byte range is
    /// bad (nothing posted); with the provider's error and the number it took otherwise.
    fn post_send_impl(&mut self, qp: usize, wrs: &[SendWr]) -> Result<(), PostError> {
        let invalid = PostError::invalid;
        let qp_ptr = self.qps.get(qp).ok_or_else(invalid)?.as_ptr();
        if wrs.is_empty() {
            return Ok(());
        }
        self.send_sges.clear();
        for w in wrs {
            let (addr, lkey) = self
                .range(w.region, w.offset, w.len as usize)
                .ok_or_else(invalid)?;
            if w.ah >= self.ahs.len() {
                return Err(invalid());
            }
            self.send_sges.push(ibv_sge {
                addr: addr as u64,
                length: w.len,
                lkey,
            });
        }
        self.send_wrs.clear();
        for w in wrs {
            // SAFETY: plain data; zero is valid for every field and union.
            let mut s: ibv_send_wr = unsafe { std::mem::zeroed() };
            s.wr_id = w.wr_id;
            s.num_sge = 1;
            s.opcode = ibv_wr_opcode::IBV_WR_SEND;
            s.send_flags = if w.signalled {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            s.wr.ud = ud_t {
                ah: self.ahs[w.ah].as_ptr(),
                remote_qpn: w.remote_qpn,
                remote_qkey: w.remote_qkey,
            };
            self.send_wrs.push(s);
        }
        // Link after both vectors stopped growing, so the pointers stay valid.
        let base = self.send_wrs.as_mut_ptr();
        let sges = self.send_sges.as_mut_ptr();
        let n = self.send_wrs.len();
        for i in 0..n {
            // SAFETY: i < n, within both vectors.
            unsafe {
                (*base.add(i)).sg_list = sges.add(i);
                (*base.add(i)).next = if i + 1 < n {
                    base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; a NULL-terminated chain of WRs whose SGEs point into registered
        // regions (checked above) and whose AHs are live.
        let rc = unsafe { ibv_post_send(qp_ptr, base, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(PostError {
            accepted: chain_index(base as usize, bad as usize, size_of_val_send(), n),
            source: io::Error::from_raw_os_error(rc),
        })
    }

    /// Posts `wrs` as receive buffers of QP `qp`, one chain.
    ///
    /// # Errors
    /// As `post_send_impl`.
    fn post_recv_impl(&mut self, qp: usize, wrs: &[RecvWr]) -> Result<(), PostError> {
        let invalid = PostError::invalid;
        let qp_ptr = self.qps.get(qp).ok_or_else(invalid)?.as_ptr();
        if wrs.is_empty() {
            return Ok(());
        }
        self.recv_sges.clear();
        for w in wrs {
            let (addr, lkey) = self
                .range(w.region, w.offset, w.len as usize)
                .ok_or_else(invalid)?;
            self.recv_sges.push(ibv_sge {
                addr: addr as u64,
                length: w.len,
                lkey,
            });
        }
        self.recv_wrs.clear();
        for w in wrs {
            self.recv_wrs.push(ibv_recv_wr {
                wr_id: w.wr_id,
                next: ptr::null_mut(),
                sg_list: ptr::null_mut(),
                num_sge: 1,
            });
        }
        let base = self.recv_wrs.as_mut_ptr();
        let sges = self.recv_sges.as_mut_ptr();
        let n = self.recv_wrs.len();
        for i in 0..n {
            // SAFETY: i < n, within both vectors.
            unsafe {
                (*base.add(i)).sg_list = sges.add(i);
                (*base.add(i)).next = if i + 1 < n {
                    base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
        }
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP; NULL-terminated chain into registered regions (checked).
        let rc = unsafe { ibv_post_recv(qp_ptr, base, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(PostError {
            accepted: chain_index(
                base as usize,
                bad as usize,
                std::mem::size_of::<ibv_recv_wr>(),
                n,
            ),
            source: io::Error::from_raw_os_error(rc),
        })
    }

    fn poll(
        &mut self,
        cq: NonNull<ibv_cq>,
        max: usize,
        out: &mut Vec<Wc>,
    ) -> Result<usize, VerbsError> {
        let n = max.min(self.wcs.len());
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: live CQ; `wcs` has room for `n` entries.
        let got = unsafe { ibv_poll_cq(cq.as_ptr(), n as c_int, self.wcs.as_mut_ptr()) };
        if got < 0 {
            return Err(rc_err("ibv_poll_cq", got));
        }
        for w in &self.wcs[..got as usize] {
            out.push(Wc {
                wr_id: w.wr_id,
                status: w.status,
                byte_len: w.byte_len,
                qp_num: w.qp_num,
                src_qp: w.src_qp,
                has_grh: w.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0,
            });
        }
        Ok(got as usize)
    }

    /// Appends up to `max` send completions to `out`.
    ///
    /// # Errors
    /// [`VerbsError::Call`] when polling fails.
    fn poll_send_impl(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        self.poll(self.send_cq, max, out)
    }

    /// Appends up to `max` receive completions to `out`.
    ///
    /// # Errors
    /// [`VerbsError::Call`] when polling fails.
    fn poll_recv_impl(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        self.poll(self.recv_cq, max, out)
    }

    /// Asks for an event on the next receive completion (poll the CQ once more after this,
    /// then `block`).
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn arm_recv(&mut self) -> Result<(), VerbsError> {
        // SAFETY: live CQ.
        let rc = unsafe { ibv_req_notify_cq(self.recv_cq.as_ptr(), 0) };
        if rc != 0 {
            return Err(rc_err("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    /// Blocks until the receive CQ's event, `wake_fd` becomes readable, or `timeout_ns`
    /// passed. `ppoll(2)`, whose timeout is a nanosecond timespec (an hrtimer): `poll(2)`'s
    /// whole milliseconds turned the transport's 10 us ACK-delay timer into a sleep of 1 ms
    /// or more (a tick, 4 ms at `CONFIG_HZ=250`), as the UDP datapath's io_uring wait
    /// never did.
    ///
    /// # Errors
    /// [`VerbsError::Call`] when `ppoll(2)` or `ibv_get_cq_event` fail.
    fn block(&mut self, timeout_ns: u64, wake_fd: RawFd) -> Result<(), VerbsError> {
        // SAFETY: live channel.
        let ch_fd = unsafe { (*self.channel.as_ptr()).fd };
        let mut fds = [
            libc::pollfd {
                fd: ch_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000).min(i32::MAX as u64) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: two live pollfd entries, a live timespec, no signal mask.
        let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, ptr::null()) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(VerbsError::Call {
                call: "ppoll",
                source: e,
            });
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut cq: *mut ibv_cq = ptr::null_mut();
            let mut cq_ctx: *mut std::os::raw::c_void = ptr::null_mut();
            // SAFETY: live channel with a pending event (readable), live out-pointers.
            let rc = unsafe { ibv_get_cq_event(self.channel.as_ptr(), &mut cq, &mut cq_ctx) };
            if rc != 0 {
                return Err(rc_err("ibv_get_cq_event", rc));
            }
            self.unacked_events += 1;
            if self.unacked_events >= 64 {
                // SAFETY: live CQ; acknowledges events we got.
                unsafe { ibv_ack_cq_events(self.recv_cq.as_ptr(), self.unacked_events) };
                self.unacked_events = 0;
            }
        }
        if fds[1].revents & libc::POLLIN != 0 {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a live u64 from an eventfd the caller owns.
            unsafe { libc::read(wake_fd, (&mut v as *mut u64).cast(), 8) };
        }
        Ok(())
    }
}

/// Wakes [`Device`]'s `wait_recv` through an eventfd.
struct DeviceWaker {
    efd: EventFd,
}

impl Waker for DeviceWaker {
    fn wake(&self) {
        self.efd.signal();
    }
}

impl Nic for Device {
    fn register(&mut self, len: usize) -> Result<usize, VerbsError> {
        self.register_impl(len)
    }
    fn bytes(&self, region: usize, offset: usize, len: usize) -> Option<&[u8]> {
        self.bytes_impl(region, offset, len)
    }
    fn bytes_mut(&mut self, region: usize, offset: usize, len: usize) -> Option<&mut [u8]> {
        self.bytes_mut_impl(region, offset, len)
    }
    fn create_ud_qp(&mut self, sq_depth: u32, rq_depth: u32, qkey: u32) -> Result<u32, VerbsError> {
        self.create_ud_qp_impl(sq_depth, rq_depth, qkey)
    }
    fn reset_qp(&mut self, qp: usize, qkey: u32) -> Result<(), VerbsError> {
        self.reset_qp_impl(qp, qkey)
    }
    fn create_ah(
        &mut self,
        dgid: Ipv6Addr,
        dlid: u16,
        flow_label: u32,
        traffic_class: u8,
        hop_limit: u8,
    ) -> Result<usize, VerbsError> {
        self.create_ah_impl(dgid, dlid, flow_label, traffic_class, hop_limit)
    }
    fn post_send(&mut self, qp: usize, wrs: &[SendWr]) -> Result<(), PostError> {
        self.post_send_impl(qp, wrs)
    }
    fn post_recv(&mut self, qp: usize, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.post_recv_impl(qp, wrs)
    }
    fn poll_send(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        self.poll_send_impl(max, out)
    }
    fn poll_recv(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError> {
        self.poll_recv_impl(max, out)
    }
    fn wait_recv(&mut self, timeout_ns: u64, early: &mut Vec<Wc>) -> Result<(), VerbsError> {
        self.arm_recv()?;
        // A completion that arrived before arming raises no event: look once more.
        if self.poll_recv_impl(64, early)? > 0 {
            return Ok(());
        }
        let fd = self.waker.efd.raw();
        self.block(timeout_ns, fd)
    }
    fn waker(&self) -> Arc<dyn Waker> {
        self.waker.clone()
    }
}

fn size_of_val_send() -> usize {
    std::mem::size_of::<ibv_send_wr>()
}

/// Index of `bad` in a chain of `n` elements of `size` bytes at `base`; `0` when `bad` is
/// not inside it (the provider then posted nothing we can tell).
fn chain_index(base: usize, bad: usize, size: usize, n: usize) -> usize {
    if bad < base || size == 0 {
        return 0;
    }
    let i = (bad - base) / size;
    if i < n { i } else { 0 }
}

#[derive(Clone, Copy, Debug, Default)]
struct Built {
    pd: bool,
    channel: bool,
    send_cq: bool,
    recv_cq: bool,
}

impl Drop for Device {
    fn drop(&mut self) {
        let b = self.built;
        // SAFETY (whole block): each object is live (created and recorded) and destroyed
        // once, dependents before what they depend on: QPs and AHs, then MRs (then their
        // memory), then CQs (events acknowledged first), channel, PD, context. Return codes
        // are ignored: nothing useful can be done about a failure in drop.
        unsafe {
            for qp in self.qps.drain(..) {
                ibv_destroy_qp(qp.as_ptr());
            }
            for ah in self.ahs.drain(..) {
                ibv_destroy_ah(ah.as_ptr());
            }
            for r in self.regions.drain(..) {
                ibv_dereg_mr(r.mr.as_ptr());
                dealloc(r.ptr.as_ptr(), r.layout);
            }
            if b.recv_cq {
                if self.unacked_events > 0 {
                    ibv_ack_cq_events(self.recv_cq.as_ptr(), self.unacked_events);
                }
                ibv_destroy_cq(self.recv_cq.as_ptr());
            }
            if b.send_cq {
                ibv_destroy_cq(self.send_cq.as_ptr());
            }
            if b.channel {
                ibv_destroy_comp_channel(self.channel.as_ptr());
            }
            if b.pd {
                ibv_dealloc_pd(self.pd.as_ptr());
            }
            ibv_close_device(self.ctx.as_ptr());
        }
    }
}

/// An eventfd that ends a `block` early from another thread.
#[derive(Debug)]
struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A fresh non-blocking eventfd.
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn new() -> Result<EventFd, VerbsError> {
        // SAFETY: plain eventfd creation; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(call_err("eventfd"));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The descriptor, for `block`.
    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the descriptor readable.
    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own; a failure (counter
        // overflow) only means a wake-up is pending already.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}
