//! The binary trace format, versions 1 to 3: constants, the header codec, the payload layout and the
//! validation rules shared by the reader and the writer. `FORMAT.md` documents the byte layout.
//!
//! ```text
//! offset  size  field
//! 0       8     magic  b"MOETRACE"
//! 8       4     format version, u32 LE (1, 2 or 3: see `format_layouts`)
//! 12      4     header length H in bytes, u32 LE (<= MAX_HEADER_BYTES)
//! 16      4     CRC-32 (IEEE) of the header bytes, u32 LE
//! 20      H     header: bincode 2 (standard config: little-endian, varint) of `Header`
//! 20+H    P     payload: per sequence (header order), prefill tokens then decode tokens;
//!               per token: the ids of every MoE layer (layer order, top-k in router order)
//!               as u16 LE, then, when `has_weights`, the same count of f32 LE router weights
//! 20+H+P  4     CRC-32 (IEEE) of the payload bytes, u32 LE
//! ```

use crate::error::{TokenPos, TraceError};
use crate::model::{Header, ModelSpec};
use crate::trace::KeySpace;

/// The 8 magic bytes every trace file starts with.
pub const MAGIC: [u8; 8] = *b"MOETRACE";
/// The newest format version this build writes and reads. A trace is written in the oldest
/// version that holds its header ([`version_for`]), so traces that use nothing new stay
/// version 1, byte for byte.
pub const VERSION: u32 = 3;
/// The oldest format version this build reads.
pub const OLDEST_VERSION: u32 = 1;
/// Bytes before the header: magic (8), version (4), header length (4), header CRC-32 (4).
pub const PREAMBLE_LEN: u64 = 20;
/// Bytes of the trailing payload checksum.
pub const CHECKSUM_LEN: u64 = 4;
/// Largest header accepted, in bytes (64 MiB). A header lists the sequences, about 20 bytes
/// each plus the name, so this allows millions of sequences while bounding what a corrupt
/// length field can make the reader allocate. (A design limit of this format, not a measurement.)
pub const MAX_HEADER_BYTES: u64 = 64 << 20;

/// Most layers a trace's model may have (65,536). Far above any MoE model (DeepSeek-V3 has 61
/// layers); it bounds the per-layer tables that a reader, an importer or the generator
/// allocates from a count it was given. (A design limit of this format, not a measurement.)
pub const MAX_LAYERS: usize = 1 << 16;

/// Bytes of one stored expert id (u16 little-endian).
pub const ID_BYTES: usize = 2;
/// Bytes of one stored router weight (f32 little-endian).
pub const WEIGHT_BYTES: usize = 4;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<{ MAX_HEADER_BYTES as usize }>()
}

/// The format version a header is written in: 1 unless it needs version 2's fields (2) or
/// has version 3's fields (3: a shared expert FFN size, forward passes).
pub fn version_for(header: &Header) -> u32 {
    if crate::format_layouts::needs_v3(header) {
        3
    } else if crate::format_layouts::needs_v2(header) {
        2
    } else {
        1
    }
}

/// Encode a header with bincode 2 (standard configuration) in the layout of
/// [`version_for`]`(header)`. Fails only when the encoding exceeds [`MAX_HEADER_BYTES`]; the
/// message says so.
pub fn encode_header(header: &Header) -> Result<Vec<u8>, String> {
    crate::format_layouts::encode(header, version_for(header), bincode_config()).map_err(|e| {
        format!("the header does not encode within the {MAX_HEADER_BYTES}-byte cap ({e}); split the trace into several files")
    })
}

/// Encode a header in the layout of format `version` (1, 2 or 3) whatever it needs: for tests and
/// tools that must write what an older writer wrote. Fails as [`encode_header`] does.
pub fn encode_header_as(header: &Header, version: u32) -> Result<Vec<u8>, String> {
    crate::format_layouts::encode(header, version, bincode_config()).map_err(|e| {
        format!("the header does not encode in the version-{version} layout within the {MAX_HEADER_BYTES}-byte cap ({e})")
    })
}

