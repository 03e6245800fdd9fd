"""Turn what a caller sends (text, token ids or chat messages) into prompt token ids."""


def tokenize_prompt(tokenizer, prompt, chat_template_kwargs=None) -> tuple[str | None, list[int]]:
    """(prompt text, token ids); ValueError naming `prompt` when it is unusable.
    `chat_template_kwargs`: for chat messages, the chat template's options (vLLM's request
    fields: add_generation_prompt, continue_final_message and the template's own variables)."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("prompt must contain some non-whitespace text")
        _check_unicode("prompt", prompt)
        return prompt, tokenizer.encode(prompt)
    if not isinstance(prompt, list) or not prompt:
        raise ValueError(
            f"prompt must be a non-empty str, list of token ids or list of chat messages, "
            f"got {type(prompt).__name__}{' (empty)' if prompt == [] else ''}"
        )
    if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        vocab = len(tokenizer)
        bad = next((t for t in prompt if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(f"prompt token ids must be in [0, {vocab}), got {bad}")
        return None, list(prompt)
    if all(isinstance(m, dict) for m in prompt):
        for i, m in enumerate(prompt):
            if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ValueError(f"prompt[{i}] must have str 'role' and 'content'")
            _check_unicode(f"prompt[{i}].content", m["content"])
        if not any(m["content"].strip() for m in prompt):
            raise ValueError("prompt messages must contain some non-whitespace text")
        options = {"add_generation_prompt": True, **(chat_template_kwargs or {}), "tokenize": False}
        text = tokenizer.apply_chat_template(prompt, **options)
        return text, tokenizer.encode(text, add_special_tokens=False)
    raise ValueError("prompt list must hold only token ids (int) or only chat messages (dict)")


def _check_unicode(field: str, text: str) -> None:
    """Lone surrogates (from JSON escapes such as \\ud800) cannot be encoded or tokenized."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{field} is not valid Unicode text: {exc.reason} at character {exc.start}"
        ) from None
