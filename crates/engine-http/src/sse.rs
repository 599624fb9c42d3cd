//! [`SseSplitter`]: an incremental Server-Sent-Events splitter, shared by every HTTP engine client.
//!
//! A network read may hold several events or a fraction of one, so the body is parsed **by
//! event**: bytes are pushed as they arrive and complete events are taken out one at a time
//! ([`SseSplitter::next_event`]). The WHATWG event-stream rules that matter for a JSON producer:
//!
//! - lines end with `\n`, `\r\n` or `\r`; a lone `\r` ends its line at once (so a stream that
//!   ends in `\r\r` still completes its event), and a `\n` right after it — even in the next
//!   read — belongs to it, so a `\r\n` split between two reads is one line end, not two;
//! - a blank line ends an event; `data` lines (one optional space after the colon) are joined with
//!   `\n`; comments (`:…`) and other fields (`event`, `id`, `retry`) are skipped; an event without
//!   a `data` field is not dispatched;
//! - **size limit per event**: an event whose data (plus its unterminated last line) grows past
//!   the limit is refused with [`EventTooLarge`] — the bound is per event, so a read holding many
//!   small events is never refused for its total size;
//! - **end of stream**: a caller that stops at the end of the body follows WHATWG (an event not
//!   closed by a blank line is discarded); [`SseSplitter::finish`] is the lenient variant SGLang's
//!   client uses: an event whose lines were all terminated is dispatched without its blank line,
//!   but an unterminated (cut-off) last line is still dropped with its event, so a connection
//!   closed in the middle of a frame never yields half a frame.
//!
//! Work is linear in the input: each byte is scanned once, consumed input is compacted away.

/// Largest event accepted by [`SseSplitter::new`], in bytes. Cumulative frames grow with the output
/// (and a final frame may carry base64 routed experts), so the bound is generous; it exists so a
/// broken upstream that never ends an event cannot grow the buffer without limit.
pub const MAX_EVENT_BYTES: usize = 1 << 30;

/// An event (or its unterminated last line) exceeds the splitter's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTooLarge {
    /// The limit that was exceeded, in bytes.
    pub limit: usize,
}

impl std::fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SSE event larger than {} bytes", self.limit)
    }
}

impl std::error::Error for EventTooLarge {}

/// Splits a byte stream into SSE event payloads (the joined `data` lines).
///
/// Feed with [`SseSplitter::push`], then drain with [`SseSplitter::next_event`] until it returns
/// `Ok(None)` **before the next push** (the size limit is checked while draining). At the end of
/// the body either stop (WHATWG) or call [`SseSplitter::finish`] (lenient, see the module docs).
/// The output does not depend on how the input was split into chunks. After an
/// [`EventTooLarge`], the splitter must not be used any more.
#[derive(Debug)]
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
    /// The last line ended with a `\r` at the end of the input: a leading `\n` of the next
    /// input belongs to it.
    skip_lf: bool,
    /// Largest event accepted.
    limit: usize,
}

impl Default for SseSplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl SseSplitter {
    /// A splitter that accepts events up to [`MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }

    /// A splitter that refuses events larger than `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            head: 0,
            scan: 0,
            data: Vec::new(),
            has_data: false,
            skip_lf: false,
            limit,
        }
    }

    /// The largest event this splitter accepts.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Append a chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.compact();
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event's payload, if one is buffered.
    ///
    /// # Errors
    /// [`EventTooLarge`] when the event being read (its data so far plus its unterminated line)
    /// exceeds the limit.
    pub fn next_event(&mut self) -> Result<Option<Vec<u8>>, EventTooLarge> {
        while let Some((end, next)) = self.line_end() {
            let start = self.head;
            self.head = next;
            self.scan = next;
            if start == end {
                if let Some(event) = self.dispatch() {
                    return Ok(Some(event));
                }
            } else if let Some(line) = self.buf.get(start..end) {
                field(&mut self.data, &mut self.has_data, line);
                if self.data.len() > self.limit {
                    return Err(EventTooLarge { limit: self.limit });
                }
            }
        }
        if self.data.len() + (self.buf.len() - self.head) > self.limit {
            return Err(EventTooLarge { limit: self.limit });
        }
        Ok(None)
    }

    /// End of stream, lenient: the next buffered event, else the event still open when every one
    /// of its lines was terminated but the closing blank line is missing (`data: {...}\n` then
    /// EOF), if any. An unterminated last line is a cut-off write and is dropped, with the event
    /// it belongs to. Call it until it returns `Ok(None)`.
    ///
    /// # Errors
    /// [`EventTooLarge`] as for [`SseSplitter::next_event`].
    pub fn finish(&mut self) -> Result<Option<Vec<u8>>, EventTooLarge> {
        if let Some(event) = self.next_event()? {
            return Ok(Some(event));
        }
        // What is left is one unterminated line (a cut-off write), or nothing.
        let cut_off = self.head < self.buf.len();
        self.buf.clear();
        self.head = 0;
        self.scan = 0;
        self.skip_lf = false;
        if cut_off {
            self.data.clear();
            self.has_data = false;
            return Ok(None);
        }
        Ok(self.dispatch())
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
    /// terminator is buffered. A `\r` ends a line at once; a `\n` right after it (possibly in
    /// the next read) belongs to it and is skipped.
    fn line_end(&mut self) -> Option<(usize, usize)> {
        if self.skip_lf {
            let next = *self.buf.get(self.head)?;
            self.skip_lf = false;
            if next == b'\n' {
                self.head += 1;
                self.scan = self.scan.max(self.head);
            }
        }
        let from = self.scan.max(self.head);
        let rel = memchr::memchr2(b'\n', b'\r', self.buf.get(from..)?);
        let Some(rel) = rel else {
            self.scan = self.buf.len();
            return None;
        };
        let end = from + rel;
        match (self.buf.get(end), self.buf.get(end + 1)) {
            (Some(b'\r'), Some(b'\n')) => Some((end, end + 2)),
            (Some(b'\r'), None) => {
                // The `\n` of a `\r\n` may come with the next read.
                self.skip_lf = true;
                Some((end, end + 1))
            }
            _ => Some((end, end + 1)),
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
