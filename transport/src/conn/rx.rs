//! Incoming datagrams: parse (untrusted), check, place, acknowledge, and act on SACK, NACK,
//! CNP and probe packets.

use super::{ConnState, Connection, Ecn};
use crate::auth::AuthDrop;
use crate::completion::WcStatus;
use crate::psn::Psn;
use crate::recv::{Arrival, NackOut, RxData, RxKind, WindowPos};
use crate::send::{PktState, SackInfo};
use crate::stats::DropReason;
use crate::wire::{Body, DataRepr, MrcethRepr, NackReason, NackRepr, Opcode, PacketRepr, SackRepr};
use mrc_congestion::{AckSample, Controller};

/// Reconstructs a full ns timestamp from its low 32 bits, assuming it is at most ~4.29 s
/// before `now_ns`.
pub(crate) fn widen_ts(now_ns: u64, ts32: u32) -> u64 {
    let back = u64::from((now_ns as u32).wrapping_sub(ts32));
    now_ns.saturating_sub(back)
}

impl<C: Controller> Connection<C> {
    /// Handles one received datagram (`bytes` = the UDP payload) at `now_ns`. `ev` is the
    /// EV the datapath received it on (informational; the MRCETH EV is what is echoed);
    /// `ecn` the IP ECN codepoint. Never panics on any input; every rejected datagram is
    /// counted in [`crate::stats::ConnStats::drops`] by reason.
    #[inline]
    pub fn handle_datagram(&mut self, now_ns: u64, ev: u32, ecn: Ecn, bytes: &[u8]) {
        if self.auth.is_none() {
            self.handle_packet(now_ns, ev, ecn, bytes);
        } else {
            self.handle_sealed(now_ns, ev, ecn, bytes);
        }
    }

    /// [`Connection::handle_datagram`] with authentication on: opens the datagram, then
    /// handles the plain packet.
    #[inline(never)]
    fn handle_sealed(&mut self, now_ns: u64, ev: u32, ecn: Ecn, bytes: &[u8]) {
        let Some(auth) = self.auth.as_mut() else {
            return;
        };
        let mut plain = std::mem::take(&mut self.auth_plain);
        match auth.open(bytes, &mut plain) {
            Ok(n) => self.handle_packet(now_ns, ev, ecn, &plain[..n]),
            // before anything of the datagram is parsed or acted on
            Err(e) => self.stats.drops.add(match e {
                AuthDrop::BadTag => DropReason::AuthFailed,
                AuthDrop::Replayed => DropReason::Replayed,
            }),
        }
        self.auth_plain = plain;
    }

