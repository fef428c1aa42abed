//! `sim validate` on the GPU: every prediction's plan replayed `--repeat` times, either in one
//! run with the order rotated per repetition (no `--blocks`), or in `--blocks B` blocks drawn
//! by `validate::blocks::schedule`, each bracketed by a host probe and a VMM arm.

use super::ValidateArgs;
use anyhow::{Context, Result};
use sim::validation::{rotation, BlockRecord, Prediction, StoredRep};
use validate::host::lane_replay::LaneBank;
use validate::host_context::{GpuContext, HostContext};
use validate::replay_cpu::lane_bank;
use validate::ReplayOptions;

/// Per prediction its repetitions; the host's state at the start; the block records (empty
/// without `--blocks`).
pub(super) type Replayed = (Vec<Vec<StoredRep>>, HostContext, Vec<BlockRecord>);

/// Replay every prediction's plan on the GPU (see the module's doc).
pub(super) fn replay_on_gpu(
    args: &ValidateArgs,
    trace: &str,
    predictions: &[Prediction],
) -> Result<Replayed> {
    let ctx = host_context(args.device);
    let n = predictions.len();
    // a composed row's CPU weights, built once and lent to each of its replays
    let mut banks: Vec<Option<LaneBank>> = predictions
        .iter()
        .map(|p| p.lane.as_ref().map(|l| lane_bank(l, 1)))
        .collect();
    let mut measured = vec![Vec::new(); n];
    let Some(blocks) = args.blocks else {
        for r in 0..args.repeat as usize {
            for (position, i) in rotation(r, n).enumerate() {
                let what = format!("repetition {} of {}", r + 1, args.repeat);
                let m = replay_one(args, trace, &predictions[i], banks[i].as_mut(), &what)?;
                measured[i].push(StoredRep {
                    position: position as u32,
                    block: None,
                    measurement: m,
                });
            }
        }
        return Ok((measured, ctx, Vec::new()));
    };
    let seed = args.cache.seed;
    let slots = validate::blocks::schedule(blocks, args.repeat, n, seed);
    let mut records = Vec::with_capacity(blocks as usize);
    for b in 0..blocks {
        let before = probe(args.device, b, "before")?;
        for s in slots.iter().filter(|s| s.block == b) {
            let what = format!(
                "block {} of {blocks}, round {} of {}",
                b + 1,
                s.round + 1,
                args.repeat
            );
            let m = replay_one(
                args,
                trace,
                &predictions[s.row],
                banks[s.row].as_mut(),
                &what,
            )?;
            measured[s.row].push(StoredRep {
                position: s.position,
                block: Some(b),
                measurement: m,
            });
        }
        let after = probe(args.device, b, "after")?;
        records.push(BlockRecord {
            block: b,
            before,
            after,
        });
    }
    Ok((measured, ctx, records))
}

/// One replay of `pp`'s plan (a composed row's CPU calls reading `bank`), announced on
/// stderr.
fn replay_one(
    args: &ValidateArgs,
    trace: &str,
    pp: &Prediction,
    bank: Option<&mut LaneBank>,
    what: &str,
) -> Result<validate::ReplayMeasurement> {
    eprintln!(
        "validate: {} on {}: {} steps after {} warm-up, {} page-ins, replaying on the GPU ({what})",
        pp.spec, trace, pp.steps, pp.warm_up.steps, pp.page_ins
    );
    let options = ReplayOptions {
        device: args.device,
    };
    let lane = pp.lane.as_ref().zip(bank);
    validate::replay_composed(&pp.plan, &pp.map, pp.peak_bytes, options, lane)
        .with_context(|| format!("replaying --policy {} on the GPU", pp.spec))
}

/// The host probe and VMM arm of block `b`, `when` it runs.
fn probe(device: usize, b: u32, when: &str) -> Result<validate::probe::BlockProbe> {
    eprintln!("validate: host probe and VMM arm {when} block {}", b + 1);
    validate::probe::block_probe(device)
        .with_context(|| format!("the host probe {when} block {} on the GPU", b + 1))
}

/// The host's state now, with the GPU's place and clocks when the device opens.
fn host_context(device: usize) -> HostContext {
    HostContext {
        gpu: kernels::open_device(device)
            .ok()
            .map(|ctx| GpuContext::read(&ctx)),
        ..HostContext::read()
    }
}
