"""Fine-tuning starts from a local Hugging Face checkpoint: its architecture, weights, tokenizer and
generation defaults; `encdec.from_pretrained` and `encdec.load_tokenizer` read either kind of directory."""

import gzip
import json
from pathlib import Path

import pytest
import torch
import yaml
from model_kit import HF_BART_SHAPE, HF_T5_SHAPE

import encdec
from encdec.cli import main
from encdec.runs.load import load_run
from encdec.tokenizers.pretrained import PretrainedTokenizer
from encdec.training.metrics import read_metrics

transformers = pytest.importorskip("transformers")

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "recipes" / "dialogsum_t5_finetune.yaml"
DIALOGSUM = "summarization/dialogsum/"
SENTINELS = 8


def dialogues(shared_data: Path, n: int) -> list[str]:
    with gzip.open(shared_data / DIALOGSUM / "dialogsum.train.jsonl.gz", "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for _, line in zip(range(n), handle)]
    return [text for r in records for text in (r["dialogue"], r["summary"])]


def save_hf_tokenizer(texts: list[str], path: Path, bart: bool = False):
    """A byte-level BPE trained on DialogSum behind PreTrainedTokenizerFast, with T5's specials and EOS
    (or BART's: <s> 0, <pad> 1, </s> 2, <unk> 3, and <s> ... </s> around each text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = (
        ["<s>", "<pad>", "</s>", "<unk>"]
        if bart
        else ["<pad>", "</s>", "<unk>", *(f"<extra_id_{i}>" for i in range(SENTINELS))]
    )
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(texts, trainer=trainer)
    if bart:
        backend.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
        )
        tokenizer = transformers.PreTrainedTokenizerFast(
            tokenizer_object=backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
        )
        tokenizer.save_pretrained(path)
        return tokenizer
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])  # as T5's
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=specials[3:],
    )
    tokenizer.save_pretrained(path)
    return tokenizer


@pytest.fixture(scope="module")
def hf_t5_dir(tmp_path_factory, shared_data_dir):
    """A random-weight T5 v1.1 (gated GELU, untied head) with its tokenizer and generation config, written
    as Flan-T5 checkpoints are (transformers 5 builds T5 tied whatever the config says, so the head is set)."""
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("hf-t5-v1.1")
    tokenizer = save_hf_tokenizer(dialogues(shared_data_dir, 300), path)
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=len(tokenizer),
        **HF_T5_SHAPE,
        feed_forward_proj="gated-gelu",
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    model = transformers.T5ForConditionalGeneration(config)
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * 0.05)
    state = {k: v.clone().contiguous() for k, v in model.state_dict().items() if "embed_tokens" not in k}
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    values = {**model.config.to_dict(), "tie_word_embeddings": False}
    values.pop("scale_decoder_outputs", None)
    (path / "config.json").write_text(json.dumps(values))
    generation = {
        "decoder_start_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "num_beams": 3,
        "no_repeat_ngram_size": 2,
    }
    (path / "generation_config.json").write_text(json.dumps(generation))
    return path


@pytest.fixture(scope="module")
def hf_bart_dirs(tmp_path_factory, shared_data_dir) -> dict[str, Path]:
    """A random-weight BART and mBART with a DialogSum BPE: BART's specials, EOS as the decoder-start token."""
    dirs, texts = {}, dialogues(shared_data_dir, 300)
    for name, config_class, model_class in (
        ("bart", transformers.BartConfig, transformers.BartForConditionalGeneration),
        ("mbart", transformers.MBartConfig, transformers.MBartForConditionalGeneration),
    ):
        path = dirs[name] = tmp_path_factory.mktemp(name)
        tokenizer = save_hf_tokenizer(texts, path, bart=True)
        torch.manual_seed(0)
        config = config_class(
            vocab_size=len(tokenizer),
            **HF_BART_SHAPE,
            bos_token_id=0,
            pad_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=2,
        )
        model_class(config).save_pretrained(path)
    return dirs


@pytest.fixture(scope="module")
def shared_data_dir() -> Path:
    path = Path(__file__).resolve().parents[3] / "shared" / "data"
    if not path.is_dir():
        pytest.fail(f"the shared data folder {path} is missing; it must sit beside the repository")
    return path


def finetune(hf_dir: Path, out: Path, shared_data: Path, *extra: str) -> int:
    data = [
        f"data.train=[{shared_data / DIALOGSUM / 'dialogsum.train.jsonl.gz'}]",
        f"data.validation=[{shared_data / DIALOGSUM / 'dialogsum.dev.jsonl.gz'}]",
    ]
    overrides = [
        f"training.init_from={hf_dir}",
        "training.steps=2",
        "training.batch_size=4",
        "evaluation.steps=1",
        "data.max_documents=200",
        "objective.max_source_len=64",
        "objective.max_target_len=16",
        "training.device=cpu",
        "evaluation.generate=2",
        "evaluation.max_new_tokens=4",
        *data,
        *extra,
    ]
    return main(["train", str(RECIPE), "--out", str(out), *(a for o in overrides for a in ("--set", o))])


def test_a_run_fine_tuned_from_a_hugging_face_t5_starts_from_its_weights_tokenizer_and_defaults(
    hf_t5_dir, tmp_path, shared_data
):
    assert finetune(hf_t5_dir, tmp_path / "run", shared_data, "optimizer.lr=1e-12") == 0
    run = load_run(tmp_path / "run", "latest")
    cfg = run.model.config
    assert (cfg.d_model, cfg.activation, cfg.embeddings.tie, cfg.dropout) == (32, "gated_gelu", False, 0.1)
    reference = encdec.load_hf(hf_t5_dir).state_dict()
    for name, tensor in run.model.state_dict().items():  # lr ~0: the weights are the checkpoint's
        assert (tensor - reference[name]).abs().max() < 1e-6, name
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf_t5_dir)
    assert isinstance(run.tokenizer, PretrainedTokenizer) and run.tokenizer.vocab_size == len(hf_tokenizer)
    text = "#Person1#: Hello, how are you doing today?"
    assert run.tokenizer.encode([text], add_eos=True)[0] == hf_tokenizer(text)["input_ids"]
    assert (run.tokenizer.pad_id, run.tokenizer.eos_id, run.tokenizer.decoder_start_id) == (0, 1, 0)
    assert run.tokenizer.sentinel_ids == hf_tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(8)])
    assert run.model.generation_defaults["num_beams"] == 3  # generation_config.json carried over
    assert run.model.generation_defaults["no_repeat_ngram_size"] == 2
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"] == [1, 2]


