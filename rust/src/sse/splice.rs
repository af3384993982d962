//! [`escape_json_str`] and [`splice`]: a changed text replaces only its string token; every
//! other byte of the event is kept.

use std::ops::Range;

/// Appends `text` (UTF-8) as a JSON string, escaped the way Python's `json.dumps(...,
/// ensure_ascii=False)` does: `"` and `\` and the control characters below U+0020 (the
/// short forms `\b \f \n \r \t`, else `\u00XX` in lower case); everything else as it is.
pub fn escape_json_str(text: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let mut from = 0;
    for (i, &b) in text.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&text[from..i]);
        from = i + 1;
        if short == 0 {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 15)]);
        } else {
            out.push(b'\\');
            out.push(short);
        }
    }
    out.extend_from_slice(&text[from..]);
    out.push(b'"');
}

/// Appends `raw` with each span (sorted, not overlapping) replaced by its text as a JSON string.
pub fn splice<'a>(
    raw: &[u8],
    edits: impl IntoIterator<Item = (Range<usize>, &'a [u8])>,
    out: &mut Vec<u8>,
) {
    let mut from = 0;
    for (span, text) in edits {
        out.extend_from_slice(&raw[from..span.start]);
        escape_json_str(text, out);
        from = span.end;
    }
    out.extend_from_slice(&raw[from..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::{Scan, Scanner, CHAT};

    #[test]
    fn escaping_table() {
        let cases: &[(&str, &str)] = &[
            ("", r#""""#),
            ("plain é 日本", r#""plain é 日本""#),
            ("q\"b\\s/", r#""q\"b\\s/""#),
            ("\n\r\t\u{8}\u{c}", r#""\n\r\t\b\f""#),
            ("\u{0}\u{1f}\u{7f}\u{2028}", "\"\\u0000\\u001f\u{7f}\u{2028}\""),
        ];
        for &(text, want) in cases {
            let mut out = Vec::new();
            escape_json_str(text.as_bytes(), &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }

    #[test]
    fn splice_keeps_every_other_byte() {
        let raw = br#"data: {"a" : 1, "choices":[{"index":0, "delta":{"content":"x\u0041y"}}]}"#;
        let data = &raw[6..];
        let mut s = Scanner::new();
        assert_eq!(s.scan(&CHAT, data), Scan::Texts);
        let f = &s.found[0];
        assert_eq!(&s.scratch[f.text.clone()], b"xAy");
        let mut out = Vec::new();
        let span = f.span.start + 6..f.span.end + 6;
        splice(raw, [(span, &b"new\"text"[..])], &mut out);
        assert_eq!(
            out,
            br#"data: {"a" : 1, "choices":[{"index":0, "delta":{"content":"new\"text"}}]}"#
                .to_vec()
        );
    }
}
