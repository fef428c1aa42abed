//! `sim validate --measured FILE`: checks that a stored replay was made with this run's trace,
//! expert size, retention settings, policies and steps, naming the flag that fixes a mismatch.

use anyhow::{bail, Result};
use sim::cache::Budget;
use sim::validation::{parse_retention_echo, same_trace, Validation};

/// A legacy `retention` echo read back as `(text, flags)`: `Lru@Fraction { num: 50, den:
/// 100 }` -> (`lru, budget 50%`, `--evict lru --budget 50%`); `None` for `streaming` or a
/// form this build does not write.
pub(super) fn legacy_retention(echo: &str) -> Option<(String, String)> {
    let (kind, budget) = parse_retention_echo(echo)?;
    // the Display of a byte or unit budget is not a flag value; give the flag's own form
    let b = match &budget {
        Budget::Units(n) => n.to_string(),
        Budget::Bytes(n) => format!("{n}B"),
        f => f.to_string(),
    };
    Some((
        format!("{}, budget {budget}", kind.name()),
        format!("--evict {} --budget {b}", kind.name()),
    ))
}

/// What this run would record, to hold against a `--measured` file: its header and, per
/// policy in order, `(policy, steps, page_ins)`.
pub struct RunEcho<'a> {
    pub header: &'a Validation,
    pub rows: Vec<(String, usize, u64)>,
}

