//! Tests of the composed matcher against a naive, quadratic reading of the contract (§6).
#![allow(
    clippy::needless_range_loop,
    clippy::too_many_lines,
    clippy::single_match_else,
    clippy::manual_let_else,
    clippy::sliced_string_as_bytes,
    reason = "the naive matcher is written as plainly as the contract reads"
)]

use super::*;
use crate::ByteStream;
use proptest::prelude::*;
use regex_automata::nfa::thompson::pikevm::{Cache, PikeVM};
use regex_automata::{Anchored, Input};

#[derive(Clone, Debug)]
enum NStop {
    Lit(String),
    Re(String),
}

#[derive(Clone, Debug)]
struct Case {
    stops: Vec<(NStop, bool)>,
    until: Option<String>,
    skip: Vec<(String, String)>,
}

impl Case {
    fn matcher(&self) -> Result<Matcher, Error> {
        let specs: Vec<StopSpec<'_>> = self
            .stops
            .iter()
            .map(|(s, include)| StopSpec {
                kind: match s {
                    NStop::Lit(t) => StopKind::Literal(t.as_bytes()),
                    NStop::Re(p) => StopKind::Regex(p, None),
                },
                include: *include,
            })
            .collect();
        let skip: Vec<(&[u8], &[u8])> =
            self.skip.iter().map(|(o, c)| (o.as_bytes(), c.as_bytes())).collect();
        Matcher::new(&specs, self.until.as_deref().map(str::as_bytes), &skip)
    }
}

/// Where the naive scan ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NZone {
    Before,
    Outside(usize),
    Inside,
}

/// The contract read literally: at every end position in turn, a skip marker first, then every
/// stop at every start; regex matches are checked with the PikeVM on the whole text, so that
/// assertions see the characters around the match.
struct Naive {
    case: Case,
    vms: Vec<Option<(PikeVM, Cache)>>,
}

impl Naive {
    fn new(case: &Case) -> Naive {
        let vms = case
            .stops
            .iter()
            .map(|(s, _)| match s {
                NStop::Lit(_) => None,
                NStop::Re(p) => {
                    let vm = PikeVM::builder()
                        .configure(PikeVM::config().match_kind(regex_automata::MatchKind::All))
                        .build(p)
                        .unwrap();
                    let cache = vm.create_cache();
                    Some((vm, cache))
                }
            })
            .collect();
        Naive { case: case.clone(), vms }
    }

    /// Whether stop `i` matches exactly `hay[s..e]`, `hay` being the whole stream.
    fn matches_at(&mut self, i: usize, hay: &str, s: usize, e: usize) -> bool {
        match (&self.case.stops[i].0, &mut self.vms[i]) {
            (NStop::Lit(t), _) => &hay[s..e] == t,
            (NStop::Re(_), Some((vm, cache))) => {
                let input = Input::new(hay).span(s..e).anchored(Anchored::Yes);
                vm.find(cache, input).is_some_and(|m| m.end() == e)
            }
            _ => false,
        }
    }

    /// The first stop to fire in `hay`, read as a finished stream, and where the scan ended.
    fn first_win(&mut self, hay: &str) -> (Option<Win>, NZone) {
        let bounds: Vec<usize> = hay.char_indices().map(|(i, _)| i).chain([hay.len()]).collect();
        let mut seg = 0;
        if let Some(u) = &self.case.until {
            match hay.find(u.as_str()) {
                Some(i) => seg = i + u.len(),
                None => return (None, NZone::Before),
            }
        }
        'outer: loop {
            for &e in bounds.iter().filter(|&&e| e > seg) {
                let mut marker: Option<(usize, usize)> = None;
                for (k, (o, _)) in self.case.skip.iter().enumerate() {
                    if e >= seg + o.len()
                        && hay[..e].ends_with(o.as_str())
                        && marker.is_none_or(|(len, _)| o.len() > len)
                    {
                        marker = Some((o.len(), k));
                    }
                }
                if let Some((_, k)) = marker {
                    let close = &self.case.skip[k].1;
                    match hay[e..].find(close.as_str()) {
                        Some(i) => {
                            seg = e + i + close.len();
                            continue 'outer;
                        }
                        None => return (None, NZone::Inside),
                    }
                }
                let mut best = None;
                for i in 0..self.case.stops.len() {
                    for &s in bounds.iter().filter(|&&s| s >= seg && s < e) {
                        if self.matches_at(i, hay, s, e) {
                            best = better(best, Win { start: s, end: e, index: i });
                        }
                    }
                }
                if best.is_some() {
                    return (best, NZone::Outside(seg));
                }
            }
            return (None, NZone::Outside(seg));
        }
    }

    /// The stop that has certainly fired once `text` has been fed (not finished): the same
    /// winner, ending within `text`, whatever character or end of stream follows.
    fn fired(&mut self, text: &str, alphabet: &[&str]) -> Option<Win> {
        let n = text.len();
        let mut seen: Option<Win> = None;
        for la in alphabet.iter().copied().chain([""]) {
            let hay = format!("{text}{la}");
            match self.first_win(&hay).0 {
                Some(w) if w.end <= n && seen.is_none_or(|s| s == w) => seen = Some(w),
                _ => return None,
            }
        }
        seen
    }

    /// The holdback after `text` (not finished, no stop fired): the smallest start of a possible
    /// match of a flag-off stop over some continuation. `max_len` bounds each stop's match.
    fn hold(&mut self, text: &str, alphabet: &[&str], max_len: &[usize]) -> usize {
        let n = text.len();
        let seg = match self.first_win(text).1 {
            NZone::Outside(seg) => seg,
            _ => return n,
        };
        let starts: Vec<usize> =
            text.char_indices().map(|(i, _)| i).filter(|&i| i >= seg).collect();
        for &p in &starts {
            let have = text[p..].chars().count();
            for i in 0..self.case.stops.len() {
                if self.case.stops[i].1 || have > max_len[i] {
                    continue;
                }
                if let NStop::Lit(t) = &self.case.stops[i].0 {
                    if t.starts_with(&text[p..]) {
                        return p;
                    }
                    continue;
                }
                // Matches ending at `n + k`, for every `k` the stop's length allows.
                for k in 0..=(max_len[i] - have) {
                    let mut conts = vec![String::new()];
                    for _ in 0..k {
                        conts = conts
                            .iter()
                            .flat_map(|c| alphabet.iter().map(move |a| format!("{c}{a}")))
                            .collect();
                    }
                    for c in &conts {
                        for la in alphabet.iter().copied().chain([""]) {
                            let hay = format!("{text}{c}{la}");
                            let e = n + c.len();
                            if e > p && self.matches_at(i, &hay, p, e) {
                                return p;
                            }
                        }
                    }
                }
            }
        }
        n
    }
}

