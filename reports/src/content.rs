//! What the report says: builds the [`Doc`] (text, tables, figures) from [`Results`]. A pure
//! function of its input, so regenerating from `results.json` reproduces the same bytes.
//!
//! Bounds used for "distance from the bound":
//! - streaming regime: the ideal holds and moves exactly the selected experts, top-k x expert
//!   MiB per layer step (expert MiB = `streaming.useful_mib_total` / number of keys);
//! - cache regime and timing: the Belady/MIN run of the same trace, mechanism, budget and batch.

use crate::doc::{Block, Cell, Doc};
use crate::metrics::{self, best, fmt, Better, Metric};
use crate::plots::{self, LineChart, Scale, Series};
use crate::results::{Results, RunCoords, RunEntry, TraceInfo};
use crate::run::{RunReport, TimingReport};
use policies::MechanismSpec;
use serde_json::Value;

/// Title of every report.
pub const TITLE: &str = "MoE expert paging: mechanism and policy comparison";

/// Readable label of a run: `e2:hot`, `e2:hot / lru @ 25%`, with ` x8` for batch 8.
pub fn run_label(r: &RunEntry) -> String {
    run_label_of(&r.grid)
}

/// [`run_label`] from grid coordinates alone.
pub fn run_label_of(g: &RunCoords) -> String {
    let mut s = g.mechanism.clone();
    if let Some(e) = &g.evict {
        s.push_str(" / ");
        s.push_str(e);
    }
    if let Some(b) = &g.budget {
        s.push_str(" @ ");
        s.push_str(b);
    }
    if let Some(sp) = g.split.as_deref().filter(|&sp| sp != "global") {
        s.push(' ');
        s.push_str(sp);
    }
    s
}

/// Distinct values in first-appearance order.
fn distinct<T: PartialEq + Clone>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for x in it {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// File-name-safe version of a label.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Orders two runs by the metric `get`, a run without it first (the order of
/// `Option<f64>`); JSON numbers are finite, so no two values are unordered.
fn by_metric(a: &RunEntry, b: &RunEntry, get: fn(&RunEntry) -> Option<f64>) -> std::cmp::Ordering {
    get(a)
        .partial_cmp(&get(b))
        .unwrap_or(std::cmp::Ordering::Equal)
}

/// Orders two values as [`by_metric`] orders runs (unordered values compare equal).
fn cmp_f64(a: f64, b: f64) -> std::cmp::Ordering {
    a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
}

/// `streaming.resident_mib_per_layer_step`.
fn resident_mib(r: &RunEntry) -> Option<f64> {
    Some(r.streaming()?.resident_mib_per_layer_step)
}

/// `streaming.transfer_mib_per_layer_step`.
fn transfer_mib(r: &RunEntry) -> Option<f64> {
    Some(r.streaming()?.transfer_mib_per_layer_step)
}

/// `cache.bytes_per_token`.
fn bytes_per_token(r: &RunEntry) -> Option<f64> {
    Some(r.cache()?.bytes_per_token)
}

/// `cache.budget_units`.
fn budget_units(r: &RunEntry) -> Option<f64> {
    Some(r.cache()?.budget_units as f64)
}

/// `timing.step_ms_p50`.
fn step_p50(r: &RunEntry) -> Option<f64> {
    Some(r.timing()?.step_ms_p50)
}

/// `timing.tokens_per_s`.
fn tokens_per_s(r: &RunEntry) -> Option<f64> {
    Some(r.timing()?.tokens_per_s)
}

/// Whether run `r`'s eviction policy is the offline bound (Belady/MIN: it reads the future).
fn is_belady(r: &RunEntry) -> bool {
    r.grid.evict.as_deref().is_some_and(is_offline)
}

/// Whether policy `name` is an offline policy, by the retention registry.
fn is_offline(name: &str) -> bool {
    policies::PolicyKind::parse(name).is_ok_and(|k| k.is_offline())
}

/// Expert MiB derived from a streaming block and the trace's key count.
fn expert_mib(r: &RunEntry, t: &TraceInfo) -> Option<f64> {
    let k = t.num_keys();
    (k > 0).then_some(r.streaming()?.useful_mib_total / k as f64)
}

/// Cells of one metric column for `runs`, with the best marked.
fn column(runs: &[&RunEntry], m: &Metric) -> Vec<Cell> {
    let vals: Vec<Option<f64>> = runs
        .iter()
        .map(|r| (m.get)(&r.result).map(|v| v * m.scale))
        .collect();
    let marks = best(&vals, m.better);
    vals.iter()
        .zip(marks)
        .map(|(v, b)| Cell {
            text: v.map(fmt).unwrap_or_else(|| "–".into()),
            best: b,
        })
        .collect()
}

/// A table with one row per run (first column its label) and one column per metric.
fn metric_table(
    doc: &mut Doc,
    runs: &[&RunEntry],
    ms: &[Metric],
    extra: Option<(&str, Vec<String>)>,
) {
    let ms: Vec<&Metric> = ms
        .iter()
        .filter(|m| runs.iter().any(|r| (m.get)(&r.result).is_some()))
        .collect();
    let mut header = vec!["run".to_string()];
    header.extend(ms.iter().map(|m| m.label.to_string()));
    let cols: Vec<Vec<Cell>> = ms.iter().map(|m| column(runs, m)).collect();
    if let Some((h, _)) = &extra {
        header.push(h.to_string());
    }
    let rows = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = vec![Cell::plain(run_label(r))];
            row.extend(cols.iter().map(|c| c[i].clone()));
            if let Some((_, e)) = &extra {
                row.push(Cell::plain(e[i].clone()));
            }
            row
        })
        .collect();
    doc.table(header, rows);
}

fn figure(
    doc: &mut Doc,
    file: String,
    svg: anyhow::Result<String>,
    caption: String,
) -> anyhow::Result<()> {
    doc.blocks.push(Block::Figure {
        file,
        svg: svg?,
        caption,
    });
    Ok(())
}

/// Experts per chunk and chunk order of an `eN` mechanism (plain `eN` is `hot`); `None` for
/// the other families.
fn chunk_spec(spec: &str) -> Option<(u32, String)> {
    let spec = MechanismSpec::parse(spec).ok()?;
    let p = spec.packing()?;
    Some((p.n, p.order.as_str().to_string()))
}

/// Budget given as a percentage (`25%`), as a number.
fn percent(b: &str) -> Option<f64> {
    b.strip_suffix('%')?.trim().parse().ok()
}

