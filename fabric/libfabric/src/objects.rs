//! The provider's objects (fabric, domain, endpoint, address vector, completion queue,
//! event queue, memory region) and their `fi_ops_*` tables.
//!
//! Every object of a domain lives in the domain's [`State`], under one mutex (the domain
//! is `FI_THREAD_SAFE`); the C-visible structs (`fid_ep`, `fid_cq`, ...) carry an `Arc`
//! of it and an index. An endpoint owns one caller-progress mrc [`Worker`] on UDP
//! sockets and a listener whose connection handle is the endpoint's address. The first
//! send to a peer connects to the peer's listener (mrc's handle-based set-up, in band: the
//! handshake in UDP datagrams to the address in the peer's handle, no TCP socket;
//! [`mrc_fabric::engine::setup_udp`]); the peer's endpoint accepts it during its progress. One QP per direction: a QP this endpoint opened carries its sends, a QP
//! it accepted carries the peer's.

use crate::ffi::*;
use crate::info::{
    ADDR_LEN, FRAGMENT_SIZE, INJECT_SIZE, IOV_LIMIT, LISTEN_OPTIONS, MAX_MSG_SIZE, QUEUE_SIZE,
    default_ip, netns, source_addr,
};
use crate::stubs::*;
use crate::{Ret, guard};
use mrc_fabric::engine::setup::SECRET_BYTES;
use mrc_fabric::engine::{
    ConnHandle, ConnectId, EngineConfig, EngineError, ListenerId, QpConfig, Worker,
};
use mrc_fabric::netns::NetNs;
use mrc_fabric::udp::{DirectDatapath, UdpConfig};
use mrc_transport::{Access, ConnState, RawMem, Sge, WcOpcode, WcStatus};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `FI_ADDR_NOTAVAIL` / `FI_ADDR_UNSPEC` (`((uint64_t) -1)`).
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;
/// `FI_ADDR_UNSPEC`: a receive that takes messages from any source.
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;

/// Staging slots of a QP this endpoint sends on (each [`FRAGMENT_SIZE`] bytes and a header).
const SEND_SLOTS: usize = 16;
/// Staging slots of a QP this endpoint receives on.
const RECV_SLOTS: usize = 16;
/// Marks the provider's own structs (after the fid), checked before a cast.
const MAGIC: u64 = 0x6d72_635f_6669_0001;

impl Ret for *const c_char {
    fn neg(_: u32) -> Self {
        std::ptr::null()
    }
}

/// `fi_cntr_read` / `fi_cntr_readerr` answer a count: 0 when the call fails.
impl Ret for u64 {
    fn neg(_: u32) -> Self {
        0
    }
}

fn neg<R: Ret>(e: u32) -> R {
    R::neg(e)
}

// ---------------------------------------------------------------------------------
// State

/// Bytes of the provider's header at the start of every message (docs/LIBFABRIC.md,
/// "The message header"): byte 0 the kind, byte 1 flags, bytes 2-3 zero, bytes 4-7 the
/// remote CQ data (little endian), bytes 8-15 the tag (little endian).
pub const HDR_LEN: usize = 16;
/// Bytes of one staging slot: the header and one fragment.
const SLOT: usize = HDR_LEN + FRAGMENT_SIZE;
/// Header kinds: an untagged message, a tagged one, the connector's address, and a
/// fragment after the first of a message longer than a slot.
const KIND_MSG: u8 = 1;
const KIND_TAGGED: u8 = 2;
const KIND_HELLO: u8 = 3;
const KIND_FRAG: u8 = 4;
/// Header flag: bytes 4-7 carry remote CQ data.
const HDR_HAS_DATA: u8 = 1;
/// Header flag: the first fragment of a message longer than [`FRAGMENT_SIZE`]; the
/// payload starts with the message's length (8 bytes, little endian), [`KIND_FRAG`]
/// messages on the same QP carry the rest.
const HDR_LARGE: u8 = 2;
/// Bytes of the message a large message's first fragment carries (after its length).
const FIRST_FRAGMENT: usize = FRAGMENT_SIZE - 8;
/// Bytes of unexpected messages an endpoint copies out of their staging slots (so the
/// slot goes back to the transport at once); past it they wait in their slot, at most
/// 16 per peer (`RECV_SLOTS`), and receiver-not-ready holds the peer back.
pub const UNEXPECTED_BYTES: usize = 8 << 20;

/// The provider's header of one message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Hdr {
    kind: u8,
    data: Option<u32>,
    tag: u64,
    /// [`HDR_LARGE`]: the first fragment of a large message.
    large: bool,
}

impl Hdr {
    fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0] = self.kind;
        if let Some(d) = self.data {
            b[1] = HDR_HAS_DATA;
            b[4..8].copy_from_slice(&d.to_le_bytes());
        }
        if self.large {
            b[1] |= HDR_LARGE;
        }
        b[8..16].copy_from_slice(&self.tag.to_le_bytes());
        b
    }

    /// `None` for a message too short for a header or of an unknown kind.
    fn decode(b: &[u8]) -> Option<Hdr> {
        let b: &[u8; HDR_LEN] = b.get(..HDR_LEN)?.try_into().ok()?;
        if !matches!(b[0], KIND_MSG | KIND_TAGGED | KIND_HELLO | KIND_FRAG) {
            return None;
        }
        let data = (b[1] & HDR_HAS_DATA != 0).then(|| u32::from_le_bytes([b[4], b[5], b[6], b[7]]));
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[8..16]);
        Some(Hdr {
            kind: b[0],
            data,
            tag: u64::from_le_bytes(t),
            large: b[1] & HDR_LARGE != 0,
        })
    }

    /// `FI_MSG` or `FI_TAGGED`.
    fn op(&self) -> u64 {
        if self.kind == KIND_TAGGED {
            FI_TAGGED as u64
        } else {
            FI_MSG as u64
        }
    }

    /// A receive completion's flags for this message.
    fn rx_flags(&self) -> u64 {
        let d = if self.data.is_some() {
            FI_REMOTE_CQ_DATA as u64
        } else {
            0
        };
        FI_RECV as u64 | self.op() | d
    }
}

/// One completion, in the widest layout (`fi_cq_err_entry`'s leading fields).
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    ctx: usize,
    flags: u64,
    len: usize,
    buf: usize,
    data: u64,
    tag: u64,
    err: c_int,
    olen: usize,
    /// The AV entry a received message came from (`fi_cq_readfrom`); `None`:
    /// `FI_ADDR_NOTAVAIL`.
    src: Option<u64>,
}

/// A counter's values (`fi_cntr_read`, `fi_cntr_readerr`), shared by its fid and the
/// endpoints bound to it.
#[derive(Debug, Default)]
struct CntrInner {
    value: AtomicU64,
    err: AtomicU64,
}

/// The counters an endpoint is bound to, by the operations they count.
#[derive(Clone, Debug, Default)]
struct Counters {
    /// `FI_SEND`: sends (`fi_inject` ones too) that completed.
    send: Option<Arc<CntrInner>>,
    /// `FI_RECV`: receives that completed.
    recv: Option<Arc<CntrInner>>,
    /// `FI_WRITE`: RMA writes this endpoint started that completed.
    write: Option<Arc<CntrInner>>,
    /// `FI_READ`: bound, never counts (reads are `-FI_ENOSYS`).
    read: Option<Arc<CntrInner>>,
    /// `FI_REMOTE_WRITE`: writes of peers that landed in this endpoint's regions, counted
    /// when the endpoint has `FI_RMA_EVENT` (never otherwise).
    remote_write: Option<Arc<CntrInner>>,
    /// `FI_REMOTE_READ`: bound, never counts (no READ).
    remote_read: Option<Arc<CntrInner>>,
}

impl Counters {
    /// Counts one completed operation of completion flags `flags` (success, or an error
    /// when `err`).
    fn count(&self, flags: u64, err: bool) {
        let c = if flags & FI_WRITE as u64 != 0 {
            &self.write
        } else if flags & FI_SEND as u64 != 0 {
            &self.send
        } else if flags & FI_RECV as u64 != 0 {
            &self.recv
        } else {
            &None
        };
        if let Some(c) = c {
            let v = if err { &c.err } else { &c.value };
            v.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether `c` is one of these.
    fn holds(&self, c: &Arc<CntrInner>) -> bool {
        [
            &self.send,
            &self.recv,
            &self.write,
            &self.read,
            &self.remote_write,
            &self.remote_read,
        ]
        .into_iter()
        .flatten()
        .any(|x| Arc::ptr_eq(x, c))
    }
}

struct CqState {
    format: u32,
    /// `FI_CQ_COND_THRESHOLD`: `fi_cq_sread` waits for as many entries as its `cond`
    /// says (at most its `count`).
    threshold: bool,
    ok: VecDeque<Entry>,
    errs: VecDeque<Entry>,
}

struct AvState {
    addrs: Vec<Option<[u8; ADDR_LEN]>>,
    /// Address bytes to the first entry that holds them (the source of an arrival).
    index: HashMap<[u8; ADDR_LEN], u64>,
}

/// How a send completes: its context, payload length, whether it raises a completion,
/// its flags; `app` is false for the provider's own hello.
#[derive(Clone, Copy, Debug)]
struct TxMeta {
    ctx: usize,
    len: usize,
    completion: bool,
    flags: u64,
    app: bool,
}

impl TxMeta {
    /// Whether a failure of this operation goes to the CQ as an error entry: always,
    /// except for an inject (`fi_inject` and kin: a NULL context and no completion),
    /// which generates no completion at all (fi_msg(3)). Such an entry would carry a NULL
    /// `op_context`, and Open MPI's OFI MTL calls the request behind the `op_context` of
    /// every error entry it reads: Open MPI 4.1.4's ranks died of a segmentation fault
    /// when a peer could not be reached. A failed inject counts in the bound counters'
    /// errors instead, and the endpoint says so once on stderr. Such an operation is not
    /// queued for a connection being set up: it is refused with `-FI_EAGAIN` until the
    /// set-up ends, and a failed set-up answers it with the error at once
    /// ([`EpState::ready_for`]).
    fn error_entry_wanted(&self) -> bool {
        self.ctx != 0 || self.completion
    }
}

/// Where an RMA write goes: the target's address (its virtual address or an offset into
/// the region, as the target's `mr_mode` says) and key (the transport's rkey), and the
/// remote CQ data of `fi_writedata` (a WRITE_WITH_IMM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RmaTarget {
    addr: u64,
    key: u32,
    imm: Option<u32>,
}

/// A send or write not yet posted to the transport: its bytes (a send's header included,
/// copied at the call), how it completes, and for a write where it goes.
struct TxOp {
    data: TxData,
    meta: TxMeta,
    write: Option<RmaTarget>,
    /// A fragment after the first of a large message: it must follow the fragment before
    /// it on the same QP.
    cont: bool,
}

/// Bytes of `parts`.
fn meta_len_of(parts: &[&[u8]]) -> u64 {
    parts.iter().map(|p| p.len() as u64).sum()
}

/// A send's encoded header and the caller's buffers (address, length), which it may
/// queue uncopied ([`TxData::Borrowed`]).
type Borrow<'a> = ([u8; HDR_LEN], &'a [(usize, usize)]);

/// The bytes of a queued send or write.
enum TxData {
    /// A copy, made when it was queued.
    Owned(Vec<u8>),
    /// The message header, then the application's buffers (address, length), read when a
    /// staging slot frees: a send with a completion, longer than `inject_size`, whose
    /// buffers stay the provider's until that completion (fi_msg(3)).
    Borrowed([u8; HDR_LEN], Vec<(usize, usize)>),
}

impl TxData {
    /// The bytes, in order.
    fn parts(&self) -> Vec<&[u8]> {
        match self {
            TxData::Owned(v) => vec![v.as_slice()],
            TxData::Borrowed(h, iov) => {
                let mut p: Vec<&[u8]> = Vec::with_capacity(iov.len() + 1);
                p.push(h);
                // SAFETY: the application's buffers of a send not yet completed, valid
                // and unchanged until its completion (fi_msg(3): only FI_INJECT frees
                // them on return, and such a send is copied); the send completes only
                // after these bytes were copied into a slot.
                p.extend(unsafe { iov_slices(iov) });
                p
            }
        }
    }
}

/// A QP this endpoint sends on, with its staging slots (registered with the QP).
struct SendQp {
    qpn: u32,
    buf: Box<[u8]>,
    base: u64,
    lkey: u32,
    free: Vec<usize>,
    inflight: HashMap<usize, TxMeta>,
    /// The hello was acknowledged: the peer had posted its receives, so it had also
    /// registered its memory regions with the QP (it does that first), and writes may
    /// go. Until then sends and writes wait in the peer's queue.
    open: bool,
}

enum Conn {
    Connecting(ConnectId),
    Ready(SendQp),
    /// The set-up failed with this error (positive `FI_E*`): the next send, inject or
    /// write to the peer is refused with it, and the one after that starts a new set-up
    /// ([`EpState::add_peer`]).
    Failed(c_int),
}

struct Peer {
    conn: Conn,
    queue: VecDeque<TxOp>,
    /// The peer's address, kept to connect again after its QP failed.
    handle: ConnHandle,
}

/// A memory region a peer may write into (`FI_REMOTE_WRITE`), as each endpoint of the
/// domain keeps it: registered with every QP the endpoint accepted, under the region's
/// key (the transport's rkey) and its RMA address (`base`: the buffer's virtual address,
/// or the `offset` of `fi_mr_reg`).
#[derive(Clone, Debug)]
struct TargetMr {
    ptr: usize,
    len: usize,
    base: u64,
    /// The region's lkey in each accepted QP's table.
    lkeys: HashMap<u32, u32>,
}

/// A QP this endpoint receives on (accepted from a peer), with its staging slots.
struct RecvQp {
    buf: Box<[u8]>,
    base: u64,
    lkey: u32,
    /// The connector's address, from its hello (the first message on the QP).
    peer: Option<[u8; ADDR_LEN]>,
    /// The large message whose fragments are arriving on this QP.
    asm: Option<Asm>,
    /// The transport's count of the peer's messages completed on this QP
    /// (`Connection::messages_received`) at the last look (`FI_RMA_EVENT`).
    msgs: u64,
}

/// A posted receive: the application's buffers and what it matches.
struct PostedRecv {
    iov: Vec<(usize, usize)>,
    ctx: usize,
    completion: bool,
    tagged: bool,
    tag: u64,
    ignore: u64,
    /// The AV entry it takes messages from; `FI_ADDR_UNSPEC`: any.
    src: u64,
}

/// Where a piece of an unexpected message is.
enum Body {
    /// Still in staging slot `slot` of its QP, bytes `at..at + len` of the QP's slots
    /// (past [`UNEXPECTED_BYTES`]).
    Slot { slot: usize, at: usize, len: usize },
    /// Copied out; the slot went back to the transport.
    Heap(Vec<u8>),
}

/// A message that arrived (or started to arrive: a large one) before a receive matched
/// it.
struct Unexpected {
    /// Names it for the fragments still to come ([`Sink::Unexpected`]).
    id: u64,
    qpn: u32,
    hdr: Hdr,
    /// The message's length (a large one's, from its first fragment).
    len: usize,
    /// Its bytes so far, in order.
    parts: Vec<Body>,
    /// Bytes in `parts`; less than `len` while fragments are on their way.
    got: usize,
    /// The context of the `FI_PEEK | FI_CLAIM` that claimed it.
    claimed: Option<usize>,
}

/// A receive being filled: the application's buffers and how far.
struct Fill {
    r: PostedRecv,
    /// Bytes written into the buffers.
    written: usize,
    /// Bytes of the message seen (written, or cut when the buffers are full).
    seen: usize,
}

/// Where the fragments of a large message go as they arrive.
enum Sink {
    /// Into a matched receive.
    Recv(Fill),
    /// Into unexpected message `id`.
    Unexpected(u64),
    /// Nowhere (`FI_DISCARD`).
    Discard,
}

/// A large message arriving on a QP: its header, length, bytes so far, destination.
struct Asm {
    hdr: Hdr,
    len: usize,
    got: usize,
    sink: Sink,
}

struct EpState {
    // The worker first: dropping it destroys the QPs before their slots are freed.
    worker: Worker<DirectDatapath>,
    /// Payload bytes per data packet its QPs send ([`crate::info::mtu_payload_bytes`]).
    mtu_payload_bytes: u32,
    /// `FI_MRC_NETNS`'s namespace, where the connections' set-up sockets are opened.
    netns: Option<Arc<NetNs>>,
    listener: ListenerId,
    addr: [u8; ADDR_LEN],
    av: Option<usize>,
    txcq: Option<usize>,
    rxcq: Option<usize>,
    tx_selective: bool,
    rx_selective: bool,
    /// `FI_COMPLETION` in the `fi_info`'s `tx_attr->op_flags` / `rx_attr->op_flags`: with
    /// `FI_SELECTIVE_COMPLETION`, sends / receives posted without flags still complete.
    tx_op_completion: bool,
    rx_op_completion: bool,
    enabled: bool,
    /// `FI_DIRECTED_RECV`: a receive's source address restricts what it matches
    /// (otherwise the source argument is ignored, as fi_msg(3) says).
    directed: bool,
    peers: HashMap<u64, Peer>,
    in_qps: HashMap<u32, RecvQp>,
    /// Posted untagged receives, in posting order.
    recvs: VecDeque<PostedRecv>,
    /// Posted tagged receives, in posting order.
    trecvs: VecDeque<PostedRecv>,
    /// Messages that arrived before a receive matched them, in order of arrival.
    unexpected: VecDeque<Unexpected>,
    /// Bytes of `unexpected` copied out of their slots (at most [`UNEXPECTED_BYTES`]).
    unexpected_bytes: usize,
    /// The next [`Unexpected::id`].
    next_unexpected: u64,
    /// Sends posted and not yet completed (queued or in flight).
    tx_outstanding: usize,
    /// Injects that failed ([`TxMeta::error_entry_wanted`]).
    injects_failed: u64,
    /// Connection set-ups that failed ([`EpState::fail_peer`]).
    setups_failed: u64,
    /// Set-ups that could not start ([`EpState::connect_start`]), said once.
    starts_refused: u64,
    /// The domain's regions a peer may write into, by key.
    target_mrs: HashMap<u32, TargetMr>,
    /// The counters bound to the endpoint.
    cntrs: Counters,
    /// `FI_RMA_EVENT` in the endpoint's `fi_info`: peers' writes count on the
    /// `FI_REMOTE_WRITE` counter.
    rma_event: bool,
    /// The bound on the sends a pass left for the application's next call (set by
    /// `fi_endpoint`, with the worker's deferral: [`Flusher`]).
    flush: Option<Flusher>,
    /// Bytes copied into peers' queues ([`TxData::Owned`]).
    queued_copy_bytes: u64,
}

