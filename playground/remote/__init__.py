"""The board over a remote OpenAI-compatible server (`app.py --engine-url URL`).

connection.py speaks to the server (streams, /metrics scrapes, health) from an asyncio loop
of its own; engine.py is the LLMEngine face the driver's lanes step; wire.py is the request
and finish-reason mapping; prometheus.py reads a scrape with vLLM's names; charts.py and
views.py draw what the server exports, and say so where it exports nothing.
"""
