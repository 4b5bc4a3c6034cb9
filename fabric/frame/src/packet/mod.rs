//! Packet building and parsing for the simulator and the raw datapaths:
//! Ethernet / IPv6 / optional SRH / UDP / payload.
//!
//! - [`ipv6_udp`]: [`Ipv6UdpRepr`], IPv6 + optional SRH + UDP with payload_len, UDP length and
//!   UDP checksum computed (never copied from the caller).
//! - [`checksum`]: the UDP-over-IPv6 checksum (RFC 1071 deferred-carry sum).
//! - [`ethernet`]: [`EthernetFrameRepr`], the same behind a 14-byte Ethernet II header.
//!
//! Field access goes through `pnet_packet` views; every length is checked before use, and
//! every malformed input gives a typed [`PacketError`].

pub mod checksum;
pub mod ethernet;
pub mod ipv6_udp;

pub use ethernet::EthernetFrameRepr;
pub use ipv6_udp::{ChecksumCheck, Ipv6UdpRepr};

use crate::srv6::SrhError;

/// Why a packet could not be parsed or emitted. Allocation-free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PacketError {
    /// Fewer bytes than a header needs.
    #[error("{header} truncated: need {needed_bytes} bytes, have {available_bytes}")]
    Truncated {
        /// Which header: "Ethernet", "IPv6" or "UDP".
        header: &'static str,
        /// Bytes the header needs.
        needed_bytes: usize,
        /// Bytes present.
        available_bytes: usize,
    },
    /// The Ethernet frame does not carry IPv6 (EtherType != 0x86DD).
    #[error("EtherType {ethertype:#06x} is not IPv6")]
    NotIpv6EtherType {
        /// The EtherType found.
        ethertype: u16,
    },
    /// The IP version nibble is not 6.
    #[error("IP version {version}, expected 6")]
    NotIpv6 {
        /// The version found.
        version: u8,
    },
    /// IPv6 payload_len claims more bytes than the buffer holds after the fixed header.
    #[error("IPv6 payload_len {payload_len_bytes} beyond the {available_bytes} bytes present")]
    PayloadLenBeyondBuffer {
        /// The Payload Length field.
        payload_len_bytes: u16,
        /// Bytes after the 40-byte IPv6 header.
        available_bytes: usize,
    },
    /// The header chain holds something other than an SRH followed by UDP.
    #[error("unsupported next header {next_header}")]
    UnsupportedNextHeader {
        /// The protocol number found.
        next_header: u8,
    },
    /// The Routing header is malformed or not an SRH.
    #[error("SRH: {0}")]
    Srh(#[from] SrhError),
    /// The UDP length does not equal the bytes left in the IPv6 payload after the SRH.
    #[error("UDP length {udp_len_bytes} != {ip_remaining_bytes} bytes left in the IPv6 payload")]
    UdpLengthMismatch {
        /// The UDP Length field.
        udp_len_bytes: u16,
        /// Bytes of the IPv6 payload after the extension headers.
        ip_remaining_bytes: usize,
    },
    /// A packet given in two parts whose first part does not end where the UDP payload
    /// starts ([`Ipv6UdpRepr::parse_split`]).
    #[error("split after {head_bytes} bytes, but the UDP payload starts at {payload_off}")]
    SplitNotAtPayload {
        /// Bytes of the first part.
        head_bytes: usize,
        /// Offset of the UDP payload the headers give.
        payload_off: usize,
    },
    /// UDP checksum 0, which IPv6 receivers must discard (RFC 8200 section 8.1).
    #[error("UDP checksum is zero")]
    UdpZeroChecksum,
    /// The UDP checksum does not match the pseudo-header (final destination) and datagram.
    #[error("UDP checksum {found:#06x}, expected {expected:#06x}")]
    UdpChecksumMismatch {
        /// Checksum computed over the received bytes.
        expected: u16,
        /// Checksum field found.
        found: u16,
    },
    /// The flow label does not fit its 20 bits.
    #[error("flow label {flow_label:#x} exceeds 20 bits")]
    FlowLabelOutOfRange {
        /// The flow label given.
        flow_label: u32,
    },
    /// The SRH's next_header must be UDP (17) in an [`Ipv6UdpRepr`].
    #[error("SRH next header {next_header}, expected UDP (17)")]
    SrhNextHeaderNotUdp {
        /// The SRH Repr's next_header.
        next_header: u8,
    },
    /// The IPv6 payload (SRH + UDP header + payload) exceeds 65535 bytes.
    #[error("IPv6 payload of {len_bytes} bytes exceeds 65535")]
    PayloadTooLong {
        /// The length it would have.
        len_bytes: usize,
    },
    /// The output buffer is too small.
    #[error("emit needs {needed_bytes} bytes, buffer has {available_bytes}")]
    BufferTooSmall {
        /// Bytes emit needs.
        needed_bytes: usize,
        /// Bytes the buffer has.
        available_bytes: usize,
    },
}
