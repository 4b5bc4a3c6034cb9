//! The QP runtime without a device: [`QpInner`] on a [`FakeNic`] (the UD datapath over
//! an in-memory fabric) with [`FakeLoopback`] in place of the loopback RC QPs, which
//! checks keys and ranges as a device does and writes into real memory. The progress
//! thread is not started: each test drives the passes itself (`step`), so the order in
//! which datagrams arrive within one pass is exact.
//!
//! Issue 45 (item 8): the three lib_mrc fixes of commit 3fc8fd7, each with the test that
//! fails without it.

use super::*;
use mrc_fabric::verbs::nic::PortInfo;
use mrc_fabric::verbs::{FakeFabric, FakeNic};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

const MTU: u32 = 4096;

fn gid(last: u8) -> Ipv6Addr {
    std::net::Ipv4Addr::new(10, 0, 0, last).to_ipv6_mapped()
}

/// One MR of a [`FakePd`]: `len` bytes at `ptr`, addressed by WRITEs as `iova..iova+len`.
#[derive(Clone, Copy, Debug)]
struct FakeMr {
    iova: u64,
    ptr: *mut u8,
    len: u64,
    lkey: u32,
    rkey: u32,
    remote_write: bool,
}

/// The application's protection domain: its MRs.
#[derive(Default)]
struct FakePd {
    mrs: RefCell<Vec<FakeMr>>,
}

impl FakePd {
    /// Registers `buf` at `iova` (its address for an ordinary `ibv_reg_mr`); the keys
    /// are `base + n` for the n-th MR.
    fn reg(&self, buf: &mut [u8], iova: u64, remote_write: bool, base: u32) -> FakeMr {
        let mut mrs = self.mrs.borrow_mut();
        let k = base + mrs.len() as u32;
        let mr = FakeMr {
            iova,
            ptr: buf.as_mut_ptr(),
            len: buf.len() as u64,
            lkey: k,
            rkey: k | 0x8000_0000,
            remote_write,
        };
        mrs.push(mr);
        mr
    }

    /// Registers `buf` at its address, as `ibv_reg_mr`.
    fn reg_va(&self, buf: &mut [u8], remote_write: bool, base: u32) -> FakeMr {
        let va = buf.as_ptr() as u64;
        self.reg(buf, va, remote_write, base)
    }

    /// Where `addr..addr+len` lies in the MR of `key` (an rkey when `remote`), as a device
    /// checks it: the whole range inside the MR, no wrap.
    fn find(&self, key: u32, remote: bool, addr: u64, len: u64) -> Option<*mut u8> {
        self.mrs.borrow().iter().find_map(|m| {
            let ok = if remote {
                m.rkey == key && m.remote_write
            } else {
                m.lkey == key
            };
            let end = addr.checked_add(len)?;
            (ok && addr >= m.iova && end <= m.iova + m.len)
                // SAFETY: inside the MR's buffer.
                .then(|| unsafe { m.ptr.add((addr - m.iova) as usize) })
        })
    }
}

/// A loopback RC QP on a fake device: a WRITE (or lkey check) the PD's keys and ranges
/// allow is carried out at once, into the target's memory; the first one refused
/// completes in error and moves the QP to ERR, where everything after it completes
/// flushed until it is reset or reconnected.
struct FakeLoopback {
    pd: Rc<FakePd>,
    cq: RefCell<VecDeque<(u64, u32)>>,
    err: Cell<bool>,
}

impl FakeLoopback {
    fn new(pd: &Rc<FakePd>) -> FakeLoopback {
        FakeLoopback {
            pd: pd.clone(),
            cq: RefCell::default(),
            err: Cell::new(false),
        }
    }

    fn complete(&self, wr_id: u64, ok: bool, refused: u32) {
        let status = if self.err.get() {
            wc_status::WR_FLUSH_ERR
        } else if ok {
            wc_status::SUCCESS
        } else {
            self.err.set(true);
            refused
        };
        self.cq.borrow_mut().push_back((wr_id, status));
    }
}

impl LoopbackQp for FakeLoopback {
    fn connect(&mut self) -> Result<(), String> {
        self.reset();
        Ok(())
    }

    fn reset(&mut self) {
        self.err.set(false);
        self.cq.borrow_mut().clear();
    }

