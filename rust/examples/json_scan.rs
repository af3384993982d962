//! Locating the text of Chat Completions chunks: `jiter` (what `stopstream::sse` uses) against
//! `serde_json` with borrowed fields, on the same events.
//!
//! `cargo run --release --example json_scan -- EVENTS` where EVENTS holds one chunk's JSON per
//! line (`benches/adapters.py --dump EVENTS` writes the benchmark's real token stream).

use std::borrow::Cow;
use std::time::Instant;

use serde::Deserialize;
use serde_json::value::RawValue;
use stopstream::sse::{Scan, Scanner, CHAT};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    index: i64,
    #[serde(borrow)]
    delta: Delta<'a>,
    #[serde(default)]
    finish_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

/// The serde_json equivalent of one `Scanner::scan`: spans by pointer arithmetic, then the
/// string decoded a second time.
fn serde_scan(data: &str, texts: &mut Vec<(i64, usize, usize, String)>) -> bool {
    texts.clear();
    let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) else { return false };
    if chunk.usage.is_some_and(|u| u.get() != "null") {
        return false;
    }
    for c in chunk.choices {
        if c.finish_reason.is_some_and(|f| f.get() != "null") {
            return false;
        }
        let Some(raw) = c.delta.content else { return false };
        let Ok(text) = serde_json::from_str::<Cow<'_, str>>(raw.get()) else { return false };
        let start = raw.get().as_ptr() as usize - data.as_ptr() as usize;
        texts.push((c.index, start, start + raw.get().len(), text.into_owned()));
    }
    true
}

fn best<F: FnMut() -> usize>(mut run: F) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut n = 0;
    for _ in 0..15 {
        let start = Instant::now();
        n = run();
        best = best.min(start.elapsed().as_secs_f64());
    }
    (best, n)
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: json_scan EVENTS");
    let text = std::fs::read_to_string(path).expect("read EVENTS");
    let events: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let mut scanner = Scanner::new();
    let (jiter, found_j) = best(|| {
        let mut found = 0;
        for e in &events {
            if scanner.scan(&CHAT, e.as_bytes()) == Scan::Texts {
                found += scanner.found.len();
            }
        }
        found
    });
    let mut texts = Vec::new();
    let (serde, found_s) = best(|| {
        let mut found = 0;
        for e in &events {
            if serde_scan(e, &mut texts) {
                found += texts.len();
            }
        }
        found
    });
    assert_eq!(found_j, found_s, "both find the same texts");
    let count = f64::from(u32::try_from(events.len()).expect("fewer than 2^32 events"));
    let per = |s: f64| s / count * 1e9;
    println!(
        "{} events: jiter {:.0} ns, serde_json {:.0} ns per event",
        events.len(),
        per(jiter),
        per(serde)
    );
}
