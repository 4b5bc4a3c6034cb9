//! Topologies: nodes (hosts and switches), ports, links, addresses and shortest-path
//! next-hop tables. [`Topology::from_design`] builds the two-tier fabric of one plane of a
//! [`FabricDesign`] in its layout; [`Topology::spine_leaf`] the spine-leaf one from a
//! [`SpineLeafSpec`].
//!
//! Node ids: hosts `0..hosts`, then leaves, then spines. Host `h` is NIC `h` (GPU `h`) of
//! the plane and has one port, to leaf `h / downlinks_per_leaf` in the spine-leaf layout,
//! to leaf `group x rails + h mod gpus_per_server` in the rail layout
//! ([`FabricDesign::nic_place`]: NIC `k` of each server on its group's rail-`k` leaf).
//! A fabric of one leaf may have no spines (the designer gives it none). Leaf ports: its hosts' first, in host order, then
//! its uplinks, uplink `j` of leaf `l` to spine `(l x uplinks_per_leaf + j) % spines`
//! ([`UplinkWiring`]: `j % spines` when the uplinks are a multiple of the spines; otherwise
//! the uplinks rotate so that no spine carries more than `ceil(leaves x uplinks / spines)`
//! lanes). Spine ports: one per lane, leaf 0's first, then leaf 1's, in uplink order.
//! Addresses (IPv6): host `h` is
//! `fd00::1:0:h` (`HOST_PREFIX | h`), switch `s` (node id) is `fd00::2:0:s`; a switch with
//! node id `n` owns uSID `n + 1` under the `fd00:5::/32` block, a host uSID `h + 1`.

use serde::Serialize;

use super::design::FabricDesign;
use super::link::LinkSpec;
use super::wiring::UplinkWiring;

/// High bits of host addresses: `fd00::1:0:0/96`.
pub const HOST_PREFIX: u128 = (0xfd00u128 << 112) | (1u128 << 32);
/// High bits of switch addresses: `fd00::2:0:0/96`.
pub const SWITCH_PREFIX: u128 = (0xfd00u128 << 112) | (2u128 << 32);
/// The uSID locator block `fd00:5::/32`.
pub const USID_BLOCK: u128 = (0xfd00u128 << 112) | (5u128 << 96);
/// Length of the uSID block, bits.
pub const USID_BLOCK_BITS: u8 = 32;
const LOW32: u128 = 0xffff_ffff;

/// Role of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Role {
    /// An end host (one NIC port).
    Host,
    /// A leaf (top-of-rack) switch; the index among leaves.
    Leaf(u32),
    /// A spine switch; the index among spines.
    Spine(u32),
}

/// One port: where it leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PortSpec {
    /// Node at the other end.
    pub peer_node: u32,
    /// Port number at the other end.
    pub peer_port: u16,
    /// Link id (index into [`Topology::links`]).
    pub link: u32,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeSpec {
    /// Role.
    pub role: Role,
    /// Ports in order.
    pub ports: Vec<PortSpec>,
}

/// One bidirectional link between `(a, a_port)` and `(b, b_port)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LinkEnds {
    /// First node (the lower tier: host or leaf).
    pub a: u32,
    /// Its port.
    pub a_port: u16,
    /// Second node.
    pub b: u32,
    /// Its port.
    pub b_port: u16,
    /// Rate and delay.
    pub spec: LinkSpec,
}

/// Shape of a two-tier spine-leaf fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SpineLeafSpec {
    /// Hosts (NIC ports).
    pub hosts: u32,
    /// Leaves.
    pub leaves: u32,
    /// Spines.
    pub spines: u32,
    /// Host ports per leaf (the last leaf may hold fewer; host `h` is on leaf
    /// `h / hosts_per_leaf`).
    pub hosts_per_leaf: u32,
    /// Uplinks of each leaf (uplink `j` of leaf `l` goes to spine
    /// `(l x uplinks_per_leaf + j) % spines`, see [`UplinkWiring`]).
    pub uplinks_per_leaf: u32,
    /// Host-leaf links.
    pub host_link: LinkSpec,
    /// Leaf-spine links.
    pub fabric_link: LinkSpec,
}