/// Build the whole report.
pub fn build(res: &Results) -> anyhow::Result<Doc> {
    let mut doc = Doc::default();
    doc.h(1, TITLE);
    question(&mut doc, res);
    findings(&mut doc, res);
    inputs(&mut doc, res)?;
    streaming(&mut doc, res)?;
    retention(&mut doc, res)?;
    timing(&mut doc, res)?;
    other_blocks(&mut doc, res);
    stability(&mut doc, res);
    files(&mut doc, res);
    Ok(doc)
}

fn profile_name(res: &Results) -> Option<String> {
    let p = res.profile.as_ref()?;
    Some(
        p.get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| "the given hardware profile".into()),
    )
}

fn question(doc: &mut Doc, res: &Results) {
    doc.h(2, "The question");
    let hw = profile_name(res)
        .map(|n| format!("what each costs in decode-step time on `{n}`"))
        .unwrap_or_else(|| "(no hardware profile was given, so time is not simulated)".into());
    doc.p(format!(
        "A Mixture-of-Experts model routes every token, in every MoE layer, to its top-k experts. When the experts do not all fit in GPU memory, something must decide how expert weights are committed and paged in. This report replays recorded router selections and answers: which paging mechanism holds the least GPU memory per layer and decode step, which retention policy moves the fewest bytes over PCIe per token under a VRAM budget, how far each is from the bound (the ideal of holding exactly the selected experts; Belady/MIN, the offline optimum, for retention), and {hw}."
    ));
    if let Some(s) = res.shard {
        doc.p(format!(
            "**Partial result:** this directory holds shard {}/{} ({} of {} runs). Merge all shards with `sim report --merge DIR... --out DIR` for the full comparison.",
            s.index,
            s.count,
            res.runs.len(),
            res.total_runs
        ));
    }
}

fn trace_of<'a>(res: &'a Results, name: &str) -> &'a TraceInfo {
    res.traces
        .iter()
        .find(|t| t.name == name)
        .expect("checked: runs name known traces")
}

/// Runs of `trace` evaluated with a profile trace equal to itself.
fn own<'a>(res: &'a Results, trace: &str) -> impl Iterator<Item = &'a RunEntry> + 'a {
    let trace = trace.to_string();
    res.runs
        .iter()
        .filter(move |r| r.grid.trace == trace && !r.grid.is_cross())
}

/// Per trace, one row per mechanism: memory held (streaming), the fewest bytes per token of
/// any policy at each budget with its distance from Belady, and the best tokens/s.
fn glance(doc: &mut Doc, res: &Results) {
    for t in &res.traces {
        let runs: Vec<&RunEntry> = own(res, &t.name).collect();
        if runs.is_empty() {
            continue;
        }
        // the smallest batch and the first split, so every cell compares like with like
        let batch = runs.iter().filter_map(|r| r.grid.batch).min();
        let split = runs.iter().find_map(|r| r.grid.split.clone());
        let runs: Vec<&RunEntry> = runs
            .into_iter()
            .filter(|r| r.grid.evict.is_none() || (r.grid.batch == batch && r.grid.split == split))
            .collect();
        let mechs = distinct(runs.iter().map(|r| r.grid.mechanism.clone()));
        let budgets: Vec<String> = distinct(runs.iter().filter_map(|r| r.grid.budget.clone()));
        let timed = runs.iter().any(|r| r.timing().is_some());
        let mut header = vec![
            "mechanism".to_string(),
            "memory held: MiB / layer step (x ideal)".to_string(),
        ];
        header.extend(
            budgets
                .iter()
                .map(|b| format!("fewest MiB / token at {b} (x Belady)")),
        );
        if timed {
            header.push("best tokens/s (policy @ budget)".into());
        }
        // (value used for marking, text) per column
        let mut cols: Vec<Vec<(Option<f64>, String)>> = vec![Vec::new(); header.len() - 1];
        for m in &mechs {
            let of_m: Vec<&RunEntry> = runs
                .iter()
                .filter(|r| &r.grid.mechanism == m)
                .cloned()
                .collect();
            let stream = of_m.iter().find(|r| r.grid.evict.is_none());
            let v = stream.and_then(|r| resident_mib(r));
            let ideal = stream
                .and_then(|r| expert_mib(r, t))
                .zip(t.mean_top_k())
                .map(|(e, k)| e * k);
            cols[0].push((
                v,
                match (v, ideal) {
                    (Some(v), Some(i)) if i > 0.0 => format!("{} ({}x)", fmt(v), fmt(v / i)),
                    (Some(v), _) => fmt(v),
                    _ => "–".into(),
                },
            ));
            for (bi, b) in budgets.iter().enumerate() {
                let best = of_m
                    .iter()
                    .filter(|r| r.grid.budget.as_ref() == Some(b) && !is_belady(r))
                    .filter_map(|r| Some((*r, bytes_per_token(r)?)))
                    .min_by(|x, y| cmp_f64(x.1, y.1));
                let cell = match best {
                    Some((r, v)) => {
                        let bound = belady_of(res, r).and_then(bytes_per_token);
                        let ratio = bound
                            .filter(|&x| x > 0.0)
                            .map(|x| format!(" ({}x)", fmt(v / x)))
                            .unwrap_or_default();
                        (
                            Some(v),
                            format!(
                                "{} {}{ratio}",
                                r.grid.evict.as_deref().unwrap_or("-"),
                                fmt(v * metrics::MIB)
                            ),
                        )
                    }
                    None => (None, "–".into()),
                };
                cols[1 + bi].push(cell);
            }
            if timed {
                let best = of_m
                    .iter()
                    .filter(|r| !is_belady(r))
                    .filter_map(|r| Some((*r, tokens_per_s(r)?)))
                    .max_by(|x, y| cmp_f64(x.1, y.1));
                cols[1 + budgets.len()].push(match best {
                    Some((r, v)) => {
                        let how = match (&r.grid.evict, &r.grid.budget) {
                            (Some(e), Some(b)) => format!("{e} @ {b}"),
                            _ => "streaming".into(),
                        };
                        (Some(v), format!("{} ({how})", fmt(v)))
                    }
                    None => (None, "–".into()),
                });
            }
        }
        let better: Vec<Better> = (0..cols.len())
            .map(|c| {
                if timed && c == cols.len() - 1 {
                    Better::Higher
                } else {
                    Better::Lower
                }
            })
            .collect();
        let marks: Vec<Vec<bool>> = cols
            .iter()
            .zip(&better)
            .map(|(c, b)| best(&c.iter().map(|x| x.0).collect::<Vec<_>>(), *b))
            .collect();
        let rows = mechs
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut row = vec![Cell::plain(format!("`{m}`"))];
                row.extend(cols.iter().zip(&marks).map(|(c, mk)| Cell {
                    text: c[i].1.clone(),
                    best: mk[i],
                }));
                row
            })
            .collect();
        doc.h(
            3,
            format!(
                "At a glance: `{}`{}",
                t.name,
                batch.map(|b| format!(", batch {b}")).unwrap_or_default()
            ),
        );
        doc.table(header, rows);
    }
    doc.p(format!(
        "Resident MiB per layer step: memory each mechanism holds when nothing is retained (lower is better; the ideal holds exactly the selected experts). MiB per token: the least any online policy moves at that VRAM budget, with its ratio to Belady/MIN, the offline optimum, on the same mechanism and budget.{} The best cell of each column is highlighted; details follow in the sections below.",
        if res.runs.iter().any(|r| r.timing().is_some()) {
            format!(" Tokens per second: the best over the policies and budgets of that mechanism, simulated on `{}`.", profile_name(res).unwrap_or_default())
        } else {
            String::new()
        }
    ));
}

