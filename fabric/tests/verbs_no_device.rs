//! Without an RDMA device (this CI machine: no kernel RDMA support), opening the verbs
//! datapath fails with a typed error naming what is missing; with devices present, a name
//! that is not among them fails naming the ones that are.
#![cfg(feature = "verbs")]

use mrc_fabric::verbs::{VerbsConfig, VerbsDatapath, VerbsError, device_names};

const MISSING: &str = "mrc_no_such_dev9";

#[test]
fn open_missing_device_names_what_is_missing() {
    let listed = device_names();
    let err = VerbsDatapath::open(VerbsConfig::new(MISSING)).unwrap_err();
    match (&listed, &err) {
        (Err(VerbsError::NoDevices { .. }), VerbsError::NoDevices { .. }) => {}
        (Ok(names), VerbsError::NoDevices { detail }) if names.is_empty() => {
            assert_eq!(detail, "ibv_get_device_list returned 0 devices");
        }
        (Ok(names), VerbsError::DeviceNotFound { name, available }) => {
            assert_eq!(name, MISSING);
            assert_eq!(available, names);
        }
        other => panic!("unexpected outcome {other:?}"),
    }
    let msg = err.to_string();
    eprintln!("open({MISSING}): {msg}");
    assert!(
        msg.starts_with("no RDMA devices: libibverbs lists none")
            || msg.starts_with("RDMA device \"mrc_no_such_dev9\" not found among ["),
        "{msg}"
    );
}

#[test]
fn bad_config_is_refused_before_touching_a_device() {
    let mut c = VerbsConfig::new("rxe0");
    c.send_slots = 15; // below qps (16) * signal_every (16)
    let e = VerbsDatapath::open(c).unwrap_err();
    assert_eq!(
        e.to_string(),
        "bad verbs configuration: send_slots 15 below qps * signal_every = 256"
    );
}
