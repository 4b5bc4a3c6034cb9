//! The simulator: topology + ports + hosts + the event loop.
//!
//! Per hop a frame costs two events: `TxDone` when its port finishes serialising it (the
//! port then starts the next frame) and `Arrive` at the next node (serialisation +
//! propagation + jitter later). Switches forward on arrival (cut-through of the decision,
//! store-and-forward of the bytes) and queue on the egress port. Hosts pull: when a NIC
//! port is idle the NIC asks its endpoints, round-robin, for the next datagram
//! (`poll_transmit`), so the transport's pacing and windows decide, and puts it on the port
//! of its EV's plane. With one port there is no host queue; with P ports (planes) a
//! datagram whose port is busy waits behind it, and the NIC stops asking while P datagrams
//! wait (it cannot choose the transport's next EV, so one port may be idle while another
//! has a short queue).
//!
//! Frames live in a slab of [`FrameBuf`]s (headers inline, payload beside them), indexed
//! by the `u32` handles that queues and events carry; a released slot keeps its buffers
//! for the next frame, so a warm run allocates nothing per frame.

use std::io::Write;

use mrc_congestion::{AnyController, CcKind, LinkParams};
use mrc_transport::conn::{ConnConfig, PeerParams, Sge};
use mrc_transport::path::Selection;
use mrc_transport::region::Access;
use mrc_transport::send::SendConfig;
use mrc_transport::{Connection, Ecn, Psn, WcStatus};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::buf::{FrameBuf, SharedPayload};
use super::event::{EventKind, EventQueue};
use super::fault::{Fault, FaultKind, LinkFaults, LinkSelector};
use super::frame;
use super::host::{Datagram, Endpoint, Forwarding, Host, build_frame, build_headers, ev_of_port};
use super::link::{SerialClock, serialisation_ns_ceil};
use super::pfc::{self, PfcConfig, PfcError, PfcPort, PfcPortReport};
use super::prefetch::prefetch;
use super::queue::{Admit, Arrival, PortQueue, PortStats, QueueConfig};
use super::stats::FlowStats;
use super::topo::{Role, Topology, USID_BLOCK, USID_BLOCK_BITS};
use mrc_frame::packet::checksum::PayloadSum;
use mrc_frame::packet::{ChecksumCheck, EthernetFrameRepr};
use mrc_frame::pcap::EthernetPcapWriter;
use mrc_frame::srv6::UsidContainer;

/// Transport settings every flow uses unless the flow overrides them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportSpec {
    /// Congestion controller.
    pub cc: CcKind,
    /// EVs per connection (0..evs).
    pub evs: u32,
    /// Go-back-N instead of selective repeat.
    pub go_back_n: bool,
    /// Sender parameters (MTU payload, RTO, ...).
    pub send: SendConfig,
    /// EV selection (default recycled entropy, REPS).
    pub selection: Selection,
}

impl Default for TransportSpec {
    /// NSCC, 16 EVs, selective repeat, default sender parameters, recycled entropy.
    fn default() -> Self {
        TransportSpec {
            cc: CcKind::Nscc,
            evs: 16,
            go_back_n: false,
            send: SendConfig::default(),
            selection: Selection::default(),
        }
    }
}

/// Simulator parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Seed of every random draw (faults, RED marking, connection seeds, initial PSNs).
    pub seed: u64,
    /// Seed of the switches' ECMP hash (per-switch salts derive from it).
    pub ecmp_seed: u64,
    /// Switch port queues.
    pub queue: QueueConfig,
    /// EV -> route.
    pub forwarding: Forwarding,
    /// Transport defaults.
    pub transport: TransportSpec,
    /// Scripted faults.
    pub faults: Vec<Fault>,
    /// Stop at this time even if flows are unfinished, ns (0: no limit).
    pub stop_ns: u64,
    /// Priority-based Flow Control on every port ([`super::pfc`]); `None` (the default):
    /// a lossy fabric, no PAUSE frames.
    pub pfc: Option<PfcConfig>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            ecmp_seed: 0,
            queue: QueueConfig::default(),
            forwarding: Forwarding::Ecmp,
            transport: TransportSpec::default(),
            faults: Vec::new(),
            stop_ns: 0,
            pfc: None,
        }
    }
}

/// A flow: one RDMA WRITE of `bytes` from host `src` to host `dst` posted at `start_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    /// Sender host.
    pub src: u32,
    /// Receiver host.
    pub dst: u32,
    /// Bytes (> 0, < 4 GiB).
    pub bytes: u64,
    /// When the WRITE is posted, ns.
    pub start_ns: u64,
    /// EVs of this flow (overrides [`TransportSpec::evs`]).
    pub evs: Option<u32>,
}

/// Why the simulator refused something.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A host id beyond the topology.
    #[error("host {0} does not exist")]
    NoSuchHost(u32),
    /// A flow from a host to itself.
    #[error("flow from host {0} to itself")]
    SelfFlow(u32),
    /// A flow size of 0 or 4 GiB and more.
    #[error("flow size {0} bytes is not in 1..4 GiB")]
    BadFlowSize(u64),
    /// Zero EVs.
    #[error("a flow needs at least one EV")]
    NoEvs,
    /// The congestion controller rejected its configuration.
    #[error("congestion controller: {0}")]
    Controller(String),
    /// The transport refused the work request or region.
    #[error("transport: {0}")]
    Transport(String),
    /// A fault names a node that does not exist.
    #[error("fault: no node named {0:?}")]
    NoSuchNode(String),
    /// A fault that cannot apply to the topology ([`Fault::check`]).
    #[error("fault {index}: {why}")]
    BadFault {
        /// Index of the fault in [`SimConfig::faults`].
        index: usize,
        /// Why.
        why: String,
    },
    /// A node/port that does not exist (pcap).
    #[error("no port {port} on node {node}")]
    NoSuchPort {
        /// Node.
        node: u32,
        /// Port.
        port: u16,
    },
    /// Writing the pcap failed.
    #[error("pcap: {0}")]
    Pcap(String),
    /// The PFC settings cannot keep the fabric lossless ([`PfcError`]).
    #[error("{0}")]
    Pfc(#[from] PfcError),
}

/// Simulator-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SimCounters {
    /// Events processed.
    pub events: u64,
    /// Frames delivered over a link (packet hops).
    pub hops: u64,
    /// Frames with no route (or unparseable at a switch), dropped.
    pub no_route_drops: u64,
    /// Frames lost to random loss.
    pub loss_drops: u64,
    /// Frames lost to black holes.
    pub black_hole_drops: u64,
    /// Frames lost on down links.
    pub link_down_drops: u64,
    /// Frames lost in a switch that went down (queued there, or reaching it while down).
    pub switch_down_drops: u64,
    /// Frames corrupted: one bit flipped, by the first corrupting link that hit the frame
    /// (a corrupted frame is not corrupted again).
    pub corrupted: u64,
    /// Frames duplicated.
    pub duplicated: u64,
    /// Data frames lost to a black hole: time of the last one, ns.
    pub last_black_hole_data_ns: Option<u64>,
}

/// A transmitting port's state, cache-line aligned and in declaration order: the queue
/// and the link parameters fill the first two 64-byte lines, the counters the third, the
/// queue-depth sample cache the fourth ([`PORT_HOT_LINES`]); the histogram and the link
/// index (read only on a faulty link) follow.
#[derive(Debug)]
#[repr(C, align(64))]
struct PortRt {
    q: PortQueue,
    clock: SerialClock,
    rate_bps: u64,
    prop_ns: u64,
    peer_node: u32,
    peer_port: u16,
    busy: bool,
    /// `link_faults[link].is_clean()`, kept here so the fast path reads no other table.
    link_clean: bool,
    /// PFC paused this transmitter's lossless class until this time, ns (0 when PFC is
    /// off: never paused). Here, not in the PFC table, so the fast path reads no other.
    paused_until_ns: u64,
    /// What sends this port's frames off the fast path of [`Simulator::start_tx`]:
    /// [`PORT_PFC`] and [`PORT_TAP`] bits (0: neither, the fast path).
    slow: u8,
    stats: PortStats,
    link: u32,
}

/// [`PortRt::slow`] bit: PFC is on (the PFC table has this port).
const PORT_PFC: u8 = 1;
/// [`PortRt::slow`] bit: the pcap tap ([`Simulator::set_pcap`]) is on this port.
const PORT_TAP: u8 = 2;

/// Cache lines of [`PortRt`] a packet touches (what is prefetched).
const PORT_HOT_LINES: usize = 5;

/// A frame in the simulator's slab: its bytes and their [`frame::Header`]. What a switch
/// reads (header, length) comes first, in the two cache lines the event loop prefetches.
#[derive(Debug, Default)]
#[repr(C)]
struct Pkt {
    hdr: frame::Header,
    /// `frame.len()`, bytes.
    len: u32,
    /// The UDP checksum was computed over these bytes by the simulator (a host built the
    /// frame or a switch trimmed it) and no byte it covers changed since: the receiving
    /// host need not sum the datagram again. Injected, corrupted and SRv6-rewritten frames
    /// are verified in full.
    checksum_known: bool,
    /// A corrupting link flipped one of its bits: no later link flips another. One flipped
    /// bit always fails the UDP checksum, two can cancel out in the ones' complement sum
    /// (+2^k in one word, -2^k in another: RFC 1071) and deliver a damaged datagram as
    /// intact; a real switch's FCS check would have dropped the frame at the next hop
    /// before it could pick up a second error.
    corrupted: bool,
    frame: FrameBuf,
}

impl Pkt {
    /// Re-reads the header and length after the bytes changed.
    fn refresh(&mut self) {
        self.hdr = frame::header_split(self.frame.head(), self.frame.payload());
        self.len = self.frame.len() as u32;
    }
}

