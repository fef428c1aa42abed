//! The retention settings a validation records, so a stored replay can be re-priced only
//! under the settings it was measured with.

use crate::cache::{Budget, RetentionConfig, Schedule};
use policies::PolicyKind;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::path::{Component, Path, PathBuf};

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

/// The policy and budget of a legacy `retention` echo (`Lru@Fraction { num: 50, den: 100 }`,
/// `Belady@Units(192)`, `Fifo@Bytes(1073741824)`); `None` for `streaming` or a form this build
/// does not write.
pub fn parse_retention_echo(echo: &str) -> Option<(PolicyKind, Budget)> {
    let (policy, budget) = echo.split_once('@')?;
    let kind = PolicyKind::ALL
        .into_iter()
        .find(|k| format!("{k:?}") == policy)?;
    let num = |s: &str| -> Option<u128> { s.trim().parse().ok() };
    let budget = if let Some(inner) = budget
        .strip_prefix("Fraction { num: ")
        .and_then(|b| b.strip_suffix(" }"))
    {
        let (n, d) = inner.split_once(", den: ")?;
        Budget::Fraction {
            num: num(n)?,
            den: num(d)?,
        }
    } else if let Some(n) = budget
        .strip_prefix("Units(")
        .and_then(|b| b.strip_suffix(')'))
    {
        Budget::Units(num(n)? as u64)
    } else {
        let n = budget.strip_prefix("Bytes(")?.strip_suffix(')')?;
        Budget::Bytes(num(n)? as u64)
    };
    Some((kind, budget))
}

/// Whether trace label `now` (this run's trace) names the file a stored validation recorded
/// as `stored`: the same label, or one path ending with the other (component-wise, `./`
/// dropped; `now` also resolved to its absolute path), so `traces/x.bin`, `./traces/x.bin`
/// and `/repo/traces/x.bin` agree but `traces/y.bin` does not.
pub fn same_trace(stored: &str, now: &str) -> bool {
    if stored == now {
        return true;
    }
    let plain = |p: &Path| -> PathBuf {
        p.components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect()
    };
    let s = plain(Path::new(stored));
    let n = plain(Path::new(now));
    let n_abs = std::fs::canonicalize(now).unwrap_or_else(|_| n.clone());
    let climbs = |p: &Path| p.components().any(|c| matches!(c, Component::ParentDir));
    if s.as_os_str().is_empty() || n.as_os_str().is_empty() {
        return false;
    }
    (!climbs(&s) && (n.ends_with(&s) || n_abs.ends_with(&s))) || (!climbs(&n) && s.ends_with(&n))
}
