//! The common event of an SSE body, decided without the adapter: a text delta of open text
//! streams that fires no stop, forwarded as the very same bytes, or spliced where a filter held
//! text back or released some. Anything else is the adapter's ([`Handled::Adapter`]).
//!
//! The filters are the caller's ([`Filters`]): in the bindings they are the adapter machine's
//! own objects, one per text stream, which its full rules feed too.

// Without the bindings this is built only for its own tests, which leave parts of it unused.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use super::{splice, Found, Parser, Scan, Scanner, Shape, CHAT, GEMINI, MESSAGES, RESPONSES};
use crate::filter::Saved;

/// The provider whose body is read: its table of fields ([`super::Shape`]), and what else
/// differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI Chat Completions.
    Chat,
    /// Anthropic Messages.
    Messages,
    /// OpenAI Responses.
    Responses,
    /// Google Gemini.
    Gemini,
}

impl Provider {
    /// The provider named `chat`, `messages`, `responses` or `gemini`.
    #[must_use]
    pub fn named(name: &str) -> Option<Provider> {
        match name {
            "chat" => Some(Provider::Chat),
            "messages" => Some(Provider::Messages),
            "responses" => Some(Provider::Responses),
            "gemini" => Some(Provider::Gemini),
            _ => None,
        }
    }

    fn shape(self) -> &'static Shape {
        match self {
            Provider::Chat => &CHAT,
            Provider::Messages => &MESSAGES,
            Provider::Responses => &RESPONSES,
            Provider::Gemini => &GEMINI,
        }
    }

    /// A delta whose text is held back whole is not emitted (Chat and Gemini keep the chunk,
    /// its text made empty).
    fn drops_held(self) -> bool {
        matches!(self, Provider::Messages | Provider::Responses)
    }
}

/// An open text stream of the adapter's table, by its ids as the shape numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open {
    /// The ids, part by part (unused parts are 0).
    pub ids: [i64; 2],
    /// How many ids the stream has.
    pub id_count: u8,
    /// Responses: the text the stream emits is recorded ([`Filters::record`]), since the
    /// adapter builds the part's `done` text from it when a stop fires.
    pub records: bool,
}

/// The filters of the open text streams, by their place in the table given to
/// [`Common::set_table`].
pub trait Filters {
    /// What feeding or recording can fail with (in the bindings, a filter in use elsewhere).
    type Error;
    /// [`crate::Filter::feed_unless_stop`] of stream `i`.
    ///
    /// # Errors
    /// When the filter cannot be fed at all.
    fn feed_unless_stop(
        &mut self,
        i: usize,
        text: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Saved>, Self::Error>;
    /// [`crate::Filter::restore`] of stream `i`.
    ///
    /// # Errors
    /// When the filter cannot be reached.
    fn restore(&mut self, i: usize, saved: Saved) -> Result<(), Self::Error>;
    /// Stream `i` emitted `text` (only for a stream that [`Open::records`]).
    ///
    /// # Errors
    /// When the record cannot be made.
    fn record(&mut self, i: usize, text: &str) -> Result<(), Self::Error>;
}

/// Who took a dispatched block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// Handled here: its bytes are appended to the output.
    Here,
    /// Not the common case: the adapter takes it, with every filter as it was.
    Adapter,
}

/// What the adapter has not seen of the events handled here (it is told with the next event
/// it takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unseen<'a> {
    /// Nothing new.
    Nothing,
    /// Chat: the data of the latest chunk with choices (the template of the chunks the adapter
    /// synthesizes).
    Template(&'a [u8]),
    /// Responses: the latest sequence number.
    Sequence(i64),
}

