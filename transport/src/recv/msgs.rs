//! Receiver-side messages: placement checks, placement in any order, completions in
//! message order.
//!
//! Every data packet names its message by MSN and carries the message length and its own
//! offset. RDMA WRITE payload goes straight into the registered region named by the RETH
//! (checked first). The n-th SEND or WRITE_WITH_IMM consumes the n-th posted receive, as
//! in IBA RC, so a SEND packet's receive buffer is known once every earlier message is
//! known to need one or not (each is a SEND, or its last packet arrived, or it is gone):
//! then its payload goes straight into that buffer (one copy, none staged). Otherwise it
//! is staged and copied into the buffer when the message completes in order. A message
//! completes when its last packet and all its bytes have arrived **and** every earlier
//! message has completed.
//!
//! Staging is bounded ([`RxMessages::new`]'s `max_staged_bytes`, the connection's
//! `max_staged_bytes`): a SEND packet that would have to be staged beyond it is refused
//! with [`DropReason::StagingFull`], answered like a receiver-not-ready (the sender holds
//! it for its RNR timer and resends). Without the bound a peer could make the receiver
//! hold up to `max_rx_messages` x 4 GiB of SEND payload for receives never posted.
//!
//! Receiver not ready (IBA RC's RNR NAK, section 9.7.5.2.8): the last packet of a message
//! that needs a receive (SEND, WRITE_WITH_IMM) is accepted only while a posted receive is
//! free for it (posted receives minus messages already holding one); otherwise it is
//! refused with [`DropReason::ReceiverNotReady`], which the connection answers with
//! NACK(RECEIVER_NOT_READY) and leaves out of its SACKs. So an acknowledged message always
//! has its receive: once the sender sees every packet of it acknowledged, the receiver has
//! raised (or raises at once, when the earlier messages are whole) its completion, and
//! the sender may reuse the memory the message wrote without overwriting data the receiver
//! has not been told about. (Without it, a receiver whose application stalled acknowledged
//! messages it could not complete; the sender reused their slots, and the completions
//! raised later named overwritten data: issue 16.)

use super::coverage::{Coverage, CoverageError};
use crate::completion::{Completion, WcOpcode, WcStatus};
use crate::region::{AccessError, RegionTable};
use crate::stats::DropReason;
use std::collections::VecDeque;

/// A posted receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's id, returned in the completion.
    pub wr_id: u64,
    /// lkey of the local region (needs `Access::LOCAL_WRITE`).
    pub lkey: u32,
    /// Virtual address of the buffer.
    pub addr: u64,
    /// Buffer length in bytes.
    pub len: u32,
}

/// WRITE or SEND, as the packet's opcode says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxKind {
    /// RDMA_WRITE_*: placed at the RETH address.
    Write {
        /// RETH virtual address of this packet's payload.
        addr: u64,
        /// RETH rkey.
        rkey: u32,
    },
    /// SEND_*: placed into the posted receive it will consume (staged until that is
    /// known).
    Send,
}

/// The parts of a data packet the message layer needs.
#[derive(Clone, Copy, Debug)]
pub struct RxData<'a> {
    /// MSN from the MRCETH (32 bits on the wire).
    pub msn32: u32,
    /// WRITE (with RETH fields) or SEND.
    pub kind: RxKind,
    /// MSGETH message length, bytes.
    pub msg_len: u32,
    /// MSGETH offset of this payload, bytes.
    pub offset: u32,
    /// Opcode says last (or only) packet of the message.
    pub last: bool,
    /// Immediate data (on *_WITH_IMMEDIATE).
    pub imm: Option<u32>,
    /// Payload.
    pub payload: &'a [u8],
}

#[derive(Clone, Debug)]
struct RxMsg {
    is_send: bool,
    len: u32,
    /// The byte ranges that arrived (no overlap, all within `len`).
    coverage: Coverage,
    last_seen: bool,
    imm: Option<u32>,
    /// SEND payload that arrived before its receive buffer was known: (offset, bytes).
    staged: Vec<(u32, Vec<u8>)>,
}

impl RxMsg {
    /// Whether this message consumes a posted receive; `None` while that is unknown (a
    /// WRITE whose last packet, the one that may carry an immediate, has not arrived).
    fn needs_recv(&self) -> Option<bool> {
        if self.is_send || self.imm.is_some() {
            Some(true)
        } else if self.last_seen {
            Some(false)
        } else {
            None
        }
    }

    /// What its staged chunks count against the staging bound ([`staged_charge`]).
    fn staged_bytes(&self) -> u64 {
        self.staged
            .iter()
            .map(|(_, b)| staged_charge(b.len() as u64))
            .sum()
    }
}

/// Bytes a staged chunk costs beyond its payload, counted against the staging bound: its
/// entry in the message's list and the allocation's header. Without it the bound counted
/// payload only, and 16 MiB of 1-byte chunks held about 50 times that.
pub const STAGED_CHUNK_OVERHEAD_BYTES: u64 = 48;

