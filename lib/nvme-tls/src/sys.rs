//! The OpenSSL calls the `openssl` crate does not wrap: TLS 1.3 external
//! PSKs through the PSK session callbacks (what SPDK uses), the session
//! setters they need, and `SSL_has_pending`. The only file of the crate
//! with `unsafe`; everything it hands out is safe to call.
//!
//! The callbacks are generic over a policy trait ([`ClientPolicy`],
//! [`ServerPolicy`]) that the layer above implements in safe Rust: this
//! file turns raw pointers into references and back, nothing more.

use std::ffi::{c_int, c_uchar};
use std::panic::{catch_unwind, AssertUnwindSafe};

use foreign_types::ForeignTypeRef;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::ssl::{SslContextBuilder, SslRef};
use openssl_sys::{EVP_MD, SSL, SSL_CIPHER, SSL_CTX, SSL_SESSION};

/// `SSL_R_BINDER_DOES_NOT_VERIFY` (ssl/sslerr.h): a PSK binder that
/// does not verify (the two sides' PSKs differ).
pub(crate) const R_BINDER_DOES_NOT_VERIFY: c_int = 253;
/// `SSL_R_UNEXPECTED_EOF_WHILE_READING`: TCP closed without close_notify.
pub(crate) const R_UNEXPECTED_EOF_WHILE_READING: c_int = 294;
/// `SSL_AD_REASON_OFFSET`: a reason code `1000 + n` is alert `n`
/// received from the peer.
pub(crate) const AD_REASON_OFFSET: c_int = 1000;

type UseSessionCb = unsafe extern "C" fn(
    *mut SSL,
    *const EVP_MD,
    *mut *const c_uchar,
    *mut usize,
    *mut *mut SSL_SESSION,
) -> c_int;
type FindSessionCb =
    unsafe extern "C" fn(*mut SSL, *const c_uchar, usize, *mut *mut SSL_SESSION) -> c_int;

extern "C" {
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut SSL_CTX, cb: Option<UseSessionCb>);
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut SSL_CTX, cb: Option<FindSessionCb>);
    fn SSL_SESSION_new() -> *mut SSL_SESSION;
    fn SSL_SESSION_set1_master_key(s: *mut SSL_SESSION, key: *const c_uchar, len: usize) -> c_int;
    fn SSL_SESSION_set_cipher(s: *mut SSL_SESSION, cipher: *const SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(s: *mut SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut SSL, ptr: *const c_uchar) -> *const SSL_CIPHER;
    fn SSL_has_pending(s: *const SSL) -> c_int;
}

/// The PSK a client offers.
pub(crate) struct ClientPsk<'a> {
    /// The identity, as sent.
    pub identity: &'a [u8],
    /// The TLS PSK.
    pub key: &'a [u8],
    /// The cipher suite's code (`[0x13, 0x01]`...).
    pub cipher: [u8; 2],
}

/// What a server found for an identity.
pub(crate) struct ServerPsk<A: AsRef<[u8]>> {
    /// The TLS PSK.
    pub key: A,
    /// The cipher suite's code.
    pub cipher: [u8; 2],
}

/// The client's choice of PSK, made in safe code.
pub(crate) trait ClientPolicy {
    /// The PSK to offer on `ssl`; `md` is the hash the handshake already
    /// committed to (after a HelloRetryRequest), if any. `None` fails the
    /// handshake.
    fn client_psk(ssl: &SslRef, md: Option<Nid>) -> Option<ClientPsk<'_>>;
}

/// The server's lookup of a PSK by identity, made in safe code (it may
/// note what it found in `ssl`'s ex data, for error reports).
pub(crate) trait ServerPolicy {
    /// Key material type (wiped when dropped, by the implementation).
    type Key: AsRef<[u8]>;
    /// The PSK for `identity`, or `None` to go on without one (the
    /// handshake then fails: there is no certificate).
    fn server_psk(ssl: &mut SslRef, identity: &[u8]) -> Option<ServerPsk<Self::Key>>;
}

