//! The stream lifecycle of contract §9, once for every pull API: a state machine that a driver
//! tells what happened (an item was fed, the upstream ran out or raised, a close ended) and
//! that answers with what to do next ([`Action`]). It performs no I/O: the sync driver carries
//! out a [`Action::Close`] by calling `close()`, the async driver by awaiting `aclose()`, and both
//! read every decision from here, so the two cannot drift apart.
//!
//! The rules:
//!
//! 1. a stop (the stage is closing): close the upstream at once, deliver the last piece and
//!    what the stage still owes, then end; a failing close is raised after the last output;
//! 2. a close asked for by the consumer: the upstream is closed once. Asked during a pull, the
//!    item that pull returns is not delivered, and the stream ends;
//! 3. a bad item: the stage's error propagates, the stream ends, the upstream is closed (a
//!    failing close is the error's context);
//! 4. an upstream error: propagates unchanged, the stream ends, the upstream is closed;
//! 5. the upstream ran out: nothing to close; what the stage still owes is delivered.
//!
//! A failing close that nobody can be told of (after an upstream error, or after a close
//! asked for during a pull) is the driver's to report ([`Closed::report`]).
//!
//! The drivers' parts that need no Python are here too, each over a host that carries out the
//! I/O: [`sync`], the sync driver's pull (calling), and [`aio`], the async driver's (awaiting).
//! Built only with the bindings (and for its tests), which reach it through `crate::host`.

// Without the bindings this is built only for its own tests, which leave parts of it unused.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

pub mod aio;
pub mod sync;

use std::collections::VecDeque;

/// Why the upstream is being closed, and so what comes after the close.
#[derive(Debug)]
pub enum Close<E> {
    /// A stop fired: a failure is raised after the last output, then the stage's end.
    Stop,
    /// A bad item: its error is raised, with a failing close as its context.
    BadItem(E),
    /// The upstream raised (or the pull was cancelled): its error is raised, a failing close
    /// is reported.
    Upstream(E),
    /// The consumer asked for the close during a pull: the stream ends, a failing close is
    /// reported.
    Requested,
}

/// What a driver does next.
#[derive(Debug)]
pub enum Action<T, E> {
    /// Hand this item to the consumer.
    Deliver(T),
    /// Raise this error to the consumer.
    Raise(E),
    /// The stream is over.
    End,
    /// Pull the next item from the upstream and report it ([`Lifecycle::fed`],
    /// [`Lifecycle::refused`], [`Lifecycle::exhausted`], [`Lifecycle::raised`]).
    Pull,
    /// Close the upstream, then report how it went ([`Lifecycle::closed`]).
    Close(Close<E>),
    /// Queue what the stage still owes ([`Lifecycle::owed`]).
    EndStage,
}

impl<T, E> Action<T, E> {
    /// The same action with its item converted by `f`.
    #[inline]
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Action<U, E> {
        match self {
            Action::Deliver(item) => Action::Deliver(f(item)),
            Action::Raise(err) => Action::Raise(err),
            Action::End => Action::End,
            Action::Pull => Action::Pull,
            Action::Close(why) => Action::Close(why),
            Action::EndStage => Action::EndStage,
        }
    }
}

/// Keeps `err` in `slot`, to raise after the last output: when one is kept already, that one
/// is raised, with `err` as its context. [`Lifecycle::defer`]'s rule, for a stage that keeps the
/// error it owes until its driver takes it.
pub fn defer_into<E>(slot: &mut Option<E>, err: E, set_context: impl FnOnce(&E, E)) {
    match slot {
        Some(first) => set_context(first, err),
        None => *slot = Some(err),
    }
}

/// What a finished close leaves to its driver.
#[derive(Debug)]
pub struct Closed<T, E> {
    /// The next step.
    pub action: Action<T, E>,
    /// A failing close that nobody can be told of: the driver reports it (the sync driver to
    /// `sys.unraisablehook`, the async one to the event loop's exception handler).
    pub report: Option<E>,
}

