//! The `results.json` document: the inputs of a comparison (traces, profile, grid) and every
//! run's full `sim run --json` object, plus sharding and merging.

use crate::run::{CacheReport, RunReport, StreamingMetrics, TimingDetail, TimingReport};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use traces::{ModelSpec, Provenance, SequenceInfo};

/// Value of the `format` key of every `results.json` this crate writes or reads.
pub const FORMAT: &str = "moe-sim-results/1";

/// Errors reading, checking or merging results.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("{path}: cannot read")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a results.json written by `sim compare`: {msg}")]
    Parse { path: String, msg: String },
    #[error("cannot merge: {0}")]
    Merge(String),
}

/// Everything a report is rendered from. Rendering is a pure function of this value, which is
/// what makes `sim report DIR` and merged shards reproduce the original output byte for byte.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Always [`FORMAT`].
    pub format: String,
    /// The comparison's parameters as `sim compare` resolved them (mechanisms, policies,
    /// budgets, batches, model and hardware options). Free-form; echoed in the report.
    pub grid: Value,
    /// Every trace named by the grid (evaluated or used as a profile trace), in `--trace` order.
    pub traces: Vec<TraceInfo>,
    /// The hardware profile (its JSON) when timing was simulated, else `None`.
    pub profile: Option<Value>,
    /// Number of runs in the whole (unsharded) grid.
    pub total_runs: usize,
    /// Present only in the output of `sim compare --shard i/n`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// The runs, in grid order (`run` ascending).
    pub runs: Vec<RunEntry>,
    /// Exact page-in curves of the stack policies (LRU, Belady/MIN) over every budget, per
    /// trace, mechanism and split: what the report's budget plot draws when time is not
    /// simulated. Left out when none was recorded (timed or sharded comparisons, grids with
    /// a batch, stepping or dtype axis), so results without them read as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curves: Vec<BudgetCurve>,
}

/// The most budgets a [`BudgetCurve`] keeps: its points are evenly spaced over the bank, so
/// a plot 900 px wide draws one point per 3.5 px or closer (a curve of a smaller bank keeps
/// every budget).
pub const CURVE_POINTS: usize = 256;

/// One stack policy's exact page-ins at budgets from one unit to the whole bank, recorded
/// in one pass over the trace (`sim curve`'s method; docs/DESIGN.md, "Exact curves").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetCurve {
    /// The evaluated trace (its own profile).
    pub trace: String,
    pub mechanism: String,
    /// `global` or `per-layer`, as the grid's `split`.
    pub split: String,
    /// `lru` or `belady`.
    pub evict: String,
    /// Units in the bank (the largest budget).
    pub units: u64,
    /// (budget in units, page-ins at it), budgets ascending: at most [`CURVE_POINTS`] of
    /// them, 1 unit and the whole bank included.
    pub points: Vec<(u64, u64)>,
}

impl BudgetCurve {
    /// Budgets evenly spaced from 1 to `units` (all of them for a bank of at most
    /// [`CURVE_POINTS`] units), ascending and distinct.
    pub fn sample_budgets(units: u64) -> Vec<u64> {
        let n = CURVE_POINTS as u64;
        if units <= n {
            return (1..=units).collect();
        }
        // 1 + round(i (units - 1) / (n - 1)) for i in 0..n: strictly increasing, as
        // (units - 1) / (n - 1) > 1
        (0..n)
            .map(|i| 1 + (i * (units - 1) + (n - 1) / 2) / (n - 1))
            .collect()
    }
}

/// Which deterministic slice of the grid a sharded result holds: runs whose index `r`
/// satisfies `r % count == index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based slice index, below `count`.
    pub index: usize,
    /// Number of slices (at least 1).
    pub count: usize,
}

impl Shard {
    /// Parse `i/n` (0-based `i < n`), as given to `--shard`.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let err = || {
            format!("--shard {s:?}: expected i/n with 0 <= i < n, e.g. 0/4 (slices are 0-based, like $SLURM_ARRAY_TASK_ID from 0 or $JOB_COMPLETION_INDEX)")
        };
        let (i, n) = s.split_once('/').ok_or_else(err)?;
        let index: usize = i.trim().parse().map_err(|_| err())?;
        let count: usize = n.trim().parse().map_err(|_| err())?;
        if count == 0 || index >= count {
            return Err(err());
        }
        Ok(Shard { index, count })
    }

    /// True when grid run `run` belongs to this slice.
    pub fn holds(&self, run: usize) -> bool {
        run % self.count == self.index
    }
}

