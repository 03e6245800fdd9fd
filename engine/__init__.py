"""A small vLLM-style inference engine: continuous batching over a paged KV cache."""

import engine.cpu  # noqa: F401 - first: it loads torch with the engine's OpenMP setting
from engine.config import EngineConfig
from engine.inspection import RequestDetail, SequenceDetail
from engine.intake import QueueFullError
from engine.llm_engine import LLMEngine
from engine.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from engine.sampling_params import SamplingParams
from engine.sequence import SequenceStatus, StopReason
from engine.telemetry import EngineSnapshot, StepRecord
from engine.validation import FieldError
from engine.waiting import WaitingReason

__all__ = [
    "CompletionOutput",
    "EngineConfig",
    "EngineSnapshot",
    "FieldError",
    "LLMEngine",
    "Logprob",
    "QueueFullError",
    "RequestDetail",
    "RequestMetrics",
    "RequestOutput",
    "SamplingParams",
    "SequenceDetail",
    "SequenceStatus",
    "StepRecord",
    "StopReason",
    "WaitingReason",
]
