//! Configuration and errors of the verbs datapath (pure: usable without the `verbs`
//! feature, so a binary can parse `--fabric verbs -d DEV` and report why it cannot run).

use super::addr::AddrError;
use super::batch::BatchError;
use super::pool::PoolError;
use thiserror::Error;

/// Default Q_Key of mrc's UD QPs (any value with the top bit clear; the top bit marks
/// controlled Q_Keys, IBTA Vol. 1, 10.2.4).
pub const DEFAULT_QKEY: u32 = 0x4d52_4300;

/// How the datapath opens a device and sizes its queues and pools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Device name as `ibv_devices` lists it (`mlx5_0`, `rxe0`).
    pub device: String,
    /// Port number, from 1. Default 1.
    pub port: u8,
    /// GID table index; on RoCE it must be a RoCEv2 entry (`show_gids` lists them; on
    /// ConnectX 0/1 are the link-local RoCEv1/RoCEv2 entries and 3 is usually the IPv4
    /// RoCEv2 one; on Soft-RoCE every entry is RoCEv2, 1 usually the IPv4 one). Default 1.
    pub gid_index: u8,
    /// UD QPs (one per EV; a connection's EV `i` uses QP `i % qps`). Default 16.
    pub qps: u32,
    /// Q_Key of every QP. Default [`DEFAULT_QKEY`].
    pub qkey: u32,
    /// Largest datagram, bytes (the UD payload; at most the port's active MTU). Default 4096.
    pub max_datagram_bytes: u32,
    /// Send-queue entries per QP (`max_send_wr`). Default 256.
    pub sq_depth: u32,
    /// Receive-queue entries per QP (`max_recv_wr`), all kept posted. Default 256.
    pub rq_depth: u32,
    /// Signal one send WR in this many. Default 16.
    pub signal_every: u32,
    /// Send buffer slots shared by all QPs. Default `qps * sq_depth`.
    pub send_slots: u32,
    /// IPv6 traffic class / IPv4 TOS of every packet (its low 2 bits are the ECN field:
    /// 0b10 ECT(0) lets switches mark CE). Default 0x02.
    pub traffic_class: u8,
    /// Hop limit of every packet. Default 64.
    pub hop_limit: u8,
    /// Give every (remote, EV) its own AH with the EV's flow label, so flow-label NICs
    /// send EV `e` from UDP port `0xC000 + e % 16384` (see [`super::sport`]). Default on;
    /// off = one AH per remote.
    pub flow_label_per_ev: bool,
}

impl VerbsConfig {
    /// The defaults on device `device`.
    pub fn new(device: impl Into<String>) -> VerbsConfig {
        VerbsConfig {
            device: device.into(),
            port: 1,
            gid_index: 1,
            qps: 16,
            qkey: DEFAULT_QKEY,
            max_datagram_bytes: 4096,
            sq_depth: 256,
            rq_depth: 256,
            signal_every: 16,
            send_slots: 16 * 256,
            traffic_class: 0x02,
            hop_limit: 64,
            flow_label_per_ev: true,
        }
    }

    /// Checks the sizes against each other.
    ///
    /// # Errors
    /// [`VerbsError::BadConfig`] naming the first bad field.
    pub fn check(&self) -> Result<(), VerbsError> {
        let bad = |s: String| Err(VerbsError::BadConfig(s));
        if self.device.is_empty() {
            return bad("device name is empty".into());
        }
        if self.port == 0 {
            return bad("port numbers start at 1".into());
        }
        if self.qps == 0 || self.qps as usize > super::addr::MAX_QPNS {
            return bad(format!(
                "qps {} outside 1..={}",
                self.qps,
                super::addr::MAX_QPNS
            ));
        }
        if self.qkey & 0x8000_0000 != 0 {
            return bad(format!("Q_Key {:#x} has the controlled bit set", self.qkey));
        }
        if self.max_datagram_bytes == 0 {
            return bad("max_datagram_bytes is 0".into());
        }
        if self.sq_depth == 0 || self.rq_depth == 0 {
            return bad("queue depths must be at least 1".into());
        }
        if self.signal_every == 0 || self.signal_every > self.sq_depth {
            return bad(format!(
                "signal_every {} outside 1..={}",
                self.signal_every, self.sq_depth
            ));
        }
        if self.send_slots == 0 {
            return bad("send_slots is 0".into());
        }
        Ok(())
    }
}

