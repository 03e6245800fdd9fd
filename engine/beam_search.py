"""BeamSearch: one request's beam search, step by step, as transformers' generate runs it.

`generate(num_beams=k, do_sample=False, length_penalty=p)` with its default stopping rule
(early_stopping=False), rebuilt over the engine's sequences: each step every live beam's
last-token logprobs are added to its cumulative logprob, and the best K = max(2, 1 + number of
EOS tokens) * k candidates over all beams are ranked. Those of the top k that end (an EOS, or
max_tokens reached) become finished hypotheses, scored cumulative logprob / generated length
** p, of which the k best are kept; the k best candidates that do not end are the next beams.
The search stops when no candidate can go on (max_tokens) or when k hypotheses are finished
and the best live beam, scored at its current length, does not beat the worst of them.

Sums and scores are float32, as in transformers, so equal inputs rank alike. The engine turns
the candidates into sequences: a parent's first candidate extends it, the others fork it (the
fork shares its blocks), and a beam with no candidate is pruned.

The search also keeps its tree for the inspector: where each beam forked from and at which
step (`forks`), when each pruned beam ended and with what (`pruned`), and every hypothesis it
finished, with the beam it came from (`hypotheses`).
"""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, StopReason


@dataclass(frozen=True, slots=True)
class BeamHypothesis:
    """A finished beam: its generated tokens (the EOS included), raw and normalized scores."""

    token_ids: tuple[int, ...]
    text: str
    cumulative_logprob: float
    score: float  # cumulative_logprob / len(token_ids) ** length_penalty
    stop_reason: StopReason
    beam: int = 0  # the beam it ended
    step: int = 0  # the engine step it finished at


@dataclass(frozen=True, slots=True)
class BeamFork:
    """Where a beam branched off: its parent, the step, the output tokens it took from it."""

    parent: int
    step: int
    num_output_tokens: int


@dataclass(frozen=True, slots=True)
class PrunedBeam:
    """A beam that had no candidate left: when it ended, and its length and score then."""

    step: int
    num_output_tokens: int
    cumulative_logprob: float


@dataclass(frozen=True, slots=True)
class BeamCandidate:
    """A live beam of the next step: `parent` extended by `token_id`."""

    parent: Sequence
    token_id: int
    cumulative_logprob: float


