// Package console is bulkrun's web console: an HTTP handler, served by
// `bulkrun console` on 127.0.0.1 only, that shows a stack's batches
// (list, census, cost, verdict, runs, failed, quarantined and in-flight
// items, thumbnails of image pipelines) and proxies a fixed set of the
// API's actions signed with the user's credentials in the process; the
// page never sees them (docs/console.md).
package console

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// assets are the console's page, script and style sheet, served as
// they are (no build step, no third-party code, nothing from another host).
//
//go:embed web
var assets embed.FS

// DefaultConsolePort is the port `bulkrun console` listens on, on
// 127.0.0.1, unless --port says otherwise (0 picks a free port).
const DefaultPort = 8420

// Console limits.
const (
	listDefault    = 20       // batches per list page
	listMax        = 100      // most batches per list page
	itemsMax       = 100      // most items per items page
	thumbsMax      = 60       // most thumbnails per page
	runsShown      = 20       // the last runs whose reports the batch page reads
	thumbMaxSize   = 16 << 20 // largest thumbnail served, bytes
	statusParallel = 8        // GET /batches/{id} calls at once for a list page
	TokenHeader    = "X-Bulkrun-Token"
)

// ConsoleAPI is what the console asks of the bulkrun API: the operations
// it proxies, and no others. *client.Client implements it; every call is
// signed with the user's credentials there, never in the page.
type API interface {
	ListBatches(ctx context.Context, r api.ListBatchesRequest) (api.BatchPage, error)
	Status(ctx context.Context, id string) (wire.BatchView, error)
	Report(ctx context.Context, id string) (api.Report, error)
	Items(ctx context.Context, id string, outcome api.Outcome, cursor string, limit int) (api.ItemPage, error)
	Inputs(ctx context.Context, id string, outcome api.Outcome, cursor string, limit int) (api.InputPage, error)
	Resume(ctx context.Context, id string) (wire.BatchView, error)
	Cancel(ctx context.Context, id string) (wire.BatchView, error)
	Pause(ctx context.Context, id string) (wire.BatchView, error)
	Unpause(ctx context.Context, id string) (wire.BatchView, error)
	// Approve and Reject decide a sampled batch's rest (POST
	// /batches/{id}/approve, /reject; api.Plan.Sample).
	Approve(ctx context.Context, id string) (wire.BatchView, error)
	Reject(ctx context.Context, id string) (wire.BatchView, error)
	SetBudget(ctx context.Context, id string, usd float64) (wire.BatchView, error)
	SetCeilingsAll(ctx context.Context, id string, raise api.Ceilings) (api.CeilingsResult, error)
	Release(ctx context.Context, id, key string) error
	Signal(ctx context.Context, id, key, token string, payload json.RawMessage) (api.SignalResult, error)
	Forget(ctx context.Context, id string) error
	Correct(ctx context.Context, id string, req api.CorrectRequest) (wire.CorrectionView, error)
}

var _ API = (*client.Client)(nil)

// ObjectReader reads an object of the stack's bucket from byte offset on,
// returning its body and Content-Type; a missing object is ErrNoObject.
type ObjectReader interface {
	GetObject(ctx context.Context, key string, offset int64) (io.ReadCloser, string, error)
}

// ErrNoObject is an ObjectReader's answer for a key that does not exist.
var ErrNoObject = errors.New("no such object")

// s3Objects is the ObjectReader of the stack's bucket, with the user's

// Console is the web console's HTTP handler. It answers only requests
// addressed to 127.0.0.1:port or localhost:port (a page of another site
// that rebinds its own host name to 127.0.0.1 gets 421), serves the page
// and its assets, and a fixed set of JSON operations under /api/, each
// mapped to one ConsoleAPI call or to a read of the batch's own report,
// results or thumbnail objects; nothing else is forwarded.
//
// Everything but the static assets needs the console's session: a cookie
// (HttpOnly, SameSite=Lax, named after the port) that GET /?token=TOKEN
// sets, TOKEN being the per-process token `bulkrun console` prints in the
// address. So another user or process of the machine, which can connect
// to 127.0.0.1 as well, can neither read the batches nor act with the
// user's credentials. The actions (POST) also need the token in a header
// (the page carries it), the page's own Origin and a JSON body, so that
// no other site can make a browser act. Safe for concurrent use.
type Server struct {
	api    API
	objs   ObjectReader
	bucket string
	port   int
	token  string
	assets fs.FS
	index  []byte
	mux    *http.ServeMux
}

