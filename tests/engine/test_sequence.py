"""Sequence / SequenceGroup: statuses, transitions, stop rules, fork.

Uses the character tokenizer from conftest (id 0 = <eos>, one character per other id), so a
stop string spanning tokens is just a few characters.
"""

import pytest
import torch

from engine.detokenizer import IncrementalDetokenizer
from engine.outputs import Logprob
from engine.sampling_params import SamplingParams
from engine.sequence import (
    Sequence,
    SequenceGroup,
    SequenceStatus,
    StepClock,
    StopReason,
)

EOS = 0


def make_seq(tok, prompt="hello", max_model_len=64, clock=None, seq_id=0, **params):
    sp = SamplingParams(**params)
    detok = IncrementalDetokenizer(tok, sp.stop, sp.include_stop_str_in_output)
    return Sequence(
        seq_id, 0, tok.encode(prompt), sp, detok, frozenset({EOS}), max_model_len, clock=clock
    )


def running(seq):
    seq.set_status(SequenceStatus.RUNNING)
    seq.num_computed_tokens = seq.num_tokens
    return seq


def feed(seq, tok, text):
    """Append the characters of `text` one token at a time; the reasons returned."""
    return [seq.append_token(t) for t in tok.encode(text)]


# -- enums ----------------------------------------------------------------------------------
def test_status_values_are_the_contract():
    assert [s.value for s in SequenceStatus] == ["waiting", "running", "finished"]
    assert isinstance(SequenceStatus.WAITING, str)
    assert SequenceStatus.RUNNING == "running"
    assert SequenceStatus("finished") is SequenceStatus.FINISHED


def test_stop_reason_values_are_the_contract():
    assert {r.name: r.value for r in StopReason} == {
        "EOS": "eos",
        "MAX_TOKENS": "max_tokens",
        "STOP_WORD": "stop_word",
        "CANCELLED": "cancelled",
        "LENGTH": "length",
        "TIMEOUT": "timeout",
        "ERROR": "error",
    }
    assert isinstance(StopReason.EOS, str)
    assert StopReason.LENGTH == "length"


# -- lifecycle ------------------------------------------------------------------------------
def test_new_sequence_is_waiting(char_tokenizer):
    seq = make_seq(char_tokenizer)
    assert seq.status is SequenceStatus.WAITING
    assert seq.stop_reason is None
    assert not seq.is_finished
    assert seq.num_preemptions == 0
    assert seq.block_table == []


def test_waiting_to_running_ok(char_tokenizer):
    seq = make_seq(char_tokenizer)
    seq.set_status(SequenceStatus.RUNNING)
    assert seq.status is SequenceStatus.RUNNING


def test_preempt_goes_back_to_waiting_counts_and_resets(char_tokenizer):
    seq = running(make_seq(char_tokenizer))
    seq.append_token(char_tokenizer.ids["x"])
    seq.num_computed_tokens = seq.num_tokens - 1
    seq.preempt()
    assert seq.status is SequenceStatus.WAITING
    assert seq.num_preemptions == 1
    assert seq.num_computed_tokens == 0
    assert seq.output_token_ids == [char_tokenizer.ids["x"]]  # recompute keeps the output
    assert seq.is_prefill
    running(seq).preempt()
    assert seq.num_preemptions == 2


def test_preempt_a_waiting_sequence_raises(char_tokenizer):
    seq = make_seq(char_tokenizer)
    with pytest.raises(RuntimeError):
        seq.preempt()
    assert seq.num_preemptions == 0


@pytest.mark.parametrize("reason", list(StopReason))
def test_finish_from_waiting_or_running(char_tokenizer, reason):
    waiting = make_seq(char_tokenizer)
    waiting.finish(reason)
    assert waiting.status is SequenceStatus.FINISHED and waiting.stop_reason is reason
    run = running(make_seq(char_tokenizer))
    run.finish(reason)
    assert run.is_finished and run.stop_reason is reason


@pytest.mark.parametrize("target", list(SequenceStatus))
def test_finished_to_anything_raises(char_tokenizer, target):
    seq = make_seq(char_tokenizer)
    seq.finish(StopReason.CANCELLED)
    with pytest.raises(RuntimeError):
        seq.set_status(target)
    assert seq.status is SequenceStatus.FINISHED


