"""build_ui: one Blocks with one timer, and every section wired."""

import gradio as gr

from playground.ui import build_ui


def test_build_ui_returns_blocks_with_one_timer(driver):
    demo = build_ui(driver)
    assert isinstance(demo, gr.Blocks)
    timers = [b for b in demo.blocks.values() if isinstance(b, gr.Timer)]
    assert len(timers) == 1 and timers[0].value <= 0.5


def test_every_callback_is_a_named_method_of_one_object(driver):
    """Callbacks live at module level (BoardCallbacks), not as closures inside build_ui."""
    demo = build_ui(driver)
    names = {f.name for f in demo.fns.values()}
    expected = {"tick", "redraw_charts", "redraw_compare", "pick_scenario", "start",
                "toggle_pause", "single_step", "reset_board", "set_pace", "submit_prompt",
                "cancel_mine", "list_requests", "inspect_request", "generate", "arrive",
                "show_role", "toggle_seat", "leave"}  # fmt: skip
    assert expected <= names
