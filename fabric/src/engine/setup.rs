//! Connection setup through opaque handles, without blocking (issue 18, item 3): what a
//! collective library's out-of-band channel carries (NCCL's `ncclNetHandle_t`, at most
//! 128 bytes) and the handshakes that [`super::Worker::listen`],
//! [`super::Worker::connect_start`], [`super::Worker::poll_connect`] and
//! [`super::Worker::poll_accept`] drive.
//!
//! # The carrier: non-blocking TCP
//!
//! A listener is a non-blocking TCP socket on the worker's IP; its [`ConnHandle`] names
//! that address and a 32-byte secret drawn from the OS CSPRNG for this listener alone.
//! Each connection runs the TCP bootstrap of [`super::bootstrap`] as a state machine on
//! a non-blocking stream, one step per readable message, every step bounded:
//!
//! ```text
//!  both ends, in order          bytes      waits for
//!  NONCE   "MRCN" + nonce       36         (TCP connected)
//!  CONFIRM "MRCK" + confirm     36         the peer's NONCE
//!  INFO    QpInfo (MRCB v4)     29 + 20 r  the peer's CONFIRM, checked
//!                               + 16 P     (P plane addresses)
//!  PORTS   "MRCP" + ports       6 + 2 p    the peer's INFO (then the QP connects)
//!  READY   "MRCR"               4          the peer's PORTS (then the source filter is set)
//!  done                                    the peer's READY
//! ```
//!
//! The confirmations are [`mrc_transport::auth::key_confirmation`] of the handle's secret
//! over both nonces (the authenticated bootstrap's own negotiation, with the secret as
//! the pre-shared key, the connecting end always the initiator and the listener always
//! the responder): each end proves it holds the handle without sending the secret,
//! and fresh nonces make a recorded handshake useless. A listener creates the QP of a
//! connection only once the peer's confirmation checked, so a stray or forged connection
//! costs it one TCP socket and 36 bytes of nonce until it is dropped; it never sees a
//! QPN, a PSN or an rkey. Every message is checked as it arrives (the magic from its
//! fourth byte on), the receive buffer never grows past [`MAX_SETUP_MESSAGE_BYTES`], and
//! every handshake ends by its deadline ([`super::Worker::set_setup_timeout`], default
//! [`DEFAULT_SETUP_TIMEOUT`]). What fails on a listener is dropped and counted
//! ([`SetupStats`]); the listener keeps accepting.
//!
//! Why TCP and not an in-band UDP exchange on the worker's receive socket: TCP gives
//! ordered, retransmitted delivery of messages up to 20 KiB (1024 regions) for free and
//! reuses the bootstrap's encoding and checks; an exchange over UDP would need its own
//! retransmission, fragmentation and an unauthenticated path into the datagram demux,
//! which today drops everything not addressed to a connected QP. The price is one TCP
//! socket per listener plus one per handshake in flight; a finished handshake closes its
//! stream, so an idle connection holds no TCP socket.