def test_finish_twice_raises_and_keeps_first_reason(char_tokenizer):
    seq = running(make_seq(char_tokenizer))
    seq.finish(StopReason.EOS)
    with pytest.raises(RuntimeError):
        seq.finish(StopReason.CANCELLED)
    assert seq.stop_reason is StopReason.EOS
    with pytest.raises(RuntimeError):
        seq.preempt()


@pytest.mark.parametrize("status", [SequenceStatus.WAITING, SequenceStatus.RUNNING])
def test_same_status_transition_raises(char_tokenizer, status):
    seq = make_seq(char_tokenizer)
    if status is SequenceStatus.RUNNING:
        seq.set_status(SequenceStatus.RUNNING)
    with pytest.raises(RuntimeError):
        seq.set_status(status)


def test_status_history_records_clock_steps(char_tokenizer):
    clock = StepClock()
    clock.step = 2
    seq = make_seq(char_tokenizer, clock=clock, max_tokens=2)
    clock.step = 5
    seq.set_status(SequenceStatus.RUNNING)
    clock.step = 9
    seq.preempt()
    clock.step = 11
    seq.set_status(SequenceStatus.RUNNING)
    clock.step = 12
    feed(seq, char_tokenizer, "ab")  # max_tokens=2 -> finishes
    assert seq.status_history == [
        (SequenceStatus.WAITING, 2),
        (SequenceStatus.RUNNING, 5),
        (SequenceStatus.WAITING, 9),
        (SequenceStatus.RUNNING, 11),
        (SequenceStatus.FINISHED, 12),
    ]


def test_failed_transition_leaves_history_alone(char_tokenizer):
    seq = make_seq(char_tokenizer)
    with pytest.raises(RuntimeError):
        seq.preempt()
    assert seq.status_history == [(SequenceStatus.WAITING, 0)]


def test_append_token_needs_running(char_tokenizer):
    seq = make_seq(char_tokenizer)
    with pytest.raises(AssertionError):
        seq.append_token(char_tokenizer.ids["a"])


# -- append_token and stop rules ------------------------------------------------------------
def test_prompt_and_output_kept_apart(char_tokenizer):
    tok = char_tokenizer
    seq = running(make_seq(tok, prompt="hi"))
    prompt = tok.encode("hi")
    assert seq.prompt_token_ids == prompt
    assert seq.last_token_id == prompt[-1]
    assert (seq.num_prompt_tokens, seq.num_output_tokens, seq.num_tokens) == (2, 0, 2)
    assert feed(seq, tok, "yo") == [None, None]
    assert seq.prompt_token_ids == prompt
    assert seq.output_token_ids == tok.encode("yo")
    assert seq.all_token_ids == tok.encode("hiyo")
    assert seq.last_token_id == tok.ids["o"]
    assert (seq.num_prompt_tokens, seq.num_output_tokens, seq.num_tokens) == (2, 2, 4)
    assert seq.text == "yo"
    assert seq.status is SequenceStatus.RUNNING and seq.stop_reason is None


def test_is_prefill_follows_computed_tokens(char_tokenizer):
    seq = make_seq(char_tokenizer, prompt="hello")
    assert seq.is_prefill and seq.num_uncomputed_tokens == 5
    seq.set_status(SequenceStatus.RUNNING)
    seq.num_computed_tokens = 3  # a chunk of the prompt
    assert seq.is_prefill
    seq.num_computed_tokens = 5
    seq.append_token(char_tokenizer.ids["x"])
    assert not seq.is_prefill and seq.num_uncomputed_tokens == 1  # a decode


def test_eos_stops_and_is_kept_in_token_ids(char_tokenizer):
    seq = running(make_seq(char_tokenizer))
    assert feed(seq, char_tokenizer, "ok") == [None, None]
    assert seq.append_token(EOS) is StopReason.EOS
    assert seq.status is SequenceStatus.FINISHED
    assert seq.stop_reason is StopReason.EOS
    assert seq.output_token_ids[-1] == EOS
    assert seq.text == "ok"  # the special token is not text


