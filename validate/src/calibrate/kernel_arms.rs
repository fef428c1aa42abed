//! The expert-kernel arms of a calibration: the streaming-read bandwidth reference and the
//! expert-kernel timings (time against expert bytes at batch 1, the 60-slot bandwidth geometry,
//! and the distinct-expert sweep of the per-slot and union variants), alone or as part of the
//! full calibration ([`super::calibrate`]). Alone (`sim calibrate --only kernels`) it also times
//! every per-slot kernel (the load-only diagnostic twins included), each one's gate+up and down
//! launch apart, streaming reads of exactly one 60-slot launch's bytes ([`WindowRead`]), and
//! the default kernel's layers timed alone and back to back ([`LayerChain`]). Both ways (the
//! full calibration runs it last) it holds the default kernel against a plain read of the same
//! bytes in the same launch shape ([`ShapedRead`]) and logs the 60-slot union curve (per-slot
//! against union over distinct experts, [`union_curve_lines`]).

use super::{summary, time_events, CalibrateError, CalibrateOptions, Step, GIB, MIB};
use crate::device::DeviceInfo;
use crate::stats::Summary;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use kernels::launch::DOT_KERNELS;
use kernels::{ExpertGeometry, Kernels, LaunchShape, MoeLaunch, PerSlotKernel, Variant};
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
    /// The kernel the arm asked for (absent in calibrations before it was recorded): the
    /// union kernel, or the per-slot kernel, whose launches may run its one-wave or its
    /// repeat partner (`kernels::launch::DotKernel::for_launch`, `for_repeats`).
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
    /// without that arm, such as `validate/tests/fixtures/h200-linux-p8.measurements.json`, or
    /// when the same-shape read arm it comes from failed): the kernel half of the 60-slot
    /// [`ShapedRead`].
    #[serde(default)]
    pub layer_chain: Option<LayerChain>,
    /// The default kernel against a plain read of the same bytes in its own launch shape
    /// ([`measure_shaped_reads`]; empty in sets recorded before that arm, or when it failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shaped_reads: Vec<ShapedRead>,
    /// Why the per-slot dot kernels did not load (NVRTC log), if they did not.
    pub dot_error: Option<String>,
    /// Wall time, s (pooled sets: the median of theirs).
    pub wall_s: f64,
    /// How many kernel calibrations this set pools ([`crate::pool::pool_kernels`]); absent
    /// for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled_from: Option<u32>,
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
    let shaped_reads = measure_shaped_reads(&ctx, &stream, &k, reps, opts.seed, log);
    let layer_chain = shaped_reads
        .iter()
        .find(|p| (p.hidden, p.ffn, p.slots) == (2560, 640, 60))
        .map(LayerChain::of);
    if let Some(c) = &layer_chain {
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
    }
    Ok(KernelCalibration {
        layer_chain,
        shaped_reads,
        window_reads,
        device,
        quick: opts.quick,
        reps,
        stream_read_bytes,
        stream_read_bytes_per_us,
        kernels,
        dot_error,
        wall_s: t0.elapsed().as_secs_f64(),
        pooled_from: None,
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
/// back to back: the kernel half of that layer's [`ShapedRead`] ([`measure_shaped_reads`]).
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

impl LayerChain {
    /// The kernel half of `p`.
    fn of(p: &ShapedRead) -> Self {
        LayerChain {
            layers: p.layers,
            hidden: p.hidden,
            ffn: p.ffn,
            slots: p.slots,
            kernel: p.kernel.clone(),
            alone_us: p.kernel_alone_us.clone(),
            chained_bytes_per_us: p.bytes as f64 / p.kernel_chained_us.median,
            chained_us: p.kernel_chained_us.clone(),
        }
    }
}

/// Layers per chain of the back-to-back arms ([`measure_shaped_reads`]): 8 x 156.7 MB at 60
/// slots of 2560x640, 25 times the 50 MB L2 (a design choice; long enough that one layer's
/// ramp and the last one's tail weigh little).
const CHAIN_LAYERS: usize = 8;

/// The layers of the same-shape read arms, (hidden, ffn, tokens, slots), every slot naming its
/// own expert, groups of 128: the kernel arms' 60-slot bandwidth geometry (156.7 MB, 6 tokens)
/// and the Qwen3-30B-A3B batch-1 layer (top-8 experts of 2048x768, the model's `config.json`).
pub const SHAPED_READ_LAYERS: [(usize, usize, usize, usize); 2] =
    [(2560, 640, 6, 60), (2048, 768, 1, 8)];

/// The kernel's target against its same-shape plain read (read time / kernel time): within 90%
/// of the read (BENCHMARKS.md, "Expert kernels (H200)"). Printed beside the ratios, decides
/// nothing.
pub const SHAPED_READ_TARGET: f64 = 0.9;

/// Bytes the plain reads' ring of windows spans at least: 5 times the H200's 50 MB L2 (a
/// design choice), so no read finds its window in the L2.
const READ_RING_BYTES: u64 = 256 * MIB;

/// Bytes read (untimed) before each repetition of the same-shape arms: 2.5 times the H200's 50
/// MB L2 (a design choice), so the repetition's first layer finds none of the experts or
/// windows the previous one read last (8 layers of 8 Qwen3 experts, 160 MB, are only 3 times
/// the L2, and the next repetition draws from the same 72 experts).
const L2_FLUSH_BYTES: u64 = 128 * MIB;

/// The default expert kernel against a plain read of the same bytes in the same launch shape
/// ([`measure_shaped_reads`]), on one layer, timed alone and [`CHAIN_LAYERS`] back to back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShapedRead {
    /// Model hidden size.
    pub hidden: usize,
    /// Expert FFN width.
    pub ffn: usize,
    /// int4 quantization group: weights per scale.
    pub group: usize,
    /// Tokens of the batch.
    pub tokens: usize,
    /// Routed slots of a layer, each naming its own expert.
    pub slots: usize,
    /// Layers of the back-to-back arms, each with its own experts.
    pub layers: usize,
    /// The CUDA function that ran the expert FFN (the default kernel, or the kernel it hands
    /// the launch to: its one-wave partner, or its fallback before compute capability 9.0).
    pub kernel: String,
    /// The layer's weight launches (activation pre-passes left out), each of which the plain
    /// read repeats in its shape over its bytes.
    pub launches: Vec<ReadLaunch>,
    /// The distinct experts' bytes of one layer (the launches' bytes summed).
    pub bytes: u64,
    /// One layer's kernel launches, each layer timed alone behind a busy-wait (as the kernel
    /// arms), µs per layer.
    pub kernel_alone_us: Summary,
    /// One layer's plain reads, timed the same way, µs per layer.
    pub read_alone_us: Summary,
    /// The layers' kernel launches enqueued back to back behind one busy-wait, chain time /
    /// layers, µs.
    pub kernel_chained_us: Summary,
    /// The layers' plain reads enqueued back to back the same way, µs per layer.
    pub read_chained_us: Summary,
    /// Read median / kernel median alone: the kernel's speed as a fraction of the read's.
    pub alone_ratio: f64,
    /// Read median / kernel median back to back.
    pub chained_ratio: f64,
}

/// One weight launch of a [`ShapedRead`]: a [`LaunchShape`] as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadLaunch {
    /// Blocks along x.
    pub grid_x: u32,
    /// Blocks along y (the work items of a two-launch layer).
    pub grid_y: u32,
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
    /// Bytes the launch reads.
    pub bytes: u64,
    /// A programmatic dependent launch.
    pub programmatic: bool,
    /// It lets a programmatic launch after it start at once.
    pub allows_dependents: bool,
}

