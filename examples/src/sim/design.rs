//! Text of `mrc-sim design` and `mrc-sim trace`: what the designer counts, in lanes and in
//! physical switch ports, per plane and in all, and (rail layout) per rail.
//!
//! The designer ([`mrc_fabric::sim::design()`]) and the simulator count links in *lanes*:
//! a 200G NIC on 400G switches uses one 200G lane of a 400G port broken out 2 x 200G, so a
//! 32-port leaf has 64 lanes and the simulator numbers its ports 0..63. The tables here
//! show both counts, and trace hops name the physical port and lane as the switch does
//! ([`SwitchPort`]: simulator port 40 on 2-lane ports is `p21/1`). A trace hop also says
//! what its node is in the design ([`trace_hop_text`]): a host's server, NIC, plane and
//! (rail layout) rail and rail group; a leaf's plane, rail and group; a spine's plane.

use mrc_fabric::sim::net::TraceHop;
use mrc_fabric::sim::topo::Role;
use mrc_fabric::sim::{FabricDesign, Layout, SwitchPort, Topology};

use super::output::ResultTable;

/// The `fabric` table of `mrc-sim design` (totals over all planes; `--plot` draws the
/// fabric itself, [`design_figure`](super::figure::design_figure)).
pub fn fabric_table(d: &FabricDesign) -> ResultTable {
    let i = &d.input;
    let mut t = ResultTable::new(format!(
        "design: {} GPUs, {} per server, {}G NICs, {}x{}G leaves, {}x{}G spines, {}, {} plane{}{}",
        i.gpus,
        i.gpus_per_server,
        i.nic_gbps,
        i.leaf_radix,
        i.leaf_port_gbps,
        i.spine_radix,
        i.spine_port_gbps,
        i.oversubscription,
        i.planes,
        if i.planes == 1 { "" } else { "s" },
        match i.layout {
            Layout::SpineLeaf => "",
            Layout::Rail => ", rail layout",
        }
    ));
    t.row(
        "fabric",
        &[
            ("servers", f64::from(d.servers)),
            ("nics", f64::from(d.nics)),
            ("leaves", f64::from(d.leaves)),
            ("spines", f64::from(d.spines)),
            ("lane_gbps", f64::from(d.plane.lane_gbps)),
            ("cables", f64::from(d.cables)),
            ("optics", f64::from(d.optics)),
            ("oversubscription", d.actual_oversubscription),
        ],
    );
    t
}

/// The per-switch table of `mrc-sim design`: the links of the fullest leaf and spine of
/// one plane, in lanes and in the physical ports that carry them (lanes / breakout; a
/// half port is a port whose lanes go to two kinds of peer). A fabric of one leaf has no
/// spine rows.
pub fn switch_table(d: &FabricDesign) -> ResultTable {
    let p = &d.plane;
    let i = &d.input;
    let lane = p.lane_gbps;
    let spines = p.spines > 0;
    let mut t = ResultTable::new(if spines {
        format!(
            "per switch, one plane: links in {lane}G lanes and in physical ports (leaf {}G = {} x {lane}G, spine {}G = {} x {lane}G)",
            i.leaf_port_gbps, p.leaf_breakout, i.spine_port_gbps, p.spine_breakout
        )
    } else {
        format!(
            "per switch, one plane: links in {lane}G lanes and in physical ports (leaf {}G = {} x {lane}G)",
            i.leaf_port_gbps, p.leaf_breakout
        )
    });
    let ports = |lanes: u32, breakout: u32| f64::from(lanes) / f64::from(breakout);
    let leaf_lanes = p.downlinks_per_leaf + p.uplinks_per_leaf;
    let pair = ("per_leaf_spine_pair", f64::from(p.links_per_leaf_spine));
    let mut leaf_row = vec![
        ("down", f64::from(p.downlinks_per_leaf)),
        ("up", f64::from(p.uplinks_per_leaf)),
    ];
    if spines {
        leaf_row.push(pair);
    }
    leaf_row.extend([
        ("in_use", f64::from(leaf_lanes)),
        ("of", f64::from(p.leaf_logical_ports)),
    ]);
    t.row(format!("leaf, {lane}G lanes"), &leaf_row);
    t.row(
        format!("leaf, {}G ports", i.leaf_port_gbps),
        &[
            ("down", ports(p.downlinks_per_leaf, p.leaf_breakout)),
            ("up", ports(p.uplinks_per_leaf, p.leaf_breakout)),
            ("in_use", f64::from(leaf_lanes.div_ceil(p.leaf_breakout))),
            ("of", f64::from(i.leaf_radix)),
        ],
    );
    if !spines {
        return t;
    }
    t.row(
        format!("spine, {lane}G lanes"),
        &[
            ("down", f64::from(p.downlinks_per_spine)),
            pair,
            ("in_use", f64::from(p.downlinks_per_spine)),
            ("of", f64::from(p.spine_logical_ports)),
        ],
    );
    t.row(
        format!("spine, {}G ports", i.spine_port_gbps),
        &[
            ("down", ports(p.downlinks_per_spine, p.spine_breakout)),
            (
                "in_use",
                f64::from(p.downlinks_per_spine.div_ceil(p.spine_breakout)),
            ),
            ("of", f64::from(i.spine_radix)),
        ],
    );
    t
}