/// The state of one stream's lifecycle: output owed, an error deferred past it, and whether
/// the stream may pull again.
#[derive(Debug)]
pub struct Lifecycle<T, E> {
    queue: VecDeque<T>,
    deferred: Option<E>,
    /// No more pulls: a stop, the upstream ended or raised, or the stream was closed.
    done: bool,
    /// The upstream was closed, or released after running out: no close is left to do.
    settled: bool,
}

impl<T, E> Default for Lifecycle<T, E> {
    fn default() -> Self {
        Lifecycle { queue: VecDeque::new(), deferred: None, done: false, settled: false }
    }
}

impl<T, E> Lifecycle<T, E> {
    /// A stream that has not pulled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the stream may pull again (the bindings read the actions instead).
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether no close is left to do.
    pub fn is_settled(&self) -> bool {
        self.settled
    }

    /// The items owed, for a collector's walk.
    pub fn queued(&self) -> impl Iterator<Item = &T> {
        self.queue.iter()
    }

    /// The deferred error.
    #[cfg(test)]
    pub fn deferred(&self) -> Option<&E> {
        self.deferred.as_ref()
    }

    /// Whether the next action is [`Action::Pull`]: nothing owed, and the stream may pull.
    /// The drivers' common step asks this before anything else.
    #[inline]
    pub fn wants_pull(&self) -> bool {
        self.queue.is_empty() && self.deferred.is_none() && !self.done
    }

    /// The consumer wants the next item.
    #[inline]
    pub fn next_action(&mut self) -> Action<T, E> {
        if let Some(out) = self.queue.pop_front() {
            return Action::Deliver(out);
        }
        if self.deferred.is_some() {
            return self.deferred.take().map_or(Action::End, Action::Raise);
        }
        if self.done {
            return Action::End;
        }
        Action::Pull
    }

    /// The upstream gave an item while a close was asked for: it is not delivered.
    pub fn closed_during_pull(&mut self) -> Action<T, E> {
        self.abandon();
        self.close_or_end(Close::Requested)
    }

