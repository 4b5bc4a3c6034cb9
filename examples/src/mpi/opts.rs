//! The command line of `mrc-perf mpi` and the plan every rank derives from it.
//!
//! The `mpi` subcommand takes the global test options of `mrc-perf` (`-s`, `-n`, `-D`,
//! `--paths`, `--mtu`, `--cc`, `--verify`, `--rate-limit`, `--tx-depth`, `--timeout`, ...)
//! and the options of [`MpiOpts`]. Every rank turns them into one [`Plan`]; the ranks
//! compare a hash of it ([`Plan::hash`]) before they open a socket.

use crate::perf::opts::{Fabric, TestKind, TestOpts, TestParams};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

/// Who sends to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Rank `r` and rank `r ^ 1` send to each other (an even number of ranks).
    Pairs,
    /// Every rank sends to one other rank and receives from one: a derangement drawn from
    /// `--seed`.
    Permutation,
    /// Every rank sends to every other rank.
    #[value(alias = "alltoall", alias = "all_to_all")]
    AllToAll,
    /// Every rank but `--root` sends to `--root` (N-1 : 1).
    Incast,
    /// `--root` sends to every other rank.
    #[value(alias = "one_to_all")]
    OneToAll,
    /// Ring allreduce of `-s` bytes (reduce-scatter, then allgather), the sum checked
    /// exactly on every rank.
    Allreduce,
}

/// When the streams send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// As fast as the window allows, `-n` messages (or `-D` seconds) per stream.
    Continuous,
    /// Steps of `--on-ms` sending and `--off-ms` silence, every rank's steps starting at
    /// the same instant (barrier, then a common start time on rank 0's clock).
    Training,
    /// Each stream on its own clock: bursts of `--burst-messages` messages at an average
    /// of `--rate-limit` Gb/s (perftest's `--rate_limit` / `--burst_size`), unsynchronised.
    Storage,
    /// `--burst-messages` messages to every destination every `--period-us` us, from one
    /// common instant on every rank (clock offsets to rank 0 measured through MPI).
    #[value(alias = "sync_burst")]
    SyncBurst,
}

/// Element type of the allreduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// Unsigned 32-bit integers, summed with wrap-around.
    U32,
    /// 32-bit floats holding small integers (0..=1023), so that every partial sum is exact
    /// whatever the order (below 2^24).
    F32,
}

/// Options of `mrc-perf mpi` (the global test options apply too).
#[derive(Clone, Debug, Args)]
pub struct MpiOpts {
    /// Traffic pattern.
    #[arg(long, value_enum, default_value_t = Pattern::AllToAll)]
    pub pattern: Pattern,
    /// Root rank of incast and one-to-all.
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    /// Burst mode.
    #[arg(long, value_enum, default_value_t = Mode::Continuous)]
    pub mode: Mode,
    /// Training: milliseconds each step sends.
    #[arg(long = "on-ms", value_name = "MS", default_value_t = 10.0)]
    pub on_ms: f64,
    /// Training: milliseconds of silence after each step's sending.
    #[arg(long = "off-ms", value_name = "MS", default_value_t = 10.0)]
    pub off_ms: f64,
    /// Storage and sync-burst: messages of `-s` bytes per burst and destination (perftest's
    /// `--burst_size`; mrc-perf's `--burst-size` is packets per EV).
    #[arg(long = "burst-messages", value_name = "N", default_value_t = 1)]
    pub burst_messages: u64,
    /// Sync-burst: microseconds from one burst's start to the next.
    #[arg(long = "period-us", value_name = "US", default_value_t = 1000.0)]
    pub period_us: f64,
    /// Allreduce element type.
    #[arg(long, value_enum, default_value_t = Dtype::U32)]
    pub dtype: Dtype,
    /// Seed of the permutation and of the storage streams' phases.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Address this rank binds its UDP sockets to [default: the address of `--bind-net`,
    /// else this host's first non-loopback IPv4 address, else 127.0.0.1]; or one per
    /// plane, comma-separated (`--bind 10.0.0.1,10.1.0.1`, every rank as many): each
    /// connection sprays its EVs over all of them (docs/PLANES.md).
    #[arg(long, value_name = "IP[,IP...]")]
    pub bind: Option<String>,
    /// Pick the bind address among this host's interface addresses: the first inside this
    /// network (`10.0.0.0/8`, `2001:db8::/32`); one network per plane, comma-separated
    /// (`10.0.0.0/16,10.1.0.0/16`), for one address per plane.
    #[arg(
        long = "bind-net",
        value_name = "CIDR[,CIDR...]",
        conflicts_with = "bind"
    )]
    pub bind_net: Option<String>,
    /// Address the other ranks send to [default: the bound one] (behind NAT, or a
    /// multi-homed host); per rank, not compared across ranks.
    #[arg(long, value_name = "IP")]
    pub advertise: Option<std::net::IpAddr>,
    /// Open this rank's engine and sockets inside network namespace NAME (`ip netns`'s
    /// /run/netns/NAME, or a path); `{rank}` in it is replaced by the rank, so one command
    /// puts each rank on its own host of the SRv6 testbed (`--netns mrctb-h{rank}`). MPI's
    /// own traffic stays in the launcher's namespace. Needs CAP_SYS_ADMIN (root).
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// With `--srv6`: the testbed plan the spines and SIDs come from (the JSON of
    /// `mrc-testbed.sh plan`, kept in /run/mrctb/PREFIXplan.json) [default: the designer's
    /// default plan, 2 hosts].
    #[arg(long = "testbed-plan", value_name = "FILE")]
    pub testbed_plan: Option<std::path::PathBuf>,
    /// Test hook: `RANK:exit` makes that rank exit in the data phase, `RANK:hang` makes it
    /// stop there (a killed or stopped process), to exercise the failure handling.
    #[arg(long = "inject-failure", value_name = "RANK:WHAT", hide = true)]
    pub inject_failure: Option<String>,
}

