//! Two planes on a real kernel, in a network namespace this test makes for itself (its
//! thread `unshare`s one; it goes away with the thread): each end has one interface per
//! plane (one end of a veth pair), each with the end's address on that plane. Taking one end's plane-1
//! interface down takes plane 1 out of its connection at once (the datapath's plane watch,
//! `Connection::set_local_plane`) and the peer out of sending on it (the Port Status
//! Update); setting it up brings the plane back in both. Needs root (CI runs as root);
//! elsewhere a `SKIPPED:` line.

mod engine_common;

use engine_common::PatternWrites;
use mrc_fabric::engine::{Context, EngineConfig, Qp, QpConfig, QpStats};
use mrc_fabric::udp::{PortAllocator, UdpConfig};
use mrc_transport::completion::WcStatus;
use mrc_transport::path::{PlaneDownCause, PlaneState};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

/// Runs `ip ARGS` (in this thread's namespace: the child inherits it); panics on failure.
fn ip(args: &str) {
    let o = Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .expect("run ip");
    assert!(
        o.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs each of `cmds` with `nft` (in this thread's namespace); panics on failure.
fn nft(cmds: &[&str]) {
    for c in cmds {
        let o = Command::new("nft")
            .args(c.split_whitespace())
            .output()
            .expect("run nft");
        assert!(
            o.status.success(),
            "nft {c}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

fn skip(why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("planes_netns")
        .to_string();
    let line = format!("SKIPPED: {test}: {why}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

fn ctx(planes: [&str; 2], range: std::ops::RangeInclusive<u16>) -> Context {
    let mut u = UdpConfig::bind(format!("{}:0", planes[0]).parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    u.plane_ips = planes.iter().map(|p| p.parse().unwrap()).collect();
    Context::new(u, EngineConfig::default()).unwrap()
}

/// Waits (bounded by `T`) until `f` holds for `q`'s stats; returns them.
fn until(q: &Qp, what: &str, f: impl Fn(&QpStats) -> bool) -> QpStats {
    let t = Instant::now();
    loop {
        let (s, _) = q.stats().unwrap();
        if f(&s) {
            return s;
        }
        assert!(t.elapsed() < T, "{what}: planes {:?}", s.planes);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Packets sent on each plane (the sums of the EVs').
fn per_plane_sent(s: &QpStats) -> [u64; 2] {
    let mut out = [0u64; 2];
    for ((_, _, e), p) in s.evs.iter().zip(&s.ev_planes) {
        out[usize::from(*p)] += e.sent;
    }
    out
}

/// Where the verified writes from A to B stand: messages posted, completed at A,
/// received at B (each consumes one posted receive, reposted at once).
#[derive(Default)]
struct Flow {
    posted: u64,
    done: u64,
    received: u64,
}

impl Flow {
    /// Sends `n` more verified 64 KiB writes from `qa` to `qb` and waits for all of them
    /// at both ends.
    fn write(&mut self, qa: &Qp, qb: &Qp, w: &PatternWrites, n: u64) {
        let target = self.done + n;
        while self.done < target || self.received < target {
            w.post(qa, target, &mut self.posted, self.done);
            if self.done < target {
                let c = qa
                    .wait_send_cq(T)
                    .unwrap()
                    .expect("a send completion within 10 s");
                assert_eq!(c.status, WcStatus::Success);
                self.done += 1;
            }
            let mut got = Vec::new();
            qb.poll_recv_cq(&mut got, usize::MAX);
            for c in got {
                assert_eq!(c.status, WcStatus::Success);
                self.received += 1;
                qb.post_recv(self.received, w.recv_sge()).unwrap();
            }
            if self.done >= target && self.received < target {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

#[test]
fn a_local_port_down_takes_its_plane_out_at_both_ends_and_up_brings_it_back() {
    if unsafe { libc::geteuid() } != 0 {
        skip("needs root (a network namespace and veth interfaces)");
        return;
    }
    // The whole test on one thread in its own network namespace (threads it spawns, the
    // engines and the plane watches, inherit it).
    let h = std::thread::Builder::new()
        .name("a_local_port_down_takes_its_plane_out_at_both_ends_and_up_brings_it_back".into())
        .spawn(|| {
            // SAFETY: unshare on this thread only; nothing else runs on it.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
            ip("link set lo up");
            for (dev, addr) in [
                ("pa0", "10.9.0.1/24"),
                ("pa1", "10.9.1.1/24"),
                ("pb0", "10.9.0.2/24"),
                ("pb1", "10.9.1.2/24"),
            ] {
                // A veth pair whose other end holds no address (this kernel may lack
                // the dummy driver): `dev` runs while both ends are up.
                ip(&format!("link add {dev} type veth peer name x{dev}"));
                ip(&format!("addr add {addr} dev {dev}"));
                ip(&format!("link set x{dev} up"));
                ip(&format!("link set {dev} up"));
            }
            run();
        })
        .unwrap();
    h.join().unwrap();
}

fn run() {
    let ca = ctx(["10.9.0.1", "10.9.1.1"], 27300..=27349);
    let cb = ctx(["10.9.0.2", "10.9.1.2"], 27350..=27399);
    let listener = TcpListener::bind("10.9.0.2:0").unwrap();
    let server = listener.local_addr().unwrap();
    let qa = ca.create_qp(QpConfig::default()).unwrap();
    let qb = cb.create_qp(QpConfig::default()).unwrap();
    let w = PatternWrites::new(&qa, &qb, 64 * 1024, 4, 11);
    let accept = std::thread::spawn(move || {
        let c = qb.accept(&listener, T).unwrap();
        (qb, c)
    });
    // The client's TCP leaves from its plane-0 address (the server finds it among the
    // client's plane addresses).
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new("10.9.0.1".parse::<IpAddr>().unwrap(), 0).into())
        .unwrap();
    s.connect(&server.into()).unwrap();
    qa.connect_on(s.into(), T).unwrap();
    let (qb, _) = accept.join().unwrap();
    w.set_verify(&qb);
    for i in 0..8 {
        qb.post_recv(i, w.recv_sge()).unwrap();
    }
    let mut flow = Flow::default();
    flow.write(&qa, &qb, &w, 20);
    let s0 = until(&qa, "both planes carry data", |s| {
        per_plane_sent(s).iter().all(|&n| n > 0)
    });
    assert_eq!(s0.planes.len(), 2);
    // A's plane-1 port goes down. In one namespace the kernel still delivers to a local
    // address whatever its interface's state; the drop rules stand for the dead port's
    // wire: nothing reaches 10.9.1.1 or leaves it. The wire dies first: with the link
    // set down first, A's watch reported the port down and B, told so, probed plane 1
    // before the rules stood, got its answer and brought the plane back (3 runs of 16
    // under load).
    nft(&[
        "add table inet mrcpw",
        "add chain inet mrcpw in { type filter hook input priority 0 ; }",
        "add chain inet mrcpw out { type filter hook output priority 0 ; }",
        "add rule inet mrcpw in ip daddr 10.9.1.1 drop",
        "add rule inet mrcpw out ip saddr 10.9.1.1 drop",
    ]);
    ip("link set pa1 down");
    let sa = until(&qa, "A's plane 1 down by its local port", |s| {
        s.planes[1].0 == PlaneState::Down(PlaneDownCause::Local)
    });
    assert_eq!(sa.planes[0].0, PlaneState::Up);
    let sb = until(&qb, "B's plane 1 down by A's Port Status Update", |s| {
        s.planes[1].0 == PlaneState::Down(PlaneDownCause::PeerReport)
    });
    assert!(sb.conn.psu_received >= 1, "{:?}", sb.conn);
    let sa = until(&qa, "B acknowledged the update", |s| s.conn.psu_acked >= 1);
    assert!(sa.conn.psu_sent >= 1);
    // While it is down every packet goes on plane 0: A's plane-1 EVs send nothing more.
    let before = per_plane_sent(&sa);
    flow.write(&qa, &qb, &w, 20);
    let after = per_plane_sent(&qa.stats().unwrap().0);
    assert_eq!(
        after[1], before[1],
        "plane 1 carried data while its port was down"
    );
    assert!(after[0] >= before[0] + 20 * 16, "{before:?} -> {after:?}");
    // Up again: A's plane back, B's back once A's update says so and a probe answers.
    nft(&["delete table inet mrcpw"]);
    ip("link set pa1 up");
    until(&qa, "A's plane 1 up", |s| s.planes[1].0 == PlaneState::Up);
    until(&qb, "B's plane 1 up", |s| s.planes[1].0 == PlaneState::Up);
    let before = per_plane_sent(&qa.stats().unwrap().0);
    flow.write(&qa, &qb, &w, 40);
    let after = per_plane_sent(&qa.stats().unwrap().0);
    assert!(
        after[1] > before[1],
        "plane 1 idle after it came back: {before:?} -> {after:?}"
    );
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.verify.checked_messages, 80);
    assert_eq!(sb.source_drops.total(), 0);
    let (sa, _) = qa.stats().unwrap();
    assert_eq!(sa.planes[1].1.downs_local, 1, "A: {:?}", sa.planes);
    assert_eq!(sa.planes[1].1.ups, 1, "A: {:?}", sa.planes);
    assert_eq!(sb.planes[1].1.downs_by_peer, 1, "B: {:?}", sb.planes);
}
