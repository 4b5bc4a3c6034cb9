//! Counters per connection and per EV. Plain `u64`s, never reset by the transport.

/// Why an incoming datagram (or part of it) was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum DropReason {
    /// The datagram did not parse (truncated, bad length fields, bad sizes).
    Malformed = 0,
    /// Opcode not known to this version (`Opcode::Unknown`).
    UnknownOpcode,
    /// BTH destination QPN is not this connection's.
    WrongQpn,
    /// MRCETH generation is not the peer's current one.
    GenerationMismatch,
    /// The connection is not established (or already closed / in error).
    NotConnected,
    /// Data PSN at or beyond `rcv_nxt + window`.
    PsnOutOfWindow,
    /// A copy of a data PSN already received.
    Duplicate,
    /// RETH rkey unknown.
    BadRkey,
    /// RETH address/length outside the region.
    OutOfBounds,
    /// The region lacks REMOTE_WRITE (or LOCAL_WRITE for a SEND's receive buffer).
    AccessDenied,
    /// The packet disagrees with earlier packets of its message (length, kind, a second
    /// last packet) or names a message that already completed.
    InconsistentMessage,
    /// A SEND does not fit the posted receive buffer.
    RecvBufferTooSmall,
    /// An acknowledgement (SACK/NACK/probe reply) that names PSNs never sent, or a
    /// NACK(GENERATION_MISMATCH) that names no PSN in flight and unacknowledged.
    InvalidAck,
    /// Go-back-N mode: a data PSN other than `rcv_nxt`.
    OutOfOrderGoBackN,
    /// A probe reply that answers no outstanding probe (late, duplicated or forged).
    StaleProbeReply,
    /// The packet's MSN is too far ahead of the next message to complete (the receiver
    /// tracks at most `max_rx_messages`; e.g. SENDs waiting for `post_recv`).
    MessageWindowFull,
    /// The last packet of a SEND or WRITE_WITH_IMM found no posted receive free for it:
    /// not accepted, answered with NACK(RECEIVER_NOT_READY) (IBA's RNR NAK).
    ReceiverNotReady,
    /// Authentication is on and the datagram's tag does not check (or it has no trailer):
    /// dropped before it was parsed ([`crate::auth`]).
    AuthFailed,
    /// Authentication is on and the datagram's packet number was already accepted, or is
    /// older than the replay window ([`crate::auth`]).
    Replayed,
    /// A SEND packet whose receive buffer is not known yet would take the receiver's staged
    /// SEND payload beyond `max_staged_bytes`: not accepted, answered with
    /// NACK(RECEIVER_NOT_READY) ([`crate::recv`]).
    StagingFull,
    /// A Port Status Update acknowledgement that acknowledges no update waiting for one
    /// (late, duplicated or forged).
    StalePortStatus,
}

/// Number of [`DropReason`] variants.
pub const DROP_REASONS: usize = 21;

/// Drop counters indexed by [`DropReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts([u64; DROP_REASONS]);

impl DropCounts {
    /// Adds one drop for `reason`.
    pub fn add(&mut self, reason: DropReason) {
        if let Some(c) = self.0.get_mut(reason as usize) {
            *c += 1;
        }
    }

    /// Drops counted for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0.get(reason as usize).copied().unwrap_or(0)
    }

    /// Drops over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds `other`'s counts to these, reason by reason (saturating).
    pub fn merge(&mut self, other: &DropCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a = a.saturating_add(*b);
        }
    }
}

/// Counters of one EV (path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvStats {
    /// Data packets sent on this EV (first transmissions and retransmissions).
    pub sent: u64,
    /// Retransmissions sent on this EV.
    pub retransmitted: u64,
    /// Data packets acknowledged whose latest transmission went out on this EV.
    pub acked: u64,
    /// NACK(TRIMMED) received for packets sent on this EV.
    pub trimmed: u64,
    /// Data packets sent on this EV that arrived with ECN CE (from SACK ECN-CE counts).
    pub ecn_marked: u64,
    /// Packets sent on this EV declared lost by the RTO (go-back-N: only the lowest packet
    /// of each expiry, the one whose loss the silence implies).
    pub timeouts: u64,
    /// Packets sent on this EV declared lost by time-based (RACK) detection, including
    /// those an RTO expiry finds overdue by RACK's deadline (RFC 8985 section 6.3).
    pub lost: u64,
    /// Losses on this EV later found spurious.
    pub spurious: u64,
    /// Probes sent on this EV.
    pub probes_sent: u64,
    /// Probe replies received for this EV.
    pub probes_answered: u64,
    /// Times the EV went unproven for too long and was taken out until a probe answers
    /// ([`crate::path::PathTable::set_revalidate_after_ns`]).
    pub revalidations: u64,
    /// Times this path's EV was replaced by a spare EV of its plane
    /// ([`crate::path::REPLACE_AFTER_UNANSWERED_PROBES`]); the counters are the path's,
    /// over every EV it had.
    pub replaced: u64,
    /// Received datagrams dropped whose MRCETH names this EV, by reason.
    pub drops: DropCounts,
}

