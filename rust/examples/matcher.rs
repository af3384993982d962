//! Per-chunk cost of the composed matcher (regex stops, skip regions) against the literal
//! path, over 4-byte chunks of this crate's own source. `cargo run --release --example matcher`.

use std::time::Instant;

use stopstream::{ByteOut, LiteralStops, MatchStream, Matcher, StopKind, StopSpec, TextStream};

fn chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let mut j = (i + 4).min(text.len());
        while !text.is_char_boundary(j) {
            j += 1;
        }
        out.push(&text[i..j]);
        i = j;
    }
    out
}

fn best<F: FnMut()>(mut f: F) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn main() {
    let text = [
        include_str!("../src/automaton.rs"),
        include_str!("../src/literal_state.rs"),
        include_str!("../src/byte_stream.rs"),
        include_str!("../src/regex/mod.rs"),
        include_str!("../src/regex/dfa.rs"),
        include_str!("../src/regex/nfa.rs"),
        include_str!("../src/matcher.rs"),
    ]
    .concat()
    .replace("</answer>", "")
    .repeat(4);
    let parts = chunks(&text);
    let lits = ["</answer>", "\n\nUser:", "###END", "<|im_end|>"];
    let res = [r"</answer\s*>", r"(?m)^User:\s", r"#{3}END\b", r"<\|im_end\|>"];
    let set = LiteralStops::new(lits).unwrap();
    let literal = best(|| {
        let mut st = TextStream::new(false);
        for p in &parts {
            std::hint::black_box(st.feed(&set, p.as_bytes()).unwrap());
        }
    });
    let run = |specs: &[StopSpec<'_>], skip: &[(&[u8], &[u8])]| {
        let m = Matcher::new(specs, None, skip).unwrap();
        best(|| {
            let mut st = MatchStream::new(&m);
            let mut out = Vec::new();
            for p in &parts {
                out.clear();
                let r = st.feed(&m, p.as_bytes(), &mut out).unwrap();
                std::hint::black_box((r == ByteOut::Input, &out));
            }
        })
    };
    let lit = |s: &'static str| StopSpec { kind: StopKind::Literal(s.as_bytes()), include: false };
    let re = |s: &'static str| StopSpec { kind: StopKind::Regex(s, None), include: false };
    let four_lit: Vec<StopSpec<'_>> = lits.iter().map(|s| lit(s)).collect();
    let four_re: Vec<StopSpec<'_>> = res.iter().map(|s| re(s)).collect();
    let both: Vec<StopSpec<'_>> = four_lit.iter().chain(&four_re).copied().collect();
    let wb =
        [re(r"\bFINAL ANSWER\b"), re(r"\bTERMINATE\b"), re(r"\bend of turn\b"), re(r"\bSTOP\b")];
    let skip: [(&[u8], &[u8]); 1] = [(b"<think>", b"</think>")];
    let n = f64::from(u32::try_from(parts.len()).unwrap_or(u32::MAX));
    let row = |name: &str, secs: f64| {
        println!("{name:<42} {:>7.1} ns/chunk  {:>5.2}x", secs / n * 1e9, secs / literal);
    };
    row("literal path, 4 stops (TextStream)", literal);
    row("composed, 4 literal", run(&four_lit, &[]));
    row("composed, 4 literal + skip region", run(&four_lit, &skip));
    row("composed, 4 regex (DFA)", run(&four_re, &[]));
    row("composed, 4 literal + 4 regex", run(&both, &[]));
    row("composed, 4 regex with Unicode \\b (NFA)", run(&wb, &[]));
    if std::env::var_os("EACH").is_some() {
        for r in res.iter().chain(&[r"\bend\b", "zq+", r"(?-u:\b)zq(?-u:\b)"]) {
            row(r, run(&[re(r)], &[]));
        }
    }
}
