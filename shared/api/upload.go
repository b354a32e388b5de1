package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

// RefusalRepeatedUpload is the SubmitRefusal code of a repeated upload
// (*RepeatedUploadError).
const RefusalRepeatedUpload = "repeated_upload"

// RepeatedUploadError is an upload whose items, for the same pipeline and
// options, already started a batch from another object within the stack's
// window: it is not run again (every item would run a second time) unless
// the upload asks for it (x-amz-meta-rerun: true). Claim is the standing
// claim: the batch and the object that started it, and when.
type RepeatedUploadError struct {
	Source string // this upload, "s3://bucket/key"
	Claim  UploadClaim
	Window time.Duration
}

func (e *RepeatedUploadError) Error() string {
	return fmt.Sprintf("%s holds the same items for the same pipeline and options as %s, which started batch %s at %s (within the stack's %s window): not run again; to run them again, upload it with the metadata x-amz-meta-rerun: true",
		e.Source, e.Claim.Source, e.Claim.BatchID, e.Claim.ClaimedAt.UTC().Format(time.RFC3339), windowText(e.Window))
}

// windowText is a window as whole days ("7-day") or as a duration.
func windowText(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d-day", d/(24*time.Hour))
	}
	return d.String()
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// UploadBatchID derives a batch id from an upload: the file's base name
// (without its format and .gz extensions, characters outside
// [A-Za-z0-9_-] replaced by '-', at most 80 bytes), '-', and 16 hex digits
// of SHA-256("{bucket}/{key}#{digest}"), digest being the manifest digest
// (Submitter.Digest). The same name with the same items gives the
// same id whatever the object's ETag.
func UploadBatchID(bucket, key, digest string) string {
	base := path.Base(key)
	if strings.EqualFold(path.Ext(base), ".gz") {
		base = strings.TrimSuffix(base, path.Ext(base))
	}
	base = strings.TrimSuffix(base, path.Ext(base))
	base = strings.Trim(unsafeID.ReplaceAllString(base, "-"), "-")
	if len(base) > 80 {
		base = base[:80]
	}
	if base == "" {
		base = "upload"
	}
	sum := sha256.Sum256([]byte(bucket + "/" + key + "#" + digest))
	return base + "-" + hex.EncodeToString(sum[:8])
}

// UploadClaim records that the items of an upload started a batch: the
// content (UploadContent: the items as read, the pipeline and its
// options), the object that brought them, the batch they started and how
// long the claim holds. While it holds, the same content uploaded under
// another name is a repeated upload (see Submitter.ClaimUpload).
type UploadClaim struct {
	// Content is UploadContent of the upload (hex SHA-256).
	Content string
	// BatchID is the batch the upload started (or would start).
	BatchID string
	// Source is the upload's object, "s3://bucket/key".
	Source string
	// ClaimedAt is when the claim was made; Until when it stops holding
	// (ClaimedAt + the stack's window). The stored row carries a TTL a
	// day past Until.
	ClaimedAt, Until time.Time
}
