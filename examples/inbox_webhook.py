"""Recipe: post the inbox link of every new deploy-gate interrupt to a webhook.

Add this module to ``INTERLUDE_FLOWS`` (after ``examples.deploy_gate``) on the workers and set
``INTERLUDE_NOTIFY_WEBHOOK_URL`` (a chat or ticket system's incoming webhook) and
``INTERLUDE_WEB_BASE_URL`` (where people reach ``interlude serve``). Once the interrupt
commits, a worker calls each notifier in a task of its own (queue ``interlude.notify``): a
failure is tried again a few times, then logged; it never fails the run. The request has a
timeout of its own, which holds in any pool (Celery's time limit holds in prefork only).
"""

from __future__ import annotations

import json
import urllib.request

from examples.deploy_gate import flow
from models.contracts import InterruptView
from models.settings import get_settings

TIMEOUT_SECONDS = 5.0


@flow.notifier
def post_inbox_link(interrupt: InterruptView) -> None:
    """POST ``{"text": ..., "url": ...}`` naming the interrupt and the page that answers it."""
    settings = get_settings()
    if not settings.notify_webhook_url:
        return
    url = f"{settings.inbox_url()}/inbox/interrupts/{interrupt.id}"
    body = {
        "text": f"{interrupt.reason or interrupt.name}: answer at {url}",
        "url": url,
        "interrupt_id": interrupt.id,
        "run_id": interrupt.run_id,
        "kind": interrupt.kind,
        "roles": interrupt.roles,
        "deadline": interrupt.deadline.isoformat(),
    }
    request = urllib.request.Request(
        settings.notify_webhook_url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
        response.read()
