//! [`DirectDatapath`]: the [`Datapath`] on the UDP sockets of [`super::UringDatapath`]
//! (the same receive socket options, the same shared EV sockets, the same ECN/TOS and GSO
//! cmsgs) driven through plain non-blocking system calls instead of io_uring: a burst is
//! one `sendmsg(MSG_DONTWAIT)` per run of datagrams, a receive pass is `recvmmsg
//! (MSG_DONTWAIT)` until the socket is empty, and [`Datapath::wait`] is a `ppoll` on the
//! receive socket and an eventfd. Made for progress on the caller's thread
//! ([`crate::engine::Worker`]) at low load, where latency is what counts:
//!
//! - a `recvmsg` armed in io_uring completes through task work that runs only when the
//!   task next enters the kernel, so every poll of an idle ring is an `io_uring_enter`,
//!   and a datagram that arrives costs another; a non-blocking `recvmmsg` that finds the
//!   datagram queued returns it in the one call that looks;
//! - a send is one system call that returns when the datagram is queued (on loopback,
//!   when the receiver's softirq has queued it on the peer socket), with no submission and
//!   completion ring in between.
//!
//! Sends keep the batch's order: only consecutive datagrams of one socket with the same
//! length and ECN share a `UDP_SEGMENT` send, so [`Datapath::reorders_bursts`] is false.
//! A datagram the kernel refuses (`EAGAIN` on a full send buffer, `ECONNREFUSED` from a
//! pending ICMP error, ...) is counted in [`TxReport::errors`]; the transport recovers it
//! as a loss. [`DirectCounters`] count the system calls, so a test can check the
//! mechanism exactly.

use super::evsock::{EvConn, EvSocket, EvSockets};
use super::sock::{self, CMSG_BYTES, CmsgBuf, EventFdWaker, push_iovecs};
use super::{ConnTable, MAX_GSO_BYTES, MAX_GSO_SEGMENTS, UdpConfig};
use crate::datapath::{
    ConnId, Datapath, DatapathError, DatapathStats, PathMap, RxDatagram, TxBatch, TxReport, Waker,
};
use mrc_transport::Ecn;
use socket2::{SockAddr, Socket};
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// System calls a [`DirectDatapath`] made, 64-bit, never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectCounters {
    /// `sendmsg` calls (each one datagram, or one `UDP_SEGMENT` group).
    pub sendmsg_calls: u64,
    /// `recvmmsg` calls that returned at least one message.
    pub recvmmsg_calls: u64,
    /// `recvmmsg` calls that found the socket empty (`EAGAIN`): the cost of a busy poll.
    pub empty_polls: u64,
    /// `ppoll` calls of [`Datapath::wait`].
    pub ppoll_calls: u64,
}

/// One receive buffer of the `recvmmsg` vector, with its address and cmsg space.
struct RxSlot {
    buf: Vec<u8>,
    addr: libc::sockaddr_storage,
    cmsg: CmsgBuf,
}

/// The UDP datapath on plain non-blocking system calls.
pub struct DirectDatapath {
    cfg: UdpConfig,
    rx_sock: Socket,
    local: SocketAddr,
    slots: Box<[RxSlot]>,
    /// The `recvmmsg` vector: its `iovec`s and headers, rebuilt before each call.
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    waker: Arc<EventFdWaker>,
    /// Route of an EV: its socket index in [`EvConn::sockets`](super::evsock::EvConn).
    conns: ConnTable<EvConn, usize>,
    /// The EV sockets, shared by the connections.
    ev: EvSockets,
    /// Send scratch: the iovecs of one group, the socket and connection of each datagram.
    tx_iovs: Vec<libc::iovec>,
    tx_route: Vec<(i32, ConnId, usize, bool)>,
    stats: DatapathStats,
    counters: DirectCounters,
    /// The ports of the planes, on two or more ([`super::PlaneWatch`]).
    plane_watch: Option<super::PlaneWatch>,
}

// SAFETY: the raw pointers inside (iovecs and headers of the receive vector, rebuilt
// before each call, and the send scratch) point only into memory this struct owns or
// into a batch borrowed for one call; the struct is used from one thread at a time.
unsafe impl Send for DirectDatapath {}

