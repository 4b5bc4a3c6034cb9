//! [`UringDatapath`]: the [`Datapath`] on Linux UDP sockets driven through two io_urings,
//! one for sends (a burst is one submission, waited for) and one for receives (a fixed set
//! of `recvmsg`s kept outstanding on the receive socket, or one multishot `recvmsg` over a
//! provided buffer ring with [`UdpConfig::rx_multishot`], plus a read on an eventfd that
//! [`Waker::wake`] writes to).
//!
//! Options of the mechanics, each a [`UdpConfig`] field: multishot receive with a provided
//! buffer ring ([`UdpConfig::rx_multishot`], on by default from kernel 6.0), cooperative
//! task work ([`UdpConfig::coop_taskrun`], on by default from kernel 5.19) and zero-copy
//! sends (`IORING_OP_SENDMSG_ZC`, [`UdpConfig::tx_zerocopy`], off). On an older kernel the
//! first two fall back to what it has ([`UringDatapath::config`] says what is in effect).
//! docs/PERFORMANCE.md has what each measured on loopback, and registered files, measured
//! and left out.

use super::bufring::BufRing;
use super::evsock::{EvConn, EvSocket, EvSockets};
use super::sock::{self, CMSG_BYTES, CmsgBuf, EventFdWaker};
use super::{ConnTable, DEFAULT_RX_PORT, MAX_GSO_BYTES, MAX_GSO_SEGMENTS, PortAllocator};
use crate::datapath::{
    ConnId, Datapath, DatapathError, DatapathStats, PathMap, RxDatagram, TxBatch, TxReport, Waker,
};
use io_uring::{IoUring, cqueue, opcode, types};
use mrc_transport::Ecn;
use socket2::Socket;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// Configuration of a [`UringDatapath`].
#[derive(Clone, Debug)]
pub struct UdpConfig {
    /// Address of the receive socket. Default `127.0.0.1:4792` ([`DEFAULT_RX_PORT`]); port
    /// 0 lets the kernel choose. EV sockets bind to the same IP.
    pub bind: SocketAddr,
    /// Where EV source ports come from. Default the process-wide allocator.
    pub ports: PortAllocator,
    /// Coalesce same-size datagrams of one socket into `UDP_SEGMENT` sends. Default on.
    pub gso: bool,
    /// `UDP_GRO` on the receive socket. Default on.
    pub gro: bool,
    /// `recvmsg`s kept outstanding. Default 32.
    pub rx_slots: usize,
    /// Bytes of each receive buffer (a GRO receive holds up to 64 KiB). Default 65536.
    pub rx_buffer_bytes: usize,
    /// `SO_RCVBUF`/`SO_SNDBUF` of every socket, bytes. Default 8 MiB.
    pub socket_buffer_bytes: usize,
    /// Submission queue entries of the send ring. Default 256.
    pub tx_ring_entries: u32,
    /// The DSCP part of the IPv4 TOS / IPv6 traffic class byte of every datagram sent
    /// (`IP_TOS` / `IPV6_TCLASS` on each EV socket and in each send's cmsg); its low two
    /// bits, the ECN field, are ignored: ECN is the transport's per packet. Default 0.
    pub traffic_class: u8,
    /// Receive with one multishot `recvmsg` (`IORING_RECV_MULTISHOT`, kernel 6.0+) that
    /// takes its buffers from a provided buffer ring of [`UdpConfig::rx_ring_buffers`]
    /// buffers of `rx_buffer_bytes` (plus the room for address and cmsgs), instead of
    /// `rx_slots` single `recvmsg`s re-armed after each datagram. Default on; on a kernel
    /// older than 6.0 (no multishot `recvmsg`) [`UringDatapath::new`] falls back to the
    /// single receives (docs/PERFORMANCE.md: with [`UdpConfig::coop_taskrun`] mrc's CPU per
    /// byte 0.75-0.80x of both off on loopback, goodput 1.3x at `--burst-size 16`).
    pub rx_multishot: bool,
    /// Buffers of the provided buffer ring with [`UdpConfig::rx_multishot`]: a power of two
    /// in 1..=32768 (others are an error at [`UringDatapath::new`]). Default 64.
    pub rx_ring_buffers: u16,
    /// Send with `IORING_OP_SENDMSG_ZC` (kernel 6.1+): the kernel sends from the batch's
    /// memory instead of copying it, and reports when it is done with it (a second
    /// completion per send, waited for before `tx_burst` returns). Default off, and not
    /// for loopback: there the kernel lets go of the pages only once the local receiver
    /// has read the datagram, so each burst waits on the peer (mrc `--verify` fell from
    /// 4-7 Gb/s to 0.02-0.06, docs/PERFORMANCE.md). Meant for a NIC, where the notice comes
    /// at transmit completion (not measured here).
    pub tx_zerocopy: bool,
    /// Set up both rings with `IORING_SETUP_COOP_TASKRUN` and `IORING_SETUP_TASKRUN_FLAG`
    /// (kernel 5.19+): a datagram that arrives while the engine runs in user space no
    /// longer interrupts it (an inter-processor interrupt to run the receive's task work);
    /// the work runs at its next system call, and [`Datapath::rx_burst`] makes one when the
    /// ring flags work pending and no completion is there. Default on; where the kernel
    /// refuses the flags (`EINVAL`, before 5.19) [`UringDatapath::new`] sets the rings up
    /// without them (docs/PERFORMANCE.md: alone within the noise, with multishot the pair
    /// above).
    pub coop_taskrun: bool,
    /// This end's IP on each plane, plane 0 first: a host with one NIC port per plane
    /// (docs/PLANES.md). The EV sockets of a plane-`p` EV ([`crate::datapath::PathMap::planes`])
    /// bind to `plane_ips[p]`, so each plane's datagrams leave by its own port; with two or
    /// more, the receive socket binds the wildcard address of their family at `bind`'s
    /// port, so it takes the datagrams sent to every plane's address, and
    /// [`Datapath::local_addr`] names plane 0's. Empty or one (default empty): one plane,
    /// `bind`'s IP. [`UringDatapath::new`] refuses a mix of families, a repeated IP, more
    /// than [`MAX_PLANE_IPS`], or a `bind` IP that is neither unspecified nor
    /// `plane_ips[0]` (`DatapathError::BadPathMap`).
    pub plane_ips: Vec<IpAddr>,
    /// The network namespace the EV sockets are opened in ([`crate::netns`]): they are
    /// opened when a connection is set up, on whatever thread drives the datapath, which
    /// may live in another namespace (the libfabric provider's `FI_MRC_NETNS`: the
    /// application's thread stays in its own). The datapath itself (its receive socket) is
    /// created in the namespace by its caller ([`crate::netns::NetNs::run`]). Default
    /// `None`: the calling thread's namespace.
    pub netns: Option<Arc<crate::netns::NetNs>>,
}

