//! Switch behaviour with raw frames: timing, ECMP spread, trimming, SRv6 and uSID paths.

mod common;

use common::*;
use mrc_fabric_sim::host::{Datagram, Forwarding, build_frame};
use mrc_fabric_sim::{QueueConfig, SimConfig};

/// An mrc RDMA_WRITE_ONLY datagram with `len` payload bytes and PSN `psn` for QPN 0x77
/// (no endpoint in these tests has it, so hosts capture the frames).
fn write_datagram(psn: u32, len: usize) -> Vec<u8> {
    write_datagram_of(psn, &vec![0xA5u8; len])
}

fn frame(sim: &mrc_fabric_sim::Simulator, src: u32, dst: u32, ev: u32, dgram: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let d = Datagram {
        src,
        dst,
        ev,
        ecn: 2,
        port: 0,
    };
    let hdr = build_frame(sim.topology(), Forwarding::Ecmp, d, dgram, &mut out);
    assert_eq!(hdr, Some(mrc_fabric_sim::frame::header(&out)));
    out
}

#[test]
fn same_leaf_frame_arrives_after_two_serialisations_and_propagations() {
    let mut sim = sim16(cfg(1));
    sim.set_capture(2, true);
    let f = frame(&sim, 0, 2, 0, &write_datagram(5, 4096));
    assert_eq!(f.len(), 4210); // 14 + 40 + 8 + 12 + 16 + 8 + 16 + 4096
    sim.inject(0, f.clone()).unwrap();
    sim.run();
    let got = &sim.host(2).unwrap().captured;
    assert_eq!(got.len(), 1);
    // 4210 B at 100 Gb/s = 336.8 ns, floored to 336 on each idle port; 2 x (336 + 500).
    assert_eq!(got[0].0, 1672);
    assert_eq!(got[0].1, f);
}

#[test]
fn ecmp_spreads_16_evs_over_4_spines() {
    let sim = sim16(cfg(1));
    let mut per_spine = [0u32; 4];
    for ev in 0..16 {
        let hops = sim.trace(0, 5, ev).unwrap();
        let names: Vec<&str> = hops.iter().map(|h| h.node.as_str()).collect();
        assert_eq!(names.len(), 5);
        assert_eq!(
            (names[0], names[1], names[3], names[4]),
            ("host0", "leaf0", "leaf1", "host5")
        );
        let s: usize = names[2].strip_prefix("spine").unwrap().parse().unwrap();
        per_spine[s] += 1;
    }
    // ecmp_seed 0, splitmix64 over the 5-tuple with the leaf's salt.
    assert_eq!(per_spine, [4, 3, 7, 2]);
    // Another hash seed gives another spread.
    let sim = sim16(SimConfig {
        ecmp_seed: 99,
        ..cfg(1)
    });
    let mut other = [0u32; 4];
    for ev in 0..16 {
        let hops = sim.trace(0, 5, ev).unwrap();
        let s: usize = hops[2].node.strip_prefix("spine").unwrap().parse().unwrap();
        other[s] += 1;
    }
    assert_eq!(other.iter().sum::<u32>(), 16);
    assert_ne!(other, per_spine);
}

#[test]
fn same_leaf_path_never_crosses_a_spine() {
    let sim = sim16(cfg(1));
    for ev in 0..16 {
        let names: Vec<String> = sim
            .trace(0, 3, ev)
            .unwrap()
            .into_iter()
            .map(|h| h.node)
            .collect();
        assert_eq!(names, ["host0", "leaf0", "host3"]);
    }
}

