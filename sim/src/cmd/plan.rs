//! `sim plan`: the largest expert budget that fits for each mechanism and retention policy,
//! ranked by tokens/s (the search is `sim::plan`).

use super::args_input::{emit, InputArgs};
use super::args_timing::TimingArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use policies::PolicyKind;
use sim::cache::{Batching, CacheConfig, RetentionConfig, Semantics, Split};
use sim::plan::{plan, PlanSpec};
use sim::runner::RunConfig;
use std::path::PathBuf;

/// The mechanisms planned when `--policies` is not given: one expert per commit and two
/// packings, the per-layer mechanisms every model supports.
const DEFAULT_MECHANISMS: &str = "e1,e2,e4";

/// The admission cap when `--admission-cap` is not given: all of the profile's usable VRAM
/// (the profile's usable figure already leaves out what the driver and display reserve).
const DEFAULT_ADMISSION_CAP: f64 = 1.0;

/// Arguments of `sim plan`.
#[derive(Args)]
#[command(
    after_help = "Without --admission-cap, sim plan caps mapped memory at 1.0 of the \
profile's usable VRAM (all of it: the profile's usable figure already leaves out what the driver \
and display reserve); give --admission-cap 0.9 to keep a tenth back."
)]
pub struct PlanArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Comma-separated mechanism specs to plan (same forms as `sim run --policy`).
    #[arg(long, value_delimiter = ',', value_name = "SPECS", default_value = DEFAULT_MECHANISMS)]
    pub policies: Vec<String>,

    /// Comma-separated retention policies to plan, or `all` (default: all).
    #[arg(long, value_delimiter = ',', value_name = "POLICY", default_value = "all",
          help = format!("Retention policies to plan: {}", super::args_cache::policy_values()))]
    pub evict: Vec<String>,

    /// Sequences decoding together; each holds its own KV cache.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,

    /// Seed of randomised policies and of the oversubscription jitter.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Print the plan as one JSON object instead of the recommendation and the table.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub timing: TimingArgs,
}

fn policies_of(names: &[String]) -> Result<Vec<PolicyKind>> {
    let mut out = Vec::new();
    for n in names {
        let kinds: Vec<PolicyKind> = if n.trim().eq_ignore_ascii_case("all") {
            PolicyKind::evict_all().collect()
        } else {
            vec![PolicyKind::parse(n).map_err(|m| anyhow::anyhow!("--evict: {m}"))?]
        };
        for k in kinds {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    Ok(out)
}

pub fn run(mut args: PlanArgs) -> Result<()> {
    if args.timing.hw.is_none() {
        bail!("`sim plan` prices tokens/s and memory on a GPU: give --hw rtx4060-laptop-wddm (or another, see `sim profile list`)");
    }
    if args.timing.timeline.is_some() {
        bail!(
            "--timeline writes one run's resources; it is a `sim run` option, not a `sim plan` one"
        );
    }
    args.timing.admission_cap = args.timing.admission_cap.or(Some(DEFAULT_ADMISSION_CAP));
    let mechanisms = sim::grid::canonical_specs(&args.policies)
        .map_err(|e| super::errors::grid_error(e, "--policies"))?;
    let batch = usize::try_from(args.batch).context("--batch")?;
    let spec = PlanSpec {
        base: RunConfig {
            phase: args.input.phase,
            sizes: args.input.sizes(),
            timing: args.timing.for_run(args.seed)?,
            ..RunConfig::default()
        },
        retention: RetentionConfig {
            cache: CacheConfig {
                policy: PolicyKind::Lru,
                budget: policies::Budget::Units(1),
                split: Split::Global,
                semantics: Semantics::Group,
                dram: None,
                seed: args.seed,
            },
            batching: Batching {
                batch,
                ..Batching::default()
            },
            target: None,
        },
        mechanisms,
        policies: policies_of(&args.evict)?,
    };
    let workload = args.input.workload()?;
    let p = plan(&spec, &workload)?;
    let text = if args.json {
        serde_json::to_string_pretty(&p)? + "\n"
    } else {
        format!("{}\n\n{}", p.recommendation(), p.table())
    };
    emit(args.out.as_deref(), &text)
}
