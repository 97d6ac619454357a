//! [`BdevDesc`]: an open descriptor of a bdev — the consumer's way to its
//! per-thread channels, and where claims are taken (SPDK's `exclusive_write`
//! and the three v2 types, with SPDK's sharing rules).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::bdev::{finish_unregister, Bdev, BdevState, Claim, DescInner, Status};
use super::channel::BdevChannel;
use super::types::ClaimType;
use crate::error::Error as BdevError;

/// Ids of descriptors, never reused within a process.
pub(crate) static NEXT_DESC_ID: AtomicU64 = AtomicU64::new(1);

/// An open descriptor. Closing (or dropping) it releases its claim; the
/// last close of a bdev being removed lets the removal finish.
pub struct BdevDesc {
    pub(crate) inner: Arc<DescInner>,
}

impl fmt::Debug for BdevDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BdevDesc")
            .field("bdev", &self.inner.bdev.name())
            .field("write", &self.inner.write.load(Ordering::Relaxed))
            .finish()
    }
}

impl BdevDesc {
    /// The bdev.
    #[must_use]
    pub fn bdev(&self) -> &Bdev {
        &self.inner.bdev
    }

    /// Whether writes are allowed through this descriptor.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.inner.write.load(Ordering::Acquire)
    }

    /// This thread's I/O channel for the bdev.
    pub fn get_io_channel(&self) -> Result<BdevChannel, BdevError> {
        let b = &self.inner.bdev;
        let core = b.0.device.get_channel()?;
        Ok(BdevChannel::new(core, b.clone(), self.is_writable()))
    }

    /// Takes a claim on the bdev for `module` (SPDK's claims). Exclusive
    /// write fails if any claim exists; the v2 types follow SPDK's sharing
    /// rules. The claim is released when this descriptor closes.
    pub fn claim(&self, ty: ClaimType, module: &str) -> Result<(), BdevError> {
        let b = &self.inner.bdev;
        let mut st = b.0.state.lock();
        let others_write = st.descs.iter().any(|d| d.id != self.inner.id && d.write);
        match (&mut st.claim, ty) {
            (None, ClaimType::ExclusiveWrite) => {
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
            }
            (None, ClaimType::ReadManyWriteOne) => {
                if others_write {
                    return Err(BdevError::Claimed(b.name().to_string(), "a writer".into()));
                }
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
            }
            (None, ClaimType::ReadManyWriteNone) => {
                if others_write || self.is_writable() {
                    return Err(BdevError::Claimed(b.name().to_string(), "a writer".into()));
                }
            }
            (None, ClaimType::ReadManyWriteShared { key }) => {
                if key == 0 {
                    return Err(BdevError::InvalidArg(
                        "shared claim key must be non-zero".into(),
                    ));
                }
                if others_write {
                    return Err(BdevError::Claimed(b.name().to_string(), "a writer".into()));
                }
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
            }
            (Some(c), ClaimType::ReadManyWriteNone) if c.ty == ClaimType::ReadManyWriteNone => {
                if self.is_writable() {
                    return Err(BdevError::Claimed(b.name().to_string(), c.module.clone()));
                }
                c.descs.push(self.inner.id);
                return Ok(());
            }
            (Some(c), ClaimType::ReadManyWriteShared { key })
                if c.ty == (ClaimType::ReadManyWriteShared { key }) =>
            {
                c.descs.push(self.inner.id);
                self.inner.write.store(true, Ordering::Release);
                set_desc_write(&mut st, self.inner.id);
                return Ok(());
            }
            (Some(c), _) => {
                return Err(BdevError::Claimed(b.name().to_string(), c.module.clone()));
            }
        }
        st.claim = Some(Claim {
            ty,
            module: module.to_string(),
            descs: vec![self.inner.id],
        });
        drop(st);
        tracing::debug!(bdev = %b.name(), module, claim = ty.name(), "bdev claimed");
        Ok(())
    }

    /// Closes the descriptor (same as dropping it).
    pub fn close(self) {}
}

fn set_desc_write(st: &mut BdevState, id: u64) {
    if let Some(d) = st.descs.iter_mut().find(|d| d.id == id) {
        d.write = true;
    }
}

impl Drop for BdevDesc {
    fn drop(&mut self) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let b = self.inner.bdev.clone();
        let finish = {
            let mut st = b.0.state.lock();
            st.descs.retain(|d| d.id != self.inner.id);
            let mut release = false;
            if let Some(c) = &mut st.claim {
                c.descs.retain(|d| *d != self.inner.id);
                release = c.descs.is_empty();
            }
            if release {
                st.claim = None;
            }
            st.status == Status::Removing && st.descs.is_empty()
        };
        if finish {
            finish_unregister(&b);
        }
    }
}
