"""tokenize_prompt: text, token ids and chat messages -> prompt ids; errors name `prompt`."""

import pytest

from engine.request_input import tokenize_prompt


@pytest.fixture(scope="module")
def tok(default_model):
    return default_model[1]


def test_text_prompt(tok):
    text, ids = tokenize_prompt(tok, "Hello world")
    assert text == "Hello world"
    assert ids == tok.encode("Hello world")
    assert tok.decode(ids) == "Hello world"


def test_text_prompt_keeps_surrounding_whitespace(tok):
    text, ids = tokenize_prompt(tok, "  Hi\n")
    assert text == "  Hi\n" and ids == tok.encode("  Hi\n")


def test_token_ids_prompt(tok):
    ids = tok.encode("Hello world")
    text, out = tokenize_prompt(tok, ids)
    assert text is None
    assert out == ids
    assert out is not ids  # the caller's list is not kept
    assert tokenize_prompt(tok, [0, len(tok) - 1])[1] == [0, len(tok) - 1]


def test_chat_messages_go_through_the_chat_template(tok):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Again, 你好 👍"},
    ]
    text, ids = tokenize_prompt(tok, messages)
    assert text == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ids == list(expected)
    assert text.endswith("<|im_start|>assistant\n")  # ready for the model to answer


def test_chat_without_system_gets_the_template_default(tok):
    messages = [{"role": "user", "content": "hi"}]
    text, ids = tokenize_prompt(tok, messages)
    assert "SmolLM" in text  # SmolLM2's template adds its default system prompt
    assert ids == list(
        tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    )
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3


BAD_PROMPTS = [
    "",
    " ",
    " \n\t ",
    [],
    [-1],
    [1, 2, 10**9],
    "VOCAB",  # replaced by len(tokenizer)
    [True, False],
    [1, True],
    [1.0, 2.0],
    [1, "2"],
    [1, {"role": "user", "content": "hi"}],
    [{"role": "user", "content": "hi"}, 5],
    [{"role": "user"}],
    [{"content": "hi"}],
    [{"role": "user", "content": None}],
    [{"role": 1, "content": "hi"}],
    [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    [{"role": "user", "content": "   "}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "\n"}],
    None,
    42,
    b"bytes",
    (1, 2, 3),
    {"role": "user", "content": "hi"},
    [[1, 2]],
]


@pytest.mark.parametrize("prompt", BAD_PROMPTS, ids=lambda p: repr(p)[:40])
def test_bad_prompt_raises_value_error_naming_prompt(tok, prompt):
    if prompt == "VOCAB":
        prompt = [5, len(tok)]
    with pytest.raises(ValueError, match=r"\bprompt\b"):
        tokenize_prompt(tok, prompt)


def test_out_of_vocab_message_says_the_range(tok):
    with pytest.raises(ValueError, match=rf"\[0, {len(tok)}\).*{len(tok) + 3}"):
        tokenize_prompt(tok, [1, len(tok) + 3])
