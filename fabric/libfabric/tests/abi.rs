//! The provider called the way libfabric and its applications call it, in process and
//! without libfabric: `fi_prov_ini`, then every object through its `fi_ops_*` tables.
//! Bad input answers negative `FI_E*` codes; a message sent to the endpoint's own address
//! arrives whole.

use mrc_fi::ffi::*;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

fn neg(e: u32) -> isize {
    -(e as isize)
}

unsafe fn close(f: *mut fid) -> c_int {
    unsafe { ((*(*f).ops).close.unwrap())(f) }
}

#[test]
fn bad_input_gets_negative_codes_and_a_message_to_self_arrives() {
    unsafe {
        let prov = &*mrc_fi::fi_prov_ini();
        assert_eq!(std::ffi::CStr::from_ptr(prov.name), c"mrc");
        assert_eq!(prov.fi_version, (1 << 16) | 17);
        let getinfo = prov.getinfo.unwrap();
        let v = (1 << 16) | 17;

        // getinfo: a null out-pointer, hints it cannot meet.
        assert_eq!(
            getinfo(
                v,
                std::ptr::null(),
                std::ptr::null(),
                0,
                std::ptr::null(),
                null_mut()
            ),
            -(FI_EINVAL as c_int)
        );
        let mut ep_attr = fi_ep_attr {
            type_: FI_EP_MSG,
            ..Default::default()
        };
        let mut hints = fi_info {
            ep_attr: &mut ep_attr,
            ..Default::default()
        };
        let mut info: *mut fi_info = null_mut();
        assert_eq!(
            getinfo(v, std::ptr::null(), std::ptr::null(), 0, &hints, &mut info),
            -(FI_ENODATA as c_int)
        );
        (*hints.ep_attr).type_ = FI_EP_RDM;
        // RMA reads (the transport has no READ) and atomics are not offered.
        for caps in [(FI_RMA | FI_READ) as u64, FI_ATOMIC as u64] {
            hints.caps = caps;
            assert_eq!(
                getinfo(v, std::ptr::null(), std::ptr::null(), 0, &hints, &mut info),
                -(FI_ENODATA as c_int)
            );
        }
        hints.caps = FI_MSG as u64;
        // A host name that does not resolve (fabtests' negative unit tests): no match.
        let bad = c"g00n13s.invalid".as_ptr();
        assert_eq!(
            getinfo(v, bad, std::ptr::null(), 0, &hints, &mut info),
            -(FI_ENODATA as c_int)
        );
        let lo = c"127.0.0.1".as_ptr();
        assert_eq!(getinfo(v, lo, std::ptr::null(), 0, &hints, &mut info), 0);
        mrc_fi::free_info(info);
        info = null_mut();
        assert_eq!(
            getinfo(v, std::ptr::null(), std::ptr::null(), 0, &hints, &mut info),
            0
        );
        // Hints the provider cannot meet: an order past send-after-send, a shared AV.
        let mut tx = fi_tx_attr {
            msg_order: (FI_ORDER_SAS | FI_ORDER_RAW) as u64,
            ..Default::default()
        };
        let mut dom = fi_domain_attr {
            caps: FI_SHARED_AV,
            ..Default::default()
        };
        let mut odd = fi_info {
            tx_attr: &mut tx,
            ..Default::default()
        };
        let mut other: *mut fi_info = null_mut();
        let no = std::ptr::null();
        let enodata = -(FI_ENODATA as c_int);
        assert_eq!(getinfo(v, no, no, 0, &odd, &mut other), enodata);
        (*odd.tx_attr).msg_order = FI_ORDER_SAS as u64;
        odd.domain_attr = &mut dom;
        assert_eq!(getinfo(v, no, no, 0, &odd, &mut other), enodata);
        (*odd.domain_attr).caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
        assert_eq!(getinfo(v, no, no, 0, &odd, &mut other), 0);
        mrc_fi::free_info(other);
        // Asked for FI_MSG only: the primary capabilities asked for, both directions.
        let comm = FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
        assert_eq!((*info).caps, (FI_MSG | FI_SEND | FI_RECV) as u64 | comm);
        assert!(!info.is_null());
        assert_eq!((*(*info).ep_attr).type_, FI_EP_RDM);

        // fabric, domain, AV, CQ, endpoint.
        assert_eq!(
            (prov.fabric.unwrap())((*info).fabric_attr, null_mut(), null_mut()),
            -(FI_EINVAL as c_int)
        );
        let mut fabric: *mut fid_fabric = null_mut();
        assert_eq!(
            (prov.fabric.unwrap())((*info).fabric_attr, &mut fabric, null_mut()),
            0
        );
        let mut domain: *mut fid_domain = null_mut();
        assert_eq!(
            ((*(*fabric).ops).domain.unwrap())(fabric, info, &mut domain, null_mut()),
            0
        );
        let dops = &*(*domain).ops;
        let mut av: *mut fid_av = null_mut();
        let mut av_attr = fi_av_attr {
            type_: FI_AV_TABLE,
            ..Default::default()
        };
        assert_eq!(
            (dops.av_open.unwrap())(domain, &mut av_attr, &mut av, null_mut()),
            0
        );
        let mut cq: *mut fid_cq = null_mut();
        let mut cq_attr = fi_cq_attr {
            format: FI_CQ_FORMAT_MSG,
            ..Default::default()
        };
        assert_eq!(
            (dops.cq_open.unwrap())(domain, &mut cq_attr, &mut cq, null_mut()),
            0
        );
        let mut ep: *mut fid_ep = null_mut();
        assert_eq!(
            (dops.endpoint.unwrap())(domain, info, &mut ep, null_mut()),
            0
        );
        mrc_fi::free_info(info);

        // A tagged send before fi_enable; unimplemented calls: -FI_ENOSYS, never a crash.
        let t = &*(*ep).tagged;
        assert_eq!(
            (t.send.unwrap())(ep, std::ptr::null(), 0, null_mut(), 0, 0, null_mut()),
            neg(FI_EOPBADSTATE)
        );
        let r = &*(*ep).rma;
        assert_eq!(
            (r.write.unwrap())(ep, std::ptr::null(), 0, null_mut(), 0, 0, 0, null_mut()),
            neg(FI_EOPBADSTATE)
        );
        assert_eq!(
            (r.read.unwrap())(ep, null_mut(), 0, null_mut(), 0, 0, 0, null_mut()),
            neg(FI_ENOSYS)
        );

        // getname: too small a buffer says how much it needs.
        let cm = &*(*ep).cm;
        let mut name = [0u8; 64];
        let mut len = 8usize;
        assert_eq!(
            (cm.getname.unwrap())(&mut (*ep).fid, name.as_mut_ptr().cast(), &mut len),
            -(FI_ETOOSMALL as c_int)
        );
        assert_eq!(len, mrc_fi::ADDR_LEN);
        len = name.len();
        assert_eq!(
            (cm.getname.unwrap())(&mut (*ep).fid, name.as_mut_ptr().cast(), &mut len),
            0
        );
        assert_eq!(len, mrc_fi::ADDR_LEN);

        // av_insert: foreign bytes are not an address; our own name is.
        let aops = &*(*av).ops;
        let junk = [0x55u8; 60];
        let mut fa = [0u64; 2];
        assert_eq!(
            (aops.insert.unwrap())(av, junk.as_ptr().cast(), 1, fa.as_mut_ptr(), 0, null_mut()),
            0
        );
        assert_eq!(fa[0], u64::MAX);
        assert_eq!(
            (aops.insert.unwrap())(av, name.as_ptr().cast(), 1, fa.as_mut_ptr(), 0, null_mut()),
            1
        );
        let me = fa[0];

        // Sends before fi_enable, and on a null buffer, are refused.
        let m = &*(*ep).msg;
        let msg = b"hello over mrc";
        assert_eq!(
            (m.send.unwrap())(
                ep,
                msg.as_ptr().cast(),
                msg.len(),
                null_mut(),
                me,
                null_mut()
            ),
            neg(FI_EOPBADSTATE)
        );
        let eops = &*(*ep).fid.ops;
        assert_eq!((eops.bind.unwrap())(&mut (*ep).fid, &mut (*av).fid, 0), 0);
        assert_eq!(
            (eops.bind.unwrap())(&mut (*ep).fid, &mut (*cq).fid, 0),
            -(FI_EBADFLAGS as c_int)
        );
        assert_eq!(
            (eops.bind.unwrap())(
                &mut (*ep).fid,
                &mut (*cq).fid,
                (FI_TRANSMIT | FI_RECV) as u64
            ),
            0
        );
        assert_eq!(
            (eops.control.unwrap())(&mut (*ep).fid, FI_ENABLE as c_int, null_mut()),
            0
        );
        assert_eq!(
            (m.send.unwrap())(ep, std::ptr::null(), 4, null_mut(), me, null_mut()),
            neg(FI_EINVAL)
        );
        assert_eq!(
            (m.send.unwrap())(
                ep,
                msg.as_ptr().cast(),
                msg.len(),
                null_mut(),
                99,
                null_mut()
            ),
            neg(FI_EINVAL)
        );
        assert_eq!(
            (m.inject.unwrap())(ep, msg.as_ptr().cast(), 5000, me),
            neg(FI_EMSGSIZE)
        );

        // A message to itself, into a receive posted first.
        let mut rbuf = [0u8; 64];
        let (rctx, sctx) = (0x1000usize as *mut c_void, 0x2000usize as *mut c_void);
        assert_eq!(
            (m.recv.unwrap())(
                ep,
                rbuf.as_mut_ptr().cast(),
                rbuf.len(),
                null_mut(),
                0,
                rctx
            ),
            0
        );
        assert_eq!(
            (m.send.unwrap())(ep, msg.as_ptr().cast(), msg.len(), null_mut(), me, sctx),
            0
        );
        let cops = &*(*cq).ops;
        assert_eq!((cops.read.unwrap())(cq, null_mut(), 1), neg(FI_EINVAL));
        let mut got = Vec::new();
        let t0 = Instant::now();
        while got.len() < 2 && t0.elapsed() < Duration::from_secs(20) {
            let mut e = [fi_cq_msg_entry::default(); 4];
            let n = (cops.read.unwrap())(cq, e.as_mut_ptr().cast(), e.len());
            if n > 0 {
                got.extend_from_slice(&e[..n as usize]);
            } else {
                assert_eq!(n, neg(FI_EAGAIN));
            }
        }
        assert_eq!(got.len(), 2, "two completions");
        let recv = got
            .iter()
            .find(|e| e.op_context == rctx)
            .expect("receive completion");
        assert_eq!(recv.flags, (FI_RECV | FI_MSG) as u64);
        assert_eq!(recv.len, msg.len());
        assert_eq!(&rbuf[..msg.len()], msg);
        let send = got
            .iter()
            .find(|e| e.op_context == sctx)
            .expect("send completion");
        assert_eq!(send.flags, (FI_SEND | FI_MSG) as u64);

        // A message longer than the receive: FI_ETRUNC through fi_cq_readerr.
        let mut small = [0u8; 4];
        assert_eq!(
            (m.recv.unwrap())(
                ep,
                small.as_mut_ptr().cast(),
                small.len(),
                null_mut(),
                0,
                rctx
            ),
            0
        );
        assert_eq!(
            (m.inject.unwrap())(ep, msg.as_ptr().cast(), msg.len(), me),
            0
        );
        let t0 = Instant::now();
        let mut e = [fi_cq_msg_entry::default(); 1];
        let mut r = neg(FI_EAGAIN);
        while r == neg(FI_EAGAIN) && t0.elapsed() < Duration::from_secs(20) {
            r = (cops.read.unwrap())(cq, e.as_mut_ptr().cast(), 1);
        }
        assert_eq!(r, neg(FI_EAVAIL));
        let mut err = fi_cq_err_entry::default();
        assert_eq!((cops.readerr.unwrap())(cq, &mut err, 0), 1);
        assert_eq!(err.err, FI_ETRUNC as c_int);
        assert_eq!((err.len, err.olen), (4, msg.len() - 4));
        assert_eq!(&small, &msg[..4]);

        // A CQ or AV still bound cannot close; in order, everything closes.
        assert_eq!(close(&mut (*cq).fid), -(FI_EBUSY as c_int));
        assert_eq!(close(&mut (*ep).fid), 0);
        assert_eq!(close(&mut (*cq).fid), 0);
        assert_eq!(close(&mut (*av).fid), 0);
        assert_eq!(close(&mut (*domain).fid), 0);
        assert_eq!(close(&mut (*fabric).fid), 0);
    }
}

// ---------------------------------------------------------------------------------
// Tagged messages: a harness of endpoints in one domain, one AV holding every
// endpoint's address, one CQ (FI_CQ_FORMAT_TAGGED) per endpoint.

/// A domain with `n` enabled endpoints; `addr[i]` is endpoint i's entry in the shared AV.
struct Net {
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    av: *mut fid_av,
    eps: Vec<*mut fid_ep>,
    cqs: Vec<*mut fid_cq>,
    addr: Vec<u64>,
    /// More objects of the domain (counters, CQs) a test opened, closed after the
    /// endpoints.
    extra: Vec<*mut fid>,
}

/// A completion as `fi_cq_read` (TAGGED format) or `fi_cq_readerr` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cqe {
    ctx: usize,
    flags: u64,
    len: usize,
    buf: usize,
    data: u64,
    tag: u64,
    /// 0, or the error of an error entry.
    err: c_int,
    olen: usize,
}

const DEADLINE: Duration = Duration::from_secs(30);

fn ctx(n: usize) -> *mut c_void {
    n as *mut c_void
}

impl Net {
    /// `caps`: the `fi_info` caps the endpoints are opened with.
    unsafe fn new(n: usize, caps: u64) -> Net {
        unsafe { Net::with(n, caps, 0, 0) }
    }

    /// `op_flags`: the hints' tx and rx `op_flags`; `bind`: more flags binding the CQs.
    unsafe fn with(n: usize, caps: u64, op_flags: u64, bind: u64) -> Net {
        unsafe { Net::with_mr_mode(n, caps, op_flags, bind, 0).0 }
    }

    /// As [`Net::with`], the hints offering `mr_mode`; with the `mr_mode` the `fi_info`
    /// answered.
    unsafe fn with_mr_mode(
        n: usize,
        caps: u64,
        op_flags: u64,
        bind: u64,
        mr_mode: c_int,
    ) -> (Net, c_int) {
        unsafe {
            let prov = &*mrc_fi::fi_prov_ini();
            let v = (1 << 16) | 17;
            let mut tx = fi_tx_attr {
                op_flags,
                ..Default::default()
            };
            let mut rx = fi_rx_attr {
                op_flags,
                ..Default::default()
            };
            let mut dom = fi_domain_attr {
                mr_mode,
                ..Default::default()
            };
            let mut hints = fi_info {
                caps,
                tx_attr: &mut tx,
                rx_attr: &mut rx,
                domain_attr: &mut dom,
                ..Default::default()
            };
            let mut info: *mut fi_info = null_mut();
            let no = std::ptr::null();
            assert_eq!(
                (prov.getinfo.unwrap())(v, no, no, 0, &mut hints, &mut info),
                0
            );
            assert_eq!((*info).caps & caps, caps);
            let answered = (*(*info).domain_attr).mr_mode;
            let mut fabric: *mut fid_fabric = null_mut();
            assert_eq!(
                (prov.fabric.unwrap())((*info).fabric_attr, &mut fabric, null_mut()),
                0
            );
            let mut domain: *mut fid_domain = null_mut();
            assert_eq!(
                ((*(*fabric).ops).domain.unwrap())(fabric, info, &mut domain, null_mut()),
                0
            );
            let dops = &*(*domain).ops;
            let mut av: *mut fid_av = null_mut();
            let mut av_attr = fi_av_attr {
                type_: FI_AV_MAP,
                ..Default::default()
            };
            assert_eq!(
                (dops.av_open.unwrap())(domain, &mut av_attr, &mut av, null_mut()),
                0
            );
            let mut net = Net {
                fabric,
                domain,
                av,
                eps: Vec::new(),
                cqs: Vec::new(),
                addr: Vec::new(),
                extra: Vec::new(),
            };
            for _ in 0..n {
                let mut cq: *mut fid_cq = null_mut();
                let mut cq_attr = fi_cq_attr {
                    format: FI_CQ_FORMAT_TAGGED,
                    ..Default::default()
                };
                assert_eq!(
                    (dops.cq_open.unwrap())(domain, &mut cq_attr, &mut cq, null_mut()),
                    0
                );
                let mut ep: *mut fid_ep = null_mut();
                assert_eq!(
                    (dops.endpoint.unwrap())(domain, info, &mut ep, null_mut()),
                    0
                );
                let mut name = [0u8; mrc_fi::ADDR_LEN];
                let mut len = name.len();
                let cm = &*(*ep).cm;
                assert_eq!(
                    (cm.getname.unwrap())(&mut (*ep).fid, name.as_mut_ptr().cast(), &mut len),
                    0
                );
                let mut fa = 0u64;
                let aops = &*(*av).ops;
                assert_eq!(
                    (aops.insert.unwrap())(av, name.as_ptr().cast(), 1, &mut fa, 0, null_mut()),
                    1
                );
                let eops = &*(*ep).fid.ops;
                assert_eq!((eops.bind.unwrap())(&mut (*ep).fid, &mut (*av).fid, 0), 0);
                let both = (FI_TRANSMIT | FI_RECV) as u64 | bind;
                assert_eq!(
                    (eops.bind.unwrap())(&mut (*ep).fid, &mut (*cq).fid, both),
                    0
                );
                assert_eq!(
                    (eops.control.unwrap())(&mut (*ep).fid, FI_ENABLE as c_int, null_mut()),
                    0
                );
                net.eps.push(ep);
                net.cqs.push(cq);
                net.addr.push(fa);
            }
            mrc_fi::free_info(info);
            (net, answered)
        }
    }