/// One trace as the report describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceInfo {
    /// Short name used in the grid and in file names (the file stem, e.g. `prose`).
    pub name: String,
    /// Path as given on the command line.
    pub file: String,
    /// The model from the trace header.
    pub model: ModelSpec,
    /// Where the trace came from, from its header.
    pub provenance: Provenance,
    /// The header's sequences, in order.
    pub sequences: Vec<SequenceInfo>,
    /// Phase the runs looked at (`decode`, `prefill`, `all`).
    pub phase: String,
    /// Tokens in that phase, over all sequences.
    pub tokens: u64,
    /// Selections (expert accesses) in that phase.
    pub accesses: u64,
    /// Selection count of every expert, per MoE layer: `expert_counts[m][e]`.
    pub expert_counts: Vec<Vec<u64>>,
    /// The `sim trace stats --json` object for that phase, when the trace statistics exist.
    pub stats: Option<Value>,
}

impl TraceInfo {
    /// Distinct (layer, expert) keys of the MoE layers.
    pub fn num_keys(&self) -> usize {
        self.expert_counts.iter().map(Vec::len).sum()
    }

    /// Mean top-k over the MoE layers (selections per layer per token).
    pub fn mean_top_k(&self) -> Option<f64> {
        let moe: Vec<_> = self.model.layers.iter().filter(|l| l.is_moe()).collect();
        if moe.is_empty() {
            return None;
        }
        Some(moe.iter().map(|l| l.top_k as f64).sum::<f64>() / moe.len() as f64)
    }
}

/// Where a run sits in the grid. Flattened into CSV columns `grid.trace`, `grid.mechanism`, ...
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCoords {
    /// Name of the evaluated trace.
    pub trace: String,
    /// Name of the trace used for `:hot`/`:coact` packing and pinning; equal to `trace`
    /// except in cross-trace stability runs.
    pub profile_trace: String,
    /// Mechanism spec as given (`e2:hot`, `region:64`, `os4k`).
    pub mechanism: String,
    /// Eviction policy, `None` in the streaming regime.
    pub evict: Option<String>,
    /// Budget as given (`25%`, `120`, `3GiB`), `None` in the streaming regime.
    pub budget: Option<String>,
    /// How the budget is shared (`global`, `per-layer`), `None` in the streaming regime.
    pub split: Option<String>,
    /// Batch size, `None` when the grid did not vary it (the run's default).
    pub batch: Option<u32>,
    /// Prefetch predictor, `None` when the grid had no prefetch axis (no prefetch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictor: Option<String>,
    /// Prefetch window (MoE layers), beside `predictor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// Drafted tokens verified per decode step, `None` when the grid had no stepping axis
    /// (`--verify`, `--prefill-chunk`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<u32>,
    /// How drafts were accepted, beside `verify` with K > 0: the probability as given
    /// (`0.7`), or `N=1` for a fixed count per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<String>,
    /// Prompt tokens per prefill step, with `--prefill-chunk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_chunk: Option<u32>,
    /// Where routed experts ran (`--cpu-experts`: `none`, `all`, `layers:8`, ...), `None`
    /// when the grid had no placement axis (all on the GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_experts: Option<String>,
    /// Weight dtype of the experts (`sim compare --dtype int4,bf16`), `None` when the grid
    /// had no dtype axis (one dtype or none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
}

impl RunCoords {
    /// True for a cross-trace stability run (packed or pinned on another trace).
    pub fn is_cross(&self) -> bool {
        self.trace != self.profile_trace
    }
}

/// One run: its grid index and coordinates, then the run's full `sim run --json` object,
/// whose top-level keys (`inputs`, `streaming`, `cache`, `timing`, ...) sit beside `run` and
/// `grid` in the JSON.
///
/// The run object is held typed: serializing a [`RunReport`] read back from `results.json`
/// gives the same bytes (the key order is the field order, absent blocks stay absent, and
/// floats parse exactly), which is what lets merged shards equal the unsharded run. A key the
/// run object does not define is not kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEntry {
    /// Index in the whole grid, from 0.
    pub run: usize,
    /// The run's coordinates in the grid (trace, mechanism, policy, budget, ...).
    pub grid: RunCoords,
    /// Why the cell does not fit under the admission cap (not even one sequence is admitted):
    /// its `result` then has no timing and an `admission` block with 0 admitted. Absent for
    /// cells that fit, so results written before it existed read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub does_not_fit: Option<String>,
    /// The `sim run --json` object.
    #[serde(flatten)]
    pub result: RunReport,
}

impl RunEntry {
    /// The `streaming` block.
    pub fn streaming(&self) -> Option<&StreamingMetrics> {
        self.result.streaming.as_ref()
    }

    /// The `cache` block (retention runs).
    pub fn cache(&self) -> Option<&CacheReport> {
        self.result.cache.as_ref()
    }

    /// The `timing` block (runs on a hardware profile).
    pub fn timing(&self) -> Option<&TimingReport> {
        self.result.timing.as_ref()
    }

    /// The `timing_detail` block (runs on a hardware profile).
    pub fn timing_detail(&self) -> Option<&TimingDetail> {
        self.result.timing_detail.as_ref()
    }
}

