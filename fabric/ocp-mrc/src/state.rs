//! The QP state machine of `mrc_modify_qp` and the mapping of `struct mrc_qp_attr` onto
//! the transport's parameters. Pure: no device, no clock; the runtime applies what this
//! module decides.
//!
//! Transitions (as `ibv_modify_qp` on an RC QP, with MRC 1.0's attribute table):
//!
//! ```text
//! RESET -> INIT   ibv: STATE [PKEY_INDEX PORT ACCESS_FLAGS]   mrc: HINT EV_PROFILE_ID CC_PROFILE_ID
//! INIT  -> INIT   as above
//! INIT  -> RTR    ibv: STATE AV DEST_QPN [PATH_MTU RQ_PSN]     mrc: MAX_WIMM_DEST MPR_DEST CAP
//! RTR   -> RTS    ibv: STATE [SQ_PSN]                          mrc: MAX_WIMM MPR RETRY_CNT TIMEOUT
//! RTS   -> RTS    ibv: STATE                                   mrc: MAX_WIMM MPR RETRY_CNT TIMEOUT
//! any   -> RESET, any -> ERR
//! ```
//!
//! `MRC_QP_VENDOR_CFG` is accepted with any transition (stored, not interpreted). The
//! ibv attributes `mrc.h` lists as not supported (PORT, TIMEOUT, RETRY_CNT, RNR_RETRY,
//! MIN_RNR_TIMER, MAX_QP_RD_ATOMIC, MAX_DEST_RD_ATOMIC) are accepted and ignored, because
//! the published example programs pass several of them (`IBV_QP_PORT` at INIT,
//! `IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY` at RTS) and must run unchanged;
//! ALT_PATH and PATH_MIG_STATE (no alternate path on a multipath transport), QKEY, CAP and
//! RATE_LIMIT are refused with `EINVAL`.

use crate::abi::{attr_mask as m, limits, qp_cap};

/// `enum ibv_qp_attr_mask` bits (libibverbs `verbs.h`).
pub mod ibv_mask {
    /// `IBV_QP_STATE`.
    pub const STATE: u32 = 1 << 0;
    /// `IBV_QP_CUR_STATE`.
    pub const CUR_STATE: u32 = 1 << 1;
    /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    /// `IBV_QP_ACCESS_FLAGS`.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `IBV_QP_PORT`.
    pub const PORT: u32 = 1 << 5;
    /// `IBV_QP_QKEY`.
    pub const QKEY: u32 = 1 << 6;
    /// `IBV_QP_AV`.
    pub const AV: u32 = 1 << 7;
    /// `IBV_QP_PATH_MTU`.
    pub const PATH_MTU: u32 = 1 << 8;
    /// `IBV_QP_TIMEOUT`.
    pub const TIMEOUT: u32 = 1 << 9;
    /// `IBV_QP_RETRY_CNT`.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `IBV_QP_RNR_RETRY`.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `IBV_QP_RQ_PSN`.
    pub const RQ_PSN: u32 = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// `IBV_QP_ALT_PATH`.
    pub const ALT_PATH: u32 = 1 << 14;
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `IBV_QP_SQ_PSN`.
    pub const SQ_PSN: u32 = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `IBV_QP_PATH_MIG_STATE`.
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    /// `IBV_QP_CAP`.
    pub const CAP: u32 = 1 << 19;
    /// `IBV_QP_DEST_QPN`.
    pub const DEST_QPN: u32 = 1 << 20;
    /// Accepted and ignored at any transition (see the module doc).
    pub const IGNORED: u32 = PORT
        | TIMEOUT
        | RETRY_CNT
        | RNR_RETRY
        | MIN_RNR_TIMER
        | MAX_QP_RD_ATOMIC
        | MAX_DEST_RD_ATOMIC
        | EN_SQD_ASYNC_NOTIFY;
}

/// `enum ibv_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// `IBV_QPS_RESET` (0).
    Reset,
    /// `IBV_QPS_INIT` (1).
    Init,
    /// `IBV_QPS_RTR` (2).
    Rtr,
    /// `IBV_QPS_RTS` (3).
    Rts,
    /// `IBV_QPS_ERR` (6).
    Err,
}

