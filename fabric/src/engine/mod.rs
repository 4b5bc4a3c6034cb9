//! The engine and the embedding API (DESIGN.md section 7).
//!
//! An engine owns the transport endpoints ([`mrc_transport::Connection`]s, one per QP) and
//! one [`Datapath`]. It runs in one of two progress modes:
//!
//! - **engine thread** ([`Context`], [`Qp`]): a thread of its own busy-polls while there
//!   is work and sleeps in the datapath when idle; applications talk to it over crossbeam
//!   channels (work requests in, completions out);
//! - **caller's thread** ([`Worker`]): the application's thread calls
//!   [`Worker::progress`], which runs the same loop body once (datagrams in, timers, CQs,
//!   datagrams out) with no channel or thread hop; posts go straight into the transport.
//!
//! Both in the shape of verbs:
//!
//! | verbs                         | mrc                                              |
//! |-------------------------------|--------------------------------------------------|
//! | `ibv_open_device` + PD        | [`Context::new`] (io_uring UDP) / [`Context::with_datapath`] |
//! | `ibv_create_qp`               | [`Context::create_qp`] -> [`Qp`]                  |
//! | `ibv_reg_mr` on the caller's memory | [`Qp::reg_mr_shared`] ([`SharedMem`]), `unsafe` [`Qp::reg_mr_raw`] (pointer and length); [`Qp::reg_mr`]: memory inside the engine |
//! | `ibv_dereg_mr`                | [`Qp::dereg_mr`] (refused while a work request names the region) |
//! | perftest's TCP exchange + `ibv_modify_qp` to RTR/RTS | [`Qp::connect_tcp`] / [`Qp::accept`] |
//! | `ibv_post_send` / `ibv_post_recv` | [`Qp::post_write`], [`Qp::post_write_with_imm`], [`Qp::post_send`], [`Qp::post_recv`] |
//! | `ibv_poll_cq` (send / recv CQ) | [`Qp::poll_send_cq`], [`Qp::poll_recv_cq`], [`Qp::wait_send_cq`], [`Qp::wait_recv_cq`] |
//!
//! Each QP holds at most `max_send_wr` send and `max_recv_wr` receive work requests
//! (`ConnConfig`, default 16384 each), counted from the post until the application takes
//! the completion, as verbs counts them; a post beyond is refused at once with
//! [`PostError::SendQueueFull`] / [`PostError::RecvQueueFull`] (`ENOMEM` in the C
//! faces).
//!
//! Posting does not wait for the engine: a work request the transport refuses comes back
//! as an error completion (`Flushed` for a bad state, `LocalProtectionError` for a bad
//! local buffer); a local buffer outside every region registered through this handle is
//! refused at once with [`PostError::LocalAccess`].
//!
//! Memory registered with [`Qp::reg_mr_shared`] or [`Qp::reg_mr_raw`] belongs to the
//! application: the transport places received payload straight into it and reads send
//! payload straight from it (one copy each way, between the datagram buffer and the
//! application's bytes; nothing crosses a channel). A [`SharedMem`] is read and written
//! by the application at any time under its lock; raw memory follows the verbs contract
//! of [`mrc_transport::region::mem`]. [`Qp::reg_mr`] keeps the older engine-owned
//! region, which [`Qp::write_mr`] / [`Qp::read_mr`] / [`Qp::fill_pattern`] fill and read
//! through the engine's channel (on a `SharedMem` region they copy on the caller's
//! thread). [`Qp::set_verify`] is a test aid that checks the
//! `--verify` pattern inside the engine; `mrc-perf` checks it in the application.

pub mod bootstrap;
pub mod pattern;
pub mod setup;
pub mod setup_udp;
pub mod source;
mod thread;
mod watch;
mod worker;

pub use setup::{
    ConnHandle, ConnectId, HandleError, ListenOptions, ListenerId, SetupCarrier, SetupStats,
};
pub use worker::Worker;

use crate::datapath::{Datapath, DatapathError, DatapathStats, PathMap, Waker};
use crate::udp::{UdpConfig, UringDatapath};
use bootstrap::{BootstrapError, QpInfo, RemoteMr};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use mrc_congestion::{AnyController, CcKind, LinkParams};
use mrc_transport::completion::Completion;
use mrc_transport::region::{AccessError, MrKey};
use mrc_transport::region::{RawMem, SharedMem};
use mrc_transport::send::SendConfig;
use mrc_transport::stats::{ConnStats, EvStats};
use mrc_transport::{
    Access, ConnConfig, ConnState, DeregisterError, PeerParams, PostError, Psn, Sge,
};
use source::SourceDrops;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;
use thread::{Engine, QpEntry};

/// Largest `tx_batch` that [`EngineConfig::gso_tx_batch`] (and so the default) chooses,
/// datagrams.
pub const MAX_TX_BATCH: usize = 256;

/// Engine tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Datagrams per `tx_burst` at most. Default 240: [`EngineConfig::gso_tx_batch`] for
    /// the transport's default connection (4096-byte payload, 16 EVs, one EV socket each),
    /// so that on the io_uring datapath, which groups a burst by socket, every EV socket
    /// gets whole 15-datagram GSO sends. A connection with another payload size or EV
    /// count gets its own from [`EngineConfig::gso_tx_batch`]. (It was 64: 4 datagrams per
    /// socket per burst; the NCCL plugin's `bw` harness, 512 KiB messages, measured
    /// 2.11 GB/s at 64 and 2.99 at 240, medians of 5, docs/PERFORMANCE.md.) The direct
    /// datapath ([`crate::udp::DirectDatapath`]) makes one GSO send of consecutive
    /// datagrams of one socket only, so a sprayed burst gains nothing there from the
    /// size; `mrcx`'s contexts keep 64.
    pub tx_batch: usize,
    /// Bytes per send slot; must hold `mtu_payload_bytes + 56`, and 24 more for a QP with
    /// authentication on ([`Qp::set_auth`]). Default 9216.
    pub slot_bytes: usize,
    /// Datagrams per `rx_burst` call, about. Default 256.
    pub rx_burst: usize,
    /// Keep polling this long after the last work before sleeping, ns. Default 50 us.
    pub spin_ns: u64,
    /// Longest sleep when idle, ns (commands and datagrams wake the engine earlier).
    /// Default 50 ms.
    pub max_sleep_ns: u64,
}

impl EngineConfig {
    /// `tx_batch` for connections whose data packets carry `mtu_payload_bytes` of payload
    /// (plus [`mrc_transport::conn::MAX_DATA_HEADER_BYTES`] of headers, and
    /// [`mrc_transport::auth::AUTH_TRAILER_BYTES`] with `authenticated`) over `sockets` EV
    /// sockets: whole GSO sends for each socket, at most [`MAX_TX_BATCH`]
    /// ([`crate::udp::gso_tx_batch`]). 240 at 4096 bytes over 16 sockets, with or without
    /// authentication.
    pub fn gso_tx_batch(mtu_payload_bytes: usize, sockets: usize, authenticated: bool) -> usize {
        let trailer = if authenticated {
            mrc_transport::auth::AUTH_TRAILER_BYTES
        } else {
            0
        };
        let datagram_bytes = mtu_payload_bytes
            .saturating_add(mrc_transport::conn::MAX_DATA_HEADER_BYTES)
            .saturating_add(trailer);
        crate::udp::gso_tx_batch(datagram_bytes, sockets, MAX_TX_BATCH)
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        let conn = ConnConfig::default();
        EngineConfig {
            tx_batch: EngineConfig::gso_tx_batch(
                conn.send.mtu_payload_bytes as usize,
                conn.evs.len(),
                false,
            ),
            slot_bytes: 9216,
            rx_burst: 256,
            spin_ns: 50_000,
            max_sleep_ns: 50_000_000,
        }
    }
}

/// Configuration of one QP.
#[derive(Clone, Debug)]
pub struct QpConfig {
    /// Transport configuration; `local_qpn`, `initial_psn`, `generation` and `seed` are
    /// chosen by [`Context::create_qp`].
    pub conn: ConnConfig,
    /// Congestion controller.
    pub cc: CcKind,
    /// What the controller presets assume about the path.
    pub link: LinkParams,
    /// EVs sharing one socket (packets-per-EV burst; 1 = one source port per EV).
    pub evs_per_socket: usize,
    /// Optional sticky SRH per socket (IPv6).
    pub srh: Vec<crate::srv6::SrhRepr>,
    /// Optional firewall mark per socket ([`crate::datapath::PathMap::marks`]).
    pub marks: Vec<u32>,
}

