"""The sign test beside `eval.compare --changes`: exact two-sided binomial p-values, checked against the tables."""

import pytest

from common.stats import sign_test_p


@pytest.mark.parametrize("gained, lost, p", [
    (0, 0, 1.0),           # nothing changed: no evidence either way
    (1, 0, 1.0),
    (0, 2, 0.5),           # two tasks lost and none gained: what a coin does half the time
    (3, 2, 1.0),
    (1, 5, 0.21875),       # 2 x (1 + 6) / 64
    (6, 0, 0.03125),       # 2 / 64: six of six one way
    (0, 10, 0.001953125),  # 2 / 1024
    (8, 2, 0.109375),      # 2 x (1 + 10 + 45) / 1024
])
def test_sign_test_p_is_the_exact_two_sided_binomial(gained, lost, p):
    assert sign_test_p(gained, lost) == pytest.approx(p, abs=1e-12)
    assert sign_test_p(lost, gained) == sign_test_p(gained, lost)
