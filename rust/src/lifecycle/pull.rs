//! One pull of the async lifecycle driver, as a state machine.
//!
//! `__anext__` (and `aclose()`) return an awaitable with a coroutine's protocol; it is in one
//! of the [`Step`]s, and each `send` or `throw` into it runs [`resume`] until the pull suspends
//! (it hands on what the awaitable it drives yielded to the event loop), delivers or raises.
//! Where the sync driver calls the upstream or a `close()`, a pull awaits: it drives the
//! upstream's awaitable, or each object's close in turn, from step to step. The rules of the
//! stream itself are the [`Lifecycle`]'s, which a pull consults under the stream's lock.
//!
//! What the machine cannot do itself (send into an awaitable, start a close, feed the stage,
//! lock the stream's state) it asks of a [`Host`]. The bindings implement it over Python objects and
//! the tests below over a scripted fake, so that the rules of a pull (a coroutine's protocol,
//! the order of the closes, the first failure kept) are plain Rust checked without Python. The
//! host is generic, not a trait object: a pull of `awrap` is one monomorphized loop with no
//! indirect call.

use std::collections::VecDeque;
use std::ops::DerefMut;

use super::{Action, Close, Lifecycle};

/// What is sent into an awaitable.
#[derive(Debug)]
pub enum Input<O, E> {
    /// A value (`None` to start it).
    Send(O),
    /// An exception, raised where it waits.
    Throw(E),
}

/// What a driven awaitable did.
#[derive(Debug)]
pub enum Sent<O> {
    /// Suspended, handing this to the event loop.
    Yield(O),
    /// Finished with this value.
    Return(O),
}

/// A misuse of an awaitable, which its host turns into the exception a coroutine raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misuse {
    /// Sent to after it finished (`RuntimeError`).
    Reused,
    /// Started with a value other than `None` (`TypeError`).
    StartValue,
    /// Its stream is being pulled already (`RuntimeError`).
    Concurrent,
    /// Closed, it went on instead of ending (`RuntimeError`).
    IgnoredExit,
}

/// What a closing awaitable does with a failure once every object is closed.
#[derive(Debug)]
pub enum CloseMode<D> {
    /// Raises the first.
    Raise,
    /// Hands it to the stream's lifecycle as the failure of the close after a stop (raised
    /// after the last output).
    Defer(D),
    /// Tells the event loop's exception handler, with this message.
    Report(&'static str),
}

/// Closing objects one by one, each close awaited to its end; all are closed even if one fails,
/// and the first failure is kept.
#[derive(Debug)]
pub struct Closer<D, O, E> {
    objects: VecDeque<O>,
    /// The close being awaited.
    current: Option<O>,
    first: Option<E>,
    mode: CloseMode<D>,
}

/// Where a pull is.
#[derive(Debug)]
pub enum Step<D, O, E> {
    /// Created, not yet sent to: a pull of this driver.
    Start(D),
    /// Driving the upstream's awaitable for the item at this position.
    Pulling(D, O, usize),
    /// Driving the close the lifecycle asked for (boxed, as `Closer`).
    Closing(D, O, Box<Close<E>>),
    /// Not a pull: closing objects (`aclose()`, or a close the lifecycle asked for). Boxed,
    /// so that a pull's step, moved in and out of its awaitable on every send, stays small.
    Closer(Box<Closer<D, O, E>>),
    /// Returned or raised. It refers to nothing, not even its driver.
    Done,
}

/// What a pull does next: a lifecycle action, or a pull from this iterator for the item at
/// this position.
#[derive(Debug)]
pub enum Todo<O, E> {
    /// Carry out this action.
    Do(Action<O, E>),
    /// Pull the next item.
    Pull(O, usize),
}

/// What a pull needs done on its objects: `D` is the stream's driver, `O` an object (an item,
/// an awaitable, a value), `E` an error.
pub trait Host {
    /// The stream's driver.
    type Driver;
    /// An object of the host's, as a pull drives it.
    type Obj;
    /// An object as the stream's state holds it.
    type Held;
    /// An error of the host's.
    type Err;
    /// The pull's awaitable, as the stream's state keeps it.
    type Spare;
    /// The stream's state, locked.
    type State<'a>: DerefMut<Target = Upstream<Self::Held, Self::Spare, Self::Err>>
    where
        Self: 'a;

