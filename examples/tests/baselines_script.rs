//! `scripts/baselines.sh` against a stand-in mrc-perf (`MRC_PERF`, a shell script that
//! answers each measurement with fixed JSON): nothing is built and no socket is opened, so
//! this runs beside any other test. Bad arguments and a failing mrc-perf give a message
//! and exit 1; a good run prints one progress line per measurement, the table of medians
//! and ratios, and one JSON object with the same figures.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/baselines.sh");

/// A fresh directory for the stand-in.
fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mrc-baselines-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stand_in(dir: &Path, body: &str) -> PathBuf {
    stand_in_named(dir, "mrc-perf", body)
}

/// An executable shell script `name` in `dir` with `body`.
fn stand_in_named(dir: &Path, name: &str, body: &str) -> PathBuf {
    let fake = dir.join(name);
    std::fs::write(&fake, body).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    fake
}

/// Runs the script with `args` and `env`: exit code, stdout, stderr.
fn run(fake: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut c = Command::new("bash");
    c.arg(SCRIPT).args(args).env("MRC_PERF", fake);
    for k in [
        "BURSTS",
        "MECHS",
        "LAT",
        "CONN_BENCH",
        "CALLGRIND",
        "SIM",
        "MRC_SIM",
        "MRC_SIM_BEFORE",
        "ENGINES",
        "BURST",
        "ALL",
        "MRC_PERF_BEFORE",
        "JSON_OUT",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Bad arguments, a failing mrc-perf (tried twice): a message (with mrc-perf's stderr) and
/// exit 1, not
/// `seq: invalid ...`, an unbound variable or a silent exit.
#[test]
fn failures_are_clear() {
    let d = dir("fail");
    let fake = stand_in(
        &d,
        "#!/bin/sh\necho 'mrc-perf: error: bind 127.0.0.1: Address already in use' >&2\nexit 3\n",
    );
    let usage = "usage: scripts/baselines.sh [RUNS] [DURATION_S] (RUNS a positive integer, DURATION_S positive seconds; defaults 3 3)\n";
    for (args, first) in [
        (
            vec!["x"],
            "baselines.sh: RUNS must be a positive integer, got 'x'\n",
        ),
        (
            vec!["0"],
            "baselines.sh: RUNS must be a positive integer, got '0'\n",
        ),
        (
            vec!["2", "0"],
            "baselines.sh: DURATION_S must be a positive number of seconds, got '0'\n",
        ),
    ] {
        assert_eq!(
            run(&fake, &args, &[]),
            (Some(1), String::new(), format!("{first}{usage}")),
            "{args:?}"
        );
    }
    assert_eq!(
        run(&fake, &["1", "1"], &[("BURSTS", "1 x")]),
        (
            Some(1),
            String::new(),
            "baselines.sh: BURSTS must hold positive integers, got 'x'\n".to_owned()
        )
    );
    for bad in ["bogus", "depth0", "depth1000", "depth01", "depth", "depthx"] {
        assert_eq!(
            run(&fake, &["1", "1"], &[("MECHS", &format!("plain {bad}"))]),
            (
                Some(1),
                String::new(),
                format!(
                    "baselines.sh: unknown MECHS entry '{bad}' (plain off multishot coop zerocopy nohuge all depthN shared)\n"
                )
            ),
            "{bad}"
        );
    }
    assert_eq!(
        run(&fake, &["1", "1"], &[("ENGINES", "1 0")]),
        (
            Some(1),
            String::new(),
            "baselines.sh: ENGINES must hold positive integers, got '0'\n".to_owned()
        )
    );
    // ALL=1 turns the engines curve on with its default "1 2": a bad ENGINES still wins
    assert_eq!(
        run(&fake, &["1", "1"], &[("ALL", "1"), ("ENGINES", "two")]),
        (
            Some(1),
            String::new(),
            "baselines.sh: ENGINES must hold positive integers, got 'two'\n".to_owned()
        )
    );
    assert_eq!(
        run(&fake, &["1", "1"], &[]),
        (
            Some(1),
            String::new(),
            "baselines.sh: mrc-perf loopback -s 1048576 --paths 16 --mtu 4096 -D 1 --burst-size 1 \
             --udp-port 0 --verify --json failed (exit code 3), once more; its stderr:\n\
             mrc-perf: error: bind 127.0.0.1: Address already in use\n\
             baselines.sh: mrc-perf loopback -s 1048576 --paths 16 --mtu 4096 -D 1 --burst-size 1 \
             --udp-port 0 --verify --json failed (exit code 3):\n\
             mrc-perf: error: bind 127.0.0.1: Address already in use\n"
                .to_owned()
        )
    );
}

/// `MECHS` entries turn into mrc-perf's flags: `off` turns both default options off,
/// `depthN` adds `-t N` and `shared` `--engines 1 --shared-engine` to the mrc `--verify`
/// row only (the raw blast and TCP rows have no depth and no QPs), and `plain` adds
/// nothing. The stand-in logs each command line.
#[test]
fn variants_pass_their_flags_and_depth_only_to_the_mrc_row() {
    let d = dir("flags");
    let log = d.join("calls");
    let fake = stand_in(
        &d,
        &format!(
            r#"#!/bin/sh
echo "$*" >> {log}
case "$*" in
  "loopback -s 1048576"*) echo '{{"bw_avg_gbps": 10, "cpu_s_per_gb": 0.5, "receiver": {{"bad_bytes": 0}}}}' ;;
  "baseline -s"*) echo '{{"baselines": [{{"name": "raw UDP", "gbps": 20, "cpu_s_per_gb": 0.4}}, {{"name": "kernel TCP", "gbps": 30, "cpu_s_per_gb": 0.3}}]}}' ;;
  *) exit 9 ;;
esac
"#,
            log = log.display()
        ),
    );
    let (code, _, stderr) = run(
        &fake,
        &["1", "2"],
        &[
            ("MECHS", "plain off nohuge depth2 shared"),
            ("BURSTS", "16"),
            ("LAT", "0"),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let calls = std::fs::read_to_string(&log).unwrap();
    let mrc = "loopback -s 1048576 --paths 16 --mtu 4096 -D 2 --burst-size 16 --udp-port 0 --verify --json";
    let base = "baseline -s 1048576 --paths 16 --mtu 4096 -D 2 --burst-size 16 --json";
    let off = "--udp-multishot=false --udp-coop-taskrun=false";
    let nohuge = "--huge-pages=false";
    assert_eq!(
        calls,
        format!(
            "{mrc}\n{base}\n{mrc} {off}\n{base} {off}\n{mrc} {nohuge}\n{base} {nohuge}\n\
             {mrc} -t 2\n{base}\n{mrc} --engines 1 --shared-engine\n{base}\n"
        )
    );
}

/// Two runs, bursts 1 and 16, variants plain and multishot (the stand-in's mrc goodput
/// doubles with `--udp-multishot`, so the ratio columns have something to show): every
/// progress line, the exact table rows and the JSON's figures.
#[test]
fn table_and_json_hold_the_medians_and_ratios() {
    let d = dir("ok");
    let fake = stand_in(
        &d,
        r#"#!/bin/sh
g=12.5
case "$*" in *--udp-multishot*) g=25 ;; esac
case "$*" in
  "loopback -s 1048576"*) echo "{\"bw_avg_gbps\": $g, \"cpu_s_per_gb\": 0.8, \"cc\": \"nscc\", \"receiver\": {\"bad_bytes\": 0}}" ;;
  "baseline -s"*) echo '{"baselines": [{"name": "raw UDP", "gbps": 20.25, "cpu_s_per_gb": 0.7}, {"name": "kernel TCP", "gbps": 30.5, "cpu_s_per_gb": 0.4}]}' ;;
  "loopback --test lat"*) echo '{"lat_us": {"typical": 35.5, "p99": 70.25}}' ;;
  "baseline --test lat"*) echo '{"baselines": [{"lat_us": {"typical": 15.25, "p99": 20.5}}]}' ;;
  *) exit 9 ;;
