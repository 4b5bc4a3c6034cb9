//! The process-wide UDP source-port allocator.
//!
//! Every EV socket of every connection in the process is bound to its own source port (the
//! port is the EV's entropy: ECMP hashes it). Ports come from one configurable inclusive range
//! and are handed out next-fit (a cursor walks the range, wrapping), so a port that was just
//! released is the last to be taken again. A port is held by its [`PortLease`] and returns to
//! the pool when the lease drops; a port in use is never handed out twice.
//!
//! Ports the allocator thinks free may still be taken by another process: [`PortAllocator::
//! alloc_with`] tries the bind and skips a port whose bind fails with `EADDRINUSE`.

use std::io;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, OnceLock};
use thiserror::Error;

/// Default range of EV source ports: 20000..=29999 (below Linux's default ephemeral range
/// 32768..=60999, `net.ipv4.ip_local_port_range`, so kernel-chosen ports rarely collide).
pub const DEFAULT_PORT_RANGE: RangeInclusive<u16> = 20000..=29999;

/// Why no port could be allocated.
#[derive(Debug, Error)]
pub enum PortError {
    /// Every port of the range is leased (or was busy in another process at the last try).
    #[error("no free UDP source port in {first}..={last}")]
    Exhausted {
        /// First port of the range.
        first: u16,
        /// Last port of the range.
        last: u16,
    },
    /// The range is empty (`first > last`) or contains port 0.
    #[error("invalid port range {first}..={last}")]
    BadRange {
        /// First port of the range.
        first: u16,
        /// Last port of the range.
        last: u16,
    },
    /// Binding failed for another reason than `EADDRINUSE`.
    #[error("bind to port {port} failed: {source}")]
    Bind {
        /// The port tried.
        port: u16,
        /// The OS error.
        source: io::Error,
    },
}

#[derive(Debug)]
struct Pool {
    first: u16,
    /// `in_use[i]` for port `first + i`.
    in_use: Vec<bool>,
    /// Index of the next port to try.
    cursor: usize,
    leased: usize,
}

/// A thread-safe allocator of UDP ports from one inclusive range. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct PortAllocator {
    pool: Arc<Mutex<Pool>>,
}

/// One leased port; the port returns to its allocator when the lease drops.
#[derive(Debug)]
pub struct PortLease {
    port: u16,
    pool: Arc<Mutex<Pool>>,
}

impl PortLease {
    /// The leased port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        let mut p = lock(&self.pool);
        let idx = usize::from(self.port - p.first);
        if let Some(slot) = p.in_use.get_mut(idx)
            && *slot
        {
            *slot = false;
            p.leased -= 1;
        }
    }
}

fn lock(pool: &Mutex<Pool>) -> std::sync::MutexGuard<'_, Pool> {
    // A panic while holding the lock cannot leave the pool inconsistent (single-field
    // updates), so a poisoned lock is still usable.
    pool.lock().unwrap_or_else(|e| e.into_inner())
}

impl PortAllocator {
    /// An allocator over `range` (inclusive).
    ///
    /// # Errors
    /// [`PortError::BadRange`] for an empty range or one containing port 0.
    pub fn new(range: RangeInclusive<u16>) -> Result<Self, PortError> {
        let (first, last) = (*range.start(), *range.end());
        if first == 0 || first > last {
            return Err(PortError::BadRange { first, last });
        }
        let n = usize::from(last - first) + 1;
        Ok(PortAllocator {
            pool: Arc::new(Mutex::new(Pool {
                first,
                in_use: vec![false; n],
                cursor: 0,
                leased: 0,
            })),
        })
    }