/// Refuse a stored replay whose step times cannot be a measurement (a damaged or edited file):
/// every repetition of every row must hold one time per step of the row, each finite and above
/// 0 µs, and every row the same number of repetitions (`sim validate` replays each policy
/// `--repeat` times).
pub fn check_step_data(path: &std::path::Path, stored: &Validation) -> Result<()> {
    let f = path.display();
    let fix = "the file is damaged or was edited: write it again with `sim validate --json --out`";
    if stored.rows.is_empty() {
        bail!("--measured {f} holds no policy rows; {fix}");
    }
    let mut first: Option<(&str, usize)> = None;
    for r in &stored.rows {
        let reps: Vec<&[f64]> = if r.repetitions.is_empty() {
            vec![&r.replay.step_us]
        } else {
            r.repetitions.iter().map(|x| x.step_us.as_slice()).collect()
        };
        for (i, times) in reps.iter().enumerate() {
            if r.steps == 0 || times.len() != r.steps {
                bail!(
                    "--measured {f}: --policy {} repetition {} holds {} step times for its {} steps; {fix}",
                    r.policy, i + 1, times.len(), r.steps
                );
            }
            if let Some(t) = times.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
                bail!(
                    "--measured {f}: --policy {} repetition {} holds a step time of {t} µs (a step takes a positive, finite time); {fix}",
                    r.policy, i + 1
                );
            }
        }
        match first {
            None => first = Some((&r.policy, reps.len())),
            Some((policy, n)) if n != reps.len() => bail!(
                "--measured {f}: --policy {policy} holds {}, --policy {} {}; {fix}",
                reports::metrics::count(n as u64, "repetition"),
                r.policy,
                reports::metrics::count(reps.len() as u64, "repetition")
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

/// Refuse to re-price `stored` (the validation block of `path`) for a run that differs from
/// it: another trace or model, expert size, retention, policy list or order, steps, or (the
/// backstop for settings older files do not record, such as --batch) other page-ins. Each
/// error names what differs and the flag that fixes it.
pub fn check_same_run(path: &std::path::Path, stored: &Validation, now: &RunEcho) -> Result<()> {
    let f = path.display().to_string();
    check_same_model(&f, stored, now.header)?;
    check_same_retention(&f, stored, now.header)?;
    check_same_rows(&f, stored, now)
}

/// The trace, model, expert size and VMM granule of `stored` against this run's header `h`.
fn check_same_model(f: &str, stored: &Validation, h: &Validation) -> Result<()> {
    if !same_trace(&stored.trace, &h.trace) || stored.model != h.model {
        bail!(
            "--measured {f} was replayed on trace '{}' (model {}), this run reads '{}' (model {}): pass --trace {}",
            stored.trace, stored.model, h.trace, h.model, stored.trace
        );
    }
    if stored.expert_bytes != h.expert_bytes {
        let mib = |b: u64| b as f64 / sim::MIB;
        bail!(
            "--measured {f} was replayed with experts of {} MiB ({} bytes), this run's are {} MiB ({} bytes): pass --expert-mib {} (or the --dtype it was recorded with)",
            mib(stored.expert_bytes), stored.expert_bytes, mib(h.expert_bytes), h.expert_bytes, mib(stored.expert_bytes)
        );
    }
    if let (Some(was), Some(is)) = (stored.vmm_granule_bytes, h.vmm_granule_bytes) {
        if was != is {
            let mib = |b: u64| b as f64 / sim::MIB;
            bail!(
                "--measured {f} was replayed with VMM granules of {} MiB, this run's are {} MiB: pass --granule-mib {}",
                mib(was), mib(is), mib(was)
            );
        }
    }
    Ok(())
}

/// The retention of `stored` against this run's header `h`: the echo, then (in files that
/// record them) the settings flag by flag.
fn check_same_retention(f: &str, stored: &Validation, h: &Validation) -> Result<()> {
    let stored_text = |v: &Validation| {
        if !v.retention_text.is_empty() {
            v.retention_text.clone()
        } else {
            legacy_retention(&v.retention).map_or(v.retention.clone(), |(text, _)| text)
        }
    };
    if stored.retention != h.retention {
        let fix = match (&stored.retention_settings, stored.retention.as_str()) {
            (_, "streaming") => "leave out --evict and --budget (streaming)".to_string(),
            (Some(st), _) => format!("pass --evict {} --budget {}", st.evict, st.budget),
            (None, echo) => match legacy_retention(echo) {
                Some((_, flags)) => format!("pass {flags}"),
                None => "pass the --evict and --budget it was recorded with".into(),
            },
        };
        bail!(
            "--measured {f} was replayed under retention {}, this run has {}: {fix}",
            stored_text(stored),
            h.retention_text
        );
    }
    if let (Some(st), Some(now_st)) = (&stored.retention_settings, &h.retention_settings) {
        let pairs = [
            ("--split", st.split.clone(), now_st.split.clone()),
            (
                "--semantics",
                st.semantics.clone(),
                now_st.semantics.clone(),
            ),
            ("--batch", st.batch.to_string(), now_st.batch.to_string()),
            ("--schedule", st.schedule.clone(), now_st.schedule.clone()),
            (
                "--queue",
                st.queue.map_or("(none)".into(), |q| q.to_string()),
                now_st.queue.map_or("(none)".into(), |q| q.to_string()),
            ),
        ];
        for (flag, a, b) in pairs {
            if a != b {
                bail!("--measured {f} was replayed with {flag} {a}, this run has {flag} {b}: pass {flag} {a} (retention {})", st.text());
            }
        }
    }
    Ok(())
}

/// The policies (in order), steps and page-ins of `stored` against this run's rows.
fn check_same_rows(f: &str, stored: &Validation, now: &RunEcho) -> Result<()> {
    let names = |v: Vec<&str>| v.join(",");
    let stored_policies = names(stored.rows.iter().map(|r| r.policy.as_str()).collect());
    let now_policies = names(now.rows.iter().map(|r| r.0.as_str()).collect());
    if stored_policies != now_policies {
        bail!(
            "--measured {f} was replayed with --policy {stored_policies} (in this order: the repetitions interleave them), this run has --policy {now_policies}: pass --policy {stored_policies}"
        );
    }
    for (r, (policy, steps, page_ins)) in stored.rows.iter().zip(&now.rows) {
        if r.steps != *steps {
            bail!(
                "--measured {f} measured {} steps of --policy {policy}, this run predicts {steps}: pass --steps {}",
                r.steps, r.steps
            );
        }
        if r.page_ins != *page_ins {
            bail!(
                "--measured {f}: --policy {policy} paged in {} units over its {steps} steps there, {page_ins} in this run: the plans differ, so the trace's content or a setting the file does not record (--batch, --split, --semantics, --queue, --schedule, --granule-mib, --phase) is not the one it was recorded with; pass those",
                r.page_ins
            );
        }
    }
    Ok(())
}