/// A TLS 1.3 session whose master key is `key`, for `cipher` (one of
/// `ssl`'s), or null.
fn new_session(ssl: &SslRef, key: &[u8], cipher: [u8; 2]) -> *mut SSL_SESSION {
    // SAFETY: `ssl` is a live SSL (a reference to it) that
    // SSL_CIPHER_find only reads; it reads the two bytes of `cipher` and
    // returns a pointer into the library's static cipher table, or null.
    let c = unsafe { SSL_CIPHER_find(ssl.as_ptr(), cipher.as_ptr()) };
    if c.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: no preconditions; returns an owned session or null.
    let s = unsafe { SSL_SESSION_new() };
    if s.is_null() {
        return s;
    }
    // SAFETY: `s` is the session just made and owned here; the key is
    // copied from `key` (valid for `key.len()` bytes) into it, and `c`
    // is a valid cipher. On failure `s` is freed and not used again.
    unsafe {
        if SSL_SESSION_set1_master_key(s, key.as_ptr(), key.len()) != 1
            || SSL_SESSION_set_cipher(s, c) != 1
            || SSL_SESSION_set_protocol_version(s, openssl_sys::TLS1_3_VERSION) != 1
        {
            openssl_sys::SSL_SESSION_free(s);
            return std::ptr::null_mut();
        }
    }
    s
}

/// `SSL_psk_use_session_cb_func`: OpenSSL asks for the client's PSK.
unsafe extern "C" fn use_session_cb<P: ClientPolicy>(
    ssl: *mut SSL,
    md: *const EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: OpenSSL calls this with the live SSL of the handshake,
        // borrowed for the call only.
        let ssl = unsafe { SslRef::from_ptr(ssl) };
        let md = (!md.is_null()).then(|| {
            // SAFETY: a non-null `md` is a digest OpenSSL keeps alive
            // beyond this call; only its type is read.
            unsafe { MessageDigest::from_ptr(md) }.type_()
        });
        let Some(psk) = P::client_psk(ssl, md) else {
            return 0;
        };
        let s = new_session(ssl, psk.key, psk.cipher);
        if s.is_null() {
            return 0;
        }
        // SAFETY: the out-pointers are OpenSSL's, valid for this call.
        // The session's ownership passes to OpenSSL (it frees it); the
        // identity bytes live in the SSL_CTX's ex data, longer than the
        // handshake, and OpenSSL copies them right after this returns.
        unsafe {
            *sess = s;
            *id = psk.identity.as_ptr();
            *idlen = psk.identity.len();
        }
        1
    }));
    r.unwrap_or(0)
}

/// `SSL_psk_find_session_cb_func`: OpenSSL asks the server for the PSK
/// of an identity.
unsafe extern "C" fn find_session_cb<P: ServerPolicy>(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: OpenSSL calls this with the live SSL of the handshake,
        // borrowed for the call only.
        let ssl = unsafe { SslRef::from_ptr_mut(ssl) };
        let identity: &[u8] = if identity.is_null() || identity_len == 0 {
            &[]
        } else {
            // SAFETY: OpenSSL passes the identity inside the ClientHello
            // it holds, `identity_len` bytes, alive during the call.
            unsafe { std::slice::from_raw_parts(identity, identity_len) }
        };
        let s = match P::server_psk(ssl, identity) {
            Some(psk) => new_session(ssl, psk.key.as_ref(), psk.cipher),
            None => std::ptr::null_mut(),
        };
        // SAFETY: `sess` is OpenSSL's out-pointer for this call; a
        // session put there becomes OpenSSL's (it duplicates and frees
        // it). Null means "no PSK for this identity": the handshake goes
        // on without one and fails for want of a certificate, with a
        // handshake_failure alert rather than an internal_error one.
        unsafe { *sess = s };
        1
    }));
    r.unwrap_or(0)
}

/// Makes `b`'s clients offer the PSK `P` chooses.
pub(crate) fn set_client_policy<P: ClientPolicy>(b: &mut SslContextBuilder) {
    // SAFETY: `b` holds a live SSL_CTX; the callback has the signature
    // OpenSSL expects and is a plain function (no state to outlive).
    unsafe { SSL_CTX_set_psk_use_session_callback(b.as_ptr(), Some(use_session_cb::<P>)) }
}

/// Makes `b`'s servers look PSKs up with `P`.
pub(crate) fn set_server_policy<P: ServerPolicy>(b: &mut SslContextBuilder) {
    // SAFETY: as in `set_client_policy`.
    unsafe { SSL_CTX_set_psk_find_session_callback(b.as_ptr(), Some(find_session_cb::<P>)) }
}

/// Whether `ssl` holds received bytes not yet processed (decrypted
/// plaintext, or records read ahead from the socket).
pub(crate) fn has_pending(ssl: &SslRef) -> bool {
    // SAFETY: `ssl` is a live SSL; the call only reads its state.
    unsafe { SSL_has_pending(ssl.as_ptr()) == 1 }
}
