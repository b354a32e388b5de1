// Package blob is the S3 adapter of ledger.Blobs, thumbnail.Source and the
// pipelines' outputs. It is the only importer of the S3 SDK; a missing
// object is api.ErrNotFound (which also matches fs.ErrNotExist), a lost
// If-None-Match is api.ErrConflict.
//
// Streaming writes go through the S3 transfer manager
// (feature/s3/transfermanager) fed by an io.Pipe: memory is bounded by
// PartSizeBytes × Concurrency whatever the object's size, and an aborted
// write aborts the multipart upload, so nothing half-written is ever visible.
package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/cenkalti/backoff/v5"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Part sizing of streaming writes. S3 needs parts of at least 5 MiB (but the
// last) and at most 10,000 parts per upload (S3 user guide, "Amazon S3
// multipart upload limits"): 8 MiB parts carry objects up to ~78 GiB.
const (
	PartSizeBytes = 8 << 20
	Concurrency   = 2
	MaxParts      = 10_000
)

// Store implements ledger.Blobs on one bucket. Safe for concurrent use.
type Store struct {
	s3     *s3.Client
	tm     *transfermanager.Client
	bucket string
}

var _ ledger.Blobs = (*Store)(nil)

// NewS3 returns an S3 client for c; against an emulator (AWS_ENDPOINT_URL
// or AWS_ENDPOINT_URL_S3 set) it uses path-style addressing, since bucket
// host names do not resolve there. Checksums are computed and validated
// only when S3 requires them. The server functions and the CLI both build
// their S3 client with it.
func NewS3(c aws.Config) *s3.Client {
	return s3.NewFromConfig(c, func(o *s3.Options) {
		if os.Getenv("AWS_ENDPOINT_URL") != "" || os.Getenv("AWS_ENDPOINT_URL_S3") != "" {
			o.UsePathStyle = true
		}
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		// A results file written in parts has a composite checksum the SDK
		// does not validate; it would say so on stderr ("WARN Skipped
		// validation of multipart checksum"), in the middle of a CLI's
		// output. The checksum is not wanted: nothing to warn about.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
}

// New returns a Store on bucket. It uses a copy of client with bulkrun's
// retryer (no client-side retry quota) and AWS's transient faults tagged
// ledger.ErrUnavailable (internal/awsfault); client itself is not changed.
func New(client *s3.Client, bucket string) *Store {
	client = s3.New(client.Options(), func(o *s3.Options) {
		o.Retryer = awsfault.Retryer()
		o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("s3"))
	})
	return &Store{
		s3: client,
		tm: transfermanager.New(client, func(o *transfermanager.Options) {
			o.PartSizeBytes = PartSizeBytes
			o.Concurrency = Concurrency
			o.MaxUploadParts = MaxParts
			o.FailTimeout = 30 * time.Second
		}),
		bucket: bucket,
	}
}

// Bucket returns the batches bucket's name.
func (s *Store) Bucket() string { return s.bucket }

// notFound is api.ErrNotFound that also matches fs.ErrNotExist.
type notFound struct{ what string }

func (e *notFound) Error() string { return e.what + ": " + api.ErrNotFound.Error() }
func (e *notFound) Is(t error) bool {
	return t == api.ErrNotFound || t == fs.ErrNotExist
}

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

func isPreconditionFailed(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "ConditionalRequestConflict") {
		return true
	}
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && (re.HTTPStatusCode() == http.StatusPreconditionFailed || re.HTTPStatusCode() == http.StatusConflict)
}

type writer struct {
	pw     *io.PipeWriter
	done   chan error
	once   sync.Once
	closed bool
	err    error
}

func (w *writer) Write(p []byte) (int, error) { return w.pw.Write(p) }

// Close completes the upload and waits for it.
func (w *writer) Close() error {
	w.once.Do(func() {
		w.closed = true
		w.pw.Close()
		w.err = <-w.done
	})
	return w.err
}

var errAborted = errors.New("write aborted")

// Abort discards the upload (the transfer manager aborts the multipart
// upload). No-op after Close.
func (w *writer) Abort() error {
	w.once.Do(func() {
		w.pw.CloseWithError(errAborted)
		<-w.done
		w.err = errAborted
	})
	return nil
}

