//! `sim calibrate`: measure the cost constants on the local GPU and write a hardware profile.

use super::args_input::{emit, write_atomic};
use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

/// Arguments of `sim calibrate`.
#[derive(Args)]
pub struct CalibrateArgs {
    /// Where to write the hardware profile (JSON, the `profile` crate's schema). The full
    /// measurement set is written beside it as `<stem>.measurements.json`. The full
    /// calibration also runs the host arms and writes the host profile `<stem>-host.json`
    /// (named `<name>-host`, for `--hw-host`) with its own `<stem>-host.measurements.json`.
    #[arg(long, value_name = "FILE.json")]
    pub out: PathBuf,
    /// Fast pass: 3 repetitions, fewer sizes and fill levels (a fraction of the full pass).
    #[arg(long)]
    pub quick: bool,
    /// Name stored in the profile (what `--hw` and `sim profile show` refer to).
    #[arg(long, default_value = "calibrated")]
    pub name: String,
    /// CUDA device ordinal to calibrate.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Seed of the random expert choices of the kernel measurements.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Print the full measurement set as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Measure only one part. `kernels`: only the expert kernels (about 11 s on an H200): the
    /// streaming-read reference, every kernel variant that compiles, and the default kernel on
    /// 8 layers timed one at a time and back to back as a decoder enqueues them; writes those
    /// measurements (JSON, not a hardware profile) to --out.
    ///
    /// `host`: no GPU needed (the CUDA driver is not loaded): the host CPU's int4 and bf16
    /// expert kernels against expert bytes, tokens (1, 4, 16) and threads (1, all), the
    /// memory read bandwidth and, with --ssd-path, file reads; writes a host profile to --out
    /// and the measurement set beside it (about 25 s on a 2-core machine; --quick: 1 s).
    ///
    /// `live-set`: only the live-set VMM arm (per-unit commit and decommit against the
    /// granules already mapped, GPU idle and with reads in flight, in randomised blocks with
    /// a host probe before each) at --live-set-levels; writes the arm (JSON) to --out.
    #[arg(long, value_enum, value_name = "PART")]
    pub only: Option<CalibratePart>,
    /// With `--only live-set`: the live sets to measure, comma-separated, each a number of
    /// granules or a percentage of the VRAM free at the start (`90%`). Levels that leave no
    /// room for the measured unit, the reads and 512 MiB are skipped and recorded. Default:
    /// 0,1024,4096,16384,32768,90% (about 2 minutes on an H100 if the price stays flat).
    #[arg(long, value_name = "LEVELS", value_delimiter = ',', value_parser = live_set_level)]
    pub live_set_levels: Vec<validate::calibrate::LiveSetLevel>,
    /// For the host arms (`--only host`, or the full calibration): directory (on the SSD to
    /// measure) where a temporary file of expert-sized blocks is written, read at queue
    /// depths 1 and 4 (O_DIRECT where allowed, else buffered after dropping it from the page
    /// cache), then removed.
    #[arg(long, value_name = "DIR")]
    pub ssd_path: Option<PathBuf>,
    /// Measure nothing: rebuild the profile from a stored measurement set (the
    /// `<stem>.measurements.json` an earlier calibration wrote), e.g. after the fits changed.
    /// Needs no GPU; writes only --out. Several sets, comma-separated (calibrations of one GPU
    /// with the same settings), are pooled: each measured median becomes the median of
    /// theirs, so one calibration taken while the host ran slow does not set the profile; the
    /// pooled set is written beside --out as `<stem>.measurements.json`.
    #[arg(
        long,
        value_name = "FILE.json",
        value_delimiter = ',',
        value_parser = measurement_path,
        conflicts_with_all = ["quick", "only"]
    )]
    pub from_measurements: Vec<PathBuf>,
    /// With --from-measurements: kernel sets (`sim calibrate --only kernels` of the same GPU,
    /// driver and --quick) whose streaming read, default per-slot and union kernel arms and
    /// same-shape reads replace the calibration's own, e.g. after the default kernel changed;
    /// every other arm stays the calibration's. Several, comma-separated, are pooled as
    /// --from-measurements pools. The combined set is written beside --out as
    /// `<stem>.measurements.json`.
    #[arg(
        long,
        value_name = "FILE.json",
        value_delimiter = ',',
        value_parser = measurement_path,
        requires = "from_measurements"
    )]
    pub kernels_from: Vec<PathBuf>,
    /// With --from-measurements: live-set sets (`sim calibrate --only live-set`, e.g. to 90%
    /// of free VRAM) whose busy cells, pooled, give the concave live-set curve
    /// (`vmm_commit_live_power`, `vmm_decommit_live_power` and their exponents; the cost
    /// model then prices the live set on it instead of the linear slope). Comma-separated.
    /// The measurement set written beside --out is unchanged: the constants' provenance names
    /// these files.
    #[arg(
        long,
        value_name = "FILE.json",
        value_delimiter = ',',
        value_parser = measurement_path,
        requires = "from_measurements"
    )]
    pub live_set_from: Vec<PathBuf>,
}

