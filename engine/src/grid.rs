//! The run grids of `sim sweep` and `sim compare`: which [`RunConfig`]s a comparison runs and
//! in which fixed order, so rows and report entries are deterministic whatever the thread
//! count.
//!
//! Owned here: the packing axis (chunk sizes x chunk orders), the retention axes (policy x
//! budget x split x batch), the prefetch axis (predictor x window), the sweep's nesting
//! (mechanism outermost) and the comparison's points (streaming, retention and cross-trace
//! runs) with what the report says about each trace. Not here: the flags that give the axes and the output formats (the `sim` binary).

use crate::cache::{Budget, RetentionConfig, Split};
use crate::engine::PredictorKind;
use crate::runner::RunConfig;
use crate::verify::{Acceptance, Stepping};
use policies::mechanisms::{self, ChunkOrder, ProfileStats, SpecError};
use reports::{RunCoords, TraceInfo};
use std::path::Path;
use traces::stats::{StatsAccumulator, TraceStats};
use traces::{PhaseSel, Trace, TraceReader};

/// Chunk sizes of the default packing trade curve (`e1` ... `e32`).
pub const DEFAULT_CHUNK_SIZES: [u32; 8] = [1, 2, 3, 4, 6, 8, 16, 32];

/// Chunk orders of the default packing trade curve.
pub const DEFAULT_CHUNK_ORDERS: [ChunkOrder; 3] =
    [ChunkOrder::Index, ChunkOrder::Hot, ChunkOrder::Coact];

/// Why a grid axis was refused.
#[derive(Debug, thiserror::Error)]
pub enum GridError {
    /// A chunk size of 0 on the packing axis.
    #[error("chunk size 0; N must be at least 1 (e1 is one expert per commit)")]
    ZeroChunk,
    /// A mechanism spec that does not parse.
    #[error("bad mechanism spec `{spec}`")]
    Spec {
        spec: String,
        #[source]
        source: SpecError,
    },
    /// No mechanism at all.
    #[error("no mechanism spec given")]
    NoSpecs,
}

/// The packing axis: `eN:ORDER` for every chunk size, orders innermost.
pub fn chunk_specs(sizes: &[u32], orders: &[ChunkOrder]) -> Result<Vec<String>, GridError> {
    let mut specs = Vec::with_capacity(sizes.len() * orders.len());
    for &n in sizes {
        if n == 0 {
            return Err(GridError::ZeroChunk);
        }
        for o in orders {
            specs.push(format!("e{n}:{}", o.as_str()));
        }
    }
    Ok(specs)
}

/// Mechanism specs canonical and without repeats (`e1:index` and `e1:hot` are both `e1`; the
/// first occurrence keeps its place). Errors: a spec that does not parse, or none at all.
pub fn canonical_specs<S: AsRef<str>>(specs: &[S]) -> Result<Vec<String>, GridError> {
    let mut out: Vec<String> = Vec::new();
    for spec in specs {
        let spec = spec.as_ref();
        let canonical = mechanisms::parse(spec)
            .map_err(|source| GridError::Spec {
                spec: spec.to_string(),
                source,
            })?
            .spec();
        if !out.contains(&canonical) {
            out.push(canonical);
        }
    }
    if out.is_empty() {
        return Err(GridError::NoSpecs);
    }
    Ok(out)
}

/// One point of the prefetch axis: a predictor and its window (prefetch lead, MoE layers).
pub type PrefetchPoint = (PredictorKind, usize);

