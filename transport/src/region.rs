//! Memory regions (MRs): registered buffers with access flags, keyed by lkey/rkey.
//!
//! Shaped after verbs `ibv_reg_mr` (IBA vol 1, 10.6): registering a buffer gives
//! `{addr, len, lkey, rkey}`; a remote peer names the buffer by `rkey` and a virtual address
//! inside `[addr, addr + len)`. This crate is safe Rust, so the table owns the bytes; the
//! application reads and fills them through [`RegionTable::bytes`] / [`RegionTable::bytes_mut`].
//!
//! Every placement is checked completely (key, bounds, access) **before** a byte is
//! written; a failed check returns an [`AccessError`] and leaves every region untouched.
//! Virtual addresses are assigned page-aligned with a one-page gap between regions, so an
//! address just past one region lies in no region.

use thiserror::Error;

/// Page size used to align virtual addresses of regions, bytes.
pub const REGION_ALIGN_BYTES: u64 = 4096;
/// First virtual address handed out.
pub const REGION_BASE_ADDR: u64 = 0x1_0000;

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
}

#[derive(Debug)]
struct Region {
    key: MrKey,
    access: Access,
    buf: Vec<u8>,
}

/// The registered regions of one endpoint (a verbs protection domain).
#[derive(Debug)]
pub struct RegionTable {
    slots: Vec<Option<Region>>,
    next_addr: u64,
    /// Incremented per registration; low 8 bits of each key (verbs "key variant").
    variant: u8,
    /// XORed into rkeys so they differ from lkeys and between endpoints.
    rkey_salt: u32,
}

impl RegionTable {
    /// An empty table. `rkey_salt` (caller-chosen, e.g. from the seeded RNG) makes the
    /// rkeys of this endpoint differ from its lkeys and from other endpoints' rkeys.
    pub fn new(rkey_salt: u32) -> Self {
        RegionTable {
            slots: Vec::new(),
            next_addr: REGION_BASE_ADDR,
            variant: 0,
            rkey_salt: rkey_salt & 0xFFFF_FF00,
        }
    }

    /// Registers a zero-filled buffer of `len` bytes with `access`.
    ///
    /// # Errors
    /// [`RegisterError::TableFull`] after `2^24` registrations in use,
    /// [`RegisterError::AddressSpace`] when addresses run out.
    pub fn register(&mut self, len: usize, access: Access) -> Result<MrKey, RegisterError> {
        let idx = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                if self.slots.len() >= 1 << 24 {
                    return Err(RegisterError::TableFull);
                }
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let len64 = len as u64;
        let addr = self.next_addr;
        let span = len64
            .div_ceil(REGION_ALIGN_BYTES)
            .checked_add(1)
            .and_then(|p| p.checked_mul(REGION_ALIGN_BYTES))
            .ok_or(RegisterError::AddressSpace)?;
        self.next_addr = addr.checked_add(span).ok_or(RegisterError::AddressSpace)?;
        self.variant = self.variant.wrapping_add(1);
        let lkey = ((idx as u32) << 8) | u32::from(self.variant);
        let key = MrKey {
            addr,
            len: len64,
            lkey,
            rkey: lkey ^ self.rkey_salt ^ 0x8000_0000,
        };
        self.slots[idx] = Some(Region {
            key,
            access,
            buf: vec![0; len],
        });
        Ok(key)
    }

    /// Deregisters the region named by `lkey`; its keys stop working at once.
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`] if no region has this lkey.
    pub fn deregister(&mut self, lkey: u32) -> Result<(), AccessError> {
        let idx = self.find_lkey(lkey)?;
        self.slots[idx] = None;
        Ok(())
    }

    fn find_lkey(&self, lkey: u32) -> Result<usize, AccessError> {
        let idx = (lkey >> 8) as usize;
        match self.slots.get(idx) {
            Some(Some(r)) if r.key.lkey == lkey => Ok(idx),
            _ => Err(AccessError::UnknownKey(lkey)),
        }
    }

    fn find_rkey(&self, rkey: u32) -> Result<usize, AccessError> {
        let idx = ((rkey ^ self.rkey_salt ^ 0x8000_0000) >> 8) as usize;
        match self.slots.get(idx) {
            Some(Some(r)) if r.key.rkey == rkey => Ok(idx),
            _ => Err(AccessError::UnknownKey(rkey)),
        }
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
    /// [`AccessError::UnknownKey`].
    pub fn bytes(&self, lkey: u32) -> Result<&[u8], AccessError> {
        let idx = self.find_lkey(lkey)?;
        self.slots[idx]
            .as_ref()
            .map(|r| r.buf.as_slice())
            .ok_or(AccessError::UnknownKey(lkey))
    }

    /// The whole buffer of the region named by `lkey`, writable by its owner.
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`].
    pub fn bytes_mut(&mut self, lkey: u32) -> Result<&mut [u8], AccessError> {
        let idx = self.find_lkey(lkey)?;
        self.slots[idx]
            .as_mut()
            .map(|r| r.buf.as_mut_slice())
            .ok_or(AccessError::UnknownKey(lkey))
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
    /// (the source of an outgoing WRITE or SEND).
    ///
    /// # Errors
    /// [`AccessError::UnknownKey`], [`AccessError::OutOfBounds`].
    pub fn read(&self, lkey: u32, addr: u64, len: u64) -> Result<&[u8], AccessError> {
        let idx = self.find_lkey(lkey)?;
        let r = self.slots[idx]
            .as_ref()
            .ok_or(AccessError::UnknownKey(lkey))?;
        let range = Self::range(&r.key, addr, len)?;
        r.buf
            .get(range)
            .ok_or(AccessError::OutOfBounds { addr, len })
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
    pub fn place_remote(&mut self, rkey: u32, addr: u64, data: &[u8]) -> Result<(), AccessError> {
        let idx = self.find_rkey(rkey)?;
        let r = self.slots[idx]
            .as_mut()
            .ok_or(AccessError::UnknownKey(rkey))?;
        if !r.access.contains(Access::REMOTE_WRITE) {
            return Err(AccessError::NoAccess);
        }
        let range = Self::range(&r.key, addr, data.len() as u64)?;
        let len = data.len() as u64;
        r.buf
            .get_mut(range)
            .ok_or(AccessError::OutOfBounds { addr, len })?
            .copy_from_slice(data);
        Ok(())
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
            .get_mut(range)
            .ok_or(AccessError::OutOfBounds { addr, len })?
            .copy_from_slice(data);
        Ok(())
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

    #[test]
    fn local_read_and_delivery() {
        let mut t = RegionTable::new(0);
        let a = t.register(10, Access::LOCAL_WRITE).unwrap();
        t.bytes_mut(a.lkey).unwrap().copy_from_slice(b"0123456789");
        assert_eq!(t.read(a.lkey, a.addr + 2, 3).unwrap(), b"234");
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
}
