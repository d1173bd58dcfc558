"""One factory builds every objective by the run config's name; the objective modules import without a circle."""

import ast
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from encdec.cli import main as run
from encdec.data.documents import Documents
from encdec.data.objectives import (
    OBJECTIVES,
    CausalLMObjective,
    Seq2SeqObjective,
    UL2Config,
    UL2Objective,
    build_objective,
    prefix_lm_objective,
    ul2_mode_ids,
)
from encdec.data.objectives.transcribe import TranscribeObjective
from encdec.errors import ConfigError
from encdec.tokenizers import build_tokenizer

OBJECTIVES_DIR = Path(__file__).resolve().parents[2] / "src" / "encdec" / "data" / "objectives"


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("byte", num_sentinels=20, extra_specials=("[R]", "[X]", "[S]"))


@pytest.fixture(scope="module")
def docs(tok, tinystories_stories):
    return Documents.from_lists(tok.encode(tinystories_stories[:60], add_eos=True))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """60 recordings for transcribe's pairs: three tones, each named 20 times."""
    root = tmp_path_factory.mktemp("clips")
    t = np.arange(4000) / 16_000
    paths = []
    for i in range(3):
        soundfile.write(root / f"{i}.wav", 0.2 * np.sin(2 * np.pi * (220 + 110 * i) * t), 16_000)
        paths.append(str(root / f"{i}.wav"))
    return paths * 20


def same_batches(a, b, steps: int = 3) -> bool:
    for _ in range(steps):
        x, y = a.next_batch(), b.next_batch()
        tensors = ("src_ids", "src_mask", "tgt_ids", "labels", "prefix_lengths")
        if x.modes != y.modes or not all(
            (getattr(x, t) is None and getattr(y, t) is None) or torch.equal(getattr(x, t), getattr(y, t))
            for t in tensors
        ):
            return False
    return True


def direct(kind, docs, tok, seed, recordings=()):
    """Each objective built by hand, as the trainer and `encdec data inspect` used to."""
    ids = (tok.pad_id, tok.eos_id, tok.decoder_start_id)
    if kind == "transcribe":
        return TranscribeObjective(recordings, docs, 4, *ids, max_target_len=16, seed=seed)
    if kind == "causal_lm":
        return CausalLMObjective(docs, 32, 4, mode="sequential", seed=seed)
    if kind == "prefix_lm":
        return prefix_lm_objective(docs, 4, tok.pad_id, tok.eos_id, max_length=48, seed=seed)
    if kind == "seq2seq":
        return Seq2SeqObjective(docs, docs, 4, *ids, max_source_len=48, max_target_len=16, seed=seed)
    config = (
        UL2Config.span_corruption(2.0, 0.3, max_length=48)
        if kind == "span_corruption"
        else UL2Config(0.5, 0.2, 0.3, r_masks=((2.0, 0.3),), max_length=48, mode_tokens=True)
    )
    modes = ul2_mode_ids(tok) if config.mode_tokens else None
    return UL2Objective(docs, 4, *ids, list(tok.sentinel_ids), config, mode_ids=modes, seed=seed)


@pytest.mark.parametrize("kind", OBJECTIVES)
def test_the_factory_builds_the_same_batches_as_the_objective_itself(kind, docs, tok, recordings):
    data = {"seq2seq": (docs, docs), "transcribe": (recordings, docs)}.get(kind, docs)
    options = dict(
        seq_len=32 if kind == "causal_lm" else 48,
        windows="sequential",
        max_source_len=48,
        max_target_len=16,
        noise_density=0.3,
        mean_span=2.0,
        ul2_probabilities=[0.5, 0.2, 0.3],
        mode_tokens=True,
    )
    built = build_objective(kind, data, tok, 4, 5, **options)
    assert built.name == direct(kind, docs, tok, 5, recordings).name
    assert same_batches(built, direct(kind, docs, tok, 5, recordings))


