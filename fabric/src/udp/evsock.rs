//! The EV sockets of a UDP datapath ([`super::UringDatapath`], [`super::DirectDatapath`]),
//! shared by its connections: one unconnected socket per socket index and sticky options
//! ([`SockKey`]), bound to a leased source port, naming the peer in each `sendmsg`, so one
//! source port carries that EV to every peer (the 5-tuple still differs by destination).
//! A socket is opened by the first connection that needs it and closed (its port
//! returned) when the last one using it closes.

use super::ports::PortLease;
use super::{UdpConfig, sock};
use crate::datapath::{DatapathError, PathMap};
use socket2::{SockAddr, Socket};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// One EV socket and its users.
pub(crate) struct EvSocket {
    /// The socket (unconnected, bound to `lease`'s port).
    pub(crate) sock: Socket,
    /// Its source port.
    pub(crate) lease: PortLease,
    key: SockKey,
    /// Connections using it; it closes (and its port returns) at 0.
    refs: usize,
}

impl EvSocket {
    /// Whether this socket's datagrams may share a `UDP_SEGMENT` send: not with a sticky
    /// routing header. The kernel offloads the UDP checksum only for a packet without
    /// IPv6 extension headers, and a GSO send needs the offload (`udp_v6_send_skb`
    /// answers `EIO` otherwise: Linux 6.1's SRv6 testbed in the lab refused 2784 of 9952
    /// sends with `--srv6-via socket`).
    pub(crate) fn gso_ok(&self) -> bool {
        self.key.srh.is_none()
    }

    /// The most datagrams of one `UDP_SEGMENT` send on this socket: `max`, or 1 where
    /// [`EvSocket::gso_ok`] is false.
    pub(crate) fn max_gso_segments(&self, max: usize) -> usize {
        if self.gso_ok() { max } else { 1 }
    }
}

/// What makes two connections' socket `index` the same socket: the index (the source
/// port a peer's filter expects at that position), the plane's local IP it binds, and the
/// sticky SRH and mark.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SockKey {
    index: usize,
    ip: IpAddr,
    srh: Option<Vec<u8>>,
    mark: Option<u32>,
}

/// A connection's destinations and sockets.
pub(crate) struct EvConn {
    /// Per socket index of the connection: the peer's receive socket on the socket's
    /// plane, as each of its `sendmsg`s names it.
    pub(crate) peers: Vec<SockAddr>,
    /// Per socket index of the connection: its slot in the [`EvSockets`].
    pub(crate) sockets: Vec<usize>,
}

/// The datapath's EV sockets, by slot.
#[derive(Default)]
pub(crate) struct EvSockets {
    socks: Vec<Option<EvSocket>>,
    slots: HashMap<SockKey, usize>,
}

impl EvSockets {
    /// The socket in `slot`.
    pub(crate) fn get(&self, slot: usize) -> Option<&EvSocket> {
        self.socks.get(slot)?.as_ref()
    }

    /// Sockets open.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The sockets connection `paths` to `peer` needs (opened where no connection uses
    /// them yet): each on its plane's IP ([`UdpConfig::plane_ip`]; `local`'s, the receive
    /// socket's, with one plane) and sending to the peer's address on that plane
    /// ([`PathMap::peer_on`]), with `cfg`'s buffers, ports and traffic class.
    ///
    /// # Errors
    /// [`DatapathError::BadPathMap`] (an SRH on IPv4 or one that does not emit, an EV on a
    /// plane this datapath lacks), a port or socket error (nothing stays acquired then).
    pub(crate) fn open(
        &mut self,
        local: SocketAddr,
        cfg: &UdpConfig,
        peer: SocketAddr,
        paths: &PathMap,
    ) -> Result<EvConn, DatapathError> {
        paths.check_peer(local, peer)?;
        if !paths.srh.is_empty() && !peer.is_ipv6() {
            return Err(DatapathError::BadPathMap("an SRH needs IPv6".into()));
        }
        let srh_bytes: Vec<Vec<u8>> = paths
            .srh
            .iter()
            .map(sock::srh_bytes)
            .collect::<Result<_, _>>()
            .map_err(DatapathError::BadPathMap)?;
        let socket_planes = paths.socket_planes();
        let mut ips = Vec::with_capacity(socket_planes.len());
        let mut peers = Vec::with_capacity(socket_planes.len());
        for &plane in &socket_planes {
            let ip = if cfg.plane_ips.is_empty() && plane == 0 {
                local.ip()
            } else {
                cfg.plane_ip(plane).ok_or_else(|| {
                    DatapathError::BadPathMap(format!(
                        "an EV on plane {plane}, and this end has {} plane(s)",
                        cfg.planes()
                    ))
                })?
            };
            ips.push(ip);
            peers.push(SockAddr::from(paths.peer_on(plane, peer)));
        }
        let mut sockets = Vec::with_capacity(socket_planes.len());
        for (index, &ip) in ips.iter().enumerate() {
            let srh = (!srh_bytes.is_empty()).then(|| srh_bytes[index % srh_bytes.len()].clone());
            let mark = (!paths.marks.is_empty()).then(|| paths.marks[index % paths.marks.len()]);
            match self.acquire(
                cfg,
                SockKey {
                    index,
                    ip,
                    srh,
                    mark,
                },
            ) {
                Ok(slot) => sockets.push(slot),
                Err(e) => {
                    self.close(&sockets);
                    return Err(e);
                }
            }
        }
        Ok(EvConn { peers, sockets })
    }

