//! `mrc-perf`: the two-host benchmark in the manner of perftest's `ib_write_bw` /
//! `ib_write_lat`, over the io_uring UDP datapath. Subcommands `server`, `client HOST`,
//! `loopback` (both ends in this process) and `baseline` (raw UDP and kernel TCP ceilings).

pub mod baseline;
pub mod opts;
pub mod report;
pub mod run;
pub mod srv6;
pub mod verbs;

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
    let timeout = Duration::from_secs_f64(cli.test.timeout);
    let progress =
        (!cli.test.json).then(|| report::BwUnit::from_report_gbits(cli.test.report_gbits));
    let local = match cli.test.fabric {
        opts::Fabric::Udp => run::LocalFabric::Udp,
        opts::Fabric::Verbs => run::LocalFabric::Verbs(verbs::VerbsOpts {
            device: cli.test.ib_dev.clone(),
            port: cli.test.ib_port,
            gid_index: cli.test.gid_index,
        }),
    };
    if let run::LocalFabric::Verbs(o) = &local {
        verbs::precheck(o).map_err(|e| format!("--fabric verbs: {e}"))?;
    }
    let psk = cli
        .test
        .psk_file
        .as_deref()
        .map(opts::read_psk)
        .transpose()?;
    match cli.cmd {
        Command::Loopback { ipv6 } => {
            if p.srv6.is_some() && !ipv6 {
                return Err("--srv6 needs IPv6: add -6 (--ipv6)".into());
            }
            let ip: IpAddr = if ipv6 {
                Ipv6Addr::LOCALHOST.into()
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            let listener =
                TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| format!("bind {ip}: {e}"))?;
            let server_addr = listener.local_addr().map_err(|e| e.to_string())?;
            let udp = SocketAddr::new(ip, cli.test.udp_port.unwrap_or(0));
            let server_local = local.clone();
            let server_psk = psk.clone();
            let server = std::thread::spawn(move || {
                run::serve_one(
                    &listener,
                    udp,
                    timeout,
                    Some(timeout),
                    &server_local,
                    &opts::ServerLimits::default(),
                    server_psk.as_deref(),
                )
                .map(|_| ())
            });
            let client = run::run_client(
                server_addr,
                SocketAddr::new(ip, 0),
                &p,
                timeout,
                progress,
                &local,
                psk.as_deref(),
            );
            let srv = server
                .join()
                .unwrap_or_else(|_| Err("server thread panicked".into()));
            let (r, _) = client?;
            srv.map_err(|e| format!("server: {e}"))?;
            finish(
                &p,
                &r,
                cli.test.report_gbits,
                cli.test.json,
                &format!("loopback {ip}"),
            )
        }
        Command::Client { host } => {
            check_host_without_port(&host)?;
            // every address the name resolves to, in the resolver's order: `localhost`
            // reaches a server on ::1 as well as one on 127.0.0.1
            let addrs: Vec<SocketAddr> = (host.as_str(), cli.test.port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {host}: {e}"))?
                .collect();
            if addrs.is_empty() {
                return Err(format!("{host} resolves to no address").into());
            }
            let (stream, addr) = run::connect_any(&addrs, timeout)?;
            let any: IpAddr = if addr.is_ipv6() {
                Ipv6Addr::UNSPECIFIED.into()
            } else {
                Ipv4Addr::UNSPECIFIED.into()
            };
            let udp = SocketAddr::new(any, cli.test.udp_port.unwrap_or(0));
            let mut p = p;
            if let Some(mode) = p.srv6 {
                p.steering = srv6::steering(mode, p.srv6_via, addr.ip(), p.paths, p.burst_size)?;
            }
            let (r, _) = run::run_client_on(
                stream,
                addr,
                udp,
                &p,
                timeout,
                progress,
                &local,
                psk.as_deref(),
            )?;
            finish(
                &p,
                &r,
                cli.test.report_gbits,
                cli.test.json,
                &format!("client of {addr}"),
            )
        }
        Command::Server {
            bind,
            persistent,
            limits,
        } => {
            let ip: IpAddr = bind.parse().map_err(|e| format!("--bind {bind}: {e}"))?;
            let listener = TcpListener::bind(SocketAddr::new(ip, cli.test.port))
                .map_err(|e| format!("cannot listen on {ip}:{}: {e}", cli.test.port))?;
            let udp = SocketAddr::new(
                ip,
                cli.test
                    .udp_port
                    .unwrap_or(mrc_fabric::udp::DEFAULT_RX_PORT),
            );
            eprintln!(
                "mrc-perf server: waiting for a client on TCP {}:{}, UDP {udp}{}",
                ip,
                cli.test.port,
                if persistent { " (persistent)" } else { "" }
            );
            let serve = || {
                let (sp, r) = run::serve_one(
                    &listener,
                    udp,
                    timeout,
                    None,
                    &local,
                    &limits,
                    psk.as_deref(),
                )?;
                server_report(&sp, &r)
            };
            if !persistent {
                return serve();
            }
            // One client after another; a failed test is reported and the next served.
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
                if let Some(m) = error {
                    eprintln!("mrc-perf server: client {n}: {m}");
                }
            }
            Ok(String::new())
        }
        Command::Baseline { ipv6 } => {
            let ip: IpAddr = if ipv6 {
                Ipv6Addr::LOCALHOST.into()
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            let results = match p.test {
                TestKind::Bw => vec![baseline::udp_blast(ip, &p)?, baseline::tcp(ip, &p)?],
                TestKind::Lat => vec![baseline::udp_pingpong(ip, &p)?],
            };
            Ok(baseline::render(&results, cli.test.json))
        }
    }
}

/// The server's lines about one client's test; an error (with them) for bad bytes.
fn server_report(sp: &opts::TestParams, r: &run::EndResult) -> Result<String, CliError> {
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
    if r.recv.bad_bytes > 0 {
        return Err(CliError {
            stdout: o,
            message: format!("verify failed: {} bad bytes", r.recv.bad_bytes),
        });
    }
    Ok(o)
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
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(("server", sm)) = matches.subcommand()
        && let Err(e) = refuse_client_options(sm)
    {
        eprintln!("mrc-perf: error: {e}");
        return 2;
    }
    crate::logs::init(cli.verbose);
    let json = cli.test.json;
    match run_cli(cli) {
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
            eprintln!("mrc-perf: error: {}", e.message);
            1
        }
    }
}

/// The test options only a client chooses (`mrc-perf server` runs what its client asks,
/// within its `--max-*` limits): clap's id, and the flag as the user wrote it.
const CLIENT_OPTIONS: [(&str, &str); 23] = [
    ("size", "-s/--size"),
    ("iters", "-n/--iters"),
    ("duration", "-D/--duration"),
    ("paths", "--paths"),
    ("mtu", "--mtu"),
    ("cc", "--cc"),
    ("line_rate_gbps", "--line-rate"),
    ("base_rtt_us", "--base-rtt-us"),
    ("test", "--test"),
    ("bidirectional", "--bidirectional"),
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
];

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
