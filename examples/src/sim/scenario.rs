//! Scenario files (TOML) for `mrc-sim run`.
//!
//! ```toml
//! seed = 1
//! forwarding = "ecmp"          # ecmp | srv6 | usid
//! stop_ns = 0                  # 0: run until every flow finished
//!
//! [topology]                   # designer inputs (see `mrc-sim design --help`)
//! gpus = 16
//! gpus_per_server = 4
//! nic_gbps = 100
//! leaf_radix = 8
//! leaf_port_gbps = 100
//! spine_radix = 4
//! spine_port_gbps = 100
//! oversubscription = "1:1"
//! planes = 1
//! propagation_ns = 500
//!
//! [queue]
//! buffer_bytes = 1048576
//! ecn = "threshold"            # off | threshold | red
//! ecn_kmin_bytes = 102400      # threshold K, or RED Kmin
//! ecn_kmax_bytes = 409600      # RED Kmax
//! ecn_pmax = 0.2               # RED Pmax
//! trim_threshold_bytes = 65536 # absent: drop-tail
//!
//! [transport]
//! cc = "nscc"                  # dcqcn | swift | nscc | none
//! evs = 16
//! go_back_n = false
//! mtu_payload_bytes = 4096
//!
//! [traffic]                    # generated flows (optional)
//! pattern = "permutation"      # permutation | incast | all-to-all
//! bytes = 8388608
//! receiver = 0                 # incast only
//! senders = 15                 # incast only
//!
//! [[flows]]                    # explicit flows (optional)
//! src = 0
//! dst = 5
//! bytes = 1048576
//! start_ns = 0
//!
//! [[faults]]
//! at_ns = 100000
//! kind = "black-hole"          # link-down | link-up | black-hole | loss | corrupt | duplicate | jitter
//! links = "leaf0-spine1"       # all | fabric | NODE-NODE | a link id
//! p = 0.01                     # loss / corrupt / duplicate
//! max_ns = 2000                # jitter
//! ```

use crate::sim::limits::{RunSize, SimLimits};
use mrc_congestion::CcKind;
use mrc_fabric::sim::{
    DesignInput, EcnConfig, Fault, FaultKind, FlowSpec, Forwarding, Layout, LinkSelector,
    QueueConfig, SimConfig, TransportSpec, design,
};
use serde::Deserialize;

/// A parsed scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Seed of the run.
    #[serde(default = "one")]
    pub seed: u64,
    /// `ecmp`, `srv6` or `usid`.
    #[serde(default = "ecmp")]
    pub forwarding: String,
    /// Stop time, ns (0: none).
    #[serde(default)]
    pub stop_ns: u64,
    /// Designer inputs.
    pub topology: TopologyToml,
    /// Switch queues.
    #[serde(default)]
    pub queue: QueueToml,
    /// Transport.
    #[serde(default)]
    pub transport: TransportToml,
    /// Generated traffic.
    pub traffic: Option<TrafficToml>,
    /// Explicit flows.
    #[serde(default)]
    pub flows: Vec<FlowToml>,
    /// Faults.
    #[serde(default)]
    pub faults: Vec<FaultToml>,
}

fn one() -> u64 {
    1
}
fn ecmp() -> String {
    "ecmp".into()
}

/// `[topology]`: designer inputs plus the propagation delay.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyToml {
    /// GPUs (one NIC each).
    pub gpus: u32,
    /// GPUs per server.
    pub gpus_per_server: u32,
    /// NIC speed, Gb/s.
    pub nic_gbps: u32,
    /// Leaf ports.
    pub leaf_radix: u32,
    /// Leaf port speed, Gb/s.
    pub leaf_port_gbps: u32,
    /// Spine ports.
    pub spine_radix: u32,
    /// Spine port speed, Gb/s.
    pub spine_port_gbps: u32,
    /// `D:U`.
    #[serde(default = "one_to_one")]
    pub oversubscription: String,
    /// Planes.
    #[serde(default = "one_u32")]
    pub planes: u32,
    /// Link propagation delay, ns.
    #[serde(default = "prop")]
    pub propagation_ns: u64,
}

fn one_to_one() -> String {
    "1:1".into()
}
fn one_u32() -> u32 {
    1
}
fn prop() -> u64 {
    500
}

