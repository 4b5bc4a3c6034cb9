//! The one place `mrc-perf mpi` talks to the engine (`mrc_fabric::engine`): one
//! [`Context`] per rank (one engine thread, one UDP receive socket) and one [`Qp`] per
//! peer it exchanges data with, each with a source and a destination region.
//!
//! Sockets per rank: the context's receive socket plus one socket per group of
//! `--burst-size` EVs (`ceil(--paths / --burst-size)`), shared by all the rank's QPs
//! (QPs whose sockets carry different SRHs, `--srv6` towards different spines, need
//! sockets of their own): [`RankConn::sockets`] counts them.

use super::handles::{Handle, HandleAuth};
use crate::perf::opts::TestParams;
use mrc_fabric::engine::bootstrap::RemoteMr;
use mrc_fabric::engine::{Context, EngineStats, Qp, QpStats, VerifySpec};
use mrc_fabric::udp::UdpConfig;
use mrc_transport::completion::{Completion, WcStatus};
use mrc_transport::region::MrKey;
use mrc_transport::{Access, Sge};
use std::net::{IpAddr, SocketAddr};

/// wr_id of a stream's end marker (a zero-length SEND whose immediate is the stream's
/// message count).
pub const MARKER_WR_ID: u64 = u64::MAX;
/// wr_id of the connection probe (a zero-length SEND, immediate [`PROBE_IMM`]).
pub const PROBE_WR_ID: u64 = u64::MAX - 1;
/// Immediate of the connection probe.
pub const PROBE_IMM: u32 = 0x5052_4F42;

/// This rank's QP with one peer.
#[derive(Debug)]
pub struct PeerQp {
    /// The peer's rank.
    pub peer: u32,
    /// The QP.
    pub qp: Qp,
    /// What this rank sends from.
    pub src: MrKey,
    /// Where the peer writes.
    pub dst: MrKey,
    /// The peer's destination region, once connected.
    pub remote: Option<RemoteMr>,
    /// The peer's UDP address, once connected.
    pub peer_udp: Option<SocketAddr>,
    /// Receives posted so far (wr_ids `0..`).
    pub recvs_posted: u64,
    /// With `--psk-file`: this QP's setup nonce (OS CSPRNG), sent in its handle.
    pub nonce: Option<[u8; 32]>,
}

/// The pre-shared key, never printed (`Debug` says only its length).
struct Psk(Vec<u8>);

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Psk({} bytes)", self.0.len())
    }
}

/// A rank's engine and QPs.
#[derive(Debug)]
pub struct RankConn {
    /// The engine.
    pub ctx: Context,
    /// One per peer, in the order of [`RankConn::add_qp`].
    pub qps: Vec<PeerQp>,
    /// The address peers send to.
    pub advertised: SocketAddr,
    /// The pre-shared key of `--psk-file`: every QP's packets are authenticated under
    /// keys derived from it and both ends' nonces.
    psk: Option<Psk>,
    /// This rank (the lower rank of a pair is its initiator in the key derivation).
    rank: u32,
}

/// Region size of each QP's two regions for the streams of `p`, bytes.
pub fn stream_region_bytes(p: &TestParams) -> u64 {
    p.region_size
}

impl RankConn {
    /// Opens the engine on `binds` (port 0): one address, or one per plane (plane 0
    /// first; the peers are sent plane 0's and learn the others from the handles), no QPs
    /// yet.
    ///
    /// # Errors
    /// The engine's setup error, as text.
    pub fn open(
        p: &TestParams,
        binds: &[IpAddr],
        advertise: Option<IpAddr>,
        rank: u32,
        psk: Option<Vec<u8>>,
    ) -> Result<RankConn, String> {
        let ecfg = crate::perf::run::engine_config(p);
        let bind = *binds.first().ok_or("no address to bind")?;
        let udp = UdpConfig {
            plane_ips: if binds.len() > 1 {
                binds.to_vec()
            } else {
                Vec::new()
            },
            ..UdpConfig::bind(SocketAddr::new(bind, 0))
        };
        let ctx = Context::new(udp, ecfg).map_err(|e| {
            let l: Vec<String> = binds.iter().map(|b| b.to_string()).collect();
            format!("cannot open the UDP datapath on {}: {e}", l.join(","))
        })?;
        let mut advertised = ctx.udp_addr();
        if let Some(a) = advertise {
            advertised.set_ip(a);
        }
        Ok(RankConn {
            ctx,
            advertised,
            qps: Vec::new(),
            psk: psk.map(Psk),
            rank,
        })
    }

