package thumbnail

import (
	"image"
	"image/color"
	"os"
	"strconv"

	"golang.org/x/sync/semaphore"
)

// Memory budget of decoding. Decoded images are far larger than their files
// (a 7000×7000 16-bit PNG of 381 KB decodes to 392 MB), so Run charges each
// image's decoded bytes, computed from its header before decoding, to a
// budget shared by every Run of the process (one Lambda invocation at a
// time runs in a process, so it is the invocation's budget): an item waits
// until the budget has room, and an image that alone exceeds the budget is
// a permanent ErrOverBudget. Memory is never exhausted by decoding, whatever
// the number of items running at once.
const (
	// EnvFunctionMemory is the variable in which Lambda gives the
	// function's configured memory in MB (AWS Lambda developer guide,
	// "Defined runtime environment variables",
	// https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html).
	EnvFunctionMemory = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
	// BudgetPercent is the share of the function's memory given to decoded
	// images; the rest holds the runtime, the objects' bytes (at most
	// MaxObjectBytes each) and the encoded thumbnails.
	BudgetPercent = 50
	// DefaultBudgetBytes is the budget outside Lambda (EnvFunctionMemory
	// unset or not a positive number): 1 GiB.
	DefaultBudgetBytes = 1 << 30
)

// BudgetFromEnv returns the decode budget in bytes: BudgetPercent of the
// function's memory read from EnvFunctionMemory (MB, i.e. MiB as Lambda
// allocates it), or DefaultBudgetBytes when that is unset or invalid.
func BudgetFromEnv() int64 {
	mb, err := strconv.ParseInt(os.Getenv(EnvFunctionMemory), 10, 64)
	if err != nil || mb <= 0 {
		return DefaultBudgetBytes
	}
	return mb << 20 * BudgetPercent / 100
}

// budget is a weighted semaphore over bytes.
type budget struct {
	bytes int64
	sem   *semaphore.Weighted
}

func newBudget(bytes int64) *budget {
	if bytes <= 0 {
		bytes = DefaultBudgetBytes
	}
	return &budget{bytes: bytes, sem: semaphore.NewWeighted(bytes)}
}

// BytesPerPixel is how many bytes one pixel of an image of color model m
// takes once decoded by the standard decoders: 1 for gray and paletted, 2
// for 16-bit gray, 3 for Y'CbCr (4:4:4, the largest subsampling), 4 for
// 8-bit RGBA, CMYK and Y'CbCr with alpha, 8 for 16-bit RGBA. An unknown
// model counts 8 (the widest).
func BytesPerPixel(m color.Model) int64 {
	switch m {
	case color.GrayModel, color.AlphaModel:
		return 1
	case color.Gray16Model, color.Alpha16Model:
		return 2
	case color.YCbCrModel:
		return 3
	case color.RGBAModel, color.NRGBAModel, color.CMYKModel, color.NYCbCrAModel:
		return 4
	case color.RGBA64Model, color.NRGBA64Model:
		return 8
	}
	if _, ok := m.(color.Palette); ok {
		return 1
	}
	return 8
}

// DecodeBytes is the memory, in bytes, that making a tw×th thumbnail of an
// image with header cfg takes at most: the decoded image (width × height ×
// BytesPerPixel), for GIF the RGBA canvas its first frame is drawn on, the
// scaler's intermediate rows (tw × source height × 32 bytes,
// x/image/draw's float buffer) and the thumbnail, three times (scaled,
// its RGBA copy and the oriented one).
func DecodeBytes(cfg image.Config, format string, tw, th int) int64 {
	w, h := int64(cfg.Width), int64(cfg.Height)
	n := w * h * BytesPerPixel(cfg.ColorModel)
	if format == "gif" {
		n += w * h * 4
	}
	side := max(w, h) // the scaler's pass runs along either side after orientation
	return n + int64(max(tw, th))*side*32 + 3*int64(tw)*int64(th)*4
}
