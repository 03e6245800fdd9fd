"""The seat banner's words for each role, the pause countdown, the seat button's label."""

from playground.access.seat import ControlMode, Role, SeatView
from playground.access.seat_banner import refusal, render_seat, seat_button

SEAT = ControlMode.SEAT


def test_the_banner_says_who_drives_for_how_long_and_where_you_queue():
    watcher = SeatView(SEAT, Role.WATCHER, "3f2a9b", 102.4, None, 2)
    text = render_seat(watcher, None, 0)
    assert "<b>Visitor 3f2a</b> drives the board" in text and "1:42 at most" in text
    assert "2 queued" in text and "pg-seat-watcher" in text
    queued = render_seat(SeatView(SEAT, Role.QUEUED, "3f2a9b", 30, 2, 3), None, 0)
    assert "You are 2nd in the queue" in queued
    mine = render_seat(SeatView(SEAT, Role.DRIVER, "me", 59.6), None, 0)
    assert "You drive" in mine and "1:00 left" in mine
    assert "controls are free" in render_seat(SeatView(SEAT, Role.FREE), None, 0)


def test_a_page_whose_load_event_has_not_run_reads_no_seat_line():
    """Its tick came before its load event; with the seat free there is no time left to
    show (left_s None), and rendering one raised TypeError in the tick."""
    assert render_seat(SeatView(SEAT, Role.STRANGER), None, 0) == ""
    assert render_seat(SeatView(SEAT, Role.STRANGER, "3f2a9b", 30.0), None, 0) == ""


def test_the_pause_countdown_shows_in_every_mode_and_nothing_else_in_open_mode():
    open_view = SeatView(ControlMode.OPEN, Role.DRIVER)
    assert render_seat(open_view, None, 0) == ""
    assert "Paused: resumes by itself in 1:27" in render_seat(open_view, 100.0, 13.0)
    locked = SeatView(ControlMode.LOCKED, Role.AUDIENCE)
    assert "Controls locked" in render_seat(locked, 5.0, 0) and "0:05" in render_seat(locked, 5, 0)


def test_the_seat_button_and_the_refusals():
    assert seat_button(SeatView(SEAT, Role.WATCHER, "x")) == "Queue for the seat"
    assert seat_button(SeatView(SEAT, Role.DRIVER, "x")) == "Give up the seat"
    assert seat_button(SeatView(ControlMode.OPEN, Role.DRIVER)) is None
    assert seat_button(SeatView(ControlMode.LOCKED, Role.AUDIENCE)) is None
    assert "Visitor abcd drives" in refusal(SeatView(SEAT, Role.WATCHER, "abcdef", 9))
    assert "only the presenter" in refusal(SeatView(ControlMode.LOCKED, Role.AUDIENCE))
    assert "own page" in refusal(SeatView(SEAT, Role.STRANGER))
    assert "changed hands" in refusal(SeatView(SEAT, Role.WATCHER))
