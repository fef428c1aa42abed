//! One run through the engine's front door: `e2` units (pairs of experts) on the bundled
//! trace or a trace file, LRU under a 25% budget. `cargo run -p engine --example run_one [FILE]`

use engine::cache::RetentionConfig;
use engine::{run, RunConfig, TraceSource};
use policies::{Budget, PolicyKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let trace = std::env::args_os()
        .nth(1)
        .map_or(TraceSource::Bundled, |path| TraceSource::File(path.into()));
    let cfg = RunConfig {
        policy: "e2".into(),
        retention: Some(RetentionConfig::new(PolicyKind::Lru, Budget::parse("25%")?)),
        ..RunConfig::default()
    };
    let report = run(&cfg, trace)?;
    serde_json::to_writer_pretty(std::io::stdout().lock(), &report)?;
    Ok(())
}
