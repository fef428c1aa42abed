//! Retention options shared by `sim run`, `sim sweep` and `sim compare`: eviction policy,
//! budget, split, semantics, tiers, batching and scheduling.

use anyhow::{bail, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use policies::retention::POLICIES;
use policies::PolicyKind;
use reports::metrics::count;
use sim::cache::RetentionConfig;
use sim::cache::{Batching, Budget, CacheConfig, Schedule, Semantics, Split};
use sim::grid::RetentionAxes;

/// Retention (cache regime) options. With no `--evict`/`--budget` the run is in the
/// streaming regime. `sim sweep` and `sim compare` accept comma-separated lists for --evict,
/// --budget, --batch and --split and run every combination; `sim run` takes one value of each.
#[derive(Args, Clone, Debug, Default)]
pub struct CacheArgs {
    // Help: the registry's policies (see `evict_help`).
    #[arg(long, value_delimiter = ',', value_name = "POLICY", help = evict_help())]
    pub evict: Vec<String>,

    /// VRAM budget for expert units: a percentage of the bank (`25%`, rounds to
    /// max(1, round-half-even(r x units))), a unit count (`192`) or bytes (`3GiB`, `512MiB`;
    /// floor(bytes / largest unit's committed bytes) units). `sim sweep` and `sim compare` take
    /// a comma-separated list (`sim sweep`'s default: 10%,25%,50%,75%,90%).
    #[arg(long, value_delimiter = ',', value_name = "BUDGET", allow_hyphen_values = true,
          value_parser = |s: &str| Budget::parse(s))]
    pub budget: Vec<Budget>,

    /// How the budget is shared: global (one pool for all layers) or per-layer (each MoE
    /// layer gets round(fraction x its units) slots). `sim sweep` and `sim compare` take a
    /// comma-separated list (defaults: global,per-layer in `sim sweep`, global in `sim run` and
    /// `sim compare`).
    #[arg(long, value_delimiter = ',', value_name = "SPLIT",
          value_parser = PossibleValuesParser::new(["global", "per-layer"]).map(|s| parse_split(&s)))]
    pub split: Vec<Split>,

    /// When eviction is checked: group (default; a (step, layer) group's units are admitted
    /// together and protected from eviction while the budget is restored) or access (after
    /// every single access, no protection, like ordinary cache simulators).
    #[arg(long, default_value = "group", value_name = "SEMANTICS",
          value_parser = PossibleValuesParser::new(["group", "access"]).map(|s| parse_semantics(&s)))]
    pub semantics: Semantics,

    /// Add an exclusive LRU DRAM tier of this size behind VRAM (same forms as --budget, over
    /// the same bank), with SSD behind it; reports DRAM hits and SSD compulsory/capacity reads.
    #[arg(long, value_name = "BUDGET", allow_hyphen_values = true, value_parser = |s: &str| Budget::parse(s))]
    pub dram: Option<Budget>,

    /// Sequences decoded together (W): each layer accesses the union of their selections
    /// once per step. Requests are the trace's tokens interleaved round-robin across
    /// sequences. `sim sweep` and `sim compare` take a comma-separated list. Default 1.
    #[arg(long, value_delimiter = ',', value_name = "W")]
    pub batch: Vec<usize>,

    /// Waiting requests the scheduler may choose among (Q >= W); adds a `schedule` block
    /// (unions per token, dispatch delay p50/p99/max).
    #[arg(long, value_name = "Q")]
    pub queue: Option<usize>,

    /// How batches are formed: fifo (consecutive requests) or route-aware (from the Q oldest
    /// waiting: the oldest, then the request that grows the batch's union of units least,
    /// ties to the earliest arrival).
    #[arg(long, default_value = "fifo", value_name = "SCHEDULE",
          value_parser = PossibleValuesParser::new(["fifo", "route-aware"]).map(|s| parse_schedule(&s)))]
    pub schedule: Schedule,

    /// Seed of the random policy (PCG64; each per-layer pool uses its own stream).
    #[arg(long, default_value_t = 0, value_name = "SEED")]
    pub seed: u64,

    /// Inverse question (`sim run`): the smallest budget whose transfer floor
    /// (link bandwidth / bytes per token) reaches this many tokens per second. Needs
    /// --link-gbps and --evict; --budget is not used.
    #[arg(
        long,
        value_name = "TOKENS_PER_S",
        requires = "link_gbps",
        allow_negative_numbers = true
    )]
    pub target_tokens_per_s: Option<f64>,

    /// Host-to-device link bandwidth in GB/s (10^9 bytes/s) for --target-tokens-per-s.
    #[arg(
        long,
        value_name = "GBPS",
        requires = "target_tokens_per_s",
        allow_negative_numbers = true
    )]
    pub link_gbps: Option<f64>,
}

