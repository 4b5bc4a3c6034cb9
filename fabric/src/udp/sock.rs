//! Socket setup and ancillary data (cmsg) for the UDP datapath: socket options
//! (`IP_RECVTOS`, `IPV6_RECVTCLASS`, `UDP_GRO`, `IPV6_RTHDR`), the send-side cmsgs
//! (`IP_TOS` / `IPV6_TCLASS` and `UDP_SEGMENT`) and the receive-side ones (TOS/TCLASS,
//! `UDP_GRO`). Linux only; the constants are those of `ip(7)`, `ipv6(7)` and `udp(7)`.

use crate::srv6::{SrhContext, SrhRepr};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// Bytes reserved for the ancillary data of one message (two cmsgs of at most 4 bytes of
/// data each need 2 * 24 bytes on 64-bit Linux).
pub(crate) const CMSG_BYTES: usize = 64;

/// Ancillary data buffer aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct CmsgBuf(pub(crate) [u8; CMSG_BYTES]);

impl Default for CmsgBuf {
    fn default() -> Self {
        CmsgBuf([0; CMSG_BYTES])
    }
}

fn setsockopt_int(
    s: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the fd is a live socket owned by `s`; `val` outlives the call and its size is
    // passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&val as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A UDP socket of `addr`'s family, `SO_RCVBUF`/`SO_SNDBUF` at least `buf_bytes` (forced
/// above `rmem_max`/`wmem_max` when the process may), not yet bound.
/// Appends the `iovec`s of datagram `d` to `iovs`: its slot bytes, then its lent payload
/// when there is one (the kernel concatenates a message's `iovec`s, and with `UDP_SEGMENT`
/// cuts the concatenation into datagrams, so a datagram may span two). The `iovec`s point
/// into `d`: they are valid while its batch is borrowed.
pub(crate) fn push_iovecs(iovs: &mut Vec<libc::iovec>, d: crate::datapath::TxDatagram<'_>) {
    iovs.push(libc::iovec {
        iov_base: d.head.as_ptr() as *mut libc::c_void,
        iov_len: d.head.len(),
    });
    if let Some(p) = d.payload.filter(|p| !p.is_empty()) {
        iovs.push(libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        });
    }
}

pub(crate) fn udp_socket(addr: &SocketAddr, buf_bytes: usize) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(*addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_cloexec(true)?;
    if buf_bytes > 0 {
        let n = libc::c_int::try_from(buf_bytes).unwrap_or(libc::c_int::MAX);
        // SO_*BUFFORCE needs CAP_NET_ADMIN; fall back to the capped plain option.
        if setsockopt_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, n).is_err() {
            s.set_recv_buffer_size(buf_bytes)?;
        }
        if setsockopt_int(&s, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, n).is_err() {
            s.set_send_buffer_size(buf_bytes)?;
        }
    }
    Ok(s)
}

