//! Model-based property tests for every controller: proptest drives the model sender of
//! [`mrc_congestion::model`] (which documents the invariants checked after every
//! operation) with random operation sequences.

use mrc_congestion::model::{Echo, Op, check_any, check_dcqcn, check_nscc, check_swift, run_model};
use mrc_congestion::{AnyController, CcKind, DcqcnConfig, LinkParams, NsccConfig, SwiftConfig};
use proptest::prelude::*;

fn op_strategy() -> impl Strategy<Value = Op> {
    let echo = prop_oneof![
        6 => Just(Echo::Real),
        1 => Just(Echo::Missing),
        1 => Just(Echo::Zero),
        1 => Just(Echo::Future),
    ];
    prop_oneof![
        4 => (1u64..200_000).prop_map(Op::Step),
        1 => (1_000_000u64..1_000_000_000).prop_map(Op::Step),
        6 => (1u64..=9_000).prop_map(Op::Send),
        6 => (0usize..=8, 0u32..=10, echo).prop_map(|(packets, ce, echo)| Op::Ack { packets, ce, echo }),
        1 => Just(Op::Cnp),
        1 => Just(Op::Trim),
        1 => Just(Op::Loss),
        1 => Just(Op::SpuriousLoss),
    ]
}

fn line_rate_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(10_000_000_000u64),
        Just(100_000_000_000),
        Just(400_000_000_000),
        Just(800_000_000_000),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn dcqcn_paper_model(line in line_rate_strategy(), min_mbps in 1u64..=5_000,
                         ops in prop::collection::vec(op_strategy(), 1..200)) {
        let cfg = DcqcnConfig {
            min_rate_bps: (min_mbps * 1_000_000).min(line),
            ..DcqcnConfig::paper(line)
        };
        let mut cc = cfg.build().unwrap();
        run_model(&mut cc, &ops, check_dcqcn);
    }

    #[test]
    fn dcqcn_connectx_model(line in line_rate_strategy(),
                            ops in prop::collection::vec(op_strategy(), 1..200)) {
        let mut cc = DcqcnConfig::nvidia_connectx(line).build().unwrap();
        run_model(&mut cc, &ops, check_dcqcn);
    }

    #[test]
    fn swift_model(line in line_rate_strategy(), base_rtt_ns in 2_000u64..100_000,
                   hops in 0u32..8,
                   ops in prop::collection::vec(op_strategy(), 1..200)) {
        let cfg = SwiftConfig {
            hops,
            ..SwiftConfig::for_link(line, base_rtt_ns, 4096)
        };
        let mut cc = cfg.build().unwrap();
        run_model(&mut cc, &ops, check_swift);
    }

    #[test]
    fn nscc_model(line in line_rate_strategy(), base_rtt_ns in 2_000u64..100_000,
                  trimming in any::<bool>(),
                  ops in prop::collection::vec(op_strategy(), 1..200)) {
        let mut cc = NsccConfig::for_link(line, base_rtt_ns, 4096, trimming).build().unwrap();
        run_model(&mut cc, &ops, check_nscc);
    }

    #[test]
    fn any_controller_model(kind in prop::sample::select(CcKind::ALL.to_vec()),
                            ops in prop::collection::vec(op_strategy(), 1..100)) {
        let link = LinkParams {
            line_rate_bps: 100_000_000_000,
            base_rtt_ns: 12_000,
            mtu_bytes: 4096,
            trimming_enabled: true,
        };
        let mut cc = AnyController::new(kind, &link).unwrap();
        run_model(&mut cc, &ops, |cc: &AnyController| check_any(cc, 300_000));
    }
}
