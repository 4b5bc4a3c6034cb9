//! `--srv6 srh|usid`: the segment list of every EV socket of a client on the testbed of
//! `testbed/mrc-testbed.sh` (2 hosts, 2 leaves, 4 spines), so EV socket `s` crosses spine
//! `s % 4` (with `--burst-size 1`: EV `i` through spine `i % 4`). The addressing plan below
//! mirrors the script's header; both must change together.
//!
//! - `srh`: an SRH with path `[spine SID, destination leaf SID, server]` (RFC 8754), each SID
//!   a seg6local `End` on its switch.
//! - `usid`: the uSID container `fd00:75:<spine uSID>:<leaf uSID>::` (RFC 9800, 32-bit
//!   block, 16-bit uSIDs, `End` with the NEXT-C-SID flavour) as the active segment, the
//!   server as the only other entry (the leaf ends the container and takes the next SRH
//!   segment, so the UDP checksum's final destination is the server).
//!
//! The kernel takes the header as a sticky `IPV6_RTHDR` and writes the connected address
//! (the server) into segment 0 of every packet.

use clap::ValueEnum;
use mrc_fabric::srv6::{LocatorBlock, SrhRepr, UsidContainer};
use mrc_transport::path::PathState;
use pnet_packet::ip::IpNextHeaderProtocols;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv6Addr};

/// How EVs are steered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Srv6Mode {
    /// SRH segment list of classic 128-bit SIDs.
    Srh,
    /// uSID container as the destination address.
    Usid,
}

/// Spines of the testbed.
pub const SPINES: u16 = 4;
/// Leaves (one host each) of the testbed.
pub const LEAVES: u16 = 2;
/// The testbed's /48: host `i` is `fd00:6d72:63:1i::2`.
const PLAN: [u16; 3] = [0xfd00, 0x6d72, 0x63];
/// uSID locator block, 32 bits: `fd00:75::/32`.
const USID_BLOCK: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x75, 0, 0, 0, 0, 0, 0);

/// End SID of spine `j`: `fd00:6d72:63:e0j::`.
pub fn spine_sid(j: u16) -> Ipv6Addr {
    Ipv6Addr::new(PLAN[0], PLAN[1], PLAN[2], 0xe00 + j, 0, 0, 0, 0)
}

/// End SID of leaf `i`: `fd00:6d72:63:e1i::`.
pub fn leaf_sid(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(PLAN[0], PLAN[1], PLAN[2], 0xe10 + i, 0, 0, 0, 0)
}

/// uSID of spine `j` (`0xe00j`) and of leaf `i` (`0xe10i`).
pub fn spine_usid(j: u16) -> u16 {
    0xe000 + j
}

/// uSID of leaf `i`.
pub fn leaf_usid(i: u16) -> u16 {
    0xe100 + i
}

/// The leaf a testbed host address hangs off: `fd00:6d72:63:1i::2` -> `i`.
///
/// # Errors
/// A message when `server` is not a testbed host.
pub fn leaf_of(server: IpAddr) -> Result<u16, String> {
    let IpAddr::V6(a) = server else {
        return Err(format!("--srv6 needs an IPv6 server address, got {server}"));
    };
    let s = a.segments();
    let host = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 2);
    if s[..3] != PLAN || !(0x10..0x10 + LEAVES).contains(&s[3]) || host != a {
        return Err(format!(
            "--srv6: {a} is not a testbed host (fd00:6d72:63:10::2 or fd00:6d72:63:11::2)"
        ));
    }
    Ok(s[3] - 0x10)
}

