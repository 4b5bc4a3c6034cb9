//! Optional per-packet authentication, in the spirit of Ultra Ethernet's transport security
//! sublayer (TSS): every datagram of a QP carries a trailer with a packet number and an
//! AES-256-GCM tag over the whole datagram. A receiver checks the tag and a replay window
//! **before** anything of the datagram is parsed or acted on: a datagram with a bad tag, a
//! replayed one, or one too old for the window is dropped and counted
//! ([`crate::stats::DropReason::AuthFailed`], [`crate::stats::DropReason::Replayed`]).
//!
//! ```text
//!  +---------------------------+------------------------+----------------------------+
//!  | mrc packet (BTH, MRCETH,  | packet number (64, BE) | AES-256-GCM tag (128)      |
//!  | body), unchanged          | per direction, from 0  | AAD = packet + number      |
//!  +---------------------------+------------------------+----------------------------+
//! ```
//!
//! - The tag is GMAC: AES-256-GCM with the packet and the packet number as associated data
//!   and no plaintext (the payload is authenticated, not encrypted: placement needs no
//!   secrecy, and an on-path observer learns nothing it could not count anyway). The
//!   96-bit GCM nonce is 4 zero bytes and the packet number, big-endian; each direction
//!   has its own key, so a nonce never repeats under a key (a retransmission is a new
//!   packet with a new number).
//! - Keys come from a pre-shared key and two 32-byte nonces exchanged at setup (one from
//!   each end, fresh per connection): HKDF-SHA256 (RFC 5869) with the PSK as input keying
//!   material, `initiator nonce || responder nonce` as salt, and the info
//!   `mrc v1 initiator->responder` or `mrc v1 responder->initiator`. A recorded connection's
//!   packets are useless against a later one (new nonces, new keys).
//! - Replay: a sliding window of [`REPLAY_WINDOW_PACKETS`] packet numbers below the
//!   highest accepted (RFC 4303 section 3.4.3; RFC 6479's bitmap), wide enough for the
//!   reordering of a sprayed connection. A number is marked only after its tag checks, so
//!   a forger cannot burn numbers.
//!
//! The transport stays sans-IO: the nonces and the PSK come from the caller
//! ([`AuthKeys::derive`]); nothing here reads a clock or a random source.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Key, Nonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;

/// Bytes the trailer adds to every datagram: packet number 8 + tag 16.
pub const AUTH_TRAILER_BYTES: usize = PN_BYTES + TAG_BYTES;

/// Bytes of each end's setup nonce.
pub const AUTH_NONCE_BYTES: usize = 32;

/// Shortest pre-shared key accepted, bytes (128 bits of key material).
pub const MIN_PSK_BYTES: usize = 16;

/// Width of the replay window in packet numbers (a power of two, a multiple of 64).
pub const REPLAY_WINDOW_PACKETS: u64 = 8192;

const TAG_BYTES: usize = 16;
const PN_BYTES: usize = 8;

/// Why keys could not be derived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthKeyError {
    /// The pre-shared key is shorter than [`MIN_PSK_BYTES`].
    #[error("pre-shared key of {0} bytes is too short (at least {MIN_PSK_BYTES})")]
    PskTooShort(usize),
    /// Both ends sent the same nonce (a reflected or replayed setup).
    #[error("both ends' setup nonces are equal")]
    EqualNonces,
}

/// Why a datagram was refused ([`Authenticator::open`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthDrop {
    /// Shorter than the trailer, or the tag does not check.
    BadTag,
    /// Its packet number was already accepted, or is older than the window.
    Replayed,
}

/// The two directions' keys of one connection.
#[derive(Clone)]
pub struct AuthKeys {
    tx: Aes256Gcm,
    rx: Aes256Gcm,
}

impl std::fmt::Debug for AuthKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKeys { .. }")
    }
}

impl AuthKeys {
    /// Derives this end's keys from the pre-shared key `psk` and both ends' setup nonces;
    /// `initiator` says whether this end is the one that connected (its nonce comes first
    /// in the salt).
    ///
    /// # Errors
    /// [`AuthKeyError`]: a PSK under [`MIN_PSK_BYTES`], or equal nonces.
    pub fn derive(
        psk: &[u8],
        initiator_nonce: &[u8; AUTH_NONCE_BYTES],
        responder_nonce: &[u8; AUTH_NONCE_BYTES],
        initiator: bool,
    ) -> Result<Self, AuthKeyError> {
        if psk.len() < MIN_PSK_BYTES {
            return Err(AuthKeyError::PskTooShort(psk.len()));
        }
        if initiator_nonce == responder_nonce {
            return Err(AuthKeyError::EqualNonces);
        }
        let mut salt = [0u8; 2 * AUTH_NONCE_BYTES];
        salt[..AUTH_NONCE_BYTES].copy_from_slice(initiator_nonce);
        salt[AUTH_NONCE_BYTES..].copy_from_slice(responder_nonce);
        let hk = Hkdf::<Sha256>::new(Some(&salt), psk);
        let key = |info: &[u8]| {
            let mut k = [0u8; 32];
            // 32 bytes is far below HKDF-SHA256's limit of 255 x 32: cannot fail
            hk.expand(info, &mut k)
                .map(|()| Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&k)))
        };
        let (i2r, r2i) = match (
            key(b"mrc v1 initiator->responder"),
            key(b"mrc v1 responder->initiator"),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Err(AuthKeyError::PskTooShort(psk.len())),
        };
        Ok(if initiator {
            AuthKeys { tx: i2r, rx: r2i }
        } else {
            AuthKeys { tx: r2i, rx: i2r }
        })
    }
}

