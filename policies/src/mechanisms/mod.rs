//! Residency mechanisms: how expert instances (keys) map to commit units.
//!
//! A mechanism is a [`Mechanism`]: given the model's [`KeySpace`], the resolved [`Sizes`]
//! (expert and granule bytes) and, for orders that need one, a [`ProfileStats`] of a profile
//! trace, it builds a [`UnitMap`]. Each family lives in its own file:
//!
//! Every spec form, with its summary and constructor, is in the registry
//! [`MECHANISM_FORMS`]; the families:
//!
//! | spec | family | file |
//! |---|---|---|
//! | `e1`, `eN`, `eN:index`, `eN:hot`, `eN:coact` | N experts of one layer per VMM chunk | [`packing`] |
//! | `region:R`, `region:R:index`, `region:R:hot` | R MiB regions, experts packed layer-major | [`region`] |
//! | `os4k`, `os64k`, `os2m` | OS pages, each page its own unit | [`os_pages`] |
//!
//! The order in which a layer's experts are chunked (`index`, `hot`, `coact`) is in [`order`];
//! spec parsing is in [`spec`], which yields the parsed spec type [`MechanismSpec`]; expert and
//! granule sizes are resolved in [`sizes`]. Every mechanism states its [`Paging`] kind (VMM
//! granules or OS pages), which the cost model, the real replay and the reports use.
//! A new mechanism implements [`Mechanism`] in one file and adds its forms to
//! [`MECHANISM_FORMS`] (and, for a new family, its syntax to [`spec::parse`]).

pub mod order;
pub mod os_pages;
pub mod packing;
pub mod region;
pub mod registry;
pub mod sizes;
pub mod spec;

pub use order::{ChunkOrder, ProfileStats};
pub use os_pages::OsPages;
pub use packing::Packing;
pub use region::Region;
pub use registry::{forms_help, forms_short, MechanismForm, MECHANISM_FORMS};
pub use sizes::{SizeError, SizeOptions, Sizes, DEFAULT_GRANULE_BYTES, MIB};
pub use spec::{parse, MechanismSpec, SpecError, ACCEPTED_FORMS};

use crate::units::{UnitInfo, UnitMap};
use serde::{Deserialize, Serialize};
use traces::KeySpace;

/// How a mechanism's units become resident on the GPU. The two kinds are priced with
/// different constants (map calls and a copy, or page faults) and replayed on a real GPU with
/// different driver calls, so the mechanism states its kind instead of callers guessing it
/// from the spec's spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Paging {
    /// VMM units (`e*`, `region:*`): each granule created, mapped and given access
    /// (cuMemCreate, cuMemMap, cuMemSetAccess), then an H2D copy of the unit's useful bytes;
    /// evicted by unmapping and releasing the granules.
    Vmm,
    /// OS pages (`os*`): one managed allocation whose pages the expert kernels fault in on
    /// demand (or that a hint prefetches); evicted by migrating the pages back to host memory.
    Os,
}

/// Everything a mechanism needs to lay out units.
#[derive(Clone, Copy, Debug)]
pub struct BuildContext<'a> {
    /// Dense numbering of the model's (MoE layer, expert) keys.
    pub keyspace: &'a KeySpace,
    /// Expert bytes and VMM granule bytes.
    pub sizes: Sizes,
    /// Selection counts and co-activation of the profile trace; required by the `hot` and
    /// `coact` orders, ignored by the others.
    pub profile: Option<&'a ProfileStats>,
}

