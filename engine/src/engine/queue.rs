//! The event queue: a binary heap ordered by (time, sequence number). The sequence number is
//! a monotone counter assigned at push, so events at the same time pop in push order and a
//! run is deterministic whatever the heap's internal layout.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One queued event: `at` in µs of simulated time, `seq` the push order, `payload` the event.
#[derive(Clone, Copy, Debug)]
pub struct Event<T> {
    pub at: f64,
    pub seq: u64,
    pub payload: T,
}

impl<T> PartialEq for Event<T> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl<T> Eq for Event<T> {}
impl<T> PartialOrd for Event<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Event<T> {
    // Reversed: BinaryHeap is a max-heap and the earliest event must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.at.total_cmp(&self.at).then(o.seq.cmp(&self.seq))
    }
}

/// Min-queue of events by (time, push order). Pushing and popping allocate only when the
/// heap grows past its largest size so far.
#[derive(Debug)]
pub struct EventQueue<T> {
    heap: BinaryHeap<Event<T>>,
    next_seq: u64,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<T: Copy> EventQueue<T> {
    /// Queue `payload` at time `at` (µs).
    #[inline]
    pub fn push(&mut self, at: f64, payload: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Event { at, seq, payload });
    }

    /// The earliest event, without removing it.
    #[inline]
    pub fn peek(&self) -> Option<&Event<T>> {
        self.heap.peek()
    }

    /// Remove and return the earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<Event<T>> {
        self.heap.pop()
    }

    /// Keep only the events whose payload `keep` accepts. The survivors keep their times and
    /// push order, so they pop as they would have.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.heap.retain(|e| keep(&e.payload));
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_push_order() {
        let mut q = EventQueue::default();
        q.push(5.0, 'a');
        q.push(1.0, 'b');
        q.push(5.0, 'c');
        q.push(1.0, 'd');
        q.push(0.5, 'e');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|e| e.payload)).collect();
        assert_eq!(order, vec!['e', 'b', 'd', 'a', 'c']);
    }

    #[test]
    fn retained_events_pop_in_their_old_order() {
        let mut q = EventQueue::default();
        for (i, at) in [3.0, 1.0, 3.0, 2.0, 1.0, 3.0].into_iter().enumerate() {
            q.push(at, i);
        }
        q.retain(|&i| i % 2 == 0);
        let order: Vec<usize> = std::iter::from_fn(|| q.pop().map(|e| e.payload)).collect();
        // by time, then push order: (1.0, 4), (3.0, 0), (3.0, 2)
        assert_eq!(order, vec![4, 0, 2]);
        q.push(0.0, 9);
        assert_eq!(q.pop().map(|e| e.payload), Some(9));
    }
}
