//! [`Worker`]: progress on the caller's thread (UCX's `ucp_worker_progress`, libfabric's
//! `FI_PROGRESS_MANUAL`). The worker owns the datapath and its QPs' transport endpoints
//! directly, as the engine thread does; the application posts work requests, calls
//! [`Worker::progress`] (one pass: datagrams in, due timers, completions to the CQs,
//! datagrams out: the very loop body the engine thread runs, [`Engine::poll_once`]) and
//! polls its CQs, all on one thread, without a channel or a thread hop in between.
//!
//! Because nothing runs unless the caller calls in, memory registered with
//! [`Worker::reg_mr_raw`] is touched only inside calls on the worker: between calls the
//! application may read and write it freely (the [`mrc_transport::region::mem`] contract).
//! A worker that is not progressed does not retransmit, acknowledge or run its timers:
//! call [`Worker::progress`] (or [`Worker::wait`]) whenever the application waits for
//! anything.
//!
//! For latency, give the datapath few receives ([`UdpConfig::rx_slots`], e.g. 2 for one
//! message in flight): with many `recvmsg`s armed on one socket the kernel punts the
//! ones that lose the race for a datagram to io-wq workers, and later datagrams then
//! complete on a worker thread (`mrc-perf --test lat --progress caller` uses 2).

use super::setup::{
    ConnHandle, ConnectId, ListenOptions, ListenerId, Setup, SetupHost, SetupStats,
};
use super::thread::{Cq, Engine};
use super::{
    Connected, EngineConfig, EngineError, EngineStats, MrMem, QpConfig, QpStats, Wr, bootstrap,
    finish_bootstrap_with, negotiate_auth, new_qp_entry, peer_params, qp_info, source,
};
use crate::datapath::Datapath;
use crate::udp::{DirectDatapath, UdpConfig, UringDatapath};
use bootstrap::{QpInfo, RemoteMr};
use mrc_transport::completion::Completion;
use mrc_transport::region::{AccessError, MrKey, RawMem, SharedMem};
use mrc_transport::{Access, ConnConfig, PostError, Sge};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Longest sleep of [`Worker::wait`] while a handshake may be waiting for bytes, ns
/// (TCP readiness, or a set-up socket's datagrams, do not wake the datapath): 1 ms.
const SETUP_POLL_NS: u64 = 1_000_000;

/// What the worker keeps of one QP besides its engine entry.
#[derive(Debug)]
struct WorkerQp {
    cfg: ConnConfig,
    /// Registered regions and their rights.
    mrs: HashMap<u32, (MrKey, Access)>,
    /// What the peer said when the QP connected.
    remote: Option<QpInfo>,
}

/// An endpoint progressed by the caller's thread: one datapath (io_uring UDP by default)
/// and its QPs, named by QPN. Not `Sync`: one thread drives it at a time (it may move
/// between threads).
pub struct Worker<D: Datapath = UringDatapath> {
    engine: Engine<D>,
    qps: HashMap<u32, WorkerQp>,
    /// Listeners and connection attempts ([`Worker::listen`], [`Worker::connect_start`]).
    setup: Setup,
    /// [`Worker::set_defer_sends_after_receive`].
    defer_after_receive: bool,
    /// The previous pass delivered a receive and left its sends to this one.
    sends_deferred: bool,
    /// The first QP a send-side work request was posted on since the last
    /// [`Worker::progress`] pass (its datagrams leave first in that pass).
    posted: Option<u32>,
}

impl<D: Datapath> std::fmt::Debug for Worker<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("udp_addr", &self.engine.dp.local_addr())
            .field("qps", &self.qps.len())
            .finish()
    }
}

impl Worker<UringDatapath> {
    /// A worker on an io_uring UDP datapath bound as `udp` says.
    ///
    /// # Errors
    /// [`EngineError::Datapath`] when the sockets or rings cannot be set up.
    pub fn new(udp: UdpConfig, cfg: EngineConfig) -> Result<Self, EngineError> {
        Ok(Worker::with_datapath(UringDatapath::new(udp)?, cfg))
    }
}

impl Worker<DirectDatapath> {
    /// A worker on the UDP datapath of plain non-blocking system calls
    /// ([`DirectDatapath`]: the same sockets as [`Worker::new`]'s, no io_uring), the
    /// faster one for latency when the caller busy-polls (`mrc-perf --test lat` measures
    /// both: `--udp-io`).
    ///
    /// # Errors
    /// [`EngineError::Datapath`] when the sockets cannot be set up.
    pub fn direct(udp: UdpConfig, cfg: EngineConfig) -> Result<Self, EngineError> {
        Ok(Worker::with_datapath(DirectDatapath::new(udp)?, cfg))
    }
}

