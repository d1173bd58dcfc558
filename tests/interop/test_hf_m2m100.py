"""M2M100 / NLLB (model_type m2m_100): our model equals Hugging Face's on the same random weights (logits on
padded batches, greedy and beam tokens with the target language forced), exports back to the same logits,
and the language codes of an NLLB tokenizer reach generate, the command line and the server."""

import json

import pytest
import torch

import encdec
from encdec.cli import main
from encdec.errors import ConfigError, DataError
from encdec.interop import export_hf
from encdec.tokenizers.pretrained import PretrainedTokenizer
from tests.interop import parity_kit

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

LANGUAGES = ["eng_Latn", "fra_Latn", "deu_Latn"]
TEXTS = ["the cat sat on the mat", "a dog"]


def nllb_tokenizer():
    """An NLLB tokenizer of letters and a few merges, with three language codes (nothing downloaded)."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in [*"\u2581abcdefghijklmnopqrstuvwxyz", "\u2581t", "\u2581th", "\u2581the", "at"]:
        vocab.setdefault(piece, len(vocab))
    merges = [("\u2581", "t"), ("\u2581t", "h"), ("\u2581th", "e"), ("a", "t")]
    return transformers.NllbTokenizer(vocab=vocab, merges=merges, additional_special_tokens=LANGUAGES)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random-weight M2M100 (NLLB's architecture) saved with its NLLB tokenizer: a Hugging Face directory."""
    path = tmp_path_factory.mktemp("nllb")
    tokenizer = nllb_tokenizer()
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.M2M100Config(vocab_size=len(tokenizer), **parity_kit.BART_SHAPE)
    reference = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():  # HF initialises LayerNorms to 1 and 0; random values test that they are carried over
        for module in reference.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.1)
                module.bias.normal_(0, 0.1)
    reference.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reference(model_dir):
    return transformers.M2M100ForConditionalGeneration.from_pretrained(model_dir).eval()


@pytest.fixture(scope="module")
def ours(model_dir):
    return encdec.load_hf(model_dir)


def padded_batch(vocab: int, left: bool = False):
    """(src, mask): 4 rows of 30, two of them padded (on the left with `left`), pad id 1."""
    torch.manual_seed(1)
    src = torch.randint(3, vocab, (4, 30))
    mask = torch.ones(4, 30, dtype=torch.long)
    mask[1, 20:] = 0
    mask[2, 4:] = 0
    if left:
        mask = mask.flip(1)
    return src.masked_fill(mask == 0, 1), mask


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_logits_equal_hugging_face_on_a_padded_batch(reference, ours, left):
    src, mask = padded_batch(reference.config.vocab_size, left)
    tgt = torch.randint(3, reference.config.vocab_size, (4, 25))
    tgt[3, 20:] = 1  # a padded target: its pads take no position, as fairseq's
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=mask.bool()).logits
    assert (got - expected).abs().max().item() < 1e-4


def test_the_checkpoint_reads_as_fairseq_s_pre_norm_transformer(ours, reference):
    cfg = ours.config
    assert (cfg.positions.kind, cfg.positions.sinusoidal_layout, cfg.norms.position) == ("sinusoidal", "fairseq", "pre")
    assert cfg.embeddings.scale and cfg.embeddings.tie and not cfg.output.logits_bias and not cfg.embeddings.norm
    assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id) == (1, 2, 2)
    table = reference.model.encoder.embed_positions.weights  # row pad + 1 + p holds position p
    assert torch.equal(ours.encoder.positions.table, table[2 : 2 + cfg.positions.max])


@pytest.mark.parametrize(
    "options", [dict(), dict(num_beams=4, length_penalty=0.8, num_return_sequences=2)], ids=["greedy", "beam"]
)
def test_generate_with_the_target_language_forced_equals_hugging_face(model_dir, reference, ours, options):
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, src_lang="eng_Latn")
    encoded = tokenizer(TEXTS, return_tensors="pt", padding=True)
    french = tokenizer.convert_tokens_to_ids("fra_Latn")
    options = dict(options, max_new_tokens=12)
    expected = reference.generate(**encoded, forced_bos_token_id=french, **options)
    got = encdec.generate(ours, encoded["input_ids"], encoded["attention_mask"], forced_bos_token_id=french, **options)
    assert torch.equal(got, expected) and (got[:, 1] == french).all()
    named = encdec.generate(
        ours, encoded["input_ids"], encoded["attention_mask"], tokenizer=tokenizer, src_lang="eng_Latn",
        tgt_lang="fra_Latn", **options,
    )  # fmt: skip
    assert torch.equal(named, expected)


