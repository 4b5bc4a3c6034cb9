//! The node-wide profile store of the controller API: the EV format, EV and CC profile
//! tables of one verbs device, kept in one file so that a controller process programs
//! them and applications in other processes run their QPs on them.
//!
//! Layout: the directory `$MRC_CTL_DIR/<device>` (default `/run/mrc/<device>`) holds
//! - `profiles`: the tables ([`encode`]), replaced whole by write-to-`profiles.tmp` and
//!   `rename`, mode 0644, so a reader sees the previous or the next tables, never a mix;
//! - `lock`: the writers' `flock`, so two controllers' read-modify-write steps do not
//!   interleave (readers take no lock).
//!
//! Only a process that can write the directory can change the tables: creating it, or
//! opening `lock` for writing, failing with `EACCES`/`EPERM`/`EROFS` is `EPERM`. That is
//! where `mrc_ctl.h`'s "controller processes MUST possess CAP_NET_ADMIN" lands: the
//! default directory under `/run` is root's.
//!
//! Readers look at the file's `stat` (device, inode, size, modification and change
//! times) and read it again only when that changed: one `stat` per look, which a QP does
//! every millisecond for the EV states. A reader keeps the file it read open, so its
//! inode is not reused by the writer's next file: every replacement is a new inode
//! number, however fast the writes follow one another. What the file says is hostile input: the file is
//! at most [`MAX_STORE_BYTES`] (checked by `fstat` before a byte is read, and the read is
//! bounded too), every count is checked against the provider's limits and against the
//! bytes left before anything is kept, a checksum covers the payload, and every value the
//! tables' code relies on (states, modes, array lengths) is checked. Any failure is a
//! [`StoreError`], which the C calls answer with `EINVAL`; nothing sized by the file is
//! allocated ahead of the bytes that back it.

use crate::ctl::{
    CcProfile, Ev, EvField, EvProfile, FmtProfile, NsccCfg, ProfileState, ev_mode, ev_state,
    fmt_mode, limits,
};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The environment variable naming the store's parent directory (default `/run/mrc`).
pub const DIR_ENV: &str = "MRC_CTL_DIR";

/// The default parent directory.
pub const DEFAULT_DIR: &str = "/run/mrc";

/// The file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"MRCCTLS\0";

/// The format version this library writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Bytes of the header: magic, version, flags, generation, payload length, checksum.
pub const HEADER_BYTES: usize = 32;

/// The largest store file accepted (the largest the limits allow is about 2.5 MB: 65536
/// EVs of 37 bytes and the profiles around them).
pub const MAX_STORE_BYTES: u64 = 4 << 20;

/// Why the store could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// A system call failed with this errno (`ENOENT` for a missing file is not an
    /// error: it is empty tables).
    Io(i32),
    /// The path is not a regular file.
    NotRegular,
    /// More than [`MAX_STORE_BYTES`].
    TooLarge,
    /// Fewer bytes than the header or the payload length says.
    Truncated,
    /// Not a store file (magic).
    BadMagic,
    /// A format version this library does not read.
    BadVersion(u32),
    /// The payload's checksum differs.
    BadChecksum,
    /// A value out of range or inconsistent: what was wrong.
    Corrupt(&'static str),
}

