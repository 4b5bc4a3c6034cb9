//! Two connected endpoints on a shared virtual clock, joined by a scripted, seeded,
//! faulty network.
//!
//! Each direction is a link of `link_bps` with propagation delay `prop_delay_ns`; an EV
//! may add its own delay (`ev_extra_delay_ns`, a longer path). Every datagram passes a
//! per-packet script (when set) or the seeded random faults: drop, duplicate, delay
//! (reorder), trim (data only: the payload is cut and the BTH trim flag set, as a
//! trimming switch does), ECN-CE mark (data only); an EV can be black-holed from a given
//! time on (both directions). Time advances to the next delivery or timer; nothing sleeps.
//! A's datagrams are read gathered (`Connection::poll_transmit_gather`: headers, then the
//! lent payload), B's copied (`Connection::poll_transmit`).

use mrc_congestion::Controller;
use mrc_transport::wire::{Body, Opcode, PacketRepr};
use mrc_transport::{Access, Completion, ConnConfig, Connection, Ecn, MrKey, Sge};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Which endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The first endpoint (usually the sender).
    A,
    /// The second endpoint.
    B,
}

/// What the network does with one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Deliver after the link's delay.
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver `extra_ns` later than usual.
    Delay(u64),
    /// Deliver it, and a second copy `extra_ns` later.
    Duplicate(u64),
    /// Deliver two copies, `first_ns` and `second_ns` later than usual.
    DelayTwice(u64, u64),
    /// Cut the payload, set the trim flag, deliver (data packets; others are delivered).
    Trim,
    /// Set ECN CE and deliver.
    MarkCe,
}

/// What the script sees of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketInfo {
    /// Sender side.
    pub from: Side,
    /// EV it is sent on.
    pub ev: u32,
    /// BTH opcode.
    pub opcode: Opcode,
    /// BTH PSN.
    pub psn: u32,
    /// BTH rtx flag.
    pub rtx: bool,
    /// SEND_* / RDMA_WRITE_*.
    pub is_data: bool,
    /// Index of this datagram among all sent by `from` (0-based).
    pub nth: u64,
    /// Index among the data packets sent by `from` (0-based; meaningless for control).
    pub nth_data: u64,
    /// How many copies of this data PSN `from` sent before this one.
    pub copy: u32,
    /// Send time, ns.
    pub now_ns: u64,
}

/// Seeded random faults, applied when no script decides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Probability of losing a datagram.
    pub drop: f64,
    /// Probability of duplicating a datagram.
    pub duplicate: f64,
    /// Probability of trimming a data packet.
    pub trim: f64,
    /// Probability of marking a data packet ECN CE.
    pub ce: f64,
    /// Probability of delaying a datagram by a uniform `1..=reorder_max_ns` extra.
    pub reorder: f64,
    /// Largest extra delay of a reordered datagram, ns.
    pub reorder_max_ns: u64,
    /// `(ev, from_ns)`: from `from_ns` on, everything sent on `ev` is lost.
    pub black_holes: Vec<(u32, u64)>,
}

/// The network between the two endpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConfig {
    /// One-way propagation delay, ns. Default 2 us.
    pub prop_delay_ns: u64,
    /// Link rate each way, bit/s. Default 100 Gb/s.
    pub link_bps: u64,
    /// Extra one-way delay per EV, ns.
    pub ev_extra_delay_ns: Vec<(u32, u64)>,
    /// Random faults.
    pub faults: Faults,
    /// Seed of the fault RNG.
    pub seed: u64,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            prop_delay_ns: 2_000,
            link_bps: 100_000_000_000,
            ev_extra_delay_ns: Vec::new(),
            faults: Faults::default(),
            seed: 1,
        }
    }
}

/// What the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to the network.
    pub sent: u64,
    /// Datagrams delivered (copies included).
    pub delivered: u64,
    /// Lost by the drop fault.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Data packets trimmed.
    pub trimmed: u64,
    /// Data packets marked CE.
    pub ce_marked: u64,
    /// Delayed by the reorder fault or script.
    pub delayed: u64,
    /// Lost in a black hole.
    pub black_holed: u64,
}

/// Regions registered by [`Pair::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regions {
    /// Source on A (LOCAL_WRITE, filled with a pattern).
    pub src: MrKey,
    /// Destination on B (REMOTE_WRITE).
    pub dst: MrKey,
    /// Receive buffer on B (LOCAL_WRITE) for SENDs.
    pub recv: MrKey,
}