def test_language_codes_a_tokenizer_lacks_are_one_sentence(model_dir, ours):
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)  # eng_Latn by default
    encoded = tokenizer(TEXTS, return_tensors="pt", padding=True)
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    with pytest.raises(ConfigError, match="tgt_lang 'fra_Latm' is not a language code of this tokenizer; did you"):
        encdec.generate(ours, ids, mask, tokenizer=tokenizer, tgt_lang="fra_Latm")
    with pytest.raises(ConfigError, match="tgt_lang needs a multilingual tokenizer with language codes"):
        encdec.generate(ours, ids, mask, tgt_lang="fra_Latn")
    with pytest.raises(DataError, match="input row 0 does not hold src_lang deu_Latn's token"):
        encdec.generate(ours, ids, mask, tokenizer=tokenizer, src_lang="deu_Latn")
    with pytest.raises(ConfigError, match="tgt_lang must be a language code"):
        encdec.generate(ours, ids, mask, tokenizer=tokenizer, tgt_lang="fra Latn")


def test_an_export_reloads_in_transformers_with_the_same_logits_and_language_codes(
    model_dir, reference, ours, tmp_path
):
    tokenizer = PretrainedTokenizer.from_directory(model_dir)
    assert export_hf(ours, tokenizer, tmp_path / "out") == "M2M100ForConditionalGeneration"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "m2m_100"
    reloaded = transformers.M2M100ForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    src, mask = padded_batch(reference.config.vocab_size)
    tgt = torch.randint(3, reference.config.vocab_size, (4, 25))
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        got = reloaded(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert (got - expected).abs().max().item() < 1e-5
    exported = transformers.AutoTokenizer.from_pretrained(tmp_path / "out", src_lang="deu_Latn")
    original = transformers.AutoTokenizer.from_pretrained(model_dir, src_lang="deu_Latn")
    assert exported(TEXTS)["input_ids"] == original(TEXTS)["input_ids"]


def translated(model_dir, source: str, target: str, **options) -> list[str]:
    """What transformers' NLLB recipe writes: the tokenizer's src_lang, the target's code forced first."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, src_lang=source)
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(model_dir).eval()
    encoded = tokenizer(TEXTS, return_tensors="pt", padding=True)
    forced = tokenizer.convert_tokens_to_ids(target)
    ids = model.generate(**encoded, forced_bos_token_id=forced, **options)
    return [text.strip() for text in tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)]


def test_the_command_line_translates_with_language_flags_and_exports(model_dir, tmp_path, capsys):
    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(TEXTS) + "\n")
    flags = ["-i", str(inputs), "--src-lang", "fra_Latn", "--tgt-lang", "deu_Latn", "--max-new-tokens", "8"]
    beams = ["--num-beams", "4"]
    assert main(["generate", str(model_dir), *flags, *beams]) == 0
    written = capsys.readouterr().out.splitlines()
    assert written == translated(model_dir, "fra_Latn", "deu_Latn", max_new_tokens=8, num_beams=4)
    assert main(["export", str(model_dir), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "out"), *flags, *beams]) == 0
    assert capsys.readouterr().out.splitlines() == written
    assert main(["generate", str(model_dir), *flags, "--tgt-lang", "xx_Latn"]) == 2
    error = capsys.readouterr().err
    assert (
        error == "encdec: error: tgt_lang 'xx_Latn' is not a language code of this tokenizer; did you mean fra_Latn?\n"
    )


def test_a_served_request_in_two_languages_equals_generate_alone(model_dir, tmp_path, capsys):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from serving.server_kit import Served, call  # tests/serving's: a real `encdec serve` process

    parameters = {"src_lang": "fra_Latn", "tgt_lang": "deu_Latn", "max_new_tokens": 8}
    server = Served(model_dir)
    try:
        status, answer, _ = call(server.url + "/generate", {"inputs": TEXTS[0], "parameters": parameters})
        refused = call(server.url + "/generate", {"inputs": TEXTS[0], "parameters": {"src_lang": "xx_Latn"}})
    finally:
        server.stop()
    assert (
        status == 200 and answer["generated_text"] == translated(model_dir, "fra_Latn", "deu_Latn", max_new_tokens=8)[0]
    )
    assert refused[0] == 422 and refused[1]["error"].startswith("src_lang 'xx_Latn' is not a language code")


NLLB_600M = {  # facebook/nllb-200-distilled-600M's config.json, as published
    "activation_dropout": 0.0,
    "activation_function": "relu",
    "architectures": ["M2M100ForConditionalGeneration"],
    "attention_dropout": 0.1,
    "bos_token_id": 0,
    "d_model": 1024,
    "decoder_attention_heads": 16,
    "decoder_ffn_dim": 4096,
    "decoder_layerdrop": 0,
    "decoder_layers": 12,
    "decoder_start_token_id": 2,
    "dropout": 0.1,
    "encoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "encoder_layerdrop": 0,
    "encoder_layers": 12,
    "eos_token_id": 2,
    "init_std": 0.02,
    "is_encoder_decoder": True,
    "max_length": 200,
    "max_position_embeddings": 1024,
    "model_type": "m2m_100",
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "scale_embedding": True,
    "tokenizer_class": "NllbTokenizer",
    "torch_dtype": "float32",
    "transformers_version": "4.21.0.dev0",
    "use_cache": True,
    "vocab_size": 256206,
}


def test_size_of_nllb_600m_s_config_json_is_transformers_parameter_count(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(NLLB_600M))
    assert main(["size", str(tmp_path / "config.json")]) == 0
    printed = capsys.readouterr().out
    keys = {k: v for k, v in NLLB_600M.items() if k not in ("architectures", "model_type", "transformers_version")}
    with torch.device("meta"):
        built = transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**keys))
    expected = sum(p.numel() for p in built.parameters())
    assert f"parameters:                    {expected:,}\n" in printed and expected == 615_073_792
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "m2m_100", "vocab_size": 99}))
    assert main(["size", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"encdec: error: {tmp_path / 'config.json'} does not describe a m2m_100 model (the key 'encoder_attention_heads')\n"
    )


def test_m2m100_s_own_tokenizer_takes_its_short_codes(shared_data, tmp_path, capsys):
    """facebook/m2m100's layout: M2M100Tokenizer (vocab.json and a SentencePiece model, here the shared one), whose
    codes `en`, `fr` are written __en__, __fr__."""
    import sentencepiece

    model_file = shared_data / "tokenizers/mistral_tokenizer.model.v1"
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}  # fairseq's dictionary: its specials, then the pieces
    for piece in map(pieces.id_to_piece, range(pieces.get_piece_size())):
        vocab.setdefault(piece, len(vocab))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "sentencepiece.bpe.model").write_bytes(model_file.read_bytes())
    tokenizer = transformers.M2M100Tokenizer(tmp_path / "vocab.json", tmp_path / "sentencepiece.bpe.model")
    tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(0)
    config = transformers.M2M100Config(
        vocab_size=32128,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
    )
    transformers.M2M100ForConditionalGeneration(config).save_pretrained(tmp_path)
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    assert (
        main(["generate", str(tmp_path), "-i", str(tmp_path / "in.txt"), "--src-lang", "de", "--tgt-lang", "fr"]) == 0
    )
    assert capsys.readouterr().out.splitlines() == translated(tmp_path, "de", "__fr__", max_new_tokens=20)


def test_concurrent_requests_in_different_languages_run_in_one_batch(model_dir):
    """Requests checked as the server checks them (each input encoded in its src_lang, its tgt_lang forced) and
    run at once: their rows share the scheduler's steps, as many steps as one request's alone, not one batch a
    language; and each answer is what generate gives that request alone."""
    import json
    from functools import partial

    from encdec.runs.open import open_model
    from encdec.serving.requests import Limits
    from encdec.serving.scheduler import Scheduler
    from encdec.serving.validate import check_request
    from tests.interop.serving_kit import run_together

    opened = open_model(model_dir)
    pairs = [("fra_Latn", "deu_Latn"), ("deu_Latn", "fra_Latn"), ("eng_Latn", "deu_Latn"), ("fra_Latn", "eng_Latn")]
    scheduler = Scheduler(opened.model, max_rows=16)
    requests = []
    for i, (source, target) in enumerate(pairs):
        parameters = {"src_lang": source, "tgt_lang": target, "max_new_tokens": 6, "min_new_tokens": 6}
        body = json.dumps({"inputs": TEXTS[i % 2], "parameters": parameters}).encode()
        requests.append(check_request(body, Limits(), opened.text, opened.generation, scheduler).inputs[0])
    alone = [
        encdec.generate(opened.model, one.encoded["input_ids"], one.encoded["attention_mask"], **one.options)
        for one in requests
    ]
    calls = [
        partial(scheduler.run, one.encoded["input_ids"], one.encoded["attention_mask"], dict(one.options))
        for one in requests
    ]
    try:  # every request waits before any starts, however loaded the machine
        served = run_together(scheduler, calls)
    finally:
        scheduler.stop(timeout=30)
    assert all(torch.equal(s, a) for s, a in zip(served, alone, strict=True))
    assert len({tuple(one.encoded["input_ids"][0, :1].tolist()) for one in requests}) == 3  # three source codes
    assert scheduler.steps == 6, scheduler.steps  # one batch of every language: six steps, not six a language


def test_evaluate_scores_in_the_languages_given_as_transformers_encodes_them(model_dir, tmp_path, capsys):
    """`encdec evaluate --src-lang --tgt-lang`: inputs encoded in the source language and references in the
    target's (as the tokenizer's text_target with tgt_lang set), so the loss is transformers' on those labels,
    and each prediction is what transformers' recipe writes; an unknown code is one sentence."""
    references = ["der hund", "ein hut"]
    (tmp_path / "test.tsv").write_text("".join(f"{s}\t{r}\n" for s, r in zip(TEXTS, references)))
    flags = ["--src-lang", "fra_Latn", "--tgt-lang", "deu_Latn", "--max-new-tokens", "8"]
    argv = ["evaluate", str(model_dir), "--data", str(tmp_path / "test.tsv"), "--out", str(tmp_path / "out")]
    assert main([*argv, *flags]) == 0
    capsys.readouterr()
    scores = json.loads((tmp_path / "out" / "eval.json").read_text())["scores"]
    records = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in records] == translated(model_dir, "fra_Latn", "deu_Latn", max_new_tokens=8)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, src_lang="fra_Latn", tgt_lang="deu_Latn")
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(model_dir).eval()
    encoded = tokenizer(TEXTS, text_target=references, return_tensors="pt", padding=True)
    labels = encoded.pop("labels")
    labels = labels.masked_fill(labels == tokenizer.pad_token_id, -100)  # padding is no reference token
    with torch.no_grad():
        logits = model(**encoded, labels=labels).logits
    total = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
    assert scores["test_loss"] == pytest.approx(float(total) / int((labels != -100).sum()), abs=1e-5)
    assert main([*argv, "--src-lang", "xx_Latn"]) == 2
    assert "src_lang 'xx_Latn' is not a language code of this tokenizer" in capsys.readouterr().err


def test_the_text_generator_writes_what_transformers_writes_with_languages_and_stop_strings(model_dir, ours):
    """TextGenerator, what generate, evaluate and the server share: texts in a source language, the target's
    code forced, stop strings read by the tokenizer it hands generate; equal to transformers' recipe with the
    same options, and the tokenizer's own language untouched."""
    from encdec.generation.text_generator import TextGenerator

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    generator = TextGenerator(tokenizer)
    options = dict(max_new_tokens=10, stop_strings=["mj"])  # both end at their first "mj", before ten tokens
    got = generator(ours, TEXTS, src_lang="fra_Latn", tgt_lang="deu_Latn", **options)
    theirs = transformers.AutoTokenizer.from_pretrained(model_dir, src_lang="fra_Latn")
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(model_dir).eval()
    encoded = theirs(TEXTS, return_tensors="pt", padding=True)
    forced = theirs.convert_tokens_to_ids("deu_Latn")
    ids = model.generate(**encoded, forced_bos_token_id=forced, tokenizer=theirs, **options)
    assert got == [text.strip() for text in theirs.batch_decode(ids[:, 1:], skip_special_tokens=True)]
    assert tokenizer.src_lang == "eng_Latn"