    /// The process-wide allocator, created on first use with [`DEFAULT_PORT_RANGE`] unless
    /// [`PortAllocator::configure_global`] ran first.
    pub fn global() -> &'static PortAllocator {
        GLOBAL.get_or_init(|| {
            PortAllocator::new(DEFAULT_PORT_RANGE).unwrap_or_else(|_| unreachable_range())
        })
    }

    /// Sets the range of the process-wide allocator. Returns `false` (and changes nothing)
    /// when the global allocator already exists.
    ///
    /// # Errors
    /// [`PortError::BadRange`] as [`PortAllocator::new`].
    pub fn configure_global(range: RangeInclusive<u16>) -> Result<bool, PortError> {
        let a = PortAllocator::new(range)?;
        Ok(GLOBAL.set(a).is_ok())
    }

    /// The range, inclusive.
    pub fn range(&self) -> RangeInclusive<u16> {
        let p = lock(&self.pool);
        let last = p.first + (p.in_use.len() - 1) as u16;
        p.first..=last
    }

    /// Ports currently leased.
    pub fn leased(&self) -> usize {
        lock(&self.pool).leased
    }

    /// Leases the next free port (next-fit from the cursor).
    ///
    /// # Errors
    /// [`PortError::Exhausted`] when every port is leased.
    pub fn alloc(&self) -> Result<PortLease, PortError> {
        self.alloc_with(|_| Ok(())).map(|(l, ())| l)
    }

    /// Leases the next free port for which `bind(port)` succeeds and returns the lease with
    /// what `bind` returned. A port whose `bind` fails with `EADDRINUSE` (taken by another
    /// process) is skipped and stays free; each free port is tried at most once.
    ///
    /// # Errors
    /// [`PortError::Exhausted`] when no free port could be bound; [`PortError::Bind`] for a
    /// bind error other than `EADDRINUSE`.
    pub fn alloc_with<T>(
        &self,
        mut bind: impl FnMut(u16) -> io::Result<T>,
    ) -> Result<(PortLease, T), PortError> {
        let mut p = lock(&self.pool);
        let n = p.in_use.len();
        for _ in 0..n {
            let idx = p.cursor;
            p.cursor = (p.cursor + 1) % n;
            if p.in_use[idx] {
                continue;
            }
            let port = p.first + idx as u16;
            match bind(port) {
                Ok(t) => {
                    p.in_use[idx] = true;
                    p.leased += 1;
                    let lease = PortLease {
                        port,
                        pool: Arc::clone(&self.pool),
                    };
                    return Ok((lease, t));
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                Err(source) => return Err(PortError::Bind { port, source }),
            }
        }
        let last = p.first + (n - 1) as u16;
        Err(PortError::Exhausted {
            first: p.first,
            last,
        })
    }
}

static GLOBAL: OnceLock<PortAllocator> = OnceLock::new();

#[cold]
fn unreachable_range() -> PortAllocator {
    // DEFAULT_PORT_RANGE is a valid constant range; this is never reached.
    panic!("DEFAULT_PORT_RANGE is invalid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_fit_exact_ports_and_exhaustion() {
        let a = PortAllocator::new(5000..=5003).unwrap();
        let l: Vec<PortLease> = (0..4).map(|_| a.alloc().unwrap()).collect();
        let ports: Vec<u16> = l.iter().map(PortLease::port).collect();
        assert_eq!(ports, vec![5000, 5001, 5002, 5003]);
        assert_eq!(a.leased(), 4);
        match a.alloc() {
            Err(PortError::Exhausted { first, last }) => assert_eq!((first, last), (5000, 5003)),
            other => panic!("expected Exhausted, got {other:?}"),
        }
        let mut l = l;
        drop(l.remove(1)); // port 5001 back
        assert_eq!(a.leased(), 3);
        assert_eq!(a.alloc().unwrap().port(), 5001);
    }

    #[test]
    fn released_port_is_taken_last() {
        let a = PortAllocator::new(7000..=7002).unwrap();
        let p0 = a.alloc().unwrap();
        assert_eq!(p0.port(), 7000);
        drop(p0);
        // Cursor is at 7001: 7001, 7002, then wrap to 7000.
        let b: Vec<u16> = (0..3)
            .map(|_| a.alloc().unwrap())
            .map(|l| l.port())
            .collect();
        // Each lease dropped immediately: 7001, 7002, 7000.
        assert_eq!(b, vec![7001, 7002, 7000]);
    }

    #[test]
    fn busy_ports_are_skipped_and_other_errors_reported() {
        let a = PortAllocator::new(6000..=6002).unwrap();
        let (l, v) = a
            .alloc_with(|p| {
                if p == 6000 {
                    Err(io::Error::from(io::ErrorKind::AddrInUse))
                } else {
                    Ok(p * 2)
                }
            })
            .unwrap();
        assert_eq!((l.port(), v), (6001, 12002));
        match a.alloc_with(|_| -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }) {
            Err(PortError::Bind { port, .. }) => assert_eq!(port, 6002),
            other => panic!("expected Bind error, got {other:?}"),
        }
        // Everything busy elsewhere: exhausted, and nothing was leased.
        match a.alloc_with(|_| -> io::Result<()> { Err(io::Error::from(io::ErrorKind::AddrInUse)) })
        {
            Err(PortError::Exhausted { first, last }) => assert_eq!((first, last), (6000, 6002)),
            other => panic!("expected Exhausted, got {other:?}"),
        }
        assert_eq!(a.leased(), 1);
    }

    #[test]
    fn bad_ranges() {
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 10..=9;
        assert!(matches!(
            PortAllocator::new(empty),
            Err(PortError::BadRange { first: 10, last: 9 })
        ));
        assert!(matches!(
            PortAllocator::new(0..=9),
            Err(PortError::BadRange { first: 0, last: 9 })
        ));
        let a = PortAllocator::new(65535..=65535).unwrap();
        assert_eq!(a.range(), 65535..=65535);
        assert_eq!(a.alloc().unwrap().port(), 65535);
    }
}
