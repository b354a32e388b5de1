package batch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

func pct(v float64) *float64 { return &v }
func cnt(v int64) *int64     { return &v }

// TestThresholdBoundaries is the threshold table of docs/threshold.md.
func TestThresholdBoundaries(t *testing.T) {
	tests := []struct {
		name            string
		items, failures int64
		th              Threshold
		want            bool
		limit           string
	}{
		{"no threshold tolerates all", 10, 10, Threshold{}, false, ""},
		{"zero items never exceed", 0, 0, Threshold{FailurePercent: pct(0), FailureCount: cnt(0)}, false, ""},
		{"0 percent, 0 failures", 10, 0, Threshold{FailurePercent: pct(0)}, false, ""},
		{"0 percent, 1 failure", 10, 1, Threshold{FailurePercent: pct(0)}, true, "tolerated_failure_percent"},
		{"exactly at percent is tolerated", 20, 1, Threshold{FailurePercent: pct(5)}, false, ""},
		{"one over percent", 20, 2, Threshold{FailurePercent: pct(5)}, true, "tolerated_failure_percent"},
		{"fraction percent at", 1000, 1, Threshold{FailurePercent: pct(0.1)}, false, ""},
		{"fraction percent over", 1000, 2, Threshold{FailurePercent: pct(0.1)}, true, "tolerated_failure_percent"},
		{"100 percent never exceeds", 3, 3, Threshold{FailurePercent: pct(100)}, false, ""},
		{"33.3 percent of 3: 1 failure is over", 3, 1, Threshold{FailurePercent: pct(33.3)}, true, "tolerated_failure_percent"},
		{"0.57 percent of 10000 exactly at (no float rounding)", 10000, 57, Threshold{FailurePercent: pct(0.57)}, false, ""},
		{"0.57 percent of 10000, one over", 10000, 58, Threshold{FailurePercent: pct(0.57)}, true, "tolerated_failure_percent"},
		{"1.14 percent of 5000 exactly at", 5000, 57, Threshold{FailurePercent: pct(1.14)}, false, ""},
		{"exactly at count is tolerated", 10, 2, Threshold{FailureCount: cnt(2)}, false, ""},
		{"one over count", 10, 3, Threshold{FailureCount: cnt(2)}, true, "tolerated_failure_count"},
		{"count 0, 1 failure", 10, 1, Threshold{FailureCount: cnt(0)}, true, "tolerated_failure_count"},
		{"both: count trips first", 100, 6, Threshold{FailureCount: cnt(5), FailurePercent: pct(50)}, true, "tolerated_failure_count"},
		{"both: percent trips", 10, 6, Threshold{FailureCount: cnt(8), FailurePercent: pct(50)}, true, "tolerated_failure_percent"},
		{"both within", 10, 5, Threshold{FailureCount: cnt(5), FailurePercent: pct(50)}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.th.Judge(tt.failures, tt.items)
			if v.Exceeded != tt.want || v.Limit != tt.limit {
				t.Fatalf("Judge(%d of %d) = %+v, want exceeded %v limit %q", tt.failures, tt.items, v, tt.want, tt.limit)
			}
			if v.Exceeded && v.Detail == "" {
				t.Fatal("an exceeded verdict must say by how much")
			}
		})
	}
}

func TestThresholdValidate(t *testing.T) {
	tests := []struct {
		name      string
		th        Threshold
		wantField string
	}{
		{"ok", Threshold{FailurePercent: pct(10), FailureCount: cnt(3)}, ""},
		{"percent over 100", Threshold{FailurePercent: pct(101)}, "threshold.tolerated_failure_percent"},
		{"negative percent", Threshold{FailurePercent: pct(-1)}, "threshold.tolerated_failure_percent"},
		{"negative count", Threshold{FailureCount: cnt(-1)}, "threshold.tolerated_failure_count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.th.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tt.wantField || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want field %s", err, tt.wantField)
			}
		})
	}
}

