"""Is the model there? Asked before the slow imports, so that a mistyped path or hub id is
answered in a line or two that say which and what to do, not in a traceback of the loader.

`model_problem` looks at the name: "default" (the bundled model), an existing folder, or a
hub id that is in the local cache or that the hub knows. `StartupError` carries the answer.
"""

from pathlib import Path


class StartupError(Exception):
    """A start that cannot go on for a reason the user can fix; the message says how."""


def check_model(name: str, revision: str | None = None, token: str | None = None) -> None:
    """StartupError when `name` is neither "default", a model folder, nor a hub id that is
    cached here or known to the hub."""
    if name == "default":
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise StartupError(
                f"model folder {name!r} has no config.json: give a transformers model folder "
                "(config.json, weights, tokenizer files) or a hub id such as ORG/NAME"
            )
        return
    if path.exists() or _looks_like_path(name):
        raise StartupError(
            f"model {name!r}: no such folder. Give an existing model folder, a hub id such "
            "as ORG/NAME, or no model for the bundled default"
        )
    _check_hub_id(name, revision, token)


def _looks_like_path(name: str) -> bool:
    """A hub id is NAME or ORG/NAME; anything else with a slash, or a leading . or ~, is a
    path."""
    return name.startswith((".", "~", "/")) or name.count("/") > 1 or "\\" in name


def _check_hub_id(name: str, revision: str | None, token: str | None) -> None:
    import huggingface_hub as hub  # only for a hub id
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        raise StartupError(f"model {name!r} is neither a folder here nor a hub id: {exc}") from None
    if hub.try_to_load_from_cache(name, "config.json", revision=revision) is not None:
        return  # cached: loads without the network
    try:
        hub.model_info(name, revision=revision, token=token, timeout=10)
    except GatedRepoError:
        raise StartupError(
            f"model {name!r} is gated on the hub: accept its terms there and "
            "give your token (--hf-token or $HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise StartupError(f"model {name!r} has no revision {revision!r} on the hub") from None
    except RepositoryNotFoundError:
        raise StartupError(
            f"model {name!r}: no such model on the hub (a private one wants "
            "--hf-token); check the name, or give a local folder"
        ) from None
    except OfflineModeIsEnabled:
        raise StartupError(
            f"model {name!r} is not in the local cache, and HF_HUB_OFFLINE "
            "is set: give a local folder, or unset it to download"
        ) from None
    except Exception as exc:  # the network: DNS, refused, timed out, a proxy's answer
        raise StartupError(
            f"model {name!r} is not in the local cache, and the hub cannot be reached to "
            f"download it ({type(exc).__name__}: {exc}); check the network, or give a local folder"
        ) from None
