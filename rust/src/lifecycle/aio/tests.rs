//! A pull's rules over a scripted host.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};

use super::*;

/// A scripted host: objects and errors are strings; an awaitable answers each `send` with
/// the next entry of its script (`"yield x"`, `"return x"`, `"raise x"`), and every call
/// is logged. An error that starts with `!` is no `Exception`; `cancel` is a cancellation,
/// `end` the upstream's end. The stage passes items through and closes on `stop`. The
/// stream's state is real, over the iterator `up`.
struct Fake {
    scripts: RefCell<HashMap<String, VecDeque<&'static str>>>,
    log: RefCell<Vec<String>>,
    running: Cell<bool>,
    state: RefCell<Upstream<String, u32, String>>,
    close_requested: Cell<bool>,
    /// What a closing stage owes.
    owed: RefCell<Option<String>>,
    /// What the stage owes at its end, and the error after it.
    end: RefCell<(Vec<String>, Option<String>)>,
}

impl Default for Fake {
    fn default() -> Self {
        let mut state = Upstream::default();
        state.start("up".to_owned(), None);
        Fake {
            scripts: RefCell::default(),
            log: RefCell::default(),
            running: Cell::default(),
            state: RefCell::new(state),
            close_requested: Cell::default(),
            owed: RefCell::default(),
            end: RefCell::default(),
        }
    }
}

type S = &'static str;

impl Fake {
    fn script(self, it: &str, steps: &[S]) -> Self {
        self.scripts.borrow_mut().insert(it.to_owned(), steps.iter().copied().collect());
        self
    }

    fn log(&self, entry: String) {
        self.log.borrow_mut().push(entry);
    }

    fn taken_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.borrow_mut())
    }
}

impl Protocol for Fake {
    type Obj = String;
    type Err = String;
    fn send(&self, it: &String, input: Input<String, String>) -> Result<Sent<String>, String> {
        self.log(format!("send {it}"));
        let next = self.scripts.borrow_mut().get_mut(it).and_then(VecDeque::pop_front);
        // With nothing scripted, a thrown error is raised where the awaitable waits.
        let (what, value) = match (next, input) {
            (None, Input::Throw(err)) => return Err(err),
            (next, _) => next.unwrap_or("return none").split_once(' ').unwrap(),
        };
        match what {
            "yield" => Ok(Sent::Yield(value.to_owned())),
            "return" => Ok(Sent::Return(value.to_owned())),
            _ => Err(value.to_owned()),
        }
    }
    fn none(&self) -> String {
        "none".to_owned()
    }
    fn is_none(&self, value: &String) -> bool {
        value == "none"
    }
    fn made(&self, err: String) -> String {
        err
    }
    fn is_exception(&self, err: &String) -> bool {
        !err.starts_with('!') && err != "cancel"
    }
    fn is_cancellation(&self, err: &String) -> bool {
        err == "cancel"
    }
    fn ends_close(&self, err: &String) -> bool {
        err == "exit"
    }
    fn misuse(&self, misuse: Misuse) -> String {
        format!("{misuse:?}")
    }
    fn end_of_stream(&self) -> String {
        "end".to_owned()
    }
    fn close_awaitable(&self, it: &String) -> Result<(), String> {
        self.log(format!("close {it}"));
        Ok(())
    }
    fn start_close_of(&self, object: &String) -> Result<Option<String>, String> {
        self.log(format!("start close {object}"));
        match object.as_str() {
            "broken" => Err("no close".to_owned()),
            "sync" => Ok(None),
            _ => Ok(Some(format!("close of {object}"))),
        }
    }
    fn report(&self, message: &'static str, err: String) {
        self.log(format!("report {message}: {err}"));
    }
    fn anext(&self, iterator: &String) -> Result<String, String> {
        Ok(format!("{iterator}.anext"))
    }
    fn is_end(&self, err: &String) -> bool {
        err == "end"
    }
    fn chain(&self, err: &String, context: String) {
        self.log(format!("chain {err} <- {context}"));
    }
}

impl State for Fake {
    type Driver = ();
    type Held = String;
    type Spare = u32;
    type Locked<'a> = std::cell::RefMut<'a, Upstream<String, u32, String>>;
    fn claim(&self, (): &()) -> bool {
        !self.running.replace(true)
    }
    fn release(&self, (): &()) {
        self.running.set(false);
    }
    fn close_requested(&self, (): &()) -> bool {
        self.close_requested.get()
    }
    fn start_close(
        &self,
        (): &(),
        objects: VecDeque<String>,
        after_stop: bool,
    ) -> Result<String, String> {
        self.log(format!("start close {objects:?} {after_stop}"));
        Ok("close".to_owned())
    }
    fn state<'a>(&'a self, (): &'a ()) -> Result<std::cell::RefMut<'a, Upstream<S2, u32, S2>>, S2> {
        Ok(self.state.borrow_mut())
    }
    fn bind(&self, object: String) -> String {
        object
    }
    fn copy(&self, object: &String) -> String {
        object.clone()
    }
    fn spare(&self) -> u32 {
        7
    }
}

