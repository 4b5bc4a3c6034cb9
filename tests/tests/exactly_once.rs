//! Acceptance 10 of issue 3 (proptest): arbitrary per-datagram fault schedules (drop,
//! duplicate, reorder, trim) and message sizes 0..=256 KiB (0 and multiples of the MTU
//! included): every work request completes exactly once, in order, byte-exact, within a
//! bound of virtual time.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{Action, NetConfig, Pair, conn_config, pattern};
use mrc_transport::send::SendConfig;
use mrc_transport::{Access, Sge, WcOpcode, WcStatus};
use proptest::prelude::*;

const MTU: u32 = 4096;
/// Virtual-time bound for one case: 96 faults can cost at most 96 RTOs of at most 100 ms.
const BOUND_NS: u64 = 20_000_000_000;

#[derive(Clone, Copy, Debug)]
enum Fault {
    Pass,
    Drop,
    Dup(u64),
    Delay(u64),
    Trim,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write,
    WriteImm,
    Send,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        4 => Just(Fault::Pass),
        2 => Just(Fault::Drop),
        1 => (0u64..200_000).prop_map(Fault::Dup),
        2 => (1u64..200_000).prop_map(Fault::Delay),
        1 => Just(Fault::Trim),
    ]
}

fn size() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(MTU),
        Just(256 << 10),
        (1u32..=64).prop_map(|k| k * MTU),
        0u32..=(256 << 10),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Write), Just(Kind::WriteImm), Just(Kind::Send)]
}

