//! What the fuzz target `checkpoint` (fuzz/) checks for one input; shared by the target
//! (through `#[path]`) and by `fuzz_regressions.rs`, which feeds the seeds and every kept
//! reproducer in CI. Panics on a broken property.
#![allow(dead_code)]

use vpcnet_ipam::{Checkpoint, Pool, WarmConfig};

/// The checkpoint file's text: `Checkpoint::from_json`; a valid checkpoint re-reads from its
/// own JSON, restores into a pool whose checkpoint lists the same assignments, and the pool's
/// decisions on it never panic, whatever timestamps the file holds.
pub fn checkpoint(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cp) = Checkpoint::from_json(text) else {
        return;
    };
    let again = Checkpoint::from_json(&cp.to_json()).expect("a valid checkpoint re-reads");
    assert_eq!(again, cp);
    let limits = vpcnet_limits::lookup("m5.large").expect("m5.large is in the table");
    let mut pool = Pool::new(WarmConfig::for_limits(limits));
    pool.restore(&cp).expect("a checked checkpoint restores");
    let back = pool.checkpoint();
    let mut want: Vec<_> = cp
        .assignments
        .iter()
        .map(|a| (a.ip, &a.container_id))
        .collect();
    let mut got: Vec<_> = back
        .assignments
        .iter()
        .map(|a| (a.ip, &a.container_id))
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    Checkpoint::from_json(&back.to_json()).expect("the pool writes a valid checkpoint");
    // The clock (ms since the epoch) is ours; the file's timestamps are anything.
    for now in [1_700_000_000_000, 4_000_000_000_000] {
        let _ = pool.summary(now);
        let _ = pool.plan(now);
    }
    // Restored assignments age like live ones: with no pod left on the node, two reclaim
    // passes after the grace release every one of them.
    let now = 4_000_000_000_000;
    let none = std::collections::BTreeSet::new();
    let _ = pool.reclaim_unrouted(&none, 60_000, 2, now);
    let _ = pool.reclaim_unrouted(&none, 60_000, 2, now);
    let young = cp
        .assignments
        .iter()
        .filter(|a| a.assigned_at_ms.saturating_add(60_000) > now)
        .count();
    assert_eq!(pool.assignments().count(), young);
}