impl From<LaunchShape> for ReadLaunch {
    fn from(s: LaunchShape) -> Self {
        ReadLaunch {
            grid_x: s.grid.0,
            grid_y: s.grid.1,
            block: s.block,
            shared_bytes: s.shared_bytes,
            bytes: s.bytes,
            programmatic: s.programmatic,
            allows_dependents: s.allows_dependents,
        }
    }
}

/// Holds the default kernel against a plain read of its own launch shape on each layer of
/// [`SHAPED_READ_LAYERS`] ([`measure_shaped_read`]), one line each to `log`. A layer whose arm
/// fails is logged and left out: the arm runs after the others, and its failure spoils none of
/// their figures.
pub(super) fn measure_shaped_reads(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    reps: u32,
    seed: u64,
    log: &mut dyn FnMut(&str),
) -> Vec<ShapedRead> {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut out = Vec::new();
    for layer in SHAPED_READ_LAYERS {
        match measure_shaped_read(ctx, stream, k, reps, &mut rng, layer) {
            Ok(p) => {
                log(&shaped_read_line(&p));
                out.push(p);
            }
            Err(e) => log(&format!(
                "same-shape read, {} slots of {}x{}: failed, its figures stay absent: {e}",
                layer.3, layer.0, layer.1
            )),
        }
    }
    out
}

