use super::*;
use crate::path::{PathState, Selection};

const MTU: u32 = 4096;

fn spec(wr_id: u64, len: u32) -> MsgSpec {
    MsgSpec {
        wr_id,
        kind: MsgKind::Write {
            remote_addr: 0x10_0000,
            rkey: 7,
        },
        imm: None,
        local_lkey: 1,
        local_addr: 0x1_0000,
        len,
    }
}

fn sinfo(cum: u64, base: u64, bitmap: u64, echo: Option<(usize, u32)>) -> SackInfo {
    SackInfo {
        cum: Psn::from_seq(cum),
        base: Psn::from_seq(base),
        bitmap,
        echo,
    }
}

struct Rig {
    st: SendState,
    paths: PathTable,
    stats: ConnStats,
}

impl Rig {
    fn new(initial: u32, evs: &[u32]) -> Rig {
        Rig {
            // A 50 us reorder-window floor (the default is 0: the window follows the
            // measured RTTs), so the RACK deadlines below are round numbers.
            st: SendState::new(
                Psn::new(initial),
                SendConfig {
                    min_reorder_window_ns: 50_000,
                    ..SendConfig::default()
                },
            ),
            paths: PathTable::new(evs, Selection::RoundRobin, 1),
            stats: ConnStats::default(),
        }
    }

    /// Sends up to `n` packets at `now`; returns (seq, ev index) of each.
    fn send(&mut self, now: u64, n: usize) -> Vec<(u64, usize)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(tx) = self.st.next_tx(u64::MAX) else {
                break;
            };
            let ev = self.paths.select(tx.avoid_ev).unwrap();
            self.st.on_transmit(&tx, now, ev, now as u32);
            out.push((tx.seq, ev));
        }
        out
    }

    fn sack(
        &mut self,
        now: u64,
        cum: u64,
        base: u64,
        bits: u64,
        echo: Option<(usize, u32)>,
    ) -> AckOutcome {
        self.st
            .on_sack(
                now,
                sinfo(cum, base, bits, echo),
                &mut self.paths,
                &mut self.stats,
            )
            .unwrap()
    }
}

#[test]
fn segmentation_psns_and_msns_across_the_wrap() {
    let mut r = Rig::new(0xFF_FFFE, &[0]);
    r.st.post(spec(1, 10_000));
    assert_eq!(r.st.post(spec(2, 0)), 1);
    let mut txs = Vec::new();
    while let Some(tx) = r.st.next_tx(u64::MAX) {
        r.st.on_transmit(&tx, 0, 0, 0);
        txs.push(tx);
    }
    let got: Vec<(u32, u64, u32, u32, bool, bool)> = txs
        .iter()
        .map(|t| (t.psn().value(), t.msn, t.offset, t.len, t.first, t.last))
        .collect();
    assert_eq!(
        got,
        vec![
            (0xFF_FFFE, 0, 0, 4096, true, false),
            (0xFF_FFFF, 0, 4096, 4096, false, false),
            (0x00_0000, 0, 8192, 1808, false, true),
            (0x00_0001, 1, 0, 0, true, true),
        ]
    );
    assert_eq!(r.st.bytes_in_flight(), 10_000);
    assert_eq!(r.st.snd_nxt(), 0x100_0002);
}

#[test]
fn congestion_window_and_peer_window_gate_new_data() {
    let mut st = SendState::new(
        Psn::new(0),
        SendConfig {
            max_outstanding_packets: 3,
            ..SendConfig::default()
        },
    );
    st.post(spec(1, 5 * MTU));
    let tx = st.next_tx(8192).unwrap();
    st.on_transmit(&tx, 0, 0, 0);
    let tx = st.next_tx(8192).unwrap();
    st.on_transmit(&tx, 0, 0, 0);
    assert_eq!(st.next_tx(8192), None); // 8192 + 4096 > cwnd
    let tx = st.next_tx(1 << 20).unwrap();
    st.on_transmit(&tx, 0, 0, 0);
    assert_eq!(st.next_tx(1 << 20), None); // 3 outstanding = peer window
}

#[test]
fn acceptance_6_sack_of_original_empties_the_queue() {
    let mut r = Rig::new(0, &[0, 1]);
    r.st.post(spec(1, 10 * MTU));
    r.send(1_000, 10);
    assert_eq!(r.st.bytes_in_flight(), 40_960);
    // NACK for 5: queued
    assert_eq!(r.st.queue_retransmit(5), Some((4096, 1)));
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![5]);
    assert_eq!(r.st.bytes_in_flight(), 40_960);
    // SACK for the original arrives before the resend
    let out = r.sack(2_000, 0, 0, 1 << 5, Some((1, 1_000)));
    assert_eq!(out.acked_packets, 1);
    assert_eq!(out.acked_bytes, 4096);
    assert_eq!(out.spurious, 0);
    assert_eq!(r.st.retransmit_queue().count(), 0);
    assert_eq!(r.st.bytes_in_flight(), 40_960 - 4096);
    // 5 is never resent: nothing left to send
    assert_eq!(r.st.next_tx(u64::MAX), None);
    // a NACK for an already acknowledged PSN changes nothing
    assert_eq!(r.st.queue_retransmit(5), None);
    assert_eq!(r.st.retransmit_queue().count(), 0);
    assert_eq!(r.st.bytes_in_flight(), 40_960 - 4096);
    assert_eq!(r.stats.acked, 1);
}

#[test]
fn invalid_sacks_change_nothing() {
    let mut r = Rig::new(100, &[0]);
    r.st.post(spec(1, 4 * MTU));
    r.send(0, 4);
    let e =
        r.st.on_sack(1, sinfo(105, 100, 0, None), &mut r.paths, &mut r.stats);
    assert_eq!(e, Err(InvalidAck));
    let e =
        r.st.on_sack(1, sinfo(100, 100, 1 << 4, None), &mut r.paths, &mut r.stats);
    assert_eq!(e, Err(InvalidAck));
    assert_eq!(r.st.bytes_in_flight(), 4 * 4096);
    assert_eq!(r.st.snd_una(), 100);
}

