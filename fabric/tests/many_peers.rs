//! Issue 18, item 3: many peers per process. One process, one hub worker and 64 peer
//! workers, 16 EVs each, on loopback: every connection set up through the hub's handle
//! (non-blocking connect and accept alternated on this one thread) and moving a checked
//! WRITE each way; the process's sockets are counted from /proc/self/fd before and after
//! (the hub's EV sockets are shared by its 64 QPs: 16, not 64 x 16). Then 64 idle
//! connections between two workers: their sockets stay 2 x (16 + 1), and the memory per
//! idle connection (RSS before and after) is printed and bounded.

use mrc_fabric::datapath::Datapath;
use mrc_fabric::engine::{ConnHandle, EngineConfig, ListenerId, QpConfig, Worker};
use mrc_fabric::udp::{PortAllocator, UdpConfig, UringDatapath};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::{Access, MrKey, Sge, SharedMem};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The system allocator, counting the heap bytes live in this process (what the memory
/// per idle connection is measured with; RSS is printed too but moves by whole arenas).
struct Counting;

static HEAP_LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` with the caller's arguments unchanged; the
// counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            HEAP_LIVE_BYTES.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as alloc.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            HEAP_LIVE_BYTES.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as alloc.
        unsafe { System.dealloc(p, l) };
        HEAP_LIVE_BYTES.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as alloc.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            HEAP_LIVE_BYTES.fetch_add(new, Ordering::Relaxed);
            HEAP_LIVE_BYTES.fetch_sub(l.size(), Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The tests count the process's sockets: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const PEERS: usize = 64;
const EVS: usize = 16;
const MSG: usize = 8192;
const T: Duration = Duration::from_secs(60);

/// (sockets, all descriptors) of this process.
fn fds() -> (usize, usize) {
    let mut sockets = 0;
    let mut all = 0;
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        all += 1;
        if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")) {
            sockets += 1;
        }
    }
    (sockets, all)
}

/// Resident set size, bytes (/proc/self/statm, field 2, in pages).
fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page
}

fn worker(ports: &PortAllocator) -> Worker<UringDatapath> {
    let mut u = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
    u.ports = ports.clone();
    u.rx_slots = 4;
    u.socket_buffer_bytes = 1 << 20;
    Worker::new(u, EngineConfig::default()).unwrap()
}

fn qp_cfg() -> QpConfig {
    let q = QpConfig::default();
    assert_eq!(q.conn.evs.len(), EVS);
    q
}

/// The bytes connection `i` writes in direction `dir` (0 hub -> peer, 1 peer -> hub).
fn pattern(i: usize, dir: usize) -> Vec<u8> {
    (0..MSG)
        .map(|j| ((j * 131 + i * 7 + dir * 101) % 251) as u8)
        .collect()
}

/// Connects `n` QPs of `clients[k % clients.len()]` to `server`'s listener, all
/// attempts in flight at once, polled (with the accepts) from this thread. Returns
/// (client index, client QPN, server QPN) per connection, in the order they completed
/// at the client, matched by the QPNs each side saw of the other.
fn connect_all(
    server: &mut Worker<UringDatapath>,
    lid: ListenerId,
    handle: &ConnHandle,
    clients: &mut [Worker<UringDatapath>],
    n: usize,
) -> Vec<(usize, u32, u32)> {
    let bytes = handle.to_bytes();
    let h = ConnHandle::from_bytes(&bytes).unwrap();
    let before = server.setup_stats().accepted;
    let nc = clients.len();
    let mut attempts: Vec<(usize, Option<mrc_fabric::engine::ConnectId>, Option<u32>)> = (0..n)
        .map(|k| {
            let c = k % nc;
            (
                c,
                Some(clients[c].connect_start(&h, qp_cfg()).unwrap()),
                None,
            )
        })
        .collect();
    let mut accepted = Vec::new();
    let end = Instant::now() + T;
    while accepted.len() < n || attempts.iter().any(|a| a.2.is_none()) {
        assert!(Instant::now() < end, "connections not up within {T:?}");
        for (c, id, q) in attempts.iter_mut() {
            if let Some(i) = *id
                && let Some(qpn) = clients[*c].poll_connect(i).unwrap()
            {
                *q = Some(qpn);
                *id = None;
            }
        }
        while let Some(r) = server.poll_accept(lid) {
            accepted.push(r.unwrap());
        }
        server.progress();
        for w in clients.iter_mut() {
            w.progress();
        }
    }
    assert_eq!(server.setup_stats().accepted - before, n as u64);
    attempts
        .into_iter()
        .map(|(c, _, q)| {
            let q = q.unwrap();
            let peer = clients[c].peer_info(q).unwrap().qpn;
            assert!(accepted.contains(&peer));
            assert_eq!(server.peer_info(peer).unwrap().qpn, q);
            (c, q, peer)
        })
        .collect()
}

/// One region of MSG bytes per QP, remote-writable.
fn region(w: &mut Worker<UringDatapath>, qpn: u32, fill: Vec<u8>) -> (SharedMem, MrKey) {
    let m = SharedMem::from_vec(fill);
    let k = w
        .reg_mr_shared(qpn, &m, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    (m, k)
}

/// Every connection moves a WRITE_WITH_IMM each way, every byte checked.
fn write_both_ways(
    server: &mut Worker<UringDatapath>,
    clients: &mut [Worker<UringDatapath>],
    conns: &[(usize, u32, u32)],
) {
    let mut mems = Vec::new();
    for (i, &(c, qc, qs)) in conns.iter().enumerate() {
        let (sm, sk) = region(server, qs, pattern(i, 0));
        let (cm, ck) = region(&mut clients[c], qc, pattern(i, 1));
        // Each side writes its region into the other's: receive first.
        let zero = |k: &MrKey| Sge {
            lkey: k.lkey,
            addr: k.addr,
            len: 0,
        };
        server.post_recv(qs, 1, zero(&sk)).unwrap();
        clients[c].post_recv(qc, 1, zero(&ck)).unwrap();
        mems.push((sm, sk, cm, ck));
    }
    // The sources are the patterns: post both WRITEs, the sink is the other's region
    // (filled with the other pattern until the WRITE lands on it).
    let scratch: Vec<_> = conns
        .iter()
        .enumerate()
        .map(|(i, &(c, qc, qs))| {
            let s_src = region(server, qs, pattern(i, 0));
            let c_src = region(&mut clients[c], qc, pattern(i, 1));
            (s_src, c_src)
        })
        .collect();
    for (i, &(c, qc, qs)) in conns.iter().enumerate() {
        let (_, sk, _, ck) = &mems[i];
        let ((_, ssrc), (_, csrc)) = &scratch[i];
        let sge = |k: &MrKey| Sge {
            lkey: k.lkey,
            addr: k.addr,
            len: MSG as u32,
        };
        // hub -> peer: pattern(i, 0) over the peer's pattern(i, 1); and the reverse.
        server
            .post_write_with_imm(qs, 10, sge(ssrc), ck.addr, ck.rkey, i as u32)
            .unwrap();
        clients[c]
            .post_write_with_imm(qc, 20, sge(csrc), sk.addr, sk.rkey, i as u32)
            .unwrap();
    }
    let n = conns.len();
    let mut done = vec![[false; 4]; n];
    let end = Instant::now() + T;
    while done.iter().any(|d| d.iter().any(|x| !x)) {
        assert!(Instant::now() < end, "WRITEs not done within {T:?}");
        server.progress();
        for w in clients.iter_mut() {
            w.progress();
        }
        for (i, &(c, qc, qs)) in conns.iter().enumerate() {
            if let Some(x) = server.poll_send_cq(qs) {
                assert_eq!(
                    (x.wr_id, x.opcode, x.status),
                    (10, WcOpcode::WriteWithImm, WcStatus::Success)
                );
                done[i][0] = true;
            }
            if let Some(x) = server.poll_recv_cq(qs) {
                assert_eq!(
                    (x.wr_id, x.opcode, x.status, x.byte_len, x.imm),
                    (
                        1,
                        WcOpcode::RecvRdmaWithImm,
                        WcStatus::Success,
                        MSG as u32,
                        Some(i as u32)
                    )
                );
                done[i][1] = true;
            }
            if let Some(x) = clients[c].poll_send_cq(qc) {
                assert_eq!((x.wr_id, x.status), (20, WcStatus::Success));
                done[i][2] = true;
            }
            if let Some(x) = clients[c].poll_recv_cq(qc) {
                assert_eq!(
                    (x.wr_id, x.opcode, x.status, x.byte_len, x.imm),
                    (
                        1,
                        WcOpcode::RecvRdmaWithImm,
                        WcStatus::Success,
                        MSG as u32,
                        Some(i as u32)
                    )
                );
                done[i][3] = true;
            }
        }
    }
    for (i, (sm, _, cm, _)) in mems.iter().enumerate() {
        assert!(sm.with(|b| b == pattern(i, 1).as_slice()), "hub region {i}");
        assert!(
            cm.with(|b| b == pattern(i, 0).as_slice()),
            "peer region {i}"
        );
    }
}

#[test]
fn one_hub_and_64_peer_workers_share_ev_sockets_and_every_connection_writes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ports = PortAllocator::new(14000..=15999).unwrap();
    let (s0, _) = fds();
    let mut hub = worker(&ports);
    let mut peers: Vec<_> = (0..PEERS).map(|_| worker(&ports)).collect();
    let (lid, handle) = hub.listen(qp_cfg()).unwrap();
    let (s1, _) = fds();
    // One receive socket per worker and the listener.
    assert_eq!(s1 - s0, PEERS + 1 + 1);
    let conns = connect_all(&mut hub, lid, &handle, &mut peers, PEERS);
    let (s2, _) = fds();
    // The hub's 64 QPs share 16 EV sockets; each peer has its 16. With a socket per EV
    // per QP the hub alone would hold 64 x 16 = 1024. No TCP stream outlives its
    // handshake.
    assert_eq!(hub.datapath().ev_sockets(), EVS);
    assert!(peers.iter().all(|p| p.datapath().ev_sockets() == EVS));
    assert_eq!(s2 - s1, EVS * (PEERS + 1));
    let per_worker = (s2 - s0 - 1) as f64 / (PEERS + 1) as f64;
    println!(
        "many peers: {} workers, {PEERS} connections to the hub, {EVS} EVs: {} sockets \
         ({per_worker:.0} per worker: {EVS} EV + 1 receive) + 1 listener",
        PEERS + 1,
        s2 - s0
    );
    assert!(s2 - s0 <= (PEERS + 1) * (EVS + 2) + 1);
    write_both_ways(&mut hub, &mut peers, &conns);
    assert!(hub.close_listener(lid));
    drop(peers);
    drop(hub);
    assert_eq!(fds().0, s0);
    assert_eq!(ports.leased(), 0);
}

#[test]
fn sixty_four_idle_connections_between_two_workers_cost_no_socket_and_little_memory() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ports = PortAllocator::new(16000..=16199).unwrap();
    let (s0, _) = fds();
    let mut a = worker(&ports);
    let mut b = vec![worker(&ports)];
    let (lid, handle) = a.listen(qp_cfg()).unwrap();
    // Warm-up: one connection (first-use allocations: rings, tables, the allocator's
    // arenas) before the baseline.
    let first = connect_all(&mut a, lid, &handle, &mut b, 1);
    let (s1, _) = fds();
    assert_eq!(s1 - s0, 2 * (EVS + 1) + 1);
    let rss0 = rss_bytes();
    let heap0 = HEAP_LIVE_BYTES.load(Ordering::Relaxed);
    let conns = connect_all(&mut a, lid, &handle, &mut b, PEERS);
    // Idle a moment: no work is posted, every connection stays up.
    let until = Instant::now() + Duration::from_millis(200);
    while Instant::now() < until {
        a.progress();
        b[0].progress();
    }
    let rss1 = rss_bytes();
    let heap1 = HEAP_LIVE_BYTES.load(Ordering::Relaxed);
    let (s2, _) = fds();
    assert_eq!(s2, s1, "64 more connections opened sockets");
    let per_conn = heap1.saturating_sub(heap0) / PEERS;
    println!(
        "idle connections: {PEERS} more (both ends, {EVS} EVs each): heap {} KiB -> {} KiB, \
         {} bytes ({} KiB) per connection (both ends); RSS {} KiB -> {} KiB; {} sockets \
         for the pair",
        heap0 / 1024,
        heap1 / 1024,
        per_conn,
        per_conn / 1024,
        rss0 / 1024,
        rss1 / 1024,
        s2 - s0
    );
    // Generous: a connection's state at both ends (16 paths, send and receive state,
    // SACK bitmaps, region table) is far below 1 MiB; and it costs something.
    assert!(per_conn > 1024, "{per_conn} bytes per idle connection");
    assert!(per_conn < 1 << 20, "{per_conn} bytes per idle connection");
    let mut all = first;
    all.extend(conns);
    write_both_ways(&mut a, &mut b, &all);
    assert!(a.close_listener(lid));
}
