//! JSON-RPC (work in progress).
