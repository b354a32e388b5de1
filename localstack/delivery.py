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

"shuffled" also delivers as SQS fair queues do, which MiniStack does not
(it hands out a standard queue's messages whatever their
MessageGroupId). From "How Amazon SQS fair queues work" (SQS developer
guide): a message's tenant is its MessageGroupId (a message with none is
a tenant of its own); a tenant is noisy while it holds more than 10 % of
the queue's messages in flight and at least 30 of them (the concurrency
share), or more than 10 % of the consumers' recent processing time (the
processing-time share), until its backlog is drained; "whenever quiet
tenant messages are available", consumers get those; then the noisy
tenants', the one with the fewest in flight first. A tenant's processing
time is taken as the time its messages spent in flight: at each receive,
its messages in flight after the last receive times the interval since,
decayed with a time constant of RECENT_SECONDS (the guide says "recent"
and no more).
BULKRUN_SQS_FAIR=0 turns fair queues off (a shuffle over all visible
messages, as before they existed), to measure what they change.
"""

import math
import os
import random
import sys
import time
from collections import Counter

from ministack.services import sqs

TAG = "bulkrun:delivery"
DEFAULT = os.environ.get("BULKRUN_SQS_DELIVERY", "shuffled")
if DEFAULT not in ("shuffled", "ordered"):
    sys.exit(f"BULKRUN_SQS_DELIVERY={DEFAULT!r}: want shuffled or ordered")
_seed = os.environ.get("BULKRUN_SQS_DELIVERY_SEED")
_rng = random.Random(int(_seed) if _seed else None)
_ordered = sqs._collect_msgs
FAIR = os.environ.get("BULKRUN_SQS_FAIR", "1") != "0"
# The time constant over which a tenant's processing time is "recent".
RECENT_SECONDS = 30.0


class _Tenants:
    """A queue's fair-queue state: its noisy tenants, and each tenant's
    recent processing time (seconds in flight, decayed) as of `at`."""

    def __init__(self):
        self.noisy = set()
        self.busy = Counter()
        self.at = None
        self.held = Counter()  # in flight after the last receive, by tenant


# By queue URL.
_state: dict[str, _Tenants] = {}


def _tenant(m):
    return m.get("group_id") or "message:" + m["id"]


def _fair(q, visible, now, max_n):
    """Up to max_n of visible, as a fair queue chooses (module doc)."""
    st = _state.setdefault(q.get("url") or str(id(q)), _Tenants())
    inflight = Counter(_tenant(m) for m in q["messages"] if m["visible_at"] > now and m["receive_count"] > 0)
    total = sum(inflight.values())
    if st.at is not None and now > st.at:
        dt = now - st.at
        decay = math.exp(-dt / RECENT_SECONDS)
        for t in list(st.busy):
            st.busy[t] *= decay
            if st.busy[t] < 1e-6:
                del st.busy[t]
        for t, n in st.held.items():
            st.busy[t] += n * dt
    st.at = now
    busy = sum(st.busy.values())
    backlog = Counter(_tenant(m) for m in visible)
    st.noisy &= set(backlog)  # a drained backlog makes a tenant quiet again
    for t in backlog:
        if inflight[t] >= 30 and inflight[t] > 0.1 * total or busy > 0 and st.busy[t] > 0.1 * busy:
            st.noisy.add(t)
    quiet = [m for m in visible if _tenant(m) not in st.noisy]
    out = _rng.sample(quiet, min(max_n, len(quiet)))
    if len(out) < max_n and st.noisy:
        by = {}
        for m in visible:
            t = _tenant(m)
            if t in st.noisy:
                by.setdefault(t, []).append(m)
        for ms in by.values():
            _rng.shuffle(ms)
        held = Counter(inflight)
        while len(out) < max_n and by:
            t = min(by, key=lambda t: held[t])
            out.append(by[t].pop())
            held[t] += 1
            if not by[t]:
                del by[t]
    st.held = inflight + Counter(_tenant(m) for m in out)
    _rng.shuffle(out)
    return out


def _collect_msgs(q, max_n, vis_timeout):
    order = (q.get("tags") or {}).get(TAG, DEFAULT)
    if q.get("is_fifo") or order != "shuffled":
        return _ordered(q, max_n, vis_timeout)
    now = time.time()
    for m in q["messages"]:
        sqs._ensure_msg_fields(m)
    visible = [m for m in q["messages"] if m["visible_at"] <= now]
    if FAIR:
        result = _fair(q, visible, now, max_n)
    else:
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
    import esmscaling  # noqa: F401  (an SQS event source that ramps up as Lambda's does)
    from ministack.app import main

    sys.exit(main())
