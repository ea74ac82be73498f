"""Model FLOPs of training on records, for MFU (bench/sft_throughput.py).
Runs in: the training venv (standard library only; reads a model's config).

Per record of L tokens: 6*P*L (matmul weights) + 12*A*H*d*L^2/2 (causal full attention) + 18*R*Hv*dk*dv*L
(linear-attention recurrences); MFU = the sum over trained records / (seconds * peak). Only each record's own
attention counts; pads and recomputation do not. The formula: docs/benchmarks.md.
"""

from __future__ import annotations

from dataclasses import dataclass


def causal_pairs(length: int, window: int | None = None) -> float:
    if window and length > window:
        return length * window - window * window / 2
    return length * length / 2


@dataclass(frozen=True)
class FlopsModel:
    matmul_params: int
    attention_layers: int
    heads: int
    head_dim: int
    sliding_layers: int = 0
    window: int | None = None
    linear_layers: int = 0
    linear_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0

    def record(self, length: int) -> float:
        attention = 12.0 * self.heads * self.head_dim * (self.attention_layers * causal_pairs(length)
                                                         + self.sliding_layers * causal_pairs(length, self.window))
        return (6.0 * self.matmul_params * length + attention
                + 18.0 * self.linear_layers * self.linear_heads * self.linear_key_dim * self.linear_value_dim * length)

    def records(self, lengths) -> float:
        return sum(self.record(int(length)) for length in lengths)

    def dense(self, tokens: int) -> float:
        """6 * P * tokens: the dense-only count (attention left out) that earlier figures used."""
        return 6.0 * self.matmul_params * tokens


def flops_model(config) -> FlopsModel:
    """From a model config: P counts every nn.Linear weight of the model built on the meta device (no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    matmul = sum(module.weight.numel() for module in model.modules() if isinstance(module, torch.nn.Linear))
    text = config.get_text_config()
    types = list(getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return FlopsModel(
        matmul_params=matmul,
        attention_layers=types.count("full_attention"), heads=text.num_attention_heads, head_dim=head_dim,
        sliding_layers=types.count("sliding_attention"), window=getattr(text, "sliding_window", None),
        linear_layers=types.count("linear_attention"),
        linear_heads=getattr(text, "linear_num_value_heads", 0) or 0,
        linear_key_dim=getattr(text, "linear_key_head_dim", 0) or 0,
        linear_value_dim=getattr(text, "linear_value_head_dim", 0) or 0)