#[test]
fn acceptance_5_reordering_within_the_window_is_not_loss() {
    // two EVs; 0 goes on EV 0 (slow), 1..=4 alternate; the SACKs for 1..=4 arrive first
    let mut r = Rig::new(0, &[0, 1]);
    r.st.post(spec(1, 5 * MTU));
    for (i, t) in [0u64, 1_000, 2_000, 3_000, 4_000].iter().enumerate() {
        let s = r.send(*t, 1);
        assert_eq!(s, vec![(i as u64, i % 2)]);
    }
    // 1..=4 acked at 14_000 (RTT 10 us for packet 4)
    let out = r.sack(14_000, 0, 0, 0b11110, Some((0, 4_000)));
    assert_eq!(out.acked_packets, 4);
    assert_eq!(out.rtt_sample_ns, Some(10_000));
    // reorder window = max(50 us floor, min_rtt/4) = 50 us: 0 lost only at 0 + 10 + 50 us
    let l = r.st.detect_losses(14_000, &mut r.paths, &mut r.stats);
    assert_eq!(l, LossOutcome::default());
    assert_eq!(r.st.rack_timer_ns(), Some(60_000));
    // 0 arrives on the slow EV 30 us late and is acked at 40 us
    let out = r.sack(40_000, 5, 0, 0, Some((0, 0)));
    assert_eq!(out.acked_packets, 1);
    assert_eq!(out.spurious, 0);
    let l = r.st.detect_losses(40_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 0);
    assert_eq!(r.stats.rack_losses, 0);
    assert_eq!(r.stats.retransmitted, 0);
    assert_eq!(r.st.next_tx(u64::MAX), None);
    assert_eq!(
        r.st.poll_completion().map(|c| (c.wr_id, c.status)),
        Some((1, WcStatus::Success))
    );
}

#[test]
fn acceptance_5_early_loss_then_late_original_is_spurious() {
    let mut r = Rig::new(0, &[0, 1]);
    r.st.post(spec(1, 5 * MTU));
    for t in [0u64, 1_000, 2_000, 3_000, 4_000] {
        r.send(t, 1);
    }
    r.sack(14_000, 0, 0, 0b11110, Some((0, 4_000)));
    // the original of 0 is later than the reorder window: declared lost at 60 us
    let l = r.st.detect_losses(60_000, &mut r.paths, &mut r.stats);
    assert_eq!(
        l,
        LossOutcome {
            lost_packets: 1,
            lost_bytes: 4096,
            failed: false
        }
    );
    // one loss is not a path failure: EV 0 stays Good, its loss counted
    assert_eq!(r.paths.state_of(0), Some(PathState::Good));
    assert_eq!(r.paths.paths()[0].consecutive_losses, 1);
    let tx = r.st.next_tx(u64::MAX).unwrap();
    assert_eq!((tx.seq, tx.retransmit, tx.avoid_ev), (0, true, Some(0)));
    r.st.on_transmit(&tx, 60_000, 1, 60_000);
    // the original's late SACK echoes EV 0 and timestamp 0: spurious
    let out = r.sack(61_000, 5, 0, 0, Some((0, 0)));
    assert_eq!(out.acked_packets, 1);
    assert_eq!(out.spurious, 1);
    assert_eq!(r.stats.spurious, 1);
    assert_eq!(r.paths.paths()[0].stats.spurious, 1);
    assert_eq!(r.paths.state_of(0), Some(PathState::Good));
    assert_eq!(r.paths.paths()[0].consecutive_losses, 0);
    // a SACK echoing the retransmission would not have been spurious
    let mut r2 = Rig::new(0, &[0, 1]);
    r2.st.post(spec(1, 2 * MTU));
    r2.send(0, 2);
    r2.sack(10_000, 0, 0, 0b10, Some((1, 0)));
    r2.st.detect_losses(60_000, &mut r2.paths, &mut r2.stats);
    let tx = r2.st.next_tx(u64::MAX).unwrap();
    r2.st.on_transmit(&tx, 60_000, 1, 60_000);
    let out = r2.sack(70_000, 2, 0, 0, Some((1, 60_000)));
    assert_eq!((out.acked_packets, out.spurious), (1, 0));
}

/// Two planes (EV i on plane i mod 2): the sender counts its packets in flight per plane by
/// the EV of their latest transmission, through acknowledgements, RACK losses and resends;
/// RACK's losses of packets that a later packet of the same plane overtook (reordering,
/// not a failure) take neither plane down.
#[test]
fn packets_in_flight_per_plane_and_overtaken_losses_keep_the_planes_up() {
    use crate::path::PlaneState;
    let mut r = Rig::new(0, &[0, 1, 2, 3]);
    r.paths = PathTable::with_planes(&[0, 1, 2, 3], &[0, 1, 0, 1], Selection::RoundRobin, 1);
    r.st.set_ev_planes(&[0, 1, 0, 1]);
    r.st.post(spec(1, 6 * MTU));
    for t in 0..6u64 {
        r.send(t * 1_000, 1);
    }
    assert_eq!(r.st.in_flight_by_plane(), &[3, 3]);
    // 4 (EV 0) and 5 (EV 1) acked at 15 us: 0-3 overtaken on both planes
    let out = r.sack(15_000, 0, 0, 0b11_0000, Some((1, 5_000)));
    assert_eq!(out.acked_packets, 2);
    assert_eq!(r.st.in_flight_by_plane(), &[2, 2]);
    // deadline of 3: 3 us + RTT 10 us + 50 us window
    let l = r.st.detect_losses(63_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 4);
    assert_eq!(r.st.in_flight_by_plane(), &[0, 0]);
    assert_eq!(r.paths.planes()[0].state, PlaneState::Up);
    assert_eq!(r.paths.planes()[1].state, PlaneState::Up);
    assert_eq!(
        r.paths.paths()[3].consecutive_losses,
        1,
        "the EVs are charged"
    );
    // the resends count on the EVs they go on
    let resent = r.send(64_000, 4);
    assert_eq!(resent.len(), 4);
    assert_eq!(r.st.in_flight_by_plane().iter().sum::<u32>(), 4);
    let on_plane_1 = resent.iter().filter(|&&(_, ev)| ev % 2 == 1).count() as u32;
    assert_eq!(r.st.in_flight_by_plane(), &[4 - on_plane_1, on_plane_1]);
    r.sack(80_000, 6, 0, 0, None);
    assert_eq!(r.st.in_flight_by_plane(), &[0, 0]);
    assert_eq!(r.st.in_flight_packets(), 0);
    // one plane: nothing is counted per plane
    let mut one = Rig::new(0, &[0, 1]);
    one.st.set_ev_planes(&[0, 0]);
    one.st.post(spec(2, MTU));
    one.send(0, 1);
    assert!(one.st.in_flight_by_plane().is_empty());
}

