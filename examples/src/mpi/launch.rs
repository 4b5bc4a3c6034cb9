//! The MPI side of `mrc-perf mpi` (feature `mpi`): MPI is the commander (launch, the
//! rank-to-host map, the parameter check, the handle exchange, barriers, the clock
//! offsets, the common start time, the gather of results); mrc carries the data.
//!
//! Every phase ends in a checkpoint: an `Allgather` of each rank's status (ok, or its
//! error), so that every rank takes the same decision and rank 0 prints every rank's
//! error with its host. A watchdog thread bounds every phase: a rank that waits past the
//! phase's deadline (a peer stopped, or died without mpirun noticing) prints where it
//! waited and calls `MPI_Abort`, which ends every rank of the job.

use super::conn::RankConn;
use super::handles::{self, HANDLE_BYTES};
use super::opts::{Injected, MpiOpts, Pattern, Plan};
use super::results::{EvCounters, RankResult};
use super::{addr, allreduce, clock, data, patterns};
use crate::perf::opts::TestOpts;
use mpi::Threading;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Exit code when the ranks' parameters are refused or differ.
pub const EXIT_PARAMS: i32 = 2;
/// Exit code of a rank's watchdog (`MPI_Abort`).
pub const EXIT_WATCHDOG: i32 = 3;
/// Bytes of one rank's status in a checkpoint.
const STATUS_BYTES: usize = 512;
/// Bytes of a host name in the rank-to-host exchange.
const HOST_BYTES: usize = 64;
/// Ping-pongs per rank and round of the clock measurement.
const CLOCK_ROUNDS: usize = 32;

type Phase = Arc<Mutex<Option<(String, Instant)>>>;

/// Bounds every phase: past its deadline, prints where the rank waited and aborts the job.
struct Watchdog {
    phase: Phase,
}

impl Watchdog {
    fn start(rank: u32, host: String) -> Watchdog {
        let phase: Phase = Arc::new(Mutex::new(None));
        let p = Arc::clone(&phase);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(20));
                let late = p
                    .lock()
                    .ok()
                    .and_then(|g| g.clone())
                    .filter(|(_, d)| Instant::now() > *d);
                if let Some((name, _)) = late {
                    eprintln!(
                        "mrc-perf mpi: error: rank {rank} ({host}): {name} did not finish \
                         in time (a rank stopped, hung or died before it): aborting the job \
                         (MPI_Abort {EXIT_WATCHDOG})"
                    );
                    SimpleCommunicator::world().abort(EXIT_WATCHDOG);
                }
            }
        });
        Watchdog { phase }
    }

    fn arm(&self, name: &str, within: Duration) {
        if let Ok(mut g) = self.phase.lock() {
            *g = Some((name.to_string(), Instant::now() + within));
        }
    }

    fn disarm(&self) {
        if let Ok(mut g) = self.phase.lock() {
            *g = None;
        }
    }
}

/// The job: the communicator and what every phase needs.
struct Job<'a> {
    world: &'a SimpleCommunicator,
    wd: &'a Watchdog,
    rank: u32,
    size: u32,
    hosts: Vec<String>,
    /// Deadline of a collective phase.
    coll: Duration,
    json: bool,
}

