"""The stop-reason panel: each threshold just below and at its edge, with the numbers it cites."""

from dataclasses import replace

import pytest

from engine.telemetry import Totals
from playground.teaching import stop_reasons as sr
from tests.playground.boards import request, snapshot, step


def _snap(mix: dict[str, int], requests=(), steps=(), max_model_len=0):
    snap = snapshot(requests=requests, steps=steps, totals=Totals(stop_reasons=mix))
    return replace(snap, max_model_len=max_model_len)


def _reasons(snap) -> list[str]:
    return [f.reason for f in sr.read_stop_reasons(snap)]


def test_too_few_finished_to_read_a_pattern():
    (only,) = sr.read_stop_reasons(_snap({"max_tokens": sr.MIN_FINISHED - 1}))
    assert only.reason == "" and "too few" in only.text and f"{sr.MIN_FINISHED - 1}" in only.text


def test_most_at_max_tokens_means_answers_are_cut_and_names_the_limit():
    cut = [request(f"r{i}", status="finished", stop="max_tokens") for i in range(3)]
    cut = [replace(r, max_tokens=48) for r in cut]
    (finding,) = sr.read_stop_reasons(_snap({"max_tokens": 5, "eos": 5}, cut))
    assert finding.reason == "max_tokens" and finding.share == 0.5
    assert finding.text == (
        "5 of 10 (50%) stopped at max_tokens: answers are cut, raise the default (now 48)."
    )
    assert "max_tokens" not in _reasons(_snap({"max_tokens": 4, "eos": 6}))


def test_timeouts_mean_an_overloaded_engine_and_cite_the_longest_queue():
    steps = [step(1, waiting=3), step(2, waiting=17), step(3, waiting=5)]
    (finding,) = sr.read_stop_reasons(_snap({"timeout": 1, "eos": 9}, steps=steps))
    assert finding.reason == "timeout" and "the queue grew to 17 waiting" in finding.text
    below = _snap({"timeout": 1, "eos": 10}, steps=steps)  # 9 %
    assert "timeout" not in _reasons(below)


def test_cancellations_mean_people_leave_mid_stream():
    gone = [replace(request(f"c{i}", status="finished", stop="cancelled"), num_output_tokens=n)
            for i, n in enumerate((4, 8))]  # fmt: skip
    (finding,) = sr.read_stop_reasons(_snap({"cancelled": 2, "eos": 8}, gone))
    assert "people leave mid-stream, after 6 tokens on average" in finding.text
    assert "cancelled" not in _reasons(_snap({"cancelled": 1, "eos": 9}))


def test_length_means_prompts_reach_the_context_window():
    (finding,) = sr.read_stop_reasons(_snap({"length": 1, "eos": 19}, max_model_len=2048))
    assert finding.reason == "length" and "context window of 2048 tokens" in finding.text
    assert "length" not in _reasons(_snap({"length": 1, "eos": 20}))


@pytest.mark.parametrize(
    ("mix", "expected"),
    [
        ({"eos": 7, "stop_word": 3}, ["eos"]),
        ({"error": 1, "eos": 9}, ["error"]),
        ({"max_tokens": 6, "timeout": 2, "cancelled": 2}, ["timeout", "max_tokens", "cancelled"]),
        ({"eos": 4, "max_tokens": 4, "cancelled": 1, "length": 0, "stop_word": 0}, [""]),
    ],
)
def test_findings_come_most_pressing_first(mix, expected):
    assert _reasons(_snap(mix)) == expected


def test_the_panel_escapes_and_badges():
    html = sr.render_stop_panel(_snap({"max_tokens": 9, "eos": 1}))
    assert "pg-stop-max_tokens" in html and "What the stop reasons say" in html
