//! End-to-end tests: the real `bdev_tgt` binary on private sockets, driven
//! by `spdk-rpc`, `bdev_rpc` and our client (see `bdevkit_test::daemon` for
//! how the binaries and `spdk-rpc` are found). One test binary, so one link.
//! (Modules are `cfg(test)` so the workspace test lints treat them as test code.)

#[cfg(test)]
mod bdev_keys;
#[cfg(test)]
mod errors;
#[cfg(test)]
mod lifecycle;
#[cfg(test)]
mod lvol_interop;
#[cfg(test)]
mod lvol_verify;
#[cfg(test)]
mod nvme_multipath;
#[cfg(test)]
mod nvmf_auth;
#[cfg(test)]
mod nvmf_loss;
#[cfg(test)]
mod nvmf_rpc;
#[cfg(test)]
mod nvmf_tls;
#[cfg(test)]
mod raid_sb;
#[cfg(test)]
mod readme;
#[cfg(test)]
mod ref_spdk;
#[cfg(test)]
mod spdk_configs;
#[cfg(test)]
mod spdk_rpc;
#[cfg(test)]
mod vbdev_rpc;
#[cfg(test)]
mod vhost_rpc;
#[cfg(test)]
mod zone_block;
