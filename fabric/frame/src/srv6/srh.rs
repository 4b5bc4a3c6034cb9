//! The Segment Routing Header (RFC 8754 section 2): checked view [`Srh`] and owned [`SrhRepr`].
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Next Header  |  Hdr Ext Len  | Routing Type=4| Segments Left |  bytes 0..4
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Last Entry   |     Flags     |              Tag              |  bytes 4..8
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |            Segment List[0] (128-bit IPv6 address)             |  bytes 8..24
//! |            = the LAST segment (final destination)             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! //                              ...                            //
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |       Segment List[last_entry] = the FIRST segment            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! //       Optional TLVs (see `tlv`), up to (hdr_ext_len+1)*8     //
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Hdr Ext Len counts 8-octet units after the first 8 octets. The active segment is
//! Segment List\[segments_left\]; a source puts it in the IPv6 destination address.

use std::net::Ipv6Addr;

use pnet_packet::ip::IpNextHeaderProtocol;

use super::tlv::{self, Tlv, TlvIter};
use super::{ROUTING_TYPE_SRH, SrhContext, SrhError};

/// Byte offset of Next Header.
pub const NEXT_HEADER: usize = 0;
/// Byte offset of Hdr Ext Len.
pub const HDR_EXT_LEN: usize = 1;
/// Byte offset of Routing Type.
pub const ROUTING_TYPE: usize = 2;
/// Byte offset of Segments Left.
pub const SEGMENTS_LEFT: usize = 3;
/// Byte offset of Last Entry.
pub const LAST_ENTRY: usize = 4;
/// Byte offset of Flags.
pub const FLAGS: usize = 5;
/// Byte offset of Tag (16 bits).
pub const TAG: usize = 6;
/// Byte offset of Segment List\[0\].
pub const SEGMENT_LIST: usize = 8;
/// Bytes of the fixed part before the segment list.
pub const FIXED_LEN: usize = 8;
/// Bytes per segment (an IPv6 address).
pub const SEGMENT_LEN: usize = 16;
/// Most segments an SRH can hold: `hdr_ext_len` 255 gives max_LE = 126.
pub const MAX_SEGMENTS: usize = 127;
/// Largest SRH in bytes: `(255 + 1) * 8`.
pub const MAX_LEN: usize = 2048;

/// Checked zero-copy view of an SRH at the start of a buffer (smoltcp style).
///
/// Build with [`Srh::new_checked`] for untrusted bytes; accessors on a checked view never
/// panic. Bytes after the header (`(hdr_ext_len + 1) * 8`) are ignored.
#[derive(Debug, Clone)]
pub struct Srh<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Srh<T> {
    /// Wrap `buffer` without any check; accessors then return `None`/defaults on short
    /// buffers rather than panicking.
    pub fn new_unchecked(buffer: T) -> Self {
        Srh { buffer }
    }

    /// Wrap `buffer` and validate it in `ctx` (see [`Srh::check`]).
    pub fn new_checked(buffer: T, ctx: SrhContext) -> Result<Self, SrhError> {
        let srh = Srh::new_unchecked(buffer);
        srh.check(ctx)?;
        Ok(srh)
    }

