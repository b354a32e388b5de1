package api

import (
	"fmt"
	"regexp"
	"unicode/utf8"
)

// MaxKeyBytes is the longest item key: 1,024 bytes of UTF-8 (docs/design.md, "Vocabulary").
const MaxKeyBytes = 1024

var batchIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidBatchID reports whether id is 1–128 bytes of [A-Za-z0-9_-].
func ValidBatchID(id string) bool { return batchIDRE.MatchString(id) }

// CheckKey returns a reason when key is not a valid item key (1–1024 bytes
// of valid UTF-8), or "".
func CheckKey(key string) string {
	switch {
	case key == "":
		return "item key is empty"
	case len(key) > MaxKeyBytes:
		return fmt.Sprintf("item key is %d bytes, longer than %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return "item key is not valid UTF-8"
	}
	return ""
}

// PositionalKey is the key of the item at 0-based index i when the source
// names none: "item-" and ten zero-padded digits, so byte order is item
// order (item-0000000042).
func PositionalKey(i int64) string { return fmt.Sprintf("item-%010d", i) }
