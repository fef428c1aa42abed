//! The settings that select a cache-regime run besides the policy: the VRAM budget as the user
//! wrote it (`--budget 25%`, `192`, `3GiB`), how it is shared between layers, when eviction is
//! checked, and how requests are batched. They live here, beside the retention policies they
//! configure, so that the simulator that runs them and the reports that read run results back
//! share one definition; their text forms (the CLI's and the JSON's) are part of the interface.

use serde::{Deserialize, Serialize};

/// A budget that resolves to no unit, or to more than the bank; the message says which and
/// how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BudgetError(pub String);

/// A budget as the user wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Budget {
    /// A fraction of the bank, exactly `num / den` (parsed from a decimal percentage, so
    /// `12.5%` is 125/1000 and rounding ties are detected exactly).
    Fraction { num: u128, den: u128 },
    /// A number of units.
    Units(u64),
    /// Bytes of VRAM for expert units.
    Bytes(u64),
}

/// Byte suffixes accepted by [`Budget::parse`], binary and decimal.
const BYTE_SUFFIXES: [(&str, u64); 10] = [
    ("TIB", 1 << 40),
    ("GIB", 1 << 30),
    ("MIB", 1 << 20),
    ("KIB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("KB", 1_000),
    ("B", 1),
    ("", 0),
];

/// Parse a non-negative decimal like `12.5` into (numerator, power of ten).
fn parse_decimal(s: &str) -> Option<(u128, u32)> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) || frac.len() > 18 {
        return None;
    }
    let digits = format!("{int}{frac}");
    Some((digits.parse().ok()?, frac.len() as u32))
}

/// Round `num / den` to the nearest integer, ties to even.
pub fn round_half_even(num: u128, den: u128) -> u128 {
    let (q, r) = (num / den, num % den);
    match (2 * r).cmp(&den) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

impl Budget {
    /// The budget as an error message names it: a byte budget in GiB or MiB when it is a whole
    /// number of them (`500 GiB (536870912000 B)`), every other form as [`Display`] writes it.
    ///
    /// [`Display`]: std::fmt::Display
    pub fn describe(&self) -> String {
        const MIB: u64 = 1 << 20;
        match *self {
            Budget::Bytes(b) if b > 0 && b % (MIB << 10) == 0 => {
                format!("{} GiB ({b} B)", b / (MIB << 10))
            }
            Budget::Bytes(b) if b > 0 && b % MIB == 0 => format!("{} MiB ({b} B)", b / MIB),
            _ => self.to_string(),
        }
    }

    /// Parse `25%`, `12.5%`, `192` or `3GiB` / `512MiB` / `2GB` / `1048576B`.
    pub fn parse(s: &str) -> Result<Budget, String> {
        let t = s.trim();
        let bad = || {
            format!(
                "invalid budget `{s}`: write a percentage of the bank (`25%`), a unit count (`192`) or bytes (`3GiB`, `512MiB`, `2GB`)"
            )
        };
        if let Some(p) = t.strip_suffix('%') {
            let (num, scale) = parse_decimal(p.trim()).ok_or_else(bad)?;
            return Ok(Budget::Fraction {
                num,
                den: 100 * 10u128.pow(scale),
            });
        }
        if t.chars().all(|c| c.is_ascii_digit()) && !t.is_empty() {
            return Ok(Budget::Units(t.parse().map_err(|_| bad())?));
        }
        let upper = t.to_ascii_uppercase();
        for (suffix, mult) in BYTE_SUFFIXES {
            if suffix.is_empty() {
                break;
            }
            if let Some(n) = upper.strip_suffix(suffix) {
                let (num, scale) = parse_decimal(n.trim()).ok_or_else(bad)?;
                let bytes = num * mult as u128 / 10u128.pow(scale);
                return Ok(Budget::Bytes(u64::try_from(bytes).map_err(|_| bad())?));
            }
        }
        if parse_decimal(t).is_some() {
            return Err(format!(
                "invalid budget `{s}`: a fraction of the bank needs a percent sign (`25%`); a unit count is a whole number"
            ));
        }
        Err(bad())
    }

    /// The budget as a unit count over a bank of `units` units whose largest unit commits
    /// `max_unit_bytes`: fractions round to max(1, round-half-even(r x units)); bytes give
    /// floor(bytes / max_unit_bytes) (any that many units fit). Errors when the result is 0
    /// or above the bank.
    pub fn resolve(&self, units: usize, max_unit_bytes: u64) -> Result<usize, BudgetError> {
        let n = match *self {
            Budget::Fraction { num, den } => {
                if num == 0 {
                    return Err(BudgetError(format!(
                        "budget {} is 0; give a positive budget",
                        self.describe()
                    )));
                }
                if num > den {
                    return Err(BudgetError(format!(
                        "budget {} is above the bank; give at most 100%",
                        self.describe()
                    )));
                }
                round_half_even(num * units as u128, den).max(1)
            }
            Budget::Units(n) => n as u128,
            Budget::Bytes(b) => (b / max_unit_bytes.max(1)) as u128,
        };
        if n == 0 {
            // Only a byte budget is smaller than a unit; for a unit count the bytes are noise.
            let why = match self {
                Budget::Bytes(_) => format!(" (one unit commits {max_unit_bytes} bytes)"),
                _ => String::new(),
            };
            return Err(BudgetError(format!(
                "budget {} holds no unit{why}; give at least one unit",
                self.describe()
            )));
        }
        if n > units as u128 {
            return Err(BudgetError(format!(
                "budget {}{} above the bank ({units} units); give at most 100% / {units} units",
                self.describe(),
                if matches!(self, Budget::Units(_)) {
                    " is".to_string()
                } else {
                    format!(" holds {n} units,")
                }
            )));
        }
        Ok(n as usize)
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Budget::Fraction { num, den } => {
                // den = 100 * 10^scale: print back the decimal percentage.
                let scale = (den / 100).ilog10() as usize;
                let p = 10u128.pow(scale as u32);
                if scale == 0 {
                    write!(f, "{num}%")
                } else {
                    write!(f, "{}.{:0scale$}%", num / p, num % p)
                }
            }
            Budget::Units(1) => f.write_str("1 unit"),
            Budget::Units(n) => write!(f, "{n} units"),
            Budget::Bytes(b) => write!(f, "{b} B"),
        }
    }
}

