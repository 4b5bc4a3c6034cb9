//! Whether this kernel can build the SRv6 testbed: `testbed/mrc-testbed.sh kernel` tries
//! `encap seg6`, `seg6local End` and NEXT-C-SID in a scratch namespace and exits 3, naming
//! what failed, on a kernel without them (built without `CONFIG_IPV6_SEG6_LWTUNNEL`). A
//! test on the testbed skips on such a kernel, saying so on stderr, unless
//! `MRC_SRV6_REQUIRE=1` (then it fails): the testbed proves nothing where the kernel cannot
//! steer, and everything else CI runs still does. The skip is one line
//! `SKIPPED: <test>: <reason>` written to the process's stderr past libtest's capture, so it
//! shows in every `cargo test` run and `.ci/run` counts it as skipped, not passed.

use std::io::Write;
use std::path::Path;
use std::process::Command;

/// `true` when the testbed can be built here. `false` (after a line on stderr naming
/// `test` and the kernel's answer) when the kernel lacks SRv6 lightweight tunnels.
///
/// # Panics
/// With `MRC_SRV6_REQUIRE=1` on such a kernel; on any other failure of the check (no
/// `ip`, not root: the caller asserts root first).
pub fn testbed_possible(script: &Path, test: &str) -> bool {
    let o = Command::new("timeout")
        .arg("30")
        .arg(script)
        .arg("kernel")
        .env(
            "MRCTB_PREFIX",
            format!("mrctbk{}", std::process::id() % 10_000),
        )
        .output()
        .expect("run mrc-testbed.sh kernel");
    let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
    match o.status.code() {
        Some(0) => true,
        Some(3) => {
            assert!(
                std::env::var("MRC_SRV6_REQUIRE").as_deref() != Ok("1"),
                "MRC_SRV6_REQUIRE=1 but {why}"
            );
            // Not eprintln!: libtest captures that and shows it only for a failed test. One
            // write of the whole line, so that it does not interleave with libtest's own.
            let line =
                format!("SKIPPED: {test}: {why} (MRC_SRV6_REQUIRE=1 makes this a failure)\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
            false
        }
        _ => panic!("mrc-testbed.sh kernel failed ({}): {why}", o.status),
    }
}
