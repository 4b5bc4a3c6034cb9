//! The controller API (`mrc_ctl.h`) mapped onto mrc: EV format profiles, EV profiles
//! (AUTO, EXP explicit arrays, GEN generated from fields), per-EV states (DENIED onto the
//! transport's [`mrc_transport::Connection::set_ev_denied`]), EV events, and CC profiles
//! (UET NSCC onto [`mrc_congestion::NsccConfig`]). Pure: the profile tables, their state
//! machines and the mappings, with no device; the `ffi` layer copies the C structs in and
//! out and the runtime applies what a QP's profiles say.
//!
//! Profiles live in the process (one [`Registry`], [`registry`]): a controller programs
//! them for the QPs of its own process. Profile id 0 is the provider's default (16 EVs,
//! no congestion control) and cannot be modified.
//!
//! EV values: STEV and UDP EVs are the `u32` in the first 4 bytes of `mrc_ctl_ev_t`
//! (native byte order, as the published examples `memcpy` a `uint32_t` there) and become
//! the transport's 32-bit EV unchanged (mrc's MRCETH carries it; the verbs datapath derives
//! the flow label, hence the UDP source port, from its low 14 bits). SRV6 EVs are two
//! IPv6 addresses (a uSID destination, bytes 0..16, and one SRH segment, bytes 16..32,
//! zero for none) and become a segment list per EV ([`srv6_srh`]), which the UDP and raw
//! datapaths carry; lib_mrc.so's verbs datapath cannot (the device builds the IPv6
//! header), so a QP of an SRV6 profile is refused there with `EOPNOTSUPP`.

//!
//! Ports and planes: an EV's `port` (`struct mrc_ctl_ev`, 1-based) names the plane it
//! leaves from. A context has one port per plane: port 1 is its device, ports 2, 3, ...
//! the devices `MRC_PLANE_DEVICES` names, in order (`phy_port_mask` reports them). EXP
//! arrays take the ports the controller gives (REPLACE_EV: `1..=` the controller's
//! context's ports); AUTO and GEN EVs are spread over the controller's context's ports
//! when the array is made (EV `i` on port `1 + i mod ports`, [`spread_port`]); a QP puts
//! each EV on its port's plane ([`ev_planes`]) and refuses at RTS a profile whose ports
//! its context lacks or whose planes would go without EVs or unevenly ([`PlaneError`]).
//! Profile 0 has no ports of its own: the transport interleaves its 16 EVs over the
//! QP's planes. On one plane nothing changes: every port is 1.

use crate::store::{Poll, Store, Tables};
use mrc_congestion::{LinkParams, NsccConfig};
use mrc_fabric::srv6::SrhRepr;
use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv6Addr;
use std::sync::Mutex;

/// Why a call is refused: the errno it sets.
pub type Errno = i32;

/// Controller API versions (`mrc_ctl_api_ver.h`).
pub mod version {
    /// `MRC_CTL_API_CURRENT_VERSION`: 1.0.1.
    pub const CURRENT: u32 = crate::abi::api_ver(1, 0, 1);
    /// `MRC_CTL_API_LAST_SUPPORTED_VERSION`: 0.0.0.
    pub const LAST_SUPPORTED: u32 = crate::abi::api_ver(0, 0, 0);
    /// `MRC_CTL_VENDOR_API_CURRENT_VERSION`: 1.0.0.
    pub const VENDOR_CURRENT: u32 = crate::abi::api_ver(1, 0, 0);
    /// `MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION`: 0.0.0.
    pub const VENDOR_LAST_SUPPORTED: u32 = crate::abi::api_ver(0, 0, 0);
}

/// `MRC_CTL_EV_MAX_BYTES`.
pub const EV_MAX_BYTES: usize = 32;

/// `enum mrc_ctl_ev_state`.
pub mod ev_state {
    /// `MRC_CTL_EV_GOOD`.
    pub const GOOD: u32 = 1 << 0;
    /// `MRC_CTL_EV_ASSUMED_BAD`.
    pub const ASSUMED_BAD: u32 = 1 << 1;
    /// `MRC_CTL_EV_DENIED`.
    pub const DENIED: u32 = 1 << 2;
    /// `MRC_CTL_EV_UNKNOWN`.
    pub const UNKNOWN: u32 = 1 << 31;
}

/// `enum mrc_ctl_ev_fmt_mode`.
pub mod fmt_mode {
    /// `MRC_CTL_EV_FMT_MODE_STEV`: flow label + UDP source port.
    pub const STEV: u32 = 1 << 0;
    /// `MRC_CTL_EV_FMT_MODE_SRV6`: uSID destination with an optional SRH.
    pub const SRV6: u32 = 1 << 1;
    /// `MRC_CTL_EV_FMT_MODE_UDP`: UDP source port only.
    pub const UDP: u32 = 1 << 2;
    /// Every mode.
    pub const ALL: u32 = STEV | SRV6 | UDP;
}

/// `enum mrc_ctl_ev_mode`.
pub mod ev_mode {
    /// `MRC_CTL_EV_MODE_AUTO`: the provider's EVs.
    pub const AUTO: u32 = 1 << 0;
    /// `MRC_CTL_EV_MODE_EXP`: an explicit array.
    pub const EXP: u32 = 1 << 1;
    /// `MRC_CTL_EV_MODE_GEN`: generated from the fields.
    pub const GEN: u32 = 1 << 2;
    /// Every mode.
    pub const ALL: u32 = AUTO | EXP | GEN;
}

/// `enum mrc_ctl_attr_opt`.
pub mod opt {
    /// `MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE`.
    pub const EV_PROFILE_MODIFY_ONLINE: u32 = 1 << 0;
    /// `MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE`.
    pub const CC_PROFILE_MODIFY_ONLINE: u32 = 1 << 1;
    /// `MRC_CTL_OPT_CAP_EV_EVENT`.
    pub const EV_EVENT: u32 = 1 << 2;
    /// `MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE`.
    pub const EV_EXPLICIT_RANGE: u32 = 1 << 3;
    /// `MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT`.
    pub const EV_EVENT_PRECISE_DROP_CNT: u32 = 1 << 4;
    /// `MRC_CTL_OPT_CAP_EP_OP_EV_PROBE`.
    pub const EP_OP_EV_PROBE: u32 = 1 << 5;
}

/// Attribute masks of the three profile kinds and of the port.
pub mod mask {
    /// `MRC_CTL_EV_FMT_PROFILE_STATE`.
    pub const FMT_STATE: u32 = 1 << 0;
    /// `MRC_CTL_EV_FMT_PROFILE_CUR_STATE`.
    pub const FMT_CUR_STATE: u32 = 1 << 1;
    /// `MRC_CTL_EV_FMT_PROFILE_MODE`.
    pub const FMT_MODE: u32 = 1 << 2;
    /// `MRC_CTL_EV_FMT_PROFILE_OP`.
    pub const FMT_OP: u32 = 1 << 3;
    /// `MRC_CTL_EV_FMT_VENDOR_CFG`.
    pub const FMT_VENDOR_CFG: u32 = 1 << 31;
    /// `MRC_CTL_EV_PROFILE_STATE`.
    pub const EV_STATE: u32 = 1 << 0;
    /// `MRC_CTL_EV_PROFILE_CUR_STATE`.
    pub const EV_CUR_STATE: u32 = 1 << 1;
    /// `MRC_CTL_EV_PROFILE_MODE`.
    pub const EV_MODE: u32 = 1 << 2;
    /// `MRC_CTL_EV_PROFILE_FMT_ID`.
    pub const EV_FMT_ID: u32 = 1 << 3;
    /// `MRC_CTL_EV_PROFILE_COUNT`.
    pub const EV_COUNT: u32 = 1 << 4;
    /// `MRC_CTL_EV_PROFILE_MIN_ACTIVE`.
    pub const EV_MIN_ACTIVE: u32 = 1 << 5;
    /// `MRC_CTL_EV_PROFILE_EVENT_MASK`.
    pub const EV_EVENT_MASK: u32 = 1 << 6;
    /// `MRC_CTL_EV_PROFILE_EV_OP`.
    pub const EV_OP: u32 = 1 << 7;
    /// `MRC_CTL_EV_PROFILE_EV_FIELDS_OP`.
    pub const EV_FIELDS_OP: u32 = 1 << 8;
    /// `MRC_CTL_EV_PROFILE_VENDOR_CFG`.
    pub const EV_VENDOR_CFG: u32 = 1 << 31;
    /// `MRC_CTL_CC_PROFILE_STATE`.
    pub const CC_STATE: u32 = 1 << 0;
    /// `MRC_CTL_CC_PROFILE_CUR_STATE`.
    pub const CC_CUR_STATE: u32 = 1 << 1;
    /// `MRC_CTL_CC_PROFILE_ALGORITHM`.
    pub const CC_ALGORITHM: u32 = 1 << 2;
    /// `MRC_CTL_CC_PROFILE_CONFIG`.
    pub const CC_CONFIG: u32 = 1 << 3;
    /// `MRC_CTL_CC_PROFILE_VENDOR_CFG`.
    pub const CC_VENDOR_CFG: u32 = 1 << 31;
    /// `MRC_CTL_PORT_ADMIN_STATE`.
    pub const PORT_ADMIN_STATE: u32 = 1 << 0;
}

/// `enum mrc_ctl_ev_op`.
pub mod ev_op {
    /// `MRC_CTL_EV_OP_REPLACE_EV`.
    pub const REPLACE_EV: u32 = 0;
    /// `MRC_CTL_EV_OP_MODIFY_EV_STATE`.
    pub const MODIFY_EV_STATE: u32 = 1;
    /// `MRC_CTL_EV_OP_QUERY_EV_STATE`.
    pub const QUERY_EV_STATE: u32 = 2;
    /// `MRC_CTL_EV_OP_QUERY_EV_ARRAY`.
    pub const QUERY_EV_ARRAY: u32 = 3;
    /// `MRC_CTL_EV_OP_F_ALL_COPIES`.
    pub const F_ALL_COPIES: u32 = 1 << 0;
}

/// `enum mrc_ctl_ev_fields_op` and `enum mrc_ctl_ev_fmt_op` (same values).
pub mod fields_op {
    /// `..._OP_MODIFY_FIELDS`.
    pub const MODIFY: u32 = 0;
    /// `..._OP_QUERY_FIELDS`.
    pub const QUERY: u32 = 1;
}