/// Drains a sender endpoint's completions: the first one ends its flow at `now_ns`
/// (done on success, failed otherwise) and counts it in `flows_done`.
fn record_completions(e: &mut Endpoint, flows: &mut [FlowRt], flows_done: &mut u32, now_ns: u64) {
    while let Some(c) = e.conn.poll_completion() {
        let Some(f) = flows.get_mut(e.flow as usize) else {
            continue;
        };
        if f.done_ns.is_none() && !f.failed {
            if c.status == WcStatus::Success {
                f.done_ns = Some(now_ns);
            } else {
                f.failed = true;
            }
            *flows_done += 1;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct FlowRt {
    spec: FlowSpec,
    src_ep: usize,
    dst_ep: usize,
    done_ns: Option<u64>,
    failed: bool,
}

/// What a host's arrival needs of the simulator, borrowed apart from the frame slab so
/// that a frame is parsed where it lies.
struct Receiver<'a> {
    /// Receiving host index.
    h: u32,
    host: &'a mut Host,
    qpn_owner: &'a [(u32, u32)],
    flows: &'a mut [FlowRt],
    flows_done: &'a mut u32,
    now_ns: u64,
}

impl Receiver<'_> {
    /// Host `h` receives frame `f`: parsed, then handed to the endpoint owning its QPN
    /// (counted as a bad or unclaimed frame otherwise).
    ///
    /// `built`: the frame's fields when the simulator emitted its bytes itself (a host's
    /// framing or a switch's trim, checksum known, no byte rewritten since but the ECN
    /// bits): such a frame parses by construction, and its UDP source port, traffic class
    /// and payload are read at the offsets its fields give instead of parsing it again
    /// (debug builds parse it too and check that both agree). Any other frame (injected,
    /// corrupted, SRv6-rewritten) is parsed in full with `check`.
    fn deliver_frame(self, f: &FrameBuf, built: Option<frame::FrameInfo>, check: ChecksumCheck) {
        let (h, now, host) = (self.h, self.now_ns, self.host);
        let parsed = || {
            // A frame kept whole in its head (it does not parse as far as a UDP payload)
            // is parsed whole, for the same typed error.
            if f.payload().is_empty() {
                EthernetFrameRepr::parse_with(f.head(), check)
            } else {
                EthernetFrameRepr::parse_split(f.head(), f.payload(), check)
            }
            .map(|(repr, payload)| (repr.packet.src_port, repr.packet.traffic_class, payload))
        };
        let fields = match built.and_then(|i| built_fields(f, &i)) {
            Some(fast) => {
                debug_assert_eq!(Ok(fast), parsed(), "a built frame's fields read in place");
                Ok(fast)
            }
            None => parsed(),
        };
        let Ok((src_port, traffic_class, payload)) = fields else {
            host.rx_bad_frames += 1;
            return;
        };
        // The QPN needs only the BTH's first 8 bytes: a shorter datagram for a known QP is
        // the QP's to count as malformed.
        let qpn = payload
            .get(5..8)
            .map(|b| u32::from_be_bytes([0, b[0], b[1], b[2]]));
        let owner = qpn.and_then(|q| self.qpn_owner.get(q as usize));
        let Some(ep) = owner.filter(|o| o.0 == h).map(|o| o.1 as usize) else {
            host.rx_unclaimed += 1;
            if host.capture {
                host.captured.push((now, f.to_vec()));
            }
            return;
        };
        let e = &mut host.endpoints[ep];
        let ev = ev_of_port(src_port);
        let ecn = Ecn::from_bits(traffic_class);
        // Receiver-side arrival order of untrimmed data PSNs.
        let bth = mrc_transport::wire::Bth::new_checked(payload).ok();
        if let Some(b) = bth.filter(|b| b.opcode().is_data() && !b.trimmed()) {
            let off = b.psn().wrapping_sub(e.peer_initial_psn) & 0x00FF_FFFF;
            e.tracker.on_arrival(u64::from(off));
        }
        e.conn.handle_datagram(now, ev, ecn, payload);
        if e.is_sender {
            record_completions(e, self.flows, self.flows_done, now);
        } else {
            while e.conn.poll_completion().is_some() {}
        }
    }
}

/// The UDP source port, IPv6 traffic class and UDP payload of frame `f`, which the
/// simulator emitted itself (see [`Receiver::deliver_frame`]) and whose fields are `info`:
/// read where `info` says they are, as a parse of it would return them. `None` when the
/// bytes are not where `info` places them (never for a built frame: then it is parsed).
fn built_fields<'a>(f: &'a FrameBuf, info: &frame::FrameInfo) -> Option<(u16, u8, &'a [u8])> {
    let head = f.head();
    let udp_off = usize::from(info.udp_off);
    // A built frame's head ends with its UDP header; its payload is the UDP payload.
    if head.len() != udp_off + 8 {
        return None;
    }
    let tc = head.get(frame::IPV6_OFF..frame::IPV6_OFF + 2)?;
    let traffic_class = (tc[0] << 4) | (tc[1] >> 4);
    let udp_len = usize::from(u16::from_be_bytes([head[udp_off + 4], head[udp_off + 5]]));
    let payload = f.payload().get(..udp_len.checked_sub(8)?)?;
    Some((info.src_port, traffic_class, payload))
}

/// The next frame of port `p` with PFC on at `now_ns`: from the priority queue alone
/// while its lossless class is paused (out of line: a run without PFC never calls it).
#[cold]
#[inline(never)]
fn pfc_pop(p: &mut PortRt, now_ns: u64) -> Option<(u32, u32)> {
    if p.paused_until_ns > now_ns {
        p.q.pop_priority_with_len()
    } else {
        p.q.pop_with_len()
    }
}

/// The event of frame `pkt` arriving at `port` of `node`: [`EventKind::ArriveLossless`]
/// at a switch of a fabric with PFC, [`EventKind::Arrive`] otherwise (`to_host`: `node` is
/// a host, which has no ingress count).
fn arrival<const PFC: bool>(node: u32, port: u16, pkt: u32, to_host: bool) -> EventKind {
    if PFC && !to_host {
        EventKind::ArriveLossless { node, port, pkt }
    } else {
        EventKind::Arrive { node, port, pkt }
    }
}

/// Prefetches every cache line of a port's state.
fn prefetch_port(p: *const PortRt) {
    let p = p.cast::<u8>();
    for line in 0..PORT_HOT_LINES {
        prefetch(p.wrapping_add(line * 64));
    }
}

/// The egress port of frame `pkt` arriving at switch `node`, computed one event early.
#[derive(Clone, Copy, Debug)]
struct EgressHint {
    node: u32,
    pkt: u32,
    out: u16,
}

/// What a host's NIC can take ([`Simulator::nic_state`]).
#[derive(Clone, Copy, Debug)]
struct NicState {
    /// A port is idle: neither serialising nor paused.
    idle: bool,
    /// Frames queued behind busy ports.
    waiting: usize,
    /// Ports (planes).
    ports: usize,
}

impl NicState {
    /// Whether the NIC asks its endpoints for another datagram: a port is idle and fewer
    /// frames wait than it has ports (one port: the port is idle).
    #[inline]
    fn takes(self) -> bool {
        self.idle && self.waiting < self.ports
    }
}

/// Progress of a run, handed to the progress callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Virtual time, ns.
    pub now_ns: u64,
    /// Flows finished.
    pub flows_done: u32,
    /// Flows.
    pub flows: u32,
    /// Events processed.
    pub events: u64,
}

/// A port's line in the report.
#[derive(Clone, Debug, Serialize)]
pub struct PortReport {
    /// Node name.
    pub node: String,
    /// Port number.
    pub port: u16,
    /// Name of the node at the other end.
    pub peer: String,
    /// Counters.
    pub stats: PortStats,
    /// busy_ns / run time.
    pub utilisation: f64,
    /// Median queue depth sampled at arrivals, bytes.
    pub queue_p50_bytes: u64,
    /// 99th percentile queue depth, bytes.
    pub queue_p99_bytes: u64,
}

/// Everything a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// Virtual time at the end, ns.
    pub end_ns: u64,
    /// Counters.
    pub counters: SimCounters,
    /// Per flow.
    pub flows: Vec<FlowStats>,
    /// Per transmitting port with traffic.
    pub ports: Vec<PortReport>,
    /// Frames hosts dropped as malformed (checksum, lengths).
    pub host_bad_frames: u64,
    /// PFC counters per port that sent or received a PAUSE (empty, and left out of the
    /// JSON, when PFC is off).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pfc: Vec<PfcPortReport>,
}

impl SimReport {
    /// Last completion time over all flows, ns (None if any flow did not finish).
    pub fn completion_ns(&self) -> Option<u64> {
        self.flows
            .iter()
            .map(|f| f.done_ns.map(|d| d - f.start_ns))
            .try_fold(0u64, |m, d| d.map(|d| m.max(d)))
    }

    /// Sum over flows of bytes / sum of completion times... the mean per-flow goodput, bit/s.
    pub fn mean_goodput_bps(&self) -> f64 {
        if self.flows.is_empty() {
            return 0.0;
        }
        self.flows.iter().map(|f| f.goodput_bps).sum::<f64>() / self.flows.len() as f64
    }

    /// Total of a per-port counter over switch ports (`f` picks it).
    pub fn sum_ports(&self, f: impl Fn(&PortStats) -> u64) -> u64 {
        self.ports.iter().map(|p| f(&p.stats)).sum()
    }
}

/// Hash of the flow 5-tuple (source and destination address, protocol UDP, ports) with a
/// per-switch `salt`: splitmix64 steps over the 64-bit words (Steele et al., "Fast
/// splittable pseudorandom number generators", OOPSLA 2014).
pub fn ecmp_hash(src: u128, dst: u128, src_port: u16, dst_port: u16, salt: u64) -> u64 {
    let mut h = salt ^ 0x9E37_79B9_7F4A_7C15;
    for w in [
        src as u64,
        (src >> 64) as u64,
        dst as u64,
        (dst >> 64) as u64,
        (u64::from(src_port) << 16) | u64::from(dst_port) | (17 << 32),
    ] {
        h = splitmix(h ^ w);
    }
    h
}

/// The ECMP salt of `node` under `ecmp_seed`.
fn salt_of(ecmp_seed: u64, node: u32) -> u64 {
    splitmix(ecmp_seed ^ u64::from(node).wrapping_mul(0xA24B_AED4_963E_E407))
}

/// `h mod n` (n > 0), with a mask when `n` is a power of two (the same value, without a
/// division: ECMP groups are usually 2^k uplinks).
fn reduce(h: u64, n: usize) -> usize {
    let n = n as u64;
    if n.is_power_of_two() {
        (h & (n - 1)) as usize
    } else {
        (h % n) as usize
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Why a switch could not forward a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardError {
    /// Not Ethernet/IPv6/(SRH)/UDP or too short.
    Malformed,
    /// The SRH could not be advanced.
    BadSrh,
    /// No route to the destination.
    NoRoute,
}

/// One hop of a traced path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceHop {
    /// Node name.
    pub node: String,
    /// Egress port (None at the destination).
    pub port: Option<u16>,
    /// Destination address as the node sees it on arrival.
    pub dst_addr: String,
    /// SRH segments_left on arrival, if there is an SRH.
    pub segments_left: Option<u8>,
}

/// A pcap writer on `(node, port)`.
type PcapTap = (u32, u16, EthernetPcapWriter<Box<dyn Write>>);

/// The simulator.
pub struct Simulator {
    cfg: SimConfig,
    topo: Topology,
    ports: Vec<Vec<PortRt>>,
    link_faults: Vec<LinkFaults>,
    /// Per node: a switch that is down ([`FaultKind::SwitchDown`]).
    switch_down: Vec<bool>,
    hosts: Vec<Host>,
    /// `(host, endpoint)` owning each QPN (QPNs are unique in a run and dense: flow `i`
    /// has `2 i + 1` and `2 i + 2`); `u32::MAX` hosts mark unused entries. One flat table
    /// instead of a hash lookup per host on every received frame.
    qpn_owner: Vec<(u32, u32)>,
    /// ECMP hash salt per node ([`salt_of`]).
    salts: Vec<u64>,
    flows: Vec<FlowRt>,
    q: EventQueue,
    pkts: Vec<Pkt>,
    free: Vec<u32>,
    rng: ChaCha8Rng,
    now_ns: u64,
    counters: SimCounters,
    flows_done: u32,
    tx_buf: Vec<u8>,
    pcap: Option<PcapTap>,
    pcap_error: Option<String>,
    mrc_header_bytes: usize,
    /// PFC state per node and port (empty when PFC is off).
    pfc: Vec<Vec<PfcPort>>,
    /// With PFC on, per frame slot: 1 + the ingress port whose lossless count holds the
    /// frame while it sits in a switch's normal queue, 0 otherwise (grown on demand).
    pfc_in: Vec<u16>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("now_ns", &self.now_ns)
            .field("flows", &self.flows.len())
            .finish_non_exhaustive()
    }
}

