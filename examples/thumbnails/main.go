// Command thumbnails is bulkrun's demo: it uploads the example images to
// the stack's bucket, submits one batch over their prefix with the
// `thumbnail` pipeline, shows progress until the run is finished, prints
// the census and where the report, results and thumbnails are, and writes a
// contact sheet of the thumbnails to a local folder.
//
// Usage: go run ./examples/thumbnails [-stack bulkrun] [-images examples/images] [-out demo-output]
//
// It exits non-zero when the batch does not finish, or when its census does
// not account for every uploaded file.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"image"
	_ "image/png"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/wire"

	"github.com/bulkrun/bulkrun/shared/source"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"
	"github.com/schollz/progressbar/v3"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/internal/contactsheet"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	stackName := flag.String("stack", config.DefaultStackName, "stack name")
	dir := flag.String("images", "examples/images", "folder of images to upload")
	out := flag.String("out", "demo-output", "folder for the contact sheet")
	timeout := flag.Duration("timeout", 8*time.Minute, "how long to wait for the batch")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *stackName, *dir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, stackName, dir, out string) error {
	ac, err := function.AWSConfig(ctx)
	if err != nil {
		return err
	}
	// No SDK log lines between the demo's own (as the CLI): the SDK warns
	// on stderr when a response body it drains is cut ("failed to discard
	// remaining HTTP response body"), which says nothing to act on; an
	// error the demo meets is printed by it, with the SDK's cause.
	ac.Logger, ac.ClientLogMode = logging.Nop{}, 0
	stack, err := client.FindStack(ctx, ac, stackName)
	if err != nil {
		return err
	}
	bucket, err := stack.Get(config.OutputBucket)
	if err != nil {
		return err
	}
	cl, err := client.New(ac, stack)
	if err != nil {
		return err
	}
	s3c := function.NewS3(ac)

	files, err := filepath.Glob(filepath.Join(dir, "*.png"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no .png files in %s", dir)
	}
	sort.Strings(files)
	// The prefix and batch id derive from the files' content: running the
	// demo twice on the same stack answers the same batch (idempotent submit).
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %x\n", filepath.Base(f), sha256.Sum256(b))
	}
	tag := hex.EncodeToString(h.Sum(nil))[:12]
	prefix := config.UploadsPrefix + "examples/images-" + tag + "/" // uploads/: a source on every target
	fmt.Printf("uploading %d files to s3://%s/%s\n", len(files), bucket, prefix)
	if err := upload(ctx, s3c, bucket, prefix, files); err != nil {
		return err
	}

	id := "demo-thumbnails-" + tag
	submitted := time.Now()
	view, err := cl.Submit(ctx, api.SubmitRequest{
		BatchID:  id,
		Pipeline: "thumbnail",
		Source:   api.SourceSpec{Prefix: "s3://" + bucket + "/" + prefix},
		Options:  []byte(`{"max_width": 96, "max_height": 96}`),
	})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	created := *view.Created
	// A prefix is read in the background: wait until the manifest is frozen.
	if view, err = cl.Submitted(ctx, id, 500*time.Millisecond); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if view.Refusal != nil {
		return fmt.Errorf("submit: batch %s refused: %s", id, view.Refusal.Message)
	}
	view.Created = &created
	fmt.Printf("batch %s: %d items (created: %v, manifest sha256 %s)\n", view.ID, view.ItemCount, *view.Created, view.Digest[:16])

	// The bar's own items/s counts from its creation, moments before the
	// first view, whose items ended while the batch was submitted (it
	// printed millions a second): the rate is the items ended since the
	// submit over its time, once a second has passed.
	bar := progressbar.NewOptions64(view.ItemCount, progressbar.OptionSetDescription("items"),
		progressbar.OptionShowCount(), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionThrottle(200*time.Millisecond))
	final, err := cl.Wait(ctx, id, time.Second, func(v wire.BatchView) {
		if v.Census != nil {
			ended := v.Census.Total - v.Census.Pending - v.Census.InFlight
			_ = bar.Set64(ended)
			rate := ""
			if d := time.Since(submitted); d >= time.Second {
				rate = fmt.Sprintf(", %.1f items/s", float64(ended)/d.Seconds())
			}
			bar.Describe(fmt.Sprintf("ok %d failed %d in flight %d%s", v.Census.Succeeded, v.Census.Failed, v.Census.InFlight, rate))
		}
	})
	_ = bar.Finish()
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	rep, err := cl.Report(ctx, id)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	c := rep.Census
	fmt.Printf("\nbatch %s run %d: %s (needs_attention: %v)\n", rep.BatchID, rep.Run, rep.Status, rep.NeedsAttention)
	fmt.Printf("census: total %d  succeeded %d  failed %d  quarantined %d  cancelled %d  in_flight %d  pending %d\n",
		c.Total, c.Succeeded, c.Failed, c.Quarantined, c.Cancelled, c.InFlight, c.Pending)
	fmt.Print("cost:  ")
	for _, k := range c.Cost.Names() {
		fmt.Printf(" %s %s", k, c.Cost.Text(k))
	}
	fmt.Println()
	fmt.Printf("report:     s3://%s/%s\n", bucket, final.ReportKey)
	fmt.Printf("results:    %s\n", rep.Results.Manifest)
	fmt.Printf("thumbnails: %s\n", rep.Outputs)
	if f, ok := rep.Results.Files[api.OutcomeFailed]; ok {
		fmt.Printf("failed items (%s):\n", f.URI)
		if err := printFailures(ctx, s3c, f.URI); err != nil {
			return err
		}
	}
	if c.Total != int64(len(files)) || c.InFlight != 0 || c.Pending != 0 || c.Succeeded+c.Failed != c.Total {
		return fmt.Errorf("census does not account for the %d uploaded files", len(files))
	}
	sheet, n, err := contactSheet(ctx, s3c, bucket, strings.TrimPrefix(rep.Outputs, "s3://"+bucket+"/"), out)
	if err != nil {
		return fmt.Errorf("contact sheet: %w", err)
	}
	fmt.Printf("contact sheet of %d thumbnails: %s\n", n, sheet)
	return nil
}