// Create starts a streaming write of key in the batches bucket.
func (s *Store) Create(ctx context.Context, key, contentType string) (ledger.BlobWriter, error) {
	return s.CreateObject(ctx, key, contentType, nil)
}

// CreateObject is Create of an object with user metadata meta
// (x-amz-meta-<name>; nil for none), such as an upload's submit options.
func (s *Store) CreateObject(ctx context.Context, key, contentType string, meta map[string]string) (ledger.BlobWriter, error) {
	pr, pw := io.Pipe()
	w := &writer{pw: pw, done: make(chan error, 1)}
	go func() {
		_, err := s.tm.UploadObject(ctx, &transfermanager.UploadObjectInput{
			Bucket: &s.bucket, Key: &key, Body: pr, ContentType: &contentType, Metadata: meta,
		})
		if err != nil {
			err = fmt.Errorf("upload s3://%s/%s: %w", s.bucket, key, err)
		}
		pr.CloseWithError(err)
		w.done <- err
	}()
	return w, nil
}

// Open reads bucket/key.
func (s *Store) Open(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	return s.OpenMatch(ctx, bucket, key, "")
}

// OpenMatch reads bucket/key with If-Match: etag (when not ""), so that
// what is read is exactly that object: a replaced one is api.ErrConflict
// (S3 answers 412 Precondition Failed), a deleted one api.ErrNotFound.
func (s *Store) OpenMatch(ctx context.Context, bucket, key, etag string) (io.ReadCloser, error) {
	return s.get(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key}, etag)
}

// get sends in with If-Match: etag (when not ""), mapping a missing object
// to api.ErrNotFound and a replaced one (412) to api.ErrConflict.
func (s *Store) get(ctx context.Context, in *s3.GetObjectInput, etag string) (io.ReadCloser, error) {
	bucket, key, rng := aws.ToString(in.Bucket), aws.ToString(in.Key), ""
	if in.Range != nil {
		rng = " " + *in.Range
	}
	if etag != "" {
		in.IfMatch = aws.String(quoteETag(etag))
	}
	out, err := s.s3.GetObject(ctx, in)
	if err != nil {
		if isNotFound(err) {
			return nil, &notFound{what: "s3://" + bucket + "/" + key}
		}
		if etag != "" && isPreconditionFailed(err) {
			return nil, fmt.Errorf("get s3://%s/%s: ETag is no longer %s: %w", bucket, key, etag, api.ErrConflict)
		}
		return nil, fmt.Errorf("get s3://%s/%s%s: %w", bucket, key, rng, err)
	}
	return out.Body, nil
}

// quoteETag returns etag in the quoted form S3 gives and conditions
// compare ("9b2c…" and "\"9b2c…\"" are the same ETag; S3 event records
// carry it unquoted).
func quoteETag(etag string) string {
	return `"` + strings.Trim(etag, `"`) + `"`
}

// OpenRange reads length bytes at offset of key in the batches bucket.
func (s *Store) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if length <= 0 {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	rng := fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	out, err := s.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key, Range: &rng})
	if err != nil {
		if isNotFound(err) {
			return nil, &notFound{what: "s3://" + s.bucket + "/" + key}
		}
		return nil, fmt.Errorf("get s3://%s/%s %s: %w", s.bucket, key, rng, err)
	}
	return out.Body, nil
}

// Put writes key whole.
func (s *Store) Put(ctx context.Context, key, contentType string, body []byte) error {
	_, err := s.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body), ContentType: &contentType, ContentLength: aws.Int64(int64(len(body)))})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// PutIfAbsent writes key with If-None-Match: * (S3 conditional writes);
// api.ErrConflict when an object already has the key.
func (s *Store) PutIfAbsent(ctx context.Context, key, contentType string, body []byte) error {
	_, err := s.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body), ContentType: &contentType,
		ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: aws.String("*")})
	if err != nil {
		if isPreconditionFailed(err) {
			return fmt.Errorf("put s3://%s/%s: exists: %w", s.bucket, key, api.ErrConflict)
		}
		return fmt.Errorf("put s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// Get reads key whole.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	rc, err := s.Open(ctx, s.bucket, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// PresignGet returns a URL that reads key of the batches bucket with an
// unsigned GET for ttl (S3 presigned URLs, SigV4 in the query: "Download
// and upload objects with presigned URLs", Amazon S3 user guide,
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-presigned-url.html),
// with the credentials of the caller — on Lambda the function's role,
// whose session may end before ttl does, ending the URL with it. Nothing
// is sent to S3. Safe for concurrent use.
func (s *Store) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	req, err := s3.NewPresignClient(s.s3).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("presign s3://%s/%s: %w", s.bucket, key, err)
	}
	return req.URL, nil
}

