//! Connection setup through opaque handles, without blocking (issue 18, item 3): what a
//! collective library's out-of-band channel carries (NCCL's `ncclNetHandle_t`, at most
//! 128 bytes) and the handshakes that [`super::Worker::listen`],
//! [`super::Worker::connect_start`], [`super::Worker::poll_connect`] and
//! [`super::Worker::poll_accept`] drive.
//!
//! # The carriers: non-blocking TCP, or UDP datagrams in band
//!
//! A listener is a non-blocking socket on the worker's IP; its [`ConnHandle`] names
//! that address and a 32-byte secret drawn from the OS CSPRNG for this listener alone,
//! and says which carrier it takes ([`ListenOptions::carrier`],
//! [`HANDLE_FLAG_UDP_SETUP`]):
//!
//! - [`SetupCarrier::Tcp`] (the default: NCCL's plugin, the OCP library, `mrc-perf`): a
//!   TCP listener; each connection runs the TCP bootstrap of [`super::bootstrap`] as a
//!   state machine on a non-blocking stream.
//! - [`SetupCarrier::Udp`] (the libfabric provider, issue 44): a UDP socket of its own
//!   (not the worker's data socket: the data demux never sees a set-up datagram); the
//!   same messages, the same state machine and the same checks, the bytes carried in
//!   datagrams of at most 1200 bytes with the small reliability layer of
//!   [`super::setup_udp`] (a handshake id, stream offsets, cumulative acknowledgements,
//!   retransmission on a timer with a bounded number of tries, reassembly within a
//!   budget). No TCP socket is opened at either end. Two differences follow from
//!   datagrams: a listener keeps its confirmation until the peer's checked (so a
//!   stranger, perhaps at a forged address, gets one datagram, the NONCE, per datagram
//!   it sends, and no keyed value; a connecting end with a wrong secret then fails as
//!   timed out, `retransmission`, not as `AuthMismatch`), and a finished end lingers
//!   [`super::setup_udp::SETUP_LINGER`] to acknowledge its peer's retransmissions.
//!
//! Either way the handshake is one step per message, every step bounded:
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
//! Why the UDP carrier has a socket of its own rather than the worker's receive socket
//! with a distinct magic: the data demux then keeps dropping everything not addressed
//! to a connected QP, with no unauthenticated path into it, and a flood of set-up
//! datagrams cannot crowd the data socket's receive ring. The price is one more UDP
//! port per listener (the one the handle names) and one per connection attempt, closed
//! when its linger ends. TCP's price is one TCP socket per listener plus one per
//! handshake in flight; a finished handshake closes its stream, so an idle connection
//! holds no TCP socket either way.

use super::bootstrap::{self, BootstrapError, CONFIRM_MAGIC, NONCE_MAGIC, QpInfo, READY};
use super::setup_udp::{
    Datagram, Link, MAX_REASSEMBLY_BYTES, MAX_SETUP_DATAGRAM_BYTES, SETUP_LINGER,
};
use super::{EngineError, QpConfig, source};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
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
/// Flag of an encoded [`ConnHandle`] (byte 56): the listener takes its handshakes in
/// band, in UDP datagrams at the handle's address ([`SetupCarrier::Udp`],
/// [`super::setup_udp`]); without it, on a TCP stream there ([`SetupCarrier::Tcp`]).
pub const HANDLE_FLAG_UDP_SETUP: u8 = 2;
/// Every flag bit this version knows.
const HANDLE_FLAGS_KNOWN: u8 = HANDLE_FLAG_AUTH_PACKETS | HANDLE_FLAG_UDP_SETUP;
/// Offset of the plane count in an encoded [`ConnHandle`] (byte 57, reserved before
/// planes were carried): 0 for one plane (so a one-plane handle is the same 60 bytes as
/// before), 2..=[`crate::udp::MAX_PLANE_IPS`] for a listener on that many planes
/// ([`ConnHandle::planes`]).
pub const HANDLE_PLANES_OFFSET: usize = 57;
/// Most datagrams a UDP listener (or a connection attempt) reads in one pass, so a flood
/// cannot hold a worker's progress call.
pub const MAX_SETUP_DATAGRAMS_PER_PASS: usize = 256;
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
/// 0      4        5        6        8                 24                56      57     58  60
/// | MRCH | ver=1  | family | port   | IP (16 bytes;   | secret (32)      | flags | planes | 0 |
/// |      |        | 4 or 6 | TCP    |  IPv4 in 0..4)  |                  |       |        |rsv|
/// ```
///
/// Flags: [`HANDLE_FLAG_AUTH_PACKETS`], [`HANDLE_FLAG_UDP_SETUP`]. The flags are bound
/// into the handshake's key confirmation, so a handle whose flags were changed fails as a
/// forged secret does.
///
/// Planes (byte [`HANDLE_PLANES_OFFSET`]): how many planes the listener's worker sends
/// on ([`crate::udp::UdpConfig::plane_ips`]), 0 meaning one. The handle holds the count,
/// not the addresses (eight IPv6 addresses are 128 bytes; libfabric's `FI_NAME_MAX` is
/// 64): the set-up swaps the addresses ([`QpInfo::plane_ips`]). The count lets a
/// connecting end with another number of planes fail at once
/// ([`super::Worker::connect_start`]: both ends need as many) instead of after a set-up.
/// It is not bound into the confirmation: a changed count only moves that refusal to the
/// set-up, which checks the addresses the peer sends. The layout is version 1's: a
/// one-plane handle is byte for byte what it was, and a decoder older than the count
/// refuses a handle of several planes (its reserved byte is not 0), which it could not
/// have served anyway.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnHandle {
    addr: SocketAddr,
    secret: [u8; SECRET_BYTES],
    flags: u8,
    /// Planes of the listener, 1..=[`crate::udp::MAX_PLANE_IPS`].
    planes: u8,
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
    /// What carries the handshakes: a TCP stream (default) or UDP datagrams, in band
    /// ([`SetupCarrier`]). The handle carries the choice.
    pub carrier: SetupCarrier,
}

/// What carries a listener's handshakes ([`ListenOptions::carrier`]): the same messages
/// and checks either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetupCarrier {
    /// A non-blocking TCP stream to a TCP listener at the handle's address (the module
    /// documentation's carrier): what NCCL's plugin, the OCP library and `mrc-perf` use.
    #[default]
    Tcp,
    /// UDP datagrams to a UDP socket at the handle's address, with the small
    /// reliability layer of [`super::setup_udp`]: no TCP socket at either end (the
    /// libfabric provider's carrier, issue 44).
    Udp,
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
    /// A plane count byte ([`HANDLE_PLANES_OFFSET`]) that is neither 0 (one plane) nor
    /// 2..=[`crate::udp::MAX_PLANE_IPS`].
    #[error("connection handle plane count byte {0}: 0 (one plane) or 2 to 8")]
    BadPlanes(u8),
}

impl ConnHandle {
    /// The handle of a listener at `addr` with `secret` and the options' flags: what
    /// [`super::Worker::listen_at`] with the same arguments answers (a port 0 is encoded
    /// as is, and [`ConnHandle::from_bytes`] refuses it: it names no listener yet).
    pub fn new(addr: SocketAddr, secret: [u8; SECRET_BYTES], opts: ListenOptions) -> ConnHandle {
        ConnHandle {
            addr,
            secret,
            flags: handle_flags(opts),
            planes: 1,
        }
    }