// NewConsole returns the console of the stack whose bucket is bucket,
// serving on 127.0.0.1:port, with a new random token.
func New(api API, objs ObjectReader, bucket string, port int) (*Server, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("console token: %w", err)
	}
	assets, err := fs.Sub(assets, "web")
	if err != nil {
		return nil, err
	}
	page, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		return nil, err
	}
	c := &Server{api: api, objs: objs, bucket: bucket, port: port, token: hex.EncodeToString(b[:]), assets: assets}
	c.index = []byte(strings.Replace(string(page), "{{TOKEN}}", c.token, 1))
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.page)
	for name, ct := range map[string]string{"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"} {
		body, err := fs.ReadFile(assets, name)
		if err != nil {
			return nil, err
		}
		m.HandleFunc("GET /assets/"+name, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", ct)
			_, _ = w.Write(body)
		})
	}
	m.HandleFunc("GET /api/batches", c.list)
	m.HandleFunc("GET /api/batches/{id}", c.batch)
	m.HandleFunc("GET /api/batches/{id}/runs", c.runs)
	m.HandleFunc("GET /api/batches/{id}/items", c.items)
	m.HandleFunc("GET /api/batches/{id}/inputs", c.inputs)
	m.HandleFunc("GET /api/batches/{id}/thumbnails", c.thumbnails)
	m.HandleFunc("GET /api/batches/{id}/thumbnail", c.thumbnail)
	m.HandleFunc("POST /api/batches/{id}/resume", c.runAction(c.api.Resume))
	m.HandleFunc("POST /api/batches/{id}/cancel", c.runAction(c.api.Cancel))
	m.HandleFunc("POST /api/batches/{id}/pause", c.runAction(c.api.Pause))
	m.HandleFunc("POST /api/batches/{id}/unpause", c.runAction(c.api.Unpause))
	// A sampled batch's decision: approve runs the items outside its
	// sample, reject cancels its run (the API's 409 for a batch with no
	// sample, one decided the other way or one whose first run is over).
	m.HandleFunc("POST /api/batches/{id}/approve", c.runAction(c.api.Approve))
	m.HandleFunc("POST /api/batches/{id}/reject", c.runAction(c.api.Reject))
	// The budget (POST /batches/{id}/budget: 409 for one at or under the
	// run's spend; its answer as 202) and the per-item ceilings (POST
	// /batches/{id}/ceilings, repeated until done; its api.CeilingsResult
	// as 200).
	m.HandleFunc("POST /api/batches/{id}/budget", valueAction(c, "budget_usd", actionBody.budget, http.StatusAccepted, c.api.SetBudget))
	m.HandleFunc("POST /api/batches/{id}/ceilings", valueAction(c, "ceilings", actionBody.ceilings, http.StatusOK, c.api.SetCeilingsAll))
	m.HandleFunc("POST /api/batches/{id}/release", c.release)
	m.HandleFunc("POST /api/batches/{id}/signal", c.signal)
	m.HandleFunc("POST /api/batches/{id}/forget", c.forget)
	m.HandleFunc("POST /api/batches/{id}/corrections", c.correct)
	c.mux = m
	return c, nil
}

// Token is the per-process token the page sends with every action.
func (c *Server) Token() string { return c.token }

// Port is the port on 127.0.0.1 the console answers for.
func (c *Server) Port() int { return c.port }

// Serve answers on ln until ctx ends, then shuts down (in-flight requests
// get 5 seconds).
func (c *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// ServeHTTP checks where the request comes from, sets the headers every
// answer carries, then routes it.
func (c *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	if err := c.checkRequest(r); err != nil {
		writeError(w, err.status, err.code, err.msg)
		return
	}
	c.mux.ServeHTTP(w, r)
}

type requestError struct {
	status    int
	code, msg string
}

// checkRequest admits a request only when its Host is this console's
// (127.0.0.1:port or localhost:port: DNS rebinding gets 421); when it
// carries the console's session cookie, unless it asks for an asset or
// for the page with ?token= (403 otherwise); and, for any method but GET
// and HEAD, when it carries the page's token, the console's own Origin,
// no cross-site Sec-Fetch-Site and a JSON body (403 otherwise).
func (c *Server) checkRequest(r *http.Request) *requestError {
	p := strconv.Itoa(c.port)
	if r.Host != "127.0.0.1:"+p && r.Host != "localhost:"+p {
		return &requestError{http.StatusMisdirectedRequest, "wrong_host", fmt.Sprintf("this console answers http://127.0.0.1:%s/ only, not host %q", p, r.Host)}
	}
	exchange := r.URL.Path == "/" && r.URL.Query().Has("token")
	if !strings.HasPrefix(r.URL.Path, "/assets/") && !exchange && !c.session(r) {
		return &requestError{http.StatusForbidden, "no_session", "no console session: open the address `bulkrun console` printed (http://127.0.0.1:" + p + "/?token=…)"}
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		if s := r.Header.Get("Sec-Fetch-Site"); s == "cross-site" && strings.HasPrefix(r.URL.Path, "/api/") {
			return &requestError{http.StatusForbidden, "cross_site", "the console's data is not for other sites"}
		}
		return nil
	}
	if o := r.Header.Get("Origin"); o != "http://"+r.Host {
		return &requestError{http.StatusForbidden, "bad_origin", fmt.Sprintf("actions come from the console's own page (Origin %q)", o)}
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return &requestError{http.StatusForbidden, "cross_site", "actions come from the console's own page (Sec-Fetch-Site " + s + ")"}
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(TokenHeader)), []byte(c.token)) != 1 {
		return &requestError{http.StatusForbidden, "bad_token", "missing or wrong console token: reload the page"}
	}
	if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(ct) != "application/json" {
		return &requestError{http.StatusUnsupportedMediaType, "bad_content_type", "actions send application/json"}
	}
	return nil
}

