//! The NVMe/TCP target in process, driven by the PDU-level test host
//! (`bdevkit_test::nvmf`): bad input of every kind, connection and
//! controller lifecycles, and the data paths. One test binary, one link.

#[cfg(test)]
mod access;
#[cfg(test)]
mod auth;
#[cfg(test)]
mod bad_input;
#[cfg(test)]
mod buffers;
#[cfg(test)]
mod data;
#[cfg(test)]
mod dsm;
#[cfg(test)]
mod fused;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod lifecycle;
