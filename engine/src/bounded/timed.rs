//! `sim run --hw` on a trace file in bounded memory: the retention driver (or streaming)
//! records the plan a window of steps at a time from the file's records read round-robin
//! ([`super::source::RoundRobin`]), and the engine prices each window as it is recorded
//! ([`Pricer`]), carrying its state (resource clocks, residency, queued decommits, the
//! predictor) across windows; the priced steps are then retired, keeping the last step that
//! `prev-token` reads. With a predictor, the baselines of the `prefetch` block (no prefetch,
//! the oracle) price the same windows in lockstep. Memory: the passes of [`super::Stream`],
//! one window of plan, the engine's per-unit state and, with `--timeline`, its capped spans.
//! The report is [`crate::runner::run`]'s on the loaded trace, bit for bit
//! (`sim/tests/bounded_timed.rs`).

use super::batches::Batches;
use super::learn::FileProfile;
use super::source::RecordPos;
use super::{check_retention, next_use, Files, Passes, Retained, Stream};
use crate::cache::{self, Batching, CacheConfig, CacheOutcome, CacheSim};
use crate::cost::CostModel;
use crate::engine::batch::{AdmissionSearch, PlanPeak};
use crate::engine::build::{empty_plans, GroupBuf};
use crate::engine::config::{engine_options, models, write_timeline};
use crate::engine::TimingConfig;
use crate::engine::{EngineError, EngineOptions, Learning, Plans, PredictorKind, Pricer};
use crate::model_profile::ComputeModel;
use crate::runner::{self, RunConfig, RunReport};
use crate::verify_report::StepsTally;
use anyhow::Result;
use policies::retention;
use policies::UnitMap;
use profile::ConstantName;
use traces::{Phase, Trace};

/// Groups recorded before a window is priced and retired (64 k: about 1,100 DeepSeek-V3
/// steps, a few MiB of plan; small against the engine's per-unit state, large enough that a
/// window's bookkeeping vanishes against its pricing).
const WINDOW_GROUPS: usize = 1 << 16;

/// One run of the timed `cfg` on the trace files `f` whose mechanism's passes `stream` made,
/// without the `steps` block's baseline ([`runner::with_baseline`] adds it): the report and
/// the mean decode step time, µs.
pub(crate) fn run_once(
    cfg: &RunConfig,
    f: &Files,
    stream: &Stream,
    tick: super::Tick,
) -> Result<(RunReport, Option<f64>)> {
    let replayed = replay(
        cfg,
        f,
        &stream.map,
        stream.sizes.dtype,
        stream.units.as_ref(),
        tick,
    )?;
    Ok(replayed.report(cfg, f, stream))
}

/// The timed replay of `cfg` over the files `f` with the mechanism's unit map `map` (its
/// experts stored in `dtype`) and, for a pinning policy, the unit statistics `units` of the
/// streaming pass (`None`: the policy reads none). It needs nothing else of that pass, so it
/// may run beside it ([`super::run_file`]). A learning predictor with a profile trace reads
/// that file each time it learns ([`FileProfile`]), after a pass that validates it.
pub(crate) fn replay(
    cfg: &RunConfig,
    f: &Files,
    map: &UnitMap,
    dtype: Option<traces::DType>,
    units: Option<&cache::ProfileStats>,
    tick: super::Tick,
) -> Result<TimedRun> {
    let (placed_map, placed, placed_notes) =
        crate::engine::cpu::placed(cfg, map.clone(), &f.skeleton, dtype)?;
    let run_cfg = placed.as_ref().unwrap_or(cfg);
    let profile_stats = match (&placed, units) {
        // the GPU's units: their statistics come from a pass of their own
        (Some(_), Some(_)) => std::borrow::Cow::Owned(unit_counts(f, &placed_map, run_cfg, tick)?),
        (_, Some(u)) => std::borrow::Cow::Borrowed(u),
        (_, None) => std::borrow::Cow::Owned(super::empty_profile(map)),
    };
    let tc = run_cfg.timing.as_ref().expect("a timed run");
    let learned = match &f.profile {
        Some((p, _, ks)) if tc.predictor.learns() => Some(FileProfile::open(p, ks, run_cfg.phase)?),
        _ => None,
    };
    let learning = match &learned {
        Some(p) => Learning::Profile(p),
        None => Learning::Online,
    };
    let run = Timed {
        f,
        map: &placed_map,
        cfg: run_cfg,
        tc,
        learning,
        tick,
    };
    let outcome = run.go(&profile_stats);
    // a profile that failed to read again is the cause of anything the run did after it
    learned.as_ref().map_or(Ok(()), FileProfile::check)?;
    let (retention, timing) = outcome?;
    Ok(TimedRun {
        map: placed_map,
        placed,
        placed_notes,
        retention,
        timing,
    })
}

