package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// CostSum is a cost rollup: name → the exact decimal sum of that name's
// amounts over the items counted. Each item amount (a float64 of [Cost]) is
// taken as its shortest round-trip decimal (0.1 is 0.1, not
// 0.1000000000000000055…) and added in decimal arithmetic, so no binary
// rounding accumulates: ten items of 0.1 sum to exactly 1, ten of 0.07 to
// 0.7, whatever the number of items or their order.
//
// JSON: an object of plain decimal numbers, names in byte order, e.g.
// {"calls": 10, "usd": 0.7}; never an exponent, never float noise.
// Decoding takes any JSON number exactly (1e-7 included). A nil CostSum
// is empty (JSON {}). Not safe for concurrent writes.
type CostSum map[string]decimal.Decimal

// Add adds each finite amount of c under its name. NaN and ±Inf amounts
// are skipped: they have no decimal value.
func (s CostSum) Add(c Cost) {
	for name, v := range c {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		s[name] = s[name].Add(decimal.NewFromFloat(v))
	}
}

// Text returns the sum under name in plain decimal ("1", "0.7", "-2.5"),
// "0" when the name is absent.
func (s CostSum) Text(name string) string { return plain(s[name]) }

// Names returns the names in byte order.
func (s CostSum) Names() []string {
	names := make([]string, 0, len(s))
	for k := range s {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// String is "calls=10 usd=0.7" (names in byte order).
func (s CostSum) String() string {
	parts := make([]string, 0, len(s))
	for _, k := range s.Names() {
		parts = append(parts, k+"="+s.Text(k))
	}
	return strings.Join(parts, " ")
}

// MarshalJSON writes the sums as JSON numbers in plain decimal.
func (s CostSum) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range s.Names() {
		if i > 0 {
			b.WriteByte(',')
		}
		name, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(name)
		b.WriteByte(':')
		b.WriteString(plain(s[k]))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object of JSON numbers exactly; anything else is
// an error naming the cost.
func (s *CostSum) UnmarshalJSON(data []byte) error {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("cost sums: %w", err)
	}
	if raw == nil {
		*s = nil
		return nil
	}
	out := make(CostSum, len(raw))
	for k, v := range raw {
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("cost sums: cost %q is %T, want a JSON number", k, v)
		}
		d, err := decimal.NewFromString(n.String())
		if err != nil {
			return fmt.Errorf("cost %q: %w", k, err)
		}
		out[k] = d
	}
	*s = out
	return nil
}

// plain formats d in plain decimal without trailing zeros, independent of
// the decimal package's global formatting switches.
func plain(d decimal.Decimal) string {
	places := max(0, -d.Exponent())
	t := d.StringFixed(places)
	if strings.Contains(t, ".") {
		t = strings.TrimRight(strings.TrimRight(t, "0"), ".")
	}
	if t == "-0" {
		t = "0"
	}
	return t
}

// Plus returns a new Cost with c and d added name by name in decimal
// arithmetic (each amount taken as its shortest decimal, as in [CostSum]),
// each sum stored as the float64 nearest to it: 0.1 plus 0.2 is 0.3, not
// 0.30000000000000004. NaN and ±Inf amounts are skipped; nil when both are
// empty. c and d are not changed.
func (c Cost) Plus(d Cost) Cost {
	if len(c) == 0 && len(d) == 0 {
		return nil
	}
	s := CostSum{}
	s.Add(c)
	s.Add(d)
	out := make(Cost, len(s))
	for k, v := range s {
		out[k] = v.InexactFloat64()
	}
	return out
}

// Limits of a result's cost record (Result.Cost), so that what an item
// reports cannot push a row past DynamoDB's 400 KB item limit (Amazon
// DynamoDB developer guide, "Service, account, and table quotas", Item
// size, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html):
// a pack row holds up to 100 items, each with its key (up to 1,024 bytes),
// its cost and what its run spent; 10 names of 40 bytes keep the two cost
// maps of one item under ≈ 1.3 KB and a full pack row under ≈ 350 KB.
// A record beyond them is folded (BoundCost), never refused: the item's
// work was done, and failing it would make a rerun do it again.
const (
	MaxCostNames     = 10
	MaxCostNameBytes = 40
)

// The names under which BoundCost folds a cost record beyond its limits.
// They count as cost names like any other (a rollup sums them over the
// items); a pipeline that reports them itself has the folded amounts
// added to its own.
const (
	// FoldedCost holds the sum of the folded names' amounts, whatever
	// their units: it says that names were folded and how much they
	// weighed, not a quantity of one kind.
	FoldedCost = "bulkrun.folded"
	// FoldedCostNames counts the names folded into FoldedCost.
	FoldedCostNames = "bulkrun.folded_names"
)

// ErrCostRecord marks a cost record beyond MaxCostNames or
// MaxCostNameBytes (CheckCost). bulkrun does not fail an item for it: it
// records the record folded (BoundCost).
var ErrCostRecord = errors.New("cost record over its limits")

// CheckCost returns nil when c is within MaxCostNames names of 1 to
// MaxCostNameBytes bytes of valid UTF-8, else an error matching
// ErrCostRecord that names the limit and the first name at fault.
func CheckCost(c Cost) error {
	if len(c) > MaxCostNames {
		return fmt.Errorf("%w: %d cost names, at most %d (pipeline.MaxCostNames)", ErrCostRecord, len(c), MaxCostNames)
	}
	for name := range c {
		if !validCostName(name) {
			return fmt.Errorf("%w: cost name %q: 1 to %d bytes of UTF-8 (pipeline.MaxCostNameBytes)", ErrCostRecord, CutText(name, 64), MaxCostNameBytes)
		}
	}
	return nil
}

func validCostName(name string) bool {
	return name != "" && len(name) <= MaxCostNameBytes && utf8.ValidString(name)
}

// SpendCostName is the cost name a pipeline reports its spend in US
// dollars under ("usd"; api.SpendCostName, which budgets read): folding
// never folds it, so that a record with many names keeps its spend.
const SpendCostName = "usd"

// BoundCost returns c within its limits and how many names it folded.
// A record CheckCost passes is returned as is, with 0. Otherwise
// SpendCostName and then the first valid names in byte order, MaxCostNames
// − 2 in all (FoldedCost and
// FoldedCostNames aside) keep their amounts, and every other name —
// beyond them, empty, longer than MaxCostNameBytes or not UTF-8 — is
// folded: its amount added to FoldedCost (in decimal, as Plus adds;
// NaN and ±Inf skipped) and counted in FoldedCostNames. Amounts already
// under those two names are added to, so a folded record folded again
// keeps its counts: BoundCost(a.Plus(b)) is how a run's spent stays
// bounded. The result has at most MaxCostNames names. c is not changed.
func BoundCost(c Cost) (Cost, int) {
	if CheckCost(c) == nil {
		return c, 0
	}
	var keep, fold []string
	for name := range c {
		switch {
		case name == FoldedCost || name == FoldedCostNames:
		case validCostName(name):
			keep = append(keep, name)
		default:
			fold = append(fold, name)
		}
	}
	sort.Slice(keep, func(i, j int) bool { // SpendCostName first, then byte order
		if (keep[i] == SpendCostName) != (keep[j] == SpendCostName) {
			return keep[i] == SpendCostName
		}
		return keep[i] < keep[j]
	})
	if n := MaxCostNames - 2; len(keep) > n {
		fold = append(fold, keep[n:]...)
		keep = keep[:n]
	}
	out := make(Cost, len(keep)+2)
	for _, name := range keep {
		out[name] = c[name]
	}
	sum := CostSum{}
	sum.Add(Cost{FoldedCost: c[FoldedCost], FoldedCostNames: c[FoldedCostNames]})
	for _, name := range fold {
		sum.Add(Cost{FoldedCost: c[name]})
	}
	sum.Add(Cost{FoldedCostNames: float64(len(fold))})
	out[FoldedCost] = sum[FoldedCost].InexactFloat64()
	out[FoldedCostNames] = sum[FoldedCostNames].InexactFloat64()
	return out, len(fold)
}

// Fold is s with at most max(n, 3) names: SpendCostName (the spend a
// budget reads, never folded) and the first of the others in byte
// order, n − 2 in all (FoldedCost and FoldedCostNames aside), kept; the
// others' sums added under FoldedCost and their number under
// FoldedCostNames, as BoundCost folds an item's record. s itself when it
// has at most n names (n > 2); n ≤ 2 folds every name. A census counter
// write folds its sums so (at most api.MaxCensusCostNames names, so that
// its update expression stays within DynamoDB's 4 KB): the live view's
// cost is then folded, the report's census counts every name from the
// item rows. s is not changed.
func (s CostSum) Fold(n int) CostSum {
	if len(s) <= n && n > 2 {
		return s
	}
	names := s.Names()
	keep := make([]string, 0, len(names))
	out := CostSum{}
	spend := 0
	if _, ok := s[SpendCostName]; ok {
		spend = 1
	}
	for _, name := range names {
		switch {
		case name == FoldedCost || name == FoldedCostNames:
			out[name] = out[name].Add(s[name])
		case name == SpendCostName:
			out[name] = s[name] // the spend a budget reads is never folded
		case len(keep) < n-2-spend:
			keep = append(keep, name)
			out[name] = s[name]
		default:
			out[FoldedCost] = out[FoldedCost].Add(s[name])
			out[FoldedCostNames] = out[FoldedCostNames].Add(decimal.NewFromInt(1))
		}
	}
	return out
}
