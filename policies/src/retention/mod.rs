//! Retention (eviction) policies: which units stay resident across tokens under a budget.
//!
//! Every policy is one type implementing [`EvictionPolicy`], in its own file, with its
//! [`PolicyEntry`] (name, aliases, summary, what it needs, constructor) next to it; the
//! registry [`POLICIES`] lists the entries, and [`PolicyKind`] is a handle on one. Adding a
//! policy means adding its file (and its `mod` line) and one line in the registry. Policies see
//! dense unit ids `0..units` of one pool (the whole bank for the global split, one layer's units
//! for the per-layer split) and keep their own bookkeeping in arrays indexed by id; the caller
//! (the cache-regime driver in the `sim` crate, or the discrete-event engine) owns residency,
//! the budget check and the counting of page-ins, and drives a policy step by step:
//!
//! 1. for every access: [`EvictionPolicy::on_hit`] if the unit is resident, else
//!    [`EvictionPolicy::on_miss`] (a page-in), which answers whether the unit is retained
//!    ([`Admission::Retain`]) or streamed through without being kept ([`Admission::Bypass`]);
//! 2. while more units are resident than the budget allows: [`EvictionPolicy::evict`], which
//!    picks and forgets a victim among the resident units that are not protected.
//!
//! Units listed by [`EvictionPolicy::preloaded`] are resident before the first access and are
//! never page-ins (static pins).

mod arc;
mod belady;
mod fifo;
mod lfu;
pub mod list;
mod lru;
mod pin_lru;
mod random;
mod registry;
mod s3fifo;
mod sieve;
mod static_pin;
mod timeline;

pub use arc::Arc;
pub use belady::Belady;
pub use fifo::Fifo;
pub use lfu::Lfu;
pub use lru::Lru;
pub use pin_lru::PinLru;
pub use random::Random;
pub use registry::{PolicyEntry, POLICIES};
pub use s3fifo::S3Fifo;
pub use static_pin::StaticPin;

/// "Never used again": the next-use position of a unit with no later access.
pub const NEVER: u64 = u64::MAX;

/// Where an access sits in the access stream, for policies that look at time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// Position of this access in the whole access stream (0-based, counted in accesses;
    /// 64 bits: a stream may pass 2^32 accesses, e.g. 4.64 G for 10 M DeepSeek-V3 tokens).
    pub pos: u64,
    /// Position of the next access to the same unit, or [`NEVER`]. Only the offline policy
    /// (Belady) reads it; the driver passes [`NEVER`] when it did not precompute next uses.
    pub next_use: u64,
}

/// Which resident units may not be chosen as victims: those stamped with the current group.
/// Under group semantics the units of the current group are protected; under access
/// semantics nothing is ([`Protect::none`]).
#[derive(Clone, Copy, Debug)]
pub struct Protect<'a> {
    stamp: &'a [u32],
    current: u32,
}

impl<'a> Protect<'a> {
    /// Units `u` with `stamp[u] == current` are protected. `current` must not be 0
    /// (0 marks "never stamped").
    pub fn new(stamp: &'a [u32], current: u32) -> Self {
        debug_assert!(current != 0);
        Protect { stamp, current }
    }

    /// Nothing is protected.
    pub fn none() -> Protect<'static> {
        Protect {
            stamp: &[],
            current: 0,
        }
    }

    /// True when unit `u` may not be evicted now.
    #[inline]
    pub fn is(&self, u: u32) -> bool {
        self.current != 0 && self.stamp[u as usize] == self.current
    }

    /// The group whose units are protected (0 when nothing is). Within one group the
    /// protected set only grows.
    #[inline]
    pub fn group(&self) -> u32 {
        self.current
    }

    /// True when nothing is protected.
    #[inline]
    pub fn is_none(&self) -> bool {
        self.current == 0
    }
}

/// What happens to a unit after its page-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The unit becomes resident and counts against the budget.
    Retain,
    /// The unit is used for this access only and not kept (streamed; static pin).
    Bypass,
}