/// What a staged chunk of `payload` bytes counts against the staging bound.
pub fn staged_charge(payload: u64) -> u64 {
    payload + STAGED_CHUNK_OVERHEAD_BYTES
}

/// Where a SEND packet's payload goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendPlace {
    /// Into this posted receive (the message fits it and its region allows it).
    Direct(RecvWr),
    /// Nowhere: the message's receive is known and the message will complete with an
    /// error there (too long, or the buffer's region refuses it).
    Discard,
    /// Staged until the message completes: its receive is not known yet.
    Stage,
}

/// How far ahead of the next message to complete a SEND still looks for its receive
/// (the scan is per packet); beyond it SEND payload is staged.
const DIRECT_LOOKAHEAD_MSGS: usize = 64;

/// Messages being received.
#[derive(Debug)]
pub struct RxMessages {
    /// MSN of the next message to complete (`msgs[0]`).
    next_msn: u64,
    msgs: VecDeque<Option<RxMsg>>,
    max_msgs: u32,
    recvs: VecDeque<RecvWr>,
    /// Messages that need a receive (SEND, WRITE_WITH_IMM) whose last packet was accepted
    /// and which have not completed yet: each holds one of `recvs`, so
    /// `reserved <= recvs.len()` always, and such a message completes as soon as it and
    /// every earlier message are whole.
    reserved: usize,
    /// What the staged SEND chunks of all messages count ([`staged_charge`]: payload plus
    /// [`STAGED_CHUNK_OVERHEAD_BYTES`] each), `<= max_staged_bytes`.
    staged_bytes: u64,
    max_staged_bytes: u64,
    /// Byte ranges kept over all messages (each message's [`Coverage::ranges`]): the
    /// out-of-order placement state, 8 bytes each.
    ranges: usize,
    /// At most this many ([`RxMessages::set_max_ranges`]): a packet that would open one
    /// more is refused as [`DropReason::MessageWindowFull`] (the sender resends it later).
    max_ranges: usize,
}

impl RxMessages {
    /// Tracks at most `max_msgs` messages ahead of the next to complete and stages at most
    /// `max_staged_bytes` of SEND payload whose receive buffer is not known yet.
    pub fn new(max_msgs: u32, max_staged_bytes: u64) -> Self {
        RxMessages {
            next_msn: 0,
            msgs: VecDeque::new(),
            max_msgs: max_msgs.max(1),
            recvs: VecDeque::new(),
            reserved: 0,
            staged_bytes: 0,
            max_staged_bytes,
            ranges: 0,
            max_ranges: max_msgs.max(1) as usize + super::coverage::MAX_COVERAGE_HOLES,
        }
    }

    /// Sets the most byte ranges kept over all messages (default: `max_msgs` plus
    /// [`super::coverage::MAX_COVERAGE_HOLES`]). A sender whose packets of each message
    /// go out in offset order opens a range per message plus one per packet missing in
    /// its window, so `max_msgs + window` is never reached by it; a peer that sends every
    /// other byte of 4096 messages of 4 GiB (up to 1024 ranges each without it, 32 MiB)
    /// is refused at the cap.
    pub fn set_max_ranges(&mut self, n: usize) {
        self.max_ranges = n.max(1);
    }

    /// Byte ranges kept now over all messages.
    pub fn ranges(&self) -> usize {
        self.ranges
    }

    /// Messages ahead of the next to complete and before index `idx` whose last packet
    /// has not arrived (or of which nothing has): each may still need a receive.
    fn open_before(&self, idx: usize) -> usize {
        let closed = self
            .msgs
            .iter()
            .take(idx)
            .filter(|m| m.as_ref().is_some_and(|m| m.last_seen))
            .count();
        idx - closed
    }

    /// What the SEND payload staged now (arrived before its receive buffer was known)
    /// counts against the bound: its bytes plus [`STAGED_CHUNK_OVERHEAD_BYTES`] per chunk.
    pub fn staged_bytes(&self) -> u64 {
        self.staged_bytes
    }

    /// Where the payload of a SEND packet of message `idx` (ahead of the next to complete)
    /// of `msg_len` bytes goes: the receive it will consume is `recvs[j]`, `j` the number of
    /// earlier messages that consume one, once each of them is known.
    fn send_place(&self, idx: usize, msg_len: u32, regions: &RegionTable) -> SendPlace {
        if idx > DIRECT_LOOKAHEAD_MSGS {
            return SendPlace::Stage;
        }
        let mut j = 0;
        for k in 0..idx {
            match self.msgs.get(k) {
                Some(Some(m)) => match m.needs_recv() {
                    Some(true) => j += 1,
                    Some(false) => {}
                    None => return SendPlace::Stage,
                },
                _ => return SendPlace::Stage,
            }
        }
        let Some(wr) = self.recvs.get(j) else {
            return SendPlace::Stage;
        };
        if msg_len > wr.len
            || regions
                .check_local_write(wr.lkey, wr.addr, u64::from(msg_len))
                .is_err()
        {
            return SendPlace::Discard;
        }
        SendPlace::Direct(*wr)
    }

