//! Compile time of a fresh stop list: `cargo run --release --example compile [stops.json]`.
//!
//! Reads a JSON array of strings (default: 10,000 generated stops) and prints the best of a few
//! builds of `LiteralStops::new` (15, or the count given second: 1 for an instruction profile).

use std::time::Instant;

use stopstream::LiteralStops;

fn main() {
    let stops: Vec<String> = match std::env::args().nth(1) {
        Some(path) => {
            let text = std::fs::read_to_string(path).expect("readable file");
            text.trim_matches(|c| c == '[' || c == ']' || c == '\n')
                .split("\", \"")
                .map(|s| s.trim_matches('"').replace("\\n", "\n"))
                .collect()
        }
        None => (0..10_000).map(|i| format!("</tag-{i:05}> and more")).collect(),
    };
    let rounds = std::env::args().nth(2).map_or(15, |r| r.parse().expect("a count of builds"));
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        let set = LiteralStops::new(&stops).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        std::hint::black_box(&set);
    }
    println!("{} stops: best build {:.2} ms", stops.len(), best * 1e3);
}
