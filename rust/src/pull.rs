//! One pull of the async lifecycle driver, as a state machine.
//!
//! `__anext__` (and `aclose()`) return an awaitable with a coroutine's protocol; it is in one
//! of the [`Step`]s, and each `send` or `throw` into it runs [`resume`] until the pull suspends
//! (it hands on what the awaitable it drives yielded to the event loop), delivers or raises.
//! Where the sync driver calls the upstream or a `close()`, a pull awaits: it drives the
//! upstream's awaitable, or each object's close in turn, from step to step. The rules of the
//! stream itself are the [`Lifecycle`](crate::Lifecycle)'s, which the host consults.
//!
//! What the machine cannot do itself (send into an awaitable, start a close, feed the stage,
//! tell the lifecycle) it asks of a [`Host`]. The bindings implement it over Python objects and
//! the tests below over a scripted fake, so that the rules of a pull (a coroutine's protocol,
//! the order of the closes, the first failure kept) are plain Rust checked without Python. The
//! host is generic, not a trait object: a pull of `awrap` is one monomorphized loop with no
//! indirect call.

use std::collections::VecDeque;

use crate::lifecycle::{Action, Close};

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
    /// Driving the close the lifecycle asked for.
    Closing(D, O, Close<E>),
    /// Not a pull: closing objects (`aclose()`, or a close the lifecycle asked for).
    Closer(Closer<D, O, E>),
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
    /// An object of the host's.
    type Obj;
    /// An error of the host's.
    type Err;

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
    /// The start of a pull: the lifecycle's first action, or the iterator to pull from.
    fn begin(&self, driver: &Self::Driver) -> Todo<Self::Obj, Self::Err>;
    /// The awaitable's iterator of `iterator.__anext__()`.
    fn anext(&self, iterator: &Self::Obj) -> Result<Self::Obj, Self::Err>;
    /// Feeds an item pulled at `position` to the stage: what the lifecycle does next.
    fn item(
        &self,
        driver: &Self::Driver,
        item: Self::Obj,
        position: usize,
    ) -> Action<Self::Obj, Self::Err>;
    /// The upstream raised `err`: what the lifecycle does next.
    fn upstream_raised(
        &self,
        driver: &Self::Driver,
        err: Self::Err,
    ) -> Action<Self::Obj, Self::Err>;
    /// The iterator to pull from next and the item's position, or `None` once it is gone.
    fn pull_target(&self, driver: &Self::Driver) -> Result<Option<(Self::Obj, usize)>, Self::Err>;
    /// The awaitable of the close the lifecycle asked for.
    fn start_close(
        &self,
        driver: &Self::Driver,
        why: &Close<Self::Err>,
    ) -> Result<Self::Obj, Self::Err>;
    /// A close the lifecycle asked for ended, failing with `failure` or not.
    fn closed(
        &self,
        driver: &Self::Driver,
        why: Close<Self::Err>,
        failure: Option<Self::Err>,
    ) -> Action<Self::Obj, Self::Err>;
    /// Queues what the stage still owes once the upstream is done.
    fn end_stage(&self, driver: &Self::Driver) -> Result<(), Self::Err>;
    /// The lifecycle's next action.
    fn next_action(&self, driver: &Self::Driver) -> Action<Self::Obj, Self::Err>;
}

/// A step's objects, as the host names them.
type StepOf<H> = Step<<H as Host>::Driver, <H as Host>::Obj, <H as Host>::Err>;
type SentOf<H> = Result<Sent<<H as Host>::Obj>, <H as Host>::Err>;

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
            CloseMode::Defer(driver) => drop(host.closed(driver, Close::Stop, Some(err))),
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
            Step::Closer(closer) => Step::Closer(Closer {
                objects: closer.objects.into_iter().map(&o).collect(),
                current: closer.current.map(&o),
                first: closer.first,
                mode: match closer.mode {
                    CloseMode::Raise => CloseMode::Raise,
                    CloseMode::Defer(driver) => CloseMode::Defer(d(driver)),
                    CloseMode::Report(message) => CloseMode::Report(message),
                },
            }),
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