impl QpState {
    /// The state of an `enum ibv_qp_state` value; `None` for SQD (4), SQE (5) and
    /// unknown values.
    pub fn from_ibv(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            6 => QpState::Err,
            _ => return None,
        })
    }

    /// The `enum ibv_qp_state` value.
    pub fn to_ibv(self) -> u32 {
        match self {
            QpState::Reset => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Err => 6,
        }
    }
}

/// What `mrc_modify_qp` is asked, in plain values (the runtime copies them out of
/// `struct ibv_qp_attr` and `struct mrc_qp_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyRequest {
    /// `ibv_qp_attr_mask`.
    pub ibv_mask: u32,
    /// `ibv_qp_attr.qp_state` (`enum ibv_qp_state`).
    pub qp_state: u32,
    /// `ibv_qp_attr.cur_qp_state`.
    pub cur_qp_state: u32,
    /// `mrc_qp_attr_mask`.
    pub mrc_mask: u32,
    /// The MRC attributes (only the fields `mrc_mask` names are read).
    pub attr: MrcSettings,
}

/// The MRC attributes of one QP as the transport applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrcSettings {
    /// Requestor MPR, units of 128 PSNs.
    pub mpr: u8,
    /// Responder MPR, units of 128 PSNs.
    pub mpr_dest: u8,
    /// WRITE_WITH_IMM in flight, requestor.
    pub max_wimm: u16,
    /// WRITE_WITH_IMM in flight, responder.
    pub max_wimm_dest: u16,
    /// ACK timeout exponent.
    pub timeout: u8,
    /// Linear retries.
    pub linear_cnt: u8,
    /// Exponential retries (25 = infinite).
    pub exp_cnt: u8,
    /// EV profile id.
    pub ev_profile_id: u64,
    /// CC profile id.
    pub cc_profile_id: u64,
    /// `MRC_QP_CAP_*` bits.
    pub cap: u32,
}

impl Default for MrcSettings {
    fn default() -> Self {
        MrcSettings {
            mpr: limits::DEFAULT_MPR,
            mpr_dest: limits::DEFAULT_MPR,
            max_wimm: limits::DEFAULT_WIMM,
            max_wimm_dest: limits::DEFAULT_WIMM,
            timeout: limits::DEFAULT_TIMEOUT,
            linear_cnt: limits::DEFAULT_LINEAR_RETRY,
            exp_cnt: limits::DEFAULT_EXP_RETRY,
            ev_profile_id: 0,
            cc_profile_id: 0,
            cap: 0,
        }
    }
}

/// MRC attributes each target state may set (`MRC_QP_VENDOR_CFG` with any).
pub fn mrc_mask_allowed(to: QpState) -> u32 {
    m::VENDOR_CFG
        | match to {
            QpState::Init => m::HINT | m::EV_PROFILE_ID | m::CC_PROFILE_ID,
            QpState::Rtr => m::MAX_WIMM_DEST | m::MPR_DEST | m::CAP,
            QpState::Rts => m::MAX_WIMM | m::MPR | m::RETRY_CNT | m::TIMEOUT,
            QpState::Reset | QpState::Err => 0,
        }
}

/// ibv attributes each transition may carry, besides [`ibv_mask::IGNORED`].
fn ibv_allowed(from: QpState, to: QpState) -> u32 {
    use ibv_mask::*;
    STATE
        | CUR_STATE
        | match (from, to) {
            (QpState::Reset | QpState::Init, QpState::Init) => PKEY_INDEX | ACCESS_FLAGS,
            (QpState::Init, QpState::Rtr) => {
                AV | DEST_QPN | PATH_MTU | RQ_PSN | PKEY_INDEX | ACCESS_FLAGS
            }
            (QpState::Rtr, QpState::Rts) => SQ_PSN | ACCESS_FLAGS,
            (QpState::Rts, QpState::Rts) => ACCESS_FLAGS,
            _ => 0,
        }
}

/// ibv attributes a transition requires.
fn ibv_required(from: QpState, to: QpState) -> u32 {
    use ibv_mask::*;
    match (from, to) {
        (QpState::Init, QpState::Rtr) => AV | DEST_QPN,
        _ => 0,
    }
}

