//! The host side of the cost model: the price of one expert call computed on the CPU, from a
//! host profile's measured constants (`sim calibrate --only host`, validate/src/host/).
//!
//! Per call of one expert on `t` tokens, `b` weight bytes, all host threads (times in µs):
//!
//! ```text
//! call(t, b) = overhead + max(b / bandwidth, t x b / (16 x batch16_bandwidth))
//! ```
//!
//! - `bandwidth` is the one-token rate (`host_expert_int4_bandwidth`,
//!   `host_expert_bf16_bandwidth`): a one-token call reads every weight once and is bound by
//!   memory.
//! - `batch16_bandwidth` is the 16-token rate (`host_expert_int4_t16_bandwidth`): one read of
//!   the weights and 16 tokens' FLOPs, so `16 x batch16_bandwidth` is the expert bytes whose
//!   FLOPs the CPU does per µs for one token. A call is the slower of its memory term and its
//!   compute term (a roofline through the two measured arms); at `t = 1` and `t = 16` it
//!   reproduces them.
//! - `overhead` is the fit's intercept (`host_expert_int4_call_overhead`,
//!   `host_expert_bf16_call_overhead`); the calibration leaves it absent when the intercept
//!   fell below zero (under the noise), and then it adds nothing.
//!
//! `b` is the bytes of the expert in the kernel's own layout, which the arms measured: for int4
//! the host kernel keeps one f32 scale per group of 128 weights (64 + 4 = 68 bytes per 128
//! parameters, `validate::host::expert_kernel::Format::Int4`, the `kernels` crate's layout)
//! where the model's int4 expert has an fp16 one (66 bytes, [`DType::Int4`]), so an int4
//! call is priced on `expert_bytes x 68 / 66`; bf16 and fp16 experts are the kernel's bytes.
//!
//! bf16 and fp16 share the bf16 arm (the same 2 bytes per parameter and the same math after
//! conversion); int4 with group scales has its own arm. Other dtypes have no host arm and
//! are refused. A constant a call needs that the profile lacks is a
//! [`ProfileError::Missing`] naming it (never a default): a bf16 call of several tokens
//! needs a bf16 batch arm that the calibration does not measure.

use profile::{ConstantName as C, Profile, ProfileError};
use traces::model::DType;

/// Bytes per 128 int4 parameters in the host kernel's layout: 64 of packed nibbles and one f32
/// group scale (`validate::host::expert_kernel::Format::Int4`).
const INT4_KERNEL_BYTES_PER_128: f64 = 68.0;
/// Bytes per 128 int4 parameters in the model's layout: 64 and one fp16 scale
/// ([`DType::Int4`]'s `bytes_for`).
const INT4_MODEL_BYTES_PER_128: f64 = 66.0;

/// The measured line of one host expert format.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ExpertLine {
    /// Fixed µs per call (0 when the calibration left the intercept absent).
    overhead_us: f64,
    /// One-token expert bytes per µs; `None` when absent.
    bytes_per_us: Option<f64>,
    /// 16-token expert bytes per µs; `None` when absent.
    batch16_bytes_per_us: Option<f64>,
    /// Bytes of the kernel's layout (what the arms measured) per byte of the model's expert.
    kernel_bytes_per_byte: f64,
    /// Names for error messages.
    bandwidth: C,
    batch16: Option<C>,
}

/// Prices of CPU expert calls from a host profile. Build with [`HostCostModel::new`]; a
/// missing constant is reported by [`HostCostModel::expert_call_us`] when a call needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostCostModel {
    profile: String,
    int4: ExpertLine,
    bf16: ExpertLine,
}

