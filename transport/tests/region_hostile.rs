//! Region table edge cases a hostile peer or a careless application reaches, written to
//! run under Miri as well (`cargo +nightly miri test -p mrc-transport --test
//! region_hostile`): overlapping raw registrations of one buffer, the application writing
//! its buffer between transport calls, zero-length regions and accesses at the exact
//! ends, u64 wrap of address + length, access rights, and rkeys coming back after the
//! 8-bit key variant wraps (sequential tables) with the old address still refused.

use mrc_transport::region::{AccessError, REGION_ALIGN_BYTES, RegionTable};
use mrc_transport::{Access, RawMem, SharedMem};

/// Two live raw registrations overlapping by 32 bytes of one buffer (allowed by contract
/// 3 when one thread drives both): a WRITE into one is read through the other at the
/// shifted offset; no access through either reaches the bytes outside the union; the
/// application's own writes between calls are seen by the transport and vice versa.
#[test]
fn overlapping_raw_regions_and_application_writes_between_calls() {
    let mut backing = vec![0xC3u8; 16 + 96 + 16];
    let base = backing.as_mut_ptr();
    let mut t = RegionTable::new(0x5500);
    let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
    // SAFETY: `backing` is not moved and outlives both registrations (deregistered before
    // the table is dropped); the test touches it only between table calls, through
    // `base` (the pointer both regions derive from).
    let (ka, kb) = unsafe {
        let a = RawMem::new(base.add(16), 64).unwrap();
        let b = RawMem::new(base.add(16 + 32), 64).unwrap();
        (
            t.register_raw(a, rw).unwrap(),
            t.register_raw(b, rw).unwrap(),
        )
    };
    // Into A's byte 40 = B's byte 8.
    t.place_remote(ka.rkey, ka.addr + 40, b"overlap!").unwrap();
    assert_eq!(&*t.read(kb.lkey, kb.addr + 8, 8).unwrap(), b"overlap!");
    // Last byte of B (backing[16 + 32 + 63]) is in bounds; one more is not.
    t.place_remote(kb.rkey, kb.addr + 63, b"Z").unwrap();
    assert_eq!(
        t.place_remote(kb.rkey, kb.addr + 63, b"ZZ"),
        Err(AccessError::OutOfBounds {
            addr: kb.addr + 63,
            len: 2
        })
    );
    // B's rkey with an address inside A but below B: refused (addresses are per region).
    assert_eq!(
        t.place_remote(kb.rkey, ka.addr, b"x"),
        Err(AccessError::OutOfBounds {
            addr: ka.addr,
            len: 1
        })
    );
    // The application writes its buffer between calls (through the pointer the regions
    // derive from), and the transport reads it.
    // SAFETY: no table call is running; index 16 + 1 is inside `backing`.
    unsafe { base.add(17).write(0x42) };
    assert_eq!(&*t.read(ka.lkey, ka.addr + 1, 1).unwrap(), &[0x42]);
    t.place_local(ka.lkey, ka.addr + 2, &[0x43]).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { base.add(18).read() }, 0x43);
    t.deregister(ka.lkey).unwrap();
    t.deregister(kb.lkey).unwrap();
    drop(t);
    assert!(backing[..16].iter().all(|&b| b == 0xC3));
    assert!(backing[16 + 96..].iter().all(|&b| b == 0xC3));
    assert_eq!(&backing[16 + 40..16 + 48], b"overlap!");
    assert_eq!(backing[16 + 32 + 63], b'Z');
    assert_eq!(&backing[17..19], &[0x42, 0x43]);
    let changed = backing.iter().filter(|&&b| b != 0xC3).count();
    assert_eq!(changed, 8 + 1 + 2);
}

