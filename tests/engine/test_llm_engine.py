"""LLMEngine's contract: requests in, outputs out, every stop reason, errors that name fields."""

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

from engine import LLMEngine, SamplingParams, SequenceStatus, StopReason
from tests.engine.checks import POISON, GreedyChecker, assert_no_leak, poison, run_staggered
from tests.tiny_models import TINY, make_engine

GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)


@pytest.fixture
def engine(llama_pair, tokenizer):
    return make_engine(llama_pair[0], tokenizer)


def test_deltas_join_to_text_which_is_the_decoded_tokens(engine, tokenizer):
    engine.add_request("a", "Tell me a story about a robot.", GREEDY)
    deltas, last = [], None
    while engine.has_unfinished_requests():
        for out in engine.step():
            deltas.append(out.outputs[0].delta)
            last = out
    assert last.finished and last.stop_reason == StopReason.MAX_TOKENS
    assert len(last.token_ids) == 16
    assert (
        "".join(deltas) == last.text == tokenizer.decode(last.token_ids, skip_special_tokens=True)
    )
    m = last.metrics
    assert m.num_prompt_tokens == len(last.prompt_token_ids) and m.num_generated_tokens == 16
    assert m.arrival <= m.first_scheduled <= m.first_token <= m.finished
    assert m.ttft > 0 and m.tpot > 0 and m.e2e >= m.ttft


def test_stop_string_across_tokens_is_cut_and_never_streamed(engine, tokenizer):
    text = engine.generate(["Once upon a time"], GREEDY)[0].text
    stop = text[5:12]  # very likely spans two tokens
    deltas, final = [], None
    engine.add_request(
        "s", "Once upon a time", SamplingParams(**{**_fields(GREEDY), "stop": [stop]})
    )
    while engine.has_unfinished_requests():
        for out in engine.step():
            deltas.append(out.outputs[0].delta)
            final = out
    assert final.stop_reason == StopReason.STOP_WORD
    assert final.text == text[: text.index(stop)]
    assert "".join(deltas) == final.text and stop not in "".join(deltas)
    kept = engine.generate(
        ["Once upon a time"],
        SamplingParams(**{**_fields(GREEDY), "stop": [stop], "include_stop_str_in_output": True}),
    )[0]
    assert kept.text == text[: text.index(stop) + len(stop)]


def test_stop_token_ids_eos_and_length(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer, max_model_len=24)
    tokens = engine.generate(["A B C"], GREEDY)[0].token_ids
    out = engine.generate(
        ["A B C"], SamplingParams(max_tokens=16, temperature=0, stop_token_ids=[tokens[3]])
    )
    assert out[0].stop_reason == StopReason.STOP_WORD and out[0].token_ids == tokens[:4]
    engine.eos_token_ids = frozenset({tokens[2]})  # pretend the model's EOS is that token
    out = engine.generate(["A B C"], SamplingParams(max_tokens=16, temperature=0))[0]
    assert out.stop_reason == StopReason.EOS and out.token_ids == tokens[:3]
    out = engine.generate(["A B C"], GREEDY)[0]  # ignore_eos goes on
    assert out.token_ids == tokens
    long_prompt = list(range(100, 120))  # 20 tokens + 4 generated = max_model_len 24
    out = engine.generate([long_prompt], GREEDY)[0]
    assert out.stop_reason == StopReason.LENGTH and len(out.token_ids) == 4
    assert_no_leak(engine)


def test_abort_cancels_waiting_and_running_requests_and_frees_blocks(engine):
    engine.add_request("run", "Hello there", GREEDY)
    engine.step()
    engine.add_request("wait", "Good morning", GREEDY)
    assert engine.abort_request("run") and engine.abort_request("wait")
    assert not engine.abort_request("run") and not engine.abort_request("nope")
    outs = engine.step()
    assert {o.request_id: o.stop_reason for o in outs} == {
        "run": StopReason.CANCELLED,
        "wait": StopReason.CANCELLED,
    }
    assert all(o.finished for o in outs)
    assert not engine.has_unfinished_requests()
    events = [e.kind for s in engine.snapshot().steps for e in s.events]
    assert events.count("aborted") == 2
    assert_no_leak(engine)