/// The state of one body's common events: the parser, the scanner, and the adapter's table.
#[derive(Debug)]
pub struct Common {
    /// The body's blocks.
    pub parser: Parser,
    scanner: Scanner,
    provider: Provider,
    /// The adapter is open: the common case may be handled here.
    fast: bool,
    /// The open text streams.
    table: Vec<Open>,
    /// Responses: the last sequence number emitted; an event handled here must exceed it.
    floor: i64,
    /// Responses: the sequence number of the latest event handled here.
    sequence: Option<i64>,
    /// Chat: the data of the latest chunk with choices handled here, and whether it is new.
    template: Vec<u8>,
    template_fresh: bool,
    /// The filters' output for the texts of one event, and where each text's output lies.
    emitted: Vec<u8>,
    ranges: Vec<(usize, usize)>,
    /// States from before the feeds of one event, to put back when one of its texts stops.
    befores: Vec<(usize, Saved)>,
}

impl Common {
    /// A body of `provider`'s events, with no open stream (every event the adapter's) until
    /// [`Common::set_table`].
    #[must_use]
    pub fn new(provider: Provider) -> Common {
        Common {
            parser: Parser::new(),
            scanner: Scanner::new(),
            provider,
            fast: false,
            table: Vec::new(),
            floor: i64::MAX,
            sequence: None,
            template: Vec::new(),
            template_fresh: false,
            emitted: Vec::new(),
            ranges: Vec::new(),
            befores: Vec::new(),
        }
    }

    /// The adapter's state after it took an event: whether it is open, its open text streams,
    /// and (Responses) the last sequence number it emitted.
    pub fn set_table(&mut self, fast: bool, table: impl IntoIterator<Item = Open>, floor: i64) {
        self.fast = fast;
        self.floor = floor;
        self.table.clear();
        self.table.extend(table);
    }

