//! `sim run` on a trace file in memory bounded by the model, not by the trace's length: the
//! trace is never loaded. Each figure comes from a pass that streams the file block by block:
//!
//! 1. with a mechanism that orders experts by a profile (`eN:hot`, `eN:coact`): the profile
//!    trace's selection counts ([`profile::KeyCounts`]) and, for `coact`, its co-activation
//!    counts ([`coact::CoactCounts`]);
//! 2. the streaming metrics, over the trace read by [`traces::TraceReader`], which validates
//!    every record and the payload checksum; the same pass gives the pinning policies' unit
//!    statistics when the trace is its own profile ([`profile::UnitCounts`]; a profile trace
//!    gets a pass of its own);
//! 3. with an offline policy (Belady/MIN): each segment's first access of every unit, and by
//!    a backward pass over those rows each segment's exits, from which a thread reading the
//!    stream again beside the replay computes its next uses ([`next_use`]);
//! 4. the retention replay: requests round-robin across sequences ([`source::RoundRobin`]),
//!    batched (or the trace's recorded forward passes, [`recorded`]), each group's units fed to the same [`CacheSim`] as the in-memory path's, with
//!    the next uses read alongside.
//!
//! Passes that do not need each other's results run side by side: the groups of passes 3 and
//! 4 are formed on a thread of their own, a block ahead of the simulator ([`blocks`]), and
//! when the policy reads no unit statistics the streaming pass runs beside the retention
//! passes ([`run_file`]), so on two cores a run takes about as long as its longest part.
//!
//! Memory: the unit map, the policy state and per-unit counters, one block buffer per pass,
//! and the record buffers of [`source`]. The results are those of [`crate::runner::run`] on
//! the loaded trace, bit for bit (`sim/tests/bounded_replay.rs` holds them equal). Timed runs
//! take the same passes and then [`timed`]'s windowed recording and pricing; runs with several
//! tokens per step take them over chunks ([`source::RoundRobin`] with a stepping) and, untimed,
//! [`stepped`]'s windowed recording. Every run is covered: none loads the trace.

pub mod batches;
mod blocks;
pub mod cells;
pub mod coact;
pub mod curve;
#[cfg(test)]
mod fixture;
pub mod grid;
mod learn;
pub mod next_use;
mod positioned;
pub mod profile;
mod recorded;
pub mod source;
mod stepped;
pub mod timed;

use crate::cache::{self, CacheConfig, CacheOutcome, CacheSim, RetentionConfig, Schedule};
use crate::runner::{self, RunConfig, RunReport};
use anyhow::{Context, Result};
use policies::retention::{self, EvictionPolicy};
use policies::UnitMap;
use std::path::Path;
use std::sync::Arc;
use traces::{Header, KeySpace, PhaseSel, SequenceData, Trace, TraceReader};

/// Tokens between two calls of a pass's progress callback.
const TICK_TOKENS: u64 = 4096;

/// Accesses in a block of groups a single run's replay steps through at a time
/// ([`Passes::blocks`]; 256 k: 1 MiB of unit ids, so the four blocks alive at once add 4 MiB
/// to the run's memory, plus their next uses for Belady).
const REPLAY_BLOCK_ACCESSES: usize = 1 << 18;

/// A pass's progress callback: `tick(n)` when n more tokens of a pass are done. Passes that
/// run side by side call it from their own threads.
pub type Tick<'a> = &'a (dyn Fn(u64) + Sync);

/// Whether a grid of runs ([`grid::sweep_file`]) shares its passes with `cfg`: no timing,
/// one token per step, and with retention no tokens/s target and the FIFO schedule without
/// a queue. Every mechanism, retention policy, budget, split, semantics, batch and DRAM tier
/// is covered. [`run_file`] runs every other config with passes of its own.
pub fn supports(cfg: &RunConfig) -> bool {
    let retention_ok = cfg.retention.as_ref().is_none_or(|r| {
        r.target.is_none() && r.batching.queue.is_none() && r.batching.schedule == Schedule::Fifo
    });
    cfg.timing.is_none() && one_token_per_step(cfg) && retention_ok
}