    fn post(
        &self,
        wr_id: u64,
        src: *mut u8,
        len: u32,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), i32> {
        let dst = (!self.err.get())
            .then(|| self.pd.find(rkey, true, remote_addr, u64::from(len)))
            .flatten();
        if let Some(d) = dst {
            // SAFETY: `src` is a staging slot holding `len` bytes, `d` is inside an MR.
            unsafe { std::ptr::copy_nonoverlapping(src, d, len as usize) };
        }
        self.complete(wr_id, dst.is_some(), wc_status::REM_ACCESS_ERR);
        Ok(())
    }

    fn post_check(&self, wr_id: u64, addr: u64, len: u32, lkey: u32) -> Result<(), i32> {
        let ok = self
            .pd
            .find(lkey, false, addr, u64::from(len.max(1)))
            .is_some();
        self.complete(wr_id, ok, wc_status::LOC_PROT_ERR);
        Ok(())
    }

    fn poll(&self, out: &mut Vec<(u64, u32)>) {
        out.extend(self.cq.borrow_mut().drain(..));
    }

    fn set_gid_index(&mut self, _gid_index: u8) {}
}

/// One application's side: its MRC QP (the fields drop in order: the QP before the CQs
/// and the context it points at).
struct Side {
    qp: QpInner<FakeNic, FakeLoopback>,
    scq: Box<Cq>,
    _rcq: Box<Cq>,
    ctx: Box<Context>,
    pd: Rc<FakePd>,
    gid: Ipv6Addr,
}

fn cq(ctx: &Context) -> Box<Cq> {
    Box::new(Cq {
        ctx,
        cqe: 4096,
        cq_context: std::ptr::null_mut(),
        channel: std::ptr::null(),
        q: Mutex::new(CqQueue {
            wcs: VecDeque::new(),
            armed: false,
            overflows: 0,
            events_got: 0,
            events_acked: 0,
        }),
        qps: AtomicUsize::new(1),
    })
}

/// A QP in RESET on a NIC of `fab` with GID `gid`, as `mrc_create_qp` makes one (four UD
/// QPs, 256 deep, the port's MTU 4096).
fn side(fab: &FakeFabric, gid: Ipv6Addr) -> Side {
    side_on(fab, &[gid])
}

/// [`side`] on one NIC per plane, GIDs `gids` (plane 0 first: the context's device, the
/// others `MRC_PLANE_DEVICES`'), as `mrc_create_qp` makes one on a context of several
/// planes.
fn side_on(fab: &FakeFabric, gids: &[Ipv6Addr]) -> Side {
    let gid = gids[0];
    let ctx = Box::new(Context {
        vctx: std::ptr::null_mut(),
        api_version: 0,
        vendor_version: 0,
        events: Mutex::new(VecDeque::new()),
        events_cv: Condvar::new(),
        children: AtomicUsize::new(0),
        planes: (1..gids.len()).map(|p| format!("fake{p}")).collect(),
    });
    let (scq, rcq) = (cq(&ctx), cq(&ctx));
    let mut vc = VerbsConfig::new("fake0");
    vc.qps = UD_QPS;
    vc.max_datagram_bytes = MTU;
    vc.sq_depth = 256;
    vc.rq_depth = 256;
    vc.signal_every = 16;
    vc.send_slots = UD_QPS * 256;
    let port = PortInfo {
        ethernet: true,
        active_mtu_bytes: MTU,
        lid: 0,
    };
    let dps = gids
        .iter()
        .map(|&g| VerbsDatapath::with_nic(fab.nic(g), port, g, vc.clone()).expect("fake datapath"))
        .collect();
    let ecfg = EngineConfig {
        slot_bytes: MTU as usize + 96,
        tx_batch: 64,
        ..EngineConfig::default()
    };
    let init = InitCopy {
        cap: ibv_qp_cap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: 0,
        pd: std::ptr::null_mut(),
        send_ops_flags: 0,
        protocol_version: 1,
    };
    let pd = Rc::new(FakePd::default());
    let qp = QpInner::new(
        Worker::with_datapath(QpDatapath::new(dps, false).expect("planes"), ecfg),
        MTU,
        1,
        &init,
        &*scq,
        &*rcq,
        &*ctx,
        |_, _| Ok((FakeLoopback::new(&pd), FakeLoopback::new(&pd))),
    )
    .expect("QP");
    Side {
        qp,
        scq,
        _rcq: rcq,
        ctx,
        pd,
        gid,
    }
}