/// The per-plane table of `mrc-sim design`: servers, NICs, NIC ports, leaves, spines,
/// links, cables and optics of one plane and of all planes (port `p` of every NIC is on
/// plane `p`; the planes are copies of one fabric, so a server or a NIC counts once, the
/// rest `planes` times).
pub fn planes_table(d: &FabricDesign) -> ResultTable {
    let planes = d.input.planes;
    let mut t = ResultTable::new(format!(
        "per plane and in all {}: port p of every NIC on plane p, each plane the same fabric",
        if planes == 1 {
            "(1 plane)".to_owned()
        } else {
            format!("{planes} planes")
        }
    ));
    for (label, c) in [("per plane", &d.per_plane), ("all planes", &d.total)] {
        t.row(
            label,
            &[
                ("servers", f64::from(c.servers)),
                ("nics", f64::from(c.nics)),
                ("nic_ports", f64::from(c.nic_ports)),
                ("leaves", f64::from(c.leaves)),
                ("spines", f64::from(c.spines)),
                ("links", f64::from(c.links)),
                ("cables", f64::from(c.cables)),
                ("optics", f64::from(c.optics)),
            ],
        );
    }
    t
}

/// The rail table of `mrc-sim design --layout rail` (`None` in the spine-leaf layout):
/// rails, rail groups, the servers of the fullest group and the most a group may hold,
/// leaves per group and per rail, NIC ports of the fullest rail, in one plane.
pub fn rail_table(d: &FabricDesign) -> Option<ResultTable> {
    let r = d.rail?;
    let mut t = ResultTable::new(
        "rails, one plane: NIC k of every server on rail k, one leaf per rail in each rail group; NICs of one rail and group share a leaf, other pairs cross a spine",
    );
    t.row(
        "rail layout",
        &[
            ("rails", f64::from(r.rails)),
            ("rail_groups", f64::from(r.groups)),
            ("servers_per_group", f64::from(r.servers_per_group)),
            ("group_capacity", f64::from(r.group_capacity)),
            ("leaves_per_group", f64::from(r.leaves_per_group)),
            ("leaves_per_rail", f64::from(r.leaves_per_rail)),
            ("nic_ports_per_rail", f64::from(r.nic_ports_per_rail)),
        ],
    );
    Some(t)
}

/// The whole text of `mrc-sim design`: the fabric and per-switch tables, what cables and
/// optics count, how uneven uplinks rotate; with more than one plane or the rail layout,
/// the per-plane table; with the rail layout, the rail table.
pub fn design_text(d: &FabricDesign) -> String {
    let p = &d.plane;
    let planes = d.input.planes;
    let per_plane = if planes == 1 {
        String::new()
    } else {
        format!(" per plane, x {planes} planes")
    };
    let links = if p.spines == 0 {
        format!(
            "{} NIC links (one leaf: no spines, no leaf-spine links){per_plane}",
            p.nic_links
        )
    } else {
        format!(
            "({} NIC links + {} leaf-spine links){per_plane}",
            p.nic_links, p.uplinks
        )
    };
    let mut s = format!(
        "{}{}cables: {} = {links}, one per {}G lane; optics: {} = 2 x cables (one per link end)\n",
        fabric_table(d).render(),
        switch_table(d).render(),
        d.cables,
        p.lane_gbps,
        d.optics
    );
    s += &rotation_text(d);
    if planes > 1 || d.rail.is_some() {
        s += &planes_table(d).render();
    }
    if let Some(t) = rail_table(d) {
        s += &t.render();
    }
    s
}

/// `spine 3 carries` or `spines 3-8 carry` (`first..first + n`, `n >= 1`).
fn spines_carry(first: u32, n: u32) -> String {
    match n {
        1 => format!("spine {first} carries"),
        _ => format!("spines {first}-{} carry", first + n - 1),
    }
}

