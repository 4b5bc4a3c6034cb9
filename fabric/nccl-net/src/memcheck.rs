//! The range check `ibv_reg_mr` makes before it registers memory, done for `regMr`: the
//! kernel pins every page of the range, so a range that wraps past the end of the address
//! space, or whose pages are not all mapped readable and writable, is refused there
//! (`EINVAL`, `EFAULT`). Without the check, NCCL's `regMr` of 64 TiB at any address was
//! taken, and the first packet placed there faulted.
//!
//! The check reads `/proc/self/maps` (one line per mapping, ascending, no allocation sized
//! by the range): the range must lie in consecutive mappings without a gap, each with `r`
//! and `w` (the plugin registers every buffer for local writes, as NCCL's receive buffers
//! are written and its send buffers may be either).

use std::io::{BufRead, BufReader};

/// Why a range cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// A null pointer with a nonzero length.
    #[error("address 0 is not mapped")]
    Null,
    /// `start + len` does not fit the address space.
    #[error("{len} bytes at {start:#x} wrap past the end of the address space")]
    Wraps {
        /// First byte.
        start: usize,
        /// Length, bytes.
        len: usize,
    },
    /// A byte of the range lies in no mapping.
    #[error("{len} bytes at {start:#x}: the byte at {at:#x} is not mapped")]
    Unmapped {
        /// First byte of the range.
        start: usize,
        /// Length, bytes.
        len: usize,
        /// First byte found unmapped.
        at: usize,
    },
    /// A mapping in the range is not readable and writable.
    #[error(
        "{len} bytes at {start:#x}: the mapping {map_start:#x}-{map_end:#x} is {perms}, not readable and writable"
    )]
    Protection {
        /// First byte of the range.
        start: usize,
        /// Length, bytes.
        len: usize,
        /// The mapping's first byte.
        map_start: usize,
        /// The mapping's end (exclusive).
        map_end: usize,
        /// Its permissions as the kernel prints them (`r--p`, `---p`).
        perms: String,
    },
    /// `/proc/self/maps` could not be read.
    #[error("cannot read /proc/self/maps: {0}")]
    Maps(String),
}

/// Checks that `len` bytes at `start` can be registered: 0 bytes anywhere, else a
/// non-null, non-wrapping range wholly inside readable and writable mappings.
///
/// # Errors
/// The first [`RangeError`] found.
pub fn check_range(start: usize, len: usize) -> Result<(), RangeError> {
    if len == 0 {
        return Ok(());
    }
    if start == 0 {
        return Err(RangeError::Null);
    }
    let end = start
        .checked_add(len)
        .ok_or(RangeError::Wraps { start, len })?;
    let f = std::fs::File::open("/proc/self/maps").map_err(|e| RangeError::Maps(e.to_string()))?;
    // the next byte that must be covered
    let mut need = start;
    for line in BufReader::new(f).lines() {
        let line = line.map_err(|e| RangeError::Maps(e.to_string()))?;
        let Some((lo, hi, perms)) = parse_line(&line) else {
            continue;
        };
        if hi <= need {
            continue;
        }
        if lo > need {
            break; // a gap before this mapping
        }
        if !(perms.starts_with("rw")) {
            return Err(RangeError::Protection {
                start,
                len,
                map_start: lo,
                map_end: hi,
                perms: perms.to_string(),
            });
        }
        need = hi;
        if need >= end {
            return Ok(());
        }
    }
    Err(RangeError::Unmapped {
        start,
        len,
        at: need,
    })
}

/// `lo-hi perms ...` of one `/proc/self/maps` line.
fn parse_line(line: &str) -> Option<(usize, usize, &str)> {
    let mut it = line.split_ascii_whitespace();
    let (lo, hi) = it.next()?.split_once('-')?;
    let perms = it.next()?;
    Some((
        usize::from_str_radix(lo, 16).ok()?,
        usize::from_str_radix(hi, 16).ok()?,
        perms,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// Maps `pages` anonymous pages with `prot`; returns the address.
    fn map(pages: usize, prot: i32) -> usize {
        // SAFETY: a fresh anonymous mapping, unmapped by the caller.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * PAGE,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    fn unmap(at: usize, pages: usize) {
        // SAFETY: a range this test mapped.
        assert_eq!(unsafe { libc::munmap(at as *mut _, pages * PAGE) }, 0);
    }

    #[test]
    fn mapped_ranges_pass_and_the_rest_is_refused_with_its_reason() {
        let buf = vec![0u8; 1 << 20];
        let p = buf.as_ptr() as usize;
        assert_eq!(check_range(p, buf.len()), Ok(()));
        assert_eq!(check_range(p + 10, 100), Ok(()));
        assert_eq!(check_range(0, 0), Ok(()));
        assert_eq!(check_range(0, 8), Err(RangeError::Null));
        assert_eq!(
            check_range(usize::MAX - 10, 64),
            Err(RangeError::Wraps {
                start: usize::MAX - 10,
                len: 64
            })
        );
        // 64 TiB from a real buffer: refused where its mappings end (a gap or a guard
        // page), read line by line
        let tib64 = 64usize << 40;
        match check_range(p, tib64) {
            Err(RangeError::Unmapped { at, .. }) => assert!(at > p && at < p + tib64),
            Err(RangeError::Protection { map_start, .. }) => assert!(map_start > p),
            other => panic!("{other:?}"),
        }
        // 64 TiB at a page nothing maps (below mmap_min_addr)
        assert_eq!(
            check_range(0x1000, tib64),
            Err(RangeError::Unmapped {
                start: 0x1000,
                len: tib64,
                at: 0x1000
            })
        );
        assert_eq!(
            check_range(0x1000, tib64).unwrap_err().to_string(),
            "70368744177664 bytes at 0x1000: the byte at 0x1000 is not mapped"
        );
        // three pages with the middle one unmapped: the hole is named
        let m = map(3, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(check_range(m, 3 * PAGE), Ok(()));
        unmap(m + PAGE, 1);
        assert_eq!(
            check_range(m, 3 * PAGE),
            Err(RangeError::Unmapped {
                start: m,
                len: 3 * PAGE,
                at: m + PAGE
            })
        );
        assert_eq!(check_range(m, PAGE), Ok(()));
        unmap(m, 1);
        unmap(m + 2 * PAGE, 1);
        // a reservation without access (what a GPU runtime keeps) and read-only memory
        let none = map(2, libc::PROT_NONE);
        let e = check_range(none, PAGE).unwrap_err();
        assert!(
            e.to_string().contains("is ---p, not readable and writable"),
            "{e}"
        );
        unmap(none, 2);
        let ro = map(1, libc::PROT_READ);
        assert!(matches!(
            check_range(ro, 16),
            Err(RangeError::Protection { .. })
        ));
        unmap(ro, 1);
        drop(buf);
    }
}