@pytest.mark.parametrize("kind", ["t5", "bart", "mbart"])
def test_the_first_loss_of_fine_tuning_is_hugging_faces_loss_on_the_same_batch(
    kind, hf_t5_dir, hf_bart_dirs, tmp_path, shared_data
):
    """The trainer's first loss, recomputed by HF's model on the batch the objective built: the same model."""
    hf_dir = hf_t5_dir if kind == "t5" else hf_bart_dirs[kind]
    assert (
        finetune(
            hf_dir,
            tmp_path / "run",
            shared_data,
            "optimizer.lr=1e-12",
            "model.dropout=0.0",
            "training.steps=1",
            "objective.max_source_len=100",
        )
        == 0
    )
    from encdec.training.run_config import load_config
    from encdec.training.run_data import build_run_data

    run = load_run(tmp_path / "run", "latest")
    cfg = load_config(run.checkpoint.config)
    data = build_run_data(cfg, tmp_path / "run", tokenizer_dir=run.checkpoint.tokenizer)
    batch = data.train.next_batch()
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    labels = batch.labels.masked_fill(batch.labels < 0, -100)
    with torch.no_grad():
        expected = hf(
            input_ids=batch.src_ids,
            attention_mask=batch.src_mask.long(),
            decoder_input_ids=batch.tgt_ids,
            labels=labels,
        ).loss
    first = next(r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train")
    assert first["loss"] == pytest.approx(expected.item(), abs=1e-4)


def test_from_pretrained_and_load_tokenizer_read_run_and_hugging_face_directories(hf_t5_dir, tmp_path, shared_data):
    assert finetune(hf_t5_dir, tmp_path / "run", shared_data) == 0
    for path in (tmp_path / "run", hf_t5_dir):
        model, tokenizer = encdec.from_pretrained(path), encdec.load_tokenizer(path)
        assert not model.training and model.config.vocab_size == tokenizer.vocab_size
        src = torch.tensor(tokenizer.encode(["#Person1#: Hi there."], add_eos=True))
        assert torch.equal(model.generate(src, max_new_tokens=5), encdec.generate(model, src, max_new_tokens=5))
    run = load_run(tmp_path / "run")
    assert torch.equal(encdec.from_pretrained(tmp_path / "run").lm_head.weight, run.model.lm_head.weight)


def test_a_hugging_face_directory_without_tokenizer_files_is_one_sentence(hf_t5_dir, tmp_path, shared_data, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((hf_t5_dir / name).read_bytes())
    assert finetune(bare, tmp_path / "run", shared_data) == 2
    err = capsys.readouterr().err
    assert err.startswith("encdec: error: ") and "has no tokenizer files" in err and err.count("\n") == 1
    assert not (tmp_path / "run" / "checkpoints").exists()
    with pytest.raises(encdec.EncdecError, match="has no tokenizer files"):
        encdec.load_tokenizer(bare)


def test_init_from_a_directory_that_is_neither_kind_is_one_sentence(tmp_path, shared_data, capsys):
    (tmp_path / "empty").mkdir()
    assert finetune(tmp_path / "empty", tmp_path / "run", shared_data) == 2
    err = capsys.readouterr().err
    assert "neither a run directory with checkpoints nor a Hugging Face model directory" in err


def test_fine_tune_a_hugging_face_t5_export_it_and_hugging_face_reads_it_back_equal(hf_t5_dir, tmp_path, shared_data):
    """The round trip of the README: HF T5 v1.1 -> encdec fine-tuning -> encdec export -> HF, same logits and tokens."""
    assert finetune(hf_t5_dir, tmp_path / "run", shared_data, "optimizer.lr=1e-2", "training.steps=3") == 0
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "exported")]) == 0
    ours = encdec.from_pretrained(tmp_path / "run")
    assert not torch.equal(ours.lm_head.weight, encdec.load_hf(hf_t5_dir).lm_head.weight)  # it did train
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "exported").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "exported")
    texts = ["summarize: #Person1#: Hi, Mr. Smith. How are you?", "summarize: #Person2#: I need a ticket to Paris."]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    src, mask = encoded["input_ids"], encoded["attention_mask"]  # HF's 0/1 integer mask, as HF users pass it
    assert src.tolist()[0] == encdec.load_tokenizer(tmp_path / "run").encode(texts[:1], add_eos=True)[0]  # T5's EOS
    tgt = torch.tensor([[0, 5, 9, 13, 7], [0, 21, 4, 8, 30]])
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=mask).logits
    assert (got - expected).abs().max() < 1e-4
    greedy = dict(max_new_tokens=12, num_beams=1, no_repeat_ngram_size=0)  # the checkpoint defaults to 3 beams
    assert torch.equal(ours.generate(src, mask, **greedy), hf.generate(input_ids=src, attention_mask=mask, **greedy))


