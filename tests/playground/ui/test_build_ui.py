"""build_ui: one Blocks with one timer, and every section wired."""

import asyncio
import threading

import gradio as gr
from gradio import queueing

from engine.cpu.openmp import off_thread
from playground.ui import QUEUE_POLL_S, build_ui


def test_build_ui_returns_blocks_with_one_timer(driver):
    demo = build_ui(driver)
    assert isinstance(demo, gr.Blocks)
    timers = [b for b in demo.blocks.values() if isinstance(b, gr.Timer)]
    assert len(timers) == 1 and timers[0].value <= 0.5


def test_every_callback_is_a_named_method_of_one_object(driver):
    """Callbacks live at module level (BoardCallbacks), not as closures inside build_ui."""
    demo = build_ui(driver)
    names = {f.name for f in demo.fns.values()}
    expected = {"tick", "go_live", "pick_scenario", "start",
                "toggle_pause", "single_step", "reset_board", "set_pace", "submit_prompt",
                "cancel_mine", "list_requests", "inspect_request", "generate", "arrive",
                "show_role", "toggle_seat", "leave"}  # fmt: skip
    assert expected <= names


def test_the_idle_queue_looks_for_events_every_20_ms_not_every_1_ms(driver, monkeypatch):
    """Gradio's queue sleeps between looks for work, 1 ms by default on Linux: an idle board
    woke its event loop a thousand times a second, and took that from the forward."""
    queue = build_ui(driver)._queue
    real_sleep = asyncio.sleep
    naps, ours = [], []  # this loop's naps only: other tests' queues may still run elsewhere

    async def counted(delay, *args, **kwargs):
        if threading.get_ident() in ours:
            naps.append(delay)
        await real_sleep(delay, *args, **kwargs)

    monkeypatch.setattr(queueing.asyncio, "sleep", counted)

    async def idle_for(seconds: float):
        ours.append(threading.get_ident())
        looking = asyncio.create_task(queue.start_processing())
        await real_sleep(seconds)
        queue.stopped = True
        await looking

    off_thread(asyncio.run, idle_for(0.5))  # a loop of its own, whatever runs on this thread
    assert set(naps) == {QUEUE_POLL_S}
    assert 5 <= len(naps) <= 0.5 / QUEUE_POLL_S + 2


def test_a_sessions_own_actions_are_followed_by_its_tick(driver):
    """A watcher's timer may be minutes apart in a crowd (Audience): every action that can make
    its session one the timer keeps at the full rate (the seat's holder or queue, its own
    request, an inspected one, a rewind) has a tick follow it, so the seat never counts a new
    holder as gone while its page waits for its slow timer."""
    demo = build_ui(driver)
    ticks = {f.trigger_after for f in demo.fns.values() if f.name == "tick"}
    actions = {"toggle_seat", "start", "open_lesson", "answer_lesson", "toggle_pause",
               "single_step", "reset_board", "set_pace", "submit_prompt", "cancel_mine",
               "inspect_request", "show_step", "step_back", "step_forward", "go_live",
               "run_replay"}  # fmt: skip
    followed = {f.name for i, f in demo.fns.items() if i in ticks}
    assert followed == actions
    assert all(i in ticks for i, f in demo.fns.items() if f.name in actions)