def test_ignore_eos_keeps_going(char_tokenizer):
    seq = running(make_seq(char_tokenizer, ignore_eos=True, max_tokens=3))
    assert seq.append_token(EOS) is None
    assert seq.append_token(EOS) is None
    assert seq.status is SequenceStatus.RUNNING
    assert seq.append_token(EOS) is StopReason.MAX_TOKENS
    assert seq.output_token_ids == [EOS] * 3


def test_eos_on_the_last_allowed_token_reports_eos(char_tokenizer):
    seq = running(make_seq(char_tokenizer, max_tokens=2))
    seq.append_token(char_tokenizer.ids["a"])
    assert seq.append_token(EOS) is StopReason.EOS


def test_stop_token_id_is_a_stop_word(char_tokenizer):
    tok = char_tokenizer
    seq = running(make_seq(tok, stop_token_ids=[tok.ids["!"]]))
    assert feed(seq, tok, "hey!") == [None, None, None, StopReason.STOP_WORD]
    assert seq.stop_reason is StopReason.STOP_WORD
    assert seq.output_token_ids[-1] == tok.ids["!"]


def test_stop_token_id_applies_even_with_ignore_eos(char_tokenizer):
    seq = running(make_seq(char_tokenizer, ignore_eos=True, stop_token_ids=[EOS]))
    assert seq.append_token(EOS) is StopReason.STOP_WORD


def test_stop_string_spanning_tokens(char_tokenizer):
    tok = char_tokenizer
    seq = running(make_seq(tok, stop=["end"]))
    assert feed(seq, tok, "the end") == [None] * 6 + [StopReason.STOP_WORD]
    assert seq.stop_reason is StopReason.STOP_WORD
    assert seq.output_token_ids == tok.encode("the end")  # the tokens stay
    assert seq.text == "the "  # the stop string is cut from the text


def test_stop_string_kept_with_include_stop_str(char_tokenizer):
    tok = char_tokenizer
    seq = running(make_seq(tok, stop=["end"], include_stop_str_in_output=True))
    feed(seq, tok, "the end")
    assert seq.stop_reason is StopReason.STOP_WORD
    assert seq.text == "the end"


def test_partial_stop_string_does_not_stop(char_tokenizer):
    tok = char_tokenizer
    seq = running(make_seq(tok, stop=["end"]))
    assert feed(seq, tok, "en en") == [None] * 5
    assert seq.status is SequenceStatus.RUNNING


def test_max_tokens(char_tokenizer):
    seq = running(make_seq(char_tokenizer, max_tokens=3))
    assert feed(seq, char_tokenizer, "abc") == [None, None, StopReason.MAX_TOKENS]
    assert seq.num_output_tokens == 3 and seq.stop_reason is StopReason.MAX_TOKENS


def test_context_full_is_length(char_tokenizer):
    seq = running(make_seq(char_tokenizer, prompt="hello", max_model_len=8))
    assert feed(seq, char_tokenizer, "abc") == [None, None, StopReason.LENGTH]
    assert seq.num_tokens == 8 and seq.stop_reason is StopReason.LENGTH


def test_finished_sequence_takes_no_more_tokens(char_tokenizer):
    seq = running(make_seq(char_tokenizer, max_tokens=1))
    seq.append_token(char_tokenizer.ids["a"])
    with pytest.raises(AssertionError):
        seq.append_token(char_tokenizer.ids["b"])
    assert seq.num_output_tokens == 1


def test_logprobs_recorded_only_when_asked(char_tokenizer):
    lp1, lp2 = Logprob(-0.5, 1, "a"), Logprob(-1.25, 2, "b")
    a = running(make_seq(char_tokenizer))
    a.append_token(1, {1: lp1})
    assert a.logprobs is None and a.cumulative_logprob == 0.0
    b = running(make_seq(char_tokenizer, logprobs=2))
    b.append_token(1, {1: lp1})
    b.append_token(2, {2: lp2})
    assert b.logprobs == [{1: lp1}, {2: lp2}]
    assert b.cumulative_logprob == -1.75  # the sum of the chosen tokens' logprobs


