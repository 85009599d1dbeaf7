"""Optimistic partition commits: delta-rs detects the conflict, tenacity retries from a fresh snapshot.

No lock is taken, on S3 or locally. delta-rs 1.6 writes every commit file with a put-if-absent
(a conditional put on S3, a no-replace rename on a local filesystem), so two writers can never both
become version N: the loser rebases onto the winner and the conflict checker decides whether that
is safe. A predicate overwrite (``write_deltalake(predicate=...)``) records what it read and is
refused when the winner changed those files. A commit of files written by another engine
(``create_write_transaction``) records no read predicate, and two of them into a partition that is
still empty would both append: measured, 4 concurrent writers left all 4 copies. So every
partition commit also carries an application transaction (``txn``) whose app id names the
partition, and delta-rs refuses a commit when a concurrent winner carries the same app id
("Concurrent transaction failed"). Concurrent writes of one partition therefore always conflict,
however they read it; writes of different partitions never do.

The loser of a conflict re-reads the snapshot and runs its whole attempt again (schema check,
content-digest "unchanged" check, commit): a retry that now finds exactly its rows commits nothing,
one that finds another writer's rows replaces them. Each commit is found again through its txn
token, not as "the newest commit of the partition", since another writer may have committed since.

A commit that delta-rs reported done but whose token is not in the log is retried the same way, with
a warning, never reported as a user error. It happens where the store's put-if-absent is not atomic:
moto's server checks ``If-None-Match`` and then stores the object, so two writers can both "create"
version N and the later one silently replaces the earlier commit. The retry re-reads the snapshot;
if the commit was there after all (a stale read), the content-digest check finds these rows and
commits nothing.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_dltrain.exceptions import CommitConflictError, DltrainTransientError
from airflow_provider_dltrain.lake.digest import canonical_partition
from airflow_provider_dltrain.lake.log import DeltaLog
from airflow_provider_dltrain.lake.storage import StorageOptions

if TYPE_CHECKING:
    from airflow_provider_dltrain.lake.ref import DeltaRef

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Attempts per write (the first one included) before a CommitConflictError. Each conflict means
# another writer of the same partition committed, so N concurrent writers need at most N attempts.
COMMIT_ATTEMPTS = 8
TXN_PREFIX = "dltrain/partition/"


class LostCommitError(DltrainTransientError):
    """delta-rs reported this attempt's commit done, yet its txn token is in no commit of the log.

    Retried by :func:`with_retries` like a conflict; never leaves it (exhausted, it becomes a
    :class:`CommitConflictError`).
    """

    def __init__(self, message: str, token: int) -> None:
        super().__init__(message)
        self.token = token


def txn_app_id(spec: Mapping[str, str]) -> str:
    """The application-transaction id every commit of ``spec`` carries (one per partition)."""
    return TXN_PREFIX + canonical_partition(spec)


def new_token() -> int:
    """A txn version for one attempt: increasing over time (as Delta expects), unique among racers."""
    return time.time_ns() // 1000 * 1000 + random.randrange(1000)


def commit_properties(custom: Mapping[str, str], spec: Mapping[str, str], token: int) -> Any:
    from deltalake import CommitProperties, Transaction

    return CommitProperties(
        custom_metadata=dict(custom), app_transactions=[Transaction(txn_app_id(spec), token)]
    )


def find_commit(
    uri: str, spec: Mapping[str, str], token: int, storage_options: StorageOptions | None, since: int = 0
) -> DeltaRef:
    """The version whose commit carries this attempt's txn token (newest first; usually the newest)."""
    log = DeltaLog(uri, storage_options)
    newest = log.latest_version()
    app_id = txn_app_id(spec)
    for version in range(newest if newest is not None else -1, since - 1, -1):
        for action in log.commit_actions(version):
            txn = action.get("txn")
            if txn and txn.get("appId") == app_id and int(txn.get("version", -1)) == token:
                return log.ref(version)
    raise LostCommitError(f"the commit of {dict(spec)} to {uri} (txn {token}) is not in its log", token)


def with_retries(uri: str, spec: Mapping[str, str], attempt: Callable[[int], T]) -> T:
    """Run ``attempt(attempt_number)`` until it does not hit a commit conflict, at most :data:`COMMIT_ATTEMPTS` times.

    :raises CommitConflictError: every attempt lost to a concurrent writer of the same partition.
    """
    from deltalake.exceptions import CommitFailedError
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

    def log_conflict(state: Any) -> None:
        err = state.outcome.exception() if state.outcome else None
        if isinstance(err, LostCommitError):
            logger.warning(
                "commit of %s to %s (txn %d) is not in its log although delta-rs reported it done "
                "(attempt %d of %d): another writer's commit may have replaced it; "
                "re-reading the table and retrying",
                dict(spec),
                uri,
                err.token,
                state.attempt_number,
                COMMIT_ATTEMPTS,
            )
            return
        logger.warning(
            "commit of %s to %s conflicted with a concurrent writer (attempt %d of %d): %s; "
            "re-reading the table and retrying",
            dict(spec),
            uri,
            state.attempt_number,
            COMMIT_ATTEMPTS,
            err,
        )

    retrying = Retrying(
        retry=retry_if_exception_type((CommitFailedError, LostCommitError)),
        stop=stop_after_attempt(COMMIT_ATTEMPTS),
        # random waits: racers that conflicted once must not meet again at the same instant
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        before_sleep=log_conflict,
        reraise=True,
    )
    try:
        for tried in retrying:
            with tried:
                result = attempt(tried.retry_state.attempt_number)
                if tried.retry_state.attempt_number > 1:
                    logger.info(
                        "commit of %s to %s done at attempt %d",
                        dict(spec),
                        uri,
                        tried.retry_state.attempt_number,
                    )
                return result
    except (CommitFailedError, LostCommitError) as err:
        raise CommitConflictError(
            f"{COMMIT_ATTEMPTS} attempts to commit {dict(spec)} to {uri} each lost to a concurrent writer "
            f"of the same partition; nothing of this write was committed. Retry the task once the other "
            f"writers are done. Last error: {err}"
        ) from err
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover
