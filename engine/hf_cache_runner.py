"""HFCacheRunner (kv_backend="hf_cache"): one transformers DynamicCache and one forward per
sequence. The simple starting point, kept to compare against the paged runner; it serves
any model transformers can run, so it is also the fallback for models paged attention can't.
"""

import copy

import torch
from transformers import DynamicCache

from engine.scheduler import ScheduledSequence
from engine.sequence import Sequence


class HFCacheRunner:
    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device
        self.caches: dict[int, DynamicCache] = {}  # seq_id -> its own cache

    def free(self, seq: Sequence) -> None:
        self.caches.pop(seq.seq_id, None)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        self.caches[child.seq_id] = copy.deepcopy(self.caches[parent.seq_id])

    @torch.inference_mode()
    def execute(
        self, scheduled: list[ScheduledSequence], blocks_to_copy: list[tuple[int, int]]
    ) -> tuple[torch.Tensor, list[ScheduledSequence]]:
        rows, sampled = [], []
        for s in scheduled:
            seq, start = s.seq, s.seq.num_computed_tokens
            end = start + s.num_new_tokens
            if start == 0:
                self.caches[seq.seq_id] = DynamicCache(config=self.model.config)
            cache = self.caches[seq.seq_id]
            assert cache.get_seq_length() == start, (cache.get_seq_length(), start)
            ids = torch.tensor([seq.all_token_ids[start:end]], device=self.device)  # (1, t)
            positions = torch.arange(start, end, device=self.device).unsqueeze(0)
            out = self.model(
                input_ids=ids, position_ids=positions, cache=cache, use_cache=True,
                logits_to_keep=1,
            )  # fmt: skip
            if s.samples:
                rows.append(out.logits[0, -1])
                sampled.append(s)
        if not rows:
            return torch.empty(0, 0), sampled
        return torch.stack(rows), sampled  # (num_sampled, vocab)
