"""Soak: 1,000 random requests (beam searches among them, at random priorities) with aborts,
timeouts, preemption and injected forward failures; nothing lost, nothing leaked, and only
the poisoned requests end with ERROR."""

import random

from engine import SamplingParams, StopReason
from tests.engine.checks import POISON, GreedyChecker, assert_no_leak, poison
from tests.tiny_models import make_engine

NUM_REQUESTS = 1000
WORDS = ["batch", "token", "KV", "café", "naïve", "你好", "世界", "🚀", "🙂", "Ω", "ß", "\n", "  "]


def random_prompt(rng: random.Random, max_len: int):
    kind = rng.random()
    if kind < 0.45:  # unicode text
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) + " x"
    if kind < 0.5:  # very long: close to the context window
        return [rng.randrange(3, 49152) for _ in range(rng.randint(max_len // 2, max_len - 2))]
    if kind < 0.75:  # chat messages
        return [{"role": "user", "content": rng.choice(WORDS) + " please"}]
    return [rng.randrange(3, 49152) for _ in range(rng.randint(1, 60))]


def _clean(prompt):
    """A random token prompt never holds the poison by chance."""
    return [t if t != POISON else POISON + 1 for t in prompt] if _is_ids(prompt) else prompt


def _is_ids(prompt) -> bool:
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], int)


def random_params(rng: random.Random) -> SamplingParams:
    temperature = rng.choice([0.0, 0.7, 1.0, 1.5])
    n = rng.choice([1, 1, 1, 1, 2, 3])
    return SamplingParams(
        max_tokens=rng.randint(1, 12),
        temperature=temperature,
        top_k=rng.choice([0, 1, 20]),
        top_p=rng.choice([1.0, 0.9, 0.5]),
        min_p=rng.choice([0.0, 0.05]),
        repetition_penalty=rng.choice([1.0, 1.2]),
        stop=rng.choice([[], ["a"], ["🚀", "\n"]]),
        n=n if temperature > 0 else 1,  # greedy takes n=1, as in vLLM
        seed=rng.choice([None, rng.randrange(1000)]),
        logprobs=rng.choice([None, 0, 3]),
        ignore_eos=rng.random() < 0.5,
    )


def test_soak_thousand_requests(llama_pair, tokenizer, monkeypatch):
    rng = random.Random(1234)
    engine = make_engine(
        llama_pair[0], tokenizer, num_kv_blocks=64, max_num_batched_tokens=128, max_num_seqs=32,
        max_model_len=160, scheduling_policy="priority",
    )  # fmt: skip
    poison(engine, monkeypatch)
    poisoned: set[str] = set()
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    added, finished, greedy_ids, beam_ids = [], {}, [], {}  # beam_ids: request id -> n
    aborts: dict[int, list[str]] = {}  # step -> requests to abort then
    num_aborted = num_timeouts = 0
    steps = 0
    while len(added) < NUM_REQUESTS or engine.has_unfinished_requests():
        for _ in range(min(rng.choice([0, 1, 1, 2, 3, 8]), NUM_REQUESTS - len(added))):
            rid = f"r{len(added)}"
            roll = rng.random()
            if roll < 0.1:
                prompt = _clean([rng.randrange(3, 49152) for _ in range(rng.randint(1, 40))])
                params = greedy
                greedy_ids.append(rid)
            elif roll < 0.12:  # a request whose forward fails
                prompt = [rng.randrange(3, 49152) for _ in range(rng.randint(0, 20))] + [POISON]
                params = random_params(rng)
                poisoned.add(rid)
            elif roll < 0.16:  # beam search: k beams fork, share blocks and are pruned
                prompt = _clean([rng.randrange(3, 49152) for _ in range(rng.randint(1, 30))])
                k = rng.choice([2, 3, 4])
                params = SamplingParams(
                    max_tokens=rng.randint(1, 12), temperature=0.0, beam_width=k,
                    n=rng.randint(1, k), length_penalty=rng.choice([1.0, 0.5, 2.0]),
                )  # fmt: skip
                beam_ids[rid] = params.n
            else:
                params, prompt = random_params(rng), _clean(random_prompt(rng, 160))
                if roll < 0.17:
                    params.timeout_s = rng.uniform(0.001, 0.05)
                    num_timeouts += 1
            engine.add_request(rid, prompt, params, priority=rng.choice([0, 0, 1, 2]))
            added.append(rid)
            if rid not in greedy_ids and rng.random() < 0.2:
                aborts.setdefault(steps + rng.randint(0, 20), []).append(rid)
        for rid in aborts.pop(steps, []):
            num_aborted += engine.abort_request(rid)  # False if it already finished
        for out in engine.step():
            if out.finished:
                assert out.request_id not in finished, f"{out.request_id} finished twice"
                assert all(c.stop_reason is not None for c in out.outputs)
                finished[out.request_id] = out
        steps += 1
        live = [s for g in engine.groups.values() for s in g.seqs if not s.is_finished]
        engine.block_manager.check_invariants(live)
        assert steps < 50_000
    assert len(added) == NUM_REQUESTS and sorted(finished) == sorted(added)
    reasons = engine.snapshot().totals.stop_reasons
    cancelled = sum(
        any(c.stop_reason == StopReason.CANCELLED for c in out.outputs) for out in finished.values()
    )  # per request: stop_reasons counts completions (a beam search returns several)
    assert cancelled == num_aborted > 100
    assert reasons.get("timeout", 0) > 0 and engine.snapshot().totals.num_preemptions > 0
    assert_no_leak(engine)
    errors = {rid for rid, out in finished.items() if out.stop_reason == StopReason.ERROR}
    for rid in errors:  # only a forward that saw the poison fails
        out = finished[rid]
        seen = [*out.prompt_token_ids, *(t for c in out.outputs for t in c.token_ids)]
        assert rid in poisoned or POISON in seen, rid
    for rid in poisoned:  # and every poisoned request ends, with ERROR unless aborted first
        assert finished[rid].stop_reason in (StopReason.ERROR, StopReason.CANCELLED), rid
    assert len(errors & poisoned) >= 10
    beams_done = {
        rid: finished[rid] for rid in beam_ids if finished[rid].stop_reason != "cancelled"
    }
    assert len(beams_done) > 10
    for rid, out in beams_done.items():  # the n best, or fewer if it ended early
        assert 1 <= len(out.outputs) <= beam_ids[rid]
    checker = GreedyChecker(llama_pair[1])
    for rid in greedy_ids:
        out = finished[rid]
        if out.stop_reason == StopReason.MAX_TOKENS:
            checker.check(out.prompt_token_ids, out.token_ids, 12)
    assert checker.num_exact + checker.num_near_ties >= len(greedy_ids) * 0.5
    print(
        f"soak: {len(added)} requests, {steps} steps, {num_aborted} aborted, "
        f"{len(poisoned)} poisoned ({len(errors)} ended with ERROR), {len(beam_ids)} beam "
        f"searches, "
        f"{reasons.get('timeout', 0)} timeouts, {engine.snapshot().totals.num_preemptions} "
        f"preemptions, {checker.num_exact} greedy exact, {checker.num_near_ties} near-ties, "
        f"stop reasons {reasons}"
    )
