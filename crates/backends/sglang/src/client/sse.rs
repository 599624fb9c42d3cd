//! [`SseSplitter`]: an incremental Server-Sent-Events splitter.
//!
//! SGLang writes each frame as `data: <json>\n\n` (`spec/sglang-native.md` §9.1), but a network
//! read may hold several events or a fraction of one, so the body is parsed **by event**: bytes are
//! pushed as they arrive and complete events are taken out one at a time. Lines end with `\n`,
//! `\r\n` or `\r` (the SSE grammar); an event ends at an empty line. Only `data` fields are kept
//! (several `data` lines are joined with `\n`); comments (`:…`) and other fields (`event`, `id`,
//! `retry`) are skipped, and an event without a `data` field is not dispatched.

/// Largest event accepted, in bytes. SGLang's cumulative frames grow with the output (and the
/// final frame carries base64 routed experts), so the bound is generous; it exists so a broken
/// upstream that never ends an event cannot grow the buffer without limit.
pub const MAX_EVENT_BYTES: usize = 1 << 30;

/// The buffer holds more than [`MAX_EVENT_BYTES`] without completing an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTooLarge;

impl std::fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SSE event larger than {MAX_EVENT_BYTES} bytes")
    }
}

impl std::error::Error for EventTooLarge {}

/// Splits a byte stream into SSE event payloads (the joined `data` lines).
///
/// Feed with [`SseSplitter::push`], drain with [`SseSplitter::next_event`] until it returns
/// `None`, and at end of stream call [`SseSplitter::finish`] for an event that was not closed by a
/// blank line. The output does not depend on how the input was split into chunks.
#[derive(Debug, Default)]
pub struct SseSplitter {
    /// Input bytes; `buf[head..]` is unconsumed and starts at a line start.
    buf: Vec<u8>,
    /// Start of the unconsumed input.
    head: usize,
    /// Where the search for the next line terminator resumes (`>= head`).
    scan: usize,
    /// The data lines of the event being read.
    data: Vec<u8>,
    /// Whether the event being read has a `data` field.
    has_data: bool,
}

impl SseSplitter {
    /// An empty splitter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a chunk of the body.
    ///
    /// # Errors
    /// [`EventTooLarge`] when the pending, unterminated input exceeds [`MAX_EVENT_BYTES`].
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), EventTooLarge> {
        self.compact();
        let pending = self.buf.len() - self.head;
        if pending + self.data.len() + chunk.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        self.buf.extend_from_slice(chunk);
        Ok(())
    }

    /// The next complete event's payload, if one is buffered.
    pub fn next_event(&mut self) -> Option<Vec<u8>> {
        while let Some((end, next)) = self.line_end() {
            let start = self.head;
            self.head = next;
            self.scan = next;
            if start == end {
                if let Some(event) = self.dispatch() {
                    return Some(event);
                }
            } else if let Some(line) = self.buf.get(start..end) {
                field(&mut self.data, &mut self.has_data, line);
            }
        }
        None
    }

    /// End of stream: the event still open when every one of its lines was terminated but the
    /// closing blank line is missing (`data: {...}\n` then EOF), if any. An unterminated last line
    /// is a cut-off write and is dropped, with the event it belongs to, so a connection closed in
    /// the middle of a frame never yields half a frame.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        if let Some(event) = self.next_event() {
            return Some(event);
        }
        // What is left is one unterminated line, or one ended by a `\r` that waited for a `\n`.
        let tail = std::mem::take(&mut self.buf);
        let rest = tail.get(self.head..).unwrap_or_default();
        self.scan = 0;
        let event = match rest.strip_suffix(b"\r") {
            Some(line) => {
                if !line.is_empty() {
                    field(&mut self.data, &mut self.has_data, line);
                }
                self.dispatch()
            }
            None if rest.is_empty() => self.dispatch(),
            None => {
                self.data.clear();
                self.has_data = false;
                None
            }
        };
        self.head = 0;
        event
    }

    /// Drop consumed input once it is at least half the buffer (amortized O(1) per byte).
    fn compact(&mut self) {
        if self.head == self.buf.len() {
            self.buf.clear();
            self.scan = 0;
            self.head = 0;
        } else if self.head > 0 && self.head >= self.buf.len() / 2 {
            self.buf.drain(..self.head);
            self.scan -= self.head;
            self.head = 0;
        }
    }

    /// The end of the line starting at `head` and the start of the next one, once the line's
    /// terminator is buffered. A trailing `\r` waits for the next byte (it may start `\r\n`).
    fn line_end(&mut self) -> Option<(usize, usize)> {
        let from = self.scan.max(self.head);
        let rel = memchr::memchr2(b'\n', b'\r', self.buf.get(from..)?);
        let Some(rel) = rel else {
            self.scan = self.buf.len();
            return None;
        };
        let end = from + rel;
        match (self.buf.get(end), self.buf.get(end + 1)) {
            (Some(b'\n'), _) => Some((end, end + 1)),
            (Some(b'\r'), Some(b'\n')) => Some((end, end + 2)),
            (Some(b'\r'), Some(_)) => Some((end, end + 1)),
            _ => {
                // A lone `\r` at the end of the buffer: wait for more input.
                self.scan = end;
                None
            }
        }
    }

    /// Close the current event.
    fn dispatch(&mut self) -> Option<Vec<u8>> {
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(std::mem::take(&mut self.data))
    }
}

/// Apply one non-empty line to the event being read.
fn field(data: &mut Vec<u8>, has_data: &mut bool, line: &[u8]) {
    let (name, value) = match line.iter().position(|&b| b == b':') {
        Some(0) => return, // comment
        Some(i) => {
            let value = line.get(i + 1..).unwrap_or_default();
            (
                line.get(..i).unwrap_or_default(),
                value.strip_prefix(b" ").unwrap_or(value),
            )
        }
        None => (line, &[][..]),
    };
    if name == b"data" {
        if *has_data {
            data.push(b'\n');
        }
        data.extend_from_slice(value);
        *has_data = true;
    }
}

#[cfg(test)]
mod tests;