use super::bootstrap::{self, BootstrapError, CONFIRM_MAGIC, NONCE_MAGIC, QpInfo, READY};
use super::{EngineError, QpConfig, source};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Bytes of an encoded [`ConnHandle`] (fits NCCL's `NCCL_NET_HANDLE_MAXSIZE`, 128).
pub const HANDLE_BYTES: usize = 60;
/// `"MRCH"`: the first bytes of an encoded [`ConnHandle`].
pub const HANDLE_MAGIC: [u8; 4] = *b"MRCH";
/// Version of the handle layout.
pub const HANDLE_VERSION: u8 = 1;
/// Bytes of a listener's secret.
pub const SECRET_BYTES: usize = 32;
/// Flag of an encoded [`ConnHandle`] (byte 56): the connection's packets are
/// authenticated and encrypted ([`ListenOptions::authenticate_packets`]).
pub const HANDLE_FLAG_AUTH_PACKETS: u8 = 1;
/// Deadline of a handshake unless [`super::Worker::set_setup_timeout`] says otherwise: 10 s.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes a handshake buffers from its peer: the largest message
/// ([`QpInfo`] with [`bootstrap::MAX_REGIONS`] regions, 20508 bytes) and one read more.
pub const MAX_SETUP_MESSAGE_BYTES: usize = 32 * 1024;
/// Most handshakes one listener runs at once; more connections wait in the kernel's
/// backlog until one ends (by its deadline at the latest).
pub const MAX_ACCEPTS_IN_FLIGHT: usize = 256;
/// Least time between two `accept(2)` calls of a listener that found its backlog empty:
/// 1 ms (the longest sleep of [`super::Worker::wait`] while a listener is open, so a
/// sleeping worker and a busy one take a connection alike). Linux allocates a socket and
/// a file before it finds the backlog empty and frees them after, a few microseconds
/// and RCU work per call: a worker progressed in a busy loop (the libfabric provider's
/// `fi_cq_read`) spent most of its time there when it tried on every pass.
pub const ACCEPT_POLL: Duration = Duration::from_millis(1);

/// When a listener tries `accept(2)` again after a pass at `now`: [`ACCEPT_POLL`] later
/// when the pass found the backlog `empty` (`EWOULDBLOCK`); otherwise at once, the next
/// pass (it took connections until its handshake slots filled, or an accept failed for
/// want of descriptors or memory: more wait).
fn next_accept_at(now: Instant, empty: bool) -> Instant {
    if empty { now + ACCEPT_POLL } else { now }
}

/// What a peer needs to connect to a listener ([`super::Worker::listen`]): the
/// listener's TCP address and secret. Opaque to the application, which carries
/// [`ConnHandle::to_bytes`] over its own channel; the other end rebuilds it with
/// [`ConnHandle::from_bytes`]. Anyone holding the handle can connect, so carry it as a
/// credential. `Debug` does not print the secret.
///
/// Layout ([`HANDLE_BYTES`] bytes, big-endian):
///
/// ```text
/// 0      4        5        6        8                 24                56      57    60
/// | MRCH | ver=1  | family | port   | IP (16 bytes;   | secret (32)      | flags | 0   |
/// |      |        | 4 or 6 | TCP    |  IPv4 in 0..4)  |                  |       |rsvd |
/// ```
///
/// Flags: [`HANDLE_FLAG_AUTH_PACKETS`]. The flags are bound into the handshake's key
/// confirmation, so a handle whose flags were changed fails as a forged secret does.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnHandle {
    addr: SocketAddr,
    secret: [u8; SECRET_BYTES],
    flags: u8,
}

/// How a listener's connections are set up ([`super::Worker::listen_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenOptions {
    /// Authenticate and encrypt every packet of the connections
    /// ([`mrc_transport::auth`]), with keys derived from the handle's secret and both
    /// ends' handshake nonces (fresh per connection): a datagram without a valid tag, or
    /// replayed, is dropped before the transport parses it. Costs 24 bytes per datagram
    /// (`EngineConfig::slot_bytes` must hold them) and the cipher's CPU time. The handle
    /// carries the choice, so both ends always agree. Default off.
    pub authenticate_packets: bool,
}

impl std::fmt::Debug for ConnHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnHandle")
            .field("addr", &self.addr)
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

/// Why bytes are not a [`ConnHandle`].
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum HandleError {
    /// Fewer than [`HANDLE_BYTES`] bytes.
    #[error("a connection handle has {HANDLE_BYTES} bytes, got {0}")]
    Short(usize),
    /// Not [`HANDLE_MAGIC`].
    #[error("not a connection handle (magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// Another layout version.
    #[error("connection handle version {0} is not supported")]
    BadVersion(u8),
    /// The family byte is neither 4 nor 6.
    #[error("connection handle address family {0}")]
    BadFamily(u8),
    /// Port 0, an unspecified or multicast IP, or nonzero reserved bytes.
    #[error("connection handle names no reachable address")]
    BadAddress,
    /// Flag bits this version does not know.
    #[error("connection handle flags {0:#04x} are not supported")]
    BadFlags(u8),
}

impl ConnHandle {
    /// The handle of a listener at `addr` with `secret` and the options' flags: what
    /// [`super::Worker::listen_at`] with the same arguments answers (a port 0 is encoded
    /// as is, and [`ConnHandle::from_bytes`] refuses it: it names no listener yet).
    pub fn new(addr: SocketAddr, secret: [u8; SECRET_BYTES], opts: ListenOptions) -> ConnHandle {
        ConnHandle {
            addr,
            secret,
            flags: if opts.authenticate_packets {
                HANDLE_FLAG_AUTH_PACKETS
            } else {
                0
            },
        }
    }

    /// The listener's TCP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the connections' packets are authenticated
    /// ([`ListenOptions::authenticate_packets`]).
    pub fn authenticates_packets(&self) -> bool {
        self.flags & HANDLE_FLAG_AUTH_PACKETS != 0
    }

