package faultproxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"net/http"
	"sort"
	"strconv"
)

// Partial failures. A rule of kind partial turns a batch call into one
// where some entries were not done, the way AWS answers such calls:
//
//   - dynamodb BatchWriteItem: the chosen write requests are taken out of
//     the request before it reaches the emulator (so they are really not
//     written) and come back under UnprocessedItems.
//     https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html
//   - s3 DeleteObjects: the chosen keys are taken out of the request (so
//     they are really not deleted) and come back as <Error> elements
//     (default code InternalError).
//     https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html
//   - sqs SendMessageBatch (JSON protocol): the chosen entries are taken
//     out (so they are really not sent) and come back under Failed
//     (default code InternalError, SenderFault false).
//     https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
//
// Which entries fail is decided from the seed, each with probability
// Rule.Fraction, at least one. When every entry fails the proxy answers
// without calling the emulator.
var partialOps = map[string]bool{
	"dynamodb.BatchWriteItem": true,
	"s3.DeleteObjects":        true,
	"sqs.SendMessageBatch":    true,
}

// partial is a rewrite in progress: what was taken out of the request, to
// be put into the answer.
type partial struct {
	call Call
	rule Rule

	// dynamodb: the removed write requests by table.
	unprocessed map[string][]json.RawMessage
	// s3: the removed keys.
	keys []string
	// sqs: the removed entry ids.
	ids []string
	// none says nothing was left to send: answer without the emulator.
	none bool
}

// pick chooses which of n entries fail: each with probability fraction
// (drawn from u), at least one.
func pick(n int, fraction float64, u func(j int) float64) []bool {
	out := make([]bool, n)
	any := false
	for j := range n {
		if u(j) < fraction {
			out[j], any = true, true
		}
	}
	if !any && n > 0 {
		out[int(u(n)*float64(n))%n] = true
	}
	return out
}

// rewriteRequest takes the chosen entries out of body and returns the body
// to forward.
func (p *partial) rewriteRequest(body []byte, u func(j int) float64) ([]byte, error) {
	fraction := p.rule.Fraction
	if fraction == 0 {
		fraction = 0.5
	}
	switch p.call.String() {
	case "dynamodb.BatchWriteItem":
		var req map[string]json.RawMessage
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("BatchWriteItem request: %w", err)
		}
		var items map[string][]json.RawMessage
		if err := json.Unmarshal(req["RequestItems"], &items); err != nil {
			return nil, fmt.Errorf("BatchWriteItem RequestItems: %w", err)
		}
		tables := make([]string, 0, len(items))
		n := 0
		for t := range items {
			tables = append(tables, t)
			n += len(items[t])
		}
		sort.Strings(tables)
		fail := pick(n, fraction, u)
		kept := map[string][]json.RawMessage{}
		p.unprocessed = map[string][]json.RawMessage{}
		j := 0
		for _, t := range tables {
			for _, w := range items[t] {
				if fail[j] {
					p.unprocessed[t] = append(p.unprocessed[t], w)
				} else {
					kept[t] = append(kept[t], w)
				}
				j++
			}
		}
		p.none = len(kept) == 0
		req["RequestItems"], _ = json.Marshal(kept)
		return json.Marshal(req)
	case "sqs.SendMessageBatch":
		var req map[string]json.RawMessage
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("SendMessageBatch request: %w", err)
		}
		var entries []json.RawMessage
		if err := json.Unmarshal(req["Entries"], &entries); err != nil {
			return nil, fmt.Errorf("SendMessageBatch Entries: %w", err)
		}
		fail := pick(len(entries), fraction, u)
		kept := []json.RawMessage{}
		for j, e := range entries {
			if !fail[j] {
				kept = append(kept, e)
				continue
			}
			var id struct{ Id string }
			_ = json.Unmarshal(e, &id)
			p.ids = append(p.ids, id.Id)
		}
		p.none = len(kept) == 0
		req["Entries"], _ = json.Marshal(kept)
		return json.Marshal(req)
	case "s3.DeleteObjects":
		var req deleteRequest
		if err := xml.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("DeleteObjects request: %w", err)
		}
		fail := pick(len(req.Objects), fraction, u)
		kept := req.Objects[:0:0]
		for j, o := range req.Objects {
			if fail[j] {
				p.keys = append(p.keys, o.Key)
			} else {
				kept = append(kept, o)
			}
		}
		p.none = len(kept) == 0
		req.Objects = kept
		req.XMLName = xml.Name{Space: s3Namespace, Local: "Delete"}
		return xml.Marshal(req)
	}
	return nil, fmt.Errorf("no partial failure for %s", p.call)
}

const s3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/"

type deleteRequest struct {
	XMLName xml.Name       `xml:"Delete"`
	Objects []deleteObject `xml:"Object"`
	Quiet   bool           `xml:"Quiet,omitempty"`
}