/// Whether every step of `cfg`'s run is one token of one sequence (no verified drafts, no
/// prompt chunks), which the grid's shared replay assumes.
fn one_token_per_step(cfg: &RunConfig) -> bool {
    cfg.stepping.is_off()
        && cfg
            .retention
            .as_ref()
            .is_none_or(|r| r.batching.stepping.is_off())
}

/// Passes over the trace that [`run_file`] makes for `cfg` (for a progress bar's length).
pub fn passes(cfg: &RunConfig, profile_given: bool) -> u64 {
    let mech_profile =
        runner::parse_policy(&cfg.policy, "--policy").is_ok_and(|m| m.needs_profile());
    let replayed = (cfg.timing.is_some() || !cfg.stepping.is_off()) as u64;
    let Some(rc) = &cfg.retention else {
        return 1 + mech_profile as u64 + replayed;
    };
    let policy = rc.cache.policy;
    1 + mech_profile as u64
        + (policy.needs_profile() && profile_given) as u64
        + policy.needs_next_use() as u64
        + 1
}

/// A trace whose header is all there is: the sequences' data are empty. What reads only the
/// header (token counts, the key space, the batch warning) reads it as the whole trace's.
pub(crate) fn header_only(header: Header) -> Trace {
    let n = header.sequences.len();
    Trace {
        header,
        sequences: vec![SequenceData::default(); n],
    }
}

/// Open a trace file for a streaming pass; errors name `flag`.
fn open(path: &Path, flag: &str) -> Result<TraceReader> {
    runner::require_trace_file(path).context(flag.to_string())?;
    TraceReader::open(path).context(flag.to_string())
}

/// Feed every token record of `phases` in `path` (in file order) to `step`, calling `tick`
/// with the tokens done every [`TICK_TOKENS`].
fn each_record(
    path: &Path,
    flag: &str,
    phases: PhaseSel,
    tick: Tick,
    mut step: impl FnMut(&[u16]),
) -> Result<()> {
    let mut r = open(path, flag)?;
    let mut n = 0u64;
    while let Some(tok) = r.next_token().context(flag.to_string())? {
        if phases.includes(tok.pos.phase) {
            step(tok.ids);
            n += 1;
            if n.is_multiple_of(TICK_TOKENS) {
                tick(TICK_TOKENS);
            }
        }
    }
    tick(n % TICK_TOKENS);
    Ok(())
}

/// A trace file and its profile trace file as the passes read them: headers only.
pub(crate) struct Files<'a> {
    trace: &'a Path,
    label: String,
    /// The trace's header, as a trace without data.
    skeleton: Trace,
    ks: KeySpace,
    /// The profile trace's path, label and key space, when one was given.
    profile: Option<(&'a Path, String, KeySpace)>,
}

impl<'a> Files<'a> {
    /// Read and check both headers (as [`runner::Workload::new`] checks the loaded traces).
    pub(crate) fn open(trace: &'a Path, profile: Option<&'a Path>) -> Result<Files<'a>> {
        let skeleton = header_only(open(trace, "--trace")?.header().clone());
        let profile = profile
            .map(|p| {
                let ks = KeySpace::new(&open(p, "--profile-trace")?.header().model);
                Ok::<_, anyhow::Error>((p, p.display().to_string(), ks))
            })
            .transpose()?;
        let files = Files {
            trace,
            label: trace.display().to_string(),
            ks: skeleton.keyspace(),
            skeleton,
            profile,
        };
        let p = files.profile.as_ref().map(|(_, l, k)| (l.as_str(), k));
        runner::check_workload((&files.label, &files.ks), p)?;
        Ok(files)
    }

    /// The file the profile statistics come from (the trace itself when no profile trace
    /// was given), the flag naming it and its key space.
    fn profile_source(&self) -> (&Path, &'static str, &KeySpace) {
        match &self.profile {
            Some((p, _, ks)) => (p, "--profile-trace", ks),
            None => (self.trace, "--trace", &self.ks),
        }
    }
}

