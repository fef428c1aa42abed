//! Expert and granule sizes: from the trace header's geometry and a dtype, or given directly.

use serde::Serialize;
use traces::{DType, ModelSpec};

/// Bytes in one MiB.
pub const MIB: u64 = 1 << 20;

/// The VMM allocation granule when `--granule-mib` is not given: 2 MiB, the minimum and
/// recommended granularity measured on both the RTX 4060 Laptop and the H200
/// (docs/reference/measurements.md).
pub const DEFAULT_GRANULE_BYTES: u64 = 2 * MIB;

/// Largest expert accepted: 1 TiB. Not a measured constant but a sanity bound: the largest
/// routed expert of the shipped presets (Mixtral-8x7B, 3 x 4096 x 14336 parameters in bf16)
/// is 336 MiB, and 1 TiB is beyond the memory of any single GPU (the H200 has 141 GB), so a
/// larger value is a unit mistake; it also keeps bank sizes, chunk sizes and per-granule call
/// counts far from u64 overflow.
pub const MAX_EXPERT_BYTES: u64 = 1 << 40;

/// Largest granule accepted: 1 GiB, the largest page size of x86-64 and ARM64 (the VMM granule
/// measured on the RTX 4060 Laptop and the H200 is 2 MiB). A sanity bound, not a measurement.
pub const MAX_GRANULE_BYTES: u64 = 1 << 30;

/// What the user asked for (`--expert-mib`, `--dtype`, `--granule-mib`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SizeOptions {
    /// Size of one expert in MiB, overriding the geometry (`--expert-mib`).
    pub expert_mib: Option<f64>,
    /// Weight dtype used with the header geometry (`--dtype`); bf16 when absent.
    pub dtype: Option<DType>,
    /// VMM granule in MiB (`--granule-mib`); [`DEFAULT_GRANULE_BYTES`] when absent.
    pub granule_mib: Option<f64>,
}

/// Resolved sizes, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sizes {
    /// Bytes of one routed expert (gate, up and down projections, scales included).
    pub expert_bytes: u64,
    /// VMM granule bytes (a power of two). OS-page mechanisms use their page size instead.
    pub granule_bytes: u64,
    /// The dtype the expert bytes were derived with; `None` when `--expert-mib` gave them.
    pub dtype: Option<DType>,
}

/// Why the sizes could not be resolved. The messages say what to change in the settings'
/// own words (expert size, dtype, granule); the `sim` binary words them with the flags that
/// set them.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SizeError {
    #[error("both an expert size and a weight dtype given; give one (the dtype derives the size from the trace header's geometry, the expert size sets it directly)")]
    BothGiven,
    #[error(
        "expert size {0} MiB is not a positive size; give the size of one expert in MiB, e.g. 3"
    )]
    ExpertNotPositive(f64),
    #[error("expert size {0} MiB rounds to 0 bytes; give the size of one expert in MiB, e.g. 3")]
    ExpertZero(f64),
    #[error("the expert size is unknown: the trace header of model `{model}` has no hidden and expert FFN sizes; give the expert size (MiB per expert)")]
    Missing { model: String },
    #[error("expert size {0} MiB is above the limit of 1 TiB (1048576 MiB) per expert; give the size of one expert in MiB (e.g. 3 for 3 MiB), not in bytes or KiB")]
    ExpertTooLarge(f64),
    #[error("the expert size derived from the trace header of model `{model}` is {bytes} bytes, above the limit of 1 TiB per expert; check the header's hidden and expert FFN sizes or give the expert size (MiB per expert)")]
    HeaderExpertTooLarge { model: String, bytes: u64 },
    #[error("VMM granule {0} MiB is above the limit of 1024 MiB (1 GiB, the largest page size of x86-64 and ARM64); the measured VMM granule is 2 MiB (the default)")]
    GranuleTooLarge(f64),
    #[error("VMM granule {0} MiB is not a power of two in bytes (accepted: 2, 1, 0.5, 4, 64, ... MiB; default 2)")]
    GranuleNotPowerOfTwo(f64),
}

/// MiB (possibly fractional) to whole bytes, rounded to the nearest byte.
fn mib_to_bytes(mib: f64) -> u64 {
    (mib * MIB as f64).round() as u64
}

