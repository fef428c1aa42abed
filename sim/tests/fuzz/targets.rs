//! Fuzz targets: what every input of a fuzzing run is fed to, and the oracle that judges what
//! the code under test accepted. Shared by the bounded stable run (`tests/fuzz_smoke.rs`) and
//! the `cargo fuzz` targets of `fuzz/`, which include this file by path.
//!
//! A target returns `Ok(true)` when the input was accepted and the result passed the oracle,
//! `Ok(false)` when it was refused with an error (the expected outcome of most inputs), and
//! `Err(why)` when it was accepted but the result breaks a rule of the format: a file wrongly
//! accepted. A panic is a crash; the drivers catch and count both.

use std::collections::HashSet;
use traces::{Header, PhaseSel, Trace, TraceError};

/// A target: accepted (and passing the oracle), refused, or wrongly accepted (`Err`).
pub type Target = fn(&[u8]) -> Result<bool, String>;

/// Every target, by the name the drivers and `fuzz/` use.
pub const TARGETS: [(&str, Target); 7] = [
    ("trace-reader", trace_reader),
    ("header-decoder", header_decoder),
    ("import-onnx-genai-json", import_onnx),
    ("import-csv", import_csv),
    ("import-jsonl", import_jsonl),
    ("import-oracle-general", import_oracle_general),
    ("cli-values", cli_values),
];

/// The streaming reader and the whole-trace loader on a file's bytes.
pub fn trace_reader(data: &[u8]) -> Result<bool, String> {
    match traces::read_bytes(data, "fuzz.bin") {
        Ok(t) => check_trace(&t).map(|()| true),
        Err(e) => no_debug_text(&e).map(|()| false),
    }
}

/// The header decoder and the geometry check that follows it, on header bytes read as every
/// format version. An accepted header must pass the independent geometry rules, give a layout
/// without overflow, and encode back to bytes that decode to the same header.
pub fn header_decoder(data: &[u8]) -> Result<bool, String> {
    let mut accepted = false;
    for version in traces::format::OLDEST_VERSION..=traces::format::VERSION {
        accepted |= header_decoder_as(data, version)?;
    }
    Ok(accepted)
}

fn header_decoder_as(data: &[u8], version: u32) -> Result<bool, String> {
    let h = match traces::format::decode_header(data, version, "fuzz-header") {
        Ok(h) => h,
        Err(e) => return no_debug_text(&e).map(|()| false),
    };
    if let Err(e) = traces::format::validate_geometry(&h.model, "fuzz-header") {
        return no_debug_text(&e).map(|()| false);
    }
    check_geometry(&h)?;
    let _ = traces::format::Layout::of(&h);
    let bytes = traces::format::encode_header(&h)
        .map_err(|e| format!("accepted, not re-encodable: {e}"))?;
    let back = traces::format::decode_header(&bytes, traces::format::version_for(&h), "re-encoded")
        .map_err(|e| e.to_string())?;
    if back != h {
        return Err("the header does not survive re-encoding".into());
    }
    Ok(true)
}

fn import_onnx(data: &[u8]) -> Result<bool, String> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(false);
    };
    let opts = traces::ImportOptions::default();
    match traces::import_onnx::parse_onnx_genai_json(text, "fuzz.json", &opts) {
        Ok(imp) => {
            check_trace(&imp.all)?;
            for (_, t) in &imp.prompts {
                check_trace(t)?;
            }
            Ok(true)
        }
        Err(e) => no_debug_text(&e).map(|()| false),
    }
}

fn import_csv(data: &[u8]) -> Result<bool, String> {
    let opts = traces::RowImportOptions::default();
    imported(traces::import_rows::parse_csv(data, "fuzz.csv", &opts))
}

fn import_jsonl(data: &[u8]) -> Result<bool, String> {
    let opts = traces::RowImportOptions::default();
    imported(traces::import_rows::parse_jsonl(data, "fuzz.jsonl", &opts))
}

fn imported(r: Result<Trace, TraceError>) -> Result<bool, String> {
    match r {
        Ok(t) => check_trace(&t).map(|()| true),
        Err(e) => no_debug_text(&e).map(|()| false),
    }
}

