//! The provider called the way libfabric and its applications call it, in process and
//! without libfabric: `fi_prov_ini`, then every object through its `fi_ops_*` tables.
//! Bad input answers negative `FI_E*` codes; a message sent to the endpoint's own address
//! arrives whole.

use mrc_fi::ffi::*;
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
        hints.caps = FI_RMA as u64;
        assert_eq!(
            getinfo(v, std::ptr::null(), std::ptr::null(), 0, &hints, &mut info),
            -(FI_ENODATA as c_int)
        );
        hints.caps = FI_MSG as u64;
        assert_eq!(
            getinfo(v, std::ptr::null(), std::ptr::null(), 0, &hints, &mut info),
            0
        );
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