/// What this provider advertises (`mrc_ctl_query_device`).
pub mod limits {
    /// EV format profiles.
    pub const MAX_FMT_PROFILES: u32 = 64;
    /// EV profiles.
    pub const MAX_EV_PROFILES: u32 = 64;
    /// EVs over all EV profiles.
    pub const MAX_EV_COUNT: u32 = 65536;
    /// EVs of one profile (the transport's path table takes up to 65535).
    pub const MAX_EV_COUNT_PROFILE: u32 = 4096;
    /// Explicit arrays: any length.
    pub const EV_COUNT_ALIGN: u32 = 1;
    /// Bits of a STEV or UDP EV (the transport's EV is 32 bits).
    pub const EV_MAX_WIDTH: u32 = 32;
    /// Bits of an expanded SRV6 EV (two IPv6 addresses).
    pub const SRV6_MAX_WIDTH: u32 = 256;
    /// Bits of a UDP-format EV (a UDP source port).
    pub const UDP_MAX_WIDTH: u32 = 16;
    /// Fields of one format or EV profile.
    pub const MAX_FIELDS: usize = 16;
    /// CC profiles.
    pub const MAX_CC_PROFILES: u32 = 64;
    /// EVs of the provider's default profile (id 0, and AUTO profiles).
    pub const DEFAULT_EVS: u32 = 16;
    /// The only port of a context on one device: port 1 (ports are 1-based).
    /// [`super::phy_port_mask`] gives a context on several planes'.
    pub const PHY_PORT_MASK: u32 = 1 << 1;
    /// Ports of one context at most: one per plane (`MRC_PLANE_DEVICES`), as many as a
    /// datapath has planes ([`mrc_fabric::udp::MAX_PLANE_IPS`]).
    pub const MAX_PORTS: u8 = mrc_fabric::udp::MAX_PLANE_IPS as u8;
    /// Optional features: EV events (drop counts precise).
    pub const OPT: u32 = super::opt::EV_EVENT | super::opt::EV_EVENT_PRECISE_DROP_CNT;
}

/// `phy_port_mask` of a context on `planes` planes (0 counts as 1): bits `1..=planes`,
/// one port per plane (port `p` is plane `p - 1`, the context's device first, then
/// `MRC_PLANE_DEVICES`' devices in order). One plane: [`limits::PHY_PORT_MASK`].
pub fn phy_port_mask(planes: u8) -> u32 {
    let n = u32::from(planes.clamp(1, limits::MAX_PORTS));
    ((1u32 << n) - 1) << 1
}

/// The port an EV the provider fills (AUTO, GEN) gets, the `i`-th of a profile made on a
/// context of `ports` ports (0 counts as 1): `1 + i mod ports`, the EVs interleaved over
/// the planes as the transport spreads the default profile's.
pub fn spread_port(i: usize, ports: u8) -> u8 {
    let n = usize::from(ports.clamp(1, limits::MAX_PORTS));
    1 + (i % n) as u8
}

/// Why the EVs of a QP's EV profile cannot be placed on its context's planes
/// ([`ev_planes`]); the QP's move to RTS fails with [`PlaneError::errno`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaneError {
    /// Transport EV number `ev` (in the profile's order) is on port `port` and the
    /// context has `planes` ports (`MRC_PLANE_DEVICES` names fewer devices).
    PortOutOfRange {
        /// Index of the EV among the QP's transport EVs.
        ev: usize,
        /// Its port (1-based).
        port: u8,
        /// The context's planes.
        planes: usize,
    },
    /// No EV of the profile is on port `plane + 1`: every plane of a context on several
    /// planes carries some of each QP's EVs (the peer sprays over as many planes).
    PlaneWithoutEv {
        /// The plane (0-based; port `plane + 1`).
        plane: usize,
    },
    /// The planes' EV counts (per plane, plane 0 first) differ by more than one: the
    /// transport splits a connection's EVs equally over its planes (docs/PLANES.md).
    Unbalanced {
        /// EVs per plane.
        counts: Vec<usize>,
    },
}

impl PlaneError {
    /// The errno a C call answers: `EINVAL`.
    pub fn errno(&self) -> Errno {
        libc::EINVAL
    }
}

impl std::fmt::Display for PlaneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlaneError::PortOutOfRange { ev, port, planes } => write!(
                f,
                "EV {ev} of the profile is on port {port} and the context has {planes} \
                 port(s), one per plane (MRC_PLANE_DEVICES)"
            ),
            PlaneError::PlaneWithoutEv { plane } => write!(
                f,
                "no EV of the profile is on port {} (plane {plane}): on several planes \
                 every port needs some of a QP's EVs",
                plane + 1
            ),
            PlaneError::Unbalanced { counts } => write!(
                f,
                "the profile's EVs per port are {counts:?}: the planes take equal shares \
                 (counts within one of each other)"
            ),
        }
    }
}

impl std::error::Error for PlaneError {}

/// The plane of each of a QP's transport EVs (`ConnConfig::ev_planes`) on a context of
/// `planes` planes, from their ports ([`QpEvs::ports`], port `p` is plane `p - 1`).
/// Empty (the transport's own placement: one plane, or EV `i` on plane `i mod planes`)
/// for one plane or for EVs without ports (profile 0).
///
/// # Errors
/// [`PlaneError::PortOutOfRange`] for a port 0 or past `planes`,
/// [`PlaneError::PlaneWithoutEv`] for a plane no EV is on and
/// [`PlaneError::Unbalanced`] for per-plane counts more than one apart (several planes
/// only).
pub fn ev_planes(ports: &[u8], planes: usize) -> Result<Vec<u8>, PlaneError> {
    let planes = planes.max(1);
    if let Some((ev, &port)) = ports
        .iter()
        .enumerate()
        .find(|(_, p)| **p == 0 || usize::from(**p) > planes)
    {
        return Err(PlaneError::PortOutOfRange { ev, port, planes });
    }
    if planes == 1 || ports.is_empty() {
        return Ok(Vec::new());
    }
    let out: Vec<u8> = ports.iter().map(|p| p - 1).collect();
    let counts: Vec<usize> = (0..planes)
        .map(|q| out.iter().filter(|&&p| usize::from(p) == q).count())
        .collect();
    if let Some(plane) = counts.iter().position(|&n| n == 0) {
        return Err(PlaneError::PlaneWithoutEv { plane });
    }
    let (lo, hi) = (counts.iter().min(), counts.iter().max());
    if hi.zip(lo).is_some_and(|(h, l)| h - l > 1) {
        return Err(PlaneError::Unbalanced { counts });
    }
    Ok(out)
}

/// The one CC algorithm string (`device_attr.cc.algorithms`).
pub const NSCC_ALGORITHM: &str = "uet-1.0-nscc";

/// `enum mrc_ctl_profile_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProfileState {
    /// `MRC_CTL_PROFILE_INIT` (0).
    #[default]
    Init,
    /// `MRC_CTL_PROFILE_OFFLINE` (1).
    Offline,
    /// `MRC_CTL_PROFILE_ONLINE` (2).
    Online,
}

impl ProfileState {
    /// The state of a C value; `None` for an unknown one.
    pub fn from_c(v: u32) -> Option<ProfileState> {
        Some(match v {
            0 => ProfileState::Init,
            1 => ProfileState::Offline,
            2 => ProfileState::Online,
            _ => return None,
        })
    }

    /// The C value.
    pub fn to_c(self) -> u32 {
        match self {
            ProfileState::Init => 0,
            ProfileState::Offline => 1,
            ProfileState::Online => 2,
        }
    }
}

/// Whether `from -> to` is a step of INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT (or no
/// change).
fn step_ok(from: ProfileState, to: ProfileState) -> bool {
    use ProfileState::*;
    from == to
        || matches!(
            (from, to),
            (Init, Offline) | (Offline, Online | Init) | (Online, Offline)
        )
}

/// `struct mrc_ctl_ev`: an EV value and its port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Ev {
    /// `mrc_ctl_ev_t`.
    pub val: [u8; EV_MAX_BYTES],
    /// Port, 1-based (0 in `MRC_CTL_EV_UNPOPULATED`).
    pub port: u8,
}

impl Ev {
    /// `MRC_CTL_EV_UNPOPULATED`.
    pub const UNPOPULATED: Ev = Ev {
        val: [0; EV_MAX_BYTES],
        port: 0,
    };

    /// A STEV/UDP EV of value `v` on port 1.
    pub fn from_u32(v: u32) -> Ev {
        let mut val = [0; EV_MAX_BYTES];
        val[..4].copy_from_slice(&v.to_ne_bytes());
        Ev { val, port: 1 }
    }

    /// The STEV/UDP value (first 4 bytes, native order).
    pub fn as_u32(&self) -> u32 {
        u32::from_ne_bytes([self.val[0], self.val[1], self.val[2], self.val[3]])
    }
}

/// `struct mrc_ctl_ev_field`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EvField {
    /// Width, bits.
    pub width: u32,
    /// Value before the EV's bits are laid in.
    pub init_val: u32,
    /// Generated EVs: smallest value of the masked bits.
    pub min_val: u32,
    /// Generated EVs: largest value of the masked bits.
    pub max_val: u32,
    /// Where the EV's bits go.
    pub mask: u32,
}

/// `struct mrc_ctl_ev_op_entry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EvOpEntry {
    /// The subject EV.
    pub ev: Ev,
    /// REPLACE_EV: the replacement.
    pub ev_new: Ev,
    /// `enum mrc_ctl_ev_state`.
    pub state: u32,
    /// `enum mrc_ctl_ev_op_flags`.
    pub flags: u32,
}

/// `struct mrc_ctl_cc_nscc_cfg`.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct NsccCfg {
    /// Quick adapt off when non-zero.
    pub disable_qa: u8,
    /// Acknowledged bytes that trigger an adjustment.
    pub adjust_bytes_threshold: u32,
    /// Longest time between adjustments, ns.
    pub adjust_period_threshold_ns: u32,
    /// Base RTT, ns.
    pub base_rtt_ns: u32,
    /// `eta`, bytes per adjust period.
    pub eta: f32,
    /// `fi`, bytes.
    pub fi: f32,
    /// `fi_scale`.
    pub fi_scale: f32,
    /// `gamma` (multiplicative-decrease gain).
    pub gamma: f32,
    /// Largest fraction of the window one decrease removes.
    pub max_md_jump: f32,
    /// Largest window, bytes.
    pub max_cwnd_bytes: u32,
    /// Quick-adapt gate (a shift of the largest window).
    pub qa_gate: u8,
    /// Quick-adapt delay threshold, ns.
    pub qa_threshold_ns: u32,
    /// Target queuing delay, ns.
    pub target_delay_ns: u32,
}

