"""Chinchilla compute-optimal sizing (Hoffmann et al. 2022), as ROT5 used it (SEEDS.md section 2).

    N_opt(C) = 0.6 * C^0.45      optimal parameters for C training FLOPs
    D_opt(C) = 0.3 * C^0.55      optimal training tokens for C training FLOPs

Given any one of C, D or N, the other two follow from these fits. The common
approximation C ~ 6 * N * D (forward and backward FLOPs of a dense transformer)
is reported beside them; the fits give N * D = 0.18 C, so 6 * N * D = 1.08 C.
"""

from dataclasses import dataclass

from encdec.errors import ConfigError

N_COEF, N_EXP = 0.6, 0.45
D_COEF, D_EXP = 0.3, 0.55


@dataclass
class ChinchillaPoint:
    flops: float
    params: float
    tokens: float

    @property
    def flops_6nd(self) -> float:
        return 6.0 * self.params * self.tokens


def chinchilla(flops: float | None = None, tokens: float | None = None, params: float | None = None) -> ChinchillaPoint:
    """The compute-optimal point from exactly one of FLOPs, tokens or parameters."""
    given = [x for x in (flops, tokens, params) if x is not None]
    if len(given) != 1 or given[0] <= 0:
        raise ConfigError("give exactly one positive value: FLOPs, tokens or parameters")
    if tokens is not None:
        flops = (tokens / D_COEF) ** (1 / D_EXP)
    elif params is not None:
        flops = (params / N_COEF) ** (1 / N_EXP)
    return ChinchillaPoint(flops, N_COEF * flops**N_EXP, D_COEF * flops**D_EXP)
