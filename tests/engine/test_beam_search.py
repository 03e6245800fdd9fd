"""Beam search through the engine equals transformers' generate(num_beams=k), and its beams
are forks that share KV blocks.

The criterion extended to beams: the same sequences in the same order, token for token; or,
where they differ, hypotheses of equal scores (a float near-tie: the reference scores both
lists alike, rank by rank, within 1e-3).
"""

import pytest
import torch
from transformers import GenerationConfig

from engine import SamplingParams, StopReason
from tests.engine.checks import GreedyChecker, assert_no_leak, beam_events, run_staggered
from tests.tiny_models import make_engine, make_tiny_pair

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a village by the sea, there lived",
    "1, 1, 2, 3, 5, 8,",
]
BEAM_CASES = [  # (beam_width, n, length_penalty, max_tokens)
    (4, 2, 1.0, 12),
    (3, 3, 0.5, 10),
    (2, 1, 2.0, 14),
    (4, 4, -1.0, 8),
]
SCORE_TOLERANCE = 1e-3


@torch.inference_mode()
def reference_beams(reference, prompt_ids, k, n, length_penalty, max_tokens, eos):
    config = GenerationConfig(
        max_new_tokens=max_tokens, do_sample=False, num_beams=k, num_return_sequences=n,
        length_penalty=length_penalty, eos_token_id=eos, pad_token_id=0,
    )  # fmt: skip
    out = reference.generate(torch.tensor([prompt_ids]), generation_config=config)
    beams = []
    for row in out[:, len(prompt_ids) :].tolist():  # padded after an EOS
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        beams.append(row[:end])
    return beams


@torch.inference_mode()
def reference_score(reference, prompt_ids, token_ids, length_penalty) -> float:
    ids = torch.tensor([prompt_ids + token_ids])
    logprobs = reference(ids).logits[0, len(prompt_ids) - 1 : -1].float().log_softmax(-1)
    total = logprobs.gather(1, torch.tensor(token_ids).unsqueeze(1)).sum().item()
    return total / len(token_ids) ** length_penalty


class BeamChecker:
    def __init__(self, reference):
        self.reference = reference
        self.num_exact = self.num_near_ties = 0

    def check(self, prompt_ids, out, k, length_penalty, max_tokens, eos):
        n = len(out.outputs)
        ref = reference_beams(self.reference, prompt_ids, k, n, length_penalty, max_tokens, eos)
        mine = [c.token_ids for c in out.outputs]
        if mine == ref:
            self.num_exact += 1
            return
        for a, b in zip(mine, ref, strict=True):
            sa = reference_score(self.reference, prompt_ids, a, length_penalty)
            sb = reference_score(self.reference, prompt_ids, b, length_penalty)
            assert abs(sa - sb) <= SCORE_TOLERANCE * max(1.0, abs(sb)), (
                f"beams differ beyond a near-tie: engine {mine} vs reference {ref}"
            )
        self.num_near_ties += 1


def eos_for(reference, tokenizer, prompts) -> list[int]:
    """The model's EOS and a token that its beams pick early on, made a second EOS, so that
    hypotheses finish at different lengths and the stopping rule is exercised."""
    ids = tokenizer.encode(prompts[0])
    first = reference_beams(reference, ids, 4, 1, 1.0, 4, [2])[0]
    return [2, first[2]]


def make_eos_pair(arch, tokenizer):
    """A fresh tiny pair (the engine reads the EOS ids from its model's generation config)."""
    model, reference = make_tiny_pair(arch, seed=1)
    eos = eos_for(reference, tokenizer, PROMPTS)
    model.generation_config.eos_token_id = eos
    return model, reference, eos


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def eos_pair(request, tokenizer):
    return make_eos_pair(request.param, tokenizer)


@pytest.fixture(scope="module")
def llama_eos_pair(tokenizer):
    return make_eos_pair("llama", tokenizer)


def capture_schedules(engine) -> list:
    """Every SchedulerOutputs the engine's steps get, in order, with the block tables of the
    scheduled sequences as they were then."""
    seen, real = [], engine.scheduler.schedule

    def schedule():
        out = real()
        seen.append((out, [list(s.seq.block_table) for s in out.scheduled]))
        return out

    engine.scheduler.schedule = schedule
    return seen


def beam_params(k, n, length_penalty, max_tokens):
    return SamplingParams(
        max_tokens=max_tokens, temperature=0.0, beam_width=k, n=n, length_penalty=length_penalty
    )


