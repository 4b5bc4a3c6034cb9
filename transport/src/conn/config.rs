//! Connection configuration, peer parameters, states and small shared types.

use crate::path::Selection;
use crate::psn::Psn;
use crate::recv::{AckConfig, DEFAULT_RECV_WINDOW_PACKETS};
use crate::send::SendConfig;
use thiserror::Error;

/// Default [`ConnConfig::max_send_wr`]: 16384 send work requests (lib_mrc's largest
/// `max_send_wr`; a verbs NIC allows a few thousand to 32768).
pub const DEFAULT_MAX_SEND_WR: u32 = 16384;

/// Default [`ConnConfig::max_recv_wr`]: 16384 receive work requests.
pub const DEFAULT_MAX_RECV_WR: u32 = 16384;

/// Configuration of one connection (the local half of what RDMA CM exchanges).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnConfig {
    /// Local QPN (24 bits): incoming packets must carry it as BTH destination QP.
    pub local_qpn: u32,
    /// First PSN this side sends.
    pub initial_psn: Psn,
    /// This side's generation; a restarted endpoint must use another one.
    pub generation: u16,
    /// The EVs (paths) this side sprays over. Default `0..16`.
    pub evs: Vec<u32>,
    /// The plane of each EV (`ev_planes[i]` for `evs[i]`): the plane of the local NIC port
    /// its packets leave from, which the datapath knows ([`crate::path::plane`]). Empty
    /// (default): every EV on plane 0, a single fabric. Otherwise as long as `evs`, the
    /// planes `0..P` each with at least one EV, `P <= 32`, and the EVs split equally
    /// across them (counts differing by at most one, as MRC's EV profiles split them).
    pub ev_planes: Vec<u8>,
    /// Spare EVs: an EV out of rotation whose probes go unanswered
    /// ([`crate::path::REPLACE_AFTER_UNANSWERED_PROBES`]) is replaced by a spare of its
    /// plane (new entropy, so another route through the same plane; MRC's EV
    /// replacement), and goes to the back of the spares. The datapath must be able to send
    /// on them as on `evs`. Default none: a failing EV stays out and is probed.
    pub spare_evs: Vec<u32>,
    /// The plane of each spare EV (`spare_ev_planes[i]` for `spare_evs[i]`); empty: plane
    /// 0 for all. Each must name a plane of `ev_planes`.
    pub spare_ev_planes: Vec<u8>,
    /// EV selection. Default recycled entropy (REPS).
    pub selection: Selection,
    /// Seed of the selection RNG (and of the rkey salt when `region_key` is `None`).
    pub seed: u64,
    /// Key of the region table's rkey and address stream
    /// ([`crate::region::RegionTable::random`]): 32 bytes from a CSPRNG on a real network
    /// (the engine draws them from the OS), a seeded value in a simulator. `None`
    /// (default): sequential addresses and rkeys salted from `seed` and `local_qpn`
    /// ([`crate::region::RegionTable::new`]), guessable by anyone who sees a packet.
    pub region_key: Option<[u8; 32]>,
    /// Sender parameters (MTU payload, RTO, reorder window, retry limit).
    pub send: SendConfig,
    /// Acknowledgement policy (coalescing, CNP interval).
    pub ack: AckConfig,
    /// Receive window in packets. Default 1024.
    pub recv_window_packets: u32,
    /// Messages tracked ahead of the next to complete at the receiver. Default 4096.
    pub max_rx_messages: u32,
    /// Send work requests (WRITE, WRITE_WITH_IMM, SEND) posted and not yet completed that
    /// the connection holds (verbs `max_send_wr`); a post beyond is refused with
    /// [`PostError::SendQueueFull`] and nothing is queued. Default
    /// [`DEFAULT_MAX_SEND_WR`] (16384). An embedding that hands completions out through a
    /// queue of its own counts a work request until the application takes its completion
    /// (the engine's `Qp` and `Worker` do, as verbs frees a slot at `ibv_poll_cq`).
    pub max_send_wr: u32,
    /// Receive work requests posted and not yet completed that the connection holds
    /// (verbs `max_recv_wr`); a post beyond is refused with [`PostError::RecvQueueFull`].
    /// Default [`DEFAULT_MAX_RECV_WR`] (16384).
    pub max_recv_wr: u32,
    /// SEND payload the receiver holds for messages whose receive buffer is not known yet
    /// (the receive is not posted, or an earlier message's kind is not known), bytes, each
    /// staged packet counted with [`crate::recv::STAGED_CHUNK_OVERHEAD_BYTES`] more (so the
    /// bound is the memory held, whatever the packets' sizes); a
    /// SEND packet beyond it is refused ([`crate::stats::DropReason::StagingFull`]) and
    /// resent after the sender's RNR timer. A SEND whose receive is known is placed
    /// straight into it and needs none. Default 16 MiB (about the kernel's
    /// `net.core.rmem_max`-sized socket buffers a UDP receiver would hold instead).
    pub max_staged_bytes: u64,
    /// Interval between probes of an `AssumedBad` EV, ns. Default 100 us.
    pub probe_interval_ns: u64,
    /// Keepalive interval, ns: with the unresponsive budget set
    /// ([`SendConfig::unresponsive_budget_ns`]), a side with work posted and nothing in
    /// flight whose peer has been silent this long sends a keepalive probe, and another
    /// every interval, so that a dead peer is found within the budget whatever this side
    /// is doing ([`crate::conn`]'s liveness). 0 (default): the budget / 20
    /// ([`crate::conn::KEEPALIVE_PER_BUDGET`]), 250 ms at the engine's 5 s. Without a
    /// budget nothing is sent.
    pub keepalive_interval_ns: u64,
    /// An EV without evidence of carrying packets (a delivery, an answered probe) for this
    /// long while the other EVs had some (more than
    /// [`crate::path::REVALIDATE_AFTER_ROTATIONS`] rotations' worth) gets no data until a
    /// probe on it is answered ([`crate::path::PathTable::set_revalidate_after_ns`]), ns.
    /// Default 100 us: half the
    /// default minimum RTO, so an EV last proven before a path failure is probed instead
    /// of fed data later than one RTO after it (100 us plus the SACK delay of the other
    /// EVs' evidence), and an EV out of the recycle rotation that long is not trusted on
    /// knowledge from more than a few hundred RTTs of a data-centre fabric ago.
    pub revalidate_ev_after_ns: u64,
    /// Pacing credit, ns: a paced sender (a rate-based controller such as DCQCN) that got to
    /// send later than its release time may catch up by up to this much time's worth of
    /// packets at once (a token bucket this deep at the pacing rate), instead of one packet
    /// per wake-up. A software datapath wakes tens of microseconds late, so without it a
    /// 100 Gb/s DCQCN on idle loopback sent one 4 KiB packet per wake-up: 4.19 Gb/s
    /// against 12.02 unpaced (issue 21). Default 0 (exact pacing, as the simulator's
    /// NICs do); the engine sets 50 us.
    pub pacing_burst_ns: u64,
    /// Go-back-N (RoCE RC behaviour): the receiver keeps no bitmap, accepts only `rcv_nxt`
    /// and answers a gap with one NACK(NO_BITMAP); the sender resends everything from the
    /// NACKed PSN. Both ends must agree. Default off (selective repeat).
    pub go_back_n: bool,
    /// Trim NACKs (receiver side): a data packet whose payload a switch trimmed (BTH
    /// `trimmed` flag) is answered with NACK(TRIMMED), so that the sender resends it at
    /// once on another EV. Off, the receiver acts as one that does not support trim
    /// NACKs (OCP MRC's `MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED`): the trimmed packet is
    /// counted (`trimmed_received`) and dropped unanswered, and the sender recovers it by
    /// its loss detection (the SACK gap after the reorder window, else the RTO). Only this
    /// side's receiver is affected; the sender needs no setting (it handles a NACK(TRIMMED)
    /// whenever one comes). Default on.
    pub trim_nacks: bool,
    /// BTH P_Key sent. Default 0xFFFF.
    pub pkey: u16,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            local_qpn: 1,
            initial_psn: Psn::new(0),
            generation: 1,
            evs: (0..16).collect(),
            ev_planes: Vec::new(),
            spare_evs: Vec::new(),
            spare_ev_planes: Vec::new(),
            selection: Selection::Recycle,
            seed: 0,
            region_key: None,
            send: SendConfig::default(),
            ack: AckConfig::default(),
            recv_window_packets: DEFAULT_RECV_WINDOW_PACKETS,
            max_rx_messages: 4096,
            max_send_wr: DEFAULT_MAX_SEND_WR,
            max_recv_wr: DEFAULT_MAX_RECV_WR,
            max_staged_bytes: 16 << 20,
            probe_interval_ns: 100_000,
            keepalive_interval_ns: 0,
            revalidate_ev_after_ns: 100_000,
            pacing_burst_ns: 0,
            go_back_n: false,
            trim_nacks: true,
            pkey: 0xFFFF,
        }
    }
}

