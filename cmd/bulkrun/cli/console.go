package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/console"
	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/config"
)

// credentials.
type s3Objects struct {
	s3     *s3.Client
	bucket string
}

func (o s3Objects) GetObject(ctx context.Context, key string, offset int64) (io.ReadCloser, string, error) {
	in := &s3.GetObjectInput{Bucket: &o.bucket, Key: &key}
	if offset > 0 {
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", offset))
	}
	out, err := o.s3.GetObject(ctx, in)
	var nk *types.NoSuchKey
	if errors.As(err, &nk) {
		return nil, "", fmt.Errorf("s3://%s/%s: %w", o.bucket, key, console.ErrNoObject)
	}
	if err != nil {
		return nil, "", fmt.Errorf("read s3://%s/%s: %w", o.bucket, key, err)
	}
	return out.Body, aws.ToString(out.ContentType), nil
}

func (a *app) consoleCmd() *cobra.Command {
	var (
		port int
		open bool
	)
	cmd := &cobra.Command{
		Use:   "console [--port N] [--open]",
		Short: "Serve a web console of the batches on http://127.0.0.1:PORT/ (Ctrl-C stops it)",
		Long: `Serve a web console on this machine only (127.0.0.1): the batch list, each batch's
census, cost, verdict, runs, failed, quarantined and in-flight items, report and
results locations, thumbnails of image pipelines, and resume, cancel, pause, unpause, release and
forget with a confirmation. The console calls the API with your AWS credentials,
resolved as every other command does (--profile, --region, AWS_ENDPOINT_URL); the
page never sees them: it talks only to this process, which answers a fixed set of
operations. Open the address it prints: its token gives your browser the
console's session; without it the console answers nothing.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 0 || port > 65535 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--port: %d is not within 0–65535", port)}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := a.load(ctx); err != nil {
				return err
			}
			bucket, err := a.outs.Get(config.OutputBucket)
			if err != nil {
				return err
			}
			ln, err := consoleListen(port)
			if err != nil {
				return fmt.Errorf("console: listen on 127.0.0.1:%d: %w (another console running? pick one with --port, 0 for any free port)", port, err)
			}
			c, err := console.New(a.api, s3Objects{s3: blob.NewS3(a.aws), bucket: bucket}, bucket, ln.Addr().(*net.TCPAddr).Port)
			if err != nil {
				ln.Close()
				return err
			}
			// The address carries the token: whoever opens it gets the
			// console's session; other users and processes of this machine,
			// who can reach 127.0.0.1 too, do not know it.
			u := fmt.Sprintf("http://127.0.0.1:%d/?token=%s", c.Port(), c.Token())
			textf(a.out, "bulkrun console: %s (stack %s; Ctrl-C to stop)\n", u, a.stack)
			if open {
				defer a.openConsole(u)()
			}
			return c.Serve(ctx, ln)
		},
	}
	cmd.Flags().IntVar(&port, "port", console.DefaultPort, "port on 127.0.0.1 (0: any free port)")
	cmd.Flags().BoolVar(&open, "open", false, "open the console in the default browser")
	return cmd
}

// openConsole opens the console's address u in the default browser, or
// says why it could not and to open u by hand; it returns what to do
// once the console stops (remove the opener's file).
//
// The browser is given a private file that leads to u, not u itself: a
// command line is visible to every user of the machine (ps), the token
// must not be.
func (a *app) openConsole(u string) func() {
	done := func() {}
	f, err := consoleOpener(u)
	if err == nil {
		done = func() { os.Remove(f) }
		err = openBrowser("file://" + filepath.ToSlash(f))
	}
	if err != nil {
		textf(a.errw, "could not open a browser (%v): open %s in a browser on this machine\n", err, u)
	}
	return done
}

// consoleListen listens on 127.0.0.1:port (0: a free port), the loopback
// interface only: the console is for the user of this machine.
func consoleListen(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// consoleOpener writes a page that takes the browser to u (the console's
// address with its token) into a new file only the user can read (mode
// 0600, in the temporary directory) and returns its path; the caller
// removes it.
func consoleOpener(u string) (string, error) {
	f, err := os.CreateTemp("", "bulkrun-console-*.html")
	if err != nil {
		return "", err
	}
	if err := f.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	q := html.EscapeString(u)
	_, err = fmt.Fprintf(f, "<!doctype html>\n<meta charset=\"utf-8\">\n<meta http-equiv=\"refresh\" content=\"0;url=%s\">\n<title>bulkrun console</title>\n<p><a href=\"%s\">Open the bulkrun console</a></p>\n", q, q)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// browserWait is how long openBrowser waits for the desktop's opener to
// answer: one that is still running then is taken to have opened it.
const browserWait = 5 * time.Second

// openBrowser asks the desktop to open u, and waits up to browserWait for
// its opener's answer: an opener that is missing, or that exits with an
// error (a machine without a browser or a display: xdg-open's "no method
// available"), is an error naming it and the last line it said.
func openBrowser(u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	var said bytes.Buffer
	cmd.Stdout, cmd.Stderr = &said, &said
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			return nil
		}
		lines := strings.Split(strings.TrimSpace(said.String()), "\n")
		if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
			return fmt.Errorf("%s: %v: %s", filepath.Base(cmd.Path), err, last)
		}
		return fmt.Errorf("%s: %v", filepath.Base(cmd.Path), err)
	case <-time.After(browserWait):
		return nil
	}
}
