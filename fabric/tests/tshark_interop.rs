//! Interop proof (issue 2 item 5): frames we build (Ethernet / IPv6 / SRH / UDP / mrc packets
//! from `mrc_transport::wire`, whose base header is the RoCEv2 BTH)
//! are written as a pcap and decoded by tshark, which must read back exactly what we wrote.
//!
//! tshark is required: `.ci/run` installs it. Without it this test fails (never skips).

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use mrc_fabric::packet::{EthernetFrameRepr, Ipv6UdpRepr};
use mrc_fabric::pcap::EthernetPcapWriter;
use mrc_fabric::srv6::{SrhContext, SrhRepr};
use mrc_transport::wire::{
    Body, BthFlags, BthRepr, BthSpare, CnpRepr, DataRepr, MrcethRepr, MsgethRepr, NackReason,
    NackRepr, Opcode, PacketRepr, PortStatusRepr, RethRepr, SackRepr,
};
use pnet_packet::ip::IpNextHeaderProtocols;

/// Our UDP port in these captures (not 4791, where tshark decodes RoCEv2 by default).
const MRC_PORT: u16 = 4792;
/// The decode-as name the installed tshark (Wireshark 4.0) accepts for RoCEv2 BTH on
/// another UDP port; `rroce` is not a registered name there.
const ROCE_DECODE_AS: &str = "infiniband";

fn addr(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// A directory of its own under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("mrc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run tshark with `args`, failing the test with an install hint when it is missing.
fn tshark(args: &[&str]) -> std::process::Output {
    match Command::new("tshark").args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "tshark not found: install tshark: apt-get install tshark, or run .ci/run \
             (this interop test needs it and never skips)"
        ),
        Err(e) => panic!("running tshark failed: {e}"),
    }
}

/// Decode `pcap` with `-T fields` for `fields`, one Vec of field strings per frame.
fn decode(pcap: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let decode_as = format!("udp.port=={MRC_PORT},{ROCE_DECODE_AS}");
    let mut args = vec![
        "-r",
        pcap.to_str().unwrap(),
        "-o",
        "udp.check_checksum:TRUE",
        "-d",
        &decode_as,
        "-T",
        "fields",
        "-E",
        "separator=;",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ];
    for f in fields {
        args.push("-e");
        args.push(f);
    }
    let out = tshark(&args);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("tshark output is UTF-8")
        .lines()
        .map(|l| l.split(';').map(str::to_owned).collect())
        .collect()
}

struct Case {
    frame: EthernetFrameRepr,
    payload: Vec<u8>,
    /// Context the SRH is emitted in (Local, or Received for the reduced SRH).
    ctx: SrhContext,
}

fn frame(packet: Ipv6UdpRepr) -> EthernetFrameRepr {
    EthernetFrameRepr {
        dst_mac: [0x02, 0, 0, 0, 0, 0x02],
        src_mac: [0x02, 0, 0, 0, 0, 0x01],
        packet,
    }
}

/// The mrc packet kinds the interop frames carry, all emitted by `mrc_transport::wire`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// RDMA_WRITE_ONLY data packet with 8 payload bytes.
    WriteOnly,
    /// SEND_ONLY data packet with 8 payload bytes.
    SendOnly,
    /// SACK.
    Sack,
    /// NACK with reason TRIMMED.
    NackTrimmed,
    /// CNP.
    Cnp,
    /// Port Status Update: planes 0 and 2 of 4 up, sequence 9.
    PortStatus,
    /// Its acknowledgement.
    PortStatusAck,
}

const DATA: [u8; 8] = [0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7];

