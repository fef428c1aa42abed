//! The command-line reference (`docs/reference/cli.md`), generated from the clap tree of
//! [`crate::cli::command`]: every command's `--help` text, as the binary prints it, at a fixed
//! width so that the page does not depend on the terminal. `sim/tests/cli.rs` checks the page
//! against this and rewrites it when `SIM_UPDATE_CLI_REFERENCE=1` is set.

/// The width the help text is wrapped to (clap's default without a terminal).
const WIDTH: usize = 100;

/// The reference page: a heading and the long help of `sim` and each of its subcommands,
/// depth first in the order `sim --help` lists them.
pub fn markdown() -> String {
    let mut root = crate::cli::command()
        .term_width(WIDTH)
        .max_term_width(WIDTH);
    root.build();
    let mut page = String::from(
        "# `sim` command-line reference\n\n\
         <!-- Generated from the clap tree by `sim/src/cli_reference.rs`; do not edit. Regenerate: \
         SIM_UPDATE_CLI_REFERENCE=1 cargo test -p sim --test cli cli_reference -->\n\n\
         Every command's `--help`, as the binary prints it. How-to pages: [the guide](../guide/).\n",
    );
    section(&mut root, "sim", &mut page);
    page
}

/// Append the section of `cmd` (named `name`, its full command line) and its subcommands'.
fn section(cmd: &mut clap::Command, name: &str, page: &mut String) {
    let help = cmd.render_long_help().to_string();
    page.push_str(&format!(
        "\n## `{name}`\n\n```text\n{}\n```\n",
        help.trim_end()
    ));
    for sub in cmd
        .get_subcommands_mut()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let sub_name = format!("{name} {}", sub.get_name());
        section(sub, &sub_name, page);
    }
}
