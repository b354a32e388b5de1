package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
)

// Cost sums drift: amounts are summed as exact decimals, so the census, the
// report and the CLI show 1, not 0.9999999999999999. Guards "the cost"
// of the census (README, first paragraph; docs/design.md "Vocabulary").
func TestCostSumsExact(t *testing.T) {
	repeat := func(n int, c Cost) []Cost {
		out := make([]Cost, n)
		for i := range out {
			out[i] = c
		}
		return out
	}
	tests := []struct {
		name  string
		items []Cost
		want  string // String()
		json  string
	}{
		{"ten of 0.1 usd", repeat(10, Cost{"usd": 0.1}), "usd=1", `{"usd":1}`},
		{"ten of 0.07 eur", repeat(10, Cost{"eur": 0.07}), "eur=0.7", `{"eur":0.7}`},
		{"0.1 + 0.2", []Cost{{"usd": 0.1}, {"usd": 0.2}}, "usd=0.3", `{"usd":0.3}`},
		{"a million of 0.000001", repeat(1_000_000, Cost{"usd": 0.000001}), "usd=1", `{"usd":1}`},
		{"tiny amounts, no exponent", repeat(3, Cost{"usd": 1e-7}), "usd=0.0000003", `{"usd":0.0000003}`},
		{"large and small", []Cost{{"tokens": 1e21}, {"tokens": 1}}, "tokens=1000000000000000000001", `{"tokens":1000000000000000000001}`},
		{"refund", []Cost{{"usd": 0.1}, {"usd": -0.3}}, "usd=-0.2", `{"usd":-0.2}`},
		{"back to zero", []Cost{{"usd": 0.1}, {"usd": -0.1}}, "usd=0", `{"usd":0}`},
		{"several names", []Cost{{"calls": 1, "usd": 0.07}, {"calls": 1, "usd": 0.07, "tokens": 812}}, "calls=2 tokens=812 usd=0.14", `{"calls":2,"tokens":812,"usd":0.14}`},
		{"not finite amounts skipped", []Cost{{"usd": 0.1}, {"usd": math.NaN()}, {"usd": math.Inf(1)}}, "usd=0.1", `{"usd":0.1}`},
		{"nothing", nil, "", `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := CostSum{}
			for _, c := range tt.items {
				s.Add(c)
			}
			if got := s.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			b, err := json.Marshal(s)
			if err != nil || string(b) != tt.json {
				t.Fatalf("JSON %s %v, want %s", b, err, tt.json)
			}
			var back CostSum
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if again, _ := json.Marshal(back); string(again) != tt.json {
				t.Errorf("round trip %s, want %s", again, tt.json)
			}
		})
	}
}

// Stored sums are read exactly, whatever JSON number form they take, and
// anything but numbers is refused naming the cost.
func TestCostSumDecode(t *testing.T) {
	tests := []struct{ in, want, wantErr string }{
		{`{"usd": 0.1000000000000000000001}`, `{"usd":0.1000000000000000000001}`, ""},
		{`{"usd": 1e-7, "calls": 2E3}`, `{"calls":2000,"usd":0.0000001}`, ""},
		{`{"usd": 1.500}`, `{"usd":1.5}`, ""},
		{`null`, `{}`, ""},
		{`{"usd": "1"}`, "", "cost sums"},
		{`[1]`, "", "cost sums"},
	}
	for _, tt := range tests {
		var s CostSum
		err := json.Unmarshal([]byte(tt.in), &s)
		if tt.wantErr != "" {
			if err == nil {
				t.Errorf("%s: no error, want %q", tt.in, tt.wantErr)
			}
			continue
		}
		b, _ := json.Marshal(s)
		if err != nil || string(b) != tt.want {
			t.Errorf("%s: %s %v, want %s", tt.in, b, err, tt.want)
		}
	}
}

// BenchmarkCostSumAdd measures the exact sum's price per item (finalize adds
// every item's cost): go test -run '^$' -bench CostSumAdd ./shared/pipeline/
func BenchmarkCostSumAdd(b *testing.B) {
	b.ReportAllocs()
	s := CostSum{}
	c := Cost{"calls": 1, "usd": 0.0021}
	for b.Loop() {
		s.Add(c)
	}
}

// TestCostPlusAddsInDecimal guards an item's `spent` (docs/pipelines.md "Pipelines"): the
// cost of every attempt is added attempt by attempt, and a binary-float
// sum would drift (0.1 + 0.2 = 0.30000000000000004).
func TestCostPlusAddsInDecimal(t *testing.T) {
	tests := []struct {
		name string
		a, b Cost
		want Cost
	}{
		{"both empty", nil, nil, nil},
		{"first attempt", nil, Cost{"calls": 1}, Cost{"calls": 1}},
		{"a retry without cost", Cost{"calls": 2}, nil, Cost{"calls": 2}},
		{"decimal", Cost{"usd": 0.1, "calls": 1}, Cost{"usd": 0.2, "calls": 1}, Cost{"usd": 0.3, "calls": 2}},
		{"names of either", Cost{"usd": 0.07}, Cost{"tokens": 1200}, Cost{"usd": 0.07, "tokens": 1200}},
		{"NaN skipped", Cost{"usd": 0.5}, Cost{"usd": math.NaN()}, Cost{"usd": 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := maps.Clone(tt.a)
			got := tt.a.Plus(tt.b)
			if !maps.Equal(got, tt.want) || !maps.Equal(a, tt.a) {
				t.Fatalf("%v.Plus(%v) = %v (receiver now %v), want %v", a, tt.b, got, tt.a, tt.want)
			}
		})
	}
}

// The cost record's limits (MaxCostNames, MaxCostNameBytes): a
// record within them passes; more names, an empty, long or non-UTF-8 name
// is refused naming the limit.
func TestCheckCost(t *testing.T) {
	many := Cost{}
	for i := range MaxCostNames + 1 {
		many[fmt.Sprintf("c%03d", i)] = 1
	}
	ten := Cost{}
	for i := range MaxCostNames {
		ten[fmt.Sprintf("c%03d", i)] = 1
	}
	for _, tc := range []struct {
		name string
		c    Cost
		want string
	}{
		{"none", nil, ""},
		{"at the limit", ten, ""},
		{"a 40-byte name", Cost{strings.Repeat("n", MaxCostNameBytes): 1}, ""},
		{"too many names", many, "11 cost names, at most 10 (pipeline.MaxCostNames)"},
		{"a 41-byte name", Cost{strings.Repeat("n", MaxCostNameBytes+1): 1}, "pipeline.MaxCostNameBytes"},
		{"an empty name", Cost{"": 1}, "MaxCostNameBytes"},
		{"not UTF-8", Cost{"a\xffb": 1}, "MaxCostNameBytes"},
	} {
		err := CheckCost(tc.c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrCostRecord) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrCostRecord saying %q", tc.name, err, tc.want)
		}
	}
}

// A cost record beyond its limits is folded, never refused (the item's
// work was done): the first MaxCostNames − 2 valid names in byte order
// keep their amounts, every other name's amount is summed under
// FoldedCost and counted in FoldedCostNames; a folded record folded again
// keeps its counts; the result always passes CheckCost.
func TestBoundCost(t *testing.T) {
	hundred := Cost{}
	for i := range 100 {
		hundred[fmt.Sprintf("c%03d", i)] = 0.1
	}
	ten := Cost{}
	for i := range MaxCostNames {
		ten[fmt.Sprintf("c%03d", i)] = 1
	}
	eleven := maps.Clone(ten)
	eleven["c999"] = 2
	a, _ := BoundCost(Cost{"x1": 1, "x2": 1, "x3": 1, "x4": 1, "x5": 1, "x6": 1, "x7": 1, "x8": 1, "y1": 1, "y2": 1, "y3": 1})
	b, _ := BoundCost(Cost{"x1": 1, "z1": 1, "z2": 1, "z3": 1, "z4": 1, "z5": 1, "z6": 1, "z7": 1, "z8": 1, "z9": 1, "zz": 1})
	for _, tc := range []struct {
		name   string
		c      Cost
		want   Cost
		folded int
	}{
		{"none", nil, nil, 0},
		{"at the limit", ten, ten, 0},
		{"one name too many", eleven, Cost{"c000": 1, "c001": 1, "c002": 1, "c003": 1, "c004": 1, "c005": 1, "c006": 1, "c007": 1,
			FoldedCost: 4, FoldedCostNames: 3}, 3},
		{"100 names", hundred, Cost{"c000": 0.1, "c001": 0.1, "c002": 0.1, "c003": 0.1, "c004": 0.1, "c005": 0.1, "c006": 0.1, "c007": 0.1,
			FoldedCost: 9.2, FoldedCostNames: 92}, 92},
		{"names that are not valid", Cost{"calls": 1, "": 2, strings.Repeat("n", MaxCostNameBytes+1): 3, "a\xffb": 4},
			Cost{"calls": 1, FoldedCost: 9, FoldedCostNames: 3}, 3},
		{"NaN folded is skipped", Cost{"calls": 1, "": math.NaN()}, Cost{"calls": 1, FoldedCost: 0, FoldedCostNames: 1}, 1},
		{"folded records folded again", a.Plus(b), Cost{"x1": 2, "x2": 1, "x3": 1, "x4": 1, "x5": 1, "x6": 1, "x7": 1, "x8": 1,
			FoldedCost: 13, FoldedCostNames: 13}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := maps.Clone(tc.c)
			got, folded := BoundCost(tc.c)
			if !maps.Equal(got, tc.want) || folded != tc.folded || !maps.EqualFunc(in, tc.c, sameAmount) {
				t.Fatalf("BoundCost = %v, %d folded (input now %v); want %v, %d", got, folded, tc.c, tc.want, tc.folded)
			}
			if err := CheckCost(got); err != nil {
				t.Fatalf("the bounded record: %v", err)
			}
		})
	}
}

func sameAmount(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// TestBoundCostKeepsTheSpend: an item's record folded for having too
// many names keeps SpendCostName, which sorts after them.
func TestBoundCostKeepsTheSpend(t *testing.T) {
	c := Cost{SpendCostName: 0.25}
	for i := range MaxCostNames + 10 {
		c[fmt.Sprintf("a%03d", i)] = 1
	}
	out, folded := BoundCost(c)
	if out[SpendCostName] != 0.25 || folded == 0 || len(out) > MaxCostNames {
		t.Errorf("BoundCost: usd %v, %d folded, %d names (max %d)", out[SpendCostName], folded, len(out), MaxCostNames)
	}
}