/// An mrc datagram (the UDP payload) of `kind` for destination QPN `dest_qpn` and `psn`.
fn mrc_payload(kind: Kind, dest_qpn: u32, psn: u32) -> Vec<u8> {
    let (opcode, body) = match kind {
        Kind::WriteOnly => (
            Opcode::RdmaWriteOnly,
            Body::Data(DataRepr {
                msgeth: MsgethRepr {
                    message_len: 8,
                    offset: 0,
                },
                reth: Some(RethRepr {
                    virtual_addr: 0x7f00_0000_1000,
                    rkey: 0x1234,
                    dma_len: 8,
                }),
                imm: None,
                payload: &DATA,
            }),
        ),
        Kind::SendOnly => (
            Opcode::SendOnly,
            Body::Data(DataRepr {
                msgeth: MsgethRepr {
                    message_len: 8,
                    offset: 0,
                },
                reth: None,
                imm: None,
                payload: &DATA,
            }),
        ),
        Kind::Sack => (
            Opcode::Sack,
            Body::Sack(SackRepr {
                cumulative_psn: psn,
                bitmap_base_psn: psn,
                bitmap: 0b1011,
                echo_ev: 3,
                echo_ts_ns: 1000,
                ecn_ce_count: 1,
                credit: 0,
            }),
        ),
        Kind::NackTrimmed => (
            Opcode::Nack,
            Body::Nack(NackRepr {
                psn,
                reason: NackReason::Trimmed,
                reserved: 0,
                echo_ev: 9,
                echo_ts_ns: 0,
            }),
        ),
        Kind::Cnp => (
            Opcode::Cnp,
            Body::Cnp(CnpRepr {
                echo_ev: 5,
                reserved: [0; 12],
            }),
        ),
        Kind::PortStatus | Kind::PortStatusAck => (
            Opcode::PortStatus,
            Body::PortStatus(PortStatusRepr {
                psu_seq: 9,
                up_planes: 0b0101,
                planes: 4,
                ack: kind == Kind::PortStatusAck,
                other_flags: 0,
                reserved: 0,
            }),
        ),
    };
    let packet = PacketRepr {
        bth: BthRepr {
            opcode,
            pkey: BthRepr::DEFAULT_PKEY,
            dest_qpn,
            psn,
            flags: BthFlags {
                ack_req: true,
                ..BthFlags::default()
            },
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 7,
            msn: 1,
            send_ts_ns: 123,
            generation: 1,
            reserved: 0,
        },
        body,
    };
    let mut buf = vec![0u8; packet.buffer_len()];
    let len = packet.emit(&mut buf).expect("mrc packet emits");
    assert_eq!(PacketRepr::parse(&buf[..len]), Ok(packet));
    buf
}

fn cases() -> Vec<Case> {
    let src = addr("2001:db8::100");
    let mut out = Vec::new();

    // 1. One segment.
    let p = Ipv6UdpRepr::with_segment_path(src, &[addr("2001:db8::200")], 49152, MRC_PORT).unwrap();
    out.push(Case {
        frame: frame(p),
        payload: mrc_payload(Kind::SendOnly, 0x00_0011, 0),
        ctx: SrhContext::Local,
    });

    // 2. Three segments: the builder case cross-checked byte-exact in tests/srh.rs.
    let path3 = [
        addr("2001:db8:a::1"),
        addr("2001:db8:b::2"),
        addr("2001:db8:c::3"),
    ];
    let p = Ipv6UdpRepr::with_segment_path(src, &path3, 49153, MRC_PORT).unwrap();
    out.push(Case {
        frame: frame(p),
        payload: mrc_payload(Kind::WriteOnly, 0x12_3456, 0xab_cdef),
        ctx: SrhContext::Local,
    });

    // 3. Six segments, segments_left 2: active segment (DA) = Segment List[2] = fc00:0:4::.
    let path6 = [
        addr("fc00:0:1::"),
        addr("fc00:0:2::"),
        addr("fc00:0:3::"),
        addr("fc00:0:4::"),
        addr("fc00:0:5::"),
        addr("2001:db8::200"),
    ];
    let mut p = Ipv6UdpRepr::with_segment_path(src, &path6, 49154, MRC_PORT).unwrap();
    let srh = p.srh.as_mut().unwrap();
    srh.segments_left = 2;
    p.dst_addr = srh.active_segment().unwrap();
    out.push(Case {
        frame: frame(p),
        payload: mrc_payload(Kind::Sack, 0xff_fffe, 0xff_ffff),
        ctx: SrhContext::Local,
    });

    // 4. Reduced SRH (RFC 8754 section 4.1.1): policy [fc00:0:1::, 2001:db8::200], the first
    // segment only in the DA, segments_left 1 = last_entry + 1.
    let mut p = Ipv6UdpRepr::with_segment_path(
        src,
        &[addr("fc00:0:1::"), addr("2001:db8::200")],
        49156,
        MRC_PORT,
    )
    .unwrap();
    let srh = p.srh.as_mut().unwrap();
    srh.segments.truncate(1);
    srh.segments_left = 1;
    out.push(Case {
        frame: frame(p),
        payload: mrc_payload(Kind::NackTrimmed, 0x00_0100, 0x00_1000),
        ctx: SrhContext::Received,
    });

    // 5. No SRH.
    let p = Ipv6UdpRepr {
        src_addr: src,
        dst_addr: addr("2001:db8::200"),
        traffic_class: 0,
        flow_label: 7,
        hop_limit: 64,
        srh: None,
        src_port: 49155,
        dst_port: MRC_PORT,
    };
    out.push(Case {
        frame: frame(p),
        payload: mrc_payload(Kind::Cnp, 0x00_0001, 1),
        ctx: SrhContext::Local,
    });
    out
}