/// One file of `--from-measurements`: an empty item (a doubled or trailing comma) is refused
/// with a message that says so, instead of clap's generic "a value is required".
fn measurement_path(item: &str) -> Result<PathBuf, String> {
    if item.trim().is_empty() {
        Err("an empty file name in the comma-separated list: remove the stray comma".into())
    } else {
        Ok(PathBuf::from(item))
    }
}

/// One level of `--live-set-levels` (an empty item is refused, as in --from-measurements).
fn live_set_level(item: &str) -> Result<validate::calibrate::LiveSetLevel, String> {
    if item.trim().is_empty() {
        return Err("an empty level in the comma-separated list: remove the stray comma".into());
    }
    item.parse()
}

/// A part of the calibration that `--only` runs alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CalibratePart {
    /// Streaming-read reference and expert kernels.
    Kernels,
    /// The host CPU, memory and (with --ssd-path) SSD; no GPU.
    Host,
    /// The live-set VMM arm at --live-set-levels.
    LiveSet,
}

/// `<stem>.measurements.json` beside the profile.
fn measurements_path(out: &Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".into());
    out.with_file_name(format!("{stem}.measurements.json"))
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    // Fail before measuring anything when the output cannot be written or no GPU is usable.
    let dir = traces::cleanup::dir_of(&args.out);
    anyhow::ensure!(
        dir.is_dir(),
        "--out {}: directory {} does not exist",
        args.out.display(),
        dir.display()
    );
    if !args.live_set_levels.is_empty() && args.only != Some(CalibratePart::LiveSet) {
        anyhow::bail!(
            "--live-set-levels sets the levels of `--only live-set`, which this run does not ask for: add --only live-set, or drop --live-set-levels"
        );
    }
    if !args.from_measurements.is_empty() {
        return from_measurements(&args);
    }
    if args.only == Some(CalibratePart::Host) {
        return host_only(&args);
    }
    if let (Some(dir), Some(part @ (CalibratePart::Kernels | CalibratePart::LiveSet))) =
        (&args.ssd_path, args.only)
    {
        let part = if part == CalibratePart::Kernels {
            "kernels"
        } else {
            "live-set"
        };
        anyhow::bail!(
            "--ssd-path {} is used by the host arms, which `--only {part}` does not run: drop --ssd-path",
            dir.display()
        );
    }
    check_ssd_path(args.ssd_path.as_deref())?;
    kernels::check_cuda_libraries().context("`sim calibrate` measures the local GPU")?;
    let opts = validate::CalibrateOptions {
        quick: args.quick,
        device: args.device,
        seed: args.seed,
    };
    match args.only {
        Some(CalibratePart::Kernels) => kernels_only(&args, &opts),
        Some(CalibratePart::LiveSet) => live_set_only(&args, &opts),
        _ => measure_all(&args, &opts),
    }
}

/// `--only live-set`: the live-set arm alone at --live-set-levels (default
/// [`validate::calibrate::LIVE_SET_WIDE_LEVELS`]), written as JSON.
fn live_set_only(args: &CalibrateArgs, opts: &validate::CalibrateOptions) -> anyhow::Result<()> {
    let levels = if args.live_set_levels.is_empty() {
        validate::calibrate::LIVE_SET_WIDE_LEVELS.to_vec()
    } else {
        args.live_set_levels.clone()
    };
    let cal = validate::calibrate::calibrate_live_set(opts, &levels, &mut |line| {
        eprintln!("calibrate: {line}")
    })
    .context("live-set calibration failed")?;
    write_set(args, &serde_json::to_string_pretty(&cal)?, cal.wall_s)
}

