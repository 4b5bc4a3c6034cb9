//! SRH TLVs (RFC 8754 section 2.1).
//!
//! The TLV area follows Segment List\[last_entry\] and runs to the end of the header. Every TLV
//! but Pad1 is Type / Length / Value; Length counts the Value octets only.
//!
//! ```text
//! Pad1 (type 0, section 2.1.1.1)   PadN (type 4, section 2.1.1.2)
//! +-+-+-+-+-+-+-+-+                +---------------+---------------+--------------//
//! |   Type = 0    |                |   Type = 4    |  Length 0..5  |  Padding   //
//! +-+-+-+-+-+-+-+-+                +---------------+---------------+--------------//
//!
//! HMAC (type 5, section 2.1.2), 8n aligned
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Type = 5    |    Length     |D|        Reserved (15)        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    HMAC Key ID (4 octets)                     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! //          HMAC (8, 16, 24 or 32 octets; Length = 6 + that)   //
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::{SrhContext, SrhError};

/// TLV type of Pad1 (RFC 8754 section 2.1.1.1, IANA "Segment Routing Header TLVs").
pub const TLV_TYPE_PAD1: u8 = 0;
/// TLV type of PadN (RFC 8754 section 2.1.1.2).
pub const TLV_TYPE_PADN: u8 = 4;
/// TLV type of HMAC (RFC 8754 section 2.1.2).
pub const TLV_TYPE_HMAC: u8 = 5;
/// Largest PadN Length a sender may use (RFC 8754 section 2.1.1.2).
pub const PADN_MAX_LEN: u8 = 5;
/// Octets of the HMAC TLV value before the HMAC itself: D/Reserved (2) + Key ID (4).
pub const HMAC_FIXED_LEN: usize = 6;
/// Largest HMAC field, in octets (RFC 8754 section 2.1.2).
pub const HMAC_MAX_LEN: usize = 32;

/// The TLV Type octet, with types this crate does not know kept as `Unknown(n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlvType {
    /// 0: one octet of padding, no Length.
    Pad1,
    /// 4: 2 + Length octets of padding.
    PadN,
    /// 5: HMAC (RFC 8754 section 2.1.2).
    Hmac,
    /// Any other type, carried opaque (RFC 8754 section 2.1: unrecognised types are ignored).
    Unknown(u8),
}

impl From<u8> for TlvType {
    fn from(value: u8) -> Self {
        match value {
            TLV_TYPE_PAD1 => TlvType::Pad1,
            TLV_TYPE_PADN => TlvType::PadN,
            TLV_TYPE_HMAC => TlvType::Hmac,
            other => TlvType::Unknown(other),
        }
    }
}

impl From<TlvType> for u8 {
    fn from(value: TlvType) -> Self {
        match value {
            TlvType::Pad1 => TLV_TYPE_PAD1,
            TlvType::PadN => TLV_TYPE_PADN,
            TlvType::Hmac => TLV_TYPE_HMAC,
            TlvType::Unknown(other) => other,
        }
    }
}

/// One TLV as it sits in the buffer: its type, offset in the SRH and borrowed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawTlv<'a> {
    /// Offset of the Type octet from the start of the SRH, in bytes.
    pub offset: usize,
    /// The Type octet.
    pub tlv_type: TlvType,
    /// The Value octets (empty for Pad1).
    pub value: &'a [u8],
}

impl RawTlv<'_> {
    /// Total bytes this TLV occupies: 1 for Pad1, else 2 + value length.
    pub fn len_bytes(&self) -> usize {
        match self.tlv_type {
            TlvType::Pad1 => 1,
            _ => 2 + self.value.len(),
        }
    }

    /// Whether this is a padding TLV (Pad1 or PadN).
    pub fn is_padding(&self) -> bool {
        matches!(self.tlv_type, TlvType::Pad1 | TlvType::PadN)
    }
}

/// Iterator over the TLV area of an SRH, yielding each TLV or the first structural error.
///
/// Errors: [`SrhError::TlvOverrun`] when a TLV's Length octet or Value runs past the header.
/// After an error the iterator ends.
#[derive(Debug, Clone)]
pub struct TlvIter<'a> {
    area: &'a [u8],
    /// Offset of `area[0]` from the start of the SRH.
    base_offset: usize,
    pos: usize,
    failed: bool,
}