def test_beams_equal_generate_mixed_with_greedy_and_sampled_requests(eos_pair, tokenizer):
    """All requests in one engine, chunked prefill (16-token budget) and prefix caching on."""
    model, reference, eos = eos_pair
    engine = make_engine(model, tokenizer, max_num_batched_tokens=16, max_num_seqs=16)
    requests, beam_cases = [], {}
    for i, prompt in enumerate(PROMPTS):
        case = BEAM_CASES[i % len(BEAM_CASES)]
        beam_cases[f"beam{i}"] = (prompt, case)
        requests.append((f"beam{i}", prompt, beam_params(*case)))
        requests.append((f"greedy{i}", prompt, SamplingParams(max_tokens=10, temperature=0.0)))
        requests.append((f"sampled{i}", prompt, SamplingParams(max_tokens=8, seed=i)))
    finals = run_staggered(engine, requests, every=1)
    beams, greedy = BeamChecker(reference), GreedyChecker(reference)
    for rid, (prompt, (k, n, lp, max_tokens)) in beam_cases.items():
        out = finals[rid]
        assert len(out.outputs) == n and [c.index for c in out.outputs] == list(range(n))
        beams.check(tokenizer.encode(prompt), out, k, lp, max_tokens, eos)
        for c in out.outputs:
            assert c.text == tokenizer.decode(c.token_ids, skip_special_tokens=True)
            assert c.delta == c.text  # a beam's text comes whole, with the last output
            assert c.stop_reason in (StopReason.EOS, StopReason.MAX_TOKENS)
            assert c.cumulative_logprob < 0
        scores = [c.cumulative_logprob / len(c.token_ids) ** lp for c in out.outputs]
        assert scores == sorted(scores, reverse=True)  # best first
    for i, prompt in enumerate(PROMPTS):
        greedy.check(tokenizer.encode(prompt), finals[f"greedy{i}"].token_ids, 10, eos)
        assert finals[f"sampled{i}"].finished
    assert beams.num_near_ties <= 1 and greedy.num_near_ties <= 1
    assert_no_leak(engine)


def test_every_case_on_one_model_including_the_stopping_rule(llama_eos_pair, tokenizer):
    model, reference, eos = llama_eos_pair
    engine = make_engine(model, tokenizer)
    checker, reasons = BeamChecker(reference), set()
    for case in BEAM_CASES:
        outs = engine.generate(PROMPTS, beam_params(*case))
        for prompt, out in zip(PROMPTS, outs, strict=True):
            checker.check(tokenizer.encode(prompt), out, case[0], case[2], case[3], eos)
            reasons |= {c.stop_reason for c in out.outputs}
    assert reasons == {StopReason.EOS, StopReason.MAX_TOKENS}  # both endings were exercised
    assert checker.num_near_ties <= 1
    assert_no_leak(engine)


def test_beams_on_the_default_model(default_model, smollm2_reference):
    model, tokenizer = default_model
    engine = make_engine(model, tokenizer, block_size=16, num_kv_blocks=256)
    eos = sorted(engine.eos_token_ids)
    ids = tokenizer.encode("The three primary colours are")
    out = engine.generate([ids], beam_params(4, 2, 1.0, 16))[0]
    BeamChecker(smollm2_reference).check(ids, out, 4, 1.0, 16, eos)
    assert_no_leak(engine)


def test_forks_share_full_blocks_copy_the_partial_one_and_pruned_beams_free_theirs(
    llama_pair, tokenizer
):
    engine = make_engine(llama_pair[0], tokenizer, block_size=4, enable_prefix_caching=False)
    prompt = tokenizer.encode("a b c d e f g h i j")  # 10 tokens: 2 full blocks and 2 slots
    engine.add_request("b", prompt, beam_params(4, 2, 1.0, 12))
    bm, group = engine.block_manager, engine.groups["b"]
    schedules = capture_schedules(engine)
    engine.step()  # the prompt, then the first token of 4 beams forked from it
    beams = list(group.seqs)
    assert len(beams) == 4 and len({b.seq_id for b in beams}) == 4
    first = list(beams[0].block_table)
    assert all(b.block_table == first for b in beams)  # forks share every block...
    assert [bm.blocks[i].ref_count for i in first] == [4, 4, 4]
    engine.step()
    out, tables = schedules[-1]
    copies = out.blocks_to_copy  # ...until the partial one is written
    assert len(copies) == 3 and {src for src, _ in copies} == {first[-1]}
    assert all(t[:2] == first[:2] for t in tables) and len({t[-1] for t in tables}) == 4
    assert [bm.blocks[i].ref_count for i in first[:2]] == [4, 4]
    events, held = [], {}
    while engine.has_unfinished_requests():
        outs = engine.step()
        record = engine.snapshot().steps[-1]
        events += [e for e in record.events if e.kind == "beams"]
        live = [s for s in engine.groups["b"].seqs] if "b" in engine.groups else []
        bm.check_invariants(live)  # ref counts == references: a pruned beam holds nothing
        held[record.step] = len({i for s in live for i in s.block_table})
        assert record.kv_blocks_used == held[record.step]
        if outs and outs[0].finished:
            break
    assert any("pruned" in e.detail for e in events) and any("forked" in e.detail for e in events)
    assert all(e.request_id == "b" for e in events)
    assert_no_leak(engine)


