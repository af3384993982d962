//! Shared input decoding and the slow, obvious oracle the targets check against.

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use stopstream::{regex_max_len, StopKind, StopSpec, Token, Vocab};

/// Characters stops and texts are drawn from: ASCII, markup, newlines, 2-, 3- and 4-byte
/// characters, a combining mark, U+FFFD (so replaced bytes can complete a stop).
pub const ALPHABET: [&str; 12] =
    ["a", "b", "<", "/", ">", "\n", "é", "€", "中", "😀", "\u{301}", "\u{FFFD}"];

/// Raw pieces byte streams also draw from: parts of alphabet characters (`é` as C3 A9, `€` as
/// E2 82 AC, `😀` as F0 9F 98 80), a byte that is never valid and the start of a surrogate (which
/// UTF-8 forbids), so that chunks split characters and hold invalid sequences.
const RAW: [&[u8]; 8] =
    [b"\xC3", b"\xA9", b"\xE2\x82", b"\xAC", b"\xF0\x9F\x98", b"\x80", b"\xFF", b"\xED\xA0"];

#[derive(Arbitrary, Debug)]
#[allow(dead_code, reason = "the pattern target has its own input")]
pub struct Input {
    pub stops: Vec<Vec<u8>>,
    pub text: Vec<u8>,
    pub cuts: Vec<u16>,
    pub include_stop: bool,
    pub replace: bool,
}

/// Maps arbitrary bytes onto alphabet characters (stops are capped to 8 characters).
pub fn to_text(bytes: &[u8], cap: usize) -> Vec<u8> {
    bytes.iter().take(cap).flat_map(|&b| ALPHABET[b as usize % ALPHABET.len()].bytes()).collect()
}

#[allow(dead_code, reason = "the pattern target has its own input")]
pub fn stops(input: &Input) -> Vec<Vec<u8>> {
    input.stops.iter().take(12).map(|s| to_text(s, 8)).filter(|s| !s.is_empty()).collect()
}

/// Sorted split points within `0..=len`, optionally snapped to character boundaries of `text`.
#[allow(dead_code, reason = "used by some targets only")]
pub fn bounds(cuts: &[u16], len: usize, text: Option<&[u8]>) -> Vec<usize> {
    let mut b: Vec<usize> = cuts
        .iter()
        .take(16)
        .map(|&c| {
            let mut p = c as usize % (len + 1);
            if let Some(t) = text {
                while p < len && (t[p] & 0xC0) == 0x80 {
                    p += 1;
                }
            }
            p
        })
        .collect();
    b.push(0);
    b.push(len);
    b.sort_unstable();
    b
}

/// The longest suffix of `text` that is a proper prefix of some stop.
#[allow(dead_code, reason = "used by some targets only")]
pub fn naive_holdback(stops: &[Vec<u8>], text: &[u8]) -> usize {
    (0..=text.len())
        .rev()
        .find(|&k| stops.iter().any(|s| k < s.len() && s.starts_with(&text[text.len() - k..])))
        .unwrap_or(0)
}

/// Maps arbitrary bytes onto characters of `alphabet` and the pieces of [`RAW`] (at most `cap`
/// of them): raw input, valid or not.
#[allow(dead_code, reason = "used by some targets only")]
pub fn to_raw(bytes: &[u8], cap: usize, alphabet: &[&str]) -> Vec<u8> {
    let n = alphabet.len() + RAW.len();
    let piece = |b: u8| match b as usize % n {
        k if k < alphabet.len() => alphabet[k].as_bytes(),
        k => RAW[k - alphabet.len()],
    };
    bytes.iter().take(cap).flat_map(|&b| piece(b).iter().copied()).collect()
}

/// Raw bytes decoded as CPython's UTF-8 decoder does with `errors="replace"`: every maximal
/// invalid subpart becomes one U+FFFD (the standard library's `error_len` is that subpart).
#[allow(dead_code, reason = "used by some targets only")]
pub struct Decoded {
    /// The decoded text.
    pub text: Vec<u8>,
    /// Where the first U+FFFD that stands for invalid bytes starts in `text`: under strict
    /// decoding the text ends there.
    pub invalid: Option<usize>,
    /// The incomplete character at the end, left out of `text` (empty when `last`: then it is
    /// one more U+FFFD).
    pub tail: Vec<u8>,
}

#[allow(dead_code, reason = "used by some targets only")]
impl Decoded {
    /// The text under `errors="strict"` (up to the first invalid bytes) or `"replace"`.
    pub fn valid(&self, replace: bool) -> &[u8] {
        match self.invalid {
            Some(p) if !replace => &self.text[..p],
            _ => &self.text,
        }
    }
}

