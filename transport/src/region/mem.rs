//! The one place in `mrc-transport` that touches memory through a raw pointer: a region
//! the application owns ([`RawMem`]), registered under the verbs contract
//! (`ibv_reg_mr` on memory the caller allocated).
//!
//! # The contract ([`RawMem::new`])
//!
//! For the whole time the [`RawMem`] exists (from registration until
//! [`super::RegionTable::deregister`] returns, or the table or the connection holding it is
//! dropped), the caller guarantees:
//!
//! 1. **Valid**: `ptr .. ptr + len` is one allocation (or part of one) that is readable
//!    and writable, and stays allocated and mapped: not freed, not unmapped, not shrunk,
//!    not moved (a `Vec` must not reallocate). The pointer must also stay valid under
//!    Rust's aliasing rules: memory owned by a `Box<[u8]>` must not be moved or passed by
//!    value (nor borrowed `&mut` through the `Box`) while registered, as that asserts
//!    unique ownership and invalidates the registered pointer even though the bytes stay
//!    put (Miri reports the next transport access as undefined behaviour under both
//!    Stacked and Tree Borrows). A `Vec`'s heap pointer (`Vec::as_mut_ptr`) or memory
//!    from the allocator directly has no such rule: indexing the `Vec` between calls is
//!    fine (`transport/tests/region_hostile.rs`).
//! 2. **Not raced**: nothing outside this region table reads or writes those bytes while a
//!    call on the table, or on the [`crate::Connection`] that owns it, is running
//!    (`handle_datagram`, `poll_transmit`, `post_*`, `handle_timeout`,
//!    `poll_completion`, ...), and no Rust reference (`&[u8]` / `&mut [u8]`) to them is
//!    alive across such a call. Between calls the application may read and write the
//!    bytes freely (under verbs semantics: a buffer named by a posted send is read by the
//!    transport until its completion; a region a peer may WRITE into can change at any
//!    call that handles a datagram). On a thread that drives the connection itself
//!    (`mrc_fabric`'s caller-progress mode) "between calls" is simply "not inside
//!    `progress()`"; with another thread driving it, the application needs its own
//!    synchronisation with that thread (or the locked [`super::SharedMem`] instead).
//! 3. **Not doubly registered for writing**: two live registrations whose bytes overlap
//!    are driven by one thread at a time (else two transports write the same bytes
//!    concurrently).
//!
//! # What this module guarantees in return
//!
//! Every access is bounds-checked against `len` with overflow-checked arithmetic
//! **before** a pointer is formed; an access that fails the check touches nothing and
//! returns `None`. No address from the network reaches this module: the region table
//! translates a peer's (rkey, virtual address) to an offset and checks it against the
//! region first ([`super::RegionTable::place_remote`]), and this module checks it again.

use core::ops::Range;
use core::ptr::NonNull;

/// A region of application-owned memory: a pointer and a length, bounds-checked on every
/// access. Made only by the `unsafe` [`RawMem::new`], whose contract (this module's docs)
/// makes every safe method sound.
#[derive(Debug)]
pub struct RawMem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a RawMem is a unique handle to memory the caller promised (contract 2, 3) is
// touched only by the thread currently driving the owning table; moving the handle to
// another thread moves that right with it. RawMem is deliberately not Sync.
unsafe impl Send for RawMem {}

