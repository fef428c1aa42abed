//! Retention options shared by `sim run`, `sim sweep` and `sim compare`: eviction policy,
//! budget, split, semantics, tiers, batching and scheduling.

use anyhow::{bail, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use policies::retention::POLICIES;
use policies::PolicyKind;
use sim::cache::RetentionConfig;
use sim::cache::{
    Batching, Budget, CacheConfig, DramConfig, DramMode, Schedule, Semantics, Split, StepSource,
};
use sim::grid::RetentionAxes;

/// Retention (cache regime) options. With no `--evict`/`--budget` the run is in the
/// streaming regime. `sim sweep` and `sim compare` accept comma-separated lists for --evict,
/// --budget, --batch and --split and run every combination; `sim run` takes one value of each.
#[derive(Args, Clone, Debug, Default)]
pub struct CacheArgs {
    // Help: the registry's policies (see `evict_help`).
    #[arg(long, value_delimiter = ',', value_name = "POLICY", help = evict_help(),
          value_parser = parse_evict)]
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

    /// Add an LRU DRAM tier of this size behind VRAM (same forms as --budget, over the same
    /// bank; exclusive, or the page cache with --dram-mode page-cache), with SSD behind it;
    /// reports DRAM hits and SSD compulsory/capacity reads. With --hw, a DRAM hit costs its
    /// H2D copy and an SSD read first the NVMe read at host_ssd_read_bandwidth (a host
    /// profile's, --hw-host), per-tier time in the timing.
    #[arg(long, value_name = "BUDGET", allow_hyphen_values = true, value_parser = |s: &str| Budget::parse(s))]
    pub dram: Option<Budget>,

    /// How the DRAM tier of --dram holds experts: pinned (default; an exclusive LRU of
    /// pinned host memory, copies at h2d_bandwidth) or page-cache (llama.cpp's default mmap:
    /// the tier is the OS page cache of the expert file, an inclusive LRU; copies from
    /// pageable memory at h2d_pageable_bandwidth, a miss first reads the SSD). One value,
    /// also in `sim sweep` and `sim compare` (run once per mode).
    #[arg(long, value_name = "MODE", value_parser = parse_dram_mode)]
    pub dram_mode: Option<DramMode>,

    /// Sequences decoded together (W): each layer accesses the union of their selections
    /// once per step. Requests are the trace's tokens interleaved round-robin across
    /// sequences. `sim sweep` and `sim compare` take a comma-separated list. Default 1.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "W",
        allow_negative_numbers = true
    )]
    pub batch: Vec<usize>,

    /// Waiting requests the scheduler may choose among (Q >= W); adds a `schedule` block
    /// (unions per token, dispatch delay p50/p99/max).
    #[arg(long, value_name = "Q", allow_negative_numbers = true)]
    pub queue: Option<usize>,

    /// How batches are formed: fifo (consecutive requests) or route-aware (from the Q oldest
    /// waiting: the oldest, then the request that grows the batch's union of units least,
    /// ties to the earliest arrival).
    #[arg(long, default_value = "fifo", value_name = "SCHEDULE",
          value_parser = PossibleValuesParser::new(["fifo", "route-aware"]).map(|s| parse_schedule(&s)))]
    pub schedule: Schedule,

    /// How steps are formed: recorded (the trace's own forward passes, each one step holding
    /// exactly its rows; the default for a trace with passes), continuous (the passes of a
    /// continuous-batching scheduler with chunked prefill, as vLLM's: give --max-seqs and
    /// --max-batched-tokens) or fixed (round-robin batches of --batch; the default
    /// otherwise, and with --batch, --queue, --admission-cap or several tokens per step).
    /// Timed runs and `sim sweep` and `sim compare` grids step the same way.
    #[arg(long, value_name = "MODE",
          value_parser = PossibleValuesParser::new(["recorded", "continuous", "fixed"]))]
    pub batching: Option<String>,

    /// With --batching continuous: requests running at once (vLLM's max_num_seqs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_seqs: Option<u32>,

    /// With --batching continuous: tokens per forward pass, prompt chunks and decode tokens
    /// together (vLLM's max_num_batched_tokens).
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_batched_tokens: Option<u32>,

    /// Seed of the random policy (PCG64; each per-layer pool uses its own stream).
    #[arg(
        long,
        default_value_t = 0,
        value_name = "SEED",
        allow_negative_numbers = true
    )]
    pub seed: u64,

    /// Inverse question: the smallest budget whose transfer floor
    /// (link bandwidth / bytes per token) reaches this many tokens per second. Needs
    /// --link-gbps and --evict, and no --budget (the search picks it).
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

