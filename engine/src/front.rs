//! The front door: [`run`] replays one trace, whatever its source, under one [`RunConfig`]
//! and returns its [`RunReport`]. A trace file is streamed in bounded memory (the production
//! path, [`crate::bounded::run_file`]); bytes and the bundled trace with a profile trace are
//! written to a temporary file and streamed the same way; a trace already in memory is
//! replayed by the loaded pipeline ([`crate::runner::run`]), the streamed path's test oracle.

use crate::bounded::Tick;
use crate::runner::{self, RunConfig, RunReport, TraceInput, Workload};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where a run's trace comes from.
#[derive(Debug)]
pub enum TraceSource {
    /// A trace file, streamed in bounded memory.
    File(PathBuf),
    /// An encoded trace file's bytes, written to a temporary file and streamed; the reports
    /// name it [`BYTES_LABEL`].
    Bytes(Vec<u8>),
    /// The bundled prose trace ([`runner::EMBEDDED_PROSE`], named
    /// [`runner::EMBEDDED_PROSE_LABEL`]).
    Bundled,
    /// A trace in memory, replayed by the loaded pipeline (the test oracle of the streamed
    /// path); the reports name it [`MEMORY_LABEL`].
    Loaded(Box<traces::Trace>),
}

/// The trace label of a run on [`TraceSource::Bytes`].
pub const BYTES_LABEL: &str = "bytes";
/// The trace label of a run on [`TraceSource::Loaded`].
pub const MEMORY_LABEL: &str = "memory";

/// Why a run did not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The trace could not be written to a temporary file for streaming.
    #[error(
        "writing the trace to a temporary file in {} (it is streamed from there): set TMPDIR \
         (TMP on Windows) to a writable directory, or run on a trace file",
        dir.display()
    )]
    TempFile {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The run itself failed: a trace or profile that does not read, a configuration the
    /// pipeline refuses (the message says which and how to fix it).
    #[error("{0:#}")]
    Run(anyhow::Error),
}

impl From<anyhow::Error> for RunError {
    fn from(e: anyhow::Error) -> Self {
        RunError::Run(e)
    }
}

/// Replay `trace` under `cfg`; the evaluated trace is its own profile (for `hot` and `coact`
/// orders).
///
/// ```
/// use engine::{run, RunConfig, TraceSource};
/// let report = run(&RunConfig::default(), TraceSource::Bundled).unwrap();
/// assert_eq!(report.inputs.trace, "embedded:prose");
/// ```
pub fn run(cfg: &RunConfig, trace: TraceSource) -> Result<RunReport, RunError> {
    run_with(cfg, trace, None, &|_| {})
}

/// [`run`] with a profile trace file (`None`: the evaluated trace profiles itself) and
/// `tick(n)` called as n more tokens of a streamed pass are read (a progress bar's hook).
pub fn run_with(
    cfg: &RunConfig,
    trace: TraceSource,
    profile: Option<&Path>,
    tick: Tick,
) -> Result<RunReport, RunError> {
    match trace {
        TraceSource::File(path) => Ok(crate::bounded::run_file(cfg, &path, profile, tick)?),
        TraceSource::Bundled if profile.is_none() => Ok(runner::run(
            cfg,
            &Workload::new(TraceInput::load(None)?, None)?,
        )?),
        TraceSource::Bundled => streamed(
            cfg,
            runner::EMBEDDED_PROSE,
            runner::EMBEDDED_PROSE_LABEL,
            profile,
            tick,
        ),
        TraceSource::Bytes(bytes) => streamed(cfg, &bytes, BYTES_LABEL, profile, tick),
        TraceSource::Loaded(trace) => {
            let trace = TraceInput {
                label: MEMORY_LABEL.to_string(),
                trace: *trace,
            };
            let profile = profile.map(|p| TraceInput::load(Some(p))).transpose()?;
            Ok(runner::run(cfg, &Workload::new(trace, profile)?)?)
        }
    }
}

impl crate::cache::RetentionConfig {
    /// Retention by `policy` under `budget`, everything else at its default: one global
    /// budget, the default semantics, no DRAM tier, seed 0, one token of one sequence per
    /// step, no tokens/s target.
    pub fn new(policy: policies::PolicyKind, budget: policies::Budget) -> Self {
        crate::cache::RetentionConfig {
            cache: crate::cache::CacheConfig {
                policy,
                budget,
                split: Default::default(),
                semantics: Default::default(),
                dram: None,
                seed: 0,
            },
            batching: Default::default(),
            target: None,
        }
    }
}

/// Stream the trace file `bytes` from a temporary file, naming it `label` in the report.
fn streamed(
    cfg: &RunConfig,
    bytes: &[u8],
    label: &str,
    profile: Option<&Path>,
    tick: Tick,
) -> Result<RunReport, RunError> {
    let dir = std::env::temp_dir();
    let file = tempfile::NamedTempFile::new_in(&dir)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.flush()).map(|()| f))
        .map_err(|source| RunError::TempFile {
            dir: dir.clone(),
            source,
        })?;
    let _registered = traces::cleanup::register(file.path());
    let mut report = crate::bounded::run_file(cfg, file.path(), profile, tick)?;
    if report.inputs.trace == file.path().display().to_string() {
        report.inputs.trace = label.to_string();
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundled trace streamed from bytes (the production path) and loaded (the oracle)
    /// give the same report, but for the trace's name.
    #[test]
    fn streamed_bytes_match_the_loaded_trace() {
        let cfg = RunConfig::default();
        let streamed = run(&cfg, TraceSource::Bytes(runner::EMBEDDED_PROSE.to_vec())).unwrap();
        let loaded = run(&cfg, TraceSource::Bundled).unwrap();
        assert_eq!(streamed.inputs.trace, BYTES_LABEL);
        assert_eq!(loaded.inputs.trace, runner::EMBEDDED_PROSE_LABEL);
        assert!(streamed.streaming.is_some());
        assert_eq!(streamed.streaming, loaded.streaming);
    }

    /// Bytes that are no trace are refused with the reader's error, not a panic.
    #[test]
    fn bytes_that_are_no_trace_are_an_error() {
        let e = run(
            &RunConfig::default(),
            TraceSource::Bytes(b"not a trace".to_vec()),
        );
        assert!(matches!(e, Err(RunError::Run(_))), "{e:?}");
    }
}
