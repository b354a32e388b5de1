package contactsheet_test

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/internal/contactsheet"
)

// swatch is a w×h image of one colour, with a transparent left quarter so
// that drawing over the white background is exercised.
func swatch(w, h int, c color.NRGBA) image.Image {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			if x >= w/4 {
				img.SetNRGBA(x, y, c)
			}
		}
	}
	return img
}

func tiles(n int) []contactsheet.Tile {
	sizes := [][2]int{{160, 120}, {53, 160}, {100, 50}, {1, 160}, {160, 160}}
	out := make([]contactsheet.Tile, n)
	for i := range out {
		s := sizes[i%len(sizes)]
		out[i] = contactsheet.Tile{
			Label: fmt.Sprintf("images/photo-%04d.png", i),
			Image: swatch(s[0], s[1], color.NRGBA{R: uint8(40 * i), G: 90, B: uint8(255 - 8*i), A: 255}),
		}
	}
	return out
}

func isWhite(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r == 0xffff && g == 0xffff && b == 0xffff
}

// countNonWhite counts the non-white pixels of img in r.
func countNonWhite(img image.Image, r image.Rectangle) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if !isWhite(img.At(x, y)) {
				n++
			}
		}
	}
	return n
}

func TestRender(t *testing.T) {
	const pad, label, title = contactsheet.Pad, contactsheet.LabelHeight, contactsheet.TitleHeight
	tests := []struct {
		name         string
		tiles        []contactsheet.Tile
		opts         contactsheet.Options
		wantW, wantH int
		wantCols     int
	}{
		// 12 columns × 3 rows of 96 px cells: 8 + 12×104 by 8 + 20 + 3×120.
		{name: "30 tiles, defaults", tiles: tiles(30), opts: contactsheet.Options{Title: "batch b1 thumbnails"},
			wantW: 1256, wantH: 388, wantCols: 12},
		{name: "30 tiles, 5 columns of 64", tiles: tiles(30), opts: contactsheet.Options{Columns: 5, Cell: 64},
			wantW: pad + 5*(64+pad), wantH: pad + title + 6*(64+label+pad), wantCols: 5},
		{name: "fewer tiles than columns", tiles: tiles(3),
			wantW: pad + 3*(96+pad), wantH: pad + title + 1*(96+label+pad), wantCols: 3},
		{name: "one tile without an image", tiles: []contactsheet.Tile{{Label: "missing"}},
			wantW: pad + 96 + pad, wantH: pad + title + 96 + label + pad, wantCols: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := contactsheet.Render(&buf, tt.tiles, tt.opts); err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatalf("decode sheet: %v", err)
			}
			if b := img.Bounds(); b.Dx() != tt.wantW || b.Dy() != tt.wantH {
				t.Fatalf("sheet is %dx%d, want %dx%d", b.Dx(), b.Dy(), tt.wantW, tt.wantH)
			}
			cell := tt.opts.Cell
			if cell == 0 {
				cell = contactsheet.DefaultCell
			}
			if n := countNonWhite(img, image.Rect(pad, pad, tt.wantW-pad, pad+title)); n == 0 {
				t.Error("title band is all white")
			}
			for i := range tt.tiles {
				col, row := i%tt.wantCols, i/tt.wantCols
				x := pad + col*(cell+pad)
				y := pad + title + row*(cell+label+pad)
				if n := countNonWhite(img, image.Rect(x, y, x+cell, y+cell)); n == 0 {
					t.Errorf("tile %d: image square at (%d,%d) is all white", i, x, y)
				}
				if n := countNonWhite(img, image.Rect(x, y+cell, x+cell, y+cell+label)); n == 0 {
					t.Errorf("tile %d: label band is all white", i)
				}
				// The gap right of the tile stays white: nothing spills over.
				if n := countNonWhite(img, image.Rect(x+cell, y, x+cell+pad, y+cell)); n != 0 {
					t.Errorf("tile %d: %d non-white pixels in the gap", i, n)
				}
			}
			// The bottom margin is white.
			if n := countNonWhite(img, image.Rect(0, tt.wantH-pad, tt.wantW, tt.wantH)); n != 0 {
				t.Errorf("%d non-white pixels in the bottom margin", n)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name    string
		tiles   []contactsheet.Tile
		opts    contactsheet.Options
		wantErr string
	}{
		{"no tiles", nil, contactsheet.Options{}, "contactsheet: no tiles"},
		{"negative columns", tiles(1), contactsheet.Options{Columns: -1}, "Columns must be 1–256, got -1"},
		{"too many columns", tiles(1), contactsheet.Options{Columns: 257}, "Columns must be 1–256, got 257"},
		{"cell too small", tiles(1), contactsheet.Options{Cell: 8}, "Cell must be 16–1024 pixels, got 8"},
		{"cell too large", tiles(1), contactsheet.Options{Cell: 2000}, "Cell must be 16–1024 pixels, got 2000"},
		{"sheet too large", make([]contactsheet.Tile, 100_000), contactsheet.Options{}, "over the limit of 100000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := contactsheet.Render(&buf, tt.tiles, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Render = %v, want an error containing %q", err, tt.wantErr)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes on error", buf.Len())
			}
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRenderWriteError(t *testing.T) {
	err := contactsheet.Render(failWriter{}, tiles(2), contactsheet.Options{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Render = %v, want the writer's error", err)
	}
}

func BenchmarkRender(b *testing.B) {
	ts := tiles(30)
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := contactsheet.Render(&buf, ts, contactsheet.Options{Title: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleRender() {
	var sheet bytes.Buffer
	fmt.Println(contactsheet.Render(&sheet, nil, contactsheet.Options{}))

	// Three tiles: one row of three 96 px cells, 8 + 3×104 by 8 + 20 + 120.
	tiles := []contactsheet.Tile{
		{Label: "images/cat.png", Image: swatch(160, 120, color.NRGBA{R: 200, A: 255})},
		{Label: "images/dog.png", Image: swatch(90, 160, color.NRGBA{G: 200, A: 255})},
		{Label: "images/a-very-long-name-0042.png", Image: nil},
	}
	if err := contactsheet.Render(&sheet, tiles, contactsheet.Options{Title: "Thumbnails"}); err != nil {
		fmt.Println(err)
		return
	}
	cfg, _ := png.DecodeConfig(&sheet)
	fmt.Printf("%dx%d\n", cfg.Width, cfg.Height)
	// Output:
	// contactsheet: no tiles
	// 320x148
}