/// One layer of [`SHAPED_READ_LAYERS`]: every repetition draws [`CHAIN_LAYERS`] layers of fresh
/// experts from a bank of random ones (`kernels::reference::random_bank`), reads
/// [`L2_FLUSH_BYTES`] untimed, and times, interleaved
/// ([`time_layers`]), each layer's kernel and its plain read alone, then the layers' kernels and
/// their reads back to back. The read of a layer is [`Kernels::launch_stream_read_shaped`] of
/// each of the layer's weight launches ([`Kernels::weight_launch_shapes`]) over consecutive
/// parts of one window of a ring of [`READ_RING_BYTES`] (the same bytes, contiguous), so the
/// L2 holds none of it. Back to back, a layer's programmatic launches may start while the
/// previous layer drains, as a decoder's consecutive MoE layers allow, and the reads' launches
/// likewise where the kernel's are ([`kernels::LaunchShape::programmatic`]). The longest chain
/// is 16 launches (8 layers of two), about 54 µs of host time at 3.35 µs per launch, well
/// inside the [`KERNEL_QUEUE_FILL_NS`] busy-wait.
fn measure_shaped_read(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    reps: u32,
    rng: &mut Pcg64,
    (hidden, ffn, tokens, slots): (usize, usize, usize, usize),
) -> Result<ShapedRead, CalibrateError> {
    let g =
        ExpertGeometry::new(hidden, ffn, 128).map_err(|e| CalibrateError::Other(e.to_string()))?;
    let experts = (CHAIN_LAYERS + 1) * slots;
    let bank_host = kernels::reference::random_bank(&g, experts, rng);
    let bank = stream.clone_htod(&bank_host).during("expert bank upload")?;
    drop(bank_host);
    let (base, _g) = bank.device_ptr(stream);
    let bank_at = (base, g.expert_stride() as u64);
    let slot_token: Vec<u32> = (0..slots).map(|s| (s * tokens / slots) as u32).collect();
    let x = vec![0.01f32; tokens * g.hidden];
    let probe = prepare_layers(stream, k, g, bank_at, &mut (0..slots), &slot_token, &x)?;
    let kernel = probe[0].kernel_name().to_owned();
    let shapes = k.weight_launch_shapes(&probe[0]);
    drop(probe);
    let bytes: u64 = shapes.iter().map(|s| s.bytes).sum();
    let mut ring = ReadRing::new(stream, bytes)?;
    let mut samples: [Vec<f64>; 4] = Default::default();
    for r in 0..=reps {
        let mut ids: Vec<usize> = (0..experts).collect();
        ids.shuffle(rng);
        let mut it = ids.into_iter().take(CHAIN_LAYERS * slots);
        let mut launches = prepare_layers(stream, k, g, bank_at, &mut it, &slot_token, &x)?;
        ring.flush_l2(stream, k)?;
        let t = time_layers(
            ctx,
            stream,
            k,
            &mut launches,
            &shapes,
            &mut ring,
            r % 2 == 1,
        )?;
        if r > 0 {
            for (s, v) in samples.iter_mut().zip(t) {
                s.push(v);
            }
        }
    }
    let [ka, ra, kc, rc] = samples.each_ref().map(|v| summary(v));
    let (kernel_alone_us, read_alone_us, kernel_chained_us, read_chained_us) = (ka?, ra?, kc?, rc?);
    Ok(ShapedRead {
        hidden,
        ffn,
        group: g.group,
        tokens,
        slots,
        layers: CHAIN_LAYERS,
        kernel,
        launches: shapes.into_iter().map(ReadLaunch::from).collect(),
        bytes,
        alone_ratio: read_alone_us.median / kernel_alone_us.median,
        chained_ratio: read_chained_us.median / kernel_chained_us.median,
        kernel_alone_us,
        read_alone_us,
        kernel_chained_us,
        read_chained_us,
    })
}

