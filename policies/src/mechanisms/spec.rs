//! Parsing of mechanism specs (`--policy e2`, `--policies e1,e4:coact,region:64,os4k`) into
//! the parsed spec type [`MechanismSpec`].

use super::registry::{form, MECHANISM_FORMS};
use super::{BuildContext, BuildError, Mechanism, OsPages, Packing, Paging, Region};
use crate::units::UnitMap;

/// The accepted spec forms, for error messages: a summary of [`MECHANISM_FORMS`] (a test
/// checks that it names every form).
pub const ACCEPTED_FORMS: &str = "eN or eN:ORDER with N >= 1 and ORDER one of index, hot, coact \
(plain eN means eN:hot; e1 is one expert per commit), region:R or region:R:ORDER with R >= 1 \
MiB and ORDER one of index, hot (plain region:R means index), os4k, os64k, os2m";

/// Why a spec did not parse. Messages list [`ACCEPTED_FORMS`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("unknown mechanism spec `{0}`; accepted forms: {ACCEPTED_FORMS}")]
    Unknown(String),
    #[error("`{0}`: N must be at least 1 (e1 is one expert per commit); accepted forms: {ACCEPTED_FORMS}")]
    ZeroN(String),
    #[error("`{spec}`: unknown order `{order}` (accepted: {accepted}); accepted forms: {ACCEPTED_FORMS}")]
    Order {
        spec: String,
        order: String,
        accepted: &'static str,
    },
    #[error("`{0}`: the region size must be a whole number of MiB from 1 to {MAX_REGION_MIB} (1 TiB), e.g. region:64; accepted forms: {ACCEPTED_FORMS}")]
    RegionSize(String),
}

/// Largest region, MiB: 1 TiB, the same bound as one expert's size; it keeps every byte count
/// of a region far from u64 overflow.
pub const MAX_REGION_MIB: u64 = 1 << 20;

/// A parsed mechanism spec: which family, with its parameters. What callers ask about a spec
/// (its paging kind, its chunk size and order, its canonical text) is answered from this
/// value, never from the spelling of the spec string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MechanismSpec {
    /// `eN`, `eN:ORDER`: N experts of one layer per VMM chunk.
    Packing(Packing),
    /// `region:R`, `region:R:ORDER`: R MiB regions, experts packed layer-major.
    Region(Region),
    /// `os4k`, `os64k`, `os2m`: OS pages.
    OsPages(OsPages),
}

impl MechanismSpec {
    /// Parse one spec. Whitespace around the spec is ignored; the spec is case-sensitive (all
    /// forms are lower case).
    pub fn parse(spec: &str) -> Result<MechanismSpec, SpecError> {
        parse_spec(spec.trim())
    }

    /// The mechanism itself.
    pub fn mechanism(&self) -> &dyn Mechanism {
        match self {
            MechanismSpec::Packing(m) => m,
            MechanismSpec::Region(m) => m,
            MechanismSpec::OsPages(m) => m,
        }
    }

    /// The mechanism, boxed.
    pub fn into_mechanism(self) -> Box<dyn Mechanism> {
        match self {
            MechanismSpec::Packing(m) => Box::new(m),
            MechanismSpec::Region(m) => Box::new(m),
            MechanismSpec::OsPages(m) => Box::new(m),
        }
    }

    /// The `eN` parameters (experts per chunk and chunk order); `None` for other families.
    pub fn packing(&self) -> Option<&Packing> {
        match self {
            MechanismSpec::Packing(p) => Some(p),
            _ => None,
        }
    }
}

impl Mechanism for MechanismSpec {
    fn spec(&self) -> String {
        self.mechanism().spec()
    }

    fn paging(&self) -> Paging {
        self.mechanism().paging()
    }

    fn needs_coactivation(&self) -> bool {
        self.mechanism().needs_coactivation()
    }

    fn needs_profile(&self) -> bool {
        self.mechanism().needs_profile()
    }

    fn build(&self, ctx: &BuildContext) -> Result<UnitMap, BuildError> {
        self.mechanism().build(ctx)
    }
}

impl std::str::FromStr for MechanismSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        MechanismSpec::parse(s)
    }
}

/// The canonical spec (`e2:hot` for the input `e2`).
impl std::fmt::Display for MechanismSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.spec())
    }
}

/// Parse one spec into its mechanism (see [`MechanismSpec::parse`]).
pub fn parse(spec: &str) -> Result<Box<dyn Mechanism>, SpecError> {
    MechanismSpec::parse(spec).map(MechanismSpec::into_mechanism)
}

