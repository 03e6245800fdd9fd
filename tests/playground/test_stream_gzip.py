"""The board stream in gzip: any sequence of separately compressed frames after the header is
one valid gzip body that inflates as it arrives, and who accepts it
(playground/server/stream_gzip.py; the route's use of it: test_board_stream.py)."""

import zlib

import pytest

from playground.server.stream_gzip import GZIP_HEADER, accepts_gzip, deflated


def inflate(body: bytes) -> bytes:
    """What a browser reads of a gzip body, as it arrives (no trailer needed)."""
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body)


def test_any_sequence_of_frames_after_the_header_is_one_gzip_body():
    frames = [f'event: board\ndata: {{"n": {i}}}\n\n'.encode() * (i + 1) for i in range(6)]
    for picked in ([0, 1, 2, 3, 4, 5], [5], [1, 3, 4], [2, 2, 0]):  # joins late, skips, repeats
        body = GZIP_HEADER + b"".join(deflated(frames[i]) for i in picked)
        assert inflate(body) == b"".join(frames[i] for i in picked)


def test_a_big_frame_is_a_fraction_of_its_bytes():
    charts = b'{"kv":{"z":[' + b",".join(b"0.5" for _ in range(3000)) + b"]}}"
    assert len(deflated(charts)) < len(charts) / 5


@pytest.mark.parametrize(
    ("header", "accepted"),
    [("gzip, deflate, br, zstd", True), ("br", False), ("gzip;q=0", False), ("*", True),
     ("gzip;q=0.5, br", True), (None, False), ("*;q=0, br", False), ("identity", False),
     ("GZIP", True), ("gzip;q=bad", False)],
)  # fmt: skip
def test_accept_encoding_decides(header, accepted):
    headers = [(b"accept-encoding", header.encode())] if header is not None else []
    assert accepts_gzip({"headers": [(b"host", b"x"), *headers]}) is accepted
