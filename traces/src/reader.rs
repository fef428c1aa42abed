//! Reading traces: the streaming [`TraceReader`] and the whole-trace loaders
//! [`read_file`] and [`read_bytes`].
//!
//! The reader checks the fixed parts (magic, version, header length and checksum, geometry,
//! and that the payload the header implies is exactly what the file holds) before it
//! allocates anything sized by the header, then validates every token as it yields it and
//! the payload checksum after the last token.

use crate::error::{TokenPos, TraceError};
use crate::format::{
    decode_header, validate_geometry, validate_passes, Layout, SelectionChecker, TokenCursor,
    CHECKSUM_LEN, ID_BYTES, MAGIC, MAX_HEADER_BYTES, OLDEST_VERSION, PREAMBLE_LEN, VERSION,
    WEIGHT_BYTES,
};
use crate::model::Header;
use crate::trace::{KeySpace, Phase, SequenceData, TokenBlock, Trace};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Target size of one read from the file (4 MiB): large enough that system-call and
/// checksum-call overheads vanish, small enough to stay in the L2/L3 caches' reach.
const READ_BLOCK_BYTES: usize = 4 << 20;

/// One token yielded by [`TraceReader::next_token`], borrowing the reader's buffer.
#[derive(Clone, Copy, Debug)]
pub struct TokenRef<'a> {
    /// Where the token is: sequence, phase, token index inside the phase.
    pub pos: TokenPos,
    /// Every MoE layer's selection, layer order, `ids_per_token` ids.
    pub ids: &'a [u16],
    /// The router weights of `ids` when the trace records them.
    pub weights: Option<&'a [f32]>,
    sel_offsets: &'a [usize],
}

impl<'a> TokenRef<'a> {
    /// The selection (top-k expert ids, router order) of MoE layer `m` (index into the
    /// key space's MoE layers, not the model layer index).
    #[inline]
    pub fn selection(&self, m: usize) -> &'a [u16] {
        &self.ids[self.sel_offsets[m]..self.sel_offsets[m + 1]]
    }

    /// Router weights of MoE layer `m`'s selection, when recorded.
    #[inline]
    pub fn selection_weights(&self, m: usize) -> Option<&'a [f32]> {
        self.weights
            .map(|w| &w[self.sel_offsets[m]..self.sel_offsets[m + 1]])
    }
}

/// Streams a trace token by token from any byte source, reading 4 MiB blocks.
///
/// Memory use is one block plus its decoded ids, whatever the trace size. After an error
/// the reader is spent: later calls return the error "reader already failed".
pub struct TraceReader<R: Read = File> {
    file: String,
    src: R,
    header: Header,
    ks: KeySpace,
    layout: Layout,
    checker: SelectionChecker,
    cursor: TokenCursor,
    crc: crc32fast::Hasher,
    raw: Vec<u8>,
    ids: Vec<u16>,
    weights: Vec<f32>,
    block_cap_tokens: usize,
    block_tokens: usize,
    next_in_block: usize,
    tokens_unread: u128,
    /// File offset of the current block's first record.
    block_offset: u64,
    /// File offset of the checksum.
    checksum_offset: u64,
    /// File offset of the first token record.
    payload_offset: u64,
    state: State,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    Done,
    Failed,
}

impl<R: Read> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("file", &self.file)
            .field("next_position", &self.cursor.current())
            .field("layout", &self.layout)
            .finish()
    }
}

impl TraceReader<File> {
    /// Open a trace file and read and check its header.
    ///
    /// Errors: I/O, bad magic, unsupported version, header too large / corrupt / not
    /// decodable, invalid geometry, a payload size that disagrees with the file size.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let name = path.as_ref().display().to_string();
        let f = File::open(path.as_ref()).map_err(|e| TraceError::io(&name, "opening", e))?;
        let len = f
            .metadata()
            .map_err(|e| TraceError::io(&name, "reading the file size", e))?
            .len();
        TraceReader::from_reader(f, len, &name)
    }
}

fn read_exact_at<R: Read>(
    src: &mut R,
    buf: &mut [u8],
    file: &str,
    what: &'static str,
    needed: u64,
    len: u64,
) -> Result<(), TraceError> {
    src.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            // The source ended before the length we were told (a file that shrank).
            TraceError::Truncated {
                file: file.to_string(),
                what,
                needed,
                len,
            }
        } else {
            TraceError::io(file, "reading", e)
        }
    })
}

