"""scripts/multilingual_model.py, which builds the multilingual recipe's NLLB-shaped directory and TSV files:
built from a few hundred Multi30k pairs with a tiny vocabulary, the directory loads in transformers and in
encdec with the same logits, its tokenizer places NLLB's codes as NllbTokenizer does, and each TSV line pairs
line i of one language's file with line i of the other's, whitespace made single spaces."""

import gzip
import importlib.util
from pathlib import Path

import pytest
import torch

import encdec
from encdec.data.corpora import iter_tsv_pairs
from tests.conftest import SHARED_DATA

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "multilingual_model.py"
MULTI30K = SHARED_DATA / "translation" / "multi30k"
COUNTS = {"train": 300, "val": 20, "test_2016_flickr": 10}  # Multi30k's files, the first lines of each
ODD = ("Zwei\tMänner  spielen ", "Two\u00a0men\tplay")  # a tab, a double space, a no-break space: one space each


def script():
    spec = importlib.util.spec_from_file_location("multilingual_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def multi30k(name: str, count: int) -> dict[str, list[str]]:
    """The first `count` lines of Multi30k's split `name` in English and German, as the files hold them."""
    lines = {}
    for language in ("en", "de"):
        with gzip.open(MULTI30K / f"{name}.{language}.gz", "rt", encoding="utf-8") as f:
            lines[language] = [next(f).rstrip("\n") for _ in range(count)]
    return lines


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the script's --out, the Multi30k lines it read): train with ODD's pair last, validation and test."""
    root = tmp_path_factory.mktemp("multilingual")
    lines = {name: multi30k(name, count) for name, count in COUNTS.items()}
    lines["train"]["en"].append(ODD[1])
    lines["train"]["de"].append(ODD[0])
    (root / "multi30k").mkdir()
    for name, both in lines.items():
        for language, texts in both.items():
            with gzip.open(root / "multi30k" / f"{name}.{language}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(text + "\n" for text in texts))
    assert script().main(["--out", str(root / "out"), "--data", str(root / "multi30k"), "--vocab-size", "400"]) == 0
    return root / "out", lines


def test_the_directory_loads_in_transformers_and_in_encdec_with_the_same_logits(built):
    model_dir = built[0] / "model"
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, src_lang="eng_Latn", tgt_lang="deu_Latn")
    reference = transformers.AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    assert type(tokenizer).__name__ == "NllbTokenizer" and type(reference).__name__ == "M2M100ForConditionalGeneration"
    assert len(tokenizer) == reference.config.vocab_size == 400
    config = reference.config
    assert (config.d_model, config.encoder_layers, config.decoder_layers, config.encoder_ffn_dim) == (256, 4, 4, 1024)
    assert config.scale_embedding and config.tie_word_embeddings and config.decoder_start_token_id == 2
    encoded = tokenizer(
        ["A man in an orange hat.", "Two dogs play in the snow near a tree."],
        text_target=["Ein Mann.", "Zwei Hunde spielen im Schnee."],
        return_tensors="pt",
        padding=True,
    )
    labels = encoded.pop("labels")
    ours = encdec.from_pretrained(model_dir).eval()
    with torch.no_grad():
        expected = reference(**encoded, decoder_input_ids=labels).logits
        got = ours(encoded["input_ids"], labels, src_mask=encoded["attention_mask"].bool()).logits
    assert (got - expected).abs().max().item() < 1e-4


def test_the_tokenizer_places_the_language_codes_as_nllb_s(built):
    model_dir = built[0] / "model"
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, src_lang="deu_Latn", tgt_lang="eng_Latn")
    codes = tokenizer.convert_tokens_to_ids(["eng_Latn", "deu_Latn", "fra_Latn"])
    last = script().CODES + ["<mask>"]  # NLLB's order: fairseq's four, the pieces, the codes, <mask>
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<s>", "<pad>", "</s>", "<unk>"]
    assert tokenizer.convert_tokens_to_ids(last) == list(range(400 - len(last), 400))
    pieces = tokenizer("Ein Hund", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(pieces)[0].startswith("\u2581")  # NLLB's Metaspace: "▁" before a word
    assert tokenizer("Ein Hund")["input_ids"] == [codes[1], *pieces, 2]  # [deu_Latn] Ein Hund </s>
    target = tokenizer(text_target="A dog")["input_ids"]
    assert target == [codes[0], *tokenizer("A dog", add_special_tokens=False)["input_ids"], 2]  # [eng_Latn] ... </s>
    assert tokenizer.decode(target, skip_special_tokens=True) == "A dog"


def test_the_tsv_files_pair_the_lines_one_to_one(built):
    out, lines = built
    for split, name in {"train": "train", "validation": "val", "test": "test_2016_flickr"}.items():
        english = [" ".join(text.split()) for text in lines[name]["en"]]
        german = [" ".join(text.split()) for text in lines[name]["de"]]
        en_de = (out / "data" / f"{split}_en-de.tsv").read_text(encoding="utf-8").split("\n")
        de_en = (out / "data" / f"{split}_de-en.tsv").read_text(encoding="utf-8").split("\n")
        assert en_de == [f"{e}\t{d}" for e, d in zip(english, german, strict=True)] + [""]
        assert de_en == [f"{d}\t{e}" for e, d in zip(english, german, strict=True)] + [""]
        assert list(iter_tsv_pairs(out / "data" / f"{split}_en-de.tsv")) == list(zip(english, german))
    assert (
        (out / "data" / "train_en-de.tsv").read_text(encoding="utf-8").endswith("Two men play\tZwei Männer spielen\n")
    )


def test_a_data_folder_without_multi30k_s_training_files_is_one_sentence(tmp_path):
    with pytest.raises(SystemExit, match="holds no train.en.gz and train.de.gz"):
        script().main(["--out", str(tmp_path / "out"), "--data", str(tmp_path)])


@pytest.mark.parametrize(
    "flag, value",
    [("--vocab-size", "0"), ("--vocab-size", str(10**12)), ("--seed", "-1"), ("--limit", "0"), ("--limit", "x")],
)
def test_a_number_out_of_its_range_is_one_sentence_before_anything_is_read(flag, value, tmp_path):
    with pytest.raises(SystemExit, match=f"^multilingual_model.py: error: {flag} must be [^\n]*$"):
        script().main(["--out", str(tmp_path / "out"), flag, value])
    assert not (tmp_path / "out").exists()


def test_an_output_through_a_link_is_refused_and_nothing_is_written_where_it_leads(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SystemExit, match="multilingual_model.py: error: .*link"):
        script().main(["--out", str(tmp_path / "out"), "--limit", "20", "--vocab-size", "400"])
    assert list((tmp_path / "elsewhere").iterdir()) == []
