//! `mrc-perf`: the two-host benchmark in the manner of perftest's `ib_write_bw` /
//! `ib_write_lat`, over the io_uring UDP datapath. Subcommands `server`, `client HOST`,
//! `loopback` (both ends in this process) and `baseline` (raw UDP and kernel TCP ceilings).

pub mod baseline;
pub mod end;
pub mod help;
pub mod interrupt;
pub mod loops;
pub mod notices;
pub mod opts;
pub mod peak;
pub mod report;
pub mod run;
pub mod srv6;
pub mod udp_port;
pub mod units;
pub mod verbs;

pub use interrupt::Signal;
use opts::{Cli, Command, TestKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::time::Duration;

/// A failed run: what it still prints on stdout (its report, when it got that far; empty
/// otherwise) and the error message for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The report (table or JSON with `"ok": false`), or empty.
    pub stdout: String,
    /// The error, one line.
    pub message: String,
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError {
            stdout: String::new(),
            message,
        }
    }
}

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

/// Runs the command line `args`; returns the text for stdout, or the failure.
///
/// # Errors
/// Any failure, with the report it still has ([`CliError`]).
pub fn run_cli(cli: Cli) -> Result<String, CliError> {
    let p = cli.test.params()?;
    if cli.test.engines.is_some() && !matches!(cli.cmd, Command::Loopback { .. }) {
        return Err("--engines is for loopback (a client or a server runs one QP)".into());
    }
    if cli.test.shared_engine && !matches!(cli.cmd, Command::Loopback { .. }) {
        return Err("--shared-engine is for loopback (both ends in this process)".into());
    }
    if cli.test.shared_engine && cli.test.engines.is_some_and(|k| k != 1) {
        return Err(
            "--shared-engine runs both ends on one engine thread: --engines 1 or none (with \
             more, a connection's two ends would be on different engines)"
                .into(),
        );
    }
    let timeout = Duration::from_secs_f64(cli.test.timeout);
    let progress = Some(report::ProgressOpts {
        series: cli
            .test
            .series_ms
            .map(|ms| Duration::from_millis(u64::from(ms))),
        unit: report::BwUnit::from_report_gbits(cli.test.report_gbits),
        interval: Duration::from_secs_f64(cli.test.interval_s()?),
        every_interval: cli.test.interval.is_some(),
        print: true,
    });
    let fabric = match cli.test.fabric {
        opts::Fabric::Udp => run::LocalFabric::Udp,
        opts::Fabric::Verbs => run::LocalFabric::Verbs(verbs::VerbsOpts {
            device: cli.test.ib_dev.clone(),
            port: cli.test.ib_port,
            gid_index: cli.test.gid_index,
        }),
    };
    if let run::LocalFabric::Verbs(o) = &fabric {
        // The server's datagram size is its client's to choose.
        let chooses_mtu = !matches!(cli.cmd, opts::Command::Server { .. });
        verbs::precheck(o, chooses_mtu.then_some(&p))
            .map_err(|e| format!("--fabric verbs: {e}"))?;
    }
    if let Some(cpu) = cli.test.cpu {
        // before any socket or thread: a loopback's server end must not start first
        run::check_cpu(cpu)?;
    }
    let local = run::LocalOpts {
        traffic_class: cli.test.traffic_class()?,
        engine_cpu: cli.test.cpu,
        fabric,
        udp: run::UdpMechanics {
            multishot: cli.test.udp_multishot,
            zerocopy: cli.test.udp_zerocopy,
            coop_taskrun: cli.test.udp_coop_taskrun,
        },
        huge_pages: cli.test.huge_pages,
        context: None,
        plane_ips: local_planes(&cli.cmd)?,
    };
    if local.plane_ips.len() > 1 && !matches!(local.fabric, run::LocalFabric::Udp) {
        return Err(
            "--fabric verbs runs on one device port: several planes (--bind A,B, --planes) \
             are for --fabric udp"
                .into(),
        );
    }
    if matches!(cli.cmd, Command::Loopback { planes, .. } if planes > 1)
        && (cli.test.engines.is_some() || cli.test.shared_engine)
    {
        return Err(
            "--planes runs one engine per end: leave out --engines / --shared-engine".into(),
        );
    }
    let psk = cli
        .test
        .psk_file
        .as_deref()
        .map(opts::read_psk)
        .transpose()?;
    let env = RunEnv {
        timeout,
        progress,
        local: &local,
        psk: psk.as_deref(),
        udp_port: cli.test.udp_port,
        port: cli.test.port,
        gbits: cli.test.report_gbits,
        json: cli.test.json,
        // --shared-engine: one engine for both ends
        engines: cli.test.engines.or(cli.test.shared_engine.then_some(1)),
        shared_engine: cli.test.shared_engine,
        server_context: None,
    };
    let (gbits, json) = (env.gbits, env.json);
    match &cli.cmd {
        Command::Loopback { .. } | Command::Client { .. } if cli.test.all => {
            let mut runs: Vec<(opts::TestParams, run::EndResult, String)> = Vec::new();
            let mut failure = None;
            for size in opts::ALL_SIZES {
                if interrupt::pending().is_some() {
                    failure = Some(format!("-a at --size {size}: {}", interrupt::INTERRUPTED));
                    break;
                }
                let o = opts::TestOpts {
                    size: Some(size),
                    ..cli.test.clone()
                };
                let sp = o.params()?;
                match run_qps(&cli.cmd, &sp, &env, cli.test.qps) {
                    Ok((r, mode)) => runs.push((sp, r, mode)),
                    Err(e) => {
                        // each size is a test of its own: a one-shot server is gone after
                        // the first
                        let hint = if matches!(cli.cmd, Command::Client { .. }) && !runs.is_empty()
                        {
                            " (-a runs one test per size: run the server with --persistent)"
                        } else {
                            ""
                        };
                        failure = Some(format!("-a at --size {size}: {}{hint}", e.message));
                        break;
                    }
                }
            }
            let out = report::sweep_report(&runs, gbits, json, failure.as_deref());
            let bad: u64 = runs
                .iter()
                .map(|(_, r, _)| r.peer_recv.bad_bytes + r.recv.bad_bytes)
                .sum();
            match failure {
                Some(m) => Err(CliError {
                    stdout: out,
                    message: m,
                }),
                None if bad > 0 => Err(CliError {
                    stdout: out,
                    message: format!("verify failed: {bad} bad bytes"),
                }),
                None => Ok(out),
            }
        }
        Command::Loopback { .. } | Command::Client { .. } => {
            if let Some(line) = notices::tx_depth(&p, cli.test.tx_depth) {
                eprintln!("{line}");
            }
            let (r, mode) = run_qps(&cli.cmd, &p, &env, cli.test.qps)?;
            finish(&p, &r, gbits, json, &mode)
        }
        Command::Server {
            bind,
            persistent,
            limits,
        } => {
            let (persistent, limits) = (*persistent, *limits);
            // one address, or one per plane (local.plane_ips): TCP on the first
            let ip: IpAddr = opts::parse_plane_list("--bind", bind)?[0];
            let listener = TcpListener::bind(SocketAddr::new(ip, cli.test.port))
                .map_err(|e| format!("cannot listen on {ip}:{}: {e}", cli.test.port))?;
            let udp = SocketAddr::new(
                ip,
                cli.test
                    .udp_port
                    .unwrap_or(mrc_fabric::udp::DEFAULT_RX_PORT),
            );
            // Held from now on (lent to each test's datapath): a clash fails here, not in
            // the first client's test. The verbs datapath has no UDP port of its own.
            let mut port = match local.fabric {
                run::LocalFabric::Udp => {
                    udp_port::Reservation::take(udp).map_err(|e| e.to_string())?
                }
                run::LocalFabric::Verbs(_) => udp_port::Reservation::none(udp),
            };
            eprintln!(
                "mrc-perf server: waiting for a client on TCP {}, UDP {udp}{}",
                SocketAddr::new(ip, cli.test.port),
                if persistent { " (persistent)" } else { "" }
            );
            let mut queue = run::ClientQueue::new(listener)?;
            let mut serve = || match run::serve_one(
                &mut queue,
                udp,
                &mut port,
                timeout,
                None,
                &local,
                &limits,
                psk.as_deref(),
            ) {
                Ok((sp, r)) => server_report(&sp, &r),
                Err(run::ServeFailure::Setup(m)) => Err(m.into()),
                Err(run::ServeFailure::Test { params, error }) => Err(CliError {
                    stdout: server_failed_report(&params, error.partial.as_deref(), &error.message),
                    message: error.message,
                }),
            };
            if !persistent {
                return serve();
            }
            // One client after another; a failed test is reported and the next served,
            // until a signal ends a test.
            for n in 1u64.. {
                let (report, error) = match serve() {
                    Ok(o) => (o, None),
                    Err(e) => (e.stdout, Some(e.message)),
                };
                if !report.is_empty() {
                    use std::io::Write;
                    print!(" client {n}:\n{report}");
                    let _ = std::io::stdout().flush();
                }
                if interrupt::pending().is_some() {
                    break;
                }
                if let Some(m) = error {
                    eprintln!("mrc-perf server: client {n}: {m}");
                }
                // the report is out: a signal while waiting for the next client exits
                interrupt::disarm();
            }
            Ok(String::new())
        }
        Command::Baseline { ipv6 } => {
            let ip: IpAddr = if *ipv6 {
                Ipv6Addr::LOCALHOST.into()
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            let results = match p.test {
                TestKind::Bw => vec![
                    baseline::udp_blast(ip, &p, env.local.udp)?,
                    baseline::tcp(ip, &p)?,
                ],
                TestKind::Lat => vec![baseline::udp_pingpong(ip, &p, env.local.udp)?],
            };
            Ok(baseline::render(&results, json))
        }
        Command::Mpi(_) => Err(crate::mpi::NOT_HERE.into()),
    }
}

/// What every run of one command line shares.
#[derive(Clone, Copy)]
struct RunEnv<'a> {
    timeout: Duration,
    progress: Option<report::ProgressOpts>,
    local: &'a run::LocalOpts,
    psk: Option<&'a [u8]>,
    udp_port: Option<u16>,
    port: u16,
    /// `--report-gbits` and `--json`: the form of a failed test's partial report.
    gbits: bool,
    json: bool,
    /// `--engines`.
    engines: Option<u32>,
    /// `--shared-engine`: the loopback's two ends in one context (of one engine).
    shared_engine: bool,
    /// The context the loopback's server end creates its QP in (`--engines`).
    server_context: Option<&'a run::SharedContext>,
}

