"""Refusals that were right but messy: each is exactly one line on stderr, whatever else runs beside it.

Ctrl-C during start-up (imports, argument reading, set-up) is `encdec: interrupted` and exit code
130, or the trainer's own stop; torch's pickle warning, transformers' warnings and tqdm's bar never
come before a refusal; a message is one line of under 300 characters, however long the value it
names or whatever line breaks it holds; a resume refused under several processes logs no
config-change warning first.
"""

import io
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import yaml
from bad_inputs_kit import TINY, progress
from hf_kit import word_level_t5

from encdec.cli import main
from encdec.cli import size as size_command
from encdec.errors import ConfigError
from encdec.interop.families import FAMILIES
from encdec.runs.run_dir import RunDir
from encdec.training.distributed import DistInfo
from encdec.training.run_config import load_config
from encdec.training.setup import set_up

transformers = pytest.importorskip("transformers")

WORDS = ["<pad>", "</s>", "<unk>"] + "once upon a time there was a little girl named lily".split()
TORCHRUN_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """Made once: a tiny config, a run trained two steps, and a Hugging Face T5 directory with its tokenizer."""
    root = tmp_path_factory.mktemp("messy")
    (root / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    assert main(["train", str(root / "tiny.yaml"), "--out", str(root / "run")]) == 0
    word_level_t5(root / "hf", WORDS)
    return root


def one_line(code: int, err: str) -> str:
    """The one `encdec: error:` line of a refusal, checked: non-zero exit, one short line, no traceback."""
    lines = [
        line for line in err.splitlines() if line.strip() and not progress(line)
    ]  # splitlines: a bar's carriage return counts
    assert code != 0, err
    assert len(lines) == 1 and lines[0].startswith("encdec: error: "), err
    assert len(lines[0]) < 300 and "Traceback" not in err, err
    return lines[0]


def encdec(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`encdec ARGS` as a user runs it: a fresh process, stderr a pipe, outside any torchrun."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES and not k.startswith("TORCHELASTIC")}
    command = [sys.executable, "-m", "encdec", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("delay", [0.3, 1.0, 2.5])
def test_ctrl_c_during_start_up_is_one_line_and_exit_code_130(delay, library, tmp_path):
    """SIGINT while torch imports, while the config is read, or while the training sets up: `encdec:
    interrupted` (or, once the loop runs, its own stop and resume hint), exit code 130, no traceback."""
    run = tmp_path / "run"
    forever = ["--set", "training.steps=100000", "--set", "output.save_interval=100000"]
    command = [sys.executable, "-m", "encdec", "train", str(library / "tiny.yaml"), "--out", str(run), *forever]
    # Ctrl-C at a terminal: SIGINT at its default, whatever this test process inherited (pytest-xdist's
    # workers ignore it, and an ignored SIGINT is inherited: Python then installs no KeyboardInterrupt)
    interactive = partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interactive
    ) as process:
        try:
            time.sleep(delay)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=120)
        finally:
            process.kill()  # never left running past a failure
    lines = [line for line in err.splitlines() if line.strip() and not progress(line)]  # a step's line aside
    assert process.returncode == 130 and "Traceback" not in err, err
    assert lines == ["encdec: interrupted"] or (len(lines) == 1 and lines[0].startswith("stopped by signal")), err


class Payload:
    """Unpickled, it would run a command: what a tampered optimizer.pt carries."""

    def __reduce__(self):
        return (os.system, ("echo tampered",))


def optimizer_state(place: Path, data: bytes) -> list[str]:
    run = place / "run"
    checkpoint = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    (checkpoint / "optimizer.pt").write_bytes(data)
    return ["train", str(place / "tiny.yaml"), "--out", str(run), "--resume"]


def hf_with(place: Path, **config) -> Path:
    hf = place / "hf"
    values = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**values, **config}))
    return hf


def hf_bin(place: Path, data: bytes) -> list[str]:
    """`generate` from a Hugging Face directory whose weights are a pytorch_model.bin holding `data`."""
    hf = place / "hf"
    (hf / "model.safetensors").unlink()
    (hf / "pytorch_model.bin").write_bytes(data)
    (place / "in.txt").write_text("once upon a time\n")
    return ["generate", str(hf), "-i", str(place / "in.txt")]


def datasets_run(place: Path, dataset: str, file: str, text: str, *settings: str) -> list[str]:
    """`train` on data file `file` (holding `text`) read by the `datasets` builder `dataset`."""
    (place / file).write_text(text)
    options = ["data.format=datasets", f"data.dataset={dataset}", f"data.train=[{place / file}]", *settings]
    return ["train", str(place / "tiny.yaml"), "--out", str(place / "out"), *(w for o in options for w in ("--set", o))]


