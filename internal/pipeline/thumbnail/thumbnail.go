// Package thumbnail is the built-in pipeline "thumbnail": it reads one image
// object from S3, scales it down to fit a box while keeping its aspect ratio,
// and stores the result as a PNG under the batch's outputs.
//
// # Input, options, output, cost
//
// Input, one item (what an S3-prefix source produces per object); bucket and
// key are required, size (bytes) and etag are optional, other fields are
// ignored:
//
//	{"bucket": "photos", "key": "images/cat.jpg", "size": 48213, "etag": "\"9b2c…\""}
//
// Options, the batch's pipeline options (empty, null and {} mean the
// defaults; an unknown option is an error):
//
//	{"max_width": 160, "max_height": 160}
//
// Output, one item:
//
//	{"thumbnail": "s3://…/batches/{id}/outputs/images/cat.jpg.png", "width": 160, "height": 120,
//	 "source_width": 1024, "source_height": 768, "source_format": "jpeg"}
//
// Cost: {"images": 1, "source_bytes": n}, n being the object's size in bytes.
//
// The thumbnail is stored with [pipeline.Outputs.Put] at [OutputName] of
// the item key: the key with ".png" appended ("images/cat.jpg" →
// "images/cat.jpg.png"), so that two items never write the same output
// (keys are unique in a batch; "cat.jpg" and "cat.gif" get their own).
//
// Formats decoded: PNG, JPEG, GIF (the first frame, drawn at its place on
// the image's canvas: a frame smaller than the canvas leaves the rest
// transparent), BMP, TIFF and WebP. A JPEG's EXIF orientation is applied
// (read with github.com/rwcarlsen/goexif): a portrait phone photo stored
// sideways comes out upright, and width, height, source_width and
// source_height are those of the upright image. The image is never
// upscaled: a source that already fits the box is re-encoded as PNG at its
// own size.
//
// # Errors
//
// Every error names the item key (input and option errors) or the object key
// (errors about the object). See package pipeline for what each class does.
//
//   - permanent, [ErrInvalidInput]: the input is not a JSON object, or
//     "bucket" or "key" is missing or not a string, or "size" is negative.
//   - permanent, [ErrInvalidOptions]: the options are not a JSON object, an
//     option is unknown, or max_width / max_height is outside 1–4096.
//   - permanent, [ErrNoSuchObject]: the Source reports the object does not
//     exist (an error matching [fs.ErrNotExist]).
//   - permanent, [ErrTooLarge]: the object is over [MaxObjectBytes], or its
//     header claims more than [MaxSourcePixels] pixels.
//   - permanent, [ErrOverBudget]: decoding the image alone would take more
//     than the decode budget (see Memory), e.g. "thumbnail: big.png: image
//     too large for the configured memory: 7000x7000 png decodes to …".
//   - permanent, [ErrNotImage]: the object is not a decodable image in one of
//     the formats above (text, truncated file, empty object…), e.g.
//     "thumbnail: images/broken-text.png: not a decodable image: image: unknown format".
//   - transient: any other error from Source.Open, from reading the object
//     or from Outputs.Put, and context cancellation (also while waiting for
//     decode budget). An error that the
//     Source or Outputs already marked with [pipeline.Permanent] or
//     [pipeline.Quarantine] keeps its class.
//
// # Memory
//
// One Run holds the whole object (at most [MaxObjectBytes]) and the decoded
// image. Decoding is bounded by a budget of bytes shared by every Run of the
// process: [BudgetPercent] of the function's memory (from
// AWS_LAMBDA_FUNCTION_MEMORY_SIZE), [DefaultBudgetBytes] outside Lambda.
// Before decoding, Run computes from the image's header what decoding and
// scaling will take ([DecodeBytes]: width × height × bytes per pixel, 8 for
// 16-bit PNG and TIFF, plus the scaler's buffers), waits until the budget
// has that much room, and gives it back once the thumbnail is encoded. An
// image that alone needs more than the budget fails with [ErrOverBudget]
// instead of exhausting the function's memory: a 7000×7000 16-bit PNG
// (392 MB decoded, 428 MB with the scaler's buffers for a 160-pixel box)
// needs a function of 832 MB or more.
package thumbnail

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"io/fs"
	"path"
	"sync"

	// Decoders registered with package image; image.Decode dispatches on
	// the format's magic bytes.
	_ "image/gif"
	_ "image/jpeg"

	_ "golang.org/x/image/bmp"
	"golang.org/x/image/draw"
	_ "golang.org/x/image/tiff"
	_ "golang.org/x/image/webp"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Name is the name the pipeline is registered under.
