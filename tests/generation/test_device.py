"""Generation stays on the model's device: every family, every mode, host inputs as a tokenizer makes them.

On a CPU, `DeviceCheck` (tests/device_check.py) stands in for CUDA: it fails where a
tensor made without `device=` meets a device tensor, and records host syncs. With
`pytest --device cuda` the same tests run on the GPU for real.
"""

from collections import Counter

import pytest
import torch
from device_check import DeviceCheck

import encdec
from encdec.errors import ConfigError
from encdec.models import build_model, preset

from .helpers import FAMILIES, V, padded_batch, tiny

RESEARCH = {  # name -> (preset, takes a padded source)
    "ar_encdec": ("ar_encdec-tiny", False),
    "parallel_encdec": ("parallel_encdec-tiny", False),
    "decoder_only": ("decoder_only-tiny", False),
    "rnn_seq2seq": ("rnn_seq2seq-tiny", True),
}
MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=3, num_return_sequences=2),
    "sampling": dict(do_sample=True, seed=1, num_return_sequences=2),
    "beam-sampling": dict(num_beams=3, do_sample=True, seed=1, top_k=10),
    "processors": dict(repetition_penalty=1.3, no_repeat_ngram_size=2, min_new_tokens=3, bad_words_ids=[[5], [7, 8]]),
    "beam-processors": dict(
        num_beams=3, repetition_penalty=1.3, no_repeat_ngram_size=2, min_new_tokens=3, bad_words_ids=[[5], [7, 8]]
    ),
    "warpers": dict(
        do_sample=True,
        seed=1,
        num_return_sequences=2,
        temperature=0.8,
        min_p=0.05,
        typical_p=0.9,
        epsilon_cutoff=1e-3,
        eta_cutoff=1e-3,
    ),
    "beam-warpers": dict(num_beams=3, do_sample=True, seed=1, min_p=0.05, typical_p=0.9, eta_cutoff=1e-3),
    "suppress": dict(
        suppress_tokens=[5],
        begin_suppress_tokens=[6, 7],
        exponential_decay_length_penalty=(2, 1.5),
        renormalize_logits=True,
    ),
    "beam-suppress": dict(
        num_beams=3,
        suppress_tokens=[5],
        begin_suppress_tokens=[6],
        exponential_decay_length_penalty=(2, 1.5),
        renormalize_logits=True,
    ),
    "group-beam": dict(num_beams=4, num_beam_groups=2, diversity_penalty=0.5, num_return_sequences=2),
    "prefix": dict(decoder_input_ids=torch.tensor([[0, 5, 6]] * 3), repetition_penalty=1.3),
    "beam-prefix": dict(num_beams=3, decoder_input_ids=torch.tensor([[0, 5, 6]] * 3), min_new_tokens=2),
}
MOE = "modules/moe.py"  # MoE dispatch syncs are the MoE module's own business, not generation's


def build(name: str):
    """A tiny model of family `name` and a host batch (ids, mask or None) that family accepts."""
    if name in FAMILIES:
        return tiny(name), *padded_batch()
    preset_name, padded = RESEARCH[name]
    cfg = preset(preset_name, vocab_size=V, pad_id=0, eos_id=V - 1, decoder_start_id=0, dropout=0.0)
    model = build_model(cfg).eval()
    if padded:
        return model, *padded_batch()
    return model, torch.randint(3, V, (3, 7)), None  # the causal LMs take unpadded prompts of one length


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", [*FAMILIES, *RESEARCH])
def test_generate_keeps_every_tensor_on_the_model_device(name, mode, device):
    with DeviceCheck() as check:
        model, src, mask = build(name)
        model.to(device)
        first = encdec.generate(model, src, mask, max_new_tokens=4, eos_token_id=[])
        eos = int(first[0, 2].cpu())  # a token greedy emits early, so rows finish at different steps
        out = encdec.generate(model, src, mask, max_new_tokens=8, eos_token_id=eos, **MODES[mode])
    assert check.errors == []
    assert out.device.type == device.type
    rows = src.shape[0] * MODES[mode].get("num_return_sequences", 1)
    assert out.shape[0] == rows and (out[:, 0] == model.config.decoder_start_id).all()


@pytest.mark.parametrize("name", ["t5", "rot5", "rot5-moe", "transformer-pre", "decoder_only", "rnn_seq2seq"])
@pytest.mark.parametrize("options", [dict(), dict(num_beams=3)], ids=["greedy", "beam"])
def test_decoding_waits_for_the_host_only_for_the_stop_decision(name, options, device):
    """At most one sync per step, in the search loop's stop test; none per layer (kv_cache) or in a step.

    Once per call are allowed: input validation, beam search's output width, and a model's start
    (the causal LMs' padding check, the RNN's packing, which needs host lengths). modules/moe.py is
    left out: its expert dispatch is the MoE module's own concern.
    """
    new = 10
    with DeviceCheck() as check:
        model, src, mask = build(name)
        model.to(device)
        src, mask = src.to(device), mask.to(device) if mask is not None else None  # so validation syncs too
        check.syncs.clear()
        encdec.generate(model, src, mask, max_new_tokens=new, eos_token_id=1, **options)
    where = Counter(sync.where for sync in check.syncs)  # for the failure message
    assert check.errors == []
    places = Counter(sync.where.split(":")[0] for sync in check.syncs if not sync.where.startswith(MOE))
    search = "generation/beam_search.py" if options else "generation/search.py"
    once = {"generation/generate.py": 1, "models/causal_lm_shared.py": 1, "models/rnn_seq2seq.py": 4}
    assert set(places) <= {search, *once}, places
    assert places[search] <= new + (1 if options else 0), where  # one stop test per step (+ beam's width)
    for place, most in once.items():
        assert places[place] <= most, where


def test_a_generator_on_another_device_is_refused(device):
    model, src, mask = build("t5")
    target = device if device.type != "cpu" else torch.device("meta")  # a CPU torch can make CPU generators only
    model.to(target)
    with pytest.raises(ConfigError, match=f"the generator is on cpu but the model is on {target.type}"):
        encdec.generate(model, src, mask, do_sample=True, generator=torch.Generator())


def test_generate_moves_host_inputs_to_the_model_device_and_leaves_them_unchanged(device):
    model, src, mask = build("rot5")
    model.to(device)
    before = src.clone()
    out = encdec.generate(model, src, mask, max_new_tokens=3)
    assert out.device.type == device.type
    assert src.device.type == "cpu" and torch.equal(src, before)