/// The `--evict` help, from the policy registry: every name with its help note, then what
/// `all` runs.
fn evict_help() -> String {
    format!(
        "Retention policy: {}. `sim sweep` and `sim compare` take a comma-separated list; \
         `sim run` takes one",
        policy_values()
    )
}

/// The registered policies as a help list: `belady (offline MIN, the bound), lru, ...`.
pub fn policy_names() -> String {
    let names: Vec<String> = POLICIES
        .iter()
        .map(|e| match e.help_note {
            Some(n) => format!("{} ({n})", e.name),
            None => e.name.to_string(),
        })
        .collect();
    names.join(", ")
}

/// [`policy_names`] and what `all` runs: `...; `all` for every one` (naming the policies
/// `all` leaves out, if any).
pub fn policy_values() -> String {
    let outside: Vec<&str> = POLICIES
        .iter()
        .filter(|e| !e.in_all)
        .map(|e| e.name)
        .collect();
    if outside.is_empty() {
        format!("{}; `all` for every one", policy_names())
    } else {
        format!(
            "{}; `all` for every one but {}",
            policy_names(),
            outside.join(", ")
        )
    }
}

fn parse_split(s: &str) -> Split {
    if s == "per-layer" {
        Split::PerLayer
    } else {
        Split::Global
    }
}

fn parse_semantics(s: &str) -> Semantics {
    if s == "access" {
        Semantics::Access
    } else {
        Semantics::Group
    }
}

fn parse_schedule(s: &str) -> Schedule {
    if s == "route-aware" {
        Schedule::RouteAware
    } else {
        Schedule::Fifo
    }
}

/// Budgets of the default sweep grid (issue 4): 10, 25, 50, 75 and 90% of the bank.
pub const DEFAULT_SWEEP_BUDGETS: [u128; 5] = [10, 25, 50, 75, 90];

