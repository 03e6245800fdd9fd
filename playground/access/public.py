"""The public door: how a visitor (the board) or an API client asks the shared engine.

Both come through here. The prompt is tokenized once (the engine gets the token ids, the
board a preview of the prompt); the sampling fields become SamplingParams; the public limits
(playground/access/limits.py) apply, and the driver counts the owner's requests in flight on its own
thread. Whatever is refused raises one RequestRejected whose `field` names what to change
(`status` and `code` say why). Simulated users do not come through this door.
"""

import os

from jinja2 import TemplateError

from engine import FieldError, SamplingParams, structured_output
from engine.request_input import tokenize_prompt
from playground.access.turns import stop_at_turns
from playground.driver import EngineDriver
from playground.handles import RequestHandle, RequestRejected, preview

SUBMIT_TIMEOUT_S = 30.0  # for the driver to take the request


def is_public(public_flag: bool = False) -> bool:
    """Whether this server is open to the public: on a Space (SPACE_ID is set), or --public.
    A public server keeps its per-visitor limits and keep-alive comments on by default."""
    return public_flag or bool(os.environ.get("SPACE_ID"))


def tokenize(driver: EngineDriver, prompt, chat_template_kwargs=None) -> list[int] | None:
    """The prompt's token ids (chat messages through the chat template, with its options
    `chat_template_kwargs`); None on a board over a remote server, which has no tokenizer
    here: the prompt goes as it is."""
    if driver.tokenizer is None:
        return None
    try:
        _, token_ids = tokenize_prompt(driver.tokenizer, prompt, chat_template_kwargs)
    except (ValueError, TemplateError) as exc:  # a template may raise on its options
        raise RequestRejected(str(exc), "prompt") from None
    return token_ids


def sampling_params(**fields) -> SamplingParams:
    try:
        return SamplingParams(**fields)
    except FieldError as exc:
        raise RequestRejected(str(exc), exc.field) from None


def compile_grammar(driver: EngineDriver, params: SamplingParams) -> None:
    """Compile the grammar of a request with structured outputs on the caller's thread (the
    engine caches it: its add_request finds it ready); RequestRejected naming the field if it
    cannot compile. Nothing to do without a local model (a board over a remote server)."""
    spec = params.structured_outputs
    if spec is None or driver.tokenizer is None or driver.model is None:
        return
    try:
        structured_output.compile_grammar(
            driver.tokenizer, structured_output.logits_width(driver.model), spec
        )
    except FieldError as exc:
        raise RequestRejected(str(exc), exc.field) from None


def submit(
    driver: EngineDriver,
    prompt,
    token_ids: list[int] | None,
    params: SamplingParams,
    owner: str,
    request_id: str | None = None,
    priority: int = 0,
    wait: bool = True,
) -> RequestHandle:
    """Queue a tokenized prompt within the public limits; blocks until the engine has it
    (wait=False: the caller awaits `handle.accepted`, SUBMIT_TIMEOUT_S at most). token_ids
    None (a remote server's board): `prompt` is sent, and the server's own context check
    stands in for the prompt-token limit.

    concurrent.futures.TimeoutError if the driver does not take it within SUBMIT_TIMEOUT_S.
    """
    params = driver.limits.check(params, len(token_ids) if token_ids is not None else 0)
    max_waiting = driver.config.max_waiting
    if max_waiting is not None and driver.snapshot().num_waiting >= max_waiting:
        message = f"the waiting queue is full ({max_waiting} requests); retry later"
        raise RequestRejected(message, "requests", status=429, code="queue_full")
    return driver.submit(
        token_ids if token_ids is not None else prompt,
        params,
        request_id=request_id,
        owner=owner,
        label=preview(prompt),
        priority=priority,
        max_in_flight=driver.limits.max_in_flight,
        max_num_queued_reqs=driver.limits.max_num_queued_reqs,
        wait=wait,
        timeout=SUBMIT_TIMEOUT_S,
    )


def submit_text(driver: EngineDriver, text: str, params: SamplingParams, owner: str):
    """A visitor's text, sent as one user turn of a chat."""
    messages = [{"role": "user", "content": text}]
    params = stop_at_turns(params, driver.tokenizer)  # the answer, not the next turn
    return submit(driver, messages, tokenize(driver, messages), params, owner)
