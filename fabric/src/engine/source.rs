//! Source validation and unguessable identifiers (docs/SECURITY.md).
//!
//! [`SourceFilter`]: a QP accepts a datagram only from the addresses its peer set up with.
//! [`Qp::connect`](super::Qp::connect) fixes the peer's IP (the IP of the peer's receive
//! socket, which is also where the peer's EV sockets send from); the bootstrap then learns
//! the source ports of the peer's EV sockets ([`super::bootstrap::exchange_ports`]) and
//! [`Qp::set_peer_source_ports`](super::Qp::set_peer_source_ports) narrows the filter to
//! them. Anything else is dropped in the engine before the transport sees it, counted by
//! reason in [`SourceDrops`], and never answered (no SACK or NACK to a third party).
//!
//! [`random_bytes`]: QPNs, initial PSNs, generations, selection seeds and region keys come
//! from the operating system's CSPRNG (`getrandom(2)`), each drawn on its own, so none
//! follows from another or from anything a packet carries.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

/// Datagrams a QP dropped because of where they came from, by reason, 64-bit, never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceDrops {
    /// Arrived before the QP was connected (no peer address known yet).
    pub before_connect: u64,
    /// From an IP other than the peer's.
    pub wrong_ip: u64,
    /// From the peer's IP but a UDP source port none of the peer's EV sockets has.
    pub wrong_port: u64,
}

impl SourceDrops {
    /// All source drops.
    pub fn total(&self) -> u64 {
        self.before_connect + self.wrong_ip + self.wrong_port
    }
}

/// Why [`SourceFilter::check`] refused a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceDrop {
    /// No peer yet.
    BeforeConnect,
    /// Another IP.
    WrongIp,
    /// The peer's IP, another port.
    WrongPort,
}

/// Which source addresses a QP accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceFilter {
    /// The peer's IPs, one per plane (canonical: an IPv4-mapped IPv6 address is kept as
    /// IPv4); empty before connect: everything is refused.
    ips: Vec<IpAddr>,
    /// The peer's EV socket source ports; `None`: not learned yet (any port of `ip`).
    ports: Option<HashSet<u16>>,
}

impl SourceFilter {
    /// Accept datagrams from `ips` (the peer's address on each of its planes; one for a
    /// peer on one plane), any port (until [`SourceFilter::set_ports`]).
    pub fn connect(&mut self, ips: &[IpAddr]) {
        self.ips = ips.iter().map(|ip| ip.to_canonical()).collect();
        self.ports = None;
    }

    /// Accept only these source ports of the peer's IPs from now on.
    pub fn set_ports(&mut self, ports: &[u16]) {
        self.ports = Some(ports.iter().copied().collect());
    }

    /// Whether the source ports are checked (learned).
    pub fn checks_ports(&self) -> bool {
        self.ports.is_some()
    }

    /// Checks a datagram's source; `check_port` false for a datapath whose source port
    /// means nothing ([`crate::datapath::Datapath::reports_source_ports`]).
    ///
    /// # Errors
    /// The [`SourceDrop`] reason.
    pub fn check(&self, from: SocketAddr, check_port: bool) -> Result<(), SourceDrop> {
        if self.ips.is_empty() {
            return Err(SourceDrop::BeforeConnect);
        }
        if !self.ips.contains(&from.ip().to_canonical()) {
            return Err(SourceDrop::WrongIp);
        }
        match &self.ports {
            Some(p) if check_port && !p.contains(&from.port()) => Err(SourceDrop::WrongPort),
            _ => Ok(()),
        }
    }
}

impl SourceDrops {
    /// Counts one drop of `why`.
    pub fn count(&mut self, why: SourceDrop) {
        match why {
            SourceDrop::BeforeConnect => self.before_connect += 1,
            SourceDrop::WrongIp => self.wrong_ip += 1,
            SourceDrop::WrongPort => self.wrong_port += 1,
        }
    }
}

/// Fills `buf` from the operating system's CSPRNG.
///
/// # Errors
/// The OS refused (no `getrandom(2)` and no `/dev/urandom`), as text.
pub fn random_bytes(buf: &mut [u8]) -> Result<(), String> {
    getrandom::fill(buf).map_err(|e| format!("OS random number generator: {e}"))
}

/// A `u64` from the operating system's CSPRNG.
///
/// # Errors
/// As [`random_bytes`].
pub fn random_u64() -> Result<u64, String> {
    let mut b = [0u8; 8];
    random_bytes(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_refuses_before_connect_then_other_ips_then_other_ports() {
        let mut f = SourceFilter::default();
        let peer: SocketAddr = "10.0.0.2:20001".parse().unwrap();
        assert_eq!(f.check(peer, true), Err(SourceDrop::BeforeConnect));
        f.connect(&["10.0.0.2".parse().unwrap()]);
        assert_eq!(f.check(peer, true), Ok(()));
        assert_eq!(f.check("10.0.0.2:9".parse().unwrap(), true), Ok(()));
        assert_eq!(
            f.check("10.0.0.3:20001".parse().unwrap(), true),
            Err(SourceDrop::WrongIp)
        );
        f.set_ports(&[20001, 20002]);
        assert!(f.checks_ports());
        assert_eq!(f.check(peer, true), Ok(()));
        assert_eq!(
            f.check("10.0.0.2:9".parse().unwrap(), true),
            Err(SourceDrop::WrongPort)
        );
        assert_eq!(f.check("10.0.0.2:9".parse().unwrap(), false), Ok(()));
        // An IPv4-mapped IPv6 source is the IPv4 peer.
        assert_eq!(
            f.check("[::ffff:10.0.0.2]:20002".parse().unwrap(), true),
            Ok(())
        );
        let mut d = SourceDrops::default();
        d.count(SourceDrop::WrongPort);
        d.count(SourceDrop::WrongIp);
        d.count(SourceDrop::WrongPort);
        assert_eq!(
            (d.before_connect, d.wrong_ip, d.wrong_port, d.total()),
            (0, 1, 2, 3)
        );
    }

    #[test]
    fn random_values_differ() {
        let a = random_u64().unwrap();
        let b = random_u64().unwrap();
        assert_ne!(a, b);
    }
}
