//! Two-tier spine-leaf designer: from the GPU count, the NICs and the switches to servers,
//! leaves, spines, links, cables and optics.
//!
//! Model (the usual breakout arithmetic of GPU back-end fabrics):
//! - one NIC per GPU; with `planes = P` each NIC is split into P ports of `nic_gbps / P`
//!   (the *lane* speed), each port on its own, identical fabric (plane);
//! - a switch port of `port_gbps` breaks out into `port_gbps / lane` logical ports of lane
//!   speed (400G -> 2 x 200G); a speed that is not an integer multiple of the lane is a
//!   [`DesignError::SpeedNotMultiple`];
//! - a leaf has `leaf_radix x breakout` logical ports, split down:up by the oversubscription
//!   `down:up` (`down = floor(L x down / (down + up))`); whole servers are kept on one leaf
//!   when a server's NICs fit one leaf;
//! - leaves = ceil(NICs / NICs per leaf); uplinks per leaf = ceil(down x up / down), rounded up
//!   to a multiple of the spine count when the radix allows, so that every leaf reaches every
//!   spine over the same number of links; spines = ceil(leaves x uplinks / spine logical ports);
//! - when the uplinks are still not a multiple of the spines, they rotate over the spines
//!   ([`UplinkWiring`]: uplink `j` of leaf `l` to spine `(l x uplinks + j) mod spines`), so
//!   the fullest spine carries `ceil(leaves x uplinks / spines)` lanes, within its logical
//!   ports by the choice of the spine count ([`DesignError::UplinksExceedSpines`] otherwise);
//! - cables = NIC links + leaf-spine links (every logical link is one cable); optics are
//!   counted at both ends: `optics = 2 x (NICs + uplinks)` per plane.
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
}

impl DesignInput {
    /// The reference case of the issue: 8 GPUs per server, 200G NICs, 32-port 400G leaves
    /// and spines, 1:1, one plane.
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
    /// More leaves than a spine has logical ports: two tiers are not enough.
    #[error(
        "{leaves} leaves exceed the {spine_logical_ports} logical ports of a spine (needs a third tier)"
    )]
    TooManyLeaves {
        /// Leaves needed.
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
    /// Leaves.
    pub leaves: u32,
    /// Spines.
    pub spines: u32,
    /// Downlinks (NIC ports, lanes) of the fullest leaf.
    pub downlinks_per_leaf: u32,
    /// Uplinks (lanes) of each leaf.
    pub uplinks_per_leaf: u32,
    /// Most links (lanes) between one leaf and one spine: `ceil(uplinks_per_leaf / spines)`
    /// (exactly `uplinks_per_leaf / spines` for every pair when the uplinks are a multiple
    /// of the spines; otherwise each leaf has one lane fewer to some spines, see
    /// [`UplinkWiring`]).
    pub links_per_leaf_spine: u32,
    /// Downlinks (lanes to leaves) of the fullest spine: `ceil(leaves x uplinks_per_leaf /
    /// spines)` (the uplinks rotate over the spines, [`UplinkWiring`]); at most
    /// `spine_logical_ports`.
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
    /// Actual oversubscription of the fullest leaf: downlinks / uplinks.
    pub actual_oversubscription: f64,
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

/// Designs the fabric for `input` (see the module docs for the model).
///
/// Errors: [`DesignError::Zero`], [`DesignError::PlanesNotDivisor`],
/// [`DesignError::SpeedNotMultiple`], [`DesignError::LeafTooSmall`],
/// [`DesignError::TooManyLeaves`], [`DesignError::TooLarge`],
/// [`DesignError::UplinksExceedSpines`] (not reached: the spine count is chosen to fit).
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
    // Keep servers whole on a leaf when a server fits.
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
        uplinks: leaves * up,
    };
    plane.check_spines()?;
    let cables = mul(planes, add(gpus, leaves * up, "cables")?, "cables")?;
    Ok(FabricDesign {
        input: *input,
        servers: gpus.div_ceil(gps),
        nics: gpus,
        plane,
        leaves: mul(planes, leaves, "leaves")?,
        spines: mul(planes, spines, "spines")?,
        cables,
        optics: mul(2, cables, "optics")?,
        actual_oversubscription: f64::from(down) / f64::from(up),
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
        assert_eq!(row(16), (2, 1, 16, 16, 1));
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
            (16, 16)
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
        for (gpus, uplinks) in [(16, 16), (64, 64), (128, 128), (1024, 1024)] {
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

    /// Over many GPU counts, oversubscriptions and planes: the fullest spine fits its
    /// lanes, `downlinks_per_spine` is the wiring's fullest spine, and every leaf reaches
    /// every spine.
    #[test]
    fn every_design_fits_its_spines() {
        let mut checked = 0;
        for o in ["1:1", "3:2", "2:1", "3:1", "4:1", "5:1", "7:2"] {
            for planes in [1, 2, 4] {
                for gpus in (8..=2048).step_by(24) {
                    let mut i = DesignInput::reference(gpus);
                    i.oversubscription = o.parse().unwrap();
                    i.planes = planes;
                    let Ok(d) = design(&i) else { continue };
                    let (p, w) = (d.plane, d.plane.wiring());
                    assert!(p.downlinks_per_spine <= p.spine_logical_ports, "{i:?}");
                    let fullest = (0..p.spines).map(|s| w.spine_lanes(s)).max().unwrap();
                    assert_eq!(u64::from(p.downlinks_per_spine), fullest, "{i:?}");
                    assert!(w.min_leaf_spine_lanes() >= 1, "{i:?}");
                    assert_eq!(p.uplinks, p.leaves * p.uplinks_per_leaf);
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 7 * 3 * 86);
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
}
