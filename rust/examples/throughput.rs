//! One-shot and long-chunk throughput of this crate's scan against the `aho-corasick` crate's
//! best on the same bytes (Standard semantics, the one that finds the earliest end), with the
//! speed of a bare `memchr` scan as the ceiling, all in one process.
//!
//! The text is CPython's pydoc topics (the language reference's prose, read through `python3`),
//! repeated to 16 MiB; no stop occurs in it, so every contender scans it in full. Stop sets:
//!
//! * 4 guard-rail stops: `</answer>`, `\n\nUser:`, `###END`, `<|im_end|>`;
//! * 1,000 stops: words of the text followed by `</`, `]]` or `##` (they start like ordinary
//!   words, so nearly every byte of the text leaves the root);
//! * 1,000 word pairs (`word word`, letters and a space only: no rare byte to look for);
//! * 4 special-token stops (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `</s>`): one rare
//!   first byte.
//!
//! The crate is timed with each of its automaton kinds (it picks its own prefilter); the best
//! counts. `feed` is this crate's stream over 64 KiB chunks, carrying its state across them.
//!
//! Then the cost of compiling fresh stop lists: the time for 1,000 and 10,000 stops, and for
//! 100,000 the peak heap while compiling against the heap the finished automaton keeps (counted
//! by a wrapper around the system allocator).
//!
//! Run: `cargo run --release --example throughput [TEXT_FILE]` (or `... throughput compile` for
//! the compile figures alone).

#![allow(clippy::cast_precision_loss, reason = "timings")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use stopstream::{LiteralStops, TextStream};

/// The system allocator, counting the bytes live now and the most live since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; the counters only
// observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let live = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size
                - layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SIZE: usize = 16 << 20;
const REPEATS: usize = 15;

fn main() {
    let arg = std::env::args().nth(1);
    let base = match arg.as_deref() {
        Some(path) if path != "compile" => std::fs::read(path).expect("readable file"),
        _ => pydoc_topics(),
    };
    if arg.as_deref() == Some("compile") {
        compile(&words(&base));
        return;
    }
    let mut text = base.repeat(SIZE / base.len() + 1);
    text.truncate(SIZE);
    let text = &text[..];
    let words = words(&base);
    let suffixes = ["</", "]]", "##"];
    let absent = |stop: &String| memchr::memmem::find(text, stop.as_bytes()).is_none();
    let tagged: Vec<String> = words
        .iter()
        .enumerate()
        .map(|(i, w)| format!("{w}{}", suffixes[i % 3]))
        .filter(absent)
        .take(1000)
        .collect();
    let mut pairs = Vec::new();
    for (i, a) in words.iter().enumerate() {
        let pair = format!("{a} {}", words[(i * 7 + 3) % words.len()]);
        if absent(&pair) {
            pairs.push(pair);
        }
        if pairs.len() == 1000 {
            break;
        }
    }
    let guard: Vec<String> =
        ["</answer>", "\n\nUser:", "###END", "<|im_end|>"].map(String::from).to_vec();
    let tokens: Vec<String> =
        ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>"].map(String::from).to_vec();
    let sets = [
        ("4 guard-rail", guard),
        ("1,000 word+tag", tagged),
        ("1,000 word pairs", pairs),
        ("4 special-token", tokens),
    ];

    println!(
        "{:.1} MiB, no match; fastest of {REPEATS} rounds; in parentheses: multiple of the \
         aho-corasick crate's best kind",
        text.len() as f64 / f64::from(1u32 << 20),
    );
    for (name, stops) in &sets {
        scan_set(name, stops, text);
    }
    per_chunk(text, &words);
    compile(&words);
}

