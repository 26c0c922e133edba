//! The allocation guard, installed as this test binary's allocator: it refuses what is
//! over its limits and serves the rest.

use towerrec_fuzz::{AllocGuard, MAX_ALLOCATION, MAX_LIVE};

#[global_allocator]
static ALLOC: AllocGuard = AllocGuard;

#[test]
fn allocations_over_the_limits_are_refused_and_others_served() {
    let mut v: Vec<u8> = Vec::new();
    assert!(v.try_reserve_exact(MAX_ALLOCATION + 1).is_err());
    v.try_reserve_exact(1 << 20).unwrap();
    // Growing past the limit by reallocation is refused too, keeping what was there.
    v.extend_from_slice(&[7; 100]);
    assert!(v.try_reserve_exact(MAX_ALLOCATION).is_err());
    assert_eq!(v.len(), 100);
    // Many allocations under the single limit still count towards the live limit.
    let mut held = Vec::new();
    let mut refused = false;
    for _ in 0..=MAX_LIVE / MAX_ALLOCATION {
        let mut block: Vec<u8> = Vec::new();
        if block.try_reserve_exact(MAX_ALLOCATION).is_err() {
            refused = true;
            break;
        }
        held.push(block);
    }
    assert!(refused);
    drop(held);
    // Freed memory is served again.
    let mut block: Vec<u8> = Vec::new();
    block.try_reserve_exact(MAX_ALLOCATION).unwrap();
}
