//! The non-blocking connection setup behind `listen` / `connect` / `accept`.
//!
//! NCCL calls `connect` and `accept` again and again until each returns a comm, possibly
//! alternating them on one thread for a loopback pair, so neither may wait. Each side runs
//! a [`Handshake`] over a non-blocking TCP stream and advances it by one step per call
//! ([`Handshake::step`]): it writes what it can and parses what has arrived. The bytes are
//! those of fabric's TCP bootstrap ([`mrc_fabric::engine::bootstrap`]), without its
//! blocking calls:
//!
//! 1. The connecting side first sends the 8-byte nonce from the listen handle (so a
//!    listener only pairs with a connector that read its handle).
//! 2. Each side sends its [`QpInfo`] ([`QpInfo::encode`], no regions: the plugin moves
//!    data with SEND, so the peer writes nowhere).
//! 3. On the peer's `QpInfo` each side connects its QP ([`Worker::connect`]) and sends its
//!    EV source ports (`"MRCP"`, count u16, ports u16, big-endian: the layout of
//!    [`bootstrap::exchange_ports`]).
//! 4. On the peer's ports each side installs them ([`Worker::set_peer_source_ports`]) and
//!    sends `"MRCR"` ([`bootstrap::READY`]); it is done once it has read the peer's
//!    `"MRCR"` and written all of its own bytes. Then the TCP stream is closed.
//!
//! Every field from the peer is checked (the bootstrap's own decoder); a handshake that
//! does not finish by its deadline fails.

use mrc_fabric::engine::Worker;
use mrc_fabric::engine::bootstrap::{self, FIXED_LEN, QpInfo, REGION_LEN};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

/// Bytes of the connector's nonce.
pub const NONCE_LEN: usize = 8;

/// Largest message the peer may send in one step of the handshake, bytes: a `QpInfo`
/// with the most regions the decoder accepts, or a port message with the most ports.
const MAX_INBOX: usize = FIXED_LEN
    + REGION_LEN * bootstrap::MAX_REGIONS
    + 6
    + 2 * bootstrap::MAX_SOURCE_PORTS
    + NONCE_LEN
    + 4;

/// Where a [`Handshake`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the connector's nonce (listener side only).
    Nonce,
    /// Waiting for the peer's `QpInfo`.
    Info,
    /// Waiting for the peer's source ports.
    Ports,
    /// Waiting for the peer's ready word.
    Ready,
    /// Done (everything read; the outbox may still drain).
    Done,
}

/// One side's connection setup in progress.
#[derive(Debug)]
pub struct Handshake {
    stream: TcpStream,
    /// The peer's IP (with [`QpInfo::udp_port`] its UDP address).
    peer: SocketAddr,
    qpn: u32,
    phase: Phase,
    expect_nonce: Option<[u8; NONCE_LEN]>,
    outbox: Vec<u8>,
    inbox: Vec<u8>,
    until: Instant,
}

/// Whether a handshake finished.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Call again.
    Pending,
    /// QP connected; the stream is closed.
    Connected,
}

impl Handshake {
    /// Starts the side of QP `qpn` on `stream` (already non-blocking, possibly still
    /// connecting). The connector passes `Some(nonce)` as `send_nonce`; the listener
    /// passes the nonce it expects as `expect_nonce`.
    ///
    /// # Errors
    /// The QP is unknown to `worker`, or its info cannot be encoded.
    pub fn new(
        worker: &Worker,
        qpn: u32,
        stream: TcpStream,
        peer: SocketAddr,
        send_nonce: Option<[u8; NONCE_LEN]>,
        expect_nonce: Option<[u8; NONCE_LEN]>,
        until: Instant,
    ) -> Result<Handshake, String> {
        let mut outbox = Vec::new();
        if let Some(n) = send_nonce {
            outbox.extend_from_slice(&n);
        }
        let info = worker.local_info(qpn).map_err(|e| e.to_string())?;
        let info = QpInfo {
            regions: Vec::new(),
            ..info
        };
        outbox.extend_from_slice(&info.encode().map_err(|e| e.to_string())?);
        Ok(Handshake {
            stream,
            peer,
            qpn,
            phase: if expect_nonce.is_some() {
                Phase::Nonce
            } else {
                Phase::Info
            },
            expect_nonce,
            outbox,
            inbox: Vec::new(),
            until,
        })
    }

    /// QP of this side.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// One non-blocking step: write what the socket takes, read what has arrived, act
    /// on every complete message.
    ///
    /// # Errors
    /// A socket error, the peer closing early, a malformed message, a refused QP
    /// connect, or the deadline passed.
    pub fn step(&mut self, worker: &mut Worker) -> Result<Step, String> {
        self.flush()?;
        if self.phase != Phase::Done {
            let eof = self.fill()?;
            while self.parse(worker)? {}
            // The peer closes its end once it is done, right after its ready word.
            if eof && self.phase != Phase::Done {
                return Err(format!("{} closed the setup stream early", self.peer));
            }
        }
        if self.phase == Phase::Done {
            self.flush()?;
            if self.outbox.is_empty() {
                return Ok(Step::Connected);
            }
        }
        if Instant::now() > self.until {
            return Err(format!(
                "connection setup with {} did not finish in time ({:?})",
                self.peer, self.phase
            ));
        }
        Ok(Step::Pending)
    }

