//! Run-time choice of controller: [`CcKind`] (parsed from `--cc dcqcn|swift|nscc|none`) and
//! [`AnyController`], an enum that dispatches to the chosen controller.
//!
//! The hot path can stay generic over `C: Controller`; `AnyController` is for code that
//! picks the controller from configuration at run time (one `match` per call, static calls
//! in each arm, no boxing).

use core::fmt;
use core::str::FromStr;

use crate::dcqcn::{Dcqcn, DcqcnConfig};
use crate::error::{ConfigError, ParseCcKindError, check_nonzero};
use crate::fixed::{FixedWindow, FixedWindowConfig};
use crate::nscc::{Nscc, NsccConfig};
use crate::swift::{Swift, SwiftConfig, bdp_bytes};
use crate::{AckSample, Controller, Metrics};

/// Which congestion controller to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CcKind {
    /// [`Dcqcn`] with [`DcqcnConfig::for_link`]: the NVIDIA ConnectX firmware reaction
    /// point and a 4 x BDP window.
    Dcqcn,
    /// [`Dcqcn`] as a RoCE NIC runs it on a lossless (PFC) fabric: the NVIDIA ConnectX
    /// firmware reaction point ([`DcqcnConfig::nvidia_connectx`]) and no window, rate
    /// only. The simulator's RoCE baseline (`mrc-sim experiment incast-victim`); not a
    /// `--cc` choice (`"dcqcn-roce"` in reports), since without PFC a rate-only sender
    /// overruns the buffers ([`DcqcnConfig::for_link`] says by how much).
    DcqcnRoce,
    /// [`Dcqcn`] with the parameters of the DCQCN paper (Zhu et al., SIGCOMM 2015,
    /// [`DcqcnConfig::paper`]) and no window, rate only: the paper's own setting, a
    /// lossless (PFC) fabric. The simulator's second RoCE baseline, beside
    /// [`CcKind::DcqcnRoce`] (the [`crate::dcqcn`] module docs compare the two parameter
    /// sets); not a `--cc` choice (`"dcqcn-roce-paper"` in reports), for the same reason.
    DcqcnRocePaper,
    /// [`Swift`] with [`SwiftConfig::for_link`].
    Swift,
    /// [`Nscc`] with [`NsccConfig::for_link`].
    Nscc,
    /// [`FixedWindow`]: no congestion control.
    None,
}

impl CcKind {
    /// Every kind, in the order of the `--cc` help text.
    pub const ALL: [CcKind; 4] = [CcKind::Dcqcn, CcKind::Swift, CcKind::Nscc, CcKind::None];

    /// The `--cc` spelling: `"dcqcn"`, `"swift"`, `"nscc"` or `"none"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CcKind::Dcqcn => "dcqcn",
            CcKind::DcqcnRoce => "dcqcn-roce",
            CcKind::DcqcnRocePaper => "dcqcn-roce-paper",
            CcKind::Swift => "swift",
            CcKind::Nscc => "nscc",
            CcKind::None => "none",
        }
    }
}

impl fmt::Display for CcKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CcKind {
    type Err = ParseCcKindError;

    /// Parses `dcqcn`, `swift`, `nscc` or `none` (ASCII case-insensitive, no surrounding
    /// whitespace); anything else is a [`ParseCcKindError`] holding the input.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CcKind::ALL
            .into_iter()
            .find(|kind| kind.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseCcKindError { name: s.to_owned() })
    }
}

/// What the default presets need to know about the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkParams {
    /// Line rate of the sender's port, bits per second.
    pub line_rate_bps: u64,
    /// Unloaded RTT of the path, ns.
    pub base_rtt_ns: u64,
    /// Payload bytes of a full packet.
    pub mtu_bytes: u64,
    /// Whether the fabric trims packets instead of dropping them (NSCC then targets 3/4 of
    /// the base RTT).
    pub trimming_enabled: bool,
}

/// One of the controllers, chosen at run time; implements [`Controller`] by dispatch.
#[derive(Clone, Debug)]
pub enum AnyController {
    /// DCQCN.
    Dcqcn(Dcqcn),
    /// Swift-style delay controller.
    Swift(Swift),
    /// NSCC.
    Nscc(Nscc),
    /// Fixed window (`--cc none`).
    Fixed(FixedWindow),
}

