//! A blocking JSON-RPC client that reads responses the way SPDK's `spdk-rpc` does.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::framing::Framer;
use crate::message::encode_request;
use crate::{ClientError, RpcError};

/// Largest response the client accepts.
const MAX_RESPONSE_BYTES: usize = 1 << 30;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }

    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(buf),
            Stream::Tcp(s) => s.write_all(buf),
        }
    }
}

/// A JSON-RPC client over a unix or TCP socket.
///
/// Requests are written compactly with ids counting from 1. Responses are read as `spdk-rpc`
/// reads them: bytes accumulate and the first complete JSON value is the response, leftovers stay
/// buffered for the next one. Each call waits at most the timeout (60 s by default).
#[derive(Debug)]
pub struct Client {
    stream: Stream,
    framer: Framer,
    next_id: u64,
    timeout: Option<Duration>,
    buf: Vec<u8>,
}

impl Client {
    /// Connect to a unix socket.
    pub fn connect_unix(path: &Path) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            addr: path.display().to_string(),
            source,
        })?;
        Ok(Self::new(Stream::Unix(s)))
    }

    /// Connect to a TCP address.
    pub fn connect_tcp(addr: SocketAddr) -> Result<Client, ClientError> {
        let s = TcpStream::connect(addr).map_err(|source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        })?;
        // Latency matters more than packet count for request/response traffic.
        s.set_nodelay(true).map_err(ClientError::Io)?;
        Ok(Self::new(Stream::Tcp(s)))
    }

    fn new(stream: Stream) -> Self {
        Client {
            stream,
            framer: Framer::new(MAX_RESPONSE_BYTES),
            next_id: 1,
            timeout: Some(DEFAULT_TIMEOUT),
            buf: vec![0; 64 * 1024],
        }
    }

    /// Set how long one call may wait for its response (`None`: forever).
    pub fn set_timeout(&mut self, t: Option<Duration>) {
        self.timeout = t;
    }

    /// Call `method` and wait for its result. An error reply is [`ClientError::Rpc`].
    pub fn call(&mut self, method: &str, params: Option<Value>) -> Result<Value, ClientError> {
        let id = self.take_id();
        self.send_raw(&encode_request(method, id, params.as_ref()))?;
        let deadline = self.deadline();
        loop {
            let v = self.read_value(deadline)?;
            match response_id(&v) {
                // A late answer to an earlier call that timed out: skip it.
                Some(got) if got < id => continue,
                Some(got) if got != id => {
                    return Err(ClientError::InvalidResponse(format!(
                        "expected a response with id {id}, got id {got}"
                    )))
                }
                // Ours, or an answer without a usable id (e.g. a parse error, id null), which
                // `spdk-rpc` also takes as the response.
                _ => return into_result(v).map_err(ClientError::Rpc),
            }
        }
    }

    /// Send the calls as one batch and return their results in call order (matched by id).
    pub fn call_batch(
        &mut self,
        calls: &[(String, Option<Value>)],
    ) -> Result<Vec<Result<Value, RpcError>>, ClientError> {
        let first = self.next_id;
        let mut req = Vec::with_capacity(calls.len() * 64 + 2);
        req.push(b'[');
        for (i, (method, params)) in calls.iter().enumerate() {
            if i > 0 {
                req.push(b',');
            }
            let id = self.take_id();
            req.extend_from_slice(&encode_request(method, id, params.as_ref()));
        }
        req.push(b']');
        self.send_raw(&req)?;
        let v = self.read_value(self.deadline())?;
        let elems = match v {
            Value::Array(a) => a,
            // An error for the batch as a whole (e.g. the empty batch).
            other => {
                return match into_result(other) {
                    Err(e) => Err(ClientError::Rpc(e)),
                    Ok(_) => Err(ClientError::InvalidResponse(
                        "batch answered with a single result".into(),
                    )),
                }
            }
        };
        let mut by_id: HashMap<u64, Result<Value, RpcError>> = HashMap::with_capacity(elems.len());
        for e in elems {
            let Some(id) = response_id(&e) else {
                return Err(ClientError::InvalidResponse(format!(
                    "batch element without a usable id: {e}"
                )));
            };
            by_id.insert(id, into_result(e));
        }
        (first..self.next_id)
            .map(|id| {
                by_id
                    .remove(&id)
                    .ok_or_else(|| ClientError::InvalidResponse(format!("no response for id {id}")))
            })
            .collect()
    }

    /// Write raw bytes to the socket (for tests of odd input).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream
            .set_write_timeout(self.timeout)
            .map_err(ClientError::Io)?;
        self.stream.write_all(bytes).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout,
            _ => ClientError::Io(e),
        })
    }

    /// Read the next complete JSON value from the socket, whatever it is.
    pub fn read_raw_value(&mut self) -> Result<Value, ClientError> {
        self.read_value(self.deadline())
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn deadline(&self) -> Option<Instant> {
        self.timeout.map(|t| Instant::now() + t)
    }

    fn read_value(&mut self, deadline: Option<Instant>) -> Result<Value, ClientError> {
        loop {
            match self.framer.next_frame() {
                Some(Ok(frame)) => return serde_json::from_slice(frame).map_err(ClientError::Json),
                Some(Err(e)) => return Err(ClientError::InvalidResponse(e.to_string())),
                None => {}
            }
            let wait = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Err(ClientError::Timeout),
                },
            };
            self.stream
                .set_read_timeout(wait)
                .map_err(ClientError::Io)?;
            match self.stream.read(&mut self.buf) {
                Ok(0) => {
                    return Err(ClientError::Closed {
                        partial: self.framer.has_partial(),
                    })
                }
                Ok(n) => self.framer.push(&self.buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ClientError::Timeout)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ClientError::Closed {
                        partial: self.framer.has_partial(),
                    })
                }
                Err(e) => return Err(ClientError::Io(e)),
            }
        }
    }
}

fn response_id(v: &Value) -> Option<u64> {
    v.get("id").and_then(Value::as_u64)
}

/// `result`, or the `error` object, of one response.
fn into_result(v: Value) -> Result<Value, RpcError> {
    let Value::Object(mut m) = v else {
        return Err(RpcError::internal_error("response is not an object"));
    };
    if let Some(e) = m.remove("error") {
        return Err(serde_json::from_value(e)
            .unwrap_or_else(|_| RpcError::internal_error("malformed error object")));
    }
    Ok(m.remove("result").unwrap_or(Value::Null))
}
