//! Outgoing datagrams: control first (NACK, CNP, probe replies, SACK), then EV probes,
//! then data (retransmissions before new data, within the congestion window and pacing).

use super::{ConnState, Connection, Ecn, Transmit};
use crate::completion::WcStatus;
use crate::psn::Psn;
use crate::region::PayloadRef;
use crate::send::{MsgKind, TxPacket};
use crate::wire::{
    Body, BthFlags, BthRepr, BthSpare, CnpRepr, DataRepr, MrcethRepr, MsgethRepr, NackReason,
    NackRepr, Opcode, PacketRepr, ProbeReplyRepr, ProbeRepr, RethRepr, SackRepr,
};
use mrc_congestion::Controller;

/// Bytes of headers before the payload of the largest data packet: BTH 12 + MRCETH 16 +
/// MSGETH 8 + RETH 16 + ImmDt 4.
pub const MAX_DATA_HEADER_BYTES: usize = 56;

/// The data opcode for a packet of a message.
pub fn data_opcode(kind: MsgKind, imm: bool, first: bool, last: bool) -> Opcode {
    let write = matches!(kind, MsgKind::Write { .. });
    match (write, first, last, imm) {
        (true, true, true, false) => Opcode::RdmaWriteOnly,
        (true, true, true, true) => Opcode::RdmaWriteOnlyWithImmediate,
        (true, true, false, _) => Opcode::RdmaWriteFirst,
        (true, false, false, _) => Opcode::RdmaWriteMiddle,
        (true, false, true, false) => Opcode::RdmaWriteLast,
        (true, false, true, true) => Opcode::RdmaWriteLastWithImmediate,
        (false, true, true, false) => Opcode::SendOnly,
        (false, true, true, true) => Opcode::SendOnlyWithImmediate,
        (false, true, false, _) => Opcode::SendFirst,
        (false, false, false, _) => Opcode::SendMiddle,
        (false, false, true, false) => Opcode::SendLast,
        (false, false, true, true) => Opcode::SendLastWithImmediate,
    }
}

impl<C: Controller> Connection<C> {
    fn header(
        &self,
        opcode: Opcode,
        psn: u32,
        ev: u32,
        now_ns: u64,
        msn: u32,
    ) -> (BthRepr, MrcethRepr) {
        let dest_qpn = self.peer.map_or(0, |p| p.qpn);
        (
            BthRepr {
                opcode,
                pkey: self.cfg.pkey,
                dest_qpn,
                psn,
                flags: BthFlags {
                    ack_req: false,
                    rtx: false,
                    ts: true,
                    trimmed: false,
                },
                spare: BthSpare::default(),
            },
            MrcethRepr {
                ev,
                msn,
                send_ts_ns: now_ns as u32,
                generation: self.cfg.generation,
                reserved: 0,
            },
        )
    }

    pub(super) fn emit_control(
        &self,
        buf: &mut [u8],
        opcode: Opcode,
        psn: u32,
        ev: u32,
        now_ns: u64,
        body: Body<'_>,
    ) -> Option<Transmit> {
        let (bth, mrceth) = self.header(opcode, psn, ev, now_ns, 0);
        let len = PacketRepr { bth, mrceth, body }.emit(buf).ok()?;
        Some(Transmit {
            ev,
            len,
            ecn: Ecn::NotEct,
        })
    }

    /// Writes the next datagram to send at `now_ns` into `buf` (which must hold
    /// `mtu_payload_bytes + 56` bytes, and [`crate::auth::AUTH_TRAILER_BYTES`] more with
    /// authentication on: [`Connection::set_auth`]) and says on which EV it goes; `None`
    /// when nothing is ready now (see [`Connection::poll_timeout`]).
    pub fn poll_transmit(&mut self, now_ns: u64, buf: &mut [u8]) -> Option<Transmit> {
        if self.auth.is_none() {
            return self.poll_packet(now_ns, buf, None);
        }
        self.poll_sealed(now_ns, buf)
    }

