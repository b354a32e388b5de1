package thumbnail

import (
	"bytes"
	"image"
	"image/draw"

	"github.com/rwcarlsen/goexif/exif"
)

// Orientation is the EXIF orientation tag (0x0112) of a JPEG: how the
// stored pixels must be transformed to be displayed upright (EXIF 2.32,
// CIPA DC-008, "Orientation"). 1 is upright; 2 mirrored horizontally; 3
// rotated 180°; 4 mirrored vertically; 5 transposed; 6 needs a 90°
// clockwise turn (a portrait phone photo); 7 transversed; 8 needs a 90°
// counter-clockwise turn.
type Orientation int

// orientation reads the EXIF orientation of JPEG data with
// github.com/rwcarlsen/goexif; no EXIF, no tag or a value outside 1–8 is
// upright (1). A malformed EXIF block never fails the item: the image is
// then taken as stored.
func orientation(data []byte) (o Orientation) {
	defer func() {
		if recover() != nil {
			o = 1
		}
	}()
	x, err := exif.Decode(bytes.NewReader(data))
	if err != nil {
		return 1
	}
	tag, err := x.Get(exif.Orientation)
	if err != nil {
		return 1
	}
	v, err := tag.Int(0)
	if err != nil || v < 1 || v > 8 {
		return 1
	}
	return Orientation(v)
}

// swapsSides reports whether o turns the image by a quarter (5–8).
func (o Orientation) swapsSides() bool { return o >= 5 && o <= 8 }

// apply returns img transformed for display by o (img itself when upright).
func (o Orientation) apply(img image.Image) image.Image {
	if o <= 1 || o > 8 {
		return img
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	src := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(src, src.Rect, img, b.Min, draw.Src)
	dw, dh := w, h
	if o.swapsSides() {
		dw, dh = h, w
	}
	dst := image.NewRGBA(image.Rect(0, 0, dw, dh))
	for y := range dh {
		for x := range dw {
			var sx, sy int
			switch o {
			case 2:
				sx, sy = w-1-x, y
			case 3:
				sx, sy = w-1-x, h-1-y
			case 4:
				sx, sy = x, h-1-y
			case 5:
				sx, sy = y, x
			case 6:
				sx, sy = y, h-1-x
			case 7:
				sx, sy = w-1-y, h-1-x
			case 8:
				sx, sy = w-1-y, x
			}
			si, di := src.PixOffset(sx, sy), dst.PixOffset(x, y)
			copy(dst.Pix[di:di+4], src.Pix[si:si+4])
		}
	}
	return dst
}