/// The NSCC configuration a CC profile gives a QP on `link`: [`NsccConfig::for_link`]'s
/// preset with every parameter of `cfg` in place of the preset's (the window starts at
/// `max_cwnd`, the learnt base RTT floor stays half the base RTT). `EINVAL` when the
/// result does not build (a zero base RTT or target delay, gains out of range, a
/// `qa_gate` of 64 or more, `max_cwnd` below one packet).
pub fn nscc_config(cfg: &NsccCfg, link: &LinkParams) -> Result<NsccConfig, Errno> {
    let base = u64::from(cfg.base_rtt_ns);
    let mut n = NsccConfig::for_link(link.line_rate_bps, base.max(1), link.mtu_bytes, false);
    n.base_rtt_ns = base;
    n.min_base_rtt_ns = base / 2;
    n.target_qdelay_ns = u64::from(cfg.target_delay_ns);
    n.max_cwnd_bytes = u64::from(cfg.max_cwnd_bytes);
    n.initial_cwnd_bytes = n.max_cwnd_bytes;
    n.fair_increase_bytes = f64::from(cfg.fi);
    n.fast_increase_scale = f64::from(cfg.fi_scale);
    n.eta_bytes = f64::from(cfg.eta);
    n.md_gain = f64::from(cfg.gamma);
    n.max_md_fraction = f64::from(cfg.max_md_jump);
    n.adjust_period_ns = u64::from(cfg.adjust_period_threshold_ns);
    n.adjust_bytes = u64::from(cfg.adjust_bytes_threshold);
    n.quick_adapt = cfg.disable_qa == 0;
    n.qa_threshold_ns = u64::from(cfg.qa_threshold_ns);
    n.qa_gate_shift = u32::from(cfg.qa_gate);
    n.build().map_err(|_| libc::EINVAL)?;
    Ok(n)
}

/// Lays the top `popcount(f.mask)` bits of `v` (as a `popcount`-bit number) into the set
/// bits of `f.mask`, most significant first, over `f.init_val`: one field of the
/// published expansion.
pub fn expand_field(f: &EvField, v: u32) -> u32 {
    let n = f.mask.count_ones();
    let mut out = f.init_val;
    let mut k = n;
    for bit in (0..32).rev() {
        if f.mask & (1 << bit) == 0 {
            continue;
        }
        k -= 1;
        if (v >> k) & 1 == 1 {
            out |= 1 << bit;
        } else {
            out &= !(1 << bit);
        }
    }
    out
}

/// The `i`-th generated EV: field values counted in mixed radix over `min_val..=max_val`
/// (the last field fastest), each expanded ([`expand_field`]) and the fields concatenated
/// most significant first, each widened to its format field's width. STEV/UDP: the `u32`
/// in bytes 0..4; SRV6: the bit string from byte 0's top bit (network order).
pub fn generate(fields: &[EvField], fmt_widths: &[u8], srv6: bool, i: u64) -> Ev {
    let mut vals = vec![0u32; fields.len()];
    let mut rest = i;
    for (j, f) in fields.iter().enumerate().rev() {
        let span = u64::from(f.max_val - f.min_val) + 1;
        vals[j] = f.min_val + (rest % span) as u32;
        rest /= span;
    }
    let mut bits: Vec<bool> = Vec::new();
    for (j, f) in fields.iter().enumerate() {
        let w = u32::from(fmt_widths[j]).max(f.width);
        let x = expand_field(f, vals[j]);
        for b in (0..w).rev() {
            bits.push(b < 32 && (x >> b) & 1 == 1);
        }
    }
    let mut ev = Ev {
        port: 1,
        ..Ev::default()
    };
    if srv6 {
        for (k, &b) in bits.iter().enumerate().take(EV_MAX_BYTES * 8) {
            if b {
                ev.val[k / 8] |= 0x80 >> (k % 8);
            }
        }
    } else {
        let v = bits.iter().fold(0u64, |a, &b| (a << 1) | u64::from(b)) as u32;
        ev.val[..4].copy_from_slice(&v.to_ne_bytes());
    }
    ev
}

/// The SRH that carries SRV6 EV `ev` to `peer`: the uSID destination (bytes 0..16) first,
/// then the SRH segment (bytes 16..32), or `peer` when that is zero, as the final
/// segment. `EINVAL` for a zero destination.
pub fn srv6_srh(ev: &Ev, peer: Ipv6Addr) -> Result<(SrhRepr, Ipv6Addr), Errno> {
    let mut a = [0u8; 16];
    a.copy_from_slice(&ev.val[..16]);
    let mut s = [0u8; 16];
    s.copy_from_slice(&ev.val[16..]);
    let dst = Ipv6Addr::from(a);
    if dst.is_unspecified() {
        return Err(libc::EINVAL);
    }
    let seg = Ipv6Addr::from(s);
    let last = if seg.is_unspecified() { peer } else { seg };
    SrhRepr::for_path(pnet_packet::ip::IpNextHeaderProtocols::Udp, &[dst, last])
        .map_err(|_| libc::EINVAL)
}

/// One EV format profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FmtProfile {
    /// State.
    pub state: ProfileState,
    /// `enum mrc_ctl_ev_fmt_mode` (0 until set).
    pub mode: u32,
    /// Field widths, bits.
    pub fields: Vec<u8>,
}

/// What `mrc_ctl_modify_ev_fmt_profile` asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FmtModify {
    /// `attr_mask`.
    pub mask: u32,
    /// Target state.
    pub state: u32,
    /// Mode.
    pub mode: u32,
    /// `ev_fmt_op.op`.
    pub op: u32,
    /// MODIFY_FIELDS: the widths.
    pub fields: Vec<u8>,
}

/// One EV profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EvProfile {
    /// State.
    pub state: ProfileState,
    /// `enum mrc_ctl_ev_mode` (0 until set).
    pub mode: u32,
    /// Its format profile.
    pub fmt_id: u64,
    /// EVs.
    pub count: u32,
    /// Least EVs to keep in rotation.
    pub min_active: u32,
    /// States reported as events.
    pub event_mask: u32,
    /// Fields (GEN).
    pub fields: Vec<EvField>,
    /// The EV array (OFFLINE and ONLINE).
    pub evs: Vec<Ev>,
    /// Per EV: `MRC_CTL_EV_GOOD`, `ASSUMED_BAD` (as the transport last said) or `DENIED`.
    pub states: Vec<u32>,
    /// QPs holding the profile (modify to OFFLINE is `EBUSY` while any).
    pub users: u32,
    /// Bumped on every EV-state change, so QPs re-apply denials.
    pub generation: u64,
}

/// What `mrc_ctl_modify_ev_profile` asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EvModify {
    /// `attr_mask`.
    pub mask: u32,
    /// Target state.
    pub state: u32,
    /// Mode.
    pub mode: u32,
    /// Format profile.
    pub fmt_id: u64,
    /// EV count.
    pub count: u32,
    /// Least active.
    pub min_active: u32,
    /// Event mask.
    pub event_mask: u32,
    /// `ev_op.op`.
    pub op: u32,
    /// `ev_op.entries`.
    pub entries: Vec<EvOpEntry>,
    /// `ev_fields_op.op`.
    pub fields_op: u32,
    /// `ev_fields_op.fields`.
    pub fields: Vec<EvField>,
    /// Ports of the controller's context (its planes; 0 counts as 1): the EVs the
    /// provider fills (AUTO, GEN) go on port `1 + i mod ports` ([`spread_port`]), and
    /// REPLACE_EV takes ports `1..=ports`.
    pub ports: u8,
}

/// One CC profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CcProfile {
    /// State.
    pub state: ProfileState,
    /// Whether `algorithm` was set (to NSCC or to NULL).
    pub algorithm_set: bool,
    /// NSCC (`true`) or no congestion control (`false`).
    pub nscc: bool,
    /// The NSCC parameters (`CONFIG`).
    pub config: Option<NsccCfg>,
    /// QPs holding the profile.
    pub users: u32,
}

/// What `mrc_ctl_modify_cc_profile` asks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CcModify {
    /// `attr_mask`.
    pub mask: u32,
    /// Target state.
    pub state: u32,
    /// `algorithm`: `None` for NULL, else the string.
    pub algorithm: Option<String>,
    /// `cc_config` (read when `CONFIG` is set and the algorithm is NSCC).
    pub config: Option<NsccCfg>,
}

/// `struct mrc_ctl_ev_event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvEvent {
    /// The profile.
    pub profile_id: u64,
    /// The EV.
    pub ev: Ev,
    /// Events lost between the previous one delivered and this one.
    pub drop_count: u32,
    /// The new state.
    pub state: u32,
}

/// The EVs a QP of an EV profile runs on, in the transport's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpEvs {
    /// `ConnConfig::evs`: STEV/UDP values (duplicates once), or SRV6 indices 0..n.
    pub evs: Vec<u32>,
    /// Per entry of `evs`: its port (1-based, one per plane; a duplicate value keeps the
    /// first entry's port); empty for profile 0, whose EVs the transport places itself
    /// ([`ev_planes`]).
    pub ports: Vec<u8>,
    /// Per entry of `evs`: denied now.
    pub denied: Vec<bool>,
    /// SRV6: the EVs, for [`srv6_srh`] per entry; empty otherwise.
    pub srv6: Vec<Ev>,
    /// The profile's generation ([`EvProfile::generation`]).
    pub generation: u64,
}

/// The profile tables of the process and the EV event queues.
#[derive(Debug, Default)]
pub struct Registry {
    /// EV format profiles.
    pub fmt: BTreeMap<u64, FmtProfile>,
    /// EV profiles.
    pub ev: BTreeMap<u64, EvProfile>,
    /// CC profiles.
    pub cc: BTreeMap<u64, CcProfile>,
    /// EV event CQs (by address) and their events.
    pub event_cqs: Vec<(usize, EventQueue)>,
    /// The node-wide store the tables cache (`None`: the process's own tables).
    pub store: Option<Store>,
}

/// One EV event CQ's queue: bounded, no overrun (the oldest is kept, the newest counted
/// as dropped and reported in the next event's `drop_count`).
#[derive(Debug, Default)]
pub struct EventQueue {
    /// Capacity.
    pub cqe: usize,
    /// Events waiting.
    pub events: VecDeque<EvEvent>,
    /// Events dropped since the last one queued.
    pub dropped: u32,
}

/// The process's registry.
pub fn registry() -> &'static Mutex<Registry> {
    static R: Mutex<Registry> = Mutex::new(Registry {
        fmt: BTreeMap::new(),
        ev: BTreeMap::new(),
        cc: BTreeMap::new(),
        event_cqs: Vec::new(),
        store: None,
    });
    &R
}