/// The header of spine `j` towards `server` behind leaf `leaf`.
///
/// # Errors
/// The SRH or uSID error, as text.
pub fn segment_list(
    mode: Srv6Mode,
    server: Ipv6Addr,
    leaf: u16,
    j: u16,
) -> Result<SrhRepr, String> {
    let path = match mode {
        Srv6Mode::Srh => vec![spine_sid(j), leaf_sid(leaf), server],
        Srv6Mode::Usid => {
            let block = LocatorBlock::new(USID_BLOCK, 32).map_err(|e| e.to_string())?;
            let c = UsidContainer::build(block, &[spine_usid(j), leaf_usid(leaf)])
                .map_err(|e| e.to_string())?;
            vec![c.address(), server]
        }
    };
    SrhRepr::for_path(IpNextHeaderProtocols::Udp, &path)
        .map(|(r, _)| r)
        .map_err(|e| e.to_string())
}

/// One header per spine, in spine order, for the EV sockets of a client of `server`
/// (`paths` EVs, `burst` EVs a socket): socket `s` takes entry `s % len`. Fewer sockets
/// than spines use only the first spines.
///
/// # Errors
/// `server` is not a testbed host, or a header does not build.
pub fn segment_lists(
    mode: Srv6Mode,
    server: IpAddr,
    paths: u32,
    burst: u32,
) -> Result<Vec<SrhRepr>, String> {
    let leaf = leaf_of(server)?;
    let IpAddr::V6(dst) = server else {
        return Err("unreachable: leaf_of checked IPv6".into());
    };
    let sockets = paths.div_ceil(burst.max(1));
    let n = u16::try_from(sockets.min(u32::from(SPINES))).unwrap_or(SPINES);
    (0..n).map(|j| segment_list(mode, dst, leaf, j)).collect()
}

/// The report's name of a path state.
pub fn state_name(s: PathState) -> &'static str {
    match s {
        PathState::Good => "GOOD",
        PathState::Skip { .. } => "SKIP",
        PathState::AssumedBad => "ASSUMED_BAD",
        PathState::Denied => "DENIED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn srh_lists_name_each_spine_then_the_leaf() {
        let l = segment_lists(Srv6Mode::Srh, a("fd00:6d72:63:11::2").into(), 16, 1).unwrap();
        assert_eq!(l.len(), 4);
        for (j, r) in l.iter().enumerate() {
            // Stored reversed (RFC 8754 section 2): final destination first.
            assert_eq!(
                r.segments,
                vec![
                    a("fd00:6d72:63:11::2"),
                    a("fd00:6d72:63:e11::"),
                    a(&format!("fd00:6d72:63:e0{j}::"))
                ]
            );
            assert_eq!(r.segments_left, 2);
            assert_eq!(
                r.active_segment(),
                Some(a(&format!("fd00:6d72:63:e0{j}::")))
            );
        }
    }

    #[test]
    fn usid_lists_carry_one_container_per_spine() {
        let l = segment_lists(Srv6Mode::Usid, a("fd00:6d72:63:10::2").into(), 16, 2).unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(
            l[3].segments,
            vec![a("fd00:6d72:63:10::2"), a("fd00:75:e003:e100::")]
        );
        assert_eq!(l[3].segments_left, 1);
        assert_eq!(l[0].active_segment(), Some(a("fd00:75:e000:e100::")));
    }

    #[test]
    fn few_sockets_use_the_first_spines() {
        let l = segment_lists(Srv6Mode::Srh, a("fd00:6d72:63:11::2").into(), 4, 2).unwrap();
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn non_testbed_servers_are_refused() {
        for s in [
            "127.0.0.1",
            "::1",
            "fd00:6d72:63:12::2",
            "fd00:6d72:63:11::3",
        ] {
            let e = segment_lists(Srv6Mode::Srh, s.parse().unwrap(), 16, 1).unwrap_err();
            assert!(e.contains("--srv6"), "{s}: {e}");
        }
    }

    #[test]
    fn state_names_match_the_spec_spelling() {
        assert_eq!(state_name(PathState::AssumedBad), "ASSUMED_BAD");
        assert_eq!(state_name(PathState::Skip { until_pick: 3 }), "SKIP");
        assert_eq!(state_name(PathState::Good), "GOOD");
        assert_eq!(state_name(PathState::Denied), "DENIED");
    }
}