    /// The pre-shared key of the handshake's confirmations and packet keys: the secret
    /// and the flags (so changed flags fail the confirmation).
    fn psk(&self) -> [u8; SECRET_BYTES + 1] {
        let mut k = [0u8; SECRET_BYTES + 1];
        k[..SECRET_BYTES].copy_from_slice(&self.secret);
        k[SECRET_BYTES] = self.flags;
        k
    }

    /// The encoded handle.
    pub fn to_bytes(&self) -> [u8; HANDLE_BYTES] {
        let mut b = [0u8; HANDLE_BYTES];
        b[..4].copy_from_slice(&HANDLE_MAGIC);
        b[4] = HANDLE_VERSION;
        b[6..8].copy_from_slice(&self.addr.port().to_be_bytes());
        match self.addr.ip() {
            IpAddr::V4(ip) => {
                b[5] = 4;
                b[8..12].copy_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                b[5] = 6;
                b[8..24].copy_from_slice(&ip.octets());
            }
        }
        b[24..56].copy_from_slice(&self.secret);
        b[56] = self.flags;
        b
    }

    /// Parses the first [`HANDLE_BYTES`] bytes of `b` (bytes after them are ignored: a
    /// 128-byte NCCL handle buffer may be passed whole).
    ///
    /// # Errors
    /// [`HandleError`].
    pub fn from_bytes(b: &[u8]) -> Result<ConnHandle, HandleError> {
        let b = b.get(..HANDLE_BYTES).ok_or(HandleError::Short(b.len()))?;
        let magic = [b[0], b[1], b[2], b[3]];
        if magic != HANDLE_MAGIC {
            return Err(HandleError::BadMagic(magic));
        }
        if b[4] != HANDLE_VERSION {
            return Err(HandleError::BadVersion(b[4]));
        }
        let port = u16::from_be_bytes([b[6], b[7]]);
        let ip = match b[5] {
            4 if b[12..24].iter().all(|&x| x == 0) => {
                IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11]))
            }
            4 => return Err(HandleError::BadAddress),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[8..24]);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            f => return Err(HandleError::BadFamily(f)),
        };
        if port == 0 || ip.is_unspecified() || ip.is_multicast() || b[57..].iter().any(|&x| x != 0)
        {
            return Err(HandleError::BadAddress);
        }
        let flags = b[56];
        if flags & !HANDLE_FLAG_AUTH_PACKETS != 0 {
            return Err(HandleError::BadFlags(flags));
        }
        let mut secret = [0u8; SECRET_BYTES];
        secret.copy_from_slice(&b[24..56]);
        Ok(ConnHandle {
            addr: SocketAddr::new(ip, port),
            secret,
            flags,
        })
    }
}

/// Names a listener of a worker ([`super::Worker::listen`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(pub u64);

/// Names a connection attempt of a worker ([`super::Worker::connect_start`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectId(pub u64);

/// Counters of a worker's connection setup, 64-bit, never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetupStats {
    /// Connections a listener completed (each handed out by `poll_accept`, or destroyed
    /// with its listener).
    pub accepted: u64,
    /// Connection attempts that completed.
    pub connected: u64,
    /// Connections to a listener dropped because the peer did not prove the handle's
    /// secret (a wrong confirmation: a forged or stale handle).
    pub rejected_secret: u64,
    /// Connections to a listener dropped for what the peer sent or did: bytes of another
    /// protocol, a bad field, a stream closed early, a QP configuration that does not fit.
    pub rejected_protocol: u64,
    /// Connections to a listener dropped at their deadline.
    pub rejected_timeout: u64,
    /// Connections to a listener dropped to make room: with [`MAX_ACCEPTS_IN_FLIGHT`]
    /// handshakes in flight, each new connection takes the place of the oldest one whose
    /// peer has not proved the secret yet (so strangers holding every slot delay a real
    /// peer by one pass, not by their deadline).
    pub rejected_crowded: u64,
    /// Passes of a listener whose `accept(2)` failed for want of descriptors or memory
    /// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) or met an aborted connection: the
    /// waiting connections stay in the backlog for a later pass; nothing is reported as
    /// an error of the listener.
    pub accept_deferred: u64,
    /// Connection attempts that failed (each reported once by `poll_connect`).
    pub connect_failures: u64,
}