impl Side {
    /// RESET -> INIT -> RTR (the peer's GID and QPN) -> RTS, as `mrc_modify_qp` does it:
    /// the rendezvous starts.
    fn bring_up(&mut self, peer_gid: Ipv6Addr, peer_qpn: u32) {
        self.qp.set_state(QpState::Init);
        self.qp.set_peer(peer_gid, peer_qpn, None).expect("RTR");
        self.qp.set_state(QpState::Rtr);
        self.qp.start(None).expect("RTS");
        self.qp.set_state(QpState::Rts);
    }

    /// `mrc_post_send` of a signalled RDMA WRITE of `src` (under `lkey`) to
    /// (`remote_addr`, `rkey`).
    fn write(&self, wr_id: u64, src: &[u8], lkey: u32, remote_addr: u64, rkey: u32) {
        let w = PendingWr {
            wr_id,
            signaled: true,
            addr: src.as_ptr() as u64,
            len: src.len() as u32,
            remote_addr,
            rkey,
            imm: None,
            sent: 0,
            seq: 0,
            lkey,
            lkey_ok: None,
            check_id: 0,
        };
        self.qp.public.post_write(w).expect("post_send");
    }

    /// The send completions so far.
    fn send_wcs(&self) -> Vec<Wc> {
        lock(&self.scq.q).wcs.drain(..).collect()
    }

    /// The async events raised so far.
    fn events(&self) -> Vec<u32> {
        lock(&self.ctx.events)
            .drain(..)
            .map(|e| e.event_type)
            .collect()
    }

    /// Connections open in the QP's datapath among ids `0..n` (they count up, never
    /// reused).
    fn conns_open(&mut self, n: u32) -> usize {
        let dp = self.qp.worker.datapath_mut();
        (0..n)
            .filter(|&i| dp.source_ports(ConnId(i)).is_some())
            .count()
    }
}

