//! [`TokenDecoder`]: how a Hugging Face `tokenizers` decoder turns one token's string into the
//! bytes it stands for, read from the tokenizer's own JSON (`Tokenizer.to_str()`).
//!
//! Per token, not per sequence: a decoder that rewrites a whole sequence (WordPiece's `##`
//! joins, CTC's de-duplication) has no per-token bytes, so it is an error naming it. The
//! supported ones cover byte-level BPE (GPT-2 and its descendants) and SentencePiece-style
//! vocabularies: `ByteLevel`, `Metaspace`, and `Sequence` chains of `Replace`, `ByteFallback`,
//! `Fuse` and `Strip` (one leading space).
//!
//! Reading a 100k-id byte-level vocabulary here, the bytes objects for Python included, takes
//! 14–17 ms; the same rules in Python took 150 ms, and parsing the JSON with `json.loads` 33
//! (`benches/tokens.py`'s vocabulary; the model's vocabulary is walked over, not built).

use std::fmt::Write as _;

use jiter::{Jiter, JiterError, Peek};

use crate::error::Error;
use crate::utf8::char_len;

/// How one token's string becomes bytes, and whether the decoder drops the first space of a
/// sequence's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenDecoder {
    kind: Kind,
    strip: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// GPT-2's byte-level alphabet: each character of [`byte_level`]'s table stands for one
    /// byte; any other character is its own UTF-8.
    ByteLevel,
    /// The replacements in order (Metaspace's is its replacement character by a space), then
    /// UTF-8; with `byte_fallback`, a `<0xNN>` token is the single byte `NN`.
    Replace { replacements: Vec<(String, String)>, byte_fallback: bool },
}

/// A `tokenizers` JSON read: its decoder and the ids of its special added tokens, sorted.
#[derive(Debug)]
pub struct TokenizerJson {
    /// The decoder.
    pub decoder: TokenDecoder,
    /// The ids of the added tokens marked special, in ascending order.
    pub special: Vec<i64>,
}

/// A JSON value of a decoder or an added token, as [`read_value`] reads it.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

/// A JSON object's fields, in order. A repeated key's value is its last, as `json.loads` reads
/// it (a message quoting the object shows every copy; `tokenizers` writes none).
type Object = [(String, Value)];

/// The value of `key` in `object`.
fn get<'a>(object: &'a Object, key: &str) -> Option<&'a Value> {
    object.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// How many arrays and objects a value read may nest (`jiter`'s own limit for its values).
const DEPTH: usize = 200;

/// Reads the next JSON value; with `keep` false, only walks over it (and gives `Null`).
///
/// Only with calls of `jiter` whose inlining into the SSE scanner (`sse/shape.rs`) does not
/// depend on them: objects are walked with the `_bytes` key steps (a key is `tokenizers`'
/// field name, never escaped), numbers read as text, and nothing is skipped with `next_skip`.
/// Given a second caller of `next_object`, `next_key`, `next_skip` or the integer parser, fat
/// LTO stopped inlining them into the scanner, which then took 219 more instructions an event
/// of `sse.wrap_openai` (5,032 against 4,813 in the native module, callgrind).
fn read_value(j: &mut Jiter<'_>, depth: usize, keep: bool) -> Result<Value, String> {
    let text = |e: JiterError| e.to_string();
    if depth >= DEPTH {
        return Err("recursion limit exceeded".into());
    }
    let peek = j.peek().map_err(text)?;
    let value = match peek {
        Peek::Null => j.known_null().map(|()| Value::Null).map_err(text)?,
        Peek::True | Peek::False => Value::Bool(j.known_bool(peek).map_err(text)?),
        Peek::String => {
            let s = j.known_str().map_err(text)?;
            if keep {
                Value::Str(s.to_owned())
            } else {
                Value::Null
            }
        }
        Peek::Array => {
            let mut items = Vec::new();
            let mut next = j.known_array().map_err(text)?;
            while next.is_some() {
                let item = read_value(j, depth + 1, keep)?;
                if keep {
                    items.push(item);
                }
                next = j.array_step().map_err(text)?;
            }
            Value::Array(items)
        }
        Peek::Object => {
            let mut fields = Vec::new();
            // A key is copied only when kept: it borrows the reader, which the value needs.
            let own = |k: &[u8]| keep.then(|| String::from_utf8_lossy(k).into_owned());
            let mut key = j.next_object_bytes().map_err(text)?.map(own);
            while let Some(k) = key {
                let value = read_value(j, depth + 1, keep)?;
                if let Some(k) = k {
                    fields.push((k, value));
                }
                key = j.next_key_bytes().map_err(text)?.map(own);
            }
            Value::Object(fields)
        }
        _ => {
            let number = j.next_number_bytes().map_err(text)?;
            let number = std::str::from_utf8(number).unwrap_or_default();
            if !keep {
                Value::Null
            } else if number.contains(['.', 'e', 'E']) {
                Value::Float(number.parse().map_err(|_| "number out of range")?)
            } else {
                Value::Int(number.parse().map_err(|_| "number out of range")?)
            }
        }
    };
    Ok(if keep { value } else { Value::Null })
}

