//! Command line of `mrc-perf` (clap) and its checks.

use clap::{Args, Parser, Subcommand, ValueEnum};
use mrc_congestion::CcKind;
use serde::{Deserialize, Serialize};

/// perftest's default TCP port for the bootstrap exchange.
pub const DEFAULT_TCP_PORT: u16 = 18515;

/// mrc-perf: a perftest-style benchmark of mrc over UDP (io_uring) or RDMA UD QPs (verbs).
#[derive(Debug, Parser)]
#[command(name = "mrc-perf", version, long_about = None)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub cmd: Command,
    /// Test parameters (the client's count; the server takes them from the client).
    #[command(flatten)]
    pub test: TestOpts,
    /// Logs on stderr: `-v` info, `-vv` debug; `RUST_LOG` for filters.
    ///
    /// Info: connection states, EVs out of rotation and why, RTO expiries, failures;
    /// debug: the bootstrap's steps. `RUST_LOG` takes EnvFilter directives. Default:
    /// none.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Wait for a client, run its test, exit (`--persistent`: serve many).
    ///
    /// With `--persistent` it serves clients one after another until a signal. A client
    /// that sends bad parameters, or is silent or slow past `--timeout` (a deadline for
    /// its whole setup exchange), is dropped with a line on stderr and the server waits
    /// for the next. SIGINT/SIGTERM during a test end it: the server prints what it
    /// received and exits 130/143; while it waits, they end it at once.
    Server {
        /// Address to listen on (TCP bootstrap and UDP), or one per plane.
        ///
        /// A host with one NIC port per plane gives one address per plane, comma-separated
        /// (`--bind 10.0.0.1,10.1.0.1`): TCP listens on the first, and each connection
        /// sprays its EVs over all of them (docs/PLANES.md). At most 8, one family.
        #[arg(long, default_value = "0.0.0.0", value_name = "ADDR[,ADDR...]")]
        bind: String,
        /// Serve clients one after another, printing each report, until a signal.
        #[arg(long)]
        persistent: bool,
        /// What a client may ask of this server.
        #[command(flatten)]
        limits: ServerLimits,
    },
    /// Connect to a server and run the test.
    ///
    /// SIGINT/SIGTERM end the test at once: the report of what was measured until then is
    /// printed (`--json`: `"ok": false, "error": "interrupted"`) and the exit code is 130
    /// (SIGINT) or 143 (SIGTERM); a second signal a second or more later exits at once.
    Client {
        /// Server host name or address.
        host: String,
        /// This end's address (default: the kernel's choice), or one per plane.
        ///
        /// One per plane, comma-separated, as many as the server's `--bind` (`--bind
        /// 10.0.0.2,10.1.0.2`): the TCP bootstrap leaves from the first, plane `p`'s EVs
        /// from the `p`-th (docs/PLANES.md).
        #[arg(long, value_name = "ADDR[,ADDR...]")]
        bind: Option<String>,
    },
    /// Both ends in this process over loopback.
    ///
    /// SIGINT/SIGTERM end the test at once with its report, as for `client`.
    Loopback {
        /// Use ::1 instead of 127.0.0.1.
        #[arg(long = "ipv6", short = '6')]
        ipv6: bool,
        /// Planes, 1 to 8: one loopback address per plane at each end (IPv4).
        ///
        /// Client 127.0.P.1, server 127.0.P.2 for plane P: each end sprays its EVs over
        /// its planes, as a host with one NIC port per plane (docs/PLANES.md), and the
        /// report has a block per plane. IPv4 only (IPv6 loopback has one address).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8))]
        planes: u8,
    },
    /// The ceilings: raw UDP on the same sockets, and kernel TCP, over loopback.
    ///
    /// A raw UDP blast (bw) or ping-pong (lat) on the same sockets, with the same batching
    /// and packet size and no reliability, and kernel TCP over loopback.
    Baseline {
        /// Use ::1 instead of 127.0.0.1.
        #[arg(long = "ipv6", short = '6')]
        ipv6: bool,
    },
    /// Many hosts: one rank of an MPI job (`mpirun -np N mrc-perf mpi ...`, or srun).
    ///
    /// A pattern (pairs, permutation, all-to-all, incast, one-to-all, ring allreduce) in a
    /// burst mode (continuous, training, storage, sync-burst); rank 0 prints the report.
    /// Needs a build with the `mpi` feature (`--features mrc-examples/mpi`).
    Mpi(crate::mpi::opts::MpiOpts),
}

/// Which datapath carries the datagrams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fabric {
    /// UDP sockets through io_uring; the EV is the UDP source port.
    #[default]
    Udp,
    /// RDMA UD QPs (libibverbs; RoCEv2 or InfiniBand), one per EV group (`-d DEV`).
    Verbs,
}

/// Which thread drives an end's endpoint (datapath, timers, CQs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// An engine thread per end; the test's thread posts and polls over channels
    /// (`mrc_fabric::engine::Context`).
    #[default]
    Thread,
    /// The test's own thread progresses the endpoint (`mrc_fabric::engine::Worker`): no
    /// engine thread, no channel hop; it busy-polls while it waits.
    Caller,
}

/// How a caller-progressed UDP end talks to its sockets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UdpIo {
    /// io_uring (`mrc_fabric::udp::UringDatapath`), as an engine thread uses.
    #[default]
    Uring,
    /// Plain non-blocking `sendmsg` / `recvmmsg` (`mrc_fabric::udp::DirectDatapath`):
    /// `--progress caller` only.
    Direct,
}

/// Which test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum TestKind {
    /// Bandwidth (ib_write_bw).
    Bw,
    /// Latency (ib_write_lat): one way, half the round trip of an 8-byte ping-pong.
    Lat,
}

/// The command-line name (`bw`, `lat`, `udp`, `verbs`), as `--test`/`--fabric` take it.
macro_rules! display_as_value {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.to_possible_value() {
                    Some(v) => f.write_str(v.get_name()),
                    None => write!(f, "{self:?}"),
                }
            }
        }
    };
}
/// How the sender picks the EV of each packet (the transport's
/// `mrc_transport::path::Selection`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathSelection {
    /// Recycled entropy (REPS): reuse the EV of the oldest packet acknowledged without ECN
    /// CE; round-robin when none is waiting. With one packet in flight (`--test lat`) this
    /// keeps reusing one EV while it stays good.
    #[default]
    Recycle,
    /// Round-robin over the good EVs.
    RoundRobin,
    /// Power of two choices on each EV's smoothed RTT.
    PowerOfTwo,
}

impl From<PathSelection> for mrc_transport::path::Selection {
    fn from(s: PathSelection) -> Self {
        match s {
            PathSelection::Recycle => Self::Recycle,
            PathSelection::RoundRobin => Self::RoundRobin,
            PathSelection::PowerOfTwo => Self::PowerOfTwo,
        }
    }
}

display_as_value!(TestKind);
display_as_value!(Fabric);
display_as_value!(PathSelection);
display_as_value!(ProgressMode);