/// What a handshake asks of the worker that runs it.
pub(crate) trait SetupHost {
    fn create_qp(&mut self, cfg: QpConfig) -> Result<u32, EngineError>;
    fn destroy_qp(&mut self, qpn: u32);
    fn local_info(&self, qpn: u32) -> Result<QpInfo, EngineError>;
    fn connect(
        &mut self,
        qpn: u32,
        remote: &QpInfo,
        udp: SocketAddr,
    ) -> Result<Vec<u16>, EngineError>;
    fn set_peer_source_ports(&mut self, qpn: u32, ports: &[u16]) -> Result<(), EngineError>;
    fn set_auth(
        &mut self,
        qpn: u32,
        keys: mrc_transport::auth::AuthKeys,
    ) -> Result<(), EngineError>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Waiting for the TCP connection (client).
    Connecting,
    /// Waiting for the peer's nonce.
    Nonce,
    /// Waiting for the peer's confirmation.
    Confirm,
    /// Waiting for the peer's QpInfo.
    Info,
    /// Waiting for the peer's source ports.
    Ports,
    /// Waiting for the peer's ready marker.
    Ready,
}

/// One handshake in flight on a non-blocking stream.
struct Handshake {
    stream: TcpStream,
    peer_ip: IpAddr,
    /// The handle's secret and flags ([`ConnHandle::psk`]).
    psk: [u8; SECRET_BYTES + 1],
    /// Whether the packets are authenticated (the handle's flag).
    auth: bool,
    /// The QP configuration (server: created from it once the peer proved the secret).
    cfg: QpConfig,
    until: Instant,
    step: Step,
    out: Vec<u8>,
    out_pos: usize,
    inb: Vec<u8>,
    nonce: [u8; 32],
    /// (initiator nonce, responder nonce, this end is the initiator), once known.
    nonces: Option<([u8; 32], [u8; 32], bool)>,
    qpn: Option<u32>,
    /// The peer's READY arrived.
    ready_taken: bool,
    /// This end connected (the initiator of the key confirmation); a listener's end is
    /// always the responder. Fixed by role, never by comparing nonces: with roles from
    /// nonces, a stranger reflects the listener's own confirmation from a second
    /// connection (tests/handles.rs, a_reflected_confirmation...).
    initiator: bool,
}

enum Progress {
    Pending,
    Done(u32),
}

fn io_fail(what: &'static str) -> impl FnOnce(io::Error) -> EngineError {
    move |source| EngineError::Bootstrap(BootstrapError::Io { what, source })
}