/// Zero-length regions (a null pointer is fine at length 0) and zero-length accesses:
/// allowed at the first byte and at one past the last byte, refused one further and below
/// the start; `addr + len` wrapping u64 is refused however it is split.
#[test]
fn zero_lengths_exact_ends_and_u64_wrap() {
    let mut t = RegionTable::new(0);
    // SAFETY: zero bytes are never accessed.
    let empty = unsafe { RawMem::new(core::ptr::null_mut(), 0) }.unwrap();
    let e = t.register_raw(empty, Access::REMOTE_WRITE).unwrap();
    assert_eq!(e.len, 0);
    assert_eq!(t.place_remote(e.rkey, e.addr, &[]), Ok(()));
    assert_eq!(
        t.place_remote(e.rkey, e.addr, &[1]),
        Err(AccessError::OutOfBounds {
            addr: e.addr,
            len: 1
        })
    );
    assert_eq!(
        t.place_remote(e.rkey, e.addr + 1, &[]),
        Err(AccessError::OutOfBounds {
            addr: e.addr + 1,
            len: 0
        })
    );
    assert_eq!(t.bytes(e.lkey).unwrap(), &[] as &[u8]);
    // The next region starts after a guard page: e's address + one page is not in it.
    let mut backing = [7u8; 8];
    // SAFETY: `backing` outlives the table's use of it (deregistered below), untouched.
    let raw = unsafe { RawMem::new(backing.as_mut_ptr(), 8) }.unwrap();
    let k = t.register_raw(raw, Access::REMOTE_WRITE).unwrap();
    assert_eq!(k.addr, e.addr + REGION_ALIGN_BYTES);
    for (addr, len) in [
        (k.addr + 8, 0u64),
        (k.addr, 8),
        (k.addr + 4, 4),
        (k.addr + 7, 1),
    ] {
        assert_eq!(
            t.check_remote_write(k.rkey, addr, len),
            Ok(()),
            "{addr:#x}+{len}"
        );
    }
    for (addr, len) in [
        (k.addr + 9, 0u64),
        (k.addr + 8, 1),
        (k.addr - 1, 0),
        (k.addr - 1, 2),
        (k.addr + 1, u64::MAX),
        (u64::MAX, 1),
        (u64::MAX, 0),
        (k.addr, u64::MAX - k.addr + 1),
    ] {
        assert_eq!(
            t.check_remote_write(k.rkey, addr, len),
            Err(AccessError::OutOfBounds { addr, len }),
            "{addr:#x}+{len}"
        );
        assert_eq!(
            t.check_local_read(k.lkey, addr, len),
            Err(AccessError::OutOfBounds { addr, len })
        );
        assert!(t.read(k.lkey, addr, len).is_err());
    }
    // No LOCAL_WRITE right: a local delivery is refused, the bytes stay.
    assert_eq!(
        t.place_local(k.lkey, k.addr, &[0]),
        Err(AccessError::NoAccess)
    );
    t.deregister(k.lkey).unwrap();
    assert_eq!(backing, [7u8; 8]);
}

/// Sequential tables (simulator, tests) make rkey = lkey ^ salt and lkeys from an 8-bit
/// variant: after 256 registrations in one slot the rkey of a deregistered region names
/// a live one again. What keeps a late WRITE for the old region out is the address: a
/// sequential table never reuses one, so the old address is outside the new region.
/// A random table never gives back the old rkey in those 256 registrations.
#[test]
#[cfg_attr(
    miri,
    ignore = "no unsafe here, and 512 registrations take minutes under Miri"
)]
fn an_rkey_that_comes_back_after_the_variant_wraps_still_refuses_the_old_address() {
    let mut t = RegionTable::new(0xAB00);
    let old = t.register(64, Access::REMOTE_WRITE).unwrap();
    t.deregister(old.lkey).unwrap();
    let mut again = None;
    for i in 1..=256u32 {
        let k = t.register(64, Access::REMOTE_WRITE).unwrap();
        assert_eq!(k.lkey >> 8, 0);
        if k.rkey == old.rkey {
            again = Some((i, k));
            break;
        }
        t.deregister(k.lkey).unwrap();
    }
    let (i, k) = again.expect("the 8-bit variant wraps within 256 registrations");
    assert_eq!(i, 256);
    assert_eq!(k.lkey, old.lkey);
    assert_eq!(k.addr, old.addr + 256 * 2 * REGION_ALIGN_BYTES);
    assert_eq!(
        t.place_remote(old.rkey, old.addr, &[1]),
        Err(AccessError::OutOfBounds {
            addr: old.addr,
            len: 1
        })
    );
    assert!(t.bytes(k.lkey).unwrap().iter().all(|&b| b == 0));

    let mut r = RegionTable::random([9; 32]);
    let old = r.register(64, Access::REMOTE_WRITE).unwrap();
    r.deregister(old.lkey).unwrap();
    for _ in 0..256 {
        let k = r.register(64, Access::REMOTE_WRITE).unwrap();
        assert_ne!(k.rkey, old.rkey);
        assert_eq!(
            r.place_remote(old.rkey, old.addr, &[1]),
            Err(AccessError::UnknownKey(old.rkey))
        );
        r.deregister(k.lkey).unwrap();
    }
}

/// A `SharedMem` registered twice (two regions, one buffer) and written by the application
/// through its handle between calls: every side sees the same bytes, and deregistering one
/// registration leaves the other working.
#[test]
fn one_shared_buffer_registered_twice() {
    let mem = SharedMem::new(16);
    let mut t = RegionTable::random([4; 32]);
    let a = t.register_shared(&mem, Access::REMOTE_WRITE).unwrap();
    let b = t.register_shared(&mem, Access::REMOTE_WRITE).unwrap();
    assert_ne!(a.rkey, b.rkey);
    t.place_remote(a.rkey, a.addr + 15, b"A").unwrap();
    assert_eq!(&*t.read(b.lkey, b.addr + 15, 1).unwrap(), b"A");
    t.deregister(a.lkey).unwrap();
    assert_eq!(
        t.place_remote(a.rkey, a.addr, b"x"),
        Err(AccessError::UnknownKey(a.rkey))
    );
    mem.write_at(0, b"app").unwrap();
    t.place_remote(b.rkey, b.addr + 3, b"!").unwrap();
    assert_eq!(mem.with(|m| m[..4].to_vec()), b"app!");
    assert_eq!(mem.with(|m| m[15]), b'A');
}

