"""Streams: a last output waits for the next BoardState; listeners never stop the loop."""

from engine import StopReason
from playground.driver.streams import Streams
from playground.handles import RequestHandle, final_output


def _out(rid: str, finished: bool):
    out = final_output(rid, "text", StopReason.EOS)
    out.finished = finished
    return out


def test_a_last_output_is_held_until_sent_and_listeners_hear_it_first():
    streams, heard = Streams(), []
    handle = RequestHandle("r1", "visitor:a")
    streams.open(handle)
    streams.on_finish(lambda out: 1 / 0)  # a broken listener is logged, nothing more
    streams.on_finish(heard.append)
    streams.deliver(_out("r1", finished=False))
    assert handle.get(timeout=1).finished is False and heard == []
    streams.deliver(_out("r1", finished=True))
    assert len(heard) == 1 and streams.has_finished and handle._queue.empty()
    streams.send_finished()
    assert handle.get(timeout=1).finished and not streams.has_finished


def test_close_all_ends_every_open_stream_with_its_text():
    streams = Streams()
    handles = [RequestHandle(f"r{i}", None) for i in range(3)]
    for h in handles:
        streams.open(h)
    streams.close_all(lambda rid: f"so far {rid}", StopReason.CANCELLED)
    for h in handles:
        last = h.get(timeout=1)
        assert last.stop_reason == StopReason.CANCELLED and last.text == f"so far {h.request_id}"


def test_step_listeners_hear_each_record_a_broken_one_is_logged():
    streams, heard = Streams(), []
    streams.on_step(lambda record: 1 / 0)
    streams.on_step(heard.append)
    records = [object(), object()]  # the driver hands over the first lane's StepRecords
    for record in records:
        streams.step_done(record)
    assert heard == records