/// How long the sends a progress pass left for the application's next call (the SACK
/// of a message it just delivered: [`Worker::set_defer_sends_after_receive`]) wait at
/// least for that call before the endpoint's flusher thread sends them: 500 us, the
/// ACK delay a peer's transport assumes (`SendConfig::peer_max_ack_delay_ns`,
/// [`mrc_fabric::engine::SOFTWARE_REORDER_WINDOW_NS`]). The flusher looks every
/// `FLUSH_BOUND`, so they wait at most twice it.
pub const FLUSH_BOUND: Duration = Duration::from_micros(500);

/// A flusher that saw no deferred sends for this long sleeps until the next deferral
/// wakes it (meanwhile it looks every [`FLUSH_BOUND`], so a stream of deferrals costs
/// the application no wake-up call): 100 ms.
const FLUSH_IDLE: Duration = Duration::from_millis(100);

/// What an endpoint's flusher thread and the endpoint share outside the domain's mutex.
#[derive(Default)]
struct FlushCtl {
    stop: AtomicBool,
    /// The number of the deferral pending now, 0 when none (numbered from 1).
    pending: AtomicU64,
    /// The thread sleeps until woken.
    parked: AtomicBool,
}

/// The bound on deferred sends. A pass that delivers a receive leaves its sends (the
/// receive's SACK) to the next call on the endpoint: the application, about to answer,
/// posts its reply meanwhile, and the reply leaves ahead of the SACK, in the same pass
/// (the peer waits for the reply, not for the SACK). An application that does not call
/// in again soon (an out-of-band barrier, a computation) would hold the peer's send
/// completion: a thread of the endpoint, started at the first deferral, looks every
/// [`FLUSH_BOUND`] (without the domain's mutex: the deferral's number) and runs a
/// progress pass when the deferral it saw last time is still pending.
struct Flusher {
    ctl: Arc<FlushCtl>,
    /// The domain's state and the endpoint's index there (for the thread).
    domain: Weak<Mutex<State>>,
    idx: usize,
    thread: Option<JoinHandle<()>>,
    /// The last deferral's number.
    seq: u64,
    /// Passes the thread ran because the application did not call in.
    passes: u64,
}

impl Flusher {
    fn new(domain: Weak<Mutex<State>>, idx: usize) -> Flusher {
        Flusher {
            ctl: Arc::default(),
            domain,
            idx,
            thread: None,
            seq: 0,
            passes: 0,
        }
    }

    /// The pass that just ran left sends for the next call (`deferred`) or not. A new
    /// deferral is numbered, and the thread started or woken if it sleeps without a
    /// deadline. `false` when the thread cannot be started.
    fn note(&mut self, deferred: bool) -> bool {
        let pending = self.ctl.pending.load(Ordering::Relaxed);
        if !deferred {
            if pending != 0 {
                self.ctl.pending.store(0, Ordering::SeqCst);
            }
            return true;
        }
        if pending != 0 {
            return true;
        }
        self.seq += 1;
        self.ctl.pending.store(self.seq, Ordering::SeqCst);
        match &self.thread {
            Some(t) => {
                if self.ctl.parked.load(Ordering::SeqCst) {
                    t.thread().unpark();
                }
                true
            }
            None => {
                let (domain, idx, ctl) = (self.domain.clone(), self.idx, self.ctl.clone());
                self.thread = std::thread::Builder::new()
                    .name("mrc-fi-flush".into())
                    .spawn(move || flush_loop(&domain, idx, &ctl))
                    .ok();
                self.thread.is_some()
            }
        }
    }

