//! The RDMA UD datapath (DESIGN.md section 7): one unreliable-datagram QP per EV, an
//! address handle per remote (and EV), registered send and receive buffer pools, batched
//! `post_send` with selective signalling, receive replenishment and completion polling.
//!
//! The pure parts build and test everywhere, with or without the `verbs` feature:
//! - [`pool`]: slot accounting of the registered buffer pools;
//! - [`grh`]: the 40-byte GRH in front of every UD receive (source GID, ECN);
//! - [`batch`]: work-request chains and selective signalling of a send queue;
//! - [`addr`]: the endpoint address (GID, LID, Q_Key, QPNs) exchanged out of band;
//! - [`sport`]: how an EV becomes the RoCEv2 UDP source port that ECMP hashes.
//!
//! The device half (feature `verbs`, links libibverbs through `rdma-sys`) opens a device by
//! name and uses them.

pub mod addr;
pub mod batch;
pub mod config;
pub mod exchange;
pub mod grh;
pub mod pool;
pub mod sport;

#[cfg(feature = "verbs")]
mod sys;

pub use config::{DEFAULT_QKEY, VerbsConfig, VerbsError};

mod datapath;
mod fake;
pub mod nic;

pub use datapath::{PeerBook, VerbsDatapath, VerbsStats, gid_to_ip, ip_to_gid};
pub use fake::{FakeFabric, FakeNic, FakeNicStats, FakePacket};
pub use nic::Nic;
#[cfg(feature = "verbs")]
pub use sys::Device;

/// Names of the RDMA devices libibverbs lists (what `ibv_devices` prints).
///
/// # Errors
/// [`VerbsError::NoDevices`] when libibverbs cannot list devices (no kernel RDMA support);
/// [`VerbsError::NotCompiled`] without the `verbs` feature.
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    #[cfg(feature = "verbs")]
    {
        sys::device_names()
    }
    #[cfg(not(feature = "verbs"))]
    {
        Err(VerbsError::NotCompiled)
    }
}

/// Opens `cfg.device` as [`start_engine`] would (port, GID entry, datagram size against the
/// active MTU, device limits), then closes it again: the checks of a real device without
/// an engine, so a command line can fail before it connects anywhere. Returns the port's
/// facts.
///
/// # Errors
/// What `VerbsDatapath::open` returns; [`VerbsError::NotCompiled`] without the `verbs`
/// feature.
pub fn check_device(cfg: VerbsConfig) -> Result<nic::PortInfo, VerbsError> {
    #[cfg(feature = "verbs")]
    {
        VerbsDatapath::open(cfg).map(|dp| dp.port())
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = cfg;
        Err(VerbsError::NotCompiled)
    }
}

/// An engine running on the verbs datapath, with what the control connection needs.
#[derive(Debug)]
pub struct VerbsEngine {
    /// The engine.
    pub ctx: crate::engine::Context,
    /// Where to register the peer's address before connecting a QP.
    pub peers: PeerBook,
    /// This side's address, to send to the peer ([`exchange::write_endpoint`]).
    pub local: addr::EndpointAddr,
}

/// Opens `cfg.device` (`VerbsDatapath::open`) and starts an engine on it. Always
/// available, so a binary needs no feature of its own to offer `--fabric verbs`.
///
/// # Errors
/// What `VerbsDatapath::open` returns; [`VerbsError::NotCompiled`] without the `verbs`
/// feature.
pub fn start_engine(
    cfg: VerbsConfig,
    engine: crate::engine::EngineConfig,
) -> Result<VerbsEngine, VerbsError> {
    #[cfg(feature = "verbs")]
    {
        let dp = VerbsDatapath::open(cfg)?;
        let (peers, local) = (dp.peer_book(), dp.local_endpoint().clone());
        Ok(VerbsEngine {
            ctx: crate::engine::Context::with_datapath(dp, engine),
            peers,
            local,
        })
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (cfg, engine);
        Err(VerbsError::NotCompiled)
    }
}

/// An engine on several verbs devices, one per plane (a host with one NIC port per plane:
/// [`crate::planes::PlanesDatapath`] over one [`VerbsDatapath`] per device), with what the
/// control connection needs per plane.
#[derive(Debug)]
pub struct VerbsPlanesEngine {
    /// The engine.
    pub ctx: crate::engine::Context,
    /// Per plane, plane 0 first: where to register the peer's address on that plane, and
    /// this side's address there ([`exchange::write_endpoint`]).
    pub planes: Vec<(PeerBook, addr::EndpointAddr)>,
}

/// Opens each of `cfgs`' devices (one per plane, plane 0 first; `VerbsDatapath::open`)
/// and starts one engine over all of them ([`crate::planes::PlanesDatapath`], each
/// device's GID address watched: a port whose interface goes down takes its plane out).
///
/// # Errors
/// What `VerbsDatapath::open` returns for any device; [`VerbsError::BadConfig`] for fewer
/// than two or more than 8 devices, two on one GID or of two families;
/// [`VerbsError::NotCompiled`] without the `verbs` feature.
pub fn start_engine_planes(
    cfgs: Vec<VerbsConfig>,
    engine: crate::engine::EngineConfig,
) -> Result<VerbsPlanesEngine, VerbsError> {
    #[cfg(feature = "verbs")]
    {
        let mut dps = Vec::with_capacity(cfgs.len());
        for c in cfgs {
            dps.push(VerbsDatapath::open(c)?);
        }
        let planes: Vec<(PeerBook, addr::EndpointAddr)> = dps
            .iter()
            .map(|d| (d.peer_book(), d.local_endpoint().clone()))
            .collect();
        let dp = crate::planes::PlanesDatapath::new(dps, true)
            .map_err(|e| VerbsError::BadConfig(e.to_string()))?;
        Ok(VerbsPlanesEngine {
            ctx: crate::engine::Context::with_datapath(dp, engine),
            planes,
        })
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (cfgs, engine);
        Err(VerbsError::NotCompiled)
    }
}

/// A caller-progressed endpoint on the verbs datapath ([`crate::engine::Worker`]), with
/// what the control connection needs: the thread that calls it polls the device's CQs,
/// runs the timers and fills the QPs' CQs itself, with no engine thread and no channels.
#[derive(Debug)]
pub struct VerbsWorker {
    /// The worker; its datapath is the device's `VerbsDatapath` behind a box (the same
    /// worker type as a caller-progressed UDP end's).
    pub worker: crate::engine::Worker<Box<dyn crate::datapath::Datapath + Send>>,
    /// Where to register the peer's address before connecting a QP.
    pub peers: PeerBook,
    /// This side's address, to send to the peer ([`exchange::write_endpoint`]).
    pub local: addr::EndpointAddr,
}

/// Opens `cfg.device` (`VerbsDatapath::open`) and makes a [`crate::engine::Worker`] on
/// it, progressed by its caller: [`start_engine`] without the engine thread. Always
/// available, as [`start_engine`] is.
///
/// # Errors
/// What `VerbsDatapath::open` returns; [`VerbsError::NotCompiled`] without the `verbs`
/// feature.
pub fn start_worker(
    cfg: VerbsConfig,
    engine: crate::engine::EngineConfig,
) -> Result<VerbsWorker, VerbsError> {
    #[cfg(feature = "verbs")]
    {
        let dp = VerbsDatapath::open(cfg)?;
        let (peers, local) = (dp.peer_book(), dp.local_endpoint().clone());
        Ok(VerbsWorker {
            worker: crate::engine::Worker::with_datapath(Box::new(dp), engine),
            peers,
            local,
        })
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (cfg, engine);
        Err(VerbsError::NotCompiled)
    }
}
