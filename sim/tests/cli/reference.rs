//! docs/reference/cli.md is the help the clap tree renders now (`sim::cli_reference`): a flag
//! added, renamed or reworded without the page regenerated fails here.

use std::path::PathBuf;

#[test]
fn cli_reference_is_the_help_the_binary_prints() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/cli.md");
    let want = sim::cli_reference::markdown();
    if std::env::var_os("SIM_UPDATE_CLI_REFERENCE").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is out of date: regenerate it with \
         SIM_UPDATE_CLI_REFERENCE=1 cargo test -p sim --test cli cli_reference",
        path.display()
    );
    // the page is the binary's own help: `sim run --help` appears in it whole
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["run", "--help"])
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let run_help = String::from_utf8(out.stdout).unwrap();
    assert!(want.contains(run_help.trim_end()), "sim run --help differs");
}
