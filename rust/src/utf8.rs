//! Incremental UTF-8 decoding with CPython's error semantics.
//!
//! Bytes arrive split anywhere, so a character may straddle two chunks. The decoder validates
//! whole runs with `std::str::from_utf8` (fast, vectorised by the standard library) and keeps an
//! incomplete trailing sequence (at most 3 bytes) aside until the next chunk. Invalid input is
//! cut into *maximal subparts* (Unicode 15, §3.9 "U+FFFD Substitution of Maximal Subparts"), the
//! practice that both CPython's UTF-8 codec and Rust's `Utf8Error::error_len` follow, so
//! `errors="replace"` yields exactly the U+FFFD count that
//! `codecs.getincrementaldecoder("utf-8")("replace")` yields for any split of the same bytes.

/// U+FFFD REPLACEMENT CHARACTER in UTF-8.
pub const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// How the bytes at the start of a buffer begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// A complete, valid character of this many bytes.
    Char(usize),
    /// A valid prefix of a character that needs more bytes (the buffer ended).
    Incomplete,
    /// A maximal invalid subpart of this many bytes (at least 1).
    Invalid(usize),
}

/// Classifies the first character of `buf` (which must not be empty).
pub fn head(buf: &[u8]) -> Head {
    let b0 = buf[0];
    let (len, lo, hi) = match b0 {
        0x00..=0x7F => return Head::Char(1),
        0xC2..=0xDF => (2, 0x80, 0xBF),
        0xE0 => (3, 0xA0, 0xBF),
        0xE1..=0xEC | 0xEE..=0xEF => (3, 0x80, 0xBF),
        0xED => (3, 0x80, 0x9F),
        0xF0 => (4, 0x90, 0xBF),
        0xF1..=0xF3 => (4, 0x80, 0xBF),
        0xF4 => (4, 0x80, 0x8F),
        _ => return Head::Invalid(1),
    };
    for i in 1..len {
        let Some(&b) = buf.get(i) else { return Head::Incomplete };
        let (lo, hi) = if i == 1 { (lo, hi) } else { (0x80, 0xBF) };
        if !(lo..=hi).contains(&b) {
            return Head::Invalid(i);
        }
    }
    Head::Char(len)
}

/// One piece of decoded input, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Valid UTF-8, to be matched and emitted as is.
    Text(&'a [u8]),
    /// A maximal invalid subpart of `len` bytes starting at `at` (offset in the input).
    Invalid {
        /// Offset of the subpart in the input.
        at: usize,
        /// Length of the subpart.
        len: usize,
    },
    /// A valid prefix of a character at the very end of the input.
    Incomplete(&'a [u8]),
}

/// Splits `input` into valid runs, maximal invalid subparts and an incomplete tail.
pub struct Pieces<'a> {
    input: &'a [u8],
    pos: usize,
    invalid_next: Option<usize>,
}

impl<'a> Pieces<'a> {
    /// Starts splitting `input`.
    pub fn new(input: &'a [u8]) -> Self {
        Pieces { input, pos: 0, invalid_next: None }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Piece<'a>;

    fn next(&mut self) -> Option<Piece<'a>> {
        if let Some(len) = self.invalid_next.take() {
            let at = self.pos;
            self.pos += len;
            return Some(Piece::Invalid { at, len });
        }
        let rest = &self.input[self.pos..];
        if rest.is_empty() {
            return None;
        }
        match std::str::from_utf8(rest) {
            Ok(_) => {
                self.pos = self.input.len();
                Some(Piece::Text(rest))
            }
            Err(e) => {
                let valid = e.valid_up_to();
                match e.error_len() {
                    None if valid == 0 => {
                        self.pos = self.input.len();
                        Some(Piece::Incomplete(rest))
                    }
                    None => {
                        self.pos += valid;
                        Some(Piece::Text(&rest[..valid]))
                    }
                    Some(len) if valid == 0 => {
                        let at = self.pos;
                        self.pos += len;
                        Some(Piece::Invalid { at, len })
                    }
                    Some(len) => {
                        self.pos += valid;
                        self.invalid_next = Some(len);
                        Some(Piece::Text(&rest[..valid]))
                    }
                }
            }
        }
    }
}

