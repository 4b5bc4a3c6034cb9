//! The UD endpoint address two hosts exchange out of band (over the benchmark's TCP control
//! connection, the way perftest exchanges QPN/LID/GID) before any datagram flows.
//!
//! A UD destination is (GID, LID, QPN, Q_Key): the GID (and the LID on InfiniBand) build
//! the address handle, the QPN and Q_Key go into every send WR (`wr.ud.remote_qpn`,
//! `wr.ud.remote_qkey`). An endpoint has one UD QP per EV, so its address lists every QPN,
//! in EV-index order. Encoding, network byte order:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                     magic "MRCU" (0x4d524355)                 |  0
//! +---------------+---------------+-------------------------------+
//! |  version = 1  |   reserved 0  |             LID               |  4
//! +---------------+---------------+-------------------------------+
//! |                             Q_Key                             |  8
//! +---------------------------------------------------------------+
//! |                      GID (16 bytes)                           | 12..28
//! +-------------------------------+-------------------------------+
//! |          QPN count n          |           reserved 0          | 28
//! +---------------+---------------+-------------------------------+
//! |   reserved 0  |                   QPN[0] (24 bits)            | 32
//! |      ...      |                   QPN[n-1]                    | 32 + 4(n-1)
//! +---------------------------------------------------------------+
//! ```
//!
//! Decoding treats the bytes as untrusted (they arrive over a socket): every length is
//! checked, errors are typed ([`AddrError`]).

use std::net::Ipv6Addr;
use thiserror::Error;

/// Magic at offset 0: "MRCU" (mrc UD).
pub const ADDR_MAGIC: u32 = 0x4d52_4355;
/// Encoding version.
pub const ADDR_VERSION: u8 = 1;
/// Bytes before the QPN list.
pub const ADDR_HEADER_BYTES: usize = 32;
/// Largest QPN count (a connection has at most this many EVs over verbs).
pub const MAX_QPNS: usize = 1024;
/// QPNs are 24-bit (IBTA Vol. 1, 9.2 BTH DestQP).
pub const QPN_MASK: u32 = 0x00ff_ffff;

/// Field offsets.
pub mod field {
    use std::ops::Range;
    /// Magic.
    pub const MAGIC: Range<usize> = 0..4;
    /// Version.
    pub const VERSION: usize = 4;
    /// LID.
    pub const LID: Range<usize> = 6..8;
    /// Q_Key.
    pub const QKEY: Range<usize> = 8..12;
    /// GID.
    pub const GID: Range<usize> = 12..28;
    /// QPN count.
    pub const COUNT: Range<usize> = 28..30;
}

/// Why an address did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum AddrError {
    /// Fewer bytes than the header.
    #[error("address of {len_bytes} bytes is shorter than the {ADDR_HEADER_BYTES}-byte header")]
    Short {
        /// Bytes given.
        len_bytes: usize,
    },
    /// The magic is not "MRCU".
    #[error("bad magic {0:#010x}")]
    BadMagic(u32),
    /// An unknown version.
    #[error("unsupported address version {0}")]
    BadVersion(u8),
    /// The byte count does not match the QPN count.
    #[error("address of {len_bytes} bytes declares {count} QPNs ({expected_bytes} bytes)")]
    BadLength {
        /// Bytes given.
        len_bytes: usize,
        /// QPN count declared.
        count: usize,
        /// Bytes that count needs.
        expected_bytes: usize,
    },
    /// No QPN, or more than [`MAX_QPNS`].
    #[error("QPN count {0} outside 1..={MAX_QPNS}")]
    BadCount(usize),
    /// A QPN with its top byte set.
    #[error("QPN {0:#x} does not fit in 24 bits")]
    BadQpn(u32),
}

/// Where a peer's UD QPs are reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointAddr {
    /// The port's GID at the chosen index (RoCEv2: the IPv4-mapped or IPv6 address).
    pub gid: Ipv6Addr,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The Q_Key every QP of the endpoint accepts.
    pub qkey: u32,
    /// One QPN per EV, in EV-index order.
    pub qpns: Vec<u32>,
}

impl EndpointAddr {
    /// Encoded length: `32 + 4 * qpns.len()`.
    pub fn encoded_len(&self) -> usize {
        ADDR_HEADER_BYTES + 4 * self.qpns.len()
    }

    /// Encodes to bytes.
    ///
    /// # Errors
    /// [`AddrError::BadCount`], [`AddrError::BadQpn`]: what [`EndpointAddr::decode`]
    /// would refuse is never emitted.
    pub fn encode(&self) -> Result<Vec<u8>, AddrError> {
        if self.qpns.is_empty() || self.qpns.len() > MAX_QPNS {
            return Err(AddrError::BadCount(self.qpns.len()));
        }
        if let Some(&q) = self.qpns.iter().find(|&&q| q & !QPN_MASK != 0) {
            return Err(AddrError::BadQpn(q));
        }
        let mut b = vec![0u8; self.encoded_len()];
        b[field::MAGIC].copy_from_slice(&ADDR_MAGIC.to_be_bytes());
        b[field::VERSION] = ADDR_VERSION;
        b[field::LID].copy_from_slice(&self.lid.to_be_bytes());
        b[field::QKEY].copy_from_slice(&self.qkey.to_be_bytes());
        b[field::GID].copy_from_slice(&self.gid.octets());
        b[field::COUNT].copy_from_slice(&(self.qpns.len() as u16).to_be_bytes());
        for (chunk, q) in b[ADDR_HEADER_BYTES..].chunks_exact_mut(4).zip(&self.qpns) {
            chunk.copy_from_slice(&q.to_be_bytes());
        }
        Ok(b)
    }

