"""End to end, in chromium: scrub the board back 20 steps and see the engine of then (an older
KV block map, older card text); then download the run's trace and replay file, check the
trace parses and holds every request of the run, and run the replay file again.
PLAYGROUND_UPDATE_SCREENSHOT=1 writes the rewound board to assets/rewind.png (the README's)."""

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

KV = """() => { const gd = document.querySelector('#pg-plot-kv .js-plotly-plot');
    return gd && gd.data ? [gd.layout.title.text, JSON.stringify(gd.data[0].z)] : null }"""
BATCH_STEPS = """() => { const gd = document.querySelector('#pg-plot-batch .js-plotly-plot');
    return gd && gd.data ? gd.data[0].x : [] }"""
CARDS = """() => Object.fromEntries([...document.querySelectorAll('.pg-card:not(.pg-mine)')]
    .filter(c => c.querySelector('.pg-rid').textContent)
    .map(c => [c.querySelector('.pg-rid').textContent, c.querySelector('.pg-text').textContent]))"""
TIMELINE = """() => { const gd = document.querySelector('#pg-plot-timeline .js-plotly-plot');
    return [gd.layout.shapes[0].x0, gd.layout.xaxis.range] }"""
SLIDER_MAX = "() => parseInt(document.querySelector('#pg-rewind input[type=range]').max)"


def test_scrub_back_20_steps_then_download_the_trace(page, tmp_path):
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    page.get_by_role("button", name="Chat burst").click()  # it asks its question first
    page.click("#pg-lesson-skip")
    page.wait_for_function(f"() => ({SLIDER_MAX})() >= 40", timeout=180_000)
    page.click("#pg-pause")  # the visitor's own pause: the board stands still for the checks
    page.wait_for_timeout(1500)  # the last redraw lands
    newest = page.evaluate(SLIDER_MAX)
    live_kv, live_cards = page.evaluate(KV), page.evaluate(CARDS)
    target = newest - 20
    box = page.locator("#pg-rewind input[type=number]")
    box.fill(str(target))
    box.press("Enter")
    page.wait_for_function(
        f"() => (document.querySelector('#pg-rewind-at') || {{}}).textContent?.includes("
        f"'step {target}')", timeout=30_000)  # fmt: skip
    page.wait_for_function(f"() => ({KV})()[0].includes('after step {target}')", timeout=30_000)
    old_kv, old_cards = page.evaluate(KV), page.evaluate(CARDS)
    assert old_kv[1] != live_kv[1], "the KV block map did not change"
    assert max(page.evaluate(BATCH_STEPS)) == target
    cursor, axis = page.evaluate(TIMELINE)
    print(f"timeline cursor at {cursor} s, axis {axis}")
    assert axis[0] < cursor < axis[1], "the timeline's cursor is not inside the run"
    older = [rid for rid, text in old_cards.items()
             if rid in live_cards and text != live_cards[rid]]  # fmt: skip
    assert older, f"no card shows older text: {old_cards} vs {live_cards}"
    assert f"step {target} " in page.locator("#pg-log li").first.inner_text()
    page.wait_for_timeout(1000)  # ticks come and go: the rewound board stays
    assert page.evaluate(KV)[0] == old_kv[0]
    shot = tmp_path / "rewind.png"
    if os.environ.get("PLAYGROUND_UPDATE_SCREENSHOT"):
        shot = ROOT / "assets" / "rewind.png"
    page.screenshot(path=str(shot), full_page=True,
                    clip={"x": 0, "y": 0, "width": 1600, "height": 1560})  # fmt: skip
    note = page.locator("#pg-rewind-at").inner_text()
    print(f"rewind note: {note}")  # the memory the deltas take, for the record
    page.click("#pg-live")
    page.wait_for_function(f"() => !({KV})()[0].includes('after step')", timeout=30_000)

    page.get_by_text("Trace and replay").click()
    page.click("#pg-export")
    links = page.locator("#pg-export-files a")
    links.first.wait_for(timeout=30_000)
    files, paths = {}, {}
    for i in range(links.count()):
        with page.expect_download() as download:
            links.nth(i).click()
        path = tmp_path / download.value.suggested_filename
        download.value.save_as(path)
        kind = path.name.split("-")[0]
        files[kind], paths[kind] = json.loads(path.read_text()), path
    trace, replay = files["trace"], files["replay"]
    in_trace = {e["args"]["request_id"] for e in trace["traceEvents"]
                if e.get("pid") == 1 and e["ph"] != "M"}  # fmt: skip
    run = {r["request_id"] for r in replay["requests"]}
    assert run and run <= in_trace, run - in_trace
    assert set(live_cards) <= in_trace
    assert {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"} >= {"batch size"}

    # the replay file back in, under static batching (the A/B of both policies is the same
    # path with two lanes: tests/playground/test_replay.py)
    page.set_input_files("#pg-replay input[type=file]", str(paths["replay"]))
    page.locator("#pg-replay").get_by_text(paths["replay"].name).wait_for(timeout=30_000)
    page.locator("#pg-replay-mode").get_by_label("static", exact=True).check()
    page.click("#pg-run-replay")
    status = "() => document.querySelector('#pg-replay-status').textContent.trim()"
    answered = f"() => /^(Replaying|Refused|Choose|The engine)/.test(({status})())"
    page.wait_for_function(answered, timeout=120_000)  # a fresh engine: slow on a busy CPU
    assert page.evaluate(status).startswith("Replaying"), page.evaluate(status)
    page.wait_for_function("() => document.querySelector('#pg-stats').textContent"
                           ".includes('replay of chat_burst')", timeout=30_000)  # fmt: skip
