//! A listener whose process runs out of descriptors (strangers holding the handshake
//! slots of many listeners can exhaust them: 256 per listener against a soft limit of
//! 1024): `accept(2)` fails with `EMFILE`, the listener defers the waiting connections
//! instead of reporting an error (the NCCL plugin turned that into `ncclSystemError`
//! from `accept`, which aborts the communicator), and serves them once descriptors are
//! free again. Its own test binary: it lowers `RLIMIT_NOFILE` for the whole process.

use mrc_fabric::engine::{EngineConfig, QpConfig, SetupStats, Worker};
use mrc_fabric::udp::{PortAllocator, UdpConfig};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Descriptors open now (the listing's own, open while it is read, not counted).
fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1
}

fn set_nofile(soft: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    r.rlim_cur = soft.min(r.rlim_max);
    // SAFETY: a valid rlimit, the soft limit at most the hard one.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
}

#[test]
fn out_of_descriptors_the_listener_defers_accepts_and_serves_them_later() {
    let udp = |range| {
        let mut u = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
        u.ports = PortAllocator::new(range).unwrap();
        u.rx_slots = 8;
        u
    };
    let mut a = Worker::new(udp(19950..=19974), EngineConfig::default()).unwrap();
    let mut b = Worker::new(udp(19975..=19999), EngineConfig::default()).unwrap();
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let mut saved = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out pointer.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut saved) },
        0
    );
    // The peer's connect is under way (its socket open, its SYN answered by the kernel:
    // the connection waits in the listener's backlog) before the limit drops.
    let cid = b.connect_start(&handle, QpConfig::default()).unwrap();
    let strays: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(handle.addr()).unwrap())
        .collect();
    for _ in 0..20 {
        assert_eq!(b.poll_connect(cid).unwrap(), None);
        std::thread::sleep(Duration::from_millis(1));
    }
    // No descriptor left for the listener's accept.
    set_nofile(open_fds());
    // (Only the listener is polled meanwhile: the connecting worker would need
    // descriptors too, for its EV sockets.)
    for _ in 0..50 {
        assert!(
            a.poll_accept(lid).is_none(),
            "accept reported an error or a peer"
        );
    }
    // One deferred pass per poll, nothing accepted, nothing dropped.
    let deferred = 50;
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            accept_deferred: deferred,
            ..SetupStats::default()
        }
    );
    // Descriptors again: the waiting peer is accepted and connects.
    set_nofile(saved.rlim_cur);
    let t0 = Instant::now();
    let (mut cq, mut sq) = (None, None);
    while cq.is_none() || sq.is_none() {
        if cq.is_none() {
            cq = b.poll_connect(cid).unwrap();
        }
        if sq.is_none() {
            sq = a.poll_accept(lid).map(Result::unwrap);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{:?}",
            a.setup_stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(a.peer_info(sq.unwrap()).unwrap().qpn, cq.unwrap());
    assert_eq!(
        (a.setup_stats().accepted, a.setup_stats().accept_deferred),
        (1, deferred)
    );
    drop(strays);
}