/// Decode a header of format `version` (1, 2 or 3): the `H` bytes after the preamble; every byte
/// must be consumed. Errors (`HeaderDecode`) say in words which kind of field is broken; `file`
/// names the source.
pub fn decode_header(bytes: &[u8], version: u32, file: &str) -> Result<Header, TraceError> {
    let err = |detail: String| TraceError::HeaderDecode {
        file: file.to_string(),
        len: bytes.len() as u64,
        detail,
    };
    let (header, used) = crate::format_layouts::decode(bytes, version, bincode_config())
        .map_err(|e| err(decode_error_words(&e)))?;
    if version == 1 {
        if let Some(i) = header
            .model
            .layers
            .iter()
            .position(|l| l.is_unrecorded_moe())
        {
            return Err(TraceError::Geometry {
                file: file.to_string(),
                detail: format!(
                    "layer {i} has {} experts but top-k 0 (in format version 1 a dense layer must have 0 experts)",
                    header.model.layers[i].experts
                ),
            });
        }
    }
    if used != bytes.len() {
        return Err(err(format!(
            "the header decodes from {used} bytes but the length field says {}",
            bytes.len()
        )));
    }
    Ok(header)
}

/// What a bincode decoding error means for a trace header, in words: bincode 2's own
/// `Display` prints its Rust debug form (`Utf8 { inner: Utf8Error { .. } }`), which tells a
/// user nothing about the file.
fn decode_error_words(e: &bincode::error::DecodeError) -> String {
    use bincode::error::DecodeError as D;
    let int = |t: &bincode::error::IntegerType| format!("{t:?}").to_ascii_lowercase();
    match e {
        D::UnexpectedEnd { .. } => {
            "the header bytes end in the middle of a field (a length or count inside the header is corrupt)".into()
        }
        D::LimitExceeded => format!(
            "a length inside the header exceeds the {MAX_HEADER_BYTES}-byte header cap (the header is corrupt)"
        ),
        D::InvalidIntegerType { expected, found } => format!(
            "an integer field holds a {}-wide value where a {} belongs (the header is corrupt)",
            int(found),
            int(expected)
        ),
        D::Utf8 { inner } => format!(
            "a text field (model name, provenance or sequence name) is not valid UTF-8: {inner}"
        ),
        D::InvalidCharEncoding(_) => "a character field is not valid UTF-8".into(),
        D::InvalidBooleanValue(b) => {
            format!("a yes/no field holds the byte {b}, where only 0 (no) and 1 (yes) are valid")
        }
        D::UnexpectedVariant { found, .. } => format!(
            "an optional field holds the tag {found}, where only 0 (absent) and 1 (present) are valid"
        ),
        D::OutsideUsizeRange(n) => {
            format!("a length field holds {n}, beyond what this machine can address")
        }
        D::ArrayLengthMismatch { required, found } => {
            format!("a fixed-length field holds {found} items where {required} belong")
        }
        D::Io { inner, .. } => format!("reading the header: {inner}"),
        D::Other(why) => (*why).to_string(),
        D::OtherString(why) => why.clone(),
        _ => "the bytes are not a version-1 trace header (the header is corrupt)".into(),
    }
}

