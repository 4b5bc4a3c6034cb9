//! Shared setup of the handle-based set-up tests (`handles.rs` over TCP, `handles_udp.rs`
//! in band over UDP): io_uring workers on loopback, a bounded poll loop, and a connection
//! driven from both ends on one thread.

use mrc_fabric::datapath::Datapath;
use mrc_fabric::engine::{ConnHandle, EngineConfig, ListenerId, QpConfig, Worker};
use mrc_fabric::udp::{PortAllocator, UdpConfig, UringDatapath};
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

/// How long a poll loop may take before the test fails.
pub const T: Duration = Duration::from_secs(10);

/// A worker on 127.0.0.1 whose EV sockets take ports from `range`, 8 receive slots.
pub fn worker(range: RangeInclusive<u16>) -> Worker<UringDatapath> {
    worker_at("127.0.0.1:0", range)
}

/// [`worker`] bound to `bind` (e.g. `[::1]:0`).
pub fn worker_at(bind: &str, range: RangeInclusive<u16>) -> Worker<UringDatapath> {
    let mut u = UdpConfig::bind(bind.parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    u.rx_slots = 8;
    Worker::new(u, EngineConfig::default()).unwrap()
}

/// Runs `f` until it returns `Some`, failing after [`T`]; also returns the longest single
/// call of `f` (every call must return without blocking).
pub fn until_some<R>(mut f: impl FnMut() -> Option<R>) -> (R, Duration) {
    let end = Instant::now() + T;
    let mut longest = Duration::ZERO;
    loop {
        let t = Instant::now();
        let r = f();
        longest = longest.max(t.elapsed());
        if let Some(r) = r {
            return (r, longest);
        }
        assert!(Instant::now() < end, "nothing within {T:?}");
        std::thread::yield_now();
    }
}

/// Connects `client` to `server`'s listener `lid` through `handle`, alternating
/// `poll_connect`, `poll_accept` and both workers' progress on this one thread, with
/// `each_pass` after them (a relay's turn, say). Returns (client QPN, server QPN) and the
/// longest pass.
pub fn connect_with<A: Datapath, B: Datapath>(
    client: &mut Worker<A>,
    server: &mut Worker<B>,
    lid: ListenerId,
    handle: &ConnHandle,
    mut each_pass: impl FnMut(),
) -> ((u32, u32), Duration) {
    let cid = client.connect_start(handle, QpConfig::default()).unwrap();
    let (mut cq, mut sq) = (None, None);
    until_some(|| {
        if cq.is_none() {
            cq = client.poll_connect(cid).unwrap();
        }
        if sq.is_none() {
            sq = server.poll_accept(lid).map(Result::unwrap);
        }
        client.progress();
        server.progress();
        each_pass();
        cq.zip(sq)
    })
}
