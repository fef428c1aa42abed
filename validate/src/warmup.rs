//! How many untimed warm-up steps a retention replay runs before the steps it measures, chosen
//! from the plan alone (the retention driver's page-ins and evictions per step), so that the
//! GPU replay and the engine's prediction skip the same steps. Pure CPU.
//!
//! Without a warm-up, a retention (LRU) replay measures a cache that is still filling: it
//! commits fresh units and evicts nothing (a Qwen3 LRU `e1` replay of 12 steps pages in 384 ->
//! 120 units per step and evicts none), so it tests fresh commits, not the churn of a cache at
//! its budget. The warm-up replays the plan's first steps for real (commits, copies, kernels,
//! evictions) without timing them.

use serde::{Deserialize, Serialize};

/// Page-ins and evictions of one decode step of a plan (summed over its groups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepChurn {
    /// Units paged in by the step.
    pub page_ins: u64,
    /// Units evicted by the step.
    pub evictions: u64,
}

/// When a retention replay counts as warmed up.
///
/// A step is **steady** when it evicts at least one unit (the cache has reached its budget:
/// under a budget the retention driver evicts only to make room) and its evictions are within
/// `tolerance` of its page-ins: `|evictions - page_ins| <= tolerance x page_ins` (a cache at
/// its budget evicts what it admits). The warm-up is the smallest `w >= window` whose last
/// `window` steps (`w - window .. w`) are all steady, at most `max_steps` and at most the
/// plan's steps minus the steps to measure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SteadyRule {
    /// Consecutive steady steps that end the warm-up.
    pub window: usize,
    /// Largest relative difference between a steady step's evictions and page-ins.
    pub tolerance: f64,
    /// Most warm-up steps run, steady or not.
    pub max_steps: usize,
}

/// The rule `sim validate` uses: 3 steady steps in a row, evictions within 10% of page-ins, at
/// most 64 warm-up steps. Chosen, not measured: 3 steps span the replays' 2-3 step transients
/// (commit cost rises from step 0 to step 2 as the live set grows, issue 22's audit); 10%
/// admits the unequal unit sizes of a byte budget; 64 steps bound the untimed GPU time to
/// a few seconds on the stored replays' steps (20-700 ms each).
pub const DEFAULT_RULE: SteadyRule = SteadyRule {
    window: 3,
    tolerance: 0.10,
    max_steps: 64,
};

/// The warm-up a replay runs: how many steps, and whether they reached the steady rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmUp {
    /// Untimed steps replayed before the measured ones (the measured steps are the plan's
    /// steps `steps ..`).
    pub steps: usize,
    /// Whether the last warm-up steps met the rule; false when the cap (or the plan's length)
    /// ended the warm-up first.
    pub steady: bool,
}

impl SteadyRule {
    /// Whether step `c` is steady under this rule.
    pub fn is_steady(&self, c: StepChurn) -> bool {
        c.evictions > 0
            && (c.evictions as f64 - c.page_ins as f64).abs() <= self.tolerance * c.page_ins as f64
    }

    /// The warm-up of a plan whose steps churn as `churn`, leaving `measured` steps to time.
    /// The cap is `min(max_steps, churn.len() - measured)` (0 when the plan has no more steps
    /// than are measured); when no `w` up to the cap meets the rule, the warm-up is the cap,
    /// not steady.
    pub fn warm_up(&self, churn: &[StepChurn], measured: usize) -> WarmUp {
        let cap = self.max_steps.min(churn.len().saturating_sub(measured));
        let window = self.window.max(1);
        let mut run = 0usize;
        for (i, &c) in churn.iter().enumerate().take(cap) {
            run = if self.is_steady(c) { run + 1 } else { 0 };
            if run >= window {
                return WarmUp {
                    steps: i + 1,
                    steady: true,
                };
            }
        }
        WarmUp {
            steps: cap,
            steady: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn churn(v: &[(u64, u64)]) -> Vec<StepChurn> {
        v.iter()
            .map(|&(page_ins, evictions)| StepChurn {
                page_ins,
                evictions,
            })
            .collect()
    }

    #[test]
    fn a_filling_cache_warms_up_until_three_steps_evict_what_they_admit() {
        // steps 0-2 fill (no evictions), 3 evicts less than it admits (reaching the budget),
        // 4, 5, 6 evict exactly what they admit: the warm-up ends after step 6 (7 steps)
        let c = churn(&[
            (384, 0),
            (200, 0),
            (150, 0),
            (120, 60),
            (110, 110),
            (100, 100),
            (90, 90),
            (80, 80),
        ]);
        let w = DEFAULT_RULE.warm_up(&c, 1);
        assert_eq!(
            w,
            WarmUp {
                steps: 7,
                steady: true
            }
        );
    }

    #[test]
    fn the_tolerance_is_inclusive_and_relative_to_page_ins() {
        let rule = SteadyRule {
            window: 1,
            tolerance: 0.10,
            max_steps: 10,
        };
        // 100 page-ins: 90 and 110 evictions are steady, 89 and 111 are not
        assert!(rule.is_steady(StepChurn {
            page_ins: 100,
            evictions: 90
        }));
        assert!(rule.is_steady(StepChurn {
            page_ins: 100,
            evictions: 110
        }));
        assert!(!rule.is_steady(StepChurn {
            page_ins: 100,
            evictions: 89
        }));
        assert!(!rule.is_steady(StepChurn {
            page_ins: 100,
            evictions: 111
        }));
        // a step without evictions is never steady (the cache is below its budget)
        assert!(!rule.is_steady(StepChurn {
            page_ins: 0,
            evictions: 0
        }));
        assert_eq!(
            rule.warm_up(&churn(&[(10, 0), (100, 89), (100, 90)]), 0),
            WarmUp {
                steps: 3,
                steady: true
            }
        );
    }

    #[test]
    fn a_broken_run_starts_the_count_again() {
        let rule = SteadyRule {
            window: 2,
            tolerance: 0.0,
            max_steps: 10,
        };
        // steady, not, steady, steady: the run of two ends at step 3
        let c = churn(&[(5, 5), (5, 4), (5, 5), (5, 5), (5, 5)]);
        assert_eq!(
            rule.warm_up(&c, 0),
            WarmUp {
                steps: 4,
                steady: true
            }
        );
    }

    #[test]
    fn the_cap_and_the_measured_steps_bound_the_warm_up() {
        let rule = SteadyRule {
            window: 3,
            tolerance: 0.1,
            max_steps: 4,
        };
        // never steady: the cap (4) ends it
        let filling = churn(&[(10, 0); 20]);
        assert_eq!(
            rule.warm_up(&filling, 12),
            WarmUp {
                steps: 4,
                steady: false
            }
        );
        // 20 steps, 18 measured: at most 2 warm-up steps
        assert_eq!(
            rule.warm_up(&filling, 18),
            WarmUp {
                steps: 2,
                steady: false
            }
        );
        // steady from the start, but only 2 steps may warm up: not enough for the window
        let steady = churn(&[(10, 10); 20]);
        assert_eq!(
            rule.warm_up(&steady, 18),
            WarmUp {
                steps: 2,
                steady: false
            }
        );
        assert_eq!(
            rule.warm_up(&steady, 12),
            WarmUp {
                steps: 3,
                steady: true
            }
        );
        // a plan no longer than the measured steps gets none
        assert_eq!(
            rule.warm_up(&steady, 20),
            WarmUp {
                steps: 0,
                steady: false
            }
        );
        assert_eq!(
            rule.warm_up(&steady, 25),
            WarmUp {
                steps: 0,
                steady: false
            }
        );
    }
}
