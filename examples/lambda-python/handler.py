"""A bulkrun "lambda" pipeline function in Python, standard library only.

bulkrun invokes it once per item attempt with the version-1 request:

    {"version": 1, "batch_id": "...", "key": "...", "run_id": "...",
     "attempt": 1, "input": {...}, "headers": {...}, "params": ...}

and reads its answer:

    {"output": <any JSON>, "cost": {"calls": 1, ...}}          success
    {"error": {"class": "permanent" | "quarantine" | "transient",
               "message": "..."}, "cost": {...}}               an error, with what it cost

Raising works too: an exception whose class is named PermanentError or
QuarantineError fails the item permanently or quarantines it; any other
exception is transient (retried). See docs/pipelines.md, "Pipelines in any language".

What this example does with an item's input:

    {"text": "hello big world"}     output {"words": 3, "upper": "HELLO BIG WORLD"}
    {"fail": "permanent"}           answers a permanent error
    {"fail": "quarantine"}          answers a quarantine
    {"fail": "transient", "until_attempt": 2}
                                    raises (transient) on attempts before 2
    {"fail": "transient", "until_attempt": 2, "usd": 0.5}
                                    answers a transient error on attempts before 2, with
                                    cost {"calls": 1, "usd": 0.5} (what a per-item ceiling counts)
    {"raise": "permanent"}          raises PermanentError
    {"text": "…", "usd": 0.5}       as text, and reports the spend: cost {"calls": 1, "usd": 0.5}
                                    (what a batch's budget counts, docs/api.md "Budgets")

When BULKRUN_EXAMPLE_CALLS_BUCKET is set, every call is recorded as an
S3 object (calls.py), which bulkrun's integration tests count.
"""

import calls


class PermanentError(Exception):
    """The item can never succeed: bulkrun records it failed."""


class QuarantineError(Exception):
    """Set the item aside until an operator releases it."""


class TransientError(Exception):
    """Retry later (any exception other than the two above does the same)."""


def handler(event, context):
    if event.get("version") != 1:
        raise PermanentError("unknown request version %r" % event.get("version"))
    item = event.get("input") or {}
    answer = None
    try:
        answer = run(item, event["attempt"])
        return answer
    except Exception as err:  # recorded, then raised on to Lambda
        answer = {"raised": type(err).__name__}
        raise
    finally:
        calls.record(event, outcome(answer))


def run(item, attempt):
    fail = item.get("fail")
    if fail in ("permanent", "quarantine"):
        return {"error": {"class": fail, "message": "asked to fail: " + fail}, "cost": {"calls": 1}}
    if fail == "transient" and attempt < int(item.get("until_attempt", 2)):
        if "usd" in item:
            # Answered, not raised, so that the spend is reported with it.
            return {"error": {"class": "transient", "message": "not yet: attempt %d" % attempt},
                    "cost": {"calls": 1, "usd": float(item["usd"])}}
        raise TransientError("not yet: attempt %d" % attempt)
    if item.get("raise") == "permanent":
        raise PermanentError("asked to raise PermanentError")
    text = str(item.get("text", ""))
    cost = {"calls": 1}
    if "usd" in item:
        cost["usd"] = float(item["usd"])
    return {"output": {"words": len(text.split()), "upper": text.upper()}, "cost": cost}


def outcome(answer):
    """The call's outcome as recorded: ok, permanent, quarantine, or the raised class."""
    if answer is None:
        return "unknown"
    if "raised" in answer:
        return answer["raised"]
    if "error" in answer:
        return answer["error"]["class"]
    return "ok"
