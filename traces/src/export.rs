//! Exporters: CSV rows (the format [`crate::import_rows`] reads back) and libCacheSim's
//! `oracleGeneral` binary request trace, so results can be cross-checked with that simulator.
//!
//! Both write atomically: a temporary file in the destination directory, renamed when done.

use crate::error::TraceError;
use crate::reader::TraceReader;
use crate::trace::{PhaseSel, Trace};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Bytes of one oracleGeneral record: u32 time, u64 object id, u32 size, i64 next access.
pub const ORACLE_RECORD_BYTES: usize = 24;

/// Write to a temporary file next to `path` through a 1 MiB buffer, then rename it over `path`.
pub(crate) fn write_atomically<T>(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<&mut std::fs::File>) -> Result<T, TraceError>,
) -> Result<T, TraceError> {
    let file = path.display().to_string();
    write_atomically_file(path, |f| {
        let mut w = BufWriter::with_capacity(1 << 20, f);
        let v = body(&mut w)?;
        w.flush().map_err(|e| TraceError::io(&file, "writing", e))?;
        Ok(v)
    })
}

/// Hand `body` a temporary file next to `path` (for writers that seek), then rename it over
/// `path`; on error the temporary file is removed and `path` is untouched.
fn write_atomically_file<T>(
    path: &Path,
    body: impl FnOnce(&mut std::fs::File) -> Result<T, TraceError>,
) -> Result<T, TraceError> {
    let file = path.display().to_string();
    // Declared before the file, so dropped after it: removed, then unregistered.
    let _live: crate::cleanup::Registered;
    let mut tmp = crate::cleanup::temp_file_beside(path, ".export-")?;
    _live = crate::cleanup::register(tmp.path());
    let value = body(tmp.as_file_mut())?;
    crate::file_mode::share_file(tmp.as_file())
        .map_err(|e| TraceError::io(&file, "setting permissions", e))?;
    tmp.persist(path)
        .map_err(|e| TraceError::io(&file, "renaming the finished file into place", e.error))?;
    Ok(value)
}

pub(crate) fn join<T: ToString>(xs: &[T]) -> String {
    xs.iter().map(T::to_string).collect::<Vec<_>>().join(" ")
}

