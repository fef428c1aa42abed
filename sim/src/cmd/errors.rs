//! The words of an error for the command line: the libraries' typed errors say what to change
//! in their own terms (an expert size, a prefetch window); here they name the flag that sets it.

use policies::mechanisms::SizeError;
use sim::cache::CacheError;
use sim::engine::EngineError;
use sim::grid::GridError;

/// The message `sim` prints for `e`: its chain of causes joined by `: ` (as `{:#}` writes an
/// `anyhow::Error`), each typed cause in the words of its flag.
pub fn message(e: &anyhow::Error) -> String {
    e.chain()
        .map(|cause| flag_words(cause).unwrap_or_else(|| cause.to_string()))
        .collect::<Vec<_>>()
        .join(": ")
}

/// `cause` worded with the flags that fix it, for the typed errors that have flags.
fn flag_words(cause: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(e) = cause.downcast_ref::<SizeError>() {
        return Some(size_words(e));
    }
    if let Some(e) = cause.downcast_ref::<CacheError>() {
        return cache_words(e);
    }
    match cause.downcast_ref::<EngineError>()? {
        EngineError::Window { window, moe_layers } => Some(format!(
            "--window {window} is out of range: a predictor needs a lead of 1 to {moe_layers} MoE layers (one step)"
        )),
        _ => None,
    }
}

/// A grid error in the words of the flag that gave the axis.
pub fn grid_error(e: GridError, flag: &str) -> anyhow::Error {
    match e {
        GridError::ZeroChunk => {
            anyhow::anyhow!(
                "bad {flag} value 0; N must be at least 1 (e1 is one expert per commit)"
            )
        }
        GridError::Spec { source, .. } => {
            anyhow::Error::new(source).context(format!("bad {flag} value"))
        }
        GridError::NoSpecs => {
            anyhow::anyhow!("{flag} is empty; give at least one spec, e.g. {flag} e1,e2")
        }
    }
}

/// A cache-regime error in terms of `--batch`, `--queue`, `--split` and the target flags.
fn cache_words(e: &CacheError) -> Option<String> {
    Some(match e {
        CacheError::DramBudget(why) => format!("--dram: {why}"),
        CacheError::BatchZero => "--batch 0: a batch holds at least one request".into(),
        CacheError::QueueBelowBatch { queue, batch } => format!("--queue {queue} is smaller than --batch {batch}: the scheduler picks a batch among the queue, so give --queue >= --batch"),
        CacheError::SplitSpansLayers { unit, spec, first, last } => format!("--split per-layer needs units inside one layer, but unit {unit} of `{spec}` spans MoE layers {first}..={last}; use --split global or a per-expert mechanism (e1, eN, os*)"),
        CacheError::TargetNotPositive { target, link_gbps } => format!("--target-tokens-per-s {target} and --link-gbps {link_gbps} must be positive numbers"),
        _ => return None,
    })
}

/// A size error in terms of `--expert-mib`, `--dtype` and `--granule-mib`.
fn size_words(e: &SizeError) -> String {
    match e {
        SizeError::BothGiven => "--expert-mib and --dtype both given; give one (--dtype derives the size from the trace header's geometry, --expert-mib sets it directly)".into(),
        SizeError::ExpertNotPositive(x) => format!("--expert-mib {} is not a positive size; give the size of one expert in MiB, e.g. --expert-mib 3", mib(*x)),
        SizeError::ExpertZero(x) => format!("--expert-mib {} rounds to 0 bytes; give the size of one expert in MiB, e.g. --expert-mib 3", mib(*x)),
        SizeError::Missing { model } => format!("the expert size is unknown: the trace header of model `{model}` has no hidden and expert FFN sizes; give --expert-mib X (MiB per expert)"),
        SizeError::ExpertTooLarge(x) => format!("--expert-mib {} is above the limit of 1 TiB (1048576 MiB) per expert; give the size of one expert in MiB (e.g. --expert-mib 3 for 3 MiB), not in bytes or KiB", mib(*x)),
        SizeError::HeaderExpertTooLarge { model, bytes } => format!("the expert size derived from the trace header of model `{model}` is {bytes} bytes, above the limit of 1 TiB per expert; check the header's hidden and expert FFN sizes or give --expert-mib X (MiB per expert)"),
        SizeError::GranuleTooLarge(x) => format!("--granule-mib {} is above the limit of 1024 MiB (1 GiB, the largest page size of x86-64 and ARM64); the measured VMM granule is 2 MiB (the default)", mib(*x)),
        SizeError::GranuleNotPowerOfTwo(x) => format!("--granule-mib {} is not a power of two in bytes (accepted: 2, 1, 0.5, 4, 64, ... MiB; default 2)", mib(*x)),
    }
}

/// A size in MiB as the user would read it back: as given, or in exponent form when it would
/// print more than a dozen digits (`1e300`, not three hundred of them).
fn mib(x: f64) -> String {
    let plain = x.to_string();
    if plain.len() > 12 {
        format!("{x:e}")
    } else {
        plain
    }
}

/// Whether `e` is a write to a pipe whose reader has gone (stdout piped into `head`), as an
/// I/O error or as a trace writer's.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    let broken = |k: std::io::ErrorKind| k == std::io::ErrorKind::BrokenPipe;
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| broken(io.kind()))
            || c.downcast_ref::<traces::TraceError>()
                .and_then(traces::TraceError::io_kind)
                .is_some_and(broken)
    })
}

/// A front-door error ([`sim::run_with`]) as the `anyhow` chain the commands return: a run's
/// own error unwrapped (so that [`message`] still words its typed causes with their flags).
pub fn from_engine(e: sim::RunError) -> anyhow::Error {
    match e {
        sim::RunError::Run(e) => e,
        other => anyhow::Error::new(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn typed_causes_name_their_flags_and_the_chain_reads_as_before() {
        let e = Err::<(), _>(SizeError::ExpertZero(1e-9))
            .context("sweep row `e1`")
            .unwrap_err();
        assert_eq!(
            message(&e),
            "sweep row `e1`: --expert-mib 0.000000001 rounds to 0 bytes; give the size of one \
             expert in MiB, e.g. --expert-mib 3"
        );
        let w = anyhow::Error::new(EngineError::Window {
            window: 30,
            moe_layers: 24,
        });
        assert!(message(&w).starts_with("--window 30 is out of range"));
        let huge = anyhow::Error::new(SizeError::ExpertTooLarge(1e300));
        assert!(
            message(&huge).starts_with("--expert-mib 1e300 is above"),
            "{huge}"
        );
        // an untyped chain prints as `{:#}` does
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(message(&plain), format!("{plain:#}"));
    }
}
