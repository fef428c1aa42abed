//! Retention (eviction) policies: which units stay resident across tokens under a budget.
//!
//! Every policy is one type implementing [`EvictionPolicy`], in its own file; adding a policy
//! means adding a file and one arm in [`PolicyKind`] (parse, name) and [`build`]. Policies see
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
mod s3fifo;
mod static_pin;
mod timeline;

pub use arc::Arc;
pub use belady::Belady;
pub use fifo::Fifo;
pub use lfu::Lfu;
pub use lru::Lru;
pub use pin_lru::PinLru;
pub use random::Random;
pub use s3fifo::S3Fifo;
pub use static_pin::StaticPin;

/// "Never used again": the next-use position of a unit with no later access.
pub const NEVER: u32 = u32::MAX;

/// Where an access sits in the access stream, for policies that look at time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// Position of this access in the whole access stream (0-based, counted in accesses).
    pub pos: u32,
    /// Position of the next access to the same unit, or [`NEVER`]. Only the offline policy
    /// (Belady) reads it; the driver passes [`NEVER`] when it did not precompute next uses.
    pub next_use: u32,
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

/// The retention policies selectable with `--evict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Offline MIN: evict the unit whose next use is farthest.
    Belady,
    /// Least recently used.
    Lru,
    /// First in, first out (hits do not reorder).
    Fifo,
    /// Least frequently used; counts survive eviction; ties by least recent use.
    Lfu,
    /// Uniformly random victim (seeded PCG).
    Random,
    /// Top-B units of the profile trace pinned, everything else streamed.
    StaticPin,
    /// Always-on units of the profile trace pinned, LRU over the rest of the budget.
    PinLru,
    /// Adaptive Replacement Cache (Megiddo & Modha, FAST 2003).
    Arc,
    /// S3-FIFO (Yang et al., SOSP 2023).
    S3Fifo,
}

impl PolicyKind {
    /// Every policy, in the order grids print them.
    pub const ALL: [PolicyKind; 9] = [
        PolicyKind::Belady,
        PolicyKind::Lru,
        PolicyKind::Fifo,
        PolicyKind::Lfu,
        PolicyKind::Random,
        PolicyKind::StaticPin,
        PolicyKind::PinLru,
        PolicyKind::Arc,
        PolicyKind::S3Fifo,
    ];

    /// The `--evict` name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Belady => "belady",
            PolicyKind::Lru => "lru",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Lfu => "lfu",
            PolicyKind::Random => "random",
            PolicyKind::StaticPin => "static-pin",
            PolicyKind::PinLru => "pin-lru",
            PolicyKind::Arc => "arc",
            PolicyKind::S3Fifo => "s3fifo",
        }
    }

    /// Parse an `--evict` name (case-insensitive; `min` is accepted for `belady`).
    pub fn parse(s: &str) -> Result<PolicyKind, String> {
        let lower = s.trim().to_ascii_lowercase();
        if lower == "min" {
            return Ok(PolicyKind::Belady);
        }
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name() == lower)
            .ok_or_else(|| {
                let names: Vec<_> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown eviction policy `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }

    /// True when the policy reads next-use positions (offline).
    pub fn needs_next_use(self) -> bool {
        self == PolicyKind::Belady
    }

    /// True when the policy needs profile-trace statistics.
    pub fn needs_profile(self) -> bool {
        matches!(self, PolicyKind::StaticPin | PolicyKind::PinLru)
    }

    /// True when page-ins never increase as the budget grows, so a binary search over the
    /// budget is valid. These are stack algorithms (Mattson et al. 1970): at every step the
    /// victim order is a priority over units that does not depend on the budget (recency for
    /// LRU, (count, recency) for LFU, next use for MIN, the profile order for the pins, and
    /// "current group first" for the group protection), so a larger cache always holds a
    /// superset. FIFO (Belady's anomaly), random, ARC and S3-FIFO are not.
    pub fn monotone_in_budget(self) -> bool {
        matches!(
            self,
            PolicyKind::Belady
                | PolicyKind::Lru
                | PolicyKind::Lfu
                | PolicyKind::StaticPin
                | PolicyKind::PinLru
        )
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

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PolicyKind::parse(s)
    }
}

/// Build a policy for one pool. Errors name the missing input (profile statistics for the
/// pinning policies).
pub fn build(kind: PolicyKind, setup: &PolicySetup) -> Result<Box<dyn EvictionPolicy>, String> {
    let missing = |what: &str| format!("policy `{kind}` needs {what} (from a profile trace)");
    Ok(match kind {
        PolicyKind::Belady => Box::new(Belady::new(setup.units)),
        PolicyKind::Lru => Box::new(Lru::new(setup.units)),
        PolicyKind::Fifo => Box::new(Fifo::new(setup.units)),
        PolicyKind::Lfu => Box::new(Lfu::new(setup.units)),
        PolicyKind::Random => Box::new(Random::new(setup.units, setup.seed, setup.pool)),
        PolicyKind::StaticPin => Box::new(StaticPin::new(
            setup.capacity,
            setup
                .profile_counts
                .as_deref()
                .ok_or_else(|| missing("unit access counts"))?,
        )),
        PolicyKind::PinLru => Box::new(PinLru::new(
            setup.capacity,
            setup
                .profile_always_on
                .as_deref()
                .ok_or_else(|| missing("always-on units"))?,
        )),
        PolicyKind::Arc => Box::new(Arc::new(setup.units, setup.capacity)),
        PolicyKind::S3Fifo => Box::new(S3Fifo::new(setup.units, setup.capacity)),
    })
}
