"""Numbers written as text (a command-line option, a --set value, a YAML or JSON scalar) are bounded in length before
they are converted and finite and within their declared range after, or refused in one sentence: never a traceback,
an int() of thousands of digits, or an inf printed as a result.

The options are found by walking encdec's own parser (every option whose type reads a number) and the config keys by
walking the run config's schema, so a new option or key is covered without being listed here."""

import argparse
import dataclasses
import types
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encdec.cli import build_parser, main
from encdec.errors import ConfigError
from encdec.generation import GenerationConfig
from encdec.models import ModelConfig
from encdec.schema import MAX_NUMBER_CHARS, Range, load_json, load_yaml, number
from encdec.sizing import MAX_TOKENS
from encdec.training.run_config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
HUGE = "1" * 5_000  # past Python's 4,300-digit int() limit
BAD_OPTION_VALUES = {"5,000 digits": HUGE, "1e308": "1e308", "-1e308": "-1e308", "nan": "nan", "inf": "inf"}
BAD_YAML_VALUES = {**BAD_OPTION_VALUES, "nan": ".nan", "inf": ".inf"}  # YAML's spelling of them


def reads_a_number(convert) -> bool:
    """Whether an option's argparse type turns some small number's text into a number (or a list of them)."""
    for text in ("1", "2", "8", "0.5"):
        try:
            value = convert(text)
        except Exception:
            continue
        items = value if isinstance(value, list) else [value]
        if items and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            return True
    return False


def numeric_options() -> list[tuple[tuple[str, ...], str]]:
    """(subcommand words, option) of every option of every subcommand whose type reads a number."""
    found = []

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*words, name))
            elif action.option_strings and action.type is not None and reads_a_number(action.type):
                found.append((words, max(action.option_strings, key=len)))

    walk(build_parser(), ())
    return found


OPTIONS = numeric_options()


def one_refusal(argv: list[str], capsys) -> str:
    """Run the CLI in this process (an exception other than encdec's own fails the test); its one stderr line."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("encdec: error: "), (argv[-1][:80], err)
    assert "Traceback" not in err
    return lines[0]


def test_the_walk_finds_the_numeric_options_of_every_kind():
    found = {(" ".join(words), option) for words, option in OPTIONS}
    for expected in [("size", "--tokens"), ("generate", "--temperature"), ("average", "--steps")]:
        assert expected in found
    assert {("data prepare", "--seed"), ("data inspect", "--num-examples"), ("serve", "--port")} <= found
    assert ("generate", "--output") not in found and ("train", "--out") not in found


@pytest.mark.parametrize("words, option", OPTIONS, ids=[" ".join((*w, o)) for w, o in OPTIONS])
@pytest.mark.parametrize("text", BAD_OPTION_VALUES.values(), ids=BAD_OPTION_VALUES.keys())
def test_every_numeric_option_refuses_an_unbounded_number_in_one_sentence_naming_it(words, option, text, capsys):
    assert option in one_refusal([*words, f"{option}={text}"], capsys)


def leaves(hint) -> list:
    """The types a field's annotation allows, through Annotated and unions: `Annotated[int, Range(1)] | None` ->
    [int, NoneType]."""
    if typing.get_origin(hint) is typing.Annotated:
        return leaves(typing.get_args(hint)[0])
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [leaf for arg in typing.get_args(hint) for leaf in leaves(arg)]
    return [hint]


def numeric_fields(cls: type, prefix: str = "") -> list[tuple[str, dict[str, str]]]:
    """(dotted key, the --set values its section needs beside it) of every int or float field of `cls`, nested
    sections recursed (a list of sections, data.mixture, is fuzzed elsewhere)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = dataclasses.fields(cls)
    needed = {prefix + f.name: "x" for f in fields if dataclasses.MISSING is f.default is f.default_factory}
    found = {}
    for f in fields:
        for leaf in leaves(hints[f.name]):
            if dataclasses.is_dataclass(leaf):
                found |= {key: {**needed, **more} for key, more in numeric_fields(leaf, f"{prefix}{f.name}.")}
            elif leaf in (int, float):
                found[prefix + f.name] = needed
    return list(found.items())


CONFIG_KEYS = [(k, v) for k, v in numeric_fields(RunConfig) if not k.startswith("model")]
CONFIG_KEYS += [(f"model.{k}", {f"model.{n}": x for n, x in v.items()}) for k, v in numeric_fields(ModelConfig)]


def test_the_walk_finds_the_numeric_keys_of_every_section():
    keys = {key for key, _ in CONFIG_KEYS}
    assert {"training.seed", "optimizer.lr", "training.distill.alpha", "lora.r", "model.positions.rope_theta"} <= keys
    assert {"model.research.embedding_loss_coeff", "model.d_model"} <= keys
    assert dict(CONFIG_KEYS)["training.distill.temperature"] == {"training.distill.teacher": "x"}


