//! What a bdev module's tests import, in one `use bdevkit_test::prelude::*;`:
//! the environment and the fixtures of this crate, the RPC helpers, and
//! the bdev, DMA, RPC-error and JSON items every such test names.

pub use bdevkit::bdev::{BdevChannel, BdevManager, IoStatus};
pub use bdevkit::dma::DmaBuf;
pub use bdevkit_jsonrpc::RpcError;
pub use serde_json::{json, Value};

pub use crate::env::wait_for;
pub use crate::fixtures::{
    delete_malloc, malloc, read_in_background, remove_base_under_read, OverMalloc,
};
pub use crate::rpc::{self, call};
pub use crate::{conformance, sleep_ms, TestEnv};
