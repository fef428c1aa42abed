//! The model geometry of an import: the layers the input implies, completed by what the user
//! states about the model (`sim trace import` flags): name, sizes, shared experts, the
//! expert's matrix layout and the MoE layers whose selections were not recorded.

use crate::import_onnx::ImportOptions;
use crate::model::{LayerSpec, ModelSpec, GATED_EXPERT_MATRICES};

impl ImportOptions {
    /// The model of an import whose input implies `layers` (recorded MoE layers and dense
    /// ones) and, when it names none, the model `default_name`.
    ///
    /// Every MoE layer gets `shared_experts`; each of `unrecorded_layers` must be dense in
    /// `layers` (or beyond them) and becomes a MoE layer, with the experts of the first
    /// recorded MoE layer, whose selections are not in the trace.
    pub(crate) fn model(
        &self,
        default_name: &str,
        mut layers: Vec<LayerSpec>,
    ) -> Result<ModelSpec, String> {
        let experts = layers.iter().find(|l| l.is_moe()).map_or(0, |l| l.experts);
        for &i in &self.unrecorded_layers {
            if i >= crate::format::MAX_LAYERS {
                return Err(format!(
                    "--unrecorded-layers {i} is beyond the {} layers a trace may have",
                    crate::format::MAX_LAYERS
                ));
            }
            if i >= layers.len() {
                layers.resize(i + 1, LayerSpec::dense());
            }
            if layers[i].is_moe() {
                return Err(format!(
                    "--unrecorded-layers names layer {i}, but the input records its selections"
                ));
            }
            layers[i] = LayerSpec {
                experts,
                top_k: 0,
                shared_experts: 0,
            };
        }
        if let Some(shared) = self.shared_experts {
            for l in layers.iter_mut().filter(|l| l.experts > 0) {
                l.shared_experts = shared;
            }
        }
        Ok(ModelSpec {
            name: self
                .model_name
                .clone()
                .unwrap_or_else(|| default_name.to_string()),
            revision: self.revision.clone(),
            layers,
            hidden_size: self.hidden_size,
            expert_ffn: self.expert_ffn,
            expert_matrices: self.expert_matrices.unwrap_or(GATED_EXPERT_MATRICES),
            shared_expert_ffn: self.shared_expert_ffn,
        })
    }
}

impl LayerSpec {
    /// A dense layer: no routed experts.
    pub fn dense() -> LayerSpec {
        LayerSpec {
            experts: 0,
            top_k: 0,
            shared_experts: 0,
        }
    }
}
