//! Per-packet cost of the sender plus receiver state machines.
//!
//! One iteration: A posts 256 packets' worth of RDMA WRITE; every datagram A emits is handed
//! to B at once and every SACK B emits back to A, on a virtual clock that advances 330 ns per
//! data packet (4148 bytes at 100 Gb/s), until A has the completion (`common/mod.rs`).
//! The time covers both endpoints: segmentation, header emit and parse, payload copy out of
//! A's region and into B's, receive window, SACK generation and processing, completions.
//! Criterion's throughput figure (elements/s) is packets per second on one core.
//!
//! Variants: `1MiB write` copies through 1 MiB regions (the copies run at memory
//! speed); `16 x 64KiB writes, hot buffers` sends 256 one-packet WRITEs from the same
//! 4 KiB source to the same 4 KiB destination, so the payload copies stay in cache;
//! `16KiB write, 64-byte packets` is the 1 MiB case with 64-byte payloads, so the two copies
//! per packet cost next to nothing and the figure is the state machines alone (the same 256
//! packets, the same headers, SACKs and completions); `sprayed over 16 EVs` is that case
//! with the packets arriving grouped by EV, as 16 UDP sockets deliver them (`mrc-perf
//! --burst-size 1`: PSNs 0, 16, .., 240, then 1, 17, ..), so the receiver fills holes.
//! `payload copies only` does just the two 4 KiB copies per packet of the 1 MiB case
//! (region -> datagram, datagram -> region), so the state machines' own share is the
//! difference.
//! `examples/conn_drive.rs` runs the same loop a fixed number of times for callgrind.

mod common;

use common::{PACKETS, setup};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sender+receiver");
    g.throughput(Throughput::Elements(PACKETS));
    let mut s = setup(4096);
    g.bench_function("1MiB write, 4096-byte packets", |bch| {
        bch.iter(|| s.one_message())
    });
    let mut s = setup(4096);
    g.bench_function("16 x 64KiB writes, hot buffers", |bch| {
        bch.iter(|| s.hot_writes())
    });
    let mut s = setup(64);
    g.bench_function("16KiB write, 64-byte packets (no copy cost)", |bch| {
        bch.iter(|| s.one_message())
    });
    let mut s = setup(64);
    g.bench_function("16KiB write, 64-byte packets sprayed over 16 EVs", |bch| {
        bch.iter(|| s.sprayed_message())
    });
    let msg_bytes = PACKETS as usize * 4096;
    let src = vec![7u8; msg_bytes];
    let mut dst = vec![0u8; msg_bytes];
    let mut buf = vec![0u8; 4096 + 56];
    g.bench_function("payload copies only (2 x 4 KiB per packet)", |bch| {
        bch.iter(|| {
            for (s, d) in src.chunks(4096).zip(dst.chunks_mut(4096)) {
                buf[56..].copy_from_slice(criterion::black_box(s));
                d.copy_from_slice(criterion::black_box(&buf[56..]));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
