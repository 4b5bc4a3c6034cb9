//! `mrc-sim`: design spine-leaf fabrics and run the deterministic packet-level simulator
//! with real mrc transport endpoints.
//!
//! ```text
//! mrc-sim design --gpus 1024                       # 8 GPUs/server, 200G NICs, 32x400G switches
//! mrc-sim design --gpus 64 --plot fabric.svg       # the drawing: servers, leaves, spines, links
//! mrc-sim testbed-plan --json -                    # what testbed/mrc-testbed.sh builds
//! mrc-sim testbed-plan --planes 2                  # the same in two planes
//! mrc-sim trace --gpus 64 --src 0 --dst 40 --evs 8 --forwarding srv6 --plot paths.png
//! mrc-sim run examples/scenarios/incast-trim.toml --pcap in.pcap --pcap-port leaf0:0
//! mrc-sim experiment list
//! mrc-sim experiment incast --json incast.json --plot incast.svg
//! ```
//!
//! Exit status: 0 when everything ran (and every experiment requirement was met, every
//! scenario flow finished), 1 when a requirement was missed or a flow did not finish, 2 on
//! an error (bad arguments, bad scenario file, unknown experiment).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mrc_examples::sim::design as sim_design;
use mrc_examples::sim::experiments::{self, EXPERIMENTS};
use mrc_examples::sim::figure;
use mrc_examples::sim::limits::SimLimits;
use mrc_examples::sim::output::{ResultTable, check_output_dir, check_plot_path};
use mrc_examples::sim::scenario::{Scenario, parse_forwarding};

/// Largest scenario file read, bytes (16 MiB: a TOML file of every flow and fault the
/// default limits allow is far smaller).
const MAX_SCENARIO_BYTES: u64 = 16 << 20;
use mrc_fabric_sim::net::Progress;
use mrc_fabric_sim::{
    DesignInput, Layout, Oversubscription, SimConfig, Simulator, Topology, design,
};

#[derive(Parser)]
#[command(
    name = "mrc-sim",
    version,
    about = "Spine-leaf fabric designer and deterministic mrc simulator"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Logs on stderr: `-v` info, `-vv` debug for the mrc crates; `RUST_LOG` (EnvFilter
    /// syntax) for finer filters. Default: none.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
}

