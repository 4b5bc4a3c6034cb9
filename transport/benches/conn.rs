//! Per-packet cost of the sender plus receiver state machines at 4096-byte payload.
//!
//! One iteration: A posts a 1 MiB RDMA WRITE (256 packets of 4096 bytes); every datagram A
//! emits is handed to B at once and every SACK B emits back to A, on a virtual clock that
//! advances 330 ns per data packet (4148 bytes at 100 Gb/s), until A has the completion.
//! The time covers both endpoints: segmentation, header emit and parse, payload copy out of
//! A's region and into B's, receive window, SACK generation and processing, completions.
//! Criterion's throughput figure (elements/s) is packets per second on one core.
//!
//! Two variants: `1MiB write` copies through 1 MiB regions (the copies run at memory
//! speed); `16 x 64KiB writes, hot buffers` sends 16 WRITEs of 16 packets from the same
//! 64 KiB source to the same 64 KiB destination, so the payload copies stay in cache and
//! the figure is closer to the state machines alone. `payload copies only` does just the two
//! 4 KiB copies per packet of the 1 MiB case (region -> datagram, datagram -> region), so
//! the state machines' own share is the difference.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_transport::{Access, ConnConfig, Connection, Ecn, PeerParams, Psn, Sge};

const MSG_BYTES: u32 = 1 << 20;
const PACKETS: u64 = (MSG_BYTES / 4096) as u64;

struct Bench {
    a: Connection<FixedWindow>,
    b: Connection<FixedWindow>,
    sge: Sge,
    dst_addr: u64,
    rkey: u32,
    now: u64,
    buf: Vec<u8>,
    wr: u64,
}

fn setup() -> Bench {
    let cfg = |qpn: u32, evs: u32| ConnConfig {
        local_qpn: qpn,
        evs: (0..evs).collect(),
        ..ConnConfig::default()
    };
    let cc = || {
        FixedWindowConfig {
            cwnd_bytes: 64 << 20,
        }
        .build()
    };
    let mut a = Connection::new(cfg(1, 16), cc()).unwrap();
    let mut b = Connection::new(cfg(2, 16), cc()).unwrap();
    a.connect(PeerParams {
        qpn: 2,
        initial_psn: Psn::new(0),
        generation: 1,
    })
    .unwrap();
    b.connect(PeerParams {
        qpn: 1,
        initial_psn: Psn::new(0),
        generation: 1,
    })
    .unwrap();
    let src = a
        .regions_mut()
        .register(MSG_BYTES as usize, Access::LOCAL_WRITE)
        .unwrap();
    let dst = b
        .regions_mut()
        .register(MSG_BYTES as usize, Access::REMOTE_WRITE)
        .unwrap();
    Bench {
        a,
        b,
        sge: Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: MSG_BYTES,
        },
        dst_addr: dst.addr,
        rkey: dst.rkey,
        now: 0,
        buf: vec![0; 8192],
        wr: 0,
    }
}

impl Bench {
    fn one_message(&mut self) {
        self.wr += 1;
        self.a
            .post_write(self.wr, self.sge, self.dst_addr, self.rkey)
            .unwrap();
        self.drive(1);
    }

    fn hot_writes(&mut self) {
        let sge = Sge {
            len: 4096,
            ..self.sge
        };
        for _ in 0..PACKETS {
            self.wr += 1;
            self.a
                .post_write(self.wr, sge, self.dst_addr, self.rkey)
                .unwrap();
        }
        self.drive(PACKETS);
    }

    fn drive(&mut self, mut completions: u64) {
        loop {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf) {
                self.now += 330;
                self.b
                    .handle_datagram(self.now, t.ev, Ecn::Ect0, &self.buf[..t.len]);
                moved = true;
            }
            while let Some(t) = self.b.poll_transmit(self.now, &mut self.buf) {
                self.a
                    .handle_datagram(self.now, t.ev, Ecn::Ect0, &self.buf[..t.len]);
                moved = true;
            }
            while let Some(c) = self.a.poll_completion() {
                assert_eq!(c.status, mrc_transport::WcStatus::Success);
                completions -= 1;
                if completions == 0 {
                    assert_eq!(c.wr_id, self.wr);
                    return;
                }
            }
            if !moved {
                // delayed SACK: let the receiver's timer run
                if let Some(t) = self.b.poll_timeout() {
                    self.now = self.now.max(t);
                }
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sender+receiver");
    g.throughput(Throughput::Elements(PACKETS));
    let mut s = setup();
    g.bench_function("1MiB write, 4096-byte packets", |bch| {
        bch.iter(|| s.one_message())
    });
    let mut s = setup();
    g.bench_function("16 x 64KiB writes, hot buffers", |bch| {
        bch.iter(|| s.hot_writes())
    });
    let src = vec![7u8; MSG_BYTES as usize];
    let mut dst = vec![0u8; MSG_BYTES as usize];
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
