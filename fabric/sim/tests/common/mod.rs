//! Shared setup of the simulator tests.
#![allow(dead_code)]

use mrc_fabric_sim::{LinkSpec, QueueConfig, SimConfig, Simulator, SpineLeafSpec, Topology};

/// 16 hosts, 4 leaves, 4 spines, 100 Gb/s, 500 ns links.
pub fn spec16() -> SpineLeafSpec {
    SpineLeafSpec {
        hosts: 16,
        leaves: 4,
        spines: 4,
        hosts_per_leaf: 4,
        uplinks_per_leaf: 4,
        host_link: LinkSpec::gbps(100, 500),
        fabric_link: LinkSpec::gbps(100, 500),
    }
}

pub fn sim16(cfg: SimConfig) -> Simulator {
    Simulator::new(Topology::spine_leaf(&spec16()).unwrap(), cfg).unwrap()
}

pub fn cfg(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        queue: QueueConfig::default(),
        ..SimConfig::default()
    }
}

/// [`cfg`] with trimming above 8,000 queued bytes: behind two 4 KB frames a third is
/// trimmed.
pub fn trimming_cfg(seed: u64) -> SimConfig {
    SimConfig {
        queue: QueueConfig {
            trim_threshold_bytes: Some(8_000),
            ..QueueConfig::default()
        },
        ..cfg(seed)
    }
}

/// An mrc RDMA_WRITE_ONLY datagram carrying `payload` with PSN `psn` for QPN 0x77 (no
/// endpoint in the simulator tests has it, so hosts capture the frames).
pub fn write_datagram_of(psn: u32, payload: &[u8]) -> Vec<u8> {
    use mrc_transport::wire::{
        Body, BthFlags, BthRepr, BthSpare, DataRepr, MrcethRepr, MsgethRepr, Opcode, PacketRepr,
        RethRepr,
    };
    let len = payload.len() as u32;
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RdmaWriteOnly,
            pkey: 0xFFFF,
            dest_qpn: 0x77,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 3,
            msn: 1,
            send_ts_ns: 0,
            generation: 1,
            reserved: 0,
        },
        body: Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len: len,
                offset: 0,
            },
            reth: Some(RethRepr {
                virtual_addr: 0x1_0000,
                rkey: 0x1234,
                dma_len: len,
            }),
            imm: None,
            payload,
        }),
    };
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    buf
}

/// `(PSN, trimmed, data payload bytes)` of every mrc data frame host `h` captured, in
/// arrival order.
pub fn captured_data(sim: &Simulator, h: u32) -> Vec<(u32, bool, usize)> {
    use mrc_frame::packet::EthernetFrameRepr;
    use mrc_transport::wire::{Body, PacketRepr};
    sim.host(h)
        .unwrap()
        .captured
        .iter()
        .map(|(_, f)| {
            let (_, dgram) = EthernetFrameRepr::parse(f).unwrap();
            let p = PacketRepr::parse(dgram).unwrap();
            let Body::Data(d) = p.body else {
                panic!("not data")
            };
            (p.bth.psn, p.bth.flags.trimmed, d.payload.len())
        })
        .collect()
}
