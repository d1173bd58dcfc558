"""Name patterns (lora.target_modules as a regular expression): whatever the pattern, a match takes steps bounded
by the program's size times the name's length, picks what Python's re picks, or is refused in one sentence."""

import re
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encdec.errors import ConfigError
from encdec.models.name_patterns import MAX_PATTERN, MAX_PATTERNS, NamePattern, NamePatterns
from encdec.schema import read
from encdec.training.run_config import RunConfig

KEY = "lora.target_modules"
NAMES = [
    "encoder.blocks.0.self_attn.q",
    "encoder.blocks.1.ffn.wi_0",
    "decoder.blocks.11.cross_attn.v",
    "decoder.blocks.3.self_attn.o",
    "decoder.final_norm",
    "lm_head",
    "q",
    "",
]


def within_bound(matcher: NamePattern, name: str) -> bool:
    """Match `name` with a fresh count: True where its steps stay within 2 x states x (characters + 2)."""
    matcher.steps, matcher.cache, matcher.cached = 0, {}, 0
    matcher.fullmatch(name)
    return matcher.steps <= 2 * len(matcher.program) * (len(name) + 2)


@pytest.mark.parametrize(
    "pattern, name",
    [
        ("(a+)+$", "a" * 5_000 + "!"),
        ("(x+x+)+y", "x" * 5_000),
        ("(a|aa)+$", "a" * 5_000 + "b"),
        ("(a|a?)+b", "a" * 5_000),
        ("(.*a){20}", "a" * 5_000 + "!"),
        (r"(\w+\s?)+$", "word " * 1_000 + "!"),
        ("(.*.*)*Z", "decoder.blocks.11.cross_attn.v" * 100),
        (".*" * 100 + "=", "x" * 5_000),
        ("((a*)*)*b", "a" * 5_000),
    ],
)
def test_catastrophic_backtracking_patterns_match_in_bounded_steps(pattern, name):
    """Each takes Python's re hours or more on these names; here the steps are counted, not timed."""
    matcher = NamePattern(pattern, KEY)
    assert within_bound(matcher, name)
    assert not matcher.fullmatch(name)


PEFT_PATTERNS = [
    r".*\.(q|v)$",
    "q|v",
    ".*decoder.*(q|k|v|o)",
    r"encoder\..*\.(q|v)",
    r".*\.(self|cross)_attn\.[qkv]",
    r"decoder\.blocks\.\d+\.cross_attn\.o",
    r".*blocks\.(0|1)\..*",
    r"(?:en|de)coder\.blocks\.[0-9]{1,2}\.ffn\.wi(_\d)?",
    r"^lm_head$",
    r".*?_attn\.[^k]",
    r"\w+\.\w+\.\d+\.self_attn\.\w",
]


@pytest.mark.parametrize("pattern", PEFT_PATTERNS)
def test_the_patterns_peft_users_write_pick_what_re_picks(pattern):
    matcher = NamePattern(pattern, KEY)
    assert [n for n in NAMES if matcher.fullmatch(n)] == [n for n in NAMES if re.fullmatch(pattern, n)]


@pytest.mark.parametrize(
    "pattern, says",
    [
        (r"(a)\1", r"has \1 (a backreference) at character 4"),
        ("(?=decoder).*", "has (?= (a lookaround, flag or named group) at character 1"),
        ("(?<!x)q", "has (?< (a lookaround, flag or named group)"),
        ("(?i)Q", "has (?i (a lookaround, flag or named group)"),
        ("(?P<attn>q)", "has (?P (a lookaround, flag or named group)"),
        ("q*+", "has a possessive quantifier at character 3"),
        ("q**", "has a repetition repeated"),
        ("+q", "has a + that repeats nothing at character 1"),
        ("(q", "has a ( it never closes"),
        ("[qv", "has a [ it never closes"),
        ("q)", "has a ) that closes no group"),
        ("q{3,2}", "has a count whose minimum exceeds its maximum"),
        ("q{100000}", "has a count above 1000"),
        (r"\bq", r"has \b (an escape it does not take)"),
        ("q\\", "has a \\ that escapes nothing"),
        ("(" * 17 + "q" + ")" * 17, "has groups nested deeper than 16"),
        ("(.{1000}){5}", "repeats to more than 4,096 states"),
        ("q" * (MAX_PATTERN + 1), f"is a pattern of {MAX_PATTERN + 1} characters; at most {MAX_PATTERN}"),
    ],
)
def test_what_the_subset_leaves_out_is_one_sentence_naming_the_key(pattern, says):
    with pytest.raises(ConfigError) as error:
        NamePattern(pattern, KEY)
    message = str(error.value)
    assert message.startswith(KEY) and says in message and "\n" not in message, message


@pytest.mark.parametrize(
    "section, value, says",
    [
        ({"lora": {"target_modules": "(?=x)q"}}, None, "lora.target_modules '(?=x)q' has (?="),
        ({"lora": {"target_modules": ["q"] * (MAX_PATTERNS + 1)}}, None, f"lists {MAX_PATTERNS + 1} patterns"),
        ({"lora": {"target_modules": ["q", "x" * 5_000]}}, None, "lora.target_modules[1] is 5,000 characters long"),
        ({"training": {"train_only": ["*" * 5_000]}}, None, "training.train_only[0] is 5,000 characters long"),
    ],
)
def test_the_config_refuses_unbounded_patterns_when_read(section, value, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        read(RunConfig, section)


def test_a_config_takes_a_regular_expression_of_the_subset():
    lora = {"lora": {"target_modules": r".*\.(q|v)$"}, "training": {"init_from": "runs/base"}}
    assert read(RunConfig, lora).lora.target_modules == r".*\.(q|v)$"
    assert NamePatterns(regex=True).check(["q", "v"], KEY, list) is None


PIECES = [*"ab.q_1-", r"\.", r"\d", r"\w", r"\s", r"\W", "[ab]", "[^a]", "[a-c]", "[]a]", r"[\d.]", "[-a]", "[a-]"]
PIECES += ["^", "$", r"\A", r"\Z", "(", ")", "(?:", "|", "*", "+", "?", "*?", "{2}", "{,2}", "{1,}", "{}", "{", "}"]
PIECES += ["]", r"\{", "(?=", r"\1", "(?i)", "*+", "{1001}", "\\"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=st.lists(st.sampled_from(PIECES), max_size=12).map("".join),
    names=st.lists(st.text(alphabet="ab.q_1 -{}]", max_size=8), min_size=1, max_size=4),
)
def test_any_pattern_is_refused_in_one_sentence_or_matches_as_re_does_in_bounded_steps(pattern, names):
    """Names of at most 8 characters keep Python's re, the reference, quick; the steps are ours, bounded."""
    try:
        matcher = NamePattern(pattern, KEY)
    except ConfigError as error:
        assert str(error).startswith(KEY) and "\n" not in str(error)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # re's "possible nested set" for [[
        expected = re.compile(pattern)  # what the subset takes, re takes
    for name in names:
        assert matcher.fullmatch(name) == (expected.fullmatch(name) is not None), name
        assert within_bound(matcher, name * 100)
