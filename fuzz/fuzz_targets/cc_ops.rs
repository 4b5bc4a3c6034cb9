//! Fuzz every congestion controller with arbitrary operation sequences against the model
//! sender of `mrc_congestion::model` (which documents the invariants: bytes in flight
//! equal the model's, window and rate within the controller's bounds, real-valued state
//! finite and not negative, the next timer in the future).
//!
//! The input picks the controller and its preset parameters (line rate, base RTT, MTU,
//! trimming) and then a sequence of at most 256 operations.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mrc_congestion::model::{self, Echo, Op};
use mrc_congestion::{
    AnyController, CcKind, Controller, DcqcnConfig, LinkParams, NsccConfig, SwiftConfig,
};

/// Which controller and preset.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Which {
    DcqcnPaper { min_mbps: u16 },
    DcqcnConnectx,
    Swift { hops: u8 },
    Nscc { trimming: bool },
    Any(AnyKind),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum AnyKind {
    Dcqcn,
    Swift,
    Nscc,
    None,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FEcho {
    Real,
    Missing,
    Zero,
    Future,
}

/// Operations; sizes are mapped into the ranges the property tests use, plus the
/// extremes (zero-byte packets, long idle periods).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum FOp {
    Step(u32),
    LongStep(u16),
    Send(u16),
    Ack { packets: u8, ce: u8, echo: FEcho },
    Cnp,
    Trim,
    Loss,
    SpuriousLoss,
}

#[derive(Arbitrary, Debug)]
struct Input {
    which: Which,
    /// 0..4: 10, 100, 400, 800 Gb/s.
    line: u8,
    base_rtt_us: u8,
    ops: Vec<FOp>,
}

fn op(f: FOp) -> Op {
    match f {
        FOp::Step(ns) => Op::Step(u64::from(ns % 1_000_000)),
        FOp::LongStep(ms) => Op::Step(u64::from(ms) * 1_000_000),
        FOp::Send(b) => Op::Send(u64::from(b % 9_001)),
        FOp::Ack { packets, ce, echo } => Op::Ack {
            packets: usize::from(packets % 16),
            ce: u32::from(ce),
            echo: match echo {
                FEcho::Real => Echo::Real,
                FEcho::Missing => Echo::Missing,
                FEcho::Zero => Echo::Zero,
                FEcho::Future => Echo::Future,
            },
        },
        FOp::Cnp => Op::Cnp,
        FOp::Trim => Op::Trim,
        FOp::Loss => Op::Loss,
        FOp::SpuriousLoss => Op::SpuriousLoss,
    }
}

fuzz_target!(|input: Input| {
    let line = [10u64, 100, 400, 800][usize::from(input.line % 4)] * 1_000_000_000;
    let base_rtt_ns = 2_000 + u64::from(input.base_rtt_us) * 400;
    let ops: Vec<Op> = input.ops.iter().take(256).map(|&f| op(f)).collect();
    match input.which {
        Which::DcqcnPaper { min_mbps } => {
            let cfg = DcqcnConfig {
                min_rate_bps: (u64::from(min_mbps % 5_000 + 1) * 1_000_000).min(line),
                ..DcqcnConfig::paper(line)
            };
            let mut cc = cfg.build().expect("valid preset");
            model::run_model(&mut cc, &ops, model::check_dcqcn);
        }
        Which::DcqcnConnectx => {
            let mut cc = DcqcnConfig::nvidia_connectx(line)
                .build()
                .expect("valid preset");
            model::run_model(&mut cc, &ops, model::check_dcqcn);
        }
        Which::Swift { hops } => {
            let cfg = SwiftConfig {
                hops: u32::from(hops % 8),
                ..SwiftConfig::for_link(line, base_rtt_ns, 4096)
            };
            let mut cc = cfg.build().expect("valid preset");
            model::run_model(&mut cc, &ops, model::check_swift);
        }
        Which::Nscc { trimming } => {
            let mut cc = NsccConfig::for_link(line, base_rtt_ns, 4096, trimming)
                .build()
                .expect("valid preset");
            model::run_model(&mut cc, &ops, model::check_nscc);
        }
        Which::Any(k) => {
            let kind = match k {
                AnyKind::Dcqcn => CcKind::Dcqcn,
                AnyKind::Swift => CcKind::Swift,
                AnyKind::Nscc => CcKind::Nscc,
                AnyKind::None => CcKind::None,
            };
            let link = LinkParams {
                line_rate_bps: line,
                base_rtt_ns,
                mtu_bytes: 4096,
                trimming_enabled: true,
            };
            let mut cc = AnyController::new(kind, &link).expect("valid preset");
            // A fixed window must stay where the preset put it.
            let fixed = cc.cwnd_bytes();
            model::run_model(&mut cc, &ops, |c: &AnyController| {
                model::check_any(c, fixed)
            });
        }
    }
});