@pytest.mark.parametrize("key, needed", CONFIG_KEYS, ids=[k for k, _ in CONFIG_KEYS])
@pytest.mark.parametrize("text", BAD_YAML_VALUES.values(), ids=BAD_YAML_VALUES.keys())
def test_every_numeric_config_key_refuses_an_unbounded_number_through_set(key, needed, text, capsys):
    argv = ["size", str(TINY), *(w for k, v in needed.items() if k != key for w in ("--set", f"{k}={v}"))]
    line = one_refusal([*argv, "--set", f"{key}={text}"], capsys)
    assert key.rpartition(".")[2] in line


def declared_floats(cls: type, prefix: str = "", seen: frozenset = frozenset()) -> list[tuple[str, Range | None]]:
    """(key, its Range) of every float field of `cls` and of the sections and lists in it."""
    out = []
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        todo = [hint]
        while todo:
            option = todo.pop()
            origin, args = typing.get_origin(option), typing.get_args(option)
            if origin in (typing.Union, types.UnionType, list):
                todo += args
            elif origin is typing.Annotated and args[0] in (float, list[float]):  # a list's rule: Length(each=...)
                ranges = [getattr(rule, "each", rule) for rule in args[1:]]
                out.append((prefix + name, next((r for r in ranges if isinstance(r, Range)), None)))
            elif origin is typing.Annotated:
                todo.append(args[0])
            elif option is float:
                out.append((prefix + name, None))
            elif dataclasses.is_dataclass(option) and option not in seen:
                out += declared_floats(option, f"{prefix}{name}.", seen | {cls})
    return out


@pytest.mark.parametrize("schema", [RunConfig, ModelConfig, GenerationConfig], ids=lambda c: c.__name__)
def test_every_float_a_user_sets_declares_both_bounds(schema):
    """Finite is not enough: 1e308 as a temperature or a loss coefficient is a number and still a mistake."""
    unbounded = [key for key, rule in declared_floats(schema) if rule is None or rule.lo is None or rule.hi is None]
    assert unbounded == []


def test_size_refuses_a_budget_whose_sizing_overflows_and_sizes_the_largest_it_takes(capsys):
    assert "--tokens must be from 0.3 to 9.49e+15" in one_refusal(["size", "--tokens", "1e308"], capsys)
    assert "--params must be from" in one_refusal(["size", "--params", "1e200"], capsys)
    assert main(["size", "--tokens", repr(MAX_TOKENS)]) == 0
    assert "inf" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "text, says",
    [
        ("training:\n  seed: " + HUGE + "\n", "holds a number of 5,000 characters at line 2"),
        ("training: {seed: 0x" + "f" * 200 + "}\n", "holds a number of 202 characters at line 1"),
        ("training: {steps: !!int 12ab}\n", "holds '12ab' at line 1, which is not a number"),
        ("training: {deterministic: !!bool maybe}\n", "holds 'maybe' at line 1, which is not a boolean"),
        ("data: {max_documents: !!timestamp 2020-13-45}\n", "holds '2020-13-45' at line 1, which is not a date"),
        ("optimizer: {lr: 1e400}\n", "optimizer.lr must be a finite number, got inf"),
    ],
)
def test_a_config_file_number_out_of_bounds_is_one_sentence(tmp_path, text, says):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=None) as error:
        load_config(path)
    assert says in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("body", ['{"step": ' + HUGE + "}", '{"loss": 1.' + HUGE + "}"])
def test_a_json_run_file_number_of_thousands_of_digits_is_one_sentence(tmp_path, body):
    path = tmp_path / "state.json"
    path.write_text(body)
    with pytest.raises(ConfigError, match=f"state.json {path} holds a number of 5,00[02] characters"):
        load_json(path, "state.json")


number_texts = st.text(alphabet="0123456789_+-.eE xn", max_size=MAX_NUMBER_CHARS * 3)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(number_texts, st.integers().map(str), st.floats().map(repr), st.text(max_size=30)))
def test_any_option_text_is_a_number_a_word_or_one_sentence(text):
    """What every numeric option shares: the length bound comes before int() or float() sees the text."""
    try:
        value = number(text, "--x")
    except ConfigError as error:
        assert len(text) > MAX_NUMBER_CHARS and str(error).startswith("--x takes numbers of at most")
        return
    assert isinstance(value, (int, float, str))
    assert len(text) <= MAX_NUMBER_CHARS or isinstance(value, str)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(number_texts, st.integers().map(str)), tag=st.sampled_from(["", "!!int ", "!!float ", "!!bool "]))
def test_any_yaml_number_is_a_value_or_one_sentence(text, tag):
    try:
        load_yaml(f"x: {tag}{text}", "--set x's value")
    except ConfigError as error:
        assert "\n" not in str(error) and str(error).startswith("--set x's value ")
