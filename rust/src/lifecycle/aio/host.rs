//! What a pull asks of its host, in three faces: the CPython protocol (awaitables, `None`,
//! exceptions: [`Protocol`]), the stream's state (its lock, its pull flag, its closer:
//! [`State`]) and the stage (feeding it, and what it owes at the end: [`Stage`]). A
//! [`Host`] is all three. Kept apart so that each face reads as one concern; the host is still
//! one generic type, so a pull stays one monomorphized loop with no indirect call.

use std::collections::VecDeque;
use std::ops::DerefMut;

use super::upstream::Upstream;
use super::{Input, Misuse, Sent};

/// The CPython protocol a pull runs on: driving awaitables, `None`, and telling and making
/// exceptions. `O` is an object (an item, an awaitable, a value), `E` an error.
pub trait Protocol {
    /// An object of the host's, as a pull drives it.
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
    /// The awaitable of `iterator.__anext__()`, as an iterator to drive.
    fn anext(&self, iterator: &Self::Obj) -> Result<Self::Obj, Self::Err>;
    /// Whether `err` is the upstream's end (`StopAsyncIteration`).
    fn is_end(&self, err: &Self::Err) -> bool;
    /// Makes `context` the context of `err`.
    fn chain(&self, err: &Self::Err, context: Self::Err);
}

/// The stream's state as a pull uses it: its lock, the flag that one pull runs at a time, its
/// objects as the state holds them, and the closer of its upstream.
pub trait State: Protocol {
    /// The stream's driver.
    type Driver;
    /// An object as the stream's state holds it.
    type Held;
    /// The pull's awaitable, as the stream's state keeps it.
    type Spare;
    /// The stream's state, locked.
    type Locked<'a>: DerefMut<Target = Upstream<Self::Held, Self::Spare, Self::Err>>
    where
        Self: 'a;

    /// Marks the stream as being pulled: `false` when it was already.
    fn claim(&self, driver: &Self::Driver) -> bool;
    /// Marks the pull over.
    fn release(&self, driver: &Self::Driver);
    /// Whether `aclose()` was called while the pull ran.
    fn close_requested(&self, driver: &Self::Driver) -> bool;
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
    fn state<'a>(&'a self, driver: &'a Self::Driver) -> Result<Self::Locked<'a>, Self::Err>;
    /// An object the stream's state held, as a pull drives it (and lets go of it).
    fn bind(&self, object: Self::Held) -> Self::Obj;
    /// A new reference to an object the stream's state holds.
    fn copy(&self, object: &Self::Held) -> Self::Held;
    /// The pull's awaitable, kept as the stream's spare when the pull delivers.
    fn spare(&self) -> Self::Spare;
}

/// The stream's stage (the filter or adapter between the upstream and the consumer): an item
/// fed, what a closing stage owes, and what it still owes at the upstream's end.
pub trait Stage: State {
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
}

/// Everything a pull asks of its host: the three faces together.
pub trait Host: Protocol + State + Stage {}

impl<H: Protocol + State + Stage> Host for H {}
