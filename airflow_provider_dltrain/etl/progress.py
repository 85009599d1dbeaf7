"""Progress of long Spark jobs in the task log: tasks done, rate and ETA."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)


class SparkProgress:
    """Log the active stages' progress every ``interval`` seconds while the ``with`` block runs."""

    def __init__(self, spark: Any, what: str, interval: float = 10.0) -> None:
        self.spark, self.what, self.interval = spark, what, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dltrain-spark-progress", daemon=True)
        self._started = 0.0

    def __enter__(self) -> SparkProgress:
        self._started = time.monotonic()
        log.info("%s: started", self.what)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        state = "failed" if exc_type else "finished"
        log.info("%s: %s in %.1fs", self.what, state, time.monotonic() - self._started)

    def snapshot(self) -> tuple[int, int]:
        tracker = self.spark.sparkContext.statusTracker()
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                done, total = self.snapshot()
            except Exception:  # the session may be stopping; progress is best effort
                return
            elapsed = time.monotonic() - self._started
            eta = f", ETA {elapsed / done * (total - done):.0f}s" if done and total > done else ""
            log.info("%s: %d/%d task(s) done after %.0fs%s", self.what, done, total, elapsed, eta)