/// `[queue]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueToml {
    /// Buffer per port, bytes.
    pub buffer_bytes: Option<u64>,
    /// `off`, `threshold` or `red`.
    pub ecn: Option<String>,
    /// Threshold K or RED Kmin, bytes.
    pub ecn_kmin_bytes: Option<u64>,
    /// RED Kmax, bytes.
    pub ecn_kmax_bytes: Option<u64>,
    /// RED Pmax.
    pub ecn_pmax: Option<f64>,
    /// Trim threshold, bytes (absent: drop-tail).
    pub trim_threshold_bytes: Option<u64>,
    /// Control packets in the priority queue.
    pub control_priority: Option<bool>,
}

/// `[transport]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportToml {
    /// `dcqcn`, `swift`, `nscc` or `none`.
    pub cc: Option<String>,
    /// EVs per connection.
    pub evs: Option<u32>,
    /// Go-back-N.
    pub go_back_n: Option<bool>,
    /// Payload bytes per packet.
    pub mtu_payload_bytes: Option<u32>,
}

/// `[traffic]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficToml {
    /// `permutation`, `incast` or `all-to-all`.
    pub pattern: String,
    /// Bytes per flow.
    pub bytes: u64,
    /// Incast receiver.
    pub receiver: Option<u32>,
    /// Incast senders (hosts 1.. skipping the receiver).
    pub senders: Option<u32>,
}

/// `[[flows]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowToml {
    /// Sender host.
    pub src: u32,
    /// Receiver host.
    pub dst: u32,
    /// Bytes.
    pub bytes: u64,
    /// Start, ns.
    #[serde(default)]
    pub start_ns: u64,
    /// EVs of this flow.
    pub evs: Option<u32>,
}

/// `[[faults]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultToml {
    /// Time, ns.
    pub at_ns: u64,
    /// Kind.
    pub kind: String,
    /// Links.
    pub links: String,
    /// Probability.
    pub p: Option<f64>,
    /// Jitter bound, ns.
    pub max_ns: Option<u64>,
}

/// Largest link propagation delay and jitter a scenario may ask for, ns (1 s: a
/// datacenter link has microseconds; this bound keeps every event time far from u64
/// wrap-around).
pub const MAX_DELAY_NS: u64 = 1_000_000_000;

/// Latest flow start and fault time a scenario may ask for, ns (1 hour of virtual time;
/// a start near 2^64 wrapped and the flow "finished" in microseconds).
pub const MAX_TIME_NS: u64 = 3_600_000_000_000;

/// Smallest trim threshold beyond the payload, bytes: the switch trims when the queue plus
/// the frame exceeds the threshold, so a threshold below one full data frame (payload plus
/// Ethernet, IPv6, SRH, UDP and mrc headers, under 256 bytes) trims every data packet
/// and nothing is ever delivered.
pub const TRIM_HEADROOM_BYTES: u64 = 256;

