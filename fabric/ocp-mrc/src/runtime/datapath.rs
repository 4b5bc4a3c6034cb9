//! The UD datapath of one MRC QP: one [`VerbsDatapath`] on the context's device (one
//! plane: what lib_mrc.so always did, unchanged), or a [`PlanesDatapath`] over one
//! `VerbsDatapath` per plane (the context's device, then the devices `MRC_PLANE_DEVICES`
//! names), which the engine sees as one endpoint with one address per plane and over
//! which it places each EV on the plane its profile's port names (docs/PLANES.md).

use mrc_fabric::datapath::{
    ConnId, Datapath, DatapathError, DatapathStats, PathMap, RxDatagram, TxBatch, TxReport, Waker,
};
use mrc_fabric::planes::PlanesDatapath;
use mrc_fabric::verbs::addr::EndpointAddr;
use mrc_fabric::verbs::{Nic, VerbsConfig, VerbsDatapath};
use std::net::SocketAddr;
use std::sync::Arc;

/// One device, or one per plane (see the module docs).
// One per QP, owned by its worker: the size of the bare device's variant costs nothing,
// and a box would put an indirection on every call of the one-device path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum QpDatapath<N: Nic> {
    /// The context's device alone.
    One(VerbsDatapath<N>),
    /// One device per plane, the context's first.
    Planes(PlanesDatapath<VerbsDatapath<N>>),
}

impl<N: Nic> QpDatapath<N> {
    /// Over `planes` (the context's device first): one plane stays a bare
    /// [`VerbsDatapath`]; two or more make a [`PlanesDatapath`] whose ports are watched
    /// when `watch` (a RoCE device's GID is an address of its interface, which goes
    /// down with the port).
    ///
    /// # Errors
    /// [`PlanesDatapath::new`]'s (two planes on one GID, more than
    /// [`mrc_fabric::udp::MAX_PLANE_IPS`]); `BadPathMap` for no plane at all.
    pub fn new(mut planes: Vec<VerbsDatapath<N>>, watch: bool) -> Result<Self, DatapathError> {
        match planes.len() {
            0 => Err(DatapathError::BadPathMap("no plane device".into())),
            1 => Ok(QpDatapath::One(planes.remove(0))),
            _ => Ok(QpDatapath::Planes(PlanesDatapath::new(planes, watch)?)),
        }
    }

    /// Planes (devices) under the QP.
    pub fn plane_count(&self) -> usize {
        match self {
            QpDatapath::One(_) => 1,
            QpDatapath::Planes(p) => p.plane_ips().len(),
        }
    }

    /// The device of plane `p`.
    pub fn plane_dp(&self, p: usize) -> Option<&VerbsDatapath<N>> {
        match self {
            QpDatapath::One(d) => (p == 0).then_some(d),
            QpDatapath::Planes(ps) => ps.plane(p),
        }
    }

    fn first(&self) -> &VerbsDatapath<N> {
        match self {
            QpDatapath::One(d) => d,
            QpDatapath::Planes(ps) => ps.plane(0).expect("two planes or more"),
        }
    }

    /// Plane 0's (the context's device's) endpoint: its first QPN is the MRC QPN.
    pub fn local_endpoint(&self) -> &EndpointAddr {
        self.first().local_endpoint()
    }

    /// Every plane's endpoint, plane 0 first.
    pub fn endpoints(&self) -> Vec<EndpointAddr> {
        (0..self.plane_count())
            .filter_map(|p| self.plane_dp(p).map(|d| d.local_endpoint().clone()))
            .collect()
    }

    /// Plane 0's configuration (its GID index is the one the application names).
    pub fn config(&self) -> &VerbsConfig {
        self.first().config()
    }

    /// Registers the peer's endpoint on plane `p` (its GID on that plane's fabric).
    /// Returns false for a plane this QP does not have.
    pub fn add_peer(&mut self, p: usize, peer: EndpointAddr) -> bool {
        match self {
            QpDatapath::One(d) if p == 0 => {
                d.add_peer(peer);
                true
            }
            QpDatapath::One(_) => false,
            QpDatapath::Planes(ps) => match ps.plane(p) {
                Some(d) => {
                    d.peer_book()
                        .insert(mrc_fabric::verbs::gid_to_ip(peer.gid), peer);
                    true
                }
                None => false,
            },
        }
    }
}

/// Every call goes to the one device or to the planes.
macro_rules! each {
    ($self:expr, $d:ident => $e:expr) => {
        match $self {
            QpDatapath::One($d) => $e,
            QpDatapath::Planes($d) => $e,
        }
    };
}

impl<N: Nic> Datapath for QpDatapath<N> {
    fn local_addr(&self) -> SocketAddr {
        each!(self, d => d.local_addr())
    }
    fn open_conn(&mut self, peer: SocketAddr, paths: &PathMap) -> Result<ConnId, DatapathError> {
        each!(self, d => d.open_conn(peer, paths))
    }
    fn close_conn(&mut self, conn: ConnId) {
        each!(self, d => d.close_conn(conn))
    }
    fn source_ports(&self, conn: ConnId) -> Option<Vec<u16>> {
        each!(self, d => d.source_ports(conn))
    }
    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError> {
        each!(self, d => d.tx_burst(batch))
    }
    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError> {
        each!(self, d => d.rx_burst(max, f))
    }
    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError> {
        each!(self, d => d.wait(timeout_ns))
    }
    fn waker(&self) -> Arc<dyn Waker> {
        each!(self, d => d.waker())
    }
    fn reorders_bursts(&self) -> bool {
        each!(self, d => d.reorders_bursts())
    }
    fn sends_in_place(&self) -> bool {
        each!(self, d => d.sends_in_place())
    }
    fn peer_source_ip(&self, conn: ConnId) -> Option<std::net::IpAddr> {
        each!(self, d => d.peer_source_ip(conn))
    }
    fn reports_source_ports(&self) -> bool {
        each!(self, d => d.reports_source_ports())
    }
    fn ev_sockets(&self) -> usize {
        each!(self, d => d.ev_sockets())
    }
    fn plane_ips(&self) -> Vec<std::net::IpAddr> {
        each!(self, d => d.plane_ips())
    }
    fn planes_up(&self) -> u32 {
        each!(self, d => d.planes_up())
    }
    fn stats(&self) -> DatapathStats {
        each!(self, d => d.stats())
    }
}