impl RunEnv<'_> {
    /// A failed test as the CLI reports it: the partial report of what this end measured
    /// until the failure (`"ok": false` and the error in it) on stdout, when there is one.
    fn failed(&self, p: &opts::TestParams, mode: &str, e: run::RunError) -> CliError {
        CliError {
            stdout: e
                .partial
                .map(|r| run::client_report(p, &r, self.gbits, self.json, mode))
                .unwrap_or_default(),
            message: e.message,
        }
    }
}

/// Most `-q/--qps`.
pub const MAX_QPS: u32 = 16;

/// `qps` tests of `loopback` in parallel (`-q`), each its own QP with its own engine
/// thread and both ends (with `--engines K`: the QPs of each end in one context of K
/// engine threads); the results summed by [`run::EndResult::sum`]. Only QP 0 prints
/// the progress line. One QP: [`run_one`].
fn run_qps(
    cmd: &Command,
    p: &opts::TestParams,
    env: &RunEnv<'_>,
    qps: u32,
) -> Result<(run::EndResult, String), CliError> {
    if qps == 0 || qps > MAX_QPS {
        return Err(format!("-q/--qps must be in 1..={MAX_QPS}, got {qps}").into());
    }
    if let Some(k) = env.engines {
        let (local, server_context, mode) = engine_contexts(cmd, p, env, qps, k)?;
        let env_k = RunEnv {
            local: &local,
            engines: None,
            shared_engine: false,
            server_context: Some(&server_context),
            ..*env
        };
        let (r, m) = run_qps(cmd, p, &env_k, qps)?;
        return Ok((r, format!("{m}, {mode}")));
    }
    if qps == 1 {
        return run_one(cmd, p, env);
    }
    if !matches!(cmd, Command::Loopback { .. }) {
        return Err(format!(
            "-q {qps}: several QPs run in loopback only (a server serves one client at a \
             time); over two hosts, one QP spreads over --paths EVs"
        )
        .into());
    }
    let results: Vec<Result<(run::EndResult, String), CliError>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..qps)
            .map(|i| {
                let env_i = RunEnv {
                    progress: if i == 0 {
                        env.progress
                    } else {
                        env.progress
                            .map(|o| report::ProgressOpts { print: false, ..o })
                    },
                    local: env.local,
                    ..*env
                };
                s.spawn(move || run_one(cmd, p, &env_i))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("QP thread panicked".into()))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(results.len());
    let mut mode = String::new();
    for (i, r) in results.into_iter().enumerate() {
        let (r, m) = r.map_err(|e| CliError {
            stdout: e.stdout,
            message: format!("QP {i} of -q {qps}: {}", e.message),
        })?;
        mode = m;
        all.push(r);
    }
    Ok((run::EndResult::sum(all), format!("{mode}, {qps} QPs")))
}