/// Why a scenario cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Not valid TOML for this schema.
    #[error("scenario file: {0}")]
    Toml(#[from] toml::de::Error),
    /// A value out of its domain.
    #[error("scenario: {0}")]
    Invalid(String),
    /// The designer refused the topology.
    #[error("topology: {0}")]
    Design(#[from] mrc_fabric::sim::DesignError),
}

fn invalid(s: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid(s.into())
}

/// Everything the simulator needs.
#[derive(Clone, Debug)]
pub struct Built {
    /// The design the topology comes from.
    pub design: mrc_fabric::sim::FabricDesign,
    /// Topology shape.
    pub spec: mrc_fabric::sim::SpineLeafSpec,
    /// Simulator config.
    pub cfg: SimConfig,
    /// Flows.
    pub flows: Vec<FlowSpec>,
}

impl Scenario {
    /// Parses TOML text.
    ///
    /// Errors: [`ScenarioError::Toml`].
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Ok(toml::from_str(text)?)
    }

    /// Builds the run under the default [`SimLimits`].
    ///
    /// Errors: [`ScenarioError::Invalid`], [`ScenarioError::Design`].
    pub fn build(&self) -> Result<Built, ScenarioError> {
        self.build_within(&SimLimits::default())
    }

    /// Builds the run; every count (hosts, EVs, flows, fault events) and the memory
    /// estimate are checked against `limits` before anything is allocated for them.
    ///
    /// Errors: [`ScenarioError::Invalid`] (a limit's message names the flag that raises
    /// it), [`ScenarioError::Design`].
    pub fn build_within(&self, limits: &SimLimits) -> Result<Built, ScenarioError> {
        let t = &self.topology;
        if t.propagation_ns > MAX_DELAY_NS {
            // Event times are u64 ns: a delay near 2^64 wrapped, and packets arrived
            // before they were sent.
            return Err(invalid(format!(
                "topology.propagation_ns = {} is more than {MAX_DELAY_NS} (1 s)",
                t.propagation_ns
            )));
        }
        let input = DesignInput {
            gpus: t.gpus,
            gpus_per_server: t.gpus_per_server,
            nic_gbps: t.nic_gbps,
            leaf_radix: t.leaf_radix,
            leaf_port_gbps: t.leaf_port_gbps,
            spine_radix: t.spine_radix,
            spine_port_gbps: t.spine_port_gbps,
            oversubscription: t.oversubscription.parse()?,
            planes: t.planes,
            layout: Layout::SpineLeaf,
        };
        let d = design(&input)?;
        let spec = mrc_fabric::sim::SpineLeafSpec::from_design(&d, t.propagation_ns);
        limits.check_hosts(u64::from(spec.hosts)).map_err(invalid)?;
        limits
            .check_events(self.faults.len() as u64)
            .map_err(invalid)?;
        let forwarding = parse_forwarding(&self.forwarding)?;
        let q = &self.queue;
        let dq = QueueConfig::default();
        let kmin = q.ecn_kmin_bytes.unwrap_or(100 << 10);
        let ecn = match q.ecn.as_deref().unwrap_or("threshold") {
            "off" => EcnConfig::Off,
            "threshold" => EcnConfig::Threshold { k_bytes: kmin },
            "red" => {
                let kmax = q.ecn_kmax_bytes.unwrap_or(4 * kmin);
                let pmax = q.ecn_pmax.unwrap_or(0.2);
                if kmax <= kmin || !(0.0..=1.0).contains(&pmax) {
                    return Err(invalid(
                        "red needs ecn_kmax_bytes > ecn_kmin_bytes and 0 <= ecn_pmax <= 1",
                    ));
                }
                EcnConfig::Red {
                    kmin_bytes: kmin,
                    kmax_bytes: kmax,
                    pmax,
                }
            }
            other => {
                return Err(invalid(format!(
                    "ecn {other:?}: expected off, threshold or red"
                )));
            }
        };
        let queue = QueueConfig {
            buffer_bytes: q.buffer_bytes.unwrap_or(dq.buffer_bytes),
            ecn,
            trim_threshold_bytes: q.trim_threshold_bytes,
            priority_buffer_bytes: dq.priority_buffer_bytes,
            control_priority: q.control_priority.unwrap_or(true),
        };
        let tr = &self.transport;
        let mut transport = TransportSpec::default();
        let mtu = tr
            .mtu_payload_bytes
            .unwrap_or(transport.send.mtu_payload_bytes);
        let frame_bytes = u64::from(mtu) + TRIM_HEADROOM_BYTES;
        if queue.buffer_bytes < frame_bytes {
            return Err(invalid(format!(
                "queue.buffer_bytes = {} is less than one data frame ({frame_bytes} bytes: \
                 mtu_payload_bytes {mtu} + {TRIM_HEADROOM_BYTES}): every data packet would \
                 be dropped",
                queue.buffer_bytes
            )));
        }
        if let Some(t) = q.trim_threshold_bytes
            && t < frame_bytes
        {
            return Err(invalid(format!(
                "queue.trim_threshold_bytes = {t} is less than one data frame ({frame_bytes} \
                 bytes: mtu_payload_bytes {mtu} + {TRIM_HEADROOM_BYTES}): every data packet \
                 would be trimmed"
            )));
        }
        if let Some(cc) = &tr.cc {
            transport.cc = cc.parse::<CcKind>().map_err(|e| invalid(e.to_string()))?;
        }
        if let Some(e) = tr.evs {
            if e == 0 {
                return Err(invalid("transport.evs must be > 0"));
            }
            limits
                .check_evs("transport.evs", u64::from(e))
                .map_err(invalid)?;
            transport.evs = e;
        }
        transport.go_back_n = tr.go_back_n.unwrap_or(false);
        if let Some(m) = tr.mtu_payload_bytes {
            if !(256..=9000).contains(&m) {
                return Err(invalid("transport.mtu_payload_bytes must be 256..=9000"));
            }
            transport.send.mtu_payload_bytes = m;
        }
        let hosts = spec.hosts;
        let generated = self
            .traffic
            .as_ref()
            .map_or(0, |tf| traffic_count(tf, hosts));
        limits
            .check_flows(
                "traffic and [[flows]]",
                generated.saturating_add(self.flows.len() as u64),
            )
            .map_err(invalid)?;
        for f in &self.flows {
            if let Some(e) = f.evs {
                limits
                    .check_evs(&format!("flow {} -> {}: evs", f.src, f.dst), u64::from(e))
                    .map_err(invalid)?;
            }
        }
        let mut flows = Vec::new();
        if let Some(tf) = &self.traffic {
            flows.extend(traffic(tf, hosts, spec.hosts_per_leaf)?);
        }
        for f in &self.flows {
            if f.src >= hosts || f.dst >= hosts || f.src == f.dst {
                return Err(invalid(format!(
                    "flow {} -> {}: hosts are 0..{hosts} and must differ",
                    f.src, f.dst
                )));
            }
            if f.start_ns > MAX_TIME_NS {
                return Err(invalid(format!(
                    "flow {} -> {}: start_ns = {} is later than {MAX_TIME_NS} (1 hour)",
                    f.src, f.dst, f.start_ns
                )));
            }
            flows.push(FlowSpec {
                src: f.src,
                dst: f.dst,
                bytes: f.bytes,
                start_ns: f.start_ns,
                evs: f.evs,
            });
        }
        if flows.is_empty() {
            return Err(invalid("no flows: add [traffic] or [[flows]]"));
        }
        let window_bytes = u64::from(transport.send.max_outstanding_packets)
            .saturating_mul(u64::from(mtu) + crate::sim::limits::FRAME_OVERHEAD_BYTES);
        let mut size = RunSize {
            hosts: u64::from(hosts),
            flows: flows.len() as u64,
            ..RunSize::default()
        };
        for f in &flows {
            size.flow_bytes = size.flow_bytes.saturating_add(f.bytes);
            size.flow_evs = size
                .flow_evs
                .saturating_add(u64::from(f.evs.unwrap_or(transport.evs)));
            size.in_flight_bytes = size
                .in_flight_bytes
                .saturating_add(f.bytes.min(window_bytes));
        }
        limits.check_memory(&size).map_err(invalid)?;
        let faults = self
            .faults
            .iter()
            .map(parse_fault)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Built {
            design: d,
            spec,
            cfg: SimConfig {
                seed: self.seed,
                ecmp_seed: 0,
                queue,
                forwarding,
                transport,
                faults,
                stop_ns: self.stop_ns,
                pfc: None,
            },
            flows,
        })
    }
}