/// The core's share of a streaming step: `TextStream::feed` over token-sized chunks (4 bytes)
/// of the text, against the number of special-token stops (`<|word_word_i|>`, after the
/// guard-rail stops), with a fresh stream whenever one stops.
fn per_chunk(text: &[u8], words: &[String]) {
    let chunks: Vec<&[u8]> = text[..4 << 20].chunks(4).collect();
    let guard = ["</answer>", "\n\nUser:", "###END", "<|im_end|>"];
    let mut cells = Vec::new();
    for count in [1usize, 4, 1_000, 100_000] {
        let mut stops: Vec<String> = guard.iter().take(count).map(|s| (*s).to_owned()).collect();
        let n = words.len();
        for i in stops.len()..count {
            stops.push(format!("<|{}_{}_{i}|>", words[i % n], words[(i * 7 + 1) % n]));
        }
        let set = LiteralStops::new(&stops).unwrap();
        let mut runs: Vec<Box<dyn FnMut() -> usize>> = vec![Box::new(|| {
            let mut st = TextStream::new(false);
            let mut out = 0;
            for c in &chunks {
                let e = st.feed(&set, c).unwrap();
                out += e.from_held + e.from_input;
                if st.status() != stopstream::Status::Open {
                    st = TextStream::new(false);
                }
            }
            out
        })];
        let ns = best(&mut runs)[0] / chunks.len() as f64;
        cells.push(format!("{count}: {ns:.2} ns"));
    }
    println!("feed per 4-byte chunk, special-token stops: {}", cells.join(", "));
}

/// Times both crates and `memchr` over `text` for one stop set, and prints a line.
fn scan_set(name: &str, stops: &[String], text: &[u8]) {
    let gbps = |ns: f64| text.len() as f64 / ns;
    let ours = LiteralStops::new(stops).unwrap();
    assert_eq!(ours.truncate(text, false), (text.len(), None), "{name}: a stop occurs");
    let kinds = [
        (None, "auto"),
        (Some(AhoCorasickKind::NoncontiguousNFA), "noncontiguous NFA"),
        (Some(AhoCorasickKind::ContiguousNFA), "contiguous NFA"),
        (Some(AhoCorasickKind::DFA), "DFA"),
    ];
    let theirs: Vec<AhoCorasick> = kinds
        .iter()
        .map(|&(kind, _)| {
            let ac = AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .kind(kind)
                .build(stops)
                .unwrap();
            assert!(ac.find(text).is_none());
            ac
        })
        .collect();
    // The crate's packed searcher (Teddy) has leftmost semantics only; it could serve as a
    // prefilter for candidate starts. Timed alone, for comparison, where it builds.
    let packed = aho_corasick::packed::Searcher::new(stops);
    // Every contender once per round, so that a burst of other work on the machine slows
    // all of them alike; each counts with its fastest round.
    let mut runs: Vec<Box<dyn FnMut() -> usize>> = vec![
        Box::new(|| ours.truncate(black_box(text), false).0),
        Box::new(|| {
            let mut st = TextStream::new(false);
            let mut out = 0;
            for chunk in text.chunks(64 << 10) {
                out += st.feed(&ours, chunk).unwrap().from_input;
            }
            out
        }),
        Box::new(|| memchr::memchr(0xFF, black_box(text)).unwrap_or(0)),
    ];
    for ac in &theirs {
        runs.push(Box::new(move || ac.find(black_box(text)).map_or(0, |m| m.end())));
    }
    if let Some(p) = &packed {
        assert!(p.find(text).is_none());
        runs.push(Box::new(move || p.find(black_box(text)).map_or(0, |m| m.end())));
    }
    let ns = best(&mut runs);
    let packed = if packed.is_some() {
        format!("; packed (Teddy, leftmost) {:.2} GB/s", gbps(ns[3 + kinds.len()]))
    } else {
        String::new()
    };
    let (crate_ns, label) = ns[3..3 + kinds.len()]
        .iter()
        .zip(&kinds)
        .map(|(&t, &(_, label))| (t, label))
        .fold((f64::MAX, ""), |a, b| if b.0 < a.0 { b } else { a });
    println!(
        "{name:>17}: truncate {:6.2} GB/s ({:.2}x), feed {:6.2} GB/s ({:.2}x); \
         aho-corasick {:6.2} GB/s ({label}); memchr {:.1} GB/s{packed}",
        gbps(ns[0]),
        crate_ns / ns[0],
        gbps(ns[1]),
        crate_ns / ns[1],
        gbps(crate_ns),
        gbps(ns[2]),
    );
}