impl Regions {
    /// The receive buffer on B, first `len` bytes.
    pub fn recv_sge(&self, len: u32) -> Sge {
        Sge {
            lkey: self.recv.lkey,
            addr: self.recv.addr,
            len,
        }
    }

    /// The scatter/gather entry for `len` bytes of the source at `offset`.
    pub fn src_sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            lkey: self.src.lkey,
            addr: self.src.addr + offset,
            len,
        }
    }
}

/// Per-packet script.
pub type Script = Box<dyn FnMut(&PacketInfo) -> Action>;

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at_ns: u64,
    order: u64,
    to_b: bool,
    ev: u32,
    ce: bool,
    bytes: Vec<u8>,
}

/// Two connected endpoints and the network between them.
pub struct Pair<C: Controller> {
    /// Endpoint A.
    pub a: Connection<C>,
    /// Endpoint B.
    pub b: Connection<C>,
    /// The virtual clock, ns.
    pub now_ns: u64,
    /// What the network did.
    pub net: NetStats,
    cfg: NetConfig,
    queue: BinaryHeap<Reverse<InFlight>>,
    link_free_ns: [u64; 2],
    order: u64,
    rng: ChaCha8Rng,
    script: Option<Script>,
    counts: [(u64, u64); 2],
    copies: HashMap<(bool, u32), u32>,
    buf: Vec<u8>,
}

impl<C: Controller> Pair<C> {
    /// Builds both endpoints and connects them (each learns the other's QPN, initial PSN
    /// and generation).
    pub fn new(a_cfg: ConnConfig, ca: C, b_cfg: ConnConfig, cb: C, net: NetConfig) -> Self {
        Self::new_with(a_cfg, ca, b_cfg, cb, net, |_, _| {})
    }

    /// [`Pair::new`] with per-packet authentication on both ends: keys from `psk` and the
    /// setup nonces `[0xA1; 32]` (A, the initiator) and `[0xB2; 32]` (B).
    pub fn new_authenticated(
        a_cfg: ConnConfig,
        ca: C,
        b_cfg: ConnConfig,
        cb: C,
        net: NetConfig,
        psk: &[u8],
    ) -> Self {
        use mrc_transport::auth::{AuthKeys, Authenticator};
        let (na, nb) = ([0xA1u8; 32], [0xB2u8; 32]);
        Self::new_with(a_cfg, ca, b_cfg, cb, net, |a, b| {
            let ka = AuthKeys::derive(psk, &na, &nb, true).expect("valid psk");
            let kb = AuthKeys::derive(psk, &na, &nb, false).expect("valid psk");
            a.set_auth(Authenticator::new(ka)).expect("in Init");
            b.set_auth(Authenticator::new(kb)).expect("in Init");
        })
    }

    /// [`Pair::new`] with `setup` run on both endpoints before they connect.
    pub fn new_with(
        a_cfg: ConnConfig,
        ca: C,
        b_cfg: ConnConfig,
        cb: C,
        net: NetConfig,
        setup: impl FnOnce(&mut Connection<C>, &mut Connection<C>),
    ) -> Self {
        let mut a = Connection::new(a_cfg, ca).expect("valid config");
        let mut b = Connection::new(b_cfg, cb).expect("valid config");
        setup(&mut a, &mut b);
        let (pa, pb) = (a.local_params(), b.local_params());
        a.connect(pb).expect("fresh connection");
        b.connect(pa).expect("fresh connection");
        let rng = ChaCha8Rng::seed_from_u64(net.seed);
        Pair {
            a,
            b,
            now_ns: 0,
            net: NetStats::default(),
            cfg: net,
            queue: BinaryHeap::new(),
            link_free_ns: [0; 2],
            order: 0,
            rng,
            script: None,
            counts: [(0, 0); 2],
            copies: HashMap::new(),
            buf: vec![0; 65536],
        }
    }

    /// Sets the per-packet script (it decides every datagram; random faults are off
    /// while it is set, black holes still apply).
    pub fn script(&mut self, s: impl FnMut(&PacketInfo) -> Action + 'static) {
        self.script = Some(Box::new(s));
    }