/// Why a modify is refused: the errno `mrc_modify_qp` returns (and sets).
pub type Errno = i32;

/// The outcome of a valid modify: the new state and the settings in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modified {
    /// State after the call.
    pub state: QpState,
    /// Settings after the call.
    pub settings: MrcSettings,
}

/// Checks `req` against the QP in state `cur` with settings `now`; returns what results
/// or the errno (`EINVAL` for a bad transition, a missing or refused attribute, an out of
/// range value or an unknown profile id; `EOPNOTSUPP` for a capability this provider
/// lacks). Without `IBV_QP_STATE` only RTS may be modified in place (RTS -> RTS).
pub fn check_modify(
    cur: QpState,
    now: MrcSettings,
    req: &ModifyRequest,
) -> Result<Modified, Errno> {
    use ibv_mask::*;
    let to = if req.ibv_mask & STATE != 0 {
        QpState::from_ibv(req.qp_state).ok_or(libc::EINVAL)?
    } else {
        cur
    };
    if req.ibv_mask & CUR_STATE != 0 && QpState::from_ibv(req.cur_qp_state) != Some(cur) {
        return Err(libc::EINVAL);
    }
    if matches!(to, QpState::Reset | QpState::Err) {
        // Anything goes to RESET or ERR; no attribute but the state matters.
        return Ok(Modified {
            state: to,
            settings: if to == QpState::Reset {
                MrcSettings::default()
            } else {
                now
            },
        });
    }
    let legal = matches!(
        (cur, to),
        (QpState::Reset, QpState::Init)
            | (QpState::Init, QpState::Init)
            | (QpState::Init, QpState::Rtr)
            | (QpState::Rtr, QpState::Rts)
            | (QpState::Rts, QpState::Rts)
    );
    if !legal {
        return Err(libc::EINVAL);
    }
    let extra = req.ibv_mask & !(ibv_allowed(cur, to) | IGNORED);
    if extra != 0 {
        return Err(libc::EINVAL);
    }
    let need = ibv_required(cur, to);
    if req.ibv_mask & need != need {
        return Err(libc::EINVAL);
    }
    if req.mrc_mask & !m::ALL != 0 || req.mrc_mask & !mrc_mask_allowed(to) != 0 {
        return Err(libc::EINVAL);
    }
    let a = req.attr;
    let mut s = now;
    // (MPR_RESOLUTION is 1: every value in range is a multiple of it.)
    let mpr_ok = |v: u8| (1..=limits::MAX_MPR).contains(&v);
    let wimm_ok = |v: u16| (1..=limits::MAX_WIMM).contains(&v);
    if req.mrc_mask & m::MPR != 0 {
        if !mpr_ok(a.mpr) {
            return Err(libc::EINVAL);
        }
        s.mpr = a.mpr;
    }
    if req.mrc_mask & m::MPR_DEST != 0 {
        if !mpr_ok(a.mpr_dest) {
            return Err(libc::EINVAL);
        }
        s.mpr_dest = a.mpr_dest;
    }
    if req.mrc_mask & m::MAX_WIMM != 0 {
        if !wimm_ok(a.max_wimm) {
            return Err(libc::EINVAL);
        }
        s.max_wimm = a.max_wimm;
    }
    if req.mrc_mask & m::MAX_WIMM_DEST != 0 {
        if !wimm_ok(a.max_wimm_dest) {
            return Err(libc::EINVAL);
        }
        s.max_wimm_dest = a.max_wimm_dest;
    }
    if req.mrc_mask & m::TIMEOUT != 0 {
        if a.timeout > limits::MAX_TIMEOUT {
            return Err(libc::EINVAL);
        }
        s.timeout = a.timeout;
    }
    if req.mrc_mask & m::RETRY_CNT != 0 {
        if a.linear_cnt > limits::MAX_LINEAR_RETRY || a.exp_cnt > limits::MAX_EXP_RETRY {
            return Err(libc::EINVAL);
        }
        s.linear_cnt = a.linear_cnt;
        s.exp_cnt = a.exp_cnt;
    }
    // Profiles are programmed by the controller API (`crate::ctl`): id 0, the provider's
    // default, or a profile that is ONLINE now in the node's tables (read again here).
    if req.mrc_mask & (m::EV_PROFILE_ID | m::CC_PROFILE_ID) != 0 {
        let mut r = crate::ctl::registry().lock().map_err(|_| libc::EIO)?;
        r.refresh()?;
        if req.mrc_mask & m::EV_PROFILE_ID != 0 {
            if !r.ev_usable(a.ev_profile_id) {
                return Err(libc::EINVAL);
            }
            s.ev_profile_id = a.ev_profile_id;
        }
        if req.mrc_mask & m::CC_PROFILE_ID != 0 {
            if !r.cc_usable(a.cc_profile_id) {
                return Err(libc::EINVAL);
            }
            s.cc_profile_id = a.cc_profile_id;
        }
    }
    if req.mrc_mask & m::CAP != 0 {
        if a.cap & !qp_cap::ALL != 0 {
            return Err(libc::EINVAL);
        }
        if a.cap & qp_cap::DYNAMIC_MPR != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        s.cap = a.cap;
    }
    Ok(Modified {
        state: to,
        settings: s,
    })
}

