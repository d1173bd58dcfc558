"""What the Hugging Face parity tests share: a padded batch, the largest logit gap between transformers' model and
ours on it, a tiny checkpoint moved off its initial values and saved, and generated rows cut at EOS."""

import json

import pytest
import torch

import encdec
from encdec.errors import CheckpointError
from encdec.interop.families import FAMILIES
from encdec.interop.from_hf import hf_model_config

# a tiny checkpoint of BART's layout (BART, mBART, Marian, Pegasus, M2M100, Blenderbot): its config's sizes
BART_SHAPE = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    max_position_embeddings=64,
)


def padded_rows(vocab: int, lengths, width: int, target: int, low: int = 3, start: int | None = None):
    """(len(lengths), width) ids of ids low..vocab, row r real for its first lengths[r] tokens (the rest pad 0),
    their mask, and (len(lengths), target) decoder inputs, starting at `start` where given."""
    generator = torch.Generator().manual_seed(1)
    rows = len(lengths)
    src = torch.randint(low, vocab, (rows, width), generator=generator)
    mask = torch.ones(rows, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, length:] = 0
    tgt = torch.randint(low, vocab, (rows, target), generator=generator)
    if start is not None:
        tgt[:, 0] = start
    return src.masked_fill(mask == 0, 0), mask, tgt


def t5_batch():
    """(4, 24) ids of 384 with rows of 24, 15 (a partial last block for LongT5), 3 and 23 real tokens (no Switch
    expert gets more than expert_capacity, 64, tokens of one), their mask, and (4, 12) decoder inputs."""
    return padded_rows(384, (24, 15, 3, 23), 24, 12)


def t5_gap(reference, ours) -> float:
    return logit_gap(reference, ours, t5_batch())


def logit_gap(reference, ours, batch, left: bool = False, **options) -> float:
    """The largest difference between transformers' encoder-decoder logits and ours on `batch` (src, mask, tgt),
    its inputs padded on the left with `left`; `options` are transformers' forward's own (FSMT's use_cache false)."""
    src, mask, tgt = batch
    if left:
        src, mask = src.flip(1), mask.flip(1)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, **options).logits
        got = ours(src, tgt, src_mask=mask.bool()).logits
    return (got - expected).abs().max().item()


def saved_jittered(model, path, scale: float):
    """`model` with every weight moved by `scale` times noise (so that zero biases and one norms are read, not
    assumed), saved at `path` as safetensors."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    model.save_pretrained(path)
    return model


def assert_refused_in_one_sentence(path, changed: dict, message: str) -> None:
    """The checkpoint at `path` with config.json's keys `changed` is refused by both readers (the weights' and
    encdec size's) in one sentence matching `message`."""
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | changed))
    for read in (encdec.load_hf, hf_model_config):
        with pytest.raises(CheckpointError, match=message) as error:
            read(path)
        assert "\n" not in str(error.value) and ". " not in str(error.value)


def assert_written_back_equal(theirs, path, vocab: int, length: int) -> None:
    """transformers' causal LM `theirs`, saved in path / "in": encdec reads it and writes it as its family into
    path / "out", which transformers reloads with the same logits (on `length` ids below `vocab`) and encdec reads
    back as the same config."""
    ours = encdec.load_hf(path / "in")
    model_type = json.loads((path / "in" / "config.json").read_text())["model_type"]
    FAMILIES[model_type].save(ours, path / "out")
    reloaded = type(theirs).from_pretrained(path / "out").eval()
    ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (reloaded(input_ids=ids).logits - theirs(input_ids=ids).logits).abs().max().item() < 1e-5
    assert encdec.load_hf(path / "out").config == ours.config


def until_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def left_padded(vocab: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts of 9 and 6 tokens, the second padded on the left: ids (2, 9) and mask (2, 9)."""
    ids = torch.randint(4, vocab, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = pad, 0
    return ids, mask
