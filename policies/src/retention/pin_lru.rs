//! Always-on units pinned, LRU over the rest of the budget.

use super::list::DList;
use super::registry::{missing_profile, PolicyEntry};
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};

/// The registry entry of `pin-lru`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "pin-lru",
    aliases: &[],
    debug_name: "PinLru",
    summary: "Always-on units of the profile trace pinned, LRU over the rest of the budget",
    help_note: Some("always-on units pinned, LRU over the rest"),
    needs_profile: true,
    offline: false,
    monotone_in_budget: true,
    in_all: true,
    build: |s| {
        let on = s.profile_always_on.as_deref();
        let on = on.ok_or_else(|| missing_profile("pin-lru", "always-on units"))?;
        Ok(Box::new(PinLru::new(s.capacity, on)))
    },
};

/// Pin-LRU: the units accessed in every token of the profile trace (always-on) are resident
/// from the start and never evicted; the remaining budget is managed by LRU. When there are
/// more always-on units than the budget, the lowest unit ids are pinned, up to the budget
/// (they all have the same count: one per token).
#[derive(Clone, Debug)]
pub struct PinLru {
    pinned: Vec<u32>,
    order: DList,
    exhausted: Exhausted,
}

impl PinLru {
    /// Pin the always-on units (`profile_always_on`, indexed by unit id), at most `capacity`.
    pub fn new(capacity: usize, profile_always_on: &[bool]) -> Self {
        let pinned: Vec<u32> = (0..profile_always_on.len() as u32)
            .filter(|&u| profile_always_on[u as usize])
            .take(capacity)
            .collect();
        PinLru {
            pinned,
            order: DList::new(profile_always_on.len()),
            exhausted: Exhausted::default(),
        }
    }

    /// The pinned units, ascending.
    pub fn pinned(&self) -> &[u32] {
        &self.pinned
    }
}

impl EvictionPolicy for PinLru {
    fn preloaded(&self) -> Vec<u32> {
        self.pinned.clone()
    }

    #[inline]
    fn on_hit(&mut self, u: u32, _at: At) {
        // Pinned units are not in the LRU list and need no update.
        if self.order.contains(u) {
            self.order.move_to_head(u);
        }
    }

    #[inline]
    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
        self.exhausted.reset();
        self.order.push_head(u);
        Admission::Retain
    }

    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if self.exhausted.covers(&protect) {
            return None;
        }
        let Some(v) = self.order.oldest_unprotected(&protect) else {
            self.exhausted.mark(&protect);
            return None;
        };
        self.order.remove(v);
        Some(v)
    }

    fn work(&self) -> u64 {
        self.order.walked()
    }
}
