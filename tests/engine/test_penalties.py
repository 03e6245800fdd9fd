"""Presence / frequency / repetition penalties against a plain-torch reference written from
vLLM's apply_penalties (vllm/model_executor/layers/utils.py), min_tokens as vLLM's
MinTokensLogitsProcessor and detokenizer (vllm/v1/engine/detokenizer.py), and the new
SamplingParams fields (vllm/sampling_params.py)."""

import pytest
import torch

from engine import FieldError, SamplingParams
from engine.detokenizer import IncrementalDetokenizer
from engine.penalties import apply_penalties
from engine.sampler import Sampler
from engine.sequence import Sequence, SequenceStatus

VOCAB = 32
EOS = 0


def make_seq(tok, prompt, outputs=(), **params):
    sp = SamplingParams(**params)
    detok = IncrementalDetokenizer(tok, sp.stop, False, min_tokens=sp.min_tokens)
    seq = Sequence(0, 0, list(prompt), sp, detok, frozenset({EOS}), 1024)
    seq.output_token_ids = list(outputs)
    return seq


def reference(logits: torch.Tensor, seq: Sequence) -> torch.Tensor:
    """One row, token by token: repetition over prompt and output, then frequency and presence
    over the output (OpenAI's definition, as vLLM applies them)."""
    out = logits.clone()
    p = seq.params
    for t in set(seq.prompt_token_ids) | set(seq.output_token_ids):
        out[t] = out[t] / p.repetition_penalty if out[t] > 0 else out[t] * p.repetition_penalty
    for t in set(seq.output_token_ids):
        count = seq.output_token_ids.count(t)
        out[t] -= p.frequency_penalty * count + p.presence_penalty
    return out


CASES = [  # (prompt, outputs, penalties); {} = not penalized
    ([1, 2, 3], [4, 4, 5], dict(presence_penalty=1.5)),
    ([1, 2], [], {}),
    ([7, 7, 8], [9, 9, 9, 7], dict(frequency_penalty=0.7)),
    ([3], [3, 10, 11, 10], dict(presence_penalty=-0.5, frequency_penalty=2.0)),
    ([5, 6], [6, 12], {}),
    (
        [2, 4, 6],
        [2, 2, 13, 14],
        dict(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=-1.1),
    ),  # fmt: skip
]


def test_batched_penalties_match_the_reference_row_by_row(char_tokenizer):
    torch.manual_seed(0)
    logits = torch.randn(len(CASES), VOCAB) * 3
    seqs = [make_seq(char_tokenizer, pr, out, **pen) for pr, out, pen in CASES]
    rows = [i for i, (_, _, pen) in enumerate(CASES) if pen]
    got = logits.clone()
    apply_penalties(got, seqs, rows)
    for i, seq in enumerate(seqs):
        expected = reference(logits[i], seq) if i in rows else logits[i]
        torch.testing.assert_close(got[i], expected, rtol=1e-6, atol=1e-6)


def test_sampler_picks_after_penalties_in_a_mixed_batch(char_tokenizer):
    """Greedy rows pick the argmax of their penalized logits; plain rows are untouched, and
    the logits the runner handed over stay as they were."""
    torch.manual_seed(1)
    logits = torch.randn(len(CASES), VOCAB)
    for i, (_, outputs, _) in enumerate(CASES):  # the repeated tokens lead before penalties
        for t in outputs:
            logits[i, t] += 1.5
    before = logits.clone()
    seqs = [make_seq(char_tokenizer, pr, out, temperature=0.0, **pen) for pr, out, pen in CASES]
    picked = [tok for tok, _ in Sampler(char_tokenizer, seed=0)(logits, seqs)]
    expected = [int(reference(logits[i], s).argmax()) for i, s in enumerate(seqs)]
    assert picked == expected
    assert picked != [int(r.argmax()) for r in logits]  # the penalties changed some pick
    assert torch.equal(logits, before)