impl<D: Datapath> Worker<D> {
    /// A worker on any datapath (e.g. [`crate::udp::FakeDatapath`]).
    pub fn with_datapath(dp: D, cfg: EngineConfig) -> Self {
        Worker {
            engine: Engine::new(dp, cfg),
            qps: HashMap::new(),
            setup: Setup::default(),
            defer_after_receive: false,
            posted: None,
            sends_deferred: false,
        }
    }

    /// The datapath itself, for traffic of the embedding's own before a QP is connected
    /// (e.g. an in-band rendezvous on the same UD QPs). Datagrams it takes with
    /// [`Datapath::rx_burst`] never reach the engine: call it only while no QP of this
    /// worker expects any.
    pub fn datapath_mut(&mut self) -> &mut D {
        &mut self.engine.dp
    }

    /// Address of the receive socket (what peers send to).
    pub fn udp_addr(&self) -> SocketAddr {
        self.engine.dp.local_addr()
    }

    /// The datapath (e.g. [`Datapath::ev_sockets`]: every QP of the worker shares its EV
    /// sockets).
    pub fn datapath(&self) -> &D {
        &self.engine.dp
    }

    /// Creates a QP (as [`super::Context::create_qp`]); returns its QPN, the handle every
    /// other call takes.
    ///
    /// # Errors
    /// As [`super::Context::create_qp`].
    pub fn create_qp(&mut self, cfg: QpConfig) -> Result<u32, EngineError> {
        let mut qpn = 0;
        for _ in 0..64 {
            let q = (source::random_u64().map_err(EngineError::Refused)? & 0xFF_FFFF) as u32;
            if q != 0 && !self.qps.contains_key(&q) {
                qpn = q;
                break;
            }
        }
        if qpn == 0 {
            return Err(EngineError::Refused("no free QPN".into()));
        }
        let cq = Cq::Local {
            send: VecDeque::new(),
            recv: VecDeque::new(),
        };
        let reorders = self.engine.dp.reorders_bursts();
        let plane_ips = self.engine.dp.plane_ips();
        let (conn_cfg, entry) = new_qp_entry(&cfg, qpn, reorders, &plane_ips, cq)?;
        self.engine.add_qp(qpn, entry);
        if self.defer_after_receive {
            if let Some(e) = self.engine.qps.get_mut(&qpn) {
                e.conn.set_data_before_sack(true);
            }
        }
        self.qps.insert(
            qpn,
            WorkerQp {
                cfg: conn_cfg,
                mrs: HashMap::new(),
                remote: None,
            },
        );
        Ok(qpn)
    }

    /// Destroys QP `qpn` (closes its sockets; outstanding work is dropped).
    pub fn destroy_qp(&mut self, qpn: u32) {
        self.engine.remove_qp(qpn);
        self.qps.remove(&qpn);
    }

    /// QPs this worker holds (those of handshakes in flight included).
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    fn qp(&self, qpn: u32) -> Result<&WorkerQp, EngineError> {
        self.qps
            .get(&qpn)
            .ok_or_else(|| EngineError::Refused(format!("no QP {qpn}")))
    }