    /// One `send` or `throw` into an awaitable's iterator, by the rules of `await`.
    fn send(
        &self,
        it: &Self::Obj,
        input: Input<Self::Obj, Self::Err>,
    ) -> Result<Sent<Self::Obj>, Self::Err>;
    /// The value `None`.
    fn none(&self) -> Self::Obj;
    /// Whether `value` is `None`.
    fn is_none(&self, value: &Self::Obj) -> bool;
    /// `err` made concrete, so that its type can be told.
    fn made(&self, err: Self::Err) -> Self::Err;
    /// Whether `err` is an ordinary failure (an `Exception`), not one that must propagate.
    fn is_exception(&self, err: &Self::Err) -> bool;
    /// Whether `err` is a cancellation of the pull.
    fn is_cancellation(&self, err: &Self::Err) -> bool;
    /// Whether `err`, raised by a closed awaitable, is the proper end of its close.
    fn ends_close(&self, err: &Self::Err) -> bool;
    /// The exception for a misuse.
    fn misuse(&self, misuse: Misuse) -> Self::Err;
    /// The end of the stream (`StopAsyncIteration`).
    fn end_of_stream(&self) -> Self::Err;
    /// Closes an awaitable left waiting.
    fn close_awaitable(&self, it: &Self::Obj) -> Result<(), Self::Err>;
    /// Starts closing `object`: the awaitable to drive, or `None` when it is closed already.
    fn start_close_of(&self, object: &Self::Obj) -> Result<Option<Self::Obj>, Self::Err>;
    /// Tells of a failed close that nobody can be told of otherwise.
    fn report(&self, message: &'static str, err: Self::Err);

    /// Marks the stream as being pulled: `false` when it was already.
    fn claim(&self, driver: &Self::Driver) -> bool;
    /// Marks the pull over.
    fn release(&self, driver: &Self::Driver);
    /// Whether `aclose()` was called while the pull ran.
    fn close_requested(&self, driver: &Self::Driver) -> bool;
    /// The awaitable of `iterator.__anext__()`, as an iterator to drive.
    fn anext(&self, iterator: &Self::Obj) -> Result<Self::Obj, Self::Err>;
    /// Feeds the item pulled at `position` to the stage: its output, and whether the stage is
    /// now closing (a stop fired). Output beyond one item the host queues on the stream's
    /// lifecycle itself ([`Lifecycle::owed`]), before it returns.
    fn push(
        &self,
        driver: &Self::Driver,
        item: &Self::Obj,
        position: usize,
    ) -> Result<(Option<Self::Held>, bool), Self::Err>;
    /// The error a closing stage owes, to raise after the last output (the built-in filter's
    /// decoding error of contract §9.9), taken.
    fn owed(&self, driver: &Self::Driver) -> Result<Option<Self::Err>, Self::Err>;
    /// What the stage still owes once the upstream is done, and an error to raise after it.
    #[allow(clippy::type_complexity, reason = "the output, and the error owed after it")]
    fn stage_end(
        &self,
        driver: &Self::Driver,
    ) -> Result<(Vec<Self::Held>, Option<Self::Err>), Self::Err>;
    /// Whether `err` is the upstream's end (`StopAsyncIteration`).
    fn is_end(&self, err: &Self::Err) -> bool;
    /// Makes `context` the context of `err`.
    fn chain(&self, err: &Self::Err, context: Self::Err);
    /// The awaitable iterator closing `objects`, or after a stop (`after_stop`) closing them
    /// apart from the pull, so that a cancellation of the pull leaves the close to complete.
    fn start_close(
        &self,
        driver: &Self::Driver,
        objects: VecDeque<Self::Held>,
        after_stop: bool,
    ) -> Result<Self::Obj, Self::Err>;

    /// The stream's state, locked. No call of the host's that can run the host's own code (a
    /// send, a push, a close) is made while it is held.
    fn state<'a>(&'a self, driver: &'a Self::Driver) -> Result<Self::State<'a>, Self::Err>;
    /// An object the stream's state held, as a pull drives it (and lets go of it).
    fn bind(&self, object: Self::Held) -> Self::Obj;
    /// A new reference to an object the stream's state holds.
    fn copy(&self, object: &Self::Held) -> Self::Held;
    /// The pull's awaitable, kept as the stream's spare when the pull delivers.
    fn spare(&self) -> Self::Spare;
}

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

/// A step's objects, as the host names them.
type StepOf<H> = Step<<H as Host>::Driver, <H as Host>::Obj, <H as Host>::Err>;
type SentOf<H> = Result<Sent<<H as Host>::Obj>, <H as Host>::Err>;
type ResumedOf<H> = Resumed<<H as Host>::Driver, <H as Host>::Obj, <H as Host>::Err>;

/// What one step of a pull leaves.
#[derive(Debug)]
pub struct Resumed<D, O, E> {
    /// The pull's next state.
    pub step: Step<D, O, E>,
    /// What it yields to the event loop, returns, or raises.
    pub sent: Result<Sent<O>, E>,
    /// The driver of a pull that ended (delivered or raised): the caller puts `step` back,
    /// then releases it ([`Host::release`]).
    pub ended: Option<D>,
}

impl<D, O, E> Resumed<D, O, E> {
    fn at(step: Step<D, O, E>, sent: Result<Sent<O>, E>) -> Self {
        Resumed { step, sent, ended: None }
    }

