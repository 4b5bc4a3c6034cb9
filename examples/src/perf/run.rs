//! The test loops of `mrc-perf`: sender (bw), receiver (bw), ping and pong (lat), the
//! control messages on the bootstrap TCP stream, and the server/client/loopback roles.

use super::opts::{Fabric, ProgressMode, ServerLimits, TestKind, TestParams, UdpIo};
use super::report::{self, EvLine, Interval, Meter, ProgressOpts, Report};
use super::verbs::{self, VerbsOpts};
use mrc_congestion::CcKind;
use mrc_fabric::datapath::Datapath;
use mrc_fabric::engine::bootstrap::RemoteMr;
use mrc_fabric::engine::{
    Context, EngineConfig, EngineError, EngineStats, Qp, QpConfig, QpStats, VerifyStats, Worker,
    pattern,
};
use mrc_fabric::udp::{DirectDatapath, UdpConfig, UringDatapath};
use mrc_transport::completion::{Completion, WcOpcode, WcStatus};
use mrc_transport::conn::{DEFAULT_MAX_RECV_WR, DEFAULT_MAX_SEND_WR};
use mrc_transport::region::{MrKey, SharedMem};
use mrc_transport::send::SendConfig;
use mrc_transport::{Access, ConnConfig, PostError, Sge};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A message on the bootstrap stream after the QpInfo exchange (one JSON object a line).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ctl {
    /// This side's sender posted its last message; `sent` messages in all.
    Done {
        /// Messages sent.
        sent: u64,
    },
    /// This side's receiver finished.
    Result(RecvResult),
}

/// What a receiver saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecvResult {
    /// Receive completions (messages).
    pub completions: u64,
    /// Bytes in them.
    pub bytes: u64,
    /// Messages whose every byte was checked.
    pub verified_messages: u64,
    /// Bytes checked.
    pub verified_bytes: u64,
    /// Bytes that differed.
    pub bad_bytes: u64,
    /// Datagrams this end's connection dropped (hostile, stale or duplicate), by
    /// [`mrc_transport::stats::DropReason`] name; reasons with none are left out.
    #[serde(default)]
    pub drops: std::collections::BTreeMap<String, u64>,
    /// Datagrams this end's engine found no QP for (shorter than a BTH, or another QPN).
    #[serde(default)]
    pub unknown_qpn: u64,
    /// Datagrams this end's engine dropped for their source address (not the peer's),
    /// before the transport saw them.
    #[serde(default)]
    pub source_drops: SourceDropCounts,
    /// Nanoseconds from the start of the receive loop to its last completion (bw).
    #[serde(default)]
    pub elapsed_ns: u64,
    /// Highest receive rate over 100 ms windows, bytes/s (bw).
    #[serde(default)]
    pub peak_bytes_per_s: u64,
}

/// [`mrc_fabric::engine::source::SourceDrops`] in a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceDropCounts {
    /// Before the QP was connected.
    pub before_connect: u64,
    /// From another IP than the peer's.
    pub wrong_ip: u64,
    /// From the peer's IP, another port than its EV sockets'.
    pub wrong_port: u64,
}

impl SourceDropCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.before_connect + self.wrong_ip + self.wrong_port
    }
}

impl From<mrc_fabric::engine::source::SourceDrops> for SourceDropCounts {
    fn from(d: mrc_fabric::engine::source::SourceDrops) -> Self {
        SourceDropCounts {
            before_connect: d.before_connect,
            wrong_ip: d.wrong_ip,
            wrong_port: d.wrong_port,
        }
    }
}

/// Every [`mrc_transport::stats::DropReason`], for reports.
pub const DROP_REASONS: [mrc_transport::stats::DropReason; mrc_transport::stats::DROP_REASONS] = {
    use mrc_transport::stats::DropReason as D;
    [
        D::Malformed,
        D::UnknownOpcode,
        D::WrongQpn,
        D::GenerationMismatch,
        D::NotConnected,
        D::PsnOutOfWindow,
        D::Duplicate,
        D::BadRkey,
        D::OutOfBounds,
        D::AccessDenied,
        D::InconsistentMessage,
        D::RecvBufferTooSmall,
        D::InvalidAck,
        D::OutOfOrderGoBackN,
        D::StaleProbeReply,
        D::MessageWindowFull,
        D::ReceiverNotReady,
        D::AuthFailed,
        D::Replayed,
        D::StagingFull,
        D::StalePortStatus,
    ]
};

impl RecvResult {
    /// Datagrams dropped in all: by the connection, for no QP and for a foreign source.
    pub fn dropped(&self) -> u64 {
        self.drops.values().sum::<u64>() + self.unknown_qpn + self.source_drops.total()
    }

    /// Of [`RecvResult::dropped`], copies of packets already received (reasons
    /// `Duplicate` and `StaleProbeReply`): what a retransmission or tail loss probe of
    /// the sending end leaves when its original arrived after all.
    pub fn duplicates(&self) -> u64 {
        ["Duplicate", "StaleProbeReply"]
            .iter()
            .filter_map(|k| self.drops.get(*k))
            .sum()
    }

    /// `dropped_datagrams 12 (Duplicate 10, BadRkey 2), 3 for no QP; duplicate_datagrams
    /// 10 (...)`: the names of [`super::report::DROP_COUNTERS`].
    pub fn drops_text(&self) -> String {
        let by: Vec<String> = self.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let mut o = format!("dropped_datagrams {}", self.dropped());
        if !by.is_empty() {
            o += &format!(" ({})", by.join(", "));
        }
        if self.unknown_qpn > 0 {
            o += &format!(", {} for no QP", self.unknown_qpn);
        }
        let sd = &self.source_drops;
        if sd.total() > 0 {
            o += &format!(
                ", {} from a foreign source (wrong IP {}, wrong port {}, before connect {})",
                sd.total(),
                sd.wrong_ip,
                sd.wrong_port,
                sd.before_connect
            );
        }
        let dup = self.duplicates();
        if dup > 0 {
            o += &format!(
                "; duplicate_datagrams {dup} (copies of packets already received: normal \
                 after a retransmission or tail loss probe of the sending end)"
            );
        }
        o
    }
}

/// How this host opens its datapath (not sent to the peer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LocalFabric {
    /// io_uring UDP.
    #[default]
    Udp,
    /// RDMA UD QPs on this device.
    Verbs(VerbsOpts),
}

impl LocalFabric {
    /// The fabric both ends must agree on.
    pub fn kind(&self) -> Fabric {
        match self {
            LocalFabric::Udp => Fabric::Udp,
            LocalFabric::Verbs(_) => Fabric::Verbs,
        }
    }
}

/// What this host sets for its own end, whatever the peer asks (not sent to the peer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalOpts {
    /// The datapath.
    pub fabric: LocalFabric,
    /// IPv4 TOS / IPv6 traffic class byte of this end's datagrams (`--dscp`, `--tclass`;
    /// the ECN bits are the transport's): [`UdpConfig::traffic_class`].
    pub traffic_class: u8,
    /// The CPU this end's engine thread runs on (`--cpu`), or any.
    pub engine_cpu: Option<usize>,
    /// The UDP datapath's optional mechanics (`--udp-multishot`, `--udp-zerocopy`,
    /// `--udp-coop-taskrun`).
    pub udp: UdpMechanics,
    /// Whether the two regions are advised onto transparent huge pages (`--huge-pages`):
    /// [`mrc_fabric::mem::zeroed_region`].
    pub huge_pages: bool,
    /// A context this end's QP is created in instead of a context of its own
    /// (`loopback --engines K`: the `-q` QPs of one end share one context of K engine
    /// threads); UDP with `--progress thread` only.
    pub context: Option<SharedContext>,
}

/// A [`Context`] several ends share ([`LocalOpts::context`]); two are equal when they are
/// the same context.
#[derive(Clone, Debug)]
pub struct SharedContext(pub Arc<Context>);

impl PartialEq for SharedContext {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedContext {}

/// A UDP context of `engines` engine threads for ends running the test `p` with `local`'s
/// datapath options, receive sockets bound at `udp_bind` (its port and the next
/// `engines - 1`, or kernel-chosen ports for port 0): [`Context::with_engines`].
///
/// # Errors
/// The engine's setup error, as text.
pub fn shared_context(
    p: &TestParams,
    udp_bind: SocketAddr,
    local: &LocalOpts,
    engines: usize,
) -> Result<SharedContext, String> {
    let ctx = Context::with_engines(udp_config(p, udp_bind, local), engine_config(p), engines)
        .map_err(|e| format!("cannot open {engines} UDP engines on {udp_bind}: {e}"))?;
    Ok(SharedContext(Arc::new(ctx)))
}

/// The optional mechanics of the io_uring UDP datapath an end uses; the default is the
/// [`UdpConfig`] default (multishot receive and cooperative task work on, zero-copy off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpMechanics {
    /// [`UdpConfig::rx_multishot`].
    pub multishot: bool,
    /// [`UdpConfig::tx_zerocopy`].
    pub zerocopy: bool,
    /// [`UdpConfig::coop_taskrun`].
    pub coop_taskrun: bool,
}

impl Default for UdpMechanics {
    fn default() -> Self {
        let d = UdpConfig::default();
        UdpMechanics {
            multishot: d.rx_multishot,
            zerocopy: d.tx_zerocopy,
            coop_taskrun: d.coop_taskrun,
        }
    }
}

impl UdpMechanics {
    /// `cfg` with these mechanics.
    pub fn apply(&self, cfg: UdpConfig) -> UdpConfig {
        UdpConfig {
            rx_multishot: self.multishot,
            tx_zerocopy: self.zerocopy,
            coop_taskrun: self.coop_taskrun,
            ..cfg
        }
    }
}

/// The CPUs this thread may run on (`sched_getaffinity`).
///
/// # Errors
/// The system call's error, as text.
pub fn thread_cpus() -> Result<Vec<usize>, String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size is the set's.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        return Err(format!(
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: CPU_ISSET reads the set within CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