/// Default `--cc`: NSCC, the controller that is sane on both measured paths (issue 21):
/// on idle loopback (`mrc-perf loopback -s 1048576 -D 3 --verify`, medians of interleaved
/// runs) it keeps about 90% of `none`'s bandwidth, and in `mrc-sim experiment cc` it
/// passes every check on seeds 1-8 (incast 86.5-89.4 Gb/s, permutation >= 86% of ideal).
/// The measurements are in docs/PERFORMANCE.md, "Congestion controllers on loopback".
pub const DEFAULT_CC: &str = "nscc";

/// Largest `--mtu`, payload bytes: the transport's largest `mtu_payload_bytes`, whose
/// datagram (56 bytes of headers and a 24-byte authentication trailer on top) fits one
/// IPv4 UDP datagram and the UDP datapath's 64 KiB receive buffers.
pub const MAX_MTU_BYTES: u32 = 65_000;

/// Default `--line-rate`, Gb/s.
pub const DEFAULT_LINE_RATE_GBPS: f64 = 100.0;

/// Default `--base-rtt-us`, us: a userspace engine's RTT on loopback and across a
/// data-centre fabric is tens to hundreds of microseconds, most of it scheduling.
pub const DEFAULT_BASE_RTT_US: f64 = 200.0;

fn parse_cc(s: &str) -> Result<CcKind, String> {
    s.parse::<CcKind>().map_err(|e| e.to_string())
}

