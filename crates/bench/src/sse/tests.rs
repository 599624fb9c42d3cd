use bytes::Bytes;
use proptest::prelude::*;

use super::SseSplitter;

fn drain(s: &mut SseSplitter) -> Vec<Bytes> {
    std::iter::from_fn(|| s.next_event()).collect()
}

fn split_all(stream: &[u8], cuts: &[usize]) -> Vec<Bytes> {
    let mut s = SseSplitter::new();
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in cuts {
        s.push(&stream[prev..c]);
        out.extend(drain(&mut s));
        prev = c;
    }
    s.push(&stream[prev..]);
    out.extend(drain(&mut s));
    out
}

#[test]
fn sglang_frames_and_done() {
    let stream = b"data: {\"text\":\" a\",\"output_ids\":[5]}\n\ndata: {\"text\":\" b\"}\n\ndata: [DONE]\n\n";
    let ev = split_all(stream, &[]);
    assert_eq!(
        ev,
        vec![
            Bytes::from_static(b"{\"text\":\" a\",\"output_ids\":[5]}"),
            Bytes::from_static(b"{\"text\":\" b\"}"),
            Bytes::from_static(b"[DONE]"),
        ]
    );
}

#[test]
fn partial_event_waits_for_blank_line() {
    let mut s = SseSplitter::new();
    s.push(b"data: {\"a\":1}\n");
    assert_eq!(s.next_event(), None);
    s.push(b"\n");
    assert_eq!(s.next_event(), Some(Bytes::from_static(b"{\"a\":1}")));
    assert_eq!(s.pending(), 0);
}

#[test]
fn crlf_comments_multiline_and_other_fields() {
    let stream = b": keepalive\r\n\r\nevent: x\r\nid: 3\r\ndata: one\r\ndata:two\r\n\r\ndata\n\n";
    let ev = split_all(stream, &[1, 5, 20]);
    assert_eq!(
        ev,
        vec![Bytes::from_static(b"one\ntwo"), Bytes::from_static(b"")]
    );
}

#[test]
fn stray_blank_lines_yield_nothing() {
    assert!(split_all(b"\n\n\r\n\n", &[]).is_empty());
}

fn encode(events: &[(String, bool)]) -> (Vec<u8>, Vec<Bytes>) {
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    for (payload, crlf) in events {
        let nl: &[u8] = if *crlf { b"\r\n" } else { b"\n" };
        bytes.extend_from_slice(b"data: ");
        bytes.extend_from_slice(payload.as_bytes());
        bytes.extend_from_slice(nl);
        bytes.extend_from_slice(nl);
        want.push(Bytes::copy_from_slice(payload.as_bytes()));
    }
    (bytes, want)
}

proptest! {
    #[test]
    fn any_chunking_yields_the_same_events(
        events in prop::collection::vec(("[^\r\n]{0,40}", any::<bool>()), 0..12),
        mut cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let (stream, want) = encode(&events);
        let mut cuts: Vec<usize> = cuts.drain(..).map(|i| i.index(stream.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(split_all(&stream, &cuts), want.clone());
        // One byte at a time is the worst case.
        let every: Vec<usize> = (1..stream.len()).collect();
        prop_assert_eq!(split_all(&stream, &every), want);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), cut in any::<prop::sample::Index>()) {
        let c = cut.index(bytes.len() + 1);
        let _ = split_all(&bytes, &[c]);
    }
}
