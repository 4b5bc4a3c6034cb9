//! Sender state of one connection: segmentation, PSN and MSN assignment, the retransmit
//! queue, bytes in flight, acknowledgement processing, RACK-style loss detection, tail loss
//! probes, the RTO with back-off and retry limit, and spurious-loss detection.
//!
//! Sequence numbers are 64-bit (`seq`, low 24 bits = PSN). `snd_una` is the lowest
//! sequence not yet acknowledged, `snd_nxt` the next new one. New data is sent only while
//! `snd_nxt - snd_una < max_outstanding_packets` (the peer's receive window), so every PSN
//! sent lies inside the receiver's window.
//!
//! Bytes in flight: payload bytes of every sent, unacknowledged packet, each counted once
//! whether queued for retransmission or not (a retransmission does not add, a loss
//! declaration does not subtract; the acknowledgement subtracts). Retransmissions are not
//! held back by the congestion window (their bytes are already counted).
//!
//! Spurious losses: when a packet declared lost (by RACK or the RTO) is acknowledged by a
//! SACK whose echoed (EV, timestamp) is that of the packet's *original* transmission, the
//! original arrived: the loss was spurious, the EV penalty is undone and the caller tells
//! the controller (`on_spurious_loss`). The receiver SACKs at once on a duplicate and on an
//! arrival that fills the hole at `rcv_nxt`, so a late original that arrives after its
//! retransmission, or fills the lowest hole, triggers a SACK that echoes it.

use super::msg::{MsgKind, MsgSpec, packets_for, segment_len};
use crate::completion::{Completion, WcOpcode, WcStatus};
use crate::loss::{Rack, RttEstimator, reorder_window_ns};
use crate::path::PathTable;
use crate::psn::Psn;
use crate::stats::ConnStats;
use std::collections::{BTreeSet, HashSet, VecDeque};

/// Sender configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendConfig {
    /// Payload bytes per packet. Default 4096.
    pub mtu_payload_bytes: u32,
    /// At most this many packets outstanding (`snd_nxt - snd_una`); must not exceed the
    /// peer's receive window. Default 1024.
    pub max_outstanding_packets: u32,
    /// Floor of the RACK reorder window, ns (the window itself follows the measured RTTs,
    /// see [`crate::loss::reorder_window_ns`]; a floor is for datapaths with a known
    /// skew the RTT samples do not show). Default 0.
    pub min_reorder_window_ns: u64,
    /// RTO before the first RTT sample, ns. Default 1 ms.
    pub initial_rto_ns: u64,
    /// Lower clamp of the RTO, ns. Default 200 us.
    pub min_rto_ns: u64,
    /// Upper clamp of the RTO (after back-off), ns. Default 100 ms.
    pub max_rto_ns: u64,
    /// Consecutive RTO expiries without progress tolerated; one more fails the work
    /// request (verbs `retry_cnt`, default 7). Applies only without
    /// [`SendConfig::unresponsive_budget_ns`].
    pub retry_limit: u32,
    /// Giving up as a time budget instead of a count of expiries: the work requests fail
    /// ([`WcStatus::RetryExceeded`], cause [`GiveUp::PeerUnresponsive`]) once the peer has
    /// acknowledged nothing new for this long while data waits for it, since the oldest
    /// unanswered transmission (or since work began to wait for an EV); when its only
    /// answers were NACK(RECEIVER_NOT_READY)s the cause is [`GiveUp::ReceiverNotReady`]
    /// (an RNR wait is bounded by the budget too: a peer that never posts a receive, or a
    /// forger answering for it, does not hold the work requests forever). The RTO keeps resending at its ceiling until then, so a
    /// peer paused (SIGSTOP, a descheduled engine) for less than the budget is survived
    /// whatever the RTO's floor and ceiling, and a dead one is found when the budget ends,
    /// not later. `None` (the default): the count of [`SendConfig::retry_limit`]. The
    /// engine's QPs default to 5 s ([`DEFAULT_UNRESPONSIVE_BUDGET_NS`]).
    pub unresponsive_budget_ns: Option<u64>,
    /// How long a packet answered with NACK(RECEIVER_NOT_READY) waits before it is sent
    /// again, ns (IBA's RNR NAK timer; 640 us is encoding 12 of its table). Default
    /// 640 us. An RNR wait is not a loss: no EV is charged and the controller is not told;
    /// its count is not limited (IBA `rnr_retry` 7 = infinite), its time is: with
    /// [`SendConfig::unresponsive_budget_ns`] a peer that answers only with RNR NACKs for
    /// the budget fails the work requests ([`GiveUp::ReceiverNotReady`]).
    pub rnr_timer_ns: u64,
    /// Tail loss probes (RFC 8985 section 7): when nothing has been acknowledged for a
    /// probe timeout after the latest transmission, the highest in-flight packet is resent
    /// so a loss at the tail is found by RACK instead of the RTO. Default on.
    pub tlp: bool,
    /// The longest the peer delays a SACK, ns (its `AckConfig::max_ack_delay_ns`); added to
    /// the probe timeout. Default 10 us.
    pub peer_max_ack_delay_ns: u64,
    /// The peer is a go-back-N receiver (it discards everything behind a hole), so an RTO
    /// resends every packet in flight (RoCE RC: retransmit from the oldest unacknowledged
    /// PSN) and blames only the EV of the lowest one: the silence about later packets says
    /// nothing about their EVs. The connection sets it from `ConnConfig::go_back_n`.
    /// Default off.
    pub go_back_n: bool,
    /// The datapath may emit the packets handed out at one `now` in another order than
    /// their PSNs (the UDP datapath groups a burst per EV socket), so RACK lets only a
    /// packet sent at a later ns overtake ([`crate::loss::Rack::overtaken`]). Default
    /// false: send time, then sequence number (RFC 8985). The engine sets it for a
    /// datapath that reorders bursts.
    pub burst_may_reorder: bool,
    /// A NACK (TRIMMED, TRIMMED_LASTHOP, NO_PKT_BUFFER) for a packet already sent this
    /// many times fails the work request with `RetryExceeded` instead of sending it again.
    /// Without it a switch that trims every packet (a trim threshold below one frame, a
    /// broken switch) keeps the sender retransmitting at line rate forever: a NACK is an
    /// answer, so the RTO's `retry_limit` never runs out. Default 256 (an incast trims one
    /// packet a few times; 256 in a row means the path never carries it).
    pub nack_retry_limit: u16,
    /// Retransmissions of NACKed packets (TRIMMED, TRIMMED_LASTHOP, NO_PKT_BUFFER: a queue
    /// at its limit) wait for the congestion window like new data: such a packet goes out
    /// only when the bytes actually in the network (in flight minus the packets
    /// waiting in the retransmit queue) plus its own fit in `cwnd_bytes`, or nothing is
    /// in the network. A trimmed packet's NACK says the queue is at its threshold, so a
    /// copy sent at once lands in the same full queue and is trimmed again; the
    /// controller has just taken the trimmed bytes off the window (UEC NSCC: on a NACK
    /// both the in-flight count and the window drop by the NACKed bytes and the resend
    /// waits for window space, as htsim's `UecSrc` sends from its retransmit queue only
    /// when `can_send` allows; NDP, Handley et al. SIGCOMM 2017 section 3, resends a
    /// trimmed packet only when a pull, clocked at the receiver's line rate, asks for it).
    /// Retransmissions of packets declared lost (RACK, RTO) and tail loss probes are not
    /// gated: a lost packet says nothing about the queue that a RACK wait has not
    /// already paid for, and holding it behind undetected losses that still count as in
    /// the network turned recoveries into RTOs (NSCC drop-tail incast of the `cc`
    /// experiment, seeds 1-8: 44 RTOs gated, 27 not); they, and the probe, go ahead of a
    /// gated resend that waits, and a queue of only waiting resends does not hold back
    /// the probe (else a lost tail behind a trim is left to the RTO). Towards a go-back-N
    /// peer ([`SendConfig::go_back_n`]) nothing waits: the packets in flight behind a
    /// trimmed one are discarded there, so waiting for them to leave the network waited
    /// for the RTO (8 seeds of 1% drops and 5% trims, NSCC: 24 RTOs with the wait, 6
    /// without; Swift: 43 and 15). Default on; off sends every retransmission at once.
    pub rtx_within_cwnd: bool,
    /// An RTO expiry resends only the oldest packet in flight, as a probe on an EV whose
    /// round trip worked lately (RFC 6298 section 5.4: retransmit the earliest
    /// unacknowledged segment), instead of every packet the expiry finds expired or
    /// overdue. The rest stay in flight: the probe's answer (or the originals' late
    /// answers) lets RACK declare lost exactly what is missing, in the manner of F-RTO
    /// (RFC 5682). On a software datapath most RTOs are a descheduled engine or a paused
    /// peer, not loss: resending the whole flight there sent 1,086 of 1,075,262 packets as
    /// duplicates in a loaded 4 s loopback run (issue 16). Ignored towards a go-back-N peer.
    /// Default off (the simulator's fabrics lose packets for real and recover faster when
    /// the expiry resends every overdue one); the engine turns it on.
    pub rto_probe_oldest: bool,
    /// RACK's reorder window adapts to spurious losses (RFC 8985 section 6.2): each round
    /// trip in which a SACK proves a loss declaration spurious (it echoes the original
    /// copy: the receiver's duplicate evidence, as TCP's DSACK) widens the window by one
    /// step, `window x mult` with `mult` up to [`REORDER_WINDOW_MULT_MAX`], never past
    /// `min_rto_ns` (waiting longer than the RTO floor would only delay the RTO's work);
    /// after 16 loss recoveries with no spurious loss it returns to 1 (RFC 8985's
    /// `reo_wnd_persist`). The RFC steps by `min_rtt / 4` and caps at SRTT; a software
    /// datapath's reordering is scheduling jitter, which neither bounds, so the step is the
    /// window itself. Default off; the engine turns it on.
    pub adaptive_reorder_window: bool,
}