/// Equal in time independent of where `a` and `b` differ.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Handshake {
    fn new(
        stream: TcpStream,
        peer_ip: IpAddr,
        handle: &ConnHandle,
        cfg: QpConfig,
        until: Instant,
        connecting: bool,
        qpn: Option<u32>,
    ) -> Result<Self, EngineError> {
        let mut nonce = [0u8; 32];
        source::random_bytes(&mut nonce).map_err(EngineError::Refused)?;
        let mut h = Handshake {
            stream,
            peer_ip,
            psk: handle.psk(),
            auth: handle.authenticates_packets(),
            cfg,
            until,
            step: Step::Connecting,
            out: Vec::new(),
            out_pos: 0,
            inb: Vec::new(),
            nonce,
            nonces: None,
            qpn,
            ready_taken: false,
            initiator: connecting,
        };
        if !connecting {
            h.send_nonce();
        }
        Ok(h)
    }

    fn send_nonce(&mut self) {
        self.out.extend_from_slice(&NONCE_MAGIC);
        self.out.extend_from_slice(&self.nonce);
        self.step = Step::Nonce;
    }

    /// Writes what is queued, as far as the socket takes it.
    fn flush(&mut self) -> Result<(), EngineError> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io_fail("write")(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_fail("write")(e)),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    /// Reads what has arrived (at most up to [`MAX_SETUP_MESSAGE_BYTES`] buffered).
    /// Returns whether anything came.
    fn fill(&mut self) -> Result<bool, EngineError> {
        let room = MAX_SETUP_MESSAGE_BYTES.saturating_sub(self.inb.len());
        if room == 0 {
            return Err(BootstrapError::BadField("message length").into());
        }
        let mut chunk = [0u8; 4096];
        let want = room.min(chunk.len());
        loop {
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => {
                    return Err(io_fail("read")(io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(n) => {
                    self.inb.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_fail("read")(e)),
            }
        }
    }

    /// Whether the non-blocking TCP connect finished (`poll(2)` for writability, then
    /// `SO_ERROR`).
    fn connected(&self) -> Result<bool, EngineError> {
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd for a live descriptor, zero timeout.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        if rc < 0 {
            return Err(io_fail("poll")(io::Error::last_os_error()));
        }
        if rc == 0 {
            return Ok(false);
        }
        if let Some(e) = self.stream.take_error().map_err(io_fail("connect"))? {
            return Err(io_fail("connect")(e));
        }
        if p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Err(io_fail("connect")(io::ErrorKind::ConnectionRefused.into()));
        }
        Ok(true)
    }

    /// Advances as far as the bytes at hand allow; never blocks.
    fn advance(&mut self, host: &mut dyn SetupHost, now: Instant) -> Result<Progress, EngineError> {
        if now >= self.until {
            return Err(BootstrapError::TimedOut {
                what: match self.step {
                    Step::Connecting => "connect",
                    Step::Nonce => "nonce",
                    Step::Confirm => "key confirmation",
                    Step::Info => "read",
                    Step::Ports => "read source ports",
                    Step::Ready => "read ready",
                },
            }
            .into());
        }
        loop {
            self.flush()?;
            if self.step == Step::Connecting {
                if !self.connected()? {
                    return Ok(Progress::Pending);
                }
                self.stream
                    .set_nodelay(true)
                    .map_err(io_fail("set nodelay"))?;
                self.send_nonce();
                continue;
            }
            if self.step_once(host)? {
                continue;
            }
            if self.ready_taken {
                // The peer's READY was taken (it may close its end now: read no more);
                // done once ours is out.
                return match self.qpn {
                    Some(q) if self.out.is_empty() => Ok(Progress::Done(q)),
                    Some(_) => Ok(Progress::Pending),
                    None => Err(EngineError::Refused("no QP".into())),
                };
            }
            if !self.fill()? {
                return Ok(Progress::Pending);
            }
        }
    }

    /// Takes the next message of the peer if it is whole. Returns whether it did.
    fn step_once(&mut self, host: &mut dyn SetupHost) -> Result<bool, EngineError> {
        match self.step {
            Step::Connecting => Ok(false),
            Step::Nonce => {
                let Some((peer, used)) = bootstrap::decode_32(&self.inb, NONCE_MAGIC)? else {
                    return Ok(false);
                };
                self.inb.drain(..used);
                let initiator = self.initiator;
                let (ni, nr) = if initiator {
                    (self.nonce, peer)
                } else {
                    (peer, self.nonce)
                };
                let mine = mrc_transport::auth::key_confirmation(&self.psk, &ni, &nr, initiator)
                    .map_err(|e| EngineError::Refused(e.to_string()))?;
                self.nonces = Some((ni, nr, initiator));
                self.out.extend_from_slice(&CONFIRM_MAGIC);
                self.out.extend_from_slice(&mine);
                self.step = Step::Confirm;
                Ok(true)
            }
            Step::Confirm => {
                let Some((got, used)) = bootstrap::decode_32(&self.inb, CONFIRM_MAGIC)? else {
                    return Ok(false);
                };
                self.inb.drain(..used);
                let Some((ni, nr, initiator)) = self.nonces else {
                    return Err(EngineError::Refused("confirmation before nonces".into()));
                };
                let want = mrc_transport::auth::key_confirmation(&self.psk, &ni, &nr, !initiator)
                    .map_err(|e| EngineError::Refused(e.to_string()))?;
                if !ct_eq(&got, &want) {
                    return Err(BootstrapError::AuthMismatch(
                        "the peer does not hold this connection handle's secret",
                    )
                    .into());
                }
                let qpn = match self.qpn {
                    Some(q) => q,
                    None => {
                        let q = host.create_qp(self.cfg.clone())?;
                        self.qpn = Some(q);
                        q
                    }
                };
                if self.auth {
                    // Before the QP connects (the transport refuses it later).
                    let keys =
                        mrc_transport::auth::AuthKeys::derive(&self.psk, &ni, &nr, initiator)
                            .map_err(|e| EngineError::Refused(e.to_string()))?;
                    host.set_auth(qpn, keys)?;
                }
                self.out.extend_from_slice(&host.local_info(qpn)?.encode()?);
                self.step = Step::Info;
                Ok(true)
            }
            Step::Info => {
                let Some((remote, used)) = bootstrap::decode_qp_info(&self.inb)? else {
                    return Ok(false);
                };
                self.inb.drain(..used);
                let qpn = self.qpn.ok_or(EngineError::Refused("no QP".into()))?;
                let udp = SocketAddr::new(self.peer_ip, remote.udp_port);
                let ports = host.connect(qpn, &remote, udp)?;
                self.out
                    .extend_from_slice(&bootstrap::encode_ports(&ports)?);
                self.step = Step::Ports;
                Ok(true)
            }
            Step::Ports => {
                let Some((ports, used)) = bootstrap::decode_ports(&self.inb)? else {
                    return Ok(false);
                };
                self.inb.drain(..used);
                let qpn = self.qpn.ok_or(EngineError::Refused("no QP".into()))?;
                host.set_peer_source_ports(qpn, &ports)?;
                self.out.extend_from_slice(&READY);
                self.step = Step::Ready;
                Ok(true)
            }
            Step::Ready => {
                if self.ready_taken {
                    return Ok(false);
                }
                let Some(used) = bootstrap::decode_ready(&self.inb)? else {
                    return Ok(false);
                };
                if self.inb.len() > used {
                    return Err(BootstrapError::BadField("bytes after ready").into());
                }
                self.inb.clear();
                self.ready_taken = true;
                Ok(false)
            }
        }
    }
}