    fn tagged(&self, i: usize) -> &fi_ops_tagged {
        unsafe { &*(*self.eps[i]).tagged }
    }

    fn msg(&self, i: usize) -> &fi_ops_msg {
        unsafe { &*(*self.eps[i]).msg }
    }

    /// `fi_tsend` of `b` from endpoint `i` to endpoint `to`.
    fn tsend(&self, i: usize, to: usize, b: &[u8], tag: u64, c: usize) -> isize {
        let t = self.tagged(i);
        let (p, n) = (b.as_ptr().cast(), b.len());
        unsafe { (t.send.unwrap())(self.eps[i], p, n, null_mut(), self.addr[to], tag, ctx(c)) }
    }

    /// `fi_trecv` into `b` on endpoint `i` from `src` (an AV entry or FI_ADDR_UNSPEC).
    fn trecv(&self, i: usize, b: &mut [u8], src: u64, tag: u64, ignore: u64, c: usize) -> isize {
        let t = self.tagged(i);
        let (p, n) = (b.as_mut_ptr().cast(), b.len());
        unsafe { (t.recv.unwrap())(self.eps[i], p, n, null_mut(), src, tag, ignore, ctx(c)) }
    }

    /// `fi_trecvmsg` with `flags` (one buffer, or none).
    fn trecvmsg(
        &self,
        i: usize,
        b: Option<&mut [u8]>,
        tag: u64,
        ignore: u64,
        c: usize,
        flags: u64,
    ) -> isize {
        let mut iov = iovec::default();
        let mut count = 0;
        if let Some(b) = b {
            iov.iov_base = b.as_mut_ptr().cast();
            iov.iov_len = b.len();
            count = 1;
        }
        let m = fi_msg_tagged {
            msg_iov: &iov,
            desc: null_mut(),
            iov_count: count,
            addr: mrc_fi::FI_ADDR_UNSPEC,
            tag,
            ignore,
            context: ctx(c),
            data: 0,
        };
        let t = self.tagged(i);
        unsafe { (t.recvmsg.unwrap())(self.eps[i], &m, flags) }
    }

    /// One `fi_cq_read` of endpoint `i`'s CQ (a progress pass): its entries, or the
    /// error entry waiting.
    fn read_once(&self, i: usize) -> Vec<Cqe> {
        let cq = self.cqs[i];
        let ops = unsafe { &*(*cq).ops };
        let mut e = [fi_cq_tagged_entry::default(); 8];
        let n = unsafe { (ops.read.unwrap())(cq, e.as_mut_ptr().cast(), e.len()) };
        if n == neg(FI_EAVAIL) {
            let mut err = fi_cq_err_entry::default();
            assert_eq!(unsafe { (ops.readerr.unwrap())(cq, &mut err, 0) }, 1);
            return vec![Cqe {
                ctx: err.op_context as usize,
                flags: err.flags,
                len: err.len,
                buf: err.buf as usize,
                data: err.data,
                tag: err.tag,
                err: err.err,
                olen: err.olen,
            }];
        }
        if n == neg(FI_EAGAIN) {
            return Vec::new();
        }
        assert!(n > 0, "fi_cq_read: {n}");
        e[..n as usize]
            .iter()
            .map(|x| Cqe {
                ctx: x.op_context as usize,
                flags: x.flags,
                len: x.len,
                buf: x.buf as usize,
                data: x.data,
                tag: x.tag,
                err: 0,
                olen: 0,
            })
            .collect()
    }

    /// Reads every endpoint's CQ until `n` entries came from endpoint `i`'s (the others
    /// are progressed and their entries kept in `other`), within [`DEADLINE`].
    fn wait(&self, i: usize, n: usize, other: &mut Vec<Cqe>) -> Vec<Cqe> {
        let t = Instant::now();
        let mut got = Vec::new();
        while got.len() < n {
            assert!(
                t.elapsed() < DEADLINE,
                "{} of {n} entries: {got:?}",
                got.len()
            );
            for j in 0..self.eps.len() {
                let e = self.read_once(j);
                if j == i {
                    got.extend(e);
                } else {
                    other.extend(e);
                }
            }
        }
        assert_eq!(got.len(), n, "{got:?}");
        got
    }

    /// A few more progress passes on every endpoint; no entry may appear.
    fn quiet(&self) {
        for _ in 0..3 {
            for j in 0..self.eps.len() {
                assert_eq!(self.read_once(j), Vec::new(), "endpoint {j}");
            }
        }
    }

    /// `fi_cancel` on endpoint `i`.
    fn cancel(&self, i: usize, c: usize) -> isize {
        let ops = unsafe { &*(*self.eps[i]).ops };
        unsafe { (ops.cancel.unwrap())(self.eps[i].cast(), ctx(c)) }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        unsafe {
            for &ep in &self.eps {
                assert_eq!(close(&mut (*ep).fid), 0);
            }
            for &f in &self.extra {
                assert_eq!(close(f), 0);
            }
            for &cq in &self.cqs {
                assert_eq!(close(&mut (*cq).fid), 0);
            }
            assert_eq!(close(&mut (*self.av).fid), 0);
            assert_eq!(close(&mut (*self.domain).fid), 0);
            assert_eq!(close(&mut (*self.fabric).fid), 0);
        }
    }
}

const TSEND: u64 = (FI_SEND | FI_TAGGED) as u64;
const TRECV: u64 = (FI_RECV | FI_TAGGED) as u64;

/// The send completion of `len` bytes with context `c`.
fn sent(c: usize, len: usize) -> Cqe {
    Cqe {
        ctx: c,
        flags: TSEND,
        len,
        buf: 0,
        data: 0,
        tag: 0,
        err: 0,
        olen: 0,
    }
}

/// The receive completion of `len` bytes into `buf` with `tag`.
fn got(c: usize, buf: &[u8], len: usize, tag: u64) -> Cqe {
    Cqe {
        ctx: c,
        flags: TRECV,
        len,
        buf: buf.as_ptr() as usize,
        data: 0,
        tag,
        err: 0,
        olen: 0,
    }
}

#[test]
fn tagged_receives_match_tag_and_ignore_bits_in_posting_order() {
    unsafe {
        let net = Net::new(1, FI_TAGGED as u64);
        let me = 0;
        let mut b = [[0u8; 16]; 4];
        let [b1, b2, b3, b4] = &mut b;
        // r1 and r2 want 0x1200..=0x12ff (the low byte ignored), r3 exactly 0x1300, r4 any.
        assert_eq!(
            net.trecv(me, b1, mrc_fi::FI_ADDR_UNSPEC, 0x1200, 0xff, 1),
            0
        );
        assert_eq!(
            net.trecv(me, b2, mrc_fi::FI_ADDR_UNSPEC, 0x12ff, 0xff, 2),
            0
        );
        assert_eq!(net.trecv(me, b3, mrc_fi::FI_ADDR_UNSPEC, 0x1300, 0, 3), 0);
        assert_eq!(net.trecv(me, b4, mrc_fi::FI_ADDR_UNSPEC, 0, u64::MAX, 4), 0);
        // 0x13ab: not r1, r2 (0x13 != 0x12), not r3 (exact) -> r4. Then 0x12ab -> r1,
        // 0x1300 -> r3, 0x1234 -> r2.
        assert_eq!(net.tsend(me, me, b"to r4", 0x13ab, 11), 0);
        let mut other = Vec::new();
        let e = net.wait(me, 2, &mut other);
        assert!(e.contains(&sent(11, 5)), "{e:?}");
        assert!(e.contains(&got(4, &b[3], 5, 0x13ab)), "{e:?}");
        let [b1, b2, b3, _] = &b;
        assert_eq!(net.tsend(me, me, b"to r1", 0x12ab, 12), 0);
        assert_eq!(net.tsend(me, me, b"to r3!", 0x1300, 13), 0);
        assert_eq!(net.tsend(me, me, b"to r2", 0x1234, 14), 0);
        let e = net.wait(me, 6, &mut other);
        let recvs: Vec<Cqe> = e.iter().copied().filter(|x| x.flags == TRECV).collect();
        // Receive completions in the order of arrival.
        assert_eq!(
            recvs,
            [
                got(1, b1, 5, 0x12ab),
                got(3, b3, 6, 0x1300),
                got(2, b2, 5, 0x1234)
            ]
        );
        for (c, l) in [(12, 5), (13, 6), (14, 5)] {
            assert!(e.contains(&sent(c, l)), "{e:?}");
        }
        assert_eq!(&b[0][..5], b"to r1");
        assert_eq!(&b[1][..5], b"to r2");
        assert_eq!(&b[2][..6], b"to r3!");
        assert_eq!(&b[3][..5], b"to r4");
        assert_eq!(other, []);
        net.quiet();
    }
}

/// Socket inodes of this process's descriptors.
fn own_socket_inodes() -> std::collections::HashSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let s = l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            s.parse().ok()
        })
        .collect()
}

/// Inodes of the sockets `/proc/self/net/<table>` lists (its tenth column).
fn table_inodes(table: &str) -> std::collections::HashSet<u64> {
    let t = std::fs::read_to_string(format!("/proc/self/net/{table}")).unwrap_or_default();
    t.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(9)?.parse().ok())
        .collect()
}

/// Issue 44: two endpoints connect on the first send, in band: the address is the
/// listener's UDP port with the in-band flag, and the process holds no TCP socket while
/// the connections are set up and after (no test of this file opens one).
#[test]
fn endpoints_connect_in_band_without_a_tcp_socket() {
    unsafe {
        let net = Net::new(2, FI_TAGGED as u64);
        let mut name = [0u8; mrc_fi::ADDR_LEN];
        let mut len = name.len();
        let ep = net.eps[1];
        let cm = &*(*ep).cm;
        assert_eq!(
            (cm.getname.unwrap())(&mut (*ep).fid, name.as_mut_ptr().cast(), &mut len),
            0
        );
        assert_eq!(len, 60);
        assert_eq!(
            name[56],
            mrc_fabric::engine::setup::HANDLE_FLAG_UDP_SETUP,
            "the in-band flag"
        );
        let port = u16::from_be_bytes([name[6], name[7]]);
        let udp = std::fs::read_to_string("/proc/self/net/udp").unwrap();
        assert!(
            udp.lines().any(|l| l.contains(&format!(":{port:04X} "))),
            "the address's port is a UDP socket: {udp}"
        );
        let mut b = [[0u8; 16]; 2];
        let [b0, b1] = &mut b;
        assert_eq!(net.trecv(1, b1, mrc_fi::FI_ADDR_UNSPEC, 7, 0, 1), 0);
        assert_eq!(net.trecv(0, b0, mrc_fi::FI_ADDR_UNSPEC, 8, 0, 2), 0);
        let tcp = || -> std::collections::HashSet<u64> {
            table_inodes("tcp")
                .union(&table_inodes("tcp6"))
                .copied()
                .collect()
        };
        // Set up and carried one way, then the other (each end connects on its first
        // send), checking for TCP sockets while the handshakes run.
        assert_eq!(net.tsend(0, 1, b"zero to one", 7, 11), 0);
        assert_eq!(own_socket_inodes().intersection(&tcp()).count(), 0);
        assert_eq!(net.tsend(1, 0, b"one to zero", 8, 12), 0);
        assert_eq!(own_socket_inodes().intersection(&tcp()).count(), 0);
        let (mut e0, mut e1) = (Vec::new(), Vec::new());
        let t = Instant::now();
        while e0.len() < 2 || e1.len() < 2 {
            assert!(t.elapsed() < DEADLINE, "{e0:?} {e1:?}");
            e0.extend(net.read_once(0));
            e1.extend(net.read_once(1));
        }
        assert_eq!(e0.len(), 2, "{e0:?}");
        assert_eq!(e1.len(), 2, "{e1:?}");
        assert!(e0.contains(&sent(11, 11)), "{e0:?}");
        assert!(e0.contains(&got(2, &b[0], 11, 8)), "{e0:?}");
        assert!(e1.contains(&sent(12, 11)), "{e1:?}");
        assert!(e1.contains(&got(1, &b[1], 11, 7)), "{e1:?}");
        assert_eq!(&b[1][..11], b"zero to one");
        assert_eq!(&b[0][..11], b"one to zero");
        assert_eq!(
            own_socket_inodes().intersection(&tcp()).count(),
            0,
            "a TCP socket is open"
        );
        net.quiet();
    }
}

#[test]
fn unexpected_tagged_messages_wait_and_match_posted_receives_in_arrival_order() {
    unsafe {
        let net = Net::new(1, FI_TAGGED as u64);
        let me = 0;
        // 40 messages before any receive: more than a peer's 16 receive slots, so they
        // are copied out of the slots (the sends complete without a receive posted).
        for i in 0..40u64 {
            let m = format!("message {i:02}");
            assert_eq!(
                net.tsend(me, me, m.as_bytes(), 0x100 + i % 4, 100 + i as usize),
                0
            );
        }
        let mut other = Vec::new();
        let e = net.wait(me, 40, &mut other);
        for i in 0..40 {
            assert!(e.contains(&sent(100 + i, 10)), "{e:?}");
        }
        // Tag 0x102 takes messages 2, 6, 10, ... in order; then "any tag" takes the rest
        // in arrival order.
        let mut b = vec![[0u8; 32]; 40];
        let (by_tag, any) = b.split_at_mut(10);
        for (k, buf) in by_tag.iter_mut().enumerate() {
            assert_eq!(net.trecv(me, buf, mrc_fi::FI_ADDR_UNSPEC, 0x102, 0, k), 0);
        }
        for (k, buf) in any.iter_mut().enumerate() {
            assert_eq!(net.trecv(me, buf, mrc_fi::FI_ADDR_UNSPEC, 0, !0, 10 + k), 0);
        }
        let e = net.wait(me, 40, &mut other);
        let rest: Vec<u64> = (0..40).filter(|i| i % 4 != 2).collect();
        for (k, c) in e.iter().enumerate() {
            let i = if k < 10 {
                4 * k as u64 + 2
            } else {
                rest[k - 10]
            };
            assert_eq!(*c, got(k, &b[k], 10, 0x100 + i % 4), "entry {k}");
            assert_eq!(&b[k][..10], format!("message {i:02}").as_bytes());
        }
        assert_eq!(other, []);
        net.quiet();
    }
}