impl AnyController {
    /// Builds `kind` with its default preset for `link`: DCQCN [`DcqcnConfig::for_link`],
    /// the RoCE DCQCNs [`DcqcnConfig::nvidia_connectx`] (`dcqcn-roce`) and
    /// [`DcqcnConfig::paper`] (`dcqcn-roce-paper`) without a window, Swift
    /// [`SwiftConfig::for_link`], NSCC [`NsccConfig::for_link`], and for `none` a fixed
    /// window of twice the BDP (at least one MTU).
    ///
    /// Errors: [`ConfigError::Zero`] for a zero line rate, base RTT or MTU, or whatever the
    /// preset's `build` rejects.
    pub fn new(kind: CcKind, link: &LinkParams) -> Result<Self, ConfigError> {
        check_nonzero("line_rate_bps", link.line_rate_bps)?;
        check_nonzero("base_rtt_ns", link.base_rtt_ns)?;
        check_nonzero("mtu_bytes", link.mtu_bytes)?;
        Ok(match kind {
            CcKind::Dcqcn => AnyController::Dcqcn(
                DcqcnConfig::for_link(link.line_rate_bps, link.base_rtt_ns, link.mtu_bytes)
                    .build()?,
            ),
            CcKind::DcqcnRoce => {
                AnyController::Dcqcn(DcqcnConfig::nvidia_connectx(link.line_rate_bps).build()?)
            }
            CcKind::DcqcnRocePaper => {
                AnyController::Dcqcn(DcqcnConfig::paper(link.line_rate_bps).build()?)
            }
            CcKind::Swift => AnyController::Swift(
                SwiftConfig::for_link(link.line_rate_bps, link.base_rtt_ns, link.mtu_bytes)
                    .build()?,
            ),
            CcKind::Nscc => AnyController::Nscc(
                NsccConfig::for_link(
                    link.line_rate_bps,
                    link.base_rtt_ns,
                    link.mtu_bytes,
                    link.trimming_enabled,
                )
                .build()?,
            ),
            CcKind::None => AnyController::Fixed(
                FixedWindowConfig {
                    cwnd_bytes: bdp_bytes(link.line_rate_bps, link.base_rtt_ns)
                        .saturating_mul(2)
                        .max(link.mtu_bytes),
                }
                .build(),
            ),
        })
    }

    /// The kind of the controller inside.
    pub fn kind(&self) -> CcKind {
        match self {
            AnyController::Dcqcn(_) => CcKind::Dcqcn,
            AnyController::Swift(_) => CcKind::Swift,
            AnyController::Nscc(_) => CcKind::Nscc,
            AnyController::Fixed(_) => CcKind::None,
        }
    }
}

/// Calls `$body` with `$c` bound to the controller inside `$self`: a plain `match`, so each
/// arm is a static call.
macro_rules! dispatch {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            AnyController::Dcqcn($c) => $body,
            AnyController::Swift($c) => $body,
            AnyController::Nscc($c) => $body,
            AnyController::Fixed($c) => $body,
        }
    };
}

impl From<Dcqcn> for AnyController {
    fn from(c: Dcqcn) -> Self {
        AnyController::Dcqcn(c)
    }
}

impl From<Swift> for AnyController {
    fn from(c: Swift) -> Self {
        AnyController::Swift(c)
    }
}

impl From<Nscc> for AnyController {
    fn from(c: Nscc) -> Self {
        AnyController::Nscc(c)
    }
}

impl From<FixedWindow> for AnyController {
    fn from(c: FixedWindow) -> Self {
        AnyController::Fixed(c)
    }
}