    /// This handle naming a listener on `planes` planes ([`ConnHandle::planes`]).
    ///
    /// # Errors
    /// [`HandleError::BadPlanes`] for 0 or more than [`crate::udp::MAX_PLANE_IPS`].
    pub fn with_planes(mut self, planes: usize) -> Result<ConnHandle, HandleError> {
        if !(1..=crate::udp::MAX_PLANE_IPS).contains(&planes) {
            return Err(HandleError::BadPlanes(
                u8::try_from(planes).unwrap_or(u8::MAX),
            ));
        }
        self.planes = planes as u8;
        Ok(self)
    }

    /// How many planes the listener's worker sends on (1 for a handle with byte
    /// [`HANDLE_PLANES_OFFSET`] 0): a connecting end must have as many.
    pub fn planes(&self) -> usize {
        usize::from(self.planes)
    }

    /// The listener's address: a TCP or a UDP port ([`ConnHandle::carrier`]).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What carries the handshakes to this handle's listener
    /// ([`HANDLE_FLAG_UDP_SETUP`]).
    pub fn carrier(&self) -> SetupCarrier {
        if self.flags & HANDLE_FLAG_UDP_SETUP != 0 {
            SetupCarrier::Udp
        } else {
            SetupCarrier::Tcp
        }
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
        b[HANDLE_PLANES_OFFSET] = if self.planes > 1 { self.planes } else { 0 };
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
        if port == 0
            || ip.is_unspecified()
            || ip.is_multicast()
            || b[HANDLE_PLANES_OFFSET + 1..].iter().any(|&x| x != 0)
        {
            return Err(HandleError::BadAddress);
        }
        let flags = b[56];
        if flags & !HANDLE_FLAGS_KNOWN != 0 {
            return Err(HandleError::BadFlags(flags));
        }
        let planes = match b[HANDLE_PLANES_OFFSET] {
            0 => 1,
            n if (2..=crate::udp::MAX_PLANE_IPS).contains(&usize::from(n)) => n,
            n => return Err(HandleError::BadPlanes(n)),
        };
        let mut secret = [0u8; SECRET_BYTES];
        secret.copy_from_slice(&b[24..56]);
        Ok(ConnHandle {
            addr: SocketAddr::new(ip, port),
            secret,
            flags,
            planes,
        })
    }
}

/// The flag byte of a handle with options `opts`.
fn handle_flags(opts: ListenOptions) -> u8 {
    let mut f = 0;
    if opts.authenticate_packets {
        f |= HANDLE_FLAG_AUTH_PACKETS;
    }
    if opts.carrier == SetupCarrier::Udp {
        f |= HANDLE_FLAG_UDP_SETUP;
    }
    f
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
    /// Set-up datagrams dropped (UDP carrier): not a set-up datagram, of no handshake
    /// and opening none, for a handshake with no room for them (listener full of
    /// proven peers, bytes outside the receive window or the reassembly budget), or
    /// acknowledging bytes never sent.
    pub datagrams_dropped: u64,
    /// Set-up datagrams sent again (UDP carrier): on the retransmission timer or for a
    /// peer's duplicate.
    pub datagrams_retransmitted: u64,
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

/// What carries a handshake's messages.
enum Carrier {
    /// A non-blocking TCP stream.
    Tcp(TcpStream),
    /// Datagrams to and from `peer` on a reliable [`Link`]. A connecting end sends and
    /// reads on `sock`, connected to the listener; a listener's handshakes have no
    /// socket (`None`): the listener feeds them ([`Handshake::on_datagram`]) and sends
    /// their [`Link::outbox`].
    Udp {
        link: Box<Link>,
        peer: SocketAddr,
        sock: Option<UdpSocket>,
        /// Out-of-order bytes this attempt may still keep (a connecting end's own
        /// [`MAX_REASSEMBLY_BYTES`]; a listener's handshakes share the listener's).
        budget: usize,
    },
}

/// One handshake in flight on a non-blocking stream or on datagrams.
struct Handshake {
    carrier: Carrier,
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
    /// The peer's confirmation checked (it holds the handle's secret).
    proven: bool,
    /// The peer's READY arrived.
    ready_taken: bool,
    /// This end connected (the initiator of the key confirmation); a listener's end is
    /// always the responder. Fixed by role, never by comparing nonces: with roles from
    /// nonces, a stranger reflects the listener's own confirmation from a second
    /// connection (tests/handles.rs, a_reflected_confirmation...).
    initiator: bool,
    /// Datagrams of this handshake dropped since the worker last counted them.
    dropped: u64,
    /// A listener's confirmation on datagrams, sent once the peer's checked.
    held_confirm: Option<[u8; 32]>,
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

/// Sends what `link` has queued on the connected `sock`. A datagram the kernel has no
/// room for is lost like one lost on the way (the timer sends it again).
fn send_link(sock: &UdpSocket, link: &mut Link) -> Result<(), EngineError> {
    for d in link.outbox.drain(..) {
        match sock.send(&d) {
            Ok(_) => {}
            Err(e) if is_transient_send_error(&e) => {}
            // The listener's port is closed (an earlier datagram's ICMP port
            // unreachable, reported on this send): as a refused TCP connect.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(io_fail("connect")(e));
            }
            Err(e) => return Err(io_fail("send")(e)),
        }
    }
    Ok(())
}

/// A `send(2)` failure that only loses the datagram: no room (`EAGAIN`, `ENOBUFS`,
/// `ENOMEM`) or a signal.
fn is_transient_send_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    ) || matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ENOMEM))
}

impl Handshake {
    fn new(
        carrier: Carrier,
        peer_ip: IpAddr,
        handle: &ConnHandle,
        cfg: QpConfig,
        until: Instant,
        connecting: bool,
        qpn: Option<u32>,
    ) -> Result<Self, EngineError> {
        let mut nonce = [0u8; 32];
        source::random_bytes(&mut nonce).map_err(EngineError::Refused)?;
        let tcp = matches!(carrier, Carrier::Tcp(_));
        let mut h = Handshake {
            carrier,
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
            proven: false,
            ready_taken: false,
            initiator: connecting,
            dropped: 0,
            held_confirm: None,
        };
        // A TCP client first waits for its connection; every other end speaks at once.
        if !(connecting && tcp) {
            h.send_nonce();
        }
        Ok(h)
    }

    fn send_nonce(&mut self) {
        self.out.extend_from_slice(&NONCE_MAGIC);
        self.out.extend_from_slice(&self.nonce);
        self.step = Step::Nonce;
    }

    /// The handshake id and peer address of a handshake on datagrams.
    fn udp_key(&self) -> Option<(SocketAddr, u64)> {
        match &self.carrier {
            Carrier::Udp { link, peer, .. } => Some((*peer, link.id)),
            Carrier::Tcp(_) => None,
        }
    }

    /// Whether every byte of this end left (TCP) or was acknowledged (UDP).
    fn sent_all(&self) -> bool {
        self.out.is_empty()
            && match &self.carrier {
                Carrier::Tcp(_) => true,
                Carrier::Udp { link, .. } => link.all_acked(),
            }
    }

    /// Whether the handshake completed at this end.
    fn finished(&self) -> bool {
        self.ready_taken && self.sent_all()
    }

    /// Takes the counters of its datagrams since the last call: (dropped, sent again).
    fn take_counts(&mut self) -> (u64, u64) {
        let dropped = std::mem::take(&mut self.dropped);
        let again = match &mut self.carrier {
            Carrier::Udp { link, .. } => std::mem::take(&mut link.retransmitted),
            Carrier::Tcp(_) => 0,
        };
        (dropped, again)
    }