#[test]
fn unexpected_messages_past_the_copy_budget_wait_in_their_slots() {
    unsafe {
        let net = Net::new(1, FI_TAGGED as u64);
        let me = 0;
        // 12 messages of 1 MiB: the first 8 fill UNEXPECTED_BYTES (copied out), the other
        // 4 stay in their staging slots; every byte arrives, in order.
        let mib = mrc_fi::FRAGMENT_SIZE;
        assert_eq!(8 * mib, mrc_fi::UNEXPECTED_BYTES);
        let msgs: Vec<Vec<u8>> = (0..12u8)
            .map(|i| (0..mib).map(|k| (k as u8) ^ i.wrapping_mul(37)).collect())
            .collect();
        let mut other = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            // The transmit side keeps at most 16 in flight per peer: wait for each.
            assert_eq!(net.tsend(me, me, m, i as u64, 200 + i), 0);
            assert_eq!(net.wait(me, 1, &mut other), [sent(200 + i, mib)]);
        }
        let mut b = vec![vec![0u8; mib]; 12];
        for (i, buf) in b.iter_mut().enumerate() {
            assert_eq!(net.trecv(me, buf, mrc_fi::FI_ADDR_UNSPEC, 0, !0, i), 0);
        }
        let e = net.wait(me, 12, &mut other);
        for (i, c) in e.iter().enumerate() {
            assert_eq!(*c, got(i, &b[i], mib, i as u64));
            assert!(b[i] == msgs[i], "message {i} differs");
        }
        assert_eq!(other, []);
    }
}

#[test]
fn directed_receives_take_only_their_source_and_unspec_takes_any() {
    unsafe {
        // Endpoints 0 and 1 send to endpoint 2.
        let net = Net::new(3, FI_TAGGED as u64 | FI_MSG as u64 | FI_DIRECTED_RECV);
        let (a, b, r) = (0, 1, 2);
        let mut bufs = [[0u8; 16]; 4];
        let [from_a, any, ..] = &mut bufs;
        assert_eq!(net.trecv(r, from_a, net.addr[a], 7, 0, 1), 0);
        assert_eq!(net.trecv(r, any, mrc_fi::FI_ADDR_UNSPEC, 7, 0, 2), 0);
        // B's message passes over the receive for A and fills the FI_ADDR_UNSPEC one.
        assert_eq!(net.tsend(b, r, b"from b", 7, 10), 0);
        let mut others = Vec::new();
        let e = net.wait(r, 1, &mut others);
        assert_eq!(e, [got(2, &bufs[1], 6, 7)]);
        // A message from B for a receive directed at B, posted after it arrived
        // (unexpected: its source comes from B's hello, looked up in the AV).
        assert_eq!(net.tsend(b, r, b"b again", 8, 11), 0);
        let t = Instant::now();
        while !others.contains(&sent(11, 7)) {
            assert!(t.elapsed() < DEADLINE, "{others:?}");
            others.extend(net.read_once(b));
            assert_eq!(net.read_once(r), []);
        }
        let [_, _, from_b, _] = &mut bufs;
        // Directed at A: does not take B's; directed at B: does.
        let mut spare = [0u8; 16];
        assert_eq!(net.trecv(r, &mut spare, net.addr[a], 8, 0, 5), 0);
        assert_eq!(net.trecv(r, from_b, net.addr[b], 8, 0, 3), 0);
        let e = net.wait(r, 1, &mut others);
        assert_eq!(e, [got(3, &bufs[2], 7, 8)]);
        // Untagged receives are directed too (fi_recv's src_addr).
        let m = net.msg(r);
        let [_, _, _, untagged_a] = &mut bufs;
        let p = untagged_a.as_mut_ptr().cast();
        assert_eq!(
            (m.recv.unwrap())(net.eps[r], p, 16, null_mut(), net.addr[a], ctx(4)),
            0
        );
        let mb = net.msg(b);
        let s = b"untagged from b";
        let (sp, sl) = (s.as_ptr().cast(), s.len());
        assert_eq!(
            (mb.send.unwrap())(net.eps[b], sp, sl, null_mut(), net.addr[r], ctx(12)),
            0
        );
        let t = Instant::now();
        while !others.contains(&Cqe {
            flags: (FI_SEND | FI_MSG) as u64,
            ..sent(12, sl)
        }) {
            assert!(t.elapsed() < DEADLINE, "{others:?}");
            others.extend(net.read_once(b));
            assert_eq!(net.read_once(r), []);
        }
        // Now A: its tagged message takes the receive directed at it (tag 7), its
        // untagged one the untagged receive; the tag-8 receive for A stays posted.
        assert_eq!(net.tsend(a, r, b"from a", 7, 13), 0);
        let ma = net.msg(a);
        let s2 = b"untagged a";
        let (p2, l2) = (s2.as_ptr().cast(), s2.len());
        assert_eq!(
            (ma.send.unwrap())(net.eps[a], p2, l2, null_mut(), net.addr[r], ctx(14)),
            0
        );
        let e = net.wait(r, 2, &mut others);
        assert_eq!(e[0], got(1, &bufs[0], 6, 7));
        let untagged = Cqe {
            flags: (FI_RECV | FI_MSG) as u64,
            tag: 0,
            ..got(4, &bufs[3], 10, 0)
        };
        assert_eq!(e[1], untagged);
        assert_eq!(&bufs[0][..6], b"from a");
        assert_eq!(&bufs[1][..6], b"from b");
        assert_eq!(&bufs[2][..7], b"b again");
        assert_eq!(&bufs[3][..10], b"untagged a");
        // B's untagged message is still unexpected: an FI_ADDR_UNSPEC fi_recv takes it.
        let mut last = [0u8; 32];
        let lp = last.as_mut_ptr().cast();
        let unspec = mrc_fi::FI_ADDR_UNSPEC;
        assert_eq!(
            (m.recv.unwrap())(net.eps[r], lp, 32, null_mut(), unspec, ctx(6)),
            0
        );
        let e = net.wait(r, 1, &mut others);
        let want = Cqe {
            flags: (FI_RECV | FI_MSG) as u64,
            ..got(6, &last, 15, 0)
        };
        assert_eq!(e, [want]);
        assert_eq!(&last[..15], b"untagged from b");
        // The receive directed at A for tag 8 is still posted: cancel completes it.
        assert_eq!(net.cancel(r, 5), 0);
        let e = net.wait(r, 1, &mut others);
        let canceled = Cqe {
            err: FI_ECANCELED as c_int,
            len: 0,
            ..got(5, &spare, 0, 8)
        };
        assert_eq!(e, [canceled]);
        assert_eq!(net.cancel(r, 5), neg(FI_ENOENT));
        // A receive directed at an address the AV does not hold is refused.
        assert_eq!(net.trecv(r, &mut spare, 99, 8, 0, 5), neg(FI_EINVAL));
        net.quiet();
    }
}

#[test]
fn without_directed_recv_the_source_address_is_ignored() {
    unsafe {
        let net = Net::new(2, FI_TAGGED as u64);
        let (a, r) = (0, 1);
        let mut buf = [0u8; 8];
        // Directed at r itself and at an entry that does not exist: both ignored.
        assert_eq!(net.trecv(r, &mut buf, 12345, 1, 0, 1), 0);
        assert_eq!(net.tsend(a, r, b"hi", 1, 2), 0);
        let mut others = Vec::new();
        assert_eq!(net.wait(r, 1, &mut others), [got(1, &buf, 2, 1)]);
    }
}

#[test]
fn peek_claim_discard_and_cancel() {
    unsafe {
        let net = Net::new(1, FI_TAGGED as u64);
        let me = 0;
        for (t, m) in [
            (1u64, &b"one"[..]),
            (2, b"two"),
            (3, b"three"),
            (4, b"four"),
        ] {
            assert_eq!(net.tsend(me, me, m, t, 10 + t as usize), 0);
        }
        let mut other = Vec::new();
        assert_eq!(net.wait(me, 4, &mut other).len(), 4);
        let peek = FI_PEEK as u64;
        let found = |c: usize, len: usize, tag: u64| Cqe {
            buf: 0,
            ..got(c, &[], len, tag)
        };
        // A peek that finds nothing: an FI_ENOMSG error entry.
        assert_eq!(net.trecvmsg(me, None, 9, 0, 20, peek), 0);
        let nomsg = Cqe {
            err: FI_ENOMSG as c_int,
            ..found(20, 0, 9)
        };
        assert_eq!(net.wait(me, 1, &mut other), [nomsg]);
        // A peek that finds "two": its length and tag, no data; it stays.
        assert_eq!(net.trecvmsg(me, None, 2, 0, 21, peek), 0);
        assert_eq!(net.wait(me, 1, &mut other), [found(21, 3, 2)]);
        assert_eq!(net.trecvmsg(me, None, 0, !0, 22, peek), 0);
        assert_eq!(net.wait(me, 1, &mut other), [found(22, 3, 1)]);
        // Peek + claim "two" for context 23: no other receive gets it.
        assert_eq!(net.trecvmsg(me, None, 2, 0, 23, peek | FI_CLAIM), 0);
        assert_eq!(net.wait(me, 1, &mut other), [found(23, 3, 2)]);
        let mut waits = [0u8; 8];
        assert_eq!(
            net.trecv(me, &mut waits, mrc_fi::FI_ADDR_UNSPEC, 2, 0, 24),
            0
        );
        net.quiet();
        // The claim with context 23 takes it, into its buffer.
        let mut b = [0u8; 8];
        assert_eq!(net.trecvmsg(me, Some(&mut b), 0, 0, 23, FI_CLAIM), 0);
        assert_eq!(net.wait(me, 1, &mut other), [got(23, &b, 3, 2)]);
        assert_eq!(&b[..3], b"two");
        // A claim of a context that claimed nothing (any more).
        assert_eq!(
            net.trecvmsg(me, Some(&mut b), 0, 0, 23, FI_CLAIM),
            neg(FI_EINVAL)
        );
        // Peek + discard "one": reported, then gone.
        assert_eq!(net.trecvmsg(me, None, 1, 0, 25, peek | FI_DISCARD), 0);
        assert_eq!(net.wait(me, 1, &mut other), [found(25, 3, 1)]);
        assert_eq!(net.trecvmsg(me, None, 1, 0, 26, peek), 0);
        assert_eq!(
            net.wait(me, 1, &mut other),
            [Cqe {
                err: FI_ENOMSG as c_int,
                ..found(26, 0, 1)
            }]
        );
        // Peek + claim "three", then claim + discard it.
        assert_eq!(net.trecvmsg(me, None, 3, 0, 27, peek | FI_CLAIM), 0);
        assert_eq!(net.wait(me, 1, &mut other), [found(27, 5, 3)]);
        assert_eq!(net.trecvmsg(me, None, 0, 0, 27, FI_CLAIM | FI_DISCARD), 0);
        assert_eq!(net.wait(me, 1, &mut other), [found(27, 5, 3)]);
        assert_eq!(net.trecvmsg(me, None, 3, 0, 28, peek), 0);
        assert_eq!(
            net.wait(me, 1, &mut other),
            [Cqe {
                err: FI_ENOMSG as c_int,
                ..found(28, 0, 3)
            }]
        );
        // Flags that do not go together.
        assert_eq!(
            net.trecvmsg(me, None, 0, 0, 29, FI_DISCARD),
            neg(FI_EBADFLAGS)
        );
        let all = peek | FI_CLAIM | FI_DISCARD;
        assert_eq!(net.trecvmsg(me, None, 0, 0, 29, all), neg(FI_EBADFLAGS));
        // Peek and claim are tagged-only: fi_recvmsg refuses them.
        let m = fi_msg {
            msg_iov: std::ptr::null(),
            desc: null_mut(),
            iov_count: 0,
            addr: mrc_fi::FI_ADDR_UNSPEC,
            context: ctx(30),
            data: 0,
        };
        let mo = net.msg(me);
        assert_eq!(
            (mo.recvmsg.unwrap())(net.eps[me], &m, peek),
            neg(FI_EBADFLAGS)
        );
        // Cancel: the tag-2 receive still waits; a second cancel finds nothing.
        assert_eq!(net.cancel(me, 24), 0);
        let canceled = Cqe {
            err: FI_ECANCELED as c_int,
            ..got(24, &waits, 0, 2)
        };
        assert_eq!(net.wait(me, 1, &mut other), [canceled]);
        assert_eq!(net.cancel(me, 24), neg(FI_ENOENT));
        assert_eq!(net.cancel(me, 0), neg(FI_EINVAL));
        // "four" is still there for an ordinary receive.
        assert_eq!(net.trecv(me, &mut b, mrc_fi::FI_ADDR_UNSPEC, 4, 0, 31), 0);
        assert_eq!(net.wait(me, 1, &mut other), [got(31, &b, 4, 4)]);
        assert_eq!(&b[..4], b"four");
        assert_eq!(other, []);
        net.quiet();
    }
}

