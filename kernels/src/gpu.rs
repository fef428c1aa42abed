//! The CUDA side: library checks, NVRTC compilation of `cuda/moe.cu`, and launch wrappers.

use crate::geometry::ExpertGeometry;
use crate::worklist::{Variant, WorkList, MAX_SLOTS_PER_ITEM};
use cudarc::driver::sys::CUfunction_attribute_enum as FnAttr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};
use std::sync::Arc;

/// The kernels' CUDA C source (compiled at run time with NVRTC).
pub const SOURCE: &str = include_str!("cuda/moe.cu");
/// Threads per block of the expert kernels (`WARPS * 32` in the source).
const BLOCK_THREADS: u32 = 256;
/// Rows of the output one block computes per pass (`WARPS * ROWS_PER_WARP` in the source).
const ROWS_PER_BLOCK: usize = 32;
/// Passes each block makes over `ROWS_PER_BLOCK` rows: more rows per block amortise the
/// activation load into shared memory (chosen on the H200, see BENCHMARKS.md issue 7).
const PASSES_PER_BLOCK: usize = 4;
/// Dynamic shared memory a block may use without opting in (CUDA's default limit, 48 KiB).
const DEFAULT_SMEM_LIMIT: usize = 48 * 1024;

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
    page_touch: CudaFunction,
    stream_read: CudaFunction,
    empty: CudaFunction,
    multiprocessors: u32,
}

impl Kernels {
    /// Compiles [`SOURCE`] with NVRTC for the context's device (PTX for `compute_XY`, JIT-ed by the driver).
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, KernelError> {
        let (major, minor) = ctx.compute_capability()?;
        let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some(arch),
            options: vec!["--std=c++17".into()],
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts)
            .map_err(|e| KernelError::Compile(format!("{e:?}")))?;
        let module = ctx.load_module(ptx)?;
        let multiprocessors = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        Ok(Self {
            ctx: ctx.clone(),
            moe_t1: module.load_function("moe_matvec_t1")?,
            moe_t8: module.load_function("moe_matvec_t8")?,
            page_touch: module.load_function("page_touch")?,
            stream_read: module.load_function("stream_read")?,
            empty: module.load_function("empty_kernel")?,
            _module: module,
            multiprocessors,
        })
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
        let list = WorkList::build(variant, expert_ptrs);
        let maxt = list.max_slots();
        let func = if variant == Variant::PerSlot {
            &self.moe_t1
        } else {
            &self.moe_t8
        };
        let smem = maxt * geom.hidden.max(geom.ffn) * 4;
        if smem > DEFAULT_SMEM_LIMIT {
            func.set_attribute(
                FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )?;
        }
        let slots = slot_token.len();
        Ok(MoeLaunch {
            geom,
            variant,
            items: list.len() as u32,
            maxt,
            work: stream.clone_htod(&list.items)?,
            slot_list: stream.clone_htod(&list.slot_list)?,
            slot_token: stream.clone_htod(slot_token)?,
            x: stream.clone_htod(x)?,
            gu: stream.alloc_zeros::<f32>(slots * 2 * geom.ffn)?,
            y: stream.alloc_zeros::<f32>(slots * geom.hidden)?,
        })
    }

    /// Enqueues the two launches of a layer's expert FFN on `stream`: gate+up over every item,
    /// then down. Results land in `launch.y` (`slots x hidden`).
    pub fn launch_moe(
        &self,
        stream: &Arc<CudaStream>,
        launch: &mut MoeLaunch,
    ) -> Result<(), KernelError> {
        let g = launch.geom;
        let func = if launch.variant == Variant::PerSlot {
            &self.moe_t1
        } else {
            &self.moe_t8
        };
        debug_assert!(launch.maxt <= MAX_SLOTS_PER_ITEM);
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
        for (rows, k, woff, soff, mode) in phases {
            let cfg = LaunchConfig {
                grid_dim: (
                    rows.div_ceil(ROWS_PER_BLOCK * PASSES_PER_BLOCK) as u32,
                    launch.items,
                    1,
                ),
                block_dim: (BLOCK_THREADS, 1, 1),
                shared_mem_bytes: (launch.maxt * k * 4) as u32,
            };
            let (rows, k, group) = (rows as u32, k as u32, g.group as u32);
            let (woff, soff) = (woff as u64, soff as u64);
            let mut b = stream.launch_builder(func);
            b.arg(&launch.work)
                .arg(&launch.slot_list)
                .arg(&launch.slot_token);
            if mode == 0 {
                b.arg(&launch.x).arg(&mut launch.gu);
            } else {
                b.arg(&launch.gu).arg(&mut launch.y);
            }
            b.arg(&rows)
                .arg(&k)
                .arg(&group)
                .arg(&woff)
                .arg(&soff)
                .arg(&mode);
            // SAFETY: argument list matches moe_matvec_t*; every pointer in the work list was
            // supplied by the caller as an expert of `g.expert_bytes()` bytes; buffers are sized above.
            unsafe { b.launch(cfg) }?;
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

/// Device buffers of one prepared layer launch (see [`Kernels::prepare_moe`]).
pub struct MoeLaunch {
    pub geom: ExpertGeometry,
    pub variant: Variant,
    /// Work items (blocks along y).
    pub items: u32,
    maxt: usize,
    work: CudaSlice<u32>,
    slot_list: CudaSlice<u32>,
    slot_token: CudaSlice<u32>,
    x: CudaSlice<f32>,
    gu: CudaSlice<f32>,
    /// Output, `slots x hidden`, slot-major.
    pub y: CudaSlice<f32>,
}

impl MoeLaunch {
    /// Expert weight bytes the launch reads from memory at least once per item
    /// (`items x expert_bytes`): the numerator of its bandwidth.
    pub fn weight_bytes_read(&self) -> u64 {
        self.items as u64 * self.geom.expert_bytes() as u64
    }
}