    /// [`Connection::handle_datagram`] of a plain packet (authenticated and decrypted
    /// already when authentication is on).
    fn handle_packet(&mut self, now_ns: u64, ev: u32, ecn: Ecn, bytes: &[u8]) {
        let _ = ev;
        let pkt = match PacketRepr::parse(bytes) {
            Ok(p) => p,
            Err(_) => {
                self.stats.drops.add(DropReason::Malformed);
                return;
            }
        };
        let ev_in = pkt.mrceth.ev;
        if pkt.bth.dest_qpn != self.cfg.local_qpn {
            self.drop_pkt(ev_in, DropReason::WrongQpn);
            return;
        }
        let Some(peer) = self.peer else {
            self.drop_pkt(ev_in, DropReason::NotConnected);
            return;
        };
        if !matches!(self.state, ConnState::Ready | ConnState::Draining) {
            self.drop_pkt(ev_in, DropReason::NotConnected);
            return;
        }
        if let Opcode::Unknown(_) = pkt.bth.opcode {
            self.drop_pkt(ev_in, DropReason::UnknownOpcode);
            return;
        }
        let is_gen_nack = matches!(
            pkt.body,
            Body::Nack(NackRepr {
                reason: NackReason::GenerationMismatch,
                ..
            })
        );
        if pkt.mrceth.generation != peer.generation {
            self.on_other_generation(now_ns, &pkt, is_gen_nack);
            return;
        }
        self.live.heard(now_ns);
        if !is_gen_nack {
            // A packet of the peer's generation: the peer has not restarted.
            self.gen_mismatch_since_ns = None;
        }
        // by reference: the parsed packet is not copied again for the handler
        match &pkt.body {
            Body::Data(d) => {
                // the receiving side only: no send completion, no state change to act on
                self.on_data(now_ns, &pkt, d, ecn == Ecn::Ce);
                // Only a SACK (complete_messages) or fail() (which drains at once) gives the
                // sender completions, and only they make it idle: nothing is left to drain.
                debug_assert!(
                    !(self.send.has_completions()
                        || (self.state == ConnState::Draining && self.send.is_idle())),
                    "a data packet left sender completions or a closable state undrained"
                );
                return;
            }
            Body::Sack(s) => self.on_sack(now_ns, ev_in, s),
            Body::Nack(n) => self.on_nack(now_ns, ev_in, n),
            Body::Cnp(_)
            | Body::Probe(_)
            | Body::ProbeReply(_)
            | Body::PortStatus(_)
            | Body::Unknown { .. } => {
                self.on_other_body(now_ns, &pkt);
            }
        }
        self.drain_send_completions();
        self.maybe_closed();
    }

    /// A packet of another generation than the peer's: counted, NACKed (unless it is a
    /// NACK(GENERATION_MISMATCH) itself), and taken as evidence of a peer restart when it
    /// echoes a PSN in flight.
    #[cold]
    #[inline(never)]
    fn on_other_generation(&mut self, now_ns: u64, pkt: &PacketRepr<'_>, is_gen_nack: bool) {
        self.drop_pkt(pkt.mrceth.ev, DropReason::GenerationMismatch);
        if !is_gen_nack {
            let ts32 = if pkt.bth.flags.ts {
                pkt.mrceth.send_ts_ns
            } else {
                0
            };
            self.queue_nack(
                pkt.bth.psn,
                NackReason::GenerationMismatch,
                pkt.mrceth.ev,
                ts32,
            );
        }
        if self.echoes_psn_in_flight(&pkt.body) {
            self.note_generation_mismatch(now_ns);
        } else {
            self.stats.restart_evidence_rejected += 1;
        }
    }

    /// A CNP, an EV probe, a probe reply, or an unknown body (of the peer's generation).
    #[inline(never)]
    fn on_other_body(&mut self, now_ns: u64, pkt: &PacketRepr<'_>) {
        let ev_in = pkt.mrceth.ev;
        match &pkt.body {
            Body::Cnp(_) => {
                self.stats.cnps_received += 1;
                self.cc.on_cnp(now_ns);
            }
            Body::Probe(p) => {
                self.stats.probes_received += 1;
                if self.probe_replies.len() < self.paths.len().max(16) {
                    self.probe_replies.push_back((
                        pkt.mrceth.ev,
                        p.probe_seq,
                        pkt.mrceth.send_ts_ns,
                    ));
                }
            }
            Body::ProbeReply(r) if r.probe_seq == super::KEEPALIVE_PROBE_SEQ => {
                // a keepalive's answer: the peer was heard, nothing else to do
                self.stats.keepalive_replies += 1;
            }
            Body::ProbeReply(r) => {
                self.paths.set_in_flight_evs(self.send.in_flight_evs());
                if self.paths.on_probe_reply(r.echo_ev, r.probe_seq, now_ns) {
                    if let Some(i) = self.paths.index_of(r.echo_ev) {
                        let rtt = now_ns.saturating_sub(widen_ts(now_ns, r.echo_ts_ns));
                        self.paths.on_rtt_sample(i, rtt);
                    }
                } else {
                    self.drop_pkt(ev_in, DropReason::StaleProbeReply);
                }
            }
            Body::PortStatus(r) => self.on_port_status(now_ns, ev_in, r),
            Body::Unknown { .. } => self.drop_pkt(ev_in, DropReason::UnknownOpcode),
            Body::Data(_) | Body::Sack(_) | Body::Nack(_) => {}
        }
    }

