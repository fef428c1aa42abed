//! The cache regime: retention of units across tokens under a VRAM budget.
//!
//! Builds the access stream of groups from a trace and a mechanism's [`UnitMap`]
//! ([`stream`]), batches and schedules requests ([`schedule`]), resolves budgets
//! ([`budget`]), and drives the retention policies of `policies::retention` over the stream
//! ([`driver`]), optionally with a DRAM tier behind VRAM ([`tiers`]). Definitions follow
//! docs/DESIGN.md ("cache regime", "tiers", "batching") and policies/RETENTION.md. This module does
//! not price time: the discrete-event engine drives [`CacheSim`] step by step for that.

pub mod budget;
pub mod concrete;
pub mod continuous;
pub mod driver;
pub mod schedule;
pub mod stream;
pub mod target;
pub mod tiers;

pub use budget::Budget;
pub use driver::{CacheReport, CacheSim, GroupOutcome, Semantics, Split};
pub use schedule::{Schedule, ScheduleReport};
pub use stream::{AccessStream, ProfileStats, Request};
pub use target::TargetReport;
pub use tiers::{DramConfig, DramMode, TiersReport};

use crate::verify::Stepping;
use policies::retention::{self, EvictionPolicy, PolicyKind, PolicySetup};
use policies::UnitMap;
use traces::{KeySpace, PhaseSel, Trace};

/// Errors of the cache regime; each message says what was wrong and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A budget of 0, above the bank, or unparseable.
    #[error("{0}")]
    Budget(String),
    /// A profile trace whose model geometry differs from the evaluated trace.
    #[error("{0}")]
    Geometry(String),
    /// Any other bad input (a policy's setup, a stream too long).
    #[error("{0}")]
    Input(String),
    /// A DRAM tier budget of 0, above the bank, or unparseable (the message says which).
    #[error("DRAM tier: {0}")]
    DramBudget(String),
    /// A batch of 0 requests.
    #[error("a batch of 0: a batch holds at least one request")]
    BatchZero,
    /// A scheduler queue shorter than the batch it picks from it.
    #[error("a queue of {queue} is smaller than the batch of {batch}: the scheduler picks a batch among the queue, so give a queue at least as long as the batch")]
    QueueBelowBatch { queue: usize, batch: usize },
    /// A per-layer budget split over a mechanism whose units span layers.
    #[error("a per-layer split needs units inside one layer, but unit {unit} of `{spec}` spans MoE layers {first}..={last}; split the budget globally or use a per-expert mechanism (e1, eN, os*)")]
    SplitSpansLayers {
        unit: usize,
        spec: String,
        first: u32,
        last: u32,
    },
    /// A tokens-per-second target or link bandwidth that is not a positive number.
    #[error(
        "the target of {target} tokens/s and the link of {link_gbps} GB/s must be positive numbers"
    )]
    TargetNotPositive { target: f64, link_gbps: f64 },
}

/// Everything that selects one cache-regime run besides the stream.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CacheConfig {
    pub policy: PolicyKind,
    pub budget: Budget,
    pub split: Split,
    pub semantics: Semantics,
    /// DRAM tier: its budget (same syntax as the VRAM budget, over the same bank) and mode.
    pub dram: Option<DramConfig>,
    /// Seed of randomised policies.
    pub seed: u64,
}

/// The result of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheOutcome {
    pub cache: CacheReport,
    pub tiers: Option<TiersReport>,
}

/// A trace prepared for cache-regime runs: the batched access stream, its next uses (for
/// Belady), the profile statistics (for the pinning policies) and the schedule summary.
#[derive(Clone, Debug)]
pub struct Workload {
    pub stream: AccessStream,
    pub next_use: Vec<u32>,
    pub profile: ProfileStats,
    /// Present when a queue (`--queue`) was given.
    pub schedule: Option<ScheduleReport>,
}

/// Batching options: sequences per step, the scheduler's queue, and how each sequence's
/// steps take tokens (verified drafts, prompt chunks: [`Stepping`]).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Batching {
    pub batch: usize,
    pub queue: Option<usize>,
    pub schedule: Schedule,
    #[serde(skip_serializing_if = "Stepping::is_off")]
    pub stepping: Stepping,
    /// Where the steps come from (`--batching`): round-robin batches of `batch` (the
    /// default), or forward passes, each one step holding exactly its rows of the selected
    /// phases; with passes, `batch`, `queue`, `schedule` and `stepping` are unused.
    #[serde(skip_serializing_if = "StepSource::is_fixed")]
    pub source: StepSource,
}