    /// Stops the thread and waits for it (called without the domain's mutex).
    fn stop(mut self) {
        self.ctl.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Flusher {
    /// A flusher dropped without [`Flusher::stop`] (its endpoint dropped with the domain)
    /// ends its thread without waiting for it.
    fn drop(&mut self) {
        self.ctl.stop.store(true, Ordering::SeqCst);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

/// The flusher thread of endpoint `idx` of `domain`: every [`FLUSH_BOUND`] it reads the
/// pending deferral's number, and a number it read the time before too gets a progress
/// pass (under the domain's mutex); after [`FLUSH_IDLE`] without a deferral it sleeps
/// until woken. Ends when stopped or when the endpoint or its domain is gone.
fn flush_loop(domain: &Weak<Mutex<State>>, idx: usize, ctl: &FlushCtl) {
    let mut seen = 0;
    let mut idle_since = Instant::now();
    loop {
        std::thread::park_timeout(FLUSH_BOUND);
        if ctl.stop.load(Ordering::SeqCst) {
            return;
        }
        let pending = ctl.pending.load(Ordering::SeqCst);
        if pending == 0 {
            seen = 0;
            if idle_since.elapsed() < FLUSH_IDLE {
                continue;
            }
            ctl.parked.store(true, Ordering::SeqCst);
            while ctl.pending.load(Ordering::SeqCst) == 0 && !ctl.stop.load(Ordering::SeqCst) {
                std::thread::park();
            }
            ctl.parked.store(false, Ordering::SeqCst);
            idle_since = Instant::now();
            continue;
        }
        idle_since = Instant::now();
        if pending != seen {
            seen = pending;
            continue;
        }
        let Some(shared) = domain.upgrade() else {
            return;
        };
        let Ok(mut st) = shared.lock() else {
            return;
        };
        let State { eps, cqs, avs, .. } = &mut *st;
        let Some(ep) = eps.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        if ep.worker.sends_deferred() && ctl.pending.load(Ordering::SeqCst) == seen {
            if let Some(f) = ep.flush.as_mut() {
                f.passes += 1;
            }
            ep.progress(cqs, avs);
        }
        seen = 0;
    }
}

/// A registered memory region of the domain.
struct MrState {
    key: u32,
    ptr: usize,
    len: usize,
    base: u64,
    /// `FI_REMOTE_WRITE`: registered with the endpoints' accepted QPs.
    remote_write: bool,
}

/// How the domain's regions are named (the `mr_mode` of its `fi_info`).
#[derive(Clone, Copy, Debug, Default)]
struct MrMode {
    /// `FI_MR_VIRT_ADDR` (or `FI_MR_BASIC`): an RMA names the target buffer's virtual
    /// address; otherwise an offset into the region (plus `fi_mr_reg`'s `offset`).
    virt_addr: bool,
    /// `FI_MR_PROV_KEY` (or `FI_MR_BASIC`): the provider draws the key; otherwise it is
    /// the application's `requested_key`.
    prov_key: bool,
}

/// Everything of one domain.
#[derive(Default)]
pub(crate) struct State {
    eps: Vec<Option<EpState>>,
    cqs: Vec<Option<CqState>>,
    avs: Vec<Option<AvState>>,
    mrs: Vec<Option<MrState>>,
    mr_mode: MrMode,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> Result<MutexGuard<'_, State>, u32> {
    s.lock().map_err(|_| FI_EOTHER)
}

fn push<T>(v: &mut Vec<Option<T>>, t: T) -> usize {
    v.push(Some(t));
    v.len() - 1
}

fn cq_push(cqs: &mut [Option<CqState>], cq: Option<usize>, e: Entry) {
    if let Some(Some(c)) = cq.map(|i| cqs.get_mut(i).and_then(Option::as_mut)) {
        if e.err != 0 {
            c.errs.push_back(e);
        } else {
            c.ok.push_back(e);
        }
    }
}

fn wc_err(s: WcStatus) -> c_int {
    (match s {
        WcStatus::Success => 0,
        WcStatus::RetryExceeded => FI_ETIMEDOUT,
        WcStatus::Flushed => FI_ECANCELED,
        WcStatus::LocalLengthError => FI_ETRUNC,
        WcStatus::RemoteAccessError | WcStatus::LocalProtectionError => FI_EACCES,
        WcStatus::GenerationMismatch => FI_ECONNRESET,
    }) as c_int
}

/// Whether receive `r` takes a message with header `h` from AV entry `src`
/// (`directed`: the endpoint has `FI_DIRECTED_RECV`).
fn takes(r: &PostedRecv, h: &Hdr, src: u64, directed: bool) -> bool {
    r.tagged == (h.kind == KIND_TAGGED)
        && (!r.tagged || (r.tag & !r.ignore) == (h.tag & !r.ignore))
        && (!directed || r.src == FI_ADDR_UNSPEC || r.src == src)
}

impl Fill {
    fn new(r: PostedRecv) -> Fill {
        Fill {
            r,
            written: 0,
            seen: 0,
        }
    }

    /// Copies the next bytes of the message into the receive's buffers, as far as they
    /// hold; the rest is counted as cut.
    fn put(&mut self, mut b: &[u8]) {
        self.seen += b.len();
        let mut skip = self.written;
        for &(p, l) in &self.r.iov {
            if b.is_empty() {
                break;
            }
            if skip >= l {
                skip -= l;
                continue;
            }
            let n = (l - skip).min(b.len());
            // SAFETY: bytes `skip..skip + n` of the application's receive buffer of `l`
            // bytes (the fi_recv contract: valid until the receive completes), written
            // before its completion is raised.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), (p as *mut u8).add(skip), n) };
            self.written += n;
            b = &b[n..];
            skip = 0;
        }
    }

    /// Raises the receive's completion: an `FI_ETRUNC` error entry when the message was
    /// longer than the buffers (`olen` the bytes cut), `err` (an `FI_E*` code) when the
    /// message broke off.
    fn finish(
        self,
        h: &Hdr,
        src: u64,
        err: Option<c_int>,
        rxcq: Option<usize>,
        cqs: &mut [Option<CqState>],
        cn: &Counters,
    ) {
        let trunc = self.seen - self.written;
        let err = err.unwrap_or(if trunc > 0 { FI_ETRUNC as c_int } else { 0 });
        cn.count(FI_RECV as u64, err != 0);
        if self.r.completion || err != 0 {
            let e = Entry {
                ctx: self.r.ctx,
                flags: h.rx_flags(),
                len: self.written,
                buf: self.r.iov.first().map_or(0, |x| x.0),
                data: h.data.map_or(0, u64::from),
                tag: h.tag,
                err,
                olen: trunc,
                src: Some(src),
            };
            cq_push(cqs, rxcq, e);
        }
    }
}

/// Drops the fragments at the front of `queue` that continue a large message (its first
/// fragment went already, or failed), and answers the message's completion (the last
/// fragment's), if it was among them.
fn drop_fragments(queue: &mut VecDeque<TxOp>) -> Option<TxMeta> {
    let mut last = None;
    while queue.front().is_some_and(|op| op.cont) {
        if let Some(op) = queue.pop_front()
            && op.meta.app
        {
            last = Some(op.meta);
        }
    }
    last
}

/// What a `fi_trecvmsg` with `FI_PEEK` / `FI_CLAIM` asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `FI_PEEK`: report a matching unexpected message; `claim` marks it for a later
    /// `FI_CLAIM` receive, `discard` drops it.
    Peek { claim: bool, discard: bool },
    /// `FI_CLAIM`: take the message claimed with this context; `discard` drops it.
    Claim { discard: bool },
}

/// The worker of an endpoint at `ip` (its connections' EV sockets opened in `netns`)
/// and its listener, at the port and secret of `src`
/// when it names a port that is free (fabtests' out-of-band mode gives client and server
/// the same source port: a port taken falls back to one the kernel picks, with a drawn
/// secret, and fi_getname says which). `FI_EADDRNOTAVAIL`, with a log line, when `ip`
/// cannot be bound (not an address of this host, or of `FI_MRC_NETNS`'s namespace).
#[allow(clippy::type_complexity)]
fn open_worker(
    ip: IpAddr,
    src: Option<(SocketAddr, [u8; SECRET_BYTES])>,
    netns: Option<Arc<NetNs>>,
    plane_ips: Vec<IpAddr>,
) -> Result<(Worker<DirectDatapath>, ListenerId, ConnHandle, u32), u32> {
    // Asked here, in the namespace's thread: the interface holding `ip` is one of its.
    let mtu = crate::info::mtu_payload_bytes(ip)?;
    let udp = UdpConfig {
        netns,
        plane_ips,
        ..UdpConfig::bind(SocketAddr::new(ip, 0))
    };
    let ecfg = EngineConfig {
        tx_batch: 64,
        slot_bytes: slot_bytes_for(mtu),
        ..EngineConfig::default()
    };
    let mut worker = Worker::direct(udp, ecfg).map_err(|e| {
        crate::log(&format!(
            "fi_endpoint: cannot open UDP sockets at {ip}: {e}"
        ));
        FI_EADDRNOTAVAIL
    })?;
    let named = match src {
        Some((a, secret)) if a.port() != 0 => worker
            .listen_at(qp_config(mtu), LISTEN_OPTIONS, a.port(), Some(secret))
            .ok(),
        _ => None,
    };
    let (listener, h) = match named {
        Some(l) => l,
        None => worker
            .listen_with(qp_config(mtu), LISTEN_OPTIONS)
            .map_err(|e| {
                crate::log(&format!("fi_endpoint: cannot listen at {ip}: {e}"));
                FI_EADDRNOTAVAIL
            })?,
    };
    Ok((worker, listener, h, mtu))
}

/// Bytes of the engine's send slots for data packets of `mtu_payload_bytes`: the
/// payload, the transport's headers and an authentication trailer
/// ([`EngineConfig::slot_bytes`]), and never below the engine's default (9216).
fn slot_bytes_for(mtu_payload_bytes: u32) -> usize {
    let need = mtu_payload_bytes as usize
        + mrc_transport::conn::MAX_DATA_HEADER_BYTES
        + mrc_transport::auth::AUTH_TRAILER_BYTES;
    need.max(EngineConfig::default().slot_bytes)
}

/// The configuration of an endpoint's QPs, accepted and connected: the engine's
/// defaults ([`QpConfig::default`]) with `mtu_payload_bytes` of payload per data packet
/// (the endpoint's, [`crate::info::mtu_payload_bytes`]). A peer may send larger or
/// smaller packets: a receiver takes any datagram up to its 64 KiB receive buffers.
fn qp_config(mtu_payload_bytes: u32) -> QpConfig {
    let mut c = QpConfig::default();
    c.conn.send.mtu_payload_bytes = mtu_payload_bytes;
    c.link.mtu_bytes = u64::from(mtu_payload_bytes);
    c
}

impl EpState {
    /// An endpoint at source address `src` (the listener's address and secret, from the
    /// `fi_info`'s `src_addr`: a port 0, or one in use, takes a port the kernel picks and
    /// a drawn secret); without one, at the provider's IP ([`default_ip`]).
    /// In the namespace of `FI_MRC_NETNS` ([`netns`]) when it names one: the worker's
    /// sockets and listener are opened there, and so are each connection's set-up socket
    /// ([`EpState::connect_start`]) and EV sockets ([`UdpConfig::netns`]).
    ///
    /// With `FI_MRC_PLANES` ([`crate::info::planes_env`]) the worker sends on every
    /// plane ([`UdpConfig::plane_ips`]): `FI_EINVAL` for a bad list or a source address
    /// that is not plane 0's, `FI_EADDRNOTAVAIL` for a plane address that cannot be
    /// bound there, each with a line.
    fn open(directed: bool, src: Option<(SocketAddr, [u8; SECRET_BYTES])>) -> Result<EpState, u32> {
        let planes = crate::info::planes_env()?.unwrap_or_default();
        let netns = netns()?.map(Arc::new);
        let ip: IpAddr = match src {
            Some((a, _)) => a.ip(),
            None => default_ip().ok_or(FI_EINVAL)?,
        };
        if !planes.is_empty() {
            // Plane 0 is the source address, and every plane's address can be bound
            // where the sockets open (the EV sockets bind them when a connection is set
            // up; the receive socket binds the wildcard address).
            crate::info::check_planes(netns.as_deref(), &planes, ip)?;
        }
        let (worker, listener, h, mtu_payload_bytes) = match &netns {
            None => open_worker(ip, src, None, planes),
            Some(ns) => ns
                .run(|| open_worker(ip, src, Some(ns.clone()), planes))
                .unwrap_or_else(|e| {
                    crate::log(&format!("fi_endpoint: FI_MRC_NETNS={}: {e}", ns.path()));
                    Err(FI_EINVAL)
                }),
        }?;
        Ok(EpState {
            worker,
            mtu_payload_bytes,
            netns,
            listener,
            addr: h.to_bytes(),
            av: None,
            txcq: None,
            rxcq: None,
            tx_selective: false,
            rx_selective: false,
            tx_op_completion: false,
            rx_op_completion: false,
            enabled: false,
            directed,
            peers: HashMap::new(),
            in_qps: HashMap::new(),
            recvs: VecDeque::new(),
            trecvs: VecDeque::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            next_unexpected: 0,
            tx_outstanding: 0,
            injects_failed: 0,
            setups_failed: 0,
            starts_refused: 0,
            target_mrs: HashMap::new(),
            cntrs: Counters::default(),
            rma_event: false,
            flush: None,
            queued_copy_bytes: 0,
        })
    }

    /// Defers the sends of a pass that delivers a receive to the next call
    /// ([`Flusher`]), bounded by a thread that reaches the endpoint as `idx` of `domain`.
    fn defer_sends(&mut self, domain: Weak<Mutex<State>>, idx: usize) {
        self.worker.set_defer_sends_after_receive(true);
        self.flush = Some(Flusher::new(domain, idx));
    }

    /// After a pass: notes whether it left sends for the next call ([`Flusher`]); a
    /// flusher that cannot start ends the deferring, and the sends go now.
    fn note_deferral(&mut self) {
        let deferred = self.worker.sends_deferred();
        let Some(f) = self.flush.as_mut() else {
            return;
        };
        if !f.note(deferred) {
            self.flush = None;
            self.worker.set_defer_sends_after_receive(false);
            self.worker.progress();
        }
    }

    /// Starts connecting to the peer at `h` ([`Worker::connect_start`]), in
    /// `FI_MRC_NETNS`'s namespace when there is one (the set-up's UDP socket is opened
    /// there, on a thread of its own).
    ///
    /// A set-up that cannot start answers a positive `FI_E*` code, said on stderr the
    /// first time on this endpoint: `FI_EADDRNOTAVAIL` for a peer whose address names
    /// another number of planes than this endpoint has ([`ConnHandle::planes`]: both
    /// ends need as many, `FI_MRC_PLANES`), `FI_ECONNREFUSED` for the others.
    fn connect_start(&mut self, h: &ConnHandle) -> Result<ConnectId, u32> {
        let worker = &mut self.worker;
        let cfg = qp_config(self.mtu_payload_bytes);
        let r = match &self.netns {
            None => worker.connect_start(h, cfg),
            Some(ns) => match ns.run(|| worker.connect_start(h, cfg)) {
                Ok(r) => r,
                Err(e) => Err(EngineError::Refused(format!(
                    "FI_MRC_NETNS={}: {e}",
                    ns.path()
                ))),
            },
        };
        r.map_err(|e| {
            let err = setup_error_code(&e);
            self.starts_refused += 1;
            if self.starts_refused == 1 {
                crate::log(&cannot_start_line(h, &e, err));
            }
            err
        })
    }

    /// Registers `mr` (key `key`) with QP `qpn` of this endpoint at its key and RMA
    /// address, remote write only.
    fn reg_target(&mut self, qpn: u32, key: u32, mr: &TargetMr) -> Result<u32, u32> {
        // SAFETY: the application's buffer of `len` bytes, valid and unmoved until
        // fi_close of the region (the fi_mr_reg contract), which deregisters it from
        // every QP first (remove_target_mr); the transport touches it only inside calls
        // on this worker, all under the domain's mutex.
        let mem = unsafe { RawMem::new(mr.ptr as *mut u8, mr.len) }.ok_or(FI_EINVAL)?;
        let r = self.worker.with_conn(qpn, |c| {
            c.regions_mut()
                .register_raw_at(mem, Access::REMOTE_WRITE, key, mr.base)
        });
        match r {
            Ok(Ok(k)) => Ok(k.lkey),
            Ok(Err(_)) => Err(FI_ENOKEY),
            Err(_) => Err(FI_EINVAL),
        }
    }

    /// Makes region `key` writable by peers: registered with every QP this endpoint
    /// accepted (and, by `progress`, every QP it accepts later). `-FI_ENOKEY` (nothing
    /// changed) when a QP's table has the key already (one of the provider's staging
    /// regions drew it).
    fn add_target_mr(&mut self, key: u32, ptr: usize, len: usize, base: u64) -> Result<(), u32> {
        let mut mr = TargetMr {
            ptr,
            len,
            base,
            lkeys: HashMap::new(),
        };
        let qpns: Vec<u32> = self.in_qps.keys().copied().collect();
        for qpn in qpns {
            match self.reg_target(qpn, key, &mr) {
                Ok(lkey) => {
                    mr.lkeys.insert(qpn, lkey);
                }
                Err(e) => {
                    self.dereg_target(&mr);
                    return Err(e);
                }
            }
        }
        self.target_mrs.insert(key, mr);
        Ok(())
    }

    fn dereg_target(&mut self, mr: &TargetMr) {
        for (&qpn, &lkey) in &mr.lkeys {
            // A region only peers write into: no work request of this side names it.
            let _ = self.worker.with_conn(qpn, |c| c.deregister_mr(lkey));
        }
    }

    /// Region `key` is closed: deregistered from every QP; no write reaches it again.
    fn remove_target_mr(&mut self, key: u32) {
        if let Some(mr) = self.target_mrs.remove(&key) {
            self.dereg_target(&mr);
        }
    }

    /// Registers staging slots with `qpn` (local write: receives land in them).
    fn slots(&mut self, qpn: u32, n: usize) -> Option<(Box<[u8]>, u64, u32)> {
        let mut buf = vec![0u8; n * SLOT].into_boxed_slice();
        // SAFETY: the box stays allocated and unmoved (a Box's heap block does not move)
        // until the QP is destroyed (the worker drops before the slots, or destroy_qp runs
        // first), and the provider touches it only between calls on the worker.
        let k = unsafe {
            self.worker
                .reg_mr_raw(qpn, buf.as_mut_ptr(), buf.len(), Access::LOCAL_WRITE)
        }
        .ok()?;
        Some((buf, k.addr, k.lkey))
    }

    /// The AV entry of the peer that opened `qpn` (from its hello);
    /// `FI_ADDR_NOTAVAIL` when its address is not in the endpoint's AV.
    fn src_of(&self, qpn: u32, avs: &[Option<AvState>]) -> u64 {
        let peer = self.in_qps.get(&qpn).and_then(|q| q.peer.as_ref());
        let av = self.av.and_then(|i| avs.get(i)).and_then(Option::as_ref);
        match (peer, av) {
            (Some(p), Some(av)) => av.index.get(p).copied().unwrap_or(FI_ADDR_NOTAVAIL),
            _ => FI_ADDR_NOTAVAIL,
        }
    }

    /// One pass of progress: the transport, connection set-up, completions, arrivals.
    fn progress(&mut self, cqs: &mut [Option<CqState>], avs: &[Option<AvState>]) {
        self.worker.progress();
        // Outgoing connections.
        let connecting: Vec<(u64, ConnectId)> = self
            .peers
            .iter()
            .filter_map(|(&a, p)| match p.conn {
                Conn::Connecting(id) => Some((a, id)),
                Conn::Ready(_) | Conn::Failed(_) => None,
            })
            .collect();
        for (a, id) in connecting {
            match self.worker.poll_connect(id) {
                Ok(None) => {}
                Ok(Some(qpn)) => match self.slots(qpn, SEND_SLOTS) {
                    Some((buf, base, lkey)) => {
                        let mut q = SendQp {
                            qpn,
                            buf,
                            base,
                            lkey,
                            free: (0..SEND_SLOTS).rev().collect(),
                            inflight: HashMap::new(),
                            open: false,
                        };
                        // The hello first: the peer learns which address this QP
                        // comes from (its FI_DIRECTED_RECV source).
                        let hello = Hdr {
                            kind: KIND_HELLO,
                            ..Hdr::default()
                        };
                        let meta = TxMeta {
                            ctx: 0,
                            len: ADDR_LEN,
                            completion: false,
                            flags: 0,
                            app: false,
                        };
                        let addr = self.addr;
                        if q.post(&mut self.worker, &[&hello.encode(), &addr], meta, None)
                            .is_err()
                        {
                            self.worker.destroy_qp(qpn);
                            self.fail_peer(a, FI_EIO as c_int, "", cqs);
                        } else if let Some(p) = self.peers.get_mut(&a) {
                            p.conn = Conn::Ready(q);
                        }
                    }
                    None => {
                        self.worker.destroy_qp(qpn);
                        self.fail_peer(a, FI_ENOMEM as c_int, "", cqs);
                    }
                },
                Err(e) => {
                    let why = format!(": {e}");
                    self.fail_peer(a, setup_error_code(&e) as c_int, &why, cqs)
                }
            }
        }
        // Incoming connections: the regions peers may write into first (at the keys
        // the application has; the staging region then draws a free one), then the
        // staging slots and their receives (the connector's hello waits for one, and its
        // writes wait for the hello).
        while let Some(r) = self.worker.poll_accept(self.listener) {
            let Ok(qpn) = r else { break };
            let keys: Vec<u32> = self.target_mrs.keys().copied().collect();
            for key in keys {
                let Some(mr) = self.target_mrs.get(&key).cloned() else {
                    continue;
                };
                if let Ok(lkey) = self.reg_target(qpn, key, &mr)
                    && let Some(m) = self.target_mrs.get_mut(&key)
                {
                    m.lkeys.insert(qpn, lkey);
                }
            }
            let Some((buf, base, lkey)) = self.slots(qpn, RECV_SLOTS) else {
                self.forget_qp(qpn);
                self.worker.destroy_qp(qpn);
                continue;
            };
            let rq = RecvQp {
                buf,
                base,
                lkey,
                peer: None,
                asm: None,
                msgs: 0,
            };
            for s in 0..RECV_SLOTS {
                let _ = self.worker.post_recv(qpn, s as u64, rq.sge(s));
            }
            self.in_qps.insert(qpn, rq);
        }
        // Send completions, then queued sends into freed slots.
        let txcq = self.txcq;
        let mut broken = Vec::new();
        // Injects that failed (no error entry: TxMeta::error_entry_wanted), with the error.
        let mut injects_failed: Vec<c_int> = Vec::new();
        for (&a, p) in self.peers.iter_mut() {
            if let Conn::Ready(q) = &mut p.conn {
                while let Some(c) = self.worker.poll_send_cq(q.qpn) {
                    let slot = c.wr_id as usize;
                    if let Some(m) = q.inflight.remove(&slot) {
                        q.free.push(slot);
                        if !m.app {
                            // The hello: the peer is ready for writes too.
                            q.open |= c.status == WcStatus::Success;
                            continue;
                        }
                        self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
                        let err = wc_err(c.status);
                        self.cntrs.count(m.flags, err != 0);
                        if err != 0 && !m.error_entry_wanted() {
                            injects_failed.push(err);
                        } else if m.completion || err != 0 {
                            let e = Entry {
                                ctx: m.ctx,
                                flags: m.flags,
                                len: m.len,
                                err,
                                ..Entry::default()
                            };
                            cq_push(cqs, txcq, e);
                        }
                    }
                }
                // An error ends the QP (as an RC QP of verbs: a remote access error, a
                // retry limit): every work request on it completed with an error above;
                // the peer connects anew for what waits in its queue.
                let failed = self
                    .worker
                    .with_conn(q.qpn, |c| {
                        matches!(c.state(), ConnState::Error | ConnState::Closed)
                    })
                    .unwrap_or(true);
                if failed {
                    broken.push(a);
                    continue;
                }
                while q.open && !q.free.is_empty() {
                    let Some(op) = p.queue.pop_front() else { break };
                    if let Err(err) = q.post(&mut self.worker, &op.data.parts(), op.meta, op.write)
                    {
                        // A large message's fragment: the rest of it does not go (the
                        // receiver drops what arrived when the next message starts).
                        let meta = if op.meta.app {
                            Some(op.meta)
                        } else {
                            drop_fragments(&mut p.queue)
                        };
                        if let Some(m) = meta {
                            self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
                            self.cntrs.count(m.flags, true);
                            if !m.error_entry_wanted() {
                                injects_failed.push(err);
                                continue;
                            }
                            let e = Entry {
                                ctx: m.ctx,
                                flags: m.flags,
                                len: m.len,
                                err,
                                ..Entry::default()
                            };
                            cq_push(cqs, txcq, e);
                        }
                    }
                }
            }
        }
        for err in injects_failed {
            self.inject_failed(err);
        }
        for a in broken {
            self.reconnect(a, cqs);
        }
        // Arrivals.
        let qpns: Vec<u32> = self.in_qps.keys().copied().collect();
        for qpn in qpns {
            // Messages completed with a receive completion (every kind but a plain WRITE).
            let mut with_completion = 0u64;
            while let Some(c) = self.worker.poll_recv_cq(qpn) {
                if c.status != WcStatus::Flushed {
                    with_completion += 1;
                }
                if c.status != WcStatus::Success {
                    continue;
                }
                match c.opcode {
                    WcOpcode::Recv => {
                        self.arrival(qpn, c.wr_id as usize, c.byte_len as usize, cqs, avs)
                    }
                    WcOpcode::RecvRdmaWithImm => {
                        self.remote_write(qpn, &c, cqs, avs);
                    }
                    _ => {}
                }
            }
            if self.rma_event {
                self.count_plain_writes(qpn, with_completion);
            }
        }
        self.note_deferral();
    }

    /// `FI_RMA_EVENT`: the plain WRITEs of QP `qpn`'s peer that landed since the last
    /// look (they raise no completion: the transport's message count less the
    /// `with_completion` messages that did), counted on the `FI_REMOTE_WRITE` counter.
    fn count_plain_writes(&mut self, qpn: u32, with_completion: u64) {
        let Ok(now) = self.worker.with_conn(qpn, |c| c.messages_received()) else {
            return;
        };
        let Some(rq) = self.in_qps.get_mut(&qpn) else {
            return;
        };
        let writes = now.saturating_sub(rq.msgs).saturating_sub(with_completion);
        rq.msgs = now;
        if let Some(c) = &self.cntrs.remote_write {
            c.value.fetch_add(writes, Ordering::AcqRel);
        }
    }

    /// A peer's `fi_writedata` landed (a WRITE_WITH_IMM: its bytes are in the region,
    /// placed by the transport; it consumed staging slot `wr_id`, which is posted again):
    /// an `FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA` completion with the data and
    /// the length, no context (no receive of the application is consumed).
    fn remote_write(
        &mut self,
        qpn: u32,
        c: &mrc_transport::Completion,
        cqs: &mut [Option<CqState>],
        avs: &[Option<AvState>],
    ) {
        if let Some(rq) = self.in_qps.get(&qpn) {
            let sge = rq.sge(c.wr_id as usize);
            let _ = self.worker.post_recv(qpn, c.wr_id, sge);
        }
        let e = Entry {
            flags: (FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA) as u64,
            len: c.byte_len as usize,
            data: c.imm.map_or(0, u64::from),
            src: Some(self.src_of(qpn, avs)),
            ..Entry::default()
        };
        cq_push(cqs, self.rxcq, e);
        if self.rma_event
            && let Some(c) = &self.cntrs.remote_write
        {
            c.value.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// QP `qpn` is gone: its lkeys leave the regions' records.
    fn forget_qp(&mut self, qpn: u32) {
        for mr in self.target_mrs.values_mut() {
            mr.lkeys.remove(&qpn);
        }
    }

    /// The send QP to peer `a` failed: it is destroyed (its work requests all completed),
    /// and what waits in the peer's queue goes on a new connection (or completes with
    /// `FI_ECONNREFUSED` when it cannot start).
    fn reconnect(&mut self, a: u64, cqs: &mut [Option<CqState>]) {
        let Some(p) = self.peers.get_mut(&a) else {
            return;
        };
        let h = p.handle.clone();
        let mut injects = 0;
        if let Conn::Ready(q) = &mut p.conn {
            // Work requests the transport did not complete (none, once it failed them
            // all): an error each, so none is lost.
            let mut left: Vec<TxMeta> = q.inflight.drain().map(|(_, m)| m).collect();
            // The rest of a large message whose first fragments went on the failed QP
            // cannot go on a new one (its receiver expects a first fragment there).
            left.extend(drop_fragments(&mut p.queue));
            let qpn = q.qpn;
            for m in left.into_iter().filter(|m| m.app) {
                self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
                self.cntrs.count(m.flags, true);
                if !m.error_entry_wanted() {
                    injects += 1;
                    continue;
                }
                let e = Entry {
                    ctx: m.ctx,
                    flags: m.flags,
                    len: m.len,
                    err: FI_EIO as c_int,
                    ..Entry::default()
                };
                cq_push(cqs, self.txcq, e);
            }
            self.worker.destroy_qp(qpn);
        }
        for _ in 0..injects {
            self.inject_failed(FI_EIO as c_int);
        }
        match self.connect_start(&h) {
            Ok(id) => {
                if let Some(p) = self.peers.get_mut(&a) {
                    p.conn = Conn::Connecting(id);
                }
            }
            Err(e) => self.fail_peer(a, e as c_int, "", cqs),
        }
    }

    /// A message that landed in `slot` of `qpn` (`total` bytes, header included): a
    /// hello, a fragment of the large message arriving on `qpn`, or a message (or a large
    /// one's first fragment) for the oldest matching receive or the unexpected queue.
    fn arrival(
        &mut self,
        qpn: u32,
        slot: usize,
        total: usize,
        cqs: &mut [Option<CqState>],
        avs: &[Option<AvState>],
    ) {
        let Some(rq) = self.in_qps.get_mut(&qpn) else {
            return;
        };
        let at = slot * SLOT;
        let total = total.min(SLOT);
        let sge = rq.sge(slot);
        let hdr = match Hdr::decode(&rq.buf[at..at + total]) {
            Some(h) if h.kind == KIND_HELLO => {
                // A hello names the connector.
                if total == HDR_LEN + ADDR_LEN {
                    let mut a = [0u8; ADDR_LEN];
                    a.copy_from_slice(&rq.buf[at + HDR_LEN..at + total]);
                    rq.peer = Some(a);
                }
                let _ = self.worker.post_recv(qpn, slot as u64, sge);
                return;
            }
            Some(h) if h.kind == KIND_FRAG => {
                // The next bytes of the large message arriving on this QP (the transport
                // completes a QP's messages in order); none arriving: dropped.
                let Some(mut asm) = rq.asm.take() else {
                    let _ = self.worker.post_recv(qpn, slot as u64, sge);
                    return;
                };
                let n = (total - HDR_LEN).min(asm.len - asm.got);
                self.feed(qpn, slot, at + HDR_LEN, n, &mut asm);
                self.fed(qpn, asm, cqs, avs);
                return;
            }
            Some(h) => h,
            None => {
                // No valid header: dropped (no peer of this provider sends one).
                let _ = self.worker.post_recv(qpn, slot as u64, sge);
                return;
            }
        };
        // A message while a large one was arriving: that one broke off (its sender
        // sends the fragments back to back, and stops only when a post fails).
        if let Some(asm) = rq.asm.take() {
            self.abort(asm, qpn, cqs, avs);
        }
        let Some(rq) = self.in_qps.get(&qpn) else {
            return;
        };
        let (mut start, mut n) = (at + HDR_LEN, total - HDR_LEN);
        let len = if hdr.large {
            // The message's length first; a length that fits in the fragment or passes
            // MAX_MSG_SIZE is not a large message of this provider: dropped.
            let l = rq.buf[start..start + n]
                .first_chunk::<8>()
                .map(|b| u64::from_le_bytes(*b));
            match l {
                Some(l) if l <= MAX_MSG_SIZE as u64 && l as usize > n - 8 => {
                    start += 8;
                    n -= 8;
                    l as usize
                }
                _ => {
                    let _ = self.worker.post_recv(qpn, slot as u64, sge);
                    return;
                }
            }
        } else {
            n
        };
        let src = self.src_of(qpn, avs);
        let directed = self.directed;
        let q = if hdr.kind == KIND_TAGGED {
            &mut self.trecvs
        } else {
            &mut self.recvs
        };
        let sink = match q.iter().position(|r| takes(r, &hdr, src, directed)) {
            Some(i) => Sink::Recv(Fill::new(q.remove(i).expect("position is in range"))),
            None => {
                let id = self.next_unexpected;
                self.next_unexpected += 1;
                self.unexpected.push_back(Unexpected {
                    id,
                    qpn,
                    hdr,
                    len,
                    parts: Vec::new(),
                    got: 0,
                    claimed: None,
                });
                Sink::Unexpected(id)
            }
        };
        let mut asm = Asm {
            hdr,
            len,
            got: 0,
            sink,
        };
        self.feed(qpn, slot, start, n, &mut asm);
        self.fed(qpn, asm, cqs, avs);
    }

    /// Puts bytes `at..at + n` of `qpn`'s slots (they are in staging slot `slot`) where
    /// `asm` goes: the receive's buffers, the heap (while the unexpected bytes stay within
    /// [`UNEXPECTED_BYTES`]) or nowhere, and the slot goes back to the transport; or they
    /// stay in the slot (an unexpected message past the budget).
    fn feed(&mut self, qpn: u32, slot: usize, at: usize, n: usize, asm: &mut Asm) {
        let Some(rq) = self.in_qps.get(&qpn) else {
            return;
        };
        let sge = rq.sge(slot);
        let bytes = &rq.buf[at..at + n];
        asm.got += n;
        match &mut asm.sink {
            Sink::Recv(f) => f.put(bytes),
            Sink::Discard => {}
            Sink::Unexpected(id) => {
                if let Some(u) = self.unexpected.iter_mut().find(|u| u.id == *id) {
                    u.got += n;
                    if self.unexpected_bytes + n <= UNEXPECTED_BYTES {
                        u.parts.push(Body::Heap(bytes.to_vec()));
                        self.unexpected_bytes += n;
                    } else {
                        u.parts.push(Body::Slot { slot, at, len: n });
                        return;
                    }
                }
            }
        }
        let _ = self.worker.post_recv(qpn, slot as u64, sge);
    }

    /// After bytes of `asm` arrived: a whole message completes its receive (an
    /// unexpected one waits for a receive); otherwise it goes on arriving on `qpn`.
    fn fed(&mut self, qpn: u32, asm: Asm, cqs: &mut [Option<CqState>], avs: &[Option<AvState>]) {
        if asm.got < asm.len {
            if let Some(rq) = self.in_qps.get_mut(&qpn) {
                rq.asm = Some(asm);
            }
            return;
        }
        if let Sink::Recv(f) = asm.sink {
            let src = self.src_of(qpn, avs);
            f.finish(&asm.hdr, src, None, self.rxcq, cqs, &self.cntrs);
        }
    }

    /// Large message `asm` of `qpn` broke off: its receive completes with `FI_EIO` (the
    /// bytes written so far in `len`), an unexpected one is dropped.
    fn abort(&mut self, asm: Asm, qpn: u32, cqs: &mut [Option<CqState>], avs: &[Option<AvState>]) {
        match asm.sink {
            Sink::Recv(f) => {
                let src = self.src_of(qpn, avs);
                f.finish(
                    &asm.hdr,
                    src,
                    Some(FI_EIO as c_int),
                    self.rxcq,
                    cqs,
                    &self.cntrs,
                );
            }
            Sink::Unexpected(id) => {
                if let Some(i) = self.unexpected.iter().position(|u| u.id == id) {
                    let u = self.unexpected.remove(i).expect("index in range");
                    self.consume(u, |_| {});
                }
            }
            Sink::Discard => {}
        }
    }

    /// Runs `f` on the bytes of unexpected message `u` so far, in order, then frees
    /// them (the slots go back to the transport).
    fn consume(&mut self, u: Unexpected, mut f: impl FnMut(&[u8])) {
        for part in u.parts {
            match part {
                Body::Heap(v) => {
                    self.unexpected_bytes -= v.len();
                    f(&v);
                }
                Body::Slot { slot, at, len } => {
                    if let Some(rq) = self.in_qps.get(&u.qpn) {
                        f(&rq.buf[at..at + len]);
                        let sge = rq.sge(slot);
                        let _ = self.worker.post_recv(u.qpn, slot as u64, sge);
                    }
                }
            }
        }
    }

    /// Unexpected message `i` goes into receive `r` (or nowhere, `r` `None`: a discard):
    /// what arrived now, and the rest of a large one as it arrives (then it completes).
    fn take_unexpected(
        &mut self,
        i: usize,
        r: Option<PostedRecv>,
        cqs: &mut [Option<CqState>],
        avs: &[Option<AvState>],
    ) {
        let Some(u) = self.unexpected.remove(i) else {
            return;
        };
        let (hdr, qpn, id, whole) = (u.hdr, u.qpn, u.id, u.got == u.len);
        let mut fill = r.map(Fill::new);
        self.consume(u, |b| {
            if let Some(f) = fill.as_mut() {
                f.put(b)
            }
        });
        if whole {
            if let Some(f) = fill {
                let src = self.src_of(qpn, avs);
                f.finish(&hdr, src, None, self.rxcq, cqs, &self.cntrs);
            }
        } else if let Some(asm) = self.in_qps.get_mut(&qpn).and_then(|q| q.asm.as_mut())
            && matches!(asm.sink, Sink::Unexpected(x) if x == id)
        {
            asm.sink = fill.map_or(Sink::Discard, Sink::Recv);
        }
    }

    /// An inject failed with `err` (no error entry, see [`TxMeta::error_entry_wanted`]):
    /// counted, and said on stderr the first time on this endpoint.
    fn inject_failed(&mut self, err: c_int) {
        self.injects_failed += 1;
        if self.injects_failed == 1 {
            crate::log(&format!(
                "an inject (fi_inject, fi_tinject, ...) failed with FI_E* error {err}{}: an inject generates no completion, so it has no CQ error entry; the counters bound for its operation count it (said once per endpoint)",
                refused_why(err)
            ));
        }
    }

    /// Ends the connection attempt to `a`: its queued sends complete with `err` (injects
    /// are counted, see [`TxMeta::error_entry_wanted`]; only a QP that failed and is set
    /// up anew can leave injects in the queue: [`EpState::ready_for`] turns them away
    /// from a set-up), and the peer is left [`Conn::Failed`], so that the next post to it
    /// is refused with `err`. Said on stderr the first time on this endpoint.
    /// `why`: the set-up's own words (e.g. `": ..."`), or empty.
    fn fail_peer(&mut self, a: u64, err: c_int, why: &str, cqs: &mut [Option<CqState>]) {
        if let Some(p) = self.peers.get_mut(&a) {
            p.conn = Conn::Failed(err);
            let queue = std::mem::take(&mut p.queue);
            let to = p.handle.addr();
            self.setups_failed += 1;
            if self.setups_failed == 1 {
                crate::log(&format!(
                    "the connection to {to} could not be set up{why}: FI_E* error {err}{}; {} queued sends and writes fail with it, and the next send, inject or write to that peer returns -{err} at once (the one after starts a new set-up) (said once per endpoint)",
                    refused_why(err),
                    queue.iter().filter(|op| op.meta.app).count(),
                ));
            }
            // A large message's fragments but the last complete nothing.
            for op in queue.into_iter().filter(|op| op.meta.app) {
                self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
                self.cntrs.count(op.meta.flags, true);
                if !op.meta.error_entry_wanted() {
                    self.inject_failed(err);
                    continue;
                }
                let e = Entry {
                    ctx: op.meta.ctx,
                    flags: op.meta.flags,
                    len: op.meta.len,
                    err,
                    ..Entry::default()
                };
                cq_push(cqs, self.txcq, e);
            }
        }
    }

    /// A send of header `hdr` and the bytes `iov` to `dest`: copied now into a staging
    /// slot, or, when none is free, into the peer's queue (the caller's buffer is free
    /// on return), except that a send with a completion longer than `inject_size`
    /// queues the caller's buffers (`raw`, the same as `iov`), read when a slot frees.
    /// `-FI_EAGAIN` when the transmit queue is full.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        avs: &[Option<AvState>],
        dest: u64,
        hdr: Hdr,
        iov: &[&[u8]],
        raw: &[(usize, usize)],
        ctx: usize,
        completion: bool,
    ) -> Result<(), u32> {
        let meta = TxMeta {
            ctx,
            len: iov.iter().map(|b| b.len()).sum(),
            completion,
            flags: FI_SEND as u64 | hdr.op(),
            app: true,
        };
        if meta.len > FRAGMENT_SIZE {
            return self.send_large(avs, dest, hdr, iov, meta);
        }
        let h = hdr.encode();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(iov.len() + 1);
        parts.push(&h);
        parts.extend_from_slice(iov);
        let borrow = (completion && meta.len > INJECT_SIZE).then_some((h, raw));
        self.submit(avs, dest, &parts, meta, None, borrow)
    }

    /// A send longer than [`FRAGMENT_SIZE`] (at most [`MAX_MSG_SIZE`]): copied now into
    /// fragments of a staging slot each, queued back to back for `dest`'s QP. The first
    /// carries the header with [`HDR_LARGE`] and the length, the others [`KIND_FRAG`]; the
    /// last completes the send.
    fn send_large(
        &mut self,
        avs: &[Option<AvState>],
        dest: u64,
        hdr: Hdr,
        iov: &[&[u8]],
        meta: TxMeta,
    ) -> Result<(), u32> {
        if meta.len > MAX_MSG_SIZE {
            return Err(FI_EMSGSIZE);
        }
        self.check_submit()?;
        let first = Hdr { large: true, ..hdr }.encode();
        let cont = Hdr {
            kind: KIND_FRAG,
            ..Hdr::default()
        }
        .encode();
        let mut ops = Vec::with_capacity(meta.len / FRAGMENT_SIZE + 2);
        let (mut part, mut off) = (0, 0);
        let mut left = meta.len;
        while left > 0 {
            let room = if ops.is_empty() {
                FIRST_FRAGMENT
            } else {
                FRAGMENT_SIZE
            };
            let n = room.min(left);
            let mut data = Vec::with_capacity(HDR_LEN + 8 + n);
            if ops.is_empty() {
                data.extend_from_slice(&first);
                data.extend_from_slice(&(meta.len as u64).to_le_bytes());
            } else {
                data.extend_from_slice(&cont);
            }
            let mut need = n;
            while need > 0 {
                let b = iov[part];
                let k = (b.len() - off).min(need);
                data.extend_from_slice(&b[off..off + k]);
                need -= k;
                off += k;
                if off == b.len() {
                    part += 1;
                    off = 0;
                }
            }
            left -= n;
            let m = TxMeta {
                app: left == 0,
                ..meta
            };
            self.queued_copy_bytes += data.len() as u64;
            ops.push(TxOp {
                data: TxData::Owned(data),
                meta: m,
                write: None,
                cont: !ops.is_empty(),
            });
        }
        self.add_peer(avs, dest)?;
        self.ready_for(dest, &meta)?;
        let p = self.peers.get_mut(&dest).ok_or(FI_EOTHER)?;
        p.queue.extend(ops);
        self.tx_outstanding += 1;
        Ok(())
    }

    /// `-FI_EAGAIN` for an operation without an error entry (an inject:
    /// [`TxMeta::error_entry_wanted`]) while the connection to `dest` is being set up:
    /// queued, it could only be counted if the set-up failed, and its caller, who has no
    /// completion to wait for, would never learn it (Open MPI's OFI MTL waited for
    /// ever). Refused, it is retried by the caller (fi_msg(3)), and the set-up advances in
    /// every send, inject, write and progress call ([`EpState::progress`]), so the retry ends in
    /// a success or, the set-up failed, the error ([`EpState::add_peer`]). Operations
    /// with an error entry wait in the queue as before.
    fn ready_for(&self, dest: u64, meta: &TxMeta) -> Result<(), u32> {
        match self.peers.get(&dest).map(|p| &p.conn) {
            Some(Conn::Connecting(_)) if !meta.error_entry_wanted() => Err(FI_EAGAIN),
            _ => Ok(()),
        }
    }

    /// Why no send or write may be posted now: the endpoint is not enabled, or its
    /// transmit queue is full (`-FI_EAGAIN`).
    fn check_submit(&self) -> Result<(), u32> {
        if !self.enabled {
            return Err(FI_EOPBADSTATE);
        }
        if self.tx_outstanding >= QUEUE_SIZE {
            return Err(FI_EAGAIN);
        }
        Ok(())
    }

    /// Starts connecting to AV entry `dest` when met for the first time. A peer whose
    /// set-up failed ([`Conn::Failed`]) answers this one call with the error and is
    /// forgotten: the next call starts a new set-up.
    fn add_peer(&mut self, avs: &[Option<AvState>], dest: u64) -> Result<(), u32> {
        if let Some(Peer {
            conn: Conn::Failed(err),
            ..
        }) = self.peers.get(&dest)
        {
            let err = *err as u32;
            self.peers.remove(&dest);
            return Err(err);
        }
        if !self.peers.contains_key(&dest) {
            let av = self
                .av
                .and_then(|i| avs.get(i))
                .and_then(Option::as_ref)
                .ok_or(FI_EOPBADSTATE)?;
            let addr = av
                .addrs
                .get(usize::try_from(dest).map_err(|_| FI_EINVAL)?)
                .and_then(Option::as_ref)
                .ok_or(FI_EINVAL)?;
            let h = ConnHandle::from_bytes(addr).map_err(|_| FI_EINVAL)?;
            let id = self.connect_start(&h)?;
            self.peers.insert(
                dest,
                Peer {
                    conn: Conn::Connecting(id),
                    queue: VecDeque::new(),
                    handle: h,
                },
            );
        }
        Ok(())
    }

    /// An RMA write of the bytes `iov` to `dest` at `to` (copied now: the caller's buffer
    /// is free on return), on the transport's WRITE, or WRITE_WITH_IMM with `to.imm`.
    /// `-FI_EAGAIN` when the transmit queue is full.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        avs: &[Option<AvState>],
        dest: u64,
        iov: &[&[u8]],
        to: RmaTarget,
        ctx: usize,
        completion: bool,
    ) -> Result<(), u32> {
        let meta = TxMeta {
            ctx,
            len: iov.iter().map(|b| b.len()).sum(),
            completion,
            flags: (FI_WRITE | FI_RMA) as u64,
            app: true,
        };
        self.submit(avs, dest, iov, meta, Some(to), None)
    }

    /// Posts `parts` (one send's or write's bytes) to `dest` now when its QP is open
    /// with a free slot and nothing waits before it, otherwise queues a copy, or the
    /// header and the caller's buffers of `borrow` ([`TxData::Borrowed`]); connects to a
    /// peer met for the first time.
    fn submit(
        &mut self,
        avs: &[Option<AvState>],
        dest: u64,
        parts: &[&[u8]],
        meta: TxMeta,
        write: Option<RmaTarget>,
        borrow: Option<Borrow<'_>>,
    ) -> Result<(), u32> {
        if !self.enabled {
            return Err(FI_EOPBADSTATE);
        }
        if meta.len > FRAGMENT_SIZE {
            return Err(FI_EMSGSIZE);
        }
        self.check_submit()?;
        self.add_peer(avs, dest)?;
        self.ready_for(dest, &meta)?;
        let p = self.peers.get_mut(&dest).ok_or(FI_EOTHER)?;
        match &mut p.conn {
            Conn::Ready(q) if q.open && p.queue.is_empty() && !q.free.is_empty() => {
                q.post(&mut self.worker, parts, meta, write)
                    .map_err(|e| e as u32)?;
            }
            _ => {
                let data = match borrow {
                    Some((h, raw)) => TxData::Borrowed(h, raw.to_vec()),
                    None => {
                        self.queued_copy_bytes += meta_len_of(parts);
                        TxData::Owned(parts.concat())
                    }
                };
                p.queue.push_back(TxOp {
                    data,
                    meta,
                    write,
                    cont: false,
                });
            }
        }
        self.tx_outstanding += 1;
        Ok(())
    }

    /// Posts receive `r`: the oldest unclaimed unexpected message it matches fills it at
    /// once; otherwise it waits in its queue.
    fn recv(
        &mut self,
        r: PostedRecv,
        cqs: &mut [Option<CqState>],
        avs: &[Option<AvState>],
    ) -> Result<(), u32> {
        if !self.enabled {
            return Err(FI_EOPBADSTATE);
        }
        if let Some(i) = self.find_unexpected(&r, avs) {
            self.take_unexpected(i, Some(r), cqs, avs);
            return Ok(());
        }
        if self.recvs.len() + self.trecvs.len() >= QUEUE_SIZE {
            return Err(FI_EAGAIN);
        }
        if r.tagged {
            self.trecvs.push_back(r);
        } else {
            self.recvs.push_back(r);
        }
        Ok(())
    }

    /// The oldest unclaimed unexpected message `r` matches.
    fn find_unexpected(&self, r: &PostedRecv, avs: &[Option<AvState>]) -> Option<usize> {
        self.unexpected.iter().position(|u| {
            u.claimed.is_none() && takes(r, &u.hdr, self.src_of(u.qpn, avs), self.directed)
        })
    }

    /// `fi_trecvmsg` with `FI_PEEK` or `FI_CLAIM` (docs/LIBFABRIC.md): the result is a
    /// completion (`FI_ENOMSG` error entry for a peek that finds nothing).
    fn probe(
        &mut self,
        r: PostedRecv,
        how: Probe,
        cqs: &mut [Option<CqState>],
        avs: &[Option<AvState>],
    ) -> Result<(), u32> {
        if !self.enabled {
            return Err(FI_EOPBADSTATE);
        }
        let rxcq = self.rxcq;
        let found = match how {
            Probe::Peek { .. } => self.find_unexpected(&r, avs),
            Probe::Claim { .. } => self
                .unexpected
                .iter()
                .position(|u| u.claimed == Some(r.ctx)),
        };
        let Some(i) = found else {
            if let Probe::Claim { .. } = how {
                return Err(FI_EINVAL);
            }
            let e = Entry {
                ctx: r.ctx,
                flags: (FI_RECV | FI_TAGGED) as u64,
                tag: r.tag,
                err: FI_ENOMSG as c_int,
                ..Entry::default()
            };
            cq_push(cqs, rxcq, e);
            return Ok(());
        };
        let src = self.src_of(self.unexpected[i].qpn, avs);
        let u = &mut self.unexpected[i];
        let meta = Entry {
            ctx: r.ctx,
            flags: u.hdr.rx_flags(),
            len: u.len,
            data: u.hdr.data.map_or(0, u64::from),
            tag: u.hdr.tag,
            src: Some(src),
            ..Entry::default()
        };
        match how {
            Probe::Peek {
                claim: true,
                discard: false,
            } => {
                u.claimed = Some(r.ctx);
                cq_push(cqs, rxcq, meta);
            }
            Probe::Peek { discard: false, .. } => cq_push(cqs, rxcq, meta),
            Probe::Peek { discard: true, .. } | Probe::Claim { discard: true } => {
                self.take_unexpected(i, None, cqs, avs);
                if r.completion || matches!(how, Probe::Peek { .. }) {
                    cq_push(cqs, rxcq, meta);
                }
            }
            Probe::Claim { discard: false } => self.take_unexpected(i, Some(r), cqs, avs),
        }
        Ok(())
    }

    /// `fi_cancel`: the oldest posted receive with context `ctx` completes with an
    /// `FI_ECANCELED` error entry. `-FI_ENOENT` when none is queued.
    fn cancel(&mut self, ctx: usize, cqs: &mut [Option<CqState>]) -> Result<(), u32> {
        let r = [&mut self.recvs, &mut self.trecvs]
            .into_iter()
            .find_map(|q| {
                q.iter()
                    .position(|r| r.ctx == ctx)
                    .and_then(|i| q.remove(i))
            });
        let Some(r) = r else {
            return self.cancel_send(ctx, cqs);
        };
        let op = if r.tagged { FI_TAGGED } else { FI_MSG };
        let e = Entry {
            ctx,
            flags: (FI_RECV | op) as u64,
            buf: r.iov.first().map_or(0, |x| x.0),
            tag: r.tag,
            err: FI_ECANCELED as c_int,
            ..Entry::default()
        };
        cq_push(cqs, self.rxcq, e);
        Ok(())
    }
}

impl EpState {
    /// `fi_cancel` of a send or write with context `ctx` still waiting in a peer's queue
    /// (its connection being set up, or its QP's slots all in flight): removed, and an
    /// `FI_ECANCELED` error entry. A large message only while its first fragment waits
    /// too (once a fragment went, the rest must follow it). `-FI_ENOENT` when none waits.
    fn cancel_send(&mut self, ctx: usize, cqs: &mut [Option<CqState>]) -> Result<(), u32> {
        let found = self.peers.iter().find_map(|(&a, p)| {
            let last = p
                .queue
                .iter()
                .position(|op| op.meta.app && op.meta.ctx == ctx)?;
            // Back to the message's first fragment, which must still be queued.
            let first = (0..=last).rev().find(|&i| !p.queue[i].cont)?;
            Some((a, first, last))
        });
        let (a, first, last) = found.ok_or(FI_ENOENT)?;
        let Some(p) = self.peers.get_mut(&a) else {
            return Err(FI_ENOENT);
        };
        let meta = p.queue[last].meta;
        p.queue.drain(first..=last);
        self.tx_outstanding = self.tx_outstanding.saturating_sub(1);
        self.cntrs.count(meta.flags, true);
        let e = Entry {
            ctx,
            flags: meta.flags,
            err: FI_ECANCELED as c_int,
            ..Entry::default()
        };
        cq_push(cqs, self.txcq, e);
        Ok(())
    }
}

impl RecvQp {
    fn sge(&self, slot: usize) -> Sge {
        Sge {
            lkey: self.lkey,
            addr: self.base + (slot * SLOT) as u64,
            len: SLOT as u32,
        }
    }
}

impl SendQp {
    /// Copies `parts` into a free slot and posts them as one SEND, or as one WRITE (with
    /// immediate data when `write.imm` is set) to `write`. The caller checked that a slot
    /// is free. `Err(FI_E*)` (positive) when the transport refuses it.
    fn post(
        &mut self,
        w: &mut Worker<DirectDatapath>,
        parts: &[&[u8]],
        meta: TxMeta,
        write: Option<RmaTarget>,
    ) -> Result<(), c_int> {
        let Some(slot) = self.free.pop() else {
            return Err(FI_EAGAIN as c_int);
        };
        let start = slot * SLOT;
        let mut at = start;
        for b in parts {
            self.buf[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        let len = at - start;
        let sge = Sge {
            lkey: self.lkey,
            addr: self.base + start as u64,
            len: len as u32,
        };
        let wr = slot as u64;
        let r = match write {
            None => w.post_send(self.qpn, wr, sge, None),
            Some(RmaTarget {
                addr,
                key,
                imm: None,
            }) => w.post_write(self.qpn, wr, sge, addr, key),
            Some(RmaTarget {
                addr,
                key,
                imm: Some(imm),
            }) => w.post_write_with_imm(self.qpn, wr, sge, addr, key, imm),
        };
        match r {
            Ok(()) => {
                self.inflight.insert(slot, meta);
                Ok(())
            }
            Err(_) => {
                self.free.push(slot);
                Err(FI_EIO as c_int)
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// The C-visible objects

#[repr(C)]
struct Fabric {
    fid: fid_fabric,
    magic: u64,
}

#[repr(C)]
struct Domain {
    fid: fid_domain,
    magic: u64,
    st: Shared,
}

#[repr(C)]
struct Ep {
    fid: fid_ep,
    magic: u64,
    st: Shared,
    idx: usize,
}

#[repr(C)]
struct Cq {
    fid: fid_cq,
    magic: u64,
    st: Shared,
    idx: usize,
    /// The fabric's API version (the size of `fi_cq_err_entry` depends on it).
    api: u32,
}

#[repr(C)]
struct Av {
    fid: fid_av,
    magic: u64,
    st: Shared,
    idx: usize,
}

#[repr(C)]
struct Eq {
    fid: fid_eq,
    magic: u64,
}

#[repr(C)]
struct Mr {
    fid: fid_mr,
    magic: u64,
    st: Shared,
    idx: usize,
}

/// The provider's object behind `f` when it is of class `class`.
unsafe fn obj<'a, T>(f: *const fid, class: u32) -> Option<&'a T> {
    // SAFETY: a fid libfabric passes (non-null: one of ours or another provider's); ours
    // carry MAGIC right after their fid_* header, which starts with the fid.
    unsafe {
        let f = f.as_ref()?;
        if f.fclass != class as usize {
            return None;
        }
        let magic_at = match class {
            FI_CLASS_FABRIC => std::mem::offset_of!(Fabric, magic),
            FI_CLASS_DOMAIN => std::mem::offset_of!(Domain, magic),
            FI_CLASS_EP => std::mem::offset_of!(Ep, magic),
            FI_CLASS_CQ => std::mem::offset_of!(Cq, magic),
            FI_CLASS_AV => std::mem::offset_of!(Av, magic),
            FI_CLASS_EQ => std::mem::offset_of!(Eq, magic),
            FI_CLASS_MR => std::mem::offset_of!(Mr, magic),
            FI_CLASS_CNTR => std::mem::offset_of!(Cntr, magic),
            _ => return None,
        };
        let m = (f as *const fid)
            .cast::<u8>()
            .add(magic_at)
            .cast::<u64>()
            .read_unaligned();
        (m == MAGIC).then(|| &*(f as *const fid).cast::<T>())
    }
}

fn new_fid(class: u32, context: *mut c_void, ops: &'static fi_ops) -> fid {
    fid {
        fclass: class as usize,
        context,
        ops: ops as *const fi_ops as *mut fi_ops,
    }
}

macro_rules! table {
    ($t:ident { $($f:ident: $v:expr),* $(,)? }) => {
        $t { size: std::mem::size_of::<$t>(), $($f: Some($v)),* }
    };
}

// ---------------------------------------------------------------------------------
// Fabric

static FABRIC_FI_OPS: fi_ops = table!(fi_ops {
    close: fabric_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static FABRIC_OPS: fi_ops_fabric = table!(fi_ops_fabric {
    domain: domain_open,
    passive_ep: s4,
    eq_open: eq_open,
    wait_open: s3,
    trywait: s3,
    domain2: domain_open2,
});

pub(crate) unsafe extern "C" fn fabric_open(
    attr: *mut fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if fabric.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() }
            && !a.name.is_null()
            && unsafe { std::ffi::CStr::from_ptr(a.name) } != crate::info::FABRIC_NAME
        {
            return neg(FI_EINVAL);
        }
        let f = Box::new(Fabric {
            fid: fid_fabric {
                fid: new_fid(FI_CLASS_FABRIC, context, &FABRIC_FI_OPS),
                ops: &FABRIC_OPS as *const _ as *mut _,
                api_version: crate::FI_API_VERSION,
            },
            magic: MAGIC,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *fabric = Box::into_raw(f).cast() };
        0
    })
}

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard(|| {
        if unsafe { obj::<Fabric>(f, FI_CLASS_FABRIC) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one of our fabrics, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Fabric>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Domain

static DOMAIN_FI_OPS: fi_ops = table!(fi_ops {
    close: domain_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static DOMAIN_OPS: fi_ops_domain = table!(fi_ops_domain {
    av_open: av_open,
    cq_open: cq_open,
    endpoint: ep_open,
    scalable_ep: s4,
    cntr_open: cntr_open,
    poll_open: s3,
    stx_ctx: s4,
    srx_ctx: s4,
    query_atomic: s5,
    query_collective: s4,
    endpoint2: ep_open2,
});
static MR_OPS: fi_ops_mr = table!(fi_ops_mr {
    reg: mr_reg,
    regv: mr_regv,
    regattr: mr_regattr
});

unsafe extern "C" fn domain_open(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if domain.is_null() || unsafe { obj::<Fabric>(fabric.cast(), FI_CLASS_FABRIC) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's info, null or live.
        if let Some(i) = unsafe { info.as_ref() }
            && let Some(d) = unsafe { i.domain_attr.as_ref() }
            && !d.name.is_null()
            && unsafe { std::ffi::CStr::from_ptr(d.name) } != crate::info::DOMAIN_NAME
        {
            return neg(FI_EINVAL);
        }
        // How regions are named: the mr_mode of the info (fi_getinfo's answer).
        // SAFETY: the caller's info and its domain_attr, null or live.
        let m =
            unsafe { info.as_ref().and_then(|i| i.domain_attr.as_ref()) }.map_or(0, |d| d.mr_mode);
        let basic = m == FI_MR_BASIC as c_int;
        let st = State {
            mr_mode: MrMode {
                virt_addr: basic || m & FI_MR_VIRT_ADDR as c_int != 0,
                prov_key: basic || m & FI_MR_PROV_KEY as c_int != 0,
            },
            ..State::default()
        };
        let d = Box::new(Domain {
            fid: fid_domain {
                fid: new_fid(FI_CLASS_DOMAIN, context, &DOMAIN_FI_OPS),
                ops: &DOMAIN_OPS as *const _ as *mut _,
                mr: &MR_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: Arc::new(Mutex::new(st)),
        });
        // SAFETY: non-null out-pointer.
        unsafe { *domain = Box::into_raw(d).cast() };
        0
    })
}

unsafe extern "C" fn domain_open2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return neg(FI_EBADFLAGS);
    }
    unsafe { domain_open(fabric, info, domain, context) }
}

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    guard(|| {
        if unsafe { obj::<Domain>(f, FI_CLASS_DOMAIN) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one of our domains, not used after close (its objects hold the state).
        drop(unsafe { Box::from_raw(f.cast::<Domain>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Memory regions: host memory. A region with FI_REMOTE_WRITE is registered with every QP
// every endpoint of the domain accepted (now and later), at its key and RMA address, so
// a peer's WRITE lands in it; the sending side copies through its staging slots, so no
// region is needed for a local buffer (descriptors are ignored).

static MR_FI_OPS: fi_ops = table!(fi_ops {
    close: mr_close,
    bind: mr_bind,
    control: mr_control,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});

/// The access bits `fi_mr_reg` takes.
const MR_ACCESS: u64 =
    (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;

/// A fresh 32-bit key from the OS's random source (`FI_MR_PROV_KEY`).
fn random_key() -> Option<u32> {
    let mut b = [0u8; 4];
    // SAFETY: a 4-byte buffer of ours.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    (n == 4).then(|| u32::from_le_bytes(b))
}

/// Registers `[buf, buf + len)` in domain `st`: its key (drawn, or `requested`), its RMA
/// address (`buf`'s virtual address, or `offset`), and with `FI_REMOTE_WRITE` every
/// endpoint's QPs. Returns the region's index and key.
fn mr_register(
    st: &mut State,
    buf: usize,
    len: usize,
    access: u64,
    offset: u64,
    requested: u64,
) -> Result<(usize, u32), u32> {
    if access & !MR_ACCESS != 0 {
        return Err(FI_EINVAL);
    }
    if buf == 0 && len > 0 || buf.checked_add(len).is_none() {
        return Err(FI_EINVAL);
    }
    let base = if st.mr_mode.virt_addr {
        buf as u64
    } else {
        offset
    };
    if base.checked_add(len as u64).is_none() {
        return Err(FI_EINVAL);
    }
    let used = |st: &State, k: u32| st.mrs.iter().flatten().any(|m| m.key == k);
    let remote_write = access & FI_REMOTE_WRITE as u64 != 0;
    // A drawn key that a QP's staging region holds already is drawn again.
    let tries = if st.mr_mode.prov_key { 16 } else { 1 };
    for _ in 0..tries {
        let key = if st.mr_mode.prov_key {
            match random_key() {
                Some(k) if k != 0 && !used(st, k) => k,
                Some(_) => continue,
                None => return Err(FI_EOTHER),
            }
        } else {
            let k = u32::try_from(requested).map_err(|_| FI_EKEYREJECTED)?;
            if used(st, k) {
                return Err(FI_ENOKEY);
            }
            k
        };
        if remote_write {
            let mut done = Vec::new();
            let mut err = None;
            for (i, e) in st.eps.iter_mut().enumerate() {
                let Some(e) = e else { continue };
                match e.add_target_mr(key, buf, len, base) {
                    Ok(()) => done.push(i),
                    Err(x) => {
                        err = Some(x);
                        break;
                    }
                }
            }
            if let Some(x) = err {
                for i in done {
                    if let Some(Some(e)) = st.eps.get_mut(i) {
                        e.remove_target_mr(key);
                    }
                }
                if st.mr_mode.prov_key && x == FI_ENOKEY {
                    continue;
                }
                return Err(x);
            }
        }
        let idx = push(
            &mut st.mrs,
            MrState {
                key,
                ptr: buf,
                len,
                base,
                remote_write,
            },
        );
        return Ok((idx, key));
    }
    Err(FI_ENOKEY)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_reg(
    f: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(f, FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if mr.is_null() {
            return neg(FI_EINVAL);
        }
        if flags != 0 {
            return neg(FI_EBADFLAGS);
        }
        let mut st = match lock(&d.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let (idx, key) =
            match mr_register(&mut st, buf as usize, len, access, offset, requested_key) {
                Ok(x) => x,
                Err(e) => return neg(e),
            };
        let m = Box::new(Mr {
            fid: fid_mr {
                fid: new_fid(FI_CLASS_MR, context, &MR_FI_OPS),
                mem_desc: std::ptr::null_mut(),
                key: u64::from(key),
            },
            magic: MAGIC,
            st: d.st.clone(),
            idx,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *mr = Box::into_raw(m).cast() };
        0
    })
}

/// `fi_mr_regv`: one iovec (`mr_iov_limit` is 1).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_regv(
    f: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let (buf, len) = match count {
            0 => (std::ptr::null(), 0),
            // SAFETY: the caller's array of `count` iovecs.
            1 if !iov.is_null() => unsafe { ((*iov).iov_base.cast_const(), (*iov).iov_len) },
            1 => return neg(FI_EINVAL),
            _ => return neg(FI_ENOSYS),
        };
        unsafe {
            mr_reg(
                f,
                buf,
                len,
                access,
                offset,
                requested_key,
                flags,
                mr,
                context,
            )
        }
    })
}

unsafe extern "C" fn mr_regattr(
    f: *mut fid,
    attr: *const fi_mr_attr,
    flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's attr, null or live.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        unsafe {
            mr_regv(
                f,
                a.mr_iov,
                a.iov_count,
                a.access,
                a.offset,
                a.requested_key,
                flags,
                mr,
                a.context,
            )
        }
    })
}

/// `fi_mr_bind`: an endpoint is accepted (`FI_MR_ENDPOINT` is not kept by `fi_getinfo`,
/// so a region works with every endpoint of the domain already); anything else
/// (counters: no `FI_RMA_EVENT`) is `-FI_ENOSYS`.
unsafe extern "C" fn mr_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard(|| {
        if unsafe { obj::<Mr>(f, FI_CLASS_MR) }.is_none() {
            return neg(FI_EINVAL);
        }
        if flags != 0 {
            return neg(FI_EBADFLAGS);
        }
        // SAFETY: the caller's fid, null or live.
        match unsafe { bfid.as_ref() }.map(|b| b.fclass as u32) {
            Some(FI_CLASS_EP) if unsafe { obj::<Ep>(bfid, FI_CLASS_EP) }.is_some() => 0,
            Some(FI_CLASS_CNTR) => neg(FI_ENOSYS),
            _ => neg(FI_EINVAL),
        }
    })
}

/// `fi_mr_enable` (`FI_ENABLE`): the region is live from `fi_mr_reg` on, so nothing to do.
unsafe extern "C" fn mr_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard(|| {
        if unsafe { obj::<Mr>(f, FI_CLASS_MR) }.is_none() {
            return neg(FI_EINVAL);
        }
        match command as u32 {
            FI_ENABLE => 0,
            _ => neg(FI_ENOSYS),
        }
    })
}

unsafe extern "C" fn mr_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(m) = (unsafe { obj::<Mr>(f, FI_CLASS_MR) }) else {
            return neg(FI_EINVAL);
        };
        if let Ok(mut st) = lock(&m.st)
            && let Some(r) = st.mrs.get_mut(m.idx).and_then(Option::take)
            && r.remote_write
        {
            for e in st.eps.iter_mut().flatten() {
                e.remove_target_mr(r.key);
            }
        }
        // SAFETY: one of our regions, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Mr>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Event queue: RDM needs no connection management and the AV is synchronous, so the
// queue never holds an event; it exists because applications open one.

static EQ_FI_OPS: fi_ops = table!(fi_ops {
    close: eq_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static EQ_OPS: fi_ops_eq = table!(fi_ops_eq {
    read: eq_read,
    readerr: eq_readerr,
    write: s5,
    sread: eq_sread,
    strerror: eq_strerror,
});

unsafe extern "C" fn eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if eq.is_null() || unsafe { obj::<Fabric>(fabric.cast(), FI_CLASS_FABRIC) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() }
            && !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC)
        {
            return neg(FI_ENOSYS);
        }
        let e = Box::new(Eq {
            fid: fid_eq {
                fid: new_fid(FI_CLASS_EQ, context, &EQ_FI_OPS),
                ops: &EQ_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *eq = Box::into_raw(e).cast() };
        0
    })
}

unsafe extern "C" fn eq_read(
    eq: *mut fid_eq,
    _event: *mut u32,
    _buf: *mut c_void,
    _len: usize,
    _flags: u64,
) -> isize {
    guard(|| match unsafe { obj::<Eq>(eq.cast(), FI_CLASS_EQ) } {
        Some(_) => neg(FI_EAGAIN),
        None => neg(FI_EINVAL),
    })
}

unsafe extern "C" fn eq_readerr(eq: *mut fid_eq, _buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
    guard(|| match unsafe { obj::<Eq>(eq.cast(), FI_CLASS_EQ) } {
        Some(_) => neg(FI_EAGAIN),
        None => neg(FI_EINVAL),
    })
}

unsafe extern "C" fn eq_sread(
    eq: *mut fid_eq,
    _event: *mut u32,
    _buf: *mut c_void,
    _len: usize,
    timeout: c_int,
    _flags: u64,
) -> isize {
    guard(|| {
        if unsafe { obj::<Eq>(eq.cast(), FI_CLASS_EQ) }.is_none() {
            return neg(FI_EINVAL);
        }
        // Nothing ever arrives: wait out a finite timeout, refuse to block forever.
        if timeout < 0 {
            return neg(FI_EAGAIN);
        }
        std::thread::sleep(Duration::from_millis(timeout as u64));
        neg(FI_EAGAIN)
    })
}

static ERR_TEXT: &std::ffi::CStr = c"mrc transport error";

unsafe fn strerror_into(buf: *mut c_char, len: usize) -> *const c_char {
    if buf.is_null() || len == 0 {
        return ERR_TEXT.as_ptr();
    }
    let b = ERR_TEXT.to_bytes();
    let n = b.len().min(len - 1);
    // SAFETY: the caller's buffer of `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    buf
}

unsafe extern "C" fn eq_strerror(
    _eq: *mut fid_eq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard(|| unsafe { strerror_into(buf, len) })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    guard(|| {
        if unsafe { obj::<Eq>(f, FI_CLASS_EQ) }.is_none() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one of our event queues, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Eq>()) });
        0
    })
}

// ---------------------------------------------------------------------------------
// Address vectors

static AV_FI_OPS: fi_ops = table!(fi_ops {
    close: av_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static AV_OPS: fi_ops_av = table!(fi_ops_av {
    insert: av_insert,
    insertsvc: s6,
    insertsym: s8,
    remove: av_remove,
    lookup: av_lookup,
    straddr: av_straddr,
    av_set: s4,
});

unsafe extern "C" fn av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(domain.cast(), FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if av.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() } {
            if !matches!(a.type_, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE) {
                return neg(FI_EINVAL);
            }
            // FI_EVENT (asynchronous inserts), FI_READ / FI_SYMMETRIC and named (shared)
            // AVs are not in this slice.
            if a.flags != 0 || !a.name.is_null() {
                return neg(FI_ENOSYS);
            }
        }
        let mut st = match lock(&d.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let idx = push(
            &mut st.avs,
            AvState {
                addrs: Vec::new(),
                index: HashMap::new(),
            },
        );
        let a = Box::new(Av {
            fid: fid_av {
                fid: new_fid(FI_CLASS_AV, context, &AV_FI_OPS),
                ops: &AV_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: d.st.clone(),
            idx,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *av = Box::into_raw(a).cast() };
        0
    })
}

unsafe extern "C" fn av_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(f, FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if let Ok(mut st) = lock(&a.st) {
            if st.eps.iter().flatten().any(|e| e.av == Some(a.idx)) {
                return neg(FI_EBUSY);
            }
            st.avs[a.idx] = None;
        }
        // SAFETY: one of our AVs, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Av>()) });
        0
    })
}

unsafe extern "C" fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(av.cast(), FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if flags & !(FI_MORE as u64) != 0 {
            return neg(FI_EBADFLAGS);
        }
        if count > 0 && addr.is_null() || count > c_int::MAX as usize {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&a.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(v)) = st.avs.get_mut(a.idx) else {
            return neg(FI_EINVAL);
        };
        let mut n = 0;
        for i in 0..count {
            // SAFETY: `count` addresses of ADDR_LEN bytes each (the fi_av_insert contract
            // for this provider's address format).
            let b = unsafe {
                std::slice::from_raw_parts(addr.cast::<u8>().add(i * ADDR_LEN), ADDR_LEN)
            };
            let out = match ConnHandle::from_bytes(b) {
                Ok(_) => {
                    let mut x = [0u8; ADDR_LEN];
                    x.copy_from_slice(b);
                    v.addrs.push(Some(x));
                    n += 1;
                    let fa = (v.addrs.len() - 1) as u64;
                    v.index.entry(x).or_insert(fa);
                    fa
                }
                Err(_) => FI_ADDR_NOTAVAIL,
            };
            if !fi_addr.is_null() {
                // SAFETY: the caller's array of `count` fi_addr_t.
                unsafe { *fi_addr.add(i) = out };
            }
        }
        n as c_int
    })
}

unsafe extern "C" fn av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(av.cast(), FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if flags != 0 {
            return neg(FI_EBADFLAGS);
        }
        if count > 0 && fi_addr.is_null() {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&a.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(v)) = st.avs.get_mut(a.idx) else {
            return neg(FI_EINVAL);
        };
        for i in 0..count {
            // SAFETY: the caller's array of `count` fi_addr_t.
            let x = unsafe { *fi_addr.add(i) };
            match usize::try_from(x).ok().and_then(|x| v.addrs.get_mut(x)) {
                Some(slot @ Some(_)) => {
                    if let Some(b) = slot.take()
                        && v.index.get(&b) == Some(&x)
                    {
                        // Another entry with the same bytes becomes the source.
                        v.index.remove(&b);
                        let other = v.addrs.iter().position(|a| a.as_ref() == Some(&b));
                        if let Some(o) = other {
                            v.index.insert(b, o as u64);
                        }
                    }
                }
                _ => return neg(FI_EINVAL),
            }
        }
        0
    })
}

unsafe extern "C" fn av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard(|| {
        let Some(a) = (unsafe { obj::<Av>(av.cast(), FI_CLASS_AV) }) else {
            return neg(FI_EINVAL);
        };
        if addrlen.is_null() {
            return neg(FI_EINVAL);
        }
        let st = match lock(&a.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(v)) = st.avs.get(a.idx) else {
            return neg(FI_EINVAL);
        };
        let Some(Some(b)) = usize::try_from(fi_addr).ok().and_then(|x| v.addrs.get(x)) else {
            return neg(FI_ENOENT);
        };
        // SAFETY: the caller's buffer of *addrlen bytes.
        unsafe {
            let n = (*addrlen).min(ADDR_LEN);
            if !addr.is_null() {
                std::ptr::copy_nonoverlapping(b.as_ptr(), addr.cast::<u8>(), n);
            }
            *addrlen = ADDR_LEN;
        }
        0
    })
}

/// `fi_av_straddr`: `fi_addr_mrc://` and the address in hex, cut to `*len` bytes
/// (NUL included); `*len` becomes the whole length.
unsafe extern "C" fn av_straddr(
    _av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    guard(|| {
        if addr.is_null() || buf.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: one address of ADDR_LEN bytes; the caller's buffer of *len bytes.
        unsafe {
            let b = std::slice::from_raw_parts(addr.cast::<u8>(), ADDR_LEN);
            let mut s = String::from("fi_addr_mrc://");
            for x in b {
                s.push_str(&format!("{x:02x}"));
            }
            let cap = *len;
            if cap > 0 {
                let n = s.len().min(cap - 1);
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
            *len = s.len() + 1;
        }
        buf
    })
}

// ---------------------------------------------------------------------------------
// Completion queues

static CQ_FI_OPS: fi_ops = table!(fi_ops {
    close: cq_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static CQ_OPS: fi_ops_cq = table!(fi_ops_cq {
    read: cq_read,
    readfrom: cq_readfrom,
    readerr: cq_readerr,
    sread: cq_sread,
    sreadfrom: cq_sreadfrom,
    signal: s1,
    strerror: cq_strerror,
});

unsafe extern "C" fn cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(domain.cast(), FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if cq.is_null() {
            return neg(FI_EINVAL);
        }
        let mut format = FI_CQ_FORMAT_CONTEXT;
        let mut threshold = false;
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() } {
            format = match a.format {
                FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
                f @ (FI_CQ_FORMAT_CONTEXT | FI_CQ_FORMAT_MSG | FI_CQ_FORMAT_DATA
                | FI_CQ_FORMAT_TAGGED) => f,
                _ => return neg(FI_ENOSYS),
            };
            // fi_cq_sread progresses and sleeps in the endpoint's datapath (no file
            // descriptor of the CQ's own: FI_WAIT_FD, wait sets are not offered).
            if !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD) {
                return neg(FI_ENOSYS);
            }
            threshold = match a.wait_cond {
                FI_CQ_COND_NONE => false,
                FI_CQ_COND_THRESHOLD => true,
                _ => return neg(FI_ENOSYS),
            };
        }
        let mut st = match lock(&d.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let idx = push(
            &mut st.cqs,
            CqState {
                format,
                threshold,
                ok: VecDeque::new(),
                errs: VecDeque::new(),
            },
        );
        let c = Box::new(Cq {
            fid: fid_cq {
                fid: new_fid(FI_CLASS_CQ, context, &CQ_FI_OPS),
                ops: &CQ_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: d.st.clone(),
            idx,
            api: crate::FI_API_VERSION,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *cq = Box::into_raw(c).cast() };
        0
    })
}

unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(f, FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if let Ok(mut st) = lock(&c.st) {
            if st
                .eps
                .iter()
                .flatten()
                .any(|e| e.txcq == Some(c.idx) || e.rxcq == Some(c.idx))
            {
                return neg(FI_EBUSY);
            }
            st.cqs[c.idx] = None;
        }
        // SAFETY: one of our CQs, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Cq>()) });
        0
    })
}

/// Progresses every endpoint bound to CQ `idx`.
fn progress_cq(st: &mut State, idx: usize) {
    let State { eps, cqs, avs, .. } = st;
    for e in eps.iter_mut().flatten() {
        if e.txcq == Some(idx) || e.rxcq == Some(idx) {
            e.progress(cqs, avs);
        }
    }
}

/// Bytes of one entry of `format`.
fn entry_size(format: u32) -> usize {
    match format {
        FI_CQ_FORMAT_MSG => std::mem::size_of::<fi_cq_msg_entry>(),
        FI_CQ_FORMAT_DATA => std::mem::size_of::<fi_cq_data_entry>(),
        FI_CQ_FORMAT_TAGGED => std::mem::size_of::<fi_cq_tagged_entry>(),
        _ => std::mem::size_of::<fi_cq_entry>(),
    }
}

/// Writes `e` as entry `i` of `buf` in `format`.
unsafe fn write_entry(buf: *mut c_void, i: usize, format: u32, e: &Entry) {
    let t = fi_cq_tagged_entry {
        op_context: e.ctx as *mut c_void,
        flags: e.flags,
        len: e.len,
        buf: e.buf as *mut c_void,
        data: e.data,
        tag: e.tag,
    };
    // SAFETY: the caller's array of at least i + 1 entries of `format`; each format is a
    // prefix of fi_cq_tagged_entry.
    unsafe {
        let n = entry_size(format);
        std::ptr::copy_nonoverlapping(
            (&t as *const fi_cq_tagged_entry).cast::<u8>(),
            buf.cast::<u8>().add(i * n),
            n,
        );
    }
}

/// Reads up to `count` entries, and each one's source into `src` when it is not null;
/// `-FI_EAVAIL` while an error entry waits.
fn cq_take(
    st: &mut State,
    idx: usize,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    let Some(Some(c)) = st.cqs.get_mut(idx) else {
        return neg(FI_EINVAL);
    };
    if !c.errs.is_empty() {
        return neg(FI_EAVAIL);
    }
    let mut n = 0;
    while n < count {
        let Some(e) = c.ok.pop_front() else { break };
        // SAFETY: the caller's arrays of `count` entries and `count` addresses.
        unsafe {
            write_entry(buf, n, c.format, &e);
            if !src.is_null() {
                *src.add(n) = e.src.unwrap_or(FI_ADDR_NOTAVAIL);
            }
        }
        n += 1;
    }
    if n == 0 { neg(FI_EAGAIN) } else { n as isize }
}

unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    unsafe { cq_readfrom(cq, buf, count, std::ptr::null_mut()) }
}

/// `fi_cq_readfrom`: `fi_cq_read` and each entry's source (`FI_SOURCE`): the sender's AV
/// entry for a receive, `FI_ADDR_NOTAVAIL` for a sender the AV does not hold and for a send.
unsafe extern "C" fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(cq.cast(), FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if buf.is_null() && count > 0 {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&c.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        progress_cq(&mut st, c.idx);
        cq_take(&mut st, c.idx, buf, count, src)
    })
}

unsafe extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    unsafe { cq_sreadfrom(cq, buf, count, std::ptr::null_mut(), cond, timeout) }
}

/// Longest sleep of one `fi_cq_sread` pass in an endpoint's datapath, with the domain's
/// mutex held (other threads' calls wait at most this long).
const SREAD_SLEEP: Duration = Duration::from_millis(1);

/// `fi_cq_sreadfrom`: `fi_cq_sread` with each entry's source, as [`cq_readfrom`]. Waits
/// until an entry (an error entry: `-FI_EAVAIL`) is there, or with
/// `FI_CQ_COND_THRESHOLD` as many as `*cond` (a `size_t`; at most `count`), or `timeout`
/// milliseconds passed (`-FI_EAGAIN`, or the entries there are); a negative `timeout`
/// waits without limit. Between progress passes it sleeps in the datapath of the CQ's
/// endpoint when one endpoint is bound (until a datagram or the transport's next timer,
/// at most [`SREAD_SLEEP`]); with several it yields the CPU.
unsafe extern "C" fn cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(cq.cast(), FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if buf.is_null() && count > 0 {
            return neg(FI_EINVAL);
        }
        let until = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            {
                let mut st = match lock(&c.st) {
                    Ok(s) => s,
                    Err(e) => return neg(e),
                };
                progress_cq(&mut st, c.idx);
                let Some(Some(q)) = st.cqs.get(c.idx) else {
                    return neg(FI_EINVAL);
                };
                // SAFETY: with FI_CQ_COND_THRESHOLD, cond names a size_t (fi_cq(3)).
                let want = if q.threshold && !cond.is_null() {
                    unsafe { *cond.cast::<usize>() }.clamp(1, count.max(1))
                } else {
                    1
                };
                let expired = until.is_some_and(|u| Instant::now() >= u);
                if !q.errs.is_empty() || q.ok.len() >= want || (expired && !q.ok.is_empty()) {
                    return cq_take(&mut st, c.idx, buf, count, src);
                }
                if expired {
                    return neg(FI_EAGAIN);
                }
                let left =
                    until.map_or(SREAD_SLEEP, |u| u.saturating_duration_since(Instant::now()));
                let mut bound = st
                    .eps
                    .iter_mut()
                    .flatten()
                    .filter(|e| e.txcq == Some(c.idx) || e.rxcq == Some(c.idx));
                if let (Some(e), None) = (bound.next(), bound.next()) {
                    // One endpoint: sleep in its datapath (a datagram or a timer wakes it).
                    let _ = e.worker.wait(left.min(SREAD_SLEEP));
                    continue;
                }
            }
            std::thread::yield_now();
        }
    })
}

unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cq>(cq.cast(), FI_CLASS_CQ) }) else {
            return neg(FI_EINVAL);
        };
        if buf.is_null() {
            return neg(FI_EINVAL);
        }
        let mut st = match lock(&c.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        let Some(Some(q)) = st.cqs.get_mut(c.idx) else {
            return neg(FI_EINVAL);
        };
        let Some(e) = q.errs.pop_front() else {
            return neg(FI_EAGAIN);
        };
        // SAFETY: the caller's fi_cq_err_entry; err_data_size exists from API 1.5 on.
        unsafe {
            let b = &mut *buf;
            b.op_context = e.ctx as *mut c_void;
            b.flags = e.flags;
            b.len = e.len;
            b.buf = e.buf as *mut c_void;
            b.data = e.data;
            b.tag = e.tag;
            b.olen = e.olen;
            b.err = e.err;
            b.prov_errno = e.err;
            if c.api >= crate::fi_version(1, 5) {
                // The application's err_data buffer is left alone (none is given).
                b.err_data_size = 0;
            } else {
                b.err_data = std::ptr::null_mut();
            }
        }
        1
    })
}

unsafe extern "C" fn cq_strerror(
    _cq: *mut fid_cq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard(|| unsafe { strerror_into(buf, len) })
}

// ---------------------------------------------------------------------------------
// Endpoints