    /// Whether `body` (of a packet of another generation) echoes a PSN this side has in
    /// flight and not yet acknowledged, the only packets that count as evidence of a peer
    /// restart (see the module docs of [`crate::conn`]): a NACK naming such a PSN, or a
    /// SACK that acknowledges one (its cumulative PSN beyond `snd_una`, or a bitmap bit)
    /// and names none never sent. Data, CNPs and probes echo nothing of ours.
    fn echoes_psn_in_flight(&self, body: &Body<'_>) -> bool {
        let (una, nxt) = (self.send.snd_una(), self.send.snd_nxt());
        // `packet` knows exactly the sequence numbers in [snd_una, snd_nxt)
        let unacked = |seq: u64| {
            self.send
                .packet(seq)
                .is_some_and(|p| p.state != PktState::Acked)
        };
        match body {
            Body::Nack(n) => unacked(Psn::new(n.psn).unwrap(una)),
            Body::Sack(s) => {
                let cum = Psn::new(s.cumulative_psn).unwrap(una);
                let base = Psn::new(s.bitmap_base_psn).unwrap(una);
                let mut bits = (0..64u64)
                    .filter(|i| s.bitmap >> i & 1 == 1)
                    .map(|i| base + i);
                if cum > nxt || bits.clone().any(|seq| seq >= nxt) {
                    return false;
                }
                cum > una || bits.any(unacked)
            }
            _ => false,
        }
    }

    /// One piece of evidence that the peer restarted (see the module docs of
    /// [`crate::conn`]): fails the connection when the evidence is at least one RTO old.
    fn note_generation_mismatch(&mut self, now_ns: u64) {
        match self.gen_mismatch_since_ns {
            None => self.gen_mismatch_since_ns = Some(now_ns),
            Some(since) if now_ns.saturating_sub(since) >= self.send.base_rto_ns() => {
                self.fail(WcStatus::GenerationMismatch);
            }
            Some(_) => {}
        }
    }

    /// Counts a dropped datagram by reason, for the connection and for the EV named in its
    /// MRCETH (when that EV is one of ours).
    pub(super) fn drop_pkt(&mut self, ev: u32, reason: DropReason) {
        self.stats.drops.add(reason);
        if let Some(p) = self.paths.index_of(ev).and_then(|i| self.paths.get_mut(i)) {
            p.stats.drops.add(reason);
        }
    }

    /// Queues a NACK of `psn` for `reason`, echoing the EV and send timestamp (low 32 bits,
    /// 0 for none) of the packet it answers.
    pub(super) fn queue_nack(&mut self, psn: u32, reason: NackReason, echo_ev: u32, ts32: u32) {
        if self.acker.nack(NackOut {
            psn,
            reason: reason.into(),
            echo_ev,
            echo_ts32: ts32,
        }) {
            self.stats.nacks_sent += 1;
        }
    }

