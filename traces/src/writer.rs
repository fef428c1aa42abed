//! Writing traces: the streaming [`TraceWriter`] and the whole-trace [`write_file`].
//!
//! Both write to a temporary file in the destination's directory and rename it over the
//! destination only when the trace is complete, so a reader never sees a half-written trace
//! and an interrupted write leaves nothing behind.

use crate::error::{TokenPos, TraceError};
use crate::format::{
    encode_header, validate_geometry, version_for, Layout, SelectionChecker, TokenCursor,
    CHECKSUM_LEN, MAGIC, MAX_HEADER_BYTES, PREAMBLE_LEN,
};
use crate::model::Header;
use crate::trace::{KeySpace, PhaseSel, Trace};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Output buffer size: large writes keep the writer at disk speed.
pub(crate) const WRITE_BUFFER_BYTES: usize = 4 << 20;

/// Writes a trace token by token without holding it in memory.
///
/// Tokens must come in payload order: sequences in header order, each sequence's prefill
/// tokens then its decode tokens. Every token is validated (ids in range, no repeats, the
/// right count), so a finished file always reads back. [`TraceWriter::finish`] checks that
/// every token the header declares was written and renames the temporary file into place;
/// dropping the writer without `finish` deletes the temporary file.
pub struct TraceWriter {
    file: String,
    path: PathBuf,
    out: BufWriter<tempfile::NamedTempFile>,
    ks: KeySpace,
    checker: SelectionChecker,
    cursor: TokenCursor,
    has_weights: bool,
    crc: crc32fast::Hasher,
    scratch: Vec<u8>,
    offset: u64,
    /// The temporary file's registration for removal on an interruption; after `out`, so the
    /// file is removed (on drop) before it is unregistered.
    _live: crate::cleanup::Registered,
}

impl std::fmt::Debug for TraceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("file", &self.file)
            .field("next_position", &self.cursor.current())
            .field("bytes_written", &self.offset)
            .finish()
    }
}