    /// Gives its kept out-of-order bytes back to the listener's `budget` (it ends).
    fn release(&mut self, budget: &mut usize) {
        if let Carrier::Udp { link, .. } = &mut self.carrier {
            link.release(budget);
        }
    }

    /// Takes datagram `d` of this handshake (its bytes go to the message buffer,
    /// bounded by [`MAX_SETUP_MESSAGE_BYTES`]; out-of-order bytes only once the peer
    /// proved the secret, within `budget`). Counts it when dropped.
    fn on_datagram(&mut self, d: &Datagram<'_>, now: Instant, budget: &mut usize) {
        let Carrier::Udp { link, .. } = &mut self.carrier else {
            return;
        };
        let r = link.receive(
            d,
            now,
            &mut self.inb,
            MAX_SETUP_MESSAGE_BYTES,
            self.proven || self.initiator,
            budget,
        );
        if r == super::setup_udp::Received::Dropped {
            self.dropped += 1;
        }
    }

    /// Lets the link send what is due at `now` (UDP; once per [`Handshake::advance`], so
    /// the messages and acknowledgements of one pass share datagrams). A listener sends
    /// on its own timer only to a peer that proved the secret: before, it answers each
    /// datagram with at most one.
    fn transmit(&mut self, now: Instant) -> Result<(), EngineError> {
        if let Carrier::Udp { link, sock, .. } = &mut self.carrier {
            link.poll_transmit(now, self.initiator || self.proven)?;
            if let Some(s) = sock {
                send_link(s, link)?;
            }
        }
        Ok(())
    }

