package keyset_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bulkrun/bulkrun/internal/keyset"
)

// budgets are the memory budgets every table case runs under: everything in
// memory, a spill every few keys, and one in between.
var budgets = []int{0, 64, 1024}

// detect adds keys at lines 1, 2, … and returns Finish's result.
func detect(t testing.TB, opts keyset.Options, keys []string) (keyset.Stats, error) {
	t.Helper()
	d := keyset.New(opts)
	defer d.Close()
	for i, k := range keys {
		if err := d.Add([]byte(k), int64(i+1)); err != nil {
			t.Fatalf("Add(%q, %d) = %v", k, i+1, err)
		}
	}
	err := d.Finish()
	return d.Stats(), err
}

// numbered returns n keys "item-0001", "item-0002", ….
func numbered(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("item-%04d", i+1)
	}
	return keys
}

func TestFinish(t *testing.T) {
	far := append(numbered(200), "item-0007")
	three := append(numbered(200), "item-0150", "item-0150")
	two := []string{"m", "z", "q", "m", "b", "c", "a", "c"}

	tests := []struct {
		name    string
		keys    []string
		want    *keyset.DuplicateKeyError // nil: every key unique
		wantErr error
	}{
		{name: "no keys"},
		{name: "unique keys", keys: numbered(300)},
		{name: "one key", keys: []string{"only"}},
		{
			name:    "duplicate adjacent",
			keys:    []string{"a", "b", "b", "c"},
			want:    &keyset.DuplicateKeyError{Key: "b", FirstLine: 2, SecondLine: 3},
			wantErr: keyset.ErrDuplicateKey,
		},
		{
			name:    "duplicate far apart",
			keys:    far,
			want:    &keyset.DuplicateKeyError{Key: "item-0007", FirstLine: 7, SecondLine: 201},
			wantErr: keyset.ErrDuplicateKey,
		},
		{
			name:    "key seen three times reports its first two lines",
			keys:    three,
			want:    &keyset.DuplicateKeyError{Key: "item-0150", FirstLine: 150, SecondLine: 201},
			wantErr: keyset.ErrDuplicateKey,
		},
		{
			name:    "two duplicated keys report the smallest",
			keys:    two,
			want:    &keyset.DuplicateKeyError{Key: "c", FirstLine: 6, SecondLine: 8},
			wantErr: keyset.ErrDuplicateKey,
		},
		{
			name: "prefixes and trailing bytes are different keys",
			keys: []string{"ab", "a\x00", "a", "a\x00\x00", "a\xff", "b", "a\x01"},
		},
		{
			name:    "prefix key duplicated",
			keys:    []string{"ab", "a\x00", "a", "a\x00\x00", "a\x00"},
			want:    &keyset.DuplicateKeyError{Key: "a\x00", FirstLine: 2, SecondLine: 5},
			wantErr: keyset.ErrDuplicateKey,
		},
		{
			name: "non-ASCII keys compared as bytes, not normalized",
			keys: []string{"café", "cafe\u0301", "cafe", "日本", "日本語", "Ωmega", "😀"},
		},
		{
			name:    "non-ASCII key duplicated",
			keys:    []string{"日本語", "café", "日本", "😀", "日本"},
			want:    &keyset.DuplicateKeyError{Key: "日本", FirstLine: 3, SecondLine: 5},
			wantErr: keyset.ErrDuplicateKey,
		},
		{
			name:    "longest keys",
			keys:    []string{strings.Repeat("k", 1024), strings.Repeat("k", 1023) + "j", strings.Repeat("k", 1024)},
			want:    &keyset.DuplicateKeyError{Key: strings.Repeat("k", 1024), FirstLine: 1, SecondLine: 3},
			wantErr: keyset.ErrDuplicateKey,
		},
	}
	for _, tt := range tests {
		for _, budget := range budgets {
			for _, maxMerge := range []int{0, 2} {
				t.Run(fmt.Sprintf("%s/memory=%d/merge=%d", tt.name, budget, maxMerge), func(t *testing.T) {
					t.Parallel()
					opts := keyset.Options{Dir: t.TempDir(), MemoryBytes: budget, MaxMergeRuns: maxMerge}
					_, err := detect(t, opts, tt.keys)
					if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
						t.Fatalf("Finish() = %v, want %v", err, tt.wantErr)
					}
					var got *keyset.DuplicateKeyError
					if errors.As(err, &got) != (tt.want != nil) {
						t.Fatalf("Finish() = %v, want %v", err, tt.want)
					}
					if tt.want != nil && *got != *tt.want {
						t.Fatalf("Finish() = %#v, want %#v", *got, *tt.want)
					}
				})
			}
		}
	}
}

