//! The registry of mechanism spec forms: every form `--policy` accepts, with its summary,
//! whether it reads a profile trace, and its constructor. The spec parser looks forms up here,
//! the `--help` text of `sim run --policy` is generated from it, and a test checks that
//! README.md names the same set of forms.
//!
//! A form's name writes its parameter as a capital letter (`N` experts per chunk, `R` MiB per
//! region); forms without one (`os4k`) are matched whole.

use super::{ChunkOrder, MechanismSpec, OsPages, Packing, Region};

/// One spec form.
#[derive(Clone, Copy, Debug)]
pub struct MechanismForm {
    /// The form as written, e.g. `eN:hot`, `region:R:index`, `os4k`.
    pub name: &'static str,
    /// Other spellings of the same form: `eN` for `eN:hot`, `region:R` for `region:R:index`.
    pub aliases: &'static [&'static str],
    /// What the form lays out, in one line.
    pub summary: &'static str,
    /// True when the form orders experts by a profile trace (the evaluated trace itself unless
    /// `--profile-trace` names another). `e1` never does: one expert per chunk has no order.
    pub needs_profile: bool,
    /// The mechanism for the form's parameter (N or R, already checked by the parser; 0 for
    /// forms without a parameter).
    pub construct: fn(u64) -> MechanismSpec,
}

impl MechanismForm {
    /// The name, then the aliases.
    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.name).chain(self.aliases.iter().copied())
    }

    /// True when the form has a parameter (N or R) rather than being matched whole.
    pub fn has_param(&self) -> bool {
        self.name.bytes().any(|b| b.is_ascii_uppercase())
    }
}

/// Every mechanism spec form, by family (chunks, regions, OS pages), orders in the order the
/// error messages list them.
pub const MECHANISM_FORMS: &[MechanismForm] = &[
    MechanismForm {
        name: "eN:index",
        aliases: &[],
        summary: "N experts of one MoE layer per VMM chunk, in expert-id order \
                  (e1: one expert per commit)",
        needs_profile: false,
        construct: |n| packing(n, ChunkOrder::Index),
    },
    MechanismForm {
        name: "eN:hot",
        aliases: &["eN"],
        summary: "N experts of one MoE layer per VMM chunk, most selected first in the \
                  profile trace",
        needs_profile: true,
        construct: |n| packing(n, ChunkOrder::Hot),
    },
    MechanismForm {
        name: "eN:coact",
        aliases: &[],
        summary: "N experts of one MoE layer per VMM chunk, experts often selected together \
                  in the profile trace sharing a chunk",
        needs_profile: true,
        construct: |n| packing(n, ChunkOrder::Coact),
    },
    MechanismForm {
        name: "region:R:index",
        aliases: &["region:R"],
        summary: "R MiB regions, experts packed whole in layer-major expert-id order \
                  (a region may span layers)",
        needs_profile: false,
        construct: |mib| region(mib, ChunkOrder::Index),
    },
    MechanismForm {
        name: "region:R:hot",
        aliases: &[],
        summary: "R MiB regions, each layer's experts most selected first in the profile trace",
        needs_profile: true,
        construct: |mib| region(mib, ChunkOrder::Hot),
    },
    MechanismForm {
        name: "os4k",
        aliases: &[],
        summary: "4 KiB OS pages (managed memory), each expert its own run of pages",
        needs_profile: false,
        construct: |_| os_pages(4 << 10),
    },
    MechanismForm {
        name: "os64k",
        aliases: &[],
        summary: "64 KiB OS pages",
        needs_profile: false,
        construct: |_| os_pages(64 << 10),
    },
    MechanismForm {
        name: "os2m",
        aliases: &[],
        summary: "2 MiB OS pages",
        needs_profile: false,
        construct: |_| os_pages(2 << 20),
    },
];

fn packing(n: u64, order: ChunkOrder) -> MechanismSpec {
    MechanismSpec::Packing(Packing { n: n as u32, order })
}

fn region(mib: u64, order: ChunkOrder) -> MechanismSpec {
    MechanismSpec::Region(Region { mib, order })
}

fn os_pages(page_bytes: u64) -> MechanismSpec {
    MechanismSpec::OsPages(OsPages { page_bytes })
}

/// The form named `name` (its name or an alias), e.g. `eN` gives the `eN:hot` form.
pub fn form(name: &str) -> Option<&'static MechanismForm> {
    MECHANISM_FORMS
        .iter()
        .find(|f| f.names().any(|n| n == name))
}

