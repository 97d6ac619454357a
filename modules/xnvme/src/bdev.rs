//! [`XnvmeBdev`]: one xnvme bdev, whatever its mechanism. It wraps the
//! bdev operations of the mechanism (`io_uring_cmd`: [`crate::CmdBdev`];
//! `io_uring` and `libaio`: the uring and aio modules' own bdevs) and
//! forwards the I/O path to them unchanged (no dispatch per I/O: each
//! mechanism is its own `XnvmeBdev<B>` type), adding what every xnvme bdev
//! answers alike: the `bdev_xnvme_create` call of a saved config, an empty
//! `driver_specific` (SPDK's) and [`XnvmeBdev::info`].

use bdevkit::bdev::module::{BdevIo, BdevOps, BoxError, Done, IoType};
use serde_json::{json, Map, Value};

use crate::rpc::XnvmeCreateParams;

/// An xnvme bdev over mechanism `B`.
#[derive(Debug)]
pub struct XnvmeBdev<B> {
    params: XnvmeCreateParams,
    inner: B,
    /// What the mechanism adds to `driver_specific`.
    details: Map<String, Value>,
}

impl<B> XnvmeBdev<B> {
    /// The bdev made with `params` over `inner`, with `details` for its
    /// `driver_specific` info.
    pub(crate) fn new(params: XnvmeCreateParams, inner: B, details: Map<String, Value>) -> Self {
        XnvmeBdev {
            params,
            inner,
            details,
        }
    }

    /// What the bdev was created with.
    #[must_use]
    pub fn params(&self) -> &XnvmeCreateParams {
        &self.params
    }

    /// The mechanism's bdev.
    #[must_use]
    pub fn mechanism_bdev(&self) -> &B {
        &self.inner
    }

    /// What the bdev is and does: `{filename, io_mechanism, conserve_cpu}`,
    /// for `io_uring_cmd` also the namespace id, the controller's char
    /// device, whether I/O is polled (`iopoll`), the serial and model
    /// numbers and what deallocated blocks read back as
    /// (`deallocated_read`). Not in `driver_specific`, which is `{}` as
    /// SPDK's bdev_xnvme writes it ([`crate::info`] reads it from a bdev).
    #[must_use]
    pub fn info(&self) -> Value {
        let mut info = Map::new();
        info.insert("filename".into(), json!(self.params.filename));
        info.insert("io_mechanism".into(), json!(self.params.io_mechanism));
        info.insert("conserve_cpu".into(), json!(self.params.conserve_cpu));
        info.extend(self.details.clone());
        Value::Object(info)
    }
}

impl<B: BdevOps> BdevOps for XnvmeBdev<B> {
    type Channel = B::Channel;

    fn create_channel(&self) -> Result<B::Channel, BoxError> {
        self.inner.create_channel()
    }

    #[inline]
    fn submit(&self, ch: &B::Channel, io: BdevIo) {
        self.inner.submit(ch, io);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        self.inner.io_type_supported(io_type)
    }

    fn destruct(&self, done: Done) {
        self.inner.destruct(done);
    }

    /// SPDK's `bdev_xnvme_create` entry.
    fn write_config_json(&self) -> Option<Value> {
        Some(json!({
            "method": "bdev_xnvme_create",
            "params": {
                "name": self.params.name,
                "filename": self.params.filename,
                "io_mechanism": self.params.io_mechanism,
                "conserve_cpu": self.params.conserve_cpu,
            }
        }))
    }

    fn resized(&self, num_blocks: u64) {
        self.inner.resized(num_blocks);
    }
}
