//! Hostile and damaged frames in the simulator: truncated, malformed, corrupted, duplicated
//! and trimmed frames, with shared payloads; every frame is accounted for and none panics.

mod common;

use common::*;
use mrc_fabric::packet::{ChecksumCheck, EthernetFrameRepr};
use mrc_fabric::sim::host::{Datagram, Forwarding, build_frame};
use mrc_fabric::sim::{QueueConfig, SimConfig};
use mrc_transport::wire::{
    Body, BthFlags, BthRepr, BthSpare, DataRepr, MrcethRepr, MsgethRepr, Opcode, PacketRepr,
    RethRepr,
};

/// An mrc RDMA_WRITE_ONLY datagram with `len` payload bytes and PSN `psn` for QPN 0x77
/// (no endpoint has it: hosts capture the frames).
fn write_datagram(psn: u32, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i * 13 + 7) as u8).collect();
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RdmaWriteOnly,
            pkey: 0xFFFF,
            dest_qpn: 0x77,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 3,
            msn: 1,
            send_ts_ns: 0,
            generation: 1,
            reserved: 0,
        },
        body: Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len: len as u32,
                offset: 0,
            },
            reth: Some(RethRepr {
                virtual_addr: 0x1_0000,
                rkey: 0x1234,
                dma_len: len as u32,
            }),
            imm: None,
            payload: &payload,
        }),
    };
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    buf
}

fn frame(fwd: Forwarding, src: u32, dst: u32, ev: u32, dgram: &[u8]) -> Vec<u8> {
    let sim = sim16(cfg(1));
    let mut out = Vec::new();
    let d = Datagram {
        src,
        dst,
        ev,
        ecn: 2,
    };
    build_frame(sim.topology(), fwd, d, dgram, &mut out).unwrap();
    out
}

/// A uSID frame injected (so verified in full wherever it is checked) and trimmed at its
/// first hop, before the spine shifts its container, is trimmed, not dropped: the checksum
/// is over the final container, not the one on the wire.
#[test]
fn injected_usid_frame_is_trimmed_before_the_shift() {
    let mut sim = sim16(SimConfig {
        forwarding: Forwarding::Usid,
        queue: QueueConfig {
            trim_threshold_bytes: Some(8_000),
            ..QueueConfig::default()
        },
        ..cfg(1)
    });
    sim.set_capture(5, true);
    for (h, psn) in [(0, 10), (1, 11), (2, 12)] {
        let f = frame(Forwarding::Usid, h, 5, 2, &write_datagram(psn, 4096));
        sim.inject(h, f).unwrap();
    }
    let r = sim.run();
    let got = &sim.host(5).unwrap().captured;
    let summary: Vec<(u32, bool, usize)> = got
        .iter()
        .map(|(_, f)| {
            let (_, dgram) = EthernetFrameRepr::parse(f).unwrap();
            let p = PacketRepr::parse(dgram).unwrap();
            let Body::Data(d) = p.body else {
                panic!("not data")
            };
            (p.bth.psn, p.bth.flags.trimmed, d.payload.len())
        })
        .collect();
    assert_eq!(r.host_bad_frames, 0);
    assert_eq!(
        summary,
        [(10, false, 4096), (12, true, 0), (11, false, 4096)]
    );
}

/// `frame::trim` of a uSID frame whose container is not yet in its final form verifies
/// the checksum over the final form: intact, it is trimmed to its 114 header bytes with a
/// checksum the final destination verifies; one payload bit flipped, it is left as it is
/// (trimming never launders a corrupted frame) unless the caller vouches for its bytes.
#[test]
fn usid_trim_verifies_over_the_final_container() {
    use mrc_fabric::sim::buf::FrameBuf;
    use mrc_fabric::sim::frame;
    let bytes = frame(Forwarding::Usid, 0, 5, 2, &write_datagram(10, 4096));
    // fd00:5:17:6:: on the wire, fd00:5:6:: at host5.
    let on_wire = u128::from_be_bytes(bytes[38..54].try_into().unwrap());
    let last: u128 = "fd00:5:6::".parse::<std::net::Ipv6Addr>().unwrap().into();
    assert_eq!(
        on_wire,
        "fd00:5:17:6::"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into()
    );
    assert_eq!(frame::usid_final(on_wire, 32), last);
    let mut f = FrameBuf::from_vec(bytes.clone());
    assert!(frame::trim(&mut f, ChecksumCheck::Verify, Some(32)));
    let mut trimmed = f.to_vec();
    assert_eq!(trimmed.len(), 114);
    assert_eq!(trimmed[38..54], bytes[38..54]);
    frame::set_dst(&mut trimmed, last);
    let (_, dgram) = EthernetFrameRepr::parse(&trimmed).unwrap();
    let p = PacketRepr::parse(dgram).unwrap();
    assert_eq!((p.bth.psn, p.bth.flags.trimmed), (10, true));

    let mut bad = bytes.clone();
    *bad.last_mut().unwrap() ^= 0x04;
    let mut g = FrameBuf::from_vec(bad.clone());
    assert!(!frame::trim(&mut g, ChecksumCheck::Verify, Some(32)));
    assert_eq!(g.to_vec(), bad);
    assert!(frame::trim(&mut g, ChecksumCheck::Known, Some(32)));
    assert_eq!(g.len(), 114);
}