impl Stage for Fake {
    fn push(&self, (): &(), item: &String, position: usize) -> Result<(Option<S2>, bool), S2> {
        self.log(format!("item {item} at {position}"));
        Ok((Some(item.clone()), item == "stop"))
    }
    fn owed(&self, (): &()) -> Result<Option<S2>, S2> {
        Ok(self.owed.borrow_mut().take())
    }
    fn stage_end(&self, (): &()) -> Result<(Vec<S2>, Option<S2>), S2> {
        self.log("end stage".to_owned());
        Ok(std::mem::take(&mut *self.end.borrow_mut()))
    }
}

type S2 = String;

type TestStep = Step<(), String, String>;

/// Sends `inputs` in turn from `step`: each result, as text, and the step left.
fn run(
    host: &Fake,
    mut step: TestStep,
    inputs: Vec<Input<String, String>>,
) -> (Vec<String>, TestStep) {
    let mut out = Vec::new();
    for input in inputs {
        let Resumed { step: next, sent, ended } = resume(host, step, input);
        step = next;
        if let Some(driver) = ended {
            host.release(&driver);
        }
        out.push(match sent {
            Ok(Sent::Yield(v)) => format!("yield {v}"),
            Ok(Sent::Return(v)) => format!("return {v}"),
            Err(e) => format!("raise {e}"),
        });
    }
    (out, step)
}

fn send(v: &str) -> Input<String, String> {
    Input::Send(v.to_owned())
}

#[test]
fn a_pull_waits_on_the_upstream_then_delivers_and_refers_to_nothing() {
    let host = Fake::default().script("up.anext", &["yield f1", "yield f2", "return a"]);
    let (out, step) = run(&host, Step::Start(()), vec![send("none"), send("x"), send("y")]);
    assert_eq!(out, ["yield f1", "yield f2", "return a"]);
    assert!(matches!(step, Step::Done));
    assert!(!host.running.get());
    assert_eq!(host.taken_log()[3], "item a at 0");
}

#[test]
fn a_pull_s_lifecycle_steps() {
    /// Pulls in turn (a new awaitable each, sent `None` once): what each gave.
    fn pulls(host: &Fake, n: usize) -> Vec<String> {
        (0..n).flat_map(|_| run(host, Step::Start(()), vec![send("none")]).0).collect()
    }
    // `aclose()` during the pull: the item is not delivered, the upstream is closed.
    let host = Fake::default().script("up.anext", &["return a"]);
    host.close_requested.set(true);
    assert_eq!(pulls(&host, 1), ["raise end"]);
    assert_eq!(host.taken_log(), ["send up.anext", "start close [\"up\"] false", "send close"]);
    // A stop: the close runs apart from the pull; the closing stage's error is raised
    // after the last output.
    let host = Fake::default().script("up.anext", &["return stop"]);
    *host.owed.borrow_mut() = Some("decode".to_owned());
    assert_eq!(pulls(&host, 3), ["return stop", "raise decode", "raise end"]);
    assert!(host.taken_log().contains(&"start close [\"up\"] true".to_owned()));
    // The upstream ran out: nothing to close, the stage's end and its error delivered.
    let host = Fake::default().script("up.anext", &["raise end"]);
    *host.end.borrow_mut() = (vec!["tail".to_owned()], Some("late".to_owned()));
    assert_eq!(pulls(&host, 3), ["return tail", "raise late", "raise end"]);
    assert_eq!(host.taken_log(), ["send up.anext", "end stage"]);
    assert!(host.state.borrow_mut().take_upstream().is_empty(), "let go of");
    // A cancellation while pulling: the upstream closed, a failing close reported as such.
    let host = Fake::default().script("up.anext", &["raise cancel"]).script("close", &["raise x"]);
    assert_eq!(pulls(&host, 1), ["raise cancel"]);
    let log = host.taken_log();
    assert_eq!(log.last().unwrap(), "report closing the upstream after a cancellation: x");
    // An upstream error: the same, reported as what it is.
    let host = Fake::default().script("up.anext", &["raise boom"]).script("close", &["raise x"]);
    assert_eq!(pulls(&host, 2), ["raise boom", "raise end"]);
    assert_eq!(host.taken_log().last().unwrap(), "report closing the upstream after its error: x");
    // A delivering pull's awaitable is kept to serve the next pull.
    let host = Fake::default().script("up.anext", &["return a"]);
    assert_eq!(pulls(&host, 1), ["return a"]);
    assert_eq!(host.state.borrow_mut().take_spare(), Some(7));
}

