//! Timing options shared by `sim run`, `sim sweep` and `sim compare`: hardware profile,
//! compute model, prefetch predictor, batch memory.

use clap::Args;

/// Timing (discrete-event engine) options. With no `--hw` no timing is simulated.
#[derive(Args, Clone, Debug, Default)]
pub struct TimingArgs {}
