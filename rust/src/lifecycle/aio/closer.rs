//! Closing a stream's objects in turn, each close awaited to its end.

use std::collections::VecDeque;

use super::super::Close;
use super::{closed, Host, Input, Sent};

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
    pub(super) objects: VecDeque<O>,
    /// The close being awaited.
    pub(super) current: Option<O>,
    pub(super) first: Option<E>,
    pub(super) mode: CloseMode<D>,
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
    pub(super) fn resume<H: Host<Driver = D, Obj = O, Err = E>>(
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
