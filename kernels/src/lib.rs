//! CUDA kernels for expert FFNs and page touching, compiled at run time with NVRTC, with
//! launch wrappers and CPU reference implementations. Loads the CUDA libraries dynamically,
//! so it builds and its CPU tests run on machines without a GPU.