/// Why a [`ConnConfig`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// `evs` is empty (nothing to send on) or longer than 65535.
    #[error("need 1..=65535 EVs, got {0}")]
    EvCount(usize),
    /// `ev_planes` is neither empty nor as long as `evs`, names a plane at or above 32,
    /// leaves a plane below its highest without EVs, or splits the EVs unequally (counts
    /// differing by more than one).
    #[error("EV planes: {0}")]
    EvPlanes(&'static str),
    /// `spare_ev_planes` is neither empty nor as long as `spare_evs`, names a plane that
    /// `ev_planes` lacks, or a spare EV repeats one of `evs` or another spare.
    #[error("spare EVs: {0}")]
    SpareEvs(&'static str),
    /// `local_qpn` does not fit 24 bits.
    #[error("QPN {0:#x} does not fit 24 bits")]
    Qpn(u32),
    /// `send.mtu_payload_bytes` outside `1..=65000` (a datagram must fit a UDP payload).
    #[error("MTU payload {0} bytes outside 1..=65000")]
    Mtu(u32),
    /// `recv_window_packets` outside `1..=2^22`.
    #[error("receive window {0} packets outside 1..=4194304")]
    RecvWindow(u32),
    /// `send.max_outstanding_packets` outside `1..=2^22` (PSN unwrapping needs less than
    /// half the 24-bit space in flight).
    #[error("outstanding limit {0} packets outside 1..=4194304")]
    Outstanding(u32),
    /// `max_rx_messages`, `max_send_wr`, `max_recv_wr` or `ack.sack_every_packets` is 0.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// `send.min_rto_ns` exceeds `send.max_rto_ns`, or `send.min_rto_ns` is 0.
    #[error("RTO bounds invalid: min {min_ns} ns, max {max_ns} ns")]
    RtoBounds {
        /// `min_rto_ns`.
        min_ns: u64,
        /// `max_rto_ns`.
        max_ns: u64,
    },
}

impl ConnConfig {
    /// Checks the configuration.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const MAX_WINDOW: u32 = 1 << 22;
        if self.evs.is_empty() || self.evs.len() > usize::from(u16::MAX) {
            return Err(ConfigError::EvCount(self.evs.len()));
        }
        self.validate_planes()?;
        self.validate_spares()?;
        if self.local_qpn > 0x00FF_FFFF {
            return Err(ConfigError::Qpn(self.local_qpn));
        }
        if !(1..=65_000).contains(&self.send.mtu_payload_bytes) {
            return Err(ConfigError::Mtu(self.send.mtu_payload_bytes));
        }
        if !(1..=MAX_WINDOW).contains(&self.recv_window_packets) {
            return Err(ConfigError::RecvWindow(self.recv_window_packets));
        }
        if !(1..=MAX_WINDOW).contains(&self.send.max_outstanding_packets) {
            return Err(ConfigError::Outstanding(self.send.max_outstanding_packets));
        }
        if self.max_rx_messages == 0 {
            return Err(ConfigError::Zero("max_rx_messages"));
        }
        if self.max_send_wr == 0 {
            return Err(ConfigError::Zero("max_send_wr"));
        }
        if self.max_recv_wr == 0 {
            return Err(ConfigError::Zero("max_recv_wr"));
        }
        if self.ack.sack_every_packets == 0 {
            return Err(ConfigError::Zero("ack.sack_every_packets"));
        }
        if self.send.min_rto_ns == 0 || self.send.min_rto_ns > self.send.max_rto_ns {
            return Err(ConfigError::RtoBounds {
                min_ns: self.send.min_rto_ns,
                max_ns: self.send.max_rto_ns,
            });
        }
        Ok(())
    }
}

