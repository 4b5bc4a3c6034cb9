//! Sockets in another network namespace: [`NetNs`] runs a closure on a thread of its own
//! that first entered the namespace (`setns`), so the sockets the closure opens, and the
//! threads it starts, live there, while the calling thread's namespace is untouched. A
//! socket stays in the namespace it was created in whichever thread later uses it, so a
//! worker opened this way (its UDP sockets, its listener) serves the caller as usual; only
//! the calls that create sockets (opening it, [`crate::engine::Worker::connect_start`])
//! run through [`NetNs::run`]. `mrc-perf mpi --netns` and the libfabric provider's
//! `FI_MRC_NETNS` put a rank on a host of the namespace testbed (`testbed/mrc-testbed.sh`)
//! this way. Entering a namespace needs `CAP_SYS_ADMIN` (root).

use std::fs::File;
use std::os::fd::AsRawFd;

/// A network namespace, held open: `ip netns`'s `/run/netns/NAME` or any namespace file
/// (`/proc/PID/ns/net`).
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: String,
}

/// The namespace file a name stands for: a bare name is `ip netns`'s `/run/netns/NAME`,
/// anything with a `/` is a path.
pub fn ns_path(name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("/run/netns/{name}")
    }
}

impl NetNs {
    /// Opens the namespace `name` ([`ns_path`]) and checks that this process may enter it
    /// (by entering it once, on a thread of its own).
    ///
    /// # Errors
    /// A message naming the path: an empty name, no such namespace, not a namespace file,
    /// or `setns` refused (not root).
    pub fn open(name: &str) -> Result<NetNs, String> {
        if name.is_empty() {
            return Err("an empty network namespace name".to_string());
        }
        let ns = NetNs::at(&ns_path(name))?;
        ns.run(|| ())?;
        Ok(ns)
    }

    /// The namespace file at `path`, opened but not entered yet.
    fn at(path: &str) -> Result<NetNs, String> {
        let file = File::open(path).map_err(|e| format!("{path}: {e}"))?;
        Ok(NetNs {
            file,
            path: path.to_string(),
        })
    }

    /// The namespace file's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Runs `f` on a new thread that entered this namespace first, and returns what it
    /// returned. A panic in `f` is resumed on the caller's thread.
    ///
    /// # Errors
    /// The thread could not be started, or `setns` failed (the message names the path).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, String> {
        let fd = self.file.as_raw_fd();
        let path = self.path.as_str();
        std::thread::scope(|s| {
            let t = std::thread::Builder::new()
                .name("mrc-netns".into())
                .spawn_scoped(s, move || {
                    // SAFETY: setns on a namespace file this NetNs holds open; it changes
                    // this thread only.
                    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                        let e = std::io::Error::last_os_error();
                        let why = match e.raw_os_error() {
                            Some(libc::EPERM) => " (needs root)",
                            Some(libc::EINVAL) => " (not a network namespace)",
                            _ => "",
                        };
                        return Err(format!("{path}: setns: {e}{why}"));
                    }
                    Ok(f())
                })
                .map_err(|e| format!("{path}: cannot start a thread: {e}"))?;
            match t.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }
}

/// Runs `f` in the namespace file at `path` (a path, not a name: [`ns_path`]) on a thread
/// of its own ([`NetNs::run`]); without a path, `f` runs here, on the calling thread.
///
/// # Errors
/// The namespace cannot be opened or entered (the message names the path).
pub fn in_netns<T: Send>(path: Option<&str>, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    match path {
        None => Ok(f()),
        Some(p) => NetNs::at(p)?.run(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_paths_and_errors() {
        assert_eq!(ns_path("mrctb-h3"), "/run/netns/mrctb-h3");
        assert_eq!(ns_path("/proc/1/ns/net"), "/proc/1/ns/net");
        assert_eq!(in_netns(None, || 7), Ok(7));
        assert!(
            in_netns(Some("/nonexistent/ns"), || 7)
                .unwrap_err()
                .contains("/nonexistent/ns")
        );
        assert!(
            NetNs::open("mrc-no-such-namespace")
                .unwrap_err()
                .starts_with("/run/netns/mrc-no-such-namespace: ")
        );
        assert!(NetNs::open("").is_err());
        // a file that is not a namespace: setns refuses it (EINVAL), as root or not
        assert!(
            NetNs::open("/proc/self/status")
                .unwrap_err()
                .starts_with("/proc/self/status: setns: Invalid argument")
        );
        // this thread's own namespace: entering it needs CAP_SYS_ADMIN
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let ns = NetNs::open("/proc/self/ns/net").unwrap();
            assert_eq!(ns.run(|| 5), Ok(5));
            assert_eq!(ns.path(), "/proc/self/ns/net");
        }
    }
}