fn write_pcap(dir: &Path, cases: &[Case]) -> PathBuf {
    let path = dir.join("srh.pcap");
    let file = std::fs::File::create(&path).expect("create pcap");
    let mut writer = EthernetPcapWriter::new(std::io::BufWriter::new(file)).unwrap();
    for (i, case) in cases.iter().enumerate() {
        let mut buf = [0u8; 1024];
        let len = case
            .frame
            .emit_in(&mut buf, &case.payload, case.ctx)
            .unwrap();
        assert_eq!(len, case.frame.buffer_len(case.payload.len()));
        // Parsing our own frame gives back what we built.
        let (parsed, payload) = EthernetFrameRepr::parse(&buf[..len]).unwrap();
        assert_eq!(parsed, case.frame);
        assert_eq!(payload, &case.payload[..]);
        writer
            .write_frame(1_000_000 * (i as u64 + 1) + 5, &buf[..len])
            .unwrap();
    }
    assert_eq!(writer.frames_written(), cases.len() as u64);
    use std::io::Write;
    writer.into_inner().flush().unwrap();
    path
}

#[test]
fn tshark_decodes_srh_udp_and_bth_exactly() {
    let dir = TempDir::new("srh-interop");
    let cases = cases();
    let pcap = write_pcap(&dir.0, &cases);
    let rows = decode(
        &pcap,
        &[
            "frame.time_epoch",
            "ipv6.plen",
            "ipv6.dst",
            "ipv6.routing.type",
            "ipv6.routing.segleft",
            "ipv6.routing.srh.last_entry",
            "ipv6.routing.srh.addr",
            "udp.srcport",
            "udp.dstport",
            "udp.length",
            "udp.checksum.status",
            "infiniband.bth.opcode",
            "infiniband.bth.destqp",
            "infiniband.bth.psn",
            "infiniband.bth.p_key",
        ],
    );
    // udp.checksum.status 1 = Good (tshark's PROTO_CHECKSUM_E_GOOD); destqp prints in hex.
    // UDP lengths: 8 + mrc datagram = BTH 12 + MRCETH 16 + body: SEND_ONLY MSGETH 8 + 8 data
    // (52), RDMA_WRITE_ONLY + RETH 16 (68), SACK 28 (64), NACK 16 (52), CNP 16 (52).
    // Opcodes: SEND_ONLY 4, RDMA_WRITE_ONLY 10, SACK 0xE0, NACK 0xE1, CNP 0x81.
    let expected: Vec<Vec<&str>> = vec![
        vec![
            "0.001000005",
            "76",
            "2001:db8::200",
            "4",
            "0",
            "0",
            "2001:db8::200",
            "49152",
            "4792",
            "52",
            "1",
            "4",
            "0x000011",
            "0",
            "65535",
        ],
        vec![
            "0.002000005",
            "124",
            "2001:db8:a::1",
            "4",
            "2",
            "2",
            "2001:db8:c::3,2001:db8:b::2,2001:db8:a::1",
            "49153",
            "4792",
            "68",
            "1",
            "10",
            "0x123456",
            "11259375",
            "65535",
        ],
        vec![
            "0.003000005",
            "168",
            "fc00:0:4::",
            "4",
            "2",
            "5",
            "2001:db8::200,fc00:0:5::,fc00:0:4::,fc00:0:3::,fc00:0:2::,fc00:0:1::",
            "49154",
            "4792",
            "64",
            "1",
            "224",
            "0xfffffe",
            "16777215",
            "65535",
        ],
        vec![
            "0.004000005",
            "76",
            "fc00:0:1::",
            "4",
            "1",
            "0",
            "2001:db8::200",
            "49156",
            "4792",
            "52",
            "1",
            "225",
            "0x000100",
            "4096",
            "65535",
        ],
        vec![
            "0.005000005",
            "52",
            "2001:db8::200",
            "",
            "",
            "",
            "",
            "49155",
            "4792",
            "52",
            "1",
            "129",
            "0x000001",
            "1",
            "65535",
        ],
    ];
    assert_eq!(rows, expected, "tshark decode");
}