/// RTO floor of a QP on a software datapath, ns: 20 ms. The transport's own default (200 us,
/// with a 1 ms initial RTO) suits a fabric whose endpoints answer within microseconds, such
/// as the simulator's; an engine thread on a shared core can be descheduled for
/// milliseconds, and its first 1 MiB burst on loopback took more than 1 ms to be
/// acknowledged (`examples/embed.rs` then resent 64 of 257 packets on every run). Measured
/// on the SRv6 testbed (2 cores, load average 5-7): with a 2 ms floor about one run in four
/// fired spurious RTOs, with 20 ms none. Losses are found by RACK and tail loss probes
/// first; the RTO is the last resort.
pub const SOFTWARE_MIN_RTO_NS: u64 = 20_000_000;

/// RACK reorder-window floor and assumed peer ACK delay of a QP on a software datapath,
/// ns: 500 us (scheduling jitter of the engine threads).
pub const SOFTWARE_REORDER_WINDOW_NS: u64 = 500_000;

/// The transport's send configuration with the timers of a software datapath: RTO floor
/// `min_rto_ns`, four times it as initial RTO (before the first RTT sample) and at least as
/// the RTO ceiling, `reorder_window_ns` as reorder-window floor and as the peer's assumed
/// ACK delay, giving up after the peer was silent for
/// [`mrc_transport::send::DEFAULT_UNRESPONSIVE_BUDGET_NS`] (5 s; not after a count of RTO
/// expiries: a paused peer or a descheduled engine is survived up to it), an RTO expiry
/// resending only the oldest packet in flight (`SendConfig::rto_probe_oldest`: most of a
/// software datapath's expiries are stalls, not loss), and a reorder window that widens on
/// spurious losses (`SendConfig::adaptive_reorder_window`, RFC 8985 6.2); the rest as
/// [`SendConfig::default`]. [`QpConfig::default`] passes
/// [`SOFTWARE_MIN_RTO_NS`] and [`SOFTWARE_REORDER_WINDOW_NS`].
pub fn software_send_config(min_rto_ns: u64, reorder_window_ns: u64) -> SendConfig {
    let d = SendConfig::default();
    let initial_rto_ns = min_rto_ns.saturating_mul(4);
    SendConfig {
        min_rto_ns,
        initial_rto_ns,
        max_rto_ns: d.max_rto_ns.max(initial_rto_ns),
        min_reorder_window_ns: reorder_window_ns,
        peer_max_ack_delay_ns: reorder_window_ns,
        unresponsive_budget_ns: Some(mrc_transport::send::DEFAULT_UNRESPONSIVE_BUDGET_NS),
        rto_probe_oldest: true,
        adaptive_reorder_window: true,
        ..d
    }
}

/// Pacing credit of a QP on a software datapath, ns (`ConnConfig::pacing_burst_ns`): 50 us,
/// the engine's wake-up lateness when it sleeps between paced packets.
pub const SOFTWARE_PACING_BURST_NS: u64 = 50_000;

/// The transport's connection configuration with the timers of a software datapath: the
/// sender's of [`software_send_config`], and EV revalidation
/// (`ConnConfig::revalidate_ev_after_ns`) after half the RTO floor, as the transport's
/// default is half its own 200 us floor. The transport's 100 us suits a fabric whose
/// endpoints answer within microseconds; an engine thread descheduled for a millisecond
/// would otherwise take its unused EVs out of the rotation for a probe round trip (one
/// run of the SRv6 testbed's spread test saw a spine 10% off the mean). The rest as
/// [`ConnConfig::default`].
pub fn software_conn_config(min_rto_ns: u64, reorder_window_ns: u64) -> ConnConfig {
    ConnConfig {
        send: software_send_config(min_rto_ns, reorder_window_ns),
        revalidate_ev_after_ns: min_rto_ns / 2,
        pacing_burst_ns: SOFTWARE_PACING_BURST_NS,
        ..ConnConfig::default()
    }
}

impl Default for QpConfig {
    /// 16 EVs, no congestion control, and the timers of [`software_conn_config`] with
    /// [`SOFTWARE_MIN_RTO_NS`] and [`SOFTWARE_REORDER_WINDOW_NS`].
    fn default() -> Self {
        QpConfig {
            conn: software_conn_config(SOFTWARE_MIN_RTO_NS, SOFTWARE_REORDER_WINDOW_NS),
            cc: CcKind::None,
            link: LinkParams {
                line_rate_bps: 100_000_000_000,
                base_rtt_ns: 100_000,
                mtu_bytes: 4096,
                trimming_enabled: false,
            },
            evs_per_socket: 1,
            srh: Vec::new(),
            marks: Vec::new(),
        }
    }
}

/// The `--verify` check a receiver runs on every `RecvRdmaWithImm`: immediate `i` names
/// slot `i % slots` of region `lkey`, which must hold [`pattern::fill`] of message `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifySpec {
    /// Region checked.
    pub lkey: u32,
    /// Bytes per slot (the message size).
    pub slot_bytes: u64,
    /// Slots in the region.
    pub slots: u64,
    /// Pattern seed.
    pub seed: u64,
}

/// Results of the `--verify` checks, 64-bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyStats {
    /// Messages checked.
    pub checked_messages: u64,
    /// Bytes checked.
    pub checked_bytes: u64,
    /// Bytes that differed from the pattern.
    pub bad_bytes: u64,
}

/// Counters of an engine thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Loop iterations.
    pub loops: u64,
    /// Times it slept in the datapath.
    pub sleeps: u64,
    /// `tx_burst` calls.
    pub tx_bursts: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Datagrams for no known QP (or too short to name one).
    pub rx_unknown_qpn: u64,
    /// Datagrams for a known QP from a source its peer did not set up with (every QP's
    /// [`SourceDrops`] together): dropped before the transport saw them, never answered.
    pub rx_bad_source: u64,
    /// Datagrams the transport put on an EV that is none of the QP's (control packets
    /// echoing a peer's EV: the peer's EV list differs, or a hostile packet named it),
    /// sent on one of the QP's own EVs instead.
    pub tx_foreign_ev: u64,
    /// Datapath calls that failed.
    pub datapath_errors: u64,
    /// The datapath's counters.
    pub datapath: DatapathStats,
    /// CPU time the engine thread used so far, ns.
    pub cpu_ns: u64,
    /// EV sockets the datapath holds now, shared by all its QPs
    /// ([`Datapath::ev_sockets`]; a gauge, not a counter).
    pub ev_sockets: u64,
}

/// A snapshot of one QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpStats {
    /// Connection state.
    pub state: ConnState,
    /// Connection counters.
    pub conn: ConnStats,
    /// Per EV: the EV, its source port (0 before connect) and its counters.
    pub evs: Vec<(u32, u16, EvStats)>,
    /// Per EV, in the order of `evs`: its path state (Good, Skip, AssumedBad, Denied).
    pub ev_states: Vec<mrc_transport::path::PathState>,
    /// Per EV, in the order of `evs`: its plane (`ConnConfig::ev_planes`; all 0 on one
    /// plane).
    pub ev_planes: Vec<u8>,
    /// Per plane, plane 0 first: its state (up, or down and why) and counters
    /// (docs/PLANES.md); one entry on one plane. The per-plane sums of the EV counters
    /// come from `evs` and `ev_planes`.
    pub planes: Vec<(
        mrc_transport::path::PlaneState,
        mrc_transport::path::PlaneStats,
    )>,
    /// `--verify` results.
    pub verify: VerifyStats,
    /// Datagrams dropped for their source address, by reason ([`source::SourceFilter`]).
    pub source_drops: SourceDrops,
    /// Whether the peer's EV source ports are known and checked (else only its IP).
    pub source_ports_checked: bool,
    /// Smoothed RTT, ns.
    pub srtt_ns: u64,
    /// Why the sender gave up, once its work requests failed with `RetryExceeded` after
    /// RTO expiries (`Display`: `peer unresponsive for 5.0 s`).
    pub give_up: Option<mrc_transport::send::GiveUp>,
}

/// A work request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wr {
    Write {
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        imm: Option<u32>,
    },
    Send {
        wr_id: u64,
        sge: Sge,
        imm: Option<u32>,
    },
    Recv {
        wr_id: u64,
        sge: Sge,
    },
}

impl Wr {
    /// The wr_id and the opcode its completion will carry.
    pub(crate) fn id_opcode(&self) -> (u64, mrc_transport::completion::WcOpcode) {
        use mrc_transport::completion::WcOpcode;
        match *self {
            Wr::Write {
                wr_id, imm: None, ..
            } => (wr_id, WcOpcode::Write),
            Wr::Write { wr_id, .. } => (wr_id, WcOpcode::WriteWithImm),
            Wr::Send { wr_id, .. } => (wr_id, WcOpcode::Send),
            Wr::Recv { wr_id, .. } => (wr_id, WcOpcode::Recv),
        }
    }
}

