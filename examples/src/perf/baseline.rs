//! The ceilings `mrc-perf baseline` measures beside mrc: a raw UDP blast (bw) or ping-pong
//! (lat) over the very same datapath (io_uring, one socket per EV, GSO/GRO, same batch and
//! datagram size, no reliability), and kernel TCP over loopback (iperf3 when installed,
//! otherwise a built-in blast over `std::net::TcpStream`).

use super::opts::{TestParams, UdpIo};
use super::run::UdpMechanics;
use mrc_fabric::datapath::{Datapath, PathMap, TxBatch};
use mrc_fabric::udp::{DirectDatapath, UdpConfig, UringDatapath};
use mrc_transport::Ecn;
use mrc_transport::conn::MAX_DATA_HEADER_BYTES;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Result of one baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineResult {
    /// What ran.
    pub name: String,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Seconds.
    pub elapsed_s: f64,
    /// Datagrams sent (UDP only).
    pub sent: u64,
    /// Datagrams received (UDP only).
    pub received: u64,
    /// Process CPU seconds.
    pub cpu_s: f64,
    /// Latency (one way, half the round trip) median and 99th percentile, us (ping-pong).
    pub lat_us: Option<(f64, f64)>,
}

impl BaselineResult {
    /// Goodput, Gb/s.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed_s.max(1e-9) / 1e9
    }
}

fn dp(ip: IpAddr, mech: UdpMechanics) -> Result<UringDatapath, String> {
    UringDatapath::new(mech.apply(UdpConfig::bind(SocketAddr::new(ip, 0))))
        .map_err(|e| e.to_string())
}

/// Raw UDP blast: datagrams of `mtu + 56` bytes (an mrc data packet's size) round-robin
/// over `paths` EV sockets in bursts of the engine's size (`run::tx_batch`), for `iters * size`
/// payload bytes or the duration.
///
/// # Errors
/// Datapath setup failures.
pub fn udp_blast(ip: IpAddr, p: &TestParams, mech: UdpMechanics) -> Result<BaselineResult, String> {
    let mut a = dp(ip, mech)?;
    let b = dp(ip, mech)?;
    let paths = PathMap {
        evs_per_socket: p.burst_size as usize,
        ..PathMap::per_ev((0..p.paths).collect())
    };
    let c = a
        .open_conn(b.local_addr(), &paths)
        .map_err(|e| e.to_string())?;
    let dgram = p.mtu as usize + MAX_DATA_HEADER_BYTES;
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let rx = std::thread::spawn(move || {
        let mut b = b;
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut last = Instant::now();
        loop {
            let got = b
                .rx_burst(usize::MAX, &mut |d| {
                    n += 1;
                    bytes += d.bytes.len() as u64;
                })
                .unwrap_or(0);
            if got > 0 {
                last = Instant::now();
            } else if st.load(Ordering::Relaxed) && last.elapsed() > Duration::from_millis(50) {
                break;
            } else {
                let _ = b.wait(1_000_000);
            }
        }
        (n, bytes, last)
    });
    let mut batch = TxBatch::new(super::run::tx_batch(p), dgram);
    let payload = vec![0x5Au8; dgram];
    let total = p.iters.map(|n| n.saturating_mul(p.size));
    let end = p.duration_s.map(Duration::from_secs_f64);
    let cpu0 = super::report::process_cpu_s();
    let start = Instant::now();
    // datagrams of `--iters`: the last burst holds only what is left
    let needed = total.map(|t| t.div_ceil(u64::from(p.mtu.max(1))));
    let (mut sent, mut ev) = (0u64, 0u32);
    loop {
        if needed.is_some_and(|n| sent >= n) || end.is_some_and(|e| start.elapsed() >= e) {
            break;
        }
        batch.clear();
        let left = needed.map_or(u64::MAX, |n| n - sent);
        while !batch.is_full() && (batch.len() as u64) < left {
            batch.push(c, ev, Ecn::Ect0, &payload);
            ev = (ev + 1) % p.paths;
        }
        let r = a.tx_burst(&batch).map_err(|e| e.to_string())?;
        sent += r.datagrams;
    }
    stop.store(true, Ordering::Relaxed);
    let (received, _wire_bytes, last) = rx.join().map_err(|_| "receiver panicked")?;
    let elapsed_s = last.duration_since(start).as_secs_f64();
    Ok(BaselineResult {
        name: format!(
            "raw UDP blast ({} EVs, burst {}, {} B datagrams)",
            p.paths, p.burst_size, dgram
        ),
        bytes: received * p.mtu as u64,
        elapsed_s,
        sent,
        received,
        cpu_s: super::report::process_cpu_s() - cpu0,
        lat_us: None,
    })
}

