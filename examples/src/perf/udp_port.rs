//! The server's UDP data port, held from its start ([`Reservation`]): a second server on
//! the same port fails at once, naming the port and `--udp-port`, instead of announcing
//! the port and failing its first client's test with "Address already in use".
//!
//! The datapath binds its own receive socket for each test (`UdpConfig::bind`), so the
//! reservation, a bound UDP socket that nothing reads, lets the port go just before the
//! test's datapath binds it ([`Reservation::release`]) and takes it back when the test's
//! datapath is gone ([`Reservation::retake`]). Between the two steps of a release the
//! port is free for the few microseconds of one `close` and one `bind` on the same
//! thread.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::SocketAddr;

/// Why the port could not be held.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// Another socket has it (another `mrc-perf server`, or any program).
    #[error(
        "UDP port {port} ({addr}) is in use, by another mrc-perf server or another program: \
         give this server another data port with --udp-port PORT (its clients learn it at \
         setup)",
        port = addr.port()
    )]
    InUse {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Another failure of the socket or the bind.
    #[error("cannot bind UDP {addr} (--udp-port): {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// A UDP port held by a bound socket that nothing reads.
#[derive(Debug)]
pub struct Reservation {
    addr: SocketAddr,
    sock: Option<Socket>,
}

impl Reservation {
    /// Binds `addr` (port 0: nothing to hold, [`Reservation::none`]) the way the datapath's
    /// receive socket binds it (IPv6 sockets v6-only, no address reuse), so a clash with
    /// either shows here.
    ///
    /// # Errors
    /// [`PortError::InUse`] when another socket has it; [`PortError::Bind`] otherwise.
    pub fn take(addr: SocketAddr) -> Result<Self, PortError> {
        if addr.port() == 0 {
            return Ok(Self::none(addr));
        }
        let mut r = Reservation { addr, sock: None };
        r.retake()?;
        Ok(r)
    }

    /// Holds nothing (an ephemeral port, or a datapath without a UDP port).
    pub fn none(addr: SocketAddr) -> Self {
        Reservation { addr, sock: None }
    }

    /// The address it holds (or would).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the port is held now.
    pub fn is_held(&self) -> bool {
        self.sock.is_some()
    }

    /// Lets the port go, for the datapath that binds it next.
    pub fn release(&mut self) {
        self.sock = None;
    }

    /// Takes the port back (after a test's datapath is gone); nothing for port 0 or
    /// while held.
    ///
    /// # Errors
    /// As [`Reservation::take`]: another socket took the port meanwhile.
    pub fn retake(&mut self) -> Result<(), PortError> {
        if self.addr.port() == 0 || self.sock.is_some() {
            return Ok(());
        }
        let addr = self.addr;
        let bind = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::AddrInUse => PortError::InUse { addr },
            _ => PortError::Bind { addr, source: e },
        };
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(bind)?;
        if addr.is_ipv6() {
            s.set_only_v6(true).map_err(bind)?;
        }
        s.set_cloexec(true).map_err(bind)?;
        s.bind(&SockAddr::from(addr)).map_err(bind)?;
        self.sock = Some(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, UdpSocket};

    #[test]
    fn a_held_port_refuses_a_second_holder_and_is_lent_to_the_datapath() {
        // a free port, found by the kernel
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let mut r = Reservation::take(addr).unwrap();
        assert!(r.is_held());
        let e = Reservation::take(addr).unwrap_err();
        assert!(
            matches!(e, PortError::InUse { addr: a } if a == addr),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "UDP port {} ({addr}) is in use, by another mrc-perf server or another \
                 program: give this server another data port with --udp-port PORT (its \
                 clients learn it at setup)",
                addr.port()
            )
        );
        // a socket bound as the datapath binds gets it while it is lent
        assert!(UdpSocket::bind(addr).is_err());
        r.release();
        let datapath = UdpSocket::bind(addr).unwrap();
        assert!(matches!(r.retake(), Err(PortError::InUse { .. })));
        drop(datapath);
        r.retake().unwrap();
        assert!(r.is_held());
        assert!(UdpSocket::bind(addr).is_err());
    }

    #[test]
    fn port_zero_holds_nothing() {
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
        let mut r = Reservation::take(addr).unwrap();
        assert!(!r.is_held());
        r.retake().unwrap();
        assert!(!r.is_held());
        assert_eq!(r.addr(), addr);
    }
}
