//! Server-sent events split **by event** (blank-line delimited), independent of how the network
//! cut the byte stream.
//!
//! Only `data:` lines matter to the native routes (no `event:`/`id:`, no heartbeats, spec §9.1 /
//! §7); other fields and `:` comments are skipped. Lines may end in `\n` or `\r\n`.

use bytes::{Buf, Bytes, BytesMut};

/// Incremental SSE decoder: [`push`](Self::push) network chunks, then drain
/// [`next_event`](Self::next_event) until it returns `None`.
#[derive(Debug, Default)]
pub struct SseSplitter {
    buf: BytesMut,
    /// Bytes of `buf` already searched for a line end.
    scanned: usize,
    /// Start of the current (unterminated) line within `buf`.
    line_start: usize,
}

impl SseSplitter {
    /// An empty splitter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append one network chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes received that do not yet form a complete event.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete event's data (its `data:` lines joined by `\n`, one leading space
    /// stripped from each). Events without a `data:` line are skipped. A single-line event is
    /// returned without copying.
    pub fn next_event(&mut self) -> Option<Bytes> {
        loop {
            let rel = memchr_nl(&self.buf[self.scanned..])?;
            let nl = self.scanned + rel;
            self.scanned = nl + 1;
            let line = trim_cr(&self.buf[self.line_start..nl]);
            if !line.is_empty() {
                self.line_start = nl + 1;
                continue;
            }
            // A blank line ends the event made of everything before it.
            let event_len = self.line_start;
            let mut event = self.buf.split_to(nl + 1).freeze();
            event.truncate(event_len);
            self.scanned = 0;
            self.line_start = 0;
            if let Some(data) = event_data(event) {
                return Some(data);
            }
        }
    }
}

fn memchr_nl(hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == b'\n')
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The value of a `data` field line, or `None` for any other line.
fn data_value(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"data")?;
    if rest.is_empty() {
        return Some(rest);
    }
    let rest = rest.strip_prefix(b":")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// Extract the data of one event (`event` holds its lines, each `\n`-terminated).
fn event_data(event: Bytes) -> Option<Bytes> {
    let mut first: Option<(usize, usize)> = None;
    let mut joined: Option<BytesMut> = None;
    let mut pos = 0;
    for raw in event.split_inclusive(|&b| b == b'\n') {
        let start = pos;
        pos += raw.len();
        let line = trim_cr(raw.strip_suffix(b"\n").unwrap_or(raw));
        let Some(value) = data_value(line) else {
            continue;
        };
        let offset = start + (line.len() - value.len());
        match (&mut joined, first) {
            (None, None) => first = Some((offset, value.len())),
            (None, Some((o, l))) => {
                let mut j = BytesMut::with_capacity(event.len());
                j.extend_from_slice(&event[o..o + l]);
                j.extend_from_slice(b"\n");
                j.extend_from_slice(value);
                joined = Some(j);
            }
            (Some(j), _) => {
                j.extend_from_slice(b"\n");
                j.extend_from_slice(value);
            }
        }
    }
    if let Some(j) = joined {
        return Some(j.freeze());
    }
    let (o, l) = first?;
    let mut event = event;
    event.advance(o);
    event.truncate(l);
    Some(event)
}

#[cfg(test)]
mod tests;
