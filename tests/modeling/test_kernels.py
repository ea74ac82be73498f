"""Kernel choices the CPU can check (modeling/kernels.py, modeling/varlen_attention.py, modeling/flops.py): which
packed attention a machine gets, torch's varlen_attn glue against per-record SDPA (with CPU stand-ins for the CUDA
kernel, in both signatures torch has had), Liger refused where it cannot run, and the MFU formula by hand."""

import functools
import inspect
import sys
import types
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen3_5TextConfig, Qwen3Config

from common.errors import ConfigError
from modeling.flops import causal_pairs, flops_model
from modeling.kernels import check_attention, check_kernels, check_liger, select_attention
from modeling.varlen_attention import torch_varlen_attn, torch_varlen_forward, uses_torch_varlen, varlen_sdpa_attention


@pytest.mark.parametrize("cuda, flash_attn, expected", [
    (True, True, "flash_attention_2"),  # flash-attn installed: its kernels
    (True, False, "varlen"),  # CUDA without flash-attn: torch's varlen_attn inside `varlen`
    (False, True, "varlen"),  # CPU: one SDPA call per record
    (False, False, "varlen"),
])
def test_varlen_resolves_to_the_machines_kernel(cuda, flash_attn, expected):
    assert select_attention("varlen", cuda=cuda, flash_attn=flash_attn) == expected
    for other in ("sdpa", "varlen_sdpa", "flash_attention_2", None):
        assert select_attention(other, cuda=cuda, flash_attn=flash_attn) == other


def _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=None, **causal):
    """A CPU stand-in for torch's CUDA varlen_attn: (tokens, heads, dim) in and out, each record causal SDPA."""
    bounds = cu_q.tolist()
    if k.shape[1] != q.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    out = [torch.nn.functional.scaled_dot_product_attention(
        q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1), is_causal=True, scale=scale)
        .transpose(0, 1) for a, b in zip(bounds, bounds[1:])]
    assert max_q == max(b - a for a, b in zip(bounds, bounds[1:]))
    return torch.cat(out)


def kernel_with_window_size(q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1),
                            enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
    assert window_size == (-1, 0) and enable_gqa == (q.shape[1] != k.shape[1])  # torch >= 2.11: causal as a window
    return _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale)


def kernel_with_is_causal(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None, scale=None):
    assert is_causal and q.shape[1] == k.shape[1]  # torch 2.9-2.10: is_causal, no GQA (heads repeated for it)
    return _reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale)


def installed_kernel_signature(*args, **kwargs):
    """The installed torch's varlen_attn signature (its kernel needs CUDA): the glue's call must bind to it."""
    inspect.signature(torch_varlen_attn).bind(*args, **kwargs)
    assert kwargs.get("window_size", (-1, 0)) == (-1, 0) or kwargs.get("is_causal")
    return _reference_varlen(*args[:7], scale=kwargs.get("scale"))


if torch_varlen_attn is not None:
    installed_kernel_signature = functools.wraps(torch_varlen_attn)(installed_kernel_signature)


@pytest.mark.parametrize("kernel", [kernel_with_window_size, kernel_with_is_causal, installed_kernel_signature])
def test_torch_varlen_glue_equals_one_sdpa_call_per_record(kernel):
    if kernel is installed_kernel_signature and torch_varlen_attn is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")
    torch.manual_seed(0)
    lengths = [5, 9, 3]
    query, key, value = torch.randn(1, 4, 17, 8), torch.randn(1, 2, 17, 8), torch.randn(1, 2, 17, 8)  # GQA 4:2
    cu = torch.tensor([0, 5, 14, 17], dtype=torch.int32)
    module = SimpleNamespace(num_key_value_groups=2, is_causal=True, training=False)
    expected, _ = varlen_sdpa_attention(module, query, key, value, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                                        scaling=0.3)
    got = torch_varlen_forward(query, key, value, cu, max(lengths), 0.3, kernel=kernel)
    assert got.shape == expected.shape == (1, 17, 4, 8)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_torch_varlen_only_where_it_can_run():
    cu = torch.tensor([0, 4, 8], dtype=torch.int32)
    module = SimpleNamespace(training=True, sliding_window=None)

    def query(cuda=True, dtype=torch.bfloat16, batch=1):
        return SimpleNamespace(is_cuda=cuda, dtype=dtype, shape=(batch, 4, 8, 16))

    key = SimpleNamespace(shape=(1, 2, 8, 16))
    kernel = object()
    assert uses_torch_varlen(module, query(), key, cu, cu, kernel=kernel)
    assert not uses_torch_varlen(module, query(cuda=False), key, cu, cu, kernel=kernel)  # CPU: per-record SDPA
    assert not uses_torch_varlen(module, query(dtype=torch.float32), key, cu, cu, kernel=kernel)  # flash: bf16/fp16
    assert not uses_torch_varlen(module, query(), key, cu, cu, dropout=0.1, kernel=kernel)  # no dropout in it
    assert not uses_torch_varlen(module, query(), key, None, None, kernel=kernel)  # not packed: plain SDPA
    assert not uses_torch_varlen(module, query(batch=2), key, cu, cu, kernel=kernel)
    assert not uses_torch_varlen(SimpleNamespace(training=False, sliding_window=128), query(), key, cu, cu,
                                 kernel=kernel)  # a window: SDPA with transformers' packed mask
    assert not uses_torch_varlen(module, query(), key, cu, cu, kernel=None)  # a torch without varlen_attn