fn set_thread_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < CPU_SETSIZE (checked by the callers).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is this thread; the set and its size are valid.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` (which starts the engine thread) with this thread pinned to `cpu`, then
/// restores this thread's CPUs: a new thread inherits its creator's affinity
/// (sched_setaffinity(2)), so the engine thread alone stays on `cpu`. `None`: `f` as is.
///
/// # Errors
/// `--cpu N: ...` when this process may not run on CPU `cpu` (no such CPU, or outside
/// its cpuset), naming the CPUs it may run on.
pub fn with_cpu<T>(cpu: Option<usize>, f: impl FnOnce() -> T) -> Result<T, String> {
    let Some(cpu) = cpu else {
        return Ok(f());
    };
    let before = check_cpu(cpu)?;
    set_thread_cpus(&[cpu]).map_err(|e| format!("--cpu {cpu}: sched_setaffinity: {e}"))?;
    let out = f();
    set_thread_cpus(&before).map_err(|e| format!("restoring the CPUs of this thread: {e}"))?;
    Ok(out)
}

/// Checks that this thread may run on `cpu` (`--cpu`, before anything starts); returns
/// the CPUs it may run on.
///
/// # Errors
/// `cpu` is not among them (the message names the set), or `sched_getaffinity` failed.
pub fn check_cpu(cpu: usize) -> Result<Vec<usize>, String> {
    let cpus = thread_cpus()?;
    if !cpus.contains(&cpu) {
        return Err(format!(
            "--cpu {cpu}: not a CPU this process may run on (it may run on {})",
            cpu_list(&cpus)
        ));
    }
    Ok(cpus)
}

/// `0-3,6`: CPU numbers in ranges.
fn cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// A caller-progressed end's worker, on the datapath chosen at run time (UDP with
/// `--udp-io`'s choice, or verbs).
pub type CallerWorker = Worker<Box<dyn Datapath + Send>>;

/// Who drives one end's QP: an engine thread (the test's thread posts and polls over
/// channels) or the test's thread itself through a [`Worker`].
// One per side, made once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum Endpoint {
    /// `--progress thread`.
    Thread {
        /// The engine.
        ctx: Context,
        /// The QP.
        qp: Qp,
    },
    /// `--progress caller`: progressed by whichever test thread holds the lock (one
    /// thread, except a bidirectional bw test's sender and receiver).
    Caller {
        /// The worker.
        worker: Mutex<CallerWorker>,
        /// Its QP.
        qpn: u32,
    },
}

/// One end: its endpoint, its two regions (application memory: `SharedMem`s this side
/// fills and checks itself) and its `--verify` counters.
pub struct Side {
    /// Who drives the QP.
    pub ep: Endpoint,
    /// Region data is sent from.
    pub src: MrKey,
    /// Region the peer writes into.
    pub dst: MrKey,
    /// The bytes of `src`.
    pub src_mem: SharedMem,
    /// The bytes of `dst`.
    pub dst_mem: SharedMem,
    /// What `--verify` checked on this side's thread(s).
    pub verified: Mutex<VerifyStats>,
    /// With `--fabric verbs`: the peer table and this side's UD endpoint address.
    pub verbs: Option<(
        mrc_fabric::verbs::PeerBook,
        mrc_fabric::verbs::addr::EndpointAddr,
    )>,
}

impl Side {
    fn worker(&self) -> Option<(std::sync::MutexGuard<'_, CallerWorker>, u32)> {
        match &self.ep {
            Endpoint::Caller { worker, qpn } => {
                Some((worker.lock().unwrap_or_else(|e| e.into_inner()), *qpn))
            }
            Endpoint::Thread { .. } => None,
        }
    }

    /// The receive address of the engine this end's QP lives on (`--progress thread`).
    pub fn engine_addr(&self) -> Option<SocketAddr> {
        match &self.ep {
            Endpoint::Thread { qp, .. } => Some(qp.udp_addr()),
            Endpoint::Caller { .. } => None,
        }
    }

    /// Counters of the QP and its engine.
    ///
    /// # Errors
    /// The engine or the QP is gone.
    pub fn stats(&self) -> Result<(QpStats, EngineStats), EngineError> {
        match &self.ep {
            Endpoint::Thread { qp, .. } => qp.stats(),
            Endpoint::Caller { worker, qpn } => {
                worker.lock().unwrap_or_else(|e| e.into_inner()).stats(*qpn)
            }
        }
    }

    fn post_write_with_imm(
        &self,
        wr_id: u64,
        sge: Sge,
        remote: RemoteMr,
        off: u64,
        imm: u32,
    ) -> Result<(), PostError> {
        let addr = remote.addr + off;
        match &self.ep {
            Endpoint::Thread { qp, .. } => {
                qp.post_write_with_imm(wr_id, sge, addr, remote.rkey, imm)
            }
            Endpoint::Caller { .. } => {
                let (mut w, qpn) = self.worker().expect("caller endpoint");
                w.post_write_with_imm(qpn, wr_id, sge, addr, remote.rkey, imm)
            }
        }
    }

    fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<(), PostError> {
        match &self.ep {
            Endpoint::Thread { qp, .. } => qp.post_recv(wr_id, sge),
            Endpoint::Caller { .. } => {
                let (mut w, qpn) = self.worker().expect("caller endpoint");
                w.post_recv(qpn, wr_id, sge)
            }
        }
    }

    /// Moves up to `max` completions of one side of the CQ into `out` (progressing a
    /// caller endpoint once first).
    fn poll_cq(&self, recv_side: bool, out: &mut Vec<Completion>, max: usize) -> usize {
        match &self.ep {
            Endpoint::Thread { qp, .. } if recv_side => qp.poll_recv_cq(out, max),
            Endpoint::Thread { qp, .. } => qp.poll_send_cq(out, max),
            Endpoint::Caller { .. } => {
                let (mut w, qpn) = self.worker().expect("caller endpoint");
                w.progress();
                let mut n = 0;
                while n < max {
                    let c = if recv_side {
                        w.poll_recv_cq(qpn)
                    } else {
                        w.poll_send_cq(qpn)
                    };
                    let Some(c) = c else { break };
                    out.push(c);
                    n += 1;
                }
                n
            }
        }
    }

    /// Waits up to `timeout` for the next completion of one side of the CQ; a caller
    /// endpoint progresses its worker meanwhile ([`Worker::wait`]: busy-polls for
    /// `--spin-us`, then sleeps in the datapath until a datagram arrives).
    fn wait_cq(&self, recv_side: bool, timeout: Duration) -> Result<Option<Completion>, String> {
        match &self.ep {
            Endpoint::Thread { qp, .. } if recv_side => qp.wait_recv_cq(timeout),
            Endpoint::Thread { qp, .. } => qp.wait_send_cq(timeout),
            Endpoint::Caller { worker, qpn } => {
                let until = Instant::now() + timeout;
                loop {
                    {
                        let mut w = worker.lock().unwrap_or_else(|e| e.into_inner());
                        let c = if recv_side {
                            w.poll_recv_cq(*qpn)
                        } else {
                            w.poll_send_cq(*qpn)
                        };
                        if c.is_some() {
                            return Ok(c);
                        }
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Ok(None);
                        }
                        w.wait(left).map_err(|e| e.to_string())?;
                    }
                }
            }
        }
        .map_err(|e| e.to_string())
    }

    /// Counts the `--verify` check of a successful `RecvRdmaWithImm` `c`: immediate `i`
    /// names slot `i mod slots` of the destination region, which must hold the pattern of
    /// message `i`. Checked here, on the test's thread, in the application's memory.
    fn verify(&self, p: &TestParams, c: &Completion) {
        if !p.verify || c.opcode != WcOpcode::RecvRdmaWithImm || c.status != WcStatus::Success {
            return;
        }
        let Some(imm) = c.imm else { return };
        let slots = (p.region_size / p.size).max(1);
        let off = (u64::from(imm) % slots) * p.size;
        let bad = usize::try_from(off).ok().and_then(|off| {
            self.dst_mem
                .with_range(off, p.size as usize, |b| {
                    pattern::count_bad(b, p.seed, u64::from(imm))
                })
                .ok()
        });
        let mut v = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        match bad {
            Some(b) => {
                v.bad_bytes += b;
                v.checked_bytes += p.size;
            }
            None => v.bad_bytes += p.size,
        }
        v.checked_messages += 1;
    }
}

/// Packets in flight and receive window: 4096 (16 MiB of 4 KiB packets; a userspace
/// engine on loopback has RTTs of hundreds of microseconds under load).
pub const OUTSTANDING_PACKETS: u32 = 4096;
/// RTO floor, ns: the engine's [`mrc_fabric::engine::SOFTWARE_MIN_RTO_NS`] (20 ms; why there).
/// `--min-rto-us` sets it.
pub const MIN_RTO_NS: u64 = mrc_fabric::engine::SOFTWARE_MIN_RTO_NS;
/// RACK reorder window floor and assumed peer ACK delay, ns: the engine's
/// [`mrc_fabric::engine::SOFTWARE_REORDER_WINDOW_NS`] (500 us, scheduling jitter).
pub const REORDER_WINDOW_NS: u64 = mrc_fabric::engine::SOFTWARE_REORDER_WINDOW_NS;

/// The QP configuration of a test: `p.paths` EVs, `--mtu`, the window of
/// [`OUTSTANDING_PACKETS`], the timers, the controller (also `mrc-perf mpi`'s QPs).
///
/// # Errors
/// An unknown `--cc`.
pub fn qp_config(p: &TestParams) -> Result<QpConfig, String> {
    let cc: CcKind = p.cc.parse().map_err(|e| format!("--cc: {e}"))?;
    let software = mrc_fabric::engine::software_conn_config(
        p.min_rto_us.saturating_mul(1000),
        p.reorder_window_us.saturating_mul(1000),
    );
    Ok(QpConfig {
        conn: ConnConfig {
            evs: (0..p.paths).collect(),
            send: SendConfig {
                mtu_payload_bytes: p.mtu,
                max_outstanding_packets: OUTSTANDING_PACKETS,
                unresponsive_budget_ns: Some((p.peer_timeout_s * 1e9) as u64),
                ..software.send
            },
            recv_window_packets: OUTSTANDING_PACKETS,
            selection: p.path_selection.into(),
            // the queues hold a test's windows (`--tx-depth` up to 65536 in flight, four
            // times that in receives posted ahead, `mpi`'s one more), at least the
            // transport's defaults
            max_send_wr: depth_u32(p.tx_depth.saturating_add(64), DEFAULT_MAX_SEND_WR),
            max_recv_wr: depth_u32(
                p.tx_depth.saturating_mul(4).saturating_add(128),
                DEFAULT_MAX_RECV_WR,
            ),
            ..software
        },
        cc,
        link: p.link(),
        evs_per_socket: p.burst_size as usize,
        srh: p.steering.srh.clone(),
        marks: p.steering.marks.clone(),
    })
}

/// A queue depth of at least `floor` that holds `want` work requests (clamped to u32).
fn depth_u32(want: u64, floor: u32) -> u32 {
    u32::try_from(want).unwrap_or(u32::MAX).max(floor)
}

/// `recvmsg`s the latency test keeps armed on an end's receive socket (io_uring), or the
/// `recvmmsg` vector length (`--udp-io direct`): one message is in flight, so at most its
/// data and the peer's SACK wait to be received.
pub const LAT_RX_SLOTS: usize = 2;

/// `recvmsg`s an end keeps armed on its receive socket: [`LAT_RX_SLOTS`] for lat with
/// `--progress caller`, else the datapath's default (32; with an engine thread 2 slots
/// gave a 99th percentile above 1 ms in two runs, not understood yet). With many receives armed on one socket, an arrival wakes
/// the polls of all of them; those that lose the race are punted to io-wq workers, which
/// then block in the socket, and later datagrams complete on a worker thread: a wake-up
/// of another thread per datagram (`perf` shows `io_wq_worker` -> `udp_recvmsg`). On the
/// loaded 2-core VM, `mrc-perf loopback --test lat -n 5000 --progress caller`: 32 slots
/// t_typical 11.6 us, t_min 11.3 us; 2 slots 10.0 us, t_min 6.2 us (three rounds of
/// 10000 at 1 and 2 slots: 6.3-9.5 us typical).
fn rx_slots(p: &TestParams) -> usize {
    match (p.test, p.progress) {
        (TestKind::Lat, ProgressMode::Caller) => LAT_RX_SLOTS,
        _ => UdpConfig::default().rx_slots,
    }
}

/// Datagrams the engine of an end running `p` hands the datapath per `tx_burst` at most
/// (`EngineConfig::tx_batch`; the raw UDP blast sends bursts of the same size): up to 256,
/// whole GSO sends of its largest data packets (payload, headers and, with `--psk-file`, the
/// authentication trailer) for each of the `--paths / --burst-size` EV sockets
/// ([`EngineConfig::gso_tx_batch`]; 240 at the defaults' 4096-byte payload and 16 EVs).
pub(crate) fn tx_batch(p: &TestParams) -> usize {
    let sockets = p.paths.div_ceil(p.burst_size.max(1)) as usize;
    EngineConfig::gso_tx_batch(p.mtu as usize, sockets, p.authenticated)
}

/// The engine tuning of an end running `p` (also `mrc-perf mpi`'s ranks).
pub(crate) fn engine_config(p: &TestParams) -> EngineConfig {
    EngineConfig {
        // headers (56) and an authentication trailer (24)
        slot_bytes: p.mtu as usize + 96,
        tx_batch: tx_batch(p),
        spin_ns: p.spin_us.saturating_mul(1000),
        ..EngineConfig::default()
    }
}

/// The UDP datapath of an end running `p` with `local`'s options, bound at `udp_bind`.
fn udp_config(p: &TestParams, udp_bind: SocketAddr, local: &LocalOpts) -> UdpConfig {
    local.udp.apply(UdpConfig {
        traffic_class: local.traffic_class,
        rx_slots: rx_slots(p),
        ..UdpConfig::bind(udp_bind)
    })
}

/// Builds one end: UDP bound to `udp_bind`, or verbs on the device of `local`; in
/// `local.context` when one is given (then `udp_bind` is the context's already).
///
/// # Errors
/// The engine's setup error, as text.
pub fn make_side(p: &TestParams, udp_bind: SocketAddr, local: &LocalOpts) -> Result<Side, String> {
    let ecfg = engine_config(p);
    let region = usize::try_from(p.region_size).map_err(|_| "region too large".to_string())?;
    let region_mem = || {
        let (bytes, advice) = mrc_fabric::mem::zeroed_region(region, local.huge_pages);
        if let mrc_fabric::mem::HugePageAdvice::Refused(e) = &advice {
            tracing::debug!("--huge-pages: madvise refused ({e}); base pages");
        }
        SharedMem::from_vec(bytes)
    };
    let src_mem = region_mem();
    let dst_mem = region_mem();
    let reg = |e: EngineError| format!("register {region} bytes: {e}");
    let (src_access, dst_access) = (
        Access::LOCAL_WRITE,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let (ep, src, dst, verbs) = match (&local.fabric, p.progress) {
        (_, ProgressMode::Caller) if local.context.is_some() => {
            return Err("--engines needs --progress thread".into());
        }
        (LocalFabric::Udp, ProgressMode::Caller) => {
            let ucfg = udp_config(p, udp_bind, local);
            let open = |e| format!("cannot open UDP datapath on {udp_bind}: {e}");
            let dp: Box<dyn Datapath + Send> = match p.udp_io {
                UdpIo::Uring => Box::new(UringDatapath::new(ucfg).map_err(open)?),
                UdpIo::Direct => Box::new(DirectDatapath::new(ucfg).map_err(open)?),
            };
            let mut w: CallerWorker = Worker::with_datapath(dp, ecfg);
            // lat: the echo's SACK leaves with the reply, one wake-up of the peer per
            // message (loopback, 5 paired runs of -n 5000 on the loaded 2-core VM:
            // median one-way 4.96-8.09 us deferred against 5.86-9.17 us not, about 1 us
            // less in each pair).
            w.set_defer_sends_after_receive(p.test == TestKind::Lat);
            let qpn = w.create_qp(qp_config(p)?).map_err(|e| e.to_string())?;
            let src = w.reg_mr_shared(qpn, &src_mem, src_access).map_err(reg)?;
            let dst = w.reg_mr_shared(qpn, &dst_mem, dst_access).map_err(reg)?;
            let ep = Endpoint::Caller {
                worker: Mutex::new(w),
                qpn,
            };
            (ep, src, dst, None)
        }
        (LocalFabric::Verbs(o), ProgressMode::Caller) => {
            // the test thread polls the device's CQs itself: no engine thread, no channels
            let e = verbs::start_worker(p, o, ecfg).map_err(|e| format!("--fabric verbs: {e}"))?;
            let mut w = e.worker;
            let qpn = w.create_qp(qp_config(p)?).map_err(|e| e.to_string())?;
            let src = w.reg_mr_shared(qpn, &src_mem, src_access).map_err(reg)?;
            let dst = w.reg_mr_shared(qpn, &dst_mem, dst_access).map_err(reg)?;
            let ep = Endpoint::Caller {
                worker: Mutex::new(w),
                qpn,
            };
            (ep, src, dst, Some((e.peers, e.local)))
        }
        (fabric, ProgressMode::Thread) => {
            let (ctx, verbs) = match (fabric, &local.context) {
                (LocalFabric::Udp, Some(shared)) => (Context::clone(&shared.0), None),
                (LocalFabric::Verbs(_), Some(_)) => {
                    return Err("--engines runs the UDP datapath only".into());
                }
                (LocalFabric::Udp, None) => {
                    let ucfg = udp_config(p, udp_bind, local);
                    let ctx = with_cpu(local.engine_cpu, || Context::new(ucfg, ecfg))?
                        .map_err(|e| format!("cannot open UDP datapath on {udp_bind}: {e}"))?;
                    (ctx, None)
                }
                (LocalFabric::Verbs(o), None) => {
                    let e = with_cpu(local.engine_cpu, || verbs::start(p, o, ecfg))?
                        .map_err(|e| format!("--fabric verbs: {e}"))?;
                    (e.ctx, Some((e.peers, e.local)))
                }
            };
            let qp = ctx.create_qp(qp_config(p)?).map_err(|e| e.to_string())?;
            let src = qp.reg_mr_shared(&src_mem, src_access).map_err(reg)?;
            let dst = qp.reg_mr_shared(&dst_mem, dst_access).map_err(reg)?;
            (Endpoint::Thread { ctx, qp }, src, dst, verbs)
        }
    };
    Ok(Side {
        ep,
        src,
        dst,
        src_mem,
        dst_mem,
        verified: Mutex::new(VerifyStats::default()),
        verbs,
    })
}

/// The control stream: a writer and a reader thread feeding a channel.
pub struct CtlStream {
    w: TcpStream,
    rx: crossbeam_channel::Receiver<Result<Ctl, String>>,
}

impl CtlStream {
    /// Wraps the bootstrap stream.
    ///
    /// # Errors
    /// `try_clone` failure.
    pub fn new(s: TcpStream) -> Result<Self, String> {
        let r = s.try_clone().map_err(|e| e.to_string())?;
        r.set_read_timeout(None).map_err(|e| e.to_string())?;
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(r).lines();
            loop {
                let msg = match lines.next() {
                    Some(Ok(l)) => serde_json::from_str::<Ctl>(&l)
                        .map_err(|e| format!("bad control message: {e}")),
                    Some(Err(e)) => Err(format!("control stream: {e}")),
                    None => Err("peer closed the control stream".into()),
                };
                let end = msg.is_err();
                if tx.send(msg).is_err() || end {
                    return;
                }
            }
        });
        Ok(CtlStream { w: s, rx })
    }

    /// Sends one message.
    ///
    /// # Errors
    /// The write error.
    pub fn send(&mut self, m: &Ctl) -> Result<(), String> {
        let mut l = serde_json::to_string(m).map_err(|e| e.to_string())?;
        l.push('\n');
        self.w
            .write_all(l.as_bytes())
            .map_err(|e| format!("control stream: {e}"))
    }
}

/// What the local sender did.
#[derive(Clone, Debug, Default)]
pub struct SendResult {
    /// Messages completed.
    pub completions: u64,
    /// Bytes in them.
    pub bytes: u64,
    /// Seconds from the first post to the last completion.
    pub elapsed_s: f64,
    /// Highest rate over 100 ms windows, bytes/s.
    pub peak_bps: f64,
    /// Highest rate of sends and receives together (`--bidirectional`) over 100 ms
    /// windows, bytes/s.
    pub peak_total_bps: f64,
    /// Latency samples (lat test), ns, one way (half the round trip).
    pub lat_ns: Vec<u64>,
    /// The `-i` intervals.
    pub intervals: Vec<Interval>,
}

/// A failed completion as an error naming its cause: for `RetryExceeded` after RTO
/// expiries, why the transport gave up (`peer unresponsive for 5.0 s`).
fn check(side: &Side, c: &Completion) -> Result<(), String> {
    if c.status != WcStatus::Success {
        let cause = match side.stats() {
            Ok((qs, _)) => qs.give_up.map(|g| format!(" ({g})")).unwrap_or_default(),
            Err(_) => String::new(),
        };
        return Err(format!(
            "work request {} ({:?}) failed: {:?}{cause}",
            c.wr_id, c.opcode, c.status
        ));
    }
    Ok(())
}

/// Sender of the bw test: WRITE_WITH_IMM of message `i` (immediate `i mod 2^32`) into
/// slot `i mod slots` of the peer's region, `tx_depth` in flight, until `iters` messages or
/// `duration_s` passed.
///
/// # Errors
/// A failed completion, or no progress for `timeout`.
pub fn send_bw(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    timeout: Duration,
    progress: ProgressOpts,
    received: &AtomicU64,
) -> (SendResult, Option<String>) {
    let slots = p.region_size / p.size;
    let (window, _) = windows(p);
    let start = Instant::now();
    let mut meter = Meter::new(progress, p.duration_s, start);
    let end = p.duration_s.map(|d| start + Duration::from_secs_f64(d));
    let (mut posted, mut done) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    let mut got = Vec::with_capacity(256);
    let mut finished_posting = false;
    // The loop as a closure so that an error still leaves the counts of what completed.
    let mut run = || -> Result<(), String> {
        loop {
            let now = Instant::now();
            if !finished_posting {
                finished_posting = match (p.iters, end) {
                    (Some(n), _) => posted >= n,
                    (None, Some(e)) => now >= e,
                    (None, None) => true,
                };
            }
            while !finished_posting && posted - done < window && p.iters.is_none_or(|n| posted < n)
            {
                if let Some(r) = p.rate_limit_gbps {
                    let due = start
                        + Duration::from_secs_f64(posted as f64 * p.size as f64 * 8.0 / (r * 1e9));
                    if Instant::now() < due {
                        break;
                    }
                }
                let off = (posted % slots) * p.size;
                fill_message(side, p, posted, off)?;
                post_message(side, remote, p, posted, off)?;
                if posted == done {
                    // Nothing was outstanding (a rate limit spaced the posts): the no-progress
                    // clock starts now, not at the last completion.
                    last_progress = Instant::now();
                }
                posted += 1;
            }
            if finished_posting && done == posted {
                break;
            }
            let wait = if p.rate_limit_gbps.is_some() {
                Duration::from_micros(200)
            } else {
                Duration::from_millis(20)
            };
            got.clear();
            if let Some(c) = side.wait_cq(false, wait)? {
                got.push(c);
                side.poll_cq(false, &mut got, 4096);
            }
            let now = Instant::now();
            if got.is_empty() {
                if done < posted && now.duration_since(last_progress) > timeout {
                    return Err(format!(
                        "no completion for {:.1} s ({done} of {posted} messages done): peer unreachable?",
                        timeout.as_secs_f64()
                    ));
                }
                continue;
            }
            last_progress = now;
            for c in &got {
                check(side, c)?;
                done += 1;
            }
            meter.tick(
                now,
                done,
                done * p.size,
                received.load(Ordering::Relaxed),
                || retransmit_counters(side),
            );
        }
        Ok(())
    };
    let failure = run().err();
    let now = Instant::now();
    let elapsed_s = now.duration_since(start).as_secs_f64();
    let bytes = done * p.size;
    let m = meter.finish(now, done, bytes, received.load(Ordering::Relaxed), || {
        retransmit_counters(side)
    });
    let avg = bytes as f64 / elapsed_s.max(1e-9);
    let r = SendResult {
        completions: done,
        bytes,
        elapsed_s,
        peak_bps: m.peak_sent_bps.max(avg),
        peak_total_bps: m.peak_total_bps,
        lat_ns: Vec::new(),
        intervals: m.intervals,
    };
    (r, failure)
}

/// This side's retransmitted packets and RTO expiries so far (0, 0 if the engine is gone).
fn retransmit_counters(side: &Side) -> (u64, u64) {
    side.stats()
        .map_or((0, 0), |(q, _)| (q.conn.retransmitted, q.conn.timeouts))
}

/// Under `--verify`, fills `p.size` bytes at offset `off` of this side's source region
/// (application memory, here on the test's thread) with the pattern of message `i mod 2^32`.
fn fill_message(side: &Side, p: &TestParams, i: u64, off: u64) -> Result<(), String> {
    if p.verify {
        let off = usize::try_from(off).map_err(|e| e.to_string())?;
        side.src_mem
            .with_range_mut(off, p.size as usize, |b| {
                pattern::fill(b, p.seed, u64::from(i as u32));
            })
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Posts message `i`: WRITE_WITH_IMM (wr_id `i`, immediate `i mod 2^32`) of `p.size` bytes
/// from offset `off` of this side's source region to offset `off` of the peer's region.
fn post_message(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    i: u64,
    off: u64,
) -> Result<(), String> {
    let sge = Sge {
        lkey: side.src.lkey,
        addr: side.src.addr + off,
        len: p.size as u32,
    };
    side.post_write_with_imm(i, sge, remote, off, i as u32)
        .map_err(|e| format!("post: {e}"))
}

/// Takes up to 64 send completions into `scratch` and fails on the first unsuccessful one.
fn reap_sends(side: &Side, scratch: &mut Vec<Completion>) -> Result<(), String> {
    scratch.clear();
    side.poll_cq(false, scratch, 64);
    scratch.iter().try_for_each(|c| check(side, c))
}

/// Receives a side posts before it connects (wr_ids `0..n`): for a bw receiver its peer's
/// TX depth plus slack for completions its thread has not reaped and reposted yet
/// (`4 x tx-depth + 64`), 64 for either end of the lat test, none for a bw sender. A
/// receiver without a free receive answers the last packet of a message with
/// NACK(RECEIVER_NOT_READY) (resent after 640 us), so a thread that falls behind slows
/// the sender instead of letting it overwrite slots whose completions are still to come;
/// posting them before the connection is up keeps the first messages from that wait.
///
/// Under `--verify` the receiver checks a slot on its own thread before it reposts the
/// receive the message took, so the receives posted ahead (`r`) and the sender's messages
/// in flight (`w`) must fit the region's slots (`r + w <= slots`): then message `i + slots`,
/// which reuses message `i`'s slot, cannot be posted before message `i` was checked.
fn initial_recvs(p: &TestParams, active: bool) -> u64 {
    match p.test {
        TestKind::Bw if !active || p.bidirectional => windows(p).1,
        TestKind::Bw => 0,
        TestKind::Lat => 64,
    }
}

/// A bw sender's messages in flight and a bw receiver's receives posted ahead: `tx-depth`
/// and `4 x tx-depth + 64`; under `--verify` as many receives as the slots left beyond
/// the depth (at least one, the depth shrinking to make room), so the two fit the region
/// ([`initial_recvs`]).
fn windows(p: &TestParams) -> (u64, u64) {
    let d = p.tx_depth.max(1);
    let ahead = 4 * d + 64;
    if !p.verify {
        return (d, ahead);
    }
    let slots = (p.region_size / p.size.max(1)).max(2);
    let w = d.min(slots - 1);
    (w, (slots - w).min(ahead))
}

/// Posts `n` zero-length receives into the destination region, wr_ids `base..base + n`.
fn post_recvs(side: &Side, n: u64, base: u64) -> Result<(), String> {
    for i in 0..n {
        side.post_recv(
            base + i,
            Sge {
                lkey: side.dst.lkey,
                addr: side.dst.addr,
                len: 0,
            },
        )
        .map_err(|e| format!("post_recv: {e}"))?;
    }
    Ok(())
}

/// Receiver of the bw test: counts `RecvRdmaWithImm` completions (immediates in order)
/// until the peer's `Done` count is reached.
///
/// # Errors
/// A failed or out-of-order completion, no progress for `timeout`, or a broken stream.
pub fn recv_bw(
    side: &Side,
    p: &TestParams,
    peer_done: &crossbeam_channel::Receiver<u64>,
    timeout: Duration,
    received: &AtomicU64,
) -> Result<RecvResult, String> {
    let depth = initial_recvs(p, false);
    let mut r = RecvResult::default();
    let mut target: Option<u64> = None;
    let mut last = Instant::now();
    let started = Instant::now();
    // In duration mode the sender's count arrives only at the end; past duration + timeout
    // the no-progress timeout applies as it does in iteration mode.
    let run_for = p.duration_s.map(Duration::from_secs_f64);
    let mut got = Vec::with_capacity(256);
    let (mut win_start, mut win_bytes) = (started, 0u64);
    loop {
        match peer_done.try_recv() {
            Ok(n) => target = Some(n),
            Err(crossbeam_channel::TryRecvError::Disconnected) if target.is_none() => {
                return Err(format!(
                    "receiver: the peer's control stream closed after {} messages, before it \
                     reported its message count (peer gone?)",
                    r.completions
                ));
            }
            Err(_) => {}
        }
        if target == Some(r.completions) {
            break;
        }
        got.clear();
        if let Some(c) = side.wait_cq(true, Duration::from_millis(20))? {
            got.push(c);
            side.poll_cq(true, &mut got, 4096);
        }
        if got.is_empty() {
            let past_run = run_for.is_none_or(|d| started.elapsed() > d + timeout);
            if last.elapsed() > timeout && (target.is_some() || past_run) {
                return Err(format!(
                    "receiver: no message for {:.1} s after {} messages",
                    timeout.as_secs_f64(),
                    r.completions
                ));
            }
            continue;
        }
        last = Instant::now();
        for c in &got {
            check(side, c)?;
            if c.opcode != WcOpcode::RecvRdmaWithImm || c.imm != Some(r.completions as u32) {
                return Err(format!(
                    "receiver: expected message {} got {:?} imm {:?}",
                    r.completions, c.opcode, c.imm
                ));
            }
            side.verify(p, c);
            r.completions += 1;
            r.bytes += u64::from(c.byte_len);
        }
        received.store(r.bytes, Ordering::Relaxed);
        r.elapsed_ns = last.duration_since(started).as_nanos() as u64;
        let w = last.duration_since(win_start);
        if w >= Duration::from_millis(100) {
            let bps = ((r.bytes - win_bytes) as f64 / w.as_secs_f64()) as u64;
            r.peak_bytes_per_s = r.peak_bytes_per_s.max(bps);
            (win_start, win_bytes) = (last, r.bytes);
        }
        post_recvs(side, got.len() as u64, depth + r.completions)?;
    }
    Ok(r)
}

/// Ping side of the lat test: WRITE_WITH_IMM of `size` bytes, wait for the peer's echo,
/// one sample per round trip (half of it, as perftest reports).
///
/// # Errors
/// A failed completion or no echo within `timeout`.
pub fn ping(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    timeout: Duration,
    progress: ProgressOpts,
) -> Result<SendResult, String> {
    let start = Instant::now();
    let mut meter = Meter::new(progress, p.duration_s, start);
    let end = p.duration_s.map(|d| start + Duration::from_secs_f64(d));
    let mut lat = Vec::with_capacity(p.iters.unwrap_or(100_000).min(10_000_000) as usize);
    let mut sent = 0u64;
    let mut scratch = Vec::new();
    loop {
        match (p.iters, end) {
            (Some(n), _) if sent >= n => break,
            (None, Some(e)) if Instant::now() >= e => break,
            _ => {}
        }
        fill_message(side, p, sent, 0)?;
        let t0 = Instant::now();
        post_message(side, remote, p, sent, 0)?;
        let c = side.wait_cq(true, timeout)?.ok_or_else(|| {
            format!(
                "no echo of message {sent} within {:.1} s: peer unreachable?",
                timeout.as_secs_f64()
            )
        })?;
        let rtt = t0.elapsed().as_nanos() as u64;
        check(side, &c)?;
        if c.imm != Some(sent as u32) {
            return Err(format!("echo of message {sent} carried imm {:?}", c.imm));
        }
        side.verify(p, &c);
        lat.push(rtt / 2);
        sent += 1;
        post_recvs(side, 1, 64 + sent)?;
        reap_sends(side, &mut scratch)?;
        meter.tick(Instant::now(), sent, sent * p.size, 0, || {
            retransmit_counters(side)
        });
    }
    let now = Instant::now();
    let m = meter.finish(now, sent, sent * p.size, 0, || retransmit_counters(side));
    Ok(SendResult {
        completions: sent,
        bytes: sent * p.size,
        elapsed_s: now.duration_since(start).as_secs_f64(),
        peak_bps: 0.0,
        peak_total_bps: 0.0,
        lat_ns: lat,
        intervals: m.intervals,
    })
}

/// Pong side of the lat test: echoes every message until the peer's `Done` count.
///
/// # Errors
/// As [`recv_bw`].
pub fn pong(
    side: &Side,
    remote: RemoteMr,
    p: &TestParams,
    peer_done: &crossbeam_channel::Receiver<u64>,
    timeout: Duration,
) -> Result<RecvResult, String> {
    let mut r = RecvResult::default();
    let mut target = None;
    let mut last = Instant::now();
    let mut scratch = Vec::new();
    loop {
        if let Ok(n) = peer_done.try_recv() {
            target = Some(n);
        }
        if target == Some(r.completions) {
            break;
        }
        let Some(c) = side.wait_cq(true, Duration::from_millis(20))? else {
            if last.elapsed() > timeout {
                return Err(format!(
                    "no ping for {:.1} s after {}",
                    timeout.as_secs_f64(),
                    r.completions
                ));
            }
            continue;
        };
        last = Instant::now();
        check(side, &c)?;
        let i = r.completions;
        if c.imm != Some(i as u32) {
            return Err(format!("expected ping {i}, got imm {:?}", c.imm));
        }
        side.verify(p, &c);
        fill_message(side, p, i, 0)?;
        post_message(side, remote, p, i, 0)?;
        r.completions += 1;
        r.bytes += u64::from(c.byte_len);
        post_recvs(side, 1, 64 + r.completions)?;
        reap_sends(side, &mut scratch)?;
    }
    Ok(r)
}

/// Everything one end measured.
#[derive(Debug, Default)]
pub struct EndResult {
    /// Its sender (bw, or ping for lat; empty on a passive end).
    pub send: Option<SendResult>,
    /// Its receiver.
    pub recv: RecvResult,
    /// What the peer's receiver reported.
    pub peer_recv: RecvResult,
    /// Per-EV lines of its QP.
    pub evs: Vec<EvLine>,
    /// Connection counters.
    pub conn: mrc_transport::stats::ConnStats,
    /// Process CPU seconds over the test.
    pub cpu_s: f64,
    /// This side's engine counters (datapath calls, errors, sleeps).
    pub engine: mrc_fabric::engine::EngineStats,
    /// The receive address of the engine behind [`EndResult::engine`] (`--progress
    /// thread`): [`EndResult::sum`] counts an engine shared by several QPs once.
    pub engine_addr: Option<SocketAddr>,
    /// Why the test failed, when this is what a failed test measured before it failed
    /// ([`RunError::partial`]); `None` for a test that ran to its end.
    pub failure: Option<String>,
}

