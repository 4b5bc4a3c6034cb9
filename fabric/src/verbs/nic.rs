//! The small NIC interface [`super::VerbsDatapath`] drives: the verbs calls of a UD
//! datapath, by index and byte range. Two implementations: the libibverbs device
//! (`Device`, feature `verbs`) and [`super::FakeNic`], an in-memory UD fabric that makes
//! the datapath logic testable without hardware (eRPC's fake transport, DESIGN.md
//! section 8).
//!
//! Contract every implementation keeps (the datapath relies on it): `post_*` check every
//! index and byte range before anything is posted, and refuse the whole call with
//! `accepted = 0` and `InvalidInput` otherwise; a provider refusal part-way reports how
//! many WRs of the chain were taken; completions of one send queue come in posting order.

use super::config::VerbsError;
use crate::datapath::Waker;
use std::io;
use std::net::Ipv6Addr;
use std::sync::Arc;

/// `IBV_WC_SUCCESS`.
pub const WC_SUCCESS: u32 = 0;
/// `IBV_WC_LOC_LEN_ERR`: the datagram did not fit the receive buffer.
pub const WC_LOC_LEN_ERR: u32 = 1;
/// `IBV_WC_WR_FLUSH_ERR`: the QP went to the error state; its WRs come back flushed.
pub const WC_WR_FLUSH_ERR: u32 = 5;
/// `IBV_WC_LOC_QP_OP_ERR`: the send failed locally (rdma_rxe: its port was down) and the QP
/// went to the error state.
pub const WC_LOC_QP_OP_ERR: u32 = 2;

/// What the port query found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Ethernet (RoCE) rather than InfiniBand.
    pub ethernet: bool,
    /// Active MTU, bytes (256..=4096).
    pub active_mtu_bytes: u32,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
}

/// A work completion, copied out of `ibv_wc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The WR's `wr_id` (a [`super::batch::WrId`]).
    pub wr_id: u64,
    /// `ibv_wc_status` ([`WC_SUCCESS`] = 0).
    pub status: u32,
    /// Bytes received, GRH included (receive completions).
    pub byte_len: u32,
    /// Local QPN.
    pub qp_num: u32,
    /// Sender's QPN (receive completions).
    pub src_qp: u32,
    /// `IBV_WC_GRH`: the first 40 bytes of the buffer hold a GRH.
    pub has_grh: bool,
}

/// One UD send: `len` bytes at `offset` of `region`, to `remote_qpn` through AH `ah`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// Region index.
    pub region: usize,
    /// Byte offset in the region.
    pub offset: usize,
    /// Bytes.
    pub len: u32,
    /// AH index.
    pub ah: usize,
    /// Destination QPN (`wr.ud.remote_qpn`).
    pub remote_qpn: u32,
    /// Destination Q_Key (`wr.ud.remote_qkey`).
    pub remote_qkey: u32,
    /// `IBV_SEND_SIGNALED`.
    pub signalled: bool,
}

/// One receive buffer: `len` bytes at `offset` of `region`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// Region index.
    pub region: usize,
    /// Byte offset in the region.
    pub offset: usize,
    /// Bytes (GRH space included).
    pub len: u32,
}

/// A post refused from WR `accepted` of the chain on (the earlier ones are posted).
#[derive(Debug)]
pub struct PostError {
    /// WRs of the chain that were posted.
    pub accepted: usize,
    /// Why the rest was refused.
    pub source: io::Error,
}

impl PostError {
    /// Nothing posted: an index or byte range was bad.
    pub fn invalid() -> PostError {
        PostError {
            accepted: 0,
            source: io::Error::from(io::ErrorKind::InvalidInput),
        }
    }
}

/// The verbs calls of a UD datapath. Regions, QPs and AHs are named by the index their
/// creation returned (QPs: creation order).
pub trait Nic {
    /// Registers a zero-filled region of `len` bytes for local writes; returns its index.
    ///
    /// # Errors
    /// [`VerbsError::BadConfig`] for a zero size, [`VerbsError::Call`].
    fn register(&mut self, len: usize) -> Result<usize, VerbsError>;

    /// Bytes `offset..offset + len` of a region, if inside it.
    fn bytes(&self, region: usize, offset: usize, len: usize) -> Option<&[u8]>;

    /// Mutable bytes `offset..offset + len` of a region, if inside it.
    fn bytes_mut(&mut self, region: usize, offset: usize, len: usize) -> Option<&mut [u8]>;

    /// Creates a UD QP in RTS with `qkey`; returns its QPN.
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn create_ud_qp(&mut self, sq_depth: u32, rq_depth: u32, qkey: u32) -> Result<u32, VerbsError>;

    /// Brings QP index `qp` back from the error state: RESET (its queues emptied, without
    /// completions), then INIT, RTR and RTS with `qkey`, as [`Nic::create_ud_qp`] left it.
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn reset_qp(&mut self, qp: usize, qkey: u32) -> Result<(), VerbsError>;

    /// Creates an AH to `dgid` (`dlid` on InfiniBand) with these GRH fields; returns its
    /// index.
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn create_ah(
        &mut self,
        dgid: Ipv6Addr,
        dlid: u16,
        flow_label: u32,
        traffic_class: u8,
        hop_limit: u8,
    ) -> Result<usize, VerbsError>;

    /// Posts `wrs` on QP index `qp` as one chain.
    ///
    /// # Errors
    /// [`PostError`].
    fn post_send(&mut self, qp: usize, wrs: &[SendWr]) -> Result<(), PostError>;

    /// Posts `wrs` as receive buffers of QP index `qp`, one chain.
    ///
    /// # Errors
    /// [`PostError`].
    fn post_recv(&mut self, qp: usize, wrs: &[RecvWr]) -> Result<(), PostError>;

    /// Appends up to `max` send completions to `out`; returns how many.
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn poll_send(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError>;

    /// Appends up to `max` receive completions to `out`; returns how many.
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn poll_recv(&mut self, max: usize, out: &mut Vec<Wc>) -> Result<usize, VerbsError>;

    /// Blocks until a receive completion may be ready, the [`Nic::waker`] fired, or
    /// `timeout_ns` passed. Completions found while arming are appended to `early` (the
    /// caller hands them out first).
    ///
    /// # Errors
    /// [`VerbsError::Call`].
    fn wait_recv(&mut self, timeout_ns: u64, early: &mut Vec<Wc>) -> Result<(), VerbsError>;

    /// A handle other threads use to end a [`Nic::wait_recv`] early.
    fn waker(&self) -> Arc<dyn Waker>;
}
