"""One rule per value, wherever it is read, and refusals that name the part that is wrong (issue 56):

- a weight stored in a dtype no weight is stored in (an int32 head) is refused in every family, a Hugging Face
  directory's as an encdec checkpoint's, never cast into a model that then generates nothing;
- a token id is checked against the vocabulary as ModelConfig and GenerationConfig declare it, whether
  config.json, generation_config.json, a run's generation.json, a model section or a generate call gives it;
  an expert count as ModelConfig declares it (a Switch checkpoint of one expert is the dense model it computes);
- config.json is read and checked, each refusal naming its key, before the tokenizer is opened; a missing
  section is said to be missing;
- --checkpoint picks one of a run's checkpoints: a Hugging Face or checkpoint directory has none, so there it is
  refused, not ignored.

The checkpoints are tiny models of each family's layout (test_families.LAYOUTS) exported with the byte tokenizer's
360 tokens: no download, no transformers but for the one-expert Switch comparison.
"""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import encdec
from encdec.cli import main
from encdec.errors import CheckpointError, ConfigError
from encdec.interop import export_hf, load_hf
from encdec.interop.families import FAMILIES
from encdec.runs.description import describe, write_description
from encdec.runs.open import open_model
from encdec.runs.run_dir import CheckpointDir
from encdec.tokenizers import build_tokenizer, load_tokenizer
from tests.interop.test_families import tiny

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

BYTE = build_tokenizer("byte")
VOCAB = BYTE.vocab_size  # 360
FIXTURE_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_2ba69c1" / "run"  # a byte-level T5 run


def exported(model_type: str, path: Path) -> Path:
    """A tiny model of `model_type`'s layout written as its Hugging Face directory, tokenizer included."""
    export_hf(tiny(model_type, BYTE), BYTE, path)
    return path


def edit_json(file: Path, change) -> None:
    values = json.loads(file.read_text()) if file.exists() else {}
    change(values)
    file.write_text(json.dumps(values))


def retype(file: Path, dtype: torch.dtype, names=None) -> None:
    """The safetensors `file` with the tensors `names` (all where None) stored as `dtype`, its metadata kept."""
    with safe_open(str(file), "pt") as f:
        metadata = f.metadata()
    weights = load_file(file)
    save_file({k: t.to(dtype) if names is None or k in names else t for k, t in weights.items()}, file, metadata)


