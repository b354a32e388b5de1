package source

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/validate"
)

// Check is how a read treats its rows beyond their format: a JSON Schema
// every item's input must satisfy (Schema, nil for none; it also types
// CSV columns, see validate.Schema.Cell), and what becomes of a row that
// cannot run. With Bad nil the first such row ends the read with its
// *api.InputError, as a read without a Check does; with Bad set every such
// row is handed to Bad, and the read goes on (an error Bad returns ends
// it). A nil *Check is no schema and no Bad.
//
// What Bad gets: a row that is not UTF-8, not JSON, a JSON object with a
// member twice, a CSV record with another number of fields than the
// header or a quote out of place, a row without a usable key, a CSV cell
// that is not of its column's type (kind format); an item the schema
// refuses (kind schema). What still ends the read: the source's
// encoding (UTF-16, a corrupt gzip stream), its header, a line longer
// than MaxLineBytes, a JSON array whose structure breaks (its elements
// cannot be told apart after that), and the errors of the source's reader.
type Check struct {
	Schema *validate.Schema
	Bad    func(BadRow) error
}

// BadRow is a row that cannot run, as a read hands it to Check.Bad: the
// Problem (Line or Element, the Key when one was read, Kind, Path,
// Reason; Handling unset), the Key it runs under as a failed item — the
// key read, else its positional key (a source without key field), else
// LineKey — and its Input as JSON: the JSON value as read (a key problem,
// a schema problem), a JSON string of the line as read (invalid UTF-8
// bytes as U+FFFD) for a line that is not JSON, or for a CSV record the
// object of header → cell of the fields it has (cells past the header's
// columns as "_column_N"), cells as strings.
type BadRow struct {
	Problem api.Problem
	Key     string
	Input   json.RawMessage
}

// LineKey is the key a bad row without a key of its own runs under: line-
// and its 1-based line (or element-, its element) in 10 digits.
func LineKey(line, element int64) string {
	if element > 0 {
		return fmt.Sprintf("element-%010d", element)
	}
	return fmt.Sprintf("line-%010d", line)
}

// fault hands a row that cannot be read to c.Bad (ie says where and
// why; input is what the row holds; key its key, "" for LineKey), or
// returns ie when there is no Bad: the read stops there.
func (c *Check) fault(ie *api.InputError, key string, input json.RawMessage) error {
	if c == nil || c.Bad == nil {
		return ie
	}
	if key == "" {
		key = LineKey(ie.Line, ie.Element)
	}
	reason := ie.Reason
	if ie.Err != nil && !errors.Is(ie.Err, api.ErrInvalid) {
		reason += ": " + ie.Err.Error()
	}
	return c.Bad(BadRow{
		Problem: api.Problem{Line: ie.Line, Element: ie.Element, Key: ie.Key, Kind: api.ProblemFormat, Path: columnPath(ie.Field), Reason: reason},
		Key:     key, Input: input,
	})
}

// columnPath is the JSON pointer of a CSV column named in an
// *InputError's Field ("column/qty"), "" for any other field.
func columnPath(field string) string {
	col, ok := strings.CutPrefix(field, "column/")
	if !ok {
		return ""
	}
	return "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(col)
}

// deliver hands a read item to emit, after the schema: an item the schema
// refuses goes to Bad as a schema problem, or ends the read with an
// *InputError naming its line, key and path when there is no Bad.
func (c *Check) deliver(it SourceItem, emit func(SourceItem) error) error {
	if c == nil || c.Schema == nil {
		return emit(it)
	}
	v := c.Schema.Check(it.Input)
	if v == nil {
		return emit(it)
	}
	if c.Bad == nil {
		where := v.Path
		if where == "" {
			where = "the item"
		}
		return &api.InputError{Line: it.Line, Element: it.Element, Key: api.Truncate(it.Key, 80),
			Reason: fmt.Sprintf("refused by the schema at %s: %s", where, v.Reason)}
	}
	return c.Bad(BadRow{
		Problem: api.Problem{Line: it.Line, Element: it.Element, Key: it.Key, Kind: api.ProblemSchema, Path: v.Path, Reason: v.Reason},
		Key:     it.Key, Input: it.Input,
	})
}

// lineText is a line that is not JSON as a JSON string, invalid UTF-8
// bytes replaced by U+FFFD.
func lineText(b []byte) json.RawMessage {
	s, _ := json.Marshal(strings.ToValidUTF8(string(b), "\uFFFD"))
	return s
}
