//! `FI_MRC_NETNS` in process: two network namespaces of this test's own joined by a veth
//! pair with IPv6 addresses, one endpoint in each (`FI_MRC_NETNS`, `FI_MRC_ADDR`), their
//! names carrying those addresses, each inserted in the other's AV and a message each way
//! over the veth, every byte checked; and the errors of `fi_getinfo` and `fi_endpoint`
//! for a namespace that does not exist and an address the namespace lacks. Needs root
//! and `ip` (elsewhere a `SKIPPED:` line). Then `FI_MRC_PLANES`: two namespaces joined by
//! two veth pairs (two planes), endpoints spraying over both, each plane's share of the
//! bytes, one plane's link down and the next messages on the other; and a peer with
//! another number of planes refused within seconds. The tests set the provider's
//! environment variables in process: each holds [`ENV`] throughout, so no other test of
//! this file reads them meanwhile, and starts from none set.

#[allow(dead_code)] // this file uses only `skip`
mod common;

use common::skip;
use mrc_fi::ffi::*;
use std::net::Ipv6Addr;
use std::os::raw::{c_int, c_void};
use std::process::Command;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Held by each test of this file while it sets and reads the provider's variables.
static ENV: Mutex<()> = Mutex::new(());

/// Takes [`ENV`] (a test that failed holding it leaves no harm: every test starts by
/// clearing the variables) and clears every `FI_MRC_*` variable the tests set.
fn env_lock() -> MutexGuard<'static, ()> {
    let g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    env(None, None);
    env_mtu(None);
    env_planes(None);
    g
}

fn neg(e: u32) -> c_int {
    -(e as c_int)
}

/// `ip ARGS`, asserting success.
fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(o.status.success(), "ip {args:?}: {o:?}");
}

/// Two namespaces `NAME-a` and `NAME-b` joined by a veth pair (`eth0` in each), with
/// [`A`] and [`B`]; deleted when dropped (also after a failed assertion).
struct Pair {
    a: String,
    b: String,
}

/// The address of namespace `a`'s end.
const A: &str = "fd00:6d72:66::1";
/// The address of namespace `b`'s end.
const B: &str = "fd00:6d72:66::2";

