//! The expert-kernel arms of a calibration: the streaming-read bandwidth reference and the
//! expert-kernel timings (time against expert bytes at batch 1, the 60-slot bandwidth geometry,
//! and the distinct-expert sweep of the per-slot and union variants), alone or as part of the
//! full calibration ([`super::calibrate`]). Alone (`sim calibrate --only kernels`) it also times
//! every per-slot kernel (the load-only diagnostic twins included), each one's gate+up and down
//! launch apart, streaming reads of exactly one 60-slot launch's bytes ([`WindowRead`]), and
//! the default kernel's layers timed alone and back to back ([`LayerChain`]).

use super::{summary, time_events, CalibrateError, CalibrateOptions, Step, GIB, MIB};
use crate::device::DeviceInfo;
use crate::stats::Summary;
use cudarc::driver::{CudaContext, CudaStream, DevicePtr};
use kernels::launch::DOT_KERNELS;
use kernels::{ExpertGeometry, Kernels, PerSlotKernel, Variant};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// One expert-kernel arm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelPoint {
    /// Model hidden size of the expert (input and output width).
    pub hidden: usize,
    /// Expert FFN width.
    pub ffn: usize,
    /// int4 quantization group: weights per scale.
    pub group: usize,
    /// Bytes of one expert (int4 weights and their scales).
    pub expert_bytes: u64,
    /// Tokens of the batch.
    pub tokens: usize,
    /// Routed (token, expert) slots of the layer, one expert FFN each.
    pub slots: usize,
    /// Distinct experts among the slots.
    pub distinct: usize,
    /// `PerSlot` or `Union` (the [`kernels::Variant`]), or `PerSlot:<kernel>` for a per-slot
    /// kernel other than the default; `PerSlot:<kernel>/gate_up` or `/down` for the gate+up or
    /// the down launch (with its activation pre-pass, if the kernel has one) timed alone
    /// (`sim calibrate --only kernels`, 60 distinct slots).
    pub variant: String,
    /// The CUDA function that ran the expert FFN (absent in calibrations before it was recorded).
    #[serde(default)]
    pub kernel: String,
    /// Time of the layer's launches on the GPU, µs (the activation pre-pass, if the kernel has
    /// one, then gate+up and down, or the one persistent launch of `moe_dot_fz_*`): CUDA events
    /// around the launches enqueued behind a busy-wait kernel, so host launch latency is not
    /// included.
    pub time_us: Summary,
    /// distinct experts x expert bytes (of the phase, for a phase-only arm) / median time,
    /// bytes per µs.
    pub weight_bytes_per_us: f64,
}

/// The expert-kernel part of a calibration alone (`sim calibrate --only kernels`): the
/// streaming-read reference and every kernel arm, with every per-slot kernel that loaded.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelCalibration {
    /// The GPU and driver measured.
    pub device: DeviceInfo,
    /// A quick pass (fewer repetitions and sizes).
    pub quick: bool,
    /// Repetitions per arm (after the discarded warm-up).
    pub reps: u32,
    /// Bytes of a plain streaming read of device memory, the expert kernels' bandwidth
    /// reference.
    pub stream_read_bytes: u64,
    /// Bandwidth of that read, bytes per µs (= MB/s).
    pub stream_read_bytes_per_us: Summary,
    /// Streaming reads of one 60-slot launch's worth of bytes (diagnostic):
    /// the ceiling of a read that size, ramp and tail included (absent in older files).
    #[serde(default)]
    pub window_reads: Vec<WindowRead>,
    /// Arms of the default per-slot kernel have variant `PerSlot`; the others `PerSlot:<kernel>`
    /// (including the load-only twins, `kernels::launch::DotKernel::load_only`, whose arms
    /// time an access pattern, not an FFN; no profile reads them).
    pub kernels: Vec<KernelPoint>,
    /// The default kernel's layers timed alone and enqueued back to back (absent in sets recorded
    /// without that arm, such as `validate/tests/fixtures/h200-linux-p8.measurements.json`).
    #[serde(default)]
    pub layer_chain: Option<LayerChain>,
    /// Why the per-slot dot kernels did not load (NVRTC log), if they did not.
    pub dot_error: Option<String>,
    /// Wall time, s.
    pub wall_s: f64,
}

