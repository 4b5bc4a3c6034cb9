//! Drives a fixed number of iterations of the `conn` bench's loop (`benches/common`), for
//! instruction counts: `valgrind --tool=callgrind target/release/examples/conn_drive MODE N`
//! with MODE `write` (256-packet WRITEs of 4096-byte packets), `hot` (256 one-packet
//! WRITEs of 4096 bytes), `small` (256-packet WRITEs of 64-byte packets) or `sprayed` (`small`
//! delivered grouped by EV, as 16 UDP sockets deliver it: `common`'s doc), N iterations of
//! 256 packets each. Instructions per packet: the difference of two runs' totals (N and 2N)
//! over 256 N, which removes setup. `scripts/callgrind_conn.sh` does that.

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "write".into());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let (mtu, hot, sprayed) = match mode.as_str() {
        "write" => (4096, false, false),
        "hot" => (4096, true, false),
        "small" => (64, false, false),
        "sprayed" => (64, false, true),
        _ => {
            eprintln!("usage: conn_drive write|hot|small|sprayed N");
            std::process::exit(2);
        }
    };
    let mut s = common::setup(mtu);
    for _ in 0..n {
        if hot {
            s.hot_writes();
        } else if sprayed {
            s.sprayed_message();
        } else {
            s.one_message();
        }
    }
    println!("{mode}: {} packets", n * common::PACKETS);
}
