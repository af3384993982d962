//! SSE bodies (`stopstream::sse`). The block parser: fed whole, in the fuzzed pieces and byte by
//! byte, a body gives the blocks (bytes and lines) of a line-by-line reading of the whole body;
//! every block, the one `finish` completes included, is the next bytes of the body and ends at a
//! blank line; `partial` and `eol` agree. The scanner, on each data value, on a block's data
//! lines joined and on the whole body, for each provider shape: what it takes as the common case
//! is a JSON object (serde_json, duplicate keys kept) whose walk by the same shape gives the same
//! texts, ids and sequence number, each span is a string token that decodes to its text; another
//! kind of event names its discriminator; on JSON, a slow scan is a slow walk. Escaping and
//! splicing: a text escapes as Python's `json.dumps(..., ensure_ascii=False)` writes it and reads
//! back as itself; splicing texts into the spans keeps every other byte and gives JSON whose
//! texts are the new ones. No panic on any bytes.
#![no_main]

use std::fmt;
use std::ops::Range;

use libfuzzer_sys::fuzz_target;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use stopstream::sse::{
    escape_json_str, splice, Field, Line, Parser, Rule, Scan, Scanner, Shape, CHAT, GEMINI,
    MESSAGES, RESPONSES,
};

const SHAPES: [&Shape; 4] = [&CHAT, &MESSAGES, &RESPONSES, &GEMINI];

const BOM: &[u8] = b"\xef\xbb\xbf";

/// Characters of the replacement texts: what JSON escapes (quote, backslash, control characters
/// with a short and with a long escape), what it does not (`/`, DEL, U+2028), 2-, 3- and 4-byte
/// characters.
const ALPHABET: [&str; 16] = [
    "a", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{8}", "\u{c}", "\u{0}", "\u{1f}", "\u{7f}",
    "é", "\u{2028}", "😀",
];

/// The fuzzer's bytes: an SSE body, then optionally a NUL byte and control bytes (the last NUL
/// splits them, so a plain body is an input): a count of pieces, the length of each plus one
/// (the body's rest is the last piece), then the replacement texts (bytes mapped onto
/// `ALPHABET`, separated by 0x01 bytes).
struct Input<'a> {
    body: &'a [u8],
    /// Sorted split points, 0 and the body's length included.
    bounds: Vec<usize>,
    /// Never empty.
    texts: Vec<String>,
}

fn decode(data: &[u8]) -> Input<'_> {
    let (body, control) = match data.iter().rposition(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (count, rest) = match control.split_first() {
        Some((&n, rest)) => (usize::from(n % 17).min(rest.len()), rest),
        None => (0, control),
    };
    let mut bounds = vec![0];
    // No control byte is 0: a piece of 0 to 254 bytes.
    for &b in &rest[..count] {
        bounds.push((bounds[bounds.len() - 1] + usize::from(b) - 1).min(body.len()));
    }
    bounds.push(body.len());
    let texts = if control.is_empty() {
        vec![String::new(), ALPHABET.concat()]
    } else {
        rest[count..]
            .split(|&b| b == 1)
            .map(|t| t.iter().map(|&b| ALPHABET[usize::from(b) % ALPHABET.len()]).collect())
            .collect()
    };
    Input { body, bounds, texts }
}

/// A dispatched block: its bytes and its lines.
type Block = (Vec<u8>, Vec<Line>);

