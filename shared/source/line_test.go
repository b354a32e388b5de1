package source

import (
	"context"
	"io"
	"strings"
	"testing"
)

type rangeBlob string

func (b rangeBlob) OpenRange(_ context.Context, _ string, offset, length int64) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(b)[offset : offset+length])), nil
}

func TestReadManifestLine(t *testing.T) {
	m := rangeBlob(`{"key":"a","input":1}` + "\n" + `{"key":"b","input":{"x":2}}` + "\n")
	ctx := context.Background()
	l, err := ReadManifestLine(ctx, m, "manifest", "b", Chunk{Offset: 22, Length: 27})
	if err != nil || l.Key != "b" || string(l.Input) != `{"x":2}` {
		t.Fatalf("line b: %+v %v", l, err)
	}
	if _, err := ReadManifestLine(ctx, m, "manifest", "a", Chunk{Offset: 22, Length: 27}); err == nil || !strings.Contains(err.Error(), `at 22 holds key "b", want "a"`) {
		t.Errorf("another key at the offset: %v, want an error naming it", err)
	}
	if _, err := ReadManifestLine(ctx, m, "manifest", "a", Chunk{Offset: 3, Length: 10}); err == nil || !strings.Contains(err.Error(), "manifest line at 3") {
		t.Errorf("a range inside a line: %v, want an error naming its offset", err)
	}
}
