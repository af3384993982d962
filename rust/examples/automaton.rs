//! Measures the per-chunk cost of stepping this crate's automaton against the `aho-corasick`
//! crate's DFA driven through its `Automaton` trait, over the same bytes in token-sized chunks.
//!
//! The crate does not expose a state's depth, which minimal holdback needs after every chunk, so
//! its side also pays a lookup from state id to depth (a table built once by BFS).
//!
//! Run: `cargo run --release --example automaton [FILE]` (default: this crate's sources).

#![allow(clippy::cast_precision_loss, reason = "timings")]

use std::collections::{HashMap, VecDeque};
use std::hint::black_box;
use std::time::Instant;

use aho_corasick::automaton::Automaton as _;
use aho_corasick::automaton::StateID;
use aho_corasick::{dfa::DFA, Anchored, MatchKind};
use stopstream::raw::Step;
use stopstream::LiteralStops;

fn main() {
    let text = if let Some(path) = std::env::args().nth(1) {
        std::fs::read(path).expect("readable file")
    } else {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut all = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            all.extend(std::fs::read(entry.unwrap().path()).unwrap());
        }
        all
    };
    let text = text.repeat((4 << 20) / text.len().max(1) + 1);
    let chunks: Vec<&[u8]> = text.chunks(4).collect();
    let sets: [(&str, Vec<String>); 3] = [
        (
            "4 guard-rail stops",
            ["</answer>", "\n\nUser:", "###END", "<|im_end|>"].map(String::from).to_vec(),
        ),
        ("1 frequent stop", vec!["\n\n".to_owned()]),
        ("1,000 stops", (0..1000).map(|i| format!("<tag-{i:04}>")).collect()),
    ];
    println!("{} chunks of 4 bytes", chunks.len());
    for (name, stops) in &sets {
        let ours = LiteralStops::new(stops).unwrap();
        let theirs = DFA::builder().match_kind(MatchKind::Standard).build(stops).unwrap();
        let depth = depths(&theirs);
        let mut best = [f64::MAX; 3];
        for _ in 0..5 {
            let t = Instant::now();
            let mut s = 0u32;
            let mut held = 0usize;
            for c in &chunks {
                s = match ours.scan(s, c) {
                    Step::Continue(s) => s,
                    Step::Stop(_) => 0,
                };
                held += ours.held(s).len();
            }
            black_box(held);
            best[0] = best[0].min(t.elapsed().as_secs_f64());

            let t = Instant::now();
            let mut sid = theirs.start_state(Anchored::No).unwrap();
            let start = sid;
            let mut held = 0usize;
            for c in &chunks {
                for &b in *c {
                    sid = theirs.next_state(Anchored::No, sid, b);
                    if theirs.is_match(sid) {
                        black_box(theirs.match_pattern(sid, 0));
                        sid = start;
                        break;
                    }
                }
                held += depth[&sid];
            }
            black_box(held);
            best[1] = best[1].min(t.elapsed().as_secs_f64());

            // The crate alone, without the depth lookup minimal holdback needs.
            let t = Instant::now();
            let mut sid = start;
            for c in &chunks {
                for &b in *c {
                    sid = theirs.next_state(Anchored::No, sid, b);
                    if theirs.is_match(sid) {
                        black_box(theirs.match_pattern(sid, 0));
                        sid = start;
                        break;
                    }
                }
            }
            black_box(sid);
            best[2] = best[2].min(t.elapsed().as_secs_f64());
        }
        let per = |s: f64| s * 1e9 / chunks.len() as f64;
        println!(
            "{name:>20}: stopstream {:.2} ns/chunk; aho-corasick DFA {:.2} with depth lookup \
             (ratio {:.2}), {:.2} stepping only (ratio {:.2})",
            per(best[0]),
            per(best[1]),
            best[0] / best[1],
            per(best[2]),
            best[0] / best[2],
        );
    }
}

/// Depth of every state: its BFS distance from the start. Reading a state's string reaches it in
/// `depth` steps, and any path of `k` steps ends in a state whose string is a suffix of the `k`
/// bytes read, so no shorter path exists.
fn depths(dfa: &DFA) -> HashMap<StateID, usize> {
    let start = dfa.start_state(Anchored::No).unwrap();
    let mut depth = HashMap::new();
    depth.insert(start, 0usize);
    let mut queue = VecDeque::from([start]);
    while let Some(s) = queue.pop_front() {
        let d = depth[&s];
        for b in 0..=255u8 {
            let t = dfa.next_state(Anchored::No, s, b);
            if dfa.is_dead(t) {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = depth.entry(t) {
                e.insert(d + 1);
                queue.push_back(t);
            }
        }
    }
    depth
}