// Delete removes key (missing is fine).
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, err := s.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// List calls fn for every object under bucket/prefix across every page of
// ListObjectsV2 (1,000 keys a page), in key order, with each key as stored.
// It lists with EncodingType=url: S3 answers in XML 1.0, which cannot hold
// some characters a key may hold (U+0001 and the other control characters;
// S3 user guide, "Naming Amazon S3 objects", and S3 API reference,
// "ListObjectsV2", EncodingType:
// https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html).
// Keys are decoded (see [DecodeListedKey]) only when the answer says
// EncodingType url, so a store that ignores the parameter still lists
// right. A key that does not decode is an error naming it.
func (s *Store) List(ctx context.Context, bucket, prefix string, fn func(source.ObjectInfo) error) error {
	p := s3.NewListObjectsV2Paginator(s.s3, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix, EncodingType: types.EncodingTypeUrl})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			if isNotFound(err) {
				return &notFound{what: "bucket " + bucket}
			}
			return fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if page.EncodingType == types.EncodingTypeUrl {
				if key, err = DecodeListedKey(key); err != nil {
					return fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
				}
			}
			if err := fn(source.ObjectInfo{Bucket: bucket, Key: key, Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecodeListedKey decodes a key listed with EncodingType=url. S3 encodes
// such keys form-style (a space may come as "+", a "+" as %2B), so the key
// is decoded as a query component (url.QueryUnescape), the way the AWS CLI
// and boto3 decode listings; MiniStack's "%20" for a space decodes the same.
func DecodeListedKey(key string) (string, error) {
	k, err := url.QueryUnescape(key)
	if err != nil {
		return "", fmt.Errorf("listed key %q: not URL-encoded: %w", key, err)
	}
	return k, nil
}

// Head returns an object's size, ETag and user metadata (lower-case names,
// without the x-amz-meta- prefix).
func (s *Store) Head(ctx context.Context, bucket, key string) (source.ObjectInfo, map[string]string, error) {
	return s.HeadMatch(ctx, bucket, key, "")
}

// HeadMatch is Head with If-Match: etag (when not ""): a replaced object is
// api.ErrConflict, a deleted one api.ErrNotFound. The info carries the
// object's Content-Encoding.
func (s *Store) HeadMatch(ctx context.Context, bucket, key, etag string) (source.ObjectInfo, map[string]string, error) {
	in := &s3.HeadObjectInput{Bucket: &bucket, Key: &key}
	if etag != "" {
		in.IfMatch = aws.String(quoteETag(etag))
	}
	out, err := s.s3.HeadObject(ctx, in)
	if err != nil {
		if isNotFound(err) {
			return source.ObjectInfo{}, nil, &notFound{what: "s3://" + bucket + "/" + key}
		}
		if etag != "" && isPreconditionFailed(err) {
			return source.ObjectInfo{}, nil, fmt.Errorf("head s3://%s/%s: ETag is no longer %s: %w", bucket, key, etag, api.ErrConflict)
		}
		return source.ObjectInfo{}, nil, fmt.Errorf("head s3://%s/%s: %w", bucket, key, err)
	}
	return source.ObjectInfo{Bucket: bucket, Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		ContentEncoding: aws.ToString(out.ContentEncoding)}, out.Metadata, nil
}

// MaxDeleteKeys is DeleteObjects' limit per call (S3 API reference,
// "DeleteObjects": up to 1,000 keys).
const MaxDeleteKeys = 1000

// DeletePrefix removes every object under prefix in the batches bucket, in
// DeleteObjects calls of at most 1,000 keys (a key that XML 1.0 cannot
// carry, such as one holding U+0001, by its own DeleteObject), and returns
// how many it removed. A DeleteObjects answer may list per-key errors
// while deleting the others (S3 API reference, "DeleteObjects": the
// response holds a Deleted or an Error element per key); the failed keys
// are retried within the pass, with exponential backoff (100 ms doubling,
// jittered, at most MaxDeleteTries calls per page), and the pass goes on to
// the next pages whatever happens. Keys still failing at the end are an
// error naming the first of them and their count; the caller may retry
// (deleting a missing key is not an error).
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	if prefix == "" || !strings.HasSuffix(prefix, "/") {
		return 0, fmt.Errorf("delete prefix %q: want a non-empty prefix ending in /", prefix)
	}
	var keys []types.ObjectIdentifier
	n := 0
	var failed []types.Error
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		left, deleted, err := s.deletePage(ctx, keys)
		n += deleted
		keys = keys[:0]
		if err != nil {
			return fmt.Errorf("delete under s3://%s/%s: %w", s.bucket, prefix, err)
		}
		failed = append(failed, left...)
		return nil
	}
	err := s.List(ctx, s.bucket, prefix, func(o source.ObjectInfo) error {
		if !xmlSafe(o.Key) {
			// DeleteObjects names keys in an XML body, which cannot carry
			// this key (the SDK would send U+FFFD instead, deleting
			// nothing): delete it alone, its key in the URL.
			if _, err := s.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(o.Key)}); err != nil {
				return fmt.Errorf("delete s3://%s/%q: %w", s.bucket, o.Key, err)
			}
			n++
			return nil
		}
		keys = append(keys, types.ObjectIdentifier{Key: aws.String(o.Key)})
		if len(keys) == MaxDeleteKeys {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil && len(failed) > 0 {
		e := failed[0]
		err = fmt.Errorf("delete s3://%s/%s: %s: %s (%d keys not deleted after %d tries)", s.bucket, aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message), len(failed), MaxDeleteTries)
	}
	return n, err
}

