//! The CUDA side: library checks, NVRTC compilation of `cuda/moe.cu`, and launch wrappers.

use crate::geometry::ExpertGeometry;
use crate::launch::{
    dot_activation_bytes, fused_plan, lanes_per_row, rows_per_block, tc_rows_per_block,
    tensor_core_group, warps_per_tile, weight_launch_shapes, DotStaging, FusedPlan, LaunchShape,
    LayerLaunches, BLOCK_THREADS, DEFAULT_DOT_KERNEL, DOT_FALLBACK_KERNEL, DOT_KERNELS,
    FUSED_FALLBACK_KERNEL, FUSED_THREADS, PER_SLOT_ROWS, TC_K_BLOCK, TC_WARPS, UNION_ROWS,
};
use crate::worklist::{Variant, WorkList, MAX_SLOTS_PER_ITEM};
use cudarc::driver::sys::CUfunction_attribute_enum as FnAttr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};
use std::sync::Arc;

/// The kernels' CUDA C source (compiled at run time with NVRTC).
pub const SOURCE: &str = include_str!("cuda/moe.cu");
/// The per-slot int8-dot kernels' CUDA C source, compiled as a module of its own so that a
/// compile failure there leaves the kernels of [`SOURCE`] usable.
pub const DOT_SOURCE: &str = include_str!("cuda/moe_dot.cu");
/// Bytes of one staged activation value (f32) in the kernels' shared memory.
const ACTIVATION_BYTES: usize = 4;
/// Shared memory kept back from the dot kernels' dynamic allocation for their static arrays
/// (cross-warp sums: 8 warps x 2 rows x 4 B = 64 B), bytes.
const DOT_STATIC_SHARED_BYTES: usize = 1024;

/// Which kernel serves the per-slot variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerSlotKernel {
    /// `moe_matvec_t1` of [`SOURCE`]: f32 dequantization and FMAs.
    F32,
    /// `DOT_KERNELS[i]` of [`DOT_SOURCE`]: activations quantized per block to 16-bit integers,
    /// int4 x int8 `dp4a` dot products (within the same tolerance of the CPU reference).
    Dot(usize),
}

impl PerSlotKernel {
    /// The CUDA function's name, for logs and measurement records.
    pub fn name(self) -> &'static str {
        match self {
            PerSlotKernel::F32 => "moe_matvec_t1",
            PerSlotKernel::Dot(i) => DOT_KERNELS[i].name,
        }
    }
}

fn compile(source: &str, arch: &'static str) -> Result<cudarc::nvrtc::Ptx, KernelError> {
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts)
        .map_err(|e| KernelError::Compile(format!("{e:?}")))
}

/// Errors of the CUDA paths.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("the CUDA driver library (libcuda / nvcuda.dll) could not be loaded: this needs an NVIDIA GPU with its driver installed")]
    NoDriver,
    #[error("the NVRTC library (libnvrtc / nvrtc64_*.dll) could not be loaded: install the CUDA toolkit (13.x) or add its lib directory to LD_LIBRARY_PATH / PATH")]
    NoNvrtc,
    #[error("no CUDA device found")]
    NoDevice,
    #[error("NVRTC failed to compile the kernels: {0}")]
    Compile(String),
    #[error("CUDA driver call failed: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("invalid launch: {0}")]
    Invalid(String),
}

/// Checks that the CUDA driver and NVRTC libraries load, without touching any CUDA API
/// (cudarc panics when a library is missing, so call this before any CUDA call).
pub fn check_cuda_libraries() -> Result<(), KernelError> {
    // SAFETY: these only try to dlopen the libraries by name.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(KernelError::NoDriver);
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(KernelError::NoNvrtc);
    }
    Ok(())
}