    /// Removes the script.
    pub fn clear_script(&mut self) {
        self.script = None;
    }

    /// Changes the random faults from now on.
    pub fn faults_mut(&mut self) -> &mut Faults {
        &mut self.cfg.faults
    }

    /// Datagrams in the network.
    pub fn in_network(&self) -> usize {
        self.queue.len()
    }

    /// Hands every datagram both endpoints want to send now to the network (what
    /// [`Pair::step`] does first).
    pub fn pump(&mut self) {
        for side in [Side::A, Side::B] {
            loop {
                let mut buf = std::mem::take(&mut self.buf);
                let conn = match side {
                    Side::A => &mut self.a,
                    Side::B => &mut self.b,
                };
                // A reads its datagrams as a gathering datapath sends them (the headers
                // from the buffer, then the payload lent from the region:
                // `poll_transmit_gather`, what the engine uses), B as a copying one
                // (`poll_transmit`, what the simulator uses): every test on this harness
                // runs both, and the verdicts check every byte that lands.
                let got = match side {
                    Side::A => conn
                        .poll_transmit_gather(self.now_ns, &mut buf)
                        .map(|(t, lent)| {
                            let mut bytes = buf[..t.len].to_vec();
                            if let Some(p) = lent {
                                // SAFETY: the connection is not used between the poll and
                                // this copy, so its regions are as they were.
                                bytes.extend_from_slice(unsafe { p.bytes() });
                            }
                            (t, bytes)
                        }),
                    Side::B => conn
                        .poll_transmit(self.now_ns, &mut buf)
                        .map(|t| (t, buf[..t.len].to_vec())),
                };
                let Some((t, bytes)) = got else {
                    self.buf = buf;
                    break;
                };
                self.buf = buf;
                self.launch(side, t.ev, t.ecn == Ecn::Ce, bytes);
            }
        }
    }

    fn launch(&mut self, from: Side, ev: u32, ce_in: bool, bytes: Vec<u8>) {
        let si = usize::from(from == Side::B);
        let sender = match from {
            Side::A => &self.a,
            Side::B => &self.b,
        };
        // an authenticated datagram's body is encrypted: only its BTH is read here, and a
        // trim delivers it unchanged (a switch cannot cut it without breaking the tag)
        let p = if sender.is_authenticated() {
            None
        } else {
            Some(PacketRepr::parse(&bytes).expect("endpoints emit valid packets"))
        };
        let bth = match &p {
            Some(p) => p.bth,
            None => mrc_transport::wire::Bth::new_checked(&bytes[..])
                .and_then(|h| mrc_transport::wire::BthRepr::parse(&h))
                .expect("endpoints emit valid BTHs"),
        };
        let is_data = bth.opcode.is_data();
        let key = (from == Side::B, bth.psn);
        let copy = if is_data {
            let c = self.copies.entry(key).or_insert(0);
            *c += 1;
            *c - 1
        } else {
            0
        };
        let (nth, nth_data) = self.counts[si];
        self.counts[si] = (nth + 1, nth_data + u64::from(is_data));
        let info = PacketInfo {
            from,
            ev,
            opcode: bth.opcode,
            psn: bth.psn,
            rtx: bth.flags.rtx,
            is_data,
            nth,
            nth_data,
            copy,
            now_ns: self.now_ns,
        };
        self.net.sent += 1;
        let len = bytes.len() as u64;
        let start = self.now_ns.max(self.link_free_ns[si]);
        let ser = len * 8 * 1_000_000_000 / self.cfg.link_bps.max(1);
        self.link_free_ns[si] = start + ser;
        let extra = self
            .cfg
            .ev_extra_delay_ns
            .iter()
            .find(|(e, _)| *e == ev)
            .map_or(0, |(_, d)| *d);
        let arrive = start + ser + self.cfg.prop_delay_ns + extra;
        if self
            .cfg
            .faults
            .black_holes
            .iter()
            .any(|&(e, from_ns)| e == ev && self.now_ns >= from_ns)
        {
            self.net.black_holed += 1;
            return;
        }
        let action = match self.script.as_mut() {
            Some(s) => s(&info),
            None => self.random_action(is_data),
        };
        let to_b = from == Side::A;
        match action {
            Action::Deliver => self.push(arrive, to_b, ev, ce_in, bytes),
            Action::Drop => self.net.dropped += 1,
            Action::Delay(d) => {
                self.net.delayed += 1;
                self.push(arrive + d, to_b, ev, ce_in, bytes);
            }
            Action::Duplicate(d) => {
                self.net.duplicated += 1;
                self.push(arrive, to_b, ev, ce_in, bytes.clone());
                self.push(arrive + d, to_b, ev, ce_in, bytes);
            }
            Action::DelayTwice(d1, d2) => {
                self.net.delayed += 1;
                self.net.duplicated += 1;
                self.push(arrive + d1, to_b, ev, ce_in, bytes.clone());
                self.push(arrive + d2, to_b, ev, ce_in, bytes);
            }
            Action::Trim => {
                if let (true, Some(p)) = (is_data, p) {
                    self.net.trimmed += 1;
                    let mut q = p;
                    q.bth.flags.trimmed = true;
                    if let Body::Data(ref mut d) = q.body {
                        d.payload = &[];
                    }
                    let mut out = vec![0u8; q.buffer_len()];
                    q.emit(&mut out).expect("trimmed packet emits");
                    self.push(arrive, to_b, ev, ce_in, out);
                } else {
                    self.push(arrive, to_b, ev, ce_in, bytes);
                }
            }
            Action::MarkCe => {
                if is_data {
                    self.net.ce_marked += 1;
                }
                self.push(arrive, to_b, ev, is_data || ce_in, bytes);
            }
        }
    }