    /// Writes what is queued, as far as the socket takes it (TCP); hands it to the link
    /// (UDP: [`Handshake::transmit`] sends it).
    fn flush(&mut self, _now: Instant) -> Result<(), EngineError> {
        let stream = match &mut self.carrier {
            Carrier::Tcp(stream) => stream,
            Carrier::Udp { link, .. } => {
                if !self.out.is_empty() {
                    link.push(&self.out)?;
                    self.out.clear();
                    self.out_pos = 0;
                }
                return Ok(());
            }
        };
        while self.out_pos < self.out.len() {
            match stream.write(&self.out[self.out_pos..]) {
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
    fn fill(&mut self, now: Instant) -> Result<bool, EngineError> {
        let room = MAX_SETUP_MESSAGE_BYTES.saturating_sub(self.inb.len());
        if room == 0 {
            return Err(BootstrapError::BadField("message length").into());
        }
        let stream = match &mut self.carrier {
            Carrier::Tcp(stream) => stream,
            Carrier::Udp { .. } => return self.fill_udp(now),
        };
        let mut chunk = [0u8; 4096];
        let want = room.min(chunk.len());
        loop {
            match stream.read(&mut chunk[..want]) {
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

    /// [`Handshake::fill`] on datagrams: a connecting end reads its socket (at most
    /// [`MAX_SETUP_DATAGRAMS_PER_PASS`]); a listener's handshake was fed already.
    fn fill_udp(&mut self, now: Instant) -> Result<bool, EngineError> {
        let Carrier::Udp {
            link, sock, budget, ..
        } = &mut self.carrier
        else {
            return Ok(false);
        };
        if let Some(s) = sock {
            let mut buf = [0u8; MAX_SETUP_DATAGRAM_BYTES + 1];
            for _ in 0..MAX_SETUP_DATAGRAMS_PER_PASS {
                let n = match s.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // The listener's port is closed (an ICMP port unreachable).
                    Err(e) => return Err(io_fail("connect")(e)),
                };
                match Datagram::parse(&buf[..n]).filter(|d| d.id == link.id) {
                    Some(d) => {
                        let r = link.receive(
                            &d,
                            now,
                            &mut self.inb,
                            MAX_SETUP_MESSAGE_BYTES,
                            self.proven || self.initiator,
                            budget,
                        );
                        if r == super::setup_udp::Received::Dropped {
                            self.dropped += 1;
                        }
                    }
                    None => self.dropped += 1,
                }
            }
        }
        Ok(link.take_fresh())
    }

    /// Whether the non-blocking TCP connect finished (`poll(2)` for writability, then
    /// `SO_ERROR`).
    fn connected(&self) -> Result<bool, EngineError> {
        let Carrier::Tcp(stream) = &self.carrier else {
            return Ok(true);
        };
        let mut p = libc::pollfd {
            fd: stream.as_raw_fd(),
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
        if let Some(e) = stream.take_error().map_err(io_fail("connect"))? {
            return Err(io_fail("connect")(e));
        }
        if p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Err(io_fail("connect")(io::ErrorKind::ConnectionRefused.into()));
        }
        Ok(true)
    }

    /// Advances as far as the bytes at hand allow; never blocks.
    fn advance(&mut self, host: &mut dyn SetupHost, now: Instant) -> Result<Progress, EngineError> {
        let p = self.advance_steps(host, now)?;
        self.transmit(now)?;
        Ok(p)
    }

    /// [`Handshake::advance`] but the datagrams' transmission.
    fn advance_steps(
        &mut self,
        host: &mut dyn SetupHost,
        now: Instant,
    ) -> Result<Progress, EngineError> {
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
            self.flush(now)?;
            if self.step == Step::Connecting {
                if !self.connected()? {
                    return Ok(Progress::Pending);
                }
                if let Carrier::Tcp(stream) = &self.carrier {
                    stream.set_nodelay(true).map_err(io_fail("set nodelay"))?;
                }
                self.send_nonce();
                continue;
            }
            if self.step_once(host)? {
                continue;
            }
            if self.ready_taken {
                // The peer's READY was taken; done once ours is out (TCP: the peer may
                // close its end now, read no more) or acknowledged (UDP).
                match self.qpn {
                    Some(q) if self.sent_all() => return Ok(Progress::Done(q)),
                    Some(_) => {}
                    None => return Err(EngineError::Refused("no QP".into())),
                }
                if matches!(self.carrier, Carrier::Tcp(_)) {
                    return Ok(Progress::Pending);
                }
            }
            if !self.fill(now)? && !self.finished() {
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
                if !initiator && matches!(self.carrier, Carrier::Udp { .. }) {
                    // A listener on datagrams keeps its confirmation until the peer's
                    // checked: a stranger (perhaps at a forged address) gets one
                    // datagram, the NONCE, for each it sends, and no keyed value.
                    self.held_confirm = Some(mine);
                } else {
                    self.out.extend_from_slice(&CONFIRM_MAGIC);
                    self.out.extend_from_slice(&mine);
                }
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
                self.proven = true;
                if let Some(mine) = self.held_confirm.take() {
                    self.out.extend_from_slice(&CONFIRM_MAGIC);
                    self.out.extend_from_slice(&mine);
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

/// What a listener listens on.
enum ListenSock {
    Tcp(TcpListener),
    /// Its UDP socket (`None` only in the deterministic tests, which feed datagrams with
    /// [`Setup::udp_input`] and take [`Listener::outbox`]).
    Udp(Option<UdpSocket>),
}

/// A finished handshake on datagrams that still acknowledges its peer's
/// retransmissions until `until` ([`SETUP_LINGER`]): no QP, no messages, two offsets.
struct Lingering {
    peer: SocketAddr,
    link: Box<Link>,
    /// A connecting end's socket (`None` at a listener).
    sock: Option<UdpSocket>,
    until: Instant,
}

impl Lingering {
    /// Answers datagram `d`: an acknowledgement when it repeats bytes taken before.
    fn input(&mut self, d: &Datagram<'_>, now: Instant) {
        let mut none = Vec::new();
        let mut budget = 0;
        self.link.receive(d, now, &mut none, 0, false, &mut budget);
        // Never on the timer: everything of this end was acknowledged.
        let _ = self.link.poll_transmit(now, false);
    }

    /// Reads a connecting end's socket and answers; returns the datagrams dropped.
    fn pump(&mut self, now: Instant) -> u64 {
        let Some(s) = &self.sock else { return 0 };
        let mut dropped = 0;
        let mut buf = [0u8; MAX_SETUP_DATAGRAM_BYTES + 1];
        for _ in 0..MAX_SETUP_DATAGRAMS_PER_PASS {
            let n = match s.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let id = self.link.id;
            match Datagram::parse(&buf[..n]).filter(|d| d.id == id) {
                Some(d) => {
                    let mut none = Vec::new();
                    let mut budget = 0;
                    self.link.receive(&d, now, &mut none, 0, false, &mut budget);
                    let _ = self.link.poll_transmit(now, false);
                }
                None => dropped += 1,
            }
        }
        if let Some(s) = &self.sock {
            // Nothing of this end is unacknowledged: losing an acknowledgement only
            // draws another retransmission.
            let _ = send_link(s, &mut self.link);
        }
        dropped
    }
}

struct Listener {
    sock: ListenSock,
    /// Its handle (address, secret, flags).
    handle: ConnHandle,
    cfg: QpConfig,
    /// Handshakes in flight.
    pending: Vec<Handshake>,
    /// QPs whose handshake completed, not yet handed out.
    ready: VecDeque<u32>,
    /// The earliest time of its next `accept(2)` (TCP) or `recvfrom(2)` with no
    /// handshake in flight (UDP) ([`next_accept_at`]).
    next_accept: Instant,
    /// Handshakes on datagrams that finished, still acknowledging (at most
    /// [`MAX_ACCEPTS_IN_FLIGHT`]; the oldest goes first).
    finished: Vec<Lingering>,
    /// Out-of-order bytes its handshakes may still keep, of [`MAX_REASSEMBLY_BYTES`].
    budget: usize,
    /// Datagrams to send: (to, bytes).
    outbox: Vec<(SocketAddr, Vec<u8>)>,
}

impl Listener {
    fn new(sock: ListenSock, handle: ConnHandle, cfg: QpConfig, now: Instant) -> Listener {
        Listener {
            sock,
            handle,
            cfg,
            pending: Vec::new(),
            ready: VecDeque::new(),
            next_accept: now,
            finished: Vec::new(),
            budget: MAX_REASSEMBLY_BYTES,
            outbox: Vec::new(),
        }
    }

    /// Moves the datagrams its handshakes queued to the listener's outbox.
    fn collect(&mut self) {
        for h in &mut self.pending {
            if let Carrier::Udp { link, peer, .. } = &mut h.carrier {
                self.outbox
                    .extend(link.outbox.drain(..).map(|d| (*peer, d)));
            }
        }
        for f in &mut self.finished {
            self.outbox
                .extend(f.link.outbox.drain(..).map(|d| (f.peer, d)));
        }
    }

    /// Sends the outbox on its UDP socket. A datagram that cannot go is lost like one
    /// lost on the way: a peer that proved the secret gets it again on the timer, a
    /// stranger (perhaps a forged address) never.
    fn send_outbox(&mut self) {
        let ListenSock::Udp(Some(s)) = &self.sock else {
            return;
        };
        for (to, d) in self.outbox.drain(..) {
            if let Err(e) = s.send_to(&d, to) {
                tracing::debug!("setup: a set-up datagram to {to} was not sent: {e}");
            }
        }
    }
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
    /// Connection attempts on datagrams that completed, still acknowledging.
    lingering: Vec<Lingering>,
    /// The earliest time the lingering attempts' sockets are read again: every
    /// [`ACCEPT_POLL`] (their peers send again 25 ms apart at the soonest).
    next_linger_poll: Option<Instant>,
    next_id: u64,
    timeout: Option<Duration>,
    pub(crate) stats: SetupStats,
}

impl Setup {
    /// Whether any listener or attempt is open, or a finished attempt still lingers (the
    /// worker then bounds its sleeps).
    pub(crate) fn busy(&self) -> bool {
        !self.listeners.is_empty() || !self.attempts.is_empty() || !self.lingering.is_empty()
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
        let (sock, addr) = match opts.carrier {
            SetupCarrier::Tcp => {
                let sock =
                    TcpListener::bind(SocketAddr::new(ip, port)).map_err(io_fail("listen"))?;
                sock.set_nonblocking(true).map_err(io_fail("listen"))?;
                let addr = sock.local_addr().map_err(io_fail("listen"))?;
                (ListenSock::Tcp(sock), addr)
            }
            SetupCarrier::Udp => {
                let sock = UdpSocket::bind(SocketAddr::new(ip, port)).map_err(io_fail("listen"))?;
                sock.set_nonblocking(true).map_err(io_fail("listen"))?;
                let addr = sock.local_addr().map_err(io_fail("listen"))?;
                (ListenSock::Udp(Some(sock)), addr)
            }
        };
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
            flags: handle_flags(opts),
            planes: 1,
        };
        let id = self.id();
        self.listeners
            .insert(id, Listener::new(sock, handle.clone(), cfg, Instant::now()));
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
        let udp = handle.carrier() == SetupCarrier::Udp;
        let (ty, proto) = if udp {
            (Type::DGRAM, Protocol::UDP)
        } else {
            (Type::STREAM, Protocol::TCP)
        };
        let s =
            Socket::new(Domain::for_address(addr), ty, Some(proto)).map_err(io_fail("socket"))?;
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
        let carrier = if udp {
            let mut id = [0u8; 8];
            source::random_bytes(&mut id).map_err(EngineError::Refused)?;
            Carrier::Udp {
                link: Box::new(Link::new(u64::from_be_bytes(id))),
                peer: addr,
                sock: Some(s.into()),
                budget: MAX_REASSEMBLY_BYTES,
            }
        } else {
            Carrier::Tcp(s.into())
        };
        let now = Instant::now();
        let h = Handshake::new(
            carrier,
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
                if h.finished() {
                    // Finished in advance_attempts (kept for this poll).
                    self.stats.connected += 1;
                    let qpn = h.qpn;
                    self.linger(*h);
                    return Ok(qpn);
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
        if let Err(e) = Self::accept_new(l, &mut self.stats, host, now, until) {
            return Some(Err(e));
        }
        Self::advance_listener(l, &mut self.stats, host, now);
        l.send_outbox();
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
            let _ = Self::accept_new(l, &mut self.stats, host, now, until);
            Self::advance_listener(l, &mut self.stats, host, now);
            l.send_outbox();
        }
        self.advance_attempts(host, now);
        self.advance_lingering(now);
    }

    /// Keeps a connecting end's finished handshake on datagrams acknowledging its
    /// listener's retransmissions for [`SETUP_LINGER`] (a TCP one just closes).
    fn linger(&mut self, h: Handshake) {
        if let Carrier::Udp {
            link, peer, sock, ..
        } = h.carrier
        {
            self.lingering.push(Lingering {
                peer,
                link,
                sock,
                until: Instant::now() + SETUP_LINGER,
            });
        }
    }

    /// Answers the lingering attempts' datagrams (every [`ACCEPT_POLL`]); ends those
    /// past their time.
    fn advance_lingering(&mut self, now: Instant) {
        if self.lingering.is_empty() || self.next_linger_poll.is_some_and(|t| now < t) {
            return;
        }
        self.next_linger_poll = Some(now + ACCEPT_POLL);
        self.lingering.retain(|f| now < f.until);
        for f in &mut self.lingering {
            self.stats.datagrams_dropped += f.pump(now);
        }
    }

    /// Takes the connections waiting in the backlog. With every handshake slot in use, a
    /// new one takes the slot of the oldest handshake whose peer has not proved the
    /// secret (no QP yet: all a stranger can hold); when every slot's peer has proved it,
    /// new connections wait in the backlog. Before the listener's `next_accept` it does
    /// nothing ([`next_accept_at`]).
    fn accept_new(
        l: &mut Listener,
        stats: &mut SetupStats,
        host: &mut dyn SetupHost,
        now: Instant,
        until: Instant,
    ) -> Result<(), EngineError> {
        let udp = matches!(l.sock, ListenSock::Udp(_));
        // On datagrams, a listener with handshakes in flight reads every pass (its
        // peers wait for answers); an idle one, or one whose finished handshakes only
        // linger (their peers send again 25 ms apart at the soonest), as a TCP listener
        // accepts: a busy-polled endpoint's passes pay no system call for it.
        let idle = l.pending.is_empty();
        if now < l.next_accept && (!udp || idle) {
            return Ok(());
        }
        let mut empty = false;
        let r = if udp {
            Self::receive_datagrams(l, stats, host, now, until, &mut empty);
            Ok(())
        } else {
            Self::accept_ready(l, stats, until, &mut empty)
        };
        l.next_accept = next_accept_at(now, empty);
        r
    }

    /// Reads up to [`MAX_SETUP_DATAGRAMS_PER_PASS`] datagrams from a UDP listener's
    /// socket into [`Setup::udp_input`]; `empty` set when it found none left.
    fn receive_datagrams(
        l: &mut Listener,
        stats: &mut SetupStats,
        host: &mut dyn SetupHost,
        now: Instant,
        until: Instant,
        empty: &mut bool,
    ) {
        let ListenSock::Udp(sock) = &mut l.sock else {
            return;
        };
        let Some(s) = sock.take() else { return };
        let mut buf = [0u8; MAX_SETUP_DATAGRAM_BYTES + 1];
        let mut n = 0;
        while n < MAX_SETUP_DATAGRAMS_PER_PASS {
            match s.recv_from(&mut buf) {
                Ok((len, from)) => {
                    n += 1;
                    Self::udp_input(l, stats, host, from, &buf[..len], now, until);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *empty = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // An error queued for an earlier send (an ICMP error): nothing to read.
                Err(e) => {
                    tracing::debug!("setup: a set-up socket read failed: {e}");
                    break;
                }
            }
        }
        l.sock = ListenSock::Udp(Some(s));
    }

    /// Takes one datagram `b` from `from` at a UDP listener: to its handshake, or to a
    /// finished one still lingering, or (a datagram that opens a handshake: offset 0,
    /// nothing acknowledged, a NONCE) a new handshake, in a slot taken as a TCP
    /// listener takes one; anything else is dropped and counted.
    fn udp_input(
        l: &mut Listener,
        stats: &mut SetupStats,
        _host: &mut dyn SetupHost,
        from: SocketAddr,
        b: &[u8],
        now: Instant,
        until: Instant,
    ) {
        let Some(d) = Datagram::parse(b) else {
            stats.datagrams_dropped += 1;
            return;
        };
        let key = Some((from, d.id));
        if let Some(h) = l.pending.iter_mut().find(|h| h.udp_key() == key) {
            h.on_datagram(&d, now, &mut l.budget);
            stats.datagrams_dropped += std::mem::take(&mut h.dropped);
            return;
        }
        if let Some(f) = l
            .finished
            .iter_mut()
            .find(|f| f.peer == from && f.link.id == d.id)
        {
            f.input(&d, now);
            return;
        }
        let opens =
            d.seq == 0 && d.ack == 0 && d.payload.len() >= 4 + 32 && d.payload[..4] == NONCE_MAGIC;
        if !opens {
            stats.datagrams_dropped += 1;
            return;
        }
        if l.pending.len() >= MAX_ACCEPTS_IN_FLIGHT {
            let oldest = l
                .pending
                .iter()
                .enumerate()
                .filter(|(_, h)| h.qpn.is_none())
                .min_by_key(|(_, h)| h.until)
                .map(|(i, _)| i);
            let Some(i) = oldest else {
                // Every slot's peer proved the secret: this one tries again later.
                stats.datagrams_dropped += 1;
                return;
            };
            // No QP to destroy: it never proved the secret.
            let mut h = l.pending.swap_remove(i);
            h.release(&mut l.budget);
            stats.rejected_crowded += 1;
        }
        let carrier = Carrier::Udp {
            link: Box::new(Link::new(d.id)),
            peer: from,
            sock: None,
            budget: 0,
        };
        match Handshake::new(
            carrier,
            from.ip(),
            &l.handle,
            l.cfg.clone(),
            until,
            false,
            None,
        ) {
            Ok(mut h) => {
                h.on_datagram(&d, now, &mut l.budget);
                stats.datagrams_dropped += std::mem::take(&mut h.dropped);
                l.pending.push(h);
            }
            Err(e) => {
                stats.datagrams_dropped += 1;
                tracing::debug!("setup: no handshake for a datagram from {from}: {e}");
            }
        }
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
            let ListenSock::Tcp(sock) = &l.sock else {
                break;
            };
            match sock.accept() {
                Ok((s, from)) => {
                    if let Some(i) = victim {
                        // No QP to destroy: it never proved the secret.
                        drop(l.pending.swap_remove(i));
                        stats.rejected_crowded += 1;
                    }
                    s.set_nonblocking(true).map_err(io_fail("accept"))?;
                    // Disabling Nagle only saves latency; a failure is harmless.
                    let _ = s.set_nodelay(true);
                    let h = Handshake::new(
                        Carrier::Tcp(s),
                        from.ip(),
                        &l.handle,
                        l.cfg.clone(),
                        until,
                        false,
                        None,
                    )?;
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
        l.finished.retain(|f| now < f.until);
        let mut i = 0;
        while i < l.pending.len() {
            let r = l.pending[i].advance(host, now);
            let (dropped, again) = l.pending[i].take_counts();
            stats.datagrams_dropped += dropped;
            stats.datagrams_retransmitted += again;
            match r {
                Ok(Progress::Pending) => i += 1,
                Ok(Progress::Done(q)) => {
                    let h = l.pending.swap_remove(i);
                    stats.accepted += 1;
                    l.ready.push_back(q);
                    if let Carrier::Udp { mut link, peer, .. } = h.carrier {
                        link.release(&mut l.budget);
                        l.outbox.extend(link.outbox.drain(..).map(|d| (peer, d)));
                        if l.finished.len() >= MAX_ACCEPTS_IN_FLIGHT {
                            l.finished.remove(0);
                        }
                        l.finished.push(Lingering {
                            peer,
                            link,
                            sock: None,
                            until: now + SETUP_LINGER,
                        });
                    }
                }
                Err(e) => {
                    let mut h = l.pending.swap_remove(i);
                    h.release(&mut l.budget);
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
        l.collect();
    }

    fn advance_attempts(&mut self, host: &mut dyn SetupHost, now: Instant) {
        for a in self.attempts.values_mut() {
            let Attempt::InFlight(h) = a else { continue };
            if h.finished() {
                continue;
            }
            let r = h.advance(host, now);
            let (dropped, again) = h.take_counts();
            self.stats.datagrams_dropped += dropped;
            self.stats.datagrams_retransmitted += again;
            match r {
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

#[cfg(test)]
mod handle_planes_tests {
    use super::*;

    /// The plane count rides in byte 57: 0 for one plane (the bytes of a one-plane
    /// handle unchanged), the count for 2..=8; 1 and 9..=255 there are refused, and so
    /// is asking for 0 or 9 planes.
    #[test]
    fn a_handle_carries_its_plane_count_in_byte_57() {
        let at: SocketAddr = "[fd00::1]:4000".parse().unwrap();
        let h = ConnHandle::new(at, [7; SECRET_BYTES], ListenOptions::default());
        let one = h.to_bytes();
        assert_eq!(h.planes(), 1);
        assert_eq!(one[HANDLE_PLANES_OFFSET], 0);
        assert_eq!(one[57..], [0, 0, 0]);
        for n in 2..=crate::udp::MAX_PLANE_IPS {
            let p = h.clone().with_planes(n).unwrap();
            let b = p.to_bytes();
            assert_eq!(b[57..], [n as u8, 0, 0]);
            // Only byte 57 differs from the one-plane handle.
            let diff: Vec<usize> = (0..HANDLE_BYTES).filter(|&i| b[i] != one[i]).collect();
            assert_eq!(diff, vec![57]);
            let back = ConnHandle::from_bytes(&b).unwrap();
            assert_eq!(back.planes(), n);
            assert_eq!(back, p);
            assert_eq!(back.addr(), at);
        }
        assert_eq!(
            h.clone().with_planes(1).unwrap().to_bytes(),
            one,
            "one plane is byte 57 = 0"
        );
        assert_eq!(h.clone().with_planes(0), Err(HandleError::BadPlanes(0)));
        assert_eq!(h.clone().with_planes(9), Err(HandleError::BadPlanes(9)));
        assert_eq!(h.clone().with_planes(300), Err(HandleError::BadPlanes(255)));
        for v in [1u8, 9, 64, 255] {
            let mut b = one;
            b[HANDLE_PLANES_OFFSET] = v;
            assert_eq!(ConnHandle::from_bytes(&b), Err(HandleError::BadPlanes(v)));
        }
        assert_eq!(
            HandleError::BadPlanes(9).to_string(),
            "connection handle plane count byte 9: 0 (one plane) or 2 to 8"
        );
        for i in [58, 59] {
            let mut b = one;
            b[i] = 1;
            assert_eq!(ConnHandle::from_bytes(&b), Err(HandleError::BadAddress));
        }
    }
}

/// The handshake on datagrams driven by hand (issue 44): a listener and a connecting end
/// without sockets, datagrams carried (or lost, repeated, reordered) by the test, time
/// advanced by the test, the worker replaced by a host that records what it is asked.
#[cfg(test)]
mod udp_harness {
    use super::*;
    use crate::engine::bootstrap::RemoteMr;

    /// A worker that records the QPs it makes, destroys and connects.
    #[derive(Default)]
    struct FakeHost {
        created: Vec<u32>,
        destroyed: Vec<u32>,
        connected: Vec<(u32, u32, SocketAddr)>,
        peer_ports: Vec<(u32, Vec<u16>)>,
        /// Regions each QP advertises (200: an INFO of 4 datagrams).
        regions: usize,
        next: u32,
    }

    impl SetupHost for FakeHost {
        fn create_qp(&mut self, _cfg: QpConfig) -> Result<u32, EngineError> {
            self.next += 1;
            let q = 0x100 * self.next;
            self.created.push(q);
            Ok(q)
        }
        fn destroy_qp(&mut self, qpn: u32) {
            self.destroyed.push(qpn);
        }
        fn local_info(&self, qpn: u32) -> Result<QpInfo, EngineError> {
            Ok(QpInfo {
                qpn,
                initial_psn: 7,
                generation: 1,
                udp_port: 4000 + qpn as u16,
                recv_window_packets: 64,
                mtu_payload_bytes: 4096,
                go_back_n: false,
                regions: (0..self.regions as u64)
                    .map(|i| RemoteMr {
                        addr: 0x1000 * i,
                        len: 0x1000,
                        rkey: i as u32,
                    })
                    .collect(),
                plane_ips: Vec::new(),
            })
        }
        fn connect(
            &mut self,
            qpn: u32,
            remote: &QpInfo,
            udp: SocketAddr,
        ) -> Result<Vec<u16>, EngineError> {
            assert_eq!(remote.regions.len(), self.regions);
            self.connected.push((qpn, remote.qpn, udp));
            Ok(vec![20000, 20001])
        }
        fn set_peer_source_ports(&mut self, qpn: u32, ports: &[u16]) -> Result<(), EngineError> {
            self.peer_ports.push((qpn, ports.to_vec()));
            Ok(())
        }
        fn set_auth(
            &mut self,
            _qpn: u32,
            _keys: mrc_transport::auth::AuthKeys,
        ) -> Result<(), EngineError> {
            Ok(())
        }
    }

    const SERVER: &str = "10.0.0.1:5000";
    const CLIENT: &str = "10.0.0.2:6000";
    const SECRET: [u8; SECRET_BYTES] = [9; SECRET_BYTES];
    const UDP: ListenOptions = ListenOptions {
        authenticate_packets: false,
        carrier: SetupCarrier::Udp,
    };
    /// The time the harness steps by when nobody sent anything.
    const TICK: Duration = Duration::from_millis(5);

    /// With `MRC_HARNESS_TRACE` set, one line on stderr for datagram `n` of a way (`tag`)
    /// at `elapsed` since the start: its sequence, acknowledgement, payload length and
    /// the copies its fate delivers.
    fn trace(elapsed: Duration, tag: &str, n: u64, d: &[u8], copies: usize) {
        if std::env::var_os("MRC_HARNESS_TRACE").is_some() {
            let p = Datagram::parse(d).unwrap();
            eprintln!(
                "{:>5} ms {tag} #{n} seq {} ack {} len {} x{copies}",
                elapsed.as_millis(),
                p.seq,
                p.ack,
                p.payload.len()
            );
        }
    }

    /// Which way a datagram goes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Dir {
        ToListener,
        ToClient,
    }

    struct Net {
        t0: Instant,
        now: Instant,
        l: Listener,
        lstats: SetupStats,
        lhost: FakeHost,
        c: Handshake,
        chost: FakeHost,
        cqpn: u32,
        cbudget: usize,
        /// The connecting end's outcome, once it has one.
        cdone: Option<Result<u32, String>>,
        /// Datagrams carried each way (before the fate of each).
        sent: [u64; 2],
        /// Both ends' handshake deadline, from `t0`.
        timeout: Duration,
        /// Datagrams the connecting end sent again.
        cretransmitted: u64,
    }

    fn listener(t0: Instant) -> Listener {
        let handle = ConnHandle::new(SERVER.parse().unwrap(), SECRET, UDP);
        Listener::new(ListenSock::Udp(None), handle, QpConfig::default(), t0)
    }

    fn client(t0: Instant, secret: [u8; SECRET_BYTES], until: Instant, id: u64) -> Handshake {
        let handle = ConnHandle::new(SERVER.parse().unwrap(), secret, UDP);
        let carrier = Carrier::Udp {
            link: Box::new(Link::new(id)),
            peer: handle.addr(),
            sock: None,
            budget: MAX_REASSEMBLY_BYTES,
        };
        let _ = t0;
        Handshake::new(
            carrier,
            handle.addr().ip(),
            &handle,
            QpConfig::default(),
            until,
            true,
            Some(0x77),
        )
        .unwrap()
    }

    impl Net {
        fn new(regions: usize, secret: [u8; SECRET_BYTES], timeout: Duration) -> Net {
            let t0 = Instant::now();
            let until = t0 + timeout;
            Net {
                t0,
                now: t0,
                l: listener(t0),
                lstats: SetupStats::default(),
                lhost: FakeHost {
                    regions,
                    ..FakeHost::default()
                },
                c: client(t0, secret, until, 0xC0FFEE),
                chost: FakeHost {
                    regions,
                    ..FakeHost::default()
                },
                cqpn: 0x77,
                cbudget: MAX_REASSEMBLY_BYTES,
                cdone: None,
                timeout,
                sent: [0, 0],
                cretransmitted: 0,
            }
        }

        /// Runs both ends until the connecting end has an outcome and the listener has
        /// nothing in flight, or `limit` passed; `fate` maps each datagram (way, its
        /// number that way from 0, bytes) to the copies delivered, in the order of
        /// its batch; `reorder` reverses each batch. With `MRC_HARNESS_TRACE` set in
        /// the environment it prints each datagram (time, way, offsets, copies).
        fn run(
            &mut self,
            limit: Duration,
            reorder: bool,
            mut fate: impl FnMut(Dir, u64, &[u8]) -> usize,
        ) {
            let until = self.t0 + self.timeout;
            while self.now < self.t0 + limit {
                let mut moved = false;
                if self.cdone.is_none() {
                    match self.c.advance(&mut self.chost, self.now) {
                        Ok(Progress::Done(q)) => self.cdone = Some(Ok(q)),
                        Ok(Progress::Pending) => {}
                        Err(e) => self.cdone = Some(Err(e.to_string())),
                    }
                } else {
                    // Done: it lingers, acknowledging.
                    self.c.transmit(self.now).unwrap();
                }
                let (dropped, again) = self.c.take_counts();
                assert_eq!(dropped, 0);
                self.cretransmitted += again;
                let Carrier::Udp { link, .. } = &mut self.c.carrier else {
                    unreachable!()
                };
                let mut batch: Vec<Vec<u8>> = link.outbox.drain(..).collect();
                if reorder {
                    batch.reverse();
                }
                for d in batch {
                    moved = true;
                    let n = self.sent[0];
                    self.sent[0] += 1;
                    let copies = fate(Dir::ToListener, n, &d);
                    trace(self.now - self.t0, "C->L", n, &d, copies);
                    for _ in 0..copies {
                        Setup::udp_input(
                            &mut self.l,
                            &mut self.lstats,
                            &mut self.lhost,
                            CLIENT.parse().unwrap(),
                            &d,
                            self.now,
                            until,
                        );
                    }
                }
                Setup::advance_listener(&mut self.l, &mut self.lstats, &mut self.lhost, self.now);
                let mut batch: Vec<(SocketAddr, Vec<u8>)> = self.l.outbox.drain(..).collect();
                if reorder {
                    batch.reverse();
                }
                for (to, d) in batch {
                    assert_eq!(to, CLIENT.parse().unwrap());
                    moved = true;
                    let n = self.sent[1];
                    self.sent[1] += 1;
                    let copies = fate(Dir::ToClient, n, &d);
                    trace(self.now - self.t0, "L->C", n, &d, copies);
                    for _ in 0..copies {
                        let p = Datagram::parse(&d).unwrap();
                        self.c.on_datagram(&p, self.now, &mut self.cbudget);
                    }
                }
                if self.cdone.is_some() && self.l.pending.is_empty() && !moved {
                    return;
                }
                if !moved {
                    self.now += TICK;
                }
            }
        }

        /// Asserts both ends connected to each other, each QP made once.
        fn assert_connected(&self) {
            assert_eq!(self.cdone, Some(Ok(self.cqpn)));
            assert_eq!(self.lhost.created, [0x100]);
            assert_eq!(self.l.ready, [0x100]);
            assert!(self.lhost.destroyed.is_empty());
            assert_eq!(
                self.lhost.connected,
                [(
                    0x100,
                    0x77,
                    SocketAddr::new(CLIENT.parse::<SocketAddr>().unwrap().ip(), 4000 + 0x77)
                )]
            );
            assert_eq!(
                self.chost.connected,
                [(
                    0x77,
                    0x100,
                    SocketAddr::new(SERVER.parse::<SocketAddr>().unwrap().ip(), 4000 + 0x100)
                )]
            );
            assert_eq!(self.lhost.peer_ports, [(0x100, vec![20000, 20001])]);
            assert_eq!(self.chost.peer_ports, [(0x77, vec![20000, 20001])]);
            assert!(self.l.pending.is_empty());
            assert_eq!(self.l.budget, MAX_REASSEMBLY_BYTES);
        }
    }

    #[test]
    fn a_clean_handshake_takes_a_known_number_of_datagrams() {
        let mut n = Net::new(200, SECRET, DEFAULT_SETUP_TIMEOUT);
        n.run(Duration::from_secs(1), false, |_, _, _| 1);
        n.assert_connected();
        // Connecting end: NONCE; CONFIRM; INFO (4029 B) + PORTS (10 B) in 4 datagrams
        // (1200, 1200, 1200, 439); READY. Listener: NONCE; CONFIRM (held until the
        // peer's checked) + INFO in 4 datagrams; PORTS + READY; the acknowledgement of
        // the connecting end's READY. Each carries the acknowledgements due.
        assert_eq!(
            QpInfo::encode(&n.chost.local_info(1).unwrap())
                .unwrap()
                .len(),
            4029
        );
        assert_eq!(n.sent, [7, 7]);
        assert_eq!(
            n.lstats,
            SetupStats {
                accepted: 1,
                ..SetupStats::default()
            }
        );
        assert_eq!(n.now, n.t0, "no timer needed");
        // The listener lingers, answering, for SETUP_LINGER.
        assert_eq!(n.l.finished.len(), 1);
        n.now = n.t0 + SETUP_LINGER;
        Setup::advance_listener(&mut n.l, &mut n.lstats, &mut n.lhost, n.now);
        assert!(n.l.finished.is_empty());
    }

    #[test]
    fn every_other_datagram_lost_each_way_still_connects_on_retransmissions() {
        let mut n = Net::new(200, SECRET, DEFAULT_SETUP_TIMEOUT);
        n.run(Duration::from_secs(5), false, |_, i, _| {
            usize::from(i % 2 == 1)
        });
        n.assert_connected();
        assert_eq!(
            n.lstats,
            SetupStats {
                accepted: 1,
                datagrams_retransmitted: 6,
                ..SetupStats::default()
            }
        );
        // 22 datagrams from the connecting end (13 sent again), 16 from the listener,
        // half of each lost; connected 600 ms after the first NONCE.
        assert_eq!(n.cretransmitted, 13);
        assert_eq!(n.sent, [22, 16]);
        assert_eq!((n.now - n.t0).as_millis(), 600);
    }

    #[test]
    fn every_datagram_twice_connects_once_and_ignores_the_copies() {
        let mut n = Net::new(200, SECRET, DEFAULT_SETUP_TIMEOUT);
        n.run(Duration::from_secs(1), false, |_, _, _| 2);
        n.assert_connected();
        assert_eq!(
            n.lstats,
            SetupStats {
                accepted: 1,
                ..SetupStats::default()
            }
        );
        // As many as without the copies: a copy in the same pass adds nothing.
        assert_eq!(n.sent, [7, 7]);
        assert_eq!(n.cretransmitted, 0);
    }

    #[test]
    fn reordered_fragments_are_reassembled() {
        let mut n = Net::new(200, SECRET, DEFAULT_SETUP_TIMEOUT);
        n.run(Duration::from_secs(1), true, |_, _, _| 1);
        n.assert_connected();
        assert_eq!(
            n.lstats,
            SetupStats {
                accepted: 1,
                ..SetupStats::default()
            }
        );
        assert_eq!(n.sent, [7, 7]);
        assert_eq!(n.cretransmitted, 0);
        assert_eq!(n.now, n.t0);
    }

    #[test]
    fn the_largest_info_crosses_in_18_datagrams() {
        let mut n = Net::new(bootstrap::MAX_REGIONS, SECRET, DEFAULT_SETUP_TIMEOUT);
        n.run(Duration::from_secs(1), false, |_, _, _| 1);
        n.assert_connected();
        // INFO of 1024 regions: 20509 bytes, 18 datagrams (17 full ones) at each end.
        assert_eq!(
            QpInfo::encode(&n.chost.local_info(1).unwrap())
                .unwrap()
                .len(),
            20509
        );
        assert_eq!(n.sent, [21, 21]);
    }

    #[test]
    fn a_wrong_confirmation_is_dropped_and_counted_and_makes_no_qp() {
        let mut n = Net::new(0, [1; SECRET_BYTES], DEFAULT_SETUP_TIMEOUT);
        n.run(Duration::from_secs(3), false, |_, _, _| 1);
        assert!(n.lhost.created.is_empty());
        assert!(n.l.pending.is_empty());
        assert!(n.l.ready.is_empty());
        // The connecting end's CONFIRM sent again, each dropped: its handshake is gone.
        assert_eq!(
            n.lstats,
            SetupStats {
                rejected_secret: 1,
                datagrams_dropped: 10,
                ..SetupStats::default()
            }
        );
        // The listener never sends its confirmation to a peer that did not prove the
        // secret, so the connecting end learns nothing and times out.
        assert_eq!(
            n.cdone,
            Some(Err(
                "bootstrap retransmission: the peer did not answer within the timeout".into()
            ))
        );
        assert_eq!(n.sent, [12, 1]);
    }

    #[test]
    fn a_handshake_past_its_deadline_fails_at_both_ends() {
        // Nothing reaches the connecting end: both ends fail at their 1 s deadline.
        let mut n = Net::new(0, SECRET, Duration::from_secs(1));
        n.run(Duration::from_secs(3), false, |d, _, _| {
            usize::from(d == Dir::ToListener)
        });
        assert_eq!(
            n.cdone,
            Some(Err(
                "bootstrap nonce: the peer did not answer within the timeout".into()
            ))
        );
        assert_eq!((n.now - n.t0).as_millis(), 1000);
        // The listener answered each of the 7 NONCEs sent again with its own, never on
        // its own timer (the peer had not proved the secret).
        assert_eq!(
            n.lstats,
            SetupStats {
                rejected_timeout: 1,
                datagrams_retransmitted: 7,
                ..SetupStats::default()
            }
        );
        assert_eq!(n.sent, [8, 8]);
        assert!(n.lhost.created.is_empty());
        // With the default deadline the retransmission bound ends the attempt first:
        // MAX_SETUP_RETRANSMITS sends again, then one more expiry, 1775 ms after the start.
        let mut n = Net::new(0, SECRET, DEFAULT_SETUP_TIMEOUT);
        n.run(Duration::from_secs(3), false, |_, _, _| 0);
        assert_eq!(
            n.cdone,
            Some(Err(
                "bootstrap retransmission: the peer did not answer within the timeout".into()
            ))
        );
        assert_eq!(
            n.cretransmitted,
            u64::from(super::super::setup_udp::MAX_SETUP_RETRANSMITS)
        );
        assert_eq!((n.now - n.t0).as_millis(), 1775);
        assert_eq!(n.sent, [11, 0]);
    }

    #[test]
    fn strangers_fill_the_slots_and_the_oldest_makes_room() {
        let t0 = Instant::now();
        let mut l = listener(t0);
        let mut stats = SetupStats::default();
        let mut host = FakeHost::default();
        let until = t0 + DEFAULT_SETUP_TIMEOUT;
        let from = |i: u16| SocketAddr::new("10.1.0.1".parse().unwrap(), 1000 + i);
        let nonce = |id: u64| {
            let mut p = NONCE_MAGIC.to_vec();
            p.extend_from_slice(&[5; 32]);
            Datagram {
                id,
                seq: 0,
                ack: 0,
                payload: &p,
            }
            .encode()
        };
        // Garbage, a datagram of no handshake, and one that does not open one: dropped,
        // counted, unanswered, no state.
        let mid = Datagram {
            id: 1,
            seq: 36,
            ack: 0,
            payload: b"MRCK",
        }
        .encode();
        for b in [b"hello".as_slice(), &[0u8; 2000], &mid] {
            Setup::udp_input(&mut l, &mut stats, &mut host, from(0), b, t0, until);
        }
        assert_eq!(stats.datagrams_dropped, 3);
        assert!(l.pending.is_empty());
        for i in 0..MAX_ACCEPTS_IN_FLIGHT as u16 {
            let t = t0 + Duration::from_micros(u64::from(i));
            Setup::udp_input(
                &mut l,
                &mut stats,
                &mut host,
                from(i),
                &nonce(7),
                t,
                until + (t - t0),
            );
        }
        assert_eq!(l.pending.len(), MAX_ACCEPTS_IN_FLIGHT);
        Setup::advance_listener(&mut l, &mut stats, &mut host, t0);
        // One answer each, and never another on a timer (a forged source draws nothing).
        assert_eq!(l.outbox.len(), MAX_ACCEPTS_IN_FLIGHT);
        l.outbox.clear();
        Setup::advance_listener(&mut l, &mut stats, &mut host, t0 + Duration::from_secs(5));
        assert!(l.outbox.is_empty());
        // A repeat draws exactly one datagram again.
        Setup::udp_input(&mut l, &mut stats, &mut host, from(3), &nonce(7), t0, until);
        Setup::advance_listener(&mut l, &mut stats, &mut host, t0 + Duration::from_secs(5));
        assert_eq!(l.outbox.len(), 1);
        assert_eq!(stats.datagrams_retransmitted, 1);
        l.outbox.clear();
        // One more: the oldest goes.
        Setup::udp_input(
            &mut l,
            &mut stats,
            &mut host,
            from(999),
            &nonce(8),
            t0,
            until + Duration::from_secs(1),
        );
        assert_eq!(l.pending.len(), MAX_ACCEPTS_IN_FLIGHT);
        assert_eq!(stats.rejected_crowded, 1);
        assert!(!l.pending.iter().any(|h| h.udp_key() == Some((from(0), 7))));
        assert!(host.created.is_empty());
        assert_eq!(
            stats,
            SetupStats {
                rejected_crowded: 1,
                datagrams_dropped: 3,
                datagrams_retransmitted: 1,
                ..SetupStats::default()
            }
        );
    }
}
