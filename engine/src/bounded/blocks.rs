//! The groups of a retention replay handed over in blocks, formed on a thread of their own:
//! while the caller steps its simulators through one block, the next is read from the file,
//! decoded and cut into groups. On two cores the replay's wall time is then about the longer
//! of the two halves instead of their sum; the groups, their order and so every result are
//! those of [`Passes::groups`].

use super::{Passes, Streamed};
use anyhow::{anyhow, Result};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Blocks waiting between the thread forming them and the caller. With the one being filled
/// and the one being stepped, at most `QUEUED + 2` blocks exist (a new one is made only when
/// none waits to be reused).
const QUEUED: usize = 2;

/// One block of groups: group k is `units[starts[k]..starts[k + 1]]`.
pub(super) struct Block {
    pub units: Vec<u32>,
    pub starts: Vec<usize>,
}

impl Block {
    /// An empty block with room for `accesses` units (it grows past them by its last group;
    /// recycled blocks keep what they grew to).
    fn with_capacity(accesses: usize) -> Block {
        Block {
            units: Vec::with_capacity(accesses),
            starts: vec![0],
        }
    }

    /// Append the group `units`.
    fn push(&mut self, units: &[u32]) {
        self.units.extend_from_slice(units);
        self.starts.push(self.units.len());
    }

    fn clear(&mut self) {
        self.units.clear();
        self.starts.truncate(1);
    }
}

impl Passes<'_> {
    /// Every group of the stream, in order, handed to `step` in blocks of about `accesses`
    /// accesses (a group is never split), formed by [`Passes::groups`] on a thread of its
    /// own. Returns what [`Passes::groups`] returns. An error of `step` stops the pass and
    /// is the result; otherwise an error of the pass is.
    pub(super) fn blocks(
        &self,
        accesses: usize,
        mut step: impl FnMut(&Block) -> Result<()>,
    ) -> Result<Streamed> {
        if self.trace_accesses_bound()? <= accesses as u64 {
            return self.one_block(step);
        }
        let (full_tx, full_rx) = sync_channel::<Block>(QUEUED);
        let (free_tx, free_rx) = sync_channel::<Block>(QUEUED + 2);
        std::thread::scope(|s| {
            let former = s.spawn(move || self.form(accesses, full_tx, free_rx));
            let stepped = step_each(&full_rx, &free_tx, &mut step);
            // a stopped caller hangs up, so the former's next hand-over fails and it returns
            drop(full_rx);
            let formed = former
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            stepped.and(formed)
        })
    }

    /// [`Passes::blocks`] of a stream that fits in one block: formed on this thread, since
    /// there is nothing to overlap (a thread would only cost its start, in a grid of short
    /// traces such as the onnx-genai table).
    fn one_block(&self, mut step: impl FnMut(&Block) -> Result<()>) -> Result<Streamed> {
        let mut block = Block::with_capacity(0);
        let streamed = self.groups(|g| {
            block.push(g);
            Ok(())
        })?;
        if block.starts.len() > 1 {
            step(&block)?;
        }
        Ok(streamed)
    }

    /// The former's side of [`Passes::blocks`]: fill blocks (recycled from `free`, or new)
    /// with the groups and send each full one, then the last.
    fn form(
        &self,
        accesses: usize,
        full: SyncSender<Block>,
        free: Receiver<Block>,
    ) -> Result<Streamed> {
        let hung_up = || anyhow!("the replay stopped");
        let mut block = Block::with_capacity(accesses);
        let streamed = self.groups(|g| {
            block.push(g);
            if block.units.len() >= accesses {
                let next = free
                    .try_recv()
                    .unwrap_or_else(|_| Block::with_capacity(accesses));
                full.send(std::mem::replace(&mut block, next))
                    .map_err(|_| hung_up())?;
            }
            Ok(())
        })?;
        if block.starts.len() > 1 {
            full.send(block).map_err(|_| hung_up())?;
        }
        Ok(streamed)
    }
}

/// The caller's side of [`Passes::blocks`]: step every block received, hand it back for
/// reuse, and stop at the first error.
fn step_each(
    full: &Receiver<Block>,
    free: &SyncSender<Block>,
    step: &mut impl FnMut(&Block) -> Result<()>,
) -> Result<()> {
    for mut block in full.iter() {
        step(&block)?;
        block.clear();
        // the former may have stopped; a block it does not take back is dropped
        let _ = free.try_send(block);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::bounded::fixture::Fixture;
    use traces::ModelSpec;

    #[test]
    fn blocks_of_any_size_hold_the_groups_in_order() {
        let f = Fixture::new(ModelSpec::uniform("t", 3, 16, 2), 3, 50);
        let passes = f.passes(2);
        let mut want = Vec::new();
        let tokens = passes
            .groups(|g| {
                want.push(g.to_vec());
                Ok(())
            })
            .unwrap()
            .tokens;
        assert_eq!(tokens, 150);
        assert_eq!(want.len(), 75 * 3, "75 batches of 2 tokens, 3 MoE layers");
        for accesses in [1, 3, 7, 64, 1 << 20] {
            let (mut got, mut sizes) = (Vec::new(), Vec::new());
            let streamed = passes
                .blocks(accesses, |b| {
                    sizes.push(b.units.len());
                    for w in b.starts.windows(2) {
                        got.push(b.units[w[0]..w[1]].to_vec());
                    }
                    Ok(())
                })
                .unwrap();
            assert_eq!(streamed.tokens, tokens);
            assert_eq!(got, want, "{accesses} accesses a block");
            // every block but the last reaches the size, and none holds a group more
            let longest = want.iter().map(Vec::len).max().unwrap();
            let (last, full) = sizes.split_last().unwrap();
            assert!(full
                .iter()
                .all(|&n| n >= accesses && n < accesses + longest));
            assert!(*last <= accesses + longest);
        }
    }

    #[test]
    fn an_error_of_the_step_stops_the_pass_and_is_the_result() {
        let f = Fixture::new(ModelSpec::uniform("t", 2, 8, 1), 1, 400);
        let mut seen = 0;
        let err = f
            .passes(1)
            .blocks(4, |_| {
                seen += 1;
                if seen == 3 {
                    anyhow::bail!("third block refused")
                }
                Ok(())
            })
            .err()
            .expect("the step's error");
        assert_eq!(err.to_string(), "third block refused");
        assert_eq!(seen, 3, "no block is stepped after the error");
    }
}
