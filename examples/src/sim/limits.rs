//! Limits checked before anything is allocated (issue 17, DESIGN.md section 8): every
//! count a scenario file or the command line gives `mrc-sim` (EVs, flows, hosts, fault
//! events) and an estimate of the memory a run needs, each refused with a message naming
//! the limit and the flag that raises it. Before, `evs = 4000000000` in a scenario or
//! `trace --evs 4294967295` reached 3 GB in seconds, and an all-to-all at 1024 GPUs passed
//! 3 GB in 2.7 s with no warning.

use clap::Args;

/// Default `--max-evs`: EVs per flow (the transport takes at most 65535).
pub const DEFAULT_MAX_EVS: u32 = 4096;
/// Default `--max-flows`.
pub const DEFAULT_MAX_FLOWS: u64 = 65_536;
/// Default `--max-hosts` (hosts = GPUs = NICs of one plane).
pub const DEFAULT_MAX_HOSTS: u32 = 65_536;
/// Default `--max-events`: fault events of a scenario.
pub const DEFAULT_MAX_EVENTS: u64 = 65_536;
/// Default `--max-memory-mb`: estimated memory of a run, MiB.
pub const DEFAULT_MAX_MEMORY_MB: u64 = 2048;

/// Memory of one transport connection besides its EVs, bytes (receive window bitmap,
/// message and retransmit queues at their usual sizes; a round upper figure).
pub const CONN_BASE_BYTES: u64 = 16 * 1024;
/// Memory per EV of one connection, bytes (path state and statistics).
pub const CONN_PER_EV_BYTES: u64 = 256;
/// Memory of one simulated host, bytes (NIC queue and tables, not counting connections).
pub const HOST_BYTES: u64 = 64 * 1024;
/// Bytes of a data frame besides its payload (Ethernet / IPv6 / UDP / mrc headers,
/// rounded up), for the in-flight estimate.
pub const FRAME_OVERHEAD_BYTES: u64 = 256;

/// The limits (`mrc-sim run` / `trace` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Args)]
pub struct SimLimits {
    /// Most EVs per flow (scenario `transport.evs` / `[[flows]] evs`, `trace --evs`).
    #[arg(long = "max-evs", value_name = "N", default_value_t = DEFAULT_MAX_EVS)]
    pub max_evs: u32,
    /// Most flows in a scenario (generated and explicit).
    #[arg(long = "max-flows", value_name = "N", default_value_t = DEFAULT_MAX_FLOWS)]
    pub max_flows: u64,
    /// Most hosts in the designed fabric.
    #[arg(long = "max-hosts", value_name = "N", default_value_t = DEFAULT_MAX_HOSTS)]
    pub max_hosts: u32,
    /// Most fault events in a scenario.
    #[arg(long = "max-events", value_name = "N", default_value_t = DEFAULT_MAX_EVENTS)]
    pub max_events: u64,
    /// Most memory a run may need by the estimate (two regions per flow, connections,
    /// hosts, frames in flight), MiB.
    #[arg(long = "max-memory-mb", value_name = "MIB", default_value_t = DEFAULT_MAX_MEMORY_MB)]
    pub max_memory_mb: u64,
}

impl Default for SimLimits {
    fn default() -> Self {
        SimLimits {
            max_evs: DEFAULT_MAX_EVS,
            max_flows: DEFAULT_MAX_FLOWS,
            max_hosts: DEFAULT_MAX_HOSTS,
            max_events: DEFAULT_MAX_EVENTS,
            max_memory_mb: DEFAULT_MAX_MEMORY_MB,
        }
    }
}

/// What a run holds, for [`estimate_bytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSize {
    /// Hosts.
    pub hosts: u64,
    /// Flows.
    pub flows: u64,
    /// Sum of the flows' bytes.
    pub flow_bytes: u64,
    /// Sum over flows of their EVs.
    pub flow_evs: u64,
    /// Sum over flows of the bytes one may have in flight (at most its bytes, at most its
    /// send window of full frames).
    pub in_flight_bytes: u64,
}

/// Estimated bytes of a run: every flow registers a source and a destination region of
/// its bytes and two connections; hosts; frames in flight. Saturating (an absurd input
/// gives `u64::MAX`, which any limit refuses).
pub fn estimate_bytes(r: &RunSize) -> u64 {
    let conns = r
        .flows
        .saturating_mul(2)
        .saturating_mul(CONN_BASE_BYTES)
        .saturating_add(
            r.flow_evs
                .saturating_mul(2)
                .saturating_mul(CONN_PER_EV_BYTES),
        );
    r.flow_bytes
        .saturating_mul(2)
        .saturating_add(conns)
        .saturating_add(r.hosts.saturating_mul(HOST_BYTES))
        .saturating_add(r.in_flight_bytes)
}