#[test]
fn tagged_truncation_cq_data_and_bad_input() {
    unsafe {
        let net = Net::new(1, 0);
        let me = 0;
        let t = net.tagged(me);
        let ep = net.eps[me];
        let to = net.addr[me];
        let msg = b"fourteen bytes";
        // Truncation: a 4-byte receive of 14 bytes; olen is what was cut.
        let mut small = [0u8; 4];
        assert_eq!(
            net.trecv(me, &mut small, mrc_fi::FI_ADDR_UNSPEC, 5, 0, 1),
            0
        );
        assert_eq!(net.tsend(me, me, msg, 5, 2), 0);
        let mut other = Vec::new();
        let e = net.wait(me, 2, &mut other);
        let trunc = Cqe {
            err: FI_ETRUNC as c_int,
            olen: 10,
            ..got(1, &small, 4, 5)
        };
        assert!(e.contains(&trunc), "{e:?}");
        assert!(e.contains(&sent(2, 14)), "{e:?}");
        assert_eq!(&small, b"four");
        // Remote CQ data: the low 4 bytes of `data`, FI_REMOTE_CQ_DATA in the flags.
        let mut b = [0u8; 32];
        assert_eq!(net.trecv(me, &mut b, mrc_fi::FI_ADDR_UNSPEC, 6, 0, 3), 0);
        let (p, l) = (msg.as_ptr().cast(), msg.len());
        let data = 0x1_2345_6789u64;
        assert_eq!(
            (t.senddata.unwrap())(ep, p, l, null_mut(), data, to, 6, ctx(4)),
            0
        );
        let e = net.wait(me, 2, &mut other);
        let with_data = Cqe {
            flags: TRECV | FI_REMOTE_CQ_DATA as u64,
            data: 0x2345_6789,
            ..got(3, &b, 14, 6)
        };
        assert!(e.contains(&with_data), "{e:?}");
        assert!(e.contains(&sent(4, 14)), "{e:?}");
        // tinjectdata: no send completion; fi_injectdata (untagged) the same.
        assert_eq!(net.trecv(me, &mut b, mrc_fi::FI_ADDR_UNSPEC, 7, 0, 5), 0);
        assert_eq!((t.injectdata.unwrap())(ep, p, 3, 0xabcd, to, 7), 0);
        let e = net.wait(me, 1, &mut other);
        assert_eq!(
            e,
            [Cqe {
                data: 0xabcd,
                ..with_data.clone_with(5, 3, 7)
            }]
        );
        let m = net.msg(me);
        let mut mb = [0u8; 8];
        let unspec = mrc_fi::FI_ADDR_UNSPEC;
        assert_eq!(
            (m.recv.unwrap())(ep, mb.as_mut_ptr().cast(), 8, null_mut(), unspec, ctx(6)),
            0
        );
        assert_eq!((m.injectdata.unwrap())(ep, p, 2, 77, to), 0);
        let e = net.wait(me, 1, &mut other);
        let untagged = Cqe {
            flags: (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA) as u64,
            data: 77,
            ..got(6, &mb, 2, 0)
        };
        assert_eq!(e, [untagged]);
        assert_eq!(&mb[..2], b"fo");
        // A tagged message does not fill an untagged receive, and the other way round.
        assert_eq!(
            (m.recv.unwrap())(ep, mb.as_mut_ptr().cast(), 8, null_mut(), unspec, ctx(7)),
            0
        );
        assert_eq!(net.tsend(me, me, b"tagged", 0, 8), 0);
        assert_eq!(net.wait(me, 1, &mut other), [sent(8, 6)]);
        net.quiet();
        assert_eq!(net.cancel(me, 7), 0);
        let canceled = Cqe {
            flags: (FI_RECV | FI_MSG) as u64,
            err: FI_ECANCELED as c_int,
            ..got(7, &mb, 0, 0)
        };
        assert_eq!(net.wait(me, 1, &mut other), [canceled]);
        assert_eq!(net.trecv(me, &mut b, unspec, 0, 0, 9), 0);
        assert_eq!(net.wait(me, 1, &mut other), [got(9, &b, 6, 0)]);

        // Bad input: negative FI_E* codes.
        let null = std::ptr::null_mut();
        assert_eq!(
            (t.recv.unwrap())(ep, null, 4, null_mut(), unspec, 0, 0, ctx(1)),
            neg(FI_EINVAL)
        );
        assert_eq!(
            (t.send.unwrap())(ep, std::ptr::null(), 4, null_mut(), to, 0, ctx(1)),
            neg(FI_EINVAL)
        );
        assert_eq!(
            (t.send.unwrap())(ep, p, l, null_mut(), 99, 0, ctx(1)),
            neg(FI_EINVAL)
        );
        assert_eq!(
            (t.recvmsg.unwrap())(ep, std::ptr::null(), 0),
            neg(FI_EINVAL)
        );
        assert_eq!(
            (t.sendmsg.unwrap())(ep, std::ptr::null(), 0),
            neg(FI_EINVAL)
        );
        let big = vec![0u8; mrc_fi::INJECT_SIZE + 1];
        assert_eq!(
            (t.inject.unwrap())(ep, big.as_ptr().cast(), big.len(), to, 0),
            neg(FI_EMSGSIZE)
        );
        let huge = vec![0u8; mrc_fi::MAX_MSG_SIZE + 1];
        let hp = huge.as_ptr().cast();
        assert_eq!(
            (t.send.unwrap())(ep, hp, huge.len(), null_mut(), to, 0, ctx(1)),
            neg(FI_EMSGSIZE)
        );
        let iov = [iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: 1,
        }; 5];
        let tm = fi_msg_tagged {
            msg_iov: iov.as_ptr(),
            desc: null_mut(),
            iov_count: 5,
            addr: to,
            tag: 0,
            ignore: 0,
            context: ctx(1),
            data: 0,
        };
        assert_eq!((t.recvmsg.unwrap())(ep, &tm, 0), neg(FI_EINVAL));
        assert_eq!((t.sendmsg.unwrap())(ep, &tm, 0), neg(FI_EINVAL));
        assert_eq!(
            (t.sendmsg.unwrap())(ep, &tm, FI_PEEK as u64),
            neg(FI_EBADFLAGS)
        );
        let v = (t.recvv.unwrap())(ep, iov.as_ptr(), null_mut(), 5, unspec, 0, 0, ctx(1));
        assert_eq!(v, neg(FI_EINVAL));
        // A tagged sendmsg with remote CQ data, gathered from 2 iovecs.
        let parts = [
            iovec {
                iov_base: msg.as_ptr() as *mut c_void,
                iov_len: 4,
            },
            iovec {
                iov_base: msg[4..].as_ptr() as *mut c_void,
                iov_len: 10,
            },
        ];
        let tm = fi_msg_tagged {
            msg_iov: parts.as_ptr(),
            iov_count: 2,
            tag: 42,
            data: 5,
            ..tm
        };
        assert_eq!(net.trecv(me, &mut b, unspec, 42, 0, 10), 0);
        assert_eq!((t.sendmsg.unwrap())(ep, &tm, FI_REMOTE_CQ_DATA as u64), 0);
        let e = net.wait(me, 2, &mut other);
        let want = Cqe {
            data: 5,
            ..with_data.clone_with(10, 14, 42)
        };
        assert!(e.contains(&want), "{e:?}");
        assert!(e.contains(&sent(1, 14)), "{e:?}");
        assert_eq!(&b[..14], msg);
        assert_eq!(other, []);
        net.quiet();
    }
}

impl Cqe {
    /// This entry with another context, length and tag.
    fn clone_with(&self, c: usize, len: usize, tag: u64) -> Cqe {
        Cqe {
            ctx: c,
            len,
            tag,
            ..*self
        }
    }
}

/// `fi_cq_readfrom` on endpoint `i`'s CQ until an entry comes, every endpoint progressed:
/// the entry and its source.
fn readfrom(net: &Net, i: usize) -> (Cqe, u64) {
    let cq = net.cqs[i];
    let ops = unsafe { &*(*cq).ops };
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < DEADLINE, "no entry on endpoint {i}");
        let mut e = fi_cq_tagged_entry::default();
        let mut src = 0u64;
        let n = unsafe {
            (ops.readfrom.unwrap())(cq, (&mut e as *mut fi_cq_tagged_entry).cast(), 1, &mut src)
        };
        if n == 1 {
            let c = Cqe {
                ctx: e.op_context as usize,
                flags: e.flags,
                len: e.len,
                buf: e.buf as usize,
                data: e.data,
                tag: e.tag,
                err: 0,
                olen: 0,
            };
            return (c, src);
        }
        assert_eq!(n, neg(FI_EAGAIN));
        for j in 0..net.eps.len() {
            if j != i {
                let mut e = [fi_cq_tagged_entry::default(); 8];
                let cq = net.cqs[j];
                let n = unsafe { ((*(*cq).ops).read.unwrap())(cq, e.as_mut_ptr().cast(), 0) };
                assert_eq!(n, neg(FI_EAGAIN));
            }
        }
    }
}

#[test]
fn readfrom_gives_the_sender_s_av_entry_or_notavail() {
    unsafe {
        let net = Net::new(3, FI_TAGGED as u64 | FI_SOURCE);
        let (a, b, r) = (0, 1, 2);
        let mut bufs = [[0u8; 8]; 3];
        for (k, buf) in bufs.iter_mut().enumerate() {
            assert_eq!(net.trecv(r, buf, mrc_fi::FI_ADDR_UNSPEC, 0, !0, k + 1), 0);
        }
        // From A: its AV entry.
        assert_eq!(net.tsend(a, r, b"a", 1, 10), 0);
        assert_eq!(readfrom(&net, r), (got(1, &bufs[0], 1, 1), net.addr[a]));
        // A send completion has no source.
        assert_eq!(readfrom(&net, a), (sent(10, 1), mrc_fi::FI_ADDR_NOTAVAIL));
        // From B once its entry is gone from the AV: FI_ADDR_NOTAVAIL.
        let aops = &*(*net.av).ops;
        let mut gone = net.addr[b];
        assert_eq!((aops.remove.unwrap())(net.av, &mut gone, 1, 0), 0);
        assert_eq!(net.tsend(b, r, b"b", 2, 11), 0);
        assert_eq!(
            readfrom(&net, r),
            (got(2, &bufs[1], 1, 2), mrc_fi::FI_ADDR_NOTAVAIL)
        );
        assert_eq!(readfrom(&net, b), (sent(11, 1), mrc_fi::FI_ADDR_NOTAVAIL));
        // From itself: its own entry.
        assert_eq!(net.tsend(r, r, b"r", 3, 12), 0);
        let mut seen = vec![readfrom(&net, r), readfrom(&net, r)];
        seen.sort_by_key(|(c, _)| c.ctx);
        let own = (got(3, &bufs[2], 1, 3), net.addr[r]);
        assert_eq!(seen, [own, (sent(12, 1), mrc_fi::FI_ADDR_NOTAVAIL)]);
        net.quiet();
    }
}

#[test]
fn selective_completion_follows_the_op_flags_of_the_info() {
    unsafe {
        let sel = FI_SELECTIVE_COMPLETION;
        let unspec = mrc_fi::FI_ADDR_UNSPEC;
        // Open MPI's way: hints with FI_COMPLETION in both op_flags, the CQ bound with
        // FI_SELECTIVE_COMPLETION; plain sends and receives still complete.
        let net = Net::with(1, FI_TAGGED as u64, FI_COMPLETION as u64, sel);
        let mut b = [0u8; 8];
        assert_eq!(net.trecv(0, &mut b, unspec, 1, 0, 1), 0);
        assert_eq!(net.tsend(0, 0, b"ompi", 1, 2), 0);
        let mut other = Vec::new();
        let e = net.wait(0, 2, &mut other);
        assert!(e.contains(&got(1, &b, 4, 1)), "{e:?}");
        assert!(e.contains(&sent(2, 4)), "{e:?}");
        net.quiet();
        drop(net);
        // Without them: neither completes (the receive's buffer fills all the same).
        let net = Net::with(1, FI_TAGGED as u64, 0, sel);
        let mut b = [0u8; 8];
        let p = b.as_mut_ptr();
        let buf = std::slice::from_raw_parts_mut(p, b.len());
        assert_eq!(net.trecv(0, buf, unspec, 1, 0, 1), 0);
        assert_eq!(net.tsend(0, 0, b"none", 1, 2), 0);
        // The provider writes the buffer during a CQ read: read it back through `p`.
        let filled = || {
            (0..4)
                .map(|k| std::ptr::read_volatile(p.add(k)))
                .collect::<Vec<u8>>()
        };
        let t = Instant::now();
        while filled() != b"none" {
            assert!(t.elapsed() < DEADLINE);
            assert_eq!(net.read_once(0), []);
        }
        net.quiet();
    }
}

// ---------------------------------------------------------------------------------
// RMA writes: endpoint 0 writes into regions of endpoint 1 (one domain, two endpoints:
// the write crosses a real QP of mrc's transport over loopback UDP).

/// `fi_write` / `fi_writedata` flags at the initiator and the target.
const WRITE: u64 = (FI_WRITE | FI_RMA) as u64;
const REMOTE_WRITE_DATA: u64 = (FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA) as u64;

impl Net {
    fn rma(&self, i: usize) -> &fi_ops_rma {
        unsafe { &*(*self.eps[i]).rma }
    }

    /// `fi_mr_reg` of `b` with `access`, `offset` and `key` (the requested one).
    fn mr_reg(&self, b: &mut [u8], access: u64, offset: u64, key: u64) -> (c_int, *mut fid_mr) {
        let mut mr: *mut fid_mr = null_mut();
        let ops = unsafe { &*(*self.domain).mr };
        let r = unsafe {
            (ops.reg.unwrap())(
                &mut (*self.domain).fid,
                b.as_mut_ptr().cast(),
                b.len(),
                access,
                offset,
                key,
                0,
                &mut mr,
                null_mut(),
            )
        };
        (r, mr)
    }

    /// `fi_write` of `b` from endpoint 0 to endpoint 1 at (`addr`, `key`).
    fn write(&self, b: &[u8], addr: u64, key: u64, c: usize) -> isize {
        let (p, n) = (b.as_ptr().cast(), b.len());
        let w = self.rma(0).write.unwrap();
        unsafe {
            w(
                self.eps[0],
                p,
                n,
                null_mut(),
                self.addr[1],
                addr,
                key,
                ctx(c),
            )
        }
    }

    /// `fi_writedata` of `b` with `data` from endpoint 0 to endpoint 1.
    fn writedata(&self, b: &[u8], data: u64, addr: u64, key: u64, c: usize) -> isize {
        let (p, n) = (b.as_ptr().cast(), b.len());
        let w = self.rma(0).writedata.unwrap();
        unsafe {
            w(
                self.eps[0],
                p,
                n,
                null_mut(),
                data,
                self.addr[1],
                addr,
                key,
                ctx(c),
            )
        }
    }

    /// Progresses both endpoints until endpoint 0 has one completion (success or
    /// error); returns it and what endpoint 1's CQ gave meanwhile.
    fn write_done(&self) -> (Cqe, Vec<Cqe>) {
        let mut target = Vec::new();
        let e = self.wait(0, 1, &mut target);
        (e[0], target)
    }
}

/// The initiator's completion of a write of `len` bytes with context `c`; `err` 0 or
/// the error.
fn wrote(c: usize, len: usize, err: u32) -> Cqe {
    Cqe {
        ctx: c,
        flags: WRITE,
        len,
        buf: 0,
        data: 0,
        tag: 0,
        err: err as c_int,
        olen: 0,
    }
}

/// The target's completion of a `fi_writedata` of `len` bytes with `data`.
fn written(len: usize, data: u64) -> Cqe {
    Cqe {
        ctx: 0,
        flags: REMOTE_WRITE_DATA,
        len,
        buf: 0,
        data,
        tag: 0,
        err: 0,
        olen: 0,
    }
}

#[test]
fn rma_writes_land_at_exact_offsets_with_the_application_s_keys() {
    unsafe {
        // mr_mode 0: the application's keys, addresses are offsets into the region
        // (plus the offset given to fi_mr_reg).
        let (net, mode) = Net::with_mr_mode(2, (FI_MSG | FI_RMA) as u64, 0, 0, 0);
        assert_eq!(mode, 0);
        let mut target = vec![0xEEu8; 64];
        let mut other = vec![0xEEu8; 16];
        let rw = FI_REMOTE_WRITE as u64;
        let (r, mr) = net.mr_reg(&mut target, rw, 0, 0xC0DE);
        assert_eq!(r, 0);
        assert_eq!((*mr).key, 0xC0DE);
        assert!((*mr).mem_desc.is_null());
        let (r, mr2) = net.mr_reg(&mut other, rw, 4096, 7);
        assert_eq!(r, 0);
        // Keys: one in use, one wider than 4 bytes; access bits and flags.
        let mut spare = [0u8; 8];
        assert_eq!(
            net.mr_reg(&mut spare, rw, 0, 0xC0DE).0,
            -(FI_ENOKEY as c_int)
        );
        assert_eq!(
            net.mr_reg(&mut spare, rw, 0, 1 << 32).0,
            -(FI_EKEYREJECTED as c_int)
        );
        assert_eq!(
            net.mr_reg(&mut spare, 1 << 60, 0, 9).0,
            -(FI_EINVAL as c_int)
        );

        // fi_write: 5 bytes at offset 10; the source buffer is free on return.
        let mut src = *b"hello";
        assert_eq!(net.write(&src, 10, 0xC0DE, 1), 0);
        src.copy_from_slice(b"XXXXX");
        let (c, t) = net.write_done();
        assert_eq!(c, wrote(1, 5, 0));
        // A plain write raises nothing at the target.
        assert_eq!(t, Vec::new());
        let mut want = vec![0xEEu8; 64];
        want[10..15].copy_from_slice(b"hello");
        assert_eq!(target, want);

        // fi_writev: two iovecs gathered to offset 20.
        let (a, b) = (*b"ab", *b"cde");
        let iov = [
            iovec {
                iov_base: a.as_ptr() as *mut c_void,
                iov_len: 2,
            },
            iovec {
                iov_base: b.as_ptr() as *mut c_void,
                iov_len: 3,
            },
        ];
        let w = net.rma(0).writev.unwrap();
        let r = w(
            net.eps[0],
            iov.as_ptr(),
            null_mut(),
            2,
            net.addr[1],
            20,
            0xC0DE,
            ctx(2),
        );
        assert_eq!(r, 0);
        assert_eq!(net.write_done(), (wrote(2, 5, 0), Vec::new()));
        want[20..25].copy_from_slice(b"abcde");
        assert_eq!(target, want);

        // fi_writedata: 3 bytes ending at the region's last byte; the target completes
        // FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA with the low 4 bytes of data.
        assert_eq!(
            net.writedata(b"end", 0x1122_3344_5566_7788, 61, 0xC0DE, 3),
            0
        );
        let (c, t) = net.write_done();
        assert_eq!(c, wrote(3, 3, 0));
        let t = if t.is_empty() {
            net.wait(1, 1, &mut Vec::new())
        } else {
            t
        };
        assert_eq!(t, vec![written(3, 0x5566_7788)]);
        want[61..64].copy_from_slice(b"end");
        assert_eq!(target, want);

        // fi_writemsg with FI_REMOTE_CQ_DATA into the second region: its RMA address
        // starts at the offset it was registered with.
        let iov = iovec {
            iov_base: b"msg".as_ptr() as *mut c_void,
            iov_len: 3,
        };
        let rma_iov = fi_rma_iov {
            addr: 4096 + 2,
            len: 3,
            key: 7,
        };
        let m = fi_msg_rma {
            msg_iov: &iov,
            desc: null_mut(),
            iov_count: 1,
            addr: net.addr[1],
            rma_iov: &rma_iov,
            rma_iov_count: 1,
            context: ctx(4),
            data: 0xABCD,
        };
        let wm = net.rma(0).writemsg.unwrap();
        assert_eq!(wm(net.eps[0], &m, FI_REMOTE_CQ_DATA as u64), 0);
        let (c, t) = net.write_done();
        assert_eq!(c, wrote(4, 3, 0));
        let t = if t.is_empty() {
            net.wait(1, 1, &mut Vec::new())
        } else {
            t
        };
        assert_eq!(t, vec![written(3, 0xABCD)]);
        let mut want2 = vec![0xEEu8; 16];
        want2[2..5].copy_from_slice(b"msg");
        assert_eq!(other, want2);
        // Bad fi_writemsg: two RMA iovecs, a length that differs, a flag it does not take.
        let two = [rma_iov, rma_iov];
        let bad = fi_msg_rma {
            rma_iov: two.as_ptr(),
            rma_iov_count: 2,
            ..m
        };
        assert_eq!(wm(net.eps[0], &bad, 0), neg(FI_EINVAL));
        let short = fi_rma_iov { len: 2, ..rma_iov };
        let bad = fi_msg_rma {
            rma_iov: &short,
            ..m
        };
        assert_eq!(wm(net.eps[0], &bad, 0), neg(FI_EINVAL));
        assert_eq!(wm(net.eps[0], &m, FI_PEEK as u64), neg(FI_EBADFLAGS));

        // fi_inject_write completes nothing; the fi_inject_writedata after it shows
        // both landed (the target completes in message order).
        let inject = net.rma(0).inject.unwrap();
        let injectdata = net.rma(0).injectdata.unwrap();
        let big = vec![0u8; mrc_fi::INJECT_SIZE + 1];
        assert_eq!(
            inject(
                net.eps[0],
                big.as_ptr().cast(),
                big.len(),
                net.addr[1],
                0,
                0xC0DE
            ),
            neg(FI_EMSGSIZE)
        );
        let n1 = b"in1";
        assert_eq!(
            inject(net.eps[0], n1.as_ptr().cast(), 3, net.addr[1], 30, 0xC0DE),
            0
        );
        let n2 = b"in2";
        assert_eq!(
            injectdata(
                net.eps[0],
                n2.as_ptr().cast(),
                3,
                42,
                net.addr[1],
                40,
                0xC0DE
            ),
            0
        );
        assert_eq!(net.wait(1, 1, &mut Vec::new()), vec![written(3, 42)]);
        want[30..33].copy_from_slice(b"in1");
        want[40..43].copy_from_slice(b"in2");
        assert_eq!(target, want);
        net.quiet();

        // Reads: the transport has no READ.
        let rd = net.rma(0).read.unwrap();
        let mut into = [0u8; 4];
        assert_eq!(
            rd(
                net.eps[0],
                into.as_mut_ptr().cast(),
                4,
                null_mut(),
                net.addr[1],
                0,
                0xC0DE,
                ctx(5)
            ),
            neg(FI_ENOSYS)
        );

        assert_eq!(close(&mut (*mr2).fid), 0);
        assert_eq!(close(&mut (*mr).fid), 0);
        drop(net);
        assert_eq!(other, want2);
    }
}

