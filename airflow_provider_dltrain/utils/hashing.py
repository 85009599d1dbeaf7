"""Identities of a training run's inputs: code, hyper-parameters (and data, in ``data.ScanPlan``).

Together with :attr:`airflow_provider_dltrain.lake.scan_plan.ScanPlan.fingerprint` they answer "is
this run's input identical to the champion's?", so a nightly DAG can skip retraining when nothing
changed.

Code identity is the source of the training function's module plus every module of the *same
code base* it imports, transitively, found by reading ``import`` statements (no code runs):

* a function in a package (``mypkg.train``): modules of the same top-level package (``mypkg.*``);
* a function in a single-file module (an Airflow DAG file, a script): modules importable from the
  same directory (a sibling ``helpers.py`` or ``helpers/`` package that Airflow puts on ``sys.path``).

Third-party and standard-library modules never count: their versions are the environment's job.
``import a.b.c`` counts ``a.b.c`` only; ``from a.b import c`` counts ``a.b.c`` when that is a module,
else ``a.b`` (where ``c`` is defined). Imports inside functions count too (``ast`` sees every one).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# MLflow refuses tag values above 5,000 characters (older servers); module lists stay below that.
MAX_TAG_CHARS = 5000


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; tuples as lists, anything else as ``str``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


def params_hash(hparams: Mapping[str, Any] | None) -> str:
    """sha256 of the canonical JSON of ``hparams`` (key order and whitespace do not matter)."""
    return hashlib.sha256(canonical_json(dict(hparams or {})).encode()).hexdigest()


@dataclass(frozen=True)
class CodeIdentity:
    """What names a training function's code: its hash and the modules that went into it.

    ``modules`` is empty when ``version`` (a user-given code version) replaced the source hash.
    """

    hash: str
    modules: tuple[str, ...] = ()
    version: str | None = None

    def tags(self) -> dict[str, str]:
        """The MLflow tags recording this identity (``dltrain.code_hash`` and what it was made from)."""
        out = {"dltrain.code_hash": self.hash}
        if self.version is not None:
            out["dltrain.code_version"] = self.version[:MAX_TAG_CHARS]
        if self.modules:
            out["dltrain.code_modules"] = join_limited(self.modules, MAX_TAG_CHARS)
        return out


def code_identity(train_fn: Callable[..., Any], code_version: str | None = None) -> CodeIdentity:
    """Hash ``train_fn``'s module and the modules of its code base it imports (or ``code_version``).

    A non-empty ``code_version`` (e.g. a git SHA or a release tag) replaces the source hash: the
    hash becomes sha256 of ``"code_version:" + code_version``.
    """
    if code_version is not None and str(code_version).strip():
        version = str(code_version).strip()
        return CodeIdentity(hashlib.sha256(f"code_version:{version}".encode()).hexdigest(), (), version)
    target = inspect.unwrap(train_fn)
    name = f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', repr(target))}"
    sources = module_sources(getattr(target, "__module__", None) or "")
    if not sources:  # a REPL, a notebook cell or a function built at run time: no module file
        digest = hashlib.sha256(name.encode())
        digest.update(b"\n")
        digest.update(_function_source(target).encode())
        return CodeIdentity(digest.hexdigest(), ())
    return CodeIdentity(_sources_digest(name, sources), tuple(sorted(sources)))


def named_code_hash(target: str) -> str | None:
    """The :func:`code_identity` hash of ``"package.module:function"``, read without importing it.

    ``None`` when the module has no source file here (not installed, an extension module): then
    nothing names the code, and a caller must not treat it as unchanged.
    """
    module, sep, qualname = str(target).strip().partition(":")
    if not (sep and module and qualname):
        return None
    sources = module_sources(module)
    return _sources_digest(f"{module}:{qualname}", sources) if sources else None


def _sources_digest(name: str, sources: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256(name.encode())
    digest.update(b"\n")
    for module in sorted(sources):
        digest.update(f"\0module {module}\0".encode())
        digest.update(sources[module])
    return digest.hexdigest()


def code_hash(train_fn: Callable[..., Any], code_version: str | None = None) -> str:
    """sha256 naming ``train_fn``'s code (see :func:`code_identity`)."""
    return code_identity(train_fn, code_version).hash


def join_limited(names: tuple[str, ...], limit: int) -> str:
    """``names`` comma-separated, cut at a comma with a ``...(+N more)`` marker to stay within ``limit``."""
    text = ",".join(names)
    if len(text) <= limit:
        return text
    kept: list[str] = []
    used = 0
    for i, item in enumerate(names):
        suffix = f",...(+{len(names) - i - 1} more)"
        if used + len(item) + 1 + len(suffix) > limit:
            break
        kept.append(item)
        used += len(item) + 1
    return ",".join([*kept, f"...(+{len(names) - len(kept)} more)"])[:limit]


# -- module discovery -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Module:
    name: str
    path: str  # the .py file
    is_package: bool


def module_sources(module_name: str) -> dict[str, bytes]:
    """``{module name: source bytes}`` of ``module_name`` and the modules of its code base it imports
    (read once per :func:`~airflow_provider_dltrain.utils.snapshot.snapshot`, e.g. a backfill plan's)."""
    from airflow_provider_dltrain.utils.snapshot import remembered

    return remembered(("module_sources", module_name), lambda: _read_sources(module_name))


