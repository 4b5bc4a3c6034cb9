//! Scripted, seeded network faults on links.
//!
//! A [`Fault`] changes the state of every link it selects at `at_ns`. Per-packet faults
//! (loss, corruption, duplication, jitter) draw from the simulator's seeded RNG when a frame
//! leaves a port, so a seed reproduces them exactly.

use serde::Serialize;

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

/// Fault state of one link (both directions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LinkFaults {
    /// Down (routing avoids it).
    pub down: bool,
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
    /// Applies `kind` to this state.
    pub fn apply(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::LinkDown => self.down = true,
            FaultKind::LinkUp => {
                self.down = false;
                self.black_hole = false;
            }
            FaultKind::BlackHole => self.black_hole = true,
            FaultKind::Loss { p } => self.loss_p = p,
            FaultKind::Corrupt { p } => self.corrupt_p = p,
            FaultKind::Duplicate { p } => self.duplicate_p = p,
            FaultKind::Jitter { max_ns } => self.jitter_max_ns = max_ns,
        }
    }

    /// Whether every frame passes untouched (the fast path).
    pub fn is_clean(&self) -> bool {
        !self.down
            && !self.black_hole
            && self.loss_p == 0.0
            && self.corrupt_p == 0.0
            && self.duplicate_p == 0.0
            && self.jitter_max_ns == 0
    }
}