/// Layers of the default per-slot kernel, one per `slot_token.len()` experts that `experts`
/// yields (ids into a bank at (device address, stride)), prepared and uploaded.
fn prepare_layers(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    g: ExpertGeometry,
    (base, stride): (u64, u64),
    experts: &mut dyn Iterator<Item = usize>,
    slot_token: &[u32],
    x: &[f32],
) -> Result<Vec<MoeLaunch>, CalibrateError> {
    let ids: Vec<usize> = experts.collect();
    let mut launches = Vec::new();
    for layer in ids.chunks_exact(slot_token.len()) {
        let ptrs: Vec<u64> = layer.iter().map(|&e| base + e as u64 * stride).collect();
        launches.push(k.prepare_moe(stream, g, Variant::PerSlot, &ptrs, slot_token, x)?);
    }
    stream.synchronize().during("prepare")?;
    Ok(launches)
}

/// Windows of one layer's read bytes in a buffer of at least [`READ_RING_BYTES`] (2 windows at
/// least), handed out in turn; a buffer of [`L2_FLUSH_BYTES`] apart; and the reads' sink.
struct ReadRing {
    _buf: CudaSlice<u8>,
    flush: CudaSlice<u8>,
    base: u64,
    stride: u64,
    windows: u64,
    next: u64,
    sink: CudaSlice<u32>,
}

impl ReadRing {
    fn new(stream: &Arc<CudaStream>, layer_bytes: u64) -> Result<Self, CalibrateError> {
        let stride = layer_bytes.max(1).div_ceil(256) * 256;
        let windows = READ_RING_BYTES.div_ceil(stride).max(2);
        let buf = stream
            .alloc_zeros::<u8>((windows * stride) as usize)
            .during("plain-read windows")?;
        let base = buf.device_ptr(stream).0;
        Ok(ReadRing {
            _buf: buf,
            flush: stream
                .alloc_zeros::<u8>(L2_FLUSH_BYTES as usize)
                .during("L2 flush buffer")?,
            base,
            stride,
            windows,
            next: 0,
            sink: stream.alloc_zeros::<u32>(1).during("sink")?,
        })
    }

    /// Enqueues a streaming read of the flush buffer (the reference read, untimed): afterwards
    /// the L2 holds none of the experts or windows read before.
    fn flush_l2(&mut self, stream: &Arc<CudaStream>, k: &Kernels) -> Result<(), CalibrateError> {
        Ok(k.launch_stream_read(stream, &self.flush, &mut self.sink)?)
    }

    /// The device address of the next window.
    fn next_window(&mut self) -> u64 {
        let w = self.base + (self.next % self.windows) * self.stride;
        self.next += 1;
        w
    }
}

/// One repetition of [`measure_shaped_read`]: each layer alone, its kernel and its plain read
/// one after the other (the read first when `read_first`, so neither always follows the
/// other), then every layer's kernel back to back and every layer's read back to back, in the
/// same order. Returns µs per layer: kernel alone, read alone, kernel chained, read chained.
fn time_layers(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    launches: &mut [MoeLaunch],
    shapes: &[LaunchShape],
    ring: &mut ReadRing,
    read_first: bool,
) -> Result<[f64; 4], CalibrateError> {
    let layers = launches.len();
    let mut t = [0.0; 4];
    for i in 0..layers {
        let (kt, rt) = in_order(
            read_first,
            &mut || time_kernels(ctx, stream, k, &mut launches[i..=i]),
            &mut || time_reads(ctx, stream, k, shapes, ring, 1),
        )?;
        t[0] += kt;
        t[1] += rt;
    }
    let (kt, rt) = in_order(
        read_first,
        &mut || time_kernels(ctx, stream, k, launches),
        &mut || time_reads(ctx, stream, k, shapes, ring, layers),
    )?;
    t[2] = kt;
    t[3] = rt;
    Ok(t.map(|v| v / layers as f64))
}