esac
"#,
    );
    let json_out = d.join("out.json");
    let (code, stdout, stderr) = run(
        &fake,
        &["2", "1"],
        &[
            ("MECHS", "plain multishot"),
            ("JSON_OUT", json_out.to_str().unwrap()),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let mut want = String::new();
    for i in 1..=2 {
        for b in [1, 16] {
            for (v, g) in [("plain", "12.5"), ("multishot", "25")] {
                want += &format!(
                    "baselines.sh: run {i}/2: burst {b} {v}: mrc --verify {g} Gb/s\n\
                     baselines.sh: run {i}/2: burst {b} {v}: raw UDP 20.25 Gb/s, kernel TCP 30.5 Gb/s\n"
                );
            }
        }
        for v in ["plain", "multishot"] {
            want += &format!(
                "baselines.sh: run {i}/2: {v}: mrc latency median 35.5 us, UDP ping-pong 15.25 us\n"
            );
        }
    }
    assert_eq!(stderr, want);
    let row = |b: &str, v: &str, name: &str, g: &str, c: &str, xt: &str, ct: &str, xb: &str| {
        // the stand-in's CPU per byte is the same everywhere: 1.00 in the last column
        let xc = if b == "burst" { "CPU x plain" } else { "1.00" };
        format!("{b:<5} {v:<10} {name:<26} {g:>8} {c:>9} {xt:>9} {ct:>9} {xb:>9} {xc:>9}\n")
    };
    assert!(
        stdout.contains(&row(
            "burst",
            "variant",
            "row",
            "Gb/s",
            "CPU s/GB",
            "x TCP",
            "CPU x TCP",
            "x plain"
        )),
        "{stdout}"
    );
    // CPU x TCP: 0.800 / 0.400 for mrc, 0.700 / 0.400 for the raw blast
    for b in ["1", "16"] {
        for want in [
            row(
                b,
                "plain",
                "mrc --verify",
                "12.50",
                "0.800",
                "0.41",
                "2.00",
                "1.00",
            ),
            row(
                b,
                "plain",
                "raw UDP blast",
                "20.25",
                "0.700",
                "0.66",
                "1.75",
                "1.00",
            ),
            row(b, "plain", "kernel TCP", "30.50", "0.400", "-", "-", "1.00"),
            row(
                b,
                "multishot",
                "mrc --verify",
                "25.00",
                "0.800",
                "0.82",
                "2.00",
                "2.00",
            ),
        ] {
            assert!(stdout.contains(&want), "{want:?} not in\n{stdout}");
        }
    }
    assert!(
        stdout.contains(&format!(
            "{:<16} {:<26} {:>10} {:>9}\n",
            "multishot", "mrc --verify", "35.50", "70.25"
        )),
        "{stdout}"
    );
    // The JSON: last line of stdout, and the same in JSON_OUT.
    let last = stdout.lines().last().unwrap();
    let j: Value = serde_json::from_str(last).unwrap();
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&json_out).unwrap()).unwrap();
    assert_eq!(j, file);
    assert_eq!(j["runs"], 2);
    // 2 bursts x 2 variants x 3 rows, and 2 variants x 2 latency rows.
    assert_eq!(j["summary"].as_array().unwrap().len(), 16);
    // per run: 2 x 2 x 3 bandwidth rows and 2 x 2 latency rows
    assert_eq!(j["per_run"].as_array().unwrap().len(), 32);
    let ms16 = j["summary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["burst"] == 16 && r["variant"] == "multishot" && r["what"] == "mrc")
        .unwrap();
    assert_eq!(ms16["gbps"], 25);
    assert_eq!(ms16["gbps_x_first_variant"], 2);
    assert_eq!(ms16["cpu_x_first_variant"], 1);
    assert!((ms16["gbps_x_tcp"].as_f64().unwrap() - 25.0 / 30.5).abs() < 1e-12);
    assert_eq!(ms16["cpu_x_tcp"], 2);
}

