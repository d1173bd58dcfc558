"""The format table (encdec.data.formats) is what the run config, `encdec evaluate --data` and `encdec data
prepare` read: every format in it is taken by all three with its options, to the same items, and an option a
format does not take is one sentence naming the format on each."""

import json
from pathlib import Path

import pytest

from encdec.cli import build_parser, main
from encdec.cli.evaluate import read_data
from encdec.data.formats import FILE_FORMATS, FORMATS, OPTION_NAMES, TEXT_FILE_FORMATS, ReaderOptions
from encdec.data.shards import read_shards
from encdec.errors import ConfigError
from encdec.schema import read
from encdec.training.run_config import RunConfig
from encdec.training.run_data import read_items

README = Path(__file__).resolve().parents[2] / "README.md"
STORIES = ["the cat sat on the mat.", "a dog ran to the park.", "the sun was warm all day."]
RECORDS = "<|endoftext|>\n".join(f"Summary: {s.split()[1]} story.\nStory: {s}\n" for s in STORIES)
JSON_PAIRS = [{"src": [s, "again"], "tgt": [s.upper(), s.title()]} for s in STORIES]

# format -> (the files' texts, the options given: every option it takes, none at its default)
SAMPLES = {
    "tinystories": (["<|endoftext|>\n".join(STORIES)], {}),
    "text": (["\n\n".join(STORIES)], {}),
    "jsonl": (["".join(json.dumps({"body": s}) + "\n" for s in STORIES)], {"text_field": "body"}),
    "instruct-text": ([RECORDS], {}),
    "instruct-records": ([RECORDS], {}),
    "instruct": ([RECORDS], {}),
    "jsonl-pairs": (
        ["".join(json.dumps(r) + "\n" for r in JSON_PAIRS)],
        {"source_field": "src", "target_field": "tgt", "source_list": "join", "target_list": "each"}
        | {"list_separator": " / "},
    ),
    "tsv": (["source\ttarget\n" + "".join(f"{s}\t{s.upper()}\n" for s in STORIES)], {"header": True}),
    "parallel": (["\n".join(STORIES) + "\n", "\n".join(s.upper() for s in STORIES) + "\n"], {}),
    "speech-jsonl": (
        ["".join(json.dumps({"wav": f"clips/{i}.wav", "sentence": s}) + "\n" for i, s in enumerate(STORIES))],
        {"audio_field": "wav", "text_field": "sentence"},
    ),
    "speech-tsv": (
        ["path\ttext\n" + "".join(f"clips/{i}.flac\t{s}\n" for i, s in enumerate(STORIES))],
        {"header": True},
    ),
}
NOT_DEFAULT = {  # a value other than ReaderOptions' default for each option (one a config can be seen to set)
    "text_field": "body",
    "source_field": "src",
    "target_field": "tgt",
    "source_list": "first",
    "target_list": "each",
    "list_separator": " / ",
    "audio_field": "wav",
    "header": True,
}


def sample_files(fmt: str, root: Path) -> list[Path]:
    paths = []
    for i, text in enumerate(SAMPLES[fmt][0]):
        path = root / f"{fmt}.{i}"
        path.write_text(text)
        paths.append(path)
    return paths


def flags(options: dict) -> list[str]:
    switches = ["--" + name.replace("_", "-") for name, value in options.items() if value is True]
    given = {name: value for name, value in options.items() if not isinstance(value, bool)}
    return switches + [part for name, value in given.items() for part in ("--" + name.replace("_", "-"), value)]


def run_config(fmt: str, paths: list[Path], options: dict) -> RunConfig:
    data = {"format": fmt, "train": [str(p) for p in paths], "validation": [str(p) for p in paths], **options}
    objective = {"kind": "transcribe" if FORMATS[fmt].audio else "seq2seq" if FORMATS[fmt].pairs else "ul2"}
    return read(RunConfig, {"data": data, "objective": objective})


def evaluate_items(fmt: str, paths: list[Path], options: dict, root: Path) -> list:
    (root / "hf").mkdir(exist_ok=True)
    argv = ["evaluate", str(root / "hf"), "--data", *map(str, paths), "--format", fmt, *flags(options)]
    test = read_data(build_parser().parse_args(argv), root / "hf", "hf")
    return test.pairs if FORMATS[fmt].pairs else test.documents


def prepare(fmt: str, paths: list[Path], options: dict, out: Path) -> list[str]:
    return ["data", "prepare", *map(str, paths), "--format", fmt, "--out", str(out), "--tokenizer", "byte"] + [
        "--workers",
        "1",
        *flags(options),
    ]


