//! Budgets: `--budget 25%` (a fraction of the bank), `--budget 192` (units) or
//! `--budget 3GiB` (bytes), resolved to unit counts for the global pool or per layer.

use super::CacheError;

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
    pub fn resolve(&self, units: usize, max_unit_bytes: u64) -> Result<usize, CacheError> {
        let n = match *self {
            Budget::Fraction { num, den } => {
                if num == 0 {
                    return Err(CacheError::Budget(format!(
                        "budget {self} is 0; give a positive budget"
                    )));
                }
                if num > den {
                    return Err(CacheError::Budget(format!(
                        "budget {self} is above the bank; give at most 100%"
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
            return Err(CacheError::Budget(format!(
                "budget {self} holds no unit{why}; give at least one unit"
            )));
        }
        if n > units as u128 {
            return Err(CacheError::Budget(format!(
                "budget {self}{} is above the bank ({units} units); give at most 100% / {units} units",
                if matches!(self, Budget::Units(_)) { String::new() } else { format!(" ({n} units)") }
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
            Budget::Units(n) => f.write_str(&reports::metrics::count(n, "unit")),
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

/// Per-layer equal split: each pool of `pool_units[i]` units gets
/// `max(1, round-half-even(r x pool_units[i]))` slots, where r is the budget's fraction of the
/// whole bank (`total_units`), exactly: `global_units / total_units` for unit and byte budgets.
pub fn split_per_layer(
    budget: &Budget,
    global_units: usize,
    total_units: usize,
    pool_units: &[usize],
) -> Vec<usize> {
    let (num, den) = match *budget {
        Budget::Fraction { num, den } => (num, den),
        _ => (global_units as u128, total_units as u128),
    };
    pool_units
        .iter()
        .map(|&n| (round_half_even(num * n as u128, den).max(1) as usize).min(n.max(1)))
        .collect()
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

    #[test]
    fn per_layer_split_rounds_each_layer() {
        // 10% of 32 = 3.2 -> 3 per layer; 90% -> 28.8 -> 29; a unit budget of 77 of 768
        // is r = 77/768, 77/768 x 32 = 3.208 -> 3.
        let f = Budget::parse("10%").unwrap();
        assert_eq!(split_per_layer(&f, 77, 768, &[32, 32]), vec![3, 3]);
        let f = Budget::parse("90%").unwrap();
        assert_eq!(split_per_layer(&f, 691, 768, &[32]), vec![29]);
        assert_eq!(split_per_layer(&Budget::Units(77), 77, 768, &[32]), vec![3]);
        assert_eq!(Budget::parse("12.5%").unwrap().to_string(), "12.5%");
    }
}
