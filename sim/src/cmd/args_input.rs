//! Input options shared by `sim run` and `sim sweep`: the trace, the phase, the profile trace
//! and the sizes the mechanisms need (expert size, dtype, granule); plus the atomic output
//! helper both commands use.

use anyhow::{Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use policies::mechanisms::SizeOptions;
use sim::runner::{TraceInput, Workload};
use std::io::Write;
use std::path::{Path, PathBuf};
use traces::{DType, PhaseSel};

/// Which trace to replay and how big its experts are.
#[derive(Args, Clone, Debug)]
pub struct InputArgs {
    /// Trace file (the `sim trace` binary format). Default: the bundled granite-3.0-1b-a400m
    /// prose trace, embedded in the binary.
    #[arg(long, value_name = "FILE")]
    pub trace: Vec<PathBuf>,

    /// Phases of the trace to replay: decode (generated tokens), prefill (prompt tokens) or
    /// all. The profile trace is read with the same phases.
    #[arg(long, default_value = "decode", value_name = "PHASE",
          value_parser = phase_parser())]
    pub phase: PhaseSel,

    /// Trace to learn from instead of the evaluated one: its selection counts order experts
    /// for the `hot` and `coact` chunk orders and choose the units `static-pin` and `pin-lru`
    /// pin (default: the evaluated trace itself), and the learning predictors (`static`,
    /// `next-layer`, `eam`) learn from it (default: online, from the run's earlier tokens).
    /// Must come from the same model.
    #[arg(long, value_name = "FILE")]
    pub profile_trace: Option<PathBuf>,

    /// Size of one expert in MiB (may be fractional), instead of deriving it from the trace
    /// header's hidden and expert FFN sizes. Conflicts with --dtype.
    #[arg(long, value_name = "MIB", allow_negative_numbers = true)]
    pub expert_mib: Option<f64>,

    /// Weight dtype for deriving the expert size from the header geometry (3 x hidden x
    /// expert FFN parameters): bf16 (default), fp16, fp8, int4 (with one fp16 scale per 128
    /// weights), int4-noscale, nvfp4, mxfp4.
    #[arg(long, value_name = "DTYPE",
          value_parser = dtype_parser())]
    pub dtype: Option<DType>,

    /// VMM allocation granule in MiB, a power of two in bytes (default 2, the granule
    /// measured on the RTX 4060 Laptop and the H200). Ignored by the os* mechanisms.
    #[arg(long, value_name = "MIB", allow_negative_numbers = true)]
    pub granule_mib: Option<f64>,
}

/// The `--phase` value parser of every command that replays traces: decode, prefill, all.
pub fn phase_parser() -> impl TypedValueParser<Value = PhaseSel> {
    PossibleValuesParser::new(["decode", "prefill", "all"]).map(|s| match s.as_str() {
        "prefill" => PhaseSel::Prefill,
        "all" => PhaseSel::All,
        _ => PhaseSel::Decode,
    })
}

/// The `--dtype` value parser of every command that sizes experts from the header geometry.
pub fn dtype_parser() -> impl TypedValueParser<Value = DType> {
    PossibleValuesParser::new([
        "bf16",
        "fp16",
        "fp8",
        "int4",
        "int4-noscale",
        "nvfp4",
        "mxfp4",
    ])
    .map(|s| DType::parse(&s).expect("every listed name is a DType"))
}

impl InputArgs {
    /// The size options for [`sim::runner::RunConfig`].
    pub fn sizes(&self) -> SizeOptions {
        SizeOptions {
            expert_mib: self.expert_mib,
            dtype: self.dtype,
            granule_mib: self.granule_mib,
        }
    }

    /// The one trace file of a command that replays one (`None`: the embedded trace); an
    /// error naming `--trace` when it was given several times.
    pub fn one_trace(&self) -> Result<Option<&Path>> {
        match &self.trace[..] {
            [] => Ok(None),
            [p] => Ok(Some(p)),
            many => anyhow::bail!(
                "--trace was given {} times, but this command replays one trace; give --trace once (`sim sweep` takes several, one set of rows per trace)",
                many.len()
            ),
        }
    }

    /// Load the trace and the profile trace (one trace: see [`InputArgs::one_trace`]).
    pub fn workload(&self) -> Result<Workload> {
        self.workload_of(self.one_trace()?)
    }