fn fmt_max_width(mode: u32) -> u32 {
    match mode {
        fmt_mode::SRV6 => limits::SRV6_MAX_WIDTH,
        fmt_mode::UDP => limits::UDP_MAX_WIDTH,
        _ => limits::EV_MAX_WIDTH,
    }
}

fn fits(v: u32, width: u32) -> bool {
    width >= 32 || v >> width == 0
}

/// The published restrictions on an EV profile's fields against its format's.
fn check_fields(fields: &[EvField], fmt: &FmtProfile) -> Result<(), Errno> {
    if fields.len() > fmt.fields.len() {
        return Err(libc::E2BIG);
    }
    let sum: u64 = fields.iter().map(|f| u64::from(f.width)).sum();
    let fsum: u64 = fmt.fields.iter().map(|&w| u64::from(w)).sum();
    if sum > fsum {
        return Err(libc::E2BIG);
    }
    for (f, &fw) in fields.iter().zip(&fmt.fields) {
        let bits = f.mask.count_ones();
        if f.width == 0
            || f.width > 32
            || f.width > u32::from(fw)
            || !fits(f.init_val, f.width)
            || !fits(f.mask, f.width)
            || !fits(f.max_val, bits)
            || f.min_val > f.max_val
        {
            return Err(libc::EINVAL);
        }
    }
    Ok(())
}

impl Registry {
    /// Binds the registry to the store of verbs device `device` (`None`: no device, the
    /// tables stay the process's). One device per process: a second device is
    /// `EINVAL`, as is a device name that is not a path component.
    pub fn bind(&mut self, device: Option<&str>) -> Result<(), Errno> {
        let Some(name) = device else { return Ok(()) };
        match &self.store {
            Some(s) if s.device() == Some(name) => Ok(()),
            Some(s) => {
                eprintln!(
                    "lib_mrc: controller tables are bound to device {:?}; {name} is another",
                    s.device()
                );
                Err(libc::EINVAL)
            }
            None => {
                self.bind_store(Store::for_device(name)?);
                Ok(())
            }
        }
    }

    /// Binds the registry to `store` (tests name a directory; [`Registry::bind`] the
    /// device's), dropping the tables of the process: the store's are read next.
    pub fn bind_store(&mut self, store: Store) {
        self.fmt.clear();
        self.ev.retain(|_, p| p.users > 0);
        self.cc.retain(|_, p| p.users > 0);
        self.store = Some(store);
    }

    /// The tables as the store holds them (no QP holds).
    pub fn tables(&self) -> Tables {
        let mut t = Tables {
            fmt: self.fmt.clone(),
            ev: self.ev.clone(),
            cc: self.cc.clone(),
        };
        t.ev.values_mut().for_each(|p| p.users = 0);
        t.cc.values_mut().for_each(|p| p.users = 0);
        t
    }

    /// Takes tables read from the store in place of the cached ones, keeping this
    /// process's QP holds and its transport's ASSUMED_BAD where the store says GOOD of
    /// the same EV, and reports the EV state changes to this process's EV event CQs.
    fn install(&mut self, t: Tables) {
        let mut events = Vec::new();
        let mut ev = t.ev;
        for (id, p) in &mut ev {
            if let Some(old) = self.ev.get(id) {
                p.users = old.users;
                if old.evs == p.evs {
                    for (s, o) in p.states.iter_mut().zip(&old.states) {
                        if *s == ev_state::GOOD && *o == ev_state::ASSUMED_BAD {
                            *s = ev_state::ASSUMED_BAD;
                        }
                    }
                }
                events.extend(changes(*id, Some(old), p));
            }
        }
        let mut cc = t.cc;
        for (id, p) in &mut cc {
            if let Some(old) = self.cc.get(id) {
                p.users = old.users;
            }
        }
        // Held profiles the store no longer has stay (as INIT) so the holds still count.
        for (id, p) in &self.ev {
            if p.users > 0 && !ev.contains_key(id) {
                ev.insert(
                    *id,
                    EvProfile {
                        users: p.users,
                        ..EvProfile::default()
                    },
                );
            }
        }
        for (id, p) in &self.cc {
            if p.users > 0 && !cc.contains_key(id) {
                cc.insert(
                    *id,
                    CcProfile {
                        users: p.users,
                        ..CcProfile::default()
                    },
                );
            }
        }
        self.fmt = t.fmt;
        self.ev = ev;
        self.cc = cc;
        self.report(events);
    }

