//! The confidence-cut curve of a run's prefetches: how many of the issued ones scored at
//! least each cut, and how many of those a group then paged in (used or late), so the run
//! reports precision and recall as they would read had the cut removed the lower-scoring
//! prefetches and left the others as they were (DESIGN.md, "Confidence cut").

/// The cuts of the curve: 0.1, 0.2, ..., 1 of the prediction's best score.
pub const CUTS: [f64; 10] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// Per cut, the issued prefetches scoring at least it and the caught ones among them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CutCurve {
    pub issued: [u64; CUTS.len()],
    pub caught: [u64; CUTS.len()],
}

impl CutCurve {
    /// Count a prefetch issued with score `s` (a fraction of its prediction's best).
    #[inline]
    pub(super) fn issue(&mut self, s: f64) {
        for (n, &c) in self.issued.iter_mut().zip(&CUTS) {
            *n += u64::from(s >= c);
        }
    }

    /// Count a prefetch of score `s` that a group paged in.
    #[inline]
    pub(super) fn catch(&mut self, s: f64) {
        for (n, &c) in self.caught.iter_mut().zip(&CUTS) {
            *n += u64::from(s >= c);
        }
    }
}
