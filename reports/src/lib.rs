//! Policy comparison reports rendered from run results (the JSON objects `sim run --json`
//! prints): `results.json`, `results.csv`, `report.md`, a self-contained `report.html` and
//! `plots/*.svg`. It also shards and merges result sets.
//!
//! This crate only renders: running the grid (mechanisms, policies, the event engine) is the
//! `sim` crate's job, and trace statistics are the `traces` crate's. Rendering is a pure
//! function of [`Results`], so a report regenerated from its `results.json`, or merged from
//! shards, is byte-for-byte the report of the original run.

pub mod content;
pub mod cpu_lane;
pub mod doc;
pub mod flatten;
pub mod metrics;
pub mod output;
pub mod plots;
pub mod results;
pub mod run;
pub mod sizes;
pub mod step_latency;
pub mod text;
pub mod tier_timing;
pub mod union_curve;

pub use output::write_report;
pub use results::{
    BudgetCurve, Results, ResultsError, RunCoords, RunEntry, Shard, TraceInfo, FORMAT,
};
pub use run::{
    Admission, CacheReport, DramMode, RetentionInputs, RunInputs, RunReport, ScheduleReport,
    StepParts, StreamingMetrics, TargetReport, TiersReport, TimingDetail, TimingReport,
};