impl HostCostModel {
    /// Read the host constants of `p` (any profile: a host profile, or a GPU profile with host
    /// arms). Nothing is required here; each call names what it lacks.
    pub fn new(p: &Profile) -> HostCostModel {
        HostCostModel {
            profile: p.name.clone(),
            int4: ExpertLine {
                overhead_us: p.get(C::HostExpertInt4CallOverhead).unwrap_or(0.0),
                bytes_per_us: p.get(C::HostExpertInt4Bandwidth),
                batch16_bytes_per_us: p.get(C::HostExpertInt4Tokens16Bandwidth),
                kernel_bytes_per_byte: INT4_KERNEL_BYTES_PER_128 / INT4_MODEL_BYTES_PER_128,
                bandwidth: C::HostExpertInt4Bandwidth,
                batch16: Some(C::HostExpertInt4Tokens16Bandwidth),
            },
            bf16: ExpertLine {
                overhead_us: p.get(C::HostExpertBf16CallOverhead).unwrap_or(0.0),
                bytes_per_us: p.get(C::HostExpertBf16Bandwidth),
                batch16_bytes_per_us: None,
                kernel_bytes_per_byte: 1.0,
                bandwidth: C::HostExpertBf16Bandwidth,
                batch16: None,
            },
        }
    }

    /// µs of one CPU call of one expert of `expert_bytes` weight bytes on `tokens` tokens
    /// (formula in the module doc). `tokens == 0` costs nothing.
    ///
    /// Errors: a dtype with no host arm (fp8, int4 without scales, nvfp4, mxfp4), or a
    /// constant the call needs that the profile lacks (named, with what needed it).
    pub fn expert_call_us(
        &self,
        dtype: DType,
        expert_bytes: u64,
        tokens: u32,
    ) -> Result<f64, ProfileError> {
        if tokens == 0 {
            return Ok(0.0);
        }
        self.expert_call_mean_us(dtype, expert_bytes, f64::from(tokens))
    }

    /// [`HostCostModel::expert_call_us`] at a mean of `tokens` tokens per call (a batch's
    /// slots over its distinct experts, >= 1): the same roofline with `t` real. At most one
    /// token needs only the one-token arm.
    pub fn expert_call_mean_us(
        &self,
        dtype: DType,
        expert_bytes: u64,
        tokens: f64,
    ) -> Result<f64, ProfileError> {
        let line = self.line(dtype)?;
        let need = |name: C, what: &str| ProfileError::Missing {
            profile: self.profile.clone(),
            constant: name.as_str(),
            needed_for: what.to_string(),
        };
        let bw = line
            .bytes_per_us
            .ok_or_else(|| need(line.bandwidth, "experts computed on the CPU"))?;
        let bytes = expert_bytes as f64 * line.kernel_bytes_per_byte;
        let memory_us = bytes / bw;
        if tokens <= 1.0 {
            return Ok(line.overhead_us + memory_us);
        }
        let batch_name = line.batch16.unwrap_or(C::HostExpertInt4Tokens16Bandwidth);
        let batch = line.batch16_bytes_per_us.ok_or_else(|| {
            need(
                batch_name,
                &format!("CPU expert calls of {tokens} tokens in {dtype:?} (a batch arm)"),
            )
        })?;
        let compute_us = tokens * bytes / (16.0 * batch);
        Ok(line.overhead_us + memory_us.max(compute_us))
    }