/// Output of every feed, then of finish, with the final status and stop text.
fn run(m: &Matcher, chunks: &[&str]) -> (Vec<String>, Status, String, Vec<String>) {
    let mut st = MatchStream::new(m);
    let mut outs = Vec::new();
    let mut pend = Vec::new();
    for c in chunks {
        let mut out = Vec::new();
        if st.feed(m, c.as_bytes(), &mut out).unwrap() == ByteOut::Input {
            out = c.as_bytes().to_vec();
        }
        outs.push(String::from_utf8(out).unwrap());
        pend.push(String::from_utf8(st.held().to_vec()).unwrap());
    }
    let mut out = Vec::new();
    st.finish(m, &mut out);
    outs.push(String::from_utf8(out).unwrap());
    let seq = String::from_utf8(st.stop_sequence(m).to_vec()).unwrap();
    (outs, st.status(), seq, pend)
}

fn lit(s: &str) -> (NStop, bool) {
    (NStop::Lit(s.to_owned()), false)
}
fn re(s: &str) -> (NStop, bool) {
    (NStop::Re(s.to_owned()), false)
}
fn keep(mut s: (NStop, bool)) -> (NStop, bool) {
    s.1 = true;
    s
}
fn case(stops: Vec<(NStop, bool)>) -> Case {
    Case { stops, until: None, skip: Vec::new() }
}