    /// Validate the header in `ctx`, in this order:
    ///
    /// 1. the 8 fixed bytes are present ([`SrhError::Truncated`]);
    /// 2. Routing Type is 4 ([`SrhError::NotSrh`]);
    /// 3. all `(hdr_ext_len + 1) * 8` bytes are present ([`SrhError::Truncated`]);
    /// 4. `last_entry <= hdr_ext_len/2 - 1` ([`SrhError::LastEntryBeyondHeader`]);
    /// 5. received: `segments_left <= last_entry + 1`
    ///    ([`SrhError::SegmentsLeftBeyondLastEntry`]); local: `segments_left <= last_entry`
    ///    ([`SrhError::SegmentsLeftOutsideList`]);
    /// 6. the TLV area ([`tlv::validate_area`]).
    ///
    /// Sources: RFC 8754 sections 2, 2.1, 4.3.1.1.
    pub fn check(&self, ctx: SrhContext) -> Result<(), SrhError> {
        let bytes = self.buffer.as_ref();
        let fixed = bytes.get(..FIXED_LEN).ok_or(SrhError::Truncated {
            needed_bytes: FIXED_LEN,
            available_bytes: bytes.len(),
        })?;
        if fixed[ROUTING_TYPE] != ROUTING_TYPE_SRH {
            return Err(SrhError::NotSrh {
                routing_type: fixed[ROUTING_TYPE],
            });
        }
        let header_len = self.header_len();
        if bytes.len() < header_len {
            return Err(SrhError::Truncated {
                needed_bytes: header_len,
                available_bytes: bytes.len(),
            });
        }
        let hdr_ext_len = fixed[HDR_EXT_LEN];
        let last_entry = fixed[LAST_ENTRY];
        let segments_left = fixed[SEGMENTS_LEFT];
        // max_LE = hdr_ext_len/2 - 1, i.e. (last_entry + 1) * 2 <= hdr_ext_len.
        if (usize::from(last_entry) + 1) * 2 > usize::from(hdr_ext_len) {
            return Err(SrhError::LastEntryBeyondHeader {
                last_entry,
                hdr_ext_len,
            });
        }
        match ctx {
            SrhContext::Received if usize::from(segments_left) > usize::from(last_entry) + 1 => {
                return Err(SrhError::SegmentsLeftBeyondLastEntry {
                    segments_left,
                    last_entry,
                });
            }
            SrhContext::Local if segments_left > last_entry => {
                return Err(SrhError::SegmentsLeftOutsideList {
                    segments_left,
                    last_entry,
                });
            }
            _ => {}
        }
        tlv::validate_area(self.tlv_area(), self.tlv_offset(), ctx)
    }

    /// Next Header: protocol of the header after the SRH.
    pub fn next_header(&self) -> IpNextHeaderProtocol {
        IpNextHeaderProtocol(self.byte(NEXT_HEADER))
    }

    /// Hdr Ext Len: 8-octet units after the first 8 octets.
    pub fn hdr_ext_len(&self) -> u8 {
        self.byte(HDR_EXT_LEN)
    }

    /// Routing Type (4 for an SRH).
    pub fn routing_type(&self) -> u8 {
        self.byte(ROUTING_TYPE)
    }

    /// Segments Left: index of the active segment in the segment list.
    pub fn segments_left(&self) -> u8 {
        self.byte(SEGMENTS_LEFT)
    }

    /// Last Entry: index of the last element of the segment list (the first segment).
    pub fn last_entry(&self) -> u8 {
        self.byte(LAST_ENTRY)
    }

    /// Flags (RFC 8754 section 2: none defined, zero on transmission).
    pub fn flags(&self) -> u8 {
        self.byte(FLAGS)
    }

    /// Tag (16 bits).
    pub fn tag(&self) -> u16 {
        u16::from_be_bytes([self.byte(TAG), self.byte(TAG + 1)])
    }

    /// Header length in bytes, `(hdr_ext_len + 1) * 8`.
    pub fn header_len(&self) -> usize {
        (usize::from(self.hdr_ext_len()) + 1) * 8
    }

    /// Segment List\[index\], or `None` past `last_entry` or the buffer.
    pub fn segment(&self, index: u8) -> Option<Ipv6Addr> {
        if index > self.last_entry() {
            return None;
        }
        let start = SEGMENT_LIST + usize::from(index) * SEGMENT_LEN;
        let bytes: [u8; SEGMENT_LEN] = self
            .buffer
            .as_ref()
            .get(start..start + SEGMENT_LEN)?
            .try_into()
            .ok()?;
        Some(Ipv6Addr::from(bytes))
    }

    /// Number of entries in the segment list, `last_entry + 1`.
    pub fn segment_count(&self) -> usize {
        usize::from(self.last_entry()) + 1
    }

    /// Offset of the TLV area: right after Segment List\[last_entry\].
    pub fn tlv_offset(&self) -> usize {
        SEGMENT_LIST + self.segment_count() * SEGMENT_LEN
    }

    /// The TLV area (empty if the header is shorter than the segment list).
    pub fn tlv_area(&self) -> &[u8] {
        let end = self.header_len().min(self.buffer.as_ref().len());
        self.buffer
            .as_ref()
            .get(self.tlv_offset()..end)
            .unwrap_or(&[])
    }