def _read_sources(module_name: str) -> dict[str, bytes]:
    root = _locate(module_name)
    if root is None:
        return {}
    code_base = _CodeBase.of(root)
    found: dict[str, _Module] = {root.name: root}
    pending = [root]
    while pending:
        current = pending.pop()
        for name in _imported_names(current, code_base.wants):
            if name in found:
                continue
            module = _locate(name)
            if module is not None and code_base.owns(module):
                found[name] = module
                pending.append(module)
    return {name: _read(m.path) for name, m in found.items()}


@dataclass(frozen=True)
class _CodeBase:
    """The root's code base: its top-level package, or the directory of a single-file module."""

    top: str | None  # package mode
    directory: str | None  # single-file mode

    @classmethod
    def of(cls, root: _Module) -> _CodeBase:
        if "." in root.name or root.is_package:
            return cls(root.name.split(".")[0], None)
        return cls(None, os.path.dirname(os.path.realpath(root.path)))

    def wants(self, name: str) -> bool:
        """Cheap test by name, before the file system is searched for the module."""
        first = name.split(".")[0]
        if self.top is not None:
            return first == self.top
        assert self.directory is not None
        return os.path.isfile(os.path.join(self.directory, f"{first}.py")) or os.path.isfile(
            os.path.join(self.directory, first, "__init__.py")
        )

    def owns(self, module: _Module) -> bool:
        if self.top is not None:
            return True
        assert self.directory is not None
        # imported through the root's directory as a sys.path entry: the file sits where its name says
        parts = module.name.split(".")
        tail = [*parts, "__init__.py"] if module.is_package else [*parts[:-1], f"{parts[-1]}.py"]
        return os.path.realpath(module.path) == os.path.join(self.directory, *tail)


def _locate(name: str) -> _Module | None:
    """The module's source file, without importing anything.

    A loaded module names its file; otherwise ``find_spec`` finds the top-level package (which
    imports nothing) and the submodules are looked up in its directories, because ``find_spec`` of
    ``a.b.c`` would import ``a.b`` - code a training module may import lazily, on purpose.
    """
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None):
        return _source_module(name, loaded.__file__, hasattr(loaded, "__path__"))
    if name == "__main__":
        return None
    import importlib.util

    first, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(first)
    except (ImportError, ValueError):
        return None  # not importable here (optional dependency, broken package): nothing to hash
    if spec is None:
        return None
    path, locations = spec.origin, list(spec.submodule_search_locations or [])
    for part in rest:
        path, locations = _child(locations, part)
    return _source_module(name, path, bool(locations))


def _child(locations: list[str], part: str) -> tuple[str | None, list[str]]:
    """``part``'s file (and directory when it is a package) inside a package's directories."""
    for directory in locations:
        package = os.path.join(directory, part)
        if os.path.isfile(os.path.join(package, "__init__.py")):
            return os.path.join(package, "__init__.py"), [package]
        if os.path.isfile(f"{package}.py"):
            return f"{package}.py", []
        if os.path.isdir(package):  # a namespace package: no source, but submodules below it
            return None, [package]
    return None, []


def _source_module(name: str, path: str | None, is_package: bool) -> _Module | None:
    if not path or not path.endswith(".py") or not os.path.isfile(path):
        return None  # extension modules, namespace packages, zip imports: no source to read
    return _Module(name, path, is_package)


def _imported_names(module: _Module, wanted: Callable[[str], bool]) -> Iterator[str]:
    """Absolute names of the wanted modules that ``module``'s import statements may load."""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for level, base_name, names in _import_statements(_read(module.path), module.path):
        if level < 0:  # ``import a, b``
            yield from (name for name in names if wanted(name))
            continue
        base = _absolute(level, base_name, package)
        if base is not None and wanted(base):
            yield from _from_targets(base, list(names))


# Import statements by source text: parsing is most of what hashing a code base costs (about 1 s
# for this package), and an unchanged re-run hashes the same files again. Keyed by the bytes read
# now, so an edited file is always parsed again.
_STATEMENTS: dict[bytes, tuple[tuple[int, str | None, tuple[str, ...]], ...]] = {}


def _import_statements(source: bytes, path: str) -> tuple[tuple[int, str | None, tuple[str, ...]], ...]:
    """``(level, module, names)`` of each import statement (level -1: ``import names``)."""
    found = _STATEMENTS.get(source)
    if found is not None:
        return found
    statements: list[tuple[int, str | None, tuple[str, ...]]] = []
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            statements.append((-1, None, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            statements.append((node.level, node.module, tuple(alias.name for alias in node.names)))
    if len(_STATEMENTS) >= 4096:  # a bound, not an eviction policy: code bases are far smaller
        _STATEMENTS.clear()
    _STATEMENTS[source] = found = tuple(statements)
    return found


def _absolute(level: int, module: str | None, package: str) -> str | None:
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts) or not parts:
        return None  # a relative import beyond the top package: Python refuses it too
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _from_targets(base: str, names: list[str]) -> Iterator[str]:
    """``from base import x``: ``base.x`` when that is a module, else ``base`` (which defines ``x``)."""
    base_counts = False
    for item in names:
        if item != "*" and _locate(f"{base}.{item}") is not None:
            yield f"{base}.{item}"
        else:
            base_counts = True
    if base_counts:
        yield base


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _function_source(target: Any) -> str:
    try:
        return inspect.getsource(target)
    except (OSError, TypeError):
        pass
    code = getattr(target, "__code__", None)
    if code is None:
        return repr(target)
    return repr((code.co_code, code.co_consts, code.co_names, code.co_varnames))