/// A timed replay ([`replay`]) waiting for the streaming pass's blocks of its report.
pub(crate) struct TimedRun {
    /// The units the run placed on the GPU (the mechanism's, unless experts run on the CPU).
    map: UnitMap,
    /// The configuration the run priced, when placing experts on the CPU changed it.
    placed: Option<RunConfig>,
    placed_notes: Vec<String>,
    retention: Option<Retained>,
    timing: TimedOutcome,
}

impl TimedRun {
    /// The report of `cfg`'s run with the streaming pass `stream` of its mechanism, and the
    /// mean decode step time, µs.
    pub(crate) fn report(
        self,
        cfg: &RunConfig,
        f: &Files,
        stream: &Stream,
    ) -> (RunReport, Option<f64>) {
        let cfg = self.placed.as_ref().unwrap_or(cfg);
        let timing = self.timing;
        let mut report = stream.report_retained(cfg, f, self.retention);
        report.inputs = runner::run_inputs(
            cfg,
            &self.map,
            stream.sizes,
            &f.skeleton,
            (&report.inputs.trace, &report.inputs.profile_trace),
        );
        report.notes.extend(self.placed_notes);
        report.notes.extend(timing.notes);
        report.timing = Some(timing.timing);
        report.timing_detail = Some(timing.detail);
        report.prefetch = timing.prefetch;
        report.cpu = timing.cpu;
        report.admission = timing.admission;
        let profile = &cfg.timing.as_ref().expect("a timed run").profile;
        let repeat = profile
            .get(ConstantName::ExpertKernelRepeatBandwidth)
            .is_some();
        report.steps = timing.steps.map(|t| {
            let mut s = t.finish(&cfg.stepping);
            s.repeat_slots_priced = Some(repeat);
            s
        });
        (report, timing.decode_step_us)
    }
}

/// The unit statistics of the pinning policies over `map` (the GPU's units), from a pass over
/// the profile source.
fn unit_counts(
    f: &Files,
    map: &UnitMap,
    cfg: &RunConfig,
    tick: super::Tick,
) -> Result<cache::ProfileStats> {
    let (path, flag, ks) = f.profile_source();
    let mut c = super::profile::UnitCounts::new(ks, map);
    super::each_record(path, flag, cfg.phase, tick, |r| c.step(r))?;
    Ok(c.finish())
}

/// The retention driver of a recording pass.
pub(crate) type Driver<'s> = CacheSim<'s, dyn retention::EvictionPolicy>;

/// What a recording pass gives the retention run: the driver after it (`None` for
/// streaming), the tokens, the `schedule` block with a queue, and the `steps` block's
/// tally with several tokens per step.
pub(crate) struct Recorded<'s> {
    pub(crate) sim: Option<Driver<'s>>,
    pub(crate) tokens: u64,
    pub(crate) schedule: Option<cache::ScheduleReport>,
    pub(crate) steps: Option<StepsTally>,
}

/// One recording and pricing pass over the trace file ([`Timed::pass`]).
struct Pass<'s> {
    recorded: Recorded<'s>,
    /// The run's replay, then the baselines' in [`baselines`] order; a pricing error is
    /// kept here rather than raised, so an admission search may pass over a refused plan.
    /// Without a search the pass stops at the window where the run's own pricing failed
    /// (the rest would be recorded, never priced), so `recorded` then covers the trace up
    /// to there.
    main: Result<crate::engine::Replay, EngineError>,
    rest: Vec<Result<crate::engine::Replay, EngineError>>,
    /// The plan's own peak mapped bytes (0 unless asked for).
    plan_peak: f64,
}

