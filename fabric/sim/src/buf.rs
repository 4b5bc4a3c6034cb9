//! A frame as the simulator stores it: the headers a switch reads and rewrites, inline and
//! writable, beside the UDP payload, shared and never written in place (a NIC's
//! scatter-gather list of a header buffer and a payload buffer).
//!
//! ```text
//!   head (inline, up to HEAD_INLINE_BYTES)           payload (Bytes, reference counted)
//!   | Ethernet | IPv6 | SRH? | UDP |    +    | BTH | MRCETH | ... | data ... |
//!   0                         payload_off
//! ```
//!
//! Every hop's work (forwarding, SRv6 End, uSID shift, ECN CE, trimming) touches the head
//! only, so a frame's hops cost the same whatever its size, and a payload sent many times
//! (a registered buffer posted again and again) is stored once and shared. A transport
//! datagram is copied once into a payload buffer the slab recycles, as the frame buffers of
//! a NIC's ring are. The logical frame is always `head` followed by `payload`; a frame that
//! does not parse as IPv6 / (SRH) / UDP keeps all its bytes in `head`.

use bytes::Bytes;
use smallvec::SmallVec;

use super::frame;
use mrc_frame::packet::checksum::PayloadSum;

/// Header bytes kept inline: Ethernet 14 + IPv6 40 + an SRH of two segments (40) + UDP 8
/// = 102 fit (the simulator's SRv6 routes: spine, destination); longer headers spill to
/// the heap. No more: the slab slot holding a frame is 216 bytes with 104 inline, and a
/// smaller slab stays in cache.
pub const HEAD_INLINE_BYTES: usize = 104;

// The simulator's SRv6 headers (two segments) stay inline.
const _: () = assert!(14 + 40 + (8 + 2 * 16) + 8 <= HEAD_INLINE_BYTES);

/// The headers of a frame, inline up to [`HEAD_INLINE_BYTES`].
pub type Head = SmallVec<[u8; HEAD_INLINE_BYTES]>;

/// The payload of a frame: bytes of its own, in a buffer the simulator's slab recycles
/// (a transport datagram, copied once), or bytes shared with other frames (a payload
/// posted many times).
#[derive(Clone, Debug)]
enum Payload {
    /// Owned; the buffer's capacity is kept when the frame is released.
    Owned(Vec<u8>),
    /// Shared, reference counted; copied before any write.
    Shared(Bytes),
}

impl Default for Payload {
    fn default() -> Self {
        Payload::Owned(Vec::new())
    }
}

impl Payload {
    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::Shared(b) => b,
        }
    }

    /// The bytes, owned (a shared payload is copied first).
    fn make_owned(&mut self) -> &mut Vec<u8> {
        if let Payload::Shared(b) = self {
            *self = Payload::Owned(b.to_vec());
        }
        match self {
            Payload::Owned(v) => v,
            Payload::Shared(_) => unreachable!("made owned above"),
        }
    }

    /// Replaces the bytes by a copy of `bytes`, in the owned buffer when there is one.
    fn copy_from(&mut self, bytes: &[u8]) {
        match self {
            Payload::Owned(v) => {
                v.clear();
                v.extend_from_slice(bytes);
            }
            Payload::Shared(_) => *self = Payload::Owned(bytes.to_vec()),
        }
    }
}

/// A frame: `head` then `payload` (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct FrameBuf {
    head: Head,
    payload: Payload,
}

impl PartialEq for FrameBuf {
    fn eq(&self, other: &Self) -> bool {
        self.head == other.head && self.payload() == other.payload()
    }
}

impl Eq for FrameBuf {}

impl FrameBuf {
    /// The frame `bytes`, cut where its UDP payload starts ([`frame::inspect`]); all in the
    /// head when it does not parse that far.
    pub fn from_vec(mut bytes: Vec<u8>) -> FrameBuf {
        let split = payload_split(&bytes);
        let head = Head::from_slice(&bytes[..split]);
        bytes.drain(..split);
        FrameBuf {
            head,
            payload: Payload::Owned(bytes),
        }
    }

    /// Replaces this frame by a copy of `bytes` (keeping the head's and the owned
    /// payload's buffers).
    pub fn copy_from_slice(&mut self, bytes: &[u8]) {
        let (head, payload) = bytes.split_at(payload_split(bytes));
        self.head.clear();
        self.head.extend_from_slice(head);
        self.payload.copy_from(payload);
    }

    /// Replaces this frame by `head` then a copy of `payload` (in the owned payload
    /// buffer when there is one).
    pub fn set_copy(&mut self, head: &[u8], payload: &[u8]) {
        self.head.clear();
        self.head.extend_from_slice(head);
        self.payload.copy_from(payload);
    }

    /// Replaces the payload by a copy of `payload`, in the owned buffer when there is one
    /// (the head stays).
    pub fn set_payload_copy(&mut self, payload: &[u8]) {
        self.payload.copy_from(payload);
    }

    /// Replaces the payload by shared bytes (the head stays).
    pub fn set_payload_shared(&mut self, payload: Bytes) {
        self.payload = Payload::Shared(payload);
    }