impl SpineLeafSpec {
    /// The fabric of one plane of `design`, links of the lane speed and `propagation_ns`,
    /// as the spine-leaf layout wires it ([`Topology::from_design`] wires the design's own
    /// layout, rails included).
    pub fn from_design(design: &FabricDesign, propagation_ns: u64) -> SpineLeafSpec {
        let p = &design.plane;
        let link = LinkSpec::gbps(u64::from(p.lane_gbps), propagation_ns);
        SpineLeafSpec {
            hosts: p.nic_links,
            leaves: p.leaves,
            spines: p.spines,
            hosts_per_leaf: p.downlinks_per_leaf,
            uplinks_per_leaf: p.uplinks_per_leaf,
            host_link: link,
            fabric_link: link,
        }
    }

    /// Which spine each leaf uplink goes to.
    pub fn wiring(&self) -> UplinkWiring {
        UplinkWiring {
            leaves: self.leaves,
            uplinks_per_leaf: self.uplinks_per_leaf,
            spines: self.spines,
        }
    }
}

/// Why a topology cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopoError {
    /// A count that must be positive is 0.
    #[error("{0} must be > 0")]
    Zero(&'static str),
    /// The leaves cannot hold the hosts.
    #[error("{leaves} leaves x {per_leaf} ports cannot hold {hosts} hosts")]
    TooManyHosts {
        /// Hosts.
        hosts: u32,
        /// Leaves.
        leaves: u32,
        /// Host ports per leaf.
        per_leaf: u32,
    },
    /// More than 65535 ports on a node.
    #[error("a node would have more than 65535 ports")]
    TooManyPorts,
}

/// The counts of `s` that must be positive: hosts, leaves, hosts per leaf; spines and
/// uplinks per leaf too, except that one leaf may have neither.
fn check_shape(s: &SpineLeafSpec) -> Result<(), TopoError> {
    let no_spines = s.leaves == 1 && s.spines == 0 && s.uplinks_per_leaf == 0;
    for (name, v) in [
        ("hosts", s.hosts),
        ("leaves", s.leaves),
        ("spines", s.spines),
        ("hosts_per_leaf", s.hosts_per_leaf),
        ("uplinks_per_leaf", s.uplinks_per_leaf),
    ] {
        let may_be_zero = no_spines && matches!(name, "spines" | "uplinks_per_leaf");
        if v == 0 && !may_be_zero {
            return Err(TopoError::Zero(name));
        }
    }
    Ok(())
}

/// Nodes, links and next-hop tables.
#[derive(Clone, Debug, Serialize)]
pub struct Topology {
    /// Nodes by id.
    pub nodes: Vec<NodeSpec>,
    /// Links by id.
    pub links: Vec<LinkEnds>,
    /// Hosts (ids `0..hosts`).
    pub hosts: u32,
    /// Leaf node ids.
    pub leaves: Vec<u32>,
    /// Spine node ids.
    pub spines: Vec<u32>,
    /// `hop_sets[next_hop[(node - hosts) * nodes + target]]`: egress ports of switch
    /// `node` on shortest paths to `target` (port sets are shared: every host of a leaf has
    /// the same set). Hosts do not forward and have no row, which keeps the table small
    /// enough to stay in cache (48 switches x 1,072 targets x 4 bytes = 206 KB for the
    /// 1024-GPU designer fabric, instead of 4.6 MB with the hosts' rows).
    #[serde(skip)]
    next_hop: Vec<u32>,
    /// Distinct port sets.
    #[serde(skip)]
    hop_sets: Vec<Vec<u16>>,
}