type Reply<T> = Sender<Result<T, String>>;

pub(crate) enum Cmd {
    Shutdown,
    CreateQp {
        qpn: u32,
        entry: Box<QpEntry>,
    },
    DestroyQp {
        qpn: u32,
        /// Answered once the engine no longer holds the QP (nor its regions' memory).
        reply: Sender<()>,
    },
    RegMr {
        qpn: u32,
        mem: MrMem,
        access: Access,
        reply: Reply<MrKey>,
    },
    DeregMr {
        qpn: u32,
        lkey: u32,
        reply: Sender<Result<(), DeregisterError>>,
    },
    WriteMr {
        qpn: u32,
        lkey: u32,
        offset: u64,
        data: Vec<u8>,
        reply: Reply<()>,
    },
    ReadMr {
        qpn: u32,
        lkey: u32,
        offset: u64,
        len: usize,
        reply: Reply<Vec<u8>>,
    },
    FillPattern {
        qpn: u32,
        lkey: u32,
        offset: u64,
        len: usize,
        seed: u64,
        msg: u64,
    },
    SetVerify {
        qpn: u32,
        spec: VerifySpec,
    },
    SetAuth {
        qpn: u32,
        keys: Box<mrc_transport::auth::AuthKeys>,
        reply: Reply<()>,
    },
    Connect {
        qpn: u32,
        peer: PeerParams,
        udp: SocketAddr,
        /// The peer's [`QpInfo::plane_ips`].
        plane_ips: Vec<IpAddr>,
        reply: Reply<Vec<u16>>,
    },
    PeerPorts {
        qpn: u32,
        ports: Vec<u16>,
        reply: Reply<()>,
    },
    Post {
        qpn: u32,
        wr: Wr,
    },
    Close {
        qpn: u32,
    },
    Stats {
        qpn: u32,
        reply: Sender<(Option<QpStats>, EngineStats)>,
    },
}

/// Why an embedding call failed.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The datapath could not be set up.
    #[error(transparent)]
    Datapath(#[from] DatapathError),
    /// The bootstrap exchange failed.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The engine refused the request (the message says why).
    #[error("{0}")]
    Refused(String),
    /// The engine thread is gone.
    #[error("engine thread stopped")]
    Stopped,
    /// The peer's parameters do not fit this QP.
    #[error("incompatible peer: {0}")]
    Incompatible(String),
    /// A deregistration was refused.
    #[error(transparent)]
    Deregister(#[from] DeregisterError),
    /// Engine `index` of a context of several ([`Context::with_engines`]) could not set up
    /// its datapath on `bind`.
    #[error("engine {index} (receive socket {bind}): {source}")]
    EngineSetup {
        /// The engine's index in the context.
        index: usize,
        /// The address its receive socket was to bind.
        bind: SocketAddr,
        /// Why not.
        source: DatapathError,
    },
}

struct Shared {
    cmds: Sender<Cmd>,
    waker: Arc<dyn Waker>,
    sleeping: Arc<AtomicBool>,
    udp_addr: SocketAddr,
    /// The datapath's [`Datapath::reorders_bursts`].
    reorders_bursts: bool,
    /// The datapath's [`Datapath::plane_ips`].
    plane_ips: Vec<IpAddr>,
    /// QPNs in use in this context, shared by all its engines (each drawn at random,
    /// never two alike in the context).
    qpns: Arc<Mutex<HashSet<u32>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    fn send(&self, cmd: Cmd) -> Result<(), EngineError> {
        self.cmds.send(cmd).map_err(|_| EngineError::Stopped)?;
        if self.sleeping.load(Ordering::SeqCst) {
            self.waker.wake();
        }
        Ok(())
    }

    fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, EngineError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.send(make(tx))?;
        rx.recv()
            .map_err(|_| EngineError::Stopped)?
            .map_err(EngineError::Refused)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = self.cmds.send(Cmd::Shutdown);
        self.waker.wake();
        if let Some(t) = self.thread.lock().ok().and_then(|mut g| g.take()) {
            let _ = t.join();
        }
    }
}

/// The most engine threads one context runs ([`Context::with_engines`]).
pub const MAX_ENGINES: usize = 64;

/// A device context: one or more engine threads ([`Context::with_engines`]), each with
/// its own datapath (its receive socket, its EV sockets and its rings), the QPs spread
/// over them round-robin. Clone to share; an engine thread stops when the last clone and
/// every [`Qp`] on it are dropped.
#[derive(Clone)]
pub struct Context {
    /// Engine 0 first; never empty.
    engines: Arc<[Arc<Shared>]>,
    /// Round-robin cursor of [`Context::create_qp`].
    next: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("udp_addrs", &self.udp_addrs())
            .finish()
    }
}

/// Spawns one engine thread named `name` with an io_uring datapath built on it from
/// `udp`, its QPNs drawn from `qpns`.
fn spawn_uring_engine(
    udp: UdpConfig,
    cfg: EngineConfig,
    name: String,
    qpns: Arc<Mutex<HashSet<u32>>>,
) -> Result<Shared, EngineError> {
    // The datapath is built on the engine thread (it holds raw pointers into itself);
    // the setup result comes back over a channel.
    let (tx, rx) = crossbeam_channel::bounded(1);
    let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
    let sleeping = Arc::new(AtomicBool::new(false));
    let sl = Arc::clone(&sleeping);
    let logs = inherited_dispatch();
    let t = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            with_dispatch(logs, || match UringDatapath::new(udp) {
                Ok(dp) => {
                    let _ = tx.send(Ok((
                        dp.local_addr(),
                        dp.waker(),
                        dp.reorders_bursts(),
                        dp.plane_ips(),
                    )));
                    run_engine(dp, cfg, cmd_rx, sl);
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            })
        })
        .map_err(|e| EngineError::Refused(format!("spawn: {e}")))?;
    let (udp_addr, waker, reorders_bursts, plane_ips) =
        rx.recv().map_err(|_| EngineError::Stopped)??;
    Ok(Shared {
        cmds: cmd_tx,
        waker,
        sleeping,
        udp_addr,
        reorders_bursts,
        plane_ips,
        qpns,
        thread: Mutex::new(Some(t)),
    })
}

impl Context {
    /// A context with one engine thread on the io_uring UDP datapath
    /// (`Context::with_engines(udp, cfg, 1)`).
    ///
    /// # Errors
    /// [`EngineError::Datapath`] when the receive socket or the rings cannot be set up.
    pub fn new(udp: UdpConfig, cfg: EngineConfig) -> Result<Context, EngineError> {
        Context::with_engines(udp, cfg, 1)
    }

