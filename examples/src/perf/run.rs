//! The two sides of `mrc-perf` (CPU pinning, the datapath and regions of an end), the
//! control messages on the bootstrap TCP stream, and the server/client/loopback roles
//! with the server's queue of clients. The test loops are `perf::loops`, one end's test
//! on a connected side `perf::end`.

pub use super::end::{EndResult, RunError, run_end};
pub use super::loops::SendResult;
use super::loops::{initial_recvs, post_recvs};
use super::opts::{Fabric, ProgressMode, ServerLimits, TestKind, TestParams, UdpIo};
use super::report::{ProgressOpts, Report};
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
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
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
    /// This side ended the test early (`reason`: `interrupted`, a signal): the peer ends
    /// its loops at once instead of waiting out its timeouts. A peer of an older version
    /// fails on the unknown message, as it failed on the closed stream before.
    Abort {
        /// Why, as this side's report says it.
        reason: String,
    },
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
    /// Highest receive rate over a peak window (at least 100 ms and 8 completions,
    /// [`super::peak`]), bytes/s (bw).
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
    /// This end's address on each plane, plane 0 first (`--bind A,B`; loopback
    /// `--planes N`): the UDP datapath's [`UdpConfig::plane_ips`] where two or more, and
    /// the client's TCP source. Empty: one plane, the bind address.
    pub plane_ips: Vec<IpAddr>,
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
    /// With `--fabric verbs`: per plane (one device each), the peer table and this side's
    /// UD endpoint address; empty for UDP.
    pub verbs: verbs::PlaneEndpoints,
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

    /// Posts a WRITE_WITH_IMM of `sge` to `off` bytes into `remote`.
    pub(super) fn post_write_with_imm(
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

    /// Posts a receive.
    pub(super) fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<(), PostError> {
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
    pub(super) fn poll_cq(&self, recv_side: bool, out: &mut Vec<Completion>, max: usize) -> usize {
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
    pub(super) fn wait_cq(
        &self,
        recv_side: bool,
        timeout: Duration,
    ) -> Result<Option<Completion>, String> {
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
    pub(super) fn verify(&self, p: &TestParams, c: &Completion) {
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

/// The UDP datapath of an end running `p` with `local`'s options, bound at `udp_bind`
/// (on every plane of [`LocalOpts::plane_ips`] where two or more).
fn udp_config(p: &TestParams, udp_bind: SocketAddr, local: &LocalOpts) -> UdpConfig {
    local.udp.apply(UdpConfig {
        traffic_class: local.traffic_class,
        rx_slots: rx_slots(p),
        plane_ips: if local.plane_ips.len() > 1 {
            local.plane_ips.clone()
        } else {
            Vec::new()
        },
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
            (ep, src, dst, Vec::new())
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
            (ep, src, dst, vec![(e.peers, e.local)])
        }
        (fabric, ProgressMode::Thread) => {
            let (ctx, verbs) = match (fabric, &local.context) {
                (LocalFabric::Udp, Some(shared)) => (Context::clone(&shared.0), Vec::new()),
                (LocalFabric::Verbs(_), Some(_)) => {
                    return Err("--engines runs the UDP datapath only".into());
                }
                (LocalFabric::Udp, None) => {
                    let ucfg = udp_config(p, udp_bind, local);
                    let ctx = with_cpu(local.engine_cpu, || Context::new(ucfg, ecfg))?
                        .map_err(|e| format!("cannot open UDP datapath on {udp_bind}: {e}"))?;
                    (ctx, Vec::new())
                }
                (LocalFabric::Verbs(o), None) => {
                    with_cpu(local.engine_cpu, || verbs::start(p, o, ecfg))?
                        .map_err(|e| format!("--fabric verbs: {e}"))?
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
    /// The stream, for writing.
    pub(super) w: TcpStream,
    /// What its reader thread read: one message a line, or the error that ended it.
    pub(super) rx: crossbeam_channel::Receiver<Result<Ctl, String>>,
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
    /// This server cannot serve (its UDP port is taken).
    Fatal(String),
    /// The test ran and failed, or a signal ended it.
    Test(Box<TestParams>, RunError),
}

/// Why [`serve_one`] returned without a finished test.
#[derive(Debug, thiserror::Error)]
pub enum ServeFailure {
    /// No client set up in time, or this side could not set up (its UDP port taken).
    #[error("{0}")]
    Setup(String),
    /// The client's test ran and failed or was interrupted; `error.partial` holds what
    /// this end measured until then.
    #[error("{}", error.message)]
    Test {
        /// The client's test.
        params: Box<TestParams>,
        /// Why, and the partial counts.
        error: RunError,
    },
}

/// Server role: takes clients from `queue` until one sets up, runs its test, returns.
/// A client that fails the setup (bad parameters or parameters over `limits`, garbage,
/// closing early, silent or slow past `timeout`, the deadline of its whole setup exchange
/// from accept to the ready barrier) is answered where it can be, named on stderr
/// (`mrc-perf server: dropped client ADDR: REASON`) and dropped; the server then takes the
/// next ([`ClientQueue`] reads every waiting connection's parameters at once).
/// `accept_timeout` bounds the wait for a client that sets up (loopback). `port` holds
/// `udp_bind`'s port between tests ([`super::udp_port`]): it is lent to each test's
/// datapath and taken back before the next client is awaited.
///
/// # Errors
/// [`ServeFailure::Setup`]: no client within `accept_timeout`, or this side cannot set
/// up (e.g. its UDP port is taken: answered to the client too; or it was taken between
/// two tests);
/// [`ServeFailure::Test`]: the test failed or a signal ended it.
#[allow(clippy::too_many_arguments)]
pub fn serve_one(
    queue: &mut ClientQueue,
    udp_bind: SocketAddr,
    port: &mut super::udp_port::Reservation,
    timeout: Duration,
    accept_timeout: Option<Duration>,
    local: &LocalOpts,
    limits: &ServerLimits,
    psk: Option<&[u8]>,
) -> Result<(TestParams, EndResult), ServeFailure> {
    let until = accept_timeout.map(|t| Instant::now() + t);
    loop {
        // the last test's datapath is gone: hold the port while no test runs
        port.retake()
            .map_err(|e| ServeFailure::Setup(e.to_string()))?;
        let (s, peer, line, setup_until) =
            queue.next(timeout, until).map_err(ServeFailure::Setup)?;
        let served = serve_stream(
            s,
            line,
            setup_until,
            udp_bind,
            port,
            timeout,
            local,
            limits,
            psk,
        );
        match served {
            Ok(r) => return Ok(r),
            Err(ServeError::Client(e)) => {
                eprintln!("mrc-perf server: dropped client {peer}: {e}");
            }
            Err(ServeError::Fatal(e)) => return Err(ServeFailure::Setup(e)),
            Err(ServeError::Test(params, error)) => {
                return Err(ServeFailure::Test { params, error });
            }
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
    port: &mut super::udp_port::Reservation,
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
                p.steering = super::srv6::steering(
                    mode,
                    p.srv6_via,
                    peer.ip(),
                    &local.plane_ips,
                    p.paths,
                    p.burst_size,
                )?;
            }
            Ok(p)
        })
        .map_err(Client)
        .and_then(|p| {
            // the datapath binds the held port itself
            port.release();
            make_side(&p, udp_bind, local)
                .map(|side| (p, side))
                .map_err(Fatal)
        });
    // Tell the client, so it reports the reason instead of a broken bootstrap.
    let reply = match &setup {
        Ok(_) => format!("{REPLY_OK}\n"),
        Err(Client(e) | Fatal(e)) => format!("{REPLY_ERROR}{}\n", e.replace('\n', " ")),
        Err(ServeError::Test(_, e)) => format!("{REPLY_ERROR}{}\n", e.message.replace('\n', " ")),
    };
    let sent =
        mrc_fabric::engine::bootstrap::DeadlineStream::new(&s, until).write_all(reply.as_bytes());
    let (p, side) = setup?;
    sent.map_err(|e| Client(format!("answering the client: {e}")))?;
    if !side.verbs.is_empty() {
        let left = until.saturating_duration_since(Instant::now());
        verbs::exchange(&mut s, &side.verbs, left.max(Duration::from_millis(1))).map_err(Client)?;
    }
    post_recvs(&side, initial_recvs(&p, false), 0).map_err(|e| Fatal(e.to_string()))?;
    let c = connect_qp(&side, s, until, psk, false).map_err(Client)?;
    let remote = remote_region(&c.remote.regions, &p, "client").map_err(Client)?;
    let ctl = CtlStream::new(c.stream).map_err(Fatal)?;
    match run_end(&side, remote, ctl, &p, false, timeout, None) {
        Ok(r) => Ok((p, r)),
        Err(e) => Err(ServeError::Test(Box::new(p), e)),
    }
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
    let s = tcp_connect(server, local.plane_ips.first().copied(), timeout)
        .map_err(|e| format!("cannot reach server {server}: {e}"))?;
    run_client_on(s, server, udp_bind, p, timeout, progress, local, psk)
}

/// A TCP connection to `server` within `timeout`, from `from` (any port) when given: a
/// client on several planes connects from plane 0's address, which the server then finds
/// among the plane addresses of the bootstrap (`QpInfo::plane_ips`).
///
/// # Errors
/// The OS error of the bind or the connect.
pub fn tcp_connect(
    server: SocketAddr,
    from: Option<IpAddr>,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    mrc_fabric::engine::bootstrap::connect_from(server, from, timeout)
}

/// The first of `servers` (every address a host name resolves to, in resolver order) that
/// accepts a TCP connection within `timeout` each: the stream and the address.
///
/// # Errors
/// None answered: every address with its error.
pub fn connect_any(
    servers: &[SocketAddr],
    from: Option<IpAddr>,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), String> {
    let mut why = Vec::new();
    for &a in servers {
        if from.is_some_and(|ip| ip.is_ipv6() != a.is_ipv6()) {
            why.push(format!("{a}: not of the family of --bind"));
            continue;
        }
        match tcp_connect(a, from, timeout) {
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
    if !side.verbs.is_empty() {
        verbs::exchange(&mut s, &side.verbs, timeout)?;
    }
    post_recvs(&side, initial_recvs(p, true), 0).map_err(|e| e.to_string())?;
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
        let (_s, a) = connect_any(&[bad, good], None, Duration::from_secs(1)).unwrap();
        assert_eq!(a, good);
        let e = connect_any(&[bad, bad], None, Duration::from_secs(1)).unwrap_err();
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