/// Largest multiplier of the adaptive reorder window
/// ([`SendConfig::adaptive_reorder_window`]).
pub const REORDER_WINDOW_MULT_MAX: u32 = 16;

/// Loss recoveries without a spurious loss after which the adaptive reorder window returns
/// to its base (RFC 8985 section 6.2, `reo_wnd_persist`).
const REORDER_WINDOW_PERSIST: u32 = 16;

/// Copies declared lost whose late arrival the sender still recognises
/// ([`SendState`]'s suspects): the latest this many.
const MAX_SUSPECTS: usize = 4096;

impl Default for SendConfig {
    fn default() -> Self {
        SendConfig {
            mtu_payload_bytes: 4096,
            max_outstanding_packets: 1024,
            min_reorder_window_ns: 0,
            initial_rto_ns: 1_000_000,
            min_rto_ns: 200_000,
            max_rto_ns: 100_000_000,
            retry_limit: 7,
            unresponsive_budget_ns: None,
            rnr_timer_ns: 640_000,
            tlp: true,
            peer_max_ack_delay_ns: 10_000,
            go_back_n: false,
            burst_may_reorder: false,
            nack_retry_limit: 256,
            rtx_within_cwnd: true,
            rto_probe_oldest: false,
            adaptive_reorder_window: false,
        }
    }
}

/// State of one sent packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PktState {
    /// Sent, not acknowledged, not queued.
    InFlight,
    /// Waiting in the retransmit queue.
    Queued,
    /// Acknowledged.
    Acked,
    /// Answered with NACK(RECEIVER_NOT_READY): held back until the RNR timer
    /// ([`SendState::rnr_deadline_ns`]) queues it again.
    RnrWait,
}

/// Record of one sent packet.
#[derive(Clone, Copy, Debug)]
pub struct SentPacket {
    /// Message sequence number.
    pub msn: u64,
    /// Offset of the payload in the message, bytes.
    pub offset: u32,
    /// Payload bytes.
    pub len: u32,
    /// Time of the latest transmission, ns.
    pub last_sent_ns: u64,
    /// EV index of the first transmission.
    pub orig_ev: u16,
    /// EV index of the latest transmission.
    pub last_ev: u16,
    /// Send timestamp (low 32 bits of ns) of the first transmission.
    pub orig_ts32: u32,
    /// Send timestamp (low 32 bits of ns) of the latest transmission.
    pub last_ts32: u32,
    /// Transmissions so far.
    pub transmissions: u16,
    /// State.
    pub state: PktState,
    /// A loss was declared for it (RACK or RTO) at least once.
    pub loss_declared: bool,
    /// Queued by a NACK that reports a full queue (TRIMMED, TRIMMED_LASTHOP,
    /// NO_PKT_BUFFER; [`SendState::queue_nacked_retransmit`]): with
    /// [`SendConfig::rtx_within_cwnd`] its resend waits for window space. Cleared when it
    /// is sent.
    pub cwnd_gated: bool,
}

impl SentPacket {
    /// The EV index credited with delivering this packet when a SACK echoing `echo` (EV
    /// index, timestamp low 32 bits) acknowledges it at `now_ns`: the EV of its latest
    /// transmission, unless that copy cannot be the one that arrived: the SACK echoes the
    /// original transmission (the original arrived first: a spurious loss), or the latest
    /// copy left less than `min_rtt_ns` (the smallest RTT sample) ago, too recently to have
    /// arrived and been acknowledged, so an earlier copy did. Crediting such a
    /// retransmission's EV would clear a dead EV's consecutive losses and recycle it onto
    /// the dead path. The late original's EV is not credited either: the spurious-loss
    /// undo clears its losses, but a path so slow that its packet was declared lost is not
    /// recycled (REPS recycles EVs whose packets come back promptly and unmarked).
    pub fn delivered_ev(
        &self,
        echo: Option<(usize, u32)>,
        now_ns: u64,
        min_rtt_ns: u64,
    ) -> Option<usize> {
        let (orig, last) = (usize::from(self.orig_ev), usize::from(self.last_ev));
        if self.transmissions <= 1 || echo == Some((last, self.last_ts32)) {
            return Some(last);
        }
        let original_arrived = echo == Some((orig, self.orig_ts32));
        let too_recent = now_ns.saturating_sub(self.last_sent_ns) < min_rtt_ns;
        (!original_arrived && !too_recent).then_some(last)
    }
}

/// A placeholder for the slots of a [`SentRing`] that hold no packet.
const EMPTY_SENT: SentPacket = SentPacket {
    msn: 0,
    offset: 0,
    len: 0,
    last_sent_ns: 0,
    orig_ev: 0,
    last_ev: 0,
    orig_ts32: 0,
    last_ts32: 0,
    transmissions: 0,
    state: PktState::Acked,
    loss_declared: false,
    cwnd_gated: false,
};

/// The records of the packets in `[snd_una, snd_nxt)`, oldest first: a ring of a power of
/// two slots that doubles when full. A `VecDeque` does the same, but its push is an
/// out-of-line call (~30 instructions per packet sent) and every index wraps by a compare;
/// here a push is a store and an index a mask.
#[derive(Debug)]
struct SentRing {
    /// `buf.len()` slots, a power of two (or none).
    buf: Vec<SentPacket>,
    /// Slot of the oldest record.
    head: usize,
    /// Records held (`<= buf.len()`).
    len: usize,
}

impl SentRing {
    fn new() -> Self {
        SentRing {
            buf: Vec::new(),
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn slot(&self, i: usize) -> usize {
        // `buf.len()` is a power of two: the mask wraps (an empty ring has no `i < len`)
        self.head.wrapping_add(i) & self.buf.len().wrapping_sub(1)
    }

    /// The `i`-th oldest record.
    #[inline]
    fn get(&self, i: usize) -> Option<&SentPacket> {
        if i >= self.len {
            return None;
        }
        self.buf.get(self.slot(i))
    }

    /// The `i`-th oldest record, mutable.
    #[inline]
    fn get_mut(&mut self, i: usize) -> Option<&mut SentPacket> {
        if i >= self.len {
            return None;
        }
        let slot = self.slot(i);
        self.buf.get_mut(slot)
    }

    #[inline]
    fn push_back(&mut self, p: SentPacket) {
        if self.len == self.buf.len() {
            self.grow();
        }
        let slot = self.slot(self.len);
        if let Some(s) = self.buf.get_mut(slot) {
            *s = p;
            self.len += 1;
        }
    }

    /// Doubles the slots (16 at first), the records oldest first from slot 0.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let cap = (self.buf.len() * 2).max(16);
        let mut buf = Vec::with_capacity(cap);
        buf.extend(self.iter().copied());
        buf.resize(cap, EMPTY_SENT);
        self.buf = buf;
        self.head = 0;
    }

    /// Drops the `n` oldest records (all when `n >= len`).
    #[inline]
    fn drop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = self.slot(n);
        self.len -= n;
    }

    fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// The records, oldest first.
    fn iter(&self) -> impl DoubleEndedIterator<Item = &SentPacket> + ExactSizeIterator + '_ {
        // `slot` is below `buf.len()` (a mask of it), which is not 0 while `len > 0`
        (0..self.len).map(move |i| &self.buf[self.slot(i)])
    }
}

#[derive(Clone, Copy, Debug)]
struct SendMsg {
    spec: MsgSpec,
    n_packets: u32,
    acked_packets: u32,
}

/// The next packet the sender wants to transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxPacket {
    /// Sequence number (PSN = low 24 bits).
    pub seq: u64,
    /// Message sequence number.
    pub msn: u64,
    /// The message.
    pub msg: MsgSpec,
    /// Payload offset in the message, bytes.
    pub offset: u32,
    /// Payload bytes.
    pub len: u32,
    /// First packet of its message.
    pub first: bool,
    /// Last packet of its message.
    pub last: bool,
    /// A retransmission.
    pub retransmit: bool,
    /// EV index to avoid (the one the previous copy went on).
    pub avoid_ev: Option<usize>,
    /// A tail loss probe ([`SendState::on_tlp`]): the caller sends it on an EV whose round
    /// trip worked lately ([`PathTable::select_for_probe`]), since its answer comes back on
    /// the EV it goes on.
    pub probe: bool,
}

impl TxPacket {
    /// The PSN of this packet.
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn::from_seq(self.seq)
    }
}

/// What one SACK did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// Packets newly acknowledged.
    pub acked_packets: u32,
    /// Payload bytes newly acknowledged.
    pub acked_bytes: u64,
    /// Of those, packets whose loss declaration proved spurious.
    pub spurious: u32,
    /// RTT sample from the latest-sent newly acknowledged packet sent once, ns.
    pub rtt_sample_ns: Option<u64>,
}

/// The fields of a SACK the sender acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SackInfo {
    /// Cumulative PSN: every earlier PSN was received.
    pub cum: Psn,
    /// First PSN of the bitmap.
    pub base: Psn,
    /// Bit `i` set: `base + i` received.
    pub bitmap: u64,
    /// (EV index, send timestamp low 32 bits) of the packet that triggered the SACK.
    pub echo: Option<(usize, u32)>,
}

/// A SACK or NACK named PSNs that were never sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidAck;

/// Default [`SendConfig::unresponsive_budget_ns`] of the engine's QPs: 5 s, in the range
/// that NCCL's defaults give an IB QP (`NCCL_IB_TIMEOUT` 20: 4.096 us x 2^20 = 4.3 s per
/// try, `NCCL_IB_RETRY_CNT` 7 tries).
pub const DEFAULT_UNRESPONSIVE_BUDGET_NS: u64 = 5_000_000_000;