/// Counters of one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Data packets sent (first transmissions and retransmissions).
    pub sent: u64,
    /// Payload bytes sent in first transmissions.
    pub sent_bytes: u64,
    /// Retransmitted data packets.
    pub retransmitted: u64,
    /// Data packets acknowledged (each PSN once).
    pub acked: u64,
    /// NACK(TRIMMED) received (sender side).
    pub trimmed: u64,
    /// Trimmed data packets that arrived (receiver side).
    pub trimmed_received: u64,
    /// Data packets received with ECN CE (receiver side).
    pub ecn_ce_received: u64,
    /// ECN-CE marks reported back by SACKs (sender side).
    pub ecn_marked: u64,
    /// RTO expiries.
    pub timeouts: u64,
    /// Packets declared lost by RACK-style time detection, including those an RTO expiry
    /// finds overdue by RACK's deadline though younger than the RTO (RFC 8985 section 6.3).
    pub rack_losses: u64,
    /// Packets an RTO expiry declared lost because they were sent at least an RTO ago
    /// (and the oldest one under [`crate::send::SendConfig::rto_probe_oldest`]); those it
    /// finds overdue by RACK's deadline count in `rack_losses`. `rack_losses + rto_lost`
    /// are all the losses declared.
    pub rto_lost: u64,
    /// Declared losses (`rack_losses` or `rto_lost`) later found spurious: a copy declared
    /// lost was acknowledged after all. At most `rack_losses + rto_lost`.
    pub spurious: u64,
    /// Tail loss probes sent (RFC 8985 section 7).
    pub tail_loss_probes: u64,
    /// Data packets received and accepted (first copies).
    pub received: u64,
    /// Payload bytes placed.
    pub received_bytes: u64,
    /// SACKs sent.
    pub sacks_sent: u64,
    /// NACKs sent.
    pub nacks_sent: u64,
    /// CNPs sent.
    pub cnps_sent: u64,
    /// CNPs received.
    pub cnps_received: u64,
    /// SACKs received (valid ones).
    pub sacks_received: u64,
    /// NACKs received (valid ones).
    pub nacks_received: u64,
    /// EV probes received (each answered with a probe reply while the reply queue has room).
    pub probes_received: u64,
    /// Packets of another MRCETH generation (each also a
    /// [`DropReason::GenerationMismatch`] drop) and NACK(GENERATION_MISMATCH)s (each also a
    /// [`DropReason::InvalidAck`] drop) not taken as evidence of a peer restart because
    /// they echo no PSN this side has in flight: what an off-path forger sends unless it
    /// guesses such a PSN (RFC 5961 section 3 style; see [`crate::conn`]).
    pub restart_evidence_rejected: u64,
    /// NACK(RECEIVER_NOT_READY)s sent (receiver side): last packets of a SEND or
    /// WRITE_WITH_IMM refused because no posted receive was free for them.
    pub rnr_nacks_sent: u64,
    /// NACK(RECEIVER_NOT_READY)s acted on (sender side): each held its packet back for
    /// [`crate::send::SendConfig::rnr_timer_ns`].
    pub rnr_nacks_received: u64,
    /// NACKs ignored because they answer an earlier copy of their PSN than the latest
    /// one sent (their echoed EV and timestamp name another transmission).
    pub stale_nacks: u64,
    /// Port Status Updates sent (each copy; acknowledgements not counted).
    pub psu_sent: u64,
    /// Port Status Updates received from the peer (each copy, applied or not).
    pub psu_received: u64,
    /// This side's Port Status Updates the peer acknowledged.
    pub psu_acked: u64,
    /// Keepalive probes sent ([`crate::conn::KEEPALIVE_PROBE_SEQ`]): work posted, nothing
    /// in flight, the peer silent for the keepalive interval.
    pub keepalives_sent: u64,
    /// Answers to this side's keepalive probes received.
    pub keepalive_replies: u64,
    /// Incoming datagrams dropped, by reason.
    pub drops: DropCounts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_counts_by_reason() {
        let mut d = DropCounts::default();
        d.add(DropReason::BadRkey);
        d.add(DropReason::BadRkey);
        d.add(DropReason::OutOfOrderGoBackN);
        assert_eq!(d.get(DropReason::BadRkey), 2);
        assert_eq!(d.get(DropReason::OutOfOrderGoBackN), 1);
        assert_eq!(d.get(DropReason::Malformed), 0);
        assert_eq!(d.total(), 3);
        assert_eq!(DropReason::StalePortStatus as usize, DROP_REASONS - 1);
    }
}
