"""StepHistory: a frame rebuilt from per-step deltas equals the engine's snapshot of then."""

import time

from engine import SamplingParams
from playground.board import kv_map
from playground.record.history import StepHistory, _deep_size
from playground.workload.users import UserView
from tests.playground.driving import fixed, settled


def _run(engine, history, num_steps=None):
    """Step `engine` to the end (or num_steps), recording; the snapshot after every step."""
    full = {}
    while engine.has_unfinished_requests() and (num_steps is None or len(full) < num_steps):
        engine.step()
        snap = engine.snapshot()
        view = (UserView("Ada", "#000", "user:Ada", f"step {snap.step}", None, 0, 0, None),)
        history.record(snap, view)
        full[snap.step] = (snap, view)
    return full


def _same(frame, snap) -> None:
    assert frame.step == snap.step
    assert {r.request_id: r for r in frame.requests} == {r.request_id: r for r in snap.requests}
    assert set(frame.kv_cached_block_ids) == set(snap.kv_cached_block_ids)
    assert (frame.num_waiting, frame.num_running, frame.num_finished) == (
        snap.num_waiting, snap.num_running, snap.num_finished)  # fmt: skip
    assert (frame.kv_blocks_used, frame.kv_blocks_cached) == (
        snap.kv_blocks_used, snap.kv_blocks_cached)  # fmt: skip
    assert frame.totals == snap.totals and frame.ttfts == snap.ttfts
    assert frame.steps and frame.steps[-1] == snap.steps[-1]


def test_every_frame_equals_the_snapshot_of_its_step_under_kv_pressure(make_engine):
    """Preemptions free and refill block tables, prefix hits share blocks, requests finish
    and leave: after 40 deltas on top of a folded base, each frame is the engine of then."""
    engine = make_engine(num_kv_blocks=24, max_num_seqs=6)
    prefix = "The same long system prompt for every request, " * 2
    for i in range(8):
        engine.add_request(f"r{i}", prefix + f"question {i}", fixed(14 + 3 * i))
    history = StepHistory(max_steps=40)
    full = _run(engine, history)
    assert engine.snapshot().totals.num_preemptions > 0  # the pressure did preempt
    assert len(full) > 40 and len(history) == 40
    oldest, newest = history.steps()
    assert newest == max(full) and oldest == newest - 39
    for step in range(oldest, newest + 1):
        frame, users = history.frame(step)
        _same(frame, full[step][0])
        assert users == full[step][1]
        assert [r.step for r in frame.steps] == [s for s in sorted(full) if oldest <= s <= step]
    older, _ = history.frame(oldest - 10)  # past the window: the oldest step kept
    assert older.step == oldest


def test_frames_keep_the_blocks_beams_share_and_their_copies(make_engine):
    """A beam search next to a chat: every frame has each beam's block table and the live
    copy-on-write copies of its step, so a rewound block map draws them as they were."""
    engine = make_engine(enable_prefix_caching=False)
    beams = SamplingParams(max_tokens=12, temperature=0.0, beam_width=4)
    engine.add_request("b", "a b c d e f g", beams)
    engine.add_request("c", "hello", fixed(10))
    history = StepHistory()
    full = _run(engine, history)
    beam_states = [next(r for r in s.requests if r.request_id == "b") for s, _ in full.values()]
    assert any(r.copied_blocks for r in beam_states)
    assert any(r.seq_block_tables for r in beam_states)
    for step, (snap, _) in full.items():
        frame, _ = history.frame(step)
        _same(frame, snap)
        assert kv_map.kv_block_spec(frame) == kv_map.kv_block_spec(snap)


def test_deltas_cost_far_less_than_copies(make_engine):
    engine = make_engine()
    for i in range(6):
        engine.add_request(f"r{i}", f"request number {i}", fixed(150))
    history = StepHistory()
    full = _run(engine, history)
    per_step = history.nbytes() / len(history)
    seen: set[int] = set()
    copies = sum(_deep_size(s.requests, seen) for s, _ in full.values()) / len(full)
    assert per_step < copies / 2, (per_step, copies)


def test_clear_starts_a_new_epoch(make_engine):
    engine = make_engine()
    engine.add_request("a", "hello", fixed(3))
    history = StepHistory()
    _run(engine, history)
    epoch = history.epoch
    history.clear()
    assert history.steps() is None and history.frame(1) is None and history.epoch == epoch + 1


def test_the_driver_keeps_the_first_lanes_steps(driver):
    handles = [driver.submit(f"prompt {i}", fixed(12), owner=f"user:u{i}") for i in range(3)]
    finals = [h.result(timeout=60) for h in handles]
    settled(driver, lambda s: all(r.finished for r in s.records))
    oldest, newest = driver.history.steps()
    middle, _ = driver.history.frame((oldest + newest) // 2)
    texts = {r.request_id: r.text for r in middle.requests}
    for out in finals:
        assert out.text.startswith(texts[out.request_id])
    assert any(len(texts[o.request_id]) < len(o.text) for o in finals)
    driver.reset()
    deadline = time.monotonic() + 10
    while driver.history.steps() is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert driver.history.steps() is None
