//! The prediction side of validation: what `sim validate` holds a real GPU replay against.
//!
//! Per mechanism, the retention driver's plans (page-ins and evictions of every (step, layer)
//! group) are recorded once ([`predict`]); the discrete-event engine prices them (the
//! prediction) and the same plans, as a plain-data [`validate::ReplayPlan`], are what the
//! `validate` crate executes on the GPU (the measurement). Both see the same steps, so the
//! step-time distributions compare one to one ([`ValidationRow::new`]).
//!
//! Owned here: the prediction (with a retention row's warm-up), the `validation` block's types
//! ([`Validation`]) and how repetitions combine, the verdicts and component table
//! ([`analysis`]), the composition check ([`composition`]), the re-pricing summary of many
//! stored replays ([`reprice`]) and where they checked the model ([`coverage`]) and where a run lies against that ([`checked`]), and the text tables ([`text`]). Not here: the GPU replay
//! (`validate`), reading and checking a stored `--measured` file (the `sim` binary).

pub mod analysis;
pub mod checked;
pub mod composition;
pub mod coverage;
pub mod cpu_lane;
pub mod interval;
mod predict;
mod report;
pub mod reprice;
mod settings;
pub mod text;

pub use predict::{compose, predict, replay_plan, Prediction, PredictionSetup, WarmUpChoice};
pub use report::*;
pub use settings::{parse_retention_echo, retention_echo, same_trace, RetentionSettings};

#[cfg(test)]
mod composed_tests;
#[cfg(test)]
mod cost_tests;
#[cfg(test)]
mod tests;
