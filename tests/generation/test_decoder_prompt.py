"""The option decoder_prompt: every row continues the given tokens, as Hugging Face's generate(decoder_input_ids=)
does on the same weights (T5, BART; greedy and beam 4), and as a decoding that forces those tokens one by one."""

import pytest
import torch

import encdec
from encdec.errors import DataError

from .helpers import V, tiny

transformers = pytest.importorskip("transformers")

HF_MODELS = {
    "t5": lambda: transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0
        )
    ),
    "bart": lambda: transformers.BartForConditionalGeneration(
        transformers.BartConfig(
            vocab_size=99,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=48,
            decoder_ffn_dim=48,
            max_position_embeddings=128,
        )
    ),
}
SEARCHES = {"greedy": dict(), "beam": dict(num_beams=4, length_penalty=0.7)}


@pytest.fixture(scope="module", params=HF_MODELS)
def hf_pair(request, tmp_path_factory):
    torch.manual_seed(0)
    reference = HF_MODELS[request.param]().eval()
    path = tmp_path_factory.mktemp(request.param)
    reference.save_pretrained(path)
    return reference, encdec.load_hf(path)


@pytest.mark.parametrize("search", SEARCHES.values(), ids=SEARCHES)
@pytest.mark.parametrize("per_row", [False, True], ids=["one-prompt", "per-row"])
def test_a_decoder_prompt_equals_hugging_face_decoder_input_ids(hf_pair, search, per_row):
    reference, ours = hf_pair
    torch.manual_seed(1)
    src = torch.randint(3, 99, (3, 12))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 7:] = 0
    start = reference.config.decoder_start_token_id
    rows = [[start, 7, 8, 9], [start, 10, 11, 12], [start, 13, 14, 15]] if per_row else [[start, 7, 8, 9]] * 3
    expected = reference.generate(
        input_ids=src, attention_mask=mask, decoder_input_ids=torch.tensor(rows), max_new_tokens=8, **search
    )
    prompt = rows if per_row else rows[0]
    got = encdec.generate(ours, src, mask, decoder_prompt=prompt, max_new_tokens=8, **search)
    assert torch.equal(got, expected)
    assert torch.equal(
        got, encdec.generate(ours, src, mask, decoder_input_ids=torch.tensor(rows), max_new_tokens=8, **search)
    )


class Forcing:
    """The model with the tokens of `forced` (P,) imposed one step at a time after the start token: each of
    those steps' logits -inf but at the forced token."""

    def __init__(self, model, forced: torch.Tensor):
        self.model, self.forced, self.config, self.steps = model, forced, model.config, 0

    def start(self, *args, **kwargs):
        self.steps = 0
        return self.model.start(*args, **kwargs)

    def step(self, tgt_ids, state):
        logits = self.model.step(tgt_ids, state)
        if self.steps < len(self.forced):
            logits = torch.full_like(logits, -torch.inf)
            logits[..., self.forced[self.steps]] = 0.0
        self.steps += 1
        return logits


@pytest.mark.parametrize("search", [dict(), dict(num_beams=4, length_penalty=0.0)], ids=SEARCHES)
def test_a_decoder_prompt_equals_forcing_its_tokens(search):
    """Beam search's scores count only the tokens after the prompt, so forced tokens leave the ranking alone
    when lengths are not scored (length_penalty 0)."""
    model = tiny("t5")
    src = torch.randint(3, V, (3, 9))
    prompt = [0, 5, 6, 7]
    got = encdec.generate(model, src, decoder_prompt=prompt, max_new_tokens=6, eos_token_id=V - 1, **search)
    forced = encdec.generate(
        Forcing(model, torch.tensor(prompt[1:])), src, max_new_tokens=9, eos_token_id=V - 1, **search
    )
    assert torch.equal(got, forced)
    assert (got[:, :4] == torch.tensor(prompt)).all()


@pytest.mark.parametrize(
    "prompt, error",
    [
        ([[0, 5], [0, 6]], "decoder_prompt has 2 rows but there are 3 inputs"),
        ([[0, 5], [0, 6, 7], [0]], "decoder_prompt's rows must have one length"),
        ([0, 500], r"decoder_prompt\[1\] must be below vocab_size \(97\)"),
    ],
)
def test_a_bad_decoder_prompt_is_one_sentence(prompt, error):
    model = tiny("t5")
    with pytest.raises((DataError, encdec.errors.ConfigError), match=error):
        encdec.generate(model, torch.randint(3, V, (3, 9)), decoder_prompt=prompt)
