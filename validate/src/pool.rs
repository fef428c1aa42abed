//! Pooling the measurement sets of several calibrations of one GPU into one set, so that one
//! calibration taken while the host ran slow does not set the profile.
//!
//! Why: the host's speed switches between fast and slow states within minutes, and the VMM
//! calls slow down with it. Five calibrations of one H200 with the same code fitted the
//! per-granule commit at 40.5 to 49.6 µs; a profile from the slow one (49.6 µs) priced 2 of the
//! shipped profile's 13 replays within 10%, the others 8 to 12 (docs/history/calibration.md, "A
//! slow calibration"; all figures: BENCHMARKS.md at commit 225ec1c).
//!
//! How: the sets are walked together as JSON. Every measured summary (an object of exactly
//! `median`, `min`, `max`, `spread`, `n`) becomes the median of the sets' medians, the least
//! `min`, the largest `max` and the summed `n`, with the spread recomputed. Every other float
//! (a measured value such as a bandwidth or a fill fraction) becomes the sets' median.
//! Everything else (settings, sizes, counts, names) must be equal, because pooling different
//! GPUs, drivers or calibration settings would mix unlike things; the exceptions are the
//! calibration date (the latest is kept) and the free VRAM at the start (the least is kept).
//! Not here: the calibration itself ([`crate::calibrate`]) or the profile ([`crate::to_profile`]).

use crate::host::HostCalibration;
use crate::stats::Summary;
use crate::{Calibration, KernelCalibration};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};

/// Why measurement sets could not be pooled.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// No set was given.
    #[error("no measurement set to pool")]
    Empty,
    /// Set `set` (0-based) differs from the first where they must agree; `path` is the JSON
    /// path (e.g. `$.page_in[2]`).
    #[error(
        "set {} differs from set 1 at {path} ({first} vs {other}): pool only sets of one GPU \
         and driver taken with the same calibration settings (--quick, --seed), whose arms \
         measured the same points", set + 1
    )]
    Mismatch {
        set: usize,
        path: String,
        first: String,
        other: String,
    },
    /// Set `set` (0-based) is itself a pooled set.
    #[error(
        "set {} is itself pooled from {from} calibrations: pool the original calibrations' \
         measurement sets instead", set + 1
    )]
    PooledInput { set: usize, from: u32 },
    /// Set `set` (0-based) is identical to set `same`: one calibration given twice.
    #[error(
        "set {} is identical to set {}: the same calibration given twice would count twice",
        set + 1, same + 1
    )]
    Duplicate { set: usize, same: usize },
    /// The pooled set is not a measurement set (cannot happen for sets that decoded).
    #[error("the pooled measurement set does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

/// Pools `sets` (see the module doc) into one measurement set whose `pooled_from` counts them.
/// One set is returned as it is.
///
/// Errors: [`PoolError::Empty`] for no set; [`PoolError::PooledInput`] for a set that is
/// itself pooled; [`PoolError::Duplicate`] for one calibration given twice;
/// [`PoolError::Mismatch`] naming the first place where a set differs from the first in a
/// setting or in shape.
pub fn pool(sets: &[Calibration]) -> Result<Calibration, PoolError> {
    let mut pooled = pool_sets(sets, |c| c.pooled_from)?;
    if sets.len() > 1 {
        pooled.pooled_from = Some(u32::try_from(sets.len()).unwrap_or(u32::MAX));
    }
    Ok(pooled)
}

/// Pools host calibrations (`sim calibrate --only host`, [`crate::host`]) as [`pool`] pools
/// GPU sets; the expert fits are then refitted through the pooled points (a fit's
/// coefficients are not medians of other fits). Same errors as [`pool`].
pub fn pool_host(sets: &[HostCalibration]) -> Result<HostCalibration, PoolError> {
    let mut pooled = pool_sets(sets, |c| c.pooled_from)?;
    if sets.len() > 1 {
        pooled.expert_fits = crate::host::expert_arms::fits(&pooled.experts);
        pooled.pooled_from = Some(u32::try_from(sets.len()).unwrap_or(u32::MAX));
    }
    Ok(pooled)
}

