"""Languages in a run (data.src_lang / tgt_lang): pairs encoded with the ids the family's own tokenizer gives
(NLLB's, M2M100's, mBART's, mBART-50's, cut as it cuts), the decoder started as transformers starts it;
a run fine-tuned from an NLLB-shaped directory records its languages, so `encdec generate RUN` applies them
with no flags, its export encodes and generates as transformers does with them, and a run trained in two
directions is served in both with the codes in each request."""

import gzip
import json
from pathlib import Path

import pytest
import torch
import yaml

from encdec.cli import main
from encdec.data.batch import collate_encoder_decoder
from encdec.data.objectives import PairTemplate, tokenize_pairs
from encdec.data.objectives.seq2seq import Seq2SeqObjective, pair_ends
from encdec.errors import ConfigError
from encdec.runs.load import load_run
from encdec.tokenizers.pretrained import PretrainedTokenizer
from tests.conftest import SHARED_DATA
from tests.interop import parity_kit
from tests.tokenizers.language_kit import FAMILIES

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

PAIRS = [("the cat sat on the mat", "a dog at the gate"), ("a dog", "that cat at the end of a long line of words")]
MULTI30K = Path("translation/multi30k")
CODES = ["eng_Latn", "deu_Latn", "fra_Latn"]


def shift(family: str, labels: torch.Tensor, pad: int, start: int) -> torch.Tensor:
    """transformers' decoder inputs for `labels` (B, T): mBART's wrap the last token to the front, the
    others' start from the config's decoder_start_token_id."""
    if family.startswith("mbart"):
        from transformers.models.mbart.modeling_mbart import shift_tokens_right

        return shift_tokens_right(labels, pad)
    from transformers.models.m2m_100.modeling_m2m_100 import shift_tokens_right

    return shift_tokens_right(labels, pad, start)


@pytest.mark.parametrize("cut", [None, 6])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_pair_in_languages_is_encoded_with_the_family_tokenizer_s_ids(family, cut, tmp_path):
    """Sources as the tokenizer encodes them with src_lang set, targets as its text_target with tgt_lang set
    (labels), cut to `cut` tokens as its truncation cuts them, codes and EOS kept; the decoder's inputs are
    transformers' shift of those labels."""
    make, codes = FAMILIES[family]
    hf = make(tmp_path)
    tokenizer = PretrainedTokenizer(hf, decoder_start_id=hf.eos_token_id)  # NLLB's and mBART-50's config: </s>
    src_lang, tgt_lang = codes[0], codes[1]
    sources, targets = tokenize_pairs(tokenizer, PAIRS, PairTemplate())
    lengths = {"max_source_len": cut or 64, "max_target_len": cut or 64}
    ends = pair_ends(tokenizer, src_lang, tgt_lang)
    objective = Seq2SeqObjective(sources, targets, 1, tokenizer.pad_id, tokenizer.eos_id, 0, **lengths, ends=ends)
    theirs = make(tmp_path, src_lang=src_lang, tgt_lang=tgt_lang)
    cutting = {"truncation": True, "max_length": cut} if cut else {}
    for index, (source, target) in enumerate(PAIRS):
        ours_source, ours_target = objective.example(index)
        assert ours_source.tolist() == theirs(source, **cutting)["input_ids"], (family, index)
        assert ours_target.tolist() == theirs(text_target=target, **cutting)["input_ids"], (family, index)
        batch = collate_encoder_decoder([(ours_source, ours_target)], tokenizer.pad_id, objective.decoder_start_id)
        labels = torch.tensor([ours_target.tolist()])
        assert torch.equal(batch.tgt_ids, shift(family, labels, hf.pad_token_id, hf.eos_token_id)), (family, index)


def test_languages_a_tokenizer_lacks_or_objectives_without_pairs_are_one_sentence(tmp_path):
    from encdec.data.objectives.mixture import MAX_MEMBERS
    from encdec.runs.text import MAX_DIRECTIONS

    assert MAX_DIRECTIONS >= MAX_MEMBERS  # every direction a run can train in, text.json reads back
    from encdec.runs.text import TextFormat
    from encdec.schema import read as read_schema

    text = {"source_template": "{source}", "target_template": "{target}", "mode_tokens": False}
    text |= {"padding_side": "right", "source_length": 8, "languages": [{"src_lang": "eng_Latn"}] * 65}
    with pytest.raises(ConfigError, match="languages lists 65 directions; a run trains in at most 64"):
        read_schema(TextFormat, text)
    make, _ = FAMILIES["nllb"]
    tokenizer = PretrainedTokenizer(make(tmp_path))
    with pytest.raises(ConfigError, match="data.tgt_lang 'xx_Latn' is not a language code of this tokenizer"):
        pair_ends(tokenizer, "eng_Latn", "xx_Latn")
    from encdec.tokenizers import build_tokenizer

    with pytest.raises(ConfigError, match="this run's byte tokenizer has none"):
        pair_ends(build_tokenizer("byte"), "eng_Latn", "deu_Latn")
    from encdec.schema import read
    from encdec.training.run_config import RunConfig

    with pytest.raises(ConfigError, match="objective ul2 reads texts"):
        read(RunConfig, {"data": {"src_lang": "eng_Latn"}, "objective": {"kind": "ul2"}})