def refusal(argv: list[str], capsys) -> str:
    """The one stderr line a command refused in: exit code 2, no traceback."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("encdec: error: "), err
    return lines[0]


def inputs(tmp_path: Path) -> Path:
    (tmp_path / "in.txt").write_text("A dog runs.\n")
    return tmp_path / "in.txt"


# --- 1. weights of a dtype no weight is stored in ---


@pytest.mark.parametrize("model_type", FAMILIES)
def test_integer_weights_are_refused_in_every_family_not_cast(model_type, tmp_path):
    path = exported(model_type, tmp_path / "hf")
    retype(path / "model.safetensors", torch.int32)
    with pytest.raises(CheckpointError, match=r"holds torch\.int32 values, where a weight is stored as one of float32"):
        load_hf(path)


def test_an_int32_head_in_a_llama_folder_is_one_sentence_naming_it(tmp_path, capsys):
    path = exported("llama", tmp_path / "llama")
    retype(path / "model.safetensors", torch.int32, {"lm_head.weight"})
    line = refusal(["generate", str(path), "-i", str(inputs(tmp_path))], capsys)
    assert "lm_head.weight holds torch.int32 values" in line


def test_an_encdec_checkpoint_s_integer_weights_are_refused_in_the_same_words(tmp_path):
    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    for weights in run.glob("checkpoints/step_*/model.safetensors"):
        retype(weights, torch.int32)
    with pytest.raises(CheckpointError, match=r"holds torch\.int32 values, where a weight is stored as one of float32"):
        open_model(run)


# --- 2. one rule per value: token ids against the vocabulary, expert counts ---


@pytest.mark.parametrize(
    "value, says",
    [(1_000_000, f"must be below vocab_size ({VOCAB}), got 1,000,000"), (-1, "must be zero or more, got -1")],
    ids=["past the vocabulary", "negative"],
)
@pytest.mark.parametrize("field, key", [("eoi_token_id", "eoi_token_index"), ("image_token_id", "image_token_index")])
def test_t5gemma2_s_special_ids_follow_every_token_id_s_rule(field, key, value, says, tmp_path):
    path = exported("t5gemma2", tmp_path / "hf")

    def change(config):
        config[key] = config["encoder"][key] = value  # transformers reads the end-of-image id from the encoder

    edit_json(path / "config.json", change)
    with pytest.raises(CheckpointError) as refused:
        load_hf(path)
    assert f"model.image_tokens.{field} {says} (config.json's {key})" in str(refused.value)
    with pytest.raises(ConfigError) as refused:  # the same words from a model section
        encdec.ModelConfig(vocab_size=VOCAB, image_tokens={field: value})
    assert str(refused.value) == f"model.image_tokens.{field} {says}"


def test_t5gemma2_s_default_ids_past_a_small_vocabulary_are_no_token(tmp_path):
    """A config.json that gives no end-of-image or image id takes transformers' defaults (256,000 and 256,001)
    where the vocabulary holds them; a vocabulary of 360 holds neither, so no token is one."""
    path = exported("t5gemma2", tmp_path / "hf")

    def change(config):
        for values in (config, config["encoder"]):
            values.pop("eoi_token_index", None)
            values.pop("image_token_index", None)

    edit_json(path / "config.json", change)
    cfg = load_hf(path).config
    assert cfg.image_tokens == encdec.models.ImageTokens()


def test_an_eos_id_past_the_vocabulary_is_refused_alike_in_config_json_and_generation_config_json(tmp_path):
    path = exported("t5", tmp_path / "hf")
    config = json.loads((path / "config.json").read_text())
    edit_json(path / "config.json", lambda c: c.update(eos_token_id=999))
    with pytest.raises(CheckpointError, match=rf"config\.json: model\.eos_id must be below vocab_size \({VOCAB}\)"):
        load_hf(path)
    edit_json(path / "config.json", lambda c: c.update(eos_token_id=config["eos_token_id"]))
    edit_json(path / "generation_config.json", lambda c: c.update(eos_token_id=list(range(VOCAB, VOCAB + 10_000))))
    with pytest.raises(CheckpointError) as refused:
        load_hf(path)
    assert f"generation_config.json: eos_token_id[0] must be below vocab_size ({VOCAB:,}), got {VOCAB}" in str(
        refused.value
    )


@pytest.mark.parametrize(
    "values, key",
    [
        ({"forced_bos_token_id": 999}, "forced_bos_token_id"),
        ({"forced_eos_token_id": 999}, "forced_eos_token_id"),
        ({"bad_words_ids": [[5, 999]]}, "bad_words_ids[0][1]"),
        ({"eos_token_id": [5, 999]}, "eos_token_id[1]"),
    ],
)
def test_every_generation_id_past_the_vocabulary_is_refused_naming_the_file_it_is_in(values, key, tmp_path):
    path = exported("t5", tmp_path / "hf")
    edit_json(path / "generation_config.json", lambda c: c.update(values))
    with pytest.raises(CheckpointError, match=rf"generation_config\.json: {re.escape(key)} must be below vocab_size"):
        load_hf(path)
    (path / "generation_config.json").unlink()  # in config.json, it is config.json's to say
    edit_json(path / "config.json", lambda c: c.update(values))
    with pytest.raises(CheckpointError, match=rf"hf/config\.json: {re.escape(key)} must be below vocab_size"):
        load_hf(path)


def test_a_run_s_generation_defaults_and_a_generate_call_take_the_same_rule(tmp_path):
    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    for checkpoint in run.glob("checkpoints/step_*"):
        (checkpoint / "generation.json").write_text(json.dumps({"forced_bos_token_id": 10**6}))
    with pytest.raises(CheckpointError, match="forced_bos_token_id must be below vocab_size"):
        open_model(run)
    model = load_hf(exported("t5", tmp_path / "hf"))
    for option in ({"forced_eos_token_id": VOCAB}, {"suppress_tokens": [3, VOCAB]}, {"bad_words_ids": [[VOCAB]]}):
        with pytest.raises(ConfigError, match=f"must be below vocab_size \\({VOCAB}\\), got {VOCAB}"):
            encdec.generate(model, torch.tensor([[5, 6, 1]]), **option)


def test_an_expert_count_is_read_by_one_rule_from_config_json_and_a_model_section(tmp_path, capsys):
    path = exported("switch_transformers", tmp_path / "hf")
    edit_json(path / "config.json", lambda c: c.update(num_experts=0))
    with pytest.raises(CheckpointError) as refused:
        load_hf(path)
    assert "model.experts.count must be a positive integer, got 0 (config.json's num_experts)" in str(refused.value)
    with pytest.raises(ConfigError, match="model.experts.count must be a positive integer, got 0"):
        encdec.ModelConfig(experts={"count": 0})


def test_a_switch_checkpoint_of_one_expert_is_the_dense_model_it_computes(tmp_path):
    """transformers' SwitchTransformers with one expert weighs it by a softmax over one router logit, 1: the dense
    T5 whose feed-forward is that expert, which encdec reads it as (experts.count 1, as a model section's) and exports
    as T5."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.SwitchTransformersConfig(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=4, num_experts=1
    )
    config.num_sparse_encoder_layers = config.num_sparse_decoder_layers = 2  # every layer sparse
    reference = transformers.SwitchTransformersForConditionalGeneration(config).eval()
    reference.save_pretrained(tmp_path / "switch")
    ours = load_hf(tmp_path / "switch")
    assert ours.config.experts.count == 1
    src, tgt = torch.tensor([[5, 6, 7, 1], [8, 9, 1, 0]]), torch.tensor([[0, 9, 8], [0, 4, 3]])
    mask = src != 0
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours(src, tgt, src_mask=mask).logits, expected, atol=1e-4, rtol=1e-4)


