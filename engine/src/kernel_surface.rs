//! The expert kernels' time as a function of routed slots, distinct experts and expert bytes,
//! from a profile's fitted constants (`sim calibrate` fits them on its kernel arms; see
//! `validate`'s `kernel_surface` module for how):
//!
//! - the per-slot kernel (one expert FFN per (token, expert) slot; the decode path's kernel):
//!   `expert_kernel_fixed + distinct x bytes / expert_kernel_bandwidth + (slots - distinct)
//!   x bytes / expert_kernel_repeat_bandwidth`. A slot whose expert the
//!   launch already read (a verify chunk's or a batch's tokens sharing an expert) costs its
//!   bytes at the repeat rate. Without `expert_kernel_repeat_bandwidth` the repeat term is left
//!   out: the kernel is then priced as reading each distinct expert once, as before the repeat
//!   fit existed. With one token per step the slots are the distinct experts, so the surface is
//!   the distinct-expert fit alone.
//! - the union kernel (one pass per distinct expert): `union_kernel_fixed + distinct x bytes /
//!   union_kernel_bandwidth`.

use profile::{ConstantName as C, Profile};
use reports::union_curve::{UnionCurve, UnionCurveRow};

/// One kernel's time surface, µs and bytes per µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelSurface {
    /// Fixed time of one layer's launches, µs.
    pub fixed_us: f64,
    /// Bytes of distinct experts read per µs.
    pub distinct_bytes_per_us: f64,
    /// Bytes of repeated slots per µs; `None`: repeats are not priced.
    pub repeat_bytes_per_us: Option<f64>,
}

impl KernelSurface {
    /// The per-slot kernel's surface; `None` when the profile lacks the distinct-expert fit
    /// (`expert_kernel_fixed`, `expert_kernel_bandwidth`).
    pub fn per_slot(p: &Profile) -> Option<KernelSurface> {
        let (fixed_us, bw) = p
            .get(C::ExpertKernelFixed)
            .zip(p.get(C::ExpertKernelBandwidth))?;
        Some(KernelSurface {
            fixed_us,
            distinct_bytes_per_us: bw,
            repeat_bytes_per_us: p.get(C::ExpertKernelRepeatBandwidth),
        })
    }

    /// The union kernel's line; `None` when the profile lacks `union_kernel_fixed` or
    /// `union_kernel_bandwidth`.
    pub fn union(p: &Profile) -> Option<KernelSurface> {
        let (fixed_us, bw) = p
            .get(C::UnionKernelFixed)
            .zip(p.get(C::UnionKernelBandwidth))?;
        Some(KernelSurface {
            fixed_us,
            distinct_bytes_per_us: bw,
            repeat_bytes_per_us: None,
        })
    }

    /// Time of one distinct expert of `expert_bytes` beyond the fixed part, µs.
    #[inline]
    pub fn distinct_us(&self, expert_bytes: u64) -> f64 {
        expert_bytes as f64 / self.distinct_bytes_per_us
    }

    /// Time of one repeated slot of an expert of `expert_bytes`, µs (0 when not priced).
    #[inline]
    pub fn repeat_us(&self, expert_bytes: u64) -> f64 {
        self.repeat_bytes_per_us
            .map_or(0.0, |bw| expert_bytes as f64 / bw)
    }

    /// Time of one layer's launch over `slots` slots naming `distinct` experts of
    /// `expert_bytes` each, µs (`slots >= distinct`; fewer slots count as `distinct`).
    pub fn time_us(&self, slots: u64, distinct: u64, expert_bytes: u64) -> f64 {
        let t = self.fixed_us + distinct as f64 * self.distinct_us(expert_bytes);
        let repeats = slots.saturating_sub(distinct);
        if repeats > 0 {
            t + repeats as f64 * self.repeat_us(expert_bytes)
        } else {
            t
        }
    }
}

/// Distinct-expert counts of a union-curve table at `slots` when none are asked for: the
/// profile curve's where it was measured at `slots`, else slots / d for d in 1, 2, 3, 4, 5,
/// 6, 10 where it divides (60 gives 60, 30, 20, 15, 12, 10, 6, the calibration's sweep).
pub fn default_distinct(p: &Profile, slots: u32) -> Vec<u32> {
    if let Some(c) = p.expert_kernel_curve.as_ref().filter(|c| c.slots == slots) {
        return c.points.iter().map(|q| q.distinct).collect();
    }
    let mut out: Vec<u32> = [1, 2, 3, 4, 5, 6, 10]
        .iter()
        .filter(|&&d| slots.is_multiple_of(d))
        .map(|&d| slots / d)
        .collect();
    out.dedup();
    out
}