#[test]
fn srv6_segment_list_picks_the_spine() {
    let sim = sim16(SimConfig {
        forwarding: Forwarding::Srv6,
        ..cfg(1)
    });
    for ev in 0..8 {
        let hops = sim.trace(0, 5, ev).unwrap();
        let names: Vec<&str> = hops.iter().map(|h| h.node.as_str()).collect();
        let spine = format!("spine{}", ev % 4);
        assert_eq!(names, ["host0", "leaf0", spine.as_str(), "leaf1", "host5"]);
        // segments_left on arrival: 1 at leaf0 and the spine (whose End decrements it), 0 after.
        let sl: Vec<Option<u8>> = hops.iter().map(|h| h.segments_left).collect();
        assert_eq!(sl, [Some(1), Some(1), Some(1), Some(0), Some(0)]);
        assert_eq!(hops[3].dst_addr, "fd00::1:0:5");
    }
}

#[test]
fn usid_container_shifts_at_the_spine() {
    let sim = sim16(SimConfig {
        forwarding: Forwarding::Usid,
        ..cfg(1)
    });
    let hops = sim.trace(0, 5, 2).unwrap();
    let names: Vec<&str> = hops.iter().map(|h| h.node.as_str()).collect();
    assert_eq!(names, ["host0", "leaf0", "spine2", "leaf1", "host5"]);
    // spine2 is node 22 (uSID 23 = 0x17), host5 uSID 6: fd00:5:17:6:: then fd00:5:6::.
    assert_eq!(hops[1].dst_addr, "fd00:5:17:6::");
    assert_eq!(hops[3].dst_addr, "fd00:5:6::");
    assert_eq!(hops[1].segments_left, None);
}

#[test]
fn trimming_cuts_the_payload_and_sets_the_flag() {
    let mut sim = sim16(trimming_cfg(1));
    sim.set_capture(3, true);
    for (h, psn) in [(0, 10), (1, 11), (2, 12)] {
        let f = frame(&sim, h, 3, 0, &write_datagram(psn, 4096));
        sim.inject(h, f).unwrap();
    }
    sim.run();
    // All three reach leaf0 at 836 ns: PSN 10 starts at once, PSN 11 waits (4210 B
    // queued), PSN 12 would make 8420 > 8000 B: trimmed, and the priority queue sends it
    // before PSN 11.
    let got = &sim.host(3).unwrap().captured;
    let summary = captured_data(&sim, 3);
    assert_eq!(
        summary,
        [(10, false, 4096), (12, true, 0), (11, false, 4096)]
    );
    // Header only: 14 + 40 + 8 + 12 + 16 + 8 + 16 = 114 bytes; byte 4 of the BTH has 0x20.
    assert_eq!(got[1].1.len(), 114);
    assert_eq!(got[1].1[62 + 4] & 0x20, 0x20);
    let leaf0 = sim.topology().node_by_name("leaf0").unwrap();
    let st = sim.port_stats(leaf0, 3).unwrap();
    assert_eq!((st.trims, st.drops, st.tx_packets), (1, 0, 3));
}

#[test]
fn drop_tail_without_trimming() {
    let mut sim = sim16(SimConfig {
        queue: QueueConfig {
            buffer_bytes: 8_000,
            trim_threshold_bytes: None,
            ..QueueConfig::default()
        },
        ..cfg(1)
    });
    sim.set_capture(3, true);
    for (h, psn) in [(0, 10), (1, 11), (2, 12)] {
        let f = frame(&sim, h, 3, 0, &write_datagram(psn, 4096));
        sim.inject(h, f).unwrap();
    }
    sim.run();
    let leaf0 = sim.topology().node_by_name("leaf0").unwrap();
    let st = sim.port_stats(leaf0, 3).unwrap();
    assert_eq!((st.trims, st.drops, st.tx_packets), (0, 1, 2));
    assert_eq!(sim.host(3).unwrap().captured.len(), 2);
}