/// Whether `e` is a peer's failure to prove the secret.
/// An `accept(2)` failure that a later pass may not meet: out of descriptors (`EMFILE`,
/// `ENFILE`) or memory (`ENOBUFS`, `ENOMEM`), or a connection aborted in the queue.
fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::ECONNABORTED)
    )
}

fn is_secret_failure(e: &EngineError) -> bool {
    matches!(e, EngineError::Bootstrap(BootstrapError::AuthMismatch(_)))
}

fn is_timeout(e: &EngineError) -> bool {
    matches!(e, EngineError::Bootstrap(BootstrapError::TimedOut { .. }))
}

struct Listener {
    sock: TcpListener,
    /// Its handle (address, secret, flags).
    handle: ConnHandle,
    cfg: QpConfig,
    /// Handshakes in flight.
    pending: Vec<Handshake>,
    /// QPs whose handshake completed, not yet handed out.
    ready: VecDeque<u32>,
    /// The earliest time of its next `accept(2)` ([`next_accept_at`]).
    next_accept: Instant,
}

enum Attempt {
    InFlight(Box<Handshake>),
    Failed(EngineError),
}

/// The connection setup state of one worker: its listeners and connection attempts.
#[derive(Default)]
pub(crate) struct Setup {
    listeners: HashMap<u64, Listener>,
    attempts: HashMap<u64, Attempt>,
    next_id: u64,
    timeout: Option<Duration>,
    pub(crate) stats: SetupStats,
}

impl Setup {
    /// Whether any listener or attempt is open (the worker then bounds its sleeps).
    pub(crate) fn busy(&self) -> bool {
        !self.listeners.is_empty() || !self.attempts.is_empty()
    }

    pub(crate) fn set_timeout(&mut self, t: Duration) {
        self.timeout = Some(t);
    }

    fn deadline(&self, now: Instant) -> Instant {
        let t = self.timeout.unwrap_or(DEFAULT_SETUP_TIMEOUT);
        // A timeout too long for the clock (`Duration::MAX`): about 136 years.
        now.checked_add(t)
            .or_else(|| now.checked_add(Duration::from_secs(1 << 32)))
            .unwrap_or(now)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Opens a listener on `ip` and `port` (0: the kernel picks it) with `secret` (`None`:
    /// drawn from the OS CSPRNG).
    pub(crate) fn listen(
        &mut self,
        ip: IpAddr,
        port: u16,
        secret: Option<[u8; SECRET_BYTES]>,
        cfg: QpConfig,
        opts: ListenOptions,
    ) -> Result<(ListenerId, ConnHandle), EngineError> {
        if ip.is_unspecified() {
            return Err(EngineError::Refused(
                "listen needs the worker bound to a specific IP (the handle names it)".into(),
            ));
        }
        if ip.is_multicast() {
            // The handle would name it, and no peer's ConnHandle::from_bytes accepts one.
            return Err(EngineError::Refused(format!(
                "listen needs a unicast IP, not the multicast {ip} (the handle names it)"
            )));
        }
        let sock = TcpListener::bind(SocketAddr::new(ip, port)).map_err(io_fail("listen"))?;
        sock.set_nonblocking(true).map_err(io_fail("listen"))?;
        let addr = sock.local_addr().map_err(io_fail("listen"))?;
        let secret = match secret {
            Some(s) => s,
            None => {
                let mut s = [0u8; SECRET_BYTES];
                source::random_bytes(&mut s).map_err(EngineError::Refused)?;
                s
            }
        };
        let handle = ConnHandle {
            addr,
            secret,
            flags: if opts.authenticate_packets {
                HANDLE_FLAG_AUTH_PACKETS
            } else {
                0
            },
        };
        let id = self.id();
        self.listeners.insert(
            id,
            Listener {
                sock,
                handle: handle.clone(),
                cfg,
                pending: Vec::new(),
                ready: VecDeque::new(),
                next_accept: Instant::now(),
            },
        );
        Ok((ListenerId(id), handle))
    }

    /// Closes listener `id`: its handshakes in flight end and the QPs of connections it
    /// completed but nobody took with `poll_accept` are destroyed. Returns whether it
    /// was open.
    pub(crate) fn close_listener(&mut self, id: ListenerId, host: &mut dyn SetupHost) -> bool {
        let Some(l) = self.listeners.remove(&id.0) else {
            return false;
        };
        for h in l.pending {
            if let Some(q) = h.qpn {
                host.destroy_qp(q);
            }
        }
        for q in l.ready {
            host.destroy_qp(q);
        }
        true
    }

    /// Starts connecting to `handle` with the already created QP `qpn`, from `from` (any
    /// port) when given: plane 0's address of a worker on several planes, which the
    /// listener finds among its plane addresses.
    pub(crate) fn connect_start(
        &mut self,
        handle: &ConnHandle,
        cfg: QpConfig,
        qpn: u32,
        from: Option<IpAddr>,
    ) -> Result<ConnectId, EngineError> {
        let addr = handle.addr;
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(io_fail("socket"))?;
        s.set_cloexec(true).map_err(io_fail("socket"))?;
        s.set_nonblocking(true).map_err(io_fail("socket"))?;
        if let Some(ip) = from.filter(|ip| ip.is_ipv6() == addr.is_ipv6()) {
            s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))
                .map_err(io_fail("bind"))?;
        }
        match s.connect(&SockAddr::from(addr)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(io_fail("connect")(e)),
        }
        let now = Instant::now();
        let h = Handshake::new(
            s.into(),
            addr.ip(),
            handle,
            cfg,
            self.deadline(now),
            true,
            Some(qpn),
        )?;
        let id = self.id();
        self.attempts.insert(id, Attempt::InFlight(Box::new(h)));
        Ok(ConnectId(id))
    }