impl Pair {
    fn new() -> Pair {
        let base = format!("mrcfi{}", std::process::id());
        let p = Pair {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
        };
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        ip(&[
            "-n", &p.a, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
            &p.b,
        ]);
        for (ns, addr) in [(&p.a, A), (&p.b, B)] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            let cidr = format!("{addr}/64");
            ip(&["-n", ns, "addr", "add", &cidr, "dev", "eth0", "nodad"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
        }
        p
    }

    /// Bytes namespace `ns`'s `eth0` has received.
    fn rx_bytes(ns: &str) -> u64 {
        Pair::stat(ns, "rx_bytes")
    }

    /// Counter `name` of namespace `ns`'s `eth0`.
    fn stat(ns: &str, name: &str) -> u64 {
        if_stat(ns, "eth0", name)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Counter `name` of namespace `ns`'s interface `dev` (`/sys/class/net/DEV/statistics`).
fn if_stat(ns: &str, dev: &str, name: &str) -> u64 {
    let path = format!("/sys/class/net/{dev}/statistics/{name}");
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "cat", &path])
        .output()
        .expect("run ip netns exec");
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("a byte count")
}

/// Sets (or, for `None`, removes) the provider's variables.
fn env(netns: Option<&str>, addr: Option<&str>) {
    // SAFETY: this test binary runs this one test; the provider reads the environment
    // through std::env (under std's lock), and no C code of this process reads it.
    unsafe {
        match netns {
            Some(v) => std::env::set_var("FI_MRC_NETNS", v),
            None => std::env::remove_var("FI_MRC_NETNS"),
        }
        match addr {
            Some(v) => std::env::set_var("FI_MRC_ADDR", v),
            None => std::env::remove_var("FI_MRC_ADDR"),
        }
    }
}

/// Sets (or, for `None`, removes) `FI_MRC_MTU`.
fn env_mtu(mtu: Option<&str>) {
    // SAFETY: as in `env`.
    unsafe {
        match mtu {
            Some(v) => std::env::set_var("FI_MRC_MTU", v),
            None => std::env::remove_var("FI_MRC_MTU"),
        }
    }
}

/// Sets (or, for `None`, removes) `FI_MRC_PLANES`.
fn env_planes(planes: Option<&str>) {
    // SAFETY: as in `env`.
    unsafe {
        match planes {
            Some(v) => std::env::set_var("FI_MRC_PLANES", v),
            None => std::env::remove_var("FI_MRC_PLANES"),
        }
    }
}

/// `fi_getinfo` with no node, service or hints: the provider's answer code and info.
unsafe fn getinfo() -> (c_int, *mut fi_info) {
    unsafe {
        let prov = &*mrc_fi::fi_prov_ini();
        let mut info: *mut fi_info = null_mut();
        let no = std::ptr::null();
        let r = (prov.getinfo.unwrap())((1 << 16) | 17, no, no, 0, std::ptr::null(), &mut info);
        (r, info)
    }
}

/// An enabled endpoint with its own AV and CQ.
struct Side {
    ep: *mut fid_ep,
    av: *mut fid_av,
    cq: *mut fid_cq,
}

unsafe fn side(domain: *mut fid_domain, info: *mut fi_info) -> Side {
    unsafe {
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
        let eops = &*(*ep).fid.ops;
        assert_eq!((eops.bind.unwrap())(&mut (*ep).fid, &mut (*av).fid, 0), 0);
        let both = (FI_TRANSMIT | FI_RECV) as u64;
        assert_eq!(
            (eops.bind.unwrap())(&mut (*ep).fid, &mut (*cq).fid, both),
            0
        );
        assert_eq!(
            (eops.control.unwrap())(&mut (*ep).fid, FI_ENABLE as c_int, null_mut()),
            0
        );
        Side { ep, av, cq }
    }
}

/// The endpoint's name (`fi_getname`).
unsafe fn name(s: &Side) -> Vec<u8> {
    unsafe {
        let mut b = [0u8; 128];
        let mut len = b.len();
        let cm = &*(*s.ep).cm;
        assert_eq!(
            (cm.getname.unwrap())(&mut (*s.ep).fid, b.as_mut_ptr().cast(), &mut len),
            0
        );
        b[..len].to_vec()
    }
}

/// Inserts `name` into `s`'s AV: its `fi_addr_t`.
unsafe fn insert(s: &Side, name: &[u8]) -> u64 {
    unsafe {
        let aops = &*(*s.av).ops;
        let mut fa = 0u64;
        assert_eq!(
            (aops.insert.unwrap())(s.av, name.as_ptr().cast(), 1, &mut fa, 0, null_mut()),
            1
        );
        assert_ne!(fa, u64::MAX);
        fa
    }
}

/// Reads `s`'s CQ once (progress): the entries it had.
unsafe fn poll(s: &Side) -> Vec<fi_cq_msg_entry> {
    unsafe {
        let cops = &*(*s.cq).ops;
        let mut e = [fi_cq_msg_entry::default(); 4];
        let n = (cops.read.unwrap())(s.cq, e.as_mut_ptr().cast(), e.len());
        if n == -(FI_EAGAIN as isize) {
            return Vec::new();
        }
        assert!(n > 0, "fi_cq_read: {n}");
        e[..n as usize].to_vec()
    }
}

/// `len` bytes from `from` to `to` (`dest` in `from`'s AV), into a receive posted first:
/// both completions within 20 s and every byte.
unsafe fn message(from: &Side, to: &Side, dest: u64, len: usize, seed: u8) {
    unsafe { message_with(from, to, dest, len, seed, usize::MAX, || {}) }
}

/// [`message`], calling `mid` once, as soon as the receive buffer holds the message's
/// first `at` bytes while its completion has not come (never for an `at` past `len`).
unsafe fn message_with(
    from: &Side,
    to: &Side,
    dest: u64,
    len: usize,
    seed: u8,
    at: usize,
    mid: impl FnOnce(),
) {
    let mut mid = Some(mid);
    unsafe {
        let data: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        let mut rbuf = vec![0u8; len + 16];
        let (rctx, sctx) = (0x1000usize as *mut c_void, 0x2000usize as *mut c_void);
        let rm = &*(*to.ep).msg;
        assert_eq!(
            (rm.recv.unwrap())(to.ep, rbuf.as_mut_ptr().cast(), len, null_mut(), 0, rctx),
            0
        );
        let sm = &*(*from.ep).msg;
        assert_eq!(
            (sm.send.unwrap())(from.ep, data.as_ptr().cast(), len, null_mut(), dest, sctx),
            0
        );
        let (mut sent, mut got) = (false, None);
        let t0 = Instant::now();
        while !(sent && got.is_some()) && t0.elapsed() < Duration::from_secs(20) {
            if got.is_none() && at <= len && rbuf[..at] == data[..at] {
                if let Some(f) = mid.take() {
                    f();
                }
            }
            for e in poll(from) {
                assert_eq!(e.op_context, sctx);
                sent = true;
            }
            for e in poll(to) {
                assert_eq!(e.op_context, rctx);
                got = Some(e.len);
            }
        }
        assert!(sent, "no send completion");
        assert_eq!(got, Some(len), "the receive's completion");
        assert!(rbuf[..len] == data[..], "the bytes differ");
        assert!(
            rbuf[len..].iter().all(|&b| b == 0),
            "written past the message"
        );
    }
}

#[test]
fn endpoints_in_two_namespaces_exchange_messages_over_ipv6() {
    let test = "endpoints_in_two_namespaces_exchange_messages_over_ipv6";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip(test, "needs root (network namespaces)");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return skip(test, "ip not installed (apt-get install iproute2)");
    }
    let _env = env_lock();
    let pair = Pair::new();
    unsafe {
        // fi_getinfo: a namespace that does not exist, an address the namespace lacks.
        env(Some("mrc-no-such-namespace"), Some(A));
        assert_eq!(getinfo().0, neg(FI_EINVAL));
        env(Some(&pair.a), Some(B));
        assert_eq!(getinfo().0, neg(FI_EADDRNOTAVAIL));
        env(Some(&pair.a), Some("not an address"));
        assert_eq!(getinfo().0, neg(FI_EINVAL));

        env(Some(&pair.a), Some(A));
        let (r, info_a) = getinfo();
        assert_eq!(r, 0);
        env(Some(&pair.b), Some(B));
        let (r, info_b) = getinfo();
        assert_eq!(r, 0);
        let prov = &*mrc_fi::fi_prov_ini();
        let mut fabric: *mut fid_fabric = null_mut();
        assert_eq!(
            (prov.fabric.unwrap())((*info_a).fabric_attr, &mut fabric, null_mut()),
            0
        );
        let mut domain: *mut fid_domain = null_mut();
        assert_eq!(
            ((*(*fabric).ops).domain.unwrap())(fabric, info_a, &mut domain, null_mut()),
            0
        );
        let dops = &*(*domain).ops;
        // fi_endpoint: the namespace gone since fi_getinfo, an info whose address is not
        // the namespace's, and an address of a namespace the endpoint is not put in.
        let mut ep: *mut fid_ep = null_mut();
        env(Some("mrc-no-such-namespace"), None);
        assert_eq!(
            (dops.endpoint.unwrap())(domain, info_a, &mut ep, null_mut()),
            neg(FI_EINVAL)
        );
        env(Some(&pair.a), None);
        assert_eq!(
            (dops.endpoint.unwrap())(domain, info_b, &mut ep, null_mut()),
            neg(FI_EADDRNOTAVAIL)
        );
        env(None, None);
        assert_eq!(
            (dops.endpoint.unwrap())(domain, info_a, &mut ep, null_mut()),
            neg(FI_EADDRNOTAVAIL)
        );
        assert!(ep.is_null());

        // One endpoint in each namespace: the name carries the namespace's address.
        env(Some(&pair.a), None);
        let a = side(domain, info_a);
        env(Some(&pair.b), None);
        let b = side(domain, info_b);
        env(None, None);
        mrc_fi::free_info(info_a);
        mrc_fi::free_info(info_b);
        let (na, nb) = (name(&a), name(&b));
        for (n, want) in [(&na, A), (&nb, B)] {
            assert_eq!(n.len(), mrc_fi::ADDR_LEN);
            assert_eq!(n[5], 6, "an IPv6 address");
            let ip: [u8; 16] = n[8..24].try_into().unwrap();
            assert_eq!(Ipv6Addr::from(ip), want.parse::<Ipv6Addr>().unwrap());
        }
        let b_in_a = insert(&a, &nb);
        let a_in_b = insert(&b, &na);
        let before = Pair::rx_bytes(&pair.b);
        // Past one staging slot (fragments) one way, a small message back.
        message(&a, &b, b_in_a, (1 << 20) + 4099, 7);
        message(&b, &a, a_in_b, 100, 9);
        let carried = Pair::rx_bytes(&pair.b) - before;
        assert!(
            carried >= (1 << 20) + 4099,
            "b's eth0 received {carried} bytes"
        );

        // FI_MRC_MTU: a value that is no payload size in 64..=65000 is -FI_EINVAL at
        // fi_getinfo, and at fi_endpoint for an info got before it was set.
        env(Some(&pair.a), Some(A));
        for bad in ["0", "63", "65001", "4096x", "-1", "99999999999", "mtu"] {
            env_mtu(Some(bad));
            assert_eq!(getinfo().0, neg(FI_EINVAL), "FI_MRC_MTU={bad}");
        }
        env_mtu(Some(" "));
        let (r, info_c) = getinfo();
        assert_eq!(r, 0, "an empty FI_MRC_MTU is unset");
        env_mtu(Some("65001"));
        let mut ep: *mut fid_ep = null_mut();
        assert_eq!(
            (dops.endpoint.unwrap())(domain, info_c, &mut ep, null_mut()),
            neg(FI_EINVAL)
        );
        assert!(ep.is_null());

        // Each end sends at its own payload size and takes the other's: c in a at
        // FI_MRC_MTU=1024, d in b at the one its interface gives (a 9000-byte MTU:
        // 9000 - 40 - 8 - 56 = 8896 bytes of payload).
        for ns in [&pair.a, &pair.b] {
            ip(&["-n", ns, "link", "set", "eth0", "mtu", "9000"]);
        }
        env_mtu(Some("1024"));
        let c = side(domain, info_c);
        env_mtu(None);
        env(Some(&pair.b), Some(B));
        let (r, info_d) = getinfo();
        assert_eq!(r, 0);
        let d = side(domain, info_d);
        env(None, None);
        mrc_fi::free_info(info_c);
        mrc_fi::free_info(info_d);
        let d_in_c = insert(&c, &name(&d));
        let c_in_d = insert(&d, &name(&c));
        let len = (1 << 20) + 3;
        let before = Pair::stat(&pair.b, "rx_packets");
        message(&c, &d, d_in_c, len, 11);
        let at_b = Pair::stat(&pair.b, "rx_packets") - before;
        // 1025 data packets of at most 1024 bytes (and the set-up's datagrams, any
        // resend): at least that many reached b.
        assert!(at_b >= 1025, "b's eth0 received {at_b} packets");
        let before = Pair::stat(&pair.a, "rx_packets");
        message(&d, &c, c_in_d, len, 13);
        let at_a = Pair::stat(&pair.a, "rx_packets") - before;
        // 118 data packets of 8896 bytes; at 4096 (the transport's default) it would
        // have been 257, at 1024 1025. The rest: c's SACKs for d's data arrive at b, not
        // here; a resend or a probe from d at most a few.
        assert!(
            (118..257).contains(&at_a),
            "a's eth0 received {at_a} packets"
        );
        for s in [a, b, c, d] {
            assert_eq!(((*(*s.ep).fid.ops).close.unwrap())(&mut (*s.ep).fid), 0);
            assert_eq!(((*(*s.cq).fid.ops).close.unwrap())(&mut (*s.cq).fid), 0);
            assert_eq!(((*(*s.av).fid.ops).close.unwrap())(&mut (*s.av).fid), 0);
        }
        assert_eq!(((*(*domain).fid.ops).close.unwrap())(&mut (*domain).fid), 0);
        assert_eq!(((*(*fabric).fid.ops).close.unwrap())(&mut (*fabric).fid), 0);
    }
    drop(pair);
}

