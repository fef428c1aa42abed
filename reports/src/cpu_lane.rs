//! The `cpu` block of a run report: the CPU lane of a timed run with `--cpu-experts`
//! (experts computed on the host CPU), and its line in the run's text.

use serde::{Deserialize, Serialize};

/// The CPU lane of a timed run (definitions in docs/DESIGN.md, "The CPU lane").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuLaneReport {
    /// The placement, e.g. `layers:8` (`--cpu-experts`).
    pub placement: String,
    /// The profile that priced the host side (the GPU profile combined with `--hw-host`).
    pub host_profile: String,
    /// MoE layers whose experts all live on the CPU (`all`: every layer; `layers:N`: N).
    pub cpu_layers: usize,
    /// Expert calls computed on the CPU (a distinct key of a group placed there counts one).
    pub experts_on_cpu: u64,
    /// `experts_on_cpu` / tokens.
    pub experts_on_cpu_per_token: f64,
    /// Share of the groups' distinct keys computed on the CPU.
    pub cpu_share: f64,
    /// CPU lane busy time per step, ms: expert calls plus the activations' copies.
    pub cpu_lane_ms_per_step: f64,
    /// Of it, the expert calls, ms per step.
    pub cpu_calls_ms_per_step: f64,
    /// Of it, the activations over PCIe both ways, ms per step.
    pub activation_ms_per_step: f64,
    /// Time the GPU's stream waited past its own expert compute for the CPU lane, ms per step.
    pub cpu_wait_ms_per_step: f64,
    /// `misses`: units paged in off the critical path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_page_ins: Option<u64>,
    /// `cheaper`: missed units paged in because that was faster than the CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cheaper_paged: Option<u64>,
}

/// The run summary's CPU lane line.
pub fn cpu_lane_summary(c: &CpuLaneReport, tokens_per_s: f64) -> String {
    let mut s = format!(
        "  cpu lane    {} on {}: {} experts on the CPU ({:.2} per token, {:.1}% of keys)   busy {:.3} ms/step (calls {:.3}, activations {:.3})   GPU waited {:.3} ms/step   {:.1} tokens/s",
        c.placement,
        c.host_profile,
        c.experts_on_cpu,
        c.experts_on_cpu_per_token,
        100.0 * c.cpu_share,
        c.cpu_lane_ms_per_step,
        c.cpu_calls_ms_per_step,
        c.activation_ms_per_step,
        c.cpu_wait_ms_per_step,
        tokens_per_s
    );
    if let Some(n) = c.background_page_ins {
        s += &format!("   background page-ins {n}");
    }
    if let Some(n) = c.cheaper_paged {
        s += &format!("   missed units paged in (faster than the CPU) {n}");
    }
    s.push('\n');
    if c.background_page_ins.is_some() || c.cheaper_paged.is_some() {
        // the cache block replays the retention plan, in which every miss is a page-in
        s += "              (the cache block's page-ins and bytes/token count every miss of the retention plan, those run on the CPU included; what crossed PCIe is the timing block's H2D time and the page-ins above)\n";
    }
    s
}
