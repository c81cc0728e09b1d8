"""Are the rounds of a sequential comparison alike? A test that can be asked after every round, and where a
sequence that is not alike changed.

``perfctl ab``'s confidence sequence (analysis/ab.py) assumes the rounds' log ratios are independent and
identically distributed; a program that slows a little at every run, or a machine that changes under one
command, breaks that, and a verdict read off such rounds speaks of no one state of the programs. Two tools:

- ``SimpleJumper``: the Simple Jumper conformal test martingale (Vovk, Petej, Nouretdinov, Ahlberg, Carlsson,
  Gammerman, "Retrain or not retrain: conformal test martingales for change-point detection", COPA 2021,
  PMLR 152:191-210, Algorithm 1) on the smoothed conformal p-values of the values themselves (Vovk,
  Nouretdinov, Gammerman, "Testing exchangeability on-line", ICML 2003: under exchangeability these
  p-values are independent and uniform on [0, 1]). Its capital is then a nonnegative martingale started at
  1, so by Ville's inequality it reaches 1/alpha at some round with probability at most alpha, however long
  the rounds run: the alarm may be asked after every round, as the confidence sequence is. It bets on the
  mean of the p-values (betting functions 1 + e (p - 1/2), e in {-1, 0, 1}): a drift or a step of the
  ratio's level makes each new round's value extreme among those before it and grows the capital; a
  spread that changes symmetrically (a machine noisier for a while) does not move that mean, and is left to
  the confidence sequence, which stays valid for the median under it.
- ``StretchTest``: a step (a program or the machine under one command changed at some round) is where the
  martingale is weakest: the rounds after it are alike among themselves, so each new one is extreme only
  against the share of rounds before the step, which fades, and a 10-round stretch before a step needs
  about 30 more rounds to be seen (a step of A/B 0.856 -> 0.731 at round 10 was settled "beyond" at round 30,
  unseen). So the rounds after each round s of a grid (10, 20, 40, ...) get a confidence sequence of their
  own median, at alpha_j (summing to the test's alpha), and the rounds are not alike once it no longer meets
  the running intersection of the comparison's own CS up to s. On alike rounds both cover the one median at
  every round with probability >= 1 - (alpha + sum alpha_j) (Howard & Ramdas 2022, Theorem 1: a CS covers
  at all times at once), so this test adds at most its alpha to the false "not alike" rate.
- ``change_point``: Pettitt's rank change point (A. N. Pettitt, "A non-parametric approach to the
  change-point problem", Applied Statistics 28(2), 1979, 126-135, section 2): the split of the rounds that
  most separates the values before it from those after, to say where the rounds changed.

Plain Python over math and bisect: ``perfctl ab`` asks after every round and never imports numpy.
"""

from __future__ import annotations

import bisect
import math
import random

# The jump rate J of Algorithm 1: the share of capital redistributed equally between the three bets before
# each round, so that the bet that pays after a change still holds some capital however long the rounds
# were alike before it. Vovk et al. use 0.01; on simulated steps and drifts 0.01 and 0.05 detect alike
# (bench/sequential.py, section 5), 0.2 detects a 1-sd step about three times later.
JUMP = 0.01
# The seed of the smoothing draws (ties broken at random, as the smoothed p-value needs): a fixed sequence is
# independent of the data, which is all validity asks, and a replay of stored rounds (the server replaying a
# fleet job) draws the same numbers as the agent did.
TIE_SEED = 0x28AB


def conformal_p_value(ordered: list[float], value: float, u: float) -> float:
    """The smoothed conformal p-value of ``value``, the newest of the values ``ordered`` (sorted, ``value``
    among them): (#{greater} + u #{equal}) / n with u uniform on [0, 1) (Vovk et al. 2003, section 2; the
    nonconformity score is the value itself, so a small p says "larger than the rounds before").

    >>> conformal_p_value([1.0, 2.0, 3.0], 3.0, 0.5), conformal_p_value([1.0, 2.0, 2.0], 2.0, 0.5)
    (0.16666666666666666, 0.3333333333333333)
    """
    n = len(ordered)
    below, up_to = bisect.bisect_left(ordered, value), bisect.bisect_right(ordered, value)
    return ((n - up_to) + u * (up_to - below)) / n


class SimpleJumper:
    """The Simple Jumper test martingale (Vovk et al. 2021, Algorithm 1) on a stream of p-values.

    Capital in three bets e = -1, 0, 1, each multiplied by 1 + e (p - 1/2) at every p-value after a share
    ``jump`` of the whole is redistributed equally among them. Kept as shares summing to 1 and the log of
    the whole, so that neither underflows over a long run.

    >>> jumper = SimpleJumper()
    >>> for p in [0.02] * 12: jumper.bet(p)
    >>> round(jumper.capital, 2)
    35.12
    """

    def __init__(self, jump: float = JUMP):
        if not 0 < jump < 1:
            raise ValueError(f"jump must be strictly between 0 and 1, got {jump!r}")
        self.jump = float(jump)
        self._shares = [1 / 3, 1 / 3, 1 / 3]
        self.log_capital = 0.0

    @property
    def capital(self) -> float:
        return math.exp(self.log_capital)

    def bet(self, p: float) -> None:
        if not 0 <= p <= 1:
            raise ValueError(f"a p-value must be in [0, 1], got {p!r}")
        spread = self.jump / 3
        shares = [(1 - self.jump) * share + spread for share in self._shares]
        shares = [share * (1 + e * (p - 0.5)) for share, e in zip(shares, (-1, 0, 1))]
        whole = sum(shares)
        self.log_capital += math.log(whole)
        self._shares = [share / whole for share in shares]