fn findings(doc: &mut Doc, res: &Results) {
    doc.h(2, "Answer in brief");
    glance(doc, res);
    doc.h(3, "In words");
    let mut items = Vec::new();
    for t in &res.traces {
        let stream: Vec<(&RunEntry, f64)> = own(res, &t.name)
            .filter(|r| r.grid.evict.is_none())
            .filter_map(|r| Some((r, resident_mib(r)?)))
            .collect();
        let least = stream.iter().min_by(|a, b| cmp_f64(a.1, b.1));
        let most = stream.iter().max_by(|a, b| cmp_f64(a.1, b.1));
        if let (Some(&(b, res_mib)), Some(&(worst, worst_mib))) = (least, most) {
            let ideal = expert_mib(b, t).zip(t.mean_top_k()).map(|(e, k)| e * k);
            items.push(format!(
                "`{}`: least memory held is `{}` at {} MiB per layer step{} (most: `{}` at {} MiB).",
                t.name,
                b.grid.mechanism,
                fmt(res_mib),
                ideal
                    .map(|i| format!(", {}x the ideal of {} MiB (top-k x expert size)", fmt(res_mib / i), fmt(i)))
                    .unwrap_or_default(),
                worst.grid.mechanism,
                fmt(worst_mib),
            ));
        }
        let cache: Vec<(&RunEntry, f64)> = own(res, &t.name)
            .filter(|r| r.grid.evict.is_some())
            .filter_map(|r| Some((r, bytes_per_token(r)?)))
            .collect();
        for budget in distinct(cache.iter().map(|r| r.0.grid.budget.clone())) {
            for batch in distinct(cache.iter().map(|r| r.0.grid.batch)) {
                let Some(&(b, bpt)) = cache
                    .iter()
                    .filter(|(r, _)| {
                        r.grid.budget == budget && r.grid.batch == batch && !is_belady(r)
                    })
                    .min_by(|a, b| cmp_f64(a.1, b.1))
                else {
                    continue;
                };
                let v = bpt * metrics::MIB;
                let bound = belady_of(res, b)
                    .and_then(bytes_per_token)
                    .map(|x| x * metrics::MIB);
                items.push(format!(
                    "`{}`, budget {}{}: fewest bytes moved by `{}` with {} MiB per token{}.",
                    t.name,
                    budget.as_deref().unwrap_or("-"),
                    batch.map(|b| format!(", batch {b}")).unwrap_or_default(),
                    run_label(b),
                    fmt(v),
                    match bound {
                        Some(x) if x > 0.0 => format!(
                            "; Belady/MIN needs {} MiB, so it is {}x the bound",
                            fmt(x),
                            fmt(v / x)
                        ),
                        Some(x) => format!("; Belady/MIN needs {} MiB", fmt(x)),
                        None => "; no Belady run to compare with".into(),
                    }
                ));
            }
        }
        let timed: Vec<(&RunEntry, &TimingReport)> = own(res, &t.name)
            .filter_map(|r| Some((r, r.timing()?)))
            .collect();
        for batch in distinct(timed.iter().map(|r| r.0.grid.batch)) {
            if let Some((b, tm)) = timed
                .iter()
                .filter(|(r, _)| r.grid.batch == batch && !is_belady(r))
                .max_by(|a, b| cmp_f64(a.1.tokens_per_s, b.1.tokens_per_s))
            {
                items.push(format!(
                    "`{}`{}: fastest is `{}` at {} tokens/s (step p50 {} ms, p99 {} ms) on `{}`.",
                    t.name,
                    batch.map(|b| format!(", batch {b}")).unwrap_or_default(),
                    run_label(b),
                    fmt(tm.tokens_per_s),
                    fmt(tm.step_ms_p50),
                    fmt(tm.step_ms_p99),
                    profile_name(res).unwrap_or_default()
                ));
            }
        }
    }
    let absent = absent_blocks(res);
    if !absent.is_empty() {
        items.push(format!("Not in these results: {}.", absent.join("; ")));
    }
    doc.list(items);
}

/// What the results lack, as sentences, so the reader knows what was not measured.
fn absent_blocks(res: &Results) -> Vec<String> {
    let mut v = Vec::new();
    let any = |has: fn(&RunEntry) -> bool| res.runs.iter().any(has);
    if !any(|r| r.streaming().is_some()) {
        v.push("the streaming regime (no run has a `streaming` block)".to_string());
    }
    if !any(|r| r.cache().is_some()) {
        v.push(
            "retention under a budget (no run has a `cache` block: give `--evict` and `--budgets`)"
                .to_string(),
        );
    }
    if !any(|r| r.timing().is_some()) {
        v.push(
            "time (no run has a `timing` block: give a hardware profile with `--hw`)".to_string(),
        );
    }
    v
}

fn belady_of<'a>(res: &'a Results, r: &RunEntry) -> Option<&'a RunEntry> {
    res.runs.iter().find(|x| {
        is_belady(x)
            && x.grid.trace == r.grid.trace
            && x.grid.profile_trace == r.grid.profile_trace
            && x.grid.mechanism == r.grid.mechanism
            && x.grid.budget == r.grid.budget
            && x.grid.split == r.grid.split
            && x.grid.batch == r.grid.batch
    })
}

