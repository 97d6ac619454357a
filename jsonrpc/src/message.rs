//! Request decoding and response encoding, following SPDK's `jsonrpc_server.c`.
//!
//! A frame from the [`Framer`](crate::framing::Framer) is parsed by [`parse_message`] straight
//! into a [`Message`]: one request, a batch, or some other JSON value. Each request object is
//! checked the way SPDK checks it, in the same order, which decides whether the `-32600` reply
//! echoes the id:
//!
//! 1. only the members `jsonrpc`, `method`, `id`, `params` are allowed, each at most once
//!    (SPDK's strict `spdk_json_decode_object`); otherwise invalid, id `null`;
//! 2. `jsonrpc`, if present, must be the string `"2.0"`; otherwise invalid, id `null`;
//! 3. `method` must be present and a string; otherwise invalid, id `null`;
//! 4. `id`, if present, must be a string, number or `null`; otherwise invalid, id `null`;
//! 5. `params`, if present and not `null`, must be an object or array; otherwise invalid, and
//!    the reply **does** echo the id (it was accepted in step 4).
//!
//! Ids are kept as raw JSON text and echoed verbatim.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::RpcError;

/// A request id, kept as its raw JSON text (a string or a number; `null` ids are not stored:
/// such a request is a notification).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Id(String);

impl Id {
    /// The id's raw JSON text, e.g. `1` or `"abc"`.
    pub fn as_json(&self) -> &str {
        &self.0
    }
}

/// One decoded request object.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// A well-formed call.
    Call(Call),
    /// A request that fails validation: answer -32600 with this id (`None` = `null`).
    Invalid {
        /// The id to echo, if it had been accepted before the failing check.
        id: Option<Id>,
    },
}

/// A well-formed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The method name.
    pub method: String,
    /// The id; `None` for a notification (id absent or `null`).
    pub id: Option<Id>,
    /// The params; `None` when absent or `null`.
    pub params: Option<Value>,
}

/// A parsed frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A single request object.
    Single(Request),
    /// A batch (array); may be empty. Non-object elements decode as [`Request::Invalid`].
    Batch(Vec<Request>),
    /// Some other JSON value (string, number, literal): -32600.
    Other,
}

/// Parse one frame. An `Err` means the bytes are not valid JSON (-32700).
pub fn parse_message(frame: &[u8]) -> Result<Message, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(frame);
    let msg = (&mut de).deserialize_any(MessageVisitor)?;
    de.end()?;
    Ok(msg)
}

struct MessageVisitor;

macro_rules! scalar_is {
    ($result:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($result)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($result)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($result)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($result)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($result)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($result)
        }
    };
}

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a json value")
    }

    scalar_is!(Message::Other);

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Message, A::Error> {
        RequestVisitor.visit_map(map).map(Message::Single)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Message, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(r) = seq.next_element_seed(ElementSeed)? {
            out.push(r);
        }
        Ok(Message::Batch(out))
    }
}

/// A batch element: a request object, or anything else (invalid, id `null`).
struct ElementSeed;

impl<'de> DeserializeSeed<'de> for ElementSeed {
    type Value = Request;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Request, D::Error> {
        d.deserialize_any(RequestVisitor)
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = Request;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a request object")
    }

    scalar_is!(Request::Invalid { id: None });

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Request, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Request::Invalid { id: None })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Request, A::Error> {
        let mut version: Option<Value> = None;
        let mut method: Option<Value> = None;
        let mut id: Option<Box<RawValue>> = None;
        let mut params: Option<Value> = None;
        let mut bad_members = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "jsonrpc" if version.is_none() => version = Some(map.next_value()?),
                "method" if method.is_none() => method = Some(map.next_value()?),
                "id" if id.is_none() => id = Some(map.next_value()?),
                "params" if params.is_none() => params = Some(map.next_value()?),
                _ => {
                    // Unknown or duplicate member.
                    bad_members = true;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let invalid = Ok(Request::Invalid { id: None });
        if bad_members {
            return invalid;
        }
        if let Some(v) = version {
            if v.as_str() != Some("2.0") {
                return invalid;
            }
        }
        let method = match method {
            Some(Value::String(m)) => m,
            _ => return invalid,
        };
        let id = match id {
            None => None,
            Some(raw) => match raw.get().as_bytes().first() {
                Some(b'"' | b'-' | b'0'..=b'9') => Some(Id(String::from(raw.get()))),
                Some(b'n') => None,
                _ => return invalid,
            },
        };
        let params = match params {
            None | Some(Value::Null) => None,
            Some(p @ (Value::Object(_) | Value::Array(_))) => Some(p),
            Some(_) => return Ok(Request::Invalid { id }),
        };
        Ok(Request::Call(Call { method, id, params }))
    }
}

