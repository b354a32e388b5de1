package source

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Objects is what reading a source needs of S3 (ledger.Blobs has both
// methods, internal/blob implements them): an object read only if its ETag
// matches (S3 If-Match; "" reads whatever is there; another object under
// the key is api.ErrConflict, a missing one api.ErrNotFound), and a listing
// of every object under a prefix in key order, across every page.
type Objects interface {
	OpenMatch(ctx context.Context, bucket, key, etag string) (io.ReadCloser, error)
	List(ctx context.Context, bucket, prefix string, fn func(ObjectInfo) error) error
}

// ObjectInfo describes one object of S3 as a listing or a HEAD shows it.
type ObjectInfo struct {
	Bucket string
	Key    string
	Size   int64
	ETag   string
	// ContentEncoding is the object's Content-Encoding ("gzip", or "");
	// set by a HEAD, not by listings.
	ContentEncoding string
}

// ListPrefix emits one item per object under bucket/prefix (every page):
// key = the object key, input = {"bucket","key","size","etag"}. Keys ending
// in "/" (folder markers) are skipped.
func ListPrefix(ctx context.Context, objects Objects, bucket, prefix string, emit func(SourceItem) error) error {
	var n int64
	return objects.List(ctx, bucket, prefix, func(o ObjectInfo) error {
		if strings.HasSuffix(o.Key, "/") {
			return nil
		}
		n++
		if r := api.CheckKey(o.Key); r != "" {
			return &api.InputError{Line: n, Key: api.Truncate(o.Key, 80), Reason: r}
		}
		input, err := json.Marshal(struct {
			Bucket string `json:"bucket"`
			Key    string `json:"key"`
			Size   int64  `json:"size"`
			ETag   string `json:"etag,omitempty"`
		}{o.Bucket, o.Key, o.Size, strings.Trim(o.ETag, `"`)})
		if err != nil {
			return err
		}
		return emit(SourceItem{Key: o.Key, Input: input, Line: n})
	})
}

// ReadSource reads the items of spec, calling emit for each in source order.
func ReadSource(ctx context.Context, objects Objects, spec api.SourceSpec, keyField string, emit func(SourceItem) error) error {
	switch {
	case spec.Items != nil:
		return ReadJSONArray(bytes.NewReader(spec.Items), keyField, emit)
	case spec.Prefix != "":
		bucket, prefix, _ := api.ParseS3URI(spec.Prefix)
		return ListPrefix(ctx, objects, bucket, prefix, emit)
	case spec.Object != "":
		bucket, key, _ := api.ParseS3URI(spec.Object)
		rc, err := objects.OpenMatch(ctx, bucket, key, spec.ETag)
		if err != nil {
			switch {
			case errors.Is(err, api.ErrNotFound) && spec.ETag != "":
				return &api.InputError{Field: "source.object", Reason: fmt.Sprintf("%s (ETag %s) does not exist any more", spec.Object, spec.ETag)}
			case errors.Is(err, api.ErrNotFound):
				return &api.InputError{Field: "source.object", Reason: fmt.Sprintf("%s does not exist", spec.Object)}
			case errors.Is(err, api.ErrConflict):
				return &api.InputError{Field: "source.object", Reason: fmt.Sprintf("%s changed: its ETag is no longer %s", spec.Object, spec.ETag)}
			}
			return fmt.Errorf("open %s: %w", spec.Object, err)
		}
		defer rc.Close()
		text, gzr, err := decodeSource(rc)
		if err != nil {
			return err
		}
		return blameGzip(readObject(text, spec, key, keyField, emit), text, gzr)
	}
	return &api.InputError{Field: "source", Reason: "set one of items, object, prefix"}
}

// readObject reads the text of an object source in its format.
func readObject(text io.Reader, spec api.SourceSpec, key, keyField string, emit func(SourceItem) error) error {
	format := spec.Format
	if format == "" {
		format = api.FormatOf(key)
	}
	switch format {
	case api.FormatJSONL:
		return ReadJSONL(text, keyField, emit)
	case api.FormatJSON:
		return ReadJSONArray(text, keyField, emit)
	case api.FormatCSV:
		delim, err := api.ParseCSVDelimiter(spec.CSVDelimiter)
		if err != nil {
			return &api.InputError{Field: "source.csv_delimiter", Reason: err.Error()}
		}
		return ReadCSVDelimited(text, keyField, delim, emit)
	}
	return &api.InputError{Field: "source.format", Reason: fmt.Sprintf("%q is not one of jsonl, json, csv", format)}
}
