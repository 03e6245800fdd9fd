"""The sections that tell the run's story: the lesson (a preset's question, what will run,
the visitor's guess, then the measured answer and why), the static-vs-continuous comparison
as the main view in compare mode, and the stop reasons read aloud under the charts."""

from dataclasses import dataclass

import gradio as gr

from playground.board.views import COMPARE_KEYS
from playground.ui.widgets import html, plot

MAX_ANSWERS = 3  # a lesson offers two or three


@dataclass(frozen=True)
class LessonSection:
    # {"key": preset, "guess": answer key, "" skipped, None not yet; "run": the run it started}
    lesson: gr.State
    panel: gr.HTML
    answers: tuple[gr.Button, ...]
    skip: gr.Button


@dataclass(frozen=True)
class CompareSection:
    group: gr.Column  # shown only in compare mode
    scoreboard: gr.HTML


def build_lesson() -> LessonSection:
    with gr.Group(elem_id="pg-lesson"):
        panel = html(elem_id="pg-lesson-panel")
        with gr.Row():
            answers = tuple(
                gr.Button("", visible=False, size="sm", elem_id=f"pg-answer-{i}",
                          elem_classes="pg-answer")
                for i in range(MAX_ANSWERS)
            )  # fmt: skip
            skip = gr.Button("skip the question: just run it", visible=False, size="sm",
                             variant="secondary", elem_id="pg-lesson-skip")  # fmt: skip
    return LessonSection(gr.State({"key": None, "guess": None}), panel, answers, skip)


def build_compare(first: dict[str, str]) -> CompareSection:
    """The comparison of both lanes, above the cards while compare mode runs."""
    with gr.Column(visible=False, elem_id="pg-compare") as group:
        gr.Markdown("#### Static vs continuous: one workload, two engines", elem_classes="pg-h")
        scoreboard = html(elem_id="pg-scoreboard")
        for row in (COMPARE_KEYS[i : i + 2] for i in range(0, len(COMPARE_KEYS), 2)):
            with gr.Row():
                for key in row:
                    plot(key, first)
    return CompareSection(group, scoreboard)


def build_stops() -> gr.HTML:
    return html(elem_id="pg-stops")