static EP_FI_OPS: fi_ops = table!(fi_ops {
    close: ep_close,
    bind: ep_bind,
    control: ep_control,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static EP_OPS: fi_ops_ep = table!(fi_ops_ep {
    cancel: ep_cancel,
    getopt: ep_getopt,
    setopt: ep_setopt,
    tx_ctx: s5,
    rx_ctx: s5,
    rx_size_left: ep_rx_size_left,
    tx_size_left: ep_tx_size_left,
});
static CM_OPS: fi_ops_cm = table!(fi_ops_cm {
    setname: s3,
    getname: ep_getname,
    getpeer: s3,
    connect: s4,
    listen: s1,
    accept: s3,
    reject: s4,
    shutdown: s2,
    join: s5,
});
static MSG_OPS: fi_ops_msg = table!(fi_ops_msg {
    recv: ep_recv,
    recvv: ep_recvv,
    recvmsg: ep_recvmsg,
    send: ep_send,
    sendv: ep_sendv,
    sendmsg: ep_sendmsg,
    inject: ep_inject,
    senddata: ep_senddata,
    injectdata: ep_injectdata,
});
// RMA: writes on mrc's WRITE / WRITE_WITH_IMM; reads are -FI_ENOSYS (the transport has
// no READ: docs/LIBFABRIC.md).
static RMA_OPS: fi_ops_rma = table!(fi_ops_rma {
    read: s8,
    readv: s8,
    readmsg: s3,
    write: ep_write,
    writev: ep_writev,
    writemsg: ep_writemsg,
    inject: ep_inject_write,
    writedata: ep_writedata,
    injectdata: ep_inject_writedata,
});
static TAGGED_OPS: fi_ops_tagged = table!(fi_ops_tagged {
    recv: ep_trecv,
    recvv: ep_trecvv,
    recvmsg: ep_trecvmsg,
    send: ep_tsend,
    sendv: ep_tsendv,
    sendmsg: ep_tsendmsg,
    inject: ep_tinject,
    senddata: ep_tsenddata,
    injectdata: ep_tinjectdata,
});
static ATOMIC_OPS: fi_ops_atomic = table!(fi_ops_atomic {
    write: s10,
    writev: s10,
    writemsg: s3,
    inject: s8,
    readwrite: s12,
    readwritev: s13,
    readwritemsg: s6,
    compwrite: s14,
    compwritev: s16,
    compwritemsg: s9,
    writevalid: s4,
    readwritevalid: s4,
    compwritevalid: s4,
});
static COLL_OPS: fi_ops_collective = table!(fi_ops_collective {
    barrier: s3,
    broadcast: s9,
    alltoall: s10,
    allreduce: s11,
    allgather: s10,
    reduce_scatter: s11,
    reduce: s12,
    scatter: s11,
    gather: s11,
    msg: s6,
    barrier2: s4,
});

unsafe extern "C" fn ep_open(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(domain.cast(), FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if ep.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's info, null or live.
        if let Some(i) = unsafe { info.as_ref() }
            && let Some(a) = unsafe { i.ep_attr.as_ref() }
            && !matches!(a.type_, FI_EP_UNSPEC | FI_EP_RDM)
        {
            return neg(FI_EINVAL);
        }
        // FI_DIRECTED_RECV is a primary capability: only an endpoint whose info asks
        // for it (or names no capability) matches a receive's source address.
        // SAFETY: the caller's info, null or live.
        let directed = match unsafe { info.as_ref() } {
            None => true,
            Some(i) => i.caps == 0 || i.caps & FI_DIRECTED_RECV != 0,
        };
        // The default op_flags (Open MPI asks FI_COMPLETION and binds its CQ with
        // FI_SELECTIVE_COMPLETION).
        // SAFETY: the caller's info and its attrs, null or live.
        let (tx_c, rx_c) = match unsafe { info.as_ref() } {
            None => (false, false),
            Some(i) => unsafe {
                let c = FI_COMPLETION as u64;
                (
                    i.tx_attr.as_ref().is_some_and(|t| t.op_flags & c != 0),
                    i.rx_attr.as_ref().is_some_and(|r| r.op_flags & c != 0),
                )
            },
        };
        // The source address fi_getinfo answered (or the application set): the
        // listener's host, port and secret.
        // SAFETY: the caller's info, null or live, and its src_addr of src_addrlen bytes.
        let src = match unsafe { info.as_ref() } {
            Some(i) if !i.src_addr.is_null() => {
                let b =
                    unsafe { std::slice::from_raw_parts(i.src_addr.cast::<u8>(), i.src_addrlen) };
                match source_addr(b) {
                    Some(a) => Some(a),
                    None => return neg(FI_EINVAL),
                }
            }
            _ => None,
        };
        let mut state = match EpState::open(directed, src) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        state.tx_op_completion = tx_c;
        state.rx_op_completion = rx_c;
        // SAFETY: the caller's info, null or live.
        state.rma_event = unsafe { info.as_ref() }.is_some_and(|i| i.caps & FI_RMA_EVENT != 0);
        let mut st = match lock(&d.st) {
            Ok(s) => s,
            Err(e) => return neg(e),
        };
        // The domain's regions peers may write into (registered with each QP the
        // endpoint accepts).
        for m in st.mrs.iter().flatten().filter(|m| m.remote_write) {
            let _ = state.add_target_mr(m.key, m.ptr, m.len, m.base);
        }
        let idx = push(&mut st.eps, state);
        if let Some(Some(s)) = st.eps.get_mut(idx) {
            s.defer_sends(Arc::downgrade(&d.st), idx);
        }
        let e = Box::new(Ep {
            fid: fid_ep {
                fid: new_fid(FI_CLASS_EP, context, &EP_FI_OPS),
                ops: &EP_OPS as *const _ as *mut _,
                cm: &CM_OPS as *const _ as *mut _,
                msg: &MSG_OPS as *const _ as *mut _,
                rma: &RMA_OPS as *const _ as *mut _,
                tagged: &TAGGED_OPS as *const _ as *mut _,
                atomic: &ATOMIC_OPS as *const _ as *mut _,
                collective: &COLL_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: d.st.clone(),
            idx,
        });
        // SAFETY: non-null out-pointer.
        unsafe { *ep = Box::into_raw(e).cast() };
        0
    })
}

unsafe extern "C" fn ep_open2(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return neg(FI_EBADFLAGS);
    }
    unsafe { ep_open(domain, info, ep, context) }
}

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(e) = (unsafe { obj::<Ep>(f, FI_CLASS_EP) }) else {
            return neg(FI_EINVAL);
        };
        let mut gone = lock(&e.st).ok().and_then(|mut st| {
            let State { eps, cqs, avs, .. } = &mut *st;
            // Sends the last pass deferred (a SACK) leave before the sockets close.
            if let Some(Some(s)) = eps.get_mut(e.idx)
                && s.worker.sends_deferred()
            {
                s.progress(cqs, avs);
            }
            eps.get_mut(e.idx).and_then(Option::take)
        });
        if let Some(f) = gone.as_mut().and_then(|s| s.flush.take()) {
            f.stop();
        }
        // The worker (its sockets and QPs) goes first, then the staging slots.
        drop(gone);
        // SAFETY: one of our endpoints, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Ep>()) });
        0
    })
}