/// Two QPs on one fake fabric brought to RTS against each other, stepped until both
/// ended the rendezvous.
fn pair() -> (FakeFabric, Side, Side) {
    let fab = FakeFabric::new();
    let mut a = side(&fab, gid(1));
    let mut b = side(&fab, gid(2));
    let (qa, qb) = (a.qp.qpn, b.qp.qpn);
    a.bring_up(b.gid, qb);
    b.bring_up(a.gid, qa);
    let t0 = Instant::now();
    while !matches!(a.qp.phase, Phase::Connected) || !matches!(b.qp.phase, Phase::Connected) {
        assert!(t0.elapsed() < Duration::from_secs(10), "no rendezvous");
        a.qp.step();
        b.qp.step();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(a.events(), [event::COMM_EST]);
    assert_eq!(b.events(), [event::COMM_EST]);
    (fab, a, b)
}

/// Fix 1: a rendezvous that hears nothing fails the QP; `fail` left the hello's
/// connection (its rendezvous path to the peer) open, and `reset` closes it only while
/// the phase is still Hello, so every RTS -> timeout -> RESET cycle leaked one.
#[test]
fn a_hello_that_times_out_closes_its_rendezvous_path() {
    const CYCLES: u32 = 8;
    let fab = FakeFabric::new();
    let mut a = side(&fab, gid(1));
    a.qp.hello_timeout = Duration::from_millis(1);
    // The peer: a GID no NIC of the fabric has (its hellos are lost).
    let (peer, peer_qpn) = (gid(9), 0x99);
    let mut hellos = 0;
    let mut open_after_timeout = Vec::new();
    let mut open_after_reset = Vec::new();
    for cycle in 0..CYCLES {
        a.bring_up(peer, peer_qpn);
        let Phase::Hello { conn, .. } = a.qp.phase else {
            panic!("cycle {cycle}: RTS started no rendezvous");
        };
        assert_eq!(conn, ConnId(cycle), "a connection id per rendezvous");
        assert!(
            a.qp.worker.datapath_mut().source_ports(conn).is_some(),
            "cycle {cycle}: the rendezvous path is open"
        );
        while !matches!(a.qp.phase, Phase::Failed) {
            std::thread::sleep(Duration::from_millis(2));
            a.qp.step();
        }
        assert_eq!(a.qp.state, QpState::Err);
        assert_eq!(a.events(), [event::QP_FATAL], "cycle {cycle}");
        open_after_timeout.push(a.conns_open(CYCLES));
        a.qp.reset();
        assert_eq!(a.qp.state, QpState::Reset);
        open_after_reset.push(a.conns_open(CYCLES));
        hellos += 1;
    }
    assert_eq!(
        (open_after_timeout, open_after_reset),
        (vec![0; CYCLES as usize], vec![0; CYCLES as usize]),
        "rendezvous paths open after each hello timeout and after each RESET, \
         over {CYCLES} RTS -> timeout -> RESET cycles"
    );
    assert!(a.qp.counters.hellos_sent >= hellos);
    assert_eq!(fab.unroutable(), a.qp.counters.hellos_sent);
    assert_eq!(a.qp.counters.hellos_heard, 0);
}

/// Fix 2: a pass that fails the QP (here the peer's verdict refusing our WRITE) ends
/// there: the peer's WRITE chunks that arrived in the same batch, behind the verdict,
/// are not placed into application memory (an RC QP in ERR places nothing).
#[test]
fn a_pass_that_fails_the_qp_places_nothing_after() {
    const LEN: usize = 4096;
    let (_fab, mut a, mut b) = pair();
    // A's memory the peer writes into, and the source of A's own WRITE.
    let mut a_mem = vec![0xAAu8; 2 * LEN];
    let a_mr = a.pd.reg_va(&mut a_mem, true, 0x100);
    let mut a_src = vec![0x11u8; LEN];
    let a_src_mr = a.pd.reg_va(&mut a_src, false, 0x100);
    // B's memory (A's WRITE names a key B never registered) and the source of B's WRITEs.
    let mut b_mem = vec![0xBBu8; LEN];
    let b_mr = b.pd.reg_va(&mut b_mem, true, 0x200);
    let mut b_src = vec![0x5Bu8; 2 * LEN];
    let b_src_mr = b.pd.reg_va(&mut b_src, false, 0x200);

    // 1. B posts two WRITEs into A's memory; one pass posts their lkey checks only.
    for (i, chunk) in b_src.chunks(LEN).enumerate() {
        b.write(
            10 + i as u64,
            chunk,
            b_src_mr.lkey,
            a_mr.iova + (i * LEN) as u64,
            a_mr.rkey,
        );
    }
    b.qp.step();
    assert_eq!(b.qp.counters.chunks_sent, 0);
    // 2. A's WRITE with a bad rkey goes out (one pass checks its lkey, the next sends).
    a.write(1, &a_src, a_src_mr.lkey, b_mr.iova, b_mr.rkey ^ 0x7);
    while a.qp.counters.chunks_sent == 0 {
        a.qp.step();
    }
    // 3. One pass of B: its device refuses A's WRITE, the verdict goes back, then B's
    //    two WRITEs, in that order on the one transport connection.
    b.qp.step();
    assert_eq!(b.qp.counters.placement_refused, 1);
    assert_eq!(b.qp.counters.verdicts_sent, 1);
    assert_eq!(b.qp.counters.chunks_sent, 2);
    assert_eq!(b.events(), [event::QP_ACCESS_ERR]);
    assert!(b_mem.iter().all(|&x| x == 0xBB));
    // 4. One pass of A takes them in one batch: the verdict fails the QP.
    a.qp.step();
    let wcs = a.send_wcs();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, wc_status::REM_ACCESS_ERR)]
    );
    assert_eq!(a.qp.state, QpState::Err);
    for _ in 0..10 {
        a.qp.step();
    }
    let touched = a_mem.iter().filter(|&&x| x != 0xAA).count();
    assert_eq!(
        (touched, a.qp.counters.chunks_placed),
        (0, 0),
        "bytes of A's memory written (of {}) and chunks placed after its QP failed",
        a_mem.len()
    );
    // The two chunks did arrive in that batch, behind the verdict: still in the
    // transport's receive queue, never taken.
    let eq = a.qp.engine_qpn;
    let mut waiting = 0;
    while let Some(c) = a.qp.worker.poll_recv_cq(eq) {
        assert_eq!(c.status, WcStatus::Success);
        waiting += 1;
    }
    assert_eq!(waiting, 2);
}

