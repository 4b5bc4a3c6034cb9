//! `--srv6` under MPI: each QP's EV sockets steered through the testbed's spines towards
//! its peer, from a testbed plan (`--testbed-plan FILE`: the JSON of
//! `mrc-testbed.sh plan`, e.g. a 4-host fabric; default: the designer's default plan), as
//! `mrc-perf client --srv6` does for its one server ([`crate::perf::srv6`]).

use crate::perf::srv6::{Srv6Mode, Srv6Via, Steering, leaf_of, one_plane_steering};
use crate::testbed::TestbedPlan;
use std::net::IpAddr;

/// The plan of `--testbed-plan`, or the default one.
///
/// # Errors
/// Unreadable or unparsable file; the default plan's error.
pub fn load_plan(path: Option<&std::path::Path>) -> Result<TestbedPlan, String> {
    match path {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .map_err(|e| format!("--testbed-plan {}: {e}", p.display()))?;
            serde_json::from_str(&t).map_err(|e| format!("--testbed-plan {}: {e}", p.display()))
        }
        None => TestbedPlan::default_plan().map_err(|e| format!("--srv6: testbed plan: {e}")),
    }
}

/// The steering of a QP's EV sockets towards `peer`: socket `s` through spine
/// `s % spines` (fewer sockets than spines use the first ones).
///
/// # Errors
/// `peer` is not a host of the plan, or a header does not build.
pub fn steering(
    plan: &TestbedPlan,
    mode: Srv6Mode,
    via: Srv6Via,
    peer: IpAddr,
    paths: u32,
    burst: u32,
) -> Result<Steering, String> {
    let leaf = leaf_of(plan, peer)?;
    let IpAddr::V6(dst) = peer else {
        return Err(format!("--srv6 needs IPv6 rank addresses, got {peer}"));
    };
    one_plane_steering(plan, mode, via, dst, leaf, paths, burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_two_host_client_steering() {
        let plan = load_plan(None).unwrap();
        let peer: IpAddr = "fd00:6d72:63:11::2".parse().unwrap();
        for via in [Srv6Via::Socket, Srv6Via::Route] {
            let a = steering(&plan, Srv6Mode::Usid, via, peer, 16, 1).unwrap();
            let b = crate::perf::srv6::steering(Srv6Mode::Usid, via, peer, &[], 16, 1).unwrap();
            assert_eq!(a, b);
        }
        assert!(
            steering(
                &plan,
                Srv6Mode::Srh,
                Srv6Via::Socket,
                "10.0.0.1".parse().unwrap(),
                16,
                1
            )
            .is_err()
        );
    }
}