#[test]
fn rto_backs_off_and_retry_limit_fails_the_work_request() {
    let mut r = Rig::new(0, &[0, 1]);
    r.st.post(spec(7, MTU));
    r.st.post(spec(8, MTU));
    r.send(0, 1);
    assert_eq!(r.st.rto_deadline_ns(), Some(1_000_000));
    assert_eq!(
        r.st.on_rto(999_999, &mut r.paths, &mut r.stats),
        LossOutcome::default()
    );
    let l = r.st.on_rto(1_000_000, &mut r.paths, &mut r.stats);
    assert_eq!(
        l,
        LossOutcome {
            lost_packets: 1,
            lost_bytes: 4096,
            failed: false
        }
    );
    assert_eq!(r.paths.state_of(0), Some(PathState::AssumedBad));
    assert_eq!(r.paths.paths()[0].stats.timeouts, 1);
    // resend at 1 ms on EV 1; back-off 2: deadline 1 ms + 2 ms
    let s = r.send(1_000_000, 1);
    assert_eq!(s, vec![(0, 1)]);
    assert_eq!(r.st.rto_deadline_ns(), Some(3_000_000));
    let mut now = 3_000_000;
    for k in 2..=7u32 {
        let l = r.st.on_rto(now, &mut r.paths, &mut r.stats);
        assert_eq!(l.lost_packets, 1, "rto {k}");
        r.send(now, 1);
        now += (1_000_000u64 << k).min(100_000_000);
        assert_eq!(r.st.rto_deadline_ns(), Some(now));
    }
    let l = r.st.on_rto(now, &mut r.paths, &mut r.stats);
    assert!(l.failed);
    assert_eq!(r.stats.timeouts, 8);
    // 7 expiries each declared the one packet in flight lost; the 8th failed the request
    assert_eq!((r.stats.rto_lost, r.stats.rack_losses), (7, 0));
    let c1 = r.st.poll_completion().unwrap();
    let c2 = r.st.poll_completion().unwrap();
    assert_eq!((c1.wr_id, c1.status), (7, WcStatus::RetryExceeded));
    assert_eq!((c2.wr_id, c2.status), (8, WcStatus::Flushed));
    assert_eq!(r.st.poll_completion(), None);
    assert_eq!(r.st.bytes_in_flight(), 0);
    assert_eq!(r.st.rto_deadline_ns(), None);
    assert_eq!(r.st.next_tx(u64::MAX), None);
}

#[test]
fn completions_in_posting_order() {
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, MTU));
    r.st.post(spec(2, MTU));
    r.send(0, 2);
    // second message acked first: no completion yet
    r.sack(10, 0, 0, 0b10, None);
    assert_eq!(r.st.poll_completion(), None);
    r.sack(20, 2, 0, 0, None);
    assert_eq!(r.st.poll_completion().map(|c| c.wr_id), Some(1));
    assert_eq!(r.st.poll_completion().map(|c| c.wr_id), Some(2));
    assert!(r.st.is_idle());
}

#[test]
fn go_back_n_requeues_everything_from_the_psn() {
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, 6 * MTU));
    r.send(0, 6);
    r.sack(10, 2, 0, 0, None);
    assert_eq!(r.st.go_back(3), 3);
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![3, 4, 5]);
    assert_eq!(r.st.go_back(0), 1); // 2 is the only in-flight one left before 3
}

#[test]
fn tail_loss_probe_deadline_and_probe() {
    let mut r = Rig::new(0, &[0, 1]);
    r.st.post(spec(1, 3 * MTU));
    r.send(0, 1);
    // no RTT sample yet: no probe (the RTO covers it)
    assert_eq!(r.st.tlp_deadline_ns(), None);
    r.sack(10_000, 1, 0, 0, Some((0, 0)));
    r.send(20_000, 2);
    // PTO = max(2 x 10 us, 10 us + 50 us reorder window) + 10 us ack delay = 70 us
    assert_eq!(r.st.pto_ns(), Some(70_000));
    assert_eq!(r.st.tlp_deadline_ns(), Some(90_000));
    assert_eq!(r.st.rto_deadline_ns(), Some(220_000));
    assert!(!r.st.on_tlp(89_999, &mut r.stats));
    assert!(r.st.on_tlp(90_000, &mut r.stats));
    // the highest in-flight packet is queued, not declared lost
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![2]);
    assert!(!r.st.packet(2).unwrap().loss_declared);
    assert_eq!(r.st.in_flight_packets(), 1);
    assert_eq!(r.stats.tail_loss_probes, 1);
    assert_eq!(r.st.tlp_deadline_ns(), None);
    // the probe goes out; still no second probe until something is acknowledged
    r.send(90_000, 1);
    assert_eq!(r.st.tlp_deadline_ns(), None);
    // its SACK echoes the probe's transmission: an unambiguous RACK sample that
    // overtakes PSN 1
    let out = r.sack(100_000, 1, 1, 0b10, Some((1, 90_000)));
    assert_eq!(out.rtt_sample_ns, Some(10_000));
    let l =
        r.st.detect_losses(100_000 + 60_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 1);
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn out_of_window_nack_shrinks_the_outstanding_limit_and_holds_the_resend() {
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, 20 * MTU));
    r.send(0, 20);
    // the peer's window ends at 16: NACK(PSN_OUT_OF_WINDOW) for 16
    assert_eq!(r.st.on_out_of_window(16), 16);
    assert_eq!(r.st.config().max_outstanding_packets, 16);
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![16]);
    // not resent while snd_una is 0
    assert_eq!(r.st.next_tx(u64::MAX), None);
    // 0..=3 acknowledged: 16 - 4 < 16, the resend goes
    r.sack(10, 4, 4, 0, None);
    let tx = r.st.next_tx(u64::MAX).unwrap();
    assert_eq!((tx.seq, tx.retransmit), (16, true));
    // a later NACK never raises the limit
    assert_eq!(r.st.on_out_of_window(19), 15);
}

