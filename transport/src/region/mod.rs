//! Memory regions (MRs): registered buffers with access flags, keyed by lkey/rkey.
//!
//! Shaped after verbs `ibv_reg_mr` (IBA vol 1, 10.6): registering a buffer gives
//! `{addr, len, lkey, rkey}`; a remote peer names the buffer by `rkey` and a virtual address
//! inside `[addr, addr + len)`. A region's bytes live in one of three places:
//!
//! - the table itself ([`RegionTable::register`], zero-filled): what the simulator and the
//!   sans-IO tests use; read and fill through [`RegionTable::bytes`] /
//!   [`RegionTable::bytes_mut`];
//! - a [`SharedMem`] the application holds a clone of
//!   ([`RegionTable::register_shared`]): safe to read and write from any thread while the
//!   transport uses it, each access under the buffer's lock;
//! - memory the application owns outright, named by pointer and length
//!   ([`RegionTable::register_raw`], `unsafe`, the verbs contract of the [`mem`] module,
//!   the only code of this crate that dereferences a raw pointer).
//!
//! Either way the transport places received payload straight into the region and reads
//! send payload straight from it: one copy each way between the datagram buffer and the
//! application's bytes.
//!
//! Every placement is checked completely (key, bounds, access) **before** a byte is
//! written; a failed check returns an [`AccessError`] and leaves every region untouched.
//! Virtual addresses are assigned page-aligned with a one-page gap between regions, so an
//! address just past one region lies in no region.
//!
//! Two ways to make keys and addresses ([`RegionTable::new`], [`RegionTable::random`]):
//! sequential (addresses from [`REGION_BASE_ADDR`] up, rkeys the lkey XOR a salt: what the
//! simulator and unit tests use, reproducible and readable), or random (docs/SECURITY.md):
//! every rkey and every region's address drawn from a ChaCha20 stream keyed by 32 bytes the
//! caller takes from a CSPRNG, so a forger who saw some rkeys and addresses cannot derive
//! the others, and none of them follows from a QPN, PSN or generation. The transport stays
//! sans-IO: the key comes in from the caller ([`crate::ConnConfig::region_key`]).

mod lent;
#[allow(unsafe_code)]
pub mod mem;
mod shared;

pub use lent::PayloadRef;
pub use mem::RawMem;
pub use shared::{OutOfRange, SharedMem};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

/// Page size used to align virtual addresses of regions, bytes.
pub const REGION_ALIGN_BYTES: u64 = 4096;
/// First virtual address handed out (sequential keys).
pub const REGION_BASE_ADDR: u64 = 0x1_0000;
/// Random region addresses lie in `[RANDOM_ADDR_LOW, RANDOM_ADDR_LOW + RANDOM_ADDR_SPAN_BYTES)`:
/// 2^32 up to 2^48 (a 48-bit span of pages, 2^36 choices of a 4 KiB page).
pub const RANDOM_ADDR_LOW: u64 = 1 << 32;
/// Size of the range random region addresses are drawn from, bytes (see [`RANDOM_ADDR_LOW`]).
pub const RANDOM_ADDR_SPAN_BYTES: u64 = (1 << 48) - (1 << 32);
/// Draws of a free random rkey or address before registration gives up with
/// [`RegisterError::AddressSpace`] (each draw collides with probability far below 1/2
/// unless the table is nearly full).
const RANDOM_DRAWS: usize = 64;

/// Access rights of a region (verbs `IBV_ACCESS_*`); combine with `|`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Access(u8);

impl Access {
    /// No access beyond local read (the owner can always read its own region).
    pub const NONE: Access = Access(0);
    /// The local endpoint may deliver into the region (SEND receive buffers).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote peers may RDMA WRITE into the region with its rkey.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote peers may RDMA READ from the region (reserved: READ is not implemented yet).
    pub const REMOTE_READ: Access = Access(4);

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// What registration returns: where the region lives and the keys that name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKey {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Local key: names the region in local work requests (scatter/gather entries).
    pub lkey: u32,
    /// Remote key: names the region in a peer's RETH.
    pub rkey: u32,
}

/// Why an access to a region was refused. Nothing was read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum AccessError {
    /// No registered region has this key.
    #[error("no region with key {0:#x}")]
    UnknownKey(u32),
    /// The range `[addr, addr + len)` is not inside the region.
    #[error("range {addr:#x}+{len} outside the region")]
    OutOfBounds {
        /// First address of the access.
        addr: u64,
        /// Length of the access in bytes.
        len: u64,
    },
    /// The region does not grant the needed right.
    #[error("region lacks the needed access right")]
    NoAccess,
    /// The region is a [`SharedMem`]: its bytes are behind its lock, reach them through
    /// the `SharedMem` handle.
    #[error("region {0:#x} is shared memory: use its SharedMem handle")]
    Shared(u32),
}

/// Why registration failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum RegisterError {
    /// The table holds `2^24` regions already (the key index has 24 bits).
    #[error("region table full")]
    TableFull,
    /// The virtual address space (64 bits) is exhausted.
    #[error("virtual address space exhausted")]
    AddressSpace,
    /// [`RegionTable::register_raw_at`]: a live region has this rkey already, or the
    /// range `[addr, addr + len)` wraps past 2^64.
    #[error("rkey {0:#x} in use, or its range wraps")]
    KeyInUse(u32),
}