/// The receive socket: bound to `addr`, reporting the TOS/TCLASS byte of every datagram,
/// and coalescing with `UDP_GRO` when `gro`.
pub(crate) fn rx_socket(addr: &SocketAddr, gro: bool, buf_bytes: usize) -> io::Result<Socket> {
    let s = udp_socket(addr, buf_bytes)?;
    if addr.is_ipv6() {
        setsockopt_int(&s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
    } else {
        setsockopt_int(&s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
    }
    if gro {
        setsockopt_int(&s, libc::SOL_UDP, libc::UDP_GRO, 1)?;
    }
    s.bind(&SockAddr::from(*addr))?;
    Ok(s)
}

/// Sets the firewall mark of every packet the socket sends (`SO_MARK`, socket(7)); needs
/// `CAP_NET_ADMIN`.
pub(crate) fn set_mark(s: &Socket, mark: u32) -> io::Result<()> {
    // SAFETY: the fd is live; `mark` is valid for 4 bytes during the call.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&raw const mark).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the sticky routing header of an IPv6 socket (`IPV6_RTHDR`, RFC 3542 section 7;
/// Linux accepts routing type 4, the SRH, and checks it with `seg6_validate_srh`). Needs
/// `CAP_NET_RAW`.
pub(crate) fn set_sticky_rthdr(s: &Socket, srh: &[u8]) -> io::Result<()> {
    let len = libc::socklen_t::try_from(srh.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the fd is live; `srh` is valid for `len` bytes during the call.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_RTHDR,
            srh.as_ptr().cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads back the sticky routing header of an IPv6 socket (empty when none is set).
///
/// # Errors
/// The `getsockopt` error.
pub fn read_sticky_rthdr(s: &impl AsRawFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 2048];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is valid for `len` bytes, `len` is a valid in/out pointer.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_RTHDR,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(len as usize);
    Ok(buf)
}

/// The bytes of `srh` as `IPV6_RTHDR` takes them (emitted and checked in
/// [`SrhContext::Local`]; the kernel rewrites next header and segment 0, the final
/// destination, on every packet).
///
/// # Errors
/// The [`crate::srv6::SrhError`] of [`SrhRepr::emit`], as text.
pub fn srh_bytes(srh: &SrhRepr) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; srh.buffer_len()];
    srh.emit(&mut buf, SrhContext::Local)
        .map_err(|e| e.to_string())?;
    Ok(buf)
}

/// Sets the TOS (IPv4, `IP_TOS`) or traffic class (IPv6, `IPV6_TCLASS`) byte of what the
/// socket sends (ip(7), ipv6(7)).
pub(crate) fn set_traffic_class(s: &Socket, v6: bool, tos: u8) -> io::Result<()> {
    if v6 {
        setsockopt_int(
            s,
            libc::IPPROTO_IPV6,
            libc::IPV6_TCLASS,
            libc::c_int::from(tos),
        )
    } else {
        setsockopt_int(s, libc::IPPROTO_IP, libc::IP_TOS, libc::c_int::from(tos))
    }
}

/// The TOS or traffic class byte the socket has (`getsockopt`).
pub(crate) fn traffic_class(s: &Socket, v6: bool) -> io::Result<u8> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS)
    };
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid fd, out pointer and length of an int option.
    let r = unsafe { libc::getsockopt(s.as_raw_fd(), level, name, (&raw mut v).cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v as u8)
}

/// Writes the send cmsgs into `buf`: the TOS / traffic class byte `tos` (`IP_TOS` or
/// `IPV6_TCLASS`: the DSCP bits and the ECN codepoint) and, with `gso_segment_bytes`,
/// `UDP_SEGMENT`. Returns the control length to put in `msg_controllen`.
pub(crate) fn encode_tx_cmsgs(
    buf: &mut CmsgBuf,
    v6: bool,
    tos: u8,
    gso_segment_bytes: Option<u16>,
) -> usize {
    buf.0 = [0; CMSG_BYTES];
    // SAFETY: a zeroed msghdr pointing at our aligned buffer lets the CMSG_* helpers walk it;
    // CMSG_BYTES holds both cmsgs (checked by the assertion on the total below).
    unsafe {
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_control = buf.0.as_mut_ptr().cast();
        hdr.msg_controllen = CMSG_BYTES as _;
        let mut total = 0usize;
        let mut c = libc::CMSG_FIRSTHDR(&hdr);
        let (level, ty) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS)
        };
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(
            libc::CMSG_DATA(c).cast::<libc::c_int>(),
            libc::c_int::from(tos),
        );
        total += libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize;
        if let Some(seg) = gso_segment_bytes {
            c = libc::CMSG_NXTHDR(&hdr, c);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            total += libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
        }
        debug_assert!(total <= CMSG_BYTES);
        total
    }
}

/// What the receive cmsgs said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxCmsgs {
    /// The two ECN bits of the TOS / traffic class byte.
    pub ecn_bits: u8,
    /// `UDP_GRO` segment size when the receive holds coalesced datagrams.
    pub gro_segment_bytes: Option<usize>,
}

/// The datagrams of one receive of `data`: its `UDP_GRO` segments (`gro_segment_bytes`),
/// or the whole of it; an empty receive (a zero-length UDP datagram) is one empty
/// datagram, so the engine counts it (too short to name a QP) instead of nobody.
pub(crate) fn segments(
    data: &[u8],
    gro_segment_bytes: Option<usize>,
) -> impl Iterator<Item = &[u8]> {
    let seg = gro_segment_bytes.unwrap_or(data.len()).max(1);
    let empty: &[u8] = &[];
    data.is_empty()
        .then_some(empty)
        .into_iter()
        .chain(data.chunks(seg))
}

