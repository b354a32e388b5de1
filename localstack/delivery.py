"""Start MiniStack with SQS standard queues that deliver as SQS does.

Amazon SQS standard queues give "best-effort ordering": "occasionally,
messages are delivered in an order different from which they were sent"
(Amazon SQS developer guide, "Amazon SQS standard queues"), and a short-poll
ReceiveMessage "samples a subset of the servers (based on a weighted random
distribution) and returns messages from only those servers" (developer
guide, "Amazon SQS short and long polling"). MiniStack returns the oldest
visible messages, in send order, so one receive (and one Lambda event
source batch) holds the messages of one sender's SendMessageBatch: a test
bed more orderly than AWS.

This launcher replaces MiniStack's choice of messages for ReceiveMessage
and for its Lambda event source poller (both call
ministack.services.sqs._collect_msgs) on standard queues:

- "shuffled": up to MaxNumberOfMessages visible messages drawn at random
  from all visible messages of the queue, returned in random order;
- "ordered": MiniStack's own choice (the oldest, in send order).

A queue's tag "bulkrun:delivery" ("shuffled" or "ordered") decides for
that queue; otherwise BULKRUN_SQS_DELIVERY (default "shuffled"). FIFO
queues keep MiniStack's group order. BULKRUN_SQS_DELIVERY_SEED seeds the
draws (default: random).

It also applies, through awsrules.py (imported before MiniStack's main),
the AWS rules MiniStack's CloudFormation does not: a logging API stage
needs the account's API Gateway CloudWatch role, and a deletion-protected
table cannot be deleted by a stack.
"""

import os
import random
import sys
import time

from ministack.services import sqs

TAG = "bulkrun:delivery"
DEFAULT = os.environ.get("BULKRUN_SQS_DELIVERY", "shuffled")
if DEFAULT not in ("shuffled", "ordered"):
    sys.exit(f"BULKRUN_SQS_DELIVERY={DEFAULT!r}: want shuffled or ordered")
_seed = os.environ.get("BULKRUN_SQS_DELIVERY_SEED")
_rng = random.Random(int(_seed) if _seed else None)
_ordered = sqs._collect_msgs


def _collect_msgs(q, max_n, vis_timeout):
    order = (q.get("tags") or {}).get(TAG, DEFAULT)
    if q.get("is_fifo") or order != "shuffled":
        return _ordered(q, max_n, vis_timeout)
    now = time.time()
    for m in q["messages"]:
        sqs._ensure_msg_fields(m)
    visible = [m for m in q["messages"] if m["visible_at"] <= now]
    result = _rng.sample(visible, min(max_n, len(visible)))
    for m in result:
        m["receipt_handle"] = sqs.new_uuid()
        m["visible_at"] = now + vis_timeout
        m["receive_count"] += 1
        if m.get("first_receive_at") is None:
            m["first_receive_at"] = now
    return result


sqs._collect_msgs = _collect_msgs

if __name__ == "__main__":
    import awsrules  # noqa: F401  (AWS rules MiniStack's CloudFormation does not apply)
    from ministack.app import main

    sys.exit(main())