// cookieName is the session cookie's name. Browsers share cookies between
// the ports of a host, so it names the port: two consoles do not mix.
func (c *Server) cookieName() string { return "bulkrun_console_" + strconv.Itoa(c.port) }

// session reports whether r carries this console's session cookie.
func (c *Server) session(r *http.Request) bool {
	k, err := r.Cookie(c.cookieName())
	return err == nil && subtle.ConstantTimeCompare([]byte(k.Value), []byte(c.token)) == 1
}

// page serves the console's page; GET /?token=TOKEN with the right token
// sets the session cookie and redirects to / (so the token leaves the
// address bar and the history).
func (c *Server) page(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("token")), []byte(c.token)) != 1 {
			writeError(w, http.StatusForbidden, "bad_token", "wrong console token: open the address `bulkrun console` printed")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: c.cookieName(), Value: c.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(c.index)
}

// ConsoleBatch is a batch in the console's list: the listing's summary,
// plus its census or progress and its source from GET /batches/{id}
// (StatusError when that read failed).
type Batch struct {
	api.BatchSummary
	Census       *api.Census    `json:"census,omitempty"`
	CensusSource string         `json:"census_source,omitempty"`
	Progress     *wire.Progress `json:"progress,omitempty"`
	Live         *api.LiveView  `json:"live,omitempty"`
	// Source is the batch's source as it names it; SourceKind and
	// SourceLabel say where it came from in a few words (SourceOf).
	Source      string `json:"source,omitempty"`
	SourceKind  string `json:"source_kind,omitempty"`
	SourceLabel string `json:"source_label,omitempty"`
	StatusError string `json:"status_error,omitempty"`
}

// Source kinds of ConsoleBatch.SourceKind.
const (
	SourceKindUpload   = "upload"   // an object under incoming/ of the stack's bucket
	SourceKindCLI      = "cli"      // a local file or folder `bulkrun submit` uploaded
	SourceKindS3       = "s3"       // another S3 object or prefix
	SourceKindInline   = "inline"   // items given in the request
	SourceKindSchedule = "schedule" // a schedule's tick (SourceLabel names the schedule)
)

// SourceOf says where a batch's items came from, for the list's source
// column: its kind and a short label. bucket is the stack's bucket, source
// the batch's (api.SourceSpec.Describe), by its submitted_by. An upload
// is its key ("incoming/orders (1).csv"); a file the CLI uploaded is its
// base name (the uploads/{digest}/ prefix says nothing); a folder it
// uploaded, "local folder"; an object or prefix of the stack's bucket its
// key, of another bucket its bucket and key; a schedule's tick "schedule
// NAME · " and its source. Deterministic.
func SourceOf(bucket, source, by string) (kind, label string) {
	own := "s3://" + bucket + "/"
	switch rest, ok := strings.CutPrefix(source, own); {
	case source == "inline" || source == "":
		kind, label = SourceKindInline, "inline items"
	case ok && strings.HasPrefix(rest, config.IncomingPrefix):
		kind, label = SourceKindUpload, rest
	case ok && strings.HasPrefix(rest, config.UploadsPrefix):
		kind, label = SourceKindCLI, "local folder"
		if name := rest[strings.LastIndex(rest, "/")+1:]; name != "*" && name != "" {
			label = name
		}
	case ok:
		kind, label = SourceKindS3, rest
	default:
		kind, label = SourceKindS3, strings.TrimPrefix(source, "s3://")
	}
	if name, ok := strings.CutPrefix(by, "schedule:"); ok {
		return SourceKindSchedule, "schedule " + name + " · " + label
	}
	return kind, label
}