/// Measures only the streaming-read reference and the expert kernels (every per-slot kernel that
/// loaded, interleaved with the default one). Fails like [`super::calibrate()`] without a GPU.
pub fn calibrate_kernels(
    opts: &CalibrateOptions,
    log: &mut dyn FnMut(&str),
) -> Result<KernelCalibration, CalibrateError> {
    let t0 = Instant::now();
    let ctx = kernels::open_device(opts.device)?;
    let stream = ctx.default_stream();
    let device = DeviceInfo::read(&ctx).during("device query")?;
    log(&format!(
        "device: {} (driver {}, CUDA {})",
        device.gpu, device.driver, device.cuda
    ));
    let mut k = Kernels::load(&ctx)?;
    let dot_error = k.dot_error().map(str::to_owned);
    if let Some(e) = &dot_error {
        log(&format!(
            "per-slot dot kernels unavailable, using the f32 kernel: {e}"
        ));
    }
    let reps: u32 = if opts.quick { 3 } else { 7 };
    let (stream_read_bytes, stream_read_bytes_per_us) =
        measure_stream_read(&ctx, &stream, &k, &device, reps, opts.quick, log)?;
    let window_reads = measure_window_reads(&ctx, &stream, &k, &device, reps, log)?;
    let kernels = measure_kernels(&ctx, &stream, &mut k, reps, opts, true, log)?;
    let c = measure_layer_chain(&ctx, &stream, &k, reps, opts.seed)?;
    log(&format!(
        "layer chain: {} layers of {} slots {}x{} ({}): {:.1} µs per layer alone, {:.1} µs \
         back to back ({:.0}% of the streaming read)",
        c.layers,
        c.slots,
        c.hidden,
        c.ffn,
        c.kernel,
        c.alone_us.median,
        c.chained_us.median,
        100.0 * c.chained_bytes_per_us / stream_read_bytes_per_us.median
    ));
    Ok(KernelCalibration {
        layer_chain: Some(c),
        window_reads,
        device,
        quick: opts.quick,
        reps,
        stream_read_bytes,
        stream_read_bytes_per_us,
        kernels,
        dot_error,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// Plain streaming read over a buffer many times the L2 (4 GiB, quick 1 GiB, at most 1/8 of
/// free VRAM): the bandwidth reference of the expert kernels. Returns (bytes, bytes per µs).
pub(super) fn measure_stream_read(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    device: &DeviceInfo,
    reps: u32,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<(u64, Summary), CalibrateError> {
    let sr_bytes = if quick { GIB } else { 4 * GIB };
    let sr_bytes = sr_bytes.min(device.vram_free / 8);
    let buf = stream
        .alloc_zeros::<u8>(sr_bytes as usize)
        .during("stream-read buffer")?;
    let mut sink = stream.alloc_zeros::<u32>(1).during("sink")?;
    let mut bw = Vec::new();
    for r in 0..=reps {
        let t = time_events(ctx, stream, &mut || {
            Ok(k.launch_stream_read(stream, &buf, &mut sink)?)
        })?;
        if r > 0 {
            bw.push(sr_bytes as f64 / t);
        }
    }
    let s = summary(&bw)?;
    log(&format!(
        "stream read: {:.0} GB/s over {} MiB",
        s.median / 1e3,
        sr_bytes / MIB
    ));
    Ok((sr_bytes, s))
}

/// One streaming read of a launch-sized window (see [`measure_window_reads`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowRead {
    /// Whose bytes the window holds: `gate_up`, `down` or `expert` (both) of 60 experts of
    /// 2560x640 (group 128), the bytes the 60-slot launches read.
    pub what: String,
    /// Bytes read.
    pub bytes: u64,
    /// Time on the GPU, µs (CUDA events, the launch enqueued behind a busy-wait as for the
    /// kernel arms).
    pub time_us: Summary,
    /// bytes / median time, bytes per µs (= MB/s).
    pub bytes_per_us: f64,
}

/// Streaming reads (the reference kernel, 4 blocks of 512 threads per multiprocessor) of
/// exactly the bytes the 60/60 gate+up, down and whole-layer launches read, from one
/// contiguous window: the ceiling of a read of that size on this GPU, with its ramp and tail,
/// next to the kernels' phase arms. The window moves through a buffer 8 times the largest
/// (1.25 GB) repetition by repetition, so the L2 holds none of it. Arms interleaved.
fn measure_window_reads(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    device: &DeviceInfo,
    reps: u32,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<WindowRead>, CalibrateError> {
    let g =
        ExpertGeometry::new(2560, 640, 128).map_err(|e| CalibrateError::Other(e.to_string()))?;
    let windows: Vec<(&str, u64)> = [("gate_up", Some(0)), ("down", Some(1)), ("expert", None)]
        .into_iter()
        .map(|(what, phase)| (what, (60 * bytes_read(g, phase)) as u64 / 16 * 16))
        .collect();
    let stride = windows.iter().map(|w| w.1).max().unwrap_or(0).div_ceil(256) * 256;
    let slots = 8u64.min(device.vram_free / 8 / stride.max(1)).max(1);
    let buf = stream
        .alloc_zeros::<u8>((slots * stride) as usize)
        .during("window-read buffer")?;
    let (base, _g) = buf.device_ptr(stream);
    let mut sink = stream.alloc_zeros::<u32>(1).during("sink")?;
    let mut samples = vec![Vec::new(); windows.len()];
    let mut next = 0u64;
    for r in 0..=reps {
        for (i, &(_, bytes)) in windows.iter().enumerate() {
            let ptr = base + (next % slots) * stride;
            next += 1;
            k.launch_spin(stream, KERNEL_QUEUE_FILL_NS)?;
            let t = time_events(ctx, stream, &mut || {
                Ok(k.launch_stream_read_range(stream, ptr, bytes, &mut sink)?)
            })?;
            if r > 0 {
                samples[i].push(t);
            }
        }
    }
    let mut out = Vec::new();
    for ((what, bytes), s) in windows.into_iter().zip(&samples) {
        let time_us = summary(s)?;
        let w = WindowRead {
            what: what.to_owned(),
            bytes,
            bytes_per_us: bytes as f64 / time_us.median,
            time_us,
        };
        log(&format!(
            "window read {} ({:.1} MB): {:.1} µs, {:.0} GB/s",
            w.what,
            w.bytes as f64 / 1e6,
            w.time_us.median,
            w.bytes_per_us / 1e3
        ));
        out.push(w);
    }
    Ok(out)
}

/// Layers of 60 distinct experts of 2560x640 (group 128), 6 tokens, timed one at a time and
/// back to back ([`measure_layer_chain`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerChain {
    /// Layers per chain, each with its own experts.
    pub layers: usize,
    /// Model hidden size.
    pub hidden: usize,
    /// Expert FFN width.
    pub ffn: usize,
    /// Routed slots per layer (all distinct experts).
    pub slots: usize,
    /// The CUDA function that ran the expert FFN (the default kernel, or the partner it falls
    /// back to where it cannot run, as before compute capability 9.0).
    pub kernel: String,
    /// Time per layer, each layer timed alone (as the kernel arms time it), µs.
    pub alone_us: Summary,
    /// Time per layer of the layers enqueued back to back (chain time / layers), µs.
    pub chained_us: Summary,
    /// Weight bytes per layer / median chained time per layer, bytes per µs (= MB/s).
    pub chained_bytes_per_us: f64,
}

/// Layers per chain in [`measure_layer_chain`]: 8 x 156.7 MB, 25 times the 50 MB L2 (a design
/// choice; long enough that one layer's ramp and the last one's tail weigh little).
const CHAIN_LAYERS: usize = 8;

/// How a decode loop sees the expert kernel: [`CHAIN_LAYERS`] layers of 60 distinct experts
/// each (2560x640, 6 tokens), every layer its own experts, timed alone (one layer behind a
/// busy-wait, as the kernel arms) and enqueued back to back (the chain behind one busy-wait,
/// CUDA events around it). Back to back, a layer's pre-pass and persistent grid may launch
/// while the previous layer drains (programmatic launches; each waits for the previous grid
/// before reading its activations), which is what a decoder's consecutive MoE layers allow.
/// The same layers run in both arms, alone first; fresh experts every repetition. The chain's
/// 16 launches take the host about 54 µs to enqueue (3.35 µs each), well inside the
/// [`KERNEL_QUEUE_FILL_NS`] busy-wait.
fn measure_layer_chain(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    reps: u32,
    seed: u64,
) -> Result<LayerChain, CalibrateError> {
    let g =
        ExpertGeometry::new(2560, 640, 128).map_err(|e| CalibrateError::Other(e.to_string()))?;
    let (tokens, slots) = (6usize, 60usize);
    let experts = CHAIN_LAYERS * slots + slots;
    let mut rng = Pcg64::seed_from_u64(seed);
    let bank_host = kernels::reference::random_bank(&g, experts, &mut rng);
    let bank = stream.clone_htod(&bank_host).during("expert bank upload")?;
    drop(bank_host);
    let (base, _g) = bank.device_ptr(stream);
    let slot_token: Vec<u32> = (0..slots).map(|s| (s * tokens / slots) as u32).collect();
    let x = vec![0.01f32; tokens * g.hidden];
    let (mut alone, mut chained) = (Vec::new(), Vec::new());
    let mut kernel = "";
    for r in 0..=reps {
        let mut ids: Vec<usize> = (0..experts).collect();
        ids.shuffle(&mut rng);
        let mut launches = Vec::with_capacity(CHAIN_LAYERS);
        for layer in ids.chunks_exact(slots).take(CHAIN_LAYERS) {
            let ptrs: Vec<u64> = layer
                .iter()
                .map(|&e| base + (e * g.expert_stride()) as u64)
                .collect();
            launches.push(k.prepare_moe(stream, g, Variant::PerSlot, &ptrs, &slot_token, &x)?);
        }
        stream.synchronize().during("prepare")?;
        kernel = launches.first().map_or("", |l| l.kernel_name());
        let mut one = 0.0;
        for l in launches.iter_mut() {
            k.launch_spin(stream, KERNEL_QUEUE_FILL_NS)?;
            one += time_events(ctx, stream, &mut || Ok(k.launch_moe(stream, l)?))?;
        }
        k.launch_spin(stream, KERNEL_QUEUE_FILL_NS)?;
        let all = time_events(ctx, stream, &mut || {
            for l in launches.iter_mut() {
                k.launch_moe(stream, l)?;
            }
            Ok(())
        })?;
        if r > 0 {
            alone.push(one / CHAIN_LAYERS as f64);
            chained.push(all / CHAIN_LAYERS as f64);
        }
    }
    let chained_us = summary(&chained)?;
    Ok(LayerChain {
        layers: CHAIN_LAYERS,
        hidden: g.hidden,
        ffn: g.ffn,
        slots,
        kernel: kernel.to_owned(),
        alone_us: summary(&alone)?,
        chained_bytes_per_us: (slots * g.expert_bytes()) as f64 / chained_us.median,
        chained_us,
    })
}

/// Busy-wait before each timed expert-kernel arm, ns: far longer than the host needs to enqueue an
/// event and two launches (3.35 µs per launch measured on the H200, docs/history/calibration.md).
const KERNEL_QUEUE_FILL_NS: u64 = 200_000;

/// One family of kernel arms sharing a bank of random experts.
struct KernelArm {
    tokens: usize,
    slots: usize,
    distinct: usize,
    variant: Variant,
    /// A per-slot kernel other than the default (recorded as variant `PerSlot:<kernel>`).
    per_slot: Option<PerSlotKernel>,
    /// Only this launch of the layer (0 gate+up, 1 down, each with its pre-pass; recorded as
    /// `PerSlot:<kernel>/gate_up` or `/down`): where a layer's time goes.
    phase: Option<usize>,
}

/// Bytes of one expert a launch reads: the whole expert, or one phase's weights and scales.
fn bytes_read(g: ExpertGeometry, phase: Option<usize>) -> usize {
    match phase {
        None => g.expert_bytes(),
        Some(0) => g.gate_up_weight_bytes() + g.gate_up_scale_bytes(),
        Some(_) => g.down_weight_bytes() + g.down_scale_bytes(),
    }
}

/// Name suffix of a phase-only arm.
fn phase_name(phase: usize) -> &'static str {
    if phase == 0 {
        "gate_up"
    } else {
        "down"
    }
}

/// Expert-kernel time vs expert bytes (batch 1, top-8, per-slot), the 60-slot bandwidth
/// geometry, and the 60-slot distinct-expert sweep (per-slot vs union, interleaved). With
/// `all_per_slot`, every per-slot arm is repeated with each other per-slot kernel that loaded.
pub(super) fn measure_kernels(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &mut Kernels,
    reps: u32,
    opts: &CalibrateOptions,
    all_per_slot: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<KernelPoint>, CalibrateError> {
    let default_per_slot = k.per_slot_kernel();
    let others: Vec<PerSlotKernel> = if all_per_slot {
        k.per_slot_kernels()
            .into_iter()
            .filter(|&p| p != default_per_slot)
            .collect()
    } else {
        Vec::new()
    };
    let families = kernel_families(default_per_slot, &others, opts, all_per_slot)?;
    let mut rng = Pcg64::seed_from_u64(opts.seed);
    let mut out = Vec::new();
    for (g, experts, arms) in families {
        // Random nibbles and small positive scales, as real int4 experts have (the GPU tests'
        // bank). Random bytes made the scales floats of any magnitude (1e-38 to 3e38, a few NaN
        // or infinite), whose products overflow or underflow, which slows the kernels: the
        // persistent kernel took 56-57 µs instead of 48 on 60 slots of 2560x640
        // (docs/history/kernels.md, "One persistent launch per layer").
        let bank_host = kernels::reference::random_bank(&g, experts, &mut rng);
        let bank = stream.clone_htod(&bank_host).during("expert bank upload")?;
        let (base, _g) = bank.device_ptr(stream);
        let mut samples = vec![Vec::new(); arms.len()];
        for r in 0..=reps {
            for (a, arm) in arms.iter().enumerate() {
                let t = time_arm(
                    ctx,
                    stream,
                    k,
                    (g, base, experts),
                    arm,
                    default_per_slot,
                    &mut rng,
                )?;
                if r > 0 {
                    samples[a].push(t);
                }
            }
        }
        for (arm, s) in arms.iter().zip(&samples) {
            let p = kernel_point(k, g, arm, s)?;
            log(&format!(
                "kernel {}x{} slots {} distinct {} {} ({}): {:.1} µs, {:.0} GB/s of distinct weights",
                p.hidden,
                p.ffn,
                p.slots,
                p.distinct,
                p.variant,
                p.kernel,
                p.time_us.median,
                p.weight_bytes_per_us / 1e3
            ));
            out.push(p);
        }
    }
    Ok(out)
}

/// A family of kernel arms: the expert geometry, the experts in its bank, and the arms.
type KernelFamily = (ExpertGeometry, usize, Vec<KernelArm>);

/// The arms `measure_kernels` times: per FFN width, top-8 of one token; at 2560x640, the
/// 60-slot sweep over distinct experts (per-slot and union) and, with `all_per_slot`, each
/// per-slot kernel's phases alone. Per-slot arms are repeated for each of `others`.
fn kernel_families(
    default_per_slot: PerSlotKernel,
    others: &[PerSlotKernel],
    opts: &CalibrateOptions,
    all_per_slot: bool,
) -> Result<Vec<KernelFamily>, CalibrateError> {
    // Adds `arm` and, for the per-slot variant, one copy per other per-slot kernel.
    let with_others = |arm: KernelArm| -> Vec<KernelArm> {
        let mut v = Vec::new();
        if arm.variant == Variant::PerSlot {
            for &p in others {
                v.push(KernelArm {
                    per_slot: Some(p),
                    ..arm
                });
            }
        }
        v.insert(0, arm);
        v
    };
    let geo =
        |h, f| ExpertGeometry::new(h, f, 128).map_err(|e| CalibrateError::Other(e.to_string()));
    // (geometry, experts in bank, arms)
    let mut families: Vec<KernelFamily> = Vec::new();
    let ffns: &[usize] = if opts.quick {
        &[256, 768]
    } else {
        &[256, 512, 768, 1024, 1536]
    };
    for &f in ffns {
        let g = geo(2048, f)?;
        families.push((
            g,
            128,
            with_others(KernelArm {
                tokens: 1,
                slots: 8,
                distinct: 8,
                variant: Variant::PerSlot,
                per_slot: None,
                phase: None,
            }),
        ));
    }
    let big = geo(2560, 640)?;
    let distincts: &[usize] = if opts.quick {
        &[60, 6]
    } else {
        &[60, 30, 20, 15, 12, 10, 6]
    };
    let mut arms = Vec::new();
    for &d in distincts {
        for v in [Variant::PerSlot, Variant::Union] {
            arms.extend(with_others(KernelArm {
                tokens: 6,
                slots: 60,
                distinct: d,
                variant: v,
                per_slot: None,
                phase: None,
            }));
        }
    }
    // The gate+up and the down launch of every per-slot kernel alone (each with its activation
    // pre-pass, if it has one), at 60 distinct experts.
    if all_per_slot {
        for p in std::iter::once(default_per_slot).chain(others.iter().copied()) {
            // A one-launch kernel has no phase to time alone.
            if matches!(p, PerSlotKernel::Dot(i) if DOT_KERNELS[i].staging.single_launch()) {
                continue;
            }
            for phase in 0..2 {
                arms.push(KernelArm {
                    tokens: 6,
                    slots: 60,
                    distinct: 60,
                    variant: Variant::PerSlot,
                    per_slot: Some(p),
                    phase: Some(phase),
                });
            }
        }
    }
    families.push((big, 512, arms));
    Ok(families)
}

/// One timing of `arm` on a bank of `experts` experts of geometry `g` at device address
/// `base`, over experts drawn afresh from `rng`, µs.
fn time_arm(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &mut Kernels,
    (g, base, experts): (ExpertGeometry, u64, usize),
    arm: &KernelArm,
    default_per_slot: PerSlotKernel,
    rng: &mut Pcg64,
) -> Result<f64, CalibrateError> {
    // Fresh experts every repetition so the L2 (50-60 MB on Hopper) holds none of them.
    let mut ids: Vec<usize> = (0..experts).collect();
    ids.shuffle(rng);
    let pool = &ids[..arm.distinct];
    let ptrs: Vec<u64> = (0..arm.slots)
        .map(|s| base + (pool[s % arm.distinct] * g.expert_stride()) as u64)
        .collect();
    let slot_token: Vec<u32> = (0..arm.slots)
        .map(|s| (s * arm.tokens / arm.slots) as u32)
        .collect();
    let x = vec![0.01f32; arm.tokens * g.hidden];
    k.set_per_slot_kernel(arm.per_slot.unwrap_or(default_per_slot))?;
    let mut launch = k.prepare_moe(stream, g, arm.variant, &ptrs, &slot_token, &x)?;
    k.set_per_slot_kernel(default_per_slot)?;
    stream.synchronize().during("prepare")?;
    // The GPU busy-waits while the host enqueues the start event and both launches,
    // so the events time the kernels back to back on the GPU (as a decode loop that
    // runs ahead of the GPU sees them), not the host's launch latency, which is
    // measured on its own (`launch_us`).
    k.launch_spin(stream, KERNEL_QUEUE_FILL_NS)?;
    let t = match arm.phase {
        None => time_events(ctx, stream, &mut || Ok(k.launch_moe(stream, &mut launch)?))?,
        Some(phase) => time_events(ctx, stream, &mut || {
            Ok(k.launch_moe_phase(stream, &mut launch, phase)?)
        })?,
    };
    Ok(t)
}

/// The measured point of `arm` on geometry `g` from its repetitions' times `s`.
fn kernel_point(
    k: &Kernels,
    g: ExpertGeometry,
    arm: &KernelArm,
    s: &[f64],
) -> Result<KernelPoint, CalibrateError> {
    let time_us = summary(s)?;
    Ok(KernelPoint {
        hidden: g.hidden,
        ffn: g.ffn,
        group: g.group,
        expert_bytes: g.expert_bytes() as u64,
        tokens: arm.tokens,
        slots: arm.slots,
        distinct: arm.distinct,
        variant: match (arm.per_slot, arm.phase) {
            (Some(p), Some(phase)) => format!("PerSlot:{}/{}", p.name(), phase_name(phase)),
            (Some(p), None) => format!("PerSlot:{}", p.name()),
            (None, _) => format!("{:?}", arm.variant),
        },
        kernel: kernel_name(k, arm, g.group),
        weight_bytes_per_us: (arm.distinct * bytes_read(g, arm.phase)) as f64 / time_us.median,
        time_us,
    })
}

/// The CUDA function serving `arm` (the union variant's kernel depends on the group: see
/// `Kernels::prepare_moe`).
fn kernel_name(k: &Kernels, arm: &KernelArm, group: usize) -> String {
    match arm.variant {
        Variant::PerSlot => arm
            .per_slot
            .unwrap_or(k.per_slot_kernel())
            .name()
            .to_owned(),
        Variant::Union if kernels::launch::tensor_core_group(group) => "moe_matvec_tc".to_owned(),
        Variant::Union => "moe_matvec_t8".to_owned(),
    }
}