class AlikeTest:
    """The rounds so far, tested for alikeness after every one: ``add`` takes the newest value (with
    ``ordered``, all values so far sorted, the new one among them) and returns True once the capital has
    reached 1/alpha (from then on the answer stays: an alarm is not taken back).

    >>> test = AlikeTest(0.05)
    >>> ordered = []
    >>> for i in range(30):
    ...     bisect.insort(ordered, -i)  # every round lower than all before: a drift
    ...     alarm = test.add(ordered, -i)
    >>> test.alarm_round
    16
    """

    def __init__(self, alpha: float, jump: float = JUMP, seed: int = TIE_SEED):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
        self.threshold = math.log(1 / alpha)
        self.jumper = SimpleJumper(jump)
        self._draws = random.Random(seed)
        self.rounds = 0
        self.alarm_round: int | None = None

    def add(self, ordered: list[float], value: float) -> bool:
        self.rounds += 1
        # drawn at every round, alarm or not: the draws of round t are the same whatever came before
        u = self._draws.random()
        if self.alarm_round is None:
            self.jumper.bet(conformal_p_value(ordered, value, u))
            if self.jumper.log_capital >= self.threshold:
                self.alarm_round = self.rounds
        return self.alarm_round is not None


# The stretches start after rounds FIRST_STRETCH * 2^(j-1): a doubling grid spends the alpha on log2(t) starts
# up to round t, and the first start leaves the CS of the rounds before it time to have both ends (6 rounds at
# alpha 0.05).
FIRST_STRETCH = 10


class StretchTest:
    """The rounds after round s_j = FIRST_STRETCH * 2^(j-1) against those up to it (module docstring).

    ``ranks(n, alpha)``: the (lower, upper) order-statistic ranks of the median's CS of n rounds at alpha, as
    the comparison's own CS computes them (analysis/ab.py). ``add(value, before)`` takes the newest round's
    log ratio and ``before``, the running intersection (low, high) of the comparison's CS after it; returns
    True once a stretch's running intersection is disjoint from the snapshot of ``before`` at its start (an
    alarm is not taken back). The stretch started after s_j is held at alpha_j = alpha 6 / (pi^2 j^2).

    >>> from perfctl.analysis.mixture import mixture_rank_pair
    >>> test = StretchTest(0.025, lambda n, a: mixture_rank_pair(0.5, n, a, 10.0))
    >>> rounds = [-0.155] * 10 + [-0.313] * 30  # A/B 0.856 for 10 rounds, then 0.731
    >>> [test.add(d, (-0.155, -0.155) if i < 10 else (-0.313, -0.155)) for i, d in enumerate(rounds)].index(True)
    17
    """

    def __init__(self, alpha: float, ranks):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
        self.alpha, self._ranks = alpha, ranks
        self.rounds = 0
        self.alarm_round: int | None = None
        self.alarm_start: int | None = None  # the s_j whose stretch no longer met the rounds before it
        # per stretch: its start s_j, alpha_j, the snapshot (low, high) at s_j, its rounds sorted, and its
        # running intersection (low, high)
        self._stretches: list[list] = []

    def add(self, value: float, before: tuple[float, float]) -> bool:
        self.rounds += 1
        if self.alarm_round is not None:
            return True
        for stretch in self._stretches:
            start, alpha, (before_low, before_high), ordered, running = stretch
            bisect.insort(ordered, value)
            n = len(ordered)
            lower, upper = self._ranks(n, alpha)
            low = max(running[0], ordered[lower - 1] if lower >= 1 else -math.inf)
            high = min(running[1], ordered[upper - 1] if upper <= n else math.inf)
            stretch[4] = (low, high)
            # an empty running intersection of the stretch itself says the same: its rounds are not alike
            if low > high or low > before_high or high < before_low:
                self.alarm_round, self.alarm_start = self.rounds, start
                return True
        if self.rounds == FIRST_STRETCH << len(self._stretches):
            j = len(self._stretches) + 1
            self._stretches.append([self.rounds, self.alpha * 6 / (math.pi ** 2 * j * j), before, [],
                                    (-math.inf, math.inf)])
        return False


def change_point(values: list[float]) -> int | None:
    """Pettitt's change point of ``values`` (in their order): the t maximising |U_t| with U_t = sum over
    i <= t < j of sgn(x_i - x_j) (Pettitt 1979, section 2), computed by his recursion U_t = U_{t-1} + V_t,
    V_t = sum_j sgn(x_t - x_j). Returns t, the last index (1-based) of the first stretch; None for fewer
    than 2 values or when no split separates anything (all values equal). Ties go to the earliest t.

    >>> change_point([1.0, 1.1, 0.9, 1.0, 5.0, 5.2, 4.9])
    4
    """
    n = len(values)
    if n < 2:
        return None
    ordered = sorted(values)
    best, best_at, u = 0, None, 0
    for t, x in enumerate(values[:-1], start=1):
        u += bisect.bisect_left(ordered, x) - (n - bisect.bisect_right(ordered, x))
        if abs(u) > best:
            best, best_at = abs(u), t
    return best_at
