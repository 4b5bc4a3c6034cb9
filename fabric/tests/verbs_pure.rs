//! Property tests of the verbs datapath's pure parts (no device, no feature needed): buffer
//! pool against a model, send-queue signalling invariants, GRH and address parsing of
//! arbitrary bytes.

use mrc_fabric::verbs::addr::{EndpointAddr, QPN_MASK};
use mrc_fabric::verbs::batch::{SendQueue, WrId};
use mrc_fabric::verbs::grh::{GRH_BYTES, GrhError, split_receive};
use mrc_fabric::verbs::pool::{PoolError, SlotId, SlotPool};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::net::Ipv6Addr;

proptest! {
    #[test]
    fn pool_matches_a_set_model(slots in 1u32..64, ops in prop::collection::vec((any::<bool>(), 0u32..70), 0..300)) {
        let mut p = SlotPool::new(slots, 128).unwrap();
        let mut lent = BTreeSet::new();
        let (mut allocs, mut frees, mut exhausted, mut double) = (0u64, 0u64, 0u64, 0u64);
        for (is_alloc, idx) in ops {
            if is_alloc {
                match p.alloc() {
                    Ok(s) => {
                        prop_assert!(lent.insert(s.0), "slot {} lent twice", s.0);
                        allocs += 1;
                    }
                    Err(e) => {
                        prop_assert_eq!(e, PoolError::Exhausted { slots });
                        prop_assert_eq!(lent.len() as u32, slots);
                        exhausted += 1;
                    }
                }
            } else {
                let r = p.free(SlotId(idx));
                if idx >= slots {
                    prop_assert_eq!(r, Err(PoolError::OutOfRange { slot: idx, slots }));
                } else if lent.remove(&idx) {
                    prop_assert_eq!(r, Ok(()));
                    frees += 1;
                } else {
                    prop_assert_eq!(r, Err(PoolError::DoubleFree(idx)));
                    double += 1;
                }
            }
            prop_assert_eq!(p.in_use() as usize, lent.len());
        }
        let st = p.stats();
        prop_assert_eq!((st.allocs, st.frees, st.exhausted, st.double_frees), (allocs, frees, exhausted, double));
    }

    #[test]
    fn send_queue_never_overfills_and_a_full_queue_always_has_a_signalled_wr(
        depth in 1u32..64,
        every_frac in 0.0f64..1.0,
        ops in prop::collection::vec((0usize..40, any::<bool>(), any::<bool>()), 1..200),
    ) {
        let every = 1 + ((depth - 1) as f64 * every_frac) as u32;
        let mut sq = SendQueue::new(depth, every).unwrap();
        let mut plan = Vec::new();
        let mut fifo: std::collections::VecDeque<(WrId, bool)> = Default::default();
        let mut next_slot = 0u32;
        let mut unsignalled_run = 0u32;
        for (n, force, complete) in ops {
            let ids: Vec<WrId> = (0..n).map(|_| { next_slot += 1; WrId::new(0, next_slot) }).collect();
            let room = sq.room();
            let accepted = sq.plan_chain(&ids, force, &mut plan);
            prop_assert_eq!(accepted, n.min(room));
            for (i, w) in plan.iter().enumerate() {
                prop_assert_eq!(w.wr_id, ids[i]);
                prop_assert_eq!(w.next, if i + 1 == accepted { None } else { Some(i + 1) });
                // Never more than `every` WRs in a row without a signal.
                unsignalled_run = if w.signalled { 0 } else { unsignalled_run + 1 };
                prop_assert!(unsignalled_run < every);
                fifo.push_back((w.wr_id, w.signalled));
            }
            if force && accepted > 0 {
                prop_assert!(plan[accepted - 1].signalled);
            }
            prop_assert!(sq.outstanding() <= depth as usize);
            if sq.outstanding() == depth as usize {
                prop_assert!(fifo.iter().any(|&(_, s)| s), "full queue without a signalled WR");
            }
            if complete {
                if let Some(pos) = fifo.iter().position(|&(_, s)| s) {
                    let id = fifo[pos].0;
                    let mut retired = Vec::new();
                    prop_assert_eq!(sq.on_completion(id, |w| retired.push(w)), Ok(pos + 1));
                    let expect: Vec<WrId> = fifo.drain(..=pos).map(|(w, _)| w).collect();
                    prop_assert_eq!(retired, expect);
                }
            }
            prop_assert_eq!(sq.outstanding(), fifo.len());
        }
        let st = sq.stats();
        prop_assert_eq!(st.posted_wrs, st.retired_wrs + fifo.len() as u64);
    }

    #[test]
    fn any_receive_bytes_split_or_typed_error(buf in prop::collection::vec(any::<u8>(), 0..120), byte_len in 0usize..200) {
        match split_receive(&buf, byte_len) {
            Ok((_, payload)) => {
                prop_assert!(byte_len >= GRH_BYTES && buf.len() >= GRH_BYTES);
                prop_assert_eq!(payload.len(), byte_len.min(buf.len()) - GRH_BYTES);
            }
            Err(GrhError::Short { len_bytes }) => {
                prop_assert!(byte_len < GRH_BYTES || buf.len() < GRH_BYTES);
                prop_assert!(len_bytes < GRH_BYTES);
            }
            Err(GrhError::UnknownVersion { first_nibble }) => {
                prop_assert_ne!(first_nibble, 6);
            }
        }
    }

    #[test]
    fn any_address_bytes_decode_or_typed_error(b in prop::collection::vec(any::<u8>(), 0..80)) {
        if let Ok(a) = EndpointAddr::decode(&b) {
            prop_assert_eq!(a.encode().unwrap(), b);
        }
    }

    #[test]
    fn endpoint_addresses_round_trip(gid in any::<[u8; 16]>(), lid in any::<u16>(), qkey in any::<u32>(),
                                     qpns in prop::collection::vec(any::<u32>(), 1..40)) {
        let a = EndpointAddr {
            gid: Ipv6Addr::from(gid),
            lid,
            qkey,
            qpns: qpns.iter().map(|q| q & QPN_MASK).collect(),
        };
        let b = a.encode().unwrap();
        prop_assert_eq!(b.len(), 32 + 4 * a.qpns.len());
        prop_assert_eq!(EndpointAddr::decode(&b).unwrap(), a);
    }
}