#[test]
fn rma_to_a_bad_key_or_past_the_region_completes_with_eacces_and_writes_nothing() {
    unsafe {
        let (net, _) = Net::with_mr_mode(2, (FI_MSG | FI_RMA) as u64, 0, 0, 0);
        // The region is bytes 32..64 of the backing; the rest is its guard.
        let mut backing = vec![0xEEu8; 96];
        let rw = FI_REMOTE_WRITE as u64;
        let (r, mr) = net.mr_reg(&mut backing[32..64], rw, 0, 0x51);
        assert_eq!(r, 0);
        let mut ro = vec![0xEEu8; 16];
        let (r, mr_ro) = net.mr_reg(&mut ro, FI_REMOTE_READ as u64, 0, 0x52);
        assert_eq!(r, 0);
        let guard = vec![0xEEu8; 96];
        let eacces = FI_EACCES;

        // One byte past the end; an unknown key; a region without FI_REMOTE_WRITE; an
        // address whose end wraps past 2^64; a key wider than the transport's rkey.
        assert_eq!(net.write(b"wxyz", 30, 0x51, 1), 0);
        assert_eq!(net.write_done(), (wrote(1, 4, eacces), Vec::new()));
        assert_eq!(net.write(b"wxyz", 0, 0xBAD, 2), 0);
        assert_eq!(net.write_done(), (wrote(2, 4, eacces), Vec::new()));
        assert_eq!(net.write(b"wxyz", 0, 0x52, 3), 0);
        assert_eq!(net.write_done(), (wrote(3, 4, eacces), Vec::new()));
        assert_eq!(net.write(b"wxyz", u64::MAX - 1, 0x51, 4), 0);
        assert_eq!(net.write_done(), (wrote(4, 4, eacces), Vec::new()));
        assert_eq!(net.write(b"wxyz", 0, 1 << 32 | 0x51, 5), 0);
        assert_eq!(net.write_done(), (wrote(5, 4, eacces), Vec::new()));
        // A refused fi_writedata raises nothing at the target.
        assert_eq!(net.writedata(b"wxyz", 9, 0, 0xBAD, 6), 0);
        assert_eq!(net.write_done(), (wrote(6, 4, eacces), Vec::new()));
        net.quiet();
        assert_eq!(backing, guard);
        assert_eq!(ro, vec![0xEEu8; 16]);

        // The peer connects anew after each failure: a good write lands, exactly.
        assert_eq!(net.write(b"ok", 30, 0x51, 7), 0);
        assert_eq!(net.write_done(), (wrote(7, 2, 0), Vec::new()));
        let mut want = guard.clone();
        want[62..64].copy_from_slice(b"ok");
        assert_eq!(backing, want);

        // A closed region takes no more writes.
        assert_eq!(close(&mut (*mr).fid), 0);
        assert_eq!(net.write(b"no", 0, 0x51, 8), 0);
        assert_eq!(net.write_done(), (wrote(8, 2, eacces), Vec::new()));
        assert_eq!(backing, want);
        assert_eq!(close(&mut (*mr_ro).fid), 0);
    }
}

#[test]
fn rma_with_virtual_addresses_and_provider_keys() {
    unsafe {
        // fabtests' mr_mode: the provider keeps FI_MR_VIRT_ADDR and FI_MR_PROV_KEY.
        let offered =
            (FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR)
                as c_int;
        let caps = (FI_MSG | FI_RMA) as u64;
        let (net, mode) = Net::with_mr_mode(2, caps, 0, 0, offered);
        assert_eq!(mode, (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY) as c_int);
        // A message first: the QP exists before the region, which is registered with it
        // then (and not at its accept).
        let mut buf = [0u8; 4];
        let m = net.msg(1);
        assert_eq!(
            (m.recv.unwrap())(
                net.eps[1],
                buf.as_mut_ptr().cast(),
                4,
                null_mut(),
                u64::MAX,
                ctx(9)
            ),
            0
        );
        let m0 = net.msg(0);
        let hi = b"hi!!";
        assert_eq!(
            (m0.send.unwrap())(
                net.eps[0],
                hi.as_ptr().cast(),
                4,
                null_mut(),
                net.addr[1],
                ctx(8)
            ),
            0
        );
        net.wait(1, 1, &mut Vec::new());

        let mut target = vec![0u8; 32];
        let (r, mr) = net.mr_reg(&mut target, FI_REMOTE_WRITE as u64, 0, 0xC0DE);
        assert_eq!(r, 0);
        let key = (*mr).key;
        assert!(key != 0 && key >> 32 == 0, "key {key:#x}");
        // fi_mr_bind to an endpoint and fi_mr_enable are accepted (FI_MR_ENDPOINT was
        // not kept: the region serves every endpoint already).
        let ops = &*(*mr).fid.ops;
        let ep1 = net.eps[1];
        assert_eq!((ops.bind.unwrap())(&mut (*mr).fid, &mut (*ep1).fid, 0), 0);
        assert_eq!(
            (ops.control.unwrap())(&mut (*mr).fid, FI_ENABLE as c_int, null_mut()),
            0
        );
        // The RMA address is the buffer's virtual address: byte 8 is at ptr + 8.
        let at = target.as_ptr() as u64 + 8;
        assert_eq!(net.write(b"virt", at, key, 1), 0);
        // The message's send completion may come first, or in the same read (its SACK
        // waits for endpoint 1's next call: the write's SACK comes with it).
        let mut e = Vec::new();
        let t = Instant::now();
        while e.iter().all(|c: &Cqe| c.ctx != 1) {
            assert!(t.elapsed() < DEADLINE, "{e:?}");
            e.extend(net.read_once(0));
            assert_eq!(net.read_once(1), Vec::new());
        }
        assert_eq!(e.last(), Some(&wrote(1, 4, 0)));
        let mut want = vec![0u8; 32];
        want[8..12].copy_from_slice(b"virt");
        assert_eq!(target, want);
        // An offset is not an address in this mode.
        assert_eq!(net.write(b"offs", 8, key, 2), 0);
        assert_eq!(net.write_done(), (wrote(2, 4, FI_EACCES), Vec::new()));
        assert_eq!(target, want);
        assert_eq!(close(&mut (*mr).fid), 0);
    }
}

// ---------------------------------------------------------------------------------
// Counters and fi_cq_sread.

impl Net {
    /// `fi_cntr_open` with `attr`; the counter is closed after the endpoints.
    fn cntr_open(&mut self, attr: Option<fi_cntr_attr>) -> Result<*mut fid_cntr, c_int> {
        let mut c: *mut fid_cntr = null_mut();
        let mut a = attr.unwrap_or_default();
        let p = if attr.is_some() { &mut a } else { null_mut() };
        let ops = unsafe { &*(*self.domain).ops };
        let r = unsafe { (ops.cntr_open.unwrap())(self.domain, p, &mut c, null_mut()) };
        if r != 0 {
            return Err(r);
        }
        self.extra.push(unsafe { &mut (*c).fid });
        Ok(c)
    }

    /// `fi_ep_bind` of `f` to endpoint `i` with `flags`.
    fn bind(&self, i: usize, f: *mut fid, flags: u64) -> c_int {
        let ep = self.eps[i];
        unsafe { ((*(*ep).fid.ops).bind.unwrap())(&mut (*ep).fid, f, flags) }
    }

    /// `fi_send` of `b` from endpoint `i` to endpoint `to`.
    fn send(&self, i: usize, to: usize, b: &[u8], c: usize) -> isize {
        let m = self.msg(i);
        let (p, n) = (b.as_ptr().cast(), b.len());
        unsafe { (m.send.unwrap())(self.eps[i], p, n, null_mut(), self.addr[to], ctx(c)) }
    }

    /// `fi_recv` into `b` on endpoint `i` from any source.
    fn recv(&self, i: usize, b: &mut [u8], c: usize) -> isize {
        let m = self.msg(i);
        let (p, n) = (b.as_mut_ptr().cast(), b.len());
        unsafe { (m.recv.unwrap())(self.eps[i], p, n, null_mut(), u64::MAX, ctx(c)) }
    }
}

unsafe fn cntr_ops<'a>(c: *mut fid_cntr) -> &'a fi_ops_cntr {
    unsafe { &*(*c).ops }
}

#[test]
fn counters_count_completed_sends_receives_and_writes() {
    unsafe {
        let (mut net, _) = Net::with_mr_mode(2, (FI_MSG | FI_RMA) as u64, 0, 0, 0);
        // Attributes the provider does not take.
        let fd = fi_cntr_attr {
            wait_obj: FI_WAIT_FD,
            ..Default::default()
        };
        assert_eq!(net.cntr_open(Some(fd)), Err(-(FI_ENOSYS as c_int)));
        let flags = fi_cntr_attr {
            flags: 1,
            ..Default::default()
        };
        assert_eq!(net.cntr_open(Some(flags)), Err(-(FI_ENOSYS as c_int)));
        let unspec = fi_cntr_attr {
            wait_obj: FI_WAIT_UNSPEC,
            ..Default::default()
        };
        // The connection first (its set-up needs both endpoints progressed).
        let mut b = [[0u8; 8]; 3];
        assert_eq!(net.recv(1, &mut b[0], 1), 0);
        assert_eq!(net.send(0, 1, b"set-up", 2), 0);
        net.wait(1, 1, &mut Vec::new());
        net.wait(0, 1, &mut Vec::new());

        // tx counts endpoint 0's sends, rx endpoint 1's receives; w endpoint 0's writes
        // and is bound to endpoint 1 for FI_REMOTE_WRITE (which never counts: no
        // FI_RMA_EVENT), so waiting on it progresses both.
        let tx = net.cntr_open(Some(unspec)).unwrap();
        let rx = net.cntr_open(None).unwrap();
        let w = net.cntr_open(None).unwrap();
        let f = |c: *mut fid_cntr| &mut (*c).fid as *mut fid;
        assert_eq!(
            net.bind(0, f(tx), FI_TAGGED as u64),
            -(FI_EBADFLAGS as c_int)
        );
        assert_eq!(net.bind(0, f(tx), 0), -(FI_EBADFLAGS as c_int));
        assert_eq!(net.bind(0, f(tx), FI_SEND as u64), 0);
        assert_eq!(net.bind(1, f(rx), FI_RECV as u64), 0);
        assert_eq!(net.bind(0, f(w), (FI_WRITE | FI_READ) as u64), 0);
        assert_eq!(
            net.bind(1, f(w), (FI_REMOTE_WRITE | FI_REMOTE_READ) as u64),
            0
        );
        let (t, r, wo) = (cntr_ops(tx), cntr_ops(rx), cntr_ops(w));
        assert_eq!((t.read.unwrap())(tx), 0);

        // Two sends and an inject into three receives: 3 and 3. Waiting on rx
        // progresses endpoint 1 (the messages left at their posts); tx is read (a
        // progress pass of endpoint 0) with rx read between (endpoint 1's SACKs).
        for (i, x) in b.iter_mut().enumerate() {
            assert_eq!(net.recv(1, x, 10 + i), 0);
        }
        assert_eq!(net.send(0, 1, b"one", 3), 0);
        assert_eq!(net.send(0, 1, b"two", 4), 0);
        let inj = net.msg(0).inject.unwrap();
        assert_eq!(inj(net.eps[0], b"three".as_ptr().cast(), 5, net.addr[1]), 0);
        assert_eq!((r.wait.unwrap())(rx, 3, 30_000), 0);
        let t0 = Instant::now();
        while (t.read.unwrap())(tx) < 3 {
            assert!(t0.elapsed() < DEADLINE);
            (r.read.unwrap())(rx);
        }
        assert_eq!(((r.read.unwrap())(rx), (t.read.unwrap())(tx)), (3, 3));
        assert_eq!(&b[2][..5], b"three");

        // A write counts on w; the target's FI_REMOTE_WRITE binding adds nothing.
        let mut region = vec![0u8; 16];
        let (rc, mr) = net.mr_reg(&mut region, FI_REMOTE_WRITE as u64, 0, 0x77);
        assert_eq!(rc, 0);
        assert_eq!(net.write(b"w", 3, 0x77, 5), 0);
        assert_eq!((wo.wait.unwrap())(w, 1, 30_000), 0);
        assert_eq!(region[3], b'w');
        // A write to a bad key: the error count grows and the wait says so.
        assert_eq!(net.write(b"w", 0, 0xBAD, 6), 0);
        assert_eq!((wo.wait.unwrap())(w, 2, 30_000), -(FI_EAVAIL as c_int));
        assert_eq!(((wo.read.unwrap())(w), (wo.readerr.unwrap())(w)), (1, 1));
        assert_eq!(((t.read.unwrap())(tx), (t.readerr.unwrap())(tx)), (3, 0));
        // The CQ entries: two sends (the inject has none), the write and its error
        // (first: an error entry waiting is read before the others); three receives.
        let mut other = Vec::new();
        let mut e0 = net.wait(0, 4, &mut other);
        e0.sort_by_key(|c| c.ctx);
        let send = |c: usize| Cqe {
            flags: (FI_SEND | FI_MSG) as u64,
            ..wrote(c, 3, 0)
        };
        assert_eq!(
            e0,
            vec![send(3), send(4), wrote(5, 1, 0), wrote(6, 1, FI_EACCES)]
        );
        let e1 = net.wait(1, 3 - other.len(), &mut Vec::new());
        assert_eq!(other.len() + e1.len(), 3);

        // A threshold not reached: the wait times out.
        assert_eq!((r.wait.unwrap())(rx, 4, 20), -(FI_ETIMEDOUT as c_int));
        // add, set, adderr, seterr.
        assert_eq!((t.set.unwrap())(tx, 100), 0);
        assert_eq!((t.add.unwrap())(tx, 5), 0);
        assert_eq!((t.seterr.unwrap())(tx, 7), 0);
        assert_eq!((t.adderr.unwrap())(tx, 1), 0);
        assert_eq!(((t.read.unwrap())(tx), (t.readerr.unwrap())(tx)), (105, 8));
        // A counter bound to an endpoint is busy.
        assert_eq!(close(f(tx)), -(FI_EBUSY as c_int));
        assert_eq!(close(&mut (*mr).fid), 0);
    }
}