STORY_ROWS = "".join(json.dumps({"text": f"story {i}: once upon a time"}) + "\n" for i in range(8))


def evaluate_with_generation(place: Path, generation: dict, *options: str) -> list[str]:
    run = place / "run"
    best = run / "checkpoints" / (run / "checkpoints" / "best").read_text().strip()
    (best / "generation.json").write_text(json.dumps(generation))
    return ["evaluate", str(run), *options]


NOISY = {  # what a refusal came with: the command line (made in a copy of the library), a piece of the sentence
    "torch's pickle-protocol warning": (
        lambda p: optimizer_state(p, pickle.dumps({"state": {}, "param_groups": []}, protocol=4)),
        "optimizer.pt is corrupt or truncated",
    ),
    "torch's weights_only advice": (
        lambda p: optimizer_state(p, pickle.dumps({"state": Payload()}, protocol=2)),
        "optimizer.pt carries pickled objects other than tensors",
    ),
    "transformers' warning on a model_type it does not know": (
        lambda p: [
            "train",
            str(p / "tiny.yaml"),
            "--out",
            str(p / "out"),
            "--set",
            "tokenizer.kind=pretrained",
            "--set",
            f"tokenizer.path={hf_with(p, model_type='unknown-to-transformers')}",
        ],
        "sentinels",
    ),
    "a progress bar before a contradicting generation option": (
        lambda p: evaluate_with_generation(p, {"num_beams": 2, "num_return_sequences": 2}, "--num-beams", "1"),
        "num_return_sequences > 1 needs beam search",
    ),
    "torch's pickle-protocol warning before a refused pytorch_model.bin": (
        lambda p: hf_bin(p, pickle.dumps({"shared.weight": [0.0]}, protocol=4)),
        "pytorch_model.bin is corrupt or truncated",
    ),
    "torch's weights_only advice on a pytorch_model.bin that runs code": (
        lambda p: hf_bin(p, pickle.dumps({"shared.weight": Payload()}, protocol=2)),
        "pytorch_model.bin carries pickled objects other than tensors",
    ),
    "the datasets logger's errors before a corrupt parquet file is refused": (
        lambda p: datasets_run(p, "parquet", "stories.parquet", "PAR1 not parquet at all"),
        "cannot be loaded (ArrowInvalid",
    ),
    "datasets' progress bar before an empty slice of a split": (
        lambda p: datasets_run(p, "json", "stories.jsonl", STORY_ROWS, "data.train_split=train[5:2]"),
        "the corpus split is empty",
    ),
    "a split slice out of datasets' grammar": (
        lambda p: datasets_run(p, "json", "stories.jsonl", STORY_ROWS, "data.train_split=train[abc]"),
        "data.train_split must be a split name",
    ),
    "a split slice of more than all its rows": (
        lambda p: datasets_run(p, "json", "stories.jsonl", STORY_ROWS, "data.train_split=train[:200%]"),
        "got 'train[:200%]'",
    ),
}


@pytest.mark.parametrize("name", NOISY)
def test_a_refusal_comes_alone_without_a_library_s_warning_or_progress_bar(name, library, tmp_path):
    build, says = NOISY[name]
    if "datasets" in name or "split" in name:
        pytest.importorskip("datasets")
    for part in ("tiny.yaml", "run", "hf"):
        copy = shutil.copytree if (library / part).is_dir() else shutil.copy
        copy(library / part, tmp_path / part)
    done = encdec(*build(tmp_path))
    assert says in one_line(done.returncode, done.stderr), done.stderr


LONG = "y" * 5000
SUPPORTED = ", ".join(FAMILIES)  # the family table's model types, in its order
SHAPES = {  # the command line, made in a copy of the library; what the one line must end with
    "a 5,000-character model_type": (
        lambda p: ["generate", str(hf_with(p, model_type=LONG)), "-i", str(p / "in.txt")],
        SUPPORTED[-90:],  # the list's end: with the library's long path, its start is cut to keep one line
    ),
    "a model_type that is a list": (
        lambda p: ["generate", str(hf_with(p, model_type=["t5"])), "-i", str(p / "in.txt")],
        SUPPORTED[-90:],  # the list of 23 families' end: past the long path, its middle is cut to keep one line
    ),
    "a 5,000-character data path": (
        lambda p: ["train", str(p / "tiny.yaml"), "--out", str(p / "out"), "--set", f"data.train=[/{LONG}]"],
        "File name too long",
    ),
    "a line break in the config's name": (
        lambda p: ["train", str(p / "two\nlines.yaml"), "--out", str(p / "out")],
        "lines.yaml does not exist",
    ),
}