fn run_case(msgs: &[(u32, Kind)], schedule: Vec<Fault>, n_evs: u32) -> Result<(), TestCaseError> {
    let cc = || FixedWindowConfig::default().build();
    let mut ca = conn_config(0xA, 0xFF_FFE0, 1, n_evs, 5);
    ca.send = SendConfig {
        retry_limit: 200,
        ..SendConfig::default()
    };
    let cb = conn_config(0xB, 0x00_0010, 2, n_evs, 6);
    let mut p: Pair<FixedWindow> = Pair::new(ca, cc(), cb, cc(), NetConfig::default());
    let total: u64 = msgs.iter().map(|m| u64::from(m.0)).sum();
    let len = total.max(1) as usize;
    let src =
        p.a.regions_mut()
            .register(len, Access::LOCAL_WRITE)
            .unwrap();
    pattern(p.a.regions_mut().bytes_mut(src.lkey).unwrap(), 77);
    let dst =
        p.b.regions_mut()
            .register(len, Access::REMOTE_WRITE)
            .unwrap();
    let rbuf =
        p.b.regions_mut()
            .register(len, Access::LOCAL_WRITE)
            .unwrap();
    let mut off = 0u64;
    let mut want_b = Vec::new();
    for (i, &(n, k)) in msgs.iter().enumerate() {
        let i = i as u64;
        let sge = Sge {
            lkey: src.lkey,
            addr: src.addr + off,
            len: n,
        };
        match k {
            Kind::Write => p.a.post_write(i, sge, dst.addr + off, dst.rkey).unwrap(),
            Kind::WriteImm => {
                p.a.post_write_with_imm(i, sge, dst.addr + off, dst.rkey, i as u32)
                    .unwrap();
                want_b.push((100 + i, WcOpcode::RecvRdmaWithImm, n, Some(i as u32)));
            }
            Kind::Send => {
                want_b.push((100 + i, WcOpcode::Recv, n, None));
            }
        }
        if k == Kind::Send {
            p.a.post_send(i, sge).unwrap();
        }
        if k != Kind::Write {
            let rsge = Sge {
                lkey: rbuf.lkey,
                addr: rbuf.addr + off,
                len: n,
            };
            p.b.post_recv(100 + i, rsge).unwrap();
        }
        off += u64::from(n);
    }
    let mut idx = 0usize;
    p.script(move |_| {
        let f = schedule.get(idx).copied().unwrap_or(Fault::Pass);
        idx += 1;
        match f {
            Fault::Pass => Action::Deliver,
            Fault::Drop => Action::Drop,
            Fault::Dup(d) => Action::Duplicate(d),
            Fault::Delay(d) => Action::Delay(d),
            Fault::Trim => Action::Trim,
        }
    });
    let mut a_done = Vec::new();
    let mut b_done = Vec::new();
    let n = msgs.len();
    let want_b_len = want_b.len();
    let ok = p.run_until(BOUND_NS, |p| {
        a_done.extend(p.a_completions());
        b_done.extend(p.b_completions());
        a_done.len() >= n && b_done.len() >= want_b_len
    });
    prop_assert!(
        ok,
        "not done by {} ns: a {:?} b {:?}",
        p.now_ns,
        a_done,
        b_done
    );
    // a little longer: nothing completes twice
    let end = p.now_ns;
    p.run_until(end + 10_000_000, |_| false);
    a_done.extend(p.a_completions());
    b_done.extend(p.b_completions());
    let a: Vec<(u64, WcStatus)> = a_done.iter().map(|c| (c.wr_id, c.status)).collect();
    let want_a: Vec<(u64, WcStatus)> = (0..n as u64).map(|i| (i, WcStatus::Success)).collect();
    prop_assert_eq!(a, want_a);
    let b: Vec<(u64, WcOpcode, u32, Option<u32>)> = b_done
        .iter()
        .map(|c| {
            prop_assert_eq!(c.status, WcStatus::Success);
            Ok((c.wr_id, c.opcode, c.byte_len, c.imm))
        })
        .collect::<Result<_, TestCaseError>>()?;
    prop_assert_eq!(b, want_b);
    // byte-exact: each message's bytes are where its kind puts them, nothing else written
    let s = p.a.regions().bytes(src.lkey).unwrap();
    let d = p.b.regions().bytes(dst.lkey).unwrap();
    let r = p.b.regions().bytes(rbuf.lkey).unwrap();
    let mut off = 0usize;
    for &(n, k) in msgs {
        let range = off..off + n as usize;
        let (hit, miss) = if k == Kind::Send { (r, d) } else { (d, r) };
        prop_assert!(
            hit[range.clone()] == s[range.clone()],
            "message bytes differ"
        );
        prop_assert!(
            miss[range].iter().all(|&b| b == 0),
            "bytes written where they do not belong"
        );
        off += n as usize;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn acceptance_10_exactly_once_in_order_byte_exact(
        msgs in prop::collection::vec((size(), kind()), 1..5),
        schedule in prop::collection::vec(fault(), 0..96),
        n_evs in 1u32..6,
    ) {
        run_case(&msgs, schedule, n_evs)?;
    }
}

#[test]
fn acceptance_10_edge_sizes_without_faults() {
    // 0, 1, MTU - 1, MTU, MTU + 1, 2 MTU, 256 KiB, one of each kind
    let sizes = [0, 1, MTU - 1, MTU, MTU + 1, 2 * MTU, 256 << 10];
    for kind in [Kind::Write, Kind::WriteImm, Kind::Send] {
        let msgs: Vec<(u32, Kind)> = sizes.iter().map(|&s| (s, kind)).collect();
        run_case(&msgs, Vec::new(), 3).unwrap();
    }
}

#[test]
fn acceptance_10_every_packet_of_a_message_faulted_once() {
    // drop, duplicate, delay, trim each of the first datagrams in turn
    let schedule: Vec<Fault> = (0..64)
        .map(|i| match i % 4 {
            0 => Fault::Drop,
            1 => Fault::Dup(50_000),
            2 => Fault::Delay(120_000),
            _ => Fault::Trim,
        })
        .collect();
    run_case(
        &[
            (16 * MTU, Kind::WriteImm),
            (0, Kind::Send),
            (3 * MTU + 5, Kind::Send),
        ],
        schedule,
        4,
    )
    .unwrap();
}
