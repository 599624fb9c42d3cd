//! The SSE splitter: SGLang and vLLM framing, line endings, end of stream, size limits; any
//! network chunking gives the same events; arbitrary bytes never panic.

use proptest::prelude::*;

use super::{EventTooLarge, SseSplitter};

/// Every event of `input` fed in `chunks` (chunk boundaries at the given cut points), with the
/// lenient end-of-stream event.
fn split(input: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    let mut s = SseSplitter::new();
    let mut out = Vec::new();
    let mut at = 0;
    for cut in cuts.into_iter().chain([input.len()]) {
        let Some(chunk) = input.get(at..cut) else {
            continue;
        };
        s.push(chunk);
        at = cut;
        while let Some(e) = s.next_event().expect("small") {
            out.push(e);
        }
    }
    while let Some(e) = s.finish().expect("small") {
        out.push(e);
    }
    out
}

/// Every event of `chunks` without the lenient end of stream (WHATWG), with a `limit`.
fn split_all(chunks: &[&[u8]], limit: usize) -> Result<Vec<Vec<u8>>, EventTooLarge> {
    let mut sse = SseSplitter::with_limit(limit);
    let mut events = Vec::new();
    for c in chunks {
        sse.push(c);
        while let Some(e) = sse.next_event()? {
            events.push(e);
        }
    }
    Ok(events)
}

fn whole(bytes: &[u8]) -> Vec<Vec<u8>> {
    split_all(&[bytes], 1 << 20).expect("small")
}

fn texts(events: &[Vec<u8>]) -> Vec<String> {
    events
        .iter()
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect()
}

#[test]
fn sglang_framing() {
    let body = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
    assert_eq!(
        texts(&split(body, &[])),
        ["{\"a\":1}", "{\"b\":2}", "[DONE]"]
    );
    // One byte at a time.
    let cuts: Vec<usize> = (0..body.len()).collect();
    assert_eq!(split(body, &cuts), split(body, &[]));
}

#[test]
fn vllm_events_lines_and_fields() {
    let wire = b": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\nid: 7\ndata:{\"b\":2}\n\ndata: one\ndata:  two\n\ndata: [DONE]\n\n";
    assert_eq!(
        whole(wire),
        vec![
            b"{\"a\":1}".to_vec(),
            b"{\"b\":2}".to_vec(),
            b"one\n two".to_vec(),
            b"[DONE]".to_vec(),
        ]
    );
}

#[test]
fn line_endings_comments_and_fields() {
    let body = b": keep-alive\r\n\r\nevent: x\r\ndata:no-space\r\ndata: second\r\nid: 7\r\n\r\ndata\n\nretry: 5\n\ndata: cr\r\r";
    assert_eq!(texts(&split(body, &[])), ["no-space\nsecond", "", "cr"]);
    // A `\r\n` split between chunks is one terminator, not two.
    assert_eq!(
        texts(&split(b"data: a\r\n\r\ndata: b\r\n\r\n", &[8, 9, 10])),
        ["a", "b"]
    );
}

