//! Hostile networks against the day's transport switches: `Connection::set_data_before_sack`
//! (one data packet ahead of a due SACK) on both ends of a two-way transfer under seeded
//! loss, duplication, reordering, trims and CE marks; and `ConnConfig::trim_nacks` off (a
//! receiver that answers no trim) with a path that trims every copy of one packet.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{Action, Faults, NetConfig, Pair, Side, conn_config, pattern};
use mrc_transport::{Access, ConnState, MrKey, Sge, WcStatus};

fn pair(net: NetConfig, trim_nacks: (bool, bool)) -> Pair<FixedWindow> {
    let cc = || FixedWindowConfig::default().build();
    let mut a = conn_config(0xA, 0xFF_FF00, 1, 8, 11);
    a.trim_nacks = trim_nacks.0;
    let mut b = conn_config(0xB, 0x12_3456, 3, 8, 12);
    b.trim_nacks = trim_nacks.1;
    Pair::new(a, cc(), b, cc(), net)
}

/// A `len`-byte source on `src` (pattern `seed`) and a REMOTE_WRITE destination on `dst`.
fn regions_on(
    src: &mut mrc_transport::Connection<FixedWindow>,
    dst: &mut mrc_transport::Connection<FixedWindow>,
    len: usize,
    seed: u64,
) -> (MrKey, MrKey) {
    let s = src
        .regions_mut()
        .register(len, Access::LOCAL_WRITE)
        .unwrap();
    pattern(src.regions_mut().bytes_mut(s.lkey).unwrap(), seed);
    let d = dst
        .regions_mut()
        .register(len, Access::REMOTE_WRITE)
        .unwrap();
    (s, d)
}

const WRS: u64 = 8;
const WR_BYTES: u32 = 48 * 1024;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Random fault rates (up to 8% loss, 5% duplicates, 30% reordering by up to 100 us,
    /// 8% trims, 5% CE), random trim NACK settings, data ahead of the SACKs at both ends:
    /// both directions complete in order with success, byte for byte.
    #[test]
    fn data_before_sack_two_way_under_random_faults(
        seed in 0u64..1_000_000,
        drop in 0u32..80,
        duplicate in 0u32..50,
        reorder in 0u32..300,
        reorder_max_ns in 1u64..100_000,
        trim in 0u32..80,
        ce in 0u32..50,
        trim_nacks in (proptest::bool::ANY, proptest::bool::ANY),
    ) {
        let faults = Faults {
            drop: f64::from(drop) / 1000.0,
            duplicate: f64::from(duplicate) / 1000.0,
            trim: f64::from(trim) / 1000.0,
            ce: f64::from(ce) / 1000.0,
            reorder: f64::from(reorder) / 1000.0,
            reorder_max_ns,
            black_holes: Vec::new(),
        };
        let r = two_way(true, faults, seed, trim_nacks);
        proptest::prop_assert_eq!(r.a, all_success(1));
        proptest::prop_assert_eq!(r.b, all_success(100));
        proptest::prop_assert!(r.bytes_equal);
        proptest::prop_assert_eq!(r.in_flight, (0, 0));
        proptest::prop_assert_eq!(r.states, (ConnState::Ready, ConnState::Ready));
    }
}

/// Both ends post `WRS` WRITEs of `WR_BYTES` to each other at once, with
/// `data_before_sack` as given on both, under `faults` (seed `seed`); returns
/// `(a's completions, b's completions, both regions equal, end time)`.
fn two_way(data_before_sack: bool, faults: Faults, seed: u64, trim_nacks: (bool, bool)) -> Run {
    let mut p = pair(
        NetConfig {
            faults,
            seed,
            ..NetConfig::default()
        },
        trim_nacks,
    );
    p.a.set_data_before_sack(data_before_sack);
    p.b.set_data_before_sack(data_before_sack);
    let len = (WRS * u64::from(WR_BYTES)) as usize;
    let (a_src, b_dst) = regions_on(&mut p.a, &mut p.b, len, seed ^ 0x55);
    let (b_src, a_dst) = regions_on(&mut p.b, &mut p.a, len, seed ^ 0xAA);
    for i in 0..WRS {
        let off = i * u64::from(WR_BYTES);
        let sge = |k: &MrKey| Sge {
            lkey: k.lkey,
            addr: k.addr + off,
            len: WR_BYTES,
        };
        p.a.post_write(i + 1, sge(&a_src), b_dst.addr + off, b_dst.rkey)
            .unwrap();
        p.b.post_write(100 + i, sge(&b_src), a_dst.addr + off, a_dst.rkey)
            .unwrap();
    }
    let mut ca = Vec::new();
    let mut cb = Vec::new();
    p.run_until(2_000_000_000, |p| {
        ca.extend(p.a_completions().iter().map(|c| (c.wr_id, c.status)));
        cb.extend(p.b_completions().iter().map(|c| (c.wr_id, c.status)));
        ca.len() as u64 == WRS && cb.len() as u64 == WRS
    });
    let eq = |s: &mrc_transport::Connection<FixedWindow>,
              sk: &MrKey,
              d: &mrc_transport::Connection<FixedWindow>,
              dk: &MrKey| {
        s.regions().bytes(sk.lkey).unwrap() == d.regions().bytes(dk.lkey).unwrap()
    };
    Run {
        a: ca,
        b: cb,
        bytes_equal: eq(&p.a, &a_src, &p.b, &b_dst) && eq(&p.b, &b_src, &p.a, &a_dst),
        in_flight: (
            p.a.send_state().bytes_in_flight(),
            p.b.send_state().bytes_in_flight(),
        ),
        states: (p.a.state(), p.b.state()),
    }
}

