//! `mrc-perf`'s help: each subcommand's lists only the options it takes, grouped under
//! headings; `-h` shows the common ones in a page, `--help` all of them with their
//! details (the advanced ones carry clap's `hide_short_help`).
//!
//! The test options are global (they may come before or after the subcommand, and a
//! server refuses a client's by name instead of calling it unknown), so clap would list
//! every one under every subcommand: [`command`] hides, per subcommand, those it refuses
//! (`CLIENT_OPTIONS` for `server`, `UNUSED_OPTIONS`, in `perf`) or that are
//! `loopback`'s alone ([`LOOPBACK_ONLY`]).

use super::opts::Cli;
use clap::CommandFactory;

/// Options for `loopback` alone (clap ids): the other subcommands refuse them.
pub const LOOPBACK_ONLY: [&str; 3] = ["engines", "shared_engine", "qps"];

/// The clap ids a subcommand's help leaves out.
pub fn hidden_in(subcommand: &str) -> Vec<&'static str> {
    let mut ids: Vec<&'static str> = super::UNUSED_OPTIONS
        .iter()
        .filter(|(cmd, ..)| *cmd == subcommand)
        .map(|(_, id, ..)| *id)
        .collect();
    if subcommand == "server" {
        ids.extend(super::CLIENT_OPTIONS.iter().map(|(id, _)| *id));
    }
    if subcommand != "loopback" {
        ids.extend(LOOPBACK_ONLY);
    }
    ids
}

/// The command line of `mrc-perf` (the derive's), each subcommand's help limited to its
/// options.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    // propagates the global options into the subcommands, so they can be hidden there
    cmd.build();
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        let hidden = hidden_in(&name);
        cmd = cmd.mut_subcommand(&name, |sc| {
            sc.mut_args(|a| {
                if hidden.contains(&a.get_id().as_str()) {
                    a.hide(true)
                } else {
                    a
                }
            })
        });
    }
    cmd
}