/// The length of the UTF-8 sequence that `lead` starts (1 for a continuation byte or any other
/// byte that starts none).
pub(crate) fn char_len(lead: u8) -> usize {
    match lead {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(any(feature = "python", test))]
/// Encodes code points (a Python `str`'s Latin-1, UCS-2 or UCS-4 storage) as UTF-8 into `out`,
/// lone surrogates as three bytes like CPython's `surrogatepass`. Returns the length written,
/// or `None` when `out` might be too small (it must hold 4 bytes per code point; the caller
/// then falls back to a heap buffer).
#[inline]
pub(crate) fn encode_code_points<T: Copy + Into<u32>>(
    units: &[T],
    out: &mut [u8],
) -> Option<usize> {
    if units.len().checked_mul(4)? > out.len() {
        return None;
    }
    let mut n = 0;
    for &u in units {
        let c: u32 = u.into();
        // Each `as u8` keeps only the bits its byte holds.
        if c < 0x80 {
            out[n] = c as u8;
            n += 1;
        } else if c < 0x800 {
            out[n] = 0xC0 | (c >> 6) as u8;
            out[n + 1] = 0x80 | (c & 0x3F) as u8;
            n += 2;
        } else if c < 0x1_0000 {
            out[n] = 0xE0 | (c >> 12) as u8;
            out[n + 1] = 0x80 | ((c >> 6) & 0x3F) as u8;
            out[n + 2] = 0x80 | (c & 0x3F) as u8;
            n += 3;
        } else {
            out[n] = 0xF0 | ((c >> 18) & 0x07) as u8;
            out[n + 1] = 0x80 | ((c >> 12) & 0x3F) as u8;
            out[n + 2] = 0x80 | ((c >> 6) & 0x3F) as u8;
            out[n + 3] = 0x80 | (c & 0x3F) as u8;
            n += 4;
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_table() {
        let cases: &[(&[u8], Head)] = &[
            (b"a", Head::Char(1)),
            (b"\xc3\xa9", Head::Char(2)),
            (b"\xc3", Head::Incomplete),
            (b"\xc3a", Head::Invalid(1)),
            (b"\xc0\x80", Head::Invalid(1)),
            (b"\xe2\x82\xac", Head::Char(3)),
            (b"\xe2\x82", Head::Incomplete),
            (b"\xe2\x82a", Head::Invalid(2)),
            (b"\xe0\x80", Head::Invalid(1)),
            (b"\xed\xa0\x80", Head::Invalid(1)),
            (b"\xf0\x9f\x98\x80", Head::Char(4)),
            (b"\xf0\x9f\x98", Head::Incomplete),
            (b"\xf0\x9f\x98a", Head::Invalid(3)),
            (b"\xf4\x90\x80\x80", Head::Invalid(1)),
            (b"\xf5", Head::Invalid(1)),
            (b"\xff", Head::Invalid(1)),
            (b"\x80", Head::Invalid(1)),
        ];
        for (input, want) in cases {
            assert_eq!(head(input), *want, "{input:x?}");
        }
    }

    #[test]
    fn code_points_encode_like_std_and_surrogatepass() {
        let text = "aé€中😀\u{10FFFF}\u{7F}\u{80}\u{7FF}\u{800}\u{FFFF}\u{10000}";
        let mut out = [0u8; 64];
        let ucs4: Vec<u32> = text.chars().map(u32::from).collect();
        let n = encode_code_points(&ucs4, &mut out).unwrap();
        assert_eq!(&out[..n], text.as_bytes());
        let ucs2: Vec<u16> = "aé€中".encode_utf16().collect();
        let n = encode_code_points(&ucs2, &mut out).unwrap();
        assert_eq!(&out[..n], "aé€中".as_bytes());
        let latin1: Vec<u8> = vec![b'a', 0xE9, 0xFF];
        let n = encode_code_points(&latin1, &mut out).unwrap();
        assert_eq!(&out[..n], "aéÿ".as_bytes());
        // A lone surrogate: three bytes, as `"\ud800".encode("utf-8", "surrogatepass")`.
        let n = encode_code_points(&[0xD800u16, 0x61], &mut out).unwrap();
        assert_eq!(&out[..n], b"\xed\xa0\x80a");
        assert_eq!(encode_code_points(&ucs4, &mut out[..ucs4.len() * 4 - 1]), None);
    }

    #[test]
    fn pieces_split() {
        let got: Vec<_> = Pieces::new(b"ab\xffc\xe2\x82").collect();
        assert_eq!(
            got,
            vec![
                Piece::Text(b"ab"),
                Piece::Invalid { at: 2, len: 1 },
                Piece::Text(b"c"),
                Piece::Incomplete(b"\xe2\x82"),
            ]
        );
        let got: Vec<_> = Pieces::new(b"\xe2\x82a").collect();
        assert_eq!(got, vec![Piece::Invalid { at: 0, len: 2 }, Piece::Text(b"a")]);
    }

    #[test]
    fn head_agrees_with_std_on_all_short_sequences() {
        // Exhaustive over 1- and 2-byte inputs plus every lead byte with continuation patterns.
        let conts = [0x00u8, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF];
        for b0 in 0..=255u8 {
            for &b1 in &conts {
                for &b2 in &conts {
                    for &b3 in &conts {
                        let buf = [b0, b1, b2, b3];
                        let valid = match std::str::from_utf8(&buf) {
                            Ok(_) => 4,
                            Err(e) => e.valid_up_to(),
                        };
                        let std = if valid > 0 {
                            let text = std::str::from_utf8(&buf[..valid]).unwrap();
                            Head::Char(text.chars().next().unwrap().len_utf8())
                        } else {
                            let e = std::str::from_utf8(&buf).unwrap_err();
                            Head::Invalid(e.error_len().unwrap())
                        };
                        assert_eq!(head(&buf), std, "{buf:x?}");
                    }
                }
            }
        }
    }
}
