// Package event is the EventBridge adapter of ledger.Events: when a run
// finishes, finalize puts one event on the default bus (source "bulkrun")
// so that users can subscribe with a rule.
package event

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// DetailType returns the detail type of a run that ended with status.
func DetailType(s api.Status) string {
	switch s {
	case api.StatusThresholdExceeded:
		return api.DetailThresholdExceeded
	case api.StatusCancelled:
		return api.DetailCancelled
	}
	return api.DetailCompleted
}

// Detail is the event's detail: the run's outcome, census and report.
// Delivery is at least once (a finalize that dies before marking the event
// published is followed by another put); EventID is the same on every
// delivery of a run, for subscribers to dedupe on (EventBridge's own "id"
// differs per put).
type Detail struct {
	EventID        string     `json:"event_id"` // ledger.EventID: "{batch_id}:{run}:{created_at epoch ms}"
	BatchID        string     `json:"batch_id"`
	Run            int        `json:"run"`
	Status         api.Status `json:"status"`
	NeedsAttention bool       `json:"needs_attention"`
	Census         api.Census `json:"census"`
	Report         string     `json:"report"` // s3:// URI of report.json
}

// Bus publishes to one event bus. Safe for concurrent use.
type Bus struct {
	client *eventbridge.Client
	bus    string
	bucket string
}

var _ ledger.Events = (*Bus)(nil)

// New returns a Bus on bus ("" or "default": the account's default bus);
// bucket is the batches bucket, to name the report. It uses a copy of
// client whose errors are classified by awsfault's table (awsfault.Tag:
// throttling, 5xx and no answer past the SDK's tries are
// ledger.ErrUnavailable); client is not changed.
func New(client *eventbridge.Client, bus, bucket string) *Bus {
	if bus == "" {
		bus = "default"
	}
	client = eventbridge.New(client.Options(), func(o *eventbridge.Options) {
		o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("events"))
	})
	return &Bus{client: client, bus: bus, bucket: bucket}
}

// Put puts one event of detailType with detail (marshalled to JSON) on the
// bus, source Source. An entry EventBridge refuses is an error. Delivery to
// rules is at least once; subscribers dedupe on the detail.
func (b *Bus) Put(ctx context.Context, detailType string, detail any) error {
	body, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	out, err := b.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{{
		EventBusName: aws.String(b.bus), Source: aws.String(api.EventSource), DetailType: aws.String(detailType),
		Detail: aws.String(string(body)), Resources: []string{},
	}}})
	if err != nil {
		return fmt.Errorf("put %s event: %w", detailType, err)
	}
	if out.FailedEntryCount > 0 && len(out.Entries) > 0 {
		return fmt.Errorf("put %s event: %s: %s", detailType, aws.ToString(out.Entries[0].ErrorCode), aws.ToString(out.Entries[0].ErrorMessage))
	}
	return nil
}

// Publish puts the run's event. An entry EventBridge refuses is an error.
func (b *Bus) Publish(ctx context.Context, r api.Report) error {
	detail, err := CompletionDetail(r, b.bucket)
	if err != nil {
		return err
	}
	out, err := b.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{{
		EventBusName: aws.String(b.bus), Source: aws.String(api.EventSource), DetailType: aws.String(DetailType(r.Status)),
		Detail: aws.String(string(detail)), Resources: []string{},
	}}})
	if err != nil {
		return fmt.Errorf("put event for %s run %d: %w", r.BatchID, r.Run, err)
	}
	if out.FailedEntryCount > 0 && len(out.Entries) > 0 {
		return fmt.Errorf("put event for %s run %d: %s: %s", r.BatchID, r.Run, aws.ToString(out.Entries[0].ErrorCode), aws.ToString(out.Entries[0].ErrorMessage))
	}
	return nil
}

// MaxEntryBytes is EventBridge's limit on one PutEvents entry: 256 KB,
// counted as the UTF-8 bytes of its api.EventSource, DetailType, Detail and
// Resources plus 14 for its Time (Amazon EventBridge user guide,
// "Calculating Amazon EventBridge PutEvents event entry size",
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html).
const MaxEntryBytes = 256 * 1024

// EntryBytes is an entry's size by EventBridge's rule (MaxEntryBytes).
func EntryBytes(source, detailType, detail string, resources []string) int {
	n := 14 + len(source) + len(detailType) + len(detail)
	for _, r := range resources {
		n += len(r)
	}
	return n
}

// CompletionDetail is the JSON detail of r's completion event: the census
// bounded as on the batch row (api.Census.Bounded: at most
// api.MaxCensusCostNames names per rollup) and the report's URI, which
// has everything. Whatever the census held, the entry stays within
// MaxEntryBytes: should it not, its cost rollups are left out
// (cost_names_omitted counts them) and the report carries them.
func CompletionDetail(r api.Report, bucket string) (string, error) {
	d := Detail{EventID: ledger.EventID(r), BatchID: r.BatchID, Run: r.Run, Status: r.Status, NeedsAttention: r.NeedsAttention,
		Census: r.Census.Bounded(), Report: "s3://" + bucket + "/" + api.ReportKey(r.BatchID, r.Run)}
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	if EntryBytes(api.EventSource, DetailType(r.Status), string(b), nil) > MaxEntryBytes {
		d.Census.CostNamesOmitted += len(d.Census.Cost) + len(d.Census.RunSpent)
		d.Census.Cost, d.Census.RunSpent = nil, nil
		if b, err = json.Marshal(d); err != nil {
			return "", err
		}
	}
	return string(b), nil
}