def test_under_kv_pressure_the_whole_beam_group_is_preempted_and_recomputed(llama_pair, tokenizer):
    model, reference = llama_pair
    engine = make_engine(
        model, tokenizer, num_kv_blocks=28, max_num_batched_tokens=16, scheduling_policy="priority"
    )
    fixed = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    requests = [  # the beams, at a lower priority, are the victims when blocks run out
        ("other1", PROMPTS[0] * 4, fixed),
        ("other2", PROMPTS[2] * 4, fixed),
        ("beam", PROMPTS[1], beam_params(3, 2, 1.0, 20), None, 1),
    ]
    schedules = capture_schedules(engine)
    finals = run_staggered(engine, requests, every=1)
    preempted_steps = []
    for out, _ in schedules:
        beams = [s for s in out.preempted if s.beam_group is not None]
        if beams:
            preempted_steps.append(len(beams))
            # the group goes together: none of its beams runs in that step
            assert not any(s.seq.beam_group == beams[0].beam_group for s in out.scheduled)
    assert preempted_steps, "the beams were never preempted"
    assert max(preempted_steps) == 3, preempted_steps  # once with all three beams
    assert finals["beam"].metrics.num_preemptions == len(preempted_steps)
    BeamChecker(reference).check(
        tokenizer.encode(PROMPTS[1]), finals["beam"], 3, 1.0, 20, sorted(engine.eos_token_ids)
    )
    assert_no_leak(engine)


def test_a_cancelled_beam_search_returns_its_live_beams_and_frees_them(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer)
    engine.add_request("b", "hello there", beam_params(3, 2, 1.0, 30))
    for _ in range(4):
        mid = engine.step()
    assert mid and not mid[0].finished and len(mid[0].outputs) == 2
    assert all(c.delta == "" for c in mid[0].outputs)  # nothing is streamed before the end
    state = next(r for r in engine.snapshot().requests if r.request_id == "b")
    assert state.beam_width == 3 and len(state.beams) == 3  # the board sees every live beam
    engine.abort_request("b")
    (out,) = engine.step()
    assert out.finished and {c.stop_reason for c in out.outputs} == {StopReason.CANCELLED}
    assert all(c.delta == c.text for c in out.outputs)
    assert_no_leak(engine)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(beam_width=9), "beam_width"),  # max_num_seqs is 8
        (dict(beam_width=2, kv_backend="hf_cache"), "beam_width"),
        (dict(beam_width=8, num_kv_blocks=60), "beam_width"),  # 8 x 32 tokens in blocks of 4
    ],
)
def test_beam_requests_the_engine_cannot_serve_are_refused(llama_pair, tokenizer, overrides, field):
    config = {k: v for k, v in overrides.items() if k != "beam_width"}
    engine = make_engine(llama_pair[0], tokenizer, **config)
    params = SamplingParams(temperature=0.0, beam_width=overrides["beam_width"])
    with pytest.raises(ValueError, match=rf"^{field}\b") as err:
        engine.add_request("x", "hi", params)
    assert err.value.field == field and not engine.has_unfinished_requests()


def test_the_beam_tree_and_the_copied_blocks_are_what_the_engine_did(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer, block_size=4, enable_prefix_caching=False)
    engine.add_request("b", tokenizer.encode("a b c d e f g h i j"), beam_params(4, 2, 1.0, 16))
    group, bm = engine.groups["b"], engine.block_manager
    schedules = capture_schedules(engine)
    records, num_copies = [], 0
    while engine.has_unfinished_requests():
        (out,) = engine.step()
        snap = engine.snapshot()
        records.append(snap.steps[-1])
        if out.finished:
            break
        (state,) = [r for r in snap.requests if r.request_id == "b"]
        tables = [tuple(s.block_table) for s in group.seqs]
        assert state.seq_block_tables == tuple(tables)
        copied_now = {(dst, src, snap.step) for src, dst in schedules[-1][0].blocks_to_copy}
        held = {b for t in tables for b in t}
        assert {c for c in copied_now if c[0] in held} <= set(state.copied_blocks)
        assert {c[0] for c in state.copied_blocks} == {b for b in held if bm.blocks[b].copy_of}
        num_copies += len(copied_now)
        live = {n.beam for n in engine.inspect("b").beam_tree if n.status == "live"}
        assert live == {s.index for s in group.seqs}
    forks, pruned = beam_events(records)
    assert forks and pruned and num_copies
    tree = engine.inspect("b").beam_tree
    beams = [n for n in tree if n.status in ("live", "pruned", "stopped")]
    assert len(beams) == 1 + len(forks)  # beam 0, then one node per fork
    assert {(n.beam, n.parent) for n in beams if n.parent is not None} == forks
    assert sorted(n.beam for n in beams if n.status == "pruned") == sorted(pruned)
    assert len(pruned) == len(beams)  # every beam ends pruned once the search is done
    kept = [n for n in tree if n.status == "finished"]
    assert [n.num_output_tokens for n in sorted(kept, key=lambda n: -n.score)][:2] == [
        len(c.token_ids) for c in out.outputs
    ]
    by_beam = {n.beam: n for n in beams}
    for n in tree[1:]:  # each branches off its parent within the parent's own tokens
        parent = by_beam[n.parent]
        assert parent.branch_at <= n.branch_at < n.num_output_tokens <= 16
        assert n.branch_at <= parent.num_output_tokens
    assert_no_leak(engine)
    assert not any(b.copy_of for b in bm.blocks)  # a freed copy is no copy any more