/// Stop lists shaped like `benches/corpus.py`'s generated ones: word pairs, closing tags,
/// special-token-like markers, role and section markers.
fn generated(words: &[String], count: usize, salt: usize) -> Vec<String> {
    let n = words.len();
    let w = |i: usize| &words[(i * 7919 + salt) % n];
    let cap = |s: &str| {
        let mut c = s.to_owned();
        c[..1].make_ascii_uppercase();
        c
    };
    (0..count)
        .map(|i| match i % 6 {
            0 => format!("{} {} {i}", w(i), w(i + 1)),
            1 => format!("</{}-{i}>", w(i)),
            2 => format!("<|{}_{}_{i}|>", w(i), w(i + 3)),
            3 => format!("\n\n{}{i}:", cap(w(i))),
            4 => format!("### {} {} {i}", cap(w(i)), cap(w(i + 5))),
            _ => format!("[{}_{i}]", w(i).to_uppercase()),
        })
        .collect()
}

fn compile(words: &[String]) {
    for count in [1_000, 10_000] {
        let lists: Vec<Vec<String>> = (0..5).map(|r| generated(words, count, r)).collect();
        let mut wall = Vec::new();
        let mut cpu = Vec::new();
        for stops in &lists {
            let (t, c) = (Instant::now(), on_cpu_ns());
            black_box(LiteralStops::new(stops).unwrap());
            wall.push(t.elapsed().as_secs_f64() * 1e3);
            cpu.push((on_cpu_ns() - c) as f64 / 1e6);
        }
        wall.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        println!(
            "compile {count:>6} fresh stops: median of 5 {:.2} ms ({:.2} ms on the CPU)",
            wall[2], cpu[2]
        );
    }
    let stops = generated(words, 100_000, 99);
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let t = Instant::now();
    let set = LiteralStops::new(&stops).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let kept = LIVE.load(Ordering::Relaxed) - base;
    let mib = |b: usize| b as f64 / f64::from(1u32 << 20);
    println!(
        "compile 100000 fresh stops: {ms:.1} ms, {} states; heap peak {:.1} MiB, kept {:.1} MiB \
         (peak / kept {:.2}x)",
        set.state_count(),
        mib(peak),
        mib(kept),
        peak as f64 / kept as f64
    );
}

/// Nanoseconds this process has run on a CPU: on a shared machine, the wall time also counts
/// the time other work held the cores.
fn on_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant libc defines.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    u64::try_from(t.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap()
}

/// Nanoseconds of the fastest of `REPEATS` rounds of each run (after one untimed round).
fn best(runs: &mut [Box<dyn FnMut() -> usize + '_>]) -> Vec<f64> {
    let mut best = vec![f64::MAX; runs.len()];
    for round in 0..=REPEATS {
        for (run, b) in runs.iter_mut().zip(&mut best) {
            let t = Instant::now();
            black_box(run());
            if round > 0 {
                *b = b.min(t.elapsed().as_secs_f64() * 1e9);
            }
        }
    }
    best
}

/// The pydoc topics, joined the way `benches/corpus.py` joins them.
fn pydoc_topics() -> Vec<u8> {
    let script = "import sys; from pydoc_data.topics import topics; \
                  sys.stdout.write('\\n\\n'.join(topics[k].strip('\\n') for k in sorted(topics)))";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3 runs (or pass a text file)");
    assert!(out.status.success() && !out.stdout.is_empty(), "no pydoc topics");
    out.stdout
}

/// Distinct lowercase words of 3 to 12 letters, in a fixed pseudo-random order.
fn words(text: &[u8]) -> Vec<String> {
    let mut words: Vec<String> = text
        .split(|b| !b.is_ascii_alphabetic())
        .filter(|w| (3..=12).contains(&w.len()) && w.iter().all(u8::is_ascii_lowercase))
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    words.sort_unstable();
    words.dedup();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..words.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        words.swap(i, (state % (i as u64 + 1)) as usize);
    }
    words
}
