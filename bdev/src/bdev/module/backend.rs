//! What the memory backends (malloc, null) share, written once: the
//! whole [`BdevModule`] of a backend whose bdevs each recreate themselves
//! in a saved config ([`BackendModule`], over the module's bdev type,
//! [`Backend`]), and the geometry their create params describe, checked
//! by SPDK's rules ([`Geometry`]).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::bdev::bdev::Bdev;
use crate::bdev::manager::{BdevManager, BdevModule};
use crate::bdev::module::ops::BdevOps;
use crate::bdev::types::BdevProps;
use crate::error::{Error, Result};

/// The bdev type of a [`BackendModule`].
pub trait Backend: BdevOps {
    /// The module's name ([`BdevModule::name`]), also its RPC infix: a
    /// saved config recreates a bdev with `bdev_<MODULE>_create`.
    const MODULE: &'static str;

    /// Required. The `params` of the `bdev_<MODULE>_create` entry that
    /// recreates this bdev (registered as `bdev`) in a saved config, after
    /// those [`BackendModule`] writes first: `name`, `num_blocks`, the
    /// [`Geometry`] (`block_size`, `physical_block_size`, `md_size`,
    /// `dif_type`, `dif_is_head_of_md`, `dif_pi_format`) and `uuid`, all
    /// read from the registered bdev. A JSON object (anything else adds
    /// nothing).
    fn config_params(&self, bdev: &Bdev) -> Value;
}

/// A backend module with nothing to examine and no state of its own,
/// whose saved config is one `bdev_<module>_create` per bdev of its type
/// `B` not going away, in registration order, with the bdev's `name`,
/// `num_blocks`, geometry and `uuid`, then [`Backend::config_params`], as
/// SPDK's malloc and null modules write it (module-wide, from
/// `config_json`). A module crate names it (`pub type MallocModule =
/// BackendModule<MallocBdev>;`).
pub struct BackendModule<B>(PhantomData<fn() -> B>);

impl<B> Default for BackendModule<B> {
    fn default() -> Self {
        BackendModule(PhantomData)
    }
}

impl<B: Backend> fmt::Debug for BackendModule<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BackendModule").field(&B::MODULE).finish()
    }
}

impl<B: Backend> BackendModule<B> {
    /// Adds the module to `mgr`.
    pub fn register(mgr: &BdevManager) {
        mgr.register_module(Arc::new(Self::default()));
    }
}

impl<B: Backend> BdevModule for BackendModule<B> {
    fn name(&self) -> &'static str {
        B::MODULE
    }

    fn config_json(&self, mgr: &BdevManager) -> Vec<Value> {
        let method = format!("bdev_{}_create", B::MODULE);
        mgr.bdevs()
            .iter()
            .filter(|b| b.module_name() == B::MODULE && !b.is_removing())
            .filter_map(|b| {
                let ops = b.ops_as::<B>()?;
                let mut params = saved_geometry(b);
                if let Value::Object(more) = ops.config_params(b) {
                    params.extend(more);
                }
                Some(json!({"method": method, "params": params}))
            })
            .collect()
    }
}

/// `name`, `num_blocks`, the [`Geometry`] and `uuid` of `b` as a create
/// call's params (SPDK's order for null): the data block size, without
/// the metadata.
fn saved_geometry(b: &Bdev) -> Map<String, Value> {
    let p = b.props();
    let mut m = Map::new();
    m.insert("name".into(), json!(b.name()));
    m.insert("num_blocks".into(), json!(b.num_blocks()));
    m.insert("block_size".into(), json!(p.block_size - p.md_size));
    m.insert("physical_block_size".into(), json!(p.phys_block_size));
    m.insert("md_size".into(), json!(p.md_size));
    m.insert("dif_type".into(), json!(p.dif_type));
    m.insert("dif_is_head_of_md".into(), json!(p.dif_is_head_of_md));
    m.insert("dif_pi_format".into(), json!(p.dif_pi_format));
    m.insert("uuid".into(), json!(b.uuid().to_string()));
    m
}

