"""Left-padded prompts of different lengths: each row of a causal family's batch gets the tokens it
would get alone, as Hugging Face's decoder-only `generate` gives them."""

from collections import Counter

import pytest
import torch
from device_check import DeviceCheck

import encdec
from encdec.errors import DataError
from encdec.models import build_model, preset
from encdec.runs.text import RunTokenizer
from encdec.tokenizers.byte import ByteTokenizer

V = 61
PAD = V - 2
ALL_ON = dict(add_pos_embed_to_decoder=True, sub_pos_embed="YES_LN", add_ln_before_decoder_ff=True, order_type="ALT")
FAMILIES = {  # name -> (preset, overrides)
    "decoder_only": ("decoder_only-tiny", {}),
    "decoder_only-window": (  # Gemma's layout: a window of 3 that prompts and outputs outgrow, and its norms
        "decoder_only-tiny",
        dict(position="rope", norm="gemma_rmsnorm", post_norms=True, activation="gated_gelu", sliding_window=3),
    ),
    "ar_encdec": ("ar_encdec-tiny", dict(research=ALL_ON)),  # positions added and subtracted
    "parallel_encdec": ("parallel_encdec-tiny", dict(research=ALL_ON)),
}
MODES = {"greedy": dict(), "beam": dict(num_beams=3)}


def tiny(name: str, vocab: int = V):
    preset_name, overrides = FAMILIES[name]
    torch.manual_seed(0)
    cfg = preset(
        preset_name, vocab_size=vocab, pad_id=vocab - 2, eos_id=vocab - 1, decoder_start_id=0, dropout=0.0, **overrides
    )
    return build_model(cfg).eval()


def left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths -> ids (B, S) padded on the left with PAD, and a 0/1 long mask."""
    S = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), S), PAD)
    mask = torch.zeros(len(prompts), S, dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, S - len(prompt) :] = prompt
        mask[i, S - len(prompt) :] = 1
    return ids, mask


def prompts_of(lengths: list[int]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, PAD, (n,), generator=generator) for n in lengths]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", FAMILIES)
def test_a_left_padded_batch_equals_each_prompt_generated_alone(name, mode):
    model = tiny(name)
    prompts = prompts_of([7, 2, 5])
    ids, mask = left_padded(prompts)
    options = dict(max_new_tokens=8, eos_token_id=[], **MODES[mode])
    batched = encdec.generate(model, ids, mask, **options)
    for i, prompt in enumerate(prompts):
        assert torch.equal(batched[i], encdec.generate(model, prompt[None], **options)[0]), f"row {i}"


@pytest.mark.parametrize("name", FAMILIES)
def test_prefill_logits_of_a_padded_row_match_the_row_alone(name):
    model = tiny(name)
    prompts = prompts_of([6, 1, 3])
    ids, mask = left_padded(prompts)
    state = model.start(ids, mask, 4, beams=2)
    start = torch.zeros(6, 1, dtype=torch.long)  # generate's placeholder: the prompt's last token is decoded
    tokens = torch.tensor([[5], [5], [9], [9], [11], [11]])
    batched = torch.cat((model.step(start, state), model.step(tokens, state)), dim=1)  # the prompt's last, a step
    for i, prompt in enumerate(prompts):
        alone = model.start(prompt[None], None, 4)
        expected = torch.cat((model.step(start[:1], alone), model.step(tokens[2 * i : 2 * i + 1], alone)), dim=1)
        torch.testing.assert_close(batched[2 * i : 2 * i + 2], expected.expand(2, -1, -1), atol=1e-5, rtol=1e-5)


def test_without_a_mask_the_pad_token_marks_the_left_padding():
    model = tiny("decoder_only")
    ids, mask = left_padded(prompts_of([4, 2]))
    assert torch.equal(
        encdec.generate(model, ids, max_new_tokens=5), encdec.generate(model, ids, mask, max_new_tokens=5)
    )


@pytest.mark.parametrize("row", [[1, 1, 0, 0], [1, 0, 1, 1], [0, 1, 1, 0]], ids=["right", "hole", "both-sides"])
def test_padding_other_than_on_the_left_is_refused_in_one_sentence(row):
    model = tiny("decoder_only")
    mask = torch.tensor([[1, 1, 1, 1], row])
    with pytest.raises(DataError, match="must be padded on the left"):
        encdec.generate(model, torch.zeros(2, 4, dtype=torch.long), mask)


@pytest.mark.parametrize("options", [dict(), dict(num_beams=3)], ids=["greedy", "beam"])
def test_padded_prompts_cost_one_host_sync_at_start_and_none_per_step(options, device):
    new = 8
    with DeviceCheck() as check:
        model = tiny("ar_encdec").to(device)
        ids, mask = (t.to(device) for t in left_padded(prompts_of([5, 2, 4])))
        check.syncs.clear()
        encdec.generate(model, ids, mask, max_new_tokens=new, eos_token_id=1, **options)
    assert check.errors == []
    places = Counter(sync.where.split(":")[0] for sync in check.syncs)
    search = "generation/beam_search.py" if options else "generation/search.py"
    assert set(places) <= {search, "generation/generate.py", "models/causal_lm_shared.py"}, places
    assert places["models/causal_lm_shared.py"] == 1 and places[search] <= new + 1, places


def test_the_run_tokenizer_pads_causal_prompts_on_the_left():
    tokenizer = ByteTokenizer(num_sentinels=0)
    model = tiny("decoder_only", vocab=tokenizer.vocab_size)
    assert RunTokenizer.padding_side_for(model) == "left"
    assert RunTokenizer.padding_side_for(build_model(preset("t5-tiny"))) == "right"
    texts = ["a longer prompt", "hi"]
    encoded = RunTokenizer(tokenizer, padding_side="left")(texts)
    assert encoded["attention_mask"][1].tolist() == [False] * 13 + [True] * 2
    batched = encdec.generate(model, encoded["input_ids"], encoded["attention_mask"], max_new_tokens=4)
    for i, text in enumerate(texts):
        alone = RunTokenizer(tokenizer, padding_side="left")([text])
        assert torch.equal(batched[i], encdec.generate(model, alone["input_ids"], max_new_tokens=4)[0])