/// Sliding replay window over 64-bit packet numbers (RFC 4303 section 3.4.3).
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// One past the highest number accepted (0: none yet).
    top: u64,
    bits: Vec<u64>,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            top: 0,
            bits: vec![0; (REPLAY_WINDOW_PACKETS / 64) as usize],
        }
    }
}

impl ReplayWindow {
    fn slot(pn: u64) -> (usize, u64) {
        let i = pn % REPLAY_WINDOW_PACKETS;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Whether `pn` may be accepted: above everything seen, or inside the window and not
    /// seen yet.
    pub fn check(&self, pn: u64) -> bool {
        if pn >= self.top {
            return true;
        }
        if self.top - pn > REPLAY_WINDOW_PACKETS {
            return false;
        }
        let (w, b) = Self::slot(pn);
        self.bits.get(w).is_some_and(|x| x & b == 0)
    }

    /// Marks `pn` seen (after [`ReplayWindow::check`] and the tag passed), sliding the
    /// window up if it is the highest.
    pub fn mark(&mut self, pn: u64) {
        if pn >= self.top {
            let shift = pn + 1 - self.top;
            if shift >= REPLAY_WINDOW_PACKETS {
                self.bits.iter_mut().for_each(|x| *x = 0);
            } else {
                // clear the slots of the numbers that enter the window
                for q in self.top..=pn {
                    let (w, b) = Self::slot(q);
                    if let Some(x) = self.bits.get_mut(w) {
                        *x &= !b;
                    }
                }
            }
            self.top = pn + 1;
        }
        let (w, b) = Self::slot(pn);
        if let Some(x) = self.bits.get_mut(w) {
            *x |= b;
        }
    }
}

/// One connection's sealing and opening state: its keys, the next packet number to send,
/// the replay window of the peer's numbers.
#[derive(Clone, Debug)]
pub struct Authenticator {
    keys: AuthKeys,
    next_pn: u64,
    replay: ReplayWindow,
}

fn nonce(pn: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&pn.to_be_bytes());
    n
}

impl Authenticator {
    /// Fresh state for `keys` (numbers from 0 both ways).
    pub fn new(keys: AuthKeys) -> Self {
        Authenticator {
            keys,
            next_pn: 0,
            replay: ReplayWindow::default(),
        }
    }

    /// Appends the trailer to the `len`-byte packet at the start of `buf`; returns the
    /// datagram's length, or `None` (nothing written, no number used) when `buf` has no
    /// room for [`AUTH_TRAILER_BYTES`] more or the numbers ran out.
    pub fn seal(&mut self, buf: &mut [u8], len: usize) -> Option<usize> {
        let end = len.checked_add(AUTH_TRAILER_BYTES)?;
        if end > buf.len() || self.next_pn == u64::MAX {
            return None;
        }
        let pn = self.next_pn;
        buf[len..len + PN_BYTES].copy_from_slice(&pn.to_be_bytes());
        let tag = self
            .keys
            .tx
            .encrypt_in_place_detached(
                Nonce::from_slice(&nonce(pn)),
                &buf[..len + PN_BYTES],
                &mut [],
            )
            .ok()?;
        buf[len + PN_BYTES..end].copy_from_slice(&tag);
        self.next_pn += 1;
        Some(end)
    }

