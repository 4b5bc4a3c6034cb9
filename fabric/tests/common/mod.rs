//! Shared setup of the simulator tests.
#![allow(dead_code)]

use mrc_fabric::sim::{LinkSpec, QueueConfig, SimConfig, Simulator, SpineLeafSpec, Topology};

/// 16 hosts, 4 leaves, 4 spines, 100 Gb/s, 500 ns links.
pub fn spec16() -> SpineLeafSpec {
    SpineLeafSpec {
        hosts: 16,
        leaves: 4,
        spines: 4,
        hosts_per_leaf: 4,
        uplinks_per_leaf: 4,
        host_link: LinkSpec::gbps(100, 500),
        fabric_link: LinkSpec::gbps(100, 500),
    }
}

pub fn sim16(cfg: SimConfig) -> Simulator {
    Simulator::new(Topology::spine_leaf(&spec16()).unwrap(), cfg).unwrap()
}

pub fn cfg(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        queue: QueueConfig::default(),
        ..SimConfig::default()
    }
}