    /// MSN of the next message to complete.
    pub fn next_msn(&self) -> u64 {
        self.next_msn
    }

    /// Posted receives not yet consumed.
    pub fn posted_recvs(&self) -> usize {
        self.recvs.len()
    }

    /// Whether a message is partly received (tracked, not yet completed).
    pub fn in_progress(&self) -> bool {
        !self.msgs.is_empty()
    }

    /// Posted receives whose buffer is in region `lkey`.
    pub fn recvs_using(&self, lkey: u32) -> usize {
        self.recvs.iter().filter(|w| w.lkey == lkey).count()
    }

    /// Posts a receive buffer.
    pub fn post_recv(&mut self, wr: RecvWr) {
        self.recvs.push_back(wr);
    }

    /// The 64-bit MSN of `msn32`, or why it cannot be tracked: behind the next message to
    /// complete (by the equal-distance rule of [`crate::psn`], over 32 bits) means that
    /// message already completed; ahead by `max_msgs` or more means the table is full.
    fn unwrap_msn(&self, msn32: u32) -> Result<u64, DropReason> {
        let d = msn32.wrapping_sub(self.next_msn as u32);
        if d >= 1 << 31 {
            Err(DropReason::InconsistentMessage)
        } else if d >= self.max_msgs {
            Err(DropReason::MessageWindowFull)
        } else {
            Ok(self.next_msn + u64::from(d))
        }
    }

    /// Checks a data packet against its message and the regions, without changing
    /// anything. Returns the 64-bit MSN.
    ///
    /// # Errors
    /// The drop reason: `InconsistentMessage` (a completed message, or length / kind
    /// disagreeing with earlier packets), `MessageWindowFull`, `BadRkey`, `OutOfBounds`,
    /// `AccessDenied`.
    #[inline]
    pub fn check(&self, p: &RxData<'_>, regions: &RegionTable) -> Result<u64, DropReason> {
        let msn = self.check_message(p, regions)?;
        if let RxKind::Write { addr, rkey } = p.kind {
            regions
                .check_remote_write(rkey, addr, p.payload.len() as u64)
                .map_err(access_reason)?;
        }
        Ok(msn)
    }

    /// [`RxMessages::check`] without its last step, the region check of an RDMA WRITE
    /// (which [`RxMessages::commit`] repeats before it writes anything, with the same
    /// errors in the same order).
    #[inline]
    fn check_message(&self, p: &RxData<'_>, regions: &RegionTable) -> Result<u64, DropReason> {
        let msn = self.unwrap_msn(p.msn32)?;
        let idx = (msn - self.next_msn) as usize;
        let is_send = matches!(p.kind, RxKind::Send);
        let payload_len =
            u32::try_from(p.payload.len()).map_err(|_| DropReason::InconsistentMessage)?;
        if let Some(Some(m)) = self.msgs.get(idx) {
            if m.len != p.msg_len || m.is_send != is_send || (m.last_seen && p.last) {
                return Err(DropReason::InconsistentMessage);
            }
            // a range that repeats or overlaps bytes that arrived (at a fresh PSN), or
            // reaches past the message: it would let the byte count reach the length while
            // some bytes were never written
            m.coverage
                .check(p.offset, payload_len, p.msg_len)
                .map_err(coverage_reason)?;
            if self.ranges >= self.max_ranges && m.coverage.opens_range(p.offset, payload_len) {
                return Err(DropReason::MessageWindowFull);
            }
        } else {
            Coverage::default()
                .check(p.offset, payload_len, p.msg_len)
                .map_err(coverage_reason)?;
            if self.ranges >= self.max_ranges && payload_len > 0 {
                return Err(DropReason::MessageWindowFull);
            }
        }
        if p.last
            && (is_send || p.imm.is_some())
            && self.reserved + self.open_before(idx) >= self.recvs.len()
        {
            // No receive is free for this message: accepting its last packet would let
            // the sender complete it (and reuse the memory it wrote) before the receiver
            // can raise its completion. Receives go in MSN order, so a free one is kept
            // for every earlier message that may still need one (its last packet, which
            // may carry an immediate, has not arrived): else later messages could hold
            // every receive while an earlier one, which they wait for, is refused for
            // ever.
            return Err(DropReason::ReceiverNotReady);
        }
        if is_send
            && payload_len > 0
            && self.send_place(idx, p.msg_len, regions) == SendPlace::Stage
            && self.staged_bytes + staged_charge(u64::from(payload_len)) > self.max_staged_bytes
        {
            return Err(DropReason::StagingFull);
        }
        Ok(msn)
    }