    /// Runs `f` on QP `qpn`'s transport connection: for what the worker has no call of
    /// its own, such as [`mrc_transport::Connection::set_ev_denied`] from a controller,
    /// reading its path table, or setting its congestion controller before it connects.
    ///
    /// # Errors
    /// [`EngineError::Refused`] for an unknown QP.
    pub fn with_conn<R>(
        &mut self,
        qpn: u32,
        f: impl FnOnce(&mut mrc_transport::Connection<mrc_congestion::AnyController>) -> R,
    ) -> Result<R, EngineError> {
        let e = self
            .engine
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| EngineError::Refused(format!("no QP {qpn}")))?;
        Ok(f(&mut e.conn))
    }

    /// The transport configuration of QP `qpn` in force.
    pub fn config(&self, qpn: u32) -> Option<&ConnConfig> {
        self.qps.get(&qpn).map(|q| &q.cfg)
    }

    fn register(&mut self, qpn: u32, mem: MrMem, access: Access) -> Result<MrKey, EngineError> {
        self.qp(qpn)?;
        let k = self
            .engine
            .register(qpn, mem, access)
            .map_err(EngineError::Refused)?;
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.mrs.insert(k.lkey, (k, access));
        }
        Ok(k)
    }

    /// Registers the application's [`SharedMem`] with QP `qpn` (as
    /// [`super::Qp::reg_mr_shared`]).
    ///
    /// # Errors
    /// [`EngineError::Refused`] (unknown QP, table full).
    pub fn reg_mr_shared(
        &mut self,
        qpn: u32,
        mem: &SharedMem,
        access: Access,
    ) -> Result<MrKey, EngineError> {
        self.register(qpn, MrMem::Shared(mem.clone()), access)
    }

    /// Registers `len` bytes the application owns at `ptr` with QP `qpn` (verbs
    /// `ibv_reg_mr`).
    ///
    /// # Safety
    /// The contract of [`mrc_transport::region::mem`] until [`Worker::dereg_mr`] succeeds
    /// (or the QP or the worker is gone): `ptr .. ptr + len` stays valid and unmoved, and
    /// nobody touches or borrows it during a call on this worker (between calls the
    /// application may).
    ///
    /// # Errors
    /// [`EngineError::Refused`] for a null `ptr` with `len > 0`, `len > isize::MAX`, a
    /// range that wraps past the end of the address space, an unknown QP or a full table.
    pub unsafe fn reg_mr_raw(
        &mut self,
        qpn: u32,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MrKey, EngineError> {
        // SAFETY: the caller's contract is RawMem::new's.
        let mem = unsafe { RawMem::new(ptr, len) }
            .ok_or_else(|| EngineError::Refused("null or oversized memory".into()))?;
        self.register(qpn, MrMem::Raw(mem), access)
    }

    /// Deregisters region `lkey` of QP `qpn`, unless a work request still names it.
    ///
    /// # Errors
    /// [`EngineError::Deregister`] ([`mrc_transport::DeregisterError::InUse`],
    /// [`mrc_transport::DeregisterError::UnknownKey`]).
    pub fn dereg_mr(&mut self, qpn: u32, lkey: u32) -> Result<(), EngineError> {
        self.engine.deregister(qpn, lkey)?;
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.mrs.remove(&lkey);
        }
        Ok(())
    }

    /// What QP `qpn`'s peer needs to connect (as [`super::Qp::local_info`]).
    ///
    /// # Errors
    /// [`EngineError::Refused`] for an unknown QP.
    pub fn local_info(&self, qpn: u32) -> Result<QpInfo, EngineError> {
        let q = self.qp(qpn)?;
        let regions = q
            .mrs
            .values()
            .filter(|(_, a)| a.contains(Access::REMOTE_WRITE))
            .map(|(k, _)| RemoteMr::from(*k))
            .collect();
        Ok(qp_info(
            &q.cfg,
            self.udp_addr().port(),
            &self.engine.dp.plane_ips(),
            regions,
        ))
    }

    /// Connects QP `qpn` to `remote` at `udp` (as [`super::Qp::connect`]). Returns this
    /// side's EV source ports.
    ///
    /// # Errors
    /// As [`super::Qp::connect`].
    pub fn connect(
        &mut self,
        qpn: u32,
        remote: &QpInfo,
        udp: SocketAddr,
    ) -> Result<Vec<u16>, EngineError> {
        let peer = peer_params(&self.qp(qpn)?.cfg, remote)?;
        let ports = self
            .engine
            .connect_qp(qpn, peer, udp, &remote.plane_ips)
            .map_err(EngineError::Refused)?;
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.remote = Some(remote.clone());
        }
        Ok(ports)
    }

    /// What the peer of QP `qpn` said when it connected (its QPN, PSN, window and the
    /// regions it lets this side write); `None` before connect or for an unknown QP.
    pub fn peer_info(&self, qpn: u32) -> Option<&QpInfo> {
        self.qps.get(&qpn)?.remote.as_ref()
    }

    /// Runs `f` on the setup state with this worker as its host (the state is taken out
    /// meanwhile, so the host calls cannot reach it).
    fn with_setup<T>(&mut self, f: impl FnOnce(&mut Setup, &mut dyn SetupHost) -> T) -> T {
        let mut s = std::mem::take(&mut self.setup);
        let r = f(&mut s, self);
        self.setup = s;
        r
    }

    /// Opens a listener for connections set up through a [`ConnHandle`]: a non-blocking
    /// TCP socket on this worker's IP (port chosen by the kernel; a UDP one with
    /// [`ListenOptions::carrier`] [`super::SetupCarrier::Udp`]) and a secret of
    /// [`super::setup::SECRET_BYTES`] from the OS CSPRNG. Returns its id and the handle
    /// to carry to peers over the application's own channel
    /// ([`ConnHandle::to_bytes`], [`super::setup::HANDLE_BYTES`] bytes). Each
    /// connection a peer makes with [`Worker::connect_start`] gets a new QP made from
    /// `cfg`, handed out by [`Worker::poll_accept`]. Never blocks. The handshake and its
    /// checks: [`super::setup`].
    ///
    /// # Errors
    /// [`EngineError::Refused`] when the worker's receive socket is bound to an
    /// unspecified IP (the handle must name a reachable one) or the CSPRNG fails;
    /// [`EngineError::Bootstrap`] when the socket cannot be opened.
    pub fn listen(&mut self, cfg: QpConfig) -> Result<(ListenerId, ConnHandle), EngineError> {
        self.listen_with(cfg, ListenOptions::default())
    }

    /// [`Worker::listen`] with options, e.g. per-packet authentication
    /// ([`ListenOptions::authenticate_packets`]; the handle carries the choice to the
    /// peers).
    ///
    /// # Errors
    /// As [`Worker::listen`].
    pub fn listen_with(
        &mut self,
        cfg: QpConfig,
        opts: ListenOptions,
    ) -> Result<(ListenerId, ConnHandle), EngineError> {
        let ip = self.udp_addr().ip();
        let r = self.setup.listen(ip, 0, None, cfg, opts);
        self.with_plane_count(r)
    }

    /// [`Worker::listen_with`] at a chosen `port` (TCP or UDP as the options' carrier
    /// says; 0: the kernel picks it) of the
    /// worker's IP, with a chosen `secret` (`None`: drawn from the OS CSPRNG), for a
    /// layer that names its listeners itself (the libfabric provider's `fi_getinfo`
    /// with a node and service). A secret the caller chose is only as secret as the
    /// caller keeps it: one derived from public facts lets anyone who can reach the port
    /// connect.
    ///
    /// # Errors
    /// As [`Worker::listen`], and `EngineError::Bootstrap` when the port is taken.
    pub fn listen_at(
        &mut self,
        cfg: QpConfig,
        opts: ListenOptions,
        port: u16,
        secret: Option<[u8; super::setup::SECRET_BYTES]>,
    ) -> Result<(ListenerId, ConnHandle), EngineError> {
        let ip = self.udp_addr().ip();
        let r = self.setup.listen(ip, port, secret, cfg, opts);
        self.with_plane_count(r)
    }

    /// How many planes this worker's datapath sends on ([`Datapath::plane_ips`], at
    /// least 1): what its handles say ([`ConnHandle::planes`]).
    pub fn plane_count(&self) -> usize {
        self.engine.dp.plane_ips().len().max(1)
    }

    /// A new listener's handle with this worker's plane count.
    fn with_plane_count(
        &mut self,
        r: Result<(ListenerId, ConnHandle), EngineError>,
    ) -> Result<(ListenerId, ConnHandle), EngineError> {
        let (id, h) = r?;
        match h.with_planes(self.plane_count()) {
            Ok(h) => Ok((id, h)),
            Err(e) => {
                self.close_listener(id);
                Err(EngineError::Refused(e.to_string()))
            }
        }
    }

    /// The next connection listener `id` completed, as the QPN of its new QP (connected,
    /// its source filter set: post at once); `None` while none is complete. Advances the
    /// listener's handshakes first (and [`Worker::progress`] does too). Never blocks.
    /// Connections that fail (a wrong secret, foreign bytes, a deadline) are dropped and
    /// counted in [`Worker::setup_stats`], never returned.
    ///
    /// # Errors
    /// `Some(Err(EngineError::Refused))` for an unknown or closed listener;
    /// `Some(Err(EngineError::Bootstrap))` when `accept(2)` fails (e.g. out of file
    /// descriptors; the listener stays open and the next call retries).
    pub fn poll_accept(&mut self, id: ListenerId) -> Option<Result<u32, EngineError>> {
        self.with_setup(|s, h| s.poll_accept(id, h))
    }

    /// Closes listener `id`: its socket, its handshakes in flight, and the QPs of
    /// connections it completed that [`Worker::poll_accept`] did not hand out yet (they
    /// are destroyed). QPs already handed out stay. Returns whether it was open.
    pub fn close_listener(&mut self, id: ListenerId) -> bool {
        self.with_setup(|s, h| s.close_listener(id, h))
    }

    /// Starts connecting to the listener of `handle` with a new QP made from `cfg`:
    /// opens a non-blocking TCP connection, or a UDP socket connected to the listener
    /// and sends the first set-up datagram (as [`ConnHandle::carrier`] says), and returns
    /// at once. Poll
    /// [`Worker::poll_connect`] (and keep progressing the worker) until it answers.
    ///
    /// # Errors
    /// As [`Worker::create_qp`]; [`EngineError::Bootstrap`] when the socket cannot be
    /// opened or the connect fails at once (e.g. no route);
    /// [`EngineError::Incompatible`], before anything is opened or sent, when the
    /// handle's listener has another number of planes than this worker
    /// ([`ConnHandle::planes`], [`Worker::plane_count`]: both ends need as many).
    pub fn connect_start(
        &mut self,
        handle: &ConnHandle,
        cfg: QpConfig,
    ) -> Result<ConnectId, EngineError> {
        let (ours, theirs) = (self.plane_count(), handle.planes());
        if ours != theirs {
            return Err(EngineError::Incompatible(super::planes_differ(
                ours, theirs,
            )));
        }
        let qpn = self.create_qp(cfg.clone())?;
        let planes = self.engine.dp.plane_ips();
        let from = (planes.len() > 1).then(|| planes[0]);
        let r = self.setup.connect_start(handle, cfg, qpn, from);
        if r.is_err() {
            self.destroy_qp(qpn);
        }
        r
    }

    /// Advances attempt `id`: `Ok(None)` while the handshake runs (the QP does not exist
    /// for the caller yet), `Ok(Some(qpn))` once the QP is connected at both ends and
    /// its source filter is set (post at once); the attempt then ends. Never blocks.
    ///
    /// # Errors
    /// The attempt failed and ended (its QP is destroyed): [`EngineError::Bootstrap`]
    /// with [`super::bootstrap::BootstrapError::AuthMismatch`] when the listener does not
    /// prove the handle's secret (or the handle is forged),
    /// [`super::bootstrap::BootstrapError::TimedOut`] at the deadline
    /// ([`Worker::set_setup_timeout`]), `Io` for a refused or reset connection, `BadMagic`
    /// / `BadField` for foreign bytes; [`EngineError::Incompatible`] for a peer QP that
    /// does not fit; [`EngineError::Refused`] for an unknown (or already answered) `id`.
    pub fn poll_connect(&mut self, id: ConnectId) -> Result<Option<u32>, EngineError> {
        self.with_setup(|s, h| s.poll_connect(id, h))
    }

    /// Abandons attempt `id` (its QP is destroyed). Returns whether it was open.
    pub fn cancel_connect(&mut self, id: ConnectId) -> bool {
        self.with_setup(|s, h| s.cancel_connect(id, h))
    }

    /// The deadline of every handshake started from now on (connect attempts and
    /// connections a listener accepts), counted from its start. Default
    /// [`super::setup::DEFAULT_SETUP_TIMEOUT`].
    pub fn set_setup_timeout(&mut self, timeout: Duration) {
        self.setup.set_timeout(timeout);
    }

    /// Counters of connection setup.
    pub fn setup_stats(&self) -> SetupStats {
        self.setup.stats
    }

    /// Accepts datagrams of QP `qpn` only from the peer's EV source `ports`.
    ///
    /// # Errors
    /// [`EngineError::Refused`] for no ports, an unknown or unconnected QP.
    pub fn set_peer_source_ports(&mut self, qpn: u32, ports: &[u16]) -> Result<(), EngineError> {
        if ports.is_empty() {
            return Err(EngineError::Refused("no peer source ports".into()));
        }
        self.engine
            .set_peer_ports(qpn, ports)
            .map_err(EngineError::Refused)
    }

    /// The whole TCP bootstrap of QP `qpn` on an open `stream` (as
    /// [`super::Qp::connect_on_until`]): nothing needs progressing meanwhile, as no
    /// datagram flows before it ends.
    ///
    /// # Errors
    /// As [`super::Qp::connect_tcp`].
    pub fn connect_on_until(
        &mut self,
        qpn: u32,
        stream: TcpStream,
        until: Instant,
    ) -> Result<Connected, EngineError> {
        let info = self.local_info(qpn)?;
        let (remote, udp, stream) = bootstrap::exchange_until(stream, &info, until)?;
        self.finish_bootstrap(qpn, remote, udp, stream, until)
    }

    /// Connects QP `qpn` to the peer the bootstrap exchange named and sends it this side's
    /// source ports (the shared tail of [`Worker::connect_on_until`] and
    /// [`Worker::connect_tcp`]).
    fn finish_bootstrap(
        &mut self,
        qpn: u32,
        remote: QpInfo,
        udp: SocketAddr,
        stream: TcpStream,
        until: Instant,
    ) -> Result<Connected, EngineError> {
        let me = std::cell::RefCell::new(self);
        finish_bootstrap_with(
            remote,
            udp,
            stream,
            until,
            |r, u| me.borrow_mut().connect(qpn, r, u),
            |p| me.borrow_mut().set_peer_source_ports(qpn, p),
        )
    }

    /// [`Worker::connect_on_until`] with per-packet authentication (as
    /// [`super::Qp::connect_on_authenticated`]).
    ///
    /// # Errors
    /// As [`super::Qp::connect_on_authenticated`].
    pub fn connect_on_authenticated(
        &mut self,
        qpn: u32,
        stream: TcpStream,
        until: Instant,
        psk: &[u8],
        initiator: bool,
    ) -> Result<Connected, EngineError> {
        let keys = negotiate_auth(&stream, until, psk, initiator)?;
        self.engine
            .set_auth(qpn, keys)
            .map_err(EngineError::Refused)?;
        self.connect_on_until(qpn, stream, until)
    }

    /// Connects QP `qpn` through the TCP bootstrap server at `server` (as
    /// [`super::Qp::connect_tcp`]).
    ///
    /// # Errors
    /// As [`super::Qp::connect_tcp`].
    pub fn connect_tcp(
        &mut self,
        qpn: u32,
        server: impl ToSocketAddrs + std::fmt::Debug,
        timeout: Duration,
    ) -> Result<Connected, EngineError> {
        let until = bootstrap::deadline_after(timeout);
        let (remote, udp, stream) = bootstrap::connect(server, &self.local_info(qpn)?, timeout)?;
        self.finish_bootstrap(qpn, remote, udp, stream, until)
    }

    /// Accepts one bootstrap connection on `listener` for QP `qpn` (as
    /// [`super::Qp::accept`]).
    ///
    /// # Errors
    /// As [`super::Qp::connect_tcp`].
    pub fn accept(
        &mut self,
        qpn: u32,
        listener: &TcpListener,
        timeout: Duration,
    ) -> Result<Connected, EngineError> {
        let (s, _) = listener
            .accept()
            .map_err(|source| bootstrap::BootstrapError::Io {
                what: "accept",
                source,
            })?;
        self.connect_on_until(qpn, s, bootstrap::deadline_after(timeout))
    }

    fn check_sge(&self, qpn: u32, sge: &Sge, need: Option<Access>) -> Result<(), PostError> {
        let bad = PostError::LocalAccess(AccessError::UnknownKey(sge.lkey));
        let (k, access) = self
            .qps
            .get(&qpn)
            .and_then(|q| q.mrs.get(&sge.lkey))
            .ok_or(bad)?;
        let end = sge.addr.checked_add(u64::from(sge.len));
        if sge.addr < k.addr || end.is_none_or(|e| e > k.addr + k.len) {
            return Err(PostError::LocalAccess(AccessError::OutOfBounds {
                addr: sge.addr,
                len: u64::from(sge.len),
            }));
        }
        if let Some(n) = need
            && !access.contains(n)
        {
            return Err(PostError::LocalAccess(AccessError::NoAccess));
        }
        Ok(())
    }

    fn post(&mut self, qpn: u32, wr: Wr) -> Result<(), PostError> {
        let recv = matches!(wr, Wr::Recv { .. });
        self.check_queue(qpn, recv)?;
        // a receive sends nothing: only send-side work makes the next pass send first
        if !recv {
            self.posted.get_or_insert(qpn);
        }
        self.engine.post_wr(qpn, wr).2
    }

    /// Refuses a post beyond QP `qpn`'s queue: `max_send_wr` / `max_recv_wr` work
    /// requests posted whose completions the caller has not taken (in the transport, or
    /// waiting in this worker's CQ), as verbs frees a slot at `ibv_poll_cq`.
    fn check_queue(&self, qpn: u32, recv: bool) -> Result<(), PostError> {
        let Some(e) = self.engine.qps.get(&qpn) else {
            return Ok(()); // the engine answers an unknown QP
        };
        let cfg = e.conn.config();
        let waiting = match &e.cq {
            super::thread::Cq::Local { send, recv: r } => {
                if recv {
                    r.len()
                } else {
                    send.len()
                }
            }
            super::thread::Cq::Channel { .. } => 0,
        };
        if recv {
            let used = e.conn.posted_recvs() + waiting;
            if used >= cfg.max_recv_wr as usize {
                return Err(PostError::RecvQueueFull {
                    max_recv_wr: cfg.max_recv_wr,
                });
            }
        } else {
            let used = e.conn.send_state().outstanding_messages() + waiting;
            if used >= cfg.max_send_wr as usize {
                return Err(PostError::SendQueueFull {
                    max_send_wr: cfg.max_send_wr,
                });
            }
        }
        Ok(())
    }

    /// Posts an RDMA WRITE on QP `qpn` straight into its transport (no channel).
    ///
    /// # Errors
    /// [`PostError::LocalAccess`] for a `sge` outside this QP's regions;
    /// [`PostError::SendQueueFull`] when `max_send_wr` (`QpConfig::conn`, default 16384)
    /// send work requests are posted whose completions were not yet taken
    /// ([`Worker::poll_send_cq`] frees their slots); [`PostError::BadState`] unless the QP
    /// is connected.
    pub fn post_write(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), PostError> {
        self.post_write_imm(qpn, wr_id, sge, remote_addr, rkey, None)
    }

    /// Posts an RDMA WRITE with immediate data on QP `qpn`.
    ///
    /// # Errors
    /// As [`Worker::post_write`].
    pub fn post_write_with_imm(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), PostError> {
        self.post_write_imm(qpn, wr_id, sge, remote_addr, rkey, Some(imm))
    }

    /// The RDMA WRITE of [`Worker::post_write`], with immediate data when `imm` is given.
    fn post_write_imm(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> Result<(), PostError> {
        self.check_sge(qpn, &sge, None)?;
        self.post(
            qpn,
            Wr::Write {
                wr_id,
                sge,
                remote_addr,
                rkey,
                imm,
            },
        )
    }

    /// Posts a SEND (optionally with immediate data) on QP `qpn`.
    ///
    /// # Errors
    /// As [`Worker::post_write`].
    pub fn post_send(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sge: Sge,
        imm: Option<u32>,
    ) -> Result<(), PostError> {
        self.check_sge(qpn, &sge, None)?;
        self.post(qpn, Wr::Send { wr_id, sge, imm })
    }

    /// Posts a receive buffer on QP `qpn` (needs `LOCAL_WRITE` unless zero-length).
    ///
    /// # Errors
    /// As [`Worker::post_write`] ([`PostError::RecvQueueFull`] at `max_recv_wr` receives
    /// whose completions were not taken), plus [`AccessError::NoAccess`] without
    /// `LOCAL_WRITE`.
    pub fn post_recv(&mut self, qpn: u32, wr_id: u64, sge: Sge) -> Result<(), PostError> {
        let need = (sge.len > 0).then_some(Access::LOCAL_WRITE);
        self.check_sge(qpn, &sge, need)?;
        self.post(qpn, Wr::Recv { wr_id, sge })
    }

    /// Starts draining QP `qpn`: no new work requests; outstanding ones finish (while the
    /// worker is progressed).
    pub fn close(&mut self, qpn: u32) {
        self.engine.close_qp(qpn);
    }

    /// One pass of progress on this thread: datagrams in, due timers, completions into
    /// the CQs, datagrams out. Never blocks. Returns whether anything happened.
    ///
    /// A pass that follows a post (WRITE, WRITE_WITH_IMM, SEND) sends first, before it
    /// looks for arrivals: the receive poll, a system call that mostly finds nothing, is
    /// then not on the path of a request (nor of a reply left by
    /// [`Worker::set_defer_sends_after_receive`]). The first QP posted on since the last
    /// pass sends ahead of the others: a reply on the QP this end opened leaves before
    /// the SACK that the QP it accepted owes for the request.
    ///
    /// While a listener or a connection attempt is open it also advances their
    /// handshakes (non-blocking TCP or set-up datagrams, a few system calls each).
    pub fn progress(&mut self) -> bool {
        if self.setup.busy() {
            self.with_setup(|s, h| s.advance_all(h));
        }
        let early = match self.posted.take() {
            Some(qpn) => self.engine.poll_out_first(Some(qpn)),
            None => false,
        };
        let (work, received) = self.engine.poll_in();
        if received && self.defer_after_receive && !self.sends_deferred {
            self.sends_deferred = true;
            return true;
        }
        self.sends_deferred = false;
        self.engine.poll_out() | work | early
    }

    /// Whether a [`Worker::progress`] pass that put a receive completion in a CQ leaves
    /// its sends (the SACK of that receive, above all) to the next call on the worker,
    /// which sends them whatever it finds: the application, about to answer the
    /// receive, posts its reply meanwhile, and the SACK and the reply leave in one burst
    /// (a request-response exchange then wakes the peer once per message instead of
    /// twice). At most one pass in a row defers, so a stream of arrivals never starves
    /// the sends; the SACK waits for the caller's next call, as everything of a worker
    /// does. In that burst the reply goes first and the SACK right after it
    /// ([`mrc_transport::Connection::set_data_before_sack`], set on every QP of the worker,
    /// now and later): each datagram is its own `sendmsg`, and the peer waits for the
    /// reply, not the SACK. Default off.
    pub fn set_defer_sends_after_receive(&mut self, on: bool) {
        self.defer_after_receive = on;
        for e in self.engine.qps.values_mut() {
            e.conn.set_data_before_sack(on);
        }
    }

    /// Whether the last [`Worker::progress`] pass delivered a receive and left its sends
    /// (its SACK) to the next call ([`Worker::set_defer_sends_after_receive`]): an
    /// embedding that may not be called again soon bounds the wait by calling
    /// [`Worker::progress`] itself.
    pub fn sends_deferred(&self) -> bool {
        self.sends_deferred
    }

    /// Progresses until something happened or `timeout` passed: busy-polls for the
    /// engine's `spin_ns` (yielding the CPU between passes), then sleeps in the datapath
    /// until a datagram arrives or the next timer is due, as the engine thread does.
    /// Returns whether anything happened.
    ///
    /// # Errors
    /// [`EngineError::Datapath`] when the datapath's wait fails.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, EngineError> {
        let start = Instant::now();
        let until = start + timeout;
        let spin = Duration::from_nanos(self.engine.cfg.spin_ns);
        loop {
            if self.progress() {
                return Ok(true);
            }
            let now_i = Instant::now();
            let left = until.saturating_duration_since(now_i);
            if left.is_zero() {
                return Ok(false);
            }
            if now_i.duration_since(start) < spin {
                std::thread::yield_now();
                continue;
            }
            let now = self.engine.now_ns();
            let sleep = self
                .engine
                .sleep_ns(now)
                .min(left.as_nanos().try_into().unwrap_or(u64::MAX))
                .min(if self.setup.busy() {
                    SETUP_POLL_NS
                } else {
                    u64::MAX
                });
            if sleep > 0 {
                self.engine.stats.sleeps += 1;
                self.engine.dp.wait(sleep)?;
            }
        }
    }

    fn cq(&mut self, qpn: u32, recv_side: bool) -> Option<&mut VecDeque<Completion>> {
        match &mut self.engine.qps.get_mut(&qpn)?.cq {
            Cq::Local { send, .. } if !recv_side => Some(send),
            Cq::Local { recv, .. } => Some(recv),
            Cq::Channel { .. } => None,
        }
    }

    /// The next send-side completion of QP `qpn`, without progressing.
    pub fn poll_send_cq(&mut self, qpn: u32) -> Option<Completion> {
        self.cq(qpn, false)?.pop_front()
    }

    /// The next receive-side completion of QP `qpn`, without progressing.
    pub fn poll_recv_cq(&mut self, qpn: u32) -> Option<Completion> {
        self.cq(qpn, true)?.pop_front()
    }

    /// Counters of QP `qpn` and of this worker's engine (`cpu_ns` is the calling
    /// thread's CPU time).
    ///
    /// # Errors
    /// [`EngineError::Refused`] if the QP is gone.
    pub fn stats(&self, qpn: u32) -> Result<(QpStats, EngineStats), EngineError> {
        let (q, e) = self.engine.qp_stats(qpn);
        Ok((q.ok_or_else(|| EngineError::Refused("QP gone".into()))?, e))
    }
}

impl<D: Datapath> SetupHost for Worker<D> {
    fn create_qp(&mut self, cfg: QpConfig) -> Result<u32, EngineError> {
        Worker::create_qp(self, cfg)
    }
    fn destroy_qp(&mut self, qpn: u32) {
        Worker::destroy_qp(self, qpn);
    }
    fn local_info(&self, qpn: u32) -> Result<QpInfo, EngineError> {
        Worker::local_info(self, qpn)
    }
    fn connect(
        &mut self,
        qpn: u32,
        remote: &QpInfo,
        udp: SocketAddr,
    ) -> Result<Vec<u16>, EngineError> {
        Worker::connect(self, qpn, remote, udp)
    }
    fn set_peer_source_ports(&mut self, qpn: u32, ports: &[u16]) -> Result<(), EngineError> {
        Worker::set_peer_source_ports(self, qpn, ports)
    }
    fn set_auth(
        &mut self,
        qpn: u32,
        keys: mrc_transport::auth::AuthKeys,
    ) -> Result<(), EngineError> {
        self.engine
            .set_auth(qpn, keys)
            .map_err(EngineError::Refused)
    }
}
