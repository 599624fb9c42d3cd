//! The SSE splitter: any network chunking gives the same events; arbitrary bytes never panic.

use proptest::prelude::*;

use crate::client::sse::{SseSplitter, TooLarge};

fn split_all(chunks: &[&[u8]], limit: usize) -> Result<Vec<Vec<u8>>, TooLarge> {
    let mut sse = SseSplitter::new(limit);
    let mut events = Vec::new();
    for c in chunks {
        sse.push(c, &mut events)?;
    }
    Ok(events)
}

fn whole(bytes: &[u8]) -> Vec<Vec<u8>> {
    split_all(&[bytes], 1 << 20).expect("small")
}

#[test]
fn events_lines_and_fields() {
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
fn unterminated_and_empty_events_are_not_dispatched() {
    assert!(whole(b"event: ping\n\n\n\ndata: partial").is_empty());
    assert_eq!(whole(b"data\n\n"), vec![Vec::<u8>::new()]);
}

#[test]
fn oversized_events_and_lines_are_refused() {
    assert_eq!(
        split_all(&[b"data: 0123456789\n\n"], 8),
        Err(TooLarge { limit: 8 })
    );
    assert_eq!(
        split_all(&[b"data: 01234", b"56789"], 8),
        Err(TooLarge { limit: 8 })
    );
    assert_eq!(
        split_all(&[b"data: a\ndata: bcdefgh\n\n"], 8),
        Err(TooLarge { limit: 8 })
    );
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    // Event data without line breaks (JSON never has raw ones).
    prop::collection::vec(
        any::<u8>().prop_filter("no CR/LF", |b| *b != b'\n' && *b != b'\r'),
        0..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

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

    #[test]
    fn arbitrary_bytes_never_panic(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16),
        limit in 1usize..128,
    ) {
        let mut sse = SseSplitter::new(limit);
        let mut events = Vec::new();
        for c in &chunks {
            if sse.push(c, &mut events).is_err() {
                break;
            }
        }
        prop_assert!(events.iter().all(|e| e.len() <= limit));
    }
}
