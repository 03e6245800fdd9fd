"""The served model: its names, the engine behind it, its /v1/models card.

As vLLM's OpenAIServingModels (vllm/entrypoints/openai/models/serving.py): a card with `root`
(the model it was loaded from), `parent` (null: no adapters here) and one permission object.
"""

import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.loader import DEFAULT_HUB_ID
from playground.driver import EngineDriver
from playground.server.openai_protocol import APIError, not_ready
from playground.server.openapi import ModelCard, ModelList, ModelPermission

START_TIME = time.time()  # the "created" of /v1/models


@dataclass(frozen=True)
class ServedModel:
    """The engine the routes serve and the names it answers to. `get_driver()` returns the
    EngineDriver, or None while there is none yet; `given`: vLLM's --served-model-name (the
    first is the one answered with), empty for the model's own names."""

    get_driver: Callable[[], EngineDriver | None]
    given: tuple[str, ...] = ()

    @classmethod
    def of(cls, driver, model_name: str | Sequence[str] | None) -> "ServedModel":
        get_driver = driver if callable(driver) else (lambda: driver)
        given = (model_name,) if isinstance(model_name, str) else tuple(model_name or ())
        return cls(get_driver, given)

    def ready(self) -> EngineDriver:
        """The driver, running; APIError 503 otherwise."""
        d = self.get_driver()
        if d is None or not d.is_alive:
            raise not_ready()
        return d

    def names(self, d: EngineDriver) -> tuple[str, ...]:
        """Every name a request may ask for, the answered one first; "default" too."""
        return tuple(dict.fromkeys((*(self.given or served_model_names(d.model)), "default")))

    def check(self, d: EngineDriver, asked: str | None) -> str:
        """The name to answer with; 404 for a model this server does not serve."""
        served = self.names(d)
        if asked is not None and asked not in served:
            message = f"The model `{asked}` does not exist; this server serves `{served[0]}`"
            raise APIError(404, message, param="model", code="model_not_found")
        return served[0]

    def cards(self, d: EngineDriver) -> ModelList:
        """/v1/models: the card of the name answered with (the others are aliases of it)."""
        root = getattr(d.model.config, "_name_or_path", "") or self.names(d)[0]
        listed = self.names(d)[:1]
        permission = ModelPermission(id=f"modelperm-{uuid.uuid4().hex}", created=int(time.time()))
        return ModelList(
            data=[
                ModelCard(
                    id=name,
                    created=int(START_TIME),
                    root=root,
                    max_model_len=d.config.max_model_len,
                    permission=[permission],
                )
                for name in listed
            ]  # fmt: skip
        )


def served_model_names(model) -> tuple[str, ...]:
    """The names the API serves a model under, the one it answers with first: the short name
    (a hub id's last part, a directory's name, the bundled GGUF's model name without the
    loader's cache suffixes), then the hub id it is known by, if any."""
    path = getattr(model.config, "_name_or_path", "") or ""
    if not path:
        return (model.config.model_type,)
    if not os.path.isdir(path):  # a hub id
        return tuple(dict.fromkeys((path.rsplit("/", 1)[-1], path)))
    name = os.path.basename(os.path.normpath(path))
    name = re.sub(r"-\d{4,}-(?:[0-9a-f]{16}|\d{10,})$", "", name)  # engine/loader.py's
    # conversion cache: <gguf stem>-<size>-<16 hex of hash> (older: -<size>-<mtime ns>)
    name = re.sub(r"\.(?:I?Q\d\w*|F16|F32|BF16)$", "", name)  # the GGUF's quantization tag
    if name == DEFAULT_HUB_ID.rsplit("/", 1)[-1]:  # the bundled copy of the default model
        return name, DEFAULT_HUB_ID
    return (name,)
