"""Which parts of the CPU layer an engine runs: chosen once, when the engine is made."""

import functools
import logging

import torch

from engine.cpu import fused_ops, native_model, paged_kernel
from engine.validation import FieldError

logger = logging.getLogger(__name__)


def resolve_model_impl(requested: str, kv_backend: str, torch_compile: bool, model) -> str:
    """What the runner will run, "native" or "transformers"; FieldError if "native" was asked
    for and cannot serve. "auto" takes "native" where it serves and nothing is compiled."""
    if requested == "transformers":
        return "transformers"
    if kv_backend != "paged":
        reason = f"kv_backend={kv_backend!r} runs the transformers modules"
    else:
        reason = native_model.unsupported_reason(model)
    if requested == "native" and reason is not None:
        raise FieldError("model_impl", f"model_impl='native' cannot serve this model: {reason}")
    if requested == "native" or (reason is None and not torch_compile):
        return "native"
    return "transformers"


def resolve_attention_backend(
    requested: str, kv_backend: str, param: torch.Tensor, head_dim: int
) -> str:
    """What the paged attention runs, "paged_kernel" or "sdpa"; FieldError if the kernels were
    asked for and cannot serve. hf_cache runs transformers' own attention: "sdpa"."""
    if requested == "sdpa":
        return "sdpa"
    if kv_backend != "paged":
        reason = f"kv_backend={kv_backend!r} keeps no paged pool"
    else:
        reason = paged_kernel.unsupported_reason(param.device, param.dtype, head_dim)
    if reason is None:
        try:
            paged_kernel.load()
        except paged_kernel.KernelUnavailable as exc:
            reason = str(exc)
    if reason is None:
        return "paged_kernel"
    if requested == "paged_kernel":
        raise FieldError(
            "attention_backend", f"attention_backend='paged_kernel' cannot serve here: {reason}"
        )
    if kv_backend == "paged":
        logger.info("attention: sdpa (the paged kernels cannot serve: %s)", reason)
    return "sdpa"


def load_attention_kernels() -> tuple[
    paged_kernel.PagedDecodeKernel, paged_kernel.PagedPrefillKernel
]:
    """The paged decode and prefill kernels (resolve_attention_backend said they serve)."""
    return paged_kernel.load(), paged_kernel.load_prefill()


@functools.cache
def argmax_op(device: torch.device, dtype: torch.dtype):
    """Each row's argmax, the first of equal maxima: the fused C op over the engine's threads
    where it runs (a CPU, float32 or bfloat16), else torch's."""
    return fused_ops.select(device, dtype).argmax