/// What every run of one mechanism shares: its unit map and sizes, the streaming metrics,
/// and the pinning policies' unit statistics when asked for.
pub(crate) struct Stream {
    map: UnitMap,
    sizes: policies::mechanisms::Sizes,
    streaming: crate::streaming::StreamingMetrics,
    units: Option<cache::ProfileStats>,
}

impl Stream {
    /// The passes of `cfg`'s mechanism (its policy, phase and sizes) over `files`: the
    /// profile's key counts when the mechanism orders by them, the streaming pass, and with
    /// `pinning` the unit statistics (from the streaming pass, or a pass over the profile).
    pub(crate) fn new(cfg: &RunConfig, f: &Files, pinning: bool, tick: Tick) -> Result<Stream> {
        let (map, sizes) = Self::unit_map(cfg, f, tick)?;
        let (streaming, units) = Self::streaming_pass(cfg, f, &map, pinning, tick)?;
        Ok(Stream {
            map,
            sizes,
            streaming,
            units,
        })
    }

    /// The mechanism's unit map and sizes, after a pass over the profile's key counts when
    /// the mechanism orders experts by them (`eN:hot`, `eN:coact`).
    fn unit_map(
        cfg: &RunConfig,
        f: &Files,
        tick: Tick,
    ) -> Result<(UnitMap, policies::mechanisms::Sizes)> {
        cfg.stepping.check(cfg.phase)?;
        let (profile_path, profile_flag, pks) = f.profile_source();
        let mech = runner::parse_policy(&cfg.policy, "--policy")?;
        let key_profile = if mech.needs_profile() {
            let mut counts = profile::KeyCounts::new(pks);
            let mut coact = mech
                .needs_coactivation()
                .then(|| coact::CoactCounts::new(pks))
                .transpose()?;
            each_record(profile_path, profile_flag, cfg.phase, tick, |r| {
                counts.step(r);
                if let Some(c) = &mut coact {
                    c.step(r);
                }
            })?;
            let mut stats = counts.finish();
            stats.coact = coact.map(coact::CoactCounts::finish);
            Some(stats)
        } else {
            None
        };
        runner::build_units_with(cfg, &f.skeleton.header.model, |_| {
            key_profile.as_ref().expect("the profile pass ran")
        })
    }

    /// The streaming metrics of `map` over the trace and, with `pinning`, the unit
    /// statistics (from the same pass, or a pass over the profile trace).
    fn streaming_pass(
        cfg: &RunConfig,
        f: &Files,
        map: &UnitMap,
        pinning: bool,
        tick: Tick,
    ) -> Result<(
        crate::streaming::StreamingMetrics,
        Option<cache::ProfileStats>,
    )> {
        let (profile_path, profile_flag, pks) = f.profile_source();
        let mut pass = crate::streaming::StreamingPass::new(&f.ks, map)?;
        let mut own =
            (pinning && f.profile.is_none()).then(|| profile::UnitCounts::new(&f.ks, map));
        each_record(f.trace, "--trace", cfg.phase, tick, |r| {
            pass.step(r);
            if let Some(o) = &mut own {
                o.step(r);
            }
        })?;
        let streaming = pass.finish(cfg.phase)?;
        let units = match own {
            Some(o) => Some(o.finish()),
            None if pinning => {
                let mut c = profile::UnitCounts::new(pks, map);
                each_record(profile_path, profile_flag, cfg.phase, tick, |r| c.step(r))?;
                Some(c.finish())
            }
            None => None,
        };
        Ok((streaming, units))
    }

