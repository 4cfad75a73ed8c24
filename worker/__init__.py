"""interlude's worker: the Celery app (``celery -A worker worker``) and the application API."""

from models.contracts import InterruptView, ResumeContract, ResumeResult
from worker import tasks  # noqa: F401  (registers the tasks with the app)
from worker.actors import add_actor, list_actors, revoke_actor, set_actor_roles
from worker.app import app
from worker.context import Resume, StepContext
from worker.effects import NOT_APPLIED, UNKNOWN
from worker.flows import Flow
from worker.gateway import submit_resume
from worker.interrupts import get_interrupt, list_interrupts, list_resume_attempts
from worker.runs import cancel_run, enqueue_run, get_run, list_runs, pause_run
from worker.schemas import BudgetGrant, OperatorRelease, RepairResolution, input_schema

celery = app

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
    "StepContext",
    "add_actor",
    "app",
    "cancel_run",
    "enqueue_run",
    "get_interrupt",
    "get_run",
    "input_schema",
    "list_actors",
    "list_interrupts",
    "list_resume_attempts",
    "list_runs",
    "pause_run",
    "revoke_actor",
    "set_actor_roles",
    "submit_resume",
]