/// Test options (global: they may follow the subcommand).
#[derive(Clone, Debug, Args)]
pub struct TestOpts {
    /// Message size, bytes; 64k, 1M, 1G: KiB, MiB, GiB [default: 65536 bw, 8 lat].
    ///
    /// The suffixes k/K, m/M, g/G are powers of 1024, as perftest users write `-s 64K`;
    /// at most 1 GiB.
    #[arg(help_heading = "Test", short = 's', long = "size", value_name = "BYTES", global = true,
          value_parser = super::units::parse_bytes)]
    pub size: Option<u64>,
    /// Every size from 2 B to 8 MiB, one test each (perftest's `-a`).
    ///
    /// The powers of two, each with the same -n or -D, one row each (`--json`: one object each in `sizes`). A client's
    /// server needs `--persistent` (each size is a test of its own).
    #[arg(
        help_heading = "Test",
        short = 'a',
        long = "all",
        global = true,
        conflicts_with = "size"
    )]
    pub all: bool,
    /// Messages to send [default: 5000 for bw, 1000 for lat].
    ///
    /// Not scaled down for large messages: `-s 100000000` sends 5000 of them, 500 GB. A
    /// bw run that will take more than 30 s at the rate of its first second says so on
    /// stderr (bytes and time); Ctrl-C ends any run with the report of what it measured.
    #[arg(
        help_heading = "Test",
        short = 'n',
        long = "iters",
        value_name = "COUNT",
        global = true,
        conflicts_with = "duration"
    )]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of messages.
    #[arg(
        help_heading = "Test",
        short = 'D',
        long = "duration",
        value_name = "SECONDS",
        allow_negative_numbers = true,
        global = true
    )]
    pub duration: Option<f64>,
    /// Number of paths (EVs); one UDP source port each.
    #[arg(
        help_heading = "Paths and congestion control",
        long,
        value_name = "N",
        default_value_t = 16,
        global = true
    )]
    pub paths: u32,
    /// Payload bytes per packet (perftest's `-m`).
    ///
    /// The mrc payload, not the link MTU: headers come on top. 64..=65000 (the
    /// transport's largest: a datagram with headers and authentication trailer still fits
    /// one UDP datagram and the UDP datapath's 64 KiB receive buffers).
    #[arg(
        help_heading = "Paths and congestion control",
        short = 'm',
        long,
        value_name = "BYTES",
        default_value_t = 4096,
        global = true
    )]
    pub mtu: u32,
    /// Congestion control: nscc, dcqcn, swift or none.
    ///
    /// `none` is a fixed window of 2 x BDP. The presets assume --line-rate and
    /// --base-rtt-us.
    #[arg(help_heading = "Paths and congestion control", long, default_value = DEFAULT_CC, value_parser = parse_cc, global = true)]
    pub cc: CcKind,
    /// Line rate the congestion-control presets assume, Gb/s (10^9 bits/s): DCQCN's
    /// starting and highest rate, and with --base-rtt-us the BDP that sizes the windows
    /// (Swift starts at 1 BDP, NSCC's and none's are 2 BDP, DCQCN's 4). Both ends use the
    /// client's; in 0.01..=3200.
    #[arg(help_heading = "Paths and congestion control", hide_short_help = true, long = "line-rate", value_name = "GBPS", default_value_t = DEFAULT_LINE_RATE_GBPS, global = true)]
    pub line_rate_gbps: f64,
    /// Unloaded round-trip time the congestion-control presets assume, us: Swift's and
    /// NSCC's target delays start from it, and the BDP (with --line-rate) sizes the
    /// windows. Both ends use the client's; in 1..=1000000.
    #[arg(help_heading = "Paths and congestion control", hide_short_help = true, long = "base-rtt-us", value_name = "US", default_value_t = DEFAULT_BASE_RTT_US, global = true)]
    pub base_rtt_us: f64,
    /// bw or lat.
    #[arg(help_heading = "Test", long = "test", value_enum, default_value_t = TestKind::Bw, global = true)]
    pub test: TestKind,
    /// Queue pairs in parallel (perftest's `-q`), 1..=16.
    ///
    /// Each QP is a connection of its own with its own engine thread (or sharing
    /// `--engines`) and `--paths` EVs, each running the whole test (`-n` messages each,
    /// or `-D`); the report sums them. Not over two hosts: a server serves one client at
    /// a time.
    #[arg(
        help_heading = "Test",
        short = 'q',
        long = "qps",
        value_name = "N",
        default_value_t = 1,
        global = true
    )]
    pub qps: u32,
    /// Engine threads of each end of `loopback` (UDP, `--progress thread`): the `-q` QPs
    /// of an end share one context of this many engine threads, the QPs spread over them
    /// round-robin, each engine with its own receive socket and rings. Unset: each QP
    /// has a context and an engine thread of its own. In 1..=Q (`-q`).
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long = "engines",
        value_name = "K",
        global = true
    )]
    pub engines: Option<u32>,
    /// `loopback`: both ends' QPs (all `-q` of each) in one context of one engine thread,
    /// whose receive socket and EV sockets carry the client's and the server's packets,
    /// as for ranks of one process (the NCCL plugin's worker). Each packet is then sent,
    /// received and placed on one core, without the hand-off between two ends' engines
    /// on different cores (docs/PERFORMANCE.md). Implies `--engines 1`; other `--engines`
    /// values are refused (a connection's two ends would be on different engines).
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long = "shared-engine",
        global = true
    )]
    pub shared_engine: bool,
    /// Both sides send at once (bw). `-b` as in perftest.
    #[arg(help_heading = "Test", short = 'b', long, global = true)]
    pub bidirectional: bool,
    /// Check every byte of every message at the receiver.
    ///
    /// Checked in the application's memory, on its thread; in bw the default region
    /// doubles, so a slot is checked before the sender may reuse it.
    #[arg(help_heading = "Test", long, global = true)]
    pub verify: bool,
    /// Who progresses each end: `thread` (an engine thread; the test thread talks to it
    /// over channels) or `caller` (the test thread polls the datapath, runs the timers
    /// and fills the CQs itself, busy-polling; over `--fabric udp` or `verbs`; `--cpu` pins
    /// an engine thread, so it pins nothing here). Both ends use the client's choice [default:
    /// caller for --test lat over --fabric udp, thread otherwise].
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long = "progress",
        value_enum,
        global = true
    )]
    pub progress: Option<ProgressMode>,
    /// How a `--progress caller` end drives its UDP sockets: `direct` (plain non-blocking
    /// `sendmsg`/`recvmmsg`, busy-polled) or `uring` (io_uring). Both ends use the
    /// client's choice [default: direct for --test lat with --progress caller (the
    /// faster there: docs/EMBEDDING.md has the numbers), uring otherwise].
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long = "udp-io",
        value_enum,
        global = true
    )]
    pub udp_io: Option<UdpIo>,
    /// Cap the sending rate, Gb/s (10^9 bits/s of message bytes).
    #[arg(
        help_heading = "Test",
        hide_short_help = true,
        long = "rate-limit",
        value_name = "GBPS",
        global = true
    )]
    pub rate_limit: Option<f64>,
    /// Consecutive packets per EV (one GSO send); 1 = pure per-packet spraying.
    #[arg(
        help_heading = "Paths and congestion control",
        hide_short_help = true,
        long = "burst-size",
        default_value_t = 1,
        global = true
    )]
    pub burst_size: u32,
    /// How each side picks the EV of a packet: recycle (REPS), round-robin or
    /// power-of-two (both ends use the client's choice).
    #[arg(help_heading = "Paths and congestion control", hide_short_help = true, long = "path-selection", value_enum, default_value_t = PathSelection::Recycle, global = true)]
    pub path_selection: PathSelection,
    /// Bandwidth in Gb/sec (10^9 bits/s) instead of MB/sec (2^20 bytes).
    ///
    /// In the table and the progress line (perftest's MB is 2^20 bytes). The JSON has both: `bw_*_gbps` and `bw_avg_mib_per_s`.
    #[arg(help_heading = "Report", long = "report-gbits", global = true)]
    pub report_gbits: bool,
    /// Print one JSON object instead of the table.
    #[arg(help_heading = "Report", long, global = true)]
    pub json: bool,
    /// Messages in flight [default: 8 MiB of messages, 2..=128; 1 for lat].
    ///
    /// At most 65536. A depth lower than the default's 128 (large messages), or than asked (the region
    /// holds fewer), is said on stderr before the run.
    #[arg(
        help_heading = "Test",
        short = 't',
        long = "tx-depth",
        value_name = "N",
        global = true
    )]
    pub tx_depth: Option<u64>,
    /// Registered region per side, bytes (k/m/g suffixes as for -s) [default: size x
    /// tx-depth].
    #[arg(help_heading = "Test", hide_short_help = true, long = "region-size", value_name = "BYTES", global = true,
          value_parser = super::units::parse_bytes)]
    pub region_size: Option<u64>,
    /// TCP port of the bootstrap exchange.
    #[arg(help_heading = "Connection", short = 'p', long = "port", default_value_t = DEFAULT_TCP_PORT, global = true)]
    pub port: u16,
    /// UDP port of the receive socket (0: any) [default: 4792 server, 0 others].
    ///
    /// A server holds it from its start: a port in use fails the start, naming it.
    #[arg(
        help_heading = "Connection",
        long = "udp-port",
        value_name = "PORT",
        global = true
    )]
    pub udp_port: Option<u16>,
    /// Engine busy-poll time after the last work before it sleeps in io_uring, us
    /// (at most 1000000).
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long = "spin-us",
        default_value_t = 50,
        global = true
    )]
    pub spin_us: u64,
    /// Seconds of setup and of no progress before giving up.
    ///
    /// Client: to connect, for any progress, and up to 3 times it for the server's
    /// answer (a server sets up one client at a time). Server: the deadline of a client's
    /// whole setup exchange (a slow or silent client is dropped).
    #[arg(
        help_heading = "Connection",
        long,
        value_name = "SECONDS",
        default_value_t = 5.0,
        allow_negative_numbers = true,
        global = true
    )]
    pub timeout: f64,
    /// Datapath: udp (io_uring sockets) or verbs (RDMA UD QPs).
    ///
    /// Both ends must agree.
    #[arg(hide_possible_values = true, help_heading = "This end's datapath", long, value_enum, default_value_t = Fabric::Udp, global = true)]
    pub fabric: Fabric,
    /// RDMA device for --fabric verbs, as ibv_devices lists it [default: the only one].
    #[arg(
        help_heading = "RDMA verbs (--fabric verbs)",
        hide_short_help = true,
        short = 'd',
        long = "ib-dev",
        global = true
    )]
    pub ib_dev: Option<String>,
    /// Port of the RDMA device, from 1 (perftest's `-i`; here `-i` is iperf3's
    /// `--interval`).
    #[arg(
        help_heading = "RDMA verbs (--fabric verbs)",
        hide_short_help = true,
        long = "ib-port",
        default_value_t = 1,
        global = true
    )]
    pub ib_port: u8,
    /// Seconds between progress lines and JSON interval records (iperf3's `-i`).
    ///
    /// A progress line on stderr from the first interval on, and one record per
    /// interval in the JSON's `intervals`. Without it the intervals are 1 s and the progress line starts at 2 s. In
    /// 0.1..=--duration.
    #[arg(
        help_heading = "Report",
        short = 'i',
        long = "interval",
        value_name = "SECONDS",
        allow_negative_numbers = true,
        global = true
    )]
    pub interval: Option<f64>,
    /// Record this side's sent goodput per MS milliseconds in the JSON's `series`.
    ///
    /// The bytes the sender completed in each bucket of MS ms from the start (a bucket
    /// without completions holds 0): a fine time series beside the `-i` intervals, e.g.
    /// `--series-ms 1` around a plane failure. 1..=1000; at most 10^6 buckets.
    #[arg(
        help_heading = "Report",
        hide_short_help = true,
        long = "series-ms",
        value_name = "MS",
        value_parser = clap::value_parser!(u32).range(1..=1000),
        global = true
    )]
    pub series_ms: Option<u32>,
    /// DSCP of this end's packets, 0..=63: the IPv4 TOS / IPv6 traffic class byte is
    /// DSCP x 4 (the low two bits are ECN, the transport's). Each end marks its own
    /// packets: give it to the server too to mark the other direction (ACKs).
    #[arg(help_heading = "This end's datapath", hide_short_help = true, long, value_name = "DSCP", global = true, conflicts_with = "tclass",
          value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: Option<u8>,
    /// IPv6 traffic class / IPv4 TOS byte of this end's packets (perftest's
    /// `--tclass`), 0..=255 and a multiple of 4: its two low bits are the ECN field, which
    /// the transport sets per packet. Each end marks its own packets.
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long,
        value_name = "TCLASS",
        global = true
    )]
    pub tclass: Option<u8>,
    /// Pin this end's engine thread (the one that moves every packet) to this CPU
    /// (sched_setaffinity; in `loopback` the client's engine). Errors if the process may
    /// not run on it.
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long,
        value_name = "N",
        global = true
    )]
    pub cpu: Option<usize>,
    /// UDP datapath: receive with one multishot `recvmsg` over a provided buffer ring
    /// instead of re-armed single ones (`UdpConfig::rx_multishot`; kernel 6.0+, else the
    /// single ones). `--udp-multishot=false` turns it off. This end only.
    #[arg(help_heading = "This end's datapath", hide_short_help = true, long, global = true, value_name = "BOOL", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
    pub udp_multishot: bool,
    /// UDP datapath: send with `IORING_OP_SENDMSG_ZC`, zero-copy (`UdpConfig::tx_zerocopy`).
    /// This end only.
    #[arg(
        help_heading = "This end's datapath",
        hide_short_help = true,
        long,
        global = true
    )]
    pub udp_zerocopy: bool,
    /// UDP datapath: set up the io_urings with `IORING_SETUP_COOP_TASKRUN` (no
    /// interrupt per arriving datagram; `UdpConfig::coop_taskrun`; where the kernel
    /// refuses it, without). `--udp-coop-taskrun=false` turns it off. This end only.
    #[arg(help_heading = "This end's datapath", hide_short_help = true, long, global = true, value_name = "BOOL", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
    pub udp_coop_taskrun: bool,
    /// Advise the kernel to back the two registered regions with transparent huge pages
    /// (`madvise(MADV_HUGEPAGE)` on their whole 2 MiB pages before first touch; counts
    /// where THP is in `madvise` mode, Debian's default). `--huge-pages=false` keeps base
    /// pages. This end only.
    #[arg(help_heading = "This end's datapath", hide_short_help = true, long, global = true, value_name = "BOOL", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", require_equals = true, action = clap::ArgAction::Set)]
    pub huge_pages: bool,
    /// GID index on that port: a RoCEv2 entry (`show_gids`; often 3 for IPv4 on ConnectX,
    /// 1 on Soft-RoCE).
    #[arg(
        help_heading = "RDMA verbs (--fabric verbs)",
        hide_short_help = true,
        short = 'x',
        long = "gid-index",
        default_value_t = 1,
        global = true
    )]
    pub gid_index: u8,
    /// Steer each EV socket through one spine of the testbed (testbed/mrc-testbed.sh):
    /// `srh` (SRH segment list) or `usid` (uSID container as active segment). Given to the
    /// client (an IPv6 testbed host as server); the server steers its EV sockets back
    /// through the same spines. With one --bind address per plane at both ends (the
    /// testbed of `up --planes P`), each EV socket goes through a spine of its own plane
    /// to the peer's address on that plane. Without it, plain routing.
    #[arg(
        help_heading = "SRv6 testbed (--srv6)",
        hide_short_help = true,
        long,
        value_enum,
        global = true
    )]
    pub srv6: Option<super::srv6::Srv6Mode>,
    /// Where the --srv6 header is added: `socket` (a sticky IPV6_RTHDR per EV socket) or
    /// `route` (the EV socket's firewall mark selects the host's steering table, whose
    /// route adds it: `encap seg6 mode inline`, installed by mrc-testbed.sh; keeps UDP GSO
    /// and checksum offload).
    #[arg(help_heading = "SRv6 testbed (--srv6)", hide_short_help = true, long = "srv6-via", value_enum, default_value_t = super::srv6::Srv6Via::Socket, global = true)]
    pub srv6_via: super::srv6::Srv6Via,
    /// RTO floor, us (the transport's RFC 6298 clamp; the initial RTO is 4 times it). An
    /// engine sharing its cores with other work is descheduled for milliseconds, which
    /// fires spurious RTOs below that.
    #[arg(help_heading = "Connection", hide_short_help = true, long = "min-rto-us", default_value_t = super::run::MIN_RTO_NS / 1000, global = true)]
    pub min_rto_us: u64,
    /// Floor of the RACK reorder window and the peer's assumed SACK delay, us.
    #[arg(help_heading = "Connection", hide_short_help = true, long = "reorder-window-us", default_value_t = super::run::REORDER_WINDOW_NS / 1000, global = true)]
    pub reorder_window_us: u64,
    /// Seconds the peer may answer nothing while data waits for it before the transport
    /// gives up (`peer unresponsive for N s`); a pause (SIGSTOP, a descheduled engine)
    /// shorter than this is survived. The client's to choose; it applies to both ends; in
    /// 0.01..=600.
    #[arg(help_heading = "Connection", hide_short_help = true, long = "peer-timeout", value_name = "SECONDS", default_value_t = default_peer_timeout_s(), global = true)]
    pub peer_timeout_s: f64,
    /// Authenticate and encrypt every datagram (AES-256-GCM) under keys derived from the
    /// pre-shared key in this file and fresh nonces of both ends (HKDF-SHA256); both ends
    /// need the same file. The key is the regular file's bytes without one trailing
    /// newline (LF or CRLF), 16 to 4096 of them (e.g. `head -c 32 /dev/urandom > key`).
    #[arg(
        help_heading = "Connection",
        hide_short_help = true,
        long = "psk-file",
        value_name = "PATH",
        global = true
    )]
    pub psk_file: Option<std::path::PathBuf>,
}