def test_min_tokens_masks_eos_and_stop_token_ids_until_reached(char_tokenizer):
    logits = torch.zeros(2, VOCAB)
    logits[:, EOS], logits[:, 9], logits[:, 4] = 5.0, 4.0, 1.0
    sampler = Sampler(char_tokenizer, seed=0)
    params = dict(temperature=0.0, min_tokens=3, stop_token_ids=[9], ignore_eos=True)
    short = make_seq(char_tokenizer, [1], [4, 4], **params)
    long = make_seq(char_tokenizer, [1], [4, 4, 4], **params)
    assert [t for t, _ in sampler(logits, [short, long])] == [4, EOS]


def test_stop_strings_count_only_after_min_tokens(char_tokenizer):
    tok = char_tokenizer
    ids = tok.encode("ab stop cd stop")
    detok = IncrementalDetokenizer(tok, ["stop"], False, min_tokens=8)
    found = [detok.update(ids[:k]) for k in range(1, len(ids) + 1)]
    # the first "stop" ends at token 7, inside min_tokens: only the second one counts
    assert found.index("stop") == len(ids) - 1
    assert detok.text == "ab stop cd "


def test_stop_token_text_is_left_out_unless_asked(char_tokenizer):
    """vLLM's detokenizer leaves out the token that stopped the sequence (a stop token id or
    EOS) unless include_stop_str_in_output."""
    tok = char_tokenizer
    stop_id = tok.encode("!")[0]
    texts = {}
    for include in (False, True):
        seq = make_seq(tok, [1], stop_token_ids=[stop_id], include_stop_str_in_output=include)
        seq.detokenizer.include_stop_str_in_output = include
        seq.set_status(SequenceStatus.RUNNING)
        for t in tok.encode("hi!"):
            reason = seq.append_token(t)
        assert reason == "stop_word"
        texts[include] = seq.text
    assert texts == {False: "hi", True: "hi!"}


def test_skip_special_tokens_false_keeps_them(tokenizer):
    ids = [1] + tokenizer.encode("Hello there", add_special_tokens=False)  # 1: <|im_start|>
    kept = IncrementalDetokenizer(tokenizer, [], False, skip_special_tokens=False)
    skipped = IncrementalDetokenizer(tokenizer, [], False)
    for k in range(1, len(ids) + 1):
        kept.update(ids[:k])
        skipped.update(ids[:k])
    assert kept.text == tokenizer.decode(ids, skip_special_tokens=False)
    assert kept.text.startswith("<|im_start|>")
    assert skipped.text == tokenizer.decode(ids, skip_special_tokens=True) == "Hello there"


def test_new_fields_default_to_neutral():
    p = SamplingParams()
    assert (p.min_tokens, p.presence_penalty, p.frequency_penalty) == (0, 0.0, 0.0)
    assert p.skip_special_tokens is True and p.structured_outputs is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("min_tokens", -1), ("min_tokens", 129), ("min_tokens", 1.5), ("presence_penalty", 2.5),
     ("frequency_penalty", -2.01), ("presence_penalty", float("nan")),
     ("skip_special_tokens", 1), ("structured_outputs", "json")],
)  # fmt: skip
def test_bad_values_name_the_field(field, value):
    with pytest.raises(FieldError) as err:
        SamplingParams(**{field: value})
    assert err.value.field == field and str(err.value).startswith(field)


def test_greedy_n_above_one_is_refused_as_vllm():
    """vllm/sampling_params.py, SamplingParams._verify_greedy_sampling."""
    with pytest.raises(FieldError, match="n must be 1 when using greedy sampling") as err:
        SamplingParams(temperature=0.0, n=2)
    assert err.value.field == "n"
    SamplingParams(temperature=0.5, n=2)
    SamplingParams(temperature=0.0, beam_width=2, n=2)  # beam search is its own path


@pytest.mark.parametrize(
    "field", ["min_tokens", "presence_penalty", "frequency_penalty", "structured_outputs"]
)
def test_beam_search_refuses_the_new_fields(field):
    value = {"structured_outputs": {"regex": "a+"}, "min_tokens": 2}.get(field, 0.5)
    with pytest.raises(FieldError) as err:
        SamplingParams(temperature=0.0, beam_width=2, **{field: value})
    assert err.value.field == field
