package describe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape returns s as one line of inert text: every control character
// (C0 U+0000–U+001F, DEL U+007F, C1 U+0080–U+009F), the bidirectional
// controls that reorder what a terminal shows (U+061C, U+200E, U+200F,
// U+202A–U+202E, U+2066–U+2069), the line and paragraph separators U+2028
// and U+2029 and every byte that is not UTF-8 are written as a Go-style
// escape (\n, \r, \t, \x1b, \u0085, \u202e; \xff for a bad byte), and a
// backslash as \\, so that an escaped text and a text holding the escape's
// characters never look alike (as GNU ls --quoting-style=escape does).
// Everything else, other scripts and emoji included, is kept. s without
// any of these is returned as is. Safe for concurrent use.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r == '\\' || r < 0x20 || r == 0x7f || unsafeRune(r) {
			return true
		}
		i += n
	}
	return false
}

// unsafeRune reports the runes above U+007F that Escape writes as \uXXXX.
func unsafeRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1 controls (U+009B is CSI on some terminals)
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}