    fn ended(driver: D, sent: Result<Sent<O>, E>) -> Self {
        Resumed { step: Step::Done, sent, ended: Some(driver) }
    }
}

impl<D, O, E> Closer<D, O, E> {
    /// Closing `objects` in order.
    pub fn new(objects: VecDeque<O>, mode: CloseMode<D>) -> Self {
        Closer { objects, current: None, first: None, mode }
    }

    fn failed<H: Host<Err = E>>(&mut self, host: &H, err: E) {
        if self.first.is_none() {
            self.first = Some(host.made(err));
        }
    }

    /// Runs the closes from `input` until one suspends (`Yield`) or all are done.
    fn resume<H: Host<Driver = D, Obj = O, Err = E>>(
        &mut self,
        host: &H,
        input: Input<O, E>,
    ) -> Result<Sent<O>, E> {
        let mut input = Some(input);
        loop {
            if let Some(it) = self.current.take() {
                let input = input.take().unwrap_or_else(|| Input::Send(host.none()));
                match host.send(&it, input) {
                    Ok(Sent::Yield(value)) => {
                        self.current = Some(it);
                        return Ok(Sent::Yield(value));
                    }
                    Ok(Sent::Return(_)) => {}
                    Err(err) => self.failed(host, err),
                }
            } else if let Some(Input::Throw(err)) = input.take() {
                self.failed(host, err);
            }
            let Some(object) = self.objects.pop_front() else { return self.finish(host) };
            match host.start_close_of(&object) {
                Ok(it) => self.current = it,
                Err(err) => self.failed(host, err),
            }
        }
    }

    fn finish<H: Host<Driver = D, Obj = O, Err = E>>(&mut self, host: &H) -> Result<Sent<O>, E> {
        let Some(err) = self.first.take() else { return Ok(Sent::Return(host.none())) };
        if !host.is_exception(&err) {
            return Err(err);
        }
        match &self.mode {
            CloseMode::Raise => return Err(err),
            // The lifecycle's rule for a failing close after a stop (deferred past the last
            // output). Its next action, the stage's end, is the pull's: the pull awaiting this
            // close carries it out, or did already when it was cancelled.
            CloseMode::Defer(driver) => drop(closed(host, driver, Close::Stop, Some(err))),
            CloseMode::Report(message) => host.report(message, err),
        }
        Ok(Sent::Return(host.none()))
    }
}

impl<D, O, E> Step<D, O, E> {
    /// The same step with its driver and objects converted (the bindings keep a step's
    /// objects as owned references between steps, and drive it over borrowed ones).
    #[inline]
    pub fn map<D2, O2>(self, d: impl Fn(D) -> D2, o: impl Fn(O) -> O2) -> Step<D2, O2, E> {
        match self {
            Step::Start(driver) => Step::Start(d(driver)),
            Step::Pulling(driver, it, position) => Step::Pulling(d(driver), o(it), position),
            Step::Closing(driver, it, why) => Step::Closing(d(driver), o(it), why),
            Step::Closer(closer) => Step::Closer(Box::new(Closer {
                objects: closer.objects.into_iter().map(&o).collect(),
                current: closer.current.map(&o),
                first: closer.first,
                mode: match closer.mode {
                    CloseMode::Raise => CloseMode::Raise,
                    CloseMode::Defer(driver) => CloseMode::Defer(d(driver)),
                    CloseMode::Report(message) => CloseMode::Report(message),
                },
            })),
            Step::Done => Step::Done,
        }
    }

