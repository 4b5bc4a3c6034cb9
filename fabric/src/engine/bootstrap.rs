//! The TCP bootstrap that sets up a connection, as perftest does before an RDMA test: each
//! side sends its [`QpInfo`] (QPN, initial PSN, generation, UDP receive port, receive
//! window and remote-writable regions) and reads the peer's. The UDP address of the peer
//! is the TCP peer's IP with the advertised port.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       magic "MRCB"                            |
//! +---------------+---------------+-------------------------------+
//! |   version=2   |  go_back_n    |        udp_port               |
//! +---------------+---------------+-------------------------------+
//! |                            QPN                                |
//! +---------------------------------------------------------------+
//! |                        initial PSN                            |
//! +-------------------------------+-------------------------------+
//! |          generation           |         region count          |
//! +-------------------------------+-------------------------------+
//! |                   receive window (packets)                    |
//! +---------------------------------------------------------------+
//! |                MTU payload bytes                              |
//! +---------------------------------------------------------------+
//! |  region count x { addr u64, len u64, rkey u32 } (20 bytes)    |
//! +---------------+-----------------------------------------------+
//! | plane count   |  plane count x IPv6 address (16 bytes; IPv4   |
//! |  (0, 2..=8)   |  as ::ffff:a.b.c.d), plane 0 first ...        |
//! +---------------+-----------------------------------------------+
//! ```
//! All fields big-endian. Every field is checked on receipt (untrusted input). The plane
//! addresses (version 4) are those of a host with one NIC port per plane
//! ([`QpInfo::plane_ips`]); 0 planes: one, the TCP peer's IP.
//!
//! Then each side connects its QP and sends the source ports of its EV sockets
//! ([`exchange_ports`], version 3):
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                       magic "MRCP"                            |
//! +-------------------------------+-------------------------------+
//! |        port count (1..)       |  count x source port (u16)... |
//! +-------------------------------+-------------------------------+
//! ```
//!
//! so each QP accepts datagrams from those ports of the peer's IP only
//! ([`super::source::SourceFilter`]); then each writes the 4 bytes `MRCR` ([`READY`]), and
//! neither posts before it has read the peer's (version 2 had no port message, version 1
//! no ready barrier).

use mrc_transport::region::MrKey;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use thiserror::Error;

/// `"MRCB"`.
pub const MAGIC: [u8; 4] = *b"MRCB";
/// Version of this layout (4: the plane addresses after the regions).
pub const VERSION: u8 = 4;
/// Bytes of the fixed part.
pub const FIXED_LEN: usize = 28;
/// Bytes per region entry.
pub const REGION_LEN: usize = 20;
/// Most regions one side may advertise.
pub const MAX_REGIONS: usize = 1024;
/// `"MRCP"`: the source-port message ([`exchange_ports`]).
pub const PORTS_MAGIC: [u8; 4] = *b"MRCP";
/// Most plane addresses one side may announce ([`crate::udp::MAX_PLANE_IPS`]).
pub const MAX_PLANES: usize = crate::udp::MAX_PLANE_IPS;
/// Bytes per plane address (an IPv6 address; IPv4 mapped).
pub const PLANE_LEN: usize = 16;

/// Most EV source ports one side may announce (a connection has at most 65535 EVs, and
/// this many sockets is far beyond any real one).
pub const MAX_SOURCE_PORTS: usize = 4096;

/// A remote-writable region as the peer advertises it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMr {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// rkey to put in RETH.
    pub rkey: u32,
}

impl From<MrKey> for RemoteMr {
    fn from(k: MrKey) -> Self {
        RemoteMr {
            addr: k.addr,
            len: k.len,
            rkey: k.rkey,
        }
    }
}

/// What one side of a connection tells the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// QPN (24 bits).
    pub qpn: u32,
    /// First PSN it sends (24 bits).
    pub initial_psn: u32,
    /// Its generation.
    pub generation: u16,
    /// UDP port of its receive socket.
    pub udp_port: u16,
    /// Its receive window, packets (the other side keeps at most this many outstanding).
    pub recv_window_packets: u32,
    /// Payload bytes per packet it sends.
    pub mtu_payload_bytes: u32,
    /// Whether it runs go-back-N (both sides must agree).
    pub go_back_n: bool,
    /// Regions it lets the peer write.
    pub regions: Vec<RemoteMr>,
    /// Its receive socket's IP on each plane, plane 0 first, where it has two or more
    /// ([`crate::udp::UdpConfig::plane_ips`]): the other side sends plane `p`'s EVs to
    /// `plane_ips[p]` at `udp_port`. Empty: one plane, at the TCP peer's IP. Checked on
    /// receipt: 2 to [`MAX_PLANES`], one family, none unspecified, multicast or repeated.
    pub plane_ips: Vec<IpAddr>,
}

