"""The left column: the control seat (who drives), presets, transport (start / pause / step /
reset), pace, the knobs, and the visitor's own prompt with its sampling settings."""

from dataclasses import dataclass
from typing import NamedTuple

import gradio as gr

from playground.board import cards
from playground.driver import EngineDriver
from playground.ui.widgets import html
from playground.workload.scenarios import SCENARIOS, Scenario
from playground.workload.users import ARRIVALS

PACES = ["max", "0.5", "1", "2", "5", "10"]  # 0.5: the driver's floor (MIN_PACE)
MAX_TOKENS_SLIDER = 256  # the slider's end, if the public limit is higher


class Knobs(NamedTuple):
    """The workload and engine knobs, in the order Start takes them (components or values)."""

    scenario: object
    num_users: object
    arrival: object
    rate: object
    batching: object
    queue: object  # EngineConfig.scheduling_policy
    compare: object
    budget: object
    max_seqs: object
    kv_blocks: object


NUM_DRIVE_CONTROLS = len(SCENARIOS) + 4 + len(Knobs._fields)  # Controls.drive: presets,
# start, step, reset, pace, knobs


class Sampling(NamedTuple):
    """The visitor's prompt and its settings, in the order Send takes them."""

    prompt: object
    max_tokens: object
    temperature: object
    top_p: object
    top_k: object
    seed: object
    stop: object
    logprobs: object


@dataclass(frozen=True)
class Controls:
    seat: gr.HTML  # who drives, and a pause's countdown
    seat_button: gr.Button  # take / give up / queue for the seat (seat mode)
    role: gr.Textbox  # hidden: "<Role>:paused|running"; its change sets what is interactive
    presets: dict[str, gr.Button]
    note: gr.HTML
    start: gr.Button
    pause: gr.Button
    step: gr.Button
    reset: gr.Button
    pace: gr.Dropdown
    knobs: Knobs
    sampling: Sampling
    send: gr.Button
    cancel: gr.Button
    send_status: gr.Markdown

    @property
    def drive(self) -> list:
        """What only a driver may use (the seat's holder, a presenter; anyone in open mode),
        but the Pause button, whose label also follows the board."""
        return [*self.presets.values(), self.start, self.step, self.reset, self.pace,
                *self.knobs]  # fmt: skip


def scenario_knobs(driver: EngineDriver, sc: Scenario) -> Knobs:
    """Control values for a preset: its knobs on top of the command line's config."""
    cfg = sc.engine_config(driver.base_config)
    kv = cfg.num_kv_blocks or driver.snapshot().kv_blocks_total
    return Knobs(sc.key, sc.num_users, sc.arrival, sc.arrival_rate, cfg.batching,
                 cfg.scheduling_policy, sc.compare, cfg.max_num_batched_tokens,
                 cfg.max_num_seqs, kv)  # fmt: skip


REMOTE_NOTE = (
    " On a remote server the preset sends the same users, but the engine knobs it names are "
    "the server's own flags: watch its queues and KV usage instead."
)


def note(sc: Scenario, remote: bool = False) -> str:
    watch = sc.what_to_watch + (REMOTE_NOTE if remote else "")
    return f'<div class="pg-note"><b>{cards.esc(sc.title)}.</b> {cards.esc(watch)}</div>'


def build_controls(driver: EngineDriver, k0: Knobs, engine_knobs: bool = True) -> Controls:
    """engine_knobs=False (a remote server's board): the policy, budget, sequence and KV knobs
    are hidden, since the server's own flags set them."""
    with gr.Column(scale=1, min_width=320, elem_classes="pg-side"):
        seat = html(elem_id="pg-seat")
        seat_button = gr.Button("Take the seat", size="sm", visible=False, elem_id="pg-seat-btn")
        role = gr.Textbox("", visible=False)
        gr.Markdown("#### Presets: each asks a question, then runs", elem_classes="pg-h")
        presets = {
            key: gr.Button(sc.title, size="sm", elem_classes="pg-preset")
            for key, sc in SCENARIOS.items()
        }
        note_html = html(note(SCENARIOS[k0.scenario], remote=not engine_knobs))
        with gr.Row(elem_classes="pg-transport"):
            start = gr.Button(
                "▶ Start", variant="primary", size="sm", min_width=60, elem_id="pg-start"
            )
            pause = gr.Button("Pause", size="sm", min_width=60, elem_id="pg-pause")
            step = gr.Button("Step", size="sm", min_width=60, elem_id="pg-step")
            reset = gr.Button("Reset", size="sm", variant="stop", min_width=60, elem_id="pg-reset")
        pace0 = driver.state().pace
        pace = gr.Dropdown(
            PACES,
            value="max" if pace0 is None else f"{pace0:g}",
            allow_custom_value=True,
            label="pace: steps per second",
            elem_id="pg-pace",
        )
        with gr.Accordion("Workload and engine knobs", open=False):
            knobs = Knobs(
                gr.Dropdown(
                    [(s.title, k) for k, s in SCENARIOS.items()], value=k0.scenario,
                    label="scenario",
                ),
                gr.Slider(1, 32, value=k0.num_users, step=1, label="simulated users"),
                gr.Radio(list(ARRIVALS), value=k0.arrival, label="arrivals"),
                gr.Slider(0.2, 10, value=k0.rate, step=0.1, label="arrival rate (users/s)"),
                gr.Radio(["continuous", "static"], value=k0.batching, label="batching",
                         visible=engine_knobs),
                gr.Radio(["fcfs", "priority"], value=k0.queue, label="queue policy",
                         visible=engine_knobs),
                gr.Checkbox(k0.compare, label="compare static vs continuous" if engine_knobs
                            else "compare: send every request to both servers"),
                gr.Slider(16, 2048, value=k0.budget, step=16, label="token budget / step",
                          visible=engine_knobs),
                gr.Slider(1, 64, value=k0.max_seqs, step=1, label="max sequences per step",
                          visible=engine_knobs),
                gr.Slider(8, 4096, value=k0.kv_blocks, step=8, label="KV blocks",
                          visible=engine_knobs),
            )  # fmt: skip
        sampling = _build_prompt(driver.limits.max_tokens)
        with gr.Row():
            send = gr.Button("Send", variant="primary", size="sm", elem_id="pg-send")
            cancel = gr.Button("Cancel mine", size="sm")
        send_status = gr.Markdown("", elem_id="pg-send-status")
    return Controls(seat, seat_button, role, presets, note_html, start, pause, step, reset, pace,
                    knobs, sampling, send, cancel, send_status)  # fmt: skip


def _build_prompt(max_tokens: int) -> Sampling:
    gr.Markdown("#### Your prompt", elem_classes="pg-h")
    prompt = gr.Textbox(
        placeholder="Ask anything. It joins the same batch.",
        lines=2,
        show_label=False,
        elem_id="pg-prompt",
    )
    with gr.Accordion("Sampling", open=False):
        return Sampling(
            prompt,
            gr.Slider(1, min(MAX_TOKENS_SLIDER, max_tokens), value=min(48, max_tokens), step=1,
                      label="max_tokens", elem_id="pg-max-tokens"),
            gr.Slider(0, 2, value=0.7, step=0.05, label="temperature"),
            gr.Slider(0.05, 1, value=0.95, step=0.05, label="top_p"),
            gr.Slider(0, 100, value=0, step=1, label="top_k (0 = off)"),
            gr.Number(-1, precision=0, label="seed (-1 = random)"),
            gr.Textbox("", label="stop strings, separated by |"),
            gr.Checkbox(True, label="logprobs: hover a token of your answer"),
        )  # fmt: skip