/// libCacheSim oracleGeneral records: accepted input is whole 24-byte records that write back
/// to the same bytes.
fn import_oracle_general(data: &[u8]) -> Result<bool, String> {
    match traces::export::parse_oracle_general(data) {
        Ok(records) => {
            let back: Vec<u8> = records.iter().flat_map(|r| r.to_bytes()).collect();
            if back != data {
                return Err(format!(
                    "{} records read from {} bytes do not write back to them",
                    records.len(),
                    data.len()
                ));
            }
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}

/// A command line of `sim`, one argument per line (`trace`, `import`, `--format`, `csv`, ...):
/// parsed by the binary's command tree (`sim::cli::command`) and extracted into its typed
/// arguments as `main` does, for every subcommand, so that a flag read with a type other than
/// its parser's (a panic) is found whatever subcommand holds it. A `sim run` line that parses
/// also runs, with the configuration the binary builds from it, on a small generated trace.
/// Accepted means the line parsed (and, for `sim run`, the run completed).
pub fn cli_values(data: &[u8]) -> Result<bool, String> {
    use clap::FromArgMatches;
    static TREE: std::sync::OnceLock<clap::Command> = std::sync::OnceLock::new();
    let text = String::from_utf8_lossy(data);
    let argv = std::iter::once("sim").chain(text.split('\n'));
    let tree = TREE.get_or_init(sim::cli::command).clone();
    let Ok(matches) = tree.try_get_matches_from(argv) else {
        return Ok(false);
    };
    match sim::cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => match cli.command {
            sim::cli::Command::Run(args) => Ok(run_tiny(&args)),
            _ => Ok(true),
        },
        Err(_) => Ok(false),
    }
}

/// `sim run`'s configuration from `args`, run on [`tiny_workload`] instead of the trace named;
/// false when refused. Profiles are read only by shipped name (a path could name any file of
/// the machine) and no timeline file is written.
fn run_tiny(args: &sim::cmd::run::RunArgs) -> bool {
    let t = &args.timing;
    let path = |p: &Option<String>| p.as_deref().is_some_and(|s| s.contains(['/', '\\']));
    if path(&t.hw) || path(&t.hw_host) {
        return false;
    }
    let Ok(mut cfg) = sim::cmd::run::config(args) else {
        return false;
    };
    // A run's work grows linearly with the pages an expert size makes (16 x 16,384 4 KiB
    // pages at 64 MiB here): larger sizes would only slow the fuzzer down, and their limits
    // are tested in unit_limits.rs.
    if cfg.sizes.expert_mib.is_some_and(|x| x > 64.0) {
        return false;
    }
    if let Some(timing) = &mut cfg.timing {
        timing.timeline = None;
    }
    sim::runner::run(&cfg, tiny_workload()).is_ok()
}

/// A small generated trace, made once: 2 MoE layers of 8 experts, top-2, 3 MiB experts at
/// bf16 (hidden 1024, FFN 512), 2 sequences of 4 tokens; small enough that a run with 4 KiB
/// pages takes milliseconds, so the values, not the trace, make an input slow.
fn tiny_workload() -> &'static sim::runner::Workload {
    static W: std::sync::OnceLock<sim::runner::Workload> = std::sync::OnceLock::new();
    W.get_or_init(|| {
        let mut model = traces::ModelSpec::uniform("tiny", 2, 8, 2);
        model.hidden_size = Some(1024);
        model.expert_ffn = Some(512);
        let params = traces::gen::GenParams {
            preset: None,
            skew: vec![1.0],
            locality: vec![0.3],
            cross_layer: 0.0,
            sequences: 2,
            tokens: 4,
            seed: 1,
            fitted_to: None,
            always_on: Vec::new(),
            archetypes: None,
        };
        let trace = traces::gen::generate_trace(&model, &params).unwrap();
        let input = sim::runner::TraceInput {
            label: "tiny".into(),
            trace,
        };
        sim::runner::Workload::new(input, None).unwrap()
    })
}

/// An error message must be words: bincode's and serde's debug forms name Rust types.
fn no_debug_text(e: &TraceError) -> Result<(), String> {
    let m = e.to_string();
    for debug in [
        "Utf8Error",
        "UnexpectedEnd {",
        "InvalidIntegerType",
        "{ inner",
    ] {
        if m.contains(debug) {
            return Err(format!("an error prints Rust debug text: {m}"));
        }
    }
    Ok(())
}