/// What an endpoint did ([`ep_debug_counts`]), for tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpCounts {
    /// Its datapath's `sendmsg` calls (one per datagram here).
    pub sendmsg_calls: u64,
    /// Passes its flusher ran ([`FLUSH_BOUND`]).
    pub flush_passes: u64,
    /// Bytes copied into a peer's queue (sends and writes waiting for a staging slot).
    pub queued_copy_bytes: u64,
}

/// What endpoint `ep` did, for tests; `None` for what is not an open endpoint of this
/// provider.
///
/// # Safety
/// `ep` is null or points to readable memory of a `fid` (it is checked as one of the
/// provider's endpoints before use).
#[doc(hidden)]
pub unsafe fn ep_debug_counts(ep: *mut fid_ep) -> Option<EpCounts> {
    // SAFETY: the caller's pointer, checked as one of our endpoints (class and magic).
    let e = unsafe { obj::<Ep>(ep.cast(), FI_CLASS_EP) }?;
    let st = lock(&e.st).ok()?;
    let s = st.eps.get(e.idx)?.as_ref()?;
    Some(EpCounts {
        sendmsg_calls: s.worker.datapath().counters().sendmsg_calls,
        flush_passes: s.flush.as_ref().map_or(0, |f| f.passes),
        queued_copy_bytes: s.queued_copy_bytes,
    })
}