func TestIDs(t *testing.T) {
	if got := PositionalKey(42); got != "item-0000000042" {
		t.Fatalf("PositionalKey(42) = %s", got)
	}
	if PositionalKey(9) >= PositionalKey(10) {
		t.Fatal("positional keys must sort in item order")
	}
	if first, again := RunID("b", "k"), RunID("b", "k"); first != again || first == RunID("b", "k2") || len(first) != 64 {
		t.Fatal("RunID must be a stable hex SHA-256")
	}
	if sum := sha256.Sum256([]byte("b/k")); RunID("b", "k") != hex.EncodeToString(sum[:]) {
		t.Fatal("RunID must be hex SHA-256 of {batch}/{key}")
	}
	for _, tt := range []struct {
		id string
		ok bool
	}{{"abc_-9", true}, {"", false}, {strings.Repeat("a", 128), true}, {strings.Repeat("a", 129), false}, {"a/b", false}, {"é", false}} {
		if ValidBatchID(tt.id) != tt.ok {
			t.Errorf("ValidBatchID(%q) = %v", tt.id, !tt.ok)
		}
	}
	if len(NewBatchID()) != 26 || !ValidBatchID(NewBatchID()) {
		t.Fatal("NewBatchID must be a valid ULID")
	}
	for _, tt := range []struct {
		key  string
		want string
	}{{"a", ""}, {"", "item key is empty"}, {strings.Repeat("k", 1024), ""}, {strings.Repeat("k", 1025), "item key is 1025 bytes, longer than 1024"}, {"\xff", "item key is not valid UTF-8"}} {
		if got := CheckKey(tt.key); got != tt.want {
			t.Errorf("CheckKey(%.10q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	for n := 1; n < 40; n += 7 {
		if s := Shard("some-key", n); s < 0 || s >= n {
			t.Fatalf("Shard out of range: %d of %d", s, n)
		}
	}
}

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
				var ie *InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantErr) || ie.Line != tt.errLine || !errors.Is(err, ErrInvalid) {
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
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
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
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
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
	var ie *InputError
	if !errors.As(err, &ie) || ie.Key != "a" || ie.Line != 4 || !strings.Contains(err.Error(), "first seen at line 1, again at line 4") {
		t.Fatalf("err = %v", err)
	}
}

func TestSourceSpecValidate(t *testing.T) {
	tests := []struct {
		name      string
		spec      SourceSpec
		keyField  string
		wantField string
	}{
		{"inline", SourceSpec{Items: json.RawMessage(`[]`)}, "", ""},
		{"object jsonl", SourceSpec{Object: "s3://b/k.jsonl"}, "", ""},
		{"object csv by format", SourceSpec{Object: "s3://b/k.txt", Format: "csv"}, "id", ""},
		{"prefix", SourceSpec{Prefix: "s3://b/images/"}, "", ""},
		{"none", SourceSpec{}, "", "source"},
		{"two", SourceSpec{Object: "s3://b/k.jsonl", Prefix: "s3://b/p/"}, "", "source"},
		{"bad uri", SourceSpec{Object: "http://b/k.jsonl"}, "", "source.object"},
		{"unknown format", SourceSpec{Object: "s3://b/k.txt"}, "", "source.format"},
		{"items not array", SourceSpec{Items: json.RawMessage(`{}`)}, "", "source.items"},
		{"prefix with key field", SourceSpec{Prefix: "s3://b/p/"}, "id", "key_field"},
		{"csv delimiter", SourceSpec{Object: "s3://b/k.csv", CSVDelimiter: ";"}, "", ""},
		{"csv delimiter on gzip csv", SourceSpec{Object: "s3://b/k.CSV.gz", CSVDelimiter: "tab"}, "", ""},
		{"csv delimiter on jsonl", SourceSpec{Object: "s3://b/k.jsonl", CSVDelimiter: ";"}, "", "source.csv_delimiter"},
		{"csv delimiter on prefix", SourceSpec{Prefix: "s3://b/p/", CSVDelimiter: ";"}, "", "source.csv_delimiter"},
		{"csv delimiter quote", SourceSpec{Object: "s3://b/k.csv", CSVDelimiter: `"`}, "", "source.csv_delimiter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate(tt.keyField)
			var ie *InputError
			if tt.wantField == "" && err != nil || tt.wantField != "" && (!errors.As(err, &ie) || ie.Field != tt.wantField) {
				t.Fatalf("Validate = %v, want field %q", err, tt.wantField)
			}
		})
	}
}

// TestUnknownFormatNamesTheValue guards the rule "bad input gets a clear
// error naming the field": a format given but not known ("CSV", "ndjson")
// was answered "cannot tell the format of k.csv: set format", as if none
// had been given; the answer names the value given.
func TestUnknownFormatNamesTheValue(t *testing.T) {
	for _, f := range []string{"CSV", "ndjson", "tsv"} {
		err := SourceSpec{Object: "s3://b/k.csv", Format: f}.Validate("")
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "source.format" || !strings.Contains(err.Error(), strconv.Quote(f)+" is not a format") {
			t.Errorf("format %q: Validate = %v, want source.format naming %q", f, err, f)
		}
	}
}

