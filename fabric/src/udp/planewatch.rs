//! [`PlaneWatch`]: whether this host's NIC port on each plane is up, for a UDP datapath
//! on several planes ([`super::UdpConfig::plane_ips`]). A port that goes down (its link
//! lost, `ip link set dev ... down`, the address removed) takes its plane out of every
//! connection at once and tells each peer (the transport's Port Status Update,
//! `Connection::set_local_plane`, docs/PLANES.md): the peer stops sending on the plane
//! within a round trip instead of finding out by loss.
//!
//! A thread asks the kernel for the interfaces (`getifaddrs(3)`) every
//! [`PLANE_WATCH_INTERVAL`] and publishes a bitmask of the planes whose port is up, which
//! the engine loads once per pass (one atomic load). A plane's port is the interface that
//! holds its address when the watch starts; it is up while that interface is
//! administratively up and running (`IFF_UP` and `IFF_RUNNING`: the kernel's operstate
//! up, so a veth whose peer is down or a NIC without carrier is down) and still holds the
//! address. A plane whose address no interface holds at the start (a loopback address
//! of 127.0.0.0/8 that only the route covers) is not watched: always up.
//!
//! A plane goes down only when two answers in a row say so: the thread asks again at once
//! before it publishes a bit that fell ([`confirm_drops`]). `getifaddrs` is two netlink
//! dumps (links, then addresses), and one taken while another interface changes can
//! miss a port that did not (on a loaded host a plane-0 port seemed down for 9 ms while
//! a test set plane 1's link down and up: `fabric/tests/planes_netns.rs`).

use std::collections::HashMap;
use std::ffi::CStr;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the watch asks the kernel: 5 ms, so a port down takes its plane out within
/// the 50 ms the planes issue asks for recovery, with room for the peer's reaction; one
/// `getifaddrs` (a netlink dump of a few kilobytes) per period costs the watch thread
/// tens of microseconds.
pub const PLANE_WATCH_INTERVAL: Duration = Duration::from_millis(5);

/// What the kernel says about one interface: its flags and its addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IfaceState {
    /// `IFF_UP` and `IFF_RUNNING` both set.
    pub running: bool,
    /// Its IPv4 and IPv6 addresses (canonical).
    pub addrs: Vec<IpAddr>,
}

/// Every interface by name, from `getifaddrs(3)`.
///
/// # Errors
/// The OS error of `getifaddrs`.
pub fn interfaces() -> std::io::Result<HashMap<String, IfaceState>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocates into `head`, freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out: HashMap<String, IfaceState> = HashMap::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_name is a NUL-terminated string in the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        let e = out.entry(name).or_default();
        e.running = flags & (libc::IFF_UP as u32) != 0 && flags & (libc::IFF_RUNNING as u32) != 0;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points at a sockaddr of the family it names, as
        // large as that family's sockaddr.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(IpAddr::from(a.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if let Some(ip) = ip {
            e.addrs.push(ip.to_canonical());
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The interface holding each of `ips` in `ifaces` (`None`: no interface holds it).
pub fn ports_of(ips: &[IpAddr], ifaces: &HashMap<String, IfaceState>) -> Vec<Option<String>> {
    ips.iter()
        .map(|ip| {
            let ip = ip.to_canonical();
            let mut names: Vec<&String> = ifaces
                .iter()
                .filter(|(_, s)| s.addrs.contains(&ip))
                .map(|(n, _)| n)
                .collect();
            names.sort();
            names.first().map(|n| (*n).clone())
        })
        .collect()
}

/// The up-mask of planes whose ports are `ports` (plane `i`'s interface, `None`: not
/// watched, up) with addresses `ips`, as `ifaces` says: bit `i` set while plane `i`'s
/// interface exists, is up and running and still holds its address.
pub fn up_mask(
    ips: &[IpAddr],
    ports: &[Option<String>],
    ifaces: &HashMap<String, IfaceState>,
) -> u32 {
    let mut mask = 0u32;
    for (i, (ip, port)) in ips.iter().zip(ports).enumerate().take(32) {
        let up = match port {
            None => true,
            Some(name) => ifaces
                .get(name)
                .is_some_and(|s| s.running && s.addrs.contains(&ip.to_canonical())),
        };
        if up {
            mask |= 1 << i;
        }
    }
    mask
}

/// The mask to publish after `prev` when one answer gave `first` and the question asked
/// again at once gave `again` (`None`: it failed): the planes up in `first`, and those
/// that fell in `first` but are up again in `again` or could not be asked (a plane
/// goes down only on two answers).
pub fn confirm_drops(prev: u32, first: u32, again: Option<u32>) -> u32 {
    let fell = prev & !first;
    first | (fell & again.unwrap_or(u32::MAX))
}

/// The watch thread of one datapath and the mask it publishes; stops when dropped.
pub struct PlaneWatch {
    mask: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    ports: Vec<Option<String>>,
}

impl std::fmt::Debug for PlaneWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaneWatch")
            .field("ports", &self.ports)
            .field("mask", &self.up_mask())
            .finish()
    }
}

