//! Fuzz `mrc_transport::auth::Authenticator::open` with hostile datagrams: arbitrary bytes,
//! and genuine sealed datagrams edited, cut, extended or replayed.
//!
//! Properties: opening never panics; a datagram opens only if it is byte-identical to one
//! sealed (and not opened before), and then yields exactly the packet that was sealed; an
//! edited, cut or extended one fails (`BadTag`) or is refused as a replay, and a refusal
//! never stops the genuine datagrams after it from opening.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mrc_transport::auth::{AUTH_TRAILER_BYTES, AuthDrop, AuthKeys, Authenticator};

#[derive(Arbitrary, Debug)]
enum Op {
    /// Seal a packet of these bytes (at least 28 are needed; shorter is refused).
    Seal(Vec<u8>),
    /// Open the `n`-th sealed datagram as sealed.
    Open(u16),
    /// Open it with one byte XORed (`at` mod its length, `x` nonzero).
    Flip { n: u16, at: u16, x: u8 },
    /// Open its first `keep` bytes.
    Cut { n: u16, keep: u16 },
    /// Open it with bytes appended.
    Extend { n: u16, tail: Vec<u8> },
    /// Open arbitrary bytes.
    Raw(Vec<u8>),
}

fuzz_target!(|ops: Vec<Op>| {
    let psk = [0x33u8; 32];
    let (ni, nr) = ([1u8; 32], [2u8; 32]);
    let mut tx = Authenticator::new(AuthKeys::derive(&psk, &ni, &nr, true).unwrap());
    let mut rx = Authenticator::new(AuthKeys::derive(&psk, &ni, &nr, false).unwrap());
    // (plain packet, sealed datagram, opened already)
    let mut sealed: Vec<(Vec<u8>, Vec<u8>, bool)> = Vec::new();
    let mut out = Vec::new();
    for op in ops.iter().take(256) {
        match op {
            Op::Seal(p) => {
                let p = &p[..p.len().min(9000)];
                let mut buf = vec![0u8; p.len() + AUTH_TRAILER_BYTES];
                buf[..p.len()].copy_from_slice(p);
                match tx.seal(&mut buf, p.len()) {
                    Some(n) => {
                        assert_eq!(n, p.len() + AUTH_TRAILER_BYTES);
                        sealed.push((p.to_vec(), buf, false));
                    }
                    None => assert!(p.len() < 28),
                }
            }
            Op::Open(n) if !sealed.is_empty() => {
                let i = usize::from(*n) % sealed.len();
                let r = rx.open(&sealed[i].1, &mut out);
                if sealed[i].2 {
                    assert_eq!(r, Err(AuthDrop::Replayed));
                } else {
                    // within the window (at most 256 seals): it opens to what was sealed
                    assert_eq!(r, Ok(sealed[i].0.len()));
                    assert_eq!(&out[..], &sealed[i].0[..]);
                    sealed[i].2 = true;
                }
            }
            Op::Flip { n, at, x } if !sealed.is_empty() && *x != 0 => {
                let i = usize::from(*n) % sealed.len();
                let mut d = sealed[i].1.clone();
                let at = usize::from(*at) % d.len();
                d[at] ^= x;
                assert!(rx.open(&d, &mut out).is_err(), "an edited datagram opened");
            }
            Op::Cut { n, keep } if !sealed.is_empty() => {
                let i = usize::from(*n) % sealed.len();
                let d = &sealed[i].1;
                let keep = usize::from(*keep) % d.len();
                assert!(rx.open(&d[..keep], &mut out).is_err(), "a cut datagram opened");
            }
            Op::Extend { n, tail } if !sealed.is_empty() && !tail.is_empty() => {
                let i = usize::from(*n) % sealed.len();
                let mut d = sealed[i].1.clone();
                d.extend_from_slice(tail);
                assert!(rx.open(&d, &mut out).is_err(), "an extended datagram opened");
            }
            Op::Raw(b) => {
                assert!(rx.open(b, &mut out).is_err(), "forged bytes opened");
            }
            _ => {}
        }
    }
});
