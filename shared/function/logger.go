package function

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Log keys bulkrun's functions use, one word per idea (docs/design.md):
// request_id (the Lambda invocation), batch_id, run, key, run_id, attempt,
// outcome, duration_ms, error. Item inputs, outputs, header and option
// values are never logged.
const LogKeyRequestID = "request_id"

// currentRequestID is the request id of the invocation this process is
// running. The Lambda Go runtime runs one invocation at a time per process
// (each goroutine the handler starts belongs to it), so one value suffices;
// Invoke sets it.
var currentRequestID atomic.Pointer[string]

// NewLogger returns the functions' logger: JSON lines on w (slog's
// JSONHandler: time, level, msg, then the attributes), at level ("debug",
// "info", "warn" or "error"; anything else is info), each record carrying
// request_id — from the record's context when logged with a *Context
// method, otherwise the invocation's that Invoke recorded — when there is
// one. Safe for concurrent use.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(&requestIDHandler{Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})})
}

// Logger is NewLogger on stdout, which Lambda sends to CloudWatch Logs.
// The level comes from config.EnvLogLevel (the stack sets it); Lambda's own
// AWS_LAMBDA_LOG_LEVEL and AWS_LAMBDA_LOG_FORMAT are not used.
func Logger(level string) *slog.Logger { return NewLogger(os.Stdout, level) }

// Invoke wraps a Lambda handler so that every record logged during an
// invocation carries its request id (lambdacontext.FromContext). The
// functions' main.go start their handler through it.
func Invoke[E, R any](fn func(context.Context, E) (R, error)) func(context.Context, E) (R, error) {
	return func(ctx context.Context, ev E) (R, error) {
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			id := lc.AwsRequestID
			currentRequestID.Store(&id)
			defer currentRequestID.Store(nil)
		}
		return fn(ctx, ev)
	}
}

type requestIDHandler struct{ slog.Handler }

func (h *requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String(LogKeyRequestID, lc.AwsRequestID))
	} else if id := currentRequestID.Load(); id != nil {
		r.AddAttrs(slog.String(LogKeyRequestID, *id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &requestIDHandler{Handler: h.Handler.WithAttrs(attrs)}
}

func (h *requestIDHandler) WithGroup(name string) slog.Handler {
	return &requestIDHandler{Handler: h.Handler.WithGroup(name)}
}
