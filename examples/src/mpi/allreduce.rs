//! Ring allreduce over mrc: reduce-scatter (N-1 steps, each adding the chunk that came
//! from the left neighbour), then allgather (N-1 steps, each copying the reduced chunk
//! that came from the left), of `-s` bytes of u32 or f32. Every rank checks every element
//! of the result against the sum it computes itself.
//!
//! Step `s` (0..2(N-1)) of an iteration writes its chunk into slot `s` of the right
//! neighbour's destination region (slots of [`chunk_bytes`]), immediate
//! `iteration x 2(N-1) + s`; a neighbour that runs ahead never overwrites a chunk not yet
//! read.

use super::conn::RankConn;
use super::opts::{Dtype, Plan};
use mrc_transport::completion::{Completion, WcOpcode};
use std::time::{Duration, Instant};

/// Elements of chunk `c` of `n` over `e` elements: `[c e / n, (c + 1) e / n)`.
pub fn chunk_range(e: u64, n: u64, c: u64) -> (u64, u64) {
    (c * e / n, (c + 1) * e / n)
}

/// Bytes of the largest chunk (the slot size).
pub fn chunk_bytes(size: u64, n: u32) -> u64 {
    (size / 4).div_ceil(u64::from(n)) * 4
}

/// Region bytes of each QP of the allreduce: a slot per step.
pub fn region_bytes(size: u64, n: u32) -> u64 {
    chunk_bytes(size, n) * 2 * u64::from(n - 1)
}

fn mix(seed: u64, rank: u32, j: u64, it: u64) -> u64 {
    super::patterns::stream_seed(
        seed ^ it.wrapping_mul(0xA076_1D64_78BD_642F) ^ j << 20,
        rank,
        j as u32,
    )
}

/// Rank `rank`'s input element `j` of iteration `it`, as its bit pattern.
pub fn input(dtype: Dtype, seed: u64, rank: u32, j: u64, it: u64) -> u32 {
    let m = mix(seed, rank, j, it);
    match dtype {
        Dtype::U32 => m as u32,
        Dtype::F32 => ((m % 1024) as f32).to_bits(),
    }
}

/// `a + b` in `dtype`, as bit patterns.
pub fn add(dtype: Dtype, a: u32, b: u32) -> u32 {
    match dtype {
        Dtype::U32 => a.wrapping_add(b),
        Dtype::F32 => (f32::from_bits(a) + f32::from_bits(b)).to_bits(),
    }
}

/// What the allreduce did on this rank.
#[derive(Clone, Debug, Default)]
pub struct AllreduceResult {
    /// Completion time of each iteration, from its scheduled start to the last chunk, ns.
    pub iterations_ns: Vec<u64>,
    /// How late each iteration began against its schedule, ns.
    pub start_late_ns: Vec<u64>,
    /// Elements checked.
    pub checked_elements: u64,
    /// Elements that differed from the sum.
    pub bad_elements: u64,
    /// Bytes sent (chunks).
    pub sent_bytes: u64,
    /// Bytes received (chunks).
    pub recv_bytes: u64,
    /// From the start to the end of the last iteration, ns.
    pub span_ns: u64,
}

struct Ring<'a> {
    conn: &'a mut RankConn,
    right: usize,
    left: usize,
    timeout: Duration,
    got: Vec<Completion>,
    sends_out: u64,
}

