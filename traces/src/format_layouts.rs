//! The header layouts of each format version, as bincode stores them. They are spelled out
//! here, apart from the in-memory [`Header`], so that the JSON form of a header (in results
//! files) and the binary form of each version can evolve separately, and so that a trace
//! using nothing newer is still written as version 1, byte for byte as before.
//!
//! Version 2 added, in the model after `expert_ffn`, the `expert_matrices` byte, and allowed
//! MoE layers whose selections were not recorded (`experts > 0`, `top_k == 0`).
//!
//! Version 3 added, in the model after `expert_matrices`, `shared_expert_ffn` (an optional
//! u32), and, after `has_weights`, the engine's forward passes (an optional list of [`Pass`]).

use crate::model::{
    Header, LayerSpec, ModelSpec, Pass, Provenance, SequenceInfo, GATED_EXPERT_MATRICES,
};
use serde::{Deserialize, Serialize};

/// The model as versions 1 and 2 store it; `expert_matrices` only in version 2 (version 3:
/// [`ModelV3`]).
#[derive(Serialize, Deserialize)]
struct ModelV1 {
    name: String,
    revision: Option<String>,
    layers: Vec<LayerSpec>,
    hidden_size: Option<u32>,
    expert_ffn: Option<u32>,
}

#[derive(Serialize, Deserialize)]
struct ModelV2 {
    name: String,
    revision: Option<String>,
    layers: Vec<LayerSpec>,
    hidden_size: Option<u32>,
    expert_ffn: Option<u32>,
    expert_matrices: u8,
}

#[derive(Serialize, Deserialize)]
struct ModelV3 {
    name: String,
    revision: Option<String>,
    layers: Vec<LayerSpec>,
    hidden_size: Option<u32>,
    expert_ffn: Option<u32>,
    expert_matrices: u8,
    shared_expert_ffn: Option<u32>,
}

/// The header of version 1 (`M = ModelV1`) or 2 (`M = ModelV2`).
#[derive(Serialize, Deserialize)]
struct StoredHeader<M> {
    model: M,
    provenance: Provenance,
    sequences: Vec<SequenceInfo>,
    has_weights: bool,
}

/// The header of version 3: version 3's model, then version 2's fields, then the passes.
#[derive(Serialize, Deserialize)]
struct StoredHeaderV3 {
    model: ModelV3,
    provenance: Provenance,
    sequences: Vec<SequenceInfo>,
    has_weights: bool,
    passes: Option<Vec<Pass>>,
}

/// Whether `header` needs version 2: an expert other than gate/up/down, or a MoE layer
/// whose selections were not recorded.
pub(crate) fn needs_v2(header: &Header) -> bool {
    header.model.expert_matrices != GATED_EXPERT_MATRICES
        || header.model.layers.iter().any(LayerSpec::is_unrecorded_moe)
}

/// Whether `header` needs version 3: shared experts sized by their own FFN, or forward
/// passes.
pub(crate) fn needs_v3(header: &Header) -> bool {
    header.model.shared_expert_ffn.is_some() || header.passes.is_some()
}

fn stored<M>(header: &Header, model: M) -> StoredHeader<M> {
    StoredHeader {
        model,
        provenance: header.provenance.clone(),
        sequences: header.sequences.clone(),
        has_weights: header.has_weights,
    }
}

