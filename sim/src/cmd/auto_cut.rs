//! `sim run --prefetch-min-score auto`: the confidence cut chosen from the profile trace.
//!
//! The run's configuration (policy, budget, profile, predictor, window, issue policy) runs
//! the profile trace itself, with the predictor learning from that trace as it does in the
//! evaluated run, once without a cut and once at each cut of
//! [`sim::engine::replay::cut_curve::CUTS`]; the fastest (tokens/s) wins, ties to the
//! weaker cut (no cut first). The evaluated trace is never read: a cut tuned on the run
//! it then reports would flatter it.

use anyhow::{bail, Result};
use sim::engine::replay::cut_curve::CUTS;
use sim::runner::RunConfig;
use std::path::Path;

/// The chosen cut (`None`: no cut) for `cfg` and a sentence saying why.
pub fn choose(cfg: &RunConfig, profile: Option<&Path>) -> Result<(Option<f64>, String)> {
    let Some(profile) = profile else {
        bail!("--prefetch-min-score auto chooses the cut on the profile trace, never on the evaluated run: add --profile-trace FILE (e.g. traces/data/granite/english_prose.bin), or give a fraction (e.g. 0.5)");
    };
    let mut best: Option<(Option<f64>, f64)> = None;
    let mut tried = Vec::new();
    for cut in std::iter::once(None).chain(CUTS.iter().map(|&c| Some(c))) {
        let mut c = cfg.clone();
        if let Some(t) = &mut c.timing {
            t.prefetch_min_score = cut;
            t.timeline = None;
        }
        let r = sim::bounded::run_file(&c, profile, Some(profile), &|_| {})?;
        let Some(tps) = r.timing.map(|t| t.tokens_per_s) else {
            bail!("--prefetch-min-score auto needs a timed run: add --hw");
        };
        tried.push(format!("{}: {tps:.1}", name(cut)));
        if best.is_none_or(|(_, b)| tps > b) {
            best = Some((cut, tps));
        }
    }
    let (cut, tps) = best.expect("at least the run without a cut");
    let why = format!(
        "--prefetch-min-score auto chose {}: the fastest run of the profile trace {} with this configuration ({tps:.1} tokens/s; tokens/s by cut, {}), never read from the evaluated trace",
        name(cut),
        profile.display(),
        tried.join(", ")
    );
    Ok((cut, why))
}

fn name(cut: Option<f64>) -> String {
    cut.map_or("no cut".to_string(), |c| c.to_string())
}
