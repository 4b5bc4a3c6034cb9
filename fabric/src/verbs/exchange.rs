//! Sending and receiving an [`EndpointAddr`] over a byte stream (the benchmark's TCP
//! control connection): a 2-byte big-endian length, then the encoding of
//! [`EndpointAddr::encode`]. Both sides write first, then read (the frames are small, so
//! neither blocks the other).

use super::addr::{ADDR_HEADER_BYTES, AddrError, EndpointAddr, MAX_QPNS};
use super::config::VerbsError;
use std::io::{Read, Write};

/// Largest frame body: an address with [`MAX_QPNS`] QPNs.
pub const MAX_FRAME_BYTES: usize = ADDR_HEADER_BYTES + 4 * MAX_QPNS;

fn io(call: &'static str) -> impl FnOnce(std::io::Error) -> VerbsError {
    move |source| VerbsError::Call { call, source }
}

/// Writes `addr` as one frame.
///
/// # Errors
/// [`VerbsError::Addr`] for an address that does not encode, [`VerbsError::Call`] for the
/// write.
pub fn write_endpoint(w: &mut impl Write, addr: &EndpointAddr) -> Result<(), VerbsError> {
    let body = addr.encode()?;
    let mut frame = Vec::with_capacity(2 + body.len());
    frame.extend_from_slice(&(body.len() as u16).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)
        .map_err(io("sending the endpoint address"))?;
    w.flush().map_err(io("sending the endpoint address"))
}

/// Reads one frame and decodes it (untrusted: the length is checked before reading).
///
/// # Errors
/// [`VerbsError::Addr`] with [`AddrError::Short`] / [`AddrError::BadLength`] for a length
/// outside `32..=MAX_FRAME_BYTES`, any decode error, [`VerbsError::Call`] for the read.
pub fn read_endpoint(r: &mut impl Read) -> Result<EndpointAddr, VerbsError> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len)
        .map_err(io("receiving the endpoint address"))?;
    let len = usize::from(u16::from_be_bytes(len));
    if len < ADDR_HEADER_BYTES {
        return Err(AddrError::Short { len_bytes: len }.into());
    }
    if len > MAX_FRAME_BYTES {
        return Err(AddrError::BadLength {
            len_bytes: len,
            count: MAX_QPNS,
            expected_bytes: MAX_FRAME_BYTES,
        }
        .into());
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .map_err(io("receiving the endpoint address"))?;
    Ok(EndpointAddr::decode(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EndpointAddr {
        EndpointAddr {
            gid: "fd00::7".parse().unwrap(),
            lid: 0,
            qkey: 0x4d52_4300,
            qpns: vec![0x11, 0x12],
        }
    }

    #[test]
    fn frame_round_trip_exact_length() {
        let mut buf = Vec::new();
        write_endpoint(&mut buf, &sample()).unwrap();
        assert_eq!(buf.len(), 2 + 40);
        assert_eq!(&buf[..2], &[0, 40]);
        assert_eq!(read_endpoint(&mut &buf[..]).unwrap(), sample());
    }

    #[test]
    fn hostile_lengths_are_typed_errors_before_any_allocation() {
        let e = read_endpoint(&mut &[0xff, 0xff][..]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "address of 65535 bytes declares 1024 QPNs (4128 bytes)"
        );
        let e = read_endpoint(&mut &[0, 8, 1, 2, 3, 4, 5, 6, 7, 8][..]).unwrap_err();
        assert!(matches!(
            e,
            VerbsError::Addr(AddrError::Short { len_bytes: 8 })
        ));
        // A truncated body is an I/O error naming the step.
        let mut buf = Vec::new();
        write_endpoint(&mut buf, &sample()).unwrap();
        let e = read_endpoint(&mut &buf[..30]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("receiving the endpoint address failed")
        );
    }
}