/// Why the bootstrap failed.
#[derive(Debug, Error)]
pub enum BootstrapError {
    /// The TCP connection or a read/write failed (refused, timed out, closed early).
    #[error("bootstrap {what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The peer did not finish within the deadline of the exchange (a read or write
    /// reported `WouldBlock`/`TimedOut`, or the deadline had passed): a stuck, slow or
    /// foreign peer.
    #[error("bootstrap {what}: the peer did not answer within the timeout")]
    TimedOut {
        /// What was being done.
        what: &'static str,
    },
    /// The peer spoke another protocol.
    #[error("bootstrap: bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// The peer speaks another version.
    #[error("bootstrap: unsupported version {0}")]
    BadVersion(u8),
    /// A field is out of range.
    #[error("bootstrap: bad field {0}")]
    BadField(&'static str),
    /// No address to connect to.
    #[error("bootstrap: {0} resolves to no address")]
    NoAddress(String),
    /// One end authenticates its packets (a pre-shared key) and the other does not: the
    /// first message was the other kind's.
    #[error(
        "bootstrap: {0} (give both ends the same pre-shared key, e.g. mrc-perf --psk-file, or neither)"
    )]
    AuthMismatch(&'static str),
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> BootstrapError {
    move |source| match source.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => BootstrapError::TimedOut { what },
        _ => BootstrapError::Io { what, source },
    }
}

impl QpInfo {
    /// The encoded message.
    ///
    /// # Errors
    /// [`BootstrapError::BadField`] for more than [`MAX_REGIONS`] regions, or a plane list
    /// the peer would refuse ([`QpInfo::plane_ips`]).
    pub fn encode(&self) -> Result<Vec<u8>, BootstrapError> {
        if self.regions.len() > MAX_REGIONS {
            return Err(BootstrapError::BadField("region count"));
        }
        check_plane_ips(&self.plane_ips)?;
        let mut b = Vec::with_capacity(FIXED_LEN + REGION_LEN * self.regions.len());
        b.extend_from_slice(&MAGIC);
        b.push(VERSION);
        b.push(u8::from(self.go_back_n));
        b.extend_from_slice(&self.udp_port.to_be_bytes());
        b.extend_from_slice(&self.qpn.to_be_bytes());
        b.extend_from_slice(&self.initial_psn.to_be_bytes());
        b.extend_from_slice(&self.generation.to_be_bytes());
        b.extend_from_slice(&(self.regions.len() as u16).to_be_bytes());
        b.extend_from_slice(&self.recv_window_packets.to_be_bytes());
        b.extend_from_slice(&self.mtu_payload_bytes.to_be_bytes());
        for r in &self.regions {
            b.extend_from_slice(&r.addr.to_be_bytes());
            b.extend_from_slice(&r.len.to_be_bytes());
            b.extend_from_slice(&r.rkey.to_be_bytes());
        }
        b.push(self.plane_ips.len() as u8);
        for ip in &self.plane_ips {
            let v6 = match ip {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => *a,
            };
            b.extend_from_slice(&v6.octets());
        }
        Ok(b)
    }

    /// Parses the fixed part; returns the info without regions and the region count.
    ///
    /// # Errors
    /// [`BootstrapError::BadMagic`], [`BootstrapError::BadVersion`],
    /// [`BootstrapError::BadField`].
    pub fn decode_fixed(b: &[u8; FIXED_LEN]) -> Result<(QpInfo, usize), BootstrapError> {
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let magic = [b[0], b[1], b[2], b[3]];
        if magic == NONCE_MAGIC {
            return Err(BootstrapError::AuthMismatch(
                "the peer authenticates its packets and this end does not",
            ));
        }
        if magic != MAGIC {
            return Err(BootstrapError::BadMagic(magic));
        }
        if b[4] != VERSION {
            return Err(BootstrapError::BadVersion(b[4]));
        }
        let go_back_n = match b[5] {
            0 => false,
            1 => true,
            _ => return Err(BootstrapError::BadField("go_back_n")),
        };
        let udp_port = u16_at(6);
        let qpn = u32_at(8);
        let initial_psn = u32_at(12);
        let generation = u16_at(16);
        let n = usize::from(u16_at(18));
        let recv_window_packets = u32_at(20);
        let mtu_payload_bytes = u32_at(24);
        if udp_port == 0 {
            return Err(BootstrapError::BadField("udp_port"));
        }
        if qpn > 0xFF_FFFF {
            return Err(BootstrapError::BadField("qpn"));
        }
        if initial_psn > 0xFF_FFFF {
            return Err(BootstrapError::BadField("initial_psn"));
        }
        if n > MAX_REGIONS {
            return Err(BootstrapError::BadField("region count"));
        }
        if recv_window_packets == 0 {
            return Err(BootstrapError::BadField("recv_window_packets"));
        }
        if mtu_payload_bytes == 0 || mtu_payload_bytes > 65_000 {
            return Err(BootstrapError::BadField("mtu_payload_bytes"));
        }
        Ok((
            QpInfo {
                qpn,
                initial_psn,
                generation,
                udp_port,
                recv_window_packets,
                mtu_payload_bytes,
                go_back_n,
                regions: Vec::with_capacity(n),
                plane_ips: Vec::new(),
            },
            n,
        ))
    }

