"""vllm serve's model-loading flags, as the loader (engine/loader.py) and the tokenizer take
them."""

import argparse
from pathlib import Path

from playground.cli.model_source import StartupError

JINJA_CHARS = "{}\n"  # vLLM's test: a value with none of these was meant as a file's path


def hub_options(args: argparse.Namespace) -> dict:
    """transformers' from_pretrained keywords for --revision, --trust-remote-code,
    --hf-token, --download-dir and --load-format (only those given)."""
    options = {
        "revision": args.revision,
        "trust_remote_code": args.trust_remote_code or None,
        "token": args.hf_token,
        "cache_dir": args.download_dir,
        "use_safetensors": {"safetensors": True, "pt": False}.get(args.load_format),
    }
    return {k: v for k, v in options.items() if v is not None}


def chat_template(value: str | None) -> str | None:
    """--chat-template as vLLM reads it (vllm/renderers/chat_utils.py, `_load_chat_template`):
    a file's contents; else, if the text has a Jinja character, the text itself; else it was
    meant as a file's path, which does not open."""
    if value is None:
        return None
    try:
        return Path(value).read_text()
    except OSError as exc:
        if not any(c in value for c in JINJA_CHARS):
            raise StartupError(
                f"--chat-template {value!r} looks like a file's path, but it cannot be read "
                f"({exc.strerror}); give a readable file or the template itself"
            ) from None
    return value


def check_kv_cache_dtype(kv_cache_dtype: str, model_dtype) -> None:
    """The KV cache is kept in the model's dtype: --kv-cache-dtype may be 'auto' or name it."""
    name = str(model_dtype).removeprefix("torch.")
    if kv_cache_dtype not in ("auto", name):
        raise StartupError(
            f"--kv-cache-dtype {kv_cache_dtype!r}: this engine keeps the KV cache in the "
            f"model's dtype ({name}); give 'auto' or {name!r}, or --dtype to change both"
        )
