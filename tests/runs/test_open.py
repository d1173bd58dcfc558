"""encdec.runs: a path opened as a run or a Hugging Face directory, decided in one place; the loaded run's
generation defaults and text encoding as typed fields; the one weight loader's sentence."""

from pathlib import Path

import pytest
import torch

import encdec
from encdec.errors import CheckpointError
from encdec.models import build_model, preset
from encdec.runs import LoadedRun, RunTokenizer, model_kind, open_model
from encdec.runs.checkpoint import load_state

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_2ba69c1" / "run"


def test_a_run_directory_and_a_hugging_face_directory_are_told_apart(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    assert model_kind(RUN) == "run"
    assert model_kind(tmp_path / "hf") == "hf"
    with pytest.raises(CheckpointError, match=r"^training.init_from .*empty is neither a run directory .* has no "):
        model_kind(tmp_path / "empty", "training.init_from ")
    with pytest.raises(CheckpointError, match="it is not a directory"):
        model_kind(tmp_path / "nowhere")


def test_an_opened_run_carries_its_defaults_and_text_encoding_as_fields():
    opened = open_model(RUN, max_source_len=20)
    assert isinstance(opened.run, LoadedRun) and opened.model is opened.run.model and not opened.model.training
    assert opened.generation == {} == dict(opened.model.generation_defaults)  # no generation.json in this run
    text = opened.text
    assert isinstance(text, RunTokenizer) and text is opened.run.text
    assert text.source_template == "translate English to German: {source}" and text.padding_side == "right"
    assert text.max_length == 20 and open_model(RUN).text.max_length == 48  # the run's max_source_len
    encoded = text(["A dog.", "A dog runs in the park today."])
    assert encoded["input_ids"].shape == (2, 20) and encoded["attention_mask"][0].sum() == len(
        "translate English to German: A dog."[:20]
    )


def test_generation_defaults_given_to_generate_win_over_the_models():
    opened = open_model(RUN)
    ids = torch.tensor([[65, 32, 100, 111, 103, 46, 1]])
    opened.model.generation_defaults = {"num_beams": 3}
    beams = opened.model.generate(ids, max_new_tokens=6)
    assert torch.equal(beams, opened.model.generate(ids, max_new_tokens=6, num_beams=3))
    greedy = encdec.generate(opened.model, ids, max_new_tokens=6, defaults={})
    assert torch.equal(greedy, encdec.generate(opened.model, ids, max_new_tokens=6, defaults={"num_beams": 1}))


def test_an_exported_run_opens_as_a_hugging_face_directory_with_its_defaults(tmp_path):
    pytest.importorskip("transformers")
    run = open_model(RUN).run
    defaults = {"num_beams": 2, "num_return_sequences": 2, "max_new_tokens": 5}
    encdec.export_hf(run.model, run.tokenizer, tmp_path, generation=defaults)
    opened = open_model(tmp_path)
    assert opened.run is None and opened.generation == defaults == opened.model.generation_defaults
    texts = ["A man is riding a bicycle."]
    ours = run.model.generate(**dict(zip(("src_ids", "src_mask"), run.text(texts).values())), **defaults)
    hf_inputs = opened.text(["translate English to German: " + t for t in texts], return_tensors="pt")
    theirs = opened.model.generate(hf_inputs["input_ids"], hf_inputs["attention_mask"])  # the directory's defaults
    assert torch.equal(ours, theirs)


def test_weights_that_do_not_fit_are_one_sentence_naming_the_key():
    model = build_model(preset("t5-tiny", vocab_size=64))
    weights = {k: v for k, v in model.state_dict().items() if k != "head.weight"}
    weights["shared.weight"] = torch.zeros(3, 3)
    with pytest.raises(CheckpointError) as error:
        load_state(model, weights, "run x does not match its config")
    message = str(error.value)
    assert message.startswith("run x does not match its config (") and "\n" not in message