// TestSpills checks that a tiny budget puts the two occurrences of a key in
// different runs and that Finish still finds them, merging in passes when
// there are more runs than MaxMergeRuns.
func TestSpills(t *testing.T) {
	tests := []struct {
		name            string
		opts            keyset.Options
		wantMinRuns     int
		wantMergePasses bool
	}{
		{name: "one merge", opts: keyset.Options{MemoryBytes: 256}, wantMinRuns: 40},
		{name: "merge passes", opts: keyset.Options{MemoryBytes: 64, MaxMergeRuns: 3}, wantMinRuns: 200, wantMergePasses: true},
		{name: "in memory", opts: keyset.Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Dir = t.TempDir()
			st, err := detect(t, tt.opts, append(numbered(500), "item-0007"))
			want := &keyset.DuplicateKeyError{Key: "item-0007", FirstLine: 7, SecondLine: 501}
			var got *keyset.DuplicateKeyError
			if !errors.As(err, &got) || *got != *want {
				t.Fatalf("Finish() = %v, want %v", err, want)
			}
			if st.Keys != 501 || st.Runs < tt.wantMinRuns || (st.Runs == 0) != (tt.wantMinRuns == 0) {
				t.Errorf("Stats() = %+v, want 501 keys and at least %d runs", st, tt.wantMinRuns)
			}
			if (st.MergePasses > 0) != tt.wantMergePasses {
				t.Errorf("Stats().MergePasses = %d, want passes: %v", st.MergePasses, tt.wantMergePasses)
			}
			if budget := tt.opts.MemoryBytes; budget > 0 && st.PeakBufferBytes > budget {
				t.Errorf("Stats().PeakBufferBytes = %d, want ≤ %d", st.PeakBufferBytes, budget)
			}
		})
	}
}

func TestAddInvalid(t *testing.T) {
	tests := []struct {
		name    string
		key     []byte
		line    int64
		wantErr error
	}{
		{name: "empty key", key: nil, line: 1, wantErr: keyset.ErrInvalidKey},
		{name: "key too long", key: bytes.Repeat([]byte("k"), keyset.MaxKeyBytes+1), line: 1, wantErr: keyset.ErrInvalidKey},
		{name: "line zero", key: []byte("k"), line: 0, wantErr: keyset.ErrInvalidLine},
		{name: "negative line", key: []byte("k"), line: -3, wantErr: keyset.ErrInvalidLine},
		{name: "longest key", key: bytes.Repeat([]byte("k"), keyset.MaxKeyBytes), line: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := keyset.New(keyset.Options{Dir: t.TempDir()})
			defer d.Close()
			if err := d.Add(tt.key, tt.line); !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Add() = %v, want %v", err, tt.wantErr)
			}
			// A rejected entry is not recorded and the Detector stays usable.
			if err := d.Add([]byte("other"), 2); err != nil {
				t.Fatalf("Add(other) = %v", err)
			}
			if err := d.Finish(); err != nil {
				t.Fatalf("Finish() = %v, want nil", err)
			}
		})
	}
}

// TestLinesOutOfOrder checks that the two smallest lines are reported
// whatever order the lines were added in.
func TestLinesOutOfOrder(t *testing.T) {
	for _, budget := range budgets {
		d := keyset.New(keyset.Options{Dir: t.TempDir(), MemoryBytes: budget})
		for _, line := range []int64{9, 30, 4, 12, 6} {
			if err := d.Add([]byte("k"), line); err != nil {
				t.Fatal(err)
			}
			if err := d.Add(fmt.Appendf(nil, "other-%d", line), line+100); err != nil {
				t.Fatal(err)
			}
		}
		want := keyset.DuplicateKeyError{Key: "k", FirstLine: 4, SecondLine: 6}
		var got *keyset.DuplicateKeyError
		if err := d.Finish(); !errors.As(err, &got) || *got != want {
			t.Errorf("memory=%d: Finish() = %v, want %v", budget, err, &want)
		}
	}
}

