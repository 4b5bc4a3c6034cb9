//! The values and the libibverbs-free structs of OCP MRC 1.0's `mrc.h` / `mrc_api_ver.h`,
//! as the published header defines them (the project's own declarations: see
//! `fabric/ocp-mrc/include/mrc.h`). Sizes and offsets are checked by this module's tests.

/// `MRC_API_VER(major, minor, subminor)`: `major << 24 | minor << 16 | subminor`.
pub const fn api_ver(major: u32, minor: u32, subminor: u32) -> u32 {
    (major << 24) | (minor << 16) | subminor
}

/// `MRC_API_CURRENT_VERSION`: 1.0.1.
pub const API_CURRENT_VERSION: u32 = api_ver(1, 0, 1);
/// `MRC_API_LAST_SUPPORTED_VERSION`: 0.0.0.
pub const API_LAST_SUPPORTED_VERSION: u32 = api_ver(0, 0, 0);
/// This provider's vendor API version (1.0.0: no vendor extensions yet).
pub const VENDOR_API_CURRENT_VERSION: u32 = api_ver(1, 0, 0);
/// Oldest vendor API version this provider accepts.
pub const VENDOR_API_LAST_SUPPORTED_VERSION: u32 = api_ver(0, 0, 0);

/// `MRC_MAX_VENDOR_CFG_SIZE`: bytes of opaque vendor configuration.
pub const MAX_VENDOR_CFG_SIZE: usize = 128;

/// `MRC_PROTOCOL_VERSION_0`: provider default.
pub const PROTOCOL_VERSION_0: u32 = 0;
/// `MRC_PROTOCOL_VERSION_1`: the one wire protocol version this provider speaks (mrc's
/// own wire format, docs/WIRE.md; not MRC 1.0's, see docs/OCP_MRC.md).
pub const PROTOCOL_VERSION_1: u32 = 1;

/// `MRC_DEVICE_CAP_TRIM_NACK`: the responder generates TRIM NACKs.
pub const DEVICE_CAP_TRIM_NACK: u32 = 1 << 0;
/// `MRC_DEVICE_CAP_DYNAMIC_MPR`.
pub const DEVICE_CAP_DYNAMIC_MPR: u32 = 1 << 1;
/// `MRC_DEVICE_CAP_SVC_TIME`.
pub const DEVICE_CAP_SVC_TIME: u32 = 1 << 2;

/// `enum mrc_qp_hint_attr_mask`.
pub mod hint_mask {
    /// `MRC_QP_HINT_NUM_QPS_PER_PEER`.
    pub const NUM_QPS_PER_PEER: u32 = 1 << 0;
    /// `MRC_QP_HINT_NUM_SEND_PEERS`.
    pub const NUM_SEND_PEERS: u32 = 1 << 1;
    /// `MRC_QP_HINT_NUM_REMOTE_RECV_PEERS`.
    pub const NUM_REMOTE_RECV_PEERS: u32 = 1 << 2;
    /// `MRC_QP_HINT_VENDOR_CFG`.
    pub const VENDOR_CFG: u32 = 1 << 31;
    /// Every bit defined.
    pub const ALL: u32 = NUM_QPS_PER_PEER | NUM_SEND_PEERS | NUM_REMOTE_RECV_PEERS | VENDOR_CFG;
}

/// `enum mrc_qp_attr_mask`.
pub mod attr_mask {
    /// `MRC_QP_MAX_WIMM`: max WRITE_WITH_IMM in flight as requestor.
    pub const MAX_WIMM: u32 = 1 << 0;
    /// `MRC_QP_MAX_WIMM_DEST`: as responder.
    pub const MAX_WIMM_DEST: u32 = 1 << 1;
    /// `MRC_QP_MPR`: requestor MPR (units of 128 PSNs).
    pub const MPR: u32 = 1 << 2;
    /// `MRC_QP_MPR_DEST`: responder MPR.
    pub const MPR_DEST: u32 = 1 << 3;
    /// `MRC_QP_TIMEOUT`: ACK timeout, 1.024 us x 2^t.
    pub const TIMEOUT: u32 = 1 << 4;
    /// `MRC_QP_EV_PROFILE_ID`.
    pub const EV_PROFILE_ID: u32 = 1 << 5;
    /// `MRC_QP_CC_PROFILE_ID`.
    pub const CC_PROFILE_ID: u32 = 1 << 6;
    /// `MRC_QP_HINT`.
    pub const HINT: u32 = 1 << 7;
    /// `MRC_QP_RETRY_CNT`: linear and exponential retry counts.
    pub const RETRY_CNT: u32 = 1 << 8;
    /// `MRC_QP_CAP`: `enum mrc_qp_cap` bits.
    pub const CAP: u32 = 1 << 9;
    /// `MRC_QP_VENDOR_CFG`.
    pub const VENDOR_CFG: u32 = 1 << 31;
    /// Every bit defined.
    pub const ALL: u32 = MAX_WIMM
        | MAX_WIMM_DEST
        | MPR
        | MPR_DEST
        | TIMEOUT
        | EV_PROFILE_ID
        | CC_PROFILE_ID
        | HINT
        | RETRY_CNT
        | CAP
        | VENDOR_CFG;
}