/// A failed test: why, and what this end measured until then (a report never vanishes:
/// the client prints it with `"ok": false`).
#[derive(Debug)]
pub struct RunError {
    /// The error, as the user sees it.
    pub message: String,
    /// This end's counters and completed messages up to the failure, with
    /// [`EndResult::failure`] set; `None` when the test failed before it started (setup)
    /// or this end's engine was gone.
    pub partial: Option<Box<EndResult>>,
}

impl From<String> for RunError {
    fn from(message: String) -> Self {
        RunError {
            message,
            partial: None,
        }
    }
}

impl From<&str> for RunError {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

impl RecvResult {
    /// Adds `o`'s counts to these (drops by reason merged; the longer elapsed time; the
    /// peaks added, an upper bound of the peak of the sum).
    fn add(&mut self, o: &RecvResult) {
        self.completions += o.completions;
        self.bytes += o.bytes;
        self.verified_messages += o.verified_messages;
        self.verified_bytes += o.verified_bytes;
        self.bad_bytes += o.bad_bytes;
        for (k, v) in &o.drops {
            *self.drops.entry(k.clone()).or_default() += v;
        }
        self.unknown_qpn += o.unknown_qpn;
        self.source_drops.before_connect += o.source_drops.before_connect;
        self.source_drops.wrong_ip += o.source_drops.wrong_ip;
        self.source_drops.wrong_port += o.source_drops.wrong_port;
        self.elapsed_ns = self.elapsed_ns.max(o.elapsed_ns);
        self.peak_bytes_per_s += o.peak_bytes_per_s;
    }
}

impl EndResult {
    /// The results of several QPs run in parallel (`-q`) as one: counts summed, the
    /// longest elapsed time, peaks summed (each QP's best 100 ms window; an upper bound
    /// of the best window of the sum), interval `k` the sum of each QP's `k`-th (they
    /// start within the setup time of each other), the per-EV lines one after another,
    /// the CPU time the largest (each end measures the whole process).
    pub fn sum(all: Vec<EndResult>) -> EndResult {
        let mut out = EndResult::default();
        let mut send: Option<SendResult> = None;
        // An engine several QPs share reports its counters to each: the latest (largest)
        // snapshot counts, once.
        let mut engines: Vec<(SocketAddr, mrc_fabric::engine::EngineStats)> = Vec::new();
        for r in all {
            if let Some(s) = r.send {
                let t = send.get_or_insert_with(SendResult::default);
                t.completions += s.completions;
                t.bytes += s.bytes;
                t.elapsed_s = t.elapsed_s.max(s.elapsed_s);
                t.peak_bps += s.peak_bps;
                t.peak_total_bps += s.peak_total_bps;
                t.lat_ns.extend(s.lat_ns);
                for (k, iv) in s.intervals.into_iter().enumerate() {
                    match t.intervals.get_mut(k) {
                        None => t.intervals.push(iv),
                        Some(a) => {
                            a.start_s = a.start_s.min(iv.start_s);
                            a.end_s = a.end_s.max(iv.end_s);
                            a.sent_messages += iv.sent_messages;
                            a.sent_bytes += iv.sent_bytes;
                            a.received_bytes += iv.received_bytes;
                            a.bw_gbps += iv.bw_gbps;
                            a.bw_mib_per_s += iv.bw_mib_per_s;
                            a.retransmitted_packets += iv.retransmitted_packets;
                            a.rto_expiries += iv.rto_expiries;
                        }
                    }
                }
            }
            out.recv.add(&r.recv);
            out.peer_recv.add(&r.peer_recv);
            out.evs.extend(r.evs);
            let (c, o) = (&mut out.conn, &r.conn);
            c.sent += o.sent;
            c.retransmitted += o.retransmitted;
            c.trimmed += o.trimmed;
            c.ecn_marked += o.ecn_marked;
            c.timeouts += o.timeouts;
            c.rto_lost += o.rto_lost;
            c.rack_losses += o.rack_losses;
            c.spurious += o.spurious;
            c.tail_loss_probes += o.tail_loss_probes;
            out.cpu_s = out.cpu_s.max(r.cpu_s);
            if let Some(addr) = r.engine_addr {
                match engines.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, seen))
                        if seen.datapath.tx_datagrams < r.engine.datapath.tx_datagrams =>
                    {
                        *seen = r.engine;
                    }
                    Some(_) => {}
                    None => engines.push((addr, r.engine)),
                }
            } else {
                add_engine_stats(&mut out.engine, &r.engine);
            }
        }
        for (_, e) in &engines {
            add_engine_stats(&mut out.engine, e);
        }
        out.send = send;
        out
    }
}

