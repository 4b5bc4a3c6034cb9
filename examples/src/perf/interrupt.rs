//! SIGINT and SIGTERM (Ctrl-C, `kill`, `timeout -s INT`): a running test ends at once and
//! its report is printed; outside a test the signal does what it always did.
//!
//! A thread of signal-hook's ([`signal_hook::iterator::Signals`]) takes the two signals.
//! While a test is *armed* ([`arm`]: from the start of its measurement until its report
//! is out, [`disarm`]) the first signal is only recorded: the test loops see it
//! ([`pending`]) and end as if they had failed with the error `interrupted`, so the
//! report of what was measured until then is printed (table or JSON with `"ok": false`)
//! and `mrc-perf` exits with 128 + the signal's number (130 for SIGINT, 143 for SIGTERM,
//! what a shell shows for a process the signal ended). A second signal at least
//! [`REPEAT_WINDOW`] after the first, or any signal while no test is armed (setup, a
//! server waiting for a client), ends the process at once as the signal's default
//! action does ([`signal_hook::low_level::emulate_default_handler`]).
//!
//! A copy of the first signal within [`REPEAT_WINDOW`] is the same interrupt: coreutils
//! `timeout` sends its signal to the command and then to its process group, so the
//! command gets it twice within microseconds (as do the tests' `terminate`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A second signal this long after the first ends the process at once; an earlier one is
/// a copy of the first (coreutils `timeout` sends two) and ignored.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(1);

/// A signal that ends a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C).
    Int,
    /// SIGTERM (`kill`).
    Term,
}

impl Signal {
    /// The signal's number (2 or 15 on Linux).
    pub fn number(self) -> i32 {
        match self {
            Signal::Int => signal_hook::consts::SIGINT,
            Signal::Term => signal_hook::consts::SIGTERM,
        }
    }

    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Int => "SIGINT",
            Signal::Term => "SIGTERM",
        }
    }

    /// The exit code of a test this signal ended: 128 + its number (130, 143).
    pub fn exit_code(self) -> i32 {
        128 + self.number()
    }

    /// The signal of number `n`, if it is one of the two.
    pub fn from_number(n: i32) -> Option<Signal> {
        match n {
            signal_hook::consts::SIGINT => Some(Signal::Int),
            signal_hook::consts::SIGTERM => Some(Signal::Term),
            _ => None,
        }
    }
}

/// What the signal thread does with one signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Record it: the armed test ends and reports.
    EndTest,
    /// A copy of the first within [`REPEAT_WINDOW`]: nothing.
    Ignore,
    /// End the process now, as the signal's default action.
    Exit,
}

/// The rule: with no signal before (`first_at` `None`) an armed test ends
/// ([`Action::EndTest`]) and anything else exits; a later signal is a copy while it comes
/// within [`REPEAT_WINDOW`] of the first (`now` and `first_at` on one clock) and exits
/// after that.
pub fn decide(armed: bool, first_at: Option<Duration>, now: Duration) -> Action {
    match first_at {
        None if armed => Action::EndTest,
        None => Action::Exit,
        Some(t) if now.saturating_sub(t) < REPEAT_WINDOW => Action::Ignore,
        Some(_) => Action::Exit,
    }
}