    /// Decodes untrusted bytes.
    ///
    /// # Errors
    /// Every [`AddrError`] variant; never panics.
    pub fn decode(b: &[u8]) -> Result<EndpointAddr, AddrError> {
        let hdr: &[u8; ADDR_HEADER_BYTES] = b
            .get(..ADDR_HEADER_BYTES)
            .and_then(|h| h.try_into().ok())
            .ok_or(AddrError::Short { len_bytes: b.len() })?;
        let be32 = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&hdr[r]);
            u32::from_be_bytes(w)
        };
        let magic = be32(field::MAGIC);
        if magic != ADDR_MAGIC {
            return Err(AddrError::BadMagic(magic));
        }
        if hdr[field::VERSION] != ADDR_VERSION {
            return Err(AddrError::BadVersion(hdr[field::VERSION]));
        }
        let count = usize::from(u16::from_be_bytes([hdr[28], hdr[29]]));
        if count == 0 || count > MAX_QPNS {
            return Err(AddrError::BadCount(count));
        }
        let expected_bytes = ADDR_HEADER_BYTES + 4 * count;
        if b.len() != expected_bytes {
            return Err(AddrError::BadLength {
                len_bytes: b.len(),
                count,
                expected_bytes,
            });
        }
        let mut qpns = Vec::with_capacity(count);
        for chunk in b[ADDR_HEADER_BYTES..].chunks_exact(4) {
            let q = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            if q & !QPN_MASK != 0 {
                return Err(AddrError::BadQpn(q));
            }
            qpns.push(q);
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&hdr[field::GID]);
        Ok(EndpointAddr {
            gid: Ipv6Addr::from(gid),
            lid: u16::from_be_bytes([hdr[6], hdr[7]]),
            qkey: be32(field::QKEY),
            qpns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EndpointAddr {
        EndpointAddr {
            gid: "::ffff:10.1.2.3".parse().unwrap(),
            lid: 0x0017,
            qkey: 0x1111_1111,
            qpns: vec![0x000112, 0x000113, 0xff_ffff],
        }
    }

    #[test]
    fn round_trip_exact_bytes() {
        let a = sample();
        let b = a.encode().unwrap();
        assert_eq!(b.len(), 44);
        assert_eq!(
            &b[0..12],
            &[
                0x4d, 0x52, 0x43, 0x55, 1, 0, 0x00, 0x17, 0x11, 0x11, 0x11, 0x11
            ]
        );
        assert_eq!(
            &b[12..28],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
        );
        assert_eq!(&b[28..32], &[0, 3, 0, 0]);
        assert_eq!(
            &b[32..44],
            &[0, 0, 0x01, 0x12, 0, 0, 0x01, 0x13, 0, 0xff, 0xff, 0xff]
        );
        assert_eq!(EndpointAddr::decode(&b).unwrap(), a);
    }

    #[test]
    fn bad_lengths_are_typed_errors() {
        let b = sample().encode().unwrap();
        assert_eq!(
            EndpointAddr::decode(&b[..31]),
            Err(AddrError::Short { len_bytes: 31 })
        );
        assert_eq!(
            EndpointAddr::decode(&b[..43]),
            Err(AddrError::BadLength {
                len_bytes: 43,
                count: 3,
                expected_bytes: 44
            })
        );
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(
            EndpointAddr::decode(&longer),
            Err(AddrError::BadLength {
                len_bytes: 45,
                count: 3,
                expected_bytes: 44
            })
        );
    }

    #[test]
    fn bad_fields_are_typed_errors() {
        let b = sample().encode().unwrap();
        let mut m = b.clone();
        m[0] = 0;
        assert_eq!(
            EndpointAddr::decode(&m),
            Err(AddrError::BadMagic(0x0052_4355))
        );
        let mut v = b.clone();
        v[4] = 2;
        assert_eq!(EndpointAddr::decode(&v), Err(AddrError::BadVersion(2)));
        let mut q = b.clone();
        q[32] = 1;
        assert_eq!(
            EndpointAddr::decode(&q),
            Err(AddrError::BadQpn(0x0100_0112))
        );
        let mut z = b[..32].to_vec();
        z[28..30].copy_from_slice(&[0, 0]);
        assert_eq!(EndpointAddr::decode(&z), Err(AddrError::BadCount(0)));
        let mut big = b[..32].to_vec();
        big[28..30].copy_from_slice(&1025u16.to_be_bytes());
        assert_eq!(EndpointAddr::decode(&big), Err(AddrError::BadCount(1025)));
    }

    #[test]
    fn encode_refuses_what_decode_refuses() {
        let mut a = sample();
        a.qpns[1] = 0x0100_0000;
        assert_eq!(a.encode(), Err(AddrError::BadQpn(0x0100_0000)));
        a.qpns.clear();
        assert_eq!(a.encode(), Err(AddrError::BadCount(0)));
    }
}