/// What the timed replay adds to the report.
struct TimedOutcome {
    admission: Option<reports::run::Admission>,
    timing: reports::run::TimingReport,
    detail: reports::run::TimingDetail,
    prefetch: Option<reports::run::PrefetchReport>,
    cpu: Option<reports::cpu_lane::CpuLaneReport>,
    notes: Vec<String>,
    /// The mean time of the steps that process no prompt token, µs.
    decode_step_us: Option<f64>,
    /// The `steps` block's tally of the pass at the requested batch (with a stepping).
    steps: Option<StepsTally>,
}

/// One timed run over a trace file.
struct Timed<'a> {
    f: &'a Files<'a>,
    map: &'a UnitMap,
    cfg: &'a RunConfig,
    tc: &'a TimingConfig,
    learning: Learning<'a>,
    tick: super::Tick<'a>,
}

impl<'a> Timed<'a> {
    /// The retention driver (with its next uses when offline), the recording and the
    /// pricing, once, or under an admission cap once per batch size tried (from the
    /// requested one down, as [`crate::engine::admit`] tries them); returns the retention
    /// run at the requested batch (its budget resolved by a tokens/s target first, with
    /// untimed replays) and the timing blocks.
    fn go(&self, profile: &cache::ProfileStats) -> Result<(Option<Retained>, TimedOutcome)> {
        let rc = self.cfg.retention.as_ref();
        let requested = rc.map_or(Batching::default().batch, |r| r.batching.batch);
        let mut next = None;
        let resolved = match rc {
            Some(rc) => {
                check_retention(self.f, rc)?;
                Some(self.passes(requested).resolve(rc, profile, &mut next)?)
            }
            None => None,
        };
        let cache = resolved.as_ref().map(|(c, _)| c);
        let (sim, next) = self.driver(requested, cache, profile, next)?;
        let models = models(self.tc, &self.f.skeleton, self.map)?;
        let kinds = baselines(self.tc.predictor);
        let retention = self.cfg.retention.clone();
        let retained = |r: Recorded<'_>| retained(retention.clone(), r, resolved.clone());
        let Some(cap) = self.tc.admission_cap else {
            let mut pass = self.pass(sim, next, requested, &models, false)?;
            let steps = pass.recorded.steps.take();
            let mut t =
                self.outcome(pass.main?, kinds.iter().copied().zip(pass.rest), &models.0)?;
            t.steps = steps;
            return Ok((retained(pass.recorded), t));
        };
        let mut search = AdmissionSearch::new(requested, cap, &models.0)?;
        let (mut sim, mut next, mut asked, mut steps) = (Some(sim), next, None, None);
        for n in (1..=requested).rev() {
            let (s, x) = match sim.take() {
                Some(s) => (s, next.take()),
                None => self.driver(n, cache, profile, None)?,
            };
            let mut pass = self.pass(s, x, n, &models, true)?;
            if n == requested {
                steps = pass.recorded.steps.take();
                asked = Some(retained(pass.recorded));
            }
            if !search.fits(pass.plan_peak, false) {
                continue;
            }
            let run = pass.main?;
            if !search.fits(run.peak_mapped_bytes, true) {
                continue;
            }
            let mut t = self.outcome(run, kinds.iter().copied().zip(pass.rest), &models.0)?;
            t.admission = Some(search.admitted(n));
            t.steps = steps;
            return Ok((asked.expect("the requested batch was tried first"), t));
        }
        Err(search.none_fits().into())
    }
    /// A fresh retention driver of the cache config `cache` for batches of `batch` requests
    /// and, for an offline policy, the next uses of its stream (`next`, or a pass of their
    /// own); `None` for streaming.
    fn driver<'s>(
        &self,
        batch: usize,
        cache: Option<&CacheConfig>,
        profile: &'s cache::ProfileStats,
        next: Option<next_use::NextUses>,
    ) -> Result<(Option<Driver<'s>>, Option<next_use::NextUses>)>
    where
        'a: 's,
    {
        driver(&self.passes(batch), cache, profile, next)
    }

    /// The untimed passes of [`super`] over the same stream at batches of `batch` (for the
    /// next uses and a target's search).
    fn passes(&self, batch: usize) -> Passes<'_> {
        let batching = self
            .cfg
            .retention
            .as_ref()
            .map_or_else(Batching::default, |r| r.batching);
        Passes {
            trace: self.f.trace,
            ks: &self.f.ks,
            map: self.map,
            phases: self.cfg.phase,
            batching: Batching {
                batch,
                stepping: self.cfg.stepping,
                ..batching
            },
            tick: self.tick,
        }
    }

    /// Record the plan window by window (the driver `sim` deciding residency, streaming
    /// without it, batches of `batch` requests) and price each window; with `peak` (an
    /// admission search), also scan the plan's own peak mapped bytes, to the end of the
    /// trace even when the run's pricing failed; without it, stop at that failure.
    fn pass<'s>(
        &self,
        sim: Option<Driver<'s>>,
        next: Option<next_use::NextUses>,
        batch: usize,
        (cost, compute): &(CostModel, ComputeModel),
        peak: bool,
    ) -> Result<Pass<'s>> {
        let ks = &self.f.ks;
        let mut plans = empty_plans(ks.num_moe_layers(), self.map, sim.as_ref());
        let page_cache;
        let cost = if plans.page_cache {
            page_cache = cost.with_page_cache()?;
            &page_cache
        } else {
            cost
        };
        let opts = engine_options(self.tc);
        let kinds = baselines(self.tc.predictor);
        let mut pricers = self.pricers(&plans, cost, compute, opts, &kinds)?;
        let mut plan_peak = peak.then(|| PlanPeak::new(&plans, self.map, compute));
        let lead = if opts.predictor == PredictorKind::None {
            0
        } else {
            opts.window
        };
        let passes = self.passes(batch);
        passes.check_groups()?;
        let batching = passes.batching;
        let mut src = Batches::open(self.f.trace, self.cfg.phase, ks, self.map, batching)?;
        let mut rec = Recorder::new(self.f, self.map, &self.cfg.stepping, sim, next, self.tick);
        let (tokens, accesses) = rec.record(&mut src, &mut plans, |plans| {
            let upto = plans.end_group() - lead;
            price_window(&mut pricers, plan_peak.as_mut(), plans, upto);
            // a refused plan is the run's error; only an admission search (`peak`) reads
            // the rest of it, for its own peak
            peak || pricers[0].is_ok()
        })?;
        let end = plans.end_group();
        price_all(&mut pricers, &plans, end);
        if let Some(p) = &mut plan_peak {
            p.scan(&plans, end);
        }
        let mut done = pricers
            .into_iter()
            .map(|p| p.and_then(|p| p.finish(tokens)));
        let schedule = src.delays().map(|d| d.report(accesses, tokens));
        Ok(Pass {
            recorded: Recorded {
                sim: rec.sim,
                tokens,
                schedule,
                steps: rec.tally,
            },
            main: done.next().expect("the main pricer"),
            rest: done.collect(),
            plan_peak: plan_peak.map_or(0.0, |p| p.peak),
        })
    }

    /// The run's pricer (options `opts`) and one per baseline predictor of `kinds`, without
    /// a timeline, for the plan whose first window is `plans`.
    fn pricers<'p>(
        &'p self,
        plans: &Plans,
        cost: &'p CostModel,
        compute: &'p ComputeModel,
        opts: EngineOptions,
        kinds: &[PredictorKind],
    ) -> Result<Vec<Result<Pricer<'p>, EngineError>>> {
        let ks = &self.f.ks;
        let new = |o| Pricer::new(plans, self.map, ks, cost, compute, o, self.learning, false);
        let mut pricers = vec![new(opts)?];
        if self.tc.step_latencies {
            pricers[0].keep_latencies();
        }
        for &k in kinds {
            pricers.push(new(EngineOptions {
                predictor: k,
                timeline_cap: 0,
                ..opts
            })?);
        }
        Ok(pricers.into_iter().map(Ok).collect())
    }

    /// The timing blocks of the finished replay `run`, with the baselines' replays `rest`
    /// (in [`baselines`] order), as [`crate::engine::run_timing`] words them.
    fn outcome(
        &self,
        run: crate::engine::Replay,
        mut rest: impl Iterator<
            Item = (
                PredictorKind,
                Result<crate::engine::Replay, crate::engine::EngineError>,
            ),
        >,
        cost: &crate::cost::CostModel,
    ) -> Result<TimedOutcome> {
        let prefetch = (self.tc.predictor != PredictorKind::None)
            .then(|| {
                crate::engine::prefetch::report(
                    self.tc.predictor,
                    self.tc.window,
                    self.tc.prefetch_issue.under(self.map.paging),
                    self.tc.prefetch_cap,
                    self.tc.prefetch_buffer,
                    self.tc.prefetch_min_score,
                    &self.learning,
                    &run,
                    |k| {
                        let (kind, r) = rest.next().expect("a baseline per kind asked");
                        debug_assert_eq!(kind, k);
                        r
                    },
                )
            })
            .transpose()?;
        let notes = write_timeline(self.tc, &run)?;
        let cpu = cost
            .cpu
            .as_ref()
            .map(|lane| crate::engine::cpu::report(lane, &cost.profile, &run));
        Ok(TimedOutcome {
            decode_step_us: run.decode_step_us_mean,
            steps: None,
            admission: None,
            timing: run.timing,
            detail: run.detail,
            prefetch,
            cpu,
            notes,
        })
    }
}