impl Simulator {
    /// A simulator over `topo` with `cfg`; the faults are scheduled.
    ///
    /// Errors: [`SimError::NoSuchNode`] for a fault naming an unknown node;
    /// [`SimError::Pfc`] for PFC thresholds or a buffer that cannot keep the fabric
    /// lossless.
    pub fn new(topo: Topology, cfg: SimConfig) -> Result<Simulator, SimError> {
        let ports = topo
            .nodes
            .iter()
            .map(|n| {
                n.ports
                    .iter()
                    .map(|p| {
                        let l = topo.links[p.link as usize].spec;
                        PortRt {
                            q: PortQueue::default(),
                            busy: false,
                            clock: SerialClock::default(),
                            stats: PortStats::default(),
                            rate_bps: l.rate_bps,
                            prop_ns: l.propagation_ns,
                            link: p.link,
                            link_clean: true,
                            paused_until_ns: 0,
                            slow: if cfg.pfc.is_some() { PORT_PFC } else { 0 },
                            peer_node: p.peer_node,
                            peer_port: p.peer_port,
                        }
                    })
                    .collect()
            })
            .collect();
        let mut q = EventQueue::new();
        for (i, f) in cfg.faults.iter().enumerate() {
            if let LinkSelector::Between(a, b) = &f.links {
                for n in [a, b] {
                    if topo.node_by_name(n).is_none() {
                        return Err(SimError::NoSuchNode(n.clone()));
                    }
                }
            }
            f.check(&topo)
                .map_err(|why| SimError::BadFault { index: i, why })?;
            q.push(f.at_ns, EventKind::Fault { index: i as u32 });
        }
        let mtu = cfg.transport.send.mtu_payload_bytes as usize;
        let pfc = match cfg.pfc {
            Some(p) => Self::pfc_ports(&topo, &cfg, p)?,
            None => Vec::new(),
        };
        Ok(Simulator {
            link_faults: vec![LinkFaults::default(); topo.links.len()],
            switch_down: vec![false; topo.nodes.len()],
            hosts: (0..topo.hosts).map(|_| Host::default()).collect(),
            qpn_owner: Vec::new(),
            salts: (0..topo.nodes.len() as u32)
                .map(|n| salt_of(cfg.ecmp_seed, n))
                .collect(),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            topo,
            ports,
            flows: Vec::new(),
            q,
            pkts: Vec::new(),
            free: Vec::new(),
            now_ns: 0,
            counters: SimCounters::default(),
            flows_done: 0,
            tx_buf: vec![0; mtu + 256],
            pcap: None,
            pcap_error: None,
            mrc_header_bytes: mrc_transport::conn::MAX_DATA_HEADER_BYTES,
            pfc,
            pfc_in: Vec::new(),
        })
    }

