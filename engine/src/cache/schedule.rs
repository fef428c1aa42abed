//! Batching and route-aware scheduling of requests.

use super::stream::Request;
use super::{Batching, CacheError};
use hdrhistogram::Histogram;
use policies::UnitMap;
use traces::{KeySpace, PhaseSel, Trace};

/// How batches are formed (defined beside the budget in `policies`), and the `schedule`
/// block of a run report (defined beside the other report blocks).
pub use policies::regime::Schedule;
pub use reports::run::ScheduleReport;

/// The trace's requests of `phases` (one chunk of a sequence each, as `batching.stepping`
/// takes them), interleaved round-robin across sequences, formed into batches as `batching`
/// says: the batches and each request's dispatch delay.
pub fn batches_of(
    trace: &Trace,
    ks: &KeySpace,
    map: &UnitMap,
    phases: PhaseSel,
    batching: Batching,
) -> Result<(Vec<Vec<Request>>, Vec<i64>), CacheError> {
    let passes = match batching.source {
        super::StepSource::Fixed => None,
        super::StepSource::Recorded => Some(recorded_batches(trace, phases)?),
        super::StepSource::Continuous(c) => {
            let passes = super::continuous::ContinuousPasses::new(&trace.header.sequences, c);
            Some(passes_as_batches(trace, passes, phases))
        }
    };
    if let Some(batches) = passes {
        let n = batches.iter().map(Vec::len).sum();
        return Ok((batches, vec![0; n]));
    }
    let requests = super::stream::round_robin_chunks(trace, phases, &batching.stepping);
    form_batches(
        trace,
        ks,
        map,
        &requests,
        batching.batch,
        batching.queue,
        batching.schedule,
    )
}

/// The trace's recorded forward passes as batches (`--batching recorded`): each pass one
/// batch holding exactly its rows of `phases`, in the pass's order, a run of consecutive
/// tokens of one sequence and phase being one request (prompt rows produce one token each, as
/// decode rows do). A pass with no row of `phases` is left out. Errors when the trace has no
/// passes.
pub fn recorded_batches(trace: &Trace, phases: PhaseSel) -> Result<Vec<Vec<Request>>, CacheError> {
    let Some(passes) = &trace.header.passes else {
        return Err(CacheError::Input(recorded_batches_missing()));
    };
    Ok(passes_as_batches(trace, passes.iter().cloned(), phases))
}

/// `passes` (each a run of the next tokens of its sequences, taking every token once) as
/// batches: each pass one batch of its rows of `phases`, a run's phase one request; a pass
/// with no row of `phases` is left out.
pub fn passes_as_batches(
    trace: &Trace,
    passes: impl Iterator<Item = traces::Pass>,
    phases: PhaseSel,
) -> Vec<Vec<Request>> {
    // Tokens of each sequence taken so far (prefill first, then decode).
    let mut taken = vec![0u64; trace.header.sequences.len()];
    let mut batches = Vec::new();
    for pass in passes {
        let mut batch = Vec::new();
        for run in &pass.runs {
            let s = run.sequence as usize;
            let info = &trace.header.sequences[s];
            let (from, to) = (taken[s], taken[s] + u64::from(run.tokens));
            taken[s] = to;
            let prefill = (from.min(info.prefill_tokens), to.min(info.prefill_tokens));
            let decode = (from.max(prefill.1), to);
            for (phase, (a, b), base) in [
                (traces::Phase::Prefill, prefill, 0),
                (traces::Phase::Decode, decode, info.prefill_tokens),
            ] {
                if b > a && phases.includes(phase) {
                    let len = (b - a) as u32;
                    batch.push(Request {
                        sequence: run.sequence,
                        phase,
                        token: (a - base) as u32,
                        len,
                        produced: len,
                    });
                }
            }
        }
        if !batch.is_empty() {
            batches.push(batch);
        }
    }
    batches
}

/// Why a trace without passes cannot be replayed as recorded.
pub fn recorded_batches_missing() -> String {
    "--batching recorded replays the trace's forward passes, but this trace has none (import a log whose position field restarts at each pass, or use --batching fixed)".into()
}

/// Form batches of `batch` requests from `requests` (arrival order). With `queue`, the
/// route-aware schedule picks among the `queue` oldest waiting requests; the FIFO schedule
/// ignores the window. Returns the batches and each request's dispatch delay in arrival
/// order. Errors when `batch` is 0 or `queue < batch`.
pub fn form_batches(
    trace: &Trace,
    ks: &KeySpace,
    map: &UnitMap,
    requests: &[Request],
    batch: usize,
    queue: Option<usize>,
    schedule: Schedule,
) -> Result<(Vec<Vec<Request>>, Vec<i64>), CacheError> {
    check_batching(batch, queue)?;
    if schedule == Schedule::Fifo {
        let batches = requests.chunks(batch).map(<[Request]>::to_vec).collect();
        return Ok((batches, vec![0i64; requests.len()]));
    }
    let window = queue.unwrap_or(batch);
    let units_of_request = |r: &Request| -> Vec<u32> {
        let mut out = Vec::new();
        for t in r.tokens() {
            record_units(
                ks,
                map,
                trace.token(ks, r.sequence as usize, r.phase, t),
                &mut out,
            );
        }
        out
    };
    // Waiting requests as arrival indices, oldest first.
    let mut waiting: std::collections::VecDeque<usize> = (0..requests.len()).collect();
    let mut union = Union::new(map.num_units());
    let mut batches = Vec::new();
    let mut delay = vec![0i64; requests.len()];
    let mut dispatched = 0usize;
    while !waiting.is_empty() {
        let w = window.min(waiting.len());
        let candidates: Vec<(usize, Vec<u32>)> = waiting
            .iter()
            .take(w)
            .map(|&i| (i, units_of_request(&requests[i])))
            .collect();
        let picked = pick_batch(candidates, batch, &mut union);
        for &i in &picked {
            delay[i] = dispatched as i64 - i as i64;
            dispatched += 1;
        }
        waiting.retain(|i| !picked.contains(i));
        batches.push(picked.iter().map(|&i| requests[i]).collect());
    }
    Ok((batches, delay))
}

