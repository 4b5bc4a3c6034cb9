//! `--srv6 srh|usid`: the steering of every EV socket of a client on the testbed of
//! `testbed/mrc-testbed.sh`, from the same plan the script builds
//! ([`crate::testbed::TestbedPlan`], the designer's default testbed: 2 hosts, 2 leaves, 4
//! spines), so EV socket `s` crosses spine `s % spines` (with `--burst-size 1`: EV `i`
//! through spine `i % spines`).
//!
//! - `srh`: an SRH with path `[spine SID, destination leaf SID, server]` (RFC 8754), each
//!   SID a seg6local `End` on its switch.
//! - `usid`: the uSID container `fd00:75:<spine uSID>:<leaf uSID>::` (RFC 9800, 32-bit
//!   block, 16-bit uSIDs, `End` with the NEXT-C-SID flavour) as the active segment, the
//!   server as the only other entry (the leaf ends the container and takes the next SRH
//!   segment, so the UDP checksum's final destination is the server).
//!
//! Two ways to put the header on (`--srv6-via`):
//! - `socket`: a sticky `IPV6_RTHDR` per EV socket; the kernel writes the connected address
//!   (the server) into segment 0 of every packet. With an extension header the kernel
//!   neither offloads the UDP checksum nor keeps a `UDP_SEGMENT` send whole: it checksums
//!   in software and cuts every GSO send into single packets at the first hop, so each
//!   hop forwards 8-16 times more packets than without (testbed/README.md).
//! - `route`: the EV socket only sets a firewall mark (`SO_MARK`) of its spine; the host's
//!   steering table of that mark adds the same segment list in the kernel (`encap seg6
//!   mode inline`, after the UDP layer set up checksum offload), so GSO sends cross the
//!   fabric whole.

use crate::testbed::{SteerMode, TestbedPlan};
use clap::ValueEnum;
use mrc_fabric::srv6::SrhRepr;
use mrc_transport::path::PathState;
use pnet_packet::ip::IpNextHeaderProtocols;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv6Addr};

/// How EVs are steered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Srv6Mode {
    /// SRH segment list of classic 128-bit SIDs.
    Srh,
    /// uSID container as the destination address.
    Usid,
}

impl Srv6Mode {
    /// The plan's name of it.
    pub fn steer(self) -> SteerMode {
        match self {
            Srv6Mode::Srh => SteerMode::Srh,
            Srv6Mode::Usid => SteerMode::Usid,
        }
    }
}

/// Where the SRv6 header is added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Srv6Via {
    /// A sticky `IPV6_RTHDR` on each EV socket.
    #[default]
    Socket,
    /// The host's steering route, selected by the EV socket's firewall mark.
    Route,
}

/// Per EV socket of one end: the sticky headers or the marks (one of them is empty).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Steering {
    /// Sticky SRH per socket, cycled.
    pub srh: Vec<SrhRepr>,
    /// Firewall mark per socket, cycled.
    pub marks: Vec<u32>,
}

fn plan() -> Result<TestbedPlan, String> {
    TestbedPlan::default_plan().map_err(|e| format!("--srv6: testbed plan: {e}"))
}

/// The testbed host `server` is: its leaf.
///
/// # Errors
/// A message when `server` is not a host of the plan.
pub fn leaf_of(plan: &TestbedPlan, server: IpAddr) -> Result<u16, String> {
    let IpAddr::V6(a) = server else {
        return Err(format!("--srv6 needs an IPv6 server address, got {server}"));
    };
    let hosts: Vec<String> = plan.hosts.iter().map(|h| h.addr.to_string()).collect();
    plan.host_by_addr(a)
        .map(|h| h.leaf)
        .ok_or_else(|| format!("--srv6: {a} is not a testbed host ({})", hosts.join(" or ")))
}

/// The sticky header of spine `j` towards `server` behind leaf `leaf`.
///
/// # Errors
/// The SRH error, as text.
pub fn segment_list(
    plan: &TestbedPlan,
    mode: Srv6Mode,
    server: Ipv6Addr,
    leaf: u16,
    j: u16,
) -> Result<SrhRepr, String> {
    // The spine and leaf of the server's plane (plane 0 in a one-plane plan).
    let mut path = plan.segments_in(plan.plane_of(server), mode.steer(), j, leaf);
    path.push(server);
    SrhRepr::for_path(IpNextHeaderProtocols::Udp, &path)
        .map(|(r, _)| r)
        .map_err(|e| e.to_string())
}