/// `--engines k` with `-q qps`: the loopback client end's options with a context of `k`
/// engine threads, the server end's context (its own of `k`, or with `--shared-engine` the
/// client's), and the mode line's words for them.
///
/// # Errors
/// `k` outside 1..=`qps`, a command other than `loopback`, verbs, `--progress caller`,
/// `--cpu`, `--udp-port` other than 0 with `--shared-engine`, or an engine that cannot
/// start.
fn engine_contexts(
    cmd: &Command,
    p: &opts::TestParams,
    env: &RunEnv<'_>,
    qps: u32,
    k: u32,
) -> Result<(run::LocalOpts, run::SharedContext, String), CliError> {
    let Command::Loopback { ipv6, .. } = cmd else {
        return Err("--engines is for loopback (a client or a server runs one QP)".into());
    };
    if k == 0 || k > qps {
        return Err(format!(
            "--engines must be in 1..={qps} (-q {qps}: more engines than QPs would idle), got {k}"
        )
        .into());
    }
    let flag = if env.shared_engine {
        "--shared-engine"
    } else {
        "--engines"
    };
    if !matches!(env.local.fabric, run::LocalFabric::Udp) {
        return Err(format!("{flag} runs the UDP datapath only (--fabric udp)").into());
    }
    if p.progress != opts::ProgressMode::Thread {
        return Err(
            format!("{flag} needs --progress thread (engine threads move the packets)").into(),
        );
    }
    if env.local.engine_cpu.is_some() {
        return Err(format!(
            "--cpu pins one engine thread; with {flag} the engines run on any CPU"
        )
        .into());
    }
    let ip: IpAddr = if *ipv6 {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    };
    if env.shared_engine && env.udp_port.is_some_and(|port| port != 0) {
        return Err(
            "--udp-port names the server end's receive port; with --shared-engine \
                    both ends receive on the client's (kernel-chosen)"
                .into(),
        );
    }
    let k = k as usize;
    let client = run::shared_context(p, SocketAddr::new(ip, 0), env.local, k)?;
    let plural = if k == 1 { "" } else { "s" };
    let (server, words) = if env.shared_engine {
        let words = format!("{k} engine{plural} shared by both ends");
        (client.clone(), words)
    } else {
        let server_bind = SocketAddr::new(ip, env.udp_port.unwrap_or(0));
        let server = run::shared_context(p, server_bind, env.local, k)?;
        (server, format!("{k} engine{plural} per end"))
    };
    let local = run::LocalOpts {
        context: Some(client),
        ..env.local.clone()
    };
    Ok((local, server, words))
}