    /// Adds a QP for `peer` with the parameters `p` (its steering is this peer's) and two
    /// regions of `region_bytes`.
    ///
    /// # Errors
    /// The engine's refusal, as text.
    pub fn add_qp(&mut self, p: &TestParams, peer: u32, region_bytes: u64) -> Result<(), String> {
        let region = usize::try_from(region_bytes).map_err(|_| "region too large".to_string())?;
        let qp = self
            .ctx
            .create_qp(crate::perf::run::qp_config(p)?)
            .map_err(|e| format!("QP for rank {peer}: {e}"))?;
        let src = qp
            .reg_mr(region, Access::LOCAL_WRITE)
            .map_err(|e| format!("register {region} bytes: {e}"))?;
        let dst = qp
            .reg_mr(region, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .map_err(|e| format!("register {region} bytes: {e}"))?;
        let nonce = match self.psk {
            Some(_) => {
                let mut n = [0u8; 32];
                mrc_fabric::engine::source::random_bytes(&mut n)?;
                Some(n)
            }
            None => None,
        };
        self.qps.push(PeerQp {
            peer,
            qp,
            src,
            dst,
            remote: None,
            peer_udp: None,
            recvs_posted: 0,
            nonce,
        });
        Ok(())
    }

    /// UDP sockets this rank holds: the receive socket and the EV sockets its engine
    /// reports ([`EngineStats::ev_sockets`], shared by all its QPs); 1 before any QP.
    pub fn sockets(&self) -> u32 {
        let ev = self
            .qps
            .first()
            .and_then(|q| q.qp.stats().ok())
            .map_or(0, |(_, e)| e.ev_sockets);
        1 + u32::try_from(ev).unwrap_or(u32::MAX - 1)
    }

    /// Index in [`RankConn::qps`] of the QP with `peer`.
    pub fn index(&self, peer: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.peer == peer)
    }

    /// The handle of the QP at `i`, for its peer.
    pub fn handle(&self, i: usize) -> Handle {
        let mut info = self.qps[i].qp.local_info();
        info.regions.retain(|r| r.rkey == self.qps[i].dst.rkey);
        info.udp_port = self.advertised.port();
        let auth = match (&self.psk, self.qps[i].nonce) {
            (Some(Psk(psk)), Some(nonce)) => HandleAuth::check_of(psk, &nonce)
                .ok()
                .map(|check| HandleAuth { nonce, check }),
            _ => None,
        };
        Handle {
            info,
            udp: self.advertised,
            auth,
        }
    }

    /// With `--psk-file`, turns authentication on for the QP at `i` before it connects to
    /// the peer's handle `h`: the peer must authenticate too, with the same PSK (its key
    /// check), and the pair's keys come from the PSK and both nonces, the lower rank's
    /// first (as the initiator's in the TCP bootstrap).
    fn authenticate(&self, i: usize, h: &Handle) -> Result<(), String> {
        let q = &self.qps[i];
        match (&self.psk, q.nonce, &h.auth) {
            (None, _, None) => Ok(()),
            (None, _, Some(_)) => Err(format!(
                "rank {} authenticates its packets (--psk-file) and this rank does not",
                q.peer
            )),
            (Some(_), _, None) => Err(format!(
                "rank {} does not authenticate its packets (no --psk-file) and this rank does",
                q.peer
            )),
            (Some(_), None, Some(_)) => Err("no nonce for an authenticated QP".into()),
            (Some(Psk(psk)), Some(mine), Some(theirs)) => {
                if HandleAuth::check_of(psk, &theirs.nonce)? != theirs.check {
                    return Err(format!(
                        "rank {}'s pre-shared key differs (--psk-file)",
                        q.peer
                    ));
                }
                let initiator = self.rank < q.peer;
                let (ni, nr) = if initiator {
                    (&mine, &theirs.nonce)
                } else {
                    (&theirs.nonce, &mine)
                };
                let keys = mrc_transport::auth::AuthKeys::derive(psk, ni, nr, initiator)
                    .map_err(|e| e.to_string())?;
                q.qp.set_auth(keys).map_err(|e| e.to_string())
            }
        }
    }

    /// Whether this rank's packets are authenticated (`--psk-file`).
    pub fn authenticated(&self) -> bool {
        self.psk.is_some()
    }

    /// Connects the QP at `i` to the peer's handle; returns its EV sockets' source ports.
    ///
    /// # Errors
    /// The engine's refusal, or a handle without exactly one region.
    pub fn connect(&mut self, i: usize, h: &Handle) -> Result<Vec<u16>, String> {
        if h.info.regions.len() != 1 {
            return Err(format!("{} regions offered", h.info.regions.len()));
        }
        self.authenticate(i, h)?;
        let q = &mut self.qps[i];
        let ports = q.qp.connect(&h.info, h.udp).map_err(|e| e.to_string())?;
        q.remote = Some(h.info.regions[0]);
        q.peer_udp = Some(h.udp);
        Ok(ports)
    }

    /// Accepts datagrams only from these source ports of the peer of QP `i`.
    ///
    /// # Errors
    /// The engine's refusal.
    pub fn set_peer_ports(&self, i: usize, ports: &[u16]) -> Result<(), String> {
        self.qps[i]
            .qp
            .set_peer_source_ports(ports)
            .map_err(|e| e.to_string())
    }