/// Injected frames are never trusted: a payload bit flipped after the checksum was
/// computed makes the receiving host drop and count the frame, through `inject` and
/// `inject_slice` alike, while the intact copy is received.
#[test]
fn injected_frames_are_checksum_verified() {
    let mut sim = sim16(cfg(1));
    sim.set_capture(2, true);
    let good = frame(&sim, 0, 2, 0, &write_datagram(5, 512));
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x10;
    sim.inject(0, bad.clone()).unwrap();
    sim.inject_slice(0, &bad).unwrap();
    sim.inject_slice(0, &good).unwrap();
    let r = sim.run();
    assert_eq!(r.host_bad_frames, 2);
    let host = sim.host(2).unwrap();
    assert_eq!(host.rx_bad_frames, 2);
    assert_eq!(host.captured.len(), 1);
    assert_eq!(host.captured[0].1, good);
    assert_eq!(r.counters.hops, 6);
}

/// `send_datagram` frames a datagram as `build_frame` does: the receiver gets the same
/// bytes at the same time as with an injected pre-built frame, with no bad frame; unknown
/// hosts are typed errors.
#[test]
fn send_datagram_frames_like_build_frame() {
    let dgram = write_datagram(5, 4096);
    let mut sim = sim16(cfg(1));
    sim.set_capture(2, true);
    let d = Datagram {
        src: 0,
        dst: 2,
        ev: 0,
        ecn: 2,
        port: 0,
    };
    sim.send_datagram(d, &dgram).unwrap();
    let r = sim.run();
    assert_eq!(r.host_bad_frames, 0);
    let expected = frame(&sim, 0, 2, 0, &dgram);
    let got = &sim.host(2).unwrap().captured;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 1672);
    assert_eq!(got[0].1, expected);
    assert!(matches!(
        sim.send_datagram(Datagram { dst: 16, ..d }, &dgram),
        Err(mrc_fabric_sim::SimError::NoSuchHost(16))
    ));
}

/// A recycled buffer's old bytes never show: `build_frame` into a buffer holding a stale
/// frame (0xFF-filled, longer, as long, or shorter than the new frame) gives exactly the
/// bytes it gives into an empty one, in every forwarding mode, same-leaf and cross-leaf.
#[test]
fn build_frame_into_a_stale_buffer_equals_a_fresh_one() {
    let sim = sim16(cfg(1));
    let dgram = write_datagram(9, 1000);
    for forwarding in [Forwarding::Ecmp, Forwarding::Srv6, Forwarding::Usid] {
        for dst in [1, 9] {
            let d = Datagram {
                src: 0,
                dst,
                ev: 5,
                ecn: 1,
                port: 0,
            };
            let mut fresh = Vec::new();
            let hdr = build_frame(sim.topology(), forwarding, d, &dgram, &mut fresh);
            assert_eq!(hdr, Some(mrc_fabric_sim::frame::header(&fresh)));
            for stale_len in [fresh.len() + 300, fresh.len(), fresh.len() - 200, 0] {
                let mut out = vec![0xFF; stale_len];
                let again = build_frame(sim.topology(), forwarding, d, &dgram, &mut out);
                assert_eq!(out, fresh, "{forwarding:?} dst {dst} stale {stale_len}");
                assert_eq!(again, hdr);
            }
        }
    }
}

/// The header `build_frame` returns, read from the stack copy of the headers and the first
/// payload bytes, is the header of the frame it wrote: payloads shorter than, as long as
/// and longer than the bytes it peeks (a BTH's first 12), in every forwarding mode.
#[test]
fn build_frame_header_equals_the_written_frames() {
    let sim = sim16(cfg(1));
    let full = write_datagram(3, 600);
    for forwarding in [Forwarding::Ecmp, Forwarding::Srv6, Forwarding::Usid] {
        for len in [0, 4, 5, 11, 12, 13, 40, full.len()] {
            let d = Datagram {
                src: 1,
                dst: 12,
                ev: 3,
                ecn: 2,
                port: 0,
            };
            let mut out = vec![0xAB; 7];
            let hdr = build_frame(sim.topology(), forwarding, d, &full[..len], &mut out);
            assert_eq!(
                hdr,
                Some(mrc_fabric_sim::frame::header(&out)),
                "{forwarding:?} payload {len}"
            );
        }
    }
}
