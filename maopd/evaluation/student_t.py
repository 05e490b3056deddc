"""Two-sided 95% Student-t intervals of a mean, without scipy.

For n values with mean x̄ and sample standard deviation s (n − 1 in the denominator), the interval
is x̄ ± t_{0.975, n−1} · s / √n. It needs n ≥ 2: one value has no spread to estimate.
"""

from __future__ import annotations

import math

import numpy as np

# t_{0.975, ν}, the 97.5th percentile of Student's t with ν degrees of freedom, to three decimals.
T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
}
Z975 = 1.959963984540054  # the normal 97.5th percentile, the limit as ν grows


def t_quantile(dof: int) -> float:
    """t_{0.975, dof}: the table up to 30 degrees of freedom, beyond it the Cornish–Fisher expansion
    of t in powers of 1/ν around the normal quantile (Abramowitz & Stegun 26.7.5), exact to far below
    the table's rounding there."""
    if dof < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {dof}")
    if dof in T975:
        return T975[dof]
    z = Z975
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / dof**power for power, term in enumerate(terms, start=1))


def t_half_width(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """t_{0.975, n−1} · s / √n along ``axis`` (n values there, n ≥ 2): the half-width of the interval."""
    n = values.shape[axis]
    if n < 2:
        raise ValueError(f"a t-interval needs at least 2 values, got {n}")
    return t_quantile(n - 1) * values.std(axis=axis, ddof=1) / math.sqrt(n)