/// `ecmp`, `srv6`, `usid`.
///
/// Errors: [`ScenarioError::Invalid`].
pub fn parse_forwarding(s: &str) -> Result<Forwarding, ScenarioError> {
    match s {
        "ecmp" => Ok(Forwarding::Ecmp),
        "srv6" => Ok(Forwarding::Srv6),
        "usid" => Ok(Forwarding::Usid),
        o => Err(invalid(format!(
            "forwarding {o:?}: expected ecmp, srv6 or usid"
        ))),
    }
}

/// How many flows [`traffic`] would generate (before generating them; an unknown pattern
/// or a bad incast counts 0 here and is refused there).
fn traffic_count(t: &TrafficToml, hosts: u32) -> u64 {
    let h = u64::from(hosts);
    match t.pattern.as_str() {
        "permutation" => h,
        "incast" => u64::from(t.senders.unwrap_or(hosts.saturating_sub(1))).min(h),
        "all-to-all" => h.saturating_mul(h.saturating_sub(1)),
        _ => 0,
    }
}

/// Permutation (host i -> i + hosts_per_leaf, every flow crosses leaves), incast, or
/// all-to-all flows of `bytes`.
fn traffic(t: &TrafficToml, hosts: u32, per_leaf: u32) -> Result<Vec<FlowSpec>, ScenarioError> {
    let f = |src, dst| FlowSpec {
        src,
        dst,
        bytes: t.bytes,
        start_ns: 0,
        evs: None,
    };
    match t.pattern.as_str() {
        "permutation" => Ok(permutation(hosts, per_leaf)
            .into_iter()
            .map(|(s, d)| f(s, d))
            .collect()),
        "incast" => {
            let r = t.receiver.unwrap_or(0);
            let n = t.senders.unwrap_or(hosts - 1);
            if r >= hosts || n == 0 || n >= hosts {
                return Err(invalid(format!(
                    "incast: receiver < {hosts}, 0 < senders < {hosts}"
                )));
            }
            Ok((0..hosts)
                .filter(|&h| h != r)
                .take(n as usize)
                .map(|s| f(s, r))
                .collect())
        }
        "all-to-all" => Ok((0..hosts)
            .flat_map(|s| (0..hosts).filter(move |&d| d != s).map(move |d| (s, d)))
            .map(|(s, d)| f(s, d))
            .collect()),
        o => Err(invalid(format!(
            "traffic.pattern {o:?}: expected permutation, incast or all-to-all"
        ))),
    }
}

