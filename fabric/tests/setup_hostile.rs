//! A worker's listener (the TCP bootstrap behind `Worker::listen`, which the NCCL plugin
//! and caller-progress users expose) under strangers on loopback: more silent
//! connections than it holds handshakes for ([`MAX_ACCEPTS_IN_FLIGHT`]), a slowloris that
//! sends a plausible nonce one byte at a time, and a real peer arriving meanwhile. The real
//! peer connects at once, the strangers end by their deadline (or are evicted when the
//! listener is full), every one counted exactly, and the listener keeps serving.

use mrc_fabric::engine::setup::MAX_ACCEPTS_IN_FLIGHT;
use mrc_fabric::engine::{ConnHandle, EngineConfig, QpConfig, SetupStats, Worker};
use mrc_fabric::udp::{PortAllocator, UdpConfig, UringDatapath};
use std::io::Write;
use std::net::TcpStream;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

fn worker(range: RangeInclusive<u16>) -> Worker<UringDatapath> {
    let mut u = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    u.rx_slots = 8;
    Worker::new(u, EngineConfig::default()).unwrap()
}

/// Connects `b` to `a`'s listener, alternating polls on this thread; returns how long it
/// took (failing after 10 s).
fn connect(
    b: &mut Worker<UringDatapath>,
    a: &mut Worker<UringDatapath>,
    lid: mrc_fabric::engine::ListenerId,
    h: &ConnHandle,
) -> Duration {
    let t0 = Instant::now();
    let cid = b.connect_start(h, QpConfig::default()).unwrap();
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
            "no connection in 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    t0.elapsed()
}

