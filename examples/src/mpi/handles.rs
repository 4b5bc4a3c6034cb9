//! Connection handles: what a rank tells one peer about the QP it made for it, in a fixed
//! number of bytes so that MPI moves them in one `Alltoall`.
//!
//! Layout ([`HANDLE_BYTES`], little-endian): magic `b"MRCH"`, version 2, flags (bit 0: a
//! QP exists for this pair; bit 1: go-back-N; bit 2: authenticated, `--psk-file`),
//! address family (4 or 6), one pad byte; QPN, initial PSN (u32 each); generation, UDP
//! port (u16 each); receive window, MTU payload (u32 each); the destination region's
//! address, length (u64 each) and rkey (u32); 4 pad bytes; the IP address (16 bytes, an
//! IPv4 one in the first 4); with bit 2, the QP's setup nonce (32 bytes from the OS
//! CSPRNG) and its key check (32 bytes, [`HandleAuth::check_of`]), else 64 zero bytes;
//! (version 3) the rank's plane count (0: one plane, else 2 to 8) and its address on each
//! plane, plane 0 first, 16 bytes each (IPv4 as `::ffff:a.b.c.d`), 8 slots (`--bind A,B`,
//! [`QpInfo::plane_ips`]).

use mrc_fabric::engine::bootstrap::{QpInfo, RemoteMr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Bytes of one handle.
pub const HANDLE_BYTES: usize = PLANES_AT + 1 + MAX_PLANES * 16;

/// Where the plane count starts.
const PLANES_AT: usize = 136;
/// Plane address slots.
const MAX_PLANES: usize = mrc_fabric::udp::MAX_PLANE_IPS;

const MAGIC: [u8; 4] = *b"MRCH";
const VERSION: u8 = 3;

/// What a peer needs to connect to one of this rank's QPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handle {
    /// The QP's parameters (one region: the destination the peer writes into).
    pub info: QpInfo,
    /// The rank's UDP receive address.
    pub udp: SocketAddr,
    /// With `--psk-file`: the QP's nonce and key check.
    pub auth: Option<HandleAuth>,
}

/// What an authenticating QP's handle adds: the two ends' nonces salt the pair's packet
/// keys (HKDF-SHA256 of the PSK, as the TCP bootstrap derives them), and the check lets
/// the peer tell a different PSK at setup instead of dropping every packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleAuth {
    /// 32 bytes from the OS CSPRNG, fresh for the QP.
    pub nonce: [u8; 32],
    /// [`HandleAuth::check_of`] of the PSK and the nonce.
    pub check: [u8; 32],
}

impl HandleAuth {
    /// The key check of `psk` for `nonce`: an HKDF-SHA256 key confirmation
    /// ([`mrc_transport::auth::key_confirmation`]) salted by the nonce and its complement.
    /// It tells whether the peer holds the same PSK; like the TCP bootstrap's, it lets an
    /// observer of the handles test PSK guesses offline (use 16 or more random bytes).
    ///
    /// # Errors
    /// A PSK under [`mrc_transport::auth::MIN_PSK_BYTES`].
    pub fn check_of(psk: &[u8], nonce: &[u8; 32]) -> Result<[u8; 32], String> {
        let other = nonce.map(|b| !b);
        mrc_transport::auth::key_confirmation(psk, nonce, &other, true).map_err(|e| e.to_string())
    }
}

/// Why a handle from a peer was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// Not `HANDLE_BYTES` long.
    #[error("handle of {0} bytes, want {HANDLE_BYTES}")]
    Length(usize),
    /// Wrong magic or version (another program, or another mrc-perf version).
    #[error("not an mrc-perf handle (magic/version {0:02x?})")]
    Magic([u8; 5]),
    /// The peer made no QP for this rank (the ranks disagree on the pattern).
    #[error("the peer made no QP for this rank")]
    NoQp,
    /// Address family neither 4 nor 6.
    #[error("address family {0}")]
    Family(u8),
    /// The QP has no region, or not exactly one.
    #[error("the QP offers {0} regions, want exactly 1")]
    Regions(usize),
    /// A plane count of 1 or above 8.
    #[error("plane count {0} (0, or 2 to 8)")]
    Planes(u8),
}

