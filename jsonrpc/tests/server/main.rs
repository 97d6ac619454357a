//! Integration tests: a real server on a unix socket in a temporary directory under /tmp.
//! (Modules are `cfg(test)` so the workspace test lints treat them as test code.)

#[cfg(test)]
mod concurrency;
#[cfg(test)]
mod framing;
#[cfg(test)]
mod harness;
#[cfg(test)]
mod large;
#[cfg(test)]
mod limits;
#[cfg(test)]
mod protocol;
#[cfg(test)]
mod socket;
#[cfg(test)]
mod spdk_rpc;