/// The datapath mrc's own `--test lat` runs on: `--udp-io direct` (plain non-blocking
/// `sendmsg`/`recvmmsg`, the default for lat) or io_uring.
fn lat_dp(ip: IpAddr, mech: UdpMechanics, io: UdpIo) -> Result<Box<dyn Datapath + Send>, String> {
    let cfg = mech.apply(UdpConfig::bind(SocketAddr::new(ip, 0)));
    Ok(match io {
        UdpIo::Uring => Box::new(UringDatapath::new(cfg).map_err(|e| e.to_string())?),
        UdpIo::Direct => Box::new(DirectDatapath::new(cfg).map_err(|e| e.to_string())?),
    })
}

/// UDP ping-pong over the same datapath as mrc's lat test (`p.udp_io`): one datagram of
/// `size + 56` bytes each way per iteration (EV round-robin), both ends polling.
///
/// # Errors
/// Datapath setup failures or a lost datagram (no echo within 1 s).
pub fn udp_pingpong(
    ip: IpAddr,
    p: &TestParams,
    mech: UdpMechanics,
) -> Result<BaselineResult, String> {
    let mut a = lat_dp(ip, mech, p.udp_io)?;
    let mut b = lat_dp(ip, mech, p.udp_io)?;
    let paths = PathMap::per_ev((0..p.paths).collect());
    let ca = a
        .open_conn(b.local_addr(), &paths)
        .map_err(|e| e.to_string())?;
    let cb = b
        .open_conn(a.local_addr(), &paths)
        .map_err(|e| e.to_string())?;
    // One ping is one UDP datagram (at most 65507 bytes over IPv4); a larger one never
    // leaves and used to end in "UDP ping 0 not echoed within 1 s".
    let max_size = 65507 - MAX_DATA_HEADER_BYTES;
    if p.size > max_size as u64 {
        return Err(format!(
            "baseline --test lat sends each ping as one UDP datagram: --size must be at most \
             {max_size} bytes, got {}",
            p.size
        ));
    }
    let len = p.size as usize + MAX_DATA_HEADER_BYTES;
    // `-D` runs for that long (at most 10 M pings), else `-n` pings (default 1000).
    let end = p
        .duration_s
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    let iters = match end {
        Some(_) => 10_000_000,
        None => p.iters.unwrap_or(1000),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let paths = p.paths;
    let echo = std::thread::spawn(move || {
        let mut batch = TxBatch::new(1, len.max(64));
        let mut ev = 0u32;
        while !st.load(Ordering::Relaxed) {
            let mut got: Option<Vec<u8>> = None;
            let _ = b.rx_burst(1, &mut |d| got = Some(d.bytes.to_vec()));
            if let Some(g) = got {
                batch.clear();
                batch.push(cb, ev, Ecn::Ect0, &g);
                ev = (ev + 1) % paths;
                let _ = b.tx_burst(&batch);
            }
        }
    });
    let mut batch = TxBatch::new(1, len.max(64));
    let msg = vec![0xA5u8; len];
    let mut lat = Vec::with_capacity(iters.min(1 << 20) as usize);
    let cpu0 = super::report::process_cpu_s();
    let start = Instant::now();
    let mut done = 0;
    for i in 0..iters {
        if end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
        batch.clear();
        batch.push(ca, (i % u64::from(p.paths)) as u32, Ecn::Ect0, &msg);
        let t0 = Instant::now();
        a.tx_burst(&batch).map_err(|e| e.to_string())?;
        let mut got = false;
        while !got {
            let _ = a.rx_burst(1, &mut |_| got = true);
            if t0.elapsed() > Duration::from_secs(1) {
                stop.store(true, Ordering::Relaxed);
                return Err(format!("UDP ping {i} not echoed within 1 s"));
            }
        }
        lat.push(t0.elapsed().as_nanos() as u64 / 2);
        done += 1;
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    let l = super::report::LatStats::from_ns(&lat).unwrap_or_default();
    Ok(BaselineResult {
        name: format!(
            "UDP ping-pong ({} B datagrams, {})",
            len,
            match p.udp_io {
                UdpIo::Direct => "sendmsg+recvmmsg",
                UdpIo::Uring => "io_uring",
            }
        ),
        bytes: done * p.size,
        elapsed_s,
        sent: done,
        received: done,
        cpu_s: super::report::process_cpu_s() - cpu0,
        lat_us: Some((l.typical, l.p99)),
    })
}

/// Kernel TCP over loopback: iperf3 (`-J`) when on the PATH, else a built-in blast of
/// `size`-byte writes (at most 1 MiB each) for the same bytes or duration.
///
/// # Errors
/// Socket errors.
pub fn tcp(ip: IpAddr, p: &TestParams) -> Result<BaselineResult, String> {
    let secs = p.duration_s.unwrap_or(3.0);
    if let Some(r) = iperf3(ip, secs) {
        return Ok(r);
    }
    let l = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let rx = std::thread::spawn(move || -> std::io::Result<(u64, Instant)> {
        let (mut s, _) = l.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            let k = s.read(&mut buf)?;
            if k == 0 {
                return Ok((n, Instant::now()));
            }
            n += k as u64;
        }
    });
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let chunk = vec![0x3Cu8; p.size.clamp(1, 1 << 20) as usize];
    let total = p.iters.map(|n| n.saturating_mul(p.size));
    let end = p.duration_s.map(Duration::from_secs_f64);
    let cpu0 = super::report::process_cpu_s();
    let start = Instant::now();
    let mut sent = 0u64;
    while !(total.is_some_and(|t| sent >= t) || end.is_some_and(|e| start.elapsed() >= e)) {
        s.write_all(&chunk).map_err(|e| e.to_string())?;
        sent += chunk.len() as u64;
    }
    drop(s);
    let (n, last) = rx
        .join()
        .map_err(|_| "tcp receiver panicked")?
        .map_err(|e| e.to_string())?;
    Ok(BaselineResult {
        name: "kernel TCP (built-in blast; iperf3 not found)".into(),
        bytes: n,
        elapsed_s: last.duration_since(start).as_secs_f64(),
        sent: 0,
        received: 0,
        cpu_s: super::report::process_cpu_s() - cpu0,
        lat_us: None,
    })
}

fn iperf3(ip: IpAddr, secs: f64) -> Option<BaselineResult> {
    use std::process::{Command, Stdio};
    // A port the kernel just handed out (and we released), so a lingering server of an
    // earlier run cannot be in the way.
    let port = TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|l| l.local_addr())
        .ok()?
        .port()
        .to_string();
    let port = port.as_str();
    let host = ip.to_string();
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "-B", &host, "-p", port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut out = None;
    // The server needs a moment to listen: try the client up to 50 times, 20 ms apart.
    for _ in 0..50 {
        // Bounded: a client that outlives its test time by 10 s is killed (coreutils
        // `timeout`), so a wedged iperf3 can never hang the baseline.
        let limit_s = format!("{}", secs.ceil().max(1.0) + 10.0);
        let o = Command::new("timeout")
            .args(["--kill-after=2", &limit_s, "iperf3"])
            .args(["-c", &host, "-p", port, "--connect-timeout", "1000"])
            .args(["-t", &format!("{}", secs.ceil().max(1.0)), "-J"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        // iperf3 -J exits 0 with an "error" member when the server is not up yet.
        let v: Option<serde_json::Value> = serde_json::from_slice(&o.stdout).ok();
        if o.status.success()
            && v.as_ref()
                .is_some_and(|v| v["end"]["sum_received"]["bytes"].is_u64())
        {
            out = v;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Never wait on the one-off server: it may still wait for a client (after a failed
    // attempt) or be closing.
    let _ = server.kill();
    let _ = server.wait();
    let v = out?;
    let recv = &v["end"]["sum_received"];
    let bytes = recv["bytes"].as_u64()?;
    let secs = recv["seconds"].as_f64()?;
    let cpu = &v["end"]["cpu_utilization_percent"];
    let cpu_s = (cpu["host_total"].as_f64().unwrap_or(0.0)
        + cpu["remote_total"].as_f64().unwrap_or(0.0))
        / 100.0
        * secs;
    Some(BaselineResult {
        name: "kernel TCP (iperf3)".into(),
        bytes,
        elapsed_s: secs,
        sent: 0,
        received: 0,
        cpu_s,
        lat_us: None,
    })
}

/// The baseline report.
pub fn render(results: &[BaselineResult], json_out: bool) -> String {
    if json_out {
        let v: Vec<_> = results
            .iter()
            .map(|r| {
                json!({"name": r.name, "bytes": r.bytes, "elapsed_s": r.elapsed_s, "gbps": r.gbps(),
                       "sent": r.sent, "received": r.received, "cpu_s": r.cpu_s,
                       "cpu_s_per_gb": if r.bytes > 0 { r.cpu_s / (r.bytes as f64 / 1e9) } else { 0.0 },
                       "lat_us": r.lat_us.map(|(m, p)| json!({"typical": m, "p99": p}))})
            })
            .collect();
        return format!("{}\n", json!({"baselines": v}));
    }
    let mut o = String::new();
    o += super::report::RULE;
    o += "\n Baselines (same host, loopback)\n";
    o += super::report::RULE;
    o += "\n";
    for r in results {
        o += &format!(" {}\n", r.name);
        match r.lat_us {
            Some((m, p99)) => {
                o += &format!(
                    "   t_typical {m:.2} us   99% {p99:.2} us   ({} round trips)\n",
                    r.sent
                )
            }
            None => {
                o += &format!(
                    "   {:.2} Gb/s   {} bytes in {:.3} s   CPU {:.3} s/GB",
                    r.gbps(),
                    r.bytes,
                    r.elapsed_s,
                    if r.bytes > 0 {
                        r.cpu_s / (r.bytes as f64 / 1e9)
                    } else {
                        0.0
                    }
                );
                if r.sent > 0 {
                    o += &format!(
                        "   datagrams sent {} received {} lost {}",
                        r.sent,
                        r.received,
                        r.sent.saturating_sub(r.received)
                    );
                }
                o += "\n";
            }
        }
    }
    o += super::report::RULE;
    o += "\n";
    o
}
