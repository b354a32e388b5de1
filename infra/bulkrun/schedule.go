package bulkrun

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxScheduleExpressionBytes is the longest schedule expression EventBridge
// takes (EventBridge API reference, "PutRule", ScheduleExpression: maximum
// length 256).
const MaxScheduleExpressionBytes = 256

// MaxScheduleInputBytes is the longest input EventBridge passes a rule's
// target: a schedule's event, {"bulkrun_schedule": name, "time": <the
// event's time>, "request": the submit request}, is an input transformer
// whose template takes at most 8192 characters (Amazon EventBridge API
// Reference, "InputTransformer", InputTemplate: maximum length 8192).
const MaxScheduleInputBytes = 8192

// scheduleInputBytes is the length of sc's input template as CDK writes
// it: the event's time is the placeholder <aws.events.event.time>.
func scheduleInputBytes(sc Schedule) int {
	var req any
	_ = json.Unmarshal(sc.Request, &req)
	b, _ := json.Marshal(map[string]any{"bulkrun_schedule": sc.Name, "time": "<aws.events.event.time>", "request": req})
	return len(b)
}

// rateRE is "rate(value unit)": one space, a whole number, a unit.
var rateRE = regexp.MustCompile(`^rate\(([0-9]+) ([a-z]+)\)$`)

// CheckScheduleExpression returns nil when expr is a schedule expression
// that EventBridge rules accept, or an error saying what is wrong, by the
// rules of "Setting a schedule pattern for scheduled rules (legacy) in
// Amazon EventBridge"
// (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html):
//
//   - rate(value unit): value a whole number ≥ 1; unit minute, hour or day,
//     singular when value is 1 and plural otherwise (rate(1 hour),
//     rate(5 minutes));
//   - cron(Minutes Hours Day-of-month Month Day-of-week Year): six fields
//     separated by white space, evaluated in UTC. Values: minutes 0–59,
//     hours 0–23, day-of-month 1–31, month 1–12 or JAN–DEC, day-of-week
//     1–7 or SUN–SAT (1 is Sunday), year 1970–2199. Every field takes
//     "*", lists "a,b", ranges "a-b" (a ≤ b) and increments "a/n" or
//     "*/n" (not day-of-week), n from 1 to the field's largest value
//     (EventBridge refuses cron(*/60 * * * ? *): at most */59 minutes,
//     */23 hours, */31 days, */12 months); day-of-month also "L" (last day), "LW" and
//     "nW" (weekday nearest day n); day-of-week also "L", "nL" (last
//     weekday n of the month) and "n#k" (k-th weekday n, k 1–5, alone in
//     its field). Exactly one of day-of-month and day-of-week is "?": a
//     value or "*" in one needs "?" in the other.
//
// Names of months and days are matched case-insensitively. CDK only warns
// about such mistakes, and the emulator runs what AWS refuses, so the
// stack checks them at synth.
func CheckScheduleExpression(expr string) error {
	if len(expr) > MaxScheduleExpressionBytes {
		return fmt.Errorf("%d bytes, EventBridge takes at most %d", len(expr), MaxScheduleExpressionBytes)
	}
	switch {
	case strings.HasPrefix(expr, "rate("):
		return checkRate(expr)
	case strings.HasPrefix(expr, "cron("):
		return checkCron(expr)
	}
	return fmt.Errorf(`want "rate(value unit)" or "cron(minutes hours day-of-month month day-of-week year)"`)
}