/// One ACK timeout, ns: 1.024 us x 2^`timeout` (`timeout` at most 24).
pub fn ack_timeout_ns(timeout: u8) -> u64 {
    1024u64 << timeout.min(limits::MAX_TIMEOUT)
}

/// The give-up budget of the exactly-once transport, ns: `linear_cnt` retries one ACK
/// timeout apart, then `exp_cnt` retries with the interval doubling each time
/// (`T * (linear + 1) + T * (2 + 4 + ... + 2^exp)`); `None` for `exp_cnt` 25 (retry
/// forever). The transport fails the outstanding work requests with
/// `IBV_WC_RETRY_EXC_ERR` once the peer has acknowledged nothing for this long.
pub fn give_up_budget_ns(s: &MrcSettings) -> Option<u64> {
    if s.exp_cnt >= limits::MAX_EXP_RETRY {
        return None;
    }
    let t = ack_timeout_ns(s.timeout);
    let linear = t.saturating_mul(u64::from(s.linear_cnt) + 1);
    // 2 + 4 + ... + 2^exp = 2^(exp + 1) - 2
    let exp = t.saturating_mul((1u64 << (u32::from(s.exp_cnt) + 1)) - 2);
    Some(linear.saturating_add(exp))
}

/// Whether the QP tells its peer not to NACK trimmed packets: `MRC_QP_CAP` has
/// `TRIM_NACK_DEST_UNSUPPORTED` ("the responder does not support generating TRIM NACKs").
/// The flag travels in the rendezvous ([`crate::wire::HELLO_NO_TRIM_NACK`]) and the peer's
/// transport connection then runs with `trim_nacks` off, as a responder without the
/// support would: the QP's trimmed WRITE packets are recovered by its loss detection.
pub fn asks_no_trim_nacks(s: &MrcSettings) -> bool {
    s.cap & qp_cap::TRIM_NACK_DEST_UNSUPPORTED != 0
}

/// Packets the requestor keeps outstanding: MPR x 128 PSNs.
pub fn window_packets(mpr: u8) -> u32 {
    u32::from(mpr) * 128
}

/// `enum ibv_mtu` as bytes (256 << (v - 1)); `None` outside 1..=5.
pub fn ibv_mtu_bytes(v: u32) -> Option<u32> {
    (1..=5).contains(&v).then(|| 256u32 << (v - 1))
}

/// The environment variable naming a context's further plane devices: a comma-separated
/// list of verbs device names, either the devices of planes 1, 2, ... (`rxe1`) or the
/// whole list, the context's own device first (`rxe0,rxe1`). Unset or empty: one plane,
/// the context's device, as without it. [`plane_devices`] parses it.
pub const PLANE_DEVICES_ENV: &str = "MRC_PLANE_DEVICES";