// ConsolePage is GET /api/batches's answer.
type Page struct {
	Batches    []Batch `json:"batches"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

// list answers a page of batches, newest first: ?status=a,b, ?limit
// (1–100, default 20), ?cursor; each with its census or progress. A short
// page of the API is followed by its cursor (at most 10 calls) so that a
// page holds limit batches unless the listing ends.
func (c *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := api.ListBatchesRequest{Cursor: q.Get("cursor")}
	for s := range strings.SplitSeq(q.Get("status"), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(api.Statuses(), api.Status(s)) {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("status %q: want one of %s", s, strings.Join(api.StatusNames(), ", ")))
			return
		}
		req.Statuses = append(req.Statuses, api.Status(s))
	}
	limit := listDefault
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > listMax {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("limit %q: want 1–%d", s, listMax))
			return
		}
		limit = n
	}
	var got []api.BatchSummary
	next := req.Cursor
	for calls := 0; calls < 10; calls++ {
		req.Limit, req.Cursor = limit-len(got), next
		p, err := c.api.ListBatches(r.Context(), req)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		got = append(got, p.Batches...)
		next = p.NextCursor
		if next == "" || len(got) >= limit {
			break
		}
	}
	out := Page{Batches: make([]Batch, len(got)), NextCursor: next}
	var wg sync.WaitGroup
	sem := make(chan struct{}, statusParallel)
	for i, b := range got {
		out.Batches[i].BatchSummary = b
		if b.PendingDeletion {
			continue
		}
		wg.Add(1)
		go func(cb *Batch) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			v, err := c.api.Status(r.Context(), cb.ID)
			if err != nil {
				cb.StatusError = err.Error()
				return
			}
			cb.Census, cb.CensusSource, cb.Progress, cb.Live = v.Census, v.CensusSource, v.Progress, v.Live
			cb.Source = v.Source
			cb.SourceKind, cb.SourceLabel = SourceOf(c.bucket, v.Source, v.SubmittedBy)
			// The row is current; the index the listing reads may lag.
			cb.Status, cb.Run, cb.NeedsAttention, cb.Stop, cb.Pause = v.Status, v.Run, v.NeedsAttention, v.Stop, v.Pause
		}(&out.Batches[i])
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, out)
}

// ConsoleBatchPage is GET /api/batches/{id}'s answer: the batch view and,
// once a run has finished, its last report (threshold, verdict, results
// and outputs locations).
type BatchPage struct {
	Batch  wire.BatchView `json:"batch"`
	Report *api.Report    `json:"report,omitempty"`
	// SourceKind and SourceLabel say where the items came from (SourceOf).
	SourceKind  string `json:"source_kind"`
	SourceLabel string `json:"source_label"`
	// Failures are the last finished run's failed items by cause, from
	// its results (FailureCauses); absent when none failed.
	Failures *Failures `json:"failures,omitempty"`
}

// ConsoleFailures is why a finished run's items failed: its failed
// results lines grouped by reason and error (the item's key in the error
// read as "{key}"), the commonest first, at most consoleCausesShown
// causes. Read counts the lines read (at most consoleCauseLines);
// Complete says they were all of them.
type Failures struct {
	Causes   []Cause `json:"causes"`
	Read     int64   `json:"read"`
	Complete bool    `json:"complete"`
}

// ConsoleCause is one cause of failure: the reason (permanent,
// max-attempts, dead-lettered, …), the error as the items have it with
// their key as "{key}", how many items failed so, and one of them.
type Cause struct {
	Reason  api.Reason `json:"reason"`
	Error   string     `json:"error"`
	Items   int64      `json:"items"`
	Example string     `json:"example"`
}

// Failure causes: how much of a results file the batch page reads.
const (
	consoleCauseLines  = 100_000
	consoleCausesShown = 5
)

// FailureCauses groups the results lines of failed items read from r (at
// most consoleCauseLines) by reason and error, an item's key in its error
// read as "{key}" (errors that name their item are one cause), the
// commonest first.
func FailureCauses(r io.Reader) (Failures, error) {
	type cause struct {
		reason  api.Reason
		text    string
		items   int64
		example string
		first   int
	}
	by := map[string]*cause{}
	var out Failures
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		if out.Read == consoleCauseLines {
			_, err := br.Peek(1)
			out.Complete = err == io.EOF
			break
		}
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l api.ResultLine
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return out, fmt.Errorf("results line %d: %w", out.Read+1, jerr)
			}
			out.Read++
			text := l.Error
			if l.Key != "" {
				text = strings.ReplaceAll(text, l.Key, "{key}")
			}
			k := string(l.Reason) + "\x00" + text
			if by[k] == nil {
				by[k] = &cause{reason: l.Reason, text: text, example: l.Key, first: len(by)}
			}
			by[k].items++
		}
		if err == io.EOF {
			out.Complete = true
			break
		}
		if err != nil {
			return out, err
		}
	}
	all := make([]*cause, 0, len(by))
	for _, c := range by {
		all = append(all, c)
	}
	slices.SortFunc(all, func(a, b *cause) int {
		if a.items != b.items {
			return int(b.items - a.items)
		}
		return a.first - b.first
	})
	out.Causes = []Cause{}
	for _, c := range all[:min(len(all), consoleCausesShown)] {
		out.Causes = append(out.Causes, Cause{Reason: c.reason, Error: c.text, Items: c.items, Example: c.example})
	}
	return out, nil
}

func (c *Server) batchID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !api.ValidBatchID(id) {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("batch id %q: want 1–128 of A-Z a-z 0-9 _ -", id))
		return "", false
	}
	return id, true
}

func (c *Server) batch(w http.ResponseWriter, r *http.Request) {
	id, ok := c.batchID(w, r)
	if !ok {
		return
	}
	v, err := c.api.Status(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	out := BatchPage{Batch: v}
	out.SourceKind, out.SourceLabel = SourceOf(c.bucket, v.Source, v.SubmittedBy)
	if v.ReportKey != "" {
		rep, err := c.api.Report(r.Context(), id)
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			writeAPIError(w, err)
			return
		}
		if err == nil {
			out.Report = &rep
			out.Failures = c.failures(r.Context(), id, rep)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// failures reads the failed items' causes of a finished run from its
// failed results file (nil when none failed, or it cannot be read: the
// page then does without).
func (c *Server) failures(ctx context.Context, id string, rep api.Report) *Failures {
	loc, ok := rep.Results.Files[api.OutcomeFailed]
	if !ok || rep.Census.Failed == 0 {
		return nil
	}
	key, ok := c.bucketKey(loc.URI)
	if !ok || !strings.HasPrefix(key, "batches/"+id+"/") {
		return nil
	}
	body, _, err := c.objs.GetObject(ctx, key, 0)
	if err != nil {
		return nil
	}
	defer body.Close()
	f, err := FailureCauses(body)
	if err != nil {
		return nil
	}
	return &f
}

// ConsoleRun is one run of a batch as the batch page lists it: from its
// report when finished; Status "running" (or the batch's) without one.
type Run struct {
	Run            int          `json:"run"`
	Revision       int          `json:"revision,omitempty"` // a correction run's revision
	Status         api.Status   `json:"status"`
	Census         *api.Census  `json:"census,omitempty"`
	Verdict        *api.Verdict `json:"verdict,omitempty"`
	StopDetail     string       `json:"stop_detail,omitempty"`
	NeedsAttention bool         `json:"needs_attention"`
	RunStartedAt   time.Time    `json:"run_started_at,omitzero"`
	FinishedAt     time.Time    `json:"finished_at,omitzero"`
	Report         string       `json:"report,omitempty"` // s3:// URI
}

// runs answers the batch's last runs, newest first, each from its
// report.json in the stack's bucket (the current run from the batch while
// it is going).
func (c *Server) runs(w http.ResponseWriter, r *http.Request) {
	id, ok := c.batchID(w, r)
	if !ok {
		return
	}
	v, err := c.api.Status(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	out := []Run{}
	for n := v.Run; n >= 1 && n > v.Run-runsShown; n-- {
		run := Run{Run: n}
		key := api.ReportKey(id, n)
		body, _, err := c.objs.GetObject(r.Context(), key, 0)
		switch {
		case errors.Is(err, ErrNoObject):
			run.Status = "no report"
			if n == v.Run {
				run.Status, run.RunStartedAt, run.Revision = v.Status, v.RunStartedAt, v.RunRevision
				if v.Status.Finished() {
					run.Status = "finalizing"
				}
			}
		case err != nil:
			writeError(w, http.StatusBadGateway, "s3", err.Error())
			return
		default:
			var rep api.Report
			err := json.NewDecoder(io.LimitReader(body, 16<<20)).Decode(&rep)
			body.Close()
			if err != nil {
				writeError(w, http.StatusBadGateway, "s3", fmt.Sprintf("read s3://%s/%s: %v", c.bucket, key, err))
				return
			}
			run.Status, run.Census, run.Verdict, run.StopDetail = rep.Status, &rep.Census, &rep.Verdict, rep.StopDetail
			run.NeedsAttention, run.RunStartedAt, run.FinishedAt = rep.NeedsAttention, rep.RunStartedAt, rep.FinishedAt
			run.Report = "s3://" + c.bucket + "/" + key
			if rep.Revision != nil {
				run.Revision = rep.Revision.N
			}
		}
		out = append(out, run)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

// items answers a page of the batch's failed, quarantined, held
// (withheld, exhausted, suspended) or in-flight items (?outcome, ?cursor,
// ?limit 1–100, default 25).
// inputs serves GET /api/batches/{id}/inputs?outcome=failed|quarantined
// as a download: every page of the API's GET /batches/{id}/inputs joined
// into one file (client.WriteInputPages: a CSV source's header once, with
// its delimiter; JSON Lines otherwise), named {id}-{outcome}-inputs.csv or
// .jsonl, ready to edit and hand to Correct…. The first page is read
// before anything is written, so that its error (400 naming outcome; 404;
// 409 for positional keys) is answered as JSON; a later page's error cuts
// the download short.
func (c *Server) inputs(w http.ResponseWriter, r *http.Request) {
	id, ok := c.batchID(w, r)
	if !ok {
		return
	}
	o := api.Outcome(r.URL.Query().Get("outcome"))
	if o != api.OutcomeFailed && o != api.OutcomeQuarantined {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("outcome %q: want failed or quarantined", o))
		return
	}
	page := func(cursor string) (api.InputPage, error) {
		return c.api.Inputs(r.Context(), id, o, cursor, api.MaxListLimit)
	}
	first, err := page("")
	if err != nil {
		writeAPIError(w, err)
		return
	}
	ext := "jsonl"
	if first.Format == api.FormatCSV {
		ext = "csv"
	}
	w.Header().Set("Content-Type", api.InputContentType(first.Format))
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", id+"-"+string(o)+"-inputs."+ext))
	served := false
	if _, err := client.WriteInputPages(w, func(cursor string) (api.InputPage, error) {
		if !served {
			served = true
			return first, nil
		}
		return page(cursor)
	}); err != nil {
		// Headers are sent: the browser sees a download cut short.
		panic(http.ErrAbortHandler)
	}
}

func (c *Server) items(w http.ResponseWriter, r *http.Request) {
	id, ok := c.batchID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	o := api.Outcome(q.Get("outcome"))
	if o != api.OutcomeFailed && o != api.OutcomeQuarantined && !o.Held() && o != api.OutcomeInFlight {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("outcome %q: want failed, quarantined, withheld, exhausted, suspended or in_flight", o))
		return
	}
	limit := 25
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > itemsMax {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("limit %q: want 1–%d", s, itemsMax))
			return
		}
		limit = n
	}
	p, err := c.api.Items(r.Context(), id, o, q.Get("cursor"), limit)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if p.Items == nil {
		p.Items = []api.Item{}
	}
	writeJSON(w, http.StatusOK, p)
}

// ConsoleThumb is one thumbnail of the grid: the item's key and the
// console path its image is served at.
type Thumb struct {
	Key string `json:"key"`
	Src string `json:"src"`
}

// thumbnails answers a page of the last finished run's thumbnails: the
// succeeded results lines whose output names a "thumbnail" under the
// batch's outputs, read from byte ?cursor of the results file (the
// cursor of the next page is where the next unread line starts).
func (c *Server) thumbnails(w http.ResponseWriter, r *http.Request) {
	id, ok := c.batchID(w, r)
	if !ok {
		return
	}
	limit := 24
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > thumbsMax {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("limit %q: want 1–%d", s, thumbsMax))
			return
		}
		limit = n
	}
	var offset int64
	if s := r.URL.Query().Get("cursor"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("cursor %q: want a byte offset from a previous page", s))
			return
		}
		offset = n
	}
	out := struct {
		Thumbnails []Thumb `json:"thumbnails"`
		NextCursor string  `json:"next_cursor,omitempty"`
	}{Thumbnails: []Thumb{}}
	rep, err := c.api.Report(r.Context(), id)
	if errors.Is(err, api.ErrNotFound) {
		writeJSON(w, http.StatusOK, out) // no finished run yet
		return
	} else if err != nil {
		writeAPIError(w, err)
		return
	}
	loc, ok := rep.Results.Files[api.OutcomeSucceeded]
	if !ok {
		writeJSON(w, http.StatusOK, out)
		return
	}
	key, ok := c.bucketKey(loc.URI)
	if !ok || !strings.HasPrefix(key, "batches/"+id+"/") {
		writeError(w, http.StatusBadGateway, "results", fmt.Sprintf("results %s is not the batch's", loc.URI))
		return
	}
	body, _, err := c.objs.GetObject(r.Context(), key, offset)
	if err != nil {
		writeError(w, http.StatusBadGateway, "s3", err.Error())
		return
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, 64<<10)
	pos := offset
	for len(out.Thumbnails) < limit {
		line, err := br.ReadBytes('\n')
		pos += int64(len(line))
		if len(line) > 0 {
			var l api.ResultLine
			if json.Unmarshal(line, &l) == nil {
				var o struct {
					Thumbnail string `json:"thumbnail"`
				}
				if json.Unmarshal(l.Output, &o) == nil && c.isOutput(id, o.Thumbnail) {
					out.Thumbnails = append(out.Thumbnails, Thumb{Key: l.Key,
						Src: "/api/batches/" + url.PathEscape(id) + "/thumbnail?uri=" + url.QueryEscape(o.Thumbnail)})
				}
			}
		}
		if err == io.EOF {
			writeJSON(w, http.StatusOK, out)
			return
		}
		if err != nil {
			writeError(w, http.StatusBadGateway, "s3", fmt.Sprintf("read %s: %v", loc.URI, err))
			return
		}
	}
	if _, err := br.Peek(1); err == nil {
		out.NextCursor = strconv.FormatInt(pos, 10)
	}
	writeJSON(w, http.StatusOK, out)
}

// bucketKey returns the key of an s3:// URI in the stack's bucket.
func (c *Server) bucketKey(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, "s3://"+c.bucket+"/")
	return rest, ok && rest != ""
}

// isOutput reports whether uri names an object under the batch's outputs
// in the stack's bucket: the only objects the thumbnail route reads.
func (c *Server) isOutput(id, uri string) bool {
	key, ok := c.bucketKey(uri)
	return ok && strings.HasPrefix(key, api.OutputsPrefix(id)) && len(key) > len(api.OutputsPrefix(id))
}

// consoleImageTypes are the Content-Types the thumbnail route serves.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// thumbnail serves one image under the batch's outputs (?uri, as the
// thumbnails page named it) through this process, so the page needs no
// credentials and no presigned URL. Anything else — another batch's
// object, another bucket, an object that is not an image, one over 16 MiB
// — is refused.
func (c *Server) thumbnail(w http.ResponseWriter, r *http.Request) {
	id, ok := c.batchID(w, r)
	if !ok {
		return
	}
	uri := r.URL.Query().Get("uri")
	if !c.isOutput(id, uri) {
		writeError(w, http.StatusForbidden, "not_an_output", fmt.Sprintf("%q is not an output of batch %s", uri, id))
		return
	}
	key, _ := c.bucketKey(uri)
	body, ct, err := c.objs.GetObject(r.Context(), key, 0)
	if errors.Is(err, ErrNoObject) {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, err.Error())
		return
	} else if err != nil {
		writeError(w, http.StatusBadGateway, "s3", err.Error())
		return
	}
	defer body.Close()
	ct = strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
	if !slices.Contains(imageTypes, ct) {
		writeError(w, http.StatusUnsupportedMediaType, "not_an_image", fmt.Sprintf("%s is %q, not an image", uri, ct))
		return
	}
	data, err := io.ReadAll(io.LimitReader(body, thumbMaxSize+1))
	if err != nil {
		writeError(w, http.StatusBadGateway, "s3", fmt.Sprintf("read %s: %v", uri, err))
		return
	}
	if len(data) > thumbMaxSize {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("%s is over %d bytes", uri, thumbMaxSize))
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "private, max-age=300")
	_, _ = w.Write(data)
}

// actionBody is the JSON body of an action: {} or, for release, {"key"}.
type actionBody struct {
	Key string `json:"key"`
	// BudgetUSD is the budget action's new budget (POST …/budget).
	BudgetUSD *float64 `json:"budget_usd"`
	// Ceilings is the ceilings action's ceilings to set (POST …/ceilings).
	Ceilings *api.Ceilings `json:"ceilings"`
	// Payload and Token are the signal action's (POST …/signal): the
	// payload handed to the item's next attempt (JSON; absent: none) and
	// the token its suspension returned (empty: none). The API checks
	// both (the payload at most api.MaxSignalPayloadBytes).
	Payload json.RawMessage `json:"payload"`
	Token   string          `json:"token"`
}

func (c *Server) readAction(w http.ResponseWriter, r *http.Request) (string, actionBody, bool) {
	id, ok := c.batchID(w, r)
	if !ok {
		return "", actionBody{}, false
	}
	var b actionBody
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil && err != io.EOF {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, "body: "+err.Error())
		return "", actionBody{}, false
	}
	return id, b, true
}

// runAction serves an action on the batch as a whole (resume, cancel,
// pause, unpause, approve, reject): call runs it through the API, and its
// answer, the batch view, is passed on as 202.
func (c *Server) runAction(call func(ctx context.Context, id string) (wire.BatchView, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _, ok := c.readAction(w, r)
		if !ok {
			return
		}
		v, err := call(r.Context(), id)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		writeJSON(w, http.StatusAccepted, v)
	}
}

func (b actionBody) budget() *float64        { return b.BudgetUSD }
func (b actionBody) ceilings() *api.Ceilings { return b.Ceilings }

// valueAction is an action whose body must carry one value: pick takes
// it from the body (nil: absent, a 400 naming field), call runs it
// through the API (which checks it), and its answer is passed on with
// status.
func valueAction[T, R any](c *Server, field string, pick func(actionBody) *T, status int, call func(ctx context.Context, id string, v T) (R, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, b, ok := c.readAction(w, r)
		if !ok {
			return
		}
		v := pick(b)
		if v == nil {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, `body: "`+field+`" is required`)
			return
		}
		res, err := call(r.Context(), id, *v)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		writeJSON(w, status, res)
	}
}

func (c *Server) release(w http.ResponseWriter, r *http.Request) {
	id, b, ok := c.readAction(w, r)
	if !ok {
		return
	}
	if b.Key == "" {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, `body: "key" is required`)
		return
	}
	if err := c.api.Release(r.Context(), id, b.Key); err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"batch_id": id, "key": b.Key, "message": "released " + b.Key})
}

// signal signals the suspended item the body's key names (POST
// /batches/{id}/items/{key}/signal), without a payload: it runs once
// more. The API's answer (api.SignalResult) is passed on with a message.
func (c *Server) signal(w http.ResponseWriter, r *http.Request) {
	id, b, ok := c.readAction(w, r)
	if !ok {
		return
	}
	if b.Key == "" {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, `body: "key" is required`)
		return
	}
	res, err := c.api.Signal(r.Context(), id, b.Key, b.Token, b.Payload)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	msg := "signalled " + b.Key + ": it runs once more"
	if !res.Woken {
		msg = b.Key + " was woken already (by " + string(res.By) + ")"
	}
	writeJSON(w, http.StatusOK, map[string]string{"batch_id": id, "key": b.Key, "message": msg})
}

func (c *Server) forget(w http.ResponseWriter, r *http.Request) {
	id, _, ok := c.readAction(w, r)
	if !ok {
		return
	}
	if err := c.api.Forget(r.Context(), id); err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"batch_id": id, "message": "forgotten " + id})
}

// ConsoleCorrection is the body of POST /api/batches/{id}/corrections: a
// corrections file as the page read it — its name (whose extension tells
// its format unless Format says) and its text — and the field or column
// holding each corrected item's key (default: the batch's key field).
type Correction struct {
	FileName string `json:"file_name"`
	Content  string `json:"content"`
	KeyField string `json:"key_field"`
	Format   string `json:"format"`
}

// ConsoleCorrectionMax bounds a corrections file sent from the page: its
// items go to the API inline (a request of at most 6 MiB); a larger one is
// for bulkrun correct, which uploads it.
const CorrectionMax = 4 << 20

// correct reads the corrections file the page sends with the source
// readers submit uses (a malformed line or a missing key is 400 naming
// it), and sends its items inline to POST /batches/{id}/corrections: 202
// with the revision and its run, or 200 when the same corrections were
// given before.
func (c *Server) correct(w http.ResponseWriter, r *http.Request) {
	id, ok := c.batchID(w, r)
	if !ok {
		return
	}
	var body Correction
	dec := json.NewDecoder(io.LimitReader(r.Body, 2*CorrectionMax))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, "body: "+err.Error())
		return
	}
	if len(body.Content) > CorrectionMax {
		writeError(w, http.StatusRequestEntityTooLarge, wire.CodeInvalidRequest,
			fmt.Sprintf("%s is over %d MiB: give it with bulkrun correct %s FILE, which uploads it", body.FileName, CorrectionMax>>20, id))
		return
	}
	format := strings.ToLower(body.Format)
	if format == "" {
		format = api.FormatOf(body.FileName)
	}
	switch format {
	case api.FormatJSONL, api.FormatJSON, api.FormatCSV:
	default:
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest,
			fmt.Sprintf("cannot tell the format of %q: name it .jsonl, .ndjson, .json or .csv", body.FileName))
		return
	}
	keyField := body.KeyField
	if keyField == "" {
		v, err := c.api.Status(r.Context(), id)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		if keyField = v.KeyField; keyField == "" {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest,
				fmt.Sprintf("batch %s has positional keys: name the field or column that holds each corrected item's key", id))
			return
		}
	}
	var items bytes.Buffer
	items.WriteByte('[')
	n := 0
	text, err := source.SourceText(strings.NewReader(body.Content))
	if err == nil {
		err = source.ReadText(text, format, body.FileName, "", keyField, nil, func(it source.SourceItem) error {
			if n > 0 {
				items.WriteByte(',')
			}
			n++
			items.Write(it.Input)
			return nil
		})
	}
	items.WriteByte(']')
	if err == nil && n == 0 {
		err = errors.New("holds no items")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, body.FileName+": "+err.Error())
		return
	}
	v, err := c.api.Correct(r.Context(), id, api.CorrectRequest{KeyField: keyField, Source: api.SourceSpec{Items: json.RawMessage(items.Bytes())}})
	if err != nil {
		writeAPIError(w, err)
		return
	}
	status := http.StatusOK
	if v.Batch.Created != nil && *v.Batch.Created {
		status = http.StatusAccepted
	}
	writeJSON(w, status, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, wire.ErrorBody{Code: code, Message: msg})
}

// writeAPIError answers an API error with its status and body, and any
// other error (no answer, credentials) as 502 with its text.
func writeAPIError(w http.ResponseWriter, err error) {
	var ae *client.APIError
	if errors.As(err, &ae) {
		writeJSON(w, ae.Status, ae.Body)
		return
	}
	writeError(w, http.StatusBadGateway, "api", err.Error())
}