impl ConnConfig {
    /// The `ev_planes` checks of [`ConnConfig::validate`].
    fn validate_planes(&self) -> Result<(), ConfigError> {
        if self.ev_planes.is_empty() {
            return Ok(());
        }
        if self.ev_planes.len() != self.evs.len() {
            return Err(ConfigError::EvPlanes("need one plane per EV"));
        }
        let mut counts = [0u32; crate::path::MAX_PLANES];
        for &q in &self.ev_planes {
            let Some(c) = counts.get_mut(usize::from(q)) else {
                return Err(ConfigError::EvPlanes("plane numbers must be below 32"));
            };
            *c += 1;
        }
        let n = self
            .ev_planes
            .iter()
            .map(|&q| usize::from(q) + 1)
            .max()
            .unwrap_or(1);
        let used = &counts[..n];
        if used.contains(&0) {
            return Err(ConfigError::EvPlanes(
                "every plane below the highest needs an EV",
            ));
        }
        let (lo, hi) = (used.iter().min(), used.iter().max());
        if let (Some(lo), Some(hi)) = (lo, hi)
            && hi - lo > 1
        {
            return Err(ConfigError::EvPlanes(
                "EVs must be split equally across the planes",
            ));
        }
        Ok(())
    }

    /// The `spare_evs` checks of [`ConnConfig::validate`].
    fn validate_spares(&self) -> Result<(), ConfigError> {
        if !self.spare_ev_planes.is_empty() && self.spare_ev_planes.len() != self.spare_evs.len() {
            return Err(ConfigError::SpareEvs("need one plane per spare EV"));
        }
        let planes = self
            .ev_planes
            .iter()
            .map(|&q| usize::from(q) + 1)
            .max()
            .unwrap_or(1);
        if self
            .spare_ev_planes
            .iter()
            .any(|&q| usize::from(q) >= planes)
        {
            return Err(ConfigError::SpareEvs("a spare EV's plane has no EVs"));
        }
        let mut seen: std::collections::HashSet<u32> = self.evs.iter().copied().collect();
        if self.spare_evs.iter().any(|ev| !seen.insert(*ev)) {
            return Err(ConfigError::SpareEvs("a spare EV repeats an EV"));
        }
        Ok(())
    }