impl CacheArgs {
    /// The policies named by --evict (`all` expands to the registry's `all` set), without
    /// repeats.
    pub fn policies(&self) -> Result<Vec<PolicyKind>> {
        let mut out = Vec::new();
        for e in &self.evict {
            let kinds = if e.trim().eq_ignore_ascii_case("all") {
                PolicyKind::evict_all().collect()
            } else {
                vec![PolicyKind::parse(e).map_err(|m| anyhow::anyhow!("--evict: {m}"))?]
            };
            for k in kinds {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
        Ok(out)
    }

    /// True when any retention option asks for the cache regime.
    pub fn wants_cache(&self) -> bool {
        !self.evict.is_empty() || !self.budget.is_empty() || self.target_tokens_per_s.is_some()
    }

    fn check_common(&self) -> Result<()> {
        if !self.wants_cache()
            && (self.dram.is_some() || !self.batch.is_empty() || self.queue.is_some())
        {
            bail!("--dram, --batch and --queue apply to the cache regime; add --evict POLICY and --budget B");
        }
        if self.batch.contains(&0) {
            bail!("--batch 0: a batch holds at least one request");
        }
        if let Some(q) = self.queue {
            for &w in &self.batch {
                if q < w {
                    bail!("--queue {q} is smaller than --batch {w}: the scheduler picks a batch among the queue, so give --queue >= --batch");
                }
            }
        }
        if self.schedule == Schedule::RouteAware && self.queue.is_none() {
            bail!("--schedule route-aware picks among waiting requests: give --queue Q (Q >= --batch)");
        }
        Ok(())
    }

    fn retention(
        &self,
        policy: PolicyKind,
        budget: Budget,
        split: Split,
        batch: usize,
    ) -> RetentionConfig {
        RetentionConfig {
            cache: CacheConfig {
                policy,
                budget,
                split,
                semantics: self.semantics,
                dram: self.dram.clone(),
                seed: self.seed,
            },
            batching: Batching {
                batch,
                queue: self.queue,
                schedule: self.schedule,
            },
            target: self.target_tokens_per_s.zip(self.link_gbps),
        }
    }

    /// The retention configuration of `sim run` (one value per option), or `None` for the
    /// streaming regime.
    pub fn for_run(&self) -> Result<Option<RetentionConfig>> {
        self.check_common()?;
        if !self.wants_cache() {
            return Ok(None);
        }
        let one = |n: usize, flag: &str| -> Result<()> {
            if n > 1 {
                bail!("`sim run` takes one {flag} value; use `sim sweep` for lists");
            }
            Ok(())
        };
        let policies = self.policies()?;
        one(policies.len(), "--evict")?;
        one(self.budget.len(), "--budget")?;
        one(self.split.len(), "--split")?;
        one(self.batch.len(), "--batch")?;
        let Some(&policy) = policies.first() else {
            bail!("--budget needs --evict POLICY (e.g. --evict lru)");
        };
        let budget = match (self.budget.first(), self.target_tokens_per_s) {
            (Some(b), None) => b.clone(),
            (Some(_), Some(_)) => {
                bail!("--target-tokens-per-s searches the budget; leave out --budget")
            }
            (None, Some(_)) => Budget::Units(1),
            (None, None) => bail!("--evict needs --budget (e.g. --budget 25%, 192 or 3GiB)"),
        };
        let split = self.split.first().copied().unwrap_or_default();
        let batch = self.batch.first().copied().unwrap_or(1);
        Ok(Some(self.retention(policy, budget, split, batch)))
    }

    /// The retention grid of `sim sweep`, nested policy > budget > split > batch; `None` for
    /// the streaming regime. Belady (the offline bound) is always included, first; splits
    /// default to global and per-layer, budgets to 10,25,50,75,90%.
    pub fn for_sweep(&self) -> Result<Option<Vec<RetentionConfig>>> {
        self.check_common()?;
        if self.target_tokens_per_s.is_some() {
            bail!("--target-tokens-per-s is a `sim run` option");
        }
        if !self.wants_cache() {
            return Ok(None);
        }
        let mut policies = self.policies()?;
        if policies.is_empty() {
            bail!("--budget needs --evict POLICY[,POLICY...] (or --evict all)");
        }
        if !policies.contains(&PolicyKind::Belady) {
            policies.insert(0, PolicyKind::Belady);
        }
        let budgets: Vec<Budget> = if self.budget.is_empty() {
            DEFAULT_SWEEP_BUDGETS
                .iter()
                .map(|&p| Budget::Fraction { num: p, den: 100 })
                .collect()
        } else {
            self.budget.clone()
        };
        let splits = if self.split.is_empty() {
            vec![Split::Global, Split::PerLayer]
        } else {
            self.split.clone()
        };
        let batches = if self.batch.is_empty() {
            vec![1]
        } else {
            self.batch.clone()
        };
        let axes = RetentionAxes {
            policies,
            budgets,
            splits,
            batches,
        };
        // the template's policy, budget, split and batch are replaced by every combination
        let template = self.retention(PolicyKind::Belady, Budget::Units(1), Split::Global, 1);
        let out = axes.configs(&template);
        Ok(Some(out))
    }
}

/// The human-readable cache, tiers, schedule and target blocks of a run (empty in the
/// streaming regime).
pub fn retention_summary(r: &sim::runner::RunReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let (Some(i), Some(c)) = (&r.retention, &r.cache) else {
        return s;
    };
    let _ = writeln!(
        s,
        "\ncache regime: evict {}  budget {} ({} split)  semantics {}  batch {}",
        i.evict,
        // a budget given as a unit count is its own resolution: say it once, unless the
        // per-layer split's pools (at least one unit each, shares rounded) sum to another count
        match i.budget {
            Budget::Units(n) if n == c.budget_units => i.budget.to_string(),
            Budget::Units(_) =>
                format!("{}, pools hold {}", i.budget, count(c.budget_units, "unit")),
            _ => format!("{} = {}", i.budget, count(c.budget_units, "unit")),
        },
        i.split.name(),
        i.semantics.name(),
        i.batch
    );
    let rows = [
        ("tokens", c.tokens.to_string(), "requests decoded"),
        (
            "accesses",
            c.accesses.to_string(),
            "unit accesses (one per unit per group)",
        ),
        (
            "page-ins",
            c.page_ins.to_string(),
            "accesses to a non-resident unit",
        ),
        (
            "page-ins/token",
            format!("{:.3}", c.page_ins_per_token),
            "page-ins / tokens",
        ),
        (
            "miss rate",
            format!("{:.2} %", c.miss_rate * 100.0),
            "page-ins / accesses",
        ),
        (
            "bytes/token",
            format!("{:.3} MiB", c.bytes_per_token / sim::MIB),
            "useful bytes paged in per token (H2D)",
        ),
        (
            "evictions",
            c.evictions.to_string(),
            "resident units dropped to make room",
        ),
        (
            "peak resident",
            format!("{:.1} MiB", c.peak_resident_mib),
            "committed bytes, after each group/access",
        ),
    ];
    super::run::write_rows(&mut s, rows);
    if let Some(t) = &r.tiers {
        s += &tiers_summary(t, i, c.tokens);
    }
    if let Some(q) = &r.schedule {
        s += &schedule_summary(q, i);
    }
    if let Some(t) = &r.target {
        s += &target_summary(t, i);
    }
    s
}

/// The DRAM/SSD tier lines of a run summary.
fn tiers_summary(
    t: &sim::cache::TiersReport,
    i: &sim::cache::RetentionInputs,
    tokens: u64,
) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let per = |x: u64| x as f64 / tokens.max(1) as f64;
    let _ = writeln!(
        s,
        "tiers (DRAM {} behind VRAM, SSD behind DRAM):",
        i.dram.as_ref().map_or(String::new(), |d| d.to_string())
    );
    for (k, v) in [
        ("DRAM hits", t.dram_hits),
        ("SSD compulsory", t.ssd_compulsory),
        ("SSD capacity", t.ssd_capacity),
    ] {
        let _ = writeln!(s, "  {k:<17} {v:>12}   {:.3} per token", per(v));
    }
    s
}

/// The scheduling line of a run summary (with `--queue`).
fn schedule_summary(q: &sim::cache::ScheduleReport, i: &sim::cache::RetentionInputs) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "schedule ({}, queue {}):\n  unions/token {:.3}   dispatch delay p50 {}  p99 {}  max {}",
        match i.schedule {
            Schedule::Fifo => "fifo",
            Schedule::RouteAware => "route-aware",
        },
        i.queue.unwrap_or(0),
        q.unions_per_token,
        q.delay_p50,
        q.delay_p99,
        q.delay_max
    );
    s
}