/// The forms as `--help` lists them: `eN:index: summary; eN:hot (or eN): summary [profile
/// trace]; ...`.
pub fn forms_help() -> String {
    MECHANISM_FORMS
        .iter()
        .map(|f| {
            let mut s = f.name.to_string();
            for a in f.aliases {
                s += &format!(" (or {a})");
            }
            s += &format!(": {}", f.summary);
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The forms in short, for flag help: consecutive forms of one family merge their orders
/// (`eN[:index|hot|coact], region:R[:index|hot], os4k, os64k, os2m`).
pub fn forms_short() -> String {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for f in MECHANISM_FORMS {
        let (family, order) = match f.name.rsplit_once(':') {
            Some((family, order)) if family.contains(char::is_uppercase) => (family, Some(order)),
            _ => (f.name, None),
        };
        match (out.last_mut(), order) {
            (Some((last, orders)), Some(o)) if last == family && !orders.is_empty() => {
                orders.push(o)
            }
            _ => out.push((family.to_string(), order.into_iter().collect())),
        }
    }
    out.iter()
        .map(|(family, orders)| match orders.as_slice() {
            [] => family.clone(),
            o => format!("{family}[:{}]", o.join("|")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanisms::{parse, Mechanism, ACCEPTED_FORMS};

    /// A form with its parameter filled in: N = 2 (so the order matters), R = 64.
    fn example(name: &str) -> String {
        name.replace('N', "2").replace('R', "64")
    }

    #[test]
    fn every_form_parses_to_its_constructor_and_states_its_profile_need() {
        for f in MECHANISM_FORMS {
            for n in f.names() {
                let spec = parse(&example(n)).unwrap();
                let param = if n.contains('N') {
                    2
                } else if n.contains('R') {
                    64
                } else {
                    0
                };
                let built = (f.construct)(param);
                assert_eq!(spec.spec(), built.spec(), "{n}");
                assert_eq!(spec.needs_profile(), f.needs_profile, "{n}");
                assert_eq!(built.needs_profile(), f.needs_profile, "{n}");
            }
            assert_eq!(f.has_param(), f.name != example(f.name));
        }
    }

    #[test]
    fn names_are_unique_and_os_page_sizes_are_forms() {
        let mut all: Vec<&str> = MECHANISM_FORMS.iter().flat_map(|f| f.names()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a form name or alias is repeated");
        for (name, bytes) in OsPages::SIZES {
            let f = form(name).unwrap_or_else(|| panic!("{name} is not a registered form"));
            assert_eq!((f.construct)(0), os_pages(bytes));
        }
    }

    /// The error messages' summary of the forms must name every order and every fixed form.
    #[test]
    fn accepted_forms_names_every_form() {
        for f in MECHANISM_FORMS {
            let word = if f.has_param() {
                f.name.rsplit(':').next().unwrap()
            } else {
                f.name
            };
            assert!(ACCEPTED_FORMS.contains(word), "{} ({word})", f.name);
        }
    }

    #[test]
    fn help_lists_every_form() {
        let h = forms_help();
        for n in MECHANISM_FORMS.iter().flat_map(|f| f.names()) {
            assert!(h.contains(n), "{n}: {h}");
        }
    }

    /// The forms README.md lists after `<!-- registry: mechanisms -->` (up to
    /// `<!-- /registry -->`), with `x[:a|b]` standing for `x`, `x:a` and `x:b`.
    fn readme_forms() -> Vec<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let text = std::fs::read_to_string(path).expect("README.md is readable");
        let start = text
            .find("<!-- registry: mechanisms -->")
            .expect("README.md has the marker <!-- registry: mechanisms -->");
        let rest = &text[start..];
        let list = &rest[..rest
            .find("<!-- /registry -->")
            .expect("README.md closes the mechanism list with <!-- /registry -->")];
        let mut forms = Vec::new();
        for (i, span) in list.split('`').enumerate() {
            if i % 2 == 0 {
                continue; // outside backticks
            }
            match span.split_once("[:") {
                Some((base, alts)) => {
                    forms.push(base.to_string());
                    let alts = alts.strip_suffix(']').expect("`x[:a|b]` closes with ]");
                    forms.extend(alts.split('|').map(|a| format!("{base}:{a}")));
                }
                None => forms.push(span.to_string()),
            }
        }
        forms.sort();
        forms.dedup();
        forms
    }

    #[test]
    fn readme_names_the_registered_forms() {
        let mut registered: Vec<String> = MECHANISM_FORMS
            .iter()
            .flat_map(|f| f.names())
            .map(str::to_string)
            .collect();
        registered.sort();
        assert_eq!(
            readme_forms(),
            registered,
            "README.md's mechanism list differs from policies::mechanisms::MECHANISM_FORMS"
        );
    }

    #[test]
    fn short_forms_merge_the_orders_of_a_family() {
        assert_eq!(
            forms_short(),
            "eN[:index|hot|coact], region:R[:index|hot], os4k, os64k, os2m"
        );
    }
}