/// The oracle for an accepted trace, independent of the reader: the geometry rules, every
/// selection distinct and in range, the weights present exactly when declared, and a writer
/// round trip that reads back the same trace.
pub fn check_trace(t: &Trace) -> Result<(), String> {
    check_geometry(&t.header)?;
    let moe: Vec<(u16, u16)> = t
        .header
        .model
        .layers
        .iter()
        .filter(|l| l.experts > 0)
        .map(|l| (l.experts, l.top_k))
        .collect();
    let per_token: usize = moe.iter().map(|&(_, k)| k as usize).sum();
    if t.sequences.len() != t.header.sequences.len() {
        return Err("sequence count differs from the header's".into());
    }
    for (s, (data, info)) in t.sequences.iter().zip(&t.header.sequences).enumerate() {
        for (block, n) in [
            (&data.prefill, info.prefill_tokens),
            (&data.decode, info.decode_tokens),
        ] {
            if block.ids.len() as u128 != n as u128 * per_token as u128 {
                return Err(format!(
                    "sequence {s}: {} ids for {n} tokens",
                    block.ids.len()
                ));
            }
            if block.weights.as_ref().map(|w| w.len())
                != t.header.has_weights.then_some(block.ids.len())
            {
                return Err(format!("sequence {s}: weights disagree with has_weights"));
            }
            for token in block.ids.chunks(per_token.max(1)) {
                let mut at = 0;
                for &(experts, k) in &moe {
                    let sel = &token[at..at + k as usize];
                    at += k as usize;
                    let distinct: HashSet<u16> = sel.iter().copied().collect();
                    if distinct.len() != sel.len() || sel.iter().any(|&e| e >= experts) {
                        return Err(format!(
                            "sequence {s}: selection {sel:?} of {experts} experts"
                        ));
                    }
                }
            }
        }
    }
    round_trip(t)
}

fn check_geometry(h: &Header) -> Result<(), String> {
    let m = &h.model;
    // FORMAT.md's geometry rules: dense, MoE but not recorded (experts, top-k 0; refused in
    // version-1 files by the decoder, which format_refusals.rs checks), or 1 <= top-k <=
    // experts; at least one layer with recorded selections
    if m.layers.len() > 1 << 16 || !m.layers.iter().any(|l| l.top_k >= 1) {
        return Err(format!(
            "{} layers, none recorded, accepted",
            m.layers.len()
        ));
    }
    for l in &m.layers {
        let ok = l.top_k == 0 || l.top_k <= l.experts;
        if !ok {
            return Err(format!("layer {l:?} accepted"));
        }
    }
    if m.expert_matrices == 0 {
        return Err("0 expert matrices accepted".into());
    }
    if m.hidden_size == Some(0) || m.expert_ffn == Some(0) || m.shared_expert_ffn == Some(0) {
        return Err("a size of 0 accepted".into());
    }
    if let (Some(h), Some(f)) = (m.hidden_size, m.expert_ffn) {
        if (3u128 * h as u128 * f as u128) > u64::MAX as u128 {
            return Err("3 x hidden x FFN over 64 bits accepted".into());
        }
    }
    Ok(())
}

/// Write `t` and read it back: the same trace, or the accepted input was not a valid trace.
fn round_trip(t: &Trace) -> Result<(), String> {
    if t.total_tokens(PhaseSel::All) > 100_000 {
        return Ok(()); // large accepted inputs are checked above; skip the file round trip
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("rt.bin");
    traces::write_file(&path, t)
        .map_err(|e| format!("accepted, but the writer refuses it: {e}"))?;
    let back = traces::read_file(&path).map_err(|e| format!("rewritten, unreadable: {e}"))?;
    if back.header != t.header || back.sequences.len() != t.sequences.len() {
        return Err("the round trip changed the header".into());
    }
    for (a, b) in back.sequences.iter().zip(&t.sequences) {
        let same_w = |x: &Option<Vec<f32>>, y: &Option<Vec<f32>>| match (x, y) {
            (Some(x), Some(y)) => x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits()),
            (None, None) => true,
            _ => false,
        };
        if a.prefill.ids != b.prefill.ids
            || a.decode.ids != b.decode.ids
            || !same_w(&a.prefill.weights, &b.prefill.weights)
            || !same_w(&a.decode.weights, &b.decode.weights)
        {
            return Err("the round trip changed the payload".into());
        }
    }
    Ok(())
}
