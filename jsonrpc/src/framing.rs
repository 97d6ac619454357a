//! Stream framing: find where one complete JSON value ends in a byte stream.
//!
//! SPDK's wire has no length prefix and no delimiter: a request is one JSON value, and values
//! simply follow each other (`spdk-rpc` sends pretty-printed JSON with no trailing newline). So the
//! reader must decide, from the bytes alone, when a value is complete. [`Scanner`] does that with a
//! small resumable state machine (string/escape state and nesting depth), so a large value that
//! arrives in many reads is scanned once in total, O(n), not re-parsed from its start on each read.
//! It only finds the end; the value is then parsed with `serde_json`, which does the validation.
//!
//! [`Framer`] owns the receive buffer around a scanner: push bytes in, take complete frames out.
//! Both the server and the [`Client`](crate::Client) use it.

/// Outcome of one [`Scanner::scan`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// More bytes are needed. [`Scanner::scanned`] bytes have been looked at.
    Incomplete,
    /// A value occupies `buf[start..end]` (`start` skips leading whitespace).
    Complete {
        /// Index of the value's first byte.
        start: usize,
        /// Index one past the value's last byte.
        end: usize,
    },
    /// The byte at `at` cannot start a JSON value: the stream is not JSON.
    Invalid {
        /// Index of the offending byte.
        at: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    /// Skipping whitespace before the value.
    #[default]
    Leading,
    /// Inside an object or array.
    Container,
    /// A top-level string.
    TopString,
    /// A top-level number or literal (`true`, `false`, `null`): ends at the first byte that
    /// cannot be part of one.
    TopScalar,
}

/// Resumable scanner for the end of one JSON value.
///
/// Call [`scan`](Self::scan) with the buffer each time it has grown (the bytes already scanned
/// must be unchanged); it continues where it stopped. After [`Scan::Complete`] or
/// [`Scan::Invalid`], call [`reset`](Self::reset) before scanning the next value, with positions
/// relative to the new buffer start.
///
/// The scanner checks only structure that decides where the value ends: brackets are counted
/// without matching their kinds, and tokens are not validated. A `Complete` frame may therefore
/// still fail to parse; that is a parse error for the caller to report.
#[derive(Debug, Clone, Default)]
pub struct Scanner {
    pos: usize,
    start: Option<usize>,
    mode: Mode,
    depth: usize,
    in_string: bool,
    escape: bool,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_scalar_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

impl Scanner {
    /// A scanner at the start of a value.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget all state, ready for the next value.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// How many bytes of the buffer have been scanned so far (never more than its length).
    pub fn scanned(&self) -> usize {
        self.pos
    }

    /// Index of the current value's first byte, once a non-whitespace byte has been seen.
    pub fn value_start(&self) -> Option<usize> {
        self.start
    }

    /// Continue scanning `buf` from where the last call stopped.
    pub fn scan(&mut self, buf: &[u8]) -> Scan {
        // A shorter buffer than before breaks the contract; start over rather than index past
        // the end.
        if self.pos > buf.len() {
            self.reset();
        }
        while self.pos < buf.len() {
            match self.mode {
                Mode::Leading => {
                    let b = buf[self.pos];
                    if is_ws(b) {
                        self.pos += 1;
                        continue;
                    }
                    self.start = Some(self.pos);
                    self.mode = match b {
                        b'{' | b'[' => {
                            self.depth = 1;
                            Mode::Container
                        }
                        b'"' => {
                            self.in_string = true;
                            Mode::TopString
                        }
                        b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => Mode::TopScalar,
                        _ => return Scan::Invalid { at: self.pos },
                    };
                    self.pos += 1;
                }
                Mode::Container | Mode::TopString if self.in_string => {
                    if self.escape {
                        self.escape = false;
                        self.pos += 1;
                        continue;
                    }
                    // Skip ordinary string bytes in one go.
                    let rest = &buf[self.pos..];
                    match rest.iter().position(|&b| b == b'"' || b == b'\\') {
                        None => self.pos = buf.len(),
                        Some(i) => {
                            self.pos += i;
                            if buf[self.pos] == b'\\' {
                                self.escape = true;
                            } else {
                                self.in_string = false;
                            }
                            self.pos += 1;
                            if !self.in_string && self.mode == Mode::TopString {
                                return self.complete();
                            }
                        }
                    }
                }
                Mode::Container => {
                    let b = buf[self.pos];
                    self.pos += 1;
                    match b {
                        b'"' => self.in_string = true,
                        b'{' | b'[' => self.depth += 1,
                        b'}' | b']' => {
                            self.depth -= 1;
                            if self.depth == 0 {
                                return self.complete();
                            }
                        }
                        _ => {}
                    }
                }
                Mode::TopString => {
                    // Unreachable in practice: a top-level string is always `in_string` until it
                    // completes. Treat a stray state as the end of the value.
                    return self.complete();
                }
                Mode::TopScalar => {
                    if is_scalar_byte(buf[self.pos]) {
                        self.pos += 1;
                    } else {
                        return self.complete();
                    }
                }
            }
        }
        Scan::Incomplete
    }