func TestMessageValidate(t *testing.T) {
	ok := ItemMessage("b1", 1, "m", Chunk{Count: 1}, ManifestLine{Key: "k", Input: json.RawMessage(`{}`)}, 0, 10)
	if err := ok.Validate(); err != nil || ok.Input == nil || ok.InputRef != nil {
		t.Fatalf("small input must travel inline: %+v %v", ok, err)
	}
	big := ItemMessage("b1", 1, "m", Chunk{Count: 1}, ManifestLine{Key: "k", Input: json.RawMessage(`"` + strings.Repeat("x", MaxInlineInputBytes) + `"`)}, 100, 200)
	if err := big.Validate(); err != nil || big.Input != nil || big.InputRef == nil || big.InputRef.Offset != 100 || big.ManifestKey != "m" {
		t.Fatalf("large input must travel as a pointer: %+v %v", big.InputRef, err)
	}
	for _, m := range []Message{{Kind: "x", BatchID: "b", Run: 1}, {Kind: KindItem, BatchID: "b/", Run: 1, Key: "k", Input: json.RawMessage(`1`)}, {Kind: KindItem, BatchID: "b", Run: 0}, {Kind: KindFanout, BatchID: "b", Run: 1}} {
		if m.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", m)
		}
	}
}

// TestSubmitValidate guards submit's refusals; its "unknown pipeline" case
// guards that the refusal says where a pipeline is registered.
func TestSubmitValidate(t *testing.T) {
	s := &Submitter{Pipelines: []string{"webhook"}}
	items := json.RawMessage(`[1]`)
	tests := []struct {
		name      string
		req       SubmitRequest
		wantField string
	}{
		{"ok", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, Headers: map[string]string{"X-Tenant": "acme"}}, ""},
		{"unknown pipeline", SubmitRequest{Pipeline: "nope", Source: SourceSpec{Items: items}}, "pipeline"},
		{"reserved header", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, Headers: map[string]string{"Bulkrun.Attempt": "1"}}, "headers.Bulkrun.Attempt"},
		{"header name with space", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, Headers: map[string]string{"X A": "1"}}, "headers.X A"},
		{"header value with CRLF", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, Headers: map[string]string{"X-A": "v\r\nInjected: 1"}}, "headers.X-A"},
		{"interrupt policy", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, OnInterrupt: "maybe"}, "on_interrupt"},
		{"options not an object", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, Options: json.RawMessage(`[1]`)}, "pipeline_options"},
		{"max attempts", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, MaxAttempts: 101}, "max_attempts"},
		{"items per message 100", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, ItemsPerMessage: 100}, ""},
		{"items per message 101", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, ItemsPerMessage: 101}, "items_per_message"},
		{"items per message negative", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, ItemsPerMessage: -1}, "items_per_message"},
		{"items per message with max concurrency", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, ItemsPerMessage: 10, MaxConcurrency: 5}, ""},
		{"one item per message with max concurrency", SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, ItemsPerMessage: 1, MaxConcurrency: 5}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Validate(&tt.req)
			if tt.name == "unknown pipeline" && (err == nil || !strings.Contains(err.Error(), RegisterPipelineHint)) {
				t.Fatalf("unknown pipeline error %v does not say where to register", err)
			}
			var ie *InputError
			if tt.wantField == "" && err != nil || tt.wantField != "" && (!errors.As(err, &ie) || ie.Field != tt.wantField) {
				t.Fatalf("Validate = %v, want field %q", err, tt.wantField)
			}
		})
	}
}

func TestSameSettings(t *testing.T) {
	base := Batch{Pipeline: "webhook", Options: json.RawMessage(`{"url": "http://a"}`), MaxAttempts: 3, OnInterrupt: InterruptRetry}
	same := base
	same.Options = json.RawMessage(`{"url":"http://a"}`)
	if f, _, _ := sameSettings(base, same); f != "" {
		t.Fatalf("whitespace in options is not a difference: %s", f)
	}
	same.ItemsPerMessage = 1 // a row written before the option holds 0: the same plan
	if f, _, _ := sameSettings(base, same); f != "" {
		t.Fatalf("items per message 0 and 1 differ: %s", f)
	}
	for _, tt := range []struct {
		edit func(*Batch)
		want string
	}{
		{func(b *Batch) { b.Pipeline = "thumbnail" }, "pipeline"},
		{func(b *Batch) { b.Options = json.RawMessage(`{"url":"http://b"}`) }, "pipeline_options"},
		{func(b *Batch) { b.Headers = map[string]string{"X": "1"} }, "headers"},
		{func(b *Batch) { p := 5.0; b.Threshold.FailurePercent = &p }, "threshold"},
		{func(b *Batch) { b.MaxAttempts = 4 }, "max_attempts"},
		{func(b *Batch) { b.MaxConcurrency = 3 }, "max_concurrency"},
		{func(b *Batch) { b.ItemsPerMessage = 10 }, "items_per_message"},
		{func(b *Batch) { f := false; b.StopOnThreshold = &f }, "stop_on_threshold"},
		{func(b *Batch) { b.OnInterrupt = InterruptQuarantine }, "on_interrupt"},
	} {
		other := base
		tt.edit(&other)
		if f, _, _ := sameSettings(base, other); f != tt.want {
			t.Errorf("sameSettings = %q, want %q", f, tt.want)
		}
	}
}

