//! Two-tier fabric designer: from the GPU count, the NICs and the switches to servers,
//! leaves, spines, links, cables and optics, in the spine-leaf or the rail-optimized
//! layout ([`Layout`]).
//!
//! Model (the usual breakout arithmetic of GPU back-end fabrics):
//! - one NIC per GPU; with `planes = P` each NIC is split into P ports of `nic_gbps / P`
//!   (the *lane* speed), port `p` of every NIC on plane `p`, each plane its own, identical
//!   fabric: every count below is per plane, the totals are P times it (servers and NICs
//!   excepted: every server and NIC has a port in every plane);
//! - a switch port of `port_gbps` breaks out into `port_gbps / lane` logical ports of lane
//!   speed (400G -> 2 x 200G); a speed that is not an integer multiple of the lane is a
//!   [`DesignError::SpeedNotMultiple`];
//! - a leaf has `leaf_radix x breakout` logical ports, split down:up by the oversubscription
//!   `down:up` (`down_max = floor(L x down / (down + up))`); a leaf of no downlink is a
//!   [`DesignError::LeafTooSmall`];
//! - how NICs go to leaves is the layout (below); it gives the leaves and the downlinks
//!   `down` of the fullest leaf;
//! - one leaf (every NIC port of the plane on it) needs no spine: no uplinks, no spines,
//!   and the actual oversubscription is 1 (one switch is non-blocking);
//! - otherwise uplinks per leaf = ceil(down x up / down), rounded up to a multiple of the
//!   spine count when the radix allows, so that every leaf reaches every spine over the
//!   same number of links; spines = ceil(leaves x uplinks / spine logical ports); more
//!   leaves than a spine has logical ports need a third tier
//!   ([`DesignError::TooManyLeaves`], [`DesignError::TooManyRailLeaves`]);
//! - when the uplinks are still not a multiple of the spines, they rotate over the spines
//!   ([`UplinkWiring`]: uplink `j` of leaf `l` to spine `(l x uplinks + j) mod spines`), so
//!   the fullest spine carries `ceil(leaves x uplinks / spines)` lanes, within its logical
//!   ports by the choice of the spine count ([`DesignError::UplinksExceedSpines`] otherwise);
//! - links = cables = NIC links + leaf-spine links (every logical link is one cable);
//!   optics are counted at both ends: `optics = 2 x (NICs + uplinks)` per plane.
//!
//! Layouts ([`Layout`]), `G` GPUs per server, `S = ceil(GPUs / G)` servers:
//! - **spine-leaf**: NICs fill leaves in order, whole servers kept on one leaf when a
//!   server's NICs fit one (`per_leaf = floor(down_max / G) x G`, else `down_max`);
//!   leaves = ceil(NICs / per_leaf), the fullest leaf has ceil(NICs / leaves) downlinks
//!   (rounded up to whole servers). Traffic between two NICs of one leaf stays on it.
//! - **rail** (rail-optimized, as NVIDIA's DGX SuperPOD scalable units wire them; the
//!   "rail-only" fabric of Wang et al., 2023, is these leaves without the spines): NIC `k`
//!   of every server is on *rail* `k`, `R = min(G, GPUs)` rails. Servers form *rail groups*; in a group, NIC `k` of every server goes to the
//!   group's leaf `k`, so a group has `R` leaves, one per rail, and one leaf per rail per
//!   group. A group holds at most `down_max` servers (one rail leaf's downlinks:
//!   `group_capacity`); groups = ceil(S / down_max), and the servers are spread evenly
//!   over the groups, `servers_per_group = ceil(S / groups)` (server `s` in group
//!   `s / servers_per_group`). Leaves = groups x R (leaf `g x R + k` is rail `k` of group
//!   `g`); leaves per rail = groups; the fullest leaf has `servers_per_group` downlinks.
//!   Traffic between NICs of the same rail and group stays on their leaf; cross-rail and
//!   cross-group traffic crosses a spine. With 64-lane leaves at 1:1 a group is 32
//!   servers on 8 rail leaves, a DGX SuperPOD scalable unit: 512, 1024 and 2048 GPUs give
//!   the leaves, spines and cables of NVIDIA's DGX SuperPOD B200 reference architecture
//!   ("Larger DGX SuperPOD component counts": 2, 4, 8 SUs; 16 SUs take a core tier, a
//!   [`DesignError::TooManyRailLeaves`] here).
//!
//! Example, the rail layout of 1024 GPUs, 8 per server, 200G NICs, 32 x 400G leaves and
//! spines, 1:1, 8 planes: lane 200 / 8 = 25G, breakout 400 / 25 = 16, a leaf and a spine
//! have 32 x 16 = 512 lanes, down_max = 512 x 1 / 2 = 256; 128 servers, 8 rails; a group
//! holds up to 256 servers, so 1 group of 128; 8 leaves per plane (1 per rail), each
//! with 128 downlinks and 128 uplinks (1:1); 8 x 128 = 1024 uplink lanes over
//! ceil(1024 / 512) = 2 spines (128 is a multiple of 2: 64 lanes per leaf-spine pair,
//! 512 per spine); per plane 1024 NIC links + 1024 uplinks = 2048 cables, 4096 optics;
//! over 8 planes 64 leaves, 16 spines, 8192 NIC ports, 16384 cables, 32768 optics.
//!
//! Every count of links and ports in [`PlaneDesign`] is in lanes (logical ports), not
//! physical switch ports: with 200G NICs on 400G switches, a leaf with 32 downlinks uses 16
//! physical ports for them. [`SwitchPort`] names a lane as the physical switch does: lane
//! (simulator port) `n` of a switch whose ports break out into `B` lanes is front-panel
//! port `n / B + 1`, lane `n % B + 1`.

use serde::Serialize;

use super::wiring::UplinkWiring;

/// Oversubscription of a leaf: downlink capacity : uplink capacity (`1:1`, `2:1`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Oversubscription {
    /// Downlink share (> 0).
    pub down: u32,
    /// Uplink share (> 0).
    pub up: u32,
}

impl Oversubscription {
    /// Non-blocking, 1:1.
    pub const NON_BLOCKING: Oversubscription = Oversubscription { down: 1, up: 1 };
}

impl std::str::FromStr for Oversubscription {
    type Err = DesignError;

    /// Parses `D:U` (e.g. `2:1`) or a bare `D` (meaning `D:1`).
    ///
    /// Errors: [`DesignError::BadOversubscription`] for anything else or a zero share.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || DesignError::BadOversubscription { text: s.to_owned() };
        let (d, u) = match s.split_once(':') {
            Some((d, u)) => (d.trim(), u.trim()),
            None => (s.trim(), "1"),
        };
        let down: u32 = d.parse().map_err(|_| bad())?;
        let up: u32 = u.parse().map_err(|_| bad())?;
        if down == 0 || up == 0 {
            return Err(bad());
        }
        Ok(Oversubscription { down, up })
    }
}

impl std::fmt::Display for Oversubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.down, self.up)
    }
}

/// How NICs are wired to leaves (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// NICs fill leaves in order, a server's NICs together on one leaf.
    #[default]
    SpineLeaf,
    /// Rail-optimized: NIC `k` of every server of a rail group on the group's leaf `k`.
    Rail,
}

impl std::str::FromStr for Layout {
    type Err = DesignError;

    /// Parses `spine-leaf` or `rail`.
    ///
    /// Errors: [`DesignError::BadLayout`] for anything else.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "spine-leaf" => Ok(Layout::SpineLeaf),
            "rail" => Ok(Layout::Rail),
            _ => Err(DesignError::BadLayout { text: s.to_owned() }),
        }
    }
}

impl std::fmt::Display for Layout {
    /// `spine-leaf` or `rail`, as [`FromStr`](std::str::FromStr) reads them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::SpineLeaf => "spine-leaf",
            Layout::Rail => "rail",
        })
    }
}

