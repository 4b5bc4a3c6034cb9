//! The node-wide profile store (`_mrc::store`) across processes, without a device: a
//! controller process (this test binary run again with `MRC_CTL_TEST_ROLE`, entering at
//! [`role`]) programs EV format, EV and CC profiles through the same
//! `Registry::transact` the C calls use; this process reads them with exact fields, sees
//! a DENY the other process writes, and gets typed errors from corrupt, truncated,
//! oversized and non-regular store files. Writing needs the directory: a process that
//! cannot write it gets `EPERM`.

use _mrc::ctl::{
    self, CcModify, Ev, EvModify, EvOpEntry, FmtModify, NsccCfg, ProfileState, Registry, ev_mode,
    ev_op, ev_state, fields_op, fmt_mode, mask,
};
use _mrc::store::{self, MAX_STORE_BYTES, Poll, Store, StoreError, Tables};
use mrc_congestion::LinkParams;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const ROLE: &str = "MRC_CTL_TEST_ROLE";
const DIR: &str = "MRC_CTL_TEST_DIR";

const NSCC: NsccCfg = NsccCfg {
    disable_qa: 1,
    adjust_bytes_threshold: 32768,
    adjust_period_threshold_ns: 20_000,
    base_rtt_ns: 12_000,
    eta: 600.0,
    fi: 2000.0,
    fi_scale: 0.5,
    gamma: 0.75,
    max_md_jump: 0.25,
    max_cwnd_bytes: 1_000_000,
    qa_gate: 4,
    qa_threshold_ns: 48_000,
    target_delay_ns: 9_000,
};

