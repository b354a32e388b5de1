// Package lambdalogs applies Lambda's log-level filtering to a function's
// log lines, which the emulator sends to CloudWatch Logs whole, whatever
// the function's logging configuration.
//
// The rule ("Log-level filtering", AWS Lambda developer guide,
// https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html):
// with the JSON log format and an application log level set (LoggingConfig
// LogFormat JSON, ApplicationLogLevel), Lambda sends a function's own
// line to CloudWatch Logs only when its level is that level or less
// detailed (TRACE < DEBUG < INFO < WARN < ERROR < FATAL; the default
// level is INFO). A line of a runtime without a logging integration of
// Lambda's — a provided.al2023 Go binary is one — gets its level from a
// JSON object's "level" member; a missing or invalid level is INFO, and so
// is any line without a valid RFC 3339 "timestamp" (Lambda then adds a
// timestamp itself), and any line that is not a JSON object. The guide
// lets the timestamp's key follow "the conventions of the runtime";
// this package holds the provided runtime to the key the guide's example
// and aws-lambda-go's own slog handler (lambdacontext.ReplaceAttr) write,
// "timestamp": a line keyed as slog writes it ("time") is INFO here.
// Lambda's own lines (START, END, REPORT, INIT_START, the emulator writes
// them as text) are filtered by the system log level, at INFO.
package lambdalogs

import (
	"encoding/json"
	"strings"
	"time"
)

// Config is a function's logging configuration, as
// GetFunctionConfiguration's LoggingConfig names it: LogFormat "Text" or
// "JSON", ApplicationLogLevel and SystemLogLevel (TRACE … FATAL; empty:
// INFO).
type Config struct {
	LogFormat           string
	ApplicationLogLevel string
	SystemLogLevel      string
}

// Levels are Lambda's log levels, most detailed first.
var Levels = []string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}

func rank(level string) int {
	for i, l := range Levels {
		if strings.EqualFold(l, level) {
			return i
		}
	}
	return -1
}

// Level is the level Lambda gives an application log line (the package
// comment): the JSON object's "level" (any case) when it is one of Levels
// and the object has a valid RFC 3339 "timestamp", else INFO.
func Level(line string) string {
	var doc struct {
		Level     any `json:"level"`
		Timestamp any `json:"timestamp"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(line)), &doc) != nil {
		return "INFO"
	}
	level, _ := doc.Level.(string)
	ts, _ := doc.Timestamp.(string)
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || rank(level) < 0 {
		return "INFO"
	}
	return Levels[rank(level)]
}

// System says whether line is one of Lambda's own (a platform line).
func System(line string) bool {
	for _, p := range []string{"START RequestId:", "END RequestId:", "REPORT RequestId:", "INIT_START ", "INIT_REPORT ", "EXTENSION "} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// Kept says whether Lambda sends line to CloudWatch Logs under c: every
// line in the Text format; in JSON, a line at c's level or less detailed
// (Lambda's own lines at INFO against SystemLogLevel).
func Kept(c Config, line string) bool {
	if !strings.EqualFold(c.LogFormat, "JSON") {
		return true
	}
	at, level := c.ApplicationLogLevel, Level(line)
	if System(line) {
		at, level = c.SystemLogLevel, "INFO"
	}
	if rank(at) < 0 {
		at = "INFO"
	}
	return rank(level) >= rank(at)
}
