//! Test support for bdevkit.
