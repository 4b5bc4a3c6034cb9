//! The headline target: a transfer between two endpoints on a virtual clock under a fault
//! schedule decoded from the input (drops, duplicates, reorders, trims, ECN CE marks,
//! delays, EVs going dark and coming back, a NIC port's plane going dark and coming back,
//! EVs going dark for good) over 1-4 planes with a handful of
//! messages of arbitrary kinds and sizes.
//!
//! `mrc_tests::transfer::run` plays it and checks the verdict (its module docs give the
//! limits that keep the verdict decidable): exactly-once, in-order, byte-exact completion
//! within a virtual-time bound; or, when every EV is dark for good, `RetryExceeded` then
//! `Flushed` with nothing wrong written; never a hang. A failed check panics with the
//! decoded schedule, which a regression test in `tests/tests/transfer_regressions.rs`
//! replays verbatim.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mrc_congestion::CcKind;
use mrc_tests::transfer::{MsgKind, NetAct, Outage, OutageKind, Schedule, run};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FKind {
    Write,
    WriteImm,
    Send,
}

/// Message sizes: the edges around the MTU are likelier than uniform bytes.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum FSize {
    Zero,
    One,
    Mtus(u8),
    MtusPlusOne(u8),
    MtusMinusOne(u8),
    Bytes(u16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FAct {
    Deliver,
    Drop,
    Duplicate(u8),
    Delay(u8),
    DelayTwice(u8, u8),
    Trim,
    MarkCe,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct FOutage {
    ev: u8,
    start_us: u16,
    len_us: u16,
    denied: bool,
    /// A's NIC port on the EV's plane instead (wins over `denied`).
    port: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    n_evs: u8,
    planes: u8,
    mtu: u8,
    cc: u8,
    go_back_n: bool,
    initial_psns: (u32, u32),
    msgs: Vec<(FKind, FSize)>,
    a_acts: Vec<FAct>,
    b_acts: Vec<FAct>,
    outages: Vec<FOutage>,
    permanent: Vec<(u8, u16)>,
}

fn act(a: FAct) -> NetAct {
    match a {
        FAct::Deliver => NetAct::Deliver,
        FAct::Drop => NetAct::Drop,
        FAct::Duplicate(d) => NetAct::Duplicate(d),
        FAct::Delay(d) => NetAct::Delay(d),
        FAct::DelayTwice(x, y) => NetAct::DelayTwice(x, y),
        FAct::Trim => NetAct::Trim,
        FAct::MarkCe => NetAct::MarkCe,
    }
}

fuzz_target!(|input: Input| {
    let mtu = [256u32, 1024, 4096][usize::from(input.mtu % 3)];
    let size = |s: FSize| match s {
        FSize::Zero => 0,
        FSize::One => 1,
        FSize::Mtus(k) => u32::from(k % 17) * mtu,
        FSize::MtusPlusOne(k) => u32::from(k % 16) * mtu + 1,
        FSize::MtusMinusOne(k) => (u32::from(k % 16) + 1) * mtu - 1,
        FSize::Bytes(b) => u32::from(b),
    };
    let sched = Schedule {
        n_evs: u32::from(input.n_evs % 4) + 1,
        planes: u32::from(input.planes % 4) + 1,
        mtu_payload_bytes: mtu,
        cc: CcKind::ALL[usize::from(input.cc % 4)],
        go_back_n: input.go_back_n,
        initial_psns: input.initial_psns,
        msgs: input
            .msgs
            .iter()
            .take(6)
            .map(|&(k, s)| {
                let kind = match k {
                    FKind::Write => MsgKind::Write,
                    FKind::WriteImm => MsgKind::WriteImm,
                    FKind::Send => MsgKind::Send,
                };
                (kind, size(s))
            })
            .collect(),
        a_acts: input.a_acts.iter().take(256).map(|&a| act(a)).collect(),
        b_acts: input.b_acts.iter().take(256).map(|&a| act(a)).collect(),
        outages: input
            .outages
            .iter()
            .take(6)
            .map(|o| Outage {
                ev: u32::from(o.ev),
                start_ns: u64::from(o.start_us) * 1_000,
                len_ns: u64::from(o.len_us % 4_000) * 1_000,
                kind: if o.port {
                    OutageKind::LocalPort
                } else if o.denied {
                    OutageKind::Denied
                } else {
                    OutageKind::BlackHole
                },
            })
            .collect(),
        permanent: input
            .permanent
            .iter()
            .take(4)
            .map(|&(ev, t)| (u32::from(ev), u64::from(t) * 1_000))
            .collect(),
    };
    if let Err(e) = run(&sched) {
        panic!("{e}\nschedule: {:?}", sched.normalised());
    }
});