/// Check the model geometry: at most [`MAX_LAYERS`] layers (so the expert instances of all
/// layers fit the u32 key numbering), every layer dense (0 experts, top-k 0), MoE but not
/// recorded (experts, top-k 0) or with 1 <= top-k <= experts (experts <= 65,535 by the u16
/// type), at least one layer with recorded selections, at least one matrix per expert, and a
/// hidden and expert FFN size, where given, above 0 with matrices x hidden x FFN within u64.
pub fn validate_geometry(model: &ModelSpec, file: &str) -> Result<(), TraceError> {
    let err = |detail: String| TraceError::Geometry {
        file: file.to_string(),
        detail,
    };
    for (what, v) in [
        ("hidden size", model.hidden_size),
        ("expert FFN size", model.expert_ffn),
        ("shared expert FFN size", model.shared_expert_ffn),
    ] {
        if v == Some(0) {
            return Err(err(format!("the {what} is 0")));
        }
    }
    if model.expert_matrices == 0 {
        return Err(err("an expert has 0 weight matrices".into()));
    }
    if let (Some(h), Some(f)) = (model.hidden_size, model.shared_expert_ffn) {
        if u64::from(model.expert_matrices)
            .checked_mul(u64::from(h))
            .and_then(|x| x.checked_mul(u64::from(f)))
            .is_none()
        {
            return Err(err(format!(
                "hidden size {h} x shared expert FFN size {f}: a shared expert's {} x hidden x FFN parameters overflow 64 bits", model.expert_matrices
            )));
        }
    }
    if let (Some(h), Some(f)) = (model.hidden_size, model.expert_ffn) {
        if u64::from(model.expert_matrices)
            .checked_mul(u64::from(h))
            .and_then(|x| x.checked_mul(u64::from(f)))
            .is_none()
        {
            return Err(err(format!(
                "hidden size {h} x expert FFN size {f}: an expert's {} x hidden x FFN parameters overflow 64 bits", model.expert_matrices
            )));
        }
    }
    // Keys are numbered with u32 (KeySpace): at most MAX_LAYERS x 65,535 experts =
    // 4,294,901,760 < 2^32 instances, so the layer bound also keeps the keys in range.
    if model.layers.len() > MAX_LAYERS {
        return Err(err(format!(
            "{} layers exceed the {MAX_LAYERS} this format allows",
            model.layers.len()
        )));
    }
    for (i, l) in model.layers.iter().enumerate() {
        if l.experts == 0 && l.top_k != 0 {
            return Err(err(format!(
                "layer {i} has no experts but top-k {}",
                l.top_k
            )));
        }
        if l.top_k > l.experts {
            return Err(err(format!(
                "layer {i} selects top-{} of only {} experts",
                l.top_k, l.experts
            )));
        }
    }
    if !model.layers.iter().any(|l| l.is_moe()) {
        return Err(err(format!(
            "the model has {} layers and none with routed experts whose selections were recorded",
            model.layers.len()
        )));
    }
    Ok(())
}

/// Check a header's forward passes, when it has any, against its sequences
/// ([`crate::model::check_passes`]).
pub fn validate_passes(header: &Header, file: &str) -> Result<(), TraceError> {
    match &header.passes {
        Some(p) => {
            crate::model::check_passes(p, &header.sequences).map_err(|detail| TraceError::Passes {
                file: file.to_string(),
                detail,
            })
        }
        None => Ok(()),
    }
}

/// Sizes derived from a header: what one token record and the whole payload occupy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Expert ids per token, summed over MoE layers.
    pub ids_per_token: usize,
    /// Bytes of one token record (ids, plus weights when present).
    pub record_bytes: usize,
    /// Tokens over all sequences and both phases (u128: a corrupt header cannot overflow it).
    pub total_tokens: u128,
    /// Payload bytes: `total_tokens * record_bytes`.
    pub payload_bytes: u128,
}

impl Layout {
    /// The layout a header implies (geometry assumed valid).
    pub fn of(header: &Header) -> Layout {
        let ks = KeySpace::new(&header.model);
        let ids_per_token = ks.ids_per_token();
        let record_bytes =
            ids_per_token * (ID_BYTES + if header.has_weights { WEIGHT_BYTES } else { 0 });
        let total_tokens: u128 = header
            .sequences
            .iter()
            .map(|s| s.prefill_tokens as u128 + s.decode_tokens as u128)
            .sum();
        Layout {
            ids_per_token,
            record_bytes,
            total_tokens,
            payload_bytes: total_tokens * record_bytes as u128,
        }
    }
}

/// What is wrong with one selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadId {
    OutOfRange { m: usize, id: u16, index: usize },
    Repeated { m: usize, id: u16, index: usize },
}