    fn complete(&self) -> Scan {
        Scan::Complete {
            start: self.start.unwrap_or(0),
            end: self.pos,
        }
    }
}

/// Why the [`Framer`] cannot produce the next frame. Either way the stream cannot be resynced:
/// the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The bytes cannot be JSON.
    #[error("malformed json")]
    Malformed,
    /// The value is (or is going to be) larger than the limit.
    #[error("request exceeds {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// Receive buffer plus [`Scanner`]: push bytes in, take complete JSON values out.
///
/// Whitespace between values is dropped; consumed bytes are discarded lazily, so taking many
/// small frames from one large read costs O(total bytes).
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    head: usize,
    scanner: Scanner,
    max_frame: usize,
    failed: Option<FrameError>,
}

impl Framer {
    /// A framer that rejects values longer than `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Framer {
            buf: Vec::new(),
            head: 0,
            scanner: Scanner::new(),
            max_frame,
            failed: None,
        }
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        if self.head > 0 && (self.head == self.buf.len() || self.head >= self.buf.len() / 2) {
            // Scanner positions are relative to `head`, so moving the window is transparent.
            self.buf.drain(..self.head);
            self.head = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes received but not yet returned as frames (including a partial value).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Whether a partial value (not only whitespace) is buffered.
    pub fn has_partial(&self) -> bool {
        self.buf[self.head..].iter().any(|&b| !is_ws(b))
    }

    /// The next complete value, `None` if more bytes are needed, or an error (sticky: the
    /// framer returns it again on every later call).
    pub fn next_frame(&mut self) -> Option<Result<&[u8], FrameError>> {
        if let Some(e) = self.failed {
            return Some(Err(e));
        }
        let window = &self.buf[self.head..];
        match self.scanner.scan(window) {
            Scan::Incomplete => match self.scanner.value_start() {
                None => {
                    // Only whitespace so far: drop it.
                    self.head += self.scanner.scanned();
                    self.scanner.reset();
                    None
                }
                Some(start) if window.len() - start > self.max_frame => {
                    self.fail(FrameError::TooLarge {
                        limit: self.max_frame,
                    })
                }
                Some(_) => None,
            },
            Scan::Invalid { .. } => self.fail(FrameError::Malformed),
            Scan::Complete { start, end } => {
                if end - start > self.max_frame {
                    return self.fail(FrameError::TooLarge {
                        limit: self.max_frame,
                    });
                }
                let frame = self.head + start..self.head + end;
                self.head += end;
                self.scanner.reset();
                Some(Ok(&self.buf[frame]))
            }
        }
    }

    fn fail(&mut self, e: FrameError) -> Option<Result<&[u8], FrameError>> {
        self.failed = Some(e);
        Some(Err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], chunk: usize) -> (Vec<Vec<u8>>, Option<FrameError>) {
        let mut f = Framer::new(1 << 20);
        let mut out = Vec::new();
        for c in input.chunks(chunk.max(1)) {
            f.push(c);
            loop {
                match f.next_frame() {
                    Some(Ok(fr)) => out.push(fr.to_vec()),
                    Some(Err(e)) => return (out, Some(e)),
                    None => break,
                }
            }
        }
        (out, None)
    }

    #[test]
    fn concatenated_values_with_and_without_whitespace() {
        let input = br#"{"a":1}{"b":[1,2]}  [3]
 {"c":"}{\"]"}"#;
        for chunk in [1, 2, 3, 7, 100] {
            let (fr, err) = frames(input, chunk);
            assert_eq!(err, None);
            assert_eq!(
                fr,
                vec![
                    br#"{"a":1}"#.to_vec(),
                    br#"{"b":[1,2]}"#.to_vec(),
                    b"[3]".to_vec(),
                    br#"{"c":"}{\"]"}"#.to_vec()
                ],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn escapes_split_across_reads() {
        let input = br#"{"k":"a\\"}{"x":"\""}"#;
        let (fr, err) = frames(input, 1);
        assert_eq!(err, None);
        assert_eq!(fr.len(), 2);
        assert_eq!(fr[0], br#"{"k":"a\\"}"#.to_vec());
    }

    #[test]
    fn top_level_scalars() {
        let (fr, err) = frames(b"\"str\" 12 true nul", 1);
        assert_eq!(err, None);
        assert_eq!(
            fr,
            vec![b"\"str\"".to_vec(), b"12".to_vec(), b"true".to_vec()]
        );
    }

    #[test]
    fn invalid_start_byte() {
        let (fr, err) = frames(b"{} }", 1);
        assert_eq!(fr.len(), 1);
        assert_eq!(err, Some(FrameError::Malformed));
        let (_, err) = frames(b"\x00\x01", 4);
        assert_eq!(err, Some(FrameError::Malformed));
    }

    #[test]
    fn too_large_before_complete() {
        let mut f = Framer::new(10);
        f.push(b"   {\"aaaaaaaa");
        assert_eq!(f.next_frame(), None);
        f.push(b"aa");
        assert_eq!(
            f.next_frame(),
            Some(Err(FrameError::TooLarge { limit: 10 }))
        );
        // Sticky.
        assert_eq!(
            f.next_frame(),
            Some(Err(FrameError::TooLarge { limit: 10 }))
        );
    }

    #[test]
    fn too_large_complete() {
        let mut f = Framer::new(4);
        f.push(b"[1,2]");
        assert_eq!(f.next_frame(), Some(Err(FrameError::TooLarge { limit: 4 })));
        let mut f = Framer::new(5);
        f.push(b"[1,2]");
        assert_eq!(f.next_frame(), Some(Ok(&b"[1,2]"[..])));
    }

    #[test]
    fn whitespace_is_dropped() {
        let mut f = Framer::new(4);
        for _ in 0..100 {
            f.push(b"\n\n  \t\r");
            assert_eq!(f.next_frame(), None);
        }
        assert_eq!(f.pending(), 0);
        assert!(!f.has_partial());
        f.push(b" [");
        assert_eq!(f.next_frame(), None);
        assert!(f.has_partial());
    }

    #[test]
    fn scanner_is_linear_across_reads() {
        // A long string pushed one byte at a time is scanned once: `scanned` advances by exactly
        // the bytes added.
        let mut s = Scanner::new();
        let mut buf = b"{\"k\":\"".to_vec();
        assert_eq!(s.scan(&buf), Scan::Incomplete);
        for _ in 0..1000 {
            buf.push(b'x');
            assert_eq!(s.scan(&buf), Scan::Incomplete);
            assert_eq!(s.scanned(), buf.len());
        }
        buf.extend_from_slice(b"\"}");
        assert_eq!(
            s.scan(&buf),
            Scan::Complete {
                start: 0,
                end: buf.len()
            }
        );
    }
}
