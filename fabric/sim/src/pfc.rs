//! Priority-based Flow Control (PFC, IEEE 802.1Qbb) in the simulator: a lossless class
//! whose switches pause their upstream before a buffer can overflow.
//!
//! What is modelled:
//! - **Classes.** Data frames (the port's normal queue, [`super::queue`]) form the lossless
//!   class, 802.1p priority [`PfcConfig::priority`] (3 by default, as RoCE deployments
//!   use); control frames and trimmed headers (the strict-priority queue) form a lossy
//!   class that is never paused, as CNPs and ACKs on their own priority are.
//! - **Ingress accounting.** Each switch counts, per ingress port, the lossless-class bytes
//!   that came in on that port and still sit in any of its egress queues (from admission
//!   until the frame starts serialising out).
//! - **XOFF / XON.** When an ingress port's count goes above [`PfcConfig::xoff_bytes`] the
//!   switch sends a PAUSE to the upstream transmitter of that link with
//!   [`PfcConfig::pause_quanta`], and sends it again every half pause time while the count
//!   stays above [`PfcConfig::xon_bytes`]; when the count falls to `xon_bytes` or below it
//!   sends a PAUSE with quanta 0 (XON: resume at once).
//! - **Quanta.** One quantum is 512 bit times at the link's rate (802.3 Annex 31B/802.1Qbb):
//!   65535 quanta at 100 Gb/s are 335.5 us. A paused transmitter resumes on XON or when its
//!   pause time expires, whichever comes first; a PAUSE received while paused restarts the
//!   pause time from its arrival.
//! - **Headroom.** After the switch decides XOFF, bytes keep coming: the frame its own
//!   port is serialising delays the PAUSE (one MTU frame), the PAUSE itself (64 bytes)
//!   and its propagation, the frame the upstream has started (one MTU frame), and what is
//!   already on the wire (propagation). [`headroom_bytes`] is
//!   `2 x propagation x rate / 8 + 2 x MTU frame + 64`. [`PfcConfig::check_buffer`] refuses
//!   a port buffer that cannot hold `(ports - 1) x (xoff + headroom)` bytes, so in lossless
//!   mode no egress queue can overflow (the simulator still counts a drop if one did, and
//!   tests and experiments assert there is none).
//! - **Hop by hop.** A paused switch port holds its frames; its queue grows; the ingress
//!   counts of the ports those frames came in on grow; those pause their upstream in turn,
//!   up to the sending hosts.
//! - **Hosts** honour PAUSE: a paused NIC stops asking its endpoints for frames (its single
//!   transmit queue is paused as a whole, control frames included). Hosts consume at line
//!   rate and send no PAUSE, unless a PFC storm makes one's receiver stuck
//!   ([`crate::Simulator::pfc_storm`]): its NIC then PAUSEs its leaf for good.
//! - **Counters** per port and priority ([`PfcPortStats`]): PAUSE and XON frames sent and
//!   received, time paused, the largest ingress count.
//!
//! Not modelled: PAUSE frames do not use link bandwidth in the counters and are not subject
//! to link faults; a PAUSE waits only for the frame in transmission on its port (it goes
//! ahead of every queued frame, as MAC control frames do); no shared-buffer pool (each
//! egress port has its own [`super::QueueConfig::buffer_bytes`]); no PFC watchdog.

use serde::Serialize;

use super::link::serialisation_ns_ceil;

/// Bytes of a PAUSE frame on the wire (the 64-byte minimum Ethernet frame).
pub const PAUSE_FRAME_BYTES: usize = 64;
/// Bit times in one pause quantum (IEEE 802.1Qbb, 802.3 Annex 31B).
pub const QUANTUM_BITS: u64 = 512;

/// PFC settings of a lossless fabric (every switch and host port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PfcConfig {
    /// 802.1p priority of the lossless (data) class, 0..=7; it labels the counters.
    pub priority: u8,
    /// XOFF threshold: a switch pauses the upstream of an ingress port whose queued
    /// lossless bytes exceed this, bytes.
    pub xoff_bytes: u64,
    /// XON threshold: it resumes the upstream when they fall to this or below, bytes
    /// (< `xoff_bytes`).
    pub xon_bytes: u64,
    /// Pause time carried by each PAUSE, quanta of 512 bit times (> 0).
    pub pause_quanta: u16,
}