def nllb_tokenizer(lines: list[str]):
    """NLLB's tokenizer over a BPE of 300 pieces trained on `lines` (as NLLB's SentencePiece BPE splits words)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    backend.train_from_iterator(
        lines, trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False)
    )
    model = json.loads(backend.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return transformers.NllbTokenizer(vocab=model["vocab"], merges=merges, additional_special_tokens=CODES)


def lines(shared_data: Path, name: str, n: int) -> list[str]:
    with gzip.open(shared_data / MULTI30K / name, "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


@pytest.fixture(scope="module")
def multi30k() -> dict[str, list[str]]:
    return {side: lines(SHARED_DATA, f"train.{side}.gz", 240) for side in ("en", "de")}


@pytest.fixture(scope="module")
def nllb_dir(tmp_path_factory, multi30k):
    """A random-weight M2M100 (NLLB's architecture) with its NLLB tokenizer: a Hugging Face directory."""
    path = tmp_path_factory.mktemp("nllb")
    tokenizer = nllb_tokenizer(multi30k["en"] + multi30k["de"])
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.M2M100Config(vocab_size=len(tokenizer), scale_embedding=True, **parity_kit.BART_SHAPE)
    transformers.M2M100ForConditionalGeneration(config).save_pretrained(path)
    return path


def write_tsv(path: Path, sources: list[str], targets: list[str]) -> Path:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in zip(sources, targets, strict=True)))
    return path


def member(name: str, train: Path, src_lang: str, tgt_lang: str) -> dict:
    return {"name": name, "data": {"format": "tsv", "train": [str(train)], "src_lang": src_lang, "tgt_lang": tgt_lang}}


def train(nllb_dir: Path, tmp_path: Path, multi30k: dict, directions: list[tuple[str, str]], steps: int = 3) -> Path:
    """A run fine-tuned from `nllb_dir` on Multi30k pairs in `directions` (en->de: eng_Latn, deu_Latn)."""
    side = {"eng_Latn": "en", "deu_Latn": "de"}
    members = []
    for src, tgt in directions:
        tsv = write_tsv(tmp_path / f"{src}-{tgt}.tsv", multi30k[side[src]], multi30k[side[tgt]])
        members.append(member(f"{side[src]}_{side[tgt]}", tsv, src, tgt))
    config = {
        "data": {"mixture": members} if len(members) > 1 else members[0]["data"] | {"val_fraction": 0.05},
        "objective": {"kind": "seq2seq", "max_source_len": 48, "max_target_len": 48},
        "training": {"init_from": str(nllb_dir), "steps": steps, "batch_size": 8, "device": "cpu"},
        "optimizer": {"lr": 1e-3},
        "evaluation": {"steps": 1, "generate": 0},
    }
    if len(members) > 1:
        for m in members:
            m["data"]["val_fraction"] = 0.05
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 0
    return tmp_path / "run"


