//! The registry of retention policies: the one list that `--evict` parsing, `--evict all`,
//! the `--help` value lists, the property tests, the benches and the docs check read.
//!
//! Each policy file defines its entry (`ENTRY`) next to its type; [`POLICIES`] lists them in
//! the order grids print them. Adding a policy is its file plus one line here.

use super::{arc, belady, fifo, lfu, lru, pin_lru, random, s3fifo, sieve, static_pin};
use super::{EvictionPolicy, PolicySetup};

/// What the rest of the workspace knows about one retention policy.
#[derive(Clone, Copy, Debug)]
pub struct PolicyEntry {
    /// The `--evict` name (lower case, as results files write it).
    pub name: &'static str,
    /// Other names `--evict` accepts (lower case).
    pub aliases: &'static [&'static str],
    /// The policy's `Debug` form, as the `retention` echo of earlier validation files
    /// writes it (`Lru@Fraction { .. }`).
    pub debug_name: &'static str,
    /// One line on what the policy evicts (no trailing period).
    pub summary: &'static str,
    /// What the `--evict` help says in parentheses after the name, if anything.
    pub help_note: Option<&'static str>,
    /// Needs statistics of a profile trace (`PolicySetup::profile_counts` or
    /// `profile_always_on`); the evaluated trace stands in when none is given.
    pub needs_profile: bool,
    /// Offline (an oracle): reads next-use positions, so it needs the future of the stream.
    pub offline: bool,
    /// A stack algorithm: page-ins never increase as the budget grows, so the budget may be
    /// binary-searched (see [`super::PolicyKind::monotone_in_budget`]).
    pub monotone_in_budget: bool,
    /// Part of `--evict all`. The `all` set is the grid whose outputs are recorded (golden
    /// outputs, benchmark figures); a policy outside it runs when named.
    pub in_all: bool,
    /// Build the policy for one pool. Errors name a missing input.
    pub build: fn(&PolicySetup) -> Result<Box<dyn EvictionPolicy>, String>,
}

/// Every retention policy, in the order grids print them.
pub const POLICIES: &[PolicyEntry] = &[
    belady::ENTRY,
    lru::ENTRY,
    fifo::ENTRY,
    lfu::ENTRY,
    random::ENTRY,
    static_pin::ENTRY,
    pin_lru::ENTRY,
    arc::ENTRY,
    s3fifo::ENTRY,
    sieve::ENTRY,
];

/// The error of a policy built without the profile statistics it needs.
pub(super) fn missing_profile(policy: &str, what: &str) -> String {
    format!("policy `{policy}` needs {what} (from a profile trace)")
}

/// The position of `name` in [`POLICIES`]; a compile-time error when used in a constant and
/// the name is not registered.
pub(super) const fn index_of(name: &str) -> usize {
    let mut i = 0;
    while i < POLICIES.len() {
        if str_eq(POLICIES[i].name, name) {
            return i;
        }
        i += 1;
    }
    panic!("not a registered retention policy")
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::PolicyKind;
    use super::*;

    #[test]
    fn names_aliases_and_debug_names_are_unique_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for (i, e) in POLICIES.iter().enumerate() {
            for n in std::iter::once(&e.name).chain(e.aliases) {
                assert_eq!(*n, n.to_ascii_lowercase(), "{n}: names are lower case");
                assert!(seen.insert(*n), "{n} is registered twice");
                assert_eq!(PolicyKind::parse(n).unwrap(), PolicyKind::ALL[i]);
            }
            assert_eq!(format!("{:?}", PolicyKind::ALL[i]), e.debug_name);
            assert!(
                !e.summary.ends_with('.'),
                "{}: summary without period",
                e.name
            );
        }
        assert!(POLICIES.len() <= u8::MAX as usize);
    }

    #[test]
    fn named_handles_are_their_entries() {
        for (k, name) in [
            (PolicyKind::Belady, "belady"),
            (PolicyKind::Lru, "lru"),
            (PolicyKind::Fifo, "fifo"),
            (PolicyKind::Lfu, "lfu"),
            (PolicyKind::Random, "random"),
            (PolicyKind::StaticPin, "static-pin"),
            (PolicyKind::PinLru, "pin-lru"),
            (PolicyKind::Arc, "arc"),
            (PolicyKind::S3Fifo, "s3fifo"),
        ] {
            assert_eq!(k.name(), name);
        }
    }
}