/// Encode a response object (compact, key order `jsonrpc`, `id`, `result`|`error`), without the
/// trailing newline. `id: None` is written as `null`.
pub fn encode_response(id: Option<&Id>, result: &Result<Value, RpcError>) -> Vec<u8> {
    let id = id.map_or("null", Id::as_json);
    let mut out = Vec::with_capacity(64 + id.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_bytes());
    let written = match result {
        Ok(v) => {
            out.extend_from_slice(br#","result":"#);
            serde_json::to_writer(&mut out, v)
        }
        Err(e) => {
            out.extend_from_slice(br#","error":"#);
            serde_json::to_writer(&mut out, e)
        }
    };
    if written.is_err() {
        // Serialising a `Value` into a `Vec` cannot fail; keep the output well-formed anyway.
        out.truncate(0);
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(br#","error":{"code":-32603,"message":"Internal error"}"#);
    }
    out.push(b'}');
    out
}

/// Encode a success response whose result is already serialised JSON.
pub fn encode_raw_result(id: Option<&Id>, result: &serde_json::value::RawValue) -> Vec<u8> {
    let id = id.map_or("null", Id::as_json);
    let raw = result.get();
    let mut out = Vec::with_capacity(40 + id.len() + raw.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(raw.as_bytes());
    out.push(b'}');
    out
}

/// Encode a request the way our [`Client`](crate::Client) sends it: compact, key order
/// `jsonrpc`, `method`, `id`, `params` (omitted when `None`), no trailing newline.
pub fn encode_request(method: &str, id: u64, params: Option<&Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + method.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"#);
    let mut ok = serde_json::to_writer(&mut out, method).is_ok();
    out.extend_from_slice(br#","id":"#);
    out.extend_from_slice(id.to_string().as_bytes());
    if let Some(p) = params {
        out.extend_from_slice(br#","params":"#);
        ok &= serde_json::to_writer(&mut out, p).is_ok();
    }
    out.push(b'}');
    debug_assert!(
        ok,
        "invariant: serialising a str or a Value into a Vec cannot fail"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn single(s: &str) -> Request {
        match parse_message(s.as_bytes()).unwrap() {
            Message::Single(r) => r,
            other => panic!("not single: {other:?}"),
        }
    }

    fn id(s: &str) -> Option<Id> {
        Some(Id(s.to_owned()))
    }

    #[test]
    fn valid_calls() {
        assert_eq!(
            single(r#"{"jsonrpc":"2.0","method":"m","id":1,"params":{"a":1}}"#),
            Request::Call(Call {
                method: "m".into(),
                id: id("1"),
                params: Some(json!({"a":1}))
            })
        );
        // jsonrpc is optional; params null == absent; id null == notification.
        assert_eq!(
            single(r#"{"method":"m","id":null,"params":null}"#),
            Request::Call(Call {
                method: "m".into(),
                id: None,
                params: None
            })
        );
        // Ids are echoed verbatim.
        let r = single(r#"{"method":"m","id":"a\u0062","params":[1]}"#);
        let Request::Call(c) = r else { panic!() };
        assert_eq!(c.id, id(r#""a\u0062""#));
        let Request::Call(c) = single(r#"{"method":"m","id":1.50}"#) else {
            panic!()
        };
        assert_eq!(c.id, id("1.50"));
        let Request::Call(c) = single(r#"{"method":"m","id":-3}"#) else {
            panic!()
        };
        assert_eq!(c.id, id("-3"));
    }

    #[test]
    fn invalid_requests() {
        let inv = Request::Invalid { id: None };
        assert_eq!(single(r#"{"jsonrpc":"1.0","method":"m","id":1}"#), inv);
        assert_eq!(single(r#"{"jsonrpc":2.0,"method":"m","id":1}"#), inv);
        assert_eq!(single(r#"{"jsonrpc":"2.0","id":1}"#), inv);
        assert_eq!(single(r#"{"jsonrpc":"2.0","method":5,"id":1}"#), inv);
        assert_eq!(single(r#"{"method":"m","id":{"a":1}}"#), inv);
        assert_eq!(single(r#"{"method":"m","id":[1]}"#), inv);
        assert_eq!(single(r#"{"method":"m","id":true}"#), inv);
        assert_eq!(single(r#"{"method":"m","id":1,"extra":0}"#), inv);
        assert_eq!(single(r#"{"method":"m","method":"n","id":1}"#), inv);
        // Bad params echo the id.
        assert_eq!(
            single(r#"{"method":"m","id":7,"params":3}"#),
            Request::Invalid { id: id("7") }
        );
        assert_eq!(
            single(r#"{"method":"m","id":"x","params":"s"}"#),
            Request::Invalid { id: id("\"x\"") }
        );
    }

    #[test]
    fn batches_and_others() {
        assert_eq!(parse_message(b"[]").unwrap(), Message::Batch(vec![]));
        let m = parse_message(br#"[1,{"method":"m"},[2],"s",null]"#).unwrap();
        let Message::Batch(v) = m else { panic!() };
        assert_eq!(v.len(), 5);
        assert_eq!(v[0], Request::Invalid { id: None });
        assert!(matches!(v[1], Request::Call(_)));
        assert_eq!(v[2], Request::Invalid { id: None });
        assert_eq!(v[4], Request::Invalid { id: None });
        assert_eq!(parse_message(b"12").unwrap(), Message::Other);
        assert_eq!(parse_message(b"\"x\"").unwrap(), Message::Other);
        assert_eq!(parse_message(b"null").unwrap(), Message::Other);
    }

    #[test]
    fn malformed() {
        for s in [
            &b"{\"jsonrpc\":\"2.0\",,}"[..],
            b"not",
            b"{\"a\":1]",
            b"[1,2}",
            b"{\"a\":\xff}",
            b"{} x",
        ] {
            assert!(parse_message(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn response_encoding() {
        let r = encode_response(id("1").as_ref(), &Ok(json!(true)));
        assert_eq!(r, br#"{"jsonrpc":"2.0","id":1,"result":true}"#);
        let r = encode_response(None, &Err(RpcError::parse_error()));
        assert_eq!(
            r,
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
        );
        let r = encode_response(id("\"a\"").as_ref(), &Ok(json!({"b":2,"a":1})));
        assert_eq!(r, br#"{"jsonrpc":"2.0","id":"a","result":{"b":2,"a":1}}"#);
    }

    #[test]
    fn request_encoding() {
        assert_eq!(
            encode_request("m", 3, None),
            br#"{"jsonrpc":"2.0","method":"m","id":3}"#
        );
        assert_eq!(
            encode_request("m", 1, Some(&json!({"x":[1]}))),
            br#"{"jsonrpc":"2.0","method":"m","id":1,"params":{"x":[1]}}"#
        );
    }
}
