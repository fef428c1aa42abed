//! Policy comparison reports rendered from run results (the JSON objects `sim run --json`
//! prints): Markdown, CSV, JSON and self-contained HTML with SVG plots. Running the grid is
//! the `sim` binary's job; this crate only renders.