impl SimLimits {
    /// EVs of one flow (`what` names where the value came from).
    ///
    /// # Errors
    /// A message naming the value, the limit and `--max-evs`.
    pub fn check_evs(&self, what: &str, evs: u64) -> Result<(), String> {
        if evs > u64::from(self.max_evs) {
            return Err(format!(
                "{what} = {evs} is more than the limit of {} EVs (--max-evs raises it; the \
                 transport takes at most 65535)",
                self.max_evs
            ));
        }
        Ok(())
    }

    /// Flows of a scenario.
    ///
    /// # Errors
    /// A message naming the count, the limit and `--max-flows`.
    pub fn check_flows(&self, what: &str, flows: u64) -> Result<(), String> {
        if flows > self.max_flows {
            return Err(format!(
                "{what}: {flows} flows are more than the limit of {} (--max-flows raises it)",
                self.max_flows
            ));
        }
        Ok(())
    }

    /// Hosts of a design.
    ///
    /// # Errors
    /// A message naming the count, the limit and `--max-hosts`.
    pub fn check_hosts(&self, hosts: u64) -> Result<(), String> {
        if hosts > u64::from(self.max_hosts) {
            return Err(format!(
                "the design has {hosts} hosts, more than the limit of {} (--max-hosts raises it)",
                self.max_hosts
            ));
        }
        Ok(())
    }

    /// Fault events of a scenario.
    ///
    /// # Errors
    /// A message naming the count, the limit and `--max-events`.
    pub fn check_events(&self, events: u64) -> Result<(), String> {
        if events > self.max_events {
            return Err(format!(
                "{events} fault events are more than the limit of {} (--max-events raises it)",
                self.max_events
            ));
        }
        Ok(())
    }

    /// The memory estimate of a run.
    ///
    /// # Errors
    /// A message with the estimate, its biggest parts, the limit and `--max-memory-mb`.
    pub fn check_memory(&self, r: &RunSize) -> Result<(), String> {
        let est = estimate_bytes(r);
        let limit = self.max_memory_mb.saturating_mul(1 << 20);
        if est > limit {
            return Err(format!(
                "the run would need about {} MiB ({} flows moving {} MiB, each with a source \
                 and a destination region; {} hosts), more than the limit of {} MiB \
                 (--max-memory-mb raises it)",
                est >> 20,
                r.flows,
                r.flow_bytes >> 20,
                r.hosts,
                self.max_memory_mb
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_names_its_flag() {
        let l = SimLimits::default();
        assert_eq!(
            l.check_evs("transport.evs", 4_000_000_000).unwrap_err(),
            "transport.evs = 4000000000 is more than the limit of 4096 EVs (--max-evs raises \
             it; the transport takes at most 65535)"
        );
        assert!(l.check_evs("x", 4096).is_ok());
        assert_eq!(
            l.check_flows("traffic all-to-all", 1024 * 1023)
                .unwrap_err(),
            "traffic all-to-all: 1047552 flows are more than the limit of 65536 (--max-flows \
             raises it)"
        );
        assert!(l.check_hosts(65_537).unwrap_err().contains("--max-hosts"));
        assert!(l.check_events(65_537).unwrap_err().contains("--max-events"));
        let r = RunSize {
            hosts: 16,
            flows: 16,
            flow_bytes: 16 << 20,
            flow_evs: 256,
            in_flight_bytes: 16 << 20,
        };
        // 2 x 16 MiB of regions + 32 x 16 KiB + 512 x 256 + 16 x 64 KiB + 16 MiB.
        assert_eq!(
            estimate_bytes(&r),
            (32 << 20) + 32 * 16384 + 512 * 256 + 16 * 65536 + (16 << 20)
        );
        assert!(l.check_memory(&r).is_ok());
        let huge = RunSize {
            flow_bytes: u64::MAX,
            ..r
        };
        assert_eq!(estimate_bytes(&huge), u64::MAX);
        assert!(
            l.check_memory(&huge)
                .unwrap_err()
                .ends_with("more than the limit of 2048 MiB (--max-memory-mb raises it)")
        );
    }
}