impl Sizes {
    /// Resolve the sizes for `model`.
    ///
    /// Expert bytes: `--expert-mib` when given (rounded to the nearest byte), else the header's
    /// `3 x hidden x expert_ffn` parameters in `--dtype` (default bf16) via
    /// [`DType::bytes_for`]. Errors: both given, a non-positive or zero-byte size, an expert
    /// above [`MAX_EXPERT_BYTES`], no geometry and no `--expert-mib`, a granule that is not a
    /// power of two or is above [`MAX_GRANULE_BYTES`].
    pub fn resolve(model: &ModelSpec, opts: &SizeOptions) -> Result<Sizes, SizeError> {
        let granule_bytes = match opts.granule_mib {
            None => DEFAULT_GRANULE_BYTES,
            Some(g) => {
                let b = mib_to_bytes(g);
                if g.is_nan()
                    || g <= 0.0
                    || !b.is_power_of_two()
                    || (b as f64 - g * MIB as f64).abs() > 1e-6
                {
                    return Err(SizeError::GranuleNotPowerOfTwo(g));
                }
                if b > MAX_GRANULE_BYTES {
                    return Err(SizeError::GranuleTooLarge(g));
                }
                b
            }
        };
        let (expert_bytes, dtype) = match (opts.expert_mib, opts.dtype) {
            (Some(_), Some(_)) => return Err(SizeError::BothGiven),
            (Some(x), None) => {
                if !x.is_finite() || x <= 0.0 {
                    return Err(SizeError::ExpertNotPositive(x));
                }
                // compared in MiB, before the conversion to bytes can saturate
                if x > (MAX_EXPERT_BYTES / MIB) as f64 {
                    return Err(SizeError::ExpertTooLarge(x));
                }
                let b = mib_to_bytes(x);
                if b == 0 {
                    return Err(SizeError::ExpertZero(x));
                }
                (b, None)
            }
            (None, d) => {
                let dtype = d.unwrap_or(DType::Bf16);
                let params = model.expert_params().ok_or_else(|| SizeError::Missing {
                    model: model.name.clone(),
                })?;
                let b = dtype.bytes_for(params);
                if b == 0 {
                    return Err(SizeError::Missing {
                        model: model.name.clone(),
                    });
                }
                if b > MAX_EXPERT_BYTES {
                    return Err(SizeError::HeaderExpertTooLarge {
                        model: model.name.clone(),
                        bytes: b,
                    });
                }
                (b, Some(dtype))
            }
        };
        Ok(Sizes {
            expert_bytes,
            granule_bytes,
            dtype,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granite() -> ModelSpec {
        let mut m = ModelSpec::uniform("granite", 24, 32, 8);
        m.hidden_size = Some(1024);
        m.expert_ffn = Some(512);
        m
    }

    #[test]
    fn geometry_defaults_to_bf16() {
        // 3 x 1024 x 512 = 1,572,864 params x 2 bytes = 3 MiB
        let s = Sizes::resolve(&granite(), &SizeOptions::default()).unwrap();
        assert_eq!(s.expert_bytes, 3 * MIB);
        assert_eq!(s.granule_bytes, 2 * MIB);
        assert_eq!(s.dtype, Some(DType::Bf16));
        let opts = SizeOptions {
            dtype: Some(DType::Fp8),
            ..Default::default()
        };
        assert_eq!(
            Sizes::resolve(&granite(), &opts).unwrap().expert_bytes,
            1_572_864
        );
    }

    #[test]
    fn expert_mib_overrides_and_errors() {
        let m = ModelSpec::uniform("nogeo", 2, 4, 2);
        assert_eq!(
            Sizes::resolve(&m, &SizeOptions::default()),
            Err(SizeError::Missing {
                model: "nogeo".into()
            })
        );
        let o = SizeOptions {
            expert_mib: Some(1.5),
            ..Default::default()
        };
        assert_eq!(Sizes::resolve(&m, &o).unwrap().expert_bytes, 1_572_864);
        let o = SizeOptions {
            expert_mib: Some(0.0),
            ..Default::default()
        };
        assert_eq!(
            Sizes::resolve(&m, &o),
            Err(SizeError::ExpertNotPositive(0.0))
        );
        let o = SizeOptions {
            expert_mib: Some(1e-9),
            ..Default::default()
        };
        assert_eq!(Sizes::resolve(&m, &o), Err(SizeError::ExpertZero(1e-9)));
        let o = SizeOptions {
            expert_mib: Some(1.0),
            dtype: Some(DType::Fp8),
            ..Default::default()
        };
        assert_eq!(Sizes::resolve(&m, &o), Err(SizeError::BothGiven));
    }

    #[test]
    fn expert_sizes_above_one_tib_are_refused() {
        let m = ModelSpec::uniform("nogeo", 2, 4, 2);
        for (mib, ok) in [(1048576.0, true), (1048576.5, false), (1e14, false)] {
            let o = SizeOptions {
                expert_mib: Some(mib),
                ..Default::default()
            };
            match Sizes::resolve(&m, &o) {
                Ok(s) => {
                    assert!(ok, "{mib} MiB accepted");
                    assert_eq!(s.expert_bytes, 1 << 40);
                }
                Err(e) => {
                    assert!(!ok, "{mib} MiB refused: {e}");
                    assert_eq!(e, SizeError::ExpertTooLarge(mib));
                    assert!(e.to_string().contains("1 TiB"));
                }
            }
        }
        // geometry: 3 x 2^20 x 2^20 parameters x 2 bytes = 6 TiB
        let mut big = granite();
        big.hidden_size = Some(1 << 20);
        big.expert_ffn = Some(1 << 20);
        assert_eq!(
            Sizes::resolve(&big, &SizeOptions::default()),
            Err(SizeError::HeaderExpertTooLarge {
                model: "granite".into(),
                bytes: 6 << 40
            })
        );
    }

    #[test]
    fn granule_must_be_power_of_two() {
        let m = granite();
        for (g, ok) in [
            (2.0, true),
            (0.0625, true),
            (64.0, true),
            (3.0, false),
            (0.0, false),
            (-2.0, false),
            (1024.0, true),
            (2048.0, false),
            (1048576.0, false),
        ] {
            let o = SizeOptions {
                granule_mib: Some(g),
                ..Default::default()
            };
            assert_eq!(Sizes::resolve(&m, &o).is_ok(), ok, "granule {g}");
        }
    }
}