impl TraceWriter {
    /// Create the temporary file next to `path` and write the preamble and `header`.
    ///
    /// Errors: invalid geometry, a header over [`MAX_HEADER_BYTES`], a file (the size the
    /// header implies) larger than the space free in `path`'s directory, I/O errors. A write
    /// that fails later (the disk filled up anyway) is an I/O error, and the temporary file
    /// is removed with the writer.
    pub fn create(path: impl AsRef<Path>, header: &Header) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let file = path.display().to_string();
        validate_geometry(&header.model, &file)?;
        crate::format::validate_passes(header, &file)?;
        let header_bytes = encode_header(header).map_err(|d| TraceError::invalid(&file, d))?;
        if header_bytes.len() as u64 > MAX_HEADER_BYTES {
            return Err(TraceError::HeaderTooLarge {
                file,
                len: header_bytes.len() as u64,
                max: MAX_HEADER_BYTES,
            });
        }
        let dir = crate::cleanup::dir_of(&path);
        let need = PREAMBLE_LEN as u128
            + header_bytes.len() as u128
            + Layout::of(header).payload_bytes
            + CHECKSUM_LEN as u128;
        let free = crate::resources::free_space(dir);
        if crate::resources::exceeds(need, free) {
            return Err(TraceError::NoSpace {
                file,
                need,
                free: free.unwrap_or(0),
                dir: dir.display().to_string(),
            });
        }
        let tmp = crate::cleanup::temp_file_beside(&path, ".trace-")?;
        let live = crate::cleanup::register(tmp.path());
        let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, tmp);
        let mut pre = Vec::with_capacity(20 + header_bytes.len());
        pre.extend_from_slice(&MAGIC);
        pre.extend_from_slice(&version_for(header).to_le_bytes());
        pre.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
        pre.extend_from_slice(&crc32fast::hash(&header_bytes).to_le_bytes());
        pre.extend_from_slice(&header_bytes);
        out.write_all(&pre)
            .map_err(|e| TraceError::io(&file, "writing the header", e))?;
        let ks = KeySpace::new(&header.model);
        Ok(TraceWriter {
            checker: SelectionChecker::new(&ks),
            cursor: TokenCursor::new(header),
            has_weights: header.has_weights,
            crc: crc32fast::Hasher::new(),
            scratch: Vec::new(),
            offset: pre.len() as u64,
            _live: live,
            ks,
            out,
            path,
            file,
        })
    }

    /// The key space of the header's model (`ids_per_token` is the record length).
    pub fn keyspace(&self) -> &KeySpace {
        &self.ks
    }

    /// Where the next token goes, or None when every declared token has been written.
    pub fn next_position(&self) -> Option<TokenPos> {
        self.cursor.current()
    }

    /// Append one token: `ids` holds every MoE layer's selection (layer order, length
    /// `ids_per_token`), `weights` the matching router weights iff the header says
    /// `has_weights`. Returns the position the token was written at.
    pub fn write_token(
        &mut self,
        ids: &[u16],
        weights: Option<&[f32]>,
    ) -> Result<TokenPos, TraceError> {
        let pos = self.cursor.current().ok_or_else(|| {
            TraceError::invalid(
                &self.file,
                "one token more than the header declares was written",
            )
        })?;
        let n = self.ks.ids_per_token();
        if ids.len() != n {
            return Err(TraceError::invalid(
                &self.file,
                format!("{pos}: {} ids given, a token record holds {n}", ids.len()),
            ));
        }
        match (self.has_weights, weights) {
            (true, Some(w)) if w.len() == n => {}
            (true, Some(w)) => {
                return Err(TraceError::invalid(
                    &self.file,
                    format!("{pos}: {} weights given for {n} ids", w.len()),
                ))
            }
            (true, None) => {
                return Err(TraceError::invalid(
                    &self.file,
                    format!("{pos}: the header declares router weights but none were given"),
                ))
            }
            (false, Some(_)) => {
                return Err(TraceError::invalid(
                    &self.file,
                    format!("{pos}: weights given but the header declares none"),
                ))
            }
            (false, None) => {}
        }
        if let Err(bad) = self.checker.check_token(ids) {
            return Err(bad.into_error(&self.file, &self.ks, pos, None));
        }
        self.scratch.clear();
        self.scratch.reserve(n * 6);
        for &id in ids {
            self.scratch.extend_from_slice(&id.to_le_bytes());
        }
        if let Some(w) = weights {
            for &x in w {
                self.scratch.extend_from_slice(&x.to_le_bytes());
            }
        }
        self.crc.update(&self.scratch);
        self.out
            .write_all(&self.scratch)
            .map_err(|e| TraceError::io(&self.file, "writing the payload", e))?;
        self.offset += self.scratch.len() as u64;
        self.cursor.advance();
        Ok(pos)
    }

    /// Write the checksum, flush, sync and rename the temporary file to the destination.
    ///
    /// Errors: fewer tokens written than the header declares (nothing is renamed), I/O errors.
    pub fn finish(mut self) -> Result<(), TraceError> {
        if let Some(pos) = self.cursor.current() {
            return Err(TraceError::invalid(
                &self.file,
                format!("finished before every token the header declares was written (next expected: {pos})"),
            ));
        }
        let crc = self.crc.clone().finalize();
        self.out
            .write_all(&crc.to_le_bytes())
            .map_err(|e| TraceError::io(&self.file, "writing the checksum", e))?;
        let tmp = self
            .out
            .into_inner()
            .map_err(|e| TraceError::io(&self.file, "flushing", e.into_error()))?;
        // Temporary files are created owner-only (0600); a trace is ordinary data.
        crate::file_mode::share_file(tmp.as_file())
            .map_err(|e| TraceError::io(&self.file, "setting permissions", e))?;
        tmp.as_file()
            .sync_all()
            .map_err(|e| TraceError::io(&self.file, "syncing", e))?;
        tmp.persist(&self.path).map_err(|e| {
            TraceError::io(&self.file, "renaming the finished file into place", e.error)
        })?;
        Ok(())
    }
}

/// Write a whole in-memory trace to `path` atomically (temporary file + rename).
///
/// Errors: the trace breaks its invariants ([`Trace::check`]), invalid geometry, I/O errors.
pub fn write_file(path: impl AsRef<Path>, trace: &Trace) -> Result<(), TraceError> {
    let file = path.as_ref().display().to_string();
    validate_geometry(&trace.header.model, &file)?;
    trace.check().map_err(|d| {
        TraceError::invalid(&file, format!("the trace to write is inconsistent: {d}"))
    })?;
    let mut w = TraceWriter::create(path.as_ref(), &trace.header)?;
    let ks = trace.keyspace();
    let n = ks.ids_per_token();
    for (s, data) in trace.sequences.iter().enumerate() {
        for &phase in PhaseSel::All.phases() {
            let block = data.block(phase);
            for t in 0..trace.tokens(s, phase) {
                let ids = &block.ids[t * n..(t + 1) * n];
                let weights = block.weights.as_ref().map(|w| &w[t * n..(t + 1) * n]);
                w.write_token(ids, weights)?;
            }
        }
    }
    w.finish()
}

/// Bytes a trace with this header occupies on disk (preamble, header, payload, checksum).
pub fn file_size(header: &Header) -> Result<u128, String> {
    let h = encode_header(header)?;
    Ok(20 + h.len() as u128 + Layout::of(header).payload_bytes + 4)
}
