//! Tiny hand-computed cache-regime traces for every policy and both semantics. Units are
//! named A=0, B=1, C=2, D=3; the expected page-ins and victims are worked out in comments.

use policies::retention::{self, PolicyKind, PolicySetup};
use policies::{UnitInfo, UnitMap};
use sim::cache::{AccessStream, CacheReport, CacheSim, ProfileStats, Semantics};

const A: u32 = 0;
const B: u32 = 1;
const C: u32 = 2;
const D: u32 = 3;
const MIB: u64 = 1 << 20;

/// One unit per key, `n` keys in one MoE layer, 1 MiB each.
fn unit_map(n: usize) -> UnitMap {
    UnitMap {
        spec: "e1".into(),
        paging: policies::Paging::Vmm,
        expert_bytes: MIB,
        granule_bytes: MIB,
        key_first: (0..n as u32).collect(),
        key_count: vec![1; n],
        units: vec![
            UnitInfo {
                useful_bytes: MIB,
                committed_bytes: MIB,
                experts: 1,
                first_moe_layer: 0,
                last_moe_layer: 0,
            };
            n
        ],
    }
}

/// A stream with one token per group.
fn stream(groups: &[&[u32]]) -> AccessStream {
    let mut s = AccessStream::new(4);
    for g in groups {
        s.push_group(0, g);
        s.end_batch(1);
    }
    s
}

struct Run {
    page_ins: Vec<u32>,
    evicted: Vec<u32>,
    report: CacheReport,
}

fn run(kind: PolicyKind, cap: usize, sem: Semantics, groups: &[&[u32]]) -> Run {
    let s = stream(groups);
    let next = s.next_use();
    let profile = ProfileStats::from_stream(&s);
    let setup = PolicySetup {
        units: 4,
        capacity: cap,
        seed: 7,
        pool: 0,
        profile_counts: Some(profile.counts.clone()),
        profile_always_on: Some(profile.always_on.clone()),
    };
    let policy = retention::build(kind, &setup).unwrap();
    let map = unit_map(4);
    let mut sim = CacheSim::new(&map, &[0; 4], vec![policy], &[cap], sem, Some(&next), None);
    let (mut page_ins, mut evicted) = (Vec::new(), Vec::new());
    for g in 0..s.num_groups() {
        let out = sim.group(s.group(g));
        page_ins.extend(&out.page_ins);
        evicted.extend(&out.evicted);
        // The budget holds after every group, under both semantics.
        assert!(
            sim.pool_len(0) <= cap,
            "{kind}: over budget after group {g}"
        );
    }
    sim.add_tokens(s.tokens);
    Run {
        page_ins,
        evicted,
        report: sim.report(),
    }
}

// Access semantics, budget 2, stream A B C A B D A (one access per group).
const SEQ: &[&[u32]] = &[&[A], &[B], &[C], &[A], &[B], &[D], &[A]];

#[test]
fn lru_access() {
    // [A] [B A] C: evict A [C B]; A: evict B [A C]; B: evict C [B A]; D: evict A [D B];
    // A: evict B [A D]. Every access misses.
    let r = run(PolicyKind::Lru, 2, Semantics::Access, SEQ);
    assert_eq!(r.page_ins, vec![A, B, C, A, B, D, A]);
    assert_eq!(r.evicted, vec![A, B, C, A, B]);
    assert_eq!(r.report.page_ins, 7);
    assert_eq!(r.report.accesses, 7);
    assert_eq!(r.report.miss_rate, 1.0);
    assert_eq!(r.report.bytes_per_token, MIB as f64);
    assert_eq!(r.report.peak_resident_mib, 2.0);
}

#[test]
fn fifo_access() {
    // Same as LRU here (no hit ever reorders): A B | C evicts A | A evicts B | B evicts C |
    // D evicts A | A evicts B.
    let r = run(PolicyKind::Fifo, 2, Semantics::Access, SEQ);
    assert_eq!(r.page_ins, vec![A, B, C, A, B, D, A]);
    assert_eq!(r.evicted, vec![A, B, C, A, B]);
}

#[test]
fn belady_access() {
    // Positions 0..6. C (pos 2) joins A (next 3) and B (next 4); C is never used again, so
    // MIN drops C itself. A, B hit. D (pos 5) joins A (next 6) and B (never): B and D are
    // both never used again; the higher unit id (D) goes. A hits. 4 page-ins.
    let r = run(PolicyKind::Belady, 2, Semantics::Access, SEQ);
    assert_eq!(r.page_ins, vec![A, B, C, D]);
    assert_eq!(r.evicted, vec![C, D]);
    assert_eq!(r.report.evictions, 2);
}