#[test]
#[allow(clippy::type_complexity, reason = "a table of literal cases")]
fn table() {
    // (case, chunks, outputs per feed then finish, status, stop text)
    let think = || vec![("<think>".to_owned(), "</think>".to_owned())];
    let cases: Vec<(Case, &[&str], &[&str], Status, &str)> = vec![
        // §6.2
        (
            case(vec![lit("\n\nUser:"), keep(lit("</answer>"))]),
            &["<answer>42</answer> tail"],
            &["<answer>42</answer>", ""],
            Status::Stopped(1),
            "</answer>",
        ),
        (
            case(vec![lit("\n\nUser:"), keep(lit("</answer>"))]),
            &["hi\n\nUser: x"],
            &["hi", ""],
            Status::Stopped(0),
            "\n\nUser:",
        ),
        // A flag-on stop holds nothing; a flag-off one does.
        (
            case(vec![lit("\n\nUser:"), keep(lit("</answer>"))]),
            &["a</ans", "wer>", "z"],
            &["a</ans", "wer>", "", ""],
            Status::Stopped(1),
            "</answer>",
        ),
        // §6.3: word boundaries.
        (
            case(vec![re(r"\bend\b")]),
            &["the calendar ends at the end", "."],
            &["the calendar ends at the ", "", ""],
            Status::Stopped(0),
            "end",
        ),
        (case(vec![re(r"\bend\b")]), &["calendar"], &["calendar", ""], Status::Finished, ""),
        // `a+` fires at the first `a`; `\d+\b` waits for the boundary.
        (case(vec![re("a+")]), &["xa", "aa"], &["x", "", ""], Status::Stopped(0), "a"),
        (
            case(vec![re(r"\d+\b")]),
            &["x12", "3", " y"],
            &["x", "", "", ""],
            Status::Stopped(0),
            "123",
        ),
        (case(vec![re(r"\d+\b")]), &["x12"], &["x", ""], Status::Stopped(0), "12"),
        // Literal `ab` beside `.ab\b` on "xab": the longer match needs the boundary.
        (
            case(vec![lit("ab"), re(r".ab\b")]),
            &["xab", " more"],
            &["", "", ""],
            Status::Stopped(1),
            "xab",
        ),
        (
            case(vec![lit("ab"), re(r".ab\b")]),
            &["xab", "c"],
            &["", "x", ""],
            Status::Stopped(0),
            "ab",
        ),
        // A literal alone fires at once.
        (case(vec![lit("ab")]), &["xab"], &["x", ""], Status::Stopped(0), "ab"),
        // `$` is the end of the stream: only `finish` can fire it.
        (case(vec![re(r"bye$")]), &["ok bye"], &["ok ", ""], Status::Stopped(0), "bye"),
        (case(vec![re(r"bye$")]), &["ok bye", "!"], &["ok ", "bye!", ""], Status::Finished, ""),
        (
            case(vec![re(r"(?m)bye$")]),
            &["ok bye", "\nx"],
            &["ok ", "", ""],
            Status::Stopped(0),
            "bye",
        ),
        // `^` is the start of the stream.
        (case(vec![re(r"^x")]), &["ax", "x"], &["ax", "x", ""], Status::Finished, ""),
        (case(vec![re(r"^x")]), &["xa"], &["", ""], Status::Stopped(0), "x"),
        // Unbounded holdback.
        (
            case(vec![re(r"<a.*b>")]),
            &["1<a", "xxxx", "b", ">2"],
            &["1", "", "", "", ""],
            Status::Stopped(0),
            "<axxxxb>",
        ),
        // Earliest end beats leftmost start.
        (case(vec![re(r"a.*z"), lit("bc")]), &["abcz"], &["a", ""], Status::Stopped(1), "bc"),
        // Equal end: smallest start wins, then first listed.
        (case(vec![lit("bc"), re(r"[a-z]bc")]), &["abc "], &["", ""], Status::Stopped(1), "abc"),
        (case(vec![re(r"b."), lit("bc")]), &["abc"], &["a", ""], Status::Stopped(0), "bc"),
        // Non-ASCII text next to a Unicode word boundary.
        (case(vec![re(r"\bcaf\b")]), &["café caf"], &["café ", ""], Status::Stopped(0), "caf"),
        (case(vec![re(r"(?-u:\b)caf(?-u:\b)")]), &["café"], &["", ""], Status::Stopped(0), "caf"),
        // §6.4
        (
            Case {
                stops: vec![lit("Question:")],
                until: Some("</think>".to_owned()),
                skip: vec![],
            },
            &["Let me see. Question: what…</think>The answer is 4. Question: next"],
            &["Let me see. Question: what…</think>The answer is 4. ", ""],
            Status::Stopped(0),
            "Question:",
        ),
        (
            Case { stops: vec![lit("Q:")], until: None, skip: think() },
            &["a <thi", "nk>Q: x</thi", "nk> Q", ": y"],
            &["a <thi", "nk>Q: x</thi", "nk> ", "", ""],
            Status::Stopped(0),
            "Q:",
        ),
        // A stop may not reach into a region; a marker ending with a stop wins.
        (
            Case { stops: vec![lit("a<think>")], until: None, skip: think() },
            &["a<think>b</think>"],
            &["a<think>b</think>", ""],
            Status::Finished,
            "",
        ),
        (
            Case {
                stops: vec![lit("a<")],
                until: None,
                skip: vec![("<".to_owned(), ">".to_owned())],
            },
            &["xa<b>a"],
            &["xa<b>", "a"],
            Status::Finished,
            "",
        ),
        // A stop ending before the marker ends wins.
        (
            Case { stops: vec![lit("<th")], until: None, skip: think() },
            &["x<think>"],
            &["x", ""],
            Status::Stopped(0),
            "<th",
        ),
        // Unicode `\B`/`\b` (the NFA engine): an attempt that a later assertion dooms is
        // dropped as soon as its characters have arrived, not when the assertion is reached.
        (case(vec![re(r"a-\Ba")]), &["xa-", "a"], &["xa-", "a", ""], Status::Finished, ""),
        (case(vec![re(r"a-\Ba|ab")]), &["xa", "-"], &["x", "a-", ""], Status::Finished, ""),
        (case(vec![re(r"é\bé|éa")]), &["é", "é"], &["", "é", "é"], Status::Finished, ""),
        (case(vec![re(r"-\b-")]), &["--", "-"], &["--", "-", ""], Status::Finished, ""),
        (case(vec![re(r"é-\B-")]), &["é-", "-"], &["", "", ""], Status::Stopped(0), "é--"),
        (case(vec![re(r"é\Ba")]), &["xé", "a"], &["x", "", ""], Status::Stopped(0), "éa"),
        (case(vec![re(r"\w\b\w")]), &["ééé"], &["ééé", ""], Status::Finished, ""),
        // `\b` right after a region sees the marker's last character.
        (
            Case {
                stops: vec![re(r"\bq")],
                until: None,
                skip: vec![("[".to_owned(), "x".to_owned())],
            },
            &["[xq [x q"],
            &["[xq [x ", ""],
            Status::Stopped(0),
            "q",
        ),
    ];
    for (case, chunks, want, status, seq) in cases {
        let m = case.matcher().unwrap();
        let (got, st, s, _) = run(&m, chunks);
        assert_eq!(got, want, "{case:?} {chunks:?}");
        assert_eq!(st, status, "{case:?} {chunks:?}");
        assert_eq!(s, seq, "{case:?} {chunks:?}");
    }
}

