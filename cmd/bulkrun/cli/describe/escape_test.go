package describe

import "testing"

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain key-1 ünïcödé 日本 🙂", "plain key-1 ünïcödé 日本 🙂"},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"k1\nok\tsucceeded", `k1\nok\tsucceeded`},
		{"a\rb\x00c\x7f", `a\rb\x00c\x7f`},
		{"\u009b31m", `\u009b31m`},
		{"\u202egnp.exe\u2028", `\u202egnp.exe\u2028`},
		{"bad\xffbyte", `bad\xffbyte`},
		{`a\nb`, `a\\nb`}, // a literal backslash-n never looks like an escaped newline
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
