//! One module per subcommand: argument definitions and the glue that calls the libraries.

pub mod args_cache;
pub mod args_input;
pub mod args_progress;
pub mod args_steps;
pub mod args_threads;
pub mod args_timing;
pub mod auto_cut;
pub mod calibrate;
pub mod checked;
pub mod compare;
pub mod compare_curves;
pub mod curve;
pub mod errors;
pub mod grid_passes;
pub mod plan;
pub mod profile;
pub mod report;
pub mod run;
pub mod run_spec;
pub mod sweep;
pub mod trace;
pub mod trace_gen;
pub mod trace_io;
pub mod trace_stats;
pub mod validate;