/// Default bursts (steps, iterations) of the burst modes and the allreduce without `-n`
/// or `-D`.
pub fn default_bursts(pattern: Pattern, mode: Mode) -> u64 {
    match (pattern, mode) {
        (Pattern::Allreduce, _) => 10,
        (_, Mode::Continuous) => 1,
        (_, Mode::Training) => 10,
        (_, Mode::Storage) => 1000,
        (_, Mode::SyncBurst) => 100,
    }
}

/// Most bursts per stream (each one's completion time goes to rank 0).
pub const MAX_BURSTS: u64 = 1_000_000;

/// Most ranks.
pub const MAX_RANKS: u32 = 4096;

/// A failure the test hook injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Injected {
    /// `process::exit(1)` in the data phase.
    Exit,
    /// Sleep for ever in the data phase.
    Hang,
}

/// What every rank runs: the options, checked, with the defaults filled in. Equal on every
/// rank (compared by [`Plan::hash`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Ranks in the job.
    pub ranks: u32,
    /// Pattern.
    pub pattern: Pattern,
    /// Root of incast / one-to-all.
    pub root: u32,
    /// Burst mode.
    pub mode: Mode,
    /// Continuous mode: messages per stream, or `None` with `duration_s`. Other modes:
    /// `None`.
    pub messages: Option<u64>,
    /// Continuous mode with `-D`: seconds.
    pub duration_s: Option<f64>,
    /// Burst modes and allreduce: bursts (steps, iterations) per stream.
    pub bursts: u64,
    /// Training: on time, ns.
    pub on_ns: u64,
    /// Training: off time, ns.
    pub off_ns: u64,
    /// Messages per burst (storage, sync-burst).
    pub burst_messages: u64,
    /// Start-to-start time of bursts, ns (training: on + off; sync-burst: the period;
    /// storage: the rate limit's; continuous and allreduce-continuous: 0).
    pub period_ns: u64,
    /// Allreduce element type.
    pub dtype: Dtype,
    /// Seed.
    pub seed: u64,
    /// The transport's and the streams' parameters (size, window, EVs, controller).
    pub params: TestParams,
    /// `--timeout`, seconds.
    pub timeout_s: f64,
    /// The test hook.
    pub inject: Option<(u32, Injected)>,
}