/// Where a region's bytes live.
#[derive(Debug)]
enum Backing {
    /// Owned by the table (zero-filled at registration).
    Owned(Vec<u8>),
    /// Shared with the application, locked per access.
    Shared(SharedMem),
    /// Owned by the application (the [`mem`] contract).
    Raw(RawMem),
}

impl Backing {
    fn len(&self) -> usize {
        match self {
            Backing::Owned(v) => v.len(),
            Backing::Shared(m) => m.len(),
            Backing::Raw(m) => m.len(),
        }
    }

    /// Copies `data` to offset `off`; `None` (nothing written) if it does not fit.
    #[inline]
    fn write(&mut self, off: usize, data: &[u8]) -> Option<()> {
        let end = off.checked_add(data.len())?;
        match self {
            Backing::Owned(v) => v.get_mut(off..end)?.copy_from_slice(data),
            Backing::Shared(m) => m.lock().get_mut(off..end)?.copy_from_slice(data),
            Backing::Raw(m) => m.write(off, data)?,
        }
        Some(())
    }
}

/// Bytes of a region lent out by [`RegionTable::read`]: a plain slice, or a slice of a
/// [`SharedMem`] with its lock held until this is dropped. Dereferences to `[u8]`.
#[derive(Debug)]
pub struct RegionBytes<'a>(RegionBytesInner<'a>);

#[derive(Debug)]
enum RegionBytesInner<'a> {
    Slice(&'a [u8]),
    Locked(
        std::sync::MutexGuard<'a, Box<[u8]>>,
        core::ops::Range<usize>,
    ),
}

impl core::ops::Deref for RegionBytes<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.0 {
            RegionBytesInner::Slice(s) => s,
            // The range was checked against the locked buffer when this was made.
            RegionBytesInner::Locked(g, r) => g.get(r.clone()).unwrap_or(&[]),
        }
    }
}

#[derive(Debug)]
struct Region {
    key: MrKey,
    access: Access,
    buf: Backing,
    /// Keyed by the caller ([`RegionTable::register_raw_at`]): its address is not in
    /// `spans` (such regions may overlap each other and the generated ones).
    fixed: bool,
}

/// How a [`RegionTable`] makes rkeys and addresses.
#[derive(Debug)]
enum KeyGen {
    /// Addresses from [`REGION_BASE_ADDR`] up; rkey = lkey ^ salt ^ 0x8000_0000.
    Sequential { next_addr: u64, rkey_salt: u32 },
    /// rkeys and page-aligned addresses from a caller-keyed ChaCha20 stream.
    Random(Box<ChaCha20Rng>),
}

/// The registered regions of one endpoint (a verbs protection domain).
#[derive(Debug)]
pub struct RegionTable {
    slots: Vec<Option<Region>>,
    /// Incremented per registration; low 8 bits of each lkey (verbs "key variant").
    variant: u8,
    keygen: KeyGen,
    /// Slot of each registered rkey.
    by_rkey: crate::keyhash::FastMap<u32, usize>,
    /// (rkey, slot) of the latest remote WRITE placed: consecutive packets of a WRITE
    /// name the same region, so [`RegionTable::place_remote`] checks this slot before the
    /// map. Only a hint: used when the slot holds a region with that rkey, which is then
    /// the one `by_rkey` names (live regions' rkeys are distinct).
    rkey_hint: (u32, usize),
    /// Address span `[start, end)` (guard page included) of each region, by start.
    spans: BTreeMap<u64, u64>,
    /// The empty slots below `slots.len()`, so a registration takes the lowest in
    /// O(log n) (a scan of `slots` made 100,000 registrations quadratic: the last
    /// 10,000 took 70 times the first).
    free: BTreeSet<usize>,
}

impl RegionTable {
    /// An empty table. `rkey_salt` (caller-chosen, e.g. from the seeded RNG) makes the
    /// rkeys of this endpoint differ from its lkeys and from other endpoints' rkeys.
    /// Keys and addresses are sequential and follow from the salt: for the simulator and
    /// tests, not for a network with strangers on it (use [`RegionTable::random`]).
    pub fn new(rkey_salt: u32) -> Self {
        RegionTable {
            slots: Vec::new(),
            variant: 0,
            keygen: KeyGen::Sequential {
                next_addr: REGION_BASE_ADDR,
                rkey_salt: rkey_salt & 0xFFFF_FF00,
            },
            by_rkey: Default::default(),
            rkey_hint: (0, usize::MAX),
            spans: BTreeMap::new(),
            free: BTreeSet::new(),
        }
    }

    /// An empty table whose rkeys and region addresses are drawn from a ChaCha20 stream
    /// keyed by `key` (32 bytes the caller takes from a CSPRNG; the same key gives the same
    /// keys and addresses, so a seeded simulator stays reproducible). rkeys are nonzero,
    /// distinct and independent of the lkeys; addresses are page-aligned in
    /// [`RANDOM_ADDR_LOW`]..+[`RANDOM_ADDR_SPAN_BYTES`], one guard page apart at least.
    pub fn random(key: [u8; 32]) -> Self {
        RegionTable {
            keygen: KeyGen::Random(Box::new(ChaCha20Rng::from_seed(key))),
            ..RegionTable::new(0)
        }
    }