/// Why the verbs datapath could not open or run.
#[derive(Debug, Error)]
pub enum VerbsError {
    /// Built without the `verbs` cargo feature.
    #[error(
        "RDMA verbs support is not compiled in: rebuild with `--features mrc-fabric/verbs` \
         (needs libibverbs-dev, librdmacm-dev, libclang-dev, pkg-config)"
    )]
    NotCompiled,
    /// libibverbs lists no device at all.
    #[error(
        "no RDMA devices: libibverbs lists none ({detail}); load a NIC driver (mlx5_ib) or add \
         Soft-RoCE with `rdma link add rxe0 type rxe netdev IFACE`"
    )]
    NoDevices {
        /// What `ibv_get_device_list` said (the OS error when it failed).
        detail: String,
    },
    /// The named device is not among the listed ones.
    #[error("RDMA device {name:?} not found among {available:?}")]
    DeviceNotFound {
        /// Name asked for.
        name: String,
        /// Names libibverbs lists.
        available: Vec<String>,
    },
    /// The port is not ACTIVE (cable, link down, or no such port).
    #[error("port {port} of {device} is not active (state {state})")]
    PortNotActive {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// `ibv_port_state` value (4 = ACTIVE).
        state: u32,
    },
    /// The GID index is past the table or its entry is empty.
    #[error("GID index {index} of {device} port {port} is empty or past the table of {table_len}")]
    BadGid {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// Index asked for.
        index: u8,
        /// Entries in the GID table.
        table_len: i32,
    },
    /// On an Ethernet port the GID entry is not RoCEv2 (UDP encapsulated), so there would
    /// be no UDP source port to carry the EV.
    #[error("GID index {index} of {device} port {port} is {gid_type:?}, not RoCE v2")]
    NotRoceV2 {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// Index.
        index: u8,
        /// The type sysfs reports.
        gid_type: String,
    },
    /// The datagram size does not fit the port MTU.
    #[error("max_datagram_bytes {asked} exceeds the port's active MTU of {mtu_bytes} bytes")]
    MtuTooSmall {
        /// Configured.
        asked: u32,
        /// Port's active MTU.
        mtu_bytes: u32,
    },
    /// A verbs call failed.
    #[error("{call} failed: {source}")]
    Call {
        /// The verbs function.
        call: &'static str,
        /// The OS error it left in errno (or returned).
        source: std::io::Error,
    },
    /// A configuration value is unusable.
    #[error("bad verbs configuration: {0}")]
    BadConfig(String),
    /// Buffer pool misuse.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// Send-queue books misuse.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// A peer address that does not decode.
    #[error(transparent)]
    Addr(#[from] AddrError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_check_and_bad_fields_are_named() {
        let c = VerbsConfig::new("mlx5_0");
        assert_eq!(c.check().ok(), Some(()));
        let mut b = c.clone();
        b.signal_every = 300;
        assert_eq!(
            b.check().unwrap_err().to_string(),
            "bad verbs configuration: signal_every 300 outside 1..=256"
        );
        let mut q = c.clone();
        q.qkey = 0x8000_0001;
        assert!(
            q.check()
                .unwrap_err()
                .to_string()
                .contains("controlled bit")
        );
        let mut p = c;
        p.port = 0;
        assert!(p.check().is_err());
    }

    #[test]
    fn missing_device_messages_name_what_is_missing() {
        let e = VerbsError::DeviceNotFound {
            name: "mlx5_9".into(),
            available: vec!["mlx5_0".into(), "rxe0".into()],
        };
        assert_eq!(
            e.to_string(),
            "RDMA device \"mlx5_9\" not found among [\"mlx5_0\", \"rxe0\"]"
        );
        let n = VerbsError::NoDevices {
            detail: "0 devices".into(),
        };
        assert!(
            n.to_string()
                .starts_with("no RDMA devices: libibverbs lists none (0 devices)")
        );
    }
}
