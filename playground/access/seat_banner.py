"""What a visitor reads of the control seat: the banner above the controls, the seat button's
label, and the words of a refused control action. Pure functions of a SeatView."""

from playground.access.seat import ControlMode, Role, SeatView
from playground.board import cards

SEAT_BUTTON = {  # seat mode: what the button does for each role (hidden where None)
    Role.FREE: "Take the seat",
    Role.DRIVER: "Give up the seat",
    Role.WATCHER: "Queue for the seat",
    Role.QUEUED: "Leave the queue",
}


def holder_label(session: str | None) -> str:
    return cards.owner_label(cards.visitor_owner(session))  # as their card says: "Visitor 3f2a"


def clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def seat_button(view: SeatView) -> str | None:
    return SEAT_BUTTON.get(view.role) if view.mode is ControlMode.SEAT else None


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _seat_line(view: SeatView) -> str:
    if view.mode is ControlMode.OPEN or view.role is Role.STRANGER:  # a page not loaded yet
        return ""
    if view.mode is ControlMode.LOCKED:
        if view.role is Role.DRIVER:
            return "<b>You present</b>: the controls are yours."
        return "<b>Controls locked</b>: the presenter drives this board. You can send prompts."
    queued = f" {view.num_queued} queued." if view.num_queued else ""
    if view.role is Role.FREE:
        return "The controls are free: Start a run, press a preset or take the seat to drive."
    if view.role is Role.DRIVER:
        return (
            f"<b>You drive</b> the board: {clock(view.left_s)} left (a control action "
            f"renews it while nobody queues; leaving passes the seat on).{queued}"
        )
    who = cards.esc(holder_label(view.holder))
    line = (
        f"<b>{who}</b> drives the board; the seat passes in {clock(view.left_s)} at most. "
        "You can send prompts"
    )
    if view.role is Role.QUEUED:
        return f"{line}. You are {_ordinal(view.position)} in the queue."
    return f"{line}, and queue for the seat.{queued}"


def render_seat(view: SeatView, paused_until: float | None, now: float) -> str:
    """The banner: who drives (seat and locked modes), and a pause's countdown (any mode)."""
    lines = [line for line in (_seat_line(view),) if line]
    if paused_until is not None:
        lines.append(f"Paused: resumes by itself in {clock(paused_until - now)}.")
    if not lines:
        return ""
    body = "<br>".join(lines)
    return f'<div class="pg-seat pg-seat-{view.role.value}" role="status">{body}</div>'


def refusal(view: SeatView) -> str:
    """Why a control action of this session did not run."""
    if view.role is Role.STRANGER:
        return "the board's controls answer the board's own page only: open it in a browser"
    if view.role is Role.AUDIENCE:
        return "the controls are locked: only the presenter drives this board"
    if view.holder is None:
        return "the seat just changed hands: look at the banner and try again"
    who = holder_label(view.holder)
    return f"{who} drives the board (the seat passes in {clock(view.left_s)} at most)"