/// Errors of [`Mechanism::build`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// A region of `region_bytes` cannot hold one whole expert of `expert_bytes`.
    #[error(
        "region of {region_bytes} bytes is smaller than one expert ({expert_bytes} bytes); \
         experts are never split across regions, so use region:R with R >= {min_mib} MiB"
    )]
    RegionTooSmall {
        region_bytes: u64,
        expert_bytes: u64,
        min_mib: u64,
    },
    /// `eN` with N above the expert count of every MoE layer: it would behave as
    /// `e{max_experts}` under a misleading label.
    #[error(
        "e{n} puts {n} experts in one chunk but the model's MoE layers have at most \
         {max_experts} experts; the largest allowed N is {max_experts} (e{max_experts} commits \
         a whole layer at once)"
    )]
    TooManyExpertsPerChunk { n: u32, max_experts: u16 },
    /// The `hot` or `coact` order was asked for without profile statistics.
    #[error("the `{order}` chunk order needs a profile trace, but none was given")]
    MissingProfile { order: &'static str },
    /// The `coact` order was asked for but the profile was built without co-activation.
    #[error("the `coact` chunk order needs co-activation counts; build the profile with them")]
    MissingCoactivation,
    /// The profile trace's model has a different key space from the evaluated trace.
    #[error("the profile trace has {profile_keys} expert instances but the trace has {keys}")]
    ProfileMismatch { profile_keys: usize, keys: usize },
    /// More units than the u32 unit ids can number.
    #[error("`{spec}` would make {units} units ({per_key} per expert instance), more than the {} unit ids allow; use larger units (a larger page or region) or a smaller expert size", u32::MAX)]
    TooManyUnits {
        spec: String,
        units: u128,
        per_key: u64,
    },
    /// The unit map would not fit in the memory available.
    #[error(
        "`{spec}`: {detail}; use larger units (a larger page or region) or a smaller expert size"
    )]
    Memory {
        spec: String,
        /// The refusal, with the figures (kept out of `source()`: the message includes it).
        detail: traces::resources::ResourceError,
    },
}

/// Refuse a unit map whose tables would not fit in the memory available, before building it:
/// the per-key tables (`key_first`, `key_count`: a u32 each per expert instance) and one
/// [`UnitInfo`] per unit. The geometry comes from the trace header, so a file of a few hundred
/// KB can declare billions of expert instances.
pub(crate) fn check_map_memory(spec: &str, keys: usize, units: u128) -> Result<(), BuildError> {
    let need = keys as u128 * 8 + units * std::mem::size_of::<UnitInfo>() as u128;
    let what = format!("its tables for {keys} expert instances in {units} units");
    traces::resources::check_memory(&what, need, "").map_err(|detail| BuildError::Memory {
        spec: spec.to_string(),
        detail,
    })
}

/// A residency mechanism: lays every expert instance out into commit units.
///
/// Implementations are pure functions of their parameters and the [`BuildContext`], so the
/// same inputs always give the same [`UnitMap`] (the engine and the sweep rely on it).
pub trait Mechanism: Send + Sync + std::fmt::Debug {
    /// The canonical spec, e.g. `e2:hot` for the input `e2`.
    fn spec(&self) -> String;

    /// How the mechanism's units are committed: VMM granules or OS pages.
    fn paging(&self) -> Paging;

    /// True when [`BuildContext::profile`] must carry co-activation counts.
    fn needs_coactivation(&self) -> bool {
        false
    }

    /// True when [`BuildContext::profile`] is read (hot or coact orders).
    fn needs_profile(&self) -> bool {
        false
    }

    /// Lay out every key of `ctx.keyspace` into units.
    fn build(&self, ctx: &BuildContext) -> Result<UnitMap, BuildError>;
}

/// `bytes` rounded up to a whole number of `granule` bytes (`granule` > 0).
#[inline]
pub fn round_up(bytes: u64, granule: u64) -> u64 {
    bytes.div_ceil(granule) * granule
}

/// Check that a profile matches the key space it will order.
pub(crate) fn check_profile<'a>(
    ctx: &BuildContext<'a>,
    order: &'static str,
) -> Result<&'a ProfileStats, BuildError> {
    let p = ctx.profile.ok_or(BuildError::MissingProfile { order })?;
    if p.counts.len() != ctx.keyspace.num_keys() {
        return Err(BuildError::ProfileMismatch {
            profile_keys: p.counts.len(),
            keys: ctx.keyspace.num_keys(),
        });
    }
    Ok(p)
}

#[cfg(test)]
pub(crate) mod testutil {
    use traces::{ModelSpec, Provenance, Trace};

    /// A one-sequence decode-only trace of `layers` MoE layers x `experts`, top-k = width of
    /// each selection; `tokens[t][m]` is token t's selection in layer m.
    pub fn trace(layers: usize, experts: u16, tokens: &[Vec<Vec<u16>>]) -> Trace {
        let k = tokens[0][0].len() as u16;
        let model = ModelSpec::uniform("tiny", layers, experts, k);
        Trace::decode_only(model, Provenance::default(), &[tokens.to_vec()]).unwrap()
    }
}