#[test]
fn go_back_n_rto_resends_everything_in_flight_and_blames_the_lowest_ev() {
    let mut r = Rig::new(0, &[0, 1, 2, 3]);
    r.st = SendState::new(
        Psn::new(0),
        SendConfig {
            go_back_n: true,
            ..SendConfig::default()
        },
    );
    r.st.post(spec(1, 4 * MTU));
    // paced: one packet every 100 us on EVs 0, 1, 2, 3
    for k in 0..4u64 {
        assert_eq!(r.send(k * 100_000, 1), vec![(k, k as usize)]);
    }
    assert_eq!(r.st.rto_deadline_ns(), Some(1_000_000));
    let l = r.st.on_rto(1_000_000, &mut r.paths, &mut r.stats);
    // all four go back although three were sent less than an RTO ago
    assert_eq!(
        l,
        LossOutcome {
            lost_packets: 4,
            lost_bytes: 4 * 4096,
            failed: false
        }
    );
    assert_eq!(
        r.st.retransmit_queue().collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(r.st.in_flight_packets(), 0);
    // only EV 0 (the hole's) is blamed
    let states: Vec<_> = r.paths.paths().iter().map(|p| p.state).collect();
    assert_eq!(
        states,
        vec![
            PathState::AssumedBad,
            PathState::Good,
            PathState::Good,
            PathState::Good
        ]
    );
    let timeouts: Vec<u64> = r.paths.paths().iter().map(|p| p.stats.timeouts).collect();
    assert_eq!(timeouts, vec![1, 0, 0, 0]);
    assert_eq!(r.stats.timeouts, 1);
    // the hole avoids EV 0: round-robin resumes at EV 1
    assert_eq!(r.send(1_000_000, 4), vec![(0, 1), (1, 2), (2, 3), (3, 1)]);
}

/// RFC 8985 6.3 before any RTT sample: `rack.rtt` is 0 and the reorder window its 50 us
/// floor, so the expiry at 1 ms declares lost every packet sent by 950 us, not only the
/// one sent an RTO before it (paced packets used to go one per expiry); a packet sent at
/// the expiry's own ns stays in flight. Only the RTO-old packet's EV is blamed for a
/// timeout; the others are charged one loss each, as RACK charges them.
#[test]
fn selective_repeat_rto_declares_every_overdue_packet_lost() {
    let mut r = Rig::new(0, &[0, 1, 2, 3]);
    r.st.post(spec(1, 5 * MTU));
    for k in 0..4u64 {
        assert_eq!(r.send(k * 100_000, 1), vec![(k, k as usize)]);
    }
    assert_eq!(r.send(1_000_000, 1), vec![(4, 0)]);
    assert_eq!(r.st.rto_deadline_ns(), Some(1_000_000));
    let l = r.st.on_rto(1_000_000, &mut r.paths, &mut r.stats);
    assert_eq!(
        l,
        LossOutcome {
            lost_packets: 4,
            lost_bytes: 4 * 4096,
            failed: false
        }
    );
    assert_eq!(
        r.st.retransmit_queue().collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(r.st.in_flight_packets(), 1);
    assert_eq!((r.stats.timeouts, r.stats.rack_losses), (1, 3));
    // the one packet an RTO old is the expiry's own loss: every declared loss is counted
    // once, by RACK's deadline or by the RTO
    assert_eq!(r.stats.rto_lost, 1);
    let evs = r.paths.paths();
    let states: Vec<_> = evs.iter().map(|p| p.state).collect();
    assert_eq!(
        states,
        vec![
            PathState::AssumedBad,
            PathState::Good,
            PathState::Good,
            PathState::Good
        ]
    );
    let per_ev: Vec<(u64, u64, u32)> = evs
        .iter()
        .map(|p| (p.stats.timeouts, p.stats.lost, p.consecutive_losses))
        .collect();
    assert_eq!(per_ev, vec![(1, 0, 0), (0, 1, 1), (0, 1, 1), (0, 1, 1)]);
}

/// RFC 8985 6.3 with an RTT sample: PSN 0 sent at 1 us and acknowledged at 11 us gives
/// `rack.rtt` 10 us, SRTT 10 us, RTTVAR 5 us, so the RTO is its 200 us floor and the reorder window its
/// 50 us floor. The expiry at 220 us (PSN 1, sent at 20 us, plus 200 us) declares lost
/// PSN 1 (an RTO old) and every packet sent by 220 - 10 - 50 = 160 us; PSN 4, sent at
/// 161 us, could still be acknowledged in time and stays in flight.
#[test]
fn selective_repeat_rto_keeps_packets_younger_than_rack_rtt_plus_reorder_window() {
    let mut r = Rig::new(0, &[0, 1, 2, 3]);
    r.st.post(spec(1, 5 * MTU));
    assert_eq!(r.send(1_000, 1), vec![(0, 0)]);
    let out = r.sack(11_000, 1, 0, 0, Some((0, 1_000)));
    assert_eq!(out.rtt_sample_ns, Some(10_000));
    assert_eq!(r.st.base_rto_ns(), 200_000);
    assert_eq!(r.st.rack.rtt_ns, 10_000);
    let mut sent = Vec::new();
    for t in [20_000, 100_000, 160_000, 161_000] {
        sent.extend(r.send(t, 1));
    }
    assert_eq!(sent, vec![(1, 1), (2, 2), (3, 3), (4, 0)]);
    assert_eq!(r.st.rto_deadline_ns(), Some(220_000));
    let l = r.st.on_rto(220_000, &mut r.paths, &mut r.stats);
    assert_eq!((l.lost_packets, l.lost_bytes), (3, 3 * 4096));
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(r.st.in_flight_packets(), 1);
    assert_eq!(r.st.packet(4).map(|p| p.state), Some(PktState::InFlight));
    assert_eq!((r.stats.timeouts, r.stats.rack_losses), (1, 2));
    assert_eq!(r.stats.rto_lost, 1);
    let per_ev: Vec<(u64, u64)> = r
        .paths
        .paths()
        .iter()
        .map(|p| (p.stats.timeouts, p.stats.lost))
        .collect();
    assert_eq!(per_ev, vec![(0, 0), (1, 0), (0, 1), (0, 1)]);
    assert_eq!(r.paths.state_of(1), Some(PathState::AssumedBad));
}

#[test]
fn a_burst_reordered_by_the_datapath_declares_no_loss() {
    // 16 packets handed out at the same ns (one engine burst over 16 EVs); the UDP
    // datapath groups them per EV socket, so packet 15 can arrive and be SACKed first.
    let evs: Vec<u32> = (0..16).collect();
    let mut r = Rig::new(0, &evs);
    r.st = SendState::new(
        Psn::new(0),
        SendConfig {
            burst_may_reorder: true,
            min_reorder_window_ns: 50_000,
            ..SendConfig::default()
        },
    );
    r.st.post(spec(1, 32 * MTU));
    assert_eq!(r.send(10_000, 16).len(), 16);
    // Only PSN 15 arrived so far; long after every deadline, nothing of its burst is lost.
    r.sack(20_000, 0, 0, 1 << 15, Some((15, 10_000)));
    let l = r.st.detect_losses(10_000_000, &mut r.paths, &mut r.stats);
    assert_eq!(l, LossOutcome::default());
    assert_eq!(r.st.rack_timer_ns(), None);
    assert_eq!(r.stats.rack_losses, 0);
    // A packet of the next burst (sent 1 us later) SACKed at 30 us overtakes the 15 still
    // unacknowledged ones: lost at their send time 10 us + 19 us (the RTT of PSN 16) +
    // 50 us (reorder window).
    assert_eq!(r.send(11_000, 1), vec![(16, 0)]);
    r.sack(30_000, 0, 0, (1 << 15) | (1 << 16), Some((0, 11_000)));
    let l = r.st.detect_losses(78_999, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 0);
    assert_eq!(r.st.rack_timer_ns(), Some(79_000));
    let l = r.st.detect_losses(79_000, &mut r.paths, &mut r.stats);
    assert_eq!((l.lost_packets, l.lost_bytes), (15, 15 * 4096));
    // Without the flag (RFC 8985's sequence tie-break), the SACK of PSN 15 alone declares
    // PSNs 0..=14 lost once the reorder window has passed.
    let mut r = Rig::new(0, &evs);
    r.st.post(spec(1, 32 * MTU));
    r.send(10_000, 16);
    r.sack(20_000, 0, 0, 1 << 15, Some((15, 10_000)));
    let l = r.st.detect_losses(10_000_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 15);
}

#[test]
fn a_retransmission_is_not_overtaken_by_an_original_sent_at_the_same_ns() {
    // PSN 0 is resent at 1 ms in the same burst as PSN 1's first transmission; PSN 1 is
    // SACKed. The PSN tie-break would call the retransmission of 0 overtaken (0 < 1), but it
    // left after 1's original: only a packet sent at a later ns overtakes it.
    let mut r = Rig::new(0, &[0, 1]);
    r.st.post(spec(1, 2 * MTU));
    assert_eq!(r.send(0, 1), vec![(0, 0)]);
    let l = r.st.on_rto(1_000_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 1);
    let sent = r.send(1_000_000, 2);
    assert_eq!(sent.iter().map(|s| s.0).collect::<Vec<_>>(), vec![0, 1]);
    let ev1 = sent[1].1;
    r.sack(1_010_000, 0, 1, 1, Some((ev1, 1_000_000)));
    let l = r.st.detect_losses(50_000_000, &mut r.paths, &mut r.stats);
    assert_eq!(l, LossOutcome::default());
    assert_eq!(r.st.rack_timer_ns(), None);
    // A packet sent at a later ns and SACKed does overtake it: lost at 1 ms + RTT of the
    // later packet (10 us) + the 50 us reorder window of the rig.
    r.st.post(spec(2, MTU));
    let sent = r.send(1_001_000, 1);
    assert_eq!(sent[0].0, 2);
    r.sack(1_011_000, 0, 1, 0b11, Some((sent[0].1, 1_001_000)));
    let l = r.st.detect_losses(1_059_999, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 0);
    assert_eq!(r.st.rack_timer_ns(), Some(1_060_000));
    let l = r.st.detect_losses(1_060_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 1);
}

/// Packets 0, 1, 2 on EVs 0, 1, 2 at 0, 1 and 2 us; a SACK at 10 us for 1 and 2 (min RTT
/// 8 us); RACK declares 0 lost at 60 us; EV 1 has a loss of its own standing; 0 goes again
/// on EV 1 at 60 us.
fn resent_on_a_suspect_ev() -> Rig {
    let mut r = Rig::new(0, &[0, 1, 2]);
    r.st.post(spec(1, 3 * MTU));
    for t in [0u64, 1_000, 2_000] {
        r.send(t, 1);
    }
    r.sack(10_000, 0, 0, 0b110, Some((2, 2_000)));
    assert_eq!(r.st.rtt.min_rtt_ns, 8_000);
    let l = r.st.detect_losses(60_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 1);
    r.paths.on_loss(1, 60_000);
    assert_eq!(r.send(60_000, 1), vec![(0, 1)]);
    assert_eq!(r.paths.paths()[1].consecutive_losses, 1);
    r
}

#[test]
fn a_retransmission_that_cannot_have_arrived_is_not_credited_to_its_ev() {
    // the SACK echoes the original (EV 0, sent at 0): the original arrived late, a
    // spurious loss; EV 0 is cleared by the undo, EV 1 gets no credit for the copy
    let mut r = resent_on_a_suspect_ev();
    let p = *r.st.packet(0).unwrap();
    assert_eq!(p.delivered_ev(Some((0, 0)), 60_500, 8_000), None);
    let out = r.sack(60_500, 3, 0, 0, Some((0, 0)));
    assert_eq!((out.acked_packets, out.spurious), (1, 1));
    assert_eq!(r.paths.paths()[0].consecutive_losses, 0);
    assert_eq!(r.paths.paths()[1].consecutive_losses, 1);
    // a SACK echoing neither copy 0.5 us after the retransmission (less than the 8 us min
    // RTT): an earlier copy arrived, EV 1 gets no credit
    let mut r = resent_on_a_suspect_ev();
    let p = *r.st.packet(0).unwrap();
    assert_eq!(p.delivered_ev(None, 60_500, 8_000), None);
    r.sack(60_500, 3, 0, 0, None);
    assert_eq!(r.paths.paths()[1].consecutive_losses, 1);
    // the same SACK 8 us after the retransmission: the copy on EV 1 may have arrived, and
    // is credited (its loss count restarts)
    let mut r = resent_on_a_suspect_ev();
    let p = *r.st.packet(0).unwrap();
    assert_eq!(p.delivered_ev(None, 68_000, 8_000), Some(1));
    assert_eq!(p.delivered_ev(Some((1, 60_000)), 60_500, 8_000), Some(1));
    r.sack(68_000, 3, 0, 0, None);
    assert_eq!(r.paths.paths()[1].consecutive_losses, 0);
}

#[test]
fn the_tail_loss_probe_is_marked_until_it_leaves() {
    let mut r = Rig::new(0, &[0, 1]);
    r.st.post(spec(1, 3 * MTU));
    r.send(0, 1);
    r.sack(10_000, 1, 0, 0, Some((0, 0)));
    r.send(20_000, 2);
    // PTO 70 us after the latest transmission (see tail_loss_probe_deadline_and_probe)
    assert!(r.st.on_tlp(90_000, &mut r.stats));
    let tx = r.st.next_tx(u64::MAX).unwrap();
    assert_eq!(
        (tx.seq, tx.retransmit, tx.probe, tx.avoid_ev),
        (2, true, true, Some(0))
    );
    r.st.on_transmit(&tx, 90_000, 1, 90_000);
    // a later retransmission of the same packet (a NACK) is no probe
    assert_eq!(r.st.queue_retransmit(2), Some((4096, 1)));
    let tx = r.st.next_tx(u64::MAX).unwrap();
    assert_eq!((tx.seq, tx.probe), (2, false));
    // new data is no probe either
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, MTU));
    assert!(!r.st.next_tx(u64::MAX).unwrap().probe);
}