    /// [`Connection::poll_transmit`] with authentication on: the packet, then its trailer
    /// (out of line, so the plain path keeps no stack frame of its own).
    #[inline(never)]
    fn poll_sealed(&mut self, now_ns: u64, buf: &mut [u8]) -> Option<Transmit> {
        // the packet leaves room for the trailer, so sealing it cannot fail for space
        let room = buf.len().checked_sub(crate::auth::AUTH_TRAILER_BYTES)?;
        let t = self.poll_packet(now_ns, &mut buf[..room], None)?;
        let len = self.auth.as_mut()?.seal(buf, t.len)?;
        Some(Transmit { len, ..t })
    }

    /// [`Connection::poll_transmit`] for a datapath that gathers: a data packet's headers
    /// go into `buf` (`Transmit::len` is their length, at most [`MAX_DATA_HEADER_BYTES`])
    /// and its payload stays in the source region, lent as the [`PayloadRef`]; the
    /// datagram is `buf[..len]` followed by the payload. Every other packet, and every
    /// packet with authentication on (the trailer seals the whole datagram), is written
    /// whole into `buf` as by [`Connection::poll_transmit`], with `None`. Same packets, same
    /// order, same state changes as [`Connection::poll_transmit`]: only where the payload
    /// bytes are differs.
    ///
    /// The payload must leave (be copied by the datapath) before the connection is used
    /// mutably again; see [`PayloadRef`].
    pub fn poll_transmit_gather(
        &mut self,
        now_ns: u64,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<PayloadRef>)> {
        if self.auth.is_some() {
            return self.poll_transmit(now_ns, buf).map(|t| (t, None));
        }
        let mut lent = None;
        let t = self.poll_packet(now_ns, buf, Some(&mut lent))?;
        Some((t, lent))
    }

    /// [`Connection::poll_transmit`] without the authentication trailer; with `lend`, a
    /// data packet's payload is lent there instead of written ([`Connection::poll_transmit_gather`]).
    #[inline(always)]
    fn poll_packet(
        &mut self,
        now_ns: u64,
        buf: &mut [u8],
        lend: Option<&mut Option<PayloadRef>>,
    ) -> Option<Transmit> {
        // the usual case, no control packet pending: what `poll_control` would come to,
        // without its stack frame
        if self.peer.is_some()
            && self.acker.nothing_due(now_ns)
            && matches!(self.state, ConnState::Ready | ConnState::Draining)
            && self.probe_replies.is_empty()
            && !self.paths.any_assumed_bad()
            && !self.psu.pending()
            && !self.live.attention()
        {
            return self.poll_data(now_ns, buf, lend);
        }
        self.poll_control(now_ns, buf, lend)
    }