/// Where a retention run's steps come from (`--batching`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepSource {
    /// Round-robin batches of `batch` requests (`--batching fixed`).
    #[default]
    Fixed,
    /// The trace's recorded forward passes (`--batching recorded`).
    Recorded,
    /// The passes of a continuous-batching scheduler (`--batching continuous`).
    Continuous(continuous::Continuous),
}

impl StepSource {
    /// Round-robin batches (what every run was before passes).
    pub fn is_fixed(&self) -> bool {
        *self == StepSource::Fixed
    }

    /// The name `--batching` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            StepSource::Fixed => "fixed",
            StepSource::Recorded => "recorded",
            StepSource::Continuous(_) => "continuous",
        }
    }
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            batch: 1,
            queue: None,
            schedule: Schedule::Fifo,
            stepping: Stepping::default(),
            source: StepSource::Fixed,
        }
    }
}

/// Check that a profile trace has the evaluated trace's geometry (MoE layers, experts and
/// top-k per layer), so the same unit map applies to both.
pub fn check_same_geometry(evaluated: &KeySpace, profile: &KeySpace) -> Result<(), CacheError> {
    let shape = |k: &KeySpace| {
        format!(
            "{} MoE layers, experts {:?}, top-k {:?}",
            k.num_moe_layers(),
            dedup(&k.experts),
            dedup(&k.top_k)
        )
    };
    fn dedup(v: &[u16]) -> Vec<u16> {
        let mut d = v.to_vec();
        d.dedup();
        d
    }
    if evaluated.experts != profile.experts || evaluated.top_k != profile.top_k {
        return Err(CacheError::Geometry(format!(
            "the profile trace has a different geometry ({}) than the evaluated trace ({}); profile with a trace of the same model",
            shape(profile),
            shape(evaluated)
        )));
    }
    Ok(())
}

/// Run every configuration of `cfgs` on one workload, in parallel (rayon), results in the
/// order of `cfgs` whatever the thread count.
pub fn run_grid(
    w: &Workload,
    map: &UnitMap,
    cfgs: &[CacheConfig],
) -> Vec<Result<CacheOutcome, CacheError>> {
    use rayon::prelude::*;
    cfgs.par_iter().map(|c| w.run(map, c)).collect()
}

impl Workload {
    /// Prepare `trace` (tokens of `phases`) for `map`. The pinning policies rank units by
    /// `profile` (another trace of the same geometry) or, when `None`, by the evaluated trace
    /// itself (an offline oracle).
    pub fn build(
        trace: &Trace,
        map: &UnitMap,
        phases: PhaseSel,
        batching: Batching,
        profile: Option<&Trace>,
    ) -> Result<Workload, CacheError> {
        let ks = trace.keyspace();
        if map.key_first.len() != ks.num_keys() {
            return Err(CacheError::Input(format!(
                "the unit map `{}` covers {} keys but the trace has {}; build the mechanism from this trace's model",
                map.spec,
                map.key_first.len(),
                ks.num_keys()
            )));
        }
        let (batches, delays) = schedule::batches_of(trace, &ks, map, phases, batching)?;
        let s = AccessStream::build(trace, &ks, map, &batches)?;
        let profile = match profile {
            None if batching.batch == 1
                && batching.source.is_fixed()
                && batching.schedule == Schedule::Fifo
                && batching.stepping.is_off() =>
            {
                ProfileStats::from_stream(&s)
            }
            other => {
                let p = other.unwrap_or(trace);
                let pks = p.keyspace();
                check_same_geometry(&ks, &pks)?;
                let singles: Vec<Vec<Request>> = stream::round_robin_requests(p, phases)
                    .into_iter()
                    .map(|r| vec![r])
                    .collect();
                ProfileStats::from_stream(&AccessStream::build(p, &pks, map, &singles)?)
            }
        };
        let schedule = batching
            .queue
            .map(|_| schedule::schedule_report(&delays, s.units.len() as u64, s.tokens));
        Ok(Workload {
            next_use: s.next_use(),
            stream: s,
            profile,
            schedule,
        })
    }