impl<'a> TlvIter<'a> {
    /// Walk `area`, the bytes after the segment list up to the header end; `base_offset` is
    /// where `area` starts in the SRH (used for offsets in errors and [`RawTlv::offset`]).
    pub fn new(area: &'a [u8], base_offset: usize) -> Self {
        TlvIter {
            area,
            base_offset,
            pos: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for TlvIter<'a> {
    type Item = Result<RawTlv<'a>, SrhError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let rest = self.area.get(self.pos..)?;
        let (&type_octet, after_type) = rest.split_first()?;
        let offset = self.base_offset + self.pos;
        let overrun = SrhError::TlvOverrun {
            offset,
            header_len_bytes: self.base_offset + self.area.len(),
        };
        let tlv_type = TlvType::from(type_octet);
        if tlv_type == TlvType::Pad1 {
            self.pos += 1;
            return Some(Ok(RawTlv {
                offset,
                tlv_type,
                value: &[],
            }));
        }
        let Some((&length, after_len)) = after_type.split_first() else {
            self.failed = true;
            return Some(Err(overrun));
        };
        let Some(value) = after_len.get(..usize::from(length)) else {
            self.failed = true;
            return Some(Err(overrun));
        };
        self.pos += 2 + value.len();
        Some(Ok(RawTlv {
            offset,
            tlv_type,
            value,
        }))
    }
}

/// The HMAC TLV (RFC 8754 section 2.1.2), all fields carried so it re-emits byte-identical.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HmacTlv {
    /// D flag: destination address verification disabled (used with reduced SRHs).
    pub destination_check_disabled: bool,
    /// The 15 reserved bits (zero on transmission; carried as received).
    pub reserved: u16,
    /// HMAC Key ID: names the pre-shared key and algorithm.
    pub key_id: u32,
    /// The HMAC: 8, 16, 24 or 32 octets.
    pub hmac: Vec<u8>,
}

/// One SRH TLV in owned form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Tlv {
    /// One octet of padding.
    Pad1,
    /// PadN; `padding` is the Value (Length = its length), carried as received.
    PadN {
        /// The padding octets.
        padding: Vec<u8>,
    },
    /// HMAC.
    Hmac(HmacTlv),
    /// A type this crate does not interpret, carried opaque.
    Unknown {
        /// The Type octet (never 0, 4 or 5).
        tlv_type: u8,
        /// The Value octets.
        value: Vec<u8>,
    },
}

impl Tlv {
    /// The padding a sender uses for `len_bytes` octets (RFC 8754 section 2.1.1): `None` for
    /// 0, Pad1 for 1, PadN with `len_bytes - 2` zero octets for 2..=7; `None` above 7 (one
    /// padding TLV never needs more, as the header is 8-octet aligned).
    pub fn padding(len_bytes: usize) -> Option<Tlv> {
        match len_bytes {
            1 => Some(Tlv::Pad1),
            2..=7 => Some(Tlv::PadN {
                padding: vec![0; len_bytes - 2],
            }),
            _ => None,
        }
    }

    /// The TLV's type.
    pub fn tlv_type(&self) -> TlvType {
        match self {
            Tlv::Pad1 => TlvType::Pad1,
            Tlv::PadN { .. } => TlvType::PadN,
            Tlv::Hmac(_) => TlvType::Hmac,
            Tlv::Unknown { tlv_type, .. } => TlvType::from(*tlv_type),
        }
    }

    /// Whether this is Pad1 or PadN.
    pub fn is_padding(&self) -> bool {
        matches!(self, Tlv::Pad1 | Tlv::PadN { .. })
    }

    /// Length of the Value in octets (0 for Pad1).
    pub fn value_len_bytes(&self) -> usize {
        match self {
            Tlv::Pad1 => 0,
            Tlv::PadN { padding } => padding.len(),
            Tlv::Hmac(h) => HMAC_FIXED_LEN + h.hmac.len(),
            Tlv::Unknown { value, .. } => value.len(),
        }
    }

    /// Bytes the TLV occupies on the wire: 1 for Pad1, else 2 + value.
    pub fn buffer_len(&self) -> usize {
        match self {
            Tlv::Pad1 => 1,
            other => 2 + other.value_len_bytes(),
        }
    }

    /// Turn a [`RawTlv`] into the owned form.
    ///
    /// Errors: [`SrhError::HmacLength`] for an HMAC TLV whose Length is not 6 + 8/16/24/32.
    pub fn from_raw(raw: &RawTlv<'_>) -> Result<Tlv, SrhError> {
        Ok(match raw.tlv_type {
            TlvType::Pad1 => Tlv::Pad1,
            TlvType::PadN => Tlv::PadN {
                padding: raw.value.to_vec(),
            },
            TlvType::Hmac => Tlv::Hmac(parse_hmac(raw)?),
            TlvType::Unknown(tlv_type) => Tlv::Unknown {
                tlv_type,
                value: raw.value.to_vec(),
            },
        })
    }