/// Serialized as written back by `Display` (`25%`, `192 units`, `3221225472 B`).
impl serde::Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl std::str::FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Budget::parse(s)
    }
}

/// Read back from the `Display` form (a results file): `N unit(s)` is a unit count, the other
/// forms are the ones [`Budget::parse`] accepts.
impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let units = s
            .strip_suffix(" units")
            .or_else(|| s.strip_suffix(" unit"))
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        match units {
            Some(n) => n
                .parse()
                .map(Budget::Units)
                .map_err(serde::de::Error::custom),
            None => Budget::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// When eviction is checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Semantics {
    /// All units of a group are admitted, then victims are evicted until the budget holds;
    /// the group's units are never victims unless every resident unit belongs to it.
    #[default]
    Group,
    /// Eviction after every single access, no protection (ordinary cache simulators).
    Access,
}

impl Semantics {
    /// The name the CLI and the JSON use: `group`, `access`.
    pub fn name(self) -> &'static str {
        match self {
            Semantics::Group => "group",
            Semantics::Access => "access",
        }
    }
}

/// How the budget is shared between layers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    /// One pool shared by all layers.
    #[default]
    Global,
    /// One pool per MoE layer, each with round(fraction x its units) slots.
    PerLayer,
}

impl Split {
    /// The name the CLI and the JSON use: `global`, `per-layer`.
    pub fn name(self) -> &'static str {
        match self {
            Split::Global => "global",
            Split::PerLayer => "per-layer",
        }
    }
}