/// Why `MRC_PLANE_DEVICES` is refused ([`plane_devices`]); `mrc_create_context` fails
/// with [`PlaneDevicesError::errno`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaneDevicesError {
    /// An empty entry (`rxe1,,rxe2`, a trailing comma).
    EmptyEntry,
    /// A name no verbs device has (`ENODEV`).
    Unknown(String),
    /// A device named twice, or the context's own device past the list's head.
    Repeated(String),
    /// More planes than a datapath takes (`limits::MAX_PORTS`, 8).
    TooMany(usize),
}

impl PlaneDevicesError {
    /// The errno: `ENODEV` for an unknown device, else `EINVAL`.
    pub fn errno(&self) -> i32 {
        match self {
            PlaneDevicesError::Unknown(_) => libc::ENODEV,
            _ => libc::EINVAL,
        }
    }
}

impl std::fmt::Display for PlaneDevicesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlaneDevicesError::EmptyEntry => write!(f, "{PLANE_DEVICES_ENV} has an empty entry"),
            PlaneDevicesError::Unknown(d) => {
                write!(f, "{PLANE_DEVICES_ENV}: no verbs device {d:?}")
            }
            PlaneDevicesError::Repeated(d) => write!(
                f,
                "{PLANE_DEVICES_ENV}: device {d:?} named twice (one device per plane, the \
                 context's first)"
            ),
            PlaneDevicesError::TooMany(n) => write!(
                f,
                "{PLANE_DEVICES_ENV}: {n} planes, at most {}",
                crate::ctl::limits::MAX_PORTS
            ),
        }
    }
}

impl std::error::Error for PlaneDevicesError {}

