//! Substituting the arms of kernel calibrations (`sim calibrate --only kernels`) for the
//! kernel arms of a full calibration of the same GPU.
//!
//! Why: the expert kernels and the VMM calls are measured by separate arms that share no
//! figure, and the VMM arms of a chosen calibration are kept because the stored replays
//! validate them (BENCHMARKS.md, "Calibration (H200)"). When the default kernel changes, its
//! constants are re-measured by `--only kernels` and carried into that calibration's set, so
//! the profile prices the kernel the code runs without re-choosing every other constant.
//!
//! What moves: the streaming-read reference (the kernels' bandwidth ceiling), the default
//! per-slot and the union kernel's arms (variants `PerSlot` and `Union`: what a full
//! calibration measures; the other kernels' arms of a kernel set are comparisons no profile
//! reads) and the same-shape reads. The set records where they came from
//! ([`Calibration::kernel_arms_from`]). Not here: pooling ([`crate::pool`]).

use crate::calibrate::KernelArmsSource;
use crate::{Calibration, KernelCalibration};

/// Why a kernel set cannot replace a calibration's kernel arms.
#[derive(Debug, thiserror::Error)]
pub enum SpliceError {
    /// The two sets were measured on different GPUs, drivers or CUDA versions.
    #[error(
        "the kernel set was measured on {kernels}, the calibration on {calibration}: take the \
         kernel sets on the calibration's GPU, driver and CUDA version"
    )]
    OtherDevice {
        kernels: String,
        calibration: String,
    },
    /// One set is a quick pass and the other is not.
    #[error(
        "the kernel set is {} and the calibration {}: take both with the same --quick",
        quick(*kernels), quick(*calibration)
    )]
    OtherSettings { kernels: bool, calibration: bool },
    /// The kernel set has no arm of the default per-slot kernel.
    #[error(
        "the kernel set has no arm of the default per-slot kernel (variant PerSlot){}",
        .dot_error.as_ref().map_or(String::new(), |e| format!("; its kernels did not load: {e}"))
    )]
    NoDefaultKernel { dot_error: Option<String> },
    /// The calibration's kernel arms were already replaced.
    #[error(
        "the calibration's kernel arms already come from {} kernel set(s) of {}: splice into \
         the original calibration's set", .0.sets, .0.date
    )]
    AlreadySpliced(KernelArmsSource),
}

fn quick(q: bool) -> &'static str {
    if q {
        "a --quick pass"
    } else {
        "a full pass"
    }
}

/// `cal` with the streaming read, the `PerSlot` and `Union` kernel arms and the same-shape
/// reads of `k` in place of its own, and [`Calibration::kernel_arms_from`] naming `k`'s date
/// and pool size. Every other arm is `cal`'s, unchanged.
///
/// Errors: [`SpliceError`] when the two sets' GPU, driver, CUDA version, compute capability,
/// multiprocessor count or OS differ, when one is `--quick` and the other is not, when `k`
/// timed no default kernel, or when `cal` was already spliced.
pub fn with_kernel_arms(
    mut cal: Calibration,
    k: &KernelCalibration,
) -> Result<Calibration, SpliceError> {
    if let Some(from) = cal.kernel_arms_from.take() {
        return Err(SpliceError::AlreadySpliced(from));
    }
    let id = |d: &crate::DeviceInfo| {
        format!(
            "{} (driver {}, CUDA {}, compute {}, {} multiprocessors, {})",
            d.gpu, d.driver, d.cuda, d.compute_capability, d.multiprocessors, d.os
        )
    };
    let (kernels, calibration) = (id(&k.device), id(&cal.device));
    if kernels != calibration {
        return Err(SpliceError::OtherDevice {
            kernels,
            calibration,
        });
    }
    if k.quick != cal.quick {
        return Err(SpliceError::OtherSettings {
            kernels: k.quick,
            calibration: cal.quick,
        });
    }
    if !k.kernels.iter().any(|p| p.variant == "PerSlot") {
        return Err(SpliceError::NoDefaultKernel {
            dot_error: k.dot_error.clone(),
        });
    }
    cal.stream_read_bytes = k.stream_read_bytes;
    cal.stream_read_bytes_per_us = k.stream_read_bytes_per_us.clone();
    cal.kernels = k
        .kernels
        .iter()
        .filter(|p| p.variant == "PerSlot" || p.variant == "Union")
        .cloned()
        .collect();
    cal.shaped_reads = k.shaped_reads.clone();
    cal.kernel_arms_from = Some(KernelArmsSource {
        date: k.device.date.clone(),
        sets: k.pooled_from.unwrap_or(1),
    });
    Ok(cal)
}