/// Longest pre-shared key file `--psk-file` reads, bytes.
pub const MAX_PSK_BYTES: usize = 4096;

/// Reads the pre-shared key of `--psk-file`: the file's bytes without one trailing
/// newline (`\n` or `\r\n`).
///
/// # Errors
/// A message naming the file: unreadable, longer than [`MAX_PSK_BYTES`], or shorter than
/// [`mrc_transport::auth::MIN_PSK_BYTES`].
pub fn read_psk(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let meta =
        std::fs::metadata(path).map_err(|e| format!("--psk-file {}: {e}", path.display()))?;
    if !meta.is_file() {
        // a FIFO or a device would block or never end
        return Err(format!("--psk-file {}: not a regular file", path.display()));
    }
    let f = std::fs::File::open(path).map_err(|e| format!("--psk-file {}: {e}", path.display()))?;
    let mut key = Vec::new();
    f.take(MAX_PSK_BYTES as u64 + 3)
        .read_to_end(&mut key)
        .map_err(|e| format!("--psk-file {}: {e}", path.display()))?;
    if key.last() == Some(&b'\n') {
        key.pop();
        if key.last() == Some(&b'\r') {
            key.pop();
        }
    }
    if key.len() > MAX_PSK_BYTES {
        return Err(format!(
            "--psk-file {}: longer than {MAX_PSK_BYTES} bytes",
            path.display()
        ));
    }
    let min = mrc_transport::auth::MIN_PSK_BYTES;
    if key.len() < min {
        return Err(format!(
            "--psk-file {}: {} bytes, a pre-shared key needs at least {min}",
            path.display(),
            key.len()
        ));
    }
    Ok(key)
}