    /// Empties the payload: an owned buffer keeps its capacity for the slot's next frame,
    /// a shared one is let go (its last reference frees it).
    pub fn clear_payload(&mut self) {
        match &mut self.payload {
            Payload::Owned(v) => v.clear(),
            Payload::Shared(_) => self.payload = Payload::default(),
        }
    }

    /// The head, to be rewritten in place ([`FrameBuf::set_copy`] replaces the whole
    /// frame).
    pub fn head_mut(&mut self) -> &mut Head {
        &mut self.head
    }

    /// Length of the frame, bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.payload().len()
    }

    /// Whether the frame has no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The headers (everything, for a frame that does not parse as IPv6 / UDP).
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The UDP payload (and any padding after it).
    pub fn payload(&self) -> &[u8] {
        self.payload.as_slice()
    }

    /// The frame's bytes in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.head);
        v.extend_from_slice(self.payload());
        v
    }

    /// Flips the bits `mask` of byte `i` of the frame (a corruption); a shared payload is
    /// copied first. A flip in the headers that moves where the UDP payload starts (or
    /// makes the frame parse, or no longer parse, that far) re-cuts the frame there, so
    /// that it stays cut as [`FrameBuf::from_vec`] cuts its bytes. Returns `false`
    /// (nothing changed) for `i` beyond the frame.
    pub fn flip(&mut self, i: usize, mask: u8) -> bool {
        if let Some(b) = self.head.get_mut(i) {
            *b ^= mask;
            self.recut();
            return true;
        }
        let j = i - self.head.len();
        if j >= self.payload().len() {
            return false;
        }
        self.payload.make_owned()[j] ^= mask;
        true
    }

    /// Cuts the frame again where its UDP payload now starts, after a byte of the head
    /// changed. The fields that say where (EtherType, version, next headers, SRH length)
    /// lie before the UDP header, so a head that still parses as ending there is cut right.
    fn recut(&mut self) {
        let cut_right = if self.payload().is_empty() {
            payload_split(&self.head) == self.head.len()
        } else {
            frame::inspect(&self.head).is_some_and(|i| i.payload_off() == self.head.len())
        };
        if !cut_right {
            let bytes = self.to_vec();
            self.copy_from_slice(&bytes);
        }
    }
}

/// Where `bytes` is cut: at its UDP payload when the headers parse and fit, else its end.
fn payload_split(bytes: &[u8]) -> usize {
    frame::inspect(bytes)
        .map(|i| i.payload_off())
        .filter(|&off| off <= bytes.len())
        .unwrap_or(bytes.len())
}

/// A datagram payload sent many times: its bytes, shared by every frame that carries them,
/// and their checksum partial sum ([`PayloadSum`]), computed once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedPayload {
    bytes: Bytes,
    sum: PayloadSum,
}

impl SharedPayload {
    /// `bytes`, summed once.
    pub fn new(bytes: Bytes) -> SharedPayload {
        let sum = PayloadSum::of(&bytes);
        SharedPayload { bytes, sum }
    }

    /// The payload bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Their partial sum.
    pub fn sum(&self) -> &PayloadSum {
        &self.sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain frame: Ethernet 14 + IPv6 40 + UDP 8 headers, then `payload`.
    fn plain(payload: &[u8]) -> Vec<u8> {
        let repr = mrc_frame::packet::EthernetFrameRepr {
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
            packet: mrc_frame::packet::Ipv6UdpRepr {
                src_addr: "2001:db8::1".parse().expect("address"),
                dst_addr: "2001:db8::2".parse().expect("address"),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
                srh: None,
                src_port: 49152,
                dst_port: 4792,
            },
        };
        let mut v = vec![0u8; repr.buffer_len(payload.len())];
        repr.emit(&mut v, payload).expect("fits");
        v
    }

    #[test]
    fn a_frame_is_cut_at_its_udp_payload_and_comes_back_whole() {
        let bytes = plain(b"0123456789");
        let f = FrameBuf::from_vec(bytes.clone());
        assert_eq!(f.head().len(), 62);
        assert_eq!(f.payload(), b"0123456789");
        assert_eq!(f.len(), 72);
        assert_eq!(f.to_vec(), bytes);
        let mut g = FrameBuf::default();
        g.copy_from_slice(&bytes);
        assert_eq!(g, f);
        // Not IPv6: all in the head.
        let h = FrameBuf::from_vec(vec![7u8; 20]);
        assert_eq!((h.head().len(), h.payload().len()), (20, 0));
        // Cut inside the UDP header: all in the head.
        let t = FrameBuf::from_vec(bytes[..60].to_vec());
        assert_eq!((t.head().len(), t.payload().len()), (60, 0));
    }

    #[test]
    fn a_flip_in_a_shared_payload_copies_it_first() {
        let bytes = plain(b"abcd");
        let mut f = FrameBuf::default();
        f.set_copy(&bytes[..62], b"");
        f.set_payload_shared(Bytes::from_static(b"abcd"));
        assert_eq!(f.to_vec(), bytes);
        let mut g = f.clone();
        assert!(g.flip(62, 0x01));
        assert!(g.flip(15, 0x30));
        assert!(!g.flip(66, 0x01));
        assert_eq!(g.payload(), b"`bcd");
        assert_eq!(g.head()[15], bytes[15] ^ 0x30);
        // The original still holds its bytes.
        assert_eq!(f.to_vec(), bytes);
    }
}
