"""Sampler: greedy, temperature / top-k / top-p / min-p, seeds, repetition penalty, logprobs.

Sequences are built directly (no model): the sampler only reads their params, tokens and
generator. Logits are random rows over the 32-id character vocabulary from conftest.
"""

import pytest
import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

from engine.detokenizer import IncrementalDetokenizer
from engine.outputs import Logprob
from engine.penalties import apply_penalties
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

VOCAB = 32


def make_seq(tok, prompt=(1, 2, 3), outputs=(), seed=None, **params):
    sp = SamplingParams(seed=seed, **params)
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    seq = Sequence(
        0, 0, list(prompt), sp, IncrementalDetokenizer(tok, sp.stop, False),
        frozenset({0}), 1024, generator=gen,
    )  # fmt: skip
    seq.output_token_ids = list(outputs)
    return seq


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny multi-row ops on a busy 2-core box spend ~15 ms each waiting on OpenMP workers.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def sampler(char_tokenizer):
    assert len(char_tokenizer) == VOCAB
    return Sampler(char_tokenizer, seed=0)


def random_logits(rows, seed=0, scale=3.0):
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * scale


def tokens(results):
    return [tok for tok, _ in results]


def test_greedy_is_argmax(sampler, char_tokenizer):
    logits = random_logits(6)
    seqs = [make_seq(char_tokenizer, temperature=0.0) for _ in range(6)]
    assert tokens(sampler(logits, seqs)) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_takes_the_first_of_equal_maxima_as_argmax_does(sampler, char_tokenizer, dtype):
    g = torch.Generator().manual_seed(3)
    logits = torch.randint(0, 3, (16, 4096), generator=g).to(dtype)  # every row has ties
    logits[:, 0] = -1  # the first maximum is never at index 0
    seqs = [make_seq(char_tokenizer, temperature=0.0) for _ in range(16)]
    want = [row.eq(row.max()).nonzero()[0].item() for row in logits]  # first max, spelled out
    assert tokens(sampler(logits, seqs)) == want == logits.argmax(-1).tolist()
    mixed = [make_seq(char_tokenizer, temperature=0.0, repetition_penalty=1.0 + (i == 0))
             for i in range(16)]  # fmt: skip
    assert tokens(sampler(logits, mixed))[1:] == want[1:]  # the general path's greedy rows


def test_greedy_ignores_seed_and_generators(sampler, char_tokenizer):
    logits = random_logits(3, seed=5)
    seqs = [make_seq(char_tokenizer, temperature=0.0, seed=s) for s in (1, 2, 3)]
    for _ in range(3):
        assert tokens(sampler(logits, seqs)) == logits.argmax(-1).tolist()


def test_accepts_half_precision_logits(sampler, char_tokenizer):
    logits = random_logits(2).to(torch.bfloat16)
    seqs = [make_seq(char_tokenizer, temperature=0.0) for _ in range(2)]
    assert tokens(sampler(logits, seqs)) == logits.float().argmax(-1).tolist()


@pytest.mark.parametrize(
    "params",
    [
        {"top_k": 1},
        {"top_p": 1e-6},
        {"min_p": 1.0},
        {"top_k": 1, "temperature": 5.0},
        {"top_p": 1e-6, "temperature": 5.0},
        {"min_p": 1.0, "temperature": 5.0},
        {"top_k": 3, "top_p": 1e-6},
    ],
    ids=str,
)
def test_filters_down_to_one_token_behave_like_greedy(sampler, char_tokenizer, params):
    logits = random_logits(8, seed=1, scale=1.0)  # flat: sampling would wander
    seqs = [make_seq(char_tokenizer, **params) for _ in range(8)]
    for _ in range(5):
        assert tokens(sampler(logits, seqs)) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("temperature", [1e-6, 1e-40, 1e-300, 5e-324])