/// `enum mrc_qp_cap`.
pub mod qp_cap {
    /// `MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED`.
    pub const TRIM_NACK_DEST_UNSUPPORTED: u32 = 1 << 0;
    /// `MRC_QP_CAP_DYNAMIC_MPR`.
    pub const DYNAMIC_MPR: u32 = 1 << 1;
    /// `MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED`.
    pub const SVC_TIME_DEST_UNSUPPORTED: u32 = 1 << 2;
    /// Every bit defined.
    pub const ALL: u32 = TRIM_NACK_DEST_UNSUPPORTED | DYNAMIC_MPR | SVC_TIME_DEST_UNSUPPORTED;
}

/// What this provider advertises in `mrc_device_attr` (and enforces in
/// `mrc_modify_qp`).
pub mod limits {
    /// Largest MPR either role accepts, units of 128 PSNs: 32 = 4096 packets, the
    /// responder's receive window (every QP's, whatever `mpr_dest` asks).
    pub const MAX_MPR: u8 = 32;
    /// MPR granularity, units of 128 PSNs.
    pub const MPR_RESOLUTION: u8 = 1;
    /// Default requestor and responder MPR: 8 = 1024 packets (the transport's default
    /// window).
    pub const DEFAULT_MPR: u8 = 8;
    /// Largest WRITE_WITH_IMM-in-flight limit either role accepts.
    pub const MAX_WIMM: u16 = 1024;
    /// Default WRITE_WITH_IMM-in-flight limit.
    pub const DEFAULT_WIMM: u16 = 256;
    /// QP hints one context may hold.
    pub const MAX_QP_HINT: u32 = 1024;
    /// Largest ACK timeout exponent (1.024 us x 2^24 = 17.18 s).
    pub const MAX_TIMEOUT: u8 = 24;
    /// Largest linear retry count.
    pub const MAX_LINEAR_RETRY: u8 = 7;
    /// Largest exponential retry count; this value means "retry forever".
    pub const MAX_EXP_RETRY: u8 = 25;
    /// Default ACK timeout exponent: 14 (16.8 ms).
    pub const DEFAULT_TIMEOUT: u8 = 14;
    /// Default linear retry count.
    pub const DEFAULT_LINEAR_RETRY: u8 = 7;
    /// Default exponential retry count: 8 (with the default timeout the give-up budget is
    /// 518 x 16.8 ms = 8.7 s, see [`crate::state::give_up_budget_ns`]).
    pub const DEFAULT_EXP_RETRY: u8 = 8;
    /// Send work requests one QP accepts outstanding (`cap.max_send_wr` is clamped).
    pub const MAX_SEND_WR: u32 = 16384;
    /// Receive work requests one QP holds (`cap.max_recv_wr` is clamped).
    pub const MAX_RECV_WR: u32 = 16384;
    /// Scatter/gather entries per work request (`max_send_sge`, `max_recv_sge`).
    pub const MAX_SGE: u32 = 1;
    /// Entries one CQ holds (`cqe` is clamped up to 1 and refused above this).
    pub const MAX_CQE: i32 = 1 << 20;
}

/// `struct mrc_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcDeviceAttr {
    /// Bitmap of `MRC_PROTOCOL_VERSION_*` supported.
    pub mrc_protocol_version: u32,
    /// WIMM limits.
    pub wimm_attr: WimmAttr,
    /// MPR limits.
    pub mpr_attr: MprAttr,
    /// QP limits.
    pub qp_attr: DevQpAttr,
    /// `MRC_DEVICE_CAP_*` bits.
    pub cap: u32,
}

/// `mrc_device_attr.wimm_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WimmAttr {
    /// Max WRITE_WITH_IMM in flight as requestor.
    pub max_wimm: u16,
    /// As responder.
    pub max_wimm_dest: u16,
}

/// `mrc_device_attr.mpr_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MprAttr {
    /// Largest MPR, units of 128 PSNs.
    pub max_mpr: u8,
    /// Granularity, units of 128 PSNs.
    pub mpr_resolution: u8,
}

/// `mrc_device_attr.qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevQpAttr {
    /// QP hints supported.
    pub max_qp_hint: u32,
}

/// `struct mrc_context_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrcContextAttr {
    /// API version used (0: not said).
    pub mrc_api_version_used: u32,
    /// Vendor API version used (0: not said).
    pub mrc_vendor_api_version_used: u32,
}

