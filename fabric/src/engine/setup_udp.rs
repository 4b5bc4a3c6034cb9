//! The in-band carrier of connection set-up (issue 44): the handshake of
//! [`super::setup`] (NONCE, CONFIRM, INFO, PORTS, READY, the same bytes and the same
//! checks) carried in UDP datagrams instead of a TCP stream, with a reliability layer of
//! its own, small enough to read in one sitting.
//!
//! # The datagram
//!
//! ```text
//! 0      4     5      6      8              16       20       24
//! | MRCU | ver | kind | 0 0  | handshake id | seq    | ack    | payload (0..=1200 bytes)
//! |      | =1  | =1   | rsvd | (8, random)  | (4)    | (4)    |
//! ```
//!
//! Each end of a handshake sends one byte stream (the messages of the TCP carrier,
//! back to back). `seq` is the stream offset of the payload's first byte, `ack` the
//! offset of the next byte this end expects from the peer (cumulative: every byte
//! before it arrived); a datagram without payload is a pure acknowledgement. The
//! connecting end draws the handshake id from the OS CSPRNG; the listener knows a
//! handshake by the peer's address and that id.
//!
//! # Reliability (the crate-private `Link`)
//!
//! - **Fragmentation**: the stream is cut into datagrams of at most
//!   [`MAX_SETUP_PAYLOAD_BYTES`] (an INFO of 1024 regions, 20509 bytes, is 18 of them).
//! - **Reassembly**: bytes in order go straight to the handshake's message buffer
//!   (bounded by [`super::setup::MAX_SETUP_MESSAGE_BYTES`], as on TCP); a datagram ahead
//!   of a gap is kept until the gap fills, within the receive window and a byte budget
//!   shared by the listener's handshakes ([`MAX_REASSEMBLY_BYTES`]). A duplicate is
//!   acknowledged again and its bytes ignored.
//! - **Retransmission**: the first unacknowledged datagram again on a timer,
//!   [`SETUP_RTO_INITIAL`] doubling to [`SETUP_RTO_MAX`], at most
//!   [`MAX_SETUP_RETRANSMITS`] times in a row without the peer acknowledging anything
//!   new; then the handshake fails as timed out (and always at its deadline,
//!   [`super::Worker::set_setup_timeout`]). The peer keeps what came after a gap, so
//!   one datagram fills it; an acknowledgement that leaves bytes missing during
//!   recovery, or a duplicate from the peer (it did not hear from this end), sends the
//!   next first unacknowledged datagram at once.
//! - **The end**: an end is done when it took the peer's READY and the peer
//!   acknowledged all of its own bytes; it then lingers for [`SETUP_LINGER`] to
//!   acknowledge the peer's retransmissions (its last acknowledgement may have been
//!   lost), holding no QP state, only the two stream offsets.
//!
//! # Hostile datagrams
//!
//! Everything in a datagram is checked before it changes state: the header (magic,
//! version, kind, reserved bytes, length), an acknowledgement of bytes never sent (the
//! whole datagram is dropped), offsets beyond the receive window. A listener creates
//! handshake state only for a datagram that opens one (offset 0, nothing acknowledged,
//! a NONCE at the start), and the QP only once the peer's confirmation checked, as on
//! TCP. Until then a listener never sends on its own timer: it answers each datagram
//! from the peer with at most one of its own, so a forged source address draws no more
//! datagrams (nor bytes) than the forger sent. Out-of-order bytes are kept only for a
//! peer that proved the secret. Nothing is allocated by a size a datagram names: a
//! datagram is read into a fixed buffer and a kept one is at most
//! [`MAX_SETUP_PAYLOAD_BYTES`]. What is dropped is counted
//! ([`super::SetupStats::datagrams_dropped`]).

use super::bootstrap::BootstrapError;
use std::time::{Duration, Instant};