    /// Reads one message from `r`.
    ///
    /// # Errors
    /// [`BootstrapError::Io`] on a short read, or a decode error.
    pub fn read_from(r: &mut impl Read) -> Result<QpInfo, BootstrapError> {
        let mut fixed = [0u8; FIXED_LEN];
        r.read_exact(&mut fixed).map_err(io_err("read"))?;
        let (mut info, n) = QpInfo::decode_fixed(&fixed)?;
        for _ in 0..n {
            let mut e = [0u8; REGION_LEN];
            r.read_exact(&mut e).map_err(io_err("read"))?;
            let addr = u64::from_be_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
            let len = u64::from_be_bytes([e[8], e[9], e[10], e[11], e[12], e[13], e[14], e[15]]);
            let rkey = u32::from_be_bytes([e[16], e[17], e[18], e[19]]);
            if addr.checked_add(len).is_none() {
                return Err(BootstrapError::BadField("region bounds"));
            }
            info.regions.push(RemoteMr { addr, len, rkey });
        }
        let mut count = [0u8; 1];
        r.read_exact(&mut count).map_err(io_err("read"))?;
        let n = plane_count(count[0])?;
        let mut planes = vec![0u8; n * PLANE_LEN];
        r.read_exact(&mut planes).map_err(io_err("read"))?;
        info.plane_ips = decode_plane_ips(&planes)?;
        Ok(info)
    }
}

/// The plane count byte, checked: 0 or 2 to [`MAX_PLANES`].
fn plane_count(b: u8) -> Result<usize, BootstrapError> {
    let n = usize::from(b);
    if n == 1 || n > MAX_PLANES {
        return Err(BootstrapError::BadField("plane count"));
    }
    Ok(n)
}

/// Decodes and checks `b`, whole [`PLANE_LEN`]-byte plane addresses.
fn decode_plane_ips(b: &[u8]) -> Result<Vec<IpAddr>, BootstrapError> {
    let ips: Vec<IpAddr> = b
        .chunks_exact(PLANE_LEN)
        .map(|c| {
            let mut a = [0u8; PLANE_LEN];
            a.copy_from_slice(c);
            IpAddr::V6(Ipv6Addr::from(a)).to_canonical()
        })
        .collect();
    check_plane_ips(&ips)?;
    Ok(ips)
}

/// Checks a plane address list as [`QpInfo::plane_ips`] documents.
fn check_plane_ips(ips: &[IpAddr]) -> Result<(), BootstrapError> {
    if ips.len() == 1 || ips.len() > MAX_PLANES {
        return Err(BootstrapError::BadField("plane count"));
    }
    for (i, ip) in ips.iter().enumerate() {
        if ip.is_unspecified()
            || ip.is_multicast()
            || ip.is_ipv6() != ips[0].is_ipv6()
            || ips[..i].contains(ip)
        {
            return Err(BootstrapError::BadField("plane address"));
        }
    }
    Ok(())
}

/// Decodes one region entry ([`REGION_LEN`] bytes).
fn decode_region(e: &[u8]) -> Result<RemoteMr, BootstrapError> {
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&e[i..i + 8]);
        u64::from_be_bytes(a)
    };
    let (addr, len) = (u64_at(0), u64_at(8));
    let rkey = u32::from_be_bytes([e[16], e[17], e[18], e[19]]);
    if addr.checked_add(len).is_none() {
        return Err(BootstrapError::BadField("region bounds"));
    }
    Ok(RemoteMr { addr, len, rkey })
}

/// Checks the magic of a message whose first bytes are `b` as soon as 4 of them are there
/// (so a foreign peer is refused at its fourth byte, not at the deadline). A QpInfo where
/// `want` is expected, or the reverse, is [`BootstrapError::AuthMismatch`].
fn check_magic(b: &[u8], want: [u8; 4]) -> Result<bool, BootstrapError> {
    let Some(m) = b.get(..4) else {
        return Ok(false);
    };
    let magic = [m[0], m[1], m[2], m[3]];
    if magic == want {
        return Ok(true);
    }
    if want == MAGIC && magic == NONCE_MAGIC {
        return Err(BootstrapError::AuthMismatch(
            "the peer authenticates its packets and this end does not",
        ));
    }
    if want == NONCE_MAGIC && magic == MAGIC {
        return Err(BootstrapError::AuthMismatch(
            "this end authenticates its packets and the peer does not",
        ));
    }
    Err(BootstrapError::BadMagic(magic))
}

/// Decodes a [`QpInfo`] from the start of `b`, the bytes received so far (for a
/// non-blocking reader): `Ok(None)` while the message is incomplete, else the info and
/// the bytes it took. The magic is checked from the fourth byte on, the fixed part as
/// soon as it is whole, so at most [`FIXED_LEN`] + [`MAX_REGIONS`] x [`REGION_LEN`] + 1 +
/// [`MAX_PLANES`] x [`PLANE_LEN`] bytes are ever waited for.
///
/// # Errors
/// As [`QpInfo::read_from`] (no I/O errors).
pub fn decode_qp_info(b: &[u8]) -> Result<Option<(QpInfo, usize)>, BootstrapError> {
    if !check_magic(b, MAGIC)? || b.len() < FIXED_LEN {
        return Ok(None);
    }
    let mut fixed = [0u8; FIXED_LEN];
    fixed.copy_from_slice(&b[..FIXED_LEN]);
    let (mut info, n) = QpInfo::decode_fixed(&fixed)?;
    let regions_end = FIXED_LEN + n * REGION_LEN;
    let Some(&count) = b.get(regions_end) else {
        return Ok(None);
    };
    let planes = plane_count(count)?;
    let total = regions_end + 1 + planes * PLANE_LEN;
    if b.len() < total {
        return Ok(None);
    }
    for e in b[FIXED_LEN..regions_end].chunks_exact(REGION_LEN) {
        info.regions.push(decode_region(e)?);
    }
    info.plane_ips = decode_plane_ips(&b[regions_end + 1..total])?;
    Ok(Some((info, total)))
}