impl Job<'_> {
    /// Every rank's status after `phase`; rank 0 prints the errors. Returns whether any
    /// rank failed.
    fn checkpoint(&self, phase: &str, err: Option<&str>) -> bool {
        let what = match err {
            None => format!("the checkpoint after {phase} (this rank: ok)"),
            Some(e) => format!("the checkpoint after {phase} (this rank: {e})"),
        };
        self.wd.arm(&what, self.coll);
        let mut rec = [0u8; STATUS_BYTES];
        if let Some(e) = err {
            rec[0] = 1;
            let b = e.as_bytes();
            let n = b.len().min(STATUS_BYTES - 1);
            rec[1..1 + n].copy_from_slice(&b[..n]);
        }
        let mut all = vec![0u8; STATUS_BYTES * self.size as usize];
        self.world.all_gather_into(&rec[..], &mut all[..]);
        let errors: Vec<(u32, String)> = all
            .chunks_exact(STATUS_BYTES)
            .enumerate()
            .filter(|(_, c)| c[0] == 1)
            .map(|(r, c)| {
                let end = c[1..]
                    .iter()
                    .position(|b| *b == 0)
                    .map_or(STATUS_BYTES, |p| p + 1);
                (r as u32, String::from_utf8_lossy(&c[1..end]).into_owned())
            })
            .collect();
        if errors.is_empty() {
            return false;
        }
        if self.rank == 0 {
            self.report_errors(phase, &errors);
        }
        true
    }

    fn host(&self, r: u32) -> &str {
        self.hosts.get(r as usize).map_or("?", |h| h.as_str())
    }

    fn report_errors(&self, phase: &str, errors: &[(u32, String)]) {
        if errors.len() == self.size as usize && errors.iter().all(|(_, e)| *e == errors[0].1) {
            eprintln!("mrc-perf mpi: error: {phase}: every rank: {}", errors[0].1);
        } else {
            for (r, e) in errors {
                eprintln!(
                    "mrc-perf mpi: error: {phase}: rank {r} ({}): {e}",
                    self.host(*r)
                );
            }
        }
        if self.json {
            let v = serde_json::json!({
                "ok": false,
                "phase": phase,
                "errors": errors.iter().map(|(r, e)| serde_json::json!({
                    "rank": r, "host": self.host(*r), "error": e})).collect::<Vec<_>>(),
            });
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
    }
}

/// Entry point of `mrc-perf mpi`: initialises MPI, runs the job, finalises; the exit code.
pub fn main(test: &TestOpts, o: &MpiOpts) -> i32 {
    let Some((universe, _threading)) = mpi::initialize_with_threading(Threading::Multiple) else {
        eprintln!("mrc-perf mpi: error: MPI was already initialised");
        return 1;
    };
    let world = universe.world();
    let rank = world.rank() as u32;
    let size = world.size() as u32;
    let host = mpi::environment::processor_name().unwrap_or_else(|_| "?".into());
    let wd = Watchdog::start(rank, host.clone());
    let t = if test.timeout.is_finite() {
        test.timeout.clamp(0.1, 600.0)
    } else {
        5.0
    };
    let mut job = Job {
        world: &world,
        wd: &wd,
        rank,
        size,
        hosts: Vec::new(),
        coll: Duration::from_secs_f64(2.0 * t + 10.0),
        json: test.json,
    };
    let code = run(&mut job, test, o, &host);
    wd.disarm();
    drop(universe);
    code
}