impl Topology {
    /// A two-tier spine-leaf fabric: host `h` on leaf `h / hosts_per_leaf`. One leaf may
    /// have no spines (`spines` and `uplinks_per_leaf` both 0).
    ///
    /// Errors: [`TopoError::Zero`], [`TopoError::TooManyHosts`], [`TopoError::TooManyPorts`].
    pub fn spine_leaf(s: &SpineLeafSpec) -> Result<Topology, TopoError> {
        check_shape(s)?;
        if u64::from(s.leaves) * u64::from(s.hosts_per_leaf) < u64::from(s.hosts) {
            return Err(TopoError::TooManyHosts {
                hosts: s.hosts,
                leaves: s.leaves,
                per_leaf: s.hosts_per_leaf,
            });
        }
        Self::build(s, &|h| h / s.hosts_per_leaf)
    }

    /// One plane of `d` in its layout, links of the lane speed and `propagation_ns`:
    /// [`Topology::spine_leaf`] of [`SpineLeafSpec::from_design`] for the spine-leaf
    /// layout; for the rail layout the same leaves, spines and uplinks, host `h` on the
    /// leaf of [`FabricDesign::nic_place`] (rail `h mod gpus_per_server` of its server's
    /// group).
    ///
    /// Errors: as [`Topology::spine_leaf`]; [`TopoError::TooManyHosts`] when a leaf would
    /// take more hosts than the design's `downlinks_per_leaf`.
    pub fn from_design(d: &FabricDesign, propagation_ns: u64) -> Result<Topology, TopoError> {
        let s = SpineLeafSpec::from_design(d, propagation_ns);
        if d.rail.is_none() {
            return Self::spine_leaf(&s);
        }
        check_shape(&s)?;
        let too_many = TopoError::TooManyHosts {
            hosts: s.hosts,
            leaves: s.leaves,
            per_leaf: s.hosts_per_leaf,
        };
        let mut per_leaf = vec![0u32; s.leaves as usize];
        for h in 0..s.hosts {
            let n = d
                .nic_place(h)
                .and_then(|p| per_leaf.get_mut(p.leaf as usize))
                .ok_or_else(|| too_many.clone())?;
            *n += 1;
            if *n > s.hosts_per_leaf {
                return Err(too_many);
            }
        }
        // Every host has a place on a leaf (checked above).
        Self::build(&s, &|h| d.nic_place(h).map_or(0, |p| p.leaf))
    }

    /// Nodes, links and routes of `s`, host `h` on leaf `leaf_of_host(h)` (< leaves).
    fn build(s: &SpineLeafSpec, leaf_of_host: &dyn Fn(u32) -> u32) -> Result<Topology, TopoError> {
        let leaf0 = s.hosts;
        let spine0 = s.hosts + s.leaves;
        let mut nodes: Vec<NodeSpec> = (0..s.hosts)
            .map(|_| Role::Host)
            .chain((0..s.leaves).map(Role::Leaf))
            .chain((0..s.spines).map(Role::Spine))
            .map(|role| NodeSpec {
                role,
                ports: Vec::new(),
            })
            .collect();
        let mut links = Vec::new();
        let mut connect = |nodes: &mut Vec<NodeSpec>, a: u32, b: u32, spec: LinkSpec| {
            let id = links.len() as u32;
            let a_port = u16::try_from(nodes[a as usize].ports.len())
                .map_err(|_| TopoError::TooManyPorts)?;
            let b_port = u16::try_from(nodes[b as usize].ports.len())
                .map_err(|_| TopoError::TooManyPorts)?;
            nodes[a as usize].ports.push(PortSpec {
                peer_node: b,
                peer_port: b_port,
                link: id,
            });
            nodes[b as usize].ports.push(PortSpec {
                peer_node: a,
                peer_port: a_port,
                link: id,
            });
            links.push(LinkEnds {
                a,
                a_port,
                b,
                b_port,
                spec,
            });
            Ok::<(), TopoError>(())
        };
        for h in 0..s.hosts {
            connect(&mut nodes, h, leaf0 + leaf_of_host(h), s.host_link)?;
        }
        let wiring = s.wiring();
        for l in 0..s.leaves {
            for j in 0..s.uplinks_per_leaf {
                // Some: l < leaves, j < uplinks_per_leaf and spines > 0 (checked above).
                let spine = wiring.spine_of(l, j).ok_or(TopoError::Zero("spines"))?;
                connect(&mut nodes, leaf0 + l, spine0 + spine, s.fabric_link)?;
            }
        }
        let mut t = Topology {
            nodes,
            links,
            hosts: s.hosts,
            leaves: (leaf0..spine0).collect(),
            spines: (spine0..spine0 + s.spines).collect(),
            next_hop: Vec::new(),
            hop_sets: Vec::new(),
        };
        t.route(&[]);
        Ok(t)
    }