impl RawMem {
    /// Wraps `len` bytes at `ptr`. `None` if `ptr` is null while `len > 0`, `len`
    /// exceeds `isize::MAX` (no allocation can be that large), or `ptr + len` runs past
    /// the end of the address space (no allocation can wrap: a slice of it would be
    /// undefined behaviour however the rest of the contract is kept).
    ///
    /// # Safety
    /// The contract in this module's docs (valid, unmoved, not raced, not doubly
    /// registered for writing) must hold until the returned value is dropped.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Option<RawMem> {
        if len > isize::MAX as usize || (ptr as usize).checked_add(len).is_none() {
            return None;
        }
        let ptr = if len == 0 {
            NonNull::dangling()
        } else {
            NonNull::new(ptr)?
        };
        Some(RawMem { ptr, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `range` lies inside `0..len`.
    fn inside(&self, range: &Range<usize>) -> bool {
        range.start <= range.end && range.end <= self.len
    }

    /// The bytes of `range`, or `None` if it is not inside the region.
    pub fn get(&self, range: Range<usize>) -> Option<&[u8]> {
        if !self.inside(&range) {
            return None;
        }
        // SAFETY: range.start <= range.end <= len (checked above), so the slice lies in
        // the caller's valid allocation (contract 1); nobody writes it while this shared
        // borrow of `self` lives (contract 2: no outside access during a call on the
        // table; inside the table `&self` excludes the `&mut self` writers).
        Some(unsafe {
            core::slice::from_raw_parts(self.ptr.as_ptr().add(range.start), range.len())
        })
    }

    /// The bytes of `range`, writable, or `None` if it is not inside the region.
    pub fn get_mut(&mut self, range: Range<usize>) -> Option<&mut [u8]> {
        if !self.inside(&range) {
            return None;
        }
        // SAFETY: as in `get`; `&mut self` makes this the only live reference the table
        // hands out, and contract 2 excludes outside access while it lives.
        Some(unsafe {
            core::slice::from_raw_parts_mut(self.ptr.as_ptr().add(range.start), range.len())
        })
    }

    /// Copies `data` to offset `offset`. `None` (nothing written) unless
    /// `offset + data.len()` fits inside the region.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Option<()> {
        let end = offset.checked_add(data.len())?;
        if end > self.len {
            return None;
        }
        // SAFETY: offset + data.len() <= len (checked, no overflow), so the destination
        // lies in the caller's valid allocation (contract 1) and nobody else touches it
        // during this call (contract 2). `ptr::copy` allows overlap, so even a `data`
        // that aliases the region (it cannot through the safe API) stays defined.
        unsafe {
            core::ptr::copy(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len());
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_before_any_access() {
        let mut backing = vec![0xEEu8; 48];
        // Register the middle 16 bytes only.
        // SAFETY: `backing` outlives `m`, is not moved or touched while `m` lives.
        let mut m = unsafe { RawMem::new(backing.as_mut_ptr().add(16), 16) }.unwrap();
        assert_eq!(m.len(), 16);
        assert_eq!(m.write(0, &[1, 2, 3]), Some(()));
        assert_eq!(m.write(13, &[4, 5, 6]), Some(()));
        assert_eq!(m.write(14, &[9, 9, 9]), None);
        assert_eq!(m.write(usize::MAX, &[9]), None);
        assert_eq!(m.write(16, &[]), Some(()));
        assert_eq!(m.write(17, &[]), None);
        assert_eq!(m.get(0..3), Some(&[1u8, 2, 3][..]));
        assert_eq!(m.get(13..16), Some(&[4u8, 5, 6][..]));
        assert_eq!(m.get(13..17), None);
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 5..4;
        assert_eq!(m.get(backwards), None);
        m.get_mut(3..4).unwrap()[0] = 7;
        assert!(m.get_mut(0..17).is_none());
        // `m` is not used past this point, so `backing` may be read again.
        assert!(backing[..16].iter().all(|&b| b == 0xEE));
        assert!(backing[32..].iter().all(|&b| b == 0xEE));
        assert_eq!(&backing[16..20], &[1, 2, 3, 7]);
        assert_eq!(&backing[29..32], &[4, 5, 6]);
    }

    #[test]
    fn null_and_oversized_are_refused_and_empty_is_fine() {
        // SAFETY: refused before any use.
        assert!(unsafe { RawMem::new(core::ptr::null_mut(), 1) }.is_none());
        // SAFETY: refused before any use.
        assert!(unsafe { RawMem::new(NonNull::<u8>::dangling().as_ptr(), usize::MAX) }.is_none());
        // A range that wraps past the end of the address space (NCCL plugin hostile
        // harness: regMr of UINTPTR_MAX - 4095, 8192 bytes was accepted).
        let top = usize::MAX - 4095;
        // SAFETY: refused before any use.
        assert!(unsafe { RawMem::new(top as *mut u8, 8192) }.is_none());
        // SAFETY: refused before any use.
        assert!(unsafe { RawMem::new(top as *mut u8, 4096) }.is_none());
        // Up to the last address (its end, ptr + len, still representable): only the
        // checks run, nothing is accessed.
        // SAFETY: never accessed (only len() is read).
        assert_eq!(
            unsafe { RawMem::new(top as *mut u8, 4095) }.map(|m| m.len()),
            Some(4095)
        );
        // SAFETY: zero bytes are never accessed.
        let mut e = unsafe { RawMem::new(core::ptr::null_mut(), 0) }.unwrap();
        assert!(e.is_empty());
        assert_eq!(e.get(0..0), Some(&[][..]));
        assert_eq!(e.write(0, &[]), Some(()));
        assert_eq!(e.write(0, &[1]), None);
    }
}
