//! Issue 17 item 3 on the virtual clock: per-packet authentication (`mrc_transport::auth`).
//! Authenticated endpoints move data exactly through loss, duplication and reordering;
//! forged, replayed and altered datagrams are dropped before they touch any state, and
//! counted.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{Faults, NetConfig, Pair, Side, conn_config, craft};
use mrc_transport::auth::AUTH_TRAILER_BYTES;
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{Body, DataRepr, MsgethRepr, Opcode, RethRepr, SackRepr};
use mrc_transport::{ConnState, Ecn, WcStatus};

const PSK: &[u8] = b"an mrc test pre-shared key, 32 b";

fn pair(net: NetConfig) -> Pair<FixedWindow> {
    let cc = || FixedWindowConfig::default().build();
    Pair::new_authenticated(
        conn_config(0xA, 0xFF_FF00, 1, 8, 5),
        cc(),
        conn_config(0xB, 0x12_3456, 3, 8, 6),
        cc(),
        net,
        PSK,
    )
}

#[test]
fn authenticated_transfer_through_loss_duplication_and_reordering() {
    let mut p = pair(NetConfig {
        faults: Faults {
            drop: 0.02,
            duplicate: 0.02,
            reorder: 0.05,
            reorder_max_ns: 20_000,
            ..Faults::default()
        },
        seed: 11,
        ..NetConfig::default()
    });
    let r = p.regions(4 << 20, 3);
    for k in 0..4u64 {
        p.a.post_write(
            k,
            r.src_sge(k << 20, 1 << 20),
            r.dst.addr + (k << 20),
            r.dst.rkey,
        )
        .unwrap();
    }
    let mut done = Vec::new();
    assert!(p.run_until(10_000_000_000, |p| {
        done.extend(p.a_completions().iter().map(|c| (c.wr_id, c.status)));
        done.len() == 4
    }));
    p.run_to_quiet(p.now_ns + 1_000_000);
    assert_eq!(
        done,
        (0..4).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert!(p.dst_matches(&r));
    // Every copy the network made is refused by the replay window, before parsing: none
    // reaches the receive window as a duplicate, none fails the tag.
    let (da, db) = (p.a.stats().drops, p.b.stats().drops);
    assert_eq!(
        da.get(DropReason::Replayed) + db.get(DropReason::Replayed),
        p.net.duplicated
    );
    assert_eq!(p.net.duplicated, 38);
    assert_eq!(
        da.get(DropReason::AuthFailed) + db.get(DropReason::AuthFailed),
        0
    );
    assert_eq!(db.get(DropReason::Duplicate), 0);
}

/// A's next data datagram (sealed), taken off the wire.
fn capture(p: &mut Pair<FixedWindow>) -> Vec<u8> {
    let mut buf = vec![0u8; 9000];
    let t = p.a.poll_transmit(p.now_ns, &mut buf).expect("a datagram");
    buf[..t.len].to_vec()
}

#[test]
fn forged_replayed_and_altered_datagrams_are_dropped_unparsed() {
    let mut p = pair(NetConfig::default());
    let r = p.regions(8192, 4);
    p.a.post_write(1, r.src_sge(0, 8192), r.dst.addr, r.dst.rkey)
        .unwrap();
    let first = capture(&mut p);
    assert_eq!(first.len(), 52 + 4096 + AUTH_TRAILER_BYTES);
    // the payload does not cross the wire in the clear
    let src = p.a.regions().bytes(r.src.lkey).unwrap()[..4096].to_vec();
    assert_ne!(&first[52..52 + 4096], &src[..]);
    // A forger who knows every identifier (QPN, PSN, generation, rkey, address) but not
    // the key: a WRITE of 0xEE over the same bytes, with no trailer, with a made-up one.
    let data = DataRepr {
        msgeth: MsgethRepr {
            message_len: 8192,
            offset: 0,
        },
        reth: Some(RethRepr {
            virtual_addr: r.dst.addr,
            rkey: r.dst.rkey,
            dma_len: 4096,
        }),
        imm: None,
        payload: &[0xEE; 4096],
    };
    let forged = craft(
        Opcode::RdmaWriteFirst,
        0xB,
        0xFF_FF00,
        0,
        0,
        1,
        5,
        Body::Data(data),
    );
    p.inject(Side::B, 0, Ecn::Ect0, &forged);
    let mut with_trailer = forged.clone();
    with_trailer.extend_from_slice(&[0x42; AUTH_TRAILER_BYTES]);
    p.inject(Side::B, 0, Ecn::Ect0, &with_trailer);
    // the genuine datagram with one payload bit flipped, then the genuine one, then again
    let mut flipped = first.clone();
    flipped[100] ^= 0x10;
    p.inject(Side::B, 0, Ecn::Ect0, &flipped);
    p.inject(Side::B, 0, Ecn::Ect0, &first);
    p.inject(Side::B, 0, Ecn::Ect0, &first);
    let db = p.b.stats().drops;
    assert_eq!(
        (db.get(DropReason::AuthFailed), db.get(DropReason::Replayed)),
        (3, 1)
    );
    assert_eq!(
        db.get(DropReason::Malformed) + db.get(DropReason::Duplicate),
        0
    );
    assert_eq!(p.b.stats().received, 1);
    // A forged SACK acknowledging everything A sent: dropped; nothing completes early.
    let sack = SackRepr {
        cumulative_psn: 0xFF_FF02,
        bitmap_base_psn: 0xFF_FF02,
        bitmap: 0,
        echo_ev: 0,
        echo_ts_ns: 0,
        ecn_ce_count: 0,
        credit: 0,
    };
    let forged_sack = craft(Opcode::Sack, 0xA, 0xFF_FF02, 0, 0, 3, 0, Body::Sack(sack));
    p.inject(Side::A, 0, Ecn::Ect0, &forged_sack);
    assert_eq!(p.a.stats().drops.get(DropReason::AuthFailed), 1);
    assert_eq!(p.a.stats().sacks_received, 0);
    assert!(p.a_completions().is_empty());
    // the genuine exchange finishes, byte-exact, untouched by the forgeries
    let mut done = Vec::new();
    assert!(p.run_until(1_000_000_000, |p| {
        done.extend(p.a_completions().iter().map(|c| (c.wr_id, c.status)));
        !done.is_empty()
    }));
    assert_eq!(done, vec![(1, WcStatus::Success)]);
    assert!(p.dst_matches(&r));
    assert_eq!(p.a.state(), ConnState::Ready);
}
