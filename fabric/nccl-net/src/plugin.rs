//! The version-independent plugin: one process-wide [`Worker`] behind a mutex, progressed
//! on whichever NCCL thread calls in, and tables of the objects NCCL holds by pointer.
//!
//! NCCL sees every object (listen, send and receive comms, memory handles, requests) as an
//! opaque pointer. Here each is a non-zero integer id (never 1, which NCCL stores as
//! `NCCL_NET_OPTIONAL_RECV_COMPLETION`) looked up in a table, so a stale or foreign pointer
//! is an error code, never a dereference.
//!
//! Wire use: one NCCL comm is one mrc QP (reliable, ordered completions), one `isend` is
//! one mrc SEND of exactly its bytes, one `irecv` one posted receive of its upper bound.
//! The transport matches SENDs to receives in posting order and reports the SEND's length
//! in the receive completion (`byte_len`), which `test` returns; a SEND longer than its
//! receive completes that receive with `LocalLengthError`, reported by `test` as
//! `ncclInvalidUsage` ("message truncated", as NCCL's socket transport does). No header
//! and no immediate are added to the data.
//!
//! Credits (receiver-driven, as NCCL's IB transport's clear-to-send): each `irecv` posts
//! its receive and then a 0-byte SEND on the same QP back to the sender (wr_id with
//! [`CTL_BIT`]); the send comm keeps [`CTL_RECVS`] 0-byte receives posted for them and
//! counts each one that arrives as a credit; an `isend` without a credit answers "try
//! again" (NULL request). So a data SEND always finds its receive posted: without this
//! a SEND that came first was answered with an RNR NACK and resent 640 us later, which
//! the 4-rank ring did hundreds to thousands of times per run (`NCCL_SPRAY_STATS`); with
//! it, none.

use crate::abi::{self, NCCL_NET_HANDLE_MAXSIZE, NcclResult};
use mrc_fabric::engine::setup::HANDLE_BYTES;
use mrc_fabric::engine::{
    ConnHandle, ConnectId, EngineConfig, ListenOptions, ListenerId, QpConfig, Worker,
};
use mrc_fabric::udp::UdpConfig;
use mrc_transport::completion::WcStatus;
use mrc_transport::region::SharedMem;
use mrc_transport::{Access, ConnState, PostError, Sge};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// An error for NCCL: the code to return and a message for its logger.
#[derive(Debug)]
pub struct Error {
    /// `ncclResult_t`.
    pub code: NcclResult,
    /// What went wrong.
    pub msg: String,
}

impl Error {
    fn new(code: NcclResult, msg: impl Into<String>) -> Error {
        Error {
            code,
            msg: msg.into(),
        }
    }
    fn internal(msg: impl Into<String>) -> Error {
        Error::new(abi::NCCL_INTERNAL_ERROR, msg)
    }
    fn system(msg: impl Into<String>) -> Error {
        Error::new(abi::NCCL_SYSTEM_ERROR, msg)
    }
}

/// Result of a plugin call.
pub type Res<T> = Result<T, Error>;

/// Offset in NCCL's 128-byte handle of the connect stage: 0, or 1 + the [`ConnectId`] of
/// the setup in progress. NCCL passes the same handle buffer to every `connect` call of
/// one connection (its IB transport keeps its stage there too). Bytes
/// `0..HANDLE_BYTES` hold the worker's [`ConnHandle`].
const STAGE_OFFSET: usize = 64;
const _: () = assert!(HANDLE_BYTES <= STAGE_OFFSET && STAGE_OFFSET + 8 <= NCCL_NET_HANDLE_MAXSIZE);

/// Requests in flight per comm before `isend`/`irecv` answer "try again" (NULL request):
/// NCCL keeps at most `NCCL_NET_MAX_REQUESTS` (32).
pub const MAX_REQUESTS_PER_COMM: usize = abi::NCCL_NET_MAX_REQUESTS;

/// Settings read from the environment at the first `init` (docs/NCCL.md).
#[derive(Debug, Clone)]
pub struct Config {
    /// IP this process listens and sends on (`NCCL_SPRAY_ADDR`, default 127.0.0.1).
    pub addr: IpAddr,
    /// EVs (entropy values: paths, one UDP source port each) per connection
    /// (`NCCL_SPRAY_EVS`, default 16).
    pub evs: u32,
    /// Speed reported to NCCL, Mbps (`NCCL_SPRAY_SPEED_MBPS`, default 100000).
    pub speed_mbps: i32,
    /// Deadline of a connection setup, ms (`NCCL_SPRAY_CONNECT_TIMEOUT_MS`, default 60000).
    pub connect_timeout_ms: u64,
    /// Log each comm's transport counters when it closes (`NCCL_SPRAY_STATS=1`).
    pub stats: bool,
    /// Authenticate and encrypt every data packet of the connections this process
    /// listens for (`NCCL_SPRAY_AUTH=1`; [`ListenOptions::authenticate_packets`]): the
    /// handle carries the choice, so the connecting side follows it whatever its own
    /// setting.
    pub auth: bool,
    /// Idle interval of the keeper thread, us (`NCCL_SPRAY_KEEPER_US`, default 1000; 0: no
    /// keeper): see [`Keeper`].
    pub keeper_us: u64,
    /// This host's address on each plane, plane 0 first (`NCCL_SPRAY_PLANES=A,B,...`, a
    /// host with one NIC port per plane; docs/PLANES.md): one NCCL device spans them all,
    /// each connection spraying its EVs over every plane, and `getProperties` reports
    /// `speed_mbps` (then the speed of one port) times the planes. Empty (default): one
    /// plane at `addr`. With it, `addr` is plane 0's (`NCCL_SPRAY_ADDR` may be left out,
    /// or must name the same).
    pub planes: Vec<IpAddr>,
}

