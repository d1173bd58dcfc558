import numpy as np

from encdec.data.documents import Documents


def test_chunks_cut_every_document_into_pieces_that_cover_it_exactly():
    documents = Documents.from_lists([list(range(10)), [], list(range(100, 103)), [7]])
    starts, lengths = documents.chunks(max_len=4, min_len=1)
    pieces = [documents.tokens[s : s + n].tolist() for s, n in zip(starts, lengths, strict=True)]
    assert pieces == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [100, 101, 102], [7]]


def test_chunks_shorter_than_min_len_are_dropped():
    documents = Documents.from_lists([list(range(9)), [5]])
    starts, lengths = documents.chunks(max_len=4, min_len=2)
    assert lengths.tolist() == [4, 4] and starts.tolist() == [0, 4]


def test_documents_index_like_a_list_and_keep_their_dtype():
    documents = Documents.from_lists([[1, 2], [3]], dtype=np.uint16)
    assert len(documents) == 2 and documents[1].tolist() == [3]
    assert documents.tokens.dtype == np.uint16 and documents.lengths.tolist() == [2, 1]
    assert documents.to_lists() == [[1, 2], [3]]