#[test]
fn a_coroutine_s_misuses() {
    let host = Fake::default();
    let cases: Vec<(TestStep, Input<String, String>, &str)> = vec![
        (Step::Done, send("none"), "raise Reused"),
        (Step::Done, Input::Throw("boom".to_owned()), "raise boom"),
        (Step::Start(()), send("value"), "raise StartValue"),
        (Step::Start(()), Input::Throw("boom".to_owned()), "raise boom"),
    ];
    for (step, input, expected) in cases {
        let started = matches!(step, Step::Start(()));
        let (out, left) = run(&host, step, vec![input]);
        assert_eq!(out, [expected]);
        // A value sent to a new pull leaves it new, as a coroutine stays unstarted.
        assert_eq!(matches!(left, Step::Start(())), started && expected.contains("Start"));
    }
    host.running.set(true);
    let (out, _) = run(&host, Step::Start(()), vec![send("none")]);
    assert_eq!(out, ["raise Concurrent"]);
    assert!(host.running.get(), "the running pull keeps its claim");
}

#[test]
fn every_object_is_closed_and_the_first_failure_is_what_the_mode_says() {
    let objects = || ["a", "broken", "b", "sync"].map(str::to_owned).into_iter().collect();
    for (mode, expected, told, deferred) in [
        (CloseMode::Raise, "raise x", None, None),
        (CloseMode::Defer(()), "return none", None, Some("x")),
        (CloseMode::Report("closing"), "return none", Some("report closing: x"), None),
    ] {
        let host = Fake::default()
            .script("close of a", &["yield f", "raise x"])
            .script("close of b", &["raise y"]);
        let (out, step) = run(
            &host,
            Step::Closer(Box::new(Closer::new(objects(), mode))),
            vec![send("none"), send("v")],
        );
        assert_eq!(out, ["yield f", expected]);
        assert!(matches!(step, Step::Done));
        let log = host.taken_log();
        assert_eq!(
            log[..7],
            [
                "start close a",
                "send close of a",
                "send close of a",
                "start close broken",
                "start close b",
                "send close of b",
                "start close sync",
            ]
        );
        let reported = log.iter().find(|l| l.starts_with("report"));
        assert_eq!(reported.map(String::as_str), told);
        // Deferred to the stream, raised after its last output.
        assert_eq!(host.state.borrow().life.deferred().map(String::as_str), deferred);
    }
    // What is no `Exception` propagates in every mode.
    for mode in [CloseMode::Raise, CloseMode::Defer(()), CloseMode::Report("closing")] {
        let host = Fake::default().script("close of a", &["raise !base"]);
        let closer = Closer::new(["a".to_owned()].into(), mode);
        let (out, _) = run(&host, Step::Closer(Box::new(closer)), vec![send("none")]);
        assert_eq!(out, ["raise !base"]);
        assert!(!host.taken_log().iter().any(|l| l.starts_with("report")));
        assert_eq!(host.state.borrow().life.deferred(), None);
    }
}

#[test]
fn a_stop_s_close_is_awaited_and_a_cancellation_of_it_ends_the_stage() {
    let host = Fake::default().script("up.anext", &["return stop"]).script("close", &["yield f"]);
    let (out, step) = run(&host, Step::Start(()), vec![send("none")]);
    assert_eq!(out, ["yield f"]);
    assert!(matches!(step, Step::Closing((), _, ref why) if matches!(**why, Close::Stop)));
    assert!(host.running.get());
    let (out, step) = run(&host, step, vec![Input::Throw("cancel".to_owned())]);
    assert_eq!(out, ["raise cancel"]);
    assert!(matches!(step, Step::Done));
    assert!(!host.running.get());
    assert!(host.taken_log().contains(&"end stage".to_owned()));
}

#[test]
fn a_close_that_the_awaitable_ignores_is_forced() {
    let yielded = || Ok(Sent::Yield("f".to_owned()));
    let closing = Step::Closing((), "close".to_owned(), Box::new(Close::Requested));
    let mut closer = Closer::new(["b".to_owned()].into(), CloseMode::Raise);
    closer.current = Some("close of a".to_owned());
    // What it left, whether its stream is released, and what is closed.
    let cases: Vec<(TestStep, bool, Vec<&str>)> = vec![
        (Step::Pulling((), "up.anext".to_owned(), 0), true, vec![]),
        (closing, true, vec!["close close"]),
        (Step::Closer(Box::new(closer)), false, vec!["close close of a"]),
    ];
    for (left, released, closed) in cases {
        let host = Fake::default();
        host.running.set(true);
        let err = closed_by(&host, yielded(), || Some(left)).unwrap_err();
        assert_eq!(err, "IgnoredExit");
        assert_eq!(host.running.get(), !released);
        assert_eq!(host.taken_log(), closed);
    }
    let host = Fake::default();
    assert_eq!(closed_by(&host, Err("exit".to_owned()), || None), Ok(()));
    assert_eq!(closed_by(&host, Err("other".to_owned()), || None), Err("other".to_owned()));
    assert_eq!(closed_by(&host, Ok(Sent::Return("none".to_owned())), || None), Ok(()));
}

