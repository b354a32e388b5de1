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
	return listPrefix(ctx, objects, bucket, prefix, nil, emit)
}

// listPrefix is ListPrefix with chk checking the items.
func listPrefix(ctx context.Context, objects Objects, bucket, prefix string, chk *Check, emit func(SourceItem) error) error {
	var n int64
	return objects.List(ctx, bucket, prefix, func(o ObjectInfo) error {
		if strings.HasSuffix(o.Key, "/") {
			return nil
		}
		n++
		if r := api.CheckKey(o.Key); r != "" {
			// An object key past 1,024 bytes is not an S3 key: no key to run under.
			return chk.fault(&api.InputError{Line: n, Key: api.Truncate(o.Key, 80), Reason: r}, "", lineText([]byte(o.Key)))
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
		return chk.deliver(SourceItem{Key: o.Key, Input: input, Line: n}, emit)
	})
}

// ReadSource reads the items of spec, calling emit for each in source order.
func ReadSource(ctx context.Context, objects Objects, spec api.SourceSpec, keyField string, emit func(SourceItem) error) error {
	return ReadSourceChecked(ctx, objects, spec, keyField, nil, emit)
}

// ReadSourceChecked is ReadSource with chk checking every item as it is
// read (see Check): the schema, and the rows that cannot run handed to
// chk.Bad instead of ending the read. A nil chk is ReadSource.
func ReadSourceChecked(ctx context.Context, objects Objects, spec api.SourceSpec, keyField string, chk *Check, emit func(SourceItem) error) error {
	switch {
	case spec.Items != nil:
		return readJSONArray(bytes.NewReader(spec.Items), keyField, chk, emit)
	case spec.Prefix != "":
		bucket, prefix, _ := api.ParseS3URI(spec.Prefix)
		return listPrefix(ctx, objects, bucket, prefix, chk, emit)
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
		return blameGzip(ReadText(text, spec.Format, key, spec.CSVDelimiter, keyField, chk, emit), text, gzr)
	}
	return &api.InputError{Field: "source", Reason: "set one of items, object, prefix"}
}

// ReadText reads text (SourceText's) in format (jsonl, json or csv; ""
// takes it from name's extension, see api.FormatOf) with CSV delimiter
// delim ("" detects it), keyed by keyField, chk checking the items (nil:
// none), calling emit with each item. It is what a submit does with an
// object's text, and what the command line does with a local file.
func ReadText(text io.Reader, format, name, delim, keyField string, chk *Check, emit func(SourceItem) error) error {
	if format == "" {
		format = api.FormatOf(name)
	}
	switch format {
	case api.FormatJSONL:
		return readJSONL(text, keyField, true, 0, chk, emit)
	case api.FormatJSON:
		return readJSONArray(text, keyField, chk, emit)
	case api.FormatCSV:
		d, err := api.ParseCSVDelimiter(delim)
		if err != nil {
			return &api.InputError{Field: "source.csv_delimiter", Reason: err.Error()}
		}
		return readCSV(text, keyField, d, chk, emit)
	}
	return &api.InputError{Field: "source.format", Reason: fmt.Sprintf("%q is not one of jsonl, json, csv", format)}
}
