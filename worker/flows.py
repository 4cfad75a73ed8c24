"""Flows: named, versioned sets of steps registered in code, and the registry that finds them."""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from models.contracts import InterruptView
from models.errors import (
    ConfigurationError,
    FlowDefinitionError,
    FlowVersionError,
    UnknownFlowError,
    UnknownStepError,
)
from models.settings import get_settings

# A step takes its ``worker.context.StepContext`` (typed by the step's own annotation: flows
# sit below the step runtime and do not import it).
StepFn = Callable[[Any], "str | None"]
# Recomputes, from current records, the evidence an interrupt was raised on.
Revalidator = Callable[["RevalidationContext"], Any]
Notifier = Callable[[InterruptView], None]
# Turns the flow state a run checkpointed under an older version into this version's state.
Migration = Callable[[dict[str, Any]], dict[str, Any]]

DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 1.0
NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")


@dataclass(frozen=True)
class RevalidationContext:
    run_id: str
    input: Any
    state: Any
    interrupt: InterruptView


@dataclass(frozen=True)
class StepDef:
    name: str
    fn: StepFn
    retries: int
    backoff: float
    lease_seconds: float | None


@dataclass
class Flow:
    """A versioned set of steps; the first registered step (or ``start=``) runs first."""

    name: str
    version: int = 1
    budget: float | None = None
    operator_roles: tuple[str, ...] = ("operator",)
    start: str | None = None
    steps: dict[str, StepDef] = field(default_factory=dict)
    revalidators: dict[str, Revalidator] = field(default_factory=dict)
    notifiers: list[Notifier] = field(default_factory=list)
    reconcilers: dict[str, Callable[[str], Any]] = field(default_factory=dict)
    migrations: dict[int, Migration] = field(default_factory=dict)
    input_model: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise FlowDefinitionError(detail=f"flow name {self.name!r} is not a valid name")
        if self.version < 1:
            raise FlowDefinitionError(detail=f"flow {self.name!r}: version must be >= 1")
        register(self)

    def step(
        self,
        name: str | None = None,
        *,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        lease_seconds: float | None = None,
    ) -> Callable[[StepFn], StepFn]:
        """Register a step. It returns the name of the next step, or None to finish."""

        def decorate(fn: StepFn) -> StepFn:
            step_name = name or fn.__name__
            if step_name in self.steps:
                raise FlowDefinitionError(detail=f"flow {self.name!r}: step {step_name!r} twice")
            self.steps[step_name] = StepDef(step_name, fn, retries, backoff, lease_seconds)
            return fn

        return decorate

    def revalidate(self, interrupt_name: str) -> Callable[[Revalidator], Revalidator]:
        """Register a function that recomputes an interrupt's evidence at resume time."""

        def decorate(fn: Revalidator) -> Revalidator:
            self.revalidators[interrupt_name] = fn
            return fn

        return decorate

    def reconciler(
        self, effect_name: str
    ) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
        """Register how to find out whether effect ``effect_name`` happened, given its key.

        Used when ``ctx.effect`` is given no ``reconcile=`` and by the resume path, which
        settles a run's pending effects before its step executes again.
        """

        def decorate(fn: Callable[[str], Any]) -> Callable[[str], Any]:
            self.reconcilers[effect_name] = fn
            return fn

        return decorate

    def migrates_from(self, version: int) -> Callable[[Migration], Migration]:
        """Declare how a run of ``version`` continues on this version: its state, migrated.

        A worker without ``version`` applies it at the run's next step boundary; a run whose
        checkpoint already holds accepted answers stays bound to its version.
        """

        def decorate(fn: Migration) -> Migration:
            if not 1 <= version < self.version:
                raise FlowDefinitionError(
                    detail=f"flow {self.name!r} v{self.version} cannot migrate from v{version}"
                )
            self.migrations[version] = fn
            return fn

        return decorate

    def notifier(self, fn: Notifier) -> Notifier:
        """Register a function called with every interrupt of this flow after it commits."""
        self.notifiers.append(fn)
        return fn

    @property
    def first_step(self) -> str:
        if self.start is not None:
            return self.start
        if not self.steps:
            raise FlowDefinitionError(detail=f"flow {self.name!r} has no steps")
        return next(iter(self.steps))

    def get_step(self, name: str) -> StepDef:
        try:
            return self.steps[name]
        except KeyError:
            raise UnknownStepError(flow=self.name, step=name) from None


_lock = threading.RLock()
_flows: dict[tuple[str, int], Flow] = {}
_loaded: set[str] = set()
# Counts registrations: what is derived from the registry is derived again when it moved.
_generation = 0


def register(flow: Flow) -> None:
    # Last registration wins: a module imported twice (as __main__ and by name) re-registers.
    global _generation
    with _lock:
        _flows[(flow.name, flow.version)] = flow
        _generation += 1


def load_flow_modules() -> None:
    """Import the modules named in ``INTERLUDE_FLOWS`` (once each)."""
    for module in get_settings().flow_modules():
        if module in _loaded:
            continue
        with _lock:
            if module not in _loaded:
                _import_flows(module)
                _loaded.add(module)


def registered_versions() -> list[tuple[str, int]]:
    """Every ``(flow, version)`` this process has, after loading ``INTERLUDE_FLOWS``."""
    load_flow_modules()
    with _lock:
        return sorted(_flows)


def registered_flows() -> tuple[int, list[Flow]]:
    """Every flow version this process has, after loading ``INTERLUDE_FLOWS``, in order, with
    the registry's generation (it changes with every registration)."""
    load_flow_modules()
    with _lock:
        return _generation, [_flows[key] for key in sorted(_flows)]


def registry_generation() -> int:
    """The registry's generation, after loading ``INTERLUDE_FLOWS`` (cheap: no copy)."""
    load_flow_modules()
    return _generation


def _import_flows(module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        # A typo in INTERLUDE_FLOWS, or a module missing on this machine: say which, in a line.
        raise ConfigurationError(
            detail=f"INTERLUDE_FLOWS names {module!r}, which cannot be imported: {exc}"
        ) from None


def get_flow(name: str, version: int | None = None, *, run_id: str = "?") -> Flow:
    """The flow ``name`` at ``version`` (the newest when None)."""
    load_flow_modules()
    with _lock:
        versions = {v: f for (n, v), f in _flows.items() if n == name}
    if not versions:
        known = ", ".join(sorted({n for n, _ in _flows})) or "none"
        raise UnknownFlowError(flow=name, known=known)
    if version is None:
        return versions[max(versions)]
    flow = versions.get(version)
    if flow is None:
        raise FlowVersionError(
            run_id=run_id, flow=name, version=version, available=sorted(versions)
        )
    return flow


def continuation(name: str, version: int, *, run_id: str = "?") -> tuple[Flow, Migration | None]:
    """The flow that continues a run of ``name`` pinned to ``version``.

    That version itself if this process has it; else the newest version declaring a migration
    from it, with that migration; else FlowVersionError.
    """
    try:
        return get_flow(name, version, run_id=run_id), None
    except FlowVersionError:
        with _lock:
            newer = sorted(
                (f for (n, _), f in _flows.items() if n == name and version in f.migrations),
                key=lambda f: f.version,
            )
        if not newer:
            raise
        return newer[-1], newer[-1].migrations[version]