impl Default for PfcConfig {
    /// Priority 3, XOFF at 64 KiB, XON at 32 KiB, the maximum pause of 65535 quanta.
    fn default() -> Self {
        PfcConfig {
            priority: 3,
            xoff_bytes: 64 << 10,
            xon_bytes: 32 << 10,
            pause_quanta: u16::MAX,
        }
    }
}

/// Why a [`PfcConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PfcError {
    /// `xon_bytes >= xoff_bytes`, or a priority above 7, or 0 quanta.
    #[error(
        "PFC thresholds: need xon ({xon_bytes}) < xoff ({xoff_bytes}), priority <= 7, quanta > 0"
    )]
    Thresholds {
        /// XOFF, bytes.
        xoff_bytes: u64,
        /// XON, bytes.
        xon_bytes: u64,
    },
    /// A PFC storm ([`crate::Simulator::pfc_storm`]) on a run without PFC.
    #[error("a PFC storm needs PFC on (SimConfig::pfc)")]
    Off,
    /// A port buffer smaller than the bytes PFC lets its ingress ports queue in it.
    #[error(
        "PFC: a port buffer of {have_bytes} bytes cannot hold {need_bytes} bytes \
         ((ports - 1) x (xoff + headroom)): frames could be dropped"
    )]
    Buffer {
        /// What lossless operation needs, bytes.
        need_bytes: u64,
        /// [`super::QueueConfig::buffer_bytes`].
        have_bytes: u64,
    },
}

impl PfcConfig {
    /// Pause time of `quanta` on a link of `rate_bps`, ns (rounded up).
    pub fn pause_ns(quanta: u16, rate_bps: u64) -> u64 {
        (u128::from(quanta) * u128::from(QUANTUM_BITS) * 1_000_000_000)
            .div_ceil(u128::from(rate_bps.max(1))) as u64
    }

    /// Checks the thresholds.
    ///
    /// Errors: [`PfcError::Thresholds`].
    pub fn check(&self) -> Result<(), PfcError> {
        if self.xon_bytes >= self.xoff_bytes || self.priority > 7 || self.pause_quanta == 0 {
            return Err(PfcError::Thresholds {
                xoff_bytes: self.xoff_bytes,
                xon_bytes: self.xon_bytes,
            });
        }
        Ok(())
    }

    /// Checks that a switch with `ports` ports, the largest headroom among them
    /// `max_headroom_bytes`, can never overflow an egress buffer of `buffer_bytes`.
    ///
    /// Errors: [`PfcError::Buffer`].
    pub fn check_buffer(
        &self,
        ports: usize,
        max_headroom_bytes: u64,
        buffer_bytes: u64,
    ) -> Result<(), PfcError> {
        let need = (ports.saturating_sub(1) as u64)
            .saturating_mul(self.xoff_bytes.saturating_add(max_headroom_bytes));
        if need > buffer_bytes {
            return Err(PfcError::Buffer {
                need_bytes: need,
                have_bytes: buffer_bytes,
            });
        }
        Ok(())
    }
}

/// Headroom of an ingress port on a link of `rate_bps` and `propagation_ns` carrying
/// frames of at most `mtu_frame_bytes`: what can still arrive after the XOFF decision,
/// `2 x propagation x rate / 8 + 2 x MTU frame + 64` bytes (rounded up).
pub fn headroom_bytes(rate_bps: u64, propagation_ns: u64, mtu_frame_bytes: u64) -> u64 {
    let wire = (2 * u128::from(propagation_ns) * u128::from(rate_bps)).div_ceil(8_000_000_000);
    wire as u64 + 2 * mtu_frame_bytes + PAUSE_FRAME_BYTES as u64
}

