//! The regex engines against the PikeVM, and their parts.

use super::dfa::*;
use super::nfa::*;
use super::*;
use regex_automata::util::look::{Look, LookMatcher};

/// The classes of the viability analysis agree with the assertions' own notion of a word
/// character on every code point (and a lone surrogate is no word character).
#[test]
fn classes_agree_with_the_look_matcher() {
    let Ok(Pattern { engine: Engine::Nfa(n), .. }) = Pattern::new(r"\ba", None) else { panic!() };
    let looks = LookMatcher::new();
    let mut buf = [0u8; 8];
    for c in (0..=0x10_FFFFu32).filter_map(char::from_u32) {
        let ch = c.encode_utf8(&mut buf[..4]).len();
        buf[ch] = b' ';
        let word = looks.matches(Look::WordUnicode, &buf[..=ch], ch);
        let class = n.class_of(&buf[..ch]);
        assert_eq!(word, class <= 1, "{c:?}");
        assert_eq!(class == 0, c.is_ascii_alphanumeric() || c == '_', "{c:?}");
    }
    assert_eq!(n.class_of(&[0xED, 0xA0, 0x80]), 2);
}

/// Runs the threads of `pattern` over `text`, one character at a time: after each, the
/// number of live threads and the earliest start.
fn live_after_each_char(pattern: &str, text: &str) -> Vec<(usize, Option<usize>)> {
    let p = Pattern::new(pattern, None).unwrap();
    let mut th = p.threads();
    let mut prev: &[u8] = b"";
    let mut out = Vec::new();
    for (pos, c) in text.char_indices() {
        let ch = &text.as_bytes()[pos..pos + c.len_utf8()];
        assert_eq!(p.on_char(&mut th, pos, prev, ch), None, "{pattern} matched in {text:?}");
        prev = ch;
        out.push((th.len(), th.earliest()));
    }
    out
}

/// Threads that reach the same state are merged, and the earliest start is the one kept:
/// every start in a run of `a` reaches the same state of `a+b` (on the DFA; with `\b`, on
/// the NFA), so one thread stays, from the run's first `a`, whatever the run's length.
#[test]
fn threads_in_one_state_merge_into_the_earliest() {
    for pattern in ["a+b", r"a+b\b", "(?:a|aa)+b", r"a+(?:b|cd)\b"] {
        let text = format!("x{}", "a".repeat(300));
        let got = live_after_each_char(pattern, &text);
        assert_eq!(got[0], (0, None), "{pattern}");
        for (i, &live) in got.iter().enumerate().skip(1) {
            assert_eq!(live, (1, Some(1)), "{pattern} after {} characters", i + 1);
        }
    }
}

/// With more live threads than [`SCAN_THREADS`] (merged through the DFA's stamps, or the
/// NFA's [`SetIndex`]): in a run of `a`, the threads of `(?:a{10}|b)*c` are in 10 states
/// (how many `a` of the current ten they have read), so 10 stay, the earliest start first.
#[test]
fn many_threads_merge_by_state() {
    for pattern in ["(?:a{10}|b)*c", r"(?:a{10}|b)*c\b"] {
        let text = format!("x{}", "a".repeat(100));
        for (i, &live) in live_after_each_char(pattern, &text).iter().enumerate().skip(1) {
            assert_eq!(live, (i.min(10), Some(1)), "{pattern} after {} characters", i + 1);
        }
    }
    assert!(Pattern::new(r"(?:a{10}|b)*c\b", None).unwrap().uses_nfa());
    assert!(!Pattern::new("(?:a{10}|b)*c", None).unwrap().uses_nfa());
}

/// A size limit rejects a pattern whose NFA passes it, and sends one whose DFA would pass it
/// to the NFA engine.
#[test]
fn size_limit() {
    // Compiled whole, this one takes about a second (release build).
    let hostile = r"(\w+\s?){1,200}z";
    assert!(matches!(Pattern::new(hostile, Some(64 << 10)), Err(PatternError::TooBig(_))));
    assert!(Pattern::new(r"(\w+\s?){1,3}z", Some(64 << 10)).is_ok());
    let blowup = "(a|b)*a(a|b){12}c";
    assert!(!Pattern::new(blowup, None).unwrap().uses_nfa());
    assert!(Pattern::new(blowup, Some(4 << 10)).unwrap().uses_nfa());
    assert!(!Pattern::new("abc", Some(4 << 10)).unwrap().uses_nfa());
}

/// Threads in different states are never merged: with `.{5}x` over text without `x`, the
/// threads from the last 5 starts are in 5 different states (1 to 5 characters read).
#[test]
fn threads_in_different_states_all_stay() {
    for pattern in [".{5}x", r".{5}x\b"] {
        let got = live_after_each_char(pattern, "abcdefghij\u{e9}klmnop");
        for (i, &live) in got.iter().enumerate() {
            let want = (i + 1).min(5);
            let first = i.saturating_sub(4);
            let pos = first + usize::from(first > 10); // the byte offset (é is 2 bytes)
            assert_eq!(live, (want, Some(pos)), "{pattern} after {} characters", i + 1);
        }
    }
}

#[test]
fn stamps_and_set_index_start_empty_after_a_clone_and_a_wrap() {
    let mut s = Stamps::default();
    s.clear(4);
    assert!(s.insert(3) && !s.insert(3));
    let mut c = s.clone();
    c.clear(4);
    assert!(c.insert(3));
    s.round = u32::MAX;
    s.clear(4);
    assert!(s.insert(3) && s.insert(0) && !s.insert(0));
    let mut t = SetIndex::default();
    t.clear(3);
    assert!(t.insert(7, 0, |_| true));
    assert!(!t.insert(7, 1, |j| j == 0));
    assert!(t.insert(7, 1, |_| false));
    assert!(t.insert(8, 2, |_| true));
}

#[test]
fn rect_meets_decodes_byte_ranges() {
    let word = word_ranges();
    let classes = class_ranges(&word);
    // 'é' is C3 A9; C3 80..BF holds both word and non-word characters (U+00D7).
    assert!(rect_meets(&[(0xC3, 0xC3), (0xA9, 0xA9)], &classes[1]));
    assert!(!rect_meets(&[(0xC3, 0xC3), (0xA9, 0xA9)], &classes[2]));
    assert!(rect_meets(&[(0xC3, 0xC3), (0x97, 0x97)], &classes[2]));
    assert!(rect_meets(&[(b'a', b'z')], &classes[0]));
    assert!(!rect_meets(&[(b'a', b'z')], &classes[2]));
    assert!(rect_meets(&[(0xE4, 0xE4), (0xB8, 0xB8), (0x80, 0xBF)], &classes[1]));
}