/// (kernel(), read()), run in that order, or the read first when `read_first`.
fn in_order(
    read_first: bool,
    kernel: &mut dyn FnMut() -> Result<f64, CalibrateError>,
    read: &mut dyn FnMut() -> Result<f64, CalibrateError>,
) -> Result<(f64, f64), CalibrateError> {
    if read_first {
        let r = read()?;
        Ok((kernel()?, r))
    } else {
        let kt = kernel()?;
        Ok((kt, read()?))
    }
}

/// `launches` enqueued back to back behind a busy-wait, between CUDA events, µs.
fn time_kernels(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    launches: &mut [MoeLaunch],
) -> Result<f64, CalibrateError> {
    k.launch_spin(stream, KERNEL_QUEUE_FILL_NS)?;
    time_events(ctx, stream, &mut || {
        for l in launches.iter_mut() {
            k.launch_moe(stream, l)?;
        }
        Ok(())
    })
}

/// The plain reads of `layers` layers (each one's `shapes` over consecutive parts of the ring's
/// next window) enqueued back to back behind a busy-wait, between CUDA events, µs.
fn time_reads(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    k: &Kernels,
    shapes: &[LaunchShape],
    ring: &mut ReadRing,
    layers: usize,
) -> Result<f64, CalibrateError> {
    let windows: Vec<u64> = (0..layers).map(|_| ring.next_window()).collect();
    let sink = &mut ring.sink;
    k.launch_spin(stream, KERNEL_QUEUE_FILL_NS)?;
    time_events(ctx, stream, &mut || {
        for &w in &windows {
            let mut at = w;
            for s in shapes {
                k.launch_stream_read_shaped(stream, at, s, sink)?;
                at += s.bytes;
            }
        }
        Ok(())
    })
}

/// The log line of `p`: the launches, the kernel and the read alone and back to back, and the
/// ratios against [`SHAPED_READ_TARGET`].
fn shaped_read_line(p: &ShapedRead) -> String {
    let launches: Vec<String> = p
        .launches
        .iter()
        .map(|l| {
            format!(
                "{}x{} blocks of {}{}",
                l.grid_x,
                l.grid_y,
                l.block,
                if l.programmatic { ", programmatic" } else { "" }
            )
        })
        .collect();
    format!(
        "same-shape read, {} slots of {}x{} ({}; {:.1} MB in {}): alone kernel {:.1} µs, read \
         {:.1} µs, read/kernel {:.2}; {} layers back to back, per layer kernel {:.1} µs, read \
         {:.1} µs, read/kernel {:.2} (target {:.2})",
        p.slots,
        p.hidden,
        p.ffn,
        p.kernel,
        p.bytes as f64 / 1e6,
        launches.join(" + "),
        p.kernel_alone_us.median,
        p.read_alone_us.median,
        p.alone_ratio,
        p.layers,
        p.kernel_chained_us.median,
        p.read_chained_us.median,
        p.chained_ratio,
        SHAPED_READ_TARGET
    )
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
        Some(0) => g.gate_up_bytes(),
        Some(_) => g.down_bytes(),
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
    for line in union_curve_lines(&out) {
        log(&line);
    }
    Ok(out)
}

