"""HFCacheRunner (kv_backend="hf_cache"): one transformers DynamicCache and one forward per
sequence. The simple starting point, kept to compare against the paged runner; it serves
any model transformers can run, so it is also the fallback for models paged attention can't.
"""

import copy
import inspect

import torch
from transformers import DynamicCache

from engine.scheduler import ScheduledSequence
from engine.sequence import Sequence


class HFCacheRunner:
    def __init__(self, model):
        self.model = model
        self.device = next(model.parameters()).device
        # transformers 5.24 names the forward's cache argument `cache`; 5.17 `past_key_values`
        forward_args = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in forward_args else "past_key_values"
        self.caches: dict[int, DynamicCache] = {}  # seq_id -> its own cache
        # Sequences whose cache a failed step dropped instead of rolling back (a layer that
        # cannot be cropped): their next forward recomputes all their computed tokens.
        self.to_rebuild: set[int] = set()

    def free(self, seq: Sequence) -> None:
        self.caches.pop(seq.seq_id, None)
        self.to_rebuild.discard(seq.seq_id)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        self.caches[child.seq_id] = copy.deepcopy(self.caches[parent.seq_id])

    @torch.inference_mode()
    def execute(
        self, scheduled: list[ScheduledSequence], blocks_to_copy: list[tuple[int, int]]
    ) -> tuple[torch.Tensor, list[ScheduledSequence]]:
        """One forward per sequence, each growing its own cache. If one raises, the caches
        this call touched are rolled back before re-raising, so the engine can retry any of
        these sequences as if this call never ran."""
        rows, sampled = [], []
        touched: dict[int, int] = {}  # seq_id -> its cache length before this call
        try:
            for s in scheduled:
                seq, start = s.seq, s.seq.num_computed_tokens
                end = start + s.num_new_tokens
                cache, first = self._cache_for(seq, start)
                touched[seq.seq_id] = first
                ids = torch.tensor([seq.all_token_ids[first:end]], device=self.device)  # (1, t)
                positions = torch.arange(first, end, device=self.device).unsqueeze(0)
                out = self.model(
                    input_ids=ids, position_ids=positions, use_cache=True, logits_to_keep=1,
                    **{self.cache_arg: cache},
                )  # fmt: skip
                self.to_rebuild.discard(seq.seq_id)
                if s.samples:
                    rows.append(out.logits[0, -1])
                    sampled.append(s)
        except BaseException:
            for seq_id, length in touched.items():
                self._roll_back(seq_id, length)
            raise
        if not rows:
            return torch.empty(0, 0), sampled
        return torch.stack(rows), sampled  # (num_sampled, vocab)

    def _cache_for(self, seq: Sequence, start: int) -> tuple[DynamicCache, int]:
        """The sequence's cache, holding exactly its `start` computed tokens, and the first
        token to run (0 when a dropped cache is rebuilt)."""
        if start == 0 or seq.seq_id in self.to_rebuild:
            self.caches[seq.seq_id] = DynamicCache(config=self.model.config)
            return self.caches[seq.seq_id], 0
        cache = self.caches.get(seq.seq_id)
        if cache is None or cache.get_seq_length() != start:
            held = "no cache" if cache is None else f"{cache.get_seq_length()} tokens cached"
            raise RuntimeError(
                f"hf_cache: sequence {seq.seq_id} has {start} computed tokens but {held}; "
                "its cache is out of step with the scheduler"
            )
        return cache, start

    def _roll_back(self, seq_id: int, length: int) -> None:
        """Cut a cache back to `length` tokens, layer by layer: a forward that raised midway
        advanced only its first layers. A layer that cannot be cut (a sliding window already
        full) drops the cache, to be rebuilt from the tokens on the sequence's next forward."""
        cache = self.caches.get(seq_id)
        if cache is None:
            return
        if length == 0:
            del self.caches[seq_id]  # the next forward starts a new one
            return
        try:
            for layer in cache.layers:
                extra = layer.get_seq_length() - length
                if extra > 0:
                    layer.crop(-extra)  # negative: drop that many tokens from the end
        except (RuntimeError, ValueError, NotImplementedError):
            del self.caches[seq_id]
            self.to_rebuild.add(seq_id)
