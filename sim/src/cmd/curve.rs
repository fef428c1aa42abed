//! `sim curve`: the exact page-ins of LRU and Belady/MIN at every budget, in one pass.

use super::args_input::{emit, EmbeddedFile, InputArgs};
use anyhow::Result;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use policies::PolicyKind;
use sim::bounded::curve::{curve_file, passes, CurveConfig};
use sim::cache::{Budget, Semantics, Split};
use sim::curve::text::{table, Row};
use std::path::PathBuf;

/// Arguments of `sim curve`.
#[derive(Args)]
pub struct CurveArgs {
    #[command(flatten)]
    pub input: InputArgs,

    #[arg(long, default_value = "e2", value_name = "SPEC",
          help = format!("Residency mechanism, one of: {}", policies::mechanisms::forms_help()))]
    pub policy: String,

    /// Eviction policies whose curves to record, comma-separated: lru, belady (the stack
    /// policies with an exact curve).
    #[arg(long, value_delimiter = ',', value_name = "POLICY", default_value = "lru,belady",
          value_parser = |s: &str| PolicyKind::parse(s))]
    pub evict: Vec<PolicyKind>,

    /// How the budget is shared: global (one pool) or per-layer (each MoE layer its share of
    /// the budget, as `sim run --split per-layer --budget <units>` splits it).
    #[arg(long, default_value = "global", value_name = "SPLIT",
          value_parser = PossibleValuesParser::new(["global", "per-layer"])
              .map(|s| if s == "per-layer" { Split::PerLayer } else { Split::Global }))]
    pub split: Split,

    /// When eviction is checked: group (default) or access, as in `sim run`.
    #[arg(long, default_value = "group", value_name = "SEMANTICS",
          value_parser = PossibleValuesParser::new(["group", "access"])
              .map(|s| if s == "access" { Semantics::Access } else { Semantics::Group }))]
    pub semantics: Semantics,

    /// Budgets the table prints (the knees are added), comma-separated, in `--budget`'s forms
    /// (`25%`, `192`, `3GiB`). `--json` holds every budget whatever this says.
    #[arg(long, value_delimiter = ',', value_name = "BUDGET",
          default_value = "10%,25%,50%,75%,90%", value_parser = |s: &str| Budget::parse(s))]
    pub points: Vec<Budget>,

    /// Total budgets, comma-separated in `--budget`'s forms, at which to split the bank over
    /// the MoE layers curve-optimally: the layer budgets (from each layer's exact curve) with
    /// the fewest page-ins, against the global split and the equal per-layer split of the
    /// same budget (one more pass for the other split). An `allocations` key in --json.
    #[arg(long, value_delimiter = ',', value_name = "BUDGET",
          value_parser = |s: &str| Budget::parse(s))]
    pub allocate: Vec<Budget>,

    /// Print one JSON object with the page-ins at every budget (and each layer's curve under
    /// the per-layer split) instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub progress: super::args_progress::ProgressArgs,
}

/// Said when the trace records forward passes: a curve steps one token per sequence, so its
/// page-ins are not those of the passes as served (`sim run`'s default on such a trace).
const PASSES_IGNORED: &str = "note: the trace records its forward passes, but a curve steps \
    one token per sequence round-robin (as `sim run --batching fixed`), not the passes as served";

pub fn run(args: CurveArgs) -> Result<()> {
    let cfg = CurveConfig {
        mechanism: args.policy.clone(),
        phase: args.input.phase,
        sizes: args.input.sizes(),
        policies: args.evict.clone(),
        split: args.split,
        semantics: args.semantics,
    };
    let embedded = match args.input.one_trace()? {
        Some(_) => None,
        None => Some(EmbeddedFile::create()?),
    };
    let path = args
        .input
        .one_trace()?
        .or(embedded.as_ref().map(EmbeddedFile::path))
        .expect("a trace file or the embedded one");
    if traces::read_header(path).is_ok_and(|h| h.passes.is_some()) {
        eprintln!("{PASSES_IGNORED}");
    }
    let tokens = super::args_progress::header_tokens(path, cfg.phase);
    let bar = args
        .progress
        .bar(
            "sim curve",
            passes(&cfg) * tokens,
            "tokens read, all passes",
        )
        .growing_by(tokens);
    let profile = args.input.profile_trace.as_deref();
    let report = curve_file(&cfg, path, profile, &|n| bar.inc(n));
    bar.finish();
    let mut report = report?;
    if embedded.is_some() {
        report.trace = sim::runner::EMBEDDED_PROSE_LABEL.to_string();
    }
    let allocations = match args.allocate.is_empty() {
        true => Vec::new(),
        false => {
            let other = CurveConfig {
                split: match cfg.split {
                    Split::Global => Split::PerLayer,
                    Split::PerLayer => Split::Global,
                },
                ..cfg.clone()
            };
            let second = curve_file(&other, path, profile, &|_| {})?;
            let (global, per_layer) = match cfg.split {
                Split::Global => (&report, &second),
                Split::PerLayer => (&second, &report),
            };
            let budgets = args
                .allocate
                .iter()
                .map(|b| b.resolve(report.units, report.largest_unit_bytes))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow::anyhow!("--allocate: {e}"))?;
            sim::curve::split::compare(global, per_layer, &budgets)
        }
    };
    let text = if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let (false, Some(o)) = (allocations.is_empty(), v.as_object_mut()) {
            o.insert("allocations".into(), serde_json::to_value(&allocations)?);
        }
        serde_json::to_string_pretty(&v)? + "\n"
    } else if !allocations.is_empty() {
        sim::curve::split::table(&allocations)
    } else {
        let rows = args
            .points
            .iter()
            .map(|b| {
                let units = b.resolve(report.units, report.largest_unit_bytes)?;
                Ok(Row {
                    label: b.describe(),
                    units,
                })
            })
            .collect::<Result<Vec<_>, sim::cache::budget::BudgetError>>()
            .map_err(|e| anyhow::anyhow!("--points: {e}"))?;
        table(&report, &rows)
    };
    emit(args.out.as_deref(), &text)
}