impl StoreError {
    /// The errno a C call answers: `EINVAL` for a store that is not valid, the system
    /// call's for I/O.
    pub fn errno(self) -> i32 {
        match self {
            StoreError::Io(e) => e,
            _ => libc::EINVAL,
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Io(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            StoreError::NotRegular => write!(f, "not a regular file"),
            StoreError::TooLarge => write!(f, "larger than {MAX_STORE_BYTES} bytes"),
            StoreError::Truncated => write!(f, "truncated"),
            StoreError::BadMagic => write!(f, "not a profile store"),
            StoreError::BadVersion(v) => write!(f, "format version {v}"),
            StoreError::BadChecksum => write!(f, "checksum mismatch"),
            StoreError::Corrupt(w) => write!(f, "corrupt: {w}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The three profile tables as the store holds them (the per-process parts, QP holds
/// and event queues, are not stored).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tables {
    /// EV format profiles.
    pub fmt: BTreeMap<u64, FmtProfile>,
    /// EV profiles (`users` 0).
    pub ev: BTreeMap<u64, EvProfile>,
    /// CC profiles (`users` 0).
    pub cc: BTreeMap<u64, CcProfile>,
}

/// FNV-1a, 32 bits.
fn checksum(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
    })
}

fn state_byte(s: ProfileState) -> u8 {
    s.to_c() as u8
}

/// The store file of `t` at `generation`.
pub fn encode(t: &Tables, generation: u64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(t.fmt.len() as u32).to_le_bytes());
    for (id, f) in &t.fmt {
        p.extend_from_slice(&id.to_le_bytes());
        p.push(state_byte(f.state));
        p.extend_from_slice(&f.mode.to_le_bytes());
        p.push(f.fields.len() as u8);
        p.extend_from_slice(&f.fields);
    }
    p.extend_from_slice(&(t.ev.len() as u32).to_le_bytes());
    for (id, e) in &t.ev {
        p.extend_from_slice(&id.to_le_bytes());
        p.push(state_byte(e.state));
        p.extend_from_slice(&e.mode.to_le_bytes());
        p.extend_from_slice(&e.fmt_id.to_le_bytes());
        for v in [e.count, e.min_active, e.event_mask] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p.extend_from_slice(&e.generation.to_le_bytes());
        p.push(e.fields.len() as u8);
        for f in &e.fields {
            for v in [f.width, f.init_val, f.min_val, f.max_val, f.mask] {
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
        p.extend_from_slice(&(e.evs.len() as u32).to_le_bytes());
        for (v, s) in e.evs.iter().zip(&e.states) {
            p.extend_from_slice(&v.val);
            p.push(v.port);
            p.extend_from_slice(&s.to_le_bytes());
        }
    }
    p.extend_from_slice(&(t.cc.len() as u32).to_le_bytes());
    for (id, c) in &t.cc {
        p.extend_from_slice(&id.to_le_bytes());
        p.push(state_byte(c.state));
        p.push(u8::from(c.algorithm_set));
        p.push(u8::from(c.nscc));
        p.push(u8::from(c.config.is_some()));
        if let Some(n) = &c.config {
            p.push(n.disable_qa);
            for v in [
                n.adjust_bytes_threshold,
                n.adjust_period_threshold_ns,
                n.base_rtt_ns,
            ] {
                p.extend_from_slice(&v.to_le_bytes());
            }
            for v in [n.eta, n.fi, n.fi_scale, n.gamma, n.max_md_jump] {
                p.extend_from_slice(&v.to_le_bytes());
            }
            p.extend_from_slice(&n.max_cwnd_bytes.to_le_bytes());
            p.push(n.qa_gate);
            for v in [n.qa_threshold_ns, n.target_delay_ns] {
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + p.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(&(p.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(&p).to_le_bytes());
    out.extend_from_slice(&p);
    out
}

/// A cursor over hostile bytes: every read checks what is left.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.0.len() < n {
            return Err(StoreError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, StoreError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn f32(&mut self) -> Result<f32, StoreError> {
        Ok(f32::from_bits(self.u32()?))
    }
    fn u64(&mut self) -> Result<u64, StoreError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bool(&mut self) -> Result<bool, StoreError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(StoreError::Corrupt("flag not 0 or 1")),
        }
    }
    fn state(&mut self) -> Result<ProfileState, StoreError> {
        ProfileState::from_c(u32::from(self.u8()?)).ok_or(StoreError::Corrupt("profile state"))
    }
    /// A count of at most `max` entries of at least `min_bytes` each (so no count
    /// promises more entries than the bytes left hold).
    fn count(
        &mut self,
        max: u32,
        min_bytes: usize,
        what: &'static str,
    ) -> Result<usize, StoreError> {
        let n = self.u32()?;
        if n > max {
            return Err(StoreError::Corrupt(what));
        }
        if (n as usize).saturating_mul(min_bytes) > self.0.len() {
            return Err(StoreError::Truncated);
        }
        Ok(n as usize)
    }
}

/// A mode word: 0 (not set) or one bit of `all`.
fn mode_ok(m: u32, all: u32) -> bool {
    m == 0 || (m.count_ones() == 1 && m & !all == 0)
}

/// Ids: non-zero (0 is the provider's) and ascending (each once).
fn id_ok(id: u64, prev: Option<u64>) -> bool {
    id != 0 && prev.is_none_or(|p| id > p)
}

/// The generation and the tables of a store file.
pub fn decode(b: &[u8]) -> Result<(u64, Tables), StoreError> {
    if b.len() as u64 > MAX_STORE_BYTES {
        return Err(StoreError::TooLarge);
    }
    let mut h = Cur(b);
    if h.take(8).map_err(|_| StoreError::Truncated)? != MAGIC {
        return Err(StoreError::BadMagic);
    }
    let version = h.u32()?;
    if version != FORMAT_VERSION {
        return Err(StoreError::BadVersion(version));
    }
    if h.u32()? != 0 {
        return Err(StoreError::Corrupt("flags"));
    }
    let generation = h.u64()?;
    let len = h.u32()? as usize;
    let sum = h.u32()?;
    if h.0.len() < len {
        return Err(StoreError::Truncated);
    }
    if h.0.len() > len {
        return Err(StoreError::Corrupt("bytes after the payload"));
    }
    if checksum(h.0) != sum {
        return Err(StoreError::BadChecksum);
    }
    let mut c = Cur(h.0);
    let mut t = Tables::default();
    let n = c.count(limits::MAX_FMT_PROFILES, 14, "EV format profile count")?;
    for _ in 0..n {
        let id = c.u64()?;
        if !id_ok(id, t.fmt.keys().next_back().copied()) {
            return Err(StoreError::Corrupt("EV format profile id"));
        }
        let state = c.state()?;
        let mode = c.u32()?;
        if !mode_ok(mode, fmt_mode::ALL) {
            return Err(StoreError::Corrupt("EV format mode"));
        }
        let nf = usize::from(c.u8()?);
        if nf > limits::MAX_FIELDS {
            return Err(StoreError::Corrupt("EV format field count"));
        }
        let fields = c.take(nf)?.to_vec();
        t.fmt.insert(
            id,
            FmtProfile {
                state,
                mode,
                fields,
            },
        );
    }
    let n = c.count(limits::MAX_EV_PROFILES, 46, "EV profile count")?;
    let mut total = 0usize;
    for _ in 0..n {
        let id = c.u64()?;
        if !id_ok(id, t.ev.keys().next_back().copied()) {
            return Err(StoreError::Corrupt("EV profile id"));
        }
        let state = c.state()?;
        let mode = c.u32()?;
        if !mode_ok(mode, ev_mode::ALL) {
            return Err(StoreError::Corrupt("EV mode"));
        }
        let fmt_id = c.u64()?;
        let count = c.u32()?;
        let min_active = c.u32()?;
        let event_mask = c.u32()?;
        if event_mask & !(ev_state::GOOD | ev_state::ASSUMED_BAD) != 0 {
            return Err(StoreError::Corrupt("EV event mask"));
        }
        let generation = c.u64()?;
        let nf = usize::from(c.u8()?);
        if nf > limits::MAX_FIELDS {
            return Err(StoreError::Corrupt("EV field count"));
        }
        let mut fields = Vec::new();
        for _ in 0..nf {
            let f = EvField {
                width: c.u32()?,
                init_val: c.u32()?,
                min_val: c.u32()?,
                max_val: c.u32()?,
                mask: c.u32()?,
            };
            if f.min_val > f.max_val {
                return Err(StoreError::Corrupt("EV field range"));
            }
            fields.push(f);
        }
        let ne = c.count(limits::MAX_EV_COUNT_PROFILE, 37, "EV array length")?;
        total += ne;
        if total > limits::MAX_EV_COUNT as usize {
            return Err(StoreError::Corrupt("EVs over all profiles"));
        }
        if count > limits::MAX_EV_COUNT_PROFILE || (ne != 0 && ne != count as usize) {
            return Err(StoreError::Corrupt("EV count"));
        }
        if state != ProfileState::Init && ne == 0 {
            return Err(StoreError::Corrupt("EV profile without EVs"));
        }
        let mut evs = Vec::new();
        let mut states = Vec::new();
        for _ in 0..ne {
            let mut val = [0u8; crate::ctl::EV_MAX_BYTES];
            val.copy_from_slice(c.take(crate::ctl::EV_MAX_BYTES)?);
            let port = c.u8()?;
            let s = c.u32()?;
            if ![ev_state::GOOD, ev_state::ASSUMED_BAD, ev_state::DENIED].contains(&s) {
                return Err(StoreError::Corrupt("EV state"));
            }
            evs.push(Ev { val, port });
            states.push(s);
        }
        t.ev.insert(
            id,
            EvProfile {
                state,
                mode,
                fmt_id,
                count,
                min_active,
                event_mask,
                fields,
                evs,
                states,
                users: 0,
                generation,
            },
        );
    }
    let n = c.count(limits::MAX_CC_PROFILES, 12, "CC profile count")?;
    for _ in 0..n {
        let id = c.u64()?;
        if !id_ok(id, t.cc.keys().next_back().copied()) {
            return Err(StoreError::Corrupt("CC profile id"));
        }
        let state = c.state()?;
        let algorithm_set = c.bool()?;
        let nscc = c.bool()?;
        let config = if c.bool()? {
            Some(NsccCfg {
                disable_qa: c.u8()?,
                adjust_bytes_threshold: c.u32()?,
                adjust_period_threshold_ns: c.u32()?,
                base_rtt_ns: c.u32()?,
                eta: c.f32()?,
                fi: c.f32()?,
                fi_scale: c.f32()?,
                gamma: c.f32()?,
                max_md_jump: c.f32()?,
                max_cwnd_bytes: c.u32()?,
                qa_gate: c.u8()?,
                qa_threshold_ns: c.u32()?,
                target_delay_ns: c.u32()?,
            })
        } else {
            None
        };
        t.cc.insert(
            id,
            CcProfile {
                state,
                algorithm_set,
                nscc,
                config,
                users: 0,
            },
        );
    }
    if !c.0.is_empty() {
        return Err(StoreError::Corrupt("bytes after the tables"));
    }
    Ok((generation, t))
}

/// What `stat` says of the file: a change of any part means "read it again".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        }
    }
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::Io(e.raw_os_error().unwrap_or(libc::EIO))
}

/// `EACCES`, `EPERM` and `EROFS` (not allowed to write the directory) are `EPERM`.
fn write_errno(e: std::io::Error) -> i32 {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => libc::EPERM,
        Some(x) => x,
        None => libc::EIO,
    }
}

/// One device's store, as a process sees it: where it is, and what it last read or
/// wrote.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    device: Option<String>,
    /// The file as last read or written (`None`: never, or it was absent).
    seen: Option<Stamp>,
    /// That file, held open: its inode cannot be freed and reused by a later file, so a
    /// replaced file always shows a new inode number (times alone are a jiffy coarse).
    held: Option<File>,
    /// The generation last read or written.
    generation: u64,
}

/// The result of [`Store::poll`].
#[derive(Debug, PartialEq)]
pub enum Poll {
    /// The file did not change since the last look.
    Unchanged,
    /// New tables (an absent file: empty ones) at this generation.
    Changed(u64, Box<Tables>),
}

impl Store {
    /// The store in directory `dir` (tests; [`Store::for_device`] names the real one).
    pub fn at(dir: impl Into<PathBuf>) -> Store {
        Store {
            dir: dir.into(),
            device: None,
            seen: None,
            held: None,
            generation: 0,
        }
    }

