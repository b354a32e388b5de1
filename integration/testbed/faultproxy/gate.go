package faultproxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// GatePath is the path prefix of a gate's control endpoint (/_iam, …):
// requests under it go to the gate's ServeHTTP.
const GatePath = "/_iam"

// A Gate decides whether a call may reach the emulator at all, before the
// fault rules: the IAM-checked lane (integration/testbed/iamlane) is one.
// A Proxy without a gate lets every call through.
type Gate interface {
	// Admit returns nil to let the call on, or the refusal AWS would
	// answer it with. body is the buffered request body (nil for S3
	// calls other than DeleteObjects).
	Admit(r *http.Request, c Call, body []byte) *Refusal
	// Answered may replace the emulator's answer of status, with header,
	// to an admitted call (S3 answers a missing key with 403 to a caller
	// that may not list the bucket, and an SSE-KMS object with 403 to one
	// that may not decrypt with its key); nil keeps it.
	Answered(r *http.Request, c Call, status int, header http.Header) *Refusal
	// ServeHTTP serves the gate's control endpoint (GatePath).
	http.Handler
}

// Refusal is an error answer a gate gives instead of the emulator's.
type Refusal struct {
	Status  int    // HTTP status, e.g. 403
	Code    string // the service's error code, e.g. "AccessDenied"
	Message string
	// Entries, for a batch call with per-entry answers (S3 DeleteObjects;
	// see partialOps), marks the entries refused: those fail in the
	// answer with Code and Message, the rest reach the emulator.
	Entries []bool
	// Answer, when set, is the body of a JSON answer (Status) given
	// instead of the emulator's: a call AWS would take without doing it
	// (a message Lambda's loop detection stops).
	Answer []byte
}

// ResponseRewriter is an optional Gate method: it may change the
// emulator's answer to an admitted call (a Lambda answer larger than AWS
// allows becomes AWS's error).
type ResponseRewriter interface {
	Rewrite(resp *http.Response, c Call)
}

// Gates is a Gate made of several, in order: a call is admitted when
// every gate admits it (the first refusal answers it), its answer goes
// through each gate's Rewrite and Answered (the first replacement
// answers), and the control endpoint (GatePath) is the first gate's.
type Gates []Gate

var _ ResponseRewriter = Gates(nil)

// Admit is the first gate's refusal, nil when every gate admits the call.
func (gs Gates) Admit(r *http.Request, c Call, body []byte) *Refusal {
	for _, g := range gs {
		if f := g.Admit(r, c, body); f != nil {
			return f
		}
	}
	return nil
}

// Answered is the first gate's replacement of the answer.
func (gs Gates) Answered(r *http.Request, c Call, status int, header http.Header) *Refusal {
	for _, g := range gs {
		if f := g.Answered(r, c, status, header); f != nil {
			return f
		}
	}
	return nil
}

// Rewrite hands the answer to each gate that rewrites answers.
func (gs Gates) Rewrite(resp *http.Response, c Call) {
	for _, g := range gs {
		if rw, ok := g.(ResponseRewriter); ok {
			rw.Rewrite(resp, c)
		}
	}
}

// ServeHTTP serves the first gate's control endpoint.
func (gs Gates) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(gs) == 0 {
		http.NotFound(w, r)
		return
	}
	gs[0].ServeHTTP(w, r)
}

// SetGate puts g in front of every signed call; nil removes it.
func (p *Proxy) SetGate(g Gate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = g
}

func (p *Proxy) currentGate() Gate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gate
}

// refuse answers r with the gate's refusal. It returns the request to
// forward when only some entries were refused (nil when answered).
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, c Call, body []byte, f *Refusal, requestID string) *http.Request {
	if f.Answer != nil {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("Content-Length", strconv.Itoa(len(f.Answer)))
		w.WriteHeader(f.Status)
		_, _ = w.Write(f.Answer)
		return nil
	}
	if f.Entries != nil && partialOps[c.String()] {
		pt := &partial{call: c, rule: Rule{Code: f.Code, Message: f.Message}}
		out, err := pt.rewriteRequest(body, func(j int) float64 {
			if j < len(f.Entries) && f.Entries[j] {
				return 0
			}
			return 1
		})
		if err == nil {
			if !pt.none {
				setBody(r, out)
				return r.WithContext(contextWithPartial(r, pt))
			}
			resp, err := pt.rewriteResponse(nil)
			if err == nil {
				w.Header().Set("Content-Type", pt.contentType())
				fixHeaders(w.Header(), c, resp)
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(resp)
				return nil
			}
		}
		p.log.Warn("gate refusal of entries not applied", "call", c.String(), "error", errString(err))
	}
	writeError(w, r, c, errorShape{status: f.Status, code: f.Code, message: f.Message}, requestID)
	return nil
}

// replaceAnswer turns resp into the gate's refusal.
func replaceAnswer(resp *http.Response, c Call, f *Refusal) {
	rec := &recorder{header: http.Header{}}
	writeError(rec, resp.Request, c, errorShape{status: f.Status, code: f.Code, message: f.Message}, resp.Header.Get("X-Amz-Request-Id"))
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	resp.StatusCode = rec.code
	resp.Status = strconv.Itoa(rec.code) + " " + http.StatusText(rec.code)
	resp.Header = rec.header
	body := rec.body.Bytes()
	if resp.Request.Method == http.MethodHead {
		body = nil
	}
	resp.ContentLength = int64(len(body))
	resp.Body = io.NopCloser(bytes.NewReader(body))
}

// recorder is an http.ResponseWriter that keeps the answer.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// isGatePath says whether path is the gate's control endpoint.
func isGatePath(path string) bool {
	return path == GatePath || strings.HasPrefix(path, GatePath+"/")
}
