package faultproxy

import (
	"net/http"
	"net/url"
	"strings"
)

// Call names the AWS call a request makes, as the proxy sees it on the
// wire.
//
//   - Service is the signing name from the SigV4 credential scope of the
//     Authorization header (or of X-Amz-Credential in a presigned URL):
//     "dynamodb", "sqs", "s3", "lambda", "events", "execute-api", …; an
//     unsigned request (the emulator's health check, a browser) has "".
//   - Operation is the API operation name as the SDKs spell it:
//     DynamoDB and SQS (JSON protocol) take it from X-Amz-Target
//     ("DynamoDB_20120810.BatchWriteItem" → "BatchWriteItem"), Query
//     protocol services from the Action parameter, S3 from the method, path
//     and sub-resource query (path-style addressing: "/bucket/key"), Lambda
//     from the REST path. "" when it cannot be told.
//   - AccessKey is the access key id of the signature; on MiniStack the
//     deployed functions sign with "000000000000" and local callers with
//     their own (usually "test"), which lets a rule target the functions.
type Call struct {
	Service   string
	Operation string
	AccessKey string
}

// String returns "service.Operation".
func (c Call) String() string { return c.Service + "." + c.Operation }

// classify names the call of r. body is the buffered request body, or nil
// when it was not read (it is only needed for the Query protocol's Action).
func classify(r *http.Request, body []byte) Call {
	var c Call
	c.Service, c.AccessKey = credentialScope(r)
	target := r.Header.Get("X-Amz-Target")
	if c.Service == "" {
		c.Service = serviceOfTarget(target)
	}
	if c.Service == "" && strings.HasPrefix(r.URL.Path, "/2015-03-31/functions") {
		c.Service = "lambda"
	}
	switch {
	case target != "":
		c.Operation = target[strings.LastIndexByte(target, '.')+1:]
	case c.Service == "s3":
		c.Operation = s3Operation(r)
	case c.Service == "lambda":
		c.Operation = lambdaOperation(r)
	case c.Service == "apigateway":
		c.Operation = apigatewayOperation(r)
	default:
		c.Operation = r.URL.Query().Get("Action")
		if c.Operation == "" && body != nil && isForm(r) {
			if v, err := url.ParseQuery(string(body)); err == nil {
				c.Operation = v.Get("Action")
			}
		}
	}
	return c
}

func isForm(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded")
}

// credentialScope returns the service and access key of a SigV4 signature:
// "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/dynamodb/aws4_request, …".
func credentialScope(r *http.Request) (service, accessKey string) {
	cred := ""
	if auth := r.Header.Get("Authorization"); auth != "" {
		if i := strings.Index(auth, "Credential="); i >= 0 {
			cred = auth[i+len("Credential="):]
			if j := strings.IndexAny(cred, ", "); j >= 0 {
				cred = cred[:j]
			}
		}
	} else {
		cred = r.URL.Query().Get("X-Amz-Credential")
	}
	parts := strings.Split(cred, "/")
	if len(parts) != 5 {
		return "", ""
	}
	return parts[3], parts[0]
}

func serviceOfTarget(target string) string {
	switch {
	case strings.HasPrefix(target, "DynamoDB_"):
		return "dynamodb"
	case strings.HasPrefix(target, "AmazonSQS."):
		return "sqs"
	case strings.HasPrefix(target, "AWSEvents."):
		return "events"
	case strings.HasPrefix(target, "TrentService."):
		return "kms"
	}
	return ""
}

// s3Operation names a path-style S3 request: "/bucket" or "/bucket/key".
func s3Operation(r *http.Request) string {
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/")
	bucket, key, _ := strings.Cut(path, "/")
	q := r.URL.Query()
	has := func(name string) bool { _, ok := q[name]; return ok }
	copySource := r.Header.Get("X-Amz-Copy-Source") != ""
	if bucket == "" {
		if r.Method == http.MethodGet {
			return "ListBuckets"
		}
		return ""
	}
	if key == "" {
		switch r.Method {
		case http.MethodGet:
			switch {
			case q.Get("list-type") == "2":
				return "ListObjectsV2"
			case has("uploads"):
				return "ListMultipartUploads"
			case has("versions"):
				return "ListObjectVersions"
			case has("location"):
				return "GetBucketLocation"
			case has("encryption"):
				return "GetBucketEncryption"
			case has("policy"):
				return "GetBucketPolicy"
			case has("notification"):
				return "GetBucketNotificationConfiguration"
			case len(q) == 0 || has("prefix") || has("marker") || has("delimiter"):
				return "ListObjects"
			}
		case http.MethodHead:
			return "HeadBucket"
		case http.MethodPost:
			if has("delete") {
				return "DeleteObjects"
			}
		case http.MethodPut:
			switch {
			case has("notification"):
				return "PutBucketNotificationConfiguration"
			case has("lifecycle"):
				return "PutBucketLifecycleConfiguration"
			case len(q) == 0:
				return "CreateBucket"
			}
		case http.MethodDelete:
			if len(q) == 0 {
				return "DeleteBucket"
			}
		}
		return ""
	}
	switch r.Method {
	case http.MethodGet:
		switch {
		case has("uploadId"):
			return "ListParts"
		case has("tagging"):
			return "GetObjectTagging"
		}
		return "GetObject"
	case http.MethodHead:
		return "HeadObject"
	case http.MethodPut:
		switch {
		case has("uploadId") && copySource:
			return "UploadPartCopy"
		case has("uploadId"):
			return "UploadPart"
		case has("tagging"):
			return "PutObjectTagging"
		case copySource:
			return "CopyObject"
		}
		return "PutObject"
	case http.MethodPost:
		switch {
		case has("uploads"):
			return "CreateMultipartUpload"
		case has("uploadId"):
			return "CompleteMultipartUpload"
		}
	case http.MethodDelete:
		if has("uploadId") {
			return "AbortMultipartUpload"
		}
		return "DeleteObject"
	}
	return ""
}

// lambdaOperation names a Lambda REST request by its path.
func lambdaOperation(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 2 {
		return ""
	}
	switch {
	case parts[1] == "functions" && len(parts) == 4 && parts[3] == "invocations" && r.Method == http.MethodPost:
		return "Invoke"
	case parts[1] == "functions" && len(parts) == 4 && parts[3] == "invoke-async":
		return "InvokeAsync"
	case parts[1] == "functions" && len(parts) == 4 && parts[3] == "configuration" && r.Method == http.MethodGet:
		return "GetFunctionConfiguration"
	case parts[1] == "functions" && len(parts) == 3 && r.Method == http.MethodGet:
		return "GetFunction"
	case parts[1] == "functions" && len(parts) == 2 && r.Method == http.MethodGet:
		return "ListFunctions"
	case parts[1] == "event-source-mappings" && r.Method == http.MethodGet:
		if len(parts) == 2 {
			return "ListEventSourceMappings"
		}
		return "GetEventSourceMapping"
	case parts[1] == "account-settings" && r.Method == http.MethodGet:
		return "GetAccountSettings"
	case parts[1] == "functions" && len(parts) == 4 && parts[3] == "concurrency" && r.Method == http.MethodGet:
		return "GetFunctionConcurrency"
	}
	return ""
}

// apigatewayOperation names an API Gateway (REST APIs) request by its
// path: the account's settings, GetAccount and UpdateAccount.
func apigatewayOperation(r *http.Request) string {
	if strings.Trim(r.URL.Path, "/") != "account" {
		return ""
	}
	switch r.Method {
	case http.MethodGet:
		return "GetAccount"
	case http.MethodPatch:
		return "UpdateAccount"
	}
	return ""
}