    /// Checks a received datagram's trailer: the tag, then the replay window (the number
    /// is marked only when both pass). Returns the mrc packet without the trailer.
    ///
    /// # Errors
    /// [`AuthDrop::BadTag`] (too short, or the tag does not check),
    /// [`AuthDrop::Replayed`] (number seen, or below the window).
    pub fn open<'a>(&mut self, datagram: &'a [u8]) -> Result<&'a [u8], AuthDrop> {
        let body_len = datagram
            .len()
            .checked_sub(AUTH_TRAILER_BYTES)
            .ok_or(AuthDrop::BadTag)?;
        let (aad, tag) = datagram.split_at(body_len + PN_BYTES);
        let mut pn_bytes = [0u8; PN_BYTES];
        pn_bytes.copy_from_slice(&aad[body_len..]);
        let pn = u64::from_be_bytes(pn_bytes);
        if !self.replay.check(pn) {
            return Err(AuthDrop::Replayed);
        }
        self.keys
            .rx
            .decrypt_in_place_detached(
                Nonce::from_slice(&nonce(pn)),
                aad,
                &mut [],
                Tag::from_slice(tag),
            )
            .map_err(|_| AuthDrop::BadTag)?;
        self.replay.mark(pn);
        Ok(&datagram[..body_len])
    }

    /// The packet number the next [`Authenticator::seal`] uses.
    pub fn next_packet_number(&self) -> u64 {
        self.next_pn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PSK: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn pair() -> (Authenticator, Authenticator) {
        let (ni, nr) = ([1u8; 32], [2u8; 32]);
        (
            Authenticator::new(AuthKeys::derive(PSK, &ni, &nr, true).unwrap()),
            Authenticator::new(AuthKeys::derive(PSK, &ni, &nr, false).unwrap()),
        )
    }

    #[test]
    fn sealed_datagrams_open_once_and_in_any_order() {
        let (mut a, mut b) = pair();
        let mut bufs = Vec::new();
        for i in 0..3u8 {
            let mut buf = vec![0u8; 64];
            buf[..10].fill(i);
            assert_eq!(a.seal(&mut buf, 10), Some(34));
            bufs.push(buf[..34].to_vec());
        }
        // the trailer: packet number big-endian, then 16 tag bytes
        assert_eq!(&bufs[2][10..18], &[0, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(b.open(&bufs[2]), Ok(&[2u8; 10][..]));
        assert_eq!(b.open(&bufs[0]), Ok(&[0u8; 10][..]));
        assert_eq!(b.open(&bufs[0]), Err(AuthDrop::Replayed));
        assert_eq!(b.open(&bufs[1]), Ok(&[1u8; 10][..]));
        // the other direction has its own key: a's own datagram does not open at a
        let mut back = vec![7u8; 40];
        assert_eq!(b.seal(&mut back, 16), Some(40));
        assert_eq!(a.open(&bufs[1]), Err(AuthDrop::BadTag));
        assert_eq!(a.open(&back), Ok(&[7u8; 16][..]));
    }

    #[test]
    fn any_flipped_bit_fails_the_tag_and_burns_no_number() {
        let (mut a, mut b) = pair();
        let mut buf = vec![0x5Au8; 100];
        let n = a.seal(&mut buf, 76).unwrap();
        for bit in 0..n * 8 {
            let mut bad = buf[..n].to_vec();
            bad[bit / 8] ^= 1 << (bit % 8);
            let r = b.open(&bad);
            // a flip in the packet number may name another number: still a bad tag
            assert_eq!(r, Err(AuthDrop::BadTag), "bit {bit}");
        }
        assert_eq!(b.open(&buf[..n]), Ok(&[0x5Au8; 76][..]));
        assert_eq!(b.open(&buf[..23]), Err(AuthDrop::BadTag));
    }

    #[test]
    fn the_replay_window_slides() {
        let mut w = ReplayWindow::default();
        assert!(w.check(0));
        w.mark(10_000);
        assert!(!w.check(10_000));
        // the window is [10_001 - 8192, 10_001) = [1809, 10_001)
        assert!(!w.check(1808));
        assert!(w.check(1809));
        w.mark(1809);
        assert!(!w.check(1809));
        assert!(w.check(9_999));
        // a jump past the whole window clears it: [10_002, 18_194)
        w.mark(18_193);
        assert!(!w.check(18_193));
        assert!(!w.check(10_001));
        assert!(w.check(10_002));
        // 10_000 + 8192 reuses 10_000's slot, which the slide cleared
        assert!(w.check(18_192));
        assert!(w.check(u64::MAX - 1));
    }

    #[test]
    fn keys_need_a_long_psk_and_distinct_nonces() {
        assert_eq!(
            AuthKeys::derive(b"short", &[1; 32], &[2; 32], true).unwrap_err(),
            AuthKeyError::PskTooShort(5)
        );
        assert_eq!(
            AuthKeys::derive(PSK, &[3; 32], &[3; 32], true).unwrap_err(),
            AuthKeyError::EqualNonces
        );
        // another PSK or other nonces: nothing opens
        let mut a = Authenticator::new(AuthKeys::derive(PSK, &[1; 32], &[2; 32], true).unwrap());
        let other = b"fedcba9876543210fedcba9876543210";
        let mut c = Authenticator::new(AuthKeys::derive(other, &[1; 32], &[2; 32], false).unwrap());
        let mut d = Authenticator::new(AuthKeys::derive(PSK, &[1; 32], &[9; 32], false).unwrap());
        let mut buf = vec![1u8; 64];
        let n = a.seal(&mut buf, 20).unwrap();
        assert_eq!(c.open(&buf[..n]), Err(AuthDrop::BadTag));
        assert_eq!(d.open(&buf[..n]), Err(AuthDrop::BadTag));
    }
}