/// Fix 3: a WRITE whose remote range wraps past 2^64 lies in no MR. It completes
/// `IBV_WC_REM_ACCESS_ERR` and fails the QP before any chunk of it leaves; before, its
/// chunks went out with wrapped addresses and the peer's device decided each, so a
/// chunk past the wrap was placed at the bottom of the address space (here an MR
/// registered at iova 0).
#[test]
fn a_write_whose_remote_range_wraps_completes_rem_access_err_and_sends_nothing() {
    // (bytes, remote address): 100 bytes from 2^64 - 10; 16 KiB + 100 from 2^64 - 16 KiB
    // (its second chunk wraps to address 0).
    let cases = [
        (100usize, u64::MAX - 9),
        (CHUNK_BYTES + 100, 0u64.wrapping_sub(CHUNK_BYTES as u64)),
    ];
    let mut got = Vec::new();
    for (len, remote_addr) in cases {
        let (_fab, mut a, mut b) = pair();
        let mut a_src = vec![0x11u8; len];
        let a_src_mr = a.pd.reg_va(&mut a_src, false, 0x100);
        // B's MR at iova 0: a WRITE's wrapped address lands in it.
        let mut b_mem = vec![0xBBu8; 4096];
        let b_mr = b.pd.reg(&mut b_mem, 0, true, 0x200);
        a.write(7, &a_src, a_src_mr.lkey, remote_addr, b_mr.rkey);
        let t0 = Instant::now();
        let wcs = loop {
            assert!(t0.elapsed() < Duration::from_secs(10), "no completion");
            a.qp.step();
            b.qp.step();
            let w = a.send_wcs();
            if !w.is_empty() {
                break w;
            }
        };
        for _ in 0..10 {
            a.qp.step();
            b.qp.step();
        }
        got.push((
            wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            a.qp.counters.chunks_sent,
            b.qp.counters.placement_refused,
            b.events(),
            b_mem.iter().filter(|&&x| x != 0xBB).count(),
        ));
        assert_eq!(a.qp.state, QpState::Err);
        assert_eq!(a.qp.counters.remote_access_errors, 1);
    }
    let nothing_sent = (vec![(7, wc_status::REM_ACCESS_ERR)], 0, 0, Vec::new(), 0);
    assert_eq!(
        got,
        [nothing_sent.clone(), nothing_sent],
        "per case: (completions (wr_id, status), chunks sent, chunks the peer's device \
         refused, the peer's async events, bytes of the peer's MR at iova 0 written)"
    );
}

/// An ONLINE explicit (EXP) EV profile `id` in the process's registry, format `id + 1`
/// (STEV, one 32-bit field), of the EVs `(value, port)` in order.
fn exp_profile(id: u64, evs: &[(u32, u8)]) {
    use crate::ctl::{
        self, Ev, EvModify, EvOpEntry, FmtModify, ev_mode, ev_op, fields_op, fmt_mode, mask,
    };
    let ports = ctl::limits::MAX_PORTS;
    let mut r = lock(ctl::registry());
    let fmt = id + 1;
    r.modify_fmt(
        fmt,
        &FmtModify {
            mask: mask::FMT_STATE | mask::FMT_MODE | mask::FMT_OP,
            state: 1,
            mode: fmt_mode::STEV,
            op: fields_op::MODIFY,
            fields: vec![32],
        },
    )
    .unwrap();
    let on = |m| FmtModify {
        mask: m,
        state: 2,
        ..FmtModify::default()
    };
    r.modify_fmt(fmt, &on(mask::FMT_STATE)).unwrap();
    r.modify_ev(
        id,
        &EvModify {
            mask: mask::EV_STATE | mask::EV_MODE | mask::EV_FMT_ID | mask::EV_COUNT,
            state: 1,
            mode: ev_mode::EXP,
            fmt_id: fmt,
            count: evs.len() as u32,
            ports,
            ..EvModify::default()
        },
    )
    .unwrap();
    let entries = evs
        .iter()
        .map(|&(v, port)| EvOpEntry {
            ev: Ev::UNPOPULATED,
            ev_new: Ev {
                port,
                ..Ev::from_u32(v)
            },
            ..EvOpEntry::default()
        })
        .collect();
    r.modify_ev(
        id,
        &EvModify {
            mask: mask::EV_OP,
            op: ev_op::REPLACE_EV,
            entries,
            ports,
            ..EvModify::default()
        },
    )
    .unwrap();
    r.modify_ev(
        id,
        &EvModify {
            mask: mask::EV_STATE,
            state: 2,
            ..EvModify::default()
        },
    )
    .unwrap();
}

/// `mrc_x_qp_evs`'s entries of a connected QP: (EV, plane, plane state code).
fn ev_view(side: &mut Side) -> Vec<(u32, u32, u32)> {
    side.qp
        .transport_view()
        .expect("connected")
        .evs
        .iter()
        .map(|e| (e.ev, e.plane, e.plane_state))
        .collect()
}