/// A retention policy driven one access at a time. See the module documentation for the
/// calling protocol. Implementations must be deterministic given their construction inputs.
pub trait EvictionPolicy: Send {
    /// Units resident before the first access; never counted as page-ins.
    fn preloaded(&self) -> Vec<u32> {
        Vec::new()
    }

    /// The resident unit `u` was accessed.
    fn on_hit(&mut self, u: u32, at: At);

    /// The non-resident unit `u` was accessed (a page-in). Returns whether it is retained.
    fn on_miss(&mut self, u: u32, at: At) -> Admission;

    /// Choose a victim among the resident (retained, not preloaded-pinned) units that
    /// `protect` allows, forget it and return it; `None` when there is no such unit.
    fn evict(&mut self, protect: Protect<'_>) -> Option<u32>;

    /// Elementary steps taken so far by the victim searches: list entries walked, heap
    /// entries popped, clock-hand moves, random draws. For tests that bound the work per
    /// access (a count of operations, not a time); every policy counts its own.
    fn work(&self) -> u64;
}

/// Remembers the group in which a policy found no unprotected victim: every resident unit
/// then belongs to that group, and stays protected for the rest of it (a group's protection
/// only grows, and units admitted later in the group are stamped with it too), so the
/// driver's further searches of the same group answer `None` at once instead of walking the
/// whole group again for each of its evictions (quadratic in a group of thousands of pages).
/// A page-in resets it, as a safeguard.
#[derive(Clone, Copy, Debug, Default)]
pub struct Exhausted(u32);

impl Exhausted {
    /// True when `protect`'s group is known to leave no victim.
    #[inline]
    pub fn covers(&self, protect: &Protect<'_>) -> bool {
        !protect.is_none() && self.0 == protect.group()
    }

    /// Record that `protect`'s group left no victim (no-op without protection).
    #[inline]
    pub fn mark(&mut self, protect: &Protect<'_>) {
        self.0 = protect.group();
    }

    /// Forget (after a page-in).
    #[inline]
    pub fn reset(&mut self) {
        self.0 = 0;
    }
}

/// Construction inputs shared by every policy of one pool.
#[derive(Clone, Debug, Default)]
pub struct PolicySetup {
    /// Units in the pool (ids `0..units`).
    pub units: usize,
    /// Budget of the pool, in units (>= 1).
    pub capacity: usize,
    /// Seed for randomised policies (with `pool` as the PCG stream, so pools differ).
    pub seed: u64,
    /// Index of the pool (0 for the global split, the MoE layer for the per-layer split).
    pub pool: u64,
    /// Accesses of each unit in the profile trace (static-pin, pin-lru), indexed by unit id.
    pub profile_counts: Option<Vec<u64>>,
    /// Whether each unit was accessed in every token of the profile trace (pin-lru).
    pub profile_always_on: Option<Vec<bool>>,
}

/// A retention policy selectable with `--evict`: a handle on its [`PolicyEntry`] in
/// [`POLICIES`]. Equality, order and hashing follow the registry position, so grids sort in
/// registry order. The associated constants name the policies that code refers to directly;
/// every registered policy is reachable through [`PolicyKind::parse`] and [`PolicyKind::ALL`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyKind(u8);

#[allow(non_upper_case_globals)]
impl PolicyKind {
    /// Offline MIN.
    pub const Belady: PolicyKind = PolicyKind::named("belady");
    /// Least recently used.
    pub const Lru: PolicyKind = PolicyKind::named("lru");
    /// First in, first out.
    pub const Fifo: PolicyKind = PolicyKind::named("fifo");
    /// Least frequently used.
    pub const Lfu: PolicyKind = PolicyKind::named("lfu");
    /// Uniformly random victim.
    pub const Random: PolicyKind = PolicyKind::named("random");
    /// Top-B units of the profile trace pinned.
    pub const StaticPin: PolicyKind = PolicyKind::named("static-pin");
    /// Always-on units pinned, LRU over the rest.
    pub const PinLru: PolicyKind = PolicyKind::named("pin-lru");
    /// Adaptive Replacement Cache.
    pub const Arc: PolicyKind = PolicyKind::named("arc");
    /// S3-FIFO.
    pub const S3Fifo: PolicyKind = PolicyKind::named("s3fifo");

