//! The plan of the real-kernel SRv6 testbed (`testbed/mrc-testbed.sh`, issue 8): network
//! namespaces, veth links, addresses, SIDs and steering tables, derived from the
//! spine-leaf designer's output ([`mrc_fabric_sim::design`](mod@mrc_fabric_sim::design)). `mrc-sim testbed-plan
//! --json -` prints it; the script builds exactly what it lists, and `mrc-perf --srv6`
//! takes its segment lists and marks from the same plan.
//!
//! Mapping (one plane; a server of the design is a host namespace with one link to its
//! leaf, which carries all of its NICs' traffic):
//!
//! | item | name | address (unique-local `fd00:6d72:63::/48` only) |
//! | --- | --- | --- |
//! | host `h` (server `h`) | `h<h>`, interface `l` | `fd00:6d72:63:<10+h>::2/64`, leaf end `::1` |
//! | leaf `i` | `l<i>`, interfaces `h<h>`, `s<j>` | End SID `fd00:6d72:63:e1<i>::/64`, uSID `0xe10<i>` |
//! | spine `j` | `s<j>`, interfaces `l<i>` | End SID `fd00:6d72:63:e0<j>::/64`, uSID `0xe00<j>` |
//! | leaf `i` - spine `j` | | `fd00:6d72:63:2<i><j>::/64`, leaf `::1`, spine `::2` |
//!
//! uSIDs: 32-bit block `fd00:75::/32`, 16-bit uSIDs (RFC 9800 NEXT-C-SID), so spine `j`
//! owns `fd00:75:e00<j>::/48`. Hosts are laid out leaf by leaf: `servers per leaf =
//! downlinks per leaf / GPUs per server`. Indices are hex digits, so at most 16 hosts,
//! leaves and spines; one link per leaf-spine pair (the testbed refuses other designs
//! rather than build part of them).
//!
//! Planes (`planes = P`, 2 to [`MAX_PLANES`]; the designer's `planes`: port `p` of every
//! NIC is on plane `p`, each plane the same fabric): P disjoint copies of the leaves,
//! spines and leaf-spine links, and every host has one interface in each. Plane `p` is the
//! first hex digit of the 16-bit subnet ID (the fourth group) of every address of the
//! plane, and the third hex digit of its uSIDs; plane 0 has the one-plane addresses, so a
//! one-plane plan is plane 0 of any other:
//!
//! | item (plane `p`) | name | address |
//! | --- | --- | --- |
//! | host `h`, its port `p` ([`Port`]) | interface `eth<p>` | `fd00:6d72:63:<p>01<h>::2/64`, leaf end `::1` |
//! | leaf `i` | `p<p>-l<i>`, interfaces `h<h>`, `s<j>` | End SID `fd00:6d72:63:<p>e1<i>::/64`, uSID `0xe1<p><i>` |
//! | spine `j` | `p<p>-s<j>`, interfaces `l<i>` | End SID `fd00:6d72:63:<p>e0<j>::/64`, uSID `0xe0<p><j>` |
//! | leaf `i` - spine `j` | | `fd00:6d72:63:<p>2<i><j>::/64`, leaf `::1`, spine `::2` |
//!
//! (plane 1: host 1 `fd00:6d72:63:1011::2`, the link of leaf 1 and spine 3
//! `fd00:6d72:63:1213::/64`, spine 3 `fd00:6d72:63:1e03::`, uSID `0xe013`). In a
//! one-plane plan the plane fields ([`Host::ports`], [`Switch::plane`], [`Link::plane`],
//! [`Steer::plane`], [`DesignSummary::planes`]) are left out of the JSON, so it is what it
//! was before planes; [`Host::ports_or_one`] gives every plan's ports alike. `leaves`,
//! `spines` and `links` list plane 0's first, then plane 1's, and so on.
//!
//! Steering by route ([`Steer`]): in each host, for each mode (`srh`, `usid`) and spine,
//! a routing table whose route to every other host adds that spine's segment list in the
//! kernel (`encap seg6 mode inline`), selected by the firewall mark of the EV socket
//! (`ip -6 rule add fwmark MARK lookup TABLE`). With planes, the table of spine `j` holds
//! the routes to every plane's addresses, each through spine `j` of the destination's
//! plane: the destination address picks the plane, the mark the spine.

use mrc_fabric_sim::{DesignInput, FabricDesign, Layout, Oversubscription, design};
use serde::{Deserialize, Serialize};
use std::net::Ipv6Addr;