/// The test as both ends run it (sent from client to server as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestParams {
    /// bw or lat.
    pub test: TestKind,
    /// Message size, bytes.
    pub size: u64,
    /// Messages, or `None` with `duration_s`.
    pub iters: Option<u64>,
    /// Seconds, or `None` with `iters`.
    pub duration_s: Option<f64>,
    /// EVs.
    pub paths: u32,
    /// Payload bytes per packet.
    pub mtu: u32,
    /// `--cc` spelling.
    pub cc: String,
    /// Both directions.
    pub bidirectional: bool,
    /// Check every byte.
    pub verify: bool,
    /// Gb/s cap.
    pub rate_limit_gbps: Option<f64>,
    /// Packets per EV burst.
    pub burst_size: u32,
    /// Messages in flight.
    pub tx_depth: u64,
    /// Region bytes (slots = region / size).
    pub region_size: u64,
    /// Pattern seed.
    pub seed: u64,
    /// `--srv6` of the client: the server steers its EV sockets (ACKs, and data in
    /// bidirectional runs) back through the same spine as the client's EV socket.
    #[serde(default)]
    pub srv6: Option<super::srv6::Srv6Mode>,
    /// Where `srv6` puts the header on (both ends).
    #[serde(default)]
    pub srv6_via: super::srv6::Srv6Via,
    /// Sticky SRH or mark per EV socket of this side, computed locally from `srv6` and the
    /// peer's address (not sent).
    #[serde(skip)]
    pub steering: super::srv6::Steering,
    /// Engine spin before sleeping, us.
    #[serde(default)]
    pub spin_us: u64,
    /// Who progresses each end (both ends use the client's).
    #[serde(default)]
    pub progress: ProgressMode,
    /// How a caller-progressed end drives its UDP sockets (both ends use the client's).
    #[serde(default)]
    pub udp_io: UdpIo,
    /// Datapath (the server refuses a client that asks for another).
    #[serde(default)]
    pub fabric: Fabric,
    /// RTO floor, us (both ends).
    #[serde(default = "default_min_rto_us")]
    pub min_rto_us: u64,
    /// RACK reorder window floor, us (both ends).
    #[serde(default = "default_reorder_window_us")]
    pub reorder_window_us: u64,
    /// EV selection (both ends).
    #[serde(default)]
    pub path_selection: PathSelection,
    /// The transport's unresponsive budget, seconds (both ends).
    #[serde(default = "default_peer_timeout_s")]
    pub peer_timeout_s: f64,
    /// Line rate the congestion-control presets assume, Gb/s (both ends).
    #[serde(default = "default_line_rate_gbps")]
    pub line_rate_gbps: f64,
    /// Base RTT the congestion-control presets assume, us (both ends).
    #[serde(default = "default_base_rtt_us")]
    pub base_rtt_us: f64,
    /// This end authenticates and encrypts its packets (`--psk-file`; for reports, not
    /// sent: the bootstrap's key confirmation tells the peer).
    #[serde(skip)]
    pub authenticated: bool,
}

/// Default `--peer-timeout`, seconds: the transport's
/// [`mrc_transport::send::DEFAULT_UNRESPONSIVE_BUDGET_NS`] (5 s).
fn default_peer_timeout_s() -> f64 {
    mrc_transport::send::DEFAULT_UNRESPONSIVE_BUDGET_NS as f64 / 1e9
}

fn default_line_rate_gbps() -> f64 {
    DEFAULT_LINE_RATE_GBPS
}

fn default_base_rtt_us() -> f64 {
    DEFAULT_BASE_RTT_US
}

fn default_min_rto_us() -> u64 {
    super::run::MIN_RTO_NS / 1000
}

fn default_reorder_window_us() -> u64 {
    super::run::REORDER_WINDOW_NS / 1000
}

/// Largest message, bytes (the transport's message length is 32 bits; 1 GiB keeps the
/// regions in memory).
pub const MAX_SIZE: u64 = 1 << 30;

/// Most messages in flight (`--tx-depth`): twice a ConnectX QP's 32768 work requests. A
/// receiver posts `4 x tx-depth + 64` receives before the first message, so an unbounded depth
/// (up to 2^32 with 1-byte messages in a 4 GiB region) stalled the start for hours and
/// ran the host out of memory.
pub const MAX_TX_DEPTH: u64 = 65536;

/// Longest `--spin-us`, us (1 s): the engine busy-polls this long after its last work, so
/// a client asking the server for `u64::MAX` kept a server core spinning for good.
pub const MAX_SPIN_US: u64 = 1_000_000;

/// Longest `--duration` and `--timeout`, seconds (about 11.6 days): far beyond any test,
/// and far below what `std::time::Duration` and `Instant` arithmetic can hold.
pub const MAX_SECONDS: f64 = 1e6;

/// What a server lets a client ask for (a client is untrusted: its parameters pass
/// [`TestParams::check`] first, then these, tighter, limits of the operator's choosing).
#[derive(Clone, Copy, Debug, PartialEq, Args)]
pub struct ServerLimits {
    /// Largest registered region a client may ask for, bytes, k/m/g suffixes as for -s
    /// (the server registers two).
    #[arg(help_heading = "Server limits (what a client may ask)", hide_short_help = true, long = "max-region-size", value_name = "BYTES", default_value_t = DEFAULT_MAX_REGION_BYTES,
          value_parser = super::units::parse_bytes)]
    pub max_region_bytes: u64,
    /// Longest `--duration` a client may ask for, seconds.
    #[arg(help_heading = "Server limits (what a client may ask)", hide_short_help = true, long = "max-duration", value_name = "SECONDS", default_value_t = DEFAULT_MAX_DURATION_S)]
    pub max_duration_s: f64,
    /// Most `--iters` a client may ask for.
    #[arg(help_heading = "Server limits (what a client may ask)", hide_short_help = true, long = "max-iters", value_name = "N", default_value_t = DEFAULT_MAX_ITERS)]
    pub max_iters: u64,
    /// Longest `--spin-us` a client may ask for (the server's engine busy-polls this long).
    #[arg(help_heading = "Server limits (what a client may ask)", hide_short_help = true, long = "max-spin-us", value_name = "US", default_value_t = DEFAULT_MAX_SPIN_US)]
    pub max_spin_us: u64,
}

/// Default `--max-region-size`, bytes: 1 GiB.
pub const DEFAULT_MAX_REGION_BYTES: u64 = 1 << 30;
/// Default `--max-duration`, seconds: one hour.
pub const DEFAULT_MAX_DURATION_S: f64 = 3600.0;
/// Default `--max-iters`: 100 million messages.
pub const DEFAULT_MAX_ITERS: u64 = 100_000_000;
/// Default `--max-spin-us`: 1 ms.
pub const DEFAULT_MAX_SPIN_US: u64 = 1000;

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_region_bytes: DEFAULT_MAX_REGION_BYTES,
            max_duration_s: DEFAULT_MAX_DURATION_S,
            max_iters: DEFAULT_MAX_ITERS,
            max_spin_us: DEFAULT_MAX_SPIN_US,
        }
    }
}