def test_an_unknown_objective_is_refused_with_the_known_names(docs, tok):
    with pytest.raises(ConfigError, match=r"objective 'span' is unknown; choose one of causal_lm, span_corruption"):
        build_objective("span", docs, tok, 4)


def module_imports(path: Path) -> tuple[set[str], list[int]]:
    """(objective modules `path` imports at its top, lines of imports inside functions or classes)."""
    tree = ast.parse(path.read_text())
    top = {node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))}
    names, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if node not in top:
                nested.append(node.lineno)
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            names |= {m.rsplit(".", 1)[-1] for m in modules if m.startswith("encdec.data.objectives.")}
    return names, nested


def test_the_objective_modules_import_each_other_without_a_circle_or_a_lazy_import():
    graph = {}
    for path in OBJECTIVES_DIR.glob("*.py"):
        if path.stem != "__init__":
            graph[path.stem], nested = module_imports(path)
            assert not nested, f"{path.name} imports inside a function (lines {nested})"
    assert "ul2" in graph["prefix_lm"] and "collate" in graph["ul2"] and "collate" in graph["seq2seq"]
    done, visiting = set(), []

    def visit(module):
        assert module not in visiting, f"import circle: {' -> '.join([*visiting, module])}"
        if module not in done:
            visiting.append(module)
            for imported in graph.get(module, ()):
                visit(imported)
            visiting.pop()
            done.add(module)

    for module in graph:
        visit(module)


@pytest.fixture(scope="module")
def shards(tmp_path_factory, tinystories_stories):
    root = tmp_path_factory.mktemp("shards")
    (root / "stories.txt").write_text("\n<|endoftext|>\n".join(tinystories_stories[:40]))
    out = root / "stories"
    options = "--format tinystories --tokenizer byte --num-sentinels 20 --workers 1".split()
    args = ["data", "prepare", str(root / "stories.txt"), "--out", str(out), *options]
    assert run(args) == 0
    return out


@pytest.mark.parametrize("short, name", [("causal", "causal_lm"), ("span", "span_corruption"), ("prefix", "prefix_lm")])
def test_inspect_takes_the_run_config_names_and_the_short_ones_alike(shards, capsys, short, name):
    def inspect(objective):
        capsys.readouterr()
        args = [
            "data",
            "inspect",
            str(shards),
            "--objective",
            objective,
            "-n",
            "2",
            "--max-length",
            "40",
            "--block-size",
            "16",
            "--seed",
            "3",
            "--width",
            "100",
        ]
        assert run(args) == 0
        return capsys.readouterr().out

    printed = inspect(name)
    assert printed.startswith(f"{name} on ") and printed.count("--- example") == 2
    assert inspect(short) == printed


def test_inspect_refuses_an_unknown_objective_naming_the_choices(shards, capsys):
    assert run(["data", "inspect", str(shards), "--objective", "denoise"]) == 2
    assert "choose from 'causal_lm', 'span_corruption', 'ul2', 'prefix_lm', 'seq2seq'" in capsys.readouterr().err


def test_span_corruption_with_a_tokenizer_without_sentinels_is_refused_before_any_batch(docs):
    """A Hugging Face Gemma, Llama or Qwen tokenizer has no sentinels: UL2's R and X denoisers, and T5's span
    corruption, are refused when the objective is built; UL2's S denoiser alone (PrefixLM) needs none."""
    bare = build_tokenizer("byte", num_sentinels=0)
    for kind, probabilities in (("span_corruption", (0.25, 0.25, 0.5)), ("ul2", (0.25, 0.25, 0.5)), ("ul2", (0, 1, 0))):
        with pytest.raises(
            ConfigError, match=f"^objective.kind {kind} marks spans with sentinels, which this tokenizer has none of"
        ):
            build_objective(kind, docs, bare, 4, seq_len=64, ul2_probabilities=probabilities)
    batch = build_objective("ul2", docs, bare, 4, seq_len=64, ul2_probabilities=(0, 0, 1)).next_batch()
    assert batch.src_ids.shape[0] == 4