    /// Run one configuration over the whole stream, the policy on its concrete type where
    /// [`concrete::with_simulator`] has one.
    pub fn run(&self, map: &UnitMap, cfg: &CacheConfig) -> Result<CacheOutcome, CacheError> {
        struct Run<'w>(&'w Workload);
        impl<'w> concrete::OnSimulator<'w> for Run<'w> {
            type Out = Result<CacheOutcome, CacheError>;
            fn on<P: ?Sized + EvictionPolicy + 'static>(
                self,
                sim: Result<(CacheSim<'w, P>, Vec<u32>), CacheError>,
            ) -> Self::Out {
                Ok(self.0.run_sim(sim?.0))
            }
        }
        concrete::with_simulator(map, cfg, &self.profile, self.next_use_for(cfg), Run(self))
    }

    fn run_sim<P: ?Sized + EvictionPolicy>(&self, mut sim: CacheSim<'_, P>) -> CacheOutcome {
        for g in 0..self.stream.num_groups() {
            sim.group(self.stream.group(g));
        }
        sim.add_tokens(self.stream.tokens);
        CacheOutcome {
            cache: sim.report(),
            tiers: sim.tiers(),
        }
    }

    /// A fresh simulator for `cfg`, for callers that step through the stream themselves
    /// (the discrete-event engine); also returns the pool of every unit.
    pub fn simulator<'a>(
        &'a self,
        map: &UnitMap,
        cfg: &CacheConfig,
    ) -> Result<(CacheSim<'a>, Vec<u32>), CacheError> {
        simulator_of(map, cfg, &self.profile, self.next_use_for(cfg), |setup| {
            retention::build(cfg.policy, setup)
        })
    }

    /// The whole stream's next uses when `cfg`'s policy reads them.
    fn next_use_for(&self, cfg: &CacheConfig) -> Option<&[u32]> {
        cfg.policy.needs_next_use().then_some(&self.next_use[..])
    }
}

/// A fresh simulator for `cfg` over `map`'s units, its pinning policies ranking units by
/// `profile` and its offline policies reading `next_use` (the whole stream's, or `None` for a
/// caller that gives each group's with [`CacheSim::group_next`]); policies made by `make`,
/// one per pool. Also returns the pool of every unit.
pub fn simulator_of<'a, P: ?Sized + EvictionPolicy>(
    map: &UnitMap,
    cfg: &CacheConfig,
    profile: &ProfileStats,
    next_use: Option<&'a [u32]>,
    mut make: impl FnMut(&PolicySetup) -> Result<Box<P>, String>,
) -> Result<(CacheSim<'a, P>, Vec<u32>), CacheError> {
    let n = map.num_units();
    let max_unit = map
        .units
        .iter()
        .map(|u| u.committed_bytes)
        .max()
        .unwrap_or(1);
    let global = cfg.budget.resolve(n, max_unit)?;
    let pool_of = driver::pool_layout(map, cfg.split)?;
    let pools = pool_of.iter().map(|&p| p as usize + 1).max().unwrap_or(1);
    let mut pool_units = vec![0usize; pools];
    for &p in &pool_of {
        pool_units[p as usize] += 1;
    }
    let capacities = match cfg.split {
        Split::Global => vec![global],
        Split::PerLayer => budget::split_per_layer(&cfg.budget, global, n, &pool_units),
    };
    let dram = cfg
        .dram
        .as_ref()
        .map(|d| d.budget.resolve(n, max_unit).map(|cap| (cap, d.mode)))
        .transpose()
        .map_err(|e| CacheError::DramBudget(e.0))?;
    let mut policies: Vec<Box<P>> = Vec::with_capacity(pools);
    for p in 0..pools {
        let local = |v: &[u64]| -> Vec<u64> {
            (0..n)
                .filter(|&u| pool_of[u] as usize == p)
                .map(|u| v[u])
                .collect()
        };
        let setup = PolicySetup {
            units: pool_units[p],
            capacity: capacities[p],
            seed: cfg.seed,
            pool: p as u64,
            profile_counts: cfg.policy.needs_profile().then(|| local(&profile.counts)),
            profile_always_on: cfg.policy.needs_profile().then(|| {
                (0..n)
                    .filter(|&u| pool_of[u] as usize == p)
                    .map(|u| profile.always_on[u])
                    .collect()
            }),
        };
        policies.push(make(&setup).map_err(CacheError::Input)?);
    }
    let sim = CacheSim::new(
        map,
        &pool_of,
        policies,
        &capacities,
        cfg.semantics,
        next_use,
        dram,
    );
    Ok((sim, pool_of))
}

