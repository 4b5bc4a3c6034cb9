//! Cost of per-packet authentication ([`mrc_transport::auth`]) on one core: sealing a
//! 4148-byte datagram (an RDMA WRITE of 4096 payload bytes: its body encrypted, a tag
//! over it all) and opening it, as sender and receiver each do once per packet. Criterion's throughput figure is bytes per second of
//! datagrams through seal + open.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mrc_transport::auth::{AUTH_TRAILER_BYTES, AuthKeys, Authenticator};

const PACKET_BYTES: usize = 4148;

fn seal_and_open(c: &mut Criterion) {
    let psk = [7u8; 32];
    let (ni, nr) = ([1u8; 32], [2u8; 32]);
    let mut tx = Authenticator::new(AuthKeys::derive(&psk, &ni, &nr, true).expect("keys"));
    let mut rx = Authenticator::new(AuthKeys::derive(&psk, &ni, &nr, false).expect("keys"));
    let mut buf = vec![0x5Au8; PACKET_BYTES + AUTH_TRAILER_BYTES];
    let mut plain = Vec::with_capacity(PACKET_BYTES + AUTH_TRAILER_BYTES);
    let mut g = c.benchmark_group("auth");
    g.throughput(Throughput::Bytes(PACKET_BYTES as u64));
    g.bench_function("seal + open, 4148-byte datagram", |b| {
        b.iter(|| {
            let n = tx.seal(&mut buf, PACKET_BYTES).expect("room");
            let m = rx.open(&buf[..n], &mut plain).expect("opens");
            // the next round seals the plain packet again
            buf[..m].copy_from_slice(&plain[..m]);
            std::hint::black_box(m)
        })
    });
    g.finish();
}

criterion_group!(benches, seal_and_open);
criterion_main!(benches);
