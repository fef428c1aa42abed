//! What a timed replay reports: the `timing` block (exact keys) and the details beside it.
//! The types live in `reports::run`, which reads them back from result files.

pub use reports::run::{StepParts, TimingDetail, TimingReport};
