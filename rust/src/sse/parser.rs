//! [`Parser`]: the WHATWG line rules of Server-Sent Events over bytes split anywhere.

const BOM: &[u8] = b"\xef\xbb\xbf";

/// One complete line of the block being read: offsets relative to the block's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// Where the line starts.
    pub start: usize,
    /// Where it ends, line ending included.
    pub end: usize,
    /// For a `data` line: its value (one leading space removed).
    pub value: Option<(usize, usize)>,
}

/// Incremental SSE block parser over bytes split anywhere.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
    /// Where the next line starts.
    pos: usize,
    /// Where the block being read starts.
    block: usize,
    lines: Vec<Line>,
    /// The first line has been seen (its byte order mark, if any, removed).
    started: bool,
    eol: &'static [u8],
    /// The last call returned a block, still readable until the next call.
    dispatched: bool,
}

impl Parser {
    /// A parser at the start of a body.
    pub fn new() -> Parser {
        Parser::default()
    }

    fn settle(&mut self) {
        if self.dispatched {
            self.dispatched = false;
            self.block = self.pos;
            self.lines.clear();
        }
    }

    /// Appends body bytes; then call [`Parser::next_block`] until it returns `false`.
    pub fn push(&mut self, data: &[u8]) {
        self.settle();
        if self.block > 0 {
            self.buf.drain(..self.block);
            self.pos -= self.block;
            self.block = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Reads up to the end of the next complete block; `true` when there is one (read it with
    /// [`Parser::raw`] and [`Parser::lines`] before the next call).
    pub fn next_block(&mut self) -> bool {
        self.settle();
        loop {
            let Some(i) = memchr::memchr2(b'\n', b'\r', &self.buf[self.pos..]) else {
                return false;
            };
            let at = self.pos + i;
            let len = if self.buf[at] == b'\r' {
                match self.buf.get(at + 1) {
                    None => return false, // may be the first half of "\r\n"
                    Some(b'\n') => 2,
                    Some(_) => 1,
                }
            } else {
                1
            };
            if self.line(at, len) {
                return true;
            }
        }
    }

    /// End of the body: a held final `\r` ends its line, which may complete a block (then
    /// `true`: read it before calling [`Parser::discard`]). What is left is an unfinished block,
    /// never dispatched.
    pub fn finish(&mut self) -> bool {
        self.settle();
        let n = self.buf.len();
        if n > self.pos && self.buf[n - 1] == b'\r' {
            return self.line(n - 1, 1);
        }
        false
    }

    /// Drops what is buffered (after [`Parser::finish`]).
    pub fn discard(&mut self) {
        self.buf.clear();
        self.lines.clear();
        self.pos = 0;
        self.block = 0;
        self.dispatched = false;
    }

    /// Handles the line ending at `at` with an ending of `len` bytes; `true` if it was blank.
    fn line(&mut self, at: usize, len: usize) -> bool {
        let start = self.pos;
        self.pos = at + len;
        if self.eol.is_empty() {
            self.eol = match (self.buf[at], len) {
                (b'\r', 2) => b"\r\n",
                (b'\r', _) => b"\r",
                _ => b"\n",
            };
        }
        let mut content = start;
        if !self.started {
            self.started = true;
            if self.buf[start..at].starts_with(BOM) {
                content += BOM.len();
            }
        }
        let base = self.block;
        let mut line = Line { start: start - base, end: self.pos - base, value: None };
        if content == at {
            self.lines.push(line);
            self.dispatched = true;
            return true;
        }
        let text = &self.buf[content..at];
        if text[0] != b':' {
            let (name, value) = match memchr::memchr(b':', text) {
                Some(c) => {
                    let mut v = content + c + 1;
                    if self.buf.get(v) == Some(&b' ') && v < at {
                        v += 1;
                    }
                    (&text[..c], v)
                }
                None => (text, at),
            };
            if name == b"data" {
                line.value = Some((value - base, at - base));
            }
        }
        self.lines.push(line);
        false
    }

    /// The dispatched block's bytes, blank line included.
    pub fn raw(&self) -> &[u8] {
        &self.buf[self.block..self.pos]
    }

    /// The dispatched block's lines.
    pub fn lines(&self) -> &[Line] {
        &self.lines
    }

    /// The body's line ending, once a line has ended (empty before).
    pub fn eol(&self) -> &'static [u8] {
        self.eol
    }

    /// Some of an unfinished block has been received.
    pub fn partial(&self) -> bool {
        let held = if self.dispatched { self.pos } else { self.block };
        self.buf.len() > held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks as (raw bytes, data values).
    type Blocks = Vec<(Vec<u8>, Vec<Vec<u8>>)>;

    /// Every block a body holds, fed in pieces of `size` bytes.
    fn blocks(body: &[u8], size: usize) -> Blocks {
        let mut p = Parser::new();
        let mut out = Vec::new();
        let read = |p: &Parser, out: &mut Blocks| {
            let raw = p.raw().to_vec();
            let values =
                p.lines().iter().filter_map(|l| l.value.map(|(a, b)| raw[a..b].to_vec())).collect();
            out.push((raw, values));
        };
        for piece in body.chunks(size.max(1)) {
            p.push(piece);
            while p.next_block() {
                read(&p, &mut out);
            }
        }
        if p.finish() {
            read(&p, &mut out);
        }
        p.discard();
        out
    }

    #[test]
    fn parser_table() {
        type Case = (&'static [u8], &'static [(&'static [u8], &'static [&'static [u8]])]);
        let cases: &[Case] = &[
            (b"data: a\n\n", &[(b"data: a\n\n", &[b"a"])]),
            (b"data: a\r\n\r\n", &[(b"data: a\r\n\r\n", &[b"a"])]),
            (b"data: a\r\rdata:b\r", &[(b"data: a\r\r", &[b"a"])]),
            (b"data: a\r\rdata:b\r\r", &[(b"data: a\r\r", &[b"a"]), (b"data:b\r\r", &[b"b"])]),
            (b"data\ndata:  x\n\n", &[(b"data\ndata:  x\n\n", &[b"", b" x"])]),
            (
                b": c\nid: 1\nevent: e\ndata: v\n\n",
                &[(b": c\nid: 1\nevent: e\ndata: v\n\n", &[b"v"])],
            ),
            (b"\xef\xbb\xbfdata: a\n\n", &[(b"\xef\xbb\xbfdata: a\n\n", &[b"a"])]),
            (b"\xef\xbb\xbf\n", &[(b"\xef\xbb\xbf\n", &[])]),
            (b"data: a\n\ndata: unfinished\n", &[(b"data: a\n\n", &[b"a"])]),
            (b"data: a\n\ndata: b", &[(b"data: a\n\n", &[b"a"])]),
            (b"\n\n", &[(b"\n", &[]), (b"\n", &[])]),
            (b"data: a\r", &[]),
            (b"data:\n\n", &[(b"data:\n\n", &[b""])]),
            (b"datax: a\n\n", &[(b"datax: a\n\n", &[])]),
        ];
        for &(body, want) in cases {
            let want: Blocks = want
                .iter()
                .map(|(raw, values)| (raw.to_vec(), values.iter().map(|v| v.to_vec()).collect()))
                .collect();
            for size in 1..=body.len() + 1 {
                assert_eq!(blocks(body, size), want, "{body:?} in pieces of {size}");
            }
        }
    }

    #[test]
    fn eol_is_the_first_line_ending() {
        let mut p = Parser::new();
        p.push(b"data: a\r");
        assert!(!p.next_block());
        assert_eq!(p.eol(), b"");
        p.push(b"\n\n");
        assert!(p.next_block());
        assert_eq!(p.eol(), b"\r\n");
    }
}
