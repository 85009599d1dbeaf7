"""``TrainModelOperator``: train on one pinned Delta version, anywhere, tracked in MLflow."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink

from airflow_provider_dltrain.operators.engine_run import EngineJobLink
from airflow_provider_dltrain.operators.openlineage import LineageResultMixin
from airflow_provider_dltrain.operators.remote_training import MLFLOW_RUN_URL_KEY, RemoteTraining
from airflow_provider_dltrain.operators.task_context import run_info
from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error
from airflow_provider_dltrain.store.config import mlflow_run_url
from airflow_provider_dltrain.training.backends import checked_backend_options
from airflow_provider_dltrain.training.finite import check_mode
from airflow_provider_dltrain.training.request import checked_extra_tracking
from airflow_provider_dltrain.utils.input_checks import check_dates

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

    from airflow_provider_dltrain.lake.ref import DeltaRef
    from airflow_provider_dltrain.store.config import TrackingConfig
    from airflow_provider_dltrain.training.request import TrainingRequest
    from airflow_provider_dltrain.training.skip_check import TrainingCheck


class MlflowRunLink(BaseOperatorLink):
    """ "MLflow run" button: the run a TrainModelOperator task logged to."""

    name = "MLflow run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.bases.xcom import BaseXCom

        value = BaseXCom.get_value(ti_key=ti_key, key=MLFLOW_RUN_URL_KEY)  # type: ignore[arg-type]
        return str(value) if value else ""


class TrainModelOperator(LineageResultMixin, RemoteTraining, BaseOperator):
    """Run ``train_fn(ctx)`` on exactly ``dataset``'s Delta version and return a TrainResult dict.

    The training function never sees Airflow: the same function runs in a notebook with
    ``run_training``. Where it runs is chosen by composition, e.g. ``backend="torch_distributor",
    backend_options={"num_processes": 2}``. Deterministic errors (bad spec, bad data, a user error
    in a rank) fail the task without retries; per-epoch progress appears in the task log. The same
    rows (in whatever files), code, hyper-parameters and world size give bit-identical weights on CPU.

    Returns ``{run_id, model_uri, metrics, dataset, params, experiment_id, data_fingerprint,
    code_hash, params_hash, world_size, weights_sha256, run_dir}``.

    :param dataset: the pinned version, a DeltaRef dict or the XComArg of the task producing it (templated).
    :param train_fn: ``train(ctx) -> dict[str, float]`` or ``"package.module:function"`` (preferred in
        DAG files: nothing heavy is imported while the DAG is parsed).
    :param hparams: hyper-parameters given to ``ctx.hparams``, a dict or its JSON (e.g.
        ``"{{ params.hparams | tojson }}"``); ``seed`` seeds every rank (templated).
    :param data_filter: DNF filter, e.g. ``[["ds", "<=", "{{ data_interval_start | ds }}"]]`` (templated).
    :param data_cutoff: value of the ``dltrain.data_cutoff`` tag, a date (``YYYY-MM-DD`` or a full ISO
        timestamp, checked before any work starts); default the largest ``<=`` bound on a partition
        column in ``data_filter`` (templated).
    :param backend: ``"local"``, ``"torch_distributor"``, ``"sagemaker"`` (a training job per try,
        see ``engines/sagemaker.py``), ``"ec2"`` (a per-run EC2 cluster,
        ``engines/ec2.py``), ``"ray"`` (a Ray job on an existing cluster, ``engines/ray_jobs.py``),
        ``"kubeflow"`` (a Kubeflow Trainer TrainJob, ``engines/kubeflow.py``), another registered
        name, or a backend object.
    :param backend_options: the named backend's options: its options object (``DdpOptions``,
        ``SageMakerOptions``, …) or a dict of its fields, e.g. ``{"num_processes": 2}``, checked (names
        and values) when the DAG file is parsed, the typed object kept (a dict with a Jinja value:
        checked once rendered); for ``sagemaker`` ``staging_uri``, ``role``, ``instance_type``, ``instance_count``,
        ``processes_per_host``, ``distribution``, ``use_spot``, ``tracking_secret``, … (no secrets);
        for ``ray`` ``address`` (the dashboard URL), ``staging_uri``, ``num_workers``, …; for
        ``kubeflow`` ``staging_uri``, ``image``, ``num_nodes``, ``runtime``, ``service_account``, ….
    :param experiment_name: MLflow experiment (default: the DAG id) (templated).
    :param mlflow_conn_id: ``mlflow`` connection; when missing the embedded store is used.
    :param aws_conn_id: ``aws`` connection for ``s3://`` tables and for cloud backends' API calls.
    :param skip_if_unchanged: a registered model name: skip the task (downstream registration is
        skipped too) when the version that is champion for this data cut-off was trained on the same
        rows (content digests of the partitions read, not file names), code and hyper-parameters
        (templated).
    :param code_version: names the training code (e.g. ``"{{ var.value.model_git_sha }}"``) instead of
        hashing the source of ``train_fn``'s module and the modules of its package it imports
        (templated).
    :param deferrable: for a cloud backend, wait for the job in the triggerer (``EngineJobTrigger``).
    :param poll_interval: seconds between status checks of a cloud job.
    :param trial: set by :class:`~airflow_provider_dltrain.operators.experiments.ExpandTrialsOperator`
        through ``expand_kwargs``: ``{name, index, parent_run_id, early_stopping}``. The run becomes a
        child run of the search's parent run; a FINISHED run of the same trial under that parent with
        the same data, code and hyper-parameters is returned instead of training again (templated).
    :param non_finite: a NaN or infinite metric fails the task without retries, the MLflow run ends
        FAILED and no model is logged: ``"fail_at_end"`` (default, final values), ``"fail_at_any_step"``
        (every logged value) or ``"allow"`` (the run is tagged ``dltrain.non_finite``).
    :param extra_tracking: tracking targets beside MLflow (every backend), e.g. ``{"wandb":
        {"project": "digits", "entity": "team", "mode": "offline", "required": False}}``: rank 0 also
        records the run in W&B with this task try's dag_id, run_id, task_id and try_number (see
        :mod:`airflow_provider_dltrain.training.wandb_tracking`); checked when the DAG is parsed.
    """

    template_fields: Sequence[str] = (
        "dataset",
        "hparams",
        "data_filter",
        "data_cutoff",
        "experiment_name",
        "skip_if_unchanged",
        "code_version",
        "trial",
    )
    template_fields_renderers = {"dataset": "json", "hparams": "json", "data_filter": "json", "trial": "json"}
    operator_extra_links = (MlflowRunLink(), EngineJobLink())
    ui_color = "#fde9d9"

    def __init__(
        self,
        *,
        dataset: Any,
        train_fn: Any,
        hparams: Mapping[str, Any] | None = None,
        data_filter: Any = None,
        data_cutoff: str | None = None,
        backend: Any = "local",
        backend_options: Mapping[str, Any] | object | None = None,
        experiment_name: str | None = None,
        mlflow_conn_id: str = "mlflow_default",
        aws_conn_id: str | None = None,
        skip_if_unchanged: str | None = None,
        code_version: str | None = None,
        deferrable: bool = False,
        poll_interval: float = 30.0,
        trial: Any = None,
        non_finite: str = "fail_at_end",
        extra_tracking: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dataset = dataset
        self.train_fn = train_fn
        self.hparams = hparams
        self.data_filter = data_filter
        self.data_cutoff = data_cutoff
        check_dates({"data_cutoff": data_cutoff}, rendered=False)  # a literal bad date: refused at parse
        self.backend = backend
        self.backend_options = checked_backend_options(backend, backend_options)  # unknown keys: at parse
        self.experiment_name = experiment_name
        self.mlflow_conn_id = mlflow_conn_id
        self.aws_conn_id = aws_conn_id
        self.skip_if_unchanged = skip_if_unchanged
        self.code_version = code_version
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.trial = trial
        self.non_finite = check_mode(non_finite)  # refused when the DAG file is parsed
        self.extra_tracking = checked_extra_tracking(extra_tracking)  # at parse: malformed only

    def _storage_options(self, uri: str) -> dict[str, str] | None:
        from airflow_provider_dltrain.operators.task_context import storage_options_for

        return storage_options_for(self.aws_conn_id, uri)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_dltrain.airflow_compat import AirflowSkipException
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook
        from airflow_provider_dltrain.lake.ref import DeltaRef
        from airflow_provider_dltrain.training.runner import run_training_request

        info = run_info(context)
        with fail_fast_on_user_error():
            check_dates({"data_cutoff": self.data_cutoff}, rendered=True)  # not after hours of training
            ref = DeltaRef.coerce(self.dataset)
            hparams = _hparams(self.hparams)
            tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
            storage = self._storage_options(ref.uri)
            skip_reason = self._unchanged(tracking, ref, hparams, storage) if self.skip_if_unchanged else None
            if skip_reason:
                self.log.info("Skipping training: %s", skip_reason)
                raise AirflowSkipException(skip_reason)
            trial = _trial(self.trial)
            reused = self._reused_trial(tracking, trial, ref, hparams, storage) if trial else None
            if reused is not None:
                return reused
            # a trial's early stopping on a cloud backend is refused here, naming the trial
            request = self._request(info, trial, ref=ref, hparams=hparams, tracking=tracking, storage=storage)
            if request.remote:
                remote = self.train_remotely(context, request)
                self._keep_for_lineage(remote, tracking_uri=tracking.tracking_uri)
                return remote
            result = run_training_request(request)
        if trial:
            self._record_trial(tracking, trial, result)
        url = mlflow_run_url(tracking.tracking_uri, result.experiment_id, result.run_id)
        context["ti"].xcom_push(key=MLFLOW_RUN_URL_KEY, value=url)
        self.log.info("MLflow run %s, model %s, metrics %s", result.run_id, result.model_uri, result.metrics)
        self._keep_for_lineage(result.to_dict(), tracking_uri=tracking.tracking_uri)
        return result.to_dict()

    def _request(
        self,
        info: Mapping[str, Any],
        trial: Mapping[str, Any] | None,
        *,
        ref: DeltaRef,
        hparams: dict[str, Any],
        tracking: TrackingConfig,
        storage: dict[str, str] | None,
    ) -> TrainingRequest:
        """This task try's training run, from the rendered fields and what ``execute`` resolved."""
        from airflow_provider_dltrain.training.request import TrainingRequest

        return TrainingRequest(
            self.train_fn,
            ref,
            hparams,
            code_version=self.code_version,
            data_filter=self.data_filter,
            cutoff=self.data_cutoff,
            storage_options=storage,
            tracking=tracking,
            experiment_name=self.experiment_name or str(info["dag_id"] or "dltrain"),
            run_name=_run_name(info, trial),
            tags={**_lineage_tags(info), **_trial_tags(trial)},
            early_stopping=_trial_stopping(trial),
            non_finite=self.non_finite,
            extra_tracking=self.extra_tracking,
            backend=self.backend,
            backend_options=self.backend_options,
            poll_interval=self.poll_interval,
        )

    def _lineage_datasets(self, result: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """OpenLineage: the Delta version trained on in, the model the MLflow run logged out."""
        from airflow_provider_dltrain.operators.openlineage import delta_dataset, trained_model_dataset

        data = result["dataset"]
        outputs = []
        if result.get("model_uri"):
            outputs.append(
                trained_model_dataset(result["tracking_uri"], result["model_uri"], result["run_id"])
            )
        return [delta_dataset(data["uri"], data["version"])], outputs

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The cloud training job ended (deferrable mode): its TrainResult, or its failure."""
        from airflow_provider_dltrain.hooks.mlflow import MlflowHook

        with fail_fast_on_user_error():
            result = self.complete_remote(context, event)
        tracking = MlflowHook(mlflow_conn_id=self.mlflow_conn_id).get_tracking_config()
        self._keep_for_lineage(result, tracking_uri=tracking.tracking_uri)
        return result

    def on_kill(self) -> None:
        """Stop the cloud training job this task started (the Amazon provider's operator does not)."""
        self.kill_remote_job()

    def _record_trial(self, tracking: Any, trial: Mapping[str, Any], result: Any) -> None:
        """Keep the trial's result on its run (for unchanged re-runs); say when it stopped early."""
        from airflow_provider_dltrain.experiments.search_runs import record_trial_result

        record_trial_result(tracking, result.to_dict())
        if result.stopped:
            self.log.info(
                "Trial %s STOPPED EARLY at step %s: %s",
                trial["name"],
                result.stopped["step"],
                result.stopped["reason"],
            )

    def _reused_trial(
        self, tracking: Any, trial: Mapping[str, Any], ref: Any, hparams: dict[str, Any], storage: Any
    ) -> dict[str, Any] | None:
        """The earlier result of this trial when its data, code and hyper-parameters are unchanged."""
        from airflow_provider_dltrain.experiments.search_runs import reusable_trial
        from airflow_provider_dltrain.training.runner import IDENTITY_TAGS, run_identity

        identity = run_identity(
            self.train_fn, ref, hparams, self.data_filter, storage, code_version=self.code_version or None
        )
        wanted = {tag: identity[tag] for tag in IDENTITY_TAGS}
        found = reusable_trial(tracking, str(trial["parent_run_id"]), str(trial["name"]), wanted)
        if found is not None:
            self.log.info(
                "Trial %s unchanged since MLflow run %s (same data, code and hyper-parameters): not training "
                "again, returning its result%s.",
                trial["name"],
                found["run_id"],
                f" (it had stopped early at step {found['stopped']['step']})" if found.get("stopped") else "",
            )
        return found

    def _unchanged(self, tracking: Any, ref: Any, hparams: dict[str, Any], storage: Any) -> str | None:
        """Why training can be skipped (the champion for this cut-off has identical inputs), or None."""
        check = self.training_check(tracking, ref, hparams, storage)
        if check.skip_reason is None:
            self.log.info("%s: training.", check.note or "inputs changed")
        return check.skip_reason

    def training_check(self, tracking: Any, ref: Any, hparams: dict[str, Any], storage: Any) -> TrainingCheck:
        """The ``skip_if_unchanged`` decision from the rendered fields: what ``execute`` and the
        backfill plan both decide with (:func:`~airflow_provider_dltrain.training.skip_check.check_training`)."""
        from airflow_provider_dltrain.training.skip_check import check_training

        return check_training(
            tracking,
            str(self.skip_if_unchanged),
            self.train_fn,
            ref,
            hparams,
            data_filter=self.data_filter,
            data_cutoff=self.data_cutoff or None,
            storage_options=storage,
            code_version=self.code_version or None,
        )


def _hparams(value: Any) -> dict[str, Any]:
    """Hyper-parameters as a dict; a rendered ``{{ ... | tojson }}`` template arrives as JSON text."""
    import json

    from airflow_provider_dltrain.exceptions import InvalidSpecError

    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise InvalidSpecError(f"hparams is text but not JSON: {value[:200]!r}") from err
    if not isinstance(value, Mapping):
        raise InvalidSpecError(f"hparams must be a dict (or its JSON), got {type(value).__name__}")
    return dict(value)


def _trial(value: Any) -> dict[str, Any] | None:
    """The ``trial`` argument as a dict with a name and a parent run, or None outside a search."""
    from airflow_provider_dltrain.exceptions import InvalidSpecError

    if value is None or value == "":
        return None
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError as err:
            raise InvalidSpecError(f"trial is text but not JSON: {value[:200]!r}") from err
    if not isinstance(value, Mapping) or not value.get("name") or not value.get("parent_run_id"):
        raise InvalidSpecError(
            "trial must be {'name': ..., 'parent_run_id': ...}, as ExpandTrialsOperator returns; got "
            f"{value!r:.200}"
        )
    return dict(value)


def _run_name(info: Mapping[str, Any], trial: Mapping[str, Any] | None) -> str:
    task = f"{info['task_id']}[{trial['name']}]" if trial else info["task_id"]
    return f"{info['dag_id']}.{task}.{info['run_id']}"


def _trial_tags(trial: Mapping[str, Any] | None) -> dict[str, str]:
    from airflow_provider_dltrain.experiments.stopping import PARENT_TAG, TRIAL_TAG

    if not trial:
        return {}
    return {
        PARENT_TAG: str(trial["parent_run_id"]),
        TRIAL_TAG: str(trial["name"]),
        "dltrain.trial_index": str(trial.get("index", "")),
    }


def _trial_stopping(trial: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not trial or not trial.get("early_stopping"):
        return None
    return {"spec": trial["early_stopping"], "parent_run_id": trial["parent_run_id"], "trial": trial["name"]}


def _lineage_tags(info: Mapping[str, Any]) -> dict[str, str]:
    names = (
        "dag_id",
        "run_id",
        "task_id",
        "try_number",
        "logical_date",
        "data_interval_start",
        "data_interval_end",
    )
    return {f"dltrain.{name}": str(info[name]) for name in names if info.get(name) is not None}
