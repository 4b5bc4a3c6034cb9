//! How an EV becomes the UDP source port of a RoCEv2 packet, the field ECMP hashes.
//!
//! RoCEv2 packets go to UDP port 4791; the source port is free for entropy and RoCEv2 NICs
//! put it in 0xC000..=0xFFFF (IBTA Annex A17.4.5.2). Who picks it differs by NIC:
//!
//! - **Flow-label NICs** (mlx5 kernel AHs, hns, irdma, and the Linux helper
//!   `rdma_flow_label_to_udp_sport`): a UD address handle whose GRH flow label is non-zero
//!   sends with source port `0xC000 | (fl[13:0] ^ fl[19:14])`; a zero flow label falls back
//!   to a fixed (mlx5: `r_roce_min_src_udp_port`) or random per-AH port. So the datapath
//!   gives every (remote, EV) pair its own AH with flow label [`flow_label_for_ev`], chosen
//!   so that EV `e` leaves on port `0xC000 + (e mod 16384)` exactly.
//! - **QPN NICs** (Soft-RoCE `rdma_rxe`, `rxe_qp_init_req`): the source port is fixed per
//!   QP, `0xC000 + hash_32(qpn, 14)`, and the AH does not change it. One UD QP per EV gives
//!   each EV its own port ([`rxe_udp_sport`]).
//!
//! Doing both (one QP per EV and one flow-labelled AH per remote and EV) makes the EV a
//! distinct 5-tuple on either kind. The switches then spread EVs over equal-cost uplinks by
//! their 5-tuple hash, as they spread TCP flows: with `N` EVs and `k` uplinks each uplink
//! carries about `N / k` EVs (a balls-into-bins spread, not an exact one; 16 or more EVs
//! per uplink keep the worst uplink within a few EVs of the mean), and the transport's
//! path health takes the EVs that hash onto a congested or failed link out of rotation.

/// Lowest RoCEv2 UDP source port (IBTA Annex A17.4.5.2; Linux
/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`).
pub const ROCEV2_SPORT_MIN: u16 = 0xC000;

/// The RoCEv2 UDP destination port (IANA).
pub const ROCEV2_DPORT: u16 = 4791;

/// Mask of the 20-bit GRH / IPv6 flow label.
pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// Source port a flow-label NIC derives from a non-zero flow label: the low 14 bits XOR
/// the high 6 bits, in 0xC000..=0xFFFF (Linux `rdma_flow_label_to_udp_sport`).
pub fn flow_label_to_udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & FLOW_LABEL_MASK;
    let low = fl & 0x3fff;
    let high = fl >> 14;
    ((low ^ high) as u16) | ROCEV2_SPORT_MIN
}

/// The flow label the datapath puts in the AH of EV `ev`: never zero (zero means "let the
/// NIC choose"), and [`flow_label_to_udp_sport`] of it is `0xC000 + (ev mod 16384)`.
pub fn flow_label_for_ev(ev: u32) -> u32 {
    // high 6 bits = 1, so the fold XORs the low bits with 1; pre-XOR to cancel it.
    (1 << 14) | ((ev & 0x3fff) ^ 1)
}

/// The source port Soft-RoCE (`rdma_rxe`) gives every packet of QP `qpn`:
/// `0xC000 + ((qpn * 0x61C88647) >> 18)` (Linux `hash_32(qpn, 14)`, golden-ratio
/// multiplicative hash).
pub fn rxe_udp_sport(qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x61C8_8647) >> (32 - 14);
    ROCEV2_SPORT_MIN + (h & 0x3fff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn flow_label_fold_exact() {
        assert_eq!(flow_label_to_udp_sport(0x00001), 0xC001);
        assert_eq!(flow_label_to_udp_sport(0xFC000), 0xC03F);
        assert_eq!(flow_label_to_udp_sport(0x12345), 0xC000 | (0x2345 ^ 0x4));
        // Bits above the 20-bit label are ignored.
        assert_eq!(flow_label_to_udp_sport(0xFFF0_0001), 0xC001);
    }

    #[test]
    fn ev_maps_to_port_49152_plus_ev() {
        for ev in [0u32, 1, 2, 255, 16383] {
            let fl = flow_label_for_ev(ev);
            assert_ne!(fl, 0);
            assert_eq!(fl & !FLOW_LABEL_MASK, 0);
            assert_eq!(u32::from(flow_label_to_udp_sport(fl)), 0xC000 + ev);
        }
        // Wraps every 16384 EVs.
        assert_eq!(flow_label_to_udp_sport(flow_label_for_ev(16384)), 0xC000);
        let ports: HashSet<u16> = (0..256)
            .map(|ev| flow_label_to_udp_sport(flow_label_for_ev(ev)))
            .collect();
        assert_eq!(ports.len(), 256);
    }

    #[test]
    fn rxe_port_from_qpn_exact() {
        // 17 * 0x61C88647 = 0x7E50_EAB7 (mod 2^32); >> 18 = 0x1F94.
        assert_eq!(rxe_udp_sport(17), 0xC000 + 0x1F94);
        assert_eq!(rxe_udp_sport(0), 0xC000);
        // Consecutive QPNs, as a device hands them out, land on distinct ports.
        let ports: HashSet<u16> = (0x11..0x11 + 256).map(rxe_udp_sport).collect();
        assert_eq!(ports.len(), 256);
        assert!(ports.iter().all(|&p| p >= ROCEV2_SPORT_MIN));
    }
}