#[derive(clap::Args, Clone)]
struct Out {
    /// Write the numbers as JSON to this file ("-" for stdout: then stdout is only the
    /// JSON and the table goes to stderr). Its directory must exist.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw a figure to this file (.svg or .png): the fabric's servers, leaves, spines and
    /// links (design), each EV's path and the spine it takes (trace), goodput per flow
    /// (run), the experiment's measures with their ideal and PASS lines (experiment). Its
    /// directory must exist.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

impl Out {
    /// Checks `--json` and `--plot` before anything runs (directory exists, plot
    /// extension `.svg` or `.png`) and sends the human text to stderr under `--json -`.
    fn check(&self) -> Result<(), String> {
        if let Some(p) = &self.json {
            if p.as_os_str() == "-" {
                HUMAN_TO_STDERR.store(true, Ordering::Relaxed);
            } else {
                check_output_dir("--json", p)?;
            }
        }
        if let Some(p) = &self.plot {
            check_plot_path(p)?;
        }
        Ok(())
    }
}

#[derive(clap::Args, Clone)]
struct DesignArgs {
    /// GPUs (one NIC each).
    #[arg(long, default_value_t = 1024)]
    gpus: u32,
    /// GPUs per server.
    #[arg(long, default_value_t = 8)]
    gpus_per_server: u32,
    /// NIC speed, Gb/s.
    #[arg(long, default_value_t = 200)]
    nic_gbps: u32,
    /// Leaf switch ports (physical; each breaks out into port speed / lane speed lanes).
    #[arg(long, default_value_t = 32)]
    leaf_radix: u32,
    /// Leaf port speed, Gb/s.
    #[arg(long, default_value_t = 400)]
    leaf_port_gbps: u32,
    /// Spine switch ports (physical).
    #[arg(long, default_value_t = 32)]
    spine_radix: u32,
    /// Spine port speed, Gb/s.
    #[arg(long, default_value_t = 400)]
    spine_port_gbps: u32,
    /// Oversubscription down:up, e.g. 1:1, 2:1.
    #[arg(long, default_value = "1:1")]
    oversubscription: String,
    /// Parallel planes each NIC is split into (lane speed = NIC speed / planes): port p of
    /// every NIC on plane p, each plane a copy of the fabric.
    #[arg(long, default_value_t = 1)]
    planes: u32,
    /// How NICs are cabled to leaves: spine-leaf (a server's NICs together on a leaf) or
    /// rail (rail-optimized: servers in rail groups, NIC k of every server of a group on
    /// the group's leaf k; same-rail traffic stays on the leaf, cross-rail traffic crosses
    /// a spine).
    #[arg(long, default_value = "spine-leaf", value_name = "spine-leaf|rail")]
    layout: String,
}

impl DesignArgs {
    fn input(&self) -> Result<DesignInput, String> {
        let o: Oversubscription = self.oversubscription.parse().map_err(|e| format!("{e}"))?;
        Ok(DesignInput {
            gpus: self.gpus,
            gpus_per_server: self.gpus_per_server,
            nic_gbps: self.nic_gbps,
            leaf_radix: self.leaf_radix,
            leaf_port_gbps: self.leaf_port_gbps,
            spine_radix: self.spine_radix,
            spine_port_gbps: self.spine_port_gbps,
            oversubscription: o,
            planes: self.planes,
            layout: self.layout.parse().map_err(|e| format!("{e}"))?,
        })
    }
}

/// The designer's input for `testbed-plan`: every field defaults to the testbed's
/// design (`mrc_examples::testbed::default_input`: 8 GPUs, 4 per server, 100G NICs,
/// 8x100G leaves, 2x100G spines, 1:1, one plane -> 2 hosts, 2 leaves, 4 spines).
#[derive(clap::Args, Clone)]
struct TestbedArgs {
    /// GPUs (one NIC each) [default: 8].
    #[arg(long)]
    gpus: Option<u32>,
    /// GPUs per server (a server is a host namespace) [default: 4].
    #[arg(long)]
    gpus_per_server: Option<u32>,
    /// NIC speed, Gb/s [default: 100].
    #[arg(long)]
    nic_gbps: Option<u32>,
    /// Leaf switch ports [default: 8].
    #[arg(long)]
    leaf_radix: Option<u32>,
    /// Leaf port speed, Gb/s [default: 100].
    #[arg(long)]
    leaf_port_gbps: Option<u32>,
    /// Spine switch ports [default: 2].
    #[arg(long)]
    spine_radix: Option<u32>,
    /// Spine port speed, Gb/s [default: 100].
    #[arg(long)]
    spine_port_gbps: Option<u32>,
    /// Oversubscription down:up [default: 1:1].
    #[arg(long)]
    oversubscription: Option<String>,
    /// Planes: disjoint copies of the leaves and spines, every host with one interface
    /// (`eth0`, `eth1`, ...) in each; each NIC is split into one port per plane, so the
    /// default NIC speed is 100 x planes Gb/s (every plane the one-plane fabric).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(mrc_examples::testbed::MAX_PLANES)))]
    planes: u32,
}

impl TestbedArgs {
    fn input(&self) -> Result<DesignInput, String> {
        let d = mrc_examples::testbed::default_input_planes(self.planes);
        Ok(DesignInput {
            gpus: self.gpus.unwrap_or(d.gpus),
            gpus_per_server: self.gpus_per_server.unwrap_or(d.gpus_per_server),
            nic_gbps: self.nic_gbps.unwrap_or(d.nic_gbps),
            leaf_radix: self.leaf_radix.unwrap_or(d.leaf_radix),
            leaf_port_gbps: self.leaf_port_gbps.unwrap_or(d.leaf_port_gbps),
            spine_radix: self.spine_radix.unwrap_or(d.spine_radix),
            spine_port_gbps: self.spine_port_gbps.unwrap_or(d.spine_port_gbps),
            oversubscription: match &self.oversubscription {
                Some(o) => o.parse().map_err(|e| format!("{e}"))?,
                None => d.oversubscription,
            },
            planes: self.planes,
            layout: Layout::SpineLeaf,
        })
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Size a two-tier fabric, spine-leaf or rail-optimized (--layout), in one or more
    /// planes: servers, leaves, spines, links, cables, optics.
    ///
    /// Links are counted in lanes of the NIC speed / planes (200G with the defaults): a
    /// 400G switch port broken out 2 x 200G carries 2 lanes, so a 32-port leaf has 64. The
    /// second table gives each switch's links both in lanes and in physical ports (the
    /// spine rows: the fullest spine); cables and optics count one cable per lane, optics
    /// = 2 x cables. When the uplinks per leaf are not a multiple of the spines, they
    /// rotate over the spines (uplink j of leaf l to spine (l x uplinks + j) % spines) and
    /// a last line gives the lanes per leaf-spine pair and per spine. With more than one
    /// plane or the rail layout, a table gives the counts per plane and over all planes
    /// (servers, NICs, NIC ports, leaves, spines, links, cables, optics); with the rail
    /// layout, another the rails, rail groups, servers per group and leaves per rail. A
    /// fabric whose NICs fit one leaf has no spines. `--plot` draws the spine-leaf layout
    /// (the rail layout is refused; `trace --plot` draws either).
    Design {
        #[command(flatten)]
        d: DesignArgs,
        #[command(flatten)]
        out: Out,
    },
    /// The plan of the real-kernel SRv6 testbed (testbed/mrc-testbed.sh) from the design:
    /// namespaces, links, addresses, SIDs, uSIDs and steering tables, in one plane or
    /// several (--planes). With `--json -` the JSON the script reads.
    TestbedPlan {
        #[command(flatten)]
        d: TestbedArgs,
        /// Write the plan as JSON to this file ("-" for stdout, alone).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Print the hop-by-hop path of a flow on one EV (same-leaf vs cross-leaf; the spine
    /// chosen by the ECMP hash or by the segment list).
    ///
    /// Each hop is the node and the port it sends on. Switch ports print as
    /// `NODE:PORT (pP/L)`: PORT is the simulator's port number, one per lane (it counts
    /// up to radix x breakout - 1, e.g. 0..63 on a 32-port 400G switch broken out 2 x
    /// 200G; `run --pcap-port` takes it), P the physical front-panel port (1..radix) and
    /// L the lane of its breakout (1..breakout): PORT = (P - 1) x breakout + L - 1, so
    /// leaf0:55 (p28/2) is lane 2 of leaf0's port 28. Without breakout (port speed = lane
    /// speed) it is `pP`. Leaf ports: the hosts' lanes first, then the uplinks, uplink j
    /// of leaf l to spine (l x uplinks + j) % spines (j % spines when the uplinks are a
    /// multiple of the spines; `design` shows the spread). The source prints as `hostN:0`
    /// (its NIC), the destination bare. Each hop also says what its node is in the
    /// design: a host's server and NIC, with more than one plane the plane, with the
    /// rail layout the rail and rail group of a host or leaf (`host41:0 (server 5 NIC 1,
    /// plane 3, rail 1, group 0)`, `leaf1:8 (p5/1; plane 3, rail 1, group 0)`). With
    /// srv6/usid each hop shows the SRH's segments left (SL) and the destination address
    /// (DA) as the node receives the packet.
    Trace {
        #[command(flatten)]
        d: DesignArgs,
        /// Source host: its index 0..gpus-1 (one host per NIC; the trace is of one plane),
        /// or `hostN` as the output names it.
        #[arg(long, value_parser = parse_host)]
        src: u32,
        /// Destination host, as --src.
        #[arg(long, value_parser = parse_host)]
        dst: u32,
        /// EVs to trace (0..evs).
        #[arg(long, default_value_t = 4)]
        evs: u32,
        /// The plane whose port of each NIC is traced (0..planes; the simulator runs one
        /// plane, and every plane is the same fabric, so this names the plane).
        #[arg(long, default_value_t = 0)]
        plane: u32,
        /// ecmp (switches hash the 5-tuple; the EV is the UDP source port) | srv6 (an SRH
        /// through spine EV % spines) | usid (a uSID container through that spine).
        #[arg(long, default_value = "ecmp")]
        forwarding: String,
        #[command(flatten)]
        out: Out,
        #[command(flatten)]
        limits: SimLimits,
    },
    /// Run a scenario file (TOML: examples/scenarios/*.toml; every key is in the docs of
    /// `mrc_examples::sim::scenario`, `cargo doc -p mrc-examples --open`).
    Run {
        /// The scenario.
        scenario: PathBuf,
        /// The port whose outgoing frames --pcap records, NODE:PORT (e.g. leaf0:4; default
        /// host0:0), PORT the simulator's port number as the ports table and `trace` print
        /// it. Read with `tshark -r FILE -d udp.port==4792,infiniband`.
        #[arg(long, value_name = "NODE:PORT")]
        pcap_port: Option<String>,
        /// The pcap file.
        #[arg(long, value_name = "FILE")]
        pcap: Option<PathBuf>,
        #[command(flatten)]
        out: Out,
        #[command(flatten)]
        limits: SimLimits,
    },
    /// Run a built-in experiment; `list` lists them. Each prints its checks as
    /// `[PASS]`/`[MISS]` lines (the targets the project set for it, e.g. spraying >= 95% of
    /// ideal goodput); exit status 1 when one is missed, 2 on an error.
    Experiment {
        /// The experiment (names from the table `experiment list` prints) or `list`.
        #[arg(help = experiment_names_help())]
        name: String,
        /// Seed of every random draw (loss, marking, initial PSNs) and of the switches'
        /// ECMP hash: another seed gives other hash collisions.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        out: Out,
    },
}

/// Set when `--json -` puts the JSON on stdout: the human text then goes to stderr, so
/// stdout is one JSON document (`mrc-sim ... --json - | jq .`).
static HUMAN_TO_STDERR: AtomicBool = AtomicBool::new(false);

/// Writes the human text to stdout (stderr under `--json -`); a closed pipe (e.g.
/// `| head`) is not an error worth a panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if HUMAN_TO_STDERR.load(Ordering::Relaxed) {
            let _ = write!(std::io::stderr().lock(), $($arg)*);
        } else {
            let _ = write!(std::io::stdout().lock(), $($arg)*);
        }
    }};
}

