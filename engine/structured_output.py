"""Structured outputs with xgrammar (vLLM's default backend): compiled grammars, one matcher
per sequence, and the batch's token mask.

A request's grammar is compiled once from its StructuredOutputsParams and cached by that
spec, per tokenizer (`compile_grammar` is thread-safe: a server compiles it on a worker
thread before it submits the request, so add_request, on the engine's thread, finds it
compiled). Each sequence holds a GrammarState: a GrammarMatcher that has accepted exactly
the sequence's output tokens. A preempted sequence keeps its output tokens (only their K/V
is recomputed), so its matcher needs no rollback; a forked sibling starts a new matcher that
catches up with the tokens it shares. Each step the sampler fills one bitmask for the batch
(a row per sequence with a grammar) and applies it to the logits; the number of tokens
each row allowed is kept per step for the inspector.
"""

import json
import threading
from collections import OrderedDict

import numpy as np
import torch

from engine.structured_params import StructuredOutputsParams
from engine.validation import FieldError

MAX_CACHED_GRAMMARS = 256  # per tokenizer, least recently used dropped first


class GrammarCompiler:
    """xgrammar's compiler for one tokenizer and logits width, with a cache by spec."""

    def __init__(self, tokenizer, vocab_size: int):
        import xgrammar as xgr  # imported on first use: free text never pays for it

        self.tokenizer = tokenizer  # keeps the id it is cached under valid
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgr.GrammarCompiler(info, max_threads=2)
        self.vocab_size = vocab_size
        self.cache: OrderedDict[tuple, object] = OrderedDict()
        self.lock = threading.Lock()

    def compile(self, spec: StructuredOutputsParams):
        """The CompiledGrammar of `spec`; FieldError naming its field if xgrammar refuses it."""
        key = spec.key
        with self.lock:
            if key in self.cache:
                self.cache.move_to_end(key)
                return self.cache[key]
        try:
            compiled = self._compile(spec)
        except RuntimeError as exc:  # xgrammar's parse errors: "<file>:<line>: <message>"
            field = f"structured_outputs.{spec.kind}"
            reason = str(exc).strip().rsplit(": ", 1)[-1] if ": " in str(exc) else str(exc)
            raise FieldError(field, f"{field} cannot be compiled: {reason}") from None
        with self.lock:
            self.cache[key] = compiled
            while len(self.cache) > MAX_CACHED_GRAMMARS:
                self.cache.popitem(last=False)
        return compiled

    def _compile(self, spec: StructuredOutputsParams):
        c, any_whitespace = self.compiler, not spec.disable_any_whitespace
        kind = spec.kind
        if kind == "json":
            return c.compile_json_schema(json.dumps(spec.schema), any_whitespace=any_whitespace)
        if kind == "json_object":  # as vLLM's xgrammar backend: any object
            return c.compile_json_schema('{"type": "object"}', any_whitespace=any_whitespace)
        if kind == "regex":
            return c.compile_regex(spec.regex)
        if kind == "choice":  # as vLLM: an EBNF alternation of the quoted strings
            literals = " | ".join(json.dumps(s, ensure_ascii=False) for s in spec.choice)
            return c.compile_grammar(f"root ::= {literals}")
        return c.compile_grammar(spec.grammar)


_compilers: dict[tuple[int, int], GrammarCompiler] = {}
_compilers_lock = threading.Lock()


def compiler_for(tokenizer, vocab_size: int) -> GrammarCompiler:
    """The one GrammarCompiler of this tokenizer object and logits width (built once: it
    reads the whole vocabulary)."""
    key = (id(tokenizer), vocab_size)
    with _compilers_lock:
        compiler = _compilers.get(key)
        if compiler is None:
            compiler = _compilers[key] = GrammarCompiler(tokenizer, vocab_size)
    return compiler


def compile_grammar(tokenizer, vocab_size: int, spec: StructuredOutputsParams):
    """Compile (or find cached) the grammar of `spec`; safe from any thread."""
    return compiler_for(tokenizer, vocab_size).compile(spec)


def logits_width(model) -> int:
    """The width of the logits the sampler sees: the model's vocabulary size."""
    return model.config.get_text_config().vocab_size


def new_grammar_state(model, tokenizer, params) -> "GrammarState | None":
    """A fresh matcher for a sequence of a request with structured outputs (its grammar
    compiled, or found in the cache); None for free text. FieldError if it cannot compile."""
    spec = params.structured_outputs
    if spec is None:
        return None
    return GrammarState(compile_grammar(tokenizer, logits_width(model), spec))


class GrammarState:
    """One sequence's matcher, and what the grammar allowed at each of its steps."""

    def __init__(self, compiled):
        import xgrammar as xgr

        self.matcher = xgr.GrammarMatcher(compiled)
        self.num_accepted = 0  # output tokens the matcher has taken
        self.is_rejected = False  # a token the grammar does not allow came (never sampled)
        self.num_allowed: list[int] = []  # per sampled step: tokens the mask let through

    def advance(self, output_token_ids: list[int]) -> None:
        """Accept the output tokens the matcher has not seen yet."""
        for token_id in output_token_ids[self.num_accepted :]:
            if self.is_rejected or self.matcher.is_terminated():
                return
            if not self.matcher.accept_token(token_id):
                self.is_rejected = True
                return
            self.num_accepted += 1

    @property
    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()


class GrammarMask:
    """The sampler's bitmask buffer, (max rows, ceil(vocab / 32)) int32, grown as needed."""

    def __init__(self):
        self.bitmask: torch.Tensor | None = None

    def apply(self, logits: torch.Tensor, seqs: list, rows: list[int]) -> None:
        """In place: -inf on `logits` (num_seqs, vocab) where the grammars of `rows` refuse
        the next token; each row's allowed count is appended to its GrammarState."""
        import xgrammar as xgr

        num_seqs, vocab = logits.shape
        if self.bitmask is None or self.bitmask.shape[0] < num_seqs:
            self.bitmask = xgr.allocate_token_bitmask(max(num_seqs, 8), vocab)
        bitmask = self.bitmask
        for i in rows:
            grammar = seqs[i].grammar
            grammar.advance(seqs[i].output_token_ids)  # a fork catches up here
            grammar.matcher.fill_next_token_bitmask(bitmask, i)
        counts = np.bitwise_count(bitmask[rows].numpy().view(np.uint32)).sum(axis=1).tolist()
        for i, count in zip(rows, counts, strict=True):
            seqs[i].grammar.num_allowed.append(min(count, vocab))
        xgr.apply_token_bitmask_inplace(logits, bitmask[:num_seqs], indices=rows)