const Name = "thumbnail"

// Limits and defaults.
const (
	// MaxObjectBytes is the largest object Run reads: 50 MiB. A larger
	// object is a permanent ErrTooLarge.
	MaxObjectBytes = 50 << 20
	// MaxSourcePixels is the largest image Run decodes, in pixels (width ×
	// height as claimed by the image's header): 50 megapixels. It guards
	// against decompression bombs, small files that decode to huge images.
	MaxSourcePixels = 50_000_000
	// DefaultMaxWidth and DefaultMaxHeight are the box a thumbnail fits in
	// when the options do not say, in pixels.
	DefaultMaxWidth  = 160
	DefaultMaxHeight = 160
	// MaxBoxSide is the largest max_width or max_height option, in pixels.
	MaxBoxSide = 4096
)

// Errors a caller can branch on with errors.Is. Run returns them wrapped in
// a *pipeline.PermanentError with the item or object key in the message.
var (
	// ErrInvalidInput means the item's input is not {"bucket": …, "key": …}.
	ErrInvalidInput = errors.New("invalid input")
	// ErrInvalidOptions means the batch's options are not valid thumbnail options.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrNoSuchObject means the Source reports the object does not exist.
	ErrNoSuchObject = errors.New("no such object")
	// ErrTooLarge means the object is over MaxObjectBytes or the image over
	// MaxSourcePixels.
	ErrTooLarge = errors.New("too large")
	// ErrNotImage means the object is not a decodable image.
	ErrNotImage = errors.New("not a decodable image")
	// ErrOverBudget means the image alone needs more decode memory (see
	// DecodeBytes) than the pipeline's budget (see BudgetFromEnv).
	ErrOverBudget = errors.New("image too large for the configured memory")
)

// Source opens objects for reading. The S3 adapter implements it.
type Source interface {
	// Open returns the object's body; the caller closes it. When the object
	// does not exist the error matches fs.ErrNotExist (errors.Is); any other
	// error is taken as transient unless it is a *pipeline.PermanentError.
	// Open must be safe for concurrent use.
	Open(ctx context.Context, bucket, key string) (io.ReadCloser, error)
}

// Input is one item's input JSON.
type Input struct {
	Bucket    string `json:"bucket"` // the S3 bucket; required
	Key       string `json:"key"`    // the object key; required
	SizeBytes int64  `json:"size"`   // the object's size in bytes, when known (0: unknown); larger than MaxObjectBytes fails before any read
	ETag      string `json:"etag"`   // the object's ETag at listing time, when known; informational
}

// Options is the batch's pipeline options JSON: the box, in pixels, that a
// thumbnail fits in. An option left out (or null) takes its default.
type Options struct {
	MaxWidth  int `json:"max_width"`  // box width in pixels, 1–4096, default 160
	MaxHeight int `json:"max_height"` // box height in pixels, 1–4096, default 160
}

// Output is one item's output JSON.
type Output struct {
	Thumbnail    string `json:"thumbnail"`     // the s3:// URI returned by Outputs.Put
	Width        int    `json:"width"`         // thumbnail width in pixels
	Height       int    `json:"height"`        // thumbnail height in pixels
	SourceWidth  int    `json:"source_width"`  // source image width in pixels
	SourceHeight int    `json:"source_height"` // source image height in pixels
	SourceFormat string `json:"source_format"` // "png", "jpeg", "gif", "bmp", "tiff" or "webp"
}

// Pipeline is the thumbnail pipeline. It is safe for concurrent use and
// idempotent per item: a retried attempt overwrites the same output name
// with the same bytes.
type Pipeline struct {
	src Source
	enc png.Encoder
	mem *budget
}

var _ pipeline.Pipeline = (*Pipeline)(nil)