impl Config {
    /// Takes the plane list `list` (`NCCL_SPRAY_PLANES`): 2 to 8 unicast addresses of one
    /// family, none repeated ([`mrc_fabric::udp::parse_plane_list`], the libfabric
    /// provider's rule too); `addr` becomes plane 0's (`addr_given`: `NCCL_SPRAY_ADDR` was
    /// set, and must then name plane 0).
    ///
    /// # Errors
    /// `ncclInvalidArgument` naming what is wrong.
    pub fn set_planes(&mut self, list: &str, addr_given: bool) -> Res<()> {
        let bad = |m: String| {
            Error::new(
                abi::NCCL_INVALID_ARGUMENT,
                format!("NCCL_SPRAY_PLANES={list}: {m}"),
            )
        };
        let ips = mrc_fabric::udp::parse_plane_list(list).map_err(|e| bad(e.to_string()))?;
        if addr_given && self.addr != ips[0] {
            return Err(bad(format!(
                "NCCL_SPRAY_ADDR={} is not plane 0's address {}",
                self.addr, ips[0]
            )));
        }
        self.addr = ips[0];
        self.planes = ips;
        Ok(())
    }

    /// From the environment.
    ///
    /// # Errors
    /// A variable that does not parse.
    pub fn from_env() -> Res<Config> {
        fn var<T: std::str::FromStr>(name: &str, default: T) -> Res<T> {
            match std::env::var(name) {
                Ok(v) => v.trim().parse().map_err(|_| {
                    Error::new(
                        abi::NCCL_INVALID_ARGUMENT,
                        format!("{name}={v}: does not parse"),
                    )
                }),
                Err(_) => Ok(default),
            }
        }
        let cfg = Config {
            addr: var("NCCL_SPRAY_ADDR", IpAddr::V4(Ipv4Addr::LOCALHOST))?,
            evs: var("NCCL_SPRAY_EVS", 16u32)?,
            speed_mbps: var("NCCL_SPRAY_SPEED_MBPS", 100_000i32)?,
            connect_timeout_ms: var("NCCL_SPRAY_CONNECT_TIMEOUT_MS", 60_000u64)?,
            stats: var("NCCL_SPRAY_STATS", 0u8)? != 0,
            keeper_us: var("NCCL_SPRAY_KEEPER_US", 1000u64)?,
            auth: var("NCCL_SPRAY_AUTH", 0u8)? != 0,
            planes: Vec::new(),
        };
        let mut cfg = cfg;
        if let Ok(list) = std::env::var("NCCL_SPRAY_PLANES") {
            cfg.set_planes(&list, std::env::var("NCCL_SPRAY_ADDR").is_ok())?;
        }
        let broadcast = matches!(cfg.addr, IpAddr::V4(a) if a.is_broadcast());
        if cfg.addr.is_unspecified() || cfg.addr.is_multicast() || broadcast {
            // Listen would hand out a handle naming it, which no peer can connect to.
            return Err(Error::new(
                abi::NCCL_INVALID_ARGUMENT,
                format!("NCCL_SPRAY_ADDR={}: not a unicast address", cfg.addr),
            ));
        }
        if !(1..=1024).contains(&cfg.evs) {
            return Err(Error::new(
                abi::NCCL_INVALID_ARGUMENT,
                format!("NCCL_SPRAY_EVS={} outside 1..=1024", cfg.evs),
            ));
        }
        if cfg.speed_mbps <= 0 {
            return Err(Error::new(
                abi::NCCL_INVALID_ARGUMENT,
                "NCCL_SPRAY_SPEED_MBPS must be > 0",
            ));
        }
        Ok(cfg)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Send,
    Recv,
}

/// Bit set in the wr_id of a credit message (a clear-to-send) and of the receives that
/// take them; data work requests never have it.
pub const CTL_BIT: u64 = 1 << 63;
/// Receives for credit messages a send comm keeps posted: more than the receiver can
/// have outstanding ([`MAX_REQUESTS_PER_COMM`]).
pub const CTL_RECVS: u64 = 2 * MAX_REQUESTS_PER_COMM as u64;

#[derive(Debug)]
struct Comm {
    side: Side,
    qpn: u32,
    next_wr_id: u64,
    /// wr_id -> request id, of work posted and not yet completed.
    inflight: HashMap<u64, u64>,
    /// Why the comm cannot be used any more (its QP was torn down).
    broken: Option<String>,
    /// The connection failed on the peer's account (silent for the unresponsive budget,
    /// restarted): the transport's cause (`peer unresponsive for 5.0 s`). Every request
    /// of the comm then fails with `ncclRemoteError` naming it, and so do new ones.
    failed: Option<String>,
    /// A 1-byte region of the plugin's own, which the 0-byte credit SENDs and their
    /// receives name (a work request needs an lkey), and its lkey.
    ctl: Option<(SharedMem, Sge)>,
    /// Send side: receives the peer has posted that no send has used yet.
    credits: u64,
    /// wr_id of the next credit message or credit receive.
    next_ctl: u64,
}

#[derive(Debug, Clone, Copy)]
struct Mr {
    comm: u64,
    qpn: u32,
    lkey: u32,
    /// The region's address in the transport's region table (`MrKey::addr`).
    addr: u64,
    /// Where it starts in this process (what NCCL passed to regMr).
    ptr: u64,
    len: u64,
}

#[derive(Debug)]
struct Request {
    comm: u64,
    /// Set on completion: the status and the bytes moved.
    done: Option<(WcStatus, u32)>,
}

/// Passes of [`State::progress`] so far (any thread): the keeper progresses only when
/// this has not moved for one interval.
static PASSES: AtomicU64 = AtomicU64::new(0);

/// The keeper: a thread that progresses the worker only while no NCCL call does.
///
/// The data path runs on NCCL's threads (every `isend`, `irecv`, `test` is one pass of the
/// worker). But a process whose own requests are all done stops calling, while a peer
/// may still need it: an acknowledgement that was lost and must be answered again, a
/// receive-not-ready answer, the last ACK of a message whose sender then waits. Without
/// an answer the peer's request fails after the unresponsive budget (5 s), e.g. when the
/// idle process next blocks in NCCL's own bootstrap barrier waiting for that peer. So
/// every `keeper_us` the keeper looks whether any pass ran since it last looked; if none
/// did it runs one, under `try_lock` (it never waits for the state lock, so it never
/// delays a caller and can be joined while the lock is held). It runs from the first
/// listen or connect until the worker is dropped (the last comm closed, the last
/// `finalize`, or `dlclose`), and is joined then.
#[derive(Debug)]
pub struct Keeper {
    shared: Arc<KeeperShared>,
    thread: libc::pthread_t,
}

#[derive(Debug)]
struct KeeperShared {
    stop: AtomicBool,
    interval_us: u64,
}

/// The keeper's body. A raw pthread, not a `std::thread`: std's thread bookkeeping
/// registers thread-local destructors, and glibc keeps a library loaded (ignoring
/// `dlclose`) while a thread holds a destructor of it; this thread uses no thread-local
/// with a destructor, so joining it is all an unload needs.
extern "C" fn keeper_main(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Arc::into_raw` that Keeper::start handed to this thread.
    let shared = unsafe { Arc::from_raw(arg.cast::<KeeperShared>().cast_const()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut last = PASSES.load(Ordering::Relaxed);
        while !shared.stop.load(Ordering::Acquire) {
            // SAFETY: plain libc call.
            unsafe { libc::usleep(u32::try_from(shared.interval_us).unwrap_or(u32::MAX)) };
            if shared.stop.load(Ordering::Acquire) {
                break;
            }
            let now = PASSES.load(Ordering::Relaxed);
            if now == last
                && let Ok(mut g) = STATE.try_lock()
                && let Some(s) = g.as_mut()
            {
                s.progress();
            }
            last = PASSES.load(Ordering::Relaxed);
        }
    }));
    std::ptr::null_mut()
}

impl Keeper {
    fn start(interval_us: u64) -> Option<Keeper> {
        let shared = Arc::new(KeeperShared {
            stop: AtomicBool::new(false),
            interval_us: interval_us.clamp(1, 1_000_000),
        });
        let arg = Arc::into_raw(shared.clone())
            .cast_mut()
            .cast::<libc::c_void>();
        let mut thread: libc::pthread_t = 0;
        // SAFETY: a valid out pointer, default attributes, a C-ABI body that takes
        // ownership of `arg`.
        let rc = unsafe { libc::pthread_create(&mut thread, std::ptr::null(), keeper_main, arg) };
        if rc != 0 {
            // SAFETY: the thread was not created: take the reference back.
            drop(unsafe { Arc::from_raw(arg.cast::<KeeperShared>().cast_const()) });
            return None;
        }
        Some(Keeper { shared, thread })
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // SAFETY: a thread this keeper created and nobody else joins. It never blocks on
        // the state lock (try_lock), so joining while holding it cannot deadlock.
        unsafe { libc::pthread_join(self.thread, std::ptr::null_mut()) };
    }
}

/// The whole plugin state of a process.
#[derive(Debug)]
pub struct State {
    cfg: Config,
    /// Declared before `worker`: dropped (joined) first.
    keeper: Option<Keeper>,
    worker: Option<Worker>,
    /// Listen comm id -> the worker's listener.
    listens: HashMap<u64, ListenerId>,
    /// Connect attempts in progress: their ids ([`ConnectId`]) and the handle
    /// ([`ConnHandle`] bytes) each was started with, so a stage field copied into another
    /// handle is refused instead of handing that handle this attempt's connection.
    connects: HashMap<u64, [u8; HANDLE_BYTES]>,
    comms: HashMap<u64, Comm>,
    mrs: HashMap<u64, Mr>,
    reqs: HashMap<u64, Request>,
    /// Live v11+ contexts (init .. finalize).
    ctxs: HashMap<u64, u64>,
    next_id: u64,
}

/// The plugin state; `None` before the first `init` and after the last `finalize`.
pub static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Locks [`STATE`] (a poisoned lock is taken over: every table stays consistent between
/// statements that can panic).
pub fn lock() -> std::sync::MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The state, after an `init`.
///
/// # Errors
/// `ncclInternalError` before `init`.
pub fn state(g: &mut Option<State>) -> Res<&mut State> {
    g.as_mut()
        .ok_or_else(|| Error::internal("called before init (or after the last finalize)"))
}

/// `init`: reads the environment once. Returns a context id for v11+ (`with_ctx`).
///
/// # Errors
/// A bad environment variable.
pub fn init(g: &mut Option<State>, comm_id: Option<u64>) -> Res<u64> {
    if g.is_none() {
        *g = Some(State {
            cfg: Config::from_env()?,
            keeper: None,
            worker: None,
            listens: HashMap::new(),
            connects: HashMap::new(),
            comms: HashMap::new(),
            mrs: HashMap::new(),
            reqs: HashMap::new(),
            ctxs: HashMap::new(),
            next_id: 0x100,
        });
    }
    let s = state(g)?;
    match comm_id {
        Some(c) => {
            let id = s.id();
            s.ctxs.insert(id, c);
            Ok(id)
        }
        None => Ok(0),
    }
}

/// `finalize(ctx)` (v11+): forgets the context; the last one, with no comm left, drops
/// the worker and its sockets.
///
/// # Errors
/// `ncclInternalError` for an unknown context.
pub fn finalize(g: &mut Option<State>, ctx: u64) -> Res<()> {
    let s = state(g)?;
    if s.ctxs.remove(&ctx).is_none() {
        return Err(Error::internal(format!(
            "finalize of unknown context {ctx:#x}"
        )));
    }
    if s.ctxs.is_empty() && s.listens.is_empty() && s.connects.is_empty() && s.comms.is_empty() {
        *g = None;
    }
    Ok(())
}

/// Checks a v11+ context.
///
/// # Errors
/// `ncclInternalError` for an unknown one.
pub fn check_ctx(s: &State, ctx: u64) -> Res<()> {
    if s.ctxs.contains_key(&ctx) {
        Ok(())
    } else {
        Err(Error::internal(format!("unknown context {ctx:#x}")))
    }
}

/// What `getProperties` reports, version-independent.
#[derive(Debug, Clone)]
pub struct Props {
    /// Speed, Mbps.
    pub speed_mbps: i32,
    /// guid: derived from the IP, one per address.
    pub guid: u64,
}

/// Properties of device 0.
///
/// # Errors
/// Any other device: `ncclInvalidArgument`.
pub fn props(s: &State, dev: i32) -> Res<Props> {
    check_dev(dev)?;
    let guid = match s.cfg.addr {
        IpAddr::V4(a) => 0x5350_5259_0000_0000 | u64::from(u32::from(a)),
        IpAddr::V6(a) => 0x5350_5259_0000_0000 ^ (u128::from(a) as u64),
    };
    // One device spans every plane: the ports' speeds add up.
    let planes = i32::try_from(s.cfg.planes.len().max(1)).unwrap_or(1);
    Ok(Props {
        speed_mbps: s.cfg.speed_mbps.saturating_mul(planes),
        guid,
    })
}

fn check_dev(dev: i32) -> Res<()> {
    if dev == 0 {
        Ok(())
    } else {
        Err(Error::new(
            abi::NCCL_INVALID_ARGUMENT,
            format!("no device {dev} (one device, 0)"),
        ))
    }
}

impl Config {
    /// The worker's engine tuning: bursts of whole GSO sends for each of the `evs` EV
    /// sockets the worker's connections share ([`EngineConfig::gso_tx_batch`], with the
    /// authentication trailer where `auth` is on): 240 datagrams at the defaults. With
    /// the 64 of an older default each socket got 4 datagrams per burst; the `bw`
    /// harness (512 KiB messages, 8 in flight) measured 2.1-2.2 GB/s there and 2.9-3.0
    /// at 240 (docs/NCCL.md).
    pub fn engine_config(&self) -> EngineConfig {
        let mtu = QpConfig::default().conn.send.mtu_payload_bytes as usize;
        EngineConfig {
            tx_batch: EngineConfig::gso_tx_batch(mtu, self.evs as usize, self.auth),
            ..EngineConfig::default()
        }
    }
}

impl State {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn worker(&mut self) -> Res<&mut Worker> {
        if self.worker.is_none() {
            let udp = UdpConfig {
                bind: SocketAddr::new(self.cfg.addr, 0),
                plane_ips: self.cfg.planes.clone(),
                ..UdpConfig::default()
            };
            let mut w = Worker::new(udp, self.cfg.engine_config()).map_err(|e| {
                Error::system(format!(
                    "cannot open the UDP datapath on {}: {e}",
                    self.cfg.addr
                ))
            })?;
            w.set_setup_timeout(Duration::from_millis(self.cfg.connect_timeout_ms));
            self.worker = Some(w);
            if self.cfg.keeper_us > 0 && self.keeper.is_none() {
                self.keeper = Keeper::start(self.cfg.keeper_us);
            }
        }
        self.worker
            .as_mut()
            .ok_or_else(|| Error::internal("no worker"))
    }

    fn qp_config(&self) -> QpConfig {
        let mut cfg = QpConfig::default();
        cfg.conn.evs = (0..self.cfg.evs).collect();
        cfg
    }

    /// Drops the worker when nothing uses it any more (no comm, listen or connect).
    fn maybe_idle(&mut self) {
        if self.listens.is_empty() && self.connects.is_empty() && self.comms.is_empty() {
            self.keeper = None;
            self.worker = None;
        }
    }

    /// One pass of the worker, then every completion into its request.
    fn progress(&mut self) {
        let Some(w) = self.worker.as_mut() else {
            return;
        };
        PASSES.fetch_add(1, Ordering::Relaxed);
        w.progress();
        for comm in self.comms.values_mut() {
            if comm.broken.is_some() {
                continue;
            }
            let mut errors = false;
            for recv_cq in [false, true] {
                loop {
                    let c = if recv_cq {
                        w.poll_recv_cq(comm.qpn)
                    } else {
                        w.poll_send_cq(comm.qpn)
                    };
                    let Some(c) = c else { break };
                    errors |= c.status != WcStatus::Success;
                    if c.wr_id & CTL_BIT != 0 {
                        // A credit arrived (send side): count it, post another receive
                        // for the next. A credit message sent (receive side): nothing.
                        // A receive that failed (a peer that sent bytes into it) is
                        // replaced too, but gives no credit; a flushed one means the QP
                        // is closing.
                        if recv_cq && comm.side == Side::Send && c.status != WcStatus::Flushed {
                            if c.status == WcStatus::Success {
                                comm.credits += 1;
                            }
                            if let Some((_, sge)) = comm.ctl {
                                let id = CTL_BIT | comm.next_ctl;
                                comm.next_ctl += 1;
                                let _ = w.post_recv(comm.qpn, id, sge);
                            }
                        }
                        continue;
                    }
                    if let Some(req) = comm.inflight.remove(&c.wr_id)
                        && let Some(r) = self.reqs.get_mut(&req)
                    {
                        r.done = Some((c.status, c.byte_len));
                    }
                }
            }
            if errors && comm.failed.is_none() {
                comm.failed = peer_failure(w, comm.qpn);
            }
        }
    }
}

/// Why QP `qpn`'s connection failed, when it did (state `Error`) on the peer's account:
/// the transport's cause ([`mrc_transport::send::GiveUp`]: the peer silent for the
/// unresponsive budget whether this side was sending, receiving or idle with receives
/// posted), or its restart. `None` while the connection is up.
fn peer_failure(w: &mut Worker, qpn: u32) -> Option<String> {
    w.with_conn(qpn, |c| {
        (c.state() == ConnState::Error).then(|| match c.give_up() {
            Some(g) => g.to_string(),
            None => "connection failed (the peer restarted or refused access)".into(),
        })
    })
    .ok()
    .flatten()
}

/// `listen(dev, handle)`: a listener of the worker ([`Worker::listen`]: a non-blocking
/// TCP socket on the configured IP and a secret); writes its [`ConnHandle`] into NCCL's
/// handle and returns the listen comm id.
///
/// # Errors
/// Bad device; the socket cannot be opened.
pub fn listen(s: &mut State, dev: i32, handle: &mut [u8; NCCL_NET_HANDLE_MAXSIZE]) -> Res<u64> {
    check_dev(dev)?;
    let cfg = s.qp_config();
    let opts = ListenOptions {
        authenticate_packets: s.cfg.auth,
        ..ListenOptions::default()
    };
    let (lid, h) = s
        .worker()?
        .listen_with(cfg, opts)
        .map_err(|e| Error::system(format!("listen on {}: {e}", s.cfg.addr)))?;
    *handle = [0; NCCL_NET_HANDLE_MAXSIZE];
    handle[..HANDLE_BYTES].copy_from_slice(&h.to_bytes());
    let id = s.id();
    s.listens.insert(id, lid);
    Ok(id)
}

/// `connect(dev, handle)`: starts the setup ([`Worker::connect_start`]) and keeps its id
/// in the handle's stage field, or advances the one already there
/// ([`Worker::poll_connect`]); `Some(send comm)` once connected, `None` meanwhile.
///
/// # Errors
/// A bad handle or device; the setup failed (`ncclSystemError`).
pub fn connect(
    s: &mut State,
    dev: i32,
    handle: &mut [u8; NCCL_NET_HANDLE_MAXSIZE],
) -> Res<Option<u64>> {
    check_dev(dev)?;
    let h = ConnHandle::from_bytes(&handle[..HANDLE_BYTES])
        .map_err(|e| Error::internal(format!("not a spray handle: {e:?}")))?;
    let mut stage = [0u8; 8];
    stage.copy_from_slice(&handle[STAGE_OFFSET..STAGE_OFFSET + 8]);
    let mut cid = u64::from_le_bytes(stage).checked_sub(1).map(ConnectId);
    if cid.is_none() {
        let cfg = s.qp_config();
        let id = s
            .worker()?
            .connect_start(&h, cfg)
            .map_err(|e| Error::system(format!("connect to {}: {e}", h.addr())))?;
        let mut started = [0u8; HANDLE_BYTES];
        started.copy_from_slice(&handle[..HANDLE_BYTES]);
        s.connects.insert(id.0, started);
        handle[STAGE_OFFSET..STAGE_OFFSET + 8].copy_from_slice(&(id.0 + 1).to_le_bytes());
        cid = Some(id);
    }
    let Some(cid) = cid else {
        return Err(Error::internal("no connect stage"));
    };
    match s.connects.get(&cid.0) {
        None => {
            return Err(Error::internal(format!(
                "connect: unknown stage {:#x} in the handle",
                cid.0
            )));
        }
        // A stage copied from another handle (a buggy copy of a handle buffer while its
        // connect was in progress, or corruption): that attempt is another peer's, and it
        // stays its own handle's.
        Some(started) if started[..] != handle[..HANDLE_BYTES] => {
            return Err(Error::internal(format!(
                "connect: stage {:#x} in the handle belongs to another handle's connect \
                 (to {})",
                cid.0,
                ConnHandle::from_bytes(started)
                    .map_or_else(|_| "?".into(), |o| o.addr().to_string())
            )));
        }
        Some(_) => {}
    }
    let r = s.worker()?.poll_connect(cid);
    match r {
        Ok(None) => Ok(None),
        Ok(Some(qpn)) => {
            s.connects.remove(&cid.0);
            handle[STAGE_OFFSET..STAGE_OFFSET + 8].fill(0);
            Ok(Some(s.add_comm(Side::Send, qpn)?))
        }
        Err(e) => {
            s.connects.remove(&cid.0);
            handle[STAGE_OFFSET..STAGE_OFFSET + 8].fill(0);
            s.maybe_idle();
            Err(Error::system(format!("connect: {e}")))
        }
    }
}

/// `accept(listen)`: `Some(recv comm)` for the next connection the listener completed
/// ([`Worker::poll_accept`]), `None` meanwhile.
///
/// # Errors
/// Unknown listen comm; `accept(2)` failed.
pub fn accept(s: &mut State, listen: u64) -> Res<Option<u64>> {
    let lid = *s
        .listens
        .get(&listen)
        .ok_or_else(|| Error::internal(format!("accept on unknown listen comm {listen:#x}")))?;
    match s.worker()?.poll_accept(lid) {
        None => Ok(None),
        Some(Ok(qpn)) => Ok(Some(s.add_comm(Side::Recv, qpn)?)),
        Some(Err(e)) => Err(Error::system(format!("accept: {e}"))),
    }
}

impl State {
    /// A comm on the connected QP `qpn`: registers its credit region; a send comm posts
    /// its credit receives.
    fn add_comm(&mut self, side: Side, qpn: u32) -> Res<u64> {
        let mem = SharedMem::new(1);
        let w = self.worker()?;
        let setup = (|| {
            let k = w.reg_mr_shared(qpn, &mem, Access::LOCAL_WRITE)?;
            let sge = Sge {
                lkey: k.lkey,
                addr: k.addr,
                len: 0,
            };
            if side == Side::Send {
                for i in 0..CTL_RECVS {
                    w.post_recv(qpn, CTL_BIT | i, sge)
                        .map_err(|e| mrc_fabric::engine::EngineError::Refused(e.to_string()))?;
                }
            }
            Ok::<Sge, mrc_fabric::engine::EngineError>(sge)
        })();
        let sge = match setup {
            Ok(sge) => sge,
            Err(e) => {
                w.destroy_qp(qpn);
                return Err(Error::system(format!(
                    "setting up the credits of QP {qpn}: {e}"
                )));
            }
        };
        let id = self.id();
        self.comms.insert(
            id,
            Comm {
                side,
                qpn,
                next_wr_id: 1,
                inflight: HashMap::new(),
                broken: None,
                failed: None,
                ctl: Some((mem, sge)),
                credits: 0,
                next_ctl: CTL_RECVS,
            },
        );
        Ok(id)
    }

    fn comm(&mut self, id: u64) -> Res<&mut Comm> {
        self.comms
            .get_mut(&id)
            .ok_or_else(|| Error::internal(format!("unknown comm {id:#x}")))
    }

    /// Tears down the QP of `comm` (all its work and registrations go with it) and marks
    /// it broken with `why`.
    fn break_comm(&mut self, comm: u64, why: String) {
        if let Some(c) = self.comms.get_mut(&comm) {
            if let Some(w) = self.worker.as_mut() {
                w.destroy_qp(c.qpn);
            }
            for (_, req) in c.inflight.drain() {
                if let Some(r) = self.reqs.get_mut(&req) {
                    r.done = Some((WcStatus::Flushed, 0));
                }
            }
            c.broken = Some(why);
        }
    }
}

/// `closeListen`: closes the listener, its setups in progress and the connections it
/// completed that `accept` did not hand out.
///
/// # Errors
/// Unknown listen comm.
pub fn close_listen(s: &mut State, listen: u64) -> Res<()> {
    let lid = s
        .listens
        .remove(&listen)
        .ok_or_else(|| Error::internal(format!("closeListen of unknown comm {listen:#x}")))?;
    if let Some(w) = s.worker.as_mut() {
        w.close_listener(lid);
    }
    s.maybe_idle();
    Ok(())
}

/// The planes of a comm's QP for its counters line: ` planes [P STATE sent N downs D,
/// ...]`, STATE `UP` or `DOWN_LOSS` / `DOWN_PEER` / `DOWN_LOCAL`, N the packets its EVs
/// sent, D the times it went down.
fn plane_summary(q: &mrc_fabric::engine::QpStats) -> String {
    use mrc_transport::path::{PlaneDownCause, PlaneState};
    let parts: Vec<String> = q
        .planes
        .iter()
        .enumerate()
        .map(|(i, (st, ps))| {
            let state = match st {
                PlaneState::Up => "UP",
                PlaneState::Down(PlaneDownCause::Loss) => "DOWN_LOSS",
                PlaneState::Down(PlaneDownCause::PeerReport) => "DOWN_PEER",
                PlaneState::Down(PlaneDownCause::Local) => "DOWN_LOCAL",
            };
            let sent: u64 = q
                .evs
                .iter()
                .zip(&q.ev_planes)
                .filter(|(_, p)| usize::from(**p) == i)
                .map(|((_, _, e), _)| e.sent)
                .sum();
            let downs = ps.downs_by_loss + ps.downs_by_peer + ps.downs_local;
            format!("{i} {state} sent {sent} downs {downs}")
        })
        .collect();
    format!(" planes [{}]", parts.join(", "))
}

/// `closeSend` (`send` true) / `closeRecv`: destroys the comm's QP (work in flight is
/// dropped, never waited for) and forgets its requests. Returns the counters line to log
/// when `NCCL_SPRAY_STATS` is on.
///
/// # Errors
/// Unknown comm, or a comm of the other side (`closeRecv` of a send comm: it stays open).
pub fn close_comm(s: &mut State, comm: u64, send: bool) -> Res<Option<String>> {
    let want = if send { Side::Send } else { Side::Recv };
    let side = s
        .comms
        .get(&comm)
        .ok_or_else(|| Error::internal(format!("close of unknown comm {comm:#x}")))?
        .side;
    if side != want {
        return Err(Error::internal(format!(
            "close{want:?} of a {side:?} comm {comm:#x}"
        )));
    }
    let c = s
        .comms
        .remove(&comm)
        .ok_or_else(|| Error::internal(format!("close of unknown comm {comm:#x}")))?;
    let mut line = None;
    if c.broken.is_none()
        && let Some(w) = s.worker.as_mut()
    {
        // One more pass first, so an acknowledgement this side owes leaves now.
        w.progress();
        if s.cfg.stats
            && let Ok((q, _)) = w.stats(c.qpn)
        {
            let k = &q.conn;
            line = Some(format!(
                "{:?} comm QP {}: sent {} ({} bytes) retransmitted {} timeouts {} rack_losses {} \
                 received {} ({} bytes) rnr_nacks sent {} received {} sacks sent {} received {}",
                c.side,
                c.qpn,
                k.sent,
                k.sent_bytes,
                k.retransmitted,
                k.timeouts,
                k.rack_losses,
                k.received,
                k.received_bytes,
                k.rnr_nacks_sent,
                k.rnr_nacks_received,
                k.sacks_sent,
                k.sacks_received
            ));
            if q.planes.len() > 1
                && let Some(l) = line.as_mut()
            {
                l.push_str(&plane_summary(&q));
            }
        }
        w.destroy_qp(c.qpn);
    }
    s.reqs.retain(|_, r| r.comm != comm);
    // Its memory handles stay until deregMr (which then succeeds: the QP, and the
    // registration with it, is gone).
    s.maybe_idle();
    Ok(line)
}

/// `regMr(comm, data, size, type)`: host memory only, a range `ibv_reg_mr` would take
/// ([`crate::memcheck::check_range`]: not wrapping, every page mapped readable and
/// writable).
///
/// # Errors
/// A type other than `NCCL_PTR_HOST`, an unknown comm, a range that wraps or is not all
/// mapped read-write (`ncclInternalError`, as for a NULL range before; the warning names the
/// first bad byte or mapping), a refused registration.
///
/// # Safety
/// `data .. data + size` is memory NCCL keeps valid until `deregMr` (its contract).
pub unsafe fn reg_mr(s: &mut State, comm: u64, data: *mut u8, size: usize, kind: i32) -> Res<u64> {
    if kind != abi::NCCL_PTR_HOST {
        return Err(Error::internal(format!(
            "regMr of memory type {kind}: spray registers host memory only (NCCL_PTR_HOST)"
        )));
    }
    let c = s.comm(comm)?;
    if let Some(why) = &c.broken {
        return Err(Error::system(format!("comm is broken: {why}")));
    }
    // ibv_reg_mr pins every page: refuse what it would (wrapping, unmapped, no access)
    crate::memcheck::check_range(data as usize, size)
        .map_err(|e| Error::internal(format!("regMr refused: {e}")))?;
    let qpn = s.comm(comm)?.qpn;
    let w = s.worker()?;
    // SAFETY: NCCL's regMr contract: the range stays valid and unmoved until deregMr; it
    // touches a range of it only while no request on it is in flight.
    let k = unsafe { w.reg_mr_raw(qpn, data, size, Access::LOCAL_WRITE) }
        .map_err(|e| Error::internal(format!("regMr of {size} bytes at {data:p}: {e}")))?;
    let id = s.id();
    s.mrs.insert(
        id,
        Mr {
            comm,
            qpn,
            lkey: k.lkey,
            addr: k.addr,
            ptr: data as u64,
            len: k.len,
        },
    );
    Ok(id)
}

/// `deregMr(comm, mhandle)`. When a request still uses the region (NCCL aborting), the
/// comm's QP is torn down first so the memory is never touched again, and the comm is
/// marked broken.
///
/// # Errors
/// Unknown handle.
pub fn dereg_mr(s: &mut State, comm: u64, mh: u64) -> Res<()> {
    let m = s
        .mrs
        .remove(&mh)
        .ok_or_else(|| Error::internal(format!("deregMr of unknown handle {mh:#x}")))?;
    if m.comm != comm {
        s.mrs.insert(mh, m);
        return Err(Error::internal("deregMr: handle of another comm"));
    }
    let broken = s.comms.get(&comm).is_none_or(|c| c.broken.is_some());
    if broken {
        return Ok(()); // its QP, and the registration with it, is gone
    }
    let r = s.worker()?.dereg_mr(m.qpn, m.lkey);
    if let Err(e) = r {
        s.break_comm(comm, format!("deregMr while in use ({e})"));
    }
    Ok(())
}

fn sge_of(s: &State, comm: u64, mh: u64, data: *mut u8, size: usize) -> Res<Sge> {
    let m = s
        .mrs
        .get(&mh)
        .ok_or_else(|| Error::internal(format!("unknown memory handle {mh:#x}")))?;
    if m.comm != comm {
        return Err(Error::internal("memory handle of another comm"));
    }
    let len = u32::try_from(size).map_err(|_| {
        Error::new(
            abi::NCCL_INVALID_ARGUMENT,
            format!("{size} bytes: more than 4 GiB - 1"),
        )
    })?;
    // A 0-byte buffer may be anywhere (even NULL): name the region's start.
    let off = if len == 0 {
        0
    } else {
        (data as u64).wrapping_sub(m.ptr)
    };
    let inside = (data as u64) >= m.ptr || len == 0;
    if !inside || off.checked_add(u64::from(len)).is_none_or(|e| e > m.len) {
        return Err(Error::internal(format!(
            "{size} bytes at {data:p} outside the registered {} bytes at {:#x}",
            m.len, m.ptr
        )));
    }
    Ok(Sge {
        lkey: m.lkey,
        addr: m.addr + off,
        len,
    })
}

fn post(s: &mut State, comm: u64, side: Side, sge: Sge) -> Res<Option<u64>> {
    let c = s.comm(comm)?;
    if c.side != side {
        return Err(Error::internal(
            "isend on a receive comm or irecv on a send comm",
        ));
    }
    if let Some(why) = &c.broken {
        return Err(Error::system(format!("comm is broken: {why}")));
    }
    if let Some(why) = &c.failed {
        return Err(remote_failure(why));
    }
    if c.inflight.len() >= MAX_REQUESTS_PER_COMM {
        return Ok(None);
    }
    if side == Side::Send && c.credits == 0 {
        // No receive posted at the peer that this send would take: try again later
        // (after this pass, a credit may have come). A peer that died leaves this
        // side's credit receives posted: the keepalives find it within the unresponsive
        // budget, the receives fail, and so does this call from then on.
        s.progress();
        let c = s.comm(comm)?;
        if let Some(why) = &c.failed {
            return Err(remote_failure(why));
        }
        if c.credits == 0 {
            return Ok(None);
        }
    }
    let c = s.comm(comm)?;
    let wr_id = c.next_wr_id;
    c.next_wr_id += 1;
    let qpn = c.qpn;
    let ctl = c.ctl.as_ref().map(|(_, sge)| *sge);
    let ctl_id = CTL_BIT | c.next_ctl;
    c.next_ctl += 1;
    let w = s.worker()?;
    let r = match side {
        Side::Send => w.post_send(qpn, wr_id, sge, None),
        // The receive first, then the credit that tells the peer it is there.
        Side::Recv => w.post_recv(qpn, wr_id, sge).and_then(|()| match ctl {
            Some(c) => w.post_send(qpn, ctl_id, c, None),
            None => Ok(()),
        }),
    };
    if side == Side::Send && r.is_ok() {
        s.comm(comm)?.credits -= 1;
    }
    match r {
        Ok(()) => {}
        Err(PostError::BadState(st)) => {
            return Err(Error::new(
                abi::NCCL_REMOTE_ERROR,
                format!("connection is {st:?}"),
            ));
        }
        Err(e) => return Err(Error::internal(format!("post: {e}"))),
    }
    let req = s.id();
    s.reqs.insert(req, Request { comm, done: None });
    s.comm(comm)?.inflight.insert(wr_id, req);
    s.progress();
    Ok(Some(req))
}

/// `isend(comm, data, size, mhandle)`: one SEND. `None`: too many in flight, try again.
///
/// # Errors
/// Unknown comm or handle, a buffer outside its region, a broken connection.
pub fn isend(s: &mut State, comm: u64, data: *mut u8, size: usize, mh: u64) -> Res<Option<u64>> {
    let sge = sge_of(s, comm, mh, data, size)?;
    post(s, comm, Side::Send, sge)
}

/// `irecv(comm, 1, data, size, mhandle)`: one receive of at most `size` bytes.
///
/// # Errors
/// As [`isend`].
pub fn irecv(s: &mut State, comm: u64, data: *mut u8, size: usize, mh: u64) -> Res<Option<u64>> {
    let sge = sge_of(s, comm, mh, data, size)?;
    post(s, comm, Side::Recv, sge)
}

/// `test(request)`: one pass of progress; `Some(bytes)` when done (the request is then
/// gone), `None` while in flight.
///
/// # Errors
/// Unknown request; the request failed: a message longer than its receive is
/// `ncclInvalidUsage`, a peer that went away `ncclRemoteError`, a flushed request (its
/// comm broke) `ncclSystemError`. The request is gone after an error too.
pub fn test(s: &mut State, req: u64) -> Res<Option<u32>> {
    if !s.reqs.contains_key(&req) {
        return Err(Error::internal(format!("test of unknown request {req:#x}")));
    }
    if s.reqs.get(&req).is_some_and(|r| r.done.is_none()) {
        s.progress();
    }
    let Some((status, bytes)) = s.reqs.get(&req).and_then(|r| r.done) else {
        return Ok(None);
    };
    let failed = s
        .reqs
        .remove(&req)
        .and_then(|r| s.comms.get(&r.comm))
        .and_then(|c| c.failed.clone());
    match status {
        WcStatus::Success => Ok(Some(bytes)),
        WcStatus::RetryExceeded | WcStatus::GenerationMismatch | WcStatus::Flushed
            if failed.is_some() =>
        {
            Err(remote_failure(failed.as_deref().unwrap_or_default()))
        }
        WcStatus::LocalLengthError => Err(Error::new(
            abi::NCCL_INVALID_USAGE,
            "message truncated: the peer sent more bytes than the receive posted",
        )),
        WcStatus::RetryExceeded | WcStatus::GenerationMismatch => Err(Error::new(
            abi::NCCL_REMOTE_ERROR,
            format!("peer failed: {status:?}"),
        )),
        other => Err(Error::system(format!("request failed: {other:?}"))),
    }
}

/// The error of a request or post on a comm whose connection failed on the peer's
/// account: `ncclRemoteError` naming the transport's cause.
fn remote_failure(why: &str) -> Error {
    Error::new(abi::NCCL_REMOTE_ERROR, format!("peer failed: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(evs: u32, auth: bool) -> Config {
        Config {
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            evs,
            speed_mbps: 100_000,
            connect_timeout_ms: 60_000,
            stats: false,
            auth,
            keeper_us: 1000,
            planes: Vec::new(),
        }
    }

    #[test]
    fn a_plane_list_is_checked_and_makes_plane_0_the_address() {
        let mut c = config(16, false);
        c.set_planes("10.0.0.1, 10.1.0.1", false).unwrap();
        assert_eq!(c.addr, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(c.planes.len(), 2);
        for (list, given, want) in [
            (
                "10.0.0.1",
                false,
                "NCCL_SPRAY_PLANES=10.0.0.1: 1 addresses; give 2 to 8",
            ),
            (
                "10.0.0.1,::1",
                false,
                "NCCL_SPRAY_PLANES=10.0.0.1,::1: ::1: every plane's address is a unicast one of one family",
            ),
            (
                "10.0.0.1,10.0.0.1",
                false,
                "NCCL_SPRAY_PLANES=10.0.0.1,10.0.0.1: 10.0.0.1 is given twice",
            ),
            (
                "10.0.0.1,x",
                false,
                "NCCL_SPRAY_PLANES=10.0.0.1,x: \"x\": invalid IP address syntax",
            ),
            (
                "10.0.0.2,10.1.0.1",
                true,
                "NCCL_SPRAY_PLANES=10.0.0.2,10.1.0.1: NCCL_SPRAY_ADDR=127.0.0.1 is not plane 0's address 10.0.0.2",
            ),
        ] {
            let mut c = config(16, false);
            let e = c.set_planes(list, given).unwrap_err();
            assert_eq!((e.code, e.msg.as_str()), (abi::NCCL_INVALID_ARGUMENT, want));
        }
    }

    /// The worker's bursts are whole 15-datagram GSO sends (4152 bytes, 4176 with the
    /// trailer) for each of the EV sockets: 16 sockets x 15 = 240; 4 sockets, four
    /// rounds of 60; 1 socket, 17 sends of 15 = 255; 64 sockets, a round (960) above
    /// the 256 cap, 4 each (256).
    #[test]
    fn the_worker_bursts_fill_whole_gso_sends_of_every_ev_socket() {
        assert_eq!(config(16, false).engine_config().tx_batch, 240);
        assert_eq!(config(16, true).engine_config().tx_batch, 240);
        assert_eq!(config(4, false).engine_config().tx_batch, 240);
        assert_eq!(config(1, false).engine_config().tx_batch, 255);
        assert_eq!(config(64, true).engine_config().tx_batch, 256);
        let c = config(16, false).engine_config();
        assert_eq!(
            EngineConfig {
                tx_batch: EngineConfig::default().tx_batch,
                ..c
            },
            EngineConfig::default()
        );
    }
}