#[test]
fn a_trimmed_packet_waits_for_window_space() {
    // 10 packets in flight, window 10 packets; NACKs for 3 and 5 (trimmed), the
    // controller took them off the window: 8 packets.
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, 12 * MTU));
    r.send(0, 10);
    assert_eq!(r.st.queue_nacked_retransmit(3), Some((4096, 0)));
    assert_eq!(r.st.queue_nacked_retransmit(5), Some((4096, 0)));
    assert_eq!(r.st.queued_bytes(), 2 * 4096);
    assert_eq!(r.st.bytes_in_flight(), 10 * 4096);
    let cwnd = 8 * 4096;
    // 8 packets are in the network: the resend of 3 would make 9
    assert_eq!(r.st.next_tx(cwnd), None);
    // the window grows by one packet: 3 goes, then 5 waits again
    let tx = r.st.next_tx(cwnd + 4096).unwrap();
    assert_eq!((tx.seq, tx.retransmit), (3, true));
    r.st.on_transmit(&tx, 1_000, 0, 1_000);
    assert_eq!(r.st.queued_bytes(), 4096);
    assert_eq!(r.st.next_tx(cwnd + 4096), None);
    // SACK for 0 and 1: 7 packets in the network, 5 goes
    let out = r.sack(2_000, 2, 2, 0, Some((0, 0)));
    assert_eq!(out.acked_packets, 2);
    let tx = r.st.next_tx(cwnd).unwrap();
    assert_eq!((tx.seq, tx.retransmit), (5, true));
    r.st.on_transmit(&tx, 2_000, 0, 2_000);
    assert_eq!(r.st.queued_bytes(), 0);
    // the old behaviour: every retransmission at once, whatever the window
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, 12 * MTU));
    r.st.cfg.rtx_within_cwnd = false;
    r.send(0, 10);
    assert_eq!(r.st.queue_nacked_retransmit(3), Some((4096, 0)));
    assert_eq!(r.st.next_tx(4096).map(|t| t.seq), Some(3));
}