/// The hardware profile: device, every constant with value, unit and provenance, notes.
fn profile_section(doc: &mut Doc, p: &Value) {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    doc.p(format!(
        "`{}`: {}",
        s(p.get("name")),
        s(p.get("description"))
    ));
    if let Some(dev) = p.get("device").and_then(Value::as_object) {
        doc.p(format!(
            "Device: {}.",
            dev.iter()
                .map(|(k, v)| format!("{k} {}", crate::flatten::cell(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(note) = p.pointer("/os_paging/note").and_then(Value::as_str) {
        doc.p(format!("OS paging: {note}"));
    }
    if let Some(cs) = p.get("constants").and_then(Value::as_object) {
        let rows = cs
            .iter()
            .map(|(k, c)| {
                let pv = c.get("provenance");
                let kind = s(pv.and_then(|x| x.get("kind")));
                let how = [&["method", "reason"][..], &["date"][..]]
                    .iter()
                    .filter_map(|keys| {
                        keys.iter()
                            .find_map(|k| pv.and_then(|x| x.get(*k)).and_then(Value::as_str))
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                vec![
                    Cell::plain(format!("`{k}`")),
                    Cell::plain(c.get("value").map(crate::flatten::cell).unwrap_or_default()),
                    Cell::plain(s(c.get("unit"))),
                    Cell::plain(kind),
                    Cell::plain(how),
                ]
            })
            .collect();
        doc.table(
            ["constant", "value", "unit", "provenance", "how / when"]
                .map(String::from)
                .to_vec(),
            rows,
        );
    }
    if let Some(notes) = p.get("notes").and_then(Value::as_array) {
        doc.list(
            notes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        );
    }
}

fn inputs(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(2, "Inputs");
    doc.h(3, "Traces");
    let rows = res
        .traces
        .iter()
        .map(|t| {
            let p = &t.provenance;
            vec![
                Cell::plain(format!("`{}`", t.name)),
                Cell::plain(t.model.name.clone()),
                Cell::plain(t.phase.clone()),
                Cell::plain(t.sequences.len().to_string()),
                Cell::plain(t.tokens.to_string()),
                Cell::plain(t.accesses.to_string()),
                Cell::plain(
                    t.expert_counts
                        .iter()
                        .flatten()
                        .filter(|&&c| c > 0)
                        .count()
                        .to_string(),
                ),
                Cell::plain(if p.synthetic { "synthetic" } else { "recorded" }.to_string()),
            ]
        })
        .collect();
    doc.table(
        [
            "trace",
            "model",
            "phase",
            "sequences",
            "tokens",
            "accesses",
            "distinct keys",
            "kind",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    );
    let mut prov = Vec::new();
    for t in &res.traces {
        let p = &t.provenance;
        let mut s = format!(
            "`{}` (`{}`): recorded with {}",
            t.name,
            t.file,
            if p.tool.is_empty() {
                "an unnamed tool"
            } else {
                &p.tool
            }
        );
        if !p.date.is_empty() && p.date != "unknown" {
            s.push_str(&format!(" on {}", p.date));
        }
        if !p.prompt_labels.is_empty() {
            s.push_str(&format!("; prompts: {}", p.prompt_labels.join(", ")));
        }
        if let Some(g) = &p.generator {
            s.push_str(&format!("; generator: {g}"));
        }
        if !p.source.is_empty() {
            s.push_str(&format!("; source: {}", p.source));
        }
        if let Some(l) = &p.licence {
            s.push_str(&format!("; licence: {l}"));
        }
        prov.push(s);
    }
    doc.list(prov);

    doc.h(3, "Model geometry");
    let geo = distinct(res.traces.iter().map(|t| &t.model));
    for m in geo {
        let moe: Vec<_> = m.layers.iter().filter(|l| l.is_moe()).collect();
        let experts = distinct(moe.iter().map(|l| l.experts));
        let topk = distinct(moe.iter().map(|l| l.top_k));
        let shared = distinct(moe.iter().map(|l| l.shared_experts));
        let join = |v: Vec<u16>| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("/")
        };
        doc.p(format!(
            "`{}`: {} layers ({} MoE), {} experts per MoE layer, top-{}, {} shared; hidden size {}, expert FFN size {}.",
            m.name,
            m.layers.len(),
            moe.len(),
            join(experts),
            join(topk),
            join(shared),
            m.hidden_size.map(|x| x.to_string()).unwrap_or("unknown".into()),
            m.expert_ffn.map(|x| x.to_string()).unwrap_or("unknown".into()),
        ));
    }
    if let Some(r) = res.runs.iter().find(|r| r.streaming().is_some()) {
        let t = trace_of(res, &r.grid.trace);
        if let Some(e) = expert_mib(r, t) {
            doc.p(format!(
                "Expert size used by the runs: {} MiB per expert (bank of {} keys).",
                fmt(e),
                t.num_keys()
            ));
        }
    }

    doc.h(3, "Hardware profile");
    match &res.profile {
        Some(p) => profile_section(doc, p),
        None => doc.p("None given: no time was simulated. Add `--hw rtx4060-laptop-wddm` (or another profile) to see step latency and tokens per second."),
    }
    doc.h(3, "Grid");
    doc.p(format!(
        "{} runs. Parameters as resolved by `sim compare`:",
        res.total_runs
    ));
    doc.list(
        crate::flatten::leaves(&res.grid)
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("`{k}`: {}", crate::flatten::cell(v)))
            .collect(),
    );

    doc.h(2, "The traces");
    let curves: Vec<Series> = res
        .traces
        .iter()
        .map(|t| {
            let mut c: Vec<u64> = t.expert_counts.iter().flatten().cloned().collect();
            c.sort_unstable_by(|a, b| b.cmp(a));
            let total: u64 = c.iter().sum();
            let n = c.len();
            let mut pts = vec![(0.0, 0.0)];
            let mut acc = 0u64;
            for (i, x) in c.iter().enumerate() {
                acc += x;
                pts.push((
                    (i + 1) as f64 / n as f64 * 100.0,
                    if total > 0 {
                        acc as f64 / total as f64 * 100.0
                    } else {
                        0.0
                    },
                ));
            }
            Series::new(t.name.clone(), pts)
        })
        .collect();
    figure(
        doc,
        "concentration.svg".into(),
        plots::line_chart(
            &LineChart {
                title: "Concentration: share of accesses taken by the hottest keys",
                x_label: "hottest keys (% of all (layer, expert) keys)",
                y_label: "share of accesses (%)",
                x_scale: Scale::Linear,
                y_from_zero: true,
            },
            &curves,
        ),
        "Concentration curve: the hottest x% of (layer, expert) keys take y% of all expert accesses. A diagonal would be uniform routing; the further above it, the more a small pinned set can serve.".into(),
    )?;
    for t in &res.traces {
        let rows: Vec<Vec<f64>> = t
            .expert_counts
            .iter()
            .map(|l| {
                let total: u64 = l.iter().sum();
                let mut v: Vec<f64> = l
                    .iter()
                    .map(|&c| {
                        if total > 0 {
                            c as f64 / total as f64 * 100.0
                        } else {
                            0.0
                        }
                    })
                    .collect();
                v.sort_by(|a, b| b.total_cmp(a));
                v
            })
            .collect();
        let title = format!(
            "Per-layer skew of `{}`: share of the layer's selections by expert rank",
            t.name
        );
        figure(
            doc,
            format!("skew_{}.svg", slug(&t.name)),
            plots::heat_map(&title.replace('`', ""), "expert rank in its layer (0 = most selected)", "MoE layer", &rows),
            format!("{title}. Each row is one MoE layer, its experts sorted by selection count; dark cells on the left mean a few experts dominate the layer."),
        )?;
        if let Some(stats) = t.stats.as_ref().and_then(Value::as_object) {
            let items: Vec<String> = stats
                .iter()
                .filter_map(|(k, v)| match v {
                    Value::Number(_) | Value::String(_) | Value::Bool(_) => {
                        Some(format!("`{k}`: {}", crate::flatten::cell(v)))
                    }
                    Value::Array(a) if k == "always_on_keys" => {
                        Some(format!("`always_on_keys`: {} keys, {}", a.len(), v))
                    }
                    _ => None,
                })
                .collect();
            doc.p(format!(
                "Statistics of `{}` (`sim trace stats --json`):",
                t.name
            ));
            doc.list(items);
        }
    }
    Ok(())
}

fn streaming(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(
        2,
        "Mechanisms: memory held and bytes moved (streaming regime)",
    );
    doc.p("Nothing is retained across decode steps: each step, every unit holding a selected expert is brought in. Lower is better in every marked column; the best cell of each column is highlighted. `x ideal` is resident MiB divided by the ideal (exactly the selected experts: top-k x expert size).");
    let mut any = false;
    for t in &res.traces {
        let runs: Vec<&RunEntry> = own(res, &t.name)
            .filter(|r| r.grid.evict.is_none() && r.streaming().is_some())
            .collect();
        if runs.is_empty() {
            continue;
        }
        any = true;
        doc.h(3, format!("Trace `{}`", t.name));
        let ratios: Vec<String> = runs
            .iter()
            .map(|r| {
                let ideal = expert_mib(r, t).zip(t.mean_top_k()).map(|(e, k)| e * k);
                match (resident_mib(r), ideal) {
                    (Some(v), Some(i)) if i > 0.0 => format!("{}x", fmt(v / i)),
                    _ => "–".into(),
                }
            })
            .collect();
        metric_table(doc, &runs, metrics::STREAMING, Some(("x ideal", ratios)));
        // The granularity trade curve: eN mechanisms by order.
        let chunked: Vec<(u32, String, &RunEntry)> = runs
            .iter()
            .filter_map(|r| chunk_spec(&r.grid.mechanism).map(|(n, o)| (n, o, *r)))
            .collect();
        if chunked.len() >= 2 {
            let mut series = Vec::new();
            // e1 has no order: it starts every order's line
            let mut orders = distinct(chunked.iter().filter(|c| c.0 > 1).map(|c| c.1.clone()));
            if orders.is_empty() {
                orders.push("hot".to_string());
            }
            for (oi, o) in orders.iter().enumerate() {
                let mut pts: Vec<(f64, f64, f64)> = chunked
                    .iter()
                    .filter(|c| &c.1 == o || c.0 == 1)
                    .filter_map(|c| Some((c.0 as f64, resident_mib(c.2)?, transfer_mib(c.2)?)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                series.push(
                    Series::new(
                        format!("resident, {o}"),
                        pts.iter().map(|p| (p.0, p.1)).collect(),
                    )
                    .color(oi),
                );
                series.push(
                    Series::new(
                        format!("transfer, {o}"),
                        pts.iter().map(|p| (p.0, p.2)).collect(),
                    )
                    .color(oi)
                    .dashed(),
                );
            }
            let xs = chunked.iter().map(|c| c.0);
            if let (Some(i), Some(lo), Some(hi)) = (
                expert_mib(chunked[0].2, t)
                    .zip(t.mean_top_k())
                    .map(|(e, k)| e * k),
                xs.clone().min(),
                xs.max(),
            ) {
                let (lo, hi) = (lo as f64, hi as f64);
                series.push(
                    Series::new("ideal bound (top-k x expert)", vec![(lo, i), (hi, i)]).dashed(),
                );
            }
            let title = format!("Granularity trade curve, {}", t.name);
            figure(
                doc,
                format!("trade_curve_{}.svg", slug(&t.name)),
                plots::line_chart(
                    &LineChart {
                        title: &title,
                        x_label: "experts per chunk E (log scale)",
                        y_label: "MiB per layer per decode step",
                        x_scale: Scale::Log2,
                        y_from_zero: true,
                    },
                    &series,
                ),
                format!("Granularity trade curve on `{}`: resident (solid) and transferred (dashed) MiB per layer per step against E experts per chunk, one pair of lines per packing order; the black dashed line is the ideal.", t.name),
            )?;
        }
    }
    if !any {
        doc.p("No streaming results in this comparison.");
    }
    Ok(())
}

fn retention(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(2, "Retention under a VRAM budget");
    let cache_runs: Vec<&RunEntry> = res
        .runs
        .iter()
        .filter(|r| !r.grid.is_cross() && r.grid.evict.is_some() && r.cache().is_some())
        .collect();
    if cache_runs.is_empty() {
        doc.p("No run in these results has a `cache` block: retention was not compared (give `--evict` and `--budgets` to `sim compare`).");
        return Ok(());
    }
    doc.p("Each cell is MiB moved per token (page-ins x useful bytes per unit / tokens) and, in brackets, its ratio to Belady/MIN (the offline optimum) on the same trace, mechanism, budget and batch. The best online policy of each budget column is highlighted; Belady is the bound, not a contender. Page-ins, miss rates and evictions of every run are in `results.csv`.");
    for t in &res.traces {
        let tr: Vec<&RunEntry> = cache_runs
            .iter()
            .filter(|r| r.grid.trace == t.name)
            .cloned()
            .collect();
        for mech in distinct(tr.iter().map(|r| r.grid.mechanism.clone())) {
            let groups = distinct(tr.iter().map(|r| (r.grid.batch, r.grid.split.clone())));
            for (batch, split) in groups {
                let runs: Vec<&RunEntry> = tr
                    .iter()
                    .filter(|r| {
                        r.grid.mechanism == mech && r.grid.batch == batch && r.grid.split == split
                    })
                    .cloned()
                    .collect();
                if runs.is_empty() {
                    continue;
                }
                let split_note = split.as_deref().filter(|&s| s != "global");
                doc.h(
                    3,
                    format!(
                        "`{}`, mechanism `{mech}`{}{}",
                        t.name,
                        batch.map(|b| format!(", batch {b}")).unwrap_or_default(),
                        split_note
                            .map(|s| format!(", {s} split"))
                            .unwrap_or_default()
                    ),
                );
                let budgets = distinct(runs.iter().map(|r| r.grid.budget.clone()));
                let policies = distinct(runs.iter().filter_map(|r| r.grid.evict.clone()));
                let find = |p: &str, b: &Option<String>| {
                    runs.iter()
                        .find(|r| r.grid.evict.as_deref() == Some(p) && &r.grid.budget == b)
                        .cloned()
                };
                let mut cols: Vec<Vec<Cell>> = Vec::new();
                let mut below: Vec<String> = Vec::new();
                for b in &budgets {
                    let vals: Vec<Option<f64>> = policies
                        .iter()
                        .map(|p| {
                            if is_offline(p) {
                                None
                            } else {
                                find(p, b).and_then(bytes_per_token)
                            }
                        })
                        .collect();
                    let marks = best(&vals, Better::Lower);
                    cols.push(
                        policies
                            .iter()
                            .zip(marks)
                            .map(|(p, m)| {
                                let r = find(p, b);
                                let v = r.and_then(bytes_per_token);
                                let bound =
                                    r.and_then(|r| belady_of(res, r)).and_then(bytes_per_token);
                                if let (Some(v), Some(bd)) = (v, bound) {
                                    if v < bd {
                                        below.push(format!(
                                            "`{p}` @ {}",
                                            b.as_deref().unwrap_or("-")
                                        ));
                                    }
                                }
                                let text = match (v, bound) {
                                    (Some(v), Some(bd)) if bd > 0.0 => {
                                        format!("{} ({}x)", fmt(v * metrics::MIB), fmt(v / bd))
                                    }
                                    (Some(v), _) => fmt(v * metrics::MIB),
                                    (None, _) => "–".into(),
                                };
                                Cell { text, best: m }
                            })
                            .collect(),
                    );
                }
                let mut header = vec!["policy".to_string()];
                header.extend(
                    budgets
                        .iter()
                        .map(|b| format!("budget {}", b.as_deref().unwrap_or("-"))),
                );
                let rows = policies
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let mut row = vec![Cell::plain(if is_offline(p) {
                            "belady (bound)".to_string()
                        } else {
                            p.clone()
                        })];
                        row.extend(cols.iter().map(|c| c[i].clone()));
                        row
                    })
                    .collect();
                doc.table(header, rows);
                if !below.is_empty() {
                    doc.p(format!(
                        "Below the Belady/MIN figure: {}. Belady is optimal among policies that admit every accessed unit into the budget; a policy that streams units past the cache without admitting them (static-pin streams everything it did not pin) is outside that class and can move fewer bytes.",
                        below.join(", ")
                    ));
                }
                // bytes per token against budget
                let by_percent = budgets
                    .iter()
                    .all(|b| b.as_deref().and_then(percent).is_some());
                let x_of = |r: &RunEntry| {
                    if by_percent {
                        r.grid.budget.as_deref().and_then(percent)
                    } else {
                        budget_units(r)
                    }
                };
                let series: Vec<Series> = policies
                    .iter()
                    .map(|p| {
                        let mut pts: Vec<(f64, f64)> = runs
                            .iter()
                            .filter(|r| r.grid.evict.as_deref() == Some(p.as_str()))
                            .filter_map(|r| Some((x_of(r)?, bytes_per_token(r)? * metrics::MIB)))
                            .collect();
                        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                        if is_offline(p) {
                            Series::new("belady (lower bound)", pts).dashed()
                        } else {
                            Series::new(p.clone(), pts)
                        }
                    })
                    .collect();
                let title = format!("Bytes per token vs budget, {} / {mech}", t.name);
                figure(
                    doc,
                    format!(
                        "bytes_per_token_{}_{}{}{}.svg",
                        slug(&t.name),
                        slug(&mech),
                        batch.map(|b| format!("_b{b}")).unwrap_or_default(),
                        split_note.map(|s| format!("_{}", slug(s))).unwrap_or_default()
                    ),
                    plots::line_chart(
                        &LineChart {
                            title: &title,
                            x_label: if by_percent { "VRAM budget (% of the bank)" } else { "VRAM budget (units)" },
                            y_label: "MiB per token",
                            x_scale: Scale::Linear,
                            y_from_zero: true,
                        },
                        &series,
                    ),
                    format!("MiB moved per token against the VRAM budget on `{}` with `{mech}`, one line per policy; Belady/MIN (dashed black) is the lower bound for every policy that admits each accessed unit into the budget.", t.name),
                )?;
            }
        }
    }
    Ok(())
}

fn timing(doc: &mut Doc, res: &Results) -> anyhow::Result<()> {
    doc.h(2, "Time per decode step");
    let timed: Vec<&RunEntry> = res
        .runs
        .iter()
        .filter(|r| !r.grid.is_cross() && r.timing().is_some())
        .collect();
    if timed.is_empty() {
        doc.p("No run in these results has a `timing` block, so time was not simulated. Give a hardware profile (`--hw rtx4060-laptop-wddm`) to `sim compare` to see step latency, tokens per second and where the time goes.");
        return Ok(());
    }
    let hw = profile_name(res).unwrap_or_default();
    doc.p(format!("Simulated on `{hw}`. Lower is better except tokens/s; the best cell of each column is highlighted. `vs Belady` is the step p50 divided by that of the Belady/MIN run of the same mechanism and budget."));
    for t in &res.traces {
        let tr: Vec<&RunEntry> = timed
            .iter()
            .filter(|r| r.grid.trace == t.name)
            .cloned()
            .collect();
        let batches = distinct(tr.iter().map(|r| r.grid.batch));
        for &batch in &batches {
            let runs: Vec<&RunEntry> = tr
                .iter()
                .filter(|r| r.grid.batch == batch)
                .cloned()
                .collect();
            doc.h(
                3,
                format!(
                    "`{}`{}",
                    t.name,
                    batch.map(|b| format!(", batch {b}")).unwrap_or_default()
                ),
            );
            let bsuffix = batch.map(|b| format!("_b{b}")).unwrap_or_default();
            for budget in distinct(runs.iter().map(|r| r.grid.budget.clone())) {
                let group: Vec<&RunEntry> = runs
                    .iter()
                    .filter(|r| r.grid.budget == budget)
                    .cloned()
                    .collect();
                let bname = budget.clone().unwrap_or_else(|| "streaming".into());
                doc.h(
                    4,
                    match &budget {
                        Some(b) => format!("budget {b}"),
                        None => "streaming (nothing retained)".to_string(),
                    },
                );
                let vs: Vec<String> = group
                    .iter()
                    .map(|r| {
                        let b = belady_of(res, r).and_then(step_p50);
                        match (step_p50(r), b) {
                            (Some(v), Some(b)) if b > 0.0 && r.grid.evict.is_some() => {
                                format!("{}x", fmt(v / b))
                            }
                            _ => "–".into(),
                        }
                    })
                    .collect();
                metric_table(doc, &group, metrics::TIMING, Some(("vs Belady", vs)));
                let cats: Vec<String> = group
                    .iter()
                    .map(|r| {
                        let l = run_label(r);
                        l.split(" @ ").next().unwrap_or(&l).to_string()
                    })
                    .collect();
                let parts: Vec<plots::Part> = metrics::TIME_SPLIT
                    .iter()
                    .map(|(part, n, lane)| {
                        (
                            n.to_string(),
                            *lane,
                            group
                                .iter()
                                .map(|r| r.timing().map(part).unwrap_or(0.0))
                                .collect(),
                        )
                    })
                    .collect();
                let title = format!("Time split per step, {} @ {bname}", t.name);
                figure(
                    doc,
                    format!("time_split_{}_{}{bsuffix}.svg", slug(&t.name), slug(&bname)),
                    plots::stacked_bars(&title, "ms per decode step", &cats, &parts),
                    format!("Where a decode step's time goes on `{}` ({bname}) on `{hw}`, in ms per step. Upper bar of each run: the critical path, compute plus the stall waiting for paging, which adds up to the mean step time. Lower bar: how long each paging resource (copy engine, driver, fault handler) was busy; these overlap each other and compute, so the lower bar need not equal the stall.", t.name),
                )?;
                // CDFs: in the streaming group one line per mechanism; under a budget, the
                // policies of the mechanism with the most tokens/s (a readable number of lines).
                let shown: Vec<&RunEntry> = if budget.is_none() {
                    group.clone()
                } else {
                    let best = group
                        .iter()
                        .filter(|r| !is_belady(r))
                        .max_by(|a, b| by_metric(a, b, tokens_per_s))
                        .map(|r| r.grid.mechanism.clone());
                    group
                        .iter()
                        .filter(|r| Some(&r.grid.mechanism) == best.as_ref())
                        .cloned()
                        .collect()
                };
                let series: Vec<Series> = shown
                    .iter()
                    .map(|r| {
                        let pts: Vec<(f64, f64)> = metrics::LATENCY_QUANTILES
                            .iter()
                            .filter_map(|(at, q)| Some((at(r.timing()?), *q * 100.0)))
                            .collect();
                        let l = run_label(r);
                        Series::new(l.split(" @ ").next().unwrap_or(&l).to_string(), pts).step()
                    })
                    .collect();
                let title = format!("Step latency CDF, {} @ {bname}", t.name);
                let which =
                    if budget.is_none() {
                        "one line per mechanism".to_string()
                    } else {
                        format!(
                        "one line per policy of `{}`, the mechanism with the most tokens/s here",
                        shown.first().map(|r| r.grid.mechanism.as_str()).unwrap_or("-")
                    )
                    };
                figure(
                    doc,
                    format!("step_cdf_{}_{}{bsuffix}.svg", slug(&t.name), slug(&bname)),
                    plots::line_chart(
                        &LineChart { title: &title, x_label: "decode step latency (ms)", y_label: "steps at or below (%)", x_scale: Scale::Linear, y_from_zero: true },
                        &series,
                    ),
                    format!("Step-latency CDF on `{}` ({bname}), {which}, through the reported p50, p90, p99 and max.", t.name),
                )?;
            }
        }
        if batches.iter().flatten().count() >= 2 {
            // A readable number of lines: the middle budget, and there the policies of the
            // mechanism with the most tokens/s at the largest batch.
            let budgets = distinct(tr.iter().map(|r| r.grid.budget.clone()));
            let mid = budgets[budgets.len() / 2].clone();
            let at: Vec<&RunEntry> = tr
                .iter()
                .filter(|r| r.grid.budget == mid)
                .cloned()
                .collect();
            let top_batch = at.iter().filter_map(|r| r.grid.batch).max();
            let best = at
                .iter()
                .filter(|r| r.grid.batch == top_batch && !is_belady(r))
                .max_by(|a, b| by_metric(a, b, tokens_per_s))
                .map(|r| r.grid.mechanism.clone());
            let tr: Vec<&RunEntry> = at
                .into_iter()
                .filter(|r| Some(&r.grid.mechanism) == best.as_ref())
                .collect();
            let keys = distinct(tr.iter().map(|r| {
                (
                    r.grid.mechanism.clone(),
                    r.grid.evict.clone(),
                    r.grid.budget.clone(),
                )
            }));
            let series: Vec<Series> = keys
                .iter()
                .map(|k| {
                    let mut pts: Vec<(f64, f64)> = tr
                        .iter()
                        .filter(|r| {
                            (&r.grid.mechanism, &r.grid.evict, &r.grid.budget) == (&k.0, &k.1, &k.2)
                        })
                        .filter_map(|r| Some((r.grid.batch? as f64, tokens_per_s(r)?)))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    // every key comes from a run of `tr`, so the find succeeds
                    let label = tr
                        .iter()
                        .find(|r| {
                            (&r.grid.mechanism, &r.grid.evict, &r.grid.budget) == (&k.0, &k.1, &k.2)
                        })
                        .map(|r| run_label(r))
                        .unwrap_or_default();
                    Series::new(label, pts)
                })
                .collect();
            let cap = res.grid.get("admission_cap").and_then(Value::as_f64);
            let title = format!("Tokens per second vs batch, {}", t.name);
            figure(
                doc,
                format!("tokens_per_s_vs_batch_{}.svg", slug(&t.name)),
                plots::line_chart(
                    &LineChart { title: &title, x_label: "batch size (sequences, log scale)", y_label: "tokens per second", x_scale: Scale::Log2, y_from_zero: true },
                    &series,
                ),
                format!(
                    "Tokens per second against batch size on `{}` on `{hw}` for `{}`{}{}.",
                    t.name,
                    best.as_deref().unwrap_or("-"),
                    mid.as_deref().map(|b| format!(" at budget {b}")).unwrap_or_default(),
                    cap.map(|c| format!(", with the admission cap at {}% of usable VRAM (sequences that would push mapped memory past it are refused)", fmt(c * 100.0)))
                        .unwrap_or_else(|| ", without an admission cap".into())
                ),
            )?;
        }
    }
    Ok(())
}

/// A column of a generic block table: its header (the block's JSON key) and its value.
type BlockColumn = (&'static str, fn(&RunReport) -> Option<f64>);

/// A block shown as a generic table: its name, whether a run has it, its columns, and which
/// direction is better in every column.
type BlockTable = (
    &'static str,
    fn(&RunReport) -> bool,
    &'static [BlockColumn],
    Better,
);

/// The `tiers` block's keys, in JSON order.
const TIERS_COLUMNS: &[BlockColumn] = &[
    ("dram_hits", |r| Some(r.tiers.as_ref()?.dram_hits as f64)),
    ("ssd_compulsory", |r| {
        Some(r.tiers.as_ref()?.ssd_compulsory as f64)
    }),
    ("ssd_capacity", |r| {
        Some(r.tiers.as_ref()?.ssd_capacity as f64)
    }),
];

/// The `schedule` block's keys, in JSON order.
const SCHEDULE_COLUMNS: &[BlockColumn] = &[
    ("unions_per_token", |r| {
        Some(r.schedule.as_ref()?.unions_per_token)
    }),
    ("delay_p50", |r| Some(r.schedule.as_ref()?.delay_p50 as f64)),
    ("delay_p99", |r| Some(r.schedule.as_ref()?.delay_p99 as f64)),
    ("delay_max", |r| Some(r.schedule.as_ref()?.delay_max as f64)),
];

/// The `admission` block's keys, in JSON order (`cap` and `limit_mib` are empty without a cap).
const ADMISSION_COLUMNS: &[BlockColumn] = &[
    ("requested", |r| {
        Some(r.admission.as_ref()?.requested as f64)
    }),
    ("admitted", |r| Some(r.admission.as_ref()?.admitted as f64)),
    ("cap", |r| r.admission.as_ref()?.cap),
    ("limit_mib", |r| r.admission.as_ref()?.limit_mib),
];

/// Blocks the report does not tabulate specially (`tiers`, `schedule`, `admission`): one
/// generic table each, a column per key of the block.
fn other_blocks(doc: &mut Doc, res: &Results) {
    // tiers and schedule count costs (lower is better); admission is descriptive
    let blocks: [BlockTable; 3] = [
        ("tiers", |r| r.tiers.is_some(), TIERS_COLUMNS, Better::Lower),
        (
            "schedule",
            |r| r.schedule.is_some(),
            SCHEDULE_COLUMNS,
            Better::Lower,
        ),
        (
            "admission",
            |r| r.admission.is_some(),
            ADMISSION_COLUMNS,
            Better::Neither,
        ),
    ];
    for (block, has, columns, better) in blocks {
        let runs: Vec<&RunEntry> = res.runs.iter().filter(|r| has(&r.result)).collect();
        if runs.is_empty() {
            continue;
        }
        doc.h(2, format!("`{block}` results"));
        let mut header = vec!["trace".to_string(), "run".to_string()];
        header.extend(columns.iter().map(|(k, _)| k.to_string()));
        let cols: Vec<Vec<Cell>> = columns
            .iter()
            .map(|(_, get)| {
                let vals: Vec<Option<f64>> = runs.iter().map(|r| get(&r.result)).collect();
                let marks = best(&vals, better);
                vals.iter()
                    .zip(marks)
                    .map(|(v, b)| Cell {
                        text: v.map(fmt).unwrap_or("–".into()),
                        best: b,
                    })
                    .collect()
            })
            .collect();
        let rows = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut row = vec![Cell::plain(r.grid.trace.clone()), Cell::plain(run_label(r))];
                row.extend(cols.iter().map(|c| c[i].clone()));
                row
            })
            .collect();
        doc.table(header, rows);
    }
}

fn stability(doc: &mut Doc, res: &Results) {
    let cross: Vec<&RunEntry> = res.runs.iter().filter(|r| r.grid.is_cross()).collect();
    if cross.is_empty() {
        return;
    }
    doc.h(2, "Cross-trace stability");
    doc.p("A static packing or pin set is chosen on one trace (the profile trace) and evaluated on another. The loss is the extra memory held (streaming) or bytes moved per token (retention) compared with choosing on the evaluated trace itself; 0% means the choice transfers perfectly.");
    // [packing (streaming), pinning (retention)]: the largest relative loss and its run
    let mut worst: [Option<(f64, String)>; 2] = [None, None];
    let mut rows = Vec::new();
    for r in cross {
        let own = res.runs.iter().find(|x| {
            !x.grid.is_cross()
                && x.grid.trace == r.grid.trace
                && x.grid.mechanism == r.grid.mechanism
                && x.grid.evict == r.grid.evict
                && x.grid.budget == r.grid.budget
                && x.grid.split == r.grid.split
                && x.grid.batch == r.grid.batch
        });
        let (get, unit, scale): (fn(&RunEntry) -> Option<f64>, _, _) = if r.grid.evict.is_some() {
            (bytes_per_token, "MiB/token", metrics::MIB)
        } else {
            (resident_mib, "resident MiB/layer step", 1.0)
        };
        let v = get(r);
        let o = own.and_then(get);
        if let (Some(v), Some(o)) = (v, o) {
            let slot = &mut worst[usize::from(r.grid.evict.is_some())];
            let beaten = !matches!(slot, Some((w, _)) if *w >= v / o - 1.0);
            if o > 0.0 && beaten {
                *slot = Some((
                    v / o - 1.0,
                    format!(
                        "`{}` chosen on `{}` and evaluated on `{}`",
                        run_label(r),
                        r.grid.profile_trace,
                        r.grid.trace
                    ),
                ));
            }
        }
        let loss = match (v, o) {
            (Some(v), Some(o)) if o > 0.0 => format!("{:+.1}%", (v / o - 1.0) * 100.0),
            (Some(v), Some(o)) => format!("{:+}", fmt((v - o) * scale)),
            _ => "–".into(),
        };
        rows.push(vec![
            Cell::plain(run_label(r)),
            Cell::plain(format!("`{}`", r.grid.profile_trace)),
            Cell::plain(format!("`{}`", r.grid.trace)),
            Cell::plain(unit),
            Cell::plain(v.map(|v| fmt(v * scale)).unwrap_or("–".into())),
            Cell::plain(o.map(|v| fmt(v * scale)).unwrap_or("–".into())),
            Cell::plain(loss),
        ]);
    }
    let mut items = Vec::new();
    if let Some((l, what)) = &worst[0] {
        items.push(format!(
            "largest packing loss: {what}, {:+.1}% memory held",
            l * 100.0
        ));
    }
    if let Some((l, what)) = &worst[1] {
        items.push(format!(
            "largest pinning loss: {what}, {:+.1}% bytes per token",
            l * 100.0
        ));
    }
    doc.list(items);
    doc.table(
        [
            "run",
            "chosen on",
            "evaluated on",
            "metric",
            "value",
            "chosen on itself",
            "loss",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    );
}

fn files(doc: &mut Doc, res: &Results) {
    doc.h(2, "Files");
    doc.p(format!(
        "`results.json` holds every run's full `sim run --json` object with its grid coordinates ({} runs); `results.csv` has one row per run and one column per metric, headed by the metric's dotted JSON path (`streaming.resident_mib_per_layer_step`, `grid.mechanism`, ...). `sim report DIR` regenerates this report from `results.json` without rerunning.",
        res.runs.len()
    ));
}
