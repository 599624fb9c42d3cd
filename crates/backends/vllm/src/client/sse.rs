//! An incremental Server-Sent Events splitter: bytes in (any network chunking), the `data` of each
//! complete event out.
//!
//! Follows the WHATWG event-stream rules that matter for a JSON producer: lines end with `\n`,
//! `\r\n` or `\r`; a blank line ends an event; `data:` lines (one optional space after the colon)
//! are joined with `\n`; comments (`:` lines) and other fields (`event`, `id`, `retry`) are
//! ignored; an event without data lines is not dispatched; an unterminated event at end of stream
//! is discarded. Work is linear in the input: each byte is scanned once.

/// Why the splitter gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge {
    /// The limit that was exceeded, in bytes.
    pub limit: usize,
}

/// The splitter state. Feed it with [`SseSplitter::push`].
#[derive(Debug)]
pub(crate) struct SseSplitter {
    /// Unconsumed bytes (`buf[start..]` holds no complete line).
    buf: Vec<u8>,
    start: usize,
    /// The `data` of the event being built.
    data: Vec<u8>,
    has_data: bool,
    /// The previous chunk ended in `\r`: a leading `\n` of the next one belongs to it.
    pending_cr: bool,
    limit: usize,
}

impl SseSplitter {
    /// A splitter that refuses events (and lines) larger than `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            data: Vec::new(),
            has_data: false,
            pending_cr: false,
            limit,
        }
    }

    /// Add `chunk` and append the data of every event it completes to `events`.
    ///
    /// # Errors
    /// [`TooLarge`] when an event or a line exceeds the limit; the splitter must not be used
    /// afterwards.
    pub(crate) fn push(&mut self, chunk: &[u8], events: &mut Vec<Vec<u8>>) -> Result<(), TooLarge> {
        let mut chunk = chunk;
        if self.pending_cr && !chunk.is_empty() {
            self.pending_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        self.buf.extend_from_slice(chunk);
        let mut pos = self.start;
        while let Some(offset) = memchr::memchr2(b'\n', b'\r', &self.buf[pos..]) {
            let end = pos + offset;
            let next = match self.buf[end] {
                b'\r' => match self.buf.get(end + 1) {
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                    None => {
                        self.pending_cr = true;
                        end + 1
                    }
                },
                _ => end + 1,
            };
            self.line(self.start, end, events)?;
            self.start = next;
            pos = next;
        }
        if self.buf.len() - self.start > self.limit {
            return Err(TooLarge { limit: self.limit });
        }
        // Compact: drop consumed bytes (amortised O(1) per byte).
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(())
    }

    /// Process the line `buf[from..to]`.
    fn line(&mut self, from: usize, to: usize, events: &mut Vec<Vec<u8>>) -> Result<(), TooLarge> {
        let line = &self.buf[from..to];
        if line.is_empty() {
            if self.has_data {
                events.push(std::mem::take(&mut self.data));
                self.has_data = false;
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
            if self.data.len() > self.limit {
                return Err(TooLarge { limit: self.limit });
            }
        }
        Ok(())
    }
}
