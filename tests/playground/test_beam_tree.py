"""The beam tree from a real beam search on the tiny model: a node per beam and hypothesis,
an edge per fork and finish, the engine's step log counts, and the inspector's figure."""

import html
import json
import re

from engine import SamplingParams
from playground.board.beam_tree import GREY_LINE, LINE, _lanes, beam_tree_spec
from playground.board.inspector import render_inspector
from tests.engine.checks import beam_events

BEAMS = SamplingParams(max_tokens=14, temperature=0.0, beam_width=4, n=2)


def _markers(spec) -> dict[str, list]:
    """Marker traces by their legend name's status part -> (x, y, text) per node."""
    return {
        t["name"].rsplit(" (", 1)[0]: list(zip(t["x"], t["y"], t["text"], strict=True))
        for t in spec["data"]
        if t["mode"].startswith("markers")
    }


def _polylines(trace) -> list[list[tuple]]:
    lines, line = [], []
    for x, y in zip(trace["x"], trace["y"], strict=True):
        if x is None:
            lines.append(line)
            line = []
        else:
            line.append((x, y))
    return lines


def _edges(spec, colour=None) -> int:
    """Elbows drawn (a polyline that starts by going down from the parent's lane), in
    `colour` or any."""
    lines = [t for t in spec["data"] if t["mode"] == "lines"]
    return sum(len(p) > 2 and p[0][0] == p[1][0] and p[0][1] != p[1][1]
               for t in lines if colour in (None, t["line"]["color"])
               for p in _polylines(t))  # fmt: skip


def _run(engine, until=None):
    records = []
    while engine.has_unfinished_requests():
        outs = engine.step()
        records.append(engine.snapshot().steps[-1])
        if until is not None and until(engine):
            break
    return outs, records


def test_the_tree_has_a_node_per_beam_and_hypothesis_as_the_step_log_counts(make_engine):
    engine = make_engine(enable_prefix_caching=False)
    engine.add_request("b", "a beam search over a tiny model", BEAMS)
    _, records = _run(engine, until=lambda e: e.clock.step == 6)  # mid-search
    mid = engine.inspect("b").beam_tree
    forks, pruned = beam_events(records)
    markers = _markers(beam_tree_spec(mid))
    assert len(markers["live beam"]) == 4  # the width, while the search runs
    assert sum(map(len, markers.values())) == len(mid)
    assert _edges(beam_tree_spec(mid)) == len(mid) - 1  # an elbow per node but beam 0
    assert len(markers.get("pruned", [])) == len(pruned)
    (out,), more = _run(engine)
    forks, pruned = beam_events(records + more)
    tree = engine.inspect("b").beam_tree
    spec = beam_tree_spec(tree)
    markers = _markers(spec)
    num_hypotheses = sum(n.status in ("finished", "outranked") for n in tree)
    assert forks and num_hypotheses >= 2
    assert len(tree) == 1 + len(forks) + num_hypotheses  # beam 0, one per fork, the finished
    assert sum(map(len, markers.values())) == len(tree) and _edges(spec) == len(tree) - 1
    assert len(markers["pruned"]) == len(pruned) == 1 + len(forks)  # all pruned at the end
    assert "live beam" not in markers
    best = sorted((n for n in tree if n.status == "finished"), key=lambda n: -n.score)
    assert [n.num_output_tokens for n in best[:2]] == [len(c.token_ids) for c in out.outputs]
    kept = [n for n in tree if n.status == "finished"]
    for (x, _, text), n in zip(markers["finished (among the k best)"], kept, strict=True):
        assert x == n.num_output_tokens
        assert text == f"✓{n.beam} · {n.num_output_tokens} · {n.cumulative_logprob:.2f}"


def test_the_paths_to_the_kept_hypotheses_are_dark_the_dead_ends_grey(make_engine):
    engine = make_engine(enable_prefix_caching=False)
    engine.add_request("b", "which paths won", BEAMS)
    _run(engine)
    tree = engine.inspect("b").beam_tree
    by_beam = {n.beam: n for n in tree if n.status == "pruned"}
    on_path = set()  # the kept hypotheses and their ancestors, by walking up the parents
    for n in (n for n in tree if n.status == "finished"):
        on_path.add(id(n))
        while n.parent is not None:
            n = by_beam[n.parent]
            on_path.add(id(n))
    spec = beam_tree_spec(tree)
    assert 0 < _edges(spec, LINE) == len(on_path) - 1  # beam 0 is on every path: no elbow
    assert _edges(spec, GREY_LINE) == len(tree) - len(on_path)


def test_children_sit_under_their_parent_and_each_node_has_its_own_row(make_engine):
    engine = make_engine(enable_prefix_caching=False)
    engine.add_request("b", "rows of a beam tree", BEAMS)
    _run(engine)
    tree = engine.inspect("b").beam_tree
    lanes = _lanes(tree)
    assert sorted(lanes) == list(range(len(tree)))  # one row each
    drawn = sorted(y for nodes in _markers(beam_tree_spec(tree)).values() for _, y, _ in nodes)
    assert drawn == sorted(lanes)
    row_of_beam = {n.beam: lanes[i] for i, n in enumerate(tree) if n.status == "pruned"}
    for i, n in enumerate(tree):
        if n.parent is not None:
            assert lanes[i] > row_of_beam[n.parent]


def test_the_inspector_carries_the_tree_of_a_beam_search_only(make_engine):
    engine = make_engine()
    engine.add_request("b", "inspect my beams", BEAMS)
    engine.add_request("g", "a greedy one", SamplingParams(max_tokens=4, temperature=0.0))
    _run(engine)
    page = render_inspector(engine.inspect("b"), (), "b")
    (figure,) = re.findall(r'class="pg-beam-tree" data-figure="([^"]*)"', page)
    assert json.loads(html.unescape(figure))["data"] == beam_tree_spec(
        engine.inspect("b").beam_tree, "x")["data"]  # fmt: skip
    assert "beam_width=4" in page
    assert "pg-beam-tree" not in render_inspector(engine.inspect("g"), (), "g")