/// What a body parses to: its blocks, whether bytes of an unfinished block are left, its line
/// ending.
type Parsed = (Vec<Block>, bool, &'static [u8]);

/// A line ending, after a byte order mark if the line is the body's first.
fn is_blank(line: &[u8], first: bool) -> bool {
    let line = if first { line.strip_prefix(BOM).unwrap_or(line) } else { line };
    matches!(line, b"\n" | b"\r" | b"\r\n")
}

/// Records the block the parser dispatched, `done` bytes into the body.
fn take(p: &Parser, body: &[u8], done: &mut usize, blocks: &mut Vec<Block>) {
    let raw = p.raw();
    assert!(body[*done..].starts_with(raw), "a block is not the next bytes of the body");
    let last = p.lines().last().expect("a block without lines");
    assert!(is_blank(&raw[last.start..last.end], *done == 0 && last.start == 0));
    assert_eq!(last.end, raw.len(), "a block does not end at its blank line");
    *done += raw.len();
    blocks.push((raw.to_vec(), p.lines().to_vec()));
}

/// The body fed to a parser in the pieces `bounds` cut it into.
fn parse(body: &[u8], bounds: &[usize]) -> Parsed {
    let mut p = Parser::new();
    let mut blocks = Vec::new();
    let mut done = 0;
    for w in bounds.windows(2) {
        p.push(&body[w[0]..w[1]]);
        while p.next_block() {
            take(&p, body, &mut done, &mut blocks);
        }
        assert_eq!(p.partial(), done < w[1]);
    }
    if p.finish() {
        take(&p, body, &mut done, &mut blocks);
    }
    let partial = p.partial();
    assert_eq!(partial, done < body.len());
    let eol = p.eol();
    p.discard();
    assert!(!p.partial());
    (blocks, partial, eol)
}

/// The whole body read line by line: a line ends at `\r\n`, `\n` or `\r` (a final `\r` too);
/// the first line's content starts after a byte order mark; a blank line ends a block; a `data`
/// line's value follows its first colon and one space; a line starting with a colon is a
/// comment.
fn naive(body: &[u8]) -> Parsed {
    let (mut blocks, mut lines) = (Vec::new(), Vec::new());
    let (mut block, mut pos) = (0, 0);
    let mut eol: &'static [u8] = b"";
    while let Some(i) = body[pos..].iter().position(|&b| b == b'\n' || b == b'\r') {
        let at = pos + i;
        let ending: &'static [u8] = match &body[at..] {
            [b'\r', b'\n', ..] => b"\r\n",
            [b'\r', ..] => b"\r",
            _ => b"\n",
        };
        if eol.is_empty() {
            eol = ending;
        }
        let end = at + ending.len();
        let mut content = &body[pos..at];
        if pos == 0 {
            content = content.strip_prefix(BOM).unwrap_or(content);
        }
        let value = match content.iter().position(|&b| b == b':') {
            Some(0) => None,
            Some(c) if &content[..c] == b"data" => {
                let v = &content[c + 1..];
                Some(at - v.strip_prefix(b" ").unwrap_or(v).len())
            }
            None if content == b"data" => Some(at),
            _ => None,
        };
        let value = value.map(|v| (v - block, at - block));
        lines.push(Line { start: pos - block, end: end - block, value });
        pos = end;
        if content.is_empty() {
            blocks.push((body[block..end].to_vec(), std::mem::take(&mut lines)));
            block = end;
        }
    }
    (blocks, block < body.len(), eol)
}