struct Run {
    a: Vec<(u64, WcStatus)>,
    b: Vec<(u64, WcStatus)>,
    bytes_equal: bool,
    in_flight: (u64, u64),
    states: (ConnState, ConnState),
}

fn all_success(first: u64) -> Vec<(u64, WcStatus)> {
    (0..WRS).map(|i| (first + i, WcStatus::Success)).collect()
}

/// 24 seeds of 3% loss, 2% duplication, 10% reordering by up to 30 us, 2% trims, 2% CE,
/// both ends with data ahead of their SACKs, and the four combinations of trim NACKs on
/// and off: every WRITE of both directions completes in order with success and every
/// byte lands; nothing stays in flight.
#[test]
fn data_before_sack_two_way_under_seeded_faults_delivers_everything() {
    let faults = Faults {
        drop: 0.03,
        duplicate: 0.02,
        trim: 0.02,
        ce: 0.02,
        reorder: 0.10,
        reorder_max_ns: 30_000,
        black_holes: Vec::new(),
    };
    for seed in 0..24u64 {
        let trim = match seed % 4 {
            0 => (true, true),
            1 => (false, true),
            2 => (true, false),
            _ => (false, false),
        };
        for on in [false, true] {
            let r = two_way(on, faults.clone(), seed, trim);
            let ctx = format!("seed {seed} data_before_sack {on} trim_nacks {trim:?}");
            assert_eq!(r.a, all_success(1), "{ctx}");
            assert_eq!(r.b, all_success(100), "{ctx}");
            assert!(r.bytes_equal, "{ctx}");
            assert_eq!(r.in_flight, (0, 0), "{ctx}");
            assert_eq!(r.states, (ConnState::Ready, ConnState::Ready), "{ctx}");
        }
    }
}

/// A receiver without trim NACKs and a path that trims every copy of A's third data
/// packet: nothing answers the trims, so A's RTO retries them (the SACKs of the other
/// packets show the gap, and once the rest is acknowledged only the RTO is left) and the
/// retry limit ends it in bounded virtual time: the WRITE fails `RetryExceeded`, the
/// next is flushed, and B never NACKed.
#[test]
fn every_copy_trimmed_without_trim_nacks_ends_at_the_retry_limit() {
    let mut p = pair(NetConfig::default(), (true, false));
    let len = 16 * 4096;
    let r = p.regions(len, 3);
    p.a.post_write(1, r.src_sge(0, len as u32), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.a.post_write(2, r.src_sge(0, 4096), r.dst.addr, r.dst.rkey)
        .unwrap();
    let victim = 0xFF_FF02;
    p.script(move |i| {
        if i.from == Side::A && i.is_data && i.psn == victim {
            Action::Trim
        } else {
            Action::Deliver
        }
    });
    let end = p.run_to_quiet(10_000_000_000);
    assert!(end < 10_000_000_000, "still running at {end} ns");
    let c: Vec<(u64, WcStatus)> = p
        .a_completions()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(c, [(1, WcStatus::RetryExceeded), (2, WcStatus::Flushed)]);
    assert_eq!(p.a.state(), ConnState::Error);
    assert_eq!(p.b.stats().nacks_sent, 0);
    assert_eq!(p.a.stats().nacks_received, 0);
    let st = p.a.stats();
    // 17 packets (16 + 1); the victim sent 10 times: first, the RACK resend the later
    // SACKs asked for, the tail loss probe, then one per RTO expiry (7, the retry limit;
    // the 8th expiry fails the WRITE), every copy trimmed and none answered
    assert_eq!(p.net.trimmed, 10);
    assert_eq!(p.b.stats().trimmed_received, 10);
    assert_eq!((st.sent, st.retransmitted, st.acked), (26, 9, 16));
    assert_eq!(
        (st.rack_losses, st.tail_loss_probes, st.timeouts),
        (1, 1, 8)
    );
    assert_eq!(st.trimmed, 0);
    assert_eq!(end, 51_051_069);
    assert_eq!(p.a.poll_timeout(), None);
}