// MaxDeleteTries bounds the DeleteObjects calls for one page of keys.
const MaxDeleteTries = 6

// deletePage deletes keys with DeleteObjects, retrying the keys the answer
// lists as errors. It returns the keys still failing after MaxDeleteTries
// calls, how many it deleted, and the error of a call that failed whole.
func (s *Store) deletePage(ctx context.Context, keys []types.ObjectIdentifier) ([]types.Error, int, error) {
	pending := slices.Clone(keys)
	deleted := 0
	var left []types.Error
	bo := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 5 * time.Second}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		out, err := s.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &types.Delete{Objects: pending, Quiet: aws.Bool(true)}})
		if err != nil {
			return struct{}{}, err
		}
		failed := map[string]bool{}
		for _, e := range out.Errors {
			failed[aws.ToString(e.Key)] = true
		}
		next := pending[:0:0]
		for _, k := range pending {
			if failed[aws.ToString(k.Key)] {
				next = append(next, k)
			}
		}
		deleted += len(pending) - len(next)
		pending, left = next, out.Errors
		if len(pending) > 0 {
			return struct{}{}, errKeysLeft
		}
		return struct{}{}, nil
	}, backoff.WithBackOff(bo), backoff.WithMaxTries(MaxDeleteTries), backoff.WithMaxElapsedTime(0))
	if errors.Is(err, errKeysLeft) {
		return left, deleted, nil
	}
	if err != nil {
		return nil, deleted, err
	}
	return nil, deleted, nil
}

var errKeysLeft = errors.New("keys left")