/// Reads the cmsgs of a completed `recvmsg` (`hdr.msg_controllen` as the kernel left it).
///
/// # Safety
/// `hdr.msg_control` must point at a buffer of at least `hdr.msg_controllen` bytes filled
/// by the kernel.
pub(crate) unsafe fn decode_rx_cmsgs(hdr: &libc::msghdr) -> RxCmsgs {
    let mut out = RxCmsgs::default();
    // SAFETY: per the contract, the kernel wrote well-formed cmsgs within msg_controllen;
    // CMSG_FIRSTHDR/CMSG_NXTHDR never step past it, data reads are unaligned-safe.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            let level = (*c).cmsg_level;
            let ty = (*c).cmsg_type;
            let data = libc::CMSG_DATA(c);
            let data_len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            match (level, ty) {
                (libc::IPPROTO_IP, libc::IP_TOS) if data_len >= 1 => {
                    out.ecn_bits = *data & 3;
                }
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if data_len >= 4 => {
                    out.ecn_bits = (std::ptr::read_unaligned(data.cast::<libc::c_int>()) & 3) as u8;
                }
                (libc::SOL_UDP, libc::UDP_GRO) if data_len >= 4 => {
                    let seg = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    if seg > 0 {
                        out.gro_segment_bytes = Some(seg as usize);
                    }
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    out
}

/// The address in a `sockaddr_storage` the kernel filled with `len` bytes, if it is an
/// IPv4 or IPv6 one.
pub(crate) fn sockaddr_to_std(
    ss: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: family and length say it is a sockaddr_in; storage is aligned for it.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above for sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Opens the receive socket `cfg` names (as [`rx_socket`]) and reads back the address it
/// bound (port 0: the kernel's choice), for both UDP datapaths.
///
/// # Errors
/// [`crate::datapath::DatapathError::Io`] when the socket, an option or the bind fails.
pub(crate) fn open_rx(
    cfg: &super::UdpConfig,
) -> Result<(Socket, SocketAddr), crate::datapath::DatapathError> {
    use crate::datapath::DatapathError;
    let bind = cfg.rx_bind()?;
    let rx_sock = rx_socket(&bind, cfg.gro, cfg.socket_buffer_bytes)
        .map_err(DatapathError::io("receive socket"))?;
    let mut local = rx_sock
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .ok_or_else(|| DatapathError::Io {
            what: "receive socket address",
            source: io::Error::from(io::ErrorKind::AddrNotAvailable),
        })?;
    // On several planes the socket is bound to the wildcard address: plane 0's names it.
    if let Some(&ip) = cfg.plane_ips.first() {
        local.set_ip(ip);
    }
    Ok((rx_sock, local))
}

/// The watch of the planes' ports of a datapath on two or more planes
/// ([`super::PlaneWatch`], every [`super::PLANE_WATCH_INTERVAL`]); none on one plane.
///
/// # Errors
/// [`crate::datapath::DatapathError::Io`] when the interfaces cannot be read or the
/// thread not started.
pub(crate) fn plane_watch(
    cfg: &super::UdpConfig,
) -> Result<Option<super::PlaneWatch>, crate::datapath::DatapathError> {
    if cfg.plane_ips.len() < 2 {
        return Ok(None);
    }
    super::PlaneWatch::start(cfg.plane_ips.clone(), super::PLANE_WATCH_INTERVAL)
        .map(Some)
        .map_err(crate::datapath::DatapathError::io("plane port watch"))
}

/// Wakes a datapath's wait through an eventfd it owns.
pub(crate) struct EventFdWaker {
    /// The eventfd.
    pub(crate) fd: std::os::fd::OwnedFd,
}

impl crate::datapath::Waker for EventFdWaker {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own; a failure (counter
        // overflow) only means a wake-up is pending already.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::segments;

    #[test]
    fn a_zero_length_datagram_is_one_empty_datagram_and_gro_splits_exactly() {
        // Found with a stranger's 0-byte datagram on the direct datapath
        // (tests/direct_hostile.rs): it was handed to nobody and counted nowhere.
        let none: Vec<&[u8]> = segments(&[], None).collect();
        assert_eq!(none, vec![&[][..]]);
        let none: Vec<&[u8]> = segments(&[], Some(1200)).collect();
        assert_eq!(none, vec![&[][..]]);
        let one: Vec<&[u8]> = segments(&[1, 2, 3], None).collect();
        assert_eq!(one, vec![&[1u8, 2, 3][..]]);
        let gro: Vec<&[u8]> = segments(&[1, 2, 3, 4, 5], Some(2)).collect();
        assert_eq!(gro, vec![&[1u8, 2][..], &[3, 4][..], &[5][..]]);
    }
}