/// One `--evict` value as given, once checked: `all` or a registered policy's name or alias
/// (a usage error otherwise, as a bad `--budget` is).
fn parse_evict(s: &str) -> Result<String, String> {
    if !s.trim().eq_ignore_ascii_case("all") {
        PolicyKind::parse(s).map_err(|m| format!("{m}, or all"))?;
    }
    Ok(s.to_string())
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

/// `--dram-mode`'s value: one mode; a list is refused (not a grid axis).
fn parse_dram_mode(s: &str) -> Result<DramMode, String> {
    match s.trim() {
        "pinned" => Ok(DramMode::Pinned),
        "page-cache" => Ok(DramMode::PageCache),
        v if v.contains(',') => Err(format!(
            "`{v}`: --dram-mode takes one mode, not a list (it is not a grid axis); run once per mode"
        )),
        v => Err(format!("`{v}`: the modes are pinned and page-cache")),
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

/// Budgets of the default sweep grid: 10, 25, 50, 75 and 90% of the bank.
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
            && (self.dram.is_some()
                || !self.batch.is_empty()
                || self.queue.is_some()
                || self.batching.is_some()
                || self.max_seqs.is_some()
                || self.max_batched_tokens.is_some())
        {
            bail!("--dram, --batch, --batching (and its --max-seqs, --max-batched-tokens) and --queue apply to the cache regime; add --evict POLICY and --budget B");
        }
        if let (Some(mode), None) = (self.dram_mode, &self.dram) {
            bail!(
                "--dram-mode {} sets how the DRAM tier holds experts: add --dram B (its size, e.g. --dram 50%)",
                mode.as_str()
            );
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
                dram: self.dram.clone().map(|budget| DramConfig {
                    budget,
                    mode: self.dram_mode.unwrap_or_default(),
                }),
                seed: self.seed,
            },
            batching: Batching {
                batch,
                queue: self.queue,
                schedule: self.schedule,
                ..Batching::default()
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

    /// Where `sim run`'s steps come from: `--batching` as given (recorded refused on a trace
    /// without passes; recorded and continuous refused with --batch, --queue or
    /// --admission-cap (`capped`), which size round-robin batches, and with several tokens per
    /// step (`stepped`), which the passes fix), else recorded passes when the trace has them
    /// and none of those is given, timed or not, else round-robin batches.
    pub fn source(&self, has_passes: bool, stepped: bool, capped: bool) -> Result<StepSource> {
        let mode = self.batching.as_deref();
        let limits = (self.max_seqs, self.max_batched_tokens);
        if mode != Some("continuous") && limits != (None, None) {
            bail!("--max-seqs and --max-batched-tokens are the limits of --batching continuous; add it, or leave them out");
        }
        let fixed_flags = !self.batch.is_empty() || self.queue.is_some();
        if let Some(m) = mode.filter(|&m| m != "fixed") {
            if fixed_flags {
                bail!("--batching {m} forms its own passes: leave out --batch and --queue, or give --batching fixed");
            }
            if capped {
                bail!("--batching {m} forms its own passes, and --admission-cap searches the batch size of round-robin batches: leave out --admission-cap, or give --batching fixed");
            }
            if stepped {
                bail!("--batching {m} forms its own passes, each row one token: leave out the step flags (--verify, --prefill-chunk), or give --batching fixed");
            }
        }
        Ok(match mode {
            Some("recorded") if !has_passes => bail!(
                "--batching recorded: the trace records no forward passes (import a log whose position field restarts at each pass, or schedule passes with --batching continuous)"
            ),
            Some("recorded") => StepSource::Recorded,
            Some("continuous") => match limits {
                (Some(max_seqs), Some(max_batched_tokens)) => {
                    StepSource::Continuous(sim::cache::continuous::Continuous {
                        max_seqs,
                        max_batched_tokens,
                    })
                }
                _ => bail!("--batching continuous needs --max-seqs N and --max-batched-tokens T (e.g. vLLM's max_num_seqs and max_num_batched_tokens)"),
            },
            Some(_) => StepSource::Fixed,
            None if has_passes && !fixed_flags && !stepped && !capped => StepSource::Recorded,
            None => StepSource::Fixed,
        })
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
