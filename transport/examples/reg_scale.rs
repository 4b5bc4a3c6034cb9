//! Registration cost as the region table grows: registers `N` (default 100,000)
//! application buffers of 4 KiB in one table (as many `ibv_reg_mr` on one QP) and prints
//! the time of each tenth, then deregisters every other one and registers as many again
//! (the freed slots are reused). A cost per registration that grows with the table shows
//! as later tenths taking longer.
//!
//! `cargo run --release -p mrc-transport --example reg_scale [N]`

use mrc_transport::region::{Access, RawMem, RegionTable};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let mut t = RegionTable::random([7; 32]);
    let mut buf = vec![0u8; 4096];
    let ptr = buf.as_mut_ptr();
    let tenth = (n / 10).max(1);
    let mut keys = Vec::with_capacity(n);
    let mut times = Vec::new();
    let mut start = Instant::now();
    for i in 0..n {
        // SAFETY: `buf` outlives the table's use of it (nothing is placed or sent here).
        let mem = unsafe { RawMem::new(ptr, 4096) }.expect("raw memory");
        keys.push(t.register_raw(mem, Access::LOCAL_WRITE).expect("register"));
        if (i + 1) % tenth == 0 {
            times.push(start.elapsed().as_secs_f64());
            start = Instant::now();
        }
    }
    for (k, s) in times.iter().enumerate() {
        println!(
            "registrations {:>7}..{:>7}: {:.3} s",
            k * tenth,
            (k + 1) * tenth,
            s
        );
    }
    let start = Instant::now();
    for k in keys.iter().step_by(2) {
        t.deregister(k.lkey).expect("deregister");
    }
    let dereg = start.elapsed().as_secs_f64();
    let start = Instant::now();
    for _ in keys.iter().step_by(2) {
        // SAFETY: as above.
        let mem = unsafe { RawMem::new(ptr, 4096) }.expect("raw memory");
        t.register_raw(mem, Access::LOCAL_WRITE).expect("register");
    }
    println!(
        "deregister {} and register {} into the freed slots: {:.3} s and {:.3} s",
        n.div_ceil(2),
        n.div_ceil(2),
        dereg,
        start.elapsed().as_secs_f64()
    );
    drop(t);
    drop(buf);
}