/// `SIM=1` with `MRC_SIM` and `MRC_SIM_BEFORE`: speed-raw RUNS times for each, interleaved
/// (before, now, before, now, ...), the median of each one's checked row printed and in
/// the JSON's `extra`. The stand-ins answer 4, 6, 5 M hops/s (before) and 12, 10, 11
/// (now), one value per call in turn, so the medians are 5 M and 11 M.
#[test]
fn simulator_rows_are_medians_of_interleaved_runs() {
    let d = dir("sim");
    let fake = stand_in(
        &d,
        r#"#!/bin/sh
case "$*" in
  "loopback -s 1048576"*) echo '{"bw_avg_gbps": 10, "cpu_s_per_gb": 0.8, "receiver": {"bad_bytes": 0}}' ;;
  "baseline -s"*) echo '{"baselines": [{"name": "raw UDP", "gbps": 20, "cpu_s_per_gb": 0.7}, {"name": "kernel TCP", "gbps": 20, "cpu_s_per_gb": 0.4}]}' ;;
  *) exit 9 ;;
esac
"#,
    );
    let sim = |name: &str, values: &str| {
        stand_in_named(
            &d,
            name,
            &format!(
                r#"#!/bin/sh
[ "$*" = "experiment speed-raw --json -" ] || exit 9
f="$0.calls"
n=$(( $(cat "$f" 2>/dev/null || echo 0) + 1 ))
echo $n >"$f"
h=$(echo {values} | cut -d' ' -f$n)
echo '{{"rows": [{{"label": "event heap only", "values": [["hops_per_s", 1]]}}, {{"label": "raw frames (switching core), checked", "values": [["frames", 7], ["hops_per_s", '$h']]}}]}}'
"#
            ),
        )
    };
    let before = sim("mrc-sim-before", "4000000 6000000 5000000");
    let now = sim("mrc-sim", "12000000 10000000 11000000");
    let (code, stdout, stderr) = run(
        &fake,
        &["3", "1"],
        &[
            ("BURSTS", "16"),
            ("LAT", "0"),
            ("SIM", "1"),
            ("MRC_SIM", now.to_str().unwrap()),
            ("MRC_SIM_BEFORE", before.to_str().unwrap()),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let sim_progress: Vec<&str> = stderr.lines().filter(|l| l.contains("simulator")).collect();
    assert_eq!(
        sim_progress,
        [
            "baselines.sh: run 1/3: simulator (before): 4000000 packet hops/s",
            "baselines.sh: run 1/3: simulator (now): 12000000 packet hops/s",
            "baselines.sh: run 2/3: simulator (before): 6000000 packet hops/s",
            "baselines.sh: run 2/3: simulator (now): 10000000 packet hops/s",
            "baselines.sh: run 3/3: simulator (before): 5000000 packet hops/s",
            "baselines.sh: run 3/3: simulator (now): 11000000 packet hops/s",
        ]
    );
    assert!(
        stdout.contains(
            "simulator (before), speed-raw checked row: 5.00 M packet hops/s (median of 3)\n\
             simulator (now), speed-raw checked row: 11.00 M packet hops/s (median of 3)\n"
        ),
        "{stdout}"
    );
    let j: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(j["extra"]["sim_speed_raw_hops_per_s_before"], 5_000_000);
    assert_eq!(j["extra"]["sim_speed_raw_hops_per_s"], 11_000_000);
}

/// `ENGINES="1 2"`: scripts/engines_curve.sh runs `-q K --engines K` and `-q K --engines
/// 1` interleaved, and the table and JSON hold their medians and the median of the
/// per-run ratios.
#[test]
fn engines_curve_rows_are_medians_of_interleaved_runs() {
    let d = dir("engines");
    let fake = stand_in(
        &d,
        r#"#!/bin/sh
# n-th call of one command line: the n-th of its values
next() { f="$0.$1"; n=$(( $(cat "$f" 2>/dev/null || echo 0) + 1 )); echo $n >"$f"; echo "$2" | cut -d' ' -f$n; }
case "$*" in
  "loopback -s 1048576"*) echo '{"bw_avg_gbps": 10, "cpu_s_per_gb": 0.8, "receiver": {"bad_bytes": 0}}' ;;
  "baseline -s"*) echo '{"baselines": [{"name": "raw UDP", "gbps": 20, "cpu_s_per_gb": 0.7}, {"name": "kernel TCP", "gbps": 20, "cpu_s_per_gb": 0.4}]}' ;;
  "loopback -q 1 --engines 1 -s 1048576 --paths 16 --mtu 4096 --verify --burst-size 16 -D 1 --json")
    echo '{"bw_avg_gbps": '$(next k1 "7 8 9")', "cpu_s_per_gb": 1.5, "receiver": {"bad_bytes": 0}}' ;;
  "loopback -q 2 --engines 2 -s 1048576 --paths 16 --mtu 4096 --verify --burst-size 16 -D 1 --json")
    echo '{"bw_avg_gbps": '$(next k2 "18 22 20")', "cpu_s_per_gb": 1.25, "receiver": {"bad_bytes": 0}}' ;;
  "loopback -q 2 --engines 1 -s 1048576 --paths 16 --mtu 4096 --verify --burst-size 16 -D 1 --json")
    echo '{"bw_avg_gbps": '$(next k2e1 "9 10 11")', "cpu_s_per_gb": 1.5, "receiver": {"bad_bytes": 0}}' ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"#,
    );
    let (code, stdout, stderr) = run(
        &fake,
        &["3", "1"],
        &[("BURSTS", "16"), ("LAT", "0"), ("ENGINES", "1 2")],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("engines_curve.sh: run"))
        .collect();
    assert_eq!(
        progress,
        [
            "engines_curve.sh: run 1, -q 1 --engines 1: 7 Gb/s",
            "engines_curve.sh: run 1, -q 2 --engines 2: 18 Gb/s",
            "engines_curve.sh: run 1, -q 2 --engines 1: 9 Gb/s",
            "engines_curve.sh: run 2, -q 1 --engines 1: 8 Gb/s",
            "engines_curve.sh: run 2, -q 2 --engines 2: 22 Gb/s",
            "engines_curve.sh: run 2, -q 2 --engines 1: 10 Gb/s",
            "engines_curve.sh: run 3, -q 1 --engines 1: 9 Gb/s",
            "engines_curve.sh: run 3, -q 2 --engines 2: 20 Gb/s",
            "engines_curve.sh: run 3, -q 2 --engines 1: 11 Gb/s",
        ]
    );
    // per-run ratios 18/9 = 2.00, 22/10 = 2.20, 20/11 = 1.82: median 2.00
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("1 ") || l.starts_with("2 "))
        .map(str::trim_end)
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(rows[0]), ["1", "8.00", "8.00", "1.00", "1.500"]);
    assert_eq!(words(rows[1]), ["2", "20.00", "10.00", "2.00", "1.250"]);
    let j: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let curve = &j["extra"]["engines_curve"];
    assert_eq!(curve["burst"], 16);
    assert_eq!(curve["rows"][1]["engines"], 2);
    assert_eq!(curve["rows"][1]["gbps"], 20);
    assert_eq!(curve["rows"][1]["gbps_one_engine"], 10);
    assert_eq!(curve["rows"][1]["ratio"], 2.0);
    assert_eq!(curve["per_run"].as_array().unwrap().len(), 9);
    // bad ENGINES values are refused by name
    let (code, _, stderr) = run(&fake, &["1", "1"], &[("ENGINES", "1 x")]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("baselines.sh: ENGINES must hold positive integers, got 'x'"),
        "{stderr}"
    );
}