    /// Recomputes the next-hop tables over the links not in `down` (sorted link ids):
    /// BFS distances from every target, then every port whose peer is one hop closer.
    /// Hosts do not forward (they are never transit nodes) and get no table row.
    pub fn route(&mut self, down: &[u32]) {
        let n = self.nodes.len();
        let first_switch = self.hosts as usize;
        let mut sets: Vec<Vec<u16>> = vec![Vec::new()];
        let mut index: std::collections::HashMap<Vec<u16>, u32> =
            std::iter::once((Vec::new(), 0)).collect();
        let mut next = vec![0u32; n.saturating_sub(first_switch) * n];
        let mut dist = vec![u32::MAX; n];
        let mut frontier = Vec::new();
        for target in 0..n {
            dist.iter_mut().for_each(|d| *d = u32::MAX);
            dist[target] = 0;
            frontier.clear();
            frontier.push(target);
            let mut head = 0;
            while head < frontier.len() {
                let u = frontier[head];
                head += 1;
                // Hosts are leaves of the BFS tree unless they are the target.
                if u != target && self.nodes[u].role == Role::Host {
                    continue;
                }
                for p in &self.nodes[u].ports {
                    if down.binary_search(&p.link).is_ok() {
                        continue;
                    }
                    let v = p.peer_node as usize;
                    if dist[v] == u32::MAX {
                        dist[v] = dist[u] + 1;
                        frontier.push(v);
                    }
                }
            }
            for (u, node) in self.nodes.iter().enumerate().skip(first_switch) {
                if dist[u] == u32::MAX || dist[u] == 0 {
                    continue;
                }
                let set: Vec<u16> = node
                    .ports
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| {
                        down.binary_search(&p.link).is_err()
                            && dist[p.peer_node as usize] == dist[u] - 1
                    })
                    .map(|(i, _)| i as u16)
                    .collect();
                let id = *index.entry(set.clone()).or_insert_with(|| {
                    sets.push(set);
                    (sets.len() - 1) as u32
                });
                next[(u - first_switch) * n + target] = id;
            }
        }
        self.next_hop = next;
        self.hop_sets = sets;
    }

    /// Egress ports of switch `node` toward `target` (empty when unreachable, out of range,
    /// or `node` is a host: hosts send on their NIC and never forward).
    pub fn next_hops(&self, node: u32, target: u32) -> &[u16] {
        let n = self.nodes.len();
        if node as usize >= n || target as usize >= n || node < self.hosts {
            return &[];
        }
        self.next_hop
            .get((node - self.hosts) as usize * n + target as usize)
            .and_then(|&i| self.hop_sets.get(i as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// IPv6 address of `node` as a `u128`.
    pub fn addr(&self, node: u32) -> u128 {
        if node < self.hosts {
            HOST_PREFIX | u128::from(node)
        } else {
            SWITCH_PREFIX | u128::from(node)
        }
    }

    /// The node owning address `a` (host or switch address), if any.
    pub fn node_of_addr(&self, a: u128) -> Option<u32> {
        let low = (a & LOW32) as u32;
        let n = self.nodes.len() as u32;
        match a & !LOW32 {
            HOST_PREFIX if low < self.hosts => Some(low),
            SWITCH_PREFIX if low >= self.hosts && low < n => Some(low),
            _ => None,
        }
    }

    /// The uSID of `node` (`node + 1`), if it fits 16 bits.
    pub fn usid(&self, node: u32) -> Option<u16> {
        u16::try_from(node + 1).ok()
    }

    /// The node owning uSID `u`.
    pub fn node_of_usid(&self, u: u16) -> Option<u32> {
        let n = u32::from(u).checked_sub(1)?;
        (n < self.nodes.len() as u32).then_some(n)
    }

    /// The leaf of host `h`.
    pub fn leaf_of(&self, h: u32) -> Option<u32> {
        self.nodes
            .get(h as usize)
            .filter(|n| n.role == Role::Host)
            .and_then(|n| n.ports.first())
            .map(|p| p.peer_node)
    }

    /// Printable name: `host3`, `leaf1`, `spine0`.
    pub fn name(&self, node: u32) -> String {
        match self.nodes.get(node as usize).map(|n| n.role) {
            Some(Role::Host) => format!("host{node}"),
            Some(Role::Leaf(i)) => format!("leaf{i}"),
            Some(Role::Spine(i)) => format!("spine{i}"),
            None => format!("node{node}"),
        }
    }

    /// The node named `host3` / `leaf1` / `spine0`.
    pub fn node_by_name(&self, name: &str) -> Option<u32> {
        let (kind, idx) = if let Some(i) = name.strip_prefix("host") {
            (0, i)
        } else if let Some(i) = name.strip_prefix("leaf") {
            (1, i)
        } else if let Some(i) = name.strip_prefix("spine") {
            (2, i)
        } else {
            return None;
        };
        let i: u32 = idx.parse().ok()?;
        match kind {
            0 => (i < self.hosts).then_some(i),
            1 => self.leaves.get(i as usize).copied(),
            _ => self.spines.get(i as usize).copied(),
        }
    }

    /// Links between `a` and `b` (either order).
    pub fn links_between(&self, a: u32, b: u32) -> Vec<u32> {
        self.links
            .iter()
            .enumerate()
            .filter(|(_, l)| (l.a == a && l.b == b) || (l.a == b && l.b == a))
            .map(|(i, _)| i as u32)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Topology {
        Topology::spine_leaf(&SpineLeafSpec {
            hosts: 16,
            leaves: 4,
            spines: 4,
            hosts_per_leaf: 4,
            uplinks_per_leaf: 4,
            host_link: LinkSpec::gbps(100, 500),
            fabric_link: LinkSpec::gbps(100, 500),
        })
        .unwrap()
    }

    #[test]
    fn spine_leaf_wiring_and_next_hops() {
        let t = small();
        assert_eq!(t.nodes.len(), 24);
        assert_eq!(t.links.len(), 16 + 16);
        assert_eq!(t.leaf_of(5), Some(17));
        // Same leaf: one port down to the host.
        assert_eq!(t.next_hops(16, 2), &[2]);
        // Hosts have no row: they never forward.
        assert_eq!(t.next_hops(2, 5), &[] as &[u16]);
        // Cross leaf: the four uplinks.
        assert_eq!(t.next_hops(16, 5), &[4, 5, 6, 7]);
        // Spine 0 to host 5: its port toward leaf 1.
        assert_eq!(t.next_hops(20, 5), &[1]);
        // Leaf to a spine: the one uplink.
        assert_eq!(t.next_hops(16, 22), &[6]);
        assert_eq!(t.name(22), "spine2");
        assert_eq!(t.node_by_name("leaf3"), Some(19));
        assert_eq!(t.node_of_addr(t.addr(7)), Some(7));
        assert_eq!(t.node_of_addr(t.addr(21)), Some(21));
        assert_eq!(t.node_of_addr(HOST_PREFIX | 99), None);
    }

    #[test]
    fn routing_avoids_down_links() {
        let mut t = small();
        // leaf0 (16) - spine0 (20) is link 16.
        assert_eq!(t.links_between(16, 20), vec![16]);
        t.route(&[16]);
        assert_eq!(t.next_hops(16, 5), &[5, 6, 7]);
        // spine0 reaches leaf0's hosts only through another leaf and spine (4 hops).
        assert_eq!(t.next_hops(20, 0), &[1, 2, 3]);
        // Other leaves never send leaf0's traffic to spine0.
        assert_eq!(t.next_hops(17, 0), &[5, 6, 7]);
    }

    /// 3 leaves x 3 uplinks over 2 spines: lane k = 3l + j goes to spine k % 2, so leaf 1
    /// has two lanes to spine 1 and spine 0 takes 5 lanes, spine 1 4 (uplink j -> spine
    /// j % 2 gave every leaf two lanes to spine 0: 6 and 3).
    #[test]
    fn uneven_uplinks_rotate_over_the_spines() {
        let t = Topology::spine_leaf(&SpineLeafSpec {
            hosts: 6,
            leaves: 3,
            spines: 2,
            hosts_per_leaf: 2,
            uplinks_per_leaf: 3,
            host_link: LinkSpec::gbps(100, 500),
            fabric_link: LinkSpec::gbps(100, 500),
        })
        .unwrap();
        // Leaves are nodes 6, 7, 8; spines 9, 10. (leaf, leaf port, spine, spine port):
        let up: Vec<(u32, u16, u32, u16)> = t.links[6..]
            .iter()
            .map(|l| (l.a, l.a_port, l.b, l.b_port))
            .collect();
        assert_eq!(
            up,
            [
                (6, 2, 9, 0),
                (6, 3, 10, 0),
                (6, 4, 9, 1),
                (7, 2, 10, 1),
                (7, 3, 9, 2),
                (7, 4, 10, 2),
                (8, 2, 9, 3),
                (8, 3, 10, 3),
                (8, 4, 9, 4),
            ]
        );
        let mut pairs: Vec<(u32, u32)> = up.iter().map(|&(l, _, s, _)| (l, s)).collect();
        pairs.sort_unstable();
        assert_eq!(
            pairs,
            [
                (6, 9),
                (6, 9),
                (6, 10),
                (7, 9),
                (7, 10),
                (7, 10),
                (8, 9),
                (8, 9),
                (8, 10)
            ]
        );
        assert_eq!((t.nodes[9].ports.len(), t.nodes[10].ports.len()), (5, 4));
        // Leaf 1 reaches spine 0 on its one lane, spine 1 on two; spine 1 reaches leaf 1's
        // hosts on both.
        assert_eq!(t.next_hops(7, 9), &[3]);
        assert_eq!(t.next_hops(7, 10), &[2, 4]);
        assert_eq!(t.next_hops(10, 2), &[1, 2]);
        assert_eq!(t.next_hops(6, 2), &[2, 3, 4]);
    }

    /// 1024 GPUs on 32x400G switches at 2:1 and 4:1: every spine's lanes, counted on the
    /// built topology, are the wiring's and within the spine's 64; every leaf reaches every
    /// spine.
    #[test]
    fn oversubscribed_1024_spines_within_their_lanes() {
        for (o, lanes) in [
            ("2:1", vec![58, 58, 58, 58, 58, 58, 58, 57, 57]),
            ("4:1", vec![55; 6]),
        ] {
            let mut i = crate::sim::DesignInput::reference(1024);
            i.oversubscription = o.parse().unwrap();
            let d = crate::sim::design(&i).unwrap();
            let (p, w) = (d.plane, d.plane.wiring());
            let t = Topology::spine_leaf(&SpineLeafSpec::from_design(&d, 500)).unwrap();
            let got: Vec<usize> = t
                .spines
                .iter()
                .map(|&s| t.nodes[s as usize].ports.len())
                .collect();
            assert_eq!(got, lanes, "{o}");
            assert_eq!(
                got.iter().max().copied(),
                Some(p.downlinks_per_spine as usize)
            );
            assert!(got.iter().all(|&n| n <= p.spine_logical_ports as usize));
            for (s, &n) in got.iter().enumerate() {
                assert_eq!(w.spine_lanes(s as u32), n as u64);
            }
            for (l, &leaf) in t.leaves.iter().enumerate() {
                assert!(t.nodes[leaf as usize].ports.len() <= p.leaf_logical_ports as usize);
                for (s, &spine) in t.spines.iter().enumerate() {
                    let n = t.links_between(leaf, spine).len() as u64;
                    assert_eq!(n, w.leaf_spine_lanes(l as u32, s as u32), "{o} {l} {s}");
                    assert!(n >= 2, "{o} leaf {l} spine {s}");
                }
            }
        }
    }

    /// One leaf and no spines: the designer's 16-GPU fabric; hosts reach each other
    /// through the leaf alone. Spines without uplinks (or the reverse) stay an error.
    #[test]
    fn one_leaf_without_spines() {
        let d = crate::sim::design(&crate::sim::DesignInput::reference(16)).unwrap();
        let t = Topology::from_design(&d, 500).unwrap();
        assert_eq!((t.nodes.len(), t.links.len()), (17, 16));
        assert_eq!((t.leaves.as_slice(), t.spines.len()), (&[16][..], 0));
        assert_eq!(t.next_hops(16, 9), &[9]);
        assert_eq!(t.leaf_of(15), Some(16));
        let mut s = SpineLeafSpec::from_design(&d, 500);
        s.uplinks_per_leaf = 1;
        assert_eq!(
            Topology::spine_leaf(&s).unwrap_err(),
            TopoError::Zero("spines")
        );
        (s.uplinks_per_leaf, s.spines) = (0, 1);
        assert_eq!(
            Topology::spine_leaf(&s).unwrap_err(),
            TopoError::Zero("uplinks_per_leaf")
        );
        (s.leaves, s.spines, s.hosts_per_leaf) = (2, 0, 8);
        assert_eq!(
            Topology::spine_leaf(&s).unwrap_err(),
            TopoError::Zero("spines")
        );
    }

    /// The rail layout of 1024 GPUs: 4 groups of 32 servers, 8 rail leaves each; NIC k of
    /// server s on leaf (s / 32) x 8 + k, at leaf port s mod 32; same rail and group: one
    /// leaf; cross rail: over the 16 spines.
    #[test]
    fn rail_layout_wires_nic_k_to_rail_k() {
        let mut i = crate::sim::DesignInput::reference(1024);
        i.layout = crate::sim::Layout::Rail;
        let d = crate::sim::design(&i).unwrap();
        let t = Topology::from_design(&d, 500).unwrap();
        let (leaf0, spine0) = (1024, 1024 + 32);
        assert_eq!(
            (t.nodes.len(), t.links.len()),
            (1024 + 32 + 16, 1024 + 1024)
        );
        for h in 0..1024 {
            let (s, k) = (h / 8, h % 8);
            let leaf = leaf0 + (s / 32) * 8 + k;
            assert_eq!(t.leaf_of(h), Some(leaf), "host {h}");
            let port = t.nodes[h as usize].ports[0].peer_port;
            assert_eq!(u32::from(port), s % 32, "host {h}");
        }
        for &l in &t.leaves {
            assert_eq!(t.nodes[l as usize].ports.len(), 64);
        }
        for &s in &t.spines {
            assert_eq!(t.nodes[s as usize].ports.len(), 64);
        }
        // host0 (server 0 NIC 0) and host40 (server 5 NIC 0): rail 0 of group 0, leaf0,
        // port 5 to host40.
        assert_eq!(t.next_hops(leaf0, 40), &[5]);
        // host41 (server 5 NIC 1) is on leaf1: leaf0 sends over its 32 uplinks.
        assert_eq!(
            t.next_hops(leaf0, 41),
            (32..64).collect::<Vec<u16>>().as_slice()
        );
        // Spine 0 reaches leaf 1 over its lanes 2 and 3 (2 lanes per leaf-spine pair).
        assert_eq!(t.next_hops(spine0, 41), &[2, 3]);
        // The spine-leaf layout of the same GPUs: host41 on leaf1 by order (32 per leaf).
        let d = crate::sim::design(&crate::sim::DesignInput::reference(1024)).unwrap();
        let t = Topology::from_design(&d, 500).unwrap();
        assert_eq!(t.leaf_of(41), Some(leaf0 + 1));
        assert_eq!(t.leaf_of(31), Some(leaf0));
    }
}