    /// The unit statistics, or empty ones when no pinning policy asked for them.
    fn unit_profile(&self) -> std::borrow::Cow<'_, cache::ProfileStats> {
        match &self.units {
            Some(u) => std::borrow::Cow::Borrowed(u),
            None => std::borrow::Cow::Owned(empty_profile(&self.map)),
        }
    }

    /// The report of `cfg`'s run with `retention`'s outcome, as [`runner::run`] words it.
    fn report(
        &self,
        cfg: &RunConfig,
        f: &Files,
        retention: Option<(RetentionConfig, CacheOutcome)>,
    ) -> RunReport {
        let retained = retention.map(|(rc, out)| Retained {
            cache: rc.cache.clone(),
            rc,
            out,
            schedule: None,
            target: None,
        });
        self.report_retained(cfg, f, retained)
    }

    /// [`Stream::report`] of a run with its `schedule` and `target` blocks.
    fn report_retained(
        &self,
        cfg: &RunConfig,
        f: &Files,
        retention: Option<Retained>,
    ) -> RunReport {
        let retention = retention.map(|r| {
            let rc = RetentionConfig {
                batching: cache::Batching {
                    stepping: cfg.stepping,
                    ..r.rc.batching
                },
                ..r.rc
            };
            cache::retention_outcome(r.cache, &rc, r.out, r.schedule, r.target)
        });
        let profile_label = f.profile.as_ref().map_or(&f.label, |(_, l, _)| l);
        RunReport {
            inputs: runner::run_inputs(
                cfg,
                &self.map,
                self.sizes,
                &f.skeleton,
                (&f.label, profile_label),
            ),
            streaming: Some(self.streaming.clone()),
            retention: retention.as_ref().map(|r| r.inputs.clone()),
            cache: retention.as_ref().map(|r| r.cache.clone()),
            tiers: retention.as_ref().and_then(|r| r.tiers.clone()),
            schedule: retention.as_ref().and_then(|r| r.schedule.clone()),
            target: retention.and_then(|r| r.target),
            notes: runner::batch_notes(cfg, &f.skeleton),
            timing: None,
            timing_detail: None,
            prefetch: None,
            admission: None,
            steps: None,
            cpu: None,
            vs_belady: None,
        }
    }
}

/// The checks a retention run of `rc` makes before its replay: the profile trace's geometry,
/// a batch of at least one request and a queue at least as long.
fn check_retention(f: &Files, rc: &RetentionConfig) -> Result<()> {
    if let Some((_, _, p)) = &f.profile {
        cache::check_same_geometry(&f.ks, p)?;
    }
    cache::schedule::check_batching(rc.batching.batch, rc.batching.queue)?;
    Ok(())
}

/// A retention run over a trace file: the config asked for, the cache config it ran (the
/// budget a tokens/s target resolved), its outcome and the `schedule` and `target` blocks.
pub(crate) struct Retained {
    rc: RetentionConfig,
    cache: CacheConfig,
    out: CacheOutcome,
    schedule: Option<cache::ScheduleReport>,
    target: Option<cache::TargetReport>,
}

/// [`runner::run`] of `cfg` on the trace file `trace` (and the profile trace file `profile`)
/// without loading either, for every config: timed ([`timed`]) or not, one token per step or
/// several ([`stepped`]), with the `steps` block's baseline and break-even runs sharing the
/// mechanism's passes. `tick(n)`: n more tokens of a pass are done.
pub fn run_file(
    cfg: &RunConfig,
    trace: &Path,
    profile: Option<&Path>,
    tick: Tick,
) -> Result<RunReport> {
    let f = Files::open(trace, profile)?;
    let pinning = cfg
        .retention
        .as_ref()
        .is_some_and(|r| r.cache.policy.needs_profile());
    if overlaps(cfg, pinning) {
        return run_overlapped(cfg, &f, tick);
    }
    let stream = Stream::new(cfg, &f, pinning, tick)?;
    runner::with_baseline(cfg, |c| run_once(c, &f, &stream, tick))
}

