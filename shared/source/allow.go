package source

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// SourcePolicy says which S3 objects may be read as a batch's source, or
// as the object an item names (the thumbnail pipeline's {bucket, key}), so
// that a caller cannot make bulkrun read, for them, what its functions may
// read but they may not: another batch's manifest, outputs or results, a
// refused upload's report, or any bucket the stack was not told of.
//
// Allowed, in the stack's own bucket (Bucket): the upload prefixes
// (config.IncomingPrefix "incoming/" and config.UploadsPrefix "uploads/")
// and each entry of Allowed naming it; in any other bucket: only what
// Allowed names. Never allowed, whatever Allowed says: the stack bucket's
// "batches/" (everything a batch owns) and "incoming-errors/" (refused
// uploads' reports), and a key with a "." or ".." path segment.
//
// Allowed entries are "s3://bucket/prefix" URIs (an empty prefix: the
// whole bucket), from config.EnvSources; a key is covered when it starts
// with the prefix byte for byte. The zero SourcePolicy (Bucket "") allows
// everything: harnesses that wire no stack. Safe for concurrent use.
type SourcePolicy struct {
	Bucket  string   // the stack's bucket
	Allowed []string // s3://bucket/prefix entries, besides the upload prefixes
}

// Policy prefixes of the stack's bucket (see SourcePolicy). They match
// config.IncomingPrefix, config.UploadsPrefix, config.BatchesPrefix,
// config.UploadErrorsPrefix and config.ScheduleErrorsPrefix (batch imports no config; TestSourcePolicy
// checks they agree).
var (
	uploadPrefixes    = []string{"incoming/", "uploads/"}
	forbiddenPrefixes = []string{"batches/", "incoming-errors/", "schedule-errors/"}
)

// CheckObject returns nil when the object s3://bucket/key may be read, or
// an error saying why not (the caller names the field).
func (p SourcePolicy) CheckObject(bucket, key string) error {
	return p.check(bucket, key, false)
}

// CheckPrefix returns nil when every object under s3://bucket/prefix may
// be read: the prefix itself starts with an allowed prefix (so "incom",
// which would list incoming-errors/ too, is refused).
func (p SourcePolicy) CheckPrefix(bucket, prefix string) error {
	return p.check(bucket, prefix, true)
}

func (p SourcePolicy) check(bucket, key string, isPrefix bool) error {
	if p.Bucket == "" {
		return nil
	}
	uri := "s3://" + bucket + "/" + key
	for _, seg := range strings.Split(key, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%s has a %q path segment; name the object by its plain key", uri, seg)
		}
	}
	if bucket == p.Bucket {
		for _, f := range forbiddenPrefixes {
			if strings.HasPrefix(key, f) || (isPrefix && strings.HasPrefix(f, key)) {
				return fmt.Errorf("%s is under the stack bucket's %s, which is never a source", uri, f)
			}
		}
		for _, u := range uploadPrefixes {
			if strings.HasPrefix(key, u) {
				return nil
			}
		}
	}
	for _, a := range p.Allowed {
		ab, ak, err := api.ParseS3URI(a)
		if err == nil && ab == bucket && strings.HasPrefix(key, ak) {
			return nil
		}
	}
	return fmt.Errorf("%s is not an allowed source: allowed are %s", uri, strings.Join(p.allowedList(), ", "))
}

// allowedList names the allowed prefixes, for error messages.
func (p SourcePolicy) allowedList() []string {
	var out []string
	for _, u := range uploadPrefixes {
		out = append(out, "s3://"+p.Bucket+"/"+u)
	}
	return append(out, p.Allowed...)
}

// CheckSource checks an S3 source of a submit request against the policy:
// an *InputError naming source.object or source.prefix when it is not
// allowed. An inline source names no object and passes (its items are
// checked at run time by the pipelines that read objects, GuardedSource).
func (p SourcePolicy) CheckSource(spec api.SourceSpec) error {
	field, uri, check := "source.object", spec.Object, p.CheckObject
	if spec.Prefix != "" {
		field, uri, check = "source.prefix", spec.Prefix, p.CheckPrefix
	}
	if uri == "" {
		return nil
	}
	bucket, key, err := api.ParseS3URI(uri)
	if err != nil {
		return nil // SourceSpec.Validate names it
	}
	if err := check(bucket, key); err != nil {
		return &api.InputError{Field: field, Reason: err.Error()}
	}
	return nil
}

// ObjectOpener opens an S3 object for reading (thumbnail.Source's shape).
type ObjectOpener interface {
	Open(ctx context.Context, bucket, key string) (io.ReadCloser, error)
}

// GuardedSource is an ObjectOpener that opens only what Policy allows: an
// object it refuses is a permanent pipeline error (pipeline.Permanent)
// naming the input's bucket and key, so the item fails at once with the
// reason and is never retried. The item function wraps the thumbnail
// pipeline's source in it: an item's {bucket, key} is checked exactly as a
// submitted source is. Safe for concurrent use when Source is.
type GuardedSource struct {
	Source ObjectOpener
	Policy SourcePolicy
}

// Open checks bucket and key against the policy, then opens the object.
func (g GuardedSource) Open(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	if err := g.Policy.CheckObject(bucket, key); err != nil {
		return nil, pipeline.Permanent(fmt.Errorf("input bucket/key: %w", err))
	}
	return g.Source.Open(ctx, bucket, key)
}
