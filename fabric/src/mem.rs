//! Memory for registered regions: zeroed buffers whose 2 MiB-aligned interior is advised
//! `MADV_HUGEPAGE` before its first touch, so that where the kernel's transparent huge
//! pages are in `madvise` mode (Debian's default) it backs them with 2 MiB pages and the
//! payload copies into and out of a region miss the TLB 512 times less often.
//!
//! A `vec![0; len]` of a few MiB is usually a fresh anonymous mapping that nothing has
//! touched (the allocator knows it is zero), so advising it after the allocation is as good
//! as before. Not always: glibc raises its mmap threshold to the size of a freed mapped
//! block, and a later allocation of that size may come from heap memory that `calloc`
//! zeroes, and so touches, first; those pages stay base pages until `khugepaged` collapses
//! them, if it does. (A `--persistent` mrc-perf server's regions for its second and third
//! clients were each 14336 kB of `AnonHugePages` all the same.)
//! Only whole 2 MiB pages inside the buffer are advised: the pages at its two ends may
//! belong to other allocations. Measured in `docs/PERFORMANCE.md` ("Sprayed arrivals").

use std::io;
use std::ops::Range;

/// Bytes in one transparent huge page on x86-64 and on arm64 with 4 KiB base pages
/// (the PMD size: `/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The addresses of the whole huge pages inside `[addr, addr + len)`: from `addr` rounded
/// up to [`HUGE_PAGE_BYTES`] to `addr + len` rounded down; `None` where no whole huge page
/// fits (or `addr + len` overflows).
pub fn huge_page_interior(addr: usize, len: usize) -> Option<Range<usize>> {
    let end = addr.checked_add(len)?;
    let start = addr.checked_next_multiple_of(HUGE_PAGE_BYTES)?;
    let end = end - end % HUGE_PAGE_BYTES;
    (start < end).then_some(start..end)
}

/// How [`advise_huge_pages`] left a buffer.
#[derive(Debug)]
pub enum HugePageAdvice {
    /// This many bytes (a multiple of [`HUGE_PAGE_BYTES`], the buffer's huge-page
    /// interior) were advised; the kernel backs them with huge pages as its THP mode and
    /// free memory allow.
    Advised {
        /// Bytes advised.
        bytes: usize,
    },
    /// The buffer holds no whole huge page: nothing to advise.
    TooSmall,
    /// `madvise` refused (`EINVAL` where the kernel has no transparent huge pages); the
    /// buffer is as it was, with base pages.
    Refused(io::Error),
}

impl HugePageAdvice {
    /// Bytes advised (0 unless [`HugePageAdvice::Advised`]).
    pub fn advised_bytes(&self) -> usize {
        match self {
            HugePageAdvice::Advised { bytes } => *bytes,
            _ => 0,
        }
    }
}

/// Advises the kernel to back the huge-page interior of `buf` ([`huge_page_interior`])
/// with transparent huge pages (`madvise(MADV_HUGEPAGE)`, Linux 2.6.38+). Best called
/// before `buf` is first written: pages already touched are collapsed later, if at all,
/// by `khugepaged`. Never changes the bytes.
pub fn advise_huge_pages(buf: &mut [u8]) -> HugePageAdvice {
    let Some(r) = huge_page_interior(buf.as_mut_ptr() as usize, buf.len()) else {
        return HugePageAdvice::TooSmall;
    };
    let bytes = r.end - r.start;
    // SAFETY: `r` lies inside `buf`, which this function borrows mutably, and starts on a
    // huge-page (hence page) boundary; MADV_HUGEPAGE changes how the kernel backs the
    // pages, never their contents or the mapping's protection.
    let rc = unsafe { libc::madvise(r.start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE) };
    if rc == 0 {
        HugePageAdvice::Advised { bytes }
    } else {
        HugePageAdvice::Refused(io::Error::last_os_error())
    }
}

