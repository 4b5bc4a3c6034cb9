//! Registration cost through the embedding API as a QP's region table grows: `N`
//! (default 100,000) registrations of one 4 KiB application buffer on one caller-progressed
//! `Worker` QP (what `mrc_x_reg_mr` and the NCCL plugin's `regMr` call), each tenth timed.
//!
//! `cargo run --release -p mrc-fabric --example reg_scale_worker [N]`

use mrc_fabric::engine::{EngineConfig, QpConfig, Worker};
use mrc_fabric::udp::{FakeDatapath, FakeNet};
use mrc_transport::Access;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let net = FakeNet::new();
    let addr = "10.0.0.1:4792".parse().expect("address");
    let mut w = Worker::with_datapath(FakeDatapath::new(&net, addr), EngineConfig::default());
    let qpn = w.create_qp(QpConfig::default()).expect("QP");
    let mut buf = vec![0u8; 4096];
    let tenth = (n / 10).max(1);
    let mut start = Instant::now();
    for i in 0..n {
        // SAFETY: `buf` outlives the worker's use of it: nothing is sent or placed, and
        // the worker is dropped first.
        unsafe { w.reg_mr_raw(qpn, buf.as_mut_ptr(), 4096, Access::LOCAL_WRITE) }
            .expect("register");
        if (i + 1) % tenth == 0 {
            println!(
                "registrations {:>7}..{:>7}: {:.3} s",
                i + 1 - tenth,
                i + 1,
                start.elapsed().as_secs_f64()
            );
            start = Instant::now();
        }
    }
    drop(w);
    drop(buf);
}