/// Adds engine `o`'s counters to `e`.
fn add_engine_stats(e: &mut mrc_fabric::engine::EngineStats, o: &mrc_fabric::engine::EngineStats) {
    e.sleeps += o.sleeps;
    e.datapath.tx_datagrams += o.datapath.tx_datagrams;
    e.datapath.tx_calls += o.datapath.tx_calls;
    e.datapath.tx_errors += o.datapath.tx_errors;
    e.datapath.rx_datagrams += o.datapath.rx_datagrams;
    e.datapath.rx_calls += o.datapath.rx_calls;
    e.datapath.rx_errors += o.datapath.rx_errors;
}

/// Runs one end of the test on a connected side. `active`: the client (sender in bw,
/// pinger in lat); in bidirectional bw both send. `show_progress`: print the progress line
/// on stderr, its rate in this unit (the table's).
///
/// # Errors
/// Any test error, as text.
pub fn run_end(
    side: &Side,
    remote: RemoteMr,
    ctl: CtlStream,
    p: &TestParams,
    active: bool,
    timeout: Duration,
    show_progress: Option<ProgressOpts>,
) -> Result<EndResult, RunError> {
    // The transport names why it gives up (`peer unresponsive for N s`) after
    // `--peer-timeout`; the test's own no-progress checks wait a second longer, so that
    // cause is what a dead or paused peer is reported with.
    let timeout = timeout.max(Duration::from_secs_f64(p.peer_timeout_s + 1.0));
    let CtlStream { w, rx } = ctl;
    let mut w = CtlStream {
        w,
        rx: crossbeam_channel::never(),
    };
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let (result_tx, result_rx) = crossbeam_channel::unbounded();
    let (err_tx, err_rx) = crossbeam_channel::unbounded::<String>();
    // Demultiplex the peer's control messages.
    std::thread::spawn(move || {
        while let Ok(m) = rx.recv() {
            match m {
                Ok(Ctl::Done { sent }) => {
                    let _ = done_tx.send(sent);
                }
                Ok(Ctl::Result(r)) => {
                    let _ = result_tx.send(r);
                }
                Err(e) => {
                    let _ = err_tx.send(e);
                    return;
                }
            }
        }
    });
    let cpu0 = report::process_cpu_s();
    let sends = active || (p.bidirectional && p.test == TestKind::Bw);
    let receives = !active || (p.bidirectional && p.test == TestKind::Bw);
    let progress = show_progress.unwrap_or_else(ProgressOpts::quiet);
    let received = AtomicU64::new(0);
    // What the sender completed when it failed.
    let mut send_partial = None;
    let (send, recv) = std::thread::scope(|s| {
        let recv_h = (receives && p.test == TestKind::Bw)
            .then(|| s.spawn(|| recv_bw(side, p, &done_rx, timeout, &received)));
        let mut pong_result = None;
        let send = if p.test == TestKind::Lat {
            if active {
                ping(side, remote, p, timeout, progress).map(Some)
            } else {
                pong(side, remote, p, &done_rx, timeout).map(|r| {
                    pong_result = Some(r);
                    None
                })
            }
        } else if sends {
            match send_bw(side, remote, p, timeout, progress, &received) {
                (r, None) => Ok(Some(r)),
                (r, Some(e)) => {
                    send_partial = Some(r);
                    Err(e)
                }
            }
        } else {
            Ok(None)
        };
        if let Ok(Some(s)) = &send {
            let _ = w.send(&Ctl::Done {
                sent: s.completions,
            });
        }
        let recv = match recv_h {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err("receiver thread panicked".into())),
            None => Ok(pong_result.unwrap_or_default()),
        };
        (send, recv)
    });
    let (send, recv) = match (send, recv) {
        (Ok(s), Ok(r)) => (s, r),
        (send, recv) => {
            let (message, send) = match send {
                Ok(s) => (recv.err().unwrap_or_default(), s),
                Err(e) => (e, send_partial),
            };
            let partial = local_result(side, send, RecvResult::default(), cpu0)
                .ok()
                .map(|mut r| {
                    r.failure = Some(message.clone());
                    Box::new(r)
                });
            return Err(RunError { message, partial });
        }
    };
    let mut r = local_result(side, send, recv, cpu0)?;
    w.send(&Ctl::Result(r.recv.clone()))?;
    r.peer_recv = crossbeam_channel::select! {
        recv(result_rx) -> r => r.map_err(|_| "peer closed the control stream".to_string())?,
        recv(err_rx) -> e => return Err(e.unwrap_or_else(|_| "control stream closed".into()).into()),
        default(timeout) => return Err(format!("peer sent no result within {:.1} s", timeout.as_secs_f64()).into()),
    };
    r.cpu_s = report::process_cpu_s() - cpu0;
    Ok(r)
}