    /// Whether the step waits on an awaitable (a finalizer must close it).
    pub fn is_suspended(&self) -> bool {
        match self {
            Step::Pulling(..) | Step::Closing(..) => true,
            Step::Closer(closer) => closer.current.is_some(),
            Step::Start(_) | Step::Done => false,
        }
    }

    /// The driver whose pull this is, while it runs.
    pub fn running_driver(&self) -> Option<&D> {
        match self {
            Step::Pulling(driver, ..) | Step::Closing(driver, ..) => Some(driver),
            _ => None,
        }
    }

    /// Visits what the step refers to (for a collector's walk).
    ///
    /// # Errors
    ///
    /// The first error of a visit.
    pub fn visit<R>(
        &self,
        mut driver: impl FnMut(&D) -> Result<(), R>,
        mut object: impl FnMut(&O) -> Result<(), R>,
    ) -> Result<(), R> {
        match self {
            Step::Start(d) => driver(d),
            Step::Pulling(d, o, _) | Step::Closing(d, o, _) => {
                driver(d)?;
                object(o)
            }
            Step::Closer(closer) => {
                closer.current.iter().chain(&closer.objects).try_for_each(&mut object)?;
                match &closer.mode {
                    CloseMode::Defer(d) => driver(d),
                    _ => Ok(()),
                }
            }
            Step::Done => Ok(()),
        }
    }
}

/// One step of a pull: the state it leaves, what it yields to the event loop or returns, and
/// the driver to release when the pull ended.
#[allow(
    clippy::inline_always,
    reason = "once a send into a pull, into its one caller: out of line, 18 instructions more an `awrap` chunk (702 against 684 in the native module, callgrind)"
)]
#[inline(always)]
pub fn resume<H: Host>(host: &H, step: StepOf<H>, input: Input<H::Obj, H::Err>) -> ResumedOf<H> {
    let (driver, todo) = match step {
        Step::Done => {
            let err = match input {
                Input::Send(_) => host.misuse(Misuse::Reused),
                Input::Throw(err) => err,
            };
            return Resumed::at(Step::Done, Err(err));
        }
        Step::Closer(mut closer) => {
            let sent = closer.resume(host, input);
            let next =
                if matches!(sent, Ok(Sent::Yield(_))) { Step::Closer(closer) } else { Step::Done };
            return Resumed::at(next, sent);
        }
        Step::Start(driver) => match input {
            Input::Throw(err) => return Resumed::at(Step::Done, Err(err)),
            Input::Send(value) if !host.is_none(&value) => {
                return Resumed::at(Step::Start(driver), Err(host.misuse(Misuse::StartValue)));
            }
            Input::Send(_) => {
                if !host.claim(&driver) {
                    return Resumed::at(Step::Done, Err(host.misuse(Misuse::Concurrent)));
                }
                let todo = begin(host, &driver);
                (driver, todo)
            }
        },
        Step::Pulling(driver, it, position) => {
            let action = match host.send(&it, input) {
                Ok(Sent::Yield(value)) => {
                    return Resumed::at(
                        Step::Pulling(driver, it, position),
                        Ok(Sent::Yield(value)),
                    );
                }
                Ok(Sent::Return(item)) => feed(host, &driver, &item, position),
                Err(err) => upstream_raised(host, &driver, err),
            };
            (driver, Todo::Do(action))
        }
        Step::Closing(driver, it, why) => {
            let action = match host.send(&it, input) {
                Ok(Sent::Yield(value)) => {
                    return Resumed::at(Step::Closing(driver, it, why), Ok(Sent::Yield(value)));
                }
                Ok(Sent::Return(_)) => closed(host, &driver, *why, None),
                Err(err) => match close_failed(host, &driver, *why, err) {
                    Ok(action) => action,
                    Err(err) => {
                        // Released before the close it awaited is let go of.
                        host.release(&driver);
                        return Resumed::at(Step::Done, Err(err));
                    }
                },
            };
            (driver, Todo::Do(action))
        }
    };
    advance(host, driver, todo)
}