    /// Brings the cached tables up to the store's when it changed (one `stat` when it
    /// did not). `EINVAL` for a store that is not valid (the cached tables stay), the
    /// errno of a failed read; no store bound: nothing to do.
    pub fn refresh(&mut self) -> Result<(), Errno> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        match store.poll() {
            Ok(Poll::Unchanged) => Ok(()),
            Ok(Poll::Changed(_, t)) => {
                self.install(*t);
                Ok(())
            }
            Err(e) => {
                eprintln!("lib_mrc: profile store {}: {e}", store.file().display());
                Err(e.errno())
            }
        }
    }

    /// Runs a controller change `f` on the node's current tables and writes the result:
    /// under the store's writers' lock (`EPERM` when this process may not write the
    /// store's directory: nothing changes), the tables are refreshed, `f` runs, and when
    /// the tables changed (also by the done part of a batch that then failed) they are
    /// written as the next generation (a failed write restores the tables and answers
    /// its errno). Without a store `f` just runs.
    pub fn transact<T>(
        &mut self,
        f: impl FnOnce(&mut Registry) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let Some(mut store) = self.store.take() else {
            return f(self);
        };
        let r = self.transact_on(&mut store, f);
        self.store = Some(store);
        r
    }

    fn transact_on<T>(
        &mut self,
        store: &mut Store,
        f: impl FnOnce(&mut Registry) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let w = store.lock()?;
        match store.poll() {
            Ok(Poll::Unchanged) => {}
            Ok(Poll::Changed(_, t)) => self.install(*t),
            Err(e) => {
                eprintln!("lib_mrc: profile store {}: {e}", store.file().display());
                return Err(e.errno());
            }
        }
        let before = (self.fmt.clone(), self.ev.clone(), self.cc.clone());
        let before_t = self.tables();
        let r = f(self);
        let after = self.tables();
        let unchanged = before_t == after;
        if !unchanged && let Err(e) = store.commit(&w, &after) {
            (self.fmt, self.ev, self.cc) = before;
            return Err(e);
        }
        r
    }

    /// `mrc_ctl_modify_ev_fmt_profile`.
    pub fn modify_fmt(&mut self, id: u64, r: &FmtModify) -> Result<(), Errno> {
        use mask::*;
        if id == 0 || r.mask & !(FMT_STATE | FMT_MODE | FMT_OP | FMT_VENDOR_CFG) != 0 {
            return Err(libc::EINVAL);
        }
        if !self.fmt.contains_key(&id) && self.fmt.len() >= limits::MAX_FMT_PROFILES as usize {
            return Err(libc::EINVAL);
        }
        let mut p = self.fmt.get(&id).cloned().unwrap_or_default();
        let to = if r.mask & FMT_STATE != 0 {
            ProfileState::from_c(r.state).ok_or(libc::EINVAL)?
        } else {
            p.state
        };
        if !step_ok(p.state, to) {
            return Err(libc::EINVAL);
        }
        let online_users = self
            .ev
            .values()
            .any(|e| e.fmt_id == id && e.state == ProfileState::Online);
        if p.state == ProfileState::Online && to != ProfileState::Online && online_users {
            return Err(libc::EBUSY);
        }
        // What may change: MODE and fields while OFFLINE (or arriving there).
        let editable = matches!(to, ProfileState::Offline)
            || (p.state == ProfileState::Offline && to == ProfileState::Online);
        if r.mask & FMT_MODE != 0 {
            if !editable || p.state == ProfileState::Online {
                return Err(libc::EINVAL);
            }
            if r.mode.count_ones() != 1 || r.mode & !fmt_mode::ALL != 0 {
                return Err(libc::EINVAL);
            }
            p.mode = r.mode;
        }
        if r.mask & FMT_OP != 0 {
            match r.op {
                fields_op::MODIFY => {
                    if !editable || p.state == ProfileState::Online {
                        return Err(libc::EINVAL);
                    }
                    if r.fields.is_empty() || r.fields.contains(&0) {
                        return Err(libc::EINVAL);
                    }
                    let sum: u32 = r.fields.iter().map(|&w| u32::from(w)).sum();
                    if r.fields.len() > limits::MAX_FIELDS || sum > fmt_max_width(p.mode) {
                        return Err(libc::E2BIG);
                    }
                    p.fields = r.fields.clone();
                }
                fields_op::QUERY => {}
                _ => return Err(libc::EINVAL),
            }
        }
        match to {
            ProfileState::Init => p = FmtProfile::default(),
            ProfileState::Offline if p.mode == 0 => return Err(libc::EINVAL),
            ProfileState::Online if p.mode == 0 || p.fields.is_empty() => {
                return Err(libc::EINVAL);
            }
            _ => {}
        }
        p.state = to;
        self.fmt.insert(id, p);
        Ok(())
    }

    /// `mrc_ctl_query_ev_fmt_profile` (an untouched id is in INIT).
    pub fn query_fmt(&self, id: u64) -> Result<FmtProfile, Errno> {
        if id == 0 {
            return Err(libc::EINVAL);
        }
        Ok(self.fmt.get(&id).cloned().unwrap_or_default())
    }

    fn evs_in_use(&self) -> u64 {
        self.ev.values().map(|e| e.evs.len() as u64).sum()
    }

    /// Free EV resources (`ev_free_count`).
    pub fn ev_free_count(&self) -> u32 {
        u64::from(limits::MAX_EV_COUNT).saturating_sub(self.evs_in_use()) as u32
    }

    /// `mrc_ctl_modify_ev_profile`. Returns the entries with the query ops' outputs
    /// filled (REPLACE_EV and MODIFY_EV_STATE return them unchanged); a failing entry
    /// stops the batch (the earlier ones stay done, as the header says).
    pub fn modify_ev(&mut self, id: u64, r: &EvModify) -> Result<Vec<EvOpEntry>, Errno> {
        use mask::*;
        let known = EV_STATE
            | EV_MODE
            | EV_FMT_ID
            | EV_COUNT
            | EV_MIN_ACTIVE
            | EV_EVENT_MASK
            | EV_OP
            | EV_FIELDS_OP
            | EV_VENDOR_CFG;
        if id == 0 || r.mask & !known != 0 || r.mask & EV_OP != 0 && r.mask & EV_FIELDS_OP != 0 {
            return Err(libc::EINVAL);
        }
        if !self.ev.contains_key(&id) && self.ev.len() >= limits::MAX_EV_PROFILES as usize {
            return Err(libc::EINVAL);
        }
        let mut p = self.ev.get(&id).cloned().unwrap_or_default();
        let from = p.state;
        let to = if r.mask & EV_STATE != 0 {
            ProfileState::from_c(r.state).ok_or(libc::EINVAL)?
        } else {
            from
        };
        if !step_ok(from, to) {
            return Err(libc::EINVAL);
        }
        if from == ProfileState::Online && to != ProfileState::Online && p.users > 0 {
            return Err(libc::EBUSY);
        }
        let settable = EV_MODE | EV_FMT_ID | EV_COUNT | EV_MIN_ACTIVE | EV_EVENT_MASK;
        if r.mask & settable != 0 && (from == ProfileState::Online || to == ProfileState::Init) {
            // No MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE.
            return Err(libc::EINVAL);
        }
        let mut reshape = false;
        if r.mask & EV_MODE != 0 {
            if r.mode.count_ones() != 1 || r.mode & !ev_mode::ALL != 0 {
                return Err(libc::EINVAL);
            }
            reshape |= p.mode != r.mode;
            p.mode = r.mode;
        }
        if r.mask & EV_FMT_ID != 0 {
            p.fmt_id = r.fmt_id;
        }
        if r.mask & EV_COUNT != 0 {
            if r.count == 0 {
                return Err(libc::EINVAL);
            }
            if r.count > limits::MAX_EV_COUNT_PROFILE {
                return Err(libc::E2BIG);
            }
            reshape |= p.count != r.count;
            p.count = r.count;
        }
        if r.mask & EV_MIN_ACTIVE != 0 {
            p.min_active = r.min_active;
        }
        if r.mask & EV_EVENT_MASK != 0 {
            if r.event_mask & !(ev_state::GOOD | ev_state::ASSUMED_BAD) != 0 {
                return Err(libc::EINVAL);
            }
            p.event_mask = r.event_mask;
        }
        if r.mask & EV_FIELDS_OP != 0 {
            match r.fields_op {
                fields_op::MODIFY => {
                    if from == ProfileState::Online || to != ProfileState::Offline {
                        return Err(libc::EINVAL);
                    }
                    if r.fields.len() > limits::MAX_FIELDS {
                        return Err(libc::E2BIG);
                    }
                    p.fields = r.fields.clone();
                    reshape = true;
                }
                fields_op::QUERY => {}
                _ => return Err(libc::EINVAL),
            }
        }
        if to == ProfileState::Init {
            let users = p.users;
            p = EvProfile {
                users,
                ..EvProfile::default()
            };
            self.ev.insert(id, p);
            return Ok(Vec::new());
        }
        // OFFLINE needs a mode, and for EXP and GEN a format and a count (GEN: fields).
        let fmt = if p.mode != ev_mode::AUTO {
            let f = self.fmt.get(&p.fmt_id).cloned().unwrap_or_default();
            if p.mode == 0 || f.mode == 0 || p.count == 0 {
                return Err(libc::EINVAL);
            }
            if p.mode == ev_mode::GEN {
                if p.fields.is_empty() {
                    return Err(libc::EINVAL);
                }
                check_fields(&p.fields, &f)?;
            }
            Some(f)
        } else {
            if p.count == 0 {
                p.count = limits::DEFAULT_EVS;
            }
            None
        };
        if p.mode == 0 {
            return Err(libc::EINVAL);
        }
        if p.min_active > p.count {
            return Err(libc::EINVAL);
        }
        if reshape || from == ProfileState::Init || p.evs.len() != p.count as usize {
            let others = self.evs_in_use() - self.ev.get(&id).map_or(0, |e| e.evs.len() as u64);
            if others + u64::from(p.count) > u64::from(limits::MAX_EV_COUNT) {
                return Err(libc::E2BIG);
            }
            p.evs = match (p.mode, &fmt) {
                (ev_mode::GEN, Some(f)) => {
                    let space: u64 = p
                        .fields
                        .iter()
                        .map(|x| u64::from(x.max_val - x.min_val) + 1)
                        .fold(1u64, |a, b| a.saturating_mul(b));
                    if space < u64::from(p.count) {
                        // Fewer distinct EVs than asked for.
                        return Err(libc::E2BIG);
                    }
                    (0..u64::from(p.count))
                        .map(|i| Ev {
                            port: spread_port(i as usize, r.ports),
                            ..generate(&p.fields, &f.fields, f.mode == fmt_mode::SRV6, i)
                        })
                        .collect()
                }
                (ev_mode::EXP, _) => vec![Ev::UNPOPULATED; p.count as usize],
                _ => (0..p.count)
                    .map(|i| Ev {
                        port: spread_port(i as usize, r.ports),
                        ..Ev::from_u32(i)
                    })
                    .collect(),
            };
            p.states = vec![ev_state::GOOD; p.count as usize];
            p.generation += 1;
        }
        let mut out = Vec::new();
        let mut err = None;
        if r.mask & EV_OP != 0 {
            match ev_ops(
                &mut p,
                fmt.as_ref(),
                r.op,
                &r.entries,
                from == ProfileState::Online,
                r.ports.max(1),
            ) {
                Ok(o) => out = o,
                Err(e) => err = Some(e),
            }
        }
        if err.is_none() && to == ProfileState::Online {
            // Every explicit EV populated, and the format ONLINE.
            if p.evs.contains(&Ev::UNPOPULATED)
                || fmt
                    .as_ref()
                    .is_some_and(|f| f.state != ProfileState::Online)
            {
                err = Some(libc::EINVAL);
            } else {
                p.state = to;
            }
        } else if err.is_none() {
            p.state = to;
        }
        let events = changes(id, self.ev.get(&id), &p);
        self.ev.insert(id, p);
        self.report(events);
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// `mrc_ctl_query_ev_profile`: the profile and, for `EV_OP` (QUERY_EV_STATE,
    /// QUERY_EV_ARRAY), the entries (`E2BIG` with the needed count when `entries` is
    /// shorter than the array: `Err((E2BIG, n))`).
    pub fn query_ev(
        &self,
        id: u64,
        op: Option<(u32, &[EvOpEntry])>,
    ) -> Result<(EvProfile, Vec<EvOpEntry>), (Errno, usize)> {
        if id == 0 {
            return Err((libc::EINVAL, 0));
        }
        let mut p = self.ev.get(&id).cloned().unwrap_or_default();
        let out = match op {
            None => Vec::new(),
            Some((o, entries)) => {
                if o != ev_op::QUERY_EV_STATE && o != ev_op::QUERY_EV_ARRAY {
                    return Err((libc::EINVAL, 0));
                }
                if o == ev_op::QUERY_EV_ARRAY && entries.len() < p.evs.len() {
                    return Err((libc::E2BIG, p.evs.len()));
                }
                ev_ops(&mut p, None, o, entries, true, limits::MAX_PORTS).map_err(|e| (e, 0))?
            }
        };
        Ok((p, out))
    }

    /// `mrc_ctl_modify_cc_profile`.
    pub fn modify_cc(&mut self, id: u64, r: &CcModify) -> Result<(), Errno> {
        use mask::*;
        if id == 0 || r.mask & !(CC_STATE | CC_ALGORITHM | CC_CONFIG | CC_VENDOR_CFG) != 0 {
            return Err(libc::EINVAL);
        }
        if !self.cc.contains_key(&id) && self.cc.len() >= limits::MAX_CC_PROFILES as usize {
            return Err(libc::EINVAL);
        }
        let mut p = self.cc.get(&id).cloned().unwrap_or_default();
        let from = p.state;
        let to = if r.mask & CC_STATE != 0 {
            ProfileState::from_c(r.state).ok_or(libc::EINVAL)?
        } else {
            from
        };
        if !step_ok(from, to) {
            return Err(libc::EINVAL);
        }
        if from == ProfileState::Online && to != ProfileState::Online && p.users > 0 {
            return Err(libc::EBUSY);
        }
        if r.mask & (CC_ALGORITHM | CC_CONFIG) != 0
            && (from == ProfileState::Online || to == ProfileState::Init)
        {
            return Err(libc::EINVAL);
        }
        if r.mask & CC_ALGORITHM != 0 {
            p.nscc = match r.algorithm.as_deref() {
                None => false,
                Some(NSCC_ALGORITHM) => true,
                Some(_) => return Err(libc::EINVAL),
            };
            p.algorithm_set = true;
            p.config = None;
        }
        if r.mask & CC_CONFIG != 0 {
            if !p.algorithm_set {
                return Err(libc::EINVAL);
            }
            if p.nscc {
                let c = r.config.ok_or(libc::EINVAL)?;
                nscc_config(
                    &c,
                    &LinkParams {
                        line_rate_bps: 100_000_000_000,
                        base_rtt_ns: 100_000,
                        mtu_bytes: 4096,
                        trimming_enabled: false,
                    },
                )?;
                p.config = Some(c);
            }
        }
        match to {
            ProfileState::Init => {
                let users = p.users;
                p = CcProfile {
                    users,
                    ..CcProfile::default()
                };
            }
            ProfileState::Offline if !p.algorithm_set => return Err(libc::EINVAL),
            ProfileState::Online if !p.algorithm_set || (p.nscc && p.config.is_none()) => {
                return Err(libc::EINVAL);
            }
            _ => {}
        }
        p.state = to;
        self.cc.insert(id, p);
        Ok(())
    }

    /// `mrc_ctl_query_cc_profile`.
    pub fn query_cc(&self, id: u64) -> Result<CcProfile, Errno> {
        if id == 0 {
            return Err(libc::EINVAL);
        }
        Ok(self.cc.get(&id).cloned().unwrap_or_default())
    }

    /// Whether a QP may name EV profile `id` at INIT: 0, or an ONLINE profile.
    pub fn ev_usable(&self, id: u64) -> bool {
        id == 0
            || self
                .ev
                .get(&id)
                .is_some_and(|p| p.state == ProfileState::Online)
    }

    /// Whether a QP may name CC profile `id` at INIT: 0, or an ONLINE profile.
    pub fn cc_usable(&self, id: u64) -> bool {
        id == 0
            || self
                .cc
                .get(&id)
                .is_some_and(|p| p.state == ProfileState::Online)
    }

    /// A QP takes (`+1`) or lets go of (`-1`) profiles `ev` and `cc`.
    pub fn hold(&mut self, ev: u64, cc: u64, take: bool) {
        let f = |u: &mut u32| {
            *u = if take {
                u.saturating_add(1)
            } else {
                u.saturating_sub(1)
            }
        };
        if let Some(p) = self.ev.get_mut(&ev).filter(|_| ev != 0) {
            f(&mut p.users);
        }
        if let Some(p) = self.cc.get_mut(&cc).filter(|_| cc != 0) {
            f(&mut p.users);
        }
    }

    /// The EVs of profile `id` for a QP (0: the default 16). `ENOENT` for a profile not
    /// ONLINE.
    pub fn qp_evs(&self, id: u64) -> Result<QpEvs, Errno> {
        if id == 0 {
            return Ok(QpEvs {
                evs: (0..limits::DEFAULT_EVS).collect(),
                ports: Vec::new(),
                denied: vec![false; limits::DEFAULT_EVS as usize],
                srv6: Vec::new(),
                generation: 0,
            });
        }
        let p = self
            .ev
            .get(&id)
            .filter(|p| p.state == ProfileState::Online)
            .ok_or(libc::ENOENT)?;
        let srv6 = p.mode != ev_mode::AUTO
            && self
                .fmt
                .get(&p.fmt_id)
                .is_some_and(|f| f.mode == fmt_mode::SRV6);
        let mut q = QpEvs {
            evs: Vec::new(),
            ports: Vec::new(),
            denied: Vec::new(),
            srv6: Vec::new(),
            generation: p.generation,
        };
        for (i, (e, &s)) in p.evs.iter().zip(&p.states).enumerate() {
            let v = if srv6 { i as u32 } else { e.as_u32() };
            if let Some(k) = q.evs.iter().position(|&x| x == v) {
                // A copy: one transport EV; denied only when every copy is.
                q.denied[k] &= s == ev_state::DENIED;
                continue;
            }
            q.evs.push(v);
            q.ports.push(e.port);
            q.denied.push(s == ev_state::DENIED);
            if srv6 {
                q.srv6.push(*e);
            }
        }
        Ok(q)
    }

    /// The NSCC configuration of CC profile `id` on `link`, `None` for no congestion
    /// control (profile 0, or an algorithm of NULL). `ENOENT` for a profile not ONLINE.
    pub fn qp_cc(&self, id: u64, link: &LinkParams) -> Result<Option<NsccConfig>, Errno> {
        if id == 0 {
            return Ok(None);
        }
        let p = self
            .cc
            .get(&id)
            .filter(|p| p.state == ProfileState::Online)
            .ok_or(libc::ENOENT)?;
        match (p.nscc, p.config) {
            (true, Some(c)) => nscc_config(&c, link).map(Some),
            _ => Ok(None),
        }
    }

    /// The transport says transport EV `ev` of a QP on profile `id` went into rotation
    /// (`good`) or out of it (ASSUMED_BAD). Updates the profile's state of every EV entry
    /// that maps to it (not the DENIED ones) and reports an event where the mask asks.
    pub fn note_transport(&mut self, id: u64, ev: u32, good: bool) {
        let Some(p) = self.ev.get(&id) else { return };
        let srv6 = self
            .fmt
            .get(&p.fmt_id)
            .is_some_and(|f| f.mode == fmt_mode::SRV6)
            && p.mode != ev_mode::AUTO;
        let mut q = p.clone();
        let new = if good {
            ev_state::GOOD
        } else {
            ev_state::ASSUMED_BAD
        };
        for (i, e) in q.evs.iter().enumerate() {
            let v = if srv6 { i as u32 } else { e.as_u32() };
            if v == ev && q.states[i] != ev_state::DENIED {
                q.states[i] = new;
            }
        }
        let events = changes(id, Some(p), &q);
        if let Some(p) = self.ev.get_mut(&id) {
            p.states = q.states;
        }
        self.report(events);
    }

    /// Queues `events` on every EV event CQ.
    fn report(&mut self, events: Vec<EvEvent>) {
        for e in events {
            for (_, q) in &mut self.event_cqs {
                if q.events.len() >= q.cqe {
                    q.dropped = q.dropped.saturating_add(1);
                } else {
                    q.events.push_back(EvEvent {
                        drop_count: std::mem::take(&mut q.dropped),
                        ..e
                    });
                }
            }
        }
    }

    /// Takes up to `n` events of EV event CQ `cq`; `None` for a CQ that is not one.
    pub fn poll_events(&mut self, cq: usize, n: usize) -> Option<Vec<EvEvent>> {
        let (_, q) = self.event_cqs.iter_mut().find(|(c, _)| *c == cq)?;
        let k = n.min(q.events.len());
        Some(q.events.drain(..k).collect())
    }
}

