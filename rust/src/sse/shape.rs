//! [`Shape`] and [`Scanner`]: where the text sits in one provider event's JSON, given as data.

use std::ops::Range;

use jiter::{Jiter, NumberInt, Peek};

/// What one field of an event must hold.
#[derive(Debug)]
pub enum Rule {
    /// The text to scan: a JSON string.
    Text,
    /// The text to scan if the field is there (in the elements of a [`Rule::Parts`] array).
    OptionalText,
    /// An integer naming the text stream, the stream id's part at this position (up to two
    /// per stream: `(output, part)`, say), wherever the key sits in the object.
    Id(usize),
    /// An integer naming the text stream (a one-part id); absent or `null`, the element's
    /// position in its [`Rule::Each`] array (Gemini's candidate `index`).
    Index,
    /// `null` or absent (a `finish_reason`, a `usage`): anything else is not the common case.
    Null,
    /// `null`, `[]` or absent (`logprobs` when none were asked for).
    Empty,
    /// `true`: the texts of this [`Rule::Parts`] element are not scanned (a Gemini thought
    /// part); `false`, `null` or absent: they are.
    Unscanned,
    /// The event's sequence number, an integer: in [`Scanner::sequence`].
    Sequence,
    /// A discriminator: this string. Another string at the top level of the event is a
    /// [`Scan::Other`], and the rest of the event is not parsed.
    Is(&'static str),
    /// An object with these fields.
    Object(&'static [Field]),
    /// An array of objects, each one a text stream with these fields.
    Each(&'static [Field]),
    /// An array of objects within one text stream, each with these fields: the texts of all
    /// elements but the [`Rule::Unscanned`] ones are the stream's, in order.
    Parts(&'static [Field]),
}

impl Rule {
    fn required(&self) -> bool {
        !matches!(
            self,
            Rule::Null | Rule::Empty | Rule::OptionalText | Rule::Index | Rule::Unscanned
        )
    }
}

/// A field of an event shape: its key and what it holds.
#[derive(Debug)]
pub struct Field {
    /// The JSON key.
    pub key: &'static str,
    /// What the value must be.
    pub rule: Rule,
}

/// Where the text sits in one provider event, as a table: fields not listed are skipped (and
/// kept as they are); a listed field is required unless its rule makes it optional
/// ([`Rule::Null`], [`Rule::Empty`], [`Rule::OptionalText`], [`Rule::Index`], [`Rule::Unscanned`]).
#[derive(Debug)]
pub struct Shape {
    /// The fields of the event object.
    pub fields: &'static [Field],
    /// The event object itself is one text stream (its [`Rule::Id`] and [`Rule::Text`] are at
    /// its top level or in nested objects), rather than holding an array of them.
    pub stream: bool,
}

/// OpenAI Chat Completions chunk: `choices[i].delta.content` of a choice named by `index`, with
/// no `finish_reason`, in a chunk without `usage`.
pub const CHAT: Shape = Shape {
    fields: &[
        Field {
            key: "choices",
            rule: Rule::Each(&[
                Field { key: "index", rule: Rule::Id(0) },
                Field { key: "finish_reason", rule: Rule::Null },
                Field {
                    key: "delta",
                    rule: Rule::Object(&[Field { key: "content", rule: Rule::Text }]),
                },
            ]),
        },
        Field { key: "usage", rule: Rule::Null },
    ],
    stream: false,
};

/// Anthropic Messages `content_block_delta` event with a `text_delta`, of the block `index`.
pub const MESSAGES: Shape = Shape {
    fields: &[
        Field { key: "type", rule: Rule::Is("content_block_delta") },
        Field { key: "index", rule: Rule::Id(0) },
        Field {
            key: "delta",
            rule: Rule::Object(&[
                Field { key: "type", rule: Rule::Is("text_delta") },
                Field { key: "text", rule: Rule::Text },
            ]),
        },
    ],
    stream: true,
};

/// OpenAI Responses `response.output_text.delta` event: `delta` of the content part named by
/// (`output_index`, `content_index`), numbered by `sequence_number`, with no `logprobs`.
pub const RESPONSES: Shape = Shape {
    fields: &[
        Field { key: "type", rule: Rule::Is("response.output_text.delta") },
        Field { key: "output_index", rule: Rule::Id(0) },
        Field { key: "content_index", rule: Rule::Id(1) },
        Field { key: "delta", rule: Rule::Text },
        Field { key: "sequence_number", rule: Rule::Sequence },
        Field { key: "logprobs", rule: Rule::Empty },
    ],
    stream: true,
};

/// Gemini `GenerateContentResponse` chunk: the text parts of `candidates[i].content.parts`
/// (all but the `thought` ones) of the candidate named by `index` (else by its position),
/// with no finish reason. The chunk's other fields (`usageMetadata`, `modelVersion`, ...)
/// are skipped; so are the parts' other fields and the parts without `text` (function calls,
/// inline data).
///
/// Any number of text parts per candidate: the adapter feeds a candidate's text parts in
/// order through its one filter, and when no stop fires (the only case handled natively)
/// each part's new text depends on the filter and that part alone, so feeding them in order
/// and splicing each part gives the adapter's bytes; a stop (later parts dropped, a finish
/// reason added) is the adapter's. Each candidate must hold at least one scanned text: a
/// candidate is recognised as open by its text's stream, and one without (a chunk of thought
/// parts only) could name a candidate the adapter has not seen yet, which it would register;
/// such chunks take the adapter's path.
pub const GEMINI: Shape = Shape {
    fields: &[Field {
        key: "candidates",
        rule: Rule::Each(&[
            Field { key: "index", rule: Rule::Index },
            Field { key: "finishReason", rule: Rule::Null },
            Field { key: "finish_reason", rule: Rule::Null },
            Field {
                key: "content",
                rule: Rule::Object(&[Field {
                    key: "parts",
                    rule: Rule::Parts(&[
                        Field { key: "text", rule: Rule::OptionalText },
                        Field { key: "thought", rule: Rule::Unscanned },
                    ]),
                }]),
            },
        ]),
    }],
    stream: false,
};

/// One text found by a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The stream's id, part by part as the shape numbers them (unused parts are 0).
    pub ids: [i64; 2],
    /// How many ids the stream has.
    pub id_count: u8,
    /// The element of the [`Rule::Each`] array the text is in (0 in a [`Shape::stream`]
    /// event): texts of one element are one stream's, fed in order.
    pub group: usize,
    /// The string token in the event's JSON, quotes included.
    pub span: Range<usize>,
    /// The decoded text, in [`Scanner::scratch`].
    pub text: Range<usize>,
}

/// The outcome of [`Scanner::scan`].
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// The common case: the texts are in [`Scanner::found`].
    Texts,
    /// A top-level discriminator holds another value (in [`Scanner::other`]); nothing after it
    /// was parsed.
    Other,
    /// Not the common case (another shape, invalid JSON, duplicate keys among the listed
    /// fields, numbers that are not plain integers, lone surrogates): the full adapter decides.
    Slow,
}

/// Scans events for their texts, reusing its buffers.
#[derive(Debug, Default)]
pub struct Scanner {
    /// The texts of the last [`Scan::Texts`] scan.
    pub found: Vec<Found>,
    /// Their decoded bytes.
    pub scratch: Vec<u8>,
    /// The discriminator's value of the last [`Scan::Other`] scan.
    pub other: String,
    /// The [`Rule::Sequence`] number of the last [`Scan::Texts`] scan.
    pub sequence: Option<i64>,
}

/// A failed scan: not the common case.
struct NotCommon;

enum Flow {
    Done,
    Other,
}

#[derive(Clone, Copy)]
struct Scope {
    ids: [i64; 2],
    id_count: u8,
    /// The first of its texts in [`Scanner::found`].
    first: usize,
    /// The element's position in its [`Rule::Each`] array (0 for a [`Shape::stream`] event).
    position: usize,
    /// A [`Rule::Unscanned`] field of the element being read was `true`.
    unscanned: bool,
}

impl Scope {
    fn new(first: usize, position: usize) -> Scope {
        Scope { ids: [0; 2], id_count: 0, first, position, unscanned: false }
    }

    fn id(&mut self, slot: usize, id: i64) -> Result<(), NotCommon> {
        if self.id_count >= 2 || slot >= 2 {
            return Err(NotCommon);
        }
        self.ids[slot] = id;
        self.id_count += 1;
        Ok(())
    }
}

fn ok<T, E>(r: Result<T, E>) -> Result<T, NotCommon> {
    r.map_err(|_| NotCommon)
}

impl Scanner {
    /// A scanner with empty buffers.
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// Scans one event's JSON (`data`, valid UTF-8 expected: other bytes are [`Scan::Slow`]).
    pub fn scan(&mut self, shape: &Shape, data: &[u8]) -> Scan {
        self.found.clear();
        self.scratch.clear();
        self.sequence = None;
        if std::str::from_utf8(data).is_err() {
            return Scan::Slow;
        }
        let mut j = Jiter::new(data);
        let mut scope = Scope::new(0, 0);
        let result = (|| {
            if ok(j.peek())? != Peek::Object {
                return Err(NotCommon);
            }
            let flow = self.object(&mut j, shape.fields, &mut scope, shape.stream, true)?;
            if matches!(flow, Flow::Other) {
                return Ok(Flow::Other);
            }
            if shape.stream {
                self.close_scope(scope)?;
            }
            ok(j.finish())?;
            Ok(Flow::Done)
        })();
        match result {
            Ok(Flow::Done) => Scan::Texts,
            Ok(Flow::Other) => Scan::Other,
            Err(NotCommon) => Scan::Slow,
        }
    }

    /// Every text of a stream gets the stream's ids; a stream has at least one id and one text.
    fn close_scope(&mut self, scope: Scope) -> Result<(), NotCommon> {
        if scope.id_count == 0 || self.found.len() == scope.first {
            return Err(NotCommon);
        }
        for f in &mut self.found[scope.first..] {
            f.ids = scope.ids;
            f.id_count = scope.id_count;
            f.group = scope.position;
        }
        Ok(())
    }

    /// A plain integer (not a float, not a bool).
    fn int(j: &mut Jiter<'_>, peek: Peek) -> Result<i64, NotCommon> {
        if peek != Peek::Minus && !peek.into_inner().is_ascii_digit() {
            return Err(NotCommon);
        }
        let NumberInt::Int(i) = ok(j.known_int(peek))?;
        Ok(i)
    }

    /// Reads the object whose `{` is next.
    fn object(
        &mut self,
        j: &mut Jiter<'_>,
        fields: &[Field],
        scope: &mut Scope,
        in_scope: bool,
        top: bool,
    ) -> Result<Flow, NotCommon> {
        debug_assert!(fields.len() <= 64);
        let mut seen: u64 = 0;
        let mut key = ok(j.known_object())?.map(|k| fields.iter().position(|f| f.key == k));
        while let Some(position) = key {
            match position {
                None => ok(j.next_skip())?,
                Some(i) => {
                    if seen & (1 << i) != 0 {
                        return Err(NotCommon); // duplicate: the last one would win
                    }
                    seen |= 1 << i;
                    if let Flow::Other = self.value(j, &fields[i].rule, scope, in_scope, top)? {
                        return Ok(Flow::Other);
                    }
                }
            }
            key = ok(j.next_key())?.map(|k| fields.iter().position(|f| f.key == k));
        }
        for (i, field) in fields.iter().enumerate() {
            if seen & (1 << i) == 0 {
                if field.rule.required() {
                    return Err(NotCommon);
                }
                if let Rule::Index = field.rule {
                    scope.id(0, ok(i64::try_from(scope.position))?)?;
                }
            }
        }
        Ok(Flow::Done)
    }

    fn value(
        &mut self,
        j: &mut Jiter<'_>,
        rule: &Rule,
        scope: &mut Scope,
        in_scope: bool,
        top: bool,
    ) -> Result<Flow, NotCommon> {
        let peek = ok(j.peek())?;
        match rule {
            Rule::Text | Rule::OptionalText => {
                if peek != Peek::String || !in_scope {
                    return Err(NotCommon);
                }
                let start = j.current_index();
                let text = ok(j.known_str())?;
                let from = self.scratch.len();
                self.scratch.extend_from_slice(text.as_bytes());
                let span = start..j.current_index();
                let text = from..self.scratch.len();
                self.found.push(Found { ids: [0; 2], id_count: 0, group: 0, span, text });
            }
            Rule::Id(slot) => {
                if !in_scope {
                    return Err(NotCommon);
                }
                scope.id(*slot, Self::int(j, peek)?)?;
            }
            Rule::Index => {
                if !in_scope {
                    return Err(NotCommon);
                }
                if peek == Peek::Null {
                    ok(j.known_null())?;
                    scope.id(0, ok(i64::try_from(scope.position))?)?;
                } else {
                    scope.id(0, Self::int(j, peek)?)?;
                }
            }
            Rule::Sequence => self.sequence = Some(Self::int(j, peek)?),
            Rule::Empty => match peek {
                Peek::Null => ok(j.known_null())?,
                Peek::Array if ok(j.known_array())?.is_none() => {}
                _ => return Err(NotCommon),
            },
            Rule::Unscanned => match peek {
                Peek::True => {
                    ok(j.known_bool(peek))?;
                    scope.unscanned = true;
                }
                Peek::False => ok(j.known_bool(peek)).map(drop)?,
                Peek::Null => ok(j.known_null())?,
                _ => return Err(NotCommon),
            },
            Rule::Null => {
                if peek != Peek::Null {
                    return Err(NotCommon);
                }
                ok(j.known_null())?;
            }
            Rule::Is(expected) => {
                if peek != Peek::String {
                    return Err(NotCommon);
                }
                let value = ok(j.known_str())?;
                if value != *expected {
                    if !top {
                        return Err(NotCommon);
                    }
                    self.other.clear();
                    self.other.push_str(value);
                    return Ok(Flow::Other);
                }
            }
            Rule::Object(fields) => {
                if peek != Peek::Object {
                    return Err(NotCommon);
                }
                self.object(j, fields, scope, in_scope, false)?;
            }
            Rule::Each(fields) => {
                if peek != Peek::Array || in_scope {
                    return Err(NotCommon);
                }
                self.each(j, fields)?;
            }
            Rule::Parts(fields) => {
                if peek != Peek::Array || !in_scope {
                    return Err(NotCommon);
                }
                self.parts(j, fields, scope)?;
            }
        }
        Ok(Flow::Done)
    }
}

impl Scanner {
    /// Reads the array whose `[` is next, each element one text stream.
    fn each(&mut self, j: &mut Jiter<'_>, fields: &[Field]) -> Result<(), NotCommon> {
        let mut element = ok(j.known_array())?;
        let mut position = 0;
        while let Some(peek) = element {
            if peek != Peek::Object {
                return Err(NotCommon);
            }
            let mut inner = Scope::new(self.found.len(), position);
            self.object(j, fields, &mut inner, true, false)?;
            self.close_scope(inner)?;
            element = ok(j.array_step())?;
            position += 1;
        }
        Ok(())
    }

    /// Reads the array whose `[` is next, its elements' texts the stream's (but for the
    /// elements marked [`Rule::Unscanned`]).
    fn parts(
        &mut self,
        j: &mut Jiter<'_>,
        fields: &[Field],
        scope: &mut Scope,
    ) -> Result<(), NotCommon> {
        let mut element = ok(j.known_array())?;
        while let Some(peek) = element {
            if peek != Peek::Object {
                return Err(NotCommon);
            }
            let (found, scratch) = (self.found.len(), self.scratch.len());
            scope.unscanned = false;
            self.object(j, fields, scope, true, false)?;
            if scope.unscanned {
                self.found.truncate(found);
                self.scratch.truncate(scratch);
            }
            element = ok(j.array_step())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts found as (first id, JSON token, decoded text); `None` for the slow path.
    type Texts = Option<Vec<(i64, String, String)>>;

    fn texts(shape: &Shape, data: &str) -> Texts {
        let mut s = Scanner::new();
        match s.scan(shape, data.as_bytes()) {
            Scan::Texts => Some(
                s.found
                    .iter()
                    .map(|f| {
                        let text = String::from_utf8(s.scratch[f.text.clone()].to_vec()).unwrap();
                        (f.ids[0], data[f.span.clone()].to_string(), text)
                    })
                    .collect(),
            ),
            Scan::Other => Some(vec![(-1, s.other.clone(), String::new())]),
            Scan::Slow => None,
        }
    }

    #[test]
    fn chat_scan_table() {
        let t = |a: i64, b: &str, c: &str| (a, b.to_string(), c.to_string());
        let cases: &[(&str, Texts)] = &[
            (
                r#"{"id":"x","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
                Some(vec![t(0, "\"Hi\"", "Hi")]),
            ),
            (
                r#" {"choices":[{"delta":{"content":"a\nb\u00e9"},"index":3}]} "#,
                Some(vec![t(3, r#""a\nb\u00e9""#, "a\nbé")]),
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}],"usage":null}"#,
                Some(vec![t(0, "\"a\"", "a"), t(1, "\"b\"", "b")]),
            ),
            (r#"{"choices":[]}"#, Some(vec![])),
            (r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}"#, None),
            (r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#, None),
            (r#"{"choices":[{"index":0,"delta":{"content":null}}]}"#, None),
            (r#"{"choices":[{"index":0.0,"delta":{"content":"a"}}]}"#, None),
            (r#"{"choices":[{"index":true,"delta":{"content":"a"}}]}"#, None),
            (r#"{"choices":[{"delta":{"content":"a"}}]}"#, None),
            (r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#, None),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"total_tokens":1}}"#,
                None,
            ),
            (r#"{"choices":[{"index":0,"delta":{"content":"\ud800"}}]}"#, None),
            (r#"{"choices":[{"index":0,"delta":{"content":"a"}}]} x"#, None),
            (r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"x":NaN}"#, None),
            (r#"{"error":{"message":"x"}}"#, None),
            ("[DONE]", None),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"x":[1,2,{"y":null}]}}]}"#,
                Some(vec![t(0, "\"a\"", "a")]),
            ),
        ];
        for (data, want) in cases {
            assert_eq!(&texts(&CHAT, data), want, "{data}");
        }
    }

    #[test]
    fn messages_scan_table() {
        let cases: &[(&str, Texts)] = &[
            (
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\"q\""}}"#,
                Some(vec![(1, r#""\"q\"""#.into(), "\"q\"".into())]),
            ),
            (
                r#"{"type":"ping" this is never read"#,
                Some(vec![(-1, "ping".into(), String::new())]),
            ),
            (
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
                None,
            ),
            (r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#, None),
            (r#"{"index":0,"type":5}"#, None),
        ];
        for (data, want) in cases {
            assert_eq!(&texts(&MESSAGES, data), want, "{data}");
        }
    }

    /// Texts found as (ids, id count, group, JSON token, decoded text); `None` for the slow
    /// path, `Some(vec![])` for another kind of event.
    type Found2 = Option<Vec<([i64; 2], u8, usize, String, String)>>;

    fn found(shape: &Shape, data: &str) -> (Found2, Option<i64>) {
        let mut s = Scanner::new();
        let texts = match s.scan(shape, data.as_bytes()) {
            Scan::Texts => Some(
                s.found
                    .iter()
                    .map(|f| {
                        let text = String::from_utf8(s.scratch[f.text.clone()].to_vec()).unwrap();
                        (f.ids, f.id_count, f.group, data[f.span.clone()].to_string(), text)
                    })
                    .collect(),
            ),
            Scan::Other => Some(vec![]),
            Scan::Slow => None,
        };
        (texts, s.sequence)
    }

    #[test]
    fn responses_scan_table() {
        let f = |ids: [i64; 2], token: &str, text: &str| {
            Some(vec![(ids, 2, 0, token.to_string(), text.to_string())])
        };
        let d = r#""type":"response.output_text.delta""#;
        let cases: Vec<(String, Found2, Option<i64>)> = vec![
            (
                format!(
                    r#"{{{d},"item_id":"msg_1","output_index":2,"content_index":1,"delta":"Hi \"x\"","sequence_number":7,"logprobs":[]}}"#
                ),
                f([2, 1], r#""Hi \"x\"""#, "Hi \"x\""),
                Some(7),
            ),
            (
                format!(
                    r#"{{"sequence_number":3,"content_index":0,{d},"output_index":1,"delta":"a","obfuscation":"xyz"}}"#
                ),
                f([1, 0], "\"a\"", "a"),
                Some(3),
            ),
            (
                format!(
                    r#"{{{d},"output_index":0,"content_index":0,"delta":"a","sequence_number":3,"logprobs":null}}"#
                ),
                f([0, 0], "\"a\"", "a"),
                Some(3),
            ),
            // Never parsed past the type.
            (r#"{"type":"response.output_text.done","output_index":0,"#.into(), Some(vec![]), None),
            // Logprobs, no number, a float number, a missing id: the machine's rules.
            (
                format!(
                    r#"{{{d},"output_index":0,"content_index":0,"delta":"a","sequence_number":3,"logprobs":[{{"token":"a"}}]}}"#
                ),
                None,
                None,
            ),
            (format!(r#"{{{d},"output_index":0,"content_index":0,"delta":"a"}}"#), None, None),
            (
                format!(
                    r#"{{{d},"output_index":0,"content_index":0,"delta":"a","sequence_number":3.0}}"#
                ),
                None,
                None,
            ),
            (format!(r#"{{{d},"output_index":0,"delta":"a","sequence_number":3}}"#), None, None),
            (
                format!(
                    r#"{{{d},"output_index":0,"content_index":0,"delta":null,"sequence_number":3}}"#
                ),
                None,
                None,
            ),
        ];
        for (data, texts, sequence) in cases {
            let (got, seq) = found(&RESPONSES, &data);
            assert_eq!(got, texts, "{data}");
            if got.as_ref().is_some_and(|t| !t.is_empty()) {
                assert_eq!(seq, sequence, "{data}");
            }
        }
    }

    #[test]
    fn gemini_scan_table() {
        let t = |id: i64, group: usize, token: &str, text: &str| {
            ([id, 0], 1, group, token.to_string(), text.to_string())
        };
        let cases: &[(&str, Found2)] = &[
            (
                r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":3}}"#,
                Some(vec![t(0, 0, "\"Hi\"", "Hi")]),
            ),
            // Spaces after colons, as the API writes them; no index: the position.
            (
                r#"{"candidates": [{"content": {"parts": [{"text": "a\nb"}],"role": "model"}}],"modelVersion": "g"}"#,
                Some(vec![t(0, 0, r#""a\nb""#, "a\nb")]),
            ),
            // Thought parts and function calls are skipped; texts of a candidate in order.
            (
                r#"{"candidates":[{"content":{"parts":[{"text":"plan","thought":true},{"text":"a"},{"functionCall":{"name":"f","args":{"x":[1,{"text":"no"}]}}},{"thought":false,"text":"b","thoughtSignature":"c2ln"}]}}]}"#,
                Some(vec![t(0, 0, "\"a\"", "a"), t(0, 0, "\"b\"", "b")]),
            ),
            (
                r#"{"candidates":[{"content":{"parts":[{"text":"x"}]},"index":null},{"index":1,"content":{"parts":[{"text":"y"}]}}]}"#,
                Some(vec![t(0, 0, "\"x\"", "x"), t(1, 1, "\"y\"", "y")]),
            ),
            (
                r#"{"candidates":[{"content":{"parts":[{"text":"x"}]},"index":1},{"content":{"parts":[{"text":"y"}]},"index":0}]}"#,
                Some(vec![t(1, 0, "\"x\"", "x"), t(0, 1, "\"y\"", "y")]),
            ),
            (r#"{"candidates":[],"usageMetadata":{}}"#, Some(vec![])),
            // The machine's rules: a finish reason, no scanned text in a candidate, no parts,
            // no candidates, odd values.
            (
                r#"{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}]}"#,
                None,
            ),
            (
                r#"{"candidates":[{"content":{"parts":[{"text":"x"}]},"finish_reason":"STOP"}]}"#,
                None,
            ),
            (r#"{"candidates":[{"content":{"parts":[{"text":"x","thought":true}]}}]}"#, None),
            (r#"{"candidates":[{"content":{"parts":[{"functionCall":{}}]}}]}"#, None),
            (r#"{"candidates":[{"content":{"role":"model"}}]}"#, None),
            (r#"{"promptFeedback":{"blockReason":"OTHER"}}"#, None),
            (r#"{"candidates":[{"content":{"parts":[{"text":"x","thought":1}]}}]}"#, None),
            (r#"{"candidates":[{"content":{"parts":[{"text":null}]}}]}"#, None),
            (r#"{"candidates":[{"content":{"parts":[{"text":"x"}]},"index":"0"}]}"#, None),
            (r#"{"candidates":[{"content":{"parts":["x"]}}]}"#, None),
            (r#"{"candidates":[{"content":{"parts":[{"text":"x","text":"y"}]}}]}"#, None),
        ];
        for (data, want) in cases {
            assert_eq!(&found(&GEMINI, data).0, want, "{data}");
        }
    }
}
