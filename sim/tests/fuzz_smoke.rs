//! A bounded fuzzing run on the stable toolchain, one test per target of `fuzz/targets.rs`:
//! the trace reader, the header decoder, every importer and command lines of every
//! subcommand (the `cli-values` target: parsed and extracted as the binary does; `sim run`'s
//! also run).
//!
//! Each test mutates a corpus seeded from the bundled traces (and inputs derived from them: the
//! CSV, JSON Lines and oracleGeneral exports, the onnx-genai source) for `FUZZ_SECONDS` seconds
//! (default 3; `.ci/run` gives more, a long run much more), with a `Pcg64` seeded by
//! `FUZZ_SEED` (default 0), so a run is reproducible given its input count. Mutations are
//! byte-level (bit flips, interesting values, insertions, deletions, splices) and structured:
//! trace headers decoded, edited field by field and re-encoded, with both CRC-32s recomputed
//! so that the geometry, payload and id checks are reached, and text rows edited number by
//! number and line by line.
//!
//! The test fails on a crash (a panic), a hang (an input running over 10 s: a watchdog aborts
//! the process), a memory abort (a live heap above 2 GiB: the allocator refuses and the
//! process aborts) or a file wrongly accepted (see `fuzz/targets.rs`); the offending input is
//! saved under `target/fuzz-smoke/` first, and the slowest input of each target is kept there
//! too. Each test prints one line of figures.

#[path = "fuzz/targets.rs"]
mod targets;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};
use traces::Header;

/// Live heap above which an allocation is refused: 2 GiB, far above what any corpus input
/// (at most a few hundred KB) legitimately needs, well below the 24 GiB of a CI machine.
const HEAP_CAP: usize = 2 << 30;
/// An input running longer than this is a hang (the threshold).
const HANG: Duration = Duration::from_secs(10);
/// Largest input the mutator grows to, bytes.
const MAX_INPUT: usize = 1 << 20;
/// Corpus entries kept per target (seeds plus accepted mutants).
const MAX_CORPUS: usize = 256;

// ---- the guards: heap cap, hang watchdog, saved inputs --------------------------------------

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Per target: the input being run (saved when it aborts the process) and when it started.
struct Slot {
    input: Mutex<Vec<u8>>,
    started_ms: AtomicU64,
}

static SLOTS: [Slot; 7] = [const {
    Slot {
        input: Mutex::new(Vec::new()),
        started_ms: AtomicU64::new(0),
    }
}; 7];

thread_local! {
    /// Index of the target this thread runs, or usize::MAX.
    static CURRENT: Cell<usize> = const { Cell::new(usize::MAX) };
    /// True while this thread runs an input.
    static IN_TARGET: Cell<bool> = const { Cell::new(false) };
}

struct Capped;

unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
        if now > HEAP_CAP {
            LIVE.fetch_sub(l.size(), Relaxed);
            save_from_allocator(l.size());
            return std::ptr::null_mut(); // the process aborts: a memory abort
        }
        PEAK.fetch_max(now, Relaxed);
        let p = System.alloc(l);
        if p.is_null() {
            LIVE.fetch_sub(l.size(), Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static GLOBAL: Capped = Capped;

/// Per target, a file opened before its run, so that the allocator can write the input
/// without allocating.
static ABORT_FILES: Mutex<[Option<std::fs::File>; 7]> = Mutex::new([const { None }; 7]);

fn save_from_allocator(size: usize) {
    let t = CURRENT.with(|c| c.get());
    if t == usize::MAX {
        return;
    }
    if let (Ok(input), Ok(mut files)) = (SLOTS[t].input.try_lock(), ABORT_FILES.try_lock()) {
        if let Some(f) = &mut files[t] {
            let _ = f.write_all(&input);
        }
    }
    let _ = size;
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-smoke")
}

/// Open the memory-abort files and start the hang watchdog, once per process.
fn start_guards() {
    static START: Once = Once::new();
    START.call_once(|| {
        std::fs::create_dir_all(out_dir()).unwrap();
        // Panics of the code under test are counted and saved, not printed; others print.
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_TARGET.with(|c| c.get()) {
                default(info)
            }
        }));
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_millis(200));
            let now = now_ms();
            for (i, (name, _)) in targets::TARGETS.iter().enumerate() {
                let s = SLOTS[i].started_ms.load(Relaxed);
                if s != 0 && now.saturating_sub(s) > HANG.as_millis() as u64 {
                    let input = SLOTS[i].input.lock().unwrap().clone();
                    let p = out_dir().join(format!("hang-{name}.bin"));
                    let _ = std::fs::write(&p, input);
                    eprintln!(
                        "fuzz-smoke {name}: an input ran over 10 s (a hang), saved to {}",
                        p.display()
                    );
                    std::process::abort();
                }
            }
        });
    });
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ---- the corpus ------------------------------------------------------------------------------

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The bundled traces, plus a generated one with router weights and dense layers.
fn trace_seeds() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "traces/data/granite/prose.bin",
        "traces/data/granite/math.bin",
        "sim/tests/fixtures/golden/inputs/granite-fit-4tok.bin",
        "validate/data/validation/qwen3-30b-a3b.trace",
    ]
    .iter()
    .map(|p| std::fs::read(root().join(p)).unwrap())
    .collect();
    let mut t = traces::read_bytes(&v[2], "tiny").unwrap();
    t.header.has_weights = true;
    for s in &mut t.sequences {
        s.decode.weights = Some(s.decode.ids.iter().map(|&i| i as f32 / 7.0).collect());
        s.prefill.weights = Some(s.prefill.ids.iter().map(|&i| -(i as f32)).collect());
    }
    t.header.model.layers.insert(
        0,
        traces::LayerSpec {
            experts: 0,
            top_k: 0,
            shared_experts: 0,
        },
    );
    v.push(trace_bytes(&t));
    v
}

