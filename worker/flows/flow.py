"""Flows: named, versioned sets of steps registered in code, and the registry that finds them."""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import re
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from models.contracts import InterruptView
from models.errors import (
    ConfigurationError,
    FlowDefinitionError,
    FlowVersionError,
    UnknownFlowError,
    UnknownNotifierError,
    UnknownStepError,
)
from models.settings import LONGEST_SECONDS, get_settings
from worker.flows.eventdefs import EventDef, define_event
from worker.flows.origins import defining_file
from worker.flows.policies import NO_POLICY, Policy, checked_policy, checked_roles
from worker.flows.toolcalls import Tool, declare_tool

# A step takes its ``worker.engine.context.StepContext`` (typed by the step's own annotation: flows
# sit below the step runtime and do not import it).
StepFn = Callable[[Any], "str | None"]
# Recomputes, from current records, the evidence an interrupt was raised on.
Revalidator = Callable[["RevalidationContext"], Any]
Notifier = Callable[[InterruptView], None]
# Turns the flow state a run checkpointed under an older version into this version's state.
Migration = Callable[[dict[str, Any]], dict[str, Any]]
# Turns an interrupt's evidence as an older version showed it into this version's form.
EvidenceMigration = Callable[[Any], Any]
F = TypeVar("F", bound=Callable[..., Any])

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
    # Roles that may start its runs over HTTP (POST /v1/runs) besides the operator roles: a
    # service that starts runs need not be able to cancel or fork them.
    starter_roles: tuple[str, ...] = ()
    start: str | None = None
    steps: dict[str, StepDef] = field(default_factory=dict)
    revalidators: dict[str, Revalidator] = field(default_factory=dict)
    notifiers: list[Notifier] = field(default_factory=list)
    reconcilers: dict[str, Callable[[str], Any]] = field(default_factory=dict)
    migrations: dict[int, Migration] = field(default_factory=dict)
    input_model: type[BaseModel] | None = None
    # The version of the approval policy its interrupts are asked under, and the older
    # versions whose answers it still honours (``worker.flows.policies``).
    policy_version: str | None = None
    still_valid_policies: Collection[str | None] = ()
    # Per interrupt name, a policy of its own (``interrupt_policy``).
    policies: dict[str, Policy] = field(default_factory=dict)
    # Tools whose proposed calls a responder reviews (``tool``, ``ctx.review_call``).
    tools: dict[str, Tool] = field(default_factory=dict)
    # Events its steps wait for, which may arrive before they ask (``event``).
    events: dict[str, EventDef] = field(default_factory=dict)
    # How an interrupt's evidence, as a version asked it, reads on this one: by (version,
    # interrupt name) (``migrates_evidence``).
    evidence_migrations: dict[tuple[int, str], EvidenceMigration] = field(default_factory=dict)
    # Roles that may read this flow's runs and interrupts (input, state, timeline, evidence)
    # without answering or operating them; the operator roles and the roles an interrupt asks
    # may read what concerns them anyway.
    viewer_roles: tuple[str, ...] = ()
    _policy: Policy = field(default=NO_POLICY, init=False, repr=False, compare=False)
    # The file whose code defined this flow (see ``defining_file``): one (name, version) is
    # defined by one file.
    origin: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise FlowDefinitionError(
                detail=f"flow name {self.name!r} is not a valid name (letters, digits, _.:-)"
            )
        # bool is an int, and 1.5 or "2" would reach the database's version column.
        if type(self.version) is not int or self.version < 1:
            raise FlowDefinitionError(
                detail=f"flow {self.name!r}: version must be a whole number >= 1, "
                f"got {self.version!r}"
            )
        if self.budget is not None and not _number_at_least(self.budget, 0):
            raise FlowDefinitionError(
                detail=f"flow {self.name!r}: budget must be None or a finite number >= 0, "
                f"got {self.budget!r}"
            )
        roles = checked_roles(self.operator_roles)
        if roles is None:
            # A bare string is iterable too: "ops" must not become the roles o, p and s.
            raise FlowDefinitionError(
                detail=f"flow {self.name!r}: operator_roles needs a non-empty list of role "
                f"names, got {self.operator_roles!r}"
            )
        self.operator_roles = tuple(roles)
        self.starter_roles = self._optional_roles("starter_roles", self.starter_roles)
        self.viewer_roles = self._optional_roles("viewer_roles", self.viewer_roles)
        if self.start is not None and (not isinstance(self.start, str) or not self.start):
            raise FlowDefinitionError(
                detail=f"flow {self.name!r}: start must name a step, got {self.start!r}"
            )
        if self.input_model is not None and not (
            isinstance(self.input_model, type) and issubclass(self.input_model, BaseModel)
        ):
            raise FlowDefinitionError(
                detail=f"flow {self.name!r}: input_model must be a pydantic model class, "
                f"got {self.input_model!r}"
            )
        self._policy = checked_policy(
            f"flow {self.name!r} v{self.version}", self.policy_version, self.still_valid_policies
        )
        self.origin = defining_file()
        register(self)

    def _optional_roles(self, what: str, given: Any) -> tuple[str, ...]:
        """Roles a flow may name (none by default), as a tuple, or FlowDefinitionError."""
        roles = checked_roles(given) if given else []
        if roles is None:
            raise FlowDefinitionError(
                detail=f"flow {self.name!r}: {what} needs a list of role names, got {given!r}"
            )
        return tuple(roles)

    def policy_for(self, interrupt: str) -> Policy:
        """The policy ``interrupt`` is asked under: its own, else the flow's."""
        return self.policies.get(interrupt, self._policy)

    def interrupt_policy(
        self, interrupt: str, version: str, *, still_valid: Collection[str | None] = ()
    ) -> None:
        """Declare the policy version of one interrupt (over the flow's ``policy_version``)."""
        where = f"flow {self.name!r} v{self.version}: interrupt_policy({interrupt!r})"
        if not isinstance(interrupt, str) or not interrupt:
            raise FlowDefinitionError(detail=f"{where} needs an interrupt name")
        if interrupt in self.policies:
            raise FlowDefinitionError(detail=f"{where} is declared already")
        self.policies[interrupt] = checked_policy(where, version, still_valid)

    def tool(
        self,
        name: str,
        *,
        args: type[BaseModel],
        authority: list[str] | Callable[[Any], list[str]],
    ) -> Tool:
        """Declare a tool whose proposed calls a responder reviews (``ctx.review_call``).

        ``args`` is the arguments' model, registered with ``@input_schema``; ``authority``
        the roles that may approve a call, or a function of the call's arguments returning
        them (refunds above 1,000 need ``finance-lead``): an edited call is authorized again,
        for what it became.
        """
        where = f"flow {self.name!r} v{self.version}"
        if name in self.tools:
            raise FlowDefinitionError(detail=f"{where}: tool {name!r} is declared twice")
        declared = declare_tool(where, name, args, authority)
        self.tools[name] = declared
        return declared

    def event(self, name: str, *, input: type[BaseModel], authority: list[str]) -> EventDef:
        """Declare an event the flow's steps wait for (``ctx.wait_for_event``).

        ``send_event`` authenticates its sender, checks the sender holds one of
        ``authority``'s roles and validates the payload against ``input`` at once; an event
        the run does not wait on yet is kept until it asks.
        """
        where = f"flow {self.name!r} v{self.version}"
        if name in self.events:
            raise FlowDefinitionError(detail=f"{where}: event {name!r} is declared twice")
        declared = define_event(where, name, input, authority)
        self.events[name] = declared
        return declared

    def migrates_evidence(
        self, version: int, interrupt: str
    ) -> Callable[[EvidenceMigration], EvidenceMigration]:
        """Declare how ``interrupt``'s evidence, as ``version`` showed it, reads on this
        version: an answer carried from ``version`` holds if this version asks with the
        evidence so mapped (else the run gets a renewed review)."""

        def decorate(fn: EvidenceMigration) -> EvidenceMigration:
            where = f"flow {self.name!r} v{self.version}"
            if type(version) is not int or not 1 <= version < self.version:
                raise FlowDefinitionError(
                    detail=f"{where}: migrates_evidence needs an older version, got {version!r}"
                )
            if not callable(fn) or not isinstance(interrupt, str) or not interrupt:
                raise FlowDefinitionError(
                    detail=f"{where}: @flow.migrates_evidence(version, 'interrupt') decorates "
                    "a function of the old evidence"
                )
            if (version, interrupt) in self.evidence_migrations:
                raise FlowDefinitionError(
                    detail=f"{where}: the evidence of {interrupt!r} from v{version} has a "
                    "migration already"
                )
            self.evidence_migrations[(version, interrupt)] = fn
            return fn

        return decorate

    def step(
        self,
        name: str | None = None,
        *,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        lease_seconds: float | None = None,
    ) -> Callable[[StepFn], StepFn]:
        """Register a step. It returns the name of the next step, or None to finish."""
        if callable(name):
            # ``@flow.step`` without parentheses would bind the function to ``name`` and leave
            # the module with no step and a decorator in the function's place.
            raise FlowDefinitionError(
                detail=f"flow {self.name!r}: write @flow.step() with parentheses, "
                f"or @flow.step('name')"
            )

        def decorate(fn: StepFn) -> StepFn:
            step_name = name if name is not None else getattr(fn, "__name__", None)
            _check_step(self.name, step_name, fn, retries, backoff, lease_seconds)
            assert step_name is not None
            if step_name in self.steps:
                raise FlowDefinitionError(detail=f"flow {self.name!r}: step {step_name!r} twice")
            self.steps[step_name] = StepDef(step_name, fn, retries, backoff, lease_seconds)
            return fn

        return decorate

    def revalidate(self, interrupt_name: str) -> Callable[[Revalidator], Revalidator]:
        """Register a function that recomputes an interrupt's evidence at resume time."""
        return self._registrar(
            self.revalidators, interrupt_name, "revalidate", "interrupt", "revalidation"
        )

    def reconciler(
        self, effect_name: str
    ) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
        """Register how to find out whether effect ``effect_name`` happened, given its key.

        Used when ``ctx.effect`` is given no ``reconcile=`` and by the resume path, which
        settles a run's pending effects before its step executes again.
        """
        return self._registrar(self.reconcilers, effect_name, "reconciler", "effect", "reconciler")

    def _registrar(
        self, table: dict[str, F], name: str, decorator: str, kind: str, what: str
    ) -> Callable[[F], F]:
        """The decorator of ``@flow.<decorator>(name)``: one ``what`` per ``kind`` name, in
        ``table``."""
        where = f"flow {self.name!r} v{self.version}"
        if not isinstance(name, str) or not name:
            # (Without parentheses, the decorator would register nothing, silently.)
            raise FlowDefinitionError(
                detail=f"{where}: @flow.{decorator} needs an {kind} name (a non-empty str), "
                f"got {name!r}: write @flow.{decorator}('name')"
            )

        def decorate(fn: F) -> F:
            if not callable(fn):
                raise FlowDefinitionError(detail=f"{where}: {what} of {name!r} is not a function")
            if name in table:
                # A second would replace the first, silently.
                raise FlowDefinitionError(
                    detail=f"{where}: {kind} {name!r} has a @flow.{decorator} already: "
                    f"one {kind}, one {what}"
                )
            table[name] = fn
            return fn

        return decorate

    def migrates_from(self, version: int) -> Callable[[Migration], Migration]:
        """Declare how a run of ``version`` continues on this version: its state, migrated.

        A worker without ``version`` applies it at the run's next step boundary; a run whose
        checkpoint already holds accepted answers stays bound to its version.
        """

        def decorate(fn: Migration) -> Migration:
            if type(version) is not int:
                raise FlowDefinitionError(
                    detail=f"flow {self.name!r} v{self.version}: migrates_from needs a version "
                    f"number, got {version!r}"
                )
            if not 1 <= version < self.version:
                raise FlowDefinitionError(
                    detail=f"flow {self.name!r} v{self.version} cannot migrate from v{version}"
                )
            if version in self.migrations:
                # A second would replace the first, silently.
                raise FlowDefinitionError(
                    detail=f"flow {self.name!r} v{self.version} has a @flow.migrates_from"
                    f"({version}) already: one version, one migration"
                )
            self.migrations[version] = fn
            return fn

        return decorate

    def notifier(self, fn: Notifier) -> Notifier:
        """Register a function called with every interrupt of this flow after it commits.

        A notify task names its notifier by ``notifier_name``: one name, one notifier per flow.
        """
        where = f"flow {self.name!r} v{self.version}"
        if not callable(fn):
            raise FlowDefinitionError(detail=f"{where}: notifier {fn!r} is not a function")
        name = notifier_name(fn)
        for known in self.notifiers:
            if known is fn:
                return fn
            if notifier_name(known) == name:
                # The notify tasks of both would call the one their worker finds first.
                raise FlowDefinitionError(
                    detail=f"{where}: two notifiers named {name!r} (in {_module_of(known)} and "
                    f"{_module_of(fn)}): a notify task finds its notifier by that name; give "
                    "one another name"
                )
        self.notifiers.append(fn)
        return fn

    def get_notifier(self, name: str) -> Notifier:
        """The notifier registered as ``name`` (``notifier_name``)."""
        for notifier in self.notifiers:
            if notifier_name(notifier) == name:
                return notifier
        known = ", ".join(notifier_name(n) for n in self.notifiers) or "none"
        raise UnknownNotifierError(flow=self.name, version=self.version, notifier=name, known=known)

    @property
    def first_step(self) -> str:
        problem = self.start_problem()
        if problem is not None:
            # Refused before a run is created: a run queued on no step would wait forever.
            raise FlowDefinitionError(detail=problem)
        if self.start is not None:
            return self.start
        if not self.steps:
            raise FlowDefinitionError(detail=f"flow {self.name!r} has no steps")
        return next(iter(self.steps))

    def start_problem(self) -> str | None:
        """What is wrong with ``start=`` now that the steps are registered (None: nothing)."""
        if self.start is None or self.start in self.steps:
            return None
        steps = ", ".join(self.steps) or "none"
        return (
            f"flow {self.name!r} v{self.version} starts at step {self.start!r}, which it does "
            f"not have (its steps: {steps})"
        )

    def get_step(self, name: str) -> StepDef:
        try:
            return self.steps[name]
        except KeyError:
            raise UnknownStepError(flow=self.name, step=name) from None