type deleteObject struct {
	Key       string `xml:"Key"`
	VersionID string `xml:"VersionId,omitempty"`
}

// setBody replaces the request's body and the headers that describe it
// (length, payload hash, checksums it no longer matches).
func setBody(r *http.Request, body []byte) {
	r.Body = readCloser(body)
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.Header.Del("Content-Md5")
	for k := range r.Header {
		if len(k) > len("X-Amz-Checksum-") && http.CanonicalHeaderKey(k)[:len("X-Amz-Checksum-")] == "X-Amz-Checksum-" {
			r.Header.Del(k)
		}
	}
	r.Header.Del("X-Amz-Sdk-Checksum-Algorithm")
	if r.Header.Get("X-Amz-Content-Sha256") != "" {
		sum := sha256.Sum256(body)
		r.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	}
	// An answer the proxy rewrites must not come compressed.
	r.Header.Del("Accept-Encoding")
}

// rewriteResponse adds the removed entries to a successful answer (body
// nil: the emulator was not called) and returns the new body.
func (p *partial) rewriteResponse(body []byte) ([]byte, error) {
	code, message := p.rule.Code, p.rule.Message
	switch p.call.String() {
	case "dynamodb.BatchWriteItem":
		resp := map[string]json.RawMessage{}
		if body != nil {
			if err := json.Unmarshal(body, &resp); err != nil {
				return nil, fmt.Errorf("BatchWriteItem answer: %w", err)
			}
		}
		un := map[string][]json.RawMessage{}
		if raw, ok := resp["UnprocessedItems"]; ok {
			_ = json.Unmarshal(raw, &un)
		}
		for t, ws := range p.unprocessed {
			un[t] = append(un[t], ws...)
		}
		resp["UnprocessedItems"], _ = json.Marshal(un)
		return json.Marshal(resp)
	case "sqs.SendMessageBatch":
		resp := map[string]json.RawMessage{}
		if body != nil {
			if err := json.Unmarshal(body, &resp); err != nil {
				return nil, fmt.Errorf("SendMessageBatch answer: %w", err)
			}
		}
		type failed struct {
			Id          string
			SenderFault bool
			Code        string
			Message     string
		}
		var fs []failed
		if raw, ok := resp["Failed"]; ok {
			_ = json.Unmarshal(raw, &fs)
		}
		if code == "" {
			code = "InternalError"
		}
		if message == "" {
			message = "We encountered an internal error. Please try again."
		}
		for _, id := range p.ids {
			fs = append(fs, failed{Id: id, SenderFault: p.rule.SenderFault, Code: code, Message: message})
		}
		resp["Failed"], _ = json.Marshal(fs)
		if _, ok := resp["Successful"]; !ok {
			resp["Successful"] = json.RawMessage("[]")
		}
		return json.Marshal(resp)
	case "s3.DeleteObjects":
		if code == "" {
			code = "InternalError"
		}
		if message == "" {
			message = "We encountered an internal error. Please try again."
		}
		var errs bytes.Buffer
		for _, k := range p.keys {
			fmt.Fprintf(&errs, "<Error><Key>%s</Key><Code>%s</Code><Message>%s</Message></Error>", escapeXML(k), escapeXML(code), escapeXML(message))
		}
		if body == nil {
			return fmt.Appendf([]byte(xml.Header), `<DeleteResult xmlns="%s">%s</DeleteResult>`, s3Namespace, errs.Bytes()), nil
		}
		end := bytes.LastIndex(body, []byte("</DeleteResult>"))
		if end < 0 {
			if i := bytes.Index(body, []byte("<DeleteResult")); i >= 0 && bytes.HasSuffix(bytes.TrimSpace(body), []byte("/>")) {
				// <DeleteResult .../>: open it.
				t := bytes.TrimSpace(body)
				return append(append(append([]byte{}, t[:len(t)-2]...), '>'), append(errs.Bytes(), "</DeleteResult>"...)...), nil
			}
			return nil, fmt.Errorf("DeleteObjects answer without </DeleteResult>: %.200q", body)
		}
		out := append([]byte{}, body[:end]...)
		out = append(out, errs.Bytes()...)
		return append(out, body[end:]...), nil
	}
	return nil, fmt.Errorf("no partial failure for %s", p.call)
}

// contentType is the Content-Type of an answer the proxy writes itself.
func (p *partial) contentType() string {
	if p.call.Service == "s3" {
		return "application/xml"
	}
	return "application/x-amz-json-1.0"
}

// fixHeaders sets the headers that describe a rewritten answer body.
func fixHeaders(h http.Header, c Call, body []byte) {
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Del("Content-Encoding")
	h.Del("Content-Md5")
	if c.Service == "dynamodb" {
		h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	}
}