#[test]
fn a_packet_declared_lost_is_resent_whatever_the_window() {
    // 10 packets in flight, window 8: a loss (RACK/RTO) retransmission is not gated, a
    // trimmed one is.
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, 12 * MTU));
    r.send(0, 10);
    assert_eq!(r.st.queue_retransmit(3), Some((4096, 0)));
    assert!(!r.st.packet(3).unwrap().cwnd_gated);
    let tx = r.st.next_tx(8 * 4096).unwrap();
    assert_eq!((tx.seq, tx.retransmit), (3, true));
    r.st.on_transmit(&tx, 1_000, 0, 1_000);
    assert_eq!(r.st.queue_nacked_retransmit(5), Some((4096, 0)));
    assert!(r.st.packet(5).unwrap().cwnd_gated);
    assert_eq!(r.st.next_tx(8 * 4096), None);
    // sent once the window allows; the flag goes with the send
    let tx = r.st.next_tx(11 * 4096).unwrap();
    assert_eq!((tx.seq, tx.retransmit), (5, true));
    r.st.on_transmit(&tx, 2_000, 0, 2_000);
    assert!(!r.st.packet(5).unwrap().cwnd_gated);
}

#[test]
fn with_nothing_in_the_network_a_retransmission_always_goes() {
    // both packets trimmed, window at its floor below one packet's worth
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, 2 * MTU));
    r.send(0, 2);
    assert_eq!(r.st.queue_nacked_retransmit(0), Some((4096, 0)));
    assert_eq!(r.st.queue_nacked_retransmit(1), Some((4096, 0)));
    let tx = r.st.next_tx(1).unwrap();
    assert_eq!((tx.seq, tx.retransmit), (0, true));
    r.st.on_transmit(&tx, 1_000, 0, 1_000);
    assert_eq!(r.st.next_tx(1), None);
}

#[test]
fn a_loss_retransmission_and_the_probe_pass_a_waiting_trimmed_resend() {
    // 10 packets in flight, window 6: 3 trimmed (waits), then 6 declared lost: 6 goes
    // at once although 3 is ahead of it in the queue
    let mut r = Rig::new(0, &[0]);
    r.st.post(spec(1, 12 * MTU));
    r.send(0, 10);
    let cwnd = 6 * 4096;
    assert_eq!(r.st.queue_nacked_retransmit(3), Some((4096, 0)));
    assert_eq!(r.st.queue_retransmit(6), Some((4096, 0)));
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![3, 6]);
    assert_eq!(r.st.queued_bytes(), 2 * 4096);
    let tx = r.st.next_tx(cwnd).unwrap();
    assert_eq!((tx.seq, tx.retransmit, tx.probe), (6, true, false));
    r.st.on_transmit(&tx, 1_000, 0, 1_000);
    assert_eq!(r.st.queued_bytes(), 4096);
    assert_eq!(r.st.next_tx(cwnd), None);
    // with only the waiting resend queued the tail loss probe is still due: PTO 70 us
    // (SRTT 10 us, 50 us reorder floor, 10 us ACK delay) after the latest transmission
    r.sack(10_000, 1, 0, 0, Some((0, 0)));
    assert_eq!(r.st.tlp_deadline_ns(), Some(71_000));
    assert!(r.st.on_tlp(71_000, &mut r.stats));
    // the probe (the highest in flight, 9) passes the waiting 3 (7 packets in the
    // network)
    let tx = r.st.next_tx(cwnd).unwrap();
    assert_eq!((tx.seq, tx.retransmit, tx.probe), (9, true, true));
    r.st.on_transmit(&tx, 71_000, 0, 71_000);
    assert_eq!(r.st.next_tx(cwnd), None);
    assert_eq!(r.st.tlp_deadline_ns(), None);
    // without the window gate a queued resend can go, so no probe is due
    let mut r = Rig::new(0, &[0]);
    r.st.cfg.rtx_within_cwnd = false;
    r.st.post(spec(1, 12 * MTU));
    r.send(0, 10);
    r.sack(10_000, 1, 0, 0, Some((0, 0)));
    assert_eq!(r.st.queue_nacked_retransmit(3), Some((4096, 0)));
    assert_eq!(r.st.tlp_deadline_ns(), None);
}

