//! Fuzz registration and placement against application-owned memory
//! (`mrc_transport::region`, issue 18).
//!
//! One arena of application memory (8 KiB, a known pattern) from which raw regions are
//! registered at fuzzer-chosen, non-overlapping offsets (`RegionTable::register_raw`),
//! plus `SharedMem` regions; the fuzzer registers, deregisters, and places (remote WRITE
//! under an rkey, local delivery under an lkey) and reads with keys that are right,
//! flipped or stale and addresses relative to a region or absolute (below, inside,
//! straddling, past the end, overflowing). A model predicts every result exactly:
//! an access succeeds iff a live region has the key, the needed right and the whole
//! range; the model applies only successful placements. After every operation the
//! arena (guard bytes between regions included) and every shared buffer equal the model
//! byte for byte: nothing outside a registered region is ever written.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mrc_transport::region::{Access, AccessError, MrKey, RawMem, RegionTable, SharedMem};

const ARENA: usize = 8192;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Addr {
    /// The region's address plus `d`.
    Rel(i32),
    /// Any address.
    Abs(u64),
}

#[derive(Arbitrary, Debug)]
enum Op {
    RegisterRaw { off: u16, len: u16, access: u8 },
    RegisterShared { len: u16, access: u8 },
    Deregister { which: u8 },
    PlaceRemote { which: u8, flip: u32, addr: Addr, len: u16 },
    PlaceLocal { which: u8, flip: u32, addr: Addr, len: u16 },
    Read { which: u8, addr: Addr, len: u16 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    random_keys: bool,
    key: [u8; 32],
    ops: Vec<Op>,
}

enum Mem {
    Raw { off: usize },
    Shared { mem: SharedMem, model: Vec<u8> },
}

struct Reg {
    key: MrKey,
    access: Access,
    mem: Mem,
    live: bool,
}

fn access(a: u8) -> Access {
    let mut x = Access::NONE;
    if a & 1 != 0 {
        x = x | Access::LOCAL_WRITE;
    }
    if a & 2 != 0 {
        x = x | Access::REMOTE_WRITE;
    }
    x
}

fn addr_of(k: &MrKey, a: Addr) -> u64 {
    match a {
        Addr::Rel(d) => k.addr.wrapping_add_signed(i64::from(d)),
        Addr::Abs(x) => x,
    }
}

/// The offset range `[addr, addr + len)` inside region `k`, if it lies inside.
fn inside(k: &MrKey, addr: u64, len: u64) -> Option<std::ops::Range<usize>> {
    let start = addr.checked_sub(k.addr)?;
    let end = start.checked_add(len)?;
    (end <= k.len).then_some(start as usize..end as usize)
}

fuzz_target!(|input: Input| {
    let mut arena: Vec<u8> = (0..ARENA).map(|i| (i * 13 % 251) as u8).collect();
    let mut model = arena.clone();
    let base = arena.as_mut_ptr();
    // Every view of the arena below is made from `base`, between calls on the table.
    let view = || unsafe { std::slice::from_raw_parts(base, ARENA) };
    let mut t = if input.random_keys {
        RegionTable::random(input.key)
    } else {
        RegionTable::new(u32::from_le_bytes([input.key[0], input.key[1], 0, 0]))
    };
    let mut regs: Vec<Reg> = Vec::new();
    let mut stamp = 0u8;
    for op in input.ops.iter().take(256) {
        match *op {
            Op::RegisterRaw { off, len, access: a } => {
                let off = usize::from(off) % ARENA;
                let len = usize::from(len) % (ARENA - off + 1);
                let overlaps = regs.iter().any(|r| match r.mem {
                    Mem::Raw { off: o } if r.live => {
                        off < o + r.key.len as usize && o < off + len
                    }
                    _ => false,
                });
                if overlaps {
                    continue;
                }
                // SAFETY: off + len <= ARENA; the arena outlives the table (dropped
                // first, below), is never moved, and is read only between calls on
                // the table; live raw regions never overlap.
                let raw = unsafe { RawMem::new(base.add(off), len) }.unwrap();
                let key = t.register_raw(raw, access(a)).unwrap();
                assert_eq!(key.len, len as u64);
                regs.push(Reg { key, access: access(a), mem: Mem::Raw { off }, live: true });
            }
            Op::RegisterShared { len, access: a } => {
                let len = usize::from(len) % 4096;
                let mem = SharedMem::new(len);
                let key = t.register_shared(&mem, access(a)).unwrap();
                regs.push(Reg {
                    key,
                    access: access(a),
                    mem: Mem::Shared { mem, model: vec![0; len] },
                    live: true,
                });
            }
            Op::Deregister { which } => {
                if regs.is_empty() {
                    continue;
                }
                let i = usize::from(which) % regs.len();
                let r = &mut regs[i];
                let got = t.deregister(r.key.lkey);
                if r.live {
                    assert_eq!(got, Ok(()));
                    r.live = false;
                } else {
                    assert_eq!(got, Err(AccessError::UnknownKey(r.key.lkey)));
                }
            }
            Op::PlaceRemote { which, flip, addr, len } | Op::PlaceLocal { which, flip, addr, len } => {
                if regs.is_empty() {
                    continue;
                }
                let remote = matches!(op, Op::PlaceRemote { .. });
                let named = &regs[usize::from(which) % regs.len()];
                let key = if remote { named.key.rkey } else { named.key.lkey } ^ flip;
                let addr = addr_of(&named.key, addr);
                stamp = stamp.wrapping_add(1);
                let data = vec![stamp; usize::from(len) % 5000];
                let got = if remote {
                    t.place_remote(key, addr, &data)
                } else {
                    t.place_local(key, addr, &data)
                };
                // The model: the live region with this key, its right, its bounds.
                let target = regs.iter_mut().find(|r| {
                    r.live && if remote { r.key.rkey == key } else { r.key.lkey == key }
                });
                let need = if remote { Access::REMOTE_WRITE } else { Access::LOCAL_WRITE };
                let len = data.len() as u64;
                let want = match target {
                    None => Err(AccessError::UnknownKey(key)),
                    Some(r) if !r.access.contains(need) => Err(AccessError::NoAccess),
                    Some(r) => match inside(&r.key, addr, len) {
                        None => Err(AccessError::OutOfBounds { addr, len }),
                        Some(range) => {
                            match &mut r.mem {
                                Mem::Raw { off } => model[*off + range.start..*off + range.end]
                                    .copy_from_slice(&data),
                                Mem::Shared { model, .. } => model[range].copy_from_slice(&data),
                            }
                            Ok(())
                        }
                    },
                };
                assert_eq!(got, want);
            }
            Op::Read { which, addr, len } => {
                if regs.is_empty() {
                    continue;
                }
                let r = &regs[usize::from(which) % regs.len()];
                let addr = addr_of(&r.key, addr);
                let len = u64::from(len);
                match t.read(r.key.lkey, addr, len) {
                    Ok(bytes) => {
                        assert!(r.live);
                        let range = inside(&r.key, addr, len).expect("read outside the region");
                        match &r.mem {
                            Mem::Raw { off } => {
                                assert_eq!(&*bytes, &model[*off + range.start..*off + range.end]);
                            }
                            Mem::Shared { model, .. } => assert_eq!(&*bytes, &model[range]),
                        }
                    }
                    Err(e) => {
                        let want = if !r.live {
                            AccessError::UnknownKey(r.key.lkey)
                        } else {
                            AccessError::OutOfBounds { addr, len }
                        };
                        assert_eq!(e, want);
                        assert!(!r.live || inside(&r.key, addr, len).is_none());
                    }
                }
            }
        }
        assert!(view() == &model[..], "arena differs from the model after {op:?}");
        for r in &regs {
            if let Mem::Shared { mem, model } = &r.mem {
                assert!(mem.with(|b| b == &model[..]));
            }
        }
    }
    drop(t);
    assert_eq!(&arena[..], &model[..]);
});