    fn on_data(&mut self, now_ns: u64, pkt: &PacketRepr<'_>, d: &DataRepr<'_>, ce: bool) {
        let psn = Psn::new(pkt.bth.psn);
        let m: &MrcethRepr = &pkt.mrceth;
        let ts32 = if pkt.bth.flags.ts { m.send_ts_ns } else { 0 };
        let seq = match self.rwin.classify(psn) {
            WindowPos::Old(seq) => {
                self.on_duplicate(now_ns, seq, ce, m.ev, ts32);
                return;
            }
            WindowPos::Beyond(_) => {
                self.on_beyond_window(psn, m.ev, ts32);
                return;
            }
            WindowPos::InWindow(seq) => seq,
        };
        if self.rwin.is_received(seq) {
            self.on_duplicate(now_ns, seq, ce, m.ev, ts32);
            return;
        }
        if self.cfg.go_back_n && seq != self.rwin.rcv_nxt() {
            self.on_out_of_order_go_back_n(m.ev, ts32);
            return;
        }
        if pkt.bth.flags.trimmed {
            self.on_trimmed(psn, m.ev, ts32);
            return;
        }
        let op = pkt.bth.opcode;
        let kind = match d.reth {
            Some(r) => RxKind::Write {
                addr: r.virtual_addr,
                rkey: r.rkey,
            },
            None => RxKind::Send,
        };
        let rd = RxData {
            msn32: m.msn,
            kind,
            msg_len: d.msgeth.message_len,
            offset: d.msgeth.offset,
            last: op.is_last(),
            imm: d.imm,
            payload: d.payload,
        };
        // check and place (nothing is written on error), then record the PSN
        if let Err(reason) = self.rx.place(&rd, &mut self.regions) {
            self.on_place_error(psn, reason, m.ev, ts32);
            return;
        }
        let Arrival::New { gap_filled, .. } = self.rwin.on_arrival_seq(seq) else {
            return;
        };
        self.stats.received += 1;
        self.stats.received_bytes += d.payload.len() as u64;
        if ce {
            self.stats.ecn_ce_received += 1;
        }
        // At once when the arrival fills the hole at rcv_nxt (the sender can advance) or
        // asks for it; not for a mere out-of-order arrival: with spraying nearly every
        // arrival is out of order, and a SACK per data packet costs the reverse link and
        // the peer's NIC 3% of a 4 KiB stream and hides nothing (loss detection is
        // time-based, and the coalesced SACK follows within `sack_every_packets`).
        let urgent = gap_filled || pkt.bth.flags.ack_req;
        self.acker.on_data(
            now_ns,
            seq,
            self.rwin.rcv_nxt(),
            true,
            urgent,
            ce,
            m.ev,
            ts32,
        );
        self.rx.advance(&mut self.regions, &mut self.completions);
    }

    /// A data packet at or beyond `rcv_nxt + window`: counted and NACKed.
    #[cold]
    #[inline(never)]
    fn on_beyond_window(&mut self, psn: Psn, ev: u32, ts32: u32) {
        self.drop_pkt(ev, DropReason::PsnOutOfWindow);
        self.queue_nack(psn.value(), NackReason::PsnOutOfWindow, ev, ts32);
    }

    /// Go-back-N: a new data packet other than `rcv_nxt`: counted, and `rcv_nxt` NACKed
    /// once.
    #[cold]
    #[inline(never)]
    fn on_out_of_order_go_back_n(&mut self, ev: u32, ts32: u32) {
        self.drop_pkt(ev, DropReason::OutOfOrderGoBackN);
        let nxt = self.rwin.rcv_nxt();
        if self.gbn_nacked != Some(nxt) {
            self.gbn_nacked = Some(nxt);
            self.queue_nack(Psn::from_seq(nxt).value(), NackReason::NoBitmap, ev, ts32);
        }
    }

    /// A new trimmed data packet (headers only): counted, NACKed when so configured.
    #[cold]
    #[inline(never)]
    fn on_trimmed(&mut self, psn: Psn, ev: u32, ts32: u32) {
        self.stats.trimmed_received += 1;
        if self.cfg.trim_nacks {
            self.queue_nack(psn.value(), NackReason::Trimmed, ev, ts32);
        }
    }