/// This end's part of an [`EndResult`]: `send`, `recv` with the QP's verify counters and
/// drops, the per-EV lines, the connection and engine counters, the CPU time since
/// `cpu0`; the peer's receiver left empty.
///
/// # Errors
/// The engine is gone (its stats cannot be read).
fn local_result(
    side: &Side,
    send: Option<SendResult>,
    mut recv: RecvResult,
    cpu0: f64,
) -> Result<EndResult, String> {
    let (qs, engine) = side.stats().map_err(|e| e.to_string())?;
    let v = *side.verified.lock().unwrap_or_else(|e| e.into_inner());
    recv.verified_messages = v.checked_messages;
    recv.verified_bytes = v.checked_bytes;
    recv.bad_bytes = v.bad_bytes;
    recv.drops = DROP_REASONS
        .iter()
        .filter(|r| qs.conn.drops.get(**r) > 0)
        .map(|r| (format!("{r:?}"), qs.conn.drops.get(*r)))
        .collect();
    recv.unknown_qpn = engine.rx_unknown_qpn;
    recv.source_drops = qs.source_drops.into();
    let cpu_s = report::process_cpu_s() - cpu0;
    let evs = qs
        .evs
        .iter()
        .zip(
            qs.ev_states
                .iter()
                .map(|s| super::srv6::state_name(*s))
                .chain(std::iter::repeat("")),
        )
        .map(|((ev, port, s), state)| EvLine {
            ev: *ev,
            port: *port,
            packets: s.sent,
            retransmits: s.retransmitted,
            trims: s.trimmed,
            ecn_marks: s.ecn_marked,
            timeouts: s.timeouts,
            state,
        })
        .collect();
    Ok(EndResult {
        send,
        recv,
        peer_recv: RecvResult::default(),
        evs,
        conn: qs.conn,
        cpu_s,
        engine,
        engine_addr: side.engine_addr(),
        failure: None,
    })
}

