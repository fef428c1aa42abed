//! [`RunSpec`]: a run written as data (JSON, TOML, anything serde reads), for programs that
//! build runs without Rust types, such as language bindings. This first version describes
//! untimed runs: a mechanism, the phases replayed and, optionally, retention under a budget;
//! the sizes come from the trace's header (bf16, 2 MiB granules). Timed runs are built in Rust
//! ([`crate::engine::TimingConfig::new`] on a [`RunConfig`]).
//!
//! ```
//! let spec: engine::RunSpec = serde_json::from_str(
//!     r#"{"mechanism": "e2", "retention": {"evict": "lru", "budget": "25%"}}"#,
//! ).unwrap();
//! let report = engine::run_spec(&spec, engine::TraceSource::Bundled).unwrap();
//! assert_eq!(report.cache.unwrap().budget_units, 96);
//! ```

use crate::cache::RetentionConfig;
use crate::front::{run, RunError, TraceSource};
use crate::runner::{RunConfig, RunReport};
use policies::{Budget, PolicyKind, Semantics, Split};
use serde::{Deserialize, Serialize};
use traces::PhaseSel;

/// One run as data. Fields left out take the defaults named on each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// The mechanism spec (`e2`, `e4:coact`, `region:64`, `os64k`, ...;
    /// [`policies::mechanisms::ACCEPTED_FORMS`]), checked when the spec is read.
    #[serde(default = "default_mechanism", deserialize_with = "mechanism")]
    pub mechanism: String,
    /// The phases replayed (`decode`, the default; `prefill`; `all`).
    #[serde(default)]
    pub phase: PhaseSel,
    /// Retention under a budget; absent: the streaming regime only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionSpec>,
}

/// Retention under a budget, as data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSpec {
    /// The retention policy's registry name (`lru`, `belady`, `s3fifo`, ...).
    pub evict: PolicyKind,
    /// The budget: a percentage of the bank (`25%`), a unit count (`192`) or bytes (`3GiB`).
    #[serde(deserialize_with = "budget")]
    pub budget: Budget,
    /// One budget over all layers (`global`, the default) or one per layer (`per-layer`).
    #[serde(default)]
    pub split: Split,
    /// How accesses count: `group` (the default: once per (step, layer) group) or `access`.
    #[serde(default)]
    pub semantics: Semantics,
    /// The seed of randomised policies (default 0).
    #[serde(default)]
    pub seed: u64,
}

fn default_mechanism() -> String {
    RunConfig::default().policy
}

/// A mechanism spec, refused when it does not parse.
fn mechanism<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    policies::mechanisms::parse(&s).map_err(serde::de::Error::custom)?;
    Ok(s)
}

/// A budget in its text form ([`Budget::parse`]).
fn budget<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Budget, D::Error> {
    Budget::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

impl RunSpec {
    /// The [`RunConfig`] this spec describes.
    pub fn config(&self) -> RunConfig {
        let retention = self.retention.as_ref().map(|r| {
            let mut c = RetentionConfig::new(r.evict, r.budget.clone());
            c.cache.split = r.split;
            c.cache.semantics = r.semantics;
            c.cache.seed = r.seed;
            c
        });
        RunConfig {
            policy: self.mechanism.clone(),
            phase: self.phase,
            retention,
            ..RunConfig::default()
        }
    }
}

/// What of a [`RunConfig`] a [`RunSpec`] cannot hold (yet), named in the engine's terms.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("a run spec does not hold {0} yet; give this run as flags instead of a spec")]
pub struct SpecGap(pub String);

impl RunSpec {
    /// The spec of `cfg`: `Ok` exactly when [`RunSpec::config`] gives `cfg` back (one token
    /// per step whatever seed it carries), else the parts the spec cannot hold.
    pub fn of(cfg: &RunConfig) -> Result<RunSpec, SpecGap> {
        let spec = RunSpec {
            mechanism: cfg.policy.clone(),
            phase: cfg.phase,
            retention: cfg.retention.as_ref().map(|r| RetentionSpec {
                evict: r.cache.policy,
                budget: r.cache.budget.clone(),
                split: r.cache.split,
                semantics: r.cache.semantics,
                seed: r.cache.seed,
            }),
        };
        // one token per step is off whatever seed it carries
        let mut plain = cfg.clone();
        if plain.stepping.is_off() {
            plain.stepping = Default::default();
        }
        if spec.config() == plain {
            return Ok(spec);
        }
        let d = RunConfig::default();
        let r = cfg.retention.as_ref();
        let gaps: Vec<&str> = [
            (cfg.timing.is_some(), "timing (a hardware profile)"),
            (!cfg.stepping.is_off(), "several tokens per step"),
            (cfg.sizes != d.sizes, "expert sizes, dtype or granule"),
            (r.is_some_and(|r| r.cache.dram.is_some()), "a DRAM tier"),
            (r.is_some_and(|r| r.target.is_some()), "a tokens/s target"),
            (
                r.is_some_and(|r| r.batching != Default::default()),
                "batching",
            ),
        ]
        .into_iter()
        .filter_map(|(gap, name)| gap.then_some(name))
        .collect();
        Err(SpecGap(if gaps.is_empty() {
            "this run".into()
        } else {
            gaps.join(", ")
        }))
    }
}

/// [`run`] of the run `spec` describes.
pub fn run_spec(spec: &RunSpec, trace: TraceSource) -> Result<RunReport, RunError> {
    run(&spec.config(), trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec survives JSON both ways, and the written form is the documented one.
    #[test]
    fn a_spec_reads_back_what_it_writes() {
        let text = r#"{"mechanism":"e4:coact","phase":"all","retention":{"evict":"s3fifo","budget":"12.5%","split":"per-layer","semantics":"access","seed":7}}"#;
        let spec: RunSpec = serde_json::from_str(text).unwrap();
        assert_eq!(
            spec.retention.as_ref().unwrap().budget,
            Budget::Fraction {
                num: 125,
                den: 1000
            }
        );
        assert_eq!(serde_json::to_string(&spec).unwrap(), text);
    }

    /// Defaults: `e2`, decode, no retention; bad values are refused by name.
    /// A config a spec holds comes back from its spec; one it does not is refused by part.
    #[test]
    fn configs_round_trip_or_name_their_gap() {
        let spec: RunSpec = serde_json::from_str(
            r#"{"mechanism":"os64k","retention":{"evict":"lfu","budget":"3GiB","seed":2}}"#,
        )
        .unwrap();
        assert_eq!(RunSpec::of(&spec.config()), Ok(spec.clone()));
        let mut cfg = spec.config();
        cfg.retention.as_mut().unwrap().batching.batch = 4;
        assert_eq!(RunSpec::of(&cfg), Err(SpecGap("batching".into())));
    }

    #[test]
    fn defaults_and_refusals() {
        let spec: RunSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec.config(), RunConfig::default());
        for (bad, says) in [
            (r#"{"mechanism":"e0"}"#, "e0"),
            (r#"{"retention":{"evict":"lru","budget":"lots"}}"#, "lots"),
            (r#"{"retention":{"evict":"nope","budget":"1"}}"#, "nope"),
            (r#"{"policy":"e2"}"#, "policy"),
        ] {
            let e = serde_json::from_str::<RunSpec>(bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