    /// Advances attempt `id`: `Ok(None)` pending, `Ok(Some(qpn))` connected (the attempt
    /// ends), `Err` failed (the attempt ends, its QP is destroyed).
    pub(crate) fn poll_connect(
        &mut self,
        id: ConnectId,
        host: &mut dyn SetupHost,
    ) -> Result<Option<u32>, EngineError> {
        self.advance_attempts(host, Instant::now());
        match self.attempts.remove(&id.0) {
            None => Err(EngineError::Refused(format!(
                "no connection attempt {}",
                id.0
            ))),
            Some(Attempt::Failed(e)) => Err(e),
            Some(Attempt::InFlight(h)) => {
                if h.ready_taken && h.out.is_empty() {
                    // Finished in advance_attempts (kept for this poll).
                    self.stats.connected += 1;
                    return Ok(h.qpn);
                }
                self.attempts.insert(id.0, Attempt::InFlight(h));
                Ok(None)
            }
        }
    }

    /// Drops attempt `id` and destroys its QP. Returns whether it was open.
    pub(crate) fn cancel_connect(&mut self, id: ConnectId, host: &mut dyn SetupHost) -> bool {
        match self.attempts.remove(&id.0) {
            Some(Attempt::InFlight(h)) => {
                if let Some(q) = h.qpn {
                    host.destroy_qp(q);
                }
                true
            }
            Some(Attempt::Failed(_)) => true,
            None => false,
        }
    }

    /// The next connection listener `id` completed, advancing its handshakes first.
    pub(crate) fn poll_accept(
        &mut self,
        id: ListenerId,
        host: &mut dyn SetupHost,
    ) -> Option<Result<u32, EngineError>> {
        let now = Instant::now();
        let until = self.deadline(now);
        let Some(l) = self.listeners.get_mut(&id.0) else {
            return Some(Err(EngineError::Refused(format!("no listener {}", id.0))));
        };
        if let Err(e) = Self::accept_new(l, &mut self.stats, now, until) {
            return Some(Err(e));
        }
        Self::advance_listener(l, &mut self.stats, host, now);
        let l = self.listeners.get_mut(&id.0)?;
        l.ready.pop_front().map(Ok)
    }

    /// Advances every handshake (and takes new connections on every listener): what
    /// [`super::Worker::progress`] does while any is open.
    pub(crate) fn advance_all(&mut self, host: &mut dyn SetupHost) {
        let now = Instant::now();
        let until = self.deadline(now);
        for l in self.listeners.values_mut() {
            // A failing accept (e.g. out of descriptors) is retried at the next call;
            // poll_accept reports it.
            let _ = Self::accept_new(l, &mut self.stats, now, until);
            Self::advance_listener(l, &mut self.stats, host, now);
        }
        self.advance_attempts(host, now);
    }

