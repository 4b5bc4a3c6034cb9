//! SRv6: the Segment Routing Header (RFC 8754) and uSID containers (RFC 9800).
//!
//! - [`srh`]: the SRH as a checked zero-copy view ([`Srh`]) and a parsed, owned form
//!   ([`SrhRepr`]) with `parse`, `validate` and `emit`.
//! - [`tlv`]: the SRH TLVs (RFC 8754 section 2.1): Pad1, PadN and HMAC recognised, any other
//!   type carried opaque as [`Tlv::Unknown`].
//! - [`usid`]: uSID containers in the NEXT-C-SID flavour (RFC 9800): build, shift, exhaustion.
//!
//! Validation has two contexts ([`SrhContext`]): a header *received from the wire* is checked
//! as RFC 8754 section 4.3.1.1 checks it (which admits the reduced SRH of section 4.1.1, whose
//! first segment lives only in the IPv6 destination address), while a header built *locally*
//! (builder/API path) must also have `segments_left` index inside its own segment list and
//! follow the sender-side TLV rules of section 2.1.

pub mod srh;
pub mod tlv;
pub mod usid;

pub use srh::{Srh, SrhRepr};
pub use tlv::{HmacTlv, RawTlv, Tlv, TlvIter, TlvType};
pub use usid::{LocatorBlock, UsidContainer, UsidError};

/// Routing Type value of the SRH in the IPv6 Routing header (RFC 8754 section 2, IANA).
pub const ROUTING_TYPE_SRH: u8 = 4;

/// IPv6 next-header value of a Routing header (RFC 8200 section 4.4).
pub const NEXT_HEADER_ROUTING: u8 = 43;

/// Where an SRH comes from, which decides how strictly it is validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SrhContext {
    /// Received from the network (RFC 8754 section 4.3.1.1): `last_entry` must fit in the
    /// header (`last_entry <= hdr_ext_len/2 - 1`) and `segments_left <= last_entry + 1`, so
    /// the reduced SRH (section 4.1.1: first segment only in the IPv6 destination address)
    /// is accepted. TLVs must lie inside the header; padding content and count are ignored
    /// (section 2.1.1: padding is ignored on receipt).
    Received,
    /// Built or handed in locally (builder/API path): everything [`SrhContext::Received`]
    /// checks, plus `segments_left <= last_entry` (it must index an entry of the list, the
    /// active segment the IPv6 destination address is copied from), and the sender rules of
    /// RFC 8754 section 2.1: PadN length 0..=5 with zero padding, no consecutive padding
    /// TLVs, HMAC TLV 8-octet aligned with zero reserved bits.
    Local,
}