impl Side {
    /// Per transport EV of the connected QP: (EV, plane).
    fn ev_planes(&mut self) -> Vec<(u32, u8)> {
        let eq = self.qp.engine_qpn;
        self.qp
            .worker
            .with_conn(eq, |c| {
                c.paths().paths().iter().map(|p| (p.ev, p.plane)).collect()
            })
            .expect("connected")
    }

    /// Per plane of the connected QP: data packets its EVs sent (first transmissions and
    /// retransmissions) and its state.
    fn planes(&mut self) -> Vec<(u64, mrc_transport::path::PlaneState)> {
        let eq = self.qp.engine_qpn;
        self.qp
            .worker
            .with_conn(eq, |c| {
                let t = c.paths();
                (0..t.planes().len())
                    .map(|q| (t.plane_ev_stats(q as u8).sent, t.planes()[q].state))
                    .collect()
            })
            .expect("connected")
    }

    /// Datagrams each plane's device sent.
    fn device_tx(&mut self) -> Vec<u64> {
        let dp = self.qp.worker.datapath_mut();
        (0..dp.plane_count())
            .map(|p| dp.plane_dp(p).expect("plane").stats().tx_datagrams)
            .collect()
    }
}

/// Two QPs on `gids_a` and `gids_b` (one NIC per plane each) on EV profile `profile`,
/// brought to RTS against each other and stepped until both connected.
fn pair_on(gids_a: &[Ipv6Addr], gids_b: &[Ipv6Addr], profile: u64) -> (FakeFabric, Side, Side) {
    let fab = FakeFabric::new();
    let mut a = side_on(&fab, gids_a);
    let mut b = side_on(&fab, gids_b);
    a.qp.settings.ev_profile_id = profile;
    b.qp.settings.ev_profile_id = profile;
    let (qa, qb) = (a.qp.qpn, b.qp.qpn);
    a.bring_up(b.gid, qb);
    b.bring_up(a.gid, qa);
    let t0 = Instant::now();
    while !matches!(a.qp.phase, Phase::Connected) || !matches!(b.qp.phase, Phase::Connected) {
        assert!(t0.elapsed() < Duration::from_secs(10), "no rendezvous");
        a.qp.step();
        b.qp.step();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(a.events(), [event::COMM_EST]);
    assert_eq!(b.events(), [event::COMM_EST]);
    (fab, a, b)
}

/// Message `k`'s byte `i`.
fn pattern(k: usize, i: usize) -> u8 {
    ((k * 31 + i * 7 + i / 251) % 253) as u8
}

/// A WRITEs messages `ks` (`len` bytes each, message `k` to offset `k * len` of B's MR
/// `dst`) from `src` (message `k`'s bytes at `k * len`, under `lkey`), all posted at once,
/// and steps both QPs until every one completed; returns the completions' statuses.
fn write_messages(
    a: &mut Side,
    b: &mut Side,
    ks: std::ops::Range<usize>,
    len: usize,
    src: &[u8],
    lkey: u32,
    dst: (u64, u32),
) -> Vec<u32> {
    let n = ks.len();
    for k in ks {
        a.write(
            k as u64,
            &src[k * len..(k + 1) * len],
            lkey,
            dst.0 + (k * len) as u64,
            dst.1,
        );
    }
    let mut wcs = Vec::new();
    let t0 = Instant::now();
    while wcs.len() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} of {n} WRITEs completed",
            wcs.len()
        );
        a.qp.step();
        b.qp.step();
        wcs.extend(a.send_wcs().iter().map(|w| w.status));
    }
    wcs
}

