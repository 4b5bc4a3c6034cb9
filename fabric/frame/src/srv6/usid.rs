//! uSID containers: compressed segment lists in one IPv6 address (RFC 9800, NEXT-C-SID flavour
//! with 16-bit C-SIDs, "uSIDs").
//!
//! ```text
//!  bit 0                  LBL        LBL+16     LBL+32            127
//! +----------------------+----------+----------+-----+-----------+
//! | locator block (32/48)| uSID 1   | uSID 2   | ... | 0 (EoC)   |
//! +----------------------+----------+----------+-----+-----------+
//!                         ^ active uSID
//! ```
//!
//! The node owning the active uSID (RFC 9800 section 4.1, End with NEXT-C-SID) shifts the
//! bits after the locator block left by 16, filling zeros at the end, so the next uSID becomes
//! active. uSID 0 is the end-of-container marker: when the active uSID is 0 the container is
//! exhausted and the next segment comes from the SRH, if any.

use std::net::Ipv6Addr;

/// Bits per uSID (the C-SID length of the NEXT-C-SID flavour used here).
pub const USID_BITS: u32 = 16;

/// Errors of uSID container construction and shifting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum UsidError {
    /// Locator block length other than 32 or 48 bits.
    #[error("locator block of {len_bits} bits, expected 32 or 48")]
    BlockLength {
        /// The length asked for.
        len_bits: u8,
    },
    /// The locator block prefix has bits set past its length.
    #[error("locator block has bits set past its /{len_bits}")]
    BlockHostBits {
        /// The block length in bits.
        len_bits: u8,
    },
    /// No uSID given.
    #[error("a uSID container needs at least one uSID")]
    Empty,
    /// More uSIDs than fit after the block: 6 for /32, 5 for /48.
    #[error("{count} uSIDs, at most {capacity} fit")]
    TooMany {
        /// uSIDs given.
        count: usize,
        /// uSIDs that fit.
        capacity: usize,
    },
    /// A uSID of 0, which is reserved as the end-of-container marker.
    #[error("uSID {index} is 0, the end-of-container marker")]
    ZeroUsid {
        /// Position in the list given.
        index: usize,
    },
    /// Shift of a container whose active uSID is already 0.
    #[error("container exhausted: no active uSID to consume")]
    Exhausted,
}

/// A locator block (the common prefix of a uSID domain): 32 or 48 bits of an IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LocatorBlock {
    prefix: Ipv6Addr,
    len_bits: u8,
}

impl LocatorBlock {
    /// A block of `len_bits` (32 or 48) from `prefix`, whose bits past `len_bits` must be 0.
    ///
    /// Errors: [`UsidError::BlockLength`], [`UsidError::BlockHostBits`].
    pub fn new(prefix: Ipv6Addr, len_bits: u8) -> Result<Self, UsidError> {
        if len_bits != 32 && len_bits != 48 {
            return Err(UsidError::BlockLength { len_bits });
        }
        if u128::from(prefix) & !block_mask(len_bits) != 0 {
            return Err(UsidError::BlockHostBits { len_bits });
        }
        Ok(LocatorBlock { prefix, len_bits })
    }

    /// The prefix (bits past the block are 0).
    pub fn prefix(&self) -> Ipv6Addr {
        self.prefix
    }

    /// The block length in bits: 32 or 48.
    pub fn len_bits(&self) -> u8 {
        self.len_bits
    }

    /// How many 16-bit uSIDs fit after the block: 6 for /32, 5 for /48.
    pub fn capacity(&self) -> usize {
        ((128 - u32::from(self.len_bits)) / USID_BITS) as usize
    }
}

fn block_mask(len_bits: u8) -> u128 {
    // len_bits is 32 or 48 here, so the shift is in range.
    u128::MAX << (128 - u32::from(len_bits))
}

/// A uSID container: an IPv6 address read as locator block + uSIDs + zero fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UsidContainer {
    address: Ipv6Addr,
    block_len_bits: u8,
}