/// Opens device `ordinal` after [`check_cuda_libraries`], with cudarc's per-slice event
/// tracking off (the callers order their streams themselves; tracking would add events to every launch).
pub fn open_device(ordinal: usize) -> Result<Arc<CudaContext>, KernelError> {
    check_cuda_libraries()?;
    if CudaContext::device_count()? <= ordinal as i32 {
        return Err(KernelError::NoDevice);
    }
    let ctx = CudaContext::new(ordinal)?;
    // SAFETY: called before any slice exists on this context.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// The compiled kernels of [`SOURCE`] on one context.
pub struct Kernels {
    ctx: Arc<CudaContext>,
    _module: Arc<CudaModule>,
    moe_t1: CudaFunction,
    moe_t8: CudaFunction,
    moe_tc: CudaFunction,
    prep_tc: CudaFunction,
    page_touch: CudaFunction,
    stream_read: CudaFunction,
    /// `stream_read_grid`: the plain read of an expert launch's shape.
    stream_read_grid: CudaFunction,
    empty: CudaFunction,
    spin: CudaFunction,
    /// The functions of [`DOT_KERNELS`], in order (empty when [`DOT_SOURCE`] failed to compile).
    dot: Vec<CudaFunction>,
    /// The activation pre-passes of [`DOT_SOURCE`]: `moe_dot_prep1` (one int8
    /// limb) and `moe_dot_prep2` (two), indexed by limbs - 1 (empty when it failed to compile).
    dot_prep: Vec<CudaFunction>,
    _dot_module: Option<Arc<CudaModule>>,
    dot_error: Option<String>,
    per_slot: PerSlotKernel,
    multiprocessors: u32,
    /// Largest dynamic shared memory of one block after opting in, bytes (device attribute).
    max_shared_bytes: usize,
    /// Compute capability (major, minor): programmatic dependent launches need 9.0.
    compute_capability: (i32, i32),
}

impl Kernels {
    /// Compiles [`SOURCE`] and [`DOT_SOURCE`] with NVRTC for the context's device (PTX for
    /// `compute_XY`, JIT-ed by the driver). Fails when [`SOURCE`] does not compile or load; when
    /// only [`DOT_SOURCE`] fails, the per-slot variant falls back to [`PerSlotKernel::F32`] and
    /// [`Kernels::dot_error`] says why.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, KernelError> {
        let (major, minor) = ctx.compute_capability()?;
        let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
        let module = ctx.load_module(compile(SOURCE, arch)?)?;
        use cudarc::driver::sys::CUdevice_attribute as A;
        let multiprocessors = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let max_shared_bytes =
            ctx.attribute(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize;
        let moe_t1 = module.load_function("moe_matvec_t1")?;
        let moe_t8 = module.load_function("moe_matvec_t8")?;
        let moe_tc = module.load_function("moe_matvec_tc")?;
        // Opt in once to the device's whole per-block shared memory, so launches prepared with
        // different slot counts never race on the attribute. (The tensor-core kernel has only
        // static shared memory: opting it in would exceed the limit by that amount.)
        // The shaped read takes the shared memory of the launch it copies.
        let stream_read_grid = module.load_function("stream_read_grid")?;
        for f in [&moe_t1, &moe_t8, &stream_read_grid] {
            f.set_attribute(
                FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                max_shared_bytes as i32,
            )?;
        }
        type DotModule = (Arc<CudaModule>, Vec<CudaFunction>, Vec<CudaFunction>);
        let load_dot = || -> Result<DotModule, KernelError> {
            let m = ctx.load_module(compile(DOT_SOURCE, arch)?)?;
            let prep = vec![
                m.load_function("moe_dot_prep1")?,
                m.load_function("moe_dot_prep2")?,
            ];
            let mut fs = Vec::new();
            for d in DOT_KERNELS {
                let f = m.load_function(d.name)?;
                f.set_attribute(
                    FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    max_shared_bytes.saturating_sub(DOT_STATIC_SHARED_BYTES) as i32,
                )?;
                fs.push(f);
            }
            Ok((m, fs, prep))
        };
        let (dot_module, dot, dot_prep, dot_error) = match load_dot() {
            Ok((m, fs, prep)) => (Some(m), fs, prep, None),
            Err(e) => (None, Vec::new(), Vec::new(), Some(e.to_string())),
        };
        let per_slot = if dot.is_empty() {
            PerSlotKernel::F32
        } else {
            PerSlotKernel::Dot(DEFAULT_DOT_KERNEL)
        };
        Ok(Self {
            dot,
            dot_prep,
            _dot_module: dot_module,
            dot_error,
            per_slot,
            ctx: ctx.clone(),
            moe_t1,
            moe_t8,
            moe_tc,
            prep_tc: module.load_function("moe_prep_tc")?,
            page_touch: module.load_function("page_touch")?,
            stream_read: module.load_function("stream_read")?,
            stream_read_grid,
            empty: module.load_function("empty_kernel")?,
            spin: module.load_function("spin_wait")?,
            _module: module,
            multiprocessors,
            max_shared_bytes,
            compute_capability: (major, minor),
        })
    }

    /// Why the dot kernels of [`DOT_SOURCE`] are unavailable (NVRTC log or driver error), if they are.
    pub fn dot_error(&self) -> Option<&str> {
        self.dot_error.as_deref()
    }

    /// Every per-slot kernel that loaded: [`PerSlotKernel::F32`], then the dot kernels.
    pub fn per_slot_kernels(&self) -> Vec<PerSlotKernel> {
        std::iter::once(PerSlotKernel::F32)
            .chain((0..self.dot.len()).map(PerSlotKernel::Dot))
            .collect()
    }

    /// The kernel that launches prepared from now on use for the per-slot variant.
    pub fn per_slot_kernel(&self) -> PerSlotKernel {
        self.per_slot
    }

    /// Chooses the per-slot kernel of launches prepared from now on. Errors when it did not load.
    /// A [`crate::launch::DotKernel::load_only`] twin is accepted (calibration times it), but its
    /// outputs are not the expert FFN.
    pub fn set_per_slot_kernel(&mut self, kernel: PerSlotKernel) -> Result<(), KernelError> {
        if let PerSlotKernel::Dot(i) = kernel {
            if i >= self.dot.len() {
                return Err(KernelError::Invalid(format!(
                    "per-slot dot kernel {i} is not loaded ({})",
                    self.dot_error.as_deref().unwrap_or("index out of range")
                )));
            }
        }
        self.per_slot = kernel;
        Ok(())
    }

    /// The context the kernels were loaded on.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Uploads everything a layer launch needs except the expert weights: the work list of
    /// `variant` for slots `i` with expert weights at device address `expert_ptrs[i]`, token of each
    /// slot `slot_token[i]`, and the activations `x` (`tokens x hidden`, token-major).
    pub fn prepare_moe(
        &self,
        stream: &Arc<CudaStream>,
        geom: ExpertGeometry,
        variant: Variant,
        expert_ptrs: &[u64],
        slot_token: &[u32],
        x: &[f32],
    ) -> Result<MoeLaunch, KernelError> {
        let tokens = check_moe_inputs(geom, expert_ptrs, slot_token, x)?;
        let (path, fused) = self.kernel_path(geom, variant, expert_ptrs, slot_token.len());
        let (kernel_slots, rows_per_group) = match path {
            KernelPath::PerSlotF32 => (1, PER_SLOT_ROWS),
            KernelPath::PerSlotDot { kernel } => (1, DOT_KERNELS[kernel].rows),
            KernelPath::UnionF32 => (MAX_SLOTS_PER_ITEM, UNION_ROWS),
            KernelPath::TensorCore => (MAX_SLOTS_PER_ITEM, 0),
        };
        // Shared memory: the staged activations of an item's slots (f32, or f16 hi + lo), plus
        // the cross-warp partial sums (f32 kernels: one per warp, row and slot; tensor-core
        // kernel: 4 per lane of every warp, then 8 per-slot maxima).
        // (The tensor-core kernel reads prepared activations from global memory and has only
        // static shared memory.)
        // (The dot kernels keep their cross-warp sums in static shared memory.)
        let reduce_bytes = match path {
            KernelPath::TensorCore | KernelPath::PerSlotDot { .. } => 0,
            _ => (BLOCK_THREADS / 32) as usize * rows_per_group * kernel_slots * 4,
        };
        let fit = self.activation_rows_fit(geom, path, reduce_bytes)?;
        let list = WorkList::build_capped(variant, expert_ptrs, fit);
        let maxt = list.max_slots();
        let items = list.len();
        if items > 65535 {
            return Err(KernelError::Invalid(format!(
                "{items} work items exceed the grid's 65535 rows: split the launch"
            )));
        }
        let phases = self.phase_launches(geom, path, rows_per_group, reduce_bytes, maxt, items);
        let slots = slot_token.len();
        let quantized = prepass_scratch(stream, geom, path, tokens, slots)?;
        let fused = fused_launch(stream, geom, path, fused, &list, slot_token)?;
        Ok(MoeLaunch {
            distinct: distinct_experts(expert_ptrs),
            fused,
            quantized,
            geom,
            variant,
            items: items as u32,
            maxt,
            phases,
            path,
            work: stream.clone_htod(&list.items)?,
            slot_list: stream.clone_htod(&list.slot_list)?,
            slot_token: stream.clone_htod(slot_token)?,
            prepared: if path == KernelPath::TensorCore {
                Some([
                    PreparedRows::alloc(stream, tokens, geom.hidden)?,
                    PreparedRows::alloc(stream, slots, geom.ffn)?,
                ])
            } else {
                None
            },
            x: stream.clone_htod(x)?,
            gu: stream.alloc_zeros::<f32>(slots * 2 * geom.ffn)?,
            y: stream.alloc_zeros::<f32>(slots * geom.hidden)?,
        })
    }

    /// The kernel a launch of `slots` slots of `variant` runs, and the persistent kernel's plan
    /// when it runs that one.
    fn kernel_path(
        &self,
        geom: ExpertGeometry,
        variant: Variant,
        expert_ptrs: &[u64],
        slots: usize,
    ) -> (KernelPath, Option<FusedPlan>) {
        // Measured on the H200 (BENCHMARKS.md at commit 225ec1c): with one slot per item the f32
        // kernel is faster (7 of the mma's 8 slot columns would be empty: 97 vs 152 µs for 60
        // slots of 2560x640); with several slots per item the tensor-core kernel serves them all
        // from one dequantization (57 vs 146 µs for 60 slots naming 6 experts).
        // The dot kernels serve the per-slot variant when they compiled: 63.9 vs 96.5 µs for
        // 60 slots of 2560x640 on the H200 (docs/history/kernels.md, "Per-slot int8 `dp4a`
        // kernel").
        // The persistent kernel's plan, when the launch runs it.
        let mut fused: Option<FusedPlan> = None;
        let path = match (variant, tensor_core_group(geom.group)) {
            (Variant::PerSlot, _) => match self.per_slot {
                PerSlotKernel::F32 => KernelPath::PerSlotF32,
                PerSlotKernel::Dot(kernel) => {
                    // The kernel chooses its code per launch (its one-wave partner or itself).
                    let kernel = DOT_KERNELS[kernel].for_launch(
                        kernel,
                        2 * geom.ffn,
                        geom.hidden / 32,
                        slots,
                        self.multiprocessors,
                    );
                    // The persistent kernel's tile order for the launch's repeats.
                    let kernel = DOT_KERNELS[kernel].for_repeats(
                        kernel,
                        slots,
                        distinct_experts(expert_ptrs),
                    );
                    // The persistent kernel where it can run, else its two-launch fallback.
                    let kernel = if DOT_KERNELS[kernel].staging == DotStaging::PersistentBulk {
                        fused = self.fused_plan_for(geom, kernel, expert_ptrs);
                        if fused.is_some() {
                            kernel
                        } else {
                            FUSED_FALLBACK_KERNEL
                        }
                    } else {
                        kernel
                    };
                    let staging = DOT_KERNELS[kernel].staging;
                    // The unsigned-nibble kernels find a chunk's scale group by a shift.
                    let shift_runs = geom.group.is_power_of_two();
                    let kernel = if staging.unsigned_nibbles() && !shift_runs {
                        DOT_FALLBACK_KERNEL
                    } else {
                        kernel
                    };
                    KernelPath::PerSlotDot { kernel }
                }
            },
            (Variant::Union, true) => KernelPath::TensorCore,
            (Variant::Union, false) => KernelPath::UnionF32,
        };
        (path, fused)
    }

    /// How many slots' activation rows fit in a block's shared memory beside `reduce_bytes`
    /// of partial sums (an error when not one does).
    fn activation_rows_fit(
        &self,
        geom: ExpertGeometry,
        path: KernelPath,
        reduce_bytes: usize,
    ) -> Result<usize, KernelError> {
        let is_dot = matches!(path, KernelPath::PerSlotDot { .. });
        let shared_budget = if is_dot {
            self.max_shared_bytes
                .saturating_sub(DOT_STATIC_SHARED_BYTES)
        } else {
            self.max_shared_bytes
        };
        let row_bytes = activation_row_bytes(path, geom.hidden.max(geom.ffn));
        let fit = match path {
            KernelPath::TensorCore => MAX_SLOTS_PER_ITEM,
            _ => shared_budget.saturating_sub(reduce_bytes) / row_bytes,
        };
        if fit == 0 {
            return Err(KernelError::Invalid(format!(
                "one activation row of {} values does not fit in the {} B of shared memory of a block on this GPU",
                geom.hidden.max(geom.ffn),
                self.max_shared_bytes
            )));
        }
        Ok(fit)
    }

    /// The grids of the gate+up and down phases of a launch of `items` work items of at most
    /// `maxt` slots each.
    fn phase_launches(
        &self,
        geom: ExpertGeometry,
        path: KernelPath,
        rows_per_group: usize,
        reduce_bytes: usize,
        maxt: usize,
        items: usize,
    ) -> [PhaseLaunch; 2] {
        let mut phases = [PhaseLaunch::default(); 2];
        for (phase, (rows, k)) in phases
            .iter_mut()
            .zip([(2 * geom.ffn, geom.hidden), (geom.hidden, geom.ffn)])
        {
            let activations = maxt * activation_row_bytes(path, k);
            *phase = if path == KernelPath::TensorCore {
                let ks = warps_per_tile(rows, k / TC_K_BLOCK, items, self.multiprocessors);
                PhaseLaunch {
                    split: ks,
                    blocks: rows.div_ceil(tc_rows_per_block(ks)) as u32,
                    shared_bytes: 0,
                }
            } else {
                let lanes = match path {
                    KernelPath::PerSlotDot { kernel } => {
                        DOT_KERNELS[kernel].lanes(rows, k / 32, items, self.multiprocessors)
                    }
                    _ => lanes_per_row(rows, k / 32, items, rows_per_group, self.multiprocessors),
                };
                PhaseLaunch {
                    split: lanes,
                    blocks: rows.div_ceil(rows_per_block(lanes, rows_per_group)) as u32,
                    shared_bytes: (activations + if lanes > 32 { reduce_bytes } else { 0 }) as u32,
                }
            };
        }
        phases
    }

    /// Enqueues the launches of a layer's expert FFN on `stream`: gate+up over every item, then
    /// down (each after its activation pre-pass for [`crate::launch::DotStaging::PrequantPdl`] kernels; the
    /// launches after the first programmatic on sm_90+ for [`crate::launch::DotStaging::programmatic`] ones;
    /// one persistent launch after the gate+up pre-pass for [`DotStaging::PersistentBulk`]).
    /// Results land in `launch.y` (`slots x hidden`).
    pub fn launch_moe(
        &self,
        stream: &Arc<CudaStream>,
        launch: &mut MoeLaunch,
    ) -> Result<(), KernelError> {
        self.launch_phases(stream, launch, None)
    }

    /// Enqueues only phase `phase` (0: gate+up, 1: down, which reads the gate+up rows the last
    /// gate+up phase of `launch` left) of a two-launch path: how a calibration times the two
    /// launches apart (with its pre-pass, if the kernel has one). Errors for a phase other than
    /// 0 or 1.
    pub fn launch_moe_phase(
        &self,
        stream: &Arc<CudaStream>,
        launch: &mut MoeLaunch,
        phase: usize,
    ) -> Result<(), KernelError> {
        if phase > 1 {
            return Err(KernelError::Invalid(format!(
                "phase {phase} of a launch of {} does not exist (0 gate+up, 1 down)",
                launch.kernel_name()
            )));
        }
        if launch.fused.is_some() {
            return Err(KernelError::Invalid(format!(
                "{} runs the layer in one launch: its phases cannot run alone",
                launch.kernel_name()
            )));
        }
        self.launch_phases(stream, launch, Some(phase))
    }

    fn launch_phases(
        &self,
        stream: &Arc<CudaStream>,
        launch: &mut MoeLaunch,
        only: Option<usize>,
    ) -> Result<(), KernelError> {
        let g = launch.geom;
        let func = match launch.path {
            KernelPath::PerSlotF32 => &self.moe_t1,
            KernelPath::PerSlotDot { kernel } => &self.dot[kernel],
            KernelPath::UnionF32 => &self.moe_t8,
            KernelPath::TensorCore => &self.moe_tc,
        };
        debug_assert!(launch.maxt <= MAX_SLOTS_PER_ITEM);
        if let Some(fused) = launch.fused.as_mut() {
            return self.launch_fused(
                stream,
                g,
                launch.items,
                fused,
                func,
                &launch.work,
                &launch.x,
                launch.quantized.as_mut(),
                &mut launch.y,
            );
        }
        let phases = [
            // (rows, k, weight offset, scale offset, mode)
            (2 * g.ffn, g.hidden, 0usize, g.gate_up_scale_offset(), 0i32),
            (
                g.hidden,
                g.ffn,
                g.down_weight_offset(),
                g.down_scale_offset(),
                1i32,
            ),
        ];
        for (pi, (spec, phase)) in phases.into_iter().zip(launch.phases).enumerate() {
            if only.is_some_and(|o| o != pi) {
                continue;
            }
            if launch.prepared.is_some() {
                self.launch_tensor_core_phase(stream, launch, pi, spec, phase)?;
                continue;
            }
            self.launch_matvec_phase(stream, launch, func, pi, spec, phase)?;
        }
        Ok(())
    }

    /// Phase `pi` of a tensor-core launch: the activation preparation, then the matvec.
    fn launch_tensor_core_phase(
        &self,
        stream: &Arc<CudaStream>,
        launch: &mut MoeLaunch,
        pi: usize,
        (rows, k, woff, soff, mode): PhaseSpec,
        phase: PhaseLaunch,
    ) -> Result<(), KernelError> {
        let g = launch.geom;
        let Some(prepared) = launch.prepared.as_mut() else {
            return Ok(());
        };
        let input = if mode == 0 { &launch.x } else { &launch.gu };
        let p = &mut prepared[pi];
        let cfg = LaunchConfig {
            grid_dim: (p.rows as u32, 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let k32 = k as u32;
        let mut b = stream.launch_builder(&self.prep_tc);
        b.arg(input)
            .arg(&k32)
            .arg(&mode)
            .arg(&mut p.hi)
            .arg(&mut p.lo)
            .arg(&mut p.unscale);
        // SAFETY: matches moe_prep_tc; `input` holds p.rows rows of k (mode 0) or 2k
        // (mode 1) values, and the outputs were sized for p.rows rows of k values.
        unsafe { b.launch(cfg) }?;
        let cfg = LaunchConfig {
            grid_dim: (phase.blocks, launch.items, 1),
            block_dim: (TC_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (rows, k, group) = (rows as u32, k as u32, g.group as u32);
        let (woff, soff) = (woff as u64, soff as u64);
        let out = if mode == 0 {
            &mut launch.gu
        } else {
            &mut launch.y
        };
        let p = &prepared[pi];
        let mut b = stream.launch_builder(&self.moe_tc);
        b.arg(&launch.work)
            .arg(&launch.slot_list)
            .arg(&launch.slot_token)
            .arg(&p.hi)
            .arg(&p.lo)
            .arg(&p.unscale)
            .arg(out)
            .arg(&rows)
            .arg(&k)
            .arg(&group)
            .arg(&woff)
            .arg(&soff)
            .arg(&mode)
            .arg(&phase.split);
        // SAFETY: matches moe_matvec_tc; the work list's pointers are experts of
        // `g.expert_bytes()` bytes and the prepared rows cover every token / slot.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Phase `pi` of an f32 or dot-kernel launch with `func`: the activation pre-pass (dot
    /// kernels that have one), then the matvec, programmatic after the layer's first launch
    /// on sm_90+ for the kernels that allow it.
    fn launch_matvec_phase(
        &self,
        stream: &Arc<CudaStream>,
        launch: &mut MoeLaunch,
        func: &CudaFunction,
        pi: usize,
        (rows, k, woff, soff, mode): PhaseSpec,
        phase: PhaseLaunch,
    ) -> Result<(), KernelError> {
        let g = launch.geom;
        let cfg = LaunchConfig {
            grid_dim: (phase.blocks, launch.items, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: phase.shared_bytes,
        };
        let (rows, k, group) = (rows as u32, k as u32, g.group as u32);
        let (woff, soff) = (woff as u64, soff as u64);
        let programmatic = self.programmatic(launch.path);
        self.launch_prepass(stream, launch, pi, k, mode, programmatic)?;
        if programmatic && (pi == 1 || launch.quantized.is_some()) {
            let (input, output) = match (launch.quantized.as_ref(), mode) {
                (Some((_, scratch)), 0) => (scratch[0].device_ptr(stream).0, &launch.gu),
                (Some((_, scratch)), _) => (scratch[1].device_ptr(stream).0, &launch.y),
                (None, 0) => (launch.x.device_ptr(stream).0, &launch.gu),
                (None, _) => (launch.gu.device_ptr(stream).0, &launch.y),
            };
            let args = [
                launch.work.device_ptr(stream).0,
                launch.slot_list.device_ptr(stream).0,
                launch.slot_token.device_ptr(stream).0,
                input,
                output.device_ptr(stream).0,
                rows as u64,
                k as u64,
                group as u64,
                woff,
                soff,
                mode as u32 as u64,
                phase.split as u64,
            ];
            // SAFETY: the argument list of DOT6_ENTRY in moe_dot.cu, the buffers as for the
            // plain launch below.
            unsafe {
                launch_programmatic(
                    stream,
                    func,
                    (phase.blocks, launch.items),
                    BLOCK_THREADS,
                    phase.shared_bytes,
                    &args,
                )?;
            }
            return Ok(());
        }
        let mut b = stream.launch_builder(func);
        b.arg(&launch.work)
            .arg(&launch.slot_list)
            .arg(&launch.slot_token);
        match (launch.quantized.as_ref(), mode) {
            (Some((_, scratch)), 0) => b.arg(&scratch[0]).arg(&mut launch.gu),
            (Some((_, scratch)), _) => b.arg(&scratch[1]).arg(&mut launch.y),
            (None, 0) => b.arg(&launch.x).arg(&mut launch.gu),
            (None, _) => b.arg(&launch.gu).arg(&mut launch.y),
        };
        b.arg(&rows)
            .arg(&k)
            .arg(&group)
            .arg(&woff)
            .arg(&soff)
            .arg(&mode)
            .arg(&phase.split);
        // SAFETY: argument list matches moe_matvec_t*; every pointer in the work list was
        // supplied by the caller as an expert of `g.expert_bytes()` bytes; buffers are sized above.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// True when the layer launches of `path` after the layer's first are programmatic
    /// dependent launches: dot kernels whose staging allows it, on sm_90+.
    fn programmatic(&self, path: KernelPath) -> bool {
        match path {
            KernelPath::PerSlotDot { kernel } => {
                DOT_KERNELS[kernel].staging.programmatic() && self.compute_capability.0 >= 9
            }
            _ => false,
        }
    }

    /// The activation pre-pass of phase `pi` (one block per token for gate+up, per slot for
    /// down) when the launch's kernel has one; programmatic for the down phase when
    /// `programmatic`.
    fn launch_prepass(
        &self,
        stream: &Arc<CudaStream>,
        launch: &mut MoeLaunch,
        pi: usize,
        k: u32,
        mode: i32,
        programmatic: bool,
    ) -> Result<(), KernelError> {
        let g = launch.geom;
        if let Some((limbs, scratch)) = launch.quantized.as_mut() {
            // The pre-pass: one block per token (gate+up) or slot (down) row.
            let (input, n) = if mode == 0 {
                (&launch.x, launch.x.len() / g.hidden)
            } else {
                (&launch.gu, launch.gu.len() / (2 * g.ffn))
            };
            let func = &self.dot_prep[*limbs - 1];
            if programmatic && pi == 1 {
                let args = [
                    input.device_ptr(stream).0,
                    k as u64,
                    mode as u32 as u64,
                    scratch[pi].device_ptr(stream).0,
                ];
                // SAFETY: as the launch below, through cuLaunchKernelEx.
                unsafe {
                    launch_programmatic(stream, func, (n as u32, 1), BLOCK_THREADS, 0, &args)?;
                }
            } else {
                let pcfg = LaunchConfig {
                    grid_dim: (n as u32, 1, 1),
                    block_dim: (BLOCK_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = stream.launch_builder(func);
                b.arg(input).arg(&k).arg(&mode).arg(&mut scratch[pi]);
                // SAFETY: matches moe_dot_prep1/2; `input` holds n rows of k (mode 0) or
                // 2k (mode 1) values and scratch[pi] n rows of dot_activation_bytes(k) bytes.
                unsafe { b.launch(pcfg) }?;
            }
        }
        Ok(())
    }

    /// The [`FusedPlan`] of `DOT_KERNELS[kernel]` (a [`DotStaging::PersistentBulk`] kernel) for
    /// a launch of `geom` experts at `expert_ptrs`; `None` where it cannot run: compute
    /// capability below 9.0 (bulk copies, mbarrier waits), a geometry [`fused_plan`] refuses, or
    /// an expert pointer that is not 16-byte aligned (bulk copies need it).
    fn fused_plan_for(
        &self,
        geom: ExpertGeometry,
        kernel: usize,
        expert_ptrs: &[u64],
    ) -> Option<FusedPlan> {
        if self.compute_capability.0 < 9 || expert_ptrs.iter().any(|p| p % 16 != 0) {
            return None;
        }
        let d = DOT_KERNELS[kernel];
        fused_plan(
            geom.hidden,
            geom.ffn,
            geom.group,
            d.rows,
            d.ring,
            self.multiprocessors,
            self.max_shared_bytes
                .saturating_sub(DOT_STATIC_SHARED_BYTES),
        )
    }

    /// Enqueues a [`DotStaging::PersistentBulk`] layer: the gate+up activation pre-pass, then
    /// the persistent kernel `func` with the next epoch, both programmatic dependent launches
    /// (the persistent kernel lets dependents launch at its start, so layers enqueued back to
    /// back overlap one's tail with the next one's first weight copies).
    #[allow(clippy::too_many_arguments)]
    fn launch_fused(
        &self,
        stream: &Arc<CudaStream>,
        g: ExpertGeometry,
        items: u32,
        fused: &mut FusedLaunch,
        func: &CudaFunction,
        work: &CudaSlice<u32>,
        x: &CudaSlice<f32>,
        quantized: Option<&mut (usize, [CudaSlice<u32>; 2])>,
        y: &mut CudaSlice<f32>,
    ) -> Result<(), KernelError> {
        let Some((limbs, scratch)) = quantized else {
            return Err(KernelError::Invalid(
                "a persistent launch needs its pre-pass scratch rows".into(),
            ));
        };
        let tokens = x.len() / g.hidden;
        let prep_args = [
            x.device_ptr(stream).0,
            g.hidden as u64,
            0, // mode 0: token rows
            scratch[0].device_ptr(stream).0,
        ];
        // SAFETY: matches moe_dot_prep1/2 (input, k, mode, out); `x` holds `tokens` rows of
        // hidden values and scratch[0] `tokens` rows of dot_activation_bytes(hidden) bytes.
        // Programmatic: the pre-pass waits for the grid before it (griddepcontrol.wait), so
        // after a previous layer's persistent grid it launches while that grid drains.
        unsafe {
            launch_programmatic(
                stream,
                &self.dot_prep[*limbs - 1],
                (tokens as u32, 1),
                BLOCK_THREADS,
                0,
                &prep_args,
            )?;
        }
        fused.epoch = fused.epoch.wrapping_add(1).max(1);
        let p = fused.plan;
        let args = [
            work.device_ptr(stream).0,
            fused.item_st.device_ptr(stream).0,
            scratch[0].device_ptr(stream).0,
            fused.gu_tagged.device_ptr(stream).0,
            scratch[1].device_ptr(stream).0,
            y.device_ptr(stream).0,
            fused.flags.device_ptr(stream).0,
            items as u64,
            g.hidden as u64,
            g.ffn as u64,
            g.group as u64,
            p.p_gu as u64,
            p.p_d as u64,
            g.down_weight_offset() as u64,
            g.gate_up_scale_offset() as u64,
            g.down_scale_offset() as u64,
            p.stage_w as u64,
            p.stage_s as u64,
            p.stage_a as u64,
            fused.epoch as u64,
        ];
        // SAFETY: the argument list of FUSED_ENTRY in moe_dot.cu. The work list's pointers are
        // 16-byte aligned experts of `g.expert_bytes()` bytes (checked by fused_plan_for);
        // item_st, gu_tagged, flags, scratch[1] and y were sized for the launch's items and
        // slots; the plan's stages fit the block's opted-in shared memory; its grid is one
        // block per multiprocessor, so every block is resident at once.
        unsafe {
            launch_programmatic(
                stream,
                func,
                (p.blocks, 1),
                FUSED_THREADS,
                p.shared_bytes,
                &args,
            )?;
        }
        Ok(())
    }

    /// Reads one byte of every `page` bytes of the `bytes` at device/managed address `ptr`.
    pub fn launch_page_touch(
        &self,
        stream: &Arc<CudaStream>,
        ptr: u64,
        bytes: u64,
        page: u64,
        sink: &mut CudaSlice<u32>,
    ) -> Result<(), KernelError> {
        if page == 0 {
            return Err(KernelError::Invalid("page size 0".into()));
        }
        let npages = bytes / page;
        let blocks = (npages.div_ceil(256) as u32).clamp(1, self.multiprocessors * 8);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&self.page_touch);
        b.arg(&ptr).arg(&npages).arg(&page).arg(sink);
        // SAFETY: the caller owns `bytes` bytes at `ptr`, readable from the device.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Streams through `buf` once with 16-byte loads (4 blocks of 512 threads per multiprocessor).
    pub fn launch_stream_read(
        &self,
        stream: &Arc<CudaStream>,
        buf: &CudaSlice<u8>,
        sink: &mut CudaSlice<u32>,
    ) -> Result<(), KernelError> {
        let n = (buf.len() / 16) as u64;
        let cfg = LaunchConfig {
            grid_dim: (self.multiprocessors * 4, 1, 1),
            block_dim: (512, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ptr, _sync) = buf.device_ptr(stream);
        let mut b = stream.launch_builder(&self.stream_read);
        b.arg(&ptr).arg(&n).arg(sink);
        // SAFETY: reads the first n*16 bytes of buf.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// [`Kernels::launch_stream_read`] over the `bytes` (a multiple of 16) at device address
    /// `ptr` (16-byte aligned): the streaming read of a window of a buffer, e.g. one launch's
    /// worth of expert bytes. Errors for a misaligned window.
    pub fn launch_stream_read_range(
        &self,
        stream: &Arc<CudaStream>,
        ptr: u64,
        bytes: u64,
        sink: &mut CudaSlice<u32>,
    ) -> Result<(), KernelError> {
        if !ptr.is_multiple_of(16) || !bytes.is_multiple_of(16) {
            return Err(KernelError::Invalid(format!(
                "stream-read window of {bytes} B at {ptr:#x}: address and size must be multiples of 16"
            )));
        }
        let n = bytes / 16;
        let cfg = LaunchConfig {
            grid_dim: (self.multiprocessors * 4, 1, 1),
            block_dim: (512, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&self.stream_read);
        b.arg(&ptr).arg(&n).arg(sink);
        // SAFETY: the caller owns the `bytes` bytes at `ptr` on this context's device.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// The weight launches `launch` enqueues, in launch order, as [`LaunchShape`]s (see
    /// [`weight_launch_shapes`]): the persistent launch of a [`DotStaging::PersistentBulk`]
    /// layer, else its gate+up and its down launch. The activation pre-passes, which read no
    /// expert bytes, are left out.
    pub fn weight_launch_shapes(&self, launch: &MoeLaunch) -> Vec<LaunchShape> {
        let layer = match &launch.fused {
            Some(f) => LayerLaunches::Persistent {
                blocks: f.plan.blocks,
                block: FUSED_THREADS,
                shared_bytes: f.plan.shared_bytes,
            },
            None => LayerLaunches::TwoPhase {
                blocks: launch.phases.map(|p| p.blocks),
                shared_bytes: launch.phases.map(|p| p.shared_bytes),
                items: launch.items,
                block: match launch.path {
                    KernelPath::TensorCore => TC_WARPS * 32,
                    _ => BLOCK_THREADS,
                },
                programmatic_down: self.programmatic(launch.path),
            },
        };
        weight_launch_shapes(launch.geom, launch.distinct, layer)
    }

    /// A plain streaming read of the `shape.bytes` at device address `ptr` (16-byte aligned)
    /// launched in `shape`: the same grid, block and dynamic shared memory, a programmatic
    /// dependent launch where `shape` is one (on sm_90+), letting the next one start at once
    /// where `shape` does ([`LaunchShape::allows_dependents`]). What a launch of that shape takes
    /// to read that many contiguous bytes and do nothing else: the ceiling an expert launch of
    /// [`Kernels::weight_launch_shapes`] is held against. Errors for a misaligned window, an
    /// empty grid, a grid taller than 65535, a block of 0 or more than 1024 threads, or more
    /// shared memory than a block of this GPU can have.
    pub fn launch_stream_read_shaped(
        &self,
        stream: &Arc<CudaStream>,
        ptr: u64,
        shape: &LaunchShape,
        sink: &mut CudaSlice<u32>,
    ) -> Result<(), KernelError> {
        let (gx, gy) = shape.grid;
        if !ptr.is_multiple_of(16) || !shape.bytes.is_multiple_of(16) {
            return Err(KernelError::Invalid(format!(
                "shaped read of {} B at {ptr:#x}: address and size must be multiples of 16",
                shape.bytes
            )));
        }
        if gx == 0 || gy == 0 || gy > 65535 || !(1..=1024).contains(&shape.block) {
            return Err(KernelError::Invalid(format!(
                "shaped read on a grid of {gx}x{gy} blocks of {} threads: the grid needs 1..=65535 \
                 rows and at least one column, a block 1..=1024 threads",
                shape.block
            )));
        }
        if shape.shared_bytes as usize > self.max_shared_bytes {
            return Err(KernelError::Invalid(format!(
                "shaped read with {} B of shared memory per block: this GPU allows {} B",
                shape.shared_bytes, self.max_shared_bytes
            )));
        }
        let n = shape.bytes / 16;
        let allow = u32::from(shape.allows_dependents);
        if shape.programmatic && self.compute_capability.0 >= 9 {
            let args = [ptr, n, sink.device_ptr(stream).0, allow as u64];
            // SAFETY: the argument list of stream_read_grid (buf, n, sink, allow_dependents:
            // a 32-bit parameter, the low bytes of its u64); the caller owns the
            // n 16-byte words at `ptr` on this context's device, `sink` holds one u32, and the
            // shared memory fits the opted-in limit (checked above).
            unsafe {
                launch_programmatic(
                    stream,
                    &self.stream_read_grid,
                    shape.grid,
                    shape.block,
                    shape.shared_bytes,
                    &args,
                )?;
            }
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (gx, gy, 1),
            block_dim: (shape.block, 1, 1),
            shared_mem_bytes: shape.shared_bytes,
        };
        let mut b = stream.launch_builder(&self.stream_read_grid);
        b.arg(&ptr).arg(&n).arg(sink).arg(&allow);
        // SAFETY: as above, through an ordinary launch.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Enqueues a one-thread kernel that busy-waits `ns` nanoseconds of the GPU's global timer.
    /// Enqueue it before a CUDA event that starts a measurement: the work enqueued after the
    /// event then starts on a busy queue, so the events time the GPU, not the host's launch latency.
    pub fn launch_spin(&self, stream: &Arc<CudaStream>, ns: u64) -> Result<(), KernelError> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&self.spin);
        b.arg(&ns);
        // SAFETY: the kernel takes one u64 and touches no memory.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Enqueues an empty kernel (1 block, 32 threads): the launch-overhead probe.
    pub fn launch_empty(&self, stream: &Arc<CudaStream>) -> Result<(), KernelError> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel takes no arguments.
        unsafe { stream.launch_builder(&self.empty).launch(cfg) }?;
        Ok(())
    }
}

/// Launches `func` on `stream` as a programmatic dependent launch (`cuLaunchKernelEx` with
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, compute capability 9.0+): it may
/// start before the previous grid of the stream ends and must wait for it
/// (`griddepcontrol.wait`) before reading its results. `grid` (x, y) of
/// `block`-thread blocks; each kernel parameter in `args` as a u64 whose low bytes hold it
/// (32-bit parameters read the first 4 bytes, little-endian).
///
/// # Safety
/// `args` must match the kernel's parameter list in count and sizes, and every pointer must
/// be valid for what the kernel reads and writes.
unsafe fn launch_programmatic(
    stream: &Arc<CudaStream>,
    func: &CudaFunction,
    grid: (u32, u32),
    block: u32,
    shared_bytes: u32,
    args: &[u64],
) -> Result<(), KernelError> {
    use cudarc::driver::sys;
    let mut values: Vec<u64> = args.to_vec();
    let mut params: Vec<*mut std::ffi::c_void> = values
        .iter_mut()
        .map(|v| v as *mut u64 as *mut std::ffi::c_void)
        .collect();
    // SAFETY: a plain-old-data C struct; zero is a valid pattern for the union.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let cfg = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: the caller guarantees the parameters; `values`, `params` and `attr` outlive the
    // call, which copies them.
    unsafe {
        sys::cuLaunchKernelEx(
            &cfg,
            func.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()?;
    Ok(())
}

/// Words after a [`DotStaging::PersistentBulk`] launch's per-item flags: the next tile ticket
/// and the count of blocks done with the launch (`fused_produce` in `cuda/moe_dot.cu`). Both
/// start zeroed and the launch's last block resets them.
const FUSED_COUNTER_WORDS: usize = 2;

/// The buffers of a [`DotStaging::PersistentBulk`] layer launch.
struct FusedLaunch {
    plan: FusedPlan,
    /// Each work item's (slot, token), 2 u32 per item.
    item_st: CudaSlice<u32>,
    /// `slots x 2 ffn` gate+up rows, each `epoch << 32 | f32 bits` of the launch that wrote it.
    gu_tagged: CudaSlice<u64>,
    /// One per work item: the epoch whose down activations are published; then the
    /// [`FUSED_COUNTER_WORDS`] of the kernel's tile counter.
    flags: CudaSlice<u32>,
    /// The last launch's epoch (0 before the first: the buffers start zeroed, so 0 is never
    /// used).
    epoch: u32,
}

/// Checks a launch's inputs: one expert pointer per slot (at least one), activations of whole
/// tokens, and every slot naming one of them; returns the token count.
fn check_moe_inputs(
    geom: ExpertGeometry,
    expert_ptrs: &[u64],
    slot_token: &[u32],
    x: &[f32],
) -> Result<usize, KernelError> {
    if expert_ptrs.len() != slot_token.len() || expert_ptrs.is_empty() {
        return Err(KernelError::Invalid(format!(
            "{} expert pointers for {} slots (need one per slot, at least one)",
            expert_ptrs.len(),
            slot_token.len()
        )));
    }
    if !x.len().is_multiple_of(geom.hidden) {
        return Err(KernelError::Invalid(format!(
            "activation length {} is not a multiple of hidden {}",
            x.len(),
            geom.hidden
        )));
    }
    let tokens = x.len() / geom.hidden;
    if let Some(&t) = slot_token.iter().find(|&&t| t as usize >= tokens) {
        return Err(KernelError::Invalid(format!(
            "slot names token {t} of {tokens}"
        )));
    }
    Ok(tokens)
}

/// Distinct addresses among `expert_ptrs`.
fn distinct_experts(expert_ptrs: &[u64]) -> usize {
    let mut p = expert_ptrs.to_vec();
    p.sort_unstable();
    p.dedup();
    p.len()
}

/// Shared-memory bytes of one staged activation row of `k` values on `path`.
fn activation_row_bytes(path: KernelPath, k: usize) -> usize {
    match path {
        KernelPath::PerSlotDot { kernel } => dot_activation_bytes(k, DOT_KERNELS[kernel].staging),
        _ => k * ACTIVATION_BYTES,
    }
}

/// A pre-pass launch's activation limbs and its two scratch buffers (gate+up, down).
type PrepassScratch = (usize, [CudaSlice<u32>; 2]);

/// Pre-pass kernels: scratch rows of quantized activations, one per token (gate+up) and one
/// per slot (down), with the pre-pass's activation limbs.
fn prepass_scratch(
    stream: &Arc<CudaStream>,
    geom: ExpertGeometry,
    path: KernelPath,
    tokens: usize,
    slots: usize,
) -> Result<Option<PrepassScratch>, KernelError> {
    let quantized = match path {
        KernelPath::PerSlotDot { kernel } => match DOT_KERNELS[kernel].staging.prepass_limbs() {
            Some(limbs) => {
                let staging = DOT_KERNELS[kernel].staging;
                let words = |rows: usize, k: usize| rows * dot_activation_bytes(k, staging) / 4;
                Some((
                    limbs,
                    [
                        stream.alloc_zeros::<u32>(words(tokens, geom.hidden))?,
                        stream.alloc_zeros::<u32>(words(slots, geom.ffn))?,
                    ],
                ))
            }
            None => None,
        },
        _ => None,
    };
    Ok(quantized)
}

/// The persistent kernel's own buffers, when the launch runs it with `fused`'s plan.
fn fused_launch(
    stream: &Arc<CudaStream>,
    geom: ExpertGeometry,
    path: KernelPath,
    fused: Option<FusedPlan>,
    list: &WorkList,
    slot_token: &[u32],
) -> Result<Option<FusedLaunch>, KernelError> {
    let (slots, items) = (slot_token.len(), list.len());
    let fused = match (path, fused) {
        (KernelPath::PerSlotDot { kernel }, Some(plan))
            if DOT_KERNELS[kernel].staging == DotStaging::PersistentBulk =>
        {
            // Each item's (slot, token): per-slot items serve one slot each.
            let item_st: Vec<u32> = list
                .items
                .chunks_exact(4)
                .flat_map(|it| {
                    let s = list.slot_list[it[2] as usize];
                    [s, slot_token[s as usize]]
                })
                .collect();
            Some(FusedLaunch {
                plan,
                item_st: stream.clone_htod(&item_st)?,
                gu_tagged: stream.alloc_zeros::<u64>(slots * 2 * geom.ffn)?,
                flags: stream.alloc_zeros::<u32>(items + FUSED_COUNTER_WORDS)?,
                epoch: 0,
            })
        }
        _ => None,
    };
    Ok(fused)
}

/// One phase of a layer launch: (rows, k, weight offset, scale offset, mode: 0 gate+up, 1
/// down).
type PhaseSpec = (usize, usize, usize, usize, i32);

/// Which kernel of `cuda/moe.cu` a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelPath {
    /// `moe_matvec_t1`: f32 dequantization, one slot per item (the per-slot variant).
    PerSlotF32,
    /// `DOT_KERNELS[kernel]` of [`DOT_SOURCE`]: 16-bit quantized activations and int8 `dp4a`,
    /// one slot per item (the per-slot variant, the default when it compiled).
    PerSlotDot { kernel: usize },
    /// `moe_matvec_t8`: f32 dequantization, up to 8 slots per item (union variant, groups not
    /// a multiple of 128).
    UnionF32,
    /// `moe_prep_tc` + `moe_matvec_tc`: f16 dequantization and `mma.sync`, up to 8 slots per
    /// item (union variant, groups a multiple of 128).
    TensorCore,
}

/// Grid of one phase (gate+up or down) of a layer launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseLaunch {
    /// Threads sharing one output row (`P`, f32 kernels) or warps sharing one 16-row tile
    /// (`ks`, tensor-core kernel); see [`crate::launch`].
    pub split: u32,
    /// Blocks along x (row tiles) per work item.
    pub blocks: u32,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
}

/// Activations prepared for the tensor-core kernel (`moe_prep_tc`): `rows` rows of `k` values
/// as f16 hi and lo parts (`k / 2` words each per row) and one power-of-two unscale per row.
struct PreparedRows {
    rows: usize,
    hi: CudaSlice<u32>,
    lo: CudaSlice<u32>,
    unscale: CudaSlice<f32>,
}

impl PreparedRows {
    fn alloc(stream: &Arc<CudaStream>, rows: usize, k: usize) -> Result<Self, KernelError> {
        Ok(Self {
            rows,
            hi: stream.alloc_zeros::<u32>(rows * k / 2)?,
            lo: stream.alloc_zeros::<u32>(rows * k / 2)?,
            unscale: stream.alloc_zeros::<f32>(rows)?,
        })
    }
}

/// Device buffers of one prepared layer launch (see [`Kernels::prepare_moe`]).
pub struct MoeLaunch {
    pub geom: ExpertGeometry,
    pub variant: Variant,
    /// Work items (blocks along y).
    pub items: u32,
    /// Grids of the gate+up and the down launch.
    pub phases: [PhaseLaunch; 2],
    /// The kernel both launches run.
    pub path: KernelPath,
    maxt: usize,
    /// Distinct expert pointers among the slots.
    distinct: usize,
    work: CudaSlice<u32>,
    slot_list: CudaSlice<u32>,
    slot_token: CudaSlice<u32>,
    /// Tensor-core path: the prepared token rows (gate+up) and slot rows (down).
    prepared: Option<[PreparedRows; 2]>,
    /// Pre-pass dot kernels ([`crate::launch::DotStaging::PrequantPdl`]): activation limbs, and the scratch rows
    /// of quantized activations of the gate+up (one per token) and down (one per slot) launch.
    quantized: Option<(usize, [CudaSlice<u32>; 2])>,
    /// [`DotStaging::PersistentBulk`] launches: their own buffers.
    fused: Option<FusedLaunch>,
    x: CudaSlice<f32>,
    gu: CudaSlice<f32>,
    /// Output, `slots x hidden`, slot-major.
    pub y: CudaSlice<f32>,
}

impl MoeLaunch {
    /// The CUDA function the launch runs (the tensor-core path also runs `moe_prep_tc`).
    pub fn kernel_name(&self) -> &'static str {
        match self.path {
            KernelPath::PerSlotF32 => "moe_matvec_t1",
            KernelPath::PerSlotDot { kernel } => DOT_KERNELS[kernel].name,
            KernelPath::UnionF32 => "moe_matvec_t8",
            KernelPath::TensorCore => "moe_matvec_tc",
        }
    }

    /// The persistent kernel's tile counter (next ticket, blocks done), read back after the
    /// stream's work: both 0 whenever no launch of this layer runs. `None` for a launch that
    /// does not run the persistent kernel. Errors when the copy fails.
    pub fn tile_counter(&self, stream: &Arc<CudaStream>) -> Result<Option<[u32; 2]>, KernelError> {
        let Some(f) = &self.fused else {
            return Ok(None);
        };
        let items = f.flags.len() - FUSED_COUNTER_WORDS;
        let words = stream.clone_dtoh(&f.flags.slice(items..))?;
        Ok(Some([words[0], words[1]]))
    }

    /// Distinct experts among the launch's slots (each one's bytes are read from memory at
    /// least once).
    pub fn distinct_experts(&self) -> usize {
        self.distinct
    }

    /// Expert weight bytes the launch reads from memory at least once per item
    /// (`items x expert_bytes`): the numerator of its bandwidth.
    pub fn weight_bytes_read(&self) -> u64 {
        self.items as u64 * self.geom.expert_bytes() as u64
    }
}
