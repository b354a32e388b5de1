package bulkrun

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
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