/// Decodes `raw`; `last`: the input ends here, so an incomplete character is invalid.
#[allow(dead_code, reason = "used by some targets only")]
pub fn decode(raw: &[u8], last: bool) -> Decoded {
    let (mut text, mut invalid, mut rest) = (Vec::new(), None, raw);
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                text.extend_from_slice(s.as_bytes());
                return Decoded { text, invalid, tail: Vec::new() };
            }
            Err(e) => {
                let valid = e.valid_up_to();
                text.extend_from_slice(&rest[..valid]);
                let Some(n) = e.error_len().or(last.then_some(rest.len() - valid)) else {
                    return Decoded { text, invalid, tail: rest[valid..].to_vec() };
                };
                invalid.get_or_insert(text.len());
                text.extend_from_slice("\u{FFFD}".as_bytes());
                rest = &rest[valid + n..];
            }
        }
    }
}

/// The literal stop that fires in `text`: the earliest end, then the longest, then the first
/// listed; as (index, end).
#[allow(dead_code, reason = "used by some targets only")]
pub fn first_stop(stops: &[Vec<u8>], text: &[u8]) -> Option<(usize, usize)> {
    (1..=text.len()).find_map(|end| {
        let mut best: Option<usize> = None;
        for (i, s) in stops.iter().enumerate() {
            if text[..end].ends_with(s) && best.is_none_or(|b| s.len() > stops[b].len()) {
                best = Some(i);
            }
        }
        best.map(|b| (b, end))
    })
}

/// What a literal list emits of decoded text `text` fed so far (§2.2, §2.3, §2.5): how much of
/// it (the cut, or all but the holdback), and the stop that fired.
#[allow(dead_code, reason = "used by some targets only")]
pub fn literal_reading(
    stops: &[Vec<u8>],
    include_stop: bool,
    text: &[u8],
) -> (usize, Option<usize>) {
    match first_stop(stops, text) {
        Some((i, end)) => (if include_stop { end } else { end - stops[i].len() }, Some(i)),
        None if include_stop => (text.len(), None),
        None => (text.len() - naive_holdback(stops, text), None),
    }
}

/// Regex tokens the patterns of composed lists are assembled from (the letters, classes,
/// repetition, alternation, assertions).
#[allow(dead_code, reason = "used by some targets only")]
pub const TOKENS: [&str; 20] = [
    "a", "b", "<", ">", "é", "😀", ".", "[ab]", "[^a]", r"\w", r"\W", "+", "?", "{1,2}", "|",
    r"\b", r"\B", "$", "(?m:$)", "\u{FFFD}",
];

/// Characters of composed lists' literal stops and markers, and of their texts: few, so that
/// stops, markers and text meet often.
#[allow(dead_code, reason = "used by some targets only")]
pub const LETTERS: [&str; 9] = ["a", "b", "<", ">", " ", "\n", "é", "😀", "\u{FFFD}"];

/// Maps bytes onto [`LETTERS`], at most `cap` of them.
#[allow(dead_code, reason = "used by some targets only")]
pub fn letters(bytes: &[u8], cap: usize) -> Vec<u8> {
    bytes.iter().take(cap).flat_map(|&b| LETTERS[b as usize % LETTERS.len()].bytes()).collect()
}

/// One stop of a composed list: a pattern of up to 5 [`TOKENS`], or a literal of up to 3
/// [`LETTERS`].
#[derive(Arbitrary, Debug)]
#[allow(dead_code, reason = "used by some targets only")]
pub struct StopInput {
    pub bytes: Vec<u8>,
    pub regex: bool,
    pub include: bool,
}

/// A composed list drawn from fuzz input: up to 4 stops (invalid patterns and empty literals
/// left out: the `patterns` target covers compiling), a `skip_until` marker and up to 2 skip
/// pairs (markers of up to 2 letters).
#[allow(dead_code, reason = "used by some targets only")]
pub struct Drawn {
    /// Pattern (or literal text) and include flag of each stop.
    stops: Vec<(Option<String>, Vec<u8>, bool)>,
    until: Option<Vec<u8>>,
    skip: Vec<(Vec<u8>, Vec<u8>)>,
}