/// Encodes `h`, or the "no QP" handle for `None`.
pub fn encode(h: Option<&Handle>) -> [u8; HANDLE_BYTES] {
    let mut b = [0u8; HANDLE_BYTES];
    b[0..4].copy_from_slice(&MAGIC);
    b[4] = VERSION;
    let Some(h) = h else {
        return b;
    };
    let r = h.info.regions.first().copied().unwrap_or(RemoteMr {
        addr: 0,
        len: 0,
        rkey: 0,
    });
    b[5] = 1 | if h.info.go_back_n { 2 } else { 0 } | if h.auth.is_some() { 4 } else { 0 };
    b[6] = if h.udp.is_ipv4() { 4 } else { 6 };
    b[8..12].copy_from_slice(&h.info.qpn.to_le_bytes());
    b[12..16].copy_from_slice(&h.info.initial_psn.to_le_bytes());
    b[16..18].copy_from_slice(&h.info.generation.to_le_bytes());
    b[18..20].copy_from_slice(&h.udp.port().to_le_bytes());
    b[20..24].copy_from_slice(&h.info.recv_window_packets.to_le_bytes());
    b[24..28].copy_from_slice(&h.info.mtu_payload_bytes.to_le_bytes());
    b[28..36].copy_from_slice(&r.addr.to_le_bytes());
    b[36..44].copy_from_slice(&r.len.to_le_bytes());
    b[44..48].copy_from_slice(&r.rkey.to_le_bytes());
    match h.udp.ip() {
        IpAddr::V4(a) => b[56..60].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => b[56..72].copy_from_slice(&a.octets()),
    }
    if let Some(a) = &h.auth {
        b[72..104].copy_from_slice(&a.nonce);
        b[104..136].copy_from_slice(&a.check);
    }
    let planes = &h.info.plane_ips[..h.info.plane_ips.len().min(MAX_PLANES)];
    b[PLANES_AT] = planes.len() as u8;
    for (i, ip) in planes.iter().enumerate() {
        let v6 = match ip {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => *a,
        };
        let at = PLANES_AT + 1 + 16 * i;
        b[at..at + 16].copy_from_slice(&v6.octets());
    }
    b
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from(u32_at(b, i)) | u64::from(u32_at(b, i + 4)) << 32
}

/// Decodes a peer's handle (untrusted bytes: every field is taken as it is, the engine
/// checks them on connect and on every packet).
///
/// # Errors
/// [`HandleError`].
pub fn decode(b: &[u8]) -> Result<Handle, HandleError> {
    if b.len() != HANDLE_BYTES {
        return Err(HandleError::Length(b.len()));
    }
    if b[0..4] != MAGIC || b[4] != VERSION {
        return Err(HandleError::Magic([b[0], b[1], b[2], b[3], b[4]]));
    }
    if b[5] & 1 == 0 {
        return Err(HandleError::NoQp);
    }
    let ip = match b[6] {
        4 => IpAddr::V4(Ipv4Addr::new(b[56], b[57], b[58], b[59])),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[56..72]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        f => return Err(HandleError::Family(f)),
    };
    let port = u16::from_le_bytes([b[18], b[19]]);
    let n = b[PLANES_AT];
    if n == 1 || usize::from(n) > MAX_PLANES {
        return Err(HandleError::Planes(n));
    }
    let plane_ips: Vec<IpAddr> = (0..usize::from(n))
        .map(|i| {
            let at = PLANES_AT + 1 + 16 * i;
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[at..at + 16]);
            IpAddr::V6(Ipv6Addr::from(o)).to_canonical()
        })
        .collect();
    let auth = (b[5] & 4 != 0).then(|| {
        let mut nonce = [0u8; 32];
        let mut check = [0u8; 32];
        nonce.copy_from_slice(&b[72..104]);
        check.copy_from_slice(&b[104..136]);
        HandleAuth { nonce, check }
    });
    Ok(Handle {
        info: QpInfo {
            qpn: u32_at(b, 8),
            initial_psn: u32_at(b, 12),
            generation: u16::from_le_bytes([b[16], b[17]]),
            udp_port: port,
            recv_window_packets: u32_at(b, 20),
            mtu_payload_bytes: u32_at(b, 24),
            go_back_n: b[5] & 2 != 0,
            regions: vec![RemoteMr {
                addr: u64_at(b, 28),
                len: u64_at(b, 36),
                rkey: u32_at(b, 44),
            }],
            // checked by the engine when the QP connects (QpInfo::plane_ips)
            plane_ips,
        },
        udp: SocketAddr::new(ip, port),
        auth,
    })
}

/// Bytes of a rank's address in the address exchange.
pub const ADDR_BYTES: usize = 19;

