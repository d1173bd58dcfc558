"""A run's rows fit the model's position tables, checked when the model is built: a learned or sinusoidal
table's rows and a causal LM's context against the longest source and target rows the objective makes (each
mixture member's), so a run that asks for more is one sentence before any step, not an IndexError inside the
position embedding at the first batch; and what fits is not refused."""

from pathlib import Path

import numpy as np
import pytest

from encdec.cli import main
from encdec.data.documents import Documents
from encdec.data.objectives import build_objective
from encdec.data.objectives.factory import longest_rows
from encdec.errors import ConfigError
from encdec.models import preset
from encdec.models.family_classes import check_position_limits
from encdec.tokenizers import ByteTokenizer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
OPTIONS = [
    dict(kind="ul2", seq_len=24),
    dict(kind="ul2", seq_len=24, mode_tokens=True),
    dict(kind="ul2", seq_len=9, ul2_probabilities=[0.0, 1.0, 0.0]),
    dict(kind="span_corruption", seq_len=24, noise_density=0.9, mean_span=1.0),
    dict(kind="span_corruption", seq_len=3),
    dict(kind="seq2seq", max_source_len=11, max_target_len=5),
    dict(kind="causal_lm", seq_len=16),
    dict(kind="prefix_lm", seq_len=16),
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{v}" for v in o.values()))
def test_no_batch_holds_a_row_longer_than_the_objective_declares(options):
    """longest_rows bounds every row of 200 batches drawn of documents of every length (the denoisers' random
    spans included): what the check at the model's build compares with its tables."""
    rng = np.random.default_rng(0)
    tok = ByteTokenizer(num_sentinels=100, extra_specials=("[R]", "[X]", "[S]"))
    texts = ["".join(rng.choice(list("abcdefgh "), size=int(n))) for n in rng.integers(1, 60, size=300)]
    documents = Documents.from_lists([tok.encode(t) for t in texts])
    kind = options["kind"]
    data = (documents, documents) if kind == "seq2seq" else documents
    objective = build_objective(
        kind, data, tok, batch_size=8, seed=1, **{k: v for k, v in options.items() if k != "kind"}
    )
    source, target = longest_rows(**options)
    seen = [0, 0]
    for _ in range(200):
        batch = objective.next_batch()  # rows padded to the batch's longest
        seen[0] = max(seen[0], 0 if batch.src_ids is None else batch.src_ids.shape[1])
        seen[1] = max(seen[1], batch.tgt_ids.shape[1])
    assert seen[0] <= source and seen[1] <= target, (seen, (source, target))
    assert seen[1] > 0


def test_a_learned_table_shorter_than_the_rows_is_refused_and_one_as_long_is_not():
    learned = preset("transformer-tiny", vocab_size=300, position="learned", max_positions=64)
    with pytest.raises(
        ConfigError, match="makes source rows of up to 65 tokens, but its learned position table has 64"
    ):
        check_position_limits(learned, *longest_rows("ul2", seq_len=64, mode_tokens=True), "objective ul2")
    check_position_limits(learned, *longest_rows("ul2", seq_len=64), "objective ul2")  # 64 inputs, <= 47 targets
    relative = preset("t5-tiny", vocab_size=300)
    check_position_limits(relative, 100_000, 100_000, "objective ul2")  # relative positions: any length


def test_a_causal_lm_s_context_bounds_its_stream_whatever_its_positions():
    rope = preset("decoder_only-tiny", vocab_size=300, position="rope", max_positions=32)
    with pytest.raises(ConfigError, match="makes stream rows of up to 33 tokens, but its context is 32"):
        check_position_limits(rope, *longest_rows("causal_lm", seq_len=33), "objective causal_lm")


@pytest.fixture
def learned_decoder_only(tmp_path, shared_data):
    """An encdec decoder-only run with a learned table of 64 rows (seed 000's baseline, two steps)."""
    run = tmp_path / "source"
    config = CONFIGS / "seeds" / "cpu" / "000_baseline.yaml"
    stories = shared_data / "tinystories" / "tinystories_train_head.txt.gz"
    sets = [
        "training.steps=2",
        "training.threads=1",
        "tokenizer.vocab_size=300",
        "data.max_documents=60",
        f"data.train=[{stories}]",
        "data.validation=[]",
        "data.val_fraction=0.1",
        "evaluation.interval=2",
        "evaluation.steps=1",
    ]
    assert main(["train", str(config), "--out", str(run), *(a for s in sets for a in ("--set", s))]) == 0
    return run


def test_adapting_a_learned_table_to_longer_rows_is_one_sentence_before_any_step(
    learned_decoder_only, tmp_path, capsys
):
    """The issue's case: a decoder-only run of 64 learned positions adapted into an encoder-decoder trained on
    chunks of 128 tokens ended in `IndexError: index out of range in self`; rows of 64 train."""
    adapt = ["--set", f"training.init_from={learned_decoder_only}", "--set", "model.family=encoder_decoder"]
    adapt += ["--set", "objective.ul2_probabilities=[0,0,1]", "--set", "training.steps=1", "--threads", "1"]
    tiny_config = CONFIGS / "tiny.yaml"  # the command: its model section is the source's
    capsys.readouterr()
    code = main(["train", str(tiny_config), "--out", str(tmp_path / "long"), *adapt, "--set", "objective.seq_len=128"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "objective ul2 (seq_len 128) makes source rows of up to 128 tokens" in err[0]
    assert "learned position table has 64 rows (model.positions.max)" in err[0]
    assert not (tmp_path / "long" / "checkpoints").exists()
    assert (
        main(["train", str(tiny_config), "--out", str(tmp_path / "fits"), *adapt, "--set", "objective.seq_len=64"]) == 0
    )