#[test]
fn a_step_s_face() {
    let mut closer = Closer::new(["b".to_owned()].into(), CloseMode::Defer(()));
    let idle: TestStep = Step::Closer(Box::new(Closer::new(VecDeque::new(), CloseMode::Raise)));
    assert!(!idle.is_suspended());
    closer.current = Some("close of a".to_owned());
    let steps: Vec<(TestStep, bool, bool, Vec<&str>)> = vec![
        (Step::Start(()), false, false, vec!["driver"]),
        (Step::Pulling((), "it".to_owned(), 3), true, true, vec!["driver", "it"]),
        (Step::Closing((), "c".to_owned(), Box::new(Close::Stop)), true, true, vec!["driver", "c"]),
        (Step::Closer(Box::new(closer)), true, false, vec!["close of a", "b", "driver"]),
        (Step::Done, false, false, vec![]),
    ];
    for (step, suspended, running, visited) in steps {
        assert_eq!(step.is_suspended(), suspended);
        assert_eq!(step.running_driver().is_some(), running);
        let step = step.map(|()| "driver", |o| o.to_uppercase());
        let seen = RefCell::new(Vec::new());
        let walk: Result<(), ()> = step.visit(
            |d| {
                seen.borrow_mut().push((*d).to_owned());
                Ok(())
            },
            |o| {
                seen.borrow_mut().push(o.to_lowercase());
                Ok(())
            },
        );
        assert_eq!(
            (walk, seen.into_inner()),
            (Ok(()), visited.iter().map(|v| (*v).to_owned()).collect())
        );
    }
}

type TestUpstream = Upstream<&'static str, u32, String>;

fn started(source: Option<&'static str>) -> TestUpstream {
    let mut up = TestUpstream::default();
    up.start("it", source);
    up
}

#[test]
fn pulls_are_numbered_and_a_delivering_pull_keeps_its_awaitable_once() {
    let mut up = started(Some("sdk"));
    for expected in 0..3 {
        assert!(matches!(up.begin(|o| *o, || 9), Todo::Pull("it", p) if p == expected));
    }
    up.life.owed(["a", "b"]);
    assert!(matches!(up.begin(|o| *o, || 1), Todo::Do(Action::Deliver("a"))));
    assert!(matches!(up.begin(|o| *o, || 2), Todo::Do(Action::Deliver("b"))));
    assert_eq!(up.take_spare(), Some(1), "the first awaitable kept stays");
    assert_eq!(up.take_spare(), None);
    assert!(matches!(up.keep(Action::Pull, || 3), Action::Pull));
    assert_eq!(up.take_spare(), None, "only a delivering pull is kept");
}

#[test]
fn each_upstream_object_is_closed_or_let_go_of_once() {
    // Ran out by itself: both let go of, nothing to close.
    let mut up = started(Some("sdk"));
    let (action, released) = up.exhausted(false);
    assert!(matches!(action, Action::EndStage));
    assert_eq!(released, [Some("it"), Some("sdk")]);
    assert!(up.close().is_empty());
    // `aclose()` during a pull closes the object given now, and only the iterator later.
    let mut up = started(Some("sdk"));
    assert_eq!(up.close_during_pull(|o| *o), Some("sdk"));
    assert_eq!(up.close_during_pull(|o| *o), None);
    assert_eq!(up.take_upstream(), ["it"]);
    // `aclose()` otherwise: both, once.
    let mut up = started(Some("sdk"));
    assert_eq!(up.close(), ["it", "sdk"]);
    assert!(up.close().is_empty());
    // A stream already settled (its upstream closed or let go of) closes nothing more.
    let mut up = started(Some("sdk"));
    up.life.clear();
    assert!(up.close().is_empty());
    let mut up = started(Some("sdk"));
    let mut seen = Vec::new();
    up.life.owed(["x"]);
    let _ = up.keep(Action::Deliver("y"), || 7);
    let mut spare = None;
    let visited: Result<(), ()> = up.visit(
        |o| {
            seen.push(*o);
            Ok(())
        },
        |s| {
            spare = Some(*s);
            Ok(())
        },
    );
    assert_eq!((visited, spare), (Ok(()), Some(7)));
    assert_eq!(seen, ["it", "sdk", "x"]);
    assert_eq!(up.clear(), ([Some("it"), Some("sdk")], Some(7)));
}