// New returns the pipeline reading objects from src, with the decode
// budget of BudgetFromEnv. src must not be nil (Run then fails every item
// with a transient error).
func New(src Source) *Pipeline { return NewBudgeted(src, BudgetFromEnv()) }

// NewBudgeted is New with a decode budget of budgetBytes shared by every
// concurrent Run (≤ 0: DefaultBudgetBytes).
func NewBudgeted(src Source, budgetBytes int64) *Pipeline {
	return &Pipeline{
		src: src,
		enc: png.Encoder{CompressionLevel: png.DefaultCompression, BufferPool: &encoderPool{}},
		mem: newBudget(budgetBytes),
	}
}

// Run makes the thumbnail of the object named by req.Input, stores it with
// req.Outputs.Put and returns its Output JSON and cost. The package comment
// lists its errors and their classes.
func (p *Pipeline) Run(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
	opts, err := ParseOptions(req.Options)
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w", req.Key, err))
	}
	in, err := parseInput(req.Input)
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w", req.Key, err))
	}
	if p.src == nil {
		return pipeline.Result{}, errors.New("thumbnail: no Source configured")
	}
	if req.Outputs == nil {
		return pipeline.Result{}, errors.New("thumbnail: no Outputs in the request")
	}
	if in.SizeBytes > MaxObjectBytes {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w: object is %d bytes, over the limit of %d",
			in.Key, ErrTooLarge, in.SizeBytes, MaxObjectBytes))
	}

	data, err := p.read(ctx, in)
	if err != nil {
		return pipeline.Result{}, err
	}

	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return pipeline.Result{}, notImage(in.Key, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return pipeline.Result{}, notImage(in.Key, fmt.Errorf("image is %dx%d", cfg.Width, cfg.Height))
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > MaxSourcePixels {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w: image is %dx%d (%d pixels), over the limit of %d",
			in.Key, ErrTooLarge, cfg.Width, cfg.Height, px, MaxSourcePixels))
	}
	orient := Orientation(1)
	if format == "jpeg" {
		orient = orientation(data)
	}
	// The size shown is the upright one; the scaler makes the thumbnail in
	// the stored orientation, which is then turned.
	ow, oh := cfg.Width, cfg.Height
	if orient.swapsSides() {
		ow, oh = oh, ow
	}
	tw, th := Fit(ow, oh, opts.MaxWidth, opts.MaxHeight)
	sw, sh := tw, th
	if orient.swapsSides() {
		sw, sh = th, tw
	}
	need := DecodeBytes(cfg, format, sw, sh)
	if need > p.mem.bytes {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w: %dx%d %s decodes to %d bytes, over the budget of %d bytes (%d%% of the function's memory)",
			in.Key, ErrOverBudget, cfg.Width, cfg.Height, format, need, p.mem.bytes, BudgetPercent))
	}
	if err := ctx.Err(); err != nil {
		return pipeline.Result{}, fmt.Errorf("thumbnail: %s: %w", in.Key, err)
	}
	if err := p.mem.sem.Acquire(ctx, need); err != nil {
		return pipeline.Result{}, fmt.Errorf("thumbnail: %s: waiting for %d bytes of decode budget: %w", in.Key, need, err)
	}
	buf, err := p.render(data, cfg, format, orient, sw, sh)
	p.mem.sem.Release(need)
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w", in.Key, err))
	}
	if err := ctx.Err(); err != nil {
		return pipeline.Result{}, fmt.Errorf("thumbnail: %s: %w", in.Key, err)
	}
	name := OutputName(req.Key)
	uri, err := req.Outputs.Put(ctx, name, "image/png", buf.Bytes())
	if err != nil {
		return pipeline.Result{}, fmt.Errorf("thumbnail: %s: put %s: %w", in.Key, name, err)
	}

	out, err := json.Marshal(Output{
		Thumbnail:    uri,
		Width:        tw,
		Height:       th,
		SourceWidth:  ow,
		SourceHeight: oh,
		SourceFormat: format,
	})
	if err != nil {
		return pipeline.Result{}, fmt.Errorf("thumbnail: %s: %w", in.Key, err)
	}
	return pipeline.Result{
		Output: out,
		Cost:   pipeline.Cost{"images": 1, "source_bytes": float64(len(data))},
	}, nil
}

