//! `sim plan --engine ktransformers | vllm | sglang`: the recommendation in those engines'
//! flags (llama.cpp's are in [`crate::plan_engine`]). None of the three has an expert cache
//! that pages experts into VRAM on demand, so a plan that pages experts is never expressed
//! exactly: each engine gets the closest static setting it has, said to be that.
//!
//! - ktransformers (SGLang with its kt-kernel CPU experts, the setup its guides launch):
//!   `--kt-num-gpu-experts N` keeps N experts of every MoE layer on the GPU and computes the
//!   others on the CPU.
//! - vLLM and SGLang: `--cpu-offload-gb` moves that much of the weights (not chosen by
//!   expert) to host memory and loads it onto the GPU in every forward pass.
//!
//! Every flag is cited from the engine's source or documentation in `sim/tests/plan.rs`.

use crate::plan::{Plan, PlanFit, PlanRow};
use crate::plan_engine::Realisation;
use traces::ModelSpec;

/// What every engine needs of the recommendation.
pub(crate) struct Setting<'a> {
    pub row: &'a PlanRow,
    pub fit: &'a PlanFit,
    pub moe_layers: u64,
    /// The whole bank stays on the GPU (and is as fast as the best budget).
    pub whole_bank: bool,
    pub context: u64,
}

impl<'a> Setting<'a> {
    pub fn of(plan: &Plan, row: &'a PlanRow, model: &ModelSpec) -> Option<Setting<'a>> {
        let fit = row.fit.as_ref()?;
        let whole_bank = row.curve.last().is_some_and(|top| {
            top.budget_units == row.units_total && top.tokens_per_s >= fit.tokens_per_s
        }) || fit.experts_kept >= row.experts_total;
        Some(Setting {
            row,
            fit,
            moe_layers: model.moe_layers().len().max(1) as u64,
            whole_bank,
            context: plan.context_tokens,
        })
    }

    /// Bytes of the experts the recommendation leaves off the GPU.
    fn off_gpu_bytes(&self) -> u64 {
        self.row.experts_total.saturating_sub(self.fit.experts_kept) * self.row.expert_bytes
    }

    /// Why a paging plan is not what a static setting does.
    fn not_paging(&self, what: &str) -> String {
        format!(
            "{what}: it has no expert cache, so {} + {} (experts paged into VRAM as tokens need them) is not expressible; this is the closest static setting",
            self.row.mechanism, self.row.evict
        )
    }
}

/// `flag value` when the plan has a context, else nothing.
fn context_flag(flag: &str, tokens: u64) -> String {
    if tokens > 0 {
        format!(" {flag} {tokens}")
    } else {
        String::new()
    }
}

/// SGLang with ktransformers' kt-kernel: `--kt-num-gpu-experts` per MoE layer.
pub(crate) fn ktransformers(out: &mut Realisation, s: &Setting) {
    let ctx = context_flag("--context-length", s.context);
    let base = "python -m sglang.launch_server --model-path MODEL";
    if s.whole_bank {
        out.notes.push(
            "every expert fits on the GPU: no CPU experts, so none of kt-kernel's flags is needed"
                .into(),
        );
        out.command = Some(format!("{base}{ctx}"));
        out.exact = true;
        return;
    }
    let per_layer = s.fit.experts_kept / s.moe_layers;
    out.notes.push(s.not_paging(
        "ktransformers computes the experts it leaves on the CPU instead of fetching them",
    ));
    out.notes.push(format!(
        "--kt-num-gpu-experts {per_layer}: {per_layer} experts of each of the {} MoE layers on the GPU ({} of {}; the plan keeps {}), every other expert computed on the CPU; which ones is kt's placement, not this plan's",
        s.moe_layers,
        per_layer * s.moe_layers,
        s.row.experts_total,
        s.fit.experts_kept
    ));
    out.notes.push(
        "CPU_WEIGHTS: the experts converted for the CPU; METHOD: their format (AMXINT4 or AMXINT8 on CPUs with AMX, LLAMAFILE for GGUF weights); THREADS: CPU inference threads".into(),
    );
    out.command = Some(format!(
        "{base} --kt-weight-path CPU_WEIGHTS --kt-method METHOD --kt-cpuinfer THREADS --kt-num-gpu-experts {per_layer}{ctx}"
    ));
}

/// GiB of `bytes`, rounded up to a hundredth.
fn gib_up(bytes: u64) -> f64 {
    (bytes as f64 / (1u64 << 30) as f64 * 100.0).ceil() / 100.0
}

/// vLLM: `--cpu-offload-gb` GiB of weights in host memory, loaded in every forward pass.
pub(crate) fn vllm(out: &mut Realisation, s: &Setting) {
    let ctx = context_flag("--max-model-len", s.context);
    if s.whole_bank {
        out.notes.push("every weight on the GPU".into());
        out.command = Some(format!("vllm serve MODEL{ctx}"));
        out.exact = true;
        return;
    }
    let gib = gib_up(s.off_gpu_bytes());
    out.notes.push(s.not_paging("vLLM"));
    out.notes.push(format!(
        "--cpu-offload-gb {gib}: the {gib} GiB of experts the plan leaves off the GPU, as weights vLLM holds in host memory (which weights is vLLM's choice, not by expert) and loads onto the GPU in every forward pass: each step moves all of them, not the plan's page-ins"
    ));
    out.command = Some(format!("vllm serve MODEL --cpu-offload-gb {gib}{ctx}"));
}

/// SGLang: `--cpu-offload-gb` whole GB (an integer flag) of weights in host memory.
pub(crate) fn sglang(out: &mut Realisation, s: &Setting) {
    let ctx = context_flag("--context-length", s.context);
    let base = "python -m sglang.launch_server --model-path MODEL";
    if s.whole_bank {
        out.notes.push("every weight on the GPU".into());
        out.command = Some(format!("{base}{ctx}"));
        out.exact = true;
        return;
    }
    let gb = s.off_gpu_bytes().div_ceil(1u64 << 30);
    out.notes.push(s.not_paging("SGLang"));
    out.notes.push(format!(
        "--cpu-offload-gb {gb}: the experts the plan leaves off the GPU, rounded up to whole GiB (the flag takes an integer), as weights SGLang holds in host memory and loads onto the GPU in every forward pass; for experts computed on the CPU instead, see --engine ktransformers"
    ));
    out.command = Some(format!("{base} --cpu-offload-gb {gb}{ctx}"));
}
