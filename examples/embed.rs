//! The embedding API in one page: two QPs on loopback, a TCP bootstrap, an RDMA WRITE with
//! immediate data, a SEND into a posted receive, completions, and the bytes checked.
//!
//! Run: `cargo run -p mrc-examples --example embed`

use mrc_fabric::engine::{Context, EngineConfig, QpConfig};
use mrc_fabric::udp::UdpConfig;
use mrc_transport::{Access, Sge};
use std::net::TcpListener;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let t = Duration::from_secs(5);
    // 1. A context per side: an engine thread with an io_uring UDP datapath (port 0: any).
    let server_ctx = Context::new(
        UdpConfig::bind("127.0.0.1:0".parse()?),
        EngineConfig::default(),
    )?;
    let client_ctx = Context::new(
        UdpConfig::bind("127.0.0.1:0".parse()?),
        EngineConfig::default(),
    )?;

    // 2. QPs (16 EVs by default, one UDP source port each) and registered memory.
    let server = server_ctx.create_qp(QpConfig::default())?;
    let client = client_ctx.create_qp(QpConfig::default())?;
    let dst = server.reg_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let inbox = server.reg_mr(4096, Access::LOCAL_WRITE)?;
    let src = client.reg_mr(1 << 20, Access::LOCAL_WRITE)?;
    client.write_mr(src.lkey, 0, &vec![0xAB; 1 << 20])?;
    client.write_mr(src.lkey, 0, b"hello over 16 paths")?;

    // 3. Bootstrap over TCP (QPN, PSN, regions), as perftest does; both QPs become Ready.
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let accept = std::thread::spawn(move || server.accept(&listener, t).map(|c| (server, c)));
    let conn = client.connect_tcp(addr, t)?;
    let (server, _server_conn) = accept.join().map_err(|_| "server thread")??;
    let remote = conn.remote.regions[0];
    println!(
        "connected to QP {} at {}, source ports {:?}",
        conn.remote.qpn, conn.udp, conn.source_ports
    );

    // 4. Post: a receive on the server, a 1 MiB WRITE_WITH_IMM and a SEND from the client.
    server.post_recv(
        1,
        Sge {
            lkey: dst.lkey,
            addr: dst.addr,
            len: 0,
        },
    )?;
    server.post_recv(
        2,
        Sge {
            lkey: inbox.lkey,
            addr: inbox.addr,
            len: 4096,
        },
    )?;
    let whole = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 1 << 20,
    };
    client.post_write_with_imm(10, whole, remote.addr, remote.rkey, 0xC0FFEE)?;
    client.post_send(
        11,
        Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: 19,
        },
        None,
    )?;

    // 5. Completions: sender side in posting order, receiver side in message order.
    for _ in 0..2 {
        let c = client.wait_send_cq(t)?.ok_or("no send completion")?;
        println!(
            "client: wr_id {} {:?} {:?} {} bytes",
            c.wr_id, c.opcode, c.status, c.byte_len
        );
    }
    for _ in 0..2 {
        let c = server.wait_recv_cq(t)?.ok_or("no receive completion")?;
        println!(
            "server: wr_id {} {:?} {:?} imm {:?} {} bytes",
            c.wr_id, c.opcode, c.status, c.imm, c.byte_len
        );
    }

    // 6. The bytes arrived where they were meant to.
    assert_eq!(server.read_mr(dst.lkey, 0, 19)?, b"hello over 16 paths");
    assert_eq!(server.read_mr(dst.lkey, (1 << 20) - 4, 4)?, [0xAB; 4]);
    assert_eq!(server.read_mr(inbox.lkey, 0, 19)?, b"hello over 16 paths");
    let (stats, _) = client.stats()?;
    println!(
        "client sent {} packets on {} EVs, {} retransmitted",
        stats.conn.sent,
        stats.evs.len(),
        stats.conn.retransmitted
    );
    Ok(())
}