    /// Whether `[start, start + span)` overlaps no registered region's span.
    fn span_free(&self, start: u64, span: u64) -> bool {
        let Some(end) = start.checked_add(span) else {
            return false;
        };
        let before_ok = self
            .spans
            .range(..=start)
            .next_back()
            .is_none_or(|(_, &e)| e <= start);
        let after_ok = self
            .spans
            .range(start..)
            .next()
            .is_none_or(|(&s, _)| s >= end);
        before_ok && after_ok
    }

    /// An rkey and an address for a new region of `span` bytes (guard page included).
    fn draw(&mut self, lkey: u32, span: u64) -> Result<(u32, u64), RegisterError> {
        let rng = match &mut self.keygen {
            KeyGen::Sequential {
                next_addr,
                rkey_salt,
            } => {
                let rkey = lkey ^ *rkey_salt ^ 0x8000_0000;
                if self.by_rkey.contains_key(&rkey) {
                    // taken by a region keyed by its caller (register_raw_at)
                    return Err(RegisterError::KeyInUse(rkey));
                }
                let addr = *next_addr;
                *next_addr = addr.checked_add(span).ok_or(RegisterError::AddressSpace)?;
                return Ok((rkey, addr));
            }
            KeyGen::Random(rng) => rng,
        };
        let rkeys: Vec<u32> = (0..RANDOM_DRAWS).map(|_| rng.random()).collect();
        // With a guard page before the region too, so two regions never abut.
        let need = span
            .checked_add(REGION_ALIGN_BYTES)
            .filter(|&n| n <= RANDOM_ADDR_SPAN_BYTES)
            .ok_or(RegisterError::AddressSpace)?;
        let last_page = (RANDOM_ADDR_SPAN_BYTES - need) / REGION_ALIGN_BYTES;
        let addrs: Vec<u64> = (0..RANDOM_DRAWS)
            .map(|_| RANDOM_ADDR_LOW + (rng.random_range(0..=last_page) + 1) * REGION_ALIGN_BYTES)
            .collect();
        let rkey = rkeys
            .into_iter()
            .find(|&k| k != 0 && !self.by_rkey.contains_key(&k))
            .ok_or(RegisterError::TableFull)?;
        let addr = addrs
            .into_iter()
            .find(|&a| self.span_free(a - REGION_ALIGN_BYTES, need))
            .ok_or(RegisterError::AddressSpace)?;
        Ok((rkey, addr))
    }

    /// Registers a zero-filled buffer of `len` bytes with `access`.
    ///
    /// # Errors
    /// [`RegisterError::TableFull`] after `2^24` registrations in use,
    /// [`RegisterError::AddressSpace`] when addresses run out.
    pub fn register(&mut self, len: usize, access: Access) -> Result<MrKey, RegisterError> {
        self.insert(Backing::Owned(vec![0; len]), access)
    }

    /// Registers the application's [`SharedMem`] `mem` (the table keeps a clone; the
    /// application keeps reading and writing it through its own).
    ///
    /// # Errors
    /// As [`RegionTable::register`].
    pub fn register_shared(
        &mut self,
        mem: &SharedMem,
        access: Access,
    ) -> Result<MrKey, RegisterError> {
        self.insert(Backing::Shared(mem.clone()), access)
    }

    /// Registers application-owned memory (`ibv_reg_mr` on the caller's buffer): the
    /// transport places received payload at `mem`'s pointer and sends from it until the
    /// region is deregistered or the table dropped.
    ///
    /// # Errors
    /// As [`RegionTable::register`].
    pub fn register_raw(&mut self, mem: RawMem, access: Access) -> Result<MrKey, RegisterError> {
        self.insert(Backing::Raw(mem), access)
    }

    /// Registers application-owned memory under an rkey and a virtual address the
    /// caller chooses (a libfabric provider's keys: the application's requested key, or
    /// one the provider drew, and the buffer's own address or an offset). Such regions
    /// may overlap in address (a peer names a region by rkey first); the rkey must be
    /// free. The lkey is the table's, as for [`RegionTable::register_raw`].
    ///
    /// # Errors
    /// [`RegisterError::KeyInUse`] when a live region has `rkey` or
    /// `addr + mem.len()` wraps past 2^64; [`RegisterError::TableFull`].
    pub fn register_raw_at(
        &mut self,
        mem: RawMem,
        access: Access,
        rkey: u32,
        addr: u64,
    ) -> Result<MrKey, RegisterError> {
        if self.by_rkey.contains_key(&rkey) || addr.checked_add(mem.len() as u64).is_none() {
            return Err(RegisterError::KeyInUse(rkey));
        }
        let idx = self.free_slot()?;
        let lkey = ((idx as u32) << 8) | u32::from(self.variant.wrapping_add(1));
        self.variant = self.variant.wrapping_add(1);
        let key = MrKey {
            addr,
            len: mem.len() as u64,
            lkey,
            rkey,
        };
        self.by_rkey.insert(rkey, idx);
        self.put(
            idx,
            Region {
                key,
                access,
                buf: Backing::Raw(mem),
                fixed: true,
            },
        );
        Ok(key)
    }