/// One test of `loopback` or `client` with the parameters `p`: the results and the
/// report's mode line.
fn run_one(
    cmd: &Command,
    p: &opts::TestParams,
    env: &RunEnv<'_>,
) -> Result<(run::EndResult, String), CliError> {
    let timeout = env.timeout;
    match cmd {
        Command::Loopback { ipv6, planes } => {
            let ipv6 = *ipv6;
            if p.srv6.is_some() && !ipv6 {
                return Err("--srv6 needs IPv6: add -6 (--ipv6)".into());
            }
            let server_planes = loopback_planes(*planes, 2);
            let ip: IpAddr = if ipv6 {
                Ipv6Addr::LOCALHOST.into()
            } else if let Some(&first) = server_planes.first() {
                first
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            let listener =
                TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| format!("bind {ip}: {e}"))?;
            let server_addr = listener.local_addr().map_err(|e| e.to_string())?;
            let udp = SocketAddr::new(ip, env.udp_port.unwrap_or(0));
            // the loopback's server end: the same datapath and marking, any CPU
            let server_local = run::LocalOpts {
                engine_cpu: None,
                context: env.server_context.cloned(),
                plane_ips: server_planes,
                ..env.local.clone()
            };
            let server_psk = env.psk.map(<[u8]>::to_vec);
            let server = std::thread::spawn(move || {
                run::serve_one(
                    &mut run::ClientQueue::new(listener)?,
                    udp,
                    &mut udp_port::Reservation::none(udp),
                    timeout,
                    Some(timeout),
                    &server_local,
                    &opts::ServerLimits::default(),
                    server_psk.as_deref(),
                )
                .map(|_| ())
                .map_err(|e| e.to_string())
            });
            let client_ip = env.local.plane_ips.first().copied().unwrap_or(ip);
            let client = run::run_client(
                server_addr,
                SocketAddr::new(client_ip, 0),
                p,
                timeout,
                env.progress,
                env.local,
                env.psk,
            );
            let srv = server
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            let mode = format!("loopback {ip}");
            let (r, _) = client.map_err(|e| env.failed(p, &mode, e))?;
            srv.map_err(|e| format!("server: {e}"))?;
            Ok((r, mode))
        }
        Command::Client { host, .. } => {
            check_host_without_port(host)?;
            // every address the name resolves to, in the resolver's order: `localhost`
            // reaches a server on ::1 as well as one on 127.0.0.1
            let addrs: Vec<SocketAddr> = (host.as_str(), env.port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {host}: {e}"))?
                .collect();
            if addrs.is_empty() {
                return Err(format!("{host} resolves to no address").into());
            }
            // --srv6: this end's addresses and the server against the testbed's plan before
            // any connection (a --bind that is not this host's, in plane order, is refused
            // here, not after a bootstrap)
            if let Some(mode) = p.srv6 {
                srv6::steering(
                    mode,
                    p.srv6_via,
                    addrs[0].ip(),
                    &env.local.plane_ips,
                    p.paths,
                    p.burst_size,
                )?;
            }
            let from = env.local.plane_ips.first().copied();
            let (stream, addr) = run::connect_any(&addrs, from, timeout)?;
            let any: IpAddr = if addr.is_ipv6() {
                Ipv6Addr::UNSPECIFIED.into()
            } else {
                Ipv4Addr::UNSPECIFIED.into()
            };
            // one --bind address: UDP there too; several: every plane (wildcard receive)
            let ip = match env.local.plane_ips.as_slice() {
                [one] => *one,
                _ => any,
            };
            let udp = SocketAddr::new(ip, env.udp_port.unwrap_or(0));
            let mut p = p.clone();
            if let Some(mode) = p.srv6 {
                p.steering = srv6::steering(
                    mode,
                    p.srv6_via,
                    addr.ip(),
                    &env.local.plane_ips,
                    p.paths,
                    p.burst_size,
                )?;
            }
            let mode = format!("client of {addr}");
            let (r, _) = run::run_client_on(
                stream,
                addr,
                udp,
                &p,
                timeout,
                env.progress,
                env.local,
                env.psk,
            )
            .map_err(|e| env.failed(&p, &mode, e))?;
            Ok((r, mode))
        }
        _ => Err("only loopback and client run a test".into()),
    }
}

/// The server's lines about a test that ended early (`message`): what it received until
/// then (when its counts could be read) and why it ended: a signal (` server: SIGINT:
/// ...`, [`interrupt`]) or the failure.
fn server_failed_report(
    sp: &opts::TestParams,
    partial: Option<&run::EndResult>,
    message: &str,
) -> String {
    let mut o = partial.map(|r| server_lines(sp, r)).unwrap_or_default();
    match interrupt::pending() {
        Some(sig) => {
            o += &format!(
                " server: {}: the test ended early; the counts above are what it received \
                 until then\n",
                sig.name()
            );
        }
        None => o += &format!(" server: the test failed: {message}\n"),
    }
    o
}

/// The server's lines about one client's test; an error (with them) for bad bytes.
fn server_report(sp: &opts::TestParams, r: &run::EndResult) -> Result<String, CliError> {
    let o = server_lines(sp, r);
    if r.recv.bad_bytes > 0 {
        return Err(CliError {
            stdout: o,
            message: format!("verify failed: {} bad bytes", r.recv.bad_bytes),
        });
    }
    Ok(o)
}

/// The server's lines about what one client's test delivered: messages, drops, verify.
fn server_lines(sp: &opts::TestParams, r: &run::EndResult) -> String {
    let mut o = String::new();
    o += &format!(
        " server: {} messages received ({} bytes) of size {}; test {}\n",
        r.recv.completions, r.recv.bytes, sp.size, sp.test
    );
    o += &format!(" server: {}\n", r.recv.drops_text());
    if sp.verify {
        o += &format!(
            " verify: {} messages, {} bytes checked, {} bad bytes\n",
            r.recv.verified_messages, r.recv.verified_bytes, r.recv.bad_bytes
        );
    }
    o
}

fn finish(
    p: &opts::TestParams,
    r: &run::EndResult,
    gbits: bool,
    json: bool,
    mode: &str,
) -> Result<String, CliError> {
    let out = run::client_report(p, r, gbits, json, mode);
    let bad = r.peer_recv.bad_bytes + r.recv.bad_bytes;
    if bad > 0 {
        // the report still goes to stdout (its JSON says "ok": false)
        return Err(CliError {
            stdout: out,
            message: format!("verify failed: {bad} bad bytes"),
        });
    }
    Ok(out)
}

/// Entry point of the binary: parses `std::env::args`, prints, returns the exit code.
/// A failed run prints its report on stdout when it has one, else with `--json` the
/// failure as JSON (`"ok": false`, [`report::failure_json`]), so a script that reads
/// stdout always gets one report; the error goes to stderr and the exit code is 1.
pub fn main() -> i32 {
    use clap::FromArgMatches;
    let matches = help::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(("server", sm)) = matches.subcommand()
        && let Err(e) = refuse_client_options(sm)
    {
        eprintln!("mrc-perf: error: {e}");
        return 2;
    }
    if let Some((name, sm)) = matches.subcommand()
        && let Err(e) = refuse_unused_options(name, sm)
    {
        eprintln!("mrc-perf: error: {e}");
        return 2;
    }
    crate::logs::init(cli.verbose);
    if let Command::Mpi(o) = &cli.cmd {
        return crate::mpi::main(&cli.test, o);
    }
    if let Err(e) = interrupt::install() {
        eprintln!("mrc-perf: warning: {e}; a signal ends a test without its report");
    }
    let json = cli.test.json;
    let code = match run_cli(cli) {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => {
            if !e.stdout.is_empty() {
                print!("{}", e.stdout);
            } else if json {
                print!("{}", report::failure_json(&e.message));
            }
            if interrupt::pending().is_none() {
                eprintln!("mrc-perf: error: {}", e.message);
            }
            1
        }
    };
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    match interrupt::pending() {
        Some(sig) => {
            eprintln!(
                "mrc-perf: {}: the test ended early; the report is what was measured until then",
                sig.name()
            );
            sig.exit_code()
        }
        None => code,
    }
}

/// The test options only a client chooses (`mrc-perf server` runs what its client asks,
/// within its `--max-*` limits): clap's id, and the flag as the user wrote it.
pub(crate) const CLIENT_OPTIONS: [(&str, &str); 26] = [
    ("size", "-s/--size"),
    ("iters", "-n/--iters"),
    ("duration", "-D/--duration"),
    ("paths", "--paths"),
    ("mtu", "-m/--mtu"),
    ("cc", "--cc"),
    ("line_rate_gbps", "--line-rate"),
    ("base_rtt_us", "--base-rtt-us"),
    ("test", "--test"),
    ("bidirectional", "-b/--bidirectional"),
    ("verify", "--verify"),
    ("rate_limit", "--rate-limit"),
    ("burst_size", "--burst-size"),
    ("path_selection", "--path-selection"),
    ("json", "--json"),
    ("tx_depth", "-t/--tx-depth"),
    ("region_size", "--region-size"),
    ("srv6", "--srv6"),
    ("srv6_via", "--srv6-via"),
    ("min_rto_us", "--min-rto-us"),
    ("reorder_window_us", "--reorder-window-us"),
    ("peer_timeout_s", "--peer-timeout"),
    ("spin_us", "--spin-us"),
    ("interval", "-i/--interval"),
    ("all", "-a/--all"),
    ("qps", "-q/--qps"),
];

/// Options a command has no use for, with why: given on the command line, they are
/// refused by name instead of ignored.
pub(crate) const UNUSED_OPTIONS: &[(&str, &str, &str, &str)] = &[
    (
        "loopback",
        "port",
        "-p/--port",
        "loopback listens on a free TCP port of its own; -p is for server and client",
    ),
    (
        "baseline",
        "port",
        "-p/--port",
        "baseline runs on free ports of its own; -p is for server and client",
    ),
    (
        "baseline",
        "verify",
        "--verify",
        "baseline runs raw UDP and kernel TCP, which carry no pattern to check; \
         --verify is for loopback and client",
    ),
    (
        "mpi",
        "shared_engine",
        "--shared-engine",
        "each rank is a process of its own with its own engine; --shared-engine is for \
         loopback",
    ),
];

/// Refuses an option of [`UNUSED_OPTIONS`] given to command `name`.
///
/// # Errors
/// The first such option, named, with why.
fn refuse_unused_options(name: &str, sm: &clap::ArgMatches) -> Result<(), String> {
    for (cmd, id, flag, why) in UNUSED_OPTIONS {
        if *cmd == name && sm.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
            return Err(format!("{flag}: {why}"));
        }
    }
    Ok(())
}