/// `--from-measurements`: pool the stored sets (writing the pooled set beside the profile when
/// there are several, or when `--kernels-from` replaced its kernel arms) and rebuild the
/// profile from them, measuring nothing.
fn from_measurements(args: &CalibrateArgs) -> anyhow::Result<()> {
    let flag = "--from-measurements";
    let sets = read_sets(&args.from_measurements, flag)?;
    let host = sets.iter().map(is_host_set).collect::<Vec<_>>();
    anyhow::ensure!(
        host.iter().all(|&h| h == host[0]),
        "--from-measurements mixes host sets (`--only host`) and GPU sets: pool each kind on its own"
    );
    let parse_err = not_a_set(&args.from_measurements, flag, "a measurement set");
    let pool_err = || cannot_pool(&args.from_measurements, flag);
    let (set_json, profile) = if host[0] {
        anyhow::ensure!(
            args.kernels_from.is_empty(),
            "--kernels-from replaces a GPU calibration's kernel arms, but --from-measurements \
             names host sets (`--only host`): drop --kernels-from"
        );
        anyhow::ensure!(
            args.live_set_from.is_empty(),
            "--live-set-from adds a GPU's live-set curve, but --from-measurements names host \
             sets (`--only host`): drop --live-set-from"
        );
        let sets = decode_sets::<validate::host::HostCalibration>(sets, parse_err)?;
        let cal = validate::pool::pool_host(&sets).with_context(pool_err)?;
        let p = validate::host::to_profile::to_profile(&cal, &args.name);
        (serde_json::to_string_pretty(&cal)?, p)
    } else {
        let sets = decode_sets::<validate::Calibration>(sets, parse_err)?;
        let mut cal = validate::pool::pool(&sets).with_context(pool_err)?;
        if !args.kernels_from.is_empty() {
            cal = splice_kernels(&args.kernels_from, cal)?;
        }
        let mut p = validate::to_profile::to_profile(&cal, &args.name);
        if !args.live_set_from.is_empty() {
            add_live_curve(&args.live_set_from, &mut p)?;
        }
        (serde_json::to_string_pretty(&cal)?, p)
    };
    if args.from_measurements.len() > 1 || !args.kernels_from.is_empty() {
        write_pooled_set(args, &set_json)?;
    }
    profile
        .save(&args.out)
        .with_context(|| format!("writing profile {}", args.out.display()))?;
    let from: Vec<String> = args
        .from_measurements
        .iter()
        .chain(&args.kernels_from)
        .chain(&args.live_set_from)
        .map(|p| p.display().to_string())
        .collect();
    eprintln!(
        "calibrate: wrote {} from {}",
        args.out.display(),
        from.join(", ")
    );
    Ok(())
}

/// `--kernels-from`: pool the kernel sets and put their arms in place of `cal`'s.
fn splice_kernels(
    paths: &[PathBuf],
    cal: validate::Calibration,
) -> anyhow::Result<validate::Calibration> {
    let flag = "--kernels-from";
    let sets = read_sets(paths, flag)?;
    if let Some(i) = sets.iter().position(|v| v.get("vmm").is_some()) {
        anyhow::bail!(
            "{flag} {} is a full calibration's set, not a kernel set: give the sets that \
             `sim calibrate --only kernels` wrote",
            paths[i].display()
        );
    }
    let sets = decode_sets::<validate::KernelCalibration>(
        sets,
        not_a_set(paths, flag, "a kernel set (`--only kernels`)"),
    )?;
    let kernels = validate::pool::pool_kernels(&sets).with_context(|| cannot_pool(paths, flag))?;
    validate::kernel_splice::with_kernel_arms(cal, &kernels)
        .with_context(|| format!("{flag}: cannot replace the calibration's kernel arms"))
}

/// `--live-set-from`: fit the concave live-set curve to the pooled live-set sets and add it
/// to `p` (an error when a file is not such a set or the sets give no curve).
fn add_live_curve(paths: &[PathBuf], p: &mut profile::Profile) -> anyhow::Result<()> {
    let flag = "--live-set-from";
    let sets = read_sets(paths, flag)?;
    let sets = decode_sets::<validate::calibrate::LiveSetCalibration>(
        sets,
        not_a_set(paths, flag, "a live-set set (`--only live-set`)"),
    )?;
    let names: Vec<String> = paths
        .iter()
        .map(|p| {
            p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
        .collect();
    validate::live_power_fit::add_to_profile(&sets, &names, p);
    anyhow::ensure!(
        p.get(profile::ConstantName::VmmCommitLivePower).is_some(),
        "{flag}: the sets' busy cells (kernels between the calls) give no growing curve: it \
         needs at least three live levels with two unit sizes each; run `sim calibrate --only \
         live-set` with more --live-set-levels"
    );
    Ok(())
}

/// Read every file of `flag` as JSON, naming the file that cannot be read or parsed.
fn read_sets(paths: &[PathBuf], flag: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    paths
        .iter()
        .map(|from| {
            sim::runner::require_file(
                &format!("{flag} {}", from.display()),
                from,
                "a measurement set that `sim calibrate --out` wrote beside its profile (the shipped ones are validate/data/*.measurements.json)",
            )?;
            let bytes =
                std::fs::read(from).with_context(|| format!("reading {flag} {}", from.display()))?;
            let text = String::from_utf8(bytes).map_err(|_| {
                anyhow::anyhow!(
                    "{flag} {} is not text: give the JSON measurement set that `sim calibrate --out` wrote, not a trace or other binary file",
                    from.display()
                )
            })?;
            serde_json::from_str(&text)
                .with_context(|| format!("{flag} {} is not JSON", from.display()))
        })
        .collect()
}

/// The error for file `i` of `flag` that does not decode as `what`.
fn not_a_set<'a>(
    paths: &'a [PathBuf],
    flag: &'a str,
    what: &'a str,
) -> impl Fn(usize) -> String + 'a {
    move |i| {
        format!(
            "{flag} {} is not {what} `sim calibrate` wrote",
            paths[i].display()
        )
    }
}

