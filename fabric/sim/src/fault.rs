//! Scripted, seeded network faults on links, NIC ports and switches.
//!
//! A [`Fault`] changes the state of every link (or switch) it selects at `at_ns`.
//! Per-packet faults (loss, corruption, duplication, jitter) draw from the simulator's
//! seeded RNG when a frame leaves a port, so a seed reproduces them exactly. Besides the
//! link faults: a host's NIC port down or up ([`FaultKind::PortDown`], the host is told, as
//! by a NIC's link event), a switch down or up ([`FaultKind::SwitchDown`]; a whole plane is
//! every switch of the plane, [`LinkSelector::Plane`]), and two sequences built of them:
//! a switch reboot ([`Fault::reboot`]) and a flapping link ([`Fault::flapping`]).

use serde::Serialize;

use super::topo::{Role, Topology};

/// Which links a fault applies to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum LinkSelector {
    /// Every link.
    All,
    /// One link by id.
    Link(u32),
    /// Every link between two named nodes (`leaf0`, `spine1`, `host3`).
    Between(String, String),
    /// Every leaf-spine link.
    Fabric,
    /// The link of NIC port `port` of host `host` (to its plane's leaf).
    Port {
        /// Host index.
        host: u32,
        /// Port of the host: its plane.
        port: u16,
    },
    /// Every link of one switch, by name (`spine1`, `p1.leaf0`); for
    /// [`FaultKind::SwitchDown`] / [`FaultKind::SwitchUp`], the switch itself.
    Switch(String),
    /// Every link of plane `q` (its hosts' ports on it included); for
    /// [`FaultKind::SwitchDown`] / [`FaultKind::SwitchUp`], every switch of the plane.
    Plane(u32),
}

impl LinkSelector {
    /// The link ids this selector names in `topo` (none for a node or port it lacks).
    pub fn links(&self, topo: &Topology) -> Vec<u32> {
        let all = 0..topo.links.len() as u32;
        match self {
            LinkSelector::All => all.collect(),
            LinkSelector::Link(l) => vec![*l],
            LinkSelector::Fabric => all
                .filter(|&l| topo.links[l as usize].a >= topo.hosts)
                .collect(),
            LinkSelector::Between(a, b) => match (topo.node_by_name(a), topo.node_by_name(b)) {
                (Some(a), Some(b)) => topo.links_between(a, b),
                _ => Vec::new(),
            },
            LinkSelector::Port { host, port } => topo
                .nodes
                .get(*host as usize)
                .filter(|_| *host < topo.hosts)
                .and_then(|n| n.ports.get(usize::from(*port)))
                .map(|p| vec![p.link])
                .unwrap_or_default(),
            LinkSelector::Switch(_) => self
                .switches(topo)
                .iter()
                .flat_map(|&n| topo.nodes[n as usize].ports.iter().map(|p| p.link))
                .collect(),
            LinkSelector::Plane(q) => all
                .filter(|&l| topo.plane_of(topo.links[l as usize].b) == Some(*q))
                .collect(),
        }
    }

    /// The switches this selector names in `topo`: the one of [`LinkSelector::Switch`],
    /// every switch of a [`LinkSelector::Plane`]; none for the other selectors, or a name
    /// that is not a switch's.
    pub fn switches(&self, topo: &Topology) -> Vec<u32> {
        match self {
            LinkSelector::Switch(name) => topo
                .node_by_name(name)
                .filter(|&n| topo.nodes[n as usize].role != Role::Host)
                .into_iter()
                .collect(),
            LinkSelector::Plane(q) => topo.plane_switches(*q).collect(),
            _ => Vec::new(),
        }
    }
}

/// What happens to the selected links.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum FaultKind {
    /// The link goes down: queued and arriving frames are lost and routing converges around
    /// it at once (switches see loss of signal).
    LinkDown,
    /// The link comes back up; routing converges at once.
    LinkUp,
    /// Frames are silently dropped; routing does not notice (a black hole).
    BlackHole,
    /// Each frame is lost with probability `p`.
    Loss {
        /// Probability, 0..=1.
        p: f64,
    },
    /// Each frame has one bit of its UDP header or payload flipped with probability `p`
    /// (the receiver's UDP checksum catches it); a frame already corrupted on an earlier
    /// link is not corrupted again (two flips could cancel out in the checksum).
    Corrupt {
        /// Probability, 0..=1.
        p: f64,
    },
    /// Each frame is delivered twice with probability `p`.
    Duplicate {
        /// Probability, 0..=1.
        p: f64,
    },
    /// Each frame gets an extra delay uniform in `0..=max_ns` (frames reorder).
    Jitter {
        /// Largest extra delay, ns.
        max_ns: u64,
    },
    /// A host's NIC port goes down ([`LinkSelector::Port`] only): its link drops
    /// everything, as [`FaultKind::LinkDown`], and the host's datapath tells each of the
    /// host's connections (`Connection::set_local_plane(port, false, now)`), as a NIC's
    /// link-down event would; the connections tell their peers (Port Status Update).
    PortDown,
    /// The port comes back up: its link as [`FaultKind::LinkUp`], and the host's
    /// connections are told (`set_local_plane(port, true, now)`).
    PortUp,
    /// The selected switches go down ([`LinkSelector::Switch`] or [`LinkSelector::Plane`]
    /// only): every frame they hold is lost, every link of theirs is down (their neighbours
    /// route around them at once, as on loss of signal) and frames reaching them are
    /// dropped. Hosts are not told: a host's port to a down leaf drops what it sends, and
    /// the transport finds out by loss.
    SwitchDown,
    /// The selected switches come back up, their queues empty; routing converges at once.
    SwitchUp,
}

