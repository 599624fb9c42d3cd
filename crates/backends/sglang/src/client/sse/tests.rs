use proptest::prelude::*;

use super::SseSplitter;

/// Every event of `input` fed in `chunks` (chunk boundaries at the given cut points), with the
/// end-of-stream event.
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
        assert!(s.push(chunk).is_ok());
        at = cut;
        while let Some(e) = s.next_event() {
            out.push(e);
        }
    }
    out.extend(s.finish());
    out
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
fn end_of_stream() {
    // Terminated lines without the closing blank line: the event is complete.
    assert_eq!(texts(&split(b"data: {\"x\":1}\n", &[])), ["{\"x\":1}"]);
    assert_eq!(texts(&split(b"data: {\"x\":1}\r", &[])), ["{\"x\":1}"]);
    // A cut-off last line is dropped with its event.
    assert!(split(b"data: {\"x\":", &[]).is_empty());
    assert!(split(b"data: a\ndata: {\"x\":", &[]).is_empty());
    assert_eq!(texts(&split(b"data: a\n\ndata: {\"x", &[])), ["a"]);
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

    /// Arbitrary bytes never panic, and chunking never changes the result.
    #[test]
    fn arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        prop_assert_eq!(split(&bytes, &cuts), split(&bytes, &[]));
    }
}