@pytest.mark.parametrize("name", SHAPES)
def test_a_message_is_one_line_however_long_the_value_or_whatever_it_holds(name, library, tmp_path, capsys):
    build, ends = SHAPES[name]
    shutil.copytree(library / "hf", tmp_path / "hf")
    shutil.copy(library / "tiny.yaml", tmp_path / "tiny.yaml")
    (tmp_path / "in.txt").write_text("once upon a time\n")
    argv = build(tmp_path)
    capsys.readouterr()
    line = one_line(main(argv), capsys.readouterr().err)
    assert line.endswith(ends), line


CHATTER = """
import logging, sys, warnings
from encdec.cli import main, say
from encdec.cli import size as command
from encdec.errors import ConfigError

def library(n):  # what a library says on stderr: a warning, its logger's error, a progress bar
    warnings.warn(f"advice {n}", UserWarning)
    chatty = logging.getLogger(f"library{n}")
    chatty.addHandler(logging.StreamHandler())
    chatty.error(f"error {n}")
    sys.stderr.write(f"\\rbar {n}: 100%\\r")

def run(args):
    library(1)
    if args.tokens == 1:
        raise ConfigError("refused")
    say("encdec speaks")
    library(2)
    return 0

command.run = run
sys.exit(main(["size", "--tokens", sys.argv[1]]))
"""


def test_what_libraries_say_waits_for_encdec_and_a_refusal_drops_it(tmp_path):
    """Any library's warning, log record or progress bar (not only the kinds met so far): before a refusal it is
    dropped, so the sentence comes alone; in a command that goes on, it comes out in its order before encdec's
    next output, and at the end."""
    script = tmp_path / "chatter.py"
    script.write_text(CHATTER)
    refused = subprocess.run([sys.executable, str(script), "1"], capture_output=True, text=True, timeout=120)
    assert one_line(refused.returncode, refused.stderr) == "encdec: error: refused"
    done = subprocess.run([sys.executable, str(script), "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = [done.stderr.index(piece) for piece in ("advice 1", "error 1", "bar 1", "encdec speaks", "advice 2")]
    assert said == sorted(said) and "error 2" in done.stderr and "bar 2" in done.stderr, done.stderr


def test_a_library_that_says_more_than_a_refusal_s_preamble_is_not_held_back():
    """Held text is bounded (a library logging every step of a long run goes out as it grows past MAX_HELD), and
    goes out whole, in its order, once."""
    from encdec.cli.held import MAX_HELD, HeldStderr

    terminal = io.StringIO()
    held = HeldStderr(terminal)
    held.write("first ")  # this module is not encdec's: a library's text
    assert terminal.getvalue() == ""
    held.write("x" * MAX_HELD)
    assert terminal.getvalue() == "first " + "x" * MAX_HELD
    held.write("last")
    held.release()
    assert terminal.getvalue() == "first " + "x" * MAX_HELD + "last"


def test_the_command_line_cuts_any_message_to_one_line_as_a_last_defence(monkeypatch, capsys):
    """Whatever an EncdecError says (a megabyte, line breaks), the command line prints one line: its start, the
    end after a cut, and exit code 2."""

    def says_too_much(args):
        raise ConfigError("first line\nsecond line\r\n" + "x" * 1_000_000 + " the end")

    monkeypatch.setattr(size_command, "run", says_too_much)
    code = main(["size", "--tokens", "1e9"])
    line = one_line(code, capsys.readouterr().err)
    assert code == 2
    assert line.startswith("encdec: error: first line second line xxx") and line.endswith("xxx the end"), line
    assert "..." in line and len(line) == 299


def test_a_resume_refused_under_several_processes_logs_no_config_change_first(library, tmp_path, caplog):
    """A resume whose accepted changes the loop would refuse (a batch that does not split over the
    processes) is refused before set-up reads, writes or warns of the changes."""
    run = tmp_path / "run"
    shutil.copytree(library / "run", run)
    metrics = (run / "metrics.jsonl").read_bytes()
    cfg = load_config(library / "tiny.yaml", ["optimizer.lr=1e-3", "training.batch_size=5"])
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match="must be divisible by the 2 processes"):
        set_up(cfg, RunDir(run), resume=True, accept_changes=True, info=DistInfo(world_size=2))
    assert not [r for r in caplog.records if "config changes" in r.getMessage()]
    assert (run / "metrics.jsonl").read_bytes() == metrics
