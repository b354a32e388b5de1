package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

type collected struct{ items []SourceItem }

func (c *collected) emit(it SourceItem) error { c.items = append(c.items, it); return nil }

func TestReadJSONL(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		keyField  string
		wantKeys  []string
		wantLines []int64
		wantErr   string
		errLine   int64
	}{
		{"plain", "{\"a\":1}\n{\"a\":2}\n", "", []string{"item-0000000000", "item-0000000001"}, []int64{1, 2}, "", 0},
		{"bom crlf blank no final newline", "\xEF\xBB\xBF{\"a\":1}\r\n\r\n  \n{\"a\":2}", "", []string{"item-0000000000", "item-0000000001"}, []int64{1, 4}, "", 0},
		{"empty source", "", "", nil, nil, "", 0},
		{"only blank lines", "\n\n\r\n", "", nil, nil, "", 0},
		{"key field", "{\"id\":\"x\",\"v\":1}\n{\"id\":\"y\"}\n", "id", []string{"x", "y"}, []int64{1, 2}, "", 0},
		{"malformed line", "{\"a\":1}\n{\"a\":1}\n{oops}\n", "", nil, nil, "line 3: not valid JSON", 3},
		{"key field missing", "{\"id\":\"x\"}\n{\"v\":1}\n", "id", nil, nil, `key field "id" is missing`, 2},
		{"key field not string", "{\"id\":7.5}\n", "id", nil, nil, `key field "id" is not a string or an integer`, 1},
		{"key too long", "{\"id\":\"" + strings.Repeat("k", 1025) + "\"}\n", "id", nil, nil, "longer than 1024", 1},
		{"key not object", "[1,2]\n", "id", nil, nil, "not a JSON object", 1},
		{"invalid utf-8 key", "{\"id\":\"ok\"}\n{\"id\":\"a\xffb\"}\n", "id", nil, nil, "not valid UTF-8", 2},
		{"scalars are items", "1\n\"s\"\nnull\n", "", []string{"item-0000000000", "item-0000000001", "item-0000000002"}, []int64{1, 2, 3}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c collected
			err := ReadJSONL(strings.NewReader(tt.in), tt.keyField, c.emit)
			if tt.wantErr != "" {
				var ie *api.InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantErr) || ie.Line != tt.errLine || !errors.Is(err, api.ErrInvalid) {
					t.Fatalf("err = %v, want %q at line %d", err, tt.wantErr, tt.errLine)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.items) != len(tt.wantKeys) {
				t.Fatalf("got %d items, want %d", len(c.items), len(tt.wantKeys))
			}
			for i, it := range c.items {
				if it.Key != tt.wantKeys[i] || it.Line != tt.wantLines[i] || !json.Valid(it.Input) {
					t.Errorf("item %d = %+v, want key %s line %d", i, it, tt.wantKeys[i], tt.wantLines[i])
				}
			}
		})
	}
}

func TestReadJSONArrayAndCSV(t *testing.T) {
	var c collected
	if err := ReadJSONArray(strings.NewReader("\xEF\xBB\xBF [ {\"k\":\"a\"},\n {\"k\":\"b\", \"x\": [1, 2]} ] \n"), "k", c.emit); err != nil {
		t.Fatal(err)
	}
	if len(c.items) != 2 || c.items[1].Key != "b" || c.items[1].Element != 2 || string(c.items[1].Input) != `{"k":"b","x":[1,2]}` {
		t.Fatalf("array items = %+v", c.items)
	}
	for _, bad := range []struct{ in, want string }{
		{`{"a":1}`, "want a JSON array"},
		{`[1, 2`, "element 3"},
		{`[1] 2`, "after the closing bracket"},
		{``, "empty_source"},
	} {
		err := ReadJSONArray(strings.NewReader(bad.in), "", func(SourceItem) error { return nil })
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ReadJSONArray(%q) = %v, want %q", bad.in, err, bad.want)
		}
	}

	c = collected{}
	in := "\xEF\xBB\xBFid,name\r\nA1,\"x, y\"\r\n\r\nB2,z\r\n"
	if err := ReadCSV(strings.NewReader(in), "id", c.emit); err != nil {
		t.Fatal(err)
	}
	if len(c.items) != 2 || c.items[0].Key != "A1" || string(c.items[0].Input) != `{"id":"A1","name":"x, y"}` || c.items[1].Line != 4 {
		t.Fatalf("csv items = %+v", c.items)
	}
	for _, bad := range []struct{ in, key, want string }{
		{"id,name\na,b,c\n", "", "line 2"},
		{"id,id\n", "", "appears twice"},
		{"id,name\n", "nope", "key_field"},
		{"id\n\"unterminated\n", "", "malformed CSV"},
		{"id,name\nx,\xff\n", "", "line 2"},
	} {
		err := ReadCSV(strings.NewReader(bad.in), bad.key, func(SourceItem) error { return nil })
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ReadCSV(%q) = %v, want %q", bad.in, err, bad.want)
		}
	}
}