    /// Write the TLV at the start of `buf`; returns the bytes written.
    ///
    /// Errors: [`SrhError::TlvValueTooLong`] for a value above 255 octets,
    /// [`SrhError::HmacLength`] for an HMAC that is not 8/16/24/32 octets,
    /// [`SrhError::InvalidTlvRepr`] for an `Unknown` with type 0, 4 or 5 or an HMAC reserved
    /// value above 15 bits, [`SrhError::BufferTooSmall`] when `buf` is shorter than
    /// [`Tlv::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, SrhError> {
        match self {
            Tlv::Unknown { tlv_type, .. }
                if !matches!(TlvType::from(*tlv_type), TlvType::Unknown(_)) =>
            {
                return Err(SrhError::InvalidTlvRepr {
                    tlv_type: *tlv_type,
                });
            }
            Tlv::Hmac(h) if h.reserved > 0x7fff => {
                return Err(SrhError::InvalidTlvRepr {
                    tlv_type: TLV_TYPE_HMAC,
                });
            }
            _ => {}
        }
        let needed = self.buffer_len();
        let value_len = self.value_len_bytes();
        let length = u8::try_from(value_len).map_err(|_| SrhError::TlvValueTooLong {
            len_bytes: value_len,
        })?;
        if let Tlv::Hmac(h) = self {
            if !hmac_len_ok(h.hmac.len()) {
                return Err(SrhError::HmacLength { offset: 0, length });
            }
        }
        let available = buf.len();
        let out = buf.get_mut(..needed).ok_or(SrhError::BufferTooSmall {
            needed_bytes: needed,
            available_bytes: available,
        })?;
        out[0] = u8::from(self.tlv_type());
        match self {
            Tlv::Pad1 => {}
            Tlv::PadN { padding } => {
                out[1] = length;
                out[2..].copy_from_slice(padding);
            }
            Tlv::Hmac(h) => {
                out[1] = length;
                let flags = (u16::from(h.destination_check_disabled) << 15) | h.reserved;
                out[2..4].copy_from_slice(&flags.to_be_bytes());
                out[4..8].copy_from_slice(&h.key_id.to_be_bytes());
                out[8..].copy_from_slice(&h.hmac);
            }
            Tlv::Unknown { value, .. } => {
                out[1] = length;
                out[2..].copy_from_slice(value);
            }
        }
        Ok(needed)
    }
}

fn hmac_len_ok(hmac_len_bytes: usize) -> bool {
    hmac_len_bytes > 0 && hmac_len_bytes <= HMAC_MAX_LEN && hmac_len_bytes % 8 == 0
}

fn parse_hmac(raw: &RawTlv<'_>) -> Result<HmacTlv, SrhError> {
    let bad = SrhError::HmacLength {
        offset: raw.offset,
        length: u8::try_from(raw.value.len()).unwrap_or(u8::MAX),
    };
    let (fixed, hmac) = raw.value.split_at_checked(HMAC_FIXED_LEN).ok_or(bad)?;
    if !hmac_len_ok(hmac.len()) {
        return Err(bad);
    }
    let flags = u16::from_be_bytes([fixed[0], fixed[1]]);
    Ok(HmacTlv {
        destination_check_disabled: flags & 0x8000 != 0,
        reserved: flags & 0x7fff,
        key_id: u32::from_be_bytes([fixed[2], fixed[3], fixed[4], fixed[5]]),
        hmac: hmac.to_vec(),
    })
}

/// Check one TLV area (the bytes after the segment list) in `ctx`, without allocating.
///
/// Both contexts: every TLV lies inside the area ([`SrhError::TlvOverrun`]) and HMAC TLVs have
/// a valid Length ([`SrhError::HmacLength`]). [`SrhContext::Local`] adds the sender rules:
/// [`SrhError::PadNTooLong`], [`SrhError::ConsecutivePadding`], [`SrhError::HmacMisaligned`],
/// [`SrhError::NonZeroReserved`].
pub fn validate_area(area: &[u8], base_offset: usize, ctx: SrhContext) -> Result<(), SrhError> {
    let mut previous_was_padding = false;
    for raw in TlvIter::new(area, base_offset) {
        let raw = raw?;
        let length = u8::try_from(raw.value.len()).unwrap_or(u8::MAX);
        if raw.tlv_type == TlvType::Hmac {
            let hmac = parse_hmac(&raw)?;
            if ctx == SrhContext::Local {
                if raw.offset % 8 != 0 {
                    return Err(SrhError::HmacMisaligned { offset: raw.offset });
                }
                if hmac.reserved != 0 {
                    return Err(SrhError::NonZeroReserved { offset: raw.offset });
                }
            }
        }
        if ctx == SrhContext::Local {
            if raw.is_padding() && previous_was_padding {
                return Err(SrhError::ConsecutivePadding { offset: raw.offset });
            }
            if raw.tlv_type == TlvType::PadN {
                if length > PADN_MAX_LEN {
                    return Err(SrhError::PadNTooLong {
                        offset: raw.offset,
                        length,
                    });
                }
                if raw.value.iter().any(|&b| b != 0) {
                    return Err(SrhError::NonZeroReserved { offset: raw.offset });
                }
            }
        }
        previous_was_padding = raw.is_padding();
    }
    Ok(())
}
