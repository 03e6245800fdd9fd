"""Random add / step / abort sequences keep the scheduler and block manager consistent."""

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
        llama_pair[0], tokenizer, num_kv_blocks=pool, max_num_batched_tokens=16, max_num_seqs=4
    )
    added, finished = [], {}

    def collect(outputs):
        for out in outputs:
            if out.finished:
                assert out.request_id not in finished, f"{out.request_id} finished twice"
                finished[out.request_id] = out
                assert all(c.stop_reason is not None for c in out.outputs)

    for op in ops:
        if op[0] == "add":
            _, prompt_len, max_tokens, n, temperature, shared = op
            start = 100 if shared else 1000 + 50 * len(added)
            rid = f"r{len(added)}"
            params = SamplingParams(
                max_tokens=max_tokens, temperature=temperature, n=n, seed=len(added)
            )
            engine.add_request(rid, list(range(start, start + prompt_len)), params)
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
