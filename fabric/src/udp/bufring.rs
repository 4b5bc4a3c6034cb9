//! A provided buffer ring (`IORING_REGISTER_PBUF_RING`, io_uring 5.19+) for the multishot
//! receive of [`super::UringDatapath`]: `count` buffers of `buf_bytes` each, handed to the
//! kernel through a ring of `io_uring_buf` entries in memory shared with it. The kernel
//! takes one buffer per received datagram (or GRO run) and names it in the completion
//! (`IORING_CQE_F_BUFFER`, the buffer id in the upper 16 bits of the CQE flags); the
//! datapath hands it back with [`BufRing::recycle`] once the datagram has been delivered,
//! and [`BufRing::publish`] makes the returned ones visible to the kernel (one release
//! store of the ring's tail per receive burst).

use io_uring::types::BufRingEntry;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

/// The ring and its buffers. The ring memory is an anonymous mapping (page aligned, as the
/// kernel wants); the buffers one heap allocation, buffer `bid` at `bid * buf_bytes`.
pub(crate) struct BufRing {
    ring: *mut BufRingEntry,
    ring_bytes: usize,
    count: u16,
    buf_bytes: usize,
    bufs: Box<[u8]>,
    /// Local tail: entries written but maybe not yet published.
    tail: u16,
}

impl BufRing {
    /// A ring of `count` buffers (a power of two, 1..=32768) of `buf_bytes` each, every
    /// buffer already in the ring (published once the ring is registered).
    ///
    /// # Errors
    /// `InvalidInput` for a bad `count` or `buf_bytes` (0 or above `u32::MAX`), or the
    /// `mmap` error.
    pub(crate) fn new(count: u16, buf_bytes: usize) -> io::Result<Self> {
        if count == 0 || !count.is_power_of_two() || count > 32768 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer ring size must be a power of two in 1..=32768",
            ));
        }
        if buf_bytes == 0 || u32::try_from(buf_bytes).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer ring buffers must hold 1..=u32::MAX bytes",
            ));
        }
        let ring_bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut r = BufRing {
            ring: p.cast(),
            ring_bytes,
            count,
            buf_bytes,
            bufs: vec![0u8; usize::from(count) * buf_bytes].into_boxed_slice(),
            tail: 0,
        };
        for bid in 0..count {
            r.recycle(bid);
        }
        r.publish();
        Ok(r)
    }

    /// The ring's address and entry count, for `register_buf_ring`.
    pub(crate) fn ring_addr(&self) -> u64 {
        self.ring as u64
    }

    /// Entries in the ring.
    pub(crate) fn count(&self) -> u16 {
        self.count
    }

    /// Buffer `bid` (all `buf_bytes` of it); `None` for an id out of range.
    pub(crate) fn buf(&self, bid: u16) -> Option<&[u8]> {
        let start = usize::from(bid).checked_mul(self.buf_bytes)?;
        self.bufs.get(start..start + self.buf_bytes)
    }

    /// Writes buffer `bid` into the next free entry (visible to the kernel at the next
    /// [`BufRing::publish`]). Ids out of range are ignored: the kernel only names ids the
    /// ring holds, so one out of range is never handed back.
    pub(crate) fn recycle(&mut self, bid: u16) {
        if bid >= self.count {
            return;
        }
        let idx = usize::from(self.tail & (self.count - 1));
        let addr = self.bufs.as_ptr() as u64 + u64::from(bid) * self.buf_bytes as u64;
        // SAFETY: `idx < count`, within the mapping; the kernel reads an entry only once the
        // published tail passes it, and this entry is past the published tail (the kernel
        // consumed it: at most `count` buffers exist, each in the ring at most once).
        unsafe {
            let e = &mut *self.ring.add(idx);
            e.set_addr(addr);
            e.set_len(self.buf_bytes as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the entries written since the last call (a release store of the tail,
    /// so the kernel sees the entries before the tail).
    pub(crate) fn publish(&self) {
        // SAFETY: the tail field lies in the first entry of our live mapping, 2-byte
        // aligned; the kernel reads it with an acquire load.
        unsafe {
            let t = BufRingEntry::tail(self.ring).cast_mut();
            (*t.cast::<AtomicU16>()).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; the datapath unregisters the
        // ring (or drops its io_uring) before dropping this.
        unsafe {
            libc::munmap(self.ring.cast(), self.ring_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        assert!(BufRing::new(0, 4096).is_err());
        assert!(BufRing::new(3, 4096).is_err());
        assert!(BufRing::new(4, 0).is_err());
    }

    #[test]
    fn fills_every_entry_and_publishes_the_tail() {
        let r = BufRing::new(8, 100).unwrap();
        assert_eq!(r.count(), 8);
        // SAFETY: reads the entries and tail of the live mapping.
        unsafe {
            for i in 0..8u16 {
                let e = &*r.ring.add(usize::from(i));
                assert_eq!(e.bid(), i);
                assert_eq!(e.len(), 100);
                assert_eq!(e.addr(), r.bufs.as_ptr() as u64 + u64::from(i) * 100);
            }
            assert_eq!(*BufRingEntry::tail(r.ring), 8);
        }
        assert_eq!(r.buf(7).map(<[u8]>::len), Some(100));
        assert!(r.buf(8).is_none());
    }

    #[test]
    fn recycle_wraps_and_ignores_foreign_ids() {
        let mut r = BufRing::new(4, 16).unwrap();
        r.recycle(9); // out of range: ignored
        r.recycle(2);
        r.publish();
        // SAFETY: as above.
        unsafe {
            assert_eq!(*BufRingEntry::tail(r.ring), 5);
            // Entry 4 & 3 == 0 was overwritten with buffer 2.
            assert_eq!((*r.ring).bid(), 2);
        }
    }
}
