"""vLLM's periodic stats line, which --disable-log-stats turns off.

Every LOG_STATS_INTERVAL_S, as vllm/v1/metrics/loggers.py (LoggingStatLogger) does: the prompt
and generation throughput since the previous line, the running and waiting requests, and the
share of KV blocks in use; at debug level while the engine is idle (no noise from a quiet
server), at info otherwise.
"""

import logging
import threading
import time
from dataclasses import dataclass

LOG_STATS_INTERVAL_S = 10.0  # vLLM's VLLM_LOG_STATS_INTERVAL default
log = logging.getLogger("engine.stats")


def _since(total: int, before: int) -> int:
    """Tokens since the previous line; after a board reset the new engine counts from 0."""
    return total - before if total >= before else total


@dataclass(slots=True)
class StatsLogger:
    """Turns successive snapshots into vLLM's line; `log_once` is called every interval."""

    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    last_time: float = 0.0
    last_throughputs: tuple[float, float] = (0.0, 0.0)

    def line(self, snap, now: float) -> tuple[str, bool]:
        """(the line, whether the engine was idle over this interval and the one before)."""
        totals, elapsed = snap.totals, max(now - self.last_time, 1e-9)
        prompt_tps = _since(totals.num_prompt_tokens, self.num_prompt_tokens) / elapsed
        generation_tps = _since(totals.num_generated_tokens, self.num_generated_tokens) / elapsed
        idle = not any((prompt_tps, generation_tps, *self.last_throughputs))
        self.num_prompt_tokens, self.num_generated_tokens = (
            totals.num_prompt_tokens,
            totals.num_generated_tokens,
        )
        self.last_time, self.last_throughputs = now, (prompt_tps, generation_tps)
        usage = 100.0 * snap.kv_blocks_used / max(snap.kv_blocks_total, 1)
        return (
            f"Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: "
            f"{generation_tps:.1f} tokens/s, Running: {snap.num_running} reqs, Waiting: "
            f"{snap.num_waiting} reqs, KV cache usage: {usage:.1f}%",
            idle,
        )

    def log_once(self, snap, now: float) -> None:
        text, idle = self.line(snap, now)
        (log.debug if idle else log.info)(text)


def start_stats_log(driver, interval_s: float = LOG_STATS_INTERVAL_S) -> threading.Event:
    """A daemon thread that logs the stats line of `driver` every `interval_s` until the
    returned event is set."""
    stop = threading.Event()
    stats = StatsLogger(last_time=time.monotonic())

    def run() -> None:
        while not stop.wait(interval_s):
            stats.log_once(driver.snapshot(), time.monotonic())

    threading.Thread(target=run, name="stats-log", daemon=True).start()
    return stop