/// Quiet streams (`min_tokens`): the chunks fed while quiet, then the rest; the output of
/// every feed, then of finish, the held text after each feed, and the final status.
#[test]
#[allow(clippy::type_complexity, reason = "a table of literal cases")]
fn quiet_table() {
    let think = || vec![("<".to_owned(), ">".to_owned())];
    let regions = |stops| Case { stops, until: None, skip: think() };
    let cases: Vec<(Case, &[&str], &[&str], &[&str], &[&str], Status)> = vec![
        // A stop completed while quiet is not held; one completed after fires.
        (
            case(vec![lit("ab")]),
            &["xab"],
            &["ab!"],
            &["xab", "", ""],
            &["", ""],
            Status::Stopped(0),
        ),
        // Matches that began while quiet and end after it fire.
        (case(vec![lit("abc")]), &["xab"], &["c"], &["x", "", ""], &["ab", ""], Status::Stopped(0)),
        // A complete stop that a longer one extends is held, as its prefix.
        (
            case(vec![lit("ab"), lit("abc")]),
            &["ab"],
            &["c"],
            &["", "", ""],
            &["ab", ""],
            Status::Stopped(1),
        ),
        (
            case(vec![lit("ab"), lit("abc")]),
            &["ab"],
            &["d"],
            &["", "abd", ""],
            &["ab", ""],
            Status::Finished,
        ),
        // Stops inside a complete one: each is passed over, down to the held prefix.
        (
            case(vec![lit("abcd"), lit("bcd"), lit("cd"), lit("dx")]),
            &["abcd"],
            &["x"],
            &["abc", "", ""],
            &["d", ""],
            Status::Stopped(3),
        ),
        (case(vec![lit("abc"), lit("bc")]), &["abc"], &[], &["abc", ""], &[""], Status::Finished),
        // Mixed flags: only flag-off stops are held.
        (
            case(vec![keep(lit("ab")), lit("abc")]),
            &["ab"],
            &["x"],
            &["", "abx", ""],
            &["ab", ""],
            Status::Finished,
        ),
        (
            case(vec![lit("ab"), keep(lit("abc"))]),
            &["ab"],
            &["c"],
            &["ab", "c", ""],
            &["", ""],
            Status::Stopped(1),
        ),
        // Still quiet at the end: nothing fires.
        (case(vec![lit("ab")]), &["ab", "ab"], &[], &["ab", "ab", ""], &["", ""], Status::Finished),
        // Regions open and close while quiet as always.
        (
            regions(vec![lit("ab")]),
            &["<a"],
            &["b>ab"],
            &["<a", "b>", ""],
            &["", ""],
            Status::Stopped(0),
        ),
        (regions(vec![lit("ab")]), &["<"], &["ab"], &["<", "ab", ""], &["", ""], Status::Finished),
    ];
    for (case, quiet, loud, outs, held, status) in cases {
        let m = case.matcher().unwrap();
        let mut st = MatchStream::new(&m);
        st.quiet(&m, true).unwrap();
        let (mut got, mut pend) = (Vec::new(), Vec::new());
        for (i, c) in quiet.iter().chain(loud).enumerate() {
            if i == quiet.len() {
                st.quiet(&m, false).unwrap();
            }
            let mut out = Vec::new();
            if st.feed(&m, c.as_bytes(), &mut out).unwrap() == ByteOut::Input {
                out = c.as_bytes().to_vec();
            }
            got.push(String::from_utf8(out).unwrap());
            pend.push(String::from_utf8(st.held().to_vec()).unwrap());
        }
        let mut out = Vec::new();
        st.finish(&m, &mut out);
        got.push(String::from_utf8(out).unwrap());
        let got: Vec<&str> = got.iter().map(String::as_str).collect();
        let pend: Vec<&str> = pend.iter().map(String::as_str).collect();
        assert_eq!((&got[..], &pend[..], st.status()), (outs, held, status), "{case:?} {quiet:?}");
    }
    let m = case(vec![re("a+")]).matcher().unwrap();
    assert!(MatchStream::new(&m).quiet(&m, true).unwrap_err().is_quiet());
}

#[test]
fn pattern_errors_name_the_position() {
    for (p, needle) in
        [("a(", "unclosed group"), ("a*", "empty string"), (r"\b", "empty"), ("(?<=a)b", "look")]
    {
        let c = case(vec![lit("x"), re("ok"), re(p)]);
        let err = c.matcher().unwrap_err();
        assert_eq!(err.invalid_pattern_index(), Some(2), "{p}");
        let msg = err.to_string();
        assert!(msg.starts_with("regex stop at position 2 is invalid"), "{msg}");
        assert!(msg.contains(needle), "{p}: {msg}");
    }
    let huge = case(vec![re(r"\w{1000}\w{1000}\w{1000}")]);
    let err = huge.matcher().unwrap_err();
    assert_eq!(err.invalid_pattern_index(), Some(0), "{err}");
    let empty = Case { stops: vec![], until: Some(String::new()), skip: vec![] };
    assert!(empty.matcher().unwrap_err().is_empty_marker());
}