impl PlaneWatch {
    /// Starts watching the ports of the planes at `ips` (plane 0 first) every `interval`.
    ///
    /// # Errors
    /// The OS error of the first `getifaddrs`, or of spawning the thread.
    pub fn start(ips: Vec<IpAddr>, interval: Duration) -> std::io::Result<PlaneWatch> {
        let ifaces = interfaces()?;
        let ports = ports_of(&ips, &ifaces);
        let mask = Arc::new(AtomicU32::new(up_mask(&ips, &ports, &ifaces)));
        let stop = Arc::new(AtomicBool::new(false));
        let watched = ports.iter().any(Option::is_some);
        let thread = if watched {
            let (m, s, p) = (Arc::clone(&mask), Arc::clone(&stop), ports.clone());
            Some(
                std::thread::Builder::new()
                    .name("mrc-planewatch".into())
                    .spawn(move || {
                        while !s.load(Ordering::Relaxed) {
                            std::thread::sleep(interval);
                            // A failed query keeps the last mask (no plane flaps on it).
                            let Ok(ifaces) = interfaces() else {
                                continue;
                            };
                            let prev = m.load(Ordering::Relaxed);
                            let mut next = up_mask(&ips, &p, &ifaces);
                            if prev & !next != 0 {
                                let again = interfaces().ok().map(|i| up_mask(&ips, &p, &i));
                                next = confirm_drops(prev, next, again);
                            }
                            m.store(next, Ordering::Relaxed);
                        }
                    })?,
            )
        } else {
            None
        };
        Ok(PlaneWatch {
            mask,
            stop,
            thread,
            ports,
        })
    }

    /// Bit `i` set while plane `i`'s port is up (all set for planes not watched).
    pub fn up_mask(&self) -> u32 {
        self.mask.load(Ordering::Relaxed)
    }

    /// Plane `i`'s interface, where one held its address at the start.
    pub fn ports(&self) -> &[Option<String>] {
        &self.ports
    }
}

impl Drop for PlaneWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(running: bool, addrs: &[&str]) -> IfaceState {
        IfaceState {
            running,
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn a_plane_is_up_while_its_interface_runs_and_holds_its_address() {
        let ips: Vec<IpAddr> = ["10.0.0.1", "10.1.0.1", "127.0.1.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let mut ifaces: HashMap<String, IfaceState> = [
            ("eth0".to_string(), iface(true, &["10.0.0.1", "fe80::1"])),
            ("eth1".to_string(), iface(true, &["10.1.0.1"])),
            ("lo".to_string(), iface(true, &["127.0.0.1"])),
        ]
        .into();
        let ports = ports_of(&ips, &ifaces);
        assert_eq!(
            ports,
            vec![Some("eth0".to_string()), Some("eth1".to_string()), None]
        );
        assert_eq!(up_mask(&ips, &ports, &ifaces), 0b111);
        // eth1 loses its carrier (or is set down): plane 1 is down; plane 2 is not
        // watched (no interface holds 127.0.1.1) and stays up.
        ifaces.get_mut("eth1").unwrap().running = false;
        assert_eq!(up_mask(&ips, &ports, &ifaces), 0b101);
        ifaces.get_mut("eth1").unwrap().running = true;
        assert_eq!(up_mask(&ips, &ports, &ifaces), 0b111);
        // Its address removed, or the interface gone.
        ifaces
            .get_mut("eth0")
            .unwrap()
            .addrs
            .retain(|a| a.is_ipv6());
        assert_eq!(up_mask(&ips, &ports, &ifaces), 0b110);
        ifaces.remove("eth1");
        assert_eq!(up_mask(&ips, &ports, &ifaces), 0b100);
    }

    #[test]
    fn a_plane_falls_only_on_two_answers_in_a_row() {
        // plane 1 missing from one answer, up in the next: stays up
        assert_eq!(confirm_drops(0b11, 0b01, Some(0b11)), 0b11);
        // down in both: down
        assert_eq!(confirm_drops(0b11, 0b01, Some(0b01)), 0b01);
        // the second question failed: nothing falls on one answer
        assert_eq!(confirm_drops(0b11, 0b01, None), 0b11);
        // a plane that rose rises at once, whatever the second answer
        assert_eq!(confirm_drops(0b01, 0b11, Some(0b01)), 0b11);
        // two fell, the second answer confirms one of them
        assert_eq!(confirm_drops(0b111, 0b001, Some(0b011)), 0b011);
    }

    #[test]
    fn loopback_is_found_running_and_unheld_addresses_are_not_watched() {
        let ifaces = interfaces().unwrap();
        let lo = ifaces.get("lo").expect("a loopback interface");
        assert!(lo.running);
        assert!(lo.addrs.contains(&"127.0.0.1".parse().unwrap()));
        let ips: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "127.0.9.9".parse().unwrap()];
        let w = PlaneWatch::start(ips, Duration::from_millis(1)).unwrap();
        assert_eq!(w.ports(), &[Some("lo".to_string()), None]);
        assert_eq!(w.up_mask(), 0b11);
    }
}