    /// The lowest empty slot, or a new one (taken only once the region is in).
    fn free_slot(&self) -> Result<usize, RegisterError> {
        match self.free.first() {
            Some(&i) => Ok(i),
            None if self.slots.len() >= 1 << 24 => Err(RegisterError::TableFull),
            None => Ok(self.slots.len()),
        }
    }

    /// Puts `r` into slot `idx` (from [`RegionTable::free_slot`]).
    fn put(&mut self, idx: usize, r: Region) {
        if idx == self.slots.len() {
            self.slots.push(Some(r));
        } else {
            self.free.remove(&idx);
            self.slots[idx] = Some(r);
        }
    }

    fn insert(&mut self, buf: Backing, access: Access) -> Result<MrKey, RegisterError> {
        let len = buf.len();
        let idx = self.free_slot()?;
        let len64 = len as u64;
        let span = len64
            .div_ceil(REGION_ALIGN_BYTES)
            .checked_add(1)
            .and_then(|p| p.checked_mul(REGION_ALIGN_BYTES))
            .ok_or(RegisterError::AddressSpace)?;
        let lkey = ((idx as u32) << 8) | u32::from(self.variant.wrapping_add(1));
        let (rkey, addr) = self.draw(lkey, span)?;
        self.variant = self.variant.wrapping_add(1);
        let key = MrKey {
            addr,
            len: len64,
            lkey,
            rkey,
        };
        self.by_rkey.insert(rkey, idx);
        self.spans.insert(addr, addr + span);
        let region = Region {
            key,
            access,
            buf,
            fixed: false,
        };
        self.put(idx, region);
        Ok(key)
    }

