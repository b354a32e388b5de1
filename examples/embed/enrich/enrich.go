// Package enrich is a small example pipeline, "enrich": it counts the words
// and characters of an item's text. It shows the whole pipeline contract of
// package pipeline — input and options decoding, output, cost records and
// the error classes. The team's module declares it once, in package
// pipelines: its binary (runner/) runs it as bulkrun's submit and item
// functions, and its CDK app (main.go) names it to the construct.
//
// Item input: {"text": "…"} (required, a JSON string).
// Batch options: {"max_words": n} (optional, n ≥ 1; default no limit).
// Output: {"words": n, "runes": n, "first_word": "…"}.
// Cost: {"calls": 1, "words": n}.
//
// Errors: an input that is not an object with a string "text" is
// Permanent (the item ends failed; a retry cannot fix it); a text longer
// than max_words words is Quarantined (set aside for a person to look at);
// bad options are refused at submit (an *pipeline.OptionError naming
// "max_words").
package enrich

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"
)

// Name is the pipeline's registered name.
const Name = "enrich"

// Declaration declares the pipeline to bulkrun (registered.Declaration):
// its name, and its constructor, run once per process.
var Declaration = registered.Declaration{Name: Name, New: func(registered.Deps) (pipeline.Pipeline, error) { return New(), nil }}

// Input is an item's input.
type Input struct {
	Text *string `json:"text"`
}

// Options are a batch's pipeline options.
type Options struct {
	// MaxWords quarantines items with more words; 0 means no limit.
	MaxWords int `json:"max_words"`
}

// Output is an item's output.
type Output struct {
	Words     int    `json:"words"`
	Runes     int    `json:"runes"`
	FirstWord string `json:"first_word"`
}

// Pipeline is the enrich pipeline. The zero value is ready; it holds no
// state, so it is safe for concurrent use and idempotent per item.
type Pipeline struct{}

// New returns the enrich pipeline.
func New() *Pipeline { return &Pipeline{} }

var _ pipeline.Pipeline = (*Pipeline)(nil)
var _ pipeline.OptionsValidator = (*Pipeline)(nil)

// ValidateOptions checks a batch's options at submit: a bad max_words is
// refused with a 400 naming pipeline_options.max_words.
func (p *Pipeline) ValidateOptions(options json.RawMessage) error {
	_, err := decodeOptions(options)
	return err
}

func decodeOptions(options json.RawMessage) (Options, error) {
	var o Options
	if len(options) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(options, &o); err != nil {
		return o, &pipeline.OptionError{Option: "max_words", Err: fmt.Errorf("enrich options: %w", err)}
	}
	if o.MaxWords < 0 {
		return o, &pipeline.OptionError{Option: "max_words", Err: fmt.Errorf("max_words %d: want ≥ 1 (0: no limit)", o.MaxWords)}
	}
	return o, nil
}

// Run enriches one item. See the package comment for input, output, cost
// and errors.
func (p *Pipeline) Run(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
	o, err := decodeOptions(req.Options)
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	var in Input
	if err := json.Unmarshal(req.Input, &in); err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("enrich %s: input: %w", req.Key, err))
	}
	if in.Text == nil {
		return pipeline.Result{}, pipeline.Permanent(errors.New("enrich " + req.Key + `: input: "text" is required`))
	}
	words := strings.Fields(*in.Text)
	cost := pipeline.Cost{"calls": 1, "words": float64(len(words))}
	if o.MaxWords > 0 && len(words) > o.MaxWords {
		return pipeline.Result{Cost: cost}, pipeline.Quarantine(fmt.Errorf("enrich %s: %d words, over max_words %d", req.Key, len(words), o.MaxWords))
	}
	out := Output{Words: len(words), Runes: utf8.RuneCountInString(*in.Text)}
	if len(words) > 0 {
		out.FirstWord = words[0]
	}
	b, err := json.Marshal(out)
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	return pipeline.Result{Output: b, Cost: cost}, nil
}