#[test]
fn cq_sread_waits_for_an_entry_a_threshold_or_its_timeout() {
    unsafe {
        let (mut net, _) = Net::with_mr_mode(2, FI_MSG as u64, 0, 0, 0);
        // The connection first (its set-up needs both endpoints progressed).
        let mut b = [0u8; 8];
        assert_eq!(net.recv(1, &mut b, 1), 0);
        assert_eq!(net.send(0, 1, b"set-up", 2), 0);
        net.wait(1, 1, &mut Vec::new());
        net.wait(0, 1, &mut Vec::new());

        // Nothing comes: -FI_EAGAIN once the timeout passed.
        let cq = net.cqs[1];
        let sread = (*(*cq).ops).sread.unwrap();
        let mut e = [fi_cq_tagged_entry::default(); 4];
        let t0 = Instant::now();
        assert_eq!(
            sread(cq, e.as_mut_ptr().cast(), 4, std::ptr::null(), 30),
            neg(FI_EAGAIN)
        );
        assert!(
            t0.elapsed() >= Duration::from_millis(30),
            "{:?}",
            t0.elapsed()
        );

        // A message sent now (it leaves at the post): sread on the receiver alone,
        // sleeping in its datapath, returns its entry.
        assert_eq!(net.recv(1, &mut b, 3), 0);
        assert_eq!(net.send(0, 1, b"sread", 4), 0);
        assert_eq!(
            sread(cq, e.as_mut_ptr().cast(), 4, std::ptr::null(), 30_000),
            1
        );
        assert_eq!((e[0].op_context as usize, e[0].len), (3, 5));
        assert_eq!(&b[..5], b"sread");

        // FI_CQ_COND_THRESHOLD: a CQ that waits for *cond entries.
        let ops = &*(*net.domain).ops;
        for (wait_obj, wait_cond) in [(FI_WAIT_FD, FI_CQ_COND_NONE), (FI_WAIT_UNSPEC, 7)] {
            let mut attr = fi_cq_attr {
                format: FI_CQ_FORMAT_TAGGED,
                wait_obj,
                wait_cond,
                ..Default::default()
            };
            let mut bad: *mut fid_cq = null_mut();
            let r = (ops.cq_open.unwrap())(net.domain, &mut attr, &mut bad, null_mut());
            assert_eq!(r, -(FI_ENOSYS as c_int));
        }
        let mut attr = fi_cq_attr {
            format: FI_CQ_FORMAT_TAGGED,
            wait_obj: FI_WAIT_UNSPEC,
            wait_cond: FI_CQ_COND_THRESHOLD,
            ..Default::default()
        };
        let mut tcq: *mut fid_cq = null_mut();
        assert_eq!(
            (ops.cq_open.unwrap())(net.domain, &mut attr, &mut tcq, null_mut()),
            0
        );
        net.extra.push(&mut (*tcq).fid);
        assert_eq!(net.bind(1, &mut (*tcq).fid, FI_RECV as u64), 0);
        let tsread = (*(*tcq).ops).sread.unwrap();
        let mut bufs = [[0u8; 8]; 4];
        for (i, x) in bufs.iter_mut().enumerate() {
            assert_eq!(net.recv(1, x, 20 + i), 0);
        }
        for i in 0..3 {
            assert_eq!(net.send(0, 1, &[b'a' + i as u8; 3], 30 + i), 0);
        }
        let three: usize = 3;
        let n = tsread(
            tcq,
            e.as_mut_ptr().cast(),
            4,
            (&three as *const usize).cast(),
            30_000,
        );
        assert_eq!(n, 3);
        let got: Vec<usize> = e[..3].iter().map(|x| x.op_context as usize).collect();
        assert_eq!(got, vec![20, 21, 22]);
        // One more message, a threshold of 2: the timeout returns the one there is.
        assert_eq!(net.send(0, 1, b"ddd", 33), 0);
        let two: usize = 2;
        let n = tsread(
            tcq,
            e.as_mut_ptr().cast(),
            4,
            (&two as *const usize).cast(),
            200,
        );
        assert_eq!(n, 1);
        assert_eq!(e[0].op_context as usize, 23);
        assert_eq!(
            bufs,
            [
                *b"aaa\0\0\0\0\0",
                *b"bbb\0\0\0\0\0",
                *b"ccc\0\0\0\0\0",
                *b"ddd\0\0\0\0\0"
            ]
        );
        // The sends' completions, so nothing is left in flight.
        net.wait(0, 5, &mut Vec::new());
    }
}

#[test]
fn rma_event_counts_the_writes_that_landed_at_the_target() {
    unsafe {
        let caps = (FI_MSG | FI_RMA) as u64 | FI_RMA_EVENT;
        let (mut net, _) = Net::with_mr_mode(2, caps, 0, 0, 0);
        let rc = net.cntr_open(None).unwrap();
        assert_eq!(net.bind(1, &mut (*rc).fid, FI_REMOTE_WRITE as u64), 0);
        let o = cntr_ops(rc);
        let mut region = vec![0u8; 32];
        let (r, mr) = net.mr_reg(&mut region, FI_REMOTE_WRITE as u64, 0, 0x99);
        assert_eq!(r, 0);
        // A message (not counted), two plain writes and a fi_writedata.
        let mut b = [0u8; 4];
        assert_eq!(net.recv(1, &mut b, 1), 0);
        assert_eq!(net.send(0, 1, b"msg!", 2), 0);
        assert_eq!(net.write(b"ab", 0, 0x99, 3), 0);
        assert_eq!(net.write(b"cd", 2, 0x99, 4), 0);
        assert_eq!(net.writedata(b"ef", 5, 4, 0x99, 5), 0);
        let mut other = Vec::new();
        let mut sent = net.wait(0, 4, &mut other);
        sent.sort_by_key(|c| c.ctx);
        assert_eq!(sent[1..], [wrote(3, 2, 0), wrote(4, 2, 0), wrote(5, 2, 0)]);
        // Every write was acknowledged, so placed; the target's counter says 3.
        assert_eq!((o.read.unwrap())(rc), 3);
        assert_eq!((o.readerr.unwrap())(rc), 0);
        assert_eq!(&region[..6], b"abcdef");
        // The target's CQ: the receive and the fi_writedata's entry.
        let t = net.wait(1, 2 - other.len(), &mut Vec::new());
        let mut all: Vec<u64> = other.iter().chain(&t).map(|c| c.flags).collect();
        all.sort();
        assert_eq!(all, vec![(FI_RECV | FI_MSG) as u64, REMOTE_WRITE_DATA]);
        assert_eq!((o.read.unwrap())(rc), 3);
        assert_eq!(close(&mut (*mr).fid), 0);
    }
}

#[test]
fn mr_mode_answers_the_offered_bits_the_provider_uses() {
    unsafe {
        let prov = &*mrc_fi::fi_prov_ini();
        let getinfo = prov.getinfo.unwrap();
        let answer = |version: u32, offered: u32| -> c_int {
            let mut dom = fi_domain_attr {
                mr_mode: offered as c_int,
                ..Default::default()
            };
            let hints = fi_info {
                caps: (FI_MSG | FI_RMA) as u64,
                domain_attr: &mut dom,
                ..Default::default()
            };
            let mut info: *mut fi_info = null_mut();
            let no = std::ptr::null();
            assert_eq!(getinfo(version, no, no, 0, &hints, &mut info), 0);
            let m = (*(*info).domain_attr).mr_mode;
            assert_eq!((*(*info).domain_attr).mr_key_size, 4);
            mrc_fi::free_info(info);
            m
        };
        let v = (1 << 16) | 17;
        let all = FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
        for (offered, want) in [
            (0, 0),
            (FI_MR_LOCAL, 0),
            (FI_MR_ENDPOINT | FI_MR_ALLOCATED, 0),
            (FI_MR_VIRT_ADDR, FI_MR_VIRT_ADDR),
            (FI_MR_PROV_KEY | FI_MR_ENDPOINT, FI_MR_PROV_KEY),
            (all, FI_MR_PROV_KEY | FI_MR_VIRT_ADDR),
            (FI_MR_BASIC, FI_MR_BASIC),
            (FI_MR_SCALABLE, FI_MR_SCALABLE),
        ] {
            assert_eq!(answer(v, offered), want as c_int, "offered {offered:#x}");
        }
        // API 1.4: FI_MR_SCALABLE unless the application asks FI_MR_BASIC.
        let v14 = (1 << 16) | 4;
        assert_eq!(answer(v14, 0), FI_MR_SCALABLE as c_int);
        assert_eq!(answer(v14, FI_MR_BASIC), FI_MR_BASIC as c_int);
    }
}

/// `len` bytes that differ from those of another `seed` and repeat only after 251 bytes.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|k| ((k % 251) as u8).wrapping_add(seed).wrapping_mul(7) ^ (k >> 20) as u8)
        .collect()
}

/// A few progress passes on every endpoint, whose entries go to `other` (messages
/// arriving before their receive is posted: unexpected).
fn spin(net: &Net, passes: usize, other: &mut Vec<Cqe>) {
    for _ in 0..passes {
        for j in 0..net.eps.len() {
            other.extend(net.read_once(j));
        }
    }
}

/// Progress passes on every endpoint until `other` holds `n` entries (within
/// [`DEADLINE`]); no more may come.
fn settle(net: &Net, n: usize, other: &mut Vec<Cqe>) {
    let t = Instant::now();
    while other.len() < n {
        assert!(t.elapsed() < DEADLINE, "{} of {n}: {other:?}", other.len());
        spin(net, 1, other);
    }
    assert_eq!(other.len(), n, "{other:?}");
}

const MIB: usize = 1 << 20;

#[test]
fn large_tagged_messages_expected_unexpected_and_interleaved_every_byte() {
    unsafe {
        let net = Net::new(3, FI_TAGGED as u64 | FI_DIRECTED_RECV | FI_SOURCE);
        let (a, b, r) = (0, 1, 2);
        let mut other = Vec::new();
        // Expected: 5 MiB, receive posted first.
        let m5 = pattern(5 * MIB, 1);
        let mut b5 = vec![0u8; 5 * MIB];
        assert_eq!(net.trecv(r, &mut b5, mrc_fi::FI_ADDR_UNSPEC, 1, 0, 1), 0);
        assert_eq!(net.tsend(a, r, &m5, 1, 10), 0);
        assert_eq!(net.wait(r, 1, &mut other), [got(1, &b5, 5 * MIB, 1)]);
        assert!(b5 == m5, "5 MiB expected differs");
        assert_eq!(net.wait(a, 1, &mut other), [sent(10, 5 * MIB)]);
        assert_eq!(other, []);

        // Unexpected: 64 MiB + 3 from A, then a small one from A (after it on the same
        // QP) and one from B; B's is taken while A's waits, A's arrive in order.
        let big = 64 * MIB + 3;
        let m64 = pattern(big, 2);
        assert_eq!(net.tsend(a, r, &m64, 2, 11), 0);
        assert_eq!(net.tsend(a, r, b"after", 3, 12), 0);
        assert_eq!(net.tsend(b, r, b"other peer", 4, 13), 0);
        spin(&net, 200, &mut other);
        let mut small = [0u8; 16];
        assert_eq!(net.trecv(r, &mut small, mrc_fi::FI_ADDR_UNSPEC, 4, 0, 2), 0);
        assert_eq!(net.wait(r, 1, &mut other), [got(2, &small, 10, 4)]);
        assert_eq!(&small[..10], b"other peer");
        let mut b64 = vec![0u8; big];
        assert_eq!(net.trecv(r, &mut b64, mrc_fi::FI_ADDR_UNSPEC, 2, 0, 3), 0);
        let mut after = [0u8; 8];
        assert_eq!(net.trecv(r, &mut after, mrc_fi::FI_ADDR_UNSPEC, 3, 0, 4), 0);
        let e = net.wait(r, 2, &mut other);
        assert_eq!(e, [got(3, &b64, big, 2), got(4, &after, 5, 3)]);
        assert!(b64 == m64, "64 MiB + 3 unexpected differs");
        assert_eq!(&after[..5], b"after");
        settle(&net, 3, &mut other);
        other.sort_by_key(|c| c.ctx);
        assert_eq!(other, [sent(11, big), sent(12, 5), sent(13, 10)]);
        other.clear();

        // Directed: large messages from A and B with the same tag; the receive for B's
        // entry takes B's, whichever arrives first.
        let (ma, mb) = (pattern(3 * MIB + 5, 3), pattern(2 * MIB + 7, 4));
        assert_eq!(net.tsend(a, r, &ma, 5, 14), 0);
        assert_eq!(net.tsend(b, r, &mb, 5, 15), 0);
        spin(&net, 20, &mut other);
        let (mut bb, mut ba) = (vec![0u8; 4 * MIB], vec![0u8; 4 * MIB]);
        assert_eq!(net.trecv(r, &mut bb, net.addr[b], 5, 0, 5), 0);
        assert_eq!(net.wait(r, 1, &mut other), [got(5, &bb, mb.len(), 5)]);
        assert!(bb[..mb.len()] == mb[..] && bb[mb.len()..].iter().all(|&x| x == 0));
        assert_eq!(net.trecv(r, &mut ba, mrc_fi::FI_ADDR_UNSPEC, 5, 0, 6), 0);
        assert_eq!(net.wait(r, 1, &mut other), [got(6, &ba, ma.len(), 5)]);
        assert!(ba[..ma.len()] == ma[..] && ba[ma.len()..].iter().all(|&x| x == 0));
        settle(&net, 2, &mut other);
        other.sort_by_key(|c| c.ctx);
        assert_eq!(other, [sent(14, ma.len()), sent(15, mb.len())]);
        // FI_SOURCE: fi_cq_readfrom names the sender of a large message.
        let mf = pattern(2 * MIB + 1, 9);
        let mut bf = vec![0u8; mf.len()];
        assert_eq!(net.trecv(r, &mut bf, mrc_fi::FI_ADDR_UNSPEC, 6, 0, 7), 0);
        assert_eq!(net.tsend(b, r, &mf, 6, 16), 0);
        assert_eq!(readfrom(&net, r), (got(7, &bf, mf.len(), 6), net.addr[b]));
        assert!(bf == mf, "2 MiB + 1 differs");
        assert_eq!(
            readfrom(&net, b),
            (sent(16, mf.len()), mrc_fi::FI_ADDR_NOTAVAIL)
        );
        net.quiet();
    }
}