/// The steering of the EV sockets of an end talking to `peer` (`paths` EVs, `burst` EVs
/// a socket): one entry per spine, in spine order; socket `s` takes entry
/// `s % len`. Fewer sockets than spines use only the first spines.
///
/// # Errors
/// `peer` is not a testbed host, or a header does not build.
pub fn steering(
    mode: Srv6Mode,
    via: Srv6Via,
    peer: IpAddr,
    paths: u32,
    burst: u32,
) -> Result<Steering, String> {
    let plan = plan()?;
    let leaf = leaf_of(&plan, peer)?;
    let IpAddr::V6(dst) = peer else {
        return Err("unreachable: leaf_of checked IPv6".into());
    };
    let spines = plan.design.spines;
    let sockets = paths.div_ceil(burst.max(1));
    let n = u16::try_from(sockets.min(spines)).unwrap_or(u16::MAX);
    Ok(match via {
        Srv6Via::Socket => Steering {
            srh: (0..n)
                .map(|j| segment_list(&plan, mode, dst, leaf, j))
                .collect::<Result<_, _>>()?,
            marks: Vec::new(),
        },
        Srv6Via::Route => Steering {
            srh: Vec::new(),
            marks: (0..n).map(|j| mode.steer().mark(j)).collect(),
        },
    })
}

/// The report's name of a path state.
pub fn state_name(s: PathState) -> &'static str {
    match s {
        PathState::Good => "GOOD",
        PathState::Skip { .. } => "SKIP",
        PathState::AssumedBad => "ASSUMED_BAD",
        PathState::Denied => "DENIED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn lists(mode: Srv6Mode, server: &str, paths: u32, burst: u32) -> Vec<SrhRepr> {
        steering(mode, Srv6Via::Socket, a(server).into(), paths, burst)
            .unwrap()
            .srh
    }

    #[test]
    fn srh_lists_name_each_spine_then_the_leaf() {
        let l = lists(Srv6Mode::Srh, "fd00:6d72:63:11::2", 16, 1);
        assert_eq!(l.len(), 4);
        for (j, r) in l.iter().enumerate() {
            // Stored reversed (RFC 8754 section 2): final destination first.
            assert_eq!(
                r.segments,
                vec![
                    a("fd00:6d72:63:11::2"),
                    a("fd00:6d72:63:e11::"),
                    a(&format!("fd00:6d72:63:e0{j}::"))
                ]
            );
            assert_eq!(r.segments_left, 2);
            assert_eq!(
                r.active_segment(),
                Some(a(&format!("fd00:6d72:63:e0{j}::")))
            );
        }
    }

    #[test]
    fn usid_lists_carry_one_container_per_spine() {
        let l = lists(Srv6Mode::Usid, "fd00:6d72:63:10::2", 16, 2);
        assert_eq!(l.len(), 4);
        assert_eq!(
            l[3].segments,
            vec![a("fd00:6d72:63:10::2"), a("fd00:75:e003:e100::")]
        );
        assert_eq!(l[3].segments_left, 1);
        assert_eq!(l[0].active_segment(), Some(a("fd00:75:e000:e100::")));
    }

    #[test]
    fn route_steering_marks_each_socket_with_its_spine_table() {
        let s = steering(
            Srv6Mode::Usid,
            Srv6Via::Route,
            a("fd00:6d72:63:11::2").into(),
            16,
            1,
        )
        .unwrap();
        assert!(s.srh.is_empty());
        assert_eq!(
            s.marks,
            vec![0x6d72_0010, 0x6d72_0011, 0x6d72_0012, 0x6d72_0013]
        );
        let s = steering(
            Srv6Mode::Srh,
            Srv6Via::Route,
            a("fd00:6d72:63:10::2").into(),
            4,
            2,
        )
        .unwrap();
        assert_eq!(s.marks, vec![0x6d72_0000, 0x6d72_0001]);
    }

    #[test]
    fn few_sockets_use_the_first_spines() {
        assert_eq!(lists(Srv6Mode::Srh, "fd00:6d72:63:11::2", 4, 2).len(), 2);
    }

    #[test]
    fn non_testbed_servers_are_refused() {
        for s in [
            "127.0.0.1",
            "::1",
            "fd00:6d72:63:12::2",
            "fd00:6d72:63:11::3",
        ] {
            let e =
                steering(Srv6Mode::Srh, Srv6Via::Socket, s.parse().unwrap(), 16, 1).unwrap_err();
            assert!(e.contains("--srv6"), "{s}: {e}");
        }
    }

    #[test]
    fn state_names_match_the_spec_spelling() {
        assert_eq!(state_name(PathState::AssumedBad), "ASSUMED_BAD");
        assert_eq!(state_name(PathState::Skip { until_pick: 3 }), "SKIP");
        assert_eq!(state_name(PathState::Good), "GOOD");
        assert_eq!(state_name(PathState::Denied), "DENIED");
    }
}
