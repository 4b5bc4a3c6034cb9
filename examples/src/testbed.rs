//! The plan of the real-kernel SRv6 testbed (`testbed/mrc-testbed.sh`, issue 8): network
//! namespaces, veth links, addresses, SIDs and steering tables, derived from the
//! spine-leaf designer's output ([`mrc_fabric::sim::design`](mod@mrc_fabric::sim::design)). `mrc-sim testbed-plan
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
//! leaves and spines; one link per leaf-spine pair and one plane (the testbed refuses
//! other designs rather than build part of them).
//!
//! Steering by route ([`Steer`]): in each host, for each mode (`srh`, `usid`) and spine,
//! a routing table whose route to every other host adds that spine's segment list in the
//! kernel (`encap seg6 mode inline`), selected by the firewall mark of the EV socket
//! (`ip -6 rule add fwmark MARK lookup TABLE`).

use mrc_fabric::sim::{DesignInput, FabricDesign, Layout, Oversubscription, design};
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
}

/// A switch namespace (leaf or spine).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    /// Namespace suffix, `l<i>` or `s<j>`.
    pub name: String,
    /// Its End SID (`seg6local action End` on the `/64`).
    pub sid: Ipv6Addr,
    /// Its 16-bit uSID (`End` with NEXT-C-SID on the block's `/48` of it).
    pub usid: u16,
    /// The `/48` prefix its uSID owns, `fd00:75:<usid>::`.
    pub usid_prefix: Ipv6Addr,
}

/// A leaf-spine veth link.
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
    /// Leaves, by index.
    pub leaves: Vec<Switch>,
    /// Spines, by index.
    pub spines: Vec<Switch>,
    /// Every leaf-spine link.
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
    /// Leaves.
    pub leaves: u32,
    /// Spines.
    pub spines: u32,
    /// Servers on each leaf (the last may hold fewer).
    pub servers_per_leaf: u32,
}

/// Why a design cannot be a testbed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The designer refused the input.
    #[error("design: {0}")]
    Design(#[from] mrc_fabric::sim::DesignError),
    /// More than [`MAX_NODES_PER_TIER`] of a tier.
    #[error("{what}: {n} exceeds the testbed's {MAX_NODES_PER_TIER}")]
    TooMany {
        /// hosts, leaves or spines.
        what: &'static str,
        /// How many the design has.
        n: u32,
    },
    /// A design the testbed does not build (planes, parallel links, a server across
    /// leaves, fewer than 2 hosts).
    #[error(
        "the testbed builds one plane of whole servers, one link per leaf-spine pair and at least 2 hosts: {0}"
    )]
    Unsupported(String),
}

fn a48(s3: u16, s4: u16) -> Ipv6Addr {
    Ipv6Addr::new(PLAN_48[0], PLAN_48[1], PLAN_48[2], s3, 0, 0, 0, s4)
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
        if d.input.planes != 1 || p.links_per_leaf_spine != 1 {
            return Err(PlanError::Unsupported(format!(
                "{} planes, {} links per leaf-spine pair",
                d.input.planes, p.links_per_leaf_spine
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
        let hosts: Vec<Host> = (0..n(d.servers))
            .map(|h| Host {
                name: format!("h{h}"),
                leaf: h / n(per_leaf),
                ifname: "l".into(),
                addr: a48(0x10 + h, 2),
                gateway: a48(0x10 + h, 1),
                leaf_ifname: format!("h{h}"),
            })
            .collect();
        // Switch `i` of a tier: name `{prefix}{i}`, uSID `usid_base + i`, End SID in
        // subnet `usid_base / 16 + i` of the plan's /48 (leaves 0xe10i, spines 0xe00i).
        let switch = |prefix: char, usid_base: u16, i: u16| Switch {
            name: format!("{prefix}{i}"),
            sid: a48((usid_base >> 4) + i, 0),
            usid: usid_base + i,
            usid_prefix: usid_container(usid_base + i, 0),
        };
        let leaves: Vec<Switch> = (0..n(p.leaves)).map(|i| switch('l', 0xe100, i)).collect();
        let spines: Vec<Switch> = (0..n(p.spines)).map(|j| switch('s', 0xe000, j)).collect();
        let mut links = Vec::new();
        for i in 0..n(p.leaves) {
            for j in 0..n(p.spines) {
                links.push(Link {
                    leaf: i,
                    spine: j,
                    leaf_ifname: format!("s{j}"),
                    leaf_addr: a48(0x200 + 0x10 * i + j, 1),
                    spine_ifname: format!("l{i}"),
                    spine_addr: a48(0x200 + 0x10 * i + j, 2),
                });
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
            },
            mtu_bytes: MTU_BYTES,
            hosts,
            leaves,
            spines,
            links,
            steering: Vec::new(),
        };
        let mut steering = Vec::new();
        for src in &plan.hosts {
            let h = src.name[1..].parse::<u16>().unwrap_or(0);
            for dst in &plan.hosts {
                if dst.addr == src.addr {
                    continue;
                }
                for mode in SteerMode::ALL {
                    for j in 0..n(p.spines) {
                        steering.push(Steer {
                            host: h,
                            mode,
                            spine: j,
                            mark: mode.mark(j),
                            table: mode.table(j),
                            dst: dst.addr,
                            segments: plan.segments(mode, j, dst.leaf),
                        });
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

    /// Segments (in path order, before the destination host) that cross spine `j` to a
    /// host behind leaf `leaf`: `[spine SID, leaf SID]` or `[container spine:leaf]`.
    pub fn segments(&self, mode: SteerMode, j: u16, leaf: u16) -> Vec<Ipv6Addr> {
        let (Some(s), Some(l)) = (
            self.spines.get(usize::from(j)),
            self.leaves.get(usize::from(leaf)),
        ) else {
            return Vec::new();
        };
        match mode {
            SteerMode::Srh => vec![s.sid, l.sid],
            SteerMode::Usid => vec![usid_container(s.usid, l.usid)],
        }
    }

    /// The host with address `addr`.
    pub fn host_by_addr(&self, addr: Ipv6Addr) -> Option<&Host> {
        self.hosts.iter().find(|h| h.addr == addr)
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
            "the testbed builds one plane of whole servers, one link per leaf-spine pair and at least 2 hosts: one leaf and no spines (nothing for SRv6 to steer)"
        );
        // The rail layout: 2 servers, 4 rail leaves, 2 spines of 4 ports.
        let mut i = default_input();
        (i.layout, i.spine_radix) = (Layout::Rail, 4);
        assert_eq!(
            refused(&i),
            "the testbed builds one plane of whole servers, one link per leaf-spine pair and at least 2 hosts: the rail layout (the testbed wires servers whole to one leaf)"
        );
    }
}