    /// One user less of each socket in `slots`; each closes at none.
    pub(crate) fn close(&mut self, slots: &[usize]) {
        for &slot in slots {
            self.release(slot);
        }
    }

    /// The source port of each of `c`'s sockets.
    pub(crate) fn ports(&self, c: &EvConn) -> Option<Vec<u16>> {
        c.sockets
            .iter()
            .map(|&slot| Some(self.get(slot)?.lease.port()))
            .collect()
    }

    /// Opens (unconnected) the EV socket of `key`, on `key.ip`.
    fn open_socket(cfg: &UdpConfig, key: SockKey) -> Result<EvSocket, DatapathError> {
        let ip = key.ip;
        let buf_bytes = cfg.socket_buffer_bytes;
        let alloc = || {
            cfg.ports.alloc_with(|port| {
                let addr = SocketAddr::new(ip, port);
                let s = sock::udp_socket(&addr, buf_bytes)?;
                s.bind(&SockAddr::from(addr))?;
                Ok(s)
            })
        };
        let (lease, sock) = match &cfg.netns {
            None => alloc()?,
            // in the namespace, on a thread of its own
            Some(ns) => ns.run(alloc).map_err(|e| DatapathError::Io {
                what: "EV socket in a network namespace",
                source: std::io::Error::other(e),
            })??,
        };
        if let Some(srh) = key.srh.as_deref() {
            sock::set_sticky_rthdr(&sock, srh).map_err(DatapathError::io("IPV6_RTHDR"))?;
        }
        if let Some(mark) = key.mark {
            sock::set_mark(&sock, mark).map_err(DatapathError::io("SO_MARK"))?;
        }
        if cfg.traffic_class & !3 != 0 {
            sock::set_traffic_class(&sock, ip.is_ipv6(), cfg.traffic_class & !3)
                .map_err(DatapathError::io("IP_TOS / IPV6_TCLASS"))?;
        }
        // An EV socket only sends: the smallest receive buffer the kernel allows bounds
        // what a stranger sending to its port can queue there (nobody reads it).
        sock.set_recv_buffer_size(0)
            .map_err(DatapathError::io("SO_RCVBUF"))?;
        Ok(EvSocket {
            sock,
            lease,
            key,
            refs: 0,
        })
    }

    /// The slot of the EV socket of `key`, opened if no connection uses it yet; counts
    /// one more user.
    fn acquire(&mut self, cfg: &UdpConfig, key: SockKey) -> Result<usize, DatapathError> {
        let slot = match self.slots.get(&key) {
            Some(&slot) => slot,
            None => {
                let sock = Self::open_socket(cfg, key.clone())?;
                let slot = match self.socks.iter().position(Option::is_none) {
                    Some(i) => {
                        self.socks[i] = Some(sock);
                        i
                    }
                    None => {
                        self.socks.push(Some(sock));
                        self.socks.len() - 1
                    }
                };
                self.slots.insert(key, slot);
                slot
            }
        };
        if let Some(Some(s)) = self.socks.get_mut(slot) {
            s.refs += 1;
        }
        Ok(slot)
    }

    /// One user less of the EV socket in `slot`; closes it (its port returns) at none.
    fn release(&mut self, slot: usize) {
        if let Some(entry) = self.socks.get_mut(slot)
            && let Some(s) = entry
        {
            s.refs = s.refs.saturating_sub(1);
            if s.refs == 0 {
                self.slots.remove(&s.key);
                *entry = None;
            }
        }
    }
}
