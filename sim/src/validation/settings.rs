//! The retention settings a validation records, so a stored replay can be re-priced only
//! under the settings it was measured with.

use crate::cache::{RetentionConfig, Schedule};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The retention settings of a validation, as the flags that give them (JSON
/// `retention_settings`; absent in files written before it, and for streaming).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetentionSettings {
    /// `--evict` name (`lru`).
    pub evict: String,
    /// `--budget` as printed back (`50%`, `192 units`, `3221225472 B`).
    pub budget: String,
    /// `--split`: `global` or `per-layer`.
    pub split: String,
    /// `--semantics`: `group` or `access`.
    pub semantics: String,
    /// `--batch` (1 when not given).
    pub batch: usize,
    /// `--queue`, if given.
    pub queue: Option<usize>,
    /// `--schedule`: `fifo` or `route-aware`.
    pub schedule: String,
}

impl RetentionSettings {
    /// The settings of `r`.
    pub fn of(r: &RetentionConfig) -> RetentionSettings {
        RetentionSettings {
            evict: r.cache.policy.name().to_string(),
            budget: r.cache.budget.to_string(),
            split: r.cache.split.name().to_string(),
            semantics: r.cache.semantics.name().to_string(),
            batch: r.batching.batch,
            queue: r.batching.queue,
            schedule: match r.batching.schedule {
                Schedule::Fifo => "fifo",
                Schedule::RouteAware => "route-aware",
            }
            .to_string(),
        }
    }

    /// As a user would say it: `lru, budget 50%`, then what differs from the defaults
    /// (`, per-layer split`, `, access semantics`, `, batch 4`, `, queue 8, route-aware`).
    pub fn text(&self) -> String {
        let mut s = format!("{}, budget {}", self.evict, self.budget);
        if self.split != "global" {
            let _ = write!(s, ", {} split", self.split);
        }
        if self.semantics != "group" {
            let _ = write!(s, ", {} semantics", self.semantics);
        }
        if self.batch != 1 {
            let _ = write!(s, ", batch {}", self.batch);
        }
        if let Some(q) = self.queue {
            let _ = write!(s, ", queue {q}");
        }
        if self.schedule != "fifo" {
            let _ = write!(s, ", {}", self.schedule);
        }
        s
    }
}

/// The legacy `retention` echo: `{policy:?}@{budget:?}` (the form every earlier file holds,
/// kept so they compare), or `streaming`.
pub fn retention_echo(r: Option<&RetentionConfig>) -> String {
    match r {
        Some(r) => format!("{:?}@{:?}", r.cache.policy, r.cache.budget),
        None => "streaming".into(),
    }
}
