//! What `mrc-perf` says on stderr about the shape of a run before its figures: a TX depth
//! lower than asked, or than the default's [`MAX_DEFAULT_TX_DEPTH`] ([`tx_depth`]), and
//! a run that will take long ([`long_run`]).
//!
//! Iterations are not scaled down for large messages: `-n` (default 5000) is what runs,
//! so `-s 100000000` moves 500 GB. Such a run says so after its first
//! [`LONG_RUN_AFTER`], with the time it will take at the rate measured since its first
//! completion (the first message also waits for the regions' first touch), when that is
//! more than [`LONG_RUN_S`].

use super::opts::{TestKind, TestParams};
use std::time::Duration;

/// The default TX depth of a bw test: as many messages as hold [`DEFAULT_DEPTH_BYTES`],
/// at least 2 and at most this.
pub const MAX_DEFAULT_TX_DEPTH: u64 = 128;

/// Bytes the default TX depth keeps in flight (8 MiB).
pub const DEFAULT_DEPTH_BYTES: u64 = 8 << 20;

/// A run projected longer than this, seconds, says so ([`long_run`]).
pub const LONG_RUN_S: f64 = 30.0;

/// How long a run goes before [`long_run`] projects its length from its rate.
pub const LONG_RUN_AFTER: Duration = Duration::from_secs(1);

/// The default TX depth of a test of `size`-byte messages: 1 for lat; for bw
/// [`DEFAULT_DEPTH_BYTES`] of messages, in `2..=`[`MAX_DEFAULT_TX_DEPTH`].
pub fn default_tx_depth(test: TestKind, size: u64) -> u64 {
    match test {
        TestKind::Lat => 1,
        TestKind::Bw => (DEFAULT_DEPTH_BYTES / size.max(1)).clamp(2, MAX_DEFAULT_TX_DEPTH),
    }
}

/// The line about `p`'s TX depth when it is lower than asked (`asked`, `-t`: the region
/// holds fewer messages) or, without `-t`, lower than [`MAX_DEFAULT_TX_DEPTH`] for a bw
/// test (large messages); `None` otherwise.
pub fn tx_depth(p: &TestParams, asked: Option<u64>) -> Option<String> {
    let d = p.tx_depth;
    match asked {
        Some(t) if d < t => Some(format!(
            "mrc-perf: TX depth {d}, not {t}: the region of {} bytes holds {d} messages of \
             {} bytes (--region-size)",
            p.region_size, p.size
        )),
        Some(_) => None,
        None if p.test == TestKind::Bw && d < MAX_DEFAULT_TX_DEPTH => Some(format!(
            "mrc-perf: TX depth {d}, not {MAX_DEFAULT_TX_DEPTH}: the default keeps about {} \
             MiB in flight ({d} messages of {} bytes, at least 2); -t/--tx-depth N sets it",
            DEFAULT_DEPTH_BYTES >> 20,
            p.size
        )),
        None => None,
    }
}

/// The line about a run of `iters` messages of `size` bytes that completed `done` of
/// them in its first `ran`, sending `rate_bps` bytes/s lately, when at that rate the
/// whole run takes more than [`LONG_RUN_S`]: its bytes, its projected length and how to
/// shorten or end it; `None` otherwise (or without a rate).
pub fn long_run(iters: u64, size: u64, done: u64, ran: Duration, rate_bps: f64) -> Option<String> {
    if !(rate_bps > 0.0 && rate_bps.is_finite()) {
        return None;
    }
    let total_bytes = iters as f64 * size as f64;
    let left_bytes = iters.saturating_sub(done) as f64 * size as f64;
    let total_s = ran.as_secs_f64() + left_bytes / rate_bps;
    if total_s <= LONG_RUN_S {
        return None;
    }
    Some(format!(
        "mrc-perf: {iters} messages of {size} bytes are {:.1} GB (10^9 bytes): about {:.0} s \
         at the {:.2} GB/s measured so far; -n COUNT or -D SECONDS runs shorter, and Ctrl-C \
         ends the run with its report",
        total_bytes / 1e9,
        total_s,
        rate_bps / 1e9,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::opts::Cli;
    use clap::Parser;

    fn params(args: &[&str]) -> (TestParams, Option<u64>) {
        let mut v = vec!["mrc-perf", "loopback"];
        v.extend_from_slice(args);
        let t = Cli::parse_from(v).test;
        (t.params().unwrap(), t.tx_depth)
    }

    #[test]
    fn the_default_depth_holds_8_mib_and_a_lowered_one_says_so() {
        assert_eq!(default_tx_depth(TestKind::Bw, 65536), 128);
        assert_eq!(default_tx_depth(TestKind::Bw, 1 << 20), 8);
        assert_eq!(default_tx_depth(TestKind::Bw, 100_000_000), 2);
        assert_eq!(default_tx_depth(TestKind::Bw, 1), 128);
        assert_eq!(default_tx_depth(TestKind::Lat, 1 << 20), 1);
        let (p, t) = params(&[]);
        assert_eq!(tx_depth(&p, t), None);
        let (p, t) = params(&["-s", "100000000"]);
        assert_eq!(
            tx_depth(&p, t).unwrap(),
            "mrc-perf: TX depth 2, not 128: the default keeps about 8 MiB in flight (2 \
             messages of 100000000 bytes, at least 2); -t/--tx-depth N sets it"
        );
        let (p, t) = params(&["-s", "1048576", "-t", "16", "--region-size", "4194304"]);
        assert_eq!(
            tx_depth(&p, t).unwrap(),
            "mrc-perf: TX depth 4, not 16: the region of 4194304 bytes holds 4 messages of \
             1048576 bytes (--region-size)"
        );
        let (p, t) = params(&["-s", "1048576", "-t", "16"]);
        assert_eq!(tx_depth(&p, t), None);
        let (p, t) = params(&["--test", "lat", "-s", "1048576"]);
        assert_eq!(tx_depth(&p, t), None);
    }

    #[test]
    fn a_run_projected_past_30_s_says_how_long_and_how_big() {
        let s = Duration::from_secs;
        // the run: 5000 x 100 MB at 2.2 GB/s, 22 done after 1 s
        assert_eq!(
            long_run(5000, 100_000_000, 22, s(1), 2.2e9).unwrap(),
            "mrc-perf: 5000 messages of 100000000 bytes are 500.0 GB (10^9 bytes): about \
             227 s at the 2.20 GB/s measured so far; -n COUNT or -D SECONDS runs shorter, \
             and Ctrl-C ends the run with its report"
        );
        // 30 s exactly is not long: 1 s run, 2900 MB left at 100 MB/s
        assert_eq!(long_run(3000, 1_000_000, 100, s(1), 1e8), None);
        assert!(long_run(3001, 1_000_000, 100, s(1), 1e8).is_some());
        // the default run of 5000 x 64 KiB
        assert_eq!(long_run(5000, 65536, 3000, s(1), 2e8), None);
        assert_eq!(long_run(5000, 100_000_000, 0, s(1), 0.0), None);
    }
}
