//! `--timeline FILE`: the resources' busy spans as a Chrome trace-event JSON (open it in
//! chrome://tracing or ui.perfetto.dev), one track per resource.

use serde_json::json;
use std::path::Path;

/// The engine's resources, one timeline each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Compute = 1,
    Copy = 2,
    Driver = 3,
    Faults = 4,
    /// The CPU lane (`--cpu-experts`): experts computed on the host.
    Cpu = 5,
    /// The NVMe drive behind the DRAM tier (`--dram`): SSD reads.
    Ssd = 6,
}

impl Resource {
    fn label(self) -> &'static str {
        match self {
            Resource::Compute => "compute stream",
            Resource::Copy => "copy engine (H2D)",
            Resource::Driver => "driver (VMM calls)",
            Resource::Faults => "fault handler",
            Resource::Cpu => "CPU lane (host experts)",
            Resource::Ssd => "SSD reads (DRAM tier misses)",
        }
    }
}

/// One busy span: what, on which resource, when (µs), for which (step, MoE layer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    pub resource: Resource,
    pub name: &'static str,
    pub start_us: f64,
    pub dur_us: f64,
    pub step: u32,
    pub layer: u32,
}

/// Spans recorded during a replay, up to a cap so a long replay cannot exhaust memory.
#[derive(Debug, Default)]
pub struct Timeline {
    pub spans: Vec<Span>,
    /// Spans not recorded because the cap was reached.
    pub dropped: u64,
    cap: usize,
}

impl Timeline {
    /// Record at most `cap` spans.
    pub fn with_cap(cap: usize) -> Self {
        Timeline {
            spans: Vec::new(),
            dropped: 0,
            cap,
        }
    }

    #[inline]
    pub fn push(&mut self, s: Span) {
        if s.dur_us <= 0.0 {
            return;
        }
        if self.spans.len() < self.cap {
            self.spans.push(s);
        } else {
            self.dropped += 1;
        }
    }

    /// The Chrome trace-event document.
    pub fn to_json(&self) -> serde_json::Value {
        let mut events = Vec::with_capacity(self.spans.len() + 4);
        // the CPU lane and the SSD are named only when a run used them (files without them
        // stay as they were)
        let used = |r: Resource| self.spans.iter().any(|s| s.resource == r).then_some(r);
        let lanes = [
            Resource::Compute,
            Resource::Copy,
            Resource::Driver,
            Resource::Faults,
        ];
        let extra = [used(Resource::Cpu), used(Resource::Ssd)];
        for r in lanes.into_iter().chain(extra.into_iter().flatten()) {
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": r as u32,
                "args": {"name": r.label()}}),
            );
        }
        for s in &self.spans {
            events.push(
                json!({"name": s.name, "ph": "X", "pid": 1, "tid": s.resource as u32,
                "ts": s.start_us, "dur": s.dur_us, "args": {"step": s.step, "layer": s.layer}}),
            );
        }
        json!({"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"dropped_spans": self.dropped}})
    }

    /// Write the document to `path` atomically (temporary file in the same directory, then
    /// rename).
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        crate::output::write_atomic_with(path, |w| Ok(serde_json::to_writer(w, &self.to_json())?))
    }
}