// xmlSafe reports whether key is made only of characters XML 1.0 allows
// (W3C XML 1.0, "Characters": tab, LF, CR, U+0020–U+D7FF,
// U+E000–U+FFFD, U+10000–U+10FFFF), so that it can be named in an XML
// request body such as DeleteObjects'.
func xmlSafe(key string) bool {
	for _, r := range key {
		switch {
		case r == 0x09 || r == 0x0A || r == 0x0D:
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// StartParts begins a multipart upload of key in the batches bucket
// (CreateMultipartUpload) and returns its upload id. Its parts are written
// by PutPart, possibly from several invocations, and made visible by
// CompleteParts; an upload never completed is removed by the bucket's
// lifecycle rule (AbortIncompleteMultipartUpload, 1 day).
func (s *Store) StartParts(ctx context.Context, key, contentType string) (string, error) {
	out, err := s.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &key, ContentType: &contentType})
	if err != nil {
		return "", fmt.Errorf("start upload s3://%s/%s: %w", s.bucket, key, err)
	}
	return aws.ToString(out.UploadId), nil
}

// PutPart writes part n (1–10,000) of upload id of key (UploadPart);
// writing part n again replaces it. Every part but the last must hold at
// least 5 MiB (S3 user guide, "Amazon S3 multipart upload limits").
func (s *Store) PutPart(ctx context.Context, key, id string, n int, body []byte) error {
	_, err := s.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: &key, UploadId: &id, PartNumber: aws.Int32(int32(n)),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
	if err != nil {
		return fmt.Errorf("upload part %d of s3://%s/%s: %w", n, s.bucket, key, err)
	}
	return nil
}

// MaxCopyPartBytes is the most one UploadPartCopy copies: 5 GiB (S3 user
// guide, "Amazon S3 multipart upload limits").
const MaxCopyPartBytes = 5 << 30

// CopyPart writes part n (1–10,000) of upload id of key as bytes
// [offset, offset+length) of src, copied inside S3 (UploadPartCopy with
// x-amz-copy-source-range; S3 API reference, "UploadPartCopy": it needs
// s3:GetObject on the source and s3:PutObject on the destination). A
// length over MaxCopyPartBytes is refused before any call. Writing part
// n again replaces it.
func (s *Store) CopyPart(ctx context.Context, key, id string, n int, src string, offset, length int64) error {
	if length < 1 || length > MaxCopyPartBytes || offset < 0 {
		return fmt.Errorf("copy s3://%s/%s bytes %d+%d into part %d of s3://%s/%s: a part copies 1 byte to 5 GiB", s.bucket, src, offset, length, n, s.bucket, key)
	}
	copySource := url.PathEscape(s.bucket) + "/" + escapeKey(src)
	rng := fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	_, err := s.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &s.bucket, Key: &key, UploadId: &id,
		PartNumber: aws.Int32(int32(n)), CopySource: &copySource, CopySourceRange: &rng})
	if err != nil {
		return fmt.Errorf("copy s3://%s/%s bytes %d+%d into part %d of s3://%s/%s: %w", s.bucket, src, offset, length, n, s.bucket, key, err)
	}
	return nil
}

