//! uSID container acceptance tests (issue 2, RFC 9800 NEXT-C-SID with 16-bit uSIDs).

use std::net::Ipv6Addr;

use mrc_fabric::srv6::{LocatorBlock, UsidContainer, UsidError};

fn addr(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

#[test]
fn block_fc00_0_32_with_usids_1_2_3_shifts_to_exhaustion() {
    let block = LocatorBlock::new(addr("fc00:0::"), 32).unwrap();
    let c0 = UsidContainer::build(block, &[0x0001, 0x0002, 0x0003]).unwrap();
    assert_eq!(c0.address(), addr("fc00:0:1:2:3::"));
    assert_eq!(c0.active_usid(), Some(0x0001));
    assert!(!c0.is_exhausted());
    assert!(!c0.is_last());
    assert_eq!(c0.usids().collect::<Vec<_>>(), vec![1, 2, 3]);

    let c1 = c0.shift().unwrap();
    assert_eq!(c1.address(), addr("fc00:0:2:3::"));
    assert_eq!(c1.active_usid(), Some(0x0002));
    assert!(!c1.is_last());

    let c2 = c1.shift().unwrap();
    assert_eq!(c2.address(), addr("fc00:0:3::"));
    assert_eq!(c2.active_usid(), Some(0x0003));
    assert!(c2.is_last());
    assert!(!c2.is_exhausted());

    let c3 = c2.shift().unwrap();
    assert_eq!(c3.address(), addr("fc00::"));
    assert_eq!(c3.active_usid(), None);
    assert!(c3.is_exhausted());
    assert!(!c3.is_last());
    assert_eq!(c3.shift(), Err(UsidError::Exhausted));
    assert_eq!(c3.block(), block);
}

#[test]
fn block_48_holds_five_usids_and_keeps_the_block_on_shift() {
    let block = LocatorBlock::new(addr("2001:db8:aa::"), 48).unwrap();
    assert_eq!(block.capacity(), 5);
    let c = UsidContainer::build(block, &[0xe001, 0xe002, 0xe003, 0xe004, 0xe005]).unwrap();
    assert_eq!(c.address(), addr("2001:db8:aa:e001:e002:e003:e004:e005"));
    assert!(!c.is_last());
    let c = c.shift().unwrap();
    assert_eq!(c.address(), addr("2001:db8:aa:e002:e003:e004:e005:0"));
    assert_eq!(c.active_usid(), Some(0xe002));
    assert_eq!(
        UsidContainer::build(block, &[1, 2, 3, 4, 5, 6]),
        Err(UsidError::TooMany {
            count: 6,
            capacity: 5
        })
    );
}

#[test]
fn block_32_holds_six_usids() {
    let block = LocatorBlock::new(addr("fc00:0::"), 32).unwrap();
    assert_eq!(block.capacity(), 6);
    let c = UsidContainer::build(block, &[1, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(c.address(), addr("fc00:0:1:2:3:4:5:6"));
    assert_eq!(c.usids().count(), 6);
    assert_eq!(
        UsidContainer::build(block, &[1, 2, 3, 4, 5, 6, 7]),
        Err(UsidError::TooMany {
            count: 7,
            capacity: 6
        })
    );
}

#[test]
fn build_errors_are_typed() {
    assert_eq!(
        LocatorBlock::new(addr("fc00::"), 40),
        Err(UsidError::BlockLength { len_bits: 40 })
    );
    assert_eq!(
        LocatorBlock::new(addr("fc00:0:1::"), 32),
        Err(UsidError::BlockHostBits { len_bits: 32 })
    );
    let block = LocatorBlock::new(addr("fc00::"), 32).unwrap();
    assert_eq!(UsidContainer::build(block, &[]), Err(UsidError::Empty));
    assert_eq!(
        UsidContainer::build(block, &[7, 0, 9]),
        Err(UsidError::ZeroUsid { index: 1 })
    );
    assert_eq!(
        UsidContainer::from_address(addr("fc00::"), 64),
        Err(UsidError::BlockLength { len_bits: 64 })
    );
}

#[test]
fn received_address_read_as_container() {
    let c = UsidContainer::from_address(addr("fc00:0:100:200::"), 32).unwrap();
    assert_eq!(c.active_usid(), Some(0x0100));
    assert_eq!(c.usids().collect::<Vec<_>>(), vec![0x0100, 0x0200]);
}
