//! Wire format v1: checked zero-copy views over byte buffers and parsed `Repr`s
//! (the full byte layout, with diagrams, is in `docs/WIRE.md`).
//!
//! A datagram (the UDP payload) is
//!
//! ```text
//! BTH (12 bytes) | MRCETH (16 bytes) | opcode-specific headers | payload
//! ```
//!
//! Every multi-byte field is big-endian. Each header has
//!
//! - a view `Xxx<T: AsRef<[u8]>>` built only with `new_checked` (which checks the length, so no
//!   accessor can index out of bounds), with getters, and setters when `T: AsMut<[u8]>`;
//! - a `XxxRepr` with `parse(&view)`, `emit(&self, &mut view)` and `buffer_len()`.
//!
//! The entry points for the transport core are [`PacketRepr::parse`] and
//! [`PacketRepr::emit`]. Parsing untrusted bytes never panics: every failure is a
//! [`WireError`], and every packet that parses re-emits byte-identical (reserved and unknown
//! bits are kept in the `Repr`).
//!
//! 24-bit fields (PSN, destination QPN) are carried as `u32`; a value above `0xFF_FFFF` is a
//! typed error on emit, and upper bits set in a 32-bit slot that holds a 24-bit PSN are a typed
//! error on parse. Wrap-aware PSN arithmetic is not done here.

mod bth;
mod cnp;
mod data;
mod error;
mod mrceth;
mod nack;
mod packet;
mod probe;
mod psu;
mod sack;

pub use bth::{Bth, BthFlags, BthRepr, BthSpare, Opcode};
pub use cnp::{Cnp, CnpRepr};
pub use data::{DataRepr, ImmDt, Msgeth, MsgethRepr, Reth, RethRepr};
pub use error::{HeaderKind, PsnField, WireError};
pub use mrceth::{Mrceth, MrcethRepr};
pub use nack::{Nack, NackReason, NackRepr};
pub use packet::{Body, PacketRepr};
pub use probe::{Probe, ProbeReply, ProbeReplyRepr, ProbeRepr};
pub use psu::{PortStatus, PortStatusRepr};
pub use sack::{Sack, SackRepr};

/// Largest value a 24-bit field (PSN, destination QPN) can hold.
pub const MAX_24BIT: u32 = 0x00FF_FFFF;

/// Implements the parts every fixed-size header view shares: `LEN`, `new_checked`,
/// `into_inner`, `rest` and `into_rest`.
macro_rules! checked_view {
    ($name:ident, $kind:expr, $len:expr) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of this header in bytes.
            pub const LEN: usize = $len;

            /// Wraps `buffer` after checking it holds at least [`Self::LEN`] bytes.
            ///
            /// # Errors
            /// [`WireError::Truncated`] (with `need` = [`Self::LEN`], `have` = the buffer
            /// length) when the buffer is shorter than the header.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self, WireError> {
                let have = buffer.as_ref().len();
                if have < $len {
                    return Err(WireError::Truncated {
                        header: $kind,
                        need: $len,
                        have,
                    });
                }
                Ok(Self { buffer })
            }

            /// Gives back the wrapped buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The bytes after this header (possibly empty).
            #[inline]
            pub fn rest(&self) -> &[u8] {
                self.buffer.as_ref().get($len..).unwrap_or(&[])
            }
        }

        impl<'a> $name<&'a [u8]> {
            /// The bytes after this header, with the lifetime of the wrapped slice.
            #[inline]
            pub fn into_rest(self) -> &'a [u8] {
                self.buffer.get($len..).unwrap_or(&[])
            }
        }
    };
}
pub(crate) use checked_view;

// Big-endian field access. Callers only pass offsets inside a header whose length was checked
// by `new_checked`, so the indexing below cannot go out of bounds.

/// The `N` bytes at `at` as an array: one bounds check, then a plain (unaligned) load.
#[inline]
fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

#[inline]
pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(array_at(b, at))
}

/// The 24-bit field at `at` (which is at least 1: every 24-bit field follows a byte of its
/// header): the byte before it and the field as one 4-byte load, masked (a 3-byte load is
/// three loads and shifts).
#[inline]
pub(crate) fn get_u24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array_at(b, at - 1)) & MAX_24BIT
}

#[inline]
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array_at(b, at))
}

#[inline]
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(array_at(b, at))
}

#[inline]
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v` at `at` (at least 1, as for [`get_u24`]): one 4-byte store
/// that writes the byte before the field back unchanged.
#[inline]
pub(crate) fn set_u24(b: &mut [u8], at: usize, v: u32) {
    let before = u32::from(b[at - 1]) << 24;
    set_u32(b, at - 1, before | (v & MAX_24BIT));
}

#[inline]
pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Checks a PSN that must fit in 24 bits (on emit, or read from a 32-bit slot on parse).
#[inline]
pub(crate) fn check_psn(field: PsnField, value: u32) -> Result<(), WireError> {
    if value > MAX_24BIT {
        return Err(WireError::PsnOutOfRange { field, value });
    }
    Ok(())
}