/// The testbed's /48: `fd00:6d72:63::/48` (unique-local, RFC 4193).
pub const PLAN_48: [u16; 3] = [0xfd00, 0x6d72, 0x63];
/// uSID locator block, 32 bits: `fd00:75::/32`.
pub const USID_BLOCK: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x75, 0, 0, 0, 0, 0, 0);
/// veth MTU, bytes: jumbo frames, so a 4096-byte mrc payload plus an SRH is unfragmented.
pub const MTU_BYTES: u32 = 9000;
/// Most hosts, leaves or spines (one hex digit each in the addresses).
pub const MAX_NODES_PER_TIER: u32 = 16;
/// Most planes (the first hex digit of a subnet ID; the uSIDs' third hex digit).
pub const MAX_PLANES: u32 = 8;
/// First routing table of the steering tables (`TABLE_BASE + 16 x mode + spine`).
pub const TABLE_BASE: u32 = 1000;
/// Firewall mark of the steering tables (`MARK_BASE + 16 x mode + spine`): "mr" in the
/// high half.
pub const MARK_BASE: u32 = 0x6d72_0000;

/// The design the default testbed is built from: 2 servers of 4 GPUs, 100G NICs,
/// 8-port 100G leaves, 2-port 100G spines, 1:1, one plane: 2 hosts, 2 leaves, 4 spines.
pub fn default_input() -> DesignInput {
    DesignInput {
        gpus: 8,
        gpus_per_server: 4,
        nic_gbps: 100,
        leaf_radix: 8,
        leaf_port_gbps: 100,
        spine_radix: 2,
        spine_port_gbps: 100,
        oversubscription: Oversubscription::NON_BLOCKING,
        planes: 1,
        layout: Layout::SpineLeaf,
    }
}

/// The default design in `planes` planes: each NIC `100 x planes` Gb/s, so that every
/// plane's port is 100G like the switch ports and every plane is the one-plane default
/// fabric (2 hosts, 2 leaves, 4 spines).
pub fn default_input_planes(planes: u32) -> DesignInput {
    let mut i = default_input();
    i.planes = planes;
    i.nic_gbps = i.nic_gbps.saturating_mul(planes);
    i
}

/// How `--srv6` steers: an SRH of classic SIDs or a uSID container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteerMode {
    /// `[spine SID, destination leaf SID]` before the destination host.
    Srh,
    /// `[uSID container of spine and destination leaf]` before the destination host.
    Usid,
}

impl SteerMode {
    /// Both modes, in table order.
    pub const ALL: [SteerMode; 2] = [SteerMode::Srh, SteerMode::Usid];

    fn index(self) -> u32 {
        match self {
            SteerMode::Srh => 0,
            SteerMode::Usid => 1,
        }
    }

    /// Routing table of this mode and spine `j`.
    pub fn table(self, j: u16) -> u32 {
        TABLE_BASE + 16 * self.index() + u32::from(j)
    }

    /// Firewall mark selecting [`SteerMode::table`].
    pub fn mark(self, j: u16) -> u32 {
        MARK_BASE + 16 * self.index() + u32::from(j)
    }
}

/// A host namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Namespace suffix, `h<h>`.
    pub name: String,
    /// Index of its leaf.
    pub leaf: u16,
    /// Its interface towards the leaf (`l`).
    pub ifname: String,
    /// Its address, `/64` on the link to the leaf.
    pub addr: Ipv6Addr,
    /// The leaf's address on that link (the default gateway).
    pub gateway: Ipv6Addr,
    /// The leaf's interface towards it, `h<h>`.
    pub leaf_ifname: String,
    /// Its port in each plane, in plane order (the first is the fields above); empty, and
    /// left out of the JSON, in a one-plane plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
}

impl Host {
    /// Its port in each plane, in plane order: [`Host::ports`], or in a one-plane plan the
    /// one port of the fields `ifname`, `addr`, `gateway`, `leaf_ifname` (leaf `l<leaf>`).
    pub fn ports_or_one(&self) -> Vec<Port> {
        if !self.ports.is_empty() {
            return self.ports.clone();
        }
        vec![Port {
            plane: 0,
            ifname: self.ifname.clone(),
            addr: self.addr,
            gateway: self.gateway,
            leaf_name: format!("l{}", self.leaf),
            leaf_ifname: self.leaf_ifname.clone(),
        }]
    }
}

/// A host's interface in one plane: its link to its leaf of that plane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    /// The plane.
    pub plane: u16,
    /// The host's interface, `eth<plane>`.
    pub ifname: String,
    /// Its address, `/64` on the link to the leaf.
    pub addr: Ipv6Addr,
    /// The leaf's address on that link (the gateway of the plane).
    pub gateway: Ipv6Addr,
    /// The leaf's namespace suffix, `p<plane>-l<i>`.
    pub leaf_name: String,
    /// The leaf's interface towards the host, `h<h>`.
    pub leaf_ifname: String,
}