def test_every_file_format_has_a_sample_here_and_a_row_in_the_readme():
    assert set(SAMPLES) == set(FILE_FORMATS)
    rows = {line.split("|")[1].strip().strip("`") for line in README.read_text().splitlines() if line.startswith("| `")}
    assert set(FILE_FORMATS) <= rows


def test_each_format_takes_only_options_reader_options_declares():
    for entry in FORMATS.values():
        assert set(entry.options) <= set(OPTION_NAMES), entry.name
    assert set(NOT_DEFAULT) == set(OPTION_NAMES)
    assert all(NOT_DEFAULT[name] != getattr(ReaderOptions(), name) for name in OPTION_NAMES)


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_every_format_is_read_alike_by_the_config_evaluate_and_data_prepare(fmt, tmp_path, capsys):
    paths = sample_files(fmt, tmp_path)
    options = SAMPLES[fmt][1]
    assert set(options) == set(FORMATS[fmt].options)  # every option it takes, given
    train, _ = read_items(run_config(fmt, paths, options))
    assert train and all(isinstance(item, tuple) == FORMATS[fmt].pairs for item in train)
    assert evaluate_items(fmt, paths, options, tmp_path) == train
    if fmt not in TEXT_FILE_FORMATS:  # recordings and their transcripts: no token shards to prepare of them
        assert main(prepare(fmt, paths, options, tmp_path / "shards")) == 2
        assert f"invalid choice: '{fmt}'" in capsys.readouterr().err
        return
    assert main(prepare(fmt, paths, options, tmp_path / "shards")) == 0, capsys.readouterr().err
    counts = read_shards(tmp_path / "shards").manifest["splits"]["train"]
    assert {c["documents"] for c in counts.values()} == {len(train)}


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_an_option_a_format_does_not_take_is_one_sentence_naming_it_on_every_surface(fmt, tmp_path, capsys):
    paths = sample_files(fmt, tmp_path)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "t5"}')
    refused = [name for name in OPTION_NAMES if name not in FORMATS[fmt].options]
    assert refused
    for name in refused:
        given = {name: NOT_DEFAULT[name]}
        with pytest.raises(ConfigError) as error:
            run_config(fmt, paths, given)
        assert str(error.value).startswith(f"data.{name} applies to data.format ")
        assert str(error.value).endswith(f", not {fmt}")
        flag = "--" + name.replace("_", "-")
        evaluate = ["evaluate", str(tmp_path / "hf"), "--data", *map(str, paths), "--format", fmt]
        surfaces = [evaluate + ["--out", str(tmp_path / "report"), *flags(given)]]
        if fmt in TEXT_FILE_FORMATS:
            surfaces.append(prepare(fmt, paths, given, tmp_path / "shards"))
        for argv in surfaces:
            assert main(argv) == 2
            err = capsys.readouterr().err.splitlines()
            assert err == [f"encdec: error: {flag} applies to --format {taker_list(name)}, not {fmt}"], argv[:2]
    assert not (tmp_path / "report").exists() and not (tmp_path / "shards").exists()


def taker_list(name: str) -> str:
    return " or ".join(f.name for f in FORMATS.values() if name in f.options)


def test_the_datasets_format_takes_every_field_option_in_a_config_and_is_no_command_s_file_format(tmp_path, capsys):
    """Every option that names or joins a record's fields; a file's header line is no dataset's, nor a manifest's
    audio field (a dataset's recordings are its source_field, an Audio column)."""
    fields = {name: value for name, value in NOT_DEFAULT.items() if name not in ("header", "audio_field")}
    data = {"format": "datasets", "dataset": "org/name", **fields}
    assert read(RunConfig, {"data": data, "objective": {"kind": "seq2seq"}}).data.source_list == "first"
    with pytest.raises(ConfigError, match="data.header applies to data.format tsv or speech-tsv, not datasets"):
        read(RunConfig, {"data": {**data, "header": True}, "objective": {"kind": "seq2seq"}})
    assert "datasets" not in FILE_FORMATS
    (tmp_path / "f.txt").write_text("x\n")
    for argv in (
        ["evaluate", str(tmp_path), "--data", str(tmp_path / "f.txt"), "--format", "datasets"],
        ["data", "prepare", str(tmp_path / "f.txt"), "--format", "datasets", "--out", "x", "--tokenizer", "byte"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "invalid choice: 'datasets'" in err[0]
