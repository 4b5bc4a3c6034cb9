//! RTT samples from echoed send timestamps.

use crate::AckSample;

/// The RTT sample an acknowledgement carries, in ns, or `None` when it carries none.
///
/// The sample is `now_ns - echoed_send_ts_ns`. A missing echo (`None`), a zero echo
/// (`Some(0)`: senders never stamp 0, so it means "not stamped") and an echo from the
/// future (`echoed_send_ts_ns > now_ns`, which only a corrupt or hostile peer can produce)
/// are not samples; callers count them in `Metrics::rejected_rtt_samples`.
pub(crate) fn rtt_sample_ns(now_ns: u64, ack: &AckSample) -> Option<u64> {
    match ack.echoed_send_ts_ns {
        Some(ts) if ts != 0 && ts <= now_ns => Some(now_ns - ts),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(echo: Option<u64>) -> AckSample {
        AckSample {
            echoed_send_ts_ns: echo,
            ..AckSample::default()
        }
    }

    #[test]
    fn sample_is_now_minus_echo() {
        assert_eq!(
            rtt_sample_ns(1_012_000, &ack(Some(1_000_000))),
            Some(12_000)
        );
        assert_eq!(rtt_sample_ns(5, &ack(Some(5))), Some(0));
    }

    #[test]
    fn missing_zero_and_future_echoes_are_rejected() {
        assert_eq!(rtt_sample_ns(1_012_000, &ack(None)), None);
        assert_eq!(rtt_sample_ns(1_012_000, &ack(Some(0))), None);
        assert_eq!(rtt_sample_ns(1_012_000, &ack(Some(1_012_001))), None);
    }
}
