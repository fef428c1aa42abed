//! `--timeline FILE`: the resources' busy spans as a Chrome trace-event JSON (open it in
//! chrome://tracing or ui.perfetto.dev), one track per resource.

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
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

    /// The resources with a track in the document: the four of every run, then the CPU lane
    /// and the SSD only when a run used them (files without them stay as they were).
    fn tracks(&self) -> impl Iterator<Item = Resource> {
        let used = |r: Resource| self.spans.iter().any(|s| s.resource == r).then_some(r);
        let lanes = [
            Resource::Compute,
            Resource::Copy,
            Resource::Driver,
            Resource::Faults,
        ];
        let extra = [used(Resource::Cpu), used(Resource::Ssd)];
        lanes.into_iter().chain(extra.into_iter().flatten())
    }

    /// Write the document to `path` atomically (temporary file in the same directory, then
    /// rename).
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        crate::output::write_atomic_with(path, |w| Ok(serde_json::to_writer(w, self)?))
    }
}

/// The Chrome trace-event document, serialized span by span (no document tree in memory):
/// `{"traceEvents": [track names..., spans...], "displayTimeUnit": "ms",
/// "otherData": {"dropped_spans": N}}`.
impl Serialize for Timeline {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut doc = ser.serialize_map(Some(3))?;
        doc.serialize_entry("traceEvents", &Events(self))?;
        doc.serialize_entry("displayTimeUnit", "ms")?;
        doc.serialize_entry(
            "otherData",
            &Other {
                dropped_spans: self.dropped,
            },
        )?;
        doc.end()
    }
}

/// The `traceEvents` array: a `thread_name` event per track, then one `X` event per span.
struct Events<'a>(&'a Timeline);

impl Serialize for Events<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut seq = ser.serialize_seq(None)?;
        for r in t.tracks() {
            seq.serialize_element(&Event {
                name: "thread_name",
                ph: "M",
                pid: 1,
                tid: r as u32,
                ts: None,
                dur: None,
                args: Args::Track { name: r.label() },
            })?;
        }
        for s in &t.spans {
            seq.serialize_element(&Event {
                name: s.name,
                ph: "X",
                pid: 1,
                tid: s.resource as u32,
                ts: Some(s.start_us),
                dur: Some(s.dur_us),
                args: Args::Span {
                    step: s.step,
                    layer: s.layer,
                },
            })?;
        }
        seq.end()
    }
}

/// One trace event (`ts` and `dur`, µs, only on spans; `pid` 1 is the one simulated GPU).
#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    ph: &'a str,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    args: Args<'a>,
}

/// An event's `args`: a track's name, or a span's (step, MoE layer).
#[derive(Serialize)]
#[serde(untagged)]
enum Args<'a> {
    Track { name: &'a str },
    Span { step: u32, layer: u32 },
}

#[derive(Serialize)]
struct Other {
    dropped_spans: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The document as a JSON tree built by hand, the form the file had before it was
    /// streamed: the streamed bytes must be its bytes.
    fn tree(t: &Timeline) -> serde_json::Value {
        let mut events = Vec::new();
        for r in t.tracks() {
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": r as u32,
                "args": {"name": r.label()}}),
            );
        }
        for s in &t.spans {
            events.push(
                json!({"name": s.name, "ph": "X", "pid": 1, "tid": s.resource as u32,
                "ts": s.start_us, "dur": s.dur_us, "args": {"step": s.step, "layer": s.layer}}),
            );
        }
        json!({"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"dropped_spans": t.dropped}})
    }

    #[test]
    fn the_streamed_document_is_the_json_tree_byte_for_byte() {
        let mut t = Timeline::with_cap(3);
        let span = |resource, start_us, dur_us, step| Span {
            resource,
            name: "h2d",
            start_us,
            dur_us,
            step,
            layer: 2,
        };
        t.push(span(Resource::Compute, 0.0, 12.5, 0));
        t.push(span(Resource::Ssd, 1.0 / 3.0, 7.0, 1));
        t.push(span(Resource::Copy, 20.0, 0.0, 1)); // empty: not recorded
        t.push(span(Resource::Copy, 20.0, 1e-7, 1));
        t.push(span(Resource::Driver, 30.0, 2.0, 2)); // past the cap: dropped
        assert_eq!((t.spans.len(), t.dropped), (3, 1));
        let streamed = serde_json::to_string(&t).unwrap();
        assert_eq!(streamed, tree(&t).to_string());
        assert!(streamed.contains("SSD reads") && !streamed.contains("CPU lane"));
    }
}
