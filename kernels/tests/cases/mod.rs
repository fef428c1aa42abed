//! The GPU tests' cases, shared with the CPU test that checks the dot kernels' arithmetic on
//! exactly the inputs the GPU tests use.
// Each test binary uses part of this module.
#![allow(dead_code)]

use kernels::reference::{random_activations, random_bank};
use kernels::ExpertGeometry;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// One layer launch: geometry, bank size, tokens, each slot's expert and token.
pub struct Case {
    pub name: &'static str,
    pub geom: ExpertGeometry,
    pub experts: usize,
    pub tokens: usize,
    pub sel: Vec<u32>,
    pub slot_token: Vec<u32>,
}

impl Case {
    /// The random bank and activations of the case (seed 11, bank first).
    pub fn data(&self) -> (Vec<u8>, Vec<f32>) {
        let mut rng = Pcg64::seed_from_u64(11);
        let bank = random_bank(&self.geom, self.experts, &mut rng);
        let x = random_activations(self.tokens * self.geom.hidden, &mut rng);
        (bank, x)
    }
}

/// Tolerance of a GPU result against the f32 CPU reference whose largest magnitude is `scale`:
/// 1e-4 of it + 1e-5 (stated in BENCHMARKS.md, "Expert kernels").
pub fn tolerance(scale: f32) -> f32 {
    1e-4 * scale + 1e-5
}

pub fn small() -> Case {
    Case {
        name: "small 256x128 group 64",
        geom: ExpertGeometry::new(256, 128, 64).unwrap(),
        experts: 5,
        tokens: 3,
        sel: vec![0, 4, 4, 1, 4, 2],
        slot_token: vec![0, 0, 1, 1, 2, 2],
    }
}

/// 3 tokens x top-8 over 16 experts, plus 10 slots naming expert 3 (exercises the union split).
pub fn qwen_repeated() -> Case {
    let mut rng = Pcg64::seed_from_u64(5);
    let mut sel: Vec<u32> = (0..24).map(|_| rng.gen_range(0..16)).collect();
    let mut tok: Vec<u32> = (0..24).map(|i| i / 8).collect();
    sel.extend([3u32; 10]);
    tok.extend((0..10).map(|i| i % 3));
    Case {
        name: "Qwen3-30B-A3B repeated experts",
        geom: ExpertGeometry::new(2048, 768, 128).unwrap(),
        experts: 16,
        tokens: 3,
        sel,
        slot_token: tok,
    }
}

/// Qwen3-30B-A3B at batch 1 (one token, top-8): the gate+up phase gets 64 lanes per row, so the
/// row sums cross warps through shared memory.
pub fn qwen_batch_one() -> Case {
    Case {
        name: "Qwen3-30B-A3B batch 1",
        geom: ExpertGeometry::new(2048, 768, 128).unwrap(),
        experts: 12,
        tokens: 1,
        sel: vec![3, 11, 0, 7, 5, 9, 1, 4],
        slot_token: vec![0; 8],
    }
}

/// The 60-slot geometry (2560x640) with few slots: lane counts that do not divide the chunk
/// count (80 and 20 chunks per row), so some lanes run out of chunks early.
pub fn ragged(group: usize) -> Case {
    Case {
        name: "2560x640 ragged lanes",
        geom: ExpertGeometry::new(2560, 640, group).unwrap(),
        experts: 4,
        tokens: 2,
        sel: vec![0, 3, 3, 1, 2, 3],
        slot_token: vec![0, 0, 1, 1, 1, 0],
    }
}

/// The persistent kernel's uneven shapes: 2080x544 with groups of 32 (65 and 17
/// scale groups per row, odd), 36 slots over 3 tokens naming 12 experts, so the launch takes
/// several waves; its down tiles of 128 rows leave a last tile of 2080 - 16 x 128 = 32 rows.
pub fn partial_tiles() -> Case {
    let mut rng = Pcg64::seed_from_u64(8);
    let sel: Vec<u32> = (0..36).map(|_| rng.gen_range(0..12)).collect();
    Case {
        name: "2080x544 partial tiles",
        geom: ExpertGeometry::new(2080, 544, 32).unwrap(),
        experts: 12,
        tokens: 3,
        slot_token: (0..36).map(|s| s / 12).collect(),
        sel,
    }
}

/// The calibration's headline layer: 60 slots of 2560x640 (6 tokens x 10 slots) naming 60
/// distinct experts, 156.7 MB (the persistent kernel's 3600 tiles: 60 x (40 gate+up + 20 down)).
pub fn sixty_slots() -> Case {
    Case {
        name: "60 slots of 2560x640",
        geom: ExpertGeometry::new(2560, 640, 128).unwrap(),
        experts: 60,
        tokens: 6,
        sel: (0..60).map(|s| (s * 7) % 60).collect(),
        slot_token: (0..60).map(|s| s / 10).collect(),
    }
}

pub fn all() -> Vec<Case> {
    vec![
        small(),
        qwen_repeated(),
        qwen_batch_one(),
        ragged(128),
        ragged(64),
    ]
}
