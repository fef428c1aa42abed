//! GPU calibration of the cost constants and real-GPU replay of traces, through cudarc with
//! dynamic loading. Every entry point checks that the CUDA driver can be loaded and returns an
//! error (never a panic) when it cannot.