/// What the designer is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DesignInput {
    /// GPUs (one NIC each), > 0.
    pub gpus: u32,
    /// GPUs per server, > 0.
    pub gpus_per_server: u32,
    /// NIC speed, Gb/s.
    pub nic_gbps: u32,
    /// Leaf switch ports (physical).
    pub leaf_radix: u32,
    /// Leaf port speed, Gb/s.
    pub leaf_port_gbps: u32,
    /// Spine switch ports (physical).
    pub spine_radix: u32,
    /// Spine port speed, Gb/s.
    pub spine_port_gbps: u32,
    /// Leaf oversubscription.
    pub oversubscription: Oversubscription,
    /// Parallel planes each NIC is split into (1 = a single fabric).
    pub planes: u32,
    /// How NICs are wired to leaves.
    pub layout: Layout,
}

impl DesignInput {
    /// The reference case of the issue: 8 GPUs per server, 200G NICs, 32-port 400G leaves
    /// and spines, 1:1, one plane, the spine-leaf layout.
    pub fn reference(gpus: u32) -> DesignInput {
        DesignInput {
            gpus,
            gpus_per_server: 8,
            nic_gbps: 200,
            leaf_radix: 32,
            leaf_port_gbps: 400,
            spine_radix: 32,
            spine_port_gbps: 400,
            oversubscription: Oversubscription::NON_BLOCKING,
            planes: 1,
            layout: Layout::SpineLeaf,
        }
    }
}

/// Why no design exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DesignError {
    /// A count or speed that must be positive is 0.
    #[error("{field} must be > 0")]
    Zero {
        /// The input field.
        field: &'static str,
    },
    /// The NIC speed does not split into `planes` equal integer lanes.
    #[error("NIC speed {nic_gbps} Gb/s does not split into {planes} integer planes")]
    PlanesNotDivisor {
        /// NIC speed, Gb/s.
        nic_gbps: u32,
        /// Planes asked for.
        planes: u32,
    },
    /// A switch port speed is not an integer multiple of the lane (NIC / planes) speed.
    #[error(
        "{switch} port speed {port_gbps} Gb/s is not an integer multiple of the {lane_gbps} Gb/s NIC lane"
    )]
    SpeedNotMultiple {
        /// "leaf" or "spine".
        switch: &'static str,
        /// The port speed, Gb/s.
        port_gbps: u32,
        /// The lane speed (NIC speed / planes), Gb/s.
        lane_gbps: u32,
    },
    /// The leaf has no room for a downlink and an uplink at this oversubscription.
    #[error(
        "a leaf of {logical_ports} logical ports cannot hold downlinks and uplinks at {oversubscription}"
    )]
    LeafTooSmall {
        /// Logical ports of a leaf.
        logical_ports: u32,
        /// The oversubscription asked for.
        oversubscription: Oversubscription,
    },
    /// A count of the design does not fit 32 bits (absurd inputs such as 2^32 - 1 GPUs).
    #[error("{what} of this design do not fit in 32 bits: the inputs are out of range")]
    TooLarge {
        /// The count that overflowed.
        what: &'static str,
    },
    /// More leaves than a spine has logical ports: two tiers are not enough (spine-leaf
    /// layout).
    #[error(
        "{leaves} leaves exceed the {spine_logical_ports} logical ports of a spine (needs a third tier)"
    )]
    TooManyLeaves {
        /// Leaves needed.
        leaves: u32,
        /// Logical ports of a spine.
        spine_logical_ports: u32,
    },
    /// More rail leaves (rails x rail groups) than a spine has logical ports: two tiers
    /// are not enough (rail layout).
    #[error(
        "{rails} rails x {groups} rail groups = {leaves} leaves exceed the {spine_logical_ports} logical ports of a spine (needs a third tier)"
    )]
    TooManyRailLeaves {
        /// Rails (NICs per server).
        rails: u32,
        /// Rail groups.
        groups: u32,
        /// Leaves needed: rails x groups.
        leaves: u32,
        /// Logical ports of a spine.
        spine_logical_ports: u32,
    },
    /// The spines cannot take the leaves' uplinks: more uplink lanes than spines x spine
    /// lanes, so some spine would need more lanes than it has, however they are wired.
    #[error(
        "{uplink_lanes} leaf uplink lanes do not fit {spines} spines x {spine_logical_ports} lanes"
    )]
    UplinksExceedSpines {
        /// Uplink lanes of all leaves (leaves x uplinks per leaf).
        uplink_lanes: u64,
        /// Spines.
        spines: u32,
        /// Logical ports (lanes) of a spine.
        spine_logical_ports: u32,
    },
    /// Text that is not a [`Layout`].
    #[error("layout {text:?} is not spine-leaf or rail")]
    BadLayout {
        /// The text given.
        text: String,
    },
    /// Text that is not `D:U`.
    #[error("oversubscription {text:?} is not D:U with positive integers (e.g. 2:1)")]
    BadOversubscription {
        /// The text given.
        text: String,
    },
}

/// One plane (or the single fabric) of a design. All links run at the lane speed; every
/// count of links or ports is in lanes (logical ports of `lane_gbps`), a physical switch
/// port carrying `leaf_breakout` (`spine_breakout`) of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PlaneDesign {
    /// Link (lane) speed, Gb/s: NIC speed / planes.
    pub lane_gbps: u32,
    /// Lanes per physical leaf port: leaf port speed / lane speed (400G / 200G = 2).
    pub leaf_breakout: u32,
    /// Lanes per physical spine port.
    pub spine_breakout: u32,
    /// Logical ports (lanes) of a leaf (radix x breakout).
    pub leaf_logical_ports: u32,
    /// Logical ports (lanes) of a spine.
    pub spine_logical_ports: u32,
    /// Leaves of this plane.
    pub leaves: u32,
    /// Spines of this plane (0 when one leaf holds every NIC port).
    pub spines: u32,
    /// Downlinks (NIC ports, lanes) of the fullest leaf.
    pub downlinks_per_leaf: u32,
    /// Uplinks (lanes) of each leaf (0 when one leaf holds every NIC port).
    pub uplinks_per_leaf: u32,
    /// Most links (lanes) between one leaf and one spine: `ceil(uplinks_per_leaf / spines)`
    /// (exactly `uplinks_per_leaf / spines` for every pair when the uplinks are a multiple
    /// of the spines; otherwise each leaf has one lane fewer to some spines, see
    /// [`UplinkWiring`]); 0 without spines.
    pub links_per_leaf_spine: u32,
    /// Downlinks (lanes to leaves) of the fullest spine: `ceil(leaves x uplinks_per_leaf /
    /// spines)` (the uplinks rotate over the spines, [`UplinkWiring`]); at most
    /// `spine_logical_ports`; 0 without spines.
    pub downlinks_per_spine: u32,
    /// NIC ports in this plane (= GPUs).
    pub nic_links: u32,
    /// Leaf-spine links in this plane (leaves x uplinks_per_leaf).
    pub uplinks: u32,
}

impl PlaneDesign {
    /// Which spine each leaf uplink goes to (the rule [`Topology::spine_leaf`] wires).
    ///
    /// [`Topology::spine_leaf`]: super::Topology::spine_leaf
    pub fn wiring(&self) -> UplinkWiring {
        UplinkWiring {
            leaves: self.leaves,
            uplinks_per_leaf: self.uplinks_per_leaf,
            spines: self.spines,
        }
    }

    /// Checks that every spine has a lane for each link the wiring puts on it: the fullest
    /// spine's `ceil(leaves x uplinks_per_leaf / spines)` lanes are at most
    /// `spine_logical_ports` (the same as: uplink lanes <= spines x spine lanes). Every
    /// design from [`design()`] passes; a plane edited by hand may not.
    ///
    /// Errors: [`DesignError::UplinksExceedSpines`].
    pub fn check_spines(&self) -> Result<(), DesignError> {
        let w = self.wiring();
        if w.max_spine_lanes() > u64::from(self.spine_logical_ports) {
            return Err(DesignError::UplinksExceedSpines {
                uplink_lanes: w.total_lanes(),
                spines: self.spines,
                spine_logical_ports: self.spine_logical_ports,
            });
        }
        Ok(())
    }
}

