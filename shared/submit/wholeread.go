package submit

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// MaxWholeReadBytes is the most source text (decompressed) a source read
// whole may hold: 16 GiB. One invocation reads ≈ 65 MB of JSON Lines per
// CPU-second (docs/design/measured.md, "Measured": 10^6 items of ≈ 1 KB in 16
// CPU-seconds), ≈ 38 MB/s at the submit function's 1,024 MB (0.58 vCPU),
// so ≈ 34 GB in Lambda's 15 minutes; 16 GiB keeps a 2× margin for a slower
// machine, gzip and JSON arrays. A gzip object or a JSON array past it is
// refused at once (see wholeReadFits) rather than timed out three times.
const MaxWholeReadBytes = 16 << 30

// gzipSampleBytes is how much of a gzip object is decompressed to
// estimate its text's size from its compression ratio.
const gzipSampleBytes = 8 << 20

// wholeReadFits refuses (an *InputError on source.object naming the size
// and the way out) an object that is read whole — a gzip stream, which
// cannot be entered in the middle, or a JSON array, where no byte tells a
// part that an element starts there, or any object when sources are not
// read in parts — and whose text is larger than one invocation can read
// (MaxWholeReadBytes). A gzip object's text is estimated from the
// compression ratio of its first 8 MiB. A missing object, or one that
// cannot be sized, is left to the read.
func (s *Submitter) wholeReadFits(ctx context.Context, req api.SubmitRequest) error {
	limit := int64(MaxWholeReadBytes)
	if s.Parts != nil && s.Parts.MaxWholeBytes > 0 {
		limit = s.Parts.MaxWholeBytes
	}
	pbl, ok := s.Blobs.(PartBlobs)
	if !ok || req.Source.Object == "" {
		return nil
	}
	bucket, key, err := api.ParseS3URI(req.Source.Object)
	if err != nil {
		return nil
	}
	info, err := pbl.HeadSource(ctx, bucket, key)
	if err != nil || info.Size <= limit/1032 { // deflate expands at most ≈ 1,032:1
		return nil
	}
	rc, err := pbl.OpenSourceRange(ctx, bucket, key, info.ETag, 0, gzipSampleBytes)
	if err != nil {
		return nil
	}
	defer rc.Close()
	sample := &countingReader{r: rc}
	br := bufio.NewReader(sample)
	head, _ := br.Peek(2)
	text, err := source.SourceText(br)
	if err != nil {
		return nil
	}
	var what, why, way string
	size := info.Size
	format := req.Source.Format
	if format == "" {
		format = api.FormatOf(key)
	}
	switch {
	case source.IsGzip(head):
		n, _ := io.Copy(io.Discard, text) // the sample ends mid-stream
		sampled := sample.n
		if sampled <= 0 || n == 0 {
			return nil
		}
		size = int64(float64(info.Size) * float64(n) / float64(sampled))
		what = fmt.Sprintf("a gzip stream of %s (≈ %s of text at the compression ratio of its first %d MiB)", bytesText(info.Size), bytesText(size), gzipSampleBytes>>20)
		why = "a deflate stream cannot be entered in the middle, so it cannot be read in parts"
		way = "store it uncompressed: a JSON Lines or CSV object over 512 MiB is read in parts, at once"
	case format == api.FormatJSON:
		what = "a JSON array of " + bytesText(size)
		why = "where an element of one JSON value starts depends on everything before it, so it cannot be read in parts"
		way = "convert it to JSON Lines (one element per line), which is read in parts"
	case s.partBytes() == 0:
		what = bytesText(size)
		why = "this submitter reads no source in parts"
		way = "split it into smaller objects"
	case checkedWhole(req):
		what = bytesText(size)
		why = "a batch with a schema or bad_rows is read by one invocation"
		way = "split it into smaller objects, or submit it without schema and bad_rows to read it in parts"
	default:
		return nil // read in parts, or a CSV object whose header begins past part 0 (read whole, see planParts)
	}
	if size <= limit {
		return nil
	}
	return &api.InputError{Field: "source.object", Reason: fmt.Sprintf("%s is %s, more than one invocation reads within Lambda's 15 minutes (%s of text): %s; %s",
		req.Source.Object, what, bytesText(limit), why, way)}
}

// bytesText is n in decimal units (GB, MB, kB) with one decimal.
func bytesText(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f kB", float64(n)/1e3)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
