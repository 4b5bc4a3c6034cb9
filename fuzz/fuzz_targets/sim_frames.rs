//! Fuzz target: frames from the input (built by the simulator's framing in a chosen
//! forwarding mode, then edited, cut and padded; or raw bytes) stored split and injected
//! into a simulator whose links corrupt, duplicate and jitter.
//!
//! Properties: a frame stored split (`FrameBuf`) has the bytes, the header and the parse
//! (split, or whole without a payload, as a host parses it) of its contiguous bytes, after
//! any bit flip too; injection never panics, and every frame injected is dropped and
//! counted, or received, exactly once (duplicates counted in).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mrc_fabric::packet::{ChecksumCheck, EthernetFrameRepr};
use mrc_fabric_sim::buf::FrameBuf;
use mrc_fabric_sim::host::{Datagram, Forwarding, build_frame};
use mrc_fabric_sim::{
    Fault, FaultKind, LinkSelector, LinkSpec, QueueConfig, SimConfig, Simulator, SpineLeafSpec,
    Topology, frame,
};

#[derive(Arbitrary, Debug)]
enum FFrame {
    /// A datagram framed host `src % 8` to host `dst % 8` on `ev`, then edited.
    Built {
        src: u8,
        dst: u8,
        ev: u8,
        datagram: Vec<u8>,
        edits: Vec<(u8, u8)>,
        cut: Option<u16>,
        pad: u8,
    },
    /// Any bytes.
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    mode: u8,
    seed: u8,
    corrupt: bool,
    duplicate: bool,
    jitter: bool,
    trim: bool,
    flip: (u16, u8),
    frames: Vec<(u8, FFrame)>,
}

fn topology() -> Topology {
    Topology::spine_leaf(&SpineLeafSpec {
        hosts: 8,
        leaves: 2,
        spines: 2,
        hosts_per_leaf: 4,
        uplinks_per_leaf: 2,
        host_link: LinkSpec::gbps(100, 500),
        fabric_link: LinkSpec::gbps(100, 500),
    })
    .expect("a valid topology")
}

/// The split frame `f` is the frame `bytes`.
fn check_split(f: &FrameBuf, bytes: &[u8]) {
    assert_eq!(f.to_vec(), bytes);
    assert_eq!(
        frame::header_split(f.head(), f.payload()),
        frame::header(bytes)
    );
    for check in [ChecksumCheck::Known, ChecksumCheck::Verify] {
        let whole = EthernetFrameRepr::parse_with(bytes, check);
        let split = if f.payload().is_empty() {
            EthernetFrameRepr::parse_with(f.head(), check)
        } else {
            EthernetFrameRepr::parse_split(f.head(), f.payload(), check)
        };
        match (split, whole) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("split {a:?} whole {b:?}"),
        }
    }
}

fuzz_target!(|input: Input| {
    let forwarding =
        [Forwarding::Ecmp, Forwarding::Srv6, Forwarding::Usid][input.mode as usize % 3];
    let mut faults = Vec::new();
    for (on, kind) in [
        (input.corrupt, FaultKind::Corrupt { p: 0.3 }),
        (input.duplicate, FaultKind::Duplicate { p: 0.3 }),
        (input.jitter, FaultKind::Jitter { max_ns: 2_000 }),
    ] {
        if on {
            faults.push(Fault {
                at_ns: 0,
                links: LinkSelector::All,
                kind,
            });
        }
    }
    let cfg = SimConfig {
        seed: u64::from(input.seed),
        forwarding,
        faults,
        queue: QueueConfig {
            trim_threshold_bytes: input.trim.then_some(4_000),
            buffer_bytes: 64 << 10,
            ..QueueConfig::default()
        },
        ..SimConfig::default()
    };
    let mut sim = Simulator::new(topology(), cfg).expect("a valid simulator");
    let mut injected = 0u64;
    for (k, (at, f)) in input.frames.iter().take(32).enumerate() {
        let bytes = match f {
            FFrame::Built {
                src,
                dst,
                ev,
                datagram,
                edits,
                cut,
                pad,
            } => {
                let d = Datagram {
                    src: u32::from(*src % 8),
                    dst: u32::from(*dst % 8),
                    ev: u32::from(*ev),
                    ecn: 2,
                    port: 0,
                };
                let mut out = Vec::new();
                if build_frame(sim.topology(), forwarding, d, datagram, &mut out).is_none() {
                    continue;
                }
                for &(i, v) in edits.iter().take(8) {
                    if let Some(b) = out.get_mut(usize::from(i)) {
                        *b = v;
                    }
                }
                if let Some(c) = cut {
                    out.truncate(usize::from(*c));
                }
                out.resize(out.len() + usize::from(*pad), 0);
                out
            }
            FFrame::Raw(b) => b.clone(),
        };
        let mut split = FrameBuf::from_vec(bytes.clone());
        check_split(&split, &bytes);
        if !bytes.is_empty() {
            let i = usize::from(input.flip.0) % bytes.len();
            let mask = input.flip.1 | 1;
            assert!(split.flip(i, mask));
            let mut flipped = bytes.clone();
            flipped[i] ^= mask;
            check_split(&split, &flipped);
        }
        let h = u32::from(*at % 8);
        if k % 2 == 0 {
            sim.inject(h, bytes).expect("a host");
        } else {
            sim.inject_slice(h, &bytes).expect("a host");
        }
        injected += 1;
    }
    let r = sim.run();
    let hosts: u64 = (0..8)
        .map(|h| {
            let host = sim.host(h).expect("a host");
            host.rx_bad_frames + host.rx_unclaimed
        })
        .sum();
    let queue_drops: u64 = r.ports.iter().map(|p| p.stats.drops).sum();
    let ended = r.counters.no_route_drops + queue_drops + hosts;
    assert_eq!(ended, injected + r.counters.duplicated);
});
