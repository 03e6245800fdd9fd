"""vLLM's --generation-config: the model's generation config as the requests' defaults.

As vLLM 0.32 does it (vllm/config/model.py: ModelConfig.get_diff_sampling_param;
vllm/entrypoints/openai/chat_completion/protocol.py: to_sampling_params;
vllm/entrypoints/openai/chat_completion/serving.py: override_max_tokens;
vllm/entrypoints/serve/utils/api_utils.py: get_max_tokens; vllm/sampling_params.py:
update_from_generation_config):

- `auto` (the default) reads the model's own generation config: the one transformers loaded
  with the model (its folder's generation_config.json, else one made from config.json), as
  vLLM's try_get_generation_config reads it. `vllm` reads none; a folder, its
  generation_config.json.
- Of its fields that differ from transformers' defaults, the sampling ones (SAMPLING_FIELDS)
  are the defaults of a request that does not set them: the request's value, else the
  config's, else the API's. `max_new_tokens` is the default max_tokens of a chat request
  that sets none (a completion's default stays 16, as vLLM's CompletionRequest has it); a
  folder's also caps every request, asked for or not.
- A folder's `eos_token_id`s other than the model's own stop a request as stop token ids
  (unless `ignore_eos`); the model's own are the engine's EOS already. Beam search keeps its
  own defaults and stops at EOS only, as vLLM's beam search does.

The bundled default model (SmolLM2-135M-Instruct, de-quantized from its GGUF) has a
generation_config.json with only its bos / eos / pad ids (eos: `<|im_end|>`, the tokenizer's
EOS too), as the GGUF's own metadata: `auto` finds no sampling defaults for it.
"""

import functools
from dataclasses import dataclass

from transformers import GenerationConfig

SAMPLING_FIELDS = ("repetition_penalty", "presence_penalty", "frequency_penalty", "temperature",
                   "top_k", "top_p", "min_p")  # fmt: skip
SOURCES = ("auto", "vllm")  # or a folder holding generation_config.json


@dataclass(frozen=True, slots=True)
class GenerationDefaults:
    """What a generation config changes in the requests (see the module docstring)."""

    sampling: tuple[tuple[str, float], ...] = ()  # (SAMPLING_FIELDS name, default) pairs
    max_tokens: int | None = None  # max_new_tokens: a chat request's default max_tokens
    max_tokens_cap: int | None = None  # a folder's max_new_tokens: the most any request gets
    stop_token_ids: tuple[int, ...] = ()  # a folder's EOS ids the engine does not stop at

    @classmethod
    def from_config(cls, config: dict, engine_eos: set[int], folder: bool) -> "GenerationDefaults":
        """vLLM's get_diff_sampling_param over a generation config's non-default fields."""
        sampling = tuple((k, config[k]) for k in SAMPLING_FIELDS if config.get(k) is not None)
        most = config.get("max_new_tokens")
        eos = [i for i in _ids(config.get("eos_token_id")) if i not in engine_eos]
        return cls(sampling, most, most if folder else None, tuple(dict.fromkeys(eos)))

    def sampling_fields(self, body) -> dict:
        """The request's sampling fields: those it set, this config's defaults for the others
        (none for beam search)."""
        own = {name: getattr(body, name) for name in SAMPLING_FIELDS}
        if getattr(body, "use_beam_search", False):
            return own
        return own | {k: v for k, v in self.sampling if k not in body.model_fields_set}

    def cap(self, max_tokens: int) -> int:
        return max_tokens if self.max_tokens_cap is None else min(max_tokens, self.max_tokens_cap)

    def stop_ids(self, body) -> list[int]:
        """The request's stop token ids, with the config's EOS ids unless it ignores EOS."""
        if body.ignore_eos or getattr(body, "use_beam_search", False):
            return body.stop_token_ids
        return list(dict.fromkeys([*body.stop_token_ids, *self.stop_token_ids]))


@functools.lru_cache(maxsize=8)
def generation_defaults(source: str, model, tokenizer) -> GenerationDefaults:
    """The defaults of `source` (`auto`, `vllm` or a folder) for the served model."""
    if source == "vllm":
        return GenerationDefaults()
    own = getattr(model, "generation_config", None)
    engine_eos = {*_ids(tokenizer.eos_token_id), *_ids(getattr(own, "eos_token_id", None))}
    config = own if source == "auto" else GenerationConfig.from_pretrained(source)
    diff = config.to_diff_dict() if config is not None else {}
    return GenerationDefaults.from_config(diff, engine_eos, folder=source != "auto")


def _ids(value) -> list[int]:
    """An eos_token_id field (an id, a list of ids, or None) as a list."""
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)
