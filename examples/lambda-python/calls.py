"""Records each call of the example function as an S3 object, standard
library only (a SigV4-signed PutObject), for tests that count calls.

Off unless BULKRUN_EXAMPLE_CALLS_BUCKET is set. The object's key is

    {BULKRUN_EXAMPLE_CALLS_PREFIX}{batch id}/{hex of the item key}/{attempt}-{outcome}-{uuid4}

and its body the request's run_id. Credentials and region come from the
function's environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_REGION); AWS_ENDPOINT_URL, when set (the
emulator), is used with path-style addressing. The function's role needs
s3:PutObject on that prefix.
"""

import datetime
import hashlib
import hmac
import os
import urllib.parse
import urllib.request
import uuid


def record(event, outcome):
    bucket = os.environ.get("BULKRUN_EXAMPLE_CALLS_BUCKET")
    if not bucket:
        return
    prefix = os.environ.get("BULKRUN_EXAMPLE_CALLS_PREFIX", "calls/")
    key = "%s%s/%s/%d-%s-%s" % (prefix, event["batch_id"], event["key"].encode().hex(),
                                event["attempt"], outcome, uuid.uuid4().hex)
    put_object(bucket, key, event["run_id"].encode())


def _sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def put_object(bucket, key, body):
    region = os.environ.get("AWS_REGION", "us-east-1")
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    path_key = urllib.parse.quote(key, safe="/-_.~")
    if endpoint:
        u = urllib.parse.urlsplit(endpoint)
        scheme, host, path = u.scheme, u.netloc, "/%s/%s" % (bucket, path_key)
    else:
        scheme, host, path = "https", "%s.s3.%s.amazonaws.com" % (bucket, region), "/" + path_key
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    token = os.environ.get("AWS_SESSION_TOKEN")
    if token:
        headers["x-amz-security-token"] = token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["PUT", path, "", "".join("%s:%s\n" % (k, headers[k]) for k in sorted(headers)), signed, payload_hash])
    scope = "%s/%s/s3/aws4_request" % (date, region)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = _sign(("AWS4" + os.environ["AWS_SECRET_ACCESS_KEY"]).encode(), date)
    for part in (region, "s3", "aws4_request"):
        k = _sign(k, part)
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (
        os.environ["AWS_ACCESS_KEY_ID"], scope, signed, signature)
    req = urllib.request.Request("%s://%s%s" % (scheme, host, path), data=body, method="PUT", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()
