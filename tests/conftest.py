"""Shared fixtures: the device under test, the real corpora beside the repository and a seeded RNG.

`pytest --device cuda` (or ENCDEC_TEST_DEVICE=cuda) runs the device-aware tests on
the GPU; the default is the CPU. Tests marked `cuda` need a GPU and those marked
`multi_gpu` two, and are skipped without them. The suite computes as on a CPU that multiplies no bf16 natively,
neither by AMX nor by AVX-512 BF16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI unless the caller sets it), so that
`precision: auto` stays fp32 in the runs it compares with fp32 references wherever it is cloned;
tests/training/test_numerics.py checks the bf16 choice.
"""

import os
import socket
from pathlib import Path

import pytest
import torch

from encdec.sizing import available_cores

DEVICES = ("cpu", "cuda")


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default=os.environ.get("ENCDEC_TEST_DEVICE", "cpu"),
        help="where device-aware tests run: cpu (default) or cuda; also ENCDEC_TEST_DEVICE",
    )


def pytest_configure(config):
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")  # no native bf16: see the module
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # pytest-xdist: each test process computes on its share of the cores, as do its children
        threads = max(1, available_cores() // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)
    else:  # one process: torch's own default, said, so runs do not choose by the load (sizing.choose_threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    device = config.getoption("--device")
    if device not in DEVICES:
        raise pytest.UsageError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda was given but torch sees no CUDA GPU (is this the CPU build of torch?)")


def pytest_collection_modifyitems(config, items):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "cuda" in item.keywords and gpus < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "multi_gpu" in item.keywords and gpus < 2:
            item.add_marker(pytest.mark.skip(reason="needs two or more CUDA GPUs"))


@pytest.fixture(scope="session")
def device(pytestconfig) -> torch.device:
    """The device under test: cpu unless `--device cuda`."""
    return torch.device(pytestconfig.getoption("--device"))


@pytest.fixture(scope="session")
def exact(device) -> bool:
    """Whether results must match bitwise: on the CPU yes; CUDA kernels may reorder sums."""
    return device.type == "cpu"


SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared data folder {SHARED_DATA} is missing; it must sit beside the repository")
    return SHARED_DATA


@pytest.fixture
def one_thread():
    """One intra-op thread for the test: tiny models run faster and steadier beside a busy second core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: what it reads (a config, a tokenizer file) is read offline."""

    def refuse(*args, **kwargs):
        raise AssertionError("the test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- data layer fixtures (tests/data, tests/tokenizers) ---


def _shared_file(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.is_file():
        pytest.fail(f"the shared data file {path} is missing; it must sit beside the repository")
    return path


@pytest.fixture(scope="session")
def mistral_model() -> Path:
    """Mistral's SentencePiece model (32,000 pieces) from ../shared/data/tokenizers."""
    return _shared_file("tokenizers", "mistral_tokenizer.model.v1")


@pytest.fixture(scope="session")
def tinystories_path() -> Path:
    return _shared_file("tinystories", "tinystories_train_head.txt.gz")


@pytest.fixture(scope="session")
def tinystories_stories(tinystories_path) -> list[str]:
    """The 2,316 stories of the TinyStories sample, split on <|endoftext|> and stripped."""
    import gzip

    with gzip.open(tinystories_path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    return [story.strip() for story in text.split("<|endoftext|>") if story.strip()]


INSTRUCT_RECORDS = """Features: Dialogue
Words: quit, oak, gloomy
Summary: Sara and Ben play by an oak tree and do not quit.
Story: 

Sara and Ben were playing in the park.
"Let's not quit," said Ben.
<|endoftext|>
Features: Foreshadowing
Words: lamp, shiny
Random sentence: The lamp was shiny.
Story: Tom had a shiny lamp. He loved it.
<|endoftext|>
Summary: A cat naps in the sun.
Story: The cat was warm.

It slept all day.
<|endoftext|>
"""


@pytest.fixture
def instruct_text() -> str:
    """Three TinyStoriesInstruct records written by hand (the real set is not in ../shared/data)."""
    return INSTRUCT_RECORDS
