//! `--srv6 srh|usid`: the steering of every EV socket of a client on the testbed of
//! `testbed/mrc-testbed.sh`, from the same plan the script builds
//! ([`crate::testbed::TestbedPlan`], the designer's default testbed: 2 hosts, 2 leaves, 4
//! spines), so EV socket `s` crosses spine `s % spines` (with `--burst-size 1`: EV `i`
//! through spine `i % spines`).
//!
//! Several planes (`mrc-testbed.sh up --planes P`, `--bind` with one address per plane at
//! each end): the plan of the default testbed in P planes; the EVs are interleaved over
//! the planes (EV `i` on plane `i % P`, as the engine places them), and the `g`-th EV
//! socket of plane `q` crosses spine `g % spines` of plane `q` towards the peer's plane-`q`
//! address ([`steering_in`]; with `--burst-size 1`, EV `i` through spine
//! `(i / P) % spines` of plane `i % P`). Both ends need as many planes as the plan.
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

use crate::testbed::{Host, SteerMode, TestbedPlan};
use clap::ValueEnum;
use mrc_fabric::datapath::PathMap;
use mrc_fabric::srv6::SrhRepr;
use mrc_transport::ConnConfig;
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

/// The default testbed's plan in `planes` planes (what `mrc-testbed.sh up --planes P`
/// builds; the one-plane default for 1).
fn plan(planes: usize) -> Result<TestbedPlan, String> {
    let r = if planes <= 1 {
        TestbedPlan::default_plan()
    } else {
        TestbedPlan::default_plan_planes(u32::try_from(planes).unwrap_or(u32::MAX))
    };
    r.map_err(|e| format!("--srv6: testbed plan in {planes} plane(s): {e}"))
}

/// The testbed host `server` is: its leaf.
///
/// # Errors
/// A message when `server` is not a host of the plan.
pub fn leaf_of(plan: &TestbedPlan, server: IpAddr) -> Result<u16, String> {
    host_of(plan, server).map(|h| h.leaf)
}

/// The testbed host with address `addr` (in any plane).
fn host_of(plan: &TestbedPlan, addr: IpAddr) -> Result<&Host, String> {
    let IpAddr::V6(a) = addr else {
        return Err(format!("--srv6 needs an IPv6 server address, got {addr}"));
    };
    let hosts: Vec<String> = plan
        .hosts
        .iter()
        .flat_map(Host::ports_or_one)
        .map(|p| p.addr.to_string())
        .collect();
    plan.host_by_addr(a)
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
    if path.is_empty() {
        return Err(format!(
            "--srv6: the testbed plan has no spine {j} or leaf {leaf} in the plane of {server}"
        ));
    }
    path.push(server);
    SrhRepr::for_path(IpNextHeaderProtocols::Udp, &path)
        .map(|(r, _)| r)
        .map_err(|e| e.to_string())
}

/// The steering of the EV sockets of an end talking to `peer` (`paths` EVs, `burst` EVs
/// a socket), on the default testbed in as many planes as this end has addresses
/// (`local`, its `--bind`: one per plane; empty or one: one plane). See
/// [`steering_in`].
///
/// # Errors
/// As [`steering_in`].
pub fn steering(
    mode: Srv6Mode,
    via: Srv6Via,
    peer: IpAddr,
    local: &[IpAddr],
    paths: u32,
    burst: u32,
) -> Result<Steering, String> {
    let plan = plan(local.len().max(1))?;
    steering_in(&plan, mode, via, peer, local, paths, burst)
}

/// The steering of one plane's EV sockets towards `dst` on leaf `leaf`: socket `s`
/// (`paths / burst` of them, rounded up) through spine `s` (fewer sockets than spines use
/// the first ones), by a header per socket or a firewall mark per socket, as `via` says.
/// Shared by `mrc-perf client` ([`steering_in`]) and `mrc-perf mpi`
/// ([`crate::mpi::steer::steering`]).
///
/// # Errors
/// A header does not build ([`segment_list`]).
pub fn one_plane_steering(
    plan: &TestbedPlan,
    mode: Srv6Mode,
    via: Srv6Via,
    dst: Ipv6Addr,
    leaf: u16,
    paths: u32,
    burst: u32,
) -> Result<Steering, String> {
    let n = u16::try_from(paths.div_ceil(burst.max(1)).min(plan.design.spines)).unwrap_or(u16::MAX);
    Ok(match via {
        Srv6Via::Socket => Steering {
            srh: (0..n)
                .map(|j| segment_list(plan, mode, dst, leaf, j))
                .collect::<Result<_, _>>()?,
            marks: Vec::new(),
        },
        Srv6Via::Route => Steering {
            srh: Vec::new(),
            marks: (0..n).map(|j| mode.steer().mark(j)).collect(),
        },
    })
}

