//! The payload size an endpoint's data packets may carry on its interface: the MTU of
//! the interface holding the endpoint's source address (`SIOCGIFMTU`, asked in the
//! calling thread's network namespace) less the IP, UDP and mrc headers, at most what
//! the transport and the UDP datapath take ([`MAX_MTU_PAYLOAD_BYTES`]). Loopback's
//! 65536-byte MTU gives [`MAX_MTU_PAYLOAD_BYTES`], a 1500-byte Ethernet 1416 (IPv4) or
//! 1396 (IPv6), a 9000-byte one 8916 or 8896. Kernel TCP rides the interface's MTU
//! the same way (64 KiB segments on loopback); mrc's default, 4096 bytes, is a RoCE MTU.
//!
//! Only the local interface is asked: a path whose MTU is smaller further on (a tunnel,
//! a router with a smaller link) fragments the datagrams in IP or drops them; there is no
//! path MTU discovery.

use std::ffi::CString;
use std::io;
use std::net::IpAddr;

/// Bytes of an IPv4 header without options.
pub const IPV4_HEADER_BYTES: u32 = 20;
/// Bytes of an IPv6 header without extension headers.
pub const IPV6_HEADER_BYTES: u32 = 40;
/// Bytes of a UDP header.
pub const UDP_HEADER_BYTES: u32 = 8;

/// Largest payload per packet [`payload_for_link_mtu`] chooses, bytes: the transport's
/// largest `SendConfig::mtu_payload_bytes`. Its datagram, with
/// [`mrc_transport::conn::MAX_DATA_HEADER_BYTES`] of headers and
/// [`mrc_transport::auth::AUTH_TRAILER_BYTES`] of trailer, fits one IPv4 UDP datagram
/// ([`super::MAX_GSO_BYTES`]) and the datapath's default 64 KiB receive buffers
/// (`UdpConfig::rx_buffer_bytes`).
pub const MAX_MTU_PAYLOAD_BYTES: u32 = 65_000;

/// Smallest payload per packet [`payload_for_link_mtu`] chooses, bytes: below it (a link
/// MTU under about 600 bytes) the datagrams are fragmented in IP rather than cut into
/// packets of a few bytes.
pub const MIN_MTU_PAYLOAD_BYTES: u32 = 512;

/// Payload bytes per data packet for a link of `link_mtu_bytes` (the IP packet's largest
/// size) at source address `ip`: the MTU less the IP header of `ip`'s family, the UDP
/// header, [`mrc_transport::conn::MAX_DATA_HEADER_BYTES`] and, when `authenticated`,
/// [`mrc_transport::auth::AUTH_TRAILER_BYTES`]; clamped to
/// [`MIN_MTU_PAYLOAD_BYTES`]`..=`[`MAX_MTU_PAYLOAD_BYTES`].
pub fn payload_for_link_mtu(link_mtu_bytes: u32, ip: IpAddr, authenticated: bool) -> u32 {
    let ip_header = if ip.to_canonical().is_ipv4() {
        IPV4_HEADER_BYTES
    } else {
        IPV6_HEADER_BYTES
    };
    let trailer = if authenticated {
        mrc_transport::auth::AUTH_TRAILER_BYTES as u32
    } else {
        0
    };
    link_mtu_bytes
        .saturating_sub(ip_header + UDP_HEADER_BYTES)
        .saturating_sub(mrc_transport::conn::MAX_DATA_HEADER_BYTES as u32)
        .saturating_sub(trailer)
        .clamp(MIN_MTU_PAYLOAD_BYTES, MAX_MTU_PAYLOAD_BYTES)
}

/// The MTU of interface `name` in this thread's network namespace, bytes (`SIOCGIFMTU`).
///
/// # Errors
/// `InvalidInput` for a name that does not fit `IFNAMSIZ` or holds a NUL; the OS error
/// of the socket or the `ioctl` (`ENODEV`: no such interface).
pub fn interface_mtu_bytes(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let bytes = c.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: an all-zero ifreq is valid (a name and a union of plain integers).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name of `req` and writes its ifru_mtu.
    let rc = unsafe {
        use std::os::fd::AsRawFd;
        libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the ioctl succeeded, so ifru_mtu holds the MTU.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// The interface holding `ip` in this thread's network namespace and its MTU, bytes;
/// `None` when no interface holds it (an unspecified address, one of another host).
///
/// # Errors
/// The OS error of `getifaddrs` or of [`interface_mtu_bytes`].
pub fn source_mtu_bytes(ip: IpAddr) -> io::Result<Option<(String, u32)>> {
    let ifaces = super::planewatch::interfaces()?;
    let Some(Some(name)) = super::planewatch::ports_of(&[ip], &ifaces).pop() else {
        return Ok(None);
    };
    let mtu = interface_mtu_bytes(&name)?;
    Ok(Some((name, mtu)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

    #[test]
    fn payload_is_the_link_mtu_less_headers_within_bounds() {
        // loopback: 65536 - 20 - 8 - 56 = 65452, above the transport's largest
        assert_eq!(payload_for_link_mtu(65_536, V4, false), 65_000);
        assert_eq!(payload_for_link_mtu(65_536, V6, true), 65_000);
        assert_eq!(payload_for_link_mtu(1500, V4, false), 1416);
        assert_eq!(payload_for_link_mtu(1500, V6, false), 1396);
        assert_eq!(payload_for_link_mtu(1500, V6, true), 1372);
        assert_eq!(payload_for_link_mtu(9000, V4, false), 8916);
        assert_eq!(payload_for_link_mtu(9000, V6, false), 8896);
        // an IPv4-mapped IPv6 address is IPv4 on the wire
        let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
        assert_eq!(payload_for_link_mtu(1500, mapped, false), 1416);
        // tiny or absurd MTUs
        assert_eq!(payload_for_link_mtu(0, V4, false), MIN_MTU_PAYLOAD_BYTES);
        assert_eq!(payload_for_link_mtu(576, V4, false), MIN_MTU_PAYLOAD_BYTES);
        assert_eq!(
            payload_for_link_mtu(u32::MAX, V6, true),
            MAX_MTU_PAYLOAD_BYTES
        );
        // the largest fits a UDP datagram with every header and the trailer
        let largest = MAX_MTU_PAYLOAD_BYTES as usize
            + mrc_transport::conn::MAX_DATA_HEADER_BYTES
            + mrc_transport::auth::AUTH_TRAILER_BYTES;
        assert!(largest <= super::super::MAX_GSO_BYTES);
    }

    #[test]
    fn loopback_has_its_mtu_and_unknown_names_are_errors() {
        let lo = interface_mtu_bytes("lo").unwrap();
        assert!(lo >= 1280, "lo's MTU {lo}");
        assert_eq!(source_mtu_bytes(V4).unwrap(), Some(("lo".to_string(), lo)));
        assert_eq!(
            interface_mtu_bytes("mrc-no-such0")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENODEV)
        );
        assert_eq!(
            interface_mtu_bytes("a-name-longer-than-ifnamsiz")
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            interface_mtu_bytes("l\0o").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // 192.0.2.1 (TEST-NET-1) is no address of this host, 0.0.0.0 of none
        assert_eq!(
            source_mtu_bytes("192.0.2.1".parse().unwrap()).unwrap(),
            None
        );
        assert_eq!(source_mtu_bytes("0.0.0.0".parse().unwrap()).unwrap(), None);
    }
}