#[test]
fn lfu_access() {
    // Counts survive eviction; ties by least recent use.
    // A1 B1 | C1 joins: all count 1, A least recent -> evict A | A2 joins: B1 C1 A2 -> evict B
    // | B2 joins: C1 A2 B2 -> evict C | D1 joins: A2 B2 D1 -> evict D (fewest accesses, even
    // though newest) | A hits (A3). 6 page-ins.
    let r = run(PolicyKind::Lfu, 2, Semantics::Access, SEQ);
    assert_eq!(r.page_ins, vec![A, B, C, A, B, D]);
    assert_eq!(r.evicted, vec![A, B, C, D]);
}

#[test]
fn arc_access() {
    // A A B C A B, c = 2, p = 0. A: T1=[A]. A hit: T2=[A]. B: T1=[B]. C: T1=[C,B]; over
    // budget, |T1|=2 > p=0 -> evict T1's LRU B into B1. A hits in T2. B: ghost hit in B1 ->
    // p = 1, B enters T2=[B,A]; over budget, |T1|=1 is not > p=1 -> evict T2's LRU A into B2.
    let r = run(
        PolicyKind::Arc,
        2,
        Semantics::Access,
        &[&[A], &[A], &[B], &[C], &[A], &[B]],
    );
    assert_eq!(r.page_ins, vec![A, B, C, B]);
    assert_eq!(r.evicted, vec![B, A]);
    // LRU on the same stream misses 5 times (A, B, C evicts A, A evicts B, B evicts C).
    let l = run(
        PolicyKind::Lru,
        2,
        Semantics::Access,
        &[&[A], &[A], &[B], &[C], &[A], &[B]],
    );
    assert_eq!(l.report.page_ins, 5);
}

#[test]
fn s3fifo_access() {
    // A A B C A B, budget 2: small queue target max(1, 10% of 2) = 1, ghost of 2 ids.
    // A -> S=[A], A hit (freq 1), B -> S=[B,A], C -> S=[C,B,A]: over budget; |S|=3 >= 1:
    // S's tail A has freq 1 -> moves to M; then S's tail B has freq 0 -> evicted into the
    // ghost. A hit (freq 1). B: ghost hit -> M=[B,A]; over budget: |S|=1 >= 1, S's tail C
    // (freq 0) is evicted.
    let r = run(
        PolicyKind::S3Fifo,
        2,
        Semantics::Access,
        &[&[A], &[A], &[B], &[C], &[A], &[B]],
    );
    assert_eq!(r.page_ins, vec![A, B, C, B]);
    assert_eq!(r.evicted, vec![B, C]);
}

#[test]
fn random_access_and_group_protection() {
    // A B C with budget 2: one eviction, and the victim is one of the three.
    let r = run(
        PolicyKind::Random,
        2,
        Semantics::Access,
        &[&[A], &[B], &[C]],
    );
    assert_eq!(r.page_ins, vec![A, B, C]);
    assert_eq!(r.evicted.len(), 1);
    // Group semantics: {A,B} then {C}: C is protected, so the victim is A or B.
    let r = run(PolicyKind::Random, 2, Semantics::Group, &[&[A, B], &[C]]);
    assert_eq!(r.evicted.len(), 1);
    assert!(r.evicted[0] == A || r.evicted[0] == B);
    // Same seed, same victims.
    let again = run(PolicyKind::Random, 2, Semantics::Group, &[&[A, B], &[C]]);
    assert_eq!(r.evicted, again.evicted);
}

// Group semantics, budget 2: {A,B} {C,A} {B,D} {A,C}; positions A0 B1 | C2 A3 | B4 D5 | A6 C7.
const GROUPS: &[&[u32]] = &[&[A, B], &[C, A], &[B, D], &[A, C]];

#[test]
fn lru_group() {
    // G2: C misses, A hits; C and A are protected -> evict B. G3: B, D miss; protected B, D;
    // LRU among C (pos 2) and A (pos 3) -> evict C then A. G4: A, C miss; evict B (pos 4)
    // then D (pos 5).
    let r = run(PolicyKind::Lru, 2, Semantics::Group, GROUPS);
    assert_eq!(r.page_ins, vec![A, B, C, B, D, A, C]);
    assert_eq!(r.evicted, vec![B, C, A, B, D]);
}