/// Installing the signal thread failed.
#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    /// signal-hook could not register the handlers.
    #[error("cannot take SIGINT/SIGTERM: {0}")]
    Register(#[source] std::io::Error),
    /// The thread could not start.
    #[error("cannot start the signal thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// A test is armed: a signal ends it with its report.
static ARMED: AtomicBool = AtomicBool::new(false);
/// The number of the signal that ended the armed test; 0 for none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// When that signal came, ns after [`epoch`], plus one (0: none yet).
static FIRST_AT_NS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Takes SIGINT and SIGTERM on a thread of their own, for the rest of the process (once;
/// later calls do nothing). Without it (a library caller of [`super::run_cli`]) the
/// signals keep their default action and [`pending`] is always `None`.
///
/// # Errors
/// The handlers or the thread could not be set up ([`InterruptError`]).
pub fn install() -> Result<(), InterruptError> {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    epoch();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(InterruptError::Register)?;
    std::thread::Builder::new()
        .name("mrc-perf-signals".into())
        .spawn(move || {
            for n in signals.forever() {
                on_signal(n);
            }
        })
        .map_err(InterruptError::Thread)?;
    Ok(())
}

/// The signal thread's work for signal number `n`.
fn on_signal(n: i32) {
    let Some(sig) = Signal::from_number(n) else {
        return;
    };
    let now = epoch().elapsed();
    let first = FIRST_AT_NS.load(Ordering::SeqCst);
    let first_at = (first > 0).then(|| Duration::from_nanos(first - 1));
    match decide(ARMED.load(Ordering::SeqCst), first_at, now) {
        Action::EndTest => {
            let ns = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX - 1);
            FIRST_AT_NS.store(ns + 1, Ordering::SeqCst);
            RECEIVED.store(n, Ordering::SeqCst);
            // after a progress line redrawn in place on a terminal: a line of its own
            let nl = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                "\n"
            } else {
                ""
            };
            eprintln!(
                "{nl}mrc-perf: {}: ending the test; its report follows (another signal after \
                 {} s exits at once)",
                sig.name(),
                REPEAT_WINDOW.as_secs()
            );
        }
        Action::Ignore => {}
        Action::Exit => {
            if first_at.is_some() {
                eprintln!("mrc-perf: {} again: exiting without the report", sig.name());
            }
            // Dies of the signal, as without the handler (the exit status says so).
            if signal_hook::low_level::emulate_default_handler(n).is_err() {
                std::process::exit(sig.exit_code());
            }
        }
    }
}

/// A test's measurement starts: from now until [`disarm`] the first signal ends the test
/// and the report is printed.
pub fn arm() {
    ARMED.store(true, Ordering::SeqCst);
}

/// The report is out: a signal from now on ends the process at once.
pub fn disarm() {
    ARMED.store(false, Ordering::SeqCst);
}

/// The signal that ended the armed test, if one came.
pub fn pending() -> Option<Signal> {
    Signal::from_number(RECEIVED.load(Ordering::SeqCst))
}

/// A test loop's check: `Err(Interrupted)` once a signal ended the test.
///
/// # Errors
/// [`Interrupted`], with the signal.
pub fn check() -> Result<(), Interrupted> {
    match pending() {
        Some(s) => Err(Interrupted(s)),
        None => Ok(()),
    }
}

/// A test ended by a signal; its message is the report's `error`: `interrupted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", INTERRUPTED)]
pub struct Interrupted(pub Signal);

/// The error of a test a signal ended, as the report's `error` and `FAILED` line say it.
pub const INTERRUPTED: &str = "interrupted";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_ends_an_armed_test_a_copy_is_ignored_a_second_exits() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(decide(true, None, s(7)), Action::EndTest);
        assert_eq!(decide(false, None, s(7)), Action::Exit);
        // timeout(1)'s copy to the process group, microseconds later
        assert_eq!(
            decide(true, Some(s(7)), s(7) + Duration::from_micros(40)),
            Action::Ignore
        );
        assert_eq!(decide(true, Some(s(7)), s(7) + ms(999)), Action::Ignore);
        assert_eq!(decide(true, Some(s(7)), s(8)), Action::Exit);
        // disarmed after the report, still within the window: a copy all the same
        assert_eq!(decide(false, Some(s(7)), s(7) + ms(10)), Action::Ignore);
        assert_eq!(decide(false, Some(s(7)), s(9)), Action::Exit);
    }

    #[test]
    fn signals_name_their_numbers_and_exit_codes() {
        assert_eq!(
            (
                Signal::Int.name(),
                Signal::Int.number(),
                Signal::Int.exit_code()
            ),
            ("SIGINT", 2, 130)
        );
        assert_eq!(
            (
                Signal::Term.name(),
                Signal::Term.number(),
                Signal::Term.exit_code()
            ),
            ("SIGTERM", 15, 143)
        );
        assert_eq!(Signal::from_number(2), Some(Signal::Int));
        assert_eq!(Signal::from_number(15), Some(Signal::Term));
        assert_eq!(Signal::from_number(1), None);
        assert_eq!(Interrupted(Signal::Term).to_string(), "interrupted");
    }
}
