//! Whether a run's configuration lies where the model was checked: `inside` a validated
//! region, `near` one, or `outside` every one (rules in docs/DESIGN.md, "Where the model was
//! checked"), with the nearest region and its error.
//!
//! The regions are docs/VALIDATION.md's table, compiled in and read back here: that page is
//! generated from the stored replays and a test (`sim/tests/stored_sets.rs`) regenerates and
//! compares it, so the index cannot drift from the data, and a run never re-prices them.

use super::coverage::Region;

/// docs/VALIDATION.md, the coverage page of validate/data.
const PAGE: &str = include_str!("../../../docs/VALIDATION.md");

/// What a timed run was: the columns of a region it is matched on.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSetting {
    /// The GPU profile's name (`h200-linux`).
    pub gpu: String,
    /// The mechanism (`--policy`: `e1`, `e4:hot`, `os4k`).
    pub mechanism: String,
    /// The retention as the table writes it (`lru, budget 50%`, `streaming`).
    pub retention: String,
    pub batch: usize,
    /// The model geometry's name (only to prefer a region of the same model as the nearest).
    pub model: String,
    /// Most VMM granules live at once (absent: none live).
    pub live_granules: Option<f64>,
}

/// Where a run lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    Inside,
    Near,
    Outside,
}

impl Place {
    pub fn name(self) -> &'static str {
        match self {
            Place::Inside => "inside",
            Place::Near => "near",
            Place::Outside => "outside",
        }
    }
}

/// A run's place and the nearest validated region (absent only with no region at all).
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    pub place: Place,
    pub nearest: Option<Region>,
}

impl Checked {
    /// One line: `validated region: near (nearest: h200-linux e1 lru, budget 50%, batch 1,
    /// live granules 376–6141, Qwen/Qwen3-30B-A3B: median error -0.8% over 19 replays)`.
    pub fn line(&self) -> String {
        let nearest = self.nearest.as_ref().map_or(
            " (no validated region: docs/VALIDATION.md is empty)".to_string(),
            |r| {
                let live = r
                    .live_granules
                    .map_or("none live".to_string(), |[lo, hi]| {
                        format!("live granules {lo:.0}–{hi:.0}")
                    });
                format!(
                    " (nearest: {} {} {}, batch {}, {live}, {}: median error {:+.1}% over {} replays; docs/VALIDATION.md)",
                    r.gpu, r.mechanism, r.retention, r.batch, r.model, r.median_error_pct, r.rows
                )
            },
        );
        format!("validated region: {}{nearest}", self.place.name())
    }
}

/// The regions of the compiled-in docs/VALIDATION.md.
pub fn stored() -> Result<Vec<Region>, String> {
    parse(PAGE)
}

/// The regions of a coverage page (`coverage::markdown`'s table). Errors: the first table
/// line that does not read.
pub fn parse(page: &str) -> Result<Vec<Region>, String> {
    page.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| GPU profile "))
        .map(|l| row(l).ok_or_else(|| format!("coverage line does not read: {l}")))
        .collect()
}

/// One table line as a region.
fn row(line: &str) -> Option<Region> {
    let c: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
    let [gpu, model, trace, mechanism, retention, batch, live, rows, err, verdicts] = c[..] else {
        return None;
    };
    let live_granules = match live {
        "—" => None,
        s => {
            let (lo, hi) = s.split_once('–')?;
            Some([lo.parse().ok()?, hi.parse().ok()?])
        }
    };
    let v: Vec<usize> = verdicts
        .split(" / ")
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [pass, fail, undecided] = v[..] else {
        return None;
    };
    Some(Region {
        gpu: gpu.into(),
        model: model.into(),
        trace: trace.into(),
        mechanism: mechanism.into(),
        retention: retention.into(),
        batch: batch.parse().ok()?,
        live_granules,
        rows: rows.parse().ok()?,
        median_error_pct: err.strip_suffix('%')?.parse().ok()?,
        pass,
        fail,
        undecided,
    })
}