    /// The store of verbs device `name`: `$MRC_CTL_DIR/<name>`, else
    /// `/run/mrc/<name>`. `EINVAL` for a name that is not one path component of
    /// `[A-Za-z0-9._-]`.
    pub fn for_device(name: &str) -> Result<Store, i32> {
        if name.is_empty()
            || name == "."
            || name == ".."
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(libc::EINVAL);
        }
        let base = std::env::var_os(DIR_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from);
        Ok(Store {
            device: Some(name.to_owned()),
            ..Store::at(base.join(name))
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The device this store is for (`None` for [`Store::at`]).
    pub fn device(&self) -> Option<&str> {
        self.device.as_deref()
    }

    /// The generation last read or written.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The tables file.
    pub fn file(&self) -> PathBuf {
        self.dir.join("profiles")
    }

    /// Looks at the file: [`Poll::Unchanged`] when its `stat` is what was last seen
    /// (one `stat`), else reads and checks it. A missing file is empty tables.
    pub fn poll(&mut self) -> Result<Poll, StoreError> {
        let path = self.file();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.seen.is_none() && self.generation == 0 {
                    return Ok(Poll::Unchanged);
                }
                self.seen = None;
                self.held = None;
                self.generation = 0;
                return Ok(Poll::Changed(0, Box::default()));
            }
            Err(e) => return Err(io(e)),
        };
        if self.seen == Some(Stamp::of(&meta)) {
            return Ok(Poll::Unchanged);
        }
        let (file, stamp, bytes) = read_bounded(&path)?;
        let (generation, tables) = decode(&bytes)?;
        self.seen = Some(stamp);
        self.held = Some(file);
        self.generation = generation;
        Ok(Poll::Changed(generation, Box::new(tables)))
    }