#[test]
fn fifo_group() {
    // Queue by admission: A B. G2: C admitted (A B C); A protected (a hit), so the oldest
    // unprotected is B. G3: B, D admitted (A C B D); evict A then C. G4: evict B then D.
    let r = run(PolicyKind::Fifo, 2, Semantics::Group, GROUPS);
    assert_eq!(r.page_ins, vec![A, B, C, B, D, A, C]);
    assert_eq!(r.evicted, vec![B, A, C, B, D]);
}

#[test]
fn belady_group() {
    // G2: only B is unprotected -> evict B. G3: unprotected C (next 7) and A (next 6):
    // evict C, then A. G4: unprotected B and D, both never used again: higher id D first.
    let r = run(PolicyKind::Belady, 2, Semantics::Group, GROUPS);
    assert_eq!(r.page_ins, vec![A, B, C, B, D, A, C]);
    assert_eq!(r.evicted, vec![B, C, A, D, B]);
}

#[test]
fn lfu_group() {
    // G2: C1 admitted, A2 hit; B1 is the only unprotected -> evict B. G3: B2 (count 2 now)
    // and D1 admitted; unprotected C1 (last 2), A2 (last 3): evict C (fewer), then A.
    // G4: A3, C2 admitted; unprotected B2 (last 4), D1: evict D (fewer) then B.
    let r = run(PolicyKind::Lfu, 2, Semantics::Group, GROUPS);
    assert_eq!(r.page_ins, vec![A, B, C, B, D, A, C]);
    assert_eq!(r.evicted, vec![B, C, A, D, B]);
}

#[test]
fn group_larger_than_budget_evicts_within_the_group() {
    // Budget 1, {A,B} then {B}: both of G1 are protected, so the victim is chosen among them
    // by the policy's own rule. LRU: A (accessed first). MIN: A (never used again) and B
    // hits in G2.
    let r = run(PolicyKind::Lru, 1, Semantics::Group, &[&[A, B], &[B]]);
    assert_eq!(r.evicted, vec![A]);
    assert_eq!(r.report.page_ins, 2);
    let r = run(PolicyKind::Belady, 1, Semantics::Group, &[&[A, B], &[B]]);
    assert_eq!(r.evicted, vec![A]);
    assert_eq!(r.report.page_ins, 2);
    // FIFO, {B,A} then {B}: B was admitted first and goes; in G2 B is paged in again and the
    // unprotected A goes.
    let r = run(PolicyKind::Fifo, 1, Semantics::Group, &[&[B, A], &[B]]);
    assert_eq!(r.evicted, vec![B, A]);
    assert_eq!(r.page_ins, vec![B, A, B]);
}

#[test]
fn static_pin_streams_everything_else() {
    // Profile = the trace: counts over groups {A} {B} {A} {C} {A} {B}: A3 B2 C1 D0.
    let g: &[&[u32]] = &[&[A], &[B], &[A], &[C], &[A], &[B]];
    // Budget 1 pins A: B, C, B are page-ins each time, nothing is evicted.
    let r = run(PolicyKind::StaticPin, 1, Semantics::Group, g);
    assert_eq!(r.page_ins, vec![B, C, B]);
    assert!(r.evicted.is_empty());
    assert_eq!(r.report.peak_resident_mib, 1.0);
    // Budget 2 pins A and B: only C.
    let r = run(PolicyKind::StaticPin, 2, Semantics::Access, g);
    assert_eq!(r.page_ins, vec![C]);
    // The whole bank: nothing.
    let r = run(PolicyKind::StaticPin, 4, Semantics::Group, g);
    assert!(r.page_ins.is_empty());
}

#[test]
fn pin_lru_pins_always_on_units() {
    // Tokens {A,B} {A,C} {A,D}: A is always on. Budget 2: A pinned, LRU over one slot:
    // B, C (evicts B), D (evicts C). Plain LRU also pays for A: A, B, C, D.
    let g: &[&[u32]] = &[&[A, B], &[A, C], &[A, D]];
    let r = run(PolicyKind::PinLru, 2, Semantics::Group, g);
    assert_eq!(r.page_ins, vec![B, C, D]);
    assert_eq!(r.evicted, vec![B, C]);
    let l = run(PolicyKind::Lru, 2, Semantics::Group, g);
    assert_eq!(l.page_ins, vec![A, B, C, D]);
}
