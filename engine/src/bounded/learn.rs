//! The profile trace a learning predictor (`static`, `next-layer`, `eam`) learns from, read
//! from its file each time a predictor learns instead of loaded: the groups of
//! [`crate::engine::ProfileGroups`], from [`RoundRobin`] one request per step. Memory: the
//! reader's record buffers, whatever the profile's length; what the predictor keeps is its
//! own (`eam`: one sparse matrix per profile sequence).

use super::source::RoundRobin;
use crate::engine::{ProfileGroups, Seen};
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::Mutex;
use traces::{KeySpace, PhaseSel};

/// The tokens of `phases` of the profile trace file at `path`, as groups.
pub(crate) struct FileProfile<'a> {
    path: &'a Path,
    ks: &'a KeySpace,
    phases: PhaseSel,
    sequences: usize,
    /// The first error of a reading, which ends it: [`ProfileGroups::each_group`] cannot
    /// return one, so the run asks [`FileProfile::check`] after its predictors learned.
    error: Mutex<Option<anyhow::Error>>,
}

impl<'a> FileProfile<'a> {
    /// The profile trace at `path` (key space `ks`), its records and checksum validated by a
    /// pass of [`traces::TraceReader`] first, since [`RoundRobin`] checks only the ids'
    /// ranges. Errors: the file's, naming `--profile-trace`.
    pub(crate) fn open(path: &'a Path, ks: &'a KeySpace, phases: PhaseSel) -> Result<Self> {
        let sequences = super::open(path, "--profile-trace")?
            .header()
            .sequences
            .len();
        super::each_record(path, "--profile-trace", phases, &|_| {}, |_| {})?;
        Ok(FileProfile {
            path,
            ks,
            phases,
            sequences,
            error: Mutex::new(None),
        })
    }

    /// The error that ended a reading of the file (it changed after [`FileProfile::open`]
    /// validated it), if any.
    pub(crate) fn check(&self) -> Result<()> {
        match self.error.lock().expect("no reader panicked").take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Feed `learn` every group of the file, round-robin over sequences.
    fn read(&self, learn: &mut dyn FnMut(&Seen<'_>)) -> Result<()> {
        let mut rr = RoundRobin::open(self.path, self.phases).context("--profile-trace")?;
        let m = self.ks.num_moe_layers();
        let (mut ids, mut keys) = (Vec::new(), Vec::new());
        let mut step = 0;
        while let Some(record) = rr.next_record().context("--profile-trace")? {
            ids.clear();
            ids.extend_from_slice(record);
            let sequences = [rr.last_pos().sequence];
            for layer in 0..m {
                let sel = &ids[self.ks.sel_offsets[layer]..self.ks.sel_offsets[layer + 1]];
                keys.clear();
                keys.extend(sel.iter().map(|&e| self.ks.key(layer, e)));
                learn(&Seen {
                    step,
                    moe_layer: layer,
                    keys: &keys,
                    accessed: &[],
                    sequences: &sequences,
                });
            }
            step += 1;
        }
        Ok(())
    }
}

impl ProfileGroups for FileProfile<'_> {
    fn sequences(&self) -> usize {
        self.sequences
    }

    fn each_group(&self, learn: &mut dyn FnMut(&Seen<'_>)) {
        if let Err(e) = self.read(learn) {
            let mut first = self.error.lock().expect("no reader panicked");
            first.get_or_insert(e);
        }
    }
}