    /// Checks and places a data packet whose PSN is new: [`RxMessages::check`] then
    /// [`RxMessages::commit`]. On error nothing was written and nothing changed. Returns the
    /// 64-bit MSN.
    ///
    /// # Errors
    /// As [`RxMessages::check`].
    #[inline]
    pub fn place(&mut self, p: &RxData<'_>, regions: &mut RegionTable) -> Result<u64, DropReason> {
        // `commit` checks an RDMA WRITE's region before it changes anything (one rkey
        // lookup per packet instead of two)
        let msn = self.check_message(p, regions)?;
        self.commit(msn, p, regions)?;
        Ok(msn)
    }

    /// Places a packet that passed [`RxMessages::check`] (same `regions`, no change in
    /// between) and whose PSN was new. An RDMA WRITE's region is checked here again before
    /// anything changes (with `check`'s errors), which is why [`RxMessages::place`] leaves
    /// that last step of `check` to it.
    ///
    /// # Errors
    /// The drop reason if placement fails after all (it cannot when `check` passed).
    #[inline]
    pub fn commit(
        &mut self,
        msn: u64,
        p: &RxData<'_>,
        regions: &mut RegionTable,
    ) -> Result<(), DropReason> {
        if let RxKind::Write { addr, rkey } = p.kind {
            regions
                .place_remote(rkey, addr, p.payload)
                .map_err(access_reason)?;
        }
        let idx = msn
            .checked_sub(self.next_msn)
            .and_then(|d| usize::try_from(d).ok())
            .ok_or(DropReason::InconsistentMessage)?;
        // SEND payload: into its receive when that is known (the scan looks only at
        // earlier messages, so it agrees with `check`'s), else staged
        let mut stage = None;
        if matches!(p.kind, RxKind::Send) && !p.payload.is_empty() {
            match self.send_place(idx, p.msg_len, regions) {
                SendPlace::Direct(wr) => {
                    let addr = wr
                        .addr
                        .checked_add(u64::from(p.offset))
                        .ok_or(DropReason::InconsistentMessage)?;
                    regions
                        .place_local(wr.lkey, addr, p.payload)
                        .map_err(access_reason)?;
                }
                SendPlace::Discard => {}
                SendPlace::Stage => stage = Some(p.payload.to_vec()),
            }
        }
        // one push per missing slot (`check` bounds idx): `resize` clones a template per
        // slot and costs ~150 instructions for the usual one
        while self.msgs.len() <= idx {
            self.msgs.push_back(None);
        }
        let slot = self
            .msgs
            .get_mut(idx)
            .ok_or(DropReason::InconsistentMessage)?;
        let m = slot.get_or_insert_with(|| RxMsg {
            is_send: matches!(p.kind, RxKind::Send),
            len: p.msg_len,
            coverage: Coverage::default(),
            last_seen: false,
            imm: None,
            staged: Vec::new(),
        });
        let before = m.coverage.ranges();
        m.coverage.add(p.offset, p.payload.len() as u32);
        self.ranges = (self.ranges + m.coverage.ranges()).saturating_sub(before);
        if p.last {
            m.last_seen = true;
            m.imm = p.imm;
            if m.is_send || m.imm.is_some() {
                self.reserved += 1;
            }
        }
        if let Some(bytes) = stage {
            m.staged.push((p.offset, bytes));
            self.staged_bytes += staged_charge(p.payload.len() as u64);
        }
        Ok(())
    }

    /// Completes every message at the front that is whole, in order, pushing receiver
    /// completions (SEND -> `Recv`, WRITE_WITH_IMM -> `RecvRdmaWithImm`; plain WRITE gives
    /// none). Stops at a message that needs a receive buffer while none is posted.
    #[inline(always)]
    pub fn advance(&mut self, regions: &mut RegionTable, out: &mut VecDeque<Completion>) {
        // the usual case, a message at the front still incomplete, without the set-up of the
        // completion loop (~45 instructions per data packet)
        match self.msgs.front() {
            Some(Some(m)) if m.last_seen && m.coverage.is_whole(m.len) => {
                self.advance_whole(regions, out)
            }
            _ => {}
        }
    }

    /// [`RxMessages::advance`] once the message at the front is whole.
    #[inline(never)]
    fn advance_whole(&mut self, regions: &mut RegionTable, out: &mut VecDeque<Completion>) {
        // the usual case, a plain WRITE (no receive to consume) and nothing whole behind
        // it, without the set-up of the completion loop
        if let Some(Some(m)) = self.msgs.front()
            && !m.is_send
            && m.imm.is_none()
        {
            if let Some(Some(m)) = self.msgs.pop_front() {
                self.next_msn += 1;
                self.staged_bytes = self.staged_bytes.saturating_sub(m.staged_bytes());
                self.ranges = self.ranges.saturating_sub(m.coverage.ranges());
            }
            match self.msgs.front() {
                Some(Some(m)) if m.last_seen && m.coverage.is_whole(m.len) => {}
                _ => return,
            }
        }
        self.advance_loop(regions, out);
    }