func TestManifestDuplicateInArrayNamesElements(t *testing.T) {
	mw := NewManifestWriter(io.Discard, 0, t.TempDir())
	defer mw.Close()
	if err := ReadJSONArray(strings.NewReader(`[{"id":"a"},{"id":"b"},{"id":"a"}]`), "id", mw.Add); err != nil {
		t.Fatal(err)
	}
	_, err := mw.Finish()
	var ie *InputError
	if !errors.As(err, &ie) || ie.Element != 3 || ie.Line != 0 || !strings.Contains(err.Error(), "first seen at element 1, again at element 3") {
		t.Fatalf("err = %v", err)
	}
}

// An input that fits the inline limit but grows past the message limit
// when encoded travels as a pointer; HTML characters are not escaped.
func TestItemMessageBodySize(t *testing.T) {
	html := json.RawMessage(`"` + strings.Repeat("<p>a&b</p>", 15000) + `"`) // 150 KB
	body, err := ItemMessageBody("b", 1, "m", Chunk{Count: 1}, ManifestLine{Key: "k", Input: html}, 10, 20)
	if err != nil || len(body) > MaxMessageBytes || strings.Contains(string(body), `\u003c`) {
		t.Fatalf("body %d bytes, err %v", len(body), err)
	}
	var m Message
	if err := json.Unmarshal(body, &m); err != nil || string(m.Input) != string(html) || m.InputRef != nil {
		t.Fatalf("150 KB of HTML must stay inline unescaped: %v", err)
	}
	quotes := json.RawMessage(`"` + strings.Repeat(`\"\"\"\"`, 20000) + `"`) // 160 KB that encodes larger
	body, err = ItemMessageBody("b", 1, "m", Chunk{Count: 1}, ManifestLine{Key: "k", Input: json.RawMessage(`[` + string(quotes) + `,` + string(quotes) + `]`)}, 10, 20)
	_ = json.Unmarshal(body, &m)
	if err != nil || len(body) > MaxMessageBytes || m.InputRef == nil || m.InputRef.Offset != 10 {
		t.Fatalf("an oversize body must become a pointer: %d bytes, %+v, %v", len(body), m.InputRef, err)
	}
}

// Submit past the gateway timeout, point 1: a repeated submit of a batch
// still submitting is the same batch only with the same request; otherwise
// the first field that differs is named (409). Rerun is a property of one
// call, not of the batch. Guards docs/api.md "Using it" (POST /batches answers).
func TestSameRequest(t *testing.T) {
	base := SubmitRequest{BatchID: "b", Pipeline: "webhook", KeyField: "k", Source: SourceSpec{Object: "s3://x/a.jsonl"},
		Options: json.RawMessage(`{"url": "http://a"}`), MaxAttempts: 3, OnInterrupt: InterruptRetry}
	for _, tt := range []struct {
		name string
		edit func(*SubmitRequest)
		want string
	}{
		{"identical", func(*SubmitRequest) {}, ""},
		{"options spaced differently", func(r *SubmitRequest) { r.Options = json.RawMessage(`{"url":"http://a"}`) }, ""},
		{"rerun asked", func(r *SubmitRequest) { r.Rerun = true }, ""},
		{"other object", func(r *SubmitRequest) { r.Source.Object = "s3://x/b.jsonl" }, "source"},
		{"format named", func(r *SubmitRequest) { r.Source.Format = FormatJSONL }, "source"},
		{"prefix instead", func(r *SubmitRequest) { r.Source = SourceSpec{Prefix: "s3://x/"} }, "source"},
		{"other key field", func(r *SubmitRequest) { r.KeyField = "id" }, "key_field"},
		{"other pipeline", func(r *SubmitRequest) { r.Pipeline = "thumbnail" }, "pipeline"},
		{"other options", func(r *SubmitRequest) { r.Options = json.RawMessage(`{"url":"http://b"}`) }, "pipeline_options"},
		{"other attempts", func(r *SubmitRequest) { r.MaxAttempts = 2 }, "max_attempts"},
		{"a concurrency limit", func(r *SubmitRequest) { r.MaxConcurrency = 3 }, "max_concurrency"},
		{"a threshold", func(r *SubmitRequest) { c := int64(1); r.Threshold.FailureCount = &c }, "threshold"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			given := base
			tt.edit(&given)
			if f, _, _ := sameRequest(base, given); f != tt.want {
				t.Errorf("sameRequest = %q, want %q", f, tt.want)
			}
		})
	}
}

