package ledger

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/source"
)

// TestItemMessageBodyTravelsThroughSQS guards the product line "every valid
// manifest line travels": an item message body holds only characters of
// SQS's allowed set (SendMessage, MessageBody), whatever the key and input
// hold, and decodes to the same key and the same input value.
func TestItemMessageBodyTravelsThroughSQS(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		input string // manifest line input (compact JSON)
	}{
		{"raw U+FFFF in the input", "k1", "{\"name\":\"a\uffffb\"}"},
		{"escaped \\uffff in the input", "k2", `{"name":"a\uffffb"}`},
		{"raw U+FFFE in the input", "k3", "[\"\ufffe\"]"},
		{"U+FFFF in the key", "key-\uffff", `{}`},
		{"U+FFFE and U+FFFF in key and input", "\ufffe\uffff", "\"\ufffe\uffff\""},
		{"allowed edges untouched", "edge-\ufffd\ue000\U0010FFFF\U00010000", "\"\ud7ff\ufffd\ue000\U0010FFFF\""},
		{"escaped controls stay escaped", "k6", `"tab\t nul\u0000 bell\u0007"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := source.ManifestLine{Key: tt.key, Input: json.RawMessage(tt.input)}
			body, err := ItemMessageBody("b1", 1, "batches/b1/manifests/m.jsonl", source.Chunk{Count: 1}, line, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range string(body) {
				if !SQSAllowed(r) || (r == utf8.RuneError && !strings.HasPrefix(string(body[i:]), "\ufffd")) {
					t.Fatalf("body holds %U at byte %d, outside SQS's allowed set: %q", r, i, body)
				}
			}
			var m Message
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatalf("body is not JSON: %v: %q", err, body)
			}
			if m.Key != tt.key {
				t.Fatalf("key %q, want %q", m.Key, tt.key)
			}
			var got, want any
			if err := json.Unmarshal(m.Input, &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal([]byte(tt.input), &want)
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			if !bytes.Equal(gj, wj) {
				t.Fatalf("input decodes to %s, want %s", gj, wj)
			}
		})
	}
}

func TestSQSAllowed(t *testing.T) {
	allowed := []rune{0x9, 0xA, 0xD, 0x20, 'a', 0xD7FF, 0xE000, 0xFFFD, 0x10000, 0x10FFFF}
	refused := []rune{0x0, 0x1, 0x8, 0xB, 0xC, 0xE, 0x1F, 0xD800, 0xDFFF, 0xFFFE, 0xFFFF}
	for _, r := range allowed {
		if !SQSAllowed(r) {
			t.Errorf("SQSAllowed(%U) = false", r)
		}
	}
	for _, r := range refused {
		if SQSAllowed(r) {
			t.Errorf("SQSAllowed(%U) = true", r)
		}
	}
	if got := string(SQSSafe([]byte("\"a\x01\xff\uffff\""))); got != `"a\u0001\ufffd\uffff"` {
		t.Errorf("SQSSafe = %q", got)
	}
	clean := []byte(`{"a":"é"}`)
	if got := SQSSafe(clean); &got[0] != &clean[0] {
		t.Error("SQSSafe copied a clean body")
	}
}

// BenchmarkSQSSafe measures the check every message body pays (a clean
// 1 KiB body: one scan, no copy) and the rewrite of a body that needs it.
func BenchmarkSQSSafe(b *testing.B) {
	clean := []byte(`{"key":"k","input":"` + strings.Repeat("é", 512) + `"}`)
	dirty := []byte(`{"key":"k","input":"` + strings.Repeat("é\uffff", 256) + `"}`)
	b.Run("clean", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(clean)))
		for b.Loop() {
			SQSSafe(clean)
		}
	})
	b.Run("escaped", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(dirty)))
		for b.Loop() {
			SQSSafe(dirty)
		}
	})
}