func checkRate(expr string) error {
	m := rateRE.FindStringSubmatch(expr)
	if m == nil {
		return fmt.Errorf(`want "rate(value unit)", e.g. rate(5 minutes), with one space and a whole number`)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 {
		return fmt.Errorf("rate value %q: want a whole number ≥ 1", m[1])
	}
	unit := m[2]
	singular := strings.TrimSuffix(unit, "s")
	if singular != "minute" && singular != "hour" && singular != "day" {
		return fmt.Errorf("rate unit %q: want minute(s), hour(s) or day(s)", unit)
	}
	switch {
	case n == 1 && unit != singular:
		return fmt.Errorf("rate(1 %s): a value of 1 takes the singular unit, rate(1 %s)", unit, singular)
	case n > 1 && unit == singular:
		return fmt.Errorf("rate(%d %s): a value above 1 takes the plural unit, rate(%d %ss)", n, unit, n, unit)
	}
	return nil
}

// cronField describes one field of a cron expression.
type cronField struct {
	name     string
	min, max int
	names    []string // names[i] stands for min+i (months, days)
	slash    bool     // increments allowed
}

var cronFields = []cronField{
	{name: "minutes", min: 0, max: 59, slash: true},
	{name: "hours", min: 0, max: 23, slash: true},
	{name: "day-of-month", min: 1, max: 31, slash: true},
	{name: "month", min: 1, max: 12, slash: true, names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}},
	{name: "day-of-week", min: 1, max: 7, names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}},
	{name: "year", min: 1970, max: 2199, slash: true},
}

const (
	fieldDayOfMonth = 2
	fieldDayOfWeek  = 4
)

func checkCron(expr string) error {
	body, ok := strings.CutSuffix(strings.TrimPrefix(expr, "cron("), ")")
	if !ok {
		return fmt.Errorf(`want "cron(...)" ending in ")"`)
	}
	fields := strings.Fields(body)
	if len(fields) != len(cronFields) {
		return fmt.Errorf("cron has %d fields, want 6: minutes hours day-of-month month day-of-week year (EventBridge has a year field and no seconds)", len(fields))
	}
	for i, f := range fields {
		if err := cronFields[i].check(f, i); err != nil {
			return fmt.Errorf("cron %s field %q: %w", cronFields[i].name, f, err)
		}
	}
	dom, dow := fields[fieldDayOfMonth] == "?", fields[fieldDayOfWeek] == "?"
	switch {
	case dom && dow:
		return fmt.Errorf(`cron day-of-month and day-of-week are both "?": one of them must name the days`)
	case !dom && !dow:
		return fmt.Errorf(`cron day-of-month %q and day-of-week %q: one of them must be "?" (a value or "*" in one needs "?" in the other)`, fields[fieldDayOfMonth], fields[fieldDayOfWeek])
	}
	return nil
}

// check checks one field's text; i is the field's position.
func (c cronField) check(f string, i int) error {
	if f == "?" {
		if i != fieldDayOfMonth && i != fieldDayOfWeek {
			return fmt.Errorf(`"?" is allowed only in day-of-month and day-of-week`)
		}
		return nil
	}
	// Forms that stand alone in their field.
	switch i {
	case fieldDayOfMonth:
		if f == "L" || f == "LW" {
			return nil
		}
		if n, ok := strings.CutSuffix(f, "W"); ok {
			_, err := c.value(n)
			return err
		}
	case fieldDayOfWeek:
		if f == "L" {
			return nil
		}
		if n, ok := strings.CutSuffix(strings.ToUpper(f), "L"); ok {
			_, err := c.value(n)
			return err
		}
		if day, k, ok := strings.Cut(f, "#"); ok {
			if _, err := c.value(day); err != nil {
				return err
			}
			if n, err := strconv.Atoi(k); err != nil || n < 1 || n > 5 {
				return fmt.Errorf(`"#%s": want the weekday's instance in the month, 1–5 (and "#" alone in the field)`, k)
			}
			return nil
		}
	}
	for _, item := range strings.Split(f, ",") {
		if err := c.item(item); err != nil {
			return err
		}
	}
	return nil
}

// item checks one element of a list: "*", a value or a range, each with an
// optional increment.
func (c cronField) item(item string) error {
	if item == "" {
		return fmt.Errorf("empty list element")
	}
	base, step, hasStep := strings.Cut(item, "/")
	if hasStep {
		if !c.slash {
			return fmt.Errorf(`"/" is not allowed in %s`, c.name)
		}
		n, err := strconv.Atoi(step)
		if err != nil || n < 1 || n > c.max {
			return fmt.Errorf("increment %q: want a whole number from 1 to %d (EventBridge refuses a larger one)", step, c.max)
		}
	}
	if base == "*" {
		return nil
	}
	if lo, hi, isRange := strings.Cut(base, "-"); isRange {
		a, err := c.value(lo)
		if err != nil {
			return err
		}
		b, err := c.value(hi)
		if err != nil {
			return err
		}
		if a > b {
			return fmt.Errorf("range %q runs backwards", base)
		}
		return nil
	}
	_, err := c.value(base)
	return err
}