/// Pools kernel calibrations (`sim calibrate --only kernels`) as [`pool`] pools GPU sets.
/// Same errors as [`pool`].
pub fn pool_kernels(sets: &[KernelCalibration]) -> Result<KernelCalibration, PoolError> {
    let mut pooled = pool_sets(sets, |c| c.pooled_from)?;
    if sets.len() > 1 {
        pooled.pooled_from = Some(u32::try_from(sets.len()).unwrap_or(u32::MAX));
    }
    Ok(pooled)
}

/// The checks and the JSON walk shared by [`pool`], [`pool_host`] and [`pool_kernels`]; the
/// caller sets the pooled count. One set is returned as it is.
fn pool_sets<T: Clone + Serialize + DeserializeOwned>(
    sets: &[T],
    pooled_from: impl Fn(&T) -> Option<u32>,
) -> Result<T, PoolError> {
    match sets {
        [] => Err(PoolError::Empty),
        [one] => Ok(one.clone()),
        _ => {
            if let Some((set, from)) = sets
                .iter()
                .enumerate()
                .find_map(|(i, c)| pooled_from(c).map(|n| (i, n)))
            {
                return Err(PoolError::PooledInput { set, from });
            }
            let values = sets
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()?;
            for (set, v) in values.iter().enumerate() {
                if let Some(same) = values[..set].iter().position(|w| w == v) {
                    return Err(PoolError::Duplicate { set, same });
                }
            }
            let refs: Vec<&Value> = values.iter().collect();
            Ok(serde_json::from_value(pool_values(&refs, "$")?)?)
        }
    }
}