def notifier_name(fn: Notifier) -> str:
    """A notifier's name on its flow, which its notify tasks carry: its qualified name."""
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__qualname__


def _module_of(fn: object) -> str:
    module = getattr(fn, "__module__", None)
    return module if isinstance(module, str) else "?"


def _number_at_least(value: object, least: float, most: float = math.inf) -> bool:
    # bool is a number to Python, never to a flow's author.
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and least <= float(value) <= most
    )


def _check_step(
    flow: str,
    name: str | None,
    fn: object,
    retries: object,
    backoff: object,
    lease_seconds: object,
) -> None:
    """FlowDefinitionError unless ``fn`` and its options make a step the runtime can run."""
    if not callable(fn):
        raise FlowDefinitionError(detail=f"flow {flow!r}: step {fn!r} is not a function")
    if not isinstance(name, str) or not NAME.match(name):
        # A lambda's "<lambda>" too: every lambda would be the same step.
        raise FlowDefinitionError(
            detail=f"flow {flow!r}: step name {name!r} is not a valid name (letters, digits, "
            f"_.:-); name it with @flow.step('name')"
        )
    where = f"flow {flow!r}: step {name!r}"
    if type(retries) is not int or retries < 0:
        raise FlowDefinitionError(
            detail=f"{where}: retries must be a whole number >= 0, got {retries!r}"
        )
    if not _number_at_least(backoff, 0):
        raise FlowDefinitionError(
            detail=f"{where}: backoff must be a finite number of seconds >= 0, got {backoff!r}"
        )
    # 0 would silently mean the worker's default; a negative lease expires before the step.
    if lease_seconds is not None and (
        lease_seconds == 0 or not _number_at_least(lease_seconds, 0, LONGEST_SECONDS)
    ):
        raise FlowDefinitionError(
            detail=f"{where}: lease_seconds must be None or seconds above 0 and at most "
            f"{LONGEST_SECONDS}, got {lease_seconds!r}"
        )
    # The runtime calls a step and reads the next step's name from what it returns: a
    # coroutine or a generator would be read as a name, and fail every attempt.
    if (
        inspect.iscoroutinefunction(fn)
        or inspect.isasyncgenfunction(fn)
        or inspect.isgeneratorfunction(fn)
    ):
        raise FlowDefinitionError(
            detail=f"{where} must be a plain function, not async def or a generator"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a callable Python cannot describe: trusted
        return
    try:
        signature.bind(None)
    except TypeError:
        raise FlowDefinitionError(
            detail=f"{where} must take one argument, its StepContext"
        ) from None


_lock = threading.RLock()
_flows: dict[tuple[str, int], Flow] = {}
_loaded: set[str] = set()
# Whether modules were imported since every registered flow's ``start`` was checked.
_unchecked = False
# Counts registrations: what is derived from the registry is derived again when it moved.
_generation = 0


def register(flow: Flow) -> None:
    """Add ``flow`` to the registry; FlowDefinitionError if another file defines it already.

    The same file registering it again replaces it: a module imported twice (as __main__ and by
    name), or a test module building the same flow for several tests.
    """
    global _generation
    with _lock:
        known = _flows.get((flow.name, flow.version))
        if known is not None and known.origin != flow.origin:
            # Last one wins would run one team's steps for the other's runs, silently.
            raise FlowDefinitionError(
                detail=f"flow {flow.name!r} v{flow.version} is defined in {known.origin} and "
                f"again in {flow.origin}: give one another name or version"
            )
        _flows[(flow.name, flow.version)] = flow
        _generation += 1


def load_flow_modules() -> None:
    """Import the modules named in ``INTERLUDE_FLOWS`` (once each), then check the flows are
    complete (ConfigurationError)."""
    global _unchecked
    for module in get_settings().flow_modules():
        if module in _loaded:
            continue
        # Imported without the registry's lock: the module's flows take it to register, and a
        # thread importing this module by itself holds the module's import lock meanwhile
        # (loading under our lock, each thread waited for the other's for ever). Python's
        # import lock makes a second importer wait for the first, so a module runs once.
        _import_flows(module)
        with _lock:
            if module not in _loaded:
                _unchecked = True
                _loaded.add(module)
    if _unchecked:
        with _lock:
            _check_flows()
            _unchecked = False


def _check_flows() -> None:
    # Once every module is imported: a flow's steps may be registered by a module after the
    # one that built the flow. Until it passes, every load refuses again.
    for flow in _flows.values():
        problem = flow.start_problem()
        if problem is not None:
            raise ConfigurationError(detail=f"INTERLUDE_FLOWS: {problem}")


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
    except Exception as exc:
        # A typo in INTERLUDE_FLOWS, a module missing on this machine, a flow refused by its
        # definition, a setting read at import: say which, in a line. A ConfigurationError is
        # what stops a worker at start (worker.engine.tasks): anything else Celery's signal would
        # log and drop, and the worker would fail every step.
        raise ConfigurationError(
            detail=f"INTERLUDE_FLOWS names {module!r}, which cannot be imported: "
            f"{type(exc).__name__}: {exc}"
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