/// A retention run as `sim run` / `sim sweep` ask for it: policy, budget, batching, and
/// optionally the inverse (target tokens per second) question.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RetentionConfig {
    pub cache: CacheConfig,
    pub batching: Batching,
    /// (target tokens per second, link GB/s): search the smallest budget instead of using
    /// `cache.budget`.
    pub target: Option<(f64, f64)>,
}

/// The retention inputs echoed in a run report (the `retention` block); defined beside the
/// other report blocks.
pub use reports::run::RetentionInputs;

/// Every block a retention run adds to a run report.
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionOutcome {
    pub inputs: RetentionInputs,
    pub cache: CacheReport,
    pub tiers: Option<TiersReport>,
    pub schedule: Option<ScheduleReport>,
    pub target: Option<TargetReport>,
}

/// A retention run prepared but not yet stepped: the workload (access stream, next uses,
/// profile statistics) and the configuration with its budget resolved (the smallest budget
/// reaching the target with `--target-tokens-per-s`, else the budget as given).
#[derive(Clone, Debug)]
pub struct PreparedRetention {
    pub workload: Workload,
    pub cache: CacheConfig,
    pub target: Option<TargetReport>,
}

impl PreparedRetention {
    /// Build the workload of `trace` (phases `phases`) over `map`'s units and resolve the
    /// budget; the pinning policies rank units by `profile` (or the trace itself when `None`).
    pub fn new(
        trace: &Trace,
        profile: Option<&Trace>,
        map: &UnitMap,
        phases: PhaseSel,
        rc: &RetentionConfig,
    ) -> Result<PreparedRetention, CacheError> {
        let workload = Workload::build(trace, map, phases, rc.batching, profile)?;
        let mut cache = rc.cache.clone();
        let target = match rc.target {
            Some((tps, gbps)) => {
                let t = target::smallest_budget(&workload, map, &cache, tps, gbps)?;
                target::resolve_budget(&mut cache, &t, map.num_units());
                Some(t)
            }
            None => None,
        };
        Ok(PreparedRetention {
            workload,
            cache,
            target,
        })
    }

    /// The report blocks of the run `rc` asked for, given the outcome of stepping the whole
    /// stream under [`PreparedRetention::cache`].
    pub fn outcome(self, rc: &RetentionConfig, out: CacheOutcome) -> RetentionOutcome {
        retention_outcome(self.cache, rc, out, self.workload.schedule, self.target)
    }
}

/// The report blocks of the run `rc` asked for, run under `cfg` (its budget resolved): the
/// stepped outcome, the schedule summary and the target search.
pub fn retention_outcome(
    cfg: CacheConfig,
    rc: &RetentionConfig,
    out: CacheOutcome,
    schedule: Option<ScheduleReport>,
    target: Option<TargetReport>,
) -> RetentionOutcome {
    RetentionOutcome {
        inputs: RetentionInputs {
            evict: cfg.policy,
            budget: cfg.budget.clone(),
            split: cfg.split,
            semantics: cfg.semantics,
            batch: rc.batching.batch,
            queue: rc.batching.queue,
            schedule: rc.batching.schedule,
            dram: cfg.dram.as_ref().map(|d| d.budget.clone()),
            seed: cfg.seed,
            target_search: target.as_ref().map(|t| t.search.clone()),
            batching: (!rc.batching.source.is_fixed())
                .then(|| rc.batching.source.name().to_string()),
            max_seqs: match rc.batching.source {
                StepSource::Continuous(c) => Some(c.max_seqs),
                _ => None,
            },
            max_batched_tokens: match rc.batching.source {
                StepSource::Continuous(c) => Some(c.max_batched_tokens),
                _ => None,
            },
        },
        cache: out.cache,
        tiers: out.tiers,
        schedule,
        target,
    }
}

/// Run one retention configuration of `trace` (phases `phases`) over `map`'s units; the
/// pinning policies rank units by `profile` (or the trace itself when `None`).
pub fn run_retention(
    trace: &Trace,
    profile: Option<&Trace>,
    map: &UnitMap,
    phases: PhaseSel,
    rc: &RetentionConfig,
) -> Result<RetentionOutcome, CacheError> {
    let prepared = PreparedRetention::new(trace, profile, map, phases, rc)?;
    let out = prepared.workload.run(map, &prepared.cache)?;
    Ok(prepared.outcome(rc, out))
}
