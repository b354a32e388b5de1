package bulkrun

import (
	"strings"
	"testing"
	"time"
)

// Schedule expressions are checked at synth with EventBridge's rules
// (CheckScheduleExpression): what AWS would refuse at deploy — and the
// emulator would run — never reaches a template. Guards Schedules and
// FinalizeTickSchedule (infra/README.md; README, Schedules).
func TestScheduleExpressions(t *testing.T) {
	valid := []string{
		"rate(1 minute)", "rate(5 minutes)", "rate(1 hour)", "rate(12 hours)", "rate(1 day)", "rate(7 days)",
		"cron(0 2 * * ? *)",                // 02:00 UTC daily
		"cron(0 10 * * ? *)",               // 10:00 UTC daily
		"cron(15 12 * * ? *)",              // 12:15 UTC daily
		"cron(0 18 ? * MON-FRI *)",         // weekdays
		"cron(0 8 1 * ? *)",                // first of the month
		"cron(0/15 * * * ? *)",             // every 15 minutes
		"cron(0/10 * ? * MON-FRI *)",       // every 10 minutes on weekdays
		"cron(*/5 8-17 ? * MON-FRI *)",     // every 5 minutes in office hours
		"cron(0/5 8-17 ? * MON-FRI *)",     //
		"cron(0 9 ? * 2#1 *)",              // first Monday
		"cron(0 9 ? * 6L *)",               // last Friday
		"cron(0 9 ? * L *)",                // last day of the week
		"cron(0 0 L * ? *)",                // last day of the month
		"cron(0 0 LW * ? *)",               // last weekday of the month
		"cron(0 0 15W * ? *)",              // weekday nearest the 15th
		"cron(0 0 1,15 JAN,jul ? 2027)",    // lists, names in any case, a year
		"cron(30 23 ? * sun 2026-2030)",    // year range
		"cron(0 0 1 1/3 ? *)",              // every third month
		"cron(0 12 * JAN-MAR ? 2026/2)",    // year increment
		"cron(59 23 31 12 ? 2199)",         // upper bounds
		"cron(0\t2  *\t* ? *)",             // any white space
		"cron(5,10,20-25 0-6/2 ? * 1-7 *)", // ranges with increments
		"cron(*/59 */23 */31 */12 ? *)",    // the largest increments
	}
	for _, expr := range valid {
		if err := CheckScheduleExpression(expr); err != nil {
			t.Errorf("%s refused: %v", expr, err)
		}
	}
	invalid := []struct{ expr, want string }{
		{"rate(1 minutes)", "singular"},
		{"rate(5 minute)", "plural"},
		{"rate(1 hours)", "singular"},
		{"rate(2 day)", "plural"},
		{"rate(0 minutes)", "≥ 1"},
		{"rate(5 seconds)", "unit"},
		{"rate(1 week)", "unit"},
		{"rate(5  minutes)", "one space"},
		{"rate(1.5 hours)", "whole number"},
		{"rate(-1 minute)", "whole number"},
		{"rate(5 Minutes)", "one space"},
		{"rate(99999999999999999999 minutes)", "≥ 1"},
		{"every 5 minutes", "want"},
		{"", "want"},
		{"cron(0 2 * * *)", "5 fields"},     // Unix cron: no year field
		{"cron(0 0 2 * * ? *)", "7 fields"}, // seconds field
		{"cron(0 2 * * * *)", `one of them must be "?"`},
		{"cron(0 2 1 * MON *)", `one of them must be "?"`},
		{"cron(0 2 ? * ? *)", `both "?"`},
		{"cron(60 2 * * ? *)", "out of range"},
		{"cron(0 24 * * ? *)", "out of range"},
		{"cron(0 2 0 * ? *)", "out of range"},
		{"cron(0 2 32 * ? *)", "out of range"},
		{"cron(0 2 * 13 ? *)", "out of range"},
		{"cron(0 2 ? * 8 *)", "out of range"},
		{"cron(0 2 ? * 0 *)", "out of range"},
		{"cron(0 2 * * ? 1969)", "out of range"},
		{"cron(0 2 * * ? 2200)", "out of range"},
		{"cron(0 2 * JANUARY ? *)", "not a month"},
		{"cron(0 2 ? * MONDAY *)", "not a day-of-week"},
		{"cron(0 ? * * ? *)", `"?" is allowed only`},
		{"cron(0 2 ? * 3#6 *)", "1–5"},
		{"cron(0 2 ? * 3#1,6#3 *)", "1–5"},
		{"cron(0 2 ? * MON/2 *)", `"/" is not allowed`},
		{"cron(0/0 * * * ? *)", "increment"},
		{"cron(0/61 * * * ? *)", "increment"},
		{"cron(*/60 * * * ? *)", "increment"}, // EventBridge refuses it
		{"cron(0 */24 * * ? *)", "increment"},
		{"cron(0 0 */32 * ? *)", "increment"},
		{"cron(0 0 1 */13 ? *)", "increment"},
		{"cron(30-10 * * * ? *)", "backwards"},
		{"cron(0 2 ? * FRI-MON *)", "backwards"},
		{"cron(0 2 1, * ? *)", "empty list element"},
		{"cron(0 2 L5 * ? *)", "not a day-of-month"},
		{"cron(0 2 32W * ? *)", "out of range"},
		{"cron(a 2 * * ? *)", "not a minutes"},
		{"cron(0 2 * * ? *", `ending in ")"`},
		{"cron(0 2 * * ? *) ", `ending in ")"`},
		{"cron(+5 2 * * ? *)", "not a minutes"},
		{"cron(0 2 * * ? *" + strings.Repeat(" ", 260) + ")", "at most 256"},
	}
	for _, tt := range invalid {
		err := CheckScheduleExpression(tt.expr)
		if err == nil {
			t.Errorf("%q accepted", tt.expr)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want it to say %q", tt.expr, err, tt.want)
		}
	}
}

// SchedulePeriod is the longest gap a schedule leaves between firings:
// the finalize tick's period, which bounds the task heartbeat interval a
// batch may ask for (config.EnvTickSeconds). Guards FinalizeTickSchedule
// (infra/README.md).
func TestSchedulePeriod(t *testing.T) {
	for expr, want := range map[string]time.Duration{
		"rate(1 minute)":              time.Minute,
		"rate(5 minutes)":             5 * time.Minute,
		"rate(2 hours)":               2 * time.Hour,
		"rate(1 day)":                 24 * time.Hour,
		"cron(0/15 * * * ? *)":        15 * time.Minute,
		"cron(*/10 * ? * * *)":        10 * time.Minute,
		"cron(0 2 * * ? *)":           24 * time.Hour,
		"cron(5,10,50 * * * ? *)":     40 * time.Minute,
		"cron(0/5 8-17 * * ? *)":      14*time.Hour + 5*time.Minute, // 17:55 to 08:00
		"cron(0 0-23/6 * * ? *)":      6 * time.Hour,
		"cron(0 18 ? * MON-FRI *)":    MaxSchedulePeriod, // not every day
		"cron(0 8 1 * ? *)":           MaxSchedulePeriod,
		"cron(0 12 * JAN-MAR ? 2026)": MaxSchedulePeriod,
	} {
		if err := CheckScheduleExpression(expr); err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if got := SchedulePeriod(expr); got != want {
			t.Errorf("SchedulePeriod(%s) = %v, want %v", expr, got, want)
		}
	}
}