/// Issue 43, lib_mrc over two planes: one fake NIC per plane at each end (the context's
/// device and `MRC_PLANE_DEVICES`' one), an EXP profile whose EVs name ports 1 and 2.
/// The hello carries both planes' endpoints; each EV lands on the plane its port names,
/// at both ends; both planes carry the WRITEs (8 x 64 KiB: 32 chunks of 5 packets, 160
/// data packets, each plane a third or more, plane 1's device sending exactly plane 1's
/// packets), bytes exact. Then every packet to a plane-1 GID is dropped (plane 1 dead):
/// the next 8 WRITEs complete exact over plane 0 and the sender takes plane 1 down by
/// loss; 8 more send no data packet on plane 1.
#[test]
fn two_planes_place_each_ev_on_its_port_and_survive_losing_one() {
    use mrc_transport::path::{PlaneDownCause, PlaneState};
    const PROFILE: u64 = 4300;
    const LEN: usize = 64 * 1024;
    const ROUND: usize = 8;
    const MSGS: usize = 3 * ROUND;
    // 16 KiB + the 32-byte header in 4040-byte payloads: 5 packets a chunk.
    const PACKETS: u64 = (ROUND * LEN / CHUNK_BYTES * 5) as u64;
    let evs = [
        (0x100, 1),
        (0x101, 2),
        (0x102, 2),
        (0x103, 1),
        (0x104, 2),
        (0x105, 1),
    ];
    exp_profile(PROFILE, &evs);
    let g = |plane: u8, host: u8| std::net::Ipv4Addr::new(10, plane, 0, host).to_ipv6_mapped();
    let (fab, mut a, mut b) = pair_on(&[g(0, 1), g(1, 1)], &[g(0, 2), g(1, 2)], PROFILE);
    let want: Vec<(u32, u8)> = evs.iter().map(|&(v, port)| (v, port - 1)).collect();
    assert_eq!(a.ev_planes(), want);
    assert_eq!(b.ev_planes(), want);
    let mut src: Vec<u8> = (0..MSGS * LEN).map(|i| pattern(i / LEN, i % LEN)).collect();
    let src_mr = a.pd.reg_va(&mut src, false, 0x100);
    let mut dst = vec![0u8; MSGS * LEN];
    let dst_mr = b.pd.reg_va(&mut dst, true, 0x200);
    let to = (dst_mr.iova, dst_mr.rkey);
    let first = |a: &mut Side| -> Vec<u64> {
        let eq = a.qp.engine_qpn;
        a.qp.worker
            .with_conn(eq, |c| {
                (0..2u8)
                    .map(|q| {
                        let s = c.paths().plane_ev_stats(q);
                        s.sent - s.retransmitted
                    })
                    .collect()
            })
            .expect("connected")
    };

    // 1. Both planes up.
    let st = write_messages(&mut a, &mut b, 0..ROUND, LEN, &src, src_mr.lkey, to);
    assert_eq!(st, vec![wc_status::SUCCESS; ROUND]);
    assert_eq!(
        &dst[..ROUND * LEN],
        &src[..ROUND * LEN],
        "bytes, both planes up"
    );
    let once = first(&mut a);
    assert_eq!(
        once.iter().sum::<u64>(),
        PACKETS,
        "first transmissions {once:?}"
    );
    assert!(
        once.iter().all(|&n| n * 3 >= PACKETS),
        "each plane a third or more: {once:?}"
    );
    let planes = a.planes();
    assert_eq!(
        planes.iter().map(|p| p.1).collect::<Vec<_>>(),
        [PlaneState::Up, PlaneState::Up]
    );
    assert_eq!(
        ev_view(&mut a),
        evs.iter()
            .map(|&(v, port)| (v, u32::from(port) - 1, ext::MRC_X_PLANE_UP))
            .collect::<Vec<_>>()
    );
    // No hello or acknowledgement leaves on plane 1: its device sent its EVs' packets.
    let tx = a.device_tx();
    assert_eq!(tx[1], planes[1].0, "plane 1's device datagrams, {tx:?}");
    assert!(tx[0] >= planes[0].0, "plane 0's device datagrams, {tx:?}");

    // 2. Plane 1 dies: nothing reaches a plane-1 GID any more.
    let dead = [g(1, 1), g(1, 2)];
    fab.set_filter(move |p| !dead.contains(&p.dgid));
    let st = write_messages(&mut a, &mut b, ROUND..2 * ROUND, LEN, &src, src_mr.lkey, to);
    assert_eq!(st, vec![wc_status::SUCCESS; ROUND]);
    assert_eq!(
        &dst[..2 * ROUND * LEN],
        &src[..2 * ROUND * LEN],
        "bytes after plane 1 died"
    );
    assert_eq!(first(&mut a).iter().sum::<u64>(), 2 * PACKETS);
    let planes = a.planes();
    assert_eq!(planes[1].1, PlaneState::Down(PlaneDownCause::Loss));
    assert_eq!(planes[0].1, PlaneState::Up);
    // mrcx's `mrc_x_qp_evs` view: each EV with its plane and the plane's state.
    assert_eq!(
        ev_view(&mut a),
        evs.iter()
            .map(|&(v, port)| {
                let down = if port == 2 {
                    ext::MRC_X_PLANE_DOWN_LOSS
                } else {
                    ext::MRC_X_PLANE_UP
                };
                (v, u32::from(port) - 1, down)
            })
            .collect::<Vec<_>>()
    );

    // 3. Plane 1 down: no data packet leaves on it.
    let st = write_messages(&mut a, &mut b, 2 * ROUND..MSGS, LEN, &src, src_mr.lkey, to);
    assert_eq!(st, vec![wc_status::SUCCESS; ROUND]);
    assert_eq!(dst, src, "bytes, plane 1 down");
    let after = a.planes();
    assert_eq!(
        after[1].0, planes[1].0,
        "data packets on plane 1 while down"
    );
    assert!(after[0].0 >= planes[0].0 + PACKETS);
    assert_eq!(b.qp.counters.bad_chunks, 0);
    assert_eq!(
        b.qp.counters.chunks_placed,
        (MSGS * LEN / CHUNK_BYTES) as u64
    );
}