/// Two namespaces `NAME-a` and `NAME-b` joined by two veth pairs, one per plane: `eth0`
/// (plane 0: [`A0`], [`B0`]) and `eth1` (plane 1: [`A1`], [`B1`]), IPv6; deleted when
/// dropped.
struct Planes {
    a: String,
    b: String,
}

/// Namespace `a`'s plane 0 address.
const A0: &str = "fd00:6d72:68::1";
/// Namespace `a`'s plane 1 address.
const A1: &str = "fd00:6d72:69::1";
/// Namespace `b`'s plane 0 address.
const B0: &str = "fd00:6d72:68::2";
/// Namespace `b`'s plane 1 address.
const B1: &str = "fd00:6d72:69::2";

impl Planes {
    /// The namespaces, their names made of `tag` and this process's id.
    fn new(tag: &str) -> Planes {
        let base = format!("mrc{tag}{}", std::process::id());
        let p = Planes {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
        };
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        for dev in ["eth0", "eth1"] {
            ip(&[
                "-n", &p.a, "link", "add", dev, "type", "veth", "peer", "name", dev, "netns", &p.b,
            ]);
        }
        for (ns, addrs) in [(&p.a, [A0, A1]), (&p.b, [B0, B1])] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            for (dev, addr) in ["eth0", "eth1"].into_iter().zip(addrs) {
                let cidr = format!("{addr}/64");
                ip(&["-n", ns, "addr", "add", &cidr, "dev", dev, "nodad"]);
                ip(&["-n", ns, "link", "set", dev, "up"]);
            }
        }
        p
    }

    /// Counter `name` of namespace `ns`'s interface `dev`.
    fn stat(ns: &str, dev: &str, name: &str) -> u64 {
        if_stat(ns, dev, name)
    }

    /// Bytes namespace `ns` has sent on `eth0` and `eth1`.
    fn tx(ns: &str) -> [u64; 2] {
        [
            Planes::stat(ns, "eth0", "tx_bytes"),
            Planes::stat(ns, "eth1", "tx_bytes"),
        ]
    }
}