    /// [`Connection::poll_packet`]: control packets first (NACK, CNP, probe replies, SACK,
    /// EV probes), then data.
    #[inline(never)]
    fn poll_control(
        &mut self,
        now_ns: u64,
        buf: &mut [u8],
        mut lend: Option<&mut Option<PayloadRef>>,
    ) -> Option<Transmit> {
        self.peer?;
        if let Some(n) = self.acker.poll_nack() {
            let body = Body::Nack(NackRepr {
                psn: n.psn,
                reason: NackReason::from(n.reason),
                reserved: 0,
                echo_ev: n.echo_ev,
                echo_ts_ns: n.echo_ts32,
            });
            return self.emit_control(buf, Opcode::Nack, n.psn, n.echo_ev, now_ns, body);
        }
        if !matches!(self.state, ConnState::Ready | ConnState::Draining) {
            return None;
        }
        if let Some(ev) = self.acker.poll_cnp() {
            self.stats.cnps_sent += 1;
            let body = Body::Cnp(CnpRepr {
                echo_ev: ev,
                reserved: [0; 12],
            });
            let psn = self.rwin.rcv_nxt_psn().value();
            return self.emit_control(buf, Opcode::Cnp, psn, ev, now_ns, body);
        }
        if let Some((ev, probe_seq, ts)) = self.probe_replies.pop_front() {
            let body = Body::ProbeReply(ProbeReplyRepr {
                probe_seq,
                echo_ev: ev,
                echo_ts_ns: ts,
            });
            let psn = self.rwin.rcv_nxt_psn().value();
            return self.emit_control(buf, Opcode::EvProbeReply, psn, ev, now_ns, body);
        }
        if self.psu.pending()
            && let Some(t) = self.poll_port_status(now_ns, buf)
        {
            return Some(t);
        }
        let mut data_failed = false;
        if self.data_before_sack && !self.data_jumped_sack && self.acker.sack_due(now_ns) {
            if let Some(t) = self.poll_data(now_ns, buf, lend.as_deref_mut()) {
                self.data_jumped_sack = true;
                return Some(t);
            }
            // The data path may have failed the connection (a source region gone): the
            // due SACK still leaves, as it would have ahead of the data (it acknowledges
            // the peer's packets already placed here), then nothing more.
            data_failed = !matches!(self.state, ConnState::Ready | ConnState::Draining);
        }
        if let Some(s) = self.acker.poll_sack(now_ns, self.rwin.rcv_nxt()) {
            self.data_jumped_sack = false;
            self.stats.sacks_sent += 1;
            let cum = Psn::from_seq(s.cum_seq).value();
            let body = Body::Sack(SackRepr {
                cumulative_psn: cum,
                bitmap_base_psn: Psn::from_seq(s.base_seq).value(),
                bitmap: self.rwin.bitmap64(s.base_seq),
                echo_ev: s.echo_ev,
                echo_ts_ns: s.echo_ts32,
                ecn_ce_count: s.ecn_ce_count,
                credit: 0,
            });
            return self.emit_control(buf, Opcode::Sack, cum, s.echo_ev, now_ns, body);
        }
        if data_failed {
            return None;
        }
        if self.live.attention()
            && let Some(t) = self.poll_keepalive(now_ns, buf)
        {
            return Some(t);
        }
        if let Some((idx, probe_seq)) = self.paths.next_probe(now_ns, self.cfg.probe_interval_ns) {
            let ev = self.paths.get(idx).map_or(0, |p| p.ev);
            let body = Body::Probe(ProbeRepr {
                probe_seq,
                reserved: 0,
            });
            let psn = Psn::from_seq(self.send.snd_nxt()).value();
            return self.emit_control(buf, Opcode::EvProbe, psn, ev, now_ns, body);
        }
        self.poll_data(now_ns, buf, lend)
    }

    /// Earliest time the next data packet may leave, ns: the last paced packet's slot start
    /// plus its bits at the controller's rate *now*, so a rate change (a DCQCN increase
    /// after a cut to a few Mb/s) moves the release time at once instead of after a gap
    /// computed at the old rate. 0 before the first paced packet.
    pub(super) fn pacing_release_ns(&self) -> u64 {
        if self.paced_bits == 0 {
            return 0;
        }
        let rate = self.cc.pacing_rate_bps();
        if rate == u64::MAX || rate == 0 {
            return self.paced_from_ns;
        }
        let gap = (u128::from(self.paced_bits) * 1_000_000_000 / u128::from(rate)) as u64;
        self.paced_from_ns.saturating_add(gap)
    }

