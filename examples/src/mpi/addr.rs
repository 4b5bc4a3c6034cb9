//! Which address a rank binds to: `--bind`, the interface address inside `--bind-net`, or
//! the host's first non-loopback IPv4 address; and the network namespace it does so in
//! (`--netns`).

use std::net::{IpAddr, Ipv4Addr};

/// A network in CIDR notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    /// Its address.
    pub addr: IpAddr,
    /// Prefix length, bits.
    pub prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let bad = || format!("--bind-net: want ADDRESS/PREFIX (10.0.0.0/8), got {s:?}");
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(bad());
        }
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is inside the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let m = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & m == u32::from(a) & m
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

/// The addresses of this host's interfaces that are up (`getifaddrs`).
pub fn interface_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list it allocated; we only read it, then free it once.
    unsafe {
        if libc::getifaddrs(&mut ifa) != 0 {
            return out;
        }
        let mut p = ifa;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            let up = (*p).ifa_flags & (libc::IFF_UP as u32) != 0;
            if up && !a.is_null() {
                match i32::from((*a).sa_family) {
                    libc::AF_INET => {
                        let s = &*(a as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let s = &*(a as *const libc::sockaddr_in6);
                        out.push(IpAddr::V6(std::net::Ipv6Addr::from(s.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(ifa);
    }
    out
}

/// Picks the bind address among `addrs`: the first inside `net`, else (without `net`)
/// the first IPv4 address that is neither loopback nor link-local, else 127.0.0.1.
///
/// # Errors
/// No address inside `net` (the message lists the host's addresses).
pub fn pick(addrs: &[IpAddr], net: Option<Cidr>) -> Result<IpAddr, String> {
    if let Some(n) = net {
        return addrs
            .iter()
            .copied()
            .find(|a| n.contains(*a))
            .ok_or_else(|| {
                let l: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
                format!(
                    "--bind-net {}/{}: no address of this host is inside it (it has {})",
                    n.addr,
                    n.prefix,
                    l.join(", ")
                )
            });
    }
    Ok(addrs
        .iter()
        .copied()
        .find(|a| matches!(a, IpAddr::V4(v) if !v.is_loopback() && !v.is_link_local()))
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)))
}

/// `--netns NAME` of rank `rank`: `{rank}` replaced, a bare name under /run/netns
/// ([`mrc_fabric::netns::ns_path`]).
pub fn netns_path(template: &str, rank: u32) -> String {
    mrc_fabric::netns::ns_path(&template.replace("{rank}", &rank.to_string()))
}

/// Runs `f` on a thread of its own that first enters the network namespace at `path`
/// (`setns`), so that the sockets it opens, and the threads it starts (an engine's), live
/// there; the calling thread's namespace is untouched. Without a path, `f` runs here
/// ([`mrc_fabric::netns::in_netns`], which the libfabric provider's `FI_MRC_NETNS` uses
/// too).
///
/// # Errors
/// The namespace cannot be opened or entered (not root, no such namespace).
pub fn in_netns<T: Send>(path: Option<&str>, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    mrc_fabric::netns::in_netns(path, f).map_err(|e| format!("--netns {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_and_pick() {
        let n: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(n.contains("10.200.3.4".parse().unwrap()));
        assert!(!n.contains("11.0.0.1".parse().unwrap()));
        let v6: Cidr = "2001:db8:1::/48".parse().unwrap();
        assert!(v6.contains("2001:db8:1::9".parse().unwrap()));
        assert!(!v6.contains("2001:db8:2::9".parse().unwrap()));
        assert!(
            "0.0.0.0/0"
                .parse::<Cidr>()
                .unwrap()
                .contains("1.2.3.4".parse().unwrap())
        );
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        let a: Vec<IpAddr> = ["127.0.0.1", "169.254.1.1", "192.168.1.5", "10.1.1.1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(pick(&a, None).unwrap().to_string(), "192.168.1.5");
        assert_eq!(pick(&a, Some(n)).unwrap().to_string(), "10.1.1.1");
        assert!(pick(&a, Some(v6)).unwrap_err().contains("192.168.1.5"));
        assert_eq!(pick(&a[..2], None).unwrap().to_string(), "127.0.0.1");
        assert!(!interface_addrs().is_empty());
        assert_eq!(netns_path("mrctb-h{rank}", 3), "/run/netns/mrctb-h3");
        assert_eq!(netns_path("/proc/1/ns/net", 3), "/proc/1/ns/net");
        assert_eq!(in_netns(None, || 7), Ok(7));
        assert!(
            in_netns(Some("/nonexistent/ns"), || 7)
                .unwrap_err()
                .contains("/nonexistent/ns")
        );
    }
}
