"""Format `instruct-records`: TinyStoriesInstruct records read whole as unlabeled text (ROT5's mini pretraining)."""

import gzip

import pytest

from encdec.cli import main
from encdec.data.formats import TEXT_FORMATS, read_corpus
from encdec.errors import DataError
from encdec.training.data_sections import DataSection, ObjectiveSection
from encdec.training.run_config import RunConfig
from encdec.training.run_data import read_items


@pytest.fixture
def instruct_file(tmp_path, instruct_text):
    path = tmp_path / "instruct.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(instruct_text)
    return path


def test_records_are_read_whole_as_written_with_trailing_spaces_dropped(instruct_file):
    records = list(read_corpus("instruct-records", [instruct_file]))
    assert records == [
        "Features: Dialogue\nWords: quit, oak, gloomy\nSummary: Sara and Ben play by an oak tree and do not quit.\n"
        'Story:\n\nSara and Ben were playing in the park.\n"Let\'s not quit," said Ben.',
        "Features: Foreshadowing\nWords: lamp, shiny\nRandom sentence: The lamp was shiny.\n"
        "Story: Tom had a shiny lamp. He loved it.",
        "Summary: A cat naps in the sun.\nStory: The cat was warm.\n\nIt slept all day.",
    ]


def test_each_record_holds_its_story_and_the_lines_instruct_text_leaves_out(instruct_file):
    records = list(read_corpus("instruct-records", [instruct_file]))
    stories = list(read_corpus("instruct-text", [instruct_file]))
    assert len(records) == len(stories) == 3
    for record, story in zip(records, stories, strict=True):
        assert record.endswith(story) and len(record) > len(story)
    assert records[0].startswith("Features: Dialogue\nWords:") and "Summary:" in records[0]


def test_plain_stories_are_refused_in_one_sentence_naming_the_file_and_record(tmp_path):
    path = tmp_path / "stories.txt"
    path.write_text("Once upon a time: a cat.\n<|endoftext|>\nA dog ran.\n<|endoftext|>\n")
    with pytest.raises(
        DataError, match=r"stories.txt record 1 has no line starting with Features:.*format tinystories"
    ):
        list(read_corpus("instruct-records", [path]))


def test_a_file_without_records_is_refused(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("<|endoftext|>\n\n")
    with pytest.raises(DataError, match="contains no stories"):
        list(read_corpus("instruct-records", [path]))


def test_a_run_config_takes_the_format_and_reads_its_records(instruct_file):
    assert "instruct-records" in TEXT_FORMATS
    data = DataSection(format="instruct-records", train=[str(instruct_file)], validation=[str(instruct_file)])
    train, validation = read_items(RunConfig(data=data, objective=ObjectiveSection(kind="ul2")))
    assert len(train) == len(validation) == 3 and train[2].startswith("Summary: A cat naps")


def test_data_prepare_tokenizes_the_records_into_shards(tmp_path, instruct_file, capsys):
    out = tmp_path / "shards"
    argv = ["data", "prepare", str(instruct_file), "--format", "instruct-records", "--out", str(out)]
    assert main([*argv, "--tokenizer", "byte", "--workers", "1"]) == 0
    assert "train] text: 3 documents" in capsys.readouterr().out
