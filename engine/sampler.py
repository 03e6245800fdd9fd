"""Sampler: next tokens from the last-position logits of every sampled sequence.

Greedy rows take the argmax. Other rows go through temperature, top-k, top-p and min-p and
draw by inverse CDF with one uniform number from a torch.Generator: the sequence's own when
it has a seed (so its tokens do not depend on what else shares the batch), else the engine's
shared one. Every step is batched over rows: a few large ops beat many small ones on a CPU.
Before that, in place on a copy of the logits: vLLM's penalties and min_tokens
(engine/penalties.py), then the grammar masks of structured outputs
(engine/structured_output.py). Logprobs are those of the distribution after these, before
temperature and filtering.
"""

import torch

from engine import cpu
from engine.outputs import Logprob
from engine.penalties import apply_min_tokens, apply_penalties, is_penalized
from engine.sequence import Sequence
from engine.structured_output import GrammarMask

TOP_WINDOW = 1024  # top-k / top-p look at the best tokens first; a full sort only if needed


def greedy_ids(logits: torch.Tensor) -> torch.Tensor:
    """Each row's argmax, the first of equal maxima as `argmax` picks: the fused C op over
    both threads where it runs (a CPU, float32 or bfloat16), else torch.max's indices."""
    return cpu.argmax_op(logits.device, logits.dtype)(logits)


class Sampler:
    def __init__(self, tokenizer, seed: int | None = None):
        self.tokenizer = tokenizer
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()
        self.grammar_mask = GrammarMask()

    @torch.inference_mode()
    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence]
    ) -> list[tuple[int, dict[int, Logprob] | None]]:
        """Pick one token per row of `logits` (num_seqs, vocab) for the matching sequence."""
        assert logits.shape[0] == len(seqs), (logits.shape, len(seqs))
        if all(_is_plain_greedy(s) for s in seqs):
            # Argmax where the logits are: on a GPU only the ids cross to the host, not the
            # whole (num_seqs, vocab) block.
            return [(t, None) for t in greedy_ids(logits).tolist()]
        logits = self._processed(logits.float().cpu(), seqs)  # (num_seqs, vocab)
        token_ids = greedy_ids(logits)  # greedy rows are done
        rows = [i for i, s in enumerate(seqs) if not s.params.is_greedy]
        if rows:
            probs = filtered_probs(logits[rows], [seqs[i].params for i in rows])  # (r, vocab)
            u = torch.stack(
                [torch.rand((), generator=seqs[i].generator or self.generator) for i in rows]
            )
            cdf = probs.cumsum(dim=-1)
            picked = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True)
            token_ids[rows] = picked.squeeze(1).clamp_(max=logits.shape[-1] - 1)
        chosen = token_ids.tolist()
        logprobs: list[dict[int, Logprob] | None] = [None] * len(seqs)
        wanted = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
        if wanted:
            found = self._logprobs(logits[wanted], token_ids[wanted], seqs, wanted)
            for i, lp in zip(wanted, found, strict=True):
                logprobs[i] = lp
        return list(zip(chosen, logprobs, strict=True))

    def _processed(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        """The logits after penalties, min_tokens and grammars: a copy where any applies (the
        runner's logits stay as they are)."""
        penalized = [i for i, s in enumerate(seqs) if is_penalized(s.params)]
        short = [i for i, s in enumerate(seqs) if s.num_output_tokens < s.params.min_tokens]
        structured = [i for i, s in enumerate(seqs) if s.grammar is not None]
        if penalized or short or structured:
            logits = logits.clone()
        if penalized:
            apply_penalties(logits, seqs, penalized)
        if structured:
            self.grammar_mask.apply(logits, seqs, structured)
        if short:
            apply_min_tokens(logits, seqs, short)
        return logits

    def _logprobs(self, logits, token_ids, seqs, rows) -> list[dict[int, Logprob]]:
        logprobs = logits.log_softmax(dim=-1)  # (r, vocab)
        chosen = logprobs.gather(1, token_ids.unsqueeze(1))  # (r, 1)
        ranks = ((logprobs > chosen).sum(dim=-1) + 1).tolist()
        k = max(seqs[i].params.logprobs for i in rows)
        top = logprobs.topk(k) if k else None
        result = []
        for j, i in enumerate(rows):
            tok, lp = token_ids[j].item(), chosen[j, 0].item()
            entry = {tok: Logprob(lp, ranks[j], self._piece(tok))}
            for rank in range(seqs[i].params.logprobs):
                alt = top.indices[j, rank].item()
                entry.setdefault(
                    alt, Logprob(top.values[j, rank].item(), rank + 1, self._piece(alt))
                )
            result.append(entry)
        return result

    def _piece(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])


def _is_plain_greedy(seq: Sequence) -> bool:
    """Greedy, and nothing changes its logits or asks for logprobs."""
    params = seq.params
    return (
        params.is_greedy
        and params.logprobs is None
        and not is_penalized(params)
        and seq.grammar is None
        and seq.num_output_tokens >= params.min_tokens
    )


def filtered_probs(logits: torch.Tensor, params: list) -> torch.Tensor:
    """Temperature, then top-k, top-p and min-p: the distribution each row samples from."""
    temps = torch.tensor([p.temperature for p in params]).unsqueeze(1)
    logits = logits / temps  # (r, vocab)
    vocab = logits.shape[-1]
    top_k = torch.tensor([p.top_k if 0 < p.top_k < vocab else vocab for p in params])
    top_p = torch.tensor([p.top_p for p in params])
    if bool((top_k < vocab).any() or (top_p < 1.0).any()):
        logits = _top_k_top_p(logits, top_k, top_p)
    probs = logits.softmax(dim=-1)
    min_p = torch.tensor([p.min_p for p in params]).unsqueeze(1)
    if bool((min_p > 0).any()):
        probs = probs.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, 0)
    return probs


def _top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """-inf outside each row's top-k and nucleus; rows without either come back unchanged."""
    vocab = logits.shape[-1]
    window = min(vocab, max(TOP_WINDOW, max(top_k[top_k < vocab].tolist(), default=0)))
    values, order = logits.topk(window, dim=-1)  # (r, window), best first
    cut = _cut(values, top_k, top_p, logits.logsumexp(-1, keepdim=True))
    spills = (top_k == vocab) & (top_p < 1.0) & ~cut[:, -1]  # nucleus may go past the window
    if window < vocab and bool(spills.any()):
        values, order = logits.sort(dim=-1, descending=True)
        cut = _cut(values, top_k, top_p, logits.logsumexp(-1, keepdim=True))
    filtered = torch.full_like(logits, float("-inf"))
    filtered.scatter_(-1, order, values.masked_fill(cut, float("-inf")))
    untouched = ((top_k == vocab) & (top_p >= 1.0)).unsqueeze(1)
    return torch.where(untouched, logits, filtered)


def _cut(values, top_k, top_p, lse_all) -> torch.Tensor:
    """Which of the sorted `values` (r, w) fall outside top-k, then outside the top-p mass."""
    cut = torch.arange(values.shape[-1]).unsqueeze(0) >= top_k.unsqueeze(1)
    values = values.masked_fill(cut, float("-inf"))
    # top-k renormalises over its k tokens (all inside `values`); else the whole vocabulary.
    limited = cut.any(dim=-1, keepdim=True)
    lse = torch.where(limited, values.logsumexp(-1, keepdim=True), lse_all)
    probs = (values - lse).exp()
    return cut | ((probs.cumsum(dim=-1) - probs) > top_p.unsqueeze(1))  # keeps the best token