    /// Takes the connections waiting in the backlog. With every handshake slot in use, a
    /// new one takes the slot of the oldest handshake whose peer has not proved the
    /// secret (no QP yet: all a stranger can hold); when every slot's peer has proved it,
    /// new connections wait in the backlog. Before the listener's `next_accept` it does
    /// nothing ([`next_accept_at`]).
    fn accept_new(
        l: &mut Listener,
        stats: &mut SetupStats,
        now: Instant,
        until: Instant,
    ) -> Result<(), EngineError> {
        if now < l.next_accept {
            return Ok(());
        }
        let mut empty = false;
        let r = Self::accept_ready(l, stats, until, &mut empty);
        l.next_accept = next_accept_at(now, empty);
        r
    }

    /// `accept_new`'s loop: takes connections until the backlog is empty (or every
    /// handshake slot's peer has proved the secret); `empty` set when it found the
    /// backlog empty.
    fn accept_ready(
        l: &mut Listener,
        stats: &mut SetupStats,
        until: Instant,
        empty: &mut bool,
    ) -> Result<(), EngineError> {
        loop {
            let victim = if l.pending.len() < MAX_ACCEPTS_IN_FLIGHT {
                None
            } else {
                let oldest = l
                    .pending
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.qpn.is_none())
                    .min_by_key(|(_, h)| h.until)
                    .map(|(i, _)| i);
                match oldest {
                    Some(i) => Some(i),
                    None => break,
                }
            };
            match l.sock.accept() {
                Ok((s, from)) => {
                    if let Some(i) = victim {
                        // No QP to destroy: it never proved the secret.
                        drop(l.pending.swap_remove(i));
                        stats.rejected_crowded += 1;
                    }
                    s.set_nonblocking(true).map_err(io_fail("accept"))?;
                    // Disabling Nagle only saves latency; a failure is harmless.
                    let _ = s.set_nodelay(true);
                    let h =
                        Handshake::new(s, from.ip(), &l.handle, l.cfg.clone(), until, false, None)?;
                    l.pending.push(h);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *empty = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors or memory (strangers holding the slots of many
                // listeners can exhaust the process's descriptors; a connection reset
                // before its accept): the connections wait in the backlog for a later
                // pass, and the listener, and the peers already accepted, carry on.
                Err(e) if is_transient_accept_error(&e) => {
                    stats.accept_deferred += 1;
                    tracing::debug!("setup: accept deferred: {e}");
                    break;
                }
                Err(e) => return Err(io_fail("accept")(e)),
            }
        }
        Ok(())
    }

    fn advance_listener(
        l: &mut Listener,
        stats: &mut SetupStats,
        host: &mut dyn SetupHost,
        now: Instant,
    ) {
        let mut i = 0;
        while i < l.pending.len() {
            match l.pending[i].advance(host, now) {
                Ok(Progress::Pending) => i += 1,
                Ok(Progress::Done(q)) => {
                    l.pending.swap_remove(i);
                    stats.accepted += 1;
                    l.ready.push_back(q);
                }
                Err(e) => {
                    let h = l.pending.swap_remove(i);
                    if let Some(q) = h.qpn {
                        host.destroy_qp(q);
                    }
                    if is_secret_failure(&e) {
                        stats.rejected_secret += 1;
                    } else if is_timeout(&e) {
                        stats.rejected_timeout += 1;
                    } else {
                        stats.rejected_protocol += 1;
                    }
                    tracing::debug!("setup: dropped a connection to a listener: {e}");
                }
            }
        }
    }

    fn advance_attempts(&mut self, host: &mut dyn SetupHost, now: Instant) {
        for a in self.attempts.values_mut() {
            let Attempt::InFlight(h) = a else { continue };
            if h.ready_taken && h.out.is_empty() {
                continue;
            }
            match h.advance(host, now) {
                Ok(_) => {}
                Err(e) => {
                    if let Some(q) = h.qpn {
                        host.destroy_qp(q);
                    }
                    self.stats.connect_failures += 1;
                    *a = Attempt::Failed(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod accept_poll_tests {
    use super::*;

    #[test]
    fn a_listener_tries_again_a_millisecond_after_an_empty_backlog_otherwise_at_once() {
        let now = Instant::now();
        assert_eq!(ACCEPT_POLL, Duration::from_millis(1));
        assert_eq!(next_accept_at(now, true), now + Duration::from_millis(1));
        assert_eq!(next_accept_at(now, false), now);
    }
}