/// Whether `cfg`'s streaming pass and its replay run side by side ([`run_overlapped`]): a
/// retention run, a timed run or one of several tokens per step, whose policy reads no unit
/// statistics (a pinning policy's come from the streaming pass) and which is one replay (a
/// timed run with verified drafts replays again for its baselines, [`runner::with_baseline`]).
fn overlaps(cfg: &RunConfig, pinning: bool) -> bool {
    let replayed = cfg.retention.is_some() || cfg.timing.is_some() || !cfg.stepping.is_off();
    let one_replay = cfg.timing.is_none() || cfg.stepping.verify == 0;
    replayed && one_replay && !pinning
}

/// [`run_once`] of a run that [`overlaps`]: the streaming pass on a thread of its own beside
/// the replay, which needs only the unit map, so the run's wall time is about the longer of
/// the two rather than their sum. The streaming pass's error comes first: it is the pass
/// that validates the file, so a replay of a corrupt file is discarded.
fn run_overlapped(cfg: &RunConfig, f: &Files, tick: Tick) -> Result<RunReport> {
    let (map, sizes) = Stream::unit_map(cfg, f, tick)?;
    let (pass, replayed) = std::thread::scope(|s| {
        let pass = s.spawn(|| Stream::streaming_pass(cfg, f, &map, false, tick));
        let replayed = Replayed::of(cfg, f, &map, sizes.dtype, tick);
        (pass.join(), replayed)
    });
    let (streaming, units) = pass.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
    let stream = Stream {
        map,
        sizes,
        streaming,
        units,
    };
    Ok(replayed?.report(cfg, f, &stream))
}

/// A replay of a run that [`overlaps`], waiting for the streaming pass's blocks of its report.
enum Replayed {
    Retained(Retained),
    Timed(Box<timed::TimedRun>),
    Stepped(stepped::SteppedRun),
}

impl Replayed {
    /// The replay of `cfg` (a run that [`overlaps`]) with the mechanism's unit map `map`,
    /// its experts stored in `dtype`.
    fn of(
        cfg: &RunConfig,
        f: &Files,
        map: &UnitMap,
        dtype: Option<traces::DType>,
        tick: Tick,
    ) -> Result<Replayed> {
        if cfg.timing.is_some() {
            let run = timed::replay(cfg, f, map, dtype, None, tick)?;
            return Ok(Replayed::Timed(Box::new(run)));
        }
        let profile = empty_profile(map);
        if !cfg.stepping.is_off() {
            let run = stepped::replay(cfg, f, map, &profile, tick)?;
            return Ok(Replayed::Stepped(run));
        }
        let rc = cfg.retention.as_ref().expect("a replayed run");
        let retained = retain_file(cfg, f, map, &profile, rc, tick)?;
        Ok(Replayed::Retained(retained))
    }

    /// The run's report with its mechanism's streaming pass `stream`.
    fn report(self, cfg: &RunConfig, f: &Files, stream: &Stream) -> RunReport {
        match self {
            Replayed::Retained(r) => stream.report_retained(cfg, f, Some(r)),
            Replayed::Timed(t) => t.report(cfg, f, stream).0,
            Replayed::Stepped(s) => s.report(cfg, f, stream),
        }
    }
}

/// One run of `cfg` over the files `f` with its mechanism's passes `stream`: the report and,
/// timed, the mean decode step time (µs).
fn run_once(
    cfg: &RunConfig,
    f: &Files,
    stream: &Stream,
    tick: Tick,
) -> Result<(RunReport, Option<f64>)> {
    cfg.stepping.check(cfg.phase)?;
    if cfg.timing.is_some() {
        return timed::run_once(cfg, f, stream, tick);
    }
    if !cfg.stepping.is_off() {
        return Ok((stepped::run_once(cfg, f, stream, tick)?, None));
    }
    let retention = match &cfg.retention {
        None => None,
        Some(rc) => Some(retain_file(
            cfg,
            f,
            &stream.map,
            &stream.unit_profile(),
            rc,
            tick,
        )?),
    };
    Ok((stream.report_retained(cfg, f, retention), None))
}

