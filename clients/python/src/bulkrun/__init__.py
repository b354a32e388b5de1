"""bulkrun: the Python client of bulkrun's REST API.

    from bulkrun import Client
    c = Client.from_stack("bulkrun")
    b = c.submit("enrich", items=[{"key": "a", "text": "hello"}], key_field="key")
    done = c.wait(b["batch_id"], progress=lambda v: print(v["status"]))

docs/python.md has the whole of it; the Go client (shared/client) is the
reference.
"""

from .client import (
    APIError,
    Client,
    ItemIterator,
    StackError,
    api_base,
    new_batch_id,
    retryable,
    stack_outputs,
)
from .types import FINISHED, TERMINAL_OUTCOMES

__all__ = [
    "APIError",
    "Client",
    "ItemIterator",
    "StackError",
    "api_base",
    "new_batch_id",
    "retryable",
    "stack_outputs",
    "FINISHED",
    "TERMINAL_OUTCOMES",
]