/// `1 spine` or `n spines`.
fn spine_count(n: u32) -> String {
    match n {
        1 => "1 spine".into(),
        _ => format!("{n} spines"),
    }
}

/// How the uplinks spread when they are not a multiple of the spines (empty otherwise:
/// then uplink j of every leaf goes to spine j % spines, `per_leaf_spine_pair` lanes each):
/// the rotation rule of [`UplinkWiring`](mrc_fabric::sim::UplinkWiring), the lanes per
/// leaf-spine pair and per spine, ending in `\n`.
pub fn rotation_text(d: &FabricDesign) -> String {
    let p = &d.plane;
    let w = p.wiring();
    if p.spines == 0 || p.uplinks_per_leaf % p.spines == 0 {
        return String::new();
    }
    let fullest = w.fullest_spines();
    let spines = if fullest == p.spines {
        format!("every spine carries {} lanes", w.max_spine_lanes())
    } else {
        format!(
            "{} {} lanes, {} {}",
            spines_carry(0, fullest),
            w.max_spine_lanes(),
            spines_carry(fullest, p.spines - fullest),
            w.min_spine_lanes()
        )
    };
    let pairs = w.fullest_pairs_per_leaf();
    format!(
        "uplinks rotate: uplink j of leaf l goes to spine (l x {} + j) mod {}; each leaf has {} lanes to {} and {} to the other {}; {spines}, of {} each\n",
        p.uplinks_per_leaf,
        p.spines,
        w.max_leaf_spine_lanes(),
        spine_count(pairs),
        w.min_leaf_spine_lanes(),
        p.spines - pairs,
        p.spine_logical_ports
    )
}

/// What `NODE:PORT (pP/L)` in a trace means for the switches of `d`: one line per tier
/// (one for both when leaves and spines have the same ports), each ending in `\n`.
pub fn port_legend(d: &FabricDesign) -> String {
    let (i, p) = (&d.input, &d.plane);
    let tier = |name: &str, radix: u32, gbps: u32, breakout: u32| {
        let lanes = radix.saturating_mul(breakout);
        if breakout == 1 {
            format!(
                "  {name} egress ports: NODE:PORT (pP), PORT = simulator port (0..{}), P = {gbps}G front-panel port (1..{radix}) = PORT + 1\n",
                lanes.saturating_sub(1)
            )
        } else {
            format!(
                "  {name} egress ports: NODE:PORT (pP/L), PORT = simulator port (0..{}) = {}G lane, P = {gbps}G front-panel port (1..{radix}), L = its lane (1..{breakout}); PORT = (P - 1) x {breakout} + L - 1\n",
                lanes.saturating_sub(1),
                p.lane_gbps
            )
        }
    };
    if (i.leaf_radix, i.leaf_port_gbps) == (i.spine_radix, i.spine_port_gbps) {
        tier("switch", i.leaf_radix, i.leaf_port_gbps, p.leaf_breakout)
    } else {
        tier("leaf", i.leaf_radix, i.leaf_port_gbps, p.leaf_breakout)
            + &tier("spine", i.spine_radix, i.spine_port_gbps, p.spine_breakout)
    }
}

/// Simulator port `port` of `node` as the physical switch names it (`None` for hosts and
/// unknown nodes): the breakout of the node's tier in design `d`.
pub fn switch_port(topo: &Topology, d: &FabricDesign, node: u32, port: u16) -> Option<SwitchPort> {
    let breakout = match topo.nodes.get(node as usize)?.role {
        Role::Host => return None,
        Role::Leaf(_) => d.plane.leaf_breakout,
        Role::Spine(_) => d.plane.spine_breakout,
    };
    Some(SwitchPort::from_sim_port(u32::from(port), breakout))
}

/// One hop as the trace figure labels it: `leaf0:55 (p28/2)` for a switch (simulator
/// port, then front-panel port / lane), `host0:0` for the source NIC, the bare name at the
/// end; with an SRH, ` [SL=.. DA=..]` as the node receives it. [`trace_hop_text`] adds
/// what the node is in the design.
pub fn hop_text(topo: &Topology, d: &FabricDesign, hop: &TraceHop) -> String {
    hop_text_tagged(topo, d, hop, None)
}

