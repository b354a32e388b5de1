package handler

import (
	"context"
	"errors"
	"testing"

	"github.com/bulkrun/bulkrun/shared/source"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// Product line: an empty source answers 400 with code empty_source, other
// bad input stays invalid_request.
func TestErrorOfEmptySource(t *testing.T) {
	for _, tt := range []struct {
		err   error
		code  string
		field string
	}{
		{&api.InputError{Field: "source.object", Reason: "holds no items", Err: api.ErrEmptySource}, "empty_source", "source.object"},
		{errors.Join(errors.New("submit b1"), &api.InputError{Field: "source.prefix", Reason: "holds no items", Err: api.ErrEmptySource}), "empty_source", "source.prefix"},
		{&api.InputError{Line: 3, Reason: "not valid JSON"}, "invalid_request", ""},
		{&api.BatchRefusedError{BatchID: "b1", Refusal: api.SubmitRefusal{Code: api.RefusalEmptySource, Message: "holds no items", Field: "source.object"}}, "empty_source", "source.object"},
	} {
		status, body := ErrorOf(tt.err)
		if status != 400 || body.Code != tt.code || body.Field != tt.field {
			t.Errorf("ErrorOf(%v) = %d %+v, want 400 %s on %q", tt.err, status, body, tt.code, tt.field)
		}
	}
}

type fakeHead map[string]string

func (f fakeHead) HeadMatch(context.Context, string, string, string) (source.ObjectInfo, map[string]string, error) {
	return source.ObjectInfo{ETag: `"e1"`}, f, nil
}

// Product line: an upload takes the CSV delimiter and the early-stop switch
// from its metadata (x-amz-meta-csv-delimiter, x-amz-meta-stop-on-threshold).
func TestUploadMetadataSourceOptions(t *testing.T) {
	s := &Submit{DefaultPipeline: "webhook", Submitter: &submit.Submitter{}}
	s.Heads = fakeHead{"Csv-Delimiter": "semicolon", "stop-on-threshold": "false"}
	req, _, err := s.uploadRequest(context.Background(), "b", "incoming/orders.csv", "e1")
	if err != nil || req.Source.CSVDelimiter != "semicolon" || req.StopOnThreshold == nil || *req.StopOnThreshold {
		t.Fatalf("request %+v (stop %v), err %v", req.Source, req.StopOnThreshold, err)
	}
	s.Heads = fakeHead{"stop-on-threshold": "perhaps"}
	var ie *api.InputError
	if _, _, err := s.uploadRequest(context.Background(), "b", "incoming/orders.csv", "e1"); !errors.As(err, &ie) || ie.Field != "x-amz-meta-stop-on-threshold" {
		t.Fatalf("err = %v, want the metadata named", err)
	}
	// A budget (x-amz-meta-budget-usd): dollars > 0, else the metadata named.
	s.Heads = fakeHead{"budget-usd": "12.5"}
	if req, _, err := s.uploadRequest(context.Background(), "b", "incoming/orders.csv", "e1"); err != nil || req.BudgetUSD == nil || *req.BudgetUSD != 12.5 {
		t.Fatalf("budget: %v, %v: want 12.5", req.BudgetUSD, err)
	}
	for _, bad := range []string{"lots", "0", "-3", "NaN"} {
		s.Heads = fakeHead{"budget-usd": bad}
		if _, _, err := s.uploadRequest(context.Background(), "b", "incoming/orders.csv", "e1"); !errors.As(err, &ie) || ie.Field != "x-amz-meta-budget-usd" {
			t.Errorf("budget %q: %v, want the metadata named", bad, err)
		}
	}
}