/// Counts of one plane, or of all planes together (a server and a NIC have a port in
/// every plane, so they count once; everything else is per plane times the planes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FabricCounts {
    /// Servers: ceil(GPUs / GPUs per server).
    pub servers: u32,
    /// NICs (= GPUs).
    pub nics: u32,
    /// NIC ports: one per NIC in a plane, NICs x planes in all.
    pub nic_ports: u32,
    /// Leaf switches.
    pub leaves: u32,
    /// Spine switches.
    pub spines: u32,
    /// Links, in lanes: NIC links + leaf-spine links.
    pub links: u32,
    /// Cables: one per link.
    pub cables: u32,
    /// Optics (transceivers), both ends of every cable: 2 x cables.
    pub optics: u32,
}

/// The rails of a rail-layout design, in one plane (every plane has the same; see the
/// module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RailDesign {
    /// Rails: NICs per server, `min(gpus_per_server, gpus)`; rail `k` is NIC `k` of every
    /// server.
    pub rails: u32,
    /// Most servers a rail group may hold: the downlinks of one rail leaf (`down_max`,
    /// one NIC port per server).
    pub group_capacity: u32,
    /// Rail groups: ceil(servers / group_capacity).
    pub groups: u32,
    /// Servers of the fullest rail group: ceil(servers / groups); server `s` is in group
    /// `s / servers_per_group`. Also the downlinks of the fullest leaf.
    pub servers_per_group: u32,
    /// Leaves of a rail group: one per rail (= rails).
    pub leaves_per_group: u32,
    /// Leaves of a rail in one plane: one per rail group (= groups).
    pub leaves_per_rail: u32,
    /// NIC ports of the fullest rail in one plane: one per server (rail 0 has every
    /// server; a rail past the NICs of a last, partial server has one fewer).
    pub nic_ports_per_rail: u32,
}

/// Where one NIC port sits: the simulator's host `h` is NIC `h` (= GPU `h`) on the plane
/// the simulator runs; every plane has the same places.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NicPlace {
    /// Server: `h / gpus_per_server`.
    pub server: u32,
    /// NIC of that server: `h mod gpus_per_server`.
    pub nic: u32,
    /// Leaf (index among the plane's leaves) the port is cabled to.
    pub leaf: u32,
    /// Rail (= `nic`) in the rail layout, `None` in the spine-leaf layout.
    pub rail: Option<u32>,
    /// Rail group (`server / servers_per_group`) in the rail layout, `None` otherwise.
    pub group: Option<u32>,
}

/// The rail and rail group of a leaf in the rail layout: leaf `g x rails + k` is rail `k`
/// of group `g`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RailLeaf {
    /// Rail.
    pub rail: u32,
    /// Rail group.
    pub group: u32,
}

/// The designer's answer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FabricDesign {
    /// The input.
    pub input: DesignInput,
    /// Servers: ceil(GPUs / GPUs per server).
    pub servers: u32,
    /// NICs (= GPUs).
    pub nics: u32,
    /// One plane; every plane is identical.
    pub plane: PlaneDesign,
    /// Leaves over all planes.
    pub leaves: u32,
    /// Spines over all planes.
    pub spines: u32,
    /// Cables over all planes: planes x (NIC links + uplinks).
    pub cables: u32,
    /// Optics (transceivers) over all planes, both ends: 2 x cables.
    pub optics: u32,
    /// Actual oversubscription of the fullest leaf: downlinks / uplinks (1 with one leaf
    /// and no uplinks: one switch is non-blocking).
    pub actual_oversubscription: f64,
    /// Counts of one plane.
    pub per_plane: FabricCounts,
    /// Counts over all planes (`leaves`, `spines`, `cables`, `optics` are the fields
    /// above).
    pub total: FabricCounts,
    /// The rails, in the rail layout (`None` in the spine-leaf layout).
    pub rail: Option<RailDesign>,
}

impl FabricDesign {
    /// Where NIC `nic` (0..GPUs; the simulator's host `nic`) is cabled, in every plane:
    /// its server and index there, its leaf, and in the rail layout its rail and group.
    /// `None` when `nic >= GPUs`.
    pub fn nic_place(&self, nic: u32) -> Option<NicPlace> {
        if nic >= self.nics {
            return None;
        }
        let gps = self.input.gpus_per_server;
        let (server, k) = (nic / gps, nic % gps);
        Some(match self.rail {
            None => NicPlace {
                server,
                nic: k,
                leaf: nic / self.plane.downlinks_per_leaf,
                rail: None,
                group: None,
            },
            Some(r) => {
                let group = server / r.servers_per_group;
                NicPlace {
                    server,
                    nic: k,
                    leaf: group * r.rails + k,
                    rail: Some(k),
                    group: Some(group),
                }
            }
        })
    }

    /// The rail and group of leaf `leaf` (index among a plane's leaves) in the rail
    /// layout; `None` in the spine-leaf layout or when `leaf >= leaves`.
    pub fn rail_leaf(&self, leaf: u32) -> Option<RailLeaf> {
        let r = self.rail?;
        (leaf < self.plane.leaves).then_some(RailLeaf {
            rail: leaf % r.rails,
            group: leaf / r.rails,
        })
    }
}

/// A switch lane (simulator port) as the physical switch names it: front-panel port and
/// breakout lane, both counted from 1. Lane `n` of a switch whose ports carry `breakout`
/// lanes each is port `n / breakout + 1`, lane `n % breakout + 1`: with 400G ports split
/// 2 x 200G, simulator port 40 is port 21 lane 1, port 41 is port 21 lane 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SwitchPort {
    /// Front-panel port, 1..=radix.
    pub port: u32,
    /// Lane of that port, 1..=breakout.
    pub lane: u32,
    /// Lanes per port (1: no breakout).
    pub breakout: u32,
}

impl SwitchPort {
    /// The physical port and lane of simulator port `sim_port` on a switch with `breakout`
    /// lanes per port (0 is taken as 1).
    pub fn from_sim_port(sim_port: u32, breakout: u32) -> SwitchPort {
        let breakout = breakout.max(1);
        SwitchPort {
            port: sim_port / breakout + 1,
            lane: sim_port % breakout + 1,
            breakout,
        }
    }

    /// The simulator port (lane index from 0) this names.
    pub fn sim_port(&self) -> u32 {
        (self.port - 1) * self.breakout + (self.lane - 1)
    }
}

impl std::fmt::Display for SwitchPort {
    /// `pP/L` (port P, lane L), or `pP` without breakout.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.breakout == 1 {
            write!(f, "p{}", self.port)
        } else {
            write!(f, "p{}/{}", self.port, self.lane)
        }
    }
}

fn nonzero(field: &'static str, v: u32) -> Result<u32, DesignError> {
    if v == 0 {
        Err(DesignError::Zero { field })
    } else {
        Ok(v)
    }
}

/// `a * b`, or [`DesignError::TooLarge`] naming `what`.
fn mul(a: u32, b: u32, what: &'static str) -> Result<u32, DesignError> {
    a.checked_mul(b).ok_or(DesignError::TooLarge { what })
}

/// `a + b`, or [`DesignError::TooLarge`] naming `what`.
fn add(a: u32, b: u32, what: &'static str) -> Result<u32, DesignError> {
    a.checked_add(b).ok_or(DesignError::TooLarge { what })
}

fn breakout(switch: &'static str, port_gbps: u32, lane_gbps: u32) -> Result<u32, DesignError> {
    if port_gbps % lane_gbps != 0 {
        return Err(DesignError::SpeedNotMultiple {
            switch,
            port_gbps,
            lane_gbps,
        });
    }
    Ok(port_gbps / lane_gbps)
}

/// How the NICs of one plane sit on its leaves: leaves, downlinks of the fullest leaf,
/// and the rails in the rail layout.
struct LeafPlan {
    leaves: u32,
    down: u32,
    rail: Option<RailDesign>,
}

/// The spine-leaf layout: NICs fill leaves in order, whole servers on one leaf when a
/// server fits (`down_max > 0`).
fn spine_leaf_leaves(gpus: u32, gps: u32, down_max: u32) -> LeafPlan {
    let per_leaf = if gps <= down_max {
        down_max / gps * gps
    } else {
        down_max
    };
    let leaves = gpus.div_ceil(per_leaf);
    let down = gpus.div_ceil(leaves);
    let down = if gps <= down_max {
        down.div_ceil(gps) * gps
    } else {
        down
    }
    .min(per_leaf);
    LeafPlan {
        leaves,
        down,
        rail: None,
    }
}

