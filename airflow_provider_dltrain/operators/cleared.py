"""Was this try stopped because someone cleared the task while it ran?

Clearing a running task (the UI's "Clear", ``POST .../clearTaskInstances``, ``airflow tasks clear``)
sets its state to ``restarting``; the supervisor then kills the try, which runs ``on_kill``, and the
scheduler starts the next try. For a task that started a cloud job, stopping the job there would
throw away its progress and make the next try start a second one: a cleared try leaves its job
running, and the next try finds it by its name and re-attaches (as after a worker crash). Any other
kill (marked failed or success, execution timeout, the run deleted) stops the job as before.

The state comes from the Execution API through the task's supervisor (``get_task_states``), the only
source a task process has; on any doubt the answer is "not cleared", so the job is stopped.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

RESTARTING = "restarting"


def cleared_while_running(task: Any) -> bool:
    """True when Airflow is stopping ``task``'s current try because it was cleared (state ``restarting``)."""
    try:
        from airflow.sdk import get_current_context
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        ti = get_current_context()["ti"]
        map_index = getattr(ti, "map_index", -1)
        states = RuntimeTaskInstance.get_task_states(
            dag_id=ti.dag_id,
            task_ids=[ti.task_id],
            run_ids=[ti.run_id],
            map_index=map_index if map_index is not None and map_index >= 0 else None,
        )
    except Exception as err:  # not in a task process, or the API cannot be asked: stop the job
        log.debug("cannot read the state of %s: %s", getattr(task, "task_id", task), err)
        return False
    run_states = (states.get(ti.run_id) or {}) if isinstance(states, dict) else {}
    return any(str(state).lower().endswith(RESTARTING) for state in run_states.values())