/// Runs `f` on endpoint `ep`'s state, the domain's CQs and AVs.
fn with_ep<R: Ret>(
    ep: *const fid,
    f: impl FnOnce(&mut EpState, &mut [Option<CqState>], &[Option<AvState>]) -> R,
) -> R {
    let Some(e) = (unsafe { obj::<Ep>(ep, FI_CLASS_EP) }) else {
        return neg(FI_EINVAL);
    };
    let mut st = match lock(&e.st) {
        Ok(s) => s,
        Err(x) => return neg(x),
    };
    let State { eps, cqs, avs, .. } = &mut *st;
    match eps.get_mut(e.idx).and_then(Option::as_mut) {
        Some(s) => f(s, cqs, avs),
        None => neg(FI_EINVAL),
    }
}

unsafe extern "C" fn ep_bind(ep: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard(|| {
        let Some(e) = (unsafe { obj::<Ep>(ep, FI_CLASS_EP) }) else {
            return neg(FI_EINVAL);
        };
        // SAFETY: the caller's fid, null or live.
        let Some(class) = (unsafe { bfid.as_ref() }).map(|b| b.fclass as u32) else {
            return neg(FI_EINVAL);
        };
        match class {
            FI_CLASS_AV => {
                let Some(a) = (unsafe { obj::<Av>(bfid, FI_CLASS_AV) }) else {
                    return neg(FI_EINVAL);
                };
                if !Arc::ptr_eq(&a.st, &e.st) {
                    return neg(FI_EINVAL);
                }
                let idx = a.idx;
                with_ep(ep, |s, _, _| {
                    if s.av.is_some() {
                        return neg(FI_EINVAL);
                    }
                    s.av = Some(idx);
                    0
                })
            }
            FI_CLASS_CQ => {
                let Some(c) = (unsafe { obj::<Cq>(bfid, FI_CLASS_CQ) }) else {
                    return neg(FI_EINVAL);
                };
                if !Arc::ptr_eq(&c.st, &e.st) {
                    return neg(FI_EINVAL);
                }
                let all = (FI_TRANSMIT | FI_RECV) as u64 | FI_SELECTIVE_COMPLETION;
                if flags & !all != 0 || flags & (FI_TRANSMIT | FI_RECV) as u64 == 0 {
                    return neg(FI_EBADFLAGS);
                }
                let idx = c.idx;
                with_ep(ep, |s, _, _| {
                    let sel = flags & FI_SELECTIVE_COMPLETION != 0;
                    if flags & FI_TRANSMIT as u64 != 0 {
                        s.txcq = Some(idx);
                        s.tx_selective = sel;
                    }
                    if flags & FI_RECV as u64 != 0 {
                        s.rxcq = Some(idx);
                        s.rx_selective = sel;
                    }
                    0
                })
            }
            // An RDM endpoint has no connection events: binding an EQ is accepted.
            FI_CLASS_EQ => match unsafe { obj::<Eq>(bfid, FI_CLASS_EQ) } {
                Some(_) => 0,
                None => neg(FI_EINVAL),
            },
            FI_CLASS_CNTR => {
                let Some(c) = (unsafe { obj::<Cntr>(bfid, FI_CLASS_CNTR) }) else {
                    return neg(FI_EINVAL);
                };
                if !Arc::ptr_eq(&c.st, &e.st) {
                    return neg(FI_EINVAL);
                }
                let all =
                    (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
                        as u64;
                if flags & !all != 0 || flags == 0 {
                    return neg(FI_EBADFLAGS);
                }
                let inner = c.inner.clone();
                with_ep(ep, |s, _, _| {
                    let set = |slot: &mut Option<Arc<CntrInner>>, bit: u32| {
                        if flags & bit as u64 != 0 {
                            *slot = Some(inner.clone());
                        }
                    };
                    set(&mut s.cntrs.send, FI_SEND);
                    set(&mut s.cntrs.recv, FI_RECV);
                    set(&mut s.cntrs.write, FI_WRITE);
                    set(&mut s.cntrs.read, FI_READ);
                    set(&mut s.cntrs.remote_write, FI_REMOTE_WRITE);
                    set(&mut s.cntrs.remote_read, FI_REMOTE_READ);
                    0
                })
            }
            _ => neg(FI_EINVAL),
        }
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard(|| match command as u32 {
        FI_ENABLE => with_ep(f, |s, _, _| {
            // Each direction needs a CQ or a counter.
            let tx = s.txcq.is_some() || s.cntrs.send.is_some() || s.cntrs.write.is_some();
            let rx = s.rxcq.is_some() || s.cntrs.recv.is_some();
            if s.av.is_none() || !tx || !rx {
                return neg(FI_ENOCQ);
            }
            s.enabled = true;
            0
        }),
        _ => neg(FI_ENOSYS),
    })
}

unsafe extern "C" fn ep_getopt(
    _f: *mut fid,
    _level: c_int,
    _optname: c_int,
    _optval: *mut c_void,
    _optlen: *mut usize,
) -> c_int {
    neg(FI_ENOPROTOOPT)
}

unsafe extern "C" fn ep_setopt(
    _f: *mut fid,
    _level: c_int,
    _optname: c_int,
    _optval: *const c_void,
    _optlen: usize,
) -> c_int {
    neg(FI_ENOPROTOOPT)
}

unsafe extern "C" fn ep_getname(f: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(|| {
        if addrlen.is_null() {
            return neg(FI_EINVAL);
        }
        with_ep(f, |s, _, _| {
            // SAFETY: the caller's buffer of *addrlen bytes.
            unsafe {
                let cap = *addrlen;
                *addrlen = ADDR_LEN;
                if cap < ADDR_LEN || addr.is_null() {
                    return neg(FI_ETOOSMALL);
                }
                std::ptr::copy_nonoverlapping(s.addr.as_ptr(), addr.cast::<u8>(), ADDR_LEN);
            }
            0
        })
    })
}

/// The caller's iovecs as (address, length) pairs; `Err` for too many or a null buffer
/// with a length.
unsafe fn iovs(iov: *const iovec, count: usize) -> Result<Vec<(usize, usize)>, u32> {
    if count > IOV_LIMIT || (count > 0 && iov.is_null()) {
        return Err(FI_EINVAL);
    }
    let mut v = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: the caller's array of `count` iovecs.
        let x = unsafe { &*iov.add(i) };
        if x.iov_base.is_null() && x.iov_len > 0 {
            return Err(FI_EINVAL);
        }
        v.push((x.iov_base as usize, x.iov_len));
    }
    Ok(v)
}

/// What a receive matches: untagged messages, or tagged ones whose tag equals `tag`
/// outside the `ignore` bits; from `src` (an AV entry, or `FI_ADDR_UNSPEC`).
#[derive(Clone, Copy, Debug)]
struct Match {
    tagged: bool,
    tag: u64,
    ignore: u64,
    src: u64,
}

impl Match {
    fn msg(src: u64) -> Match {
        Match {
            tagged: false,
            tag: 0,
            ignore: 0,
            src,
        }
    }

    fn tagged(src: u64, tag: u64, ignore: u64) -> Match {
        Match {
            tagged: true,
            tag,
            ignore,
            src,
        }
    }
}

fn post_recv(
    ep: *mut fid_ep,
    iov: Vec<(usize, usize)>,
    ctx: *mut c_void,
    flags: Option<u64>,
    m: Match,
    probe: Option<Probe>,
) -> isize {
    with_ep(ep.cast(), |s, cqs, avs| {
        let completion = match flags {
            None => !s.rx_selective || s.rx_op_completion,
            Some(f) => !s.rx_selective || f & FI_COMPLETION as u64 != 0,
        };
        // Without FI_DIRECTED_RECV the source is ignored; with it, it must be an entry
        // of the endpoint's AV (or FI_ADDR_UNSPEC).
        let src = if !s.directed {
            FI_ADDR_UNSPEC
        } else if m.src == FI_ADDR_UNSPEC {
            m.src
        } else {
            let known =
                s.av.and_then(|i| avs.get(i))
                    .and_then(Option::as_ref)
                    .and_then(|a| a.addrs.get(usize::try_from(m.src).ok()?))
                    .is_some_and(Option::is_some);
            if !known {
                return neg(FI_EINVAL);
            }
            m.src
        };
        let r = PostedRecv {
            iov,
            ctx: ctx as usize,
            completion,
            tagged: m.tagged,
            tag: m.tag,
            ignore: m.ignore,
            src,
        };
        // A peek looks at what arrived (a pass first); a receive waits for it, and its
        // post sends nothing, so it runs no pass: a system call less between a
        // completion and the reply, and the SACK the last pass left for the next call
        // goes with that reply (Flusher).
        if probe.is_some() {
            s.progress(cqs, avs);
        }
        let res = match probe {
            None => s.recv(r, cqs, avs),
            Some(p) => s.probe(r, p, cqs, avs),
        };
        match res {
            Ok(()) => 0,
            Err(e) => neg(e),
        }
    })
}

unsafe extern "C" fn ep_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| {
        if buf.is_null() && len > 0 {
            return neg(FI_EINVAL);
        }
        let iov = vec![(buf as usize, len)];
        post_recv(ep, iov, context, None, Match::msg(src_addr), None)
    })
}

unsafe extern "C" fn ep_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| match unsafe { iovs(iov, count) } {
        Ok(v) => post_recv(ep, v, context, None, Match::msg(src_addr), None),
        Err(e) => neg(e),
    })
}

/// `fi_recvmsg` / `fi_trecvmsg`: the flags checked (`FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`
/// for tagged receives only), then the receive or the probe posted.
unsafe fn recvmsg(
    ep: *mut fid_ep,
    iov: *const iovec,
    count: usize,
    context: *mut c_void,
    flags: u64,
    m: Match,
) -> isize {
    let mut ok = (FI_COMPLETION | FI_MORE | FI_REMOTE_CQ_DATA) as u64;
    if m.tagged {
        ok |= FI_PEEK as u64 | FI_CLAIM | FI_DISCARD;
    }
    if flags & !ok != 0 {
        return neg(FI_EBADFLAGS);
    }
    let (peek, claim, discard) = (
        flags & FI_PEEK as u64 != 0,
        flags & FI_CLAIM != 0,
        flags & FI_DISCARD != 0,
    );
    let probe = match (peek, claim, discard) {
        (false, false, false) => None,
        (true, claim, discard) if !(claim && discard) => Some(Probe::Peek { claim, discard }),
        (false, true, discard) => Some(Probe::Claim { discard }),
        _ => return neg(FI_EBADFLAGS),
    };
    // A peek and a discard take no buffer ("the input buffer(s) and length parameters
    // are ignored"), so they are not read.
    let v = if peek || discard {
        Vec::new()
    } else {
        match unsafe { iovs(iov, count) } {
            Ok(v) => v,
            Err(e) => return neg(e),
        }
    };
    post_recv(ep, v, context, Some(flags), m, probe)
}

unsafe extern "C" fn ep_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(|| {
        // SAFETY: the caller's fi_msg, null or live.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        let how = Match::msg(m.addr);
        unsafe { recvmsg(ep, m.msg_iov, m.iov_count, m.context, flags, how) }
    })
}

/// The byte slices of an iovec list given as (address, length) pairs; a zero length is
/// an empty slice whatever its address (libfabric lets a NULL base go with length 0).
///
/// # Safety
/// Each non-empty pair must name `length` readable bytes that stay valid and unchanged
/// for the returned slices' lifetime (the `fi_send`/`fi_write` contract: until the call
/// returns, since the provider copies).
unsafe fn iov_slices<'a>(iov: &[(usize, usize)]) -> Vec<&'a [u8]> {
    iov.iter()
        .map(|&(p, l)| {
            if l == 0 {
                &[][..]
            } else {
                // SAFETY: the caller's contract above.
                unsafe { std::slice::from_raw_parts(p as *const u8, l) }
            }
        })
        .collect()
}

fn post_send(
    ep: *mut fid_ep,
    iov: &[(usize, usize)],
    dest: fi_addr_t,
    ctx: *mut c_void,
    completion: Option<bool>,
    hdr: Hdr,
) -> isize {
    // SAFETY: the caller's buffers (the fi_send contract), read here, before the call
    // returns, except for a send with a completion longer than inject_size that waits
    // for a slot (EpState::send): its buffers are read when it leaves the queue, before
    // it completes.
    let slices = unsafe { iov_slices(iov) };
    with_ep(ep.cast(), |s, cqs, avs| {
        let completion = completion.unwrap_or(!s.tx_selective || s.tx_op_completion);
        let r = match s.send(avs, dest, hdr, &slices, iov, ctx as usize, completion) {
            Ok(()) => 0,
            Err(e) => neg(e),
        };
        // Send it now, and give the application's next call completions to find.
        s.progress(cqs, avs);
        r
    })
}

/// The header of an untagged message (`data`: remote CQ data, its low 4 bytes).
fn msg_hdr(data: Option<u64>) -> Hdr {
    Hdr {
        kind: KIND_MSG,
        data: data.map(|d| d as u32),
        tag: 0,
        large: false,
    }
}

/// The header of a tagged message.
fn tagged_hdr(tag: u64, data: Option<u64>) -> Hdr {
    Hdr {
        kind: KIND_TAGGED,
        data: data.map(|d| d as u32),
        tag,
        large: false,
    }
}

/// `fi_send`, `fi_senddata`, `fi_tsend`, `fi_tsenddata`: one buffer.
fn send_buf(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    context: *mut c_void,
    hdr: Hdr,
) -> isize {
    if buf.is_null() && len > 0 {
        return neg(FI_EINVAL);
    }
    post_send(ep, &[(buf as usize, len)], dest, context, None, hdr)
}

/// `fi_inject`, `fi_injectdata`, `fi_tinject`, `fi_tinjectdata`: no completion.
fn inject_buf(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t, hdr: Hdr) -> isize {
    if buf.is_null() && len > 0 {
        return neg(FI_EINVAL);
    }
    if len > INJECT_SIZE {
        return neg(FI_EMSGSIZE);
    }
    let iov = [(buf as usize, len)];
    post_send(ep, &iov, dest, std::ptr::null_mut(), Some(false), hdr)
}