def test_timeout_finishes_with_timeout(engine):
    engine.add_request("t", "Hello", SamplingParams(max_tokens=500, temperature=0, timeout_s=1e-3))
    engine.add_request("ok", "Hello", GREEDY)
    finals = run_staggered(engine, [])
    assert finals["t"].stop_reason == StopReason.TIMEOUT
    assert finals["ok"].stop_reason == StopReason.MAX_TOKENS
    assert engine.snapshot().totals.stop_reasons == {"timeout": 1, "max_tokens": 1}
    assert_no_leak(engine)


@pytest.mark.parametrize("kv_backend", ["paged", "hf_cache"])
def test_a_failing_request_errors_alone_and_its_batch_mates_go_on(
    llama_pair, tokenizer, monkeypatch, kv_backend
):
    engine = make_engine(llama_pair[0], tokenizer, kv_backend=kv_backend)
    poison(engine, monkeypatch)
    engine.add_request("good0", "A healthy prompt good0", GREEDY)
    engine.step()  # prefill
    assert len(engine.step()[0].token_ids) == 2  # good0 decodes when the poison arrives
    good = [f"good{i}" for i in range(3)]
    requests = [("bad", [10, 11, POISON, 12], GREEDY)]
    requests += [(rid, f"A healthy prompt {rid}", GREEDY) for rid in good[1:]]
    finals = run_staggered(engine, requests, every=1)
    assert finals["bad"].stop_reason == StopReason.ERROR
    checker = GreedyChecker(llama_pair[1])
    for rid in good:
        assert finals[rid].stop_reason == StopReason.MAX_TOKENS
        checker.check(finals[rid].prompt_token_ids, finals[rid].token_ids, 16)
    assert_no_leak(engine)
    assert engine.snapshot().totals.stop_reasons["error"] == 1


def test_hf_cache_rebuilds_a_cache_a_failed_step_cannot_roll_back(tokenizer, monkeypatch):
    """A full sliding window cannot be cropped: the runner drops that cache and recomputes
    it on the request's next forward, so the request still ends normally."""
    config = MistralConfig(**{**TINY, "sliding_window": 8})
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    with pytest.warns(UserWarning, match="sliding-window"):
        engine = make_engine(model, tokenizer)
    poison(engine, monkeypatch)
    engine.add_request("good", "a b c d e f g h i j k l", GREEDY)  # past the window at once
    engine.step()
    finals = run_staggered(engine, [("bad", [10, 11, POISON, 12], GREEDY)])
    assert finals["bad"].stop_reason == StopReason.ERROR
    assert finals["good"].stop_reason == StopReason.MAX_TOKENS
    monkeypatch.undo()
    GreedyChecker(model).check(finals["good"].prompt_token_ids, finals["good"].token_ids, 16)
    assert_no_leak(engine)


def test_a_transient_fault_loses_nothing(llama_pair, tokenizer, monkeypatch):
    engine = make_engine(llama_pair[0], tokenizer)
    real, calls = engine.runner.execute, {"n": 0}

    def flaky(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected fault")
        return real(*args)

    monkeypatch.setattr(engine.runner, "execute", flaky)
    outs = engine.generate(["first", "second"], GREEDY)
    assert [o.stop_reason for o in outs] == [StopReason.MAX_TOKENS] * 2
    checker = GreedyChecker(llama_pair[1])
    for o in outs:
        checker.check(o.prompt_token_ids, o.token_ids, 16)
    assert_no_leak(engine)


def test_a_failing_sampler_errors_the_batch_and_the_engine_serves_on(engine, monkeypatch):
    real, calls = engine.sampler.__call__, {"n": 0}

    class Flaky:
        def __call__(self, logits, seqs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("injected sampler fault")
            return real(logits, seqs)

    monkeypatch.setattr(engine, "sampler", Flaky())
    engine.add_request("a", "first", GREEDY)
    engine.add_request("b", "second", GREEDY)
    finals = run_staggered(engine, [])
    assert finals["a"].stop_reason == finals["b"].stop_reason == StopReason.ERROR
    assert_no_leak(engine)
    assert engine.generate(["after the fault"], GREEDY)[0].stop_reason == StopReason.MAX_TOKENS


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(prompt=""), "prompt"),
        (dict(prompt="   \n"), "prompt"),
        (dict(prompt=[]), "prompt"),
        (dict(prompt=list(range(2000))), "max_model_len"),
        (dict(request_id=""), "request_id"),
        (dict(request_id=7), "request_id"),
        (dict(params={"max_tokens": 3}), "params"),
        (dict(priority="high"), "priority"),
        (dict(priority=1), "needs scheduling_policy='priority'"),  # the engine runs fcfs
    ],
)
def test_bad_requests_raise_naming_the_field_and_queue_nothing(engine, kwargs, field):
    request = dict(request_id="x", prompt="hello", params=None) | kwargs
    with pytest.raises(ValueError, match=field):
        engine.add_request(**request)
    assert not engine.has_unfinished_requests()