/// The application writes its `Vec` by index between table calls (contract 2: "between
/// calls the application may read and write the bytes freely"), while the region was
/// registered from `Vec::as_mut_ptr`: defined under Stacked and Tree Borrows (a `Vec`'s
/// heap pointer is not a unique borrow, so indexing does not invalidate the region's
/// pointer; a `Box<[u8]>` moved after registration would: see `region::mem`).
#[test]
fn vec_written_by_index_between_calls() {
    let mut v = vec![0u8; 16];
    let mut t = RegionTable::new(0);
    // SAFETY: `v` is not reallocated and is touched only between table calls.
    let raw = unsafe { RawMem::new(v.as_mut_ptr(), 16) }.unwrap();
    let k = t.register_raw(raw, Access::REMOTE_WRITE).unwrap();
    v[1] = 5;
    t.place_remote(k.rkey, k.addr + 3, &[9]).unwrap();
    v[2] = 6;
    assert_eq!(&*t.read(k.lkey, k.addr + 1, 3).unwrap(), &[5, 6, 9]);
    t.place_remote(k.rkey, k.addr + 4, &[8]).unwrap();
    t.deregister(k.lkey).unwrap();
    assert_eq!(&v[..6], &[0, 5, 6, 9, 8, 0]);
}

/// Regions keyed by their caller (`register_raw_at`, a libfabric provider's keys): two of
/// them at the same address (offset addressing) and a generated one; a WRITE lands by
/// rkey at the exact offset, one past either end or under an unknown key is refused and
/// writes nothing; a taken rkey and a wrapping range are refused; deregistering a keyed
/// region leaves the generated one's address reserved.
#[test]
fn regions_at_caller_keys_and_addresses() {
    let mut backing = vec![0u8; 64];
    let base = backing.as_mut_ptr();
    let mut t = RegionTable::new(0x7700);
    let rw = Access::REMOTE_WRITE;
    // SAFETY: `backing` is not moved and outlives the registrations (the table is dropped
    // first); it is touched only between table calls, through `base`.
    let (ka, kb) = unsafe {
        let a = RawMem::new(base, 32).unwrap();
        let b = RawMem::new(base.add(32), 32).unwrap();
        (
            t.register_raw_at(a, rw, 0xC0DE, 0).unwrap(),
            t.register_raw_at(b, rw, 0xC0DF, 0).unwrap(),
        )
    };
    assert_eq!((ka.rkey, ka.addr, ka.len), (0xC0DE, 0, 32));
    assert_eq!((kb.rkey, kb.addr, kb.len), (0xC0DF, 0, 32));
    let g = t.register(16, rw).unwrap();
    t.place_remote(0xC0DF, 30, b"ab").unwrap();
    t.place_remote(0xC0DE, 0, b"xy").unwrap();
    assert_eq!(
        t.place_remote(0xC0DE, 31, b"zz"),
        Err(AccessError::OutOfBounds { addr: 31, len: 2 })
    );
    assert_eq!(
        t.place_remote(0xC0E0, 0, b"zz"),
        Err(AccessError::UnknownKey(0xC0E0))
    );
    // SAFETY: as above; the refused registrations drop their RawMem unused.
    unsafe {
        let c = RawMem::new(base, 8).unwrap();
        assert_eq!(
            t.register_raw_at(c, rw, 0xC0DE, 4096),
            Err(mrc_transport::region::RegisterError::KeyInUse(0xC0DE))
        );
        let d = RawMem::new(base, 8).unwrap();
        assert_eq!(
            t.register_raw_at(d, rw, 0x1234, u64::MAX - 4),
            Err(mrc_transport::region::RegisterError::KeyInUse(0x1234))
        );
    }
    t.deregister(ka.lkey).unwrap();
    assert_eq!(
        t.place_remote(0xC0DE, 0, b"q"),
        Err(AccessError::UnknownKey(0xC0DE))
    );
    t.place_remote(g.rkey, g.addr, b"g").unwrap();
    let next = t.register(16, rw).unwrap();
    assert_eq!(next.addr, g.addr + 2 * REGION_ALIGN_BYTES);
    drop(t);
    let mut want = vec![0u8; 64];
    want[..2].copy_from_slice(b"xy");
    want[62..].copy_from_slice(b"ab");
    assert_eq!(backing, want);
}
