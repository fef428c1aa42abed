//! Static pinning: the profile's top-B units resident for the whole run, the rest streamed.

use super::registry::{missing_profile, PolicyEntry};
use super::{Admission, At, EvictionPolicy, Protect};

/// The registry entry of `static-pin`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "static-pin",
    aliases: &[],
    debug_name: "StaticPin",
    summary: "Top-B units of the profile trace pinned, everything else streamed",
    help_note: Some("top-B units of the profile trace pinned, the rest streamed"),
    needs_profile: true,
    offline: false,
    monotone_in_budget: true,
    in_all: true,
    build: |s| {
        let counts = s.profile_counts.as_deref();
        let counts = counts.ok_or_else(|| missing_profile("static-pin", "unit access counts"))?;
        Ok(Box::new(StaticPin::new(s.capacity, counts)))
    },
};

/// Static pin: the `capacity` units with the most accesses in the profile trace (count
/// descending, then lower unit id first) are resident from the start and never page-ins;
/// every other access is a page-in that is streamed through and not retained, so nothing is
/// ever evicted. Units the profile never accessed rank last (count 0, lower id first), so a
/// budget of the whole bank pins every unit.
#[derive(Clone, Debug)]
pub struct StaticPin {
    pinned: Vec<u32>,
}

impl StaticPin {
    /// Pin the top-`capacity` units of `profile_counts` (indexed by unit id).
    pub fn new(capacity: usize, profile_counts: &[u64]) -> Self {
        let mut order: Vec<u32> = (0..profile_counts.len() as u32).collect();
        order.sort_by_key(|&u| (std::cmp::Reverse(profile_counts[u as usize]), u));
        order.truncate(capacity);
        order.sort_unstable();
        StaticPin { pinned: order }
    }

    /// The pinned units, ascending.
    pub fn pinned(&self) -> &[u32] {
        &self.pinned
    }
}

impl EvictionPolicy for StaticPin {
    fn preloaded(&self) -> Vec<u32> {
        self.pinned.clone()
    }

    #[inline]
    fn on_hit(&mut self, _u: u32, _at: At) {}

    #[inline]
    fn on_miss(&mut self, _u: u32, _at: At) -> Admission {
        Admission::Bypass
    }

    fn evict(&mut self, _protect: Protect<'_>) -> Option<u32> {
        None
    }

    /// Nothing is ever searched: the pins are chosen once, at construction.
    fn work(&self) -> u64 {
        0
    }
}
