"""Structured outputs (xgrammar, as vLLM's default backend): random tiny models write
garbage, so only the grammar makes their outputs parse; and the real model once. Also the
mask's batching, preemption, forks, the allowed counts and bad specs naming their field."""

import json
import re
from types import SimpleNamespace

import pytest
import torch

from engine import FieldError, SamplingParams
from engine.structured_output import new_grammar_state
from engine.structured_params import StructuredOutputsParams
from tests.tiny_models import make_engine

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 6},
                           "zip": {"type": "integer", "minimum": 0, "maximum": 999}},
            "required": ["city", "zip"],
        },
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                 "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "address", "role", "tags"],
}  # fmt: skip
LEVEL = {"enum": ["low", "mid", "high"]}
EBNF = 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9] [0-9]?'
SPECS = {  # name -> (StructuredOutputsParams fields, check of the text)
    "nested object": ({"json": PERSON}, lambda t: _valid(json.loads(t), PERSON)),
    "enum": ({"json": json.dumps(LEVEL)}, lambda t: json.loads(t) in LEVEL["enum"]),
    "regex": ({"regex": r"[a-z]{2,4}-\d{3}"}, lambda t: re.fullmatch(r"[a-z]{2,4}-\d{3}", t)),
    "choice": ({"choice": ["yes", "no", 'say "hi"']}, lambda t: t in ("yes", "no", 'say "hi"')),
    "grammar": ({"grammar": EBNF}, lambda t: re.fullmatch(r"\([1-9]\d?(\+[1-9]\d?)*\)", t)),
}


def _valid(value, schema) -> bool:
    """The JSON schema keywords PERSON uses, checked by hand."""
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema["type"]
    if kind == "object":
        return (isinstance(value, dict) and set(value) <= set(schema["properties"])
                and set(schema["required"]) <= set(value)
                and all(_valid(v, schema["properties"][k]) for k, v in value.items()))  # fmt: skip
    if kind == "array":
        return (isinstance(value, list) and schema["minItems"] <= len(value) <= schema["maxItems"]
                and all(_valid(v, schema["items"]) for v in value))  # fmt: skip
    if kind == "string":
        return isinstance(value, str) and len(value) <= schema["maxLength"]
    return isinstance(value, int) and schema["minimum"] <= value <= schema["maximum"]


def structured(temperature=1.0, **spec) -> SamplingParams:
    so = StructuredOutputsParams(disable_any_whitespace=True, **spec)
    return SamplingParams(max_tokens=120, temperature=temperature, seed=3, structured_outputs=so)


@pytest.fixture(scope="module")
def engine(tiny_model):
    return make_engine(*tiny_model)


def test_every_spec_parses_with_a_random_model_in_one_batch(engine):
    """All kinds in one batch with free-text rows: each output parses against its own spec,
    each stopped when its grammar was complete (EOS) and recorded what it allowed."""
    names = list(SPECS)
    params = [structured(temperature=0.0 if n == "regex" else 1.0, **SPECS[n][0]) for n in names]
    params.append(SamplingParams(max_tokens=40, seed=2, structured_outputs={"json_object": True}))
    params += [SamplingParams(max_tokens=20, temperature=1.0, seed=1, ignore_eos=True)] * 2
    prompts = ["Hi", "Tell me", "x", "A longer prompt here", "ok", "{", "q", "r"]
    outs = engine.generate(prompts, params)
    for name, out in zip(names, outs, strict=False):
        assert SPECS[name][1](out.text), (name, out.text)
        assert out.stop_reason == "eos", (name, out.text)
        [seq] = engine.inspect(out.request_id).seqs
        assert len(seq.num_allowed_tokens) == len(out.token_ids)
        assert all(0 < n < 49152 for n in seq.num_allowed_tokens)
    obj = outs[len(names)]  # free keys and strings: a random model may not close them in time
    if obj.stop_reason == "eos":
        assert isinstance(json.loads(obj.text), dict), obj.text
    else:
        assert obj.stop_reason == "max_tokens" and obj.text.startswith("{"), obj.text
    assert all(len(o.token_ids) == 20 for o in outs[len(names) + 1 :])  # free text untouched
    first = engine.inspect(outs[names.index("choice")].request_id).seqs[0].num_allowed_tokens
    assert first[-1] <= 2  # at the end only EOS (a tokenizer may offer it twice)


