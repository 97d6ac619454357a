//! The keyring's RPCs, SPDK's names, params, results and errors:
//! `keyring_file_add_key {name, path}` and `keyring_file_remove_key
//! {name}` answer `true` or `-errno` with its `strerror` text (`-17` a
//! key of that name, `-1` a relative path or a file others may read, `-2`
//! no such file, `-126` no such key, `-22` a bad name);
//! `keyring_get_keys` lists the keys, never their material. Params that
//! do not decode answer `-32602` "Invalid argument", as SPDK. All three
//! are RUNTIME methods, as in SPDK.

use std::path::PathBuf;
use std::sync::Arc;

use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME};
use serde::Deserialize;
use serde_json::Value;

use crate::{Error, Keyring};

#[derive(Deserialize)]
struct AddKeyParams {
    name: String,
    path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveKeyParams {
    name: String,
}

fn invalid() -> RpcError {
    RpcError::invalid_params("Invalid argument")
}

/// Registers the keyring's RPCs over `keyring`.
///
/// # Errors
/// When a method of one of those names is already registered.
pub fn register(reg: &MethodRegistry, keyring: &Arc<Keyring>) -> Result<(), jsonrpc::Error> {
    let kr = Arc::clone(keyring);
    reg.register("keyring_file_add_key", RUNTIME, move |params, resp| {
        // SPDK decodes these params relaxed: unknown keys are ignored.
        let Ok(p) = decode_params::<AddKeyParams>(params) else {
            return resp.err(invalid());
        };
        let r = kr.add_file_key(&p.name, &p.path);
        if let Err(e) = &r {
            tracing::error!(error = %e, "keyring_file_add_key failed");
        }
        resp.respond_errno(r.map(|()| true), Error::errno);
    })?;
    let kr = Arc::clone(keyring);
    reg.register("keyring_file_remove_key", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<RemoveKeyParams>(params) else {
            return resp.err(invalid());
        };
        let r = kr.remove_key(&p.name);
        if let Err(e) = &r {
            tracing::error!(error = %e, "keyring_file_remove_key failed");
        }
        resp.respond_errno(r.map(|()| true), Error::errno);
    })?;
    let kr = Arc::clone(keyring);
    reg.register("keyring_get_keys", RUNTIME, move |params, resp| {
        if params.as_ref().is_some_and(|p| !p.is_null()) {
            return resp.err(RpcError::invalid_params(
                "keyring_get_keys requires no parameters",
            ));
        }
        resp.ok(Value::Array(kr.keys_json()));
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdevkit_jsonrpc::Responder;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    fn call(reg: &MethodRegistry, method: &str, params: Value) -> Result<Value, RpcError> {
        let (resp, rx) = Responder::channel();
        reg.set_state(RUNTIME);
        reg.dispatch(method, Some(params), resp);
        rx.recv().unwrap()
    }

    #[test]
    fn spdk_answers() {
        let d = tempfile::tempdir().unwrap();
        let good = d.path().join("k0");
        std::fs::write(&good, "DHHC-1:00:x:").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        let open = d.path().join("k1");
        std::fs::write(&open, "x").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let reg = MethodRegistry::new();
        let kr = Arc::new(Keyring::new());
        register(&reg, &kr).unwrap();
        let add = |name: &str, path: &std::path::Path| {
            call(
                &reg,
                "keyring_file_add_key",
                json!({"name": name, "path": path}),
            )
        };
        let code = |r: Result<Value, RpcError>| r.unwrap_err().code;
        assert_eq!(add("key0", &good), Ok(json!(true)));
        assert_eq!(code(add("key0", &good)), -17);
        assert_eq!(code(add("key1", std::path::Path::new("k0"))), -1);
        assert_eq!(code(add("key2", &open)), -1);
        assert_eq!(code(add("key3", &d.path().join("none"))), -2);
        assert_eq!(code(add("a:x", &good)), -22);
        assert_eq!(
            code(call(&reg, "keyring_file_add_key", json!({"name": "k"}))),
            -32602
        );
        let keys = call(&reg, "keyring_get_keys", Value::Null).unwrap();
        assert_eq!(keys[0]["name"], "key0");
        assert_eq!(keys[0]["path"], good.display().to_string());
        assert!(!keys.to_string().contains("DHHC"), "{keys}");
        assert_eq!(
            code(call(
                &reg,
                "keyring_file_remove_key",
                json!({"name": "nokey"})
            )),
            -126
        );
        assert_eq!(
            call(&reg, "keyring_file_remove_key", json!({"name": "key0"})),
            Ok(json!(true))
        );
        assert_eq!(call(&reg, "keyring_get_keys", Value::Null), Ok(json!([])));
    }
}
