"""The sections that tell the run's story: the lesson (a preset's question, what will run,
the visitor's guess, then the measured answer and why), the static-vs-continuous comparison
as the main view in compare mode, and the stop reasons read aloud under the charts."""

from dataclasses import dataclass

import gradio as gr

from playground.board.views import COMPARE_KEYS
from playground.teaching.lessons import render_lesson
from playground.ui.live import live_slot
from playground.ui.widgets import html, plot

MAX_ANSWERS = 3  # a lesson offers two or three


@dataclass(frozen=True)
class LessonSection:
    # {"key": preset, "guess": answer key, "" skipped, None not yet; "run": the run it started}
    lesson: gr.State
    panel: gr.HTML
    answers: tuple[gr.Button, ...]
    skip: gr.Button


def build_lesson() -> LessonSection:
    with gr.Group(elem_id="pg-lesson"):
        panel = html(render_lesson(None, None, None), elem_id="pg-lesson-panel")
        with gr.Row():
            answers = tuple(
                gr.Button("", visible=False, size="sm", elem_id=f"pg-answer-{i}",
                          elem_classes="pg-answer")
                for i in range(MAX_ANSWERS)
            )  # fmt: skip
            skip = gr.Button("skip the question: just run it", visible=False, size="sm",
                             variant="secondary", elem_id="pg-lesson-skip")  # fmt: skip
    return LessonSection(gr.State({"key": None, "guess": None}), panel, answers, skip)


def build_compare(first: dict[str, str]) -> None:
    """The comparison of both lanes, above the cards while compare mode runs (the stream's
    frames say when: assets/board_stream.js shows it)."""
    with gr.Column(visible="hidden", elem_id="pg-compare"):
        gr.Markdown("#### Static vs continuous: one workload, two engines", elem_classes="pg-h")
        html(live_slot("scoreboard"), elem_id="pg-scoreboard")
        for row in (COMPARE_KEYS[i : i + 2] for i in range(0, len(COMPARE_KEYS), 2)):
            with gr.Row():
                for key in row:
                    plot(key, first)


def build_stops() -> None:
    html(live_slot("stops"), elem_id="pg-stops")
