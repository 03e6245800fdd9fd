"""The board stream in gzip, each frame compressed once for every viewer that accepts it.

A gzip body is a header, then one deflate stream. Each frame is deflated on its own by a fresh
compressor and ended with a sync flush (byte-aligned, no final block), so it refers to nothing
before it: any sequence of such segments, after the header, is one valid deflate stream that a
browser inflates as it arrives. A viewer's stream can therefore start at any frame, skip
frames (the crowd budget) and get deltas or full frames, all from bytes compressed once per
frame, not once per viewer. The stream never ends the deflate stream (it has no end of its
own; a dropped or stopped one just closes), so it has no gzip trailer: browsers and httpx
inflate what came and stop there.
"""

import zlib

GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no time, unknown OS


def deflated(data: bytes) -> bytes:
    """`data` as a self-contained, byte-aligned segment of a raw deflate stream."""
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


def accepts_gzip(scope) -> bool:
    """Does the request's Accept-Encoding take gzip (every browser's EventSource sends one that
    does)? A q of 0 refuses it; `*` stands for codings not named."""
    header = b",".join(v for n, v in scope.get("headers", ()) if n == b"accept-encoding")
    weights = {}
    for coding in header.decode("latin-1").split(","):
        token, _, params = coding.partition(";")
        name, value = params.strip().partition("=")[::2]
        try:
            weight = float(value) if name.strip().lower() == "q" else 1.0
        except ValueError:
            weight = 0.0
        weights[token.strip().lower()] = weight
    return weights.get("gzip", weights.get("*", 0.0)) > 0