/// How batches are formed from the waiting requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// Consecutive groups of W requests in arrival order.
    #[default]
    Fifo,
    /// From the Q oldest waiting requests: the oldest, then repeatedly the one that grows the
    /// batch's union of units least (ties: earliest arrival), up to W.
    RouteAware,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_round_half_to_even() {
        // 25% of 768 = 192 exactly; 10% = 76.8 -> 77; 90% = 691.2 -> 691.
        let r = |s: &str, n| Budget::parse(s).unwrap().resolve(n, 1).unwrap();
        assert_eq!(r("25%", 768), 192);
        assert_eq!(r("10%", 768), 77);
        assert_eq!(r("90%", 768), 691);
        // 12.5% of 4 = 0.5 -> 0 (even) -> max(1, 0) = 1; 37.5% of 4 = 1.5 -> 2; 62.5% of 4 = 2.5 -> 2.
        assert_eq!(r("12.5%", 4), 1);
        assert_eq!(r("37.5%", 4), 2);
        assert_eq!(r("62.5%", 4), 2);
        assert_eq!(r("100%", 4), 4);
    }

    #[test]
    fn units_and_bytes() {
        let b = Budget::parse("3GiB").unwrap();
        assert_eq!(b, Budget::Bytes(3 << 30));
        // 3 GiB of 16 MiB units = 192 units.
        assert_eq!(b.resolve(768, 16 << 20).unwrap(), 192);
        assert_eq!(Budget::parse("1.5MiB").unwrap(), Budget::Bytes(3 << 19));
        assert_eq!(Budget::parse("2GB").unwrap(), Budget::Bytes(2_000_000_000));
        assert_eq!(Budget::parse("192").unwrap().resolve(768, 1).unwrap(), 192);
    }

    #[test]
    fn errors_name_byte_budgets_in_binary_units() {
        let err = |s: &str| {
            Budget::parse(s)
                .unwrap()
                .resolve(768, 16 << 20)
                .unwrap_err()
                .0
        };
        // 500 GiB / 16 MiB = 32000 units, above the 768 of the bank
        assert_eq!(
            err("500GiB"),
            "budget 500 GiB (536870912000 B) holds 32000 units, above the bank (768 units); give at most 100% / 768 units"
        );
        // 1.5 MiB is not a whole number of MiB: named in bytes
        assert!(err("1.5MiB").starts_with("budget 1572864 B holds no unit"));
        assert!(err("8MiB").starts_with("budget 8 MiB (8388608 B) holds no unit"));
        assert_eq!(Budget::parse("2GB").unwrap().describe(), "2000000000 B");
        assert_eq!(Budget::parse("25%").unwrap().describe(), "25%");
    }

    #[test]
    fn bad_budgets_are_errors() {
        assert!(Budget::parse("0.25").is_err());
        assert!(Budget::parse("lots").is_err());
        assert!(Budget::parse("%").is_err());
        assert!(Budget::parse("0").unwrap().resolve(10, 1).is_err());
        assert!(Budget::parse("0%").unwrap().resolve(10, 1).is_err());
        assert!(Budget::parse("11").unwrap().resolve(10, 1).is_err());
        assert!(Budget::parse("101%").unwrap().resolve(10, 1).is_err());
        assert!(Budget::parse("1MiB").unwrap().resolve(10, 2 << 20).is_err());
    }

    #[test]
    fn no_unit_errors_mention_unit_bytes_only_for_byte_budgets() {
        let msg = |s: &str| {
            Budget::parse(s)
                .unwrap()
                .resolve(10, 4 << 20)
                .unwrap_err()
                .to_string()
        };
        // 0 units: a count, so the unit's 4 MiB = 4194304 bytes say nothing.
        let units = msg("0");
        assert!(units.contains("budget 0 units holds no unit; give at least one unit"));
        assert!(!units.contains("bytes"), "{units}");
        // 1 MiB = 1048576 bytes < one 4194304-byte unit: the unit size is the explanation.
        let bytes = msg("1MiB");
        assert!(
            bytes.contains("holds no unit (one unit commits 4194304 bytes)"),
            "{bytes}"
        );
    }
}