impl Results {
    /// Serialize as `results.json` text (pretty, trailing newline).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("results serialize to JSON");
        s.push('\n');
        s
    }

    /// Parse and check `results.json` text; `path` names the file in errors.
    pub fn from_json(text: &str, path: &str) -> Result<Results, ResultsError> {
        let r: Results = serde_json::from_str(text).map_err(|e| ResultsError::Parse {
            path: path.to_string(),
            msg: e.to_string(),
        })?;
        r.check().map_err(|msg| ResultsError::Parse {
            path: path.to_string(),
            msg,
        })?;
        Ok(r)
    }

    /// Read and check a `results.json` file.
    pub fn load(path: &std::path::Path) -> Result<Results, ResultsError> {
        let text = std::fs::read_to_string(path).map_err(|source| ResultsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// Check the invariants: format, runs ascending and inside the grid, shard membership,
    /// every run naming a known trace.
    pub fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "format is {:?}, this sim reads {FORMAT:?}",
                self.format
            ));
        }
        if let Some(s) = self.shard {
            if s.count == 0 || s.index >= s.count {
                return Err(format!(
                    "shard {}/{} is not a slice of the grid (expected i/n with 0 <= i < n)",
                    s.index, s.count
                ));
            }
        }
        let mut prev = None;
        for r in &self.runs {
            if r.run >= self.total_runs {
                return Err(format!(
                    "run {} is outside the grid of {} runs",
                    r.run, self.total_runs
                ));
            }
            if prev.is_some_and(|p| p >= r.run) {
                return Err(format!("runs are not in ascending order at run {}", r.run));
            }
            prev = Some(r.run);
            if let Some(s) = self.shard {
                if !s.holds(r.run) {
                    return Err(format!(
                        "run {} does not belong to shard {}/{}",
                        r.run, s.index, s.count
                    ));
                }
            }
            for t in [&r.grid.trace, &r.grid.profile_trace] {
                if !self.traces.iter().any(|ti| &ti.name == t) {
                    return Err(format!("run {} names unknown trace {t:?}", r.run));
                }
            }
        }
        // Every run of the slice is present (the runs are ascending and members, so the count
        // decides): runs r < total_runs with r mod n = i for shard i/n, all of them unsharded.
        let expected = match self.shard {
            Some(s) if s.index >= self.total_runs => 0,
            Some(s) => (self.total_runs - s.index - 1) / s.count + 1,
            None => self.total_runs,
        };
        if self.runs.len() != expected {
            return Err(match self.shard {
                Some(s) => format!(
                    "{} runs present, shard {}/{} of the {}-run grid has {expected}",
                    self.runs.len(),
                    s.index,
                    s.count,
                    self.total_runs
                ),
                None => format!(
                    "{} runs present, the grid has {}",
                    self.runs.len(),
                    self.total_runs
                ),
            });
        }
        Ok(())
    }

    /// The same results without the shard mark, for comparing headers of shards.
    fn header_eq(&self, other: &Results) -> bool {
        self.format == other.format
            && self.grid == other.grid
            && self.traces == other.traces
            && self.profile == other.profile
            && self.total_runs == other.total_runs
    }

    /// Merge the outputs of `sim compare --shard i/n` for every i into the unsharded result.
    ///
    /// Errors when the parts come from different grids, a slice is missing or repeated, or a
    /// part is not a shard.
    pub fn merge(parts: Vec<Results>) -> Result<Results, ResultsError> {
        let first = parts
            .first()
            .ok_or_else(|| ResultsError::Merge("no result directories given".into()))?;
        let count = match first.shard {
            Some(s) => s.count,
            None => {
                return Err(ResultsError::Merge(
                    "the first directory is not a shard (it has no `shard` key); it is complete already".into(),
                ))
            }
        };
        // Indices seen, not a vector of `count` flags: a damaged file's count can be huge.
        let mut seen = std::collections::BTreeSet::new();
        for p in &parts {
            if !p.header_eq(first) {
                return Err(ResultsError::Merge(
                    "the shards come from different comparisons (grid, traces, profile or run count differ); run every shard with the same arguments".into(),
                ));
            }
            let s = p.shard.ok_or_else(|| {
                ResultsError::Merge("a directory is not a shard (it has no `shard` key)".into())
            })?;
            if s.count != count {
                return Err(ResultsError::Merge(format!(
                    "shard counts differ: {}/{} next to .../{count}",
                    s.index, s.count
                )));
            }
            if !seen.insert(s.index) {
                return Err(ResultsError::Merge(format!(
                    "shard {}/{count} is given twice",
                    s.index
                )));
            }
        }
        // At most parts.len() + 1 indices are tried: `seen` holds one per part.
        if let Some(missing) = (0..count).find(|i| !seen.contains(i)) {
            return Err(ResultsError::Merge(format!(
                "shard {missing}/{count} is missing; merge needs all {count} slices"
            )));
        }
        let mut merged = first.clone();
        merged.shard = None;
        merged.curves.clear();
        merged.runs = parts.into_iter().flat_map(|p| p.runs).collect();
        merged.runs.sort_by_key(|r| r.run);
        merged.check().map_err(ResultsError::Merge)?;
        Ok(merged)
    }
}
