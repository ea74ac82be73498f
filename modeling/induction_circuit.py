"""A copy circuit set by hand in a random Qwen3 (`student-induction`): previous-token, induction and pointer heads.
Runs in: the training venv (.venv: torch, Transformers), when modeling/tiny_model.py builds a student.

Why by hand, and what it measured: docs/learn.md, "The deep families". The residual stream's quarters: token
embeddings (the last dimension a constant, which the tied LM head adds to every logit alike), token i-1, token i-2
(zero in every embedding: the LM head reads neither), free. Layer 0: queries and keys read only the constant, so
RoPE's fast pairs alone make the scores peak at i-1 (half the KV heads) or i-2 (the other half); each writes its
token into its quarter. Layer 1: a query reads tokens i and i-1 (weighted 8 to 1), a key tokens j-1 and j-2, through
random projections into RoPE's slow pairs; the value writes token j into the token quarter (Olsson et al. 2022).
The last layer's pointer heads copy token j as layer 1 does, but where they look is left to training (random queries
and keys, a soft start): a value typed after `echo ` matches no pair on the screen; which line holds it is learned,
the copy of a token never seen in training is not (a pointer-generator's copy). Every other attention and MLP output
starts at zero. No task text is read.
"""

from __future__ import annotations

import math


def set_induction_circuit(model, embedding_std: float = 0.15, constant: float = 0.5, position_pairs: int = 6,
                          position_sharpness: float = 4.0, content_sharpness: float = 12.0, copy_scale: float = 4.0,
                          content_from: int | None = None, last_weight: float = 8.0, pointer_groups: int = 0,
                          pointer_query: float = 0.3, pointer_key: float = 4.0, seed: int = 0) -> None:
    """Overwrite `model`'s embeddings and first two layers with the circuit above; zero the output projections of
    every attention and MLP block besides. `content_from`: the first RoPE pair slow enough to match content by
    (default: the first whose rotation over 2,048 positions stays under 2 radians). `last_weight`: how much more a
    query's last token counts than the one before it. `pointer_groups`: KV heads of the last layer (from the first)
    made pointer heads, whose query and key norms start at `pointer_query` and `pointer_key` (their product sets how
    sharply a random query looks at first: soft, so the untrained pointers add little noise)."""
    import torch

    config = model.config
    hidden, head_dim = config.hidden_size, config.head_dim
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    half, per_group, quarter = head_dim // 2, heads // kv_heads, hidden // 4
    per_offset = kv_heads // 2  # KV heads of layer 0 per offset (1 and 2)
    carried = quarter // per_offset if per_offset else 0  # token dimensions one of them carries
    if config.num_hidden_layers < 2 or hidden % 4 or kv_heads % 2 or quarter % per_offset or carried > head_dim:
        raise ValueError(f"set_induction_circuit needs >= 2 layers, an even number of KV heads and hidden/4 split "
                         f"evenly over half of them into at most head_dim dimensions each (hidden {hidden}, "
                         f"{kv_heads} KV heads, head_dim {head_dim})")
    theta = config.rope_parameters["rope_theta"]
    frequencies = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / head_dim)
    if content_from is None:
        content_from = next(f for f in range(half) if frequencies[f] * 2048 < 2.0)
    if pointer_groups and (config.num_hidden_layers < 3 or pointer_groups > kv_heads):
        raise ValueError(f"pointer heads need a third layer and at most {kv_heads} KV heads (asked {pointer_groups})")
    if content_from <= position_pairs:
        raise ValueError(f"rope_theta {theta}: too few slow RoPE pairs for content beside {position_pairs} fast ones")
    const = quarter - 1  # the constant dimension; token dimensions below it
    layers = model.model.layers

    def carry(attention, g: int, into: int, writers, scale: float) -> None:
        """KV head g's value reads its part (g % per_offset) of the token quarter; each writer query head writes that
        part at `into` (a quarter's start), times `scale`."""
        part = g % per_offset
        attention.v_proj.weight[g * head_dim:(g + 1) * head_dim].zero_()
        for t in range(carried):
            attention.v_proj.weight[g * head_dim + t, part * carried + t] = 1.0
            for h in writers:
                attention.o_proj.weight[into + part * carried + t, h * head_dim + t] = scale

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        embeddings = model.model.embed_tokens.weight
        embeddings.zero_()
        embeddings[:, :const].normal_(0.0, embedding_std, generator=generator)
        embeddings[:, const] = constant
        for layer in layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        for attention in (layers[0].self_attn, layers[1].self_attn):
            for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
                projection.weight.zero_()

        # layer 0: scores by position alone, peaked at i-offset (q . k = sum over the fast pairs of
        # cos((i-j-offset) * frequency))
        first = layers[0].self_attn
        fast = list(range(position_pairs)) + list(range(half, half + position_pairs))
        first.q_norm.weight.fill_(1.0)
        first.k_norm.weight.fill_(1.0)
        first.q_norm.weight[fast] = position_sharpness
        first.k_norm.weight[fast] = position_sharpness
        query = torch.zeros(head_dim)
        query[:position_pairs] = 1.0
        for h in range(heads):
            first.q_proj.weight[h * head_dim:(h + 1) * head_dim, const] = query
        for g in range(kv_heads):
            offset = 1 + g // per_offset
            key = torch.zeros(head_dim)
            key[:position_pairs] = torch.cos(offset * frequencies[:position_pairs]).float()
            key[half:half + position_pairs] = torch.sin(offset * frequencies[:position_pairs]).float()
            first.k_proj.weight[g * head_dim:(g + 1) * head_dim, const] = key
            # token j-offset into its quarter: one query head of the group writes; the others' outputs stay unread
            carry(first, g, offset * quarter, [g * per_group], 1.0)

        # layer 1: (token i, token i-1) against (token j-1, token j-2) in the slow pairs; token j written back
        second = layers[1].self_attn
        slow = list(range(content_from, half)) + list(range(half + content_from, head_dim))
        second.q_norm.weight.zero_()
        second.k_norm.weight.zero_()
        second.q_norm.weight[slow] = content_sharpness
        second.k_norm.weight[slow] = content_sharpness
        for g in range(kv_heads):
            last = torch.randn(len(slow), const, generator=generator) / math.sqrt(const)
            before = torch.randn(len(slow), const, generator=generator) / math.sqrt(const)
            for h in range(g * per_group, (g + 1) * per_group):
                rows = second.q_proj.weight[h * head_dim:(h + 1) * head_dim]
                rows[slow, :const] = last * last_weight
                rows[slow, quarter:quarter + const] = before
            rows = second.k_proj.weight[g * head_dim:(g + 1) * head_dim]
            rows[slow, quarter:quarter + const] = last
            rows[slow, 2 * quarter:2 * quarter + const] = before
            carry(second, g, 0, [g * per_group], copy_scale / 2)  # two KV heads vote on each half of the token quarter

        # the last layer's pointer heads: token j copied as in layer 1; queries and keys keep their random init
        if pointer_groups:
            pointer = layers[-1].self_attn
            pointer.q_norm.weight.fill_(pointer_query)
            pointer.k_norm.weight.fill_(pointer_key)
            for g in range(pointer_groups):  # every query head of the group writes: where they agree, a whole copy
                carry(pointer, g, 0, range(g * per_group, (g + 1) * per_group), copy_scale / per_group)