#[test]
fn max_len_in_code_points() {
    let c =
        case(vec![re("é{2,3}"), re("a+"), re("ab|cde"), re(r"x\b?"), lit("中文"), re("(?:ab)*c")]);
    let m = c.matcher().unwrap();
    let got: Vec<Option<usize>> = (0..m.len()).map(|i| m.max_len(i)).collect();
    assert_eq!(got, vec![Some(3), None, Some(3), Some(1), Some(2), None]);
    assert!(m.uses_nfa(3) && !m.uses_nfa(0));
}

#[test]
fn live_threads_stay_bounded() {
    let c = case(vec![re(r"a.*b"), re(r"\ba\w*z\b"), re(r"(?-u:\b)x\w{0,5}y")]);
    let m = c.matcher().unwrap();
    let mut st = MatchStream::new(&m);
    let mut out = Vec::new();
    for _ in 0..2000 {
        st.feed(&m, "a aa xé".as_bytes(), &mut out).unwrap();
        assert!(st.threads.iter().all(|t| t.len() <= 8));
    }
}

#[test]
fn naive_pikevm_sees_around_the_span() {
    let c = case(vec![re(r"a\b"), re("a|ab")]);
    let mut nv = Naive::new(&c);
    assert!(!nv.matches_at(0, "ab", 0, 1));
    assert!(nv.matches_at(0, "a-", 0, 1));
    assert!(nv.matches_at(1, "ab", 0, 1) && nv.matches_at(1, "ab", 0, 2));
}

// ---------------------------------------------------------------------------------------------
// Property tests

const ALPHABET: [&str; 5] = ["a", "b", "\u{e9}", "-", "\n"];

fn atom() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a", "b", "\u{e9}", "-", r"\n", ".", "[ab]", "[^a]", r"\w", r"\W", "ab", "a-",
    ])
    .prop_map(str::to_owned)
}

fn assertion() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", "", "", r"\b", r"\B", "^", "$", "(?m:^)", "(?m:$)", r"(?-u:\b)"])
        .prop_map(str::to_owned)
}

/// Patterns of at most 4 characters, so that the naive holdback can try every continuation.
fn bounded_pattern() -> impl Strategy<Value = String> {
    let piece = || {
        (assertion(), atom(), prop::sample::select(vec!["", "", "?", "{1,2}"])).prop_map(
            |(a, t, q)| if q.is_empty() { format!("{a}{t}") } else { format!("{a}(?:{t}){q}") },
        )
    };
    (prop::collection::vec(piece(), 1..=2), assertion(), prop::option::of(piece())).prop_map(
        |(ps, tail, alt)| {
            let main = format!("{}{tail}", ps.concat());
            match alt {
                Some(a) => format!("{main}|{a}"),
                None => main,
            }
        },
    )
}

fn unbounded_pattern() -> impl Strategy<Value = String> {
    (assertion(), atom(), prop::sample::select(vec!["+", "*", "{2,}"]), atom(), assertion())
        .prop_map(|(a, x, q, y, b)| format!("{a}(?:{x}){q}{y}{b}"))
}

fn literal() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(ALPHABET.to_vec()), 1..=3).prop_map(|v| v.concat())
}

fn stop(unbounded: bool) -> BoxedStrategy<(NStop, bool)> {
    let re = if unbounded {
        prop_oneof![bounded_pattern(), unbounded_pattern()].boxed()
    } else {
        bounded_pattern().boxed()
    };
    (prop_oneof![literal().prop_map(NStop::Lit), re.prop_map(NStop::Re)], any::<bool>()).boxed()
}

fn regions() -> impl Strategy<Value = (Option<String>, Vec<(String, String)>)> {
    let marker = prop::sample::select(vec!["<", "<a", "[", "a-", "b\n"]).prop_map(str::to_owned);
    (
        prop::option::weighted(0.25, marker.clone()),
        prop::collection::vec((marker.clone(), marker), 0..=2),
    )
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "\u{e9}", "-", "\n", "<", "[", "ab", " "]),
        0..10,
    )
    .prop_map(|v| v.concat())
}

fn split(text: &str, cuts: &[usize]) -> Vec<String> {
    let mut bounds: Vec<usize> =
        cuts.iter().map(|&c| text.char_indices().nth(c).map_or(text.len(), |(i, _)| i)).collect();
    bounds.push(0);
    bounds.push(text.len());
    bounds.sort_unstable();
    bounds.windows(2).map(|w| text[w[0]..w[1]].to_owned()).collect()
}

