"""Fuzzing the declared schema: whatever a config or run file holds, reading it ends in a value or one
EncdecError sentence, in bounded work (function calls, counted) and memory, never another exception.

Generated: every field of the run config given random values of random types, random YAML documents,
mutations of every shipped config, random state.json and generation.json contents, and a sample of
command lines checked at the CLI (exit code, one stderr line, no traceback).
"""

import dataclasses
import functools
import json
import tracemalloc
import typing
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from work_kit import counted_calls

from encdec.cli import main
from encdec.errors import EncdecError
from encdec.generation import GenerationConfig
from encdec.models import ModelConfig
from encdec.runs.load import read_generation
from encdec.runs.run_dir import CheckpointDir
from encdec.runs.state import read_saved_state
from encdec.schema import read
from encdec.serving.speculative_rows import ServedDraft
from encdec.training.data_sections import DataSection
from encdec.training.run_config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if "experiments" not in p.parts)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# what one read may take: its work, counted, not its seconds, which a loaded machine stretches (5 s failed at
# 5.5 and 7.3 s beside other tests). The largest read here makes about 60,000 calls and `encdec size` about
# 125,000 and 130 a module it builds (on the meta device: 16,457 modules for 1,024 experts); a read that made
# one call per byte of a 1 MiB file, or blew up on nesting, would pass a million
CALLS, CALLS_PER_MODULE, MEGABYTES = 1_000_000, 1_000, 64

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["nan", "1e-4", "0.5", "-1", "yes", "~", "{source}", "{x.y}", "../x", "", "auto", "ddp"]),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4)
    ),
    max_leaves=12,
)


def dotted_fields(cls: type, prefix: str = "") -> list[str]:
    """Every field of the run config as a dotted key: training.steps, objective.ul2_probabilities, ..."""
    keys = []
    for name, hint in typing.get_type_hints(cls).items():
        optional = type(None) in typing.get_args(hint)  # `lora: LoraSection | None`; a list of sections stays whole
        sections = [h for h in (hint, *(typing.get_args(hint) if optional else ())) if dataclasses.is_dataclass(h)]
        if sections:
            keys += dotted_fields(sections[0], f"{prefix}{name}.")
        if not sections or optional:  # an optional section is also fuzzed whole
            keys.append(prefix + name)
    return keys


FIELDS = dotted_fields(RunConfig) + [f"model.{k}" for k in [*dotted_fields(ModelConfig), "preset"]]
GENERATION_OPTIONS = [f.name for f in dataclasses.fields(GenerationConfig) if f.name not in ("generator", "streamer")]


def ends_well(read_it) -> object:
    """Run `read_it`; it returns or raises EncdecError, within CALLS function calls and MEGABYTES of Python
    memory: bounds on the work, which a loaded machine does not stretch as it stretches seconds."""
    tracemalloc.start()
    try:
        with counted_calls() as work:
            return read_it()
    except EncdecError as error:
        assert "\n" not in str(error) and len(str(error)) < 300, str(error)
        return error
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert work.calls < CALLS, f"{work.calls:,} calls"
        assert peak < MEGABYTES << 20, f"{peak / 2**20:.0f} MB"


def nested(key: str, value: object) -> dict:
    section, _, rest = key.partition(".")
    return {section: nested(rest, value) if "." in rest else {rest: value}}


@FUZZ
@given(key=st.sampled_from(FIELDS), value=anything)
def test_every_field_given_any_value_is_read_or_refused_in_one_sentence(key, value):
    ends_well(lambda: read(RunConfig, nested(key, value)))


MEMBER_FIELDS = ["name", "weight", "objective", *(f"data.{k}" for k in dotted_fields(DataSection))]


@FUZZ
@given(key=st.sampled_from(MEMBER_FIELDS), value=anything)
def test_every_field_of_a_mixture_member_given_any_value_is_read_or_refused_in_one_sentence(key, value):
    member = {"name": "a", "weight": 1.0, "data": {"format": "text", "train": ["a.txt"]}}
    section, _, rest = key.partition(".")
    member[section] = {**member[section], rest: value} if rest else value
    ends_well(lambda: read(RunConfig, {"data": {"mixture": [member]}}))