// render decodes data (header cfg), draws a GIF's first frame on its
// canvas, scales to sw×sh, turns the result upright by orient and encodes
// it as PNG. Its errors are permanent: the image is not decodable.
func (p *Pipeline) render(data []byte, cfg image.Config, format string, orient Orientation, sw, sh int) (*bytes.Buffer, error) {
	src, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotImage, err)
	}
	if src.Bounds().Empty() {
		return nil, fmt.Errorf("%w: image is empty", ErrNotImage)
	}
	canvas := image.Rect(0, 0, cfg.Width, cfg.Height)
	if format == "gif" && src.Bounds() != canvas {
		// An animated GIF's first frame may cover only part of the logical
		// screen (GIF89a, "Image Descriptor"): draw it at its place on a
		// transparent canvas of the image's size, as browsers do.
		full := image.NewRGBA(canvas)
		draw.Draw(full, src.Bounds().Intersect(canvas), src, src.Bounds().Min, draw.Over)
		src = full
	}
	sb := src.Bounds()
	thumb := src
	if sw != sb.Dx() || sh != sb.Dy() {
		dst := image.NewRGBA(image.Rect(0, 0, sw, sh))
		// CatmullRom, not ApproxBiLinear: when shrinking, x/image/draw
		// widens the kernel by the scale factor, so every source pixel
		// contributes and fine detail does not alias into moiré, whereas
		// ApproxBiLinear samples the 2×2 nearest pixels whatever the
		// factor (1-pixel stripes come out black and white instead of grey,
		// see TestRunDoesNotAlias). The price is CPU: tens of milliseconds
		// for a 1024×768 source against about one (BenchmarkScale), the
		// order of one S3 round trip, for a thumbnail users look at.
		draw.CatmullRom.Scale(dst, dst.Bounds(), src, sb, draw.Src, nil)
		thumb = dst
	}
	thumb = orient.apply(thumb)
	var buf bytes.Buffer
	if err := p.enc.Encode(&buf, thumb); err != nil {
		return nil, fmt.Errorf("encode png: %w", err)
	}
	return &buf, nil
}

// read opens and reads the whole object, at most MaxObjectBytes.
func (p *Pipeline) read(ctx context.Context, in Input) ([]byte, error) {
	rc, err := p.src.Open(ctx, in.Bucket, in.Key)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w", in.Key, ErrNoSuchObject))
		}
		return nil, fmt.Errorf("thumbnail: %s: open: %w", in.Key, err)
	}
	defer rc.Close()

	var buf bytes.Buffer
	if in.SizeBytes > 0 {
		buf.Grow(int(in.SizeBytes) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(rc, MaxObjectBytes+1))
	if err != nil {
		return nil, fmt.Errorf("thumbnail: %s: read: %w", in.Key, err)
	}
	if n > MaxObjectBytes {
		return nil, pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w: object is over the limit of %d bytes",
			in.Key, ErrTooLarge, MaxObjectBytes))
	}
	return buf.Bytes(), nil
}

// decode decodes data, turning a decoder panic on hostile input into an
// error so that one bad object fails its item instead of the process.
func decode(data []byte) (img image.Image, err error) {
	defer func() {
		if r := recover(); r != nil {
			img, err = nil, fmt.Errorf("decoder panic: %v", r)
		}
	}()
	img, _, err = image.Decode(bytes.NewReader(data))
	return img, err
}

func notImage(key string, err error) error {
	return pipeline.Permanent(fmt.Errorf("thumbnail: %s: %w: %w", key, ErrNotImage, err))
}

// Fit returns the size, in pixels, of a w×h image scaled to fit in a
// maxW×maxH box with its aspect ratio kept (rounded to the nearest pixel,
// at least 1). An image that already fits is returned at its own size:
// Fit never upscales. All arguments must be positive.
func Fit(w, h, maxW, maxH int) (int, int) {
	if w <= maxW && h <= maxH {
		return w, h
	}
	W, H, mw, mh := int64(w), int64(h), int64(maxW), int64(maxH)
	if W*mh >= H*mw { // width is the tighter bound
		return maxW, int(max(1, (H*mw+W/2)/W))
	}
	return int(max(1, (W*mh+H/2)/H)), maxH
}