/// `fi_sendmsg` / `fi_tsendmsg`: the flags checked, then the send posted.
#[allow(clippy::too_many_arguments)]
unsafe fn sendmsg(
    ep: *mut fid_ep,
    iov: *const iovec,
    count: usize,
    dest: fi_addr_t,
    context: *mut c_void,
    data: u64,
    flags: u64,
    mut hdr: Hdr,
) -> isize {
    let ok = (FI_COMPLETION
        | FI_MORE
        | FI_INJECT
        | FI_INJECT_COMPLETE
        | FI_TRANSMIT_COMPLETE
        | FI_DELIVERY_COMPLETE
        | FI_REMOTE_CQ_DATA) as u64;
    if flags & !ok != 0 {
        return neg(FI_EBADFLAGS);
    }
    let v = match unsafe { iovs(iov, count) } {
        Ok(v) => v,
        Err(e) => return neg(e),
    };
    if flags & FI_INJECT as u64 != 0 && v.iter().map(|x| x.1).sum::<usize>() > INJECT_SIZE {
        return neg(FI_EMSGSIZE);
    }
    if flags & FI_REMOTE_CQ_DATA as u64 != 0 {
        hdr.data = Some(data as u32);
    }
    // With FI_SELECTIVE_COMPLETION only FI_COMPLETION asks for one; otherwise
    // every sendmsg completes (FI_INJECT included).
    let sel = flags & FI_COMPLETION as u64 != 0;
    let completion = with_ep(
        ep.cast(),
        |s, _, _| {
            if s.tx_selective { sel as c_int } else { 1 }
        },
    );
    if completion < 0 {
        return completion as isize;
    }
    post_send(ep, &v, dest, context, Some(completion == 1), hdr)
}

unsafe extern "C" fn ep_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| send_buf(ep, buf, len, dest, context, msg_hdr(None)))
}

unsafe extern "C" fn ep_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| send_buf(ep, buf, len, dest, context, msg_hdr(Some(data))))
}

unsafe extern "C" fn ep_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    guard(|| match unsafe { iovs(iov, count) } {
        Ok(v) => post_send(ep, &v, dest, context, None, msg_hdr(None)),
        Err(e) => neg(e),
    })
}

unsafe extern "C" fn ep_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    guard(|| {
        // SAFETY: the caller's fi_msg, null or live.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        let h = msg_hdr(None);
        unsafe {
            sendmsg(
                ep,
                m.msg_iov,
                m.iov_count,
                m.addr,
                m.context,
                m.data,
                flags,
                h,
            )
        }
    })
}

unsafe extern "C" fn ep_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
) -> isize {
    guard(|| inject_buf(ep, buf, len, dest, msg_hdr(None)))
}

unsafe extern "C" fn ep_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    guard(|| inject_buf(ep, buf, len, dest, msg_hdr(Some(data))))
}

// Tagged messages.

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_trecv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src_addr: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    guard(|| {
        if buf.is_null() && len > 0 {
            return neg(FI_EINVAL);
        }
        let iov = vec![(buf as usize, len)];
        let m = Match::tagged(src_addr, tag, ignore);
        post_recv(ep, iov, context, None, m, None)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_trecvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    guard(|| match unsafe { iovs(iov, count) } {
        Ok(v) => {
            let m = Match::tagged(src_addr, tag, ignore);
            post_recv(ep, v, context, None, m, None)
        }
        Err(e) => neg(e),
    })
}

unsafe extern "C" fn ep_trecvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    guard(|| {
        // SAFETY: the caller's fi_msg_tagged, null or live.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        let how = Match::tagged(m.addr, m.tag, m.ignore);
        unsafe { recvmsg(ep, m.msg_iov, m.iov_count, m.context, flags, how) }
    })
}

unsafe extern "C" fn ep_tsend(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    guard(|| send_buf(ep, buf, len, dest, context, tagged_hdr(tag, None)))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_tsenddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    guard(|| send_buf(ep, buf, len, dest, context, tagged_hdr(tag, Some(data))))
}

unsafe extern "C" fn ep_tsendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    guard(|| match unsafe { iovs(iov, count) } {
        Ok(v) => post_send(ep, &v, dest, context, None, tagged_hdr(tag, None)),
        Err(e) => neg(e),
    })
}

unsafe extern "C" fn ep_tsendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    guard(|| {
        // SAFETY: the caller's fi_msg_tagged, null or live.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        let h = tagged_hdr(m.tag, None);
        unsafe {
            sendmsg(
                ep,
                m.msg_iov,
                m.iov_count,
                m.addr,
                m.context,
                m.data,
                flags,
                h,
            )
        }
    })
}

unsafe extern "C" fn ep_tinject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    guard(|| inject_buf(ep, buf, len, dest, tagged_hdr(tag, None)))
}

unsafe extern "C" fn ep_tinjectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    guard(|| inject_buf(ep, buf, len, dest, tagged_hdr(tag, Some(data))))
}

/// `fi_cancel`: a posted receive with this context completes with an `FI_ECANCELED`
/// error entry; `-FI_ENOENT` when none is posted (it completed, or never was).
unsafe extern "C" fn ep_cancel(f: fid_t, context: *mut c_void) -> isize {
    guard(|| {
        if context.is_null() {
            return neg(FI_EINVAL);
        }
        with_ep(f, |s, cqs, _| match s.cancel(context as usize, cqs) {
            Ok(()) => 0,
            Err(e) => neg(e),
        })
    })
}

/// `fi_rx_size_left`: receives that can still be posted.
unsafe extern "C" fn ep_rx_size_left(ep: *mut fid_ep) -> isize {
    guard(|| {
        with_ep(ep.cast(), |s, _, _| {
            if !s.enabled {
                return neg(FI_EOPBADSTATE);
            }
            QUEUE_SIZE.saturating_sub(s.recvs.len() + s.trecvs.len()) as isize
        })
    })
}

/// `fi_tx_size_left`: sends that can still be posted.
unsafe extern "C" fn ep_tx_size_left(ep: *mut fid_ep) -> isize {
    guard(|| {
        with_ep(ep.cast(), |s, _, _| {
            if !s.enabled {
                return neg(FI_EOPBADSTATE);
            }
            QUEUE_SIZE.saturating_sub(s.tx_outstanding) as isize
        })
    })
}

// ---------------------------------------------------------------------------------
// RMA writes

/// Posts a write of `iov` to `dest` at (`addr`, `key`) with remote CQ data `data`;
/// `completion` `None`: the endpoint's default. A key wider than the transport's 32-bit
/// rkey names no region of this provider: the write completes at once with an
/// `FI_EACCES` error entry (nothing leaves).
#[allow(clippy::too_many_arguments)]
fn post_write(
    ep: *mut fid_ep,
    iov: &[(usize, usize)],
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    data: Option<u64>,
    ctx: *mut c_void,
    completion: Option<bool>,
) -> isize {
    // SAFETY: the caller's buffers (the fi_write contract), read here, before the call
    // returns: the provider copies every write.
    let slices = unsafe { iov_slices(iov) };
    with_ep(ep.cast(), |s, cqs, avs| {
        let completion = completion.unwrap_or(!s.tx_selective || s.tx_op_completion);
        let len: usize = iov.iter().map(|x| x.1).sum();
        let r = match u32::try_from(key) {
            Ok(key) => {
                let to = RmaTarget {
                    addr,
                    key,
                    imm: data.map(|d| d as u32),
                };
                s.write(avs, dest, &slices, to, ctx as usize, completion)
            }
            Err(_) if !s.enabled => Err(FI_EOPBADSTATE),
            Err(_) if len > FRAGMENT_SIZE => Err(FI_EMSGSIZE),
            Err(_) => {
                s.cntrs.count(FI_WRITE as u64, true);
                let e = Entry {
                    ctx: ctx as usize,
                    flags: (FI_WRITE | FI_RMA) as u64,
                    len,
                    err: FI_EACCES as c_int,
                    ..Entry::default()
                };
                cq_push(cqs, s.txcq, e);
                Ok(())
            }
        };
        s.progress(cqs, avs);
        match r {
            Ok(()) => 0,
            Err(e) => neg(e),
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard(|| {
        if buf.is_null() && len > 0 {
            return neg(FI_EINVAL);
        }
        let iov = [(buf as usize, len)];
        post_write(ep, &iov, dest, addr, key, None, context, None)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard(|| match unsafe { iovs(iov, count) } {
        Ok(v) => post_write(ep, &v, dest, addr, key, None, context, None),
        Err(e) => neg(e),
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    guard(|| {
        if buf.is_null() && len > 0 {
            return neg(FI_EINVAL);
        }
        let iov = [(buf as usize, len)];
        post_write(ep, &iov, dest, addr, key, Some(data), context, None)
    })
}

/// `fi_inject_write` / `fi_inject_writedata`: at most `inject_size` bytes, no completion.
fn inject_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    data: Option<u64>,
) -> isize {
    if buf.is_null() && len > 0 {
        return neg(FI_EINVAL);
    }
    if len > INJECT_SIZE {
        return neg(FI_EMSGSIZE);
    }
    let iov = [(buf as usize, len)];
    post_write(
        ep,
        &iov,
        dest,
        addr,
        key,
        data,
        std::ptr::null_mut(),
        Some(false),
    )
}

unsafe extern "C" fn ep_inject_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    guard(|| inject_write(ep, buf, len, dest, addr, key, None))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ep_inject_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    guard(|| inject_write(ep, buf, len, dest, addr, key, Some(data)))
}

/// `fi_writemsg`: the `fi_sendmsg` flags; one RMA iovec (`rma_iov_limit`), as long as
/// the local iovecs together.
unsafe extern "C" fn ep_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    guard(|| {
        // SAFETY: the caller's fi_msg_rma, null or live.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return neg(FI_EINVAL);
        };
        let ok = (FI_COMPLETION
            | FI_MORE
            | FI_INJECT
            | FI_INJECT_COMPLETE
            | FI_TRANSMIT_COMPLETE
            | FI_DELIVERY_COMPLETE
            | FI_REMOTE_CQ_DATA) as u64;
        if flags & !ok != 0 {
            return neg(FI_EBADFLAGS);
        }
        let v = match unsafe { iovs(m.msg_iov, m.iov_count) } {
            Ok(v) => v,
            Err(e) => return neg(e),
        };
        if m.rma_iov_count != 1 || m.rma_iov.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: one fi_rma_iov (checked non-null).
        let r = unsafe { &*m.rma_iov };
        let len: usize = v.iter().map(|x| x.1).sum();
        if r.len != len {
            return neg(FI_EINVAL);
        }
        if flags & FI_INJECT as u64 != 0 && len > INJECT_SIZE {
            return neg(FI_EMSGSIZE);
        }
        let data = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        let sel = flags & FI_COMPLETION as u64 != 0;
        let completion = with_ep(
            ep.cast(),
            |s, _, _| {
                if s.tx_selective { sel as c_int } else { 1 }
            },
        );
        if completion < 0 {
            return completion as isize;
        }
        let c = Some(completion == 1);
        post_write(ep, &v, m.addr, r.addr, r.key, data, m.context, c)
    })
}

// ---------------------------------------------------------------------------------
// Counters: completed operations of the endpoints bound to them (FI_CNTR_EVENTS_COMP);
// reading or waiting progresses those endpoints (manual progress).

#[repr(C)]
struct Cntr {
    fid: fid_cntr,
    magic: u64,
    st: Shared,
    inner: Arc<CntrInner>,
}

static CNTR_FI_OPS: fi_ops = table!(fi_ops {
    close: cntr_close,
    bind: s3,
    control: s3,
    ops_open: s5,
    tostr: s3,
    ops_set: s5,
});
static CNTR_OPS: fi_ops_cntr = table!(fi_ops_cntr {
    read: cntr_read,
    readerr: cntr_readerr,
    add: cntr_add,
    set: cntr_set,
    wait: cntr_wait,
    adderr: cntr_adderr,
    seterr: cntr_seterr,
});

/// `fi_cntr_open`: events `FI_CNTR_EVENTS_COMP`, wait object none, unspecified or
/// yield (`fi_cntr_wait` progresses and yields the CPU between passes), flags 0.
unsafe extern "C" fn cntr_open(
    domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    cntr: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(d) = (unsafe { obj::<Domain>(domain.cast(), FI_CLASS_DOMAIN) }) else {
            return neg(FI_EINVAL);
        };
        if cntr.is_null() {
            return neg(FI_EINVAL);
        }
        // SAFETY: the caller's attr, null or live.
        if let Some(a) = unsafe { attr.as_ref() } {
            if a.events != FI_CNTR_EVENTS_COMP || a.flags != 0 {
                return neg(FI_ENOSYS);
            }
            if !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD) {
                return neg(FI_ENOSYS);
            }
        }
        let c = Box::new(Cntr {
            fid: fid_cntr {
                fid: new_fid(FI_CLASS_CNTR, context, &CNTR_FI_OPS),
                ops: &CNTR_OPS as *const _ as *mut _,
            },
            magic: MAGIC,
            st: d.st.clone(),
            inner: Arc::default(),
        });
        // SAFETY: non-null out-pointer.
        unsafe { *cntr = Box::into_raw(c).cast() };
        0
    })
}

unsafe extern "C" fn cntr_close(f: *mut fid) -> c_int {
    guard(|| {
        let Some(c) = (unsafe { obj::<Cntr>(f, FI_CLASS_CNTR) }) else {
            return neg(FI_EINVAL);
        };
        if let Ok(st) = lock(&c.st)
            && st.eps.iter().flatten().any(|e| e.cntrs.holds(&c.inner))
        {
            return neg(FI_EBUSY);
        }
        // SAFETY: one of our counters, not used after close.
        drop(unsafe { Box::from_raw(f.cast::<Cntr>()) });
        0
    })
}

/// Progresses every endpoint bound to counter `c`; then runs `f` on its values.
fn with_cntr<R: Ret>(cntr: *mut fid_cntr, f: impl FnOnce(&CntrInner) -> R) -> R {
    let Some(c) = (unsafe { obj::<Cntr>(cntr.cast(), FI_CLASS_CNTR) }) else {
        return neg(FI_EINVAL);
    };
    if let Ok(mut st) = lock(&c.st) {
        let State { eps, cqs, avs, .. } = &mut *st;
        for e in eps.iter_mut().flatten() {
            if e.cntrs.holds(&c.inner) {
                e.progress(cqs, avs);
            }
        }
    }
    f(&c.inner)
}

unsafe extern "C" fn cntr_read(cntr: *mut fid_cntr) -> u64 {
    guard(|| with_cntr(cntr, |c| c.value.load(Ordering::Acquire)))
}

unsafe extern "C" fn cntr_readerr(cntr: *mut fid_cntr) -> u64 {
    guard(|| with_cntr(cntr, |c| c.err.load(Ordering::Acquire)))
}

/// Runs `f` on counter `cntr`'s values without progress.
fn on_cntr(cntr: *mut fid_cntr, f: impl FnOnce(&CntrInner)) -> c_int {
    match unsafe { obj::<Cntr>(cntr.cast(), FI_CLASS_CNTR) } {
        Some(c) => {
            f(&c.inner);
            0
        }
        None => neg(FI_EINVAL),
    }
}

unsafe extern "C" fn cntr_add(cntr: *mut fid_cntr, value: u64) -> c_int {
    guard(|| {
        on_cntr(cntr, |c| {
            c.value.fetch_add(value, Ordering::AcqRel);
        })
    })
}

unsafe extern "C" fn cntr_set(cntr: *mut fid_cntr, value: u64) -> c_int {
    guard(|| on_cntr(cntr, |c| c.value.store(value, Ordering::Release)))
}

unsafe extern "C" fn cntr_adderr(cntr: *mut fid_cntr, value: u64) -> c_int {
    guard(|| {
        on_cntr(cntr, |c| {
            c.err.fetch_add(value, Ordering::AcqRel);
        })
    })
}

unsafe extern "C" fn cntr_seterr(cntr: *mut fid_cntr, value: u64) -> c_int {
    guard(|| on_cntr(cntr, |c| c.err.store(value, Ordering::Release)))
}

/// `fi_cntr_wait`: progresses the bound endpoints, yielding the CPU between passes,
/// until the counter reaches `threshold` (0), an operation fails meanwhile (its error
/// count grows: `-FI_EAVAIL`) or `timeout` milliseconds pass (`-FI_ETIMEDOUT`; a
/// negative `timeout` waits without limit).
unsafe extern "C" fn cntr_wait(cntr: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    guard(|| {
        let until = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        let err0 = match unsafe { obj::<Cntr>(cntr.cast(), FI_CLASS_CNTR) } {
            Some(c) => c.inner.err.load(Ordering::Acquire),
            None => return neg(FI_EINVAL),
        };
        loop {
            let r = with_cntr(cntr, |c| {
                if c.value.load(Ordering::Acquire) >= threshold {
                    0
                } else if c.err.load(Ordering::Acquire) != err0 {
                    neg(FI_EAVAIL)
                } else {
                    1
                }
            });
            if r != 1 {
                return r;
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return neg(FI_ETIMEDOUT);
            }
            std::thread::yield_now();
        }
    })
}

/// What the stderr lines add after an `FI_E*` error number: the words for
/// `FI_ECONNREFUSED` (a set-up that failed) and `FI_EADDRNOTAVAIL` (a peer on another
/// number of planes), nothing for the others.
fn refused_why(err: c_int) -> &'static str {
    if err == FI_ECONNREFUSED as c_int {
        " (FI_ECONNREFUSED: the peer could not be reached)"
    } else if err == FI_EADDRNOTAVAIL as c_int {
        " (FI_EADDRNOTAVAIL: the peer has another number of planes)"
    } else {
        ""
    }
}

/// The positive `FI_E*` code of a set-up that could not start or failed: a peer that
/// does not fit (another number of planes: [`EngineError::Incompatible`])
/// `FI_EADDRNOTAVAIL`, anything else `FI_ECONNREFUSED` (the peer could not be reached).
fn setup_error_code(e: &EngineError) -> u32 {
    match e {
        EngineError::Incompatible(_) => FI_EADDRNOTAVAIL,
        _ => FI_ECONNREFUSED,
    }
}

/// The stderr line of a set-up to `h` that could not start (`e`, answered with `-err`).
fn cannot_start_line(h: &ConnHandle, e: &EngineError, err: u32) -> String {
    format!(
        "the connection to {} (a peer on {} plane(s)) cannot start: {e}: every send, inject or write to it returns -{err}{} (said once per endpoint)",
        h.addr(),
        h.planes(),
        refused_why(err as c_int)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer on another number of planes is `FI_EADDRNOTAVAIL`, and the line says so.
    #[test]
    fn a_peer_on_another_number_of_planes_is_refused_with_its_reason() {
        let h = ConnHandle::new(
            "[fd00::2]:4000".parse().unwrap(),
            [1; SECRET_BYTES],
            LISTEN_OPTIONS,
        );
        let e = EngineError::Incompatible(
            "this end sends on 2 plane(s) and the peer has 1: give both ends one address per plane, as many (mrc-perf --bind A,B)".into(),
        );
        let err = setup_error_code(&e);
        assert_eq!(err, FI_EADDRNOTAVAIL);
        assert_eq!(
            setup_error_code(&EngineError::Refused("no route".into())),
            FI_ECONNREFUSED
        );
        assert_eq!(
            cannot_start_line(&h, &e, err),
            format!(
                "the connection to [fd00::2]:4000 (a peer on 1 plane(s)) cannot start: {e}: every send, inject or write to it returns -{FI_EADDRNOTAVAIL} (FI_EADDRNOTAVAIL: the peer has another number of planes) (said once per endpoint)"
            )
        );
    }
}