/// Most planes of one UDP datapath ([`UdpConfig::plane_ips`]): 8, the planes of an 800G
/// NIC split into 8 x 100G ports, MRC's widest deployment.
pub const MAX_PLANE_IPS: usize = 8;

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), DEFAULT_RX_PORT),
            ports: PortAllocator::global().clone(),
            gso: true,
            gro: true,
            rx_slots: 32,
            rx_buffer_bytes: 65536,
            socket_buffer_bytes: 8 << 20,
            tx_ring_entries: 256,
            traffic_class: 0,
            rx_multishot: true,
            rx_ring_buffers: 64,
            tx_zerocopy: false,
            coop_taskrun: true,
            plane_ips: Vec::new(),
            netns: None,
        }
    }
}

impl UdpConfig {
    /// The defaults with the receive socket on `bind`.
    pub fn bind(bind: SocketAddr) -> Self {
        UdpConfig {
            bind,
            ..UdpConfig::default()
        }
    }

    /// This end's IP on each plane: `plane_ips`, or `local`'s IP (the receive socket's) on
    /// one plane ([`Datapath::plane_ips`] of both UDP datapaths).
    pub(crate) fn plane_ips_or(&self, local: SocketAddr) -> Vec<IpAddr> {
        if self.plane_ips.is_empty() {
            vec![local.ip()]
        } else {
            self.plane_ips.clone()
        }
    }

    /// Planes: `plane_ips.len()`, at least 1.
    pub fn planes(&self) -> usize {
        self.plane_ips.len().max(1)
    }

    /// The IP plane `plane`'s EV sockets bind to: `plane_ips[plane]`, or `bind`'s IP with
    /// no plane list; `None` past the planes.
    pub fn plane_ip(&self, plane: u8) -> Option<IpAddr> {
        if self.plane_ips.is_empty() {
            (plane == 0).then_some(self.bind.ip())
        } else {
            self.plane_ips.get(usize::from(plane)).copied()
        }
    }

