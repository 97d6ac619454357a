//! Shared helpers of the micro-benchmarks (see `src/bin/`).