/// A fresh directory under the system's temp dir (0755, reachable by any user).
fn temp_dir(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("mrc-ctl-store-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn bound(dir: &Path) -> Registry {
    let mut r = Registry::default();
    r.bind_store(Store::at(dir));
    r
}

/// Runs this binary's [`role`] as another process; its stdout.
fn run_role(role: &str, dir: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "role", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "role {role}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn program(r: &mut Registry) -> Result<(), i32> {
    let fmt = |m: FmtModify| move |t: &mut Registry| t.modify_fmt(13, &m);
    r.transact(fmt(FmtModify {
        mask: mask::FMT_STATE | mask::FMT_MODE | mask::FMT_OP,
        state: 1,
        mode: fmt_mode::STEV,
        op: fields_op::MODIFY,
        fields: vec![16, 16],
    }))?;
    r.transact(fmt(FmtModify {
        mask: mask::FMT_STATE,
        state: 2,
        ..FmtModify::default()
    }))?;
    let offline = EvModify {
        mask: mask::EV_STATE
            | mask::EV_MODE
            | mask::EV_FMT_ID
            | mask::EV_COUNT
            | mask::EV_MIN_ACTIVE
            | mask::EV_EVENT_MASK,
        state: 1,
        mode: ev_mode::EXP,
        fmt_id: 13,
        count: 4,
        min_active: 1,
        event_mask: ev_state::GOOD,
        ..EvModify::default()
    };
    r.transact(|t| t.modify_ev(1, &offline))?;
    for i in 0..4u32 {
        let m = EvModify {
            mask: mask::EV_OP,
            op: ev_op::REPLACE_EV,
            entries: vec![EvOpEntry {
                ev: Ev::UNPOPULATED,
                ev_new: Ev::from_u32((i << 16) | i),
                state: ev_state::GOOD,
                flags: 0,
            }],
            ..EvModify::default()
        };
        r.transact(|t| t.modify_ev(1, &m))?;
    }
    let online = EvModify {
        mask: mask::EV_STATE,
        state: 2,
        ..EvModify::default()
    };
    r.transact(|t| t.modify_ev(1, &online))?;
    let cc = |m: CcModify| move |t: &mut Registry| t.modify_cc(3, &m);
    r.transact(cc(CcModify {
        mask: mask::CC_STATE | mask::CC_ALGORITHM,
        state: 1,
        algorithm: Some(ctl::NSCC_ALGORITHM.to_owned()),
        config: None,
    }))?;
    r.transact(cc(CcModify {
        mask: mask::CC_STATE | mask::CC_CONFIG,
        state: 2,
        algorithm: None,
        config: Some(NSCC),
    }))?;
    Ok(())
}

fn set_state(r: &mut Registry, ev: u32, state: u32) -> Result<Vec<EvOpEntry>, i32> {
    let m = EvModify {
        mask: mask::EV_OP,
        op: ev_op::MODIFY_EV_STATE,
        entries: vec![EvOpEntry {
            ev: Ev::from_u32(ev),
            state,
            ..EvOpEntry::default()
        }],
        ..EvModify::default()
    };
    r.transact(|t| t.modify_ev(1, &m))
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The other process's entry point (does nothing unless `MRC_CTL_TEST_ROLE` is set):
/// `program` writes the profiles, `deny` denies EV 0x20002 (after `wait` ms, printing the
/// wall clock of its write), `eperm` tries to write as a process that cannot write the
/// directory (as root it first becomes uid/gid 65534).
#[test]
fn role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os(DIR).unwrap());
    match role.as_str() {
        "program" => {
            let mut r = bound(&dir);
            program(&mut r).unwrap();
            println!(
                "role program: generation {}",
                r.store.as_ref().unwrap().generation()
            );
        }
        "deny" => {
            std::thread::sleep(Duration::from_millis(200));
            let mut r = bound(&dir);
            set_state(&mut r, 0x0002_0002, ev_state::DENIED).unwrap();
            println!("role deny: written at {}", now_ns());
        }
        "eperm" => {
            // SAFETY: plain system calls in a single-threaded child.
            unsafe {
                if libc::getuid() == 0 {
                    assert_eq!(libc::setgid(65534), 0);
                    assert_eq!(libc::setuid(65534), 0);
                }
            }
            let mut r = bound(&dir);
            let e = program(&mut r).unwrap_err();
            let mut d = Registry::default();
            d.bind_store(Store::at(dir.join("sub")));
            let e2 = program(&mut d).unwrap_err();
            println!("role eperm: {e} {e2}");
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn another_process_programs_and_denies() {
    let dir = temp_dir("programs");
    let out = run_role("program", &dir);
    // 2 format, 6 EV (OFFLINE, 4 REPLACE_EV, ONLINE), 2 CC commits.
    assert!(out.contains("role program: generation 10"), "{out}");
    let meta = std::fs::metadata(dir.join("profiles")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    assert_eq!(
        std::fs::metadata(dir.join("lock"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o644
    );

    let mut r = bound(&dir);
    r.refresh().unwrap();
    assert_eq!(r.store.as_ref().unwrap().generation(), 10);
    let f = r.query_fmt(13).unwrap();
    assert_eq!(
        (f.state, f.mode, f.fields),
        (ProfileState::Online, fmt_mode::STEV, vec![16, 16])
    );
    let p = r.query_ev(1, None).unwrap().0;
    assert_eq!(
        (
            p.state,
            p.mode,
            p.fmt_id,
            p.count,
            p.min_active,
            p.event_mask
        ),
        (ProfileState::Online, ev_mode::EXP, 13, 4, 1, ev_state::GOOD)
    );
    assert!(r.ev_usable(1) && r.cc_usable(3) && !r.ev_usable(2));
    let q = r.qp_evs(1).unwrap();
    assert_eq!(q.evs, vec![0, 0x0001_0001, 0x0002_0002, 0x0003_0003]);
    assert_eq!(q.denied, vec![false; 4]);
    let g0 = q.generation;
    let c = r.query_cc(3).unwrap();
    assert_eq!(
        (c.state, c.algorithm_set, c.nscc, c.config),
        (ProfileState::Online, true, true, Some(NSCC))
    );
    let link = LinkParams {
        line_rate_bps: 100_000_000_000,
        base_rtt_ns: 100_000,
        mtu_bytes: 4096,
        trimming_enabled: false,
    };
    let n = r.qp_cc(3, &link).unwrap().unwrap();
    assert_eq!(
        (
            n.base_rtt_ns,
            n.target_qdelay_ns,
            n.max_cwnd_bytes,
            n.qa_gate_shift,
            n.quick_adapt,
            n.md_gain
        ),
        (12_000, 9_000, 1_000_000, 4, false, 0.75)
    );
    // A QP of this process holds the profile (per process: the store keeps no holds).
    r.hold(1, 3, true);

    // The other process denies EV 0x20002 while this one looks every 1 ms, as a QP does.
    let child = std::thread::spawn({
        let dir = dir.clone();
        move || run_role("deny", &dir)
    });
    let start = Instant::now();
    let seen_ns = loop {
        r.refresh().unwrap();
        if r.qp_evs(1).unwrap().denied[2] {
            break now_ns();
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no DENY seen");
        std::thread::sleep(Duration::from_millis(1));
    };
    let out = child.join().unwrap();
    // libtest may print the child's line after its own "test role ... ".
    let written: u128 = out
        .split("role deny: written at ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    println!(
        "DENY written by another process seen after {} us",
        seen_ns.saturating_sub(written) / 1000
    );
    let q = r.qp_evs(1).unwrap();
    assert_eq!(q.denied, vec![false, false, true, false]);
    assert_eq!(q.generation, g0 + 1);
    assert_eq!(r.store.as_ref().unwrap().generation(), 11);
    assert_eq!(r.ev[&1].users, 1, "the hold survives the reload");

    // This process as a second controller: GOOD again (its own event CQ hears it).
    r.event_cqs.push((
        0x10,
        ctl::EventQueue {
            cqe: 4,
            ..ctl::EventQueue::default()
        },
    ));
    set_state(&mut r, 0x0002_0002, ev_state::GOOD).unwrap();
    let got = r.poll_events(0x10, 4).unwrap();
    assert_eq!(
        got.iter()
            .map(|e| (e.profile_id, e.ev.as_u32(), e.state))
            .collect::<Vec<_>>(),
        vec![(1, 0x0002_0002, ev_state::GOOD)]
    );
    // The profile cannot go OFFLINE under this process's QP; nothing is written then.
    let off = EvModify {
        mask: mask::EV_STATE,
        state: 1,
        ..EvModify::default()
    };
    assert_eq!(r.transact(|t| t.modify_ev(1, &off)), Err(libc::EBUSY));
    let mut fresh = bound(&dir);
    fresh.refresh().unwrap();
    assert_eq!(fresh.store.as_ref().unwrap().generation(), 12);
    assert_eq!(fresh.qp_evs(1).unwrap().denied, vec![false; 4]);
    // A poll of an unchanged store reads nothing.
    assert_eq!(fresh.store.as_mut().unwrap().poll(), Ok(Poll::Unchanged));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writing_needs_the_directory() {
    let dir = temp_dir("eperm");
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    if !root {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let out = run_role("eperm", &dir);
    assert!(
        out.contains(&format!("role eperm: {} {}", libc::EPERM, libc::EPERM)),
        "{out}"
    );
    assert!(!dir.join("profiles").exists() && !dir.join("lock").exists());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

fn sample() -> Vec<u8> {
    let dir = temp_dir("sample");
    let mut r = bound(&dir);
    program(&mut r).unwrap();
    set_state(&mut r, 0x0003_0003, ev_state::DENIED).unwrap();
    let b = std::fs::read(dir.join("profiles")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    b
}

/// `b` with its header's checksum made right for its payload (FNV-1a 32).
fn resum(mut b: Vec<u8>) -> Vec<u8> {
    let sum = b[store::HEADER_BYTES..]
        .iter()
        .fold(0x811c_9dc5u32, |h, &x| {
            (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
        });
    b[28..32].copy_from_slice(&sum.to_le_bytes());
    b
}

#[test]
fn store_file_round_trips_and_rejects_what_is_wrong() {
    let b = sample();
    let (generation, t) = store::decode(&b).unwrap();
    assert_eq!(generation, 11);
    assert_eq!(store::encode(&t, generation), b);
    assert_eq!(t.ev[&1].states, vec![1, 1, 1, ev_state::DENIED]);
    assert_eq!(t.cc[&3].config, Some(NSCC));
    assert_eq!(
        store::decode(&store::encode(&Tables::default(), 0))
            .unwrap()
            .1,
        Tables::default()
    );

    // Every strict prefix is truncated.
    for n in 0..b.len() {
        assert_eq!(
            store::decode(&b[..n]),
            Err(StoreError::Truncated),
            "prefix {n}"
        );
    }
    let mut x = b.clone();
    x.push(0);
    assert_eq!(
        store::decode(&x),
        Err(StoreError::Corrupt("bytes after the payload"))
    );
    let mut x = b.clone();
    x[0] = b'X';
    assert_eq!(store::decode(&x), Err(StoreError::BadMagic));
    let mut x = b.clone();
    x[8] = 2;
    assert_eq!(store::decode(&x), Err(StoreError::BadVersion(2)));
    // One flipped bit anywhere in the payload: the checksum says so.
    for i in store::HEADER_BYTES..b.len() {
        let mut x = b.clone();
        x[i] ^= 0x10;
        assert_eq!(store::decode(&x), Err(StoreError::BadChecksum), "byte {i}");
    }
    // With a right checksum, values out of range are still refused.
    let p = store::HEADER_BYTES;
    let mut x = b.clone();
    x[p..p + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        store::decode(&resum(x)),
        Err(StoreError::Corrupt("EV format profile count"))
    );
    let mut x = b.clone();
    x[p..p + 4].copy_from_slice(&64u32.to_le_bytes());
    assert_eq!(store::decode(&resum(x)), Err(StoreError::Truncated));
    // Format 13's mode (after its count 4, id 8, state 1): two bits.
    let mut x = b.clone();
    x[p + 13..p + 17].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(
        store::decode(&resum(x)),
        Err(StoreError::Corrupt("EV format mode"))
    );
    // The last EV's state (the EV array ends the EV profile, before the CC table: its
    // count, one profile's 12 bytes and its 46-byte NSCC configuration): 7 is no state.
    let cc_bytes = 4 + 12 + 46;
    let at = b.len() - cc_bytes - 4;
    assert_eq!(
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap()),
        ev_state::DENIED
    );
    let mut x = b.clone();
    x[at..at + 4].copy_from_slice(&7u32.to_le_bytes());
    assert_eq!(
        store::decode(&resum(x)),
        Err(StoreError::Corrupt("EV state"))
    );
    // An EV array longer than a profile may hold.
    let ne_at = b.len() - cc_bytes - 4 * 37 - 4;
    assert_eq!(
        u32::from_le_bytes(b[ne_at..ne_at + 4].try_into().unwrap()),
        4
    );
    let mut x = b.clone();
    x[ne_at..ne_at + 4].copy_from_slice(&4097u32.to_le_bytes());
    assert_eq!(
        store::decode(&resum(x)),
        Err(StoreError::Corrupt("EV array length"))
    );
    // An array of 3 for a count of 4.
    let mut x = b.clone();
    x[ne_at..ne_at + 4].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(
        store::decode(&resum(x)),
        Err(StoreError::Corrupt("EV count"))
    );
    // An over-long buffer is refused before it is parsed.
    let big = vec![0u8; MAX_STORE_BYTES as usize + 1];
    assert_eq!(store::decode(&big), Err(StoreError::TooLarge));
}

#[test]
fn bad_store_files_are_einval_and_keep_the_last_tables() {
    let dir = temp_dir("bad");
    let good = sample();
    std::fs::write(dir.join("profiles"), &good).unwrap();
    let mut r = bound(&dir);
    r.refresh().unwrap();
    assert_eq!(r.qp_evs(1).unwrap().denied, vec![false, false, false, true]);
    let file = dir.join("profiles");
    let put = |b: &[u8]| {
        let _ = std::fs::remove_file(&file);
        std::fs::write(&file, b).unwrap();
    };
    // Truncated, garbage, oversized (a sparse file: refused by its size, unread).
    for (what, bytes) in [
        ("truncated", good[..good.len() - 5].to_vec()),
        ("garbage", vec![0xAB; 100]),
    ] {
        put(&bytes);
        assert_eq!(r.refresh(), Err(libc::EINVAL), "{what}");
        assert_eq!(
            r.qp_evs(1).unwrap().evs,
            vec![0, 0x0001_0001, 0x0002_0002, 0x0003_0003]
        );
    }
    let _ = std::fs::remove_file(&file);
    let f = std::fs::File::create(&file).unwrap();
    f.set_len(MAX_STORE_BYTES + 1).unwrap();
    drop(f);
    assert_eq!(r.refresh(), Err(libc::EINVAL));
    assert_eq!(r.store.as_mut().unwrap().poll(), Err(StoreError::TooLarge));
    // A FIFO in its place: refused without blocking.
    std::fs::remove_file(&file).unwrap();
    let c = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    assert_eq!(
        r.store.as_mut().unwrap().poll(),
        Err(StoreError::NotRegular)
    );
    // A controller does not write over a store it cannot read.
    assert_eq!(
        set_state(&mut r, 0x0003_0003, ev_state::GOOD),
        Err(libc::EINVAL)
    );
    assert!(
        std::fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    // Gone: empty tables.
    std::fs::remove_file(&file).unwrap();
    r.refresh().unwrap();
    assert_eq!(r.qp_evs(1), Err(libc::ENOENT));
    assert!(!r.ev_usable(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_write_is_seen_however_fast() {
    // DENY and GOOD files have the same size and may share their times (a jiffy
    // coarse); the reader still sees each one.
    let dir = temp_dir("fast");
    let mut w = bound(&dir);
    program(&mut w).unwrap();
    let mut r = bound(&dir);
    for i in 0..200u64 {
        let deny = i % 2 == 0;
        let st = if deny {
            ev_state::DENIED
        } else {
            ev_state::GOOD
        };
        set_state(&mut w, 0x0001_0001, st).unwrap();
        r.refresh().unwrap();
        assert_eq!(r.qp_evs(1).unwrap().denied[1], deny, "write {i}");
        assert_eq!(r.store.as_ref().unwrap().generation(), 11 + i);
    }
    // What a QP's 1 ms look costs when nothing changed: one stat.
    let t0 = Instant::now();
    for _ in 0..10_000 {
        assert_eq!(r.store.as_mut().unwrap().poll(), Ok(Poll::Unchanged));
    }
    println!(
        "unchanged store poll: {} ns each",
        t0.elapsed().as_nanos() / 10_000
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_process_binds_one_device_by_a_plain_name() {
    for bad in ["", ".", "..", "a/b", "../etc", "rxe 0", "rxe0\n"] {
        assert_eq!(
            Store::for_device(bad).map(|_| ()),
            Err(libc::EINVAL),
            "{bad:?}"
        );
    }
    let s = Store::for_device("mlx5_0.1-a").unwrap();
    assert_eq!(s.device(), Some("mlx5_0.1-a"));
    assert!(s.dir().ends_with("mlx5_0.1-a"));
    assert_eq!(s.file(), s.dir().join("profiles"));
    // Binding touches no file; a second device is refused, the same one and none are not.
    let mut r = Registry::default();
    r.bind(None).unwrap();
    assert!(r.store.is_none());
    r.bind(Some("rxe0")).unwrap();
    r.bind(Some("rxe0")).unwrap();
    r.bind(None).unwrap();
    assert_eq!(r.bind(Some("rxe1")), Err(libc::EINVAL));
    assert_eq!(r.store.as_ref().unwrap().device(), Some("rxe0"));
}

#[test]
fn a_reload_keeps_this_processs_transport_view_and_reports_undenials() {
    let dir = temp_dir("view");
    let mut w = bound(&dir);
    program(&mut w).unwrap();
    let mut r = bound(&dir);
    r.refresh().unwrap();
    r.event_cqs.push((
        0x20,
        ctl::EventQueue {
            cqe: 8,
            ..ctl::EventQueue::default()
        },
    ));
    // This process's transport takes 0x10001 out of rotation (profile 1's mask: GOOD).
    r.note_transport(1, 0x0001_0001, false);
    assert_eq!(r.poll_events(0x20, 8).unwrap(), vec![]);
    set_state(&mut w, 0x0002_0002, ev_state::DENIED).unwrap();
    r.refresh().unwrap();
    let (g, b, d) = (ev_state::GOOD, ev_state::ASSUMED_BAD, ev_state::DENIED);
    assert_eq!(r.ev[&1].states, vec![g, b, d, g]);
    set_state(&mut w, 0x0002_0002, ev_state::GOOD).unwrap();
    r.refresh().unwrap();
    assert_eq!(r.ev[&1].states, vec![g, b, g, g]);
    let got = r.poll_events(0x20, 8).unwrap();
    assert_eq!(
        got.iter()
            .map(|e| (e.profile_id, e.ev.as_u32(), e.state, e.drop_count))
            .collect::<Vec<_>>(),
        vec![(1, 0x0002_0002, ev_state::GOOD, 0)]
    );
    // The writer's own view never had the ASSUMED_BAD: it is this process's.
    assert_eq!(w.ev[&1].states, vec![g, g, g, g]);
    std::fs::remove_dir_all(&dir).unwrap();
}
