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

Provisioned mode (the mapping's ProvisionedPollerConfig), which MiniStack
drops: "each event poller can handle up to 1 MB/sec of throughput, up to
10 concurrent invokes", "quickly adding up to 1,000 concurrency per
minute", the minimum pollers "remain ready" (the same guide); "You cannot
use the maximum concurrency setting and provisioned mode at the same
time"; SQS's pollers range "minimum (2-200) and maximum (2-2000)"
("Lambda parameters for Amazon SQS event source mappings"). So a
CloudFormation mapping keeps its ProvisionedPollerConfig here, one that
also sets a ScalingConfig or leaves the ranges is refused (as Lambda
refuses it), and such a mapping's allowance starts at
MinimumPollers × POLLER_INVOCATIONS batches (taken as ready from the
first poll: the guide gives no figure), grows by
PROVISIONED_PER_MINUTE a minute up to MaximumPollers × POLLER_INVOCATIONS
(and the function's reserved concurrency), and falls back to its start
when traffic is low.
"""

import os
import sys
import threading
import time

from ministack.services import lambda_svc
from ministack.services.cloudformation import provisioners

RAMP_START = 5
RAMP_PER_MINUTE = 300
POLLER_INVOCATIONS = 10
PROVISIONED_PER_MINUTE = 1000
MIN_POLLERS, MAX_MIN_POLLERS, MAX_POLLERS = 2, 200, 2000
LOW_SECONDS = 10.0
ON = os.environ.get("BULKRUN_ESM_RAMP", "1") != "0"
LOG = True  # the allowance's steps to standard error (MiniStack's log)

_own = lambda_svc._sqs_esm_concurrency
_lock = threading.Lock()


class _Ramp:
    """One mapping's allowance of batches in flight, as of `at`
    (time.monotonic()), and since when its queue has been seen holding
    no visible message (None: it held one when last seen)."""

    def __init__(self, now, start):
        self.allowed = float(start)
        self.at = now
        self.idle_since = None
        self.told = 0


# By mapping UUID.
_ramps: dict[str, _Ramp] = {}


def allowance(esm_id, limit, visible, now, start=RAMP_START, per_minute=RAMP_PER_MINUTE):
    """The batches mapping esm_id may have in flight at now (monotonic
    seconds), its limit being limit and visible whether its queue holds a
    visible message; it starts at start and grows by per_minute a minute
    (module doc)."""
    with _lock:
        r = _ramps.get(esm_id)
        if r is None:
            r = _ramps[esm_id] = _Ramp(now, start)
        if not visible:
            if r.idle_since is None:
                r.idle_since = now
            if now - r.idle_since >= LOW_SECONDS:
                r.allowed = float(start)
        elif r.idle_since is not None:
            if now - r.idle_since >= LOW_SECONDS:
                r.allowed = float(start)  # back from low traffic
            r.idle_since = None
        else:
            r.allowed += per_minute / 60.0 * max(0.0, now - r.at)
        r.allowed = min(r.allowed, float(max(limit, start)))
        r.at = now
        n = max(1, min(limit, int(r.allowed)))
        if LOG and n != r.told and (n == start or n == limit or n // 10 != r.told // 10):
            # Every tenth step, the start and the top, in MiniStack's log.
            print(f"esm ramp: mapping {esm_id}: {n} batches in flight allowed", file=sys.stderr, flush=True)
            r.told = n
        return n


def _has_visible(queue):
    now = time.time()
    return any(m.get("visible_at", 0) <= now for m in queue.get("messages", ()))


def _sqs_esm_concurrency(esm, func_rec, config, queue=None):
    limit = _own(esm, func_rec, config, queue)
    pollers = esm.get("ProvisionedPollerConfig")
    if pollers and not (queue or {}).get("is_fifo"):
        # Provisioned mode: the pollers bound it, not MiniStack's default 5.
        limit = int(pollers.get("MaximumPollers", 200)) * POLLER_INVOCATIONS
        reserved = lambda_svc._reserved_concurrency(func_rec, config)
        if reserved is not None:
            limit = min(limit, reserved)
        if not ON or queue is None:
            return limit
        start = int(pollers.get("MinimumPollers", MIN_POLLERS)) * POLLER_INVOCATIONS
        return allowance(esm.get("UUID", ""), limit, _has_visible(queue), time.monotonic(), start, PROVISIONED_PER_MINUTE)
    if not ON or queue is None or queue.get("is_fifo"):
        return limit
    return allowance(esm.get("UUID", ""), limit, _has_visible(queue), time.monotonic())


def check_pollers(props):
    """Lambda's refusals of a mapping's provisioned mode (module doc), as
    the ValueError MiniStack's CloudFormation reports as the resource's
    failure; the ProvisionedPollerConfig to keep, or None."""
    pollers = props.get("ProvisionedPollerConfig")
    if not pollers:
        return None
    if props.get("ScalingConfig"):
        raise ValueError("InvalidParameterValueException: You cannot use the maximum concurrency setting "
                         "and provisioned mode at the same time")
    lo = int(pollers.get("MinimumPollers", MIN_POLLERS))
    hi = int(pollers.get("MaximumPollers", 200))
    if not MIN_POLLERS <= lo <= MAX_MIN_POLLERS or not max(lo, MIN_POLLERS) <= hi <= MAX_POLLERS:
        raise ValueError(f"InvalidParameterValueException: ProvisionedPollerConfig MinimumPollers {lo}, "
                         f"MaximumPollers {hi}: want 2-200 and the minimum to 2000")
    return {"MinimumPollers": lo, "MaximumPollers": hi}


_esm = provisioners._RESOURCE_HANDLERS["AWS::Lambda::EventSourceMapping"]
_esm_create, _esm_update = _esm["create"], _esm["update"]


def _keep_pollers(esm_id, pollers):
    esm = lambda_svc._esms.get(esm_id)
    if esm is None:
        return
    if pollers:
        esm["ProvisionedPollerConfig"] = pollers
    else:
        esm.pop("ProvisionedPollerConfig", None)


def _checked_esm_create(logical_id, props, stack_name):
    pollers = check_pollers(props)
    esm_id, attrs = _esm_create(logical_id, props, stack_name)
    _keep_pollers(esm_id, pollers)
    return esm_id, attrs


def _checked_esm_update(physical_id, old_props, new_props, stack_name):
    pollers = check_pollers(new_props)
    esm_id, attrs = _esm_update(physical_id, old_props, new_props, stack_name)
    if not new_props.get("ScalingConfig"):
        lambda_svc._esms.get(esm_id, {}).pop("ScalingConfig", None)
    _keep_pollers(esm_id, pollers)
    _ramps.pop(esm_id, None)
    return esm_id, attrs


lambda_svc._sqs_esm_concurrency = _sqs_esm_concurrency
_esm["create"], _esm["update"] = _checked_esm_create, _checked_esm_update