impl BadId {
    /// Turn into the error, given where the token is; `record_offset` is the byte offset of
    /// the token's record in the file when known.
    pub(crate) fn into_error(
        self,
        file: &str,
        ks: &KeySpace,
        pos: TokenPos,
        record_offset: Option<u64>,
    ) -> TraceError {
        let at = |index: usize| record_offset.map(|o| o + (index * ID_BYTES) as u64);
        match self {
            BadId::OutOfRange { m, id, index } => TraceError::IdOutOfRange {
                file: file.to_string(),
                pos,
                layer: ks.moe_layers[m],
                id,
                experts: ks.experts[m],
                offset: at(index),
            },
            BadId::Repeated { m, id, index } => TraceError::RepeatedId {
                file: file.to_string(),
                pos,
                layer: ks.moe_layers[m],
                id,
                offset: at(index),
            },
        }
    }
}

/// Validates token records: every id below its layer's expert count, no repeat inside one
/// selection. O(top-k) per selection: a stamp per expert id marks the ids seen in the
/// current selection, so nothing is cleared between selections.
pub(crate) struct SelectionChecker {
    experts: Vec<u16>,
    sel_offsets: Vec<usize>,
    stamps: Vec<u32>,
    stamp: u32,
}

impl SelectionChecker {
    pub(crate) fn new(ks: &KeySpace) -> Self {
        let max_experts = ks.experts.iter().copied().max().unwrap_or(0) as usize;
        SelectionChecker {
            experts: ks.experts.clone(),
            sel_offsets: ks.sel_offsets.clone(),
            stamps: vec![0; max_experts],
            stamp: 0,
        }
    }

    /// Check one token record (`ids.len() == ids_per_token`).
    #[inline]
    pub(crate) fn check_token(&mut self, ids: &[u16]) -> Result<(), BadId> {
        for m in 0..self.experts.len() {
            let (lo, hi) = (self.sel_offsets[m], self.sel_offsets[m + 1]);
            let experts = self.experts[m];
            self.stamp = self.stamp.wrapping_add(1);
            if self.stamp == 0 {
                // After 2^32 selections the stamps could alias: start over.
                self.stamps.fill(0);
                self.stamp = 1;
            }
            for (index, &id) in ids[lo..hi].iter().enumerate() {
                if id >= experts {
                    return Err(BadId::OutOfRange {
                        m,
                        id,
                        index: lo + index,
                    });
                }
                let slot = &mut self.stamps[id as usize];
                if *slot == self.stamp {
                    return Err(BadId::Repeated {
                        m,
                        id,
                        index: lo + index,
                    });
                }
                *slot = self.stamp;
            }
        }
        Ok(())
    }
}

/// Walks the token positions of a header in payload order, skipping empty phases.
#[derive(Clone, Debug)]
pub(crate) struct TokenCursor {
    /// (prefill, decode) token counts per sequence.
    counts: Vec<[u64; 2]>,
    sequence: usize,
    phase: usize,
    token: u64,
}

impl TokenCursor {
    pub(crate) fn new(header: &Header) -> Self {
        let counts = header
            .sequences
            .iter()
            .map(|s| [s.prefill_tokens, s.decode_tokens])
            .collect();
        let mut c = TokenCursor {
            counts,
            sequence: 0,
            phase: 0,
            token: 0,
        };
        c.skip_empty();
        c
    }

    fn skip_empty(&mut self) {
        while self.sequence < self.counts.len()
            && self.token >= self.counts[self.sequence][self.phase]
        {
            self.token = 0;
            if self.phase == 0 {
                self.phase = 1;
            } else {
                self.phase = 0;
                self.sequence += 1;
            }
        }
    }

    /// The position of the next token, or None after the last one.
    #[inline]
    pub(crate) fn current(&self) -> Option<TokenPos> {
        (self.sequence < self.counts.len()).then_some(TokenPos {
            sequence: self.sequence,
            phase: if self.phase == 0 {
                crate::trace::Phase::Prefill
            } else {
                crate::trace::Phase::Decode
            },
            token: self.token,
        })
    }

    #[inline]
    pub(crate) fn advance(&mut self) {
        self.token += 1;
        self.skip_empty();
    }
}