// value parses a number or name of the field and checks its bounds.
func (c cronField) value(s string) (int, error) {
	for i, n := range c.names {
		if strings.EqualFold(s, n) {
			return c.min + i, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		if c.names != nil {
			return 0, fmt.Errorf("%q is not a %s: want %d–%d or %s–%s", s, c.name, c.min, c.max, c.names[0], c.names[len(c.names)-1])
		}
		return 0, fmt.Errorf("%q is not a %s: want %d–%d", s, c.name, c.min, c.max)
	}
	if n < c.min || n > c.max {
		return 0, fmt.Errorf("%d is out of range: %s takes %d–%d", n, c.name, c.min, c.max)
	}
	return n, nil
}

// MaxSchedulePeriod is the period SchedulePeriod gives a cron expression
// that does not fire every day: 366 days, as a year-long gap is what such
// a schedule may leave.
const MaxSchedulePeriod = 366 * 24 * time.Hour

// SchedulePeriod is the longest time a valid schedule expression (see
// CheckScheduleExpression) leaves between two firings: rate(n unit)'s n
// units; for a cron that fires every day (day-of-month and day-of-week
// "*" or "?", month and year "*"), the longest gap between the times of
// day its minutes and hours fields name, across midnight too; for any
// other cron, MaxSchedulePeriod. The finalize tick sends task heartbeats,
// so its period bounds the heartbeat interval a batch may ask for
// (config.EnvTickSeconds).
func SchedulePeriod(expr string) time.Duration {
	if m := rateRE.FindStringSubmatch(expr); m != nil {
		n, _ := strconv.Atoi(m[1])
		unit := map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[strings.TrimSuffix(m[2], "s")]
		return time.Duration(n) * unit
	}
	body, _ := strings.CutSuffix(strings.TrimPrefix(expr, "cron("), ")")
	f := strings.Fields(body)
	every := func(s string) bool { return s == "*" || s == "?" }
	if len(f) != len(cronFields) || !every(f[fieldDayOfMonth]) || !every(f[fieldDayOfWeek]) || f[3] != "*" || f[5] != "*" {
		return MaxSchedulePeriod
	}
	minutes, hours := cronFields[0].values(f[0]), cronFields[1].values(f[1])
	if len(minutes) == 0 || len(hours) == 0 {
		return MaxSchedulePeriod
	}
	var times []int // minutes of the day, ascending
	for _, h := range hours {
		for _, m := range minutes {
			times = append(times, h*60+m)
		}
	}
	gap := times[0] + 24*60 - times[len(times)-1] // across midnight
	for i := 1; i < len(times); i++ {
		gap = max(gap, times[i]-times[i-1])
	}
	return time.Duration(gap) * time.Minute
}

// values expands a minutes or hours field (a list of "*", values and
// ranges, each with an optional increment) into its values, ascending;
// nil when an element does not parse.
func (c cronField) values(field string) []int {
	set := map[int]bool{}
	for _, item := range strings.Split(field, ",") {
		base, step, hasStep := strings.Cut(item, "/")
		n := 1
		if hasStep {
			var err error
			if n, err = strconv.Atoi(step); err != nil || n < 1 {
				return nil
			}
		}
		lo, hi := c.min, c.max
		if base != "*" {
			a, b, isRange := strings.Cut(base, "-")
			var err error
			if lo, err = c.value(a); err != nil {
				return nil
			}
			hi = lo
			if hasStep {
				hi = c.max
			}
			if isRange {
				if hi, err = c.value(b); err != nil {
					return nil
				}
			}
		}
		for v := lo; v <= hi; v += n {
			set[v] = true
		}
	}
	var out []int
	for v := c.min; v <= c.max; v++ {
		if set[v] {
			out = append(out, v)
		}
	}
	return out
}
