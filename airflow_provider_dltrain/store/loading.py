"""Load MLflow PyTorch models without running code they carry, unless the caller allows it.

A PyTorch model saved in MLflow's ``pickle`` format (``data/model.pth`` +
``pickle_module_info.txt``) is restored by ``torch.load``, which unpickles it: any class in it can
run code (``__reduce__``, ``__setstate__``) in the loading process. A model logged with
``code_paths`` has its ``code/`` directory put first on ``sys.path``, so it can shadow any module
imported afterwards. Both are decided here from the MLmodel file and the artifact listing, before
anything is loaded, and refused unless ``allow_pickle=True`` (logged as a warning).

MLflow's own switch, ``MLFLOW_ALLOW_PICKLE_DESERIALIZATION``, is set to ``false`` around every load
of ours (``true`` only with ``allow_pickle``), so a model that fooled the inspection is still refused
by MLflow, and a ``pt2`` archive is checked for pickled records (which needs torch >= 2.10). The
caller's environment is restored afterwards. Training logs ``pt2`` only (``training/tracking.py``).

No Airflow here: this runs on the driver, in a gate and inside Spark Python workers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError, UnsafeModelError
from airflow_provider_dltrain.store.config import TrackingConfig

log = logging.getLogger(__name__)

ALLOW_PICKLE_ENV = "MLFLOW_ALLOW_PICKLE_DESERIALIZATION"
PT2, PICKLE = "pt2", "pickle"
_PT2_FILE, _PICKLE_FILE, _PICKLE_INFO = "model.pt2", "model.pth", "pickle_module_info.txt"
RELOG_HINT = (
    "re-log it as a pt2 export, as dltrain's training does: mlflow.pytorch.log_model(model, "
    "name='model', input_example=<a few input rows>, serialization_format='pt2'), then register "
    "and gate that version"
)


def model_label(name: str | None, version: int | None, model_uri: str) -> str:
    """How messages name a model: ``model 'digits' version 4 (models:/digits/4)``, or its URI."""
    if name is None or version is None:
        return f"model {model_uri}"
    return f"model {name!r} version {version} ({model_uri})"


@dataclass(frozen=True)
class ModelFormat:
    """How a PyTorch model is stored, as read from its MLmodel file and artifact listing.

    :param serialization: ``"pt2"`` (a ``torch.export`` archive) or ``"pickle"`` (``torch.load``;
        also anything that is not recognisably pt2, because MLflow would ``torch.load`` it).
    :param evidence: the files or flavor entries the decision rests on, for messages.
    :param code: the flavor's ``code`` directory (``code_paths``), None when the model ships none.
    """

    serialization: str
    evidence: str
    code: str | None = None

    @property
    def runs_code(self) -> bool:
        """Whether loading may run code the model carries (pickle or bundled modules)."""
        return self.serialization != PT2 or self.code is not None


def classify(flavors: Any, data_files: list[str], where: str) -> ModelFormat:
    """The :class:`ModelFormat` of a model from its MLmodel ``flavors`` and its ``model_data`` files."""
    conf = flavors.get("pytorch") if isinstance(flavors, dict) else None
    if not isinstance(conf, dict):
        found = sorted(flavors) if isinstance(flavors, dict) else []
        raise InvalidSpecError(
            f"{where} is not an MLflow PyTorch model (flavors {found}): log it with mlflow.pytorch.log_model."
        )
    code = conf.get("code") or None
    model_data = str(conf.get("model_data") or "")
    names = {os.path.basename(path.rstrip("/")) for path in data_files}
    # MLflow's loader prefers model.pth whenever it exists, so its presence alone means pickle.
    if _PICKLE_FILE in names or _PICKLE_INFO in names:
        found = sorted(names & {_PICKLE_FILE, _PICKLE_INFO})
        return ModelFormat(PICKLE, f"{model_data}/{' + '.join(found)}", code)
    if _PT2_FILE in names:
        return ModelFormat(PT2, f"{model_data}/{_PT2_FILE}", code)
    return ModelFormat(PICKLE, f"model_data {model_data!r} holds no {_PT2_FILE}", code)


def refusal(fmt: ModelFormat, label: str) -> str:
    """Why loading ``label`` is refused and what to do instead (one message)."""
    if fmt.serialization != PT2:
        what = (
            f"is saved in PyTorch's pickle format ({fmt.evidence}): loading it runs whatever code "
            "the pickle carries"
        )
    else:
        what = (
            f"ships code_paths ({fmt.code!r}) that MLflow puts first on sys.path when loading, so "
            "its modules can replace ones the loading process imports"
        )
    return (
        f"{label} {what}. Refused: {RELOG_HINT} (without code_paths); or, if you trust everyone "
        "who can write to this registry, pass allow_pickle=True."
    )


def require_safe(fmt: ModelFormat, label: str, *, allow_pickle: bool, prefix: str = "") -> None:
    """Raise :class:`UnsafeModelError` for a model that runs code on load, unless allowed (then warn)."""
    if not fmt.runs_code:
        return
    if not allow_pickle:
        raise UnsafeModelError(prefix + refusal(fmt, label))
    log.warning(
        "Loading %s although it may run code on load (%s%s) because allow_pickle=True: only do this "
        "for models whose registry only trusted people can write to.",
        label,
        fmt.evidence,
        f", code {fmt.code!r}" if fmt.code else "",
    )


def inspect_uri(model_uri: str, tracking: TrackingConfig) -> ModelFormat:
    """The :class:`ModelFormat` of ``model_uri``, reading only its MLmodel file and a listing."""
    import yaml
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    registry = tracking.registry_uri or tracking.tracking_uri
    with pointed_at(tracking), tempfile.TemporaryDirectory(prefix="dltrain-mlmodel-") as scratch:
        repo = get_artifact_repository(model_uri, tracking_uri=tracking.tracking_uri, registry_uri=registry)
        with open(repo.download_artifacts("MLmodel", scratch), encoding="utf-8") as fh:
            flavors = (yaml.safe_load(fh) or {}).get("flavors") or {}
        conf = flavors.get("pytorch") if isinstance(flavors, dict) else None
        model_data = str(conf.get("model_data") or "") if isinstance(conf, dict) else ""
        files = [item.path for item in repo.list_artifacts(model_data)] if model_data else []
    return classify(flavors, files, model_uri)


def inspect_dir(path: str) -> ModelFormat:
    """The :class:`ModelFormat` of a downloaded model directory."""
    import yaml

    with open(os.path.join(path, "MLmodel"), encoding="utf-8") as fh:
        flavors = (yaml.safe_load(fh) or {}).get("flavors") or {}
    conf = flavors.get("pytorch") if isinstance(flavors, dict) else None
    model_data = os.path.join(path, str(conf.get("model_data") or "")) if isinstance(conf, dict) else ""
    files = os.listdir(model_data) if model_data and os.path.isdir(model_data) else []
    return classify(flavors, files, path)


def check_loadable(
    tracking: TrackingConfig, model_uri: str, label: str, *, allow_pickle: bool
) -> ModelFormat:
    """Refuse (or, with ``allow_pickle``, warn about) ``model_uri`` before anything downloads or loads it."""
    fmt = inspect_uri(model_uri, tracking)
    require_safe(fmt, label, allow_pickle=allow_pickle)
    return fmt


def pickle_switch(allow_pickle: bool) -> contextlib.AbstractContextManager[None]:
    """``MLFLOW_ALLOW_PICKLE_DESERIALIZATION`` set for the block (``false`` unless allowed), then restored."""
    from airflow_provider_dltrain.utils.env import scoped_environ

    return scoped_environ({ALLOW_PICKLE_ENV: "true" if allow_pickle else "false"})


def load_torch_model(model_uri: str, label: str, *, allow_pickle: bool = False, prefix: str = "") -> Any:
    """Download ``model_uri``, refuse it if it runs code on load (unless allowed), then load it on CPU.

    The check reads the downloaded copy, i.e. exactly what is loaded. MLflow's global tracking and
    registry URIs must already point at the model's store (see :func:`pointed_at`).

    :param prefix: put in front of the refusal (a Spark worker's marker for the driver).
    :raises UnsafeModelError: the model is pickled or ships code and ``allow_pickle`` is false.
    """
    import mlflow.artifacts
    import mlflow.pytorch

    scratch = tempfile.mkdtemp(prefix="dltrain-model-")
    keep = False
    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=scratch)
        fmt = inspect_dir(local)
        require_safe(fmt, label, allow_pickle=allow_pickle, prefix=prefix)
        keep = fmt.code is not None  # modules on sys.path may be imported lazily later
        with pickle_switch(allow_pickle):
            return mlflow.pytorch.load_model(local, map_location="cpu")
    finally:
        if not keep:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)


def fetch_pt2(model_uri: str, label: str, *, allow_pickle: bool = False) -> bytes | None:
    """The ``pt2`` archive of ``model_uri``, downloaded and checked once, for processes that load it without MLflow.

    Checks the downloaded copy as :func:`load_torch_model` does (format, ``code_paths``) and, like
    MLflow's loader with pickle deserialization disallowed, that no record of the archive needs
    pickle. Returns ``None`` for a model that runs code on load and is allowed (``allow_pickle``):
    such a model must be loaded by MLflow itself. MLflow's global URIs must point at the model's
    store (see :func:`pointed_at`).

    Why by hand: MLflow offers the archive check only inside ``mlflow.pytorch.load_model``, which
    also builds the module. A Spark scoring job would otherwise import MLflow, download the model
    and check it again in every Python worker (about 3 s each); here it happens once on the driver
    and the workers only run ``torch.export.load`` on these exact bytes.

    :raises UnsafeModelError: the model is pickled, ships code, or its archive holds pickled records.
    """
    import mlflow.artifacts

    scratch = tempfile.mkdtemp(prefix="dltrain-model-")
    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=scratch)
        fmt = inspect_dir(local)
        require_safe(fmt, label, allow_pickle=allow_pickle)
        if fmt.runs_code:
            return None
        path = os.path.join(local, fmt.evidence)  # a pt2 model's evidence is <model_data>/model.pt2
        _require_pickle_free(path, local, label)
        with open(path, "rb") as fh:
            return fh.read()
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def _require_pickle_free(path: str, model_dir: str, label: str) -> None:
    """MLflow's own check that a ``pt2`` archive needs no pickle to load (its loader's, run alone)."""
    import mlflow.pytorch
    from mlflow.exceptions import MlflowException

    check = getattr(mlflow.pytorch, "_validate_pt2_archive_is_pickle_free", None)
    try:
        with pickle_switch(False):
            if check is not None:
                check(path)
            else:  # an MLflow without the separate check: its loader runs the same one
                mlflow.pytorch.load_model(model_dir, map_location="cpu")
    except MlflowException as err:
        raise UnsafeModelError(f"{label}: {err.message}. Refused: {RELOG_HINT}.") from err


def pointed_at(tracking: TrackingConfig) -> contextlib.AbstractContextManager[None]:
    """MLflow's process-wide store (and credentials) set to ``tracking`` for the block; restored after.

    ``models:/name/version`` URIs resolve against the global registry URI, and an Airflow worker
    (or a notebook) may be pointed elsewhere. See :meth:`TrackingConfig.activated`.
    """
    return tracking.activated()