/// Feeds `chunks` and checks every feed against the naive reading: the stop fires exactly when
/// it is decided, the output is cut where the winner's flag says, and (when every flag-off stop
/// is bounded) the holdback is exactly minimal; otherwise nothing is emitted that the final
/// output does not contain.
fn check(case: &Case, chunks: &[String], exact: bool) -> Result<(), TestCaseError> {
    let Ok(m) = case.matcher() else { return Ok(()) };
    let mut nv = Naive::new(case);
    // The naive alphabet for continuations: every character class the generated stops use.
    let alpha: Vec<&str> = ALPHABET.to_vec();
    let max_len: Vec<usize> = (0..m.len()).map(|i| m.max_len(i).unwrap_or(usize::MAX)).collect();
    let exact = exact
        && case
            .stops
            .iter()
            .zip(&max_len)
            .all(|((s, inc), &l)| *inc || matches!(s, NStop::Lit(_)) || l <= 4);
    let full: String = chunks.concat();
    let (final_win, _) = nv.first_win(&full);
    let final_out = match final_win {
        Some(w) => &full[..if case.stops[w.index].1 { w.end } else { w.start }],
        None => &full[..],
    };
    let mut st = MatchStream::new(&m);
    let mut out = Vec::new();
    let mut seen = String::new();
    for c in chunks {
        let was_open = st.status() == Status::Open;
        if st.feed(&m, c.as_bytes(), &mut out).unwrap() == ByteOut::Input {
            out.extend_from_slice(c.as_bytes());
        }
        if !was_open {
            continue;
        }
        seen.push_str(c);
        let outs = std::str::from_utf8(&out).unwrap();
        prop_assert!(final_out.starts_with(outs), "leak: {outs:?} vs final {final_out:?}");
        match nv.fired(&seen, &alpha) {
            Some(w) => {
                prop_assert_eq!(st.status(), Status::Stopped(w.index), "after {:?}", seen);
                prop_assert_eq!(st.stop_sequence(&m), seen[w.start..w.end].as_bytes());
            }
            None => {
                prop_assert_eq!(st.status(), Status::Open, "after {:?}", seen);
                if exact {
                    let hold = nv.hold(&seen, &alpha, &max_len);
                    prop_assert_eq!(outs, &seen[..hold], "holdback after {:?}", seen);
                }
                let pend = std::str::from_utf8(st.held()).unwrap();
                prop_assert_eq!(format!("{outs}{pend}"), seen.clone());
            }
        }
    }
    st.finish(&m, &mut out);
    prop_assert_eq!(std::str::from_utf8(&out).unwrap(), final_out);
    match final_win {
        Some(w) => {
            prop_assert_eq!(st.status(), Status::Stopped(w.index));
            prop_assert_eq!(st.stop_sequence(&m), full[w.start..w.end].as_bytes());
        }
        None => prop_assert_eq!(st.status(), Status::Finished),
    }
    // One shot agrees with the stream.
    let (n, stop) = m.truncate(full.as_bytes());
    prop_assert_eq!(&full.as_bytes()[..n], final_out.as_bytes());
    prop_assert_eq!(stop.map(|s| s.0), final_win.map(|w| w.index));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn bounded_stops_match_naive_exactly(
        stops in prop::collection::vec(stop(false), 1..=3),
        (until, skip) in regions(),
        text in text(),
        cuts in prop::collection::vec(0usize..12, 0..4),
    ) {
        let case = Case { stops, until, skip };
        check(&case, &split(&text, &cuts), true)?;
    }

    #[test]
    fn unbounded_stops_match_naive(
        stops in prop::collection::vec(stop(true), 1..=3),
        (until, skip) in regions(),
        text in text(),
        cuts in prop::collection::vec(0usize..12, 0..4),
    ) {
        let case = Case { stops, until, skip };
        check(&case, &split(&text, &cuts), false)?;
    }

    /// Chunk invariance with one character per chunk against the whole text at once.
    #[test]
    fn chunking_never_matters(
        stops in prop::collection::vec(stop(true), 1..=4),
        (until, skip) in regions(),
        text in text(),
    ) {
        let case = Case { stops, until, skip };
        let Ok(m) = case.matcher() else { return Ok(()) };
        let whole = run(&m, &[text.as_str()]);
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        let each = run(&m, &refs);
        prop_assert_eq!(whole.0.concat(), each.0.concat());
        prop_assert_eq!(whole.1, each.1);
        prop_assert_eq!(whole.2, each.2);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Raw bytes in replace mode give what the decoded text gives; in strict mode a stop before
    /// the first invalid byte wins, otherwise the call that meets it fails and changes nothing.
    #[test]
    fn bytes_decode_then_match(
        stops in prop::collection::vec(stop(true), 1..=3),
        (until, skip) in regions(),
        raw in prop::collection::vec(prop::sample::select(vec![
            b"a".to_vec(), b"b".to_vec(), b"-".to_vec(), b"<".to_vec(), "\u{e9}".as_bytes().to_vec(),
            b"\xff".to_vec(), b"\xc3".to_vec(), b"\xe2\x82".to_vec(),
        ]), 0..12),
        cuts in prop::collection::vec(0usize..30, 0..5),
        replace in any::<bool>(),
    ) {
        let case = Case { stops, until, skip };
        let Ok(m) = case.matcher() else { return Ok(()) };
        let raw: Vec<u8> = raw.concat();
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(raw.len())).collect();
        bounds.push(0);
        bounds.push(raw.len());
        bounds.sort_unstable();
        let decoded = String::from_utf8_lossy(&raw).into_owned();
        let valid = std::str::from_utf8(&raw).map_or_else(|e| e.valid_up_to(), |_| raw.len());
        let text_view = if replace { decoded.clone() } else { String::from_utf8(raw[..valid].to_vec()).unwrap() };
        let (n, stop) = if replace || valid == raw.len() {
            m.truncate(text_view.as_bytes())
        } else {
            // Strict with an error: only a stop decided before the error counts.
            let mut ts = MatchStream::new(&m);
            let mut o = Vec::new();
            if ts.feed(&m, text_view.as_bytes(), &mut o).unwrap() == ByteOut::Input {
                o.extend_from_slice(text_view.as_bytes());
            }
            match ts.status() {
                Status::Stopped(i) => (o.len(), Some((i, ts.stop_sequence(&m).to_vec()))),
                _ => (0, None),
            }
        };
        let mut st = ByteStream::over(MatchStream::new(&m), replace);
        let mut out = Vec::new();
        let mut failed = false;
        for w in bounds.windows(2) {
            let chunk = &raw[w[0]..w[1]];
            let before = st.clone();
            let mark = out.len();
            match st.feed(&m, chunk, &mut out) {
                Ok(ByteOut::Input) => out.extend_from_slice(chunk),
                Ok(ByteOut::Buffer) => {}
                Err(e) => {
                    prop_assert!(!replace && e.decode_error().is_some());
                    prop_assert_eq!(out.len(), mark);
                    prop_assert_eq!(st.text().held(), before.text().held());
                    failed = true;
                    break;
                }
            }
            prop_assert!(std::str::from_utf8(&out).is_ok());
        }
        if failed {
            prop_assert!(stop.is_none());
            return Ok(());
        }
        let fin = st.finish(&m, &mut out);
        if replace || stop.is_some() || valid == raw.len() {
            prop_assert!(fin.is_ok());
            prop_assert_eq!(&out[..], &text_view.as_bytes()[..n]);
            prop_assert_eq!(st.text().stop_sequence(&m).to_vec(), stop.map(|s| s.1).unwrap_or_default());
        } else {
            prop_assert!(fin.is_err());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Strict decoding by contract §9.9 (`feed_deferring`, `finish_deferring`): the first
    /// invalid sequence (or an incomplete one at the end) ends the text for the stops'
    /// look-around. Output, stop and matched text are those of the text before it, finished;
    /// a stop decided before it raises nothing, one that the end decided comes with the
    /// decoding error deferred, and without a stop the call that meets the error fails and
    /// changes nothing.
    #[test]
    fn strict_bytes_end_the_text_at_the_error(
        stops in prop::collection::vec(stop(true), 1..=3),
        (until, skip) in regions(),
        raw in prop::collection::vec(prop::sample::select(vec![
            b"a".to_vec(), b"b".to_vec(), b"-".to_vec(), b"<".to_vec(), "\u{e9}".as_bytes().to_vec(),
            b"\xff".to_vec(), b"\xc3".to_vec(), b"\xe2\x82".to_vec(),
        ]), 0..12),
        cuts in prop::collection::vec(0usize..30, 0..5),
    ) {
        let case = Case { stops, until, skip };
        let Ok(m) = case.matcher() else { return Ok(()) };
        let raw: Vec<u8> = raw.concat();
        let valid = std::str::from_utf8(&raw).map_or_else(|e| e.valid_up_to(), |_| raw.len());
        let text = &raw[..valid];
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(raw.len())).collect();
        bounds.push(0);
        bounds.push(raw.len());
        bounds.sort_unstable();
        // The text before the error: how far a stop is decided without its end, and finished.
        let mut ts = MatchStream::new(&m);
        let mut want = Vec::new();
        if ts.feed(&m, text, &mut want).unwrap() == ByteOut::Input {
            want.extend_from_slice(text);
        }
        let decided = matches!(ts.status(), Status::Stopped(_));
        ts.finish(&m, &mut want);
        let stop = match ts.status() {
            Status::Stopped(i) => Some((i, ts.stop_sequence(&m).to_vec())),
            _ => None,
        };
        let mut st = ByteStream::over(MatchStream::new(&m), false);
        let mut out = Vec::new();
        let mut deferred = None;
        let mut failed = None;
        for w in bounds.windows(2) {
            let chunk = &raw[w[0]..w[1]];
            let (before, mark) = (st.clone(), out.len());
            match st.feed_deferring(&m, chunk, &mut out) {
                Ok((fed, d)) => {
                    if fed == ByteOut::Input {
                        out.extend_from_slice(chunk);
                    }
                    if d.is_some() {
                        prop_assert!(deferred.is_none(), "deferred twice");
                        deferred = d;
                    }
                }
                Err(e) => {
                    prop_assert!(e.decode_error().is_some());
                    prop_assert_eq!(out.len(), mark);
                    prop_assert_eq!(st.text().held(), before.text().held());
                    prop_assert_eq!(st.tail(), before.tail());
                    failed = Some(e);
                    break;
                }
            }
        }
        if failed.is_none() && st.status() == Status::Open {
            match st.finish_deferring(&m, &mut out) {
                Ok(d) => deferred = d,
                Err(e) => failed = Some(e),
            }
        }
        prop_assert!(std::str::from_utf8(&out).is_ok());
        match stop {
            Some((index, matched)) => {
                prop_assert!(failed.is_none());
                prop_assert_eq!(st.status(), Status::Stopped(index));
                prop_assert_eq!(&out, &want);
                prop_assert_eq!(st.text().stop_sequence(&m).to_vec(), matched);
                // An error comes deferred exactly when the end of the text decided the stop.
                let expect_error = !decided && valid < raw.len();
                prop_assert_eq!(deferred.is_some(), expect_error);
            }
            None => {
                prop_assert!(deferred.is_none());
                prop_assert_eq!(failed.is_some(), valid < raw.len());
                prop_assert!(want.starts_with(&out));
            }
        }
    }
}

/// Contract §9.9 on examples: under strict decoding an invalid sequence, or an incomplete one
/// at the end, ends the text for the stops' look-around.
#[test]
fn strict_errors_end_the_text_for_the_look_around() {
    // (stops, chunks, output, stop and matched text, the call that returns the error deferred:
    // Some(index of the chunk, or chunks.len() for finish), None for no error at all)
    type Row<'a> =
        (&'a [NStop], &'a [&'a [u8]], &'a [u8], Option<(usize, &'a [u8])>, Option<usize>);
    let end = [NStop::Re(r"\bend\b".into())];
    let x_end = [NStop::Re("x$".into())];
    let digits = [NStop::Re(r"\d+\b".into())];
    let lit_and_re = [NStop::Lit("ab".into()), NStop::Re(r".ab\b".into())];
    let rows: &[Row<'_>] = &[
        (&end, &[b"the end\xff"], b"the ", Some((0, b"end")), Some(0)),
        (&end, &[b"the e", b"nd", b"\xff more"], b"the ", Some((0, b"end")), Some(2)),
        (&end, &[b"the end\xe2"], b"the ", Some((0, b"end")), Some(1)),
        (&end, &[b"the end\xe2", b"\x82\xac"], b"the ", Some((0, b"end")), None),
        (&end, &[b"the end\xc3", b"\xa9"], b"the end\xc3\xa9", None, None),
        (&end, &[b"the end", b"\xe2\x28"], b"the ", Some((0, b"end")), Some(1)),
        (&end, &[b"the end \xff"], b"the ", Some((0, b"end")), None),
        (&x_end, &[b"ax\xff"], b"a", Some((0, b"x")), Some(0)),
        (&digits, &[b"n=42\xff"], b"n=", Some((0, b"42")), Some(0)),
        (&lit_and_re, &[b"xab\xff"], b"", Some((1, b"xab")), Some(0)),
        (&lit_and_re, &[b"xab-"], b"", Some((1, b"xab")), None),
    ];
    for &(stops, chunks, want, stop, error_at) in rows {
        let case = Case {
            stops: stops.iter().map(|s| (s.clone(), false)).collect(),
            until: None,
            skip: Vec::new(),
        };
        let m = case.matcher().unwrap();
        let mut st = ByteStream::over(MatchStream::new(&m), false);
        let mut out = Vec::new();
        let mut deferred_at = None;
        for (i, chunk) in chunks.iter().enumerate() {
            let (fed, d) = st.feed_deferring(&m, chunk, &mut out).unwrap();
            if fed == ByteOut::Input {
                out.extend_from_slice(chunk);
            }
            if d.is_some() {
                deferred_at = Some(i);
            }
        }
        if st.finish_deferring(&m, &mut out).unwrap().is_some() {
            deferred_at = Some(chunks.len());
        }
        assert_eq!(out, want, "{chunks:x?}");
        let got = match st.status() {
            Status::Stopped(i) => Some((i, st.text().stop_sequence(&m))),
            _ => None,
        };
        assert_eq!(got, stop, "{chunks:x?}");
        assert_eq!(deferred_at, error_at, "{chunks:x?}");
        if error_at.is_some() {
            // The same input through `feed` and `finish` fails, as before the rule.
            let mut old = ByteStream::over(MatchStream::new(&m), false);
            let mut sink = Vec::new();
            let failed = chunks.iter().any(|c| old.feed(&m, c, &mut sink).is_err())
                || old.finish(&m, &mut sink).is_err();
            assert!(failed, "{chunks:x?}");
        }
    }
    // Without a stop at the end the error is raised by the call that meets it, which changes
    // nothing; replace mode has no error to defer (U+FFFD is a character).
    let case = Case { stops: vec![(end[0].clone(), false)], until: None, skip: Vec::new() };
    let m = case.matcher().unwrap();
    let mut st = ByteStream::over(MatchStream::new(&m), false);
    let mut out = Vec::new();
    st.feed_deferring(&m, b"an e", &mut out).unwrap();
    let before = st.clone();
    let e = st.feed_deferring(&m, b"ndx\xff", &mut out).unwrap_err();
    assert_eq!(e.decode_error().map(|d| (d.start, d.end)), Some((3, 4)));
    assert_eq!((st.text().held(), out.as_slice()), (before.text().held(), &b"an "[..]));
    let mut st = ByteStream::over(MatchStream::new(&m), true);
    let mut out = Vec::new();
    let (_, d) = st.feed_deferring(&m, b"the end\xff", &mut out).unwrap();
    assert!(d.is_none());
    assert_eq!((out.as_slice(), st.status()), (&b"the "[..], Status::Stopped(0)));
}
