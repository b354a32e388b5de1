package submit

import (
	"context"
	"fmt"
	"sync"

	"github.com/bulkrun/bulkrun/shared/api"
)

// BucketRegions answers the Region a bucket is in (S3 GetBucketLocation,
// internal/blob). Implementations are safe for concurrent use.
type BucketRegions interface {
	BucketRegion(ctx context.Context, bucket string) (string, error)
}

// bucketRegions remembers each bucket's Region (bucket → Region) for the
// life of the process: a bucket's Region never changes (a deleted
// bucket's name may come back elsewhere, an hour at least later; a new
// submit function instance reads it again).
var bucketRegions sync.Map

// checkSourceRegion refuses an S3 source in a bucket of another Region
// than the stack's, naming both: S3 answers a call for such a bucket, sent
// to the stack's Region, with 301 PermanentRedirect, which the AWS SDK
// does not follow ("GetBucketLocation", Amazon S3 API reference; "Making
// requests", Amazon S3 user guide), so every read of it would fail. The
// stack's own bucket, an inline source, a Submitter without Regions or
// Region, and a Region that cannot be read (left to the read) pass. The
// error is an *api.InputError naming source.object or source.prefix.
func (s *Submitter) checkSourceRegion(ctx context.Context, spec api.SourceSpec) error {
	field, uri := "source.object", spec.Object
	if spec.Prefix != "" {
		field, uri = "source.prefix", spec.Prefix
	}
	if uri == "" || s.Regions == nil || s.Region == "" {
		return nil
	}
	bucket, _, err := api.ParseS3URI(uri)
	if err != nil || (s.Blobs != nil && bucket == s.Blobs.Bucket()) {
		return nil
	}
	region, ok := "", false
	if v, hit := bucketRegions.Load(bucket); hit {
		region, ok = v.(string), true
	} else if r, err := s.Regions.BucketRegion(ctx, bucket); err == nil {
		region, ok = r, true
		bucketRegions.Store(bucket, r)
	}
	if !ok || region == s.Region {
		return nil
	}
	return &api.InputError{Field: field, Reason: fmt.Sprintf(
		"bucket %s is in Region %s, this stack in %s: S3 answers a read from another Region with 301 (PermanentRedirect), which bulkrun does not follow; copy the source to a bucket in %s (S3 Replication), or submit it to a stack deployed in %s",
		bucket, region, s.Region, s.Region, region)}
}