/// A switch namespace (leaf or spine).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    /// Namespace suffix, `l<i>` or `s<j>`; with planes `p<p>-l<i>` or `p<p>-s<j>`.
    pub name: String,
    /// Its End SID (`seg6local action End` on the `/64`).
    pub sid: Ipv6Addr,
    /// Its 16-bit uSID (`End` with NEXT-C-SID on the block's `/48` of it).
    pub usid: u16,
    /// The `/48` prefix its uSID owns, `fd00:75:<usid>::`.
    pub usid_prefix: Ipv6Addr,
    /// Its plane; left out (`None`) in a one-plane plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<u16>,
}

/// A leaf-spine veth link (`leaf` and `spine` are indices within its plane).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Leaf index.
    pub leaf: u16,
    /// Spine index.
    pub spine: u16,
    /// Leaf end: interface `s<j>`, address `::1/64`.
    pub leaf_ifname: String,
    /// Leaf address.
    pub leaf_addr: Ipv6Addr,
    /// Spine end: interface `l<i>`, address `::2/64`.
    pub spine_ifname: String,
    /// Spine address.
    pub spine_addr: Ipv6Addr,
    /// Its plane; left out (`None`) in a one-plane plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<u16>,
}

/// One steering route: in `host`, packets marked `mark` to `dst` take table `table`,
/// whose route inserts `segments` (an SRH, inline) so they cross spine `spine`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steer {
    /// Host index (the namespace the route lives in).
    pub host: u16,
    /// SRH or uSID.
    pub mode: SteerMode,
    /// Spine crossed.
    pub spine: u16,
    /// Firewall mark of the EV sockets that take it.
    pub mark: u32,
    /// Routing table.
    pub table: u32,
    /// Destination host address (`/128`).
    pub dst: Ipv6Addr,
    /// Segments before the destination, in path order.
    pub segments: Vec<Ipv6Addr>,
    /// The plane of `dst` (and of the spine and segments); left out (`None`) in a
    /// one-plane plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<u16>,
}

/// The whole testbed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestbedPlan {
    /// The designer's input it came from.
    pub design: DesignSummary,
    /// veth MTU, bytes.
    pub mtu_bytes: u32,
    /// Hosts, by index.
    pub hosts: Vec<Host>,
    /// Leaves, by index; with planes plane 0's, then plane 1's, ...
    pub leaves: Vec<Switch>,
    /// Spines, by index; with planes plane 0's, then plane 1's, ...
    pub spines: Vec<Switch>,
    /// Every leaf-spine link, plane by plane.
    pub links: Vec<Link>,
    /// Steering routes of every host.
    pub steering: Vec<Steer>,
}

/// What of the design the plan used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesignSummary {
    /// GPUs.
    pub gpus: u32,
    /// GPUs per server.
    pub gpus_per_server: u32,
    /// Servers (= hosts).
    pub servers: u32,
    /// Leaves (of each plane).
    pub leaves: u32,
    /// Spines (of each plane).
    pub spines: u32,
    /// Servers on each leaf (the last may hold fewer).
    pub servers_per_leaf: u32,
    /// Planes; left out of the JSON when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub planes: u32,
}

fn one() -> u32 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Why a design cannot be a testbed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The designer refused the input.
    #[error("design: {0}")]
    Design(#[from] mrc_fabric_sim::DesignError),
    /// More than [`MAX_NODES_PER_TIER`] of a tier.
    #[error("{what}: {n} exceeds the testbed's {MAX_NODES_PER_TIER}")]
    TooMany {
        /// hosts, leaves or spines.
        what: &'static str,
        /// How many the design has.
        n: u32,
    },
    /// A design the testbed does not build (more than [`MAX_PLANES`] planes, parallel
    /// links, a server across leaves, fewer than 2 hosts).
    #[error(
        "the testbed builds whole servers, at most 8 planes, one link per leaf-spine pair and at least 2 hosts: {0}"
    )]
    Unsupported(String),
}

fn a48(s3: u16, s4: u16) -> Ipv6Addr {
    Ipv6Addr::new(PLAN_48[0], PLAN_48[1], PLAN_48[2], s3, 0, 0, 0, s4)
}