    /// A context with `engines` engine threads (`mrc-engine-0`, `mrc-engine-1`, ...), each
    /// with its own io_uring UDP datapath: its own receive socket, EV sockets and rings,
    /// so that `engines` cores move packets at once. [`Context::create_qp`] puts QPs on
    /// the engines round-robin; a QP lives on its engine (and its [`QpInfo::udp_port`] is
    /// that engine's receive port) until dropped. Engine `i` binds `udp.bind`'s IP at
    /// port `udp.bind.port() + i`, or at a port the kernel chooses when that port is 0.
    /// The EV ports come from `udp.ports` for all engines alike.
    ///
    /// # Errors
    /// [`EngineError::Refused`] for `engines` outside `1..=`[`MAX_ENGINES`] or a port range
    /// past 65535; [`EngineError::Datapath`] (one engine) or [`EngineError::EngineSetup`]
    /// (several: which one, on which address) when an engine's socket or rings cannot be
    /// set up (the engines already started are stopped again, their sockets closed).
    pub fn with_engines(
        udp: UdpConfig,
        cfg: EngineConfig,
        engines: usize,
    ) -> Result<Context, EngineError> {
        if !(1..=MAX_ENGINES).contains(&engines) {
            return Err(EngineError::Refused(format!(
                "engines: {engines} is outside 1..={MAX_ENGINES}"
            )));
        }
        let base = udp.bind.port();
        if base != 0 && usize::from(base) + engines - 1 > usize::from(u16::MAX) {
            return Err(EngineError::Refused(format!(
                "engines: ports {base}..={} pass 65535",
                usize::from(base) + engines - 1
            )));
        }
        let qpns = Arc::new(Mutex::new(HashSet::new()));
        let mut started = Vec::with_capacity(engines);
        for i in 0..engines {
            let mut u = udp.clone();
            if base != 0 {
                // Checked above: base + i <= 65535.
                u.bind.set_port(base + i as u16);
            }
            let name = if engines == 1 {
                "mrc-engine".to_string()
            } else {
                format!("mrc-engine-{i}")
            };
            let bind = u.bind;
            let engine =
                spawn_uring_engine(u, cfg, name, Arc::clone(&qpns)).map_err(|e| match e {
                    EngineError::Datapath(source) if engines > 1 => EngineError::EngineSetup {
                        index: i,
                        bind,
                        source,
                    },
                    e => e,
                })?;
            started.push(Arc::new(engine));
        }
        Ok(Context {
            engines: started.into(),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Engine 0: the one every QP of a one-engine context lives on.
    fn first(&self) -> &Arc<Shared> {
        &self.engines[0]
    }

    /// A random QPN (nonzero, 24 bits) not in use in this context, now marked in use.
    fn alloc_qpn(&self) -> Result<u32, EngineError> {
        let mut used = self.first().qpns.lock().map_err(|_| EngineError::Stopped)?;
        // 2^24 - 1 values: a free one is found in a few draws unless millions are in use.
        for _ in 0..64 {
            let q = (source::random_u64().map_err(EngineError::Refused)? & 0xFF_FFFF) as u32;
            if q != 0 && used.insert(q) {
                return Ok(q);
            }
        }
        Err(EngineError::Refused("no free QPN".into()))
    }

    fn free_qpn(&self, qpn: u32) {
        if let Ok(mut used) = self.first().qpns.lock() {
            used.remove(&qpn);
        }
    }

    /// A context on any datapath (e.g. [`crate::udp::FakeDatapath`]).
    pub fn with_datapath<D: Datapath + Send + 'static>(dp: D, cfg: EngineConfig) -> Context {
        let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
        let sleeping = Arc::new(AtomicBool::new(false));
        let sl = Arc::clone(&sleeping);
        let udp_addr = dp.local_addr();
        let waker = dp.waker();
        let reorders = dp.reorders_bursts();
        let plane_ips = dp.plane_ips();
        let logs = inherited_dispatch();
        let t = std::thread::spawn(move || with_dispatch(logs, || run_engine(dp, cfg, cmd_rx, sl)));
        Context::from_parts(cmd_tx, waker, sleeping, udp_addr, (reorders, plane_ips), t)
    }

    fn from_parts(
        cmds: Sender<Cmd>,
        waker: Arc<dyn Waker>,
        sleeping: Arc<AtomicBool>,
        udp_addr: SocketAddr,
        (reorders_bursts, plane_ips): (bool, Vec<IpAddr>),
        t: JoinHandle<()>,
    ) -> Context {
        let shared = Arc::new(Shared {
            cmds,
            waker,
            sleeping,
            udp_addr,
            reorders_bursts,
            plane_ips,
            qpns: Arc::new(Mutex::new(HashSet::new())),
            thread: Mutex::new(Some(t)),
        });
        Context {
            engines: vec![shared].into(),
            next: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Address of engine 0's receive socket (the only one of a one-engine context).
    pub fn udp_addr(&self) -> SocketAddr {
        self.first().udp_addr
    }

    /// The receive socket addresses of the engines, engine 0 first
    /// ([`Context::with_engines`]).
    pub fn udp_addrs(&self) -> Vec<SocketAddr> {
        self.engines.iter().map(|e| e.udp_addr).collect()
    }

    /// The number of engine threads (1 unless built by [`Context::with_engines`]).
    pub fn engines(&self) -> usize {
        self.engines.len()
    }

    /// Creates a QP in state `Init` (regions may be registered and receives posted).
    /// The QPN (nonzero, 24 bits, unique in the context), the initial PSN, the generation,
    /// the selection seed and the region key (rkeys and region addresses,
    /// [`mrc_transport::region::RegionTable::random`]) are each drawn from the operating
    /// system's CSPRNG ([`source::random_bytes`]), independent of one another.
    ///
    /// # Errors
    /// [`EngineError::Refused`] for a configuration the transport or the controller
    /// rejects; [`EngineError::Stopped`].
    /// With several engines ([`Context::with_engines`]) the QP goes to the next engine
    /// round-robin ([`Qp::engine_index`]).
    pub fn create_qp(&self, cfg: QpConfig) -> Result<Qp, EngineError> {
        let engine_index = self.next.fetch_add(1, Ordering::Relaxed) % self.engines.len();
        let engine = &self.engines[engine_index];
        let qpn = self.alloc_qpn()?;
        let (send_tx, send_rx) = crossbeam_channel::unbounded();
        let (recv_tx, recv_rx) = crossbeam_channel::unbounded();
        let cq = thread::Cq::Channel {
            send: send_tx,
            recv: recv_tx,
        };
        let (conn_cfg, entry) =
            new_qp_entry(&cfg, qpn, engine.reorders_bursts, &engine.plane_ips, cq)
                .inspect_err(|_| self.free_qpn(qpn))?;
        engine
            .send(Cmd::CreateQp {
                qpn,
                entry: Box::new(entry),
            })
            .inspect_err(|_| self.free_qpn(qpn))?;
        Ok(Qp {
            shared: Arc::clone(engine),
            engine_index,
            qpn,
            cfg: conn_cfg,
            send_cq: send_rx,
            recv_cq: recv_rx,
            mrs: Mutex::new(HashMap::new()),
            sq_used: AtomicUsize::new(0),
            rq_used: AtomicUsize::new(0),
        })
    }
}

/// A QP's transport endpoint and engine entry: `cfg` with the QPN `qpn` and, each drawn
/// from the OS CSPRNG, the initial PSN, generation, selection seed and region key;
/// completions go to `cq`. On a datapath with two or more planes (`plane_ips`,
/// [`Datapath::plane_ips`]) the EVs are spread over them in turn
/// ([`ConnConfig::interleaved_planes`]) unless `cfg.conn.ev_planes` places them already.
/// Returns the configuration in force with the entry.
fn new_qp_entry(
    cfg: &QpConfig,
    qpn: u32,
    reorders_bursts: bool,
    plane_ips: &[IpAddr],
    cq: thread::Cq,
) -> Result<(ConnConfig, QpEntry), EngineError> {
    let rng = |e: String| EngineError::Refused(e);
    let mut conn_cfg = cfg.conn.clone();
    let planes = plane_ips.len().max(1);
    if conn_cfg.ev_planes.is_empty() && planes > 1 {
        conn_cfg.ev_planes = ConnConfig::interleaved_planes(conn_cfg.evs.len(), planes as u8);
    }
    if let Some(&p) = conn_cfg
        .ev_planes
        .iter()
        .find(|&&p| usize::from(p) >= planes)
    {
        return Err(EngineError::Refused(format!(
            "an EV on plane {p}, and the datapath has {planes} plane(s)"
        )));
    }
    conn_cfg.initial_psn = Psn::new((source::random_u64().map_err(rng)? & 0xFF_FFFF) as u32);
    conn_cfg.generation = (source::random_u64().map_err(rng)? as u16).max(1);
    conn_cfg.seed = source::random_u64().map_err(rng)?;
    let mut key = [0u8; 32];
    source::random_bytes(&mut key).map_err(rng)?;
    conn_cfg.region_key = Some(key);
    conn_cfg.local_qpn = qpn;
    conn_cfg.send.burst_may_reorder |= reorders_bursts;
    let cc = AnyController::new(cfg.cc, &cfg.link)
        .map_err(|e| EngineError::Refused(format!("congestion control: {e}")))?;
    let conn = mrc_transport::Connection::new(conn_cfg.clone(), cc)
        .map_err(|e| EngineError::Refused(format!("QP configuration: {e}")))?;
    let paths = PathMap {
        evs: conn_cfg.evs.clone(),
        evs_per_socket: cfg.evs_per_socket.max(1),
        srh: cfg.srh.clone(),
        marks: cfg.marks.clone(),
        planes: conn_cfg.ev_planes.clone(),
        peers: Vec::new(),
    };
    let entry = QpEntry {
        dp_conn: None,
        own_evs: paths.evs.iter().copied().collect(),
        paths,
        cq,
        verify: None,
        vstats: VerifyStats::default(),
        sources: source::SourceFilter::default(),
        source_drops: SourceDrops::default(),
        watch: watch::Watch::new(&conn),
        conn,
    };
    Ok((conn_cfg, entry))
}

/// The [`QpInfo`] a QP with configuration `cfg` on UDP port `udp_port` sends its peer,
/// naming its remote-writable regions `regions` and, on two or more planes, the
/// datapath's address on each (`plane_ips`, [`Datapath::plane_ips`]).
fn qp_info(
    cfg: &ConnConfig,
    udp_port: u16,
    plane_ips: &[IpAddr],
    mut regions: Vec<RemoteMr>,
) -> QpInfo {
    regions.sort_by_key(|r| r.addr);
    QpInfo {
        qpn: cfg.local_qpn,
        initial_psn: cfg.initial_psn.value(),
        generation: cfg.generation,
        udp_port,
        recv_window_packets: cfg.recv_window_packets,
        mtu_payload_bytes: cfg.send.mtu_payload_bytes,
        go_back_n: cfg.go_back_n,
        regions,
        plane_ips: if plane_ips.len() > 1 {
            plane_ips.to_vec()
        } else {
            Vec::new()
        },
    }
}

/// Why an end on `ours` planes cannot talk to a peer on `theirs`
/// ([`EngineError::Incompatible`]).
pub(crate) fn planes_differ(ours: usize, theirs: usize) -> String {
    format!(
        "this end sends on {ours} plane(s) and the peer has {theirs}: give both ends one address per plane, as many (mrc-perf --bind A,B)"
    )
}

/// Whether a QP with configuration `cfg` can talk to `remote`; its transport peer
/// parameters if so.
fn peer_params(cfg: &ConnConfig, remote: &QpInfo) -> Result<PeerParams, EngineError> {
    if remote.go_back_n != cfg.go_back_n {
        return Err(EngineError::Incompatible(
            "go-back-N setting differs".into(),
        ));
    }
    if cfg.send.max_outstanding_packets > remote.recv_window_packets {
        return Err(EngineError::Incompatible(format!(
            "{} outstanding packets exceed the peer's window of {}",
            cfg.send.max_outstanding_packets, remote.recv_window_packets
        )));
    }
    // One plane per NIC port at each end, plane p to plane p: both ends need as many
    // (docs/PLANES.md; the intersection of two unequal sets has no meaning without a
    // fabric map saying which of one end's ports reaches which of the other's).
    let ours = cfg
        .ev_planes
        .iter()
        .copied()
        .max()
        .map_or(1, |p| usize::from(p) + 1);
    let theirs = remote.plane_ips.len().max(1);
    if ours != theirs {
        return Err(EngineError::Incompatible(planes_differ(ours, theirs)));
    }
    Ok(PeerParams {
        qpn: remote.qpn,
        initial_psn: Psn::new(remote.initial_psn),
        generation: remote.generation,
    })
}

/// The end of every TCP bootstrap, for a [`Qp`] and a [`Worker`] alike: `connect` to what
/// the peer sent, swap the EV source ports ([`bootstrap::exchange_ports`]) and accept
/// only the peer's (`set_ports`), then [`bootstrap::ready`] on the stream: by the time the
/// peer may post, this side's source filter is complete.
fn finish_bootstrap_with(
    remote: QpInfo,
    udp: SocketAddr,
    stream: TcpStream,
    until: Instant,
    connect: impl FnOnce(&QpInfo, SocketAddr) -> Result<Vec<u16>, EngineError>,
    set_ports: impl FnOnce(&[u16]) -> Result<(), EngineError>,
) -> Result<Connected, EngineError> {
    // What is left now, as the stream's timeouts afterwards (for the application's
    // own messages; the deadline stream leaves them at whatever was left at the end).
    let after = until
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let source_ports = connect(&remote, udp)?;
    let peer_ports = bootstrap::exchange_ports(&stream, &source_ports, until)?;
    if peer_ports.is_empty() {
        return Err(EngineError::Refused("no peer source ports".into()));
    }
    set_ports(&peer_ports)?;
    bootstrap::ready_until(&stream, until)?;
    for set in [TcpStream::set_read_timeout, TcpStream::set_write_timeout] {
        set(&stream, Some(after)).map_err(|source| BootstrapError::Io {
            what: "set timeout",
            source,
        })?;
    }
    Ok(Connected {
        remote,
        udp,
        stream,
        source_ports,
    })
}

/// The key setup of an authenticated bootstrap ([`Qp::connect_on_authenticated`]): swap
/// setup nonces and key confirmations on `stream` by `until`, derive the keys; `initiator`
/// is this end's role (the TCP connector), as in the handle setup ([`setup`]).
fn negotiate_auth(
    stream: &TcpStream,
    until: Instant,
    psk: &[u8],
    initiator: bool,
) -> Result<mrc_transport::auth::AuthKeys, EngineError> {
    use mrc_transport::auth::{AuthKeys, MIN_PSK_BYTES, key_confirmation};
    if psk.len() < MIN_PSK_BYTES {
        return Err(EngineError::Refused(format!(
            "pre-shared key of {} bytes is too short (at least {MIN_PSK_BYTES})",
            psk.len()
        )));
    }
    let mut nonce = [0u8; 32];
    source::random_bytes(&mut nonce).map_err(EngineError::Refused)?;
    let peer_nonce = bootstrap::exchange_nonces(stream, &nonce, until)?;
    if peer_nonce == nonce {
        // our own nonce reflected back: never a peer
        return Err(BootstrapError::AuthMismatch("the peer echoed this end's nonce").into());
    }
    // Roles by the TCP direction, not by the nonces: with roles from the nonces, an on-path
    // relay could join two connections of one end (or two ends that both connected or
    // both accepted) that share the pre-shared key, and each would confirm the other.
    // With fixed roles two connectors (or two acceptors) expect each other's confirmation
    // under the other role and fail here.
    let (ni, nr) = if initiator {
        (&nonce, &peer_nonce)
    } else {
        (&peer_nonce, &nonce)
    };
    let refused = |e: mrc_transport::auth::AuthKeyError| EngineError::Refused(e.to_string());
    let mine = key_confirmation(psk, ni, nr, initiator).map_err(refused)?;
    let want = key_confirmation(psk, ni, nr, !initiator).map_err(refused)?;
    if bootstrap::exchange_confirmations(stream, &mine, until)? != want {
        return Err(BootstrapError::AuthMismatch("the peer's pre-shared key differs").into());
    }
    AuthKeys::derive(psk, ni, nr, initiator).map_err(refused)
}

/// The `tracing` subscriber the engine thread logs to: the one in scope where the
/// [`Context`] is made (`tracing::subscriber::with_default`, e.g. a test's), `None` for
/// the global default (which may also be installed later).
fn inherited_dispatch() -> Option<tracing::Dispatch> {
    let d = tracing::dispatcher::get_default(|d| d.clone());
    (!d.is::<tracing::subscriber::NoSubscriber>()).then_some(d)
}

fn with_dispatch<T>(d: Option<tracing::Dispatch>, f: impl FnOnce() -> T) -> T {
    match d {
        Some(d) => tracing::dispatcher::with_default(&d, f),
        None => f(),
    }
}

fn run_engine<D: Datapath>(
    dp: D,
    cfg: EngineConfig,
    cmds: Receiver<Cmd>,
    sleeping: Arc<AtomicBool>,
) {
    Engine::new(dp, cfg).run(cmds, sleeping);
}

/// A queue pair: one reliable multipath connection, its regions and its two CQs.
pub struct Qp {
    /// The engine this QP lives on.
    shared: Arc<Shared>,
    /// Its index in the context ([`Qp::engine_index`]).
    engine_index: usize,
    qpn: u32,
    cfg: ConnConfig,
    send_cq: Receiver<Completion>,
    recv_cq: Receiver<Completion>,
    mrs: Mutex<HashMap<u32, MrEntry>>,
    /// Send work requests posted whose completion the application has not taken yet
    /// (verbs frees a send queue slot at `ibv_poll_cq`): at most `cfg.max_send_wr`.
    sq_used: AtomicUsize,
    /// Receives posted whose completion the application has not taken yet: at most
    /// `cfg.max_recv_wr`.
    rq_used: AtomicUsize,
}

/// What a [`Qp`] handle remembers of a region it registered.
#[derive(Debug)]
struct MrEntry {
    key: MrKey,
    access: Access,
    /// The buffer, for a [`SharedMem`] region.
    mem: Option<SharedMem>,
}

/// The memory behind a registration on its way to the engine.
#[derive(Debug)]
pub(crate) enum MrMem {
    /// A zero-filled region of this many bytes owned by the engine's region table.
    Owned(usize),
    Shared(SharedMem),
    Raw(RawMem),
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("qpn", &self.qpn).finish()
    }
}

/// Dropping a `Qp` destroys its transport on the engine thread and waits until the
/// engine has done so: once `drop` returns the engine never touches the QP's regions
/// again, so memory registered with [`Qp::reg_mr_raw`] may be freed (the engine may be
/// in the middle of a burst of datagrams for this QP when the drop starts; it finishes
/// that burst first). Do not drop a `Qp` while holding the lock of one of its
/// [`SharedMem`] regions ([`SharedMem::with`]): the engine may be waiting for it.
impl Drop for Qp {
    fn drop(&mut self) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self
            .shared
            .send(Cmd::DestroyQp {
                qpn: self.qpn,
                reply: tx,
            })
            .is_ok()
        {
            // Err: the engine thread is gone (and with it the QP).
            let _ = rx.recv();
        }
        if let Ok(mut used) = self.shared.qpns.lock() {
            used.remove(&self.qpn);
        }
    }
}

/// The outcome of a bootstrap: what the peer said, where its UDP socket is, and the TCP
/// stream (still open, for the application's own messages).
#[derive(Debug)]
pub struct Connected {
    /// The peer's parameters and regions.
    pub remote: QpInfo,
    /// The peer's UDP receive address.
    pub udp: SocketAddr,
    /// The bootstrap stream.
    pub stream: TcpStream,
    /// Source ports of this side's EV sockets.
    pub source_ports: Vec<u16>,
}

impl Qp {
    /// The QPN.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The transport configuration in force (with the chosen QPN, PSN, generation).
    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }

    /// Which of its context's engines this QP lives on: 0 in a one-engine context, else
    /// its place in [`Context::create_qp`]'s round-robin ([`Context::udp_addrs`] order).
    pub fn engine_index(&self) -> usize {
        self.engine_index
    }

    /// The receive socket address of this QP's engine (the peer sends here).
    pub fn udp_addr(&self) -> SocketAddr {
        self.shared.udp_addr
    }

    /// Registers a zero-filled region of `len` bytes owned by the engine (the transport's
    /// region table), filled and read with [`Qp::write_mr`] / [`Qp::read_mr`] /
    /// [`Qp::fill_pattern`], copies made on the engine thread in order with the posts.
    /// For memory the application owns, use [`Qp::reg_mr_shared`] or [`Qp::reg_mr_raw`].
    ///
    /// # Errors
    /// [`EngineError::Refused`] (table full, or `len > isize::MAX`: no buffer can be that
    /// large), [`EngineError::Stopped`].
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<MrKey, EngineError> {
        // Checked here: the engine thread would panic allocating it, and die.
        if len > isize::MAX as usize {
            return Err(EngineError::Refused(format!(
                "a region of {len} bytes cannot exist"
            )));
        }
        self.register(MrMem::Owned(len), access, None)
    }

    /// Registers the application's [`SharedMem`] `mem`: the transport places received
    /// payload straight into it and sends straight from it (one copy each way, between
    /// the datagram buffer and `mem`); the application reads and writes it through its own
    /// clone at any time, each access under the buffer's lock.
    ///
    /// # Errors
    /// As [`Qp::reg_mr`].
    pub fn reg_mr_shared(&self, mem: &SharedMem, access: Access) -> Result<MrKey, EngineError> {
        self.register(MrMem::Shared(mem.clone()), access, Some(mem.clone()))
    }

    /// Registers `len` bytes the application owns at `ptr` (verbs `ibv_reg_mr`): the
    /// transport places received payload at `ptr` and sends from it until
    /// [`Qp::dereg_mr`] succeeds or the `Qp` is dropped (`drop` waits for the engine to
    /// let go of the QP).
    ///
    /// # Safety
    /// The contract of [`mrc_transport::region::mem`]: `ptr .. ptr + len` stays valid and
    /// unmoved until deregistered, and is not touched (nor borrowed) by anyone else while
    /// the thread driving this QP may access it. With the engine thread driving it that
    /// means: only while no work request names the bytes and no peer can write them, as
    /// the application's protocol ensures (a posted send's source until its completion is
    /// polled; a remote-writable region while peers may write). On a [`Worker`], whose
    /// progress runs on the caller's thread, it means: not during a call on the worker.
    ///
    /// # Errors
    /// [`EngineError::Refused`] for a null `ptr` with `len > 0`, `len > isize::MAX` or a
    /// range that wraps past the end of the address space;
    /// else as [`Qp::reg_mr`].
    pub unsafe fn reg_mr_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MrKey, EngineError> {
        // SAFETY: the caller's contract is RawMem::new's.
        let mem = unsafe { RawMem::new(ptr, len) }
            .ok_or_else(|| EngineError::Refused("null or oversized memory".into()))?;
        self.register(MrMem::Raw(mem), access, None)
    }

    fn register(
        &self,
        mem: MrMem,
        access: Access,
        shared: Option<SharedMem>,
    ) -> Result<MrKey, EngineError> {
        let qpn = self.qpn;
        let k = self.shared.call(|reply| Cmd::RegMr {
            qpn,
            mem,
            access,
            reply,
        })?;
        self.mrs.lock().map_err(|_| EngineError::Stopped)?.insert(
            k.lkey,
            MrEntry {
                key: k,
                access,
                mem: shared,
            },
        );
        Ok(k)
    }

    /// Deregisters region `lkey` (verbs `ibv_dereg_mr`). Refused while a work request
    /// still names it; once this returns `Ok` the transport never touches the bytes again
    /// (memory of [`Qp::reg_mr_raw`] may be freed).
    ///
    /// # Errors
    /// [`EngineError::Deregister`] with [`DeregisterError::InUse`] (sends and receives
    /// still posted in it) or [`DeregisterError::UnknownKey`]; [`EngineError::Stopped`].
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), EngineError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.shared.send(Cmd::DeregMr {
            qpn: self.qpn,
            lkey,
            reply: tx,
        })?;
        rx.recv().map_err(|_| EngineError::Stopped)??;
        if let Ok(mut m) = self.mrs.lock() {
            m.remove(&lkey);
        }
        Ok(())
    }

    /// The [`SharedMem`] of region `lkey` (from [`Qp::reg_mr_shared`]); `None` for an
    /// engine-owned or raw region or an unknown key.
    pub fn mem(&self, lkey: u32) -> Option<SharedMem> {
        self.mrs.lock().ok()?.get(&lkey)?.mem.clone()
    }

    fn offset(offset: u64) -> Result<usize, EngineError> {
        usize::try_from(offset).map_err(|e| EngineError::Refused(e.to_string()))
    }

    /// Copies `data` into region `lkey` at byte `offset`: for a [`SharedMem`] region here,
    /// under its lock; for an engine-owned one ([`Qp::reg_mr`]) on the engine thread.
    ///
    /// # Errors
    /// [`EngineError::Refused`] for an unknown or raw region or a range outside it.
    pub fn write_mr(&self, lkey: u32, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        if let Some(m) = self.mem(lkey) {
            return m
                .write_at(Self::offset(offset)?, data)
                .map_err(|e| EngineError::Refused(e.to_string()));
        }
        let qpn = self.qpn;
        let data = data.to_vec();
        self.shared.call(|reply| Cmd::WriteMr {
            qpn,
            lkey,
            offset,
            data,
            reply,
        })
    }

    /// Copies `len` bytes of region `lkey` from byte `offset` (as [`Qp::write_mr`]).
    ///
    /// # Errors
    /// As [`Qp::write_mr`].
    pub fn read_mr(&self, lkey: u32, offset: u64, len: usize) -> Result<Vec<u8>, EngineError> {
        if let Some(m) = self.mem(lkey) {
            // The range is checked before anything is allocated.
            return m
                .with_range(Self::offset(offset)?, len, <[u8]>::to_vec)
                .map_err(|e| EngineError::Refused(e.to_string()));
        }
        let qpn = self.qpn;
        self.shared.call(|reply| Cmd::ReadMr {
            qpn,
            lkey,
            offset,
            len,
            reply,
        })
    }

    /// Fills `len` bytes of region `lkey` at `offset` with the [`pattern`] of message `msg`:
    /// for a [`SharedMem`] region here, under its lock; for an engine-owned one inside the
    /// engine, ordered before later posts (a bad range is then ignored).
    ///
    /// # Errors
    /// As [`Qp::write_mr`] (a `SharedMem` region); [`EngineError::Stopped`].
    pub fn fill_pattern(
        &self,
        lkey: u32,
        offset: u64,
        len: usize,
        seed: u64,
        msg: u64,
    ) -> Result<(), EngineError> {
        if let Some(m) = self.mem(lkey) {
            return m
                .with_range_mut(Self::offset(offset)?, len, |b| pattern::fill(b, seed, msg))
                .map_err(|e| EngineError::Refused(e.to_string()));
        }
        self.shared.send(Cmd::FillPattern {
            qpn: self.qpn,
            lkey,
            offset,
            len,
            seed,
            msg,
        })
    }

    /// Checks every `RecvRdmaWithImm` from now on against `spec` (see [`VerifySpec`]).
    ///
    /// # Errors
    /// [`EngineError::Stopped`].
    pub fn set_verify(&self, spec: VerifySpec) -> Result<(), EngineError> {
        self.shared.send(Cmd::SetVerify {
            qpn: self.qpn,
            spec,
        })
    }

    /// Turns per-packet authentication and encryption on for this QP
    /// ([`mrc_transport::auth`]; keys from [`mrc_transport::auth::AuthKeys::derive`] with a
    /// pre-shared key and both ends' setup nonces). Both ends do it before they connect;
    /// from then on a datagram without a valid tag, or replayed, is dropped before the
    /// transport parses it (counted as `AuthFailed` / `Replayed`).
    ///
    /// # Errors
    /// [`EngineError::Refused`] once the QP is connected; [`EngineError::Stopped`].
    pub fn set_auth(&self, keys: mrc_transport::auth::AuthKeys) -> Result<(), EngineError> {
        let qpn = self.qpn;
        let keys = Box::new(keys);
        self.shared.call(|reply| Cmd::SetAuth { qpn, keys, reply })
    }

    /// What this side tells a peer: QPN, PSN, generation, UDP port, window, and every
    /// region registered with `REMOTE_WRITE`.
    pub fn local_info(&self) -> QpInfo {
        let regions: Vec<RemoteMr> = self
            .mrs
            .lock()
            .map(|m| {
                m.values()
                    .filter(|e| e.access.contains(Access::REMOTE_WRITE))
                    .map(|e| RemoteMr::from(e.key))
                    .collect()
            })
            .unwrap_or_default();
        qp_info(
            &self.cfg,
            self.shared.udp_addr.port(),
            &self.shared.plane_ips,
            regions,
        )
    }

    /// Moves the QP to `Ready` with the peer's parameters and opens the EV sockets to
    /// `udp` (verbs RTR + RTS). Returns the EV sockets' source ports. From then on the QP
    /// accepts datagrams from `udp`'s IP only ([`source::SourceFilter`]); call
    /// [`Qp::set_peer_source_ports`] with the peer's EV source ports to accept only those
    /// (the TCP bootstrap does). A peer on several planes ([`QpInfo::plane_ips`]) gets
    /// each plane's EVs at its address on the plane (port `udp`'s), and datagrams from
    /// any of those addresses are accepted; `udp`'s IP (where the bootstrap reached it)
    /// must be one of them.
    ///
    /// # Errors
    /// [`EngineError::Incompatible`] (go-back-N disagreement, our outstanding limit
    /// above the peer's window, another number of planes), [`EngineError::Refused`]
    /// (state, ports, sockets, `udp`'s IP not among the peer's plane addresses).
    pub fn connect(&self, remote: &QpInfo, udp: SocketAddr) -> Result<Vec<u16>, EngineError> {
        let peer = peer_params(&self.cfg, remote)?;
        let qpn = self.qpn;
        let plane_ips = remote.plane_ips.clone();
        self.shared.call(|reply| Cmd::Connect {
            qpn,
            peer,
            udp,
            plane_ips,
            reply,
        })
    }

    /// Accepts datagrams only from these source ports of the peer's IP (the peer's EV
    /// sockets' ports, [`Connected::source_ports`] on its side); others are dropped and
    /// counted in [`QpStats::source_drops`]. An empty list is refused (it would drop
    /// everything).
    ///
    /// # Errors
    /// [`EngineError::Refused`] (no such QP, empty list), [`EngineError::Stopped`].
    pub fn set_peer_source_ports(&self, ports: &[u16]) -> Result<(), EngineError> {
        if ports.is_empty() {
            return Err(EngineError::Refused("no peer source ports".into()));
        }
        let qpn = self.qpn;
        let ports = ports.to_vec();
        self.shared
            .call(|reply| Cmd::PeerPorts { qpn, ports, reply })
    }

    /// Client side of the TCP bootstrap: connects to `server`, exchanges [`QpInfo`],
    /// [`Qp::connect`]s, then waits until the peer's QP is connected too
    /// ([`bootstrap::ready`]), so a work request posted after it returns is not lost to
    /// an unconnected peer.
    ///
    /// # Errors
    /// [`EngineError::Bootstrap`] (refused, timed out, bad peer), as [`Qp::connect`].
    pub fn connect_tcp(
        &self,
        server: impl ToSocketAddrs + std::fmt::Debug,
        timeout: Duration,
    ) -> Result<Connected, EngineError> {
        let until = bootstrap::deadline_after(timeout);
        let (remote, udp, stream) = bootstrap::connect(server, &self.local_info(), timeout)?;
        self.finish_bootstrap(remote, udp, stream, until)
    }

    /// Server side of the TCP bootstrap: accepts one client on `listener`, exchanges
    /// [`QpInfo`], [`Qp::connect`]s, then waits for the peer's [`bootstrap::ready`]; all
    /// of it after the accept within `timeout`.
    ///
    /// # Errors
    /// As [`Qp::connect_tcp`].
    pub fn accept(
        &self,
        listener: &TcpListener,
        timeout: Duration,
    ) -> Result<Connected, EngineError> {
        let (s, _) = listener.accept().map_err(|source| BootstrapError::Io {
            what: "accept",
            source,
        })?;
        self.connect_on(s, timeout)
    }

    /// The bootstrap on a TCP stream the application already opened (either side):
    /// exchanges [`QpInfo`], [`Qp::connect`]s, then waits for the peer's
    /// [`bootstrap::ready`].
    ///
    /// # Errors
    /// As [`Qp::connect_tcp`].
    pub fn connect_on(
        &self,
        stream: TcpStream,
        timeout: Duration,
    ) -> Result<Connected, EngineError> {
        self.connect_on_until(stream, bootstrap::deadline_after(timeout))
    }

    /// [`Qp::connect_on`] with a deadline for the whole exchange (QpInfo, source ports,
    /// ready; [`bootstrap::DeadlineStream`]): a peer that is slow anywhere in it fails
    /// with [`BootstrapError::TimedOut`] at `until`, however it paces its bytes.
    ///
    /// # Errors
    /// As [`Qp::connect_tcp`].
    pub fn connect_on_until(
        &self,
        stream: TcpStream,
        until: Instant,
    ) -> Result<Connected, EngineError> {
        let (remote, udp, stream) = bootstrap::exchange_until(stream, &self.local_info(), until)?;
        self.finish_bootstrap(remote, udp, stream, until)
    }

    /// [`Qp::connect_on_until`] with per-packet authentication and encryption
    /// ([`mrc_transport::auth`]): both ends first swap 32-byte setup nonces from the OS
    /// CSPRNG ([`bootstrap::exchange_nonces`]) and key confirmations
    /// ([`bootstrap::exchange_confirmations`]: a peer without the same pre-shared key `psk`
    /// fails here), derive the connection's keys from the nonces and `psk`, and turn
    /// authentication on ([`Qp::set_auth`]) before the rest of the bootstrap, which is
    /// [`Qp::connect_on_until`]'s. `initiator`: this end opened the TCP connection (the
    /// other end accepted it); both ends claiming the same role fail the key confirmation.
    ///
    /// # Errors
    /// As [`Qp::connect_tcp`]; [`EngineError::Refused`] for a `psk` shorter than
    /// [`mrc_transport::auth::MIN_PSK_BYTES`] (checked before anything is sent) or a failing
    /// CSPRNG; [`BootstrapError::AuthMismatch`] when only one end authenticates, the keys
    /// differ, both ends claim the same role, or the peer echoes this end's nonce.
    pub fn connect_on_authenticated(
        &self,
        stream: TcpStream,
        until: Instant,
        psk: &[u8],
        initiator: bool,
    ) -> Result<Connected, EngineError> {
        let keys = negotiate_auth(&stream, until, psk, initiator)?;
        self.set_auth(keys)?;
        self.connect_on_until(stream, until)
    }

    /// The end of every TCP bootstrap: [`Qp::connect`] to what the peer sent, swap the EV
    /// source ports ([`bootstrap::exchange_ports`]) and accept only the peer's
    /// ([`Qp::set_peer_source_ports`]), then [`bootstrap::ready`] on the stream: by the
    /// time the peer may post, this side's source filter is complete.
    fn finish_bootstrap(
        &self,
        remote: QpInfo,
        udp: SocketAddr,
        stream: TcpStream,
        until: Instant,
    ) -> Result<Connected, EngineError> {
        finish_bootstrap_with(
            remote,
            udp,
            stream,
            until,
            |r, u| self.connect(r, u),
            |p| self.set_peer_source_ports(p),
        )
    }

    fn check_sge(&self, sge: &Sge, need: Option<Access>) -> Result<(), PostError> {
        let mrs = self
            .mrs
            .lock()
            .map_err(|_| PostError::LocalAccess(AccessError::UnknownKey(sge.lkey)))?;
        let MrEntry { key: k, access, .. } = mrs
            .get(&sge.lkey)
            .ok_or(PostError::LocalAccess(AccessError::UnknownKey(sge.lkey)))?;
        let end = sge.addr.checked_add(u64::from(sge.len));
        if sge.addr < k.addr || end.is_none_or(|e| e > k.addr + k.len) {
            return Err(PostError::LocalAccess(AccessError::OutOfBounds {
                addr: sge.addr,
                len: u64::from(sge.len),
            }));
        }
        if let Some(n) = need
            && !access.contains(n)
        {
            return Err(PostError::LocalAccess(AccessError::NoAccess));
        }
        Ok(())
    }

    /// Takes a slot of the send or receive queue for `wr` and hands it to the engine.
    fn post(&self, wr: Wr) -> Result<(), PostError> {
        let recv = matches!(wr, Wr::Recv { .. });
        let (used, cap) = if recv {
            (&self.rq_used, self.cfg.max_recv_wr)
        } else {
            (&self.sq_used, self.cfg.max_send_wr)
        };
        let cap = cap as usize;
        if used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_err()
        {
            return Err(if recv {
                PostError::RecvQueueFull {
                    max_recv_wr: self.cfg.max_recv_wr,
                }
            } else {
                PostError::SendQueueFull {
                    max_send_wr: self.cfg.max_send_wr,
                }
            });
        }
        self.shared
            .send(Cmd::Post { qpn: self.qpn, wr })
            .map_err(|_| {
                used.fetch_sub(1, Ordering::AcqRel);
                PostError::BadState(ConnState::Error)
            })
    }

    /// The application took `n` completions of one queue: their slots are free.
    fn taken(used: &AtomicUsize, n: usize) {
        if n > 0 {
            let _ = used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
        }
    }

    /// Posts an RDMA WRITE of `sge` to `remote_addr` in the peer region `rkey`.
    ///
    /// # Errors
    /// [`PostError::LocalAccess`] when `sge` is outside every region of this QP;
    /// [`PostError::SendQueueFull`] when `max_send_wr` (`QpConfig::conn`, default 16384)
    /// send work requests are posted whose completions were not yet taken
    /// ([`Qp::poll_send_cq`] / [`Qp::wait_send_cq`] free their slots);
    /// [`PostError::BadState`] when the engine is gone.
    pub fn post_write(
        &self,
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), PostError> {
        self.write(wr_id, sge, remote_addr, rkey, None)
    }

    /// Posts an RDMA WRITE with immediate data (the peer gets a `RecvRdmaWithImm`).
    ///
    /// # Errors
    /// As [`Qp::post_write`].
    pub fn post_write_with_imm(
        &self,
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), PostError> {
        self.write(wr_id, sge, remote_addr, rkey, Some(imm))
    }

    fn write(
        &self,
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> Result<(), PostError> {
        self.check_sge(&sge, None)?;
        self.post(Wr::Write {
            wr_id,
            sge,
            remote_addr,
            rkey,
            imm,
        })
    }

    /// Posts a SEND (optionally with immediate data) into the peer's next posted receive.
    ///
    /// # Errors
    /// As [`Qp::post_write`].
    pub fn post_send(&self, wr_id: u64, sge: Sge, imm: Option<u32>) -> Result<(), PostError> {
        self.check_sge(&sge, None)?;
        self.post(Wr::Send { wr_id, sge, imm })
    }

    /// Posts a receive buffer (needs `LOCAL_WRITE` unless zero-length).
    ///
    /// # Errors
    /// As [`Qp::post_write`] ([`PostError::RecvQueueFull`] at `max_recv_wr` receives whose
    /// completions were not taken), plus [`AccessError::NoAccess`] without `LOCAL_WRITE`.
    pub fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<(), PostError> {
        let need = (sge.len > 0).then_some(Access::LOCAL_WRITE);
        self.check_sge(&sge, need)?;
        self.post(Wr::Recv { wr_id, sge })
    }

    /// Starts draining: no new work requests; outstanding ones finish.
    ///
    /// # Errors
    /// [`EngineError::Stopped`].
    pub fn close(&self) -> Result<(), EngineError> {
        self.shared.send(Cmd::Close { qpn: self.qpn })
    }

    /// Moves up to `max` send-side completions into `out` without blocking; returns how many.
    pub fn poll_send_cq(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let n = poll(&self.send_cq, out, max);
        Self::taken(&self.sq_used, n);
        n
    }

    /// Moves up to `max` receive-side completions into `out` without blocking.
    pub fn poll_recv_cq(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let n = poll(&self.recv_cq, out, max);
        Self::taken(&self.rq_used, n);
        n
    }

    /// Waits up to `timeout` for the next send-side completion.
    ///
    /// # Errors
    /// [`EngineError::Stopped`] when the engine is gone; `Ok(None)` on timeout.
    pub fn wait_send_cq(&self, timeout: Duration) -> Result<Option<Completion>, EngineError> {
        let c = wait(&self.send_cq, timeout)?;
        Self::taken(&self.sq_used, usize::from(c.is_some()));
        Ok(c)
    }

    /// Waits up to `timeout` for the next receive-side completion.
    ///
    /// # Errors
    /// As [`Qp::wait_send_cq`].
    pub fn wait_recv_cq(&self, timeout: Duration) -> Result<Option<Completion>, EngineError> {
        let c = wait(&self.recv_cq, timeout)?;
        Self::taken(&self.rq_used, usize::from(c.is_some()));
        Ok(c)
    }

    /// Counters of this QP and of the engine.
    ///
    /// # Errors
    /// [`EngineError::Stopped`]; [`EngineError::Refused`] if the QP is gone.
    pub fn stats(&self) -> Result<(QpStats, EngineStats), EngineError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.shared.send(Cmd::Stats {
            qpn: self.qpn,
            reply: tx,
        })?;
        let (q, e) = rx.recv().map_err(|_| EngineError::Stopped)?;
        Ok((q.ok_or_else(|| EngineError::Refused("QP gone".into()))?, e))
    }
}