/// Stream a trace to CSV rows `sequence,phase,token,layer,experts[,weights]` (ids and
/// weights space-separated), one row per token and MoE layer, for tokens of `phases`. A
/// trace with forward passes is written pass by pass instead, with a `pass` column
/// ([`crate::export_passes`]).
/// Returns the number of rows written.
pub fn export_csv<R: Read>(
    reader: &mut TraceReader<R>,
    phases: PhaseSel,
    out: impl Write,
) -> Result<u64, TraceError> {
    let file = reader.file_name().to_string();
    // an I/O failure stays an I/O error, so its kind (a closed pipe) reaches the caller
    let csv_err = |e: csv::Error| match e.kind() {
        csv::ErrorKind::Io(io) => TraceError::io(
            &file,
            "writing CSV",
            std::io::Error::new(io.kind(), io.to_string()),
        ),
        _ => TraceError::invalid(&file, format!("writing CSV: {e}")),
    };
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
    let passes = reader.header().passes.clone();
    if passes.is_some() {
        head.push("pass");
    }
    w.write_record(&head).map_err(csv_err)?;
    if let Some(passes) = passes {
        // a trace with passes: the rows of its passes, as the hook log they would come from
        let rows = crate::export_passes::write_rows(reader, phases, &passes, |rec| {
            w.write_record(&rec).map_err(csv_err)
        })?;
        w.flush()
            .map_err(|e| TraceError::io(&file, "writing CSV", e))?;
        return Ok(rows);
    }
    let mut rows = 0u64;
    while let Some(tok) = reader.next_token()? {
        if !phases.includes(tok.pos.phase) {
            continue;
        }
        for (m, &layer) in moe_layers.iter().enumerate() {
            let mut rec = vec![
                names[tok.pos.sequence].clone(),
                tok.pos.phase.to_string(),
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

/// Records per write of [`export_oracle_general_file`]: 43,690 x 24 bytes, just under 1 MiB.
pub const ORACLE_CHUNK_RECORDS: usize = (1 << 20) / ORACLE_RECORD_BYTES;

/// Write the bytes of [`oracle_general_records`] of `trace` into `out` without holding them:
/// a backward pass over the requests (the next access of a key is only known from behind)
/// fills a buffer of `chunk_records` records from its end and writes each full buffer at its
/// offset, so memory is `chunk_records` x 24 bytes plus one i64 per key, whatever the trace
/// length. `out` ends up holding exactly the records (24 bytes each) from offset 0.
/// Returns the number of records.
///
/// Errors: more than 2^32 tokens (the u32 time field), as `Err(detail)`; I/O errors of `out`.
pub fn write_oracle_general<W: Write + Seek>(
    trace: &Trace,
    phases: PhaseSel,
    object_size: u32,
    out: &mut W,
    chunk_records: usize,
) -> Result<u64, OracleWriteError> {
    let ks = trace.keyspace();
    let total_tokens = trace.total_tokens(phases) as u64;
    if total_tokens > u64::from(u32::MAX) + 1 {
        return Err(OracleWriteError::TooManyTokens);
    }
    let mut total = 0u64;
    for s in 0..trace.sequences.len() {
        for &phase in phases.phases() {
            for t in 0..trace.tokens(s, phase) {
                for m in 0..ks.num_moe_layers() {
                    total += trace.selection(&ks, s, phase, t, m).len() as u64;
                }
            }
        }
    }
    let chunk = chunk_records.max(1);
    let mut buf = vec![0u8; chunk * ORACLE_RECORD_BYTES];
    // `buf[fill..]` holds records `i..i + (len - fill) / 24` of the stream.
    let mut fill = buf.len();
    let mut next = vec![-1i64; ks.num_keys()];
    let mut i = total;
    let mut time = total_tokens;
    let flush = |buf: &[u8], first: u64, out: &mut W| -> std::io::Result<()> {
        out.seek(SeekFrom::Start(first * ORACLE_RECORD_BYTES as u64))?;
        out.write_all(buf)
    };
    for s in (0..trace.sequences.len()).rev() {
        for &phase in phases.phases().iter().rev() {
            for t in (0..trace.tokens(s, phase)).rev() {
                time -= 1;
                for m in (0..ks.num_moe_layers()).rev() {
                    for &e in trace.selection(&ks, s, phase, t, m).iter().rev() {
                        i -= 1;
                        let key = ks.key(m, e);
                        let slot = &mut next[key as usize];
                        let rec = OracleRecord {
                            time: time as u32,
                            obj_id: u64::from(key),
                            size: object_size,
                            next_access_vtime: *slot,
                        };
                        *slot = i as i64 + 1;
                        if fill == 0 {
                            flush(&buf, i + 1, out)?;
                            fill = buf.len();
                        }
                        fill -= ORACLE_RECORD_BYTES;
                        buf[fill..fill + ORACLE_RECORD_BYTES].copy_from_slice(&rec.to_bytes());
                    }
                }
            }
        }
    }
    debug_assert_eq!(i, 0);
    flush(&buf[fill..], 0, out)?;
    out.seek(SeekFrom::Start(total * ORACLE_RECORD_BYTES as u64))?;
    Ok(total)
}

/// Why [`write_oracle_general`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OracleWriteError {
    /// The trace has more tokens than the u32 `clock_time` field can number.
    #[error("more than 4,294,967,296 tokens do not fit the u32 time field")]
    TooManyTokens,
    /// Writing the output failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Write the oracleGeneral records of the trace file `input` into `path`, atomically and
/// streamed ([`write_oracle_general`]): memory is the trace plus about 1 MiB, not the output.
/// Returns the number of records.
pub fn export_oracle_general_file(
    input: impl AsRef<Path>,
    phases: PhaseSel,
    object_size: u32,
    path: impl AsRef<Path>,
) -> Result<u64, TraceError> {
    let trace = crate::reader::read_file(input.as_ref())?;
    let out = path.as_ref().display().to_string();
    write_atomically_file(path.as_ref(), |f| {
        write_oracle_general(&trace, phases, object_size, f, ORACLE_CHUNK_RECORDS).map_err(|e| {
            match e {
                OracleWriteError::TooManyTokens => TraceError::invalid(&out, e.to_string()),
                OracleWriteError::Io(e) => TraceError::io(&out, "writing", e),
            }
        })
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