/// `"MRCU"`: the first bytes of a set-up datagram.
pub const DATAGRAM_MAGIC: [u8; 4] = *b"MRCU";
/// Version of the set-up datagram layout.
pub const DATAGRAM_VERSION: u8 = 1;
/// The only kind of set-up datagram: stream bytes and an acknowledgement.
pub const DATAGRAM_KIND_STREAM: u8 = 1;
/// Bytes of a set-up datagram's header.
pub const DATAGRAM_HEADER_BYTES: usize = 24;
/// Most stream bytes in one set-up datagram (with the header, 1224 bytes of UDP
/// payload: under the 1280-byte IPv6 minimum MTU with IP and UDP headers).
pub const MAX_SETUP_PAYLOAD_BYTES: usize = 1200;
/// Most bytes of a set-up datagram.
pub const MAX_SETUP_DATAGRAM_BYTES: usize = DATAGRAM_HEADER_BYTES + MAX_SETUP_PAYLOAD_BYTES;
/// First retransmission timeout of a handshake's unacknowledged bytes: 25 ms.
pub const SETUP_RTO_INITIAL: Duration = Duration::from_millis(25);
/// Largest retransmission timeout (each expiry doubles it up to this): 200 ms.
pub const SETUP_RTO_MAX: Duration = Duration::from_millis(200);
/// Most retransmissions in a row without the peer acknowledging anything new; one more
/// expiry fails the handshake as timed out. With [`SETUP_RTO_INITIAL`] and
/// [`SETUP_RTO_MAX`] the last one goes 1575 ms after the first transmission.
pub const MAX_SETUP_RETRANSMITS: u32 = 10;
/// How long a finished handshake still answers its peer's retransmissions: 2 s, longer
/// than the peer's whole retransmission schedule (1575 ms).
pub const SETUP_LINGER: Duration = Duration::from_secs(2);
/// Most out-of-order bytes the handshakes of one listener (or one connection attempt)
/// keep at once: 1 MiB.
pub const MAX_REASSEMBLY_BYTES: usize = 1 << 20;

/// A set-up datagram's header and payload, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The handshake it belongs to.
    pub id: u64,
    /// Stream offset of the payload's first byte.
    pub seq: u32,
    /// The next stream offset the sender expects.
    pub ack: u32,
    /// Stream bytes (at most [`MAX_SETUP_PAYLOAD_BYTES`]).
    pub payload: &'a [u8],
}

impl<'a> Datagram<'a> {
    /// Parses `b`: `None` unless it is a whole set-up datagram of this version (magic,
    /// version, kind, zero reserved bytes, at most [`MAX_SETUP_DATAGRAM_BYTES`], and
    /// `seq` plus the payload's length within 32 bits).
    pub fn parse(b: &'a [u8]) -> Option<Datagram<'a>> {
        if b.len() < DATAGRAM_HEADER_BYTES
            || b.len() > MAX_SETUP_DATAGRAM_BYTES
            || b[..4] != DATAGRAM_MAGIC
            || b[4] != DATAGRAM_VERSION
            || b[5] != DATAGRAM_KIND_STREAM
            || b[6..8] != [0, 0]
        {
            return None;
        }
        let id = u64::from_be_bytes(b[8..16].try_into().ok()?);
        let seq = u32::from_be_bytes(b[16..20].try_into().ok()?);
        let ack = u32::from_be_bytes(b[20..24].try_into().ok()?);
        let payload = &b[DATAGRAM_HEADER_BYTES..];
        seq.checked_add(u32::try_from(payload.len()).ok()?)?;
        Some(Datagram {
            id,
            seq,
            ack,
            payload,
        })
    }

    /// The encoded datagram.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(DATAGRAM_HEADER_BYTES + self.payload.len());
        b.extend_from_slice(&DATAGRAM_MAGIC);
        b.push(DATAGRAM_VERSION);
        b.push(DATAGRAM_KIND_STREAM);
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.id.to_be_bytes());
        b.extend_from_slice(&self.seq.to_be_bytes());
        b.extend_from_slice(&self.ack.to_be_bytes());
        b.extend_from_slice(self.payload);
        b
    }
}

/// What [`Link::receive`] made of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Received {
    /// New bytes were taken (in order or kept for later), or a new acknowledgement.
    Taken,
    /// Nothing new: a duplicate (acknowledged again) or a pure acknowledgement of
    /// nothing new.
    Duplicate,
    /// Dropped: it acknowledges bytes never sent, or its bytes lie outside the receive
    /// window or the reassembly budget (counted by the caller).
    Dropped,
}