/// A server given a client's test option refuses it by name, instead of running the
/// client's value silently.
///
/// # Errors
/// The first such option, named, with what the server does instead.
fn refuse_client_options(sm: &clap::ArgMatches) -> Result<(), String> {
    for (id, flag) in CLIENT_OPTIONS {
        if sm.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
            return Err(format!(
                "{flag} is the client's to choose: a server runs the test its client asks for, \
                 within its --max-region-size, --max-duration, --max-iters and --max-spin-us; \
                 give {flag} to mrc-perf client"
            ));
        }
    }
    Ok(())
}

/// Refuses `HOST:PORT` (and `[V6]:PORT`) as the client's host: the port is `-p PORT`.
/// A bare IPv6 address (`::1`, `fe80::1`) is a host.
///
/// Errors: a message naming the host and `-p PORT`.
/// This end's plane addresses for `cmd`: the server's and the client's `--bind` list
/// (the server's only where two or more: one address is its plain bind), the loopback
/// client's `--planes` addresses ([`loopback_planes`]).
fn local_planes(cmd: &Command) -> Result<Vec<IpAddr>, String> {
    match cmd {
        Command::Server { bind, .. } => {
            let ips = opts::parse_plane_list("--bind", bind)?;
            Ok(if ips.len() > 1 { ips } else { Vec::new() })
        }
        Command::Client {
            bind: Some(bind), ..
        } => opts::parse_plane_list("--bind", bind),
        Command::Loopback { ipv6, planes } => {
            if *ipv6 && *planes > 1 {
                return Err(
                    "--planes needs IPv4 loopback (::1 is IPv6 loopback's only address)".into(),
                );
            }
            Ok(loopback_planes(*planes, 1))
        }
        _ => Ok(Vec::new()),
    }
}

