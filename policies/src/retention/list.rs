//! An intrusive doubly linked list over dense unit ids, shared by the list-based policies
//! (LRU, FIFO, pin-LRU, ARC, S3-FIFO). Every operation is O(1) and allocation-free after
//! construction: keys are small dense integers, so two `u32` arrays beat a hash map.

/// Sentinel for "no neighbour" / "not in the list".
pub const NIL: u32 = u32::MAX;

/// A doubly linked list holding a subset of `0..n` ids. The head is the most recently
/// inserted end (MRU), the tail the oldest (LRU / FIFO victim end).
#[derive(Clone, Debug)]
pub struct DList {
    prev: Vec<u32>,
    next: Vec<u32>,
    member: Vec<bool>,
    head: u32,
    tail: u32,
    len: usize,
}

impl DList {
    /// An empty list able to hold ids `0..n`.
    pub fn new(n: usize) -> Self {
        DList {
            prev: vec![NIL; n],
            next: vec![NIL; n],
            member: vec![false; n],
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Number of ids in the list.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the list holds no id.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `id` is in the list.
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.member[id as usize]
    }

    /// The oldest id (tail), if any.
    #[inline]
    pub fn tail(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// The id inserted before `id` (towards the head), walking from the tail; `None` at the head.
    #[inline]
    pub fn towards_head(&self, id: u32) -> Option<u32> {
        let p = self.prev[id as usize];
        (p != NIL).then_some(p)
    }

    /// Insert `id` (not in the list) at the head.
    #[inline]
    pub fn push_head(&mut self, id: u32) {
        debug_assert!(!self.member[id as usize]);
        let i = id as usize;
        self.prev[i] = NIL;
        self.next[i] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = id;
        } else {
            self.tail = id;
        }
        self.head = id;
        self.member[i] = true;
        self.len += 1;
    }

    /// Remove `id` (in the list).
    #[inline]
    pub fn remove(&mut self, id: u32) {
        debug_assert!(self.member[id as usize]);
        let i = id as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            self.tail = p;
        }
        self.member[i] = false;
        self.len -= 1;
    }

    /// Move `id` (in the list) to the head.
    #[inline]
    pub fn move_to_head(&mut self, id: u32) {
        if self.head != id {
            self.remove(id);
            self.push_head(id);
        }
    }

    /// The oldest id for which `skip` is false, walking from the tail; `None` when every id
    /// is skipped.
    #[inline]
    pub fn oldest_where(&self, mut skip: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut cur = self.tail;
        while cur != NIL {
            if !skip(cur) {
                return Some(cur);
            }
            cur = self.prev[cur as usize];
        }
        None
    }

    /// Ids from head (newest) to tail (oldest); for tests and debugging.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        let mut cur = self.head;
        while cur != NIL {
            out.push(cur);
            cur = self.next[cur as usize];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_move_remove_keep_order() {
        let mut l = DList::new(5);
        for id in [0, 1, 2, 3] {
            l.push_head(id);
        }
        assert_eq!(l.to_vec(), vec![3, 2, 1, 0]);
        l.move_to_head(1);
        assert_eq!(l.to_vec(), vec![1, 3, 2, 0]);
        l.remove(0);
        assert_eq!(l.tail(), Some(2));
        assert_eq!(l.oldest_where(|id| id == 2), Some(3));
        assert_eq!(l.oldest_where(|_| true), None);
        l.remove(1);
        l.remove(3);
        l.remove(2);
        assert!(l.is_empty());
        assert_eq!(l.tail(), None);
    }
}