/// The retention replay of `rc` (one token per step, untimed) over the trace of `f` with the
/// units of `map` and the pinning policies' statistics `profile`.
fn retain_file(
    cfg: &RunConfig,
    f: &Files,
    map: &UnitMap,
    profile: &cache::ProfileStats,
    rc: &RetentionConfig,
    tick: Tick,
) -> Result<Retained> {
    check_retention(f, rc)?;
    let replay = Passes {
        trace: f.trace,
        ks: &f.ks,
        map,
        phases: cfg.phase,
        batching: cache::Batching {
            stepping: cfg.stepping,
            ..rc.batching
        },
        tick,
    };
    let mut next = None;
    let (cache, target) = replay.resolve(rc, profile, &mut next)?;
    let (out, streamed) = replay.retain(&cache, profile, &mut next)?;
    Ok(Retained {
        rc: rc.clone(),
        cache,
        out,
        schedule: streamed.schedule,
        target,
    })
}

/// Profile statistics no policy reads (the policy needs none).
fn empty_profile(map: &UnitMap) -> cache::ProfileStats {
    cache::ProfileStats {
        counts: vec![0; map.num_units()],
        always_on: vec![false; map.num_units()],
        tokens: 0,
    }
}

/// The passes of a retention run over a trace file, its batches formed as `batching` says
/// (FIFO or route-aware, with or without a queue; each request one step of its stepping).
pub(crate) struct Passes<'a> {
    trace: &'a Path,
    ks: &'a KeySpace,
    map: &'a UnitMap,
    phases: PhaseSel,
    batching: cache::Batching,
    tick: Tick<'a>,
}

/// The fields of [`Passes`] owned, for a thread of its own ([`next_use::Replayable`]).
struct OwnedPasses {
    trace: std::path::PathBuf,
    ks: KeySpace,
    map: UnitMap,
    phases: PhaseSel,
    batching: cache::Batching,
}

impl next_use::Replayable for OwnedPasses {
    fn each_group(&self, group: &mut dyn FnMut(&[u32]) -> Result<()>) -> Result<()> {
        let passes = Passes {
            trace: &self.trace,
            ks: &self.ks,
            map: &self.map,
            phases: self.phases,
            batching: self.batching,
            tick: &|_| {},
        };
        passes
            .groups_buffered(next_use::REREAD_BUFFER_BYTES, group)
            .map(|_| ())
    }
}

/// What a pass over the groups gives besides them: the tokens, and the `schedule` block
/// with a queue.
struct Streamed {
    tokens: u64,
    schedule: Option<cache::ScheduleReport>,
}