def test_tiny_temperature_behaves_like_greedy_and_spares_the_batch(
    sampler, char_tokenizer, temperature
):
    # Either SamplingParams refuses such a temperature, or the sampler copes with it: a
    # division that overflows must not crash the step (and every other request in it).
    try:
        tiny = make_seq(char_tokenizer, temperature=temperature)
    except ValueError as e:
        assert "temperature" in str(e)
        return
    logits = random_logits(2, seed=9)
    other = make_seq(char_tokenizer, temperature=0.0)
    assert tokens(sampler(logits, [tiny, other])) == logits.argmax(-1).tolist()


def test_top_k_only_draws_from_the_k_best(sampler, char_tokenizer):
    logits = random_logits(1, seed=2, scale=0.5)
    allowed = set(logits[0].topk(3).indices.tolist())
    seq = make_seq(char_tokenizer, top_k=3, temperature=2.0)
    drawn = {sampler(logits, [seq])[0][0] for _ in range(200)}
    assert drawn <= allowed and len(drawn) > 1


def test_top_p_keeps_the_smallest_set_over_p(sampler, char_tokenizer):
    logits = torch.full((1, VOCAB), -20.0)
    logits[0, [5, 6, 7]] = torch.tensor([2.0, 1.5, 1.0])  # about 0.5, 0.3, 0.2
    seq = make_seq(char_tokenizer, top_p=0.7)
    drawn = {sampler(logits, [seq])[0][0] for _ in range(300)}
    assert drawn == {5, 6}


def test_min_p_drops_tokens_below_the_fraction_of_the_max(sampler, char_tokenizer):
    logits = torch.full((1, VOCAB), -20.0)
    logits[0, [3, 4, 9]] = torch.tensor([0.0, -0.5, -3.0])  # p ratios 1, 0.61, 0.05
    seq = make_seq(char_tokenizer, min_p=0.3)
    drawn = {sampler(logits, [seq])[0][0] for _ in range(300)}
    assert drawn == {3, 4}


def test_temperature_sampling_follows_the_distribution(char_tokenizer):
    sampler = Sampler(char_tokenizer, seed=123)
    logits = torch.full((1, VOCAB), -30.0)
    logits[0, 1], logits[0, 2] = 0.0, 0.0  # two equal tokens
    seq = make_seq(char_tokenizer)
    counts = torch.bincount(
        torch.tensor([sampler(logits, [seq])[0][0] for _ in range(2000)]), minlength=VOCAB
    )
    assert counts[1] + counts[2] == 2000
    assert 850 < counts[1] < 1150


def test_sampler_seed_makes_unseeded_draws_reproducible(char_tokenizer):
    logits = random_logits(4, seed=3, scale=0.5)
    seqs = [make_seq(char_tokenizer) for _ in range(4)]
    a, b = Sampler(char_tokenizer, seed=7), Sampler(char_tokenizer, seed=7)
    assert [tokens(a(logits, seqs)) for _ in range(10)] == [
        tokens(b(logits, seqs)) for _ in range(10)
    ]


def draw_seeded(sampler, tok, seed, steps, others=0, params=None, position=0):
    """Tokens drawn for a seeded sequence over `steps` calls, with `others` rows around it."""
    params = params or {}
    seq = make_seq(tok, seed=seed, **params)
    neighbours = [
        make_seq(tok, temperature=[0.0, 0.7, 1.3][i % 3], top_k=[0, 5, 0][i % 3],
                 top_p=[1.0, 1.0, 0.8][i % 3], min_p=[0.0, 0.1, 0.0][i % 3])
        for i in range(others)
    ]  # fmt: skip
    seqs = neighbours[:position] + [seq] + neighbours[position:]
    out = []
    for step in range(steps):
        logits = random_logits(len(seqs), seed=100 + step, scale=1.0)
        logits[position] = random_logits(1, seed=1000 + step, scale=1.0)[0]
        out.append(sampler(logits, seqs)[position][0])
    return out


@pytest.mark.parametrize("params", [{}, {"temperature": 0.8, "top_k": 10, "top_p": 0.9}])
def test_seeded_sequence_is_reproducible_and_batch_independent(char_tokenizer, params):
    tok = char_tokenizer
    alone = draw_seeded(Sampler(tok, seed=1), tok, 42, 40, params=params)
    again = draw_seeded(Sampler(tok, seed=2), tok, 42, 40, params=params)
    batched = draw_seeded(Sampler(tok, seed=3), tok, 42, 40, others=5, params=params, position=2)
    last = draw_seeded(Sampler(tok, seed=4), tok, 42, 40, others=7, params=params, position=7)
    assert alone == again == batched == last
    assert len(set(alone)) > 3  # it really sampled