/// The errors of [`form_batches`]: a batch of 0, or a queue shorter than the batch.
pub fn check_batching(batch: usize, queue: Option<usize>) -> Result<(), CacheError> {
    if batch == 0 {
        return Err(CacheError::BatchZero);
    }
    match queue {
        Some(q) if q < batch => Err(CacheError::QueueBelowBatch { queue: q, batch }),
        _ => Ok(()),
    }
}

/// Append every unit of every expert the token record `rec` selects to `out`, in selection
/// order (every MoE layer in order; repeats kept): what the route-aware pick weighs.
pub fn record_units(ks: &KeySpace, map: &UnitMap, rec: &[u16], out: &mut Vec<u32>) {
    for m in 0..ks.num_moe_layers() {
        for &e in &rec[ks.sel_offsets[m]..ks.sel_offsets[m + 1]] {
            out.extend(map.units_of(ks.key(m, e)));
        }
    }
}

/// The units of a batch being picked, as generation stamps (reused across batches).
pub struct Union {
    stamp: Vec<u32>,
    gen: u32,
}

impl Union {
    /// An empty union over `num_units` units.
    pub fn new(num_units: usize) -> Union {
        Union {
            stamp: vec![0; num_units],
            gen: 0,
        }
    }
}

/// The route-aware pick of one batch of at most `batch` requests among `candidates` (each an
/// id and the units its selections hold, oldest first): the oldest always goes first; then
/// the one adding the fewest distinct units to the batch's union, ties to the earliest
/// arrival. Returns the picked ids in pick order.
pub fn pick_batch(
    mut candidates: Vec<(usize, Vec<u32>)>,
    batch: usize,
    union: &mut Union,
) -> Vec<usize> {
    union.gen += 1;
    let stamp = union.gen;
    let in_union = &mut union.stamp;
    // At most w requests are picked (w <= waiting requests); `batch` itself is a flag value.
    let mut picked = Vec::with_capacity(batch.min(candidates.len()));
    // `min_by_key` keeps the first minimum: candidates are in arrival order.
    let mut next = 0usize;
    loop {
        let (i, units) = candidates.remove(next);
        for u in units {
            in_union[u as usize] = stamp;
        }
        picked.push(i);
        if picked.len() == batch || candidates.is_empty() {
            break;
        }
        next = candidates
            .iter()
            .enumerate()
            .min_by_key(|(_, (_, us))| {
                // Distinct new units (a unit shared by two selected experts counts once).
                let mut seen: Vec<u32> = us
                    .iter()
                    .copied()
                    .filter(|&u| in_union[u as usize] != stamp)
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                seen.len()
            })
            .map(|(k, _)| k)
            .expect("candidates is not empty");
    }
    picked
}

/// Summarise dispatch delays (one per request) and the stream's unions.
pub fn schedule_report(delays: &[i64], accesses: u64, tokens: u64) -> ScheduleReport {
    let mut counts = DelayCounts::default();
    delays.iter().for_each(|&d| counts.add(d));
    counts.report(accesses, tokens)
}

/// Dispatch delays counted by value: what [`schedule_report`] reads of them, in memory that
/// grows with the distinct delays (a route-aware window of Q requests at batch B keeps each
/// within about Q x B of its arrival), not with the requests.
#[derive(Clone, Debug, Default)]
pub struct DelayCounts(std::collections::BTreeMap<i64, u64>);

impl DelayCounts {
    /// Count one request's delay.
    pub fn add(&mut self, delay: i64) {
        *self.0.entry(delay).or_default() += 1;
    }

    /// The `schedule` block of the counted delays, with the stream's `accesses` and `tokens`.
    pub fn report(&self, accesses: u64, tokens: u64) -> ScheduleReport {
        // The histogram holds non-negative values: record delays shifted by the smallest.
        let lo = self.0.keys().next().copied().unwrap_or(0);
        let mut h = Histogram::<u64>::new(5).expect("5 significant figures is valid");
        for (&d, &n) in &self.0 {
            h.record_n((d - lo) as u64, n)
                .expect("auto-resizing histogram records any u64");
        }
        let empty = self.0.is_empty();
        let q = |p: f64| {
            if empty {
                0
            } else {
                h.value_at_quantile(p) as i64 + lo
            }
        };
        ScheduleReport {
            unions_per_token: if tokens == 0 {
                0.0
            } else {
                accesses as f64 / tokens as f64
            },
            delay_p50: q(0.5),
            delay_p99: q(0.99),
            delay_max: if empty { 0 } else { h.max() as i64 + lo },
        }
    }
}
