package source

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/api"
)

// gzipMagic opens every gzip member (RFC 1952 §2.3.1, ID1 ID2).
var gzipMagic = []byte{0x1f, 0x8b}

// IsGzip reports whether head, the first bytes of an object, opens a gzip
// stream (RFC 1952's magic 1F 8B). No JSON or CSV text starts with 0x1F, so
// the sniff cannot mistake a manifest for gzip.
func IsGzip(head []byte) bool { return bytes.HasPrefix(head, gzipMagic) }

// SourceText returns the text of a source object read from r, ready for
// ReadJSONL, ReadJSONArray or ReadCSV:
//
//   - a gzip stream (sniffed from its first two bytes, whatever the object's
//     name or Content-Encoding say; concatenated members are read as one) is
//     decompressed as it is read, so memory stays bounded by one line
//     whatever the object's size. A corrupt or truncated stream is an
//     *InputError whose reason says gzip; an error of r itself (a dropped
//     connection) is returned as it is, retryable.
//   - a UTF-8 byte-order mark is skipped.
//   - UTF-16 and UTF-32 (with a byte-order mark, or UTF-16 recognised by
//     its NUL bytes) are refused with an *InputError naming the encoding:
//     bulkrun reads UTF-8 only.
//
// The name and Content-Encoding of an object are hints for people only: an
// object named .gz or stored with Content-Encoding gzip whose bytes are not
// gzip (a transparent layer already decoded them) is read as it is.
func SourceText(r io.Reader) (io.Reader, error) {
	text, _, err := decodeSource(r)
	return text, err
}

// decodeSource is SourceText, also returning the gzip reader when the source
// is gzip (nil otherwise).
func decodeSource(r io.Reader) (*bufio.Reader, *gunzipReader, error) {
	src := &recordingReader{r: r}
	br := bufio.NewReaderSize(src, 64<<10)
	head, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	tr := br
	var gzr *gunzipReader
	if IsGzip(head) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			if src.err != nil {
				return nil, nil, src.err
			}
			return nil, nil, &api.InputError{Reason: "not a valid gzip stream (the object starts with the gzip magic bytes 1F 8B)", Err: err}
		}
		gzr = &gunzipReader{zr: zr, src: src}
		tr = bufio.NewReaderSize(gzr, 64<<10)
	}
	head, err = tr.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	if enc := foreignEncoding(head); enc != "" {
		return nil, nil, &api.InputError{Line: 1, Reason: fmt.Sprintf("the source is %s; bulkrun reads UTF-8 only: save or export it as UTF-8", enc)}
	}
	if bytes.HasPrefix(head, bom) {
		_, _ = tr.Discard(len(bom))
	}
	return tr, gzr, nil
}

// gzipCheckBytes is how far past a parse error in a gzip source the stream
// is read to tell a corrupt stream from a malformed file: corrupt deflate
// data can decode to garbage for a few bytes before the decoder notices.
const gzipCheckBytes = 1 << 20

// blameGzip returns the gzip error that explains parseErr, a refusal of
// text read from a gzip stream, when the stream turns out corrupt within
// gzipCheckBytes after it; else parseErr.
func blameGzip(parseErr error, text io.Reader, gzr *gunzipReader) error {
	if gzr == nil || !errors.Is(parseErr, api.ErrInvalid) {
		return parseErr
	}
	if gzr.failure == nil {
		_, _ = io.CopyN(io.Discard, text, gzipCheckBytes)
	}
	if gzr.failure != nil {
		return gzr.failure
	}
	return parseErr
}

// foreignEncoding names the encoding of text that opens with head when it
// is UTF-16 or UTF-32, or returns "".
func foreignEncoding(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte{0x00, 0x00, 0xFE, 0xFF}):
		return "UTF-32 (big-endian, byte-order mark 00 00 FE FF)"
	case bytes.HasPrefix(head, []byte{0xFF, 0xFE, 0x00, 0x00}):
		return "UTF-32 (little-endian, byte-order mark FF FE 00 00)"
	case bytes.HasPrefix(head, []byte{0xFE, 0xFF}):
		return "UTF-16 (big-endian, byte-order mark FE FF)"
	case bytes.HasPrefix(head, []byte{0xFF, 0xFE}):
		return "UTF-16 (little-endian, byte-order mark FF FE)"
	case len(head) >= 4 && head[0] != 0 && head[1] == 0 && head[2] != 0 && head[3] == 0:
		return "UTF-16 (little-endian, without a byte-order mark)"
	case len(head) >= 4 && head[0] == 0 && head[1] != 0 && head[2] == 0 && head[3] != 0:
		return "UTF-16 (big-endian, without a byte-order mark)"
	}
	return ""
}

// notUTF8 is the reason given for text that is not valid UTF-8: where, and
// what to do about it.
func notUTF8(what string, b []byte) string {
	at := 0
	for at < len(b) {
		r, n := utf8.DecodeRune(b[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	return fmt.Sprintf("%s is not valid UTF-8 (byte %d of it is %#02x); bulkrun reads UTF-8 only: save or export the file as UTF-8 (a file saved as Latin-1 or Windows-1252 is not)", what, at+1, b[min(at, len(b)-1)])
}

// recordingReader remembers the first error of the object's own reader
// (not io.EOF), so that a gzip error caused by a dropped connection is not
// mistaken for a corrupt stream.
type recordingReader struct {
	r   io.Reader
	err error
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && r.err == nil {
		r.err = err
	}
	return n, err
}

// gunzipReader turns the errors of a gzip stream into *InputError (the
// object is corrupt), and passes on the errors of the object's reader.
type gunzipReader struct {
	zr      *gzip.Reader
	src     *recordingReader
	out     int64           // decompressed bytes so far
	failure *api.InputError // the stream was found corrupt
}

func (g *gunzipReader) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	g.out += int64(n)
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	if g.src.err != nil {
		return n, g.src.err
	}
	if g.failure == nil {
		g.failure = &api.InputError{Reason: fmt.Sprintf("corrupt or truncated gzip stream after %d decompressed bytes", g.out), Err: err}
	}
	return n, g.failure
}

// passInputError returns err as it is when it is (or wraps) an *InputError
// from the source's reader, with line or element filled in when unknown;
// else nil.
func passInputError(err error, line, element int64) error {
	var ie *api.InputError
	if !errors.As(err, &ie) {
		return nil
	}
	if ie.Line == 0 && ie.Element == 0 {
		ie.Line, ie.Element = line, element
	}
	return ie
}
