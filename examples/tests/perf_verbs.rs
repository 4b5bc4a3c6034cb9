//! `mrc-perf --fabric verbs` where the device cannot be had exits non-zero, at once, with a
//! message naming what is missing (built without verbs support, no RDMA devices, or the
//! `-d` device not among those listed).

use mrc_fabric::verbs::{VerbsError, device_names};
use std::process::Command;

fn perf(args: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mrc-perf"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The message every role must print for device `dev` on this machine.
fn expected(dev: &str) -> String {
    match device_names() {
        Err(VerbsError::NotCompiled) => "RDMA verbs support is not compiled in".into(),
        Err(VerbsError::NoDevices { .. }) => "no RDMA devices: libibverbs lists none".into(),
        Ok(names) if names.is_empty() => "no RDMA devices: libibverbs lists none".into(),
        Ok(names) => format!("RDMA device \"{dev}\" not found among {names:?}"),
        Err(e) => panic!("device_names: {e}"),
    }
}

#[test]
fn every_role_fails_naming_what_is_missing() {
    let dev = "mrc_no_such_dev9";
    let want = expected(dev);
    for args in [
        vec!["loopback", "--fabric", "verbs", "-d", dev, "-n", "4"],
        vec!["server", "--fabric", "verbs", "-d", dev],
        vec![
            "client",
            "127.0.0.1",
            "--fabric",
            "verbs",
            "-d",
            dev,
            "--timeout",
            "1",
        ],
    ] {
        let (code, err) = perf(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.starts_with("mrc-perf: error: --fabric verbs: ") && err.contains(&want),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn without_d_the_only_device_is_needed() {
    let (code, err) = perf(&["loopback", "--fabric", "verbs", "-n", "4"]);
    match device_names() {
        Ok(names) if names.len() == 1 => {
            // It would run on that device; the choice itself is checked here.
            let o = mrc_examples::perf::verbs::VerbsOpts {
                device: None,
                port: 1,
                gid_index: 1,
            };
            assert_eq!(
                mrc_examples::perf::verbs::pick_device(&o),
                Ok(names[0].clone())
            );
        }
        Ok(names) if names.len() > 1 => {
            assert_eq!(code, 1);
            assert!(err.contains("several RDMA devices"), "{err}");
        }
        _ => {
            assert_eq!(code, 1);
            assert!(err.contains(&expected("")), "{err}");
        }
    }
}
