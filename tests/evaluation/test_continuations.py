"""A language model's continuation examples are windows of its documents: first windows first, split in half."""

from encdec.evaluation.scoring import continuation_splits


def test_windows_come_first_of_every_document_then_second_and_are_split_in_half():
    documents = [list(range(100, 120)), list(range(200, 205)), list(range(300, 303))]
    splits = continuation_splits(documents, 8, 5)
    assert splits == [
        (list(range(100, 104)), list(range(104, 108))),  # every document's first window ...
        ([200, 201], [202, 203, 204]),
        ([300, 301], [302]),
        (list(range(108, 112)), list(range(112, 116))),  # ... then the second windows
        ([116, 117], [118, 119]),
    ]
    assert continuation_splits(documents, 8, 50) == splits  # no more windows than the documents hold
    assert continuation_splits([[1, 2], [3]], 8, 4) == []  # too short for a reference: left out