// OutputName returns the output name of the thumbnail of the item key, one
// name per key: the key with ".png" appended ("images/cat.jpg" →
// "images/cat.jpg.png", "cat" → "cat.png", "cat.png" → "cat.png.png"). A
// key that path cleaning would change ("a//b.jpg", "./a", "a/", which
// [pipeline.Outputs.Put] would store as another key's name) is named by
// its digest instead: "_keys/" + the first 16 bytes of its SHA-256 in hex +
// ".png". Appending a suffix is one-to-one, so two clean keys never share
// a name; a clean key could meet a digest name only by being "_keys/" and
// the first 128 bits of another key's SHA-256 (a preimage: not feasible).
func OutputName(key string) string {
	if key == "" || path.Clean("/" + key)[1:] != key {
		sum := sha256.Sum256([]byte(key))
		return "_keys/" + hex.EncodeToString(sum[:16]) + ".png"
	}
	return key + ".png"
}

// ValidateOptions checks a batch's options (ParseOptions) before any item
// runs; it implements pipeline.OptionsValidator.
func (p *Pipeline) ValidateOptions(raw json.RawMessage) error {
	_, err := ParseOptions(raw)
	return err
}

var _ pipeline.OptionsValidator = (*Pipeline)(nil)

// ParseOptions validates the batch's options JSON and returns it with the
// defaults filled in. Empty, null and {} give the defaults. Its error wraps
// ErrInvalidOptions and names the option at fault. Submit can call it to
// refuse a batch whose options every item would fail on.
func ParseOptions(raw json.RawMessage) (Options, error) {
	o := Options{MaxWidth: DefaultMaxWidth, MaxHeight: DefaultMaxHeight}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return o, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("%w: %s", ErrInvalidOptions, jsonReason(err))
	}
	if dec.More() {
		return o, fmt.Errorf("%w: trailing data after the options object", ErrInvalidOptions)
	}
	if o.MaxWidth < 1 || o.MaxWidth > MaxBoxSide {
		return o, fmt.Errorf("%w: max_width must be 1–%d pixels, got %d", ErrInvalidOptions, MaxBoxSide, o.MaxWidth)
	}
	if o.MaxHeight < 1 || o.MaxHeight > MaxBoxSide {
		return o, fmt.Errorf("%w: max_height must be 1–%d pixels, got %d", ErrInvalidOptions, MaxBoxSide, o.MaxHeight)
	}
	return o, nil
}

func parseInput(raw json.RawMessage) (Input, error) {
	var in Input
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return in, fmt.Errorf(`%w: want {"bucket": "…", "key": "…"}, got nothing`, ErrInvalidInput)
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return in, fmt.Errorf("%w: %s", ErrInvalidInput, jsonReason(err))
	}
	switch {
	case in.Bucket == "":
		return in, fmt.Errorf("%w: bucket is required", ErrInvalidInput)
	case in.Key == "":
		return in, fmt.Errorf("%w: key is required", ErrInvalidInput)
	case in.SizeBytes < 0:
		return in, fmt.Errorf("%w: size must be ≥ 0 bytes, got %d", ErrInvalidInput, in.SizeBytes)
	}
	return in, nil
}

// jsonReason words a JSON decoding error so that it names the field.
func jsonReason(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	if te.Field == "" {
		return fmt.Sprintf("want a JSON object, got JSON %s", te.Value)
	}
	want := "an integer"
	if te.Type.Kind().String() == "string" {
		want = "a string"
	}
	return fmt.Sprintf("%s must be %s, got JSON %s", te.Field, want, te.Value)
}

// encoderPool reuses PNG encoder buffers across Runs; it is safe for
// concurrent use.
type encoderPool struct{ p sync.Pool }

func (e *encoderPool) Get() *png.EncoderBuffer {
	b, _ := e.p.Get().(*png.EncoderBuffer)
	return b
}

func (e *encoderPool) Put(b *png.EncoderBuffer) { e.p.Put(b) }