impl Plan {
    /// Checks the options for a job of `ranks` ranks.
    ///
    /// # Errors
    /// A message naming the bad or unsupported option.
    pub fn new(t: &TestOpts, o: &MpiOpts, ranks: u32) -> Result<Plan, String> {
        if ranks < 2 {
            return Err(format!(
                "mrc-perf mpi needs at least 2 ranks (mpirun -np N), got {ranks}"
            ));
        }
        if ranks > MAX_RANKS {
            return Err(format!("at most {MAX_RANKS} ranks, got {ranks}"));
        }
        if t.fabric != Fabric::Udp {
            return Err("mrc-perf mpi runs on --fabric udp only".into());
        }
        if t.test != TestKind::Bw {
            return Err("mrc-perf mpi runs the bw test only (no --test lat)".into());
        }
        for (set, flag) in [
            (t.all, "-a/--all"),
            (
                t.bidirectional,
                "-b/--bidirectional (the pattern says who sends)",
            ),
            (t.qps != 1, "-q/--qps (one QP per pair of ranks)"),
            (t.cpu.is_some(), "--cpu"),
            (t.udp_port.is_some(), "--udp-port (each rank binds port 0)"),
            (t.interval.is_some(), "-i/--interval"),
        ] {
            if set {
                return Err(format!("mrc-perf mpi does not take {flag}"));
            }
        }
        let params = t.params()?;
        if o.root >= ranks {
            return Err(format!("--root {} is not a rank (0..{ranks})", o.root));
        }
        if o.pattern == Pattern::Pairs && ranks % 2 != 0 {
            return Err(format!(
                "--pattern pairs needs an even number of ranks, got {ranks}"
            ));
        }
        if o.pattern == Pattern::Allreduce {
            if params.size % 4 != 0 || params.size < 4 * u64::from(ranks) {
                return Err(format!(
                    "--pattern allreduce: -s {} must be a multiple of 4 bytes and at least \
                     4 x ranks ({})",
                    params.size,
                    4 * u64::from(ranks)
                ));
            }
            if o.mode == Mode::Storage {
                return Err(
                    "--pattern allreduce is a collective: --mode continuous, training or \
                     sync-burst"
                        .into(),
                );
            }
        }
        if o.burst_messages == 0 || o.burst_messages > 1 << 20 {
            return Err(format!(
                "--burst-messages must be in 1..=1048576, got {}",
                o.burst_messages
            ));
        }
        let ms = |x: f64, flag: &str| -> Result<u64, String> {
            if !(x > 0.0 && x <= 1e6) {
                return Err(format!("{flag} must be in (0, 1000000] ms, got {x}"));
            }
            Ok((x * 1e6) as u64)
        };
        let (on_ns, off_ns) = (ms(o.on_ms, "--on-ms")?, ms(o.off_ms, "--off-ms")?);
        let period_ns = match o.mode {
            Mode::Continuous => 0,
            Mode::Training => on_ns + off_ns,
            Mode::SyncBurst => {
                if !(o.period_us >= 1.0 && o.period_us <= 1e9) {
                    return Err(format!(
                        "--period-us must be in 1..=1000000000, got {}",
                        o.period_us
                    ));
                }
                (o.period_us * 1e3) as u64
            }
            Mode::Storage => {
                let Some(r) = params.rate_limit_gbps else {
                    return Err(
                        "--mode storage needs --rate-limit GBPS (each stream's average, \
                         perftest's --rate_limit)"
                            .into(),
                    );
                };
                let bits = (o.burst_messages * params.size * 8) as f64;
                ((bits / (r * 1e9)) * 1e9).max(1.0) as u64
            }
        };
        // the rate limit is the storage mode's burst spacing, not a per-message pacing
        if o.mode != Mode::Storage && params.rate_limit_gbps.is_some() {
            return Err(format!(
                "--rate-limit is the storage mode's average rate per stream (--mode storage); \
                 --mode {} paces by its schedule",
                o.mode
                    .to_possible_value()
                    .map_or("?".to_string(), |v| v.get_name().to_string())
            ));
        }
        let continuous = o.mode == Mode::Continuous && o.pattern != Pattern::Allreduce;
        let (messages, duration_s, bursts) = if continuous {
            (params.iters, params.duration_s, 1)
        } else {
            let b = match (t.iters, t.duration) {
                (Some(n), _) => n,
                (None, Some(d)) if period_ns > 0 => (d * 1e9 / period_ns as f64) as u64,
                (None, Some(_)) => {
                    return Err("-D needs a burst mode with a period (or use -n)".into());
                }
                (None, None) => default_bursts(o.pattern, o.mode),
            };
            if b == 0 || b > MAX_BURSTS {
                return Err(format!(
                    "bursts (-n, or -D / period) must be in 1..={MAX_BURSTS}, got {b}"
                ));
            }
            (None, None, b)
        };
        if o.pattern == Pattern::Allreduce && bursts > 65535 {
            return Err(format!(
                "--pattern allreduce: at most 65535 iterations (-n), got {bursts}"
            ));
        }
        let inject = o.inject_failure.as_deref().map(parse_inject).transpose()?;
        Ok(Plan {
            ranks,
            pattern: o.pattern,
            root: o.root,
            mode: o.mode,
            messages,
            duration_s,
            bursts,
            on_ns,
            off_ns,
            burst_messages: o.burst_messages,
            period_ns,
            dtype: o.dtype,
            seed: o.seed,
            params,
            timeout_s: t.timeout,
            inject,
        })
    }

    /// FNV-1a (64-bit) of the plan's JSON: equal plans, equal hashes on every host.
    pub fn hash(&self) -> u64 {
        fnv1a(self.to_json().as_bytes())
    }