/// Carries out the lifecycle's actions from `todo` until the pull suspends, delivers or raises.
#[inline]
fn advance<H: Host>(host: &H, driver: H::Driver, mut todo: Todo<H::Obj, H::Err>) -> ResumedOf<H> {
    let end = Resumed::ended;
    loop {
        let action = match todo {
            Todo::Pull(iterator, position) => {
                let pulled = host
                    .anext(&iterator)
                    .and_then(|it| Ok((host.send(&it, Input::Send(host.none()))?, it)));
                match pulled {
                    Ok((Sent::Yield(value), it)) => {
                        let step = Step::Pulling(driver, it, position);
                        return Resumed::at(step, Ok(Sent::Yield(value)));
                    }
                    Ok((Sent::Return(item), _)) => feed(host, &driver, &item, position),
                    Err(err) => upstream_raised(host, &driver, err),
                }
            }
            Todo::Do(action) => action,
        };
        todo = match action {
            Action::Deliver(out) => return end(driver, Ok(Sent::Return(out))),
            Action::Raise(err) => return end(driver, Err(err)),
            Action::End => return end(driver, Err(host.end_of_stream())),
            Action::Pull => match pull_target(host, &driver) {
                Ok(Some((iterator, position))) => Todo::Pull(iterator, position),
                Ok(None) => return end(driver, Err(host.end_of_stream())),
                Err(err) => return end(driver, Err(err)),
            },
            Action::Close(why) => {
                let it = match start_close(host, &driver, &why) {
                    Ok(it) => it,
                    Err(err) => return end(driver, Err(err)),
                };
                match host.send(&it, Input::Send(host.none())) {
                    Ok(Sent::Yield(value)) => {
                        let step = Step::Closing(driver, it, Box::new(why));
                        return Resumed::at(step, Ok(Sent::Yield(value)));
                    }
                    Ok(Sent::Return(_)) => Todo::Do(closed(host, &driver, why, None)),
                    Err(err) => match close_failed(host, &driver, why, err) {
                        Ok(action) => Todo::Do(action),
                        Err(err) => return end(driver, Err(err)),
                    },
                }
            }
            Action::EndStage => match end_stage(host, &driver) {
                Ok(()) => Todo::Do(with_life(host, &driver, Lifecycle::next_action)),
                Err(err) => return end(driver, Err(err)),
            },
        };
    }
}

/// A close the lifecycle asked for raised `err`: a cancellation of the pull while a stop's
/// close runs (it goes on in its task; what the stop decided stays queued), a failure to
/// close, or something that is no `Exception`, which propagates.
fn close_failed<H: Host>(
    host: &H,
    driver: &H::Driver,
    why: Close<H::Err>,
    err: H::Err,
) -> Result<Action<H::Obj, H::Err>, H::Err> {
    let err = host.made(err);
    if matches!(why, Close::Stop) && host.is_cancellation(&err) {
        end_stage(host, driver)?;
        return Err(err);
    }
    if !host.is_exception(&err) {
        return Err(err);
    }
    Ok(closed(host, driver, why, Some(err)))
}

/// `f` of the stream's lifecycle, under its lock; a delivering pull's awaitable is kept as the
/// stream's spare.
#[allow(
    clippy::inline_always,
    reason = "every item of a pull: out of line, about 50 instructions more an `awrap` chunk (callgrind)"
)]
#[inline(always)]
fn with_life<H: Host>(
    host: &H,
    driver: &H::Driver,
    f: impl FnOnce(&mut Lifecycle<H::Held, H::Err>) -> Action<H::Held, H::Err>,
) -> Action<H::Obj, H::Err> {
    let action = match host.state(driver) {
        Ok(mut st) => {
            let action = f(&mut st.life);
            st.keep(action, || host.spare())
        }
        Err(err) => return Action::Raise(err),
    };
    action.map(|out| host.bind(out))
}