    /// The stage took an item: its output (if any), and whether the stage is now closing (a
    /// stop fired).
    #[allow(
        clippy::inline_always,
        reason = "every chunk a driver feeds: out of line, with the async driver's `begin`, 17 to 28 more instructions an `awrap` chunk (callgrind)"
    )]
    #[inline(always)]
    pub fn fed(&mut self, out: Option<T>, closing: bool) -> Action<T, E> {
        if closing {
            self.done = true;
            if let Some(out) = out {
                self.queue.push_front(out);
            }
            return self.close_or_end(Close::Stop);
        }
        match out {
            Some(out) if self.queue.is_empty() => Action::Deliver(out),
            Some(out) => {
                self.queue.push_back(out);
                self.next_action()
            }
            None => self.next_action(),
        }
    }

    /// The stage refused an item (or its output could not be made): the item is consumed and
    /// cannot be fed again, and going on would splice the text around it.
    pub fn refused(&mut self, err: E) -> Action<T, E> {
        self.done = true;
        self.close_or_raise(Close::BadItem(err))
    }

    /// The upstream ran out by itself: nothing to close. When a close was asked for meanwhile
    /// (it ended the read), the stream ends without the stage's end.
    pub fn exhausted(&mut self, close_requested: bool) -> Action<T, E> {
        if close_requested {
            return self.closed_during_pull();
        }
        self.done = true;
        self.settled = true;
        Action::EndStage
    }

    /// The upstream raised `err` (or the pull awaiting it was cancelled). When a close was
    /// asked for meanwhile, the close ended the read (a dropped connection): the stream ends.
    pub fn raised(&mut self, err: E, close_requested: bool) -> Action<T, E> {
        if close_requested {
            return self.closed_during_pull();
        }
        self.done = true;
        self.close_or_raise(Close::Upstream(err))
    }

    /// A close ended, failing with `failure` or not. `set_context` makes a failure the context
    /// of an error raised instead of it.
    pub fn closed(
        &mut self,
        why: Close<E>,
        failure: Option<E>,
        set_context: impl FnOnce(&E, E),
    ) -> Closed<T, E> {
        let (step, report) = match why {
            Close::Stop => {
                if let Some(failure) = failure {
                    self.defer(failure, set_context);
                }
                (Action::EndStage, None)
            }
            Close::BadItem(err) => {
                if let Some(failure) = failure {
                    set_context(&err, failure);
                }
                (Action::Raise(err), None)
            }
            Close::Upstream(err) => (Action::Raise(err), failure),
            Close::Requested => (Action::End, failure),
        };
        Closed { action: step, report }
    }

    /// Keeps an error to raise after the last output (a failing close after a stop, or the
    /// decoding error that ended the text and so fired a stop, contract §9.9). When one is
    /// kept already, that one is raised, with `err` as its context.
    pub fn defer(&mut self, err: E, set_context: impl FnOnce(&E, E)) {
        defer_into(&mut self.deferred, err, set_context);
    }

    /// Queues output owed: what a stage gave as several items, or still owes once the upstream
    /// is done.
    #[inline]
    pub fn owed(&mut self, items: impl IntoIterator<Item = T>) {
        self.queue.extend(items);
    }

    /// The consumer closes the stream while no pull runs: it ends, owing nothing, and the
    /// upstream is closed unless it was already (then `false`: nothing to do).
    pub fn close(&mut self) -> bool {
        self.abandon();
        !std::mem::replace(&mut self.settled, true)
    }

    /// The consumer wants no more output: the stream ends, owing nothing.
    pub fn abandon(&mut self) {
        self.done = true;
        self.queue.clear();
        self.deferred = None;
    }

    /// The stream is being torn down by the collector: nothing is left to close or deliver.
    pub fn clear(&mut self) {
        self.abandon();
        self.settled = true;
    }

    fn close_or_end(&mut self, why: Close<E>) -> Action<T, E> {
        if std::mem::replace(&mut self.settled, true) {
            return match why {
                Close::Stop => Action::EndStage,
                _ => Action::End,
            };
        }
        Action::Close(why)
    }

    fn close_or_raise(&mut self, why: Close<E>) -> Action<T, E> {
        if std::mem::replace(&mut self.settled, true) {
            return match why {
                Close::BadItem(err) | Close::Upstream(err) => Action::Raise(err),
                Close::Stop => Action::EndStage,
                Close::Requested => Action::End,
            };
        }
        Action::Close(why)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// Errors as strings; a context is recorded as `"error <- context"`.
    type Lc = Lifecycle<&'static str, String>;

    /// What one pull gave: an item's output and whether it fired a stop, or an error.
    type Pull = Result<(Option<&'static str>, bool), String>;

    /// Drives `lc` through `events` (one per `Pull`: `Some(item)` fed, `None` the end),
    /// closing with `close_fails`, and returns what the consumer saw.
    fn drive(
        lc: &mut Lc,
        pulls: &[Pull],
        close_fails: bool,
        stage_end: &[&'static str],
    ) -> Vec<String> {
        let contexts = RefCell::new(Vec::new());
        let mut seen = Vec::new();
        let mut pulls = pulls.iter();
        let mut step = lc.next_action();
        loop {
            step = match step {
                Action::Deliver(t) => {
                    seen.push(t.to_string());
                    lc.next_action()
                }
                Action::Raise(e) => {
                    seen.push(format!("raise {e}"));
                    break;
                }
                Action::End => break,
                Action::Pull => match pulls.next() {
                    Some(Ok((out, closing))) => lc.fed(*out, *closing),
                    Some(Err(e)) if e == "bad" => lc.refused(e.clone()),
                    Some(Err(e)) => lc.raised(e.clone(), false),
                    None => lc.exhausted(false),
                },
                Action::Close(why) => {
                    seen.push("close".to_string());
                    let failure = close_fails.then(|| "close failed".to_string());
                    let closed = lc.closed(why, failure, |e, c| {
                        contexts.borrow_mut().push(format!("{e} <- {c}"));
                    });
                    if let Some(r) = closed.report {
                        seen.push(format!("report {r}"));
                    }
                    closed.action
                }
                Action::EndStage => {
                    lc.owed(stage_end.iter().copied());
                    lc.next_action()
                }
            };
        }
        seen.extend(contexts.into_inner());
        seen
    }

    #[test]
    fn the_rules() {
        let ok = |o: Option<&'static str>| Ok((o, false));
        let stop = |o: Option<&'static str>| Ok((o, true));
        let err = |e: &str| Err(e.to_string());
        let cases: &[(&str, Vec<Pull>, bool, &[&str])] = &[
            ("a b end", vec![ok(Some("a")), ok(None), ok(Some("b"))], false, &["end"]),
            ("a close last end", vec![ok(Some("a")), stop(Some("last"))], false, &["end"]),
            (
                "a close last end raise close failed",
                vec![ok(Some("a")), stop(Some("last"))],
                true,
                &["end"],
            ),
            ("close raise bad", vec![err("bad")], false, &[]),
            ("close raise bad bad <- close failed", vec![err("bad")], true, &[]),
            ("a close raise boom", vec![ok(Some("a")), err("boom")], false, &[]),
            ("a close report close failed raise boom", vec![ok(Some("a")), err("boom")], true, &[]),
        ];
        for (want, pulls, fails, end) in cases {
            let mut lc = Lc::new();
            let seen = drive(&mut lc, pulls, *fails, end).join(" ");
            assert_eq!(seen, *want);
            assert!(lc.is_done() && lc.is_settled(), "{want}");
            assert!(matches!(lc.next_action(), Action::End));
        }
    }

    #[test]
    fn a_close_during_a_pull_drops_the_item_and_ends() {
        let mut lc = Lc::new();
        assert!(matches!(lc.next_action(), Action::Pull));
        let Action::Close(why) = lc.closed_during_pull() else { panic!() };
        let closed = lc.closed(why, Some("failed".into()), |_, _| panic!());
        assert!(matches!(closed.action, Action::End));
        assert_eq!(closed.report.as_deref(), Some("failed"));
        let mut lc = Lc::new();
        assert!(matches!(lc.raised("dropped".into(), true), Action::Close(Close::Requested)));
        assert!(matches!(lc.exhausted(true), Action::End), "closed once");
    }

    #[test]
    fn a_close_by_the_consumer_happens_once() {
        let mut lc = Lc::new();
        lc.owed(["x"]);
        assert!(lc.close());
        assert!(!lc.close());
        assert!(matches!(lc.next_action(), Action::End));
        let mut lc = Lc::new();
        assert!(matches!(lc.exhausted(false), Action::EndStage));
        assert!(!lc.close(), "ran out by itself: nothing to close");
    }

    #[test]
    fn an_owed_decoding_error_is_raised_first_with_the_close_failure_as_context() {
        let contexts = RefCell::new(Vec::new());
        let mut lc = Lc::new();
        lc.defer("decode".into(), |_, _| panic!());
        let Action::Close(why) = lc.fed(Some("cut"), true) else { panic!() };
        let closed =
            lc.closed(why, Some("close".into()), |e, c| contexts.borrow_mut().push((e.clone(), c)));
        assert!(matches!(closed.action, Action::EndStage));
        assert!(matches!(lc.next_action(), Action::Deliver("cut")));
        assert!(matches!(lc.next_action(), Action::Raise(e) if e == "decode"));
        assert_eq!(contexts.into_inner(), [("decode".to_string(), "close".to_string())]);
    }
}
