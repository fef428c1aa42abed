//! A generated trace stored before the generator gained options (the golden corpus's 4-token
//! granite fit) regenerates byte for byte from the parameters its own header records: new
//! generator options that are left unset change neither the random stream nor the header.

use std::path::Path;
use traces::gen::{write_trace, GenParams};

#[test]
fn a_stored_generated_trace_regenerates_byte_for_byte() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let stored = root.join("sim/tests/fixtures/golden/inputs/granite-fit-4tok.bin");
    let header = traces::read_header(&stored).unwrap();
    let json = header
        .provenance
        .generator
        .as_deref()
        .expect("a generated trace");
    let params: GenParams = serde_json::from_str(json).unwrap();
    assert!(params.archetypes.is_none() && !json.contains("archetypes"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("again.bin");
    write_trace(&out, &header.model, &params).unwrap();
    assert!(std::fs::read(&stored).unwrap() == std::fs::read(&out).unwrap());
}
