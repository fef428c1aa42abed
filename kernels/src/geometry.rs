//! Shape and byte layout of one int4 expert (gate, up and down projections with per-group scales).

/// Bytes of one per-group scale (an `f32`).
pub const SCALE_BYTES: usize = 4;

/// Geometry of one expert FFN: `hidden -> ffn` (gate and up), SiLU(gate) x up, `ffn -> hidden` (down).
///
/// Weights are int4 (two per byte, low nibble first, value = nibble - 8) with one f32 scale per
/// `group` consecutive input columns of a row. An expert is one contiguous byte block laid out as
/// `[gate_up int4 | down int4 | gate_up scales | down scales]` (see `cuda/moe.cu`), rows 0..ffn of
/// gate_up being the gate projection and ffn..2*ffn the up projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertGeometry {
    /// Model hidden size (columns of gate/up, rows of down).
    pub hidden: usize,
    /// Expert FFN (intermediate) size.
    pub ffn: usize,
    /// Quantization group: input columns sharing one scale. Must divide `hidden` and `ffn` and be a multiple of 32.
    pub group: usize,
}

/// A geometry the kernels cannot run.
#[derive(Debug, thiserror::Error)]
#[error("invalid expert geometry hidden={hidden} ffn={ffn} group={group}: {why}")]
pub struct GeometryError {
    pub hidden: usize,
    pub ffn: usize,
    pub group: usize,
    pub why: &'static str,
}

impl ExpertGeometry {
    /// Checks the constraints of the kernels: `group` a non-zero multiple of 32 (one 16-byte load
    /// holds 32 weights and must stay within a group) dividing both `hidden` and `ffn`.
    pub fn new(hidden: usize, ffn: usize, group: usize) -> Result<Self, GeometryError> {
        let err = |why| GeometryError {
            hidden,
            ffn,
            group,
            why,
        };
        if hidden == 0 || ffn == 0 {
            return Err(err("hidden and ffn must be positive"));
        }
        if group == 0 || !group.is_multiple_of(32) {
            return Err(err("group must be a positive multiple of 32"));
        }
        if !hidden.is_multiple_of(group) || !ffn.is_multiple_of(group) {
            return Err(err("group must divide both hidden and ffn"));
        }
        Ok(Self { hidden, ffn, group })
    }

    /// Bytes of the packed gate+up weights: `2*ffn` rows of `hidden/2` bytes.
    pub fn gate_up_weight_bytes(&self) -> usize {
        2 * self.ffn * self.hidden / 2
    }
    /// Bytes of the packed down weights: `hidden` rows of `ffn/2` bytes.
    pub fn down_weight_bytes(&self) -> usize {
        self.hidden * self.ffn / 2
    }
    /// Bytes of the gate+up scales: `2*ffn x hidden/group` f32.
    pub fn gate_up_scale_bytes(&self) -> usize {
        2 * self.ffn * (self.hidden / self.group) * SCALE_BYTES
    }
    /// Bytes of the down scales: `hidden x ffn/group` f32.
    pub fn down_scale_bytes(&self) -> usize {
        self.hidden * (self.ffn / self.group) * SCALE_BYTES
    }
    /// Offset of the down weights inside an expert.
    pub fn down_weight_offset(&self) -> usize {
        self.gate_up_weight_bytes()
    }
    /// Offset of the gate+up scales inside an expert.
    pub fn gate_up_scale_offset(&self) -> usize {
        self.gate_up_weight_bytes() + self.down_weight_bytes()
    }
    /// Offset of the down scales inside an expert.
    pub fn down_scale_offset(&self) -> usize {
        self.gate_up_scale_offset() + self.gate_up_scale_bytes()
    }
    /// Bytes of one expert that a layer's gate+up launch reads: its gate+up weights and scales.
    pub fn gate_up_bytes(&self) -> usize {
        self.gate_up_weight_bytes() + self.gate_up_scale_bytes()
    }
    /// Bytes of one expert that a layer's down launch reads: its down weights and scales.
    pub fn down_bytes(&self) -> usize {
        self.down_weight_bytes() + self.down_scale_bytes()
    }
    /// Bytes one expert occupies (weights and scales): what a kernel reads per expert.
    pub fn expert_bytes(&self) -> usize {
        self.down_scale_offset() + self.down_scale_bytes()
    }
    /// Distance between consecutive experts in a packed bank: `expert_bytes` rounded up to 256
    /// bytes so every expert starts aligned for 16-byte loads.
    pub fn expert_stride(&self) -> usize {
        self.expert_bytes().div_ceil(256) * 256
    }
}