#[test]
fn large_messages_truncate_into_smaller_buffers_with_exact_olen() {
    unsafe {
        let net = Net::new(2, FI_TAGGED as u64);
        let (a, r) = (0, 1);
        let mut other = Vec::new();
        let m = pattern(5 * MIB, 5);
        let keep = 3 * MIB + 1;
        let trunc = |c: usize, buf: &[u8]| Cqe {
            err: FI_ETRUNC as c_int,
            olen: m.len() - keep,
            ..got(c, buf, keep, 7)
        };
        // Expected, then unexpected: the first `keep` bytes land, not one more.
        for (unexpected, c) in [(false, 1), (true, 2)] {
            let mut buf = vec![0u8; 4 * MIB];
            if unexpected {
                assert_eq!(net.tsend(a, r, &m, 7, 10 + c), 0);
                spin(&net, 50, &mut other);
            }
            assert_eq!(
                net.trecv(r, &mut buf[..keep], mrc_fi::FI_ADDR_UNSPEC, 7, 0, c),
                0
            );
            if !unexpected {
                assert_eq!(net.tsend(a, r, &m, 7, 10 + c), 0);
            }
            assert_eq!(net.wait(r, 1, &mut other), [trunc(c, &buf)]);
            assert!(buf[..keep] == m[..keep], "kept bytes differ");
            assert!(
                buf[keep..].iter().all(|&x| x == 0),
                "a byte past the buffer"
            );
            settle(&net, 1, &mut other);
            assert_eq!(other, [sent(10 + c, m.len())]);
            other.clear();
        }
        net.quiet();
    }
}

#[test]
fn large_messages_peek_claim_discard_and_untagged_gather() {
    unsafe {
        let net = Net::new(2, (FI_TAGGED | FI_MSG) as u64);
        let (a, r) = (0, 1);
        let mut other = Vec::new();
        let peek = FI_PEEK as u64;
        let found = |c: usize, len: usize, tag: u64| Cqe {
            buf: 0,
            ..got(c, &[], len, tag)
        };
        // A peek sees a large message's whole length as soon as its first fragment
        // arrived; a claim takes it later, every byte.
        let m1 = pattern(9 * MIB + 1, 6);
        assert_eq!(net.tsend(a, r, &m1, 1, 10), 0);
        let t = Instant::now();
        loop {
            assert!(t.elapsed() < DEADLINE);
            assert_eq!(net.trecvmsg(r, None, 1, 0, 20, peek), 0);
            let e = net.wait(r, 1, &mut other);
            if e[0].err == 0 {
                assert_eq!(e, [found(20, m1.len(), 1)]);
                break;
            }
            assert_eq!(e[0].err, FI_ENOMSG as c_int);
        }
        assert_eq!(net.trecvmsg(r, None, 1, 0, 21, peek | FI_CLAIM), 0);
        assert_eq!(net.wait(r, 1, &mut other), [found(21, m1.len(), 1)]);
        let mut b1 = vec![0u8; m1.len()];
        assert_eq!(net.trecvmsg(r, Some(&mut b1), 1, 0, 21, FI_CLAIM), 0);
        assert_eq!(net.wait(r, 1, &mut other), [got(21, &b1, m1.len(), 1)]);
        assert!(b1 == m1, "claimed message differs");
        // A discarded large message leaves nothing; the next from the same peer arrives.
        let m2 = pattern(6 * MIB, 7);
        assert_eq!(net.tsend(a, r, &m2, 2, 11), 0);
        assert_eq!(net.tsend(a, r, b"next", 3, 12), 0);
        let t = Instant::now();
        loop {
            assert!(t.elapsed() < DEADLINE);
            assert_eq!(net.trecvmsg(r, None, 2, 0, 22, peek | FI_DISCARD), 0);
            let e = net.wait(r, 1, &mut other);
            if e[0].err == 0 {
                assert_eq!(e, [found(22, m2.len(), 2)]);
                break;
            }
        }
        let mut nb = [0u8; 4];
        assert_eq!(net.trecv(r, &mut nb, mrc_fi::FI_ADDR_UNSPEC, 0, !0, 23), 0);
        assert_eq!(net.wait(r, 1, &mut other), [got(23, &nb, 4, 3)]);
        assert_eq!(&nb, b"next");
        settle(&net, 3, &mut other);
        other.sort_by_key(|c| c.ctx);
        assert_eq!(other, [sent(10, m1.len()), sent(11, m2.len()), sent(12, 4)]);
        other.clear();
        // Untagged, from three iovecs that cross fragment boundaries, into two.
        let m3 = pattern(4 * MIB + 11, 8);
        let (x, rest) = m3.split_at(MIB - 3);
        let (y, z) = rest.split_at(2 * MIB + 1);
        let iov = [x, y, z].map(|s| iovec {
            iov_base: s.as_ptr() as *mut c_void,
            iov_len: s.len(),
        });
        let ms = net.msg(a);
        let sv = (ms.sendv.unwrap())(
            net.eps[a],
            iov.as_ptr(),
            null_mut(),
            3,
            net.addr[r],
            ctx(13),
        );
        assert_eq!(sv, 0);
        let (mut p, mut q) = (vec![0u8; 3 * MIB], vec![0u8; 2 * MIB]);
        let riov = [&mut p, &mut q].map(|s| iovec {
            iov_base: s.as_mut_ptr().cast(),
            iov_len: s.len(),
        });
        let mr = net.msg(r);
        let rv = (mr.recvv.unwrap())(net.eps[r], riov.as_ptr(), null_mut(), 2, u64::MAX, ctx(24));
        assert_eq!(rv, 0);
        let e = net.wait(r, 1, &mut other);
        let want = Cqe {
            flags: (FI_RECV | FI_MSG) as u64,
            tag: 0,
            ..got(24, &p, m3.len(), 0)
        };
        assert_eq!(e, [want]);
        assert!(p[..] == m3[..3 * MIB] && q[..m3.len() - 3 * MIB] == m3[3 * MIB..]);
        assert!(q[m3.len() - 3 * MIB..].iter().all(|&x| x == 0));
        settle(&net, 1, &mut other);
        let s = Cqe {
            flags: (FI_SEND | FI_MSG) as u64,
            ..sent(13, m3.len())
        };
        assert_eq!(other, [s]);
        net.quiet();
    }
}

/// `fi_getinfo` (the provider's) with `node`, `service` and `flags`, no hints: the
/// `fi_info`, or the negative code.
unsafe fn getinfo_at(
    node: Option<&CStr>,
    service: Option<&CStr>,
    flags: u64,
) -> Result<*mut fi_info, c_int> {
    unsafe {
        let prov = &*mrc_fi::fi_prov_ini();
        let mut info: *mut fi_info = null_mut();
        let p = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
        let r = (prov.getinfo.unwrap())(
            (1 << 16) | 17,
            p(node),
            p(service),
            flags,
            null_mut(),
            &mut info,
        );
        if r == 0 { Ok(info) } else { Err(r) }
    }
}

/// The `len` bytes at `p` (an `fi_info`'s address), or `None` for null.
unsafe fn addr_bytes(p: *mut c_void, len: usize) -> Option<Vec<u8>> {
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec())
}

#[test]
fn getinfo_names_addresses_from_a_node_and_service_that_endpoints_bind_and_avs_take() {
    use mrc_fabric::engine::ConnHandle;
    use std::ffi::CString;
    use std::net::SocketAddr;
    unsafe {
        let named = |port: u16| {
            let at = SocketAddr::from(([127, 0, 0, 1], port));
            ConnHandle::new(at, mrc_fi::NAMED_SECRET, mrc_fi::LISTEN_OPTIONS)
                .to_bytes()
                .to_vec()
        };
        // Nothing named: a source at the provider's IP, port 0; no destination.
        let i = getinfo_at(None, None, 0).unwrap();
        assert_eq!((*i).src_addrlen, mrc_fi::ADDR_LEN);
        assert_eq!(addr_bytes((*i).src_addr, (*i).src_addrlen), Some(named(0)));
        assert_eq!(addr_bytes((*i).dest_addr, (*i).dest_addrlen), None);
        mrc_fi::free_info(i);
        // A free UDP port: the endpoint's listener takes its set-up datagrams there.
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let service = CString::new(port.to_string()).unwrap();
        // A node and service with FI_SOURCE: the source; without: the destination (the
        // source as if nothing were named). "localhost" resolves to 127.0.0.1.
        let server = getinfo_at(Some(c"127.0.0.1"), Some(&service), FI_SOURCE).unwrap();
        assert_eq!(
            addr_bytes((*server).src_addr, (*server).src_addrlen),
            Some(named(port))
        );
        assert_eq!(
            addr_bytes((*server).dest_addr, (*server).dest_addrlen),
            None
        );
        let client = getinfo_at(Some(c"localhost"), Some(&service), 0).unwrap();
        assert_eq!(
            addr_bytes((*client).src_addr, (*client).src_addrlen),
            Some(named(0))
        );
        assert_eq!(
            addr_bytes((*client).dest_addr, (*client).dest_addrlen),
            Some(named(port))
        );
        mrc_fi::free_info(client);
        // A service alone is the source; a node alone without FI_SOURCE names no listener.
        let s = getinfo_at(None, Some(&service), 0).unwrap();
        assert_eq!(
            addr_bytes((*s).src_addr, (*s).src_addrlen),
            Some(named(port))
        );
        mrc_fi::free_info(s);
        let s = getinfo_at(Some(c"127.0.0.1"), None, 0).unwrap();
        assert_eq!(addr_bytes((*s).dest_addr, (*s).dest_addrlen), None);
        mrc_fi::free_info(s);
        // A service that is not a port, a node that does not resolve: FI_ENODATA.
        let nodata = -(FI_ENODATA as c_int);
        assert_eq!(
            getinfo_at(None, Some(c"http"), FI_SOURCE).err(),
            Some(nodata)
        );
        assert_eq!(
            getinfo_at(None, Some(c"70000"), FI_SOURCE).err(),
            Some(nodata)
        );
        assert_eq!(
            getinfo_at(Some(c"no-such-host.invalid"), Some(&service), 0).err(),
            Some(nodata)
        );

        // An endpoint opened from the source info listens there: its name is that address;
        // a second one, the port taken, listens where the kernel says, with a secret of its
        // own; one with a source that is not ours is refused. A peer that knows only host
        // and port reaches the first.
        let mut net = Net::new(1, FI_TAGGED as u64);
        let dops = &*(*net.domain).ops;
        let name_of = |ep: *mut fid_ep| {
            let mut name = [0u8; mrc_fi::ADDR_LEN];
            let mut len = name.len();
            let cm = &*(*ep).cm;
            assert_eq!(
                (cm.getname.unwrap())(&mut (*ep).fid, name.as_mut_ptr().cast(), &mut len),
                0
            );
            name.to_vec()
        };
        let mut ep: *mut fid_ep = null_mut();
        assert_eq!(
            (dops.endpoint.unwrap())(net.domain, server, &mut ep, null_mut()),
            0
        );
        assert_eq!(name_of(ep), named(port));
        let mut again: *mut fid_ep = null_mut();
        assert_eq!(
            (dops.endpoint.unwrap())(net.domain, server, &mut again, null_mut()),
            0
        );
        let second = name_of(again);
        assert_eq!(second[..6], named(port)[..6]);
        assert_eq!(second[8..24], named(port)[8..24]);
        assert_ne!(second[6..8], named(port)[6..8]);
        assert_ne!(second[24..56], named(port)[24..56]);
        assert_eq!(close(&mut (*again).fid), 0);
        let mut junk = [7u8; mrc_fi::ADDR_LEN];
        let (keep, keeplen) = ((*server).src_addr, (*server).src_addrlen);
        (*server).src_addr = junk.as_mut_ptr().cast();
        assert_eq!(
            (dops.endpoint.unwrap())(net.domain, server, &mut again, null_mut()),
            -(FI_EINVAL as c_int)
        );
        (*server).src_addr = keep;
        (*server).src_addrlen = keeplen;
        mrc_fi::free_info(server);
        let mut cq: *mut fid_cq = null_mut();
        let mut cq_attr = fi_cq_attr {
            format: FI_CQ_FORMAT_TAGGED,
            ..Default::default()
        };
        assert_eq!(
            (dops.cq_open.unwrap())(net.domain, &mut cq_attr, &mut cq, null_mut()),
            0
        );
        let eops = &*(*ep).fid.ops;
        assert_eq!(
            (eops.bind.unwrap())(&mut (*ep).fid, &mut (*net.av).fid, 0),
            0
        );
        let both = (FI_TRANSMIT | FI_RECV) as u64;
        assert_eq!(
            (eops.bind.unwrap())(&mut (*ep).fid, &mut (*cq).fid, both),
            0
        );
        assert_eq!(
            (eops.control.unwrap())(&mut (*ep).fid, FI_ENABLE as c_int, null_mut()),
            0
        );
        // The AV takes the address built from host and port (the client's dest_addr).
        let mut fa = 0u64;
        let aops = &*(*net.av).ops;
        let dest = named(port);
        assert_eq!(
            (aops.insert.unwrap())(net.av, dest.as_ptr().cast(), 1, &mut fa, 0, null_mut()),
            1
        );
        net.eps.push(ep);
        net.cqs.push(cq);
        net.addr.push(fa);
        let (c, s) = (0, 1);
        let mut other = Vec::new();
        let mut b = [0u8; 8];
        assert_eq!(net.trecv(s, &mut b, mrc_fi::FI_ADDR_UNSPEC, 0, !0, 1), 0);
        assert_eq!(net.tsend(c, s, b"by port", 9, 2), 0);
        assert_eq!(net.wait(s, 1, &mut other), [got(1, &b, 7, 9)]);
        assert_eq!(&b[..7], b"by port");
        settle(&net, 1, &mut other);
        assert_eq!(other, [sent(2, 7)]);
        // And back, to the client's own name.
        other.clear();
        let mut back = [0u8; 4];
        assert_eq!(net.trecv(c, &mut back, mrc_fi::FI_ADDR_UNSPEC, 0, !0, 3), 0);
        assert_eq!(net.tsend(s, c, b"back", 10, 4), 0);
        assert_eq!(net.wait(c, 1, &mut other), [got(3, &back, 4, 10)]);
        assert_eq!(&back, b"back");
        settle(&net, 1, &mut other);
        assert_eq!(other, [sent(4, 4)]);
        net.quiet();
    }
}

#[test]
fn a_send_still_queued_for_its_connection_is_cancelled() {
    unsafe {
        let net = Net::new(2, FI_TAGGED as u64);
        let (a, r) = (0, 1);
        let mut other = Vec::new();
        // No progress yet: the connection to R is being set up, so all three wait in A's
        // queue for it (a large one as its fragments).
        let big = pattern(3 * MIB + 1, 11);
        assert_eq!(net.tsend(a, r, b"one", 1, 10), 0);
        assert_eq!(net.tsend(a, r, &big, 2, 11), 0);
        assert_eq!(net.tsend(a, r, b"three", 3, 12), 0);
        assert_eq!(net.cancel(a, 11), 0);
        assert_eq!(net.cancel(a, 10), 0);
        assert_eq!(net.cancel(a, 11), neg(FI_ENOENT));
        assert_eq!(net.cancel(a, 99), neg(FI_ENOENT));
        let cancelled = |c: usize| Cqe {
            err: FI_ECANCELED as c_int,
            ..sent(c, 0)
        };
        assert_eq!(net.wait(a, 2, &mut other), [cancelled(11), cancelled(10)]);
        // Only "three" arrives.
        let mut b = vec![0u8; 4 * MIB];
        assert_eq!(net.trecv(r, &mut b, mrc_fi::FI_ADDR_UNSPEC, 0, !0, 20), 0);
        assert_eq!(net.wait(r, 1, &mut other), [got(20, &b, 5, 3)]);
        assert_eq!(&b[..5], b"three");
        settle(&net, 1, &mut other);
        assert_eq!(other, [sent(12, 5)]);
        // A send that left cannot be cancelled.
        assert_eq!(net.cancel(a, 12), neg(FI_ENOENT));
        net.quiet();
    }
}

