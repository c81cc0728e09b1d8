#!/usr/bin/env python3
"""Validity of `perfctl ab`'s sequential comparison by simulation (issues 16 and 28; fast version in
tests/test_ab_validity.py).

Each simulated stream is one `perfctl ab` run: per round a value a_i of A and b_i of B, fed to the comparison
after every round as the CLI feeds analysis/ab.py's SequentialComparison (margin 0.05, confidence 0.95, one
command against the baseline, ab's CS: analysis/ab.py METHOD and T_OPT, at least 5 rounds, and its test of
alike rounds: analysis/alike.py). Five sections:

1. Validity: the share of streams in which the reported CS (that of all rounds so far while they are alike,
   as ``SequentialComparison.settlement()`` reports it, checked after every round up to --max-rounds) ever
   excludes the true median ratio, per data family, with its Clopper-Pearson 95% upper bound; beside it the
   same for the raw per-round CS, and for the naive procedure (compare's fixed-n paired interval recomputed
   after every round from round 5 on, on the first --naive-streams streams up to --naive-rounds rounds).
2. Wrong verdicts with ab's stopping rule (stop at the first settled round at or after round 5, or at the
   round the rounds are seen not alike, else at --max-rounds): a true ratio of exactly 1 called a difference
   (relevant or trivial: the CS excludes 1), and a 10% slowdown (A/B = 10/11) called equivalent or trivial
   (the CS inside the band); beside them the naive procedure, which stops at the first round where compare's
   fixed-n test shows anything (a difference or equivalence).
3. Rounds to a settled verdict for true ratios 1.00, 1.01, 1.03, 1.10, 1.50 on log-normal runs (sigma 0.03
   per run), against the smallest fixed n on a grid at which compare's paired test reaches the same verdict in
   at least 1 - alpha of simulations.
4. The vectorised path used above against SequentialComparison itself, round by round, on a few hundred
   streams (a step change included, so that the "contradicted" branch and the exchangeability test's alarm
   are exercised): every reported CS, verdict, settlement, contradiction, not alike and stop must be
   identical.
5. Rounds that are not alike (issue 28), --drift-streams streams of --drift-rounds rounds per scenario: B
   slowing 1 ms a run from 10 ms against A at 20 ms (the issue's case, with --min-runs 40 and 5); the machine
   slowing under both commands (cancels in the ratio); B 10% slower from round 30 (spreads 3% and 8%, min
   rounds 5 and 40); B drifting to 10% slower over 300 rounds; B drifting from A/B 1.10 to 0.90 over 300
   rounds (spread 8%: it crosses the band while the CS narrows); a periodic background job slowing the
   runs that start at positions p mod 17 < 5 by 1.3x (A/B 1 and 10/11). Per scenario: the share settled,
   seen not alike, out of budget; and the wrong settled verdicts: a settled verdict false of the median of
   the rounds it was read from, pooled (the median of the average of the rounds' distributions, which the
   CS of independent rounds covers; computed exactly from the scenario), beside the share false of the
   last round's own ratio (shown only: a change in the last rounds before a stop cannot be seen by any
   test). Targets: wrong settled verdicts not shown above alpha in every scenario; the issue's case with
   --min-runs 40 seen not alike (never settled) in at least 1 - alpha of streams; the machine's own drift
   (alike ratios) called not alike in no more than alpha of them.

The data families, per round i (X_a, X_b: independent draws of one per-run distribution; A/B = num/den):
a_i = num * X_a * D_i * O_a,  b_i = den * X_b * D_i * O_b, with D_i = 1 and O = 1 except in
drifting-then-stable. The true median ratio is num/den EXACTLY, not estimated: log(a_i/b_i) - log(num/den)
= log X_a - log X_b + log O_a - log O_b is symmetric about 0 (X_a, X_b exchangeable; the order effect lands
on A or B with probability 1/2 each), with positive probability in every neighbourhood of 0 (a density, or
for the tied family an atom at 0), so 0 is its unique median; the drift D_i cancels in the ratio.

- normal: X = 100 + 8 z, floored at 1 (never reached: 12 sigma);
- log-normal: X = 100 exp(0.08 z);
- bimodal: X = N(100, 3) with probability 0.7, N(115, 3) with 0.3;
- heavy-tailed: X = 100 exp(0.05 T), T Student t with 2 degrees of freedom (infinite variance);
- tied: X = 1000 (20 + Poisson(3)), integer counts that repeat (a, b exact integers; ~17% of rounds tie);
- drifting-then-stable: log-normal, with a machine-wide slowdown D_i = 1 + 0.5 exp(-i/30) over the first
  rounds that multiplies both runs of the round, per-run spread 0.08 (1 + 2 exp(-i/30)) (noisier while
  drifting: not identically distributed, but every round's median is still num/den), and an order effect:
  the run that goes second in its round is 3% faster (O = 0.97), the order drawn at random per round.

PASS rules: validity and wrong verdicts PASS unless the simulation shows the rate above alpha: FAIL when
the one-sided Clopper-Pearson 99.9% LOWER bound of the rate exceeds alpha (the exact binomial test of rate
<= alpha rejects at 0.001). The guarantee is about a probability, and ab's default CS (the beta-binomial
mixture, analysis/ab.py) spends nearly all of its alpha: its miss rates sit just below alpha (0.04-0.046
here), where a rule "estimate <= alpha" would fail by Monte Carlo noise alone for a procedure that keeps its
guarantee (400 streams: sd 0.011). The estimate and its 95% upper bound are printed beside it. The naive
procedure's inflation PASSES (is shown) when the Clopper-Pearson 95% LOWER bound of its ratio-1 wrong-verdict
rate exceeds alpha: the excess is then not Monte Carlo noise. Exit status 1 on any FAIL.

    python bench/sequential.py [--streams 2000] [--max-rounds 1000] [--seed 16] [--quick] [--only-drift]
                               [--drift-streams 2000] [--drift-rounds 1000]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass

import numpy as np
from scipy import special

from perfctl.analysis import alike
from perfctl.analysis.ab import METHOD, T_OPT, SequentialComparison
from perfctl.analysis.ratio_edges import NEAR, SLACK, ratio_side, thresholds
from perfctl.analysis.sequential import quantile_cs_ranks
from perfctl.analysis.sparc import family_level, ratio_interval, simultaneous_suite, sparc_tests
from perfctl.analysis.verdicts import Verdict, float_band, read_off, relevance

ALPHA, MARGIN, MIN_ROUNDS = 0.05, 0.05, 5
FAMILIES = ("normal", "log-normal", "bimodal", "heavy-tailed", "tied", "drifting-then-stable")
# A/B as num/den: exact integers, so that the tied family's counts stay integers and its atom at the true
# ratio is the same float in every round (num X / (den X) rounds to fl(num/den)).
NULL, SLOWDOWN = (1, 1), (10, 11)
SPEED_RATIOS = ((1, 1), (101, 100), (103, 100), (11, 10), (3, 2))
SPEED_SIGMA = 0.03
FIXED_N_GRID = (6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 150, 200, 250, 300, 400, 500, 600, 800,
                1000, 1500, 2000)
# relevance codes in the vectorised path
CODES = (Verdict.INDETERMINATE, Verdict.EQUIVALENCE, Verdict.TRIVIAL, Verdict.RELEVANT)


# --- data -------------------------------------------------------------------------------------------------

def per_run(family: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """One side's X for ``shape`` = (streams, rounds), before the ratio, drift and order effect."""
    if family == "normal":
        return np.maximum(100 + 8 * rng.standard_normal(shape), 1.0)
    if family in ("log-normal", "drifting-then-stable"):
        return 100 * np.exp(0.08 * rng.standard_normal(shape))
    if family == "bimodal":
        return np.where(rng.random(shape) < 0.7, rng.normal(100, 3, shape), rng.normal(115, 3, shape))
    if family == "heavy-tailed":
        return 100 * np.exp(0.05 * rng.standard_t(2, shape))
    if family == "tied":
        return 1000 * (20 + rng.poisson(3, shape)).astype(float)
    if family == "speed":
        return np.exp(SPEED_SIGMA * rng.standard_normal(shape))
    raise ValueError(f"family: unknown {family!r}")


