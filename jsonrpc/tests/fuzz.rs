//! Fuzz-style property tests of the input path: scanner, framer, request decoding and
//! `decode_params`, on arbitrary bytes and on valid requests with random mutations.
//!
//! Case count: 2000 by default, `PROPTEST_CASES` overrides it.

#[cfg(test)]
mod fuzz {
    use bdevkit_jsonrpc::decode_params;
    use bdevkit_jsonrpc::framing::{FrameError, Framer, Scan, Scanner};
    use bdevkit_jsonrpc::message::{parse_message, Message, Request};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use serde::Deserialize;
    use serde_json::{json, Map, Value};

    fn config() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2000);
        ProptestConfig {
            cases,
            // Failures are reported; no regression files are written for this fuzz-style suite.
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// A params struct shaped like a bdev create call.
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "decoded only to exercise decode_params")]
    struct CreateParams {
        name: String,
        num_blocks: Option<u64>,
        block_size: Option<u32>,
        readonly: Option<bool>,
        base_bdevs: Option<Vec<String>>,
    }

    /// Everything the server does with one frame, short of dispatch.
    fn process_frame(frame: &[u8]) -> Option<Message> {
        let msg = parse_message(frame).ok()?;
        let reqs = match &msg {
            Message::Single(r) => vec![r.clone()],
            Message::Batch(v) => v.clone(),
            Message::Other => vec![],
        };
        for r in reqs {
            if let Request::Call(c) = r {
                let _ = decode_params::<CreateParams>(c.params.clone());
                let _ = decode_params::<Map<String, Value>>(c.params);
            }
        }
        Some(msg)
    }

    /// Feed `input` to a framer in chunks cut at `cuts`, checking invariants; return the frames and
    /// the error that ended the stream, if any.
    fn frame_all(input: &[u8], cuts: &[usize], max: usize) -> (Vec<Vec<u8>>, Option<FrameError>) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        points.push(input.len());
        points.sort_unstable();
        let mut framer = Framer::new(max);
        let mut frames = Vec::new();
        let mut last = 0;
        for p in points {
            framer.push(&input[last..p]);
            last = p;
            loop {
                match framer.next_frame() {
                    Some(Ok(f)) => {
                        assert!(!f.is_empty());
                        assert!(f.len() <= max);
                        frames.push(f.to_vec());
                    }
                    Some(Err(e)) => return (frames, Some(e)),
                    None => break,
                }
                assert!(framer.pending() <= input.len());
            }
        }
        (frames, None)
    }

    /// Drive a bare scanner over growing prefixes of `input`, checking its positions.
    fn scan_prefixes(input: &[u8], cuts: &[usize]) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        points.push(input.len());
        points.sort_unstable();
        let mut s = Scanner::new();
        let mut base = 0;
        for p in points {
            loop {
                let window = &input[base..p];
                let r = s.scan(window);
                assert!(s.scanned() <= window.len());
                match r {
                    Scan::Incomplete => break,
                    Scan::Complete { start, end } => {
                        assert!(
                            start < end && end <= window.len(),
                            "{start}..{end} of {}",
                            window.len()
                        );
                        base += end;
                        s.reset();
                    }
                    Scan::Invalid { at } => {
                        assert!(at < window.len());
                        return;
                    }
                }
            }
        }
    }

    fn arb_string() -> impl Strategy<Value = String> {
        "[a-z0-9 {}\\[\\]\"\\\\:,\n\t\u{e9}\u{1F600}]{0,12}"
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            prop_oneof![Just(0.5f64), Just(-1.25e-7), Just(3.0e300)].prop_map(Value::from),
            arb_string().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..6).prop_map(Value::from),
                vec((arb_string(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn arb_params() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            arb_json().prop_map(Some),
            // Shaped like CreateParams, sometimes decodable.
            (
                arb_string(),
                proptest::option::of(any::<u64>()),
                proptest::option::of(any::<i64>())
            )
                .prop_map(|(name, nb, bs)| {
                    let mut m = Map::new();
                    m.insert("name".into(), json!(name));
                    if let Some(nb) = nb {
                        m.insert("num_blocks".into(), json!(nb));
                    }
                    if let Some(bs) = bs {
                        m.insert("block_size".into(), json!(bs));
                    }
                    Some(Value::Object(m))
                }),
        ]
    }

    fn arb_id() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            any::<u32>().prop_map(|n| Some(json!(n))),
            arb_string().prop_map(|s| Some(json!(s))),
        ]
    }

    fn arb_request() -> impl Strategy<Value = Value> {
        (
            prop_oneof![
                Just("echo".to_owned()),
                Just("bdev_malloc_create".to_owned()),
                arb_string()
            ],
            arb_id(),
            arb_params(),
        )
            .prop_map(|(method, id, params)| {
                let mut m = Map::new();
                m.insert("jsonrpc".into(), json!("2.0"));
                m.insert("method".into(), json!(method));
                if let Some(id) = id {
                    m.insert("id".into(), id);
                }
                if let Some(p) = params {
                    m.insert("params".into(), p);
                }
                Value::Object(m)
            })
    }

    /// A single request or a batch.
    fn arb_message() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => arb_request(),
            1 => vec(arb_request(), 0..4).prop_map(Value::from),
        ]
    }

    fn encode(values: &[Value], pretty: bool, sep: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for v in values {
            let s = if pretty {
                serde_json::to_string_pretty(v).unwrap()
            } else {
                serde_json::to_string(v).unwrap()
            };
            out.extend_from_slice(s.as_bytes());
            out.extend_from_slice(sep.as_bytes());
        }
        out
    }

    /// Map most bytes onto JSON's structural characters (cheaper than a per-byte union strategy).
    fn json_like(raw: Vec<u8>) -> Vec<u8> {
        const SPECIAL: &[u8] = b"{}[]\"\\:, 1n";
        raw.into_iter()
            .map(|b| {
                let i = usize::from(b);
                if i < 4 * SPECIAL.len() {
                    SPECIAL[i % SPECIAL.len()]
                } else {
                    b
                }
            })
            .collect()
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Flip(usize, u8),
        Truncate(usize),
        Insert(usize, u8),
        Delete(usize),
    }

    fn arb_mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
            any::<usize>().prop_map(Mutation::Truncate),
            (
                any::<usize>(),
                prop_oneof![
                    Just(b'{'),
                    Just(b'}'),
                    Just(b'['),
                    Just(b']'),
                    Just(b'"'),
                    Just(b'\\'),
                    Just(b','),
                    any::<u8>()
                ]
            )
                .prop_map(|(i, b)| Mutation::Insert(i, b)),
            any::<usize>().prop_map(Mutation::Delete),
        ]
    }

    fn mutate(mut bytes: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
        for m in muts {
            let len = bytes.len();
            match *m {
                Mutation::Flip(i, b) if len > 0 => bytes[i % len] ^= b.max(1),
                Mutation::Truncate(i) => bytes.truncate(i % (len + 1)),
                Mutation::Insert(i, b) => bytes.insert(i % (len + 1), b),
                Mutation::Delete(i) if len > 0 => {
                    bytes.remove(i % len);
                }
                _ => {}
            }
        }
        bytes
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in vec(any::<u8>(), 0..256),
            cuts in vec(any::<usize>(), 0..8),
            max in 1usize..300,
        ) {
            scan_prefixes(&bytes, &cuts);
            let (frames, _) = frame_all(&bytes, &cuts, max);
            for f in &frames {
                process_frame(f);
            }
        }

        #[test]
        fn json_like_bytes_never_panic(
            bytes in vec(any::<u8>(), 0..128).prop_map(json_like),
            cuts in vec(any::<usize>(), 0..8),
        ) {
            scan_prefixes(&bytes, &cuts);
            let (frames, _) = frame_all(&bytes, &cuts, 1 << 20);
            for f in &frames {
                process_frame(f);
            }
        }

        #[test]
        fn mutated_requests_never_panic(
            msgs in vec(arb_message(), 1..4),
            pretty in any::<bool>(),
            muts in vec(arb_mutation(), 1..4),
            cuts in vec(any::<usize>(), 0..8),
        ) {
            let input = mutate(encode(&msgs, pretty, ""), &muts);
            scan_prefixes(&input, &cuts);
            let (frames, _) = frame_all(&input, &cuts, 1 << 20);
            for f in &frames {
                process_frame(f);
            }
        }

        #[test]
        fn valid_input_splits_parse_identically(
            msgs in vec(arb_message(), 1..5),
            pretty in any::<bool>(),
            sep in prop_oneof![Just(""), Just("\n"), Just(" \r\n\t")],
            cuts in vec(any::<usize>(), 0..12),
        ) {
            let input = encode(&msgs, pretty, sep);
            let (whole, err) = frame_all(&input, &[], 1 << 20);
            prop_assert_eq!(err, None);
            prop_assert_eq!(whole.len(), msgs.len());
            let (split, err) = frame_all(&input, &cuts, 1 << 20);
            prop_assert_eq!(err, None);
            prop_assert_eq!(&split, &whole);
            for (frame, original) in whole.iter().zip(&msgs) {
                let parsed = process_frame(frame);
                prop_assert!(parsed.is_some());
                // Each frame is exactly the value that was encoded.
                let back: Value = serde_json::from_slice(frame).unwrap();
                prop_assert_eq!(&back, original);
                // And a request decodes to its method and params.
                if let (Some(Message::Single(Request::Call(c))), Value::Object(m)) = (&parsed, original) {
                    prop_assert_eq!(Some(&Value::from(c.method.clone())), m.get("method"));
                    let p = m.get("params").filter(|p| !p.is_null());
                    prop_assert_eq!(c.params.as_ref(), p);
                }
            }
        }
    }
}
