"""The kernels an SFT run uses, decided from its config and the model's config before anything slow starts.
Runs in: the training venv (.venv), in the recipe's process before the model loads (standard library at import).

Packed attention (`attn_implementation: varlen` -> flash_attention_2 or modeling/varlen_attention.py), packing on
linear-attention hybrids (refused without the kernel packages that take record boundaries), Liger (refused where
it would not apply): each with one clear line when the config asks for what the machine cannot do.
Why and how: docs/scaling.md, "Packing Qwen3.5".
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect

from common.errors import ConfigError

DISTRIBUTIONS = {"fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d", "mamba_ssm": "mamba-ssm"}
RECURRENT_LAYER_TYPES = ("linear_attention", "hybrid", "mamba", "conv")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def select_attention(requested: str | None, cuda: bool | None = None, flash_attn: bool | None = None) -> str | None:
    """The attn_implementation to load the model with (see the module docstring)."""
    if requested != "varlen":
        return requested
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    flash_attn = _installed("flash_attn") if flash_attn is None else flash_attn
    return "flash_attention_2" if cuda and flash_attn else "varlen"


def _layer_types(config) -> list[str]:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return list(getattr(text, "layer_types", None) or [])


def recurrent_layers(config) -> list[str]:
    """The layer types of a model's layers that carry state across tokens (empty for attention-only models)."""
    return [kind for kind in _layer_types(config) if kind in RECURRENT_LAYER_TYPES]


def boundary_kernels(config) -> dict[str, bool]:
    """{package: found} for the optional kernel packages the model's modeling code looks for (transformers'
    `use_kernel_func_from_hub_with_fallback` functions; found = transformers resolved the package's kernel, not its
    PyTorch fallback). Empty when the modeling code has none."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        module = importlib.import_module(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].__module__)
    except (KeyError, ImportError, ValueError):
        try:
            module = importlib.import_module(f"transformers.models.{config.model_type}.modeling_{config.model_type}")
        except ImportError:
            return {}
    found: dict[str, bool] = {}
    for value in vars(module).values():
        if callable(value) and getattr(value, "__closure__", None) and hasattr(value, "__wrapped__"):
            names = inspect.getclosurevars(value).nonlocals
            if "package" in names and "is_new_implementation" in names:
                found[names["package"]] = found.get(names["package"], True) and bool(names["is_new_implementation"])
    return found


def causal_lm_class(config):
    """The transformers class AutoModelForCausalLM builds for `config` (None where it has none)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except (KeyError, ValueError):
        return None


def check_attention(config, attn_implementation: str | None) -> None:
    """`varlen` where it stays ours (no flash-attn) runs SDPA or torch's varlen kernel: refused for a model whose
    attention they do not compute (transformers' `_supports_sdpa = False`: gpt-oss's attention sinks), which it
    would silently leave out and so train another model."""
    model_class = causal_lm_class(config)
    if attn_implementation == "varlen" and model_class is not None and not getattr(model_class, "_supports_sdpa", True):
        raise ConfigError(f"attn_implementation: varlen runs {model_class.__name__}'s attention on SDPA here, "
                          "which transformers refuses for it (SDPA leaves out what it adds: gpt-oss's attention "
                          "sinks); set `attn_implementation: eager` and `packing: false` (one record per row)")


def check_packing(config, packing: bool, kernels: dict[str, bool] | None = None) -> None:
    """Refuse packed / padding-free batches on a model whose recurrent layers would leak across records."""
    layers = recurrent_layers(config)
    if not packing or not layers:
        return
    kernels = boundary_kernels(config) if kernels is None else kernels
    missing = [DISTRIBUTIONS.get(package, package) for package, found in sorted(kernels.items()) if not found]
    if kernels and not missing:
        return
    head = (f"packing: {config.model_type} has {len(layers)} of {len(_layer_types(config))} layers of linear "
            "attention, whose recurrent state carries from one packed record into the next unless their kernels take "
            "the records' boundaries; ")
    rows = "set `packing: false` and `padding_free: false` (one record per row)"
    if not missing:
        raise ConfigError(head + f"its modeling code has no kernel known to take them. {rows[0].upper()}{rows[1:]}")
    raise ConfigError(head + f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed "
                      "(transformers' PyTorch fallback cannot keep packed records apart). Install "
                      f"{'it' if len(missing) == 1 else 'them'} on the GPU nodes (pip install {' '.join(missing)}), "
                      f"or {rows}")


def check_liger(config, use_liger_kernel: bool, cuda: bool) -> None:
    if not use_liger_kernel:
        return
    if not cuda:
        raise ConfigError("use_liger_kernel: Liger's kernels are Triton, GPU only; set `use_liger_kernel: false` on "
                          "CPU (TRL's chunked LM head already keeps the logits out of memory)")
    from transformers.utils import is_liger_kernel_available

    if not is_liger_kernel_available():
        raise ConfigError("use_liger_kernel: true needs liger-kernel >= 0.3.0 on every node (pip install "
                          "liger-kernel), or set `use_liger_kernel: false`")
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if config.model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN and text.model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        raise ConfigError(f"use_liger_kernel: the installed liger-kernel has no kernels for model type "
                          f"{config.model_type!r} (it would apply none); set `use_liger_kernel: false`")


def check_kernels(model_path: str, revision: str | None, training_args, model_args) -> None:
    """The recipe's checks, before the corpus is prepared: model_args.attn_implementation resolved in place,
    packing and Liger refused where they would be wrong or fail later."""
    import torch
    from transformers import AutoConfig

    model_args.attn_implementation = select_attention(model_args.attn_implementation)
    config = AutoConfig.from_pretrained(model_path, revision=revision)
    check_attention(config, model_args.attn_implementation)
    check_packing(config, bool(training_args.packing or training_args.padding_free or training_args.eval_packing))
    check_liger(config, training_args.use_liger_kernel, torch.cuda.is_available() and not training_args.use_cpu)
