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
    /// `-d`: device name, or one per plane comma-separated (`rxe0,rxe1`: a host with one
    /// NIC port per plane, [`pick_devices`]), or the only device when `None`.
    pub device: Option<String>,
    /// `-i`: port.
    pub port: u8,
    /// `-x`: GID index.
    pub gid_index: u8,
}

/// The devices to open, one per plane: `-d`'s list (`rxe0,rxe1`: at most 8, none
/// repeated), else the only device libibverbs lists.
///
/// # Errors
/// A bad list; as [`pick_device`] without `-d`.
pub fn pick_devices(o: &VerbsOpts) -> Result<Vec<String>, String> {
    let Some(list) = &o.device else {
        return Ok(vec![pick_device(o)?]);
    };
    let names: Vec<String> = list.split(',').map(|d| d.trim().to_string()).collect();
    if names.len() > mrc_fabric::udp::MAX_PLANE_IPS || names.iter().any(String::is_empty) {
        return Err(format!(
            "-d {list}: give 1 to {} device names, comma-separated",
            mrc_fabric::udp::MAX_PLANE_IPS
        ));
    }
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(format!("-d {list}: {n} is given twice"));
        }
    }
    Ok(names)
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
    for dev in pick_devices(o)? {
        precheck_one(o, p, &names, dev)?;
    }
    Ok(())
}

/// [`precheck`] of one device `dev` among `names`.
fn precheck_one(
    o: &VerbsOpts,
    p: Option<&TestParams>,
    names: &[String],
    dev: String,
) -> Result<(), String> {
    if !names.contains(&dev) {
        return Err(VerbsError::DeviceNotFound {
            name: dev,
            available: names.to_vec(),
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

/// Per plane: where the peer's endpoint goes, and this side's endpoint.
pub type PlaneEndpoints = Vec<(PeerBook, EndpointAddr)>;

/// Opens the device (or one per plane, `-d rxe0,rxe1`: one engine over all of them,
/// [`mrc_fabric::verbs::start_engine_planes`]) and starts the engine; returns it with
/// each plane's peer table and endpoint.
///
/// # Errors
/// Every [`VerbsError`] as text, with a hint for an MTU that does not fit.
pub fn start(
    p: &TestParams,
    o: &VerbsOpts,
    ecfg: EngineConfig,
) -> Result<(mrc_fabric::engine::Context, PlaneEndpoints), String> {
    let devices = pick_devices(o)?;
    if devices.len() == 1 {
        let device = devices.into_iter().next().unwrap_or_default();
        let VerbsEngine { ctx, peers, local } =
            mrc_fabric::verbs::start_engine(config(p, o, device), ecfg).map_err(open_error)?;
        return Ok((ctx, vec![(peers, local)]));
    }
    let cfgs = devices.into_iter().map(|d| config(p, o, d)).collect();
    let e = mrc_fabric::verbs::start_engine_planes(cfgs, ecfg).map_err(open_error)?;
    Ok((e.ctx, e.planes))
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
    let devices = pick_devices(o)?;
    if devices.len() > 1 {
        return Err(
            "--progress caller runs one device: several devices (-d A,B: one per plane) need \
             --progress thread"
                .into(),
        );
    }
    let device = devices.into_iter().next().unwrap_or_default();
    mrc_fabric::verbs::start_worker(config(p, o, device), ecfg).map_err(open_error)
}

/// Swaps endpoint addresses with the peer on `s`, one per plane (a count byte, then
/// each endpoint's frame, plane 0 first), and registers the peer's endpoint on plane `p`
/// in `planes[p]`'s table under its GID (as an IP), plane 0's also under the control
/// connection's peer IP (which the engine's bootstrap then connects to).
///
/// # Errors
/// I/O and decode errors, a peer with another number of planes, as text.
pub fn exchange(
    s: &mut TcpStream,
    planes: &[(PeerBook, EndpointAddr)],
    timeout: Duration,
) -> Result<(), String> {
    use std::io::{Read, Write};
    let err = |e: VerbsError| format!("verbs address exchange: {e}");
    let io = |e: std::io::Error| format!("verbs address exchange: {e}");
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.write_all(&[planes.len() as u8]).map_err(io)?;
    for (_, local) in planes {
        write_endpoint(s, local).map_err(err)?;
    }
    let mut n = [0u8; 1];
    s.read_exact(&mut n).map_err(io)?;
    if usize::from(n[0]) != planes.len() {
        return Err(format!(
            "verbs address exchange: the peer runs on {} device(s) (planes) and this end on {}: \
             give both ends as many (-d A,B)",
            n[0],
            planes.len()
        ));
    }
    let ip = s.peer_addr().map_err(|e| e.to_string())?.ip();
    for (i, (book, _)) in planes.iter().enumerate() {
        let peer = read_endpoint(s).map_err(err)?;
        if i == 0 {
            book.insert(ip, peer.clone());
        }
        book.insert(mrc_fabric::verbs::gid_to_ip(peer.gid), peer);
    }
    Ok(())
}