func TestManifestWriter(t *testing.T) {
	var buf bytes.Buffer
	mw := NewManifestWriter(&buf, 2, t.TempDir())
	defer mw.Close()
	in := "{\"id\":\"a\",\"v\":1}\n{\"id\":\"b\"}\n{\"id\":\"c\",\"big\":\"" + strings.Repeat("x", 100) + "\"}\n"
	if err := ReadJSONL(strings.NewReader(in), "id", mw.Add); err != nil {
		t.Fatal(err)
	}
	sum, err := mw.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Count != 3 || sum.Bytes != int64(buf.Len()) || len(sum.Chunks) != 2 || sum.Chunks[1].FirstIndex != 2 || sum.Chunks[1].Count != 1 {
		t.Fatalf("summary = %+v", sum)
	}
	// Same items, same digest; whitespace in the source does not matter.
	var buf2 bytes.Buffer
	mw2 := NewManifestWriter(&buf2, 2, t.TempDir())
	defer mw2.Close()
	_ = ReadJSONL(strings.NewReader(strings.ReplaceAll(in, ":", " : ")), "id", mw2.Add)
	sum2, _ := mw2.Finish()
	if sum2.Digest != sum.Digest || len(sum.Digest) != 64 {
		t.Fatalf("digests differ: %s %s", sum.Digest, sum2.Digest)
	}
	// Every chunk's byte range parses back to its lines, with exact offsets.
	var keys []string
	for _, ch := range sum.Chunks {
		part := bytes.NewReader(buf.Bytes()[ch.Offset : ch.Offset+ch.Length])
		n := int64(0)
		err := ReadManifestLines(part, ch.Offset, func(l ManifestLine, off, length int64) error {
			n++
			keys = append(keys, l.Key)
			var again ManifestLine
			if err := json.Unmarshal(buf.Bytes()[off:off+length], &again); err != nil || again.Key != l.Key {
				t.Fatalf("line at %d+%d does not parse back to %s: %v", off, length, l.Key, err)
			}
			return nil
		})
		if err != nil || n != ch.Count {
			t.Fatalf("chunk %+v: %d lines, err %v", ch, n, err)
		}
	}
	if strings.Join(keys, ",") != "a,b,c" {
		t.Fatalf("keys = %v", keys)
	}
}

func TestManifestDuplicateKey(t *testing.T) {
	var buf bytes.Buffer
	mw := NewManifestWriter(&buf, 0, t.TempDir())
	defer mw.Close()
	in := "{\"id\":\"a\"}\n{\"id\":\"b\"}\n\n{\"id\":\"a\"}\n"
	if err := ReadJSONL(strings.NewReader(in), "id", mw.Add); err != nil {
		t.Fatal(err)
	}
	_, err := mw.Finish()
	var ie *api.InputError
	if !errors.As(err, &ie) || ie.Key != "a" || ie.Line != 4 || !strings.Contains(err.Error(), "first seen at line 1, again at line 4") {
		t.Fatalf("err = %v", err)
	}
}

func TestManifestDuplicateInArrayNamesElements(t *testing.T) {
	mw := NewManifestWriter(io.Discard, 0, t.TempDir())
	defer mw.Close()
	if err := ReadJSONArray(strings.NewReader(`[{"id":"a"},{"id":"b"},{"id":"a"}]`), "id", mw.Add); err != nil {
		t.Fatal(err)
	}
	_, err := mw.Finish()
	var ie *api.InputError
	if !errors.As(err, &ie) || ie.Element != 3 || ie.Line != 0 || !strings.Contains(err.Error(), "first seen at element 1, again at element 3") {
		t.Fatalf("err = %v", err)
	}
}
