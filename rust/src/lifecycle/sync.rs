//! One `__next__` of the sync lifecycle driver: the [`Lifecycle`]'s actions carried out by
//! calling, where the async driver ([`super::aio`]) awaits.
//!
//! A [`Driver`] holds what the stream's pulls share (the upstream iterator, the next item's
//! position, the lifecycle's state); what it cannot do itself (pull from the iterator, feed
//! the stage, close an object, report a failure nobody can be told of) it asks of a [`Host`].
//! The bindings implement the host over Python objects and the tests below over a scripted
//! fake, so the order of the calls is plain Rust checked without Python. The object given,
//! when it is not the iterator (an SDK stream), is the host's: a `close()` from another thread
//! reaches it while a pull holds the driver.

use super::{Action, Lifecycle};

/// What the sync driver needs done on its objects: `Obj` is an object (an item, an iterator),
/// `Err` an error.
pub trait Host {
    /// An object of the host's.
    type Obj;
    /// An error of the host's.
    type Err;

    /// The next item of `iterator`: `None` at its end.
    fn next(&mut self, iterator: &Self::Obj) -> Option<Result<Self::Obj, Self::Err>>;
    /// Whether the consumer asked for a close (from another thread, during a pull).
    fn close_requested(&self) -> bool;
    /// Feeds the item pulled at `position` to the stage: its output, and whether the stage is
    /// now closing (a stop fired). Output beyond one item is queued on `life`, and an error
    /// owed after a stop deferred there.
    ///
    /// # Errors
    ///
    /// The stage refused the item, or its output could not be made.
    #[allow(clippy::type_complexity, reason = "an output and a flag, or the refusal")]
    fn feed(
        &mut self,
        life: &mut Lifecycle<Self::Obj, Self::Err>,
        item: Self::Obj,
        position: usize,
    ) -> Result<(Option<Self::Obj>, bool), Self::Err>;
    /// Queues on `life` what the stage still owes once the upstream is done.
    ///
    /// # Errors
    ///
    /// The stage failed to end.
    fn end_stage(&mut self, life: &mut Lifecycle<Self::Obj, Self::Err>) -> Result<(), Self::Err>;
    /// The object given, when it is not the iterator, taken: it is closed, or let go of, once.
    fn take_source(&mut self) -> Option<Self::Obj>;
    /// Closes `object`.
    ///
    /// # Errors
    ///
    /// The close failed.
    fn close(&mut self, object: Self::Obj) -> Result<(), Self::Err>;
    /// Makes `context` the context of `err`.
    fn chain(&self, err: &Self::Err, context: Self::Err);
    /// Tells of a failure that nobody can be told of otherwise.
    fn report(&self, err: Self::Err);
}

/// The state a sync stream's pulls share.
#[derive(Debug)]
pub struct Driver<O, E> {
    /// The upstream iterator, until the stream ends.
    iterator: Option<O>,
    /// Items pulled so far (to name a bad item's position).
    position: usize,
    /// The lifecycle's state.
    pub life: Lifecycle<O, E>,
}

type ActionOf<H> = Action<<H as Host>::Obj, <H as Host>::Err>;

impl<O, E> Driver<O, E> {
    /// A stream over `iterator` that has not pulled yet.
    pub fn new(iterator: O) -> Self {
        Driver { iterator: Some(iterator), position: 0, life: Lifecycle::new() }
    }

    /// The iterator, until the stream lets go of it.
    #[inline]
    pub fn iterator(&self) -> Option<&O> {
        self.iterator.as_ref()
    }

    /// The position of the item pulled now; the next one's is one more.
    #[inline]
    pub fn take_position(&mut self) -> usize {
        self.position += 1;
        self.position - 1
    }

    /// Lets go of everything, for the collector: the iterator first (handed to `release`),
    /// then what the lifecycle holds.
    pub fn clear(&mut self, release: impl FnOnce(Option<O>)) {
        release(self.iterator.take());
        self.life.clear();
    }
}

impl<O, E> Driver<O, E> {
    /// A `__next__`: the lifecycle's next action carried out, and then, if a close was asked
    /// for meanwhile (from another thread, while the item was fed), the stream ended.
    ///
    /// # Errors
    ///
    /// What the consumer is to see raised.
    pub fn next<H: Host<Obj = O, Err = E>>(&mut self, host: &mut H) -> Result<Option<O>, E> {
        let action = self.life.next_action();
        let result = self.run(host, action);
        self.settle(host, result)
    }