/// The union-curve table of profile `p` at `slots` slots for each count of `distinct`, of
/// experts of `expert_bytes` (default: the profile curve's). Errors name what is missing:
/// the per-slot kernel fit, the expert size, a distinct count outside 1 ..= slots.
pub fn union_curve(
    p: &Profile,
    slots: u32,
    distinct: &[u32],
    expert_bytes: Option<u64>,
) -> anyhow::Result<UnionCurve> {
    let per_slot = KernelSurface::per_slot(p).ok_or_else(|| {
        anyhow::anyhow!(
            "profile '{}' has no expert-kernel fit (expert_kernel_fixed, expert_kernel_bandwidth), needed for the union curve; measure it with `sim calibrate` (its kernel arms)",
            p.name
        )
    })?;
    let curve = p.expert_kernel_curve.as_ref();
    let bytes = expert_bytes.or(curve.map(|c| c.expert_bytes)).ok_or_else(|| {
        anyhow::anyhow!(
            "profile '{}' has no measured kernel curve to take the expert size from; give --expert-mib",
            p.name
        )
    })?;
    anyhow::ensure!(slots > 0, "--slots 0: a launch routes at least one slot");
    let measured = curve.filter(|c| c.slots == slots && c.expert_bytes == bytes);
    let union = KernelSurface::union(p);
    let ceiling = p.get(C::StreamReadBandwidth);
    let mut rows = Vec::with_capacity(distinct.len());
    for &d in distinct {
        anyhow::ensure!(
            (1..=slots).contains(&d),
            "--distinct {d}: give counts from 1 to the {slots} slots"
        );
        let point = measured.and_then(|c| c.points.iter().find(|q| q.distinct == d));
        let per_slot_us = per_slot.time_us(slots as u64, d as u64, bytes);
        let t = point.map_or(per_slot_us, |q| q.per_slot_us);
        let distinct_rate = (d as u64 * bytes) as f64 / t;
        let slot_rate = (slots as u64 * bytes) as f64 / t;
        rows.push(UnionCurveRow {
            distinct: d,
            per_slot_us,
            per_slot_measured_us: point.map(|q| q.per_slot_us),
            union_us: union.map(|u| u.time_us(d as u64, d as u64, bytes)),
            union_measured_us: point.and_then(|q| q.union_us),
            distinct_bytes_per_us: distinct_rate,
            slot_bytes_per_us: slot_rate,
            distinct_possible: ceiling.map(|c| distinct_rate <= c),
            slot_possible: ceiling.map(|c| slot_rate <= c),
        });
    }
    Ok(UnionCurve {
        profile: p.name.clone(),
        slots,
        expert_bytes: bytes,
        stream_read_bytes_per_us: ceiling,
        per_slot_kernel: curve.map_or(String::new(), |c| c.per_slot_kernel.clone()),
        union_kernel: curve.map_or(String::new(), |c| c.union_kernel.clone()),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surface_by_hand() {
        let s = KernelSurface {
            fixed_us: 10.0,
            distinct_bytes_per_us: 4.0e6,
            repeat_bytes_per_us: Some(5.0e6),
        };
        // 60 slots of 6 distinct 2 MB experts: 10 + 6 x 0.5 + 54 x 0.4 = 34.6 µs
        assert!((s.time_us(60, 6, 2_000_000) - 34.6).abs() < 1e-12);
        // no repeats: the distinct-expert line
        assert_eq!(s.time_us(8, 8, 2_000_000), 10.0 + 8.0 * 0.5);
        let free = KernelSurface {
            repeat_bytes_per_us: None,
            ..s
        };
        assert_eq!(free.time_us(60, 6, 2_000_000), 13.0);
    }

    #[test]
    fn shipped_profiles_have_the_surface_where_calibrated() {
        let h = profile::load("h200-linux").unwrap();
        let s = KernelSurface::per_slot(&h).unwrap();
        assert!(s.repeat_bytes_per_us.is_some());
        assert!(KernelSurface::union(&h).is_some());
        // the RTX 4060 profile comes from published figures without kernel sweeps
        let r = profile::load("rtx4060-laptop-wddm").unwrap();
        assert_eq!(KernelSurface::per_slot(&r), None);
    }
}