impl Passes<'_> {
    /// Every group's units in stream order (as [`cache::AccessStream::build`] forms them from
    /// the batches of round-robin requests, [`batches::Batches`]), each passed to `group`;
    /// returns the tokens and the `schedule` block's figures when a queue was given.
    fn groups(&self, group: impl FnMut(&[u32]) -> Result<()>) -> Result<Streamed> {
        self.groups_buffered(source::BUFFER_BYTES, group)
    }

    /// [`Passes::groups`] reading the records through `buffer_bytes` of buffers.
    fn groups_buffered(
        &self,
        buffer_bytes: usize,
        mut group: impl FnMut(&[u32]) -> Result<()>,
    ) -> Result<Streamed> {
        self.check_groups()?;
        let (path, phases, ks, map) = (self.trace, self.phases, self.ks, self.map);
        let mut src =
            batches::Batches::open_with(path, phases, ks, map, self.batching, buffer_bytes)?;
        let ipt = self.ks.ids_per_token();
        let layers = self.ks.num_moe_layers();
        let mut stamp = vec![0u32; self.map.num_units()];
        let mut g = 0u32;
        let (mut records, mut pos, mut units) = (Vec::new(), Vec::new(), Vec::new());
        let (mut tokens, mut accesses) = (0u64, 0u64);
        while src.next(&mut records, &mut pos)? {
            for m in 0..layers {
                g += 1;
                units.clear();
                let (base, sel) = (
                    self.ks.offsets[m],
                    self.ks.sel_offsets[m]..self.ks.sel_offsets[m + 1],
                );
                for rec in records.chunks_exact(ipt) {
                    for &e in &rec[sel.clone()] {
                        for u in self.map.units_of(base + e as u32) {
                            if stamp[u as usize] != g {
                                stamp[u as usize] = g;
                                units.push(u);
                            }
                        }
                    }
                }
                accesses += units.len() as u64;
                group(&units)?;
            }
            let produced: u64 = pos.iter().map(|p| u64::from(p.produced)).sum();
            tokens += produced;
            (self.tick)(produced);
        }
        let schedule = src.delays().map(|d| d.report(accesses, tokens));
        Ok(Streamed { tokens, schedule })
    }

    /// The next uses of the stream (a pass recording it, [`next_use::FirstUses`]). Refuses up
    /// front, from the header, a stream that could pass [`retention::Belady::MAX_POSITION`].
    fn next_uses(&self) -> Result<next_use::NextUses> {
        let bound = self.trace_accesses_bound()?;
        if bound > retention::Belady::MAX_POSITION {
            return Err(cache::CacheError::Input(format!(
                "the access stream could reach {bound} accesses, more than the {} Belady/MIN numbers; select fewer tokens (--phase) or a coarser mechanism",
                retention::Belady::MAX_POSITION + 1
            ))
            .into());
        }
        let mut first = next_use::FirstUses::new(self.map.num_units(), bound)?;
        self.blocks(REPLAY_BLOCK_ACCESSES, |b| first.push(&b.units))?;
        first.finish(Arc::new(self.owned()))
    }

    /// The stream of these passes as the next-use thread reads it again: owned, and without
    /// progress ticks (the replay it runs beside ticks).
    fn owned(&self) -> OwnedPasses {
        OwnedPasses {
            trace: self.trace.to_path_buf(),
            ks: self.ks.clone(),
            map: self.map.clone(),
            phases: self.phases,
            batching: self.batching,
        }
    }

    /// Refuse up front, from the header, a stream of more groups than the u32 group stamps
    /// number (one group per token and MoE layer at most: 74 M DeepSeek-V3 tokens).
    fn check_groups(&self) -> Result<()> {
        let groups = self.trace_tokens()? * self.ks.num_moe_layers() as u64;
        if groups >= u32::MAX as u64 {
            return Err(cache::CacheError::Input(format!(
                "the access stream could have {groups} groups (tokens x MoE layers), more than the {} a retention run numbers; select fewer tokens (--phase)",
                u32::MAX - 1
            ))
            .into());
        }
        Ok(())
    }

    /// The tokens of the selected phases, from the header.
    fn trace_tokens(&self) -> Result<u64> {
        let header = traces::read_header(self.trace).context("--trace")?;
        Ok(header.tokens(self.phases))
    }

    /// An upper bound of the stream's accesses from the header: every selection's units (a
    /// token read by at most K + 1 verify steps), and at most every unit once per group.
    fn trace_accesses_bound(&self) -> Result<u64> {
        let tokens = self.trace_tokens()?;
        let per_key = self.map.key_count.iter().copied().max().unwrap_or(1) as u64;
        let reads = u64::from(self.batching.stepping.verify) + 1;
        let selections = tokens
            .saturating_mul(self.ks.ids_per_token() as u64)
            .saturating_mul(reads);
        let groups = tokens.div_ceil(self.batching.batch as u64) * self.ks.num_moe_layers() as u64;
        Ok(selections
            .saturating_mul(per_key)
            .min(groups.saturating_mul(self.map.num_units() as u64)))
    }

    /// The cache config `rc` runs: its own, or with a tokens/s target the smallest budget
    /// reaching it ([`cache::target::smallest_budget_by`], each budget tried a replay of
    /// its own), and the `target` block. `next`: the stream's next uses, kept for later runs.
    fn resolve(
        &self,
        rc: &RetentionConfig,
        profile: &cache::ProfileStats,
        next: &mut Option<next_use::NextUses>,
    ) -> Result<(CacheConfig, Option<cache::TargetReport>)> {
        let mut cache = rc.cache.clone();
        let Some(target) = rc.target else {
            return Ok((cache, None));
        };
        let t = cache::target::smallest_budget_by(self.map.num_units(), &cache, target, |c| {
            Ok::<_, anyhow::Error>(self.retain(c, profile, next)?.0.cache.bytes_per_token)
        })?;
        cache::target::resolve_budget(&mut cache, &t, self.map.num_units());
        Ok((cache, Some(t)))
    }

    /// The retention run of `cfg` over the stream, its policy on its concrete type where
    /// [`cache::concrete::with_simulator`] has one. An offline policy reads `next`, computed
    /// on first use and rewound after. A bad budget is refused before any pass.
    fn retain(
        &self,
        cfg: &CacheConfig,
        profile: &cache::ProfileStats,
        next: &mut Option<next_use::NextUses>,
    ) -> Result<(CacheOutcome, Streamed)> {
        struct Go<'p, 'n> {
            passes: &'p Passes<'p>,
            needs_next: bool,
            next: &'n mut Option<next_use::NextUses>,
        }
        impl cache::concrete::OnSimulator<'static> for Go<'_, '_> {
            type Out = Result<(CacheOutcome, Streamed)>;
            fn on<P: ?Sized + EvictionPolicy + 'static>(
                self,
                sim: Result<(CacheSim<'static, P>, Vec<u32>), cache::CacheError>,
            ) -> Self::Out {
                let (sim, _) = sim?;
                let next = if self.needs_next {
                    Some(self.passes.rewound(self.next)?)
                } else {
                    None
                };
                self.passes.run(sim, next)
            }
        }
        let go = Go {
            passes: self,
            needs_next: cfg.policy.needs_next_use(),
            next,
        };
        cache::concrete::with_simulator(self.map, cfg, profile, None, go)
    }

    /// The stream's next uses from their start: computed into `next` on first use.
    fn rewound<'n>(
        &self,
        next: &'n mut Option<next_use::NextUses>,
    ) -> Result<&'n mut next_use::NextUses> {
        match next {
            Some(n) => {
                n.rewind();
                Ok(n)
            }
            None => Ok(next.insert(self.next_uses()?)),
        }
    }

    /// Step `sim` over the stream, with next uses from `next` when the policy reads them.
    fn run<P: ?Sized + EvictionPolicy>(
        &self,
        mut sim: CacheSim<'_, P>,
        mut next: Option<&mut next_use::NextUses>,
    ) -> Result<(CacheOutcome, Streamed)> {
        let streamed = self.blocks(REPLAY_BLOCK_ACCESSES, |b| {
            let n = next.as_mut().map(|n| n.take(b.units.len())).transpose()?;
            for w in b.starts.windows(2) {
                let (from, to) = (w[0], w[1]);
                sim.group_next(&b.units[from..to], n.map(|n| &n[from..to]));
            }
            Ok(())
        })?;
        sim.add_tokens(streamed.tokens);
        let out = CacheOutcome {
            cache: sim.report(),
            tiers: sim.tiers(),
        };
        Ok((out, streamed))
    }
}