    /// Checks every message written into QP `i`'s destination (slots of `slot_bytes`)
    /// against the `--verify` pattern of `seed`.
    ///
    /// # Errors
    /// The engine stopped.
    pub fn set_verify(&self, i: usize, slot_bytes: u64, seed: u64) -> Result<(), String> {
        let q = &self.qps[i];
        q.qp.set_verify(VerifySpec {
            lkey: q.dst.lkey,
            slot_bytes,
            slots: q.dst.len / slot_bytes,
            seed,
        })
        .map_err(|e| e.to_string())
    }

    /// Posts `n` more zero-length receives on QP `i`.
    ///
    /// # Errors
    /// The engine's refusal.
    pub fn post_recvs(&mut self, i: usize, n: u64) -> Result<(), String> {
        let q = &mut self.qps[i];
        for _ in 0..n {
            let sge = Sge {
                lkey: q.dst.lkey,
                addr: q.dst.addr,
                len: 0,
            };
            q.qp.post_recv(q.recvs_posted, sge)
                .map_err(|e| format!("post_recv: {e}"))?;
            q.recvs_posted += 1;
        }
        Ok(())
    }

    /// Fills `len` bytes at `off` of QP `i`'s source with the pattern of message `msg`.
    ///
    /// # Errors
    /// The engine stopped.
    pub fn fill(&self, i: usize, off: u64, len: u64, seed: u64, msg: u64) -> Result<(), String> {
        let q = &self.qps[i];
        q.qp.fill_pattern(q.src.lkey, off, len as usize, seed, msg)
            .map_err(|e| e.to_string())
    }

    /// Copies `data` into QP `i`'s source at `off`.
    ///
    /// # Errors
    /// The engine's refusal.
    pub fn write_src(&self, i: usize, off: u64, data: &[u8]) -> Result<(), String> {
        let q = &self.qps[i];
        q.qp.write_mr(q.src.lkey, off, data)
            .map_err(|e| e.to_string())
    }

    /// Copies `len` bytes of QP `i`'s destination from `off`.
    ///
    /// # Errors
    /// The engine's refusal.
    pub fn read_dst(&self, i: usize, off: u64, len: usize) -> Result<Vec<u8>, String> {
        let q = &self.qps[i];
        q.qp.read_mr(q.dst.lkey, off, len)
            .map_err(|e| e.to_string())
    }

    /// WRITE_WITH_IMM of `len` bytes from `off` of QP `i`'s source to `off` of the peer's
    /// destination.
    ///
    /// # Errors
    /// Not connected, or the engine's refusal.
    pub fn write(&self, i: usize, wr_id: u64, off: u64, len: u64, imm: u32) -> Result<(), String> {
        let q = &self.qps[i];
        let remote = q.remote.ok_or("not connected")?;
        let sge = Sge {
            lkey: q.src.lkey,
            addr: q.src.addr + off,
            len: len as u32,
        };
        q.qp.post_write_with_imm(wr_id, sge, remote.addr + off, remote.rkey, imm)
            .map_err(|e| format!("post to rank {}: {e}", q.peer))
    }

    /// A zero-length SEND with immediate `imm` on QP `i`.
    ///
    /// # Errors
    /// The engine's refusal.
    pub fn send_imm(&self, i: usize, wr_id: u64, imm: u32) -> Result<(), String> {
        let q = &self.qps[i];
        let sge = Sge {
            lkey: q.src.lkey,
            addr: q.src.addr,
            len: 0,
        };
        q.qp.post_send(wr_id, sge, Some(imm))
            .map_err(|e| format!("send to rank {}: {e}", q.peer))
    }

    /// Moves QP `i`'s send completions into `out` (up to 4096).
    pub fn poll_send(&self, i: usize, out: &mut Vec<Completion>) -> usize {
        self.qps[i].qp.poll_send_cq(out, 4096)
    }

    /// Moves QP `i`'s receive completions into `out` (up to 4096).
    pub fn poll_recv(&self, i: usize, out: &mut Vec<Completion>) -> usize {
        self.qps[i].qp.poll_recv_cq(out, 4096)
    }

    /// A failed completion of QP `i` as an error naming the peer and, after RTO expiries,
    /// why the transport gave up.
    ///
    /// # Errors
    /// When `c` failed.
    pub fn check(&self, i: usize, c: &Completion) -> Result<(), String> {
        if c.status == WcStatus::Success {
            return Ok(());
        }
        let q = &self.qps[i];
        let why =
            q.qp.stats()
                .ok()
                .and_then(|(s, _)| s.give_up.map(|g| format!(" ({g})")))
                .unwrap_or_default();
        Err(format!(
            "{:?} with rank {} at {} failed: {:?}{why}",
            c.opcode,
            q.peer,
            q.peer_udp.map_or("?".into(), |a| a.to_string()),
            c.status
        ))
    }

    /// The counters of every QP, and of the engine (from the last QP; all share it).
    ///
    /// # Errors
    /// The engine stopped.
    pub fn stats(&self) -> Result<(Vec<(u32, QpStats)>, EngineStats), String> {
        let mut v = Vec::new();
        let mut e = EngineStats::default();
        for q in &self.qps {
            let (s, es) = q.qp.stats().map_err(|e| e.to_string())?;
            v.push((q.peer, s));
            e = es;
        }
        Ok((v, e))
    }
}
