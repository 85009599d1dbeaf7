"""The oracle for the champion for D and the training skip: plain Python written from the docs.

Never calls the provider. Sources: docs/concepts.md ("Champion history", "Unchanged means the same
content"), docs/operators/registry.md, docs/backfills.md, docs/training.md.

* C1 (champion for D) a promotion for cut-off C makes its version champion for C onwards, until the
  next later cut-off that was promoted; a backfilled promotion for an older C' rules [C', next
  cut-off) without touching later dates; re-promoting a cut-off replaces the earlier champion for
  it. Before the first promoted cut-off there is no champion. A promotion for C never changes the
  answer for a date before C.
* C2 (the gate) the default gate (``max``, ``min_delta=0``) promotes when there is no champion for
  the cut-off or the candidate is better than it; a tie never promotes. Gating a version again for
  the same cut-off and rule replays the recorded decision.
* C3 (the live alias) moves only to a promotion whose cut-off is not older than the live
  champion's: it names the promotion with the greatest cut-off (the latest such promotion).
* T1 (training skip) a run for D skips when the rows it selects, the code and the hyper-parameters
  (key order does not matter) equal those of the champion for D, or of a version registered for D
  the gate already judged; otherwise it trains, naming which of data / code / hyper-parameters
  differ from the champion's. Where the rows sit (which files, after a rewrite) is no fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Facts = tuple[frozenset[tuple[str, int]], str, tuple[tuple[str, float], ...]]  # rows, code, hparams


@dataclass
class Version:
    number: int
    cutoff: str  # the training data cut-off (what it was trained on)
    value: float  # its recorded gate metric
    facts: Facts
    decided: dict[str, bool] = field(default_factory=dict)  # cut-off gated for -> promoted?


@dataclass
class RegistryModel:
    versions: dict[int, Version] = field(default_factory=dict)
    promotions: list[tuple[str, int, int]] = field(default_factory=list)  # (cut-off, order, version)

    def champion(self, day: str, exclude: int | None = None) -> int | None:
        """C1: the version of the latest promotion among the greatest cut-off at or before ``day``."""
        best: tuple[str, int, int] | None = None
        for cutoff, order, version in self.promotions:
            if cutoff <= day and version != exclude and (best is None or (cutoff, order) > best[:2]):
                best = (cutoff, order, version)
        return best[2] if best else None

    def gate(self, version: int, cutoff: str) -> bool:
        """C2: the decision for ``version`` at ``cutoff``, recorded (a replay changes nothing)."""
        mv = self.versions[version]
        if cutoff in mv.decided:
            return mv.decided[cutoff]
        champion = self.champion(cutoff, exclude=version)
        passed = champion is None or mv.value > self.versions[champion].value
        mv.decided[cutoff] = passed
        if passed:
            self.promotions.append((cutoff, len(self.promotions), version))
        return passed

    def alias(self) -> int | None:
        """C3: the live alias names the promotion with the greatest (cut-off, order)."""
        return self.champion("9999-12-31")

    def training(self, day: str, facts: Facts) -> tuple[set[int], set[str]]:
        """T1: (versions a skip may name, empty when it must train; the facts that changed)."""
        champion = self.champion(day)
        if champion is not None and self.versions[champion].facts == facts:
            return {champion}, set()
        judged = {
            mv.number
            for mv in self.versions.values()
            if mv.cutoff == day and mv.decided and mv.facts == facts
        }
        changed: set[str] = set()
        if champion is not None:
            before = self.versions[champion].facts
            names = ("data", "code", "hyper-parameters")
            changed = {name for name, a, b in zip(names, before, facts, strict=True) if a != b}
        return judged, changed
