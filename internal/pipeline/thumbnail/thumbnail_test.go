package thumbnail_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"testing"

	"golang.org/x/image/bmp"
	"golang.org/x/image/draw"
	"golang.org/x/image/tiff"

	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// memSource is an in-memory Source: objects by "bucket/key".
type memSource struct {
	mu      sync.Mutex
	objects map[string][]byte
	readers map[string]func() io.Reader // objects served by a custom reader
	openErr error                       // returned by every Open when set
	opens   int
}

func (s *memSource) Open(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.openErr != nil {
		return nil, s.openErr
	}
	if r, ok := s.readers[bucket+"/"+key]; ok {
		return io.NopCloser(r()), nil
	}
	b, ok := s.objects[bucket+"/"+key]
	if !ok {
		return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, fs.ErrNotExist)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// memOutputs records what Put stores.
type memOutputs struct {
	mu      sync.Mutex
	objects map[string][]byte
	types   map[string]string
	err     error
}

func (o *memOutputs) Put(_ context.Context, name, contentType string, body []byte) (string, error) {
	if o.err != nil {
		return "", o.err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.objects == nil {
		o.objects, o.types = map[string][]byte{}, map[string]string{}
	}
	o.objects[name] = append([]byte(nil), body...)
	o.types[name] = contentType
	return "s3://bulkrun-test/batches/b1/outputs/" + name, nil
}

// gradient returns a w×h image with some structure, so that encoders and
// the scaler do real work.
func gradient(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x ^ y) & 0xff), 0xff})
		}
	}
	return img
}

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeGIF(t testing.TB, img image.Image) []byte {
	t.Helper()
	p := image.NewPaletted(img.Bounds(), palette.Plan9)
	draw.Draw(p, p.Bounds(), img, image.Point{}, draw.Src)
	var b bytes.Buffer
	if err := gif.Encode(&b, p, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeBMP(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := bmp.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeTIFF(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tiff.Encode(&b, img, &tiff.Options{Compression: tiff.Deflate}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// solidWebP builds a lossless WebP (VP8L) of w×h pixels of one colour: five
// one-symbol prefix codes, so every pixel takes zero bits. x/image has no
// WebP encoder.
func solidWebP(w, h int, c color.NRGBA) []byte {
	var bits []byte
	var acc uint64
	var n uint
	put := func(v uint64, width uint) {
		acc |= v << n
		n += width
		for n >= 8 {
			bits = append(bits, byte(acc))
			acc >>= 8
			n -= 8
		}
	}
	put(0x2f, 8)         // VP8L signature
	put(uint64(w-1), 14) // width - 1
	put(uint64(h-1), 14) // height - 1
	put(1, 1)            // alpha is used
	put(0, 3)            // version
	put(0, 1)            // no transform
	put(0, 1)            // no colour cache
	put(0, 1)            // no meta prefix codes
	for _, sym := range []uint8{c.G, c.R, c.B, c.A, 0} {
		put(1, 1) // simple code
		put(0, 1) // one symbol
		put(1, 1) // 8-bit symbol
		put(uint64(sym), 8)
	}
	if n > 0 {
		bits = append(bits, byte(acc))
	}
	chunk := append([]byte("VP8L"), binary.LittleEndian.AppendUint32(nil, uint32(len(bits)))...)
	chunk = append(chunk, bits...)
	if len(bits)%2 == 1 {
		chunk = append(chunk, 0)
	}
	out := append([]byte("RIFF"), binary.LittleEndian.AppendUint32(nil, uint32(4+len(chunk)))...)
	out = append(out, "WEBP"...)
	return append(out, chunk...)
}

// bombPNG returns a valid 8×8 PNG whose IHDR is patched (CRC included) to
// claim w×h pixels.
func bombPNG(t testing.TB, w, h uint32) []byte {
	t.Helper()
	b := encodePNG(t, gradient(8, 8))
	// signature (8) | length (4) | "IHDR" (4) | width (4) | height (4) | 5 more | CRC (4)
	if string(b[12:16]) != "IHDR" {
		t.Fatalf("no IHDR at 12: %q", b[12:16])
	}
	binary.BigEndian.PutUint32(b[16:20], w)
	binary.BigEndian.PutUint32(b[20:24], h)
	binary.BigEndian.PutUint32(b[29:33], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// failingReader returns n bytes of data, then err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func input(key string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"bucket": "photos", "key": key})
	return b
}

func TestRun(t *testing.T) {
	pngBytes := encodePNG(t, gradient(640, 480))
	objects := map[string][]byte{
		"photos/images/land.png":        pngBytes,
		"photos/images/tall.jpg":        encodeJPEG(t, gradient(300, 900)),
		"photos/images/small.gif":       encodeGIF(t, gradient(100, 50)),
		"photos/images/needle":          encodePNG(t, gradient(1, 1000)),
		"photos/images/old.bmp":         encodeBMP(t, gradient(400, 200)),
		"photos/images/scan.tiff":       encodeTIFF(t, gradient(200, 400)),
		"photos/images/solid.webp":      solidWebP(320, 240, color.NRGBA{R: 200, G: 30, B: 90, A: 255}),
		"photos/images/truncated.png":   pngBytes[:len(pngBytes)/2],
		"photos/images/broken-text.png": []byte("this is not an image\n"),
		"photos/images/empty.png":       {},
		"photos/images/bomb.png":        bombPNG(t, 20000, 20000),
	}
	src := &memSource{
		objects: objects,
		readers: map[string]func() io.Reader{
			"photos/images/reset.png": func() io.Reader {
				return &failingReader{data: pngBytes[:100], err: errors.New("read tcp: connection reset by peer")}
			},
			"photos/images/huge.png": func() io.Reader { return io.LimitReader(zeroReader{}, thumbnail.MaxObjectBytes+1) },
		},
	}

	type want struct {
		name        string // output name
		w, h        int
		srcW, srcH  int
		format      string
		sourceBytes float64
	}
	tests := []struct {
		name      string
		key       string // item key
		input     json.RawMessage
		options   string
		src       thumbnail.Source
		outputs   *memOutputs
		ctx       func() context.Context
		want      want
		wantErr   error          // matched with errors.Is when set
		wantClass pipeline.Class // checked when wantErr or wantMsg is set
		wantMsg   string         // substring of the error message
	}{
		{name: "png landscape keeps 4:3", key: "images/land.png", input: input("images/land.png"),
			want: want{name: "images/land.png.png", w: 160, h: 120, srcW: 640, srcH: 480, format: "png", sourceBytes: float64(len(pngBytes))}},
		{name: "jpeg portrait keeps 1:3", key: "images/tall.jpg", input: input("images/tall.jpg"), options: "{}",
			want: want{name: "images/tall.jpg.png", w: 53, h: 160, srcW: 300, srcH: 900, format: "jpeg"}},
		{name: "gif smaller than box is not upscaled", key: "images/small.gif", input: input("images/small.gif"), options: "null",
			want: want{name: "images/small.gif.png", w: 100, h: 50, srcW: 100, srcH: 50, format: "gif"}},
		{name: "key without extension; width rounds up to 1", key: "images/needle", input: input("images/needle"),
			want: want{name: "images/needle.png", w: 1, h: 160, srcW: 1, srcH: 1000, format: "png"}},
		{name: "bmp", key: "images/old.bmp", input: input("images/old.bmp"),
			want: want{name: "images/old.bmp.png", w: 160, h: 80, srcW: 400, srcH: 200, format: "bmp"}},
		{name: "tiff", key: "images/scan.tiff", input: input("images/scan.tiff"),
			want: want{name: "images/scan.tiff.png", w: 80, h: 160, srcW: 200, srcH: 400, format: "tiff"}},
		{name: "webp", key: "images/solid.webp", input: input("images/solid.webp"),
			want: want{name: "images/solid.webp.png", w: 160, h: 120, srcW: 320, srcH: 240, format: "webp"}},
		{name: "custom box", key: "images/land.png", input: input("images/land.png"), options: `{"max_width": 64, "max_height": 64}`,
			want: want{name: "images/land.png.png", w: 64, h: 48, srcW: 640, srcH: 480, format: "png"}},
		{name: "one-sided option keeps the other default", key: "images/land.png", input: input("images/land.png"), options: `{"max_height": 30}`,
			want: want{name: "images/land.png.png", w: 40, h: 30, srcW: 640, srcH: 480, format: "png"}},
		{name: "item key differs from object key", key: "item-0000000001", input: input("images/land.png"),
			want: want{name: "item-0000000001.png", w: 160, h: 120, srcW: 640, srcH: 480, format: "png"}},
		{name: "extra input fields are ignored", key: "images/land.png",
			input: json.RawMessage(`{"bucket":"photos","key":"images/land.png","size":1,"etag":"\"abc\"","last_modified":"2026-01-01T00:00:00Z"}`),
			want:  want{name: "images/land.png.png", w: 160, h: 120, srcW: 640, srcH: 480, format: "png"}},

		// Objects that are not images: permanent, naming the object key.
		{name: "text named .png", key: "images/broken-text.png", input: input("images/broken-text.png"),
			wantErr: thumbnail.ErrNotImage, wantClass: pipeline.ClassPermanent,
			wantMsg: "thumbnail: images/broken-text.png: not a decodable image: image: unknown format"},
		{name: "truncated png", key: "images/truncated.png", input: input("images/truncated.png"),
			wantErr: thumbnail.ErrNotImage, wantClass: pipeline.ClassPermanent,
			wantMsg: "thumbnail: images/truncated.png: not a decodable image: png: invalid format: not enough pixel data"},
		{name: "empty object", key: "images/empty.png", input: input("images/empty.png"),
			wantErr: thumbnail.ErrNotImage, wantClass: pipeline.ClassPermanent,
			wantMsg: "thumbnail: images/empty.png: not a decodable image: image: unknown format"},
		{name: "decompression bomb header", key: "images/bomb.png", input: input("images/bomb.png"),
			wantErr: thumbnail.ErrTooLarge, wantClass: pipeline.ClassPermanent,
			wantMsg: "thumbnail: images/bomb.png: too large: image is 20000x20000 (400000000 pixels), over the limit of 50000000"},
		{name: "object over 50 MiB", key: "images/huge.png", input: input("images/huge.png"),
			wantErr: thumbnail.ErrTooLarge, wantClass: pipeline.ClassPermanent,
			wantMsg: "thumbnail: images/huge.png: too large: object is over the limit of 52428800 bytes"},
		{name: "size hint over 50 MiB refused before reading", key: "images/land.png",
			input:   json.RawMessage(`{"bucket":"photos","key":"images/land.png","size":52428801}`),
			wantErr: thumbnail.ErrTooLarge, wantClass: pipeline.ClassPermanent,
			wantMsg: "object is 52428801 bytes, over the limit of 52428800"},
		{name: "missing object", key: "images/gone.png", input: input("images/gone.png"),
			wantErr: thumbnail.ErrNoSuchObject, wantClass: pipeline.ClassPermanent,
			wantMsg: "thumbnail: images/gone.png: no such object"},

		// Transient: the Source, the read, Outputs, the context.
		{name: "source error is transient", key: "images/land.png", input: input("images/land.png"),
			src:       &memSource{openErr: errors.New("s3: RequestTimeout")},
			wantClass: pipeline.ClassTransient, wantMsg: "thumbnail: images/land.png: open: s3: RequestTimeout"},
		{name: "source error marked permanent stays permanent", key: "images/land.png", input: input("images/land.png"),
			src:       &memSource{openErr: pipeline.Permanent(errors.New("s3: AccessDenied"))},
			wantClass: pipeline.ClassPermanent, wantMsg: "open: s3: AccessDenied"},
		{name: "read error mid-body is transient", key: "images/reset.png", input: input("images/reset.png"),
			wantClass: pipeline.ClassTransient, wantMsg: "thumbnail: images/reset.png: read: read tcp: connection reset by peer"},
		{name: "outputs error is transient", key: "images/land.png", input: input("images/land.png"),
			outputs:   &memOutputs{err: errors.New("s3: SlowDown")},
			wantClass: pipeline.ClassTransient, wantMsg: "thumbnail: images/land.png: put images/land.png.png: s3: SlowDown"},
		{name: "cancelled context is transient", key: "images/land.png", input: input("images/land.png"),
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			wantErr: context.Canceled, wantClass: pipeline.ClassTransient},

		// Bad input: permanent, naming the field.
		{name: "input not json", key: "k1", input: json.RawMessage(`{"bucket":`),
			wantErr: thumbnail.ErrInvalidInput, wantClass: pipeline.ClassPermanent, wantMsg: "thumbnail: k1: invalid input: unexpected end of JSON input"},
		{name: "input null", key: "k1", input: json.RawMessage(`null`),
			wantErr: thumbnail.ErrInvalidInput, wantClass: pipeline.ClassPermanent, wantMsg: "got nothing"},
		{name: "input array", key: "k1", input: json.RawMessage(`["photos","a.png"]`),
			wantErr: thumbnail.ErrInvalidInput, wantClass: pipeline.ClassPermanent, wantMsg: "want a JSON object, got JSON array"},
		{name: "missing bucket", key: "k1", input: json.RawMessage(`{"key":"a.png"}`),
			wantErr: thumbnail.ErrInvalidInput, wantClass: pipeline.ClassPermanent, wantMsg: "thumbnail: k1: invalid input: bucket is required"},
		{name: "missing key", key: "k1", input: json.RawMessage(`{"bucket":"photos"}`),
			wantErr: thumbnail.ErrInvalidInput, wantClass: pipeline.ClassPermanent, wantMsg: "invalid input: key is required"},
		{name: "bucket not a string", key: "k1", input: json.RawMessage(`{"bucket":7,"key":"a.png"}`),
			wantErr: thumbnail.ErrInvalidInput, wantClass: pipeline.ClassPermanent, wantMsg: "bucket must be a string, got JSON number"},
		{name: "negative size", key: "k1", input: json.RawMessage(`{"bucket":"photos","key":"a.png","size":-1}`),
			wantErr: thumbnail.ErrInvalidInput, wantClass: pipeline.ClassPermanent, wantMsg: "size must be ≥ 0 bytes, got -1"},

		// Bad options: permanent, naming the option.
		{name: "max_width 0", key: "k1", input: input("images/land.png"), options: `{"max_width": 0}`,
			wantErr: thumbnail.ErrInvalidOptions, wantClass: pipeline.ClassPermanent, wantMsg: "max_width must be 1–4096 pixels, got 0"},
		{name: "max_height 4097", key: "k1", input: input("images/land.png"), options: `{"max_height": 4097}`,
			wantErr: thumbnail.ErrInvalidOptions, wantClass: pipeline.ClassPermanent, wantMsg: "max_height must be 1–4096 pixels, got 4097"},
		{name: "max_width not an integer", key: "k1", input: input("images/land.png"), options: `{"max_width": 12.5}`,
			wantErr: thumbnail.ErrInvalidOptions, wantClass: pipeline.ClassPermanent, wantMsg: "max_width must be an integer, got JSON number 12.5"},
		{name: "max_width a string", key: "k1", input: input("images/land.png"), options: `{"max_width": "160"}`,
			wantErr: thumbnail.ErrInvalidOptions, wantClass: pipeline.ClassPermanent, wantMsg: "max_width must be an integer, got JSON string"},
		{name: "unknown option", key: "k1", input: input("images/land.png"), options: `{"max_widht": 100}`,
			wantErr: thumbnail.ErrInvalidOptions, wantClass: pipeline.ClassPermanent, wantMsg: `unknown field "max_widht"`},
		{name: "options not an object", key: "k1", input: input("images/land.png"), options: `[160, 160]`,
			wantErr: thumbnail.ErrInvalidOptions, wantClass: pipeline.ClassPermanent, wantMsg: "want a JSON object, got JSON array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.src
			if s == nil {
				s = src
			}
			outs := tt.outputs
			if outs == nil {
				outs = &memOutputs{}
			}
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			res, err := thumbnail.New(s).Run(ctx, pipeline.Request{
				BatchID: "b1", Key: tt.key, RunID: "r1", Attempt: 1,
				Input: tt.input, Options: json.RawMessage(tt.options), Outputs: outs,
			})
			if tt.wantErr != nil || tt.wantMsg != "" || tt.wantClass != "" {
				if err == nil {
					t.Fatalf("Run = %s, want an error", res.Output)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %q is not %v", err, tt.wantErr)
				}
				if got := pipeline.Classify(err); got != tt.wantClass {
					t.Errorf("Classify(%q) = %s, want %s", err, got, tt.wantClass)
				}
				var pe *pipeline.PermanentError
				if isPerm := errors.As(err, &pe); isPerm != (tt.wantClass == pipeline.ClassPermanent) {
					t.Errorf("errors.As(*PermanentError) = %v, want %v", isPerm, !isPerm)
				}
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q does not contain %q", err, tt.wantMsg)
				}
				if len(outs.objects) != 0 {
					t.Errorf("stored %d outputs on error", len(outs.objects))
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			var out thumbnail.Output
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatalf("output %s: %v", res.Output, err)
			}
			w := tt.want
			wantOut := thumbnail.Output{
				Thumbnail: "s3://bulkrun-test/batches/b1/outputs/" + w.name,
				Width:     w.w, Height: w.h, SourceWidth: w.srcW, SourceHeight: w.srcH, SourceFormat: w.format,
			}
			if out != wantOut {
				t.Errorf("output = %+v, want %+v", out, wantOut)
			}
			if res.Cost["images"] != 1 || res.Cost["source_bytes"] <= 0 || (w.sourceBytes != 0 && res.Cost["source_bytes"] != w.sourceBytes) {
				t.Errorf("cost = %v, want images 1, source_bytes %v", res.Cost, w.sourceBytes)
			}
			body, ok := outs.objects[w.name]
			if !ok || len(outs.objects) != 1 {
				t.Fatalf("outputs = %v names, want only %q", len(outs.objects), w.name)
			}
			if ct := outs.types[w.name]; ct != "image/png" {
				t.Errorf("content type = %q", ct)
			}
			img, format, err := image.Decode(bytes.NewReader(body))
			if err != nil || format != "png" {
				t.Fatalf("stored thumbnail: format %q, %v", format, err)
			}
			if b := img.Bounds(); b.Dx() != w.w || b.Dy() != w.h {
				t.Errorf("stored thumbnail is %dx%d, want %dx%d", b.Dx(), b.Dy(), w.w, w.h)
			}
		})
	}
}

func TestRunWebPColour(t *testing.T) {
	c := color.NRGBA{R: 200, G: 30, B: 90, A: 255}
	src := &memSource{objects: map[string][]byte{"photos/w.webp": solidWebP(320, 240, c)}}
	outs := &memOutputs{}
	if _, err := thumbnail.New(src).Run(context.Background(), pipeline.Request{Key: "w.webp", Input: input("w.webp"), Outputs: outs}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(outs.objects[thumbnail.OutputName("w.webp")]))
	if err != nil {
		t.Fatal(err)
	}
	if got := color.NRGBAModel.Convert(img.At(80, 60)).(color.NRGBA); got != c {
		t.Errorf("centre pixel = %v, want %v", got, c)
	}
}

func TestSizeHintSkipsOpen(t *testing.T) {
	src := &memSource{}
	_, err := thumbnail.New(src).Run(context.Background(), pipeline.Request{
		Key: "k", Input: json.RawMessage(`{"bucket":"b","key":"k","size":60000000}`), Outputs: &memOutputs{},
	})
	if !errors.Is(err, thumbnail.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if src.opens != 0 {
		t.Errorf("Source opened %d times, want 0", src.opens)
	}
}

func TestFit(t *testing.T) {
	tests := []struct {
		name             string
		w, h, maxW, maxH int
		wantW, wantH     int
	}{
		{"fits already", 100, 50, 160, 160, 100, 50},
		{"exact box", 160, 160, 160, 160, 160, 160},
		{"landscape", 640, 480, 160, 160, 160, 120},
		{"portrait", 480, 640, 160, 160, 120, 160},
		{"rounds to nearest", 300, 900, 160, 160, 53, 160},
		{"rounds up", 1000, 333, 160, 160, 160, 53},
		{"never below 1", 1, 100000, 160, 160, 1, 160},
		{"wide box, tall image", 1000, 2000, 400, 100, 50, 100},
		{"huge", 50000, 1000, 4096, 4096, 4096, 82},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, h := thumbnail.Fit(tt.w, tt.h, tt.maxW, tt.maxH)
			if w != tt.wantW || h != tt.wantH {
				t.Errorf("Fit(%d, %d, %d, %d) = %d, %d; want %d, %d", tt.w, tt.h, tt.maxW, tt.maxH, w, h, tt.wantW, tt.wantH)
			}
		})
	}
}

func TestOutputName(t *testing.T) {
	tests := []struct{ key, want string }{
		{"images/cat.jpg", "images/cat.jpg.png"},
		{"images/cat.PNG", "images/cat.PNG.png"},
		{"images/cat.png", "images/cat.png.png"},
		{"cat", "cat.png"},
		{"a.b/cat", "a.b/cat.png"},
		{".hidden", ".hidden.png"},
		{"dir/.hidden", "dir/.hidden.png"},
		{"archive.tar.gz", "archive.tar.gz.png"},
		{"photo.", "photo..png"},
		{"café/tête à tête.jpeg", "café/tête à tête.jpeg.png"},
		{"a//b.jpg", "_keys/" + digest16("a//b.jpg") + ".png"},
		{"./a.jpg", "_keys/" + digest16("./a.jpg") + ".png"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := thumbnail.OutputName(tt.key); got != tt.want {
				t.Errorf("OutputName(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    thumbnail.Options
		wantErr error
	}{
		{"empty", "", thumbnail.Options{MaxWidth: 160, MaxHeight: 160}, nil},
		{"null", "null", thumbnail.Options{MaxWidth: 160, MaxHeight: 160}, nil},
		{"braces", " {} ", thumbnail.Options{MaxWidth: 160, MaxHeight: 160}, nil},
		{"both", `{"max_width":1,"max_height":4096}`, thumbnail.Options{MaxWidth: 1, MaxHeight: 4096}, nil},
		{"null field keeps default", `{"max_width":null}`, thumbnail.Options{MaxWidth: 160, MaxHeight: 160}, nil},
		{"negative", `{"max_width":-5}`, thumbnail.Options{}, thumbnail.ErrInvalidOptions},
		{"trailing data", `{} {}`, thumbnail.Options{}, thumbnail.ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := thumbnail.ParseOptions(json.RawMessage(tt.raw))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestConcurrentRuns(t *testing.T) {
	src := &memSource{objects: map[string][]byte{"photos/a.png": encodePNG(t, gradient(320, 200))}}
	p := thumbnail.New(src)
	outs := &memOutputs{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			_, err := p.Run(context.Background(), pipeline.Request{Key: fmt.Sprintf("k%02d.png", i), Input: input("a.png"), Outputs: outs})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if len(outs.objects) != 16 {
		t.Errorf("stored %d thumbnails, want 16", len(outs.objects))
	}
	first := outs.objects["k00.png.png"]
	for name, b := range outs.objects {
		if !bytes.Equal(b, first) {
			t.Errorf("%s differs from k00.png.png: encoder state leaked between runs", name)
		}
	}
}

// BenchmarkRun is one item: read, decode, scale and encode a 1024×768 PNG.
func BenchmarkRun(b *testing.B) {
	src := &memSource{objects: map[string][]byte{"photos/big.png": encodePNG(b, gradient(1024, 768))}}
	p := thumbnail.New(src)
	req := pipeline.Request{Key: "big.png", Input: input("big.png"), Options: json.RawMessage("{}"), Outputs: &memOutputs{}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Run(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScale compares the kernel Run uses (CatmullRom) with BiLinear
// (the exact, widening triangle kernel) and ApproxBiLinear (2×2 samples,
// aliases when shrinking) on the scaling step alone: 1024×768 to 160×120.
func BenchmarkScale(b *testing.B) {
	src, err := png.Decode(bytes.NewReader(encodePNG(b, gradient(1024, 768))))
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []struct {
		name string
		s    draw.Scaler
	}{{"CatmullRom", draw.CatmullRom}, {"BiLinear", draw.BiLinear}, {"ApproxBiLinear", draw.ApproxBiLinear}} {
		b.Run(k.name, func(b *testing.B) {
			dst := image.NewRGBA(image.Rect(0, 0, 160, 120))
			b.ReportAllocs()
			for b.Loop() {
				k.s.Scale(dst, dst.Bounds(), src, src.Bounds(), draw.Src, nil)
			}
		})
	}
}

// TestRunDoesNotAlias scales 1-pixel black and white stripes: a kernel that
// averages the whole footprint gives even grey, one that samples a few
// pixels (ApproxBiLinear, nearest) gives bands of black and white.
func TestRunDoesNotAlias(t *testing.T) {
	img := image.NewGray(image.Rect(0, 0, 1021, 767))
	for y := range 767 {
		for x := range 1021 {
			if x%2 == 0 {
				img.SetGray(x, y, color.Gray{Y: 255})
			}
		}
	}
	src := &memSource{objects: map[string][]byte{"photos/stripes.png": encodePNG(t, img)}}
	outs := &memOutputs{}
	if _, err := thumbnail.New(src).Run(context.Background(), pipeline.Request{Key: "stripes.png", Input: input("stripes.png"), Outputs: outs}); err != nil {
		t.Fatal(err)
	}
	thumb, err := png.Decode(bytes.NewReader(outs.objects[thumbnail.OutputName("stripes.png")]))
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := uint8(255), uint8(0)
	b := thumb.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X + 2; x < b.Max.X-2; x++ { // edges see only part of the kernel
			g := color.GrayModel.Convert(thumb.At(x, y)).(color.Gray).Y
			lo, hi = min(lo, g), max(hi, g)
		}
	}
	t.Logf("grey %d–%d", lo, hi)
	if lo < 100 || hi > 156 {
		t.Errorf("thumbnail of stripes spans grey %d–%d, want within 100–156 (about 128): the scaler aliases", lo, hi)
	}
}

// TestOutputNamesAreDistinct guards the product line "two items never
// write the same thumbnail": keys that differ only by extension, or that
// path cleaning would merge, get names that stay distinct after
// Outputs.Put's cleaning.
func TestOutputNamesAreDistinct(t *testing.T) {
	keys := []string{"cat.jpg", "cat.gif", "cat.png", "cat", "a/b.jpg", "a//b.jpg", "./a/b.jpg", "a/b.jpg/", "/a/b.jpg", ".", "..", "_keys/x"}
	seen := map[string]string{}
	for _, k := range keys {
		name := thumbnail.OutputName(k)
		clean := path.Clean("/" + name)[1:]
		if clean != name {
			t.Errorf("OutputName(%q) = %q, which Outputs.Put would store as %q", k, name, clean)
		}
		if other, ok := seen[clean]; ok {
			t.Errorf("OutputName(%q) = OutputName(%q) = %q", k, other, clean)
		}
		seen[clean] = k
	}
	if got := thumbnail.OutputName("images/cat.jpg"); got != "images/cat.jpg.png" {
		t.Errorf("OutputName(images/cat.jpg) = %q, want images/cat.jpg.png", got)
	}
}

// digest16 is the hex of the first 16 bytes of key's SHA-256.
func digest16(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}
