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

// A fan-out's sent mark: messages before Upto are on the queue but the
// unsent ones; After, on a delivery that made messages 0 … made−1,
// keeps the earlier unsent ones it had not reached and adds the new.
func TestSentMark(t *testing.T) {
	var none *SentMark
	if none.Has(0) {
		t.Fatal("no mark: nothing is on the queue")
	}
	m := none.After(30, []int64{12, 17})
	if m.Upto != 30 || !m.Has(0) || m.Has(12) || m.Has(17) || !m.Has(29) || m.Has(30) {
		t.Fatalf("mark %+v", m)
	}
	// The next delivery sends 12 and 17 again and fails 17 and 40 (it made
	// 0 … 44): 12 is on the queue now, 17 and 40 are not.
	m = m.After(45, []int64{17, 40})
	if m.Upto != 45 || !m.Has(12) || m.Has(17) || m.Has(40) || !m.Has(44) {
		t.Fatalf("mark %+v", m)
	}
	// A delivery that failed early, at message 14 (made 0 … 14): 17 stays
	// unsent although it was not reached, 12 was sent.
	m = (&SentMark{Upto: 30, Unsent: []int64{12, 17}}).After(15, []int64{14})
	if m.Upto != 30 || m.Has(14) || m.Has(17) || !m.Has(12) {
		t.Fatalf("mark %+v", m)
	}
	bad := Message{Kind: KindFanout, BatchID: "b", Run: 1, ManifestKey: "m", Chunk: &source.Chunk{Count: 1}, Sent: &SentMark{Upto: 3, Unsent: []int64{5}}}
	if err := bad.Validate(); err == nil {
		t.Fatal("an unsent message past upto is accepted")
	}
}