#[test]
fn towards_a_go_back_n_peer_a_trimmed_resend_does_not_wait() {
    let mut r = Rig::new(0, &[0]);
    r.st.cfg.go_back_n = true;
    r.st.post(spec(1, 12 * MTU));
    r.send(0, 10);
    assert_eq!(r.st.queue_nacked_retransmit(3), Some((4096, 0)));
    assert!(!r.st.packet(3).unwrap().cwnd_gated);
    // 9 packets in the network, window 1: it goes all the same
    let tx = r.st.next_tx(4096).unwrap();
    assert_eq!((tx.seq, tx.retransmit), (3, true));
}

/// A rig over 4 EVs on two planes, EV i on plane i % 2.
fn two_plane_rig() -> Rig {
    let mut r = Rig::new(0, &[0, 1, 2, 3]);
    r.paths = PathTable::with_planes(&[0, 1, 2, 3], &[0, 1, 0, 1], Selection::RoundRobin, 1);
    r
}

fn plane_states(r: &Rig) -> Vec<crate::path::PlaneState> {
    r.paths.planes().iter().map(|p| p.state).collect()
}

/// An RTO whose unanswered packets lie on both planes is silence everywhere (a stalled
/// receiver, a descheduled host): the EVs are charged (the RTO-old packet's EV
/// `AssumedBad`, the others one loss each) but neither plane's loss streak, so no plane
/// goes down. Before, the losses on EVs 0 and 2 made a streak of 2 on plane 0 and took it
/// down (on a real host, a link flapping in plane 1 took plane 0 down 1-14 times a run).
#[test]
fn an_rto_over_packets_of_two_planes_takes_no_plane_down() {
    use crate::path::PlaneState;
    let mut r = two_plane_rig();
    r.st.post(spec(1, 5 * MTU));
    for k in 0..4u64 {
        assert_eq!(r.send(k * 100_000, 1), vec![(k, k as usize)]);
    }
    assert_eq!(r.send(1_000_000, 1), vec![(4, 0)]);
    let l = r.st.on_rto(1_000_000, &mut r.paths, &mut r.stats);
    assert_eq!((l.lost_packets, l.lost_bytes), (4, 4 * 4096));
    assert_eq!((r.stats.timeouts, r.stats.rack_losses), (1, 3));
    assert_eq!(plane_states(&r), vec![PlaneState::Up, PlaneState::Up]);
    let evs: Vec<_> = r
        .paths
        .paths()
        .iter()
        .map(|p| (p.state, p.consecutive_losses))
        .collect();
    assert_eq!(
        evs,
        vec![
            (PathState::AssumedBad, 0),
            (PathState::Good, 1),
            (PathState::Good, 1),
            (PathState::Good, 1)
        ]
    );
}

/// An RTO whose unanswered packets all went on plane 1 (plane 0's were acknowledged: the
/// silence is plane 1's, the tail of a transfer on a dead plane) still counts in plane 1's
/// streak: EVs 1 and 3 make 2, and plane 1 goes down by loss while plane 0 stays up.
#[test]
fn an_rto_over_one_planes_packets_takes_that_plane_down() {
    use crate::path::{PlaneDownCause, PlaneState};
    let mut r = two_plane_rig();
    r.st.post(spec(1, 4 * MTU));
    for k in 0..4u64 {
        assert_eq!(r.send(k * 1_000, 1), vec![(k, k as usize)]);
    }
    // PSNs 0 and 2 (plane 0) acknowledged at 13 us: RTT 11 us
    let out = r.sack(13_000, 0, 0, 0b0101, Some((2, 2_000)));
    assert_eq!((out.acked_packets, out.rtt_sample_ns), (2, Some(11_000)));
    let rto_at = r.st.rto_deadline_ns().unwrap();
    let l = r.st.on_rto(rto_at, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 2);
    assert_eq!(
        plane_states(&r),
        vec![PlaneState::Up, PlaneState::Down(PlaneDownCause::Loss)]
    );
}

/// RACK waits for an overtaken packet as long as its own EV's smoothed RTT says it takes:
/// a packet on an EV whose round trip is 40 us is declared lost 40 us plus the reorder
/// window after it was sent, not 11 us (the RTT of the faster EV's packet that overtook
/// it) plus the window; a packet on the fast EV is declared lost as before.
#[test]
fn an_overtaken_packet_on_a_slower_ev_is_given_its_evs_round_trip() {
    let mut r = Rig::new(0, &[0, 1]);
    // EV 1's round trips take 40 us (its queue), EV 0's 11 us
    r.paths.on_rtt_sample(1, 40_000);
    r.st.post(spec(1, 4 * MTU));
    let mut sent = Vec::new();
    for t in [0u64, 1_000, 2_000, 3_000] {
        sent.extend(r.send(t, 1));
    }
    assert_eq!(sent, vec![(0, 0), (1, 1), (2, 0), (3, 1)]);
    // 2 (EV 0, sent at 2 us) acked at 13 us: RACK's RTT 11 us, window the 50 us floor
    let out = r.sack(13_000, 0, 0, 0b100, Some((0, 2_000)));
    assert_eq!((out.acked_packets, out.rtt_sample_ns), (1, Some(11_000)));
    assert_eq!(r.paths.paths()[0].srtt_ns, 11_000);
    let l = r.st.detect_losses(13_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 0);
    // 0 (EV 0): 0 + 11 + 50 us; 1 (EV 1): 1 + 40 + 50 us, not 1 + 11 + 50 = 62 us
    assert_eq!(r.st.rack_timer_ns(), Some(61_000));
    let l = r.st.detect_losses(61_000, &mut r.paths, &mut r.stats);
    assert_eq!((l.lost_packets, r.stats.rack_losses), (1, 1));
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![0]);
    assert_eq!(r.st.rack_timer_ns(), Some(91_000));
    let l = r.st.detect_losses(90_999, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 0);
    let l = r.st.detect_losses(91_000, &mut r.paths, &mut r.stats);
    assert_eq!((l.lost_packets, r.stats.rack_losses), (1, 2));
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(r.st.rack_timer_ns(), None);
}