    /// Deregisters the region named by `lkey`; its keys stop working at once.
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`] if no region has this lkey.
    pub fn deregister(&mut self, lkey: u32) -> Result<(), AccessError> {
        let idx = self.find_lkey(lkey)?;
        if let Some(r) = self.slots[idx].take() {
            self.by_rkey.remove(&r.key.rkey);
            if !r.fixed {
                self.spans.remove(&r.key.addr);
            }
            self.free.insert(idx);
        }
        Ok(())
    }

    #[inline]
    fn find_lkey(&self, lkey: u32) -> Result<usize, AccessError> {
        let idx = (lkey >> 8) as usize;
        match self.slots.get(idx) {
            Some(Some(r)) if r.key.lkey == lkey => Ok(idx),
            _ => Err(AccessError::UnknownKey(lkey)),
        }
    }

    #[inline]
    fn find_rkey(&self, rkey: u32) -> Result<usize, AccessError> {
        match self.by_rkey.get(&rkey) {
            Some(&idx) if matches!(self.slots.get(idx), Some(Some(r)) if r.key.rkey == rkey) => {
                Ok(idx)
            }
            _ => Err(AccessError::UnknownKey(rkey)),
        }
    }

    /// [`RegionTable::find_rkey`] through [`RegionTable::rkey_hint`] first; a map lookup
    /// updates the hint.
    #[inline]
    fn find_rkey_hinted(&mut self, rkey: u32) -> Result<usize, AccessError> {
        let (hint_rkey, hint_idx) = self.rkey_hint;
        if hint_rkey == rkey
            && matches!(self.slots.get(hint_idx), Some(Some(r)) if r.key.rkey == rkey)
        {
            debug_assert_eq!(self.find_rkey(rkey), Ok(hint_idx));
            return Ok(hint_idx);
        }
        let idx = self.find_rkey(rkey)?;
        self.rkey_hint = (rkey, idx);
        Ok(idx)
    }

    /// The key record of the region named by `lkey`.
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`].
    pub fn key(&self, lkey: u32) -> Result<MrKey, AccessError> {
        let idx = self.find_lkey(lkey)?;
        self.slots[idx]
            .as_ref()
            .map(|r| r.key)
            .ok_or(AccessError::UnknownKey(lkey))
    }

    /// The whole buffer of the region named by `lkey` (byte 0 is at `key.addr`).
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`]; [`AccessError::Shared`] for a [`SharedMem`] region.
    pub fn bytes(&self, lkey: u32) -> Result<&[u8], AccessError> {
        let idx = self.find_lkey(lkey)?;
        let r = self.slots[idx]
            .as_ref()
            .ok_or(AccessError::UnknownKey(lkey))?;
        match &r.buf {
            Backing::Owned(v) => Ok(v),
            Backing::Shared(_) => Err(AccessError::Shared(lkey)),
            Backing::Raw(m) => m.get(0..m.len()).ok_or(AccessError::UnknownKey(lkey)),
        }
    }

    /// The whole buffer of the region named by `lkey`, writable by its owner.
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`]; [`AccessError::Shared`] for a [`SharedMem`] region.
    pub fn bytes_mut(&mut self, lkey: u32) -> Result<&mut [u8], AccessError> {
        let idx = self.find_lkey(lkey)?;
        let r = self.slots[idx]
            .as_mut()
            .ok_or(AccessError::UnknownKey(lkey))?;
        match &mut r.buf {
            Backing::Owned(v) => Ok(v),
            Backing::Shared(_) => Err(AccessError::Shared(lkey)),
            Backing::Raw(m) => {
                let len = m.len();
                m.get_mut(0..len).ok_or(AccessError::UnknownKey(lkey))
            }
        }
    }

    /// Checks `[addr, addr + len)` against a region and returns the buffer offset range.
    fn range(key: &MrKey, addr: u64, len: u64) -> Result<core::ops::Range<usize>, AccessError> {
        let oob = AccessError::OutOfBounds { addr, len };
        let start = addr.checked_sub(key.addr).ok_or(oob)?;
        let end = start.checked_add(len).ok_or(oob)?;
        if end > key.len {
            return Err(oob);
        }
        Ok(start as usize..end as usize)
    }

    /// Local read of `len` bytes at virtual address `addr` of the region named by `lkey`
    /// (the source of an outgoing WRITE or SEND): the bytes where they are, no copy (a
    /// [`SharedMem`] region stays locked while the result lives).
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`], [`AccessError::OutOfBounds`].
    #[inline]
    pub fn read(&self, lkey: u32, addr: u64, len: u64) -> Result<RegionBytes<'_>, AccessError> {
        let idx = self.find_lkey(lkey)?;
        let r = self.slots[idx]
            .as_ref()
            .ok_or(AccessError::UnknownKey(lkey))?;
        let range = Self::range(&r.key, addr, len)?;
        let oob = AccessError::OutOfBounds { addr, len };
        let inner = match &r.buf {
            Backing::Owned(v) => RegionBytesInner::Slice(v.get(range).ok_or(oob)?),
            Backing::Raw(m) => RegionBytesInner::Slice(m.get(range).ok_or(oob)?),
            Backing::Shared(m) => {
                let g = m.lock();
                if range.end > g.len() {
                    return Err(oob);
                }
                RegionBytesInner::Locked(g, range)
            }
        };
        Ok(RegionBytes(inner))
    }

    /// Checks that a local read of `len` bytes at `addr` of `lkey` would be allowed (a
    /// work request's source or receive buffer at post time), without touching the bytes.
    ///
    /// # Errors
    /// As [`RegionTable::read`].
    #[inline]
    pub fn check_local_read(&self, lkey: u32, addr: u64, len: u64) -> Result<(), AccessError> {
        let idx = self.find_lkey(lkey)?;
        let r = self.slots[idx]
            .as_ref()
            .ok_or(AccessError::UnknownKey(lkey))?;
        Self::range(&r.key, addr, len).map(|_| ())
    }

    /// Checks that a remote WRITE of `len` bytes at `addr` with `rkey` would be allowed,
    /// without writing.
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`], [`AccessError::NoAccess`] (no REMOTE_WRITE),
    /// [`AccessError::OutOfBounds`].
    pub fn check_remote_write(&self, rkey: u32, addr: u64, len: u64) -> Result<(), AccessError> {
        let idx = self.find_rkey(rkey)?;
        let r = self.slots[idx]
            .as_ref()
            .ok_or(AccessError::UnknownKey(rkey))?;
        if !r.access.contains(Access::REMOTE_WRITE) {
            return Err(AccessError::NoAccess);
        }
        Self::range(&r.key, addr, len).map(|_| ())
    }

    /// Places `data` at `addr` of the region named by `rkey` (an incoming RDMA WRITE).
    /// All checks happen before the copy; on error nothing is written.
    ///
    /// # Errors
    /// As [`RegionTable::check_remote_write`].
    #[inline]
    pub fn place_remote(&mut self, rkey: u32, addr: u64, data: &[u8]) -> Result<(), AccessError> {
        let (hint_rkey, hint_idx) = self.rkey_hint;
        if cfg!(debug_assertions)
            && hint_rkey == rkey
            && matches!(self.slots.get(hint_idx), Some(Some(r)) if r.key.rkey == rkey)
        {
            // the hint names the slot the map names
            assert_eq!(self.find_rkey(rkey), Ok(hint_idx));
        }
        let r = if hint_rkey == rkey
            && let Some(Some(r)) = self.slots.get_mut(hint_idx)
            && r.key.rkey == rkey
        {
            // the region of the latest WRITE placed, found without the map (one slot
            // lookup, not two)
            r
        } else {
            let idx = self.find_rkey_hinted(rkey)?;
            self.slots
                .get_mut(idx)
                .and_then(Option::as_mut)
                .ok_or(AccessError::UnknownKey(rkey))?
        };
        if !r.access.contains(Access::REMOTE_WRITE) {
            return Err(AccessError::NoAccess);
        }
        let range = Self::range(&r.key, addr, data.len() as u64)?;
        let len = data.len() as u64;
        r.buf
            .write(range.start, data)
            .ok_or(AccessError::OutOfBounds { addr, len })
    }

    /// Delivers `data` at `addr` of the local region `lkey` (a received SEND landing in a
    /// posted receive buffer). Needs [`Access::LOCAL_WRITE`].
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`], [`AccessError::NoAccess`], [`AccessError::OutOfBounds`].
    pub fn place_local(&mut self, lkey: u32, addr: u64, data: &[u8]) -> Result<(), AccessError> {
        let idx = self.find_lkey(lkey)?;
        let r = self.slots[idx]
            .as_mut()
            .ok_or(AccessError::UnknownKey(lkey))?;
        if !r.access.contains(Access::LOCAL_WRITE) {
            return Err(AccessError::NoAccess);
        }
        let len = data.len() as u64;
        let range = Self::range(&r.key, addr, len)?;
        r.buf
            .write(range.start, data)
            .ok_or(AccessError::OutOfBounds { addr, len })
    }

    /// Checks that a local delivery of `len` bytes at `addr` into `lkey` would be allowed.
    ///
    /// # Errors
    /// As [`RegionTable::place_local`].
    pub fn check_local_write(&self, lkey: u32, addr: u64, len: u64) -> Result<(), AccessError> {
        let idx = self.find_lkey(lkey)?;
        let r = self.slots[idx]
            .as_ref()
            .ok_or(AccessError::UnknownKey(lkey))?;
        if !r.access.contains(Access::LOCAL_WRITE) {
            return Err(AccessError::NoAccess);
        }
        Self::range(&r.key, addr, len).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_gives_aligned_addresses_and_distinct_keys() {
        let mut t = RegionTable::new(0xABCD_EF00);
        let a = t.register(100, Access::REMOTE_WRITE).unwrap();
        let b = t.register(8192, Access::LOCAL_WRITE).unwrap();
        assert_eq!(a.addr, 0x1_0000);
        assert_eq!(a.len, 100);
        // 100 bytes -> one page + one guard page
        assert_eq!(b.addr, 0x1_0000 + 2 * 4096);
        assert_eq!(a.lkey, 0x0000_0001);
        assert_eq!(b.lkey, 0x0000_0102);
        assert_eq!(a.rkey, 0x0000_0001 ^ 0xABCD_EF00 ^ 0x8000_0000);
        assert_ne!(a.rkey, a.lkey);
    }

    #[test]
    fn rkey_hint_never_outlives_its_region() {
        let mut t = RegionTable::new(7 << 8);
        let a = t.register(64, Access::REMOTE_WRITE).unwrap();
        let b = t.register(64, Access::REMOTE_WRITE).unwrap();
        // alternating regions: each write lands in its own region
        t.place_remote(a.rkey, a.addr, &[1]).unwrap();
        t.place_remote(b.rkey, b.addr, &[2]).unwrap();
        t.place_remote(a.rkey, a.addr + 1, &[3]).unwrap();
        assert_eq!(&t.bytes(a.lkey).unwrap()[..2], &[1, 3]);
        assert_eq!(&t.bytes(b.lkey).unwrap()[..1], &[2]);
        // the hinted region goes away: its rkey stops working at once
        t.deregister(a.lkey).unwrap();
        assert_eq!(
            t.place_remote(a.rkey, a.addr, &[9]),
            Err(AccessError::UnknownKey(a.rkey))
        );
        // a new region in the same slot has another rkey; the old one still fails
        let c = t.register(64, Access::REMOTE_WRITE).unwrap();
        assert_eq!(c.lkey >> 8, a.lkey >> 8);
        assert_ne!(c.rkey, a.rkey);
        t.place_remote(c.rkey, c.addr, &[4]).unwrap();
        assert_eq!(
            t.place_remote(a.rkey, a.addr, &[9]),
            Err(AccessError::UnknownKey(a.rkey))
        );
        assert_eq!(&t.bytes(c.lkey).unwrap()[..1], &[4]);
    }

    #[test]
    fn remote_write_checks_everything_before_writing() {
        let mut t = RegionTable::new(7 << 8);
        let mr = t.register(64, Access::REMOTE_WRITE).unwrap();
        let ro = t.register(64, Access::LOCAL_WRITE).unwrap();
        // good
        t.place_remote(mr.rkey, mr.addr + 60, &[1, 2, 3, 4])
            .unwrap();
        assert_eq!(&t.bytes(mr.lkey).unwrap()[60..], &[1, 2, 3, 4]);
        // one byte past the end: refused, nothing written
        assert_eq!(
            t.place_remote(mr.rkey, mr.addr + 61, &[9, 9, 9, 9]),
            Err(AccessError::OutOfBounds {
                addr: mr.addr + 61,
                len: 4
            })
        );
        assert_eq!(&t.bytes(mr.lkey).unwrap()[60..], &[1, 2, 3, 4]);
        // below the start
        assert!(matches!(
            t.place_remote(mr.rkey, mr.addr - 1, &[9]),
            Err(AccessError::OutOfBounds { .. })
        ));
        // address overflow
        assert!(matches!(
            t.place_remote(mr.rkey, u64::MAX, &[9, 9]),
            Err(AccessError::OutOfBounds { .. })
        ));
        // wrong rkey, and the lkey is not an rkey
        assert_eq!(
            t.place_remote(mr.rkey ^ 1, mr.addr, &[9]),
            Err(AccessError::UnknownKey(mr.rkey ^ 1))
        );
        assert_eq!(
            t.place_remote(mr.lkey, mr.addr, &[9]),
            Err(AccessError::UnknownKey(mr.lkey))
        );
        // no REMOTE_WRITE right
        assert_eq!(
            t.place_remote(ro.rkey, ro.addr, &[9]),
            Err(AccessError::NoAccess)
        );
        assert!(t.bytes(ro.lkey).unwrap().iter().all(|&b| b == 0));
        assert_eq!(
            t.bytes(mr.lkey)
                .unwrap()
                .iter()
                .filter(|&&b| b != 0)
                .count(),
            4
        );
    }

    #[test]
    fn deregistered_keys_stop_working_and_slots_get_new_variants() {
        let mut t = RegionTable::new(0);
        let a = t.register(16, Access::REMOTE_WRITE).unwrap();
        t.deregister(a.lkey).unwrap();
        assert_eq!(
            t.place_remote(a.rkey, a.addr, &[1]),
            Err(AccessError::UnknownKey(a.rkey))
        );
        let b = t.register(16, Access::REMOTE_WRITE).unwrap();
        assert_eq!(b.lkey >> 8, a.lkey >> 8);
        assert_ne!(b.lkey, a.lkey);
        assert_eq!(
            t.place_remote(a.rkey, b.addr, &[1]),
            Err(AccessError::UnknownKey(a.rkey))
        );
        assert_eq!(t.deregister(a.lkey), Err(AccessError::UnknownKey(a.lkey)));
    }

    /// A registration takes the lowest empty slot (as the scan it replaced did, so the
    /// lkeys a run hands out are the same), a new one only when none is empty.
    #[test]
    fn registrations_take_the_lowest_empty_slot() {
        let mut t = RegionTable::random([3; 32]);
        let keys: Vec<MrKey> = (0..6)
            .map(|_| t.register(8, Access::LOCAL_WRITE).unwrap())
            .collect();
        let slot = |k: &MrKey| k.lkey >> 8;
        assert_eq!(
            keys.iter().map(slot).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5]
        );
        for i in [4, 1, 3] {
            t.deregister(keys[i].lkey).unwrap();
        }
        let again: Vec<u32> = (0..4)
            .map(|_| slot(&t.register(8, Access::LOCAL_WRITE).unwrap()))
            .collect();
        assert_eq!(again, [1, 3, 4, 6]);
    }

    #[test]
    fn local_read_and_delivery() {
        let mut t = RegionTable::new(0);
        let a = t.register(10, Access::LOCAL_WRITE).unwrap();
        t.bytes_mut(a.lkey).unwrap().copy_from_slice(b"0123456789");
        assert_eq!(&*t.read(a.lkey, a.addr + 2, 3).unwrap(), b"234");
        assert!(t.read(a.lkey, a.addr + 8, 3).is_err());
        t.place_local(a.lkey, a.addr + 9, b"X").unwrap();
        assert_eq!(t.bytes(a.lkey).unwrap(), b"012345678X");
        assert_eq!(
            t.check_local_write(a.lkey, a.addr, 11),
            Err(AccessError::OutOfBounds {
                addr: a.addr,
                len: 11
            })
        );
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        assert!(access.contains(Access::REMOTE_WRITE));
        assert!(!Access::LOCAL_WRITE.contains(Access::REMOTE_WRITE));
    }

    #[test]
    fn random_keys_and_addresses_are_distinct_aligned_and_follow_the_key_only() {
        let mut t = RegionTable::random([7; 32]);
        let mut u = RegionTable::random([7; 32]);
        let mut v = RegionTable::random([8; 32]);
        let mut keys = Vec::new();
        for i in 0..200 {
            let len = 1 + i * 1000;
            let a = t.register(len, Access::REMOTE_WRITE).unwrap();
            assert_eq!(u.register(len, Access::REMOTE_WRITE).unwrap(), a);
            let b = v.register(len, Access::REMOTE_WRITE).unwrap();
            assert_ne!((b.rkey, b.addr), (a.rkey, a.addr));
            assert_eq!(a.addr % REGION_ALIGN_BYTES, 0);
            assert!(a.addr > RANDOM_ADDR_LOW);
            assert!(a.addr + a.len <= RANDOM_ADDR_LOW + RANDOM_ADDR_SPAN_BYTES);
            assert_ne!(a.rkey, 0);
            assert_eq!(a.lkey, ((i as u32) << 8) | (i as u32 + 1) & 0xFF);
            keys.push(a);
        }
        let mut rkeys: Vec<u32> = keys.iter().map(|k| k.rkey).collect();
        rkeys.sort_unstable();
        rkeys.dedup();
        assert_eq!(rkeys.len(), 200);
        // No two regions overlap or abut: at least one guard page between any two.
        let mut spans: Vec<(u64, u64)> = keys.iter().map(|k| (k.addr, k.addr + k.len)).collect();
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].1 + REGION_ALIGN_BYTES <= w[1].0, "{w:?}");
        }
        // Every rkey names its own region only; lkeys are not rkeys.
        for k in &keys {
            t.place_remote(k.rkey, k.addr + k.len - 1, &[5]).unwrap();
            assert_eq!(
                t.place_remote(k.rkey, k.addr + k.len, &[5]),
                Err(AccessError::OutOfBounds {
                    addr: k.addr + k.len,
                    len: 1
                })
            );
        }
        let k = keys[3];
        t.deregister(k.lkey).unwrap();
        assert_eq!(
            t.place_remote(k.rkey, k.addr, &[1]),
            Err(AccessError::UnknownKey(k.rkey))
        );
        let again = t.register(100, Access::REMOTE_WRITE).unwrap();
        assert_eq!(again.lkey >> 8, 3);
        assert_ne!(again.rkey, k.rkey);
    }

    #[test]
    fn a_random_region_larger_than_the_address_range_is_refused() {
        let mut t = RegionTable::random([1; 32]);
        // Cannot allocate 2^48 bytes, so check the span arithmetic through `draw` alone.
        assert_eq!(
            t.draw(1, RANDOM_ADDR_SPAN_BYTES),
            Err(RegisterError::AddressSpace)
        );
        assert!(t.draw(1, 1 << 20).is_ok());
    }
}

#[cfg(test)]
mod app_memory_tests {
    use super::*;

    /// A raw region in the middle of a larger buffer: remote writes land exactly where
    /// their address says, and no address the network can name (below, at or past the
    /// end, overflowing) reaches the bytes around it.
    #[test]
    #[allow(unsafe_code)]
    fn raw_region_places_in_bounds_only_and_leaves_its_neighbours_alone() {
        let mut backing = vec![0xA5u8; 3 * 64];
        let mut t = RegionTable::random([3; 32]);
        // SAFETY: `backing` outlives the registration (deregistered below before use),
        // is not moved, and is not touched while registered.
        let raw = unsafe { RawMem::new(backing.as_mut_ptr().add(64), 64) }.unwrap();
        let k = t
            .register_raw(raw, Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!(k.len, 64);
        t.place_remote(k.rkey, k.addr, &[1, 2]).unwrap();
        t.place_remote(k.rkey, k.addr + 62, &[3, 4]).unwrap();
        t.place_local(k.lkey, k.addr + 10, &[5]).unwrap();
        let refused = [
            (k.addr + 63, 2),
            (k.addr + 64, 1),
            (k.addr - 1, 1),
            (k.addr.wrapping_sub(64), 64),
            (u64::MAX, 2),
            (k.addr, 65),
        ];
        for (addr, len) in refused {
            let data = vec![0xFFu8; len];
            assert_eq!(
                t.place_remote(k.rkey, addr, &data),
                Err(AccessError::OutOfBounds {
                    addr,
                    len: len as u64
                })
            );
        }
        assert_eq!(
            t.place_remote(k.rkey ^ 1, k.addr, &[9]),
            Err(AccessError::UnknownKey(k.rkey ^ 1))
        );
        assert_eq!(&*t.read(k.lkey, k.addr, 2).unwrap(), &[1, 2]);
        assert_eq!(&*t.read(k.lkey, k.addr + 62, 2).unwrap(), &[3, 4]);
        assert!(t.read(k.lkey, k.addr + 63, 2).is_err());
        assert_eq!(t.bytes(k.lkey).unwrap().len(), 64);
        t.deregister(k.lkey).unwrap();
        assert_eq!(
            t.place_remote(k.rkey, k.addr, &[9]),
            Err(AccessError::UnknownKey(k.rkey))
        );
        assert!(backing[..64].iter().all(|&b| b == 0xA5));
        assert!(backing[128..].iter().all(|&b| b == 0xA5));
        assert_eq!(&backing[64..66], &[1, 2]);
        assert_eq!(backing[74], 5);
        assert_eq!(&backing[126..128], &[3, 4]);
        assert_eq!(
            backing[64..128].iter().filter(|&&b| b == 0xA5).count(),
            64 - 5
        );
    }

    /// A shared region: the application reads and writes through its handle, the
    /// transport through the table, both see each other's bytes.
    #[test]
    fn shared_region_is_seen_by_both_sides() {
        let mem = SharedMem::from_vec(vec![0; 32]);
        let mut t = RegionTable::new(0x100);
        let k = t.register_shared(&mem, Access::REMOTE_WRITE).unwrap();
        assert_eq!(k.len, 32);
        mem.write_at(4, b"abcd").unwrap();
        assert_eq!(&*t.read(k.lkey, k.addr + 4, 4).unwrap(), b"abcd");
        t.place_remote(k.rkey, k.addr + 30, b"yz").unwrap();
        let mut out = [0u8; 2];
        mem.read_at(30, &mut out).unwrap();
        assert_eq!(&out, b"yz");
        assert_eq!(
            t.place_remote(k.rkey, k.addr + 31, b"yz"),
            Err(AccessError::OutOfBounds {
                addr: k.addr + 31,
                len: 2
            })
        );
        assert_eq!(
            mem.read_at(31, &mut out),
            Err(OutOfRange {
                offset: 31,
                len: 2,
                buf_len: 32
            })
        );
        assert_eq!(t.bytes_mut(k.lkey), Err(AccessError::Shared(k.lkey)));
        assert_eq!(t.check_local_read(k.lkey, k.addr, 32), Ok(()));
        t.deregister(k.lkey).unwrap();
        // The application keeps its bytes after deregistration.
        assert_eq!(mem.with(|b| b[30]), b'y');
        assert_eq!(mem.len(), 32);
    }
}
