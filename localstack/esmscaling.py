"""An SQS event source that scales as Lambda's does, which MiniStack's
does not.

AWS Lambda developer guide, "Configuring scaling behavior for SQS event
source mappings" (services-sqs-scaling.html), for standard queues: "When
messages are available, Lambda starts processing five batches at a time
with five concurrent invocations of your function. If messages are still
available, Lambda increases the number of processes that are reading
batches by up to 300 more instances per minute. The maximum number of
batches that an event source mapping can process simultaneously is
1,000. When traffic is low, Lambda scales back the processing to five
concurrent batches". The mapping's ScalingConfig.MaximumConcurrency
bounds it (AWS::Lambda::EventSourceMapping ScalingConfig, 2–1,000).

MiniStack runs up to MaximumConcurrency batches of a mapping from its
first poll (5 without one): a burst Lambda never makes. bulkrun relies
on the ramp (the sample's time estimate models it, shared/sample, and
the calls that go out before a downstream's first throttle is known
depend on it), so this module replaces MiniStack's per-mapping limit
(ministack.services.lambda_svc._sqs_esm_concurrency, read by its poller
on every pass) on standard queues with:

- an allowance that starts at RAMP_START batches in flight;
- grows by RAMP_PER_MINUTE a minute (5 a second) while the queue holds a
  visible message, up to MiniStack's own limit (MaximumConcurrency, the
  function's reserved concurrency);
- falls back to RAMP_START once the queue has held no visible message
  for LOW_SECONDS ("when traffic is low": the guide gives no time; a
  message waiting out a delay or in flight is not traffic the poller
  sees).

FIFO queues keep MiniStack's limit (1). BULKRUN_ESM_RAMP=0 turns the
ramp off (MiniStack's burst), to measure what it changes.
"""

import os
import sys
import threading
import time

from ministack.services import lambda_svc

RAMP_START = 5
RAMP_PER_MINUTE = 300
LOW_SECONDS = 10.0
ON = os.environ.get("BULKRUN_ESM_RAMP", "1") != "0"
LOG = True  # the allowance's steps to standard error (MiniStack's log)

_own = lambda_svc._sqs_esm_concurrency
_lock = threading.Lock()


class _Ramp:
    """One mapping's allowance of batches in flight, as of `at`
    (time.monotonic()), and since when its queue has been seen holding
    no visible message (None: it held one when last seen)."""

    def __init__(self, now):
        self.allowed = float(RAMP_START)
        self.at = now
        self.idle_since = None
        self.told = 0


# By mapping UUID.
_ramps: dict[str, _Ramp] = {}


def allowance(esm_id, limit, visible, now):
    """The batches mapping esm_id may have in flight at now (monotonic
    seconds), MiniStack's own limit being limit and visible whether its
    queue holds a visible message (module doc)."""
    with _lock:
        r = _ramps.get(esm_id)
        if r is None:
            r = _ramps[esm_id] = _Ramp(now)
        if not visible:
            if r.idle_since is None:
                r.idle_since = now
            if now - r.idle_since >= LOW_SECONDS:
                r.allowed = float(RAMP_START)
        elif r.idle_since is not None:
            if now - r.idle_since >= LOW_SECONDS:
                r.allowed = float(RAMP_START)  # back from low traffic
            r.idle_since = None
        else:
            r.allowed += RAMP_PER_MINUTE / 60.0 * max(0.0, now - r.at)
        r.allowed = min(r.allowed, float(max(limit, RAMP_START)))
        r.at = now
        n = max(1, min(limit, int(r.allowed)))
        if LOG and n != r.told and (n == RAMP_START or n == limit or n // 10 != r.told // 10):
            # Every tenth step, the start and the top, in MiniStack's log.
            print(f"esm ramp: mapping {esm_id}: {n} batches in flight allowed", file=sys.stderr, flush=True)
            r.told = n
        return n


def _has_visible(queue):
    now = time.time()
    return any(m.get("visible_at", 0) <= now for m in queue.get("messages", ()))


def _sqs_esm_concurrency(esm, func_rec, config, queue=None):
    limit = _own(esm, func_rec, config, queue)
    if not ON or queue is None or queue.get("is_fifo"):
        return limit
    return allowance(esm.get("UUID", ""), limit, _has_visible(queue), time.monotonic())


lambda_svc._sqs_esm_concurrency = _sqs_esm_concurrency