fn poll(rx: &Receiver<Completion>, out: &mut Vec<Completion>, max: usize) -> usize {
    let mut n = 0;
    while n < max {
        match rx.try_recv() {
            Ok(c) => {
                out.push(c);
                n += 1;
            }
            Err(_) => break,
        }
    }
    n
}

fn wait(rx: &Receiver<Completion>, timeout: Duration) -> Result<Option<Completion>, EngineError> {
    match rx.recv_timeout(timeout) {
        Ok(c) => Ok(Some(c)),
        Err(RecvTimeoutError::Timeout) => Ok(None),
        Err(RecvTimeoutError::Disconnected) => Err(EngineError::Stopped),
    }
}

#[cfg(test)]
mod tests {
    use super::{EngineConfig, MAX_TX_BATCH};

    /// Bursts of whole GSO sends for every EV socket: 4152-byte data packets (4096 of
    /// payload, 56 of headers) go 15 to a 64 KiB send, so 16 sockets take 240; the
    /// authentication trailer (24) keeps 15; 1024-byte payloads (1080-byte packets) go 60 to
    /// a send, so 4 sockets take 240; 8192-byte payloads go 7, 16 sockets 224; 65000 bytes
    /// one per send, the cap.
    #[test]
    fn the_default_burst_fills_whole_gso_sends_of_the_default_connection() {
        assert_eq!(EngineConfig::default().tx_batch, 240);
        assert_eq!(EngineConfig::gso_tx_batch(4096, 16, false), 240);
        assert_eq!(EngineConfig::gso_tx_batch(4096, 16, true), 240);
        assert_eq!(EngineConfig::gso_tx_batch(1024, 4, false), 240);
        assert_eq!(EngineConfig::gso_tx_batch(8192, 16, false), 224);
        assert_eq!(EngineConfig::gso_tx_batch(65_000, 16, true), MAX_TX_BATCH);
    }
}