/// One end of a handshake's reliable byte stream over datagrams, without I/O: bytes in
/// ([`Link::push`]), datagrams out ([`Link::poll_transmit`] fills [`Link::outbox`]),
/// datagrams in ([`Link::receive`]), time passed in by the caller.
#[derive(Debug)]
pub(crate) struct Link {
    /// The handshake id every datagram carries.
    pub(crate) id: u64,
    /// First unacknowledged offset of this end's stream.
    snd_una: u32,
    /// This end's bytes from `snd_una` on (sent or not).
    unacked: Vec<u8>,
    /// First offset never sent since the last go-back-N.
    snd_nxt: u32,
    rto: Duration,
    /// When the unacknowledged bytes are sent again (`None`: nothing in flight).
    rto_at: Option<Instant>,
    /// Retransmissions in a row without a new acknowledgement.
    tries: u32,
    /// Next offset expected from the peer.
    rcv_nxt: u32,
    /// Out-of-order bytes kept: (offset, bytes), sorted by offset, none overlapping.
    ooo: Vec<(u32, Vec<u8>)>,
    ooo_bytes: usize,
    /// An acknowledgement is owed to the peer.
    ack_due: bool,
    /// The peer sent a duplicate: resend the first unacknowledged datagram.
    resend_first: bool,
    /// Bytes were delivered since [`Link::take_fresh`].
    fresh: bool,
    /// Datagrams to send, oldest first.
    pub(crate) outbox: Vec<Vec<u8>>,
    /// Datagrams sent again (by the timer or for a duplicate).
    pub(crate) retransmitted: u64,
}

impl Link {
    /// A link of handshake `id` with nothing sent or received.
    pub(crate) fn new(id: u64) -> Link {
        Link {
            id,
            snd_una: 0,
            unacked: Vec::new(),
            snd_nxt: 0,
            rto: SETUP_RTO_INITIAL,
            rto_at: None,
            tries: 0,
            rcv_nxt: 0,
            ooo: Vec::new(),
            ooo_bytes: 0,
            ack_due: false,
            resend_first: false,
            fresh: false,
            outbox: Vec::new(),
            retransmitted: 0,
        }
    }