/// One step of a pull: the state it leaves and what it yields to the event loop, or returns.
#[inline]
pub fn resume<H: Host>(
    host: &H,
    step: StepOf<H>,
    input: Input<H::Obj, H::Err>,
) -> (StepOf<H>, SentOf<H>) {
    let (driver, todo) = match step {
        Step::Done => {
            let err = match input {
                Input::Send(_) => host.misuse(Misuse::Reused),
                Input::Throw(err) => err,
            };
            return (Step::Done, Err(err));
        }
        Step::Closer(mut closer) => {
            let sent = closer.resume(host, input);
            let next =
                if matches!(sent, Ok(Sent::Yield(_))) { Step::Closer(closer) } else { Step::Done };
            return (next, sent);
        }
        Step::Start(driver) => match input {
            Input::Throw(err) => return (Step::Done, Err(err)),
            Input::Send(value) if !host.is_none(&value) => {
                return (Step::Start(driver), Err(host.misuse(Misuse::StartValue)));
            }
            Input::Send(_) => {
                if !host.claim(&driver) {
                    return (Step::Done, Err(host.misuse(Misuse::Concurrent)));
                }
                let todo = host.begin(&driver);
                (driver, todo)
            }
        },
        Step::Pulling(driver, it, position) => {
            let action = match host.send(&it, input) {
                Ok(Sent::Yield(value)) => {
                    return (Step::Pulling(driver, it, position), Ok(Sent::Yield(value)));
                }
                Ok(Sent::Return(item)) => host.item(&driver, item, position),
                Err(err) => host.upstream_raised(&driver, err),
            };
            (driver, Todo::Do(action))
        }
        Step::Closing(driver, it, why) => {
            let action = match host.send(&it, input) {
                Ok(Sent::Yield(value)) => {
                    return (Step::Closing(driver, it, why), Ok(Sent::Yield(value)));
                }
                Ok(Sent::Return(_)) => host.closed(&driver, why, None),
                Err(err) => match close_failed(host, &driver, why, err) {
                    Ok(action) => action,
                    Err(err) => {
                        host.release(&driver);
                        return (Step::Done, Err(err));
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
fn advance<H: Host>(
    host: &H,
    driver: H::Driver,
    mut todo: Todo<H::Obj, H::Err>,
) -> (StepOf<H>, SentOf<H>) {
    let end = |driver: H::Driver, result: SentOf<H>| {
        host.release(&driver);
        (Step::Done, result)
    };
    loop {
        let action = match todo {
            Todo::Pull(iterator, position) => {
                let pulled = host
                    .anext(&iterator)
                    .and_then(|it| Ok((host.send(&it, Input::Send(host.none()))?, it)));
                match pulled {
                    Ok((Sent::Yield(value), it)) => {
                        return (Step::Pulling(driver, it, position), Ok(Sent::Yield(value)));
                    }
                    Ok((Sent::Return(item), _)) => host.item(&driver, item, position),
                    Err(err) => host.upstream_raised(&driver, err),
                }
            }
            Todo::Do(action) => action,
        };
        todo = match action {
            Action::Deliver(out) => return end(driver, Ok(Sent::Return(out))),
            Action::Raise(err) => return end(driver, Err(err)),
            Action::End => return end(driver, Err(host.end_of_stream())),
            Action::Pull => match host.pull_target(&driver) {
                Ok(Some((iterator, position))) => Todo::Pull(iterator, position),
                Ok(None) => return end(driver, Err(host.end_of_stream())),
                Err(err) => return end(driver, Err(err)),
            },
            Action::Close(why) => {
                let it = match host.start_close(&driver, &why) {
                    Ok(it) => it,
                    Err(err) => return end(driver, Err(err)),
                };
                match host.send(&it, Input::Send(host.none())) {
                    Ok(Sent::Yield(value)) => {
                        return (Step::Closing(driver, it, why), Ok(Sent::Yield(value)));
                    }
                    Ok(Sent::Return(_)) => Todo::Do(host.closed(&driver, why, None)),
                    Err(err) => match close_failed(host, &driver, why, err) {
                        Ok(action) => Todo::Do(action),
                        Err(err) => return end(driver, Err(err)),
                    },
                }
            }
            Action::EndStage => match host.end_stage(&driver) {
                Ok(()) => Todo::Do(host.next_action(&driver)),
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
        host.end_stage(driver)?;
        return Err(err);
    }
    if !host.is_exception(&err) {
        return Err(err);
    }
    Ok(host.closed(driver, why, Some(err)))
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
            // It went on instead: end it anyway, as a coroutine's `close()` does.
            let waiting = match left() {
                Some(Step::Pulling(driver, ..)) => {
                    host.release(&driver);
                    None
                }
                Some(Step::Closing(driver, it, _)) => {
                    host.release(&driver);
                    Some(it)
                }
                Some(Step::Closer(closer)) => closer.current,
                _ => None,
            };
            if let Some(it) = waiting {
                host.close_awaitable(&it)?;
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