    /// Iterate over the TLVs.
    pub fn tlvs(&self) -> TlvIter<'_> {
        TlvIter::new(self.tlv_area(), self.tlv_offset())
    }

    /// The active segment, Segment List\[segments_left\]; `None` when `segments_left` points
    /// past the list (a reduced SRH before its first endpoint).
    pub fn active_segment(&self) -> Option<Ipv6Addr> {
        self.segment(self.segments_left())
    }

    /// The whole header's bytes (`header_len` of them, or fewer on a short buffer).
    pub fn header_bytes(&self) -> &[u8] {
        let bytes = self.buffer.as_ref();
        bytes.get(..self.header_len()).unwrap_or(bytes)
    }

    fn byte(&self, offset: usize) -> u8 {
        self.buffer.as_ref().get(offset).copied().unwrap_or(0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Srh<T> {
    /// Set Segments Left (an endpoint decrements it, RFC 8754 section 4.3.1.1). No-op on a
    /// buffer shorter than the fixed header.
    pub fn set_segments_left(&mut self, segments_left: u8) {
        if let Some(b) = self.buffer.as_mut().get_mut(SEGMENTS_LEFT) {
            *b = segments_left;
        }
    }
}

/// An SRH in parsed, owned form. Hdr Ext Len and Last Entry are derived: `last_entry =
/// segments.len() - 1`, `hdr_ext_len = buffer_len()/8 - 1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SrhRepr {
    /// Protocol of the header after the SRH.
    pub next_header: IpNextHeaderProtocol,
    /// Index of the active segment in `segments`.
    pub segments_left: u8,
    /// Flags octet.
    pub flags: u8,
    /// Tag.
    pub tag: u16,
    /// Segment List\[0..=last_entry\], stored last-hop-first: `segments[0]` is the final
    /// destination, `segments[last_entry]` the first segment (RFC 8754 section 2).
    pub segments: Vec<Ipv6Addr>,
    /// The TLVs in wire order; together they fill the header to a multiple of 8 octets.
    pub tlvs: Vec<Tlv>,
}

impl SrhRepr {
    /// Build the SRH a source pushes for `path`, given in travel order (`path[0]` visited
    /// first, `path[n-1]` the final destination), as RFC 8754 sections 2 and 4.1 describe:
    /// segment list stored reversed, `segments_left = last_entry = n - 1`, no TLVs, flags and
    /// tag zero. Returns the Repr and the IPv6 destination address to use (`path[0]`).
    ///
    /// Errors: [`SrhError::EmptySegmentList`] for an empty path,
    /// [`SrhError::TooManySegments`] above 127.
    pub fn for_path(
        next_header: IpNextHeaderProtocol,
        path: &[Ipv6Addr],
    ) -> Result<(SrhRepr, Ipv6Addr), SrhError> {
        let first = *path.first().ok_or(SrhError::EmptySegmentList)?;
        if path.len() > MAX_SEGMENTS {
            return Err(SrhError::TooManySegments {
                segments: path.len(),
            });
        }
        let last_entry = u8::try_from(path.len() - 1).map_err(|_| SrhError::TooManySegments {
            segments: path.len(),
        })?;
        let repr = SrhRepr {
            next_header,
            segments_left: last_entry,
            flags: 0,
            tag: 0,
            segments: path.iter().rev().copied().collect(),
            tlvs: Vec::new(),
        };
        Ok((repr, first))
    }

    /// Parse a checked view into owned form. Validates again in `ctx` (so an unchecked view
    /// is safe too). Errors: as [`Srh::check`], plus [`SrhError::HmacLength`].
    pub fn parse<T: AsRef<[u8]>>(srh: &Srh<T>, ctx: SrhContext) -> Result<SrhRepr, SrhError> {
        srh.check(ctx)?;
        let mut segments = Vec::with_capacity(srh.segment_count());
        for index in 0..=srh.last_entry() {
            // check() proved the list is inside the header.
            let segment = srh.segment(index).ok_or(SrhError::Truncated {
                needed_bytes: srh.tlv_offset(),
                available_bytes: srh.header_bytes().len(),
            })?;
            segments.push(segment);
        }
        let mut tlvs = Vec::new();
        for raw in srh.tlvs() {
            tlvs.push(Tlv::from_raw(&raw?)?);
        }
        Ok(SrhRepr {
            next_header: srh.next_header(),
            segments_left: srh.segments_left(),
            flags: srh.flags(),
            tag: srh.tag(),
            segments,
            tlvs,
        })
    }

    /// Parse the SRH at the start of `bytes` in `ctx`.
    pub fn parse_bytes(bytes: &[u8], ctx: SrhContext) -> Result<SrhRepr, SrhError> {
        SrhRepr::parse(&Srh::new_unchecked(bytes), ctx)
    }

    /// Last Entry, `segments.len() - 1` (0 for an empty list, which `validate` rejects).
    pub fn last_entry(&self) -> u8 {
        u8::try_from(self.segments.len().saturating_sub(1)).unwrap_or(u8::MAX)
    }

    /// Bytes the header occupies: 8 + 16 per segment + TLV bytes.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN
            + self.segments.len() * SEGMENT_LEN
            + self.tlvs.iter().map(Tlv::buffer_len).sum::<usize>()
    }

    /// Hdr Ext Len for [`SrhRepr::buffer_len`], or an error when the length is not
    /// a multiple of 8 within 16..=2048 ([`SrhError::BadHeaderLength`]).
    pub fn hdr_ext_len(&self) -> Result<u8, SrhError> {
        let len_bytes = self.buffer_len();
        if len_bytes % 8 != 0 || !(FIXED_LEN + SEGMENT_LEN..=MAX_LEN).contains(&len_bytes) {
            return Err(SrhError::BadHeaderLength { len_bytes });
        }
        u8::try_from(len_bytes / 8 - 1).map_err(|_| SrhError::BadHeaderLength { len_bytes })
    }

    /// The final destination, Segment List\[0\] (RFC 8200 section 8.1 uses it in upper-layer
    /// checksums).
    pub fn final_destination(&self) -> Option<Ipv6Addr> {
        self.segments.first().copied()
    }

    /// The active segment, Segment List\[segments_left\], or `None` past the list.
    pub fn active_segment(&self) -> Option<Ipv6Addr> {
        self.segments.get(usize::from(self.segments_left)).copied()
    }

    /// Validate in `ctx` by emitting into a scratch buffer and checking it as the receiver
    /// would. Errors: as [`SrhRepr::emit`].
    pub fn validate(&self, ctx: SrhContext) -> Result<(), SrhError> {
        let mut scratch = [0u8; MAX_LEN];
        self.emit(&mut scratch, ctx).map(|_| ())
    }

    /// Write the header at the start of `buf` and return its length in bytes, after checking
    /// the result in `ctx` exactly as [`Srh::check`] would (so a Repr that `emit` accepts in a
    /// context always parses back in it).
    ///
    /// Errors: [`SrhError::EmptySegmentList`], [`SrhError::TooManySegments`],
    /// [`SrhError::BadHeaderLength`], [`SrhError::BufferTooSmall`], the TLV errors of
    /// [`Tlv::emit`], and the [`Srh::check`] errors in `ctx`.
    pub fn emit(&self, buf: &mut [u8], ctx: SrhContext) -> Result<usize, SrhError> {
        if self.segments.is_empty() {
            return Err(SrhError::EmptySegmentList);
        }
        if self.segments.len() > MAX_SEGMENTS {
            return Err(SrhError::TooManySegments {
                segments: self.segments.len(),
            });
        }
        let hdr_ext_len = self.hdr_ext_len()?;
        let len = self.buffer_len();
        let available = buf.len();
        let out = buf.get_mut(..len).ok_or(SrhError::BufferTooSmall {
            needed_bytes: len,
            available_bytes: available,
        })?;
        out[NEXT_HEADER] = self.next_header.0;
        out[HDR_EXT_LEN] = hdr_ext_len;
        out[ROUTING_TYPE] = ROUTING_TYPE_SRH;
        out[SEGMENTS_LEFT] = self.segments_left;
        out[LAST_ENTRY] = self.last_entry();
        out[FLAGS] = self.flags;
        out[TAG..TAG + 2].copy_from_slice(&self.tag.to_be_bytes());
        let mut pos = SEGMENT_LIST;
        for segment in &self.segments {
            out[pos..pos + SEGMENT_LEN].copy_from_slice(&segment.octets());
            pos += SEGMENT_LEN;
        }
        for tlv in &self.tlvs {
            let written = tlv.emit(&mut out[pos..]).map_err(|e| match e {
                SrhError::HmacLength { length, .. } => SrhError::HmacLength {
                    offset: pos,
                    length,
                },
                other => other,
            })?;
            pos += written;
        }
        Srh::new_unchecked(&*out).check(ctx)?;
        Ok(len)
    }
}
