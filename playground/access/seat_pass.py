"""The seat's pass to the full-rate board stream: a random token per session that holds the seat.

The board's fan-out rations a crowd's updates (playground/server/crowd_budget.py), but the
seat's holder (and a presenter) must see every frame. Its page's stream cannot say so for free:
the holder's own tick, which knows it holds the seat, is given a token, which its page puts on
its stream's URL (assets/board_stream.js, `?seat=`); the fan-out serves every frame to a stream
whose token is one of `tokens()`. A session that stops holding loses its token at its next tick;
one that stops ticking (gone) loses it after STALE_S.
"""

import secrets
import threading
import time

STALE_S = 30.0  # a holder's token lapses this long after its last tick
TOKEN_BYTES = 16


class SeatPass:
    """Session -> its token while it holds the seat; thread-safe (ticks on Gradio's worker
    threads, `tokens` on the server's event loop)."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[str, float]] = {}  # session -> (token, its last tick)

    def issue(self, session: str) -> str:
        """The holder `session` ticked: its token (the same one while it keeps the seat)."""
        now = self._clock()
        with self._lock:
            stale = [s for s, (_, seen) in self._tokens.items() if now - seen > STALE_S]
            for gone in stale:
                del self._tokens[gone]
            token = self._tokens.get(session, (secrets.token_urlsafe(TOKEN_BYTES), now))[0]
            self._tokens[session] = (token, now)
            return token

    def revoke(self, session: str) -> None:
        """`session` no longer holds the seat: its stream is one of the crowd's again."""
        with self._lock:
            self._tokens.pop(session, None)

    def tokens(self) -> tuple[str, ...]:
        """The tokens of the full-rate streams now."""
        with self._lock:
            return tuple(token for token, _ in self._tokens.values())
