//! Which GPU, driver and CUDA version a measurement ran on, and today's date (for provenance).

use cudarc::driver::{sys, CudaContext};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Description of the measured device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// cuDeviceGetName, e.g. `NVIDIA H200`.
    pub gpu: String,
    /// Kernel-module driver version (e.g. `580.159.04`) where the OS exposes it, else the
    /// CUDA version the driver supports.
    pub driver: String,
    /// CUDA version supported by the driver (cuDriverGetVersion), e.g. `13.0`.
    pub cuda: String,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: String,
    /// Streaming multiprocessors (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).
    pub multiprocessors: u32,
    /// cuMemGetInfo total, bytes.
    pub vram_total: u64,
    /// cuMemGetInfo free when calibration started, bytes.
    pub vram_free: u64,
    /// CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS (false on Windows WDDM).
    pub concurrent_managed_access: bool,
    /// `linux`, `windows`, ... (std::env::consts::OS).
    pub os: String,
    /// Date of the measurement, ISO 8601 (UTC).
    pub date: String,
}

impl DeviceInfo {
    /// Reads the description of `ctx`'s device.
    pub fn read(ctx: &Arc<CudaContext>) -> Result<Self, cudarc::driver::DriverError> {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        unsafe { sys::cuDriverGetVersion(&mut v).result()? };
        let cuda = format!("{}.{}", v / 1000, (v % 1000) / 10);
        let (free, total) = ctx.mem_get_info()?;
        let (ma, mi) = ctx.compute_capability()?;
        Ok(Self {
            gpu: ctx.name()?,
            driver: kernel_module_version().unwrap_or_else(|| format!("CUDA {cuda} driver")),
            cuda,
            compute_capability: format!("{ma}.{mi}"),
            multiprocessors: ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
                as u32,
            vram_total: total as u64,
            vram_free: free as u64,
            concurrent_managed_access: ctx.attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            )? != 0,
            os: std::env::consts::OS.to_string(),
            date: today_utc(),
        })
    }
}

/// The NVIDIA kernel module version from `/proc/driver/nvidia/version` (Linux); `None` elsewhere.
pub fn kernel_module_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_string)
}

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