def test_priority_policy_serves_the_vip_first_and_equals_greedy_alone(llama_pair, tokenizer):
    """One seat: a priority-0 request arriving last preempts the running priority-5 one and
    finishes first; the victim, recomputed, still ends with the tokens it would have alone."""
    model = llama_pair[0]
    engine = make_engine(model, tokenizer, scheduling_policy="priority", max_num_seqs=1)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    engine.add_request("low", "the slow one", params, priority=5)
    engine.step()
    engine.step()
    engine.add_request("vip", "the urgent one", params, priority=0)
    finals = run_staggered(engine, [])
    assert list(finals) == ["vip", "low"]  # in the order they finished
    assert finals["low"].metrics.num_preemptions == 1
    alone = make_engine(model, tokenizer).generate(["the slow one"], params)[0]
    assert finals["low"].token_ids == alone.token_ids
    assert_no_leak(engine)


def test_duplicate_live_id_and_full_queue_are_refused(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer, max_waiting=2)
    engine.add_request("a", "hi", GREEDY)
    with pytest.raises(ValueError, match="already in flight"):
        engine.add_request("a", "hi again", GREEDY)
    engine.add_request("b", "hi", GREEDY)
    with pytest.raises(ValueError, match="max_waiting"):
        engine.add_request("c", "hi", GREEDY)
    run_staggered(engine, [])
    engine.add_request("a", "a finished id can be reused", GREEDY)
    unbounded = make_engine(llama_pair[0], tokenizer, max_waiting=None)
    for i in range(5):  # None: no limit, as vLLM's max_num_queued_reqs' default
        unbounded.add_request(f"r{i}", "hi", GREEDY)


def test_n_above_max_num_seqs_is_refused_naming_both(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer, max_num_seqs=2, max_num_batched_tokens=16)
    with pytest.raises(ValueError, match=r"n must be .*\[1, 2\].*max_num_seqs.*got 3"):
        engine.add_request("x", "hello", SamplingParams(n=3))
    assert not engine.has_unfinished_requests()
    engine.add_request("ok", "hello", SamplingParams(n=2, max_tokens=2))


@pytest.mark.parametrize("num_kv_blocks", [256, 14])  # roomy; tight: n>1 groups preempted
def test_max_num_seqs_holds_with_n_completions(llama_pair, tokenizer, num_kv_blocks):
    """Siblings forked from a prompt never push a step past max_num_seqs, also when
    groups are preempted and resumed; every completion still equals generate."""
    engine = make_engine(
        llama_pair[0], tokenizer, max_num_seqs=4, max_num_batched_tokens=16,
        num_kv_blocks=num_kv_blocks,
    )  # fmt: skip
    requests = [
        # top_k=1 draws the argmax: n > 1 needs sampling (vLLM refuses it with greedy)
        (
            f"r{i}",
            f"Prompt number {i} says",
            SamplingParams(**{**_fields(GREEDY), "n": n, "temperature": 1.0, "top_k": 1}),
        )
        for i, n in enumerate([3, 2, 1, 4, 2, 1])
    ]
    finals = run_staggered(engine, requests, every=1)
    steps = engine.snapshot().steps
    assert max(s.num_seqs for s in steps) == 4  # the cap is reached, never passed
    assert max(s.num_running for s in steps) == 4
    if num_kv_blocks == 14:
        assert engine.snapshot().totals.num_preemptions > 0
    checker = GreedyChecker(llama_pair[1])
    for rid, _, params in requests:
        assert len(finals[rid].outputs) == params.n
        for completion in finals[rid].outputs:
            assert completion.stop_reason == StopReason.MAX_TOKENS
            checker.check(finals[rid].prompt_token_ids, completion.token_ids, 16)
    assert_no_leak(engine)


def test_seeded_sampling_does_not_depend_on_the_rest_of_the_batch(engine):
    params = SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, seed=1234)
    alone = engine.generate(["The weather today"], params)[0].token_ids
    others = [SamplingParams(max_tokens=20, temperature=1.0)] * 3
    batch = engine.generate(
        ["x y z", "The weather today", "1 2 3", "cats"], [others[0], params, *others[1:]]
    )
    assert batch[1].token_ids == alone
    other_seed = engine.generate(
        ["The weather today"], SamplingParams(**{**_fields(params), "seed": 99})
    )
    assert other_seed[0].token_ids != alone


