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
//! lock the stream's state) it asks of a [`Host`], which has three faces: [`Protocol`],
//! [`State`] and [`Stage`]. The bindings implement them over Python objects and the tests
//! over a scripted fake, so that the rules of a pull (a coroutine's protocol, the order of the
//! closes, the first failure kept) are plain Rust checked without Python. The host is generic,
//! not a trait object: a pull of `awrap` is one monomorphized loop with no indirect call.
//!
//! The parts: the steps and the machine (here), the host's faces (`host.rs`), the state a
//! stream's pulls share (`upstream.rs`), the closes awaited in turn (`closer.rs`), and the
//! tests over a scripted host (`tests.rs`).

mod closer;
mod host;
#[cfg(test)]
mod tests;
mod upstream;

use super::{Action, Close, Lifecycle};

pub use closer::{CloseMode, Closer};
pub use host::{Host, Protocol, Stage, State};
pub use upstream::Upstream;

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

/// A step's objects, as the host names them.
type StepOf<H> = Step<<H as State>::Driver, <H as Protocol>::Obj, <H as Protocol>::Err>;
type SentOf<H> = Result<Sent<<H as Protocol>::Obj>, <H as Protocol>::Err>;
type ResumedOf<H> = Resumed<<H as State>::Driver, <H as Protocol>::Obj, <H as Protocol>::Err>;

/// What one step of a pull leaves.
#[derive(Debug)]
pub struct Resumed<D, O, E> {
    /// The pull's next state.
    pub step: Step<D, O, E>,
    /// What it yields to the event loop, returns, or raises.
    pub sent: Result<Sent<O>, E>,
    /// The driver of a pull that ended (delivered or raised): the caller puts `step` back,
    /// then releases it ([`State::release`]).
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
                // Let go of as the pull drives objects (see `State::bind`).
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
