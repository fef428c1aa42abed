//! An intrusive doubly linked list over dense unit ids, shared by the list-based policies
//! (LRU, FIFO, pin-LRU, ARC, S3-FIFO). Every operation is O(1) and allocation-free after
//! construction: keys are small dense integers, so an array of `u32` links beats a hash map.
//! Each id's two links sit side by side (one 8-byte [`Link`]), so an unlink or a move to the
//! head touches one cache line per neighbour instead of two.

use super::Protect;
use std::cell::Cell;

/// Sentinel for "no neighbour" / "not in the list".
pub const NIL: u32 = u32::MAX;

/// A doubly linked list holding a subset of `0..n` ids. The head is the most recently
/// inserted end (MRU), the tail the oldest (LRU / FIFO victim end).
#[derive(Clone, Debug)]
pub struct DList {
    /// `links[id]`: the id's neighbours while it is in the list.
    links: Vec<Link>,
    member: Vec<bool>,
    head: u32,
    tail: u32,
    len: usize,
    /// Entries [`DList::oldest_where`] has walked so far (its calls included): the work that
    /// tests bound per access.
    walked: Cell<u64>,
    /// Where [`DList::oldest_unprotected`] may resume within one group.
    resume: Cell<Resume>,
}

/// The neighbours of one id: `prev` towards the head, `next` towards the tail ([`NIL`]: none).
#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
}

/// Within group `group`, every entry from the tail up to `at` (inclusive; [`NIL`]: none) was
/// protected when that group last searched the list. They stay protected for the rest of the
/// group (a group's protection only grows) and nothing is inserted among them (insertions go
/// to the head), so a later search of the same group starts after `at`. Removing or moving
/// `at` itself forgets the resume point.
#[derive(Clone, Copy, Debug, Default)]
struct Resume {
    group: u32,
    at: u32,
}

impl DList {
    /// An empty list able to hold ids `0..n`.
    pub fn new(n: usize) -> Self {
        DList {
            links: vec![
                Link {
                    prev: NIL,
                    next: NIL
                };
                n
            ],
            member: vec![false; n],
            head: NIL,
            tail: NIL,
            len: 0,
            walked: Cell::new(0),
            resume: Cell::new(Resume { group: 0, at: NIL }),
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
        let p = self.links[id as usize].prev;
        (p != NIL).then_some(p)
    }

    /// Insert `id` (not in the list) at the head.
    #[inline]
    pub fn push_head(&mut self, id: u32) {
        debug_assert!(!self.member[id as usize]);
        let i = id as usize;
        self.links[i] = Link {
            prev: NIL,
            next: self.head,
        };
        if self.head != NIL {
            self.links[self.head as usize].prev = id;
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
        if self.resume.get().at == id {
            self.resume.set(Resume { group: 0, at: NIL });
        }
        self.unlink(id);
        self.member[id as usize] = false;
        self.len -= 1;
    }

    /// Join `id`'s neighbours to each other (membership and length unchanged).
    #[inline]
    fn unlink(&mut self, id: u32) {
        let Link { prev: p, next: n } = self.links[id as usize];
        if p != NIL {
            self.links[p as usize].next = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.links[n as usize].prev = p;
        } else {
            self.tail = p;
        }
    }

    /// Move `id` (in the list) to the head.
    #[inline]
    pub fn move_to_head(&mut self, id: u32) {
        debug_assert!(self.member[id as usize]);
        if self.head == id {
            return;
        }
        if self.resume.get().at == id {
            self.resume.set(Resume { group: 0, at: NIL });
        }
        // Not the head, so the list keeps a head after the unlink.
        self.unlink(id);
        let old = self.head;
        self.links[id as usize] = Link {
            prev: NIL,
            next: old,
        };
        self.links[old as usize].prev = id;
        self.head = id;
    }

    /// The oldest id for which `skip` is false, walking from the tail; `None` when every id
    /// is skipped.
    #[inline]
    pub fn oldest_where(&self, mut skip: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut cur = self.tail;
        self.walked.set(self.walked.get() + 1);
        while cur != NIL {
            self.walked.set(self.walked.get() + 1);
            if !skip(cur) {
                return Some(cur);
            }
            cur = self.links[cur as usize].prev;
        }
        None
    }

    /// The oldest id that `protect` does not protect: `oldest_where(|u| protect.is(u))`, but
    /// a search in the same group as the previous one starts where that one stopped (see
    /// [`Resume`]), so the evictions of one group walk its protected entries once in all,
    /// not once each.
    #[inline]
    pub fn oldest_unprotected(&self, protect: &Protect<'_>) -> Option<u32> {
        if protect.is_none() {
            self.walked.set(self.walked.get() + 1);
            return self.tail();
        }
        let g = protect.group();
        let r = self.resume.get();
        let mut last = if r.group == g { r.at } else { NIL };
        let mut cur = if last == NIL {
            self.tail
        } else {
            self.links[last as usize].prev
        };
        self.walked.set(self.walked.get() + 1);
        while cur != NIL {
            self.walked.set(self.walked.get() + 1);
            if !protect.is(cur) {
                break;
            }
            last = cur;
            cur = self.links[cur as usize].prev;
        }
        self.resume.set(Resume { group: g, at: last });
        (cur != NIL).then_some(cur)
    }

    /// Entries walked by [`DList::oldest_where`] and [`DList::oldest_unprotected`] so far, one
    /// more per call.
    pub fn walked(&self) -> u64 {
        self.walked.get()
    }

    /// Ids from head (newest) to tail (oldest); for tests and debugging.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        let mut cur = self.head;
        while cur != NIL {
            out.push(cur);
            cur = self.links[cur as usize].next;
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

    #[test]
    fn protected_searches_of_one_group_resume_and_agree_with_a_full_walk() {
        // 0 (tail) .. 9 (head); 0..6 protected in group 1
        let mut l = DList::new(10);
        for id in 0..10 {
            l.push_head(id);
        }
        let mut stamp = vec![0u32; 10];
        stamp[..6].fill(1);
        let p = Protect::new(&stamp, 1);
        let full = |l: &DList| l.oldest_where(|u| p.is(u));
        assert_eq!(l.oldest_unprotected(&p), Some(6));
        let walked = l.walked();
        l.remove(6);
        // resumes after 5: one step to 7, not six
        assert_eq!(l.oldest_unprotected(&p), full(&l));
        assert_eq!(l.oldest_unprotected(&p), Some(7));
        assert!(l.walked() - walked <= 2 + 3 + 7, "{}", l.walked() - walked);
        // moving the resume point forgets it; the answer stays the oldest unprotected
        l.move_to_head(5);
        assert_eq!(l.oldest_unprotected(&p), Some(7));
        // another group starts from the tail
        stamp[0] = 2;
        let q = Protect::new(&stamp, 2);
        assert_eq!(l.oldest_unprotected(&q), Some(1));
        l.remove(7);
        l.remove(8);
        l.remove(9);
        stamp.fill(2);
        let q = Protect::new(&stamp, 2);
        assert_eq!(l.oldest_unprotected(&q), None);
        assert_eq!(l.oldest_unprotected(&Protect::none()), Some(0));
    }
}
