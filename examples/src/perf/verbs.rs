//! `--fabric verbs`: the engine on RDMA UD QPs ([`mrc_fabric::verbs`]). The device is
//! opened here; the peers swap their UD endpoint addresses (GID, Q_Key, QPNs) on the
//! control connection right before the engine's own bootstrap.

use super::opts::TestParams;
use mrc_fabric::engine::EngineConfig;
use mrc_fabric::verbs::addr::EndpointAddr;
use mrc_fabric::verbs::exchange::{read_endpoint, write_endpoint};
use mrc_fabric::verbs::{
    PeerBook, VerbsConfig, VerbsEngine, VerbsError, VerbsWorker, device_names,
};
use std::net::TcpStream;
use std::time::Duration;

/// Bytes of mrc headers on top of `--mtu` in the largest datagram (the engine's slot
/// margin, see `EngineConfig::slot_bytes`).
pub const HEADER_BYTES: u32 = 56;

/// Where the verbs datapath runs on this host (not sent to the peer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsOpts {
    /// `-d`: device name, or the only device when `None`.
    pub device: Option<String>,
    /// `-i`: port.
    pub port: u8,
    /// `-x`: GID index.
    pub gid_index: u8,
}

/// The device to open: `-d`, else the only one libibverbs lists.
///
/// # Errors
/// No devices (the typed message of [`VerbsError::NoDevices`]), several without `-d`,
/// built without the feature.
pub fn pick_device(o: &VerbsOpts) -> Result<String, String> {
    if let Some(d) = &o.device {
        return Ok(d.clone());
    }
    match device_names().map_err(|e| e.to_string())? {
        names if names.is_empty() => Err(VerbsError::NoDevices {
            detail: "ibv_get_device_list returned 0 devices".into(),
        }
        .to_string()),
        names if names.len() == 1 => Ok(names[0].clone()),
        names => Err(format!(
            "several RDMA devices ({names:?}): choose one with -d"
        )),
    }
}

/// Fails early, before any connection, when the device cannot be had: no devices, `-d`
/// not among them, no verbs support compiled in; then opens it once (and closes it) to
/// check the port (`-i`), the GID entry (`-x`) and, when `p` is given (client, loopback:
/// the side that chooses `--mtu`), the datagram size against the port's active MTU. A
/// server checks with the smallest datagram; its client's `--mtu` is checked when the test
/// starts.
///
/// # Errors
/// The typed message naming what is missing or wrong.
pub fn precheck(o: &VerbsOpts, p: Option<&TestParams>) -> Result<(), String> {
    let names = device_names().map_err(|e| e.to_string())?;
    let dev = pick_device(o)?;
    if !names.contains(&dev) {
        return Err(VerbsError::DeviceNotFound {
            name: dev,
            available: names,
        }
        .to_string());
    }
    let mut c = VerbsConfig::new(dev);
    c.port = o.port;
    c.gid_index = o.gid_index;
    // One small QP: what is checked is the device, not the test's queue sizes.
    c.qps = 1;
    c.sq_depth = 16;
    c.rq_depth = 16;
    c.signal_every = 16;
    c.send_slots = 16;
    c.max_datagram_bytes = p.map_or(256, |p| p.mtu + HEADER_BYTES);
    mrc_fabric::verbs::check_device(c)
        .map(|_| ())
        .map_err(open_error)
}

/// The message of a failed open, with a hint for an MTU that does not fit.
fn open_error(e: VerbsError) -> String {
    match e {
        VerbsError::MtuTooSmall { mtu_bytes, .. } => format!(
            "{e}: pass --mtu {} or less (a UD datagram is at most the port MTU, and mrc adds \
             up to {HEADER_BYTES} header bytes)",
            mtu_bytes.saturating_sub(HEADER_BYTES)
        ),
        e => e.to_string(),
    }
}

/// The datapath configuration for test `p`: one UD QP per EV group, datagrams of
/// `--mtu` + headers, queue and pool sizes bounded for many paths.
pub fn config(p: &TestParams, o: &VerbsOpts, device: String) -> VerbsConfig {
    let mut c = VerbsConfig::new(device);
    c.port = o.port;
    c.gid_index = o.gid_index;
    c.qps = p.paths.div_ceil(p.burst_size.max(1)).clamp(1, 1024);
    c.max_datagram_bytes = p.mtu + HEADER_BYTES;
    c.rq_depth = (16384 / c.qps).clamp(16, 256);
    c.send_slots =
        (c.qps * c.sq_depth).clamp(c.qps * c.signal_every, 8192.max(c.qps * c.signal_every));
    c
}

/// Opens the device and starts the engine.
///
/// # Errors
/// Every [`VerbsError`] as text, with a hint for an MTU that does not fit.
pub fn start(p: &TestParams, o: &VerbsOpts, ecfg: EngineConfig) -> Result<VerbsEngine, String> {
    let device = pick_device(o)?;
    mrc_fabric::verbs::start_engine(config(p, o, device), ecfg).map_err(open_error)
}

/// Opens the device and makes a caller-progressed worker on it (`--progress caller`).
///
/// # Errors
/// As [`start`].
pub fn start_worker(
    p: &TestParams,
    o: &VerbsOpts,
    ecfg: EngineConfig,
) -> Result<VerbsWorker, String> {
    let device = pick_device(o)?;
    mrc_fabric::verbs::start_worker(config(p, o, device), ecfg).map_err(open_error)
}

/// Swaps endpoint addresses with the peer on `s` and registers the peer's under the
/// control connection's peer IP (which the engine's bootstrap then connects to).
///
/// # Errors
/// I/O and decode errors, as text.
pub fn exchange(
    s: &mut TcpStream,
    book: &PeerBook,
    local: &EndpointAddr,
    timeout: Duration,
) -> Result<(), String> {
    let err = |e: VerbsError| format!("verbs address exchange: {e}");
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write_endpoint(s, local).map_err(err)?;
    let peer = read_endpoint(s).map_err(err)?;
    let ip = s.peer_addr().map_err(|e| e.to_string())?.ip();
    book.insert(ip, peer);
    Ok(())
}
