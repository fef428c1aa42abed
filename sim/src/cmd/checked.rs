//! The validated-region line of a timed run: where its configuration lies against the
//! regions docs/VALIDATION.md lists (`sim::validation::checked`; rules in docs/DESIGN.md,
//! "Where the model was checked").

use sim::runner::{RunConfig, RunReport};
use sim::validation::checked::{self, Checked, RunSetting};
use sim::validation::RetentionSettings;

/// What `cfg` ran, as the coverage table's columns; `None` for an untimed run.
pub fn setting(cfg: &RunConfig, r: &RunReport) -> Option<RunSetting> {
    let timing = cfg.timing.as_ref()?;
    let detail = r.timing_detail.as_ref()?;
    Some(RunSetting {
        gpu: timing.hw.clone(),
        mechanism: cfg.policy.clone(),
        retention: cfg
            .retention
            .as_ref()
            .map_or("streaming".into(), |c| RetentionSettings::of(c).text()),
        batch: cfg.retention.as_ref().map_or(1, |c| c.batching.batch),
        model: r.inputs.model.clone(),
        live_granules: detail.peak_live_granules,
    })
}

/// Where the timed run `r` of `cfg` lies; `None` for an untimed run.
pub fn check(cfg: &RunConfig, r: &RunReport) -> anyhow::Result<Option<Checked>> {
    let Some(run) = setting(cfg, r) else {
        return Ok(None);
    };
    let regions = checked::stored().map_err(anyhow::Error::msg)?;
    Ok(Some(checked::classify(&regions, &run)))
}