# -- fork -----------------------------------------------------------------------------------
def test_fork_copies_outputs_and_shares_nothing_mutable(char_tokenizer):
    tok = char_tokenizer
    clock = StepClock()
    parent = running(make_seq(tok, clock=clock, logprobs=1))
    lp = {c: Logprob(-1.0 - i, 1, c) for i, c in enumerate("abc")}
    parent.append_token(tok.ids["a"], {tok.ids["a"]: lp["a"]})
    parent.append_token(tok.ids["b"], {tok.ids["b"]: lp["b"]})
    parent.num_computed_tokens = parent.num_tokens - 1
    parent.num_cached_tokens = 4
    parent.block_table.extend([3, 7])
    detok = IncrementalDetokenizer(tok, [], False)
    gen = torch.Generator().manual_seed(1)
    child = parent.fork(99, 1, detok, gen)

    assert (child.seq_id, child.index) == (99, 1)
    assert child.detokenizer is detok and child.generator is gen
    assert child.clock is clock  # one engine clock
    assert child.params is parent.params  # frozen in practice: shared by the group
    assert child.status is SequenceStatus.RUNNING
    assert child.prompt_token_ids == parent.prompt_token_ids
    assert child.output_token_ids == parent.output_token_ids
    assert child.num_computed_tokens == parent.num_computed_tokens
    assert child.num_cached_tokens == 4
    assert child.num_preemptions == 0
    assert child.stop_reason is None
    # per-token logprobs travel with the tokens they describe
    assert child.logprobs == parent.logprobs

    assert child.output_token_ids is not parent.output_token_ids
    assert child.block_table is not parent.block_table  # the block manager fills it
    assert child.logprobs is not parent.logprobs
    assert child.status_history is not parent.status_history

    child.append_token(tok.ids["c"], {tok.ids["c"]: lp["c"]})
    child.block_table.append(8)
    child.preempt()
    assert parent.output_token_ids == tok.encode("ab")
    assert parent.logprobs == [{tok.ids["a"]: lp["a"]}, {tok.ids["b"]: lp["b"]}]
    assert (parent.cumulative_logprob, child.cumulative_logprob) == (-3.0, -6.0)
    assert parent.block_table == [3, 7]
    assert parent.status is SequenceStatus.RUNNING
    assert parent.num_preemptions == 0
    assert parent.num_computed_tokens == parent.num_tokens - 1
    assert child.text == "abc"


def test_fork_of_a_fresh_running_parent(char_tokenizer):
    # how the engine forks n > 1: right after the prompt is computed, before any token
    parent = running(make_seq(char_tokenizer, n=3))
    child = parent.fork(1, 1, IncrementalDetokenizer(char_tokenizer, [], False), None)
    assert child.output_token_ids == [] and child.status is SequenceStatus.RUNNING
    assert child.num_computed_tokens == parent.num_computed_tokens
    assert child.append_token(char_tokenizer.ids["z"]) is None
    assert parent.output_token_ids == []


# -- SequenceGroup ----------------------------------------------------------------------------
def test_group_status_and_fork_need(char_tokenizer):
    tok = char_tokenizer
    params = SamplingParams(n=2)
    group = SequenceGroup("r1", "hi", tok.encode("hi"), params, arrival_time=1.0, priority=3)
    a = make_seq(tok, prompt="hi", n=2)
    group.seqs.append(a)
    assert group.needs_fork and group.status is SequenceStatus.WAITING
    running(a)
    assert group.status is SequenceStatus.RUNNING
    b = a.fork(1, 1, IncrementalDetokenizer(tok, [], False), None)
    group.seqs.append(b)
    assert not group.needs_fork
    a.finish(StopReason.EOS)
    assert not group.is_finished and group.status is SequenceStatus.RUNNING
    assert group.get_unfinished_seqs() == [b]
    b.preempt()
    assert group.status is SequenceStatus.WAITING
    b.finish(StopReason.CANCELLED)
    assert group.is_finished and group.status is SequenceStatus.FINISHED
    assert group.get_unfinished_seqs() == []