/// The context of a pooling error: the files of `flag`, numbered as the error numbers them.
fn cannot_pool(paths: &[PathBuf], flag: &str) -> String {
    let numbered: Vec<String> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| format!("set {} = {}", i + 1, p.display()))
        .collect();
    format!("{flag}: cannot pool ({})", numbered.join(", "))
}

/// A host calibration's set (`--only host`) has expert fits and no VMM arms.
fn is_host_set(v: &serde_json::Value) -> bool {
    v.get("expert_fits").is_some() && v.get("vmm").is_none()
}

/// Decode every set as `T`; `err(i)` names the set that does not decode.
fn decode_sets<T: serde::de::DeserializeOwned>(
    sets: Vec<serde_json::Value>,
    err: impl Fn(usize) -> String,
) -> anyhow::Result<Vec<T>> {
    sets.into_iter()
        .enumerate()
        .map(|(i, v)| serde_json::from_value(v).with_context(|| err(i)))
        .collect()
}

/// Write the pooled (or spliced) set beside `--out`, refusing to overwrite one of the inputs.
fn write_pooled_set(args: &CalibrateArgs, set_json: &str) -> anyhow::Result<()> {
    let mpath = measurements_path(&args.out);
    let same = |p: &Path| match (p.canonicalize(), mpath.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    anyhow::ensure!(
        !args
            .from_measurements
            .iter()
            .chain(&args.kernels_from)
            .any(|p| same(p)),
        "--out {} would write the pooled set over the input {}: choose another --out",
        args.out.display(),
        mpath.display()
    );
    write_atomic(&mpath, set_json.as_bytes())?;
    let n = args.from_measurements.len();
    let what = match args.kernels_from.len() {
        0 => format!("pooled {n} measurement sets into"),
        k => format!(
            "wrote the measurement set ({n} calibration(s), the kernel arms of {k} kernel set(s)) to"
        ),
    };
    eprintln!("calibrate: {what} {}", mpath.display());
    Ok(())
}

/// `--only host`: the host arms (no GPU), the host profile and its measurement set.
fn host_only(args: &CalibrateArgs) -> anyhow::Result<()> {
    check_ssd_path(args.ssd_path.as_deref())?;
    measure_host(args, &args.out, &args.name, args.json)
}

/// `--ssd-path` must be an existing directory (checked before anything is measured).
fn check_ssd_path(dir: Option<&Path>) -> anyhow::Result<()> {
    if let Some(dir) = dir {
        anyhow::ensure!(
            dir.is_dir(),
            "--ssd-path {}: not a directory; give an existing directory on the SSD to measure",
            dir.display()
        );
    }
    Ok(())
}

/// Run the host arms and write the host profile `name` at `out`, its set beside it (printed
/// with `json`).
fn measure_host(args: &CalibrateArgs, out: &Path, name: &str, json: bool) -> anyhow::Result<()> {
    let opts = validate::host::HostOptions {
        quick: args.quick,
        seed: args.seed,
        ssd_path: args.ssd_path.clone(),
    };
    let cal = validate::host::calibrate_host(&opts, &mut |line| eprintln!("calibrate: {line}"))
        .with_context(|| match &args.ssd_path {
            Some(d) => format!(
                "host calibration failed (file reads in --ssd-path {})",
                d.display()
            ),
            None => "host calibration failed".into(),
        })?;
    let profile = validate::host::to_profile::to_profile(&cal, name);
    write_set_and_profile(
        out,
        json,
        &serde_json::to_string_pretty(&cal)?,
        &profile,
        cal.wall_s,
    )
}

/// Where the full calibration writes its host profile: `<stem>-host.json` beside `--out`.
fn host_out_path(out: &Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".into());
    out.with_file_name(format!("{stem}-host.json"))
}

/// Write a calibration's measurement set beside `--out` and its profile at `--out` (both
/// atomically), say where, and print the set with `--json`.
fn write_set_and_profile(
    out: &Path,
    json: bool,
    measurements: &str,
    profile: &profile::Profile,
    wall_s: f64,
) -> anyhow::Result<()> {
    let mpath = measurements_path(out);
    write_atomic(&mpath, measurements.as_bytes())?;
    profile
        .save(out)
        .with_context(|| format!("writing profile {}", out.display()))?;
    eprintln!(
        "calibrate: wrote {} and {} in {:.1} s",
        out.display(),
        mpath.display(),
        wall_s
    );
    if json {
        emit(None, &format!("{measurements}\n"))?;
    }
    Ok(())
}

/// Write the measurement set of a one-arm calibration (`--only kernels`, `--only live-set`)
/// to `--out`, atomically, and echo it with `--json`.
fn write_set(args: &CalibrateArgs, text: &str, wall_s: f64) -> anyhow::Result<()> {
    write_atomic(&args.out, text.as_bytes())?;
    eprintln!("calibrate: wrote {} in {wall_s:.1} s", args.out.display());
    if args.json {
        emit(None, &format!("{text}\n"))?;
    }
    Ok(())
}

/// `--only kernels`: the expert-kernel arms alone, written as a measurement set.
fn kernels_only(args: &CalibrateArgs, opts: &validate::CalibrateOptions) -> anyhow::Result<()> {
    let cal = validate::calibrate_kernels(opts, &mut |line| eprintln!("calibrate: {line}"))
        .context("kernel calibration failed")?;
    write_set(args, &serde_json::to_string_pretty(&cal)?, cal.wall_s)
}

/// Every arm: the measurement set and the profile built from it.
fn measure_all(args: &CalibrateArgs, opts: &validate::CalibrateOptions) -> anyhow::Result<()> {
    let cal = validate::calibrate(opts, &mut |line| eprintln!("calibrate: {line}"))
        .context("calibration failed")?;
    let profile = validate::to_profile::to_profile(&cal, &args.name);
    write_set_and_profile(
        &args.out,
        args.json,
        &serde_json::to_string_pretty(&cal)?,
        &profile,
        cal.wall_s,
    )?;
    // The host side of the same machine, as its own host profile (`--hw-host`); `--json`
    // prints the GPU set only, so stdout stays one JSON document.
    let name = format!("{}-host", args.name);
    measure_host(args, &host_out_path(&args.out), &name, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_binary_set_is_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.json");
        let err = read_sets(std::slice::from_ref(&missing), "--kernels-from").unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.starts_with("--kernels-from "), "{msg}");
        assert!(msg.contains("none.json: no such file"), "{msg}");
        assert!(msg.contains("sim calibrate --out"), "{msg}");
        let binary = dir.path().join("trace.bin");
        std::fs::write(&binary, [0x53u8, 0x49, 0xff, 0xfe, 0x00]).unwrap();
        let err = read_sets(&[binary], "--from-measurements").unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("trace.bin is not text"), "{msg}");
        assert!(!msg.contains("utf-8"), "{msg}");
    }

    #[test]
    fn measurements_sit_beside_the_profile() {
        assert_eq!(
            measurements_path(Path::new("out/h200.json")),
            PathBuf::from("out/h200.measurements.json")
        );
    }

    /// The shipped profile as its calibration wrote it: without the constants derived after
    /// it from other data (the live-set slopes fitted to the stored replays), same layout.
    fn without_derived(shipped: &str) -> String {
        let mut p = profile::Profile::from_json(shipped, "h200-linux").unwrap();
        let derived: Vec<String> = p
            .constants
            .iter()
            .filter(|(_, c)| matches!(c.provenance, profile::Provenance::Derived { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(
            derived,
            ["vmm_commit_busy_live_slope", "vmm_decommit_busy_live_slope"],
            "only the live-set slopes are derived"
        );
        for k in derived {
            p.constants.remove(&k);
        }
        p.to_json() + "\n"
    }

    /// The shipped profile's sources: the calibration of commit 0e5365a and the three kernel
    /// sets of 2026-12-02 whose arms replace its kernel arms.
    fn shipped_sources() -> (PathBuf, Vec<PathBuf>) {
        let data = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../validate/data"));
        let kernels = (1..=3)
            .map(|i| data.join(format!("h200-linux-p18/k{i}.json")))
            .collect();
        (data.join("h200-linux-p9.measurements.json"), kernels)
    }

    fn rebuild_args(out: PathBuf, from: Vec<PathBuf>, kernels_from: Vec<PathBuf>) -> CalibrateArgs {
        CalibrateArgs {
            out,
            quick: false,
            name: "h200-linux".into(),
            device: 0,
            seed: 1,
            json: false,
            only: None,
            live_set_levels: vec![],
            ssd_path: None,
            from_measurements: from,
            kernels_from,
            live_set_from: Vec::new(),
        }
    }

    #[test]
    fn a_stored_measurement_set_rebuilds_the_shipped_profile() {
        // The shipped h200-linux profile is the calibration of commit 0e5365a with the kernel
        // arms of three `--only kernels` sets of 2026-12-02: rebuilt without a GPU from their
        // raw data, it is the shipped file byte for byte (so a change to how constants are
        // derived shows up here, and the shipped file is regenerated with it).
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p.json");
        let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../");
        let (from, kernels) = shipped_sources();
        let args = rebuild_args(out.clone(), vec![from], kernels);
        run(args).unwrap();
        let shipped =
            std::fs::read_to_string(format!("{data}profile/profiles/h200-linux.json")).unwrap();
        assert!(
            std::fs::read_to_string(&out).unwrap() == without_derived(&shipped),
            "rebuilding validate/data/h200-linux-p9.measurements.json with the kernel arms of \
             validate/data/h200-linux-p18/k{{1,2,3}}.json no longer gives the shipped \
             profile/profiles/h200-linux.json (less its two derived live-set slopes): regenerate \
             it as docs/guide/calibrate.md says (`sim calibrate --from-measurements ... \
             --kernels-from ...`) if the change is intended"
        );
        let p = profile::load(out.to_str().unwrap()).unwrap();
        // vmm[fill 0.4%].set_access_us median of that file
        assert_eq!(
            p.get(profile::ConstantName::CuMemSetAccess),
            Some(24.4194765625)
        );
        // a file that is not a measurement set is refused with its name
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{}").unwrap();
        let args = CalibrateArgs {
            out: dir.path().join("q.json"),
            quick: false,
            name: "x".into(),
            device: 0,
            seed: 1,
            json: false,
            only: None,
            live_set_levels: vec![],
            ssd_path: None,
            from_measurements: vec![bad],
            kernels_from: Vec::new(),
            live_set_from: Vec::new(),
        };
        let e = format!("{:#}", run(args).unwrap_err());
        assert!(
            e.contains("bad.json") && e.contains("measurement set"),
            "{e}"
        );
    }

    #[test]
    fn kernel_sets_replace_only_the_kernel_arms() {
        use profile::ConstantName as N;
        let dir = tempfile::tempdir().unwrap();
        let (from, kernels) = shipped_sources();
        let out = dir.path().join("p.json");
        run(rebuild_args(
            out.clone(),
            vec![from.clone()],
            kernels.clone(),
        ))
        .unwrap();
        let p = profile::load(out.to_str().unwrap()).unwrap();
        let alone = dir.path().join("alone.json");
        run(rebuild_args(alone.clone(), vec![from.clone()], Vec::new())).unwrap();
        let q = profile::load(alone.to_str().unwrap()).unwrap();
        // The streaming read: the median of the three kernel sets' medians, read from the
        // files independently.
        let medians: Vec<f64> = kernels
            .iter()
            .map(|k| {
                let v: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(k).unwrap()).unwrap();
                v["stream_read_bytes_per_us"]["median"].as_f64().unwrap()
            })
            .collect();
        let mut sorted = medians.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(p.get(N::StreamReadBandwidth), Some(sorted[1]));
        let date = |p: &profile::Profile, n: N| match &p.constants[n.as_str()].provenance {
            profile::Provenance::Measured(m) => m.date.clone(),
            other => panic!("{other:?}"),
        };
        // The kernel constants are the kernel sets' (their date), the VMM ones the
        // calibration's, unchanged.
        for n in [
            N::ExpertKernelBandwidth,
            N::ExpertKernelFixed,
            N::UnionKernelBandwidth,
            N::DeviceReadBandwidth,
        ] {
            assert_eq!(date(&p, n), "2026-12-02", "{n:?}");
            assert_ne!(p.get(n), q.get(n), "{n:?}");
        }
        for n in [N::VmmCommit, N::CuMemSetAccess, N::H2dPinnedBandwidth] {
            assert_eq!(date(&p, n), "2026-11-29", "{n:?}");
            assert_eq!(p.get(n), q.get(n), "{n:?}");
        }
        let curve = p.expert_kernel_curve.as_ref().unwrap();
        assert_eq!(curve.per_slot_kernel, "moe_dot_fd_r2j1s3b1");
        // The combined set is written beside the profile and rebuilds it alone.
        let set = dir.path().join("p.measurements.json");
        let again = dir.path().join("again.json");
        run(rebuild_args(again.clone(), vec![set], Vec::new())).unwrap();
        assert_eq!(
            std::fs::read_to_string(&again).unwrap(),
            std::fs::read_to_string(&out).unwrap()
        );
        // Refused: a full calibration's set given as a kernel set, kernel sets of another
        // GPU, and kernel sets for host sets.
        let err = |from: Vec<PathBuf>, k: Vec<PathBuf>| {
            let o = dir.path().join("refused.json");
            format!("{:#}", run(rebuild_args(o, from, k)).unwrap_err())
        };
        let e = err(vec![from.clone()], vec![from.clone()]);
        assert!(e.contains("is a full calibration's set"), "{e}");
        let mut other: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&kernels[0]).unwrap()).unwrap();
        other["device"]["gpu"] = "NVIDIA H100".into();
        let other_path = dir.path().join("h100.json");
        std::fs::write(&other_path, other.to_string()).unwrap();
        let e = err(vec![from.clone()], vec![other_path]);
        assert!(e.contains("measured on NVIDIA H100"), "{e}");
        let host = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../validate/data/h200-linux-p16/h4.measurements.json"
        ));
        let e = err(vec![host], kernels);
        assert!(e.contains("names host sets"), "{e}");
    }

    #[test]
    fn several_measurement_sets_pool_into_one_profile() {
        let dir = tempfile::tempdir().unwrap();
        let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../validate/");
        let set = |name: &str| PathBuf::from(format!("{data}{name}.measurements.json"));
        let args = |out: PathBuf, from: Vec<PathBuf>| CalibrateArgs {
            out,
            quick: false,
            name: "pooled".into(),
            device: 0,
            seed: 1,
            json: false,
            only: None,
            live_set_levels: vec![],
            ssd_path: None,
            from_measurements: from,
            kernels_from: Vec::new(),
            live_set_from: Vec::new(),
        };
        let out = dir.path().join("p.json");
        run(args(
            out.clone(),
            vec![
                set("data/h200-linux-p9"),
                set("tests/fixtures/h200-linux-p10"),
            ],
        ))
        .unwrap();
        let p = profile::load(out.to_str().unwrap()).unwrap();
        assert!(p
            .notes
            .iter()
            .any(|n| n.contains("Pooled from 2 calibrations")));
        // the pooled set written beside it rebuilds the same profile
        let pooled = dir.path().join("p.measurements.json");
        let again = dir.path().join("q.json");
        run(args(again.clone(), vec![pooled])).unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            std::fs::read_to_string(&again).unwrap()
        );
        // cuMemSetAccess at the first fill level: the mean of the two sets' medians, read
        // from the files as JSON
        let median = |name: &str| -> f64 {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(set(name)).unwrap()).unwrap();
            v["vmm"][0]["set_access_us"]["median"].as_f64().unwrap()
        };
        let want = (median("data/h200-linux-p9") + median("tests/fixtures/h200-linux-p10")) / 2.0;
        let got = p.get(profile::ConstantName::CuMemSetAccess).unwrap();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        // sets that timed different kernels are refused, naming where they differ
        let e = format!(
            "{:#}",
            run(args(
                dir.path().join("r.json"),
                vec![
                    set("data/h200-linux-p9"),
                    set("tests/fixtures/h200-linux-p8")
                ]
            ))
            .unwrap_err()
        );
        assert!(
            e.contains("cannot pool (set 1 = ")
                && e.contains("set 2 = ")
                && e.contains("h200-linux-p8")
                && e.contains("set 2 differs from set 1 at $.kernels["),
            "{e}"
        );
        assert!(!dir.path().join("r.json").exists());
    }

    #[test]
    fn without_a_gpu_calibrate_fails_at_once_and_writes_nothing() {
        if kernels::check_cuda_libraries().is_ok() {
            return; // a GPU machine: the ignored GPU tests cover it
        }
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p.json");
        let args = CalibrateArgs {
            out: out.clone(),
            quick: true,
            name: "x".into(),
            device: 0,
            seed: 1,
            json: false,
            only: None,
            live_set_levels: vec![],
            ssd_path: None,
            from_measurements: Vec::new(),
            kernels_from: Vec::new(),
            live_set_from: Vec::new(),
        };
        let err = format!("{:#}", run(args).unwrap_err());
        assert!(
            err.contains("needs an NVIDIA GPU") && err.contains("driver"),
            "{err}"
        );
        assert!(!out.exists() && !measurements_path(&out).exists());
    }

    fn host_args(out: PathBuf, ssd_path: Option<PathBuf>) -> CalibrateArgs {
        CalibrateArgs {
            out,
            quick: true,
            name: "host-test".into(),
            device: 0,
            seed: 1,
            json: false,
            only: Some(CalibratePart::Host),
            live_set_levels: vec![],
            ssd_path,
            from_measurements: Vec::new(),
            kernels_from: Vec::new(),
            live_set_from: Vec::new(),
        }
    }

    #[test]
    fn host_calibration_writes_a_host_profile_without_a_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let ssd = tempfile::tempdir().unwrap();
        let out = dir.path().join("host.json");
        run(host_args(out.clone(), Some(ssd.path().to_path_buf()))).unwrap();
        let p = profile::load(out.to_str().unwrap()).unwrap();
        use profile::ConstantName as C;
        use validate::host::expert_kernel::Format;
        // rates are medians of timed passes: always measured
        for c in [
            C::HostMemoryReadBandwidth,
            C::HostMemoryReadBandwidth1Thread,
            C::HostSsdReadBandwidth,
            C::HostSsdReadBandwidthQd4,
        ] {
            assert!(
                p.get(c).is_some_and(|v| v > 0.0),
                "{c} missing or not positive"
            );
        }
        // no GPU constant: they were not measured
        assert!(p.get(C::H2dBandwidth).is_none() && p.get(C::VramTotal).is_none());
        assert!(p.notes.iter().any(|n| n.starts_with("SSD reads: ")));
        // the temporary file is gone
        assert_eq!(std::fs::read_dir(ssd.path()).unwrap().count(), 0);
        // the expert bandwidths are the fits of the measurement set beside the profile: each is
        // its fit's figure, or absent where the quick pass's timings on a shared machine gave
        // no physical line (a slope at or below 0), never a made-up value
        let cal: validate::host::HostCalibration =
            serde_json::from_str(&std::fs::read_to_string(measurements_path(&out)).unwrap())
                .unwrap();
        let all = cal.all_threads;
        for (c, key) in [
            (C::HostExpertInt4Bandwidth, (Format::Int4, 1, all)),
            (C::HostExpertInt4Bandwidth1Thread, (Format::Int4, 1, 1)),
            (C::HostExpertInt4Tokens16Bandwidth, (Format::Int4, 16, all)),
            (C::HostExpertBf16Bandwidth, (Format::Bf16, 1, all)),
        ] {
            let fit = cal
                .expert_fits
                .iter()
                .find(|f| (f.format, f.tokens, f.threads) == key)
                .map(|f| f.fit.bytes_per_us);
            assert_eq!(p.get(c), fit, "{c}");
            assert!(fit.is_none_or(|v| v > 0.0), "{c}");
        }
        assert!(
            cal.experts.len() >= 4,
            "the expert arms ran: {} points",
            cal.experts.len()
        );
    }

    #[test]
    fn a_host_set_rebuilds_its_profile_and_does_not_pool_with_a_gpu_set() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("host.json");
        run(host_args(out.clone(), None)).unwrap();
        let rebuilt = dir.path().join("rebuilt.json");
        let from = |sets: Vec<PathBuf>, out: PathBuf| CalibrateArgs {
            only: None,
            live_set_levels: vec![],
            from_measurements: sets,
            kernels_from: Vec::new(),
            live_set_from: Vec::new(),
            ..host_args(out, None)
        };
        run(from(vec![measurements_path(&out)], rebuilt.clone())).unwrap();
        assert_eq!(
            std::fs::read_to_string(&rebuilt).unwrap(),
            std::fs::read_to_string(&out).unwrap(),
            "a host set rebuilds its profile byte for byte"
        );
        let gpu = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../validate/data/h200-linux-p9.measurements.json");
        let mixed = from(
            vec![measurements_path(&out), gpu],
            dir.path().join("m.json"),
        );
        let e = run(mixed).unwrap_err().to_string();
        assert!(e.contains("mixes host sets"), "{e}");
    }

    #[test]
    fn host_calibration_without_ssd_path_leaves_the_ssd_constants_absent() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("host.json");
        run(host_args(out.clone(), None)).unwrap();
        let p = profile::load(out.to_str().unwrap()).unwrap();
        assert!(p.get(profile::ConstantName::HostSsdReadBandwidth).is_none());
        assert!(p
            .get(profile::ConstantName::HostMemoryReadBandwidth)
            .is_some());
        // a --ssd-path that is not a directory is refused before measuring
        let bad = dir.path().join("nope");
        let e = format!(
            "{:#}",
            run(host_args(dir.path().join("q.json"), Some(bad))).unwrap_err()
        );
        assert!(
            e.contains("--ssd-path") && e.contains("not a directory"),
            "{e}"
        );
        assert!(!dir.path().join("q.json").exists());
    }

    #[test]
    fn the_development_machine_host_profile_loads_with_host_constants_only() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profile/profiles/dev-box-host.json"
        );
        let p = profile::load(path).unwrap();
        assert!(p.description.contains("development machine"));
        assert!(
            p.constants.keys().all(|k| k.starts_with("host_")),
            "host constants only"
        );
        // memory read of all threads at least the one thread's median (a read the second
        // thread can only add to)
        let (all, one) = (
            p.get(profile::ConstantName::HostMemoryReadBandwidth)
                .unwrap(),
            p.get(profile::ConstantName::HostMemoryReadBandwidth1Thread)
                .unwrap(),
        );
        assert!(all >= one, "{all} < {one}");
    }
}