    /// The end of a `__next__` whose result is `result`: a close asked for while it ran ends
    /// the stream (the consumer wants no more output), and the iterator, idle again, is closed.
    ///
    /// # Errors
    ///
    /// What the consumer is to see raised.
    #[inline]
    pub fn settle<H: Host<Obj = O, Err = E>>(
        &mut self,
        host: &mut H,
        result: Result<Option<O>, E>,
    ) -> Result<Option<O>, E> {
        if !host.close_requested() || self.life.is_settled() {
            return result;
        }
        let action = self.life.closed_during_pull();
        self.run(host, action)
    }

    /// Carries out the lifecycle's actions from `action` until one hands the consumer an item,
    /// an error or the end.
    ///
    /// # Errors
    ///
    /// What the consumer is to see raised.
    pub fn run<H: Host<Obj = O, Err = E>>(
        &mut self,
        host: &mut H,
        mut action: ActionOf<H>,
    ) -> Result<Option<O>, E> {
        loop {
            action = match action {
                Action::Deliver(out) => return Ok(Some(out)),
                Action::Raise(err) => return Err(err),
                Action::End => return Ok(None),
                Action::Pull => self.pulled(host, None),
                Action::Close(why) => {
                    let failure = self.close_upstream(host).err();
                    let closed = self.life.closed(why, failure, |e, c| host.chain(e, c));
                    if let Some(failure) = closed.report {
                        host.report(failure);
                    }
                    closed.action
                }
                Action::EndStage => {
                    host.end_stage(&mut self.life)?;
                    self.life.next_action()
                }
            };
        }
    }

    /// One pull told to the lifecycle: what `pulled` holds (what a caller's own pull gave), or
    /// else a pull from the iterator.
    // Three cases, each with its meaning: no pull given (`None`), the caller's pull ran out
    // (`Some(None)`), or it gave an item or an error.
    #[allow(clippy::option_option)]
    pub fn pulled<H: Host<Obj = O, Err = E>>(
        &mut self,
        host: &mut H,
        pulled: Option<Option<Result<O, E>>>,
    ) -> ActionOf<H> {
        let Some(iterator) = &self.iterator else { return Action::End };
        let result = pulled.unwrap_or_else(|| host.next(iterator));
        let close_requested = host.close_requested();
        let item = match result {
            Some(Ok(item)) => item,
            None => {
                let action = self.life.exhausted(close_requested);
                if matches!(action, Action::EndStage) {
                    // Ran out by itself: nothing to close.
                    self.iterator = None;
                    drop(host.take_source());
                }
                return action;
            }
            Some(Err(err)) => return self.life.raised(err, close_requested),
        };
        if close_requested {
            return self.life.closed_during_pull();
        }
        let position = self.take_position();
        match host.feed(&mut self.life, item, position) {
            Ok((out, closing)) => self.life.fed(out, closing),
            Err(err) => self.life.refused(err),
        }
    }

    /// The consumer closes the stream while no pull runs: the upstream is closed, unless it
    /// was already (a later call does nothing).
    ///
    /// # Errors
    ///
    /// The first failure of the closes.
    pub fn close<H: Host<Obj = O, Err = E>>(&mut self, host: &mut H) -> Result<(), E> {
        if self.life.close() {
            self.close_upstream(host)
        } else {
            Ok(())
        }
    }

    /// [`Driver::close`] where nobody can be told of a failure (a finalizer, or a close asked
    /// for during a pull carried out after it).
    pub fn close_quietly<H: Host<Obj = O, Err = E>>(&mut self, host: &mut H) {
        if let Err(err) = self.close(host) {
            host.report(err);
        }
    }