    /// A new data packet that [`crate::recv::RxMessages::place`] refused for `reason`:
    /// counted, and NACKed when the sender must act (an access error, no receive ready).
    #[cold]
    #[inline(never)]
    fn on_place_error(&mut self, psn: Psn, reason: DropReason, ev: u32, ts32: u32) {
        self.drop_pkt(ev, reason);
        match reason {
            DropReason::BadRkey | DropReason::OutOfBounds | DropReason::AccessDenied => {
                self.queue_nack(psn.value(), NackReason::AccessError, ev, ts32);
            }
            DropReason::ReceiverNotReady | DropReason::StagingFull => {
                // IBA RNR NAK: not accepted (not in the SACK), so the sender cannot
                // complete the message before a receive is free for it
                self.stats.rnr_nacks_sent += 1;
                self.queue_nack(psn.value(), NackReason::ReceiverNotReady, ev, ts32);
            }
            _ => {}
        }
    }

    #[cold]
    #[inline(never)]
    fn on_duplicate(&mut self, now_ns: u64, seq: u64, ce: bool, ev: u32, ts32: u32) {
        self.drop_pkt(ev, DropReason::Duplicate);
        self.acker
            .on_data(now_ns, seq, self.rwin.rcv_nxt(), false, true, ce, ev, ts32);
    }

    fn on_sack(&mut self, now_ns: u64, ev_in: u32, s: &SackRepr) {
        let echo_idx = self.paths.index_of(s.echo_ev);
        let info = SackInfo {
            cum: Psn::new(s.cumulative_psn),
            base: Psn::new(s.bitmap_base_psn),
            bitmap: s.bitmap,
            echo: echo_idx.map(|i| (i, s.echo_ts_ns)),
        };
        let out = match self
            .send
            .on_sack(now_ns, info, &mut self.paths, &mut self.stats)
        {
            Ok(o) => o,
            Err(_) => {
                self.drop_pkt(ev_in, DropReason::InvalidAck);
                return;
            }
        };
        self.stats.sacks_received += 1;
        if let Some(i) = echo_idx {
            self.paths.on_echo(i, now_ns);
        }
        self.paths.end_ack(u32::from(s.ecn_ce_count), echo_idx);
        if s.ecn_ce_count > 0 {
            self.stats.ecn_marked += u64::from(s.ecn_ce_count);
            if let Some(i) = echo_idx {
                if let Some(p) = self.paths.get_mut(i) {
                    p.stats.ecn_marked += u64::from(s.ecn_ce_count);
                }
                self.paths.on_congestion(i);
            }
        }
        if out.acked_packets > 0 || s.ecn_ce_count > 0 {
            let echoed = (s.echo_ts_ns != 0).then(|| widen_ts(now_ns, s.echo_ts_ns));
            self.cc.on_ack(
                now_ns,
                &AckSample {
                    acked_bytes: out.acked_bytes,
                    echoed_send_ts_ns: echoed,
                    ecn_ce_count: u32::from(s.ecn_ce_count),
                    acked_packets: out.acked_packets,
                    bytes_in_flight: self.send.bytes_in_flight(),
                },
            );
        }
        for _ in 0..out.spurious {
            self.cc.on_spurious_loss(now_ns);
        }
        let l = self
            .send
            .detect_losses(now_ns, &mut self.paths, &mut self.stats);
        if l.lost_bytes > 0 || l.lost_packets > 0 {
            self.cc.on_loss(now_ns, l.lost_bytes);
        }
    }

    /// Whether (`echo_ev`, `echo_ts32`) are the EV and send timestamp of the latest
    /// transmission of `seq` (an outstanding sequence number).
    fn names_latest_copy(&self, seq: u64, echo_ev: u32, echo_ts32: u32) -> bool {
        self.send.packet(seq).is_some_and(|p| {
            p.last_ts32 == echo_ts32
                && self
                    .paths
                    .get(usize::from(p.last_ev))
                    .is_some_and(|path| path.ev == echo_ev)
        })
    }

