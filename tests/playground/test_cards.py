"""HTML of the board: escaping, badges, the narrated step log, inspector, scoreboard."""

from dataclasses import replace

from engine import Logprob, RequestDetail, SequenceDetail
from playground.board import cards
from playground.board.inspector import render_inspector
from playground.board.state import LaneStats
from playground.handles import RequestRecord
from tests.playground.boards import busy_board, request, snapshot, step

EVIL = '<script>alert("x")</script>'


def _board(records, requests=(), users=()):
    board = busy_board(num_users=1, num_steps=3)
    snap = snapshot(requests=requests)
    return replace(board, records=tuple(records), users=tuple(users), snapshots={"main": snap})


def test_cards_escape_everything_people_and_models_write():
    rec = RequestRecord("req-1", "visitor:abcdef", EVIL, 0.0, text=EVIL + " & more")
    html = cards.render_cards(_board([rec]), me="visitor:zzz")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "Visitor abcd" in html  # another visitor's card, anonymized


def test_my_card_comes_first_and_is_highlighted():
    mine = RequestRecord("req-2", "visitor:me", "hi", 0.0, text="hello", num_output_tokens=1)
    other = RequestRecord("req-1", "user:Ada", "yo", 0.0, text="hey")
    html = cards.render_cards(_board([other, mine], [request("req-2")]), me="visitor:me")
    first = html.index("pg-card")
    assert "pg-mine" in html[first : first + 40] and ">You<" in html
    assert html.index("req-2") < html.index("req-1")
    assert 'class="pg-badge pg-running"' in html and "pg-cursor" in html


def test_finished_card_shows_its_stop_reason_badge():
    rec = RequestRecord("req-1", "visitor:me", "p", 0.0, "done", 4, "stop_word", True)
    html = cards.render_cards(_board([rec]), me="visitor:me")
    assert "pg-stop-stop_word" in html and ">stop_word<" in html and "pg-cursor" not in html
    refused = RequestRecord("req-2", "visitor:me", "p", 0.0, finished=True, error="prompt empty")
    html = cards.render_cards(_board([refused]), me="visitor:me")
    assert ">rejected<" in html and "prompt empty" in html


def test_visitor_tokens_show_top_alternatives_on_hover():
    lp = {7: Logprob(-0.1, 1, " the"), 9: Logprob(-2.5, 2, " a<b")}
    rec = RequestRecord("r", "visitor:me", "p", 0.0, " the", 1, token_ids=(7,), logprobs=(lp,))
    html = cards.token_spans(rec)
    assert html.startswith('<span class="pg-tok" title="') and ">&#x27;" not in html
    assert "→ &#x27; the&#x27;  -0.10" in html and "a&lt;b" in html
    eos = {2: Logprob(-0.01, 1, "<|im_end|>")}
    done = RequestRecord("r", "visitor:me", "p", 0.0, " the", 2, "eos", True, None, (7, 2),
                         (lp, eos))  # fmt: skip
    assert "im_end" not in cards.token_spans(done)
    assert cards.token_spans(done).count('class="pg-tok"') == 1


UNDRAWABLE = "a\x01\ue000\ufffd\ufffdb"  # a control, private use, two undecodable bytes
SHOWN = "a\ufffdb"  # one replacement character for the run


def test_every_place_a_card_shows_model_text_shows_undrawable_text_as_one_mark():
    """The prompt line (and its title), the text, the visitor's token spans and the beams."""
    rec = RequestRecord("req-1", "user:Ada", UNDRAWABLE, 0.0, text=UNDRAWABLE)
    html = cards.render_cards(_board([rec]))
    assert f'title="{SHOWN}">› {SHOWN}</div>' in html and f'"pg-text">{SHOWN}' in html
    lp = {7: Logprob(-0.1, 1, UNDRAWABLE)}
    mine = RequestRecord("r", "visitor:me", "p", 0.0, UNDRAWABLE + "!", 1, token_ids=(7,),
                         logprobs=(lp,))  # fmt: skip
    spans = cards.token_spans(mine)
    assert f">{SHOWN}</span>!" in spans and "\ue000" not in spans
    assert f"{SHOWN}</div>" in cards.beam_list(((1, UNDRAWABLE, -0.5),))


def test_the_inspector_shows_undrawable_tokens_as_one_mark():
    seq = SequenceDetail(
        index=0, status="running", stop_reason=None, prompt_token_ids=(1,),
        output_token_ids=(3,), prompt_tokens=(UNDRAWABLE,), output_tokens=("\x01\x02",),
        status_history=(("running", 1),), block_table=(5,), num_computed_tokens=2,
        num_cached_tokens=0, num_preemptions=0, text="", logprobs=None,
    )  # fmt: skip
    detail = RequestDetail("req-1", "p", {}, (seq,), 0.0, None, None)
    html = render_inspector(detail, (), "req-1")
    assert f">{SHOWN}<sub>1</sub>" in html and ">\ufffd<sub>3</sub>" in html


def test_under_priority_the_cards_show_each_requests_priority_and_waiting_time():
    board = busy_board(num_users=2, num_steps=5)  # the last step ends at 0.5 + 0.05 s
    snap = board.snapshot
    waiting = replace(snap.requests[1], status="waiting", priority=3, first_scheduled=None)
    snap = replace(snap, scheduling_policy="priority", requests=(snap.requests[0], waiting))
    html = cards.render_cards(replace(board, snapshots={"main": snap}))
    assert "priority 0 · waited 0.1 s" in html  # req-0: arrived at 0.0, admitted at 0.1
    assert "priority 3 · waiting 0.5 s" in html  # req-1: arrived at 0.05, still waiting
    assert "priority" not in cards.render_cards(board)  # fcfs: nothing to say