    /// Takes the writers' lock (creating the directory, mode 0755, if it is missing):
    /// `EPERM` when this process may not write it. The lock holds until the
    /// [`Writer`] drops.
    pub fn lock(&self) -> Result<Writer, i32> {
        if !self.dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&self.dir)
                .map_err(write_errno)?;
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.dir.join("lock"))
            .map_err(write_errno)?;
        use std::os::fd::AsRawFd;
        // SAFETY: a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(write_errno(std::io::Error::last_os_error()));
        }
        Ok(Writer { _lock: f })
    }

    /// Writes `t` as the next generation (the caller holds [`Store::lock`] and has
    /// [`Store::poll`]ed under it): `profiles.tmp` (0644), then renamed over `profiles`.
    pub fn commit(&mut self, _w: &Writer, t: &Tables) -> Result<(), i32> {
        let generation = self.generation + 1;
        let bytes = encode(t, generation);
        let tmp = self.dir.join("profiles.tmp");
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(write_errno)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(write_errno)?;
        f.write_all(&bytes).map_err(write_errno)?;
        std::fs::rename(&tmp, self.file()).map_err(write_errno)?;
        // The file as renamed (rename may change its ctime), still open.
        self.seen = Some(Stamp::of(&f.metadata().map_err(write_errno)?));
        self.held = Some(f);
        self.generation = generation;
        Ok(())
    }
}

/// The writers' lock of a store (an `flock` on its `lock` file), released on drop.
#[derive(Debug)]
pub struct Writer {
    _lock: File,
}

/// Opens `path` without following a link or blocking (a FIFO), checks it is a regular
/// file of at most [`MAX_STORE_BYTES`] and reads it, never more than that bound.
fn read_bounded(path: &Path) -> Result<(File, Stamp, Vec<u8>), StoreError> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(io)?;
    let m = f.metadata().map_err(io)?;
    if !m.file_type().is_file() {
        return Err(StoreError::NotRegular);
    }
    if m.size() > MAX_STORE_BYTES {
        return Err(StoreError::TooLarge);
    }
    let mut bytes = Vec::new();
    (&mut f)
        .take(MAX_STORE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_STORE_BYTES {
        return Err(StoreError::TooLarge);
    }
    Ok((f, Stamp::of(&m), bytes))
}
