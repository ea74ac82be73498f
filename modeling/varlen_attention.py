"""Packed (padding-free) attention that never attends across records: `varlen` and `varlen_sdpa`.
Runs in: the training venv (.venv: torch, Transformers), registered with transformers' AttentionInterface.

`varlen`: PyTorch's own variable-length attention on CUDA in bf16/fp16 when the collator passes the records' bounds,
else `varlen_sdpa`: each record as its own causal SDPA call, on any device. Without bounds both are plain SDPA.
Why it is hand-written (and the 3.6x it saves): docs/scaling.md, "Packing Qwen3.5".
"""

from __future__ import annotations

import inspect

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "varlen_sdpa"
DEVICE_NAME = "varlen"

try:  # torch >= 2.9 (2.13 here); older builds run varlen_sdpa instead
    from torch.nn.attention.varlen import varlen_attn as torch_varlen_attn
except ImportError:  # pragma: no cover - depends on the installed torch
    torch_varlen_attn = None


def _packed(query, key, cu_seq_lens_q, cu_seq_lens_k) -> bool:
    return (cu_seq_lens_q is not None and query.shape[0] == 1 and query.shape[2] == key.shape[2]
            and (cu_seq_lens_k is None or torch.equal(cu_seq_lens_q, cu_seq_lens_k)))


def varlen_sdpa_attention(module, query, key, value, attention_mask, cu_seq_lens_q=None, cu_seq_lens_k=None,
                          **kwargs):
    if not _packed(query, key, cu_seq_lens_q, cu_seq_lens_k) or getattr(module, "sliding_window", None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    bounds = cu_seq_lens_q.tolist()
    pieces = [sdpa_attention_forward(module, query[:, :, start:end], key[:, :, start:end], value[:, :, start:end],
                                     None, **kwargs)[0]
              for start, end in zip(bounds, bounds[1:]) if end > start]
    return torch.cat(pieces, dim=1), None


def torch_varlen_forward(query, key, value, cu_seq_lens, max_length: int, scaling: float | None,
                         kernel=None) -> torch.Tensor:
    """One packed row (1, heads, tokens, dim) through `kernel` (default torch's varlen_attn), causal, as
    (1, tokens, heads, dim): the layout transformers' attention functions return. Takes the kernel's signature as
    it finds it: torch 2.9-2.10 name causality `is_causal`, later ones `window_size`; without `enable_gqa` the
    key/value heads are repeated."""
    kernel = kernel or torch_varlen_attn
    params = inspect.signature(kernel).parameters
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, dim)
    options = {"scale": scaling} if "scale" in params else {}
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" in params:
            options["enable_gqa"] = True
        else:
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    if "window_size" in params:
        options["window_size"] = (-1, 0)
    else:
        options["is_causal"] = True
    cu = cu_seq_lens.to(device=q.device, dtype=torch.int32)
    return kernel(q, k, v, cu, cu, int(max_length), int(max_length), **options).unsqueeze(0)


def uses_torch_varlen(module, query, key, cu_seq_lens_q, cu_seq_lens_k, dropout: float = 0.0,
                      kernel=torch_varlen_attn) -> bool:
    """Whether `varlen` runs this call on torch's varlen_attn: a packed row of CUDA bf16/fp16 tensors, no dropout
    in training (the kernel has none), no sliding window."""
    return (kernel is not None and query.is_cuda and query.dtype in (torch.bfloat16, torch.float16)
            and not (module.training and dropout) and not getattr(module, "sliding_window", None)
            and _packed(query, key, cu_seq_lens_q, cu_seq_lens_k))


def device_varlen_attention(module, query, key, value, attention_mask, cu_seq_lens_q=None, cu_seq_lens_k=None,
                            max_length_q=None, **kwargs):
    if not uses_torch_varlen(module, query, key, cu_seq_lens_q, cu_seq_lens_k, kwargs.get("dropout", 0.0)):
        return varlen_sdpa_attention(module, query, key, value, attention_mask, cu_seq_lens_q, cu_seq_lens_k,
                                     **kwargs)
    longest = max_length_q if max_length_q is not None else int(cu_seq_lens_q.diff().max())
    return torch_varlen_forward(query, key, value, cu_seq_lens_q, longest, kwargs.get("scaling")), None


AttentionInterface.register(NAME, varlen_sdpa_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)
AttentionInterface.register(DEVICE_NAME, device_varlen_attention)
AttentionMaskInterface.register(DEVICE_NAME, sdpa_mask)
