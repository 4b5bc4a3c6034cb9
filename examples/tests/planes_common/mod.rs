//! What the two tests of the two-plane namespace testbed share (`testbed_planes.rs`, the
//! fabric; `testbed_planes_mrc.rs`, mrc over it): the hosts' addresses, the `SKIPPED:`
//! line, and a [`Fabric`] of their own prefix that runs `testbed/mrc-testbed.sh` under a
//! timeout and takes the fabric down when dropped (also after a failed assertion).
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Host 0's and host 1's address in plane 0 and plane 1 (examples/src/testbed.rs: plane p
/// is the first hex digit of the subnet).
pub const H0: [&str; 2] = ["fd00:6d72:63:10::2", "fd00:6d72:63:1010::2"];
pub const H1: [&str; 2] = ["fd00:6d72:63:11::2", "fd00:6d72:63:1011::2"];

/// One `SKIPPED: <test>: <reason>` line, written past libtest's capture (as
/// `srv6_kernel` does), so it shows in every run and `.ci/run` counts it.
pub fn skip(test: &str, why: &str) {
    let line = format!("SKIPPED: {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Whether `tool` is on the PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A command's stdout then stderr, as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The testbed of namespaces `PREFIX*`, taken down when dropped.
pub struct Fabric {
    /// `MRCTB_PREFIX`.
    pub prefix: String,
    /// testbed/mrc-testbed.sh.
    pub script: PathBuf,
}

impl Fabric {
    /// A fabric of prefix `mrctb<tag><pid % 1000>-` (nothing is built yet).
    pub fn new(tag: char) -> Fabric {
        Fabric {
            prefix: format!("mrctb{tag}{}-", std::process::id() % 1000),
            script: PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../testbed/mrc-testbed.sh"
            )),
        }
    }

    /// `mrc-testbed.sh ARGS` under `timeout 60`, the plan from this build's designer.
    pub fn tb(&self, args: &[&str]) -> Output {
        self.tb_within(60, args)
    }

    /// [`Fabric::tb`] under `timeout SECS` (building the SRv6 fabric of two planes in the
    /// lab's TCG VM takes longer than a minute).
    pub fn tb_within(&self, secs: u32, args: &[&str]) -> Output {
        Command::new("timeout")
            .arg(secs.to_string())
            .arg(&self.script)
            .args(args)
            .env("MRCTB_PREFIX", &self.prefix)
            .env_remove("MRCTB_SRV6")
            .env_remove("MRCTB_PLAN")
            .env("MRCTB_SIM", env!("CARGO_BIN_EXE_mrc-sim"))
            .output()
            .expect("run mrc-testbed.sh")
    }

    /// [`Fabric::tb`], asserting exit 0; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.tb(args);
        assert!(o.status.success(), "{args:?} failed: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = self.tb_within(300, &["down"]);
    }
}
