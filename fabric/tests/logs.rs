//! The engine's logs (`tracing` events, fabric/src/engine/watch.rs) over the fake
//! datapath: a QP connecting (info), an EV black-holed going ASSUMED_BAD (warn with the EV
//! and the cause), a dead peer failing the connection with `peer unresponsive` (error),
//! RTO expiries reported once per burst. Each test captures the events of its own engine
//! threads (a scoped subscriber, which the engine threads inherit).

mod engine_common;

use engine_common::PatternWrites;
use mrc_fabric::engine::{Context, EngineConfig, Qp, QpConfig};
use mrc_fabric::udp::{FakeDatapath, FakeNet, FakeVerdict};
use mrc_transport::completion::WcStatus;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One captured event.
#[derive(Clone, Debug)]
struct Captured {
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Captured {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// A subscriber that keeps every event (no spans).
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Fields<'a>(&'a mut Captured);

impl Visit for Fields<'_> {
    fn record_str(&mut self, f: &Field, v: &str) {
        self.put(f, v.to_string());
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.put(f, format!("{v:?}"));
    }
}

impl Fields<'_> {
    fn put(&mut self, f: &Field, v: String) {
        if f.name() == "message" {
            self.0.message = v;
        } else {
            self.0.fields.insert(f.name().to_string(), v);
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.target().starts_with("mrc_")
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut c = Captured {
            level: *e.metadata().level(),
            message: String::new(),
            fields: BTreeMap::new(),
        };
        e.record(&mut Fields(&mut c));
        self.0.lock().unwrap().push(c);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Capture {
    fn events(&self) -> Vec<Captured> {
        self.0.lock().unwrap().clone()
    }

    /// Waits up to 5 s for an event that `f` accepts.
    fn wait_for(&self, what: &str, f: impl Fn(&Captured) -> bool) -> Captured {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(c) = self.events().into_iter().find(&f) {
                return c;
            }
            assert!(
                Instant::now() < until,
                "no event {what} within 5 s; got {:#?}",
                self.events()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn hex(qpn: u32) -> String {
    format!("{qpn:#08x}")
}

const A: &str = "10.0.0.1:4792";
const B: &str = "10.0.0.2:4792";

/// Two engines on `net`, a QP on each (`cfg`), connected directly (no TCP).
fn pair(net: &FakeNet, cfg: QpConfig) -> (Context, Context, Qp, Qp) {
    let (a, b): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
    let ca = Context::with_datapath(FakeDatapath::new(net, a), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(net, b), EngineConfig::default());
    let qa = ca.create_qp(cfg.clone()).unwrap();
    let qb = cb.create_qp(cfg).unwrap();
    let (ia, ib) = (qa.local_info(), qb.local_info());
    qa.connect(&ib, b).unwrap();
    qb.connect(&ia, a).unwrap();
    (ca, cb, qa, qb)
}

/// Posts `n` WRITEs of `size` bytes from `qa` into `qb` and waits for their completions.
fn writes(qa: &Qp, qb: &Qp, size: usize, n: u64) -> Vec<WcStatus> {
    let w = PatternWrites::new(qa, qb, size, 4, 7);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut out = Vec::new();
    while done < n {
        while posted < n && posted - done < 4 {
            w.post_first(qa, posted, size as u32);
            posted += 1;
        }
        let c = qa
            .wait_send_cq(Duration::from_secs(10))
            .unwrap()
            .expect("a send completion within 10 s");
        out.push(c.status);
        done += 1;
    }
    out
}

#[test]
fn a_qp_connecting_logs_info_and_its_state_change() {
    let cap = Capture::default();
    tracing::subscriber::with_default(cap.clone(), || {
        let net = FakeNet::new();
        let (_ca, cb, qa, qb) = pair(&net, QpConfig::default());
        let (a, b) = (hex(qa.qpn()), hex(qb.qpn()));
        let c = cap.wait_for("QP connected", |c| {
            c.message == format!("QP connected to {B}") && c.field("qpn") == Some(&a)
        });
        assert_eq!(c.level, Level::INFO);
        assert_eq!(c.field("peer"), Some(B));
        assert_eq!(c.field("peer_qpn"), Some(b.as_str()));
        assert_eq!(c.field("evs"), Some("16"));
        let c = cap.wait_for("Init -> Ready", |c| {
            c.message == "connection Init -> Ready" && c.field("qpn") == Some(&a)
        });
        assert_eq!(c.level, Level::INFO);
        assert_eq!(
            (c.field("from"), c.field("to")),
            (Some("Init"), Some("Ready"))
        );
        // Nothing went wrong on a clean pair.
        let bad: Vec<_> = cap
            .events()
            .into_iter()
            .filter(|c| c.level <= Level::WARN)
            .collect();
        assert!(bad.is_empty(), "{bad:#?}");
        drop(qb);
        drop(cb);
        let qpn_b = b.clone();
        cap.wait_for("QP destroyed", |c| {
            c.message == "QP destroyed" && c.field("qpn") == Some(&qpn_b)
        });
    });
}

#[test]
fn a_black_holed_ev_goes_assumed_bad_with_its_cause() {
    let cap = Capture::default();
    tracing::subscriber::with_default(cap.clone(), || {
        let net = FakeNet::new();
        let (_ca, _cb, qa, qb) = pair(&net, QpConfig::default());
        let (st, _) = qa.stats().unwrap();
        let (ev, port, _) = st.evs[3];
        let a_ip = A.parse::<SocketAddr>().unwrap().ip();
        // Every datagram a sends from EV `ev`'s socket vanishes (data, probes).
        net.set_filter(move |from, _to, _b| {
            if from.ip() == a_ip && from.port() == port {
                FakeVerdict::Drop
            } else {
                FakeVerdict::Deliver
            }
        });
        let done = writes(&qa, &qb, 256 * 1024, 16);
        assert!(done.iter().all(|&s| s == WcStatus::Success), "{done:?}");
        let a = hex(qa.qpn());
        let msg = |cause: &str| format!("EV {ev} ASSUMED_BAD: {cause}");
        let c = cap.wait_for("EV ASSUMED_BAD", |c| {
            c.field("qpn") == Some(&a)
                && (c.message == msg("loss") || c.message == msg("RTO timeout"))
        });
        assert_eq!(c.level, Level::WARN);
        assert_eq!(c.field("ev"), Some(ev.to_string().as_str()));
        assert_eq!(c.field("state"), Some("ASSUMED_BAD"));
        assert!(
            matches!(c.field("cause"), Some("loss" | "RTO timeout")),
            "{c:?}"
        );
        // The connection itself is fine.
        assert!(cap.events().iter().all(|c| c.level != Level::ERROR));
    });
}

#[test]
fn a_dead_peer_fails_the_connection_with_an_error_naming_the_cause() {
    let cap = Capture::default();
    tracing::subscriber::with_default(cap.clone(), || {
        let net = FakeNet::new();
        let mut cfg = QpConfig::default();
        cfg.conn.send.unresponsive_budget_ns = Some(300_000_000);
        let (_ca, _cb, qa, qb) = pair(&net, cfg);
        let b_ip = B.parse::<SocketAddr>().unwrap().ip();
        // b answers nothing from now on.
        net.set_filter(move |from, _to, _b| {
            if from.ip() == b_ip {
                FakeVerdict::Drop
            } else {
                FakeVerdict::Deliver
            }
        });
        let done = writes(&qa, &qb, 4096, 1);
        assert_eq!(done, vec![WcStatus::RetryExceeded]);
        let (st, _) = qa.stats().unwrap();
        let why = st.give_up.expect("a give-up cause").to_string();
        assert!(why.starts_with("peer unresponsive for 0."), "{why}");
        let a = hex(qa.qpn());
        let c = cap.wait_for("connection failed", |c| {
            c.level == Level::ERROR && c.field("qpn") == Some(&a)
        });
        assert_eq!(c.message, format!("connection failed: {why}"));
        assert_eq!(c.field("cause"), Some(why.as_str()));
        assert_eq!(c.field("from"), Some("Ready"));
        // The failed work request is reported (warn), once.
        let c = cap.wait_for("failed completions", |c| {
            c.field("qpn") == Some(&a) && c.message.contains("completed with an error")
        });
        assert_eq!(c.level, Level::WARN);
        assert_eq!(c.field("count"), Some("1"));
        assert_eq!(c.field("first"), Some("RetryExceeded"));
        // RTO expiries: reported in at most two events within the 0.3 s (the first expiry,
        // then the rest before the failure), which together count every expiry.
        let rtos: Vec<_> = cap
            .events()
            .into_iter()
            .filter(|c| c.field("qpn") == Some(&a) && c.message.starts_with("RTO expired"))
            .collect();
        assert!((1..=2).contains(&rtos.len()), "{rtos:#?}");
        assert!(rtos.iter().all(|c| c.level == Level::WARN));
        let total: u64 = rtos
            .iter()
            .map(|c| c.field("expiries").unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(total, st.conn.timeouts);
        assert!(total >= 2, "{total}");
        // Every EV timed out: each is named once (at most 8 per sample, then a summary).
        let evs = cap
            .events()
            .into_iter()
            .filter(|c| c.field("qpn") == Some(&a) && c.field("state") == Some("ASSUMED_BAD"))
            .count();
        assert!(evs >= 1, "no EV went ASSUMED_BAD: {:#?}", cap.events());
    });
}