/// The start of a pull: the lifecycle's first action, or the iterator to pull from.
#[allow(
    clippy::inline_always,
    reason = "every pull: left out of line with `Lifecycle::fed`, a chunk of `awrap` took 17 to 28 more instructions (callgrind)"
)]
#[inline(always)]
fn begin<H: Host>(host: &H, driver: &H::Driver) -> Todo<H::Obj, H::Err> {
    let todo = match host.state(driver) {
        Ok(mut st) => st.begin(|it| host.copy(it), || host.spare()),
        Err(err) => return Todo::Do(Action::Raise(err)),
    };
    match todo {
        Todo::Do(action) => Todo::Do(action.map(|out| host.bind(out))),
        Todo::Pull(iterator, position) => Todo::Pull(host.bind(iterator), position),
    }
}

/// Feeds the item pulled at `position` to the stage: what the lifecycle does next. An item
/// that arrives after `aclose()` was called is not delivered.
#[allow(
    clippy::inline_always,
    reason = "every item of a pull: out of line, a call of about 10 instructions more (callgrind)"
)]
#[inline(always)]
fn feed<H: Host>(
    host: &H,
    driver: &H::Driver,
    item: &H::Obj,
    position: usize,
) -> Action<H::Obj, H::Err> {
    if host.close_requested(driver) {
        return with_life(host, driver, Lifecycle::closed_during_pull);
    }
    let (out, closing, owed) = match host.push(driver, item, position) {
        Ok((out, false)) => (out, false, None),
        Ok((out, true)) => match host.owed(driver) {
            Ok(owed) => (out, true, owed),
            Err(err) => {
                // Let go of as the pull drives objects (see `Host::bind`).
                drop(out.map(|o| host.bind(o)));
                return with_life(host, driver, |life| life.refused(err));
            }
        },
        Err(err) => return with_life(host, driver, |life| life.refused(err)),
    };
    // Written out, not through `with_life`: its closure was left out of line (about 40
    // instructions an `awrap` chunk, callgrind).
    let action = match host.state(driver) {
        Ok(mut st) => {
            if let Some(err) = owed {
                st.life.defer(err, |e, c| host.chain(e, c));
            }
            let action = st.life.fed(out, closing);
            st.keep(action, || host.spare())
        }
        Err(err) => return Action::Raise(err),
    };
    action.map(|out| host.bind(out))
}

/// The upstream's `__anext__` or its awaitable raised `err`: its end, or an error.
fn upstream_raised<H: Host>(host: &H, driver: &H::Driver, err: H::Err) -> Action<H::Obj, H::Err> {
    let err = host.made(err);
    let close_requested = host.close_requested(driver);
    if !host.is_end(&err) {
        return with_life(host, driver, |life| life.raised(err, close_requested));
    }
    let (action, released) = match host.state(driver) {
        // Ran out by itself: nothing to close.
        Ok(mut st) => st.exhausted(close_requested),
        Err(err) => return Action::Raise(err),
    };
    for object in released.into_iter().flatten() {
        drop(host.bind(object));
    }
    action.map(|out| host.bind(out))
}

/// The iterator to pull from next and the item's position, or `None` once it is gone.
fn pull_target<H: Host>(host: &H, driver: &H::Driver) -> Result<Option<(H::Obj, usize)>, H::Err> {
    let target = host.state(driver)?.pull_target(|it| host.copy(it));
    Ok(target.map(|(iterator, position)| (host.bind(iterator), position)))
}

/// The awaitable of the close the lifecycle asked for.
fn start_close<H: Host>(
    host: &H,
    driver: &H::Driver,
    why: &Close<H::Err>,
) -> Result<H::Obj, H::Err> {
    let objects = host.state(driver)?.take_upstream();
    host.start_close(driver, objects, matches!(why, Close::Stop))
}

