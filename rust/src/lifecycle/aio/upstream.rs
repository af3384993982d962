//! What the pulls of one async stream share, under its driver's lock.

use std::collections::VecDeque;

use super::super::{Action, Lifecycle};
use super::Todo;

/// What the pulls of one async stream share, under its driver's lock: the upstream, the
/// lifecycle's state, and the awaitable kept to serve the next pull. `O` is an object, `S` an
/// awaitable, `E` an error; `clone` arguments make a new reference to an object.
#[derive(Debug)]
pub struct Upstream<O, S, E> {
    /// The upstream iterator, until the stream ends.
    iterator: Option<O>,
    /// The object given, when it is not its own iterator (an SDK stream): closed too.
    source: Option<O>,
    /// `source` was closed already (by `aclose()` during a pull).
    closed_source: bool,
    /// Pulls started so far (to name a bad item's position).
    position: usize,
    /// The lifecycle's state.
    pub life: Lifecycle<O, E>,
    /// The awaitable of the last pull that delivered, kept to serve the next pull: one
    /// awaitable per item cost a third of what an async driver adds to its sync twin (about
    /// 400 of 630 instructions an event of `sse.awrap_openai`, callgrind). Finished, it refers
    /// to nothing, so it makes no cycle.
    spare: Option<S>,
}

impl<O, S, E> Default for Upstream<O, S, E> {
    fn default() -> Self {
        Upstream {
            iterator: None,
            source: None,
            closed_source: false,
            position: 0,
            life: Lifecycle::new(),
            spare: None,
        }
    }
}

impl<O, S, E> Upstream<O, S, E> {
    /// Sets the iterator to pull from, and the object given when it is not the iterator.
    pub fn start(&mut self, iterator: O, source: Option<O>) {
        self.iterator = Some(iterator);
        self.source = source;
    }

    /// The iterator to pull from next, and the position of the item it gives.
    #[inline]
    pub fn pull_target(&mut self, clone: impl FnOnce(&O) -> O) -> Option<(O, usize)> {
        let iterator = clone(self.iterator.as_ref()?);
        let position = self.position;
        self.position += 1;
        Some((iterator, position))
    }

    /// The start of a pull: the lifecycle's first action, or the iterator to pull from.
    /// `step` is the pull's awaitable, kept when the action delivers.
    #[allow(
        clippy::inline_always,
        reason = "every pull: left out of line with `Lifecycle::fed`, a chunk of `awrap` took 17 to 28 more instructions (callgrind)"
    )]
    #[inline(always)]
    pub fn begin(&mut self, clone: impl FnOnce(&O) -> O, step: impl FnOnce() -> S) -> Todo<O, E> {
        if self.life.wants_pull() {
            return match self.pull_target(clone) {
                Some((iterator, position)) => Todo::Pull(iterator, position),
                None => Todo::Do(Action::End),
            };
        }
        let action = self.life.next_action();
        Todo::Do(self.keep(action, step))
    }

    /// `action`, keeping the pull's awaitable `step` to serve the next pull when it delivers
    /// (in the same critical section as the decision, so a pull takes the lock once an item).
    #[inline]
    pub fn keep(&mut self, action: Action<O, E>, step: impl FnOnce() -> S) -> Action<O, E> {
        if matches!(action, Action::Deliver(_)) && self.spare.is_none() {
            self.spare = Some(step());
        }
        action
    }

    /// The awaitable kept to serve this pull, if any.
    pub fn take_spare(&mut self) -> Option<S> {
        self.spare.take()
    }

    /// What is left of the upstream to close (each object once), which the stream lets go of.
    pub fn take_upstream(&mut self) -> VecDeque<O> {
        let iterator = self.iterator.take();
        let source = self.source.take().filter(|_| !self.closed_source);
        iterator.into_iter().chain(source).collect()
    }

    /// The upstream ran out (see [`Lifecycle::exhausted`]): the action, and what the stream
    /// lets go of unclosed when it ran out by itself.
    pub fn exhausted(&mut self, close_requested: bool) -> (Action<O, E>, [Option<O>; 2]) {
        let action = self.life.exhausted(close_requested);
        let released = match action {
            Action::EndStage => [self.iterator.take(), self.source.take()],
            _ => [None, None],
        };
        (action, released)
    }

    /// `aclose()` while a pull runs: the stream ends where the pull returns; the object given
    /// (once) to close now, since its close ends the read the pull waits on.
    pub fn close_during_pull(&mut self, clone: impl FnOnce(&O) -> O) -> Option<O> {
        self.life.abandon();
        let source = self.source.as_ref().filter(|_| !self.closed_source).map(clone);
        self.closed_source |= source.is_some();
        source
    }

    /// `aclose()` with no pull running: what to close (nothing the second time).
    pub fn close(&mut self) -> VecDeque<O> {
        if self.life.close() {
            self.take_upstream()
        } else {
            VecDeque::new()
        }
    }

    /// Lets go of everything, for the collector: what the caller drops once it is unlocked.
    pub fn clear(&mut self) -> ([Option<O>; 2], Option<S>) {
        self.life.clear();
        ([self.iterator.take(), self.source.take()], self.spare.take())
    }

    /// Visits what the stream refers to (for a collector's walk).
    ///
    /// # Errors
    ///
    /// The first error of a visit.
    pub fn visit<R>(
        &self,
        mut object: impl FnMut(&O) -> Result<(), R>,
        spare: impl FnOnce(&S) -> Result<(), R>,
    ) -> Result<(), R> {
        let upstream = self.iterator.iter().chain(&self.source);
        upstream.chain(self.life.queued()).try_for_each(&mut object)?;
        self.spare.as_ref().map_or(Ok(()), spare)
    }
}