impl ServerLimits {
    /// Checks a client's (already [`TestParams::check`]ed) parameters.
    ///
    /// # Errors
    /// A refusal naming the value, the limit and the server flag that raises it.
    pub fn check(&self, p: &TestParams) -> Result<(), String> {
        if p.region_size > self.max_region_bytes {
            return Err(format!(
                "a region of {} bytes is more than this server allows ({} bytes, \
                 --max-region-size on the server)",
                p.region_size, self.max_region_bytes
            ));
        }
        if let Some(d) = p.duration_s
            && d > self.max_duration_s
        {
            return Err(format!(
                "--duration {} s is longer than this server allows ({} s, --max-duration \
                 on the server)",
                num(d),
                num(self.max_duration_s)
            ));
        }
        if let Some(n) = p.iters
            && n > self.max_iters
        {
            return Err(format!(
                "--iters {n} is more than this server allows ({}, --max-iters on the server)",
                self.max_iters
            ));
        }
        if p.spin_us > self.max_spin_us {
            return Err(format!(
                "--spin-us {} is more than this server allows ({} us, --max-spin-us on the \
                 server)",
                p.spin_us, self.max_spin_us
            ));
        }
        Ok(())
    }
}

/// `x` as a person writes it: plain for ordinary magnitudes, `1e300` for extreme ones
/// (an error message quoting a hostile value stays one line).
fn num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e9).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// The sizes of `-a/--all`, bytes: perftest's 2 B to 8 MiB, powers of two.
pub const ALL_SIZES: [u64; 23] = {
    let mut s = [0u64; 23];
    let mut i = 0;
    while i < 23 {
        s[i] = 2 << i;
        i += 1;
    }
    s
};

/// Shortest `-i/--interval`, seconds.
pub const MIN_INTERVAL_S: f64 = 0.1;

impl TestOpts {
    /// The TOS / traffic class byte of `--dscp` or `--tclass` (0 without them).
    ///
    /// # Errors
    /// `--tclass` with ECN bits; either with `--fabric verbs` (a UD QP's traffic class
    /// is its address handle's, not set here).
    pub fn traffic_class(&self) -> Result<u8, String> {
        let tc = match (self.dscp, self.tclass) {
            (Some(d), _) => d << 2,
            (None, Some(t)) if t & 3 != 0 => {
                return Err(format!(
                    "--tclass {t}: the two low bits are the ECN field, which the transport \
                     sets per packet; give a multiple of 4 (--tclass {} or --dscp {})",
                    t & !3,
                    t >> 2
                ));
            }
            (None, Some(t)) => t,
            (None, None) => return Ok(0),
        };
        if self.fabric == Fabric::Verbs {
            return Err(
                "--dscp/--tclass are for --fabric udp (the socket's TOS / traffic \
                        class); with --fabric verbs set the GID's traffic class on the NIC"
                    .into(),
            );
        }
        Ok(tc)
    }

    /// The interval of `-i/--interval`, seconds (1 without it).
    ///
    /// # Errors
    /// Not a number in [`MIN_INTERVAL_S`]..=[`MAX_SECONDS`], or longer than `--duration`.
    pub fn interval_s(&self) -> Result<f64, String> {
        let Some(i) = self.interval else {
            return Ok(1.0);
        };
        if !(MIN_INTERVAL_S..=MAX_SECONDS).contains(&i) {
            return Err(format!(
                "--interval must be in {MIN_INTERVAL_S}..={MAX_SECONDS} seconds, got {}",
                num(i)
            ));
        }
        if let Some(d) = self.duration
            && i > d
        {
            return Err(format!(
                "--interval {} s is longer than --duration {} s: no interval would end",
                num(i),
                num(d)
            ));
        }
        Ok(i)
    }

    /// Checks the options and fills in the defaults.
    ///
    /// # Errors
    /// A message naming the bad option.
    pub fn params(&self) -> Result<TestParams, String> {
        if !(self.timeout > 0.0 && self.timeout.is_finite()) {
            return Err(format!(
                "--timeout must be positive, got {}",
                num(self.timeout)
            ));
        }
        if self.timeout > MAX_SECONDS {
            return Err(format!(
                "--timeout {} s is longer than the maximum of {MAX_SECONDS} s",
                num(self.timeout)
            ));
        }
        let size = self.size.unwrap_or(match self.test {
            TestKind::Bw => 65536,
            TestKind::Lat => 8,
        });
        if size == 0 {
            return Err("--size must be at least 1 byte".into());
        }
        if size > MAX_SIZE {
            return Err(format!(
                "--size {size} is larger than the maximum of {MAX_SIZE} bytes"
            ));
        }
        let (iters, duration_s) = match (self.iters, self.duration) {
            (_, Some(d)) => (None, Some(d)),
            (n, None) => (
                Some(n.unwrap_or(match self.test {
                    TestKind::Bw => 5000,
                    TestKind::Lat => 1000,
                })),
                None,
            ),
        };
        let depth_default = super::notices::default_tx_depth(self.test, size);
        let tx_depth = self.tx_depth.unwrap_or(depth_default);
        if tx_depth == 0 {
            return Err("--tx-depth must be at least 1".into());
        }
        // Under --verify a bw receiver checks each slot on its own thread before it posts
        // the receive that lets the sender complete (and reuse) another: twice the slots.
        let slots_per_depth = if self.verify && self.test == TestKind::Bw {
            2
        } else {
            1
        };
        let region_size = match self.region_size {
            Some(r) => r,
            None => size
                .saturating_mul(tx_depth)
                .saturating_mul(slots_per_depth),
        };
        if self.region_size.is_none() && region_size > 4 * MAX_SIZE {
            return Err(format!(
                "--size {size} x --tx-depth {tx_depth} is larger than the 4 GiB region limit"
            ));
        }
        // caller progress drives the UDP datapath only: the verbs fabric keeps its
        // engine thread by default (the Soft-RoCE lab's --test lat runs showed it)
        let progress = self.progress.unwrap_or(match (self.test, self.fabric) {
            (TestKind::Lat, Fabric::Udp) => ProgressMode::Caller,
            _ => ProgressMode::Thread,
        });
        let p = TestParams {
            test: self.test,
            size,
            iters,
            duration_s,
            paths: self.paths,
            mtu: self.mtu,
            cc: self.cc.as_str().to_string(),
            bidirectional: self.bidirectional,
            verify: self.verify,
            rate_limit_gbps: self.rate_limit,
            burst_size: self.burst_size,
            tx_depth: tx_depth.min(region_size / size).max(1),
            region_size,
            seed: 0x6d72_632d_7065_7266,
            srv6: self.srv6,
            srv6_via: self.srv6_via,
            steering: super::srv6::Steering::default(),
            spin_us: self.spin_us,
            progress,
            udp_io: self
                .udp_io
                .unwrap_or(match (self.test, progress, self.fabric) {
                    (TestKind::Lat, ProgressMode::Caller, Fabric::Udp) => UdpIo::Direct,
                    _ => UdpIo::Uring,
                }),
            fabric: self.fabric,
            min_rto_us: self.min_rto_us,
            reorder_window_us: self.reorder_window_us,
            path_selection: self.path_selection,
            peer_timeout_s: self.peer_timeout_s,
            line_rate_gbps: self.line_rate_gbps,
            base_rtt_us: self.base_rtt_us,
            authenticated: self.psk_file.is_some(),
        };
        p.check(self.timeout)?;
        Ok(p)
    }
}

