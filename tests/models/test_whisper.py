"""The whisper family built from scratch: a preset of Whisper's shape builds, its encoder positions are Whisper's
sinusoids, it trains a step through the loss every family shares, decodes through its cache as its full forward
computes, exports as WhisperForConditionalGeneration with the same logits, and what it cannot be is one sentence."""

import pytest
import torch

from encdec.errors import ConfigError
from encdec.interop import export_hf
from encdec.models import ModelConfig, build_model, preset
from encdec.models.whisper import sinusoids
from encdec.tokenizers import build_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

V = 384  # above the byte tokenizer's ids, which an export writes beside the model
SMALL = dict(d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, vocab_size=V, pad_id=380, eos_id=380)
SMALL |= dict(decoder_start_id=381, positions={"max": 32}, audio={"max_source_positions": 200})


def small(**overrides) -> ModelConfig:
    return preset("whisper-tiny", **SMALL | overrides)


def built(**overrides):
    torch.manual_seed(0)
    return build_model(small(**overrides))


def features(rows: int = 2, frames: int = 400) -> torch.Tensor:
    return torch.randn(rows, 80, frames, generator=torch.Generator().manual_seed(1))


def test_the_preset_is_whisper_tiny_s_shape_with_its_sinusoids():
    cfg = preset("whisper-tiny")
    assert (cfg.family, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_encoder_layers, cfg.vocab_size) == (
        "whisper", 384, 6, 1536, 4, 51865
    )  # fmt: skip
    transformers = pytest.importorskip("transformers")
    from transformers.models.whisper.modeling_whisper import sinusoids as theirs

    assert torch.equal(sinusoids(1500, 384), theirs(1500, 384))
    assert torch.equal(built().encoder.positions.weight, theirs(200, 32))
    assert transformers is not None


def test_a_step_through_the_shared_loss_trains_every_part():
    model = built().train()
    tgt = torch.randint(0, 370, (2, 7), generator=torch.Generator().manual_seed(2))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    loss = model(features(), tgt[:, :-1], labels=tgt[:, 1:]).loss
    loss.backward()
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    assert torch.isfinite(loss)
    assert all(not torch.equal(p, before[name]) for name, p in model.named_parameters())  # the stem's too
    assert "encoder.positions.weight" not in before  # a fixed table: not trained


def test_ctc_on_the_encoder_is_torch_s_ctc_of_each_row_s_text_tokens_through_the_tied_head():
    model = built(audio={"max_source_positions": 200, "ctc_weight": 0.5}).train()
    start, notimestamps, eos = 381, 382, 380  # decoder input: start, a prompt token, text, then eos padding
    rows = [[start, notimestamps, 5, 9, 9, 17], [start, notimestamps, 44, eos, eos, eos]]
    tgt = torch.tensor(rows)
    labels = torch.cat([tgt[:, 1:], torch.full((2, 1), eos)], dim=1)
    out = model(features(), tgt, labels=labels)
    memory = model.encode(features()).hidden
    log_probs = model.head(memory).float().log_softmax(-1).transpose(0, 1)
    S = log_probs.shape[0]
    expected = torch.nn.functional.ctc_loss(
        log_probs, torch.tensor([5, 9, 9, 17, 44]), torch.tensor([S, S]), torch.tensor([4, 1]), blank=eos
    )
    torch.testing.assert_close(out.aux_losses["ctc"], expected)
    torch.testing.assert_close(out.loss, out.ce_loss + 0.5 * expected)
    out.loss.backward()
    assert model.encoder.conv1.weight.grad.abs().sum() > 0
    assert "ctc" not in model.eval()(features(), tgt).aux_losses  # training alone
    assert "ctc" not in built().train()(features(), tgt).aux_losses  # weight 0: Whisper's own training


def test_cached_greedy_decoding_equals_the_full_forward():
    model = built().eval()
    out = model.generate(features(), max_new_tokens=6, return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        full = model(features(), out.sequences[:, :-1]).logits
    torch.testing.assert_close(torch.stack(out.scores, dim=1), full, atol=1e-4, rtol=0)


def test_an_export_reloads_in_transformers_with_the_same_logits(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = built().eval()
    assert export_hf(model, build_tokenizer("byte"), tmp_path / "out") == "WhisperForConditionalGeneration"
    reloaded = transformers.WhisperForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    tgt = torch.randint(0, 370, (2, 5), generator=torch.Generator().manual_seed(3))
    clips = features(frames=400)  # transformers reads 2 x max_source_positions frames exactly
    with torch.no_grad():
        gap = (reloaded(input_features=clips, decoder_input_ids=tgt).logits - model(clips, tgt).logits).abs().max()
    assert gap.item() < 1e-4


@pytest.mark.parametrize(
    "family, overrides, message",
    [
        ("encoder_decoder", {"audio": {"n_mels": 128}}, "^model.audio is not used by the encoder_decoder family"),
        ("whisper", {"positions": {"kind": "rope"}}, "^model.family whisper has learned decoder positions"),
        ("whisper", {"d_model": 33, "n_heads": 3}, "need an even model.d_model of 4 or more, got 33"),
        ("whisper", {"attention": {"bias": "qkv"}}, "^model.attention.bias qkv acts only with model.bias false"),
        ("whisper", {"experts": {"count": 2}}, "^model.experts is not used by the whisper family"),
    ],
    ids=["audio-elsewhere", "rope", "odd-width", "bias", "experts"],
)
def test_what_the_family_cannot_be_is_one_sentence(family, overrides, message):
    with pytest.raises(ConfigError, match=message):
        if family == "whisper":
            built(**overrides)
        else:
            build_model(preset("t5-tiny", **overrides))


def test_a_whisper_model_without_whisper_s_key_bias_rule_is_refused_at_export(tmp_path):
    model = built(attention={"bias": "none"})
    with pytest.raises(ConfigError, match="cannot be saved as Hugging Face Whisper: attention.bias must be qvo"):
        export_hf(model, build_tokenizer("byte"), tmp_path / "out")


def test_the_audio_encoder_attends_by_chunks_of_queries_as_it_does_whole():
    """A batch whose scores would fill long_scores attends by chunks (models.encoder), its memory unchanged."""
    model = built().eval()
    clips = features(frames=400)
    with torch.no_grad():
        whole = model.encode(clips).hidden
        model.encoder.long_scores = 1_000
        assert model.encoder.by_chunks(2 * 4, 200, None, 0)
        chunked = model.encode(clips).hidden
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=0)


def test_the_audio_encoder_s_stream_is_laid_out_as_it_is_indexed():
    """The stem's (B, C, S) output is transposed to (B, S, C) in memory too: a view would pass its layout to every
    sum after it, whose residual adds then read across strides (3.4 against 1 ms a layer at Whisper base's 3 x 1,500
    x 512)."""
    model = built().eval()
    seen = []
    model.encoder.blocks[0].register_forward_pre_hook(lambda _, args: seen.append(args[0].is_contiguous()))
    with torch.no_grad():
        model.encode(features(frames=400))
    assert seen == [True]