#[test]
fn a_full_listener_evicts_the_oldest_stranger_and_serves_a_real_peer_at_once() {
    const DEADLINE: Duration = Duration::from_millis(3000);
    const STRAYS: usize = MAX_ACCEPTS_IN_FLIGHT + 44;
    let mut a = worker(19600..=19649);
    let mut b = worker(19650..=19699);
    a.set_setup_timeout(DEADLINE);
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let addr = handle.addr();
    // Silent strangers, 100 at a time (the kernel's accept backlog is 128), each batch
    // taken by a pass of the listener; then a slowloris.
    let mut strays = Vec::new();
    while strays.len() < STRAYS {
        let n = (STRAYS - strays.len()).min(100);
        for _ in 0..n {
            strays.push(TcpStream::connect(addr).unwrap());
        }
        for _ in 0..3 {
            assert!(a.poll_accept(lid).is_none());
        }
    }
    let t_slow = Instant::now();
    let slow = std::thread::spawn(move || {
        // A nonce as a real peer sends it (36 bytes), one byte every 150 ms: 5.4 s,
        // past the listener's 3 s deadline, which no byte extends.
        let mut s = TcpStream::connect(addr).unwrap();
        let mut msg = b"MRCN".to_vec();
        msg.extend_from_slice(&[0x42; 32]);
        for b in msg {
            if s.write_all(&[b]).is_err() {
                return true; // the listener dropped it
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        false
    });
    // The real peer, while every handshake slot is held by a stranger.
    let took = connect(&mut b, &mut a, lid, &handle);
    assert!(
        took < Duration::from_millis(1500),
        "the real peer waited {took:?} behind the strangers (deadline {DEADLINE:?})"
    );
    // 256 slots: the 44 strays beyond them, the slowloris and the real peer each took
    // the slot of the oldest stranger that had not proved the secret.
    let s = a.setup_stats();
    assert_eq!((s.accepted, s.rejected_crowded), (1, 44 + 2), "{s:?}");
    // The rest end at their deadline, the slowloris with them.
    let t0 = Instant::now();
    while a.setup_stats().rejected_timeout < (STRAYS + 1 - 46) as u64 {
        assert!(a.poll_accept(lid).is_none());
        assert!(
            t0.elapsed() < DEADLINE + Duration::from_secs(5),
            "{:?}",
            a.setup_stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(slow.join().unwrap(), "the slowloris was never dropped");
    assert!(
        t_slow.elapsed() < Duration::from_millis(5400),
        "{:?}",
        t_slow.elapsed()
    );
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            accepted: 1,
            rejected_crowded: 46,
            rejected_timeout: (STRAYS + 1 - 46) as u64,
            ..SetupStats::default()
        }
    );
    drop(strays);
    // Still serving.
    let took = connect(&mut b, &mut a, lid, &handle);
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(a.setup_stats().accepted, 2);
}

/// What a connecting worker meets at a "listener" that is not one (a handle naming the
/// wrong port, or a stranger who took it): a flood of garbage, a right nonce and a
/// wrong confirmation, a nonce trickled one byte every 100 ms. Each attempt ends in a
/// typed error, by the deadline at the latest, and no poll blocks.
#[test]
fn a_connecting_worker_refuses_a_hostile_listener_within_its_deadline() {
    use mrc_fabric::engine::EngineError;
    use mrc_fabric::engine::bootstrap::BootstrapError;
    use std::net::TcpListener;
    const DEADLINE: Duration = Duration::from_millis(1500);
    let mut b = worker(19700..=19749);
    b.set_setup_timeout(DEADLINE);
    let mut real = worker(19750..=19799);
    let (_, handle) = real.listen(QpConfig::default()).unwrap();
    // One fake listener per behaviour, each serving one connection on its own thread.
    let fake = |behave: fn(TcpStream)| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            behave(s);
        });
        let mut bytes = handle.to_bytes();
        bytes[6..8].copy_from_slice(&port.to_be_bytes());
        (ConnHandle::from_bytes(&bytes).unwrap(), t)
    };
    fn flood(mut s: TcpStream) {
        let junk = vec![0x5au8; 64 * 1024];
        for _ in 0..64 {
            if s.write_all(&junk).is_err() {
                return;
            }
        }
    }
    fn wrong_confirm(mut s: TcpStream) {
        let mut m = b"MRCN".to_vec();
        m.extend_from_slice(&[0x11; 32]);
        m.extend_from_slice(b"MRCK");
        m.extend_from_slice(&[0x22; 32]);
        let _ = s.write_all(&m);
        std::thread::sleep(Duration::from_millis(2500));
    }
    fn trickle(mut s: TcpStream) {
        let mut m = b"MRCN".to_vec();
        m.extend_from_slice(&[0x33; 32]);
        for byte in m {
            if s.write_all(&[byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut outcomes = Vec::new();
    for behave in [flood as fn(TcpStream), wrong_confirm, trickle] {
        let (h, t) = fake(behave);
        let t0 = Instant::now();
        let cid = b.connect_start(&h, QpConfig::default()).unwrap();
        let mut longest = Duration::ZERO;
        let r = loop {
            let p = Instant::now();
            let r = b.poll_connect(cid);
            longest = longest.max(p.elapsed());
            match r {
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                other => break other,
            }
            assert!(t0.elapsed() < DEADLINE + Duration::from_secs(3), "no end");
        };
        let took = t0.elapsed();
        assert!(took <= DEADLINE + Duration::from_millis(500), "{took:?}");
        assert!(
            longest < Duration::from_millis(200),
            "a poll took {longest:?}"
        );
        outcomes.push(match r {
            Err(EngineError::Bootstrap(BootstrapError::BadMagic(m))) => format!("magic {m:02x?}"),
            Err(EngineError::Bootstrap(BootstrapError::AuthMismatch(m))) => m.to_string(),
            Err(EngineError::Bootstrap(BootstrapError::TimedOut { what })) => {
                format!("timed out: {what}")
            }
            other => format!("{other:?}"),
        });
        drop(t); // the fake's thread ends on its own (a write error or its sleep)
    }
    assert_eq!(
        outcomes,
        vec![
            "magic [5a, 5a, 5a, 5a]".to_string(),
            "the peer does not hold this connection handle's secret".to_string(),
            "timed out: nonce".to_string(),
        ]
    );
    assert_eq!(b.setup_stats().connect_failures, 3);
}

/// A setup timeout too long for the clock (`Duration::MAX`, e.g. from a configuration
/// that means "never") is a far deadline, not a panic in the first poll: the pair
/// connects as with any other.
#[test]
fn a_setup_timeout_of_duration_max_is_a_far_deadline_not_a_panic() {
    use mrc_fabric::engine::bootstrap::deadline_after;
    let before = Instant::now();
    let far = deadline_after(Duration::MAX);
    // 2^32 s (about 136 years) from now, or as far as the clock goes.
    assert!(
        far >= before + Duration::from_secs(100 * 365 * 86_400),
        "{far:?}"
    );
    assert!(
        deadline_after(Duration::from_secs(5)).duration_since(before) >= Duration::from_secs(5)
    );
    let mut a = worker(19800..=19849);
    let mut b = worker(19850..=19899);
    a.set_setup_timeout(Duration::MAX);
    b.set_setup_timeout(Duration::MAX);
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let took = connect(&mut b, &mut a, lid, &handle);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(
        (a.setup_stats().accepted, b.setup_stats().connected),
        (1, 1)
    );
}

/// A worker bound to a multicast IP refuses to listen (its handle would name an address
/// no peer's `ConnHandle::from_bytes` accepts), as it refuses the unspecified one.
#[test]
fn listen_on_a_multicast_ip_is_refused() {
    use mrc_fabric::engine::EngineError;
    let mut u = UdpConfig::bind("224.0.0.1:0".parse().unwrap());
    u.ports = PortAllocator::new(19900..=19949).unwrap();
    let mut w = Worker::new(u, EngineConfig::default()).unwrap();
    match w.listen(QpConfig::default()) {
        Err(EngineError::Refused(m)) => assert_eq!(
            m,
            "listen needs a unicast IP, not the multicast 224.0.0.1 (the handle names it)"
        ),
        other => panic!("{other:?}"),
    }
}
