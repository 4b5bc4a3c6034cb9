//! The sender -> receiver -> SACK -> sender loop shared by `benches/conn.rs` (criterion) and
//! `examples/conn_drive.rs` (a fixed packet count, for `valgrind --tool=callgrind`).
//!
//! Two connections A and B on a virtual clock that advances 330 ns per data packet (4148
//! bytes at 100 Gb/s): every datagram A emits is handed to B at once and every SACK B emits
//! back to A, until A has the completions. Nothing reads a clock.
//!
//! Sprayed ([`Bench::sprayed_message`]): A's datagrams of one round (all it may send before
//! B answers) reach B grouped by EV, in EV order, each EV's in the order sent: what a
//! receiver sees when each EV is a UDP socket of its own (`mrc-perf --burst-size 1`) and
//! each socket's datagrams of a burst leave in one GSO send and arrive in one GRO receive.
//! With 16 EVs a 256-packet message arrives as PSNs 0, 16, 32, .., 240, then 1, 17, ..

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_transport::send::SendConfig;
use mrc_transport::{Access, ConnConfig, Connection, Ecn, PeerParams, Psn, Sge};

/// Packets per iteration, every variant.
pub const PACKETS: u64 = 256;

/// A and B, A's source buffer and B's destination, and the clock.
pub struct Bench {
    a: Connection<FixedWindow>,
    b: Connection<FixedWindow>,
    sge: Sge,
    dst_addr: u64,
    rkey: u32,
    mtu_bytes: u32,
    now: u64,
    buf: Vec<u8>,
    wr: u64,
    /// Sprayed delivery: A's datagrams of the round, back to back, and (EV, start, length)
    /// of each.
    held: Vec<u8>,
    held_at: Vec<(u32, usize, usize)>,
}

/// A connected pair with `mtu_bytes` of payload per packet and a region of
/// `PACKETS * mtu_bytes` bytes on each side.
pub fn setup(mtu_bytes: u32) -> Bench {
    let msg_bytes = PACKETS as u32 * mtu_bytes;
    let cfg = |qpn: u32, evs: u32| ConnConfig {
        local_qpn: qpn,
        evs: (0..evs).collect(),
        send: SendConfig {
            mtu_payload_bytes: mtu_bytes,
            ..SendConfig::default()
        },
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
        .register(msg_bytes as usize, Access::LOCAL_WRITE)
        .unwrap();
    let dst = b
        .regions_mut()
        .register(msg_bytes as usize, Access::REMOTE_WRITE)
        .unwrap();
    Bench {
        a,
        b,
        sge: Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: msg_bytes,
        },
        dst_addr: dst.addr,
        rkey: dst.rkey,
        mtu_bytes,
        now: 0,
        buf: vec![0; mtu_bytes as usize + 4096],
        wr: 0,
        held: Vec::with_capacity(PACKETS as usize * (mtu_bytes as usize + 4096)),
        held_at: Vec::with_capacity(PACKETS as usize),
    }
}

impl Bench {
    /// One RDMA WRITE of `PACKETS` packets, driven to its completion.
    pub fn one_message(&mut self) {
        self.message(false);
    }

    /// [`Bench::one_message`], delivered sprayed (the module's doc).
    pub fn sprayed_message(&mut self) {
        self.message(true);
    }

    fn message(&mut self, sprayed: bool) {
        self.wr += 1;
        self.a
            .post_write(self.wr, self.sge, self.dst_addr, self.rkey)
            .unwrap();
        self.drive(1, sprayed);
    }

    /// `PACKETS` one-packet WRITEs from the first `mtu_bytes` of the source to the first
    /// `mtu_bytes` of the destination (the payload stays in cache), driven to their
    /// completions.
    pub fn hot_writes(&mut self) {
        let sge = Sge {
            len: self.mtu_bytes,
            ..self.sge
        };
        for _ in 0..PACKETS {
            self.wr += 1;
            self.a
                .post_write(self.wr, sge, self.dst_addr, self.rkey)
                .unwrap();
        }
        self.drive(PACKETS, false);
    }

    fn drive(&mut self, mut completions: u64, sprayed: bool) {
        loop {
            let mut moved = false;
            if sprayed {
                self.held.clear();
                self.held_at.clear();
                while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf) {
                    self.now += 330;
                    self.held_at.push((t.ev, self.held.len(), t.len));
                    self.held.extend_from_slice(&self.buf[..t.len]);
                }
                let evs = self.held_at.iter().map(|h| h.0).max().map_or(0, |m| m + 1);
                for ev in 0..evs {
                    for &(e, at, len) in &self.held_at {
                        if e == ev {
                            self.b.handle_datagram(
                                self.now,
                                ev,
                                Ecn::Ect0,
                                &self.held[at..at + len],
                            );
                            moved = true;
                        }
                    }
                }
            } else {
                while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf) {
                    self.now += 330;
                    self.b
                        .handle_datagram(self.now, t.ev, Ecn::Ect0, &self.buf[..t.len]);
                    moved = true;
                }
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