impl TestParams {
    /// What the congestion-control presets assume about the path: `--line-rate`
    /// (bits per second), `--base-rtt-us` (ns), `--mtu`, no trimming.
    pub fn link(&self) -> mrc_congestion::LinkParams {
        mrc_congestion::LinkParams {
            line_rate_bps: (self.line_rate_gbps * 1e9) as u64,
            base_rtt_ns: (self.base_rtt_us * 1e3) as u64,
            mtu_bytes: u64::from(self.mtu),
            trimming_enabled: false,
        }
    }

    /// Checks every field, as the client's options ([`TestOpts::params`]) and as the server
    /// receives them from a client (untrusted: the server runs nothing it did not check).
    /// `timeout_s` is this end's `--timeout`: a rate limit that spaces messages further
    /// apart than it would look like a dead peer.
    ///
    /// # Errors
    /// A message naming the bad option.
    pub fn check(&self, timeout_s: f64) -> Result<(), String> {
        let size = self.size;
        if size == 0 {
            return Err("--size must be at least 1 byte".into());
        }
        if size > MAX_SIZE {
            return Err(format!(
                "--size {size} is larger than the maximum of {MAX_SIZE} bytes"
            ));
        }
        match (self.iters, self.duration_s) {
            (Some(_), Some(_)) | (None, None) => {
                return Err("exactly one of --iters and --duration is needed".into());
            }
            (_, Some(d)) if !(d > 0.0 && d.is_finite()) => {
                return Err(format!(
                    "--duration must be a positive number of seconds, got {}",
                    num(d)
                ));
            }
            (_, Some(d)) if d > MAX_SECONDS => {
                return Err(format!(
                    "--duration {} s is longer than the maximum of {MAX_SECONDS} s",
                    num(d)
                ));
            }
            (Some(0), _) => return Err("--iters must be at least 1".into()),
            _ => {}
        }
        if self.test == TestKind::Lat && self.bidirectional {
            return Err("--bidirectional is only for --test bw".into());
        }
        if self.paths == 0 || self.paths > 4096 {
            return Err(format!("--paths must be in 1..=4096, got {}", self.paths));
        }
        if !(64..=MAX_MTU_BYTES).contains(&self.mtu) {
            return Err(format!(
                "--mtu must be in 64..={MAX_MTU_BYTES} bytes, got {}",
                self.mtu
            ));
        }
        if self.burst_size == 0 || self.burst_size > self.paths {
            return Err(format!(
                "--burst-size must be in 1..=--paths ({}), got {}",
                self.paths, self.burst_size
            ));
        }
        let cc = self
            .cc
            .parse::<CcKind>()
            .map_err(|e| format!("--cc: {e}"))?;
        if !(self.line_rate_gbps >= 0.01 && self.line_rate_gbps <= 3200.0) {
            return Err(format!(
                "--line-rate must be in 0.01..=3200 Gb/s, got {}",
                num(self.line_rate_gbps)
            ));
        }
        if !(self.base_rtt_us >= 1.0 && self.base_rtt_us <= 1e6) {
            return Err(format!(
                "--base-rtt-us must be in 1..=1000000 us, got {}",
                num(self.base_rtt_us)
            ));
        }
        mrc_congestion::AnyController::new(cc, &self.link())
            .map_err(|e| format!("--cc {cc} with --line-rate and --base-rtt-us: {e}"))?;
        if let Some(r) = self.rate_limit_gbps {
            if !(r > 0.0 && r.is_finite()) {
                return Err(format!(
                    "--rate-limit must be a positive number of Gb/s, got {}",
                    num(r)
                ));
            }
            let gap_s = size as f64 * 8.0 / (r * 1e9);
            if gap_s >= timeout_s {
                return Err(format!(
                    "--rate-limit {} Gb/s posts a {size}-byte message every {} s, not \
                     within --timeout {} s (the peer would look dead): raise the rate or \
                     --timeout",
                    num(r),
                    num(gap_s),
                    num(timeout_s)
                ));
            }
        }
        if self.min_rto_us == 0 || self.min_rto_us > 10_000_000 {
            return Err(format!(
                "--min-rto-us must be in 1..=10000000, got {}",
                self.min_rto_us
            ));
        }
        if !(self.peer_timeout_s >= 0.01 && self.peer_timeout_s <= 600.0) {
            return Err(format!(
                "--peer-timeout must be in 0.01..=600 seconds, got {}",
                num(self.peer_timeout_s)
            ));
        }
        if self.reorder_window_us > 10_000_000 {
            return Err(format!(
                "--reorder-window-us must be at most 10000000, got {}",
                self.reorder_window_us
            ));
        }
        if size > self.region_size {
            return Err(format!(
                "--size {size} is larger than the region ({} bytes, --region-size)",
                self.region_size
            ));
        }
        if self.region_size > 4 * MAX_SIZE {
            return Err(format!(
                "--region-size {} is larger than 4 GiB",
                self.region_size
            ));
        }
        if self.spin_us > MAX_SPIN_US {
            return Err(format!(
                "--spin-us must be at most {MAX_SPIN_US}, got {}",
                self.spin_us
            ));
        }
        if self.tx_depth > MAX_TX_DEPTH {
            return Err(format!(
                "--tx-depth must be at most {MAX_TX_DEPTH}, got {}",
                self.tx_depth
            ));
        }
        if self.verify && self.test == TestKind::Bw && self.region_size / size < 2 {
            return Err(format!(
                "--verify needs a region of at least 2 messages (--region-size {} holds {})",
                self.region_size,
                self.region_size / size
            ));
        }
        if self.udp_io == UdpIo::Direct
            && (self.progress != ProgressMode::Caller || self.fabric != Fabric::Udp)
        {
            return Err("--udp-io direct needs --progress caller over --fabric udp".into());
        }
        if self.tx_depth == 0 || self.tx_depth > self.region_size / size {
            return Err(format!(
                "--tx-depth must be in 1..={} (messages that fit the region), got {}",
                self.region_size / size,
                self.tx_depth
            ));
        }
        Ok(())
    }
}