/// Issue 43: a QP on two planes and a peer's on one (or the reverse) do not connect:
/// each end's hello says how many planes it has, and each refuses the other's with the
/// QP in ERR (`IBV_EVENT_QP_FATAL`), its rendezvous path closed.
#[test]
fn a_peer_on_another_plane_count_fails_the_rendezvous() {
    let g = |plane: u8, host: u8| std::net::Ipv4Addr::new(10, plane, 0, host).to_ipv6_mapped();
    let fab = FakeFabric::new();
    let mut a = side_on(&fab, &[g(0, 1), g(1, 1)]);
    let mut b = side_on(&fab, &[g(0, 2)]);
    let (qa, qb) = (a.qp.qpn, b.qp.qpn);
    a.bring_up(b.gid, qb);
    b.bring_up(a.gid, qa);
    let t0 = Instant::now();
    while !matches!(a.qp.phase, Phase::Failed) || !matches!(b.qp.phase, Phase::Failed) {
        assert!(t0.elapsed() < Duration::from_secs(10), "no refusal");
        a.qp.step();
        b.qp.step();
        std::thread::sleep(Duration::from_millis(1));
    }
    for s in [&mut a, &mut b] {
        assert_eq!(s.qp.state, QpState::Err);
        assert_eq!(s.events(), [event::QP_FATAL]);
        assert_eq!(s.conns_open(4), 0);
        assert!(s.qp.counters.hellos_heard >= 1);
    }
}

/// Issue 43: a profile whose EVs do not fit the QP's planes is refused at RTS with
/// `EINVAL` (port 2 on one plane; no EV on port 2 on two planes; 3 EVs on port 1 and 1
/// on port 2), nothing started; the default profile 0 spreads its 16 EVs over both
/// planes (EV i on plane i mod 2).
#[test]
fn a_profile_that_does_not_fit_the_planes_is_refused_at_rts() {
    let g = |plane: u8, host: u8| std::net::Ipv4Addr::new(10, plane, 0, host).to_ipv6_mapped();
    exp_profile(4310, &[(1, 1), (2, 2)]);
    exp_profile(4320, &[(1, 1), (2, 1)]);
    exp_profile(4330, &[(1, 1), (2, 1), (3, 1), (4, 2)]);
    let fab = FakeFabric::new();
    let two = vec![g(0, 1), g(1, 1)];
    for (gids, profile) in [(vec![g(0, 1)], 4310), (two.clone(), 4320), (two, 4330)] {
        let mut a = side_on(&fab, &gids);
        a.qp.settings.ev_profile_id = profile;
        a.qp.set_state(QpState::Init);
        a.qp.set_peer(g(0, 2), 0x42, None).expect("RTR");
        a.qp.set_state(QpState::Rtr);
        assert_eq!(a.qp.start(None), Err(libc::EINVAL), "profile {profile}");
        assert!(matches!(a.qp.phase, Phase::Idle));
        assert_eq!(a.qp.engine_qpn, 0);
    }
    let (_fab, mut a, _b) = pair_on(&[g(0, 1), g(1, 1)], &[g(0, 2), g(1, 2)], 0);
    let want: Vec<(u32, u8)> = (0..16).map(|i| (i, (i % 2) as u8)).collect();
    assert_eq!(a.ev_planes(), want);
}