/// The target-search line of a run summary (with `--target-tokens-per-s`).
fn target_summary(t: &sim::cache::TargetReport, i: &sim::cache::RetentionInputs) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    match t.budget_units {
        Some(u) => {
            let _ = writeln!(
                s,
                "target {} tokens/s over {} GB/s: smallest budget {} units ({} search, {} runs); transfer floor {}",
                t.target_tokens_per_s,
                t.link_gbps,
                u,
                t.search,
                t.evaluations,
                t.tokens_per_s
                    .map_or("unbounded (nothing crosses the link)".to_string(), |x| format!("{x:.1} tokens/s"))
            );
        }
        None => {
            let _ = writeln!(
                s,
                "target {} tokens/s over {} GB/s: not reachable with {}; even the whole bank moves {:.3} MiB per token ({:.1} tokens/s)",
                t.target_tokens_per_s,
                t.link_gbps,
                i.evict,
                t.bytes_per_token / sim::MIB,
                t.tokens_per_s.unwrap_or(f64::INFINITY)
            );
        }
    }
    s
}

/// The `sim sweep` table of a retention grid: one row per (mechanism, policy, budget,
/// split, batch), Belady's bound first within each mechanism.
pub fn retention_table(reports: &[sim::runner::RunReport]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let Some(r) = reports.first() {
        let i = &r.inputs;
        let _ = writeln!(
            s,
            "{}, expert {:.3} MiB; cache regime, semantics {}",
            i.trace_text(),
            i.expert_mib,
            r.retention.as_ref().map_or("", |x| x.semantics.name())
        );
    }
    let tiers = reports.iter().any(|r| r.tiers.is_some());
    let sched = reports.iter().any(|r| r.schedule.is_some());
    s += &retention_table_header(tiers, sched);
    for r in reports {
        if let Some(row) = retention_table_row(r) {
            let _ = writeln!(s, "{row}");
        }
    }
    s
}