    /// [`RxMessages::advance_whole`]: the completion loop.
    #[inline(never)]
    fn advance_loop(&mut self, regions: &mut RegionTable, out: &mut VecDeque<Completion>) {
        loop {
            let Some(Some(m)) = self.msgs.front() else {
                return;
            };
            if !m.last_seen || !m.coverage.is_whole(m.len) {
                return;
            }
            let needs_recv = m.is_send || m.imm.is_some();
            if needs_recv && self.recvs.is_empty() {
                return;
            }
            let Some(Some(m)) = self.msgs.pop_front() else {
                return;
            };
            self.next_msn += 1;
            self.staged_bytes = self.staged_bytes.saturating_sub(m.staged_bytes());
            self.ranges = self.ranges.saturating_sub(m.coverage.ranges());
            if !needs_recv {
                continue;
            }
            self.reserved = self.reserved.saturating_sub(1);
            let Some(wr) = self.recvs.pop_front() else {
                return;
            };
            let (opcode, status) = if m.is_send {
                (WcOpcode::Recv, deliver(&m, &wr, regions))
            } else {
                (WcOpcode::RecvRdmaWithImm, WcStatus::Success)
            };
            out.push_back(Completion {
                wr_id: wr.wr_id,
                opcode,
                status,
                byte_len: if status == WcStatus::Success {
                    m.len
                } else {
                    0
                },
                imm: m.imm,
            });
        }
    }

    /// Flushes every posted receive (connection error/close): one `Flushed` completion each.
    pub fn flush(&mut self, out: &mut VecDeque<Completion>) {
        while let Some(wr) = self.recvs.pop_front() {
            out.push_back(Completion {
                wr_id: wr.wr_id,
                opcode: WcOpcode::Recv,
                status: WcStatus::Flushed,
                byte_len: 0,
                imm: None,
            });
        }
        self.msgs.clear();
        self.reserved = 0;
        self.staged_bytes = 0;
        self.ranges = 0;
    }
}

fn deliver(m: &RxMsg, wr: &RecvWr, regions: &mut RegionTable) -> WcStatus {
    if m.len > wr.len {
        return WcStatus::LocalLengthError;
    }
    if regions
        .check_local_write(wr.lkey, wr.addr, u64::from(m.len))
        .is_err()
    {
        return WcStatus::LocalProtectionError;
    }
    for (off, bytes) in &m.staged {
        let Some(addr) = wr.addr.checked_add(u64::from(*off)) else {
            return WcStatus::LocalProtectionError;
        };
        if u64::from(*off) + bytes.len() as u64 > u64::from(m.len)
            || regions.place_local(wr.lkey, addr, bytes).is_err()
        {
            return WcStatus::LocalProtectionError;
        }
    }
    WcStatus::Success
}

fn coverage_reason(e: CoverageError) -> DropReason {
    match e {
        CoverageError::Inconsistent => DropReason::InconsistentMessage,
        // more holes than one message may keep: the sender retransmits it later
        CoverageError::TooFragmented => DropReason::MessageWindowFull,
    }
}