    /// What the adapter has not seen, taken.
    pub fn take_unseen(&mut self) -> Unseen<'_> {
        if std::mem::take(&mut self.template_fresh) {
            return Unseen::Template(&self.template);
        }
        self.sequence.take().map_or(Unseen::Nothing, Unseen::Sequence)
    }

    /// The dispatched block, if it is the common case.
    ///
    /// # Errors
    /// What the filters fail with.
    pub fn handle<F: Filters>(
        &mut self,
        filters: &mut F,
        out: &mut Vec<u8>,
    ) -> Result<Handled, F::Error> {
        if !self.fast {
            return Ok(Handled::Adapter);
        }
        let raw = self.parser.raw();
        let mut data = None;
        for line in self.parser.lines() {
            if let Some(value) = line.value {
                if data.is_some() {
                    return Ok(Handled::Adapter); // several data lines: rewritten as one there
                }
                data = Some(value);
            }
        }
        let Some((a, b)) = data else {
            out.extend_from_slice(raw); // comments (keep-alives), id / retry only, blank lines
            return Ok(Handled::Here);
        };
        let value = &raw[a..b];
        // A JSON object, so never `[DONE]` or other text.
        if value.iter().find(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r')) != Some(&b'{') {
            return Ok(Handled::Adapter);
        }
        match self.scanner.scan(self.provider.shape(), value) {
            // Keep-alives pass as they are while the message is open.
            Scan::Other if self.provider == Provider::Messages && self.scanner.other == "ping" => {
                out.extend_from_slice(raw);
                return Ok(Handled::Here);
            }
            Scan::Slow | Scan::Other => return Ok(Handled::Adapter),
            Scan::Texts => {}
        }
        let sequence = self.scanner.sequence;
        let responses = self.provider == Provider::Responses;
        if responses && sequence.is_none_or(|n| n <= self.floor) {
            return Ok(Handled::Adapter); // the adapter renumbers it
        }
        if !self.feed(filters)? || (responses && !self.note_responses(filters, sequence)?) {
            return Ok(Handled::Adapter);
        }
        let raw = self.parser.raw();
        if self.provider == Provider::Chat {
            self.template.clear();
            self.template.extend_from_slice(&raw[a..b]);
            self.template_fresh = true;
        }
        if self.provider.drops_held() && self.ranges.first().is_some_and(|&(x, y)| x == y) {
            return Ok(Handled::Here); // a text delta held back whole is not emitted
        }
        let (scratch, emitted) = (&self.scanner.scratch, &self.emitted);
        let changed = |(f, &(x, y)): (&Found, &(usize, usize))| {
            let new = &emitted[x..y];
            (new != &scratch[f.text.clone()]).then(|| (f.span.start + a..f.span.end + a, new))
        };
        let mut edits = self.scanner.found.iter().zip(&self.ranges).filter_map(changed).peekable();
        if edits.peek().is_none() {
            out.extend_from_slice(raw);
        } else {
            splice(raw, edits, out);
        }
        Ok(Handled::Here)
    }

    /// Feeds the texts found to their streams' filters, unless one is not an open stream's or
    /// would fire a stop: then every filter is put back, and `false`.
    fn feed<F: Filters>(&mut self, filters: &mut F) -> Result<bool, F::Error> {
        let found = &self.scanner.found;
        self.emitted.clear();
        self.ranges.clear();
        self.befores.clear();
        for (k, f) in found.iter().enumerate() {
            let same = |ids: &[i64; 2], count: u8| *ids == f.ids && count == f.id_count;
            let entry = self.table.iter().position(|e| same(&e.ids, e.id_count));
            // The same stream in two elements (two choices with one index): the adapter's
            // rules decide. Texts of one element (Gemini's parts) feed its filter in order.
            let duplicate =
                found[..k].iter().any(|g| same(&g.ids, g.id_count) && g.group != f.group);
            let fed = match entry {
                Some(i) if !duplicate => {
                    let text = &self.scanner.scratch[f.text.clone()];
                    let from = self.emitted.len();
                    let before = filters.feed_unless_stop(i, text, &mut self.emitted)?;
                    self.ranges.push((from, self.emitted.len()));
                    before.map(|before| self.befores.push((i, before)))
                }
                _ => None,
            };
            if fed.is_none() {
                self.restore(filters)?;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Responses: what the adapter would record of a delta handled here. The text emitted is
    /// recorded for its part, and the sequence number kept for the adapter (a delta held back
    /// whole is not emitted: it takes no number, but it tells the adapter that the upstream
    /// numbers its events). `false`, with the filters put back, for an emitted text that is
    /// not UTF-8.
    fn note_responses<F: Filters>(
        &mut self,
        filters: &mut F,
        sequence: Option<i64>,
    ) -> Result<bool, F::Error> {
        let emitted = |&(x, y): &(usize, usize)| std::str::from_utf8(&self.emitted[x..y]);
        if self.ranges.iter().any(|r| emitted(r).is_err()) {
            self.restore(filters)?;
            return Ok(false);
        }
        for (r, &(i, _)) in self.ranges.iter().zip(&self.befores) {
            match emitted(r) {
                Ok(text) if self.table[i].records && !text.is_empty() => filters.record(i, text)?,
                _ => {}
            }
        }
        match sequence {
            Some(n) if self.ranges.first().is_some_and(|&(x, y)| x < y) => {
                self.floor = n;
                self.sequence = Some(n);
            }
            _ => self.sequence = Some(self.sequence.unwrap_or(self.floor)),
        }
        Ok(true)
    }

    /// Puts back the filters fed for the event being handled.
    fn restore<F: Filters>(&self, filters: &mut F) -> Result<(), F::Error> {
        for &(i, before) in self.befores.iter().rev() {
            filters.restore(i, before)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Common, Filters, Handled, Open, Provider, Unseen};
    use crate::filter::Saved;
    use crate::{CompiledStops, Filter};

    /// The core's filters, and what they recorded.
    struct Plain(Vec<Filter>, Vec<(usize, String)>);

    impl Filters for Plain {
        type Error = ();
        fn feed_unless_stop(
            &mut self,
            i: usize,
            text: &[u8],
            out: &mut Vec<u8>,
        ) -> Result<Option<Saved>, ()> {
            Ok(self.0[i].feed_unless_stop(text, out))
        }
        fn restore(&mut self, i: usize, saved: Saved) -> Result<(), ()> {
            self.0[i].restore(saved);
            Ok(())
        }
        fn record(&mut self, i: usize, text: &str) -> Result<(), ()> {
            self.1.push((i, text.to_owned()));
            Ok(())
        }
    }

    fn run(
        provider: Provider,
        table: &[Open],
        floor: i64,
        body: &str,
    ) -> (Vec<Handled>, String, Plain) {
        let stops = CompiledStops::literal(&["STOP"]).unwrap();
        let filters = table.iter().map(|_| Filter::new(&stops, false, false, false)).collect();
        let mut filters = Plain(filters, Vec::new());
        let mut common = Common::new(provider);
        common.set_table(true, table.iter().copied(), floor);
        common.parser.push(body.as_bytes());
        let (mut handled, mut out) = (Vec::new(), Vec::new());
        while common.parser.next_block() {
            handled.push(common.handle(&mut filters, &mut out).unwrap());
        }
        (handled, String::from_utf8(out).unwrap(), filters)
    }

    const ONE: Open = Open { ids: [0, 0], id_count: 1, records: false };

    #[test]
    fn table() {
        use Handled::{Adapter, Here};
        let chat = |text: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
            )
        };
        let cases: &[(&str, &[Handled], &str)] = &[
            // Passed as the very same bytes.
            (&chat("hello"), &[Here], &chat("hello")),
            // Held back: the text made empty, then released with the next.
            (&(chat("a ST") + &chat("x")), &[Here, Here], &(chat("a ") + &chat("STx"))),
            // A stop: the adapter's, with nothing fed.
            (&chat("a STOP"), &[Adapter], ""),
            // Comments and keep-alives pass.
            (": ping\n\n", &[Here], ": ping\n\n"),
            // Not JSON, and two data lines: the adapter's.
            ("data: [DONE]\n\n", &[Adapter], ""),
            ("data: {}\ndata: {}\n\n", &[Adapter], ""),
        ];
        for &(body, handled, out) in cases {
            let got = run(Provider::Chat, &[ONE], i64::MAX, body);
            assert_eq!((&got.0[..], &got.1[..]), (handled, out), "{body:?}");
        }
    }

    #[test]
    fn a_stream_not_open_is_the_adapters() {
        let body = "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"x\"}}]}\n\n";
        assert_eq!(run(Provider::Chat, &[ONE], i64::MAX, body).0, [Handled::Adapter]);
    }

    #[test]
    fn chat_template_is_unseen_once() {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n";
        let stops = CompiledStops::literal(&["STOP"]).unwrap();
        let mut filters = Plain(vec![Filter::new(&stops, false, false, false)], Vec::new());
        let mut common = Common::new(Provider::Chat);
        common.set_table(true, [ONE], i64::MAX);
        common.parser.push(body.as_bytes());
        assert!(common.parser.next_block());
        assert_eq!(common.handle(&mut filters, &mut Vec::new()), Ok(Handled::Here));
        let data = &body.as_bytes()[6..body.len() - 2];
        assert_eq!(common.take_unseen(), Unseen::Template(data));
        assert_eq!(common.take_unseen(), Unseen::Nothing);
    }

    #[test]
    fn responses_records_and_numbers() {
        let open = Open { ids: [0, 0], id_count: 2, records: true };
        let delta = |n: i64, text: &str| {
            format!("data: {{\"type\":\"response.output_text.delta\",\"output_index\":0,\"content_index\":0,\"delta\":\"{text}\",\"sequence_number\":{n}}}\n\n")
        };
        // At or below the floor: the adapter renumbers it.
        assert_eq!(run(Provider::Responses, &[open], 5, &delta(5, "x")).0, [Handled::Adapter]);
        let (handled, out, filters) =
            run(Provider::Responses, &[open], 4, &(delta(5, "ab") + &delta(6, "ST")));
        assert_eq!(handled, [Handled::Here, Handled::Here]);
        // The held delta is not emitted.
        assert_eq!(out, delta(5, "ab"));
        assert_eq!(filters.1, [(0, "ab".to_owned())]);
    }
}
