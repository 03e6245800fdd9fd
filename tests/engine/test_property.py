"""Random add / step / abort sequences keep the scheduler and block manager consistent: block
ref counts under n > 1 forks, beam forks and prunes, prefix-cache hits and preemption (of
single sequences and of whole beam groups), and nothing leaked at the end."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import SamplingParams
from tests.engine.checks import assert_no_leak
from tests.tiny_models import make_engine

add = st.tuples(
    st.just("add"),
    st.integers(1, 40),  # prompt tokens
    st.integers(1, 24),  # max_tokens
    st.integers(1, 3),  # n
    st.sampled_from([0.0, 0.8]),  # temperature
    st.booleans(),  # share a prefix with earlier prompts
    st.sampled_from([1, 1, 2, 3]),  # beam_width (2, 3: beam search, greedy)
    st.integers(0, 2),  # priority
)
operation = st.one_of(add, st.just(("step",)), st.tuples(st.just("abort"), st.integers(0, 30)))


def live_sequences(engine):
    return [s for g in engine.groups.values() for s in g.seqs if not s.is_finished]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(operation, min_size=5, max_size=60), pool=st.integers(12, 40))
def test_random_workloads_lose_nothing_and_leak_nothing(llama_pair, tokenizer, ops, pool):
    engine = make_engine(
        llama_pair[0], tokenizer, num_kv_blocks=pool, max_num_batched_tokens=16, max_num_seqs=4,
        scheduling_policy="priority",
    )  # fmt: skip
    added, finished = [], {}

    def collect(outputs):
        for out in outputs:
            if out.finished:
                assert out.request_id not in finished, f"{out.request_id} finished twice"
                finished[out.request_id] = out
                assert all(c.stop_reason is not None for c in out.outputs)

    for op in ops:
        if op[0] == "add":
            _, prompt_len, max_tokens, n, temperature, shared, beams, priority = op
            start = 100 if shared else 1000 + 50 * len(added)
            rid = f"r{len(added)}"
            if beams > 1:
                params = SamplingParams(
                    max_tokens=max_tokens, temperature=0.0, beam_width=beams, n=min(n, beams)
                )
            else:
                params = SamplingParams(
                    max_tokens=max_tokens,
                    temperature=temperature,
                    n=n if temperature > 0 else 1,
                    seed=len(added),
                )
            try:
                engine.add_request(rid, list(range(start, start + prompt_len)), params, None,
                                   priority)  # fmt: skip
            except ValueError as exc:  # beams that may not fit the pool once recomputed
                assert exc.field == "beam_width", exc
                continue
            added.append(rid)
        elif op[0] == "abort" and added:
            engine.abort_request(added[op[1] % len(added)])
        else:
            collect(engine.step())
        engine.block_manager.check_invariants(live_sequences(engine))
        assert len(engine.scheduler.running) + len(engine.scheduler.waiting) == len(
            live_sequences(engine)
        )
        assert len(engine.scheduler.running) <= 4, "max_num_seqs exceeded"
    steps = 0
    while engine.has_unfinished_requests():
        collect(engine.step())
        engine.block_manager.check_invariants(live_sequences(engine))
        assert len(engine.scheduler.running) <= 4, "max_num_seqs exceeded"
        steps += 1
        assert steps < 2000, "no progress"
    assert sorted(finished) == sorted(added), "a request was lost"
    for rid, out in finished.items():
        assert len(out.outputs) <= engine.inspect(rid).sampling["n"]
    assert_no_leak(engine)