fn access_reason(e: AccessError) -> DropReason {
    match e {
        AccessError::UnknownKey(_) => DropReason::BadRkey,
        AccessError::OutOfBounds { .. } => DropReason::OutOfBounds,
        // (placement never reports Shared: it writes shared regions under their lock)
        AccessError::NoAccess | AccessError::Shared(_) => DropReason::AccessDenied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::Access;

    fn write(
        msn32: u32,
        addr: u64,
        rkey: u32,
        msg_len: u32,
        offset: u32,
        last: bool,
        payload: &[u8],
    ) -> RxData<'_> {
        RxData {
            msn32,
            kind: RxKind::Write { addr, rkey },
            msg_len,
            offset,
            last,
            imm: None,
            payload,
        }
    }

    #[test]
    fn writes_place_in_any_order_and_complete_in_order() {
        let mut regions = RegionTable::new(0x1200);
        let mr = regions.register(8, Access::REMOTE_WRITE).unwrap();
        let buf = regions.register(16, Access::LOCAL_WRITE).unwrap();
        let mut rx = RxMessages::new(64, 1 << 20);
        let mut out = VecDeque::new();
        // message 1 (WRITE_WITH_IMM, 4 bytes) arrives before message 0 (WRITE, 2 packets);
        // with no receive posted its (last) packet is refused, nothing written
        let mut p1 = write(1, mr.addr + 4, mr.rkey, 4, 0, true, b"WXYZ");
        p1.imm = Some(0xC0FFEE);
        assert_eq!(rx.check(&p1, &regions), Err(DropReason::ReceiverNotReady));
        rx.post_recv(RecvWr {
            wr_id: 77,
            lkey: buf.lkey,
            addr: buf.addr,
            len: 16,
        });
        // one receive is kept for message 0, of which nothing arrived yet (its last
        // packet may carry an immediate): message 1 needs a second
        assert_eq!(rx.check(&p1, &regions), Err(DropReason::ReceiverNotReady));
        rx.post_recv(RecvWr {
            wr_id: 78,
            lkey: buf.lkey,
            addr: buf.addr,
            len: 16,
        });
        let msn = rx.check(&p1, &regions).unwrap();
        assert_eq!(msn, 1);
        rx.commit(msn, &p1, &mut regions).unwrap();
        rx.advance(&mut regions, &mut out);
        assert!(out.is_empty());
        let p0b = write(0, mr.addr + 2, mr.rkey, 4, 2, true, b"cd");
        rx.commit(rx.check(&p0b, &regions).unwrap(), &p0b, &mut regions)
            .unwrap();
        rx.advance(&mut regions, &mut out);
        assert!(out.is_empty());
        let p0a = write(0, mr.addr, mr.rkey, 4, 0, false, b"ab");
        rx.commit(rx.check(&p0a, &regions).unwrap(), &p0a, &mut regions)
            .unwrap();
        // message 0 done (no completion); message 1, whole and holding the receive,
        // completes at once
        rx.advance(&mut regions, &mut out);
        assert_eq!(rx.next_msn(), 2);
        assert_eq!(
            out.pop_front(),
            Some(Completion {
                wr_id: 77,
                opcode: WcOpcode::RecvRdmaWithImm,
                status: WcStatus::Success,
                byte_len: 4,
                imm: Some(0xC0FFEE)
            })
        );
        assert_eq!(regions.bytes(mr.lkey).unwrap(), b"abcdWXYZ");
    }

    #[test]
    fn bad_writes_are_refused_before_anything_is_written() {
        let mut regions = RegionTable::new(0x1200);
        let mr = regions.register(8, Access::REMOTE_WRITE).unwrap();
        let rx = RxMessages::new(64, 1 << 20);
        let oob = write(0, mr.addr + 6, mr.rkey, 4, 0, true, b"abcd");
        assert_eq!(rx.check(&oob, &regions), Err(DropReason::OutOfBounds));
        let badkey = write(0, mr.addr, mr.rkey ^ 0x100, 4, 0, true, b"abcd");
        assert_eq!(rx.check(&badkey, &regions), Err(DropReason::BadRkey));
        let far = write(64, mr.addr, mr.rkey, 4, 0, true, b"abcd");
        assert_eq!(rx.check(&far, &regions), Err(DropReason::MessageWindowFull));
        let edge = write(63, mr.addr, mr.rkey, 4, 0, true, b"abcd");
        assert_eq!(rx.check(&edge, &regions), Ok(63));
        let old = write(u32::MAX, mr.addr, mr.rkey, 4, 0, true, b"abcd");
        assert_eq!(
            rx.check(&old, &regions),
            Err(DropReason::InconsistentMessage)
        );
        assert!(regions.bytes(mr.lkey).unwrap().iter().all(|&b| b == 0));
    }

    #[test]
    fn sends_are_staged_and_delivered_in_order() {
        let mut regions = RegionTable::new(0);
        let small = regions.register(4, Access::LOCAL_WRITE).unwrap();
        let big = regions.register(16, Access::LOCAL_WRITE).unwrap();
        let mut rx = RxMessages::new(64, 1 << 20);
        let mut out = VecDeque::new();
        let s = |msn32, offset, last, payload| RxData {
            msn32,
            kind: RxKind::Send,
            msg_len: 6,
            offset,
            last,
            imm: None,
            payload,
        };
        rx.post_recv(RecvWr {
            wr_id: 1,
            lkey: big.lkey,
            addr: big.addr + 2,
            len: 14,
        });
        // one receive posted: the first message's last packet takes it, the second's is
        // refused (receiver not ready) until another is posted; a middle packet needs none
        for p in [s(0, 3, true, &b"def"[..]), s(0, 0, false, &b"abc"[..])] {
            let msn = rx.check(&p, &regions).unwrap();
            rx.commit(msn, &p, &mut regions).unwrap();
        }
        assert_eq!(
            rx.check(&s(1, 0, true, &b"uvwxyz"[..]), &regions),
            Err(DropReason::ReceiverNotReady)
        );
        rx.post_recv(RecvWr {
            wr_id: 2,
            lkey: small.lkey,
            addr: small.addr,
            len: 4,
        });
        let p = s(1, 0, true, &b"uvwxyz"[..]);
        let msn = rx.check(&p, &regions).unwrap();
        rx.commit(msn, &p, &mut regions).unwrap();
        // a length mismatch with the message is inconsistent
        assert_eq!(
            rx.check(
                &RxData {
                    msg_len: 7,
                    ..s(1, 0, true, &b"uvwxyz"[..])
                },
                &regions
            ),
            Err(DropReason::InconsistentMessage)
        );
        rx.advance(&mut regions, &mut out);
        let got: Vec<(u64, WcStatus, u32)> = out
            .iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, WcStatus::Success, 6),
                (2, WcStatus::LocalLengthError, 0)
            ]
        );
        assert_eq!(&regions.bytes(big.lkey).unwrap()[..8], b"\0\0abcdef");
        assert_eq!(regions.bytes(small.lkey).unwrap(), b"\0\0\0\0");
        assert_eq!(rx.next_msn(), 2);
    }

    fn send(msn32: u32, msg_len: u32, offset: u32, last: bool, payload: &[u8]) -> RxData<'_> {
        RxData {
            msn32,
            kind: RxKind::Send,
            msg_len,
            offset,
            last,
            imm: None,
            payload,
        }
    }

    fn accept(rx: &mut RxMessages, p: &RxData<'_>, regions: &mut RegionTable) {
        let msn = rx.check(p, regions).unwrap();
        rx.commit(msn, p, regions).unwrap();
    }

    #[test]
    fn a_send_whose_receive_is_known_goes_straight_into_it() {
        let mut regions = RegionTable::new(0);
        let buf = regions.register(16, Access::LOCAL_WRITE).unwrap();
        let mut rx = RxMessages::new(64, 0);
        let mut out = VecDeque::new();
        rx.post_recv(RecvWr {
            wr_id: 5,
            lkey: buf.lkey,
            addr: buf.addr + 1,
            len: 15,
        });
        // out of order, with no staging allowed at all: the middle packet is in the
        // buffer before the message completes, and nothing was staged
        accept(&mut rx, &send(0, 9, 3, false, b"def"), &mut regions);
        assert_eq!(&regions.bytes(buf.lkey).unwrap()[..7], b"\0\0\0\0def");
        assert_eq!(rx.staged_bytes(), 0);
        accept(&mut rx, &send(0, 9, 6, true, b"ghi"), &mut regions);
        accept(&mut rx, &send(0, 9, 0, false, b"abc"), &mut regions);
        rx.advance(&mut regions, &mut out);
        assert_eq!(
            out.pop_front(),
            Some(Completion {
                wr_id: 5,
                opcode: WcOpcode::Recv,
                status: WcStatus::Success,
                byte_len: 9,
                imm: None
            })
        );
        assert_eq!(&regions.bytes(buf.lkey).unwrap()[..10], b"\0abcdefghi");
    }

    #[test]
    fn staging_is_bounded_and_refusals_resume_once_the_receive_is_posted() {
        let mut regions = RegionTable::new(0);
        let buf = regions.register(16, Access::LOCAL_WRITE).unwrap();
        let two = 2 * STAGED_CHUNK_OVERHEAD_BYTES;
        let mut rx = RxMessages::new(64, 8 + two);
        let mut out = VecDeque::new();
        // no receive posted: two chunks of 4 bytes may wait, a third byte may not
        accept(&mut rx, &send(0, 12, 0, false, b"abcd"), &mut regions);
        accept(&mut rx, &send(0, 12, 4, false, b"efgh"), &mut regions);
        assert_eq!(rx.staged_bytes(), 8 + two);
        let tail = send(0, 12, 8, true, b"ijkl");
        assert_eq!(
            rx.check(&send(0, 12, 8, false, b"i"), &regions),
            Err(DropReason::StagingFull)
        );
        assert_eq!(rx.check(&tail, &regions), Err(DropReason::ReceiverNotReady));
        // a later message's packets are refused too (nothing may be staged)
        assert_eq!(
            rx.check(&send(1, 4, 0, false, b"zz"), &regions),
            Err(DropReason::StagingFull)
        );
        // the receive arrives: the rest goes straight in; completion copies the staged
        // part and frees it
        rx.post_recv(RecvWr {
            wr_id: 9,
            lkey: buf.lkey,
            addr: buf.addr,
            len: 16,
        });
        accept(&mut rx, &tail, &mut regions);
        assert_eq!(rx.staged_bytes(), 8 + two);
        rx.advance(&mut regions, &mut out);
        assert_eq!(
            out.iter()
                .map(|c| (c.wr_id, c.status, c.byte_len))
                .collect::<Vec<_>>(),
            vec![(9, WcStatus::Success, 12)]
        );
        assert_eq!(&regions.bytes(buf.lkey).unwrap()[..12], b"abcdefghijkl");
        assert_eq!(rx.staged_bytes(), 0);
        // message 1 may be staged again (no receive for it yet)
        accept(&mut rx, &send(1, 4, 0, false, b"zz"), &mut regions);
        assert_eq!(rx.staged_bytes(), staged_charge(2));
    }

    #[test]
    fn a_later_send_finds_its_receive_only_once_every_earlier_message_is_known() {
        let mut regions = RegionTable::new(0);
        let mr = regions.register(8, Access::REMOTE_WRITE).unwrap();
        let a = regions.register(4, Access::LOCAL_WRITE).unwrap();
        let b = regions.register(4, Access::LOCAL_WRITE).unwrap();
        let mut rx = RxMessages::new(64, 1 << 20);
        let mut out = VecDeque::new();
        for (wr_id, k) in [(1, a), (2, b)] {
            rx.post_recv(RecvWr {
                wr_id,
                lkey: k.lkey,
                addr: k.addr,
                len: 4,
            });
        }
        // message 0 is a WRITE whose last packet (which may carry an immediate) is
        // missing: message 1's receive is unknown, so its payload is staged
        accept(
            &mut rx,
            &write(0, mr.addr, mr.rkey, 4, 0, false, b"WW"),
            &mut regions,
        );
        accept(&mut rx, &send(1, 4, 0, false, b"xy"), &mut regions);
        assert_eq!(rx.staged_bytes(), staged_charge(2));
        // message 0's last packet: no immediate, so it takes no receive; message 1's
        // receive is now known to be the first (a), and its next packet goes there
        accept(
            &mut rx,
            &write(0, mr.addr + 2, mr.rkey, 4, 2, true, b"WW"),
            &mut regions,
        );
        accept(&mut rx, &send(1, 4, 2, true, b"zw"), &mut regions);
        assert_eq!(rx.staged_bytes(), staged_charge(2));
        assert_eq!(regions.bytes(a.lkey).unwrap(), b"\0\0zw");
        // message 2 (too long for b, its receive): neither staged nor written
        assert_eq!(rx.check(&send(2, 6, 0, true, b"123456"), &regions), Ok(2));
        accept(&mut rx, &send(2, 6, 0, true, b"123456"), &mut regions);
        assert_eq!(rx.staged_bytes(), staged_charge(2));
        rx.advance(&mut regions, &mut out);
        assert_eq!(
            out.iter()
                .map(|c| (c.wr_id, c.status, c.byte_len))
                .collect::<Vec<_>>(),
            vec![
                (1, WcStatus::Success, 4),
                (2, WcStatus::LocalLengthError, 0)
            ]
        );
        assert_eq!(regions.bytes(a.lkey).unwrap(), b"xyzw");
        assert_eq!(regions.bytes(b.lkey).unwrap(), b"\0\0\0\0");
        assert_eq!(rx.staged_bytes(), 0);
    }

    /// The soak's deadlock (CI, seed 0x18ed3fa08e7cbb4c run 4: RNR for 5 s, then
    /// RetryExceeded): with fewer receives than messages in flight, a later
    /// WRITE_WITH_IMM's last packet took the only receive while an earlier one's last
    /// packet was still to come; that one was then refused for ever, and the later one
    /// waited for it.
    #[test]
    fn a_later_message_never_takes_the_receive_an_earlier_one_needs() {
        let mut regions = RegionTable::new(0);
        let mr = regions.register(8, Access::REMOTE_WRITE).unwrap();
        let buf = regions.register(4, Access::LOCAL_WRITE).unwrap();
        let mut rx = RxMessages::new(64, 0);
        let mut out = VecDeque::new();
        rx.post_recv(RecvWr {
            wr_id: 1,
            lkey: buf.lkey,
            addr: buf.addr,
            len: 4,
        });
        // message 0: its first packet only; message 1 (one packet, with an immediate)
        let mut m0_last = write(0, mr.addr + 2, mr.rkey, 4, 2, true, b"cd");
        m0_last.imm = Some(10);
        accept(
            &mut rx,
            &write(0, mr.addr, mr.rkey, 4, 0, false, b"ab"),
            &mut regions,
        );
        let mut m1 = write(1, mr.addr + 4, mr.rkey, 4, 0, true, b"WXYZ");
        m1.imm = Some(11);
        assert_eq!(rx.check(&m1, &regions), Err(DropReason::ReceiverNotReady));
        // message 0's last packet finds the receive and completes at once
        accept(&mut rx, &m0_last, &mut regions);
        rx.advance(&mut regions, &mut out);
        assert_eq!(
            out.iter().map(|c| (c.wr_id, c.imm)).collect::<Vec<_>>(),
            vec![(1, Some(10))]
        );
        // message 1 waits for the next receive, then lands
        assert_eq!(rx.check(&m1, &regions), Err(DropReason::ReceiverNotReady));
        rx.post_recv(RecvWr {
            wr_id: 2,
            lkey: buf.lkey,
            addr: buf.addr,
            len: 4,
        });
        accept(&mut rx, &m1, &mut regions);
        rx.advance(&mut regions, &mut out);
        assert_eq!(
            out.iter().map(|c| (c.wr_id, c.imm)).collect::<Vec<_>>(),
            vec![(1, Some(10)), (2, Some(11))]
        );
        assert_eq!(regions.bytes(mr.lkey).unwrap(), b"abcdWXYZ");
    }
}