/// Split `s` into its family (`eN`, `region:R`), parameter and order suffix, check the
/// parameter, then look the form up in [`MECHANISM_FORMS`]; forms without a parameter are
/// matched whole.
fn parse_spec(s: &str) -> Result<MechanismSpec, SpecError> {
    if let Some(f) = MECHANISM_FORMS
        .iter()
        .find(|f| !f.has_param() && f.names().any(|n| n == s))
    {
        return Ok((f.construct)(0));
    }
    let mut parts = s.split(':');
    let head = parts.next().unwrap_or_default();
    let (family, param, accepted) = if head == "region" {
        let mib: u64 = parts
            .next()
            .and_then(|r| r.parse().ok())
            .filter(|&r| (1..=MAX_REGION_MIB).contains(&r))
            .ok_or_else(|| SpecError::RegionSize(s.into()))?;
        ("region:R", mib, "index, hot")
    } else {
        let digits = head
            .strip_prefix('e')
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| SpecError::Unknown(s.into()))?;
        let n: u32 = digits.parse().map_err(|_| SpecError::Unknown(s.into()))?;
        if n == 0 {
            return Err(SpecError::ZeroN(s.into()));
        }
        ("eN", u64::from(n), "index, hot, coact")
    };
    let form = match parts.next() {
        None => form(family),
        Some(order) => {
            Some(
                form(&format!("{family}:{order}")).ok_or_else(|| SpecError::Order {
                    spec: s.into(),
                    order: order.into(),
                    accepted,
                })?,
            )
        }
    }
    .ok_or_else(|| SpecError::Unknown(s.into()))?;
    if parts.next().is_some() {
        return Err(SpecError::Unknown(s.into()));
    }
    Ok((form.construct)(param))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanisms::ChunkOrder;

    #[test]
    fn canonical_specs() {
        for (input, canonical) in [
            ("e1", "e1"),
            ("e1:coact", "e1"),
            ("e2", "e2:hot"),
            ("e4:index", "e4:index"),
            ("e2:coact", "e2:coact"),
            ("e16:hot", "e16:hot"),
            ("region:64", "region:64"),
            ("region:64:index", "region:64"),
            ("region:64:hot", "region:64:hot"),
            ("os4k", "os4k"),
            (" os64k ", "os64k"),
            ("os2m", "os2m"),
        ] {
            assert_eq!(parse(input).unwrap().spec(), canonical, "{input}");
            assert_eq!(
                MechanismSpec::parse(input).unwrap().to_string(),
                canonical,
                "{input}"
            );
        }
    }

    #[test]
    fn the_parsed_spec_reports_its_paging_kind() {
        for (spec, paging) in [
            ("e1", Paging::Vmm),
            ("e4:coact", Paging::Vmm),
            ("region:64:hot", Paging::Vmm),
            ("os4k", Paging::Os),
            ("os64k", Paging::Os),
            ("os2m", Paging::Os),
        ] {
            assert_eq!(parse(spec).unwrap().paging(), paging, "{spec}");
        }
        let e4: MechanismSpec = "e4:index".parse().unwrap();
        assert_eq!(
            e4.packing(),
            Some(&Packing {
                n: 4,
                order: ChunkOrder::Index
            })
        );
        assert_eq!(MechanismSpec::parse("region:64").unwrap().packing(), None);
    }

    #[test]
    fn bad_specs_name_the_problem() {
        assert_eq!(parse("e0").unwrap_err(), SpecError::ZeroN("e0".into()));
        assert_eq!(parse("lru").unwrap_err(), SpecError::Unknown("lru".into()));
        assert_eq!(parse("e").unwrap_err(), SpecError::Unknown("e".into()));
        assert_eq!(
            parse("e2:hot:x").unwrap_err(),
            SpecError::Unknown("e2:hot:x".into())
        );
        assert_eq!(
            parse("os8k").unwrap_err(),
            SpecError::Unknown("os8k".into())
        );
        assert!(matches!(parse("e2:warm"), Err(SpecError::Order { .. })));
        assert!(matches!(
            parse("region:64:coact"),
            Err(SpecError::Order { .. })
        ));
        assert_eq!(
            parse("region:1048577").unwrap_err(),
            SpecError::RegionSize("region:1048577".into())
        );
        assert!(parse("region:1048576").is_ok());
        assert_eq!(
            parse("region:17592186044416").unwrap_err(),
            SpecError::RegionSize("region:17592186044416".into())
        );
        assert_eq!(
            parse("region:0").unwrap_err(),
            SpecError::RegionSize("region:0".into())
        );
        assert_eq!(
            parse("region").unwrap_err(),
            SpecError::RegionSize("region".into())
        );
        assert_eq!(
            parse("region:1.5").unwrap_err(),
            SpecError::RegionSize("region:1.5".into())
        );
        let msg = parse("lru").unwrap_err().to_string();
        assert!(msg.contains("region:R") && msg.contains("os4k"), "{msg}");
    }
}
