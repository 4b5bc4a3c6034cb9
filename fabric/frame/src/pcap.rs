//! pcap output (libpcap format, LINKTYPE_ETHERNET, nanosecond timestamps) through the
//! `pcap-file` crate, for the simulator and tests; tshark and Wireshark read the files.

use std::io::Write;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

/// Largest frame written whole (snaplen), in bytes.
pub const SNAPLEN_BYTES: u32 = 65_535;

/// Writes Ethernet frames with virtual-time timestamps to a pcap stream.
pub struct EthernetPcapWriter<W: Write> {
    inner: PcapWriter<W>,
    frames_written: u64,
}

impl<W: Write> EthernetPcapWriter<W> {
    /// Start a pcap stream on `writer` (writes the 24-byte global header: version 2.4,
    /// LINKTYPE_ETHERNET, nanosecond resolution, snaplen 65535, little-endian).
    ///
    /// Errors: [`PcapError`] from the writer.
    pub fn new(writer: W) -> Result<Self, PcapError> {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: SNAPLEN_BYTES,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
        };
        Ok(EthernetPcapWriter {
            inner: PcapWriter::with_header(writer, header)?,
            frames_written: 0,
        })
    }

    /// Append one frame (no FCS) seen at `time_ns` nanoseconds of virtual time. Frames longer
    /// than the snaplen are cut to it, with the original length recorded.
    ///
    /// Errors: [`PcapError`] from the writer, or a time beyond the pcap range (2^32 s).
    pub fn write_frame(&mut self, time_ns: u64, frame: &[u8]) -> Result<(), PcapError> {
        let orig_len = u32::try_from(frame.len())
            .map_err(|_| PcapError::InvalidField("frame longer than u32::MAX"))?;
        let captured = &frame[..frame.len().min(SNAPLEN_BYTES as usize)];
        let packet = PcapPacket::new(Duration::from_nanos(time_ns), orig_len, captured);
        self.inner.write_packet(&packet)?;
        self.frames_written += 1;
        Ok(())
    }

    /// Frames written so far.
    pub fn frames_written(&self) -> u64 {
        self.frames_written
    }

    /// Finish and hand back the underlying writer.
    pub fn into_inner(self) -> W {
        self.inner.into_writer()
    }
}