macro_rules! outln {
    ($($arg:tt)*) => {{
        out!($($arg)*);
        out!("\n");
    }};
}

/// Writes a JSON document and a newline to stdout.
fn json_to_stdout(s: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{s}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    mrc_examples::logs::init(cli.verbose);
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("mrc-sim: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// A progress bar that appears once a run has taken a second of wall time.
struct Bar {
    start: Instant,
    bar: Option<ProgressBar>,
}

impl Bar {
    fn new() -> Bar {
        Bar {
            start: Instant::now(),
            bar: None,
        }
    }

    fn update(&mut self, label: &str, p: Progress) {
        if self.bar.is_none() && self.start.elapsed() >= Duration::from_secs(1) {
            let b = ProgressBar::new(u64::from(p.flows));
            b.set_style(
                ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} flows")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            self.bar = Some(b);
        }
        if let Some(b) = &self.bar {
            b.set_length(u64::from(p.flows));
            b.set_position(u64::from(p.flows_done));
            b.set_message(format!(
                "{label}: {:.1} us virtual, {} events",
                p.now_ns as f64 / 1e3,
                p.events
            ));
        }
    }

    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

fn emit(t: &ResultTable, out: &Out, json: &impl serde::Serialize) -> Result<(), String> {
    out!("{}", t.render());
    emit_json_plot(t, out, json)
}

/// `--json` and `--plot` of `emit`, without printing the table.
fn emit_json_plot(t: &ResultTable, out: &Out, json: &impl serde::Serialize) -> Result<(), String> {
    if let Some(p) = &out.json {
        let s = serde_json::to_string_pretty(json).map_err(|e| e.to_string())?;
        if p.as_os_str() == "-" {
            json_to_stdout(&s);
        } else {
            std::fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    if let Some(p) = &out.plot {
        t.plot(p)
            .map_err(|e| format!("plot {}: {e}", p.display()))?;
    }
    Ok(())
}

fn run(cli: Cli) -> Result<bool, String> {
    match cli.cmd {
        Cmd::Design { d, out } => {
            out.check()?;
            let des = design(&d.input()?).map_err(|e| e.to_string())?;
            if des.rail.is_some() && out.plot.is_some() {
                return Err(
                    "--plot draws the spine-leaf layout only; the rail layout is in the tables and `trace --layout rail --plot`"
                        .into(),
                );
            }
            out!("{}", sim_design::design_text(&des));
            let plot = Out {
                plot: None,
                ..out.clone()
            };
            emit_json_plot(&sim_design::fabric_table(&des), &plot, &des)?;
            if let Some(p) = &out.plot {
                figure::design_figure(&des)
                    .draw(p)
                    .map_err(|e| format!("plot {}: {e}", p.display()))?;
            }
            Ok(true)
        }
        Cmd::TestbedPlan { d, json } => {
            let des = design(&d.input()?).map_err(|e| e.to_string())?;
            let plan =
                mrc_examples::testbed::TestbedPlan::from_design(&des).map_err(|e| e.to_string())?;
            let s = serde_json::to_string_pretty(&plan).map_err(|e| e.to_string())?;
            match json {
                Some(p) if p.as_os_str() == "-" => json_to_stdout(&s),
                Some(p) => std::fs::write(&p, s).map_err(|e| format!("{}: {e}", p.display()))?,
                None if plan.planes() == 1 => {
                    outln!(
                        "testbed: {} hosts ({} per leaf), {} leaves, {} spines, {} leaf-spine links, {} steering routes",
                        plan.hosts.len(),
                        plan.design.servers_per_leaf,
                        plan.leaves.len(),
                        plan.spines.len(),
                        plan.links.len(),
                        plan.steering.len()
                    );
                    for h in &plan.hosts {
                        outln!("  {} {} behind l{}", h.name, h.addr, h.leaf);
                    }
                }
                None => {
                    outln!(
                        "testbed: {} planes, each {} leaves, {} spines, {} leaf-spine links; {} hosts ({} per leaf), one interface in each plane; {} steering routes",
                        plan.planes(),
                        plan.design.leaves,
                        plan.design.spines,
                        plan.links.len() / plan.planes() as usize,
                        plan.hosts.len(),
                        plan.design.servers_per_leaf,
                        plan.steering.len()
                    );
                    for h in &plan.hosts {
                        for p in &h.ports {
                            outln!(
                                "  {} {} {} behind {}",
                                h.name,
                                p.ifname,
                                p.addr,
                                p.leaf_name
                            );
                        }
                    }
                }
            }
            Ok(true)
        }
        Cmd::Trace {
            d,
            src,
            dst,
            evs,
            plane,
            forwarding,
            out,
            limits,
        } => {
            out.check()?;
            if evs == 0 {
                return Err("--evs must be at least 1".into());
            }
            limits.check_evs("--evs", u64::from(evs))?;
            let des = design(&d.input()?).map_err(|e| e.to_string())?;
            let hosts = des.plane.nic_links;
            limits.check_hosts(u64::from(hosts))?;
            if plane >= des.input.planes {
                return Err(format!(
                    "--plane {plane}: no such plane (this design has {})",
                    match des.input.planes {
                        1 => "plane 0 only".to_owned(),
                        n => format!("planes 0..{}", n - 1),
                    }
                ));
            }
            let topo = Topology::from_design(&des, 500).map_err(|e| e.to_string())?;
            let forwarding_mode = parse_forwarding(&forwarding)
                .map_err(|_| format!("--forwarding {forwarding:?}: expected ecmp, srv6 or usid"))?;
            // The hosts are checked before anything is printed.
            for (flag, h) in [("--src", src), ("--dst", dst)] {
                if h >= hosts {
                    return Err(format!(
                        "{flag} {h}: no such host (this design has hosts 0..{} = host0..host{0})",
                        hosts - 1
                    ));
                }
            }
            if src == dst {
                return Err(format!(
                    "--src and --dst are both host{src}: a trace needs two different hosts"
                ));
            }
            let cfg = SimConfig {
                forwarding: forwarding_mode,
                ..SimConfig::default()
            };
            let sim = Simulator::new(topo, cfg).map_err(|e| e.to_string())?;
            let traces = (0..evs)
                .map(|ev| sim.trace(src, dst, ev).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, String>>()?;
            let mut what = vec![forwarding.clone()];
            if des.rail.is_some() {
                what.push("rail layout".into());
            }
            what.push(
                sim_design::trace_kind(&des, src, dst)
                    .unwrap_or("cross leaf")
                    .into(),
            );
            if des.input.planes > 1 {
                what.push(format!("plane {plane} of {}", des.input.planes));
            }
            out!(
                "trace host{src} -> host{dst} ({})\n{}",
                what.join(", "),
                sim_design::port_legend(&des)
            );
            let mut t = ResultTable::new("links crossed per EV");
            let mut all = Vec::new();
            for (ev, hops) in (0..evs).zip(&traces) {
                let path: Vec<String> = hops
                    .iter()
                    .map(|h| sim_design::trace_hop_text(sim.topology(), &des, plane, h))
                    .collect();
                outln!(
                    "EV {ev:>3} (UDP src port {}): {}",
                    mrc_fabric_sim::host::ev_src_port(ev),
                    path.join(" -> ")
                );
                t.row(format!("EV {ev}"), &[("hops", hops.len() as f64 - 1.0)]);
                let hops: Vec<serde_json::Value> = hops
                    .iter()
                    .map(|h| sim_design::hop_json(sim.topology(), &des, plane, h))
                    .collect();
                all.push((ev, hops));
            }
            let plot = Out {
                plot: None,
                ..out.clone()
            };
            emit(&t, &plot, &all)?;
            if let Some(p) = &out.plot {
                figure::trace_figure(&des, sim.topology(), src, dst, plane, &forwarding, &traces)
                    .draw(p)
                    .map_err(|e| format!("plot {}: {e}", p.display()))?;
            }
            Ok(true)
        }
        Cmd::Run {
            scenario,
            pcap_port,
            pcap,
            out,
            limits,
        } => {
            out.check()?;
            let file_bytes = std::fs::metadata(&scenario)
                .map_err(|e| format!("{}: {e}", scenario.display()))?
                .len();
            if file_bytes > MAX_SCENARIO_BYTES {
                return Err(format!(
                    "{}: {file_bytes} bytes, more than a scenario file may have                      ({MAX_SCENARIO_BYTES})",
                    scenario.display()
                ));
            }
            let text = std::fs::read_to_string(&scenario)
                .map_err(|e| format!("{}: {e}", scenario.display()))?;
            let built = Scenario::parse(&text)
                .and_then(|s| s.build_within(&limits))
                .map_err(|e| format!("{}: {e}", scenario.display()))?;
            let topo = built.topology().map_err(|e| e.to_string())?;
            let mut sim = Simulator::new(topo, built.cfg.clone()).map_err(|e| e.to_string())?;
            for f in &built.flows {
                sim.add_flow(*f).map_err(|e| {
                    format!("{}: flow {} -> {}: {e}", scenario.display(), f.src, f.dst)
                })?;
            }
            match (pcap_port, pcap) {
                (np, Some(file)) => {
                    let np = np.unwrap_or_else(|| "host0:0".to_owned());
                    let (n, p) = np
                        .split_once(':')
                        .ok_or_else(|| format!("--pcap-port {np:?}: expected NODE:PORT"))?;
                    let node = sim
                        .topology()
                        .node_by_name(n)
                        .ok_or_else(|| format!("--pcap-port: no node {n:?}"))?;
                    let ports = sim
                        .topology()
                        .nodes
                        .get(node as usize)
                        .map_or(0, |s| s.ports.len());
                    let range = match ports {
                        0 => "no ports".to_owned(),
                        1 => "only port 0".to_owned(),
                        n => format!("ports 0..{}", n - 1),
                    };
                    let port = p
                        .parse::<u16>()
                        .ok()
                        .filter(|&x| usize::from(x) < ports)
                        .ok_or_else(|| {
                            format!("--pcap-port {np}: {n} has no port {p:?} ({n} has {range})")
                        })?;
                    let f = std::fs::File::create(&file)
                        .map_err(|e| format!("{}: {e}", file.display()))?;
                    sim.set_pcap(node, port, Box::new(std::io::BufWriter::new(f)))
                        .map_err(|e| e.to_string())?;
                }
                (None, None) => {}
                (Some(_), None) => return Err("--pcap-port needs --pcap FILE".into()),
            }
            let mut bar = Bar::new();
            let r = sim.run_with(&mut |p| bar.update("run", p));
            bar.finish();
            sim.finish_pcap().map_err(|e| e.to_string())?;
            let mut t = ResultTable::new(format!("run {}: flows", scenario.display()));
            for f in &r.flows {
                t.row(
                    format!("flow {} host{}->host{}", f.id, f.src, f.dst),
                    &[
                        ("bytes", f.bytes as f64),
                        (
                            "fct_us",
                            f.done_ns
                                .map_or(f64::NAN, |d| (d - f.start_ns) as f64 / 1e3),
                        ),
                        ("goodput_gbps", f.goodput_bps / 1e9),
                        ("retransmitted", f.retransmitted as f64),
                        ("trims", f.trims as f64),
                        ("timeouts", f.timeouts as f64),
                        ("out_of_order", f.out_of_order as f64),
                        ("lost", f.lost as f64),
                    ],
                );
            }
            let mut ports = ResultTable::new("ports (transmitting side)");
            for p in &r.ports {
                ports.row(
                    format!("{}:{} -> {}", p.node, p.port, p.peer),
                    &[
                        ("utilisation", p.utilisation),
                        ("tx_packets", p.stats.tx_packets as f64),
                        ("drops", p.stats.drops as f64),
                        ("trims", p.stats.trims as f64),
                        ("ecn_marks", p.stats.ecn_marks as f64),
                        ("queue_p50_bytes", p.queue_p50_bytes as f64),
                        ("queue_p99_bytes", p.queue_p99_bytes as f64),
                        ("queue_max_bytes", p.stats.max_queue_bytes as f64),
                    ],
                );
            }
            t.plot_column = Some("goodput_gbps".into());
            t.panel(
                mrc_examples::sim::output::Panel::new(
                    "goodput_gbps",
                    "flow: #id, then source -> destination host",
                )
                .title("goodput per flow")
                .quantity("goodput")
                .bar_labels(
                    r.flows
                        .iter()
                        .map(|f| format!("#{} {}->{}", f.id, f.src, f.dst))
                        .collect(),
                ),
            );
            emit(&t, &out, &r)?;
            out!("{}", ports.render());
            outln!(
                "events {}  packet hops {}  virtual time {:.1} us  losses: random {} black hole {} link down {} no route {}  corrupted {}  duplicated {}",
                r.counters.events,
                r.counters.hops,
                r.end_ns as f64 / 1e3,
                r.counters.loss_drops,
                r.counters.black_hole_drops,
                r.counters.link_down_drops,
                r.counters.no_route_drops,
                r.counters.corrupted,
                r.counters.duplicated
            );
            let unfinished = r.flows.iter().filter(|f| f.done_ns.is_none()).count();
            if unfinished > 0 {
                // Exit 1 with the reason on stderr (the table shows their fct_us as NaN).
                eprintln!(
                    "mrc-sim: {unfinished} of {} flows did not finish (fct_us NaN) by virtual time {:.1} us",
                    r.flows.len(),
                    r.end_ns as f64 / 1e3
                );
            }
            Ok(unfinished == 0)
        }
        Cmd::Experiment { name, seed, out } => {
            if name == "list" {
                for (n, d) in EXPERIMENTS {
                    outln!("{n:<14} {d}");
                }
                return Ok(true);
            }
            out.check()?;
            let mut bar = Bar::new();
            let t = experiments::run(&name, seed, &mut |l, p| bar.update(l, p))
                .map_err(|e| e.to_string())?;
            bar.finish();
            emit(&t, &out, &t)?;
            Ok(t.all_pass())
        }
    }
}

/// `experiment NAME`'s help: every name of [`EXPERIMENTS`] (the table `experiment list`
/// prints), then `list`.
fn experiment_names_help() -> String {
    let names: Vec<&str> = EXPERIMENTS.iter().map(|(n, _)| *n).collect();
    format!("{} | list", names.join(" | "))
}

/// A host of `trace`: `N` or `hostN` (the name the output prints).
fn parse_host(s: &str) -> Result<u32, String> {
    s.strip_prefix("host")
        .unwrap_or(s)
        .parse::<u32>()
        .map_err(|e| format!("expected a host index (N or hostN): {e}"))
}
