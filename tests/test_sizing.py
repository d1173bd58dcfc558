import pytest

from encdec.errors import ConfigError
from encdec.sizing import chinchilla


def test_rot5_token_budget_gives_the_seeds_compute_and_48m_parameters():
    point = chinchilla(tokens=2 * 684_805_492)
    assert point.flops == pytest.approx(3.65e17, rel=0.002)
    assert round(point.params / 1e6) == 48


@pytest.mark.parametrize("given", ["flops", "tokens", "params"])
def test_each_input_round_trips_through_the_fits(given):
    point = chinchilla(flops=1e20)
    again = chinchilla(**{given: getattr(point, given)})
    assert again.flops == pytest.approx(1e20) and again.params == pytest.approx(point.params)
    assert again.flops_6nd == pytest.approx(6 * 0.18 * 1e20)


def test_exactly_one_value_is_required():
    with pytest.raises(ConfigError, match="exactly one positive value"):
        chinchilla(flops=1e20, tokens=1e9)