impl Drop for Planes {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Closes the endpoints, the domain and the fabric.
unsafe fn close_all(sides: Vec<Side>, domain: *mut fid_domain, fabric: *mut fid_fabric) {
    unsafe {
        for s in sides {
            assert_eq!(((*(*s.ep).fid.ops).close.unwrap())(&mut (*s.ep).fid), 0);
            assert_eq!(((*(*s.cq).fid.ops).close.unwrap())(&mut (*s.cq).fid), 0);
            assert_eq!(((*(*s.av).fid.ops).close.unwrap())(&mut (*s.av).fid), 0);
        }
        assert_eq!(((*(*domain).fid.ops).close.unwrap())(&mut (*domain).fid), 0);
        assert_eq!(((*(*fabric).fid.ops).close.unwrap())(&mut (*fabric).fid), 0);
    }
}

/// The fabric and domain of `info`.
unsafe fn open_domain(info: *mut fi_info) -> (*mut fid_fabric, *mut fid_domain) {
    unsafe {
        let prov = &*mrc_fi::fi_prov_ini();
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
        (fabric, domain)
    }
}

/// Whether the interface checks of these tests can run: root and `ip`.
fn can_run(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(test, "needs root (network namespaces)");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        skip(test, "ip not installed (apt-get install iproute2)");
        return false;
    }
    true
}