#[allow(dead_code, reason = "used by some targets only")]
impl Drawn {
    pub fn new(stops: &[StopInput], until: Option<&[u8]>, skip: &[(Vec<u8>, Vec<u8>)]) -> Drawn {
        // Up to 5 regex tokens, at most one counted repetition: nested ones of a Unicode class
        // (`\w{1,2}{1,2}{1,2}`) compile for a second or more.
        let stops = stops
            .iter()
            .take(4)
            .filter_map(|s| {
                if s.regex {
                    let p: String = s
                        .bytes
                        .iter()
                        .take(5)
                        .map(|&t| TOKENS[t as usize % TOKENS.len()])
                        .collect();
                    let valid = p.matches("{1,2}").count() <= 1 && regex_max_len(&p).is_ok();
                    valid.then_some((Some(p), Vec::new(), s.include))
                } else {
                    let l = letters(&s.bytes, 3);
                    (!l.is_empty()).then_some((None, l, s.include))
                }
            })
            .collect();
        let until = until.map(|u| letters(u, 2)).filter(|u| !u.is_empty());
        let skip = skip
            .iter()
            .take(2)
            .map(|(o, c)| (letters(o, 2), letters(c, 2)))
            .filter(|(o, c)| !o.is_empty() && !c.is_empty())
            .collect();
        Drawn { stops, until, skip }
    }

    pub fn specs(&self) -> Vec<StopSpec<'_>> {
        self.stops
            .iter()
            .map(|(p, l, include)| StopSpec {
                kind: match p {
                    Some(p) => StopKind::Regex(p, None),
                    None => StopKind::Literal(l),
                },
                include: *include,
            })
            .collect()
    }

    /// The literal stops, for a literal list.
    pub fn literals(&self) -> Vec<Vec<u8>> {
        self.stops.iter().filter(|s| s.0.is_none()).map(|s| s.1.clone()).collect()
    }

    pub fn until(&self) -> Option<&[u8]> {
        self.until.as_deref()
    }

    pub fn skip(&self) -> Vec<(&[u8], &[u8])> {
        self.skip.iter().map(|(o, c)| (&o[..], &c[..])).collect()
    }
}

/// The first ids of the token targets' vocabularies: whole characters and strings of the
/// letters, a character split across two ids, invalid bytes, an empty token, a special token,
/// a hole, tokens with a leading space (for the leading-space rule).
#[allow(dead_code, reason = "used by some targets only")]
pub const BASE: [Option<&[u8]>; 16] = [
    Some(b"a"),
    Some(b"b"),
    Some(b"ab"),
    Some(b"<"),
    Some(b">"),
    Some(b" "),
    Some(b"\n"),
    Some("\u{e9}".as_bytes()),
    Some(b"\xc3"),
    Some(b"\xa9"),
    Some(b"\xff"),
    Some(b""),
    Some(b"<|end|>"),
    None,
    Some(b" a"),
    Some(b"b>"),
];

/// The special token of [`BASE`].
#[allow(dead_code, reason = "used by some targets only")]
pub const SPECIAL: i64 = 12;

/// [`BASE`] and up to 4 fuzzed tokens (the first byte picks a hole, letters or raw bytes), with
/// [`SPECIAL`] and maybe one more special id.
#[allow(dead_code, reason = "used by some targets only")]
pub fn vocab(extra: &[Vec<u8>], special: Option<u8>, strip: bool) -> Vocab {
    let mut tokens: Vec<Option<Vec<u8>>> = BASE.iter().map(|t| t.map(<[u8]>::to_vec)).collect();
    tokens.extend(extra.iter().take(4).map(|t| match t.first().map(|b| b % 4) {
        None | Some(0) => None,
        Some(1 | 2) => Some(letters(&t[1..], 2)),
        _ => Some(t[1..].iter().take(3).copied().collect()),
    }));
    let n = tokens.len() as i64;
    let special: Vec<i64> = [SPECIAL]
        .into_iter()
        .chain(special.map(|b| i64::from(b) % n))
        .filter(|&i| tokens[i as usize].is_some())
        .collect();
    Vocab::new(tokens, &special).unwrap().with_strip_leading_space(strip)
}

/// The raw bytes of `ids` as a token stream decodes them (special tokens have none; the
/// leading-space rule drops one space from the first token with text), up to the first stop
/// token id; and that token's position.
#[allow(dead_code, reason = "used by some targets only")]
pub fn token_bytes(vocab: &Vocab, ids: &[i64], stop_ids: &[i64]) -> (Vec<u8>, Option<usize>) {
    let (mut raw, mut first) = (Vec::new(), true);
    for (j, &id) in ids.iter().enumerate() {
        if stop_ids.contains(&id) {
            return (raw, Some(j));
        }
        let mut t: &[u8] = match vocab.get(id) {
            Some(Token::Text(t)) => t,
            _ => &[],
        };
        if !t.is_empty()
            && std::mem::take(&mut first)
            && vocab.strips_leading_space()
            && t[0] == b' '
        {
            t = &t[1..];
        }
        raw.extend_from_slice(t);
    }
    (raw, None)
}