/// Why the sender gave up (its work requests failed with [`WcStatus::RetryExceeded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// [`SendConfig::retry_limit`] consecutive RTO expiries passed without progress.
    RetryLimit {
        /// The expiries counted.
        expiries: u32,
    },
    /// The peer answered nothing for [`SendConfig::unresponsive_budget_ns`].
    PeerUnresponsive {
        /// How long it had been silent, ns.
        silent_ns: u64,
    },
    /// For [`SendConfig::unresponsive_budget_ns`] the peer answered only
    /// NACK(RECEIVER_NOT_READY): it is alive but posts no receive (or a forger keeps
    /// answering for it).
    ReceiverNotReady {
        /// How long nothing but RNR NACKs came, ns.
        waited_ns: u64,
    },
}

impl std::fmt::Display for GiveUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GiveUp::RetryLimit { expiries } => {
                write!(f, "retry limit: {expiries} RTO expiries without progress")
            }
            GiveUp::PeerUnresponsive { silent_ns } => {
                write!(f, "peer unresponsive for {:.1} s", *silent_ns as f64 / 1e9)
            }
            GiveUp::ReceiverNotReady { waited_ns } => write!(
                f,
                "peer not ready to receive (no receive posted) for {:.1} s",
                *waited_ns as f64 / 1e9
            ),
        }
    }
}

/// What loss detection or an RTO did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossOutcome {
    /// Packets newly declared lost.
    pub lost_packets: u32,
    /// Their payload bytes.
    pub lost_bytes: u64,
    /// The sender gave up (retry limit or time budget): every work request failed.
    pub failed: bool,
}

/// Sender state.
#[derive(Debug)]
pub struct SendState {
    cfg: SendConfig,
    snd_una: u64,
    snd_nxt: u64,
    pkts: SentRing,
    msgs: VecDeque<SendMsg>,
    /// MSN of `msgs[0]`.
    msgs_base: u64,
    /// MSN and offset of the next new segment.
    seg_msn: u64,
    seg_offset: u32,
    rtx: BTreeSet<u64>,
    /// Payload bytes of the packets in `rtx` (kept beside it: `next_tx` needs it for every
    /// window-gated retransmission, and summing a queue of 1024 per call made a mass trim
    /// quadratic).
    rtx_bytes: u64,
    /// The entries of `rtx` not [`SentPacket::cwnd_gated`] (loss retransmissions, the tail
    /// loss probe): they go at once even while a gated one ahead of them waits.
    rtx_free: BTreeSet<u64>,
    bytes_in_flight: u64,
    /// Estimator of the RTT.
    pub rtt: RttEstimator,
    rack: Rack,
    rack_timer_ns: Option<u64>,
    rto_backoff: u32,
    /// Time of the latest acknowledgement of new data, ns (RFC 6298 5.3 restarts the
    /// retransmission timer there).
    last_progress_ns: u64,
    /// Packets in state `InFlight`.
    in_flight_pkts: u64,
    /// The plane of each EV index ([`SendState::set_ev_planes`]; empty on one plane, where
    /// nothing is counted per plane).
    ev_plane: Box<[u8]>,
    /// Packets in state `InFlight` per plane, by the EV of their latest transmission
    /// (empty on one plane).
    in_flight_by_plane: Box<[u32]>,
    /// Per-EV RTT samples of one SACK: the EVs that it newly acknowledged with a known
    /// send time, in the order first met, each with the send time of its latest-sent such
    /// packet (ns). Reused from SACK to SACK (no allocation once the EVs are known).
    ev_samples: EvSamples,
    /// Time of the latest transmission (first or retransmission), ns.
    last_transmit_ns: u64,
    /// A tail loss probe was sent and nothing new has been acknowledged since.
    tlp_outstanding: bool,
    /// Sequence number of the tail loss probe queued and not yet sent.
    tlp_seq: Option<u64>,
    /// Since when work has waited that no EV can carry (every EV denied): the RTO runs
    /// from here while nothing is in flight, so the retry limit still applies.
    blocked_since_ns: Option<u64>,
    /// Since when the peer has answered nothing while data waits for it (see
    /// [`SendConfig::unresponsive_budget_ns`]): the first transmission after everything was
    /// acknowledged, moved on by every acknowledgement of new data and RNR NACK.
    silent_since_ns: u64,
    /// When the packets in [`PktState::RnrWait`] are queued again, ns.
    rnr_until_ns: Option<u64>,
    /// Time of the latest NACK(RECEIVER_NOT_READY) acted on, ns.
    last_rnr_ns: Option<u64>,
    /// Time of the latest RTO expiry, ns: with [`SendConfig::rto_probe_oldest`] the timer
    /// restarts there (RFC 6298 5.5-5.6), since the packets still in flight after the
    /// probe left long ago.
    rto_fired_ns: u64,
    /// Adaptive reorder window ([`SendConfig::adaptive_reorder_window`]): the multiplier,
    /// the recoveries left before it returns to 1, and the `snd_nxt` that ends the round
    /// trip of its latest step.
    reo_mult: u32,
    reo_persist: u32,
    reo_round_end: u64,
    /// (EV index, send timestamp low 32 bits) of copies declared lost, newest last, at most
    /// [`MAX_SUSPECTS`]: a SACK echoing one proves that copy arrived after all, even when
    /// its retransmission arrived (and was acknowledged) first, since the receiver answers
    /// the late duplicate at once echoing it (TCP's DSACK evidence, RFC 2883).
    suspects: HashSet<(u16, u32)>,
    suspect_order: VecDeque<(u16, u32)>,
    completions: VecDeque<Completion>,
    failed: bool,
    give_up: Option<GiveUp>,
}

/// One packet whose latest transmission went on EV index `ev` left flight: its plane's
/// count (`ev_plane`, `by_plane`: see [`SendState::set_ev_planes`]) drops by one.
#[inline]
fn plane_sub(ev_plane: &[u8], by_plane: &mut [u32], ev: usize) {
    if let Some(&q) = ev_plane.get(ev)
        && let Some(c) = by_plane.get_mut(usize::from(q))
    {
        *c = c.saturating_sub(1);
    }
}

impl SendState {
    /// Empty sender state whose first PSN is `initial_psn`.
    pub fn new(initial_psn: Psn, cfg: SendConfig) -> Self {
        let start = u64::from(initial_psn.value());
        SendState {
            cfg,
            snd_una: start,
            snd_nxt: start,
            pkts: SentRing::new(),
            msgs: VecDeque::new(),
            msgs_base: 0,
            seg_msn: 0,
            seg_offset: 0,
            rtx: BTreeSet::new(),
            rtx_bytes: 0,
            rtx_free: BTreeSet::new(),
            bytes_in_flight: 0,
            rtt: RttEstimator::new(cfg.initial_rto_ns),
            rack: Rack::default(),
            rack_timer_ns: None,
            rto_backoff: 0,
            last_progress_ns: 0,
            in_flight_pkts: 0,
            ev_plane: Box::default(),
            in_flight_by_plane: Box::default(),
            ev_samples: EvSamples::default(),
            last_transmit_ns: 0,
            tlp_outstanding: false,
            tlp_seq: None,
            blocked_since_ns: None,
            silent_since_ns: 0,
            rnr_until_ns: None,
            last_rnr_ns: None,
            rto_fired_ns: 0,
            reo_mult: 1,
            reo_persist: 0,
            reo_round_end: start,
            suspects: HashSet::new(),
            suspect_order: VecDeque::new(),
            completions: VecDeque::new(),
            failed: false,
            give_up: None,
        }
    }

    /// The configuration.
    #[inline]
    pub fn config(&self) -> &SendConfig {
        &self.cfg
    }

    /// Lowest unacknowledged sequence number.
    #[inline]
    pub fn snd_una(&self) -> u64 {
        self.snd_una
    }

    /// Next new sequence number.
    #[inline]
    pub fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// Payload bytes sent and not yet acknowledged.
    #[inline]
    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    /// Payload bytes of the packets waiting in the retransmit queue (counted in
    /// [`SendState::bytes_in_flight`] but not in the network). O(1): a running count.
    pub fn queued_bytes(&self) -> u64 {
        self.debug_check_rtx();
        self.rtx_bytes
    }

    /// Debug builds: the running counts beside the retransmit queue agree with it (its
    /// bytes, its entries not window-gated).
    fn debug_check_rtx(&self) {
        if cfg!(debug_assertions) {
            let bytes: u64 = self
                .rtx
                .iter()
                .filter_map(|&seq| self.packet(seq))
                .map(|p| u64::from(p.len))
                .sum();
            assert_eq!(self.rtx_bytes, bytes, "queued bytes");
            let free = self
                .rtx
                .iter()
                .copied()
                .filter(|&seq| self.packet(seq).is_some_and(|p| !p.cwnd_gated));
            assert!(free.eq(self.rtx_free.iter().copied()), "ungated queue");
        }
    }

    /// Puts `seq` (payload `len` bytes) into the retransmit queue.
    #[inline]
    fn rtx_insert(&mut self, seq: u64, len: u32) {
        if self.rtx.insert(seq) {
            self.rtx_bytes += u64::from(len);
            self.rtx_free.insert(seq);
        }
    }

    /// Takes `seq` (payload `len` bytes) out of the retransmit queue, if there.
    #[inline]
    fn rtx_remove(&mut self, seq: u64, len: u32) {
        if self.rtx.remove(&seq) {
            self.rtx_bytes -= u64::from(len);
            self.rtx_free.remove(&seq);
        }
    }