    fn line(&self, dtype: DType) -> Result<&ExpertLine, ProfileError> {
        match dtype {
            DType::Int4 => Ok(&self.int4),
            DType::Bf16 | DType::Fp16 => Ok(&self.bf16),
            other => Err(ProfileError::Missing {
                profile: self.profile.clone(),
                constant: "host_expert_<dtype>_bandwidth",
                needed_for: format!(
                    "experts in {other:?} on the CPU: the host calibration measures int4 and bf16 only; use --dtype int4 or bf16"
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile::{Constant, Device};

    fn host(consts: &[(C, f64, &str)]) -> Profile {
        let mut p = Profile::new("host-test", "test", Device::default());
        for &(n, v, unit) in consts {
            p.set(n, Constant::assumed(v, unit, "a hand-computed test value"));
        }
        p
    }

    #[test]
    fn one_token_call_is_overhead_plus_bytes_over_bandwidth() {
        // A 7,760,000 B int4 expert is 7,760,000 x 68 / 66 = 7,995,151.5 B in the kernel's
        // layout; at 4000 MB/s = 4000 bytes/µs: 1998.79 µs, + 30 µs overhead.
        let p = host(&[
            (C::HostExpertInt4Bandwidth, 4000.0, "MB/s"),
            (C::HostExpertInt4CallOverhead, 30.0, "us"),
        ]);
        let m = HostCostModel::new(&p);
        let t = m.expert_call_us(DType::Int4, 7_760_000, 1).unwrap();
        assert!(
            (t - (30.0 + 7_760_000.0 * 68.0 / 66.0 / 4000.0)).abs() < 1e-9,
            "{t}"
        );
        assert!((t - 2028.79).abs() < 0.01, "{t}");
    }

    #[test]
    fn batch_is_the_slower_of_memory_and_compute() {
        // bw 4000 B/µs, batch16 1000 B/µs: compute per token = b / 16000. A 6,600,000 B int4
        // expert is b = 6,800,000 kernel bytes (x 68 / 66): memory 1700 µs; 2 tokens: compute
        // 850 µs, so memory; 4 tokens: 4 x 6.8e6 / 16000 = 1700 µs (tie); 16 tokens:
        // 6800 µs = 6.8e6 / 1000 (the 16-token arm itself).
        let p = host(&[
            (C::HostExpertInt4Bandwidth, 4000.0, "MB/s"),
            (C::HostExpertInt4Tokens16Bandwidth, 1000.0, "MB/s"),
        ]);
        let m = HostCostModel::new(&p);
        let b = 6_600_000;
        assert!((m.expert_call_us(DType::Int4, b, 2).unwrap() - 1700.0).abs() < 1e-9);
        assert!((m.expert_call_us(DType::Int4, b, 4).unwrap() - 1700.0).abs() < 1e-9);
        assert!((m.expert_call_us(DType::Int4, b, 16).unwrap() - 6800.0).abs() < 1e-9);
        assert_eq!(m.expert_call_us(DType::Int4, b, 0).unwrap(), 0.0);
    }

    #[test]
    fn missing_constants_and_dtypes_are_named() {
        let p = host(&[(C::HostExpertBf16Bandwidth, 5000.0, "MB/s")]);
        let m = HostCostModel::new(&p);
        // fp16 shares the bf16 arm: 1e6 / 5000 = 200 µs.
        assert!((m.expert_call_us(DType::Fp16, 1_000_000, 1).unwrap() - 200.0).abs() < 1e-9);
        let e = m.expert_call_us(DType::Int4, 1, 1).unwrap_err().to_string();
        assert!(e.contains("host_expert_int4_bandwidth"), "{e}");
        let e = m.expert_call_us(DType::Bf16, 1, 4).unwrap_err().to_string();
        assert!(e.contains("batch arm"), "{e}");
        let e = m.expert_call_us(DType::Fp8, 1, 1).unwrap_err().to_string();
        assert!(e.contains("int4 and bf16 only"), "{e}");
    }

    #[test]
    fn shipped_dev_box_host_profile_prices_an_int4_expert() {
        // The shipped host profile has every int4 constant: a Qwen3-30B-A3B int4 expert
        // (3 x 2048 x 768 params = 4,718,592; x 66/128 bytes = 2,433,024 B) is priced on its
        // 4,718,592 x 68/128 = 2,506,752 B in the kernel's layout.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profile/profiles/dev-box-host.json"
        );
        let p = profile::load(path).unwrap();
        let m = HostCostModel::new(&p);
        let bytes = DType::Int4.bytes_for(3 * 2048 * 768);
        assert_eq!(bytes, 2_433_024);
        let bw = p.get(C::HostExpertInt4Bandwidth).unwrap();
        let oh = p.get(C::HostExpertInt4CallOverhead).unwrap_or(0.0);
        let t = m.expert_call_us(DType::Int4, bytes, 1).unwrap();
        assert!((t - (oh + 2_506_752.0 / bw)).abs() < 1e-6);
    }
}