    /// Closes what is still open of the upstream: the iterator and the object given, both
    /// even if one fails; the first failure is returned.
    fn close_upstream<H: Host<Obj = O, Err = E>>(&mut self, host: &mut H) -> Result<(), E> {
        let mut result = Ok(());
        for object in self.iterator.take().into_iter().chain(host.take_source()) {
            let closed = host.close(object);
            if result.is_ok() {
                result = closed;
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use super::*;

    /// A scripted host: objects and errors are strings. The upstream gives `items` in turn (an
    /// item `"raise x"` raises `x`); the stage fires a stop on an item starting with `stop`,
    /// refuses one starting with `bad`, and echoes the rest; closing `fail:x` fails with `x`.
    /// Every call is logged.
    #[derive(Default)]
    struct Fake {
        items: VecDeque<&'static str>,
        source: Option<String>,
        close_requested: bool,
        /// What the stage owes at its end.
        owed: Vec<&'static str>,
        /// Whether a close is asked for once this many items were fed.
        request_after: Option<usize>,
        fed: usize,
        log: RefCell<Vec<String>>,
    }

    type S = String;

    impl Host for Fake {
        type Obj = S;
        type Err = S;

        fn next(&mut self, iterator: &S) -> Option<Result<S, S>> {
            self.log.borrow_mut().push(format!("next {iterator}"));
            let item = self.items.pop_front()?;
            Some(match item.strip_prefix("raise ") {
                Some(err) => Err(err.to_owned()),
                None => Ok(item.to_owned()),
            })
        }

        fn close_requested(&self) -> bool {
            self.close_requested
        }

        fn feed(
            &mut self,
            _life: &mut Lifecycle<S, S>,
            item: S,
            position: usize,
        ) -> Result<(Option<S>, bool), S> {
            self.log.borrow_mut().push(format!("feed {item}@{position}"));
            self.fed += 1;
            if self.request_after == Some(self.fed) {
                self.close_requested = true;
            }
            if item.starts_with("bad") {
                return Err(format!("refused {item}"));
            }
            Ok((Some(item.clone()), item.starts_with("stop")))
        }

        fn end_stage(&mut self, life: &mut Lifecycle<S, S>) -> Result<(), S> {
            self.log.borrow_mut().push("end".to_owned());
            life.owed(self.owed.iter().map(|s| (*s).to_owned()));
            Ok(())
        }

        fn take_source(&mut self) -> Option<S> {
            self.source.take()
        }

        fn close(&mut self, object: S) -> Result<(), S> {
            self.log.borrow_mut().push(format!("close {object}"));
            match object.strip_prefix("fail:") {
                Some(err) => Err(err.to_owned()),
                None => Ok(()),
            }
        }

        fn chain(&self, err: &S, context: S) {
            self.log.borrow_mut().push(format!("chain {err} <- {context}"));
        }

        fn report(&self, err: S) {
            self.log.borrow_mut().push(format!("report {err}"));
        }
    }

    /// Pulls until the end or an error; what the consumer saw, then every call made.
    fn pull_all(iterator: &str, fake: Fake) -> (Vec<String>, Vec<String>) {
        let mut host = fake;
        let mut driver = Driver::new(iterator.to_owned());
        let mut seen = Vec::new();
        loop {
            match driver.next(&mut host) {
                Ok(Some(out)) => seen.push(out),
                Ok(None) => break,
                Err(err) => {
                    seen.push(format!("raise {err}"));
                    break;
                }
            }
        }
        // Pulls after the end stay ended and call nothing.
        assert!(matches!(driver.next(&mut host), Ok(None)));
        (seen, host.log.into_inner())
    }

    fn fake(items: &[&'static str], source: Option<&str>) -> Fake {
        Fake {
            items: items.iter().copied().collect(),
            source: source.map(Into::into),
            ..Fake::default()
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn table() {
        // (upstream items, source, what the stage owes, close asked for after this many
        // items, iterator; what the consumer sees; the calls made, in order)
        #[allow(clippy::type_complexity, reason = "a table")]
        let cases: &[(
            &[&str],
            Option<&str>,
            &[&str],
            Option<usize>,
            &str,
            &[&str],
            &[&str],
        )] = &[
            // Ran out by itself: nothing closed, the source let go of, the stage's end owed.
            (
                &["a", "b"],
                Some("src"),
                &["tail"],
                None,
                "it",
                &["a", "b", "tail"],
                &["next it", "feed a@0", "next it", "feed b@1", "next it", "end"],
            ),
            // A stop: the upstream closed at once (iterator, then source), the last piece, the
            // stage's end.
            (
                &["a", "stop", "c"],
                Some("src"),
                &["tail"],
                None,
                "it",
                &["a", "stop", "tail"],
                &["next it", "feed a@0", "next it", "feed stop@1", "close it", "close src", "end"],
            ),
            // A failing close after a stop is raised after the last output.
            (
                &["stop"],
                Some("fail:x"),
                &[],
                None,
                "it",
                &["stop", "raise x"],
                &["next it", "feed stop@0", "close it", "close fail:x", "end"],
            ),
            // Both fail: the first is raised, the second is its context.
            (
                &["stop"],
                Some("fail:y"),
                &[],
                None,
                "fail:x",
                &["stop", "raise x"],
                &["next fail:x", "feed stop@0", "close fail:x", "close fail:y", "end"],
            ),
            // A bad item: its error, with the failing close as its context.
            (
                &["bad"],
                None,
                &[],
                None,
                "fail:x",
                &["raise refused bad"],
                &["next fail:x", "feed bad@0", "close fail:x", "chain refused bad <- x"],
            ),
            // An upstream error: raised unchanged, a failing close reported.
            (
                &["a", "raise boom"],
                None,
                &[],
                None,
                "fail:x",
                &["a", "raise boom"],
                &["next fail:x", "feed a@0", "next fail:x", "close fail:x", "report x"],
            ),
            // A close asked for while an item was fed: that output is not delivered, the
            // upstream is closed, the stream ends.
            (
                &["a", "b"],
                Some("src"),
                &["tail"],
                Some(1),
                "it",
                &[],
                &["next it", "feed a@0", "close it", "close src"],
            ),
        ];
        for &(items, source, owed, request, it, seen, calls) in cases {
            let mut f = fake(items, source);
            f.owed = owed.to_vec();
            f.request_after = request;
            let (got_seen, got_calls) = pull_all(it, f);
            let context = format!("{items:?} {source:?} {it}");
            assert_eq!(got_seen, strings(seen), "{context}");
            assert_eq!(got_calls, strings(calls), "{context}");
        }
    }

    #[test]
    fn a_close_asked_for_during_a_pull_ends_the_stream_without_the_item() {
        let mut host = fake(&["a"], Some("src"));
        host.close_requested = true;
        let mut driver = Driver::new("it".to_owned());
        assert!(matches!(driver.next(&mut host), Ok(None)));
        assert_eq!(*host.log.borrow(), strings(&["next it", "close it", "close src"]));
        // The iterator ran out while the close was asked for: the stream ends, no stage end.
        let mut host = fake(&[], Some("src"));
        host.close_requested = true;
        let mut driver = Driver::new("it".to_owned());
        assert!(matches!(driver.next(&mut host), Ok(None)));
        assert_eq!(*host.log.borrow(), strings(&["next it", "close it", "close src"]));
    }

    #[test]
    fn close_closes_once_and_a_finished_stream_closes_nothing() {
        let mut host = fake(&["a"], Some("fail:x"));
        let mut driver = Driver::new("it".to_owned());
        assert_eq!(driver.close(&mut host), Err("x".to_owned()));
        assert_eq!(driver.close(&mut host), Ok(()));
        assert!(matches!(driver.next(&mut host), Ok(None)));
        assert_eq!(*host.log.borrow(), strings(&["close it", "close fail:x"]));
        // Ran out by itself: nothing left to close.
        let mut host = fake(&[], Some("src"));
        let mut driver = Driver::new("it".to_owned());
        assert!(matches!(driver.next(&mut host), Ok(None)));
        driver.close_quietly(&mut host);
        assert_eq!(*host.log.borrow(), strings(&["next it", "end"]));
        // ... and the object given was let go of then, not kept until the stream goes.
        assert_eq!(host.source, None);
    }

    #[test]
    fn a_pull_handed_in_is_told_as_the_iterator_s() {
        let mut host = fake(&[], None);
        let mut driver = Driver::new("it".to_owned());
        assert_eq!(driver.take_position(), 0);
        let action = driver.pulled(&mut host, Some(Some(Ok("x".to_owned()))));
        assert!(matches!(action, Action::Deliver(ref s) if s == "x"));
        assert_eq!(*host.log.borrow(), strings(&["feed x@1"]));
        let mut released = None;
        driver.clear(|it| released = it);
        assert_eq!(released, Some("it".to_owned()));
        assert!(matches!(driver.pulled(&mut host, None), Action::End));
    }
}