/// How far the run's live set lies past the region's range, as a factor (1: within it).
/// A region with none live maps nothing between steps (OS paging, streaming): 1 for a run
/// with none live or the same retention (its live set is the layer's own), else infinitely
/// far (a retained live set was not checked there); so is a run with none live against a
/// region with some.
fn stretch(r: &Region, run: &RunSetting) -> f64 {
    match (r.live_granules, run.live_granules) {
        (None, None) => 1.0,
        (None, Some(_)) if r.retention == run.retention => 1.0,
        (None, Some(_)) | (Some(_), None) => f64::INFINITY,
        (Some([lo, hi]), Some(x)) => (lo / x).max(x / hi).max(1.0),
    }
}

/// The place of `run` against one region.
fn place(r: &Region, run: &RunSetting) -> Place {
    let s = stretch(r, run);
    if r.gpu != run.gpu || r.mechanism != run.mechanism || s > 2.0 {
        Place::Outside
    } else if r.retention == run.retention && r.batch == run.batch && s == 1.0 {
        Place::Inside
    } else {
        Place::Near
    }
}

/// Where `run` lies against `regions`: its best place over them, and the nearest region
/// (best place, then same GPU, mechanism, retention, batch, then least live-set stretch, then the run's model;
/// the table's order breaks ties).
pub fn classify(regions: &[Region], run: &RunSetting) -> Checked {
    let key = |r: &Region| {
        (
            place(r, run),
            r.gpu != run.gpu,
            r.mechanism != run.mechanism,
            r.retention != run.retention,
            r.batch != run.batch,
        )
    };
    let nearest = regions
        .iter()
        .min_by(|a, b| {
            key(a)
                .cmp(&key(b))
                .then(stretch(a, run).total_cmp(&stretch(b, run)))
                .then((a.model != run.model).cmp(&(b.model != run.model)))
        })
        .cloned();
    Checked {
        place: nearest.as_ref().map_or(Place::Outside, |r| place(r, run)),
        nearest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# Where the model was checked\n\nprose\n\n\
| GPU profile | model | trace | mechanism | retention | batch | live granules | replays | median error | pass / fail / undecided |\n\
|---|---|---|---|---|---|---|---|---|---|\n\
| h200-linux | m | t.bin | e1 | lru, budget 50% | 1 | 400–6000 | 19 | -0.8% | 4 / 0 / 15 |\n\
| h200-linux | m | t.bin | e1 | streaming | 1 | — | 21 | -2.7% | 1 / 3 / 17 |\n\
| h200-linux | m | t.bin | os4k | streaming | 1 | — | 21 | +2.3% | 2 / 2 / 17 |\n\
| h200-linux | m2 | t2.bin | e1 | lru, budget 50% | 1 | 700–3000 | 2 | +4.1% | 2 / 0 / 0 |\n\
| h100-linux | m | t.bin | e1 | lru, budget 10% | 1 | 16000–16300 | 1 | -0.1% | 1 / 0 / 0 |\n";

    fn run(gpu: &str, mech: &str, ret: &str, batch: usize, live: Option<f64>) -> RunSetting {
        RunSetting {
            gpu: gpu.into(),
            mechanism: mech.into(),
            retention: ret.into(),
            batch,
            model: "m2".into(),
            live_granules: live,
        }
    }

    fn at(run: &RunSetting) -> (Place, String, String) {
        let c = classify(&parse(PAGE).unwrap(), run);
        let r = c.nearest.unwrap();
        (c.place, r.gpu, r.retention)
    }

    #[test]
    fn the_table_reads_back() {
        let r = parse(PAGE).unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(r[0].live_granules, Some([400.0, 6000.0]));
        assert_eq!((r[0].rows, r[0].median_error_pct), (19, -0.8));
        assert_eq!((r[1].pass, r[1].fail, r[1].undecided), (1, 3, 17));
        assert_eq!(r[1].live_granules, None);
        assert!(parse("| h200 | m | t | e1 | x | one | — | 1 | +1.0% | 1 / 0 / 0 |").is_err());
    }

    #[test]
    fn same_settings_within_the_live_range_is_inside() {
        let r = run("h200-linux", "e1", "lru, budget 50%", 1, Some(6000.0));
        let p = at(&r);
        assert_eq!(p.0, Place::Inside);
        assert_eq!(p.2, "lru, budget 50%");
        // inside two regions: the nearest is the one of the run's model (m2, +4.1%)
        let r = run("h200-linux", "e1", "lru, budget 50%", 1, Some(2000.0));
        let c = classify(&parse(PAGE).unwrap(), &r);
        assert_eq!(c.place, Place::Inside);
        assert_eq!(c.nearest.unwrap().median_error_pct, 4.1);
        // a streaming region maps none between steps: any live peak is inside
        let s = run("h200-linux", "e1", "streaming", 1, Some(90.0));
        assert_eq!(
            at(&s),
            (Place::Inside, "h200-linux".into(), "streaming".into())
        );
    }

    #[test]
    fn other_budget_batch_or_live_within_2x_is_near() {
        // 12,000 is 2x 6,000: near; 12,001 is past it
        let r = run("h200-linux", "e1", "lru, budget 50%", 1, Some(12_000.0));
        assert_eq!(at(&r).0, Place::Near);
        let r = run("h200-linux", "e1", "lru, budget 50%", 1, Some(12_001.0));
        assert_eq!(at(&r).0, Place::Outside);
        // 200 is half of 400: near
        let r = run("h200-linux", "e1", "lru, budget 50%", 1, Some(200.0));
        assert_eq!(at(&r).0, Place::Near);
        // another budget in range: near the LRU region (streaming's checked no retained set)
        let r = run("h200-linux", "e1", "lru, budget 25%", 1, Some(3000.0));
        assert_eq!(
            at(&r),
            (Place::Near, "h200-linux".into(), "lru, budget 50%".into())
        );
        // OS paging maps no granule: the OS-paged region's settings, another retention
        let r = run("h200-linux", "os4k", "lru, budget 50%", 1, None);
        assert_eq!(
            at(&r),
            (Place::Near, "h200-linux".into(), "streaming".into())
        );
        let r = run("h200-linux", "e1", "streaming", 4, Some(3000.0));
        assert_eq!(
            at(&r),
            (Place::Near, "h200-linux".into(), "streaming".into())
        );
    }

    #[test]
    fn another_gpu_or_mechanism_or_far_live_set_is_outside() {
        // the DeepSeek-V3 run: 41,000 live granules, 6.8x the largest measured
        let r = run("h200-linux", "e1", "lru, budget 25%", 1, Some(41_000.0));
        let c = classify(&parse(PAGE).unwrap(), &r);
        assert_eq!(c.place, Place::Outside);
        let n = c.nearest.unwrap();
        assert_eq!(
            (n.gpu.as_str(), n.live_granules),
            ("h200-linux", Some([400.0, 6000.0]))
        );
        let r = run(
            "rtx4060-laptop-wddm",
            "e1",
            "lru, budget 50%",
            1,
            Some(5000.0),
        );
        assert_eq!(at(&r).0, Place::Outside);
        let r = run("h200-linux", "e2", "lru, budget 50%", 1, Some(5000.0));
        assert_eq!(at(&r).0, Place::Outside);
        assert_eq!(classify(&[], &r).place, Place::Outside);
    }

    #[test]
    fn the_line_names_the_nearest_region_and_its_error() {
        let r = run("h100-linux", "e1", "lru, budget 10%", 1, Some(16_100.0));
        let line = classify(&parse(PAGE).unwrap(), &r).line();
        assert_eq!(
            line,
            "validated region: inside (nearest: h100-linux e1 lru, budget 10%, batch 1, \
             live granules 16000–16300, m: median error -0.1% over 1 replays; docs/VALIDATION.md)"
        );
    }

    #[test]
    fn the_stored_page_reads_and_matches_its_line_count() {
        // table lines of the compiled-in page, counted independently of `parse`
        let lines = super::PAGE.lines().filter(|l| l.starts_with("| h")).count();
        assert!(lines > 30, "{lines}");
        assert_eq!(stored().unwrap().len(), lines);
    }
}
