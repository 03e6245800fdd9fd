"""Why a request waits and what preemption cost it, as the board shows them: the card, the
inspector, the stacked waiting chart and the timeline bar."""

from dataclasses import replace

from engine import SequenceDetail, WaitingReason
from engine.inspection import RequestDetail
from playground.board import cards, charts
from playground.board.inspector import render_inspector
from playground.handles import RequestRecord
from playground.teaching.why import preemption_cost, waiting_label
from tests.playground.boards import busy_board, request, snapshot, step


def _board(records, requests):
    board = busy_board(num_users=1, num_steps=3)
    return replace(board, records=tuple(records), users=(), snapshots={"main": snapshot(
        requests=requests)})  # fmt: skip


def test_a_waiting_card_names_the_rule_that_kept_it_out():
    rec = RequestRecord("req-1", "api:1", "p", 0.0)
    live = replace(request("req-1", status="waiting"), waiting_reason="kv_blocks")
    html = cards.render_cards(_board([rec], [live]))
    assert ">waiting: no free KV blocks<" in html and "pg-waiting" in html
    fresh = request("req-1", status="waiting")  # no step has looked at it yet
    assert ">waiting<" in cards.render_cards(_board([rec], [fresh]))


def test_labels_and_the_cost_sentence():
    assert [waiting_label(r.value) for r in WaitingReason][:3] == [
        "token budget spent", "no free KV blocks", "max_num_seqs reached"]  # fmt: skip
    assert waiting_label(None) is None
    assert preemption_cost(2, 96, 1.43) == "preempted 2x, 96 tokens recomputed, +1.4 s"
    assert preemption_cost(0, 0, 0.0) == ""


def test_the_victims_card_shows_what_preemption_cost_it():
    rec = RequestRecord("req-1", "api:1", "p", 0.0, "some text", 3)
    spans = ((1.0, 1.9), (3.0, 3.5))
    victim = replace(request("req-1", preemptions=2), num_recomputed_tokens=96,
                     preemption_time_lost=1.4, preempted_spans=spans)  # fmt: skip
    html = cards.render_cards(_board([rec], [victim]))
    assert "preempted 2x, 96 tokens recomputed, +1.4 s" in html
    assert "pg-cost" not in cards.render_cards(_board([rec], [request("req-1")]))


def test_the_waiting_chart_stacks_each_step_by_reason():
    steps = [
        replace(step(1, waiting=3), waiting_by_reason=(("kv_blocks", 1), ("queue_order", 2))),
        replace(step(2, waiting=1), waiting_by_reason=(("preempted", 1),)),
        step(3),
    ]
    spec = charts.waiting_reason_spec(snapshot(steps=steps))
    by_name = {t["name"]: t["y"] for t in spec["data"]}
    assert by_name == {"no free KV blocks": [1, 0, 0], "preempted, recompute pending": [0, 1, 0],
                       "waiting-queue order": [2, 0, 0]}  # fmt: skip
    assert spec["layout"]["barmode"] == "stack"
    charts.as_figure(charts.waiting_reason_spec(snapshot(steps=steps)))  # a valid plotly figure


def _seq(**kw):
    base = dict(index=0, status="running", stop_reason=None, prompt_token_ids=(1, 2),
                output_token_ids=(3,), prompt_tokens=("a", "b"), output_tokens=("c",),
                status_history=(("waiting", 0), ("running", 9)), block_table=(0,),
                num_computed_tokens=3, num_cached_tokens=0, num_preemptions=1, text="c",
                logprobs=None)  # fmt: skip
    return SequenceDetail(**{**base, **kw})


def test_the_inspector_shows_why_it_waited_step_by_step_and_each_preemption():
    seq = _seq(waiting_history=(("max_num_seqs", 1, 6), ("kv_blocks", 7, 7),
                                ("preempted", 12, 15)),
               preemptions=((11, 40, 36, 0.84), (20, 8, 0, None)))  # fmt: skip
    detail = RequestDetail("req-1", "p", {"max_tokens": 8}, (seq,), 0.0, None, None)
    html = render_inspector(detail, (), "req-1")
    assert "<b>steps 1-6</b> (6 steps): max_num_seqs reached" in html
    assert "<b>step 7</b> (1 step): no free KV blocks" in html
    assert "preempted, recompute pending" in html
    assert "<td>11</td><td>40</td><td>36</td><td>+0.84 s</td>" in html
    assert "not back yet" in html