/// `len` bytes `from` to `to` as [`message`] does, with the bytes `from_ns` sent on each
/// plane's interface meanwhile.
unsafe fn message_on_planes(
    from: &Side,
    to: &Side,
    dest: u64,
    len: usize,
    seed: u8,
    from_ns: &str,
) -> [u64; 2] {
    let before = Planes::tx(from_ns);
    unsafe { message(from, to, dest, len, seed) };
    let after = Planes::tx(from_ns);
    [after[0] - before[0], after[1] - before[1]]
}

#[test]
fn endpoints_on_two_planes_spray_over_both_and_go_on_when_one_goes_down() {
    let test = "endpoints_on_two_planes_spray_over_both_and_go_on_when_one_goes_down";
    if !can_run(test) {
        return;
    }
    let _env = env_lock();
    let net = Planes::new("fp");
    let planes_a = format!("{A0},{A1}");
    let planes_b = format!("{B0}, {B1}");
    unsafe {
        // fi_getinfo: lists refused (-FI_EINVAL), an address that cannot be bound in the
        // namespace (-FI_EADDRNOTAVAIL: b's plane 1 address, in a).
        env(Some(&net.a), None);
        for bad in [
            A0.to_string(),
            format!("{A0},10.0.0.1"),
            format!("{A0},{A0}"),
            format!("{A0},x"),
        ] {
            env_planes(Some(&bad));
            assert_eq!(getinfo().0, neg(FI_EINVAL), "FI_MRC_PLANES={bad}");
        }
        env_planes(Some(&format!("{A0},{B1}")));
        assert_eq!(getinfo().0, neg(FI_EADDRNOTAVAIL));
        // FI_MRC_ADDR: plane 1's is refused, plane 0's is the same as leaving it out.
        env_planes(Some(&planes_a));
        env(Some(&net.a), Some(A1));
        assert_eq!(getinfo().0, neg(FI_EINVAL));
        env(Some(&net.a), Some(A0));
        let (r, info_a) = getinfo();
        assert_eq!(r, 0);
        env(Some(&net.a), None);
        let (r, info_a2) = getinfo();
        assert_eq!(r, 0);
        let src = |i: *mut fi_info| {
            std::slice::from_raw_parts((*i).src_addr.cast::<u8>(), (*i).src_addrlen).to_vec()
        };
        assert_eq!(
            src(info_a),
            src(info_a2),
            "FI_MRC_ADDR=plane 0 changes nothing"
        );
        assert_eq!(src(info_a)[57], 2, "the source address states 2 planes");
        mrc_fi::free_info(info_a2);
        env(Some(&net.b), None);
        env_planes(Some(&planes_b));
        let (r, info_b) = getinfo();
        assert_eq!(r, 0);
        let (fabric, domain) = open_domain(info_a);
        let dops = &*(*domain).ops;
        // fi_endpoint: a plane address the namespace lacks, and a list whose plane 0 is
        // not the info's source address.
        let mut ep: *mut fid_ep = null_mut();
        env(Some(&net.a), None);
        env_planes(Some(&format!("{A0},{B1}")));
        assert_eq!(
            (dops.endpoint.unwrap())(domain, info_a, &mut ep, null_mut()),
            neg(FI_EADDRNOTAVAIL)
        );
        env_planes(Some(&format!("{A1},{A0}")));
        assert_eq!(
            (dops.endpoint.unwrap())(domain, info_a, &mut ep, null_mut()),
            neg(FI_EINVAL)
        );
        assert!(ep.is_null());

        env_planes(Some(&planes_a));
        let a = side(domain, info_a);
        env(Some(&net.b), None);
        env_planes(Some(&planes_b));
        let b = side(domain, info_b);
        env(None, None);
        env_planes(None);
        mrc_fi::free_info(info_a);
        mrc_fi::free_info(info_b);
        let (na, nb) = (name(&a), name(&b));
        for (n, want) in [(&na, A0), (&nb, B0)] {
            assert_eq!(n.len(), mrc_fi::ADDR_LEN);
            assert_eq!(n.len(), 60, "a name fits FI_NAME_MAX (64)");
            assert_eq!(n[5], 6, "an IPv6 address");
            let ip: [u8; 16] = n[8..24].try_into().unwrap();
            assert_eq!(Ipv6Addr::from(ip), want.parse::<Ipv6Addr>().unwrap());
            assert_eq!(n[57..], [2, 0, 0], "2 planes, then reserved bytes");
        }
        let b_in_a = insert(&a, &nb);
        let a_in_b = insert(&b, &na);

        // Both planes up: each carries at least a quarter of each direction's bytes.
        let len_ab = (1 << 20) + 4099;
        let len_ba = (1 << 20) + 1001;
        for (from, to, dest, len, seed, ns) in [
            (&a, &b, b_in_a, len_ab, 3, &net.a),
            (&b, &a, a_in_b, len_ba, 5, &net.b),
        ] {
            let [p0, p1] = message_on_planes(from, to, dest, len, seed, ns);
            let total = p0 + p1;
            assert!(total >= len as u64, "{ns} sent {p0} + {p1} bytes for {len}");
            assert!(
                p0 * 4 >= total && p1 * 4 >= total,
                "{ns}: plane 0 carried {p0} bytes, plane 1 {p1}: each at least 25%"
            );
        }

        // Plane 1's link down in the middle of a message (a's end; b's loses its
        // carrier): 8 MiB + 5 bytes from a, the link set down once the receiver holds its
        // first 2 MiB and before the message completed; every byte arrives.
        let len = (8 << 20) + 5;
        let before = Planes::stat(&net.b, "eth0", "rx_bytes");
        let mut downed = false;
        message_with(&a, &b, b_in_a, len, 15, 2 << 20, || {
            ip(&["-n", &net.a, "link", "set", "eth1", "down"]);
            downed = true;
        });
        assert!(
            downed,
            "the link went down while the message was on its way"
        );
        let p0 = Planes::stat(&net.b, "eth0", "rx_bytes") - before;
        assert!(p0 >= 2 << 20, "plane 0 carried {p0} bytes of the 8 MiB + 5");
        // The next messages each way on plane 0 alone, every byte: plane 1 sends nothing.
        let len = (1 << 20) + 3;
        for (from, to, dest, seed, ns) in [(&a, &b, b_in_a, 7, &net.a), (&b, &a, a_in_b, 9, &net.b)]
        {
            let [p0, p1] = message_on_planes(from, to, dest, len, seed, ns);
            assert!(
                p0 >= len as u64,
                "{ns} sent {p0} bytes on plane 0 for a {len}-byte message"
            );
            assert_eq!(p1, 0, "{ns} sent on plane 1, which is down");
        }
        close_all(vec![a, b], domain, fabric);
    }
    drop(net);
}