# --- 3. config.json read and checked before the tokenizer, refusals naming the part ---


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_a_config_json_dtype_that_names_no_dtype_is_refused_naming_it_not_the_tokenizer(key, tmp_path, capsys):
    path = exported("t5", tmp_path / "hf")
    edit_json(path / "config.json", lambda c: c.update({key: [1, 2]}))
    line = refusal(["generate", str(path), "-i", str(inputs(tmp_path))], capsys)
    assert f"config.json: {key} must be one of float32, bfloat16, float16, float64, got [1, 2]" in line
    assert "tokenizer" not in line


def test_m2m100_s_scale_embedding_of_text_is_refused_naming_its_key(tmp_path, capsys):
    path = exported("m2m_100", tmp_path / "hf")
    edit_json(path / "config.json", lambda c: c.update(scale_embedding="yes"))
    line = refusal(["generate", str(path), "-i", str(inputs(tmp_path))], capsys)
    assert "model.embeddings.scale must be true or false, got 'yes' (config.json's scale_embedding)" in line


@pytest.mark.parametrize(
    "model_type, remove, says",
    [
        ("t5gemma", ("encoder",), "config.json has no encoder section"),
        ("t5gemma", ("decoder",), "config.json has no decoder section"),
        ("t5gemma2", ("encoder",), "config.json has no encoder section"),
        ("t5gemma2", ("encoder", "text_config"), "config.json's encoder section has no text_config section"),
        ("t5gemma2", ("decoder",), "config.json has no decoder section"),
    ],
)
def test_a_missing_section_is_named_missing_not_read_as_another_model_s_sizes(
    model_type, remove, says, tmp_path, capsys
):
    path = exported(model_type, tmp_path / "hf")

    def change(config):
        for key in remove[:-1]:
            config = config[key]
        del config[remove[-1]]

    edit_json(path / "config.json", change)
    line = refusal(["generate", str(path), "-i", str(inputs(tmp_path))], capsys)
    assert says in line and "vocab" not in line


def test_a_run_s_model_json_is_checked_before_its_tokenizer_is_opened(tmp_path):
    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    for step in run.glob("checkpoints/step_*"):
        checkpoint = CheckpointDir(step)
        write_description(checkpoint, describe(checkpoint, load_tokenizer(checkpoint.tokenizer)))  # as runs write now
        edit_json(checkpoint.model_config, lambda c: c.update(pad_id=10**6))
        for file in checkpoint.tokenizer.iterdir():
            file.write_text("not a tokenizer")
    with pytest.raises(CheckpointError, match="model.pad_id must be below vocab_size"):
        open_model(run)


# --- 4. --checkpoint where there are no checkpoints to choose ---


def commands(model: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Each command that opens a model, on `model`, as far as its other arguments go."""
    data = tmp_path / "test.tsv"
    data.write_text("a dog\tun chien\n")
    return {
        "generate": ["generate", str(model), "-i", str(inputs(tmp_path))],
        "evaluate": ["evaluate", str(model), "--data", str(data), "--out", str(tmp_path / "report")],
        "attention": ["attention", str(model), "--source", "a dog", "-o", str(tmp_path / "maps.png")],
        "export": ["export", str(model), "--out", str(tmp_path / "exported")],
    }


@pytest.mark.parametrize("command", ["generate", "evaluate", "attention", "export"])
@pytest.mark.parametrize("kind", ["hf", "checkpoint"])
def test_checkpoint_is_refused_where_there_are_no_checkpoints_to_choose(command, kind, tmp_path, capsys):
    if kind == "hf":
        model, what = exported("t5", tmp_path / "hf"), "is a Hugging Face model directory"
    else:
        model, what = shutil.copytree(FIXTURE_RUN / "checkpoints" / "step_00000030", tmp_path / "one"), "not a run"
    argv = commands(model, tmp_path)[command]
    line = refusal([*argv, "--checkpoint", "latest"], capsys)
    assert what in line and "it holds no checkpoint 'latest'; --checkpoint picks one of a run's checkpoints" in line
    assert not (tmp_path / "report").exists() and not (tmp_path / "exported").exists()


def test_average_refuses_checkpoint_without_ema(tmp_path, capsys):
    run = shutil.copytree(FIXTURE_RUN, tmp_path / "run")
    line = refusal(["average", str(run), "--last", "2", "--checkpoint", "latest"], capsys)
    assert "--checkpoint names the checkpoint whose EMA --ema writes" in line