    fn random_action(&mut self, is_data: bool) -> Action {
        let f = &self.cfg.faults;
        let (drop, dup, trim, ce, reorder, rmax) = (
            f.drop,
            f.duplicate,
            f.trim,
            f.ce,
            f.reorder,
            f.reorder_max_ns,
        );
        let r: f64 = self.rng.random();
        if r < drop {
            return Action::Drop;
        }
        if self.rng.random::<f64>() < dup {
            let d = if rmax > 0 {
                self.rng.random_range(1..=rmax)
            } else {
                0
            };
            return Action::Duplicate(d);
        }
        if is_data && self.rng.random::<f64>() < trim {
            return Action::Trim;
        }
        if is_data && self.rng.random::<f64>() < ce {
            return Action::MarkCe;
        }
        if rmax > 0 && self.rng.random::<f64>() < reorder {
            return Action::Delay(self.rng.random_range(1..=rmax));
        }
        Action::Deliver
    }

    fn push(&mut self, at_ns: u64, to_b: bool, ev: u32, ce: bool, bytes: Vec<u8>) {
        self.order += 1;
        self.queue.push(Reverse(InFlight {
            at_ns,
            order: self.order,
            to_b,
            ev,
            ce,
            bytes,
        }));
    }

    /// Injects raw bytes as if they arrived at `to` now (hostile or crafted input).
    pub fn inject(&mut self, to: Side, ev: u32, ecn: Ecn, bytes: &[u8]) {
        match to {
            Side::A => self.a.handle_datagram(self.now_ns, ev, ecn, bytes),
            Side::B => self.b.handle_datagram(self.now_ns, ev, ecn, bytes),
        }
    }

