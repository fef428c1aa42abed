//! Exporters: CSV rows (the format [`crate::import_rows`] reads back) and libCacheSim's
//! `oracleGeneral` binary request trace, so results can be cross-checked with that simulator.
//!
//! Both write atomically: a temporary file in the destination directory, renamed when done.

use crate::error::TraceError;
use crate::reader::TraceReader;
use crate::trace::{Phase, PhaseSel, Trace};
use std::io::{BufWriter, Read, Write};
use std::path::Path;

/// Bytes of one oracleGeneral record: u32 time, u64 object id, u32 size, i64 next access.
pub const ORACLE_RECORD_BYTES: usize = 24;

/// Write to a temporary file next to `path`, then rename it over `path`.
pub(crate) fn write_atomically<T>(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<&mut std::fs::File>) -> Result<T, TraceError>,
) -> Result<T, TraceError> {
    let file = path.display().to_string();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".export-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| TraceError::io(&file, "creating a temporary file in its directory", e))?;
    let value = {
        let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
        let v = body(&mut w)?;
        w.flush().map_err(|e| TraceError::io(&file, "writing", e))?;
        v
    };
    crate::file_mode::share_file(tmp.as_file())
        .map_err(|e| TraceError::io(&file, "setting permissions", e))?;
    tmp.persist(path)
        .map_err(|e| TraceError::io(&file, "renaming the finished file into place", e.error))?;
    Ok(value)
}

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Prefill => "prefill",
        Phase::Decode => "decode",
    }
}

fn join<T: ToString>(xs: &[T]) -> String {
    xs.iter().map(T::to_string).collect::<Vec<_>>().join(" ")
}

/// Stream a trace to CSV rows `sequence,phase,token,layer,experts[,weights]` (ids and
/// weights space-separated), one row per token and MoE layer, for tokens of `phases`.
/// Returns the number of rows written.
pub fn export_csv<R: Read>(
    reader: &mut TraceReader<R>,
    phases: PhaseSel,
    out: impl Write,
) -> Result<u64, TraceError> {
    let file = reader.file_name().to_string();
    let csv_err = |e: csv::Error| TraceError::invalid(&file, format!("writing CSV: {e}"));
    let has_w = reader.header().has_weights;
    let names: Vec<String> = reader
        .header()
        .sequences
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let moe_layers = reader.keyspace().moe_layers.clone();
    let mut w = csv::Writer::from_writer(out);
    let mut head = vec!["sequence", "phase", "token", "layer", "experts"];
    if has_w {
        head.push("weights");
    }
    w.write_record(&head).map_err(csv_err)?;
    let mut rows = 0u64;
    while let Some(tok) = reader.next_token()? {
        if !phases.includes(tok.pos.phase) {
            continue;
        }
        for (m, &layer) in moe_layers.iter().enumerate() {
            let mut rec = vec![
                names[tok.pos.sequence].clone(),
                phase_name(tok.pos.phase).to_string(),
                tok.pos.token.to_string(),
                layer.to_string(),
                join(tok.selection(m)),
            ];
            if let Some(ws) = tok.selection_weights(m) {
                rec.push(join(ws));
            }
            w.write_record(&rec).map_err(csv_err)?;
            rows += 1;
        }
    }
    w.flush()
        .map_err(|e| TraceError::io(&file, "writing CSV", e))?;
    Ok(rows)
}

/// [`export_csv`] of the trace file `input` into the file `path`, atomically.
pub fn export_csv_file(
    input: impl AsRef<Path>,
    phases: PhaseSel,
    path: impl AsRef<Path>,
) -> Result<u64, TraceError> {
    let mut reader = TraceReader::open(input)?;
    write_atomically(path.as_ref(), |w| export_csv(&mut reader, phases, w))
}

/// One libCacheSim `oracleGeneral` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleRecord {
    /// `clock_time`: the index of the token among the exported tokens (0-based).
    pub time: u32,
    /// `obj_id`: the [`crate::KeySpace`] key of (MoE layer, expert), `m * experts + e` for
    /// uniform models.
    pub obj_id: u64,
    /// `obj_size` in bytes (1 when sizes are ignored).
    pub size: u32,
    /// `next_access_vtime`: the 1-based position in the request stream of the next request
    /// for the same object, or -1 when there is none (libCacheSim's traceConv convention).
    pub next_access_vtime: i64,
}

