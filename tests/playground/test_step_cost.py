"""Step time against batch size: every point is a step's measured duration."""

import pytest

from playground.board import step_cost
from playground.board.charts import as_figure
from tests.playground.boards import snapshot, step


def _steps():
    return [
        step(1, prefill=40, running=2, duration=0.030),  # prefill only: a mixed step
        step(2, decode=2, running=2, duration=0.010),
        step(3, decode=2, running=2, duration=0.012),
        step(4, decode=2, running=2, duration=0.050),  # an outlier: the median ignores it
        step(5, decode=8, prefill=16, running=9, duration=0.040),
        step(6, decode=8, running=8, duration=0.016),
        step(7, running=0, duration=0.001),  # nothing scheduled: not a point
    ]


def test_points_are_the_measured_step_durations():
    spec = step_cost.step_cost_spec(snapshot(steps=_steps()))
    decode, mixed, median = spec["data"]
    assert decode["x"] == [2, 2, 2, 8]
    assert decode["y"] == [10.0, 12.0, 50.0, 16.0]
    assert mixed["x"] == [2, 9] and mixed["y"] == [30.0, 40.0]
    assert median["x"] == [2, 8] and median["y"] == [12.0, 16.0]
    assert (5, 16, 8) in mixed["customdata"]  # hover: step 5: 9 sequences, 16 prefill + 8 decode
    assert "step %{customdata[0]}: %{x} sequences" in mixed["hovertemplate"]
    title = spec["layout"]["title"]["text"]
    assert "batch 2 → 8: 4.0× the tokens in 1.3× the time" in title


def test_medians_per_batch_size_and_an_empty_run():
    assert step_cost.decode_medians(snapshot(steps=_steps())) == {
        2: pytest.approx(0.012), 8: pytest.approx(0.016)}  # fmt: skip
    empty = step_cost.step_cost_spec(snapshot())
    assert [t["x"] for t in empty["data"]] == [[], [], []]
    assert "needs decode steps of two batch sizes" in empty["layout"]["title"]["text"]
    as_figure(step_cost.step_cost_spec(snapshot(steps=_steps()))).to_json()  # a valid plotly figure


def test_the_decode_steps_set_the_scale():
    """A slow prefill step (here 30 and 40 ms) may fall above it, never squash the decodes."""
    yaxis = step_cost.step_cost_spec(snapshot(steps=_steps()))["layout"]["yaxis"]
    assert yaxis["range"] == [0, pytest.approx(75.0)]  # 1.5 x the 95th percentile decode step