    /// Every registered policy, in the order grids print them (the order of [`POLICIES`]).
    pub const ALL: [PolicyKind; POLICIES.len()] = ALL_KINDS;

    /// The registered policy called `name` (its `--evict` name); a compile-time error in a
    /// constant when there is none.
    const fn named(name: &str) -> PolicyKind {
        PolicyKind(registry::index_of(name) as u8)
    }

    /// The policies `--evict all` runs, in registry order.
    pub fn evict_all() -> impl Iterator<Item = PolicyKind> {
        PolicyKind::ALL.into_iter().filter(|k| k.entry().in_all)
    }

    /// The policy's registry entry.
    pub fn entry(self) -> &'static PolicyEntry {
        &POLICIES[self.0 as usize]
    }

    /// The `--evict` name.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// One line on what the policy evicts.
    pub fn summary(self) -> &'static str {
        self.entry().summary
    }

    /// Parse an `--evict` name or alias (case-insensitive; `min` is accepted for `belady`).
    pub fn parse(s: &str) -> Result<PolicyKind, String> {
        let lower = s.trim().to_ascii_lowercase();
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name() == lower || k.entry().aliases.contains(&lower.as_str()))
            .ok_or_else(|| {
                let names: Vec<_> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown eviction policy `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }

    /// True when the policy is offline (an oracle such as Belady/MIN): it reads next-use
    /// positions, so the driver precomputes them and the policy needs the stream's future.
    pub fn is_offline(self) -> bool {
        self.entry().offline
    }

    /// True when the policy reads next-use positions (the same as [`PolicyKind::is_offline`],
    /// asked by the driver that precomputes them).
    pub fn needs_next_use(self) -> bool {
        self.is_offline()
    }

    /// True when the policy needs profile-trace statistics.
    pub fn needs_profile(self) -> bool {
        self.entry().needs_profile
    }

    /// True when page-ins never increase as the budget grows, so a binary search over the
    /// budget is valid. These are stack algorithms (Mattson et al. 1970): at every step the
    /// victim order is a priority over units that does not depend on the budget (recency for
    /// LRU, (count, recency) for LFU, next use for MIN, the profile order for the pins, and
    /// "current group first" for the group protection), so a larger cache always holds a
    /// superset. FIFO (Belady's anomaly), random, ARC, S3-FIFO and SIEVE are not.
    pub fn monotone_in_budget(self) -> bool {
        self.entry().monotone_in_budget
    }

    /// Build this policy for one pool. Errors name the missing input (profile statistics for
    /// the pinning policies).
    pub fn build(self, setup: &PolicySetup) -> Result<Box<dyn EvictionPolicy>, String> {
        (self.entry().build)(setup)
    }
}

const ALL_KINDS: [PolicyKind; POLICIES.len()] = {
    let mut kinds = [PolicyKind(0); POLICIES.len()];
    let mut i = 0;
    while i < kinds.len() {
        kinds[i] = PolicyKind(i as u8);
        i += 1;
    }
    kinds
};

/// The `Debug` form is the registry's `debug_name` (`Lru`, `StaticPin`), which earlier
/// validation files hold in their `retention` echo.
impl std::fmt::Debug for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.entry().debug_name)
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Serialized as its `--evict` name.
impl serde::Serialize for PolicyKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Read back from its `--evict` name (or an alias), as a results file holds it.
impl<'de> serde::Deserialize<'de> for PolicyKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        PolicyKind::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PolicyKind::parse(s)
    }
}

/// Build a policy for one pool ([`PolicyKind::build`]). Errors name the missing input
/// (profile statistics for the pinning policies).
pub fn build(kind: PolicyKind, setup: &PolicySetup) -> Result<Box<dyn EvictionPolicy>, String> {
    kind.build(setup)
}