fn trace_bytes(t: &traces::Trace) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.bin");
    traces::write_file(&p, t).unwrap();
    std::fs::read(p).unwrap()
}

fn header_len(f: &[u8]) -> Option<usize> {
    Some(u32::from_le_bytes(f.get(12..16)?.try_into().ok()?) as usize)
}

fn csv_of(bin: &[u8]) -> Vec<u8> {
    let mut r = traces::TraceReader::from_reader(bin, bin.len() as u64, "seed").unwrap();
    let mut out = Vec::new();
    traces::export::export_csv(&mut r, traces::PhaseSel::All, &mut out).unwrap();
    out
}

/// JSON Lines rows from CSV rows (`sequence,phase,token,layer,experts[,weights]`).
fn jsonl_of(csv: &[u8]) -> Vec<u8> {
    let mut rdr = csv::Reader::from_reader(csv);
    let mut out = String::new();
    for r in rdr.records() {
        let r = r.unwrap();
        let nums = |s: &str| s.split(' ').collect::<Vec<_>>().join(",");
        out.push_str(&format!(
            "{{\"sequence\":\"{}\",\"phase\":\"{}\",\"token\":{},\"layer\":{},\"experts\":[{}]{}}}\n",
            &r[0],
            &r[1],
            &r[2],
            &r[3],
            nums(&r[4]),
            r.get(5).map(|w| format!(",\"weights\":[{}]", nums(w))).unwrap_or_default()
        ));
    }
    out.into_bytes()
}

/// The onnx-genai source trace, and a copy cut to its first prompt and three positions.
fn onnx_seeds() -> Vec<Vec<u8>> {
    let path = root().join("traces/data/granite/source/moe_expert_trace.json");
    let full = std::fs::read(path).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&full).unwrap();
    let prompts = doc["prompts"].as_object_mut().unwrap();
    let first = prompts.keys().next().unwrap().clone();
    prompts.retain(|k, _| *k == first);
    let p = &mut prompts[&first];
    for phase in ["prefill", "decode"] {
        p[phase].as_array_mut().unwrap().truncate(3);
    }
    p["prompt_len"] = p["prefill"].as_array().unwrap().len().into();
    vec![serde_json::to_vec(&doc).unwrap(), full]
}