    fn flush(&mut self) -> Result<(), String> {
        while !self.outbox.is_empty() {
            match self.stream.write(&self.outbox) {
                Ok(0) => return Err("setup stream closed while writing".into()),
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                // Still connecting (ENOTCONN before the SYN-ACK on some kernels) or full.
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOTCONN) => {
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("setup write to {}: {e}", self.peer)),
            }
        }
        Ok(())
    }

    /// Reads what has arrived; whether the peer closed its end.
    fn fill(&mut self) -> Result<bool, String> {
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Ok(true),
                Ok(n) => {
                    if self.inbox.len() + n > MAX_INBOX {
                        return Err(format!("{} sent too many setup bytes", self.peer));
                    }
                    self.inbox.extend_from_slice(&buf[..n]);
                }
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOTCONN) =>
                {
                    return Ok(false);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("setup read from {}: {e}", self.peer)),
            }
        }
    }

    /// Acts on the first complete message of the inbox; whether there was one.
    fn parse(&mut self, worker: &mut Worker) -> Result<bool, String> {
        match self.phase {
            Phase::Nonce => {
                let Some(got) = self.take(NONCE_LEN) else {
                    return Ok(false);
                };
                if Some(got.as_slice()) != self.expect_nonce.as_ref().map(|n| &n[..]) {
                    return Err(format!("{} presented another listen handle", self.peer));
                }
                self.phase = Phase::Info;
                Ok(true)
            }
            Phase::Info => {
                if self.inbox.len() < FIXED_LEN {
                    return Ok(false);
                }
                let mut fixed = [0u8; FIXED_LEN];
                fixed.copy_from_slice(&self.inbox[..FIXED_LEN]);
                let (_, regions) = QpInfo::decode_fixed(&fixed).map_err(|e| e.to_string())?;
                let len = FIXED_LEN + REGION_LEN * regions;
                if self.inbox.len() < len {
                    return Ok(false);
                }
                let msg = self.take(len).unwrap_or_default();
                let remote = QpInfo::read_from(&mut msg.as_slice()).map_err(|e| e.to_string())?;
                let udp = SocketAddr::new(self.peer.ip(), remote.udp_port);
                let ports = worker
                    .connect(self.qpn, &remote, udp)
                    .map_err(|e| format!("connecting QP {} to {udp}: {e}", self.qpn))?;
                if ports.is_empty() || ports.len() > bootstrap::MAX_SOURCE_PORTS {
                    return Err(format!("{} EV source ports", ports.len()));
                }
                self.outbox.extend_from_slice(&bootstrap::PORTS_MAGIC);
                self.outbox
                    .extend_from_slice(&(ports.len() as u16).to_be_bytes());
                for p in ports {
                    self.outbox.extend_from_slice(&p.to_be_bytes());
                }
                self.phase = Phase::Ports;
                Ok(true)
            }
            Phase::Ports => {
                if self.inbox.len() < 6 {
                    return Ok(false);
                }
                if self.inbox[..4] != bootstrap::PORTS_MAGIC {
                    return Err(format!("{} sent no port message", self.peer));
                }
                let n = usize::from(u16::from_be_bytes([self.inbox[4], self.inbox[5]]));
                if n == 0 || n > bootstrap::MAX_SOURCE_PORTS {
                    return Err(format!("{} announced {n} source ports", self.peer));
                }
                let Some(msg) = self.take(6 + 2 * n) else {
                    return Ok(false);
                };
                let ports: Vec<u16> = msg[6..]
                    .chunks_exact(2)
                    .map(|c| u16::from_be_bytes([c[0], c[1]]))
                    .collect();
                worker
                    .set_peer_source_ports(self.qpn, &ports)
                    .map_err(|e| e.to_string())?;
                self.outbox.extend_from_slice(&bootstrap::READY);
                self.phase = Phase::Ready;
                Ok(true)
            }
            Phase::Ready => {
                let Some(w) = self.take(4) else {
                    return Ok(false);
                };
                if w != bootstrap::READY {
                    return Err(format!("{} sent no ready word", self.peer));
                }
                if !self.inbox.is_empty() {
                    return Err(format!("{} sent bytes after its ready word", self.peer));
                }
                self.phase = Phase::Done;
                Ok(false)
            }
            Phase::Done => Ok(false),
        }
    }

    /// The first `n` bytes of the inbox, removed, if that many have arrived.
    fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        if self.inbox.len() < n {
            return None;
        }
        Some(self.inbox.drain(..n).collect())
    }
}