// No hot partition at any size (shard counts follow the stack's flow, not
// the item count): the item-row and counter partition counts derive from
// the item function's maximum concurrency × items per invocation, capped
// by what a small batch can write. Removing the flow term (sizing by item
// count alone) fails the 10^4 and 5·10^4 rows.
func TestNoHotPartitionShardCounts(t *testing.T) {
	flow := StackFlow(100, 10)
	if flow != DefaultItemsPerSecond {
		t.Fatalf("StackFlow(100, 10) = %d, want %d", flow, DefaultItemsPerSecond)
	}
	for _, tt := range []struct {
		name       string
		items      int64
		flow       int
		wantList   int
		wantCounts int
	}{
		{"one item", 1, flow, 1, 2},
		{"10^3 items: as many as its writes need", 1_000, flow, 8, 2},
		{"10^4 items: the flow's", 10_000, flow, 80, 2},
		{"5·10^4 items", 50_000, flow, 80, 2},
		{"10^7 items: the same", 10_000_000, flow, 80, 2},
		{"default flow when unknown", 10_000_000, 0, 80, 2},
		{"max concurrency 1000", 10_000_000, StackFlow(1000, 10), 800, MaxCounterShards},
		{"clamped at 1,024", 10_000_000, StackFlow(1000, 10) * 2, MaxListShards, MaxCounterShards},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ListShards(tt.items, tt.flow); got != tt.wantList {
				t.Errorf("ListShards(%d, %d) = %d, want %d", tt.items, tt.flow, got, tt.wantList)
			}
			if got := CounterShards(tt.flow); got != tt.wantCounts {
				t.Errorf("CounterShards(%d) = %d, want %d", tt.flow, got, tt.wantCounts)
			}
			// The planned units per second on one item partition stay
			// within the budget at the flow (the busiest of the batch's
			// own keys can take no more than all its items write).
			f := tt.flow
			if f <= 0 {
				f = DefaultItemsPerSecond
			}
			perKey := float64(min(int64(f), tt.items)) * ShardWriteUnitsPerItem / float64(ListShards(tt.items, tt.flow))
			if ListShards(tt.items, tt.flow) < MaxListShards && perKey > ShardWriteBudget {
				t.Errorf("%.0f write units/s per item partition, budget %d", perKey, ShardWriteBudget)
			}
		})
	}
	for n := 1; n < 40; n += 7 {
		if s := Shard("some-key", n); s < 0 || s >= n {
			t.Fatalf("Shard out of range: %d of %d", s, n)
		}
	}
}

// The stack's default items per message (Submitter.ItemsPerMessage,
// BULKRUN_ITEMS_PER_MESSAGE) applies to a request that sets none; a
// request's own value wins; a request with max_concurrency gets it too
// (a pack holds one slot and runs its items one at a time).
func TestSubmitterDefaultItemsPerMessage(t *testing.T) {
	items := json.RawMessage(`[1]`)
	for _, tt := range []struct {
		name      string
		stack     int
		req       SubmitRequest
		wantItems int
	}{
		{"no default", 0, SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}}, 1},
		{"stack default", 10, SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}}, 10},
		{"request wins", 10, SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, ItemsPerMessage: 3}, 3},
		{"max concurrency gets the default too", 10, SubmitRequest{Pipeline: "webhook", Source: SourceSpec{Items: items}, MaxConcurrency: 5}, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Submitter{Pipelines: []string{"webhook"}, MaxAttempts: 3, ItemsPerMessage: tt.stack}
			req := tt.req
			if err := s.prepare(&req); err != nil {
				t.Fatal(err)
			}
			if req.ItemsPerMessage != tt.wantItems {
				t.Fatalf("items per message %d, want %d", req.ItemsPerMessage, tt.wantItems)
			}
		})
	}
}
