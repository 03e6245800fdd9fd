"""RequestHandle: a queue for blocking readers, a listener for an event loop."""

import queue

import pytest

from engine import StopReason
from playground.handles import RequestHandle, RequestRejected, final_output


def _out(text: str, finished: bool = False):
    out = final_output("r1", text, StopReason.EOS)
    out.finished = finished
    return out


def test_a_listener_gets_what_was_queued_first_then_every_later_item():
    handle, heard = RequestHandle("r1", None), []
    handle.put(_out("a"))
    handle.put(_out("b"))
    handle.listen(heard.append)
    handle.put(_out("c"))
    refusal = RequestRejected("no", "prompt")
    handle.put(refusal)
    assert [o.text for o in heard[:3]] == ["a", "b", "c"] and heard[3] is refusal
    with pytest.raises(queue.Empty):  # nothing is left for a blocking reader
        handle.get(timeout=0.01)


def test_without_a_listener_get_reads_in_order_and_raises_a_refusal():
    handle = RequestHandle("r1", None)
    handle.put(_out("a"))
    handle.put(RequestRejected("too long", "max_tokens"))
    assert handle.get(timeout=1).text == "a"
    with pytest.raises(RequestRejected, match="too long"):
        handle.get(timeout=1)
