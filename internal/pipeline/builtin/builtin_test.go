package builtin_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/internal/pipeline/builtin"
	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

type nopSource struct{}

func (nopSource) Open(context.Context, string, string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("")), nil
}

func TestNames(t *testing.T) {
	got := builtin.Names()
	if want := []string{"lambda", "thumbnail", "webhook"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	if !slices.IsSorted(got) {
		t.Errorf("Names() = %q is not sorted", got)
	}
	got[0] = "changed"
	if builtin.Names()[0] != "lambda" {
		t.Error("Names() returns a shared slice")
	}
}

func TestRegister(t *testing.T) {
	noop := pipeline.Func(func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	tests := []struct {
		name      string
		reg       func() *pipeline.Registry
		src       bool
		wantNames []string
		wantErr   string
	}{
		{name: "empty registry", reg: func() *pipeline.Registry { return &pipeline.Registry{} }, src: true,
			wantNames: []string{"lambda", "thumbnail", "webhook"}},
		{name: "next to a user pipeline", reg: func() *pipeline.Registry {
			r := &pipeline.Registry{}
			_ = r.Register("enrich", noop)
			return r
		}, src: true, wantNames: []string{"enrich", "lambda", "thumbnail", "webhook"}},
		{name: "webhook taken: nothing registered", reg: func() *pipeline.Registry {
			r := &pipeline.Registry{}
			_ = r.Register("webhook", noop)
			return r
		}, src: true, wantNames: []string{"webhook"}, wantErr: `builtin: register "webhook": already registered`},
		{name: "nil source", reg: func() *pipeline.Registry { return &pipeline.Registry{} },
			wantNames: []string{}, wantErr: `builtin: register "thumbnail": nil thumbnail.Source`},
		{name: "nil registry", reg: func() *pipeline.Registry { return nil }, src: true, wantErr: "builtin: nil registry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.reg()
			var src thumbnail.Source
			if tt.src {
				src = nopSource{}
			}
			err := builtin.Register(r, src, nil, nil, nil)
			if got := fmt.Sprint(err); (tt.wantErr == "" && err != nil) || (tt.wantErr != "" && got != tt.wantErr) {
				t.Fatalf("Register = %v, want %q", err, tt.wantErr)
			}
			if r == nil {
				return
			}
			if got := r.Names(); !slices.Equal(got, tt.wantNames) {
				t.Errorf("registered %q, want %q", got, tt.wantNames)
			}
		})
	}
}

func ExampleRegister() {
	var r pipeline.Registry
	if err := builtin.Register(&r, nopSource{}, nil, nil, nil); err != nil {
		fmt.Println(err)
		return
	}
	_, ok := r.Lookup("webhook")
	fmt.Println(r.Names(), ok)
	// Output: [lambda thumbnail webhook] true
}
