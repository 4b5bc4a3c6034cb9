//! Logs of the binaries: a `tracing` subscriber on stderr, filtered by `RUST_LOG` and the
//! `-v` flags (docs: docs/MRC_PERF.md, "Logs").
//!
//! Without `RUST_LOG` and without `-v` nothing is installed: the binaries print exactly
//! what they printed before, and the engine's log checks cost one disabled-level test per
//! loop iteration (fabric/src/engine/watch.rs).

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// The crates `-v` turns on.
pub const MRC_CRATES: [&str; 5] = [
    "mrc_fabric",
    "mrc_transport",
    "mrc_congestion",
    "mrc_examples",
    "mrc_perf",
];

/// The level of `-v` repeated `verbose` times for the mrc crates: none, info (`-v`), debug
/// (`-vv`), trace (`-vvv` and more).
pub fn verbose_level(verbose: u8) -> Option<LevelFilter> {
    match verbose {
        0 => None,
        1 => Some(LevelFilter::INFO),
        2 => Some(LevelFilter::DEBUG),
        _ => Some(LevelFilter::TRACE),
    }
}

/// The filter of `rust_log` (`RUST_LOG`'s value, EnvFilter syntax; bad directives are
/// skipped) with `-v` x `verbose` on top for the mrc crates; `None` when both are empty.
pub fn filter(rust_log: Option<&str>, verbose: u8) -> Option<EnvFilter> {
    let rust_log = rust_log.map(str::trim).filter(|s| !s.is_empty());
    let level = verbose_level(verbose);
    if rust_log.is_none() && level.is_none() {
        return None;
    }
    let mut f = EnvFilter::builder()
        .with_default_directive(LevelFilter::OFF.into())
        .parse_lossy(rust_log.unwrap_or(""));
    if let Some(level) = level {
        for c in MRC_CRATES {
            if let Ok(d) = format!("{c}={level}").parse() {
                f = f.add_directive(d);
            }
        }
    }
    Some(f)
}

/// Installs the global subscriber for `RUST_LOG` and `-v` x `verbose`: events on stderr
/// (time, level, thread, target, message, fields; colours only on a terminal). Does
/// nothing when neither asks for logs, or when a subscriber is installed already.
pub fn init(verbose: u8) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let Some(filter) = filter(rust_log.as_deref(), verbose) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_thread_names(true)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_flag_and_no_rust_log_install_nothing() {
        assert!(filter(None, 0).is_none());
        assert!(filter(Some("  "), 0).is_none());
    }

    #[test]
    fn v_is_info_vv_debug_for_the_mrc_crates() {
        let f = filter(None, 1).unwrap().to_string();
        assert!(f.contains("mrc_fabric=info"), "{f}");
        assert!(!f.contains("debug"), "{f}");
        let f = filter(None, 2).unwrap().to_string();
        assert!(f.contains("mrc_fabric=debug"), "{f}");
        assert_eq!(verbose_level(5), Some(LevelFilter::TRACE));
    }

    #[test]
    fn rust_log_alone_is_taken_as_is() {
        let f = filter(Some("mrc_fabric::engine=debug"), 0)
            .unwrap()
            .to_string();
        assert!(f.contains("mrc_fabric::engine=debug"), "{f}");
        assert!(!f.contains("mrc_transport"), "{f}");
    }
}
