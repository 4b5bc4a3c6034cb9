//! The key setup of an authenticated TCP bootstrap (`Qp::connect_on_authenticated`) binds
//! the roles to the TCP direction: the end that connected is the initiator, the end that
//! accepted the responder. A relay that joins two connectors (or two acceptors) sharing
//! the pre-shared key, each believing it reached its peer, fails the key confirmation at
//! both ends (with roles from the nonces, as before, both confirmed and connected).

use mrc_fabric::engine::bootstrap::BootstrapError;
use mrc_fabric::engine::{Context, EngineConfig, EngineError, QpConfig};
use mrc_fabric::udp::{FakeDatapath, FakeNet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const PSK: &[u8] = b"0123456789abcdef0123456789abcdef";

/// Both ends of one TCP connection on loopback: (the connector's, the acceptor's).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (a, _) = l.accept().unwrap();
    (c, a)
}

/// Runs the authenticated bootstrap of two QPs over `streams`, the first end claiming
/// `roles.0` (initiator or not), the second `roles.1`; the outcome at each end.
fn bootstrap(roles: (bool, bool)) -> (Result<(), String>, Result<(), String>) {
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let ca = Context::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = ca.create_qp(QpConfig::default()).unwrap();
    let qb = cb.create_qp(QpConfig::default()).unwrap();
    let (sa, sb) = tcp_pair();
    let until = Instant::now() + Duration::from_secs(10);
    let outcome = |r: Result<_, EngineError>| match r {
        Ok(_) => Ok(()),
        Err(EngineError::Bootstrap(BootstrapError::AuthMismatch(m))) => Err(m.to_string()),
        Err(e) => Err(format!("other: {e}")),
    };
    let tb = std::thread::spawn(move || {
        let r = qb.connect_on_authenticated(sb, until, PSK, roles.1);
        (outcome(r), qb)
    });
    let ra = outcome(qa.connect_on_authenticated(sa, until, PSK, roles.0));
    let (rb, _qb) = tb.join().unwrap();
    (ra, rb)
}

#[test]
fn a_connector_and_an_acceptor_with_one_key_connect() {
    assert_eq!(bootstrap((true, false)), (Ok(()), Ok(())));
}

#[test]
fn two_connectors_joined_by_a_relay_fail_the_key_confirmation() {
    let why = Err("the peer's pre-shared key differs".to_string());
    assert_eq!(bootstrap((true, true)), (why.clone(), why));
}

#[test]
fn two_acceptors_joined_by_a_relay_fail_the_key_confirmation() {
    let why = Err("the peer's pre-shared key differs".to_string());
    assert_eq!(bootstrap((false, false)), (why.clone(), why));
}

/// An end whose own nonce comes back (a reflecting relay) refuses before any key
/// confirmation.
#[test]
fn a_reflected_nonce_is_refused() {
    use std::io::{Read, Write};
    let net = FakeNet::new();
    let ctx = Context::with_datapath(
        FakeDatapath::new(&net, "10.0.0.1:4792".parse().unwrap()),
        EngineConfig::default(),
    );
    let qp = ctx.create_qp(QpConfig::default()).unwrap();
    let (s, mut mirror) = tcp_pair();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = mirror.read(&mut buf) {
            if n == 0 || mirror.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let r = qp.connect_on_authenticated(s, Instant::now() + Duration::from_secs(10), PSK, true);
    match r {
        Err(EngineError::Bootstrap(BootstrapError::AuthMismatch(m))) => {
            assert_eq!(m, "the peer echoed this end's nonce");
        }
        other => panic!("{other:?}"),
    }
    drop(qp);
    drop(ctx);
    echo.join().unwrap();
}
