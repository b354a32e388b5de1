package lambdalogs

import "testing"

func TestKept(t *testing.T) {
	const (
		errorLine = `{"timestamp":"2026-12-01T10:00:00.123Z","level":"ERROR","message":"x"}`
		warnLine  = `{"timestamp":"2026-12-01T10:00:00Z","level":"warn","message":"x"}`
		debugLine = `{"timestamp":"2026-12-01T10:00:00Z","level":"DEBUG","message":"x"}`
		slogError = `{"time":"2026-12-01T10:00:00.123Z","level":"ERROR","msg":"x"}`
		badTime   = `{"timestamp":"yesterday","level":"ERROR","message":"x"}`
		emf       = `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[]},"Items":1}`
		text      = `panic: boom`
		report    = "REPORT RequestId: 1\tDuration: 2 ms"
	)
	json := func(app string) Config { return Config{LogFormat: "JSON", ApplicationLogLevel: app} }
	for _, tt := range []struct {
		name string
		c    Config
		line string
		want bool
	}{
		{"text format keeps everything", Config{LogFormat: "Text", ApplicationLogLevel: "ERROR"}, debugLine, true},
		{"error at warn", json("WARN"), errorLine, true},
		{"warn at warn, any case", json("WARN"), warnLine, true},
		{"debug at info", json("INFO"), debugLine, false},
		{"debug at debug", json("DEBUG"), debugLine, true},
		{"no level set: info", json(""), debugLine, false},
		{"slog's time key: INFO, dropped at warn", json("WARN"), slogError, false},
		{"slog's time key: INFO, kept at info", json("INFO"), slogError, true},
		{"an invalid timestamp: INFO", json("ERROR"), badTime, false},
		{"EMF without a level: INFO, dropped at warn", json("WARN"), emf, false},
		{"EMF without a level: INFO, kept at info", json("INFO"), emf, true},
		{"a text line: INFO", json("ERROR"), text, false},
		{"a platform line by the system level", Config{LogFormat: "JSON", ApplicationLogLevel: "ERROR", SystemLogLevel: "INFO"}, report, true},
		{"a platform line at system WARN", Config{LogFormat: "JSON", SystemLogLevel: "WARN"}, report, false},
	} {
		if got := Kept(tt.c, tt.line); got != tt.want {
			t.Errorf("%s: Kept = %v, want %v (level %s)", tt.name, got, tt.want, Level(tt.line))
		}
	}
}