/// The rail layout: `min(gps, gpus)` rails, groups of at most `down_max` servers spread
/// evenly, one leaf per rail per group (`down_max > 0`, `spine_ports` to name the error).
fn rail_leaves(
    gpus: u32,
    gps: u32,
    down_max: u32,
    spine_ports: u32,
) -> Result<LeafPlan, DesignError> {
    let servers = gpus.div_ceil(gps);
    let rails = gps.min(gpus);
    let groups = servers.div_ceil(down_max);
    let servers_per_group = servers.div_ceil(groups);
    let leaves = rails
        .checked_mul(groups)
        .filter(|&l| l <= spine_ports)
        .ok_or(DesignError::TooManyRailLeaves {
            rails,
            groups,
            leaves: rails.saturating_mul(groups),
            spine_logical_ports: spine_ports,
        })?;
    Ok(LeafPlan {
        leaves,
        down: servers_per_group,
        rail: Some(RailDesign {
            rails,
            group_capacity: down_max,
            groups,
            servers_per_group,
            leaves_per_group: rails,
            leaves_per_rail: groups,
            nic_ports_per_rail: servers,
        }),
    })
}

/// Designs the fabric for `input` (see the module docs for the model).
///
/// Errors: [`DesignError::Zero`], [`DesignError::PlanesNotDivisor`],
/// [`DesignError::SpeedNotMultiple`], [`DesignError::LeafTooSmall`],
/// [`DesignError::TooManyLeaves`] (spine-leaf), [`DesignError::TooManyRailLeaves`]
/// (rail), [`DesignError::TooLarge`], [`DesignError::UplinksExceedSpines`] (not reached:
/// the spine count is chosen to fit).
pub fn design(input: &DesignInput) -> Result<FabricDesign, DesignError> {
    let gpus = nonzero("gpus", input.gpus)?;
    let gps = nonzero("gpus_per_server", input.gpus_per_server)?;
    let nic = nonzero("nic_gbps", input.nic_gbps)?;
    nonzero("leaf_radix", input.leaf_radix)?;
    nonzero("spine_radix", input.spine_radix)?;
    nonzero("leaf_port_gbps", input.leaf_port_gbps)?;
    nonzero("spine_port_gbps", input.spine_port_gbps)?;
    let planes = nonzero("planes", input.planes)?;
    nonzero("oversubscription.down", input.oversubscription.down)?;
    nonzero("oversubscription.up", input.oversubscription.up)?;
    if nic % planes != 0 {
        return Err(DesignError::PlanesNotDivisor {
            nic_gbps: nic,
            planes,
        });
    }
    let lane = nic / planes;
    let leaf_ports = mul(
        input.leaf_radix,
        breakout("leaf", input.leaf_port_gbps, lane)?,
        "leaf logical ports",
    )?;
    let spine_ports = mul(
        input.spine_radix,
        breakout("spine", input.spine_port_gbps, lane)?,
        "spine logical ports",
    )?;
    let o = input.oversubscription;
    let down_max =
        (u64::from(leaf_ports) * u64::from(o.down) / (u64::from(o.down) + u64::from(o.up))) as u32;
    let too_small = DesignError::LeafTooSmall {
        logical_ports: leaf_ports,
        oversubscription: o,
    };
    if down_max == 0 {
        return Err(too_small);
    }
    let LeafPlan { leaves, down, rail } = match input.layout {
        Layout::SpineLeaf => spine_leaf_leaves(gpus, gps, down_max),
        Layout::Rail => rail_leaves(gpus, gps, down_max, spine_ports)?,
    };
    // One leaf holds every NIC port: no uplinks, no spines.
    let (up, spines) = if leaves == 1 {
        (0, 0)
    } else {
        let up = (u64::from(down) * u64::from(o.up)).div_ceil(u64::from(o.down));
        if u64::from(down) + up > u64::from(leaf_ports) || up == 0 {
            return Err(too_small);
        }
        // up <= leaf_ports - down: fits.
        let mut up = up as u32;
        if leaves > spine_ports {
            return Err(DesignError::TooManyLeaves {
                leaves,
                spine_logical_ports: spine_ports,
            });
        }
        let mut spines = mul(leaves, up, "uplinks")?.div_ceil(spine_ports);
        if up % spines != 0 {
            let rounded = up.div_ceil(spines) * spines;
            if u64::from(down) + u64::from(rounded) <= u64::from(leaf_ports) {
                up = rounded;
                spines = mul(leaves, up, "uplinks")?.div_ceil(spine_ports);
            }
        }
        (up, spines)
    };
    // The uplinks rotate over the spines (UplinkWiring): the fullest spine has
    // ceil(leaves x up / spines) <= spine_ports lanes, as spines = ceil(leaves x up / spine_ports).
    let wiring = UplinkWiring {
        leaves,
        uplinks_per_leaf: up,
        spines,
    };
    let downlinks_per_spine =
        u32::try_from(wiring.max_spine_lanes()).map_err(|_| DesignError::TooLarge {
            what: "spine downlinks",
        })?;
    let uplinks = mul(leaves, up, "uplinks")?;
    let plane = PlaneDesign {
        lane_gbps: lane,
        leaf_breakout: input.leaf_port_gbps / lane,
        spine_breakout: input.spine_port_gbps / lane,
        leaf_logical_ports: leaf_ports,
        spine_logical_ports: spine_ports,
        leaves,
        spines,
        downlinks_per_leaf: down,
        uplinks_per_leaf: up,
        links_per_leaf_spine: wiring.max_leaf_spine_lanes(),
        downlinks_per_spine,
        nic_links: gpus,
        uplinks,
    };
    plane.check_spines()?;
    let servers = gpus.div_ceil(gps);
    let links = add(gpus, uplinks, "cables")?;
    let per_plane = FabricCounts {
        servers,
        nics: gpus,
        nic_ports: gpus,
        leaves,
        spines,
        links,
        cables: links,
        optics: mul(2, links, "optics")?,
    };
    let cables = mul(planes, links, "cables")?;
    let total = FabricCounts {
        servers,
        nics: gpus,
        nic_ports: mul(planes, gpus, "NIC ports")?,
        leaves: mul(planes, leaves, "leaves")?,
        spines: mul(planes, spines, "spines")?,
        links: cables,
        cables,
        optics: mul(2, cables, "optics")?,
    };
    Ok(FabricDesign {
        input: *input,
        servers,
        nics: gpus,
        plane,
        leaves: total.leaves,
        spines: total.spines,
        cables,
        optics: total.optics,
        actual_oversubscription: if up == 0 {
            1.0
        } else {
            f64::from(down) / f64::from(up)
        },
        per_plane,
        total,
        rail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(gpus: u32) -> (u32, u32, u32, u32, u32) {
        let d = design(&DesignInput::reference(gpus)).unwrap();
        (
            d.servers,
            d.leaves,
            d.plane.downlinks_per_leaf,
            d.plane.uplinks_per_leaf,
            d.spines,
        )
    }

    /// 2^32 - 1 GPUs made `leaves * up` wrap to 0 and panicked on `up % spines`; huge
    /// radixes overflowed the port counts.
    #[test]
    fn absurd_inputs_are_errors_not_overflows() {
        let e = design(&DesignInput::reference(u32::MAX)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "134217728 leaves exceed the 64 logical ports of a spine (needs a third tier)"
        );
        let mut i = DesignInput::reference(u32::MAX);
        i.leaf_radix = u32::MAX;
        assert!(matches!(
            design(&i),
            Err(DesignError::TooLarge {
                what: "leaf logical ports"
            })
        ));
        let mut i = DesignInput::reference(64);
        i.spine_radix = u32::MAX / 2 + 1;
        assert!(matches!(
            design(&i),
            Err(DesignError::TooLarge {
                what: "spine logical ports"
            })
        ));
        let mut i = DesignInput::reference(64);
        i.oversubscription = Oversubscription {
            down: u32::MAX,
            up: u32::MAX,
        };
        let d = design(&i).unwrap();
        assert_eq!(
            (d.plane.downlinks_per_leaf, d.plane.uplinks_per_leaf),
            (32, 32)
        );
    }

    #[test]
    fn issue_reference_table() {
        // One leaf holds the 16 NICs: no uplinks, no spine.
        assert_eq!(row(16), (2, 1, 16, 0, 0));
        assert_eq!(row(64), (8, 2, 32, 32, 1));
        assert_eq!(row(128), (16, 4, 32, 32, 2));
        assert_eq!(row(1024), (128, 32, 32, 32, 16));
    }

    #[test]
    fn lanes_breakouts_and_physical_ports() {
        // 200G lanes on 400G ports: 2 lanes per port; 1024 GPUs fill every spine lane.
        let d = design(&DesignInput::reference(1024)).unwrap();
        let p = d.plane;
        assert_eq!(
            (p.lane_gbps, p.leaf_breakout, p.spine_breakout),
            (200, 2, 2)
        );
        assert_eq!((p.leaf_logical_ports, p.spine_logical_ports), (64, 64));
        assert_eq!((p.links_per_leaf_spine, p.downlinks_per_spine), (2, 64));
        let d = design(&DesignInput::reference(16)).unwrap();
        assert_eq!(
            (d.plane.links_per_leaf_spine, d.plane.downlinks_per_spine),
            (0, 0)
        );
        let mut i = DesignInput::reference(1024);
        i.planes = 2;
        assert_eq!(design(&i).unwrap().plane.leaf_breakout, 4);
        let sp = SwitchPort::from_sim_port(40, 2);
        assert_eq!((sp.port, sp.lane, sp.sim_port()), (21, 1, 40));
        assert_eq!(sp.to_string(), "p21/1");
        assert_eq!(SwitchPort::from_sim_port(63, 2).to_string(), "p32/2");
        assert_eq!(SwitchPort::from_sim_port(0, 4).to_string(), "p1/1");
        assert_eq!(SwitchPort::from_sim_port(7, 1).to_string(), "p8");
        assert_eq!(SwitchPort::from_sim_port(7, 0).to_string(), "p8");
    }

    #[test]
    fn optics_are_twice_nics_plus_uplinks() {
        for (gpus, uplinks) in [(16, 0), (64, 64), (128, 128), (1024, 1024)] {
            let d = design(&DesignInput::reference(gpus)).unwrap();
            assert_eq!(d.plane.uplinks, uplinks);
            assert_eq!(d.cables, gpus + uplinks);
            assert_eq!(d.optics, 2 * (gpus + uplinks));
            assert_eq!(d.actual_oversubscription, 1.0);
        }
        assert_eq!(design(&DesignInput::reference(1024)).unwrap().optics, 4096);
    }

    #[test]
    fn non_integer_speed_ratio_is_an_error() {
        let mut i = DesignInput::reference(64);
        i.leaf_port_gbps = 300;
        assert_eq!(
            design(&i),
            Err(DesignError::SpeedNotMultiple {
                switch: "leaf",
                port_gbps: 300,
                lane_gbps: 200
            })
        );
        let mut i = DesignInput::reference(64);
        i.spine_port_gbps = 500;
        assert!(matches!(
            design(&i),
            Err(DesignError::SpeedNotMultiple {
                switch: "spine",
                ..
            })
        ));
        let mut i = DesignInput::reference(64);
        i.planes = 3;
        assert_eq!(
            design(&i),
            Err(DesignError::PlanesNotDivisor {
                nic_gbps: 200,
                planes: 3
            })
        );
    }

    #[test]
    fn oversubscription_two_to_one_and_planes() {
        let mut i = DesignInput::reference(1024);
        i.oversubscription = "2:1".parse().unwrap();
        let d = design(&i).unwrap();
        // 64 logical ports: 42 down max, 40 with whole 8-GPU servers -> 26 leaves,
        // 40 down (ceil(1024/26) = 40 after rounding to whole servers), 20 up -> 520 uplinks,
        // 9 spines (ceil(520/64)); 20 up is not a multiple of 9: 27 does not fit 64-40.
        assert_eq!(d.plane.leaves, 26);
        assert_eq!(d.plane.downlinks_per_leaf, 40);
        assert_eq!(d.plane.uplinks_per_leaf, 20);
        assert_eq!(d.plane.spines, 9);
        assert_eq!(d.actual_oversubscription, 2.0);
        let mut i = DesignInput::reference(1024);
        i.planes = 2;
        let d = design(&i).unwrap();
        // 100G lanes: 128 logical ports per switch, 64 down / 64 up, 16 leaves, 8 spines
        // per plane; 2 planes.
        assert_eq!(d.plane.lane_gbps, 100);
        assert_eq!((d.plane.leaves, d.plane.spines), (16, 8));
        assert_eq!((d.leaves, d.spines), (32, 16));
        assert_eq!(d.cables, 2 * (1024 + 1024));
    }

    fn over(gpus: u32, o: &str) -> FabricDesign {
        let mut i = DesignInput::reference(gpus);
        i.oversubscription = o.parse().unwrap();
        design(&i).unwrap()
    }

    /// 1024 GPUs at 2:1 (26 leaves x 20 uplinks over 9 spines) and 4:1 (22 x 15 over 6):
    /// the uplinks rotate, so the fullest spine has 58 (55) of its 64 lanes, not the
    /// 26 x 3 = 78 (22 x 3 = 66) that uplink j -> spine j % spines gave.
    #[test]
    fn oversubscribed_uplinks_rotate_within_the_spine_lanes() {
        let p = over(1024, "2:1").plane;
        assert_eq!((p.leaves, p.uplinks_per_leaf, p.spines), (26, 20, 9));
        assert_eq!((p.links_per_leaf_spine, p.downlinks_per_spine), (3, 58));
        assert_eq!(p.spine_logical_ports, 64);
        assert_eq!(p.check_spines(), Ok(()));
        let p = over(1024, "4:1").plane;
        assert_eq!((p.leaves, p.uplinks_per_leaf, p.spines), (22, 15, 6));
        assert_eq!((p.links_per_leaf_spine, p.downlinks_per_spine), (3, 55));
        assert_eq!(p.check_spines(), Ok(()));
    }

    /// A plane with fewer spines than its uplinks need is a typed error, not a warning.
    #[test]
    fn plane_whose_uplinks_exceed_the_spines_is_an_error() {
        let mut p = over(1024, "2:1").plane;
        p.spines = 8;
        let e = p.check_spines().unwrap_err();
        assert_eq!(
            e,
            DesignError::UplinksExceedSpines {
                uplink_lanes: 520,
                spines: 8,
                spine_logical_ports: 64
            }
        );
        assert_eq!(
            e.to_string(),
            "520 leaf uplink lanes do not fit 8 spines x 64 lanes"
        );
        // 32 leaves x 16 = 512 lanes on 8 spines of 64: exactly full; one more each, not.
        (p.leaves, p.uplinks_per_leaf) = (32, 16);
        assert_eq!(p.check_spines(), Ok(()));
        p.uplinks_per_leaf = 17;
        assert!(matches!(
            p.check_spines(),
            Err(DesignError::UplinksExceedSpines {
                uplink_lanes: 544,
                ..
            })
        ));
        let mut p = over(1024, "2:1").plane;
        p.spine_logical_ports = 57;
        assert!(matches!(
            p.check_spines(),
            Err(DesignError::UplinksExceedSpines { .. })
        ));
        p.spine_logical_ports = 58;
        assert_eq!(p.check_spines(), Ok(()));
    }

    /// Over many GPU counts, oversubscriptions, planes and both layouts: the fullest spine
    /// fits its lanes, `downlinks_per_spine` is the wiring's fullest spine, every leaf
    /// reaches every spine, and the NICs placed on each leaf ([`FabricDesign::nic_place`])
    /// fill the fullest leaf exactly. The 95 one-leaf designs (GPUs <= whole servers of
    /// `down_max`: 11 at 1:1, 12 at 3:2, 13 at 2:1, 14 at 3:1, 15 at 4:1, 16 at 5:1, 14 at
    /// 7:2, over 1, 2, 4 planes) are all spine-leaf and have no spines; every rail design
    /// has at least 8 leaves (one per rail).
    #[test]
    fn every_design_fits_its_spines() {
        let (mut checked, mut single) = (0, 0);
        for layout in [Layout::SpineLeaf, Layout::Rail] {
            for o in ["1:1", "3:2", "2:1", "3:1", "4:1", "5:1", "7:2"] {
                for planes in [1, 2, 4] {
                    for gpus in (8..=2048).step_by(24) {
                        let mut i = DesignInput::reference(gpus);
                        i.oversubscription = o.parse().unwrap();
                        i.planes = planes;
                        i.layout = layout;
                        let Ok(d) = design(&i) else { continue };
                        let (p, w) = (d.plane, d.plane.wiring());
                        assert!(p.downlinks_per_spine <= p.spine_logical_ports, "{i:?}");
                        assert_eq!(p.uplinks, p.leaves * p.uplinks_per_leaf);
                        let mut per_leaf = vec![0u32; p.leaves as usize];
                        for nic in 0..gpus {
                            per_leaf[d.nic_place(nic).unwrap().leaf as usize] += 1;
                        }
                        assert_eq!(per_leaf.iter().max(), Some(&p.downlinks_per_leaf), "{i:?}");
                        assert!(per_leaf.iter().all(|&n| n > 0), "{i:?}");
                        checked += 1;
                        if p.leaves == 1 {
                            assert_eq!((p.spines, p.uplinks, p.downlinks_per_spine), (0, 0, 0));
                            assert_eq!(layout, Layout::SpineLeaf);
                            single += 1;
                            continue;
                        }
                        let fullest = (0..p.spines).map(|s| w.spine_lanes(s)).max().unwrap();
                        assert_eq!(u64::from(p.downlinks_per_spine), fullest, "{i:?}");
                        assert!(w.min_leaf_spine_lanes() >= 1, "{i:?}");
                    }
                }
            }
        }
        assert_eq!((checked, single), (2 * 7 * 3 * 86, 95));
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        assert!("0:1".parse::<Oversubscription>().is_err());
        assert!("x".parse::<Oversubscription>().is_err());
        assert_eq!(
            "3".parse::<Oversubscription>(),
            Ok(Oversubscription { down: 3, up: 1 })
        );
        let mut i = DesignInput::reference(64);
        i.gpus = 0;
        assert_eq!(design(&i), Err(DesignError::Zero { field: "gpus" }));
        let i = DesignInput::reference(100_000);
        assert!(matches!(design(&i), Err(DesignError::TooManyLeaves { .. })));
    }

    /// One row of [`layouts_and_planes_table`]: every count of a design, worked out by hand.
    struct Expect {
        layout: Layout,
        gpus: u32,
        planes: u32,
        servers: u32,
        lane: u32,
        /// Per plane: leaves, spines, fullest leaf's downlinks and its uplinks, lanes per
        /// leaf-spine pair, fullest spine's downlinks, cables (= links), optics.
        leaves: u32,
        spines: u32,
        down: u32,
        up: u32,
        pair: u32,
        spine_down: u32,
        cables: u32,
        optics: u32,
        /// All planes: leaves, spines, NIC ports, cables (= links), optics.
        all: (u32, u32, u32, u32, u32),
        /// Rail layout: (rail groups, servers per group).
        rail: Option<(u32, u32)>,
    }

    /// The reference switches (32 x 400G leaves and spines, 200G NICs, 8 GPUs per
    /// server, 1:1) at 16, 64, 128 and 1024 GPUs, 1, 2, 4 and 8 planes, both layouts.
    ///
    /// Per plane P: lane = 200 / P (200, 100, 50, 25G), breakout = 400 / lane (2, 4, 8,
    /// 16), a leaf and a spine have 32 x breakout lanes (64, 128, 256, 512), down_max =
    /// half of them (32, 64, 128, 256). Servers = GPUs / 8 (2, 8, 16, 128).
    ///
    /// Spine-leaf: leaves = ceil(GPUs / down_max), the fullest leaf has ceil(GPUs /
    /// leaves); one leaf has no uplinks and no spines (16 GPUs always; 64 from P = 2; 128
    /// from P = 4), else up = down and spines = leaves x up / spine lanes.
    ///
    /// Rail: 8 rails; a group holds down_max servers, so every case but 1024 GPUs at
    /// P = 1 and 2 is one group of all the servers: 8 leaves (one per rail) with
    /// down = servers (2, 8, 16, 128) and up = down; 8 x up = 16, 64, 128, 1024 uplink
    /// lanes. The 1024-GPU rail rows:
    ///
    /// - P = 1: lane 200G, 64 lanes per switch, down_max 32; 128 servers / 32 = 4 groups
    ///   of 32 servers; 8 rails x 4 groups = 32 leaves (4 per rail), each 32 down and
    ///   32 up; 32 x 32 = 1024 uplink lanes / 64 = 16 spines; 32 uplinks / 16 spines = 2
    ///   lanes per leaf-spine pair, a spine 32 leaves x 2 = 64 lanes (full); cables
    ///   1024 NIC + 1024 uplinks = 2048, optics 4096.
    /// - P = 2: lane 100G, 128 lanes, down_max 64: 2 groups of 64, 16 leaves (2 per rail),
    ///   64 down / 64 up, 1024 uplink lanes / 128 = 8 spines, 64 / 8 = 8 lanes per pair,
    ///   a spine 16 x 8 = 128; per plane 2048 cables, 4096 optics; 2 planes: 32 leaves,
    ///   16 spines, 2048 NIC ports, 4096 cables, 8192 optics.
    /// - P = 4: lane 50G, 256 lanes, down_max 128: 1 group of 128, 8 leaves of 128 down /
    ///   128 up, 1024 / 256 = 4 spines, 32 lanes per pair, 256 per spine; 4 planes: 32
    ///   leaves, 16 spines, 4096 NIC ports, 8192 cables, 16384 optics.
    /// - P = 8: lane 25G, 512 lanes, down_max 256: still 1 group of 128 (half of each
    ///   leaf's downlinks free), 8 leaves of 128 / 128, 1024 / 512 = 2 spines, 64 lanes
    ///   per pair, 512 per spine; 8 planes: 64 leaves, 16 spines, 8192 NIC ports, 16384
    ///   cables, 32768 optics.
    #[rustfmt::skip]
    fn table() -> Vec<Expect> {
        use Layout::{Rail as R, SpineLeaf as S};
        let e = |layout, gpus, planes, servers, lane, (leaves, spines, down, up), (pair, spine_down),
                 (cables, optics), all, rail| Expect {
            layout, gpus, planes, servers, lane, leaves, spines, down, up, pair, spine_down,
            cables, optics, all, rail,
        };
        vec![
            //  layout gpus P servers lane (leaves spines down up) (pair spine) (cables optics)  all planes: (leaves spines nic_ports cables optics)  rail
            e(S,   16, 1,   2, 200, ( 1,  0,  16,   0), (  0,   0), (  16,   32), ( 1,  0,   16,    16,    32), None),
            e(S,   64, 1,   8, 200, ( 2,  1,  32,  32), ( 32,  64), ( 128,  256), ( 2,  1,   64,   128,   256), None),
            e(S,  128, 1,  16, 200, ( 4,  2,  32,  32), ( 16,  64), ( 256,  512), ( 4,  2,  128,   256,   512), None),
            e(S, 1024, 1, 128, 200, (32, 16,  32,  32), (  2,  64), (2048, 4096), (32, 16, 1024,  2048,  4096), None),
            e(S,   16, 2,   2, 100, ( 1,  0,  16,   0), (  0,   0), (  16,   32), ( 2,  0,   32,    32,    64), None),
            e(S,   64, 2,   8, 100, ( 1,  0,  64,   0), (  0,   0), (  64,  128), ( 2,  0,  128,   128,   256), None),
            e(S,  128, 2,  16, 100, ( 2,  1,  64,  64), ( 64, 128), ( 256,  512), ( 4,  2,  256,   512,  1024), None),
            e(S, 1024, 2, 128, 100, (16,  8,  64,  64), (  8, 128), (2048, 4096), (32, 16, 2048,  4096,  8192), None),
            e(S,   16, 4,   2,  50, ( 1,  0,  16,   0), (  0,   0), (  16,   32), ( 4,  0,   64,    64,   128), None),
            e(S,   64, 4,   8,  50, ( 1,  0,  64,   0), (  0,   0), (  64,  128), ( 4,  0,  256,   256,   512), None),
            e(S,  128, 4,  16,  50, ( 1,  0, 128,   0), (  0,   0), ( 128,  256), ( 4,  0,  512,   512,  1024), None),
            e(S, 1024, 4, 128,  50, ( 8,  4, 128, 128), ( 32, 256), (2048, 4096), (32, 16, 4096,  8192, 16384), None),
            e(S,   16, 8,   2,  25, ( 1,  0,  16,   0), (  0,   0), (  16,   32), ( 8,  0,  128,   128,   256), None),
            e(S,   64, 8,   8,  25, ( 1,  0,  64,   0), (  0,   0), (  64,  128), ( 8,  0,  512,   512,  1024), None),
            e(S,  128, 8,  16,  25, ( 1,  0, 128,   0), (  0,   0), ( 128,  256), ( 8,  0, 1024,  1024,  2048), None),
            e(S, 1024, 8, 128,  25, ( 4,  2, 256, 256), (128, 512), (2048, 4096), (32, 16, 8192, 16384, 32768), None),
            e(R,   16, 1,   2, 200, ( 8,  1,   2,   2), (  2,  16), (  32,   64), ( 8,  1,   16,    32,    64), Some((1,   2))),
            e(R,   64, 1,   8, 200, ( 8,  1,   8,   8), (  8,  64), ( 128,  256), ( 8,  1,   64,   128,   256), Some((1,   8))),
            e(R,  128, 1,  16, 200, ( 8,  2,  16,  16), (  8,  64), ( 256,  512), ( 8,  2,  128,   256,   512), Some((1,  16))),
            e(R, 1024, 1, 128, 200, (32, 16,  32,  32), (  2,  64), (2048, 4096), (32, 16, 1024,  2048,  4096), Some((4,  32))),
            e(R,   16, 2,   2, 100, ( 8,  1,   2,   2), (  2,  16), (  32,   64), (16,  2,   32,    64,   128), Some((1,   2))),
            e(R,   64, 2,   8, 100, ( 8,  1,   8,   8), (  8,  64), ( 128,  256), (16,  2,  128,   256,   512), Some((1,   8))),
            e(R,  128, 2,  16, 100, ( 8,  1,  16,  16), ( 16, 128), ( 256,  512), (16,  2,  256,   512,  1024), Some((1,  16))),
            e(R, 1024, 2, 128, 100, (16,  8,  64,  64), (  8, 128), (2048, 4096), (32, 16, 2048,  4096,  8192), Some((2,  64))),
            e(R,   16, 4,   2,  50, ( 8,  1,   2,   2), (  2,  16), (  32,   64), (32,  4,   64,   128,   256), Some((1,   2))),
            e(R,   64, 4,   8,  50, ( 8,  1,   8,   8), (  8,  64), ( 128,  256), (32,  4,  256,   512,  1024), Some((1,   8))),
            e(R,  128, 4,  16,  50, ( 8,  1,  16,  16), ( 16, 128), ( 256,  512), (32,  4,  512,  1024,  2048), Some((1,  16))),
            e(R, 1024, 4, 128,  50, ( 8,  4, 128, 128), ( 32, 256), (2048, 4096), (32, 16, 4096,  8192, 16384), Some((1, 128))),
            e(R,   16, 8,   2,  25, ( 8,  1,   2,   2), (  2,  16), (  32,   64), (64,  8,  128,   256,   512), Some((1,   2))),
            e(R,   64, 8,   8,  25, ( 8,  1,   8,   8), (  8,  64), ( 128,  256), (64,  8,  512,  1024,  2048), Some((1,   8))),
            e(R,  128, 8,  16,  25, ( 8,  1,  16,  16), ( 16, 128), ( 256,  512), (64,  8, 1024,  2048,  4096), Some((1,  16))),
            e(R, 1024, 8, 128,  25, ( 8,  2, 128, 128), ( 64, 512), (2048, 4096), (64, 16, 8192, 16384, 32768), Some((1, 128))),
        ]
    }

    #[test]
    fn layouts_and_planes_table() {
        let rows = table();
        assert_eq!(rows.len(), 32);
        for x in rows {
            let mut i = DesignInput::reference(x.gpus);
            (i.planes, i.layout) = (x.planes, x.layout);
            let d = design(&i).unwrap();
            let at = format!("{} GPUs, {} planes, {}", x.gpus, x.planes, x.layout);
            let p = d.plane;
            assert_eq!(
                (d.servers, d.nics, p.lane_gbps),
                (x.servers, x.gpus, x.lane),
                "{at}"
            );
            assert_eq!(
                (p.leaves, p.spines, p.downlinks_per_leaf, p.uplinks_per_leaf),
                (x.leaves, x.spines, x.down, x.up),
                "{at}"
            );
            assert_eq!(
                (p.links_per_leaf_spine, p.downlinks_per_spine),
                (x.pair, x.spine_down),
                "{at}"
            );
            assert_eq!((p.nic_links, p.uplinks), (x.gpus, x.leaves * x.up), "{at}");
            assert_eq!(
                d.per_plane,
                FabricCounts {
                    servers: x.servers,
                    nics: x.gpus,
                    nic_ports: x.gpus,
                    leaves: x.leaves,
                    spines: x.spines,
                    links: x.cables,
                    cables: x.cables,
                    optics: x.optics,
                },
                "{at}"
            );
            let (leaves, spines, nic_ports, cables, optics) = x.all;
            assert_eq!(
                d.total,
                FabricCounts {
                    servers: x.servers,
                    nics: x.gpus,
                    nic_ports,
                    leaves,
                    spines,
                    links: cables,
                    cables,
                    optics,
                },
                "{at}"
            );
            assert_eq!(
                (d.leaves, d.spines, d.cables, d.optics),
                (leaves, spines, cables, optics),
                "{at}"
            );
            assert_eq!(d.actual_oversubscription, 1.0, "{at}");
            let rail = d.rail.map(|r| {
                assert_eq!(
                    (r.rails, r.leaves_per_group, r.nic_ports_per_rail),
                    (8, 8, x.servers),
                    "{at}"
                );
                assert_eq!(r.group_capacity, p.leaf_logical_ports / 2, "{at}");
                assert_eq!(r.leaves_per_rail, r.groups, "{at}");
                (r.groups, r.servers_per_group)
            });
            assert_eq!(rail, x.rail, "{at}");
        }
    }

    /// `--gpus 16` put a spine over its one leaf (16 NIC links + 16 uplinks = 32 cables);
    /// one leaf needs none: 16 cables, 32 optics. 32 GPUs still fit the leaf's 32
    /// downlinks; 40 (5 servers) need 2 leaves of 24 (3 whole servers) and 24 uplinks each,
    /// 48 uplink lanes on one 64-lane spine.
    #[test]
    fn one_leaf_has_no_spines() {
        let d = design(&DesignInput::reference(16)).unwrap();
        assert_eq!((d.leaves, d.spines, d.cables, d.optics), (1, 0, 16, 32));
        assert_eq!((d.plane.uplinks_per_leaf, d.plane.uplinks), (0, 0));
        assert_eq!(d.plane.check_spines(), Ok(()));
        let d = design(&DesignInput::reference(32)).unwrap();
        assert_eq!((d.leaves, d.spines, d.cables), (1, 0, 32));
        let d = design(&DesignInput::reference(40)).unwrap();
        assert_eq!((d.leaves, d.spines, d.cables), (2, 1, 40 + 48));
        assert_eq!(
            (d.plane.downlinks_per_leaf, d.plane.uplinks_per_leaf),
            (24, 24)
        );
        // 2:1 leaves 42 downlinks (40 in whole servers): 40 GPUs on one leaf, no spine,
        // and one switch is non-blocking.
        let mut i = DesignInput::reference(40);
        i.oversubscription = "2:1".parse().unwrap();
        let d = design(&i).unwrap();
        assert_eq!((d.leaves, d.spines, d.cables), (1, 0, 40));
        assert_eq!(d.actual_oversubscription, 1.0);
        // A rail fabric of one rail (1 GPU per server) and one group is one leaf too.
        let mut i = DesignInput::reference(16);
        (i.gpus_per_server, i.layout) = (1, Layout::Rail);
        let d = design(&i).unwrap();
        assert_eq!((d.leaves, d.spines, d.cables, d.optics), (1, 0, 16, 32));
        let r = d.rail.unwrap();
        assert_eq!((r.rails, r.groups, r.servers_per_group), (1, 1, 16));
    }

    /// Where each NIC goes: server, NIC, leaf, and in the rail layout rail and group.
    #[test]
    fn nic_places_follow_the_layout() {
        let d = design(&DesignInput::reference(1024)).unwrap();
        let place = |d: &FabricDesign, n| {
            let p = d.nic_place(n).unwrap();
            (p.server, p.nic, p.leaf, p.rail, p.group)
        };
        // Spine-leaf: 32 NICs (4 servers) per leaf.
        assert_eq!(place(&d, 0), (0, 0, 0, None, None));
        assert_eq!(place(&d, 40), (5, 0, 1, None, None));
        assert_eq!(place(&d, 1023), (127, 7, 31, None, None));
        assert_eq!(d.nic_place(1024), None);
        assert_eq!(d.rail_leaf(0), None);
        // Rail: 4 groups of 32 servers, leaf g x 8 + k.
        let mut i = DesignInput::reference(1024);
        i.layout = Layout::Rail;
        let d = design(&i).unwrap();
        assert_eq!(place(&d, 0), (0, 0, 0, Some(0), Some(0)));
        assert_eq!(place(&d, 40), (5, 0, 0, Some(0), Some(0)));
        assert_eq!(place(&d, 41), (5, 1, 1, Some(1), Some(0)));
        assert_eq!(place(&d, 256), (32, 0, 8, Some(0), Some(1)));
        assert_eq!(place(&d, 1023), (127, 7, 31, Some(7), Some(3)));
        assert_eq!(d.rail_leaf(13), Some(RailLeaf { rail: 5, group: 1 }));
        assert_eq!(d.rail_leaf(32), None);
    }

    /// Servers spread evenly over the rail groups; a last, partial server and fewer GPUs
    /// than a server has NICs.
    #[test]
    fn rail_groups_are_even_and_partial_servers_count() {
        let rail = |gpus: u32, gps: u32| {
            let mut i = DesignInput::reference(gpus);
            (i.gpus_per_server, i.layout) = (gps, Layout::Rail);
            design(&i).unwrap()
        };
        // 48 servers, groups of at most 32: 2 groups of 24 (not 32 + 16); 16 leaves of
        // 24 down and 24 up, 384 uplink lanes on 6 spines (24 is a multiple of 6: 4 lanes
        // per pair, 64 per spine).
        let d = rail(384, 8);
        let r = d.rail.unwrap();
        assert_eq!(
            (r.groups, r.servers_per_group, r.group_capacity),
            (2, 24, 32)
        );
        let p = d.plane;
        assert_eq!(
            (p.leaves, p.downlinks_per_leaf, p.uplinks_per_leaf, p.spines),
            (16, 24, 24, 6)
        );
        assert_eq!((p.links_per_leaf_spine, p.downlinks_per_spine), (4, 64));
        // 33 servers: groups of 17 and 16 (server 17 starts group 1).
        let d = rail(264, 8);
        let r = d.rail.unwrap();
        assert_eq!((r.groups, r.servers_per_group), (2, 17));
        assert_eq!(d.nic_place(17 * 8).unwrap().group, Some(1));
        assert_eq!(d.nic_place(17 * 8 - 1).unwrap().group, Some(0));
        // 20 GPUs of 8 per server: 3 servers, the last with NICs 0-3; rails 4-7 have 2
        // NIC ports, rails 0-3 have 3.
        let d = rail(20, 8);
        let r = d.rail.unwrap();
        assert_eq!((d.servers, r.rails, r.nic_ports_per_rail), (3, 8, 3));
        assert_eq!((d.plane.leaves, d.plane.downlinks_per_leaf), (8, 3));
        // 4 GPUs of 8 per server: one server with 4 NICs, 4 rails and leaves.
        let d = rail(4, 8);
        let r = d.rail.unwrap();
        assert_eq!((d.servers, r.rails, d.plane.leaves), (1, 4, 4));
        assert_eq!((d.plane.uplinks_per_leaf, d.plane.spines), (1, 1));
    }

    #[test]
    fn rail_errors_and_layout_names() {
        assert_eq!("rail".parse::<Layout>(), Ok(Layout::Rail));
        assert_eq!("spine-leaf".parse::<Layout>(), Ok(Layout::SpineLeaf));
        let e = "fat-tree".parse::<Layout>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "layout \"fat-tree\" is not spine-leaf or rail"
        );
        assert_eq!(Layout::Rail.to_string(), "rail");
        assert_eq!(Layout::default(), Layout::SpineLeaf);
        // 4096 GPUs = 512 servers = 16 groups of 32; 8 rails x 16 = 128 leaves, more than
        // a spine's 64 lanes.
        let mut i = DesignInput::reference(4096);
        i.layout = Layout::Rail;
        let e = design(&i).unwrap_err();
        assert_eq!(
            e,
            DesignError::TooManyRailLeaves {
                rails: 8,
                groups: 16,
                leaves: 128,
                spine_logical_ports: 64
            }
        );
        assert_eq!(
            e.to_string(),
            "8 rails x 16 rail groups = 128 leaves exceed the 64 logical ports of a spine (needs a third tier)"
        );
        // 2048 GPUs = 256 servers = 8 groups: 64 leaves, exactly a spine's lanes.
        i.gpus = 2048;
        let d = design(&i).unwrap();
        assert_eq!((d.plane.leaves, d.plane.spines), (64, 32));
        // A leaf too small for one downlink is the same error in either layout.
        i.oversubscription = Oversubscription { down: 1, up: 64 };
        assert_eq!(
            design(&i),
            Err(DesignError::LeafTooSmall {
                logical_ports: 64,
                oversubscription: Oversubscription { down: 1, up: 64 }
            })
        );
    }

    /// NVIDIA's DGX SuperPOD B200 reference architecture, table "Larger DGX SuperPOD
    /// component counts" (docs.nvidia.com/dgx-superpod): 8 x 400G NICs per node, 64-port
    /// 400G leaves and spines, rail-optimized scalable units of 32 nodes. (SUs, GPUs) ->
    /// leaves, spines, node-leaf cables, leaf-spine cables: (2, 512) -> 16, 8, 512, 512;
    /// (4, 1024) -> 32, 16, 1024, 1024; (8, 2048) -> 64, 32, 2048, 2048; 16 SUs (4096
    /// GPUs) add a core tier, more than two tiers can hold.
    #[test]
    fn rail_layout_matches_the_dgx_superpod_counts() {
        let superpod = |gpus| DesignInput {
            gpus,
            gpus_per_server: 8,
            nic_gbps: 400,
            leaf_radix: 64,
            leaf_port_gbps: 400,
            spine_radix: 64,
            spine_port_gbps: 400,
            oversubscription: Oversubscription::NON_BLOCKING,
            planes: 1,
            layout: Layout::Rail,
        };
        for (gpus, sus, leaves, spines, cables) in [
            (512, 2, 16, 8, 512),
            (1024, 4, 32, 16, 1024),
            (2048, 8, 64, 32, 2048),
        ] {
            let d = design(&superpod(gpus)).unwrap();
            let r = d.rail.unwrap();
            assert_eq!((r.groups, r.servers_per_group), (sus, 32), "{gpus}");
            assert_eq!((d.leaves, d.spines), (leaves, spines), "{gpus}");
            assert_eq!((d.plane.nic_links, d.plane.uplinks), (cables, cables));
        }
        assert!(matches!(
            design(&superpod(4096)),
            Err(DesignError::TooManyRailLeaves { leaves: 128, .. })
        ));
    }
}
