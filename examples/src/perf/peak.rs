//! `BW peak`: the best rate over a window of at least [`MIN_WINDOW`] that holds at least
//! [`MIN_COMPLETIONS`] completions.
//!
//! A sender counts a message's bytes when it completes, all at once. A window that holds
//! one or two completions therefore counts bytes that mostly moved before it began: with
//! 95 MiB messages (`-s 100000000`, TX depth 2) one 100 ms window held two completions
//! that arrived close together and the peak read 4923 MB/sec against an average of 2168.
//! Over [`MIN_COMPLETIONS`] completions such an edge is at most one message in eight.
//! A run too short or too slow for one whole window has no peak of its own; the report
//! then shows the average.

use std::time::{Duration, Instant};

/// Shortest window, as perftest's 100 ms.
pub const MIN_WINDOW: Duration = Duration::from_millis(100);

/// Fewest completions a window holds.
pub const MIN_COMPLETIONS: u64 = 8;

/// The best rate over windows that each end at a completion and hold at least
/// `min_completions` completions over at least `min_window`.
#[derive(Clone, Copy, Debug)]
pub struct PeakWindow {
    min_window: Duration,
    min_completions: u64,
    start: Instant,
    completions: u64,
    bytes: u64,
    peak_bps: f64,
}

impl PeakWindow {
    /// Windows of [`MIN_WINDOW`] and [`MIN_COMPLETIONS`], the first from `start` (no
    /// completion before it).
    pub fn new(start: Instant) -> Self {
        Self::with_limits(start, MIN_WINDOW, MIN_COMPLETIONS)
    }

    /// Windows of at least `min_window` and `min_completions` (at least 1).
    pub fn with_limits(start: Instant, min_window: Duration, min_completions: u64) -> Self {
        PeakWindow {
            min_window,
            min_completions: min_completions.max(1),
            start,
            completions: 0,
            bytes: 0,
            peak_bps: 0.0,
        }
    }

    /// Running totals at `now`: `completions` and the `bytes` in them since the start.
    /// The open window closes here when it is long enough and holds enough completions
    /// (its rate: its bytes over its length, bytes/s); the next one opens at `now`.
    pub fn tick(&mut self, now: Instant, completions: u64, bytes: u64) {
        let len = now.saturating_duration_since(self.start);
        if len < self.min_window
            || completions.saturating_sub(self.completions) < self.min_completions
        {
            return;
        }
        let bps = bytes.saturating_sub(self.bytes) as f64 / len.as_secs_f64();
        self.peak_bps = self.peak_bps.max(bps);
        (self.start, self.completions, self.bytes) = (now, completions, bytes);
    }

    /// The best closed window's rate, bytes/s; 0 before one closed.
    pub fn peak_bps(&self) -> f64 {
        self.peak_bps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 MB completions every 100 ms for 2 s, and one more 1 ms after the tenth (two
    /// messages that finished together): 21 completions, 2.1 GB in 2 s (1.05 GB/s).
    fn run(w: &mut PeakWindow, t0: Instant) {
        let mut times: Vec<u64> = (1..=20).map(|k| k * 100).collect();
        times.insert(10, 1001);
        for (i, ms) in times.into_iter().enumerate() {
            let n = i as u64 + 1;
            w.tick(t0 + Duration::from_millis(ms), n, n * 100_000_000);
        }
    }

    #[test]
    fn a_window_of_eight_completions_keeps_the_peak_near_the_average() {
        let t0 = Instant::now();
        // 100 ms windows alone: [1000, 1100] ms holds the pair's second and the next,
        // 200 MB in 100 ms, twice the rate the link ever ran.
        let mut short = PeakWindow::with_limits(t0, MIN_WINDOW, 1);
        run(&mut short, t0);
        assert_eq!(
            short.peak_bps(),
            200_000_000.0 / Duration::from_millis(100).as_secs_f64()
        );
        // Eight completions: [0, 800] ms at 1 GB/s, [800, 1500] ms with the pair, 800 MB
        // in 700 ms; the last five completions close no window.
        let mut w = PeakWindow::new(t0);
        run(&mut w, t0);
        assert_eq!(
            w.peak_bps(),
            800_000_000.0 / Duration::from_millis(700).as_secs_f64()
        );
        assert_eq!(w.peak_bps().round(), 1_142_857_143.0);
    }

    #[test]
    fn too_few_completions_or_too_short_a_run_close_no_window() {
        let t0 = Instant::now();
        let mut w = PeakWindow::new(t0);
        // seven huge messages over a second: no window of eight
        for n in 1..=7u64 {
            w.tick(t0 + Duration::from_millis(150 * n), n, n << 30);
        }
        assert_eq!(w.peak_bps(), 0.0);
        // a thousand small ones in 50 ms: no window of 100 ms
        let mut w = PeakWindow::new(t0);
        for n in 1..=1000u64 {
            w.tick(t0 + Duration::from_micros(50 * n), n, n * 64);
        }
        assert_eq!(w.peak_bps(), 0.0);
        // the eighth completion at 100 ms closes one
        let mut w = PeakWindow::new(t0);
        for n in 1..=8u64 {
            w.tick(t0 + Duration::from_millis(12 * n + 4), n, n * 1000);
        }
        assert_eq!(
            w.peak_bps(),
            8000.0 / Duration::from_millis(100).as_secs_f64()
        );
    }
}