impl FaultKind {
    /// Whether the kind changes which links are down (routing converges after it).
    pub fn changes_routes(self) -> bool {
        matches!(
            self,
            FaultKind::LinkDown
                | FaultKind::LinkUp
                | FaultKind::PortDown
                | FaultKind::PortUp
                | FaultKind::SwitchDown
                | FaultKind::SwitchUp
        )
    }
}

/// One scripted fault.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fault {
    /// When it takes effect, ns.
    pub at_ns: u64,
    /// Where.
    pub links: LinkSelector,
    /// What.
    pub kind: FaultKind,
}

impl Fault {
    /// Why this fault cannot apply to `topo`, if it cannot: a kind used with a selector
    /// it does not take, or a host, port, switch or plane `topo` lacks.
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        let switches = matches!(self.links, LinkSelector::Switch(_) | LinkSelector::Plane(_));
        match self.kind {
            FaultKind::PortDown | FaultKind::PortUp
                if !matches!(self.links, LinkSelector::Port { .. }) =>
            {
                return Err(format!("{:?} needs a host port", self.kind));
            }
            FaultKind::SwitchDown | FaultKind::SwitchUp if !switches => {
                return Err(format!("{:?} needs a switch or a plane", self.kind));
            }
            _ => {}
        }
        match &self.links {
            LinkSelector::Port { host, port } if self.links.links(topo).is_empty() => {
                Err(format!("host {host} has no port {port}"))
            }
            LinkSelector::Switch(name) if self.links.switches(topo).is_empty() => {
                Err(format!("no switch named {name:?}"))
            }
            LinkSelector::Plane(q) if *q >= topo.planes() => {
                Err(format!("no plane {q} (the fabric has {})", topo.planes()))
            }
            _ => Ok(()),
        }
    }

    /// A switch reboot: `switch` (a name, `p1.spine0`) goes down at `at_ns` and comes
    /// back up `down_ns` later.
    pub fn reboot(switch: &str, at_ns: u64, down_ns: u64) -> [Fault; 2] {
        let links = LinkSelector::Switch(switch.to_owned());
        [
            Fault {
                at_ns,
                links: links.clone(),
                kind: FaultKind::SwitchDown,
            },
            Fault {
                at_ns: at_ns.saturating_add(down_ns),
                links,
                kind: FaultKind::SwitchUp,
            },
        ]
    }

    /// Links flapping: down at `from_ns`, up `period_ns` later, down again `period_ns`
    /// after that, ..., `flaps` down-up pairs (`2 x flaps` faults). A host port
    /// ([`LinkSelector::Port`]) flaps with [`FaultKind::PortDown`] / [`FaultKind::PortUp`]
    /// (the host is told each time), other links with `LinkDown` / `LinkUp`.
    pub fn flapping(links: LinkSelector, from_ns: u64, period_ns: u64, flaps: u32) -> Vec<Fault> {
        let (down, up) = if matches!(links, LinkSelector::Port { .. }) {
            (FaultKind::PortDown, FaultKind::PortUp)
        } else {
            (FaultKind::LinkDown, FaultKind::LinkUp)
        };
        (0..2 * u64::from(flaps))
            .map(|k| Fault {
                at_ns: from_ns.saturating_add(k.saturating_mul(period_ns)),
                links: links.clone(),
                kind: if k % 2 == 0 { down } else { up },
            })
            .collect()
    }
}

/// Fault state of one link (both directions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LinkFaults {
    /// Down (routing avoids it).
    pub down: bool,
    /// Ends of the link at a switch that is down ([`FaultKind::SwitchDown`]): the link is
    /// down while this is not 0, whatever `down` says.
    pub switch_ends_down: u8,
    /// Black-holed (routing does not know).
    pub black_hole: bool,
    /// Loss probability.
    pub loss_p: f64,
    /// Corruption probability.
    pub corrupt_p: f64,
    /// Duplication probability.
    pub duplicate_p: f64,
    /// Largest extra delay, ns.
    pub jitter_max_ns: u64,
}

impl LinkFaults {
    /// Applies `kind` to this state (a switch's state is the simulator's: switch kinds
    /// change nothing here).
    pub fn apply(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::LinkDown | FaultKind::PortDown => self.down = true,
            FaultKind::LinkUp | FaultKind::PortUp => {
                self.down = false;
                self.black_hole = false;
            }
            FaultKind::SwitchDown | FaultKind::SwitchUp => {}
            FaultKind::BlackHole => self.black_hole = true,
            FaultKind::Loss { p } => self.loss_p = p,
            FaultKind::Corrupt { p } => self.corrupt_p = p,
            FaultKind::Duplicate { p } => self.duplicate_p = p,
            FaultKind::Jitter { max_ns } => self.jitter_max_ns = max_ns,
        }
    }

    /// Whether the link carries nothing: down, or an end's switch is down.
    pub fn is_down(&self) -> bool {
        self.down || self.switch_ends_down > 0
    }

    /// Whether every frame passes untouched (the fast path).
    pub fn is_clean(&self) -> bool {
        !self.is_down()
            && !self.black_hole
            && self.loss_p == 0.0
            && self.corrupt_p == 0.0
            && self.duplicate_p == 0.0
            && self.jitter_max_ns == 0
    }
}