@FUZZ
@given(option=st.sampled_from(GENERATION_OPTIONS), value=anything)
def test_every_generation_option_given_any_value_is_taken_or_refused_in_one_sentence(option, value):
    ends_well(lambda: GenerationConfig(**{option: value}))


@FUZZ
@given(field=st.sampled_from(["model", "shares_encoder", "num_assistant_tokens"]), value=anything)
def test_every_field_of_a_served_draft_given_any_value_is_taken_or_refused_in_one_sentence(field, value):
    ends_well(lambda: ServedDraft(**{"model": torch.nn.Identity(), field: value}))


@FUZZ
@given(document=anything)
def test_any_yaml_structure_is_read_or_refused_in_one_sentence(document, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    ends_well(lambda: load_config(path))


@FUZZ
@given(text=st.text(alphabet=st.sampled_from(list("ab: -[]{}\n'\"&*!%@`|>#.,0123456789~?")), max_size=200))
def test_any_yaml_text_is_read_or_refused_in_one_sentence(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_text(text)
    ends_well(lambda: load_config(path))


@pytest.mark.parametrize("depth", [33, 3_000, 100_000])
def test_deep_yaml_and_json_are_refused_in_one_sentence(tmp_path, depth):
    config = tmp_path / "deep.yaml"
    config.write_text("model: " + "[" * depth + "]" * depth + "\n")
    assert "nests deeper than" in str(ends_well(lambda: load_config(config)))
    state = CheckpointDir(tmp_path / "step_00000001")
    state.path.mkdir()
    (state.path / "generation.json").write_text("[" * depth + "]" * depth)
    assert isinstance(ends_well(lambda: read_generation(state)), EncdecError)


@FUZZ
@given(config=st.sampled_from(SHIPPED), data=st.data())
def test_every_shipped_config_mutated_is_read_or_refused_in_one_sentence(config, data, tmp_path_factory):
    values = yaml.safe_load(config.read_text())
    sections = [s for s in values if isinstance(values[s], dict) and values[s]]
    section = data.draw(st.sampled_from(sections))
    key = data.draw(st.sampled_from(sorted(values[section])))
    values[section][key] = data.draw(anything)
    path = tmp_path_factory.mktemp("fuzz") / config.name
    path.write_text(yaml.safe_dump(values))
    ends_well(lambda: load_config(path))


def file_schemas() -> list[type]:
    """The declared schemas of the files encdec reads back, beside the config's (fuzzed field by field above),
    found by enumeration, not listed by hand: every dataclass of the package handed to a function whose name
    starts with `read` (`read`, `read_part`, `read_pointer`, ...), so a file added later is walked too."""
    import ast
    import importlib

    found = {}
    for path in sorted((ROOT / "src" / "encdec").rglob("*.py")):
        module = None
        for node in ast.walk(ast.parse(path.read_text())):
            name = getattr(node.func, "id", getattr(node.func, "attr", "")) if isinstance(node, ast.Call) else ""
            if not name.startswith("read"):
                continue
            for arg in [a for a in node.args if isinstance(a, ast.Name)]:
                dotted = ".".join(path.relative_to(ROOT / "src").with_suffix("").parts).removesuffix(".__init__")
                module = module or importlib.import_module(dotted)
                value = getattr(module, arg.id, None)
                if isinstance(value, type) and dataclasses.is_dataclass(value) and value is not RunConfig:
                    found |= nested_schemas(value)
    return [found[name] for name in sorted(found)]


def nested_schemas(schema: type) -> dict[str, type]:
    """`schema` and the dataclasses its fields hold (a saved state's TrainState, LossScale), by name."""
    found = {schema.__qualname__: schema}
    for hint in typing.get_type_hints(schema).values():
        for inner in (hint, *typing.get_args(hint)):
            if isinstance(inner, type) and dataclasses.is_dataclass(inner) and inner.__qualname__ not in found:
                found |= nested_schemas(inner)
    return found


def test_the_enumerated_file_schemas_hold_every_one_a_checkpoint_run_or_data_directory_reads():
    names = {schema.__name__ for schema in file_schemas()}
    listed = {"BasePointer", "AdapterConfig", "TextFormat", "TeacherPointer", "DataPosition", "ShardManifest"}
    listed |= {"SavedState", "TrainState", "LossScale", "TokenizerManifest", "ExperimentFile", "SummaryFile"}
    listed |= {"ModelConfig", "ObjectiveSection"}
    assert listed <= names, listed - names


@pytest.mark.parametrize("schema", file_schemas(), ids=lambda cls: cls.__name__)
@FUZZ
@given(data=st.data())
def test_every_file_schema_given_any_fields_is_read_or_refused_in_one_sentence(schema, data):
    names = [f.name for f in dataclasses.fields(schema)] + ["unknown", "1"]
    keys = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    values = {key: data.draw(anything) for key in keys}  # drawn before the work is counted
    ends_well(lambda: read(schema, values))


GOOD_STATE = {
    "train": {"step": 1, "tokens": 10, "elapsed": 0.5, "best_val": 3.0, "evals_since_best": 0},
    "data": {"objective": "ul2", "seed": 7, "epoch": 0, "step": 1},
}


def mutations(good: dict) -> st.SearchStrategy:
    """`good` with one value somewhere replaced by anything, or one key dropped or added."""

    def mutate(draw_path, value, drop):
        copy = json.loads(json.dumps(good))
        node = copy
        for part in draw_path[:-1]:
            node = node[part]
        if drop:
            node.pop(draw_path[-1], None)
        else:
            node[draw_path[-1]] = value
        return copy

    misspelt = (next(iter(good)), "stepz")  # an unknown key in the first section
    paths = [(a, b) for a in good for b in good[a]] + [(a,) for a in good] + [("extra",), misspelt]
    return st.builds(mutate, st.sampled_from(paths), anything, st.booleans())


@FUZZ
@given(state=st.one_of(mutations(GOOD_STATE), anything))
def test_any_state_json_is_read_or_refused_in_one_sentence(state):
    checkpoint = CheckpointDir(Path("/nonexistent/checkpoints/step_00000001"))
    ends_well(lambda: read_saved_state(state, checkpoint))


@FUZZ
@given(
    generation=st.one_of(
        st.dictionaries(
            st.sampled_from(["num_beams", "max_new_tokens", "top_k", "temperature", "do_sample", "bad_words_ids", "x"]),
            anything,
            max_size=3,
        ),
        anything,
    )
)
def test_any_generation_json_is_read_or_refused_in_one_sentence(generation, tmp_path_factory):
    checkpoint = CheckpointDir(tmp_path_factory.mktemp("step_00000001"))
    (checkpoint.path / "generation.json").write_text(json.dumps(generation))
    ends_well(lambda: read_generation(checkpoint))


GOOD_DESCRIPTION = {
    "model": ModelConfig(vocab_size=300, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2).to_dict(),
    "text": {
        "source_template": "summarize: {source}",
        "target_template": "{target}",
        "mode_tokens": False,
        "padding_side": "right",
        "source_length": 512,
        "languages": [{"src_lang": "eng_Latn", "tgt_lang": "deu_Latn"}, {"src_lang": "deu_Latn", "tgt_lang": None}],
    },
    "adapter": {
        "lora": {"r": 8, "lora_alpha": 16.0, "lora_dropout": 0.0, "target_modules": ["q", "v"]},
        "train_only": [],
    },
}


@FUZZ
@given(description=st.one_of(mutations(GOOD_DESCRIPTION), anything))
def test_any_checkpoint_description_is_read_or_refused_in_one_sentence(description, tmp_path_factory):
    """model.json, text.json and adapter.json, the parts a checkpoint is opened by, whatever they hold."""
    from encdec.runs.description import read_description

    checkpoint = CheckpointDir(tmp_path_factory.mktemp("step_00000001"))
    for part, name in (("model", "model.json"), ("text", "text.json"), ("adapter", "adapter.json")):
        held = description.get(part) if isinstance(description, dict) else description
        (checkpoint.path / name).write_text(json.dumps(held))
    ends_well(lambda: read_description(checkpoint))


POINTED = {"kind": "run", "source": "/runs/teacher/checkpoints/step_00000004", "sha256": "0" * 64}
GOOD_POINTERS = {"base": {"init_from": "runs/base", **POINTED}, "teacher": {"teacher": "runs/teacher", **POINTED}}


@FUZZ
@given(pointers=st.one_of(mutations(GOOD_POINTERS), anything))
def test_any_pointer_json_is_read_or_refused_in_one_sentence(pointers, tmp_path_factory):
    """base.json (a LoRA run's base) and teacher.json (a distilled run's teacher), whatever they hold."""
    from encdec.runs.adapter import read_base
    from encdec.training.distill import read_teacher

    checkpoint = CheckpointDir(tmp_path_factory.mktemp("step_00000001"))
    for part, read_part in (("base", read_base), ("teacher", read_teacher)):
        held = pointers.get(part) if isinstance(pointers, dict) else pointers
        (checkpoint.path / f"{part}.json").write_text(json.dumps(held))
        ends_well(lambda read_part=read_part: read_part(checkpoint))


@pytest.fixture(scope="module")
def pointed_tree(tmp_path_factory) -> Path:
    """What a pointer's source may name: a teacher run's checkpoint, a Hugging Face directory, a symlink to
    each, a file, and a directory that is no checkpoint (its real path: no link above it either)."""
    import os

    root = Path(os.path.realpath(tmp_path_factory.mktemp("pointed")))
    (root / "teacher" / "checkpoints" / "step_00000004").mkdir(parents=True)
    (root / "hf").mkdir()
    (root / "file").write_text("not a directory\n")
    (root / "teacher" / "checkpoints" / "file").write_text("not a directory\n")
    (root / "link").symlink_to(root / "teacher")
    (root / "hf_link").symlink_to(root / "hf")
    (root / "teacher" / "checkpoints" / "step_00000009").symlink_to(root / "teacher" / "checkpoints" / "step_00000004")
    return root


COMPONENTS = ["teacher", "checkpoints", "step_00000004", "step_00000009", "hf", "hf_link", "link", "file"]
PATH_PARTS = st.lists(st.sampled_from([*COMPONENTS, "..", ".", "", "~", "x\0y", "gone"]), max_size=5)


@FUZZ
@given(parts=PATH_PARTS, absolute=st.booleans(), kind=st.sampled_from(["run", "hf"]))
def test_a_pointer_source_is_read_only_as_the_real_directory_encdec_wrote(pointed_tree, parts, absolute, kind):
    """Whatever path a pointer's source holds, it is read back only as encdec writes one (the real path of a
    directory: absolute, no '.', '..' or symlink on the way, for a run a checkpoint directory in checkpoints/),
    or refused in one sentence; a source that is gone is read (its name is resolved again)."""
    import os

    from encdec.runs.adapter import read_base
    from encdec.training.distill import read_teacher

    source = "/".join([str(pointed_tree)] * absolute + parts) or "."
    checkpoint = CheckpointDir(pointed_tree / "teacher" / "checkpoints" / "step_00000004")
    for part, read_part, name in (("base", read_base, "init_from"), ("teacher", read_teacher, "teacher")):
        pointer = {name: "runs/x", "kind": kind, "source": source, "sha256": "0" * 64}
        (checkpoint.path / f"{part}.json").write_text(json.dumps(pointer))
        read = ends_well(lambda read_part=read_part: read_part(checkpoint))
        if isinstance(read, EncdecError):
            continue
        held = read.source
        assert held.startswith("/") and os.path.normpath(held) == held and os.path.realpath(held) == held
        assert not os.path.lexists(held) or (os.path.isdir(held) and not os.path.islink(held))
        if kind == "run":
            assert Path(held).parent.name == "checkpoints" and Path(held).name.startswith("step_")


@pytest.mark.parametrize(
    "source, says",
    [
        ("runs/teacher/checkpoints/step_00000004", "must be an absolute path"),
        ("ROOT/teacher/../teacher/checkpoints/step_00000004", "must be an absolute path"),
        ("ROOT/teacher/./checkpoints/step_00000004", "must be an absolute path"),
        ("ROOT/link/checkpoints/step_00000004", "passes through a symlink"),
        ("ROOT/teacher/checkpoints/step_00000009", "passes through a symlink"),
        ("ROOT/teacher/checkpoints/file", "is not a directory"),
        ("ROOT/hf", "is not a checkpoint directory"),
        ("ROOT/teacher\0/checkpoints/step_00000004", "must be an absolute path"),
    ],
)
def test_a_pointer_source_breaking_a_path_rule_is_refused_naming_the_pointer(pointed_tree, source, says):
    from encdec.training.distill import read_teacher

    checkpoint = CheckpointDir(pointed_tree / "teacher" / "checkpoints" / "step_00000004")
    pointer = {
        "teacher": "runs/x",
        "kind": "run",
        "source": source.replace("ROOT", str(pointed_tree)),
        "sha256": "0" * 64,
    }
    (checkpoint.path / "teacher.json").write_text(json.dumps(pointer))
    error = ends_well(lambda: read_teacher(checkpoint))
    assert isinstance(error, EncdecError) and says in str(error) and "teacher.json" in str(error), error


def test_a_pointer_source_as_encdec_writes_it_is_read_and_one_that_is_gone_too(pointed_tree):
    from encdec.runs.adapter import read_base

    checkpoint = CheckpointDir(pointed_tree / "teacher" / "checkpoints" / "step_00000004")
    for kind, source in (("run", "teacher/checkpoints/step_00000004"), ("hf", "hf"), ("hf", "gone/hf")):
        pointer = {"init_from": "org/name", "kind": kind, "source": f"{pointed_tree}/{source}", "sha256": "0" * 64}
        (checkpoint.path / "base.json").write_text(json.dumps(pointer))
        assert read_base(checkpoint).source == f"{pointed_tree}/{source}"


YAML_SCALARS = ["nan", ".inf", "-1", "0", "1e30", "10**9", "'0.5'", "yes", "~", "[1, 2]", "{a: 1}", "x", "1e-4", "3"]


@functools.cache
def size_imported() -> None:
    """`encdec size` run once before any run is counted: the modules it imports on first use (torch's among them,
    1.6 million calls) are not a command line's work."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["size", str(ROOT / "configs" / "tiny.yaml")]) == 0


@settings(max_examples=40, deadline=None)
@given(
    key=st.sampled_from(FIELDS),
    value=st.one_of(st.sampled_from(YAML_SCALARS), st.integers(-(10**20), 10**20).map(str)),
    preset=st.sampled_from([None, "t5-small", "rot5-tiny", "gpt2", "nonsense"]),
)
def test_cli_sample_exits_0_or_with_one_sentence(key, value, preset):
    """`encdec size` reads a config, its --set overrides and a model section, and counts parameters:
    a command line of the whole schema that builds nothing."""
    import contextlib
    import io

    argv = ["size", str(ROOT / "configs" / "tiny.yaml"), "--set", f"{key}={value}"]
    if preset:
        argv += ["--set", f"model.preset={preset}"]
    size_imported()
    err = io.StringIO()
    built = torch.nn.Module.__init__
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), counted_calls(built) as work:
        code = main(argv)
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert code == 0 or (len(lines) == 1 and lines[0].startswith("encdec: error: ")), err.getvalue()
    assert "Traceback" not in err.getvalue()
    modules = work.calls_of(built)
    assert work.calls < CALLS + CALLS_PER_MODULE * modules, f"{work.calls:,} calls for {modules:,} modules"
