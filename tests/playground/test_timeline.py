"""The request timeline: its phases, preemptions and stop ticks, and what preemption cost
written right of the plot, short, on rows that can hold it."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from playground.board import charts, timeline
from playground.teaching.why import cost_tag
from tests.playground.boards import request, snapshot, step

CHARTS_JS = Path(__file__).resolve().parents[2] / "assets" / "charts.js"


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def _victim(rid: str, arrival: float = 0.0, times: int = 1, lost: float = 1.5):
    return replace(request(rid, arrival=arrival, scheduled=arrival + 0.1, first=arrival + 0.2,
                           finished=4.0, status="finished", stop="max_tokens", preemptions=times),
                   num_recomputed_tokens=40, preemption_time_lost=lost,
                   preempted_spans=((arrival + 1.0, arrival + 1.0 + lost),))  # fmt: skip


def test_timeline_phases_preemption_and_stop_marker():
    reqs = [
        request(
            "a", status="finished", stop="eos", arrival=1.0, scheduled=1.5, first=2.0, finished=4.0
        ),  # fmt: skip
        request("b", status="waiting", arrival=2.0),
    ]
    steps = [step(1, start=1.0), step(30, start=3.0, events=[("preempted", "a")])]
    fig = charts.as_figure(
        timeline.timeline_spec(snapshot(steps=steps, requests=reqs), {"a": "a · Ada"})
    )
    waiting, prefill, decode = (_trace(fig, n) for n in ("waiting", "prefill", "decode"))
    assert list(waiting.y) == ["a · Ada", "b"]
    assert list(waiting.base) == [0.0, 1.0]
    assert list(waiting.x)[0] == pytest.approx(0.5)
    assert list(prefill.base) == [0.5] and list(prefill.x) == [pytest.approx(0.5)]
    assert list(decode.base) == [1.0] and list(decode.x) == [pytest.approx(2.0)]
    pre = _trace(fig, "preempted")
    assert list(pre.x) == [pytest.approx(2.0)] and list(pre.y) == ["a · Ada"]
    ends = _trace(fig, "finished")
    assert list(ends.text) == ["eos"] and list(ends.x) == [pytest.approx(3.0)]


def test_the_timeline_marks_the_time_lost_and_writes_the_cost_short_in_a_column_of_its_own():
    spec = timeline.timeline_spec(snapshot(requests=[_victim("a"), request("b", arrival=0.5)]))
    lost = next(t for t in spec["data"] if t.get("name") == "lost to preemption")
    assert lost["base"] == [1.0] and lost["x"] == [1.5] and lost["y"] == ["a"]
    (note,) = spec["layout"]["annotations"]
    assert note["text"] == "+1.5 s ⟲1"  # the time lost, the times preempted
    assert note["hovertext"] == "⟲ preempted 1x, 40 tokens recomputed, +1.5 s"
    # right of the plot, on the request's row: one cost a row, never over a bar or another
    assert (note["xref"], note["x"], note["xanchor"], note["y"]) == ("paper", 1, "left", "a")
    assert "meta" not in spec["layout"]  # two rows hold their labels on a short screen too


def test_the_column_holds_the_longest_label():
    longest = cost_tag(replace(request("a", preemptions=99), preemption_time_lost=999.94))
    assert longest == "+999.9 s ⟲99"
    # a proportional font's digits are about 0.6 em wide; the column keeps its shift of 4 px
    assert len(longest) * 0.6 * timeline.COST_FONT_PX + 4 <= timeline.COST_COLUMN_PX


def test_rows_too_thin_for_a_label_keep_the_hover_only():
    """A chart of many rows draws no label: on a short screen (a projector) from fewer rows
    on than on a tall one. The time lost keeps its hover, the sentence, on the bar."""

    def labels(num_rows: int) -> tuple[int, dict]:
        reqs = [_victim(f"r{i}", arrival=i * 0.01) for i in range(num_rows)]
        layout = timeline.timeline_spec(snapshot(requests=reqs))["layout"]
        return len(layout["annotations"]), layout.get("meta", {})

    tall = max(n for n in range(1, 25) if timeline.labels_fit(n, charts.TALL_HEIGHT))
    short = max(n for n in range(1, 25) if timeline.labels_fit(n, charts.SHORT_HEIGHT))
    assert 8 <= short < tall < 24  # the KV pressure lesson's 8 users fit a projector
    assert labels(short) == (short, {})
    assert labels(short + 1) == (short + 1, {"short": {"annotations": []}})
    assert labels(tall + 1) == (0, {})
    lost = next(t for t in timeline.timeline_spec(snapshot(requests=[_victim("a")]))["data"]
                if t["name"] == "lost to preemption")  # fmt: skip
    assert lost["text"] == ["preempted 1x, 40 tokens recomputed, +1.5 s"]


def test_charts_js_draws_a_short_screen_at_the_height_the_labels_are_fitted_to():
    (height,) = re.findall(r"SHORT_HEIGHT = (\d+);", CHARTS_JS.read_text(encoding="utf-8"))
    assert int(height) == charts.SHORT_HEIGHT
