//! A format's **framing**: the bytes around its answers that are not the answers themselves —
//! how SSE events are delimited and terminated, the content types, and the bodies of the
//! HTTP-level refusals the shared handler sends on its own (unknown path, wrong method, a
//! request refused before any route ran). The shared handler writes exactly these bytes and
//! knows none of them itself; each format crate declares its engine's ([`GenerateFormat::framing`]).
//!
//! [`GenerateFormat::framing`]: crate::GenerateFormat::framing

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use http::StatusCode;

use crate::NativeResponse;

/// How a format frames its streams and its HTTP-level refusals (see the module docs).
///
/// An SSE body is, for events `e1 … en`: `sse_prefix e1 sse_suffix … sse_prefix en sse_suffix
/// sse_done` ([`Framing::frame_events`]); an error event after the headers is one more event,
/// then `sse_done`.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    /// Bytes before each event payload, e.g. `data: `.
    pub sse_prefix: &'static [u8],
    /// Bytes after each event payload, e.g. `\n\n` (the blank line ending an SSE event).
    pub sse_suffix: &'static [u8],
    /// Bytes ending every stream after its last event, e.g. `data: [DONE]\n\n`; empty for none.
    pub sse_done: &'static [u8],
    /// `Content-Type` of a streaming answer, e.g. `text/event-stream`.
    pub sse_content_type: &'static str,
    /// `Content-Type` of a JSON answer, e.g. `application/json`.
    pub json_content_type: &'static str,
    /// The answer to a request for a path no route serves (404).
    pub not_found: fn() -> NativeResponse,
    /// The answer to a served path asked with a method it does not accept (405).
    pub method_not_allowed: fn() -> NativeResponse,
    /// An HTTP-level refusal the handler makes before a route runs, or of a route that is not a
    /// generate route (a missing `Host` header, oversized headers, no worker for an
    /// information route): `status` and a human-readable `message`.
    pub http_error: fn(StatusCode, &str) -> NativeResponse,
}

impl Framing {
    /// Bytes one event of `payload_len` bytes takes on the wire, framing included.
    pub fn event_len(&self, payload_len: usize) -> usize {
        self.sse_prefix.len() + payload_len + self.sse_suffix.len()
    }

    /// Frame `events` (drained) into one body chunk, then [`Framing::sse_done`] when `done`.
    pub fn frame_events(&self, events: &mut Vec<Bytes>, done: bool) -> Bytes {
        let len: usize = events
            .iter()
            .map(|e| self.event_len(e.len()))
            .sum::<usize>()
            + if done { self.sse_done.len() } else { 0 };
        let mut buf = BytesMut::with_capacity(len);
        for e in events.drain(..) {
            buf.put_slice(self.sse_prefix);
            buf.put_slice(&e);
            buf.put_slice(self.sse_suffix);
        }
        if done {
            buf.put_slice(self.sse_done);
        }
        buf.freeze()
    }
}

impl Framing {
    /// Frame `events` (drained) as [`Framing::frame_events`] does, as body chunks pushed to
    /// `out` whose concatenation is `frame_events`'s one chunk: an event of at least `large`
    /// bytes is pushed as it is, not copied (a relayed engine frame goes out from the engine's
    /// own buffer), and the framing around it and every smaller event are copied into the
    /// chunks between. Nothing is pushed for no events without `done`.
    pub fn frame_events_into(
        &self,
        events: &mut Vec<Bytes>,
        done: bool,
        large: usize,
        out: &mut VecDeque<Bytes>,
    ) {
        let copied: usize = events
            .iter()
            .map(|e| {
                if e.len() >= large {
                    self.event_len(0)
                } else {
                    self.event_len(e.len())
                }
            })
            .sum::<usize>()
            + if done { self.sse_done.len() } else { 0 };
        let mut buf = BytesMut::with_capacity(copied);
        for e in events.drain(..) {
            buf.put_slice(self.sse_prefix);
            if e.len() >= large {
                if !buf.is_empty() {
                    out.push_back(buf.split().freeze());
                }
                out.push_back(e);
            } else {
                buf.put_slice(&e);
            }
            buf.put_slice(self.sse_suffix);
        }
        if done {
            buf.put_slice(self.sse_done);
        }
        if !buf.is_empty() {
            out.push_back(buf.freeze());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: StatusCode, message: &str) -> NativeResponse {
        NativeResponse::json(status, message.to_owned())
    }
    fn nf() -> NativeResponse {
        refusal(StatusCode::NOT_FOUND, "nf")
    }
    fn mna() -> NativeResponse {
        refusal(StatusCode::METHOD_NOT_ALLOWED, "mna")
    }

    const F: Framing = Framing {
        sse_prefix: b"data: ",
        sse_suffix: b"\n\n",
        sse_done: b"data: [DONE]\n\n",
        sse_content_type: "text/event-stream",
        json_content_type: "application/json",
        not_found: nf,
        method_not_allowed: mna,
        http_error: refusal,
    };

    #[test]
    fn frames_events_and_the_terminator() {
        let mut ev = vec![Bytes::from_static(b"{\"a\":1}"), Bytes::from_static(b"2")];
        let out = F.frame_events(&mut ev, false);
        assert_eq!(&out[..], b"data: {\"a\":1}\n\ndata: 2\n\n");
        assert!(ev.is_empty());
        assert_eq!(out.len(), F.event_len(7) + F.event_len(1));
        let mut ev = vec![Bytes::from_static(b"x")];
        assert_eq!(
            &F.frame_events(&mut ev, true)[..],
            b"data: x\n\ndata: [DONE]\n\n"
        );
        assert_eq!(
            &F.frame_events(&mut Vec::new(), true)[..],
            b"data: [DONE]\n\n"
        );
    }

    #[test]
    fn large_events_go_out_uncopied_between_copied_framing() {
        let big = Bytes::from(vec![b'x'; 10]);
        for (done, large) in [(false, 10), (true, 10), (true, 1), (false, 100)] {
            let events = vec![
                Bytes::from_static(b"a"),
                big.clone(),
                Bytes::from_static(b"bb"),
                big.clone(),
            ];
            let whole = F.frame_events(&mut events.clone(), done);
            let mut drained = events.clone();
            let mut out = VecDeque::new();
            F.frame_events_into(&mut drained, done, large, &mut out);
            assert!(drained.is_empty());
            let joined: Vec<u8> = out.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(joined, &whole[..], "done {done}, large {large}");
            // Each large event is its own chunk, sharing the event's buffer.
            let shared = out.iter().filter(|c| c.as_ptr() == big.as_ptr()).count();
            assert_eq!(shared, if large <= 10 { 2 } else { 0 });
            assert!(out.iter().all(|c| !c.is_empty()));
        }
        let mut out = VecDeque::new();
        F.frame_events_into(&mut Vec::new(), false, 1, &mut out);
        assert!(out.is_empty());
    }
}