func upload(ctx context.Context, s3c *s3.Client, bucket, prefix string, files []string) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(files))
	sem := make(chan struct{}, 8)
	for _, f := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func(f string) {
			defer func() { <-sem; wg.Done() }()
			b, err := os.ReadFile(f)
			if err != nil {
				errs <- err
				return
			}
			_, err = s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(prefix + filepath.Base(f)),
				Body: bytes.NewReader(b), ContentType: aws.String("image/png")})
			if err != nil {
				errs <- fmt.Errorf("upload %s: %w", f, err)
			}
		}(f)
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func printFailures(ctx context.Context, s3c *s3.Client, uri string) error {
	bucket, key, err := api.ParseS3URI(uri)
	if err != nil {
		return err
	}
	o, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return err
	}
	defer o.Body.Close()
	return api.ReadResults(o.Body, func(l api.ResultLine) error {
		fmt.Printf("  %s  %s\n", l.Key, l.Error)
		return nil
	})
}

func contactSheet(ctx context.Context, s3c *s3.Client, bucket, prefix, out string) (string, int, error) {
	var tiles []contactsheet.Tile
	// blob.Store.List lists with EncodingType=url: any key comes back as stored.
	err := blob.New(s3c, bucket).List(ctx, bucket, prefix, func(o source.ObjectInfo) error {
		obj, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &o.Key})
		if err != nil {
			return err
		}
		img, _, err := image.Decode(obj.Body)
		obj.Body.Close()
		if err != nil {
			return fmt.Errorf("thumbnail %s: %w", o.Key, err)
		}
		tiles = append(tiles, contactsheet.Tile{Label: strings.TrimSuffix(filepath.Base(o.Key), ".png"), Image: img})
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", 0, err
	}
	path := filepath.Join(out, "contact-sheet.png")
	f, err := os.Create(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if err := contactsheet.Render(f, tiles, contactsheet.Options{Title: "bulkrun thumbnails"}); err != nil {
		return "", 0, err
	}
	return path, len(tiles), f.Close()
}