/// The loopback addresses of one end on `planes` planes (`host` 1: the client, 2: the
/// server): `127.0.P.host` for plane P; none for one plane (the plain 127.0.0.1).
fn loopback_planes(planes: u8, host: u8) -> Vec<IpAddr> {
    if planes < 2 {
        return Vec::new();
    }
    (0..planes)
        .map(|p| IpAddr::V4(Ipv4Addr::new(127, 0, p, host)))
        .collect()
}

fn check_host_without_port(host: &str) -> Result<(), String> {
    if host.parse::<Ipv6Addr>().is_ok() {
        return Ok(());
    }
    let port_suffix = host.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
    });
    if port_suffix {
        let (h, p) = host.rsplit_once(':').unwrap_or((host, ""));
        let h = h.trim_start_matches('[').trim_end_matches(']');
        let example = match p.parse::<u16>() {
            Ok(port) => format!("mrc-perf client {h} -p {port}"),
            Err(_) => format!("mrc-perf client {h} -p PORT, PORT 0..65535"),
        };
        return Err(format!(
            "{host}: host:port is not supported; give the host alone and the port with -p PORT \
             ({example})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod host_tests {
    use super::check_host_without_port;

    #[test]
    fn bare_hosts_pass_host_port_is_refused() {
        for ok in ["127.0.0.1", "::1", "fe80::1", "localhost", "h1.example"] {
            assert_eq!(check_host_without_port(ok), Ok(()), "{ok}");
        }
        for bad in ["localhost:18515", "10.0.0.1:1", "[fd00::1]:18515"] {
            assert!(
                check_host_without_port(bad)
                    .is_err_and(|e| e.contains("host:port is not supported")),
                "{bad}"
            );
        }
    }
}