/// A close the lifecycle asked for ended, failing with `failure` or not. A failure that
/// nobody can be told of goes to the event loop's exception handler.
fn closed<H: Host>(
    host: &H,
    driver: &H::Driver,
    why: Close<H::Err>,
    failure: Option<H::Err>,
) -> Action<H::Obj, H::Err> {
    let message = match &why {
        Close::Upstream(err) if host.is_cancellation(err) => {
            "closing the upstream after a cancellation"
        }
        Close::Upstream(_) => "closing the upstream after its error",
        _ => "closing the upstream after aclose() from another task",
    };
    let closed = match host.state(driver) {
        Ok(mut st) => st.life.closed(why, failure, |e, c| host.chain(e, c)),
        Err(err) => return Action::Raise(err),
    };
    if let Some(failure) = closed.report {
        host.report(message, failure);
    }
    closed.action.map(|out| host.bind(out))
}

/// Queues what the stage still owes once the upstream is done.
fn end_stage<H: Host>(host: &H, driver: &H::Driver) -> Result<(), H::Err> {
    let (owed, err) = host.stage_end(driver)?;
    let mut st = host.state(driver)?;
    if let Some(err) = err {
        st.life.defer(err, |e, c| host.chain(e, c));
    }
    st.life.owed(owed);
    Ok(())
}

/// The end of a `close()` of the awaitable, which threw `GeneratorExit` in where it waited and
/// got `thrown`: `left`, called only when it went on instead of ending, takes what it left.
///
/// # Errors
///
/// What the close raised that does not end it, or [`Misuse::IgnoredExit`].
pub fn closed_by<H: Host>(
    host: &H,
    thrown: SentOf<H>,
    left: impl FnOnce() -> Option<StepOf<H>>,
) -> Result<(), H::Err> {
    match thrown {
        Ok(Sent::Return(_)) => Ok(()),
        Ok(Sent::Yield(_)) => {
            // It went on instead: end it anyway, as a coroutine's `close()` does. What it left
            // is let go of last.
            let left = left();
            let waiting = match &left {
                Some(Step::Pulling(driver, ..)) => {
                    host.release(driver);
                    None
                }
                Some(Step::Closing(driver, it, _)) => {
                    host.release(driver);
                    Some(it)
                }
                Some(Step::Closer(closer)) => closer.current.as_ref(),
                _ => None,
            };
            if let Some(it) = waiting {
                host.close_awaitable(it)?;
            }
            Err(host.misuse(Misuse::IgnoredExit))
        }
        Err(err) => {
            let err = host.made(err);
            if host.ends_close(&err) {
                Ok(())
            } else {
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

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

    impl Host for Fake {
        type Driver = ();
        type Obj = String;
        type Held = String;
        type Err = String;
        type Spare = u32;
        type State<'a> = std::cell::RefMut<'a, Upstream<String, u32, String>>;

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
        fn claim(&self, (): &()) -> bool {
            !self.running.replace(true)
        }
        fn release(&self, (): &()) {
            self.running.set(false);
        }
        fn close_requested(&self, (): &()) -> bool {
            self.close_requested.get()
        }
        fn anext(&self, iterator: &String) -> Result<String, String> {
            Ok(format!("{iterator}.anext"))
        }
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
        fn is_end(&self, err: &String) -> bool {
            err == "end"
        }
        fn chain(&self, err: &String, context: String) {
            self.log(format!("chain {err} <- {context}"));
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
        fn state<'a>(
            &'a self,
            (): &'a (),
        ) -> Result<std::cell::RefMut<'a, Upstream<S2, u32, S2>>, S2> {
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
        let host =
            Fake::default().script("up.anext", &["raise cancel"]).script("close", &["raise x"]);
        assert_eq!(pulls(&host, 1), ["raise cancel"]);
        let log = host.taken_log();
        assert_eq!(log.last().unwrap(), "report closing the upstream after a cancellation: x");
        // An upstream error: the same, reported as what it is.
        let host =
            Fake::default().script("up.anext", &["raise boom"]).script("close", &["raise x"]);
        assert_eq!(pulls(&host, 2), ["raise boom", "raise end"]);
        assert_eq!(
            host.taken_log().last().unwrap(),
            "report closing the upstream after its error: x"
        );
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
        let host =
            Fake::default().script("up.anext", &["return stop"]).script("close", &["yield f"]);
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
            (
                Step::Closing((), "c".to_owned(), Box::new(Close::Stop)),
                true,
                true,
                vec!["driver", "c"],
            ),
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
}
