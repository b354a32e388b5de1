package wire_test

import (
	"bytes"
	"encoding"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// TestContractGoldenJSON guards the API contract's JSON shapes: the submit
// request, the batch view (every answer about a batch), the error body, an
// items page, a batches page, the report and the link to a large one, a results line, a page of
// partial results, a corrections
// request and answer, and the completion event as
// EventBridge delivers it each round-trip through their Go types
// unchanged (testdata/*.golden.json, as aws-lambda-go's events tests do),
// and each golden file names every JSON field its type can write, so a
// renamed, dropped, retyped or added field fails here until the golden
// file (and the OpenAPI document) say so.
func TestContractGoldenJSON(t *testing.T) {
	tests := []struct {
		file string
		new  func() any // a pointer to the type the file holds
	}{
		{"submit-request", func() any { return new(api.SubmitRequest) }},
		{"batch-view", func() any { return new(wire.BatchView) }},
		{"error", func() any { return new(wire.ErrorBody) }},
		{"item-page", func() any { return new(api.ItemPage) }},
		{"batch-page", func() any { return new(api.BatchPage) }},
		{"report", func() any { return new(api.Report) }},
		{"report-link", func() any { return new(wire.ReportLink) }},
		{"result-line", func() any { return new(api.ResultLine) }},
		{"result-page", func() any { return new(api.ResultPage) }},
		{"event", func() any { return new(events.EventBridgeEvent) }},
		{"correct-request", func() any { return new(api.CorrectRequest) }},
		{"correction-view", func() any { return new(wire.CorrectionView) }},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			golden, err := os.ReadFile(filepath.Join("testdata", tt.file+".golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			v := tt.new()
			dec := json.NewDecoder(bytes.NewReader(golden))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				t.Fatalf("decode %s: %v", tt.file, err)
			}
			out, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("encode %s: %v", tt.file, err)
			}
			assertSameJSON(t, golden, out)
			doc := decodeAny(t, golden)
			if missing := missingFields(reflect.TypeOf(v).Elem(), doc, ""); len(missing) > 0 {
				t.Errorf("%s.golden.json lacks fields its type writes: %s", tt.file, strings.Join(missing, ", "))
			}
			if tt.file != "event" {
				return
			}
			// The event's detail is bulkrun's event.Detail, with the
			// detail type of its status.
			ev := v.(*events.EventBridgeEvent)
			var d event.Detail
			dec = json.NewDecoder(bytes.NewReader(ev.Detail))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&d); err != nil {
				t.Fatalf("decode detail: %v", err)
			}
			if ev.Source != api.EventSource || ev.DetailType != event.DetailType(d.Status) {
				t.Errorf("source %q, detail-type %q; want %q, %q", ev.Source, ev.DetailType, api.EventSource, event.DetailType(d.Status))
			}
			out, err = json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			assertSameJSON(t, ev.Detail, out)
			if missing := missingFields(reflect.TypeOf(d), decodeAny(t, ev.Detail), "detail"); len(missing) > 0 {
				t.Errorf("event.golden.json lacks detail fields: %s", strings.Join(missing, ", "))
			}
		})
	}
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return v
}

// assertSameJSON fails unless want and got are the same JSON value (object
// key order and spacing aside; numbers compared as written).
func assertSameJSON(t *testing.T, want, got []byte) {
	t.Helper()
	w, g := decodeAny(t, want), decodeAny(t, got)
	if !reflect.DeepEqual(w, g) {
		wi, _ := json.MarshalIndent(w, "", "  ")
		gi, _ := json.MarshalIndent(g, "", "  ")
		t.Errorf("round trip changed the JSON\nwant: %s\ngot:  %s", wi, gi)
	}
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// missingFields returns the JSON paths of the fields of type t (as
// encoding/json writes them: tags, embedded structs, an outer field hiding
// an embedded one of the same name) that doc does not hold. It descends
// into nested structs, pointers, slices (every element) and maps (every
// value); types with their own JSON encoding are leaves.
func missingFields(t reflect.Type, doc any, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) ||
		t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType) {
		return nil
	}
	var missing []string
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return []string{path + " (not an object)"}
		}
		for name, f := range jsonFields(t) {
			sub := strings.TrimPrefix(path+"."+name, ".")
			v, ok := obj[name]
			if !ok {
				missing = append(missing, sub)
				continue
			}
			missing = append(missing, missingFields(f.Type, v, sub)...)
		}
	case reflect.Slice, reflect.Array:
		arr, _ := doc.([]any)
		for i, v := range arr {
			missing = append(missing, missingFields(t.Elem(), v, path+"["+itoa(i)+"]")...)
		}
	case reflect.Map:
		obj, _ := doc.(map[string]any)
		for k, v := range obj {
			missing = append(missing, missingFields(t.Elem(), v, path+"."+k)...)
		}
	}
	sort.Strings(missing)
	return missing
}

// jsonFields returns t's JSON field names and their fields, as
// encoding/json resolves them (a shallower field wins over an embedded one).
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			embedded = append(embedded, f.Type)
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f
	}
	for _, e := range embedded {
		for name, f := range jsonFields(e) {
			if _, ok := fields[name]; !ok {
				fields[name] = f
			}
		}
	}
	return fields
}

func itoa(i int) string { return strconv.Itoa(i) }
