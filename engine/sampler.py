"""Sampler: next tokens from the last-position logits of every sampled sequence.

Greedy rows take the argmax. Other rows go through temperature, top-k, top-p and min-p, then
draw from a torch.Generator: the sequence's own when it has a seed (so its tokens do not
depend on what else shares the batch), else the engine's shared one. Logprobs are those of
the model's distribution (after repetition penalty, before temperature and filtering).
"""

import torch

from engine.outputs import Logprob
from engine.sequence import Sequence


class Sampler:
    def __init__(self, tokenizer, seed: int | None = None):
        self.tokenizer = tokenizer
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()

    @torch.inference_mode()
    def __call__(
        self, logits: torch.Tensor, seqs: list[Sequence]
    ) -> list[tuple[int, dict[int, Logprob] | None]]:
        """Pick one token per row of `logits` (num_seqs, vocab) for the matching sequence."""
        assert logits.shape[0] == len(seqs), (logits.shape, len(seqs))
        logits = logits.float().cpu().clone()  # (num_seqs, vocab); penalties write in place
        for i, seq in enumerate(seqs):
            if seq.params.repetition_penalty != 1.0:
                apply_repetition_penalty(
                    logits[i], seq.all_token_ids, seq.params.repetition_penalty
                )
        token_ids = logits.argmax(dim=-1)  # greedy rows are done
        rows = [i for i, s in enumerate(seqs) if not s.params.is_greedy]
        if rows:
            probs = self._filtered_probs(logits[rows], [seqs[i].params for i in rows])
            for j, i in enumerate(rows):
                gen = seqs[i].generator or self.generator
                token_ids[i] = torch.multinomial(probs[j], 1, generator=gen)[0]
        chosen = token_ids.tolist()
        return [
            (tok, self._logprobs(logits[i], tok, seq.params.logprobs))
            for i, (tok, seq) in enumerate(zip(chosen, seqs, strict=True))
        ]

    def _filtered_probs(self, logits: torch.Tensor, params: list) -> torch.Tensor:
        temps = torch.tensor([p.temperature for p in params]).unsqueeze(1)
        logits = logits / temps  # (rows, vocab)
        vocab = logits.shape[-1]
        if any(p.top_k or p.top_p < 1.0 for p in params):
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            ks = torch.tensor([p.top_k if 0 < p.top_k < vocab else vocab for p in params])
            cut = torch.arange(vocab).unsqueeze(0) >= ks.unsqueeze(1)  # beyond top-k
            sorted_probs = sorted_logits.masked_fill(cut, float("-inf")).softmax(dim=-1)
            top_ps = torch.tensor([p.top_p for p in params]).unsqueeze(1)
            cut |= (sorted_probs.cumsum(dim=-1) - sorted_probs) > top_ps  # keeps at least one
            sorted_logits = sorted_logits.masked_fill(cut, float("-inf"))
            logits = torch.empty_like(logits).scatter_(-1, order, sorted_logits)
        probs = logits.softmax(dim=-1)
        min_ps = torch.tensor([p.min_p for p in params]).unsqueeze(1)
        if (min_ps > 0).any():
            probs = probs.masked_fill(probs < min_ps * probs.max(dim=-1, keepdim=True).values, 0)
        return probs

    def _logprobs(self, logits: torch.Tensor, token_id: int, k: int | None):
        if k is None:
            return None
        logprobs = logits.log_softmax(dim=-1)  # (vocab,)
        chosen = logprobs[token_id].item()
        result = {
            token_id: Logprob(chosen, int((logprobs > chosen).sum()) + 1, self._piece(token_id))
        }
        if k:
            top = logprobs.topk(k)
            for rank, (lp, tok) in enumerate(
                zip(top.values.tolist(), top.indices.tolist(), strict=False), 1
            ):
                result.setdefault(tok, Logprob(lp, rank, self._piece(tok)))
        return result

    def _piece(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])


def apply_repetition_penalty(logits: torch.Tensor, token_ids: list[int], penalty: float) -> None:
    """In place, as transformers does: seen tokens' logits divided (if > 0) or multiplied."""
    seen = torch.tensor(sorted(set(token_ids)), dtype=torch.long)
    values = logits[seen]
    logits[seen] = torch.where(values > 0, values / penalty, values * penalty)
