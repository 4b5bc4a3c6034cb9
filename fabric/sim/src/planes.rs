//! Planes (DESIGN.md section 5, "Planes and rails"): a host's NIC split into P ports, each
//! on its own, identical switch fabric. [`Topology::with_planes`] copies the switches and
//! links of a one-plane topology P times; port `q` of every host links to plane `q`'s copy
//! of the host's leaf, so the planes share no switch and no link (a host never forwards,
//! so no route crosses from one plane to another).
//!
//! Numbering, for a one-plane topology of `H` hosts, `S` switches and `E` links:
//!
//! ```text
//!   nodes:  hosts 0..H | plane 0's switches H..H+S | plane 1's H+S..H+2S | ...
//!   links:  plane 0's 0..E | plane 1's E..2E | ...        (plane 0 keeps the one-plane ids)
//!   host h: port q -> plane q's copy of h's leaf (the one-plane leaf's node id + q x S)
//!   roles:  Leaf(q x L + i), Spine(q x Sp + i) for leaf i / spine i of plane q
//! ```
//!
//! A switch's ports keep their one-plane numbers and order. Every host keeps one address
//! on all its ports (the simulator routes on the destination host, and each plane's
//! switches reach a host only through its port on that plane).

use super::topo::{LinkEnds, NodeSpec, PortSpec, Role, TopoError, Topology};

/// Most planes a topology may have: the transport's limit
/// ([`mrc_transport::path::MAX_PLANES`], the Port Status Update's 32-bit bitmap).
pub const MAX_PLANES: u32 = mrc_transport::path::MAX_PLANES as u32;

