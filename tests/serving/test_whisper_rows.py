"""A Whisper request in the server's running batch (serving.scheduler, RowModel) decodes as `generate` decodes
that window alone, whatever else runs beside it: language given or detected (its own start in the batch),
translation, timestamps with windows decoded again, beam search, the temperature fallback (seeded), a previous
text; the rows of each decoding are given back. On transformers' tiny random Whisper
(tests/generation/whisper_kit.py) loaded into encdec's Whisper family."""

from functools import partial

import pytest
import torch

import encdec
from encdec.generation.generate import generate
from encdec.serving.scheduler import Scheduler
from tests.generation import whisper_kit
from tests.interop.serving_kit import run_together

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

CASES = {
    "language": dict(language="fr"),
    "detected-timestamps": dict(return_timestamps=True),
    "translate-per-window": dict(language="de", task="translate", return_timestamps=True),
    "beam-timestamps": dict(language="en", num_beams=3, return_timestamps=True),
    "fallback": dict(  # two of the four windows fall back at -1.9 (all four at -1.6, none at -2.0)
        language="de", temperature=[0.0, 0.2, 0.4], logprob_threshold=-1.9, compression_ratio_threshold=0.7, seed=3
    ),
    "previous-text": dict(language="en", prompt_ids=[whisper_kit.PREV, 9, 10, 11]),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper")
    whisper_kit.tiny_whisper(transformers, path)
    return encdec.load_hf(path)


@pytest.mark.parametrize("options", CASES.values(), ids=CASES)
def test_windows_decoded_together_in_the_running_batch_equal_each_alone(model, options):
    features = torch.randn(4, 8, 60, generator=torch.Generator().manual_seed(0))
    options = dict(max_new_tokens=10, **options)
    alone = [generate(model, features[i : i + 1], **options) for i in range(len(features))]
    scheduler = Scheduler(model, max_rows=32)
    try:
        calls = [partial(scheduler.run, features[i : i + 1], None, dict(options)) for i in range(len(features))]
        together = run_together(scheduler, calls)
    finally:
        scheduler.stop(timeout=30)
    assert scheduler.batch.rows == 0  # every decoding's rows given back (stop returns once they have left)
    for i, (got, expected) in enumerate(zip(together, alone)):
        assert isinstance(got, torch.Tensor), got
        assert torch.equal(got, expected), (i, got, expected)
    assert scheduler.steps < sum(row.shape[1] for row in alone)  # fewer decoder steps than tokens: shared