// TestAddCopiesKey reuses the caller's buffer between calls.
func TestAddCopiesKey(t *testing.T) {
	for _, budget := range budgets {
		d := keyset.New(keyset.Options{Dir: t.TempDir(), MemoryBytes: budget})
		buf := []byte("key-0")
		for i := range 10 {
			buf[4] = byte('0' + i)
			if err := d.Add(buf, int64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Finish(); err != nil {
			t.Errorf("memory=%d: Finish() = %v, want nil (keys were overwritten after Add?)", budget, err)
		}
	}
}

// TestTempFiles checks that Finish and Close leave Dir empty, whatever the
// result.
func TestTempFiles(t *testing.T) {
	tests := []struct {
		name    string
		keys    []string
		end     func(*keyset.Detector) error
		wantErr error
	}{
		{name: "finish unique", keys: numbered(200), end: (*keyset.Detector).Finish},
		{name: "finish duplicate", keys: append(numbered(200), "item-0001"), end: (*keyset.Detector).Finish, wantErr: keyset.ErrDuplicateKey},
		{name: "close without finish", keys: numbered(200), end: (*keyset.Detector).Close},
		{name: "finish then close", keys: numbered(200), end: func(d *keyset.Detector) error {
			if err := d.Finish(); err != nil {
				return err
			}
			return d.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d := keyset.New(keyset.Options{Dir: dir, MemoryBytes: 64, MaxMergeRuns: 4})
			for i, k := range tt.keys {
				if err := d.Add([]byte(k), int64(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			if n := countFiles(t, dir); n == 0 {
				t.Fatal("no run files before the end: the test spills nothing")
			}
			if err := tt.end(d); !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("end = %v, want %v", err, tt.wantErr)
			}
			if n := countFiles(t, dir); n != 0 {
				t.Fatalf("%d files left under Dir, want 0", n)
			}
			if err := d.Close(); err != nil {
				t.Fatalf("second Close() = %v, want nil", err)
			}
		})
	}
}

// countFiles counts the files and directories under dir.
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := -1 // dir itself
	err := filepath.WalkDir(dir, func(string, os.DirEntry, error) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAfterEnd(t *testing.T) {
	t.Run("finish", func(t *testing.T) {
		d := keyset.New(keyset.Options{Dir: t.TempDir()})
		for i, k := range []string{"a", "b", "a"} {
			if err := d.Add([]byte(k), int64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		first := d.Finish()
		if !errors.Is(first, keyset.ErrDuplicateKey) {
			t.Fatalf("Finish() = %v, want ErrDuplicateKey", first)
		}
		if err := d.Add([]byte("c"), 4); !errors.Is(err, keyset.ErrClosed) {
			t.Errorf("Add after Finish = %v, want ErrClosed", err)
		}
		if err := d.Finish(); err != first {
			t.Errorf("second Finish() = %v, want the first result %v", err, first)
		}
		if err := d.Close(); err != nil {
			t.Errorf("Close after Finish = %v, want nil", err)
		}
		if err := d.Finish(); err != first {
			t.Errorf("Finish after Close = %v, want the first result %v", err, first)
		}
	})
	t.Run("close", func(t *testing.T) {
		d := keyset.New(keyset.Options{Dir: t.TempDir()})
		if err := d.Add([]byte("a"), 1); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		if err := d.Add([]byte("b"), 2); !errors.Is(err, keyset.ErrClosed) {
			t.Errorf("Add after Close = %v, want ErrClosed", err)
		}
		if err := d.Finish(); !errors.Is(err, keyset.ErrClosed) {
			t.Errorf("Finish after Close = %v, want ErrClosed", err)
		}
	})
}

func TestIOErrors(t *testing.T) {
	t.Run("missing dir", func(t *testing.T) {
		d := keyset.New(keyset.Options{Dir: filepath.Join(t.TempDir(), "missing"), MemoryBytes: 64})
		defer d.Close()
		var err error
		for i := 1; err == nil && i <= 100; i++ {
			err = d.Add([]byte(fmt.Sprintf("key-%03d", i)), int64(i))
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Add = %v, want an error matching os.ErrNotExist", err)
		}
		if again := d.Add([]byte("more"), 101); again != err {
			t.Errorf("Add after an I/O error = %v, want the same error", again)
		}
		if fin := d.Finish(); fin != err || errors.Is(fin, keyset.ErrDuplicateKey) {
			t.Errorf("Finish() = %v, want the Add error %v", fin, err)
		}
	})
	t.Run("truncated run", func(t *testing.T) {
		for _, keep := range []float64{0, 0.5, 0.99} {
			dir := t.TempDir()
			d := keyset.New(keyset.Options{Dir: dir, MemoryBytes: 1024})
			for i, k := range numbered(300) {
				if err := d.Add([]byte(k), int64(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			runs, err := filepath.Glob(filepath.Join(dir, "*", "run-*"))
			if err != nil || len(runs) == 0 {
				t.Fatalf("no run files (%v)", err)
			}
			fi, err := os.Stat(runs[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(runs[0], int64(float64(fi.Size())*keep)); err != nil {
				t.Fatal(err)
			}
			if err := d.Finish(); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("keep %.0f%%: Finish() = %v, want io.ErrUnexpectedEOF", keep*100, err)
			}
			if n := countFiles(t, dir); n != 0 {
				t.Errorf("%d files left under Dir after a failed Finish, want 0", n)
			}
		}
	})
}

// TestMemoryBound checks the buffer's capacity against the budget for keys
// of mixed lengths.
func TestMemoryBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, budget := range []int{4096, 100_000, 1 << 20} {
		d := keyset.New(keyset.Options{Dir: t.TempDir(), MemoryBytes: budget})
		key := make([]byte, keyset.MaxKeyBytes)
		for i := range 5_000 {
			n := 1 + r.IntN(64)
			if i%100 == 0 {
				n = keyset.MaxKeyBytes
			}
			for j := range n {
				key[j] = byte('a' + r.IntN(26))
			}
			if err := d.Add(key[:n], int64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		_ = d.Finish() // random keys: a duplicate is possible and irrelevant here
		if st := d.Stats(); st.PeakBufferBytes > budget || (st.Runs > 0 && st.PeakBufferBytes < budget/2) {
			t.Errorf("memory=%d: PeakBufferBytes = %d, want within [budget/2, budget]", budget, st.PeakBufferBytes)
		}
	}
}

// TestAgainstMap compares Finish with a map of every key to its two smallest
// lines, on random keys from a small alphabet (so that prefixes and
// duplicates are common), for several budgets and merge widths.
func TestAgainstMap(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			againstMap(t, seed)
		})
	}
}

// againstMap runs one random case of TestAgainstMap.
func againstMap(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	n := 1 + r.IntN(1000)
	alphabet := "ab\x00\xff\xc3\xa9"[:1+r.IntN(6)] // bytes; "\xc3\xa9" is é
	maxLen := 1 + r.IntN(12)
	keys := make([]string, n)
	for i := range keys {
		b := make([]byte, 1+r.IntN(maxLen))
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		keys[i] = string(b)
	}
	switch r.IntN(3) {
	case 0: // no duplicate at all
		keys = unique(keys)
	case 1: // exactly one
		keys = unique(keys)
		keys = append(keys, keys[r.IntN(len(keys))])
	}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	want := reference(keys)

	for _, budget := range []int{0, 400, 4000} {
		for _, maxMerge := range []int{0, 3} {
			opts := keyset.Options{Dir: t.TempDir(), MemoryBytes: budget, MaxMergeRuns: maxMerge}
			_, err := detect(t, opts, keys)
			var got *keyset.DuplicateKeyError
			if errors.As(err, &got) != (want != nil) || (want != nil && *got != *want) || (want == nil && err != nil) {
				t.Fatalf("seed %d, %d keys, memory=%d, merge=%d: Finish() = %v, want %v", seed, n, budget, maxMerge, err, want)
			}
		}
	}
}

func unique(keys []string) []string {
	seen := make(map[string]bool, len(keys))
	out := keys[:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// reference finds the expected duplicate with a map: the smallest key seen
// twice, at its first two lines.
func reference(keys []string) *keyset.DuplicateKeyError {
	lines := make(map[string][]int64)
	for i, k := range keys {
		if len(lines[k]) < 2 {
			lines[k] = append(lines[k], int64(i+1))
		}
	}
	var want *keyset.DuplicateKeyError
	for k, l := range lines {
		if len(l) == 2 && (want == nil || k < want.Key) {
			want = &keyset.DuplicateKeyError{Key: k, FirstLine: l[0], SecondLine: l[1]}
		}
	}
	return want
}

func TestDuplicateKeyError(t *testing.T) {
	err := error(&keyset.DuplicateKeyError{Key: "abc", FirstLine: 3, SecondLine: 17})
	if got, want := err.Error(), `duplicate item key "abc" at lines 3 and 17`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("submit b1: %w", err)
	if !errors.Is(wrapped, keyset.ErrDuplicateKey) {
		t.Error("errors.Is(wrapped, ErrDuplicateKey) = false")
	}
	if errors.Is(wrapped, keyset.ErrInvalidKey) {
		t.Error("errors.Is(wrapped, ErrInvalidKey) = true")
	}
}

func BenchmarkDetector(b *testing.B) {
	const n = 100_000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "item-%010d", i)
	}
	r := rand.New(rand.NewPCG(1, 1))
	r.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })

	for _, budget := range []int{keyset.DefaultMemoryBytes, 1 << 20} {
		b.Run(fmt.Sprintf("keys=%d/memory=%dKiB", n, budget>>10), func(b *testing.B) {
			b.ReportAllocs()
			dir := b.TempDir()
			var st keyset.Stats
			for b.Loop() {
				d := keyset.New(keyset.Options{Dir: dir, MemoryBytes: budget})
				for i, k := range keys {
					if err := d.Add(k, int64(i+1)); err != nil {
						b.Fatal(err)
					}
				}
				if err := d.Finish(); err != nil {
					b.Fatal(err)
				}
				st = d.Stats()
			}
			b.ReportMetric(float64(st.Runs), "runs")
			b.ReportMetric(float64(st.PeakBufferBytes), "buffer-bytes")
			b.ReportMetric(float64(st.SpilledBytes), "spilled-bytes")
		})
	}
}

// Example shows submit's use: add every key with its line, then Finish.
func Example() {
	d := keyset.New(keyset.Options{}) // os.TempDir(), 32 MiB
	defer d.Close()
	for i, key := range []string{"item-01", "item-02", "item-03", "item-02"} {
		if err := d.Add([]byte(key), int64(i+1)); err != nil {
			fmt.Println(err)
			return
		}
	}
	err := d.Finish()
	var dup *keyset.DuplicateKeyError
	if errors.As(err, &dup) {
		fmt.Println(dup.Key, dup.FirstLine, dup.SecondLine)
	}
	fmt.Println(err)
	// Output:
	// item-02 2 4
	// duplicate item key "item-02" at lines 2 and 4
}

// fullDisk is a run file on a disk with *room bytes left; a write past
// them fails as a full disk does (ENOSPC).
type fullDisk struct {
	f    *os.File
	room *int
}

func (w *fullDisk) Write(p []byte) (int, error) {
	if len(p) > *w.room {
		n, _ := w.f.Write(p[:*w.room])
		*w.room = 0
		return n, &os.PathError{Op: "write", Path: w.f.Name(), Err: syscall.ENOSPC}
	}
	*w.room -= len(p)
	return w.f.Write(p)
}

func (w *fullDisk) Close() error { return w.f.Close() }

// fillAfter returns a CreateRun whose files together take room bytes
// before the disk is full (removed files give nothing back).
func fillAfter(room int) func(string) (io.WriteCloser, error) {
	return func(path string) (io.WriteCloser, error) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		return &fullDisk{f: f, room: &room}, nil
	}
}

// Temporary disk, point 5: a full disk while spilling (ENOSPC) is a
// *NoSpaceError matching ErrNoSpace — the class submit refuses as
// insufficient storage instead of calling it retryable — whether it
// happens in Add (a spill) or in Finish (an intermediate merge), and the
// run files are removed. Guards "a full /tmp is not retryable" (docs/design/submit.md
// "Memory, disk and time of submit").
func TestNoSpaceIsItsOwnClass(t *testing.T) {
	for _, tt := range []struct {
		name     string
		room     int
		maxMerge int
		inFinish bool
	}{
		{"first spill", 0, 0, false},
		{"a later spill", 300, 0, false},
		{"intermediate merge", -1, 2, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.room < 0 {
				// Room for every spill of Add, not for the merge after.
				d := keyset.New(keyset.Options{Dir: t.TempDir(), MemoryBytes: 256})
				for i := 1; i <= 200; i++ {
					if err := d.Add([]byte(fmt.Sprintf("key-%06d", i)), int64(i)); err != nil {
						t.Fatal(err)
					}
				}
				tt.room = int(d.Stats().SpilledBytes) + 10
				d.Close()
			}
			dir := t.TempDir()
			d := keyset.New(keyset.Options{Dir: dir, MemoryBytes: 256, MaxMergeRuns: tt.maxMerge, CreateRun: fillAfter(tt.room)})
			defer d.Close()
			var err error
			for i := 1; i <= 200 && err == nil; i++ {
				err = d.Add([]byte(fmt.Sprintf("key-%06d", i)), int64(i))
			}
			if tt.inFinish {
				if err != nil {
					t.Fatalf("Add: %v", err)
				}
				err = d.Finish()
			}
			var ns *keyset.NoSpaceError
			if !errors.As(err, &ns) || !errors.Is(err, keyset.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, keyset.ErrDuplicateKey) {
				t.Fatalf("err = %v, want a *NoSpaceError wrapping ENOSPC", err)
			}
			if ns.Dir != dir || ns.Keys == 0 {
				t.Errorf("NoSpaceError %+v, want Dir %s and the keys added", ns, dir)
			}
			if err2 := d.Add([]byte("again"), 1000); tt.inFinish != errors.Is(err2, keyset.ErrClosed) || !tt.inFinish && !errors.Is(err2, keyset.ErrNoSpace) {
				t.Errorf("Add after the full disk: %v", err2)
			}
			d.Close()
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Errorf("files left: %v", left)
			}
		})
	}
	// Other I/O errors keep their own class (a retried submit may succeed).
	d := keyset.New(keyset.Options{Dir: filepath.Join(t.TempDir(), "missing"), MemoryBytes: 64})
	defer d.Close()
	var err error
	for i := 1; i <= 100 && err == nil; i++ {
		err = d.Add([]byte(fmt.Sprintf("key-%06d", i)), int64(i))
	}
	if err == nil || errors.Is(err, keyset.ErrNoSpace) {
		t.Fatalf("missing dir: err = %v, want an I/O error that is not ErrNoSpace", err)
	}
}

// TestFinishAllReportsEveryDuplicate: every later line of every repeated
// key, in key byte order, with the key's first line, whether the entries
// stayed in memory or were spilled to runs.
func TestFinishAllReportsEveryDuplicate(t *testing.T) {
	for _, budget := range []int{0, 300} {
		d := keyset.New(keyset.Options{Dir: t.TempDir(), MemoryBytes: budget})
		keys := []string{"b", "a", "c", "b", "d", "a", "b"}
		for i, k := range keys {
			if err := d.Add([]byte(k), int64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 100 {
			if err := d.Add([]byte(fmt.Sprintf("u%03d", i)), int64(100+i)); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		if err := d.FinishAll(func(e *keyset.DuplicateKeyError) error {
			got = append(got, fmt.Sprintf("%s %d %d", e.Key, e.FirstLine, e.SecondLine))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := []string{"a 2 6", "b 1 4", "b 1 7"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("budget %d: got %v, want %v", budget, got, want)
		}
	}
}
