// Package contactsheet renders a contact sheet: one PNG showing many
// thumbnails in a grid, each with its label, under a title. The demo uses it
// to show the outputs of a thumbnail batch at a glance.
//
// # Layout
//
// All sizes are in pixels. With n tiles, cols = min(Columns, n) and
// rows = ⌈n / cols⌉, the sheet is
//
//	width  = Pad + cols × (Cell + Pad)
//	height = Pad + TitleHeight + rows × (Cell + LabelHeight + Pad)
//
// on a white background. Tile i sits in column i mod cols and row i div cols;
// its image square starts at
//
//	x = Pad + col × (Cell + Pad),  y = Pad + TitleHeight + row × (Cell + LabelHeight + Pad)
//
// and its label is written in the LabelHeight band under it. An image is
// scaled (up or down, aspect ratio kept) to fit its Cell × Cell square and
// centred in it; a tile without an image shows a light grey square. Text is
// drawn with basicfont.Face7x13 (ASCII; other characters show as a
// replacement glyph), 7 pixels per character.
//
// # Errors
//
// Render returns an error, and writes nothing, for zero tiles, for options
// out of range, and for a sheet over MaxPixels; it returns the writer's
// error when writing fails.
package contactsheet

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"unicode/utf8"

	"golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Layout constants, in pixels.
const (
	Pad         = 8  // margin around the sheet and gap between tiles
	LabelHeight = 16 // band under each tile's image for its label
	TitleHeight = 20 // band at the top for the title
	charWidth   = 7  // advance of basicfont.Face7x13
)

// Defaults and limits of Options.
const (
	DefaultColumns = 12
	DefaultCell    = 96
	MaxColumns     = 256
	MinCell        = 16
	MaxCell        = 1024
	// MaxPixels is the largest sheet Render draws, width × height: 100
	// megapixels (400 MB of RGBA).
	MaxPixels = 100_000_000
)

// Tile is one thumbnail on the sheet.
type Tile struct {
	Label string      // written under the image, cut to the cell's width (the end is kept: "..t-0042.png")
	Image image.Image // scaled to fit the cell; nil shows a grey square
}

// Options shapes the sheet. The zero value takes every default.
type Options struct {
	Columns int    // tiles per row, 1–256, default 12 (fewer when there are fewer tiles)
	Cell    int    // side of each tile's image square in pixels, 16–1024, default 96
	Title   string // written at the top, followed by the tile count: "Title (30 tiles)"
}

var (
	white = image.NewUniform(color.White)
	grey  = image.NewUniform(color.Gray{Y: 0xdd})
	ink   = image.NewUniform(color.Gray{Y: 0x20})
)

// Render draws tiles as a contact sheet (see the package comment for its
// layout) and writes it to w as a PNG. It reads the tiles' images and does
// not modify them; calls with distinct writers are safe to run concurrently.
func Render(w io.Writer, tiles []Tile, opts Options) error {
	if len(tiles) == 0 {
		return errors.New("contactsheet: no tiles")
	}
	if opts.Columns == 0 {
		opts.Columns = DefaultColumns
	}
	if opts.Cell == 0 {
		opts.Cell = DefaultCell
	}
	if opts.Columns < 1 || opts.Columns > MaxColumns {
		return fmt.Errorf("contactsheet: Columns must be 1–%d, got %d", MaxColumns, opts.Columns)
	}
	if opts.Cell < MinCell || opts.Cell > MaxCell {
		return fmt.Errorf("contactsheet: Cell must be %d–%d pixels, got %d", MinCell, MaxCell, opts.Cell)
	}
	cols := min(opts.Columns, len(tiles))
	rows := (len(tiles) + cols - 1) / cols
	width := Pad + cols*(opts.Cell+Pad)
	height := int64(Pad+TitleHeight) + int64(rows)*int64(opts.Cell+LabelHeight+Pad)
	if px := int64(width) * height; px > MaxPixels {
		return fmt.Errorf("contactsheet: %d tiles make a %dx%d sheet (%d pixels), over the limit of %d",
			len(tiles), width, height, px, MaxPixels)
	}

	sheet := image.NewRGBA(image.Rect(0, 0, width, int(height)))
	draw.Draw(sheet, sheet.Bounds(), white, image.Point{}, draw.Src)

	face := basicfont.Face7x13
	text := func(s string, x, baseline int) {
		d := font.Drawer{Dst: sheet, Src: ink, Face: face, Dot: fixed.P(x, baseline)}
		d.DrawString(s)
	}

	// Title: the count is always shown; the title is cut at its end.
	count := fmt.Sprintf("%d tiles", len(tiles))
	if len(tiles) == 1 {
		count = "1 tile"
	}
	title := count
	if opts.Title != "" {
		suffix := " (" + count + ")"
		room := (width-2*Pad)/charWidth - utf8.RuneCountInString(suffix)
		title = cutEnd(opts.Title, room) + suffix
	}
	text(title, Pad, Pad+face.Ascent+(TitleHeight-face.Height)/2)

	labelRunes := opts.Cell / charWidth
	for i, t := range tiles {
		col, row := i%cols, i/cols
		x := Pad + col*(opts.Cell+Pad)
		y := Pad + TitleHeight + row*(opts.Cell+LabelHeight+Pad)
		cell := image.Rect(x, y, x+opts.Cell, y+opts.Cell)
		drawFit(sheet, cell, t.Image)
		label := cutStart(t.Label, labelRunes)
		lx := x + (opts.Cell-utf8.RuneCountInString(label)*charWidth)/2
		text(label, lx, y+opts.Cell+face.Ascent+(LabelHeight-face.Height)/2)
	}
	if err := png.Encode(w, sheet); err != nil {
		return fmt.Errorf("contactsheet: write png: %w", err)
	}
	return nil
}

// drawFit scales img to fit cell, keeping its aspect ratio, centred, over
// what is already there. A nil or empty image fills cell with grey.
func drawFit(dst draw.Image, cell image.Rectangle, img image.Image) {
	if img == nil || img.Bounds().Empty() {
		draw.Draw(dst, cell, grey, image.Point{}, draw.Src)
		return
	}
	b := img.Bounds()
	side := int64(cell.Dx())
	w, h := int64(b.Dx()), int64(b.Dy())
	var dw, dh int64
	if w >= h {
		dw, dh = side, max(1, (h*side+w/2)/w)
	} else {
		dw, dh = max(1, (w*side+h/2)/h), side
	}
	x := cell.Min.X + int(side-dw)/2
	y := cell.Min.Y + int(side-dh)/2
	draw.CatmullRom.Scale(dst, image.Rect(x, y, x+int(dw), y+int(dh)), img, b, draw.Over, nil)
}

// cutStart cuts s to at most n runes, keeping its end behind "..": item
// keys differ most at their end ("images/cat-0042.png" → "..t-0042.png").
func cutStart(s string, n int) string {
	c := utf8.RuneCountInString(s)
	if c <= n {
		return s
	}
	if n <= 2 {
		return ""
	}
	r := []rune(s)
	return ".." + string(r[len(r)-(n-2):])
}

// cutEnd cuts s to at most n runes, keeping its start before "..".
func cutEnd(s string, n int) string {
	c := utf8.RuneCountInString(s)
	if c <= n {
		return s
	}
	if n <= 2 {
		return ""
	}
	r := []rune(s)
	return string(r[:n-2]) + ".."
}