/// Cross-check of the three-segment builder case: the SRH bytes tshark shows as the routing
/// header are exactly the bytes `SrhRepr::for_path` emits, and its decoded list is the path
/// reversed.
#[test]
fn tshark_decode_matches_builder_three_segments() {
    let dir = TempDir::new("srh-builder");
    let path3 = [
        addr("2001:db8:a::1"),
        addr("2001:db8:b::2"),
        addr("2001:db8:c::3"),
    ];
    let (srh, da) = SrhRepr::for_path(IpNextHeaderProtocols::Udp, &path3).unwrap();
    let mut srh_bytes = [0u8; 56];
    assert_eq!(srh.emit(&mut srh_bytes, SrhContext::Local), Ok(56));
    let packet =
        Ipv6UdpRepr::with_segment_path(addr("2001:db8::100"), &path3, 1, MRC_PORT).unwrap();
    assert_eq!(packet.dst_addr, da);
    let case = Case {
        frame: frame(packet),
        payload: mrc_payload(Kind::WriteOnly, 5, 6),
        ctx: SrhContext::Local,
    };
    let pcap = write_pcap(&dir.0, std::slice::from_ref(&case));
    let rows = decode(
        &pcap,
        &[
            "ipv6.dst",
            "ipv6.routing.nxt",
            "ipv6.routing.len",
            "ipv6.routing.len_oct",
            "ipv6.routing.segleft",
            "ipv6.routing.srh.last_entry",
            "ipv6.routing.srh.flags",
            "ipv6.routing.srh.tag",
            "ipv6.routing.srh.addr",
        ],
    );
    let reversed: Vec<String> = path3.iter().rev().map(|a| a.to_string()).collect();
    assert_eq!(
        rows,
        vec![vec![
            da.to_string(),
            "17".to_owned(),
            "6".to_owned(),
            "56".to_owned(),
            "2".to_owned(),
            "2".to_owned(),
            "0x00".to_owned(),
            "0000".to_owned(),
            reversed.join(","),
        ]]
    );
    // And the raw bytes tshark reads at the routing header offset are ours.
    let out = tshark(&["-r", pcap.to_str().unwrap(), "-x"]);
    let hex_dump = String::from_utf8_lossy(&out.stdout).to_string();
    let frame_bytes: Vec<u8> = hex_dump
        .lines()
        .filter_map(|l| l.get(6..53))
        .flat_map(|h| {
            h.split_whitespace()
                .filter_map(|b| u8::from_str_radix(b, 16).ok())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(&frame_bytes[14 + 40..14 + 40 + 56], &srh_bytes[..]);
}

/// The decode-as name: `infiniband` is what this tshark (4.0) accepts; `rroce` is refused.
#[test]
fn tshark_roce_decode_as_name() {
    let dir = TempDir::new("srh-decode-as");
    let pcap = write_pcap(&dir.0, &cases()[..1]);
    let name = pcap.to_str().unwrap();
    let ok = tshark(&[
        "-r",
        name,
        "-d",
        "udp.port==4792,infiniband",
        "-T",
        "fields",
        "-e",
        "infiniband.bth.opcode",
    ]);
    assert!(ok.status.success());
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "4");
    let refused = tshark(&[
        "-r",
        name,
        "-d",
        "udp.port==4792,rroce",
        "-T",
        "fields",
        "-e",
        "infiniband.bth.opcode",
    ]);
    assert!(!refused.status.success(), "rroce accepted by this tshark");
}

/// Issue 21 item 7: the Lua dissector shipped in `fabric/wireshark/mrc.lua`, loaded with
/// `tshark -X lua_script:...`, decodes every field of the five interop frames (no
/// decode-as: it registers on UDP 4792 itself), mrc's own opcodes and NACK reasons by name.
#[test]
fn the_lua_dissector_decodes_every_mrc_field() {
    let dir = TempDir::new("lua-dissector");
    let pcap = write_pcap(&dir.0, &cases());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/wireshark/mrc.lua");
    let fields = [
        "mrc.opcode",
        "mrc.dest_qpn",
        "mrc.psn",
        "mrc.ack_req",
        "mrc.ev",
        "mrc.msn",
        "mrc.send_ts",
        "mrc.generation",
        "mrc.msg_len",
        "mrc.reth.va",
        "mrc.reth.rkey",
        "mrc.reth.dma_len",
        "mrc.payload_len",
        "mrc.sack.cumulative_psn",
        "mrc.sack.bitmap",
        "mrc.echo_ev",
        "mrc.echo_ts",
        "mrc.sack.ecn_ce_count",
        "mrc.nack.reason",
        "_ws.col.Info",
    ];
    let lua = format!("lua_script:{script}");
    let mut args = vec![
        "-X",
        &lua,
        "-r",
        pcap.to_str().unwrap(),
        "-T",
        "fields",
        "-E",
        "separator=;",
    ];
    for f in &fields {
        args.push("-e");
        args.push(f);
    }
    let out = tshark(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    assert!(
        !stderr.contains("Lua"),
        "the dissector reported an error: {stderr}"
    );
    let rows: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    // one row per frame, fields in the order above (empty where a packet has no such field)
    let expected = [
        "0x04;0x000011;0;1;7;1;123;1;8;;;;8;;;;;;;SEND_ONLY QPN 0x000011 PSN 0 EV 7",
        "0x0a;0x123456;11259375;1;7;1;123;1;8;0x00007f0000001000;0x00001234;8;8;;;;;;;\
         RDMA_WRITE_ONLY QPN 0x123456 PSN 11259375 EV 7",
        "0xe0;0xfffffe;16777215;1;7;1;123;1;;;;;;16777215;0x000000000000000b;3;1000;1;;\
         SACK QPN 0xfffffe PSN 16777215 EV 7",
        "0xe1;0x000100;4096;1;7;1;123;1;;;;;;;;9;0;;1;NACK QPN 0x000100 PSN 4096 EV 7 TRIMMED",
        "0x81;0x000001;1;1;7;1;123;1;;;;;;;;5;;;;CNP QPN 0x000001 PSN 1 EV 7",
    ];
    assert_eq!(rows, expected);
}

/// The Lua dissector with its "authenticated" preference on reads an authenticated
/// datagram (`mrc_transport::auth`): clear BTH and MRCETH, the body as encrypted, the
/// trailer's packet number.
#[test]
fn the_lua_dissector_shows_the_authentication_trailer() {
    use mrc_transport::auth::{AUTH_TRAILER_BYTES, AuthKeys, Authenticator};
    let dir = TempDir::new("lua-auth");
    let mut tx = Authenticator::new(
        AuthKeys::derive(
            b"tshark interop pre-shared key 32",
            &[1; 32],
            &[2; 32],
            true,
        )
        .unwrap(),
    );
    let mut cases = cases();
    cases.truncate(2);
    for case in &mut cases {
        let n = case.payload.len();
        case.payload.resize(n + AUTH_TRAILER_BYTES, 0);
        assert_eq!(tx.seal(&mut case.payload, n), Some(n + AUTH_TRAILER_BYTES));
    }
    let pcap = write_pcap(&dir.0, &cases);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/wireshark/mrc.lua");
    let lua = format!("lua_script:{script}");
    let out = tshark(&[
        "-X",
        &lua,
        "-o",
        "mrc.authenticated:TRUE",
        "-r",
        pcap.to_str().unwrap(),
        "-T",
        "fields",
        "-E",
        "separator=;",
        "-e",
        "mrc.opcode",
        "-e",
        "mrc.ev",
        "-e",
        "mrc.auth.packet_number",
        "-e",
        "mrc.payload_len",
        "-e",
        "_ws.col.Info",
    ]);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        rows,
        [
            "0x04;7;0;;SEND_ONLY QPN 0x000011 PSN 0 EV 7 (authenticated)",
            "0x0a;7;1;;RDMA_WRITE_ONLY QPN 0x123456 PSN 11259375 EV 7 (authenticated)",
        ]
    );
}

/// The Lua dissector decodes the Port Status Update (opcode 0xE4) and its acknowledgement:
/// sequence, up-planes bitmap, plane count, the ack flag, and a summary in the Info column.
#[test]
fn the_lua_dissector_decodes_port_status_updates() {
    let dir = TempDir::new("lua-psu");
    let plain = |payload| Case {
        frame: frame(Ipv6UdpRepr {
            src_addr: addr("2001:db8::100"),
            dst_addr: addr("2001:db8::200"),
            traffic_class: 0,
            flow_label: 7,
            hop_limit: 64,
            srh: None,
            src_port: 49155,
            dst_port: MRC_PORT,
        }),
        payload,
        ctx: SrhContext::Local,
    };
    let cases = [
        plain(mrc_payload(Kind::PortStatus, 0x00_0011, 5)),
        plain(mrc_payload(Kind::PortStatusAck, 0x00_0022, 6)),
    ];
    let pcap = write_pcap(&dir.0, &cases);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/wireshark/mrc.lua");
    let lua = format!("lua_script:{script}");
    let mut args = vec![
        "-X",
        &lua,
        "-r",
        pcap.to_str().unwrap(),
        "-T",
        "fields",
        "-E",
        "separator=;",
    ];
    for f in [
        "mrc.opcode",
        "mrc.psu.seq",
        "mrc.psu.up_planes",
        "mrc.psu.planes",
        "mrc.psu.ack",
        "_ws.col.Info",
    ] {
        args.push("-e");
        args.push(f);
    }
    let out = tshark(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    assert!(
        !stderr.contains("Lua"),
        "the dissector reported an error: {stderr}"
    );
    let rows: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        rows,
        [
            "0xe4;9;0x00000005;4;0;PORT_STATUS QPN 0x000011 PSN 5 EV 7 up 0x5 of 4",
            "0xe4;9;0x00000005;4;1;PORT_STATUS QPN 0x000022 PSN 6 EV 7 ack 9",
        ]
    );
}
