//! `sim plan --host-ram GIB`: whether the experts the recommendation holds in host memory
//! fit there beside the operating system.
//!
//! A configuration that pages experts in and out of VRAM (any eviction but `static-pin`)
//! keeps the whole expert bank in host memory, the source of every page-in; a static one
//! (`static-pin`, or a run with no page-ins) holds only the experts it leaves off the GPU.
//! The non-expert weights and the KV caches stay in VRAM (`-ngl 99`, as planned) and
//! `--no-mmap` loads the host part into memory rather than the file cache.

use crate::plan::Plan;
use serde::Serialize;

/// Host memory kept for the operating system and its services: 4 GiB, the minimum memory of
/// Windows 11's system requirements ("Memory: 4 gigabyte (GB) or greater",
/// https://www.microsoft.com/en-us/windows/windows-11-specifications). The laptop profiles
/// here run Windows (WDDM); a desktop session with a browser takes more, so this is a floor.
pub const OS_RESERVE_GIB: f64 = 4.0;

/// The recommendation's host memory against `--host-ram`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostRam {
    /// `--host-ram`, GiB.
    pub ram_gib: f64,
    /// [`OS_RESERVE_GIB`].
    pub os_reserve_gib: f64,
    /// Experts held in host memory.
    pub experts_in_host: u64,
    /// Whether that is the whole bank (a paging configuration) or only those off the GPU.
    pub whole_bank: bool,
    /// Their bytes, GiB.
    pub experts_gib: f64,
    /// `experts_gib + os_reserve_gib <= ram_gib`.
    pub fits: bool,
}

const GIB: f64 = (1u64 << 30) as f64;

/// The host memory of `plan`'s recommendation on a host of `ram_gib`; `None` when nothing
/// fits.
pub fn check(plan: &Plan, ram_gib: f64) -> Option<HostRam> {
    let row = &plan.rows[plan.recommended?];
    let fit = row.fit.as_ref()?;
    let off_gpu = row.experts_total.saturating_sub(fit.experts_kept);
    let paging = row.evict != "static-pin" && fit.page_ins_per_token > 0.0;
    let experts_in_host = if paging { row.experts_total } else { off_gpu };
    let experts_gib = (experts_in_host * row.expert_bytes) as f64 / GIB;
    Some(HostRam {
        ram_gib,
        os_reserve_gib: OS_RESERVE_GIB,
        experts_in_host,
        whole_bank: paging,
        experts_gib,
        fits: experts_gib + OS_RESERVE_GIB <= ram_gib,
    })
}

impl HostRam {
    /// One line under the plan: the sum and whether it fits.
    pub fn text(&self) -> String {
        let why = if self.whole_bank {
            "the whole bank: paged experts are fetched from there"
        } else {
            "the experts off the GPU"
        };
        let need = self.experts_gib + self.os_reserve_gib;
        let verdict = if self.fits {
            format!("fits, {:.1} GiB left", self.ram_gib - need)
        } else {
            format!(
                "does NOT fit, {:.1} GiB short: keep more experts on the GPU, quantise them smaller (--dtype), or plan for more host memory",
                need - self.ram_gib
            )
        };
        format!(
            "host RAM: {:.1} GiB of experts ({} experts, {why}) + {:.1} GiB for the OS = {need:.1} GiB of {:.1} GiB: {verdict}",
            self.experts_gib, self.experts_in_host, self.os_reserve_gib, self.ram_gib
        )
    }
}