def test_init_from_says_what_it_decides_in_the_config_s_place_and_config_yaml_records_what_was_used(
    hf_t5_dir, tmp_path, shared_data, caplog
):
    """A preset and a tokenizer section beside training.init_from are the source's to decide (issue 58): one line
    says so, the run is the source's architecture and tokenizer, and config.yaml holds neither of the config's."""
    with caplog.at_level("WARNING"):
        code = finetune(
            hf_t5_dir, tmp_path / "run", shared_data, "model.preset=transformer-small", "tokenizer.kind=bpe"
        )
    assert code == 0
    said = [r.getMessage() for r in caplog.records if "decides in the config's place" in r.getMessage()]
    assert said == [
        f"training.init_from {hf_t5_dir} decides in the config's place: model.preset transformer-small (its "
        "architecture is the source's); tokenizer kind bpe (its own tokenizer is read)"
    ]
    run = load_run(tmp_path / "run", "latest")
    assert (run.model.config.d_model, run.model.config.activation) == (
        32,
        "gated_gelu",
    )  # the source's, not the preset's
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert "preset" not in written["model"] and written.get("tokenizer", {}).get("kind") != "bpe"


def test_a_model_key_that_reshapes_a_hugging_face_source_s_weights_is_one_sentence(
    hf_t5_dir, tmp_path, shared_data, capsys
):
    """A width beside a Hugging Face directory's init_from contradicts its weights: one sentence with both values,
    no run directory (tests/training/test_init_from_refusals.py holds the run-source cases)."""
    capsys.readouterr()
    assert finetune(hf_t5_dir, tmp_path / "run", shared_data, "model.d_ff=96") == 2
    err = capsys.readouterr().err
    assert err == (
        "encdec: error: model.d_ff 96 contradicts training.init_from's model (d_ff 48): its weights would not fit; "
        "drop the key or train from scratch\n"
    )
    assert not (tmp_path / "run").exists()
