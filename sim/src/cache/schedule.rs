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
    if batch == 0 {
        return Err(CacheError::BatchZero);
    }
    if let Some(q) = queue {
        if q < batch {
            return Err(CacheError::QueueBelowBatch { queue: q, batch });
        }
    }
    if schedule == Schedule::Fifo {
        let batches = requests.chunks(batch).map(<[Request]>::to_vec).collect();
        return Ok((batches, vec![0i64; requests.len()]));
    }
    let window = queue.unwrap_or(batch);
    let units_of_request = |r: &Request| -> Vec<u32> {
        let mut out = Vec::new();
        for t in r.tokens() {
            let rec = trace.token(ks, r.sequence as usize, r.phase, t);
            for m in 0..ks.num_moe_layers() {
                for &e in &rec[ks.sel_offsets[m]..ks.sel_offsets[m + 1]] {
                    out.extend(map.units_of(ks.key(m, e)));
                }
            }
        }
        out
    };
    // Waiting requests as arrival indices, oldest first.
    let mut waiting: std::collections::VecDeque<usize> = (0..requests.len()).collect();
    let mut in_union = vec![0u32; map.num_units()];
    let mut stamp = 0u32;
    let mut batches = Vec::new();
    let mut delay = vec![0i64; requests.len()];
    let mut dispatched = 0usize;
    while !waiting.is_empty() {
        stamp += 1;
        let w = window.min(waiting.len());
        let mut candidates: Vec<(usize, Vec<u32>)> = waiting
            .iter()
            .take(w)
            .map(|&i| (i, units_of_request(&requests[i])))
            .collect();
        // At most w requests are picked (w <= waiting requests); `batch` itself is a flag value.
        let mut picked = Vec::with_capacity(batch.min(w));
        // The oldest always goes first; then the least growth, ties to the earliest arrival
        // (candidates are in arrival order and `min_by_key` keeps the first minimum).
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
        for &i in &picked {
            delay[i] = dispatched as i64 - i as i64;
            dispatched += 1;
        }
        waiting.retain(|i| !picked.contains(i));
        batches.push(picked.iter().map(|&i| requests[i]).collect());
    }
    Ok((batches, delay))
}

/// Summarise dispatch delays (one per request) and the stream's unions.
pub fn schedule_report(delays: &[i64], accesses: u64, tokens: u64) -> ScheduleReport {
    // The histogram holds non-negative values: record delays shifted by the smallest.
    let lo = delays.iter().copied().min().unwrap_or(0);
    let mut h = Histogram::<u64>::new(5).expect("5 significant figures is valid");
    for &d in delays {
        h.record((d - lo) as u64)
            .expect("auto-resizing histogram records any u64");
    }
    let q = |p: f64| {
        if delays.is_empty() {
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
        delay_max: if delays.is_empty() {
            0
        } else {
            h.max() as i64 + lo
        },
    }
}