impl Topology {
    /// `planes` identical, disjoint copies of the switch fabric of `one`, whose hosts
    /// have one port each (see the module docs for the numbering). `planes = 1` gives
    /// `one` again.
    ///
    /// Errors: [`TopoError::Zero`] for 0 planes; [`TopoError::Planes`] for more than
    /// [`MAX_PLANES`] or a `one` whose hosts do not have exactly one port.
    pub fn with_planes(one: &Topology, planes: u32) -> Result<Topology, TopoError> {
        if planes == 0 {
            return Err(TopoError::Zero("planes"));
        }
        if planes > MAX_PLANES {
            return Err(TopoError::Planes("at most 32 planes"));
        }
        let hosts = one.hosts;
        if one.nodes[..hosts as usize]
            .iter()
            .any(|n| n.ports.len() != 1)
        {
            return Err(TopoError::Planes(
                "the hosts of the plane must have one port each",
            ));
        }
        let switches = one.nodes.len() as u32 - hosts;
        let (n_links, n_leaves, n_spines) = (
            one.links.len() as u32,
            one.leaves.len() as u32,
            one.spines.len() as u32,
        );
        // A node of the one-plane topology in plane q: hosts stay, switches move.
        let node_in = |n: u32, q: u32| if n < hosts { n } else { n + q * switches };
        let mut nodes: Vec<NodeSpec> = (0..hosts)
            .map(|_| NodeSpec {
                role: Role::Host,
                ports: Vec::with_capacity(planes as usize),
            })
            .collect();
        let mut links = Vec::with_capacity((n_links * planes) as usize);
        for q in 0..planes {
            // The host port on plane q is port q.
            let port_in = |n: u32, p: u16| if n < hosts { q as u16 } else { p };
            for l in &one.links {
                links.push(LinkEnds {
                    a: node_in(l.a, q),
                    a_port: port_in(l.a, l.a_port),
                    b: node_in(l.b, q),
                    b_port: port_in(l.b, l.b_port),
                    spec: l.spec,
                });
            }
            for (h, node) in one.nodes[..hosts as usize].iter().enumerate() {
                let p = node.ports[0];
                nodes[h].ports.push(PortSpec {
                    peer_node: node_in(p.peer_node, q),
                    peer_port: p.peer_port,
                    link: p.link + q * n_links,
                });
            }
            for node in &one.nodes[hosts as usize..] {
                let role = match node.role {
                    Role::Leaf(i) => Role::Leaf(q * n_leaves + i),
                    Role::Spine(i) => Role::Spine(q * n_spines + i),
                    Role::Host => Role::Host,
                };
                let ports = node
                    .ports
                    .iter()
                    .map(|p| PortSpec {
                        peer_node: node_in(p.peer_node, q),
                        peer_port: port_in(p.peer_node, p.peer_port),
                        link: p.link + q * n_links,
                    })
                    .collect();
                nodes.push(NodeSpec { role, ports });
            }
        }
        let copies = |ids: &[u32]| -> Vec<u32> {
            (0..planes)
                .flat_map(|q| ids.iter().map(move |&n| node_in(n, q)))
                .collect()
        };
        let (leaves, spines) = (copies(&one.leaves), copies(&one.spines));
        Ok(Topology::from_parts(nodes, links, hosts, leaves, spines))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::LinkSpec;
    use crate::topo::SpineLeafSpec;

    fn one() -> Topology {
        Topology::spine_leaf(&SpineLeafSpec {
            hosts: 4,
            leaves: 2,
            spines: 2,
            hosts_per_leaf: 2,
            uplinks_per_leaf: 2,
            host_link: LinkSpec::gbps(100, 500),
            fabric_link: LinkSpec::gbps(100, 500),
        })
        .unwrap()
    }

    /// Two planes of 4 hosts, 2 leaves, 2 spines: hosts 0-3, plane 0's switches 4-7
    /// (leaves 4, 5, spines 6, 7), plane 1's 8-11; 8 links per plane; every host's port
    /// q on plane q's leaf; routes stay in their plane.
    #[test]
    fn two_planes_are_disjoint_copies() {
        let t = Topology::with_planes(&one(), 2).unwrap();
        assert_eq!((t.nodes.len(), t.links.len(), t.planes()), (12, 16, 2));
        assert_eq!(
            (t.leaves.clone(), t.spines.clone()),
            (vec![4, 5, 8, 9], vec![6, 7, 10, 11])
        );
        assert_eq!(t.switches_per_plane(), 4);
        // Host 3: port 0 to leaf 5 (plane 0's leaf1), port 1 to leaf 9 (plane 1's).
        assert_eq!(
            (t.leaf_of_port(3, 0), t.leaf_of_port(3, 1)),
            (Some(5), Some(9))
        );
        assert_eq!(t.nodes[3].ports[1].link, 8 + 3);
        assert_eq!(
            (t.links[11].a, t.links[11].a_port, t.links[11].b),
            (3, 1, 9)
        );
        // Each port's far end names it back.
        for (n, node) in t.nodes.iter().enumerate() {
            for (i, p) in node.ports.iter().enumerate() {
                let back = t.nodes[p.peer_node as usize].ports[usize::from(p.peer_port)];
                assert_eq!(
                    (back.peer_node, back.peer_port, back.link),
                    (n as u32, i as u16, p.link)
                );
            }
        }
        assert_eq!([8, 9, 10, 11].map(|n| t.plane_of(n)), [Some(1); 4]);
        assert_eq!((t.plane_of(4), t.plane_of(3)), (Some(0), None));
        assert_eq!(t.plane_spines(1), &[10, 11]);
        assert_eq!(t.plane_switches(1), 8..12);
        // Plane 1's leaf0 reaches host 3 (on leaf1) through plane 1's spines only.
        assert_eq!(t.next_hops(8, 3), &[2, 3]);
        assert_eq!(t.nodes[8].ports[2].peer_node, 10);
        // Plane 0's spine 0 reaches host 3 on its port to plane 0's leaf1.
        assert_eq!(t.next_hops(6, 3), &[1]);
        // No switch reaches a switch of the other plane.
        assert_eq!(t.next_hops(4, 8), &[] as &[u16]);
        assert_eq!(
            (t.name(9), t.name(11), t.name(5), t.name(2)),
            (
                "p1.leaf1".into(),
                "p1.spine1".into(),
                "p0.leaf1".into(),
                "host2".into()
            )
        );
        assert_eq!(
            [
                "p1.leaf1",
                "p1.spine1",
                "leaf1",
                "p0.spine0",
                "p2.leaf0",
                "host2"
            ]
            .map(|n| t.node_by_name(n)),
            [Some(9), Some(11), Some(5), Some(6), None, Some(2)]
        );
    }

    /// One plane is the topology itself; 0 or 33 planes, or copying a topology that
    /// already has planes, are refused.
    #[test]
    fn one_plane_is_the_same_and_bad_counts_are_refused() {
        let o = one();
        let t = Topology::with_planes(&o, 1).unwrap();
        assert_eq!(t.nodes, o.nodes);
        assert_eq!(t.links, o.links);
        assert_eq!(
            (t.planes(), t.name(5), t.node_by_name("leaf1")),
            (1, "leaf1".into(), Some(5))
        );
        assert_eq!(
            Topology::with_planes(&o, 0).unwrap_err(),
            TopoError::Zero("planes")
        );
        assert!(matches!(
            Topology::with_planes(&o, 33),
            Err(TopoError::Planes(_))
        ));
        let two = Topology::with_planes(&o, 2).unwrap();
        assert!(matches!(
            Topology::with_planes(&two, 2),
            Err(TopoError::Planes(_))
        ));
    }
}
