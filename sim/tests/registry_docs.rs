//! The docs name the same retention policies (and predictors, import formats) as the
//! registries. A doc marks a list with `<!-- registry: KIND -->` before it and
//! `<!-- /registry -->` after it (KIND: `retention`, `predictor` or `import-format`). Inside,
//! a table row (a line starting with `|`) names its first cell's backticked name, header and
//! separator rows name nothing; any other line names every backticked word that can be a
//! registry name (lower case letters, digits and `-`, not starting with `-`: `--seed` is
//! not one).

use std::collections::BTreeSet;

const START: &str = "<!-- registry: ";
const END: &str = "<!-- /registry -->";

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Backticked spans of `text`.
fn ticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Every marked list of `doc`: (kind, names, line of the marker).
fn marked_lists(doc: &str) -> Vec<(String, BTreeSet<String>, usize)> {
    let mut out = Vec::new();
    let mut rest = doc;
    let mut offset = 0;
    while let Some(i) = rest.find(START) {
        let after = &rest[i + START.len()..];
        let close = after.find("-->").expect("a registry marker ends with -->");
        let kind = after[..close].trim().to_string();
        let body_start = i + START.len() + close + 3;
        let end = rest[body_start..]
            .find(END)
            .unwrap_or_else(|| panic!("the `{kind}` list has no {END}"));
        let body = &rest[body_start..body_start + end];
        let mut names = BTreeSet::new();
        for line in body.lines() {
            let line = line.trim_start();
            let spans: Vec<&str> = if line.starts_with('|') {
                let first = line.trim_start_matches('|').split('|').next().unwrap_or("");
                ticked(first).take(1).collect()
            } else {
                ticked(line).collect()
            };
            names.extend(spans.into_iter().filter(|s| is_name(s)).map(String::from));
        }
        let line = doc[..offset + i].matches('\n').count() + 1;
        out.push((kind, names, line));
        offset += body_start + end + END.len();
        rest = &doc[offset..];
    }
    out
}

/// The mechanism forms' list: its entries are patterns (`eN[:index|hot|coact]`), expanded and
/// checked against the forms registry by `policies/src/mechanisms/registry.rs`'s tests.
const MECHANISMS: &str = "mechanisms";

/// The registry names of a kind.
fn registry(kind: &str) -> BTreeSet<String> {
    let names: Vec<&str> = match kind {
        "retention" => policies::retention::POLICIES
            .iter()
            .map(|e| e.name)
            .collect(),
        "predictor" => sim::engine::predict::PREDICTORS
            .iter()
            .map(|e| e.name)
            .collect(),
        "import-format" => traces::IMPORT_FORMATS.iter().map(|f| f.name).collect(),
        other => panic!("unknown registry kind `{other}` in a `{START}` marker"),
    };
    names.into_iter().map(String::from).collect()
}

fn check(path: &str, required: &[&str]) {
    let full = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(&full).unwrap();
    let lists = marked_lists(&doc);
    for kind in required {
        assert!(
            lists.iter().any(|(k, _, _)| k == kind),
            "{path} has no `{START}{kind} -->` list"
        );
    }
    for (kind, names, line) in lists {
        if kind == MECHANISMS {
            continue;
        }
        let want = registry(&kind);
        let missing: Vec<_> = want.difference(&names).collect();
        let extra: Vec<_> = names.difference(&want).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{path}:{line}: the `{kind}` list names {names:?}, the registry {want:?}: \
             missing from the doc {missing:?}, not in the registry {extra:?}"
        );
    }
}

#[test]
fn readme_names_the_registered_policies() {
    check("README.md", &["retention"]);
}

#[test]
fn run_guide_names_the_registered_policies() {
    check("docs/guide/run.md", &["retention"]);
}

#[test]
fn format_md_names_the_registered_import_formats() {
    check("traces/FORMAT.md", &["import-format"]);
}

#[test]
fn retention_md_names_the_registered_policies() {
    check("policies/RETENTION.md", &["retention"]);
}

#[test]
fn design_md_names_the_registered_predictors() {
    check("docs/DESIGN.md", &["predictor"]);
}

#[test]
fn every_kind_has_a_registry() {
    for kind in ["retention", "predictor", "import-format"] {
        assert!(!registry(kind).is_empty(), "{kind}");
    }
}

#[test]
fn marked_lists_are_read_from_tables_and_prose() {
    let doc = "x\n<!-- registry: retention -->\n| policy | victim |\n|---|---|\n\
               | `lru` | `a-b` |\n| `fifo` | b |\n<!-- /registry -->\n\
               Policies: <!-- registry: retention -->`lru` (`--seed`, `25%`),\n\
               `s3fifo`<!-- /registry -->. `arc`";
    let lists = marked_lists(doc);
    assert_eq!(lists.len(), 2);
    let names = |i: usize| lists[i].1.iter().cloned().collect::<Vec<_>>();
    assert_eq!(lists[0].2, 2);
    assert_eq!(names(0), ["fifo", "lru"]);
    assert_eq!(names(1), ["lru", "s3fifo"]);
}
