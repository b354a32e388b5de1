package enrich

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestRun covers the example pipeline's whole contract: output, cost
// records and the error class of each bad input (docs/pipelines.md "Write your
// own pipeline" shows this pipeline).
func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		options string
		output  string
		cost    pipeline.Cost
		class   pipeline.Class // checked when wantErr
		wantErr bool
	}{
		{name: "counts", input: `{"text":"héllo  big world"}`, output: `{"words":3,"runes":16,"first_word":"héllo"}`, cost: pipeline.Cost{"calls": 1, "words": 3}},
		{name: "empty text", input: `{"text":""}`, output: `{"words":0,"runes":0,"first_word":""}`, cost: pipeline.Cost{"calls": 1, "words": 0}},
		{name: "at the limit", input: `{"text":"a b"}`, options: `{"max_words":2}`, output: `{"words":2,"runes":3,"first_word":"a"}`, cost: pipeline.Cost{"calls": 1, "words": 2}},
		{name: "over the limit quarantines", input: `{"text":"a b c"}`, options: `{"max_words":2}`, cost: pipeline.Cost{"calls": 1, "words": 3}, wantErr: true, class: pipeline.ClassQuarantine},
		{name: "missing text is permanent", input: `{}`, wantErr: true, class: pipeline.ClassPermanent},
		{name: "text not a string is permanent", input: `{"text":7}`, wantErr: true, class: pipeline.ClassPermanent},
		{name: "input not an object is permanent", input: `"hi"`, wantErr: true, class: pipeline.ClassPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := pipeline.Request{BatchID: "b", Key: "k", Attempt: 1, Input: json.RawMessage(tt.input)}
			if tt.options != "" {
				req.Options = json.RawMessage(tt.options)
			}
			res, err := New().Run(context.Background(), req)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("err = nil, want class %v", tt.class)
				}
				if got := pipeline.Classify(err); got != tt.class {
					t.Errorf("class = %v, want %v (err %v)", got, tt.class, err)
				}
			} else {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if string(res.Output) != tt.output {
					t.Errorf("output = %s, want %s", res.Output, tt.output)
				}
			}
			if len(res.Cost) != len(tt.cost) {
				t.Errorf("cost = %v, want %v", res.Cost, tt.cost)
			}
			for k, v := range tt.cost {
				if res.Cost[k] != v {
					t.Errorf("cost[%s] = %v, want %v", k, res.Cost[k], v)
				}
			}
		})
	}
}

// TestValidateOptions: bad options are refused at submit with an
// *OptionError naming the option, before any item runs.
func TestValidateOptions(t *testing.T) {
	for _, tt := range []struct {
		options string
		ok      bool
	}{
		{`{}`, true}, {`{"max_words":5}`, true}, {``, true},
		{`{"max_words":-1}`, false}, {`{"max_words":"5"}`, false}, {`[]`, false},
	} {
		err := New().ValidateOptions(json.RawMessage(tt.options))
		if tt.ok != (err == nil) {
			t.Errorf("ValidateOptions(%s) = %v, want ok %v", tt.options, err, tt.ok)
		}
		var oe *pipeline.OptionError
		if err != nil && (!errors.As(err, &oe) || oe.Option != "max_words") {
			t.Errorf("ValidateOptions(%s) = %#v, want *OptionError for max_words", tt.options, err)
		}
	}
}