class BeamSearch:
    def __init__(
        self,
        params: SamplingParams,
        eos_token_ids: frozenset[int],
        max_model_len: int,
        decode: Callable[[list[int]], str],
    ):
        self.decode = decode  # token ids -> text, as the detokenizer decodes an output
        self.width = params.beam_width
        self.length_penalty = params.length_penalty
        self.max_tokens = params.max_tokens
        self.max_model_len = max_model_len
        self.eos_token_ids = frozenset() if params.ignore_eos else eos_token_ids
        self.num_candidates = max(2, 1 + len(self.eos_token_ids)) * self.width
        self.finished: list[BeamHypothesis] = []  # best first, at most `width`
        self.done = False
        self.num_generated = 0  # tokens computed for all beams, over all steps
        self.num_preemptions = 0  # of the whole group
        self._next_beam_id = 1  # the prompt's sequence is beam 0
        self.first_step: int | None = None  # the engine step of the first token
        self.forks: dict[int, BeamFork] = {}  # beam -> where it forked
        self.pruned: dict[int, PrunedBeam] = {}
        self.hypotheses: list[BeamHypothesis] = []  # every one finished, in order
        self._forks_to_come: deque[BeamFork] = deque()  # asked for by the last step()

    def new_beam_id(self) -> int:
        """The id of the next fork, in the order step() returned the candidates: a parent's
        first candidate extends it, each later one forks it."""
        self._next_beam_id += 1
        self.forks[self._next_beam_id - 1] = self._forks_to_come.popleft()
        return self._next_beam_id - 1

    @torch.inference_mode()
    def step(self, beams: list[Sequence], logits: torch.Tensor) -> list[BeamCandidate]:
        """One token for all `beams` (equal lengths), from their logits (len(beams), vocab).
        Returns the next live beams, best first (none once `done`); updates `finished` and
        the tree (the beams left without a candidate are pruned)."""
        assert not self.done and logits.shape[0] == len(beams), (logits.shape, len(beams))
        self.num_generated += len(beams)
        logprobs = torch.log_softmax(logits.float().cpu(), dim=-1)  # (m, vocab)
        cumulative = torch.tensor([b.cumulative_logprob for b in beams], dtype=torch.float32)
        totals = (logprobs + cumulative.unsqueeze(1)).flatten()  # (m * vocab,)
        values, indices = totals.topk(min(self.num_candidates, totals.numel()))
        vocab = logits.shape[-1]
        num_generated = beams[0].num_output_tokens + 1  # with this step's token
        scale = float(num_generated) ** self.length_penalty
        scores = (values / scale).tolist()
        step = beams[0].clock.step
        if self.first_step is None:
            self.first_step = step
        running, ended = [], []
        for rank, (value, index, score) in enumerate(
            zip(values.tolist(), indices.tolist(), scores, strict=True)
        ):
            parent, token_id = beams[index // vocab], index % vocab
            reason = self._stop_reason(parent, token_id, num_generated)
            if reason is None:
                if len(running) < self.width:
                    running.append(BeamCandidate(parent, token_id, value))
            elif rank < self.width:  # only the top k candidates may end the search
                tokens = (*parent.output_token_ids, token_id)
                text = self.decode(list(tokens))
                ended.append(BeamHypothesis(tokens, text, value, score, reason, parent.index, step))
        self.hypotheses += ended
        self.finished = sorted(self.finished + ended, key=lambda h: -h.score)[: self.width]
        if len(running) < self.width or not self._can_improve(running[0], num_generated):
            self.done = True
            running = []
        self._note_tree(beams, running, step)
        return running

    def advance(self, group, row_of: dict, logits: torch.Tensor, fork, drop) -> str:
        """Fork, prune and extend `group`'s beams by one token, each beam's logits at row
        `row_of[seq_id]`; `fork(group, parent, index)` makes a child, `drop(seq)` ends a
        pruned beam. What changed, in words ("" when no beam forked or was pruned)."""
        beams = list(group.seqs)  # fork appends to group.seqs
        rows = [row_of[b.seq_id] for b in beams]
        candidates = self.step(beams, logits[torch.tensor(rows, device=logits.device)])
        extended, forked, kept = set(), [], []
        for c in candidates:  # forks first: they copy the parent before it is extended
            if c.parent.seq_id in extended:
                child = fork(group, c.parent, self.new_beam_id())
                forked.append((child.index, c.parent.index))
                kept.append((child, c))
            else:
                extended.add(c.parent.seq_id)
                kept.append((c.parent, c))
        pruned = [b for b in beams if b.seq_id not in extended]
        for seq in pruned:
            drop(seq)
        for seq, c in kept:
            assert seq.append_token(c.token_id) is None, "a live beam never stops"
            seq.cumulative_logprob = c.cumulative_logprob
        group.seqs = [seq for seq, _ in kept]
        parts = [f"forked beam {child} from {parent}" for child, parent in forked]
        if pruned:
            parts.append("pruned " + ", ".join(str(b.index) for b in pruned))
        return ", ".join(parts)

    def _note_tree(self, beams: list[Sequence], running: list[BeamCandidate], step: int):
        assert not self._forks_to_come, "every fork of the last step has its id"
        extended = set()
        for c in running:
            if c.parent.index in extended:
                fork = BeamFork(c.parent.index, step, c.parent.num_output_tokens)
                self._forks_to_come.append(fork)
            extended.add(c.parent.index)
        for b in beams:
            if b.index not in extended:
                self.pruned[b.index] = PrunedBeam(step, b.num_output_tokens, b.cumulative_logprob)

    def _stop_reason(self, parent: Sequence, token_id: int, num_generated: int):
        if token_id in self.eos_token_ids:
            return StopReason.EOS
        if num_generated >= self.max_tokens:
            return StopReason.MAX_TOKENS
        if parent.num_prompt_tokens + num_generated >= self.max_model_len:
            return StopReason.LENGTH
        return None

    def _can_improve(self, best: BeamCandidate, num_generated: int) -> bool:
        """transformers' heuristic for early_stopping=False: the best live beam, scored at
        its current length, against the worst of k finished hypotheses."""
        if len(self.finished) < self.width:
            return True
        best_score = torch.tensor(best.cumulative_logprob, dtype=torch.float32) / (
            float(num_generated) ** self.length_penalty
        )
        return best_score.item() > self.finished[-1].score

    def best(self, n: int) -> list[BeamHypothesis]:
        return self.finished[:n]