/// The union curve of the 60-slot arms of 2560x640 in `points` (the default per-slot kernel,
/// variant `PerSlot`, against the union variant, `Union`): a heading naming both kernels, then
/// per distinct-expert count in measured order its median times and the bandwidth each implies
/// over the distinct experts' bytes (`-` where an arm is missing). Empty without such arms.
fn union_curve_lines(points: &[KernelPoint]) -> Vec<String> {
    let sweep = |variant: &str| -> Vec<&KernelPoint> {
        points
            .iter()
            .filter(|p| (p.hidden, p.ffn, p.slots) == (2560, 640, 60) && p.variant == variant)
            .collect()
    };
    let (per_slot, union) = (sweep("PerSlot"), sweep("Union"));
    let mut distincts: Vec<usize> = Vec::new();
    for p in per_slot.iter().chain(&union) {
        if !distincts.contains(&p.distinct) {
            distincts.push(p.distinct);
        }
    }
    if distincts.is_empty() {
        return Vec::new();
    }
    let name = |v: &[&KernelPoint]| v.first().map_or("-", |p| p.kernel.as_str()).to_owned();
    let mut lines = vec![
        format!(
            "union curve, 60 slots of 2560x640: per-slot {} against union {}",
            name(&per_slot),
            name(&union)
        ),
        "  distinct  per-slot µs  union µs  per-slot GB/s  union GB/s (of the distinct experts' bytes)"
            .to_owned(),
    ];
    let at = |v: &[&KernelPoint], d: usize, f: &dyn Fn(&KernelPoint) -> String| -> String {
        v.iter()
            .find(|p| p.distinct == d)
            .map_or("-".to_owned(), |p| f(p))
    };
    let time = |p: &KernelPoint| format!("{:.1}", p.time_us.median);
    let gbs = |p: &KernelPoint| format!("{:.0}", p.weight_bytes_per_us / 1e3);
    for d in distincts {
        lines.push(format!(
            "  {d:>8}  {:>11}  {:>8}  {:>13}  {:>10}",
            at(&per_slot, d, &time),
            at(&union, d, &time),
            at(&per_slot, d, &gbs),
            at(&union, d, &gbs)
        ));
    }
    lines
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

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_of(v: &[f64]) -> Summary {
        Summary::of(v).unwrap()
    }

    /// A 60-slot arm of 2560x640 (expert 2611200 B) with `distinct` experts taking `us`.
    fn point(variant: &str, kernel: &str, distinct: usize, us: f64) -> KernelPoint {
        KernelPoint {
            hidden: 2560,
            ffn: 640,
            group: 128,
            expert_bytes: 2_611_200,
            tokens: 6,
            slots: 60,
            distinct,
            variant: variant.into(),
            kernel: kernel.into(),
            time_us: summary_of(&[us]),
            weight_bytes_per_us: (distinct * 2_611_200) as f64 / us,
        }
    }

    /// The table lists the distinct counts in measured order; a bandwidth is the distinct
    /// experts' bytes over the median (60 x 2611200 B / 48.6 µs = 3223.7 GB/s; 6 x 2611200 /
    /// 39.2 = 399.7; the union's 60 / 151.2 = 1036.2 and 6 / 54.8 = 285.9). A count without its
    /// union arm shows `-`; other arms (another kernel, a phase, another geometry) are not
    /// rows.
    #[test]
    fn union_curve_table_matches_hand_computation() {
        let fz = "moe_dot_fz_r2j1s3b1";
        let mut points = vec![
            point("PerSlot", fz, 60, 48.6),
            point("Union", "moe_matvec_tc", 60, 151.2),
            point(
                "PerSlot:moe_dot_xp_r2j1n3b4",
                "moe_dot_xp_r2j1n3b4",
                60,
                55.0,
            ),
            point("PerSlot", fz, 6, 39.2),
            point("Union", "moe_matvec_tc", 6, 54.8),
            point("PerSlot", fz, 3, 30.0),
        ];
        let mut other = point("PerSlot", fz, 8, 14.5);
        other.hidden = 2048;
        points.push(other);
        let lines = union_curve_lines(&points);
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert_eq!(
            lines[0],
            "union curve, 60 slots of 2560x640: per-slot moe_dot_fz_r2j1s3b1 against union \
             moe_matvec_tc"
        );
        let cells = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(cells(&lines[2]), ["60", "48.6", "151.2", "3224", "1036"]);
        assert_eq!(cells(&lines[3]), ["6", "39.2", "54.8", "400", "286"]);
        assert_eq!(cells(&lines[4]), ["3", "30.0", "-", "261", "-"]);
        assert!(union_curve_lines(&points[6..]).is_empty());
    }

    /// A 60-slot point: one launch of 156.672 MB; read 40 µs against the kernel's 50 (0.80)
    /// alone, 42 against 48 (0.875) back to back.
    fn shaped() -> ShapedRead {
        let (ka, ra, kc, rc) = ([50.0, 49.0, 51.0], [40.0], [48.0], [42.0]);
        ShapedRead {
            hidden: 2560,
            ffn: 640,
            group: 128,
            tokens: 6,
            slots: 60,
            layers: 8,
            kernel: "moe_dot_fz_r2j1s3b1".into(),
            launches: vec![ReadLaunch {
                grid_x: 132,
                grid_y: 1,
                block: 320,
                shared_bytes: 147_840,
                bytes: 156_672_000,
                programmatic: true,
                allows_dependents: true,
            }],
            bytes: 156_672_000,
            kernel_alone_us: summary_of(&ka),
            read_alone_us: summary_of(&ra),
            kernel_chained_us: summary_of(&kc),
            read_chained_us: summary_of(&rc),
            alone_ratio: 40.0 / 50.0,
            chained_ratio: 42.0 / 48.0,
        }
    }

    #[test]
    fn shaped_read_line_names_the_launches_times_and_ratios() {
        assert_eq!(
            shaped_read_line(&shaped()),
            "same-shape read, 60 slots of 2560x640 (moe_dot_fz_r2j1s3b1; 156.7 MB in 132x1 \
             blocks of 320, programmatic): alone kernel 50.0 µs, read 40.0 µs, read/kernel \
             0.80; 8 layers back to back, per layer kernel 48.0 µs, read 42.0 µs, read/kernel \
             0.88 (target 0.90)"
        );
        let mut two = shaped();
        two.launches = vec![
            ReadLaunch {
                grid_x: 48,
                grid_y: 8,
                block: 256,
                shared_bytes: 4608,
                bytes: 13_369_344,
                programmatic: false,
                allows_dependents: false,
            },
            ReadLaunch {
                grid_x: 32,
                grid_y: 8,
                block: 256,
                shared_bytes: 1728,
                bytes: 6_684_672,
                programmatic: true,
                allows_dependents: false,
            },
        ];
        assert!(shaped_read_line(&two)
            .contains("in 48x8 blocks of 256 + 32x8 blocks of 256, programmatic)"));
    }

    /// The layer chain is the kernel half: 156672000 B / 48 µs = 3264000 B/µs.
    #[test]
    fn layer_chain_is_the_kernel_half_of_the_shaped_read() {
        let c = LayerChain::of(&shaped());
        assert_eq!((c.layers, c.slots, c.hidden, c.ffn), (8, 60, 2560, 640));
        assert_eq!(c.kernel, "moe_dot_fz_r2j1s3b1");
        assert_eq!((c.alone_us.median, c.chained_us.median), (50.0, 48.0));
        assert_eq!(c.chained_bytes_per_us, 3_264_000.0);
    }

    /// A set without the arm serializes without the key (stored sets rebuild byte for byte)
    /// and reads back with none; with a point, the point survives a JSON round trip.
    #[test]
    fn shaped_reads_are_left_out_when_absent() {
        let device = DeviceInfo {
            gpu: "g".into(),
            driver: "d".into(),
            cuda: "c".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 132,
            vram_total: 1,
            vram_free: 1,
            concurrent_managed_access: true,
            os: "linux".into(),
            date: "2026-12-02".into(),
        };
        let mut cal = KernelCalibration {
            device,
            quick: true,
            reps: 3,
            stream_read_bytes: 16,
            stream_read_bytes_per_us: summary_of(&[1.0]),
            window_reads: Vec::new(),
            kernels: Vec::new(),
            layer_chain: None,
            shaped_reads: Vec::new(),
            dot_error: None,
            wall_s: 1.0,
            pooled_from: None,
        };
        let text = serde_json::to_string(&cal).unwrap();
        assert!(!text.contains("shaped_reads"), "{text}");
        let back: KernelCalibration = serde_json::from_str(&text).unwrap();
        assert!(back.shaped_reads.is_empty());
        cal.shaped_reads.push(shaped());
        let back: KernelCalibration =
            serde_json::from_str(&serde_json::to_string(&cal).unwrap()).unwrap();
        assert_eq!(back.shaped_reads.len(), 1);
        assert_eq!(back.shaped_reads[0].launches, shaped().launches);
        assert_eq!(back.shaped_reads[0].chained_ratio, 42.0 / 48.0);
    }
}