def test_n_completions_with_sampling_and_logprobs(engine):
    params = SamplingParams(max_tokens=8, temperature=1.0, n=3, seed=5, logprobs=2)
    out = engine.generate(["Pick a word:"], params)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    for c in out.outputs:
        assert len(c.logprobs) == len(c.token_ids) == 8
        for token, alternatives in zip(c.token_ids, c.logprobs, strict=True):
            assert token in alternatives and len(alternatives) <= 3
            assert all(lp.logprob <= 0 for lp in alternatives.values())
    assert out.metrics.num_generated_tokens == 24
    assert_no_leak(engine)


def test_chat_messages_go_through_the_chat_template(engine, tokenizer):
    messages = [{"role": "user", "content": "Hi!"}]
    out = engine.generate([messages], GREEDY)[0]
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert out.prompt == expected
    assert out.prompt_token_ids == tokenizer.encode(expected, add_special_tokens=False)


def test_generate_keeps_input_order_and_snapshot_counts(engine):
    outs = engine.generate(["one", "two two", "three three three"], GREEDY)
    assert [o.prompt for o in outs] == ["one", "two two", "three three three"]
    snap = engine.snapshot()
    assert snap.num_finished == 3 and snap.num_waiting == snap.num_running == 0
    assert snap.totals.num_generated_tokens == 48 and snap.totals.tokens_per_s > 0
    assert [r.status for r in snap.requests] == ["finished"] * 3
    assert all(s.duration >= s.forward_duration > 0 for s in snap.steps if s.num_seqs)


def test_snapshot_and_inspect_show_live_state(engine, tokenizer):
    engine.add_request("a", "Hello world, this is a test", GREEDY)
    engine.add_request("b", "Another one", GREEDY)
    engine.step()
    snap = engine.snapshot()
    assert snap.num_running == 2 and snap.kv_blocks_used > 0
    state = {r.request_id: r for r in snap.requests}["a"]
    assert state.status == "running" and len(state.block_table) > 0
    run_staggered(engine, [])
    detail = engine.inspect("a")
    seq = detail.seqs[0]
    assert [s for s, _ in seq.status_history] == ["waiting", "running", "finished"]
    steps = [step for _, step in seq.status_history]
    assert steps == sorted(steps) and steps[-1] > steps[1]
    assert seq.prompt_tokens == tuple(tokenizer.convert_ids_to_tokens(list(seq.prompt_token_ids)))
    assert seq.stop_reason == "max_tokens" and len(seq.output_token_ids) == 16
    assert engine.inspect("missing") is None


def test_preemption_shows_in_status_history(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer, num_kv_blocks=12, max_num_batched_tokens=16)
    requests = [(f"p{i}", f"Prompt number {i} says", GREEDY) for i in range(4)]
    run_staggered(engine, requests, every=1)
    preempted = [
        engine.inspect(f"p{i}") for i in range(4) if engine.inspect(f"p{i}").seqs[0].num_preemptions
    ]
    assert preempted
    history = [s for s, _ in preempted[0].seqs[0].status_history]
    assert history[:4] == ["waiting", "running", "waiting", "running"]
    assert_no_leak(engine)


def test_sliding_window_models_fall_back_to_hf_cache(tokenizer):
    config = MistralConfig(**{**TINY, "sliding_window": 8})
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    with pytest.warns(UserWarning, match="sliding-window"):
        engine = LLMEngine(model, tokenizer)
    assert engine.config.kv_backend == "hf_cache"
    out = engine.generate(["a b c d e f g h i j k l"], GREEDY)[0]
    GreedyChecker(model).check(out.prompt_token_ids, out.token_ids, 16)


def test_from_pretrained_refuses_unknown_overrides():
    with pytest.raises(ValueError, match="max_num_seq"):
        LLMEngine.from_pretrained("default", max_num_seq=4)
    with pytest.raises(ValueError, match="block_size"):
        LLMEngine.from_pretrained("default", block_size=0)


def test_status_values():
    assert [s.value for s in SequenceStatus] == ["waiting", "running", "finished"]


def _fields(params: SamplingParams) -> dict:
    return {f: getattr(params, f) for f in params.__slots__}
