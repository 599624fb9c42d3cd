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
//! Work is linear in the input: each byte is scanned once; a chunk's complete lines are read
//! straight from it (a `data` value is copied once, into its event), only an unterminated last
//! line is kept until the next chunk.

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
/// `Ok(None)`. At the end of the body either stop (WHATWG) or call [`SseSplitter::finish`]
/// (lenient, see the module docs). The output does not depend on how the input was split into
/// chunks. After an [`EventTooLarge`], the splitter must not be used any more.
///
/// Each push reads the lines its chunk completes at once, straight from the chunk: a line's
/// `data` value is copied once, into its event. A chunk's unterminated last line is kept until
/// a later chunk ends it: a `data` line whose field name is complete goes on straight into its
/// event (so a large frame split over many reads is still copied once), any other is kept as
/// it is.
#[derive(Debug)]
pub struct SseSplitter {
    /// The unterminated last line of the input so far (empty when the input ended on a line end
    /// or the line is `open_data`).
    partial: Vec<u8>,
    /// The unterminated last line is a `data` line whose value so far is already in `data`.
    open_data: bool,
    /// That line ended right after its colon so far: a space starting the next input is the
    /// optional one after the colon, not part of the value.
    space_pending: bool,
    /// The data lines of the event being read.
    data: Vec<u8>,
    /// Whether the event being read has a `data` field.
    has_data: bool,
    /// The last line ended with a `\r` at the end of the input: a leading `\n` of the next
    /// input belongs to it.
    skip_lf: bool,
    /// Complete events not taken yet, oldest first.
    ready: std::collections::VecDeque<Vec<u8>>,
    /// The event being read went past the limit (reported after the events before it).
    too_large: bool,
    /// Largest event accepted.
    limit: usize,
    /// Bytes reserved for an event when its first value starts: a little more than the last
    /// event took (a cumulative stream's frames grow by a little each), so a frame read over
    /// many chunks is not copied again by the buffer's growth.
    size_hint: usize,
}

impl Default for SseSplitter {
    fn default() -> Self {
        Self::new()
    }
}

/// A kept partial line whose buffer grew past this is released once the line ends (a large
/// frame's buffer is not held by an idle stream).
const KEEP_PARTIAL_CAPACITY: usize = 16 * 1024;

impl SseSplitter {
    /// A splitter that accepts events up to [`MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }

    /// A splitter that refuses events larger than `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            partial: Vec::new(),
            open_data: false,
            space_pending: false,
            data: Vec::new(),
            has_data: false,
            skip_lf: false,
            ready: std::collections::VecDeque::new(),
            too_large: false,
            limit,
            size_hint: 0,
        }
    }

    /// The largest event this splitter accepts.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Append a chunk of the body (the events it completes are read now).
    pub fn push(&mut self, chunk: &[u8]) {
        if self.too_large {
            return;
        }
        let mut rest = chunk;
        if self.skip_lf
            && let Some(&first) = rest.first()
        {
            self.skip_lf = false;
            if first == b'\n' {
                rest = rest.get(1..).unwrap_or_default();
            }
        }
        if self.space_pending
            && let Some(&first) = rest.first()
        {
            self.space_pending = false;
            if first == b' ' {
                rest = rest.get(1..).unwrap_or_default();
            }
        }
        if self.open_data {
            // The open data line ends in this chunk, or grows by all of it.
            let Some(t) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.data.extend_from_slice(rest);
                self.check_open();
                return;
            };
            self.data
                .extend_from_slice(rest.get(..t).unwrap_or_default());
            self.open_data = false;
            rest = self.after_terminator(rest, t);
            if self.data.len() > self.limit {
                self.too_large = true;
                return;
            }
        } else if !self.partial.is_empty() {
            // The kept line ends in this chunk, or grows by all of it.
            let Some(t) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.partial.extend_from_slice(rest);
                self.check_open();
                return;
            };
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(rest.get(..t).unwrap_or_default());
            rest = self.after_terminator(rest, t);
            self.line(&line);
            if line.capacity() <= KEEP_PARTIAL_CAPACITY {
                line.clear();
                self.partial = line;
            }
            if self.too_large {
                return;
            }
        }
        while let Some(t) = memchr::memchr2(b'\n', b'\r', rest) {
            let line = rest.get(..t).unwrap_or_default();
            rest = self.after_terminator(rest, t);
            self.line(line);
            if self.too_large {
                return;
            }
        }
        if rest.is_empty() {
            return;
        }
        if self.partial.is_empty()
            && let Some(value) = rest.strip_prefix(b"data:")
        {
            // The field name is complete: the value goes on into the event.
            self.reserve_event();
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data
                .extend_from_slice(value.strip_prefix(b" ").unwrap_or(value));
            self.has_data = true;
            self.open_data = true;
            // `data: ` split right after the colon: the optional space may start the next
            // chunk; it is dropped there.
            self.space_pending = value.is_empty();
        } else {
            self.partial.extend_from_slice(rest);
        }
        self.check_open();
    }

    /// The next complete event's payload, if one is buffered.
    ///
    /// # Errors
    /// [`EventTooLarge`] when the event being read (its data so far plus its unterminated line)
    /// exceeds the limit, after the events completed before it.
    pub fn next_event(&mut self) -> Result<Option<Vec<u8>>, EventTooLarge> {
        if let Some(event) = self.ready.pop_front() {
            return Ok(Some(event));
        }
        if self.too_large {
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
        let cut_off = !self.partial.is_empty() || self.open_data;
        self.partial = Vec::new();
        self.open_data = false;
        self.space_pending = false;
        self.skip_lf = false;
        if cut_off {
            self.data.clear();
            self.has_data = false;
            return Ok(None);
        }
        Ok(self.dispatch())
    }

    /// `rest` past its line terminator at `t`: `\r\n` is one terminator; a `\r` ending the
    /// input may be followed by the `\n` of the next input, which then belongs to it.
    fn after_terminator<'a>(&mut self, rest: &'a [u8], t: usize) -> &'a [u8] {
        match (rest.get(t), rest.get(t + 1)) {
            (Some(b'\r'), Some(b'\n')) => rest.get(t + 2..).unwrap_or_default(),
            (Some(b'\r'), None) => {
                self.skip_lf = true;
                &[]
            }
            _ => rest.get(t + 1..).unwrap_or_default(),
        }
    }

    /// One complete line: a blank one ends the event, any other is a field.
    fn line(&mut self, line: &[u8]) {
        if line.is_empty() {
            if let Some(event) = self.dispatch() {
                self.ready.push_back(event);
            }
            return;
        }
        if line.starts_with(b"data") {
            self.reserve_event();
        }
        field(&mut self.data, &mut self.has_data, line);
        if self.data.len() > self.limit {
            self.too_large = true;
        }
    }

    /// The open event's data plus its unterminated line must stay within the limit.
    fn check_open(&mut self) {
        if self.data.len() + self.partial.len() > self.limit {
            self.too_large = true;
        }
    }

    /// Close the current event.
    fn dispatch(&mut self) -> Option<Vec<u8>> {
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        let event = std::mem::take(&mut self.data);
        self.size_hint = event
            .len()
            .saturating_add(event.len() / 8 + 64)
            .min(self.limit);
        Some(event)
    }

    /// At the start of an event, room for about the last event's size.
    fn reserve_event(&mut self) {
        if !self.has_data && self.data.capacity() == 0 {
            self.data.reserve(self.size_hint);
        }
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
