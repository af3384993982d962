//! Shared input decoding and the slow, obvious oracle the targets check against.

use libfuzzer_sys::arbitrary::{self, Arbitrary};

/// Characters stops and texts are drawn from: ASCII, markup, newlines, 2-, 3- and 4-byte
/// characters, a combining mark, U+FFFD (so replaced bytes can complete a stop).
const ALPHABET: [&str; 12] = ["a", "b", "<", "/", ">", "\n", "é", "€", "中", "😀", "\u{301}", "\u{FFFD}"];

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