    /// The PFC state of every port, each with its link's headroom; checks that every
    /// switch's buffers hold what its ingress ports may queue.
    ///
    /// Errors: [`SimError::Pfc`].
    fn pfc_ports(
        topo: &Topology,
        cfg: &SimConfig,
        p: PfcConfig,
    ) -> Result<Vec<Vec<PfcPort>>, SimError> {
        p.check()?;
        // The largest frame a host builds: MTU payload, mrc data headers, Ethernet, IPv6,
        // UDP and an SRH of two segments (40 bytes).
        let mtu_frame = u64::from(cfg.transport.send.mtu_payload_bytes)
            + (14 + 40 + 8 + 40 + mrc_transport::conn::MAX_DATA_HEADER_BYTES) as u64;
        let mut out = Vec::with_capacity(topo.nodes.len());
        for n in &topo.nodes {
            let ports: Vec<PfcPort> = n
                .ports
                .iter()
                .map(|port| {
                    let l = topo.links[port.link as usize].spec;
                    PfcPort {
                        headroom_bytes: pfc::headroom_bytes(
                            l.rate_bps,
                            l.propagation_ns,
                            mtu_frame,
                        ),
                        ..PfcPort::default()
                    }
                })
                .collect();
            if n.role != Role::Host {
                let max_headroom = ports.iter().map(|p| p.headroom_bytes).max().unwrap_or(0);
                p.check_buffer(ports.len(), max_headroom, cfg.queue.buffer_bytes)?;
            }
            out.push(ports);
        }
        Ok(out)
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Virtual time, ns.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Counters so far.
    pub fn counters(&self) -> &SimCounters {
        &self.counters
    }

    /// A host (endpoints, captured frames).
    pub fn host(&self, h: u32) -> Option<&Host> {
        self.hosts.get(h as usize)
    }

    /// The two connections of flow `flow`: the sender's, then the receiver's (their
    /// planes, paths and counters as the run left them so far).
    pub fn flow_conns(
        &self,
        flow: u32,
    ) -> Option<(&Connection<AnyController>, &Connection<AnyController>)> {
        let f = self.flows.get(flow as usize)?;
        let s = &self.hosts[f.spec.src as usize].endpoints[f.src_ep];
        let r = &self.hosts[f.spec.dst as usize].endpoints[f.dst_ep];
        Some((&s.conn, &r.conn))
    }

    /// Payload bytes of flow `flow` its receiver has placed so far (first copies only: the
    /// flow's goodput up to now), bytes.
    pub fn flow_delivered_bytes(&self, flow: u32) -> Option<u64> {
        self.flow_conns(flow).map(|(_, r)| r.stats().received_bytes)
    }

    /// Keep frames that reach host `h` for no endpoint (raw tests).
    pub fn set_capture(&mut self, h: u32, on: bool) {
        if let Some(host) = self.hosts.get_mut(h as usize) {
            host.capture = on;
        }
    }

    /// Counters of port `port` of `node`.
    pub fn port_stats(&self, node: u32, port: u16) -> Option<&PortStats> {
        self.ports
            .get(node as usize)?
            .get(usize::from(port))
            .map(|p| &p.stats)
    }

    /// PFC counters of port `port` of `node` so far (a pause still in force counts up to
    /// now); `None` when PFC is off or the port does not exist.
    pub fn pfc_stats(&self, node: u32, port: u16) -> Option<pfc::PfcPortStats> {
        let st = self.pfc.get(node as usize)?.get(usize::from(port))?;
        let mut stats = st.stats;
        if let Some(since) = st.paused_since_ns {
            let until = self.ports[node as usize][usize::from(port)].paused_until_ns;
            stats.paused_ns += self.now_ns.min(until).saturating_sub(since);
        }
        Some(stats)
    }

    /// Lossless-class bytes queued in `node` that came in on its `port` (PFC's ingress
    /// count); `None` when PFC is off or the port does not exist.
    pub fn pfc_ingress_bytes(&self, node: u32, port: u16) -> Option<u64> {
        self.pfc
            .get(node as usize)?
            .get(usize::from(port))
            .map(|p| p.ingress_bytes)
    }

    /// A PFC storm: from `at_ns` on, host `h`'s receiver is stuck (a NIC that cannot drain
    /// its receive buffer, as in Guo et al., "RDMA over Commodity Ethernet at Scale",
    /// SIGCOMM 2016): its NIC asserts XOFF towards its leaf for good, sending a PAUSE of
    /// [`PfcConfig::pause_quanta`] at `at_ns` and again every half pause time, so the leaf
    /// never sends it another lossless frame. What the leaf holds for `h` then pauses the
    /// leaf's own upstream, and so on (no watchdog is modelled). A run with a storm needs
    /// [`SimConfig::stop_ns`] to end.
    ///
    /// Errors: [`SimError::NoSuchHost`]; [`SimError::Pfc`] ([`PfcError::Off`]) on a run
    /// without PFC.
    pub fn pfc_storm(&mut self, h: u32, at_ns: u64) -> Result<(), SimError> {
        if h >= self.topo.hosts {
            return Err(SimError::NoSuchHost(h));
        }
        if self.cfg.pfc.is_none() {
            return Err(PfcError::Off.into());
        }
        // A host's XOFF is never cleared (hosts keep no ingress count), so the refresh at
        // `at_ns` sends the PAUSE and every later refresh sends it again.
        let st = &mut self.pfc[h as usize][0];
        st.xoff = true;
        st.refresh_at_ns = at_ns;
        self.q
            .push(at_ns, EventKind::PauseRefresh { node: h, port: 0 });
        Ok(())
    }

    /// Writes every frame leaving `port` of `node` to `out` as pcap.
    ///
    /// Errors: [`SimError::NoSuchPort`], [`SimError::Pcap`].
    pub fn set_pcap(&mut self, node: u32, port: u16, out: Box<dyn Write>) -> Result<(), SimError> {
        if self
            .ports
            .get(node as usize)
            .and_then(|p| p.get(usize::from(port)))
            .is_none()
        {
            return Err(SimError::NoSuchPort { node, port });
        }
        let w = EthernetPcapWriter::new(out).map_err(|e| SimError::Pcap(e.to_string()))?;
        if let Some((n, p, _)) = self.pcap.replace((node, port, w)) {
            self.ports[n as usize][usize::from(p)].slow &= !PORT_TAP;
        }
        self.ports[node as usize][usize::from(port)].slow |= PORT_TAP;
        Ok(())
    }

    /// Base RTT of a cross-leaf path for a full packet and a SACK back, ns: 4 hops each
    /// way of propagation plus serialisation of a full frame out and a 128-byte frame back.
    pub fn base_rtt_ns(&self) -> u64 {
        let l = self.topo.links.first().map(|l| l.spec);
        let (rate, prop) = l.map_or((100_000_000_000, 1_000), |s| (s.rate_bps, s.propagation_ns));
        let full = self.cfg.transport.send.mtu_payload_bytes as usize + self.frame_overhead();
        8 * prop + 4 * serialisation_ns_ceil(full, rate) + 4 * serialisation_ns_ceil(128, rate)
    }

    /// Header bytes of a full data frame: Ethernet 14 + IPv6 40 + UDP 8 + mrc data headers.
    pub fn frame_overhead(&self) -> usize {
        14 + 40 + 8 + self.mrc_header_bytes
    }

    /// Line rate of host `h`'s NIC, bit/s: the sum of its ports' (one per plane).
    fn host_rate_bps(&self, h: u32) -> u64 {
        self.ports
            .get(h as usize)
            .map(|ps| ps.iter().map(|p| p.rate_bps).sum::<u64>())
            .filter(|&r| r > 0)
            .unwrap_or(1)
    }

    /// Adds a flow; its WRITE is posted at `spec.start_ns`. Returns its index.
    ///
    /// Errors: [`SimError::NoSuchHost`], [`SimError::SelfFlow`], [`SimError::BadFlowSize`],
    /// [`SimError::NoEvs`], [`SimError::Controller`], [`SimError::Transport`].
    pub fn add_flow(&mut self, spec: FlowSpec) -> Result<u32, SimError> {
        for h in [spec.src, spec.dst] {
            if h >= self.topo.hosts {
                return Err(SimError::NoSuchHost(h));
            }
        }
        if spec.src == spec.dst {
            return Err(SimError::SelfFlow(spec.src));
        }
        let len = u32::try_from(spec.bytes)
            .ok()
            .filter(|&l| l > 0)
            .ok_or(SimError::BadFlowSize(spec.bytes))?;
        let evs = spec.evs.unwrap_or(self.cfg.transport.evs);
        if evs == 0 {
            return Err(SimError::NoEvs);
        }
        let id = self.flows.len() as u32;
        let t = self.cfg.transport.clone();
        let link = LinkParams {
            line_rate_bps: self.host_rate_bps(spec.src),
            base_rtt_ns: self.base_rtt_ns(),
            mtu_bytes: u64::from(t.send.mtu_payload_bytes),
            trimming_enabled: self.cfg.queue.trim_threshold_bytes.is_some(),
        };
        let cc =
            || AnyController::new(t.cc, &link).map_err(|e| SimError::Controller(e.to_string()));
        // QPNs: 2 id + 1 (sender) and 2 id + 2 (receiver), unique in the run.
        let (qa, qb) = (2 * id + 1, 2 * id + 2);
        let psn_a = self.rng.random::<u32>() & 0x00FF_FFFF;
        let psn_b = self.rng.random::<u32>() & 0x00FF_FFFF;
        // EV i on plane i mod P: the NIC port its packets leave from (port q on plane q).
        let planes = u8::try_from(self.topo.planes()).unwrap_or(u8::MAX);
        let ev_planes = ConnConfig::interleaved_planes(evs as usize, planes);
        let mk = |qpn: u32, psn: u32, seed: u64| ConnConfig {
            local_qpn: qpn,
            initial_psn: Psn::new(psn),
            generation: 1,
            evs: (0..evs).collect(),
            ev_planes: ev_planes.clone(),
            seed,
            send: t.send,
            go_back_n: t.go_back_n,
            selection: t.selection,
            ..ConnConfig::default()
        };
        let seed_a = self.rng.random::<u64>();
        let seed_b = self.rng.random::<u64>();
        let mut a = Connection::new(mk(qa, psn_a, seed_a), cc()?)
            .map_err(|e| SimError::Transport(e.to_string()))?;
        let mut b = Connection::new(mk(qb, psn_b, seed_b), cc()?)
            .map_err(|e| SimError::Transport(e.to_string()))?;
        let terr = |e: String| SimError::Transport(e);
        a.connect(PeerParams {
            qpn: qb,
            initial_psn: Psn::new(psn_b),
            generation: 1,
        })
        .map_err(|e| terr(e.to_string()))?;
        b.connect(PeerParams {
            qpn: qa,
            initial_psn: Psn::new(psn_a),
            generation: 1,
        })
        .map_err(|e| terr(e.to_string()))?;
        let src_mr = a
            .regions_mut()
            .register(len as usize, Access::LOCAL_WRITE)
            .map_err(|e| terr(e.to_string()))?;
        let dst_mr = b
            .regions_mut()
            .register(len as usize, Access::REMOTE_WRITE)
            .map_err(|e| terr(e.to_string()))?;
        // The WRITE is posted now; the sender's NIC is first asked at start_ns.
        a.post_write(
            u64::from(id),
            Sge {
                lkey: src_mr.lkey,
                addr: src_mr.addr,
                len,
            },
            dst_mr.addr,
            dst_mr.rkey,
        )
        .map_err(|e| terr(e.to_string()))?;
        let src_ep = self.attach(spec.src, a, id, true, spec.dst, psn_b);
        let dst_ep = self.attach(spec.dst, b, id, false, spec.src, psn_a);
        self.flows.push(FlowRt {
            spec,
            src_ep,
            dst_ep,
            done_ns: None,
            failed: false,
        });
        self.q
            .push(spec.start_ns, EventKind::FlowStart { flow: id });
        Ok(id)
    }

    fn attach(
        &mut self,
        h: u32,
        conn: Connection<AnyController>,
        flow: u32,
        is_sender: bool,
        peer: u32,
        peer_psn: u32,
    ) -> usize {
        let host = &mut self.hosts[h as usize];
        let idx = host.endpoints.len();
        let qpn = conn.config().local_qpn;
        host.by_qpn.insert(qpn, idx);
        let q = qpn as usize;
        if self.qpn_owner.len() <= q {
            self.qpn_owner.resize(q + 1, (u32::MAX, 0));
        }
        self.qpn_owner[q] = (h, idx as u32);
        host.endpoints.push(Endpoint {
            conn,
            flow,
            is_sender,
            peer,
            peer_initial_psn: peer_psn,
            tracker: Default::default(),
        });
        idx
    }

    /// Hands a raw frame to host `h`'s NIC at `at_ns` (tests, pcap replays); it is queued
    /// behind whatever the NIC is sending.
    ///
    /// Errors: [`SimError::NoSuchHost`].
    pub fn inject(&mut self, h: u32, frame: Vec<u8>) -> Result<(), SimError> {
        if h >= self.topo.hosts {
            return Err(SimError::NoSuchHost(h));
        }
        let pkt = self.alloc(FrameBuf::from_vec(frame));
        self.enqueue_injected(h, 0, pkt);
        Ok(())
    }

    /// As [`Simulator::inject`], copying `frame` into a buffer the simulator recycles (no
    /// allocation once the slab is warm).
    ///
    /// Errors: [`SimError::NoSuchHost`].
    pub fn inject_slice(&mut self, h: u32, frame: &[u8]) -> Result<(), SimError> {
        if h >= self.topo.hosts {
            return Err(SimError::NoSuchHost(h));
        }
        let pkt = self.take_slot();
        let p = &mut self.pkts[pkt as usize];
        p.frame.copy_from_slice(frame);
        p.refresh();
        p.checksum_known = false;
        p.corrupted = false;
        self.enqueue_injected(h, 0, pkt);
        Ok(())
    }

    /// Hands host `d.src`'s NIC port `d.port` the UDP payload `payload` for host `d.dst` on
    /// EV `d.ev`:
    /// framed as the transport's datagrams are ([`build_headers`]: Ethernet / IPv6 / SRH or
    /// uSID per the forwarding mode / UDP with its checksum) in front of a copy of
    /// `payload`, and queued behind whatever the NIC is sending. Like the transport's
    /// frames, and unlike [`Simulator::inject`]ed ones, the receiver need not re-sum the
    /// checksum unless the frame is corrupted on the way.
    ///
    /// Errors: [`SimError::NoSuchHost`]; [`SimError::NoSuchPort`] for a port the host
    /// lacks; [`SimError::Transport`] when the route cannot be encoded.
    pub fn send_datagram(&mut self, d: Datagram, payload: &[u8]) -> Result<(), SimError> {
        self.check_hosts(d)?;
        let pkt = self.take_slot();
        if !self.frame_datagram(pkt, d, &PayloadSum::of(payload), payload) {
            self.release(pkt);
            return Err(SimError::Transport("route cannot be encoded".into()));
        }
        self.pkts[pkt as usize].frame.set_payload_copy(payload);
        self.finish_framing(pkt);
        self.enqueue_injected(d.src, d.port, pkt);
        Ok(())
    }

    /// As [`Simulator::send_datagram`], for a payload sent many times (a registered buffer
    /// posted again and again, as `ib_write_bw` does): every frame carries the same shared
    /// bytes, and the UDP checksum adds their partial sum computed once. Only the headers
    /// are built per frame.
    ///
    /// Errors: those of [`Simulator::send_datagram`].
    pub fn send_shared(&mut self, d: Datagram, payload: &SharedPayload) -> Result<(), SimError> {
        self.check_hosts(d)?;
        let pkt = self.take_slot();
        if !self.frame_datagram(pkt, d, payload.sum(), payload.bytes()) {
            self.release(pkt);
            return Err(SimError::Transport("route cannot be encoded".into()));
        }
        self.pkts[pkt as usize]
            .frame
            .set_payload_shared(payload.bytes().clone());
        self.finish_framing(pkt);
        self.enqueue_injected(d.src, d.port, pkt);
        Ok(())
    }

    /// [`SimError::NoSuchHost`] unless both ends of `d` are hosts, [`SimError::NoSuchPort`]
    /// unless the sender has port `d.port`.
    fn check_hosts(&self, d: Datagram) -> Result<(), SimError> {
        if let Some(h) = [d.src, d.dst].into_iter().find(|&h| h >= self.topo.hosts) {
            return Err(SimError::NoSuchHost(h));
        }
        if usize::from(d.port) >= self.ports[d.src as usize].len() {
            return Err(SimError::NoSuchPort {
                node: d.src,
                port: d.port,
            });
        }
        Ok(())
    }

    /// Builds in slab slot `pkt` the headers of a datagram sent as `d` whose payload sums
    /// to `sum` and starts with `peek`; `false` when the route cannot be encoded. The
    /// caller then sets the payload and calls [`Simulator::finish_framing`].
    fn frame_datagram(&mut self, pkt: u32, d: Datagram, sum: &PayloadSum, peek: &[u8]) -> bool {
        let p = &mut self.pkts[pkt as usize];
        let hdr = build_headers(
            &self.topo,
            self.cfg.forwarding,
            d,
            sum,
            peek,
            p.frame.head_mut(),
        );
        let Some(hdr) = hdr else {
            return false;
        };
        p.hdr = hdr;
        true
    }

    /// Records the length of the frame framed in slot `pkt`, whose checksum the simulator
    /// computed over exactly these bytes.
    fn finish_framing(&mut self, pkt: u32) {
        let p = &mut self.pkts[pkt as usize];
        p.len = p.frame.len() as u32;
        p.checksum_known = true;
        p.corrupted = false;
    }

    /// Queues frame `pkt` on NIC port `port` of host `h` (which exists).
    fn enqueue_injected(&mut self, h: u32, port: u16, pkt: u32) {
        let len = self.pkts[pkt as usize].len;
        let p = &mut self.ports[h as usize][usize::from(port)];
        p.q.push_normal(pkt, len, &mut p.stats);
        if !p.busy {
            self.start_tx(h, port);
        }
    }

    fn alloc(&mut self, frame: FrameBuf) -> u32 {
        let p = Pkt {
            hdr: frame::header_split(frame.head(), frame.payload()),
            len: frame.len() as u32,
            checksum_known: false,
            corrupted: false,
            frame,
        };
        if let Some(i) = self.free.pop() {
            self.pkts[i as usize] = p;
            i
        } else {
            self.pkts.push(p);
            (self.pkts.len() - 1) as u32
        }
    }

    fn release(&mut self, pkt: u32) {
        // The payload goes (its last reference frees it); the slot and its head stay for
        // reuse.
        self.pkts[pkt as usize].frame.clear_payload();
        self.free.push(pkt);
    }

    /// A free slab slot (holding stale bytes the caller overwrites).
    fn take_slot(&mut self) -> u32 {
        if let Some(i) = self.free.pop() {
            // The slot of the fourth call from now, every line of it: frames are often
            // built in bursts (a round of sends), into slots freed long before.
            if let Some(&next) = self
                .free
                .len()
                .checked_sub(4)
                .and_then(|k| self.free.get(k))
            {
                let p = self.pkts.as_ptr().wrapping_add(next as usize).cast::<u8>();
                for line in 0..std::mem::size_of::<Pkt>().div_ceil(64) {
                    prefetch(p.wrapping_add(line * 64));
                }
            }
            i
        } else {
            self.pkts.push(Pkt::default());
            (self.pkts.len() - 1) as u32
        }
    }

    /// The ECMP hash salt of switch `node` (computed once per node in [`Simulator::new`]).
    fn salt(&self, node: u32) -> u64 {
        self.salts
            .get(node as usize)
            .copied()
            .unwrap_or_else(|| salt_of(self.cfg.ecmp_seed, node))
    }

    /// The forwarding decision of switch `node` for `bytes` (which it may rewrite: SRv6
    /// End, uSID shift): the egress port.
    ///
    /// Errors: [`ForwardError`].
    pub fn forward(&self, node: u32, bytes: &mut [u8]) -> Result<u16, ForwardError> {
        let info = frame::inspect(bytes).ok_or(ForwardError::Malformed)?;
        self.forward_info(node, bytes, &info).map(|(p, _)| p)
    }

    /// [`Simulator::forward`] of a frame whose fields `info` were already read; also says
    /// whether the bytes were rewritten (SRv6 End, uSID shift).
    fn forward_info(
        &self,
        node: u32,
        bytes: &mut [u8],
        info: &frame::FrameInfo,
    ) -> Result<(u16, bool), ForwardError> {
        let mut dst = info.dst;
        let mut rewritten = false;
        if dst == self.topo.addr(node) {
            dst = frame::srv6_end(bytes, info).ok_or(ForwardError::BadSrh)?;
            rewritten = true;
        }
        let target = if dst >> 96 == USID_BLOCK >> 96 {
            let c = UsidContainer::from_address(dst.into(), USID_BLOCK_BITS)
                .map_err(|_| ForwardError::Malformed)?;
            let mut active = c.active_usid();
            if active.is_some() && active == self.topo.usid(node) {
                dst = frame::usid_shift(bytes, dst, USID_BLOCK_BITS).ok_or(ForwardError::BadSrh)?;
                rewritten = true;
                active = UsidContainer::from_address(dst.into(), USID_BLOCK_BITS)
                    .ok()
                    .and_then(|c| c.active_usid());
            }
            active.and_then(|u| self.topo.node_of_usid(u))
        } else {
            self.topo.node_of_addr(dst)
        }
        .ok_or(ForwardError::NoRoute)?;
        let port = self
            .choose_port(node, target, info, dst)
            .ok_or(ForwardError::NoRoute)?;
        Ok((port, rewritten))
    }

    /// The egress port of `node` toward node `target` for a frame with fields `info` whose
    /// destination is now `dst`: the only next hop, or the ECMP hash's pick among several.
    #[inline]
    fn choose_port(
        &self,
        node: u32,
        target: u32,
        info: &frame::FrameInfo,
        dst: u128,
    ) -> Option<u16> {
        let hops = self.topo.next_hops(node, target);
        match hops.len() {
            0 => None,
            1 => Some(hops[0]),
            n => {
                let h = ecmp_hash(info.src, dst, info.src_port, info.dst_port, self.salt(node));
                hops.get(reduce(h, n)).copied()
            }
        }
    }

    /// The egress port [`Simulator::forward_info`] will pick for a frame that needs no
    /// rewriting (plain destination, not this node's address, not a uSID container);
    /// `None` otherwise. Used only to prefetch.
    fn plain_egress(&self, node: u32, info: &frame::FrameInfo) -> Option<u16> {
        if info.dst == self.topo.addr(node) || info.dst >> 96 == USID_BLOCK >> 96 {
            return None;
        }
        let target = self.topo.node_of_addr(info.dst)?;
        self.choose_port(node, target, info, info.dst)
    }

    /// The hop-by-hop path a packet from host `src` to host `dst` on `ev` takes (switch
    /// decisions only, no queues, no faults).
    ///
    /// Errors: [`SimError::NoSuchHost`], [`SimError::SelfFlow`] (`src == dst`: it used to
    /// print a host0 -> leaf0 -> host0 -> ... loop), [`SimError::Transport`].
    pub fn trace(&self, src: u32, dst: u32, ev: u32) -> Result<Vec<TraceHop>, SimError> {
        for h in [src, dst] {
            if h >= self.topo.hosts {
                return Err(SimError::NoSuchHost(h));
            }
        }
        if src == dst {
            return Err(SimError::SelfFlow(src));
        }
        let mut bytes = Vec::new();
        let payload = [0u8; 64];
        // The EV's plane as the simulator's connections split them (EV i on plane i mod P).
        let port = (ev % self.topo.planes()) as u16;
        let d = Datagram {
            src,
            dst,
            ev,
            ecn: 2,
            port,
        };
        if build_frame(&self.topo, self.cfg.forwarding, d, &payload, &mut bytes).is_none() {
            return Err(SimError::Transport("route cannot be encoded".into()));
        }
        let mut hops = Vec::new();
        let mut node = src;
        let mut port = port;
        for _ in 0..16 {
            let info = frame::inspect(&bytes);
            let seg_left = info
                .and_then(|i| i.srh_off)
                .and_then(|o| bytes.get(usize::from(o) + 3).copied());
            let dst_addr = info.map_or(String::new(), |i| {
                std::net::Ipv6Addr::from(i.dst).to_string()
            });
            if node != src {
                if self.topo.nodes[node as usize].role == Role::Host {
                    hops.push(TraceHop {
                        node: self.topo.name(node),
                        port: None,
                        dst_addr,
                        segments_left: seg_left,
                    });
                    break;
                }
                port = match self.forward(node, &mut bytes) {
                    Ok(p) => p,
                    Err(_) => {
                        hops.push(TraceHop {
                            node: self.topo.name(node),
                            port: None,
                            dst_addr,
                            segments_left: seg_left,
                        });
                        break;
                    }
                };
            }
            hops.push(TraceHop {
                node: self.topo.name(node),
                port: Some(port),
                dst_addr,
                segments_left: seg_left,
            });
            node = self.topo.nodes[node as usize].ports[usize::from(port)].peer_node;
        }
        Ok(hops)
    }

    /// Runs until every flow finished, `stop_ns`, or no event is left.
    pub fn run(&mut self) -> SimReport {
        self.run_with(&mut |_| {})
    }

    /// As [`Simulator::run`], calling `progress` every 2^16 events.
    pub fn run_with(&mut self, progress: &mut dyn FnMut(Progress)) -> SimReport {
        self.run_events(progress);
        // The queue-depth samples still cached go into the histograms once, here: the
        // report reads quantiles without copying a histogram. (`run_events` leaves them
        // cached: a caller running in rounds would otherwise pay one cold histogram
        // update per cached value and port after every round.)
        for p in self.ports.iter_mut().flatten() {
            p.stats.flush_pending();
        }
        self.report()
    }

    /// Processes events as [`Simulator::run_with`] does, without building the report and
    /// leaving the ports' queue-depth samples cached ([`PortStats::queue_histogram`] and
    /// the report include them); a caller may run it again, in rounds.
    pub fn run_events(&mut self, progress: &mut dyn FnMut(Progress)) {
        // Read once: no event changes the configuration or adds a flow. (0: no stop time.)
        let stop_ns = Some(self.cfg.stop_ns)
            .filter(|&t| t > 0)
            .unwrap_or(u64::MAX);
        self.run_events_until(stop_ns, progress);
    }

    /// Processes the events due at or before `t_ns` (virtual time), as
    /// [`Simulator::run_events`] does, then leaves the clock at `t_ns` if events remain
    /// (they stay queued: a later call goes on where this one stopped, and a run in steps
    /// is the run in one go). Stops earlier when every flow finished. A time before now
    /// does nothing.
    pub fn run_until(&mut self, t_ns: u64, progress: &mut dyn FnMut(Progress)) {
        if t_ns >= self.now_ns {
            self.run_events_until(t_ns, progress);
        }
    }

    /// The event loop of [`Simulator::run_events`] up to `stop_ns`.
    fn run_events_until(&mut self, stop_ns: u64, progress: &mut dyn FnMut(Progress)) {
        // The egress port `prefetch_ahead` found for the event after the current one.
        let mut hint: Option<EgressHint> = None;
        let flows = self.flows.len() as u32;
        loop {
            let Some(e) = self.q.pop_until(stop_ns) else {
                if !self.q.is_empty() {
                    self.now_ns = stop_ns;
                }
                break;
            };
            self.now_ns = e.time_ns;
            self.counters.events += 1;
            let mine = hint.take();
            hint = self.prefetch_ahead();
            match e.kind {
                EventKind::Arrive { node, port, pkt } => {
                    let out = mine
                        .filter(|h| (h.node, h.pkt) == (node, pkt))
                        .map(|h| h.out);
                    self.on_arrive(node, port, pkt, out);
                }
                EventKind::ArriveLossless { node, port, pkt } => {
                    self.on_arrive_lossless(node, port, pkt);
                }
                EventKind::TxDone { node, port } => self.on_tx_done(node, port),
                EventKind::HostWake { host } => self.on_wake(host, e.time_ns),
                EventKind::Fault { index } => {
                    // Routes may change: a port found before is stale.
                    hint = None;
                    self.on_fault(index);
                }
                EventKind::FlowStart { flow } => {
                    if let Some(f) = self.flows.get(flow as usize) {
                        let h = f.spec.src;
                        self.host_activity(h);
                    }
                }
                EventKind::Pause { node, port, quanta } => self.on_pause(node, port, quanta),
                EventKind::PauseExpiry { node, port } => self.on_pause_expiry(node, port),
                EventKind::PauseRefresh { node, port } => self.on_pause_refresh(node, port),
            }
            if self.counters.events & 0xFFFF == 0 {
                progress(self.progress());
            }
            if flows != 0 && self.flows_done == flows {
                break;
            }
        }
        progress(self.progress());
    }

    /// Asks the CPU to start loading what the next events of this instant will touch:
    /// four events ahead the packet's slab slot (arrivals) or the port (end of a
    /// transmission), so that memory has three events' time to answer; one event ahead,
    /// through those, the received frame's header bytes or the port's queue head. Only a
    /// hint: a run is the same without it.
    /// Returns the egress port it computed for the next event, an arrival at a switch of a
    /// frame that needs no rewrite, so that arrival need not compute it again.
    fn prefetch_ahead(&self) -> Option<EgressHint> {
        let [next, _, _, ahead] = self.q.peek_now();
        // Four events ahead: first-level state.
        match ahead {
            Some(&EventKind::Arrive { pkt, .. }) => {
                let p = self.pkts.as_ptr().wrapping_add(pkt as usize).cast::<u8>();
                prefetch(p);
                prefetch(p.wrapping_add(64));
            }
            Some(&EventKind::TxDone { node, port }) => {
                if let Some(ps) = self.ports.get(node as usize) {
                    prefetch_port(ps.as_ptr().wrapping_add(usize::from(port)));
                }
            }
            _ => {}
        }
        // The next event: what the state fetched one event ago points to.
        match next {
            Some(&EventKind::Arrive { node, pkt, .. }) => {
                let p = self.pkts.get(pkt as usize)?;
                if (node as usize) < self.hosts.len() {
                    // The mrc headers the transport reads first.
                    prefetch(p.frame.payload().as_ptr());
                    prefetch(p.frame.payload().as_ptr().wrapping_add(64));
                } else {
                    let out = self.plain_egress(node, &p.hdr.info?)?;
                    if let Some(port) = self.ports.get(node as usize)?.get(usize::from(out)) {
                        prefetch_port(port);
                    }
                    return Some(EgressHint { node, pkt, out });
                }
            }
            Some(&EventKind::TxDone { node, port }) => {
                if let Some(p) = self
                    .ports
                    .get(node as usize)
                    .and_then(|ps| ps.get(usize::from(port)))
                {
                    if let Some(e) = p.q.peek() {
                        prefetch(e);
                    }
                }
            }
            _ => {}
        }
        None
    }

    fn progress(&self) -> Progress {
        Progress {
            now_ns: self.now_ns,
            flows_done: self.flows_done,
            flows: self.flows.len() as u32,
            events: self.counters.events,
        }
    }

    fn on_fault(&mut self, index: u32) {
        let Some(f) = self.cfg.faults.get(index as usize).cloned() else {
            return;
        };
        match f.kind {
            FaultKind::SwitchDown | FaultKind::SwitchUp => {
                for n in f.links.switches(&self.topo) {
                    self.set_switch_down(n, f.kind == FaultKind::SwitchDown);
                }
            }
            kind => {
                for l in f.links.links(&self.topo) {
                    if let Some(s) = self.link_faults.get_mut(l as usize) {
                        s.apply(kind);
                        self.refresh_link(l);
                    }
                }
            }
        }
        if f.kind.changes_routes() {
            let down: Vec<u32> = self
                .link_faults
                .iter()
                .enumerate()
                .filter(|(_, s)| s.is_down())
                .map(|(i, _)| i as u32)
                .collect();
            self.topo.route(&down);
        }
        if let (FaultKind::PortDown | FaultKind::PortUp, LinkSelector::Port { host, port }) =
            (f.kind, &f.links)
        {
            self.port_event(*host, *port, f.kind == FaultKind::PortUp);
        }
    }

    /// Copies link `l`'s fault state into its two ports' fast-path flag.
    fn refresh_link(&mut self, l: u32) {
        let (Some(s), Some(ends)) = (
            self.link_faults.get(l as usize),
            self.topo.links.get(l as usize),
        ) else {
            return;
        };
        let clean = s.is_clean();
        for (n, p) in [(ends.a, ends.a_port), (ends.b, ends.b_port)] {
            if let Some(port) = self.ports[n as usize].get_mut(usize::from(p)) {
                port.link_clean = clean;
            }
        }
    }

    /// Switch `n` goes down (`down`) or comes back up: down, every frame it queues is lost
    /// and each of its links counts the down end; up, the links lose that count. No effect
    /// when the switch is already in that state. The caller reroutes.
    fn set_switch_down(&mut self, n: u32, down: bool) {
        let Some(state) = self.switch_down.get_mut(n as usize) else {
            return;
        };
        if *state == down {
            return;
        }
        *state = down;
        for i in 0..self.ports[n as usize].len() {
            let l = self.ports[n as usize][i].link;
            if let Some(s) = self.link_faults.get_mut(l as usize) {
                if down {
                    s.switch_ends_down += 1;
                } else {
                    s.switch_ends_down -= 1;
                }
            }
            self.refresh_link(l);
            if !down {
                continue;
            }
            let now = self.now_ns;
            while let Some((pkt, len)) = self.ports[n as usize][i].q.pop_with_len() {
                if self.cfg.pfc.is_some() {
                    self.pfc_on_dequeue(n, i as u16, pkt, u64::from(len), now);
                }
                self.counters.switch_down_drops += 1;
                self.release(pkt);
            }
        }
    }

    /// NIC port `port` of host `h` went down (`up == false`) or came back up: the host's
    /// datapath tells each of its connections, as a NIC's link event reaches the driver,
    /// and the NIC may send what they queue for the peer (Port Status Updates).
    fn port_event(&mut self, h: u32, port: u16, up: bool) {
        let now = self.now_ns;
        let Some(host) = self.hosts.get_mut(h as usize) else {
            return;
        };
        let Ok(plane) = u8::try_from(port) else {
            return;
        };
        for e in &mut host.endpoints {
            e.conn.set_local_plane(plane, up, now);
        }
        self.host_activity(h);
    }

    fn on_tx_done(&mut self, node: u32, port: u16) {
        self.start_tx(node, port);
        if (node as usize) < self.hosts.len() {
            self.host_activity(node);
        }
    }

    /// Starts serialising the next queued frame of `(node, port)`, if any. A port with PFC
    /// or the pcap tap takes [`Simulator::start_tx_slow`], out of line: the fast path tests
    /// one byte of the port for both. Inlined into its callers: a call's register saves
    /// and restores cost as much as the fast path's queue pop.
    #[inline(always)]
    fn start_tx(&mut self, node: u32, port: u16) {
        if self.ports[node as usize][usize::from(port)].slow == 0 {
            self.start_tx_with::<false, false>(node, port);
        } else {
            self.start_tx_slow(node, port);
        }
    }

    /// [`Simulator::start_tx`] of a port with PFC or the pcap tap.
    #[cold]
    #[inline(never)]
    fn start_tx_slow(&mut self, node: u32, port: u16) {
        if self.ports[node as usize][usize::from(port)].slow & PORT_PFC != 0 {
            self.start_tx_with::<true, true>(node, port);
        } else {
            self.start_tx_with::<false, true>(node, port);
        }
    }

    /// The body of [`Simulator::start_tx`]. `PFC`: the port has PFC (a paused port sends
    /// from its priority queue alone, and the PFC counts follow each frame it sends).
    /// `TAP`: the pcap tap may be on this port (it writes each frame the port sends).
    #[inline(always)]
    fn start_tx_with<const PFC: bool, const TAP: bool>(&mut self, node: u32, port: u16) {
        let now = self.now_ns;
        let p = &mut self.ports[node as usize][usize::from(port)];
        let next = if PFC {
            pfc_pop(p, now)
        } else {
            p.q.pop_with_len()
        };
        let Some((pkt, len)) = next else {
            p.busy = false;
            return;
        };
        p.busy = true;
        // The queued length is the frame's (a frame is never resized while queued).
        let len = len as usize;
        debug_assert_eq!(len, self.pkts[pkt as usize].frame.len());
        debug_assert_eq!(len as u32, self.pkts[pkt as usize].len);
        let ser = p.clock.next_ns(len, p.rate_bps);
        p.stats.tx_packets += 1;
        p.stats.tx_bytes += len as u64;
        p.stats.busy_ns += ser;
        let (peer_node, peer_port, prop, clean) =
            (p.peer_node, p.peer_port, p.prop_ns, p.link_clean);
        let to_host = PFC && (peer_node as usize) < self.hosts.len();
        self.q.push(now + ser, EventKind::TxDone { node, port });
        if PFC {
            self.pfc_on_dequeue(node, port, pkt, len as u64, now + ser);
        }
        if let Some((pn, pp, w)) = self.pcap.as_mut().filter(|_| TAP) {
            if *pn == node && *pp == port {
                if let Err(e) = w.write_frame(now, &self.pkts[pkt as usize].frame.to_vec()) {
                    self.pcap_error.get_or_insert(e.to_string());
                }
            }
        }
        let arrive = now + ser + prop;
        if clean {
            self.q
                .push(arrive, arrival::<PFC>(peer_node, peer_port, pkt, to_host));
            return;
        }
        // The link index sits past the prefetched lines: read only on a faulty link.
        let link = self.ports[node as usize][usize::from(port)].link;
        let faults = self.link_faults[link as usize];
        if faults.is_down() {
            self.counters.link_down_drops += 1;
            self.release(pkt);
            return;
        }
        if faults.black_hole {
            self.counters.black_hole_drops += 1;
            if self.is_data(pkt) {
                self.counters.last_black_hole_data_ns = Some(now);
            }
            self.release(pkt);
            return;
        }
        if faults.loss_p > 0.0 && self.rng.random::<f64>() < faults.loss_p {
            self.counters.loss_drops += 1;
            self.release(pkt);
            return;
        }
        if faults.corrupt_p > 0.0 && self.rng.random::<f64>() < faults.corrupt_p {
            // A bit from the UDP header on, which the UDP checksum covers (the IPv6 traffic
            // class, flow label and hop limit are not checksummed).
            // A frame already corrupted keeps its one flipped bit (the draws are made all
            // the same, so that the rest of the run does not depend on it).
            let p = &mut self.pkts[pkt as usize];
            let from = p
                .hdr
                .info
                .map_or(frame::ETH_LEN, |i| usize::from(i.udp_off));
            if from < p.frame.len() {
                let i = self.rng.random_range(from..p.frame.len());
                let mask = 1 << self.rng.random_range(0..8);
                if !p.corrupted {
                    p.frame.flip(i, mask);
                    p.refresh();
                    p.checksum_known = false;
                    p.corrupted = true;
                    self.counters.corrupted += 1;
                }
            }
        }
        let jitter = |rng: &mut ChaCha8Rng| {
            if faults.jitter_max_ns > 0 {
                rng.random_range(0..=faults.jitter_max_ns)
            } else {
                0
            }
        };
        if faults.duplicate_p > 0.0 && self.rng.random::<f64>() < faults.duplicate_p {
            let copy = self.pkts[pkt as usize].frame.clone();
            let (known, corrupted) = {
                let p = &self.pkts[pkt as usize];
                (p.checksum_known, p.corrupted)
            };
            let dup = self.alloc(copy);
            self.pkts[dup as usize].checksum_known = known;
            self.pkts[dup as usize].corrupted = corrupted;
            self.counters.duplicated += 1;
            let j = jitter(&mut self.rng);
            self.q.push(
                arrive + j,
                arrival::<PFC>(peer_node, peer_port, dup, to_host),
            );
        }
        let j = jitter(&mut self.rng);
        self.q.push(
            arrive + j,
            arrival::<PFC>(peer_node, peer_port, pkt, to_host),
        );
    }

    fn is_data(&self, pkt: u32) -> bool {
        self.pkts[pkt as usize].hdr.data
    }

    /// Frame `pkt` arrives at `node`; `egress` is its egress port when already computed
    /// (by [`Simulator::plain_egress`], for a frame that needs no rewrite).
    fn on_arrive(&mut self, node: u32, in_port: u16, pkt: u32, egress: Option<u16>) {
        self.on_arrive_with::<false>(node, in_port, pkt, egress);
    }

    /// [`Simulator::on_arrive`] at switch `node` of a fabric with PFC
    /// ([`EventKind::ArriveLossless`]): a frame it queues is counted against its ingress
    /// port `in_port`.
    #[cold]
    #[inline(never)]
    fn on_arrive_lossless(&mut self, node: u32, in_port: u16, pkt: u32) {
        self.on_arrive_with::<true>(node, in_port, pkt, None);
    }

    /// The body of [`Simulator::on_arrive`]; `PFC`: the fabric has PFC and `node` is a
    /// switch (a host's arrivals are [`EventKind::Arrive`] either way, so that one copy of
    /// the host path is inlined).
    fn on_arrive_with<const PFC: bool>(
        &mut self,
        node: u32,
        in_port: u16,
        pkt: u32,
        egress: Option<u16>,
    ) {
        self.counters.hops += 1;
        debug_assert!(!PFC || node as usize >= self.hosts.len());
        if !PFC && (node as usize) < self.hosts.len() {
            self.deliver(node, pkt);
            return;
        }
        let out = match self.pkts[pkt as usize].hdr.info {
            // A plain destination: no byte to rewrite.
            Some(info) => match egress.or_else(|| self.plain_egress(node, &info)) {
                Some(out) => Ok((out, false)),
                None => {
                    let mut f = std::mem::take(&mut self.pkts[pkt as usize].frame);
                    let r = self.forward_info(node, f.head_mut(), &info);
                    self.pkts[pkt as usize].frame = f;
                    r
                }
            },
            None => Err(ForwardError::Malformed),
        };
        let Ok((out, rewritten)) = out else {
            self.drop_unrouted(node, pkt);
            return;
        };
        let p = &mut self.pkts[pkt as usize];
        if rewritten {
            p.refresh();
            p.checksum_known = false;
        }
        // The fields read, not a copy of the header's line (nor of the queue configuration).
        let (data, trimmed, ect) = (p.hdr.data, p.hdr.trimmed, p.hdr.ect);
        let trimmable = data && !trimmed;
        let control = !trimmable;
        let coin = match self.cfg.queue.ecn {
            super::queue::EcnConfig::Red { .. } => self.rng.random::<f64>(),
            _ => 0.0,
        };
        let cfg = &self.cfg.queue;
        let port = &mut self.ports[node as usize][usize::from(out)];
        let len = u64::from(p.len);
        let a = Arrival {
            len,
            trimmable,
            control,
            ect,
            coin,
        };
        // PFC counts a frame admitted to the normal queue against its ingress port.
        let mut account = false;
        match port.q.admit(cfg, a, &mut port.stats) {
            Admit::Normal { mark_ce } => {
                if mark_ce {
                    frame::set_ce(p.frame.head_mut());
                    port.stats.ecn_marks += 1;
                }
                port.q.push_normal(pkt, len as u32, &mut port.stats);
                account = PFC;
            }
            Admit::Priority => port.q.push_priority(pkt, len as u32),
            Admit::Trim => {
                let usid = p.hdr.info.is_some_and(|i| i.dst >> 96 == USID_BLOCK >> 96);
                let check = if p.checksum_known {
                    ChecksumCheck::Known
                } else {
                    ChecksumCheck::Verify
                };
                if frame::trim(&mut p.frame, check, usid.then_some(USID_BLOCK_BITS))
                    && port.q.priority_bytes() + p.frame.len() as u64 <= cfg.priority_buffer_bytes
                {
                    port.stats.trims += 1;
                    p.refresh();
                    port.q.push_priority(pkt, p.len);
                    // Trimming emitted the frame anew with its checksum.
                    p.checksum_known = true;
                } else {
                    port.stats.drops += 1;
                    self.release(pkt);
                    return;
                }
            }
            Admit::Drop => {
                port.stats.drops += 1;
                self.release(pkt);
                return;
            }
        }
        if PFC {
            let busy = port.busy;
            if account {
                self.pfc_ingress_add(node, in_port, pkt, len);
            }
            if !busy {
                self.start_tx(node, out);
            }
        } else if !port.busy {
            self.start_tx(node, out);
        }
    }

    /// Frame `pkt` at switch `node` has no route: dropped, counted as lost in a switch that
    /// is down, or as unroutable.
    #[cold]
    #[inline(never)]
    fn drop_unrouted(&mut self, node: u32, pkt: u32) {
        if self.switch_down[node as usize] {
            self.counters.switch_down_drops += 1;
        } else {
            self.counters.no_route_drops += 1;
        }
        self.release(pkt);
    }

    /// PFC: frame `pkt` of `len` bytes that came in on `in_port` of switch `node` entered
    /// an egress queue; counts it against the ingress port and pauses its upstream above
    /// XOFF. (Out of line, as every PFC step: a run without PFC keeps its fast path.)
    #[cold]
    #[inline(never)]
    fn pfc_ingress_add(&mut self, node: u32, in_port: u16, pkt: u32, len: u64) {
        let Some(cfg) = self.cfg.pfc else {
            return;
        };
        if self.pfc_in.len() < self.pkts.len() {
            self.pfc_in.resize(self.pkts.len(), 0);
        }
        self.pfc_in[pkt as usize] = in_port + 1;
        let st = &mut self.pfc[node as usize][usize::from(in_port)];
        st.ingress_bytes += len;
        st.stats.max_ingress_bytes = st.stats.max_ingress_bytes.max(st.ingress_bytes);
        if !st.xoff && st.ingress_bytes > cfg.xoff_bytes {
            st.xoff = true;
            self.send_pause(node, in_port, cfg.pause_quanta);
        }
    }

    /// PFC: `(node, port)` serialises frame `pkt` of `len` bytes until `tx_end_ns` (kept
    /// for the PAUSE frames this port sends); a frame counted against an ingress port
    /// leaves its count, which resumes the upstream at XON.
    #[cold]
    #[inline(never)]
    fn pfc_on_dequeue(&mut self, node: u32, port: u16, pkt: u32, len: u64, tx_end_ns: u64) {
        self.pfc[node as usize][usize::from(port)].tx_end_ns = tx_end_ns;
        let i = self.pfc_in.get_mut(pkt as usize).map_or(0, std::mem::take);
        let Some(cfg) = self.cfg.pfc.filter(|_| i != 0) else {
            return;
        };
        let in_port = i - 1;
        let st = &mut self.pfc[node as usize][usize::from(in_port)];
        st.ingress_bytes -= len;
        if st.xoff && st.ingress_bytes <= cfg.xon_bytes {
            st.xoff = false;
            self.send_pause(node, in_port, 0);
        }
    }

    /// PFC: `(node, port)` sends a PAUSE of `quanta` (0: XON) to the transmitter at the
    /// other end of its link; a PAUSE schedules its refresh half its pause time later.
    #[cold]
    #[inline(never)]
    fn send_pause(&mut self, node: u32, port: u16, quanta: u16) {
        let now = self.now_ns;
        let p = &self.ports[node as usize][usize::from(port)];
        let (rate, prop, peer_node, peer_port) = (p.rate_bps, p.prop_ns, p.peer_node, p.peer_port);
        let st = &mut self.pfc[node as usize][usize::from(port)];
        let at = pfc::pause_arrival_ns(now, st.tx_end_ns, rate, prop);
        if quanta > 0 {
            st.stats.pauses_sent += 1;
            let refresh = now + (PfcConfig::pause_ns(quanta, rate) / 2).max(1);
            st.refresh_at_ns = refresh;
            self.q.push(refresh, EventKind::PauseRefresh { node, port });
        } else {
            st.stats.xons_sent += 1;
        }
        self.q.push(
            at,
            EventKind::Pause {
                node: peer_node,
                port: peer_port,
                quanta,
            },
        );
    }

    /// PFC: a PAUSE of `quanta` (0: XON) reaches `(node, port)`.
    #[cold]
    #[inline(never)]
    fn on_pause(&mut self, node: u32, port: u16, quanta: u16) {
        let now = self.now_ns;
        let rate = self.ports[node as usize][usize::from(port)].rate_bps;
        let st = &mut self.pfc[node as usize][usize::from(port)];
        if quanta == 0 {
            st.stats.xons_received += 1;
            if st.paused_since_ns.is_some() {
                self.pfc_resume(node, port);
            }
            return;
        }
        st.stats.pauses_received += 1;
        st.paused_since_ns.get_or_insert(now);
        let until = now + PfcConfig::pause_ns(quanta, rate);
        self.ports[node as usize][usize::from(port)].paused_until_ns = until;
        self.q.push(until, EventKind::PauseExpiry { node, port });
    }

    /// PFC: the pause time of `(node, port)` may have run out: it resumes unless a later
    /// PAUSE or an XON changed it.
    #[cold]
    #[inline(never)]
    fn on_pause_expiry(&mut self, node: u32, port: u16) {
        let st = &self.pfc[node as usize][usize::from(port)];
        let until = self.ports[node as usize][usize::from(port)].paused_until_ns;
        if st.paused_since_ns.is_some() && until == self.now_ns {
            self.pfc_resume(node, port);
        }
    }

    /// PFC: ingress `(node, port)` sends its PAUSE again if it still holds XOFF and this
    /// is the refresh it scheduled last.
    #[cold]
    #[inline(never)]
    fn on_pause_refresh(&mut self, node: u32, port: u16) {
        let st = &self.pfc[node as usize][usize::from(port)];
        if st.xoff && st.refresh_at_ns == self.now_ns {
            let quanta = self.cfg.pfc.map_or(0, |c| c.pause_quanta);
            self.send_pause(node, port, quanta);
        }
    }

    /// PFC: the transmitter of `(node, port)` resumes now (XON or expiry).
    #[cold]
    #[inline(never)]
    fn pfc_resume(&mut self, node: u32, port: u16) {
        let now = self.now_ns;
        let st = &mut self.pfc[node as usize][usize::from(port)];
        if let Some(since) = st.paused_since_ns.take() {
            st.stats.paused_ns += now - since;
        }
        let p = &mut self.ports[node as usize][usize::from(port)];
        p.paused_until_ns = now;
        if !p.busy {
            self.start_tx(node, port);
        }
        if (node as usize) < self.hosts.len() {
            self.host_activity(node);
        }
    }

    fn deliver(&mut self, h: u32, pkt: u32) {
        // Disjoint borrows: the frame stays in its slot while the host reads it.
        let Simulator {
            pkts,
            hosts,
            qpn_owner,
            flows,
            flows_done,
            now_ns,
            ..
        } = self;
        let p = &pkts[pkt as usize];
        let check = if p.checksum_known {
            ChecksumCheck::Known
        } else {
            ChecksumCheck::Verify
        };
        let rx = Receiver {
            h,
            host: &mut hosts[h as usize],
            qpn_owner,
            flows,
            flows_done,
            now_ns: *now_ns,
        };
        let built = p.hdr.info.filter(|_| p.checksum_known && !p.corrupted);
        rx.deliver_frame(&p.frame, built, check);
        self.release(pkt);
        self.host_activity(h);
    }

    fn on_wake(&mut self, h: u32, t: u64) {
        let host = &mut self.hosts[h as usize];
        if host.wake_at != Some(t) {
            return;
        }
        host.wake_at = None;
        self.host_activity(h);
    }

    /// Runs the due timers of host `h`'s endpoints and collects sender completions.
    fn host_timers(&mut self, h: u32) {
        let now = self.now_ns;
        let host = &mut self.hosts[h as usize];
        for e in &mut host.endpoints {
            if e.conn.poll_timeout().is_some_and(|d| d <= now) {
                e.conn.handle_timeout(now);
                // Timeouts may fail a flow (retry limit).
                if e.is_sender {
                    record_completions(e, &mut self.flows, &mut self.flows_done, now);
                }
            }
        }
    }

    /// What host `h`'s NIC can take at `now`: whether one of its ports is idle (not
    /// serialising, not paused by PFC), and how many frames wait behind busy ports.
    #[inline]
    fn nic_state(&self, h: u32, now: u64) -> NicState {
        let ports = &self.ports[h as usize];
        let mut s = NicState {
            idle: false,
            waiting: 0,
            ports: ports.len(),
        };
        for p in ports {
            s.idle |= !p.busy && p.paused_until_ns <= now;
            s.waiting += p.q.len();
        }
        s
    }

    /// Asks host `h`'s endpoints, round-robin from the NIC's next, for one datagram and
    /// puts it on the port of its EV's plane (started at once if that port is idle).
    /// Returns whether one was sent.
    fn host_send_one(&mut self, h: u32, now: u64) -> bool {
        let n = self.hosts[h as usize].endpoints.len();
        let start = self.hosts[h as usize].rr;
        for k in 0..n {
            let i = (start + k) % n;
            let e = &mut self.hosts[h as usize].endpoints[i];
            // Flows not yet started stay silent.
            if e.is_sender && self.flows[e.flow as usize].spec.start_ns > now {
                continue;
            }
            let Some(t) = e.conn.poll_transmit(now, &mut self.tx_buf) else {
                continue;
            };
            let port = e.port_of_ev(t.ev);
            let d = Datagram {
                src: h,
                dst: e.peer,
                ev: t.ev,
                ecn: t.ecn.bits(),
                port,
            };
            let tx = std::mem::take(&mut self.tx_buf);
            let payload = &tx[..t.len];
            let idx = self.take_slot();
            let framed = self.frame_datagram(idx, d, &PayloadSum::of(payload), payload);
            if framed {
                // Copied once, into the slot's recycled payload buffer.
                self.pkts[idx as usize].frame.set_payload_copy(payload);
                self.finish_framing(idx);
            }
            self.tx_buf = tx;
            let Some(p) = self.ports[h as usize]
                .get_mut(usize::from(port))
                .filter(|_| framed)
            else {
                self.counters.no_route_drops += 1;
                self.release(idx);
                continue;
            };
            self.hosts[h as usize].rr = (i + 1) % n;
            let len = self.pkts[idx as usize].len;
            p.q.push_normal(idx, len, &mut p.stats);
            if !p.busy {
                self.start_tx(h, port);
            }
            return true;
        }
        false
    }

    /// Lets host `h` send while one of its NIC ports is idle and fewer frames wait behind
    /// busy ports than it has ports, then (re)schedules its wake-up.
    fn host_activity(&mut self, h: u32) {
        if self.hosts[h as usize].endpoints.is_empty() {
            // Nothing to send, no timer: the NIC's state (a cold line on arrival) is not read.
            return;
        }
        let now = self.now_ns;
        self.host_timers(h);
        // A port paused by PFC takes nothing until it resumes.
        let mut nic = self.nic_state(h, now);
        while nic.takes() && self.host_send_one(h, now) {
            nic = self.nic_state(h, now);
        }
        let host = &mut self.hosts[h as usize];
        let next = host
            .endpoints
            .iter()
            .filter_map(|e| e.conn.poll_timeout())
            .min();
        // A NIC that takes nothing now asks again on its own: a port's TxDone, or a
        // paused port's resume.
        let nic_busy = !nic.takes();
        if let Some(t) = next {
            // A deadline already due while the NIC is busy is pacing or a packet waiting
            // for the NIC: the NIC's TxDone asks again. Otherwise wake at least 1 ns later
            // (a deadline the transport keeps in the past must not stall virtual time).
            if t <= now && nic_busy {
                return;
            }
            let t = t.max(now + 1);
            if host.wake_at.is_none_or(|w| t < w) {
                host.wake_at = Some(t);
                self.q.push(t, EventKind::HostWake { host: h });
            }
        }
    }

    /// The report of the run so far.
    pub fn report(&self) -> SimReport {
        let end = self.now_ns.max(1);
        let mut ports = Vec::new();
        for (n, ps) in self.ports.iter().enumerate() {
            for (i, p) in ps.iter().enumerate() {
                if p.stats.tx_packets == 0 && p.stats.drops == 0 {
                    continue;
                }
                ports.push(PortReport {
                    node: self.topo.name(n as u32),
                    port: i as u16,
                    peer: self.topo.name(p.peer_node),
                    utilisation: p.stats.busy_ns as f64 / end as f64,
                    queue_p50_bytes: p.stats.queue_quantile_bytes(0.5),
                    queue_p99_bytes: p.stats.queue_quantile_bytes(0.99),
                    stats: p.stats.clone(),
                });
            }
        }
        let flows = self
            .flows
            .iter()
            .enumerate()
            .map(|(id, f)| {
                let s = &self.hosts[f.spec.src as usize].endpoints[f.src_ep];
                let r = &self.hosts[f.spec.dst as usize].endpoints[f.dst_ep];
                let st = s.conn.stats();
                let goodput_bps = f.done_ns.map_or(0.0, |d| {
                    f.spec.bytes as f64 * 8e9 / (d - f.spec.start_ns).max(1) as f64
                });
                FlowStats {
                    id: id as u32,
                    src: f.spec.src,
                    dst: f.spec.dst,
                    bytes: f.spec.bytes,
                    start_ns: f.spec.start_ns,
                    done_ns: f.done_ns,
                    goodput_bps,
                    packets_sent: st.sent,
                    retransmitted: st.retransmitted,
                    trims: st.trimmed,
                    timeouts: st.timeouts,
                    rack_losses: st.rack_losses,
                    ecn_marked: st.ecn_marked,
                    out_of_order: r.tracker.out_of_order(),
                    lost: r.tracker.lost(),
                    duplicates: r.tracker.duplicates(),
                }
            })
            .collect();
        let prio = self.cfg.pfc.map_or(0, |c| c.priority);
        let mut pfc = Vec::new();
        for (n, ps) in self.pfc.iter().enumerate() {
            for (i, st) in ps.iter().enumerate() {
                let Some(stats) = self.pfc_stats(n as u32, i as u16) else {
                    continue;
                };
                if stats.pauses_sent + stats.pauses_received == 0 {
                    continue;
                }
                pfc.push(PfcPortReport {
                    node: self.topo.name(n as u32),
                    port: i as u16,
                    peer: self.topo.name(self.ports[n][i].peer_node),
                    priority: prio,
                    headroom_bytes: st.headroom_bytes,
                    paused_since_ns: st
                        .paused_since_ns
                        .filter(|_| self.ports[n][i].paused_until_ns > self.now_ns),
                    stats,
                });
            }
        }
        SimReport {
            end_ns: self.now_ns,
            counters: self.counters,
            flows,
            ports,
            host_bad_frames: self.hosts.iter().map(|h| h.rx_bad_frames).sum(),
            pfc,
        }
    }

    /// The first pcap write error, if any.
    pub fn pcap_error(&self) -> Option<&str> {
        self.pcap_error.as_deref()
    }

    /// Flushes and drops the pcap writer.
    pub fn finish_pcap(&mut self) -> Result<(), SimError> {
        if let Some((n, p, w)) = self.pcap.take() {
            self.ports[n as usize][usize::from(p)].slow &= !PORT_TAP;
            let mut inner = w.into_inner();
            inner.flush().map_err(|e| SimError::Pcap(e.to_string()))?;
        }
        match &self.pcap_error {
            Some(e) => Err(SimError::Pcap(e.clone())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields a packet touches sit in the first [`PORT_HOT_LINES`] lines of a port.
    #[test]
    fn port_hot_fields_fit_the_prefetched_lines() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<PortRt>(), 64);
        assert!(offset_of!(PortRt, link_clean) < 128);
        assert_eq!(offset_of!(PortRt, stats), 128);
        // The 7 counters in line 2, the sample cache in line 3.
        let pending_end = offset_of!(PortRt, stats)
            + 64 // 7 counters, padded to the cache's alignment
            + size_of::<[(u32, u32); crate::queue::PENDING_SAMPLES]>();
        assert_eq!(pending_end, PORT_HOT_LINES * 64);
    }

    /// A `Write` into a buffer the test keeps a handle on.
    #[derive(Clone, Default)]
    struct SharedBuf(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl Write for SharedBuf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Only the tapped port and, with PFC, every port leave `start_tx`'s fast path; the
    /// tap's bit follows `set_pcap` and goes with `finish_pcap`, and the frames the tap
    /// writes are its port's.
    #[test]
    fn the_pcap_tap_and_pfc_take_ports_off_the_fast_path() {
        use crate::link::LinkSpec;
        use crate::topo::SpineLeafSpec;
        let link = LinkSpec::gbps(100, 500);
        let topo = Topology::spine_leaf(&SpineLeafSpec {
            hosts: 4,
            leaves: 2,
            spines: 1,
            hosts_per_leaf: 2,
            uplinks_per_leaf: 1,
            host_link: link,
            fabric_link: link,
        })
        .unwrap();
        let slow =
            |sim: &Simulator| -> Vec<u8> { sim.ports.iter().flatten().map(|p| p.slow).collect() };
        let mut sim = Simulator::new(topo.clone(), SimConfig::default()).unwrap();
        assert!(slow(&sim).iter().all(|&s| s == 0));
        let (first, second) = (SharedBuf::default(), SharedBuf::default());
        sim.set_pcap(0, 0, Box::new(first.clone())).unwrap();
        assert_eq!(sim.ports[0][0].slow, PORT_TAP);
        sim.set_pcap(1, 0, Box::new(second.clone())).unwrap();
        assert_eq!((sim.ports[0][0].slow, sim.ports[1][0].slow), (0, PORT_TAP));
        assert_eq!(slow(&sim).iter().filter(|&&s| s != 0).count(), 1);
        sim.inject(0, vec![0u8; 100]).unwrap();
        sim.inject(1, vec![1u8; 100]).unwrap();
        sim.run();
        sim.finish_pcap().unwrap();
        assert!(slow(&sim).iter().all(|&s| s == 0));
        // The first tap wrote only the pcap file header (24 bytes); the second also
        // host1's frame, a 16-byte record header and its 100 bytes.
        assert_eq!(first.0.borrow().len(), 24);
        let b = second.0.borrow();
        assert_eq!(b.len(), 24 + 16 + 100);
        assert_eq!(&b[40..], &[1u8; 100][..]);
        // With PFC every port is off the fast path, and keeps PFC when the tap leaves.
        let cfg = SimConfig {
            pfc: Some(PfcConfig::default()),
            ..SimConfig::default()
        };
        let mut sim = Simulator::new(topo, cfg).unwrap();
        assert!(slow(&sim).iter().all(|&s| s == PORT_PFC));
        sim.set_pcap(2, 0, Box::new(SharedBuf::default())).unwrap();
        assert_eq!(sim.ports[2][0].slow, PORT_PFC | PORT_TAP);
        sim.finish_pcap().unwrap();
        assert!(slow(&sim).iter().all(|&s| s == PORT_PFC));
    }
}
