//! A host's plane addresses from a comma-separated list, as the embedding layers take
//! them from their environment (NCCL's `NCCL_SPRAY_PLANES`, the libfabric provider's
//! `FI_MRC_PLANES`): one rule and one set of messages for both.

use super::MAX_PLANE_IPS;
use std::net::IpAddr;
use thiserror::Error;

/// Why a plane list is refused ([`parse_plane_list`]). The messages name the bad item;
/// the caller puts the variable's name and value in front.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PlaneListError {
    /// An item that is not an IP address: the item and the parser's words.
    #[error("{0:?}: {1}")]
    NotAnIp(String, String),
    /// Fewer than 2 or more than [`MAX_PLANE_IPS`] addresses.
    #[error("{0} addresses; give 2 to {MAX_PLANE_IPS}")]
    Count(usize),
    /// An unspecified, multicast or broadcast address, or one of another family than
    /// plane 0's.
    #[error("{0}: every plane's address is a unicast one of one family")]
    NotUnicastOfOneFamily(IpAddr),
    /// An address given twice.
    #[error("{0} is given twice")]
    Repeated(IpAddr),
}

/// Parses `list`: 2 to [`MAX_PLANE_IPS`] unicast IP addresses of one family, separated by
/// commas (spaces around each allowed), none repeated; plane 0 first. The result suits
/// [`super::UdpConfig::plane_ips`].
///
/// # Errors
/// [`PlaneListError`], for the first thing wrong.
pub fn parse_plane_list(list: &str) -> Result<Vec<IpAddr>, PlaneListError> {
    let ips = list
        .split(',')
        .map(|a| {
            a.trim()
                .parse::<IpAddr>()
                .map_err(|e| PlaneListError::NotAnIp(a.to_string(), e.to_string()))
        })
        .collect::<Result<Vec<IpAddr>, PlaneListError>>()?;
    if !(2..=MAX_PLANE_IPS).contains(&ips.len()) {
        return Err(PlaneListError::Count(ips.len()));
    }
    for (i, &ip) in ips.iter().enumerate() {
        let broadcast = matches!(ip, IpAddr::V4(a) if a.is_broadcast());
        if ip.is_unspecified() || ip.is_multicast() || broadcast || ip.is_ipv6() != ips[0].is_ipv6()
        {
            return Err(PlaneListError::NotUnicastOfOneFamily(ip));
        }
        if ips[..i].contains(&ip) {
            return Err(PlaneListError::Repeated(ip));
        }
    }
    Ok(ips)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plane_lists_parse_or_say_what_is_wrong() {
        let ok = parse_plane_list(" 10.0.0.1 ,10.1.0.1").unwrap();
        assert_eq!(
            ok,
            vec![
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "10.1.0.1".parse().unwrap()
            ]
        );
        let eight = (1..=8).map(|i| format!("fd00::{i}")).collect::<Vec<_>>();
        assert_eq!(parse_plane_list(&eight.join(",")).unwrap().len(), 8);
        for (list, want) in [
            ("10.0.0.1", "1 addresses; give 2 to 8"),
            ("", "\"\": invalid IP address syntax"),
            ("10.0.0.1,", "\"\": invalid IP address syntax"),
            ("10.0.0.1,x", "\"x\": invalid IP address syntax"),
            (
                "10.0.0.1,::1",
                "::1: every plane's address is a unicast one of one family",
            ),
            (
                "0.0.0.0,10.0.0.1",
                "0.0.0.0: every plane's address is a unicast one of one family",
            ),
            (
                "10.0.0.1,224.0.0.1",
                "224.0.0.1: every plane's address is a unicast one of one family",
            ),
            (
                "10.0.0.1,255.255.255.255",
                "255.255.255.255: every plane's address is a unicast one of one family",
            ),
            ("10.0.0.1,10.0.0.1", "10.0.0.1 is given twice"),
        ] {
            assert_eq!(
                parse_plane_list(list).unwrap_err().to_string(),
                want,
                "{list}"
            );
        }
        let nine = (1..=9).map(|i| format!("fd00::{i}")).collect::<Vec<_>>();
        assert_eq!(
            parse_plane_list(&nine.join(",")),
            Err(PlaneListError::Count(9))
        );
    }
}