/// A rank's UDP address as [`ADDR_BYTES`]: family (4 or 6), port (little-endian), 16
/// address bytes.
pub fn encode_addr(a: SocketAddr) -> [u8; ADDR_BYTES] {
    let mut b = [0u8; ADDR_BYTES];
    b[0] = if a.is_ipv4() { 4 } else { 6 };
    b[1..3].copy_from_slice(&a.port().to_le_bytes());
    match a.ip() {
        IpAddr::V4(x) => b[3..7].copy_from_slice(&x.octets()),
        IpAddr::V6(x) => b[3..19].copy_from_slice(&x.octets()),
    }
    b
}

/// The address of [`encode_addr`].
///
/// # Errors
/// [`HandleError::Length`], [`HandleError::Family`].
pub fn decode_addr(b: &[u8]) -> Result<SocketAddr, HandleError> {
    if b.len() != ADDR_BYTES {
        return Err(HandleError::Length(b.len()));
    }
    let port = u16::from_le_bytes([b[1], b[2]]);
    let ip = match b[0] {
        4 => IpAddr::V4(Ipv4Addr::new(b[3], b[4], b[5], b[6])),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[3..19]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        f => return Err(HandleError::Family(f)),
    };
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(udp: &str) -> Handle {
        Handle {
            info: QpInfo {
                qpn: 0xABCDEF,
                initial_psn: 0x123456,
                generation: 77,
                udp_port: udp.parse::<SocketAddr>().unwrap().port(),
                recv_window_packets: 4096,
                mtu_payload_bytes: 4096,
                go_back_n: false,
                regions: vec![RemoteMr {
                    addr: 0x1122_3344_5566_7788,
                    len: 1 << 33,
                    rkey: 0xDEAD_BEEF,
                }],
                plane_ips: Vec::new(),
            },
            udp: udp.parse().unwrap(),
            auth: None,
        }
    }

    #[test]
    fn round_trips_v4_and_v6_exactly() {
        for a in ["10.1.2.3:4791", "[2001:db8::7]:65535"] {
            let x = h(a);
            assert_eq!(decode(&encode(Some(&x))).unwrap(), x);
        }
        let mut g = h("127.0.0.1:9");
        g.info.go_back_n = true;
        assert_eq!(decode(&encode(Some(&g))).unwrap(), g);
        let nonce = [0x5A; 32];
        g.auth = Some(HandleAuth {
            nonce,
            check: HandleAuth::check_of(&[7; 16], &nonce).unwrap(),
        });
        let b = encode(Some(&g));
        assert_eq!(b[5], 1 | 2 | 4);
        assert_eq!(decode(&b).unwrap(), g);
        // the check tells the key: another PSK gives another one, a short PSK none
        assert_ne!(
            HandleAuth::check_of(&[8; 16], &nonce),
            HandleAuth::check_of(&[7; 16], &nonce)
        );
        assert!(HandleAuth::check_of(&[7; 15], &nonce).is_err());
    }

    #[test]
    fn addresses_round_trip() {
        for a in ["10.1.2.3:4791", "[fd00:6d72:63:12::2]:40000"] {
            let x: SocketAddr = a.parse().unwrap();
            assert_eq!(decode_addr(&encode_addr(x)), Ok(x));
        }
        assert_eq!(decode_addr(&[0u8; ADDR_BYTES]), Err(HandleError::Family(0)));
    }

    #[test]
    fn plane_addresses_round_trip_and_bad_counts_are_refused() {
        let mut g = h("10.0.0.1:9");
        g.info.plane_ips = vec!["10.0.0.1".parse().unwrap(), "10.1.0.1".parse().unwrap()];
        let b = encode(Some(&g));
        assert_eq!(HANDLE_BYTES, 265);
        assert_eq!(b[136], 2);
        assert_eq!(
            &b[153..169],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 0, 1]
        );
        assert_eq!(decode(&b).unwrap(), g);
        let mut v6 = h("[fd00::1]:9");
        v6.info.plane_ips = (1..=8)
            .map(|i| format!("fd0{i}::1").parse().unwrap())
            .collect();
        assert_eq!(decode(&encode(Some(&v6))).unwrap(), v6);
        for n in [1u8, 9, 255] {
            let mut x = b;
            x[136] = n;
            assert_eq!(decode(&x), Err(HandleError::Planes(n)));
        }
    }

    #[test]
    fn refuses_what_is_not_a_handle() {
        assert_eq!(decode(&encode(None)), Err(HandleError::NoQp));
        assert_eq!(decode(&[0u8; 3]), Err(HandleError::Length(3)));
        let mut b = encode(Some(&h("10.0.0.1:1")));
        b[6] = 5;
        assert_eq!(decode(&b), Err(HandleError::Family(5)));
        b[0] = b'X';
        assert!(matches!(decode(&b), Err(HandleError::Magic(_))));
    }
}
