//! CUDA kernels for decode-time MoE expert FFNs and page touching, compiled at run time with
//! NVRTC, with launch wrappers and CPU reference implementations.
//!
//! Owned here: the int4 expert layout ([`geometry`]), the CUDA C sources (`src/cuda/moe.cu`:
//! f32 and tensor-core union kernels, page touch, streaming reads (plain, and in an expert
//! launch's shape: [`Kernels::launch_stream_read_shaped`]); `src/cuda/moe_dot.cu`: the
//! per-slot integer-dot kernels listed in [`launch::DOT_KERNELS`], with their activation
//! pre-passes), the per-slot and union work lists ([`worklist`]), the launch geometry
//! ([`launch`]), the launch wrappers ([`gpu`]) and the CPU reference ([`reference`](mod@reference)). Not here:
//! timing, calibration or replay (the `validate` crate).
//! Every kernel uses the driver API and NVRTC only (no OS-specific calls). The default dot
//! kernel, the persistent one-launch `moe_dot_fd_r2j1s3b1`
//! ([`launch::DotStaging::PersistentBulk`]: bulk copies, mbarriers; its launches whose slots
//! repeat experts run its static-walk twin, [`launch::DotKernel::for_repeats`]), runs only from compute
//! capability 9.0 (H100/H200); below it (an RTX 4060 is 8.9) its launches run
//! [`launch::FUSED_FALLBACK_KERNEL`], whose programmatic dependent launches are plain launches
//! there (the kernels' waits compile to nothing).
//! The CUDA libraries are loaded dynamically, so this builds and its CPU tests run without a GPU;
//! call [`gpu::check_cuda_libraries`] (or [`gpu::open_device`]) before any CUDA call.

pub mod geometry;
pub mod gpu;
pub mod launch;
pub mod reference;
pub mod worklist;

pub use geometry::ExpertGeometry;
pub use gpu::{
    check_cuda_libraries, open_device, KernelError, KernelPath, Kernels, MoeLaunch, PerSlotKernel,
    PhaseLaunch,
};
pub use launch::{LaunchShape, LayerLaunches};
pub use worklist::{Variant, WorkList, MAX_SLOTS_PER_ITEM};