/// A packet acknowledged after RACK's connection-wide deadline (a later-sent packet was
/// acknowledged more than `rtt + reorder window` before it), which the sender waited for
/// because its EV's round trips are longer, delivers but does not recycle its EV; a packet
/// of the same EV on time does. Both through the cumulative range and the bitmap.
#[test]
fn a_packet_acknowledged_after_racks_deadline_does_not_recycle_its_ev() {
    for by_bitmap in [false, true] {
        let mut r = Rig::new(0, &[0, 1]);
        r.paths = PathTable::new(&[0, 1], Selection::Recycle, 1);
        // EV 0's round trips take 70 us
        r.paths.on_rtt_sample(0, 70_000);
        r.st.post(spec(1, 3 * MTU));
        let mut sent = Vec::new();
        for t in [0u64, 1_000, 2_000] {
            sent.extend(r.send(t, 1));
        }
        assert_eq!(sent, vec![(0, 0), (1, 1), (2, 0)]);
        // 1 (EV 1) acked at 11 us: RACK's RTT 10 us, its deadline for 0 at 0 + 10 + 50 us
        r.sack(11_000, 0, 0, 0b010, Some((1, 1_000)));
        r.paths.end_ack(0, Some(1));
        assert_eq!(r.paths.recycled().collect::<Vec<_>>(), vec![1]);
        // 0 waits for its EV's 70 us: not lost at 100 us
        let l = r.st.detect_losses(100_000, &mut r.paths, &mut r.stats);
        assert_eq!(l.lost_packets, 0);
        assert_eq!(r.st.rack_timer_ns(), Some(120_000));
        // 0 (late: 100 us > 60 us) and 2 (sent after 1: on time) acked at 100 us
        let out = if by_bitmap {
            r.sack(100_000, 0, 0, 0b101, Some((0, 2_000)))
        } else {
            r.sack(100_000, 3, 0, 0, Some((0, 2_000)))
        };
        assert_eq!(out.acked_packets, 2);
        r.paths.end_ack(0, Some(0));
        // EV 0 recycled once, for 2, not for 0
        assert_eq!(
            r.paths.recycled().collect::<Vec<_>>(),
            vec![1, 0],
            "{by_bitmap}"
        );
        assert_eq!(r.paths.paths()[0].consecutive_losses, 0);
        assert_eq!((r.stats.rack_losses, r.stats.retransmitted), (0, 0));
    }
}

#[test]
fn an_acknowledged_resend_of_the_oldest_overtakes_the_higher_psns_sent_before_it() {
    // An RTO resends the oldest packet only (`rto_probe_oldest`, the engine's software
    // configuration). Its SACK echoes the resend: RACK's latest-sent acknowledged packet
    // is now PSN 1, sent after PSNs 2-4, which must count as overtaken. Stopping RACK's
    // scan at PSN 1 left them to one RTO each.
    let mut r = Rig::new(0, &[0, 1, 2, 3]);
    r.st = SendState::new(
        Psn::new(0),
        SendConfig {
            min_reorder_window_ns: 50_000,
            rto_probe_oldest: true,
            ..SendConfig::default()
        },
    );
    r.st.post(spec(1, 5 * MTU));
    assert_eq!(r.send(1_000, 1), vec![(0, 0)]);
    let out = r.sack(11_000, 1, 0, 0, Some((0, 1_000)));
    assert_eq!(out.rtt_sample_ns, Some(10_000));
    assert_eq!(r.send(20_000, 4), vec![(1, 1), (2, 2), (3, 3), (4, 0)]);
    assert_eq!(r.st.rto_deadline_ns(), Some(220_000));
    let l = r.st.on_rto(220_000, &mut r.paths, &mut r.stats);
    assert_eq!(l.lost_packets, 1);
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![1]);
    // the resend of PSN 1 leaves on EV index 2 (EV 1 is AssumedBad after the expiry)
    assert_eq!(r.send(220_000, 1), vec![(1, 2)]);
    // its SACK: PSN 1 arrived (cumulative 2), echoing the resend on EV index 2
    let out = r.sack(230_000, 2, 2, 0, Some((2, 220_000)));
    assert_eq!(out.acked_packets, 1);
    assert!(r.st.rack.resent);
    assert_eq!((r.st.rack.xmit_ns, r.st.rack.seq), (220_000, 1));
    // PSNs 2-4 left at 20 us, before the resend: lost at 20 + 10 (the resend's RTT)
    // + 50 (reorder window) us, long past
    let l = r.st.detect_losses(230_000, &mut r.paths, &mut r.stats);
    assert_eq!((l.lost_packets, l.lost_bytes), (3, 3 * 4096));
    assert_eq!(r.st.retransmit_queue().collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(r.stats.rack_losses, 3);
    assert_eq!(r.st.in_flight_packets(), 0);
}

/// Every EV a SACK newly acknowledges takes an RTT sample from its own latest-sent packet
/// (send time unambiguous), not only the EV of the SACK's latest packet: a SACK of
/// packets on EVs 0, 1 and 2 (sent at 0-5 us, acknowledged at 30 us, the latest on EV 1)
/// gives EV 0 30 - 4 = 26 us, EV 1 30 - 5 = 25 us and EV 2 30 - 2 = 28 us; the
/// connection's sample is the latest packet's (25 us); EV 3, whose packet is missing,
/// none until its own SACK.
#[test]
fn every_ev_a_sack_acknowledges_takes_its_own_rtt_sample() {
    let mut r = Rig::new(0, &[0, 1, 2, 3]);
    r.st.post(spec(1, 6 * MTU));
    let mut sent = Vec::new();
    for t in [0u64, 1_000, 2_000, 3_000, 4_000, 5_000] {
        sent.extend(r.send(t, 1));
    }
    assert_eq!(sent, vec![(0, 0), (1, 1), (2, 2), (3, 3), (4, 0), (5, 1)]);
    // 0, 1, 2 cumulatively, 4 and 5 by the bitmap; 3 (EV 3) missing
    let out = r.sack(30_000, 3, 4, 0b11, Some((1, 5_000)));
    assert_eq!((out.acked_packets, out.rtt_sample_ns), (5, Some(25_000)));
    let srtt: Vec<u64> = r.paths.paths().iter().map(|p| p.srtt_ns).collect();
    // EV 0: packet 4 (sent 4 us); EV 1: packet 5 (5 us); EV 2: packet 2 (2 us); EV 3 none
    assert_eq!(srtt, vec![26_000, 25_000, 28_000, 0]);
    // a second SACK: 3 (EV 3, sent at 3 us) at 60 us: EV 3 alone samples 57 us
    let out = r.sack(60_000, 6, 6, 0, Some((3, 3_000)));
    assert_eq!((out.acked_packets, out.rtt_sample_ns), (1, Some(57_000)));
    let srtt: Vec<u64> = r.paths.paths().iter().map(|p| p.srtt_ns).collect();
    assert_eq!(srtt, vec![26_000, 25_000, 28_000, 57_000]);
}
