//! What a peer can make a connection spend (issue: "SEND staging is sized by the peer"),
//! measured with a counting allocator: a peer claiming the largest message (4 GiB) in
//! SEND packets for receives never posted gets staged up to the connection's staging
//! bound (16 MiB by default, chunk overhead counted) and refused beyond it with
//! NACK(RECEIVER_NOT_READY); a peer scattering 1-byte WRITE packets over messages of
//! 4 GiB gets its out-of-order ranges capped connection-wide (`max_rx_messages +
//! window` ranges of 8 bytes) and is refused beyond. The memory the connection holds
//! never comes near a claimed message's size. One test (the allocator counts the whole
//! process; tests in parallel would blur it).

use mrc_transport::recv::{MAX_COVERAGE_HOLES, STAGED_CHUNK_OVERHEAD_BYTES};
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{
    Body, BthFlags, BthRepr, BthSpare, DataRepr, MrcethRepr, MsgethRepr, Opcode, PacketRepr,
    RethRepr,
};
use mrc_transport::{Access, ConnConfig, Connection, Ecn, PeerParams, Psn};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(n: usize) {
    let now = NOW.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grow(l.size());
        // SAFETY: the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        NOW.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: as allocated above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > l.size() {
            grow(new - l.size());
        } else {
            NOW.fetch_sub(l.size() - new, Ordering::Relaxed);
        }
        // SAFETY: as allocated above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Bytes allocated now, and resets the peak to it.
fn mark() -> usize {
    let now = NOW.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

const PEER_QPN: u32 = 0x11;
const QPN: u32 = 0x22;
const MIB: usize = 1 << 20;

fn receiver() -> Connection<mrc_congestion::FixedWindow> {
    let cfg = ConnConfig {
        local_qpn: QPN,
        ..ConnConfig::default()
    };
    let mut b = Connection::new(cfg, mrc_congestion::FixedWindowConfig::default().build()).unwrap();
    b.connect(PeerParams {
        qpn: PEER_QPN,
        initial_psn: Psn::new(0),
        generation: 1,
    })
    .unwrap();
    b
}

fn packet(psn: u32, msn: u32, opcode: Opcode, data: DataRepr<'_>) -> Vec<u8> {
    let p = PacketRepr {
        bth: BthRepr {
            opcode,
            pkey: 0xFFFF,
            dest_qpn: QPN,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 3,
            msn,
            send_ts_ns: 0,
            generation: 1,
            reserved: 0,
        },
        body: Body::Data(data),
    };
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).unwrap();
    out
}

#[test]
fn a_peer_claiming_the_largest_messages_is_refused_at_the_bounds() {
    // 1. SEND packets of one message claiming 4 GiB, no receive posted: 8192 packets of
    //    4 KiB (32 MiB offered), in PSN order.
    let mut b = receiver();
    let payload = vec![0x5Au8; 4096];
    let before = mark();
    let mut buf = Vec::new();
    for k in 0..8192u32 {
        buf.clear();
        buf.extend(packet(
            k,
            0,
            Opcode::SendMiddle,
            DataRepr {
                msgeth: MsgethRepr {
                    message_len: u32::MAX,
                    offset: k * 4096,
                },
                reth: None,
                imm: None,
                payload: &payload,
            },
        ));
        b.handle_datagram(k.into(), 3, Ecn::Ect0, &buf);
    }
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let staged = (16 * MIB as u64) / (4096 + STAGED_CHUNK_OVERHEAD_BYTES);
    let s = *b.stats();
    assert_eq!(s.received, staged);
    // the next 1024 (the receive window the first refused one holds) refused for staging,
    // each answered RNR; the rest lies beyond the window
    assert_eq!(s.drops.get(DropReason::StagingFull), 1024);
    assert_eq!(s.rnr_nacks_sent, 1024);
    assert_eq!(
        s.drops.get(DropReason::PsnOutOfWindow),
        8192 - staged - 1024
    );
    assert!(
        peak < 17 * MIB + MIB / 2,
        "peak {peak} bytes for a 4 GiB claim, bound 16 MiB"
    );

    // 2. 1-byte WRITEs at every other offset of 1000 messages claiming 4 GiB each, into
    //    one 4 KiB region: each packet opens a range; the connection keeps at most
    //    4096 + 1024 of them (before: 1024 per message).
    let mut b = receiver();
    let mr = b
        .regions_mut()
        .register(4096, Access::REMOTE_WRITE)
        .unwrap();
    let before = mark();
    let mut psn = 0u32;
    for msg in 0..100u32 {
        for hole in 0..1024u32 {
            buf.clear();
            buf.extend(packet(
                psn,
                msg,
                Opcode::RdmaWriteMiddle,
                DataRepr {
                    msgeth: MsgethRepr {
                        message_len: u32::MAX,
                        offset: 2 * hole,
                    },
                    reth: Some(RethRepr {
                        virtual_addr: mr.addr + u64::from(hole % 4096),
                        rkey: mr.rkey,
                        dma_len: 1,
                    }),
                    imm: None,
                    payload: &payload[..1],
                },
            ));
            b.handle_datagram(psn.into(), 3, Ecn::Ect0, &buf);
            psn += 1;
        }
    }
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let s = *b.stats();
    let cap = 4096 + MAX_COVERAGE_HOLES as u64;
    // each message keeps up to 1024 holes itself; the cap stops them at 5120 in all
    assert_eq!(s.received, cap);
    assert!(s.drops.get(DropReason::MessageWindowFull) > 0);
    assert!(
        peak < MIB / 2,
        "peak {peak} bytes of out-of-order state for 5120 ranges"
    );
}
