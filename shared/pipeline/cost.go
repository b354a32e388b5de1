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
const (
	MaxCostNames     = 10
	MaxCostNameBytes = 40
)

// ErrCostRecord marks a cost record beyond MaxCostNames or
// MaxCostNameBytes: the item fails permanently (a pipeline that reports
// that many costs would for every item), its cost not recorded.
var ErrCostRecord = errors.New("cost record over its limits")

// CheckCost returns nil when c is within MaxCostNames names of 1 to
// MaxCostNameBytes bytes of valid UTF-8, else an error matching
// ErrCostRecord that names the limit and the first name at fault.
func CheckCost(c Cost) error {
	if len(c) > MaxCostNames {
		return fmt.Errorf("%w: %d cost names, at most %d (pipeline.MaxCostNames)", ErrCostRecord, len(c), MaxCostNames)
	}
	for name := range c {
		if name == "" || len(name) > MaxCostNameBytes || !utf8.ValidString(name) {
			return fmt.Errorf("%w: cost name %q: 1 to %d bytes of UTF-8 (pipeline.MaxCostNameBytes)", ErrCostRecord, CutText(name, 64), MaxCostNameBytes)
		}
	}
	return nil
}