    fn on_nack(&mut self, now_ns: u64, ev_in: u32, n: &NackRepr) {
        if n.reason == NackReason::GenerationMismatch {
            // The peer says a packet of ours carried a generation it does not expect; its
            // PSN echoes that packet's. Only a PSN we have in flight makes it evidence: an
            // off-path forger has to guess one (RFC 5961 section 3.2 accepts a RST only in
            // the receive window for the same reason).
            if !self.echoes_psn_in_flight(&Body::Nack(*n)) {
                self.stats.restart_evidence_rejected += 1;
                self.drop_pkt(ev_in, DropReason::InvalidAck);
                return;
            }
            self.stats.nacks_received += 1;
            self.note_generation_mismatch(now_ns);
            return;
        }
        let seq = Psn::new(n.psn).unwrap(self.send.snd_una());
        if seq >= self.send.snd_nxt() {
            self.drop_pkt(ev_in, DropReason::InvalidAck);
            return;
        }
        self.stats.nacks_received += 1;
        let acked = self
            .send
            .packet(seq)
            .is_none_or(|p| p.state == PktState::Acked);
        if seq < self.send.snd_una() || acked {
            // Already acknowledged (cumulatively or by the SACK bitmap): a receiver never
            // NACKs what it accepted, so the NACK is stale and changes nothing.
            return;
        }
        let answers_a_copy = matches!(
            n.reason,
            NackReason::Trimmed
                | NackReason::TrimmedLasthop
                | NackReason::NoPktBuffer
                | NackReason::ReceiverNotReady
                | NackReason::AccessError
        );
        if answers_a_copy && !self.names_latest_copy(seq, n.echo_ev, n.echo_ts_ns) {
            // The NACK answers an earlier copy (its echoed EV and timestamp are not those of
            // the latest transmission): the latest copy may still arrive, so it is neither
            // resent nor charged to its EV or the controller.
            self.stats.stale_nacks += 1;
            return;
        }
        let resend_nack = matches!(
            n.reason,
            NackReason::Trimmed | NackReason::TrimmedLasthop | NackReason::NoPktBuffer
        );
        if resend_nack
            && self.send.packet(seq).is_some_and(|p| {
                p.state == PktState::InFlight
                    && p.transmissions >= self.send.config().nack_retry_limit
            })
        {
            // The path answers every copy of this packet with a NACK: it will never carry
            // it (see `SendConfig::nack_retry_limit`).
            self.fail(WcStatus::RetryExceeded);
            return;
        }
        match n.reason {
            NackReason::Trimmed | NackReason::TrimmedLasthop => {
                if let Some((len, ev)) = self.send.queue_nacked_retransmit(seq) {
                    self.stats.trimmed += 1;
                    if let Some(p) = self.paths.get_mut(ev) {
                        p.stats.trimmed += 1;
                    }
                    self.paths.on_congestion(ev);
                    self.cc.on_trim(now_ns, u64::from(len));
                }
            }
            NackReason::PsnOutOfWindow => {
                self.send.on_out_of_window(seq);
            }
            NackReason::NoPktBuffer => {
                self.send.queue_nacked_retransmit(seq);
            }
            NackReason::ReceiverNotReady => {
                self.stats.rnr_nacks_received += 1;
                self.send.on_rnr_nack(seq, now_ns);
            }
            NackReason::NoBitmap => {
                // Go-back-N: the receiver got something after `seq` but not `seq`, so the
                // EV it last went on lost it (as RACK would conclude): take that EV out of
                // rotation until a probe answers, or every go-back round may start on the
                // same dead EV again.
                if let Some(p) = self
                    .send
                    .packet(seq)
                    .filter(|p| p.state == PktState::InFlight)
                {
                    let ev = usize::from(p.last_ev);
                    if let Some(path) = self.paths.get_mut(ev) {
                        path.stats.lost += 1;
                    }
                    self.paths.assume_bad(ev, now_ns);
                }
                self.send.go_back(seq);
            }
            NackReason::AccessError => self.fail(WcStatus::RemoteAccessError),
            NackReason::GenerationMismatch => {}
            NackReason::Unknown(_) => self.drop_pkt(ev_in, DropReason::InvalidAck),
        }
    }
}
