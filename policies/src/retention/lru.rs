//! Least recently used.

use super::list::DList;
use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};

/// The registry entry of `lru`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "lru",
    aliases: &[],
    debug_name: "Lru",
    summary: "Least recently used",
    help_note: None,
    needs_profile: false,
    offline: false,
    monotone_in_budget: true,
    in_all: true,
    build: |s| Ok(Box::new(Lru::new(s.units))),
};

/// LRU: the victim is the resident unit whose last access is oldest. Under group semantics the
/// current group's units were all just touched, so the first unprotected unit from the cold
/// end is found at once; when the whole cache is the current group, the victim is the group's
/// earliest-accessed unit.
#[derive(Clone, Debug)]
pub struct Lru {
    /// Resident units, most recent at the head.
    order: DList,
    exhausted: Exhausted,
}

impl Lru {
    /// An empty LRU over unit ids `0..units`.
    pub fn new(units: usize) -> Self {
        Lru {
            order: DList::new(units),
            exhausted: Exhausted::default(),
        }
    }
}

impl EvictionPolicy for Lru {
    #[inline]
    fn on_hit(&mut self, u: u32, _at: At) {
        self.order.move_to_head(u);
    }

    #[inline]
    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
        self.exhausted.reset();
        self.order.push_head(u);
        Admission::Retain
    }

    #[inline]
    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        let v = if protect.is_none() {
            self.order.tail()?
        } else if self.exhausted.covers(&protect) {
            return None;
        } else {
            let Some(v) = self.order.oldest_unprotected(&protect) else {
                self.exhausted.mark(&protect);
                return None;
            };
            v
        };
        self.order.remove(v);
        Some(v)
    }

    fn work(&self) -> u64 {
        self.order.walked()
    }
}