/// Encode `header` in the layout of `version` (1, 2 or 3; 1 only when `!needs_v2(header)`,
/// 1 or 2 only when `!needs_v3(header)`).
pub(crate) fn encode<C: bincode::config::Config>(
    header: &Header,
    version: u32,
    config: C,
) -> Result<Vec<u8>, bincode::error::EncodeError> {
    let m = &header.model;
    if version == 1 {
        let model = ModelV1 {
            name: m.name.clone(),
            revision: m.revision.clone(),
            layers: m.layers.clone(),
            hidden_size: m.hidden_size,
            expert_ffn: m.expert_ffn,
        };
        bincode::serde::encode_to_vec(stored(header, model), config)
    } else if version == 2 {
        let model = ModelV2 {
            name: m.name.clone(),
            revision: m.revision.clone(),
            layers: m.layers.clone(),
            hidden_size: m.hidden_size,
            expert_ffn: m.expert_ffn,
            expert_matrices: m.expert_matrices,
        };
        bincode::serde::encode_to_vec(stored(header, model), config)
    } else {
        let model = ModelV3 {
            name: m.name.clone(),
            revision: m.revision.clone(),
            layers: m.layers.clone(),
            hidden_size: m.hidden_size,
            expert_ffn: m.expert_ffn,
            expert_matrices: m.expert_matrices,
            shared_expert_ffn: m.shared_expert_ffn,
        };
        let v3 = StoredHeaderV3 {
            model,
            provenance: header.provenance.clone(),
            sequences: header.sequences.clone(),
            has_weights: header.has_weights,
            passes: header.passes.clone(),
        };
        bincode::serde::encode_to_vec(v3, config)
    }
}

/// A version-1 model: gate/up/down experts, shared experts of the routed size.
impl From<ModelV1> for ModelSpec {
    fn from(m: ModelV1) -> ModelSpec {
        ModelV2 {
            name: m.name,
            revision: m.revision,
            layers: m.layers,
            hidden_size: m.hidden_size,
            expert_ffn: m.expert_ffn,
            expert_matrices: GATED_EXPERT_MATRICES,
        }
        .into()
    }
}

/// A version-2 model: shared experts of the routed size.
impl From<ModelV2> for ModelSpec {
    fn from(m: ModelV2) -> ModelSpec {
        ModelV3 {
            name: m.name,
            revision: m.revision,
            layers: m.layers,
            hidden_size: m.hidden_size,
            expert_ffn: m.expert_ffn,
            expert_matrices: m.expert_matrices,
            shared_expert_ffn: None,
        }
        .into()
    }
}

impl From<ModelV3> for ModelSpec {
    fn from(m: ModelV3) -> ModelSpec {
        ModelSpec {
            name: m.name,
            revision: m.revision,
            layers: m.layers,
            hidden_size: m.hidden_size,
            expert_ffn: m.expert_ffn,
            expert_matrices: m.expert_matrices,
            shared_expert_ffn: m.shared_expert_ffn,
        }
    }
}

/// The in-memory header of a version-1 or 2 header (no passes).
fn into_header<M: Into<ModelSpec>>(s: StoredHeader<M>) -> Header {
    Header {
        model: s.model.into(),
        provenance: s.provenance,
        sequences: s.sequences,
        has_weights: s.has_weights,
        passes: None,
    }
}