impl UsidContainer {
    /// Build a container: the block, then `usids` in travel order (the first is active),
    /// then zeros.
    ///
    /// Errors: [`UsidError::Empty`], [`UsidError::TooMany`], [`UsidError::ZeroUsid`].
    pub fn build(block: LocatorBlock, usids: &[u16]) -> Result<Self, UsidError> {
        if usids.is_empty() {
            return Err(UsidError::Empty);
        }
        if usids.len() > block.capacity() {
            return Err(UsidError::TooMany {
                count: usids.len(),
                capacity: block.capacity(),
            });
        }
        let mut bits = u128::from(block.prefix);
        let mut shift = 128 - u32::from(block.len_bits);
        for (index, &usid) in usids.iter().enumerate() {
            if usid == 0 {
                return Err(UsidError::ZeroUsid { index });
            }
            shift -= USID_BITS;
            bits |= u128::from(usid) << shift;
        }
        Ok(UsidContainer {
            address: Ipv6Addr::from(bits),
            block_len_bits: block.len_bits,
        })
    }

    /// Read any IPv6 address (e.g. a received destination address) as a container behind a
    /// locator block of `block_len_bits` (32 or 48).
    ///
    /// Errors: [`UsidError::BlockLength`].
    pub fn from_address(address: Ipv6Addr, block_len_bits: u8) -> Result<Self, UsidError> {
        if block_len_bits != 32 && block_len_bits != 48 {
            return Err(UsidError::BlockLength {
                len_bits: block_len_bits,
            });
        }
        Ok(UsidContainer {
            address,
            block_len_bits,
        })
    }

    /// The container as an IPv6 address (what goes in the destination address).
    pub fn address(&self) -> Ipv6Addr {
        self.address
    }

    /// The locator block this container is read behind.
    pub fn block(&self) -> LocatorBlock {
        LocatorBlock {
            prefix: Ipv6Addr::from(u128::from(self.address) & block_mask(self.block_len_bits)),
            len_bits: self.block_len_bits,
        }
    }

    fn argument_bits(&self) -> u32 {
        128 - u32::from(self.block_len_bits)
    }

    fn raw_active(&self) -> u16 {
        let shift = self.argument_bits() - USID_BITS;
        ((u128::from(self.address) >> shift) & 0xffff) as u16
    }

    /// The active uSID (the 16 bits right after the block), or `None` when it is 0
    /// (end of container).
    pub fn active_usid(&self) -> Option<u16> {
        match self.raw_active() {
            0 => None,
            usid => Some(usid),
        }
    }

    /// Whether the container is exhausted: the active uSID is 0.
    pub fn is_exhausted(&self) -> bool {
        self.raw_active() == 0
    }

    /// Whether the active uSID is the last one: non-zero, and all bits after it are 0. Its node
    /// ends the container (RFC 9800: with a zero argument it takes the next SRH segment
    /// instead of shifting).
    pub fn is_last(&self) -> bool {
        let after_active = self.argument_bits() - USID_BITS;
        let rest_mask = (1u128 << after_active) - 1;
        !self.is_exhausted() && u128::from(self.address) & rest_mask == 0
    }

    /// The shift a node performs when it consumes the active uSID: bits after the block move
    /// left by 16, zero filled; the block is unchanged.
    ///
    /// Errors: [`UsidError::Exhausted`] when there is no active uSID.
    pub fn shift(&self) -> Result<Self, UsidError> {
        if self.is_exhausted() {
            return Err(UsidError::Exhausted);
        }
        let mask = block_mask(self.block_len_bits);
        let bits = u128::from(self.address);
        let shifted = (bits & mask) | ((bits << USID_BITS) & !mask);
        Ok(UsidContainer {
            address: Ipv6Addr::from(shifted),
            block_len_bits: self.block_len_bits,
        })
    }

    /// The uSIDs from the active one up to (not including) the first 0, in travel order.
    pub fn usids(&self) -> impl Iterator<Item = u16> + '_ {
        let mut current = Some(*self);
        std::iter::from_fn(move || {
            let container = current?;
            let usid = container.active_usid()?;
            current = container.shift().ok();
            Some(usid)
        })
    }
}