fn gather_hosts(job: &mut Job<'_>, host: &str) {
    job.wd.arm(
        "the rank-to-host exchange",
        job.coll + Duration::from_secs(50),
    );
    let mut rec = [0u8; HOST_BYTES];
    let b = host.as_bytes();
    let n = b.len().min(HOST_BYTES);
    rec[..n].copy_from_slice(&b[..n]);
    let mut all = vec![0u8; HOST_BYTES * job.size as usize];
    job.world.all_gather_into(&rec[..], &mut all[..]);
    job.hosts = all
        .chunks_exact(HOST_BYTES)
        .map(|c| {
            let end = c.iter().position(|x| *x == 0).unwrap_or(HOST_BYTES);
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect();
}

/// The parameter check: every rank's plan hash against rank 0's; rank 0 prints each
/// differing field of each differing rank. Returns whether they differ.
fn plans_differ(job: &Job<'_>, plan: &Plan) -> bool {
    job.wd.arm("the parameter comparison", job.coll);
    let mine = plan.hash();
    let mut all = vec![0u64; job.size as usize];
    job.world.all_gather_into(&mine, &mut all[..]);
    let odd: Vec<u32> = (0..job.size)
        .filter(|r| all[*r as usize] != all[0])
        .collect();
    if odd.is_empty() {
        return false;
    }
    if job.rank == 0 {
        let mut lines = Vec::new();
        for &r in &odd {
            let (bytes, _) = job.world.process_at_rank(r as i32).receive_vec::<u8>();
            let theirs = String::from_utf8_lossy(&bytes).into_owned();
            let d = plan.differences(&theirs);
            lines.push(format!(
                "rank {r} ({}) differs from rank 0 ({}): {}",
                job.host(r),
                job.host(0),
                d.join(", ")
            ));
        }
        let msg = format!(
            "parameters differ across ranks (every rank must get the same options; \
             rank 0's value first): {}",
            lines.join("; ")
        );
        eprintln!("mrc-perf mpi: error: {msg}");
        if job.json {
            print!("{}", crate::perf::report::failure_json(&msg));
        }
    } else if odd.contains(&job.rank) {
        job.world.process_at_rank(0).send(plan.to_json().as_bytes());
    }
    true
}

/// The clock offset of this rank to rank 0: (offset, round trip, residual after
/// correction), ns; rank 0 serves every other rank in turn.
fn clock_offsets(job: &Job<'_>) -> (i64, i64, i64) {
    job.wd.arm("the clock offset measurement", job.coll);
    if job.rank == 0 {
        for r in 1..job.size {
            let p = job.world.process_at_rank(r as i32);
            for _ in 0..2 * CLOCK_ROUNDS {
                let (_t1, _) = p.receive::<i64>();
                let t2 = clock::monotonic_ns();
                p.send(&t2);
            }
        }
        return (0, 0, 0);
    }
    let p = job.world.process_at_rank(0);
    let round = |corr: i64| -> (i64, i64) {
        let mut s = Vec::with_capacity(CLOCK_ROUNDS);
        for _ in 0..CLOCK_ROUNDS {
            let t1 = clock::monotonic_ns() + corr;
            p.send(&t1);
            let (t2, _) = p.receive::<i64>();
            let t4 = clock::monotonic_ns() + corr;
            s.push(clock::Sample { t1, t2, t4 });
        }
        clock::offset(&s).unwrap_or((0, 0))
    };
    let (off, rtt) = round(0);
    let (residual, _) = round(off);
    (off, rtt, residual)
}

fn run(job: &mut Job<'_>, test: &TestOpts, o: &MpiOpts, host: &str) -> i32 {
    gather_hosts(job, host);
    let plan = Plan::new(test, o, job.size);
    if job.checkpoint(
        "the parameter check",
        plan.as_ref().err().map(|s| s.as_str()),
    ) {
        return EXIT_PARAMS;
    }
    let Ok(plan) = plan else { return EXIT_PARAMS };
    if plans_differ(job, &plan) {
        return EXIT_PARAMS;
    }
    let me = job.rank;
    let streams = patterns::streams(plan.pattern, plan.ranks, plan.root, plan.seed);
    let peers = patterns::peers(&streams, me);
    let dsts = patterns::destinations(&streams, me);
    let srcs = patterns::sources(&streams, me);
    // setup: the engine, a QP per peer, receives posted
    job.wd.arm("the setup", job.coll);
    let region = if plan.pattern == Pattern::Allreduce {
        allreduce::region_bytes(plan.params.size, plan.ranks)
    } else {
        super::conn::stream_region_bytes(&plan.params)
    };
    let netns = o.netns.as_deref().map(|t| addr::netns_path(t, me));
    let opened = (|| -> Result<RankConn, String> {
        // every rank reads the key itself (the same path under mpirun); it never crosses
        // MPI
        let psk = test
            .psk_file
            .as_deref()
            .map(crate::perf::opts::read_psk)
            .transpose()?;
        // one network per plane (`--bind-net A/n,B/n`), or none
        let nets: Vec<addr::Cidr> = match o.bind_net.as_deref() {
            Some(list) => list
                .split(',')
                .map(|n| n.trim().parse())
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        addr::in_netns(netns.as_deref(), || {
            let binds: Vec<std::net::IpAddr> = match (&o.bind, nets.as_slice()) {
                (Some(b), _) => crate::perf::opts::parse_plane_list("--bind", b)?,
                (None, []) => vec![addr::pick(&addr::interface_addrs(), None)?],
                (None, nets) => {
                    let have = addr::interface_addrs();
                    let ips = nets
                        .iter()
                        .map(|n| addr::pick(&have, Some(*n)))
                        .collect::<Result<Vec<_>, _>>()?;
                    let list: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
                    crate::perf::opts::parse_plane_list("--bind-net", &list.join(","))?
                }
            };
            if binds.len() > 1 && o.advertise.is_some() {
                return Err(
                    "--advertise names one address: not with one address per plane (--bind A,B)"
                        .to_string(),
                );
            }
            RankConn::open(&plan.params, &binds, o.advertise, me, psk)
        })?
    })();
    if job.checkpoint(
        "opening the datapath",
        opened.as_ref().err().map(|s| s.as_str()),
    ) {
        return 1;
    }
    let Ok(conn) = opened else { return 1 };
    // every rank's address, for the steering towards each peer
    job.wd.arm("the address exchange", job.coll);
    let mine = handles::encode_addr(conn.advertised);
    let mut all = vec![0u8; handles::ADDR_BYTES * job.size as usize];
    job.world.all_gather_into(&mine[..], &mut all[..]);
    let setup = (|| -> Result<RankConn, String> {
        let mut c = conn;
        // The QPs share their EV sockets unless --srv6 gives each peer segment lists
        // of its own: then at most one set per QP.
        let sets = if plan.params.srv6.is_some() {
            peers.len() as u64
        } else {
            1
        };
        let need = 1 + sets * u64::from(plan.params.paths.div_ceil(plan.params.burst_size));
        let limit = open_files_limit();
        if need + 64 > limit {
            return Err(format!(
                "{sets} x ceil(--paths {} / --burst-size {}) EV sockets (one set shared by \
                 all QPs, one per QP with --srv6) need {need} file descriptors, more than \
                 this process may open ({limit}, ulimit -n, less 64 for the rest): lower \
                 --paths, raise --burst-size or ulimit -n",
                plan.params.paths, plan.params.burst_size
            ));
        }
        let tb = match plan.params.srv6 {
            Some(_) => Some(super::steer::load_plan(o.testbed_plan.as_deref())?),
            None => None,
        };
        for &peer in &peers {
            let at = handles::decode_addr(
                &all[peer as usize * handles::ADDR_BYTES
                    ..(peer as usize + 1) * handles::ADDR_BYTES],
            )
            .map_err(|e| format!("address of rank {peer}: {e}"))?;
            let mut p = plan.params.clone();
            if let (Some(mode), Some(tb)) = (p.srv6, &tb) {
                p.steering =
                    super::steer::steering(tb, mode, p.srv6_via, at.ip(), p.paths, p.burst_size)
                        .map_err(|e| format!("steering towards rank {peer}: {e}"))?;
            }
            c.add_qp(&p, peer, region)?;
        }
        for i in 0..c.qps.len() {
            let peer = c.qps[i].peer;
            let receives = srcs.contains(&peer) || plan.pattern == Pattern::Allreduce;
            c.post_recvs(
                i,
                1 + if receives {
                    data::stream_recvs(&plan)
                } else {
                    0
                },
            )?;
            if receives && plan.params.verify && plan.pattern != Pattern::Allreduce {
                c.set_verify(
                    i,
                    plan.params.size,
                    patterns::stream_seed(plan.seed, peer, me),
                )?;
            }
        }
        Ok(c)
    })();
    if job.checkpoint("the setup", setup.as_ref().err().map(|s| s.as_str())) {
        return 1;
    }
    let Ok(mut conn) = setup else { return 1 };
    // handles: one per pair, by Alltoall
    job.wd.arm("the handle exchange", job.coll);
    let n = job.size as usize;
    let mut out = vec![0u8; HANDLE_BYTES * n];
    for (i, q) in conn.qps.iter().enumerate() {
        let h = handles::encode(Some(&conn.handle(i)));
        let p = q.peer as usize;
        out[p * HANDLE_BYTES..(p + 1) * HANDLE_BYTES].copy_from_slice(&h);
    }
    for p in 0..n {
        if conn.index(p as u32).is_none() {
            out[p * HANDLE_BYTES..(p + 1) * HANDLE_BYTES].copy_from_slice(&handles::encode(None));
        }
    }
    let mut inb = vec![0u8; HANDLE_BYTES * n];
    job.world.all_to_all_into(&out[..], &mut inb[..]);
    let mut my_ports = Vec::new();
    let connected = (|| -> Result<(), String> {
        for i in 0..conn.qps.len() {
            let p = conn.qps[i].peer as usize;
            let h = handles::decode(&inb[p * HANDLE_BYTES..(p + 1) * HANDLE_BYTES])
                .map_err(|e| format!("handle from rank {p}: {e}"))?;
            let ports = conn
                .connect(i, &h)
                .map_err(|e| format!("connect to rank {p} at {}: {e}", h.udp))?;
            my_ports.push(ports);
        }
        Ok(())
    })();
    if job.checkpoint("connecting", connected.as_ref().err().map(|s| s.as_str())) {
        return 1;
    }
    // EV source ports, so that each QP accepts its peer's sockets only
    job.wd.arm("the source port exchange", job.coll);
    let per = plan.params.paths.div_ceil(plan.params.burst_size) as usize;
    let mut out = vec![0u16; per * n];
    for (i, q) in conn.qps.iter().enumerate() {
        let p = q.peer as usize;
        for (k, port) in my_ports[i].iter().take(per).enumerate() {
            out[p * per + k] = *port;
        }
    }
    let mut inp = vec![0u16; per * n];
    job.world.all_to_all_into(&out[..], &mut inp[..]);
    let ported = (|| -> Result<(), String> {
        for i in 0..conn.qps.len() {
            let p = conn.qps[i].peer as usize;
            let ports: Vec<u16> = inp[p * per..(p + 1) * per]
                .iter()
                .copied()
                .filter(|x| *x != 0)
                .collect();
            conn.set_peer_ports(i, &ports)
                .map_err(|e| format!("source ports of rank {p}: {e}"))?;
        }
        Ok(())
    })();
    if job.checkpoint(
        "the source port exchange",
        ported.as_ref().err().map(|s| s.as_str()),
    ) {
        return 1;
    }
    // every pair reaches each other over mrc
    job.wd.arm("the connection probe", job.coll);
    let probed = data::probe(&conn, Duration::from_secs_f64(plan.timeout_s));
    if job.checkpoint(
        "the connection probe",
        probed.as_ref().err().map(|s| s.as_str()),
    ) {
        return 1;
    }
    let (offset_ns, rtt_ns, residual_ns) = clock_offsets(job);
    // the start: a barrier, then (training, sync-burst, allreduce) one instant on rank
    // 0's clock, 50 ms ahead, each rank's own clock corrected by its offset
    job.wd.arm("the start barrier", job.coll);
    job.world.barrier();
    let common = !matches!(
        plan.mode,
        super::opts::Mode::Continuous | super::opts::Mode::Storage
    ) || plan.pattern == Pattern::Allreduce;
    let mut t0 = clock::monotonic_ns() + 50_000_000;
    job.world.process_at_rank(0).broadcast_into(&mut t0);
    let start = if common {
        let local = t0 - offset_ns;
        Instant::now()
            + Duration::from_nanos(local.saturating_sub(clock::monotonic_ns()).max(0) as u64)
    } else {
        Instant::now()
    };
    if let Some((r, what)) = plan.inject
        && r == me
    {
        match what {
            Injected::Exit => {
                eprintln!("mrc-perf mpi: rank {me}: exiting in the data phase (--inject-failure)");
                std::process::exit(1);
            }
            Injected::Hang => {
                eprintln!("mrc-perf mpi: rank {me}: stopping in the data phase (--inject-failure)");
                job.wd.disarm();
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
        }
    }
    let planned = super::bursts::Schedule::new(&plan, 0).planned_ns()
        + if plan.pattern == Pattern::Allreduce {
            plan.bursts * plan.period_ns
        } else {
            0
        };
    job.wd.arm(
        "the data phase",
        Duration::from_nanos(planned) + Duration::from_secs_f64(4.0 * plan.timeout_s) + job.coll,
    );
    let mut res = RankResult {
        rank: me,
        host: host.to_string(),
        udp: conn.advertised.to_string(),
        pid: std::process::id(),
        qps: conn.qps.len() as u32,
        sockets: conn.sockets(),
        clock_offset_ns: offset_ns,
        clock_rtt_ns: rtt_ns,
        clock_residual_ns: residual_ns,
        ..Default::default()
    };
    let ran: Result<(), String> = if plan.pattern == Pattern::Allreduce {
        allreduce::run(&mut conn, &plan, me, start).map(|a| {
            res.sent_bytes = a.sent_bytes;
            res.recv_bytes = a.recv_bytes;
            res.sent_messages = a.iterations_ns.len() as u64 * 2 * u64::from(plan.ranks - 1);
            res.recv_messages = res.sent_messages;
            res.send_span_ns = a.span_ns;
            res.recv_span_ns = a.span_ns;
            res.checked_elements = a.checked_elements;
            res.bad_elements = a.bad_elements;
            res.bursts = a
                .iterations_ns
                .iter()
                .enumerate()
                .map(|(k, v)| (k as u64, *v))
                .collect();
            res.start_late_ns = late(&a.start_late_ns);
        })
    } else {
        data::run_streams(&mut conn, &plan, me, &dsts, &srcs, start).map(|s| {
            res.sent_messages = s.sent_messages;
            res.sent_bytes = s.sent_bytes;
            res.send_span_ns = s.send_span_ns;
            res.recv_messages = s.recv_messages;
            res.recv_bytes = s.recv_bytes;
            res.recv_span_ns = s.recv_span_ns;
            res.bursts = s.bursts;
            res.message_ns = super::results::dist(s.message_ns.iter().copied())
                .map_or([0; 3], |d| [d.1, d.2, d.3]);
            res.start_late_ns = late(&s.start_late_ns);
        })
    };
    let ran = ran.and_then(|()| fill_counters(&conn, &mut res));
    if job.checkpoint("the data phase", ran.as_ref().err().map(|s| s.as_str())) {
        return 1;
    }
    // results to rank 0
    job.wd.arm("the gather of results", job.coll);
    let mine = serde_json::to_vec(&res).unwrap_or_default();
    let code = if job.rank == 0 {
        let mut all = vec![res];
        for r in 1..job.size {
            let (b, _) = job.world.process_at_rank(r as i32).receive_vec::<u8>();
            match serde_json::from_slice::<RankResult>(&b) {
                Ok(x) => all.push(x),
                Err(e) => {
                    eprintln!("mrc-perf mpi: error: rank {r}'s results unreadable: {e}");
                    return 1;
                }
            }
        }
        if job.json {
            print!("{}", super::results::report_json(&plan, &all));
        } else {
            print!("{}", super::results::report_table(&plan, &all));
        }
        let s = super::results::summarize(&all);
        let short = plan.params.verify
            && plan.pattern != Pattern::Allreduce
            && s.verified_messages != s.recv_messages;
        if s.bad_bytes > 0 || s.bad_elements > 0 || short {
            eprintln!(
                "mrc-perf mpi: error: data check failed: {} bad bytes, {} bad allreduce \
                 elements, {} of {} messages verified",
                s.bad_bytes, s.bad_elements, s.verified_messages, s.recv_messages
            );
            1
        } else {
            0
        }
    } else {
        job.world.process_at_rank(0).send(&mine[..]);
        0
    };
    // everyone learns rank 0's verdict, so that every rank exits with it
    job.wd.arm("the final barrier", job.coll);
    let mut c = code;
    job.world.process_at_rank(0).broadcast_into(&mut c);
    c
}

/// The soft limit on open files (`RLIMIT_NOFILE`).
fn open_files_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid pointer given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 1024;
    }
    r.rlim_cur
}

fn late(v: &[u64]) -> [u64; 2] {
    super::results::dist(v.iter().copied()).map_or([0; 2], |d| [d.1, d.3])
}

/// The engine's counters into `res`: verify results, retransmissions, per-EV sums.
fn fill_counters(conn: &RankConn, res: &mut RankResult) -> Result<(), String> {
    let (qps, e) = conn.stats()?;
    let mut evs = Vec::new();
    for (_, s) in &qps {
        res.verified_messages += s.verify.checked_messages;
        res.verified_bytes += s.verify.checked_bytes;
        res.bad_bytes += s.verify.bad_bytes;
        res.retransmitted += s.conn.retransmitted;
        res.rto_timeouts += s.conn.timeouts;
        res.source_drops += s.source_drops.total();
        res.auth_drops += s
            .conn
            .drops
            .get(mrc_transport::stats::DropReason::AuthFailed)
            + s.conn.drops.get(mrc_transport::stats::DropReason::Replayed);
        for ((ev, _port, x), plane) in s
            .evs
            .iter()
            .zip(s.ev_planes.iter().copied().chain(std::iter::repeat(0)))
        {
            evs.push(EvCounters {
                plane,
                ev: *ev,
                sent: x.sent,
                retransmitted: x.retransmitted,
                acked: x.acked,
                ecn_marked: x.ecn_marked,
                lost: x.lost,
                timeouts: x.timeouts,
            });
        }
    }
    res.evs = super::results::sum_evs(&evs);
    res.authenticated = conn.authenticated();
    res.tx_datagrams = e.tx_datagrams;
    res.engine_cpu_ns = e.cpu_ns;
    Ok(())
}
