//! Shared setup of the engine tests (fake, io_uring and verbs datapaths): pattern-filled
//! RDMA WRITEs with immediate from `qa` into the slots of a region of `qb`, checked by the
//! receiver's `--verify` and by reading the region back.
#![allow(dead_code)]

use mrc_fabric::engine::{Qp, VerifySpec, pattern};
use mrc_transport::region::MrKey;
use mrc_transport::{Access, Sge};

/// A source region on `qa` and a destination region on `qb`, each `slots` slots of `size`
/// bytes; message `i` goes from and to slot `i % slots`, filled with pattern `seed`.
#[derive(Clone, Copy, Debug)]
pub struct PatternWrites {
    /// The source region (`LOCAL_WRITE`).
    pub src: MrKey,
    /// The destination region (`LOCAL_WRITE | REMOTE_WRITE`).
    pub dst: MrKey,
    /// Bytes per message (and slot).
    pub size: usize,
    /// Slots per region.
    pub slots: usize,
    /// Pattern seed.
    pub seed: u64,
}

impl PatternWrites {
    /// Registers both regions.
    pub fn new(qa: &Qp, qb: &Qp, size: usize, slots: usize, seed: u64) -> Self {
        let src = qa.reg_mr(size * slots, Access::LOCAL_WRITE).unwrap();
        let dst = qb
            .reg_mr(size * slots, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        PatternWrites {
            src,
            dst,
            size,
            slots,
            seed,
        }
    }

    /// Turns on `qb`'s check of every message against the pattern.
    pub fn set_verify(&self, qb: &Qp) {
        qb.set_verify(VerifySpec {
            lkey: self.dst.lkey,
            slot_bytes: self.size as u64,
            slots: self.slots as u64,
            seed: self.seed,
        })
        .unwrap();
    }

    /// A zero-length receive into the destination region (what a WRITE with immediate
    /// consumes).
    pub fn recv_sge(&self) -> Sge {
        Sge {
            lkey: self.dst.lkey,
            addr: self.dst.addr,
            len: 0,
        }
    }

    /// Posts the next messages (immediate = message number) while fewer than `slots` are
    /// outstanding (`*posted - done`) and fewer than `iters` are posted.
    pub fn post(&self, qa: &Qp, iters: u64, posted: &mut u64, done: u64) {
        while *posted < iters && *posted - done < self.slots as u64 {
            let slot = (*posted % self.slots as u64) * self.size as u64;
            qa.fill_pattern(self.src.lkey, slot, self.size, self.seed, *posted)
                .unwrap();
            let sge = Sge {
                lkey: self.src.lkey,
                addr: self.src.addr + slot,
                len: self.size as u32,
            };
            qa.post_write_with_imm(
                *posted,
                sge,
                self.dst.addr + slot,
                self.dst.rkey,
                *posted as u32,
            )
            .unwrap();
            *posted += 1;
        }
    }

    /// Posts one plain WRITE (no immediate) of `len` bytes from the start of the source
    /// region to the start of the destination region.
    pub fn post_first(&self, qa: &Qp, wr_id: u64, len: u32) {
        let sge = Sge {
            lkey: self.src.lkey,
            addr: self.src.addr,
            len,
        };
        qa.post_write(wr_id, sge, self.dst.addr, self.dst.rkey)
            .unwrap();
    }

    /// Asserts that each destination slot holds the pattern of the last of `iters` messages
    /// written to it.
    pub fn assert_slots_hold_last(&self, qb: &Qp, iters: u64) {
        for s in 0..self.slots as u64 {
            let last = (0..iters)
                .rev()
                .find(|i| i % self.slots as u64 == s)
                .unwrap();
            let bytes = qb
                .read_mr(self.dst.lkey, s * self.size as u64, self.size)
                .unwrap();
            assert_eq!(pattern::count_bad(&bytes, self.seed, last), 0, "slot {s}");
        }
    }
}

/// A WRITE_ONLY to `qpn` under `rkey` at `addr` as if from the QP configured `from`: its
/// P_Key and generation, PSN its initial one plus `ahead` (inside the receive window),
/// MSN `ahead`.
pub fn forged_write(
    qpn: u32,
    from: &mrc_transport::ConnConfig,
    ahead: u32,
    rkey: u32,
    addr: u64,
    payload: &[u8],
) -> Vec<u8> {
    use mrc_transport::wire::{
        Body, BthFlags, BthRepr, BthSpare, DataRepr, MrcethRepr, MsgethRepr, Opcode, PacketRepr,
        RethRepr,
    };
    let psn = from.initial_psn.value().wrapping_add(ahead) & 0xFF_FFFF;
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RdmaWriteOnly,
            pkey: from.pkey,
            dest_qpn: qpn,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 0,
            msn: ahead,
            send_ts_ns: 0,
            generation: from.generation,
            reserved: 0,
        },
        body: Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len: payload.len() as u32,
                offset: 0,
            },
            reth: Some(RethRepr {
                virtual_addr: addr,
                rkey,
                dma_len: payload.len() as u32,
            }),
            imm: None,
            payload,
        }),
    };
    let mut b = vec![0u8; p.buffer_len()];
    p.emit(&mut b).expect("a WRITE_ONLY fits its buffer");
    b
}

/// Round robin over EVs that alternate planes splits a run with no retransmission and no
/// EV taken out 50/50 to within one packet; a run that had some (a loaded host's spurious
/// RTO) still puts a third or more on each plane.
pub fn assert_planes_split_evenly(sent: [u64; 2], s: &mrc_fabric::engine::QpStats) {
    let total = sent[0] + sent[1];
    let revalidations: u64 = s.evs.iter().map(|(_, _, e)| e.revalidations).sum();
    if s.conn.retransmitted == 0 && revalidations == 0 {
        assert!(sent[0].abs_diff(sent[1]) <= 1, "{sent:?}");
    } else {
        assert!(sent.iter().all(|p| p * 3 >= total), "{sent:?} {:?}", s.conn);
    }
}
