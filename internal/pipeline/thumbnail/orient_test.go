package thumbnail_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"testing"

	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// withOrientation returns jpg with an EXIF APP1 segment holding only the
// orientation tag (0x0112, SHORT) inserted after SOI, as cameras write it.
func withOrientation(t *testing.T, jpg []byte, o uint16) []byte {
	t.Helper()
	if jpg[0] != 0xFF || jpg[1] != 0xD8 {
		t.Fatal("not a JPEG")
	}
	tiff := []byte("MM\x00\x2a\x00\x00\x00\x08") // big-endian TIFF header, IFD0 at 8
	tiff = append(tiff, 0, 1)                    // one entry
	entry := make([]byte, 12)
	binary.BigEndian.PutUint16(entry[0:], 0x0112) // Orientation
	binary.BigEndian.PutUint16(entry[2:], 3)      // SHORT
	binary.BigEndian.PutUint32(entry[4:], 1)      // count
	binary.BigEndian.PutUint16(entry[8:], o)      // value, left-justified
	tiff = append(tiff, entry...)
	tiff = append(tiff, 0, 0, 0, 0) // no next IFD
	payload := append([]byte("Exif\x00\x00"), tiff...)
	seg := []byte{0xFF, 0xE1, 0, 0}
	binary.BigEndian.PutUint16(seg[2:], uint16(len(payload)+2))
	seg = append(seg, payload...)
	out := append([]byte{0xFF, 0xD8}, seg...)
	return append(out, jpg[2:]...)
}

// quadrants is a w×h image: top-left red, top-right green, bottom-left
// blue, bottom-right white.
func quadrants(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{255, 0, 0, 255}
			switch {
			case x >= w/2 && y < h/2:
				c = color.RGBA{0, 255, 0, 255}
			case x < w/2 && y >= h/2:
				c = color.RGBA{0, 0, 255, 255}
			case x >= w/2 && y >= h/2:
				c = color.RGBA{255, 255, 255, 255}
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

func near(c color.Color, want color.RGBA) bool {
	r, g, b, a := c.RGBA()
	d := func(x uint32, y uint8) bool { v := int(x>>8) - int(y); return v > -60 && v < 60 }
	return d(r, want.R) && d(g, want.G) && d(b, want.B) && d(a, want.A)
}

func runOne(t *testing.T, key string, data []byte) (thumbnail.Output, image.Image) {
	t.Helper()
	src := &memSource{objects: map[string][]byte{"photos/" + key: data}}
	out := &memOutputs{}
	res, err := thumbnail.New(src).Run(context.Background(), pipeline.Request{Key: key, Input: input(key), Outputs: out})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var o thumbnail.Output
	if err := json.Unmarshal(res.Output, &o); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(out.objects[thumbnail.OutputName(key)]))
	if err != nil {
		t.Fatal(err)
	}
	return o, img
}

// TestExifOrientation guards the product line "a JPEG's EXIF orientation
// is applied: a portrait phone photo comes out upright". The source is a
// 60×30 landscape of four coloured quadrants; each orientation must put
// the right quadrants at the top-left and top-right of the thumbnail.
func TestExifOrientation(t *testing.T) {
	red, green, blue, white := color.RGBA{255, 0, 0, 255}, color.RGBA{0, 255, 0, 255}, color.RGBA{0, 0, 255, 255}, color.RGBA{255, 255, 255, 255}
	jpg := encodeJPEG(t, quadrants(60, 30))
	tests := []struct {
		orientation       uint16
		w, h              int
		topLeft, topRight color.RGBA
	}{
		{1, 60, 30, red, green},
		{2, 60, 30, green, red},
		{3, 60, 30, white, blue},
		{4, 60, 30, blue, white},
		{5, 30, 60, red, blue},
		{6, 30, 60, blue, red}, // a portrait phone photo: turn 90° clockwise
		{7, 30, 60, white, green},
		{8, 30, 60, green, white},
	}
	for _, tt := range tests {
		t.Run(string(rune('0'+tt.orientation)), func(t *testing.T) {
			o, img := runOne(t, "photo.jpg", withOrientation(t, jpg, tt.orientation))
			b := img.Bounds()
			if b.Dx() != tt.w || b.Dy() != tt.h || o.Width != tt.w || o.Height != tt.h || o.SourceWidth != tt.w || o.SourceHeight != tt.h {
				t.Fatalf("thumbnail %v, output %+v, want %dx%d", b, o, tt.w, tt.h)
			}
			tl, tr := img.At(b.Dx()/4, b.Dy()/4), img.At(3*b.Dx()/4, b.Dy()/4)
			if !near(tl, tt.topLeft) || !near(tr, tt.topRight) {
				t.Fatalf("top-left %v, top-right %v, want %v, %v", tl, tr, tt.topLeft, tt.topRight)
			}
		})
	}
	// A portrait photo larger than the box keeps its upright aspect.
	o, img := runOne(t, "big.jpg", withOrientation(t, encodeJPEG(t, quadrants(400, 200)), 6))
	if b := img.Bounds(); b.Dx() != 80 || b.Dy() != 160 || o.SourceWidth != 200 || o.SourceHeight != 400 {
		t.Fatalf("scaled portrait: %v %+v, want 80x160 of 200x400", b, o)
	}
}

// TestGIFFirstFrameOnCanvas guards the product line "an animated GIF's
// thumbnail is of the image, not of its first frame": a 40×40 GIF whose
// first frame is a 10×10 red square at (20,20) gives a 40×40 thumbnail,
// red there and transparent elsewhere.
func TestGIFFirstFrameOnCanvas(t *testing.T) {
	pal := color.Palette{color.RGBA{255, 0, 0, 255}, color.RGBA{0, 0, 255, 255}}
	f1 := image.NewPaletted(image.Rect(20, 20, 30, 30), pal) // all index 0: red
	f2 := image.NewPaletted(image.Rect(0, 0, 40, 40), pal)
	for i := range f2.Pix {
		f2.Pix[i] = 1
	}
	var buf bytes.Buffer
	err := gif.EncodeAll(&buf, &gif.GIF{Image: []*image.Paletted{f1, f2}, Delay: []int{10, 10},
		Config: image.Config{Width: 40, Height: 40, ColorModel: pal}})
	if err != nil {
		t.Fatal(err)
	}
	o, img := runOne(t, "anim.gif", buf.Bytes())
	if b := img.Bounds(); b.Dx() != 40 || b.Dy() != 40 || o.SourceWidth != 40 || o.SourceHeight != 40 {
		t.Fatalf("thumbnail %v, output %+v, want the 40x40 canvas", b, o)
	}
	if c := img.At(25, 25); !near(c, color.RGBA{255, 0, 0, 255}) {
		t.Fatalf("frame at (25,25): %v, want red", c)
	}
	if _, _, _, a := img.At(5, 5).RGBA(); a != 0 {
		t.Fatalf("outside the first frame (5,5): alpha %d, want transparent", a)
	}
}