def test_different_seeds_differ(char_tokenizer):
    tok = char_tokenizer
    a = draw_seeded(Sampler(tok, seed=0), tok, 1, 40)
    b = draw_seeded(Sampler(tok, seed=0), tok, 2, 40)
    assert a != b


# -- repetition penalty -----------------------------------------------------------------------
@pytest.mark.parametrize("penalty", [1.3, 2.0, 0.7])
def test_repetition_penalty_matches_transformers(penalty, char_tokenizer):
    logits = random_logits(1, seed=4)[0]
    seen = [3, 7, 7, 12, 3, 30]
    ours = logits.clone()[None]
    seq = make_seq(char_tokenizer, prompt=seen[:3], outputs=seen[3:], repetition_penalty=penalty)
    apply_penalties(ours, [seq], [0])
    ours = ours[0]
    ref = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([seen]), logits.clone()[None])[0]
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_penalty_covers_prompt_and_output_and_changes_the_pick(sampler, char_tokenizer):
    logits = torch.zeros(1, VOCAB)
    logits[0, 5], logits[0, 6], logits[0, 8] = 4.0, 3.0, 2.5
    # 5 is in the prompt, 6 in the output: both penalised, 8 wins
    seq = make_seq(char_tokenizer, prompt=[5, 1], outputs=[6], temperature=0.0,
                   repetition_penalty=2.0, logprobs=0)  # fmt: skip
    [(tok, lps)] = sampler(logits.clone(), [seq])
    assert tok == 8
    penalised = logits[0].clone()
    penalised[[5, 6, 1]] = penalised[[5, 6, 1]] / 2.0
    assert lps[8].logprob == pytest.approx(penalised.log_softmax(-1)[8].item(), abs=1e-6)


def test_penalty_on_negative_logit_multiplies(sampler, char_tokenizer):
    logits = torch.full((1, VOCAB), -10.0)
    logits[0, 4], logits[0, 9] = -1.0, -1.5
    seq = make_seq(char_tokenizer, prompt=[4], temperature=0.0, repetition_penalty=2.0)
    assert sampler(logits, [seq])[0][0] == 9  # -1.0 * 2 = -2.0 < -1.5


def test_penalty_applies_to_each_row_separately(sampler, char_tokenizer):
    logits = torch.zeros(2, VOCAB)
    logits[:, 5], logits[:, 6] = 3.0, 2.0
    penalised = make_seq(char_tokenizer, prompt=[5], temperature=0.0, repetition_penalty=2.0)
    plain = make_seq(char_tokenizer, prompt=[5], temperature=0.0)
    assert tokens(sampler(logits, [penalised, plain])) == [6, 5]


def test_sampler_leaves_the_callers_logits_alone(sampler, char_tokenizer):
    logits = random_logits(2, seed=6)
    before = logits.clone()
    seqs = [make_seq(char_tokenizer, prompt=[1, 2, 3], repetition_penalty=1.5, temperature=0.0)
            for _ in range(2)]  # fmt: skip
    sampler(logits, seqs)
    torch.testing.assert_close(logits, before, rtol=0, atol=0)


# -- logprobs ---------------------------------------------------------------------------------
def test_no_logprobs_unless_asked(sampler, char_tokenizer):
    [(_, lps)] = sampler(random_logits(1), [make_seq(char_tokenizer)])
    assert lps is None


