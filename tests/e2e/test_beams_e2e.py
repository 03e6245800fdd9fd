"""End to end, in chromium: the beam search preset. A beam user's card lists its live beams,
the step log says which beams forked, the KV map's legend counts the blocks beams share and
the copies they wrote, and the inspector draws a beam request's tree. The KV map and the
tree are screenshotted to pytest's tmp dir; PLAYGROUND_UPDATE_SCREENSHOT=1 writes them to
assets/ (the README's) instead."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

# a card whose beam search still runs (its tree still grows)
BEAM_CARD = """() => { const c = [...document.querySelectorAll('.pg-card')]
    .find(c => c.querySelectorAll('.pg-beam').length > 1 && !c.querySelector('.pg-finished'));
    return c ? [c.querySelector('.pg-rid').textContent, c.querySelectorAll('.pg-beam').length]
             : null }"""
KV_LEGEND = """() => [...document.querySelectorAll('#pg-plot-kv .legendtext')]
    .map(t => t.textContent)"""
KV_HOVER = """(pattern) => document.querySelector('#pg-plot-kv .js-plotly-plot').data[0].text
    .flat().filter(t => new RegExp(pattern).test(t)).length"""
# [nodes, title] of the tree once it is drawn with at least 4 nodes (beam 0 and the 3 beams
# forked from it: a board paused right after the first forks has no pruned beam yet) and
# other than `before`
TREE = """(before) => { const t = document.querySelector('.pg-beam-tree');
    const points = t ? t.querySelectorAll('.scatterlayer .point').length : 0;
    return points >= 4 && points !== before && [points, t.querySelector('.gtitle').textContent]
}"""
SHARED = re.compile(r"shared, ref count > 1 \((\d+)\)")


def _shot(page, selector: str, name: str, tmp_path) -> None:
    folder = ROOT / "assets" if os.environ.get("PLAYGROUND_UPDATE_SCREENSHOT") else tmp_path
    page.locator(selector).screenshot(path=str(folder / name))
    assert (folder / name).stat().st_size > 10_000


def _shared_blocks(page) -> int:
    names = page.evaluate(KV_LEGEND)
    return next((int(m.group(1)) for n in names if (m := SHARED.fullmatch(n))), -1)


def test_beams_fork_share_blocks_and_draw_their_tree(page, tmp_path):
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    page.get_by_role("button", name="Beam search: shared blocks").click()
    page.wait_for_selector("#pg-lesson-skip", state="visible", timeout=90_000)
    page.click("#pg-lesson-skip")
    page.wait_for_function(f"() => ({BEAM_CARD})()", timeout=60_000)
    rid, num_beams = page.evaluate(BEAM_CARD)
    assert num_beams == 4, num_beams  # the preset's width, while its search runs
    page.wait_for_function(
        "() => document.querySelector('#pg-log').textContent.includes('forked beam')",
        timeout=30_000,
    )
    assert re.search(r"forked beam \d+ from \d+", page.locator("#pg-log").inner_text())
    page.wait_for_function(f"() => ({KV_LEGEND})().some(n => /ref count > 1 \\([1-9]/.test(n))",
                           timeout=30_000)  # fmt: skip
    assert _shared_blocks(page) > 0
    assert page.evaluate(KV_HOVER, r"^block \d+: shared by \d+ beams of req-\d+") > 0
    page.click("#pg-pause")  # a still board for the inspector and the pictures
    page.wait_for_timeout(1000)  # the last chart redraw lands
    rid, _ = page.wait_for_function(f"() => ({BEAM_CARD})()", timeout=30_000).json_value()
    _shot(page, "#pg-plot-kv", "screenshot-kv-beams.png", tmp_path)
    page.get_by_role("tab", name="Sequence inspector").click()
    page.get_by_label("request").click()  # its options: the board's requests, once listed
    page.get_by_role("option", name=re.compile(rf"^{rid} · ")).click()
    nodes, title = page.wait_for_function(TREE, arg=0, timeout=30_000).json_value()
    assert title.startswith(f"Beam tree of {rid}: ") and "forks" in title, title
    _shot(page, ".pg-beam-tree", "screenshot-beam-tree.png", tmp_path)
    page.click("#pg-pause")  # Resume: the inspector's HTML changes, the tree is drawn again
    more, _ = page.wait_for_function(TREE, arg=nodes, timeout=30_000).json_value()
    assert more != nodes