/// First line of the server's answer to the test parameters when it accepted them and its
/// side is ready; otherwise [`REPLY_ERROR`] and the reason.
pub const REPLY_OK: &str = "mrc-perf ok";
/// Prefix of the server's answer when it refused the test parameters or could not set up.
pub const REPLY_ERROR: &str = "mrc-perf error: ";

/// Why [`read_line`] found no line.
enum LineError {
    /// The peer closed the stream after these bytes (no newline).
    Closed(Vec<u8>),
    /// Nothing complete within the timeout.
    TimedOut,
    /// Longer than the limit without a newline (these bytes, truncated).
    TooLong(Vec<u8>),
    /// Another read error.
    Io(std::io::Error),
}

/// Reads one line (without the newline) byte by byte, so nothing after it is buffered
/// away from the binary bootstrap that follows.
/// `until` is the deadline of the whole line (each read waits only for the time left), so
/// a peer sending a byte a second cannot hold the reader past it.
fn read_line(s: &TcpStream, until: Instant, max_bytes: usize) -> Result<Vec<u8>, LineError> {
    use std::io::Read;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    let mut r = mrc_fabric::engine::bootstrap::DeadlineStream::new(s, until);
    loop {
        match r.read(&mut b) {
            Ok(0) => return Err(LineError::Closed(line)),
            Ok(_) if b[0] == b'\n' => return Ok(line),
            Ok(_) => {
                line.push(b[0]);
                if line.len() > max_bytes {
                    line.truncate(64);
                    return Err(LineError::TooLong(line));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(LineError::TimedOut);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LineError::Io(e)),
        }
    }
}

/// Why a client's test parameters line did not arrive, as `dropped client` names it.
fn params_error(e: LineError, timeout: Duration) -> String {
    match e {
        LineError::Closed(b) if b.is_empty() => {
            "client closed before sending test parameters".to_string()
        }
        LineError::Closed(b) => format!(
            "client closed after {} bytes of test parameters (no newline)",
            b.len()
        ),
        LineError::TimedOut => format!(
            "no test parameters from the client within {:.1} s",
            timeout.as_secs_f64()
        ),
        LineError::TooLong(_) => "test parameters too long".into(),
        LineError::Io(e) => format!("reading test parameters: {e}"),
    }
}

/// Longest test parameters line a server reads, bytes.
const MAX_PARAMS_BYTES: usize = 65536;

/// Connections a server holds while their test parameters arrive. With as many held, a
/// further one is accepted only in place of a silent one (nothing received for
/// [`SILENT_GRACE`]); else it waits in the kernel's backlog. A connection that sent
/// anything is never pushed out (it ends at its own deadline), and one whose parameters
/// arrived is never dropped to make room.
pub const MAX_WAITING_CLIENTS: usize = 64;

/// How long a held connection may stay silent before a newer one may take its place
/// (a real client sends its parameters at once after connecting).
pub const SILENT_GRACE: Duration = Duration::from_millis(200);

/// Connections whose test parameters arrived, waiting for their turn (one test runs at a
/// time). With as many waiting, the server accepts nothing more until one is served
/// (the rest wait in the kernel's backlog): none that spoke is dropped for room.
pub const MAX_READY_CLIENTS: usize = 4096;

/// A connection whose test parameters line is still arriving.
struct Waiting {
    s: TcpStream,
    peer: String,
    line: Vec<u8>,
    /// When it was accepted.
    accepted: Instant,
    /// The deadline of its parameters line (accept + `--timeout`).
    until: Instant,
}

/// A connection whose test parameters arrived, waiting for its turn.
struct Ready {
    s: TcpStream,
    peer: String,
    line: Vec<u8>,
}

/// What a read of a [`Waiting`] connection found.
enum Arrival {
    /// The whole line (without its newline).
    Line(Vec<u8>),
    /// Nothing more yet.
    Pending,
    /// It cannot set up: the reason.
    Failed(LineError),
}

impl Waiting {
    /// Reads what has arrived, one byte at a time (nothing after the newline is taken
    /// from the bootstrap that follows), without blocking.
    fn read(&mut self) -> Arrival {
        use std::io::Read;
        let mut b = [0u8; 1];
        loop {
            match (&self.s).read(&mut b) {
                Ok(0) => return Arrival::Failed(LineError::Closed(std::mem::take(&mut self.line))),
                Ok(_) if b[0] == b'\n' => return Arrival::Line(std::mem::take(&mut self.line)),
                Ok(_) => {
                    self.line.push(b[0]);
                    if self.line.len() > MAX_PARAMS_BYTES {
                        self.line.truncate(64);
                        return Arrival::Failed(LineError::TooLong(std::mem::take(&mut self.line)));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return if Instant::now() >= self.until {
                        Arrival::Failed(LineError::TimedOut)
                    } else {
                        Arrival::Pending
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Arrival::Failed(LineError::Io(e)),
            }
        }
    }
}

/// A server's TCP port and the connections on it whose test parameters are still
/// arriving: all of them are read at once, so silent or slow strangers do not hold back a
/// client that sends its parameters behind them (before, each was read in turn until its
/// own deadline). Kept across the clients of `--persistent`.
pub struct ClientQueue {
    listener: TcpListener,
    waiting: std::collections::VecDeque<Waiting>,
    ready: std::collections::VecDeque<Ready>,
}

impl ClientQueue {
    /// Serves clients from `listener`.
    ///
    /// # Errors
    /// The listener cannot be made non-blocking.
    pub fn new(listener: TcpListener) -> Result<Self, String> {
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(ClientQueue {
            listener,
            waiting: std::collections::VecDeque::new(),
            ready: std::collections::VecDeque::new(),
        })
    }

    /// Reads every held connection: whole lines move to the ready queue, failures
    /// (closed, too long, past the deadline) are named and dropped. Returns whether
    /// anything happened.
    fn read_waiting(&mut self, timeout: Duration) -> bool {
        let mut busy = false;
        let mut i = 0;
        while i < self.waiting.len() {
            match self.waiting[i].read() {
                Arrival::Pending => i += 1,
                Arrival::Line(line) => {
                    busy = true;
                    if let Some(w) = self.waiting.remove(i) {
                        self.ready.push_back(Ready {
                            s: w.s,
                            peer: w.peer,
                            line,
                        });
                    }
                }
                Arrival::Failed(e) => {
                    busy = true;
                    if let Some(w) = self.waiting.remove(i) {
                        eprintln!(
                            "mrc-perf server: dropped client {}: {}",
                            w.peer,
                            params_error(e, timeout)
                        );
                    }
                }
            }
        }
        busy
    }

    /// Makes room for one more held connection by dropping the oldest one that has sent
    /// nothing for [`SILENT_GRACE`]; false when there is none (then nothing more is
    /// accepted this round).
    fn drop_a_silent_one(&mut self) -> bool {
        let now = Instant::now();
        let Some(i) = self
            .waiting
            .iter()
            .position(|w| w.line.is_empty() && now.duration_since(w.accepted) >= SILENT_GRACE)
        else {
            return false;
        };
        if let Some(old) = self.waiting.remove(i) {
            eprintln!(
                "mrc-perf server: dropped client {}: silent for {} ms while                  {MAX_WAITING_CLIENTS} connections wait to send test parameters",
                old.peer,
                now.duration_since(old.accepted).as_millis()
            );
        }
        true
    }

    /// The next connection whose test parameters line arrived whole (in arrival order),
    /// with it and the deadline of the rest of its setup exchange (`timeout` from its
    /// turn: a client queued behind others' tests is not cut short); connections that fail meanwhile (closed, garbage
    /// without a newline, too long, silent past `timeout` from their accept, or silent
    /// while [`MAX_WAITING_CLIENTS`] are held) are named on stderr and dropped. Waits
    /// until `until` if given (then "no client connected" when none is waiting).
    fn next(
        &mut self,
        timeout: Duration,
        until: Option<Instant>,
    ) -> Result<(TcpStream, String, Vec<u8>, Instant), String> {
        loop {
            // what already arrived first: a client that spoke is never taken for silent
            let mut busy = self.read_waiting(timeout);
            while self.ready.len() < MAX_READY_CLIENTS {
                if self.waiting.len() >= MAX_WAITING_CLIENTS && !self.drop_a_silent_one() {
                    break; // the rest waits in the backlog
                }
                match self.listener.accept() {
                    Ok((s, a)) => {
                        busy = true;
                        s.set_nonblocking(true).map_err(|e| e.to_string())?;
                        let now = Instant::now();
                        self.waiting.push_back(Waiting {
                            s,
                            peer: a.to_string(),
                            line: Vec::new(),
                            accepted: now,
                            until: now + timeout,
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // out of descriptors or memory: leave the rest in the backlog
                        eprintln!("mrc-perf server: accept: {e}");
                        break;
                    }
                }
            }
            busy |= self.read_waiting(timeout);
            if let Some(r) = self.ready.pop_front() {
                r.s.set_nonblocking(false).map_err(|e| e.to_string())?;
                // the rest of its setup exchange: `timeout` from its turn
                return Ok((r.s, r.peer, r.line, Instant::now() + timeout));
            }
            if let Some(u) = until
                && Instant::now() > u
                && self.waiting.is_empty()
            {
                return Err("no client connected".into());
            }
            if !busy {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// Reads the server's answer to the test parameters ([`REPLY_OK`] or [`REPLY_ERROR`]).
/// How many `--timeout`s a client waits for the server's answer to its test parameters.
pub const REPLY_WAIT_TIMEOUTS: u32 = 3;

fn read_reply(
    s: &TcpStream,
    server: SocketAddr,
    timeout: Duration,
    until: Instant,
) -> Result<(), String> {
    let not_mrc = |b: &[u8]| {
        format!(
            "{server} is not an mrc-perf server (or runs another version): it answered {:?}",
            String::from_utf8_lossy(&b[..b.len().min(64)])
        )
    };
    let line = read_line(s, until, 4096).map_err(|e| match e {
        LineError::Closed(b) if b.is_empty() => format!(
            "server {server} closed the connection without answering the test parameters \
             (not an mrc-perf server?)"
        ),
        LineError::Closed(b) | LineError::TooLong(b) => not_mrc(&b),
        LineError::TimedOut => format!(
            "server {server} did not answer the test parameters within {:.1} s",
            timeout.as_secs_f64()
        ),
        LineError::Io(e) => format!("server {server}: {e}"),
    })?;
    if line == REPLY_OK.as_bytes() {
        return Ok(());
    }
    match line.strip_prefix(REPLY_ERROR.as_bytes()) {
        Some(why) => Err(format!(
            "server {server} refused the test: {}",
            String::from_utf8_lossy(why)
        )),
        None => Err(not_mrc(&line)),
    }
}

/// The peer's first advertised region, if it holds the test's `region_size` bytes (every
/// WRITE goes to `addr + slot offset`: a shorter region, or one ending near 2^64, would
/// fail the run with remote access errors or overflow the address).
fn remote_region(regions: &[RemoteMr], p: &TestParams, who: &str) -> Result<RemoteMr, String> {
    let r = *regions
        .first()
        .ok_or_else(|| format!("{who} advertised no region"))?;
    if r.len < p.region_size || r.addr.checked_add(p.region_size).is_none() {
        return Err(format!(
            "{who} advertised a region of {} bytes at {:#x}; the test needs {} bytes",
            r.len, r.addr, p.region_size
        ));
    }
    Ok(r)
}

/// Why [`serve_stream`] ended without a result.
enum ServeError {
    /// The client was bad, silent or slow during setup: drop it, wait for the next.
    Client(String),
    /// This server cannot serve (its UDP port is taken), or the test itself failed.
    Fatal(String),
}

/// Server role: takes clients from `queue` until one sets up, runs its test, returns.
/// A client that fails the setup (bad parameters or parameters over `limits`, garbage,
/// closing early, silent or slow past `timeout`, the deadline of its whole setup exchange
/// from accept to the ready barrier) is answered where it can be, named on stderr
/// (`mrc-perf server: dropped client ADDR: REASON`) and dropped; the server then takes the
/// next ([`ClientQueue`] reads every waiting connection's parameters at once).
/// `accept_timeout` bounds the wait for a client that sets up (loopback).
///
/// # Errors
/// No client within `accept_timeout`; this side cannot set up (e.g. its UDP port is
/// taken: answered to the client too); the test failed.
pub fn serve_one(
    queue: &mut ClientQueue,
    udp_bind: SocketAddr,
    timeout: Duration,
    accept_timeout: Option<Duration>,
    local: &LocalOpts,
    limits: &ServerLimits,
    psk: Option<&[u8]>,
) -> Result<(TestParams, EndResult), String> {
    let until = accept_timeout.map(|t| Instant::now() + t);
    loop {
        let (s, peer, line, setup_until) = queue.next(timeout, until)?;
        match serve_stream(s, line, setup_until, udp_bind, timeout, local, limits, psk) {
            Ok(r) => return Ok(r),
            Err(ServeError::Client(e)) => {
                eprintln!("mrc-perf server: dropped client {peer}: {e}");
            }
            Err(ServeError::Fatal(e)) => return Err(e),
        }
    }
}

/// The setup and test of the client on `s` whose test parameters `line` arrived, by the
/// deadline `until` of its whole setup exchange (from its accept, however it paces its
/// bytes).
#[allow(clippy::too_many_arguments)]
fn serve_stream(
    mut s: TcpStream,
    line: Vec<u8>,
    until: Instant,
    udp_bind: SocketAddr,
    timeout: Duration,
    local: &LocalOpts,
    limits: &ServerLimits,
    psk: Option<&[u8]>,
) -> Result<(TestParams, EndResult), ServeError> {
    use ServeError::{Client, Fatal};
    let setup = serde_json::from_slice::<TestParams>(&line)
        .map_err(|e| format!("bad test parameters: {e}"))
        .and_then(|mut p| {
            p.check(timeout.as_secs_f64())
                .map_err(|e| format!("client's test parameters: {e}"))?;
            limits
                .check(&p)
                .map_err(|e| format!("client's test parameters: {e}"))?;
            if p.fabric != local.fabric.kind() {
                return Err(format!(
                    "the client runs --fabric {} but this server runs --fabric {}",
                    p.fabric,
                    local.fabric.kind()
                ));
            }
            if let Some(mode) = p.srv6 {
                let peer = s.peer_addr().map_err(|e| e.to_string())?;
                p.steering =
                    super::srv6::steering(mode, p.srv6_via, peer.ip(), p.paths, p.burst_size)?;
            }
            Ok(p)
        })
        .map_err(Client)
        .and_then(|p| {
            make_side(&p, udp_bind, local)
                .map(|side| (p, side))
                .map_err(Fatal)
        });
    // Tell the client, so it reports the reason instead of a broken bootstrap.
    let reply = match &setup {
        Ok(_) => format!("{REPLY_OK}\n"),
        Err(Client(e) | Fatal(e)) => format!("{REPLY_ERROR}{}\n", e.replace('\n', " ")),
    };
    let sent =
        mrc_fabric::engine::bootstrap::DeadlineStream::new(&s, until).write_all(reply.as_bytes());
    let (p, side) = setup?;
    sent.map_err(|e| Client(format!("answering the client: {e}")))?;
    if let Some((book, addr)) = &side.verbs {
        let left = until.saturating_duration_since(Instant::now());
        verbs::exchange(&mut s, book, addr, left.max(Duration::from_millis(1))).map_err(Client)?;
    }
    post_recvs(&side, initial_recvs(&p, false), 0).map_err(Fatal)?;
    let c = connect_qp(&side, s, until, psk, false).map_err(Client)?;
    let remote = remote_region(&c.remote.regions, &p, "client").map_err(Client)?;
    let ctl = CtlStream::new(c.stream).map_err(Fatal)?;
    let r = run_end(&side, remote, ctl, &p, false, timeout, None).map_err(|e| Fatal(e.message))?;
    Ok((p, r))
}

/// The engine bootstrap on `s` by `until`: authenticated (per-packet AES-256-GCM under
/// keys from `psk` and fresh nonces, [`mrc_fabric::engine::Qp::connect_on_authenticated`])
/// when this end has a pre-shared key, plain otherwise; `client`: this end connected (the
/// key setup's initiator).
fn connect_qp(
    side: &Side,
    s: TcpStream,
    until: Instant,
    psk: Option<&[u8]>,
    client: bool,
) -> Result<mrc_fabric::engine::Connected, String> {
    match (&side.ep, psk) {
        (Endpoint::Thread { qp, .. }, Some(k)) => qp.connect_on_authenticated(s, until, k, client),
        (Endpoint::Thread { qp, .. }, None) => qp.connect_on_until(s, until),
        (Endpoint::Caller { worker, qpn }, psk) => {
            let mut w = worker.lock().unwrap_or_else(|e| e.into_inner());
            match psk {
                Some(k) => w.connect_on_authenticated(*qpn, s, until, k, client),
                None => w.connect_on_until(*qpn, s, until),
            }
        }
    }
    .map_err(|e| e.to_string())
}

/// Client role: connects to `server`, sends the parameters, runs; `progress` as in
/// [`run_end`].
///
/// # Errors
/// Unreachable server, any setup or test error.
pub fn run_client(
    server: SocketAddr,
    udp_bind: SocketAddr,
    p: &TestParams,
    timeout: Duration,
    progress: Option<ProgressOpts>,
    local: &LocalOpts,
    psk: Option<&[u8]>,
) -> Result<(EndResult, Vec<u16>), RunError> {
    let s = TcpStream::connect_timeout(&server, timeout)
        .map_err(|e| format!("cannot reach server {server}: {e}"))?;
    run_client_on(s, server, udp_bind, p, timeout, progress, local, psk)
}

/// The first of `servers` (every address a host name resolves to, in resolver order) that
/// accepts a TCP connection within `timeout` each: the stream and the address.
///
/// # Errors
/// None answered: every address with its error.
pub fn connect_any(
    servers: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), String> {
    let mut why = Vec::new();
    for &a in servers {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok((s, a)),
            Err(e) => why.push(format!("{a}: {e}")),
        }
    }
    Err(format!("cannot reach server {}", why.join("; ")))
}

/// [`run_client`] on a stream already connected to `server`.
///
/// # Errors
/// As [`run_client`].
#[allow(clippy::too_many_arguments)]
pub fn run_client_on(
    mut s: TcpStream,
    server: SocketAddr,
    udp_bind: SocketAddr,
    p: &TestParams,
    timeout: Duration,
    progress: Option<ProgressOpts>,
    local: &LocalOpts,
    psk: Option<&[u8]>,
) -> Result<(EndResult, Vec<u16>), RunError> {
    let until = Instant::now() + timeout;
    let mut line = serde_json::to_string(p).map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| format!("sending test parameters: {e}"))?;
    // The server sets up one client at a time and gives each up to its own --timeout: a
    // client queued behind a silent stranger waits for the server to drop it, then for its
    // own answer, so it waits up to REPLY_WAIT_TIMEOUTS timeouts (with the same timeout on
    // both ends, a wait of one failed exactly when the server dropped the stranger).
    let reply_wait = timeout * REPLY_WAIT_TIMEOUTS;
    read_reply(
        &s,
        server,
        reply_wait,
        until.max(Instant::now() + reply_wait),
    )?;
    let side = make_side(p, udp_bind, local)?;
    if let Some((book, addr)) = &side.verbs {
        verbs::exchange(&mut s, book, addr, timeout)?;
    }
    post_recvs(&side, initial_recvs(p, true), 0)?;
    // The bootstrap after the server's answer under a deadline of its own (the wait for
    // the answer may have used most of the first: the server was busy with another).
    let c = connect_qp(&side, s, Instant::now() + timeout, psk, true)?;
    let remote = remote_region(&c.remote.regions, p, "server")?;
    let ctl = CtlStream::new(c.stream)?;
    let r = run_end(&side, remote, ctl, p, true, timeout, progress)?;
    Ok((r, c.source_ports))
}

/// Prints (or returns for JSON) the client's report.
pub fn client_report(p: &TestParams, r: &EndResult, gbits: bool, json: bool, mode: &str) -> String {
    let rep = Report::new(p, r, mode);
    if json { rep.json() } else { rep.table(gbits) }
}

#[cfg(test)]
mod connect_tests {
    use super::*;

    /// A name that resolves to several addresses is tried address by address: the one
    /// refusing (nothing listens on port 1) is passed over, and the error names each.
    #[test]
    fn connect_any_tries_every_address_in_order() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let good = l.local_addr().unwrap();
        let bad: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let (_s, a) = connect_any(&[bad, good], Duration::from_secs(1)).unwrap();
        assert_eq!(a, good);
        let e = connect_any(&[bad, bad], Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.matches("127.0.0.1:1: ").count(), 2, "{e}");
        assert!(e.starts_with("cannot reach server 127.0.0.1:1: "), "{e}");
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    /// The thread started inside [`with_cpu`] runs on that CPU alone, and the caller gets
    /// its CPUs back; a CPU outside the process's set is an error naming the set.
    #[test]
    fn with_cpu_pins_the_new_thread_only() {
        let before = thread_cpus().unwrap();
        let cpu = *before.last().unwrap();
        let inner = with_cpu(Some(cpu), || {
            std::thread::spawn(|| thread_cpus().unwrap())
                .join()
                .unwrap()
        })
        .unwrap();
        assert_eq!(inner, vec![cpu]);
        assert_eq!(thread_cpus().unwrap(), before);
        let e = with_cpu(Some(100_000), || ()).unwrap_err();
        assert!(
            e.starts_with("--cpu 100000: not a CPU this process may run on (it may run on "),
            "{e}"
        );
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }
}

#[cfg(test)]
mod sum_tests {
    use super::*;

    /// `-q`: counts add up, the elapsed time is the longest, interval k sums each QP's
    /// k-th, drops by reason merge, the CPU time is the largest (not the sum: each end
    /// measures the whole process).
    #[test]
    fn sum_of_qps_exact() {
        let iv = |s: f64, e: f64, m: u64| Interval {
            start_s: s,
            end_s: e,
            sent_messages: m,
            sent_bytes: m * 10,
            bw_gbps: 1.0,
            retransmitted_packets: 1,
            ..Interval::default()
        };
        let one = |n: u64, el: f64, ivs: Vec<Interval>, dup: u64, cpu: f64| {
            let mut r = EndResult {
                send: Some(SendResult {
                    completions: n,
                    bytes: n * 10,
                    elapsed_s: el,
                    peak_bps: 100.0,
                    intervals: ivs,
                    ..SendResult::default()
                }),
                cpu_s: cpu,
                evs: vec![EvLine::default()],
                ..EndResult::default()
            };
            r.conn.sent = n;
            r.conn.rto_lost = 1;
            r.peer_recv.completions = n;
            r.peer_recv.drops.insert("Duplicate".into(), dup);
            r.engine.datapath.tx_datagrams = n;
            r
        };
        let s = EndResult::sum(vec![
            one(5, 2.0, vec![iv(0.0, 1.0, 3), iv(1.0, 2.0, 2)], 1, 0.5),
            one(
                7,
                2.5,
                vec![iv(0.1, 1.1, 4), iv(1.1, 2.1, 2), iv(2.1, 2.5, 1)],
                2,
                0.7,
            ),
        ]);
        let t = s.send.unwrap();
        assert_eq!((t.completions, t.bytes, t.elapsed_s), (12, 120, 2.5));
        assert_eq!(t.peak_bps, 200.0);
        let got: Vec<(f64, f64, u64, u64, u64)> = t
            .intervals
            .iter()
            .map(|i| {
                (
                    i.start_s,
                    i.end_s,
                    i.sent_messages,
                    i.sent_bytes,
                    i.retransmitted_packets,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0.0, 1.1, 7, 70, 2),
                (1.0, 2.1, 4, 40, 2),
                (2.1, 2.5, 1, 10, 1)
            ]
        );
        assert_eq!(t.intervals[0].bw_gbps, 2.0);
        assert_eq!((s.conn.sent, s.conn.rto_lost), (12, 2));
        assert_eq!(s.peer_recv.completions, 12);
        assert_eq!(s.peer_recv.drops["Duplicate"], 3);
        assert_eq!(s.evs.len(), 2);
        assert_eq!(s.cpu_s, 0.7);
        assert_eq!(s.engine.datapath.tx_datagrams, 12);
    }
}

#[cfg(test)]
mod preset_tests {
    use super::*;
    use mrc_congestion::{AnyController, Controller, LinkParams};

    fn params(extra: serde_json::Value) -> TestParams {
        let mut v = serde_json::json!({
            "test": "Bw", "size": 65536, "iters": 5, "duration_s": null, "paths": 16,
            "mtu": 4096, "cc": "dcqcn", "bidirectional": false, "verify": false,
            "rate_limit_gbps": null, "burst_size": 1, "tx_depth": 2, "region_size": 131072,
            "seed": 1
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    /// Issue 21: `--line-rate` and `--base-rtt-us` reach the controller the engine builds
    /// (`AnyController::new(cfg.cc, &cfg.link)`); they used to be 100 Gb/s and 200 us
    /// whatever the NIC.
    #[test]
    fn presets_get_the_line_rate_and_base_rtt_of_the_test() {
        let p = params(serde_json::json!({"line_rate_gbps": 400.0, "base_rtt_us": 10.0}));
        let q = qp_config(&p).unwrap();
        assert_eq!(q.cc, CcKind::Dcqcn);
        assert_eq!(
            q.link,
            LinkParams {
                line_rate_bps: 400_000_000_000,
                base_rtt_ns: 10_000,
                mtu_bytes: 4096,
                trimming_enabled: false,
            }
        );
        // BDP = 400 Gb/s x 10 us = 500 000 bytes.
        let dcqcn = AnyController::new(q.cc, &q.link).unwrap();
        assert_eq!(dcqcn.pacing_rate_bps(), 400_000_000_000);
        assert_eq!(dcqcn.cwnd_bytes(), 2_000_000); // 4 BDP
        let swift = AnyController::new(CcKind::Swift, &q.link).unwrap();
        assert_eq!(swift.cwnd_bytes(), 500_000); // 1 BDP
        let nscc = AnyController::new(CcKind::Nscc, &q.link).unwrap();
        assert_eq!(nscc.cwnd_bytes(), 1_000_000); // 2 BDP
        let none = AnyController::new(CcKind::None, &q.link).unwrap();
        assert_eq!(none.cwnd_bytes(), 1_000_000); // 2 BDP

        // A client that does not send them (an older mrc-perf): 100 Gb/s and 200 us.
        let q = qp_config(&params(serde_json::json!({}))).unwrap();
        assert_eq!(
            (q.link.line_rate_bps, q.link.base_rtt_ns),
            (100_000_000_000, 200_000)
        );
    }
}

#[cfg(test)]
mod verify_window_tests {
    use super::*;
    use clap::Parser;

    /// Under --verify a bw receiver's receives ahead and the sender's depth fit the slots
    /// (so a slot is checked before the sender can reuse it); without it, as before.
    #[test]
    fn receives_ahead_and_depth_fit_the_slots_under_verify() {
        let p = |args: &[&str]| {
            let mut v = vec!["mrc-perf", "loopback"];
            v.extend_from_slice(args);
            super::super::opts::Cli::parse_from(v)
                .test
                .params()
                .unwrap()
        };
        assert_eq!(windows(&p(&["-s", "65536", "-t", "16"])), (16, 4 * 16 + 64));
        // Default region under --verify: 32 slots for depth 16.
        assert_eq!(
            windows(&p(&["-s", "65536", "-t", "16", "--verify"])),
            (16, 16)
        );
        // A region of exactly depth slots: one receive ahead, one message less in flight.
        let tight = p(&[
            "-s",
            "65536",
            "-t",
            "16",
            "--region-size",
            "1048576",
            "--verify",
        ]);
        assert_eq!(windows(&tight), (15, 1));
        // Many slots: the receives ahead stop at 4 x depth + 64.
        let roomy = p(&[
            "-s",
            "4096",
            "-t",
            "4",
            "--region-size",
            "4194304",
            "--verify",
        ]);
        assert_eq!(windows(&roomy), (4, 4 * 4 + 64));
        for q in [tight, roomy] {
            let (w, r) = windows(&q);
            assert!(w + r <= q.region_size / q.size);
        }
    }
}