/// The steering of the EV sockets of an end with addresses `local` (one per plane, plane
/// 0 first; empty or one address: one plane) talking to `peer` (any of its addresses),
/// on the testbed of `plan`.
///
/// One plane: one entry per spine, in spine order; socket `s` takes entry `s % len`.
/// Fewer sockets than spines use only the first spines.
///
/// Several planes: one entry per EV socket, in the datapath's socket order
/// ([`PathMap::socket_planes`]: the EVs interleaved over the planes as the engine puts
/// them, [`ConnConfig::interleaved_planes`], each plane's EVs cut into sockets of
/// `burst`, the planes' sockets taken in turn). The `g`-th socket of plane `q` crosses
/// spine `g % spines` of plane `q` to the peer's plane-`q` address (its leaf's SID of
/// plane `q`); with `route`, it carries spine `g % spines`'s mark, whose table holds the
/// route through plane `q`'s spine for a plane-`q` destination.
///
/// # Errors
/// `peer` is not a testbed host; this end's plane count is not the plan's (`--bind` with
/// two addresses on a one-plane plan); an address of `local` is not this host's address
/// of its plane; a header does not build.
pub fn steering_in(
    plan: &TestbedPlan,
    mode: Srv6Mode,
    via: Srv6Via,
    peer: IpAddr,
    local: &[IpAddr],
    paths: u32,
    burst: u32,
) -> Result<Steering, String> {
    let planes = local.len().max(1);
    let plan_planes = plan.planes() as usize;
    let list = || {
        local
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    if planes != plan_planes {
        return Err(format!(
            "--srv6: this end has {planes} plane address(es) (--bind {}) but the testbed plan \
             has {plan_planes} plane(s): give one --bind address per plane of the fabric \
             (mrc-testbed.sh up --planes {planes} for {planes})",
            list()
        ));
    }
    let host = host_of(plan, peer)?;
    let spines = plan.design.spines;
    if planes == 1 {
        let leaf = host.leaf;
        let IpAddr::V6(dst) = peer else {
            return Err("unreachable: host_of checked IPv6".into());
        };
        return one_plane_steering(plan, mode, via, dst, leaf, paths, burst);
    }
    // Several planes: this end's addresses are one host's ports, in plane order.
    let me = host_of(plan, local[0])?;
    let ports = me.ports_or_one();
    for (q, ip) in local.iter().enumerate() {
        let want = ports.get(q).map(|p| p.addr);
        if want.map(IpAddr::V6) != Some(*ip) {
            return Err(format!(
                "--srv6: --bind {}: address {} ({ip}) must be {}'s plane-{q} address{}",
                list(),
                q + 1,
                me.name,
                want.map(|a| format!(" {a}")).unwrap_or_default()
            ));
        }
    }
    if me.name == host.name {
        return Err(format!(
            "--srv6: the peer {peer} is this end's own host {}",
            me.name
        ));
    }
    let peer_ports = host.ports_or_one();
    let map = PathMap {
        planes: ConnConfig::interleaved_planes(paths as usize, planes as u8),
        evs_per_socket: burst.max(1) as usize,
        ..PathMap::per_ev((0..paths).collect())
    };
    let mut next = vec![0u32; planes];
    let mut srh = Vec::new();
    let mut marks = Vec::new();
    for q in map.socket_planes() {
        let g = next[usize::from(q)];
        next[usize::from(q)] += 1;
        let j = u16::try_from(g % spines.max(1)).unwrap_or(u16::MAX);
        match via {
            Srv6Via::Socket => {
                let dst = peer_ports
                    .get(usize::from(q))
                    .map(|p| p.addr)
                    .ok_or_else(|| format!("--srv6: the peer {peer} has no plane-{q} port"))?;
                srh.push(segment_list(plan, mode, dst, host.leaf, j)?);
            }
            Srv6Via::Route => marks.push(mode.steer().mark(j)),
        }
    }
    Ok(Steering { srh, marks })
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
        steering(mode, Srv6Via::Socket, a(server).into(), &[], paths, burst)
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
            &[],
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
            &[],
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
            let e = steering(
                Srv6Mode::Srh,
                Srv6Via::Socket,
                s.parse().unwrap(),
                &[],
                16,
                1,
            )
            .unwrap_err();
            assert!(e.contains("--srv6"), "{s}: {e}");
        }
    }

    /// Host 0's and host 1's addresses in plane 0 and plane 1 of `up --planes 2`.
    const H0: [&str; 2] = ["fd00:6d72:63:10::2", "fd00:6d72:63:1010::2"];
    const H1: [&str; 2] = ["fd00:6d72:63:11::2", "fd00:6d72:63:1011::2"];

    fn ips(a: [&str; 2]) -> Vec<IpAddr> {
        a.iter().map(|s| s.parse().unwrap()).collect()
    }

    /// The socket index of EV `i` of `paths` EVs on two planes, burst `burst`, as the
    /// datapath assigns it (the engine interleaves the EVs over the planes).
    fn socket_of_ev(paths: u32, burst: usize, i: u32) -> usize {
        let map = PathMap {
            planes: ConnConfig::interleaved_planes(paths as usize, 2),
            evs_per_socket: burst,
            ..PathMap::per_ev((0..paths).collect())
        };
        map_socket(&map, i)
    }

    fn map_socket(map: &PathMap, ev: u32) -> usize {
        // socket_of is crate-private to mrc-fabric: recompute it from socket_planes
        let k = map.evs_per_socket;
        let order = map.socket_planes();
        let q = map.plane_of(ev as usize);
        let j = (0..ev as usize).filter(|&x| map.plane_of(x) == q).count();
        order
            .iter()
            .enumerate()
            .filter(|(_, p)| **p == q)
            .nth(j / k)
            .map(|(s, _)| s)
            .unwrap()
    }

    #[test]
    fn two_planes_steer_each_ev_through_a_spine_of_its_own_plane_srh() {
        // The client, host 0 on both planes, towards host 1 (its plane-0 address: the
        // TCP target), 16 EVs, one a socket: EV i on plane i % 2, spine (i / 2) % 4 of it.
        let s = steering(
            Srv6Mode::Srh,
            Srv6Via::Socket,
            a(H1[0]).into(),
            &ips(H0),
            16,
            1,
        )
        .unwrap();
        assert!(s.marks.is_empty());
        assert_eq!(s.srh.len(), 16);
        for ev in 0..16u32 {
            let sock = socket_of_ev(16, 1, ev);
            let (q, j) = (ev % 2, (ev / 2) % 4);
            let r = &s.srh[sock];
            // reversed (RFC 8754): host 1's plane-q address, plane q's leaf 1, spine j
            let want = if q == 0 {
                vec![
                    a("fd00:6d72:63:11::2"),
                    a("fd00:6d72:63:e11::"),
                    a(&format!("fd00:6d72:63:e0{j}::")),
                ]
            } else {
                vec![
                    a("fd00:6d72:63:1011::2"),
                    a("fd00:6d72:63:1e11::"),
                    a(&format!("fd00:6d72:63:1e0{j}::")),
                ]
            };
            assert_eq!(r.segments, want, "EV {ev} (socket {sock})");
            assert_eq!(r.segments_left, 2);
        }
        // Written out for four EVs, as the kernel will see them.
        let first = |ev: u32| s.srh[socket_of_ev(16, 1, ev)].active_segment().unwrap();
        assert_eq!(first(0), a("fd00:6d72:63:e00::"));
        assert_eq!(first(1), a("fd00:6d72:63:1e00::"));
        assert_eq!(first(6), a("fd00:6d72:63:e03::"));
        assert_eq!(first(15), a("fd00:6d72:63:1e03::"));
        // Every spine of each plane carries 2 of the plane's 8 EVs.
        let mut per_spine = std::collections::HashMap::new();
        for r in &s.srh {
            *per_spine.entry(r.active_segment().unwrap()).or_insert(0) += 1;
        }
        assert_eq!(per_spine.len(), 8);
        assert!(per_spine.values().all(|&n| n == 2), "{per_spine:?}");
    }

    #[test]
    fn the_server_steers_back_to_the_clients_address_of_each_plane() {
        // The server, host 1, knows the client by its TCP source, host 0's plane-0 address.
        let s = steering(
            Srv6Mode::Srh,
            Srv6Via::Socket,
            a(H0[0]).into(),
            &ips(H1),
            16,
            1,
        )
        .unwrap();
        assert_eq!(
            s.srh[socket_of_ev(16, 1, 3)].segments,
            vec![
                a("fd00:6d72:63:1010::2"),
                a("fd00:6d72:63:1e10::"),
                a("fd00:6d72:63:1e01::"),
            ]
        );
        assert_eq!(
            s.srh[socket_of_ev(16, 1, 4)].segments,
            vec![
                a("fd00:6d72:63:10::2"),
                a("fd00:6d72:63:e10::"),
                a("fd00:6d72:63:e02::"),
            ]
        );
    }

    #[test]
    fn two_planes_usid_containers_carry_the_planes_digit() {
        // Burst 2: 8 sockets, each plane's 4 sockets through its spines 0..3.
        let s = steering(
            Srv6Mode::Usid,
            Srv6Via::Socket,
            a(H1[1]).into(),
            &ips(H0),
            16,
            2,
        )
        .unwrap();
        assert_eq!(s.srh.len(), 8);
        for ev in 0..16u32 {
            let (q, g) = (ev % 2, (ev / 2) / 2);
            let r = &s.srh[socket_of_ev(16, 2, ev)];
            let peer = if q == 0 { H1[0] } else { H1[1] };
            assert_eq!(
                r.segments,
                vec![a(peer), a(&format!("fd00:75:e0{q}{g}:e1{q}1::"))],
                "EV {ev}"
            );
        }
    }

    #[test]
    fn two_planes_by_route_mark_each_socket_with_its_planes_spine() {
        let s = steering(
            Srv6Mode::Usid,
            Srv6Via::Route,
            a(H1[0]).into(),
            &ips(H0),
            16,
            1,
        )
        .unwrap();
        assert!(s.srh.is_empty());
        for ev in 0..16u32 {
            assert_eq!(
                s.marks[socket_of_ev(16, 1, ev)],
                0x6d72_0010 + (ev / 2) % 4,
                "EV {ev}"
            );
        }
    }

    #[test]
    fn a_plan_and_bind_mismatch_is_a_clear_error() {
        // Two --bind addresses on a one-plane plan.
        let one = TestbedPlan::default_plan().unwrap();
        let e = steering_in(
            &one,
            Srv6Mode::Srh,
            Srv6Via::Socket,
            a(H1[0]).into(),
            &ips(H0),
            16,
            1,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "--srv6: this end has 2 plane address(es) (--bind fd00:6d72:63:10::2,fd00:6d72:63:1010::2) \
             but the testbed plan has 1 plane(s): give one --bind address per plane of the fabric \
             (mrc-testbed.sh up --planes 2 for 2)"
        );
        // One address on a two-plane plan.
        let two = TestbedPlan::default_plan_planes(2).unwrap();
        let e = steering_in(
            &two,
            Srv6Mode::Srh,
            Srv6Via::Socket,
            a(H1[0]).into(),
            &ips(H0)[..1],
            16,
            1,
        )
        .unwrap_err();
        assert!(
            e.contains("has 1 plane address(es)") && e.contains("has 2 plane(s)"),
            "{e}"
        );
        // Addresses out of plane order, or of two hosts.
        for (bind, what) in [
            (
                [H0[1], H0[0]],
                "address 1 (fd00:6d72:63:1010::2) must be h0's plane-0 address fd00:6d72:63:10::2",
            ),
            (
                [H0[0], H1[1]],
                "address 2 (fd00:6d72:63:1011::2) must be h0's plane-1 address fd00:6d72:63:1010::2",
            ),
        ] {
            let e = steering(
                Srv6Mode::Srh,
                Srv6Via::Socket,
                a(H1[0]).into(),
                &ips(bind),
                16,
                1,
            )
            .unwrap_err();
            assert!(e.contains(what), "{e}");
        }
        // A peer that is no host, or this end itself.
        let e = steering(
            Srv6Mode::Srh,
            Srv6Via::Socket,
            a("fd00:6d72:63:1012::2").into(),
            &ips(H0),
            16,
            1,
        )
        .unwrap_err();
        assert!(
            e.starts_with("--srv6: fd00:6d72:63:1012::2 is not a testbed host ("),
            "{e}"
        );
        let e = steering(
            Srv6Mode::Srh,
            Srv6Via::Socket,
            a(H0[1]).into(),
            &ips(H0),
            16,
            1,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "--srv6: the peer fd00:6d72:63:1010::2 is this end's own host h0"
        );
        // Nine planes: the testbed builds at most 8.
        let nine: Vec<IpAddr> = (0..9).map(|_| a(H0[0]).into()).collect();
        let e = steering(
            Srv6Mode::Srh,
            Srv6Via::Socket,
            a(H1[0]).into(),
            &nine,
            16,
            1,
        )
        .unwrap_err();
        assert!(e.starts_with("--srv6: testbed plan in 9 plane(s): "), "{e}");
    }

    #[test]
    fn state_names_match_the_spec_spelling() {
        assert_eq!(state_name(PathState::AssumedBad), "ASSUMED_BAD");
        assert_eq!(state_name(PathState::Skip { until_pick: 3 }), "SKIP");
        assert_eq!(state_name(PathState::Good), "GOOD");
        assert_eq!(state_name(PathState::Denied), "DENIED");
    }
}