/// The header line of [`retention_table`], with the tier and schedule columns when any row
/// has them.
fn retention_table_header(tiers: bool, sched: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<10} {:<10} {:>8} {:<9} {:>5} {:>6} {:>9} {:>8} {:>11} {:>9} {:>9}",
        "mechanism",
        "evict",
        "budget",
        "split",
        "batch",
        "units",
        "pgin/tok",
        "miss %",
        "MiB/token",
        "evictions",
        "peak MiB"
    );
    if tiers {
        let _ = write!(s, " {:>9} {:>9} {:>9}", "dram hit", "ssd comp", "ssd cap");
    }
    if sched {
        let _ = write!(
            s,
            " {:>9} {:>5} {:>5} {:>5}",
            "union/tok", "d p50", "d p99", "d max"
        );
    }
    let _ = writeln!(s);
    s
}

/// One row of [`retention_table`] (without its newline); `None` in the streaming regime.
fn retention_table_row(r: &sim::runner::RunReport) -> Option<String> {
    use std::fmt::Write;
    let (Some(i), Some(c)) = (&r.retention, &r.cache) else {
        return None;
    };
    let mut s = format!(
        "{:<10} {:<10} {:>8} {:<9} {:>5} {:>6} {:>9.3} {:>8.2} {:>11.3} {:>9} {:>9.1}",
        r.inputs.policy,
        i.evict.name(),
        i.budget.to_string(),
        match i.split {
            Split::Global => "global",
            Split::PerLayer => "per-layer",
        },
        i.batch,
        c.budget_units,
        c.page_ins_per_token,
        c.miss_rate * 100.0,
        c.bytes_per_token / sim::MIB,
        c.evictions,
        c.peak_resident_mib
    );
    if let Some(t) = &r.tiers {
        let _ = write!(
            s,
            " {:>9} {:>9} {:>9}",
            t.dram_hits, t.ssd_compulsory, t.ssd_capacity
        );
    }
    if let Some(q) = &r.schedule {
        let _ = write!(
            s,
            " {:>9.3} {:>5} {:>5} {:>5}",
            q.unions_per_token, q.delay_p50, q.delay_p99, q.delay_max
        );
    }
    Some(s)
}