/// The geometry of a memory backend's create params (SPDK's names, as
/// malloc and null take them): `block_size` data bytes per block (a
/// multiple of 512), `num_blocks` (> 0), `md_size` interleaved metadata
/// bytes per block (0, 8, 16, 32, 64 or 128), DIF type 0-3 (only with
/// metadata) and its settings, `physical_block_size` (a multiple of 512;
/// 0 = the block size).
/// Missing fields are 0 (`false`), as SPDK's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Geometry {
    block_size: u32,
    num_blocks: u64,
    md_size: u32,
    dif_type: i32,
    dif_is_head_of_md: bool,
    dif_pi_format: u32,
    physical_block_size: u32,
}

impl Geometry {
    /// The geometry `params` describe: the fields of that name of a
    /// backend's create params (malloc's and null's have SPDK's names for
    /// them; the rest is ignored).
    ///
    /// # Errors
    /// `InvalidArg` when a field of one of these names has another type
    /// (missing ones are 0 or `None`, which [`Geometry::props`] refuses
    /// for `block_size` and `num_blocks`).
    pub fn of(params: &impl Serialize) -> Result<Geometry> {
        serde_json::to_value(params)
            .and_then(serde_json::from_value)
            .map_err(|e| Error::InvalidArg(format!("geometry: {e}")))
    }

    /// The properties of bdev `name` with this geometry: blocks of data
    /// and metadata, the metadata interleaved, the DIF settings, the
    /// physical block size.
    ///
    /// # Errors
    /// `InvalidArg` for a value outside the rules above.
    pub fn props(&self, name: &str, product_name: &str) -> Result<BdevProps> {
        let invalid = |m: String| Err(Error::InvalidArg(m));
        if self.block_size == 0 || !self.block_size.is_multiple_of(512) {
            let bs = self.block_size;
            return invalid(format!("block_size {bs} is not a multiple of 512"));
        }
        if self.num_blocks == 0 {
            return invalid("num_blocks must be greater than 0".into());
        }
        let md = self.md_size;
        if ![0, 8, 16, 32, 64, 128].contains(&md) {
            return invalid(format!("md_size {md} must be one of 0, 8, 16, 32, 64, 128"));
        }
        let dif = self.dif_type;
        if !(0..=3).contains(&dif) {
            return invalid(format!("dif_type {dif} must be 0-3"));
        }
        if dif != 0 && md == 0 {
            return invalid("dif_type needs md_size".into());
        }
        let pbs = self.physical_block_size;
        if !pbs.is_multiple_of(512) {
            return invalid(format!(
                "physical_block_size {pbs} is not a multiple of 512"
            ));
        }
        let mut p = BdevProps::new(name, product_name, self.block_size + md, self.num_blocks);
        p.phys_block_size = pbs;
        p.md_size = md;
        p.md_interleave = md != 0;
        p.dif_type = u32::try_from(dif).unwrap_or(0);
        p.dif_is_head_of_md = self.dif_is_head_of_md;
        p.dif_pi_format = self.dif_pi_format;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_rules() {
        let params = json!({"name": "M0", "block_size": 4096, "num_blocks": 8,
            "md_size": 8, "dif_type": 1, "physical_block_size": 8192});
        let g = Geometry::of(&params).unwrap();
        let p = g.props("M0", "Test").unwrap();
        assert_eq!((p.block_size, p.md_size, p.md_interleave), (4104, 8, true));
        assert_eq!((p.dif_type, p.phys_block_size), (1, 8192));
        let bad = [
            ("block_size", json!(1000)),
            ("num_blocks", json!(0)),
            ("md_size", json!(7)),
            ("dif_type", json!(4)),
            ("md_size", json!(0)),
            ("physical_block_size", json!(100)),
        ];
        for (key, value) in bad {
            let mut q = params.clone();
            q[key] = value;
            let r = Geometry::of(&q).and_then(|g| g.props("M0", "Test"));
            assert!(matches!(r, Err(Error::InvalidArg(_))), "{key}");
        }
        // A field of another type is refused too.
        let mut q = params.clone();
        q["md_size"] = json!("eight");
        assert!(matches!(Geometry::of(&q), Err(Error::InvalidArg(_))));
    }
}