/// A JSON value as serde_json reads it, the members of an object in order, duplicates kept.
#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    /// An integer of at most 18 digits: what the scanner reads as one (jiter without its
    /// big-integer feature reads 18 digits; a longer integer is left to the Python stage).
    Int(i64),
    /// A float zero with a minus sign: serde_json reads the integer `-0` so.
    NegativeZero,
    /// Any other number.
    Number,
    Str(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// The integers the scanner reads: fewer than 19 digits.
const INT_LIMIT: u64 = 10u64.pow(18);

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
        Ok(Node::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Node, E> {
        Ok(if i.unsigned_abs() < INT_LIMIT { Node::Int(i) } else { Node::Number })
    }

    fn visit_u64<E>(self, u: u64) -> Result<Node, E> {
        Ok(if u < INT_LIMIT { Node::Int(u as i64) } else { Node::Number })
    }

    fn visit_f64<E>(self, f: f64) -> Result<Node, E> {
        Ok(if f == 0.0 && f.is_sign_negative() { Node::NegativeZero } else { Node::Number })
    }

    fn visit_str<E>(self, s: &str) -> Result<Node, E> {
        Ok(Node::Str(s.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut elements = Vec::new();
        while let Some(e) = seq.next_element()? {
            elements.push(e);
        }
        Ok(Node::Array(elements))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry()? {
            members.push(member);
        }
        Ok(Node::Object(members))
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

/// `data` as one JSON value: `Ok(None)` when serde_json cannot tell (a number beyond the range
/// of `f64`, which Python reads as an infinity; nesting deeper than serde_json's 128 levels),
/// an error for what is not JSON.
fn read(data: &[u8]) -> Result<Option<Node>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(data);
    let node = match Node::deserialize(&mut de) {
        Ok(node) => node,
        Err(e) => {
            let limit = ["number out of range", "recursion limit exceeded"]
                .iter()
                .any(|m| e.to_string().starts_with(m));
            return if limit { Ok(None) } else { Err(e) };
        }
    };
    de.end()?;
    Ok(Some(node))
}

/// A text found: (ids, id count, element, text).
type Text = ([i64; 2], u8, usize, String);

/// What the walk of a shape over a JSON value finds.
#[derive(Debug, PartialEq)]
enum Walked {
    /// The common case: its texts and sequence number.
    Texts(Vec<Text>, Option<i64>),
    /// Another kind of event: the discriminator's value.
    Other(String),
    /// Not the common case.
    Slow,
    /// serde_json cannot tell (a `-0` where an integer is expected, a number out of range, deep nesting).
    Unknown,
}

/// Why a walk ended early.
enum End {
    Slow,
    Other(String),
    Unknown,
}

struct Scope {
    ids: [i64; 2],
    count: u8,
    /// The first of its texts.
    first: usize,
    /// Its position in its `Each` array.
    position: usize,
    unscanned: bool,
}

impl Scope {
    fn new(first: usize, position: usize) -> Scope {
        Scope { ids: [0; 2], count: 0, first, position, unscanned: false }
    }

    fn id(&mut self, slot: usize, id: i64) -> Result<(), End> {
        if self.count >= 2 || slot >= 2 {
            return Err(End::Slow);
        }
        self.ids[slot] = id;
        self.count += 1;
        Ok(())
    }
}

fn int(node: &Node) -> Result<i64, End> {
    match node {
        Node::Int(i) => Ok(*i),
        Node::NegativeZero => Err(End::Unknown),
        _ => Err(End::Slow),
    }
}

/// The shape's rules (`stopstream::sse::Rule`) over a parsed value, member by member in order.
#[derive(Default)]
struct Walk {
    texts: Vec<Text>,
    sequence: Option<i64>,
}

impl Walk {
    fn object(
        &mut self,
        members: &[(String, Node)],
        fields: &[Field],
        scope: &mut Scope,
        in_scope: bool,
        top: bool,
    ) -> Result<(), End> {
        let mut seen = vec![false; fields.len()];
        for (key, value) in members {
            let Some(i) = fields.iter().position(|f| f.key == key) else { continue };
            if seen[i] {
                return Err(End::Slow);
            }
            seen[i] = true;
            self.value(value, &fields[i].rule, scope, in_scope, top)?;
        }
        for (field, seen) in fields.iter().zip(seen) {
            match field.rule {
                _ if seen => {}
                Rule::Index => scope.id(0, scope.position as i64)?,
                Rule::Null | Rule::Empty | Rule::OptionalText | Rule::Unscanned => {}
                _ => return Err(End::Slow),
            }
        }
        Ok(())
    }

    fn value(
        &mut self,
        node: &Node,
        rule: &Rule,
        scope: &mut Scope,
        in_scope: bool,
        top: bool,
    ) -> Result<(), End> {
        match (rule, node) {
            (Rule::Text | Rule::OptionalText, Node::Str(s)) if in_scope => {
                self.texts.push(([0; 2], 0, 0, s.clone()));
            }
            (Rule::Id(slot), _) if in_scope => scope.id(*slot, int(node)?)?,
            (Rule::Index, Node::Null) if in_scope => scope.id(0, scope.position as i64)?,
            (Rule::Index, _) if in_scope => scope.id(0, int(node)?)?,
            (Rule::Sequence, _) => self.sequence = Some(int(node)?),
            (Rule::Null | Rule::Empty | Rule::Unscanned, Node::Null) => {}
            (Rule::Empty, Node::Array(a)) if a.is_empty() => {}
            (Rule::Unscanned, Node::Bool(b)) => scope.unscanned |= b,
            (Rule::Is(want), Node::Str(s)) if s == want => {}
            (Rule::Is(_), Node::Str(s)) if top => return Err(End::Other(s.clone())),
            (Rule::Object(fields), Node::Object(m)) => {
                self.object(m, fields, scope, in_scope, false)?;
            }
            (Rule::Each(fields), Node::Array(elements)) if !in_scope => {
                for (position, e) in elements.iter().enumerate() {
                    let Node::Object(m) = e else { return Err(End::Slow) };
                    let mut inner = Scope::new(self.texts.len(), position);
                    self.object(m, fields, &mut inner, true, false)?;
                    self.close(&inner)?;
                }
            }
            (Rule::Parts(fields), Node::Array(elements)) if in_scope => {
                for e in elements {
                    let Node::Object(m) = e else { return Err(End::Slow) };
                    let n = self.texts.len();
                    scope.unscanned = false;
                    self.object(m, fields, scope, true, false)?;
                    if scope.unscanned {
                        self.texts.truncate(n);
                    }
                }
            }
            _ => return Err(End::Slow),
        }
        Ok(())
    }

    /// A text stream has an id and a text; its texts get its ids.
    fn close(&mut self, scope: &Scope) -> Result<(), End> {
        if scope.count == 0 || self.texts.len() == scope.first {
            return Err(End::Slow);
        }
        for t in &mut self.texts[scope.first..] {
            (t.0, t.1, t.2) = (scope.ids, scope.count, scope.position);
        }
        Ok(())
    }
}

fn walk(shape: &Shape, node: &Node) -> Walked {
    let Node::Object(members) = node else { return Walked::Slow };
    let mut w = Walk::default();
    let mut scope = Scope::new(0, 0);
    let mut walked = w.object(members, shape.fields, &mut scope, shape.stream, true);
    if shape.stream {
        walked = walked.and_then(|()| w.close(&scope));
    }
    match walked {
        Ok(()) => Walked::Texts(w.texts, w.sequence),
        Err(End::Slow) => Walked::Slow,
        Err(End::Other(s)) => Walked::Other(s),
        Err(End::Unknown) => Walked::Unknown,
    }
}

/// The texts of the scanner's last scan.
fn found(s: &Scanner) -> Vec<Text> {
    let text = |f: &stopstream::sse::Found| {
        String::from_utf8(s.scratch[f.text.clone()].to_vec()).expect("a text is not UTF-8")
    };
    s.found.iter().map(|f| (f.ids, f.id_count, f.group, text(f))).collect()
}

/// `text` as Python's `json.dumps(text, ensure_ascii=False)` writes it.
fn naive_escape(text: &str) -> Vec<u8> {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\0'..='\u{1f}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            _ => out.push(c),
        }
    }
    out.push('"');
    out.into_bytes()
}

fn check_escape(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    escape_json_str(text.as_bytes(), &mut out);
    assert_eq!(out, naive_escape(text));
    let back: String = serde_json::from_slice(&out).expect("an escaped text is not JSON");
    assert_eq!(back, text);
    out
}

/// Splices `new` (one text per span) into the spans of the scanner's last scan of `data`.
fn check_splice(s: &mut Scanner, shape: &Shape, data: &[u8], new: &[&str]) {
    let spans: Vec<Range<usize>> = s.found.iter().map(|f| f.span.clone()).collect();
    let sequence = s.sequence;
    let mut want = found(s);
    for (t, &n) in want.iter_mut().zip(new) {
        t.3 = n.to_owned();
    }
    let mut out = Vec::new();
    splice(data, spans.iter().cloned().zip(new.iter().map(|n| n.as_bytes())), &mut out);
    let (mut at, mut from) = (0, 0);
    for (span, &n) in spans.iter().zip(new) {
        for piece in [&data[from..span.start], &check_escape(n)[..]] {
            assert_eq!(out.get(at..at + piece.len()), Some(piece), "splice changed other bytes");
            at += piece.len();
        }
        from = span.end;
    }
    assert_eq!(&out[at..], &data[from..], "splice changed other bytes");
    let node = read(&out).expect("spliced data is not JSON");
    let walked = node.map_or(Walked::Unknown, |n| walk(shape, &n));
    if walked != Walked::Unknown {
        assert_eq!(walked, Walked::Texts(want.clone(), sequence));
    }
    assert_eq!(s.scan(shape, &out), Scan::Texts, "spliced data is not the common case");
    assert_eq!((found(s), s.sequence), (want, sequence));
}

/// Scans `data` with every shape.
fn check_scan(s: &mut Scanner, data: &[u8], texts: &[String]) {
    let node = read(data);
    for shape in SHAPES {
        let scan = s.scan(shape, data);
        let walked = match &node {
            Ok(Some(n)) => Some(walk(shape, n)),
            Ok(None) => Some(Walked::Unknown),
            Err(_) => None,
        };
        match scan {
            Scan::Texts => {
                let walked = walked.expect("the common case is not JSON");
                if walked != Walked::Unknown {
                    assert_eq!(walked, Walked::Texts(found(s), s.sequence));
                }
                let mut last = 0;
                for f in &s.found {
                    assert!(last <= f.span.start && f.span.end <= data.len(), "spans overlap");
                    last = f.span.end;
                    let token = &data[f.span.clone()];
                    assert!(token.len() >= 2 && token[0] == b'"' && token[token.len() - 1] == b'"');
                    let text: String = serde_json::from_slice(token).expect("a span is no string");
                    assert_eq!(text.as_bytes(), &s.scratch[f.text.clone()]);
                }
                let texts_found: Vec<String> = found(s).into_iter().map(|t| t.3).collect();
                for t in &texts_found {
                    check_escape(t);
                }
                let same: Vec<&str> = texts_found.iter().map(String::as_str).collect();
                let new: Vec<&str> =
                    (0..same.len()).map(|i| texts[i % texts.len()].as_str()).collect();
                check_splice(s, shape, data, &same);
                s.scan(shape, data);
                check_splice(s, shape, data, &new);
            }
            Scan::Other => {
                if let Some(w) = walked.filter(|w| *w != Walked::Unknown) {
                    assert_eq!(w, Walked::Other(s.other.clone()));
                }
            }
            Scan::Slow => {
                if let Some(w) = walked {
                    assert!(
                        matches!(w, Walked::Slow | Walked::Unknown),
                        "JSON scanned slow: {w:?}"
                    );
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let input = decode(data);
    let body = input.body;
    let want = naive(body);
    assert_eq!(parse(body, &[0, body.len()]), want, "the whole body");
    assert_eq!(parse(body, &input.bounds), want, "the body in pieces");
    let bytes: Vec<usize> = (0..=body.len()).collect();
    assert_eq!(parse(body, &bytes), want, "the body byte by byte");

    let mut s = Scanner::new();
    for (raw, lines) in &want.0 {
        let values: Vec<&[u8]> =
            lines.iter().filter_map(|l| l.value.map(|(a, b)| &raw[a..b])).collect();
        for v in &values {
            check_scan(&mut s, v, &input.texts);
        }
        if values.len() > 1 {
            check_scan(&mut s, &values.join(&b'\n'), &input.texts);
        }
    }
    check_scan(&mut s, body, &input.texts);
    for t in &input.texts {
        check_escape(t);
    }
    check_escape(&String::from_utf8_lossy(body));
});