    /// Queues `bytes` on this end's stream.
    ///
    /// # Errors
    /// [`BootstrapError::BadField`] when the stream would pass 4 GiB (never for a
    /// handshake, whose messages are bounded).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<(), BootstrapError> {
        let end = self.unacked.len() + bytes.len();
        if u32::try_from(end)
            .ok()
            .and_then(|e| self.snd_una.checked_add(e))
            .is_none()
        {
            return Err(BootstrapError::BadField("set-up stream length"));
        }
        self.unacked.extend_from_slice(bytes);
        Ok(())
    }

    /// Whether the peer acknowledged every byte this end queued.
    pub(crate) fn all_acked(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Out-of-order bytes kept now.
    #[cfg(test)]
    pub(crate) fn ooo_bytes(&self) -> usize {
        self.ooo_bytes
    }

    /// Whether bytes were delivered since the last call (and clears it).
    pub(crate) fn take_fresh(&mut self) -> bool {
        std::mem::take(&mut self.fresh)
    }

    fn end(&self) -> u32 {
        // push keeps snd_una + unacked.len() within u32.
        self.snd_una + self.unacked.len() as u32
    }

    /// Takes datagram `d` at `now`: its acknowledgement first, then its bytes. In-order
    /// bytes are appended to `inb` while it holds fewer than `max_inb` bytes; bytes
    /// ahead of a gap are kept when `keep_out_of_order` and `budget` (bytes the caller
    /// still lets this link keep, reduced by what it keeps, given back as it drains)
    /// allow and they end within the window (`rcv_nxt + max_inb - inb.len()`).
    pub(crate) fn receive(
        &mut self,
        d: &Datagram<'_>,
        now: Instant,
        inb: &mut Vec<u8>,
        max_inb: usize,
        keep_out_of_order: bool,
        budget: &mut usize,
    ) -> Received {
        let end = self.end();
        if d.ack > end {
            return Received::Dropped;
        }
        let mut news = false;
        if d.ack > self.snd_una {
            let n = (d.ack - self.snd_una) as usize;
            self.unacked.drain(..n);
            self.snd_una = d.ack;
            self.snd_nxt = self.snd_nxt.max(self.snd_una);
            // In recovery (the timer fired) an acknowledgement that leaves sent bytes
            // unacknowledged means the next datagram was lost too: send it at once.
            if self.tries > 0 && self.snd_nxt > self.snd_una {
                self.resend_first = true;
            }
            self.tries = 0;
            self.rto = SETUP_RTO_INITIAL;
            self.rto_at = (!self.unacked.is_empty()).then(|| now + self.rto);
            news = true;
        }
        if d.payload.is_empty() {
            return if news {
                Received::Taken
            } else {
                Received::Duplicate
            };
        }
        // Parse checked seq + len within u32.
        let seg_end = d.seq + d.payload.len() as u32;
        if seg_end <= self.rcv_nxt {
            // The peer did not hear this end's acknowledgement (or its bytes): say it
            // again, and send the first unacknowledged bytes again unless the peer just
            // acknowledged something new.
            self.ack_due = true;
            if !news {
                self.resend_first = true;
            }
            return if news {
                Received::Taken
            } else {
                Received::Duplicate
            };
        }
        let room = max_inb.saturating_sub(inb.len());
        if d.seq <= self.rcv_nxt {
            let skip = (self.rcv_nxt - d.seq) as usize;
            let take = (d.payload.len() - skip).min(room);
            inb.extend_from_slice(&d.payload[skip..skip + take]);
            self.rcv_nxt += take as u32;
            self.drain_ooo(inb, max_inb, budget);
            self.ack_due = true;
            self.fresh = true;
            return Received::Taken;
        }
        // Ahead of a gap.
        let window_end = u64::from(self.rcv_nxt) + room as u64;
        let len = d.payload.len();
        if !keep_out_of_order || u64::from(seg_end) > window_end || *budget < len {
            return if news {
                Received::Taken
            } else {
                Received::Dropped
            };
        }
        let pos = self.ooo.partition_point(|(s, _)| *s < d.seq);
        let overlaps_prev = pos > 0 && {
            let (s, b) = &self.ooo[pos - 1];
            *s as usize + b.len() > d.seq as usize
        };
        let overlaps_next = self.ooo.get(pos).is_some_and(|(s, _)| *s < seg_end);
        self.ack_due = true;
        if overlaps_prev || overlaps_next {
            // A duplicate of kept bytes (the sender cuts its stream at the same
            // offsets every time).
            return if news {
                Received::Taken
            } else {
                Received::Duplicate
            };
        }
        self.ooo.insert(pos, (d.seq, d.payload.to_vec()));
        self.ooo_bytes += len;
        *budget -= len;
        Received::Taken
    }

    /// Moves kept bytes that now follow `rcv_nxt` into `inb`.
    fn drain_ooo(&mut self, inb: &mut Vec<u8>, max_inb: usize, budget: &mut usize) {
        while let Some((s, b)) = self.ooo.first() {
            if *s > self.rcv_nxt {
                break;
            }
            let end = *s as usize + b.len();
            if end > self.rcv_nxt as usize {
                let skip = (self.rcv_nxt - *s) as usize;
                let take = (b.len() - skip).min(max_inb.saturating_sub(inb.len()));
                if take < b.len() - skip {
                    // No room: keep it for later.
                    inb.extend_from_slice(&b[skip..skip + take]);
                    self.rcv_nxt += take as u32;
                    break;
                }
                inb.extend_from_slice(&b[skip..]);
                self.rcv_nxt = end as u32;
            }
            let (_, b) = self.ooo.remove(0);
            self.ooo_bytes -= b.len();
            *budget += b.len();
        }
    }

    /// Gives the kept out-of-order bytes back to `budget` (the link is dropped).
    pub(crate) fn release(&mut self, budget: &mut usize) {
        *budget += self.ooo_bytes;
        self.ooo.clear();
        self.ooo_bytes = 0;
    }

    fn datagram(&self, seq: u32, payload: &[u8]) -> Vec<u8> {
        Datagram {
            id: self.id,
            seq,
            ack: self.rcv_nxt,
            payload,
        }
        .encode()
    }

    /// The unacknowledged bytes from offset `from` on, at most one datagram's worth.
    fn chunk(&self, from: u32) -> &[u8] {
        let i = (from - self.snd_una) as usize;
        let n = (self.unacked.len() - i).min(MAX_SETUP_PAYLOAD_BYTES);
        &self.unacked[i..i + n]
    }

    /// Puts what is due at `now` in [`Link::outbox`]: with `timer` and the
    /// retransmission timeout past, or after a duplicate from the peer, or a partial
    /// acknowledgement in recovery, the first unacknowledged datagram again (the peer
    /// keeps what came after a gap); bytes never sent; an acknowledgement owed (on a
    /// datagram with bytes when there is one).
    ///
    /// # Errors
    /// [`BootstrapError::TimedOut`] when the timeout expires with
    /// [`MAX_SETUP_RETRANSMITS`] retransmissions in a row already spent.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        timer: bool,
    ) -> Result<(), BootstrapError> {
        let mut resent = false;
        if timer
            && !self.unacked.is_empty()
            && self.rto_at.is_some_and(|t| now >= t)
            && self.snd_nxt > self.snd_una
        {
            if self.tries >= MAX_SETUP_RETRANSMITS {
                return Err(BootstrapError::TimedOut {
                    what: "retransmission",
                });
            }
            self.tries += 1;
            self.rto = (self.rto * 2).min(SETUP_RTO_MAX);
            self.rto_at = Some(now + self.rto);
            self.resend_first = true;
        }
        if std::mem::take(&mut self.resend_first) && self.snd_nxt > self.snd_una {
            let c = self.chunk(self.snd_una);
            let n = c.len().min((self.snd_nxt - self.snd_una) as usize);
            let d = self.datagram(self.snd_una, &c[..n]);
            self.outbox.push(d);
            self.retransmitted += 1;
            resent = true;
        }
        let end = self.end();
        let mut sent_new = false;
        while self.snd_nxt < end {
            let at = self.snd_nxt;
            let c = self.chunk(at);
            let n = c.len();
            let d = self.datagram(at, c);
            self.outbox.push(d);
            self.snd_nxt += n as u32;
            sent_new = true;
        }
        if sent_new && self.rto_at.is_none() {
            self.rto_at = Some(now + self.rto);
        }
        if std::mem::take(&mut self.ack_due) && !resent && !sent_new {
            let d = self.datagram(self.snd_nxt, &[]);
            self.outbox.push(d);
        }
        Ok(())
    }

    /// When [`Link::poll_transmit`] has something to send on its timer (`None`: nothing
    /// in flight).
    #[cfg(test)]
    pub(crate) fn rto_at(&self) -> Option<Instant> {
        self.rto_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = 1 << 20;

    fn d(b: &[u8]) -> Datagram<'_> {
        Datagram::parse(b).expect("a set-up datagram")
    }

    #[test]
    fn a_datagram_round_trips_and_every_bad_header_is_refused() {
        let x = Datagram {
            id: 0x0102_0304_0506_0708,
            seq: 9,
            ack: 10,
            payload: b"abc",
        };
        let b = x.encode();
        assert_eq!(
            b,
            [
                b"MRCU".as_slice(),
                &[1, 1, 0, 0],
                &[1, 2, 3, 4, 5, 6, 7, 8],
                &[0, 0, 0, 9],
                &[0, 0, 0, 10],
                b"abc"
            ]
            .concat()
        );
        assert_eq!(Datagram::parse(&b), Some(x));
        let bad = |i: usize, v: u8| {
            let mut c = b.clone();
            c[i] = v;
            Datagram::parse(&c).is_some()
        };
        assert!(!bad(0, b'X'));
        assert!(!bad(4, 2));
        assert!(!bad(5, 2));
        assert!(!bad(7, 1));
        assert_eq!(Datagram::parse(&b[..23]), None);
        let long = vec![0u8; MAX_SETUP_PAYLOAD_BYTES + 1];
        let mut c = Datagram {
            payload: &long,
            ..x
        }
        .encode();
        assert_eq!(c.len(), MAX_SETUP_DATAGRAM_BYTES + 1);
        assert_eq!(Datagram::parse(&c), None);
        c.pop();
        assert!(Datagram::parse(&c).is_some());
        // seq + len past 32 bits.
        let w = Datagram {
            seq: u32::MAX - 1,
            ..x
        }
        .encode();
        assert_eq!(Datagram::parse(&w), None);
    }

    /// `n` stream bytes: 0, 1, 2, ... modulo 251.
    fn stream(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_message_is_cut_into_1200_byte_datagrams_and_reassembled_out_of_order() {
        let t0 = Instant::now();
        let mut a = Link::new(7);
        let mut b = Link::new(7);
        let msg = stream(3000);
        a.push(&msg).unwrap();
        a.poll_transmit(t0, true).unwrap();
        let out = std::mem::take(&mut a.outbox);
        assert_eq!(out.len(), 3);
        let lens: Vec<usize> = out.iter().map(|x| d(x).payload.len()).collect();
        assert_eq!(lens, [1200, 1200, 600]);
        let seqs: Vec<u32> = out.iter().map(|x| d(x).seq).collect();
        assert_eq!(seqs, [0, 1200, 2400]);
        let (mut inb, mut budget) = (Vec::new(), 5000usize);
        // Third, first, second.
        assert_eq!(
            b.receive(&d(&out[2]), t0, &mut inb, BIG, true, &mut budget),
            Received::Taken
        );
        assert_eq!((inb.len(), budget, b.ooo_bytes()), (0, 4400, 600));
        assert_eq!(
            b.receive(&d(&out[0]), t0, &mut inb, BIG, true, &mut budget),
            Received::Taken
        );
        assert_eq!(inb.len(), 1200);
        assert_eq!(
            b.receive(&d(&out[1]), t0, &mut inb, BIG, true, &mut budget),
            Received::Taken
        );
        assert_eq!(inb, msg);
        assert_eq!((budget, b.ooo_bytes()), (5000, 0));
        // b owes one acknowledgement: a pure one, acking everything.
        b.poll_transmit(t0, true).unwrap();
        let acks = std::mem::take(&mut b.outbox);
        assert_eq!(acks.len(), 1);
        assert_eq!(
            d(&acks[0]),
            Datagram {
                id: 7,
                seq: 0,
                ack: 3000,
                payload: &[]
            }
        );
        let mut none = Vec::new();
        assert_eq!(
            a.receive(&d(&acks[0]), t0, &mut none, BIG, true, &mut budget),
            Received::Taken
        );
        assert!(a.all_acked());
        assert_eq!(a.rto_at(), None);
        // A pure acknowledgement is never acknowledged.
        a.poll_transmit(t0, true).unwrap();
        assert!(a.outbox.is_empty());
    }

    #[test]
    fn a_lost_datagram_is_sent_again_after_the_timeout_and_a_duplicate_is_ignored() {
        let t0 = Instant::now();
        let mut a = Link::new(1);
        let mut b = Link::new(1);
        a.push(&stream(2000)).unwrap();
        a.poll_transmit(t0, true).unwrap();
        let first = std::mem::take(&mut a.outbox);
        assert_eq!(first.len(), 2);
        assert_eq!(a.rto_at(), Some(t0 + SETUP_RTO_INITIAL));
        // The first is lost; the second is kept out of order.
        let (mut inb, mut budget) = (Vec::new(), BIG);
        b.receive(&d(&first[1]), t0, &mut inb, BIG, true, &mut budget);
        assert!(inb.is_empty());
        // Nothing before the timeout.
        a.poll_transmit(t0 + Duration::from_millis(24), true)
            .unwrap();
        assert!(a.outbox.is_empty());
        let t1 = t0 + SETUP_RTO_INITIAL;
        a.poll_transmit(t1, true).unwrap();
        let again = std::mem::take(&mut a.outbox);
        assert_eq!(again, first[..1], "the first, the same bytes");
        assert_eq!(a.retransmitted, 1);
        assert_eq!(a.rto_at(), Some(t1 + Duration::from_millis(50)));
        assert_eq!(
            b.receive(&d(&again[0]), t1, &mut inb, BIG, true, &mut budget),
            Received::Taken
        );
        assert_eq!(inb, stream(2000));
        // The second again: a duplicate, ignored, acknowledged again.
        assert_eq!(
            b.receive(&d(&first[1]), t1, &mut inb, BIG, true, &mut budget),
            Received::Duplicate
        );
        assert_eq!(inb, stream(2000));
        b.poll_transmit(t1, true).unwrap();
        assert_eq!(b.outbox.len(), 1);
        assert_eq!(d(&b.outbox[0]).ack, 2000);
    }

    #[test]
    fn retransmissions_stop_after_the_bound_and_fail_as_timed_out() {
        let t0 = Instant::now();
        let mut a = Link::new(1);
        a.push(b"MRCN").unwrap();
        a.poll_transmit(t0, true).unwrap();
        a.outbox.clear();
        let mut t = t0;
        let mut gaps = Vec::new();
        for _ in 0..MAX_SETUP_RETRANSMITS {
            let due = a.rto_at().unwrap();
            gaps.push((due - t).as_millis());
            t = due;
            a.poll_transmit(t, true).unwrap();
            assert_eq!(a.outbox.len(), 1);
            a.outbox.clear();
        }
        assert_eq!(gaps, [25, 50, 100, 200, 200, 200, 200, 200, 200, 200]);
        assert_eq!((t - t0).as_millis(), 1575);
        let due = a.rto_at().unwrap();
        assert!(matches!(
            a.poll_transmit(due, true),
            Err(BootstrapError::TimedOut {
                what: "retransmission"
            })
        ));
        // Without the timer nothing is ever sent again.
        let mut q = Link::new(2);
        q.push(b"MRCN").unwrap();
        q.poll_transmit(t0, false).unwrap();
        q.outbox.clear();
        q.poll_transmit(t0 + Duration::from_secs(60), false)
            .unwrap();
        assert!(q.outbox.is_empty());
    }

    #[test]
    fn hostile_datagrams_are_dropped_without_changing_state() {
        let t0 = Instant::now();
        let mut b = Link::new(3);
        b.push(b"0123456789").unwrap();
        b.poll_transmit(t0, true).unwrap();
        b.outbox.clear();
        let (mut inb, mut budget) = (Vec::new(), 100usize);
        // An acknowledgement of bytes never sent.
        let x = Datagram {
            id: 3,
            seq: 0,
            ack: 11,
            payload: b"hi",
        }
        .encode();
        assert_eq!(
            b.receive(&d(&x), t0, &mut inb, BIG, true, &mut budget),
            Received::Dropped
        );
        assert!(inb.is_empty());
        assert!(!b.all_acked());
        // Ahead of a gap without out-of-order keeping (a peer that proved nothing).
        let y = Datagram {
            id: 3,
            seq: 5,
            ack: 0,
            payload: b"late",
        }
        .encode();
        assert_eq!(
            b.receive(&d(&y), t0, &mut inb, BIG, false, &mut budget),
            Received::Dropped
        );
        // Beyond the budget, and beyond the window.
        assert_eq!(
            b.receive(&d(&y), t0, &mut inb, BIG, true, &mut 3),
            Received::Dropped
        );
        assert_eq!(
            b.receive(&d(&y), t0, &mut inb, 8, true, &mut budget),
            Received::Dropped
        );
        assert_eq!((b.ooo_bytes(), budget), (0, 100));
        // In order bytes stop at max_inb.
        let z = Datagram {
            id: 3,
            seq: 0,
            ack: 0,
            payload: b"abcdef",
        }
        .encode();
        assert_eq!(
            b.receive(&d(&z), t0, &mut inb, 4, true, &mut budget),
            Received::Taken
        );
        assert_eq!(inb, b"abcd");
    }
}