/// The addresses of `--bind` (`flag` names the option in errors): one, or one per plane,
/// comma-separated; with two or more, at most [`mrc_fabric::udp::MAX_PLANE_IPS`], of one
/// family, none unspecified or repeated.
///
/// # Errors
/// What is wrong, naming the option and the address.
pub fn parse_plane_list(flag: &str, list: &str) -> Result<Vec<std::net::IpAddr>, String> {
    let ips = list
        .split(',')
        .map(|a| {
            let a = a.trim();
            a.parse::<std::net::IpAddr>()
                .map_err(|e| format!("{flag} {list}: {a:?}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ips.len() < 2 {
        return Ok(ips);
    }
    let max = mrc_fabric::udp::MAX_PLANE_IPS;
    if ips.len() > max {
        return Err(format!(
            "{flag} {list}: {} addresses, at most {max} planes",
            ips.len()
        ));
    }
    for (i, ip) in ips.iter().enumerate() {
        if ip.is_ipv6() != ips[0].is_ipv6() {
            return Err(format!(
                "{flag} {list}: {} and {ip} are of two families; every plane's address is of one",
                ips[0]
            ));
        }
        if ip.is_unspecified() {
            return Err(format!(
                "{flag} {list}: {ip} is unspecified; give each plane's own address"
            ));
        }
        if ips[..i].contains(ip) {
            return Err(format!("{flag} {list}: {ip} is given twice"));
        }
    }
    Ok(ips)
}

#[cfg(test)]
mod progress_and_verify_tests {
    use super::*;

    fn params(args: &[&str]) -> Result<TestParams, String> {
        let mut v = vec!["mrc-perf", "loopback"];
        v.extend_from_slice(args);
        Cli::parse_from(v).test.params()
    }

    #[test]
    fn progress_defaults_to_caller_for_lat_and_thread_for_bw() {
        assert_eq!(
            params(&["--test", "lat"]).unwrap().progress,
            ProgressMode::Caller
        );
        assert_eq!(params(&[]).unwrap().progress, ProgressMode::Thread);
        assert_eq!(
            params(&["--progress", "caller"]).unwrap().progress,
            ProgressMode::Caller
        );
        assert_eq!(
            params(&["--test", "lat", "--progress", "thread"])
                .unwrap()
                .progress,
            ProgressMode::Thread
        );
        // caller progress drives UDP only: lat over verbs keeps the engine thread
        assert_eq!(
            params(&["--test", "lat", "--fabric", "verbs"])
                .unwrap()
                .progress,
            ProgressMode::Thread
        );
        // ... and takes caller progress when asked (the test thread polls the device)
        let mut p = params(&["--progress", "caller"]).unwrap();
        p.fabric = Fabric::Verbs;
        assert_eq!(p.check(5.0), Ok(()));
    }

    #[test]
    fn udp_io_defaults_to_direct_for_lat_under_caller_progress_only() {
        assert_eq!(params(&["--test", "lat"]).unwrap().udp_io, UdpIo::Direct);
        assert_eq!(params(&[]).unwrap().udp_io, UdpIo::Uring);
        assert_eq!(
            params(&["--progress", "caller"]).unwrap().udp_io,
            UdpIo::Uring
        );
        assert_eq!(
            params(&["--progress", "caller", "--udp-io", "direct"])
                .unwrap()
                .udp_io,
            UdpIo::Direct
        );
        assert_eq!(
            params(&["--test", "lat", "--udp-io", "uring"])
                .unwrap()
                .udp_io,
            UdpIo::Uring
        );
        assert_eq!(
            params(&["--test", "lat", "--progress", "thread"])
                .unwrap()
                .udp_io,
            UdpIo::Uring
        );
        assert_eq!(
            params(&[
                "--test",
                "lat",
                "--progress",
                "thread",
                "--udp-io",
                "direct"
            ]),
            Err("--udp-io direct needs --progress caller over --fabric udp".to_string())
        );
    }

    /// Huge pages are on unless turned off with `=false`; a bare value is not taken as
    /// the flag's (it would be the next argument).
    #[test]
    fn huge_pages_default_on_and_take_a_value_only_with_equals() {
        let huge = |args: &[&str]| {
            let mut v = vec!["mrc-perf", "loopback"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v).map(|c| c.test.huge_pages)
        };
        assert!(huge(&[]).unwrap());
        assert!(huge(&["--huge-pages"]).unwrap());
        assert!(huge(&["--huge-pages=true"]).unwrap());
        assert!(!huge(&["--huge-pages=false"]).unwrap());
        assert_eq!(
            huge(&["--huge-pages=maybe"]).unwrap_err().kind(),
            clap::error::ErrorKind::InvalidValue
        );
        assert_eq!(
            huge(&["--huge-pages", "false"]).unwrap_err().kind(),
            clap::error::ErrorKind::UnknownArgument
        );
    }

    /// Multishot receive and cooperative task work are on unless turned off with
    /// `=false` (the `UdpConfig` defaults); zero-copy is off unless asked.
    #[test]
    fn udp_mechanics_default_to_the_udp_config_defaults() {
        let mech = |args: &[&str]| {
            let mut v = vec!["mrc-perf", "loopback"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v).map(|c| {
                (
                    c.test.udp_multishot,
                    c.test.udp_coop_taskrun,
                    c.test.udp_zerocopy,
                )
            })
        };
        let d = mrc_fabric::udp::UdpConfig::default();
        assert_eq!(mech(&[]).unwrap(), (true, true, false));
        assert_eq!(
            mech(&[]).unwrap(),
            (d.rx_multishot, d.coop_taskrun, d.tx_zerocopy)
        );
        assert_eq!(
            mech(&["--udp-multishot", "--udp-coop-taskrun"]).unwrap(),
            (true, true, false)
        );
        assert_eq!(
            mech(&["--udp-multishot=false", "--udp-zerocopy"]).unwrap(),
            (false, true, true)
        );
        assert_eq!(
            mech(&["--udp-coop-taskrun=false", "--udp-multishot=true"]).unwrap(),
            (true, false, false)
        );
        let e = mech(&["--udp-multishot=maybe"]).unwrap_err().to_string();
        assert!(e.contains("invalid value 'maybe'"), "{e}");
        let r = crate::perf::run::UdpMechanics::default();
        assert_eq!(
            (r.multishot, r.coop_taskrun, r.zerocopy),
            (true, true, false)
        );
    }

    #[test]
    fn verify_doubles_the_default_bw_region_and_needs_two_slots() {
        // 1 MiB x depth 8 (8 MiB of depth): 8 MiB without --verify, 16 MiB with it.
        let p = params(&["-s", "1048576"]).unwrap();
        assert_eq!((p.tx_depth, p.region_size), (8, 8 << 20));
        let v = params(&["-s", "1048576", "--verify"]).unwrap();
        assert_eq!((v.tx_depth, v.region_size), (8, 16 << 20));
        // The latency test keeps one slot.
        let l = params(&["--test", "lat", "--verify"]).unwrap();
        assert_eq!((l.tx_depth, l.region_size), (1, 8));
        let mut one = params(&["-s", "4096", "-t", "1", "--region-size", "4096"]).unwrap();
        assert_eq!(one.check(5.0), Ok(()));
        one.verify = true;
        assert_eq!(
            one.check(5.0),
            Err(
                "--verify needs a region of at least 2 messages (--region-size 4096 holds 1)"
                    .to_string()
            )
        );
    }
}
