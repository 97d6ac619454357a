//! SPDK's log methods over the app's `tracing` filter (see
//! `crate::logging`): `log_set_print_level`, `log_get_print_level`,
//! `log_set_flag`, `log_clear_flag`, `log_get_flags`. They answer -32603
//! "logging is not managed by this application" when the process installed
//! its own subscriber instead of `crate::logging::init_with`.

use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME, STARTUP};
use serde::Deserialize;
use serde_json::json;

use super::has_params;
use crate::logging::{self, LogControl};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelParams {
    level: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlagParams {
    flag: String,
}

fn unmanaged() -> RpcError {
    RpcError::internal_error("logging is not managed by this application")
}

fn with_control(
    f: impl FnOnce(&'static LogControl) -> Result<serde_json::Value, RpcError>,
) -> Result<serde_json::Value, RpcError> {
    logging::control().ok_or_else(unmanaged).and_then(f)
}

pub(crate) fn register(reg: &MethodRegistry) -> Result<(), jsonrpc::Error> {
    let both = STARTUP | RUNTIME;
    reg.register("log_set_print_level", both, |params, resp| {
        let Ok(p) = decode_params::<LevelParams>(params) else {
            return resp.err(RpcError::decode_failed());
        };
        resp.respond(with_control(|c| {
            if c.update(|st| st.set_print_level(&p.level)) {
                Ok(json!(true))
            } else {
                Err(RpcError::invalid_params("invalid log level"))
            }
        }));
    })?;
    reg.register("log_get_print_level", both, |params, resp| {
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "log_get_print_level requires no parameters",
            ));
        }
        resp.respond(with_control(|c| Ok(json!(c.state().print_level()))));
    })?;
    for (method, on) in [("log_set_flag", true), ("log_clear_flag", false)] {
        reg.register(method, both, move |params, resp| {
            let Ok(p) = decode_params::<FlagParams>(params) else {
                return resp.err(RpcError::decode_failed());
            };
            resp.respond(with_control(|c| {
                if c.update(|st| st.set_flag(&p.flag, on)) {
                    Ok(json!(true))
                } else if on {
                    Err(RpcError::invalid_params("tried to set invalid log flag"))
                } else {
                    Err(RpcError::invalid_params("tried to clear invalid log flag"))
                }
            }));
        })?;
    }
    reg.register("log_get_flags", both, |params, resp| {
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "log_get_flags requires no parameters",
            ));
        }
        resp.respond(with_control(|c| Ok(c.state().flags_json())));
    })?;
    Ok(())
}
