"""The command line's own modules: ``dltrain champion``, ``dltrain history``, ``dltrain reap`` and how a
command finds Airflow connections and MLflow outside a task (``commands.connections``). The ``dltrain``
entry point itself, which dispatches to them, the demo and the backfill report, is
:mod:`airflow_provider_dltrain.cli`."""
