//! `c/mrc_ctl_check.c`, built by gcc against the project's `mrc_ctl.h` and linked with
//! the `lib_mrc.so` of this build, calls every function of the controller API and checks
//! each result; it needs no RDMA device (see its header). Its struct layouts, printed
//! first, must be the Rust side's.
#![cfg(feature = "verbs")]

use mrc_ocp_layouts::*;
use std::path::PathBuf;
use std::process::Command;

mod mrc_ocp_layouts {
    pub use _mrc::ctl_ffi::*;
}

fn rust_layouts() -> Vec<(&'static str, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("ev", size_of::<MrcCtlEv>()),
        ("device_attr", size_of::<MrcCtlDeviceAttr>()),
        ("device_attr.cc", offset_of!(MrcCtlDeviceAttr, cc)),
        (
            "device_attr.phy_port_mask",
            offset_of!(MrcCtlDeviceAttr, phy_port_mask),
        ),
        ("fmt_profile_attr", size_of::<MrcCtlEvFmtProfileAttr>()),
        (
            "fmt_profile_attr.ev_fmt_op",
            offset_of!(MrcCtlEvFmtProfileAttr, ev_fmt_op),
        ),
        ("ev_op_entry", size_of::<MrcCtlEvOpEntry>()),
        ("ev_op_entry.state", offset_of!(MrcCtlEvOpEntry, state)),
        ("ev_profile_attr", size_of::<MrcCtlEvProfileAttr>()),
        (
            "ev_profile_attr.ev_fmt_profile_id",
            offset_of!(MrcCtlEvProfileAttr, ev_fmt_profile_id),
        ),
        (
            "ev_profile_attr.ev_op",
            offset_of!(MrcCtlEvProfileAttr, ev_op),
        ),
        (
            "ev_profile_attr.ev_fields_op",
            offset_of!(MrcCtlEvProfileAttr, ev_fields_op),
        ),
        ("cc_profile_attr", size_of::<MrcCtlCcProfileAttr>()),
        ("nscc_cfg", size_of::<MrcCtlCcNsccCfg>()),
        ("nscc_cfg.qa_gate", offset_of!(MrcCtlCcNsccCfg, qa_gate)),
        ("ev_event", size_of::<MrcCtlEvEvent>()),
        ("ev_event.drop_count", offset_of!(MrcCtlEvEvent, drop_count)),
        ("ep_req", size_of::<MrcCtlEpReq>()),
        ("ep_req.req_ev", offset_of!(MrcCtlEpReq, req_ev)),
        ("ep_req.op", offset_of!(MrcCtlEpReq, port_status)),
        ("ep_rsp", size_of::<MrcCtlEpRsp>()),
    ]
}

#[test]
fn mrc_ctl_check_calls_every_function() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The test binary sits in target/<profile>/deps, beside this build's lib_mrc.so.
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    assert!(
        deps.join("lib_mrc.so").exists(),
        "no lib_mrc.so in {deps:?}"
    );
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mrc_ctl_check");
    let cc = Command::new("gcc")
        .args([
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-std=gnu11",
            "-I",
        ])
        .arg(crate_dir.join("include"))
        .arg("-o")
        .arg(&out)
        .arg(crate_dir.join("c/mrc_ctl_check.c"))
        .arg(format!("-L{}", deps.display()))
        .args(["-l_mrc", "-libverbs"])
        // DT_RPATH, not DT_RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets (which
        // names target/<profile>, where an older lib_mrc.so of another build may lie)
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", deps.display()))
        .output()
        .expect("gcc runs");
    assert!(
        cc.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // On a host with a device the profile tables are the device's store: a directory of
    // this build's, not the node's /run/mrc.
    let store = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mrc_ctl_store");
    let _ = std::fs::remove_dir_all(&store);
    let run = Command::new(&out)
        .env("MRC_CTL_DIR", &store)
        .output()
        .expect("mrc_ctl_check runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "mrc_ctl_check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let c: Vec<(String, usize)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("layout "))
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect();
    let rust: Vec<(String, usize)> = rust_layouts()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert_eq!(c, rust);
    assert_eq!(stdout.lines().last(), Some("mrc_ctl_check: ok"));
}
