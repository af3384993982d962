//! The one error type of the crate.

use std::fmt;

/// An error a caller can cause: an empty stop, invalid UTF-8 under strict decoding, input fed
/// to a finished stream, or a token id outside the vocabulary. Opaque on purpose, so that new
/// failure modes can be added without a breaking change; ask it what happened with its
/// accessors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ErrorKind {
    EmptyStop { index: usize },
    InvalidPattern { index: usize, message: String },
    EmptyMarker { name: String },
    TooLarge { total: usize },
    Decode(DecodeError),
    Finished,
    Token { position: usize, id: i64 },
    VocabTooLarge { total: usize },
    Tokenizer { message: String },
    Quiet,
}

/// Details of a UTF-8 decoding failure, shaped like Python's `UnicodeDecodeError`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The bytes being decoded: the incomplete sequence carried over from earlier input followed
    /// by the chunk that failed, as CPython's incremental decoder reports it.
    pub object: Vec<u8>,
    /// Offset in `object` of the first offending byte.
    pub start: usize,
    /// Offset in `object` one past the last offending byte.
    pub end: usize,
    /// CPython's wording: "invalid start byte", "invalid continuation byte" or
    /// "unexpected end of data".
    pub reason: &'static str,
}

impl Error {
    pub(crate) fn empty_stop(index: usize) -> Error {
        Error { kind: ErrorKind::EmptyStop { index } }
    }

    pub(crate) fn invalid_pattern(index: usize, message: String) -> Error {
        Error { kind: ErrorKind::InvalidPattern { index, message } }
    }

    pub(crate) fn empty_marker(name: String) -> Error {
        Error { kind: ErrorKind::EmptyMarker { name } }
    }

    /// The position of a rejected regex stop (invalid, matching the empty string, or too
    /// large), if that is what went wrong.
    pub fn invalid_pattern_index(&self) -> Option<usize> {
        match self.kind {
            ErrorKind::InvalidPattern { index, .. } => Some(index),
            _ => None,
        }
    }

    /// Whether a skip marker was empty.
    pub fn is_empty_marker(&self) -> bool {
        matches!(self.kind, ErrorKind::EmptyMarker { .. })
    }

    pub(crate) fn too_large(total: usize) -> Error {
        Error { kind: ErrorKind::TooLarge { total } }
    }

    /// Whether the stops are too long in total for one automaton (over 2^30 bytes).
    pub fn is_too_large(&self) -> bool {
        matches!(self.kind, ErrorKind::TooLarge { .. })
    }

    pub(crate) fn decode(e: DecodeError) -> Error {
        Error { kind: ErrorKind::Decode(e) }
    }

    pub(crate) fn finished() -> Error {
        Error { kind: ErrorKind::Finished }
    }

    /// The position of an empty stop in the list given, if that is what went wrong.
    pub fn empty_stop_index(&self) -> Option<usize> {
        match self.kind {
            ErrorKind::EmptyStop { index } => Some(index),
            _ => None,
        }
    }

    /// The decoding failure, if that is what went wrong.
    pub fn decode_error(&self) -> Option<&DecodeError> {
        match &self.kind {
            ErrorKind::Decode(e) => Some(e),
            _ => None,
        }
    }

    pub(crate) fn token(position: usize, id: i64) -> Error {
        Error { kind: ErrorKind::Token { position, id } }
    }

    pub(crate) fn vocab_too_large(total: usize) -> Error {
        Error { kind: ErrorKind::VocabTooLarge { total } }
    }

    /// A token id that is not in the vocabulary (out of range, or a hole), as `(position, id)`:
    /// its position in the ids given to the call (or in the list of special or stop ids).
    pub fn invalid_token(&self) -> Option<(usize, i64)> {
        match self.kind {
            ErrorKind::Token { position, id } => Some((position, id)),
            _ => None,
        }
    }

    /// Whether a vocabulary's tokens are too long in total (over 2^32 bytes).
    pub fn is_vocab_too_large(&self) -> bool {
        matches!(self.kind, ErrorKind::VocabTooLarge { .. })
    }

    pub(crate) fn tokenizer(message: String) -> Error {
        Error { kind: ErrorKind::Tokenizer { message } }
    }

    /// Whether a tokenizer's JSON could not be read: a decoder with no per-token bytes (named
    /// in the message), or a document that is not a JSON object.
    pub fn is_tokenizer(&self) -> bool {
        matches!(self.kind, ErrorKind::Tokenizer { .. })
    }

    pub(crate) fn quiet() -> Error {
        Error { kind: ErrorKind::Quiet }
    }

    /// Whether a stream was asked to be quiet that cannot be: its list has a regex stop, or is
    /// a plain literal list (which runs on the literal automaton alone).
    pub fn is_quiet(&self) -> bool {
        matches!(self.kind, ErrorKind::Quiet)
    }

    /// Whether input was fed to a stream after it was finished.
    pub fn is_finished(&self) -> bool {
        matches!(self.kind, ErrorKind::Finished)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::EmptyStop { index } => {
                write!(f, "stop sequence at position {index} is empty")
            }
            ErrorKind::InvalidPattern { index, message } => {
                write!(f, "regex stop at position {index} is invalid: {message}")
            }
            ErrorKind::EmptyMarker { name } => write!(f, "{name} is empty"),
            ErrorKind::TooLarge { total } => {
                write!(f, "stop sequences too long in total ({total}+ bytes; the limit is 2^30)")
            }
            ErrorKind::Decode(e) => write!(
                f,
                "'utf-8' codec can't decode bytes in position {}-{}: {}",
                e.start,
                e.end.saturating_sub(1),
                e.reason
            ),
            ErrorKind::Finished => f.write_str("feed() called after finish(); call reset() first"),
            ErrorKind::Token { position, id } => {
                write!(f, "token id {id} at position {position} is not in the vocabulary")
            }
            ErrorKind::VocabTooLarge { total } => {
                write!(f, "vocabulary too large ({total}+ bytes of token text; the limit is 2^32)")
            }
            ErrorKind::Tokenizer { message } => f.write_str(message),
            ErrorKind::Quiet => f.write_str(
                "only a composed list of literal stops (Stop items or skip regions, no regex \
                 stop) can be quiet",
            ),
        }
    }
}

impl std::error::Error for Error {}
