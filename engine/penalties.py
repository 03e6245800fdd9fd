"""Logits processing before sampling: vLLM's penalties and min_tokens, batched over rows.

apply_penalties follows vLLM's (vllm/model_executor/layers/utils.py): repetition penalty on
every token seen in the prompt or the output (divided if > 0, else multiplied), then
frequency penalty times each token's count in the output and presence penalty for each token
present in the output, subtracted (OpenAI's definition).
"""

import torch


def apply_penalties(logits: torch.Tensor, seqs: list, rows: list[int]) -> None:
    """In place on `logits` (num_seqs, vocab), for the sequences at `rows`."""
    vocab = logits.shape[-1]
    params = [seqs[i].params for i in rows]
    prompts = _padded([seqs[i].prompt_token_ids for i in rows], vocab)  # (r, max prompt)
    outputs = _padded([seqs[i].output_token_ids for i in rows], vocab)  # (r, max output)
    output_counts = _bin_counts(outputs, vocab)  # (r, vocab)
    output_mask = output_counts > 0
    seen = (_bin_counts(prompts, vocab) > 0) | output_mask
    sub = logits[rows]  # (r, vocab), a copy
    repetition = torch.tensor([p.repetition_penalty for p in params]).unsqueeze(1)
    penalty = torch.where(seen, repetition, 1.0)
    sub = torch.where(sub > 0, sub / penalty, sub * penalty)
    frequency = torch.tensor([p.frequency_penalty for p in params]).unsqueeze(1)
    presence = torch.tensor([p.presence_penalty for p in params]).unsqueeze(1)
    sub -= frequency * output_counts
    sub -= presence * output_mask
    logits[rows] = sub


def apply_min_tokens(logits: torch.Tensor, seqs: list, rows: list[int]) -> None:
    """In place: EOS and stop_token_ids at -inf for the rows still short of min_tokens (as
    vLLM's MinTokensLogitsProcessor; EOS counts even with ignore_eos). A row left with no
    finite logit (its grammar allows only the end) keeps them: the output must parse."""
    for i in rows:
        stop_ids = sorted(seqs[i].eos_token_ids | set(seqs[i].params.stop_token_ids))
        stop_ids = [t for t in stop_ids if t < logits.shape[-1]]
        kept = logits[i, stop_ids].clone()
        logits[i, stop_ids] = float("-inf")
        if not bool(torch.isfinite(logits[i]).any()):
            logits[i, stop_ids] = kept


def is_penalized(params) -> bool:
    return (
        params.repetition_penalty != 1.0
        or params.presence_penalty != 0.0
        or params.frequency_penalty != 0.0
    )


def _padded(lists: list[list[int]], pad: int) -> torch.Tensor:
    width = max(1, max(len(ids) for ids in lists))
    out = torch.full((len(lists), width), pad, dtype=torch.long)
    for row, ids in enumerate(lists):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def _bin_counts(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """How often each token id occurs per row, (r, vocab); the pad id `vocab` is dropped."""
    counts = torch.zeros((tokens.shape[0], vocab + 1), dtype=torch.long)
    counts.scatter_add_(1, tokens, torch.ones_like(tokens))
    return counts[:, :vocab]