/// Why an SRH was rejected. Allocation-free; offsets are bytes from the start of the SRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SrhError {
    /// Fewer bytes than the header needs: the 8-byte fixed part, or `(hdr_ext_len + 1) * 8`.
    #[error("SRH truncated: need {needed_bytes} bytes, have {available_bytes}")]
    Truncated {
        /// Bytes the header needs.
        needed_bytes: usize,
        /// Bytes present.
        available_bytes: usize,
    },
    /// The Routing header is not an SRH (Routing Type != 4, RFC 8754 section 2); it is never
    /// parsed as one.
    #[error("routing type {routing_type} is not an SRH (type 4)")]
    NotSrh {
        /// The Routing Type found.
        routing_type: u8,
    },
    /// `last_entry` indexes past the header: RFC 8754 section 4.3.1.1 requires
    /// `last_entry <= hdr_ext_len/2 - 1` (max_LE).
    #[error("last_entry {last_entry} beyond the header (hdr_ext_len {hdr_ext_len})")]
    LastEntryBeyondHeader {
        /// The Last Entry field.
        last_entry: u8,
        /// The Hdr Ext Len field (8-octet units after the first 8 octets).
        hdr_ext_len: u8,
    },
    /// Received context: `segments_left > last_entry + 1` (RFC 8754 section 4.3.1.1).
    #[error("segments_left {segments_left} > last_entry {last_entry} + 1")]
    SegmentsLeftBeyondLastEntry {
        /// The Segments Left field.
        segments_left: u8,
        /// The Last Entry field.
        last_entry: u8,
    },
    /// Local context: `segments_left > last_entry`, so the active segment would be read past
    /// the segment list.
    #[error(
        "segments_left {segments_left} indexes past the segment list (last_entry {last_entry})"
    )]
    SegmentsLeftOutsideList {
        /// The Segments Left field.
        segments_left: u8,
        /// The Last Entry field.
        last_entry: u8,
    },
    /// A TLV's type/length bytes or its value run past the end of the header.
    #[error("TLV at offset {offset} runs past the header end at {header_len_bytes}")]
    TlvOverrun {
        /// Offset of the TLV's Type byte.
        offset: usize,
        /// Header length in bytes, `(hdr_ext_len + 1) * 8`.
        header_len_bytes: usize,
    },
    /// An HMAC TLV (RFC 8754 section 2.1.2) whose Length is not 6 + a multiple of 8 up to 32
    /// octets of HMAC.
    #[error("HMAC TLV at offset {offset} has invalid length {length}")]
    HmacLength {
        /// Offset of the TLV's Type byte.
        offset: usize,
        /// The TLV Length field.
        length: u8,
    },
    /// Local context: HMAC TLV not at an 8-octet aligned offset (RFC 8754 section 2.1.2).
    #[error("HMAC TLV at offset {offset} is not 8-octet aligned")]
    HmacMisaligned {
        /// Offset of the TLV's Type byte.
        offset: usize,
    },
    /// Local context: PadN with a Length above 5 (RFC 8754 section 2.1.1.2).
    #[error("PadN at offset {offset} has length {length} > 5")]
    PadNTooLong {
        /// Offset of the TLV's Type byte.
        offset: usize,
        /// The TLV Length field.
        length: u8,
    },
    /// Local context: a padding TLV directly follows another (RFC 8754 section 2.1.1).
    #[error("consecutive padding TLVs at offset {offset}")]
    ConsecutivePadding {
        /// Offset of the second padding TLV's Type byte.
        offset: usize,
    },
    /// Local context: padding or reserved bits not zero on transmission (RFC 8754 sections
    /// 2.1.1.2, 2.1.2).
    #[error("non-zero padding or reserved bits in the TLV at offset {offset}")]
    NonZeroReserved {
        /// Offset of the TLV's Type byte.
        offset: usize,
    },
    /// A Repr with no segment: an SRH always carries at least Segment List\[0\].
    #[error("SRH with an empty segment list")]
    EmptySegmentList,
    /// More segments than `hdr_ext_len` (max 255) can describe: at most 127.
    #[error("{segments} segments, at most 127 fit an SRH")]
    TooManySegments {
        /// Segments requested.
        segments: usize,
    },
    /// The header would not be a multiple of 8 octets or would exceed 2048 bytes
    /// (`hdr_ext_len` 255); TLVs must pad it (RFC 8754 section 2.1.1).
    #[error("SRH of {len_bytes} bytes is not a multiple of 8 in 16..=2048")]
    BadHeaderLength {
        /// Length in bytes the header would have.
        len_bytes: usize,
    },
    /// An owned TLV that cannot be written as given: [`Tlv::Unknown`] carrying type 0, 4 or 5
    /// (it would parse back as Pad1, PadN or HMAC), or an HMAC `reserved` above 15 bits.
    #[error("TLV of type {tlv_type} cannot be written as given")]
    InvalidTlvRepr {
        /// The TLV type.
        tlv_type: u8,
    },
    /// A TLV value longer than its 8-bit Length field can state (255).
    #[error("TLV value of {len_bytes} bytes exceeds 255")]
    TlvValueTooLong {
        /// Value length in bytes.
        len_bytes: usize,
    },
    /// The output buffer is too small for `emit`.
    #[error("emit needs {needed_bytes} bytes, buffer has {available_bytes}")]
    BufferTooSmall {
        /// Bytes `emit` needs.
        needed_bytes: usize,
        /// Bytes the buffer has.
        available_bytes: usize,
    },
}