@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("k", [0, 1, 5, 20])
def test_logprobs_are_log_softmax_with_ranks(sampler, char_tokenizer, temperature, k):
    logits = random_logits(1, seed=7)
    seq = make_seq(char_tokenizer, temperature=temperature, logprobs=k, top_k=4)
    [(tok, lps)] = sampler(logits, [seq])
    ref = logits[0].log_softmax(-1)  # the model's distribution, before temperature
    order = ref.argsort(descending=True).tolist()
    top = order[:k]
    assert tok in lps
    assert set(lps) == set(top) | {tok}
    for t, lp in lps.items():
        assert isinstance(lp, Logprob)
        assert lp.logprob == pytest.approx(ref[t].item(), abs=1e-5)
        assert lp.rank == order.index(t) + 1
        assert lp.decoded_token == char_tokenizer.decode([t])
    assert [lps[t].rank for t in top] == list(range(1, k + 1))


def test_logprobs_include_a_sampled_token_outside_the_top_k(sampler, char_tokenizer):
    logits = torch.full((1, VOCAB), -30.0)
    logits[0, 10], logits[0, 11] = 0.1, 0.0  # 11 is drawn about half the time
    seq = make_seq(char_tokenizer, logprobs=1)
    seen = set()
    for _ in range(50):
        tok, lps = sampler(logits, [seq])[0]
        seen.add(tok)
        if tok == 10:
            assert set(lps) == {10} and lps[10].rank == 1
        else:
            assert tok == 11
            assert set(lps) == {10, 11}  # k alternatives plus the sampled token
            assert (lps[10].rank, lps[11].rank) == (1, 2)
    assert seen == {10, 11}


def test_sampled_token_rank_counts_strictly_better_tokens(sampler, char_tokenizer):
    logits = torch.full((1, VOCAB), -30.0)
    logits[0, [4, 5, 6]] = 1.0  # a three-way tie, then 7
    logits[0, 7] = 0.5
    seq = make_seq(char_tokenizer, temperature=0.0, logprobs=0)
    tok, lps = sampler(logits, [seq])[0]
    assert tok in (4, 5, 6) and lps[tok].rank == 1


def test_logprobs_per_row(sampler, char_tokenizer):
    logits = random_logits(3, seed=8)
    seqs = [
        make_seq(char_tokenizer, temperature=0.0, logprobs=2),
        make_seq(char_tokenizer, temperature=0.0),
        make_seq(char_tokenizer, temperature=0.0, logprobs=0),
    ]
    (t0, l0), (_, l1), (t2, l2) = sampler(logits, seqs)
    assert len(l0) == 2 and l1 is None and set(l2) == {t2}
    assert l0[t0].logprob == pytest.approx(logits[0].log_softmax(-1)[t0].item(), abs=1e-5)
    assert l2[t2].logprob == pytest.approx(logits[2].log_softmax(-1)[t2].item(), abs=1e-5)


def _reference_filtered_probs(logits, params):
    """Straightforward full-sort top-k -> top-p -> min-p, one row at a time."""
    rows = []
    for row, p in zip(logits, params, strict=True):
        row = row / p.temperature
        values, order = row.sort(descending=True)
        k = p.top_k if 0 < p.top_k < row.numel() else row.numel()
        values[k:] = float("-inf")
        probs = values.softmax(-1)
        values[(probs.cumsum(-1) - probs) > p.top_p] = float("-inf")
        out = torch.full_like(row, float("-inf")).scatter(0, order, values).softmax(-1)
        if p.min_p > 0:
            out = out.masked_fill(out < p.min_p * out.max(), 0)
        rows.append(out)
    return torch.stack(rows)


def test_windowed_top_k_top_p_equals_a_full_sort_in_mixed_batches():
    from engine.sampler import filtered_probs

    torch.manual_seed(0)
    vocab = 5000
    peaked = torch.randn(3, vocab) * 8  # the nucleus fits the window
    flat = torch.randn(3, vocab) * 0.01  # the nucleus spills out of it
    logits = torch.cat([peaked, flat])
    params = [
        SamplingParams(top_p=0.9),
        SamplingParams(top_k=50, top_p=0.5, temperature=0.7),
        SamplingParams(),  # unfiltered next to filtered rows
        SamplingParams(top_p=0.95),
        SamplingParams(top_k=2000, min_p=0.5),
        SamplingParams(top_k=3),
    ]
    expected = _reference_filtered_probs(logits.clone(), params)
    got = filtered_probs(logits.clone(), params)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)