/// Pools JSON values of one shape (see the module doc); `path` names `values` in errors.
fn pool_values(values: &[&Value], path: &str) -> Result<Value, PoolError> {
    let first = values[0];
    let mismatch = |other: &Value| mismatch(values, path, other);
    match first {
        Value::Object(map) if is_summary(map) => {
            let mut s = Vec::with_capacity(values.len());
            for v in values {
                match v.as_object().filter(|m| is_summary(m)) {
                    Some(m) => s.push(m),
                    None => return Err(mismatch(v)),
                }
            }
            pooled_summary(&s).ok_or_else(|| mismatch(values[1]))
        }
        Value::Object(map) => pool_objects(values, map, path),
        Value::Array(items) => {
            for v in values {
                if v.as_array().map(Vec::len) != Some(items.len()) {
                    return Err(mismatch(v));
                }
            }
            (0..items.len())
                .map(|i| {
                    let field: Vec<&Value> = values.iter().map(|v| &v[i]).collect();
                    pool_values(&field, &format!("{path}[{i}]"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        Value::Number(n) if n.is_f64() => float_median(values)
            .ok_or_else(|| mismatch(values.iter().find(|v| !v.is_number()).unwrap_or(&first))),
        _ => match values.iter().find(|v| **v != first) {
            None => Ok(first.clone()),
            // a float that serialized as an integer in the first set (e.g. 0.0 -> 0)
            Some(v) if v.is_f64() => float_median(values).ok_or_else(|| mismatch(v)),
            Some(v) => Err(mismatch(v)),
        },
    }
}

/// The sets disagree at `path`: `other` (one of `values`) differs from the first.
fn mismatch(values: &[&Value], path: &str, other: &Value) -> PoolError {
    PoolError::Mismatch {
        set: values
            .iter()
            .position(|v| std::ptr::eq(*v, other))
            .unwrap_or(1),
        path: path.to_string(),
        first: short(values[0]),
        other: short(other),
    }
}

/// Pool objects field by field; `map` is the first set's. Every set must have the same fields;
/// the latest `date` and the smallest `vram_free` are kept as they are.
fn pool_objects(
    values: &[&Value],
    map: &Map<String, Value>,
    path: &str,
) -> Result<Value, PoolError> {
    let first = values[0];
    let mut out = Map::new();
    for (set, v) in values.iter().enumerate() {
        let m = v.as_object().ok_or_else(|| mismatch(values, path, v))?;
        // a field one set has and the first lacks, or the reverse: name it
        let missing = map.keys().find(|k| !m.contains_key(*k));
        let extra = m.keys().find(|k| !map.contains_key(*k));
        let named = match (missing, extra) {
            (Some(k), _) => Some((k, "present", "absent")),
            (None, Some(k)) => Some((k, "absent", "present")),
            (None, None) => None,
        };
        if let Some((key, first, other)) = named {
            return Err(PoolError::Mismatch {
                set,
                path: format!("{path}.{key}"),
                first: first.into(),
                other: other.into(),
            });
        }
    }
    for key in map.keys() {
        let field: Vec<&Value> = values.iter().map(|v| &v[key.as_str()]).collect();
        let sub = format!("{path}.{key}");
        let pooled = match key.as_str() {
            "date" if field.iter().all(|v| v.is_string()) => {
                (*field.iter().max_by_key(|v| v.as_str()).unwrap_or(&first)).clone()
            }
            "vram_free" if field.iter().all(|v| v.is_u64()) => {
                Value::from(field.iter().filter_map(|v| v.as_u64()).min().unwrap_or(0))
            }
            _ => pool_values(&field, &sub)?,
        };
        out.insert(key.clone(), pooled);
    }
    Ok(Value::Object(out))
}

/// The median of `values` as numbers (see [`Summary::of`]); `None` when one is not a number.
fn float_median(values: &[&Value]) -> Option<Value> {
    let xs: Option<Vec<f64>> = values.iter().map(|v| v.as_f64()).collect();
    Summary::of(&xs?).map(|s| Value::from(s.median))
}

/// True for a [`crate::stats::Summary`] as JSON: exactly `median`, `min`, `max`, `spread`, `n`.
fn is_summary(m: &Map<String, Value>) -> bool {
    m.len() == 5
        && ["median", "min", "max", "spread", "n"]
            .iter()
            .all(|k| m.contains_key(*k))
}

/// Median of medians, least min, largest max, summed n, spread = (max - min) / median (0 when
/// the median is 0); `None` when a field is not a number.
fn pooled_summary(s: &[&Map<String, Value>]) -> Option<Value> {
    let field = |k: &str| -> Option<Vec<f64>> { s.iter().map(|m| m[k].as_f64()).collect() };
    let med = Summary::of(&field("median")?)?.median;
    let min = field("min")?.into_iter().fold(f64::INFINITY, f64::min);
    let max = field("max")?.into_iter().fold(f64::NEG_INFINITY, f64::max);
    let n: u64 = s.iter().map(|m| m["n"].as_u64()).sum::<Option<u64>>()?;
    let spread = if med != 0.0 { (max - min) / med } else { 0.0 };
    Some(serde_json::json!({"median": med, "min": min, "max": max, "spread": spread, "n": n}))
}

/// A value for an error message, cut to 60 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pooled(vs: &[Value]) -> Result<Value, PoolError> {
        let refs: Vec<&Value> = vs.iter().collect();
        pool_values(&refs, "$")
    }

    /// A host set with int4 one-token points at 1 and 2 MB taking `scale` x (100 + bytes /
    /// 4000) µs, i.e. a line of intercept 100 x scale and bandwidth 4000 / scale.
    fn host_set(scale: f64, date: &str) -> HostCalibration {
        use crate::host::expert_arms::ExpertPoint;
        use crate::host::expert_kernel::Format;
        let experts: Vec<ExpertPoint> = [1_000_000usize, 2_000_000]
            .iter()
            .map(|&b| ExpertPoint {
                format: Format::Int4,
                geometry: [1024, 512, 128],
                expert_bytes: b,
                tokens: 1,
                threads: 2,
                call_us: Summary::of(&[scale * (100.0 + b as f64 / 4000.0)]).unwrap(),
            })
            .collect();
        HostCalibration {
            cpu: "test CPU".into(),
            os: "linux x86_64".into(),
            all_threads: 2,
            date: date.into(),
            quick: true,
            seed: 1,
            expert_bank_bytes: 1 << 27,
            expert_fits: crate::host::expert_arms::fits(&experts),
            experts,
            memory: vec![],
            ssd: None,
            wall_s: 10.0 * scale,
            pooled_from: None,
        }
    }

    #[test]
    fn host_sets_pool_their_points_and_refit_the_line() {
        // Scales 1.0, 1.2 and 1.1: the pooled points are the 1.1 set's, so the refitted line
        // has intercept 110 µs and bandwidth 4000 / 1.1 bytes per µs.
        let sets = [
            host_set(1.0, "2026-12-01"),
            host_set(1.2, "2026-12-02"),
            host_set(1.1, "2026-11-30"),
        ];
        let p = pool_host(&sets).unwrap();
        assert_eq!(p.pooled_from, Some(3));
        assert_eq!(p.date, "2026-12-02");
        let fit = &p.expert_fits[0].fit;
        assert!((fit.latency_us - 110.0).abs() < 1e-6, "{fit:?}");
        assert!((fit.bytes_per_us - 4000.0 / 1.1).abs() < 1e-6, "{fit:?}");
        let e = pool_host(&[p.clone(), sets[0].clone()]).unwrap_err();
        assert!(
            matches!(e, PoolError::PooledInput { set: 0, from: 3 }),
            "{e}"
        );
        let e = pool_host(&[sets[0].clone(), sets[0].clone()]).unwrap_err();
        assert!(matches!(e, PoolError::Duplicate { set: 1, same: 0 }), "{e}");
    }

    #[test]
    fn summaries_floats_and_settings_pool_by_their_rules() {
        let a = json!({"x": {"median": 10.0, "min": 9.0, "max": 12.0, "spread": 0.3, "n": 7},
                       "bw": 4000.0, "granules": 32, "gpu": "H200", "date": "2026-11-28",
                       "vram_free": 100, "sizes": [2, 8]});
        let b = json!({"x": {"median": 14.0, "min": 13.0, "max": 20.0, "spread": 0.5, "n": 7},
                       "bw": 4400.0, "granules": 32, "gpu": "H200", "date": "2026-11-29",
                       "vram_free": 90, "sizes": [2, 8]});
        let c = json!({"x": {"median": 11.0, "min": 8.0, "max": 11.5, "spread": 0.3, "n": 3},
                       "bw": 4100.0, "granules": 32, "gpu": "H200", "date": "2026-11-27",
                       "vram_free": 95, "sizes": [2, 8]});
        let p = pooled(&[a.clone(), b.clone(), c]).unwrap();
        // medians 10, 14, 11 -> 11; min 8; max 20; n 17; spread (20 - 8) / 11
        assert_eq!(p["x"]["median"], 11.0);
        assert_eq!(p["x"]["min"], 8.0);
        assert_eq!(p["x"]["max"], 20.0);
        assert_eq!(p["x"]["n"], 17);
        assert_eq!(p["x"]["spread"], 12.0 / 11.0);
        assert_eq!(p["bw"], 4100.0);
        assert_eq!(p["granules"], 32);
        assert_eq!(p["date"], "2026-11-29");
        assert_eq!(p["vram_free"], 90);
        assert_eq!(p["sizes"], json!([2, 8]));
        // two sets: the mean of the two middle values
        let p2 = pooled(&[a, b]).unwrap();
        assert_eq!(p2["x"]["median"], 12.0);
        assert_eq!(p2["bw"], 4200.0);
    }

    #[test]
    fn sets_that_differ_in_a_setting_or_shape_are_refused_with_the_path() {
        let a = json!({"device": {"gpu": "NVIDIA H200"}, "page_in": [{"granules": 2}]});
        let gpu = json!({"device": {"gpu": "RTX 4060"}, "page_in": [{"granules": 2}]});
        let e = pooled(&[a.clone(), gpu]).unwrap_err().to_string();
        assert!(e.contains("$.device.gpu") && e.contains("RTX 4060"), "{e}");
        let size = json!({"device": {"gpu": "NVIDIA H200"}, "page_in": [{"granules": 8}]});
        let e = pooled(&[a.clone(), size]).unwrap_err().to_string();
        assert!(e.contains("$.page_in[0].granules"), "{e}");
        let longer = json!({"device": {"gpu": "NVIDIA H200"}, "page_in": [{"granules": 2}, {"granules": 8}]});
        let e = pooled(&[a.clone(), longer]).unwrap_err().to_string();
        assert!(e.contains("$.page_in "), "{e}");
        let extra = json!({"device": {"gpu": "NVIDIA H200"}, "page_in": [{"granules": 2}], "x": 1});
        let e = pooled(&[a.clone(), a.clone(), extra])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("set 3 differs from set 1 at $.x (absent vs present)"),
            "{e}"
        );
        let s = json!({"median": 1.0, "min": 1.0, "max": 1.0, "spread": 0.0, "n": 1});
        let e = pooled(&[s, Value::Null]).unwrap_err().to_string();
        assert!(e.contains("null"), "{e}");
    }

    #[test]
    fn stored_sets_pool_into_a_set_that_builds_a_profile() {
        let p9: Calibration =
            serde_json::from_str(include_str!("../data/h200-linux-p9.measurements.json")).unwrap();
        let p10: Calibration = serde_json::from_str(include_str!(
            "../tests/fixtures/h200-linux-p10.measurements.json"
        ))
        .unwrap();
        // one set: unchanged
        let one = pool(std::slice::from_ref(&p9)).unwrap();
        assert_eq!(one.pooled_from, None);
        assert_eq!(
            serde_json::to_value(&one).unwrap(),
            serde_json::to_value(&p9).unwrap()
        );
        let both = pool(&[p9.clone(), p10.clone()]).unwrap();
        assert_eq!(both.pooled_from, Some(2));
        // read independently from the two files: the mean of the two medians, n summed
        let (a, b) = (
            p9.page_in[0].steady_commit_us.as_ref().unwrap(),
            p10.page_in[0].steady_commit_us.as_ref().unwrap(),
        );
        let q = both.page_in[0].steady_commit_us.as_ref().unwrap();
        assert_eq!(q.median, (a.median + b.median) / 2.0);
        assert_eq!(q.n, a.n + b.n);
        assert_eq!(q.min, a.min.min(b.min));
        assert_eq!(both.device.gpu, "NVIDIA H200");
        // a pooled set is not pooled again, and one calibration is not given twice
        let e = pool(&[both.clone(), p10.clone()]).unwrap_err().to_string();
        assert!(e.starts_with("set 1 is itself pooled from 2"), "{e}");
        let e = pool(&[p10.clone(), p9.clone(), p10.clone()])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("set 3 is identical to set 1"), "{e}");
        let profile = crate::to_profile::to_profile(&both, "pooled");
        assert!(profile.notes.iter().any(|n| n.contains("2 calibrations")));
        // a set without the same-size page-in cycles (an older calibration) is refused
        let mut old = p9.clone();
        old.page_in[0].steady_commit_us = None;
        let e = pool(&[p9.clone(), old]).unwrap_err().to_string();
        assert!(
            e.starts_with("set 2 differs from set 1 at $.page_in[0].steady_commit_us"),
            "{e}"
        );
        // the h200-linux-p8 set timed another default kernel
        let p8: Calibration = serde_json::from_str(include_str!(
            "../tests/fixtures/h200-linux-p8.measurements.json"
        ))
        .unwrap();
        let e = pool(&[p9, p8]).unwrap_err().to_string();
        assert!(e.contains("$.kernels[") && e.contains("moe_dot_"), "{e}");
    }
}