    fn poll_data(
        &mut self,
        now_ns: u64,
        buf: &mut [u8],
        lend: Option<&mut Option<PayloadRef>>,
    ) -> Option<Transmit> {
        if !self.paths.any_usable() {
            // before the pacing check: a release time in the future is no timer while
            // every EV is denied, so the wait must start now
            self.note_blocked(now_ns);
            return None;
        }
        if now_ns < self.pacing_release_ns() {
            return None;
        }
        let tx = self.send.next_tx(self.cc.cwnd_bytes())?;
        let idx = if tx.probe {
            self.paths.select_for_probe(tx.avoid_ev)?
        } else {
            self.paths
                .select_balanced(tx.avoid_ev, self.send.in_flight_by_plane())?
        };
        let ev = self.paths.get(idx).map_or(0, |p| p.ev);
        // `len`: bytes written to `buf`; `datagram_len`: the whole datagram's (with a lent
        // payload the headers' and the payload's), which pacing counts
        let (len, datagram_len) = match self.emit_data(now_ns, &tx, ev, buf, lend) {
            Ok(lens) => lens,
            Err(status) => {
                self.fail(status);
                return None;
            }
        };
        self.send.on_transmit(&tx, now_ns, idx, now_ns as u32);
        self.stats.sent += 1;
        if let Some(p) = self.paths.get_mut(idx) {
            p.stats.sent += 1;
            if tx.retransmit {
                p.stats.retransmitted += 1;
            }
        }
        if tx.retransmit {
            self.stats.retransmitted += 1;
        } else {
            self.stats.sent_bytes += u64::from(tx.len);
            self.cc
                .on_packet_sent(now_ns, u64::from(tx.len), self.send.bytes_in_flight());
        }
        let rate = self.cc.pacing_rate_bps();
        if rate != u64::MAX && rate > 0 {
            // up to pacing_burst_ns of credit carried over from a late send
            let credit_floor = now_ns.saturating_sub(self.cfg.pacing_burst_ns);
            self.paced_from_ns = credit_floor.max(self.pacing_release_ns());
            self.paced_bits = datagram_len as u64 * 8;
        }
        Some(Transmit {
            ev,
            len,
            ecn: Ecn::Ect0,
        })
    }

    /// Writes data packet `tx` into `buf`, or its headers only with `lend` (the payload
    /// lent there); returns (bytes written, datagram bytes).
    ///
    /// # Errors
    /// The status the work request fails with: `RemoteAccessError` for a WRITE whose
    /// remote range wraps past 2^64, `LocalProtectionError` for a source gone from its
    /// region, `LocalLengthError` for a packet the buffer cannot hold.
    fn emit_data(
        &self,
        now_ns: u64,
        tx: &TxPacket,
        ev: u32,
        buf: &mut [u8],
        lend: Option<&mut Option<PayloadRef>>,
    ) -> Result<(usize, usize), WcStatus> {
        let m = tx.msg;
        if let MsgKind::Write { remote_addr, .. } = m.kind
            && remote_addr.checked_add(u64::from(m.len)).is_none()
        {
            // The remote range wraps past 2^64: no region can hold it, so the peer would
            // refuse it (verbs: IBV_WC_REM_ACCESS_ERR). Caught at the first packet, before
            // any byte of the message leaves; it was LocalLengthError (the wire emitter
            // refusing the RETH), a status verbs gives a receive too short for a SEND.
            return Err(WcStatus::RemoteAccessError);
        }
        let payload = self
            .regions
            .read(
                m.local_lkey,
                m.local_addr.saturating_add(u64::from(tx.offset)),
                u64::from(tx.len),
            )
            .map_err(|_| WcStatus::LocalProtectionError)?;
        let opcode = data_opcode(m.kind, m.imm.is_some(), tx.first, tx.last);
        let (mut bth, mrceth) = self.header(opcode, tx.psn().value(), ev, now_ns, tx.msn as u32);
        bth.flags.ack_req = tx.last;
        bth.flags.rtx = tx.retransmit;
        let reth = match m.kind {
            MsgKind::Write { remote_addr, rkey } => Some(RethRepr {
                virtual_addr: remote_addr.wrapping_add(u64::from(tx.offset)),
                rkey,
                dma_len: tx.len,
            }),
            MsgKind::Send => None,
        };
        let body = Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len: m.len,
                offset: tx.offset,
            },
            reth,
            imm: if tx.last { m.imm } else { None },
            payload: &payload,
        });
        let repr = PacketRepr { bth, mrceth, body };
        let err = |_| WcStatus::LocalLengthError;
        match lend {
            None => repr.emit(buf).map(|n| (n, n)).map_err(err),
            Some(out) => {
                let head = repr.emit_header(buf).map_err(err)?;
                *out = Some(PayloadRef::of(&payload));
                Ok((head, head + payload.len()))
            }
        }
    }
}