def rounds_of(family: str, ratio: tuple[int, int], streams: int, rounds: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), each (streams, rounds), positive: the runs of A and B."""
    num, den = ratio
    shape = (streams, rounds)
    x_a, x_b = per_run(family, rng, shape), per_run(family, rng, shape)
    if family == "drifting-then-stable":
        i = np.arange(rounds)
        spread = 1 + 2 * np.exp(-i / 30)  # noisier while the machine drifts
        x_a = 100 * (x_a / 100) ** spread
        x_b = 100 * (x_b / 100) ** spread
        drift = 1 + 0.5 * np.exp(-i / 30)
        a_second = rng.random(shape) < 0.5
        x_a = x_a * drift * np.where(a_second, 0.97, 1.0)
        x_b = x_b * drift * np.where(a_second, 1.0, 0.97)
    return num * x_a, den * x_b


def log_ratios(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(a/b) exactly as SequentialComparison.add computes it (math.log of the float quotient: numpy's log
    may differ in the last bit, and the tied family's atoms sit exactly on the true value)."""
    quotient = (a / b).ravel()
    return np.fromiter(map(math.log, quotient.tolist()), float, quotient.size).reshape(a.shape)


# --- the vectorised sequential comparison -------------------------------------------------------------------

def cs_ranks(rounds: int, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """The CS's order-statistic ranks for t = 1..rounds, each computed by the scalar call ab.py makes."""
    pairs = [quantile_cs_ranks(t, 0.5, alpha, METHOD, T_OPT) for t in range(1, rounds + 1)]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


@dataclass
class Trace:
    """Per stream: did the reported CS (the CS of all rounds so far, while the rounds are alike) ever exclude
    the truth, did a per-round CS (alike or not), the round ab stops at (the first settled round >=
    MIN_ROUNDS, or the round the rounds are seen not alike, else the last), whether it had settled, whether
    the rounds were seen not alike by then, and the reported CS there (log scale, -inf/inf unbounded or not
    alike; ``stop_ratio_low``/``high``: as ratios placed exactly against the band as SequentialComparison
    reports them, NaN for none). ``history``: per round (low, high as reported ratios, NaN for none; settled,
    contradicted, not alike) when recorded."""

    missed: np.ndarray
    missed_raw: np.ndarray
    stop_round: np.ndarray
    settled: np.ndarray
    stop_low: np.ndarray
    stop_high: np.ndarray
    stop_ratio_low: np.ndarray
    stop_ratio_high: np.ndarray
    not_alike: np.ndarray
    history: tuple[np.ndarray, ...] | None = None

    def verdicts(self) -> list[Verdict]:
        """The verdict at the stop, read off by sparc.read_off and Table I (the library's functions)."""
        return [relevance(*read_off(*_reported(low, high), MARGIN))
                for low, high in zip(self.stop_ratio_low.tolist(), self.stop_ratio_high.tolist())]


def _ratio_bounds(low: float, high: float) -> tuple[float | None, float | None]:
    return (math.exp(low) if math.isfinite(low) else None, math.exp(high) if math.isfinite(high) else None)


def _reported(low: float, high: float) -> tuple[float | None, float | None]:
    return None if math.isnan(low) else low, None if math.isnan(high) else high


def _exp(x: np.ndarray) -> np.ndarray:
    """math.exp of each element (exp(-inf) = 0): numpy's exp may differ from it in the last bit."""
    return np.fromiter(map(math.exp, x.tolist()), float, x.size).reshape(x.shape)


def exact_counts(a: np.ndarray, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per threshold of the band (ratio_edges.thresholds: lower edge, 1, upper edge), each stream's count of
    rounds up to each round whose exact ratio a/b lies below it and on it, as ratio_edges.RoundRatios keeps
    them for SequentialComparison: the float quotient decides unless within SLACK of the threshold, where
    ratio_edges.ratio_side compares exactly."""
    quotient = a / b
    counts = []
    for threshold in thresholds(MARGIN):
        side = np.where(quotient < float(threshold.value), -1, 1)
        for s, r in zip(*np.nonzero(np.abs(quotient / float(threshold.value) - 1) <= SLACK)):
            side[s, r] = ratio_side(float(a[s, r]), float(b[s, r]), threshold)
        counts.append((np.cumsum(side < 0, axis=1, dtype=np.int32), np.cumsum(side == 0, axis=1, dtype=np.int32)))
    return counts


def place_ends(ends: np.ndarray, rank: int, below: list[np.ndarray], on: list[np.ndarray]) -> np.ndarray:
    """ratio_edges.place_end of every stream's end, the rank-th smallest ratio of its rounds so far
    (ratio_edges.rank_side of ``below``/``on``: per threshold, each stream's rounds below and on it)."""
    for threshold, below_t, on_t in zip(thresholds(MARGIN), below, on):
        near = np.abs(ends / float(threshold.value) - 1) <= NEAR
        under, over = below_t >= rank, below_t + on_t < rank
        ends = np.where(near & under & (ends >= threshold.at_least), threshold.below, ends)
        ends = np.where(near & over & (ends <= threshold.at_most), threshold.above, ends)
        ends = np.where(near & ~under & ~over, threshold.on, ends)
    return ends


def tie_draws(seeds, rounds: int) -> np.ndarray:
    """The smoothing draws of each stream's alikeness test, as analysis/alike.py AlikeTest draws them with
    ``tie_seed`` = the stream's seed: one random.Random(seed).random() per round."""
    return np.array([[generator.random() for _ in range(rounds)]
                     for generator in map(random.Random, np.asarray(seeds).tolist())])


def trace(a: np.ndarray, b: np.ndarray, truth: float, record: bool = False, min_rounds: int = MIN_ROUNDS,
          tie_seeds=None) -> Trace:
    """Every stream's SequentialComparison fed add(a[s, 0], b[s, 0]), add(a[s, 1], b[s, 1]), ..., all
    streams at once (stream s with ``tie_seed`` tie_seeds[s], default s); ``truth``: the true median log
    ratio.

    The order statistics of each stream's first t values come from a Fenwick tree over the stream's ranks
    (the stream is sorted once; round t inserts its rank; the k-th smallest inserted is found by binary
    lifting): O(log T) vectorised steps per round instead of a sort of the t values. Ties are harmless: the
    k-th smallest value is the same whichever of the tied values holds rank k. The same tree counts the
    values above and equal to the newest one for its conformal p-value (analysis/alike.py).
    """
    d = log_ratios(a, b)
    exact = exact_counts(a, b)
    streams, rounds = d.shape
    lower_ranks, upper_ranks = cs_ranks(rounds)
    order = np.argsort(d, axis=1, kind="stable")
    ordered = np.take_along_axis(d, order, axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(rounds), d.shape), axis=1)
    # each sorted position's run of equal values [first, end): the values equal to the newest one
    positions = np.broadcast_to(np.arange(rounds), d.shape)
    starts = np.concatenate([np.ones((streams, 1), bool), ordered[:, 1:] != ordered[:, :-1]], axis=1)
    first = np.maximum.accumulate(np.where(starts, positions, 0), axis=1)
    ends = np.concatenate([ordered[:, 1:] != ordered[:, :-1], np.ones((streams, 1), bool)], axis=1)
    end = np.flip(np.minimum.accumulate(np.flip(np.where(ends, positions + 1, rounds), axis=1), axis=1), axis=1)
    tie_first = np.take_along_axis(first, rank, axis=1)
    tie_end = np.take_along_axis(end, rank, axis=1)
    draws = tie_draws(np.arange(streams) if tie_seeds is None else tie_seeds, rounds)
    tree = np.zeros((streams, rounds + 1), dtype=np.int64)
    rows = np.arange(streams)
    top = 1 << (rounds.bit_length() - 1)

    def kth(k: int, tree: np.ndarray = tree) -> np.ndarray:
        position = np.zeros(streams, dtype=np.int64)
        remaining = np.full(streams, k, dtype=np.int64)
        step = top
        while step:
            candidate = position + step
            counts = tree[rows, np.minimum(candidate, rounds)]
            move = (candidate <= rounds) & (counts < remaining)
            position = np.where(move, candidate, position)
            remaining = np.where(move, remaining - counts, remaining)
            step >>= 1
        return ordered[rows, position]

    def inserted_below(k: np.ndarray) -> np.ndarray:
        """How many of the values inserted so far sit at sorted positions < k."""
        total = np.zeros(streams, dtype=np.int64)
        index = k.copy()
        while True:
            live = index > 0
            if not live.any():
                return total
            total[live] += tree[rows[live], index[live]]
            index = index - (index & -index)

    low, high = np.full(streams, -np.inf), np.full(streams, np.inf)
    missed = np.zeros(streams, bool)
    missed_raw = np.zeros(streams, bool)
    contradicted = np.zeros(streams, bool)
    not_alike = np.zeros(streams, bool)
    stopped = np.zeros(streams, bool)
    stop_round = np.full(streams, rounds)
    stop_low, stop_high = np.full(streams, -np.inf), np.full(streams, np.inf)
    stop_ratio_low, stop_ratio_high = np.full(streams, np.nan), np.full(streams, np.nan)
    stop_not_alike = np.zeros(streams, bool)
    # the Simple Jumper's shares of capital in the bets e = -1, 0, 1 and the log of the whole (alike.py)
    shares = np.full((streams, 3), 1 / 3)
    bets = np.array([-1.0, 0.0, 1.0])
    log_capital = np.zeros(streams)
    threshold = math.log(2 / ALPHA)  # the martingale's share of the alikeness tests' alpha (analysis/ab.py)
    # alike.StretchTest: the stretch after round s_j = FIRST_STRETCH 2^(j-1), at alpha_j; its own Fenwick tree of
    # the rounds after s_j, the snapshot of the running intersection at s_j, and its own running intersection
    stretch_starts = [alike.FIRST_STRETCH << j for j in range((rounds // alike.FIRST_STRETCH).bit_length())
                      if alike.FIRST_STRETCH << j < rounds]
    stretch_ranks = [cs_ranks(rounds - start, ALPHA / 2 * 6 / (math.pi ** 2 * (j + 1) ** 2))
                     for j, start in enumerate(stretch_starts)]
    stretch_trees = [np.zeros((streams, rounds + 1), dtype=np.int64) for _ in stretch_starts]
    stretch_before = [None] * len(stretch_starts)
    stretch_running = [(np.full(streams, -np.inf), np.full(streams, np.inf)) for _ in stretch_starts]
    history = tuple(np.empty((streams, rounds)) for _ in range(2)) + tuple(
        np.empty((streams, rounds), bool) for _ in range(3)) if record else None
    lower_edge, upper_edge = float_band(MARGIN)  # read exactly, as settles() and the verdict are
    for t in range(1, rounds + 1):
        for fenwick in [tree] + [stretch_trees[j] for j, start in enumerate(stretch_starts) if t > start]:
            index = rank[:, t - 1] + 1
            while True:
                live = index <= rounds
                if not live.any():
                    break
                fenwick[rows[live], index[live]] += 1
                index = index + (index & -index)
        # the conformal p-value of the newest value, and the jumper's bet on it (only until its alarm)
        up_to, below = inserted_below(tie_end[:, t - 1]), inserted_below(tie_first[:, t - 1])
        p = ((t - up_to) + draws[:, t - 1] * (up_to - below)) / t
        betting = log_capital < threshold
        moved = ((1 - alike.JUMP) * shares + alike.JUMP / 3) * (1 + bets * (p[:, None] - 0.5))
        whole = moved.sum(axis=1)
        log_capital = np.where(betting, log_capital + np.log(whole), log_capital)
        shares = np.where(betting[:, None], moved / whole[:, None], shares)
        alarm = log_capital >= threshold
        lower, upper = int(lower_ranks[t - 1]), int(upper_ranks[t - 1])
        cs_low = kth(lower) if lower >= 1 else np.full(streams, -np.inf)
        cs_high = kth(upper) if upper <= t else np.full(streams, np.inf)
        missed_raw |= (cs_low > truth) | (cs_high < truth)
        new_low, new_high = np.maximum(low, cs_low), np.minimum(high, cs_high)
        empty = new_low > new_high
        contradicted |= empty
        low, high = np.where(empty, low, new_low), np.where(empty, high, new_high)
        step = np.zeros(streams, bool)
        for j, start in enumerate(stretch_starts):
            if t == start:
                stretch_before[j] = (low.copy(), high.copy())
            elif t > start:
                n = t - start
                s_lower, s_upper = int(stretch_ranks[j][0][n - 1]), int(stretch_ranks[j][1][n - 1])
                s_low = np.maximum(stretch_running[j][0], kth(s_lower, stretch_trees[j]) if s_lower >= 1 else -np.inf)
                s_high = np.minimum(stretch_running[j][1], kth(s_upper, stretch_trees[j]) if s_upper <= n else np.inf)
                stretch_running[j] = (s_low, s_high)
                step |= (s_low > s_high) | (s_low > stretch_before[j][1]) | (s_high < stretch_before[j][0])
        not_alike |= alarm | step | contradicted
        # what is reported: the CS of all rounds while they are alike, nothing after
        shown_low = np.where(not_alike, -np.inf, cs_low)
        shown_high = np.where(not_alike, np.inf, cs_high)
        missed |= (shown_low > truth) | (shown_high < truth)
        # the reported ends as ratios, each placed on its exact ratio's side of 1 and the band's edges
        below, on = [counts[0][:, t - 1] for counts in exact], [counts[1][:, t - 1] for counts in exact]
        ratio_low = np.where(np.isfinite(shown_low), place_ends(_exp(shown_low), lower, below, on), np.nan)
        ratio_high = np.where(np.isfinite(shown_high), place_ends(_exp(shown_high), upper, below, on), np.nan)
        # settles(): both ends bounded, and the CS inside the band or beyond it (compared on the ratio scale)
        bounded = np.isfinite(shown_low) & np.isfinite(shown_high)
        inside = (lower_edge <= ratio_low) & (ratio_high <= upper_edge)
        outside = (ratio_high < lower_edge) | (ratio_low > upper_edge)
        settled = bounded & (inside | outside)
        # ab's rule: a comparison seen not alike stops at once; a settled one from min_rounds on
        stopping = ~stopped & (not_alike | (settled if t >= min_rounds else False))
        stop_round[stopping] = t
        stop_low[stopping], stop_high[stopping] = shown_low[stopping], shown_high[stopping]
        stop_ratio_low[stopping], stop_ratio_high[stopping] = ratio_low[stopping], ratio_high[stopping]
        stop_not_alike[stopping] = not_alike[stopping]
        stopped |= stopping
        if record:
            history[0][:, t - 1], history[1][:, t - 1] = ratio_low, ratio_high
            history[2][:, t - 1], history[3][:, t - 1], history[4][:, t - 1] = settled, contradicted, not_alike
    unstopped = ~stopped
    stop_low[unstopped], stop_high[unstopped] = shown_low[unstopped], shown_high[unstopped]
    stop_ratio_low[unstopped], stop_ratio_high[unstopped] = ratio_low[unstopped], ratio_high[unstopped]
    stop_not_alike[unstopped] = not_alike[unstopped]
    return Trace(missed, missed_raw, stop_round, stopped & ~stop_not_alike, stop_low, stop_high, stop_ratio_low,
                 stop_ratio_high, stop_not_alike, history)


# --- the naive procedure: compare's fixed-n test after every round -----------------------------------------

FIXED_LEVEL = family_level(1, ALPHA)  # compare's default simultaneous family with one benchmark: 1 - alpha


def fixed_n(a: np.ndarray, b: np.ndarray) -> tuple[float | None, float | None, Verdict]:
    """compare's fixed-n paired verdict on these rounds: the Hodges-Lehmann ratio interval at the simultaneous
    family's level (sparc.ratio_interval, which simultaneous_suite reads off), Table I."""
    low, high = ratio_interval(a, b, FIXED_LEVEL, paired=True)
    return low, high, relevance(*read_off(low, high, MARGIN))


def naive_stop(a: np.ndarray, b: np.ndarray) -> tuple[int, Verdict]:
    """Rerun the fixed-n test after every round from MIN_ROUNDS on; stop at the first that shows anything."""
    verdict = Verdict.INDETERMINATE
    for t in range(MIN_ROUNDS, a.size + 1):
        verdict = fixed_n(a[:t], b[:t])[2]
        if verdict is not Verdict.INDETERMINATE:
            return t, verdict
    return a.size, verdict


def naive_ever_missed(a: np.ndarray, b: np.ndarray, truth: float) -> bool:
    for t in range(MIN_ROUNDS, a.size + 1):
        low, high, _ = fixed_n(a[:t], b[:t])
        if (low is not None and low > truth) or (high is not None and high < truth):
            return True
    return False


# --- Monte Carlo bounds ------------------------------------------------------------------------------------

def clopper_pearson(hits: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper), each at ``confidence``."""
    tail = 1 - confidence
    lower = 0.0 if hits == 0 else float(special.betaincinv(hits, trials - hits + 1, tail))
    upper = 1.0 if hits == trials else float(special.betaincinv(hits + 1, trials - hits, 1 - tail))
    return lower, upper


def within_alpha(hits: int, trials: int) -> bool:
    """The PASS rule (module docstring): the one-sided 99.9% lower bound of the rate is at most alpha."""
    return clopper_pearson(hits, trials, 0.999)[0] <= ALPHA


def rate(hits: int, trials: int) -> str:
    return f"{hits / trials:6.4f} (<= {clopper_pearson(hits, trials)[1]:6.4f})"


# --- sections ----------------------------------------------------------------------------------------------

DIFFERENCE = (Verdict.RELEVANT, Verdict.TRIVIAL)
INSIDE = (Verdict.EQUIVALENCE, Verdict.TRIVIAL)


def validity_and_verdicts(args, rng: np.random.Generator, targets: list[tuple[str, bool]]) -> None:
    naive_streams = min(args.naive_streams, args.streams)
    naive_rounds = min(args.naive_rounds, args.max_rounds)
    print(f"1. Validity: {args.streams} streams per row, a check after every round up to {args.max_rounds} "
          f"rounds; alpha {ALPHA}, margin {MARGIN}")
    print("   missed = the reported CS (that of all rounds so far, while they are alike) ever excluded the true "
          "median ratio; raw = a per-round CS did, alike or not; (<= x): Clopper-Pearson 95% upper bound")
    print(f"   naive = compare's fixed-n paired interval at {FIXED_LEVEL:g} recomputed after every round from "
          f"round {MIN_ROUNDS}, first {naive_streams} streams, up to {naive_rounds} rounds")
    header = f"   {'family':22} {'A/B':>6} {'missed (ab)':>19} {'raw CS':>19} {'naive':>19}"
    print(header)
    verdict_rows = []
    for family in FAMILIES:
        for ratio in (NULL, SLOWDOWN):
            a, b = rounds_of(family, ratio, args.streams, args.max_rounds, rng)
            truth = ratio[0] / ratio[1]
            result = trace(a, b, math.log(truth))
            missed, raw = int(result.missed.sum()), int(result.missed_raw.sum())
            naive = "-"
            if ratio == NULL:
                naive_hits = sum(naive_ever_missed(a[s, :naive_rounds], b[s, :naive_rounds], truth)
                                 for s in range(naive_streams))
                naive = rate(naive_hits, naive_streams)
            ok = within_alpha(missed, args.streams)
            targets.append((f"validity, {family}, A/B {truth:.4f}: CS ever missed {missed / args.streams:.4f}, "
                            f"not shown above alpha {ALPHA}", ok))
            print(f"   {family:22} {truth:6.4f} {rate(missed, args.streams):>19} {rate(raw, args.streams):>19} "
                  f"{naive:>19}{'' if ok else '  FAIL'}")
            verdict_rows.append((family, ratio, a, b, result))
    print()
    print(f"2. Wrong verdicts: ab stops at the first settled round >= {MIN_ROUNDS} (else at {args.max_rounds}); "
          f"the naive procedure at the first round >= {MIN_ROUNDS} where the fixed-n test shows a difference or "
          f"equivalence ({naive_streams} streams)")
    print("   A/B 1.0000 wrong = a difference shown (relevant or trivial); A/B 0.9091 (10% slowdown) wrong = "
          "equivalence or trivial (inside the band)")
    print(f"   {'family':22} {'A/B':>6} {'ab wrong':>19} {'ab relevant':>11} {'rounds':>7} {'budget':>6} "
          f"{'not alike':>9} {'naive wrong':>19} {'rounds':>7}")
    for family, ratio, a, b, result in verdict_rows:
        wrong_set = DIFFERENCE if ratio == NULL else INSIDE
        verdicts = result.verdicts()
        wrong = sum(v in wrong_set for v in verdicts)
        relevant = sum(v is Verdict.RELEVANT for v in verdicts)
        stops = [naive_stop(a[s], b[s]) for s in range(naive_streams)]
        naive_wrong = sum(v in wrong_set for _, v in stops)
        ok = within_alpha(wrong, args.streams)
        label = "called a difference" if ratio == NULL else "called equivalent/trivial"
        targets.append((f"wrong verdicts, {family}, A/B {ratio[0] / ratio[1]:.4f} {label}: "
                        f"{wrong / args.streams:.4f}, not shown above alpha {ALPHA}", ok))
        inflation = ""
        if ratio == NULL:
            shown = clopper_pearson(naive_wrong, naive_streams)[0] > ALPHA
            targets.append((f"naive inflation shown, {family}: {naive_wrong / naive_streams:.4f} of ratio-1 "
                            f"streams called a difference, 95% lower bound "
                            f"{clopper_pearson(naive_wrong, naive_streams)[0]:.4f} > alpha {ALPHA}", shown))
            inflation = "  inflated" if shown else "  NOT INFLATED (FAIL)"
        print(f"   {family:22} {ratio[0] / ratio[1]:6.4f} {rate(wrong, args.streams):>19} "
              f"{relevant / args.streams:11.4f} {result.stop_round.mean():7.1f} "
              f"{int((~result.settled & ~result.not_alike).sum()):6d} {int(result.not_alike.sum()):9d} "
              f"{rate(naive_wrong, naive_streams):>19} "
              f"{np.mean([t for t, _ in stops]):7.1f}{'' if ok else '  FAIL'}{inflation}")


def expected_class(ratio: float) -> str:
    return "inside" if 1 - MARGIN <= ratio <= 1 + MARGIN else "beyond"


def reaches(low: float | None, high: float | None, wanted: str) -> bool:
    if low is None or high is None:
        return False
    if wanted == "inside":
        return 1 - MARGIN <= low and high <= 1 + MARGIN
    return high < 1 - MARGIN or low > 1 + MARGIN


def rounds_to_verdict(args, rng: np.random.Generator) -> None:
    print(f"3. Rounds to a settled verdict: log-normal runs, per-run sigma {SPEED_SIGMA} (log ratio sd "
          f"{SPEED_SIGMA * math.sqrt(2):.3f}), {args.streams} streams, at most {args.max_rounds} rounds")
    print(f"   fixed n = smallest n of the grid at which compare's fixed-n paired test ({FIXED_LEVEL:g}) reaches "
          f"the same verdict in >= {1 - ALPHA:g} of {args.fixed_trials} simulations")
    print(f"   {'A/B':>5} {'verdict':>26} {'ab reached':>10} {'mean':>7} {'p90':>6} {'unsettled':>9} "
          f"{'fixed n':>18}")
    for ratio in SPEED_RATIOS:
        truth = ratio[0] / ratio[1]
        wanted = expected_class(truth)
        a, b = rounds_of("speed", ratio, args.streams, args.max_rounds, rng)
        result = trace(a, b, math.log(truth))
        reached = np.array([reaches(*_ratio_bounds(low, high), wanted) and settled for low, high, settled in
                            zip(result.stop_low.tolist(), result.stop_high.tolist(), result.settled.tolist())])
        stop = result.stop_round[result.settled]
        mean = f"{stop.mean():7.1f}" if stop.size else "      -"
        # the 90th percentile over all streams: an unsettled stream counts as beyond the budget
        p90_all = np.quantile(np.where(result.settled, result.stop_round, np.inf), 0.9, method="inverted_cdf")
        p90 = f"{p90_all:6.0f}" if math.isfinite(p90_all) else f">{args.max_rounds}"
        needed = None
        for n in FIXED_N_GRID:
            x, y = rounds_of("speed", ratio, args.fixed_trials, n, rng)
            hits = sum(reaches(*fixed_n(x[s], y[s])[:2], wanted) for s in range(args.fixed_trials))
            if hits >= (1 - ALPHA) * args.fixed_trials:
                needed = n
                break
        label = "inside the band" if wanted == "inside" else "faster beyond the margin"
        print(f"   {truth:5.2f} {label:>26} {reached.mean():10.4f} {mean} {p90:>6} "
              f"{int((~result.settled).sum()):9d} {needed if needed else 'beyond the grid':>18}")


# --- rounds that are not alike: drift, a step, a periodic disturbance ---------------------------------------

# (name, min rounds, per-run log spread): the steady spin has a spread of about 1%
SCENARIOS = (
    ("B slows 1 ms a run from 10 ms, A 20 ms (issue 28)", 40, 0.01),
    ("B slows 1 ms a run from 10 ms, A 20 ms (issue 28)", MIN_ROUNDS, 0.01),
    ("the machine slows 0.2% a round (both commands)", MIN_ROUNDS, 0.03),
    ("B steps A/B 0.856 -> 0.731 after round 10 (review)", 30, 0.0),
    ("B steps A/B 0.856 -> 0.731 after round 10 (review)", 30, 0.03),
    ("B 10% slower from round 30", MIN_ROUNDS, 0.03),
    ("B 10% slower from round 30", 40, 0.03),
    ("B 10% slower from round 30", MIN_ROUNDS, 0.08),
    ("B drifts to 10% slower over 300 rounds", MIN_ROUNDS, 0.03),
    ("B drifts from A/B 1.10 to 0.90 over 300 rounds", MIN_ROUNDS, 0.08),
    ("periodic disturbance, A/B 1", MIN_ROUNDS, 0.03),
    ("periodic disturbance, A/B 0.9091", MIN_ROUNDS, 0.03),
)


def drift_rounds(name: str, sigma: float, streams: int, rounds: int, rng: np.random.Generator):
    """(a, b, centres, normal): each round's runs and the true median log ratio of each round (its
    distribution is N(centre, 2 sigma^2) when ``normal``; symmetric about the centre always, so the centre
    is that round's median).

    The periodic disturbance: a background job slows every run that starts at a sequence position p (two
    runs a round, the order drawn at random) with p mod 17 < 5 by 1.3x; the random order puts it on A or B
    with probability 1/2 each, so every round's ratio stays symmetric about the true one."""
    shape = (streams, rounds)
    i = np.arange(rounds)
    x_a, x_b = np.exp(sigma * rng.standard_normal(shape)), np.exp(sigma * rng.standard_normal(shape))
    num, den = (10, 11) if "0.9091" in name else (1, 1)
    if "issue 28" in name:
        a_level, b_level = np.full(rounds, 20.0), 10.0 + i
    elif "machine slows" in name:  # both runs of a round alike: the ratio does not move
        a_level = b_level = 1 + 0.002 * i
    elif "after round 10 (review)" in name:  # exact counts with sd 0: pagetouch 952 against 1112, then 1302
        a_level, b_level = np.ones(rounds), np.where(i >= 10, 1 / 0.731, 1 / 0.856)
    elif "from round 30" in name:
        a_level, b_level = np.ones(rounds), np.where(i >= 30, 1.1, 1.0)
    elif "to 10% slower over 300 rounds" in name:
        a_level, b_level = np.ones(rounds), 1 + 0.1 * np.minimum(i, 300) / 300
    elif "from A/B 1.10 to 0.90" in name:
        a_level, b_level = 1.1 - 0.2 * np.minimum(i, 300) / 300, np.ones(rounds)
    elif "periodic" in name:
        a_level, b_level = np.full(rounds, float(num)), np.full(rounds, float(den))
    else:
        raise ValueError(f"scenario: unknown {name!r}")
    a, b = a_level * x_a, b_level * x_b
    if "periodic" in name:
        a_first = rng.random(shape) < 0.5
        slowed = lambda position: np.where(position % 17 < 5, 1.3, 1.0)  # noqa: E731
        a, b = a * slowed(2 * i + np.where(a_first, 0, 1)), b * slowed(2 * i + np.where(a_first, 1, 0))
    centres = np.log(a_level / b_level)
    return a, b, centres, "periodic" not in name


def pooled_medians(centres: np.ndarray, spread: float | None) -> np.ndarray:
    """For T = 1..rounds, the median of the rounds' distributions pooled over rounds 1..T (the average of
    their CDFs): the one median rounds 1..T have together, which their CS covers when they are independent.
    ``spread``: each round's sd (normal rounds); None: all rounds share one median, the centre."""
    rounds = centres.size
    if spread is None:
        return np.full(rounds, centres[0])
    if spread == 0:  # exact counts: each round a point, the pooled median that of the points
        return np.array([np.median(centres[:t]) for t in range(1, rounds + 1)])
    low = np.full(rounds, centres.min() - 12 * spread)
    high = np.full(rounds, centres.max() + 12 * spread)
    included = np.tril(np.ones((rounds, rounds), bool))  # row T-1 holds rounds 1..T
    for _ in range(60):
        middle = (low + high) / 2
        cdf = np.where(included, special.ndtr((middle[:, None] - centres[None, :]) / spread), 0).sum(axis=1)
        below = cdf / np.arange(1, rounds + 1) < 0.5
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    return (low + high) / 2


def claim_wrong(low: np.ndarray, high: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Whether what a settled CS [low, high] (log scale) claims is false of ``truth``: beyond the band on
    its side, inside the band, and on the side of 0 the CS shows when it excludes 0 (a trivial difference)."""
    edge_low, edge_high = math.log(1 - MARGIN), math.log(1 + MARGIN)
    faster, slower = low > edge_high, high < edge_low
    inside = ~faster & ~slower
    wrong = (faster & (truth <= edge_high)) | (slower & (truth >= edge_low))
    wrong |= inside & ((truth < edge_low) | (truth > edge_high))
    wrong |= inside & (((low > 0) & (truth <= 0)) | ((high < 0) & (truth >= 0)))
    return wrong


def not_alike_rounds(args, rng: np.random.Generator, targets: list[tuple[str, bool]]) -> None:
    streams, rounds = args.drift_streams, args.drift_rounds
    print(f"5. Rounds that are not alike: {streams} streams per row, at most {rounds} rounds; ab's rule (stop at "
          "the first settled round >= min rounds, or as soon as the rounds are seen not alike)")
    print("   wrong = a settled verdict false of the median of the rounds it was read from, pooled (the average "
          "of their distributions); at end = false of the last round's own ratio (shown, not a target)")
    print(f"   {'scenario':51} {'sd':>4} {'min':>3} {'settled':>7} {'not alike':>9} {'budget':>6} {'rounds':>6} "
          f"{'wrong (settled)':>19} {'at end':>7} {'change at':>9}")
    for name, min_rounds, sigma in SCENARIOS:
        a, b, centres, normal = drift_rounds(name, sigma, streams, rounds, rng)
        d = log_ratios(a, b)
        result = trace(a, b, 0.0, min_rounds=min_rounds, tie_seeds=np.arange(streams) + 10_000)
        pooled = pooled_medians(centres, sigma * math.sqrt(2) if normal else None)
        stop = result.stop_round - 1
        settled = result.settled
        wrong_pooled = settled & claim_wrong(result.stop_low, result.stop_high, pooled[stop])
        wrong_end = settled & claim_wrong(result.stop_low, result.stop_high, centres[stop])
        hits, seen = int(wrong_pooled.sum()), int(result.not_alike.sum())
        # where Pettitt's change point puts the change, for the streams seen not alike (median round)
        splits = [alike.change_point(d[s, :result.stop_round[s]].tolist())
                  for s in np.flatnonzero(result.not_alike)]
        where = f"{np.median([k for k in splits if k]):9.0f}" if any(splits) else f"{'-':>9}"
        budget = streams - int(settled.sum()) - seen
        print(f"   {name:51} {sigma:4.2f} {min_rounds:3d} {settled.mean():7.4f} {seen / streams:9.4f} "
              f"{budget / streams:6.4f} {result.stop_round.mean():6.1f} {rate(hits, streams):>19} "
              f"{wrong_end.mean():7.4f} {where}")
        label = f"{name}, sd {sigma}, min rounds {min_rounds}"
        targets.append((f"not alike, {label}: wrong settled verdicts {hits / streams:.4f}, not shown above alpha "
                        f"{ALPHA}", within_alpha(hits, streams)))
        if "issue 28" in name and min_rounds == 40 or "(review)" in name and sigma == 0:
            targets.append((f"not alike, {label}: seen not alike (never settled) in {seen / streams:.4f} of streams, "
                            f">= {1 - ALPHA}", seen >= (1 - ALPHA) * streams and not settled.any()))
        if "machine slows" in name:  # the drift cancels in the ratio: the rounds are alike
            targets.append((f"not alike, {label}: called not alike in {seen / streams:.4f} of streams, not shown "
                            f"above alpha {ALPHA} (the drift cancels in the ratio)", within_alpha(seen, streams)))


# --- the vectorised path against SequentialComparison -----------------------------------------------------

def equality_check(streams: int, rounds: int, seed: int) -> tuple[int, list[str]]:
    """Feed the same rounds to SequentialComparison (one object per stream, add(a, b) after every round, as
    the CLI does) and to ``trace``; return (rounds compared, the first disagreements). Streams come from every
    family, both ratios, and a step change (A/B 1 for 20 rounds, then 1.5: not i.i.d., so the running
    intersection goes empty and ``contradicted`` is exercised, and so is the stretches' alarm) and a drift
    of B (the exchangeability test's alarm);
    stream s has tie_seed s on both paths). Also checks that the naive procedure's verdict
    is compare's: simultaneous_suite on sparc_tests gives the same relevance as ``fixed_n``."""
    rng = np.random.default_rng(seed)
    kinds = [(f, r) for f in FAMILIES for r in (NULL, SLOWDOWN)] + [("step", NULL), ("drift", NULL)]
    per_kind = max(1, streams // len(kinds))
    problems: list[str] = []
    compared = 0
    contradictions = 0
    seen_by: dict[str, int] = {}
    for family, ratio in kinds:
        if family == "step":
            a, b = rounds_of("log-normal", ratio, per_kind, rounds, rng)
            a[:, 20:] *= 1.5
        elif family == "drift":  # the drift of B (1 ms a run from 10 ms): the martingale's case
            a, b = rounds_of("log-normal", ratio, per_kind, rounds, rng)
            b *= 1 + 0.1 * np.arange(rounds)
        else:
            a, b = rounds_of(family, ratio, per_kind, rounds, rng)
        result = trace(a, b, math.log(ratio[0] / ratio[1]), record=True)
        lows, highs, settled, contradicted, not_alike = result.history
        for s in range(per_kind):
            comparison = SequentialComparison(MARGIN, ALPHA, 1, tie_seed=s)
            stop = None
            for t in range(rounds):
                comparison.add(float(a[s, t]), float(b[s, t]))
                got = comparison.settlement()
                low, high = _reported(lows[s, t], highs[s, t])
                verdict = relevance(*read_off(low, high, MARGIN))
                mine = (low, high, bool(settled[s, t]), bool(contradicted[s, t]), bool(not_alike[s, t]), verdict)
                theirs = (got.low, got.high, got.settled, got.contradicted, not got.alike, got.verdict)
                compared += 1
                if mine != theirs and len(problems) < 5:
                    problems.append(f"{family} stream {s} round {t + 1}: vectorised {mine}, "
                                    f"SequentialComparison {theirs}")
                if stop is None and (not got.alike or (t + 1 >= MIN_ROUNDS and got.settled)):
                    stop = t + 1
            contradictions += comparison.contradicted
            if comparison.change() is not None:
                seen_by[comparison.change().test] = seen_by.get(comparison.change().test, 0) + 1
            if stop != (int(result.stop_round[s]) if result.settled[s] or result.not_alike[s] else None) \
                    and len(problems) < 5:
                problems.append(f"{family} stream {s}: stop round {stop}, vectorised {result.stop_round[s]}")
        # compare's own path for the naive verdict, on a few prefixes
        for s in range(min(per_kind, 3)):
            for n in (6, 12, 30):
                x, y = a[s, :n], b[s, :n]
                suite = simultaneous_suite([sparc_tests(x, y, MARGIN, paired=True, confidence=FIXED_LEVEL)],
                                           [(x, y)], ["metric"], ALPHA)
                if suite.decisions[0].relevance is not fixed_n(x, y)[2] and len(problems) < 5:
                    problems.append(f"{family} stream {s} n {n}: compare says {suite.decisions[0].relevance}, "
                                    f"fixed_n says {fixed_n(x, y)[2]}")
    if contradictions == 0:
        problems.append("no stream was contradicted: the step change did not exercise that branch")
    for test in ("exchangeability", "stretches"):
        if not seen_by.get(test):
            problems.append(f"no stream was seen not alike by the {test} test: the step and the drift did not "
                            "exercise it")
    return compared, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2000, help="simulated ab runs per row")
    parser.add_argument("--max-rounds", type=int, default=1000, help="rounds per stream (ab's budget)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="small sizes (the suite's version: < 60 s)")
    parser.add_argument("--naive-streams", type=int, default=500, help="streams given to the naive procedure")
    parser.add_argument("--naive-rounds", type=int, default=100, help="rounds of the naive validity check")
    parser.add_argument("--fixed-trials", type=int, default=400, help="simulations per fixed n")
    parser.add_argument("--check-streams", type=int, default=390, help="streams of the equality check")
    parser.add_argument("--check-rounds", type=int, default=300, help="rounds of the equality check")
    parser.add_argument("--drift-streams", type=int, default=2000, help="streams per not-alike scenario")
    parser.add_argument("--drift-rounds", type=int, default=1000, help="rounds of the not-alike scenarios")
    parser.add_argument("--only-drift", action="store_true", help="section 5 only (rounds that are not alike)")
    args = parser.parse_args(argv)
    if args.quick:
        args.streams, args.max_rounds = 400, 400
        args.naive_streams, args.naive_rounds, args.fixed_trials = 150, 60, 100
        args.check_streams, args.check_rounds = 130, 150
        args.drift_streams, args.drift_rounds = 300, 300
    if args.streams < 1 or args.max_rounds < MIN_ROUNDS:
        parser.error(f"--streams must be >= 1 and --max-rounds >= {MIN_ROUNDS}")
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    targets: list[tuple[str, bool]] = []

    if not args.only_drift:
        compared, problems = equality_check(args.check_streams, args.check_rounds, args.seed + 1)
        for problem in problems:
            print(f"   {problem}")
        targets.append((f"vectorised path identical to SequentialComparison ({compared} rounds compared: CS, "
                        "verdict, settled, contradicted, not alike, stop round)", not problems))
        validity_and_verdicts(args, rng, targets)
        print()
        rounds_to_verdict(args, rng)
        print()
    not_alike_rounds(args, rng, targets)
    print()
    for label, ok in targets:
        print(f"{'PASS' if ok else 'FAIL'}: {label}")
    failed = sum(not ok for _, ok in targets)
    print(f"{len(targets) - failed} of {len(targets)} targets PASS; {time.perf_counter() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
