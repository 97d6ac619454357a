//! The two cipher suites of NVMe/TCP TLS and what each implies. The
//! bottom layer of the crate.

use std::fmt;

use bdevkit_nvme_auth::HashFn;

/// An NVMe/TCP TLS cipher suite (the only two the transport names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    /// `TLS_AES_128_GCM_SHA256`, for 32-byte PSKs (identity `NVMe0R01`).
    Aes128GcmSha256,
    /// `TLS_AES_256_GCM_SHA384`, for 48-byte PSKs (identity `NVMe0R02`).
    Aes256GcmSha384,
}

impl Suite {
    /// Both suites.
    pub const ALL: [Suite; 2] = [Suite::Aes128GcmSha256, Suite::Aes256GcmSha384];

    /// The suite for a PSK of `len` bytes (32 or 48).
    #[must_use]
    pub fn for_len(len: usize) -> Option<Suite> {
        match len {
            32 => Some(Suite::Aes128GcmSha256),
            48 => Some(Suite::Aes256GcmSha384),
            _ => None,
        }
    }

    /// The identity's hash specifier (`1` or `2`, printed `01`/`02`).
    #[must_use]
    pub fn id(self) -> u8 {
        match self {
            Suite::Aes128GcmSha256 => 1,
            Suite::Aes256GcmSha384 => 2,
        }
    }

    /// From the identity's hash specifier.
    #[must_use]
    pub fn from_id(id: u8) -> Option<Suite> {
        Suite::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The IANA (and OpenSSL) name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Suite::Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            Suite::Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
        }
    }

    /// The suite's hash (the one of the TLS PSK derivation).
    #[must_use]
    pub fn hash(self) -> HashFn {
        match self {
            Suite::Aes128GcmSha256 => HashFn::Sha256,
            Suite::Aes256GcmSha384 => HashFn::Sha384,
        }
    }

    /// The TLS cipher suite's two-byte code.
    #[must_use]
    pub fn code(self) -> [u8; 2] {
        match self {
            Suite::Aes128GcmSha256 => [0x13, 0x01],
            Suite::Aes256GcmSha384 => [0x13, 0x02],
        }
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
