//! Shared receive loop of the UDP datapath tests (io_uring, direct, mechanics).
#![allow(dead_code)]

use mrc_fabric::datapath::Datapath;
use mrc_transport::Ecn;
use std::net::SocketAddr;

/// Received datagrams: source, ECN, bytes.
pub type Got = Vec<(SocketAddr, Ecn, Vec<u8>)>;

/// Receives from `d` until `n` datagrams arrived (bounded: 500 waits of at most 10 ms).
pub fn recv_n<D: Datapath>(d: &mut D, n: usize) -> Got {
    let mut got = Vec::new();
    for _ in 0..500 {
        d.rx_burst(usize::MAX, &mut |r| {
            got.push((r.from, r.ecn, r.bytes.to_vec()))
        })
        .unwrap();
        if got.len() >= n {
            break;
        }
        d.wait(10_000_000).unwrap();
    }
    got
}