/// `len` zero bytes for a region: with `huge_pages`, a fresh allocation advised by
/// [`advise_huge_pages`] before anything touches it; without, a plain `vec![0; len]`
/// ([`HugePageAdvice::TooSmall`] reports that nothing was advised).
pub fn zeroed_region(len: usize, huge_pages: bool) -> (Vec<u8>, HugePageAdvice) {
    let mut v = vec![0u8; len];
    let advice = if huge_pages {
        advise_huge_pages(&mut v)
    } else {
        HugePageAdvice::TooSmall
    };
    (v, advice)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_interior_is_the_whole_huge_pages_inside() {
        // a glibc mmap chunk: page aligned plus a 16-byte header
        let addr = 0x7f12_3440_0010;
        assert_eq!(
            huge_page_interior(addr, 16 * MIB),
            Some(0x7f12_3460_0000..0x7f12_3540_0000)
        );
        assert_eq!(huge_page_interior(addr, 16 * MIB).unwrap().len(), 14 * MIB);
        // already aligned: all of it
        assert_eq!(
            huge_page_interior(0x4000_0000, 4 * MIB),
            Some(0x4000_0000..0x4040_0000)
        );
        // one byte short of a whole page at either end
        assert_eq!(huge_page_interior(0x4000_0001, 2 * MIB), None);
        assert_eq!(huge_page_interior(0x4000_0000, 2 * MIB - 1), None);
        assert_eq!(huge_page_interior(0x4000_0000, 0), None);
        assert_eq!(huge_page_interior(usize::MAX - 10, 100), None);
        assert_eq!(huge_page_interior(usize::MAX - 10, 5), None);
    }

    /// The kernel marks the advised interior, and only it: its own mapping in
    /// `/proc/self/smaps` (madvise splits the allocation's) with the `hg` flag.
    #[test]
    fn the_kernel_sees_the_advice_on_exactly_the_interior() {
        let (v, advice) = zeroed_region(9 * MIB + 4096, true);
        assert_eq!(v.len(), 9 * MIB + 4096);
        let r = huge_page_interior(v.as_ptr() as usize, v.len()).unwrap();
        assert!(r.len() == 8 * MIB || r.len() == 6 * MIB, "{r:x?}");
        let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
        if let HugePageAdvice::Refused(e) = &advice {
            // a kernel without THP (no /sys entry) refuses with EINVAL; one with THP must not
            assert!(!thp, "THP present, yet refused: {e}");
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
            return;
        }
        assert_eq!(advice.advised_bytes(), r.len());
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let (range, flags) = mapping_of(&smaps, r.start).expect("the region's mapping");
        assert_eq!(range, r, "the advised mapping is exactly the interior");
        assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
        // the bytes are still zero and writable
        let mut v = v;
        let at = r.start - v.as_ptr() as usize;
        v[at] = 7;
        assert_eq!(v.iter().map(|&b| u64::from(b)).sum::<u64>(), 7);
    }

    #[test]
    fn without_huge_pages_or_room_nothing_is_advised() {
        let (v, advice) = zeroed_region(3 * MIB, false);
        assert_eq!((v.len(), advice.advised_bytes()), (3 * MIB, 0));
        assert!(matches!(advice, HugePageAdvice::TooSmall));
        let (v, advice) = zeroed_region(64 * 1024, true);
        assert_eq!((v.len(), advice.advised_bytes()), (64 * 1024, 0));
        assert!(matches!(advice, HugePageAdvice::TooSmall));
        assert!(matches!(
            advise_huge_pages(&mut []),
            HugePageAdvice::TooSmall
        ));
    }

    /// The mapping of `/proc/self/smaps` that holds `addr`: its range and `VmFlags`.
    fn mapping_of(smaps: &str, addr: usize) -> Option<(Range<usize>, String)> {
        let mut current: Option<Range<usize>> = None;
        for line in smaps.lines() {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                if let Some(r) = current.take() {
                    if r.contains(&addr) {
                        return Some((r, flags.to_string()));
                    }
                }
                continue;
            }
            let Some((range, _)) = line.split_once(' ') else {
                continue;
            };
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                current = Some(a..b);
            }
        }
        None
    }
}
