"""A chat answer stops at the chat template's turn markers; undrawable text shows as one U+FFFD."""

from engine import SamplingParams
from playground.access.turns import stop_at_turns, turn_marker_ids
from playground.board.cards import readable


def test_the_markers_come_from_the_chat_template(default_model):
    tokenizer = default_model[1]
    ids = turn_marker_ids(tokenizer)
    names = tokenizer.convert_ids_to_tokens(list(ids))
    assert ids and all(i in tokenizer.all_special_ids for i in ids)
    assert set(names) == {"<|im_start|>", "<|im_end|>"}  # the bundled model's ChatML turns


def test_a_chat_stops_at_them_and_a_fixed_length_answer_never_writes_them(default_model):
    tokenizer = default_model[1]
    params = stop_at_turns(SamplingParams(max_tokens=8, stop_token_ids=[5]), tokenizer)
    assert params.stop_token_ids[0] == 5 and set(turn_marker_ids(tokenizer)) <= set(
        params.stop_token_ids
    )
    fixed = stop_at_turns(SamplingParams(max_tokens=8, ignore_eos=True), tokenizer)
    assert fixed.min_tokens == 8 and set(turn_marker_ids(tokenizer)) <= set(fixed.stop_token_ids)
    beams = SamplingParams(max_tokens=8, temperature=0.0, beam_width=2)
    assert stop_at_turns(beams, tokenizer) is beams
    assert turn_marker_ids(None) == ()


def test_undrawable_text_shows_as_one_replacement_character():
    assert readable("caf\ufffd\ufffd\ufffd ok") == "caf\ufffd ok"
    assert readable("a\x00\x01\ue000b\nc\td") == "a\ufffdb\nc\td"  # controls, private use
    assert readable("naïve 日本 🙂") == "naïve 日本 🙂"
