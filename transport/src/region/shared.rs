//! [`SharedMem`]: a buffer the application and the transport share safely. The bytes sit
//! behind a lock; the transport takes it for each placement or send payload read, the
//! application for each access through [`SharedMem::read_at`], [`SharedMem::write_at`],
//! [`SharedMem::with`] or [`SharedMem::with_mut`]. No reference to the bytes escapes a
//! call, so neither side can see the other's half-done copy, and no `unsafe` is needed.

use std::sync::{Arc, Mutex, MutexGuard};
use thiserror::Error;

/// A range outside a [`SharedMem`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("range {offset}+{len} outside a buffer of {buf_len} bytes")]
pub struct OutOfRange {
    /// First byte of the access.
    pub offset: usize,
    /// Bytes accessed.
    pub len: usize,
    /// Size of the buffer, bytes.
    pub buf_len: usize,
}

/// Application memory shared with the transport: clone it to keep a handle, register it
/// ([`super::RegionTable::register_shared`]), and read and write it while it is
/// registered; the transport places received payload straight into it and reads send
/// payload straight from it. Cloning shares the same bytes.
#[derive(Clone, Debug)]
pub struct SharedMem {
    bytes: Arc<Mutex<Box<[u8]>>>,
}

impl SharedMem {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Self {
        SharedMem::from_vec(vec![0; len])
    }

    /// Takes `v` as the buffer (no copy).
    pub fn from_vec(v: Vec<u8>) -> Self {
        SharedMem {
            bytes: Arc::new(Mutex::new(v.into_boxed_slice())),
        }
    }

    /// The bytes, locked (a panic while locked leaves plain bytes: the lock is taken
    /// anyway).
    pub(super) fn lock(&self) -> MutexGuard<'_, Box<[u8]>> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `out.len()` bytes at `offset` into `out`.
    ///
    /// # Errors
    /// [`OutOfRange`] (nothing copied).
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), OutOfRange> {
        self.with_range(offset, out.len(), |b| out.copy_from_slice(b))
    }

    /// Copies `data` to `offset`.
    ///
    /// # Errors
    /// [`OutOfRange`] (nothing written).
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), OutOfRange> {
        self.with_range_mut(offset, data.len(), |b| b.copy_from_slice(data))
    }

    /// Runs `f` on `len` bytes at `offset` with the lock held.
    ///
    /// # Errors
    /// [`OutOfRange`] (`f` not run).
    pub fn with_range<T>(
        &self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, OutOfRange> {
        let g = self.lock();
        let buf_len = g.len();
        let r = offset
            .checked_add(len)
            .and_then(|end| g.get(offset..end))
            .ok_or(OutOfRange {
                offset,
                len,
                buf_len,
            })?;
        Ok(f(r))
    }

    /// Runs `f` on `len` writable bytes at `offset` with the lock held.
    ///
    /// # Errors
    /// [`OutOfRange`] (`f` not run).
    pub fn with_range_mut<T>(
        &self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> Result<T, OutOfRange> {
        let mut g = self.lock();
        let buf_len = g.len();
        let r = offset
            .checked_add(len)
            .and_then(|end| g.get_mut(offset..end))
            .ok_or(OutOfRange {
                offset,
                len,
                buf_len,
            })?;
        Ok(f(r))
    }

    /// Runs `f` on all the bytes with the lock held. Do not call into the transport
    /// driving this buffer from inside `f` (it would wait for the lock `f` holds).
    pub fn with<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        f(&self.lock())
    }

    /// Runs `f` on all the bytes, writable, with the lock held (same caveat as
    /// [`SharedMem::with`]).
    pub fn with_mut<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> T {
        f(&mut self.lock())
    }

    /// Whether `a` and `b` share the same bytes.
    pub fn ptr_eq(a: &SharedMem, b: &SharedMem) -> bool {
        Arc::ptr_eq(&a.bytes, &b.bytes)
    }
}