    /// The plan as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The fields of `self` and `other` that differ, `name: ours vs theirs`, from their
    /// JSON (top level and `params`).
    pub fn differences(&self, other_json: &str) -> Vec<String> {
        let (Ok(a), Ok(b)) = (
            serde_json::to_value(self),
            serde_json::from_str::<serde_json::Value>(other_json),
        ) else {
            return vec!["(unreadable plan)".into()];
        };
        let mut out = Vec::new();
        diff_values("", &a, &b, &mut out);
        out
    }
}

fn diff_values(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    match (a, b) {
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let n = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                let null = serde_json::Value::Null;
                diff_values(
                    &n,
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        _ if a != b => out.push(format!("{prefix}: {a} vs {b}")),
        _ => {}
    }
}

/// FNV-1a, 64-bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn parse_inject(s: &str) -> Result<(u32, Injected), String> {
    let bad = || format!("--inject-failure: want RANK:exit or RANK:hang, got {s:?}");
    let (r, w) = s.split_once(':').ok_or_else(bad)?;
    let r: u32 = r.parse().map_err(|_| bad())?;
    let w = match w {
        "exit" => Injected::Exit,
        "hang" => Injected::Hang,
        _ => return Err(bad()),
    };
    Ok((r, w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::opts::Cli;
    use clap::Parser;

    fn plan(args: &[&str], ranks: u32) -> Result<Plan, String> {
        let mut v = vec!["mrc-perf", "mpi"];
        v.extend_from_slice(args);
        let cli = Cli::try_parse_from(v).map_err(|e| e.to_string())?;
        let crate::perf::opts::Command::Mpi(o) = &cli.cmd else {
            panic!("not mpi");
        };
        Plan::new(&cli.test, o, ranks)
    }

    #[test]
    fn plans_fill_defaults_and_hash_differs_on_any_field() {
        let a = plan(&["--pattern", "incast", "-s", "4096", "-n", "100"], 4).unwrap();
        assert_eq!(a.messages, Some(100));
        assert_eq!(a.bursts, 1);
        let b = plan(&["--pattern", "incast", "-s", "8192", "-n", "100"], 4).unwrap();
        assert_ne!(a.hash(), b.hash());
        assert_eq!(
            a.hash(),
            plan(&["-n", "100", "--pattern", "incast", "-s", "4096"], 4)
                .unwrap()
                .hash()
        );
        let d = a.differences(&b.to_json());
        // the region is size x tx-depth (128 for both)
        assert_eq!(
            d,
            vec![
                "params.region_size: 524288 vs 1048576".to_string(),
                "params.size: 4096 vs 8192".to_string()
            ]
        );
    }

    #[test]
    fn burst_modes_count_bursts_and_periods() {
        let p = plan(
            &["--mode", "sync_burst", "--period-us", "500", "-D", "1"],
            4,
        )
        .unwrap();
        assert_eq!((p.bursts, p.period_ns), (2000, 500_000));
        let p = plan(&["--mode", "training", "--on-ms", "3", "--off-ms", "2"], 4).unwrap();
        assert_eq!((p.bursts, p.period_ns), (10, 5_000_000));
        // 4 messages of 65536 B at 1 Gb/s: 2097152 bits, 2.097152 ms
        let p = plan(
            &[
                "--mode",
                "storage",
                "--rate-limit",
                "1",
                "--burst-messages",
                "4",
                "-s",
                "65536",
            ],
            3,
        )
        .unwrap();
        assert_eq!(p.period_ns, 2_097_152);
        assert_eq!(p.params.rate_limit_gbps, Some(1.0));
        assert!(
            plan(&["--mode", "storage"], 3)
                .unwrap_err()
                .contains("--rate-limit")
        );
    }

    #[test]
    fn refusals_name_the_option() {
        assert!(
            plan(&["--pattern", "pairs"], 3)
                .unwrap_err()
                .contains("even")
        );
        assert!(plan(&["--root", "4"], 4).unwrap_err().contains("--root"));
        assert!(plan(&["-b"], 4).unwrap_err().contains("--bidirectional"));
        assert!(plan(&[], 1).unwrap_err().contains("at least 2 ranks"));
        assert!(
            plan(&["--pattern", "allreduce", "-s", "6"], 2)
                .unwrap_err()
                .contains("multiple of 4")
        );
        assert!(
            plan(&["--inject-failure", "x"], 2)
                .unwrap_err()
                .contains("RANK:exit")
        );
        assert_eq!(
            plan(&["--inject-failure", "1:hang"], 2).unwrap().inject,
            Some((1, Injected::Hang))
        );
    }
}
