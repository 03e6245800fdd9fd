"""The CPU speed layer: the engine's own C kernels and the code that calls them.

The engine's core (config, sequence, scheduler, block_manager, model_runner, attention,
llm_engine) runs without the forward and the attention kernels here: transformers' own
modules and torch's SDPA over the paged KV pool.
`EngineConfig(model_impl="transformers", attention_backend="sdpa")` (`--model-impl
transformers --attention-backend sdpa`) runs the engine that way. What the core still takes
from here has a plain PyTorch path of its own: without a C compiler the kernels are not
built, attention falls back to SDPA, the native forward and the greedy argmax to PyTorch ops,
and the log says why.

The core reaches this package only through the names below (`from engine import cpu`), and
picks what runs once, when an engine is made (`resolve_model_impl`,
`resolve_attention_backend`). The modules behind them:

- openmp.py: torch loaded with a short OpenMP spin; `off_thread`, `lower_priority`
- native_build.py: builds csrc/*.c into one library, cached per source and CPU
- paged_kernel.py: attention that reads the KV blocks in place (csrc/paged_*.c)
- fused_ops.py: RMSNorm, SiLU-and-mul, RoPE + KV write, argmax (csrc/fused_ops.c), or torch
- linear.py: fused, pre-packed projections (csrc/gemm*.c, csrc/gemv.c, oneDNN or F.linear)
- native_model.py: `NativeDecoder`, the engine's own forward for Llama-family models
- kv_pool.py: the KV pool's memory, made for free and mapped in bulk ahead of use
"""

# openmp first: it loads torch with the engine's OpenMP setting
from engine.cpu.openmp import lower_priority, off_thread  # isort: skip
from engine.cpu.backends import (
    argmax_op,
    load_attention_kernels,
    resolve_attention_backend,
    resolve_model_impl,
)
from engine.cpu.kv_pool import ResidentBlocks, zeroed
from engine.cpu.native_model import NativeDecoder

__all__ = [
    "NativeDecoder",
    "ResidentBlocks",
    "argmax_op",
    "load_attention_kernels",
    "lower_priority",
    "off_thread",
    "resolve_attention_backend",
    "resolve_model_impl",
    "zeroed",
]
