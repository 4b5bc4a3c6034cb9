//! Acceptance 3 at the connection level: what the receiver sends back for crafted arrivals.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{conn_config, craft};
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{Body, DataRepr, MsgethRepr, Opcode, PacketRepr, RethRepr};
use mrc_transport::{Access, Connection, Ecn, MrKey, PeerParams, Psn};

/// Receiver B (QPN 0xB) expecting `initial_psn` from peer QPN 0xA, generation 1.
fn receiver(initial_psn: u32) -> (Connection<FixedWindow>, MrKey) {
    let mut b = Connection::new(
        conn_config(0xB, 0, 1, 4, 2),
        FixedWindowConfig::default().build(),
    )
    .unwrap();
    b.connect(PeerParams {
        qpn: 0xA,
        initial_psn: Psn::new(initial_psn),
        generation: 1,
    })
    .unwrap();
    let mr = b
        .regions_mut()
        .register(1 << 16, Access::REMOTE_WRITE)
        .unwrap();
    (b, mr)
}

/// Packet `k` (0-based) of a 16-packet, 256-byte-per-packet WRITE with PSN `psn`.
fn data(mr: &MrKey, psn: u32, k: u32) -> Vec<u8> {
    let payload = [k as u8; 256];
    let op = match k {
        0 => Opcode::RdmaWriteFirst,
        15 => Opcode::RdmaWriteLast,
        _ => Opcode::RdmaWriteMiddle,
    };
    craft(
        op,
        0xB,
        psn,
        0,
        0,
        1,
        1000 + k,
        Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len: 16 * 256,
                offset: k * 256,
            },
            reth: Some(RethRepr {
                virtual_addr: mr.addr + u64::from(k) * 256,
                rkey: mr.rkey,
                dma_len: 256,
            }),
            imm: None,
            payload: &payload,
        }),
    )
}

/// One datagram B sent: opcode, BTH PSN, and for a SACK (cumulative, base, bitmap).
type Sent = (Opcode, u32, Option<(u32, u32, u64)>);

/// Every datagram B wants to send now.
fn drain(b: &mut Connection<FixedWindow>, now: u64) -> Vec<Sent> {
    let mut buf = vec![0u8; 8192];
    let mut out = Vec::new();
    while let Some(t) = b.poll_transmit(now, &mut buf) {
        let p = PacketRepr::parse(&buf[..t.len]).unwrap();
        let sack = match p.body {
            Body::Sack(s) => Some((s.cumulative_psn, s.bitmap_base_psn, s.bitmap)),
            _ => None,
        };
        out.push((p.bth.opcode, p.bth.psn, sack));
    }
    out
}

#[test]
fn acceptance_3_duplicate_is_counted_and_never_nacked() {
    let (mut b, mr) = receiver(100);
    for (psn, k) in [(100, 0), (101, 1), (101, 1)] {
        b.handle_datagram(10, 0, Ecn::Ect0, &data(&mr, psn, k));
    }
    assert_eq!(b.stats().drops.get(DropReason::Duplicate), 1);
    assert_eq!(b.stats().received, 2);
    // the duplicate asks for an immediate SACK; no NACK at all
    assert_eq!(
        drain(&mut b, 10),
        vec![(Opcode::Sack, 102, Some((102, 102, 0)))]
    );
    assert_eq!(b.stats().nacks_sent, 0);
}

#[test]
fn acceptance_3_in_order_across_the_wrap_reports_nothing_missing() {
    let (mut b, mr) = receiver(0xFF_FFFE);
    for (k, psn) in [0xFF_FFFE, 0xFF_FFFF, 0x00_0000, 0x00_0001]
        .into_iter()
        .enumerate()
    {
        b.handle_datagram(10, 0, Ecn::Ect0, &data(&mr, psn, k as u32));
    }
    assert_eq!(b.recv_window().missing().count(), 0);
    // four in-order packets: one coalesced SACK, cumulative 0x000002, empty bitmap
    assert_eq!(drain(&mut b, 10), vec![(Opcode::Sack, 2, Some((2, 2, 0)))]);
    assert_eq!(b.stats().nacks_sent, 0);
}

#[test]
fn acceptance_3_one_psn_missing_across_the_wrap() {
    let (mut b, mr) = receiver(0xFF_FFFE);
    b.handle_datagram(10, 0, Ecn::Ect0, &data(&mr, 0xFF_FFFE, 0));
    b.handle_datagram(10, 0, Ecn::Ect0, &data(&mr, 0x00_0000, 2));
    let missing: Vec<Psn> = b.recv_window().missing().map(Psn::from_seq).collect();
    assert_eq!(missing, vec![Psn::new(0xFF_FFFF)]);
    // a gap alone does not ask for an immediate SACK (with spraying nearly every arrival
    // is out of order; loss detection is time-based): the coalesced SACK goes at the
    // 10 us delay: cumulative 0xFFFFFF, bit 1 (0x000000) set, bit 0 (0xFFFFFF) clear:
    // exactly one PSN reported missing
    assert_eq!(drain(&mut b, 10), vec![]);
    assert_eq!(
        drain(&mut b, 10_010),
        vec![(Opcode::Sack, 0xFF_FFFF, Some((0xFF_FFFF, 0xFF_FFFF, 0b10)))]
    );
    assert_eq!(b.stats().nacks_sent, 0);
}