    /// Where the receive socket binds: `bind`, or with two or more planes the wildcard
    /// address of their family at `bind`'s port.
    ///
    /// # Errors
    /// [`DatapathError::BadPathMap`] for a plane list [`UdpConfig::plane_ips`] refuses.
    pub fn rx_bind(&self) -> Result<SocketAddr, DatapathError> {
        let ips = &self.plane_ips;
        if ips.len() < 2 {
            if let Some(&ip) = ips.first()
                && !self.bind.ip().is_unspecified()
                && self.bind.ip() != ip
            {
                return Err(DatapathError::BadPathMap(format!(
                    "bind {} is not plane 0's address {ip}",
                    self.bind.ip()
                )));
            }
            return Ok(match ips.first() {
                Some(&ip) => SocketAddr::new(ip, self.bind.port()),
                None => self.bind,
            });
        }
        if ips.len() > MAX_PLANE_IPS {
            return Err(DatapathError::BadPathMap(format!(
                "{} plane addresses (at most {MAX_PLANE_IPS})",
                ips.len()
            )));
        }
        let v6 = ips[0].is_ipv6();
        if let Some(ip) = ips.iter().find(|ip| ip.is_ipv6() != v6) {
            return Err(DatapathError::BadPathMap(format!(
                "plane addresses of two families ({} and {ip})",
                ips[0]
            )));
        }
        for (i, ip) in ips.iter().enumerate() {
            if ip.is_unspecified() {
                return Err(DatapathError::BadPathMap(format!(
                    "plane {i}'s address {ip} is unspecified"
                )));
            }
            if ips[..i].contains(ip) {
                return Err(DatapathError::BadPathMap(format!(
                    "{ip} is the address of two planes"
                )));
            }
        }
        if !self.bind.ip().is_unspecified() && self.bind.ip() != ips[0] {
            return Err(DatapathError::BadPathMap(format!(
                "bind {} is not plane 0's address {}",
                self.bind.ip(),
                ips[0]
            )));
        }
        let any = if v6 {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        Ok(SocketAddr::new(any, self.bind.port()))
    }
}

/// One outstanding receive: its buffer, address, cmsg space and the `msghdr` pointing at
/// them. Lives in a boxed slice that never moves while the receive is in flight.
struct RxSlot {
    buf: Vec<u8>,
    iov: libc::iovec,
    addr: libc::sockaddr_storage,
    cmsg: CmsgBuf,
    hdr: libc::msghdr,
}

/// The longest datagram [`UringDatapath::build_groups`] ranks apart from shorter ones
/// (bytes; longer ones rank as this long, and a batch slot is far shorter).
const MAX_RANK_LEN: u32 = 0x00FF_FFFF;

/// One GSO group of a burst: datagrams `order[start..start+count]` on one socket.
#[derive(Clone, Copy)]
struct Group {
    fd: i32,
    /// The connection (its peer on the socket's plane is the destination).
    conn: ConnId,
    /// The connection's socket index.
    socket: usize,
    /// First datagram: an index into `order`.
    start: usize,
    /// Datagrams.
    count: usize,
    segment_bytes: usize,
    ecn: Ecn,
    /// The group's `iovec`s in `iovs` (one or two per datagram: slot bytes, lent payload).
    iov_start: usize,
    iov_count: usize,
}

const EVENTFD_USER_DATA: u64 = u64::MAX;
/// `user_data` of the multishot receive.
const MULTISHOT_USER_DATA: u64 = u64::MAX - 1;
/// `user_data` of the cancel [`Drop`] submits for an armed multishot receive.
const CANCEL_USER_DATA: u64 = u64::MAX - 2;
/// Room at the head of each provided buffer for what a multishot `recvmsg` writes before
/// the payload: `io_uring_recvmsg_out` (16 bytes), the address (`sockaddr_storage`) and the
/// cmsgs ([`CMSG_BYTES`]).
const MULTISHOT_HEAD_BYTES: usize = 16 + size_of::<libc::sockaddr_storage>() + CMSG_BYTES;
/// Buffer group id of the provided buffer ring.
const BUF_GROUP: u16 = 0;

/// The multishot receive's state: its buffer ring and the `msghdr` that tells the kernel
/// how much room address and cmsgs take at the head of each buffer.
struct Multishot {
    ring: BufRing,
    hdr: Box<libc::msghdr>,
    /// The receive is armed (a completion without `IORING_CQE_F_MORE` ends it).
    armed: bool,
}

/// The io_uring UDP datapath.
pub struct UringDatapath {
    cfg: UdpConfig,
    rx_ring: IoUring,
    tx_ring: IoUring,
    rx_sock: Socket,
    local: SocketAddr,
    slots: Box<[RxSlot]>,
    /// With [`UdpConfig::rx_multishot`]; dropped after the rings (field order).
    multishot: Option<Multishot>,
    /// The first receives were submitted ([`UringDatapath::start_rx`]).
    rx_started: bool,
    waker: Arc<EventFdWaker>,
    eventfd_buf: Box<u64>,
    /// Route of an EV: its socket index in [`EvConn::sockets`](super::evsock::EvConn).
    conns: ConnTable<EvConn, usize>,
    /// The EV sockets, shared by the connections.
    ev: EvSockets,
    // Send scratch, reused between bursts.
    order: Vec<(u64, u32, u32)>,
    groups: Vec<Group>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::msghdr>,
    cmsgs: Vec<CmsgBuf>,
    cqes: Vec<(u64, i32, u32)>,
    stats: DatapathStats,
    /// The ports of the planes, on two or more ([`super::PlaneWatch`]).
    plane_watch: Option<super::PlaneWatch>,
    /// Sends the kernel refused (for the log's rate limit).
    refused_sends: u64,
}

// SAFETY: the raw pointers inside (iovecs, msghdrs of the receive slots and send scratch)
// point only into memory this struct owns; moving the struct to another thread moves that
// memory's owner with it, and the rings are used from one thread at a time (`&mut self`).
unsafe impl Send for UringDatapath {}

impl std::fmt::Debug for UringDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringDatapath")
            .field("local", &self.local)
            .field("conns", &self.conns.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl UringDatapath {
    /// Opens the receive socket and both rings, and arms the receives.
    ///
    /// # Errors
    /// [`DatapathError::Io`] when a socket, option, bind or ring setup fails (e.g. the
    /// receive port is taken, or io_uring is not permitted).
    /// With [`UdpConfig::rx_multishot`] on a kernel older than 6.0, or
    /// [`UdpConfig::coop_taskrun`] where the kernel refuses it, the datapath runs without
    /// (logged at info; [`UringDatapath::config`] has the option off).
    pub fn new(mut cfg: UdpConfig) -> Result<Self, DatapathError> {
        if cfg.rx_multishot && !multishot_supported(kernel_release()) {
            tracing::info!("kernel older than 6.0: single recvmsgs instead of multishot");
            cfg.rx_multishot = false;
        }
        let (rx_sock, local) = sock::open_rx(&cfg)?;
        let plane_watch = sock::plane_watch(&cfg)?;
        let rx_entries = (cfg.rx_slots as u32 + 1).next_power_of_two().max(8);
        let cq_entries = if cfg.rx_multishot {
            // one completion per buffer at most in flight, plus the eventfd's
            (u32::from(cfg.rx_ring_buffers) * 2).max(rx_entries * 2)
        } else {
            rx_entries * 2
        };
        let (rx_ring, tx_ring) = match build_rings(&cfg, rx_entries, cq_entries) {
            Err(e) if cfg.coop_taskrun && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!("io_uring refused COOP_TASKRUN ({e}): rings without it");
                cfg.coop_taskrun = false;
                build_rings(&cfg, rx_entries, cq_entries)
            }
            r => r,
        }
        .map_err(DatapathError::io("io_uring setup"))?;
        // SAFETY: plain eventfd creation; the result is checked before use.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(DatapathError::Io {
                what: "eventfd",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `efd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(efd) };
        let n_slots = if cfg.rx_multishot {
            0
        } else {
            cfg.rx_slots.max(1)
        };
        let multishot = if cfg.rx_multishot {
            let buf_bytes = cfg.rx_buffer_bytes.max(2048) + MULTISHOT_HEAD_BYTES;
            let ring = BufRing::new(cfg.rx_ring_buffers, buf_bytes)
                .map_err(DatapathError::io("provided buffer ring"))?;
            // SAFETY: the ring memory (mapping) and its buffers live in `ring`, which the
            // datapath keeps until the ring is unregistered (Drop) or the rings are gone.
            unsafe {
                rx_ring
                    .submitter()
                    .register_buf_ring_with_flags(ring.ring_addr(), ring.count(), BUF_GROUP, 0)
                    .map_err(DatapathError::io("register provided buffer ring"))?;
            }
            // SAFETY: zero is a valid msghdr.
            let mut hdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_controllen = CMSG_BYTES as _;
            Some(Multishot {
                ring,
                hdr,
                armed: false,
            })
        } else {
            None
        };
        let slots: Box<[RxSlot]> = (0..n_slots)
            .map(|_| RxSlot {
                buf: vec![0u8; cfg.rx_buffer_bytes.max(2048)],
                // SAFETY: iovec, sockaddr_storage and msghdr are plain C structs for which
                // all-zero is a valid value.
                iov: unsafe { std::mem::zeroed() },
                addr: unsafe { std::mem::zeroed() },
                cmsg: CmsgBuf::default(),
                hdr: unsafe { std::mem::zeroed() },
            })
            .collect();
        let mut dp = UringDatapath {
            cfg,
            rx_ring,
            tx_ring,
            rx_sock,
            local,
            slots,
            multishot,
            rx_started: false,
            waker: Arc::new(EventFdWaker { fd }),
            eventfd_buf: Box::new(0),
            conns: ConnTable::default(),
            ev: EvSockets::default(),
            order: Vec::new(),
            groups: Vec::new(),
            iovs: Vec::new(),
            hdrs: Vec::new(),
            cmsgs: Vec::new(),
            cqes: Vec::new(),
            stats: DatapathStats::default(),
            plane_watch,
            refused_sends: 0,
        };
        for i in 0..dp.slots.len() {
            dp.arm_slot(i)?;
        }
        if dp.multishot.is_some() {
            dp.arm_multishot()?;
        }
        dp.arm_eventfd()?;
        // Submitted at the first rx_burst or wait, not here: io_uring runs a request's
        // completion work (task work) on the thread that submitted it, and the engine
        // thread that polls is often not the one that built the datapath (a multishot
        // receive armed here would wake this thread for every datagram, for good).
        Ok(dp)
    }

    /// Submits the receives armed in [`UringDatapath::new`], once, from the polling thread.
    fn start_rx(&mut self) -> Result<(), DatapathError> {
        if !self.rx_started {
            self.rx_ring
                .submit()
                .map_err(DatapathError::io("io_uring submit (receive)"))?;
            self.rx_started = true;
        }
        Ok(())
    }

    /// The configuration in effect: the one given, with [`UdpConfig::rx_multishot`] and
    /// [`UdpConfig::coop_taskrun`] off where the kernel lacks them.
    pub fn config(&self) -> &UdpConfig {
        &self.cfg
    }

    fn push_rx(&mut self, e: io_uring::squeue::Entry) -> Result<(), DatapathError> {
        // SAFETY (for the caller's entries): every entry points into `self.slots` or
        // `self.eventfd_buf`, heap memory that lives as long as the ring.
        unsafe {
            if self.rx_ring.submission().push(&e).is_err() {
                self.rx_ring
                    .submit()
                    .map_err(DatapathError::io("io_uring submit (receive)"))?;
                self.rx_ring
                    .submission()
                    .push(&e)
                    .map_err(|_| DatapathError::Io {
                        what: "io_uring receive queue full",
                        source: io::Error::from(io::ErrorKind::WouldBlock),
                    })?;
            }
        }
        Ok(())
    }

    fn arm_multishot(&mut self) -> Result<(), DatapathError> {
        let fd = self.rx_sock.as_raw_fd();
        let Some(m) = self.multishot.as_mut() else {
            return Ok(());
        };
        let hdr: *const libc::msghdr = &*m.hdr;
        let e = opcode::RecvMsgMulti::new(types::Fd(fd), hdr, BUF_GROUP).build();
        m.armed = true;
        self.push_rx(e.user_data(MULTISHOT_USER_DATA))
    }

    fn arm_slot(&mut self, i: usize) -> Result<(), DatapathError> {
        let fd = self.rx_sock.as_raw_fd();
        let s = &mut self.slots[i];
        s.iov = libc::iovec {
            iov_base: s.buf.as_mut_ptr().cast(),
            iov_len: s.buf.len(),
        };
        s.hdr.msg_name = (&mut s.addr as *mut libc::sockaddr_storage).cast();
        s.hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        s.hdr.msg_iov = &mut s.iov;
        s.hdr.msg_iovlen = 1;
        s.hdr.msg_control = s.cmsg.0.as_mut_ptr().cast();
        s.hdr.msg_controllen = CMSG_BYTES as _;
        s.hdr.msg_flags = 0;
        let e = opcode::RecvMsg::new(types::Fd(fd), &mut s.hdr)
            .build()
            .user_data(i as u64);
        self.push_rx(e)
    }

    fn arm_eventfd(&mut self) -> Result<(), DatapathError> {
        let e = opcode::Read::new(
            types::Fd(self.waker.fd.as_raw_fd()),
            (&mut *self.eventfd_buf as *mut u64).cast(),
            8,
        )
        .build()
        .user_data(EVENTFD_USER_DATA);
        self.push_rx(e)
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

    /// EV socket `socket` of `conn`; [`DatapathError::UnknownConn`] if either is unknown.
    fn ev_socket(&self, conn: ConnId, socket: usize) -> Result<&EvSocket, DatapathError> {
        self.conns
            .get(conn)
            .and_then(|c| c.sockets.get(socket))
            .and_then(|&slot| self.ev.get(slot))
            .ok_or(DatapathError::UnknownConn(conn))
    }

    /// The sticky routing header of socket `socket` of `conn` as the kernel holds it.
    ///
    /// # Errors
    /// [`DatapathError::UnknownConn`], or the `getsockopt` error.
    pub fn sticky_rthdr(&self, conn: ConnId, socket: usize) -> Result<Vec<u8>, DatapathError> {
        let s = self.ev_socket(conn, socket)?;
        sock::read_sticky_rthdr(&s.sock).map_err(DatapathError::io("getsockopt IPV6_RTHDR"))
    }

    fn build_groups(&mut self, batch: &TxBatch) -> Result<(), DatapathError> {
        self.order.clear();
        self.groups.clear();
        let order = &mut self.order;
        self.conns.resolve(batch, |i, m, _, _, &s| {
            // (socket, ECN codepoint, longest first, batch order): see below
            let len = u32::try_from(m.len).map_or(MAX_RANK_LEN, |l| l.min(MAX_RANK_LEN));
            let rank = (u32::from(m.ecn.bits()) << 24) | (MAX_RANK_LEN - len);
            order.push(((u64::from(m.conn.0) << 32) | s as u64, rank, i as u32));
        })?;
        // Per socket and ECN codepoint (a send has one), the longest datagrams first, then
        // the batch's order. A `UDP_SEGMENT` send takes segments of one size and a shorter
        // last one, so a longer datagram in the middle of a socket's run (the last packet
        // of a WRITE_WITH_IMM: 4 bytes of ImmDt longer than the rest) split the run into
        // three sends; first, it takes one send with at most one shorter datagram. Under a
        // link flapping every 100 ms on the two-plane testbed the batch order put such
        // packets in the middle of runs (7.3-9.1 datagrams a send against 9.6-9.7 without
        // the flap), and the CPU of the extra sends was goodput (docs/PLANES.md). Every
        // datagram of a batch is handed out at one `now`, and RACK lets only a later send
        // time overtake on a datapath that reorders bursts (`burst_may_reorder`).
        self.order.sort_unstable();
        let max_segs = if self.cfg.gso { MAX_GSO_SEGMENTS } else { 1 };
        let mut pos = 0;
        while pos < self.order.len() {
            let (key, _, first) = self.order[pos];
            let Some((m0, _)) = batch.get(first as usize) else {
                break;
            };
            let conn = ConnId((key >> 32) as u32);
            let sidx = (key & 0xFFFF_FFFF) as usize;
            let (fd, segs) = self
                .conns
                .get(conn)
                .and_then(|c| c.sockets.get(sidx))
                .and_then(|&slot| self.ev.get(slot))
                .map(|s| (s.sock.as_raw_fd(), s.max_gso_segments(max_segs)))
                .ok_or(DatapathError::UnknownConn(conn))?;
            let seg = m0.len;
            let mut count = 1;
            let mut bytes = seg;
            while pos + count < self.order.len() && count < segs {
                let (k, _, idx) = self.order[pos + count];
                let Some((m, _)) = batch.get(idx as usize) else {
                    break;
                };
                if k != key || m.ecn != m0.ecn || m.len > seg || bytes + m.len > MAX_GSO_BYTES {
                    break;
                }
                count += 1;
                bytes += m.len;
                if m.len < seg {
                    break; // a shorter datagram ends a GSO group
                }
            }
            self.groups.push(Group {
                fd,
                conn,
                socket: sidx,
                start: pos,
                count,
                segment_bytes: seg,
                ecn: m0.ecn,
                iov_start: 0,
                iov_count: 0,
            });
            pos += count;
        }
        Ok(())
    }
}

impl Datapath for UringDatapath {
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

    /// Yes: a batch goes out grouped per socket (one `UDP_SEGMENT` send per run).
    fn reorders_bursts(&self) -> bool {
        true
    }

    /// Yes: a lent payload is the second `iovec` of its datagram.
    fn sends_in_place(&self) -> bool {
        true
    }

    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError> {
        let mut report = TxReport::default();
        if batch.is_empty() {
            return Ok(report);
        }
        self.build_groups(batch)?;
        let v6 = self.local.is_ipv6();
        // Every vector is filled completely before any pointer into it is taken.
        self.iovs.clear();
        for g in self.groups.iter_mut() {
            g.iov_start = self.iovs.len();
            for &(_, _, idx) in &self.order[g.start..g.start + g.count] {
                if let Some((_, d)) = batch.get(idx as usize) {
                    sock::push_iovecs(&mut self.iovs, d);
                }
            }
            g.iov_count = self.iovs.len() - g.iov_start;
        }
        self.cmsgs.clear();
        self.cmsgs.resize(self.groups.len(), CmsgBuf::default());
        self.hdrs.clear();
        let dscp = self.cfg.traffic_class & !3;
        for (g, cm) in self.groups.iter().zip(self.cmsgs.iter_mut()) {
            let gso = (g.count > 1).then_some(g.segment_bytes as u16);
            let clen = sock::encode_tx_cmsgs(cm, v6, dscp | (g.ecn.bits() & 3), gso);
            // SAFETY: zero is a valid msghdr.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            // The destination: the connection's peer (build_groups resolved the
            // connection; its EvConn is not touched until this burst is reaped).
            if let Some(peer) = self.conns.get(g.conn).and_then(|c| c.peers.get(g.socket)) {
                h.msg_name = peer.as_ptr() as *mut libc::c_void;
                h.msg_namelen = peer.len();
            }
            h.msg_iov = self.iovs[g.iov_start..].as_ptr() as *mut libc::iovec;
            h.msg_iovlen = g.iov_count as _;
            h.msg_control = cm.0.as_mut_ptr().cast();
            h.msg_controllen = clen as _;
            self.hdrs.push(h);
        }
        let cap = self.tx_ring.params().sq_entries() as usize;
        let zc = self.cfg.tx_zerocopy;
        let mut next = 0;
        while next < self.groups.len() {
            let end = (next + cap).min(self.groups.len());
            for gi in next..end {
                let g = &self.groups[gi];
                let h: *const libc::msghdr = &self.hdrs[gi];
                let e = if zc {
                    opcode::SendMsgZc::new(types::Fd(g.fd), h).build()
                } else {
                    opcode::SendMsg::new(types::Fd(g.fd), h).build()
                }
                .user_data(gi as u64);
                // SAFETY: the msghdr, its iovecs, cmsgs and the datagram bytes (borrowed
                // from `batch`) all live until the completions are reaped below, before
                // this function returns.
                unsafe {
                    // Cannot fail: at most `cap` entries are pushed per round.
                    let _ = self.tx_ring.submission().push(&e);
                }
            }
            // With zero-copy, a send whose first completion has IORING_CQE_F_MORE is followed
            // by a notification (IORING_CQE_F_NOTIF) once the kernel let go of the bytes:
            // those are waited for too, since the batch is the caller's again on return.
            let mut want = end - next;
            let mut done = 0;
            while done < want {
                match self.tx_ring.submit_and_wait(want - done) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) => {
                        return Err(DatapathError::Io {
                            what: "io_uring submit (send)",
                            source: e,
                        });
                    }
                }
                for cqe in self.tx_ring.completion() {
                    done += 1;
                    if cqueue::notif(cqe.flags()) {
                        continue;
                    }
                    if cqueue::more(cqe.flags()) {
                        want += 1;
                    }
                    let g = self.groups.get(cqe.user_data() as usize).copied();
                    let n = g.map_or(0, |g| g.count as u64);
                    if cqe.result() < 0 {
                        report.errors += n;
                        // the first refusals, then one in 1024: what the kernel said
                        self.refused_sends += 1;
                        if self.refused_sends <= 5 || self.refused_sends % 1024 == 0 {
                            tracing::warn!(
                                errno = -cqe.result(),
                                datagrams = n,
                                refused_sends = self.refused_sends,
                                "a send was refused: {}",
                                io::Error::from_raw_os_error(-cqe.result())
                            );
                        }
                    } else {
                        report.datagrams += n;
                    }
                    report.send_calls += 1;
                }
            }
            next = end;
        }
        self.stats.count_tx(&report);
        Ok(report)
    }

    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError> {
        self.start_rx()?;
        let mut handed = 0;
        let mut cqes = std::mem::take(&mut self.cqes);
        while handed < max {
            cqes.clear();
            cqes.extend(
                self.rx_ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            if cqes.is_empty() && self.cfg.coop_taskrun && self.rx_ring.submission().taskrun() {
                // Completions wait in task work (IORING_SQ_TASKRUN): one enter runs it.
                self.rx_ring
                    .submit()
                    .map_err(DatapathError::io("io_uring submit (receive)"))?;
                cqes.extend(
                    self.rx_ring
                        .completion()
                        .map(|c| (c.user_data(), c.result(), c.flags())),
                );
            }
            if cqes.is_empty() {
                break;
            }
            let mut rearm = false;
            for &(ud, res, flags) in &cqes {
                if ud == EVENTFD_USER_DATA {
                    self.arm_eventfd()?;
                    continue;
                }
                if ud == MULTISHOT_USER_DATA {
                    if let Some(m) = self.multishot.as_mut() {
                        handed += multishot_cqe(m, &mut self.stats, res, flags, f);
                        rearm |= !m.armed;
                    }
                    continue;
                }
                let i = ud as usize;
                let Some(s) = self.slots.get(i) else { continue };
                if res < 0 || s.hdr.msg_flags & libc::MSG_TRUNC != 0 {
                    self.stats.rx_errors += 1;
                } else {
                    self.stats.rx_calls += 1;
                    // SAFETY: the kernel filled msg_control up to msg_controllen.
                    let cm = unsafe { sock::decode_rx_cmsgs(&s.hdr) };
                    let from = sock::sockaddr_to_std(&s.addr, s.hdr.msg_namelen);
                    let len = (res as usize).min(s.buf.len());
                    if let Some(from) = from {
                        for chunk in sock::segments(&s.buf[..len], cm.gro_segment_bytes) {
                            handed += 1;
                            self.stats.rx_datagrams += 1;
                            f(RxDatagram {
                                from,
                                ecn: Ecn::from_bits(cm.ecn_bits),
                                bytes: chunk,
                            });
                        }
                    } else {
                        self.stats.rx_errors += 1;
                    }
                }
                self.arm_slot(i)?;
            }
            if let Some(m) = self.multishot.as_ref() {
                m.ring.publish();
            }
            if rearm {
                self.arm_multishot()?;
            }
            self.rx_ring
                .submit()
                .map_err(DatapathError::io("io_uring submit (receive)"))?;
        }
        self.cqes = cqes;
        Ok(handed)
    }

    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError> {
        self.start_rx()?;
        if !self.rx_ring.completion().is_empty() {
            return Ok(());
        }
        let ts = types::Timespec::new()
            .sec(timeout_ns / 1_000_000_000)
            .nsec((timeout_ns % 1_000_000_000) as u32);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.rx_ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(DatapathError::Io {
                what: "io_uring wait",
                source: e,
            }),
        }
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

/// Handles one completion of the multishot receive: hands its datagrams to `f`, recycles
/// the buffer (published by the caller), and marks the receive unarmed when the kernel
/// ended it (no `IORING_CQE_F_MORE`: the buffer ring ran dry, `ENOBUFS`, or an error).
/// Returns the datagrams handed.
fn multishot_cqe(
    m: &mut Multishot,
    stats: &mut DatapathStats,
    res: i32,
    flags: u32,
    f: &mut dyn FnMut(RxDatagram<'_>),
) -> usize {
    if !cqueue::more(flags) {
        m.armed = false;
    }
    let bid = cqueue::buffer_select(flags);
    let mut handed = 0;
    if res < 0 {
        // ENOBUFS: every buffer was taken; the datagrams wait in the socket until the
        // receive is armed again (not a loss). Others are errors.
        if res != -libc::ENOBUFS {
            stats.rx_errors += 1;
        }
    } else if let Some(buf) = bid.and_then(|b| m.ring.buf(b)) {
        let buf = &buf[..(res as usize).min(buf.len())];
        match types::RecvMsgOut::parse(buf, &m.hdr) {
            Ok(out) if !out.is_payload_truncated() && !out.is_control_data_truncated() => {
                stats.rx_calls += 1;
                // The cmsgs as a msghdr that decode_rx_cmsgs can walk.
                let ctl = out.control_data();
                // SAFETY: zero is a valid msghdr.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_control = ctl.as_ptr() as *mut libc::c_void;
                h.msg_controllen = ctl.len() as _;
                // SAFETY: `ctl` holds the cmsgs the kernel wrote, `msg_controllen` long.
                let cm = unsafe { sock::decode_rx_cmsgs(&h) };
                // SAFETY: zero is a valid sockaddr_storage; at most its size is copied in.
                let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
                let name = out.name_data();
                let n = name.len().min(size_of::<libc::sockaddr_storage>());
                // SAFETY: `n` bytes fit both the source slice and `ss`.
                unsafe {
                    std::ptr::copy_nonoverlapping(name.as_ptr(), (&raw mut ss).cast::<u8>(), n);
                }
                let from = sock::sockaddr_to_std(&ss, out.incoming_name_len());
                let data = out.payload_data();
                if let Some(from) = from {
                    for chunk in sock::segments(data, cm.gro_segment_bytes) {
                        handed += 1;
                        stats.rx_datagrams += 1;
                        f(RxDatagram {
                            from,
                            ecn: Ecn::from_bits(cm.ecn_bits),
                            bytes: chunk,
                        });
                    }
                } else {
                    stats.rx_errors += 1;
                }
            }
            _ => stats.rx_errors += 1,
        }
    } else {
        stats.rx_errors += 1;
    }
    if let Some(b) = bid {
        m.ring.recycle(b);
    }
    handed
}

/// The receive and send rings of `cfg` (cooperative task work on both with
/// [`UdpConfig::coop_taskrun`]; the task-run flag on the receive ring, which
/// [`Datapath::rx_burst`] reads).
fn build_rings(
    cfg: &UdpConfig,
    rx_entries: u32,
    cq_entries: u32,
) -> io::Result<(IoUring, IoUring)> {
    let mut rx_builder = IoUring::builder();
    rx_builder.setup_cqsize(cq_entries);
    let mut tx_builder = IoUring::builder();
    if cfg.coop_taskrun {
        rx_builder.setup_coop_taskrun().setup_taskrun_flag();
        tx_builder.setup_coop_taskrun();
    }
    Ok((
        rx_builder.build(rx_entries)?,
        tx_builder.build(cfg.tx_ring_entries.max(8))?,
    ))
}

/// The running kernel's release as (major, minor), from `uname(2)`; `None` when it does
/// not read as `MAJOR.MINOR...`.
fn kernel_release() -> Option<(u32, u32)> {
    // SAFETY: zero is a valid utsname; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    parse_release(&String::from_utf8_lossy(&bytes))
}

/// (major, minor) of a kernel release string such as `6.18.44-fc` or `5.15.0`; `None`
/// when it does not start with two dot-separated numbers.
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether a kernel of `release` has multishot `recvmsg` (`IORING_RECV_MULTISHOT`, Linux
/// 6.0); an unknown release is taken not to.
fn multishot_supported(release: Option<(u32, u32)>) -> bool {
    release.is_some_and(|r| r >= (6, 0))
}

impl Drop for UringDatapath {
    /// Completes every outstanding receive before the buffers are freed: the receive
    /// socket is shut down (pending `recvmsg`s complete at once), an armed multishot
    /// receive cancelled (`IORING_OP_ASYNC_CANCEL`: a shut-down UDP socket does not end
    /// it, and while it is pending it holds the socket, so its port, open) and the eventfd
    /// written (its read completes); then the completions are reaped, for at most about
    /// 1 s.
    fn drop(&mut self) {
        if !self.rx_started {
            return; // nothing was submitted: no receive holds a buffer
        }
        let _ = self.rx_sock.shutdown(std::net::Shutdown::Both);
        self.waker.wake();
        let armed = self.multishot.as_ref().is_some_and(|m| m.armed);
        let mut outstanding = self.slots.len() + 1 + usize::from(armed);
        if armed {
            let cancel = opcode::AsyncCancel::new(MULTISHOT_USER_DATA)
                .build()
                .user_data(CANCEL_USER_DATA);
            // The cancel's own completion is waited for too (it names no buffer).
            if self.push_rx(cancel).is_ok() {
                outstanding += 1;
            }
        }
        let mut rounds = 0;
        while outstanding > 0 && rounds < 100 {
            rounds += 1;
            let ts = types::Timespec::new().nsec(10_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.rx_ring.submitter().submit_with_args(1, &args);
            // A multishot completion with IORING_CQE_F_MORE is not its last one.
            let done = self
                .rx_ring
                .completion()
                .filter(|c| !cqueue::more(c.flags()))
                .count();
            outstanding = outstanding.saturating_sub(done);
        }
        if self.multishot.is_some() {
            let _ = self.rx_ring.submitter().unregister_buf_ring(BUF_GROUP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_release_gates_multishot_at_6_0() {
        assert_eq!(parse_release("6.18.44-fc"), Some((6, 18)));
        assert_eq!(parse_release("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(parse_release("6.0-rc1"), Some((6, 0)));
        assert_eq!(parse_release("6"), None);
        assert_eq!(parse_release("x.1"), None);
        assert_eq!(parse_release(""), None);
        assert!(multishot_supported(Some((6, 0))));
        assert!(multishot_supported(Some((7, 1))));
        assert!(!multishot_supported(Some((5, 19))));
        assert!(!multishot_supported(None));
        // this machine's kernel reads as a release
        assert!(kernel_release().is_some());
    }

    /// A datapath whose receives were submitted lets go of its receive port when dropped:
    /// a socket can bind the same address at once. With multishot receive the drop
    /// cancels the multishot `recvmsg` (a shut-down UDP socket does not end it; without
    /// the cancel the drop waited its full second and the pending receive kept the port).
    #[test]
    fn a_dropped_datapath_frees_its_receive_port_at_once() {
        for multishot in [false, true] {
            let mut cfg = UdpConfig::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
            cfg.rx_multishot = multishot;
            let mut dp = UringDatapath::new(cfg).unwrap();
            let addr = dp.local_addr();
            // submits the receives (nothing has arrived: none is handed)
            assert_eq!(dp.rx_burst(8, &mut |_| {}).unwrap(), 0);
            assert!(dp.rx_started);
            assert_eq!(
                dp.multishot.is_some(),
                multishot && dp.config().rx_multishot
            );
            drop(dp);
            let again = std::net::UdpSocket::bind(addr);
            assert!(again.is_ok(), "multishot {multishot}: {again:?}");
        }
    }

    /// The defaults ask for multishot and cooperative task work; a datapath built from
    /// them keeps both on this kernel when it is 6.0 or newer (and says so in `config`).
    #[test]
    fn defaults_ask_for_multishot_and_coop_and_config_says_what_runs() {
        let d = UdpConfig::default();
        assert!(d.rx_multishot && d.coop_taskrun && !d.tx_zerocopy);
        let dp = UringDatapath::new(UdpConfig::bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            0,
        )))
        .unwrap();
        let new_enough = multishot_supported(kernel_release());
        assert_eq!(dp.config().rx_multishot, new_enough);
        assert_eq!(dp.multishot.is_some(), new_enough);
        assert_eq!(dp.slots.len(), if new_enough { 0 } else { 32 });
        if new_enough {
            // 6.0 is past 5.19, which has COOP_TASKRUN
            assert!(dp.config().coop_taskrun);
        }
    }
}