/// Calls `post` until it answers something other than `-FI_EAGAIN` (the way Open MPI's
/// OFI MTL and fabtests retry an inject), calling `between` after each `-FI_EAGAIN`,
/// within [`DEADLINE`]: every answer, in order.
fn retry(mut post: impl FnMut() -> isize, mut between: impl FnMut()) -> Vec<isize> {
    let t = Instant::now();
    let mut all = Vec::new();
    loop {
        let r = post();
        all.push(r);
        if r != neg(FI_EAGAIN) {
            return all;
        }
        assert!(
            t.elapsed() < DEADLINE,
            "{} answers of -FI_EAGAIN",
            all.len()
        );
        between();
    }
}

/// `answers` is `-FI_EAGAIN` `n` times (n >= `at_least`), then `last`: `n`.
fn eagain_then(answers: &[isize], at_least: usize, last: isize) -> usize {
    let n = answers.len() - 1;
    assert!(n >= at_least, "{answers:?}");
    assert!(
        answers[..n].iter().all(|&r| r == neg(FI_EAGAIN)),
        "{answers:?}"
    );
    assert_eq!(answers[n], last, "{answers:?}");
    n
}

#[test]
fn an_inject_waits_with_eagain_for_its_connection_and_its_bytes_arrive() {
    unsafe {
        let (mut net, _) = Net::with_mr_mode(2, (FI_TAGGED | FI_MSG) as u64, 0, 0, 0);
        let tx = net.cntr_open(None).unwrap();
        assert_eq!(net.bind(0, &mut (*tx).fid, FI_SEND as u64), 0);
        let mut b = [0u8; 64];
        assert_eq!(net.trecv(1, &mut b, mrc_fi::FI_ADDR_UNSPEC, 0x55, 0, 3), 0);
        // Endpoint 0 meets endpoint 1 for the first time: the set-up starts and the
        // inject is refused until it is done. Endpoint 0 is never progressed but by the
        // inject itself; endpoint 1 (the peer, as if in a process of its own) is, since
        // it must answer the set-up.
        let t = net.tagged(0);
        let msg = b"an inject during the set-up";
        let mut other = Vec::new();
        let answers = retry(
            || {
                (t.inject.unwrap())(
                    net.eps[0],
                    msg.as_ptr().cast(),
                    msg.len(),
                    net.addr[1],
                    0x55,
                )
            },
            || other.extend(net.read_once(1)),
        );
        let n = eagain_then(&answers, 1, 0);
        assert_eq!(other, []);
        // It went once: the receive holds its bytes exactly, nothing past them.
        assert_eq!(net.wait(1, 1, &mut other), [got(3, &b, msg.len(), 0x55)]);
        assert_eq!(&b[..msg.len()], msg);
        assert!(b[msg.len()..].iter().all(|&x| x == 0));
        assert_eq!(other, []);
        // It completes nothing on endpoint 0; the counter counts it once, no error.
        let c = cntr_ops(tx);
        let t0 = Instant::now();
        while (c.read.unwrap())(tx) < 1 {
            assert!(t0.elapsed() < DEADLINE);
            assert_eq!(net.read_once(0), []);
            other.extend(net.read_once(1));
        }
        net.quiet();
        assert_eq!(other, []);
        assert_eq!(((c.read.unwrap())(tx), (c.readerr.unwrap())(tx)), (1, 0));
        // The connection is up: the next inject goes at its first call.
        assert_eq!(net.trecv(1, &mut b, mrc_fi::FI_ADDR_UNSPEC, 0x56, 0, 4), 0);
        let again = b"and one after it";
        let p = again.as_ptr().cast();
        assert_eq!(
            (t.inject.unwrap())(net.eps[0], p, again.len(), net.addr[1], 0x56),
            0
        );
        assert_eq!(net.wait(1, 1, &mut other), [got(4, &b, again.len(), 0x56)]);
        assert_eq!(&b[..again.len()], again);
        println!("the first inject: {n} answers of -FI_EAGAIN, then 0");
    }
}

#[test]
fn a_peer_that_cannot_be_reached_fails_its_sends_and_refuses_its_injects() {
    unsafe {
        let (mut net, _) = Net::with_mr_mode(2, (FI_MSG | FI_RMA) as u64, 0, 0, 0);
        let tx = net.cntr_open(None).unwrap();
        assert_eq!(net.bind(0, &mut (*tx).fid, FI_SEND as u64), 0);
        let w = net.cntr_open(None).unwrap();
        assert_eq!(net.bind(0, &mut (*w).fid, FI_WRITE as u64), 0);
        // Endpoint 1 closes before anything reached it: its listener is gone, so the
        // connections endpoint 0 sets up to it are refused (ICMP port unreachable).
        let gone = net.eps.remove(1);
        assert_eq!(close(&mut (*gone).fid), 0);
        let m = net.msg(0);
        let (p, n) = (b"an inject".as_ptr().cast(), 9);
        let inject = || (m.inject.unwrap())(net.eps[0], p, n, net.addr[1]);
        let refused = neg(FI_ECONNREFUSED);
        let none = || {};
        // A send with a context waits in the queue for the set-up (0); an inject is
        // refused with -FI_EAGAIN while the set-up runs, then answered with the set-up's
        // error, which only the inject's own calls advance (no progress call).
        assert_eq!(net.send(0, 1, b"first", 7), 0);
        eagain_then(&retry(inject, none), 0, refused);
        // The send completes with FI_ECONNREFUSED and its context.
        let refused_entry = |c: usize, len: usize| Cqe {
            ctx: c,
            flags: (FI_SEND | FI_MSG) as u64,
            len,
            buf: 0,
            data: 0,
            tag: 0,
            err: FI_ECONNREFUSED as c_int,
            olen: 0,
        };
        let mut other = Vec::new();
        assert_eq!(net.wait(0, 1, &mut other), [refused_entry(7, 5)]);
        // The error was given once: the next inject starts a new set-up (-FI_EAGAIN at
        // its first call), which fails the same way.
        let answers = retry(inject, none);
        assert_eq!(answers[0], neg(FI_EAGAIN));
        eagain_then(&answers, 1, refused);
        // A set-up that fails with only a send queued: its error entry, then the next
        // post of any kind (an RMA inject here) gets the error at once, and only that
        // one: the one after starts anew.
        assert_eq!(net.send(0, 1, b"third", 8), 0);
        assert_eq!(net.wait(0, 1, &mut other), [refused_entry(8, 5)]);
        let rma = net.rma(0);
        let write = || (rma.inject.unwrap())(net.eps[0], p, n, net.addr[1], 0, 0xC0DE);
        assert_eq!(write(), refused);
        let answers = retry(write, none);
        assert_eq!(answers[0], neg(FI_EAGAIN));
        eagain_then(&answers, 1, refused);
        // fi_tinject, fi_injectdata, fi_tinjectdata the same way.
        let t = net.tagged(0);
        let to = net.addr[1];
        let e = net.eps[0];
        for post in [
            &(|| (t.inject.unwrap())(e, p, n, to, 1)) as &dyn Fn() -> isize,
            &(|| (m.injectdata.unwrap())(e, p, n, 2, to)),
            &(|| (t.injectdata.unwrap())(e, p, n, 3, to, 4)),
        ] {
            let answers = retry(post, none);
            assert_eq!(answers[0], neg(FI_EAGAIN));
            eagain_then(&answers, 1, refused);
        }
        // No entry for an inject (refused at its call, it was never posted), and the
        // counters count only the two sends that were.
        net.quiet();
        assert_eq!(other, []);
        let (t, wc) = (cntr_ops(tx), cntr_ops(w));
        assert_eq!(((t.read.unwrap())(tx), (t.readerr.unwrap())(tx)), (0, 2));
        assert_eq!(((wc.read.unwrap())(w), (wc.readerr.unwrap())(w)), (0, 0));
    }
}

#[test]
fn an_inject_to_a_silent_peer_is_refused_after_the_set_up_s_retransmissions() {
    unsafe {
        let mut net = Net::new(2, FI_TAGGED as u64);
        // Endpoint 1's port, bound again by a socket that reads and never answers.
        let mut name = [0u8; mrc_fi::ADDR_LEN];
        let mut len = name.len();
        let cm = &*(*net.eps[1]).cm;
        assert_eq!(
            (cm.getname.unwrap())(&mut (*net.eps[1]).fid, name.as_mut_ptr().cast(), &mut len),
            0
        );
        assert_eq!(name[5], 4, "an IPv4 address");
        let port = u16::from_be_bytes([name[6], name[7]]);
        let gone = net.eps.remove(1);
        assert_eq!(close(&mut (*gone).fid), 0);
        let silent = std::net::UdpSocket::bind(("127.0.0.1", port)).expect("bind the port");
        silent.set_nonblocking(true).unwrap();
        // Only the inject's calls advance the set-up: its retransmission timer runs in
        // them until the set-up gives up, and the inject gets its error.
        let t = net.tagged(0);
        let (p, n) = (b"to nobody".as_ptr().cast(), 9);
        let inject = || (t.inject.unwrap())(net.eps[0], p, n, net.addr[1], 9);
        let t0 = Instant::now();
        let answers = retry(inject, || {});
        let took = t0.elapsed();
        eagain_then(&answers, 2, neg(FI_ECONNREFUSED));
        let mut datagrams = 0;
        let mut buf = [0u8; 2048];
        while silent.recv(&mut buf).is_ok() {
            datagrams += 1;
        }
        // The first try and MAX_SETUP_RETRANSMITS (10) more.
        assert_eq!(datagrams, 11);
        net.quiet();
        println!(
            "{} answers of -FI_EAGAIN over {took:.2?}, then -FI_ECONNREFUSED",
            answers.len() - 1
        );
    }
}

/// The send completion of an untagged message of `len` bytes.
fn msent(c: usize, len: usize) -> Cqe {
    Cqe {
        flags: (FI_SEND | FI_MSG) as u64,
        ..sent(c, len)
    }
}

/// The receive completion of an untagged message of `len` bytes into `buf`.
fn mgot(c: usize, buf: &[u8], len: usize) -> Cqe {
    Cqe {
        flags: (FI_RECV | FI_MSG) as u64,
        ..got(c, buf, len, 0)
    }
}

/// What endpoint `i` of `net` did (sendmsg calls, flusher passes, queued copies).
fn counts(net: &Net, i: usize) -> mrc_fi::EpCounts {
    unsafe { mrc_fi::ep_debug_counts(net.eps[i]) }.expect("an open endpoint")
}

/// Reads endpoint `i`'s CQ alone (a pass of endpoint `i` only) until an entry comes.
fn first_entry(net: &Net, i: usize) -> Vec<Cqe> {
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < DEADLINE, "no entry on endpoint {i}");
        let e = net.read_once(i);
        if !e.is_empty() {
            return e;
        }
    }
}

/// The connections both ways, then every endpoint progressed until the last SACKs left
/// (a flusher's bound and more).
fn connected_pair() -> Net {
    let net = unsafe { Net::new(2, FI_MSG as u64) };
    let mut b = [0u8; 8];
    for (from, to) in [(0, 1), (1, 0)] {
        assert_eq!(net.recv(to, &mut b, 1), 0);
        assert_eq!(net.send(from, to, b"set-up", 2), 0);
        net.wait(to, 1, &mut Vec::new());
        net.wait(from, 1, &mut Vec::new());
    }
    std::thread::sleep(mrc_fi::FLUSH_BOUND * 4);
    net.quiet();
    net
}

#[test]
fn a_message_s_sack_leaves_with_the_reply_or_from_the_flusher() {
    let net = connected_pair();
    let mut b = [[0u8; 8]; 4];
    // The pass that delivers a message sends nothing (its SACK waits for the next call),
    // reposting a receive sends nothing, and the reply's post sends the reply and the
    // SACK: two datagrams.
    let c1 = counts(&net, 1);
    assert_eq!(net.recv(1, &mut b[0], 10), 0);
    assert_eq!(net.send(0, 1, b"ping", 11), 0);
    assert_eq!(first_entry(&net, 1), vec![mgot(10, &b[0], 4)]);
    assert_eq!(net.recv(1, &mut b[1], 12), 0);
    assert_eq!(counts(&net, 1), c1);
    assert_eq!(net.recv(0, &mut b[2], 13), 0);
    assert_eq!(net.send(1, 0, b"pong", 14), 0);
    assert_eq!(
        counts(&net, 1),
        mrc_fi::EpCounts {
            sendmsg_calls: c1.sendmsg_calls + 2,
            ..c1
        }
    );
    // Endpoint 0 has the reply and the completion of its send (the SACK came with it).
    let mut e = net.wait(0, 2, &mut Vec::new());
    e.sort_by_key(|x| x.ctx);
    assert_eq!(e, vec![msent(11, 4), mgot(13, &b[2], 4)]);
    assert_eq!((&b[0][..4], &b[2][..4]), (&b"ping"[..], &b"pong"[..]));
    net.wait(1, 1, &mut Vec::new()); // the reply's completion (endpoint 0's SACK)
    std::thread::sleep(mrc_fi::FLUSH_BOUND * 4);
    net.quiet();

    // No call after the delivery: the flusher sends the SACK, one datagram in one pass,
    // no earlier than one FLUSH_BOUND (two looks see the deferral) after it began, and
    // endpoint 0's send completes.
    let c1 = counts(&net, 1);
    assert_eq!(net.send(0, 1, b"ping2", 15), 0);
    assert_eq!(first_entry(&net, 1), vec![mgot(12, &b[1], 5)]);
    let t0 = Instant::now();
    assert_eq!(counts(&net, 1), c1);
    assert_eq!(first_entry(&net, 0), vec![msent(15, 5)]);
    let waited = t0.elapsed();
    assert_eq!(&b[1][..5], b"ping2");
    assert_eq!(
        counts(&net, 1),
        mrc_fi::EpCounts {
            sendmsg_calls: c1.sendmsg_calls + 1,
            flush_passes: c1.flush_passes + 1,
            ..c1
        }
    );
    // t0 is taken a little after the deferral began, so half the bound as the floor.
    assert!(
        waited >= mrc_fi::FLUSH_BOUND / 2 && waited < Duration::from_secs(1),
        "{waited:?}"
    );
}

#[test]
fn sends_waiting_for_a_slot_copy_only_what_inject_size_holds() {
    let net = connected_pair();
    // Endpoint 1 is not progressed while endpoint 0 posts: no SACK frees a slot, so the
    // first 16 take the QP's 16 slots and the rest wait in the queue. 20 sends of 5000
    // bytes (over inject_size) wait with the application's buffers, uncopied; 20
    // injects of 100 bytes and 4 sends of 4096 are copied with their 16-byte header.
    let bufs: Vec<Vec<u8>> = (0..44)
        .map(|i| {
            pattern(
                if i < 20 {
                    5000
                } else if i < 40 {
                    100
                } else {
                    4096
                },
                i as u8,
            )
        })
        .collect();
    let c0 = counts(&net, 0);
    for (i, b) in bufs.iter().enumerate() {
        let r = if (20..40).contains(&i) {
            let m = net.msg(0);
            unsafe { (m.inject.unwrap())(net.eps[0], b.as_ptr().cast(), b.len(), net.addr[1]) }
        } else {
            net.send(0, 1, b, 100 + i)
        };
        assert_eq!(r, 0, "send {i}");
    }
    // 4 of the 5000-byte sends in the queue (not copied), 20 injects, 4 of 4096.
    assert_eq!(
        counts(&net, 0).queued_copy_bytes - c0.queued_copy_bytes,
        20 * (100 + 16) + 4 * (4096 + 16)
    );
    // Every byte arrives, in order.
    let mut rb: Vec<Vec<u8>> = bufs.iter().map(|b| vec![0u8; b.len()]).collect();
    for (i, r) in rb.iter_mut().enumerate() {
        assert_eq!(net.recv(1, r, 200 + i), 0);
    }
    let mut done = Vec::new();
    settle(&net, 44 + 24, &mut done);
    for (i, (r, b)) in rb.iter().zip(&bufs).enumerate() {
        assert_eq!(r, b, "message {i}");
    }
    let mut sends: Vec<usize> = done.iter().map(|e| e.ctx).filter(|&c| c < 200).collect();
    sends.sort_unstable();
    let want: Vec<usize> = (0..44)
        .filter(|i| !(20..40).contains(i))
        .map(|i| 100 + i)
        .collect();
    assert_eq!(sends, want);
}