/// `fi_send` of 8 bytes from `s` to `dest`: the provider's answer.
unsafe fn send8(s: &Side, dest: u64, ctx: usize) -> isize {
    unsafe {
        let sm = &*(*s.ep).msg;
        let data = [0x5au8; 8];
        (sm.send.unwrap())(
            s.ep,
            data.as_ptr().cast(),
            8,
            null_mut(),
            dest,
            ctx as *mut c_void,
        )
    }
}

#[test]
fn a_peer_on_another_number_of_planes_is_refused_within_seconds() {
    let test = "a_peer_on_another_number_of_planes_is_refused_within_seconds";
    if !can_run(test) {
        return;
    }
    let _env = env_lock();
    let net = Planes::new("fq");
    unsafe {
        // x on two planes in a, y on one in b (plane 0's veth).
        env(Some(&net.a), None);
        env_planes(Some(&format!("{A0},{A1}")));
        let (r, info_x) = getinfo();
        assert_eq!(r, 0);
        let (fabric, domain) = open_domain(info_x);
        let x = side(domain, info_x);
        env_planes(None);
        env(Some(&net.b), Some(B0));
        let (r, info_y) = getinfo();
        assert_eq!(r, 0);
        let y = side(domain, info_y);
        env(None, None);
        mrc_fi::free_info(info_x);
        mrc_fi::free_info(info_y);
        let (nx, ny) = (name(&x), name(&y));
        assert_eq!((nx[57], ny[57]), (2, 0));
        let y_in_x = insert(&x, &ny);
        let x_in_y = insert(&y, &nx);
        // Each end sees the other's count in its name: every post is refused at once,
        // before any set-up, and nothing reaches a CQ.
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(send8(&x, y_in_x, 1), neg(FI_EADDRNOTAVAIL) as isize);
            assert_eq!(send8(&y, x_in_y, 2), neg(FI_EADDRNOTAVAIL) as isize);
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        assert!(poll(&x).is_empty() && poll(&y).is_empty());

        // A name whose count was changed to one (byte 57 = 0): y's set-up starts, and
        // the addresses x sends in it (two planes) end it: the send completes with an
        // FI_EADDRNOTAVAIL error entry within seconds, and the next post says it again.
        let mut forged = nx.clone();
        forged[57] = 0;
        let forged_in_y = insert(&y, &forged);
        assert_eq!(send8(&y, forged_in_y, 0x77), 0);
        let t0 = Instant::now();
        let mut err = None;
        while err.is_none() && t0.elapsed() < Duration::from_secs(10) {
            assert!(poll(&x).is_empty());
            let cops = &*(*y.cq).ops;
            let mut e = [fi_cq_msg_entry::default(); 4];
            let n = (cops.read.unwrap())(y.cq, e.as_mut_ptr().cast(), e.len());
            if n == neg(FI_EAVAIL) as isize {
                let mut ee = fi_cq_err_entry::default();
                assert_eq!((cops.readerr.unwrap())(y.cq, &mut ee, 0), 1);
                err = Some(ee);
            } else {
                assert_eq!(n, neg(FI_EAGAIN) as isize, "no entry but the error");
            }
        }
        let waited = t0.elapsed();
        let e = err.expect("an error entry within 10 s");
        assert!(waited < Duration::from_secs(5), "the error took {waited:?}");
        assert_eq!(e.err, FI_EADDRNOTAVAIL as c_int);
        assert_eq!(e.op_context as usize, 0x77);
        assert_eq!(e.len, 8);
        assert_eq!(send8(&y, forged_in_y, 0x78), neg(FI_EADDRNOTAVAIL) as isize);
        close_all(vec![x, y], domain, fabric);
    }
    drop(net);
}