/// Decode a header of `version` (1, 2 or 3); returns it and the bytes used. A version-1
/// header means gate/up/down experts; that its layers are dense or recorded is for the
/// caller to check.
pub(crate) fn decode<C: bincode::config::Config>(
    bytes: &[u8],
    version: u32,
    config: C,
) -> Result<(Header, usize), bincode::error::DecodeError> {
    if version == 1 {
        let (s, used): (StoredHeader<ModelV1>, usize) =
            bincode::serde::decode_from_slice(bytes, config)?;
        Ok((into_header(s), used))
    } else if version == 2 {
        let (s, used): (StoredHeader<ModelV2>, usize) =
            bincode::serde::decode_from_slice(bytes, config)?;
        Ok((into_header(s), used))
    } else {
        let (s, used): (StoredHeaderV3, usize) = bincode::serde::decode_from_slice(bytes, config)?;
        let header = Header {
            model: s.model.into(),
            provenance: s.provenance,
            sequences: s.sequences,
            has_weights: s.has_weights,
            passes: s.passes,
        };
        Ok((header, used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(layers: Vec<LayerSpec>, expert_matrices: u8) -> Header {
        let mut model = ModelSpec::uniform("m", 0, 0, 0);
        model.layers = layers;
        model.expert_matrices = expert_matrices;
        Header {
            model,
            provenance: Provenance::default(),
            sequences: vec![],
            has_weights: false,
            passes: None,
        }
    }

    fn moe(top_k: u16) -> LayerSpec {
        LayerSpec {
            experts: 4,
            top_k,
            shared_experts: 1,
        }
    }

    #[test]
    fn each_version_decodes_what_it_encodes() {
        let cfg = bincode::config::standard();
        let h = header(vec![moe(2), LayerSpec::dense()], GATED_EXPERT_MATRICES);
        assert!(!needs_v2(&h));
        let v1 = encode(&h, 1, cfg).unwrap();
        let v2 = encode(&h, 2, cfg).unwrap();
        // version 2 stores one more byte: expert_matrices (3, one varint byte)
        assert_eq!(v2.len(), v1.len() + 1);
        assert_eq!(decode(&v1, 1, cfg).unwrap(), (h.clone(), v1.len()));
        assert_eq!(decode(&v2, 2, cfg).unwrap(), (h, v2.len()));
        let switch = header(vec![moe(1)], 2);
        assert!(needs_v2(&switch));
        let b = encode(&switch, 2, cfg).unwrap();
        assert_eq!(decode(&b, 2, cfg).unwrap().0.model.expert_matrices, 2);
    }

    #[test]
    fn version_3_stores_the_shared_expert_ffn_after_the_matrices() {
        let cfg = bincode::config::standard();
        let mut h = header(vec![moe(2)], GATED_EXPERT_MATRICES);
        let v2 = encode(&h, 2, cfg).unwrap();
        h.model.shared_expert_ffn = Some(5632);
        assert!(needs_v3(&h) && !needs_v2(&h));
        let v3 = encode(&h, 3, cfg).unwrap();
        // bincode's varint: tag 1 (present), then 5632 >= 251 takes the u16 marker 251 and
        // two little-endian bytes (0x1600): 4 more bytes, inserted after the matrices byte;
        // then the absent passes' tag 0 at the end
        assert_eq!(v3.len(), v2.len() + 5);
        assert_eq!(v3.last(), Some(&0));
        assert_eq!(decode(&v3, 3, cfg).unwrap(), (h, v3.len()));
        let tail = [1u8, 251, 0x00, 0x16];
        assert!(v3.windows(4).any(|w| w == tail));
    }

    #[test]
    fn version_1_refuses_an_unrecorded_layer() {
        let h = header(vec![moe(2), moe(0)], GATED_EXPERT_MATRICES);
        assert!(needs_v2(&h));
        let v1 = encode(&h, 1, bincode::config::standard()).unwrap();
        let e = crate::format::decode_header(&v1, 1, "t.bin").unwrap_err();
        assert!(
            e.to_string().contains("layer 1 has 4 experts but top-k 0"),
            "{e}"
        );
        let v2 = encode(&h, 2, bincode::config::standard()).unwrap();
        let back = crate::format::decode_header(&v2, 2, "t.bin").unwrap();
        assert!(back.model.layers[1].is_unrecorded_moe());
    }

    #[test]
    fn version_3_stores_the_passes_after_version_2s_fields() {
        let cfg = bincode::config::standard();
        let mut h = header(vec![moe(2)], GATED_EXPERT_MATRICES);
        let v2 = encode(&h, 2, cfg).unwrap();
        h.passes = Some(vec![Pass {
            runs: vec![crate::PassRun {
                sequence: 0,
                tokens: 300,
            }],
        }]);
        assert!(needs_v3(&h) && !needs_v2(&h));
        let v3 = encode(&h, 3, cfg).unwrap();
        // version 2's bytes with the absent shared FFN's tag 0 after the matrices, then
        // varints: tag 1 (passes present), 1 pass, 1 run, sequence 0, 300 tokens (3 bytes:
        // bincode's varint marks 251..2^16 with the byte 251, then u16 LE)
        assert_eq!(v3.len(), v2.len() + 1 + 7);
        assert_eq!(&v3[v2.len() + 1..], &[1, 1, 1, 0, 251, 44, 1]);
        assert_eq!(decode(&v3, 3, cfg).unwrap(), (h, v3.len()));
    }
}