/// The source-port message of `ports` ([`exchange_ports`]'s layout).
///
/// # Errors
/// [`BootstrapError::BadField`] (`"source port count"`) for none or more than
/// [`MAX_SOURCE_PORTS`].
pub fn encode_ports(ports: &[u16]) -> Result<Vec<u8>, BootstrapError> {
    if ports.is_empty() || ports.len() > MAX_SOURCE_PORTS {
        return Err(BootstrapError::BadField("source port count"));
    }
    let mut b = Vec::with_capacity(6 + 2 * ports.len());
    b.extend_from_slice(&PORTS_MAGIC);
    b.extend_from_slice(&(ports.len() as u16).to_be_bytes());
    for p in ports {
        b.extend_from_slice(&p.to_be_bytes());
    }
    Ok(b)
}

/// Decodes a source-port message from the start of `b` (as [`decode_qp_info`]):
/// `Ok(None)` while incomplete, else the ports and the bytes taken.
///
/// # Errors
/// As [`exchange_ports`] (no I/O errors).
pub fn decode_ports(b: &[u8]) -> Result<Option<(Vec<u16>, usize)>, BootstrapError> {
    if !check_magic(b, PORTS_MAGIC)? || b.len() < 6 {
        return Ok(None);
    }
    let n = usize::from(u16::from_be_bytes([b[4], b[5]]));
    if n == 0 || n > MAX_SOURCE_PORTS {
        return Err(BootstrapError::BadField("source port count"));
    }
    let total = 6 + 2 * n;
    if b.len() < total {
        return Ok(None);
    }
    let ports: Vec<u16> = b[6..total]
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    if ports.contains(&0) {
        return Err(BootstrapError::BadField("source port"));
    }
    Ok(Some((ports, total)))
}

/// Decodes a message of `magic` and 32 bytes ([`exchange_nonces`],
/// [`exchange_confirmations`]) from the start of `b` (as [`decode_qp_info`]).
///
/// # Errors
/// [`BootstrapError::AuthMismatch`] for a [`QpInfo`] where a nonce was due,
/// [`BootstrapError::BadMagic`] for anything else.
pub fn decode_32(b: &[u8], magic: [u8; 4]) -> Result<Option<([u8; 32], usize)>, BootstrapError> {
    if !check_magic(b, magic)? || b.len() < 36 {
        return Ok(None);
    }
    let mut v = [0u8; 32];
    v.copy_from_slice(&b[4..36]);
    Ok(Some((v, 36)))
}

/// Decodes [`READY`] from the start of `b` (as [`decode_qp_info`]).
///
/// # Errors
/// [`BootstrapError::BadMagic`] for anything else.
pub fn decode_ready(b: &[u8]) -> Result<Option<usize>, BootstrapError> {
    Ok(check_magic(b, READY)?.then_some(4))
}

/// A TCP stream under one deadline for a whole exchange: before every read or write the
/// socket's timeout is set to the time left, and past the deadline every call fails with
/// `TimedOut`. So a peer that sends one byte a second cannot stretch an exchange of many
/// reads beyond the deadline (a per-read timeout would restart at every byte).
#[derive(Debug)]
pub struct DeadlineStream<'a> {
    s: &'a TcpStream,
    until: Instant,
}

impl<'a> DeadlineStream<'a> {
    /// `s` until `until`.
    pub fn new(s: &'a TcpStream, until: Instant) -> Self {
        DeadlineStream { s, until }
    }

    /// Time left, at least 1 ms (a zero socket timeout would mean none); `TimedOut` once
    /// the deadline passed.
    fn left(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        Ok(left.max(Duration::from_millis(1)))
    }
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.s.set_read_timeout(Some(self.left()?))?;
        let mut s = self.s;
        s.read(buf)
    }
}

impl Write for DeadlineStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.s.set_write_timeout(Some(self.left()?))?;
        let mut s = self.s;
        s.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `timeout` from now; a timeout too long for the clock (`Duration::MAX`) is about 136
/// years, never a panic.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(1 << 32)))
        .unwrap_or(now)
}

/// Client side: connects to `server` (within `timeout`), sends `local`, reads the peer's;
/// `timeout` is the deadline of the whole of it.
/// Returns the peer's info, the UDP address to send to, and the open stream (for the
/// application's own end-of-test exchange).
///
/// # Errors
/// [`BootstrapError::NoAddress`], [`BootstrapError::Io`] (refused, timed out), decode errors.
pub fn connect(
    server: impl ToSocketAddrs + std::fmt::Debug,
    local: &QpInfo,
    timeout: Duration,
) -> Result<(QpInfo, SocketAddr, TcpStream), BootstrapError> {
    let until = deadline_after(timeout);
    let label = format!("{server:?}");
    let addrs: Vec<SocketAddr> = server
        .to_socket_addrs()
        .map_err(io_err("resolve"))?
        .collect();
    let mut last = None;
    // On several planes the stream leaves from plane 0's address, which the peer finds
    // among this side's plane addresses (`QpInfo::plane_ips`).
    let from = local.plane_ips.first().copied();
    for a in &addrs {
        if from.is_some_and(|ip| ip.is_ipv6() != a.is_ipv6()) {
            continue;
        }
        match connect_from(*a, from, timeout) {
            Ok(s) => {
                tracing::debug!(server = %a, "bootstrap: TCP connected to {a}");
                return exchange_until(s, local, until);
            }
            Err(e) => {
                tracing::debug!(server = %a, "bootstrap: TCP connect to {a} failed: {e}");
                last = Some(e);
            }
        }
    }
    match last {
        Some(e) => Err(BootstrapError::Io {
            what: "connect",
            source: e,
        }),
        None => Err(BootstrapError::NoAddress(label)),
    }
}

