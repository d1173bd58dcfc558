import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encdec.data.corpora import (
    is_validation,
    iter_instruct_pairs,
    iter_instruct_records,
    iter_jsonl_pairs,
    iter_parallel,
    iter_plain_text,
    iter_tinystories,
    iter_tsv_pairs,
    split_items,
)
from encdec.data.formats import read_corpus
from encdec.errors import DataError


def test_tinystories_sample_has_its_2316_stories(tinystories_path, tinystories_stories):
    stories = list(iter_tinystories(tinystories_path))
    assert len(stories) == 2316 and stories == tinystories_stories


def test_instruct_records_written_here_parse_into_story_and_summary(tmp_path, instruct_text):
    path = tmp_path / "instruct.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(instruct_text)
    records = list(iter_instruct_records(path))
    assert records[0].fields["Words"] == "quit, oak, gloomy"
    assert records[1].fields["Random sentence"] == "The lamp was shiny."
    assert list(iter_instruct_pairs(path)) == [
        (
            'Sara and Ben were playing in the park.\n"Let\'s not quit," said Ben.',
            "Sara and Ben play by an oak tree and do not quit.",
        ),
        ("The cat was warm.\n\nIt slept all day.", "A cat naps in the sun."),
    ]


def test_dialogsum_yields_dialogue_summary_pairs(shared_data):
    pairs = list(iter_jsonl_pairs(shared_data / "summarization" / "dialogsum" / "dialogsum.dev.jsonl.gz"))
    assert len(pairs) == 500
    dialogue, summary = pairs[0]
    assert dialogue.startswith("#Person1#:") and "#Person2#" in summary


def test_multi30k_files_pair_line_by_line(shared_data):
    root = shared_data / "translation" / "multi30k"
    pairs = list(iter_parallel(root / "val.en.gz", root / "val.de.gz"))
    assert len(pairs) == 1014
    assert pairs[0] == (
        "A group of men are loading cotton onto a truck",
        "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen",
    )


def test_plain_text_splits_by_unit(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text("one\ntwo\n\n\nthree\n")
    assert list(iter_plain_text(path, unit="paragraph")) == ["one\ntwo", "three"]
    assert list(iter_plain_text(path, unit="line")) == ["one", "two", "three"]
    assert list(iter_plain_text(path, unit="file")) == ["one\ntwo\n\n\nthree"]


def test_tsv_pairs_read_the_chosen_columns(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a\tb\tc\nd\te\tf\n")
    assert list(iter_tsv_pairs(path, source_column=2, target_column=0)) == [("c", "a"), ("f", "d")]


def test_split_is_deterministic_disjoint_and_near_the_fraction(tinystories_stories):
    train, validation = split_items(tinystories_stories, val_fraction=0.1, seed=3)
    assert (train, validation) == split_items(tinystories_stories, val_fraction=0.1, seed=3)
    assert len(train) + len(validation) == len(tinystories_stories)
    assert 0.07 < len(validation) / len(tinystories_stories) < 0.13
    assert split_items(tinystories_stories, 0.1, seed=4)[1] != validation
    assert not set(train) & set(validation)
    assert not is_validation("anything", 0.0) and is_validation("anything", 1.0)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(max_size=12), max_size=40), val_fraction=st.floats(0.0, 1.0, exclude_min=True))
def test_a_split_of_two_or_more_items_leaves_neither_side_empty_and_moves_nothing_else(texts, val_fraction):
    """A few documents (data.max_documents) at a small val_fraction: one item crosses to the side the hash left
    empty; a split whose sides both hold items is the hash split itself."""
    train, validation = split_items(texts, val_fraction)
    assert sorted(train + validation) == sorted(texts)
    hashed = [t for t in texts if is_validation(t, val_fraction)]
    if len(texts) >= 2:
        assert train and validation
    if 0 < len(hashed) < len(texts):
        assert validation == hashed
    else:
        assert len(validation) - len(hashed) in (-1, 0, 1)


# --- bad data: one sentence naming the file and, where it applies, the line ---


def test_empty_file_names_the_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    with pytest.raises(DataError, match=r"empty\.txt contains no stories"):
        list(iter_tinystories(path))


def test_non_utf8_bytes_name_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt.gz"
    with gzip.open(path, "wb") as handle:
        handle.write("fine\nalso fine\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.txt\.gz line 3 is not valid UTF-8"):
        list(iter_plain_text(path))


def test_jsonl_line_missing_its_field_names_the_file_and_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    lines = [{"dialogue": "hi", "summary": "greeting"}, {"dialogue": "bye"}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(DataError, match=r"pairs\.jsonl line 2 has no field 'summary'"):
        list(iter_jsonl_pairs(path))


def test_jsonl_line_that_is_not_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(DataError, match=r"bad\.jsonl line 2 is not valid JSON"):
        list(read_corpus("jsonl", [path]))


@pytest.mark.parametrize(
    "line, says",
    [
        ('{"text": "ok", "id": ' + "1" * 5_000 + "}", "line 2 holds a number of 5,000 characters"),
        ('{"text": "ok", "score": 0.' + "5" * 5_000 + "}", "line 2 holds a number of 5,002 characters"),
        ('{"text": "ok", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}", "line 2 nests deeper than Python reads"),
    ],
)
def test_a_jsonl_line_of_unbounded_numbers_or_nesting_names_the_line(tmp_path, line, says):
    """Python's int() refuses 4,300 digits with a ValueError, and its JSON reader recurses per level."""
    path = tmp_path / "huge.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(DataError, match=f"huge.jsonl {says}"):
        list(read_corpus("jsonl", [path]))


def test_parallel_files_of_different_lengths_name_the_longer_file(tmp_path):
    (tmp_path / "a.en").write_text("1\n2\n3\n")
    (tmp_path / "a.de").write_text("1\n2\n")
    with pytest.raises(DataError, match=r"a\.en has more lines.*line 3 has no partner"):
        list(iter_parallel(tmp_path / "a.en", tmp_path / "a.de"))


def test_missing_file_and_truncated_gzip_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        list(iter_tinystories(tmp_path / "nope.txt"))
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(gzip.compress(b"hello\n" * 1000)[:40])
    with pytest.raises(DataError, match=r"cut\.txt\.gz cannot be read as gzip"):
        list(iter_plain_text(path))
