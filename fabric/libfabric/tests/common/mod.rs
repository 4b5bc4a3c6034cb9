//! What the tests that run programs against the built provider share: the `SKIPPED:`
//! line, tool detection, and the cdylib in a directory of its own for `FI_PROVIDER_PATH`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Writes `SKIPPED: <test>: <why>` past libtest's capture (`.ci/run` counts these lines).
pub fn skip(test: &str, why: &str) {
    let line = format!("SKIPPED: {test}: {why}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// Whether `tool` can be run (found and executable; its exit status does not matter:
/// `fi_pingpong --version` exits non-zero).
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The cdylib cargo built next to this test binary (`target/<profile>/deps/..`).
pub fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libmrc_fi.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libmrc_fi.so not found next to {}", exe.display());
}

/// A fresh directory `name` under the test's temporary directory holding only
/// `libmrc-fi.so` (a copy: a rebuild must not change it under a running program), for
/// `FI_PROVIDER_PATH`.
pub fn provider_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    std::fs::copy(cdylib(), dir.join("libmrc-fi.so")).expect("copy the provider");
    dir
}