/// PFC counters of one port for the lossless priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PfcPortStats {
    /// PAUSE frames with quanta > 0 this port sent upstream (refreshes included).
    pub pauses_sent: u64,
    /// PAUSE frames with quanta 0 (XON) this port sent.
    pub xons_sent: u64,
    /// PAUSE frames with quanta > 0 this port received.
    pub pauses_received: u64,
    /// XON frames this port received.
    pub xons_received: u64,
    /// Time this port's transmitter was paused, ns.
    pub paused_ns: u64,
    /// Largest lossless-class ingress count of this port, bytes.
    pub max_ingress_bytes: u64,
}

/// PFC state of one port: its ingress side (accounting, XOFF sent) and its transmit side
/// (paused until).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PfcPort {
    /// Lossless bytes that came in on this port and are still queued in the node.
    pub ingress_bytes: u64,
    /// This port has paused its upstream (XOFF sent, no XON since).
    pub xoff: bool,
    /// When the next PAUSE refresh is due, ns (valid while `xoff`).
    pub refresh_at_ns: u64,
    /// Headroom of this port's link, bytes.
    pub headroom_bytes: u64,
    /// When the frame this port is serialising ends, ns.
    pub tx_end_ns: u64,
    /// Since when the transmitter is paused (None: not paused; the pause's end is the
    /// port's `paused_until_ns` in the simulator's port table).
    pub paused_since_ns: Option<u64>,
    /// Counters.
    pub stats: PfcPortStats,
}

/// When a PAUSE sent by a port at `now_ns` arrives at the other end: after the frame the
/// port is serialising (`tx_end_ns`), the PAUSE's own serialisation and the propagation.
pub(crate) fn pause_arrival_ns(
    now_ns: u64,
    tx_end_ns: u64,
    rate_bps: u64,
    propagation_ns: u64,
) -> u64 {
    now_ns.max(tx_end_ns) + serialisation_ns_ceil(PAUSE_FRAME_BYTES, rate_bps) + propagation_ns
}

/// A port's PFC line in the report.
#[derive(Clone, Debug, Serialize)]
pub struct PfcPortReport {
    /// Node name.
    pub node: String,
    /// Port number.
    pub port: u16,
    /// Name of the node at the other end.
    pub peer: String,
    /// 802.1p priority of the counters.
    pub priority: u8,
    /// Headroom of the port's ingress, bytes.
    pub headroom_bytes: u64,
    /// The port's transmitter is paused at the end of the run, without a break since this
    /// time, ns (`None`: not paused). A pause that lasts ms while PAUSE refreshes keep
    /// coming is a deadlock.
    pub paused_since_ns: Option<u64>,
    /// Counters.
    pub stats: PfcPortStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quanta_and_headroom_arithmetic() {
        // 65535 x 512 bits at 100 Gb/s = 335,539.2 ns, rounded up.
        assert_eq!(PfcConfig::pause_ns(u16::MAX, 100_000_000_000), 335_540);
        assert_eq!(PfcConfig::pause_ns(1, 100_000_000_000), 6); // 5.12 ns
        assert_eq!(PfcConfig::pause_ns(1, 25_000_000_000), 21); // 20.48 ns
        // 500 ns at 100 Gb/s each way: 12,500 bytes; 2 x 4210 + 64.
        assert_eq!(headroom_bytes(100_000_000_000, 500, 4_210), 20_984);
        // 64 bytes at 100 Gb/s: 5.12 -> 6 ns, after the frame in transmission.
        assert_eq!(pause_arrival_ns(100, 400, 100_000_000_000, 500), 906);
        assert_eq!(pause_arrival_ns(100, 0, 100_000_000_000, 500), 606);
    }

    #[test]
    fn config_checks() {
        assert_eq!(PfcConfig::default().check(), Ok(()));
        let bad = PfcConfig {
            xon_bytes: 64 << 10,
            ..PfcConfig::default()
        };
        assert_eq!(
            bad.check(),
            Err(PfcError::Thresholds {
                xoff_bytes: 64 << 10,
                xon_bytes: 64 << 10
            })
        );
        let c = PfcConfig::default();
        // 7 x (65536 + 20984) = 605,640.
        assert_eq!(c.check_buffer(8, 20_984, 605_640), Ok(()));
        assert_eq!(
            c.check_buffer(8, 20_984, 605_639),
            Err(PfcError::Buffer {
                need_bytes: 605_640,
                have_bytes: 605_639
            })
        );
    }
}