    /// Every `--trace` in the order given (`[None]`, the embedded trace, when none was
    /// given), for a command that replays them one after the other.
    pub fn traces(&self) -> Vec<Option<&Path>> {
        if self.trace.is_empty() {
            return vec![None];
        }
        self.trace.iter().map(|p| Some(p.as_path())).collect()
    }

    /// The workload of the trace at `path` (the embedded trace when `None`) with the profile
    /// trace.
    pub fn workload_of(&self, path: Option<&Path>) -> Result<Workload> {
        let trace = match path {
            Some(p) => TraceInput::load(Some(p)).context("--trace")?,
            None => TraceInput::load(None)?,
        };
        let profile = match &self.profile_trace {
            Some(p) => Some(TraceInput::load(Some(p)).context("--profile-trace")?),
            None => None,
        };
        Workload::new(trace, profile)
    }
}

/// The embedded prose trace in a temporary file, for a run on it with a `--profile-trace`:
/// the file paths stream the profile where the in-memory path would load it whole (any
/// length: a 1 M-token profile is about 1 GB loaded). [`EmbeddedFile::relabel`] gives the
/// reports back the label `embedded:prose`; the file is removed when this is dropped.
pub struct EmbeddedFile {
    file: tempfile::NamedTempFile,
    /// Removes the file if a signal ends the process (no destructor runs then).
    _registered: traces::cleanup::Registered,
}

impl EmbeddedFile {
    /// Check the profile trace at `profile` against the embedded trace, as the in-memory path
    /// does (so its errors name `embedded:prose`), then write the embedded trace to a new file
    /// in the temporary directory. Errors: the profile's header or model, or the file cannot
    /// be created or written (naming the directory and TMPDIR).
    pub fn write(profile: &Path) -> Result<EmbeddedFile> {
        Self::check(profile)?;
        Self::create()
    }

    /// Check the profile trace at `profile` against the embedded trace, as the in-memory path
    /// does (so its errors name `embedded:prose` and the flag).
    pub fn check(profile: &Path) -> Result<()> {
        let embedded = TraceInput::load(None)?;
        sim::runner::require_trace_file(profile).context("--profile-trace")?;
        let header = traces::read_header(profile).context("--profile-trace")?;
        sim::runner::check_workload(
            (&embedded.label, &embedded.trace.keyspace()),
            Some((
                &profile.display().to_string(),
                &traces::KeySpace::new(&header.model),
            )),
        )
    }

    /// Write the embedded trace to a new file in the temporary directory, for a command that
    /// streams it (`sim curve`). Errors: the file cannot be created or written (naming the
    /// directory and TMPDIR).
    pub fn create() -> Result<EmbeddedFile> {
        let dir = std::env::temp_dir();
        let mut file = tempfile::NamedTempFile::new_in(&dir)
            .and_then(|mut f| f.write_all(sim::runner::EMBEDDED_PROSE).map(|()| f))
            .with_context(|| {
                format!(
                    "writing the embedded prose trace to a temporary file in {} (it is \
                     streamed from there): set TMPDIR (TMP on Windows) to a writable \
                     directory, or give --trace traces/data/granite/prose.bin",
                    dir.display()
                )
            })?;
        file.flush()?;
        let _registered = traces::cleanup::register(file.path());
        Ok(EmbeddedFile { file, _registered })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Name the embedded trace in `report` as the in-memory path does.
    pub fn relabel(&self, report: &mut sim::runner::RunReport) {
        let path = self.path().display().to_string();
        if report.inputs.trace == path {
            report.inputs.trace = sim::runner::EMBEDDED_PROSE_LABEL.to_string();
        }
    }
}

/// Write `text` to `out` atomically ([`write_atomic`]) and name the file on stderr, or print
/// it to stdout when `out` is `None`.
pub fn emit(out: Option<&Path>, text: &str) -> Result<()> {
    match out {
        None => {
            let mut o = std::io::stdout().lock();
            o.write_all(text.as_bytes())?;
            o.flush()?;
        }
        Some(path) => {
            write_atomic(path, text.as_bytes()).context("--out")?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// Print `value` to stdout as pretty JSON and a newline ([`emit`]).
pub fn emit_json(value: &impl serde::Serialize) -> Result<()> {
    emit(None, &(serde_json::to_string_pretty(value)? + "\n"))
}

pub use sim::output::write_atomic;