    /// The earliest pending delivery or endpoint timer, ns (call [`Pair::pump`] first so
    /// what the endpoints want to send now is in the network).
    pub fn next_event_ns(&self) -> Option<u64> {
        [
            self.queue.peek().map(|Reverse(f)| f.at_ns),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Sends what both endpoints have, then advances the clock to the next delivery or
    /// timer and handles it. Returns false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.pump();
        let Some(next) = self.next_event_ns() else {
            return false;
        };
        self.now_ns = self.now_ns.max(next);
        while self
            .queue
            .peek()
            .is_some_and(|Reverse(f)| f.at_ns <= self.now_ns)
        {
            let Some(Reverse(f)) = self.queue.pop() else {
                break;
            };
            self.net.delivered += 1;
            let ecn = if f.ce { Ecn::Ce } else { Ecn::Ect0 };
            if f.to_b {
                self.b.handle_datagram(self.now_ns, f.ev, ecn, &f.bytes);
            } else {
                self.a.handle_datagram(self.now_ns, f.ev, ecn, &f.bytes);
            }
        }
        if self.a.poll_timeout().is_some_and(|t| t <= self.now_ns) {
            self.a.handle_timeout(self.now_ns);
        }
        if self.b.poll_timeout().is_some_and(|t| t <= self.now_ns) {
            self.b.handle_timeout(self.now_ns);
        }
        true
    }

    /// Steps until `done` holds (returns true) or the clock passes `limit_ns` or nothing is
    /// left to happen (returns false). Panics if time stops advancing for a million steps
    /// (a livelock is a bug, not a hang).
    pub fn run_until(&mut self, limit_ns: u64, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let mut last = self.now_ns;
        let mut same = 0u32;
        loop {
            if done(self) {
                return true;
            }
            if self.now_ns > limit_ns || !self.step() {
                return done(self);
            }
            if self.now_ns == last {
                same += 1;
                assert!(same < 1_000_000, "livelock at {} ns", self.now_ns);
            } else {
                last = self.now_ns;
                same = 0;
            }
        }
    }

    /// Registers a `len`-byte source region on A filled with [`pattern`]`(seed)` and a
    /// `len`-byte REMOTE_WRITE destination on B (plus a LOCAL_WRITE one for SENDs).
    pub fn regions(&mut self, len: usize, seed: u64) -> Regions {
        let src = self
            .a
            .regions_mut()
            .register(len, Access::LOCAL_WRITE)
            .expect("register");
        pattern(self.a.regions_mut().bytes_mut(src.lkey).expect("src"), seed);
        let dst = self
            .b
            .regions_mut()
            .register(len, Access::REMOTE_WRITE)
            .expect("register");
        let recv = self
            .b
            .regions_mut()
            .register(len.max(1), Access::LOCAL_WRITE)
            .expect("register");
        Regions { src, dst, recv }
    }

    /// Every completion A has, in order.
    pub fn a_completions(&mut self) -> Vec<Completion> {
        std::iter::from_fn(|| self.a.poll_completion()).collect()
    }

    /// Every completion B has, in order.
    pub fn b_completions(&mut self) -> Vec<Completion> {
        std::iter::from_fn(|| self.b.poll_completion()).collect()
    }

    /// Whether B's `dst` region equals A's `src` region byte for byte.
    pub fn dst_matches(&self, r: &Regions) -> bool {
        match (
            self.a.regions().bytes(r.src.lkey),
            self.b.regions().bytes(r.dst.lkey),
        ) {
            (Ok(s), Ok(d)) => fnv1a(s) == fnv1a(d) && s == d,
            _ => false,
        }
    }

    /// Steps until nothing is left to happen or `limit_ns` passes; returns the final time.
    pub fn run_to_quiet(&mut self, limit_ns: u64) -> u64 {
        self.run_until(limit_ns, |_| false);
        self.now_ns
    }
}

/// A connection config with `evs` EVs numbered from 0, for tests.
pub fn conn_config(
    qpn: u32,
    initial_psn: u32,
    generation: u16,
    n_evs: u32,
    seed: u64,
) -> ConnConfig {
    ConnConfig {
        local_qpn: qpn,
        initial_psn: mrc_transport::Psn::new(initial_psn),
        generation,
        evs: (0..n_evs).collect(),
        seed,
        ..ConnConfig::default()
    }
}

/// Emits a packet for injection: opcode `opcode`, destination `dest_qpn`, PSN `psn`,
/// MRCETH EV `ev`, generation `generation`, timestamp flag set with `ts`, and `body`.
#[allow(clippy::too_many_arguments)]
pub fn craft(
    opcode: Opcode,
    dest_qpn: u32,
    psn: u32,
    ev: u32,
    msn: u32,
    generation: u16,
    ts: u32,
    body: Body<'_>,
) -> Vec<u8> {
    use mrc_transport::wire::{BthFlags, BthRepr, BthSpare, MrcethRepr};
    let p = PacketRepr {
        bth: BthRepr {
            opcode,
            pkey: 0xFFFF,
            dest_qpn,
            psn,
            flags: BthFlags {
                ack_req: false,
                rtx: false,
                ts: true,
                trimmed: false,
            },
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev,
            msn,
            send_ts_ns: ts,
            generation,
            reserved: 0,
        },
        body,
    };
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).expect("crafted packet emits");
    out
}

/// FNV-1a 64 over `bytes` (a checksum for "every byte exact").
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Fills `buf` with a deterministic pattern from `seed`.
pub fn pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}
