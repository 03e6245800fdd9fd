"""The seat's pass: one token per holding session, kept while it holds, gone when it stops
holding or stops ticking (playground/access/seat_pass.py)."""

from playground.access.seat_pass import STALE_S, SeatPass


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_holder_keeps_its_token_while_it_holds_and_loses_it_when_revoked():
    seat_pass = SeatPass(Clock())
    token = seat_pass.issue("holder")
    assert token and seat_pass.issue("holder") == token and seat_pass.tokens() == (token,)
    seat_pass.revoke("holder")
    assert seat_pass.tokens() == ()
    assert seat_pass.issue("holder") != token  # a new turn: a new token


def test_tokens_are_random_per_session():
    seat_pass = SeatPass(Clock())
    assert seat_pass.issue("a") != seat_pass.issue("b")
    assert len(set(seat_pass.tokens())) == 2


def test_a_holder_that_stops_ticking_loses_its_token():
    clock = Clock()
    seat_pass = SeatPass(clock)
    gone = seat_pass.issue("gone")
    clock.now = STALE_S + 1
    here = seat_pass.issue("here")
    assert seat_pass.tokens() == (here,) and gone != here
