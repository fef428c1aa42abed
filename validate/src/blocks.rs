//! The order of a blocked validation: `blocks` blocks, each replaying every row `repeat`
//! times, the rows of each round shuffled independently (PCG64 from the run's seed). Pure CPU.
//!
//! Why blocks: the host of the stored H200 replays switched between two states that persisted
//! for whole repetitions (medians about 1.25x apart), so repetitions replayed back to back share
//! one state and more steps do not help; independent blocks, each bracketed by a host probe,
//! sample the states and let the analysis condition on them (issue 22, "What the stored H200
//! data say").

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_pcg::Pcg64;

/// One replay of the schedule: which block, which round within it, which row, and the row's
/// position within the round (0 = replayed first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub block: u32,
    pub round: u32,
    pub row: usize,
    pub position: u32,
}

/// Stream of the block-order generator, so it never shares a sequence with the engine's or
/// the random policy's PCG64 seeded with the same `--seed` (any fixed non-zero constant
/// serves; this one is "blocks" in ASCII).
const ORDER_STREAM: u64 = 0x626c_6f63_6b73;

/// The replays of `blocks` blocks of `repeat` rounds over `rows` rows, in execution order: in
/// every round each row once, in an order drawn by a Fisher-Yates shuffle from PCG64 seeded
/// with `seed ^ ORDER_STREAM` (the same seed gives the same schedule on every machine).
pub fn schedule(blocks: u32, repeat: u32, rows: usize, seed: u64) -> Vec<Slot> {
    let mut rng = Pcg64::seed_from_u64(seed ^ ORDER_STREAM);
    let mut out = Vec::with_capacity(blocks as usize * repeat as usize * rows);
    let mut order: Vec<usize> = (0..rows).collect();
    for block in 0..blocks {
        for round in 0..repeat {
            order.sort_unstable();
            order.shuffle(&mut rng);
            out.extend(order.iter().enumerate().map(|(p, &row)| Slot {
                block,
                round,
                row,
                position: p as u32,
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_replays_every_row_once() {
        let s = schedule(4, 2, 5, 7);
        assert_eq!(s.len(), 4 * 2 * 5);
        for chunk in s.chunks(5) {
            let mut rows: Vec<usize> = chunk.iter().map(|x| x.row).collect();
            rows.sort_unstable();
            assert_eq!(rows, vec![0, 1, 2, 3, 4]);
            assert!(chunk
                .iter()
                .all(|x| x.block == chunk[0].block && x.round == chunk[0].round));
            let pos: Vec<u32> = chunk.iter().map(|x| x.position).collect();
            assert_eq!(pos, vec![0, 1, 2, 3, 4]);
        }
        // blocks then rounds, in order
        let br: Vec<(u32, u32)> = s.chunks(5).map(|c| (c[0].block, c[0].round)).collect();
        assert_eq!(
            br,
            vec![
                (0, 0),
                (0, 1),
                (1, 0),
                (1, 1),
                (2, 0),
                (2, 1),
                (3, 0),
                (3, 1)
            ]
        );
    }

    #[test]
    fn the_order_is_the_seeds_and_varies_between_rounds() {
        assert_eq!(schedule(3, 1, 6, 42), schedule(3, 1, 6, 42));
        assert_ne!(schedule(3, 1, 6, 42), schedule(3, 1, 6, 43));
        // 20 rounds of 6 rows: a shuffle that never moved the rows would put row 0 first in
        // all of them (probability (1/6)^19 for a fair shuffle)
        let s = schedule(20, 1, 6, 1);
        let firsts: std::collections::BTreeSet<usize> = s.chunks(6).map(|c| c[0].row).collect();
        assert!(firsts.len() > 1, "{firsts:?}");
    }

    #[test]
    fn one_row_or_no_block_is_trivial() {
        assert!(schedule(0, 3, 4, 0).is_empty());
        let s = schedule(2, 1, 1, 0);
        assert_eq!(
            s.iter().map(|x| (x.block, x.row)).collect::<Vec<_>>(),
            vec![(0, 0), (1, 0)]
        );
    }
}