def test_forked_siblings_and_preemption_keep_the_matcher_in_step(tiny_model):
    """n=3 siblings fork a new matcher each (caught up with what they share); a pool too
    small for all of them preempts some, which recompute their K/V while their matchers
    keep every token they accepted."""
    engine = make_engine(*tiny_model, num_kv_blocks=28, max_num_seqs=8)
    so = {"json": PERSON, "disable_any_whitespace": True}
    params = SamplingParams(max_tokens=100, temperature=1.0, seed=5, n=3, structured_outputs=so)
    [out] = engine.generate(["Who?"], params)
    assert out.metrics.num_preemptions > 0
    assert len(out.outputs) == 3
    for c in out.outputs:
        assert c.stop_reason == "eos" and _valid(json.loads(c.text), PERSON), c.text
    for seq in engine.finished[-1].seqs:
        assert seq.grammar.num_accepted == len(seq.output_token_ids)


def test_the_allowed_count_is_what_the_mask_lets_through(tokenizer):
    from engine.sampler import Sampler
    from engine.sequence import Sequence

    params = SamplingParams(temperature=0.0, structured_outputs={"choice": ["yes", "no"]})
    seqs = []
    for i in range(3):
        grammar = new_grammar_state(FakeModel, tokenizer, params) if i != 1 else None
        seq = Sequence(i, 0, [1], params, None, frozenset({2}), 64, grammar=grammar)
        seqs.append(seq)
    logits = torch.zeros(3, 49152)
    masked = Sampler(tokenizer, seed=0)._processed(logits, seqs)
    allowed = torch.isfinite(masked).sum(dim=1).tolist()
    assert allowed[1] == 49152 and 2 <= allowed[0] < 10
    assert [seqs[0].grammar.num_allowed, seqs[2].grammar.num_allowed] == [[allowed[0]]] * 2
    assert torch.equal(logits, torch.zeros(3, 49152))  # the runner's logits stay


class FakeModel:
    class config:  # noqa: N801 - the attribute path the engine reads
        @staticmethod
        def get_text_config():
            return SimpleNamespace(vocab_size=49152)


@pytest.mark.parametrize(
    ("spec", "field"),
    [({"regex": "(ab"}, "structured_outputs.regex"),
     ({"grammar": "root ::= "}, "structured_outputs.grammar"),
     ({"json": {"type": "nonsense"}}, "structured_outputs.json"),
     ({"json": "{not json"}, "structured_outputs.json"),
     ({"regex": "a", "choice": ["a"]}, "structured_outputs"),
     ({}, "structured_outputs"),
     ({"choice": []}, "structured_outputs.choice"),
     ({"json_object": False}, "structured_outputs.json_object")],
)  # fmt: skip
def test_bad_specs_name_their_field_and_queue_nothing(engine, spec, field):
    with pytest.raises(FieldError) as err:
        engine.add_request("bad", "hi", SamplingParams(structured_outputs=spec))
    assert err.value.field == field and str(err.value).startswith(field)
    assert not engine.has_unfinished_requests()


def test_the_real_model_answers_in_its_schema(default_model):
    from engine import EngineConfig, LLMEngine

    model, tokenizer = default_model
    engine = LLMEngine(model, tokenizer, EngineConfig(num_kv_blocks=32, max_num_seqs=2))
    chat = [{"role": "user", "content": "Is the sky blue? Answer with your confidence."}]
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]},
                       "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["answer", "confidence"],
    }  # fmt: skip
    so = {"json": schema, "disable_any_whitespace": True}
    params = SamplingParams(max_tokens=30, temperature=0.0, structured_outputs=so)
    [out] = engine.generate([chat], params)
    value = json.loads(out.text)
    assert out.stop_reason == "eos" and value["answer"] in ("yes", "no"), out.text
    assert set(value) == {"answer", "confidence"} and 0 <= value["confidence"] <= 100


def test_the_inspector_shows_what_the_grammar_allowed(engine):
    from playground.board.inspector import render_inspector

    [out] = engine.generate(["Pick"], structured(choice=["left", "right"]))
    detail = engine.inspect(out.request_id)
    html = render_inspector(detail, (), out.request_id)
    assert "tokens the grammar allowed, per step" in html
    for n in detail.seqs[0].num_allowed_tokens:
        assert f'title="{n} tokens allowed"' in html
    free = engine.generate(["Pick"], SamplingParams(max_tokens=3, seed=0))[0]
    assert "grammar" not in render_inspector(engine.inspect(free.request_id), (), "x")
