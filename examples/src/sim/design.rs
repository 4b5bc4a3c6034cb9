//! Text of `mrc-sim design` and `mrc-sim trace`: what the designer counts, in lanes and in
//! physical switch ports.
//!
//! The designer ([`mrc_fabric::sim::design()`]) and the simulator count links in *lanes*:
//! a 200G NIC on 400G switches uses one 200G lane of a 400G port broken out 2 x 200G, so a
//! 32-port leaf has 64 lanes and the simulator numbers its ports 0..63. The tables here
//! show both counts, and trace hops name the physical port and lane as the switch does
//! ([`SwitchPort`]: simulator port 40 on 2-lane ports is `p21/1`).

use mrc_fabric::sim::net::TraceHop;
use mrc_fabric::sim::topo::Role;
use mrc_fabric::sim::{FabricDesign, SwitchPort, Topology};

use super::output::ResultTable;

/// The `fabric` table of `mrc-sim design` (totals over all planes; `--plot` draws the
/// fabric itself, [`design_figure`](super::figure::design_figure)).
pub fn fabric_table(d: &FabricDesign) -> ResultTable {
    let i = &d.input;
    let mut t = ResultTable::new(format!(
        "design: {} GPUs, {} per server, {}G NICs, {}x{}G leaves, {}x{}G spines, {}, {} plane{}",
        i.gpus,
        i.gpus_per_server,
        i.nic_gbps,
        i.leaf_radix,
        i.leaf_port_gbps,
        i.spine_radix,
        i.spine_port_gbps,
        i.oversubscription,
        i.planes,
        if i.planes == 1 { "" } else { "s" }
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
/// half port is a port whose lanes go to two kinds of peer).
pub fn switch_table(d: &FabricDesign) -> ResultTable {
    let p = &d.plane;
    let i = &d.input;
    let lane = p.lane_gbps;
    let mut t = ResultTable::new(format!(
        "per switch, one plane: links in {lane}G lanes and in physical ports (leaf {}G = {} x {lane}G, spine {}G = {} x {lane}G)",
        i.leaf_port_gbps, p.leaf_breakout, i.spine_port_gbps, p.spine_breakout
    ));
    let ports = |lanes: u32, breakout: u32| f64::from(lanes) / f64::from(breakout);
    let leaf_lanes = p.downlinks_per_leaf + p.uplinks_per_leaf;
    t.row(
        format!("leaf, {lane}G lanes"),
        &[
            ("down", f64::from(p.downlinks_per_leaf)),
            ("up", f64::from(p.uplinks_per_leaf)),
            ("per_leaf_spine_pair", f64::from(p.links_per_leaf_spine)),
            ("in_use", f64::from(leaf_lanes)),
            ("of", f64::from(p.leaf_logical_ports)),
        ],
    );
    t.row(
        format!("leaf, {}G ports", i.leaf_port_gbps),
        &[
            ("down", ports(p.downlinks_per_leaf, p.leaf_breakout)),
            ("up", ports(p.uplinks_per_leaf, p.leaf_breakout)),
            ("in_use", f64::from(leaf_lanes.div_ceil(p.leaf_breakout))),
            ("of", f64::from(i.leaf_radix)),
        ],
    );
    t.row(
        format!("spine, {lane}G lanes"),
        &[
            ("down", f64::from(p.downlinks_per_spine)),
            ("per_leaf_spine_pair", f64::from(p.links_per_leaf_spine)),
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

/// The whole text of `mrc-sim design`: both tables and what cables and optics count.
pub fn design_text(d: &FabricDesign) -> String {
    let p = &d.plane;
    let planes = d.input.planes;
    let per_plane = if planes == 1 {
        String::new()
    } else {
        format!(" per plane, x {planes} planes")
    };
    let mut s = format!(
        "{}{}cables: {} = ({} NIC links + {} leaf-spine links){per_plane}, one per {}G lane; optics: {} = 2 x cables (one per link end)\n",
        fabric_table(d).render(),
        switch_table(d).render(),
        d.cables,
        p.nic_links,
        p.uplinks,
        p.lane_gbps,
        d.optics
    );
    s += &rotation_text(d);
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

/// One hop as `trace` prints it: `leaf0:55 (p28/2)` for a switch (simulator port, then
/// front-panel port / lane), `host0:0` for the source NIC, the bare name at the end; with
/// an SRH, ` [SL=.. DA=..]` as the node receives it.
pub fn hop_text(topo: &Topology, d: &FabricDesign, hop: &TraceHop) -> String {
    let mut s = hop.node.clone();
    if let Some(p) = hop.port {
        s += &format!(":{p}");
        if let Some(sp) = topo
            .node_by_name(&hop.node)
            .and_then(|n| switch_port(topo, d, n, p))
        {
            s += &format!(" ({sp})");
        }
        if let Some(sl) = hop.segments_left {
            s += &format!(" [SL={sl} DA={}]", hop.dst_addr);
        }
    }
    s
}

/// A hop as JSON: the [`TraceHop`] fields plus `switch_port` (`{port, lane, breakout}` of
/// the egress port, `null` on hosts and at the end).
pub fn hop_json(topo: &Topology, d: &FabricDesign, hop: &TraceHop) -> serde_json::Value {
    let sp = hop.port.and_then(|p| {
        topo.node_by_name(&hop.node)
            .and_then(|n| switch_port(topo, d, n, p))
    });
    let mut v = serde_json::to_value(hop).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "switch_port".into(),
            serde_json::to_value(sp).unwrap_or_default(),
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use mrc_fabric::sim::{DesignInput, SpineLeafSpec, design};

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
            (16, (16.0, 16.0), (8.0, 8.0), 16.0, 8.0),
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
        let v = hop_json(&topo, &d, &hop("leaf1", Some(8), None));
        assert_eq!(v["port"], 8);
        assert_eq!(
            v["switch_port"],
            serde_json::json!({"port": 5, "lane": 1, "breakout": 2})
        );
        assert!(hop_json(&topo, &d, &hop("host0", Some(0), None))["switch_port"].is_null());
    }
}