/// A TCP connection to `server` within `timeout`, bound first to `from` (any port) when
/// given.
///
/// # Errors
/// The OS error of the socket, the bind or the connect.
pub fn connect_from(
    server: SocketAddr,
    from: Option<IpAddr>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let Some(ip) = from else {
        return TcpStream::connect_timeout(&server, timeout);
    };
    let s = socket2::Socket::new(
        socket2::Domain::for_address(server),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.bind(&SocketAddr::new(ip, 0).into())?;
    s.connect_timeout(&server.into(), timeout)?;
    Ok(s.into())
}

/// Server side: accepts one connection on `listener`, reads the peer's info, sends `local`.
///
/// # Errors
/// [`BootstrapError::Io`], decode errors.
pub fn accept(
    listener: &TcpListener,
    local: &QpInfo,
    timeout: Duration,
) -> Result<(QpInfo, SocketAddr, TcpStream), BootstrapError> {
    let (s, from) = listener.accept().map_err(io_err("accept"))?;
    tracing::debug!(client = %from, "bootstrap: TCP accepted {from}");
    exchange(s, local, timeout)
}

/// Either side, on an already connected stream: sends `local`, reads the peer's, all
/// within `timeout` ([`exchange_until`]).
///
/// # Errors
/// [`BootstrapError::Io`], [`BootstrapError::TimedOut`], decode errors.
pub fn exchange(
    s: TcpStream,
    local: &QpInfo,
    timeout: Duration,
) -> Result<(QpInfo, SocketAddr, TcpStream), BootstrapError> {
    exchange_until(s, local, deadline_after(timeout))
}

/// [`exchange`] under a deadline ([`DeadlineStream`]): a peer that has not sent its whole
/// [`QpInfo`] by `until` fails with [`BootstrapError::TimedOut`], however it paces its
/// bytes. The stream's read and write timeouts are left at the time that was left.
///
/// # Errors
/// As [`exchange`].
pub fn exchange_until(
    s: TcpStream,
    local: &QpInfo,
    until: Instant,
) -> Result<(QpInfo, SocketAddr, TcpStream), BootstrapError> {
    s.set_nodelay(true).map_err(io_err("set nodelay"))?;
    let mut d = DeadlineStream::new(&s, until);
    d.write_all(&local.encode()?).map_err(io_err("write"))?;
    let remote = QpInfo::read_from(&mut d)?;
    let peer_ip = s.peer_addr().map_err(io_err("peer address"))?.ip();
    let udp = SocketAddr::new(peer_ip, remote.udp_port);
    tracing::debug!(
        qpn = %super::watch::Qpn(local.qpn),
        peer_qpn = %super::watch::Qpn(remote.qpn),
        peer_udp = %udp,
        "bootstrap: QP info exchanged (peer QP {:#08x} at {udp})",
        remote.qpn
    );
    Ok((remote, udp, s))
}

/// Sends this side's EV source ports and reads the peer's (after both sides connected
/// their QPs, before [`ready`]), by `until`.
///
/// # Errors
/// [`BootstrapError::Io`] / [`BootstrapError::TimedOut`], [`BootstrapError::BadMagic`],
/// [`BootstrapError::BadField`] (`"source port count"`: none, or more than
/// [`MAX_SOURCE_PORTS`]; `"source port"`: port 0).
pub fn exchange_ports(
    s: &TcpStream,
    local: &[u16],
    until: Instant,
) -> Result<Vec<u16>, BootstrapError> {
    if local.is_empty() || local.len() > MAX_SOURCE_PORTS {
        return Err(BootstrapError::BadField("source port count"));
    }
    let mut b = Vec::with_capacity(6 + 2 * local.len());
    b.extend_from_slice(&PORTS_MAGIC);
    b.extend_from_slice(&(local.len() as u16).to_be_bytes());
    for p in local {
        b.extend_from_slice(&p.to_be_bytes());
    }
    let mut d = DeadlineStream::new(s, until);
    d.write_all(&b).map_err(io_err("write source ports"))?;
    let ports = read_ports(&mut d)?;
    tracing::debug!(
        local = local.len(),
        peer = ports.len(),
        "bootstrap: EV source ports exchanged ({} ours, {} the peer's)",
        local.len(),
        ports.len()
    );
    Ok(ports)
}

/// Reads one source-port message.
fn read_ports(r: &mut impl Read) -> Result<Vec<u16>, BootstrapError> {
    let mut h = [0u8; 6];
    r.read_exact(&mut h).map_err(io_err("read source ports"))?;
    let magic = [h[0], h[1], h[2], h[3]];
    if magic != PORTS_MAGIC {
        return Err(BootstrapError::BadMagic(magic));
    }
    let n = usize::from(u16::from_be_bytes([h[4], h[5]]));
    if n == 0 || n > MAX_SOURCE_PORTS {
        return Err(BootstrapError::BadField("source port count"));
    }
    let mut body = vec![0u8; 2 * n];
    r.read_exact(&mut body)
        .map_err(io_err("read source ports"))?;
    let ports: Vec<u16> = body
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    if ports.contains(&0) {
        return Err(BootstrapError::BadField("source port"));
    }
    Ok(ports)
}

/// `"MRCN"`: the authentication nonce message ([`exchange_nonces`]): the magic, then this
/// end's 32-byte setup nonce. It comes first in an authenticated bootstrap, before the
/// [`QpInfo`].
pub const NONCE_MAGIC: [u8; 4] = *b"MRCN";

/// `"MRCK"`: the key confirmation message of an authenticated bootstrap (after the
/// nonces): the magic, then 32 bytes (`mrc_transport::auth::key_confirmation`).
pub const CONFIRM_MAGIC: [u8; 4] = *b"MRCK";

/// Sends this end's setup nonce and reads the peer's, by `until` (the first message of an
/// authenticated bootstrap; keys come from both nonces and the pre-shared key,
/// `mrc_transport::auth::AuthKeys::derive`).
///
/// # Errors
/// [`BootstrapError::Io`] / [`BootstrapError::TimedOut`];
/// [`BootstrapError::AuthMismatch`] when the peer sent a plain [`QpInfo`] instead;
/// [`BootstrapError::BadMagic`] for anything else.
pub fn exchange_nonces(
    s: &TcpStream,
    local: &[u8; 32],
    until: Instant,
) -> Result<[u8; 32], BootstrapError> {
    exchange_32(s, NONCE_MAGIC, local, until, "nonce")
}

/// Sends this end's key confirmation and reads the peer's, by `until`.
///
/// # Errors
/// As [`exchange_nonces`].
pub fn exchange_confirmations(
    s: &TcpStream,
    local: &[u8; 32],
    until: Instant,
) -> Result<[u8; 32], BootstrapError> {
    exchange_32(s, CONFIRM_MAGIC, local, until, "key confirmation")
}

/// One message of `magic` and 32 bytes each way.
fn exchange_32(
    s: &TcpStream,
    magic: [u8; 4],
    local: &[u8; 32],
    until: Instant,
    what: &'static str,
) -> Result<[u8; 32], BootstrapError> {
    let mut d = DeadlineStream::new(s, until);
    let mut b = [0u8; 36];
    b[..4].copy_from_slice(&magic);
    b[4..].copy_from_slice(local);
    d.write_all(&b).map_err(io_err(what))?;
    let mut got = [0u8; 4];
    d.read_exact(&mut got).map_err(io_err(what))?;
    if got == MAGIC {
        return Err(BootstrapError::AuthMismatch(
            "this end authenticates its packets and the peer does not",
        ));
    }
    if got != magic {
        return Err(BootstrapError::BadMagic(got));
    }
    let mut v = [0u8; 32];
    d.read_exact(&mut v).map_err(io_err(what))?;
    tracing::debug!("bootstrap: {what} exchanged");
    Ok(v)
}

/// The ready marker each side writes once its QP is connected (4 bytes, ASCII `MRCR`).
pub const READY: [u8; 4] = *b"MRCR";

/// The barrier after both sides [`exchange`]d and connected their QPs (perftest's final
/// `ctx_hand_shake`): writes [`READY`], then reads the peer's. A side must not post before
/// it returns: the peer's QP may still be unconnected (its copy of our [`QpInfo`] can be
/// late by a TCP retransmission, 200 ms and more), drop every packet, and our RTOs run
/// out the retry limit (`RetryExceeded` at the start of a run on a lossy path).
///
/// # Errors
/// [`BootstrapError::Io`] (timed out, closed: the peer failed to connect),
/// [`BootstrapError::BadMagic`] for anything but [`READY`].
pub fn ready(s: &mut TcpStream) -> Result<(), BootstrapError> {
    s.write_all(&READY).map_err(io_err("write ready"))?;
    let mut b = [0u8; 4];
    s.read_exact(&mut b).map_err(io_err("read ready"))?;
    if b != READY {
        return Err(BootstrapError::BadMagic(b));
    }
    tracing::debug!("bootstrap: peer ready");
    Ok(())
}

/// [`ready`] by `until` ([`DeadlineStream`]).
///
/// # Errors
/// As [`ready`], [`BootstrapError::TimedOut`] past `until`.
pub fn ready_until(s: &TcpStream, until: Instant) -> Result<(), BootstrapError> {
    let mut d = DeadlineStream::new(s, until);
    d.write_all(&READY).map_err(io_err("write ready"))?;
    let mut b = [0u8; 4];
    d.read_exact(&mut b).map_err(io_err("read ready"))?;
    if b != READY {
        return Err(BootstrapError::BadMagic(b));
    }
    tracing::debug!("bootstrap: peer ready");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> QpInfo {
        QpInfo {
            qpn: 0x12_3456,
            initial_psn: 0xAB_CDEF,
            generation: 9,
            udp_port: 4792,
            recv_window_packets: 1024,
            mtu_payload_bytes: 4096,
            go_back_n: false,
            regions: vec![RemoteMr {
                addr: 0x1_0000,
                len: 1 << 20,
                rkey: 0xDEAD_BE01,
            }],
            plane_ips: Vec::new(),
        }
    }

    #[test]
    fn encode_decode_round_trip_exact_bytes() {
        let b = info().encode().unwrap();
        assert_eq!(b.len(), FIXED_LEN + REGION_LEN + 1);
        assert_eq!(&b[..8], b"MRCB\x04\x00\x12\xb8");
        assert_eq!(&b[8..12], &[0x00, 0x12, 0x34, 0x56]);
        assert_eq!(b[FIXED_LEN + REGION_LEN], 0, "no plane addresses");
        assert_eq!(QpInfo::read_from(&mut b.as_slice()).unwrap(), info());
    }

    #[test]
    fn plane_addresses_round_trip_and_hostile_lists_are_refused() {
        let mut i = info();
        i.plane_ips = vec!["10.0.0.1".parse().unwrap(), "10.1.0.1".parse().unwrap()];
        let b = i.encode().unwrap();
        let at = FIXED_LEN + REGION_LEN;
        assert_eq!(b.len(), at + 1 + 2 * PLANE_LEN);
        assert_eq!(b[at], 2);
        // IPv4 as ::ffff:10.1.0.1.
        assert_eq!(
            &b[at + 1 + PLANE_LEN..],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 0, 1]
        );
        assert_eq!(QpInfo::read_from(&mut b.as_slice()).unwrap(), i);
        assert_eq!(decode_qp_info(&b).unwrap(), Some((i.clone(), b.len())));
        for n in 0..b.len() {
            assert_eq!(decode_qp_info(&b[..n]).unwrap(), None, "prefix {n}");
        }
        let mut v6 = info();
        v6.plane_ips = vec![
            "fd00::1".parse().unwrap(),
            "fd01::1".parse().unwrap(),
            "fd02::1".parse().unwrap(),
        ];
        let b6 = v6.encode().unwrap();
        assert_eq!(QpInfo::read_from(&mut b6.as_slice()).unwrap(), v6);
        // A count of 1 or 9, a repeated, unspecified, multicast or mixed-family address.
        for (count, what) in [(1u8, "plane count"), (9, "plane count")] {
            let mut x = b.clone();
            x[at] = count;
            x.resize(at + 1 + usize::from(count) * PLANE_LEN, 7);
            assert!(
                matches!(QpInfo::read_from(&mut x.as_slice()), Err(BootstrapError::BadField(w)) if w == what),
                "count {count}"
            );
            assert!(matches!(decode_qp_info(&x), Err(BootstrapError::BadField(w)) if w == what));
        }
        let second = at + 1 + PLANE_LEN;
        let bad: [&[u8; 16]; 4] = [
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
            &[0; 16],
            &[0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            &[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        ];
        for a in bad {
            let mut x = b.clone();
            x[second..second + PLANE_LEN].copy_from_slice(a);
            assert!(
                matches!(
                    QpInfo::read_from(&mut x.as_slice()),
                    Err(BootstrapError::BadField("plane address"))
                ),
                "{a:?}"
            );
            assert!(matches!(
                decode_qp_info(&x),
                Err(BootstrapError::BadField("plane address"))
            ));
        }
        // The sender refuses what the receiver would.
        let mut one = info();
        one.plane_ips = vec!["10.0.0.1".parse().unwrap()];
        assert!(matches!(
            one.encode(),
            Err(BootstrapError::BadField("plane count"))
        ));
    }

    #[test]
    fn hostile_messages_are_typed_errors() {
        let good = info().encode().unwrap();
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(
            QpInfo::read_from(&mut b.as_slice()),
            Err(BootstrapError::BadMagic(_))
        ));
        let mut b = good.clone();
        b[4] = 2;
        assert!(matches!(
            QpInfo::read_from(&mut b.as_slice()),
            Err(BootstrapError::BadVersion(2))
        ));
        let mut b = good.clone();
        b[8] = 1; // QPN above 24 bits
        assert!(matches!(
            QpInfo::read_from(&mut b.as_slice()),
            Err(BootstrapError::BadField("qpn"))
        ));
        let mut b = good.clone();
        b[18] = 0xFF; // region count 65280 > MAX_REGIONS
        assert!(matches!(
            QpInfo::read_from(&mut b.as_slice()),
            Err(BootstrapError::BadField("region count"))
        ));
        // Truncated region entry.
        assert!(matches!(
            QpInfo::read_from(&mut &good[..good.len() - 1]),
            Err(BootstrapError::Io { .. })
        ));
        let mut b = good.clone();
        b[FIXED_LEN..FIXED_LEN + 8].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            QpInfo::read_from(&mut b.as_slice()),
            Err(BootstrapError::BadField("region bounds"))
        ));
    }

    #[test]
    fn incremental_decoders_wait_for_whole_messages_and_refuse_foreign_magic_early() {
        let b = info().encode().unwrap();
        for n in 0..b.len() {
            assert_eq!(decode_qp_info(&b[..n]).unwrap(), None, "prefix {n}");
        }
        let mut more = b.clone();
        more.extend_from_slice(b"MRCP");
        assert_eq!(decode_qp_info(&more).unwrap(), Some((info(), b.len())));
        assert!(matches!(
            decode_qp_info(b"GET "),
            Err(BootstrapError::BadMagic(m)) if &m == b"GET "
        ));
        assert_eq!(decode_qp_info(b"GE").unwrap(), None);
        assert!(matches!(
            decode_qp_info(b"MRCN"),
            Err(BootstrapError::AuthMismatch(_))
        ));
        let p = encode_ports(&[20000, 20001]).unwrap();
        assert_eq!(p, b"MRCP\x00\x02\x4e\x20\x4e\x21");
        assert_eq!(decode_ports(&p[..9]).unwrap(), None);
        assert_eq!(decode_ports(&p).unwrap(), Some((vec![20000, 20001], 10)));
        assert!(matches!(
            decode_ports(b"MRCP\xff\xff"),
            Err(BootstrapError::BadField("source port count"))
        ));
        assert!(matches!(
            encode_ports(&[]),
            Err(BootstrapError::BadField("source port count"))
        ));
        let mut n = b"MRCK".to_vec();
        n.extend_from_slice(&[7; 32]);
        assert_eq!(decode_32(&n[..35], CONFIRM_MAGIC).unwrap(), None);
        assert_eq!(decode_32(&n, CONFIRM_MAGIC).unwrap(), Some(([7; 32], 36)));
        assert!(matches!(
            decode_32(&n, NONCE_MAGIC),
            Err(BootstrapError::BadMagic(m)) if &m == b"MRCK"
        ));
        assert_eq!(decode_ready(b"MRC").unwrap(), None);
        assert_eq!(decode_ready(b"MRCR").unwrap(), Some(4));
        assert!(decode_ready(b"MRCX").is_err());
    }

    proptest::proptest! {
        /// Arbitrary bytes (and arbitrary bytes after a valid magic) are a typed error,
        /// `None` or a message no longer than the input: never a panic.
        #[test]
        fn incremental_decoders_take_any_bytes(
            magic in 0usize..5,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        ) {
            let mut b = match magic {
                0 => MAGIC.to_vec(),
                1 => PORTS_MAGIC.to_vec(),
                2 => NONCE_MAGIC.to_vec(),
                3 => CONFIRM_MAGIC.to_vec(),
                _ => Vec::new(),
            };
            b.extend_from_slice(&body);
            if let Ok(Some((_, n))) = decode_qp_info(&b) {
                proptest::prop_assert!(n <= b.len());
            }
            if let Ok(Some((p, n))) = decode_ports(&b) {
                proptest::prop_assert!(n <= b.len() && !p.contains(&0));
            }
            for m in [NONCE_MAGIC, CONFIRM_MAGIC] {
                if let Ok(Some((_, n))) = decode_32(&b, m) {
                    proptest::prop_assert_eq!(n, 36);
                }
            }
            let _ = decode_ready(&b);
        }
    }

    #[test]
    fn silent_peer_is_a_timeout_not_an_os_error() {
        // A peer that accepts the TCP connection and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).unwrap();
        let (_held_open, _) = listener.accept().unwrap();
        let r = exchange(client, &info(), Duration::from_millis(50));
        match r {
            Err(e @ BootstrapError::TimedOut { what: "read" }) => assert_eq!(
                e.to_string(),
                "bootstrap read: the peer did not answer within the timeout"
            ),
            other => panic!("want TimedOut {{ what: \"read\" }}, got {other:?}"),
        }
    }

    #[test]
    fn source_port_messages_are_checked() {
        let ok = b"MRCP\x00\x02\x4e\x20\x4e\x21";
        assert_eq!(read_ports(&mut ok.as_slice()).unwrap(), vec![20000, 20001]);
        assert!(matches!(
            read_ports(&mut b"MRCX\x00\x01\x00\x01".as_slice()),
            Err(BootstrapError::BadMagic(_))
        ));
        assert!(matches!(
            read_ports(&mut b"MRCP\x00\x00".as_slice()),
            Err(BootstrapError::BadField("source port count"))
        ));
        assert!(matches!(
            read_ports(&mut b"MRCP\x10\x01".as_slice()),
            Err(BootstrapError::BadField("source port count"))
        ));
        assert!(matches!(
            read_ports(&mut b"MRCP\x00\x01\x00\x00".as_slice()),
            Err(BootstrapError::BadField("source port"))
        ));
        assert!(matches!(
            read_ports(&mut b"MRCP\x00\x02\x00\x01".as_slice()),
            Err(BootstrapError::Io { .. })
        ));
    }

    #[test]
    fn a_peer_pacing_its_bytes_is_cut_off_at_the_deadline_of_the_whole_exchange() {
        // A valid header announcing 1024 regions, then one byte every 20 ms: each read
        // would finish well within a per-read timeout of 100 ms; the deadline ends it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let slow = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut i = info();
            i.regions = vec![i.regions[0]; MAX_REGIONS];
            let b = i.encode().unwrap();
            let _ = s.write_all(&b[..FIXED_LEN]);
            for x in &b[FIXED_LEN..] {
                if s.write_all(&[*x]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let client = TcpStream::connect(addr).unwrap();
        let t = Instant::now();
        let r = exchange(client, &info(), Duration::from_millis(300));
        let took = t.elapsed();
        assert!(
            matches!(r, Err(BootstrapError::TimedOut { what: "read" })),
            "{r:?}"
        );
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_millis(600), "{took:?}");
        drop(r);
        slow.join().unwrap();
    }
}