/// The events of the state changes from `old` to `new` that `new.event_mask` asks for.
fn changes(id: u64, old: Option<&EvProfile>, new: &EvProfile) -> Vec<EvEvent> {
    let Some(old) = old else { return Vec::new() };
    if old.evs != new.evs {
        return Vec::new();
    }
    old.states
        .iter()
        .zip(&new.states)
        .zip(&new.evs)
        .filter(|((a, b), _)| a != b && new.event_mask & **b != 0)
        .map(|((_, &b), e)| EvEvent {
            profile_id: id,
            ev: *e,
            drop_count: 0,
            state: b,
        })
        .collect()
}

/// The EV operations on `p`'s array; `online`: the profile is ONLINE (REPLACE_EV needs
/// MODIFY_ONLINE, which is not advertised); `max_port`: the controller's context's ports
/// (a replacement EV's port is `1..=max_port`).
fn ev_ops(
    p: &mut EvProfile,
    fmt: Option<&FmtProfile>,
    op: u32,
    entries: &[EvOpEntry],
    online: bool,
    max_port: u8,
) -> Result<Vec<EvOpEntry>, Errno> {
    let mut out = entries.to_vec();
    match op {
        ev_op::REPLACE_EV => {
            if online || p.mode != ev_mode::EXP {
                return Err(libc::EINVAL);
            }
            let srv6 = fmt.is_some_and(|f| f.mode == fmt_mode::SRV6);
            for e in entries {
                if !(1..=max_port).contains(&e.ev_new.port) || e.ev_new == Ev::UNPOPULATED {
                    return Err(libc::EINVAL);
                }
                if !srv6 && e.ev_new.val[4..].iter().any(|&b| b != 0) {
                    return Err(libc::EINVAL);
                }
                if srv6 && e.ev_new.val[..16].iter().all(|&b| b == 0) {
                    return Err(libc::EINVAL);
                }
                let st = match e.state {
                    0 | ev_state::GOOD => ev_state::GOOD,
                    ev_state::DENIED => ev_state::DENIED,
                    _ => return Err(libc::EINVAL),
                };
                let mut found = false;
                for i in 0..p.evs.len() {
                    if p.evs[i] == e.ev {
                        p.evs[i] = e.ev_new;
                        p.states[i] = st;
                        found = true;
                        if e.flags & ev_op::F_ALL_COPIES == 0 {
                            break;
                        }
                    }
                }
                if !found {
                    return Err(libc::ENOENT);
                }
            }
            p.generation += 1;
        }
        ev_op::MODIFY_EV_STATE => {
            for e in entries {
                let st = match e.state {
                    ev_state::GOOD | ev_state::DENIED => e.state,
                    _ => return Err(libc::EINVAL),
                };
                let mut found = false;
                for i in 0..p.evs.len() {
                    if p.evs[i] == e.ev {
                        found = true;
                        p.states[i] = st;
                    }
                }
                if !found {
                    return Err(libc::ENOENT);
                }
                p.generation += 1;
            }
        }
        ev_op::QUERY_EV_STATE => {
            for o in &mut out {
                let i = p.evs.iter().position(|x| *x == o.ev).ok_or(libc::ENOENT)?;
                o.state = p.states[i];
            }
        }
        ev_op::QUERY_EV_ARRAY => {
            out.truncate(p.evs.len());
            for (o, (e, &s)) in out.iter_mut().zip(p.evs.iter().zip(&p.states)) {
                o.ev = *e;
                o.state = s;
            }
        }
        _ => return Err(libc::EINVAL),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stev_fmt(r: &mut Registry, id: u64, widths: &[u8]) {
        r.modify_fmt(
            id,
            &FmtModify {
                mask: mask::FMT_STATE | mask::FMT_MODE | mask::FMT_OP,
                state: 1,
                mode: fmt_mode::STEV,
                op: fields_op::MODIFY,
                fields: widths.to_vec(),
            },
        )
        .unwrap();
        r.modify_fmt(
            id,
            &FmtModify {
                mask: mask::FMT_STATE,
                state: 2,
                ..FmtModify::default()
            },
        )
        .unwrap();
    }

    fn offline(mode: u32, fmt_id: u64, count: u32) -> EvModify {
        EvModify {
            mask: mask::EV_STATE
                | mask::EV_MODE
                | mask::EV_FMT_ID
                | mask::EV_COUNT
                | mask::EV_MIN_ACTIVE
                | mask::EV_EVENT_MASK,
            state: 1,
            mode,
            fmt_id,
            count,
            min_active: 1,
            event_mask: ev_state::GOOD | ev_state::ASSUMED_BAD,
            ..EvModify::default()
        }
    }

    fn online() -> EvModify {
        EvModify {
            mask: mask::EV_STATE,
            state: 2,
            ..EvModify::default()
        }
    }

    fn op(op: u32, entries: Vec<EvOpEntry>) -> EvModify {
        EvModify {
            mask: mask::EV_OP,
            op,
            entries,
            ..EvModify::default()
        }
    }

    #[test]
    fn format_profile_state_machine() {
        let mut r = Registry::default();
        let only_state = |s| FmtModify {
            mask: mask::FMT_STATE,
            state: s,
            ..FmtModify::default()
        };
        // INIT -> ONLINE skips OFFLINE; OFFLINE needs a mode; id 0 is the provider's.
        assert_eq!(r.modify_fmt(5, &only_state(2)), Err(libc::EINVAL));
        assert_eq!(r.modify_fmt(5, &only_state(1)), Err(libc::EINVAL));
        assert_eq!(r.modify_fmt(0, &only_state(1)), Err(libc::EINVAL));
        // 33 bits of STEV exceed the 32-bit EV; 17 bits of UDP exceed the port.
        let too_wide = FmtModify {
            mask: mask::FMT_STATE | mask::FMT_MODE | mask::FMT_OP,
            state: 1,
            mode: fmt_mode::STEV,
            op: fields_op::MODIFY,
            fields: vec![17, 16],
        };
        assert_eq!(r.modify_fmt(5, &too_wide), Err(libc::E2BIG));
        let udp = FmtModify {
            mode: fmt_mode::UDP,
            fields: vec![17],
            ..too_wide.clone()
        };
        assert_eq!(r.modify_fmt(5, &udp), Err(libc::E2BIG));
        // The published example: two 16-bit STEV fields, OFFLINE then ONLINE.
        stev_fmt(&mut r, 13, &[16, 16]);
        let q = r.query_fmt(13).unwrap();
        assert_eq!(
            (q.state, q.mode, q.fields),
            (ProfileState::Online, fmt_mode::STEV, vec![16, 16])
        );
        // ONLINE: no field change; back to OFFLINE, then INIT clears it.
        let m = FmtModify {
            mask: mask::FMT_OP,
            op: fields_op::MODIFY,
            fields: vec![8],
            ..FmtModify::default()
        };
        assert_eq!(r.modify_fmt(13, &m), Err(libc::EINVAL));
        r.modify_fmt(13, &only_state(1)).unwrap();
        r.modify_fmt(13, &only_state(0)).unwrap();
        assert_eq!(r.query_fmt(13).unwrap(), FmtProfile::default());
    }

    #[test]
    fn explicit_profile_replace_deny_query() {
        let mut r = Registry::default();
        stev_fmt(&mut r, 13, &[16, 16]);
        r.modify_ev(1, &offline(ev_mode::EXP, 13, 4)).unwrap();
        let q = r.query_ev(1, None).unwrap().0;
        assert_eq!(q.evs, vec![Ev::UNPOPULATED; 4]);
        // Unpopulated EVs keep it from ONLINE.
        assert_eq!(r.modify_ev(1, &online()), Err(libc::EINVAL));
        for i in 0..4u32 {
            let e = EvOpEntry {
                ev: Ev::UNPOPULATED,
                ev_new: Ev::from_u32((i << 16) | i),
                state: ev_state::GOOD,
                flags: 0,
            };
            r.modify_ev(1, &op(ev_op::REPLACE_EV, vec![e])).unwrap();
        }
        // A fifth replacement finds no unpopulated EV.
        let e5 = EvOpEntry {
            ev: Ev::UNPOPULATED,
            ev_new: Ev::from_u32(9),
            ..EvOpEntry::default()
        };
        assert_eq!(
            r.modify_ev(1, &op(ev_op::REPLACE_EV, vec![e5])),
            Err(libc::ENOENT)
        );
        r.modify_ev(1, &online()).unwrap();
        assert!(r.ev_usable(1) && !r.ev_usable(2));
        let qe = r.qp_evs(1).unwrap();
        assert_eq!(qe.evs, vec![0, 0x0001_0001, 0x0002_0002, 0x0003_0003]);
        assert_eq!(qe.denied, vec![false; 4]);
        // DENY EV 2 while ONLINE: the transport's EV 0x20002 is denied.
        let g0 = qe.generation;
        let deny = EvOpEntry {
            ev: Ev::from_u32(0x0002_0002),
            state: ev_state::DENIED,
            ..EvOpEntry::default()
        };
        r.modify_ev(1, &op(ev_op::MODIFY_EV_STATE, vec![deny]))
            .unwrap();
        let qe = r.qp_evs(1).unwrap();
        assert_eq!(qe.denied, vec![false, false, true, false]);
        assert_eq!(qe.generation, g0 + 1);
        // ASSUMED_BAD is the transport's to say, not the controller's.
        let bad = EvOpEntry {
            state: ev_state::ASSUMED_BAD,
            ..deny
        };
        assert_eq!(
            r.modify_ev(1, &op(ev_op::MODIFY_EV_STATE, vec![bad])),
            Err(libc::EINVAL)
        );
        // REPLACE_EV while ONLINE needs MODIFY_ONLINE (not advertised).
        let rep = EvOpEntry {
            ev: Ev::from_u32(0),
            ev_new: Ev::from_u32(7),
            ..EvOpEntry::default()
        };
        assert_eq!(
            r.modify_ev(1, &op(ev_op::REPLACE_EV, vec![rep])),
            Err(libc::EINVAL)
        );
        // Queries: the states of two EVs, the array (E2BIG with the count when short).
        let ask = vec![
            EvOpEntry {
                ev: Ev::from_u32(0x0002_0002),
                ..EvOpEntry::default()
            },
            EvOpEntry {
                ev: Ev::from_u32(0x0003_0003),
                ..EvOpEntry::default()
            },
        ];
        let (_, out) = r.query_ev(1, Some((ev_op::QUERY_EV_STATE, &ask))).unwrap();
        assert_eq!(
            out.iter().map(|e| e.state).collect::<Vec<_>>(),
            vec![ev_state::DENIED, ev_state::GOOD]
        );
        assert_eq!(
            r.query_ev(1, Some((ev_op::QUERY_EV_ARRAY, &ask))).err(),
            Some((libc::E2BIG, 4))
        );
        let room = vec![EvOpEntry::default(); 5];
        let (_, arr) = r.query_ev(1, Some((ev_op::QUERY_EV_ARRAY, &room))).unwrap();
        assert_eq!(
            arr.iter().map(|e| e.ev.as_u32()).collect::<Vec<_>>(),
            vec![0, 0x0001_0001, 0x0002_0002, 0x0003_0003]
        );
        // A QP holds it: OFFLINE is EBUSY until it lets go; the format profile can't go
        // OFFLINE under an ONLINE EV profile.
        r.hold(1, 0, true);
        let off = EvModify {
            mask: mask::EV_STATE,
            state: 1,
            ..EvModify::default()
        };
        assert_eq!(r.modify_ev(1, &off), Err(libc::EBUSY));
        let fmt_off = FmtModify {
            mask: mask::FMT_STATE,
            state: 1,
            ..FmtModify::default()
        };
        assert_eq!(r.modify_fmt(13, &fmt_off), Err(libc::EBUSY));
        r.hold(1, 0, false);
        r.modify_ev(1, &off).unwrap();
        assert_eq!(r.qp_evs(1), Err(libc::ENOENT));
    }

    #[test]
    fn generated_profile_expands_fields() {
        // One field: width 8, init 0xA0, mask 0x0F: values 3..=6 give 0xA3..0xA6 in the
        // low byte; the format's second field (8 bits) stays zero above it.
        let f = EvField {
            width: 8,
            init_val: 0xA0,
            min_val: 3,
            max_val: 6,
            mask: 0x0F,
        };
        assert_eq!(expand_field(&f, 5), 0xA5);
        // Mask bits need not be contiguous: 0b1010 takes the EV's two bits, MSB first.
        let g = EvField {
            width: 4,
            init_val: 0b0101,
            min_val: 0,
            max_val: 3,
            mask: 0b1010,
        };
        assert_eq!(expand_field(&g, 0b10), 0b1101);
        assert_eq!(expand_field(&g, 0b01), 0b0111);
        let mut r = Registry::default();
        stev_fmt(&mut r, 3, &[8, 8]);
        let fixed = EvField {
            width: 8,
            init_val: 0x42,
            min_val: 0,
            max_val: 0,
            mask: 0,
        };
        let mut m = offline(ev_mode::GEN, 3, 4);
        m.mask |= mask::EV_FIELDS_OP;
        m.fields_op = fields_op::MODIFY;
        m.fields = vec![fixed, f];
        r.modify_ev(2, &m).unwrap();
        r.modify_ev(2, &online()).unwrap();
        assert_eq!(
            r.qp_evs(2).unwrap().evs,
            vec![0x42A3, 0x42A4, 0x42A5, 0x42A6]
        );
        // Five EVs from a space of four: E2BIG; a mask wider than the field: EINVAL.
        let mut r = Registry::default();
        stev_fmt(&mut r, 3, &[8, 8]);
        let mut m5 = m.clone();
        m5.count = 5;
        assert_eq!(r.modify_ev(2, &m5), Err(libc::E2BIG));
        let mut bad = m.clone();
        bad.fields = vec![EvField { mask: 0x1FF, ..f }];
        assert_eq!(r.modify_ev(2, &bad), Err(libc::EINVAL));
        // max_val wider than the mask's bits.
        bad.fields = vec![EvField { max_val: 16, ..f }];
        assert_eq!(r.modify_ev(2, &bad), Err(libc::EINVAL));
    }

    #[test]
    fn srv6_profile_maps_to_segment_lists() {
        let mut r = Registry::default();
        r.modify_fmt(
            4,
            &FmtModify {
                mask: mask::FMT_STATE | mask::FMT_MODE | mask::FMT_OP,
                state: 1,
                mode: fmt_mode::SRV6,
                op: fields_op::MODIFY,
                fields: vec![128, 128],
            },
        )
        .unwrap();
        r.modify_fmt(
            4,
            &FmtModify {
                mask: mask::FMT_STATE,
                state: 2,
                ..FmtModify::default()
            },
        )
        .unwrap();
        r.modify_ev(7, &offline(ev_mode::EXP, 4, 2)).unwrap();
        let usid: Ipv6Addr = "fc00:0:1:2:3::".parse().unwrap();
        let seg: Ipv6Addr = "2001:db8::9".parse().unwrap();
        let peer: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let mk = |a: Ipv6Addr, b: Ipv6Addr| {
            let mut e = Ev {
                port: 1,
                ..Ev::default()
            };
            e.val[..16].copy_from_slice(&a.octets());
            e.val[16..].copy_from_slice(&b.octets());
            e
        };
        let e0 = mk(usid, Ipv6Addr::UNSPECIFIED);
        let e1 = mk(usid, seg);
        for e in [e0, e1] {
            let x = EvOpEntry {
                ev: Ev::UNPOPULATED,
                ev_new: e,
                ..EvOpEntry::default()
            };
            r.modify_ev(7, &op(ev_op::REPLACE_EV, vec![x])).unwrap();
        }
        r.modify_ev(7, &online()).unwrap();
        let q = r.qp_evs(7).unwrap();
        assert_eq!(q.evs, vec![0, 1]);
        let (s0, d0) = srv6_srh(&q.srv6[0], peer).unwrap();
        assert_eq!((d0, s0.segments.clone()), (usid, vec![peer, usid]));
        let (s1, d1) = srv6_srh(&q.srv6[1], peer).unwrap();
        assert_eq!((d1, s1.segments.clone()), (usid, vec![seg, usid]));
        assert_eq!(
            srv6_srh(&Ev::UNPOPULATED, peer).map(|_| ()),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn events_report_masked_changes_with_drop_counts() {
        let mut r = Registry::default();
        stev_fmt(&mut r, 13, &[16, 16]);
        r.modify_ev(1, &offline(ev_mode::EXP, 13, 2)).unwrap();
        for v in [10u32, 11] {
            let e = EvOpEntry {
                ev: Ev::UNPOPULATED,
                ev_new: Ev::from_u32(v),
                ..EvOpEntry::default()
            };
            r.modify_ev(1, &op(ev_op::REPLACE_EV, vec![e])).unwrap();
        }
        r.modify_ev(1, &online()).unwrap();
        r.event_cqs.push((
            0x1000,
            EventQueue {
                cqe: 2,
                ..EventQueue::default()
            },
        ));
        // The transport takes EV 10 out of rotation, then back; then EV 11 out: the third
        // does not fit and is counted on the next delivered one.
        r.note_transport(1, 10, false);
        r.note_transport(1, 10, true);
        r.note_transport(1, 11, false);
        let got = r.poll_events(0x1000, 8).unwrap();
        assert_eq!(
            got.iter()
                .map(|e| (e.ev.as_u32(), e.state, e.drop_count))
                .collect::<Vec<_>>(),
            vec![(10, ev_state::ASSUMED_BAD, 0), (10, ev_state::GOOD, 0)]
        );
        // DENIED is not a maskable event; un-denying reports GOOD (with the one dropped).
        let set = |s| EvOpEntry {
            ev: Ev::from_u32(11),
            state: s,
            ..EvOpEntry::default()
        };
        r.modify_ev(1, &op(ev_op::MODIFY_EV_STATE, vec![set(ev_state::DENIED)]))
            .unwrap();
        // A denied EV stays denied whatever the transport says.
        r.note_transport(1, 11, true);
        assert_eq!(r.ev[&1].states, vec![ev_state::GOOD, ev_state::DENIED]);
        r.modify_ev(1, &op(ev_op::MODIFY_EV_STATE, vec![set(ev_state::GOOD)]))
            .unwrap();
        let got = r.poll_events(0x1000, 8).unwrap();
        assert_eq!(
            got.iter()
                .map(|e| (e.profile_id, e.ev.as_u32(), e.state, e.drop_count))
                .collect::<Vec<_>>(),
            vec![(1, 11, ev_state::GOOD, 1)]
        );
        assert_eq!(r.poll_events(0x2000, 1), None);
    }

    #[test]
    fn nscc_profile_maps_every_parameter() {
        let cfg = NsccCfg {
            disable_qa: 1,
            adjust_bytes_threshold: 32768,
            adjust_period_threshold_ns: 20_000,
            base_rtt_ns: 12_000,
            eta: 600.0,
            fi: 2000.0,
            fi_scale: 0.5,
            gamma: 0.75,
            max_md_jump: 0.25,
            max_cwnd_bytes: 1_000_000,
            qa_gate: 4,
            qa_threshold_ns: 48_000,
            target_delay_ns: 9_000,
        };
        let link = LinkParams {
            line_rate_bps: 100_000_000_000,
            base_rtt_ns: 100_000,
            mtu_bytes: 4096,
            trimming_enabled: false,
        };
        let n = nscc_config(&cfg, &link).unwrap();
        assert_eq!(
            (
                n.base_rtt_ns,
                n.min_base_rtt_ns,
                n.target_qdelay_ns,
                n.max_cwnd_bytes,
                n.initial_cwnd_bytes,
                n.adjust_period_ns,
                n.adjust_bytes,
                n.quick_adapt,
                n.qa_threshold_ns,
                n.qa_gate_shift,
                n.mtu_bytes,
                n.line_rate_bps,
            ),
            (
                12_000,
                6_000,
                9_000,
                1_000_000,
                1_000_000,
                20_000,
                32768,
                false,
                48_000,
                4,
                4096,
                100_000_000_000
            )
        );
        assert_eq!(
            (
                n.eta_bytes,
                n.fair_increase_bytes,
                n.fast_increase_scale,
                n.md_gain,
                n.max_md_fraction
            ),
            (600.0, 2000.0, 0.5, 0.75, 0.25)
        );
        // gamma 0 and a zero target are refused by NSCC's own checks.
        assert_eq!(
            nscc_config(&NsccCfg { gamma: 0.0, ..cfg }, &link),
            Err(libc::EINVAL)
        );
        assert_eq!(
            nscc_config(
                &NsccCfg {
                    target_delay_ns: 0,
                    ..cfg
                },
                &link
            ),
            Err(libc::EINVAL)
        );
        // The profile: OFFLINE needs the algorithm, ONLINE its config; unknown names and
        // a config for profile 0 are EINVAL; NULL is "no CC".
        let mut r = Registry::default();
        let m = |mask, state, alg: Option<&str>, config| CcModify {
            mask,
            state,
            algorithm: alg.map(str::to_owned),
            config,
        };
        assert_eq!(
            r.modify_cc(3, &m(mask::CC_STATE, 1, None, None)),
            Err(libc::EINVAL)
        );
        assert_eq!(
            r.modify_cc(
                3,
                &m(mask::CC_STATE | mask::CC_ALGORITHM, 1, Some("dcqcn"), None)
            ),
            Err(libc::EINVAL)
        );
        r.modify_cc(
            3,
            &m(
                mask::CC_STATE | mask::CC_ALGORITHM,
                1,
                Some(NSCC_ALGORITHM),
                None,
            ),
        )
        .unwrap();
        assert_eq!(
            r.modify_cc(3, &m(mask::CC_STATE, 2, None, None)),
            Err(libc::EINVAL)
        );
        r.modify_cc(3, &m(mask::CC_STATE | mask::CC_CONFIG, 2, None, Some(cfg)))
            .unwrap();
        assert_eq!(r.qp_cc(3, &link).unwrap(), Some(n));
        assert_eq!(r.qp_cc(0, &link).unwrap(), None);
        assert_eq!(r.qp_cc(4, &link), Err(libc::ENOENT));
        r.modify_cc(5, &m(mask::CC_STATE | mask::CC_ALGORITHM, 1, None, None))
            .unwrap();
        r.modify_cc(5, &m(mask::CC_STATE, 2, None, None)).unwrap();
        assert_eq!(r.qp_cc(5, &link).unwrap(), None);
        assert!(r.cc_usable(3) && r.cc_usable(5) && !r.cc_usable(4));
        assert_eq!(
            r.modify_cc(0, &m(mask::CC_STATE, 1, None, None)),
            Err(libc::EINVAL)
        );
    }

    /// Issue 43: an EV's port names its plane. REPLACE_EV takes the controller's
    /// context's ports only; the provider's EVs (AUTO, GEN) are interleaved over them;
    /// `qp_evs` carries each transport EV's port and `ev_planes` turns them into the
    /// transport's planes or a typed error.
    #[test]
    fn ev_ports_name_planes() {
        let mut r = Registry::default();
        stev_fmt(&mut r, 1, &[32]);
        let replace = |v: u32, port: u8| EvOpEntry {
            ev: Ev::UNPOPULATED,
            ev_new: Ev {
                port,
                ..Ev::from_u32(v)
            },
            ..EvOpEntry::default()
        };
        // One port (the controller's context on one device): port 2 is refused, as before.
        r.modify_ev(7, &offline(ev_mode::EXP, 1, 4)).unwrap();
        assert_eq!(
            r.modify_ev(7, &op(ev_op::REPLACE_EV, vec![replace(100, 2)])),
            Err(libc::EINVAL)
        );
        // Two ports: EV i on port 1 + i mod 2; port 3 is out of range, port 0 too.
        let two = |m: EvModify| EvModify { ports: 2, ..m };
        for bad in [0, 3] {
            assert_eq!(
                r.modify_ev(7, &two(op(ev_op::REPLACE_EV, vec![replace(100, bad)]))),
                Err(libc::EINVAL),
                "port {bad}"
            );
        }
        let entries = (0..4)
            .map(|i| replace(100 + i, 1 + (i % 2) as u8))
            .collect();
        r.modify_ev(7, &two(op(ev_op::REPLACE_EV, entries)))
            .unwrap();
        r.modify_ev(7, &online()).unwrap();
        let q = r.qp_evs(7).unwrap();
        assert_eq!(q.evs, [100, 101, 102, 103]);
        assert_eq!(q.ports, [1, 2, 1, 2]);
        assert_eq!(ev_planes(&q.ports, 2), Ok(vec![0, 1, 0, 1]));
        // One plane: the transport's own placement (nothing set), ports of 1 only.
        assert_eq!(ev_planes(&[1, 1], 1), Ok(Vec::new()));
        assert_eq!(
            ev_planes(&q.ports, 1),
            Err(PlaneError::PortOutOfRange {
                ev: 1,
                port: 2,
                planes: 1
            })
        );
        assert_eq!(
            ev_planes(&[1, 1, 1], 2),
            Err(PlaneError::PlaneWithoutEv { plane: 1 })
        );
        assert_eq!(ev_planes(&[], 2), Ok(Vec::new()));
        assert_eq!(ev_planes(&[1, 2, 1], 2), Ok(vec![0, 1, 0]));
        assert_eq!(
            ev_planes(&[1, 1, 1, 2], 2),
            Err(PlaneError::Unbalanced { counts: vec![3, 1] })
        );
        assert_eq!(
            PlaneError::PlaneWithoutEv { plane: 1 }.errno(),
            libc::EINVAL
        );
        // AUTO on two ports: interleaved; on one (0 counts as 1): port 1 as before.
        let auto = EvModify {
            mask: mask::EV_STATE | mask::EV_MODE | mask::EV_COUNT,
            state: 1,
            mode: ev_mode::AUTO,
            count: 6,
            ..EvModify::default()
        };
        r.modify_ev(8, &two(auto.clone())).unwrap();
        r.modify_ev(9, &auto).unwrap();
        for id in [8, 9] {
            r.modify_ev(id, &online()).unwrap();
        }
        assert_eq!(r.qp_evs(8).unwrap().ports, [1, 2, 1, 2, 1, 2]);
        assert_eq!(r.qp_evs(9).unwrap().ports, [1; 6]);
        assert_eq!(r.qp_evs(0).unwrap().ports, Vec::<u8>::new());
        assert_eq!(phy_port_mask(0), limits::PHY_PORT_MASK);
        assert_eq!(phy_port_mask(1), 0b10);
        assert_eq!(phy_port_mask(2), 0b110);
        assert_eq!(phy_port_mask(200), 0x1fe);
    }
}
