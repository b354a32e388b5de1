package api

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func pct(v float64) *float64 { return &v }

func cnt(v int64) *int64 { return &v }

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