impl Ring<'_> {
    fn reap_sends(&mut self) -> Result<(), String> {
        self.got.clear();
        self.conn.poll_send(self.right, &mut self.got);
        for c in &self.got {
            self.conn.check(self.right, c)?;
            self.sends_out -= 1;
        }
        Ok(())
    }

    /// Waits for the chunk with immediate `g` from the left; returns its byte count.
    fn recv(&mut self, g: u32) -> Result<u32, String> {
        let until = Instant::now() + self.timeout;
        loop {
            self.reap_sends()?;
            let mut one = Vec::with_capacity(1);
            if self.conn.qps[self.left].qp.poll_recv_cq(&mut one, 1) == 1 {
                let c = &one[0];
                self.conn.check(self.left, c)?;
                self.conn.post_recvs(self.left, 1)?;
                if c.opcode != WcOpcode::RecvRdmaWithImm || c.imm != Some(g) {
                    return Err(format!(
                        "allreduce: from rank {} expected chunk {g}, got {:?} imm {:?}",
                        self.conn.qps[self.left].peer, c.opcode, c.imm
                    ));
                }
                return Ok(c.byte_len);
            }
            if Instant::now() > until {
                return Err(format!(
                    "allreduce: no chunk {g} from rank {} within {:.1} s",
                    self.conn.qps[self.left].peer,
                    self.timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_micros(5));
        }
    }

    fn drain_sends(&mut self) -> Result<(), String> {
        let until = Instant::now() + self.timeout;
        while self.sends_out > 0 {
            self.reap_sends()?;
            if Instant::now() > until {
                return Err(format!(
                    "allreduce: {} chunks to rank {} unacknowledged for {:.1} s",
                    self.sends_out,
                    self.conn.qps[self.right].peer,
                    self.timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_micros(5));
        }
        Ok(())
    }
}

fn to_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Runs `plan.bursts` allreduces of `plan.params.size` bytes on rank `me` of `n`,
/// iteration `k` starting at `start + k x period` (back to back when the period is 0).
/// Each QP has [`region_bytes`] regions and receives posted ([`super::data::stream_recvs`]
/// is more than the `2(N-1)` a step needs in flight).
///
/// # Errors
/// A failed completion, a chunk out of order, or no chunk within `--timeout`.
pub fn run(
    conn: &mut RankConn,
    plan: &Plan,
    me: u32,
    start: Instant,
) -> Result<AllreduceResult, String> {
    let n = plan.ranks;
    let (rn, ln) = ((me + 1) % n, (me + n - 1) % n);
    let right = conn.index(rn).ok_or("no QP to the right neighbour")?;
    let left = conn.index(ln).ok_or("no QP to the left neighbour")?;
    let e = plan.params.size / 4;
    let nn = u64::from(n);
    let slot = chunk_bytes(plan.params.size, n);
    let steps = 2 * (n - 1);
    let mut ring = Ring {
        conn,
        right,
        left,
        timeout: Duration::from_secs_f64(plan.timeout_s),
        got: Vec::new(),
        sends_out: 0,
    };
    let mut res = AllreduceResult::default();
    let mut buf = vec![0u32; e as usize];
    for it in 0..plan.bursts {
        // back to back without a period: each iteration is timed from its own start
        let due = if plan.period_ns == 0 {
            Instant::now().max(start)
        } else {
            start + Duration::from_nanos(it * plan.period_ns)
        };
        let now = Instant::now();
        if due > now {
            let d = due - now;
            if d > Duration::from_micros(200) {
                std::thread::sleep(d - Duration::from_micros(100));
            }
            while Instant::now() < due {
                std::hint::spin_loop();
            }
        }
        let began = Instant::now();
        res.start_late_ns
            .push(began.saturating_duration_since(due).as_nanos() as u64);
        for (j, b) in buf.iter_mut().enumerate() {
            *b = input(plan.dtype, plan.seed, me, j as u64, it);
        }
        for s in 0..steps {
            let g = (it * u64::from(steps) + u64::from(s)) as u32;
            let (send_c, recv_c) = if s < n - 1 {
                ((me + n - s) % n, (me + 2 * n - s - 1) % n)
            } else {
                let a = s - (n - 1);
                ((me + 1 + n - a) % n, (me + n - a) % n)
            };
            let (a, b) = chunk_range(e, nn, u64::from(send_c));
            let off = u64::from(s) * slot;
            ring.conn
                .write_src(right, off, &to_bytes(&buf[a as usize..b as usize]))?;
            ring.conn.write(right, u64::from(g), off, (b - a) * 4, g)?;
            ring.sends_out += 1;
            res.sent_bytes += (b - a) * 4;
            let len = ring.recv(g)?;
            let (a, b) = chunk_range(e, nn, u64::from(recv_c));
            if u64::from(len) != (b - a) * 4 {
                return Err(format!(
                    "allreduce: chunk {g} from rank {ln} has {len} bytes, want {}",
                    (b - a) * 4
                ));
            }
            res.recv_bytes += u64::from(len);
            let data = ring.conn.read_dst(left, off, len as usize)?;
            for (k, w) in data.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                let x = &mut buf[a as usize + k];
                *x = if s < n - 1 { add(plan.dtype, *x, v) } else { v };
            }
        }
        res.iterations_ns.push(due.elapsed().as_nanos() as u64);
        res.span_ns = start.elapsed().as_nanos() as u64;
        for (j, got) in buf.iter().enumerate() {
            let mut want = input(plan.dtype, plan.seed, 0, j as u64, it);
            for r in 1..n {
                want = add(
                    plan.dtype,
                    want,
                    input(plan.dtype, plan.seed, r, j as u64, it),
                );
            }
            res.checked_elements += 1;
            if *got != want {
                res.bad_elements += 1;
            }
        }
        ring.drain_sends()?;
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_element_once() {
        for e in [1u64, 7, 64, 1000] {
            for n in 1..9u64 {
                let mut next = 0;
                for c in 0..n {
                    let (a, b) = chunk_range(e, n, c);
                    assert_eq!(a, next);
                    assert!((b - a) * 4 <= chunk_bytes(e * 4, n as u32));
                    next = b;
                }
                assert_eq!(next, e);
            }
        }
        assert_eq!(region_bytes(4096, 4), 1024 * 6);
    }

    #[test]
    fn f32_inputs_sum_exactly_in_any_order() {
        let v: Vec<u32> = (0..64).map(|r| input(Dtype::F32, 9, r, 5, 2)).collect();
        let fwd = v.iter().fold(0f32.to_bits(), |a, b| add(Dtype::F32, a, *b));
        let rev = v
            .iter()
            .rev()
            .fold(0f32.to_bits(), |a, b| add(Dtype::F32, a, *b));
        assert_eq!(fwd, rev);
        let ints: u64 = v.iter().map(|b| f32::from_bits(*b) as u64).sum();
        assert_eq!(f32::from_bits(fwd) as u64, ints);
        assert_ne!(input(Dtype::U32, 9, 0, 5, 2), input(Dtype::U32, 9, 1, 5, 2));
    }
}