/// [`hop_text`] with `tag` inside the parentheses: `leaf0:55 (p28/2; rail 0, group 0)`,
/// `host0:0 (server 0 NIC 0)`.
fn hop_text_tagged(topo: &Topology, d: &FabricDesign, hop: &TraceHop, tag: Option<&str>) -> String {
    let mut s = hop.node.clone();
    let sp = hop.port.and_then(|p| {
        topo.node_by_name(&hop.node)
            .and_then(|n| switch_port(topo, d, n, p))
    });
    if let Some(p) = hop.port {
        s += &format!(":{p}");
    }
    match (sp, tag) {
        (Some(sp), Some(t)) => s += &format!(" ({sp}; {t})"),
        (Some(sp), None) => s += &format!(" ({sp})"),
        (None, Some(t)) => s += &format!(" ({t})"),
        (None, None) => {}
    }
    if let (Some(_), Some(sl)) = (hop.port, hop.segments_left) {
        s += &format!(" [SL={sl} DA={}]", hop.dst_addr);
    }
    s
}

/// What a node of the traced plane is in design `d`: tier, server and NIC (hosts), leaf
/// and spine index, rail and rail group (rail layout), and the plane. The simulator runs
/// one plane; every plane is the same fabric, so `plane` only names which one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HopPlace {
    /// `host`, `leaf` or `spine`.
    pub tier: &'static str,
    /// The plane (0..planes).
    pub plane: u32,
    /// Server of a host (NIC port).
    pub server: Option<u32>,
    /// NIC of that server.
    pub nic: Option<u32>,
    /// Leaf (index among the plane's leaves): the leaf itself, or a host's leaf.
    pub leaf: Option<u32>,
    /// Spine (index among the plane's spines).
    pub spine: Option<u32>,
    /// Rail of a host or leaf (rail layout).
    pub rail: Option<u32>,
    /// Rail group of a host or leaf (rail layout).
    pub rail_group: Option<u32>,
}

/// The place of node `node` (simulator id) on plane `plane` of `d`; `None` for an
/// unknown node.
pub fn hop_place(topo: &Topology, d: &FabricDesign, plane: u32, node: u32) -> Option<HopPlace> {
    let none = HopPlace {
        tier: "host",
        plane,
        server: None,
        nic: None,
        leaf: None,
        spine: None,
        rail: None,
        rail_group: None,
    };
    Some(match topo.nodes.get(node as usize)?.role {
        Role::Host => {
            let p = d.nic_place(node)?;
            HopPlace {
                server: Some(p.server),
                nic: Some(p.nic),
                leaf: Some(p.leaf),
                rail: p.rail,
                rail_group: p.group,
                ..none
            }
        }
        Role::Leaf(l) => {
            let r = d.rail_leaf(l);
            HopPlace {
                tier: "leaf",
                leaf: Some(l),
                rail: r.map(|r| r.rail),
                rail_group: r.map(|r| r.group),
                ..none
            }
        }
        Role::Spine(s) => HopPlace {
            tier: "spine",
            spine: Some(s),
            ..none
        },
    })
}