/// The devices of planes 1, 2, ... of a context on device `own`, from `spec` (the value
/// of [`PLANE_DEVICES_ENV`]; see there), each checked against the host's verbs devices
/// `known`. Empty for an empty `spec` (one plane).
///
/// # Errors
/// [`PlaneDevicesError`]: an empty entry, a device `known` lacks, a device twice (or
/// `own` anywhere but first), more than `limits::MAX_PORTS` planes in all.
pub fn plane_devices(
    own: &str,
    spec: &str,
    known: &[String],
) -> Result<Vec<String>, PlaneDevicesError> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Ok(Vec::new());
    }
    let mut names: Vec<&str> = spec.split(',').map(str::trim).collect();
    if names.contains(&"") {
        return Err(PlaneDevicesError::EmptyEntry);
    }
    if names[0] == own {
        names.remove(0);
    }
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if n == own || out.iter().any(|o| o == n) {
            return Err(PlaneDevicesError::Repeated(n.to_string()));
        }
        if !known.iter().any(|k| k == n) {
            return Err(PlaneDevicesError::Unknown(n.to_string()));
        }
        out.push(n.to_string());
    }
    if out.len() + 1 > usize::from(crate::ctl::limits::MAX_PORTS) {
        return Err(PlaneDevicesError::TooMany(out.len() + 1));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::ibv_mask::*;
    use super::*;

    fn req(ibv: u32, state: QpState, mrc: u32, attr: MrcSettings) -> ModifyRequest {
        ModifyRequest {
            ibv_mask: ibv,
            qp_state: state.to_ibv(),
            cur_qp_state: 0,
            mrc_mask: mrc,
            attr,
        }
    }

    /// After a remote access error the QP is in ERR: it comes back only through RESET
    /// (any state may go there; the MRC attributes return to their defaults), then
    /// RESET -> INIT -> RTR -> RTS as a new QP.
    #[test]
    fn err_and_rts_reset_to_the_defaults_and_connect_again() {
        let d = MrcSettings::default();
        let tuned = MrcSettings {
            mpr: 2,
            max_wimm: 2,
            timeout: 16,
            cap: qp_cap::TRIM_NACK_DEST_UNSUPPORTED,
            ..d
        };
        for from in [QpState::Err, QpState::Rts, QpState::Rtr, QpState::Init] {
            let r = check_modify(from, tuned, &req(STATE, QpState::Reset, 0, d)).unwrap();
            assert_eq!(
                r,
                Modified {
                    state: QpState::Reset,
                    settings: d
                }
            );
        }
        // ERR cannot go straight back to INIT, RTR or RTS
        for to in [QpState::Init, QpState::Rtr, QpState::Rts] {
            assert_eq!(
                check_modify(QpState::Err, tuned, &req(STATE | AV | DEST_QPN, to, 0, d)),
                Err(libc::EINVAL)
            );
        }
        let init =
            check_modify(QpState::Reset, d, &req(STATE | PORT, QpState::Init, 0, d)).unwrap();
        let rtr = check_modify(
            init.state,
            init.settings,
            &req(STATE | AV | DEST_QPN | PATH_MTU, QpState::Rtr, 0, d),
        )
        .unwrap();
        let rts = check_modify(rtr.state, rtr.settings, &req(STATE, QpState::Rts, 0, d)).unwrap();
        assert_eq!(
            rts,
            Modified {
                state: QpState::Rts,
                settings: d
            }
        );
        assert_eq!((rts.settings.mpr, rts.settings.timeout), (8, 14));
    }

    #[test]
    fn the_example_programs_path_is_accepted() {
        let d = MrcSettings::default();
        let init = check_modify(
            QpState::Reset,
            d,
            &req(
                STATE | PKEY_INDEX | PORT | ACCESS_FLAGS,
                QpState::Init,
                0,
                d,
            ),
        )
        .unwrap();
        assert_eq!(init.state, QpState::Init);
        let rtr = check_modify(
            QpState::Init,
            d,
            &req(
                STATE | AV | DEST_QPN | RQ_PSN | PATH_MTU,
                QpState::Rtr,
                0,
                d,
            ),
        )
        .unwrap();
        assert_eq!(rtr.state, QpState::Rtr);
        let rts = check_modify(
            QpState::Rtr,
            d,
            &req(
                STATE | SQ_PSN | RETRY_CNT | RNR_RETRY | TIMEOUT,
                QpState::Rts,
                0,
                d,
            ),
        )
        .unwrap();
        assert_eq!(rts.state, QpState::Rts);
        assert_eq!(rts.settings, d);
    }

    #[test]
    fn bad_transitions_and_attributes_are_einval() {
        let d = MrcSettings::default();
        // RESET -> RTR skips INIT.
        assert_eq!(
            check_modify(
                QpState::Reset,
                d,
                &req(STATE | AV | DEST_QPN, QpState::Rtr, 0, d)
            ),
            Err(libc::EINVAL)
        );
        // RTR without the address vector.
        assert_eq!(
            check_modify(QpState::Init, d, &req(STATE | DEST_QPN, QpState::Rtr, 0, d)),
            Err(libc::EINVAL)
        );
        // An alternate path.
        assert_eq!(
            check_modify(
                QpState::Init,
                d,
                &req(STATE | ALT_PATH, QpState::Init, 0, d)
            ),
            Err(libc::EINVAL)
        );
        // MPR is an RTS attribute, not an INIT one.
        assert_eq!(
            check_modify(QpState::Reset, d, &req(STATE, QpState::Init, m::MPR, d)),
            Err(libc::EINVAL)
        );
        // SQD is not a state this QP has.
        let mut r = req(STATE, QpState::Init, 0, d);
        r.qp_state = 4;
        assert_eq!(check_modify(QpState::Init, d, &r), Err(libc::EINVAL));
        // CUR_STATE that is not the current state.
        let mut r = req(STATE | CUR_STATE, QpState::Init, 0, d);
        r.cur_qp_state = QpState::Rtr.to_ibv();
        assert_eq!(check_modify(QpState::Reset, d, &r), Err(libc::EINVAL));
    }

    #[test]
    fn rts_attributes_are_range_checked_and_applied() {
        let d = MrcSettings::default();
        let ok = MrcSettings {
            mpr: 2,
            max_wimm: 3,
            timeout: 10,
            linear_cnt: 1,
            exp_cnt: 2,
            ..d
        };
        let mask = m::MPR | m::MAX_WIMM | m::TIMEOUT | m::RETRY_CNT;
        let r = check_modify(QpState::Rtr, d, &req(STATE, QpState::Rts, mask, ok)).unwrap();
        assert_eq!((r.settings.mpr, r.settings.max_wimm), (2, 3));
        assert_eq!(r.settings.timeout, 10);
        for bad in [
            MrcSettings { mpr: 0, ..ok },
            MrcSettings { mpr: 33, ..ok },
            MrcSettings { max_wimm: 0, ..ok },
            MrcSettings {
                max_wimm: 1025,
                ..ok
            },
            MrcSettings { timeout: 25, ..ok },
            MrcSettings {
                linear_cnt: 8,
                ..ok
            },
            MrcSettings { exp_cnt: 26, ..ok },
        ] {
            assert_eq!(
                check_modify(QpState::Rtr, d, &req(STATE, QpState::Rts, mask, bad)),
                Err(libc::EINVAL),
                "{bad:?}"
            );
        }
        // RTS -> RTS without IBV_QP_STATE changes the window in place.
        let r2 = check_modify(
            QpState::Rts,
            r.settings,
            &req(0, QpState::Rts, m::MPR, MrcSettings { mpr: 4, ..d }),
        )
        .unwrap();
        assert_eq!((r2.state, r2.settings.mpr), (QpState::Rts, 4));
    }

    #[test]
    fn profiles_and_capabilities() {
        let d = MrcSettings::default();
        let p = MrcSettings {
            ev_profile_id: 7,
            ..d
        };
        assert_eq!(
            check_modify(
                QpState::Reset,
                d,
                &req(STATE, QpState::Init, m::EV_PROFILE_ID, p)
            ),
            Err(libc::EINVAL)
        );
        assert!(
            check_modify(
                QpState::Reset,
                d,
                &req(STATE, QpState::Init, m::CC_PROFILE_ID, d)
            )
            .is_ok()
        );
        let dyn_mpr = MrcSettings {
            cap: qp_cap::DYNAMIC_MPR,
            ..d
        };
        let rtr = STATE | AV | DEST_QPN;
        assert_eq!(
            check_modify(QpState::Init, d, &req(rtr, QpState::Rtr, m::CAP, dyn_mpr)),
            Err(libc::EOPNOTSUPP)
        );
        let no_trim = MrcSettings {
            cap: qp_cap::TRIM_NACK_DEST_UNSUPPORTED,
            ..d
        };
        let r = check_modify(QpState::Init, d, &req(rtr, QpState::Rtr, m::CAP, no_trim)).unwrap();
        assert_eq!(r.settings.cap, qp_cap::TRIM_NACK_DEST_UNSUPPORTED);
        assert!(asks_no_trim_nacks(&r.settings));
        assert!(!asks_no_trim_nacks(&d));
        let svc = MrcSettings {
            cap: qp_cap::SVC_TIME_DEST_UNSUPPORTED,
            ..d
        };
        assert!(!asks_no_trim_nacks(&svc));
    }

    #[test]
    fn online_controller_profiles_are_accepted_at_init() {
        use crate::ctl::{self, CcModify, EvModify, mask as cm};
        // Ids no other test uses: the registry is the process's.
        let (ev_id, cc_id) = (9001, 9002);
        {
            let mut r = ctl::registry().lock().unwrap();
            let auto = EvModify {
                mask: cm::EV_STATE | cm::EV_MODE,
                state: 1,
                mode: ctl::ev_mode::AUTO,
                ..EvModify::default()
            };
            r.modify_ev(ev_id, &auto).unwrap();
            let none = CcModify {
                mask: cm::CC_STATE | cm::CC_ALGORITHM,
                state: 1,
                ..CcModify::default()
            };
            r.modify_cc(cc_id, &none).unwrap();
        }
        let d = MrcSettings::default();
        let p = MrcSettings {
            ev_profile_id: ev_id,
            cc_profile_id: cc_id,
            ..d
        };
        let init = |mrc| req(STATE, QpState::Init, mrc, p);
        // OFFLINE profiles are not usable yet.
        assert_eq!(
            check_modify(QpState::Reset, d, &init(m::EV_PROFILE_ID)),
            Err(libc::EINVAL)
        );
        assert_eq!(
            check_modify(QpState::Reset, d, &init(m::CC_PROFILE_ID)),
            Err(libc::EINVAL)
        );
        {
            let mut r = ctl::registry().lock().unwrap();
            let on = EvModify {
                mask: cm::EV_STATE,
                state: 2,
                ..EvModify::default()
            };
            r.modify_ev(ev_id, &on).unwrap();
            let on = CcModify {
                mask: cm::CC_STATE,
                state: 2,
                ..CcModify::default()
            };
            r.modify_cc(cc_id, &on).unwrap();
            // AUTO: the provider's 16 EVs.
            assert_eq!(r.qp_evs(ev_id).unwrap().evs, (0..16).collect::<Vec<u32>>());
        }
        let out = check_modify(
            QpState::Reset,
            d,
            &init(m::EV_PROFILE_ID | m::CC_PROFILE_ID),
        )
        .unwrap();
        assert_eq!(
            (out.settings.ev_profile_id, out.settings.cc_profile_id),
            (ev_id, cc_id)
        );
    }

    #[test]
    fn budget_and_window_arithmetic() {
        assert_eq!(ack_timeout_ns(0), 1024);
        assert_eq!(ack_timeout_ns(24), 17_179_869_184);
        let s = MrcSettings {
            timeout: 10,
            linear_cnt: 2,
            exp_cnt: 3,
            ..MrcSettings::default()
        };
        // T = 1_048_576 ns; 3 T + (2 + 4 + 8) T = 17 T.
        assert_eq!(give_up_budget_ns(&s), Some(17 * 1_048_576));
        let inf = MrcSettings { exp_cnt: 25, ..s };
        assert_eq!(give_up_budget_ns(&inf), None);
        // The defaults: T = 16_777_216 ns, 8 T + 510 T.
        assert_eq!(
            give_up_budget_ns(&MrcSettings::default()),
            Some(518 * 16_777_216)
        );
        assert_eq!(window_packets(8), 1024);
        assert_eq!(ibv_mtu_bytes(5), Some(4096));
        assert_eq!(ibv_mtu_bytes(1), Some(256));
        assert_eq!(ibv_mtu_bytes(0), None);
    }

    /// Issue 43: `MRC_PLANE_DEVICES` as further devices or as the whole list, and each
    /// bad value's typed error and errno.
    #[test]
    fn plane_devices_parse_and_refuse() {
        let known: Vec<String> = ["rxe0", "rxe1", "rxe2", "mlx5_0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ok = |spec| plane_devices("rxe0", spec, &known);
        assert_eq!(ok(""), Ok(Vec::<String>::new()));
        assert_eq!(ok("  "), Ok(Vec::<String>::new()));
        assert_eq!(ok("rxe0"), Ok(Vec::<String>::new()));
        assert_eq!(ok("rxe1"), Ok(vec!["rxe1".to_string()]));
        assert_eq!(ok("rxe0,rxe1"), Ok(vec!["rxe1".to_string()]));
        assert_eq!(
            ok(" rxe1 , rxe2 "),
            Ok(vec!["rxe1".to_string(), "rxe2".to_string()])
        );
        let bad = [
            ("rxe1,", PlaneDevicesError::EmptyEntry, libc::EINVAL),
            (
                "rxe9",
                PlaneDevicesError::Unknown("rxe9".into()),
                libc::ENODEV,
            ),
            (
                "rxe1,rxe0",
                PlaneDevicesError::Repeated("rxe0".into()),
                libc::EINVAL,
            ),
            (
                "rxe1,rxe1",
                PlaneDevicesError::Repeated("rxe1".into()),
                libc::EINVAL,
            ),
        ];
        for (spec, e, errno) in bad {
            assert_eq!(ok(spec), Err(e.clone()), "{spec:?}");
            assert_eq!(e.errno(), errno, "{spec:?}");
        }
        let many: Vec<String> = (0..9).map(|i| format!("d{i}")).collect();
        assert_eq!(
            plane_devices("d0", &many.join(","), &many),
            Err(PlaneDevicesError::TooMany(9))
        );
        assert_eq!(
            plane_devices("d0", &many[..8].join(","), &many).map(|v| v.len()),
            Ok(7)
        );
    }
}
