package handler

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Log keys bulkrun's functions use, one word per idea (docs/design.md):
// request_id (the Lambda invocation), batch_id, run, key, run_id, attempt,
// outcome, duration_ms, error. Item inputs, outputs, header and option
// values are never logged.
const LogKeyRequestID = "request_id"

// NewLogger returns the functions' logger: JSON lines on w (slog's
// JSONHandler with the keys Lambda reads: timestamp, level, message, then
// the attributes), at level ("debug", "info", "warn" or "error"; anything
// else is info), each record logged with a *Context method carrying
// request_id, the invocation's (the Lambda runtime puts it in the
// handler's context: lambdacontext.FromContext). Every log call of
// bulkrun's functions passes the invocation's context; nothing is kept per
// process. Safe for concurrent use.
//
// The keys are lambdacontext.ReplaceAttr's (time → timestamp, msg →
// message): with the JSON log format Lambda takes a line's level from
// "level" only when the line has a valid RFC 3339 "timestamp", and files
// any other line as INFO ("Log-level filtering", AWS Lambda developer
// guide, https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html),
// so an error keyed as slog writes it would read as INFO. A line is
// {"timestamp":"2026-12-01T10:00:00.123Z","level":"ERROR","message":"…","batch_id":"…","request_id":"…"}.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(&requestIDHandler{Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: lambdacontext.ReplaceAttr})})
}

// Logger is NewLogger on stdout, which Lambda sends to CloudWatch Logs.
// The level comes from config.EnvLogLevel (the stack sets it): the logger
// drops what is below it itself, since the stack keeps Lambda's own
// application log level at INFO or below (infra/bulkrun, so that the
// metric lines, which carry no level, pass); AWS_LAMBDA_LOG_LEVEL and
// AWS_LAMBDA_LOG_FORMAT are not used.
func Logger(level string) *slog.Logger { return NewLogger(os.Stdout, level) }

type requestIDHandler struct{ slog.Handler }

func (h *requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String(LogKeyRequestID, lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &requestIDHandler{Handler: h.Handler.WithAttrs(attrs)}
}

func (h *requestIDHandler) WithGroup(name string) slog.Handler {
	return &requestIDHandler{Handler: h.Handler.WithGroup(name)}
}
