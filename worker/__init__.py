"""interlude's worker: the Celery app (``celery -A worker worker``) and the application API.

Importing ``worker`` is light: each name below is imported from its module on first use, so
the ``interlude`` command and application code pay only for what they touch.

Inside, by part: ``engine`` executes steps (the runtime, the effect ledger, dispatch, the
Celery tasks, sweeps and the reaper); ``gateway`` decides answers and events (its checks,
actors, operator authority); ``flows`` holds what flows declare (``Flow``, interrupts, input
schemas, events, policies, tools, versions); ``ops`` serves operators (statistics, metrics,
run logs, traces, step history, retention, notifications); ``present`` is what the command
line (``cli``) and the web (``web``) both show people. At the root: this face, the Celery
app (``app``) and the application API by subject (``runs``, ``interrupts``, ``operate``,
``forks``, ``ask_groups``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from worker.layout import check_layout

check_layout()

if TYPE_CHECKING:
    from celery import Celery

    from models.contracts import InterruptView, ResumeContract, ResumeResult
    from worker.engine.context import Resume, StepContext
    from worker.engine.effects import NOT_APPLIED, UNKNOWN
    from worker.flows.flow import Flow, RevalidationContext
    from worker.flows.schemas import BudgetGrant, OperatorRelease, RepairResolution, input_schema
    from worker.forks import fork_run
    from worker.gateway.actors import (
        add_actor,
        list_actors,
        revoke_actor,
        rotate_actor,
        set_actor_kind,
        set_actor_roles,
    )
    from worker.gateway.events import send_event
    from worker.gateway.submit import submit_resume
    from worker.interrupts import (
        count_resume_attempts,
        get_interrupt,
        list_interrupts,
        list_resume_attempts,
    )
    from worker.operate import find_runs, retry_run, wait_for_run
    from worker.ops.retention import purge_finished_runs
    from worker.ops.stats import collect_stats
    from worker.ops.step_history import list_steps
    from worker.runs import cancel_run, enqueue_run, get_run, list_runs, pause_run

    app: Celery
    celery: Celery

_EXPORTS = {
    "InterruptView": "models.contracts",
    "ResumeContract": "models.contracts",
    "ResumeResult": "models.contracts",
    "add_actor": "worker.gateway.actors",
    "list_actors": "worker.gateway.actors",
    "revoke_actor": "worker.gateway.actors",
    "rotate_actor": "worker.gateway.actors",
    "set_actor_kind": "worker.gateway.actors",
    "set_actor_roles": "worker.gateway.actors",
    "Resume": "worker.engine.context",
    "StepContext": "worker.engine.context",
    "NOT_APPLIED": "worker.engine.effects",
    "UNKNOWN": "worker.engine.effects",
    "Flow": "worker.flows.flow",
    "RevalidationContext": "worker.flows.flow",
    "submit_resume": "worker.gateway.submit",
    "send_event": "worker.gateway.events",
    "fork_run": "worker.forks",
    "list_steps": "worker.ops.step_history",
    "count_resume_attempts": "worker.interrupts",
    "get_interrupt": "worker.interrupts",
    "list_interrupts": "worker.interrupts",
    "list_resume_attempts": "worker.interrupts",
    "cancel_run": "worker.runs",
    "enqueue_run": "worker.runs",
    "get_run": "worker.runs",
    "list_runs": "worker.runs",
    "pause_run": "worker.runs",
    "find_runs": "worker.operate",
    "retry_run": "worker.operate",
    "wait_for_run": "worker.operate",
    "collect_stats": "worker.ops.stats",
    "purge_finished_runs": "worker.ops.retention",
    "BudgetGrant": "worker.flows.schemas",
    "OperatorRelease": "worker.flows.schemas",
    "RepairResolution": "worker.flows.schemas",
    "input_schema": "worker.flows.schemas",
}

__all__ = [
    "NOT_APPLIED",
    "UNKNOWN",
    "BudgetGrant",
    "Flow",
    "InterruptView",
    "OperatorRelease",
    "RepairResolution",
    "Resume",
    "ResumeContract",
    "ResumeResult",
    "RevalidationContext",
    "StepContext",
    "add_actor",
    "app",
    "cancel_run",
    "collect_stats",
    "count_resume_attempts",
    "enqueue_run",
    "find_runs",
    "fork_run",
    "get_interrupt",
    "get_run",
    "input_schema",
    "list_actors",
    "list_interrupts",
    "list_resume_attempts",
    "list_runs",
    "list_steps",
    "pause_run",
    "purge_finished_runs",
    "retry_run",
    "revoke_actor",
    "rotate_actor",
    "send_event",
    "set_actor_kind",
    "set_actor_roles",
    "submit_resume",
    "wait_for_run",
]


def _celery_app() -> Any:
    # The tasks module registers the tasks with the app, as ``celery -A worker`` expects.
    return importlib.import_module("worker.engine.tasks").app


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, "app", "celery"})


class _Package(types.ModuleType):
    """``worker.app`` and ``worker.celery`` are the Celery app, built on first use.

    A property, because importing the submodule ``worker.app`` would otherwise leave the
    module, not the app, under that name (the import system sets it on the package).
    """

    @property
    def app(self) -> Any:
        return _celery_app()

    @app.setter
    def app(self, _module: Any) -> None:
        pass  # the import system recording the submodule; the property answers instead

    @property
    def celery(self) -> Any:
        return _celery_app()


sys.modules[__name__].__class__ = _Package