impl OracleRecord {
    /// The 24 little-endian bytes of this record.
    pub fn to_bytes(&self) -> [u8; ORACLE_RECORD_BYTES] {
        let mut b = [0u8; ORACLE_RECORD_BYTES];
        b[0..4].copy_from_slice(&self.time.to_le_bytes());
        b[4..12].copy_from_slice(&self.obj_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.next_access_vtime.to_le_bytes());
        b
    }

    /// Parse 24 little-endian bytes.
    pub fn from_bytes(b: &[u8; ORACLE_RECORD_BYTES]) -> Self {
        OracleRecord {
            time: u32::from_le_bytes(b[0..4].try_into().unwrap()),
            obj_id: u64::from_le_bytes(b[4..12].try_into().unwrap()),
            size: u32::from_le_bytes(b[12..16].try_into().unwrap()),
            next_access_vtime: i64::from_le_bytes(b[16..24].try_into().unwrap()),
        }
    }
}

/// The request stream of `trace` for `phases`: sequences in order, each sequence's tokens
/// (prefill before decode), each token's MoE layers in order, each selection in router order;
/// every object has size `object_size` bytes. Memory: 24 bytes per request plus one u64 per key.
///
/// Errors: more than 2^32 - 1 tokens (the u32 time field).
pub fn oracle_general_records(
    trace: &Trace,
    phases: PhaseSel,
    object_size: u32,
) -> Result<Vec<OracleRecord>, String> {
    let ks = trace.keyspace();
    let mut out = Vec::with_capacity(trace.total_tokens(phases) * ks.ids_per_token());
    let mut time: u64 = 0;
    for s in 0..trace.sequences.len() {
        for &phase in phases.phases() {
            for t in 0..trace.tokens(s, phase) {
                let tok_time = u32::try_from(time).map_err(|_| {
                    "more than 4,294,967,295 tokens do not fit the u32 time field".to_string()
                })?;
                for m in 0..ks.num_moe_layers() {
                    for &e in trace.selection(&ks, s, phase, t, m) {
                        out.push(OracleRecord {
                            time: tok_time,
                            obj_id: ks.key(m, e) as u64,
                            size: object_size,
                            next_access_vtime: -1,
                        });
                    }
                }
                time += 1;
            }
        }
    }
    // Backward pass: the next request of each key, as a 1-based position.
    let mut next = vec![-1i64; ks.num_keys()];
    for (i, r) in out.iter_mut().enumerate().rev() {
        let slot = &mut next[r.obj_id as usize];
        r.next_access_vtime = *slot;
        *slot = i as i64 + 1;
    }
    Ok(out)
}

/// Write [`oracle_general_records`] of the trace file `input` into `path`, atomically.
/// Returns the number of records.
pub fn export_oracle_general_file(
    input: impl AsRef<Path>,
    phases: PhaseSel,
    object_size: u32,
    path: impl AsRef<Path>,
) -> Result<u64, TraceError> {
    let trace = crate::reader::read_file(input.as_ref())?;
    let out = path.as_ref().display().to_string();
    let records = oracle_general_records(&trace, phases, object_size)
        .map_err(|d| TraceError::invalid(&out, d))?;
    write_atomically(path.as_ref(), |w| {
        for r in &records {
            w.write_all(&r.to_bytes())
                .map_err(|e| TraceError::io(&out, "writing", e))?;
        }
        Ok(records.len() as u64)
    })
}

/// Parse an oracleGeneral file's bytes (for checks and tests).
///
/// Errors: a length that is not a multiple of 24 bytes.
pub fn parse_oracle_general(bytes: &[u8]) -> Result<Vec<OracleRecord>, String> {
    if !bytes
        .chunks_exact(ORACLE_RECORD_BYTES)
        .remainder()
        .is_empty()
    {
        return Err(format!(
            "{} bytes is not a whole number of {ORACLE_RECORD_BYTES}-byte records",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(ORACLE_RECORD_BYTES)
        .map(|c| OracleRecord::from_bytes(c.try_into().unwrap()))
        .collect())
}
