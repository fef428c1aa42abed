//! The discrete-event engine: replays the page-ins and evictions a retention driver decided
//! (a [`Plans`]) on resource timelines (compute stream, copy engine, driver, fault handler)
//! and reports step latencies and the time split ([`TimingReport`]).
//!
//! Owned here: the event queue, the resource model, prefetch predictors, batch admission and
//! the timeline export. Not here: which units page in or get evicted (the `cache` module and
//! `policies::retention` decide; [`build::plans`] records their decisions), the cost constants
//! (`profile`), how they combine into costs ([`crate::cost`]).

pub mod batch;
pub mod build;
pub mod churn;
pub mod config;
pub mod cpu;
pub mod plan;
pub mod predict;
pub mod prefetch;
pub mod queue;
pub mod replay;
pub mod report;
pub mod timeline;

pub use batch::{admit, Admission, NoSequenceFits};
pub use config::{run_timing, TimingConfig, TimingOutcome};
pub use plan::{GroupRec, Plans, Seen, StepRec};
pub use predict::{Learning, PredictorKind, ProfileGroups};
pub use prefetch::PrefetchIssue;
pub use queue::EventQueue;
pub use replay::{replay, replay_learning, EngineError, EngineOptions, Pricer, Replay};
pub use report::{StepParts, TimingDetail, TimingReport};
pub use timeline::Timeline;

#[cfg(test)]
mod cpu_tests;
#[cfg(test)]
mod issue_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tier_tests;