    /// The plane of EV index `i` when `p` planes share `n` EVs in turn (EV `i` on plane
    /// `i mod p`): the usual split, each plane's EVs interleaved with the others' so that
    /// round-robin selection alternates planes. `p` of 0 or 1 gives an empty list (one
    /// plane).
    pub fn interleaved_planes(n: usize, p: u8) -> Vec<u8> {
        if p <= 1 {
            return Vec::new();
        }
        (0..n).map(|i| (i % usize::from(p)) as u8).collect()
    }
}

/// What the peer told us at setup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerParams {
    /// The peer's QPN (our packets' destination QP).
    pub qpn: u32,
    /// The first PSN the peer sends.
    pub initial_psn: Psn,
    /// The peer's generation.
    pub generation: u16,
}

/// Connection state (a reduced IBA QP state machine: INIT, RTS, draining SQD, closed, ERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// Created; regions may be registered and receives posted; nothing is sent or accepted.
    Init,
    /// Connected: sends, receives, acknowledgements.
    Ready,
    /// `close()` was called: no new work requests; outstanding ones finish.
    Draining,
    /// Every outstanding work request finished after `close()`; packets are dropped.
    Closed,
    /// A fatal error (retry limit, remote access error, peer generation changed): every
    /// outstanding work request completed with an error.
    Error,
}

/// Why a work request was refused at posting (nothing was queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum PostError {
    /// The connection is not in a state that accepts this work request.
    #[error("connection is in state {0:?}")]
    BadState(ConnState),
    /// The local buffer is not a registered range (lkey or bounds).
    #[error("local buffer not registered: {0}")]
    LocalAccess(crate::region::AccessError),
    /// The send queue holds its [`ConnConfig::max_send_wr`] work requests already (verbs
    /// answers `ENOMEM`); post again once completions were taken.
    #[error("send queue full: {max_send_wr} work requests outstanding (max_send_wr)")]
    SendQueueFull {
        /// The queue's depth.
        max_send_wr: u32,
    },
    /// The receive queue holds its [`ConnConfig::max_recv_wr`] receives already.
    #[error("receive queue full: {max_recv_wr} receives outstanding (max_recv_wr)")]
    RecvQueueFull {
        /// The queue's depth.
        max_recv_wr: u32,
    },
}

/// Why a state change was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("transition not allowed from state {0:?}")]
pub struct StateError(pub ConnState);

/// A local buffer: lkey, virtual address and length (verbs `ibv_sge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// lkey of the region.
    pub lkey: u32,
    /// Virtual address in the region.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

/// ECN codepoint of the IP header (RFC 3168 section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Ecn {
    /// 0b00: not ECN-capable.
    #[default]
    NotEct,
    /// 0b01: ECT(1).
    Ect1,
    /// 0b10: ECT(0).
    Ect0,
    /// 0b11: congestion experienced.
    Ce,
}

impl Ecn {
    /// From the two ECN bits of the traffic class / TOS byte.
    pub fn from_bits(bits: u8) -> Ecn {
        match bits & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two ECN bits.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }
}

/// One datagram for the datapath: `buf[..len]` goes out on EV `ev` with ECN codepoint `ecn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The EV to send on.
    pub ev: u32,
    /// Bytes written to the buffer.
    pub len: usize,
    /// ECN codepoint for the IP header.
    pub ecn: Ecn,
}