def translated(directory: Path, texts: list[str], **generation) -> list[str]:
    """What transformers writes from a directory as its tokenizer and generation config say (no languages given)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    ids = model.generate(**tokenizer(texts, return_tensors="pt", padding=True), **generation)
    return [text.strip() for text in tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)]


def test_a_run_in_one_direction_generates_and_exports_in_its_languages_with_no_flags(
    nllb_dir, multi30k, tmp_path, capsys
):
    run = train(nllb_dir, tmp_path, multi30k, [("eng_Latn", "deu_Latn")])
    assert json.loads((load_run(run).checkpoint.text).read_text())["languages"] == [
        {"src_lang": "eng_Latn", "tgt_lang": "deu_Latn"}
    ]
    from encdec.training.run_config import load_config
    from encdec.training.run_data import build_run_data, read_items

    loaded, theirs = load_run(run), transformers.AutoTokenizer.from_pretrained(nllb_dir, tgt_lang="deu_Latn")
    cfg = load_config(loaded.checkpoint.config)
    objective, (items, _) = build_run_data(cfg, tmp_path / "again", loaded.checkpoint.tokenizer).train, read_items(cfg)
    for index, (source, target) in enumerate(items):  # the run's pairs, each as NllbTokenizer encodes it
        expected = theirs(source, text_target=target, truncation=True, max_length=48)
        assert [ids.tolist() for ids in objective.example(index)] == [expected["input_ids"], expected["labels"]]
    texts = multi30k["en"][:3]
    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(texts) + "\n")
    flags = ["-i", str(inputs), "--max-new-tokens", "8"]
    capsys.readouterr()
    assert main(["generate", str(run), *flags]) == 0
    written = capsys.readouterr().out.splitlines()
    assert main(["generate", str(run), *flags, "--src-lang", "eng_Latn", "--tgt-lang", "deu_Latn"]) == 0
    assert capsys.readouterr().out.splitlines() == written
    assert main(["export", str(run), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    exported = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    original = transformers.AutoTokenizer.from_pretrained(nllb_dir, src_lang="eng_Latn", tgt_lang="deu_Latn")
    assert exported(texts)["input_ids"] == original(texts)["input_ids"]
    assert exported(text_target=texts)["input_ids"] == original(text_target=texts)["input_ids"]
    assert translated(tmp_path / "out", texts, max_new_tokens=8) == written
    other = transformers.AutoTokenizer.from_pretrained(nllb_dir, src_lang="deu_Latn")
    assert main(["generate", str(run), *flags, "--src-lang", "deu_Latn", "--tgt-lang", "eng_Latn"]) == 0
    reversed_ = capsys.readouterr().out.splitlines()
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    ids = model.generate(
        **other(texts, return_tensors="pt", padding=True),
        forced_bos_token_id=other.convert_tokens_to_ids("eng_Latn"),
        max_new_tokens=8,
    )
    assert reversed_ == [t.strip() for t in other.batch_decode(ids[:, 1:], skip_special_tokens=True)]


def test_a_run_in_two_directions_trains_on_both_and_is_served_in_each(nllb_dir, multi30k, tmp_path, capsys, caplog):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from serving.server_kit import Served, call  # tests/serving's: a real `encdec serve` process

    run = train(nllb_dir, tmp_path, multi30k, [("eng_Latn", "deu_Latn"), ("deu_Latn", "eng_Latn")], steps=4)
    from encdec.training.run_config import load_config
    from encdec.training.run_data import build_run_data

    loaded = load_run(run, "latest")
    data = build_run_data(load_config(loaded.checkpoint.config), tmp_path / "again", loaded.checkpoint.tokenizer)
    hf = transformers.AutoTokenizer.from_pretrained(nllb_dir)
    code = dict(zip(CODES, hf.convert_tokens_to_ids(CODES), strict=True))
    for name, (src, tgt) in {"en_de": ("eng_Latn", "deu_Latn"), "de_en": ("deu_Latn", "eng_Latn")}.items():
        batch = data.member_eval[name]("train").next_batch()
        assert (batch.src_ids[:, 0] == code[src]).all() and (batch.tgt_ids[:, 0] == hf.eos_token_id).all()
        assert (batch.tgt_ids[:, 1] == code[tgt]).all()
    texts = {"en_de": multi30k["en"][0], "de_en": multi30k["de"][0]}
    languages = {"en_de": ("eng_Latn", "deu_Latn"), "de_en": ("deu_Latn", "eng_Latn")}
    alone = {}
    capsys.readouterr()
    for name, (src, tgt) in languages.items():
        (tmp_path / f"{name}.txt").write_text(texts[name] + "\n")
        flags = ["-i", str(tmp_path / f"{name}.txt"), "--max-new-tokens", "8", "--src-lang", src, "--tgt-lang", tgt]
        assert main(["generate", str(run), *flags]) == 0
        alone[name] = capsys.readouterr().out.strip()
    tsv = write_tsv(tmp_path / "test.tsv", [texts["de_en"]], [multi30k["en"][0]])
    scored = ["--data", str(tsv), "--src-lang", "deu_Latn", "--tgt-lang", "eng_Latn", "--max-new-tokens", "8"]
    assert main(["evaluate", str(run), *scored, "--num-beams", "1", "--out", str(tmp_path / "eval")]) == 0
    predictions = (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()
    assert [json.loads(line)["prediction"] for line in predictions] == [alone["de_en"]]
    capsys.readouterr()
    assert main(["generate", str(run), "-i", str(tmp_path / "en_de.txt")]) == 2
    assert capsys.readouterr().err == (
        "encdec: error: this run was trained in 2 directions (eng_Latn -> deu_Latn, deu_Latn -> eng_Latn): "
        "choose one with src_lang and tgt_lang\n"
    )
    assert main(["export", str(run), "--out", str(tmp_path / "out")]) == 0  # languages are the user's to set
    assert "the exported tokenizer keeps its own src_lang and tgt_lang" in caplog.text
    saved = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert "forced_bos_token_id" not in saved and saved["decoder_start_token_id"] == hf.eos_token_id
    server = Served(run)
    try:
        served = {}
        for name, (src, tgt) in languages.items():
            parameters = {"src_lang": src, "tgt_lang": tgt, "max_new_tokens": 8}
            status, answer, _ = call(server.url + "/generate", {"inputs": texts[name], "parameters": parameters})
            assert status == 200, answer
            served[name] = answer["generated_text"]
        refused = call(server.url + "/generate", {"inputs": texts["en_de"], "parameters": {"max_new_tokens": 8}})
    finally:
        server.stop()
    assert served == alone
    assert refused[0] == 422 and refused[1]["error"].startswith("this run was trained in 2 directions")


def test_an_mbart_run_in_languages_trains_and_scores_as_transformers_mbart(tmp_path, capsys):
    """mBART puts a target's code last and starts its decoder from it: the run's first loss and `encdec
    evaluate`'s test loss equal transformers' MBartForConditionalGeneration's loss on the tokenizer's
    labels (its own shift_tokens_right making the decoder's inputs); and `encdec generate` of the mBART directory
    with --tgt-lang starts the decoder from the code, as transformers' run_translation.py has mBART generate."""
    from tests.tokenizers.language_kit import mbart

    path = tmp_path / "mbart"
    tokenizer = mbart()
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.MBartConfig(vocab_size=len(tokenizer), dropout=0.0, **parity_kit.BART_SHAPE)
    transformers.MBartForConditionalGeneration(config).save_pretrained(path)
    words = ["the cat", "a dog", "sat at the gate", "that mat", "the end of a line"]
    pairs = [(f"{a} {b}", f"{b} {a}") for a in words for b in words]
    tsv = write_tsv(tmp_path / "pairs.tsv", [s for s, _ in pairs], [t for _, t in pairs])
    config = {
        "data": {"format": "tsv", "train": [str(tsv)], "src_lang": "en_XX", "tgt_lang": "de_DE"},
        "objective": {"kind": "seq2seq", "max_source_len": 32, "max_target_len": 32},
        "training": {"init_from": str(path), "steps": 1, "batch_size": 4, "device": "cpu"},
        "model": {"dropout": 0.0},
        "optimizer": {"lr": 1e-12},
        "evaluation": {"steps": 1, "generate": 0},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "run")]) == 0
    from encdec.training.metrics import read_metrics
    from encdec.training.run_config import load_config
    from encdec.training.run_data import build_run_data

    run = load_run(tmp_path / "run", "latest")
    batch = build_run_data(load_config(run.checkpoint.config), tmp_path / "again", run.checkpoint.tokenizer)
    batch = batch.train.next_batch()
    reference = transformers.MBartForConditionalGeneration.from_pretrained(path).eval()
    with torch.no_grad():
        labels = batch.labels.masked_fill(batch.labels < 0, -100)
        expected = reference(input_ids=batch.src_ids, attention_mask=batch.src_mask.long(), labels=labels).loss
    first = next(r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train")
    assert first["loss"] == pytest.approx(expected.item(), abs=1e-4)
    test = write_tsv(tmp_path / "test.tsv", ["the cat sat"], ["a dog at the gate"])
    assert main(["evaluate", str(tmp_path / "run"), "--data", str(test), "--out", str(tmp_path / "eval")]) == 0
    scored = json.loads((tmp_path / "eval" / "eval.json").read_text())
    theirs = mbart(src_lang="en_XX", tgt_lang="de_DE")("the cat sat", text_target="a dog at the gate")
    with torch.no_grad():
        loss = reference(**{k: torch.tensor([v]) for k, v in theirs.items()}).loss
    assert scored["scores"]["test_loss"] == pytest.approx(loss.item(), abs=1e-4)
    (tmp_path / "in.txt").write_text("the cat sat\na dog\n")
    capsys.readouterr()
    flags = ["-i", str(tmp_path / "in.txt"), "--src-lang", "en_XX", "--tgt-lang", "de_DE", "--max-new-tokens", "6"]
    assert main(["generate", str(path), *flags]) == 0  # the Hugging Face directory: run_translation.py's way
    encoded = mbart(src_lang="en_XX")(["the cat sat", "a dog"], return_tensors="pt", padding=True)
    start = tokenizer.convert_tokens_to_ids("de_DE")
    ids = reference.generate(**encoded, decoder_start_token_id=start, max_new_tokens=6)
    expected = [t.strip() for t in tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)]
    assert capsys.readouterr().out.splitlines() == expected