#[test]
fn crlf_and_cr_line_ends() {
    assert_eq!(
        whole(b"data: a\r\n\r\ndata: b\r\rdata: c\n\r\n"),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
    // `\r` at the end of one chunk and `\n` at the start of the next are one line end.
    assert_eq!(
        split_all(&[b"data: a\r", b"\n\r", b"", b"\n"], 64).expect("small"),
        vec![b"a".to_vec()]
    );
}

#[test]
fn end_of_stream() {
    // Lenient (`finish`): terminated lines without the closing blank line are an event.
    assert_eq!(texts(&split(b"data: {\"x\":1}\n", &[])), ["{\"x\":1}"]);
    assert_eq!(texts(&split(b"data: {\"x\":1}\r", &[])), ["{\"x\":1}"]);
    // A cut-off last line is dropped with its event.
    assert!(split(b"data: {\"x\":", &[]).is_empty());
    assert!(split(b"data: a\ndata: {\"x\":", &[]).is_empty());
    assert_eq!(texts(&split(b"data: a\n\ndata: {\"x", &[])), ["a"]);
    // WHATWG (no `finish`): an event not closed by a blank line is not dispatched.
    assert!(whole(b"event: ping\n\n\n\ndata: partial").is_empty());
    assert!(whole(b"data: {\"x\":1}\n").is_empty());
    assert_eq!(whole(b"data\n\n"), vec![Vec::<u8>::new()]);
}

#[test]
fn oversized_events_and_lines_are_refused() {
    assert_eq!(
        split_all(&[b"data: 0123456789\n\n"], 8),
        Err(EventTooLarge { limit: 8 })
    );
    assert_eq!(
        split_all(&[b"data: 01234", b"56789"], 8),
        Err(EventTooLarge { limit: 8 })
    );
    assert_eq!(
        split_all(&[b"data: a\ndata: bcdefgh\n\n"], 8),
        Err(EventTooLarge { limit: 8 })
    );
    // The limit is per event: one read holding many small events is fine.
    assert_eq!(
        split_all(&[b"data: a\n\ndata: b\n\ndata: c\n\ndata: d\n\n"], 8).expect("small events"),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
    );
    // Events completed before the oversized one are delivered first.
    let mut sse = SseSplitter::with_limit(8);
    sse.push(b"data: a\n\ndata: 0123456789");
    assert_eq!(sse.next_event(), Ok(Some(b"a".to_vec())));
    assert_eq!(sse.next_event(), Err(EventTooLarge { limit: 8 }));
}

fn event_strategy() -> impl Strategy<Value = Vec<String>> {
    // Each event: 1..3 data lines without line breaks.
    prop::collection::vec(prop::collection::vec("[^\r\n]{0,12}", 1..3), 0..6).prop_map(|events| {
        events
            .into_iter()
            .map(|lines| lines.join("\n"))
            .collect::<Vec<_>>()
    })
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    // Event data without line breaks (JSON never has raw ones).
    prop::collection::vec(
        any::<u8>().prop_filter("no CR/LF", |b| *b != b'\n' && *b != b'\r'),
        0..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any split of a well-formed body yields the same events, whatever the line endings.
    #[test]
    fn any_split_same_events(
        events in event_strategy(),
        crlf in any::<bool>(),
        comments in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let nl = if crlf { "\r\n" } else { "\n" };
        let mut body = String::new();
        for e in &events {
            if comments {
                body.push_str(": ping");
                body.push_str(nl);
            }
            for line in e.split('\n') {
                body.push_str("data: ");
                body.push_str(line);
                body.push_str(nl);
            }
            body.push_str(nl);
        }
        let got = texts(&split(body.as_bytes(), &cuts));
        prop_assert_eq!(got, events);
    }

    /// The same with `\r` line ends too, arbitrary payload bytes, and no lenient end.
    #[test]
    fn any_split_gives_the_same_events(
        events in prop::collection::vec(payload(), 0..8),
        endings in prop::collection::vec(0usize..3, 8),
        cuts in prop::collection::vec(0usize..400, 0..20),
    ) {
        let mut wire = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let eol: &[u8] = [b"\n".as_slice(), b"\r\n", b"\r"][endings[i % endings.len()]];
            wire.extend_from_slice(b": comment");
            wire.extend_from_slice(eol);
            wire.extend_from_slice(b"data: ");
            wire.extend_from_slice(e);
            wire.extend_from_slice(eol);
            wire.extend_from_slice(eol);
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(&wire[at..c]);
            at = c;
        }
        chunks.push(&wire[at..]);
        let got = split_all(&chunks, 1 << 20).expect("small");
        prop_assert_eq!(got, events);
    }

    /// Arbitrary bytes never panic, and chunking never changes the result.
    #[test]
    fn arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        prop_assert_eq!(split(&bytes, &cuts), split(&bytes, &[]));
    }

    /// Under any limit, no dispatched event exceeds it.
    #[test]
    fn arbitrary_bytes_never_exceed_the_limit(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16),
        limit in 1usize..128,
    ) {
        let mut sse = SseSplitter::with_limit(limit);
        let mut events = Vec::new();
        'outer: for c in &chunks {
            sse.push(c);
            loop {
                match sse.next_event() {
                    Ok(Some(e)) => events.push(e),
                    Ok(None) => break,
                    Err(_) => break 'outer,
                }
            }
        }
        prop_assert!(events.iter().all(|e| e.len() <= limit));
    }
}

/// Every cut of a stream into three reads (inside field names, right after a colon, inside
/// `\r\n`, inside values) gives the events of the whole.
#[test]
fn every_three_way_split_gives_the_same_events() {
    let body: &[u8] =
        b"data: {\"a\":1}\n\ndata:x\r\ndata:  y\r\n\r: c\ndata\nid: 1\n\ndata: [DONE]\n\ndata: z";
    let want = split(body, &[]);
    assert_eq!(
        texts(&want),
        ["{\"a\":1}", "x\n y", "", "[DONE]"],
        "the whole"
    );
    for i in 0..=body.len() {
        for j in i..=body.len() {
            assert_eq!(split(body, &[i, j]), want, "cuts at {i} and {j}");
        }
    }
}
