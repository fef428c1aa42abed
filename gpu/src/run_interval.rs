//! 90% intervals of a timed `sim run` (`--intervals N`): the run repeated under `N` profiles
//! whose constants are drawn from their measured spread ([`crate::validation::interval::
//! perturbed`], seed 0, so the interval is deterministic), and the 5th to 95th percentile
//! (nearest rank, [`crate::validation::interval::band90`]) of the draws' tokens/s, step p50
//! and step p99. Sizes are not drawn ([`drawn_profile`]): VRAM, granule and admission cap
//! decide what fits, not what it costs. A run that priced a constant outside its measured domain gets no interval:
//! the spread was measured inside the domain and says nothing past it (docs/DESIGN.md,
//! "Intervals on a run").

use crate::runner::{RunConfig, RunReport};
use crate::validation::interval::{band90, perturbed};
use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde::Serialize;
use std::sync::Arc;

/// The interval of one timed run (`interval90` in `sim run --json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunInterval {
    /// Profiles drawn.
    pub draws: u32,
    /// The 90% intervals; absent when `unknown` says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_ms_p50: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_ms_p99: Option<[f64; 2]>,
    /// Why there is no interval (a price outside a constant's measured domain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

impl RunInterval {
    /// The text line of `sim run`.
    pub fn line(&self) -> String {
        match (&self.unknown, self.tokens_per_s, self.step_ms_p50, self.step_ms_p99) {
            (None, Some(t), Some(p50), Some(p99)) => format!(
                "  interval    90% over {} drawn profiles: tokens/s [{:.2}, {:.2}]   p50 [{:.3}, {:.3}] ms   p99 [{:.3}, {:.3}] ms\n",
                self.draws, t[0], t[1], p50[0], p50[1], p99[0], p99[1]
            ),
            (why, ..) => format!(
                "  interval    unknown: {}\n",
                why.as_deref().unwrap_or("no draw was timed")
            ),
        }
    }
}

/// `base` with its cost constants drawn ([`perturbed`]) and its sizes (constants measured in
/// bytes: VRAM, granule) and admission cap kept: a draw prices the same run, it does not
/// change what fits.
pub fn drawn_profile(base: &profile::Profile, rng: &mut Pcg64) -> profile::Profile {
    use profile::{ConstantName, Dimension};
    let mut p = perturbed(base, rng);
    for (k, c) in &base.constants {
        let keep = ConstantName::parse(k)
            .is_some_and(|n| n.dimension() == Dimension::Bytes || n == ConstantName::AdmissionCap);
        if keep {
            p.constants.insert(k.clone(), c.clone());
        }
    }
    p
}

/// The interval of `report` (the run of `cfg`), `run` running a configuration as the command
/// did. `cfg` must be timed.
pub fn run_interval(
    cfg: &RunConfig,
    report: &RunReport,
    draws: u32,
    run: impl Fn(&RunConfig) -> Result<RunReport>,
) -> Result<RunInterval> {
    let timing = cfg
        .timing
        .as_ref()
        .context("--intervals needs a timed run: add --hw PROFILE")?;
    let outside: Vec<String> = report
        .timing_detail
        .iter()
        .flat_map(|d| d.outside_range.iter().map(|o| o.constant.clone()))
        .collect();
    let draws = draws.max(1);
    if !outside.is_empty() {
        return Ok(RunInterval {
            draws,
            tokens_per_s: None,
            step_ms_p50: None,
            step_ms_p99: None,
            unknown: Some(format!(
                "priced outside the measured range of {} (the constants' spread was measured inside it)",
                outside.join(", ")
            )),
        });
    }
    let mut rng = Pcg64::seed_from_u64(0);
    let (mut tps, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..draws {
        let mut drawn = cfg.clone();
        let mut t = timing.clone();
        t.profile = Arc::new(drawn_profile(&timing.profile, &mut rng));
        drawn.timing = Some(t);
        let r = run(&drawn)?;
        let t = r.timing.context("a drawn run was not timed")?;
        tps.push(t.tokens_per_s);
        p50.push(t.step_ms_p50);
        p99.push(t.step_ms_p99);
    }
    Ok(RunInterval {
        draws,
        tokens_per_s: Some(band90(&tps)),
        step_ms_p50: Some(band90(&p50)),
        step_ms_p99: Some(band90(&p99)),
        unknown: None,
    })
}