/// Host `i` sends to `(i + per_leaf) % hosts`: a permutation in which every flow crosses
/// leaves when there are at least two leaves.
pub fn permutation(hosts: u32, per_leaf: u32) -> Vec<(u32, u32)> {
    let shift = if per_leaf < hosts { per_leaf } else { 1 };
    (0..hosts).map(|i| (i, (i + shift) % hosts)).collect()
}

fn parse_fault(f: &FaultToml) -> Result<Fault, ScenarioError> {
    let p = || {
        let p =
            f.p.ok_or_else(|| invalid(format!("fault {}: needs p", f.kind)))?;
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid(format!("fault {}: p = {p} not in 0..=1", f.kind)));
        }
        Ok(p)
    };
    let kind = match f.kind.as_str() {
        "link-down" => FaultKind::LinkDown,
        "link-up" => FaultKind::LinkUp,
        "black-hole" => FaultKind::BlackHole,
        "loss" => FaultKind::Loss { p: p()? },
        "corrupt" => FaultKind::Corrupt { p: p()? },
        "duplicate" => FaultKind::Duplicate { p: p()? },
        "jitter" => FaultKind::Jitter {
            max_ns: match f.max_ns {
                None => return Err(invalid("fault jitter: needs max_ns")),
                Some(m) if m > MAX_DELAY_NS => {
                    return Err(invalid(format!(
                        "fault jitter: max_ns = {m} is more than {MAX_DELAY_NS} (1 s)"
                    )));
                }
                Some(m) => m,
            },
        },
        o => return Err(invalid(format!("fault kind {o:?} unknown"))),
    };
    let links = match f.links.as_str() {
        "all" => LinkSelector::All,
        "fabric" => LinkSelector::Fabric,
        s => {
            if let Ok(id) = s.parse::<u32>() {
                LinkSelector::Link(id)
            } else if let Some((a, b)) = s.split_once('-') {
                LinkSelector::Between(a.into(), b.into())
            } else {
                return Err(invalid(format!(
                    "fault links {s:?}: expected all, fabric, a link id or NODE-NODE"
                )));
            }
        }
    };
    if f.at_ns > MAX_TIME_NS {
        return Err(invalid(format!(
            "fault {}: at_ns = {} is later than {MAX_TIME_NS} (1 hour)",
            f.kind, f.at_ns
        )));
    }
    Ok(Fault {
        at_ns: f.at_ns,
        links,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = concat!(
        "seed = 3\n",
        include_str!("../../tests/fixtures/topology16.toml"),
        r#"[traffic]
pattern = "permutation"
bytes = 65536
[[faults]]
at_ns = 10
kind = "loss"
links = "all"
p = 0.01
"#
    );

    #[test]
    fn parses_and_builds() {
        let b = Scenario::parse(OK).unwrap().build().unwrap();
        assert_eq!((b.spec.hosts, b.spec.leaves, b.spec.spines), (16, 4, 4));
        assert_eq!(b.flows.len(), 16);
        assert_eq!((b.flows[0].src, b.flows[0].dst), (0, 4));
        assert_eq!(b.cfg.faults.len(), 1);
        assert_eq!(b.cfg.seed, 3);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert!(matches!(
            Scenario::parse("seed = ["),
            Err(ScenarioError::Toml(_))
        ));
        assert!(matches!(
            Scenario::parse(&OK.replace("seed = 3", "sead = 3")),
            Err(ScenarioError::Toml(_))
        ));
        let bad = Scenario::parse(&OK.replace("\"loss\"", "\"meteor\"")).unwrap();
        assert!(matches!(bad.build(), Err(ScenarioError::Invalid(_))));
        let bad =
            Scenario::parse(&OK.replace("leaf_port_gbps = 100", "leaf_port_gbps = 150")).unwrap();
        assert!(matches!(bad.build(), Err(ScenarioError::Design(_))));
    }
}

#[cfg(test)]
mod shipped {
    use super::*;

    #[test]
    fn shipped_scenarios_build() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let b = Scenario::parse(&std::fs::read_to_string(&p).unwrap())
                .and_then(|s| s.build())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!b.flows.is_empty());
            n += 1;
        }
        assert_eq!(n, 3);
    }
}