/// The prefetch axis: every predictor of `predictors` at every window of `windows` (windows
/// innermost), `none` once at window 1 (it prefetches nothing, so its window changes
/// nothing), repeats dropped; `[(none, 1)]` when both lists are empty.
pub fn prefetch_points(predictors: &[PredictorKind], windows: &[usize]) -> Vec<PrefetchPoint> {
    let windows = if windows.is_empty() {
        &[1][..]
    } else {
        windows
    };
    let mut out: Vec<PrefetchPoint> = Vec::new();
    for &k in predictors {
        for &w in windows {
            let p = if k == PredictorKind::None {
                (k, 1)
            } else {
                (k, w)
            };
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    if out.is_empty() {
        out.push((PredictorKind::None, 1));
    }
    out
}

/// True when the prefetch axis is only `none`: the grid then has no prefetch coordinates.
pub fn no_prefetch(points: &[PrefetchPoint]) -> bool {
    points.iter().all(|&(k, _)| k == PredictorKind::None)
}

/// The retention axes of a grid; every list holds at least one value.
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionAxes {
    pub policies: Vec<policies::PolicyKind>,
    pub budgets: Vec<Budget>,
    pub splits: Vec<Split>,
    pub batches: Vec<usize>,
}

impl RetentionAxes {
    /// Every combination, nested policy > budget > split > batch, each `template` with that
    /// policy, budget, split and batch size (its other settings shared).
    pub fn configs(&self, template: &RetentionConfig) -> Vec<RetentionConfig> {
        let mut out = Vec::new();
        for &policy in &self.policies {
            for budget in &self.budgets {
                for &split in &self.splits {
                    for &batch in &self.batches {
                        let mut r = template.clone();
                        r.cache.policy = policy;
                        r.cache.budget = budget.clone();
                        r.cache.split = split;
                        r.batching.batch = batch;
                        out.push(r);
                    }
                }
            }
        }
        out
    }
}

/// The sweep: every spec of `specs` (outermost), times every retention config when
/// `retention` is given, each from `base` (phase, sizes, no timing).
pub fn sweep_grid(
    base: &RunConfig,
    specs: Vec<String>,
    retention: Option<&[RetentionConfig]>,
) -> Vec<RunConfig> {
    specs
        .into_iter()
        .flat_map(|policy| match retention {
            None => vec![RunConfig {
                policy,
                ..base.clone()
            }],
            Some(rs) => rs
                .iter()
                .map(|r| RunConfig {
                    policy: policy.clone(),
                    retention: Some(r.clone()),
                    ..base.clone()
                })
                .collect(),
        })
        .collect()
}

/// Every config of `configs` once per stepping of `steps` (innermost, in their order).
pub fn with_steps(configs: Vec<RunConfig>, steps: &[Stepping]) -> Vec<RunConfig> {
    configs
        .into_iter()
        .flat_map(|c| {
            steps.iter().map(move |&stepping| RunConfig {
                stepping,
                ..c.clone()
            })
        })
        .collect()
}

/// One point of a comparison: indices into its traces, the report's coordinates, the
/// retention config (`None`: streaming) and the prefetch point.
#[derive(Clone, Debug)]
pub struct ComparePoint {
    pub trace: usize,
    pub profile: usize,
    pub coords: RunCoords,
    pub retention: Option<RetentionConfig>,
    pub prefetch: PrefetchPoint,
    pub stepping: Stepping,
}

/// The comparison's axes.
pub struct CompareAxes<'a> {
    /// Trace names (file stems), in the order given.
    pub traces: &'a [String],
    /// Mechanism specs as given.
    pub mechanisms: &'a [String],
    /// The retention grid, in its report order.
    pub retention: &'a [RetentionConfig],
    /// Whether the batch size is an axis (the coordinates then name it).
    pub batch_given: bool,
    /// Whether to add the cross-trace stability runs (with more than one trace).
    pub cross_trace: bool,
    /// The prefetch axis ([`prefetch_points`]); only `none`: no coordinates.
    pub prefetch: &'a [PrefetchPoint],
    /// The stepping axis (K x P), innermost; only the off stepping: no coordinates.
    pub steps: &'a [Stepping],
}

/// The coordinates of stepping `s` on a stepping axis: (verify, acceptance, prefill chunk).
fn step_coords(s: &Stepping) -> (Option<u32>, Option<String>, Option<u32>) {
    let acceptance = (s.verify > 0).then(|| match s.acceptance {
        Acceptance::Probability(p) => p.to_string(),
        Acceptance::Fixed(n) => format!("N={n}"),
    });
    (Some(s.verify), acceptance, s.prefill_chunk)
}

/// The comparison grid in its fixed order: per evaluated trace, the streaming run of every
/// mechanism, then per mechanism its retention runs; then the cross-trace runs (mechanisms
/// that order units by a profile trace, the policies that pin by one, and every run of a
/// predictor that learns from one), on every other trace. The prefetch axis, then the
/// stepping axis, are innermost. Errors: a mechanism spec that does not parse.
pub fn compare_grid(a: &CompareAxes) -> Result<Vec<ComparePoint>, GridError> {
    let coords = !no_prefetch(a.prefetch);
    let step_axis = a.steps.iter().any(|s| !s.is_off());
    let point = |t: usize, p: usize, mech: &str, r: Option<&RetentionConfig>, pt: AxisPoint| {
        let (pf, st) = pt;
        let (verify, acceptance, prefill_chunk) = match step_axis {
            true => step_coords(&st),
            false => (None, None, None),
        };
        ComparePoint {
            trace: t,
            profile: p,
            coords: RunCoords {
                trace: a.traces[t].clone(),
                profile_trace: a.traces[p].clone(),
                mechanism: mech.to_string(),
                evict: r.map(|r| r.cache.policy.name().to_string()),
                budget: r.map(|r| r.cache.budget.to_string()),
                split: r.map(|r| r.cache.split.name().to_string()),
                batch: r.filter(|_| a.batch_given).map(|r| r.batching.batch as u32),
                predictor: coords.then(|| pf.0.name().to_string()),
                window: coords.then_some(pf.1),
                verify,
                acceptance,
                prefill_chunk,
                cpu_experts: None,
                dtype: None,
            },
            retention: r.cloned(),
            prefetch: pf,
            stepping: st,
        }
    };
    let off = [Stepping::default()];
    let steps = if a.steps.is_empty() {
        &off[..]
    } else {
        a.steps
    };
    let axis: Vec<AxisPoint> = a
        .prefetch
        .iter()
        .flat_map(|&pf| steps.iter().map(move |&st| (pf, st)))
        .collect();
    let mut pts = Vec::new();
    for t in 0..a.traces.len() {
        for m in a.mechanisms {
            pts.extend(axis.iter().map(|&pt| point(t, t, m, None, pt)));
        }
        for m in a.mechanisms {
            for r in a.retention {
                pts.extend(axis.iter().map(|&pt| point(t, t, m, Some(r), pt)));
            }
        }
    }
    if a.traces.len() < 2 || !a.cross_trace {
        return Ok(pts);
    }
    let mut profiled = Vec::with_capacity(a.mechanisms.len());
    for m in a.mechanisms {
        let mech = mechanisms::parse(m).map_err(|source| GridError::Spec {
            spec: m.clone(),
            source,
        })?;
        profiled.push(mech.needs_profile());
    }
    // a run is cross-traced when its mechanism or policy uses the profile, or its predictor
    // learns from it
    let uses = |base: bool, pt: &AxisPoint| base || pt.0 .0.learns();
    for t in 0..a.traces.len() {
        for p in (0..a.traces.len()).filter(|&p| p != t) {
            for (m, &prof) in a.mechanisms.iter().zip(&profiled) {
                let pts_ = axis.iter().filter(|pt| uses(prof, pt));
                pts.extend(pts_.map(|&pt| point(t, p, m, None, pt)));
            }
            for m in a.mechanisms {
                for r in a.retention {
                    let pts_ = axis
                        .iter()
                        .filter(|pt| uses(r.cache.policy.needs_profile(), pt));
                    pts.extend(pts_.map(|&pt| point(t, p, m, Some(r), pt)));
                }
            }
        }
    }
    Ok(pts)
}

/// The reason a run does not fit under the admission cap, when that is why it failed (not
/// even one sequence is admitted); `None` for any other error. Grids mark such a cell
/// "does not fit" and go on.
pub fn does_not_fit(e: &anyhow::Error) -> Option<&crate::engine::NoSequenceFits> {
    e.chain()
        .find_map(|c| c.downcast_ref::<crate::engine::NoSequenceFits>())
}

/// One point of the innermost axes: the prefetch point, then the stepping.
type AxisPoint = (PrefetchPoint, Stepping);

/// What the report says about one trace, computed from the loaded trace, and a note when its
/// statistics could not be computed (they are context for the reader: the report leaves them
/// out, and the note says so instead of dropping them silently).
pub fn trace_info(
    name: &str,
    file: &str,
    trace: &Trace,
    phase: PhaseSel,
) -> (TraceInfo, Option<String>) {
    // selection counts per key: the same pass the hot/coact chunk orders use
    let per_key = ProfileStats::new(trace, phase, false).counts;
    let stats = traces::stats::trace_stats(trace, phase).map_err(|e| e.to_string());
    info_of(name, file, trace, &per_key, stats, phase)
}

/// [`trace_info`] of the trace file `path` from one streaming pass (the selection counts and
/// the statistics together), the trace never loaded: memory is the statistics' per-expert
/// state and one block of the file. The error is the file's (a record or checksum that does
/// not check out).
pub fn trace_info_file(
    name: &str,
    path: &Path,
    phase: PhaseSel,
) -> anyhow::Result<(TraceInfo, Option<String>)> {
    crate::runner::require_trace_file(path)?;
    let mut reader = TraceReader::open(path)?;
    let skeleton = crate::bounded::header_only(reader.header().clone());
    let header = &skeleton.header;
    let ks = skeleton.keyspace();
    let mut counts = crate::bounded::profile::KeyCounts::new(&ks);
    // the statistics' state follows the header's geometry: refuse it as `sim trace stats` does
    let mut acc = StatsAccumulator::checked(header, phase).map_err(|e| e.to_string());
    while let Some(tok) = reader.next_token()? {
        if !phase.includes(tok.pos.phase) {
            continue;
        }
        counts.step(tok.ids);
        // the first error is the statistics' (the in-memory pass stops there too)
        if let Ok(a) = &mut acc {
            if let Err(e) = a.push_token(tok.pos.sequence, tok.pos.phase, tok.ids) {
                acc = Err(e.to_string());
            }
        }
    }
    let stats = acc.and_then(|a| a.finish().map_err(|e| e.to_string()));
    let per_key = counts.finish().counts;
    let file = path.display().to_string();
    Ok(info_of(name, &file, &skeleton, &per_key, stats, phase))
}

/// The report's words on `trace` (whose header is all it reads) from its selection counts
/// per key `per_key` and its statistics (or why there are none).
fn info_of(
    name: &str,
    file: &str,
    trace: &Trace,
    per_key: &[u64],
    stats: Result<TraceStats, String>,
    phase: PhaseSel,
) -> (TraceInfo, Option<String>) {
    // split by MoE layer
    let header = &trace.header;
    let counts: Vec<Vec<u64>> = trace
        .keyspace()
        .offsets
        .windows(2)
        .map(|w| per_key[w[0] as usize..w[1] as usize].to_vec())
        .collect();
    let accesses = counts.iter().flatten().sum();
    let stats = stats.and_then(|s| serde_json::to_value(s).map_err(|e| e.to_string()));
    let note = stats
        .as_ref()
        .err()
        .map(|e| format!("warning: no statistics for trace `{file}` in the report: {e}"));
    let info = TraceInfo {
        name: name.to_string(),
        file: file.to_string(),
        model: header.model.clone(),
        provenance: header.provenance.clone(),
        sequences: header.sequences.clone(),
        phase: phase.as_str().to_string(),
        tokens: trace.total_tokens(phase) as u64,
        accesses,
        expert_counts: counts,
        stats: stats.ok(),
    };
    (info, note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Batching, CacheConfig, Schedule, Semantics};
    use policies::PolicyKind;

    /// The counts of `trace_info` against a naive walk over every selection.
    #[test]
    fn trace_info_counts_every_selection_once() {
        let trace = traces::read_bytes(crate::runner::EMBEDDED_PROSE, "prose").unwrap();
        let ks = trace.keyspace();
        for phase in [PhaseSel::Decode, PhaseSel::Prefill, PhaseSel::All] {
            let mut naive: Vec<Vec<u64>> =
                ks.experts.iter().map(|&e| vec![0; e as usize]).collect();
            let mut tokens = 0u64;
            for s in 0..trace.sequences.len() {
                for &ph in phase.phases() {
                    for t in 0..trace.tokens(s, ph) {
                        tokens += 1;
                        for (m, c) in naive.iter_mut().enumerate() {
                            for &e in trace.selection(&ks, s, ph, t, m) {
                                c[e as usize] += 1;
                            }
                        }
                    }
                }
            }
            let (info, _) = trace_info("prose", "prose.bin", &trace, phase);
            assert!(tokens > 0, "{phase:?}");
            assert_eq!(info.tokens, tokens, "{phase:?}");
            assert_eq!(info.expert_counts, naive, "{phase:?}");
            assert_eq!(info.accesses, naive.iter().flatten().sum::<u64>());
        }
    }

    fn retention(policy: PolicyKind, pct: u128) -> RetentionConfig {
        RetentionConfig {
            cache: CacheConfig {
                policy,
                budget: Budget::Fraction { num: pct, den: 100 },
                split: Split::Global,
                semantics: Semantics::Group,
                dram: None,
                seed: 0,
            },
            batching: Batching {
                batch: 1,
                queue: None,
                schedule: Schedule::Fifo,
                ..Batching::default()
            },
            target: None,
        }
    }

    #[test]
    fn packing_axis_is_sizes_times_orders_canonical_and_deduplicated() {
        let specs = chunk_specs(&[1, 4], &[ChunkOrder::Index, ChunkOrder::Hot]).unwrap();
        assert_eq!(specs, ["e1:index", "e1:hot", "e4:index", "e4:hot"]);
        // e1 has one order only: e1:index and e1:hot are both `e1`
        assert_eq!(
            canonical_specs(&specs).unwrap(),
            ["e1", "e4:index", "e4:hot"]
        );
        assert!(matches!(
            chunk_specs(&[2, 0], &[ChunkOrder::Hot]),
            Err(GridError::ZeroChunk)
        ));
        assert!(matches!(
            canonical_specs::<&str>(&[]),
            Err(GridError::NoSpecs)
        ));
        assert!(matches!(
            canonical_specs(&["e2:sideways"]),
            Err(GridError::Spec { .. })
        ));
    }

    #[test]
    fn retention_axes_nest_policy_budget_split_batch() {
        let axes = RetentionAxes {
            policies: vec![PolicyKind::Belady, PolicyKind::Lru],
            budgets: vec![Budget::Units(4), Budget::Units(8)],
            splits: vec![Split::Global],
            batches: vec![1, 2],
        };
        let got: Vec<(PolicyKind, String, usize)> = axes
            .configs(&retention(PolicyKind::Fifo, 50))
            .iter()
            .map(|r| (r.cache.policy, r.cache.budget.to_string(), r.batching.batch))
            .collect();
        let b = |n: u64| Budget::Units(n).to_string();
        let (belady, lru) = (PolicyKind::Belady, PolicyKind::Lru);
        assert_eq!(
            got,
            [
                (belady, b(4), 1),
                (belady, b(4), 2),
                (belady, b(8), 1),
                (belady, b(8), 2),
                (lru, b(4), 1),
                (lru, b(4), 2),
                (lru, b(8), 1),
                (lru, b(8), 2),
            ]
        );
    }

    #[test]
    fn compare_grid_adds_cross_trace_runs_for_profile_users_only() {
        let traces = ["a".to_string(), "b".to_string()];
        let mechanisms = ["e1".to_string(), "e2:hot".to_string()];
        let retention = [
            retention(PolicyKind::Lru, 25),
            retention(PolicyKind::StaticPin, 25),
        ];
        let axes = CompareAxes {
            traces: &traces,
            mechanisms: &mechanisms,
            retention: &retention,
            batch_given: false,
            cross_trace: true,
            prefetch: &[(PredictorKind::None, 1)],
            steps: &[],
        };
        let label = |p: &ComparePoint| {
            format!(
                "{}<{} {} {}",
                p.coords.trace,
                p.coords.profile_trace,
                p.coords.mechanism,
                p.coords.evict.as_deref().unwrap_or("-")
            )
        };
        let got: Vec<String> = compare_grid(&axes).unwrap().iter().map(label).collect();
        // per trace: 2 streaming runs, then 2 x 2 retention runs; then per (trace, other
        // trace): e2:hot (orders by a profile) streaming, and static-pin for both mechanisms
        let mut want = Vec::new();
        for t in ["a", "b"] {
            want.push(format!("{t}<{t} e1 -"));
            want.push(format!("{t}<{t} e2:hot -"));
            for m in ["e1", "e2:hot"] {
                want.push(format!("{t}<{t} {m} lru"));
                want.push(format!("{t}<{t} {m} static-pin"));
            }
        }
        for (t, p) in [("a", "b"), ("b", "a")] {
            want.push(format!("{t}<{p} e2:hot -"));
            want.push(format!("{t}<{p} e1 static-pin"));
            want.push(format!("{t}<{p} e2:hot static-pin"));
        }
        assert_eq!(got, want);
        let one = CompareAxes {
            cross_trace: false,
            ..axes
        };
        assert_eq!(compare_grid(&one).unwrap().len(), 12);
    }
}