/// Command lines of every subcommand, one argument per line, each of which parses.
fn value_seeds() -> Vec<Vec<u8>> {
    [
        "run\n--policy\ne1\n--evict\nlru\n--budget\n25%\n--semantics\ngroup",
        "run\n--policy\nos4k\n--evict\nlfu\n--budget\n10\n--dram\n50%",
        "run\n--policy\nregion:16\n--evict\nbelady\n--budget\n24MiB\n--expert-mib\n3",
        "run\n--policy\ne4:coact\n--evict\ns3fifo\n--budget\n50%\n--semantics\naccess",
        "run\n--policy\ne2:hot\n--evict\nstatic-pin\n--budget\n3\n--batch\n2\n--queue\n2",
        "run\n--policy\ne8\n--evict\npin-lru\n--budget\n75%\n--hw\nh200-linux\n--predictor\nnext-layer",
        "run\n--policy\ne1\n--verify\n2\n--accepted\n1\n--phase\nall\n--dtype\nint4",
        "sweep\n--policies\ne1,e2\n--budget\n25%\n--window\n1,2\n--format\ncsv",
        "trace\nimport\n--format\ncsv\nx.csv\n--out\no\n--unrecorded-layers\n24-47\n--num-experts\n60\n--map\nsequence=req_id,experts=topk_ids\n--where\ntype=route",
        "trace\nimport\n--format\nvllm-routed-experts\nx.json\n--out\no\n--prompt-tokens\n4\n--shared-experts\n1\n--expert-matrices\n2",
        "trace\nexport\n--format\noracle-general\nt.bin\n--out\n-\n--object-size\n4096",
        "trace\nstats\nt.bin\n--phase\nall\n--json",
        "trace\ngen\n--out\ng.bin\n--layers\n2\n--experts\n8\n--top-k\n2\n--skew\n1.0\n--locality\n0.3\n--tokens\n4",
        "profile\nunion-curve\n--hw\nh200-linux\n--slots\n60\n--distinct\n1,2",
        "profile\ncheck-churn\n--seed\n3\n--overlap",
        "calibrate\n--out\np.json\n--quick\n--only\nkernels\n--seed\n7",
        "validate\n--policy\ne1,e4\n--steps\n12\n--repeat\n3\n--warm-up\nauto",
        "compare\n--trace\nt.bin\n--out\nr\n--shard\n0/2\n--budget\n25%",
        "plan\n--hw\nh200-linux\n--context\n128\n--batch\n4",
        "report\n--merge\nr0\nr1\n--out\nr",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let bins = trace_seeds();
    match target {
        "trace-reader" => bins,
        "header-decoder" => bins
            .iter()
            .map(|f| f[20..20 + header_len(f).unwrap()].to_vec())
            .collect(),
        "import-onnx-genai-json" => onnx_seeds(),
        "import-csv" => vec![csv_of(&bins[2]), csv_of(&bins[4]), csv_of(&bins[0])],
        "import-jsonl" => vec![jsonl_of(&csv_of(&bins[2])), jsonl_of(&csv_of(&bins[4]))],
        "import-oracle-general" => {
            let t = traces::read_bytes(&bins[2], "tiny").unwrap();
            let recs =
                traces::export::oracle_general_records(&t, traces::PhaseSel::All, 1).unwrap();
            vec![recs.iter().flat_map(|r| r.to_bytes()).collect()]
        }
        "cli-values" => value_seeds(),
        other => panic!("no seeds for {other}"),
    }
}

// ---- the mutator -----------------------------------------------------------------------------

const INTERESTING_BYTES: [u8; 10] = [0, 1, 2, 0x7f, 0x80, 0xfa, 0xfb, 0xfc, 0xfd, 0xff];
const INTERESTING_U64: [u64; 10] = [
    0,
    1,
    0xff,
    0xffff,
    0x1_0000,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    u64::MAX,
    64 << 20,
];
const TOKENS: [&str; 51] = [
    "0",
    "1",
    "-1",
    "+1",
    "65534",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "1e300",
    "1e-300",
    "NaN",
    "inf",
    "-0",
    "0x10",
    "",
    "\u{feff}",
    "\0",
    "é",
    "\"",
    ",",
    ";",
    " ",
    "[",
    "]",
    "{",
    "}",
    "null",
    "true",
    "prefill",
    "decode",
    "e0",
    "e65536",
    "region:0",
    "region:1e-9",
    "os0k",
    "100%",
    "0%",
    "200%",
    "1e18",
    "belady",
    "static-pin",
    "--budget",
    "--unrecorded-layers",
    "24-47",
    "--map",
    "--json",
    "--hw",
    "h200-linux",
];

struct Mutator {
    rng: Pcg64,
    /// (header, payload) of each trace seed, for structured header edits.
    traces: Vec<(Header, Vec<u8>)>,
}

impl Mutator {
    fn new(seed: u64, target: &str) -> Self {
        let traces = if target == "trace-reader" {
            trace_seeds()
                .iter()
                .map(|f| {
                    let t = traces::read_bytes(f, "seed").unwrap();
                    let h = header_len(f).unwrap();
                    (t.header, f[20 + h..f.len() - 4].to_vec())
                })
                .collect()
        } else {
            Vec::new()
        };
        Mutator {
            rng: Pcg64::seed_from_u64(seed),
            traces,
        }
    }

    /// A mutant of a corpus entry, by the target's kind of input.
    fn mutant(&mut self, target: &str, corpus: &[Vec<u8>]) -> Vec<u8> {
        if target == "trace-reader" && self.rng.gen_ratio(1, 3) {
            return self.structured_trace();
        }
        let mut x = corpus[self.rng.gen_range(0..corpus.len())].clone();
        let text = !matches!(
            target,
            "trace-reader" | "header-decoder" | "import-oracle-general"
        );
        for _ in 0..self.rng.gen_range(1..=4) {
            if text && self.rng.gen_bool(0.6) {
                self.text_edit(&mut x);
            } else {
                self.byte_edit(&mut x, corpus);
            }
        }
        x.truncate(MAX_INPUT);
        if target == "trace-reader" && self.rng.gen_bool(0.5) {
            fix_checksums(&mut x);
        }
        x
    }

    fn byte_edit(&mut self, x: &mut Vec<u8>, corpus: &[Vec<u8>]) {
        let r = &mut self.rng;
        let n = x.len();
        match r.gen_range(0..8) {
            0 if n > 0 => x[r.gen_range(0..n)] ^= 1 << r.gen_range(0..8),
            1 if n > 0 => x[r.gen_range(0..n)] = INTERESTING_BYTES[r.gen_range(0..10)],
            2 if n >= 8 => {
                let at = r.gen_range(0..n - 7);
                let w = [1usize, 2, 4, 8][r.gen_range(0..4)];
                let v = INTERESTING_U64[r.gen_range(0..10)].to_le_bytes();
                x[at..at + w].copy_from_slice(&v[..w]);
            }
            3 => {
                let at = r.gen_range(0..=n);
                let len = r.gen_range(1..64);
                let bytes: Vec<u8> = (0..len).map(|_| r.gen::<u8>()).collect();
                x.splice(at..at, bytes);
            }
            4 if n > 0 => {
                let at = r.gen_range(0..n);
                let end = (at + r.gen_range(1..256)).min(n);
                x.drain(at..end);
            }
            5 if n > 0 => {
                let at = r.gen_range(0..n);
                let end = (at + r.gen_range(1..256)).min(n);
                let piece = x[at..end].to_vec();
                let to = r.gen_range(0..=n);
                x.splice(to..to, piece);
            }
            6 if n > 0 => x.truncate(r.gen_range(0..n)),
            _ => {
                let other = &corpus[r.gen_range(0..corpus.len())];
                if !other.is_empty() && n > 0 {
                    let from = r.gen_range(0..other.len());
                    let len = r.gen_range(1..=(other.len() - from).min(4096));
                    let at = r.gen_range(0..n);
                    let end = (at + len).min(n);
                    x.splice(at..end, other[from..from + len].iter().copied());
                }
            }
        }
    }

    /// Replace a number, a word or a line of the text.
    fn text_edit(&mut self, x: &mut Vec<u8>) {
        let r = &mut self.rng;
        let tok = TOKENS[r.gen_range(0..TOKENS.len())].as_bytes();
        if x.is_empty() {
            x.extend_from_slice(tok);
            return;
        }
        let at = r.gen_range(0..x.len());
        match r.gen_range(0..4) {
            0 | 1 => {
                // the run of digits (or letters) around `at`
                let word = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'%' || b == b':';
                let (mut lo, mut hi) = (at, at);
                while lo > 0 && word(x[lo - 1]) {
                    lo -= 1;
                }
                while hi < x.len() && word(x[hi]) {
                    hi += 1;
                }
                x.splice(lo..hi, tok.iter().copied());
            }
            2 => {
                // delete or duplicate the line holding `at`
                let lo = x[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                let hi = x[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(x.len(), |p| at + p + 1);
                let line = x[lo..hi].to_vec();
                if r.gen_bool(0.5) {
                    x.drain(lo..hi);
                } else {
                    x.splice(hi..hi, line);
                }
            }
            _ => {
                x.splice(at..at, tok.iter().copied());
            }
        }
    }

    /// A seed trace with its header edited field by field, the payload cut or extended to the
    /// length the new header implies (most of the time), and both checksums valid.
    fn structured_trace(&mut self) -> Vec<u8> {
        let (mut h, mut payload) = self.traces[self.rng.gen_range(0..self.traces.len())].clone();
        let r = &mut self.rng;
        for _ in 0..r.gen_range(1..=3) {
            let m = &mut h.model;
            let nl = m.layers.len();
            match r.gen_range(0..9) {
                0 => {
                    let l = &mut m.layers[r.gen_range(0..nl)];
                    l.experts = [
                        0,
                        1,
                        2,
                        l.experts.wrapping_sub(1),
                        l.experts.wrapping_add(1),
                        65535,
                    ][r.gen_range(0..6)];
                }
                1 => {
                    let l = &mut m.layers[r.gen_range(0..nl)];
                    l.top_k = [
                        0,
                        1,
                        l.top_k.wrapping_sub(1),
                        l.top_k.wrapping_add(1),
                        l.experts,
                        65535,
                    ][r.gen_range(0..6)];
                }
                2 => {
                    let l = m.layers[r.gen_range(0..nl)].clone();
                    let at = r.gen_range(0..=nl);
                    m.layers.insert(at, l);
                }
                3 if nl > 1 => {
                    m.layers.remove(r.gen_range(0..nl));
                }
                4 => m.hidden_size = [None, Some(0), Some(1), Some(u32::MAX)][r.gen_range(0..4)],
                // version 3's field rides on edit 5 half of the time, keeping the edit count
                5 if r.gen_bool(0.5) => {
                    m.shared_expert_ffn =
                        [None, Some(0), Some(5632), Some(u32::MAX)][r.gen_range(0..4)]
                }
                5 => m.expert_ffn = [None, Some(0), Some(7), Some(u32::MAX)][r.gen_range(0..4)],
                6 => h.has_weights = !h.has_weights,
                7 if !h.sequences.is_empty() => {
                    let s = r.gen_range(0..h.sequences.len());
                    let v = INTERESTING_U64[r.gen_range(0..10)];
                    let seq = &mut h.sequences[s];
                    match r.gen_range(0..3) {
                        0 => seq.decode_tokens = v,
                        1 => seq.prefill_tokens = seq.prefill_tokens.wrapping_add(1),
                        _ => seq.decode_tokens = seq.decode_tokens.saturating_sub(1),
                    }
                }
                _ => {
                    let s = h.sequences.first().cloned();
                    match (r.gen_bool(0.5), s) {
                        (true, Some(s)) => h.sequences.push(s),
                        _ => {
                            h.sequences.pop();
                        }
                    }
                }
            }
        }
        let Ok(hb) = traces::format::encode_header(&h) else {
            return Vec::new();
        };
        if r.gen_bool(0.8) {
            let need = implied_payload(&h).min(MAX_INPUT as u128) as usize;
            let mut ids = (0u8..3).cycle();
            payload.resize_with(need, || ids.next().unwrap());
        }
        let mut f = Vec::new();
        f.extend_from_slice(&traces::format::MAGIC);
        f.extend_from_slice(&traces::format::VERSION.to_le_bytes());
        f.extend_from_slice(&(hb.len() as u32).to_le_bytes());
        f.extend_from_slice(&crc32fast::hash(&hb).to_le_bytes());
        f.extend_from_slice(&hb);
        f.extend_from_slice(&payload);
        f.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        f
    }
}

/// Payload bytes a header implies, computed here independently of the reader.
fn implied_payload(h: &Header) -> u128 {
    let ids: u128 = h
        .model
        .layers
        .iter()
        .filter(|l| l.experts > 0)
        .map(|l| l.top_k as u128)
        .sum();
    let tokens: u128 = h
        .sequences
        .iter()
        .map(|s| s.prefill_tokens as u128 + s.decode_tokens as u128)
        .sum();
    tokens * ids * if h.has_weights { 6 } else { 2 }
}

/// Recompute the header CRC (over the length the header field says, when the file holds it)
/// and the payload CRC (the last 4 bytes, over what lies between), so that a mutant reaches
/// the checks beyond them.
fn fix_checksums(f: &mut [u8]) {
    let Some(h) = header_len(f) else { return };
    if 20 + h + 4 > f.len() {
        return;
    }
    let crc = crc32fast::hash(&f[20..20 + h]);
    f[16..20].copy_from_slice(&crc.to_le_bytes());
    let end = f.len() - 4;
    let crc = crc32fast::hash(&f[20 + h..end]);
    f[end..].copy_from_slice(&crc.to_le_bytes());
}

// ---- the driver ------------------------------------------------------------------------------

fn budget() -> Duration {
    let secs: f64 = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

fn fuzz(target: &str) {
    start_guards();
    let (index, (_, run)) = targets::TARGETS
        .iter()
        .enumerate()
        .find(|(_, (n, _))| *n == target)
        .unwrap();
    CURRENT.with(|c| c.set(index));
    let abort_file = out_dir().join(format!("memory-abort-{target}.bin"));
    ABORT_FILES.lock().unwrap()[index] = Some(std::fs::File::create(&abort_file).unwrap());
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut corpus = seeds(target);
    let mut m = Mutator::new(seed ^ index as u64, target);
    let (mut inputs, mut accepted, mut crashes, mut wrong) = (0u64, 0u64, 0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let mut slowest_input = Vec::new();
    let deadline = Instant::now() + budget();
    // The seeds themselves first: every one must be accepted, or the mutants would not reach
    // past the first checks.
    let mut queue: Vec<Vec<u8>> = corpus.clone();
    let mut seeds_refused = 0;
    while Instant::now() < deadline || !queue.is_empty() {
        let is_seed = !queue.is_empty();
        let input = queue.pop().unwrap_or_else(|| m.mutant(target, &corpus));
        *SLOTS[index].input.lock().unwrap() = input.clone();
        SLOTS[index].started_ms.store(now_ms(), Relaxed);
        let started = Instant::now();
        IN_TARGET.with(|c| c.set(true));
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| run(&input)));
        IN_TARGET.with(|c| c.set(false));
        if started.elapsed() > slowest {
            slowest = started.elapsed();
            slowest_input.clone_from(&input);
        }
        SLOTS[index].started_ms.store(0, Relaxed);
        inputs += 1;
        if is_seed && !matches!(outcome, Ok(Ok(true))) {
            seeds_refused += 1;
        }
        let save = |what: &str, n: u64| {
            let p = out_dir().join(format!("{what}-{target}-{n}.bin"));
            std::fs::write(&p, &input).unwrap();
            p
        };
        match outcome {
            Ok(Ok(true)) => {
                accepted += 1;
                if corpus.len() < MAX_CORPUS {
                    corpus.push(input.clone());
                }
            }
            Ok(Ok(false)) => {}
            Ok(Err(why)) => {
                wrong += 1;
                eprintln!(
                    "fuzz-smoke {target}: wrongly accepted ({why}), saved to {}",
                    save("accepted", wrong).display()
                );
            }
            Err(_) => {
                crashes += 1;
                eprintln!(
                    "fuzz-smoke {target}: a panic, saved to {}",
                    save("crash", crashes).display()
                );
            }
        }
    }
    // The slowest input, to look at when it nears the hang limit.
    let _ = std::fs::write(
        out_dir().join(format!("slowest-{target}.bin")),
        &slowest_input,
    );
    // The memory-abort file stays only when it holds an input.
    ABORT_FILES.lock().unwrap()[index] = None;
    if std::fs::metadata(&abort_file).is_ok_and(|m| m.len() == 0) {
        let _ = std::fs::remove_file(abort_file);
    }
    assert_eq!(seeds_refused, 0, "{target}: a seed was refused");
    println!(
        "fuzz-smoke {target}: {inputs} inputs, {accepted} accepted, {crashes} crashes, 0 hangs > 10 s, \
         0 memory aborts, {wrong} wrongly accepted; slowest input {:.3} s, peak heap {} MiB",
        slowest.as_secs_f64(),
        PEAK.load(Relaxed) >> 20
    );
    assert_eq!((crashes, wrong), (0, 0), "{target}: see the saved inputs");
}

#[test]
fn fuzz_trace_reader() {
    fuzz("trace-reader");
}

#[test]
fn fuzz_header_decoder() {
    fuzz("header-decoder");
}

#[test]
fn fuzz_import_onnx_genai_json() {
    fuzz("import-onnx-genai-json");
}

#[test]
fn fuzz_import_csv() {
    fuzz("import-csv");
}

#[test]
fn fuzz_import_jsonl() {
    fuzz("import-jsonl");
}

#[test]
fn fuzz_import_oracle_general() {
    fuzz("import-oracle-general");
}

#[test]
fn fuzz_cli_values() {
    fuzz("cli-values");
}