def test_a_beam_search_card_lists_its_live_beams():
    board = busy_board(num_users=2, num_steps=5)
    snap = board.snapshot
    beams = ((3, "the best <beam>", -1.5), (5, "a second one", -2.25))
    snap = replace(snap, requests=(replace(snap.requests[0], beam_width=2, beams=beams),
                                   snap.requests[1]))  # fmt: skip
    html = cards.render_cards(replace(board, snapshots={"main": snap}))
    assert "<b>beam 3</b>" in html and "-2.25" in html and "the best &lt;beam&gt;" in html
    assert "pg-beams" not in cards.render_cards(board)


def test_narrated_step_log():
    steps = [
        step(
            41,
            events=[
                ("admitted", "req-7", "183 tokens, 0 cached"),
                ("prefill_chunk", "req-7", "64/183 tokens"),
            ],
        ),  # fmt: skip
        step(
            42,
            decode=5,
            events=[
                ("prefill_chunk", "req-7", "128/183 tokens"),
                ("finished", "req-3", "stop_word"),
            ],
        ),  # fmt: skip
        step(43, events=[("prefill_done", "req-7", "183/183 tokens"), ("preempted", "req-5")]),
    ]
    lines = cards.narrate_steps(steps, {"req-3": "req-3 · Ada"})
    assert lines[0].startswith("step 41 (50 ms): admitted req-7 (183 tokens, 0 cached)")
    assert "req-7 prefill chunk 1 (64/183 tokens)" in lines[0]
    assert lines[1] == (
        "step 42 (50 ms): 5 decoding, req-7 prefill chunk 2 (128/183 tokens), "
        "req-3 · Ada finished: stop_word"
    )
    assert "req-7 prefill done (183/183 tokens, 3 chunks)" in lines[2]
    assert "req-5 preempted" in lines[2]
    assert cards.narrate_steps(steps, {"req-3": "req-3 · Ada"}, last=2) == lines[1:]
    beams = cards.narrate_steps(
        [step(44, events=[("beams", "req-7", "forked beam 3 from 1, pruned 2")])]
    )
    assert beams == ["step 44 (50 ms): req-7 forked beam 3 from 1, pruned 2"]
    assert cards.narrate_steps([step(1)]) == ["step 1 (50 ms): nothing to do"]


def test_step_log_is_escaped_and_newest_first():
    board = busy_board(num_users=2, num_steps=10)
    evil = RequestRecord("req-x", "someone:" + EVIL, "p", 0.0)  # an owner label shown as is
    steps = (*board.snapshot.steps, step(11, events=[("finished", "req-x", EVIL)]))
    board = replace(board, records=(*board.records, evil),
                    snapshots={"main": replace(board.snapshot, steps=steps)})  # fmt: skip
    html = cards.render_step_log(board)
    assert html.index("step 11 ") < html.index("step 10 ") < html.index("step 9 ")
    assert "<script>" not in html
    quoted = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert f"req-x · someone:{quoted} finished: {quoted}" in html


def test_scoreboard_compares_lanes():
    board = busy_board(num_users=2, num_steps=5)
    snap = board.snapshot
    stats = {
        "continuous": LaneStats("continuous", "continuous", 16, 16, 50, 5.0, 4.0, 50),
        "static": LaneStats("static", "static", 16, 16, 90, 9.0, 8.0, 90),
    }
    board = replace(board, lanes=("continuous", "static"), stats=stats,
                    snapshots={"continuous": snap, "static": snap})  # fmt: skip
    html = cards.render_scoreboard(board)
    assert "16/16" in html and "4.00 s · step 50" in html and "<b>2.00×</b>" in html
    assert "Compare mode is off" in cards.render_scoreboard(busy_board(2, 2))


def test_inspector_shows_the_sequence_as_the_engine_holds_it():
    seq = SequenceDetail(
        index=0, status="finished", stop_reason="eos", prompt_token_ids=(1, 2),
        output_token_ids=(3, 4), prompt_tokens=("<b>", "Ġhi"), output_tokens=("Ġyo", "Ċ"),
        status_history=(("waiting", 0), ("running", 1), ("waiting", 3), ("running", 4),
                        ("finished", 6)),
        block_table=(5, 9), num_computed_tokens=4, num_cached_tokens=0, num_preemptions=1,
        text=" yo\n", logprobs=None,
    )  # fmt: skip
    detail = RequestDetail("req-1", "<b>hi", {"max_tokens": 2, "seed": 3}, (seq,), 0.0, 1.0, 2.0)
    html = render_inspector(detail, ((2, " yo"), (6, "\n")), "req-1")
    assert "waiting @ step 3 (preempted)" in html and "finished @ step 6" in html
    assert "&lt;b&gt;<sub>1</sub>" in html and "␣hi<sub>2</sub>" in html
    assert "pg-chip-last" in html and "<code>5</code> <code>9</code>" in html
    assert "<b>step 2</b> <code>&#x27; yo&#x27;</code>" in html
    assert "max_tokens=2" in html
    assert "no longer holds" in render_inspector(None, (), "req-9")