impl std::fmt::Debug for DirectDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectDatapath")
            .field("local", &self.local)
            .field("conns", &self.conns.len())
            .field("stats", &self.stats)
            .field("counters", &self.counters)
            .finish()
    }
}

impl DirectDatapath {
    /// Opens the receive socket (as [`super::UringDatapath::new`] does: `IP_RECVTOS` /
    /// `IPV6_RECVTCLASS`, `UDP_GRO` when `cfg.gro`, buffers of
    /// `cfg.socket_buffer_bytes`) and the waker's eventfd. `cfg.rx_slots` is the
    /// `recvmmsg` vector length (messages per call), `cfg.rx_buffer_bytes` the size of
    /// each of its buffers; `cfg.tx_ring_entries` is not used.
    ///
    /// # Errors
    /// [`DatapathError::Io`] when a socket, option, bind or the eventfd fails (e.g. the
    /// receive port is taken).
    pub fn new(cfg: UdpConfig) -> Result<Self, DatapathError> {
        let (rx_sock, local) = sock::open_rx(&cfg)?;
        let plane_watch = sock::plane_watch(&cfg)?;
        // SAFETY: plain eventfd creation; the result is checked before use.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(DatapathError::Io {
                what: "eventfd",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `efd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(efd) };
        let n = cfg.rx_slots.clamp(1, 1024);
        let slots: Box<[RxSlot]> = (0..n)
            .map(|_| RxSlot {
                buf: vec![0u8; cfg.rx_buffer_bytes.max(2048)],
                // SAFETY: sockaddr_storage is a plain C struct; all-zero is valid.
                addr: unsafe { std::mem::zeroed() },
                cmsg: CmsgBuf::default(),
            })
            .collect();
        Ok(DirectDatapath {
            cfg,
            rx_sock,
            local,
            slots,
            iovs: Vec::with_capacity(n),
            msgs: Vec::with_capacity(n),
            waker: Arc::new(EventFdWaker { fd }),
            conns: ConnTable::default(),
            ev: EvSockets::default(),
            tx_iovs: Vec::with_capacity(MAX_GSO_SEGMENTS),
            tx_route: Vec::new(),
            stats: DatapathStats::default(),
            counters: DirectCounters::default(),
            plane_watch,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &UdpConfig {
        &self.cfg
    }

    /// The system calls made so far.
    pub fn counters(&self) -> DirectCounters {
        self.counters
    }

    /// The traffic class (IPv6) or TOS (IPv4) byte socket `socket` of `conn` has, as the
    /// kernel holds it (`getsockopt`).
    ///
    /// # Errors
    /// [`DatapathError::UnknownConn`], or the `getsockopt` error.
    pub fn socket_traffic_class(&self, conn: ConnId, socket: usize) -> Result<u8, DatapathError> {
        let s = self.ev_socket(conn, socket)?;
        sock::traffic_class(&s.sock, self.local.is_ipv6())
            .map_err(DatapathError::io("getsockopt IP_TOS / IPV6_TCLASS"))
    }

    fn ev_socket(&self, conn: ConnId, socket: usize) -> Result<&EvSocket, DatapathError> {
        self.conns
            .get(conn)
            .and_then(|c| c.sockets.get(socket))
            .and_then(|&slot| self.ev.get(slot))
            .ok_or(DatapathError::UnknownConn(conn))
    }

    /// Sends datagrams `idx` (consecutive in the batch, one socket, one ECN, each but the
    /// last of the same length) in one `sendmsg` from `fd` to `peer`; returns whether the
    /// kernel took them.
    fn send_group(
        &mut self,
        fd: i32,
        peer: &SockAddr,
        batch: &TxBatch,
        idx: std::ops::Range<usize>,
        ecn: Ecn,
        segment_bytes: usize,
    ) -> bool {
        self.tx_iovs.clear();
        for i in idx.clone() {
            if let Some((_, d)) = batch.get(i) {
                push_iovecs(&mut self.tx_iovs, d);
            }
        }
        let mut cm = CmsgBuf::default();
        let gso = (idx.len() > 1).then_some(segment_bytes as u16);
        let dscp = self.cfg.traffic_class & !3;
        let clen =
            sock::encode_tx_cmsgs(&mut cm, self.local.is_ipv6(), dscp | (ecn.bits() & 3), gso);
        // SAFETY: zero is a valid msghdr.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_name = peer.as_ptr() as *mut libc::c_void;
        h.msg_namelen = peer.len();
        h.msg_iov = self.tx_iovs.as_mut_ptr();
        h.msg_iovlen = self.tx_iovs.len() as _;
        h.msg_control = cm.0.as_mut_ptr().cast();
        h.msg_controllen = clen as _;
        loop {
            self.counters.sendmsg_calls += 1;
            // SAFETY: the header, its iovecs (pointing into `batch`, borrowed for this
            // call), the cmsg buffer and the peer address all outlive the call.
            let r = unsafe { libc::sendmsg(fd, &h, libc::MSG_DONTWAIT) };
            if r >= 0 {
                return true;
            }
            if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }
    /// Resolves every datagram of `batch` into `route` (a batch naming an unknown
    /// connection or EV sends nothing), then sends it run by run, counting into `report`.
    fn send_resolved(
        &mut self,
        batch: &TxBatch,
        route: &mut Vec<(i32, ConnId, usize, bool)>,
        report: &mut TxReport,
    ) -> Result<(), DatapathError> {
        {
            let ev = &self.ev;
            let mut bad = None;
            self.conns.resolve(batch, |_, m, _, c, &s| {
                match c.sockets.get(s).and_then(|&slot| ev.get(slot)) {
                    Some(es) => route.push((es.sock.as_raw_fd(), m.conn, s, es.gso_ok())),
                    None => bad = Some(m.conn),
                }
            })?;
            if let Some(conn) = bad {
                return Err(DatapathError::UnknownConn(conn));
            }
        }
        let max_segs = if self.cfg.gso { MAX_GSO_SEGMENTS } else { 1 };
        let mut pos = 0;
        while pos < route.len() {
            let Some((m0, _)) = batch.get(pos) else { break };
            let (fd, conn, socket, gso_ok) = route[pos];
            let segs = if gso_ok { max_segs } else { 1 };
            let seg = m0.len;
            let (mut count, mut bytes) = (1, seg);
            while pos + count < route.len() && count < segs {
                let Some((m, _)) = batch.get(pos + count) else {
                    break;
                };
                if route[pos + count] != (fd, conn, socket, gso_ok)
                    || m.ecn != m0.ecn
                    || m.len > seg
                    || bytes + m.len > MAX_GSO_BYTES
                {
                    break;
                }
                count += 1;
                bytes += m.len;
                if m.len < seg {
                    break; // a shorter datagram ends a GSO group
                }
            }
            let Some(peer) = self
                .conns
                .get(conn)
                .and_then(|c| c.peers.get(socket).cloned())
            else {
                return Err(DatapathError::UnknownConn(conn));
            };
            if self.send_group(fd, &peer, batch, pos..pos + count, m0.ecn, seg) {
                report.datagrams += count as u64;
            } else {
                report.errors += count as u64;
            }
            report.send_calls += 1;
            pos += count;
        }
        Ok(())
    }
}

impl Datapath for DirectDatapath {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn planes_up(&self) -> u32 {
        self.plane_watch.as_ref().map_or(u32::MAX, |w| w.up_mask())
    }

    fn plane_ips(&self) -> Vec<IpAddr> {
        self.cfg.plane_ips_or(self.local)
    }

    fn open_conn(&mut self, peer: SocketAddr, paths: &PathMap) -> Result<ConnId, DatapathError> {
        let c = self.ev.open(self.local, &self.cfg, peer, paths)?;
        Ok(self.conns.insert(c, paths.socket_of()))
    }

    /// Forgets the connection; each EV socket it used closes once no other connection
    /// uses it.
    fn close_conn(&mut self, conn: ConnId) {
        let slots = self.conns.get(conn).map(|c| c.sockets.clone());
        self.conns.remove(conn);
        self.ev.close(&slots.unwrap_or_default());
    }

    fn source_ports(&self, conn: ConnId) -> Option<Vec<u16>> {
        self.ev.ports(self.conns.get(conn)?)
    }

    /// Yes: a lent payload is the second `iovec` of its datagram.
    fn sends_in_place(&self) -> bool {
        true
    }

    /// Sends in the batch's order: a run of consecutive datagrams of one socket with one
    /// ECN and one length (the last may be shorter) is one `UDP_SEGMENT` send (with
    /// `cfg.gso`), every other datagram its own `sendmsg`.
    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError> {
        let mut report = TxReport::default();
        let mut route = std::mem::take(&mut self.tx_route);
        route.clear();
        let r = self.send_resolved(batch, &mut route, &mut report);
        self.tx_route = route;
        r?;
        self.stats.count_tx(&report);
        Ok(report)
    }

    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError> {
        let fd = self.rx_sock.as_raw_fd();
        let mut handed = 0;
        while handed < max {
            let n = self.slots.len();
            self.iovs.clear();
            for s in self.slots.iter_mut() {
                self.iovs.push(libc::iovec {
                    iov_base: s.buf.as_mut_ptr().cast(),
                    iov_len: s.buf.len(),
                });
            }
            self.msgs.clear();
            for (s, iov) in self.slots.iter_mut().zip(self.iovs.iter_mut()) {
                // SAFETY: zero is a valid mmsghdr.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = (&mut s.addr as *mut libc::sockaddr_storage).cast();
                m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_control = s.cmsg.0.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = CMSG_BYTES as _;
                self.msgs.push(m);
            }
            // SAFETY: `msgs` holds `n` headers whose buffers, addresses and cmsg spaces
            // live in `self.slots` and `self.iovs`, untouched until the call returns.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    self.msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => {
                        self.counters.empty_polls += 1;
                        break;
                    }
                    Some(libc::EINTR) => continue,
                    // A pending ICMP error on the receive socket is reported once; the
                    // next call reads on.
                    Some(libc::ECONNREFUSED)
                    | Some(libc::EHOSTUNREACH)
                    | Some(libc::ENETUNREACH) => {
                        self.stats.rx_errors += 1;
                        continue;
                    }
                    _ => {
                        return Err(DatapathError::Io {
                            what: "recvmmsg",
                            source: e,
                        });
                    }
                }
            }
            self.counters.recvmmsg_calls += 1;
            let got = (r as usize).min(n);
            for (m, s) in self.msgs[..got].iter().zip(self.slots.iter()) {
                if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                    self.stats.rx_errors += 1;
                    continue;
                }
                self.stats.rx_calls += 1;
                // SAFETY: the kernel filled msg_control up to msg_controllen.
                let cm = unsafe { sock::decode_rx_cmsgs(&m.msg_hdr) };
                let Some(from) = sock::sockaddr_to_std(&s.addr, m.msg_hdr.msg_namelen) else {
                    self.stats.rx_errors += 1;
                    continue;
                };
                let len = (m.msg_len as usize).min(s.buf.len());
                for chunk in sock::segments(&s.buf[..len], cm.gro_segment_bytes) {
                    handed += 1;
                    self.stats.rx_datagrams += 1;
                    f(RxDatagram {
                        from,
                        ecn: Ecn::from_bits(cm.ecn_bits),
                        bytes: chunk,
                    });
                }
            }
            if got < n {
                break; // the socket is empty: no need for a call to find out
            }
        }
        Ok(handed)
    }

    /// `ppoll`s the receive socket and the waker's eventfd for at most `timeout_ns`
    /// (clearing the eventfd when it fired).
    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError> {
        let mut fds = [
            libc::pollfd {
                fd: self.rx_sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.waker.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000).min(i64::MAX as u64) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        self.counters.ppoll_calls += 1;
        // SAFETY: two live pollfds, a valid timespec, no signal mask.
        let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(());
            }
            return Err(DatapathError::Io {
                what: "ppoll",
                source: e,
            });
        }
        if fds[1].revents & libc::POLLIN != 0 {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
            unsafe {
                libc::read(self.waker.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
            }
        }
        Ok(())
    }

    fn waker(&self) -> Arc<dyn Waker> {
        self.waker.clone()
    }

    /// The shared EV sockets open: one per socket index (and sticky SRH or mark) in use.
    fn ev_sockets(&self) -> usize {
        self.ev.len()
    }

    fn stats(&self) -> DatapathStats {
        self.stats
    }
}