// CompleteParts makes parts 1..n of upload id the object key
// (CompleteMultipartUpload), each part with the ETag of its last write as
// ListParts reports it. n = 0 puts an empty object. An upload that is gone
// (S3's NoSuchUpload: completed by an earlier call) while key holds size
// bytes is no error; a part missing from the listing is.
func (s *Store) CompleteParts(ctx context.Context, key, id string, n int, size int64) error {
	if n == 0 {
		_ = s.abortParts(ctx, key, id)
		return s.Put(ctx, key, "application/x-ndjson", nil)
	}
	parts := make([]types.CompletedPart, 0, n)
	p := s3.NewListPartsPaginator(s.s3, &s3.ListPartsInput{Bucket: &s.bucket, Key: &key, UploadId: &id})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			var nsu *types.NoSuchUpload
			if errors.As(err, &nsu) || isNotFound(err) {
				return s.completed(ctx, key, size, err)
			}
			return fmt.Errorf("list parts of s3://%s/%s: %w", s.bucket, key, err)
		}
		for _, part := range page.Parts {
			if pn := int(aws.ToInt32(part.PartNumber)); pn >= 1 && pn <= n {
				parts = append(parts, types.CompletedPart{PartNumber: part.PartNumber, ETag: part.ETag})
			}
		}
	}
	slices.SortFunc(parts, func(a, b types.CompletedPart) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	for i, part := range parts {
		if int(aws.ToInt32(part.PartNumber)) != i+1 {
			return fmt.Errorf("complete s3://%s/%s: part %d was never written", s.bucket, key, i+1)
		}
	}
	if len(parts) != n {
		return fmt.Errorf("complete s3://%s/%s: %d of %d parts written", s.bucket, key, len(parts), n)
	}
	_, err := s.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err != nil {
		var nsu *types.NoSuchUpload
		if errors.As(err, &nsu) || isNotFound(err) {
			return s.completed(ctx, key, size, err)
		}
		return fmt.Errorf("complete s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// completed checks that an upload reported gone was completed into key
// with size bytes.
func (s *Store) completed(ctx context.Context, key string, size int64, cause error) error {
	info, _, err := s.Head(ctx, s.bucket, key)
	if err == nil && info.Size == size {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("holds %d bytes, want %d", info.Size, size)
	}
	return fmt.Errorf("complete s3://%s/%s: upload gone (%v) and the object not written: %w", s.bucket, key, cause, err)
}

func (s *Store) abortParts(ctx context.Context, key, id string) error {
	_, err := s.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: &id})
	return err
}

// HeadSource returns the size and ETag of bucket/key (HeadObject).
func (s *Store) HeadSource(ctx context.Context, bucket, key string) (source.ObjectInfo, error) {
	info, _, err := s.HeadMatch(ctx, bucket, key, "")
	return info, err
}

// OpenSourceRange reads bytes [offset, offset+length) of bucket/key
// (length < 0: to the end) with If-Match: etag: a replaced object is
// api.ErrConflict (412), a deleted one api.ErrNotFound.
func (s *Store) OpenSourceRange(ctx context.Context, bucket, key, etag string, offset, length int64) (io.ReadCloser, error) {
	if length == 0 {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	rng := fmt.Sprintf("bytes=%d-", offset)
	if length > 0 {
		rng = fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	}
	return s.get(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key, Range: &rng}, etag)
}

// ComposeConcurrency is how many UploadPartCopy calls Compose makes at once.
const ComposeConcurrency = 32

// Compose writes key as the concatenation of sources (all in the batches
// bucket), copied inside S3: one multipart upload, one UploadPartCopy per
// source (S3 API reference, "UploadPartCopy": needs s3:GetObject on the
// source and s3:PutObject on the destination; every part but the last at
// least 5 MiB, each at most 5 GiB, at most 10,000). The upload is aborted
// on failure; writing key again writes the same bytes. No sources put an
// empty object.
func (s *Store) Compose(ctx context.Context, key, contentType string, sources []string) error {
	if len(sources) == 0 {
		return s.Put(ctx, key, contentType, nil)
	}
	if len(sources) > MaxParts {
		return fmt.Errorf("compose s3://%s/%s: %d sources, more than %d parts", s.bucket, key, len(sources), MaxParts)
	}
	id, err := s.StartParts(ctx, key, contentType)
	if err != nil {
		return err
	}
	parts := make([]types.CompletedPart, len(sources))
	errs := make([]error, len(sources))
	sem := make(chan struct{}, ComposeConcurrency)
	var wg sync.WaitGroup
	for i, src := range sources {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			copySource := url.PathEscape(s.bucket) + "/" + escapeKey(src)
			out, err := s.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &s.bucket, Key: &key, UploadId: &id,
				PartNumber: aws.Int32(int32(i + 1)), CopySource: &copySource})
			if err != nil {
				errs[i] = fmt.Errorf("copy s3://%s/%s into part %d of s3://%s/%s: %w", s.bucket, src, i+1, s.bucket, key, err)
				return
			}
			parts[i] = types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.CopyPartResult.ETag}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = s.abortParts(context.WithoutCancel(ctx), key, id)
		return err
	}
	_, err = s.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err != nil {
		_ = s.abortParts(context.WithoutCancel(ctx), key, id)
		return fmt.Errorf("compose s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// escapeKey percent-encodes an object key for x-amz-copy-source, keeping
// its slashes.
func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}

// BucketRegion returns the Region bucket is in (S3 GetBucketLocation,
// which answers for a bucket of any Region: an empty LocationConstraint
// is us-east-1, the legacy "EU" eu-west-1; "GetBucketLocation", Amazon S3
// API reference). It needs s3:GetBucketLocation on the bucket.
func (s *Store) BucketRegion(ctx context.Context, bucket string) (string, error) {
	out, err := s.s3.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String(bucket)})
	if err != nil {
		return "", fmt.Errorf("region of bucket %s: %w", bucket, err)
	}
	switch c := string(out.LocationConstraint); c {
	case "":
		return "us-east-1", nil
	case "EU":
		return "eu-west-1", nil
	default:
		return c, nil
	}
}