/// `struct mrc_qp_hint_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrcQpHintAttr {
    /// QPs of the hint sending to one peer at once.
    pub num_qps_per_peer: i32,
    /// Peers sent to at once.
    pub num_send_peers: i32,
    /// Remote QPs targeting one peer (incast).
    pub num_remote_recv_peers: i32,
    /// Vendor hint bytes.
    pub vendor_cfg: [u8; MAX_VENDOR_CFG_SIZE],
}

impl Default for MrcQpHintAttr {
    fn default() -> Self {
        MrcQpHintAttr {
            num_qps_per_peer: 0,
            num_send_peers: 0,
            num_remote_recv_peers: 0,
            vendor_cfg: [0; MAX_VENDOR_CFG_SIZE],
        }
    }
}

/// `struct mrc_qp_attr` (the QP hint pointer as an opaque pointer).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrcQpAttr {
    /// MPR of both roles.
    pub mpr: QpMpr,
    /// WRITE_WITH_IMM-in-flight limits of both roles.
    pub wimm: QpWimm,
    /// ACK timeout exponent: 1.024 us x 2^timeout, at most 24.
    pub timeout: u8,
    /// EV and CC profile ids.
    pub profile: QpProfile,
    /// Retry counts.
    pub retry: QpRetry,
    /// `struct mrc_qp_hint *` (null: none).
    pub qp_hint: *mut libc::c_void,
    /// `MRC_QP_CAP_*` bits.
    pub cap: u32,
    /// Vendor bytes.
    pub vendor_cfg: [u8; MAX_VENDOR_CFG_SIZE],
}

impl Default for MrcQpAttr {
    fn default() -> Self {
        MrcQpAttr {
            mpr: QpMpr::default(),
            wimm: QpWimm::default(),
            timeout: 0,
            profile: QpProfile::default(),
            retry: QpRetry::default(),
            qp_hint: std::ptr::null_mut(),
            cap: 0,
            vendor_cfg: [0; MAX_VENDOR_CFG_SIZE],
        }
    }
}

/// `mrc_qp_attr.mpr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpMpr {
    /// Requestor MPR, units of 128 PSNs.
    pub mpr: u8,
    /// Responder MPR, units of 128 PSNs.
    pub mpr_dest: u8,
}

/// `mrc_qp_attr.wimm`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpWimm {
    /// Requestor limit.
    pub max_wimm: u16,
    /// Responder limit.
    pub max_wimm_dest: u16,
}

/// `mrc_qp_attr.profile`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpProfile {
    /// EV profile id (programmed by the controller, `mrc_ctl.h`).
    pub ev_profile_id: u64,
    /// CC profile id.
    pub cc_profile_id: u64,
}

/// `mrc_qp_attr.retry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpRetry {
    /// Linear retries, at most 7.
    pub linear_cnt: u8,
    /// Exponential retries, at most 25 (25 = infinite).
    pub exp_cnt: u8,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn versions_encode_as_the_header_macro() {
        assert_eq!(API_CURRENT_VERSION, 0x0100_0001);
        assert_eq!(api_ver(0xFF, 0xFF, 0xFFFF), 0xFFFF_FFFF);
        assert_eq!(VENDOR_API_CURRENT_VERSION, 0x0100_0000);
    }

    #[test]
    fn layouts_match_the_published_abi() {
        assert_eq!(size_of::<MrcDeviceAttr>(), 20);
        assert_eq!(offset_of!(MrcDeviceAttr, wimm_attr), 4);
        assert_eq!(offset_of!(MrcDeviceAttr, mpr_attr), 8);
        assert_eq!(offset_of!(MrcDeviceAttr, qp_attr), 12);
        assert_eq!(offset_of!(MrcDeviceAttr, cap), 16);
        assert_eq!(size_of::<MrcContextAttr>(), 8);
        assert_eq!(size_of::<MrcQpHintAttr>(), 140);
        assert_eq!(offset_of!(MrcQpHintAttr, vendor_cfg), 12);
        assert_eq!(size_of::<MrcQpAttr>(), 176);
        assert_eq!(offset_of!(MrcQpAttr, wimm), 2);
        assert_eq!(offset_of!(MrcQpAttr, timeout), 6);
        assert_eq!(offset_of!(MrcQpAttr, profile), 8);
        assert_eq!(offset_of!(MrcQpAttr, retry), 24);
        assert_eq!(offset_of!(MrcQpAttr, qp_hint), 32);
        assert_eq!(offset_of!(MrcQpAttr, cap), 40);
        assert_eq!(offset_of!(MrcQpAttr, vendor_cfg), 44);
    }

    #[test]
    fn masks_have_the_header_values() {
        assert_eq!(attr_mask::ALL, 0x8000_03ff);
        assert_eq!(hint_mask::ALL, 0x8000_0007);
        assert_eq!(qp_cap::ALL, 7);
    }
}
