package eta

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func at(d time.Duration, done int64, cost string) Sample {
	s := Sample{AtMs: t0.Add(d).UnixMilli(), Done: done}
	if cost != "" {
		s.Cost = pipeline.CostSum{"usd": decimal.RequireFromString(cost)}
	}
	return s
}

// TestRecent guards which sample the recent pace is measured from: the
// oldest between MinSpan and Window old; none when every sample is too
// young or too old, or when the window ended no item (the caller falls
// back to the run's average); the window's cost is the cost now less the
// sample's.
func TestRecent(t *testing.T) {
	now := t0.Add(100 * time.Second)
	usd := pipeline.CostSum{"usd": decimal.RequireFromString("1.5")}
	tests := []struct {
		name      string
		ring      []Sample
		done      int64
		wantOK    bool
		wantSince time.Duration
		wantEnded int64
		wantRate  float64
		wantCost  string
	}{
		{"none", nil, 500, false, 0, 0, 0, ""},
		{"too young", []Sample{at(80*time.Second, 400, "")}, 500, false, 0, 0, 0, ""},
		{"too old", []Sample{at(30*time.Second, 100, "")}, 500, false, 0, 0, 0, ""},
		{"oldest in the window", []Sample{at(30*time.Second, 100, "0.1"), at(45*time.Second, 200, "0.5"), at(60*time.Second, 300, "0.9"), at(75*time.Second, 400, "1.2")}, 500,
			true, 45 * time.Second, 300, 300.0 / 55, "1"},
		{"at the window's edge", []Sample{at(40*time.Second, 200, "")}, 500, true, 40 * time.Second, 300, 5, ""},
		{"at the shortest span", []Sample{at(70*time.Second, 350, "")}, 500, true, 70 * time.Second, 150, 5, ""},
		{"no item ended in the window", []Sample{at(50*time.Second, 500, "")}, 500, false, 0, 0, 0, ""},
		{"counters read behind the sample", []Sample{at(50*time.Second, 510, "")}, 500, false, 0, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := Recent(tt.ring, now, tt.done, usd, nil)
			if ok != tt.wantOK {
				t.Fatalf("ok %v, want %v (%+v)", ok, tt.wantOK, p)
			}
			if !ok {
				return
			}
			if !p.Since.Equal(t0.Add(tt.wantSince)) || p.Ended != tt.wantEnded || p.RatePerSecond != tt.wantRate {
				t.Errorf("pace %+v, want since +%s, ended %d at %v/s", p, tt.wantSince, tt.wantEnded, tt.wantRate)
			}
			if tt.wantCost != "" && p.Cost["usd"].String() != tt.wantCost {
				t.Errorf("window cost %s, want %s", p.Cost, tt.wantCost)
			}
		})
	}
}

// TestRecentWithoutCost: a sample kept without its cost measures the
// pace and says the cost is not known (NoCost), with no cost.
func TestRecentWithoutCost(t *testing.T) {
	s := at(0, 100, "")
	s.NoCost = true
	p, ok := Recent([]Sample{s}, t0.Add(40*time.Second), 300, pipeline.CostSum{"usd": decimal.NewFromInt(3)}, nil)
	if !ok || !p.NoCost || p.Cost != nil || p.Ended != 200 {
		t.Fatalf("pace %+v ok %v", p, ok)
	}
}

// TestNext guards the ring's writes: none while the newest sample is
// younger than SampleEvery; else the samples of the last Window +
// SampleEvery and this read's, at most MaxSamples, oldest first.
func TestNext(t *testing.T) {
	if _, write := Next([]Sample{at(0, 10, "")}, t0.Add(SampleEvery-time.Millisecond), 20, nil, nil); write {
		t.Error("wrote within SampleEvery of the newest sample")
	}
	if _, write := Next([]Sample{at(time.Minute, 10, "")}, t0, 20, nil, nil); write {
		t.Error("wrote before a sample of a later time")
	}
	ring, write := Next(nil, t0, 20, nil, nil)
	if !write || len(ring) != 1 || ring[0].Done != 20 || ring[0].AtMs != t0.UnixMilli() {
		t.Fatalf("first sample: %+v %v", ring, write)
	}
	var old []Sample
	for i := range 10 {
		old = append(old, at(time.Duration(i)*SampleEvery, int64(i*100), ""))
	}
	now := t0.Add(10 * SampleEvery)
	ring, write = Next(old, now, 1000, nil, nil)
	if !write || len(ring) > MaxSamples {
		t.Fatalf("ring of %d samples, at most %d", len(ring), MaxSamples)
	}
	for i, s := range ring {
		if now.Sub(s.At()) > Window+SampleEvery {
			t.Errorf("sample %d is %s old", i, now.Sub(s.At()))
		}
		if i > 0 && s.AtMs <= ring[i-1].AtMs {
			t.Errorf("sample %d not after %d", i, i-1)
		}
	}
	if last := ring[len(ring)-1]; last.Done != 1000 || last.AtMs != now.UnixMilli() {
		t.Errorf("newest %+v", last)
	}
	if _, ok := Recent(ring, now.Add(SampleEvery), 1100, nil, nil); !ok {
		t.Error("a ring sampled every SampleEvery measures no recent pace")
	}
}

// TestNextStaysUnderItsBytes: costs under many long names are left out
// of this read's sample (NoCost) and the ring stays within MaxRingBytes.
func TestNextStaysUnderItsBytes(t *testing.T) {
	cost := pipeline.CostSum{}
	for i := range 20 {
		cost[strings.Repeat(string(rune('a'+i)), 40)] = decimal.RequireFromString("123456.123456789")
	}
	var ring []Sample
	for i := range 8 {
		var write bool
		ring, write = Next(ring, t0.Add(time.Duration(i)*SampleEvery), int64(i*10), cost, nil)
		if !write {
			t.Fatalf("read %d wrote nothing", i)
		}
		if n := Size(ring); n > MaxRingBytes {
			t.Fatalf("read %d: ring of %d bytes, at most %d", i, n, MaxRingBytes)
		}
		if last := ring[len(ring)-1]; !last.NoCost || last.Cost != nil {
			t.Fatalf("read %d: a sample over the bound kept its cost: %+v", i, last)
		}
	}
	small, _ := Next(nil, t0, 1, pipeline.CostSum{"usd": decimal.NewFromInt(1)}, nil)
	if small[0].NoCost || small[0].Cost["usd"].IntPart() != 1 {
		t.Errorf("a small cost left out: %+v", small[0])
	}
}

// TestDecode: a ring round-trips through its JSON; bad JSON is an error
// naming the ring.
func TestDecode(t *testing.T) {
	in := []Sample{at(0, 1, "0.25"), {AtMs: 5, Done: 2, NoCost: true}}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil || len(out) != 2 || out[0].Cost["usd"].String() != "0.25" || !out[1].NoCost || out[1].AtMs != 5 {
		t.Fatalf("decoded %+v, %v", out, err)
	}
	if _, err := Decode([]byte(`{"t":1}`)); err == nil || !strings.Contains(err.Error(), "pace ring") {
		t.Errorf("bad ring: %v", err)
	}
}
