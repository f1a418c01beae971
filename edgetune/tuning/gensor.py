"""Gensor-style construction-graph search (Liu, Diao et al., IPDPS 2025, arXiv 2502.11407), the
graph and its Markov chain in pure Python; the TVM side (states as MetaSchedule traces, the
analytic hardware model, the ``PySearchStrategy``) is :mod:`edgetune._tvm.metaschedule.gensor`.

**The graph.** A *state* is a concrete tensor program: a design-space sketch with every sampling
decision made. A *transition* is one scheduling primitive's parameter changed by one notch:
a prime factor of a tile split moved between two tile levels, a compute-at location moved one
loop in or out, an unroll / vectorize / parallel extent (a categorical decision) moved up or
down; on GPU targets the same moves change thread and block extents, virtual threads and the
shared-memory staging (their decisions are tile splits, categoricals and compute locations
there). A move the schedule's verifier or postprocessors reject does not exist: resource limits
(threads per block, shared memory) cut the graph.

**The chain.** Every state has a score S (log2 of its predicted speed: an analytic model of the
hardware mixed with the cost model's prediction, see the adapter). From state s the chain moves
to an *improving* neighbour t with probability ``exp(beta·(S(t) − S(s)))`` normalised over the
improving neighbours of s; a state with no improving neighbour keeps itself with probability 1:
it is *absorbing*. A walk starts from an initial state (a sketch with random decisions, or one
of the best measured schedules) and follows the chain until it is absorbed (or ``max_steps``).

**The search.** Each round runs walks until it has a batch of new absorbing states, or until its
walks or its evaluation budget are spent; the most promising absorbing states (by score) are
measured. Measurements retrain the cost model and recalibrate the analytic model, so the scores
— and with them the chain — change between rounds (scores are recomputed lazily, once per round,
for the states a walk visits). **Stopping rule:** when ``patience`` rounds in a row find no new
absorbing state, the graph is explored as far as the chain leads and the task stops.

Where this follows the paper: states and primitive transitions, a Markov chain whose transition
probabilities come from a hardware-aware score of the target state, walks to absorbing states,
only promising final states measured. Where it departs: the paper builds its programs
bottom-up from an empty schedule (construction); here the walks start from MetaSchedule's
sketches with random decisions (or from measured schedules) and move through the same decision
space as the other strategies, so records, builders, runners and boards are shared. The paper's
analytic model is GPU-only; here it covers CPU caches, vector lanes and cores as well, it is
mixed with the XGBoost cost model that the other strategies train, and measured states correct
the scores of the states around them (the analytic model alone led the walks to slow schedules
on a dense layer). Neighbours are scored a few at a time, so a row of the chain covers the
neighbours evaluated so far.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

Key = Hashable


@dataclass
class Node:
    """A state of the graph as explored so far."""

    score: float = -math.inf
    round: int = -1  # the round the score was computed in
    successors: list[Key] | None = None  # its neighbours by one move, once listed (in random order)
    seen: int = 0  # how many of them have been evaluated (invalid ones are dropped from the list)


@dataclass
class RoundStats:
    """What one round of walks did (for the progress log and the tests)."""

    walks: int = 0
    steps: int = 0
    evaluated: int = 0
    absorbed: int = 0
    new: int = 0
    found: list[Key] = field(default_factory=list)


class Chain:
    """The construction graph and its Markov chain.

    ``expand(key)`` lists the neighbours of a state (one primitive move each; cheap: they are
    not checked). ``score(keys)`` gives each state's score, higher is faster, in log2 units (a
    difference of 1 = predicted twice as fast), −inf for a state that is not valid.
    """

    def __init__(self, expand: Callable[[Key], Sequence[Key]], score: Callable[[Sequence[Key]], Sequence[float]],
                 rng: random.Random, beta: float = 4.0, max_steps: int = 48, patience: int = 2, chunk: int = 8):
        self.expand, self.score_fn, self.rng = expand, score, rng
        self.beta, self.max_steps, self.patience, self.chunk = beta, max_steps, patience, chunk
        self.nodes: dict[Key, Node] = {}
        self.round = 0
        self.evaluated = 0
        self.absorbing: set[Key] = set()
        self.taken: set[Key] = set()  # absorbing states already proposed (or measured)
        self.stale_rounds = 0

    # ---- the chain

    def _scores(self, keys: Sequence[Key]) -> list[float]:
        """Scores of ``keys`` in the current round (computed once per round per state)."""
        todo = [k for k in dict.fromkeys(keys) if self.nodes.setdefault(k, Node()).round != self.round]
        if todo:
            for k, s in zip(todo, self.score_fn(todo)):
                node = self.nodes[k]
                node.score, node.round = float(s), self.round
            self.evaluated += len(todo)
        return [self.nodes[k].score for k in keys]

    def successors(self, key: Key) -> list[Key]:
        """The neighbours of ``key`` (listed once, shuffled: they are evaluated in that order)."""
        node = self.nodes.setdefault(key, Node())
        if node.successors is None:
            node.successors = [k for k in dict.fromkeys(self.expand(key)) if k != key]
            self.rng.shuffle(node.successors)
        return node.successors

    def transitions(self, key: Key) -> list[tuple[Key, float]]:
        """The chain's row for ``key``: (next state, probability), summing to one; ``[(key, 1.0)]``
        for an absorbing state (no improving neighbour).

        Rows are built lazily: neighbours are evaluated ``chunk`` at a time until one improves on
        ``key`` (the row is then over the improving neighbours evaluated so far: a later visit
        may evaluate more), and all of them before a state is called absorbing. Neighbours
        outside the resource limits (score −inf: they do not replay, or the verifier rejects
        them) are dropped from the graph."""
        here = self._scores([key])[0]
        node = self.nodes[key]
        succ = self.successors(key)
        while True:
            if node.seen < len(succ):
                chunk = succ[node.seen: node.seen + self.chunk]
                scores = self._scores(chunk)
                dead = {k for k, sc in zip(chunk, scores) if not math.isfinite(sc)}
                if dead:
                    succ[node.seen: node.seen + len(chunk)] = [k for k in chunk if k not in dead]
                node.seen += len(chunk) - len(dead)
            evaluated = succ[: node.seen]
            better = [(k, sc) for k, sc in zip(evaluated, self._scores(evaluated)) if sc > here + 1e-9]
            if better or node.seen >= len(succ):
                break
        if not better:
            return [(key, 1.0)]
        top = max(sc for _k, sc in better)
        weights = [math.exp(self.beta * (sc - top)) for _k, sc in better]  # shifted: no overflow
        total = sum(weights)
        return [(k, w / total) for (k, _s), w in zip(better, weights)]

    def walk(self, start: Key) -> tuple[Key, int, bool]:
        """Follow the chain from ``start``: (where it ended, steps, absorbed)."""
        here = start
        for step in range(self.max_steps):
            row = self.transitions(here)
            if len(row) == 1 and row[0][0] == here:
                if not math.isfinite(self.nodes[here].score):
                    return here, step, False  # a state outside the resource limits, nothing around it
                self.absorbing.add(here)
                return here, step, True
            r, acc = self.rng.random(), 0.0
            for k, p in row:
                acc += p
                if r <= acc:
                    here = k
                    break
            else:
                here = row[-1][0]
        return here, self.max_steps, False

    # ---- the search

    def next_round(self) -> None:
        """Scores change between rounds (the cost model learned, the analytic model recalibrated)."""
        self.round += 1

    def run_round(self, starts: Sequence[Key], want: int, max_walks: int, max_evaluated: int,
                  until: float | None = None) -> RoundStats:
        """Walk from ``starts`` (cycled) until ``want`` new absorbing states are found, or the
        walks or the evaluation budget are spent, or ``time.monotonic()`` passes ``until`` (a
        tuning deadline: the round then ends with what it found). The new states come back
        best first."""
        stats = RoundStats()
        if not starts:
            return stats
        evaluated0 = self.evaluated
        found: list[Key] = []
        while (stats.walks < max_walks and len(found) < want and self.evaluated - evaluated0 < max_evaluated
               and (until is None or time.monotonic() < until)):
            start = starts[stats.walks % len(starts)]
            end, steps, absorbed = self.walk(start)
            stats.walks += 1
            stats.steps += steps
            stats.absorbed += absorbed
            if absorbed and end not in self.taken and end not in found:
                found.append(end)
        stats.evaluated = self.evaluated - evaluated0
        stats.new = len(found)
        if until is None or time.monotonic() < until:  # a round cut by the deadline proves nothing
            self.stale_rounds = 0 if found else self.stale_rounds + 1
        scores = self._scores(found)
        stats.found = [k for _s, k in sorted(zip(scores, found), key=lambda p: -p[0])]
        self.taken.update(stats.found)
        return stats

    def mark_measured(self, keys: Sequence[Key]) -> None:
        """States measured by any strategy are not proposed again."""
        self.taken.update(keys)

    @property
    def converged(self) -> bool:
        """The stopping rule: ``patience`` rounds in a row found no new absorbing state."""
        return self.stale_rounds >= self.patience
