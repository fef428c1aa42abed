//! The error type of every trace reader, writer, importer and exporter.
//!
//! Every variant names the file (or the name given to [`crate::read_bytes`]), what was wrong
//! and where: a byte offset, or a (sequence, phase, token, layer) position.

use crate::trace::Phase;
use std::fmt;

/// Position of one token in a trace, used by errors to say where a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenPos {
    /// Sequence index (0-based, header order).
    pub sequence: usize,
    /// Phase of the token.
    pub phase: Phase,
    /// Token index inside that phase of that sequence (0-based).
    pub token: u64,
}

impl fmt::Display for TokenPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sequence {} {} token {}",
            self.sequence, self.phase, self.token
        )
    }
}

/// Everything that can go wrong reading, writing, importing or exporting a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// An operating-system error on the file.
    #[error("{file}: {action}: {cause}")]
    Io {
        file: String,
        action: &'static str,
        /// Kept out of `source()` because the message already includes it.
        cause: std::io::Error,
    },
    /// The first 8 bytes are not the trace magic.
    #[error("{file}: not a MoE trace file: bytes 0..8 are {found:02x?}, expected the magic \"MOETRACE\" (convert other formats with `sim trace import`)")]
    BadMagic { file: String, found: Vec<u8> },
    /// The format version is not one this build reads.
    #[error("{file}: trace format version {found} is not supported (this build reads versions 1 to {supported}); re-create the trace with this build's `sim trace import` / `sim trace gen`")]
    UnsupportedVersion {
        file: String,
        found: u32,
        supported: u32,
    },
    /// The file ends before a fixed part (preamble, header, checksum) is complete.
    #[error(
        "{file}: truncated: needs at least {needed} bytes to hold the {what}, the file has {len}"
    )]
    Truncated {
        file: String,
        what: &'static str,
        needed: u64,
        len: u64,
    },
    /// The header length field exceeds the cap.
    #[error("{file}: header length {len} bytes (at byte offset 12) exceeds the {max}-byte cap; the file is corrupt")]
    HeaderTooLarge { file: String, len: u64, max: u64 },
    /// The header bytes fail their checksum.
    #[error("{file}: header checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the header bytes 20..{end} are corrupt")]
    HeaderChecksum {
        file: String,
        stored: u32,
        computed: u32,
        end: u64,
    },
    /// The header bytes do not decode as a bincode-2 header.
    #[error("{file}: header (byte offset 20, {len} bytes) does not decode: {detail}")]
    HeaderDecode {
        file: String,
        len: u64,
        detail: String,
    },
    /// The model geometry in the header is invalid.
    #[error("{file}: invalid model geometry: {detail}")]
    Geometry { file: String, detail: String },
    /// The forward passes in the header do not cover the sequences' tokens exactly.
    #[error("{file}: invalid forward passes: {detail}")]
    Passes { file: String, detail: String },
    /// The payload size the header implies does not match the file size.
    #[error("{file}: the header's sequences need a {expected}-byte payload at byte offset {offset}, but the file holds {found} payload bytes ({hint})")]
    PayloadSize {
        file: String,
        offset: u64,
        expected: u128,
        found: u64,
        hint: &'static str,
    },
    /// An expert id is not below its layer's expert count.
    #[error("{file}: {pos} layer {layer}: expert id {id} is out of range (the layer has {experts} experts){}", offset_note(*.offset))]
    IdOutOfRange {
        file: String,
        pos: TokenPos,
        layer: usize,
        id: u16,
        experts: u16,
        offset: Option<u64>,
    },
    /// The same expert id appears twice in one selection.
    #[error("{file}: {pos} layer {layer}: expert id {id} is repeated inside one top-k selection{}", offset_note(*.offset))]
    RepeatedId {
        file: String,
        pos: TokenPos,
        layer: usize,
        id: u16,
        offset: Option<u64>,
    },
    /// The stored payload checksum differs from the computed one.
    #[error("{file}: payload checksum mismatch (stored {stored:#010x} at byte offset {offset}, computed {computed:#010x}): the payload is corrupt")]
    Checksum {
        file: String,
        stored: u32,
        computed: u32,
        offset: u64,
    },
    /// The file the header implies is larger than the space free where it would be written.
    #[error("{file}: the trace would take {}, more than the {} free in {dir}; write fewer tokens or sequences, or write to another directory", crate::resources::bytes_words(*.need), crate::resources::bytes_words(*.free as u128))]
    NoSpace {
        file: String,
        /// Bytes of the whole file.
        need: u128,
        /// Bytes free in its directory.
        free: u64,
        dir: String,
    },
    /// The directory an output would be written in does not exist.
    #[error("{file}: the directory {dir} does not exist; create it first, or write the file in one that exists")]
    NoDirectory { file: String, dir: String },
    /// An output was given the name of a directory rather than of a file.
    #[error("{file} names a directory, not a file; give the path of a file (e.g. {file}/NAME)")]
    OutputIsDirectory { file: String },
    /// A writer or importer was given data inconsistent with the header or format rules.
    #[error("{file}: {detail}")]
    Invalid { file: String, detail: String },
    /// An input record of an importer is malformed.
    #[error("{file}: {location}: {detail}")]
    Import {
        file: String,
        location: String,
        detail: String,
    },
}

fn offset_note(offset: Option<u64>) -> String {
    match offset {
        Some(o) => format!(" (byte offset {o})"),
        None => String::new(),
    }
}

impl TraceError {
    /// The kind of the operating-system error, for an [`TraceError::Io`] (a caller tells a
    /// closed pipe from a failed disk by it).
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            TraceError::Io { cause, .. } => Some(cause.kind()),
            _ => None,
        }
    }

    pub(crate) fn io(file: &str, action: &'static str, cause: std::io::Error) -> Self {
        TraceError::Io {
            file: file.to_string(),
            action,
            cause,
        }
    }

    pub(crate) fn invalid(file: &str, detail: impl Into<String>) -> Self {
        TraceError::Invalid {
            file: file.to_string(),
            detail: detail.into(),
        }
    }
}