impl TokenDecoder {
    /// Reads a tokenizer's JSON (`Tokenizer.to_str()`): its `decoder` and its special
    /// `added_tokens`. The rest of the document (the model's vocabulary, megabytes of it) is
    /// walked over without being built.
    ///
    /// # Errors
    ///
    /// A decoder that is not supported or cannot be read (named, or quoted, in the message), or
    /// a document that is not one JSON object.
    pub fn read_tokenizer(json: &[u8]) -> Result<TokenizerJson, Error> {
        let bad = |e: JiterError| Error::tokenizer(format!("tokenizer JSON is invalid: {e}"));
        // A decoder's numbers beyond 64 bits (which `tokenizers` could write for a `Strip`)
        // are valid JSON that this reader does not take: the decoder is unsupported.
        let unread =
            |e: String| Error::tokenizer(format!("unsupported decoder: cannot read it ({e})"));
        let mut jiter = Jiter::new(json);
        let (mut decoder, mut added) = (Value::Null, Value::Null);
        let mut key = jiter.next_object_bytes().map_err(bad)?.map(<[u8]>::to_vec);
        while let Some(k) = key {
            match &k[..] {
                b"decoder" => decoder = read_value(&mut jiter, 0, true).map_err(unread)?,
                b"added_tokens" => {
                    added = read_value(&mut jiter, 0, true)
                        .map_err(|e| Error::tokenizer(format!("tokenizer JSON is invalid: {e}")))?;
                }
                _ => {
                    read_value(&mut jiter, 0, false)
                        .map_err(|e| Error::tokenizer(format!("tokenizer JSON is invalid: {e}")))?;
                }
            }
            key = jiter.next_key_bytes().map_err(bad)?.map(<[u8]>::to_vec);
        }
        jiter.finish().map_err(bad)?;
        let mut special: Vec<i64> = match &added {
            Value::Array(tokens) => tokens
                .iter()
                .filter_map(|t| match t {
                    Value::Object(t) if truthy(get(t, "special")) => match get(t, "id") {
                        Some(Value::Int(id)) => Some(*id),
                        _ => None,
                    },
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        special.sort_unstable();
        let Value::Object(decoder) = decoder else {
            return Err(Error::tokenizer("unsupported decoder: the tokenizer has none".into()));
        };
        Ok(TokenizerJson { decoder: TokenDecoder::from_config(&decoder)?, special })
    }

    /// The decoder a `decoder` object describes.
    fn from_config(d: &Object) -> Result<TokenDecoder, Error> {
        let byte_level = TokenDecoder { kind: Kind::ByteLevel, strip: false };
        match type_of(d) {
            Some("ByteLevel") => Ok(byte_level),
            Some("Metaspace") => metaspace(d),
            Some("Sequence") => {
                let parts: &[Value] = match get(d, "decoders") {
                    Some(Value::Array(parts)) => parts,
                    _ => &[],
                };
                match parts {
                    [Value::Object(one)] if type_of(one) == Some("ByteLevel") => Ok(byte_level),
                    [Value::Object(one)] if type_of(one) == Some("Metaspace") => metaspace(one),
                    _ => sentencepiece(parts),
                }
            }
            other => {
                Err(Error::tokenizer(format!("unsupported decoder: {}", other.unwrap_or("None"))))
            }
        }
    }

    /// Whether the decoder drops one space at the very start of a sequence's text.
    pub fn strips_leading_space(&self) -> bool {
        self.strip
    }

    /// Appends the bytes `token` stands for. `token` is UTF-8, or the UTF-8 of a string with
    /// lone surrogates as Python's `surrogatepass` writes them, which pass through; a byte that
    /// is not part of a well-formed sequence passes through alone.
    pub fn decode(&self, token: &[u8], out: &mut Vec<u8>) {
        match &self.kind {
            Kind::ByteLevel => {
                let mut i = 0;
                while i < token.len() {
                    let b = token[i];
                    // The character's bytes: the lead byte and the continuation bytes that follow
                    // (a character outside the table is copied whole).
                    let more = token[i + 1..].iter().take(char_len(b) - 1);
                    let n = 1 + more.take_while(|&&c| c >> 6 == 2).count();
                    let c = match (b, n) {
                        (0..=0x7F, _) => u32::from(b),
                        (0xC0..=0xDF, 2) => {
                            (u32::from(b & 0x1F) << 6) | u32::from(token[i + 1] & 0x3F)
                        }
                        _ => u32::MAX,
                    };
                    match BYTE_LEVEL.get(c as usize).copied().flatten() {
                        Some(b) => out.push(b),
                        None => out.extend_from_slice(&token[i..i + n]),
                    }
                    i += n;
                }
            }
            Kind::Replace { replacements, byte_fallback } => {
                if *byte_fallback {
                    if let Some(b) = fallback_byte(token) {
                        out.push(b);
                        return;
                    }
                }
                let mut text = token.to_vec();
                for (old, new) in replacements {
                    text = replace_all(&text, old.as_bytes(), new.as_bytes());
                }
                out.extend_from_slice(&text);
            }
        }
    }
}

/// Byte-level BPE's alphabet, by code point: the byte each character stands for. The
/// printable bytes (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) stand for themselves; the other 68 are
/// written as U+0100 onwards, in byte order.
static BYTE_LEVEL: [Option<u8>; 324] = {
    let mut table = [None; 324];
    let mut extra = 0;
    let mut b = 0;
    while b < 256 {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        #[allow(clippy::cast_possible_truncation, reason = "b < 256")]
        if printable {
            table[b] = Some(b as u8);
        } else {
            table[256 + extra] = Some(b as u8);
            extra += 1;
        }
        b += 1;
    }
    table
};

/// The byte of a `<0xNN>` token (two hex digits, either case).
fn fallback_byte(token: &[u8]) -> Option<u8> {
    let [b'<', b'0', b'x', hi, lo, b'>'] = *token else { return None };
    let hex = |d: u8| char::from(d).to_digit(16);
    u8::try_from(hex(hi)? * 16 + hex(lo)?).ok()
}

/// `text` with every `old` replaced by `new`, left to right without overlaps, as `str.replace`
/// does: an empty `old` is inserted around every character.
fn replace_all(text: &[u8], old: &[u8], new: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    if old.is_empty() {
        for (i, &b) in text.iter().enumerate() {
            if i == 0 || !(0x80..0xC0).contains(&b) {
                out.extend_from_slice(new);
            }
            out.push(b);
        }
        out.extend_from_slice(new);
        return out;
    }
    let mut last = 0;
    for at in memchr::memmem::find_iter(text, old) {
        if at >= last {
            out.extend_from_slice(&text[last..at]);
            out.extend_from_slice(new);
            last = at + old.len();
        }
    }
    out.extend_from_slice(&text[last..]);
    out
}

fn type_of(d: &Object) -> Option<&str> {
    match get(d, "type") {
        Some(Value::Str(s)) => Some(s),
        _ => None,
    }
}

/// Python's truth of a JSON value.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null | Value::Bool(false) | Value::Int(0)) => false,
        Some(Value::Float(f)) => *f != 0.0,
        Some(Value::Str(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

fn metaspace(d: &Object) -> Result<TokenDecoder, Error> {
    let replacement = match get(d, "replacement") {
        None => "\u{2581}".to_owned(),
        Some(Value::Str(s)) => s.clone(),
        Some(other) => {
            return Err(Error::tokenizer(format!(
                "unsupported decoder: Metaspace with replacement {}",
                python_json(other)
            )))
        }
    };
    let strip = match get(d, "prepend_scheme") {
        None | Some(Value::Null) => truthy(get(d, "add_prefix_space")),
        Some(Value::Str(s)) => s == "always" || s == "first",
        Some(_) => false,
    };
    let replacements = vec![(replacement, " ".to_owned())];
    Ok(TokenDecoder { kind: Kind::Replace { replacements, byte_fallback: false }, strip })
}

/// A SentencePiece-style chain: `Replace` and `ByteFallback`, then `Fuse`, then a `Strip` of one
/// leading space (or none).
fn sentencepiece(parts: &[Value]) -> Result<TokenDecoder, Error> {
    let (mut replacements, mut byte_fallback, mut fused, mut strip) =
        (Vec::new(), false, false, false);
    for part in parts {
        let Value::Object(d) = part else { return Err(unsupported_part(part)) };
        let int = |key| match get(d, key) {
            Some(Value::Int(n)) => Some(*n),
            Some(Value::Bool(b)) => Some(i64::from(*b)),
            _ => None,
        };
        match type_of(d) {
            Some("Replace") if !fused => {
                let pattern = match get(d, "pattern") {
                    Some(Value::Object(p)) => Some(p),
                    _ => None,
                };
                let Some(Value::Str(old)) = pattern.and_then(|p| get(p, "String")) else {
                    let kind = pattern.and_then(|p| p.first()).map_or("", |(k, _)| k.as_ref());
                    return Err(Error::tokenizer(format!(
                        "unsupported decoder: Replace with a {kind} pattern"
                    )));
                };
                let Some(Value::Str(new)) = get(d, "content") else {
                    return Err(unsupported_part(part));
                };
                replacements.push((old.clone(), new.clone()));
            }
            Some("ByteFallback") if !fused => byte_fallback = true,
            Some("Fuse") => fused = true,
            Some("Strip")
                if fused
                    && matches!(get(d, "content"), Some(Value::Str(s)) if s == " ")
                    && matches!(int("start"), Some(0 | 1))
                    && int("stop") == Some(0) =>
            {
                strip = int("start") == Some(1);
            }
            _ => return Err(unsupported_part(part)),
        }
    }
    Ok(TokenDecoder { kind: Kind::Replace { replacements, byte_fallback }, strip })
}

fn unsupported_part(part: &Value) -> Error {
    Error::tokenizer(format!("unsupported decoder in Sequence: {}", python_json(part)))
}

/// `value` as Python's `json.dumps` writes it by default (`", "` and `": "` between items,
/// non-ASCII escaped), for messages that quote a decoder.
///
/// Its own string escaping, not the SSE layer's `escape_json_str` plus the non-ASCII escapes:
/// given this second caller, fat LTO stopped inlining `escape_json_str` into `splice`, which
/// then took 15 more instructions an event that releases held text (5,219 against 5,204 in the
/// native module, callgrind).
fn python_json(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Float(f) if f.is_finite() => {
                let _ = write!(out, "{f:?}");
            }
            Value::Float(f) => out.push_str(if *f > 0.0 { "Infinity" } else { "-Infinity" }),
            Value::Str(s) => string(s, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i == 0 { "" } else { ", " });
                    write(item, out);
                }
                out.push(']');
            }
            Value::Object(fields) => {
                out.push('{');
                for (i, (k, item)) in fields.iter().enumerate() {
                    out.push_str(if i == 0 { "" } else { ", " });
                    string(k, out);
                    out.push_str(": ");
                    write(item, out);
                }
                out.push('}');
            }
        }
    }
    fn string(s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                ' '..='~' => out.push(c),
                _ => {
                    let mut units = [0; 2];
                    for u in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{u:04x}");
                    }
                }
            }
        }
        out.push('"');
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<TokenizerJson, String> {
        TokenDecoder::read_tokenizer(json.as_bytes()).map_err(|e| e.to_string())
    }

    fn decode(decoder: &str, token: impl AsRef<[u8]>) -> Vec<u8> {
        let json = format!(r#"{{"model": {{"vocab": {{"a": 0}}}}, "decoder": {decoder}}}"#);
        let mut out = Vec::new();
        read(&json).unwrap().decoder.decode(token.as_ref(), &mut out);
        out
    }

    const SENTENCEPIECE: &str = r#"{"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}"#;

    #[test]
    fn tokens_decode_as_their_decoder_says() {
        let byte_level = r#"{"type": "ByteLevel", "add_prefix_space": true}"#;
        let metaspace = r#"{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}"#;
        let cases: &[(&str, &str, &[u8])] = &[
            (byte_level, "Ġhello", b" hello"),
            (byte_level, "ĊĊ", b"\n\n"),
            (byte_level, "Ã©", "é".as_bytes()),
            (byte_level, "ðŁĺĢ", "😀".as_bytes()),
            (byte_level, "Ā", b"\x00"),
            (byte_level, "ł", b"\xa0"),
            (byte_level, "Ń", b"\xad"),
            (byte_level, "<|endoftext|>", b"<|endoftext|>"),
            (byte_level, "中", "中".as_bytes()),
            (SENTENCEPIECE, "▁hello", b" hello"),
            (SENTENCEPIECE, "<0x0A>", b"\n"),
            (SENTENCEPIECE, "<0xe9>", b"\xe9"),
            (SENTENCEPIECE, "<0xZZ>", b"<0xZZ>"),
            (SENTENCEPIECE, "<0x0G>", b"<0x0G>"),
            (SENTENCEPIECE, "<0xg1>", b"<0xg1>"),
            (SENTENCEPIECE, "▁▁a▁", b"  a "),
            (metaspace, "▁the", b" the"),
            (metaspace, "<0x0A>", b"<0x0A>"),
            (r#"{"type": "Sequence", "decoders": [{"type": "ByteLevel"}]}"#, "Ġa", b" a"),
            // A repeated key's last value, as `json.loads` reads it.
            (r#"{"type": "Metaspace", "type": "ByteLevel"}"#, "Ġa", b" a"),
        ];
        for (decoder, token, want) in cases {
            assert_eq!(decode(decoder, token), *want, "{decoder} {token:?}");
        }
        // Bytes that are not well-formed pass through one by one; lone surrogates whole.
        let byte_level = r#"{"type": "ByteLevel"}"#;
        assert_eq!(decode(byte_level, b"\xC3A\xC4\xA0"), b"\xC3A ");
        assert_eq!(decode(byte_level, b"\xED\xA0\x80\xA0"), b"\xED\xA0\x80\xA0");
    }

    #[test]
    fn the_leading_space_rule() {
        let cases = [
            (r#"{"type": "ByteLevel"}"#, false),
            (SENTENCEPIECE, true),
            (&SENTENCEPIECE.replace(r#""start": 1"#, r#""start": 0"#), false),
            (r#"{"type": "Metaspace", "prepend_scheme": "first"}"#, true),
            (r#"{"type": "Metaspace", "prepend_scheme": "never"}"#, false),
            (r#"{"type": "Metaspace", "add_prefix_space": true}"#, true),
            (r#"{"type": "Metaspace"}"#, false),
            (r#"{"type": "Metaspace", "prepend_scheme": null, "add_prefix_space": true}"#, true),
            (
                r#"{"type": "Sequence", "decoders": [{"type": "Metaspace", "prepend_scheme": "always"}]}"#,
                true,
            ),
        ];
        for (decoder, strip) in cases {
            let json = format!(r#"{{"decoder": {decoder}}}"#);
            assert_eq!(read(&json).unwrap().decoder.strips_leading_space(), strip, "{decoder}");
        }
    }

    #[test]
    fn unsupported_decoders_are_named() {
        let cases = [
            (r#"{"decoder": null}"#, "unsupported decoder: the tokenizer has none"),
            (r"{}", "unsupported decoder: the tokenizer has none"),
            (
                r###"{"decoder": {"type": "WordPiece", "prefix": "##"}}"###,
                "unsupported decoder: WordPiece",
            ),
            (r#"{"decoder": {"kind": 1}}"#, "unsupported decoder: None"),
            (
                r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "CTC", "pad_token": "<pad>", "cleanup": true}]}}"#,
                r#"unsupported decoder in Sequence: {"type": "CTC", "pad_token": "<pad>", "cleanup": true}"#,
            ),
            (
                r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "Strip", "content": "é", "start": 1, "stop": 0}]}}"#,
                r#"unsupported decoder in Sequence: {"type": "Strip", "content": "\u00e9", "start": 1, "stop": 0}"#,
            ),
            (
                r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "ByteFallback"}]}}"#,
                r#"unsupported decoder in Sequence: {"type": "ByteFallback"}"#,
            ),
            (
                r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "Strip", "content": " ", "start": 1, "stop": 0}, {"type": "Fuse"}]}}"#,
                r#"unsupported decoder in Sequence: {"type": "Strip", "content": " ", "start": 1, "stop": 0}"#,
            ),
            (
                r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": " "}, "content": "_"}]}}"#,
                "unsupported decoder: Replace with a Regex pattern",
            ),
            (
                r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "BPEDecoder", "suffix": "😀\u007f\u0001\"\\"}]}}"#,
                r#"unsupported decoder in Sequence: {"type": "BPEDecoder", "suffix": "\ud83d\ude00\u007f\u0001\"\\"}"#,
            ),
            (
                r#"{"decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 9223372036854775808, "stop": 0}]}}"#,
                "unsupported decoder: cannot read it (number out of range",
            ),
            (r#"["not", "an", "object"]"#, "tokenizer JSON is invalid"),
            (r#"{"decoder": {"type": "ByteLevel"}} {}"#, "tokenizer JSON is invalid"),
        ];
        for (json, want) in cases {
            let got = read(json).unwrap_err();
            assert!(got.starts_with(want), "{json}: {got}");
        }
    }

    #[test]
    fn nesting_beyond_the_limit_is_an_error_not_a_stack_overflow() {
        let nested = |n: usize| format!(r#"{{"decoder": {}{}}}"#, "[".repeat(n), "]".repeat(n));
        assert!(read(&nested(DEPTH)).unwrap_err().contains("has none"));
        let deep = read(&nested(DEPTH + 1)).unwrap_err();
        assert!(deep.contains("cannot read it (recursion limit exceeded)"), "{deep}");
        let elsewhere = format!(r#"{{"model": {}{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
        assert!(read(&elsewhere).unwrap_err().starts_with("tokenizer JSON is invalid"));
    }

    #[test]
    fn special_ids_are_the_special_added_tokens_sorted() {
        let json = r#"{"added_tokens": [{"id": 7, "special": true}, {"id": 3, "special": false},
            {"id": 2, "special": true}, {"id": 9}], "decoder": {"type": "ByteLevel"}}"#;
        assert_eq!(read(json).unwrap().special, [2, 7]);
    }

    #[test]
    fn the_byte_level_table_covers_every_byte_once() {
        let mut seen = [false; 256];
        for b in BYTE_LEVEL.iter().flatten() {
            assert!(!seen[*b as usize]);
            seen[*b as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(BYTE_LEVEL[usize::from(b'A')], Some(b'A'));
        assert_eq!(BYTE_LEVEL[0x120], Some(b' ')); // 'Ġ'
    }

    #[test]
    fn replace_all_is_str_replace() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("aaa", "aa", "b", "ba"),
            ("▁a▁", "▁", " ", " a "),
            ("é", "", "-", "-é-"),
            ("", "", "-", "-"),
            ("abc", "x", "y", "abc"),
        ];
        for (text, old, new, want) in cases {
            let got = replace_all(text.as_bytes(), old.as_bytes(), new.as_bytes());
            assert_eq!(got, want.as_bytes(), "{text:?}.replace({old:?}, {new:?})");
        }
    }
}