/// The predictors the `prefetch` block prices the plan again with, in the order
/// [`crate::engine::prefetch::report`] asks for them: none, and the oracle unless the run's
/// predictor is the oracle; nothing without a predictor.
fn baselines(kind: PredictorKind) -> Vec<PredictorKind> {
    match kind {
        PredictorKind::None => Vec::new(),
        PredictorKind::Oracle => vec![PredictorKind::None],
        _ => vec![PredictorKind::None, PredictorKind::Oracle],
    }
}

/// Price every pricer still without an error up to group `upto`, keeping the error of one
/// that fails (the replay of a plan an admission search refuses is never read).
fn price_all(pricers: &mut [Result<Pricer<'_>, EngineError>], plans: &Plans, upto: usize) {
    for slot in pricers.iter_mut() {
        let priced = match slot {
            Ok(p) => p.price(plans, upto),
            Err(_) => continue,
        };
        if let Err(e) = priced {
            *slot = Err(e);
        }
    }
}

/// Price every pricer (and scan the plan's peak) up to group `upto`, then retire the steps
/// before the one holding group `upto - moe_layers` (what `prev-token` may still read stays).
fn price_window(
    pricers: &mut [Result<Pricer<'_>, EngineError>],
    peak: Option<&mut PlanPeak>,
    plans: &mut Plans,
    upto: usize,
) {
    price_all(pricers, plans, upto);
    if let Some(p) = peak {
        p.scan(plans, upto);
    }
    let keep = upto.saturating_sub(plans.moe_layers.max(1));
    if keep > plans.base_group {
        let step = plans.group(keep).step as usize;
        let dropped = plans.retire(step);
        for p in pricers.iter_mut().filter_map(|p| p.as_mut().ok()) {
            p.retired(dropped);
        }
    }
}

/// The sequences (into `seqs`), KV tokens (as [`crate::engine::build::record`] counts them:
/// a step's chunk included), tokens produced and whether it processes a prompt token, of the
/// step of the requests at `pos`.
fn step_of(trace: &Trace, pos: &[RecordPos], seqs: &mut Vec<u32>) -> (u64, u32, bool) {
    seqs.clear();
    let (mut kv, mut produced, mut prefill) = (0u64, 0u32, false);
    for p in pos {
        let prompt = match p.phase {
            Phase::Decode => trace.header.sequences[p.sequence as usize].prefill_tokens,
            Phase::Prefill => 0,
        };
        kv += prompt + p.token + u64::from(p.len);
        produced += p.produced;
        prefill |= p.phase == Phase::Prefill;
        seqs.push(p.sequence);
    }
    (kv, produced, prefill)
}

/// A fresh retention driver of the cache config `cache` and, for an offline policy, the
/// next uses of the stream of `passes` (`next`, or a pass of their own); `None` for
/// streaming.
pub(crate) fn driver<'s>(
    passes: &Passes,
    cache: Option<&CacheConfig>,
    profile: &'s cache::ProfileStats,
    next: Option<next_use::NextUses>,
) -> Result<(Option<Driver<'s>>, Option<next_use::NextUses>)> {
    let Some(c) = cache else {
        return Ok((None, None));
    };
    let (sim, _) = cache::simulator_of(passes.map, c, profile, None, |s| {
        retention::build(c.policy, s)
    })?;
    if !c.policy.needs_next_use() {
        return Ok((Some(sim), None));
    }
    let mut next = next;
    passes.rewound(&mut next)?;
    Ok((Some(sim), next))
}

/// The retention run (of the config `rc`) the pass `r` recorded, with the cache config and
/// the target search `resolved`; `None` for streaming.
pub(crate) fn retained(
    rc: Option<cache::RetentionConfig>,
    r: Recorded<'_>,
    resolved: Option<(CacheConfig, Option<cache::TargetReport>)>,
) -> Option<Retained> {
    let (rc, mut sim) = rc.zip(r.sim)?;
    let (cache, target) = resolved?;
    sim.add_tokens(r.tokens);
    let out = CacheOutcome {
        cache: sim.report(),
        tiers: sim.tiers(),
    };
    Some(Retained {
        rc,
        cache,
        out,
        schedule: r.schedule,
        target,
    })
}

/// The recording of a pass: the batches' groups gathered and decided (by the retention
/// driver, or streaming) into a plan, and with several tokens per step the `steps` block's
/// tally of each step as it is recorded.
pub(crate) struct Recorder<'r, 's> {
    ks: &'r traces::KeySpace,
    map: &'r UnitMap,
    skeleton: &'r Trace,
    pub(crate) sim: Option<Driver<'s>>,
    next: Option<next_use::NextUses>,
    pub(crate) tally: Option<StepsTally>,
    tick: super::Tick<'r>,
}

impl<'r, 's> Recorder<'r, 's> {
    /// A recording over the trace files `f` and the units `map`, with the driver `sim` (and
    /// its next uses `next`), tallying the steps unless `stepping` is off.
    pub(crate) fn new(
        f: &'r Files,
        map: &'r UnitMap,
        stepping: &crate::verify::Stepping,
        sim: Option<Driver<'s>>,
        next: Option<next_use::NextUses>,
        tick: super::Tick<'r>,
    ) -> Self {
        Recorder {
            ks: &f.ks,
            map,
            skeleton: &f.skeleton,
            sim,
            next,
            tally: (!stepping.is_off()).then(StepsTally::new),
            tick,
        }
    }

    /// Record every batch of `src` into `plans`, calling `window(plans)` whenever it holds
    /// [`WINDOW_GROUPS`] groups (the caller prices and retires them, and answers whether to
    /// go on: `false` stops the recording there); returns the tokens produced and the
    /// driver's accesses so far.
    pub(crate) fn record(
        &mut self,
        src: &mut Batches,
        plans: &mut Plans,
        mut window: impl FnMut(&mut Plans) -> bool,
    ) -> Result<(u64, u64)> {
        let (ks, map) = (self.ks, self.map);
        let mut group = GroupBuf::new(ks.num_keys(), map.num_units());
        let (mut records, mut pos, mut seqs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut tokens, mut accesses) = (0u64, 0u64);
        while src.next(&mut records, &mut pos)? {
            let (kv, produced, prefill) = step_of(self.skeleton, &pos, &mut seqs);
            plans.begin_chunk_step(&seqs, kv, produced, prefill);
            for layer in 0..ks.num_moe_layers() {
                group.gather_records(ks, map, &records, layer);
                match &mut self.sim {
                    Some(sim) => {
                        let n = group.units().len();
                        accesses += n as u64;
                        let n = self.next.as_mut().map(|x| x.take(n)).transpose()?;
                        group.decide(sim, plans, layer, n);
                    }
                    None => group.push_streaming(plans, layer),
                }
            }
            if let Some(t) = &mut self.tally {
                t.step(plans, plans.base_step + plans.steps.len() - 1);
            }
            tokens += u64::from(produced);
            (self.tick)(u64::from(produced));
            if plans.groups.len() >= WINDOW_GROUPS && !window(plans) {
                break;
            }
        }
        Ok((tokens, accesses))
    }
}
