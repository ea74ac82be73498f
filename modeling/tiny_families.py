"""What a tiny model of each family is: its transformers architecture, a small config, its special tokens.
Runs in: the training venv (standard library at import); modeling/tiny_model.py builds `builtin:tiny-<family>` from it.

One entry per family of common/model_families.py FAMILIES but `qwen3`, whose tiny model is the embedded default
(tiny_model.py's own build). The chat template is TRL's first template of the family, byte for byte. Random weights;
MoE families have 4 experts, top-2; hybrids one recurrent layer (Gated DeltaNet, Mamba-2) and one attention layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EMBEDDED_FAMILY = "qwen3"  # `builtin:tiny-qwen3`: tiny_model.py's PRESETS build, not an entry here

# every tiny model's size, the family's config adds its own (layers, experts, recurrent layers)
TINY_DIMS = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=32768, tie_word_embeddings=True)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=64)  # with 4 routed experts (the key differs per family)
QWEN_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")


@dataclass(frozen=True)
class TinyFamily:
    """A family's tiny model: `architecture` and `config_class` are transformers class names; `special_tokens` are
    the control tokens (special: skipped by `decode(skip_special_tokens=True)`), `tags` the markup the template
    writes that parsers read back (single tokens, never skipped); `stop` the tokens that end a generation."""

    architecture: str
    config_class: str
    config: dict
    special_tokens: tuple[str, ...]
    eos: str
    pad: str
    tags: tuple[str, ...] = ()
    bos: str | None = None
    stop: tuple[str, ...] = ()
    notes: str = field(default="", compare=False)

    def model_config(self) -> dict:
        """The config's keyword arguments: the shared tiny sizes, the family's own on top."""
        return {**TINY_DIMS, **self.config}


TINY_FAMILIES: dict[str, TinyFamily] = {
    "qwen3_5": TinyFamily(
        "Qwen3_5ForCausalLM", "Qwen3_5TextConfig",
        dict(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
             linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4),
        QWEN_TOKENS + ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"),
        eos="<|im_end|>", pad="<|endoftext|>", tags=QWEN_TAGS,
        notes="the text-only class of Qwen3.5 (checkpoints are Qwen3_5ForConditionalGeneration): Gated DeltaNet, "
              "then full attention"),
    "nemotron_3_nano": TinyFamily(
        "NemotronHForCausalLM", "NemotronHConfig",
        dict(layers_block_type=["linear_attention", "moe", "full_attention", "moe"], n_routed_experts=4,
             moe_shared_expert_intermediate_size=64, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16,
             n_groups=1, chunk_size=16, **MOE),
        ("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"), eos="<|im_end|>", pad="<unk>", tags=QWEN_TAGS,
        notes="Mamba-2, MoE, attention, MoE (Nemotron 3 Nano's pattern, 4 blocks)"),
    "llama3_1": TinyFamily(
        "LlamaForCausalLM", "LlamaConfig", dict(num_hidden_layers=2),
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
         "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"),
        eos="<|eot_id|>", pad="<|finetune_right_pad_id|>", bos="<|begin_of_text|>",
        stop=("<|eom_id|>", "<|end_of_text|>")),
    "gptoss": TinyFamily(
        "GptOssForCausalLM", "GptOssConfig",
        dict(num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, sliding_window=128,
             layer_types=["sliding_attention", "full_attention"],
             max_position_embeddings=131072),  # YaRN's factor 32 x its original 4096, as gpt-oss has it
        ("<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
         "<|return|>", "<|call|>"),
        eos="<|return|>", pad="<|endoftext|>", stop=("<|call|>",),
        notes="sliding then full attention, both with attention sinks; 4 experts, top-2"),
    "glm4moe": TinyFamily(
        "Glm4MoeForCausalLM", "Glm4MoeConfig",
        dict(num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=4, n_shared_experts=1, num_mtp_layers=0,
             partial_rotary_factor=0.5, **MOE),
        ("<|endoftext|>", "[gMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
        eos="<|endoftext|>", pad="<|endoftext|>", stop=("<|user|>", "<|observation|>"),
        tags=QWEN_TAGS + ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        notes="one dense layer, then one MoE layer (4 experts, top-2, one shared)"),
}
