package cli

import (
	"fmt"
	"io"
	"reflect"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
)

// Every line the CLI prints in text mode goes through textf or textln,
// and every string they are given is passed through describe.Escape
// first: item keys, error texts, outputs, cost names, refusal messages
// and the AWS errors they quote are data a pipeline or a source file
// chose, and a terminal acts on the control characters in them (an ESC
// sequence retitles the window, clears the screen or paints a forged
// line; a newline or a tab in a key forges a row or a column). The format
// strings are bulkrun's own and are printed as written. `-o json` does
// not use them: encoding/json escapes every control character below
// U+0020 itself (RFC 8259 §7) and the values stay exact.
// TestTextOutputGoesThroughOneHelper fails when a print in this package
// bypasses them.

// textf writes format to w with every argument made inert: a string (or a
// value whose type is a string, such as api.Outcome), an error and a
// fmt.Stringer are escaped with describe.Escape; numbers, booleans and
// times are printed as fmt prints them. The only way the cli package
// prints text.
func textf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, format, inert(args)...)
}

// textln writes its arguments separated by spaces and a newline, each made
// inert as textf does.
func textln(w io.Writer, args ...any) {
	fmt.Fprintln(w, inert(args)...)
}

func inert(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			out[i] = v
		case string:
			out[i] = describe.Escape(v)
		case error:
			out[i] = describe.Escape(v.Error())
		case fmt.Stringer:
			out[i] = describe.Escape(v.String())
		default:
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				out[i] = describe.Escape(rv.String())
			} else {
				out[i] = a
			}
		}
	}
	return out
}