    /// Sequence numbers waiting in the retransmit queue, ascending.
    pub fn retransmit_queue(&self) -> impl Iterator<Item = u64> + '_ {
        self.rtx.iter().copied()
    }

    /// The record of `seq` if it is still tracked (`snd_una <= seq < snd_nxt`).
    #[inline]
    pub fn packet(&self, seq: u64) -> Option<&SentPacket> {
        seq.checked_sub(self.snd_una)
            .and_then(|i| self.pkts.get(usize::try_from(i).ok()?))
    }

    #[inline]
    fn packet_mut(&mut self, seq: u64) -> Option<&mut SentPacket> {
        let i = usize::try_from(seq.checked_sub(self.snd_una)?).ok()?;
        self.pkts.get_mut(i)
    }

    /// Work requests posted and not yet completed whose local buffer is in region `lkey`.
    pub fn messages_using(&self, lkey: u32) -> usize {
        self.msgs
            .iter()
            .filter(|m| m.spec.local_lkey == lkey)
            .count()
    }

    /// Work requests posted and not yet completed.
    pub fn outstanding_messages(&self) -> usize {
        self.msgs.len()
    }

    /// Whether every posted work request has completed.
    pub fn is_idle(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Whether the retry limit was exceeded.
    pub fn has_failed(&self) -> bool {
        self.failed
    }

    /// Why the sender gave up, if it did (retry limit or time budget).
    pub fn give_up(&self) -> Option<GiveUp> {
        self.give_up
    }

    /// Declares in-flight `seq` lost: queued for retransmission, its copy remembered as a
    /// suspect (a late arrival proves the loss spurious). Returns its payload bytes and the
    /// EV index it last went on; `None` (nothing changes) unless it is in flight.
    fn declare_lost(&mut self, seq: u64) -> Option<(u32, usize)> {
        let p = self.packet_mut(seq)?;
        if p.state != PktState::InFlight {
            return None;
        }
        p.state = PktState::Queued;
        p.loss_declared = true;
        let (len, ev, ts32) = (p.len, p.last_ev, p.last_ts32);
        self.suspect(ev, ts32);
        self.rtx_insert(seq, len);
        self.in_flight_pkts -= 1;
        self.plane_left(ev);
        Some((len, usize::from(ev)))
    }

    /// Remembers the copy (EV index `ev`, timestamp `ts32`) just declared lost.
    fn suspect(&mut self, ev: u16, ts32: u32) {
        if self.suspects.insert((ev, ts32)) {
            self.suspect_order.push_back((ev, ts32));
            if self.suspect_order.len() > MAX_SUSPECTS
                && let Some(old) = self.suspect_order.pop_front()
            {
                self.suspects.remove(&old);
            }
        }
    }

    /// RACK's reorder window now, ns: [`reorder_window_ns`] of the RTT estimates, times the
    /// adaptive multiplier ([`SendConfig::adaptive_reorder_window`], at most up to
    /// `min_rto_ns`).
    pub fn reorder_window_ns(&self) -> u64 {
        let base = reorder_window_ns(self.cfg.min_reorder_window_ns, &self.rtt);
        if self.reo_mult <= 1 {
            return base;
        }
        base.saturating_mul(u64::from(self.reo_mult))
            .min(base.max(self.cfg.min_rto_ns))
    }

    /// The adaptive reorder window's multiplier (1 without adaptation).
    pub fn reorder_window_mult(&self) -> u32 {
        self.reo_mult
    }

    /// The RTO without back-off, ns: RFC 6298 `SRTT + 4 RTTVAR` (the initial RTO before the
    /// first sample), clamped to `[min_rto_ns, max_rto_ns]`.
    #[inline]
    pub fn base_rto_ns(&self) -> u64 {
        self.rtt.rto_ns(self.cfg.min_rto_ns, self.cfg.max_rto_ns)
    }

    /// Current RTO including back-off, ns.
    pub fn rto_ns(&self) -> u64 {
        let base = self.rtt.rto_ns(self.cfg.min_rto_ns, self.cfg.max_rto_ns);
        base.checked_shl(self.rto_backoff.min(32))
            .unwrap_or(u64::MAX)
            .min(self.cfg.max_rto_ns.max(base))
    }

    /// Posts a message; returns its MSN.
    #[inline]
    pub fn post(&mut self, spec: MsgSpec) -> u64 {
        let msn = self.msgs_base + self.msgs.len() as u64;
        self.msgs.push_back(SendMsg {
            spec,
            n_packets: packets_for(spec.len, self.cfg.mtu_payload_bytes),
            acked_packets: 0,
        });
        msn
    }

    #[inline]
    fn msg(&self, msn: u64) -> Option<&SendMsg> {
        self.msgs
            .get(usize::try_from(msn.checked_sub(self.msgs_base)?).ok()?)
    }

    #[inline]
    fn msg_mut(&mut self, msn: u64) -> Option<&mut SendMsg> {
        let i = usize::try_from(msn.checked_sub(self.msgs_base)?).ok()?;
        self.msgs.get_mut(i)
    }

    /// Whether queued `seq` waits for window space now ([`SendConfig::rtx_within_cwnd`]):
    /// it is [`SentPacket::cwnd_gated`], not the tail loss probe, and the bytes in the
    /// network (in flight minus queued) are above 0 and leave no room for it in
    /// `cwnd_bytes`.
    #[inline]
    fn waits_for_window(&self, seq: u64, cwnd_bytes: u64) -> bool {
        let Some(p) = self.packet(seq) else {
            return false;
        };
        if !self.cfg.rtx_within_cwnd || !p.cwnd_gated || self.tlp_seq == Some(seq) {
            return false;
        }
        let in_network = self.bytes_in_flight.saturating_sub(self.queued_bytes());
        in_network > 0 && in_network + u64::from(p.len) > cwnd_bytes
    }

    /// The packet to send next, if any: the lowest queued retransmission first (when it
    /// waits for window space, the lowest one that does not wait: a loss retransmission or
    /// the tail loss probe), then new data if the peer window allows and
    /// `bytes_in_flight + len <= cwnd_bytes` (or nothing is in flight).
    #[inline(always)]
    pub fn next_tx(&self, cwnd_bytes: u64) -> Option<TxPacket> {
        if self.failed {
            return None;
        }
        let mtu = self.cfg.mtu_payload_bytes;
        if let Some(&head) = self.rtx.first() {
            let seq = if self.waits_for_window(head, cwnd_bytes) {
                // a gated resend waits; what was declared lost (or probes the tail) need
                // not wait behind it (or for the RTO to empty the network)
                *self.rtx_free.first()?
            } else {
                head
            };
            if seq - self.snd_una >= u64::from(self.cfg.max_outstanding_packets) {
                // beyond the (learnt) peer window: wait until snd_una moves
                return None;
            }
            let p = self.packet(seq)?;
            let probe = self.tlp_seq == Some(seq);
            let m = self.msg(p.msn)?;
            return Some(TxPacket {
                seq,
                msn: p.msn,
                msg: m.spec,
                offset: p.offset,
                len: p.len,
                first: p.offset == 0,
                last: p.offset.saturating_add(p.len) >= m.spec.len,
                retransmit: true,
                avoid_ev: Some(usize::from(p.last_ev)),
                probe,
            });
        }
        if self.snd_nxt - self.snd_una >= u64::from(self.cfg.max_outstanding_packets) {
            return None;
        }
        let m = self.msg(self.seg_msn)?;
        let len = segment_len(m.spec.len, self.seg_offset, mtu);
        if self.bytes_in_flight > 0 && self.bytes_in_flight + u64::from(len) > cwnd_bytes {
            return None;
        }
        Some(TxPacket {
            seq: self.snd_nxt,
            msn: self.seg_msn,
            msg: m.spec,
            offset: self.seg_offset,
            len,
            first: self.seg_offset == 0,
            last: self.seg_offset.saturating_add(len) >= m.spec.len,
            retransmit: false,
            avoid_ev: None,
            probe: false,
        })
    }

    /// Records that `tx` (from [`SendState::next_tx`]) left at `now_ns` on EV index
    /// `ev` with send timestamp `ts32`.
    #[inline]
    pub fn on_transmit(&mut self, tx: &TxPacket, now_ns: u64, ev: usize, ts32: u32) {
        let ev16 = u16::try_from(ev).unwrap_or(u16::MAX);
        self.blocked_since_ns = None;
        if tx.retransmit {
            self.rtx_remove(tx.seq, tx.len);
            if self.tlp_seq == Some(tx.seq) {
                self.tlp_seq = None;
            }
            if let Some(p) = self.packet_mut(tx.seq) {
                p.state = PktState::InFlight;
                p.cwnd_gated = false;
                p.transmissions = p.transmissions.saturating_add(1);
                p.last_sent_ns = now_ns;
                p.last_ev = ev16;
                p.last_ts32 = ts32;
            }
            self.in_flight_pkts += 1;
            self.plane_entered(ev16);
            self.last_transmit_ns = now_ns;
            return;
        }
        debug_assert_eq!(tx.seq, self.snd_nxt);
        if self.snd_una == self.snd_nxt {
            // nothing was waiting for an answer: the silence starts now
            self.silent_since_ns = now_ns;
        }
        self.pkts.push_back(SentPacket {
            msn: tx.msn,
            offset: tx.offset,
            len: tx.len,
            last_sent_ns: now_ns,
            orig_ev: ev16,
            last_ev: ev16,
            orig_ts32: ts32,
            last_ts32: ts32,
            transmissions: 1,
            state: PktState::InFlight,
            loss_declared: false,
            cwnd_gated: false,
        });
        self.snd_nxt += 1;
        self.bytes_in_flight += u64::from(tx.len);
        self.in_flight_pkts += 1;
        self.plane_entered(ev16);
        self.last_transmit_ns = now_ns;
        if tx.last {
            self.seg_msn += 1;
            self.seg_offset = 0;
        } else {
            self.seg_offset += tx.len;
        }
    }

    /// Applies a SACK (see [`SackInfo`]). Per-EV counters in `paths` and `stats` are
    /// updated.
    ///
    /// # Errors
    /// [`InvalidAck`] when it acknowledges a PSN at or beyond `snd_nxt`; nothing changes.
    #[inline]
    pub fn on_sack(
        &mut self,
        now_ns: u64,
        sack: SackInfo,
        paths: &mut PathTable,
        stats: &mut ConnStats,
    ) -> Result<AckOutcome, InvalidAck> {
        let SackInfo {
            cum,
            base,
            bitmap,
            echo,
        } = sack;
        let cum_seq = cum.unwrap(self.snd_una);
        let base_seq = base.unwrap(self.snd_una);
        if cum_seq > self.snd_nxt {
            return Err(InvalidAck);
        }
        if bitmap != 0 {
            let top = base_seq + 63 - u64::from(bitmap.leading_zeros());
            if top >= self.snd_nxt {
                return Err(InvalidAck);
            }
        }
        let mut out = AckOutcome::default();
        let mut latest: Option<(u64, u64)> = None; // (sent, seq)
        self.ev_samples.clear();
        let snd_una = self.snd_una;
        let mut seq = snd_una;
        while seq < cum_seq {
            // the cumulative range: runs of packets sent once and in flight take the fast
            // path; anything else (and what follows a run) goes through `ack_one`
            seq = self.ack_run(now_ns, seq, cum_seq, paths, stats, &mut out, &mut latest);
            if seq < cum_seq {
                self.ack_one(now_ns, seq, echo, paths, stats, &mut out, &mut latest);
                seq += 1;
            }
        }
        let mut bits = bitmap;
        while bits != 0 {
            let seq = base_seq + u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            if seq >= snd_una {
                self.ack_one(now_ns, seq, echo, paths, stats, &mut out, &mut latest);
            }
        }
        if let Some((sent, seq)) = latest {
            let rtt = now_ns.saturating_sub(sent);
            self.rtt.on_sample(rtt);
            // every EV the SACK newly acknowledged takes its own sample, from its
            // latest-sent packet (the latest packet's EV: `rtt`, as it is among them with
            // the latest send time); the connection-wide sample is the latest packet's
            for &(e, s) in self.ev_samples.touched.iter() {
                paths.on_rtt_sample(usize::from(e), now_ns.saturating_sub(s));
            }
            if self.packet(seq).is_some_and(|p| p.transmissions > 1) {
                self.rack.on_ack_of_resend(sent, seq, now_ns);
            } else {
                self.rack.on_ack(sent, seq, now_ns, false);
            }
            out.rtt_sample_ns = Some(rtt);
        }
        // the acknowledged prefix goes at once (a drain from the front moves nothing); the
        // cumulative range is acknowledged (every packet in it was acked above), so the
        // scan starts after it
        let cum_acked = usize::try_from(cum_seq.saturating_sub(snd_una))
            .unwrap_or(usize::MAX)
            .min(self.pkts.len());
        debug_assert!(
            self.pkts
                .iter()
                .take(cum_acked)
                .all(|p| p.state == PktState::Acked)
        );
        let mut acked_prefix = cum_acked;
        while self
            .pkts
            .get(acked_prefix)
            .is_some_and(|p| p.state == PktState::Acked)
        {
            acked_prefix += 1;
        }
        self.pkts.drop_front(acked_prefix);
        self.snd_una += acked_prefix as u64;
        self.debug_check_rtx();
        if let Some((ev, ts32)) = echo
            && !self.suspects.is_empty()
            && let Ok(ev16) = u16::try_from(ev)
            && self.suspects.remove(&(ev16, ts32))
        {
            // a copy declared lost arrived late, after the packet was acknowledged through
            // another copy (or this SACK acknowledged it by that copy's own echo above,
            // which removed it from the suspects first)
            out.spurious += 1;
            stats.spurious += 1;
            if let Some(path) = paths.get_mut(ev) {
                path.stats.spurious += 1;
            }
            paths.undo_loss(ev);
        }
        if out.spurious > 0
            && self.cfg.adaptive_reorder_window
            && self.snd_una >= self.reo_round_end
        {
            // one step per round trip with spurious evidence (RFC 8985 6.2)
            self.reo_mult = (self.reo_mult + 1).min(REORDER_WINDOW_MULT_MAX);
            self.reo_persist = REORDER_WINDOW_PERSIST;
            self.reo_round_end = self.snd_nxt;
        }
        if out.acked_packets > 0 {
            self.rto_backoff = 0;
            self.last_progress_ns = now_ns;
            self.silent_since_ns = now_ns;
            self.tlp_outstanding = false;
            self.complete_messages();
        }
        Ok(out)
    }

    /// [`SendState::ack_one`] for each of `from..to` (`from >= snd_una`) while the packet
    /// is in flight, sent once and never declared lost (the common case, where the echo
    /// does not matter: the send time is unambiguous and the EV of its one transmission
    /// delivered it); returns the first sequence number not handled (`to` when all were).
    /// The effects are `ack_one`'s, in the same order for everything order-sensitive
    /// (per-EV counters, deliveries, the latest sample); the per-message and in-flight
    /// counts are summed and applied once.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn ack_run(
        &mut self,
        now_ns: u64,
        from: u64,
        to: u64,
        paths: &mut PathTable,
        stats: &mut ConnStats,
        out: &mut AckOutcome,
        latest: &mut Option<(u64, u64)>,
    ) -> u64 {
        let Ok(start) = usize::try_from(from - self.snd_una) else {
            return from;
        };
        let Ok(want) = usize::try_from(to - from) else {
            return from;
        };
        let mut seq = from;
        let mut done_pkts = 0u32;
        let mut done_bytes = 0u64;
        // some packet's EV is in the table: its evidence time is noted once, after the run
        let mut proven = false;
        // (msn, packets acknowledged) of the message being counted
        let mut msg_run: Option<(u64, u32)> = None;
        // a packet acknowledged after RACK's deadline (its EV is not recycled)
        let (rack, reo) = (self.rack, self.reorder_window_ns());
        let strict = self.cfg.burst_may_reorder;
        let msgs = &mut self.msgs;
        let msgs_base = self.msgs_base;
        let (ev_plane, by_plane) = (&self.ev_plane, &mut self.in_flight_by_plane);
        let ev_samples = &mut self.ev_samples;
        let mut flush = |run: Option<(u64, u32)>| {
            if let Some((msn, k)) = run
                && let Some(m) = msn
                    .checked_sub(msgs_base)
                    .and_then(|i| usize::try_from(i).ok())
                    .and_then(|i| msgs.get_mut(i))
            {
                m.acked_packets += k;
            }
        };
        let end = start.saturating_add(want).min(self.pkts.len());
        for i in start..end {
            let Some(p) = self.pkts.get_mut(i) else {
                break;
            };
            if p.state == PktState::Acked {
                seq += 1;
                continue;
            }
            if p.state != PktState::InFlight || p.transmissions != 1 || p.loss_declared {
                break;
            }
            p.state = PktState::Acked;
            done_pkts += 1;
            done_bytes += u64::from(p.len);
            let ev = usize::from(p.last_ev);
            plane_sub(ev_plane, by_plane, ev);
            let late = rack.acked_late(p.last_sent_ns, seq, strict, reo, now_ns);
            proven |= paths.on_acked_delivered(ev, p.last_sent_ns, now_ns, late);
            if latest.is_none_or(|l| (p.last_sent_ns, seq) > l) {
                *latest = Some((p.last_sent_ns, seq));
            }
            ev_samples.note(p.last_ev, p.last_sent_ns);
            match &mut msg_run {
                Some((msn, k)) if *msn == p.msn => *k += 1,
                run => {
                    flush(run.take());
                    *run = Some((p.msn, 1));
                }
            }
            seq += 1;
        }
        flush(msg_run);
        if proven {
            paths.note_proof_time(now_ns);
        }
        stats.acked += u64::from(done_pkts);
        self.in_flight_pkts -= u64::from(done_pkts);
        self.bytes_in_flight -= done_bytes;
        out.acked_packets += done_pkts;
        out.acked_bytes += done_bytes;
        // past the packets held (never, as `to <= snd_nxt`): `ack_one` finds none
        seq
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn ack_one(
        &mut self,
        now_ns: u64,
        seq: u64,
        echo: Option<(usize, u32)>,
        paths: &mut PathTable,
        stats: &mut ConnStats,
        out: &mut AckOutcome,
        latest: &mut Option<(u64, u64)>,
    ) {
        let Some(p) = self.packet_mut(seq) else {
            return;
        };
        if p.state == PktState::Acked {
            return;
        }
        let was = p.state;
        p.state = PktState::Acked;
        let p = *p;
        match was {
            PktState::Queued => self.rtx_remove(seq, p.len),
            PktState::InFlight => {
                self.in_flight_pkts -= 1;
                self.plane_left(p.last_ev);
            }
            PktState::RnrWait | PktState::Acked => {}
        }
        self.bytes_in_flight -= u64::from(p.len);
        out.acked_packets += 1;
        out.acked_bytes += u64::from(p.len);
        stats.acked += 1;
        if let Some(path) = paths.get_mut(usize::from(p.last_ev)) {
            path.stats.acked += 1;
        }
        if p.loss_declared && echo == Some((usize::from(p.orig_ev), p.orig_ts32)) {
            self.suspects.remove(&(p.orig_ev, p.orig_ts32));
            out.spurious += 1;
            stats.spurious += 1;
            if let Some(path) = paths.get_mut(usize::from(p.orig_ev)) {
                path.stats.spurious += 1;
            }
            paths.undo_loss(usize::from(p.orig_ev));
        }
        // Sent once, or the SACK echoes its latest transmission: the send time is known
        // (Karn's ambiguity resolved by the echoed EV and timestamp).
        let unambiguous = was == PktState::InFlight
            && (p.transmissions == 1 || echo == Some((usize::from(p.last_ev), p.last_ts32)));
        if let Some(ev) = p.delivered_ev(echo, now_ns, self.rtt.min_rtt_ns) {
            // the credited copy is always the latest transmission
            let strict = self.cfg.burst_may_reorder || p.transmissions > 1;
            let reo = self.reorder_window_ns();
            let late = self
                .rack
                .acked_late(p.last_sent_ns, seq, strict, reo, now_ns);
            if late {
                paths.on_delivered_late(ev, p.last_sent_ns, now_ns);
            } else {
                paths.on_delivered_sent(ev, p.last_sent_ns, now_ns);
            }
        }
        if unambiguous {
            if latest.is_none_or(|l| (p.last_sent_ns, seq) > l) {
                *latest = Some((p.last_sent_ns, seq));
            }
            self.ev_samples.note(p.last_ev, p.last_sent_ns);
        }
        if let Some(m) = self.msg_mut(p.msn) {
            m.acked_packets += 1;
        }
    }

    #[inline(never)]
    fn complete_messages(&mut self) {
        // the whole messages at the front, all of whose packets were segmented (the one
        // being segmented is not done even when every packet sent so far is acknowledged)
        let mut n = 0;
        while let Some(m) = self.msgs.get(n) {
            if m.acked_packets < m.n_packets || self.seg_msn <= self.msgs_base + n as u64 {
                break;
            }
            n += 1;
        }
        if n == 0 {
            return;
        }
        // in one `extend` of known length (a `push_back` per message is an out-of-line call)
        self.completions
            .extend(self.msgs.range(..n).map(|m| Completion {
                wr_id: m.spec.wr_id,
                opcode: send_opcode(&m.spec),
                status: WcStatus::Success,
                byte_len: m.spec.len,
                imm: None,
            }));
        self.msgs.drain(..n);
        self.msgs_base += n as u64;
    }

    /// Queues `seq` for retransmission if it is in flight (a NACK). Returns its payload
    /// bytes and the EV index it was last sent on; `None` (nothing changes) if it is
    /// acknowledged, already queued, or unknown.
    pub fn queue_retransmit(&mut self, seq: u64) -> Option<(u32, usize)> {
        let p = self.packet_mut(seq)?;
        if p.state != PktState::InFlight {
            return None;
        }
        p.state = PktState::Queued;
        let r = (p.len, usize::from(p.last_ev));
        let ev = p.last_ev;
        self.rtx_insert(seq, r.0);
        self.in_flight_pkts -= 1;
        self.plane_left(ev);
        Some(r)
    }

    /// [`SendState::queue_retransmit`] for a NACK that reports a full queue (TRIMMED,
    /// TRIMMED_LASTHOP, NO_PKT_BUFFER): with [`SendConfig::rtx_within_cwnd`] the resend
    /// waits for window space ([`SentPacket::cwnd_gated`]), except towards a go-back-N
    /// peer ([`SendConfig::go_back_n`]): it discards every packet behind the hole, so the
    /// packets the resend would wait for are lost without a trace (no SACK bitmap, no
    /// probe) and only the RTO would end the wait.
    pub fn queue_nacked_retransmit(&mut self, seq: u64) -> Option<(u32, usize)> {
        let r = self.queue_retransmit(seq)?;
        if self.cfg.go_back_n {
            return Some(r);
        }
        if let Some(p) = self.packet_mut(seq) {
            p.cwnd_gated = true;
        }
        self.rtx_free.remove(&seq);
        self.debug_check_rtx();
        Some(r)
    }

    /// NACK(RECEIVER_NOT_READY) for `seq` at `now_ns`: if it is in flight it is held back
    /// ([`PktState::RnrWait`]) until [`SendConfig::rnr_timer_ns`] after the first RNR NACK
    /// of the wait, then queued again by [`SendState::on_rnr_timer`]. Neither a loss nor a
    /// timeout: RACK and the RTO skip it, and the answer restarts the RTO's back-off (the
    /// peer is alive); the unresponsive budget keeps running (see
    /// [`GiveUp::ReceiverNotReady`]). It is no progress for the RTO of the other packets in
    /// flight: the receiver may refuse this one because an earlier message (whose packets
    /// were lost) may need the receive, and RNR rounds every `rnr_timer_ns` (shorter than
    /// the RTO) must not keep that earlier packet's RTO from firing for ever. Returns
    /// whether it was held.
    pub fn on_rnr_nack(&mut self, seq: u64, now_ns: u64) -> bool {
        let Some(p) = self.packet_mut(seq) else {
            return false;
        };
        if p.state != PktState::InFlight {
            return false;
        }
        p.state = PktState::RnrWait;
        let ev = p.last_ev;
        self.in_flight_pkts -= 1;
        self.plane_left(ev);
        self.last_rnr_ns = Some(now_ns);
        self.rto_backoff = 0;
        if self.rnr_until_ns.is_none() {
            self.rnr_until_ns = Some(now_ns.saturating_add(self.cfg.rnr_timer_ns));
        }
        true
    }

    /// When the packets held by RNR NACKs are queued again, ns.
    pub fn rnr_deadline_ns(&self) -> Option<u64> {
        self.rnr_until_ns
    }

    /// The RNR timer at `now_ns`: when due, every packet in [`PktState::RnrWait`] goes
    /// to the retransmit queue (not window-gated). Returns how many.
    pub fn on_rnr_timer(&mut self, now_ns: u64) -> u32 {
        if self.rnr_until_ns.is_none_or(|t| t > now_ns) {
            return 0;
        }
        self.rnr_until_ns = None;
        let mut n = 0;
        for seq in self.snd_una..self.snd_nxt {
            let Some(p) = self.packet_mut(seq) else { break };
            if p.state != PktState::RnrWait {
                continue;
            }
            p.state = PktState::Queued;
            let len = p.len;
            self.rtx_insert(seq, len);
            n += 1;
        }
        self.debug_check_rtx();
        n
    }

    /// NACK(PSN_OUT_OF_WINDOW) for `seq`: the peer's window ends at or before `seq`, so
    /// at most `seq - snd_una` packets may be outstanding from now on (never below 1), and
    /// `seq` waits in the retransmit queue until `snd_una` has moved far enough. Returns
    /// the new limit.
    pub fn on_out_of_window(&mut self, seq: u64) -> u32 {
        let limit = u32::try_from(seq.saturating_sub(self.snd_una))
            .unwrap_or(u32::MAX)
            .max(1);
        self.cfg.max_outstanding_packets = self.cfg.max_outstanding_packets.min(limit);
        self.queue_retransmit(seq);
        self.cfg.max_outstanding_packets
    }

    /// Go-back-N: queues every in-flight packet from `seq` on. Returns how many.
    pub fn go_back(&mut self, seq: u64) -> u32 {
        let mut n = 0;
        for s in seq.max(self.snd_una)..self.snd_nxt {
            if self.queue_retransmit(s).is_some() {
                n += 1;
            }
        }
        n
    }

    /// Whether `seq` is in `[snd_una, snd_nxt)`.
    #[inline]
    pub fn is_outstanding(&self, seq: u64) -> bool {
        seq >= self.snd_una && seq < self.snd_nxt
    }

    /// RACK: declares lost every in-flight packet overtaken by an acknowledged one more
    /// than `max(rtt, srtt of its EV) + reorder window` after it was sent (`rtt` the
    /// overtaking packet's, RFC 8985; the EV's smoothed RTT, [`crate::path::Path::srtt_ns`],
    /// where its path is slower); queues them for retransmission and reports each to its
    /// EV ([`PathTable::on_loss`]). Also computes the next RACK timer.
    #[inline]
    pub fn detect_losses(
        &mut self,
        now_ns: u64,
        paths: &mut PathTable,
        stats: &mut ConnStats,
    ) -> LossOutcome {
        let mut out = LossOutcome::default();
        self.rack_timer_ns = None;
        let reo = self.reorder_window_ns();
        let end = self.rack.scan_end(self.snd_nxt);
        let rack = self.rack;
        let reorders = self.cfg.burst_may_reorder;
        for seq in self.snd_una..end {
            let Some(p) = self.packet_mut(seq) else { break };
            // The sequence tie-break (RFC 8985) orders packets sent at the same ns by PSN,
            // which is their transmission order only for first transmissions: a
            // retransmission leaves after every higher PSN's original, so it is overtaken
            // only by a packet sent at a strictly later ns.
            let strict = reorders || p.transmissions > 1;
            if p.state != PktState::InFlight || !rack.overtaken(p.last_sent_ns, seq, strict) {
                continue;
            }
            // The overtaking packet's RTT is that of its own path; a packet sprayed on a
            // path whose queue is longer is given that path's smoothed RTT instead (the
            // EV's, RFC 6298 gains), so that a queue on one path is not loss.
            let ev_srtt = paths.get(usize::from(p.last_ev)).map_or(0, |e| e.srtt_ns);
            let deadline = rack
                .deadline_ns(p.last_sent_ns, reo)
                .max(p.last_sent_ns.saturating_add(ev_srtt).saturating_add(reo));
            if deadline <= now_ns {
                let sent_ns = p.last_sent_ns;
                let Some((len, ev)) = self.declare_lost(seq) else {
                    continue;
                };
                out.lost_packets += 1;
                out.lost_bytes += u64::from(len);
                stats.rack_losses += 1;
                if let Some(path) = paths.get_mut(ev) {
                    path.stats.lost += 1;
                }
                paths.on_loss_sent(ev, sent_ns, now_ns);
            } else {
                self.rack_timer_ns = Some(self.rack_timer_ns.map_or(deadline, |t| t.min(deadline)));
            }
        }
        if out.lost_packets > 0 && self.reo_mult > 1 {
            // a loss recovery; after REORDER_WINDOW_PERSIST of them without a spurious
            // loss the window returns to its base
            self.reo_persist = self.reo_persist.saturating_sub(1);
            if self.reo_persist == 0 {
                self.reo_mult = 1;
            }
        }
        out
    }

    /// When RACK next needs [`SendState::detect_losses`], if ever.
    pub fn rack_timer_ns(&self) -> Option<u64> {
        self.rack_timer_ns
    }

    /// The in-flight packet whose latest transmission is the earliest: (its time ns, its
    /// sequence number; the lowest one of that time).
    #[inline]
    fn oldest_in_flight(&self) -> Option<(u64, u64)> {
        let mut best: Option<(u64, u64)> = None;
        for (i, p) in self.pkts.iter().enumerate() {
            if p.state != PktState::InFlight {
                continue;
            }
            let cand = (p.last_sent_ns, self.snd_una + i as u64);
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
            if p.transmissions == 1 {
                // First transmissions leave in sequence order and every retransmission of
                // a later packet left after this one: nothing further is older.
                break;
            }
        }
        best
    }

    /// When the RTO fires: the RTO with back-off after the later of the timer's start and
    /// the latest acknowledgement of new data (RFC 6298 5.3: the timer restarts whenever
    /// new data is acknowledged, so a standing queue that still drains does not fire it).
    /// The timer starts at the oldest in-flight packet's send time or, with nothing in
    /// flight, when work began to wait for an EV (see [`SendState::on_blocked`]); `None`
    /// when neither holds.
    pub fn rto_deadline_ns(&self) -> Option<u64> {
        if self.failed {
            return None;
        }
        match (self.expiry_deadline_ns(), self.budget_deadline_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the RTO itself expires (see [`SendState::rto_deadline_ns`], which also counts
    /// the unresponsive budget's end).
    fn expiry_deadline_ns(&self) -> Option<u64> {
        let start = match (
            self.oldest_in_flight().map(|(t, _)| t),
            self.blocked_since_ns,
        ) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        let restart = if self.cfg.rto_probe_oldest {
            self.rto_fired_ns
        } else {
            0
        };
        Some(
            start
                .max(self.last_progress_ns)
                .max(restart)
                .saturating_add(self.rto_ns()),
        )
    }

    /// When the unresponsive budget ([`SendConfig::unresponsive_budget_ns`]) runs out, if
    /// one is set and something waits for an answer (in flight, held by an RNR NACK, or
    /// work waiting for an EV).
    fn budget_deadline_ns(&self) -> Option<u64> {
        let budget = self.cfg.unresponsive_budget_ns?;
        let waiting = self.in_flight_pkts > 0
            || !self.rtx.is_empty()
            || self.rnr_until_ns.is_some()
            || self.blocked_since_ns.is_some();
        waiting.then(|| self.silent_since_ns.saturating_add(budget))
    }

    /// Work is waiting ([`SendState::next_tx`] has a packet) but no EV can carry it (the
    /// datapath denied every EV) at `now_ns`. From the first such call until a packet
    /// leaves (or [`SendState::on_unblocked`]) the RTO runs although nothing is in flight,
    /// as an RC QP's retry timer runs while its port is down: each expiry counts against
    /// the retry limit, and past it the work requests fail with
    /// [`WcStatus::RetryExceeded`] instead of waiting for good.
    pub fn on_blocked(&mut self, now_ns: u64) {
        if !self.failed && self.blocked_since_ns.is_none() {
            self.blocked_since_ns = Some(now_ns);
            if self.snd_una == self.snd_nxt {
                // nothing was waiting for an answer: the unresponsive budget starts now
                self.silent_since_ns = now_ns;
            }
        }
    }

    /// An EV can carry packets again: the wait that [`SendState::on_blocked`] started is
    /// over (the RTO runs from the next transmission again).
    pub fn on_unblocked(&mut self) {
        self.blocked_since_ns = None;
    }

    /// Since when work has waited for an EV ([`SendState::on_blocked`]), ns.
    pub fn blocked_since_ns(&self) -> Option<u64> {
        self.blocked_since_ns
    }

    /// The RTO timer at `now_ns`: if it expired, every in-flight packet sent at least one
    /// (backed-off) RTO ago is declared lost (queued, its EV `AssumedBad` via
    /// [`PathTable::assume_bad`], a timeout counted per EV; with [`SendConfig::go_back_n`]
    /// every in-flight packet, and only the lowest one's EV is blamed), and so is every
    /// other in-flight packet sent at least `rack.rtt + reorder window` before `now_ns`
    /// (RFC 8985 section 6.3; both terms are 0 before the first RTT sample, so then every
    /// packet sent before `now_ns`): its answer is overdue just as if RACK had seen a later
    /// packet acknowledged, so it counts as a RACK loss (`rack_losses`, the EV's `lost`,
    /// [`PathTable::on_loss`]). Without that, a paced sender (DCQCN: no window holds the
    /// packets back, so they leave spread over time) resent one packet per expiry, the
    /// back-off doubling each time, while the rest waited for later expiries; with every
    /// answer lost on the way back that ran into the retry limit. Then the back-off
    /// doubles, and past the retry limit every work request fails
    /// ([`WcStatus::RetryExceeded`] for the oldest, [`WcStatus::Flushed`] for the rest).
    /// An expiry with nothing in flight (every EV denied, see [`SendState::on_blocked`])
    /// declares nothing lost but counts against the retry limit all the same.
    pub fn on_rto(
        &mut self,
        now_ns: u64,
        paths: &mut PathTable,
        stats: &mut ConnStats,
    ) -> LossOutcome {
        let mut out = LossOutcome::default();
        if self.failed {
            return out;
        }
        if let Some(b) = self.budget_deadline_ns()
            && now_ns >= b
        {
            let since = b - self.cfg.unresponsive_budget_ns.unwrap_or(0);
            let waited_ns = now_ns - since;
            self.fail_all(WcStatus::RetryExceeded);
            self.give_up = Some(if self.last_rnr_ns.is_some_and(|t| t >= since) {
                GiveUp::ReceiverNotReady { waited_ns }
            } else {
                GiveUp::PeerUnresponsive {
                    silent_ns: waited_ns,
                }
            });
            out.failed = true;
            return out;
        }
        if self.expiry_deadline_ns().is_none_or(|d| now_ns < d) {
            return out;
        }
        let rto = self.rto_ns();
        stats.timeouts += 1;
        self.rto_backoff += 1;
        self.rto_fired_ns = now_ns;
        if self.blocked_since_ns.is_some() {
            // still nothing can leave: the next expiry is one (backed-off) RTO from now
            self.blocked_since_ns = Some(now_ns);
        }
        if self.cfg.unresponsive_budget_ns.is_none() && self.rto_backoff > self.cfg.retry_limit {
            let expiries = self.rto_backoff;
            self.fail_all(WcStatus::RetryExceeded);
            self.give_up = Some(GiveUp::RetryLimit { expiries });
            out.failed = true;
            return out;
        }
        let go_back_n = self.cfg.go_back_n;
        if self.cfg.rto_probe_oldest && !go_back_n {
            self.rto_probe(now_ns, paths, stats, &mut out);
            return out;
        }
        // RFC 8985 6.3: a packet sent at least `rack.rtt + reorder window` ago would have
        // been acknowledged by now had it arrived (the same deadline RACK applies once a
        // later packet is acknowledged), so the expiry declares it lost too; not one sent
        // at this very ns (before any RTT sample its deadline is its send time).
        let reo = self.reorder_window_ns();
        let rack = self.rack;
        // Go-back-N: the receiver dropped everything behind the hole, so every packet in
        // flight goes back, not only those sent an RTO ago (with pacing, one per expiry
        // would leave at the doubling RTO until the retry limit).
        let due = |last_sent_ns: u64| {
            let expired = go_back_n || last_sent_ns.saturating_add(rto) <= now_ns;
            let overdue = last_sent_ns < now_ns && rack.deadline_ns(last_sent_ns, reo) <= now_ns;
            (expired, overdue)
        };
        // The planes whose packets this expiry declares lost. An expiry is silence on every
        // EV; when packets of several planes went unanswered together (a stalled receiver,
        // a descheduled host), nothing says one plane failed, and charging their losses to
        // the planes' loss streaks took down whichever plane's EVs came first (a real host
        // with a link flapping in plane 1 took plane 0 down 1-14 times per 5 s run). The
        // EVs are charged all the same; the planes only when the silence is one plane's
        // (the tail of a transfer whose last packets all went on a dead plane).
        let mut planes_due = 0u64;
        for seq in self.snd_una..self.snd_nxt {
            let Some(p) = self.packet(seq) else { break };
            if p.state == PktState::InFlight && due(p.last_sent_ns) != (false, false) {
                planes_due |= 1 << (paths.plane_of(usize::from(p.last_ev)) & 63);
            }
        }
        let charge_planes = planes_due.count_ones() <= 1;
        for seq in self.snd_una..self.snd_nxt {
            let Some(p) = self.packet_mut(seq) else { break };
            if p.state != PktState::InFlight {
                continue;
            }
            let (expired, overdue) = due(p.last_sent_ns);
            if !expired && !overdue {
                continue;
            }
            let sent_ns = p.last_sent_ns;
            let Some((len, ev)) = self.declare_lost(seq) else {
                continue;
            };
            if !expired {
                // younger than the RTO: lost by RACK's deadline, not by a timeout of its
                // own, so its EV is charged a loss as RACK would charge it
                stats.rack_losses += 1;
                if let Some(path) = paths.get_mut(ev) {
                    path.stats.lost += 1;
                }
                if charge_planes {
                    paths.on_loss_sent(ev, sent_ns, now_ns);
                } else {
                    paths.on_loss_ev(ev, now_ns);
                }
            } else {
                stats.rto_lost += 1;
            }
            if expired && (out.lost_packets == 0 || !go_back_n) {
                // Go-back-N: the receiver dropped every packet behind the hole whatever EV
                // carried it, so only the lowest expired packet's EV is suspect; blaming
                // the others would take live EVs out of rotation and leave the next round
                // only dead or unproven ones to start on.
                if let Some(path) = paths.get_mut(ev) {
                    path.stats.timeouts += 1;
                }
                if charge_planes {
                    paths.assume_bad_sent(ev, sent_ns, now_ns);
                } else {
                    paths.assume_bad_ev(ev, now_ns);
                }
            }
            out.lost_packets += 1;
            out.lost_bytes += u64::from(len);
        }
        out
    }

    /// [`SendConfig::rto_probe_oldest`]: the expiry declares lost only the in-flight packet
    /// sent longest ago (its EV `AssumedBad`, a timeout counted) and queues it as a probe.
    fn rto_probe(
        &mut self,
        now_ns: u64,
        paths: &mut PathTable,
        stats: &mut ConnStats,
        out: &mut LossOutcome,
    ) {
        let Some((_, seq)) = self.oldest_in_flight() else {
            return;
        };
        let Some((len, ev)) = self.declare_lost(seq) else {
            return;
        };
        stats.rto_lost += 1;
        self.tlp_seq = Some(seq);
        if let Some(path) = paths.get_mut(ev) {
            path.stats.timeouts += 1;
        }
        paths.assume_bad(ev, now_ns);
        out.lost_packets += 1;
        out.lost_bytes += u64::from(len);
    }

    /// The probe timeout: `max(2 SRTT, SRTT + reorder window) + peer_max_ack_delay_ns`
    /// (RFC 8985 7.2 uses `2 SRTT` plus the delayed-ACK allowance; the reorder-window term
    /// keeps a merely slower EV from being probed). `None` before the first RTT sample.
    pub fn pto_ns(&self) -> Option<u64> {
        if !self.rtt.has_sample() {
            return None;
        }
        let srtt = self.rtt.srtt_ns;
        let reo = self.reorder_window_ns();
        Some(
            srtt.saturating_mul(2)
                .max(srtt.saturating_add(reo))
                .saturating_add(self.cfg.peer_max_ack_delay_ns),
        )
    }

    /// When a tail loss probe is due: one PTO after the latest transmission, if packets
    /// are in flight, no retransmission is queued (with [`SendConfig::rtx_within_cwnd`],
    /// none but window-gated ones: they wait for the packets in flight, and if those are
    /// lost only the probe or the RTO finds it), no probe is outstanding, and it comes
    /// before the RTO.
    pub fn tlp_deadline_ns(&self) -> Option<u64> {
        if !self.cfg.tlp || self.failed || self.tlp_outstanding || self.in_flight_pkts == 0 {
            return None;
        }
        // a queued retransmission that can go would go first; window-gated ones wait for
        // the packets in the network, which only the probe (or the RTO) can find lost
        let waiting = if self.cfg.rtx_within_cwnd {
            &self.rtx_free
        } else {
            &self.rtx
        };
        if !waiting.is_empty() {
            return None;
        }
        let t = self.last_transmit_ns.saturating_add(self.pto_ns()?);
        match self.rto_deadline_ns() {
            Some(rto) if t >= rto => None,
            _ => Some(t),
        }
    }

    /// Sends a tail loss probe if one is due at `now_ns`: the highest in-flight packet is
    /// queued for retransmission (not declared lost). Returns whether it did.
    pub fn on_tlp(&mut self, now_ns: u64, stats: &mut ConnStats) -> bool {
        if self.tlp_deadline_ns().is_none_or(|t| t > now_ns) {
            return false;
        }
        let Some(i) = self
            .pkts
            .iter()
            .rposition(|p| p.state == PktState::InFlight)
        else {
            return false;
        };
        let seq = self.snd_una + i as u64;
        self.queue_retransmit(seq);
        self.tlp_outstanding = true;
        self.tlp_seq = Some(seq);
        stats.tail_loss_probes += 1;
        true
    }

    /// Packets in flight (sent, not acknowledged, not queued for retransmission).
    pub fn in_flight_packets(&self) -> u64 {
        self.in_flight_pkts
    }

    /// Tells the sender the plane of each EV index (`ev_plane[i]` for index `i`), so that
    /// it counts its packets in flight per plane ([`SendState::in_flight_by_plane`]); with
    /// fewer than two planes nothing is counted. Call before the first transmission.
    pub fn set_ev_planes(&mut self, ev_plane: &[u8]) {
        let planes = ev_plane
            .iter()
            .map(|&q| usize::from(q) + 1)
            .max()
            .unwrap_or(1);
        if planes < 2 {
            self.ev_plane = Box::default();
            self.in_flight_by_plane = Box::default();
            return;
        }
        self.ev_plane = ev_plane.into();
        self.in_flight_by_plane = vec![0; planes].into();
    }

    /// Packets in flight per plane, by the EV of their latest transmission (indexed by
    /// plane; empty with fewer than two planes, see [`SendState::set_ev_planes`]).
    #[inline]
    pub fn in_flight_by_plane(&self) -> &[u32] {
        &self.in_flight_by_plane
    }

    /// A packet whose latest transmission went on EV index `ev` is in flight.
    #[inline]
    fn plane_entered(&mut self, ev: u16) {
        if let Some(&q) = self.ev_plane.get(usize::from(ev))
            && let Some(c) = self.in_flight_by_plane.get_mut(usize::from(q))
        {
            *c += 1;
        }
    }

    /// A packet whose latest transmission went on EV index `ev` is no longer in flight.
    #[inline]
    fn plane_left(&mut self, ev: u16) {
        plane_sub(
            &self.ev_plane,
            &mut self.in_flight_by_plane,
            usize::from(ev),
        );
    }

    /// The EV index of the latest transmission of each packet in flight (sent, not
    /// acknowledged, not queued for retransmission), oldest first: the entries their
    /// acknowledgements will recycle. O(packets held): for rare events (an EV back in
    /// rotation, [`crate::path::PathTable::set_in_flight_evs`]).
    pub fn in_flight_evs(&self) -> impl Iterator<Item = usize> + '_ {
        self.pkts
            .iter()
            .filter(|p| p.state == PktState::InFlight)
            .map(|p| usize::from(p.last_ev))
    }

    /// Fails every outstanding work request: the oldest with `first_status`, the rest
    /// [`WcStatus::Flushed`]; clears all packet state. Later posts fail at once.
    pub fn fail_all(&mut self, first_status: WcStatus) {
        let mut first = true;
        while let Some(m) = self.msgs.pop_front() {
            self.completions.push_back(Completion {
                wr_id: m.spec.wr_id,
                opcode: send_opcode(&m.spec),
                status: if first {
                    first_status
                } else {
                    WcStatus::Flushed
                },
                byte_len: 0,
                imm: None,
            });
            first = false;
            self.msgs_base += 1;
        }
        self.seg_msn = self.msgs_base;
        self.seg_offset = 0;
        self.pkts.clear();
        self.rtx.clear();
        self.rtx_bytes = 0;
        self.rtx_free.clear();
        self.snd_una = self.snd_nxt;
        self.bytes_in_flight = 0;
        self.in_flight_pkts = 0;
        self.in_flight_by_plane.iter_mut().for_each(|c| *c = 0);
        self.rack_timer_ns = None;
        self.blocked_since_ns = None;
        self.rnr_until_ns = None;
        self.suspects.clear();
        self.suspect_order.clear();
        self.failed = true;
    }

    /// Next sender-side completion, in posting order.
    #[inline]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Whether sender-side completions wait to be taken ([`SendState::poll_completion`]).
    #[inline]
    pub fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    /// Moves every sender-side completion, in posting order, to the back of `out` (what
    /// [`SendState::poll_completion`] until `None` would give, in one move).
    #[inline]
    pub fn take_completions_into(&mut self, out: &mut VecDeque<Completion>) {
        if !self.completions.is_empty() {
            out.append(&mut self.completions);
        }
    }
}

/// The completion opcode of a send-side message.
pub fn send_opcode(spec: &MsgSpec) -> WcOpcode {
    match (spec.kind, spec.imm) {
        (MsgKind::Write { .. }, None) => WcOpcode::Write,
        (MsgKind::Write { .. }, Some(_)) => WcOpcode::WriteWithImm,
        (MsgKind::Send, _) => WcOpcode::Send,
    }
}

#[cfg(test)]
mod tests;

/// The EVs one SACK newly acknowledged with an unambiguous send time (Karn's rule), each
/// with its latest such send time, ns: every one takes an RTT sample
/// ([`SendState::on_sack`]), so an EV's smoothed RTT follows a queue that builds on it
/// even when the SACK's latest packet went elsewhere.
#[derive(Clone, Debug, Default)]
struct EvSamples {
    /// `(EV index, latest send time ns)` in the order first met.
    touched: Vec<(u16, u64)>,
    /// `slot[ev]`: 1 + the EV's index in `touched`, 0 when absent this SACK.
    slot: Vec<u16>,
}

impl EvSamples {
    fn clear(&mut self) {
        for &(e, _) in &self.touched {
            if let Some(s) = self.slot.get_mut(usize::from(e)) {
                *s = 0;
            }
        }
        self.touched.clear();
    }

    #[inline(always)]
    fn note(&mut self, ev: u16, sent_ns: u64) {
        let e = usize::from(ev);
        if e >= self.slot.len() {
            self.slot.resize(e + 1, 0);
        }
        match self.slot[e] {
            0 => {
                self.touched.push((ev, sent_ns));
                self.slot[e] = u16::try_from(self.touched.len()).unwrap_or(u16::MAX);
            }
            k => {
                if let Some(t) = self.touched.get_mut(usize::from(k) - 1) {
                    t.1 = t.1.max(sent_ns);
                }
            }
        }
    }
}