/// Address `s4` of subnet `s3` of plane `plane`: the plane is the subnet's first hex digit.
fn a48p(plane: u16, s3: u16, s4: u16) -> Ipv6Addr {
    a48((plane << 12) | s3, s4)
}

/// uSID container `fd00:75:<first>:<second>::` (32-bit block, two 16-bit uSIDs).
pub fn usid_container(first: u16, second: u16) -> Ipv6Addr {
    let b = USID_BLOCK.segments();
    Ipv6Addr::new(b[0], b[1], first, second, 0, 0, 0, 0)
}

impl TestbedPlan {
    /// The plan of `d` (see the module docs).
    ///
    /// # Errors
    /// [`PlanError::TooMany`], [`PlanError::Unsupported`].
    pub fn from_design(d: &FabricDesign) -> Result<TestbedPlan, PlanError> {
        let p = &d.plane;
        for (what, n) in [
            ("hosts", d.servers),
            ("leaves", p.leaves),
            ("spines", p.spines),
        ] {
            if n > MAX_NODES_PER_TIER {
                return Err(PlanError::TooMany { what, n });
            }
        }
        if d.rail.is_some() {
            return Err(PlanError::Unsupported(
                "the rail layout (the testbed wires servers whole to one leaf)".into(),
            ));
        }
        if p.spines == 0 {
            return Err(PlanError::Unsupported(
                "one leaf and no spines (nothing for SRv6 to steer)".into(),
            ));
        }
        let planes = d.input.planes;
        if planes > MAX_PLANES || p.links_per_leaf_spine != 1 {
            return Err(PlanError::Unsupported(format!(
                "{planes} planes, {} links per leaf-spine pair",
                p.links_per_leaf_spine
            )));
        }
        if d.input.gpus_per_server > p.downlinks_per_leaf {
            return Err(PlanError::Unsupported(format!(
                "a server of {} NICs does not fit a leaf of {} downlinks",
                d.input.gpus_per_server, p.downlinks_per_leaf
            )));
        }
        if d.servers < 2 {
            return Err(PlanError::Unsupported(format!("{} host", d.servers)));
        }
        let per_leaf = p.downlinks_per_leaf / d.input.gpus_per_server;
        let n = |x: u32| u16::try_from(x).unwrap_or(u16::MAX);
        let multi = planes > 1;
        let plane_field = |pl: u16| multi.then_some(pl);
        // Namespace suffix of switch `i` of a tier in plane `pl`.
        let sw_name = |tier: char, pl: u16, i: u16| {
            if multi {
                format!("p{pl}-{tier}{i}")
            } else {
                format!("{tier}{i}")
            }
        };
        let hosts: Vec<Host> = (0..n(d.servers))
            .map(|h| {
                let leaf = h / n(per_leaf);
                let ports: Vec<Port> = if multi {
                    (0..n(planes))
                        .map(|pl| Port {
                            plane: pl,
                            ifname: format!("eth{pl}"),
                            addr: a48p(pl, 0x10 + h, 2),
                            gateway: a48p(pl, 0x10 + h, 1),
                            leaf_name: sw_name('l', pl, leaf),
                            leaf_ifname: format!("h{h}"),
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                Host {
                    name: format!("h{h}"),
                    leaf,
                    ifname: if multi { "eth0".into() } else { "l".into() },
                    addr: a48(0x10 + h, 2),
                    gateway: a48(0x10 + h, 1),
                    leaf_ifname: format!("h{h}"),
                    ports,
                }
            })
            .collect();
        // Switch `i` of a tier in plane `pl`: uSID `usid_base + 16 pl + i`, End SID in
        // subnet `usid_base / 16 + i` of the plane (leaves 0xe1pi and <p>e1i, spines
        // 0xe0pj and <p>e0j).
        let switch = |tier: char, usid_base: u16, pl: u16, i: u16| Switch {
            name: sw_name(tier, pl, i),
            sid: a48p(pl, (usid_base >> 4) + i, 0),
            usid: usid_base + (pl << 4) + i,
            usid_prefix: usid_container(usid_base + (pl << 4) + i, 0),
            plane: plane_field(pl),
        };
        let (mut leaves, mut spines, mut links) = (Vec::new(), Vec::new(), Vec::new());
        for pl in 0..n(planes) {
            leaves.extend((0..n(p.leaves)).map(|i| switch('l', 0xe100, pl, i)));
            spines.extend((0..n(p.spines)).map(|j| switch('s', 0xe000, pl, j)));
            for i in 0..n(p.leaves) {
                for j in 0..n(p.spines) {
                    links.push(Link {
                        leaf: i,
                        spine: j,
                        leaf_ifname: format!("s{j}"),
                        leaf_addr: a48p(pl, 0x200 + 0x10 * i + j, 1),
                        spine_ifname: format!("l{i}"),
                        spine_addr: a48p(pl, 0x200 + 0x10 * i + j, 2),
                        plane: plane_field(pl),
                    });
                }
            }
        }
        let mut plan = TestbedPlan {
            design: DesignSummary {
                gpus: d.input.gpus,
                gpus_per_server: d.input.gpus_per_server,
                servers: d.servers,
                leaves: p.leaves,
                spines: p.spines,
                servers_per_leaf: per_leaf,
                planes,
            },
            mtu_bytes: MTU_BYTES,
            hosts,
            leaves,
            spines,
            links,
            steering: Vec::new(),
        };
        let mut steering = Vec::new();
        for (h, src) in (0u16..).zip(&plan.hosts) {
            for dst in &plan.hosts {
                if dst.name == src.name {
                    continue;
                }
                for port in dst.ports_or_one() {
                    for mode in SteerMode::ALL {
                        for j in 0..n(p.spines) {
                            steering.push(Steer {
                                host: h,
                                mode,
                                spine: j,
                                mark: mode.mark(j),
                                table: mode.table(j),
                                dst: port.addr,
                                segments: plan.segments_in(port.plane, mode, j, dst.leaf),
                                plane: plane_field(port.plane),
                            });
                        }
                    }
                }
            }
        }
        plan.steering = steering;
        Ok(plan)
    }

    /// The plan of the default testbed ([`default_input`]).
    ///
    /// # Errors
    /// Never for the default input; typed as [`TestbedPlan::from_design`].
    pub fn default_plan() -> Result<TestbedPlan, PlanError> {
        TestbedPlan::from_design(&design(&default_input())?)
    }

    /// The plan of the default testbed in `planes` planes ([`default_input_planes`]).
    ///
    /// # Errors
    /// `planes` 0 or more than [`MAX_PLANES`]; typed as [`TestbedPlan::from_design`].
    pub fn default_plan_planes(planes: u32) -> Result<TestbedPlan, PlanError> {
        TestbedPlan::from_design(&design(&default_input_planes(planes))?)
    }

    /// Planes (1 for a one-plane plan).
    pub fn planes(&self) -> u32 {
        self.design.planes
    }

    /// Segments (in path order, before the destination host) that cross spine `j` to a
    /// host behind leaf `leaf`: `[spine SID, leaf SID]` or `[container spine:leaf]`
    /// (plane 0).
    pub fn segments(&self, mode: SteerMode, j: u16, leaf: u16) -> Vec<Ipv6Addr> {
        self.segments_in(0, mode, j, leaf)
    }

    /// [`TestbedPlan::segments`] in plane `plane`: its spine `j` and leaf `leaf`.
    pub fn segments_in(&self, plane: u16, mode: SteerMode, j: u16, leaf: u16) -> Vec<Ipv6Addr> {
        let at = |per_plane: u32, i: u16| {
            usize::try_from(per_plane).unwrap_or(usize::MAX) * usize::from(plane) + usize::from(i)
        };
        let (Some(s), Some(l)) = (
            self.spines.get(at(self.design.spines, j)),
            self.leaves.get(at(self.design.leaves, leaf)),
        ) else {
            return Vec::new();
        };
        match mode {
            SteerMode::Srh => vec![s.sid, l.sid],
            SteerMode::Usid => vec![usid_container(s.usid, l.usid)],
        }
    }

    /// The host with address `addr` (in any plane).
    pub fn host_by_addr(&self, addr: Ipv6Addr) -> Option<&Host> {
        self.hosts
            .iter()
            .find(|h| h.addr == addr || h.ports.iter().any(|p| p.addr == addr))
    }

    /// The plane of host address `addr` (0 for a plane-0 or unknown address).
    pub fn plane_of(&self, addr: Ipv6Addr) -> u16 {
        self.hosts
            .iter()
            .flat_map(|h| h.ports.iter())
            .find(|p| p.addr == addr)
            .map_or(0, |p| p.plane)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn the_default_design_is_two_hosts_two_leaves_four_spines() {
        let p = TestbedPlan::default_plan().unwrap();
        assert_eq!(
            (p.hosts.len(), p.leaves.len(), p.spines.len(), p.links.len()),
            (2, 2, 4, 8)
        );
        assert_eq!(p.design.servers_per_leaf, 1);
        assert_eq!(p.hosts[1].addr, a("fd00:6d72:63:11::2"));
        assert_eq!(p.hosts[1].gateway, a("fd00:6d72:63:11::1"));
        assert_eq!(
            (p.hosts[1].leaf, p.hosts[1].leaf_ifname.as_str()),
            (1, "h1")
        );
        assert_eq!(p.leaves[1].sid, a("fd00:6d72:63:e11::"));
        assert_eq!(p.spines[3].sid, a("fd00:6d72:63:e03::"));
        assert_eq!(p.spines[3].usid_prefix, a("fd00:75:e003::"));
        let l = &p.links[7];
        assert_eq!((l.leaf, l.spine, l.leaf_ifname.as_str()), (1, 3, "s3"));
        assert_eq!(l.leaf_addr, a("fd00:6d72:63:213::1"));
        assert_eq!(l.spine_addr, a("fd00:6d72:63:213::2"));
        // 2 hosts x 1 peer x 2 modes x 4 spines.
        assert_eq!(p.steering.len(), 16);
        let s = &p.steering[5];
        assert_eq!((s.host, s.mode, s.spine), (0, SteerMode::Usid, 1));
        assert_eq!((s.mark, s.table), (0x6d72_0011, 1017));
        assert_eq!(s.dst, a("fd00:6d72:63:11::2"));
        assert_eq!(s.segments, vec![a("fd00:75:e001:e101::")]);
        assert_eq!(
            p.segments(SteerMode::Srh, 2, 0),
            vec![a("fd00:6d72:63:e02::"), a("fd00:6d72:63:e10::")]
        );
    }

    #[test]
    fn several_servers_per_leaf_share_it() {
        let mut i = default_input();
        i.gpus = 16;
        i.gpus_per_server = 2;
        i.spine_radix = 4;
        let p = TestbedPlan::from_design(&design(&i).unwrap()).unwrap();
        // 8 servers of 2 NICs, 4 downlinks per leaf: 2 servers a leaf, 4 leaves.
        assert_eq!((p.hosts.len(), p.leaves.len()), (8, 4));
        let leaves: Vec<u16> = p.hosts.iter().map(|h| h.leaf).collect();
        assert_eq!(leaves, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(p.hosts[7].addr, a("fd00:6d72:63:17::2"));
    }

    #[test]
    fn designs_the_testbed_cannot_build_are_refused() {
        let mut i = default_input();
        i.planes = 2;
        i.nic_gbps = 200;
        i.leaf_port_gbps = 200;
        i.spine_port_gbps = 200;
        assert!(matches!(
            TestbedPlan::from_design(&design(&i).unwrap()),
            Err(PlanError::Unsupported(_))
        ));
        // The reference fabric: 1024 GPUs, 128 servers.
        assert_eq!(
            TestbedPlan::from_design(&design(&DesignInput::reference(1024)).unwrap()),
            Err(PlanError::TooMany {
                what: "hosts",
                n: 128
            })
        );
        let mut i = default_input();
        i.gpus = 4;
        assert!(matches!(
            TestbedPlan::from_design(&design(&i).unwrap()),
            Err(PlanError::Unsupported(_))
        ));
        let refused = |i: &DesignInput| {
            TestbedPlan::from_design(&design(i).unwrap())
                .unwrap_err()
                .to_string()
        };
        // 2 servers of 2 NICs on one 4-downlink leaf: the designer gives it no spine.
        let mut i = default_input();
        (i.gpus, i.gpus_per_server) = (4, 2);
        assert_eq!(
            refused(&i),
            "the testbed builds whole servers, at most 8 planes, one link per leaf-spine pair and at least 2 hosts: one leaf and no spines (nothing for SRv6 to steer)"
        );
        // The rail layout: 2 servers, 4 rail leaves, 2 spines of 4 ports.
        let mut i = default_input();
        (i.layout, i.spine_radix) = (Layout::Rail, 4);
        assert_eq!(
            refused(&i),
            "the testbed builds whole servers, at most 8 planes, one link per leaf-spine pair and at least 2 hosts: the rail layout (the testbed wires servers whole to one leaf)"
        );
    }

    #[test]
    fn nine_planes_are_refused() {
        assert_eq!(
            TestbedPlan::default_plan_planes(9).unwrap_err().to_string(),
            "the testbed builds whole servers, at most 8 planes, one link per leaf-spine pair and at least 2 hosts: 9 planes, 1 links per leaf-spine pair"
        );
        assert!(matches!(
            TestbedPlan::default_plan_planes(0),
            Err(PlanError::Design(_))
        ));
        assert_eq!(
            TestbedPlan::default_plan_planes(8).unwrap().spines.len(),
            32
        );
    }

    #[test]
    fn one_plane_json_has_no_plane_fields() {
        let p = TestbedPlan::default_plan().unwrap();
        assert_eq!(p, TestbedPlan::default_plan_planes(1).unwrap());
        let v = serde_json::to_value(&p).unwrap();
        let keys = |o: &serde_json::Value| {
            let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k.join(",")
        };
        assert_eq!(
            keys(&v["design"]),
            "gpus,gpus_per_server,leaves,servers,servers_per_leaf,spines"
        );
        assert_eq!(
            keys(&v["hosts"][0]),
            "addr,gateway,ifname,leaf,leaf_ifname,name"
        );
        assert_eq!(keys(&v["leaves"][0]), "name,sid,usid,usid_prefix");
        assert_eq!(
            keys(&v["links"][0]),
            "leaf,leaf_addr,leaf_ifname,spine,spine_addr,spine_ifname"
        );
        assert_eq!(
            keys(&v["steering"][0]),
            "dst,host,mark,mode,segments,spine,table"
        );
        // A one-plane plan's one port, for consumers that read every plan alike.
        let ports = p.hosts[1].ports_or_one();
        assert_eq!(ports.len(), 1);
        assert_eq!(
            (
                ports[0].plane,
                ports[0].ifname.as_str(),
                ports[0].leaf_name.as_str(),
                ports[0].leaf_ifname.as_str()
            ),
            (0, "l", "l1", "h1")
        );
        assert_eq!(ports[0].addr, a("fd00:6d72:63:11::2"));
        // And the JSON reads back as the plan.
        let back: TestbedPlan = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn two_planes_are_two_copies_of_the_default_fabric() {
        let p = TestbedPlan::default_plan_planes(2).unwrap();
        assert_eq!(p.planes(), 2);
        // Per plane 2 leaves, 4 spines, 8 links; 2 hosts with a port in each plane.
        assert_eq!(
            (p.hosts.len(), p.leaves.len(), p.spines.len(), p.links.len()),
            (2, 4, 8, 16)
        );
        assert_eq!(
            (p.design.leaves, p.design.spines, p.design.servers_per_leaf),
            (2, 4, 1)
        );
        let names: Vec<&str> = p.leaves.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["p0-l0", "p0-l1", "p1-l0", "p1-l1"]);
        let names: Vec<&str> = p.spines.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "p0-s0", "p0-s1", "p0-s2", "p0-s3", "p1-s0", "p1-s1", "p1-s2", "p1-s3"
            ]
        );
        let planes: Vec<Option<u16>> = p.spines.iter().map(|s| s.plane).collect();
        assert_eq!(planes, [0, 0, 0, 0, 1, 1, 1, 1].map(Some).to_vec());
        // Host 1: plane 0 has the one-plane addresses; plane 1 the same with the subnet's
        // first hex digit 1.
        let h = &p.hosts[1];
        assert_eq!(
            (h.name.as_str(), h.leaf, h.ifname.as_str()),
            ("h1", 1, "eth0")
        );
        assert_eq!(h.addr, a("fd00:6d72:63:11::2"));
        assert_eq!(h.ports.len(), 2);
        assert_eq!(h.ports_or_one(), h.ports);
        let want = [
            (
                0,
                "eth0",
                "fd00:6d72:63:11::2",
                "fd00:6d72:63:11::1",
                "p0-l1",
            ),
            (
                1,
                "eth1",
                "fd00:6d72:63:1011::2",
                "fd00:6d72:63:1011::1",
                "p1-l1",
            ),
        ];
        for (port, (plane, ifname, addr, gw, leaf)) in h.ports.iter().zip(want) {
            assert_eq!(
                (port.plane, port.ifname.as_str(), port.leaf_name.as_str()),
                (plane, ifname, leaf)
            );
            assert_eq!((port.addr, port.gateway), (a(addr), a(gw)));
            assert_eq!(port.leaf_ifname, "h1");
        }
        assert_eq!(p.hosts[0].ports[1].addr, a("fd00:6d72:63:1010::2"));
        // Plane 1's leaf 1 and spine 3, and the link between them.
        let l = &p.leaves[3];
        assert_eq!(
            (l.name.as_str(), l.plane, l.usid),
            ("p1-l1", Some(1), 0xe111)
        );
        assert_eq!(l.sid, a("fd00:6d72:63:1e11::"));
        assert_eq!(l.usid_prefix, a("fd00:75:e111::"));
        let s = &p.spines[7];
        assert_eq!(
            (s.name.as_str(), s.plane, s.usid),
            ("p1-s3", Some(1), 0xe013)
        );
        assert_eq!(s.sid, a("fd00:6d72:63:1e03::"));
        assert_eq!(p.spines[3].sid, a("fd00:6d72:63:e03::"));
        assert_eq!(p.spines[3].usid, 0xe003);
        let k = &p.links[15];
        assert_eq!(
            (
                k.plane,
                k.leaf,
                k.spine,
                k.leaf_ifname.as_str(),
                k.spine_ifname.as_str()
            ),
            (Some(1), 1, 3, "s3", "l1")
        );
        assert_eq!(k.leaf_addr, a("fd00:6d72:63:1213::1"));
        assert_eq!(k.spine_addr, a("fd00:6d72:63:1213::2"));
        assert_eq!(p.links[7].plane, Some(0));
        assert_eq!(p.links[7].leaf_addr, a("fd00:6d72:63:213::1"));
        // Every address of the plan is distinct.
        let mut all: Vec<Ipv6Addr> = p
            .hosts
            .iter()
            .flat_map(|h| h.ports.iter().flat_map(|x| [x.addr, x.gateway]))
            .chain(p.links.iter().flat_map(|k| [k.leaf_addr, k.spine_addr]))
            .chain(
                p.leaves
                    .iter()
                    .chain(&p.spines)
                    .flat_map(|s| [s.sid, s.usid_prefix]),
            )
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!((n, all.len()), (64, 64));
        // 2 hosts x 1 peer x 2 planes x 2 modes x 4 spines; the tables and marks are the
        // one-plane ones: the destination picks the plane.
        assert_eq!(p.steering.len(), 32);
        let st = &p.steering[13];
        assert_eq!(
            (st.host, st.plane, st.mode, st.spine, st.mark, st.table),
            (0, Some(1), SteerMode::Usid, 1, 0x6d72_0011, 1017)
        );
        assert_eq!(st.dst, a("fd00:6d72:63:1011::2"));
        assert_eq!(st.segments, vec![a("fd00:75:e011:e111::")]);
        let st = &p.steering[9];
        assert_eq!((st.plane, st.mode, st.spine), (Some(1), SteerMode::Srh, 1));
        assert_eq!(
            st.segments,
            vec![a("fd00:6d72:63:1e01::"), a("fd00:6d72:63:1e11::")]
        );
        assert_eq!(
            p.segments(SteerMode::Srh, 2, 0),
            vec![a("fd00:6d72:63:e02::"), a("fd00:6d72:63:e10::")]
        );
        assert_eq!(p.plane_of(a("fd00:6d72:63:1010::2")), 1);
        assert_eq!(
            p.host_by_addr(a("fd00:6d72:63:1011::2"))
                .map(|h| h.name.as_str()),
            Some("h1")
        );
        // The JSON: per host its ports, per switch and link its plane, and the planes.
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["design"]["planes"], 2);
        assert_eq!(v["hosts"][0]["ports"][1]["addr"], "fd00:6d72:63:1010::2");
        assert_eq!(v["hosts"][0]["ports"][1]["ifname"], "eth1");
        assert_eq!(v["hosts"][0]["ports"][1]["leaf_name"], "p1-l0");
        assert_eq!(v["spines"][4]["plane"], 1);
        assert_eq!(v["links"][8]["plane"], 1);
        assert_eq!(v["steering"][0]["plane"], 0);
        let back: TestbedPlan = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn three_planes_of_a_four_host_design() {
        // 4 servers of 4 NICs on 4 leaves and 4 spines, in each of 3 planes.
        let mut i = default_input_planes(3);
        (i.gpus, i.spine_radix) = (16, 4);
        let p = TestbedPlan::from_design(&design(&i).unwrap()).unwrap();
        assert_eq!(
            (p.hosts.len(), p.leaves.len(), p.spines.len(), p.links.len()),
            (4, 12, 12, 48)
        );
        let h3: Vec<(String, Ipv6Addr)> = p.hosts[3]
            .ports
            .iter()
            .map(|x| (x.leaf_name.clone(), x.addr))
            .collect();
        assert_eq!(
            h3,
            vec![
                ("p0-l3".into(), a("fd00:6d72:63:13::2")),
                ("p1-l3".into(), a("fd00:6d72:63:1013::2")),
                ("p2-l3".into(), a("fd00:6d72:63:2013::2")),
            ]
        );
        // 4 hosts x 3 peers x 3 planes x 2 modes x 4 spines.
        assert_eq!(p.steering.len(), 288);
        assert_eq!(p.links[47].leaf_addr, a("fd00:6d72:63:2233::1"));
    }
}
