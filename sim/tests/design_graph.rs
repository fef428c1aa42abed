//! docs/DESIGN.md's crate table against the workspace's real dependency graph: the table
//! between `<!-- crate-graph ... -->` and `<!-- /crate-graph -->` must name every workspace
//! crate once, with exactly the workspace crates it depends on (normal dependencies, as
//! `cargo metadata` reports them).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The crate table of DESIGN.md: crate -> workspace crates it depends on.
fn documented() -> Graph {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let text = std::fs::read_to_string(format!("{root}/docs/DESIGN.md")).unwrap();
    let start = text
        .find("<!-- crate-graph")
        .expect("DESIGN.md has a crate-graph marker");
    let end = text
        .find("<!-- /crate-graph -->")
        .expect("and its end marker");
    let name = |cell: &str| cell.trim().trim_matches('`').to_string();
    let mut graph = Graph::new();
    for line in text[start..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').collect();
        let deps = cells[2]
            .split(',')
            .map(name)
            .filter(|d| !d.is_empty())
            .collect();
        let krate = name(cells[1]);
        assert!(graph.insert(krate.clone(), deps).is_none(), "{krate} twice");
    }
    graph
}

/// The workspace's graph from `cargo metadata` (workspace crates only, normal dependencies).
fn actual() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let members: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|d| members.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn design_md_crate_table_matches_cargo_metadata() {
    let (doc, real) = (documented(), actual());
    assert_eq!(
        doc, real,
        "docs/DESIGN.md's crate table (left) differs from cargo metadata (right): update the table"
    );
}

#[test]
fn the_parser_sees_a_missing_dependency() {
    // the check is not vacuous: the table names several crates, some with dependencies
    let doc = documented();
    assert!(doc.len() >= 7, "{doc:?}");
    assert!(doc["sim"].contains("policies") && doc["traces"].is_empty());
}