impl<R: Read> TraceReader<R> {
    /// Read the header from `src`, which holds `len` bytes in all; `file` names it in errors.
    pub fn from_reader(mut src: R, len: u64, file: &str) -> Result<Self, TraceError> {
        let truncated = |what: &'static str, needed: u64| TraceError::Truncated {
            file: file.to_string(),
            what,
            needed,
            len,
        };
        // Magic first, so that a short non-trace file is reported as such.
        let magic_len = len.min(MAGIC.len() as u64) as usize;
        let mut magic = [0u8; 8];
        read_exact_at(&mut src, &mut magic[..magic_len], file, "magic", 8, len)?;
        if magic[..magic_len] != MAGIC[..magic_len] {
            return Err(TraceError::BadMagic {
                file: file.to_string(),
                found: magic[..magic_len].to_vec(),
            });
        }
        if len < PREAMBLE_LEN {
            return Err(truncated(
                "preamble (magic, version, header length, header checksum)",
                PREAMBLE_LEN,
            ));
        }
        let mut pre = [0u8; 12];
        read_exact_at(&mut src, &mut pre, file, "preamble", PREAMBLE_LEN, len)?;
        let version = u32::from_le_bytes(pre[0..4].try_into().unwrap());
        let header_len = u32::from_le_bytes(pre[4..8].try_into().unwrap()) as u64;
        let header_crc = u32::from_le_bytes(pre[8..12].try_into().unwrap());
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(TraceError::UnsupportedVersion {
                file: file.to_string(),
                found: version,
                supported: VERSION,
            });
        }
        if header_len > MAX_HEADER_BYTES {
            return Err(TraceError::HeaderTooLarge {
                file: file.to_string(),
                len: header_len,
                max: MAX_HEADER_BYTES,
            });
        }
        let fixed = PREAMBLE_LEN + header_len + CHECKSUM_LEN;
        if len < fixed {
            return Err(truncated("header and payload checksum", fixed));
        }
        // Bounded: header_len <= MAX_HEADER_BYTES and <= the file length.
        let mut hbytes = vec![0u8; header_len as usize];
        read_exact_at(&mut src, &mut hbytes, file, "header", fixed, len)?;
        let computed = crc32fast::hash(&hbytes);
        if computed != header_crc {
            return Err(TraceError::HeaderChecksum {
                file: file.to_string(),
                stored: header_crc,
                computed,
                end: PREAMBLE_LEN + header_len,
            });
        }
        let header = decode_header(&hbytes, version, file)?;
        validate_geometry(&header.model, file)?;
        validate_passes(&header, file)?;
        let layout = Layout::of(&header);
        let found = len - fixed;
        if layout.payload_bytes != found as u128 {
            return Err(TraceError::PayloadSize {
                file: file.to_string(),
                offset: PREAMBLE_LEN + header_len,
                expected: layout.payload_bytes,
                found,
                hint: if layout.payload_bytes > found as u128 {
                    "the file is truncated or its header is corrupt"
                } else {
                    "trailing bytes after the payload, or a corrupt header"
                },
            });
        }
        let ks = KeySpace::new(&header.model);
        // The payload fits in the file, so this cap is bounded by the file size too.
        let block_cap_tokens = (READ_BLOCK_BYTES / layout.record_bytes.max(1))
            .max(1)
            .min(layout.total_tokens.min(usize::MAX as u128) as usize);
        Ok(TraceReader {
            file: file.to_string(),
            src,
            checker: SelectionChecker::new(&ks),
            cursor: TokenCursor::new(&header),
            crc: crc32fast::Hasher::new(),
            raw: Vec::new(),
            ids: Vec::new(),
            weights: Vec::new(),
            block_cap_tokens,
            block_tokens: 0,
            next_in_block: 0,
            tokens_unread: layout.total_tokens,
            block_offset: PREAMBLE_LEN + header_len,
            checksum_offset: PREAMBLE_LEN + header_len + found,
            payload_offset: PREAMBLE_LEN + header_len,
            state: State::Reading,
            header,
            ks,
            layout,
        })
    }

    /// The trace header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The key space of the header's model.
    pub fn keyspace(&self) -> &KeySpace {
        &self.ks
    }

    /// Record and payload sizes.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The name errors use for this source (the path for files).
    pub fn file_name(&self) -> &str {
        &self.file
    }

    /// File offset of the first token record: records follow in payload order (sequence by
    /// sequence, prefill before decode), [`Layout::record_bytes`] each, the ids of a record
    /// first (little-endian u16, [`Layout::ids_per_token`] of them), for a caller that reads
    /// records at their offsets instead of in order.
    pub fn payload_offset(&self) -> u64 {
        self.payload_offset
    }

    /// Read the next block of records, check-summing the raw bytes and decoding ids/weights.
    fn fill_block(&mut self) -> Result<(), TraceError> {
        let n = (self.block_cap_tokens as u128).min(self.tokens_unread) as usize;
        let rb = self.layout.record_bytes;
        self.block_offset += (self.block_tokens * rb) as u64;
        self.raw.resize(n * rb, 0);
        let needed = self.checksum_offset + CHECKSUM_LEN;
        read_exact_at(
            &mut self.src,
            &mut self.raw,
            &self.file,
            "payload",
            needed,
            needed,
        )?;
        self.crc.update(&self.raw);
        let ipt = self.layout.ids_per_token;
        self.ids.resize(n * ipt, 0);
        if self.header.has_weights {
            self.weights.resize(n * ipt, 0.0);
            let id_bytes = ipt * ID_BYTES;
            for ((rec, ids), ws) in self
                .raw
                .chunks_exact(rb)
                .zip(self.ids.chunks_exact_mut(ipt))
                .zip(self.weights.chunks_exact_mut(ipt))
            {
                decode_u16(&rec[..id_bytes], ids);
                for (w, c) in ws
                    .iter_mut()
                    .zip(rec[id_bytes..].chunks_exact(WEIGHT_BYTES))
                {
                    *w = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        } else {
            decode_u16(&self.raw, &mut self.ids);
        }
        self.tokens_unread -= n as u128;
        self.block_tokens = n;
        self.next_in_block = 0;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TraceError> {
        let mut b = [0u8; 4];
        let needed = self.checksum_offset + CHECKSUM_LEN;
        read_exact_at(
            &mut self.src,
            &mut b,
            &self.file,
            "payload checksum",
            needed,
            needed,
        )?;
        let stored = u32::from_le_bytes(b);
        let computed = self.crc.clone().finalize();
        if stored != computed {
            return Err(TraceError::Checksum {
                file: self.file.clone(),
                stored,
                computed,
                offset: self.checksum_offset,
            });
        }
        Ok(())
    }

    /// The next token, validated; `Ok(None)` after the last token once the payload
    /// checksum has been verified.
    ///
    /// Errors: an id out of range or repeated (naming sequence, phase, token, layer and
    /// byte offset), a checksum mismatch at the end, I/O errors.
    #[inline]
    pub fn next_token(&mut self) -> Result<Option<TokenRef<'_>>, TraceError> {
        match self.state {
            State::Reading => {}
            State::Done => return Ok(None),
            State::Failed => {
                return Err(TraceError::invalid(
                    &self.file,
                    "reader already failed; open the file again",
                ))
            }
        }
        let Some(pos) = self.cursor.current() else {
            let r = self.finish();
            self.state = if r.is_ok() {
                State::Done
            } else {
                State::Failed
            };
            return r.map(|_| None);
        };
        if self.next_in_block == self.block_tokens {
            if let Err(e) = self.fill_block() {
                self.state = State::Failed;
                return Err(e);
            }
        }
        let i = self.next_in_block;
        let ipt = self.layout.ids_per_token;
        let ids = &self.ids[i * ipt..(i + 1) * ipt];
        if let Err(bad) = self.checker.check_token(ids) {
            self.state = State::Failed;
            let offset = self.block_offset + (i * self.layout.record_bytes) as u64;
            return Err(bad.into_error(&self.file, &self.ks, pos, Some(offset)));
        }
        self.next_in_block += 1;
        self.cursor.advance();
        Ok(Some(TokenRef {
            pos,
            ids,
            weights: self
                .header
                .has_weights
                .then(|| &self.weights[i * ipt..(i + 1) * ipt]),
            sel_offsets: &self.ks.sel_offsets,
        }))
    }

    /// Read every remaining token into an in-memory [`Trace`].
    pub fn into_trace(mut self) -> Result<Trace, TraceError> {
        let ipt = self.layout.ids_per_token;
        let has_w = self.header.has_weights;
        // Allocations are bounded by the payload size, already checked against the file size.
        let mut sequences: Vec<SequenceData> = self
            .header
            .sequences
            .iter()
            .map(|s| {
                let block = |n: u64| TokenBlock {
                    ids: Vec::with_capacity(n as usize * ipt),
                    weights: has_w.then(|| Vec::with_capacity(n as usize * ipt)),
                };
                SequenceData {
                    prefill: block(s.prefill_tokens),
                    decode: block(s.decode_tokens),
                }
            })
            .collect();
        while let Some(tok) = self.next_token()? {
            let seq = &mut sequences[tok.pos.sequence];
            let block = match tok.pos.phase {
                Phase::Prefill => &mut seq.prefill,
                Phase::Decode => &mut seq.decode,
            };
            block.ids.extend_from_slice(tok.ids);
            if let (Some(dst), Some(w)) = (block.weights.as_mut(), tok.weights) {
                dst.extend_from_slice(w);
            }
        }
        Ok(Trace {
            header: self.header,
            sequences,
        })
    }
}

/// Decode little-endian u16s; `dst.len() * 2 == src.len()`.
#[inline]
fn decode_u16(src: &[u8], dst: &mut [u16]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(ID_BYTES)) {
        *d = u16::from_le_bytes([c[0], c[1]]);
    }
}

/// Load a whole trace file into memory, fully validated (see [`TraceReader`]).
pub fn read_file(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
    TraceReader::open(path)?.into_trace()
}

/// Load a whole trace from bytes (e.g. one embedded with `include_bytes!`); `name` stands
/// for the file in error messages.
pub fn read_bytes(bytes: &[u8], name: &str) -> Result<Trace, TraceError> {
    TraceReader::from_reader(bytes, bytes.len() as u64, name)?.into_trace()
}

/// Read and check only the header of a trace file (and that its size matches the header).
pub fn read_header(path: impl AsRef<Path>) -> Result<Header, TraceError> {
    Ok(TraceReader::open(path)?.header)
}
