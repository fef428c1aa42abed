//! `sim plan --engine`: the recommendation in an inference engine's own command-line flags,
//! where the engine can express it, and a plain statement where it cannot (ktransformers,
//! vLLM and SGLang in [`crate::plan_engines`]).
//!
//! llama.cpp (its `common/arg.cpp`; every flag is cited in `sim/tests/plan.rs`) places the
//! expert tensors statically when it loads the model, a whole layer's experts at a time: `-ngl
//! 99` puts every layer on the GPU, `--cpu-moe` keeps every MoE weight in host memory and
//! computes it there, `--n-cpu-moe N` does so for the first N layers (blocks `blk.0` to
//! `blk.N-1`, dense ones included). It has no expert cache: it cannot page experts in and out
//! as the planned retention policies do, nor pin the hottest experts of a layer.

use crate::plan::{Plan, PlanRow};
use serde::Serialize;
use traces::ModelSpec;

/// The engines `--engine` names.
pub const ENGINES: [&str; 4] = ["llama.cpp", "ktransformers", "vllm", "sglang"];

/// How an engine realises the recommendation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Realisation {
    pub engine: String,
    /// The command line, when the engine can express the recommendation (or, with `exact`
    /// false, the closest setting it can express).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Whether `command` is the recommendation itself rather than the closest setting.
    pub exact: bool,
    /// What the command does, or why the engine cannot express the recommendation.
    pub notes: Vec<String>,
}

/// The recommendation of `plan` (of a trace of `model`) in `engine`'s flags.
pub fn realise(engine: &str, plan: &Plan, model: &ModelSpec) -> Realisation {
    let mut out = Realisation {
        engine: engine.to_string(),
        command: None,
        exact: false,
        notes: Vec::new(),
    };
    let Some(row) = plan.recommended.map(|i| &plan.rows[i]) else {
        out.notes
            .push("nothing fits, so there is nothing to realise".into());
        return out;
    };
    let setting = crate::plan_engines::Setting::of(plan, row, model);
    match (engine, setting) {
        ("llama.cpp", _) => llama_cpp(&mut out, plan, row, model),
        ("ktransformers", Some(s)) => crate::plan_engines::ktransformers(&mut out, &s),
        ("vllm", Some(s)) => crate::plan_engines::vllm(&mut out, &s),
        ("sglang", Some(s)) => crate::plan_engines::sglang(&mut out, &s),
        (_, None) => out
            .notes
            .push("the recommendation has no measured budget to realise".into()),
        (other, Some(_)) => out.notes.push(format!(
            "not expressed: {other} is not an engine this tool maps"
        )),
    }
    out
}

/// `llama-server` flags for `row`: exact for a whole bank on the GPU and for the planned
/// `--cpu-experts all` or `layers:N` with every other expert resident; otherwise the closest
/// static placement by whole layers, said to be that.
fn llama_cpp(out: &mut Realisation, plan: &Plan, row: &PlanRow, model: &ModelSpec) {
    let Some(fit) = &row.fit else { return };
    let dense = model.layers.iter().take_while(|l| l.experts == 0).count();
    let moe_layers = model.moe_layers().len().max(1);
    let per_layer = row.experts_total / moe_layers as u64;
    // the whole bank (of the units left on the GPU) fits and runs as fast as the best budget
    let whole_bank = row.curve.last().is_some_and(|top| {
        top.budget_units == row.units_total && top.tokens_per_s >= fit.tokens_per_s
    });
    let context = if plan.context_tokens > 0 {
        format!(" -c {}", plan.context_tokens)
    } else {
        String::new()
    };
    let base = "llama-server -m MODEL.gguf -ngl 99";
    let tail = format!("{context} --no-mmap");
    let (placement, exact) = match row.placement.as_deref() {
        Some("all") => {
            out.notes
                .push("every expert in host memory, computed on the CPU".into());
            (" --cpu-moe".to_string(), true)
        }
        Some(p) if p.starts_with("layers:") && whole_bank => {
            let n = p["layers:".len()..]
                .parse::<usize>()
                .unwrap_or(0)
                .min(moe_layers);
            let blocks = dense + n;
            out.notes.push(format!(
                "the experts of the first {n} MoE layers (blocks blk.0 to blk.{}) in host memory, computed on the CPU; every other weight on the GPU",
                blocks.saturating_sub(1)
            ));
            (format!(" --n-cpu-moe {blocks}"), true)
        }
        None if whole_bank => {
            out.notes
                .push("every layer and every expert on the GPU".into());
            (String::new(), true)
        }
        _ => {
            let gpu_layers = ((fit.experts_kept / per_layer.max(1)) as usize).min(moe_layers);
            let cpu = moe_layers - gpu_layers;
            out.notes.push(format!(
                "llama.cpp cannot page experts or pin single experts ({} + {} is not expressible: mainline llama.cpp has no expert cache); the closest static setting keeps the experts of the last {gpu_layers} of {moe_layers} MoE layers on the GPU ({} of {} experts, whole layers of {per_layer}) and computes the others on the CPU: plan it with --cpu-experts layers:{cpu} --hw-host HOST to price it",
                row.mechanism,
                row.evict,
                gpu_layers as u64 * per_layer,
                row.experts_total,
            ));
            (format!(" --n-cpu-moe {}", dense + cpu), false)
        }
    };
    out.notes.push(
        "--no-mmap loads the weights into memory instead of mapping the file; quantise the experts and the rest as planned (--dtype, --nonexpert-dtype) when making MODEL.gguf".into(),
    );
    out.command = Some(format!("{base}{placement}{tail}"));
    out.exact = exact;
}

impl Realisation {
    /// The text under the plan: the command line (or why there is none) and its notes.
    pub fn text(&self) -> String {
        let head = match (&self.command, self.exact) {
            (Some(c), true) => format!("{}: {c}", self.engine),
            (Some(c), false) => format!("{} (the closest setting, not the plan): {c}", self.engine),
            (None, _) => format!("{}: no command line", self.engine),
        };
        let notes: String = self.notes.iter().map(|n| format!("\n  {n}")).collect();
        head + &notes
    }
}
