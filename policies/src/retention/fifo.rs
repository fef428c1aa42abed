//! First in, first out.

use super::list::DList;
use super::registry::PolicyEntry;
use super::{Admission, At, EvictionPolicy, Exhausted, Protect};

/// The registry entry of `fifo`.
pub(super) const ENTRY: PolicyEntry = PolicyEntry {
    name: "fifo",
    aliases: &[],
    debug_name: "Fifo",
    summary: "First in, first out (hits do not reorder)",
    help_note: None,
    needs_profile: false,
    offline: false,
    monotone_in_budget: false,
    in_all: true,
    build: |s| Ok(Box::new(Fifo::new(s.units))),
};

/// FIFO: the victim is the resident unit admitted longest ago; hits do not reorder. Under
/// group semantics protected units (hits of the current group that happen to be old) are
/// skipped, keeping their place in the queue.
#[derive(Clone, Debug)]
pub struct Fifo {
    /// Resident units, newest admission at the head.
    queue: DList,
    exhausted: Exhausted,
}

impl Fifo {
    /// An empty FIFO over unit ids `0..units`.
    pub fn new(units: usize) -> Self {
        Fifo {
            queue: DList::new(units),
            exhausted: Exhausted::default(),
        }
    }
}

impl EvictionPolicy for Fifo {
    #[inline]
    fn on_hit(&mut self, _u: u32, _at: At) {}

    #[inline]
    fn on_miss(&mut self, u: u32, _at: At) -> Admission {
        self.exhausted.reset();
        self.queue.push_head(u);
        Admission::Retain
    }

    #[inline]
    fn evict(&mut self, protect: Protect<'_>) -> Option<u32> {
        if self.exhausted.covers(&protect) {
            return None;
        }
        let Some(v) = self.queue.oldest_unprotected(&protect) else {
            self.exhausted.mark(&protect);
            return None;
        };
        self.queue.remove(v);
        Some(v)
    }

    fn work(&self) -> u64 {
        self.queue.walked()
    }
}