impl Controller for AnyController {
    fn on_packet_sent(&mut self, now_ns: u64, bytes: u64, bytes_in_flight: u64) {
        dispatch!(self, c => c.on_packet_sent(now_ns, bytes, bytes_in_flight))
    }
    fn on_ack(&mut self, now_ns: u64, ack: &AckSample) {
        dispatch!(self, c => c.on_ack(now_ns, ack))
    }
    fn on_trim(&mut self, now_ns: u64, bytes: u64) {
        dispatch!(self, c => c.on_trim(now_ns, bytes))
    }
    fn on_loss(&mut self, now_ns: u64, bytes: u64) {
        dispatch!(self, c => c.on_loss(now_ns, bytes))
    }
    fn on_spurious_loss(&mut self, now_ns: u64) {
        dispatch!(self, c => c.on_spurious_loss(now_ns))
    }
    fn on_cnp(&mut self, now_ns: u64) {
        dispatch!(self, c => c.on_cnp(now_ns))
    }
    fn on_timer(&mut self, now_ns: u64) {
        dispatch!(self, c => c.on_timer(now_ns))
    }
    fn next_timer_ns(&self) -> Option<u64> {
        dispatch!(self, c => c.next_timer_ns())
    }
    fn cwnd_bytes(&self) -> u64 {
        dispatch!(self, c => c.cwnd_bytes())
    }
    fn pacing_rate_bps(&self) -> u64 {
        dispatch!(self, c => c.pacing_rate_bps())
    }
    fn metrics(&self) -> Metrics {
        dispatch!(self, c => c.metrics())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: LinkParams = LinkParams {
        line_rate_bps: 100_000_000_000,
        base_rtt_ns: 12_000,
        mtu_bytes: 4096,
        trimming_enabled: false,
    };

    #[test]
    fn parses_every_kind_and_round_trips() {
        for kind in CcKind::ALL {
            assert_eq!(kind.as_str().parse::<CcKind>(), Ok(kind));
            assert_eq!(kind.to_string().parse::<CcKind>(), Ok(kind));
        }
        assert_eq!("DCQCN".parse::<CcKind>(), Ok(CcKind::Dcqcn));
        assert_eq!("none".parse::<CcKind>(), Ok(CcKind::None));
    }

    #[test]
    fn unknown_names_are_typed_errors() {
        assert_eq!(
            "cubic".parse::<CcKind>(),
            Err(ParseCcKindError {
                name: "cubic".to_owned()
            })
        );
        assert!(" swift".parse::<CcKind>().is_err());
        assert!("".parse::<CcKind>().is_err());
        assert_eq!(
            "bbr".parse::<CcKind>().unwrap_err().to_string(),
            "unknown congestion controller \"bbr\": expected one of dcqcn, swift, nscc, none"
        );
    }

    #[test]
    fn builds_each_kind_with_its_preset() {
        let dcqcn = AnyController::new(CcKind::Dcqcn, &LINK).unwrap();
        assert_eq!(dcqcn.kind(), CcKind::Dcqcn);
        assert_eq!(dcqcn.cwnd_bytes(), 600_000); // 4 BDP
        assert_eq!(dcqcn.pacing_rate_bps(), 100_000_000_000);

        // The RoCE presets: rate only. The firmware's first cut keeps 1 - 1023/2048 of the
        // line rate, the paper's (alpha 1) half of it.
        for (kind, name, cut_bps) in [
            (CcKind::DcqcnRoce, "dcqcn-roce", 50_048_828_125),
            (CcKind::DcqcnRocePaper, "dcqcn-roce-paper", 50_000_000_000),
        ] {
            let mut roce = AnyController::new(kind, &LINK).unwrap();
            assert_eq!(kind.as_str(), name);
            assert!(name.parse::<CcKind>().is_err(), "not a --cc choice");
            assert_eq!(roce.cwnd_bytes(), u64::MAX);
            assert_eq!(roce.pacing_rate_bps(), 100_000_000_000);
            roce.on_cnp(0);
            assert_eq!(roce.pacing_rate_bps(), cut_bps);
        }
        // Their increase timers: the paper's T = 55 us, the firmware's 300 us (its 1 us
        // alpha period comes first).
        let mut paper = AnyController::new(CcKind::DcqcnRocePaper, &LINK).unwrap();
        paper.on_cnp(0);
        assert_eq!(paper.next_timer_ns(), Some(55_000));

        let swift = AnyController::new(CcKind::Swift, &LINK).unwrap();
        assert_eq!(swift.kind(), CcKind::Swift);
        assert_eq!(swift.cwnd_bytes(), 150_000); // one BDP
        assert_eq!(swift.pacing_rate_bps(), u64::MAX);

        let nscc = AnyController::new(CcKind::Nscc, &LINK).unwrap();
        assert_eq!(nscc.kind(), CcKind::Nscc);
        assert_eq!(nscc.cwnd_bytes(), 300_000); // BDP at base RTT + target = 2 BDP

        let none = AnyController::new(CcKind::None, &LINK).unwrap();
        assert_eq!(none.kind(), CcKind::None);
        assert_eq!(none.cwnd_bytes(), 300_000); // 2 BDP
    }

    #[test]
    fn dispatch_reaches_the_inner_controller() {
        let mut cc = AnyController::new(CcKind::Dcqcn, &LINK).unwrap();
        cc.on_cnp(0);
        // Firmware preset: alpha 1023/1024, so the cut keeps 1 - 1023/2048 of 100 Gb/s.
        assert_eq!(cc.pacing_rate_bps(), 50_048_828_125);
        // The 1 us alpha period is the next timer, the 300 us increase timer after it.
        assert_eq!(cc.next_timer_ns(), Some(1_000));
        cc.on_timer(300_000);
        // One fast-recovery step: halfway back to R_T = 100 Gb/s, rounded up.
        assert_eq!(cc.pacing_rate_bps(), 75_024_414_063);
        assert_eq!(cc.metrics().cnps_received, 1);
    }

    #[test]
    fn zero_link_parameters_are_rejected() {
        let bad = LinkParams {
            base_rtt_ns: 0,
            ..LINK
        };
        assert_eq!(
            AnyController::new(CcKind::Swift, &bad).unwrap_err(),
            ConfigError::Zero {
                field: "base_rtt_ns"
            }
        );
    }
}