/// The tag [`trace_hop_text`] prints for `place`: `server 5 NIC 1` for a host, then
/// `plane 3` with more than one plane, then `rail 1, group 0` in the rail layout (`None`
/// when there is nothing to say: a switch of a one-plane spine-leaf fabric).
fn place_tag(d: &FabricDesign, place: &HopPlace) -> Option<String> {
    let mut parts = Vec::new();
    if let (Some(server), Some(nic)) = (place.server, place.nic) {
        parts.push(format!("server {server} NIC {nic}"));
    }
    if d.input.planes > 1 {
        parts.push(format!("plane {}", place.plane));
    }
    if let (Some(rail), Some(group)) = (place.rail, place.rail_group) {
        parts.push(format!("rail {rail}, group {group}"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// One hop as `trace` prints it: [`hop_text`] with what the node is in the design on
/// plane `plane` ([`HopPlace`]) inside the parentheses:
/// `host41:0 (server 5 NIC 1, plane 3, rail 1, group 0)`,
/// `leaf1:8 (p5/1; plane 3, rail 1, group 0)`, `spine0:50 (p26/1; plane 3)`; in a
/// one-plane spine-leaf fabric only hosts get a tag (`host0:0 (server 0 NIC 0)`).
pub fn trace_hop_text(topo: &Topology, d: &FabricDesign, plane: u32, hop: &TraceHop) -> String {
    let tag = topo
        .node_by_name(&hop.node)
        .and_then(|n| hop_place(topo, d, plane, n))
        .and_then(|p| place_tag(d, &p));
    hop_text_tagged(topo, d, hop, tag.as_deref())
}

/// A hop as JSON: the [`TraceHop`] fields, `switch_port` (`{port, lane, breakout}` of
/// the egress port, `null` on hosts and at the end) and the [`HopPlace`] fields (`tier`,
/// `plane`, `server`, `nic`, `leaf`, `spine`, `rail`, `rail_group`; `null` where they do
/// not apply).
pub fn hop_json(
    topo: &Topology,
    d: &FabricDesign,
    plane: u32,
    hop: &TraceHop,
) -> serde_json::Value {
    let node = topo.node_by_name(&hop.node);
    let sp = hop
        .port
        .and_then(|p| node.and_then(|n| switch_port(topo, d, n, p)));
    let place = node.and_then(|n| hop_place(topo, d, plane, n));
    let mut v = serde_json::to_value(hop).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "switch_port".into(),
            serde_json::to_value(sp).unwrap_or_default(),
        );
        if let Some(serde_json::Value::Object(p)) =
            place.map(|p| serde_json::to_value(p).unwrap_or_default())
        {
            o.extend(p);
        }
    }
    v
}

/// How the two ends of a trace relate, as the trace's first line says: `same leaf` /
/// `cross leaf` (spine-leaf); `same rail and group` (one leaf), `same rail, cross group`
/// or `cross rail` (rail layout). `None` for hosts not in `d`.
pub fn trace_kind(d: &FabricDesign, src: u32, dst: u32) -> Option<&'static str> {
    let (a, b) = (d.nic_place(src)?, d.nic_place(dst)?);
    Some(match (a.rail, b.rail) {
        (Some(x), Some(y)) if x != y => "cross rail",
        (Some(_), Some(_)) if a.group != b.group => "same rail, cross group",
        (Some(_), Some(_)) => "same rail and group",
        _ if a.leaf == b.leaf => "same leaf",
        _ => "cross leaf",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mrc_fabric::sim::{DesignInput, Layout, SpineLeafSpec, design};

    #[test]
    fn design_text_of_the_issue_reference_1024() {
        let d = design(&DesignInput::reference(1024)).unwrap();
        assert_eq!(
            design_text(&d),
            "\
design: 1024 GPUs, 8 per server, 200G NICs, 32x400G leaves, 32x400G spines, 1:1, 1 plane
        servers  nics  leaves  spines  lane_gbps  cables  optics  oversubscription
fabric      128  1024      32      16        200    2048    4096                 1
per switch, one plane: links in 200G lanes and in physical ports (leaf 400G = 2 x 200G, spine 400G = 2 x 200G)
                   down  up  per_leaf_spine_pair  in_use  of
leaf, 200G lanes     32  32                    2      64  64
leaf, 400G ports     16  16                    -      32  32
spine, 200G lanes    64   -                    2      64  64
spine, 400G ports    32   -                    -      32  32
cables: 2048 = (1024 NIC links + 1024 leaf-spine links), one per 200G lane; optics: 4096 = 2 x cables (one per link end)
"
        );
    }

    #[test]
    fn switch_tables_of_the_issue_rows() {
        // (GPUs, leaf down/up lanes, leaf down/up ports, spine down lanes, spine ports in use)
        for (gpus, lanes, ports, spine_lanes, spine_ports) in [
            (64, (32.0, 32.0), (16.0, 16.0), 64.0, 32.0),
            (128, (32.0, 32.0), (16.0, 16.0), 64.0, 32.0),
            (1024, (32.0, 32.0), (16.0, 16.0), 64.0, 32.0),
        ] {
            let d = design(&DesignInput::reference(gpus)).unwrap();
            let t = switch_table(&d);
            let v = |row: usize, col: &str| {
                t.rows[row]
                    .values
                    .iter()
                    .find(|(k, _)| k == col)
                    .map(|(_, v)| *v)
            };
            assert_eq!((v(0, "down"), v(0, "up")), (Some(lanes.0), Some(lanes.1)));
            assert_eq!((v(1, "down"), v(1, "up")), (Some(ports.0), Some(ports.1)));
            assert_eq!(v(2, "down"), Some(spine_lanes));
            assert_eq!(v(3, "in_use"), Some(spine_ports));
        }
        assert!(!design_text(&design(&DesignInput::reference(1024)).unwrap()).contains("rotate"));
        // 2 planes of 100G lanes: 4 lanes per 400G port.
        let mut i = DesignInput::reference(1024);
        i.planes = 2;
        let text = design_text(&design(&i).unwrap());
        assert!(
            text.contains("leaf 400G = 4 x 100G, spine 400G = 4 x 100G"),
            "{text}"
        );
        assert!(text.contains(
            "cables: 4096 = (1024 NIC links + 1024 leaf-spine links) per plane, x 2 planes, one per 100G lane; optics: 8192"
        ), "{text}");
    }

    /// 1024 GPUs at 2:1: 20 uplinks per leaf over 9 spines rotate, 58 or 57 lanes per
    /// 64-lane spine (uplink j -> spine j % 9 needed 78 on spines 0 and 1).
    #[test]
    fn design_text_of_1024_at_2_to_1_shows_the_rotation() {
        let mut i = DesignInput::reference(1024);
        i.oversubscription = "2:1".parse().unwrap();
        assert_eq!(
            design_text(&design(&i).unwrap()),
            "\
design: 1024 GPUs, 8 per server, 200G NICs, 32x400G leaves, 32x400G spines, 2:1, 1 plane
        servers  nics  leaves  spines  lane_gbps  cables  optics  oversubscription
fabric      128  1024      26       9        200    1544    3088                 2
per switch, one plane: links in 200G lanes and in physical ports (leaf 400G = 2 x 200G, spine 400G = 2 x 200G)
                   down  up  per_leaf_spine_pair  in_use  of
leaf, 200G lanes     40  20                    3      60  64
leaf, 400G ports     20  10                    -      30  32
spine, 200G lanes    58   -                    3      58  64
spine, 400G ports    29   -                    -      29  32
cables: 1544 = (1024 NIC links + 520 leaf-spine links), one per 200G lane; optics: 3088 = 2 x cables (one per link end)
uplinks rotate: uplink j of leaf l goes to spine (l x 20 + j) mod 9; each leaf has 3 lanes to 2 spines and 2 to the other 7; spines 0-6 carry 58 lanes, spines 7-8 carry 57, of 64 each
"
        );
        i.oversubscription = "4:1".parse().unwrap();
        let d = design(&i).unwrap();
        assert_eq!(
            rotation_text(&d),
            "uplinks rotate: uplink j of leaf l goes to spine (l x 15 + j) mod 6; each leaf has 3 lanes to 3 spines and 2 to the other 3; every spine carries 55 lanes, of 64 each\n"
        );
        let t = switch_table(&d);
        assert_eq!(t.rows[2].values[0], ("down".to_string(), 55.0));
        assert_eq!(t.rows[3].values[1], ("in_use".to_string(), 28.0));
        // A hand-made plane of 3 leaves x 3 uplinks over 2 spines: one spine above the other.
        let mut d = design(&DesignInput::reference(64)).unwrap();
        (d.plane.leaves, d.plane.uplinks_per_leaf, d.plane.spines) = (3, 3, 2);
        assert_eq!(
            rotation_text(&d),
            "uplinks rotate: uplink j of leaf l goes to spine (l x 3 + j) mod 2; each leaf has 2 lanes to 1 spine and 1 to the other 1; spine 0 carries 5 lanes, spine 1 carries 4, of 64 each\n"
        );
    }

    #[test]
    fn trace_hops_name_the_physical_port_and_lane() {
        let d = design(&DesignInput::reference(64)).unwrap();
        let topo = Topology::spine_leaf(&SpineLeafSpec::from_design(&d, 500)).unwrap();
        let hop = |node: &str, port: Option<u16>, sl: Option<u8>| TraceHop {
            node: node.into(),
            port,
            dst_addr: "fd00::2:0:42".into(),
            segments_left: sl,
        };
        assert_eq!(hop_text(&topo, &d, &hop("host0", Some(0), None)), "host0:0");
        assert_eq!(
            hop_text(&topo, &d, &hop("leaf0", Some(55), None)),
            "leaf0:55 (p28/2)"
        );
        assert_eq!(
            hop_text(&topo, &d, &hop("spine0", Some(40), Some(1))),
            "spine0:40 (p21/1) [SL=1 DA=fd00::2:0:42]"
        );
        assert_eq!(hop_text(&topo, &d, &hop("host40", None, None)), "host40");
        assert_eq!(
            port_legend(&d),
            "  switch egress ports: NODE:PORT (pP/L), PORT = simulator port (0..63) = 200G lane, P = 400G front-panel port (1..32), L = its lane (1..2); PORT = (P - 1) x 2 + L - 1\n"
        );
        let mut i = DesignInput::reference(64);
        (i.nic_gbps, i.leaf_port_gbps, i.spine_radix) = (400, 400, 16);
        i.spine_port_gbps = 800;
        assert_eq!(
            port_legend(&design(&i).unwrap()),
            "  leaf egress ports: NODE:PORT (pP), PORT = simulator port (0..31), P = 400G front-panel port (1..32) = PORT + 1\n  \
             spine egress ports: NODE:PORT (pP/L), PORT = simulator port (0..31) = 400G lane, P = 800G front-panel port (1..16), L = its lane (1..2); PORT = (P - 1) x 2 + L - 1\n"
        );
        let v = hop_json(&topo, &d, 0, &hop("leaf1", Some(8), None));
        assert_eq!(v["port"], 8);
        assert_eq!(
            v["switch_port"],
            serde_json::json!({"port": 5, "lane": 1, "breakout": 2})
        );
        assert!(hop_json(&topo, &d, 0, &hop("host0", Some(0), None))["switch_port"].is_null());
    }

    /// `--gpus 16` put a spine over the one leaf (32 cables); one leaf has no spine rows,
    /// no uplinks, 16 cables.
    #[test]
    fn design_text_of_one_leaf_has_no_spines() {
        let d = design(&DesignInput::reference(16)).unwrap();
        assert_eq!(
            design_text(&d),
            "\
design: 16 GPUs, 8 per server, 200G NICs, 32x400G leaves, 32x400G spines, 1:1, 1 plane
        servers  nics  leaves  spines  lane_gbps  cables  optics  oversubscription
fabric        2    16       1       0        200      16      32                 1
per switch, one plane: links in 200G lanes and in physical ports (leaf 400G = 2 x 200G)
                  down  up  in_use  of
leaf, 200G lanes    16   0      16  64
leaf, 400G ports     8   0       8  32
cables: 16 = 16 NIC links (one leaf: no spines, no leaf-spine links), one per 200G lane; optics: 32 = 2 x cables (one per link end)
"
        );
    }

    /// The rail layout of 1024 GPUs in 8 planes (the arithmetic is in the designer's
    /// `layouts_and_planes_table`): 25G lanes, 512 per switch; one rail group of 128
    /// servers (a group may hold 256), 8 rail leaves of 128 down / 128 up per plane,
    /// 2 spines of 512 lanes, 64 lanes per leaf-spine pair.
    #[test]
    fn design_text_of_the_rail_layout_1024_at_8_planes() {
        let mut i = DesignInput::reference(1024);
        (i.planes, i.layout) = (8, Layout::Rail);
        assert_eq!(
            design_text(&design(&i).unwrap()),
            "\
design: 1024 GPUs, 8 per server, 200G NICs, 32x400G leaves, 32x400G spines, 1:1, 8 planes, rail layout
        servers  nics  leaves  spines  lane_gbps  cables  optics  oversubscription
fabric      128  1024      64      16         25   16384   32768                 1
per switch, one plane: links in 25G lanes and in physical ports (leaf 400G = 16 x 25G, spine 400G = 16 x 25G)
                   down   up  per_leaf_spine_pair  in_use   of
leaf, 25G lanes     128  128                   64     256  512
leaf, 400G ports      8    8                    -      16   32
spine, 25G lanes    512    -                   64     512  512
spine, 400G ports    32    -                    -      32   32
cables: 16384 = (1024 NIC links + 1024 leaf-spine links) per plane, x 8 planes, one per 25G lane; optics: 32768 = 2 x cables (one per link end)
per plane and in all 8 planes: port p of every NIC on plane p, each plane the same fabric
            servers  nics  nic_ports  leaves  spines  links  cables  optics
per plane       128  1024       1024       8       2   2048    2048    4096
all planes      128  1024       8192      64      16  16384   16384   32768
rails, one plane: NIC k of every server on rail k, one leaf per rail in each rail group; NICs of one rail and group share a leaf, other pairs cross a spine
             rails  rail_groups  servers_per_group  group_capacity  leaves_per_group  leaves_per_rail  nic_ports_per_rail
rail layout      8            1                128             256                 8                1                 128
"
        );
        // One plane, 4 groups of 32: 32 leaves, 4 per rail; the per-plane table too.
        i.planes = 1;
        let d = design(&i).unwrap();
        let t = rail_table(&d).unwrap();
        assert_eq!(
            t.rows[0].values,
            [
                ("rails".to_string(), 8.0),
                ("rail_groups".to_string(), 4.0),
                ("servers_per_group".to_string(), 32.0),
                ("group_capacity".to_string(), 32.0),
                ("leaves_per_group".to_string(), 8.0),
                ("leaves_per_rail".to_string(), 4.0),
                ("nic_ports_per_rail".to_string(), 128.0),
            ]
        );
        assert!(design_text(&d).contains(
            "per plane and in all (1 plane): port p of every NIC on plane p, each plane the same fabric\n"
        ));
        // The spine-leaf layout has no rail table, and one plane no per-plane table.
        let d = design(&DesignInput::reference(1024)).unwrap();
        assert!(rail_table(&d).is_none());
        assert!(!design_text(&d).contains("per plane and in all"));
    }

    /// Rail-layout trace hops name server, NIC, plane, rail and group; spine-leaf ones the
    /// server and NIC of the hosts, and the plane with more than one.
    #[test]
    fn trace_hops_name_nic_plane_rail_and_group() {
        let mut i = DesignInput::reference(1024);
        (i.planes, i.layout) = (2, Layout::Rail);
        let d = design(&i).unwrap();
        let topo = Topology::from_design(&d, 500).unwrap();
        let hop = |node: &str, port: Option<u16>| TraceHop {
            node: node.into(),
            port,
            dst_addr: "fd00::1:0:41".into(),
            segments_left: None,
        };
        // 2 groups of 64 servers, 16 leaves: host 41 (server 5 NIC 1) on leaf 1, host 520
        // (server 65 NIC 0) on leaf 8 (rail 0 of group 1).
        assert_eq!(
            trace_hop_text(&topo, &d, 1, &hop("host41", Some(0))),
            "host41:0 (server 5 NIC 1, plane 1, rail 1, group 0)"
        );
        assert_eq!(
            trace_hop_text(&topo, &d, 1, &hop("leaf9", Some(130))),
            "leaf9:130 (p33/3; plane 1, rail 1, group 1)"
        );
        assert_eq!(
            trace_hop_text(&topo, &d, 1, &hop("spine7", Some(3))),
            "spine7:3 (p1/4; plane 1)"
        );
        assert_eq!(
            trace_hop_text(&topo, &d, 0, &hop("host520", None)),
            "host520 (server 65 NIC 0, plane 0, rail 0, group 1)"
        );
        assert_eq!(trace_kind(&d, 0, 40), Some("same rail and group"));
        assert_eq!(trace_kind(&d, 0, 41), Some("cross rail"));
        assert_eq!(trace_kind(&d, 0, 520), Some("same rail, cross group"));
        assert_eq!(trace_kind(&d, 0, 1024), None);
        let v = hop_json(&topo, &d, 1, &hop("leaf9", Some(130)));
        assert_eq!(
            (
                &v["tier"],
                &v["plane"],
                &v["leaf"],
                &v["rail"],
                &v["rail_group"]
            ),
            (&"leaf".into(), &1.into(), &9.into(), &1.into(), &1.into())
        );
        assert!(v["spine"].is_null() && v["server"].is_null());
        assert_eq!(
            v["switch_port"],
            serde_json::json!({"port": 33, "lane": 3, "breakout": 4})
        );
        let v = hop_json(&topo, &d, 0, &hop("host41", Some(0)));
        assert_eq!(
            (&v["tier"], &v["server"], &v["nic"], &v["leaf"], &v["rail"]),
            (&"host".into(), &5.into(), &1.into(), &1.into(), &1.into())
        );
        // Spine-leaf, 1024 GPUs: 32 per leaf; one plane tags hosts only.
        let d = design(&DesignInput::reference(1024)).unwrap();
        let topo = Topology::from_design(&d, 500).unwrap();
        assert_eq!(
            trace_hop_text(&topo, &d, 0, &hop("host41", Some(0))),
            "host41:0 (server 5 NIC 1)"
        );
        assert_eq!(
            trace_hop_text(&topo, &d, 0, &hop("leaf1", Some(9))),
            "leaf1:9 (p5/2)"
        );
        assert_eq!(trace_kind(&d, 0, 31), Some("same leaf"));
        assert_eq!(trace_kind(&d, 0, 41), Some("cross leaf"));
        let v = hop_json(&topo, &d, 0, &hop("spine3", Some(1)));
        assert_eq!((&v["tier"], &v["spine"]), (&"spine".into(), &3.into()));
        assert!(v["rail"].is_null() && v["leaf"].is_null());
        // With an SRH the tag comes before the SRH state.
        let mut h = hop("spine3", Some(1));
        h.segments_left = Some(1);
        let mut i = DesignInput::reference(1024);
        i.planes = 2;
        let d = design(&i).unwrap();
        let topo = Topology::from_design(&d, 500).unwrap();
        assert_eq!(
            trace_hop_text(&topo, &d, 1, &h),
            "spine3:1 (p1/2; plane 1) [SL=1 DA=fd00::1:0:41]"
        );
    }
}