def test_liger_is_refused_where_it_would_fail_or_do_nothing(monkeypatch):
    config = Qwen3Config()
    check_liger(config, False, cuda=False)
    with pytest.raises(ConfigError, match=r"^use_liger_kernel: Liger's kernels are Triton, GPU only"):
        check_liger(config, True, cuda=False)
    monkeypatch.setattr("transformers.utils.is_liger_kernel_available", lambda: False)
    with pytest.raises(ConfigError, match=r"needs liger-kernel >= 0.3.0 .*pip install liger-kernel"):
        check_liger(config, True, cuda=True)
    # an installed liger-kernel (stood in for: it needs Triton) that knows qwen3 but not qwen3_5_text
    monkeypatch.setattr("transformers.utils.is_liger_kernel_available", lambda: True)
    patch = types.ModuleType("liger_kernel.transformers.monkey_patch")
    patch.MODEL_TYPE_TO_APPLY_LIGER_FN = {"qwen3": object()}
    for name in ("liger_kernel", "liger_kernel.transformers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.monkey_patch", patch)
    check_liger(config, True, cuda=True)
    with pytest.raises(ConfigError, match=r"no kernels for model type 'qwen3_5_text'"):
        check_liger(Qwen3_5TextConfig(), True, cuda=True)


def test_the_recipes_check_resolves_varlen_on_cpu(tiny_model_path):
    training = SimpleNamespace(packing=True, padding_free=False, eval_packing=None, use_liger_kernel=False, use_cpu=True)
    model = SimpleNamespace(attn_implementation="varlen")
    check_kernels(tiny_model_path, None, training, model)  # attention-only model: packing allowed
    assert model.attn_implementation == "varlen"
    training.use_liger_kernel = True
    with pytest.raises(ConfigError, match="^use_liger_kernel"):
        check_kernels(tiny_model_path, None, training, model)


def test_varlen_is_refused_where_sdpa_would_leave_out_part_of_the_attention():
    """gpt-oss's attention sinks: transformers runs it on eager (or flex), never SDPA; `varlen` on CPU is SDPA, and
    would train a model without its sinks."""
    from transformers import GptOssConfig

    with pytest.raises(ConfigError, match=r"^attn_implementation: varlen runs GptOssForCausalLM's attention on SDPA "
                       r"here.*attention sinks\); set `attn_implementation: eager` and `packing: false`"):
        check_attention(GptOssConfig(), "varlen")
    check_attention(GptOssConfig(), "eager")
    check_attention(GptOssConfig(), "flash_attention_2")  # transformers decides what its flash kernels take
    check_attention(Qwen3Config(), "varlen")
    check_attention(Qwen3_5TextConfig(), "varlen")


def test_mfu_formula_by_hand():
    config = Qwen3Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)
    model = flops_model(config)
    d, ffn, layers, heads, kv, hd = 64, 128, 3, 4, 2, 16
    params = layers * (d * hd * (heads + 2 * kv) + heads * hd * d + 3 * d * ffn) + 1000 * d  # + the LM head
    assert (model.matmul_params, model.attention_layers, model.linear_layers) == (params, 3, 0)
    assert model.record(100) == 6 * params * 100 + 12 * layers * heads * hd * 100 * 100 / 2
    assert model.records([100, 50]) == model.record(100) + model.record(50) < model.record(150)  # packed apart
    assert model.dense(150) == 6 * params * 150
    assert causal_pairs(10, window=4) == 10 * 4 - 8 and causal_pairs(3, window=4) == 4.5

    hybrid = flops_model(Qwen3_5TextConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                           linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
                                           linear_value_head_dim=8, full_attention_interval=2))
    assert (hybrid.attention_layers, hybrid.linear_layers, hybrid.linear_heads) == (2, 2, 2)
    attention_part = hybrid.record(10) - 6 * hybrid.matmul_params * 10 - 18 * 2 * 2 * 8 * 8 * 10
    assert attention_part == 12 * 2 * 2 * 16 * 10 * 10 / 2
