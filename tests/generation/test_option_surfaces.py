"""Generation options are declared once, in GenerationConfig's fields: the command line's flags (generate and
evaluate), a server request's parameters and the generation_config.json keys read and written are what the
fields' metadata exposes, and one value means the same GenerationConfig on every surface that takes it."""

import dataclasses
import json
from pathlib import Path

import pytest

from encdec.cli import build_parser
from encdec.cli.options import flag_of, given_generation_options
from encdec.generation.config import CLI, HF, HTTP, GenerationConfig
from encdec.interop.generation_config import GENERATION_KEYS, checked_defaults, read_generation_defaults
from encdec.serving.requests import OPTIONS, Limits, parse_body

# option -> (a value other than its default, the options it needs beside it to be valid)
SAMPLES = {
    "max_new_tokens": (33, {}),
    "min_new_tokens": (3, {}),
    "num_beams": (4, {}),
    "do_sample": (True, {}),
    "temperature": (0.7, {}),
    "top_k": (7, {}),
    "top_p": (0.9, {}),
    "repetition_penalty": (1.3, {}),
    "no_repeat_ngram_size": (2, {}),
    "length_penalty": (0.6, {}),
    "early_stopping": ("never", {"num_beams": 4}),
    "num_return_sequences": (2, {"num_beams": 4}),
    "bad_words_ids": ([[5, 6]], {}),
    "forced_bos_token_id": (3, {}),
    "forced_eos_token_id": (2, {}),
    "src_lang": ("eng_Latn", {}),
    "tgt_lang": ("fra_Latn", {}),
    "seed": (11, {"do_sample": True}),
    "min_p": (0.05, {}),
    "typical_p": (0.8, {}),
    "epsilon_cutoff": (0.001, {}),
    "eta_cutoff": (0.002, {}),
    "num_beam_groups": (2, {"num_beams": 4, "diversity_penalty": 0.5}),
    "diversity_penalty": (0.5, {"num_beams": 4, "num_beam_groups": 2}),
    "compile": (True, {}),
    "suppress_tokens": ([5, 6], {}),
    "begin_suppress_tokens": ([5], {}),
    "decoder_prompt": ([0, 5], {}),
    "language": ("fr", {}),
    "task": ("translate", {}),
    "return_timestamps": (True, {}),
    "prompt_ids": ([7, 8], {}),
    "compression_ratio_threshold": (2.4, {}),
    "logprob_threshold": (-1.0, {}),
    "no_speech_threshold": (0.6, {}),
    "mbr": (4, {"do_sample": True}),
    "mbr_metric": ("bleu", {"do_sample": True, "mbr": 4}),
}


def declared(surface: str) -> set[str]:
    return {f.name for f in dataclasses.fields(GenerationConfig) if surface in f.metadata.get("exposed", ())}


def generation_flags(command: str) -> set[str]:
    """The GenerationConfig fields `encdec COMMAND` takes a flag for, each spelled --NAME."""
    subcommands = build_parser()._subparsers._group_actions[0].choices
    names = {f.name for f in dataclasses.fields(GenerationConfig)}
    actions = [a for a in subcommands[command]._actions if a.dest in names]
    assert all(a.option_strings == [flag_of(a.dest)] for a in actions)
    return {a.dest for a in actions}


def test_each_surface_takes_what_the_fields_expose_to_it():
    assert generation_flags("generate") == generation_flags("evaluate") == declared(CLI)
    assert set(OPTIONS) == declared(HTTP)
    assert set(GENERATION_KEYS) == declared(HF)
    assert set(SAMPLES) == declared(CLI) | declared(HTTP) | declared(HF)  # a new exposed field needs a sample here
    assert all(f.metadata["help"] for f in dataclasses.fields(GenerationConfig) if f.metadata.get("exposed"))


def from_command_line(options: dict) -> GenerationConfig:
    argv = ["generate", "model"]
    for name, value in options.items():
        written = ",".join(map(str, value)) if isinstance(value, list) else str(value)  # a list: 0,5
        argv += [flag_of(name)] if value is True else [flag_of(name), written]
    return GenerationConfig.from_options(**given_generation_options(build_parser().parse_args(argv)))


def from_request(options: dict) -> GenerationConfig:
    body = json.dumps({"inputs": "a text", "parameters": options}).encode()
    return GenerationConfig.from_options(**parse_body(body, Limits()).options)


def from_generation_config_json(options: dict) -> GenerationConfig:
    return GenerationConfig(**checked_defaults(read_generation_defaults({}, options), Path("generation_config.json")))


SURFACES = {CLI: from_command_line, HTTP: from_request, HF: from_generation_config_json}


@pytest.mark.parametrize("name", SAMPLES)
def test_a_value_is_the_same_generation_config_on_every_surface_that_takes_it(name):
    value, beside = SAMPLES[name]
    expected = GenerationConfig(**beside, **{name: value})
    assert value != next(f.default for f in dataclasses.fields(GenerationConfig) if f.name == name)
    surfaces = [surface for surface in SURFACES if name in declared(surface)]
    assert surfaces
    for surface in surfaces:
        assert all(other in declared(surface) for other in beside), (name, surface)
        assert SURFACES[surface]({**beside, name: value}) == expected, surface


def test_fallback_temperatures_are_the_same_generation_config_on_every_surface():
    expected = GenerationConfig(temperature=[0.0, 0.2, 1.0])
    for surface, made in SURFACES.items():
        assert made({"temperature": [0.0, 0.2, 1.0]}) == expected, surface
